//! The Job controller on the test apiserver, under its own ServiceAccount (so its
//! bootstrap role is exercised too). No kubelet runs: the test finishes the pods by
//! writing their status itself. Every wait is bounded.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::job::{COMPLETION_INDEX, INDEX_FAILURE_COUNT, JOB_TRACKING_FINALIZER};
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::util::has_finalizer;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn job(name: &str, spec: serde_json::Value) -> anyhow::Result<Job> {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}}
    });
    for (k, val) in spec.as_object().into_iter().flatten() {
        v["spec"][k] = val.clone();
    }
    Ok(serde_json::from_value(v)?)
}

/// The Job's pods (by the `job-name` label the apiserver adds to its template).
async fn pods_of(pods: &Api<Pod>, job: &str, n: usize) -> anyhow::Result<Vec<Pod>> {
    wait_for(20, &format!("{n} pods of job {job}"), || async {
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
        let list = pods.list(&lp).await?.items;
        Ok((list.len() == n).then_some(list))
    })
    .await
}

async fn finish(pods: &Api<Pod>, pod: &Pod, phase: &str) -> anyhow::Result<()> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = json!({"status": {"phase": phase}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

fn condition_of(job: &Job, type_: &str) -> Option<JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// The status and reason of the Job's condition of `type_`.
fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    condition_of(job, type_).map(|c| (c.status, c.reason.unwrap_or_default()))
}

fn condition_true_of(st: &k8s_openapi::api::batch::v1::JobStatus, type_: &str) -> bool {
    st.conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

async fn wait_condition(jobs: &Api<Job>, name: &str, type_: &str) -> anyhow::Result<Job> {
    wait_for(20, &format!("job {name} condition {type_}"), || async {
        let j = jobs.get(name).await?;
        Ok(condition(&j, type_)
            .is_some_and(|(s, _)| s == "True")
            .then_some(j))
    })
    .await
}

/// The Job controller alone, in a manager started as kube-controller-manager is.
/// The reasons of the events about Job `name`, in any order.
async fn event_reasons(c: &kube::Client, name: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    let lp = ListParams::default().fields(&format!(
        "involvedObject.kind=Job,involvedObject.name={name}"
    ));
    Ok(events
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect())
}

async fn start_job_controller(srv: &TestApiServer) -> anyhow::Result<(Manager, CancellationToken)> {
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["job".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    Ok((manager, cancel))
}

#[tokio::test]
async fn jobs_run_to_completion_or_failure() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let (manager, cancel) = start_job_controller(&srv).await?;
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();

    // Two completions, two at a time: both pods start; both succeeding completes it.
    jobs.create(
        &pp,
        &job("two", json!({"completions": 2, "parallelism": 2}))?,
    )
    .await?;
    let created = pods_of(&pods, "two", 2).await?;
    for p in &created {
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.controller), ("Job", Some(true)));
        assert!(p.metadata.name.as_deref().unwrap().starts_with("two-"));
    }
    let running = wait_for(20, "job two active=2", || async {
        let j = jobs.get("two").await?;
        let st = j.status.clone().unwrap_or_default();
        Ok((st.active == Some(2) && st.start_time.is_some()).then_some(j))
    })
    .await?;
    assert_eq!(condition(&running, "Complete"), None);
    for p in &created {
        finish(&pods, p, "Succeeded").await?;
    }
    let done = wait_condition(&jobs, "two", "Complete").await?;
    let st = done.status.unwrap();
    assert_eq!((st.succeeded, st.failed, st.active), (Some(2), None, None));
    assert!(st.completion_time.is_some());
    assert_eq!(
        condition(&jobs.get("two").await?, "SuccessCriteriaMet"),
        Some(("True".into(), "CompletionsReached".into()))
    );
    // No pod beyond the completions was made.
    assert_eq!(pods_of(&pods, "two", 2).await?.len(), 2);

    // One Completed event per Job, also for a single pod, whose finalizer's removal
    // starts a sync while the Job's cache still lacks the finish: only the sync whose
    // write records the finish reports it.
    jobs.create(&pp, &job("one", json!({}))?).await?;
    let p = pods_of(&pods, "one", 1).await?;
    finish(&pods, &p[0], "Succeeded").await?;
    wait_condition(&jobs, "one", "Complete").await?;
    for name in ["two", "one"] {
        wait_for(20, "a Completed event", || async {
            let reasons = event_reasons(&c, name).await?;
            Ok(reasons.iter().any(|r| r == "Completed").then_some(()))
        })
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in ["two", "one"] {
        let reasons = event_reasons(&c, name).await?;
        assert_eq!(
            reasons.iter().filter(|r| *r == "Completed").count(),
            1,
            "events about job {name}: {reasons:?}"
        );
    }

    // backoffLimit 0: the first failure fails the Job.
    jobs.create(&pp, &job("fails", json!({"backoffLimit": 0}))?)
        .await?;
    let p = pods_of(&pods, "fails", 1).await?;
    finish(&pods, &p[0], "Failed").await?;
    let failed = wait_condition(&jobs, "fails", "Failed").await?;
    assert_eq!(
        condition(&failed, "Failed"),
        Some(("True".into(), "BackoffLimitExceeded".into()))
    );
    assert_eq!(failed.status.unwrap().failed, Some(1));

    // podFailurePolicy: an ignored failure is not counted (backoffLimit 0 would fail the
    // Job otherwise) and the pod is replaced; a FailJob exit code fails the Job at once,
    // with the rule's message, and the running pod is stopped.
    let policy = json!({"backoffLimit": 0, "parallelism": 2, "completions": 2,
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]}}]}});
    jobs.create(&pp, &job("policy", policy)?).await?;
    let first = pods_of(&pods, "policy", 2).await?;
    let evicted = json!({"status": {"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}});
    let evicted_name = first[0].metadata.name.as_deref().unwrap_or_default();
    pods.patch_status(
        evicted_name,
        &PatchParams::default(),
        &Patch::Merge(evicted),
    )
    .await?;
    let replaced = pods_of(&pods, "policy", 3).await?;
    let st = jobs.get("policy").await?.status.unwrap_or_default();
    assert_eq!((st.failed, condition_true_of(&st, "Failed")), (None, false));
    let fresh = replaced
        .iter()
        .find(|p| {
            p.metadata.name != first[0].metadata.name && p.metadata.name != first[1].metadata.name
        })
        .expect("a replacement pod");
    let exit_42 = json!({"status": {"phase": "Failed", "containerStatuses": [{"name": "c",
        "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
        "state": {"terminated": {"exitCode": 42, "reason": "Error"}}}]}});
    let fresh_name = fresh.metadata.name.as_deref().unwrap_or_default();
    pods.patch_status(fresh_name, &PatchParams::default(), &Patch::Merge(exit_42))
        .await?;
    let target = wait_condition(&jobs, "policy", "FailureTarget").await?;
    let message = condition_of(&target, "FailureTarget").and_then(|c| c.message);
    assert_eq!(
        message.as_deref(),
        Some(format!("Container c for pod default/{fresh_name} failed with exit code 42 matching FailJob rule at index 1").as_str())
    );
    // The pod still running is stopped (never scheduled, it goes at once); once it is
    // gone the Job has failed.
    let running = first[1].metadata.name.as_deref().unwrap_or_default();
    wait_for(20, "the running pod of job policy deleted", || async {
        Ok(pods.get_opt(running).await?.is_none().then_some(()))
    })
    .await?;
    let failed = wait_condition(&jobs, "policy", "Failed").await?;
    assert_eq!(
        condition(&failed, "Failed"),
        Some(("True".into(), "PodFailurePolicy".into()))
    );
    // The exit-42 pod, and the pod stopped with the Job: a failing Job's pods that had
    // not finished count as failed (upstream's tracking).
    assert_eq!(failed.status.unwrap().failed, Some(2));

    // Indexed: one pod per index, each told its index.
    jobs.create(
        &pp,
        &job(
            "indexed",
            json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed"}),
        )?,
    )
    .await?;
    let mut indexed = pods_of(&pods, "indexed", 2).await?;
    indexed.sort_by_key(|p| p.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX].clone());
    for (i, p) in indexed.iter().enumerate() {
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[COMPLETION_INDEX], i.to_string());
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.hostname.as_deref(),
            Some(format!("indexed-{i}").as_str())
        );
        let env = spec.containers[0].env.as_ref().unwrap();
        assert!(env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX"));
    }
    finish(&pods, &indexed[1], "Succeeded").await?;
    wait_for(20, "index 1 completed", || async {
        let st = jobs.get("indexed").await?.status.unwrap_or_default();
        Ok((st.completed_indexes.as_deref() == Some("1")).then_some(()))
    })
    .await?;
    finish(&pods, &indexed[0], "Succeeded").await?;
    let done = wait_condition(&jobs, "indexed", "Complete").await?;
    assert_eq!(
        done.status.unwrap().completed_indexes.as_deref(),
        Some("0,1")
    );

    // successPolicy: index 0 succeeding meets the rule; the Job completes, with the
    // rule's reason, once the other index's pod is gone.
    let policy = json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed",
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]}});
    jobs.create(&pp, &job("leader", policy)?).await?;
    let mut both = pods_of(&pods, "leader", 2).await?;
    both.sort_by_key(|p| p.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX].clone());
    finish(&pods, &both[0], "Succeeded").await?;
    let met = wait_condition(&jobs, "leader", "SuccessCriteriaMet").await?;
    assert_eq!(
        condition(&met, "SuccessCriteriaMet"),
        Some(("True".into(), "SuccessPolicy".into()))
    );
    let done = wait_condition(&jobs, "leader", "Complete").await?;
    let complete = condition_of(&done, "Complete").unwrap();
    assert_eq!(
        (complete.reason.as_deref(), complete.message.as_deref()),
        (Some("SuccessPolicy"), Some("Matched rules at index 0"))
    );
    assert_eq!(done.status.unwrap().completed_indexes.as_deref(), Some("0"));
    let other = both[1].metadata.name.as_deref().unwrap_or_default();
    assert!(
        pods.get_opt(other).await?.is_none(),
        "index 1's pod was left"
    );

    // An orphan pod the Job's selector takes is adopted and counted: a pod that
    // already succeeded completes the Job without a pod of its own.
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "adopt"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
    }))?;
    pods.create(&pp, &orphan).await?;
    finish(&pods, &orphan, "Succeeded").await?;
    let adopting = json!({"manualSelector": true, "selector": {"matchLabels": {"app": "adopt"}},
        "template": {"metadata": {"labels": {"app": "adopt"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}});
    let adopter = jobs.create(&pp, &job("adopter", adopting)?).await?;
    let done = wait_condition(&jobs, "adopter", "Complete").await?;
    assert_eq!(done.status.unwrap().succeeded, Some(1));
    let adopted = pods.get("orphan").await?;
    let owner = &adopted.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Job", adopter.metadata.uid.as_deref().unwrap(), Some(true))
    );
    let lp = ListParams::default().labels("app=adopt");
    assert_eq!(pods.list(&lp).await?.items.len(), 1);

    // A Job managed by another controller gets no pods and no status from this one
    // (checked below, after later Jobs have run).
    let external = json!({"managedBy": "example.com/batch-controller"});
    jobs.create(&pp, &job("external", external)?).await?;

    // backoffLimitPerIndex 0: index 0's failure fails the index (and it is not run
    // again); once index 1 succeeds every index is settled and the Job fails.
    let per_index = json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed",
        "backoffLimitPerIndex": 0});
    jobs.create(&pp, &job("perindex", per_index)?).await?;
    let mut both = pods_of(&pods, "perindex", 2).await?;
    both.sort_by_key(|p| p.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX].clone());
    for p in &both {
        let annotations = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[INDEX_FAILURE_COUNT], "0");
    }
    finish(&pods, &both[0], "Failed").await?;
    wait_for(20, "index 0 failed", || async {
        let st = jobs.get("perindex").await?.status.unwrap_or_default();
        Ok((st.failed_indexes.as_deref() == Some("0")).then_some(st))
    })
    .await?;
    finish(&pods, &both[1], "Succeeded").await?;
    let failed = wait_condition(&jobs, "perindex", "Failed").await?;
    assert_eq!(
        condition(&failed, "Failed"),
        Some(("True".into(), "FailedIndexes".into()))
    );
    let st = failed.status.unwrap();
    assert_eq!(
        (
            st.failed_indexes.as_deref(),
            st.completed_indexes.as_deref(),
            st.failed
        ),
        (Some("0"), Some("1"), Some(1))
    );
    // No pod ran index 0 again.
    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=perindex");
    assert_eq!(pods.list(&lp).await?.items.len(), 2);

    // Suspending a running Job stops its pod.
    jobs.create(&pp, &job("paused", json!({}))?).await?;
    pods_of(&pods, "paused", 1).await?;
    let suspend = json!({"spec": {"suspend": true}});
    jobs.patch("paused", &PatchParams::default(), &Patch::Merge(suspend))
        .await?;
    wait_condition(&jobs, "paused", "Suspended").await?;
    wait_for(20, "the suspended job's pod deleted", || async {
        let lp = ListParams::default().labels("batch.kubernetes.io/job-name=paused");
        let left = pods.list(&lp).await?.items;
        Ok(left
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(()))
    })
    .await?;

    let lp = ListParams::default().labels("batch.kubernetes.io/job-name=external");
    assert!(pods.list(&lp).await?.items.is_empty());
    let untouched = jobs.get("external").await?.status.unwrap_or_default();
    assert_eq!(untouched, Default::default());

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    Ok(())
}

