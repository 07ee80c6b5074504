//! PodDisruptionBudget helpers shared by the eviction subresource (server side) and
//! the disruption controller (client side): upstream's
//! `k8s.io/component-helpers/apps/poddisruptionbudget` (the `DisruptionAllowed`
//! condition) and `apimeta.SetStatusCondition`, plus the constants both sides agree on.
//! Pure: the current time is passed in.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The condition type the disruption controller maintains (`policy.DisruptionAllowedCondition`).
pub const DISRUPTION_ALLOWED_CONDITION: &str = "DisruptionAllowed";
/// Reason when the controller could not compute the budget (`policy.SyncFailedReason`).
pub const SYNC_FAILED_REASON: &str = "SyncFailed";
/// Reason when disruptions are allowed (`policy.SufficientPodsReason`).
pub const SUFFICIENT_PODS_REASON: &str = "SufficientPods";
/// Reason when no disruption is allowed (`policy.InsufficientPodsReason`).
pub const INSUFFICIENT_PODS_REASON: &str = "InsufficientPods";
/// `StatusCause` type of a refused eviction (`policyv1.DisruptionBudgetCause`).
pub const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";
/// The pod condition an eviction adds before deleting (`v1.DisruptionTarget`).
pub const DISRUPTION_TARGET_CONDITION: &str = "DisruptionTarget";
/// Upstream eviction's `MaxDisruptedPodSize`: more unconfirmed evictions are refused.
pub const MAX_DISRUPTED_POD_SIZE: usize = 2000;
/// How long an eviction recorded in `status.disruptedPods` is waited for before the
/// controller counts the pod again (upstream `DeletionTimeout`), in seconds.
pub const DELETION_TIMEOUT_SECS: i64 = 120;

/// `apimeta.SetStatusCondition`: adds `new` or updates the condition of its type;
/// `lastTransitionTime` moves to `now` only when the status changes (or is new).
/// Returns whether anything changed.
pub fn set_status_condition(
    conditions: &mut Vec<Condition>,
    new: Condition,
    now: Timestamp,
) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        let mut new = new;
        if new.last_transition_time.0 == Timestamp::UNIX_EPOCH {
            new.last_transition_time = Time(now);
        }
        conditions.push(new);
        return true;
    };
    let before = existing.clone();
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = if new.last_transition_time.0 == Timestamp::UNIX_EPOCH {
            Time(now)
        } else {
            new.last_transition_time
        };
    }
    existing.reason = new.reason;
    existing.message = new.message;
    existing.observed_generation = new.observed_generation;
    *existing != before
}

/// A condition with an unset transition time (filled in by [`set_status_condition`]).
fn condition(status: &str, reason: &str, message: String, observed: Option<i64>) -> Condition {
    Condition {
        type_: DISRUPTION_ALLOWED_CONDITION.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: observed,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// Upstream `UpdateDisruptionAllowedCondition`: True/SufficientPods when
/// `disruptionsAllowed > 0`, else False/InsufficientPods.
pub fn update_disruption_allowed_condition(pdb: &mut PodDisruptionBudget, now: Timestamp) {
    let status = pdb.status.get_or_insert_with(Default::default);
    let observed = status.observed_generation;
    let c = if status.disruptions_allowed > 0 {
        condition("True", SUFFICIENT_PODS_REASON, String::new(), observed)
    } else {
        condition("False", INSUFFICIENT_PODS_REASON, String::new(), observed)
    };
    set_status_condition(status.conditions.get_or_insert_with(Vec::new), c, now);
}

/// Upstream failSafe's condition: False/SyncFailed with the error as message.
pub fn set_sync_failed_condition(pdb: &mut PodDisruptionBudget, message: String, now: Timestamp) {
    let status = pdb.status.get_or_insert_with(Default::default);
    let c = condition(
        "False",
        SYNC_FAILED_REASON,
        message,
        status.observed_generation,
    );
    set_status_condition(status.conditions.get_or_insert_with(Vec::new), c, now);
}

/// Upstream `ConditionsAreUpToDate`: the condition exists, the status is of the
/// current generation and the condition agrees with `disruptionsAllowed`.
pub fn conditions_are_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = &pdb.status else {
        return false;
    };
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_ALLOWED_CONDITION)
    else {
        return false;
    };
    if status.observed_generation != pdb.metadata.generation {
        return false;
    }
    if status.disruptions_allowed > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS_REASON
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS_REASON
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pdb(allowed: i32, generation: i64, observed: i64) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "generation": generation},
            "spec": {},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 0, "desiredHealthy": 0,
                       "expectedPods": 0, "observedGeneration": observed}
        }))
        .unwrap()
    }

    #[test]
    fn condition_follows_disruptions_allowed_and_moves_time_on_status_change_only() {
        let t1 = ts("2024-01-01T00:00:00Z");
        let t2 = ts("2024-01-01T00:01:00Z");
        let mut p = pdb(2, 1, 1);
        assert!(!conditions_are_up_to_date(&p));
        update_disruption_allowed_condition(&mut p, t1);
        assert!(conditions_are_up_to_date(&p));
        let c = &p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "SufficientPods")
        );
        assert_eq!(c.last_transition_time.0, t1);
        assert_eq!(c.observed_generation, Some(1));

        // Same status later: the transition time stays.
        update_disruption_allowed_condition(&mut p, t2);
        let c = &p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(c.last_transition_time.0, t1);

        p.status.as_mut().unwrap().disruptions_allowed = 0;
        assert!(!conditions_are_up_to_date(&p));
        update_disruption_allowed_condition(&mut p, t2);
        let cs = p.status.as_ref().unwrap().conditions.as_ref().unwrap();
        assert_eq!(cs.len(), 1);
        assert_eq!(
            (cs[0].status.as_str(), cs[0].reason.as_str()),
            ("False", "InsufficientPods")
        );
        assert_eq!(cs[0].last_transition_time.0, t2);
        assert!(conditions_are_up_to_date(&p));

        // A newer generation is never up to date.
        p.metadata.generation = Some(2);
        assert!(!conditions_are_up_to_date(&p));
    }

    #[test]
    fn sync_failed_is_not_up_to_date() {
        let mut p = pdb(0, 1, 1);
        set_sync_failed_condition(
            &mut p,
            "found no controllers for pod \"x\"".into(),
            ts("2024-01-01T00:00:00Z"),
        );
        let c = &p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "SyncFailed")
        );
        assert_eq!(c.message, "found no controllers for pod \"x\"");
        assert!(!conditions_are_up_to_date(&p));
    }
}
