//! Controllers against a real in-process apiserver, with the real scheduler binding
//! pods to the fake kubelet of `support`, which reports them Running and Ready via
//! `/status` (unless told to hold a pod unready) and finishes graceful deletions. Every wait is bounded in time.

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, LimitRange, Namespace, PersistentVolumeClaim, Pod, ResourceQuota, Secret,
    Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use parking_lot::Mutex;
use serde_json::json;
use support::{FakeNode, wait_for};
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-a";

struct Env {
    srv: TestApiServer,
    cancel: CancellationToken,
    manager: Option<Manager>,
    unready: Arc<Mutex<HashSet<String>>>,
}

impl Env {
    async fn start(controllers: &[&str]) -> anyhow::Result<Env> {
        let srv = TestApiServer::start().await?;
        let c = srv.client.clone();
        let cancel = CancellationToken::new();
        // The real scheduler binds the pods; the fake node only reports them running.
        let node = FakeNode::start(&c, NODE, false, cancel.clone()).await?;
        // TaintNodesByCondition gave the new node the not-ready taint, which the node
        // lifecycle controller (not run here) would lift once the node reports Ready.
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.clone());
        nodes
            .patch(
                NODE,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await?;
        let scheduler = ferrokube_scheduler::run::build(
            c.clone(),
            &ferrokube_scheduler::KubeSchedulerConfiguration::default_config(),
        )?;
        tokio::spawn(scheduler.run(cancel.clone()));
        // As a kubeadm cluster: the manager as system:kube-controller-manager and
        // each controller under its own ServiceAccount, so every test here also
        // checks that the controller's bootstrap role allows what it does.
        let cfg = ManagerConfig {
            controllers: controllers.iter().map(|s| s.to_string()).collect(),
            connection: Some(srv.kube_config().await?),
            use_service_account_credentials: true,
            ..Default::default()
        };
        let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
        let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
        Ok(Env {
            srv,
            cancel,
            manager: Some(manager),
            unready: node.unready,
        })
    }

    fn client(&self) -> Client {
        self.srv.client.clone()
    }

    async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(m) = self.manager.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), m.wait()).await;
        }
        self.srv.stop().await;
    }
}

fn deployment(name: &str, replicas: i32, image: &str) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]}
            }
        }
    }))?)
}

async fn pods_of(c: &Client, ns: &str, app: &str) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(c.clone(), ns);
    Ok(api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items)
}

fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn image_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .map(|s| s.containers[0].image.clone().unwrap_or_default())
        .unwrap_or_default()
}

