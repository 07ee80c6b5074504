//! The CronJob controller on the test apiserver, under its own ServiceAccount. No
//! job controller runs: created Jobs stay active, and the test finishes Jobs itself.
//! Every wait is bounded.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::cronjob::SCHEDULED_TIMESTAMP_ANNOTATION;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn pod_template() -> Value {
    json!({"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}]}})
}

fn cronjob(name: &str, schedule: &str, extra: Value) -> anyhow::Result<CronJob> {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"schedule": schedule,
                 "jobTemplate": {"metadata": {"labels": {"app": name}, "annotations": {"note": "x"}},
                                 "spec": {"template": pod_template()}}}
    });
    if let (Some(spec), Value::Object(extra)) = (v["spec"].as_object_mut(), extra) {
        spec.extend(extra);
    }
    Ok(serde_json::from_value(v)?)
}

fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn owned_jobs(jobs: &Api<Job>, uid: &str) -> anyhow::Result<Vec<Job>> {
    Ok(jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| {
            j.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == uid && r.controller == Some(true))
        })
        .collect())
}

async fn start(srv: &TestApiServer, cancel: &CancellationToken) -> anyhow::Result<Manager> {
    let cfg = ManagerConfig {
        controllers: vec!["cronjob".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    Ok(Manager::start(manager_client, &cfg, cancel.clone()).await?)
}

/// A CronJob with `policy` whose Job `<name>-running` is active; returns its UID.
async fn with_running_job(
    cronjobs: &Api<CronJob>,
    jobs: &Api<Job>,
    name: &str,
    policy: &str,
    last: Timestamp,
) -> anyhow::Result<String> {
    let pp = PostParams::default();
    let cj = cronjobs
        .create(
            &pp,
            &cronjob(name, "* * * * *", json!({"concurrencyPolicy": policy}))?,
        )
        .await?;
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let running: Job = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-running"), "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "CronJob", "name": name,
            "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"template": pod_template()}
    }))?;
    let running = jobs.create(&pp, &running).await?;
    let status = json!({"status": {"lastScheduleTime": rfc3339(last),
        "active": [{"apiVersion": "batch/v1", "kind": "Job", "namespace": "default",
                    "name": format!("{name}-running"), "uid": running.metadata.uid}]}});
    cronjobs
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(uid)
}

