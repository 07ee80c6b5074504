//! The TTL-after-finished controller (upstream `pkg/controller/ttlafterfinished`):
//! a Job that finished (condition `Complete` or `Failed` true) and sets
//! `spec.ttlSecondsAfterFinished` is deleted, with foreground propagation, that many
//! seconds after it finished.
//!
//! Pure part: [`time_left`]. The reconcile re-reads the Job before deleting it (its TTL
//! may have changed) and deletes with a UID precondition.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::job::finished_condition;
use crate::{Action, Controller, Error, Result, done_unless_failed, enqueue_live, split_key};

/// When the Job finished: the last transition of its true `Complete` or `Failed`
/// condition (upstream `jobFinishTime`).
fn finish_time(job: &Job) -> Option<Timestamp> {
    finished_condition(job)?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// How long until `job` is due for deletion: `None` when it is not (yet) subject to
/// its TTL (no TTL, not finished, being deleted); zero when it is due.
pub fn time_left(job: &Job, now: Timestamp) -> Option<Duration> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let finished = finish_time(job)?;
    let expire_ms = finished.as_millisecond() + i64::from(ttl) * 1000;
    let left_ms = (expire_ms - now.as_millisecond()).max(0);
    Some(Duration::from_millis(left_ms.unsigned_abs()))
}

/// The TTL-after-finished controller.
pub struct TtlAfterFinishedController {
    client: kube::Client,
    jobs: Store<Job>,
}

impl TtlAfterFinishedController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(TtlAfterFinishedController {
            client,
            jobs: factory.informer::<Job>().store(),
        })
    }
}

#[async_trait::async_trait]
impl Controller for TtlAfterFinishedController {
    fn name(&self) -> &'static str {
        "ttl_jobs_to_delete"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |job: &Job| {
            time_left(job, Timestamp::now()).is_some()
        });
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(cached) = self.jobs.get(key) else {
            return Ok(Action::Done);
        };
        match time_left(&cached, Timestamp::now()) {
            None => return Ok(Action::Done),
            Some(d) if !d.is_zero() => return Ok(Action::RequeueAfter(d)),
            Some(_) => {}
        }
        // The cache may be stale: decide again on a fresh copy, as upstream.
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let Some(fresh) = api.get_opt(name).await? else {
            return Ok(Action::Done);
        };
        match time_left(&fresh, Timestamp::now()) {
            None => return Ok(Action::Done),
            Some(d) if !d.is_zero() => return Ok(Action::RequeueAfter(d)),
            Some(_) => {}
        }
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: fresh.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        done_unless_failed(api.delete(name, &dp).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(ttl: Option<i32>, condition: Option<(&str, &str)>) -> Job {
        let mut v = json!({"metadata": {"name": "j", "namespace": "default"},
                           "spec": {"template": {"spec": {"containers": []}}}});
        if let Some(ttl) = ttl {
            v["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
        }
        if let Some((t, s)) = condition {
            v["status"] = json!({"conditions": [{"type": t, "status": s,
                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn due_ttl_after_the_finish() {
        let finished: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |s: i64| Timestamp::from_second(finished.as_second() + s).unwrap();
        let j = job(Some(100), Some(("Complete", "True")));
        assert_eq!(time_left(&j, at(40)), Some(Duration::from_secs(60)));
        assert_eq!(time_left(&j, at(100)), Some(Duration::ZERO));
        assert_eq!(time_left(&j, at(500)), Some(Duration::ZERO));
        let failed = job(Some(0), Some(("Failed", "True")));
        assert_eq!(time_left(&failed, at(0)), Some(Duration::ZERO));
        // No TTL, not finished, or a condition that is not true: not subject to it.
        assert_eq!(
            time_left(&job(None, Some(("Complete", "True"))), at(0)),
            None
        );
        assert_eq!(time_left(&job(Some(1), None), at(0)), None);
        assert_eq!(
            time_left(&job(Some(1), Some(("Complete", "False"))), at(0)),
            None
        );
        assert_eq!(
            time_left(&job(Some(1), Some(("Suspended", "True"))), at(0)),
            None
        );
    }
}
