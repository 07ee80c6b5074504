//! Ferrokube's kube-controller-manager controllers, with upstream semantics
//! (`pkg/controller/...` of kubernetes v1.33).
//!
//! Every controller has one shape ([`Controller`]): a name, the informers it needs
//! (subscribed in [`Controller::watch`], which maps events to work-queue keys), and a
//! level-triggered, idempotent [`Controller::reconcile`] of one key returning an
//! [`Action`]. [`run_controller`] drives it with N workers over a
//! [`ferrokube_client::workqueue::WorkQueue`] (one reconcile per key at a time,
//! rate-limited retries on error).
//!
//! One module per controller. Each splits pure plan functions (no IO, time passed in,
//! table-tested) from the async reconcile that reads informer caches and writes
//! through the API (`/status` for status):
//! [`replicaset`] (also drives ReplicationControllers), [`deployment`],
//! [`garbagecollector`], [`namespace`], [`serviceaccount`], [`endpoints`],
//! [`endpointslice`], [`endpointslicemirroring`] (custom Endpoints into slices),
//! [`nodelifecycle`], [`tainteviction`] (pods on NoExecute-tainted nodes evicted),
//! [`podgc`], [`rootcacertpublisher`],
//! [`disruption`] (PodDisruptionBudget status), [`resourcequota`] (quota status.used),
//! [`job`] (a Job's pods run to completion or failure),
//! [`cronjob`] (Jobs created on a cron schedule), [`daemonset`] (a pod on every
//! eligible node), [`statefulset`] (ordered pods with stable names and claims),
//! [`ttlafterfinished`] (finished Jobs deleted after their TTL), [`pvcprotection`] and
//! [`pvprotection`] (the storage protection finalizers removed once unused),
//! [`ephemeral`] (the claims of pods' generic ephemeral volumes, owned by the pods),
//! [`serviceaccounttoken`] (legacy tokens in `kubernetes.io/service-account-token`
//! Secrets), [`legacytokencleaner`] (those tokens invalidated, then deleted, after a
//! year unused), [`ttl`] (nodes' `node.alpha.kubernetes.io/ttl` by cluster size),
//! [`csrsigning`], [`csrapproving`] and [`csrcleaner`] (CertificateSigningRequests
//! signed with the cluster CA, kubelet client requests auto-approved, old ones deleted;
//! shared checks in [`csr`]), [`podautoscaler`] (HorizontalPodAutoscalers: targets
//! scaled through their scale subresource from resource metrics), [`persistentvolume`]
//! (PersistentVolumeClaims bound to PersistentVolumes, reclaim policies, external
//! provisioners asked for volumes), [`servicecidrs`] (the ServiceCIDR finalizer and
//! Ready condition; a deletion held while it would orphan a Service's cluster IP),
//! [`bootstrap`] (bootstrap token Secrets deleted once expired, and `cluster-info`
//! signed with the signing tokens; both off unless named in `--controllers`).
//! [`podcontrol`] creates and deletes the pods of ReplicaSets, DaemonSets and Jobs with
//! upstream's per-pod events.
//! [`clientbuilder`] gives each controller its client: the manager's, or its own
//! ServiceAccount's (`--use-service-account-credentials`).
//!
//! Layer: client side. Sits on `ferrokube-client` (informers, workqueue), kube-rs and
//! k8s-openapi, and on `ferrokube-protobuf`'s field table (no IO) to compare pod
//! templates as Go compares the structs. It must not depend on storage*, registry,
//! admission or apiserver;
//! `ferrokube-testing` is a dev-dependency only.

pub mod bootstrap;
pub mod clientbuilder;
pub mod cronjob;
pub mod csr;
pub mod csrapproving;
pub mod csrcleaner;
pub mod csrsigning;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod ephemeral;
pub mod events;
pub mod expectations;
pub mod garbagecollector;
pub mod hostpath;
pub mod job;
pub mod legacytokencleaner;
pub mod manager;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod podautoscaler;
pub mod podcontrol;
pub mod podgc;
pub mod pvcprotection;
pub mod pvprotection;
pub mod replicaset;
pub mod resourcequota;
pub mod rootcacertpublisher;
pub mod serviceaccount;
pub mod serviceaccounttoken;
pub mod servicecidrs;
pub mod statefulset;
pub mod tainteviction;
pub mod ttl;
pub mod ttlafterfinished;
pub mod util;
pub mod vapstatus;

use std::sync::Arc;
use std::time::Duration;

use ferrokube_client::informer::{
    InformerResource, Notification, SharedInformerFactory, object_key,
};
use ferrokube_client::workqueue::WorkQueue;
use tokio_util::sync::CancellationToken;