fn has_tracking_finalizer(pod: &Pod) -> bool {
    has_finalizer(&pod.metadata, JOB_TRACKING_FINALIZER)
}

/// Upstream's tracking with the `batch.kubernetes.io/job-tracking` finalizer: a
/// finished pod is counted once, before its finalizer goes, so deleting it loses
/// nothing; a pod deleted by someone else before it finished is a failure; a pod the
/// controller deletes itself is not; a deleted Job's pods let go of the finalizer.
#[tokio::test]
async fn finished_pods_are_counted_once_even_once_deleted() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let (manager, cancel) = start_job_controller(&srv).await?;
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    let status_of = |name: &'static str| {
        let jobs = jobs.clone();
        async move { anyhow::Ok(jobs.get(name).await?.status.unwrap_or_default()) }
    };

    jobs.create(
        &pp,
        &job("tracked", json!({"completions": 2, "parallelism": 2}))?,
    )
    .await?;
    let first = pods_of(&pods, "tracked", 2).await?;
    assert!(first.iter().all(has_tracking_finalizer));

    // A succeeded pod is counted, then lets go of the finalizer.
    finish(&pods, &first[0], "Succeeded").await?;
    let done = first[0].metadata.name.clone().unwrap_or_default();
    wait_for(20, "the succeeded pod counted and released", || async {
        let pod = pods.get(&done).await?;
        let st = status_of("tracked").await?;
        Ok((!has_tracking_finalizer(&pod) && st.succeeded == Some(1)).then_some(()))
    })
    .await?;
    // Deleting it keeps the count, and no pod replaces a success.
    pods.delete(&done, &Default::default()).await?;
    wait_for(20, "the succeeded pod gone", || async {
        Ok(pods.get_opt(&done).await?.is_none().then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pods_of(&pods, "tracked", 1).await?.len(), 1);
    assert_eq!(status_of("tracked").await?.succeeded, Some(1));

    // A running pod deleted by someone else is a failure, and is replaced.
    let running = first[1].metadata.name.clone().unwrap_or_default();
    pods.delete(&running, &Default::default()).await?;
    wait_for(20, "the deleted running pod counted as failed", || async {
        let st = status_of("tracked").await?;
        let gone = pods.get_opt(&running).await?.is_none();
        Ok((gone && st.failed == Some(1)).then_some(()))
    })
    .await?;
    let replacement = pods_of(&pods, "tracked", 1).await?;
    assert_ne!(
        replacement[0].metadata.name.as_deref(),
        Some(running.as_str())
    );
    finish(&pods, &replacement[0], "Succeeded").await?;
    let complete = wait_condition(&jobs, "tracked", "Complete").await?;
    let st = complete.status.unwrap_or_default();
    assert_eq!((st.succeeded, st.failed), (Some(2), Some(1)));
    let uncounted = st.uncounted_terminated_pods.unwrap_or_default();
    assert!(uncounted.succeeded.is_none() && uncounted.failed.is_none());

    // Pods the controller deletes itself (here: suspending the Job) are not failures.
    jobs.create(&pp, &job("paused", json!({"parallelism": 2}))?)
        .await?;
    pods_of(&pods, "paused", 2).await?;
    let suspend = json!({"spec": {"suspend": true}});
    jobs.patch("paused", &PatchParams::default(), &Patch::Merge(suspend))
        .await?;
    wait_condition(&jobs, "paused", "Suspended").await?;
    pods_of(&pods, "paused", 0).await?;
    assert_eq!(status_of("paused").await?.failed.unwrap_or(0), 0);

    // A deleted Job's pods let go of the finalizer (no garbage collector runs here,
    // so the pods stay, orphaned).
    jobs.create(&pp, &job("dropped", json!({}))?).await?;
    let left = pods_of(&pods, "dropped", 1).await?;
    assert!(has_tracking_finalizer(&left[0]));
    jobs.delete("dropped", &Default::default()).await?;
    let orphan = left[0].metadata.name.clone().unwrap_or_default();
    wait_for(20, "the deleted Job's pod released", || async {
        let pod = pods.get(&orphan).await?;
        Ok((!has_tracking_finalizer(&pod)).then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    Ok(())
}