/// Waits until the Deployment is complete at `replicas` on `image` with no other pods.
async fn wait_complete(
    c: &Client,
    name: &str,
    replicas: i32,
    image: &str,
    secs: u64,
) -> anyhow::Result<()> {
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    wait_for(
        secs,
        &format!("deployment {name} complete at {replicas} x {image}"),
        || async {
            let d = deps.get(name).await?;
            let st = d.status.clone().unwrap_or_default();
            let pods = pods_of(c, "default", name).await?;
            let good = pods
                .iter()
                .filter(|p| is_ready(p) && image_of(p) == image)
                .count();
            let done = st.observed_generation == d.metadata.generation
                && st.updated_replicas == Some(replicas)
                && st.available_replicas == Some(replicas)
                && st.replicas == Some(replicas)
                && good == replicas as usize
                && pods.len() == replicas as usize;
            Ok(done.then_some(()))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployment_rolls_without_dropping_below_replicas_then_rolls_back_and_scales()
-> anyhow::Result<()> {
    let env = Env::start(&["replicaset", "deployment"]).await?;
    let c = env.client();
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    deps.create(&PostParams::default(), &deployment("web", 10, "img:v1")?)
        .await?;
    wait_complete(&c, "web", 10, "img:v1", 60).await?;

    // Roll to v2 with maxUnavailable=0: ready pods never drop below 10, and the
    // ReplicaSets never ask for more than replicas + maxSurge. (Pods themselves may
    // briefly exceed that, upstream too: a new ReplicaSet's controller can create
    // pods before an old one's has deleted the pods it no longer wants.)
    let watcher = {
        let c = c.clone();
        let stop = CancellationToken::new();
        let s2 = stop.clone();
        let sets: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
        let h = tokio::spawn(async move {
            let mut min_ready = usize::MAX;
            let mut max_wanted = 0;
            while !s2.is_cancelled() {
                if let Ok(p) = pods_of(&c, "default", "web").await {
                    min_ready = min_ready.min(p.iter().filter(|p| is_ready(p)).count());
                }
                if let Ok(list) = sets.list(&ListParams::default().labels("app=web")).await {
                    let wanted: i32 = list
                        .items
                        .iter()
                        .filter_map(|rs| rs.spec.as_ref()?.replicas)
                        .sum();
                    max_wanted = max_wanted.max(wanted);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (min_ready, max_wanted)
        });
        (stop, h)
    };
    deps.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:v2"}]}}}})))
        .await?;
    wait_complete(&c, "web", 10, "img:v2", 90).await?;
    watcher.0.cancel();
    let (min_ready, max_wanted) = watcher.1.await?;
    assert!(
        min_ready >= 10,
        "ready pods dropped to {min_ready} during the rollout"
    );
    assert!(
        (10..=13).contains(&max_wanted),
        "ReplicaSets asked for {max_wanted} pods, not 10 to replicas + maxSurge"
    );
    let d = deps.get("web").await?;
    let ann = d.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("2")
    );
    let conds = d
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let prog = conds
        .iter()
        .find(|c| c.type_ == "Progressing")
        .context("Progressing")?;
    assert_eq!(prog.reason.as_deref(), Some("NewReplicaSetAvailable"));
    let avail = conds
        .iter()
        .find(|c| c.type_ == "Available")
        .context("Available")?;
    assert_eq!(avail.status, "True");

    // Rollback (kubectl rollout undo copies the old template back): the v1
    // ReplicaSet is reused and becomes revision 3.
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    let before: HashSet<String> = rss
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    deps.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:v1"}]}}}})))
        .await?;
    wait_complete(&c, "web", 10, "img:v1", 90).await?;
    let after: Vec<ReplicaSet> = rss.list(&ListParams::default()).await?.items;
    assert_eq!(
        after.len(),
        before.len(),
        "rollback reuses the old ReplicaSet"
    );
    let v1 = after
        .iter()
        .find(|r| r.spec.as_ref().and_then(|s| s.replicas) == Some(10))
        .context("active rs")?;
    let a = v1.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        a.get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        a.get("deployment.kubernetes.io/revision-history")
            .map(String::as_str),
        Some("1")
    );

    // Scale mid-rollout: start v3, then scale to 15 before it finishes.
    deps.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:v3"}]}}}})))
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 15}})),
    )
    .await?;
    wait_complete(&c, "web", 15, "img:v3", 120).await?;
    env.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_deployment_with_each_propagation_policy() -> anyhow::Result<()> {
    let env = Env::start(&["replicaset", "deployment", "garbagecollector"]).await?;
    let c = env.client();
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    for (name, policy) in [
        ("bg", PropagationPolicy::Background),
        ("fg", PropagationPolicy::Foreground),
        ("orphan", PropagationPolicy::Orphan),
    ] {
        deps.create(&PostParams::default(), &deployment(name, 2, "img:v1")?)
            .await?;
        wait_complete(&c, name, 2, "img:v1", 60).await?;
        deps.delete(
            name,
            &DeleteParams {
                propagation_policy: Some(policy.clone()),
                ..Default::default()
            },
        )
        .await?;
        let sel = ListParams::default().labels(&format!("app={name}"));
        match policy {
            PropagationPolicy::Orphan => {
                wait_for(30, "orphaned deployment gone", || async {
                    Ok(deps.get_opt(name).await?.is_none().then_some(()))
                })
                .await?;
                // The ReplicaSet and pods stay, without an owner.
                let rs = rss.list(&sel).await?.items;
                assert_eq!(rs.len(), 1);
                assert!(
                    rs[0]
                        .metadata
                        .owner_references
                        .as_ref()
                        .is_none_or(|o| o.is_empty()),
                    "{:?}",
                    rs[0].metadata.owner_references
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
                assert_eq!(
                    pods_of(&c, "default", name)
                        .await?
                        .iter()
                        .filter(|p| is_ready(p))
                        .count(),
                    2
                );
            }
            PropagationPolicy::Foreground => {
                // The owner waits (foregroundDeletion) until its dependents are gone.
                let d = deps.get_opt(name).await?;
                if let Some(d) = d {
                    assert!(
                        d.metadata
                            .finalizers
                            .unwrap_or_default()
                            .iter()
                            .any(|f| f == "foregroundDeletion")
                    );
                }
                wait_for(60, "foreground deletion done", || async {
                    let gone = deps.get_opt(name).await?.is_none();
                    let rs = rss.list(&sel).await?.items.is_empty();
                    let pods = pods_of(&c, "default", name).await?.is_empty();
                    if gone {
                        assert!(rs && pods, "owner deleted before its dependents");
                    }
                    Ok((gone && rs && pods).then_some(()))
                })
                .await?;
            }
            _ => {
                wait_for(60, "background deletion done", || async {
                    let gone = deps.get_opt(name).await?.is_none();
                    let rs = rss.list(&sel).await?.items.is_empty();
                    let pods = pods_of(&c, "default", name).await?.is_empty();
                    Ok((gone && rs && pods).then_some(()))
                })
                .await?;
            }
        }
    }
    env.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_namespace_empties_it() -> anyhow::Result<()> {
    let env = Env::start(&[
        "replicaset",
        "deployment",
        "garbagecollector",
        "namespace",
        "serviceaccount",
        "pvc-protection",
    ])
    .await?;
    let c = env.client();
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "doomed"}}))?,
    )
    .await?;
    // The serviceaccount controller adds `default`.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(c.clone(), "doomed");
    wait_for(30, "default service account", || async {
        Ok(sas.get_opt("default").await?.map(|_| ()))
    })
    .await?;
    // (kind, how many, the object's body but its name). Deployments bring their
    // ReplicaSets and Pods; the PVCs carry the pvc-protection finalizer, so the
    // namespace controller has to wait for the pvc-protection controller too.
    let created: Vec<(ApiResource, usize, serde_json::Value)> = vec![
        (
            ApiResource::erase::<ConfigMap>(&()),
            40,
            json!({"data": {"k": "v"}}),
        ),
        (
            ApiResource::erase::<Secret>(&()),
            30,
            json!({"stringData": {"k": "v"}}),
        ),
        (
            ApiResource::erase::<Service>(&()),
            10,
            json!({"spec": {"ports": [{"port": 80}]}}),
        ),
        (
            ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&()),
            5,
            json!({}),
        ),
        (
            ApiResource::erase::<Role>(&()),
            5,
            json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        ),
        (
            ApiResource::erase::<RoleBinding>(&()),
            5,
            json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r0"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "doomed"}]
            }),
        ),
        (
            ApiResource::erase::<PersistentVolumeClaim>(&()),
            5,
            json!({"spec": {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        (
            ApiResource::erase::<LimitRange>(&()),
            2,
            json!({"spec": {"limits": [{"type": "Container", "max": {"memory": "8Gi"}}]}}),
        ),
        (
            ApiResource::erase::<ResourceQuota>(&()),
            2,
            json!({"spec": {"hard": {"pods": "100"}}}),
        ),
        (
            ApiResource::erase::<Endpoints>(&()),
            3,
            json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
        ),
    ];
    for (resource, count, body) in &created {
        let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), "doomed", resource);
        for i in 0..*count {
            let mut object = body.clone();
            object["apiVersion"] = resource.api_version.clone().into();
            object["kind"] = resource.kind.clone().into();
            object["metadata"] = json!({"name": format!("{}{i}", resource.plural)});
            api.create(&PostParams::default(), &serde_json::from_value(object)?)
                .await
                .with_context(|| format!("create {} {i}", resource.kind))?;
        }
    }
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "doomed");
    for i in 0..3 {
        let mut d = deployment(&format!("d{i}"), 2, "img:v1")?;
        d.metadata.namespace = Some("doomed".into());
        deps.create(&PostParams::default(), &d).await?;
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), "doomed");
    wait_for(60, "pods in doomed", || async {
        Ok((pods.list(&ListParams::default()).await?.items.len() == 6).then_some(()))
    })
    .await?;
    nss.delete("doomed", &DeleteParams::default()).await?;
    wait_for(90, "namespace doomed deleted", || async {
        Ok(nss.get_opt("doomed").await?.is_none().then_some(()))
    })
    .await?;
    let mut every_kind: Vec<ApiResource> = created.into_iter().map(|(r, _, _)| r).collect();
    every_kind.extend([
        ApiResource::erase::<Deployment>(&()),
        ApiResource::erase::<ReplicaSet>(&()),
        ApiResource::erase::<Pod>(&()),
    ]);
    assert!(
        every_kind.len() >= 13,
        "the namespace held {} kinds",
        every_kind.len()
    );
    for resource in &every_kind {
        let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), "doomed", resource);
        let left: Vec<String> = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        assert!(
            left.is_empty(),
            "{} left in the deleted namespace: {left:?}",
            resource.kind
        );
    }
    env.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn endpoints_and_slices_follow_pod_readiness() -> anyhow::Result<()> {
    let env = Env::start(&["replicaset", "deployment", "endpoint", "endpointslice"]).await?;
    let c = env.client();
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    svcs.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))?)
    .await?;
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    deps.create(&PostParams::default(), &deployment("web", 3, "img:v1")?)
        .await?;
    wait_complete(&c, "web", 3, "img:v1", 60).await?;
    let eps: Api<Endpoints> = Api::namespaced(c.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");
    let counts = |eps: Api<Endpoints>, slices: Api<EndpointSlice>| async move {
        let e = eps.get_opt("web").await?;
        let (mut ready, mut not_ready) = (0, 0);
        for s in e.and_then(|e| e.subsets).unwrap_or_default() {
            ready += s.addresses.map(|a| a.len()).unwrap_or(0);
            not_ready += s.not_ready_addresses.map(|a| a.len()).unwrap_or(0);
        }
        let list = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await?
            .items;
        let (mut sr, mut snr) = (0, 0);
        for s in &list {
            assert_eq!(
                s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("endpointslice.kubernetes.io/managed-by"))
                    .map(String::as_str),
                Some("endpointslice-controller.k8s.io")
            );
            for e in &s.endpoints {
                if e.conditions.as_ref().and_then(|c| c.ready) == Some(true) {
                    sr += 1
                } else {
                    snr += 1
                }
            }
        }
        anyhow::Ok((ready, not_ready, sr, snr))
    };
    wait_for(30, "3 ready endpoints", || async {
        Ok((counts(eps.clone(), slices.clone()).await? == (3, 0, 3, 0)).then_some(()))
    })
    .await?;
    // One pod turns unready.
    let victim = pods_of(&c, "default", "web").await?[0]
        .metadata
        .name
        .clone()
        .context("name")?;
    env.unready.lock().insert(victim.clone());
    wait_for(30, "one not-ready endpoint", || async {
        Ok((counts(eps.clone(), slices.clone()).await? == (2, 1, 2, 1)).then_some(()))
    })
    .await?;
    env.unready.lock().remove(&victim);
    wait_for(30, "ready again", || async {
        Ok((counts(eps.clone(), slices.clone()).await? == (3, 0, 3, 0)).then_some(()))
    })
    .await?;
    // Scaling to zero empties them.
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await?;
    wait_for(30, "no endpoints", || async {
        Ok((counts(eps.clone(), slices.clone()).await? == (0, 0, 0, 0)).then_some(()))
    })
    .await?;
    env.stop().await;
    Ok(())
}

