//! The StatefulSet controller on the test apiserver, under its own ServiceAccount (so
//! its bootstrap role is exercised too), with a fake kubelet that binds the pods and
//! reports them Running and Ready (unless held unready). Every wait is bounded.

use crate::support;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::statefulset::{POD_INDEX_LABEL, POD_NAME_LABEL, REVISION_LABEL};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{FakeNode, wait_for};
use tokio_util::sync::CancellationToken;

/// A set `name` selecting `app=<name>`, with one claim template `data`; `extra` is
/// merged into the spec.
fn set(name: &str, replicas: i32, extra: serde_json::Value) -> anyhow::Result<StatefulSet> {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}]
        }
    });
    for (k, val) in extra.as_object().into_iter().flatten() {
        v["spec"][k] = val.clone();
    }
    Ok(serde_json::from_value(v)?)
}

fn web(replicas: i32) -> anyhow::Result<StatefulSet> {
    set("web", replicas, json!({}))
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn revision(p: &Pod) -> String {
    p.metadata.labels.as_ref().unwrap()[REVISION_LABEL].clone()
}

/// The pods of set `web` by name.
async fn pods_now(pods: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    pods_of(pods, "web").await
}

/// The pods labelled `app=<app>` by name.
async fn pods_of(pods: &Api<Pod>, app: &str) -> anyhow::Result<Vec<Pod>> {
    let mut list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items;
    list.sort_by_key(|p| p.metadata.name.clone());
    Ok(list)
}

/// Waits until the set's pods are exactly `names`, all Running and Ready.
async fn wait_ready(pods: &Api<Pod>, names: &[&str]) -> anyhow::Result<Vec<Pod>> {
    let app = names[0].rsplit_once('-').map_or("", |(a, _)| a);
    wait_for(60, &format!("pods {names:?} ready"), || async {
        let list = pods_of(pods, app).await?;
        let got: Vec<&str> = list
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect();
        let ok = got == names
            && list
                .iter()
                .all(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none());
        Ok(ok.then_some(list))
    })
    .await
}

async fn wait_status(
    sets: &Api<StatefulSet>,
    what: &str,
    f: impl Fn(&k8s_openapi::api::apps::v1::StatefulSetStatus) -> bool,
) -> anyhow::Result<StatefulSet> {
    wait_status_of(sets, "web", what, f).await
}

async fn wait_status_of(
    sets: &Api<StatefulSet>,
    name: &str,
    what: &str,
    f: impl Fn(&k8s_openapi::api::apps::v1::StatefulSetStatus) -> bool,
) -> anyhow::Result<StatefulSet> {
    wait_for(60, what, || async {
        let s = sets.get(name).await?;
        Ok(s.status.as_ref().is_some_and(&f).then_some(s))
    })
    .await
}

#[tokio::test]
async fn statefulsets_are_ordered_stable_and_rolled() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["statefulset".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    let node = FakeNode::start(&c, "n1", true, cancel.clone()).await?;
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");

    // OrderedReady: web-1 waits while web-0 is held unready.
    node.unready.lock().insert("web-0".into());
    sets.create(&PostParams::default(), &web(3)?).await?;
    wait_for(
        30,
        "web-0 running but unready, seen by the controller",
        || async {
            let list = pods_now(&pods).await?;
            let st = sets.get("web").await?.status.unwrap_or_default();
            let ok = list.len() == 1
                && phase(&list[0]) == "Running"
                && !is_ready(&list[0])
                && st.replicas == 1
                && st.ready_replicas.unwrap_or(0) == 0;
            Ok(ok.then_some(()))
        },
    )
    .await?;
    // The controller has synced with web-0 unready; a later sync must still not move.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        pods_now(&pods).await?.len(),
        1,
        "web-1 must wait for web-0 to be ready"
    );
    node.unready.lock().remove("web-0");
    let list = wait_for(30, "web-1 created", || async {
        let list = pods_now(&pods).await?;
        Ok((list.len() >= 2).then_some(list))
    })
    .await?;
    // web-0 was ready when web-1 was made, and stays so.
    assert!(is_ready(&list[0]), "web-0 ready once web-1 exists");
    let all = wait_ready(&pods, &["web-0", "web-1", "web-2"]).await?;
    let st = wait_status(&sets, "status of 3 ready replicas", |s| {
        s.ready_replicas == Some(3) && s.available_replicas == Some(3)
    })
    .await?
    .status
    .unwrap();
    assert_eq!(st.replicas, 3);
    assert_eq!(st.current_replicas, Some(3));
    assert_eq!(st.updated_replicas, Some(3));
    assert_eq!(st.current_revision, st.update_revision);
    let rev0 = st.update_revision.clone().unwrap();
    assert!(rev0.starts_with("web-"));

    // Identity and storage.
    for (i, p) in all.iter().enumerate() {
        let name = format!("web-{i}");
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], name);
        assert_eq!(labels[POD_INDEX_LABEL], i.to_string());
        assert_eq!(labels[REVISION_LABEL], rev0);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("web"));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("StatefulSet", Some(true))
        );
        let claim = format!("data-web-{i}");
        let vol = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "data")
            .expect("data volume");
        assert_eq!(
            vol.persistent_volume_claim.as_ref().unwrap().claim_name,
            claim
        );
        let pvc = claims.get(&claim).await?;
        assert_eq!(pvc.metadata.labels.as_ref().unwrap()["app"], "web");
    }
    let revs: Api<ControllerRevision> = Api::namespaced(c.clone(), "default");
    let r = revs.get(&rev0).await?;
    assert_eq!(r.revision, 1);

    // A template change rolls the pods from the highest ordinal down.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}});
    sets.patch("web", &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    let order: RefCell<Vec<String>> = RefCell::new(Vec::new());
    let terminating_at_once = Cell::new(0usize);
    wait_for(90, "every pod at the new revision", || {
        let (pods, sets, order, terminating_at_once) = (&pods, &sets, &order, &terminating_at_once);
        let rev0 = rev0.clone();
        async move {
            let list = pods_now(pods).await?;
            let down = list
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_some())
                .count()
                + 3usize.saturating_sub(list.len());
            terminating_at_once.set(terminating_at_once.get().max(down));
            for p in &list {
                let name = p.metadata.name.clone().unwrap();
                let mut order = order.borrow_mut();
                if revision(p) != rev0 && !order.contains(&name) {
                    order.push(name);
                }
            }
            let st = sets.get("web").await?.status.unwrap_or_default();
            let done = order.borrow().len() == 3
                && st.update_revision != Some(rev0.clone())
                && st.current_revision == st.update_revision
                && st.updated_replicas == Some(3)
                && st.ready_replicas == Some(3);
            Ok(done.then_some(()))
        }
    })
    .await?;
    assert_eq!(order.into_inner(), ["web-2", "web-1", "web-0"]);
    assert!(
        terminating_at_once.get() <= 1,
        "one pod at a time is down during the rollout"
    );
    let st = sets.get("web").await?.status.unwrap();
    let rev1 = st.update_revision.clone().unwrap();
    assert_eq!(revs.get(&rev1).await?.revision, 2);
    for p in wait_ready(&pods, &["web-0", "web-1", "web-2"]).await? {
        let spec = p.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:2"));
    }

    // A deleted pod comes back under the same name, with its claim.
    let old_uid = pods.get("web-1").await?.metadata.uid;
    pods.delete("web-1", &DeleteParams::default()).await?;
    let back = wait_for(60, "web-1 recreated", || async {
        Ok(pods
            .get_opt("web-1")
            .await?
            .filter(|p| p.metadata.uid != old_uid && is_ready(p)))
    })
    .await?;
    assert_eq!(revision(&back), rev1);
    let vol = back.spec.unwrap().volumes.unwrap();
    assert!(vol.iter().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == "data-web-1")
    }));

    // Scaling to 1 removes web-2, then web-1; the claims are retained.
    wait_ready(&pods, &["web-0", "web-1", "web-2"]).await?;
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    let web1_went_first = Cell::new(false);
    wait_for(60, "scaled down to web-0", || {
        let (pods, web1_went_first) = (&pods, &web1_went_first);
        async move {
            let list = pods_now(pods).await?;
            let live: BTreeSet<&str> = list
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| p.metadata.name.as_deref().unwrap())
                .collect();
            let exists = |n: &str| list.iter().any(|p| p.metadata.name.as_deref() == Some(n));
            if exists("web-2") && !live.contains("web-1") {
                web1_went_first.set(true);
            }
            Ok((list.len() == 1 && live.contains("web-0")).then_some(()))
        }
    })
    .await?;
    assert!(!web1_went_first.get(), "web-2 goes before web-1");
    wait_status(&sets, "status of 1 replica", |s| {
        s.replicas == 1 && s.ready_replicas == Some(1)
    })
    .await?;
    for i in 0..3 {
        claims.get(&format!("data-web-{i}")).await?;
    }

    // Upstream's event messages, about the set.
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    let want = [
        (
            "SuccessfulCreate",
            "create Claim data-web-0 Pod web-0 in StatefulSet web success",
        ),
        (
            "SuccessfulCreate",
            "create Pod web-0 in StatefulSet web successful",
        ),
        (
            "SuccessfulDelete",
            "delete Pod web-2 in StatefulSet web successful",
        ),
    ];
    wait_for(30, "the set's events", || async {
        let list = events.list(&ListParams::default()).await?.items;
        let seen = want.iter().all(|(reason, note)| {
            list.iter().any(|e| {
                e.reason.as_deref() == Some(*reason)
                    && e.note.as_deref() == Some(*note)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("StatefulSet")
            })
        });
        Ok(seen.then_some(()))
    })
    .await?;
    let warnings: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect();
    assert!(warnings.is_empty(), "no failed writes: {warnings:?}");

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    Ok(())
}

