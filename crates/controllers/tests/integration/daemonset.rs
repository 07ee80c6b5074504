//! The DaemonSet controller on the test apiserver, under its own ServiceAccount (so its
//! bootstrap role is exercised too), with the real scheduler binding the daemon pods
//! through their node-name affinity and the fake kubelets of `support` reporting them
//! Running and Ready. Every wait is bounded.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use ferrokube_controllers::daemonset::UNIQUE_LABEL;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{FakeNode, wait_for};
use tokio_util::sync::CancellationToken;

/// Sets the node's taints (the TaintNodesByCondition not-ready taint a new node gets
/// would otherwise stay, as no node lifecycle controller runs here).
async fn set_taints(c: &Client, node: &str, taints: serde_json::Value) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await?;
    Ok(())
}

fn daemonset(image: &str) -> anyhow::Result<DaemonSet> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": image}]}
            }
        }
    }))?)
}

/// The node an unscheduled daemon pod is aimed at (its `matchFields` term).
fn affinity_node(p: &Pod) -> Option<String> {
    let terms = &p
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let f = terms.first()?.match_fields.as_ref()?.first()?;
    (f.key == "metadata.name" && f.operator == "In")
        .then(|| f.values.as_ref()?.first().cloned())
        .flatten()
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the live pods of the DaemonSet are exactly one ready pod per node in
/// `want`, each with the revision hash given for its node (any if `None`); returns
/// node → pod.
async fn wait_pods(
    pods: &Api<Pod>,
    want: &[(&str, Option<&str>)],
) -> anyhow::Result<BTreeMap<String, Pod>> {
    let want: BTreeMap<String, Option<String>> = want
        .iter()
        .map(|(n, h)| (n.to_string(), h.map(String::from)))
        .collect();
    let what = format!("one ready daemon pod per node, with hashes {want:?}");
    wait_for(60, &what, || async {
        let list = pods
            .list(&ListParams::default().labels("app=agent"))
            .await?
            .items;
        let mut by_node = BTreeMap::new();
        for p in list {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                return Ok(None);
            };
            let hash = p.metadata.labels.as_ref().and_then(|l| l.get(UNIQUE_LABEL));
            let ok = p.metadata.deletion_timestamp.is_none()
                && is_ready(&p)
                && want
                    .get(&node)
                    .is_some_and(|w| w.is_none() || w.as_ref() == hash);
            if !ok || by_node.contains_key(&node) {
                return Ok(None);
            }
            by_node.insert(node, p);
        }
        Ok((by_node.len() == want.len()).then_some(by_node))
    })
    .await
}

/// Waits for the status counters (desired, current, ready, available, updated,
/// misscheduled) and observedGeneration == generation.
async fn wait_status(dss: &Api<DaemonSet>, want: [i32; 6]) -> anyhow::Result<DaemonSet> {
    wait_for(60, &format!("daemonset status {want:?}"), || async {
        let ds = dss.get("agent").await?;
        let Some(st) = ds.status.clone() else {
            return Ok(None);
        };
        let got = [
            st.desired_number_scheduled,
            st.current_number_scheduled,
            st.number_ready,
            st.number_available.unwrap_or(0),
            st.updated_number_scheduled.unwrap_or(0),
            st.number_misscheduled,
        ];
        let observed = st.observed_generation == ds.metadata.generation;
        let unavailable = st.number_unavailable.unwrap_or(0) == want[0] - want[3];
        Ok((got == want && observed && unavailable).then_some(ds))
    })
    .await
}

/// The hash label of the DaemonSet's newest ControllerRevision, and how many it has.
async fn newest_revision(c: &Client) -> anyhow::Result<(String, i64, usize)> {
    let crs: Api<ControllerRevision> = Api::namespaced(c.clone(), "default");
    let list = crs.list(&ListParams::default()).await?.items;
    let newest = list
        .iter()
        .max_by_key(|r| r.revision)
        .ok_or_else(|| anyhow::anyhow!("no controller revision"))?;
    let hash = newest
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(UNIQUE_LABEL))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        newest.metadata.name.as_deref(),
        Some(format!("agent-{hash}").as_str())
    );
    Ok((hash, newest.revision, list.len()))
}

