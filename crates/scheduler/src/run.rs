//! Wiring to an apiserver: shared informers (crates/client) feed the cache and queue,
//! binding goes through `pods/binding`, status through the API, events through the
//! client library's `EventRecorder` (`events.k8s.io/v1`, one recorder per profile,
//! aggregated and rate-limited there), and a small HTTP server answers `/healthz`,
//! `/readyz` and `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferrokube_client::error_message;
use ferrokube_client::events::{EventBroadcaster, EventBroadcasterOptions, EventRecorder};
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Binding, Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
    PodCondition, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::cache::Cache;
use crate::config::KubeSchedulerConfiguration;
use crate::framework::{
    ActionType, ClusterLister, EventResource, Framework, FrameworkError, Handle, PodBinder,
    VolumeBinder,
};
use crate::metrics::Metrics;
use crate::plugins::default_registry;
use crate::queue::{BackoffConfig, RealClock, SchedulingQueue};
use crate::scheduler::{PodEvent, Scheduler, SchedulerApi};
use crate::types::pod_namespace;

/// Errors starting the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("framework: {0}")]
    Framework(#[from] FrameworkError),
    #[error("informers did not sync: {0}")]
    Sync(String),
}

/// `pods/binding` POSTs in flight at once. Binding cycles run concurrently with
/// scheduling (as upstream's binding goroutines), so a fast scheduling loop can start
/// thousands of them; unbounded, each concurrent HTTP/1.1 request opens its own TLS
/// connection and the handshakes swamp client and apiserver alike. Bounded, they
/// queue here and reuse pooled connections. Only bindings take a permit: status
/// patches and evictions are awaited by the scheduling loop one at a time and must
/// not queue behind a burst of bindings.
pub const MAX_BINDINGS_IN_FLIGHT: usize = 32;

/// Runs `call` once one of `limit`'s permits is free.
pub async fn with_permit<T>(
    limit: &tokio::sync::Semaphore,
    call: impl std::future::Future<Output = T>,
) -> T {
    // The semaphore is never closed, so acquiring only waits.
    let _permit = limit.acquire().await;
    call.await
}

/// The cluster IO of a running scheduler.
pub struct KubeApi {
    client: kube::Client,
    /// Bounds the bindings in flight ([`MAX_BINDINGS_IN_FLIGHT`]).
    bindings: tokio::sync::Semaphore,
    /// One recorder per profile, reporting as the profile's scheduler name (as
    /// upstream's per-profile recorder factory does).
    recorders: HashMap<String, EventRecorder>,
}

/// The recorders of `profiles`, writing `events.k8s.io/v1` Events through
/// `broadcaster`; reportingInstance is `<scheduler name>-<hostname>` as upstream's
/// `NewRecorder` sets it.
pub fn profile_recorders<'a>(
    broadcaster: &EventBroadcaster,
    profiles: impl IntoIterator<Item = &'a str>,
) -> HashMap<String, EventRecorder> {
    let host = ferrokube_client::events::hostname();
    profiles
        .into_iter()
        .map(|name| {
            let instance = format!("{name}-{host}");
            (
                name.to_string(),
                broadcaster.new_recorder_with_instance(name, &instance),
            )
        })
        .collect()
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeApi")
    }
}

fn pods(client: &kube::Client, pod: &Pod) -> Api<Pod> {
    Api::namespaced(client.clone(), pod_namespace(pod))
}

#[async_trait::async_trait]
impl VolumeBinder for KubeApi {
    async fn bind_volume(
        &self,
        volume: &PersistentVolume,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), String> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        // The volume's resourceVersion makes this fail, not overwrite, if the volume
        // changed since the scheduler chose it.
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": volume.metadata.resource_version,
                "annotations": {ferrokube_api::persistentvolume::ANN_BOUND_BY_CONTROLLER: "yes"},
            },
            "spec": {"claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": claim.metadata.namespace,
                "name": claim.metadata.name,
                "uid": claim.metadata.uid,
                "resourceVersion": claim.metadata.resource_version,
            }},
        });
        Api::<PersistentVolume>::all(self.client.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| error_message(&e).into_owned())
    }

    async fn select_node(&self, claim: &PersistentVolumeClaim, node: &str) -> Result<(), String> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let patch = serde_json::json!({"metadata": {"annotations": {
            ferrokube_api::persistentvolume::ANN_SELECTED_NODE: node}}});
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &ns)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| error_message(&e).into_owned())
    }
}

