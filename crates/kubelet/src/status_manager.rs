//! The pod status manager (upstream `status/status_manager.go`): merges the status the
//! kubelet computed with the conditions others own, and writes `pods/status` only when it
//! differs from what the API already has.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use kube::Api;
use kube::api::{Patch, PatchParams};
use parking_lot::Mutex;

use crate::metrics::KubeletMetrics;
use crate::sandbox::{name, namespace, uid};

/// The pod conditions the kubelet owns.
pub const KUBELET_CONDITIONS: &[&str] = &[
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
    crate::resize::RESIZE_PENDING,
    crate::resize::RESIZE_IN_PROGRESS,
];

/// The status to write: `new` (from the runtime) plus the conditions of `old` the kubelet
/// does not own (e.g. DisruptionTarget, readiness gates), and a PodScheduled=True when the
/// pod has none (a pod bound by `spec.nodeName` was scheduled by its creator, as upstream).
pub fn merge_status(old: Option<&PodStatus>, mut new: PodStatus) -> PodStatus {
    let mut conditions = new.conditions.take().unwrap_or_default();
    if !conditions.iter().any(|c| c.type_ == "PodScheduled") {
        let transition = new.start_time.clone();
        conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: transition,
            ..Default::default()
        });
    }
    for c in old
        .and_then(|o| o.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if !KUBELET_CONDITIONS.contains(&c.type_.as_str()) {
            conditions.push(c.clone());
        }
    }
    new.conditions = Some(conditions);
    if let Some(o) = old {
        if new.nominated_node_name.is_none() {
            new.nominated_node_name = o.nominated_node_name.clone();
        }
        // A terminated pod keeps the IPs it had (upstream keeps them once assigned).
        if new.pod_ips.is_none() && matches!(new.phase.as_deref(), Some("Succeeded" | "Failed")) {
            new.pod_ip = o.pod_ip.clone();
            new.pod_ips = o.pod_ips.clone();
        }
    }
    new
}

fn normalized(s: &PodStatus) -> serde_json::Value {
    let mut s = s.clone();
    if let Some(cs) = s.conditions.as_mut() {
        for c in cs.iter_mut() {
            c.last_probe_time = None;
        }
        cs.sort_by(|a, b| a.type_.cmp(&b.type_));
    }
    // Times go over the wire with second precision: compare them that way.
    serde_json::to_value(&s).unwrap_or_default()
}

/// Whether `new` says anything `old` does not (upstream `isPodStatusByKubeletEqual`:
/// condition order and probe times do not count).
pub fn status_changed(old: Option<&PodStatus>, new: &PodStatus) -> bool {
    match old {
        None => true,
        Some(o) => normalized(o) != normalized(new),
    }
}

/// Writes pod statuses, remembering per pod UID what it last wrote.
pub struct StatusManager {
    client: kube::Client,
    written: Mutex<HashMap<String, serde_json::Value>>,
    /// When a change not yet in the API was first found, by pod UID
    /// (`kubelet_pod_status_sync_duration_seconds` runs from there to the write).
    pending: Mutex<HashMap<String, Instant>>,
    metrics: Arc<KubeletMetrics>,
}

impl StatusManager {
    pub fn new(client: kube::Client, metrics: Arc<KubeletMetrics>) -> Self {
        StatusManager {
            client,
            written: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Writes `status` for `pod` if it differs from the pod's current API status (and from
    /// what this manager wrote last). Returns whether a write happened.
    pub async fn set(&self, pod: &Pod, status: PodStatus) -> Result<bool, kube::Error> {
        let merged = merge_status(pod.status.as_ref(), status);
        let key = uid(pod).to_owned();
        let norm = normalized(&merged);
        if !status_changed(pod.status.as_ref(), &merged)
            || self.written.lock().get(&key) == Some(&norm)
        {
            // Nothing left to write: a change found before is in the API (or undone).
            self.pending.lock().remove(&key);
            return Ok(false);
        }
        // A failed write leaves the change pending: the next one measures from here.
        let found = *self
            .pending
            .lock()
            .entry(key.clone())
            .or_insert_with(Instant::now);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace(pod));
        let patch = serde_json::json!({
            "metadata": {"uid": key},
            "status": merged,
        });
        api.patch_status(name(pod), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.pending.lock().remove(&key);
        self.metrics
            .observe_pod_status_sync(truncate_to_millis(found.elapsed()));
        // Upstream marks the pod running for the startup SLI once a status showing it
        // so has reached the API.
        self.metrics.pod_status_updated(&key, &merged);
        self.written.lock().insert(key, norm);
        Ok(true)
    }

    /// Forgets a pod (it left the node).
    pub fn forget(&self, pod_uid: &str) {
        self.written.lock().remove(pod_uid);
        self.pending.lock().remove(pod_uid);
    }
}

/// Upstream observes the sync duration truncated to the millisecond.
fn truncate_to_millis(d: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(d.as_millis().min(u128::from(u64::MAX)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodIP;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn cond(type_: &str, status: &str) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(t(5)),
            ..Default::default()
        }
    }

    fn status(phase: &str, conds: Vec<PodCondition>) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            conditions: Some(conds),
            start_time: Some(t(1)),
            pod_ip: Some("10.244.0.5".into()),
            pod_ips: Some(vec![PodIP {
                ip: "10.244.0.5".into(),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn merge_keeps_foreign_conditions_and_adds_scheduled() {
        let old = status(
            "Running",
            vec![cond("Ready", "True"), cond("DisruptionTarget", "True")],
        );
        let new = status("Running", vec![cond("Ready", "False")]);
        let m = merge_status(Some(&old), new);
        let types: Vec<_> = m
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            [
                ("Ready", "False"),
                ("PodScheduled", "True"),
                ("DisruptionTarget", "True")
            ]
        );
        // An existing PodScheduled is not duplicated.
        let m2 = merge_status(Some(&m), m.clone());
        assert_eq!(
            m2.conditions
                .unwrap()
                .iter()
                .filter(|c| c.type_ == "PodScheduled")
                .count(),
            1
        );
    }

    #[test]
    fn terminal_pod_keeps_ips() {
        let old = status("Running", vec![]);
        let mut new = status("Succeeded", vec![]);
        new.pod_ip = None;
        new.pod_ips = None;
        let m = merge_status(Some(&old), new);
        assert_eq!(m.pod_ip.as_deref(), Some("10.244.0.5"));
    }

    #[test]
    fn diff_ignores_order_probe_times_and_subsecond_times() {
        let a = status(
            "Running",
            vec![cond("Ready", "True"), cond("Initialized", "True")],
        );
        let mut b = status(
            "Running",
            vec![cond("Initialized", "True"), cond("Ready", "True")],
        );
        b.conditions.as_mut().unwrap()[0].last_probe_time = Some(t(99));
        assert!(!status_changed(Some(&a), &b));
        let mut c = a.clone();
        c.start_time = Some(Time(
            k8s_openapi::jiff::Timestamp::from_nanosecond(1_500_000_000).unwrap(),
        ));
        assert!(
            !status_changed(Some(&a), &c),
            "sub-second differences are not sent"
        );
        let d = status(
            "Running",
            vec![cond("Ready", "False"), cond("Initialized", "True")],
        );
        assert!(status_changed(Some(&a), &d));
        let mut e = a.clone();
        e.pod_ip = Some("10.244.0.6".into());
        assert!(status_changed(Some(&a), &e));
        assert!(status_changed(None, &a));
    }
}