#[tokio::test]
async fn daemon_pods_follow_nodes_and_roll_to_a_new_template() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    // The scheduler binds; the fake kubelets only report pods running.
    for n in ["node-a", "node-b", "node-c"] {
        FakeNode::start(&c, n, false, cancel.clone()).await?;
    }
    set_taints(&c, "node-a", json!(null)).await?;
    set_taints(&c, "node-b", json!(null)).await?;
    // node-c is dedicated to something the daemon pods do not tolerate.
    set_taints(
        &c,
        "node-c",
        json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
    )
    .await?;
    let scheduler = ferrokube_scheduler::run::build(
        c.clone(),
        &ferrokube_scheduler::KubeSchedulerConfiguration::default_config(),
    )?;
    tokio::spawn(scheduler.run(cancel.clone()));
    let cfg = ManagerConfig {
        controllers: vec!["daemonset".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    let dss: Api<DaemonSet> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");

    dss.create(&PostParams::default(), &daemonset("agent:1")?)
        .await?;

    // One pod per eligible node, bound where its node-name affinity says; none on the
    // tainted node.
    let placed = wait_pods(&pods, &[("node-a", None), ("node-b", None)]).await?;
    let (hash1, rev1, _) = newest_revision(&c).await?;
    assert_eq!(rev1, 1);
    for (node, p) in &placed {
        assert_eq!(affinity_node(p).as_deref(), Some(node.as_str()));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("DaemonSet", "agent", Some(true))
        );
        assert!(p.metadata.name.as_deref().unwrap().starts_with("agent-"));
        assert_eq!(
            p.metadata.labels.as_ref().unwrap().get(UNIQUE_LABEL),
            Some(&hash1)
        );
        let tolerations = p.spec.as_ref().unwrap().tolerations.as_ref().unwrap();
        assert!(
            tolerations
                .iter()
                .any(|t| t.key.as_deref() == Some("node.kubernetes.io/not-ready")
                    && t.effect.as_deref() == Some("NoExecute"))
        );
    }
    wait_status(&dss, [2, 2, 2, 2, 2, 0]).await?;

    // A new node gets its pod once it is schedulable.
    let h1 = Some(hash1.as_str());
    FakeNode::start(&c, "node-d", false, cancel.clone()).await?;
    set_taints(&c, "node-d", json!(null)).await?;
    let placed = wait_pods(&pods, &[("node-a", h1), ("node-b", h1), ("node-d", h1)]).await?;
    assert_eq!(affinity_node(&placed["node-d"]).as_deref(), Some("node-d"));
    wait_status(&dss, [3, 3, 3, 3, 3, 0]).await?;

    // A new image rolls every pod to the new revision, one node at a time.
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "agent:2"}]}}}});
    dss.patch("agent", &PatchParams::default(), &Patch::Strategic(image))
        .await?;
    let (hash2, rev2, revisions) = wait_for(30, "a second controller revision", || async {
        let r = newest_revision(&c).await?;
        Ok((r.1 == 2).then_some(r))
    })
    .await?;
    assert_ne!(hash2, hash1);
    let h2 = Some(hash2.as_str());
    assert_eq!((rev2, revisions), (2, 2));
    let rolled = wait_pods(&pods, &[("node-a", h2), ("node-b", h2), ("node-d", h2)]).await?;
    for (node, p) in &rolled {
        assert_eq!(affinity_node(p).as_deref(), Some(node.as_str()));
        let image = p.spec.as_ref().unwrap().containers[0].image.as_deref();
        assert_eq!(image, Some("agent:2"));
    }
    let ds = wait_status(&dss, [3, 3, 3, 3, 3, 0]).await?;
    assert_eq!(ds.metadata.generation, Some(2));

    // A NoExecute taint the pods do not tolerate evicts the node's daemon pod.
    set_taints(
        &c,
        "node-d",
        json!([{"key": "maintenance", "effect": "NoExecute"}]),
    )
    .await?;
    wait_pods(&pods, &[("node-a", h2), ("node-b", h2)]).await?;
    wait_status(&dss, [2, 2, 2, 2, 2, 0]).await?;

    // OnDelete: a new template replaces only the pods someone deletes.
    let on_delete = json!({"spec": {
        "updateStrategy": {"type": "OnDelete", "rollingUpdate": null},
        "template": {"spec": {"containers": [{"name": "c", "image": "agent:3"}]}}}});
    dss.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Strategic(on_delete),
    )
    .await?;
    // Observed with nothing updated: the controller synced the new spec and left the
    // pods alone.
    wait_status(&dss, [2, 2, 2, 2, 0, 0]).await?;
    let (hash3, rev3, _) = newest_revision(&c).await?;
    assert_eq!(rev3, 3);
    let h3 = Some(hash3.as_str());
    let before = wait_pods(&pods, &[("node-a", h2), ("node-b", h2)]).await?;
    let victim = before["node-a"].metadata.name.clone().unwrap_or_default();
    pods.delete(&victim, &Default::default()).await?;
    wait_pods(&pods, &[("node-a", h3), ("node-b", h2)]).await?;
    wait_status(&dss, [2, 2, 2, 2, 1, 0]).await?;

    // The controller recorded its pod creations and deletions.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), "default");
    wait_for(
        20,
        "SuccessfulCreate and SuccessfulDelete events",
        || async {
            let list = events.list(&ListParams::default()).await?.items;
            let has = |reason: &str, prefix: &str| {
                list.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.note.as_deref().is_some_and(|n| n.starts_with(prefix))
                })
            };
            Ok((has("SuccessfulCreate", "Created pod: agent-")
                && has("SuccessfulDelete", "Deleted pod: agent-"))
            .then_some(()))
        },
    )
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