#[tokio::test]
async fn parallel_sets_partitions_orphans_and_claim_retention() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["statefulset".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    let node = FakeNode::start(&c, "n1", true, cancel.clone()).await?;
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");

    // Parallel: every pod is created although none is ready.
    for i in 0..3 {
        node.unready.lock().insert(format!("par-{i}"));
    }
    let extra = json!({
        "podManagementPolicy": "Parallel",
        "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete", "whenDeleted": "Delete"}
    });
    sets.create(&PostParams::default(), &set("par", 3, extra)?)
        .await?;
    wait_for(30, "three unready pods of par", || async {
        let list = pods_of(&pods, "par").await?;
        let ok = list.len() == 3 && list.iter().all(|p| phase(p) == "Running" && !is_ready(p));
        Ok(ok.then_some(()))
    })
    .await?;
    node.unready.lock().clear();
    wait_ready(&pods, &["par-0", "par-1", "par-2"]).await?;
    let rev0 = wait_status_of(&sets, "par", "par ready", |s| s.ready_replicas == Some(3))
        .await?
        .status
        .unwrap()
        .update_revision
        .unwrap();

    // A partition of 2: only par-2 moves to the new revision.
    let patch = json!({"spec": {
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
        "template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}});
    sets.patch("par", &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    let st = wait_status_of(&sets, "par", "par-2 updated", |s| {
        s.updated_replicas == Some(1) && s.ready_replicas == Some(3)
    })
    .await?
    .status
    .unwrap();
    let rev1 = st.update_revision.clone().unwrap();
    assert_ne!(rev1, rev0);
    assert_eq!(st.current_revision.as_deref(), Some(rev0.as_str()));
    assert_eq!(st.current_replicas, Some(2));
    let list = wait_ready(&pods, &["par-0", "par-1", "par-2"]).await?;
    let revs: Vec<String> = list.iter().map(revision).collect();
    assert_eq!(revs, [rev0.clone(), rev0.clone(), rev1.clone()]);

    // Partition 0 finishes the rollout and the current revision follows.
    let patch = json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}});
    sets.patch("par", &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    wait_status_of(&sets, "par", "par rolled out", |s| {
        s.updated_replicas == Some(3)
            && s.ready_replicas == Some(3)
            && s.current_revision.as_deref() == Some(rev1.as_str())
    })
    .await?;

    // An orphan named like ordinal 3 is adopted when the set grows to it.
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "par-3", "labels": {"app": "par"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}
    }))?;
    pods.create(&PostParams::default(), &orphan).await?;
    sets.patch(
        "par",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await?;
    wait_for(30, "par-3 adopted", || async {
        let p = pods.get_opt("par-3").await?;
        let owned = p
            .as_ref()
            .and_then(|p| p.metadata.owner_references.as_ref());
        Ok(owned
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    r.kind == "StatefulSet" && r.name == "par" && r.controller == Some(true)
                })
            })
            .then_some(()))
    })
    .await?;
    wait_ready(&pods, &["par-0", "par-1", "par-2", "par-3"]).await?;

    // whenScaled: Delete: the claims of removed pods are handed from the set to those
    // pods (for the garbage collector); the remaining pod's claim stays the set's
    // (whenDeleted: Delete).
    sets.patch(
        "par",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    wait_for(30, "par scaled down to one pod", || async {
        let list = pods_of(&pods, "par").await?;
        Ok((list.len() == 1).then_some(()))
    })
    .await?;
    for i in 1..3 {
        let pvc = claims.get(&format!("data-par-{i}")).await?;
        let refs = pvc.metadata.owner_references.unwrap_or_default();
        let owners: Vec<(&str, &str)> = refs
            .iter()
            .map(|r| (r.kind.as_str(), r.name.as_str()))
            .collect();
        let pod = format!("par-{i}");
        assert_eq!(
            owners,
            [("Pod", pod.as_str())],
            "data-par-{i} owned by its pod only"
        );
    }
    let kept = claims.get("data-par-0").await?;
    let owners: Vec<String> = kept
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .map(|r| format!("{}/{}", r.kind, r.name))
        .collect();
    assert_eq!(owners, ["StatefulSet/par"]);

    // A policy changed later applies to the claims that exist: Retain takes the set's
    // reference off again, Delete puts it back.
    let owners_of = |name: &'static str| {
        let claims = claims.clone();
        async move {
            let pvc = claims.get(name).await?;
            anyhow::Ok(
                pvc.metadata
                    .owner_references
                    .unwrap_or_default()
                    .into_iter()
                    .map(|r| format!("{}/{}", r.kind, r.name))
                    .collect::<Vec<_>>(),
            )
        }
    };
    for (policy, want) in [
        ("Retain", vec![]),
        ("Delete", vec!["StatefulSet/par".to_string()]),
    ] {
        let patch = json!({"spec": {"persistentVolumeClaimRetentionPolicy": {
            "whenScaled": "Delete", "whenDeleted": policy}}});
        sets.patch("par", &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        wait_for(
            30,
            &format!("data-par-0 owned as whenDeleted {policy} says"),
            || async { Ok((owners_of("data-par-0").await? == want).then_some(())) },
        )
        .await?;
    }

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    Ok(())
}