#[async_trait::async_trait]
impl PodBinder for KubeApi {
    async fn bind(&self, pod: &Pod, node: &str) -> Result<(), String> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: pod.metadata.namespace.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..Default::default()
            },
        };
        let api = pods(&self.client, pod);
        with_permit(
            &self.bindings,
            api.create_subresource::<Binding, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            ),
        )
        .await
        .map(|_| ())
        .map_err(|e| error_message(&e).into_owned())
    }
}

#[async_trait::async_trait]
impl SchedulerApi for KubeApi {
    async fn update_pod_status(
        &self,
        pod: &Pod,
        condition: PodCondition,
        nominated: Option<String>,
    ) -> Result<(), String> {
        let mut conds: Vec<PodCondition> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        conds.retain(|c| c.type_ != condition.type_);
        conds.push(condition);
        let mut status = serde_json::json!({"conditions": conds});
        if let Some(n) = nominated {
            status["nominatedNodeName"] = if n.is_empty() {
                serde_json::Value::Null
            } else {
                n.into()
            };
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        pods(&self.client, pod)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": status})),
            )
            .await
            .map(|_| ())
            .map_err(|e| error_message(&e).into_owned())
    }

    async fn evict_victim(&self, pod: &Pod, scheduler_name: &str) -> Result<(), String> {
        let condition = PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("PreemptionByScheduler".into()),
            message: Some(format!(
                "{scheduler_name}: preempting to accommodate a higher priority pod"
            )),
            last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        };
        let marked = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == condition.type_))
            .is_some_and(|c| {
                (&c.status, &c.reason, &c.message)
                    == (&condition.status, &condition.reason, &condition.message)
            });
        if !marked {
            self.update_pod_status(pod, condition, None).await?;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let mut dp = DeleteParams::default();
        if let Some(uid) = pod.metadata.uid.clone() {
            dp.preconditions = Some(kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            });
        }
        pods(&self.client, pod)
            .delete(&name, &dp)
            .await
            .map(|_| ())
            .map_err(|e| error_message(&e).into_owned())
    }

    fn event(&self, profile: &str, ev: PodEvent<'_>) {
        let Some(recorder) = self.recorders.get(profile) else {
            tracing::debug!(profile, reason = ev.reason, "no event recorder for profile");
            return;
        };
        let related = ev.related.map(|p| p.object_ref(&()));
        recorder.event(
            &ev.regarding.object_ref(&()),
            related.as_ref(),
            ev.type_,
            ev.reason,
            ev.action,
            &ev.note,
        );
    }
}

/// Listers over the shared informers' stores.
pub struct Listers {
    pdbs: Store<PodDisruptionBudget>,
    pvcs: Store<PersistentVolumeClaim>,
    pvs: Store<PersistentVolume>,
    scs: Store<StorageClass>,
    namespaces: Store<Namespace>,
    services: Store<Service>,
    rcs: Store<ReplicationController>,
    rss: Store<ReplicaSet>,
    sss: Store<StatefulSet>,
}

impl ClusterLister for Listers {
    fn pdbs(&self, namespace: &str) -> Vec<Arc<PodDisruptionBudget>> {
        if namespace.is_empty() {
            self.pdbs.list()
        } else {
            self.pdbs.list_namespace(namespace)
        }
    }
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.pvcs.get_by_name(Some(namespace), name)
    }
    fn pvs(&self) -> Vec<Arc<PersistentVolume>> {
        self.pvs.list()
    }
    fn pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.pvs.get_by_name(None, name)
    }
    fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.scs.get_by_name(None, name)
    }
    fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.get_by_name(None, name)
    }
    fn services(&self, namespace: &str) -> Vec<Arc<Service>> {
        self.services.list_namespace(namespace)
    }
    fn replication_controllers(&self, namespace: &str) -> Vec<Arc<ReplicationController>> {
        self.rcs.list_namespace(namespace)
    }
    fn replica_sets(&self, namespace: &str) -> Vec<Arc<ReplicaSet>> {
        self.rss.list_namespace(namespace)
    }
    fn stateful_sets(&self, namespace: &str) -> Vec<Arc<StatefulSet>> {
        self.sss.list_namespace(namespace)
    }
}