/// A missed `* * * * *` time gets its Job (name, owner, annotation, template) and
/// the status records it; a Forbid CronJob with an active Job starts none; a Replace one
/// deletes it and starts the new one.
#[tokio::test]
async fn creates_the_missed_job_forbid_waits_replace_replaces() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cronjobs: Api<CronJob> = Api::namespaced(c.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    let cj = cronjobs
        .create(&pp, &cronjob("every-minute", "* * * * *", json!({}))?)
        .await?;
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    // Last run ten minutes ago: the current minute is due now.
    let ten_ago = Timestamp::from_second(Timestamp::now().as_second() / 60 * 60 - 600)?;
    let last = json!({"status": {"lastScheduleTime": rfc3339(ten_ago)}});
    cronjobs
        .patch_status("every-minute", &PatchParams::default(), &Patch::Merge(last))
        .await?;
    let forbid_uid = with_running_job(&cronjobs, &jobs, "forbidden", "Forbid", ten_ago).await?;
    let replace_uid = with_running_job(&cronjobs, &jobs, "replaced", "Replace", ten_ago).await?;
    let manager = start(&srv, &cancel).await?;

    let job = wait_for(30, "the CronJob's Job", || async {
        Ok(owned_jobs(&jobs, &uid).await?.into_iter().next())
    })
    .await?;
    let name = job.metadata.name.clone().unwrap_or_default();
    let minutes: i64 = name
        .strip_prefix("every-minute-")
        .unwrap_or_default()
        .parse()?;
    let scheduled = Timestamp::from_second(minutes * 60)?;
    assert!(
        scheduled > ten_ago,
        "{name} is after the last schedule time"
    );
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(SCHEDULED_TIMESTAMP_ANNOTATION),
        Some(&rfc3339(scheduled))
    );
    assert_eq!(annotations.get("note").map(String::as_str), Some("x"));
    let labels = job.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("every-minute"));
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("CronJob", "every-minute")
    );
    assert_eq!(owner.block_owner_deletion, Some(true));

    let job_uid = job.metadata.uid.clone().unwrap_or_default();
    wait_for(30, "the Job in status.active", || async {
        let st = cronjobs
            .get("every-minute")
            .await?
            .status
            .unwrap_or_default();
        let active = st
            .active
            .unwrap_or_default()
            .iter()
            .any(|r| r.uid.as_deref() == Some(job_uid.as_str()));
        Ok((active && st.last_schedule_time.map(|t| t.0) == Some(scheduled)).then_some(()))
    })
    .await?;

    // Forbid: the controller saw the due time (its event) and started nothing.
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    wait_for(30, "the JobAlreadyActive event", || async {
        let seen = events
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("JobAlreadyActive")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("forbidden")
            });
        Ok(seen.then_some(()))
    })
    .await?;
    let names: Vec<String> = owned_jobs(&jobs, &forbid_uid)
        .await?
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(names, ["forbidden-running"]);

    // Replace: the running Job goes, the due one comes and is the only active one.
    let new_uid = wait_for(30, "the replacing Job", || async {
        let owned = owned_jobs(&jobs, &replace_uid).await?;
        let gone = owned
            .iter()
            .all(|j| j.metadata.name.as_deref() != Some("replaced-running"));
        let new = owned
            .into_iter()
            .find(|j| j.metadata.name.as_deref() != Some("replaced-running"));
        Ok(new.filter(|_| gone).and_then(|j| j.metadata.uid))
    })
    .await?;
    wait_for(30, "the replacing Job alone in status.active", || async {
        let active = cronjobs
            .get("replaced")
            .await?
            .status
            .and_then(|s| s.active)
            .unwrap_or_default();
        let uids: Vec<String> = active.into_iter().filter_map(|r| r.uid).collect();
        Ok((uids == [new_uid.clone()]).then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

async fn finish(api: &Api<Job>, name: &str, ok: bool, started: Timestamp) -> anyhow::Result<()> {
    let start = rfc3339(started);
    let now = rfc3339(Timestamp::now());
    let status = if ok {
        json!({"status": {"startTime": start, "completionTime": now, "succeeded": 1,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastTransitionTime": now}]}})
    } else {
        json!({"status": {"startTime": start, "failed": 1,
            "conditions": [
                {"type": "FailureTarget", "status": "True", "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "lastTransitionTime": now}]}})
    };
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

/// Finished Jobs beyond the history limits go, oldest first; the newest success
/// becomes `status.lastSuccessfulTime`. The CronJob is suspended: nothing new starts.
#[tokio::test]
async fn history_limits_delete_the_oldest_finished_jobs() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cronjobs: Api<CronJob> = Api::namespaced(c.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let cj = cronjobs
        .create(
            &PostParams::default(),
            &cronjob(
                "limited",
                "@hourly",
                json!({"suspend": true, "successfulJobsHistoryLimit": 1,
                       "failedJobsHistoryLimit": 1}),
            )?,
        )
        .await?;
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let now = Timestamp::now().as_second();
    for (name, ok, hours_ago) in [
        ("ok-old", true, 3),
        ("ok-new", true, 1),
        ("ok-mid", true, 2),
        ("failed-old", false, 2),
        ("failed-new", false, 1),
    ] {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "CronJob", "name": "limited", "uid": uid,
                "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"template": pod_template()}
        }))?;
        jobs.create(&PostParams::default(), &job).await?;
        finish(
            &jobs,
            name,
            ok,
            Timestamp::from_second(now - hours_ago * 3600)?,
        )
        .await?;
    }
    let manager = start(&srv, &cancel).await?;

    wait_for(30, "the old finished Jobs deleted", || async {
        let mut left: Vec<String> = owned_jobs(&jobs, &uid)
            .await?
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .filter_map(|j| j.metadata.name)
            .collect();
        left.sort();
        Ok((left == ["failed-new", "ok-new"]).then_some(()))
    })
    .await?;
    wait_for(30, "status.lastSuccessfulTime", || async {
        let st = cronjobs.get("limited").await?.status.unwrap_or_default();
        Ok(st.last_successful_time.map(|_| ()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