/// Errors of a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the apiserver failed. Reads as client-go's error does (the
    /// Status message), since conditions quote it.
    #[error("{}", ferrokube_client::error_message(.0))]
    Kube(#[from] kube::Error),
    /// The client library failed (informer sync, index lookups).
    #[error("client: {0}")]
    Client(#[from] ferrokube_client::Error),
    /// Serializing or deserializing an object failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A malformed key or object that retrying will not fix.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Several writes of one reconcile failed.
    #[error("{0} of the writes failed; first: {1}")]
    Partial(usize, Box<Error>),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the runner does with a key after a successful reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing more until an event enqueues the key again.
    Done,
    /// Reconcile again after this delay (e.g. minReadySeconds, progress deadline).
    RequeueAfter(Duration),
}

/// How a reconcile whose last step was the write `result` ends: done, also when the
/// object went away meanwhile (nothing is left to reconcile); other errors are retried.
pub fn done_unless_failed<T>(result: kube::Result<T>) -> Result<Action> {
    match result {
        Ok(_) => Ok(Action::Done),
        Err(e) if replicaset::is_not_found(&e) => Ok(Action::Done),
        Err(e) => Err(e.into()),
    }
}

/// Writes a status through `/status` with `update` (what the controller roles grant,
/// not `patch`), retried once on a fresh copy after a conflict, as upstream's
/// ReplicaSet, DaemonSet and StatefulSet status updates are: `set_status` puts the
/// computed status on whichever copy is sent. An object gone meanwhile leaves nothing
/// to write.
pub async fn replace_status_retrying<K>(
    api: &kube::Api<K>,
    obj: &K,
    set_status: impl Fn(&mut K),
) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let mut current = obj.clone();
    for attempt in 0..2 {
        set_status(&mut current);
        match api
            .replace_status(&name, &kube::api::PostParams::default(), &current)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if replicaset::is_not_found(&e) => return Ok(()),
            Err(e) if attempt == 0 && replicaset::is_conflict(&e) => {
                current = api.get(&name).await?
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Queues the key of every added or updated `K` that `wanted` accepts: the watch of a
/// controller whose work ends with the object (a deletion leaves nothing to reconcile).
pub fn enqueue_live<K: InformerResource>(
    factory: &SharedInformerFactory,
    queue: &WorkQueue<String>,
    wanted: impl Fn(&K) -> bool + Send + 'static,
) {
    let q = queue.clone();
    factory.informer::<K>().add_event_handler(
        move |n: Notification<K>| {
            if !matches!(n, Notification::Deleted { .. }) && wanted(&**n.object()) {
                q.add(object_key(&**n.object()));
            }
        },
        None,
    );
}

impl Action {
    /// The earlier of two actions (`Done` is "never").
    pub fn min(self, other: Action) -> Action {
        match (self, other) {
            (Action::Done, a) | (a, Action::Done) => a,
            (Action::RequeueAfter(a), Action::RequeueAfter(b)) => Action::RequeueAfter(a.min(b)),
        }
    }
}

/// The one shape of every controller.
#[async_trait::async_trait]
pub trait Controller: Send + Sync + 'static {
    /// Upstream's controller name (`replicaset`, `deployment`, `garbage-collector`...).
    fn name(&self) -> &'static str;

    /// Takes the informers it needs from `factory` and subscribes to them, mapping
    /// every event to the keys it affects (`queue.add`). Called once, before the
    /// factory starts.
    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>);

    /// Brings the world in line with the desired state of `key`. Idempotent.
    async fn reconcile(&self, key: &str) -> Result<Action>;
}

/// Runs `workers` workers of `controller` over `queue` until `cancel`; then drains.
pub async fn run_controller(
    controller: Arc<dyn Controller>,
    queue: WorkQueue<String>,
    workers: usize,
    cancel: CancellationToken,
) {
    let mut tasks = Vec::new();
    for _ in 0..workers.max(1) {
        let c = controller.clone();
        let q = queue.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(key) = q.get().await {
                process(&*c, &q, key).await;
            }
        }));
    }
    cancel.cancelled().await;
    queue.shutdown();
    for t in tasks {
        let _ = t.await;
    }
}

/// One reconcile and its bookkeeping (client-go's `processNextWorkItem`).
pub async fn process(controller: &dyn Controller, queue: &WorkQueue<String>, key: String) {
    match controller.reconcile(&key).await {
        Ok(Action::Done) => queue.forget(&key),
        Ok(Action::RequeueAfter(d)) => {
            queue.forget(&key);
            queue.add_after(key.clone(), d);
        }
        Err(e) => {
            tracing::warn!(controller = controller.name(), %key, error = %e, "reconcile failed; requeue");
            queue.add_rate_limited(key.clone());
        }
    }
    queue.done(&key);
}

/// Splits a `namespace/name` key (or a cluster-scoped `name`).
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// A status counter as upstream's controllers write it: Go's `omitempty` leaves a zero
/// out, and the apiserver stores it so whoever sent it, so a status computed with
/// `Some(0)` would never equal the stored one and be written again on every sync.
pub fn omitempty(count: i32) -> Option<i32> {
    (count != 0).then_some(count)
}
