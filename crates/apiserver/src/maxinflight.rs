//! The max-in-flight filter (upstream `k8s.io/apiserver/pkg/server/filters/maxinflight.go`),
//! what limits concurrency when API Priority and Fairness is off
//! (`--enable-priority-and-fairness=false`): at most `--max-requests-inflight`
//! read-only requests (`get`, `list`, `watch`) and `--max-mutating-requests-inflight`
//! others run at once; a request beyond its kind's limit is refused at once with 429
//! and `Retry-After: 1`, never queued. A limit of 0 leaves its kind unlimited.
//! Long-running requests (watches, proxy, exec, attach, port-forward, logs) are not
//! counted, and members of `system:masters` are served even when their kind is full,
//! as upstream.
//!
//! A request holds its slot as long as a priority-and-fairness seat would be held: until
//! its response starts (the slot is dropped with the handler's future, so an error, a
//! panic or a client going away gives it back too).

use std::sync::Arc;

use ferrokube_auth::Attributes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Upstream's `user.SystemPrivilegedGroup`.
const SYSTEM_MASTERS: &str = "system:masters";

/// Upstream's `nonMutatingRequestVerbs`. Every other verb, including the lowercase
/// HTTP methods of non-resource requests other than `get`, counts as mutating.
pub(crate) fn is_mutating(verb: &str) -> bool {
    !matches!(verb, "get" | "list" | "watch")
}

/// The two limits, each `None` when it is 0 (unlimited).
pub(crate) struct MaxInFlight {
    read_only: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

/// What the filter decided for a request.
pub(crate) enum Admission {
    /// Not counted: long-running, or its kind has no limit.
    Unlimited,
    /// Run now; the slot (none for a `system:masters` request over the limit) is given
    /// back when this is dropped.
    Admitted(Option<OwnedSemaphorePermit>),
    Rejected,
}

impl MaxInFlight {
    /// `None` when both limits are 0: upstream then leaves the filter out.
    pub(crate) fn new(read_only: u32, mutating: u32) -> Option<MaxInFlight> {
        let limit = |n: u32| {
            let permits = usize::try_from(n).unwrap_or(Semaphore::MAX_PERMITS);
            (n > 0).then(|| Arc::new(Semaphore::new(permits.min(Semaphore::MAX_PERMITS))))
        };
        let filter = MaxInFlight {
            read_only: limit(read_only),
            mutating: limit(mutating),
        };
        (filter.read_only.is_some() || filter.mutating.is_some()).then_some(filter)
    }

    /// Takes a slot of the request's kind if one is free. Never waits: upstream's
    /// filter refuses rather than queues.
    pub(crate) fn admit(&self, attrs: &Attributes, long_running: bool) -> Admission {
        if long_running {
            return Admission::Unlimited;
        }
        let limit = if is_mutating(&attrs.verb) {
            &self.mutating
        } else {
            &self.read_only
        };
        let Some(limit) = limit else {
            return Admission::Unlimited;
        };
        match limit.clone().try_acquire_owned() {
            Ok(slot) => Admission::Admitted(Some(slot)),
            // A super-user or the loopback client always gets an answer (upstream's
            // reasoning); it runs beside the limit rather than taking a slot.
            Err(_) if attrs.user.groups.iter().any(|g| g == SYSTEM_MASTERS) => {
                Admission::Admitted(None)
            }
            Err(_) => Admission::Rejected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_auth::UserInfo;

    fn request(verb: &str, groups: &[&str]) -> Attributes {
        Attributes {
            user: UserInfo::new("someone", groups.iter().copied()),
            verb: verb.into(),
            resource: "configmaps".into(),
            resource_request: true,
            ..Attributes::default()
        }
    }

    fn admitted(a: &Admission) -> bool {
        matches!(a, Admission::Admitted(_))
    }

    #[test]
    fn verbs_are_read_only_or_mutating_as_upstream() {
        for verb in ["get", "list", "watch"] {
            assert!(!is_mutating(verb), "{verb}");
        }
        for verb in [
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
            "proxy",
            // Non-resource requests carry the lowercase HTTP method.
            "post",
            "put",
            "head",
        ] {
            assert!(is_mutating(verb), "{verb}");
        }
    }

    #[test]
    fn zero_limits_mean_unlimited() {
        assert!(MaxInFlight::new(0, 0).is_none());
        let only_reads = MaxInFlight::new(1, 0).expect("a read-only limit makes a filter");
        let creates: Vec<Admission> = (0..10)
            .map(|_| only_reads.admit(&request("create", &[]), false))
            .collect();
        assert!(creates.iter().all(|a| matches!(a, Admission::Unlimited)));
        let first = only_reads.admit(&request("get", &[]), false);
        assert!(admitted(&first));
        assert!(matches!(
            only_reads.admit(&request("list", &[]), false),
            Admission::Rejected
        ));
    }

    #[test]
    fn a_full_kind_refuses_until_a_slot_is_given_back() {
        let filter = MaxInFlight::new(1, 1).expect("limits make a filter");
        let create = filter.admit(&request("create", &[]), false);
        assert!(admitted(&create));
        assert!(matches!(
            filter.admit(&request("delete", &[]), false),
            Admission::Rejected
        ));
        // A refused request holds nothing: the next is refused the same way.
        assert!(matches!(
            filter.admit(&request("patch", &[]), false),
            Admission::Rejected
        ));
        // The other kind has its own limit.
        let get = filter.admit(&request("get", &[]), false);
        assert!(admitted(&get));
        // Long-running requests and system:masters pass a full kind.
        assert!(matches!(
            filter.admit(&request("watch", &[]), true),
            Admission::Unlimited
        ));
        assert!(matches!(
            filter.admit(&request("create", &["system:masters"]), false),
            Admission::Admitted(None)
        ));
        drop(create);
        let update = filter.admit(&request("update", &[]), false);
        assert!(matches!(update, Admission::Admitted(Some(_))));
    }

    #[tokio::test]
    async fn a_slot_is_given_back_when_its_request_is_cancelled_or_panics() {
        let filter = MaxInFlight::new(0, 1).expect("a mutating limit makes a filter");
        let filter = Arc::new(filter);
        // A handler that never finishes, dropped as hyper drops the future of a
        // request whose client went away.
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let held = tokio::spawn({
            let filter = filter.clone();
            async move {
                let _slot = filter.admit(&request("create", &[]), false);
                let _ = started_tx.send(());
                std::future::pending::<()>().await;
            }
        });
        let _ = started_rx.await;
        assert!(matches!(
            filter.admit(&request("create", &[]), false),
            Admission::Rejected
        ));
        held.abort();
        let _ = held.await;
        let after_cancel = filter.admit(&request("create", &[]), false);
        assert!(matches!(after_cancel, Admission::Admitted(Some(_))));
        drop(after_cancel);
        // A handler that panics while holding the slot.
        let panicked = tokio::spawn({
            let filter = filter.clone();
            async move {
                let _slot = filter.admit(&request("create", &[]), false);
                panic!("handler bug");
            }
        });
        assert!(panicked.await.is_err());
        assert!(matches!(
            filter.admit(&request("create", &[]), false),
            Admission::Admitted(Some(_))
        ));
    }
}