/// A scheduler wired to an apiserver, not yet started.
pub struct Running {
    pub scheduler: Arc<Scheduler>,
    pub factory: SharedInformerFactory,
    pub ready: Arc<AtomicBool>,
    /// Writes the profiles' events; flushed when the scheduler stops.
    pub events: Arc<EventBroadcaster>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("scheduler", &self.scheduler)
            .finish()
    }
}

fn forward<K, F>(factory: &SharedInformerFactory, f: F)
where
    K: ferrokube_client::informer::InformerResource,
    F: Fn(Notification<K>) + Send + 'static,
{
    let mut stream = factory.informer::<K>().subscribe();
    tokio::spawn(async move {
        while let Some(n) = stream.next().await {
            f(n);
        }
    });
}

fn other<K: ferrokube_client::informer::InformerResource>(
    factory: &SharedInformerFactory,
    s: &Arc<Scheduler>,
    res: EventResource,
) {
    let s = s.clone();
    forward::<K, _>(factory, move |n| {
        let action = match n {
            Notification::Added { .. } => ActionType::Add,
            Notification::Updated { .. } => ActionType::Update,
            Notification::Deleted { .. } => ActionType::Delete,
        };
        s.on_other(res, action);
    });
}

/// Builds the scheduler for `config` over `client` and subscribes it to informers.
pub fn build(
    client: kube::Client,
    config: &KubeSchedulerConfiguration,
) -> Result<Running, RunError> {
    build_with_event_client(client.clone(), client, config)
}

/// [`build`], with events written through `event_client`: upstream gives them a client
/// (and so a rate limit) of their own, so that events never delay a binding.
pub fn build_with_event_client(
    client: kube::Client,
    event_client: kube::Client,
    config: &KubeSchedulerConfiguration,
) -> Result<Running, RunError> {
    let factory = SharedInformerFactory::new(client.clone());
    let listers = Arc::new(Listers {
        pdbs: factory.informer::<PodDisruptionBudget>().store(),
        pvcs: factory.informer::<PersistentVolumeClaim>().store(),
        pvs: factory.informer::<PersistentVolume>().store(),
        scs: factory.informer::<StorageClass>().store(),
        namespaces: factory.informer::<Namespace>().store(),
        services: factory.informer::<Service>().store(),
        rcs: factory.informer::<ReplicationController>().store(),
        rss: factory.informer::<ReplicaSet>().store(),
        sss: factory.informer::<StatefulSet>().store(),
    });
    let events = Arc::new(EventBroadcaster::new(
        event_client,
        EventBroadcasterOptions::default(),
    ));
    let recorders = profile_recorders(&events, config.profiles.iter().map(|p| p.name()));
    let api = Arc::new(KubeApi {
        client,
        recorders,
        bindings: tokio::sync::Semaphore::new(MAX_BINDINGS_IN_FLIGHT),
    });
    let handle = Handle {
        lister: listers,
        binder: Some(api.clone()),
        volume_binder: Some(api.clone()),
        parallelism: config.parallelism.unwrap_or(16).max(1) as usize,
    };
    let registry = default_registry();
    let mut fws = Vec::new();
    for p in &config.profiles {
        fws.push(Arc::new(Framework::new(&registry, p, handle.clone())?));
    }
    let backoff = BackoffConfig {
        initial: Duration::from_secs(config.pod_initial_backoff_seconds.unwrap_or(1).max(1) as u64),
        max: Duration::from_secs(config.pod_max_backoff_seconds.unwrap_or(10).max(1) as u64),
    };
    let queue = Arc::new(SchedulingQueue::new(&fws, backoff, Arc::new(RealClock)));
    let cache = Arc::new(Mutex::new(Cache::new(Duration::from_secs(15 * 60))));
    let sched = Arc::new(Scheduler::new(
        fws,
        cache,
        queue,
        api,
        Arc::new(Metrics::new()),
        config.percentage_of_nodes_to_score.unwrap_or(0),
    ));
    let s = sched.clone();
    forward::<Node, _>(&factory, move |n| match n {
        Notification::Added { obj, .. } => s.on_node(None, obj),
        Notification::Updated { old, new } => s.on_node(Some(&old), new),
        Notification::Deleted { obj, .. } => s.on_node_delete(&obj),
    });
    let s = sched.clone();
    forward::<Pod, _>(&factory, move |n| {
        let terminal = |p: &Pod| {
            matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded") | Some("Failed")
            )
        };
        match n {
            Notification::Added { obj, .. } if !terminal(&obj) => s.on_pod(None, obj),
            Notification::Updated { old, new } => {
                if terminal(&new) {
                    s.on_pod_delete(&new);
                } else {
                    s.on_pod(Some(&old), new);
                }
            }
            Notification::Deleted { obj, .. } => s.on_pod_delete(&obj),
            _ => {}
        }
    });
    other::<PersistentVolume>(&factory, &sched, EventResource::PersistentVolume);
    other::<PersistentVolumeClaim>(&factory, &sched, EventResource::PersistentVolumeClaim);
    other::<StorageClass>(&factory, &sched, EventResource::StorageClass);
    other::<PodDisruptionBudget>(&factory, &sched, EventResource::PodDisruptionBudget);
    other::<Namespace>(&factory, &sched, EventResource::Namespace);
    // Informers whose stores only serve listers still need starting.
    let _ = factory.informer::<Service>();
    let _ = factory.informer::<ReplicationController>();
    let _ = factory.informer::<ReplicaSet>();
    let _ = factory.informer::<StatefulSet>();
    Ok(Running {
        scheduler: sched,
        factory,
        ready: Arc::new(AtomicBool::new(false)),
        events,
    })
}