/// The `(reason, message)` of the core/v1 events about the ReplicaSet `name` in `ns`.
async fn replica_set_events(
    c: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(c.clone(), ns);
    let lp = ListParams::default().fields(&format!(
        "involvedObject.kind=ReplicaSet,involvedObject.name={name}"
    ));
    Ok(events
        .list(&lp)
        .await?
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

fn replica_set(name: &str, replicas: i32) -> anyhow::Result<ReplicaSet> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"rs": name}},
            "template": {
                "metadata": {"labels": {"rs": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}
            }
        }
    }))?)
}

/// As upstream's pod control: one `SuccessfulCreate` "Created pod: NAME" and one
/// `SuccessfulDelete` "Deleted pod: NAME" per pod, and a refused create quoted as the
/// apiserver's message (what client-go's error says), in the event and in the
/// `ReplicaFailure` condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_set_names_each_pod_in_its_events_and_quotes_a_refusal_as_the_server_said_it()
-> anyhow::Result<()> {
    let env = Env::start(&["replicaset"]).await?;
    let c = env.client();
    let sets: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    sets.create(&PostParams::default(), &replica_set("two", 2)?)
        .await?;
    let created = wait_for(30, "two pods and their events", || async {
        let pods = pods_named(&c, "default", "rs=two").await?;
        let notes: Vec<String> = replica_set_events(&c, "default", "two")
            .await?
            .into_iter()
            .filter(|(reason, _)| reason == "SuccessfulCreate")
            .map(|(_, note)| note)
            .collect();
        Ok((pods.len() == 2 && notes.len() == 2).then_some((pods, notes)))
    })
    .await?;
    let (pods, mut notes) = created;
    let mut want: Vec<String> = pods.iter().map(|p| format!("Created pod: {p}")).collect();
    notes.sort();
    want.sort();
    assert_eq!(notes, want);

    sets.patch(
        "two",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    let deleted = wait_for(30, "a SuccessfulDelete event", || async {
        let events = replica_set_events(&c, "default", "two").await?;
        Ok(events
            .into_iter()
            .find(|(reason, _)| reason == "SuccessfulDelete")
            .map(|(_, note)| note))
    })
    .await?;
    let victim = deleted
        .strip_prefix("Deleted pod: ")
        .context(deleted.clone())?;
    assert!(
        pods.iter().any(|p| p == victim),
        "{deleted} names none of {pods:?}"
    );

    // Pod Security admission refuses the pod in a `restricted` namespace.
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "strict", "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}}))?,
        )
        .await?;
    let strict: Api<ReplicaSet> = Api::namespaced(c.clone(), "strict");
    strict
        .create(&PostParams::default(), &replica_set("refused", 1)?)
        .await?;
    let note = wait_for(30, "a FailedCreate event", || async {
        let events = replica_set_events(&c, "strict", "refused").await?;
        Ok(events
            .into_iter()
            .find(|(reason, _)| reason == "FailedCreate")
            .map(|(_, note)| note))
    })
    .await?;
    assert!(
        note.starts_with("Error creating: pods \"refused-")
            && note.contains("is forbidden: violates PodSecurity \"restricted:latest\": ")
            && !note.contains("ApiError")
            && !note.contains("Status {"),
        "{note}"
    );
    let condition = wait_for(30, "the ReplicaFailure condition", || async {
        let rs = strict.get("refused").await?;
        Ok(rs
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "ReplicaFailure"))
    })
    .await?;
    assert_eq!(condition.reason.as_deref(), Some("FailedCreate"));
    let message = condition.message.unwrap_or_default();
    assert!(
        message.starts_with("pods \"refused-")
            && message.contains("is forbidden: violates PodSecurity"),
        "{message}"
    );
    env.stop().await;
    Ok(())
}

/// The names of the pods in `ns` with the labels `selector`.
async fn pods_named(c: &Client, ns: &str, selector: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<Pod> = Api::namespaced(c.clone(), ns);
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect())
}
