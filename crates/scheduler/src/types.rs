//! Pod information precomputed once per pod (`framework.PodInfo`,
//! `framework.QueuedPodInfo`) and the API helpers the plugins share: toleration and
//! node-selector matching, affinity terms.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use ferrokube_apimachinery::labels::Selector;
use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm, Taint, Toleration};

use crate::resource::{PodRequestsOptions, Resource, pod_requests};

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

pub fn pod_priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("")
}

pub fn pod_node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

pub fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

pub fn labels_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    meta.labels.as_ref().unwrap_or(&EMPTY)
}

/// An affinity term with its selector and namespaces resolved
/// (`framework.AffinityTerm`).
#[derive(Debug, Clone)]
pub struct AffinityTerm {
    pub namespaces: HashSet<String>,
    /// `Some` when the term has a namespaceSelector: namespaces whose labels it matches
    /// also count.
    pub namespace_selector: Option<Selector>,
    pub selector: Selector,
    pub topology_key: String,
}

impl AffinityTerm {
    /// Whether `pod` (whose namespace has `ns_labels`) matches this term.
    pub fn matches(&self, pod: &Pod, ns_labels: Option<&BTreeMap<String, String>>) -> bool {
        let ns = pod_namespace(pod);
        let ns_ok = self.namespaces.contains(ns)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|sel| ns_labels.is_some_and(|l| sel.matches(l)));
        ns_ok && self.selector.matches(labels_of(&pod.metadata))
    }

    fn new(pod: &Pod, term: &PodAffinityTerm) -> AffinityTerm {
        let mut namespaces: HashSet<String> = term.namespaces.iter().flatten().cloned().collect();
        let namespace_selector = term
            .namespace_selector
            .as_ref()
            .map(|s| Selector::from_label_selector(s).unwrap_or_else(|_| Selector::nothing()));
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.insert(pod_namespace(pod).to_string());
        }
        let mut selector = match term.label_selector.as_ref() {
            Some(ls) => Selector::from_label_selector(ls).unwrap_or_else(|_| Selector::nothing()),
            None => Selector::nothing(),
        };
        // matchLabelKeys / mismatchLabelKeys merge the incoming pod's label values.
        if term.label_selector.is_some() {
            let labels = labels_of(&pod.metadata);
            for k in term.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(k)
                    && let Ok(r) = ferrokube_apimachinery::labels::Requirement::new(
                        k,
                        ferrokube_apimachinery::labels::Operator::In,
                        vec![v.clone()],
                    )
                {
                    selector = selector.with_requirement(r);
                }
            }
            for k in term.mismatch_label_keys.iter().flatten() {
                if let Some(v) = labels.get(k)
                    && let Ok(r) = ferrokube_apimachinery::labels::Requirement::new(
                        k,
                        ferrokube_apimachinery::labels::Operator::NotIn,
                        vec![v.clone()],
                    )
                {
                    selector = selector.with_requirement(r);
                }
            }
        }
        AffinityTerm {
            namespaces,
            namespace_selector,
            selector,
            topology_key: term.topology_key.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WeightedAffinityTerm {
    pub term: AffinityTerm,
    pub weight: i32,
}

/// `framework.PodInfo`: a pod plus what the plugins would otherwise recompute.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    /// `PodRequests` as used by filters.
    pub requests: Resource,
    /// `PodRequests` with the non-zero cpu/memory defaults, as used by scoring.
    pub non_zero_requests: Resource,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let aff = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let pa = aff.and_then(|a| a.pod_affinity.as_ref());
        let paa = aff.and_then(|a| a.pod_anti_affinity.as_ref());
        let req = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .map(|t| AffinityTerm::new(&pod, t))
                .collect()
        };
        let pref = |terms: Option<&Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>| {
            terms
                .into_iter()
                .flatten()
                .filter(|t| t.weight != 0)
                .map(|t| WeightedAffinityTerm {
                    term: AffinityTerm::new(&pod, &t.pod_affinity_term),
                    weight: t.weight,
                })
                .collect::<Vec<_>>()
        };
        PodInfo {
            required_affinity: req(pa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            required_anti_affinity: req(paa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_affinity: pref(pa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_anti_affinity: pref(paa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            requests: pod_requests(&pod, PodRequestsOptions::default()),
            non_zero_requests: pod_requests(
                &pod,
                PodRequestsOptions {
                    non_zero_defaults: true,
                },
            ),
            pod,
        }
    }

    pub fn has_affinity(&self) -> bool {
        !(self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty())
    }

    pub fn key(&self) -> String {
        pod_key(&self.pod)
    }

    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or("")
    }
}

/// `framework.QueuedPodInfo`: a pod in the scheduling queue.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    pub pod_info: Arc<PodInfo>,
    /// When the pod was last added to the queue.
    pub timestamp: Instant,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the pod was first added (for the e2e latency metric).
    pub initial_attempt_timestamp: Option<Instant>,
    /// Plugins that rejected the pod in its last attempt (Filter, PreFilter, ...).
    pub unschedulable_plugins: HashSet<String>,
    /// Plugins that asked to wait (Permit/PreEnqueue) in its last attempt.
    pub pending_plugins: HashSet<String>,
    /// Rejected by a PreEnqueue plugin (scheduling gates).
    pub gated: bool,
    /// The profile-chosen plugin that gated the pod.
    pub gating_plugin: Option<String>,
}

impl QueuedPodInfo {
    pub fn new(pod: Arc<Pod>, now: Instant) -> QueuedPodInfo {
        QueuedPodInfo {
            pod_info: Arc::new(PodInfo::new(pod)),
            timestamp: now,
            attempts: 0,
            initial_attempt_timestamp: None,
            unschedulable_plugins: HashSet::new(),
            pending_plugins: HashSet::new(),
            gated: false,
            gating_plugin: None,
        }
    }

    pub fn pod(&self) -> &Pod {
        &self.pod_info.pod
    }
}

/// `v1helper.TolerationsTolerateTaint`.
pub fn tolerates_taint(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| toleration_tolerates(t, taint))
}

/// `Toleration.ToleratesTaint`.
pub fn toleration_tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty())
        && e != taint.effect
    {
        return false;
    }
    if let Some(k) = t.key.as_deref().filter(|k| !k.is_empty())
        && k != taint.key
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

pub fn pod_tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

/// The first taint (of the given effects) none of the tolerations tolerate.
pub fn find_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    effects: &[&str],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .find(|t| !tolerates_taint(tolerations, t))
}

pub use ferrokube_api::nodeaffinity::{node_selector_matches, node_selector_term_matches};

/// `RequiredNodeAffinity.Match`: the pod's `nodeSelector` and required node affinity.
pub fn pod_matches_node_selector_and_affinity(pod: &Pod, node: &Node) -> bool {
    pod.spec
        .as_ref()
        .is_none_or(|spec| ferrokube_api::nodeaffinity::pod_spec_matches_node(spec, node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tolerations() {
        let taint: Taint =
            serde_json::from_value(json!({"key": "k", "value": "v", "effect": "NoSchedule"}))
                .unwrap();
        let cases = [
            (
                json!({"key": "k", "value": "v", "effect": "NoSchedule"}),
                true,
            ),
            (json!({"key": "k", "operator": "Equal", "value": "v"}), true),
            (json!({"key": "k", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"key": "k", "value": "w"}), false),
            (
                json!({"key": "k", "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
            (json!({"key": "other", "operator": "Exists"}), false),
        ];
        for (t, want) in cases {
            let tol: Toleration = serde_json::from_value(t.clone()).unwrap();
            assert_eq!(toleration_tolerates(&tol, &taint), want, "{t}");
        }
    }
}
