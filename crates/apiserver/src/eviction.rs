//! The `pods/eviction` subresource honouring PodDisruptionBudgets (upstream
//! `pkg/registry/core/pod/storage/eviction.go`).
//!
//! A pod that cannot count towards a budget (terminal, pending or already deleting) is
//! deleted at once. Otherwise the one PodDisruptionBudget selecting it must allow a
//! disruption: the handler decrements `status.disruptionsAllowed` and records the pod
//! in `status.disruptedPods` (a compare-and-swap on the budget's resourceVersion, so
//! two evictions never spend one disruption twice), then marks the pod with the
//! `DisruptionTarget` condition and deletes it. A spent budget answers 429 with
//! upstream's message, which `kubectl drain` retries; several budgets answer 500.
//! Budgets are read straight from the registry (upstream uses a loopback client), so
//! the caller needs no rights on them.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrokube_api::pdb;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::labels::Selector;
use ferrokube_registry::store::Store;
use ferrokube_registry::{DeleteOptions, ListParams, Part, PatchType, UpdateInput, WriteOptions};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// Attempts of each read-modify-write against concurrent writers (upstream
/// `EvictionsRetry`: 20 steps).
const RETRIES: usize = 20;

/// The message of every refused eviction, verbatim from upstream.
pub(crate) const BUDGET_VIOLATION: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";

/// What an eviction answers when it does not fail: a `Status` and its HTTP code.
#[derive(Debug)]
pub(crate) struct Evicted {
    pub code: u16,
    pub status: Value,
}

impl Evicted {
    fn success() -> Self {
        Evicted {
            code: 201,
            status: json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Success", "code": 201}),
        }
    }
}

/// Evicts `ns/name`. `eviction` is the decoded `policy/v1` Eviction body and
/// `opts` its `deleteOptions` (with the query's).
pub(crate) async fn evict(
    pods: &Store,
    pdbs: Option<&Arc<Store>>,
    ns: &str,
    name: &str,
    eviction: &Value,
    opts: DeleteOptions,
) -> Result<Evicted, ApiError> {
    if let Some(body_name) = eviction["metadata"]["name"].as_str()
        && !body_name.is_empty()
        && body_name != name
    {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let caller_set_rv = opts.precondition_resource_version.is_some();

    // Pods that cannot count towards a budget go at once. A conflict (the pod changed
    // since it was read) is retried unless the caller pinned a resourceVersion.
    let mut attempt = 0;
    let pod = loop {
        attempt += 1;
        let pod = read_pod(pods, ns, name).await?;
        if !can_ignore_pdb(&pod) {
            break pod;
        }
        let mut o = opts.clone();
        if should_enforce_resource_version(&pod) && !caller_set_rv {
            o.precondition_resource_version = pod.metadata.resource_version.clone();
        }
        match add_condition_and_delete(pods, ns, name, o).await {
            Ok(()) => return Ok(Evicted::success()),
            Err(e) if e.code == 409 && !caller_set_rv && attempt < RETRIES => continue,
            Err(e) => return Err(e),
        }
    };

    let matching = match pdbs {
        Some(store) => budgets_for(store, ns, &pod).await?,
        None => Vec::new(),
    };
    if matching.len() > 1 {
        return Ok(Evicted {
            code: 500,
            status: json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "code": 500,
                "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}),
        });
    }
    let mut delete_opts = opts.clone();
    let mut budget_name = None;
    if let (Some(budget), Some(store)) = (matching.into_iter().next(), pdbs) {
        let status = budget.status.clone().unwrap_or_default();
        budget_name = budget.metadata.name.clone();
        let unhealthy_always_allowed = budget
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
            == Some("AlwaysAllow");
        let ready = is_pod_ready(&pod);
        if (!ready
            && status.current_healthy >= status.desired_healthy
            && status.desired_healthy > 0)
            || (unhealthy_always_allowed && !ready)
        {
            // An unready pod does not count as healthy: it may go without spending a
            // disruption, as long as it does not turn ready meanwhile.
            if !caller_set_rv {
                delete_opts.precondition_resource_version = pod.metadata.resource_version.clone();
            }
        } else {
            spend_disruption(store, ns, name, budget, opts.dry_run).await?;
        }
    }
    match add_condition_and_delete(pods, ns, name, delete_opts).await {
        Ok(()) => Ok(Evicted::success()),
        // The unready pod changed (maybe became ready) since the budget was checked.
        Err(e) if e.code == 409 && !caller_set_rv && budget_name.is_some() => {
            Err(too_many_requests(vec![]))
        }
        Err(e) => Err(e),
    }
}

async fn read_pod(pods: &Store, ns: &str, name: &str) -> Result<Pod, ApiError> {
    let v = pods.get(Some(ns), name).await?;
    serde_json::from_value(v).map_err(ApiError::internal)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Upstream `canIgnorePDB`: terminal, pending and deleting pods disrupt nothing.
fn can_ignore_pdb(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending")
        || pod.metadata.deletion_timestamp.is_some()
}

/// Upstream `shouldEnforceResourceVersion`: a pending pod must not turn ready (and
/// count towards a budget) between the check and the delete.
fn should_enforce_resource_version(pod: &Pod) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && pod.metadata.deletion_timestamp.is_none()
}

fn is_pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The budgets of the pod's namespace whose selector matches it. A missing, empty or
/// invalid selector matches nothing here (upstream `getPodDisruptionBudgets`).
async fn budgets_for(
    store: &Store,
    ns: &str,
    pod: &Pod,
) -> Result<Vec<PodDisruptionBudget>, ApiError> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let listed = store.list(Some(ns), &ListParams::default()).await?;
    let mut out = Vec::new();
    for item in listed.items {
        let Ok(budget) = serde_json::from_value::<PodDisruptionBudget>((*item).clone()) else {
            continue;
        };
        let Some(sel) = budget.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        let Ok(sel) = Selector::from_label_selector(sel) else {
            continue;
        };
        if sel.is_empty() || !sel.matches(&labels) {
            continue;
        }
        out.push(budget);
    }
    Ok(out)
}

