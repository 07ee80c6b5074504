//! The scheduler's events against a real in-process apiserver: written through the
//! shared `EventRecorder` as `events.k8s.io/v1` Events with upstream's reason,
//! action, note, reporting controller and (for Preempted) related object.

use std::time::Duration;

use ferrokube_scheduler::KubeSchedulerConfiguration;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn create_node(nodes: &Api<Node>, name: &str, cpu: &str) -> anyhow::Result<()> {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))?;
    nodes.create(&PostParams::default(), &n).await?;
    // Status is not writable on create: set it through the status subresource.
    let status = json!({"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                        "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"}});
    nodes
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": status})),
        )
        .await?;
    Ok(())
}

fn pod(name: &str, cpu: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu}}}]}
    }))?)
}

/// Waits (bounded) for an event with `reason` about pod `name`.
async fn event_for(events: &Api<Event>, name: &str, reason: &str) -> anyhow::Result<Event> {
    for _ in 0..150 {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            });
        if let Some(e) = found {
            return Ok(e);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("no {reason} event about {name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_failed_scheduling_and_preempted_events_are_upstreams() -> anyhow::Result<()> {
    // No node lifecycle controller runs here to lift the not-ready taint that
    // TaintNodesByCondition puts on new nodes.
    let srv = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("TaintNodesByCondition", false)
            .expect("a known plugin")
    })
    .await?;
    let client = srv.client.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    create_node(&nodes, "n1", "2").await?;

    let running = ferrokube_scheduler::run::build(
        client.clone(),
        &KubeSchedulerConfiguration::default_config(),
    )?;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(running.run(cancel.clone()));

    pods.create(&PostParams::default(), &pod("fits", "1")?)
        .await?;
    let e = event_for(&events, "fits", "Scheduled").await?;
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.action.as_deref(), Some("Binding"));
    assert_eq!(
        e.note.as_deref(),
        Some("Successfully assigned default/fits to n1")
    );
    assert_eq!(e.reporting_controller.as_deref(), Some("default-scheduler"));
    assert!(
        e.reporting_instance
            .as_deref()
            .is_some_and(|i| i.starts_with("default-scheduler-")),
        "{:?}",
        e.reporting_instance
    );
    let regarding = e.regarding.clone().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.namespace.as_deref(), Some("default"));
    assert!(regarding.uid.is_some());
    assert!(e.event_time.is_some());

    pods.create(&PostParams::default(), &pod("too-big", "3")?)
        .await?;
    let e = event_for(&events, "too-big", "FailedScheduling").await?;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.action.as_deref(), Some("Scheduling"));
    let note = e.note.clone().unwrap_or_default();
    assert!(
        note.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
        "{note}"
    );

    // Preemption: a high-priority pod that needs all of n1 evicts "fits"; the event
    // is about the victim and related to the preemptor (upstream's PreemptPod).
    Api::<PriorityClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "high"}, "value": 1000}))?,
        )
        .await?;
    let mut important = pod("important", "2")?;
    important.spec.as_mut().unwrap().priority_class_name = Some("high".into());
    // The Priority admission plugin sees the new class through its cache a moment later.
    let mut created = None;
    for attempt in 0.. {
        match pods.create(&PostParams::default(), &important).await {
            Err(kube::Error::Api(e)) if e.code == 403 && attempt < 100 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => {
                created = Some(r?);
                break;
            }
        }
    }
    let preemptor_uid = created.and_then(|p| p.metadata.uid).unwrap();
    let e = event_for(&events, "fits", "Preempted").await?;
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.action.as_deref(), Some("Preempting"));
    assert_eq!(
        e.note.as_deref(),
        Some(format!("Preempted by pod {preemptor_uid} on node n1").as_str())
    );
    let related = e.related.clone().unwrap();
    assert_eq!(related.name.as_deref(), Some("important"));
    assert_eq!(related.uid.as_deref(), Some(preemptor_uid.as_str()));

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(30), task).await???;
    Ok(())
}