impl Running {
    /// Starts the informers, waits for them to sync, then schedules until `cancel`.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), RunError> {
        self.factory.start();
        self.factory
            .wait_for_cache_sync(Duration::from_secs(120))
            .await
            .map_err(|e| RunError::Sync(e.to_string()))?;
        self.ready.store(true, Ordering::SeqCst);
        let bg = tokio::spawn(self.scheduler.clone().run_background({
            let c = cancel.clone();
            async move { c.cancelled().await }
        }));
        let main = tokio::spawn(self.scheduler.clone().run());
        cancel.cancelled().await;
        self.scheduler.queue.close();
        let _ = main.await;
        let _ = bg.await;
        // Queued events are written before exit, but an unreachable apiserver must
        // not hold the shutdown.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.events.shutdown()).await;
        self.factory.shutdown().await;
        Ok(())
    }
}

/// What the scheduler's `--secure-port` answers (`ferrokube_client::serving`):
/// `/healthz` and `/livez` once running, `/readyz` once the informers synced, and
/// `/metrics`.
pub fn health_responder(
    scheduler: Arc<Scheduler>,
    ready: Arc<AtomicBool>,
) -> ferrokube_client::serving::Respond {
    Arc::new(move |path| match path {
        "/healthz" | "/livez" => (200, "ok".to_string()),
        "/readyz" if ready.load(Ordering::SeqCst) => (200, "ok".to_string()),
        "/readyz" => (500, "informers not synced".to_string()),
        "/metrics" => (200, scheduler.metrics.render(scheduler.queue.pending())),
        _ => (404, "404 page not found".to_string()),
    })
}

/// Labels for diagnostics.
pub fn sync_status(factory: &SharedInformerFactory) -> BTreeMap<String, bool> {
    factory.sync_status()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_in_flight_never_exceed_the_limit() {
        let limit = tokio::sync::Semaphore::new(4);
        let now = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let calls = (0..40).map(|_| {
            with_permit(&limit, async {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                now.fetch_sub(1, Ordering::SeqCst);
            })
        });
        futures::future::join_all(calls).await;
        assert_eq!(peak.load(Ordering::SeqCst), 4);
        assert_eq!(now.load(Ordering::SeqCst), 0);
    }
}