/// 429 with upstream's message and a `DisruptionBudget` cause when one is known.
fn too_many_requests(causes: Vec<StatusCause>) -> ApiError {
    let mut e = ApiError::too_many_requests(BUDGET_VIOLATION, 0);
    if !causes.is_empty() {
        e.details = Some(Box::new(StatusDetails {
            causes: Some(causes),
            ..Default::default()
        }));
    }
    e
}

fn budget_cause(message: String) -> StatusCause {
    StatusCause {
        reason: Some(pdb::DISRUPTION_BUDGET_CAUSE.into()),
        message: Some(message),
        field: None,
    }
}

/// Upstream `checkAndDecrement` inside `RetryOnConflict`: spends one disruption of
/// `budget` on `pod` (re-reading the budget after a conflict).
async fn spend_disruption(
    store: &Store,
    ns: &str,
    pod: &str,
    mut budget: PodDisruptionBudget,
    dry_run: bool,
) -> Result<(), ApiError> {
    let name = budget.metadata.name.clone().unwrap_or_default();
    for attempt in 1..=RETRIES {
        if attempt > 1 {
            let v = store.get(Some(ns), &name).await?;
            budget = serde_json::from_value(v).map_err(ApiError::internal)?;
        }
        let updated = decremented(budget.clone(), pod, Timestamp::now())?;
        if dry_run {
            return Ok(());
        }
        let v = serde_json::to_value(&updated).map_err(ApiError::internal)?;
        match store
            .update(
                Some(ns),
                &name,
                UpdateInput::Replace(v),
                Part::Status,
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::timeout(
        format!("couldn't update PodDisruptionBudget {name:?} due to conflicts"),
        10,
    ))
}

/// The budget after spending one disruption on `pod` at `now`, or the refusal.
fn decremented(
    mut budget: PodDisruptionBudget,
    pod: &str,
    now: Timestamp,
) -> Result<PodDisruptionBudget, ApiError> {
    let name = budget.metadata.name.clone().unwrap_or_default();
    let status = budget.status.get_or_insert_with(Default::default);
    if status.observed_generation.unwrap_or(0) < budget.metadata.generation.unwrap_or(0) {
        return Err(too_many_requests(vec![budget_cause(format!(
            "The disruption budget {name} is still being processed by the server."
        ))]));
    }
    if status.disruptions_allowed < 0 {
        return Err(ApiError::forbidden(
            "policy",
            "poddisruptionbudget",
            &name,
            "pdb disruptions allowed is negative",
        ));
    }
    if status.disrupted_pods.as_ref().map_or(0, BTreeMap::len) > pdb::MAX_DISRUPTED_POD_SIZE {
        return Err(ApiError::forbidden(
            "policy",
            "poddisruptionbudget",
            &name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if status.disruptions_allowed == 0 {
        return Err(too_many_requests(vec![budget_cause(format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            status.desired_healthy, status.current_healthy
        ))]));
    }
    status.disruptions_allowed -= 1;
    status
        .disrupted_pods
        .get_or_insert_with(BTreeMap::new)
        .insert(pod.to_string(), Time(now));
    if status.disruptions_allowed == 0 {
        pdb::update_disruption_allowed_condition(&mut budget, now);
    }
    Ok(budget)
}

/// Upstream `addConditionAndDeletePod`: the `DisruptionTarget` condition on the
/// latest pod (checked against the preconditions), then the delete.
async fn add_condition_and_delete(
    pods: &Store,
    ns: &str,
    name: &str,
    mut opts: DeleteOptions,
) -> Result<(), ApiError> {
    if !opts.dry_run {
        let latest = read_pod(pods, ns, name).await?;
        let uid = latest.metadata.uid.clone().unwrap_or_default();
        let rv = latest.metadata.resource_version.clone().unwrap_or_default();
        if let Some(want) = &opts.precondition_uid
            && !want.is_empty()
            && *want != uid
        {
            return Err(ApiError::conflict(
                "",
                "Pod",
                name,
                format!(
                    "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
                ),
            ));
        }
        if let Some(want) = &opts.precondition_resource_version
            && !want.is_empty()
            && *want != rv
        {
            return Err(ApiError::conflict(
                "",
                "Pod",
                name,
                format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified"
                ),
            ));
        }
        // Upstream `UpdatePodCondition` keeps the transition time of an unchanged status.
        let since = latest
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == pdb::DISRUPTION_TARGET_CONDITION && c.status == "True")
            })
            .and_then(|c| c.last_transition_time.clone())
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        // The stored resourceVersion pins the patch to the pod just checked.
        let patch = json!({
            "metadata": {"resourceVersion": rv},
            "status": {"conditions": [{
                "type": pdb::DISRUPTION_TARGET_CONDITION, "status": "True",
                "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
                "lastTransitionTime": since.to_string(),
            }]}
        });
        let w = pods
            .update(
                Some(ns),
                name,
                UpdateInput::Patch(PatchType::StrategicMerge, patch),
                Part::Status,
                &WriteOptions::default(),
            )
            .await?;
        if opts.precondition_resource_version.is_some() {
            // The condition write moved the resourceVersion: pin the delete to it.
            opts.precondition_resource_version = w.object["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string);
        }
    }
    pods.delete(Some(ns), name, &opts).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(v: Value) -> PodDisruptionBudget {
        serde_json::from_value(v).unwrap()
    }

    fn now() -> Timestamp {
        "2024-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn decrement_spends_one_disruption_and_records_the_pod() {
        let b = budget(json!({"metadata": {"name": "b", "generation": 1},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                       "expectedPods": 3, "observedGeneration": 1}}));
        let b = decremented(b, "p1", now()).unwrap();
        let st = b.status.unwrap();
        assert_eq!(st.disruptions_allowed, 0);
        assert_eq!(st.disrupted_pods.unwrap()["p1"].0, now());
        let c = &st.conditions.unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str()),
            ("DisruptionAllowed", "False")
        );
        assert_eq!(c.reason, "InsufficientPods");
    }

    #[test]
    fn refusals_as_upstream() {
        let spent = budget(json!({"metadata": {"name": "b", "generation": 1},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2,
                       "expectedPods": 2, "observedGeneration": 1}}));
        let e = decremented(spent, "p", now()).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
        assert_eq!(e.message, BUDGET_VIOLATION);
        let cause = &e.details.unwrap().causes.unwrap()[0];
        assert_eq!(cause.reason.as_deref(), Some("DisruptionBudget"));
        assert_eq!(
            cause.message.as_deref(),
            Some("The disruption budget b needs 2 healthy pods and has 2 currently")
        );

        let unobserved = budget(json!({"metadata": {"name": "b", "generation": 2},
            "status": {"disruptionsAllowed": 3, "currentHealthy": 0, "desiredHealthy": 0,
                       "expectedPods": 0, "observedGeneration": 1}}));
        let e = decremented(unobserved, "p", now()).unwrap_err();
        assert_eq!(e.code, 429);
        assert_eq!(
            e.details.unwrap().causes.unwrap()[0].message.as_deref(),
            Some("The disruption budget b is still being processed by the server.")
        );

        let negative = budget(json!({"metadata": {"name": "b"},
            "status": {"disruptionsAllowed": -1, "currentHealthy": 0, "desiredHealthy": 0,
                       "expectedPods": 0}}));
        let e = decremented(negative, "p", now()).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "poddisruptionbudget.policy \"b\" is forbidden: pdb disruptions allowed is negative"
        );
    }

    #[test]
    fn which_pods_skip_the_budget() {
        let pod = |phase: &str, deleting: bool| -> Pod {
            let mut v = json!({"metadata": {"name": "p"}, "status": {"phase": phase}});
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
            }
            serde_json::from_value(v).unwrap()
        };
        assert!(can_ignore_pdb(&pod("Succeeded", false)));
        assert!(can_ignore_pdb(&pod("Failed", false)));
        assert!(can_ignore_pdb(&pod("Pending", false)));
        assert!(can_ignore_pdb(&pod("Running", true)));
        assert!(!can_ignore_pdb(&pod("Running", false)));
        assert!(should_enforce_resource_version(&pod("Pending", false)));
        assert!(!should_enforce_resource_version(&pod("Failed", false)));
        assert!(!should_enforce_resource_version(&pod("Running", true)));
    }
}
