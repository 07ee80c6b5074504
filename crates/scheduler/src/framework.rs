//! The scheduling framework (`pkg/scheduler/framework`): one [`Plugin`] shape with typed
//! extension points, [`CycleState`], the plugin [`Registry`] by upstream name, and the
//! per-profile [`Framework`] that runs the extension points in order.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use parking_lot::Mutex;
use rayon::prelude::*;
use serde_json::Value;

use crate::cache::{NodeInfo, Snapshot};
use crate::config::{ExtensionPoint, PluginRef, Profile, merged_plugins};
use crate::status::{Code, NodeToStatus, Status};
use crate::types::{PodInfo, QueuedPodInfo};

pub const MAX_NODE_SCORE: i64 = 100;
pub const MIN_NODE_SCORE: i64 = 0;
pub const MAX_TOTAL_SCORE: i64 = i64::MAX;

/// Errors building a framework from a profile.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameworkError {
    #[error("plugin {0:?} does not exist")]
    UnknownPlugin(String),
    #[error("plugin {0:?} does not extend {1:?} plugin")]
    WrongExtensionPoint(String, String),
    #[error("invalid args for plugin {0}: {1}")]
    InvalidArgs(String, String),
    #[error("{0}")]
    Invalid(String),
}

/// Per-cycle plugin state, keyed by plugin-chosen strings (`framework.CycleState`).
///
/// A cycle holds a handful of entries that plugins read once per node: a vector
/// searched by key beats hashing the key (SipHash) on every read.
#[derive(Default)]
pub struct CycleState {
    data: Vec<(&'static str, Box<dyn StateData>)>,
    pub skip_filter_plugins: PluginSet,
    pub skip_score_plugins: PluginSet,
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleState")
            .field(
                "keys",
                &self.data.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A few plugin names (those a PreFilter or PreScore skip), checked once per plugin
/// per node: a short vector, no hashing, no allocation per name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSet(Vec<&'static str>);

impl PluginSet {
    /// Adds `name`; false if it was there already.
    pub fn insert(&mut self, name: &'static str) -> bool {
        if self.contains(name) {
            return false;
        }
        self.0.push(name);
        true
    }
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(&name)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().copied()
    }
}

/// What a plugin stores in [`CycleState`]; anything `Clone + Send + Sync`.
pub trait StateData: Any + Send + Sync {
    fn clone_data(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, (**v).clone_data()))
                .collect(),
            skip_filter_plugins: self.skip_filter_plugins.clone(),
            skip_score_plugins: self.skip_score_plugins.clone(),
        }
    }
}

impl CycleState {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn write<T: StateData>(&mut self, key: &'static str, v: T) {
        let v: Box<dyn StateData> = Box::new(v);
        match self.data.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = v,
            None => self.data.push((key, v)),
        }
    }
    pub fn read<T: 'static>(&self, key: &'static str) -> Option<&T> {
        self.data
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, b)| (**b).as_any().downcast_ref())
    }
    pub fn read_mut<T: 'static>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data
            .iter_mut()
            .find(|(k, _)| *k == key)
            .and_then(|(_, b)| (**b).as_any_mut().downcast_mut())
    }
}

/// Read-only cluster objects some plugins need besides nodes and pods (listers).
pub trait ClusterLister: Send + Sync {
    fn pdbs(&self, _namespace: &str) -> Vec<Arc<PodDisruptionBudget>> {
        vec![]
    }
    fn pvc(&self, _namespace: &str, _name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        None
    }
    fn pvs(&self) -> Vec<Arc<PersistentVolume>> {
        vec![]
    }
    fn pv(&self, _name: &str) -> Option<Arc<PersistentVolume>> {
        None
    }
    fn storage_class(&self, _name: &str) -> Option<Arc<StorageClass>> {
        None
    }
    fn namespace(&self, _name: &str) -> Option<Arc<Namespace>> {
        None
    }
    fn services(&self, _namespace: &str) -> Vec<Arc<Service>> {
        vec![]
    }
    fn replication_controllers(&self, _namespace: &str) -> Vec<Arc<ReplicationController>> {
        vec![]
    }
    fn replica_sets(&self, _namespace: &str) -> Vec<Arc<ReplicaSet>> {
        vec![]
    }
    fn stateful_sets(&self, _namespace: &str) -> Vec<Arc<StatefulSet>> {
        vec![]
    }
}

/// A lister with nothing in it.
#[derive(Debug, Default, Clone, Copy)]
pub struct EmptyLister;
impl ClusterLister for EmptyLister {}

/// Pods nominated to run on nodes (preemptors waiting for their victims to leave).
pub trait Nominator: Send + Sync {
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>>;
    /// Whether any pod is nominated anywhere: when not, a cycle skips the
    /// per-node lookups (each one takes the queue's lock).
    fn has_nominated_pods(&self) -> bool {
        true
    }
}

/// No nominated pods.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoNominator;
impl Nominator for NoNominator {
    fn nominated_pods_for_node(&self, _node: &str) -> Vec<Arc<PodInfo>> {
        vec![]
    }
    fn has_nominated_pods(&self) -> bool {
        false
    }
}

/// Binds a pod to a node through the API (`pods/binding`); used by DefaultBinder.
#[async_trait::async_trait]
pub trait PodBinder: Send + Sync {
    async fn bind(&self, pod: &Pod, node: &str) -> Result<(), String>;
}

/// The API writes of VolumeBinding's PreBind (upstream `SchedulerVolumeBinder.BindPodVolumes`).
#[async_trait::async_trait]
pub trait VolumeBinder: Send + Sync {
    /// Points the volume's `claimRef` at the claim, as the binder controller would;
    /// the controller then completes the claim's side.
    async fn bind_volume(
        &self,
        volume: &PersistentVolume,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), String>;
    /// Tells the claim's provisioner the node it is to provision for
    /// (`volume.kubernetes.io/selected-node`).
    async fn select_node(&self, claim: &PersistentVolumeClaim, node: &str) -> Result<(), String>;
}

/// What plugin factories get: the listers, the binders, parallelism.
#[derive(Clone)]
pub struct Handle {
    pub lister: Arc<dyn ClusterLister>,
    pub binder: Option<Arc<dyn PodBinder>>,
    pub volume_binder: Option<Arc<dyn VolumeBinder>>,
    pub parallelism: usize,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("parallelism", &self.parallelism)
            .finish()
    }
}

impl Default for Handle {
    fn default() -> Self {
        Handle {
            lister: Arc::new(EmptyLister),
            binder: None,
            volume_binder: None,
            parallelism: 16,
        }
    }
}

/// A cluster event kind that may make pods schedulable (`framework.ClusterEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventResource {
    Pod,
    AssignedPod,
    UnscheduledPod,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    Namespace,
    PodDisruptionBudget,
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionType {
    Add,
    Update,
    Delete,
    All,
}

/// A cluster event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    pub resource: EventResource,
    pub action: ActionType,
    pub label: &'static str,
}

impl ClusterEvent {
    pub const fn new(resource: EventResource, action: ActionType, label: &'static str) -> Self {
        ClusterEvent {
            resource,
            action,
            label,
        }
    }
    /// Whether `self` (a registered interest) covers the event `e`.
    pub fn covers(&self, e: &ClusterEvent) -> bool {
        let res = self.resource == EventResource::Any
            || self.resource == e.resource
            || (self.resource == EventResource::Pod
                && matches!(
                    e.resource,
                    EventResource::AssignedPod | EventResource::UnscheduledPod
                ));
        res && (self.action == ActionType::All || self.action == e.action)
    }
}

pub const EVENT_NODE_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::Node, ActionType::Add, "NodeAdd");
pub const EVENT_NODE_UPDATE: ClusterEvent =
    ClusterEvent::new(EventResource::Node, ActionType::Update, "NodeUpdate");
pub const EVENT_ASSIGNED_POD_ADD: ClusterEvent = ClusterEvent::new(
    EventResource::AssignedPod,
    ActionType::Add,
    "AssignedPodAdd",
);
pub const EVENT_ASSIGNED_POD_UPDATE: ClusterEvent = ClusterEvent::new(
    EventResource::AssignedPod,
    ActionType::Update,
    "AssignedPodUpdate",
);
pub const EVENT_ASSIGNED_POD_DELETE: ClusterEvent = ClusterEvent::new(
    EventResource::AssignedPod,
    ActionType::Delete,
    "AssignedPodDelete",
);
pub const EVENT_UNSCHEDULED_POD_UPDATE: ClusterEvent = ClusterEvent::new(
    EventResource::UnscheduledPod,
    ActionType::Update,
    "UnscheduledPodUpdate",
);
pub const EVENT_FORCE_ACTIVATE: ClusterEvent =
    ClusterEvent::new(EventResource::Any, ActionType::All, "ForceActivate");
pub const EVENT_UNSCHEDULABLE_TIMEOUT: ClusterEvent =
    ClusterEvent::new(EventResource::Any, ActionType::All, "UnschedulableTimeout");

/// A queueing hint's verdict (`framework.QueueingHint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueingHint {
    Queue,
    Skip,
}

/// The objects of an event, for queueing hints.
#[derive(Debug, Clone, Copy)]
pub enum EventObject<'a> {
    Node(&'a Node),
    Pod(&'a Pod),
    None,
}

pub type QueueingHintFn =
    Arc<dyn Fn(&Pod, EventObject<'_>, EventObject<'_>) -> QueueingHint + Send + Sync>;

/// A registered interest with an optional hint (`ClusterEventWithHint`).
#[derive(Clone)]
pub struct ClusterEventWithHint {
    pub event: ClusterEvent,
    pub hint: Option<QueueingHintFn>,
}

impl std::fmt::Debug for ClusterEventWithHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterEventWithHint")
            .field("event", &self.event)
            .field("hint", &self.hint.is_some())
            .finish()
    }
}

impl ClusterEventWithHint {
    pub fn always(event: ClusterEvent) -> Self {
        ClusterEventWithHint { event, hint: None }
    }
    pub fn with_hint(
        event: ClusterEvent,
        f: impl Fn(&Pod, EventObject<'_>, EventObject<'_>) -> QueueingHint + Send + Sync + 'static,
    ) -> Self {
        ClusterEventWithHint {
            event,
            hint: Some(Arc::new(f)),
        }
    }
}

/// A node's score from one plugin or in total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScore {
    pub name: String,
    pub score: i64,
}

/// PreFilter may narrow the nodes to consider (`PreFilterResult`); `None` = all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    pub node_names: Option<HashSet<String>>,
}

impl PreFilterResult {
    pub fn all_nodes(&self) -> bool {
        self.node_names.is_none()
    }
    /// Intersection of two results.
    pub fn merge(self, other: Option<PreFilterResult>) -> PreFilterResult {
        let Some(o) = other else { return self };
        match (self.node_names, o.node_names) {
            (None, x) | (x, None) => PreFilterResult { node_names: x },
            (Some(a), Some(b)) => PreFilterResult {
                node_names: Some(a.intersection(&b).cloned().collect()),
            },
        }
    }
}

/// What PostFilter (preemption) decided: the node to nominate and the pods to evict.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    pub nominated_node_name: Option<String>,
    pub victims: Vec<Arc<Pod>>,
    /// Lower-priority pods nominated to the same node whose nomination is cleared.
    pub clear_nominated: Vec<Arc<Pod>>,
}

/// What a PostFilter plugin sees.
pub struct PostFilterContext<'a> {
    pub fw: &'a Framework,
    pub state: &'a CycleState,
    pub pod: &'a Arc<PodInfo>,
    pub snapshot: &'a Snapshot,
    pub statuses: &'a NodeToStatus,
    pub nominator: &'a dyn Nominator,
}

// ---- Extension point traits -------------------------------------------------------

pub trait PreEnqueuePlugin: Send + Sync {
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}
pub trait QueueSortPlugin: Send + Sync {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}
pub trait PreFilterPlugin: Send + Sync {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status);
    /// Whether [`add_pod`](Self::add_pod)/[`remove_pod`](Self::remove_pod) update the
    /// state (`PreFilterExtensions`).
    fn has_extensions(&self) -> bool {
        false
    }
    fn add_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _add: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _remove: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
}
pub trait FilterPlugin: Send + Sync {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}
pub trait PostFilterPlugin: Send + Sync {
    fn post_filter(&self, ctx: &PostFilterContext<'_>) -> (Option<PostFilterResult>, Status);
}
pub trait PreScorePlugin: Send + Sync {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status;
}
pub trait ScorePlugin: Send + Sync {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status);
    fn has_normalize(&self) -> bool {
        false
    }
    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _scores: &mut [NodeScore],
    ) -> Status {
        Status::success()
    }
}
pub trait ReservePlugin: Send + Sync {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}
pub trait PermitPlugin: Send + Sync {
    /// Success, a rejection, or Wait with a timeout.
    fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}
#[async_trait::async_trait]
pub trait PreBindPlugin: Send + Sync {
    async fn pre_bind(&self, pod: &PodInfo, node: &str) -> Status;
}
#[async_trait::async_trait]
pub trait BindPlugin: Send + Sync {
    /// Skip means "not mine, ask the next binder".
    async fn bind(&self, pod: &PodInfo, node: &str) -> Status;
}
#[async_trait::async_trait]
pub trait PostBindPlugin: Send + Sync {
    async fn post_bind(&self, pod: &PodInfo, node: &str);
}

/// The one plugin shape: a name, the events that can make a pod it rejected
/// schedulable, and an accessor per extension point it implements.
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![]
    }
    fn pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
}

fn implements(p: &dyn Plugin, ep: ExtensionPoint) -> bool {
    match ep {
        ExtensionPoint::PreEnqueue => p.pre_enqueue().is_some(),
        ExtensionPoint::QueueSort => p.queue_sort().is_some(),
        ExtensionPoint::PreFilter => p.pre_filter().is_some(),
        ExtensionPoint::Filter => p.filter().is_some(),
        ExtensionPoint::PostFilter => p.post_filter().is_some(),
        ExtensionPoint::PreScore => p.pre_score().is_some(),
        ExtensionPoint::Score => p.score().is_some(),
        ExtensionPoint::Reserve => p.reserve().is_some(),
        ExtensionPoint::Permit => p.permit().is_some(),
        ExtensionPoint::PreBind => p.pre_bind().is_some(),
        ExtensionPoint::Bind => p.bind().is_some(),
        ExtensionPoint::PostBind => p.post_bind().is_some(),
    }
}

/// Builds a plugin from its args (`pluginConfig[].args`, `None` when absent).
pub type PluginFactory =
    Arc<dyn Fn(Option<&Value>, &Handle) -> Result<Arc<dyn Plugin>, FrameworkError> + Send + Sync>;

/// Plugin factories by upstream name (`runtime.Registry`).
#[derive(Clone, Default)]
pub struct Registry {
    factories: HashMap<String, PluginFactory>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.factories.keys().collect();
        names.sort();
        f.debug_struct("Registry").field("plugins", &names).finish()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn register(
        &mut self,
        name: &str,
        f: impl Fn(Option<&Value>, &Handle) -> Result<Arc<dyn Plugin>, FrameworkError>
        + Send
        + Sync
        + 'static,
    ) {
        self.factories.insert(name.to_string(), Arc::new(f));
    }
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.factories.keys().cloned().collect();
        v.sort();
        v
    }
}

struct Weighted {
    plugin: Arc<dyn Plugin>,
    weight: i64,
}

/// One profile's plugins, in order per extension point (`frameworkImpl`).
pub struct Framework {
    pub profile_name: String,
    pub percentage_of_nodes_to_score: Option<i32>,
    pub handle: Handle,
    plugins: HashMap<String, Arc<dyn Plugin>>,
    points: HashMap<ExtensionPoint, Vec<Arc<dyn Plugin>>>,
    score: Vec<Weighted>,
    waiting: Mutex<HashMap<String, WaitingPod>>,
    waiting_rx: Mutex<WaitingReceivers>,
}

type WaitingReceivers = HashMap<String, (tokio::sync::oneshot::Receiver<Status>, Duration)>;

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework")
            .field("profile", &self.profile_name)
            .field("plugins", &self.plugin_names(ExtensionPoint::Filter))
            .finish()
    }
}

struct WaitingPod {
    pending: HashSet<String>,
    tx: Option<tokio::sync::oneshot::Sender<Status>>,
}

impl Framework {
    /// Builds the framework of `profile` from `registry` (`NewFramework`).
    pub fn new(
        registry: &Registry,
        profile: &Profile,
        handle: Handle,
    ) -> Result<Self, FrameworkError> {
        let merged = merged_plugins(profile);
        // Instantiate every plugin named anywhere.
        let mut names: Vec<String> = merged
            .multi_point
            .enabled
            .iter()
            .map(|p| p.name.clone())
            .collect();
        for ep in ExtensionPoint::ALL {
            names.extend(merged.set(ep).enabled.iter().map(|p| p.name.clone()));
        }
        let mut plugins: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
        for n in names {
            if plugins.contains_key(&n) {
                continue;
            }
            let f = registry
                .factories
                .get(&n)
                .ok_or_else(|| FrameworkError::UnknownPlugin(n.clone()))?;
            plugins.insert(n.clone(), f(profile.args(&n), &handle)?);
        }
        let mut points: HashMap<ExtensionPoint, Vec<Arc<dyn Plugin>>> = HashMap::new();
        let mut weights: HashMap<String, i64> = HashMap::new();
        for ep in ExtensionPoint::ALL {
            let set = merged.set(ep);
            let disabled_all = set.disabled.iter().any(|d| d.name == "*");
            let specific: Vec<&PluginRef> = set.enabled.iter().collect();
            for s in &specific {
                if !implements(plugins[&s.name].as_ref(), ep) {
                    return Err(FrameworkError::WrongExtensionPoint(
                        s.name.clone(),
                        format!("{ep:?}"),
                    ));
                }
            }
            let mut override_: Vec<&PluginRef> = Vec::new();
            let mut multi: Vec<&PluginRef> = Vec::new();
            if !disabled_all {
                for mp in &merged.multi_point.enabled {
                    if !implements(plugins[&mp.name].as_ref(), ep)
                        || set.disabled.iter().any(|d| d.name == mp.name)
                    {
                        continue;
                    }
                    if specific.iter().any(|s| s.name == mp.name) {
                        override_.push(mp);
                        continue;
                    }
                    multi.push(mp);
                }
            }
            let mut ordered: Vec<&PluginRef> = Vec::new();
            for s in &specific {
                if override_.iter().any(|o| o.name == s.name) {
                    ordered.push(s);
                }
            }
            ordered.extend(multi.iter().copied());
            for s in &specific {
                if !ordered.iter().any(|o| o.name == s.name) {
                    ordered.push(s);
                }
            }
            if ep == ExtensionPoint::Score {
                for r in &ordered {
                    // A specific weight wins over multiPoint's; 0/unset means 1.
                    let w = specific
                        .iter()
                        .find(|s| s.name == r.name)
                        .and_then(|s| s.weight)
                        .or(r.weight)
                        .filter(|w| *w != 0)
                        .unwrap_or(1);
                    weights.insert(r.name.clone(), w as i64);
                }
            }
            points.insert(
                ep,
                ordered.iter().map(|r| plugins[&r.name].clone()).collect(),
            );
        }
        let qs = points[&ExtensionPoint::QueueSort].len();
        if qs != 1 {
            return Err(FrameworkError::Invalid(format!(
                "one queue sort plugin required for profile with scheduler name {:?}, got {qs}",
                profile.name()
            )));
        }
        if points[&ExtensionPoint::Bind].is_empty() {
            return Err(FrameworkError::Invalid(format!(
                "at least one bind plugin is needed for profile with scheduler name {:?}",
                profile.name()
            )));
        }
        let score = points[&ExtensionPoint::Score]
            .iter()
            .map(|p| Weighted {
                plugin: p.clone(),
                weight: weights[p.name()],
            })
            .collect();
        Ok(Framework {
            profile_name: profile.name().to_string(),
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            handle,
            plugins,
            points,
            score,
            waiting: Mutex::new(HashMap::new()),
            waiting_rx: Mutex::new(HashMap::new()),
        })
    }

    pub fn plugin_names(&self, ep: ExtensionPoint) -> Vec<&'static str> {
        self.points
            .get(&ep)
            .into_iter()
            .flatten()
            .map(|p| p.name())
            .collect()
    }

    pub fn score_weights(&self) -> Vec<(&'static str, i64)> {
        self.score
            .iter()
            .map(|w| (w.plugin.name(), w.weight))
            .collect()
    }

    pub fn plugin(&self, name: &str) -> Option<&Arc<dyn Plugin>> {
        self.plugins.get(name)
    }

    fn at(&self, ep: ExtensionPoint) -> &[Arc<dyn Plugin>] {
        self.points.get(&ep).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Events each enabled plugin registered, by plugin name.
    pub fn events_to_register(&self) -> HashMap<String, Vec<ClusterEventWithHint>> {
        self.plugins
            .iter()
            .map(|(n, p)| (n.clone(), p.events_to_register()))
            .collect()
    }

    pub fn pre_enqueue_plugins(&self) -> Vec<Arc<dyn Plugin>> {
        self.at(ExtensionPoint::PreEnqueue).to_vec()
    }

    /// The queue sort plugin.
    pub fn queue_sort(&self) -> Arc<dyn Plugin> {
        self.at(ExtensionPoint::QueueSort)[0].clone()
    }

    /// `RunPreEnqueuePlugins`: the first rejection, with its plugin.
    pub fn run_pre_enqueue(&self, pod: &Pod) -> Status {
        for p in self.at(ExtensionPoint::PreEnqueue) {
            let s = p
                .pre_enqueue()
                .map(|x| x.pre_enqueue(pod))
                .unwrap_or_default();
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// `RunPreFilterPlugins`: merged result, first failure, and the plugins that
    /// rejected.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status, HashSet<String>) {
        let mut result: Option<PreFilterResult> = None;
        let mut rejectors = HashSet::new();
        let mut returned_plugins = Vec::new();
        for p in self.at(ExtensionPoint::PreFilter) {
            let Some(pf) = p.pre_filter() else { continue };
            let (r, s) = pf.pre_filter(state, pod, snapshot);
            if s.is_skip() {
                state.skip_filter_plugins.insert(p.name());
                continue;
            }
            if !s.is_success() {
                let s = s.with_plugin(p.name());
                if s.is_rejected() {
                    rejectors.insert(p.name().to_string());
                }
                return (None, s, rejectors);
            }
            if let Some(r) = r.as_ref().filter(|r| !r.all_nodes()) {
                returned_plugins.push(p.name());
                let _ = r;
            }
            result = match result {
                None => r,
                Some(acc) => Some(acc.merge(r)),
            };
            if result
                .as_ref()
                .and_then(|r| r.node_names.as_ref())
                .is_some_and(|n| n.is_empty())
            {
                let msg = if returned_plugins.len() > 1 {
                    format!(
                        "node(s) didn't satisfy plugin(s) {:?} simultaneously",
                        returned_plugins
                    )
                } else {
                    format!(
                        "node(s) didn't satisfy plugin {}",
                        returned_plugins.join("")
                    )
                };
                for n in &returned_plugins {
                    rejectors.insert(n.to_string());
                }
                return (None, Status::unresolvable(msg), rejectors);
            }
        }
        (result, Status::success(), rejectors)
    }

    /// `RunPreFilterExtensionAddPod`.
    pub fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in self.at(ExtensionPoint::PreFilter) {
            if state.skip_filter_plugins.contains(p.name()) {
                continue;
            }
            if let Some(pf) = p.pre_filter().filter(|pf| pf.has_extensions()) {
                let s = pf.add_pod(state, pod, add, node);
                if !s.is_success() {
                    return s.with_plugin(p.name());
                }
            }
        }
        Status::success()
    }

    /// `RunPreFilterExtensionRemovePod`.
    pub fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in self.at(ExtensionPoint::PreFilter) {
            if state.skip_filter_plugins.contains(p.name()) {
                continue;
            }
            if let Some(pf) = p.pre_filter().filter(|pf| pf.has_extensions()) {
                let s = pf.remove_pod(state, pod, remove, node);
                if !s.is_success() {
                    return s.with_plugin(p.name());
                }
            }
        }
        Status::success()
    }

    /// `RunFilterPlugins`: the first non-success status, with its plugin.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for p in self.at(ExtensionPoint::Filter) {
            if state.skip_filter_plugins.contains(p.name()) {
                continue;
            }
            let Some(f) = p.filter() else { continue };
            let s = f.filter(state, pod, node);
            if !s.is_success() {
                let mut s = s.with_plugin(p.name());
                if !s.is_rejected() && !s.is_error() {
                    s = Status::error(format!("filter returned {s}")).with_plugin(p.name());
                }
                return s;
            }
        }
        Status::success()
    }

    /// `RunFilterPluginsWithNominatedPods`: filters pass with and without the pods
    /// nominated to this node of priority >= the pod's.
    pub fn run_filter_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominator: &dyn Nominator,
    ) -> Status {
        let prio = crate::types::pod_priority(&pod.pod);
        let nominated: Vec<Arc<PodInfo>> = nominator
            .nominated_pods_for_node(node.name())
            .into_iter()
            .filter(|p| crate::types::pod_priority(&p.pod) >= prio && p.uid() != pod.uid())
            .collect();
        if !nominated.is_empty() {
            let mut st = state.clone();
            let mut ni = node.clone();
            for n in &nominated {
                ni.add_pod(n.clone());
                let s = self.run_pre_filter_add_pod(&mut st, pod, n, &ni);
                if !s.is_success() {
                    return s;
                }
            }
            let s = self.run_filter(&st, pod, &ni);
            if !s.is_success() {
                return s;
            }
        }
        self.run_filter(state, pod, node)
    }

    pub fn has_post_filter(&self) -> bool {
        !self.at(ExtensionPoint::PostFilter).is_empty()
    }

    /// `RunPostFilterPlugins`: the first success wins; otherwise the rejections'
    /// messages.
    pub fn run_post_filter(
        &self,
        ctx: &PostFilterContext<'_>,
    ) -> (Option<PostFilterResult>, Status) {
        let mut reasons = Vec::new();
        let mut result = None;
        for p in self.at(ExtensionPoint::PostFilter) {
            let Some(pf) = p.post_filter() else { continue };
            let (r, s) = pf.post_filter(ctx);
            if s.is_success() {
                return (r, s);
            }
            if s.code == Code::UnschedulableAndUnresolvable {
                return (r, s.with_plugin(p.name()));
            }
            if !s.is_rejected() {
                return (None, s.with_plugin(p.name()));
            }
            if r.is_some() {
                result = r;
            }
            reasons.extend(s.reasons);
        }
        (result, Status::with_reasons(Code::Unschedulable, reasons))
    }

    /// `RunPreScorePlugins`.
    pub fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        for p in self.at(ExtensionPoint::PreScore) {
            let Some(ps) = p.pre_score() else { continue };
            let s = ps.pre_score(state, pod, nodes, snapshot);
            if s.is_skip() {
                state.skip_score_plugins.insert(p.name());
                continue;
            }
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// `RunScorePlugins`: per-plugin scores in parallel over nodes, normalized, times
    /// the plugin weight, summed per node.
    pub fn run_score(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<NodeScore>, Status> {
        let active: Vec<&Weighted> = self
            .score
            .iter()
            .filter(|w| !state.skip_score_plugins.contains(w.plugin.name()))
            .collect();
        let mut totals: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.name().to_string(),
                score: 0,
            })
            .collect();
        if active.is_empty() {
            return Ok(totals);
        }
        // Scores per node then per plugin in one flat buffer (row = node), computed
        // in parallel over nodes when there are enough of them to pay for it.
        let p = active.len();
        let mut raw = vec![0i64; nodes.len() * p];
        let score_node = |(row, n): (&mut [i64], &Arc<NodeInfo>)| -> Result<(), Status> {
            for (slot, w) in row.iter_mut().zip(&active) {
                let sp = w.plugin.score().expect("score plugin");
                let (v, s) = sp.score(state, pod, n);
                if !s.is_success() {
                    return Err(s.with_plugin(w.plugin.name()));
                }
                *slot = v;
            }
            Ok(())
        };
        if nodes.len() < PARALLEL_SCORE_MIN_NODES {
            raw.chunks_mut(p).zip(nodes).try_for_each(score_node)?;
        } else {
            raw.par_chunks_mut(p)
                .zip(nodes.par_iter())
                .with_min_len(PARALLEL_SCORE_MIN_NODES / 4)
                .try_for_each(score_node)?;
        }
        // Normalizing plugins see one plugin's scores with node names; the names are
        // copied once per cycle into this buffer, which every such plugin reuses.
        let mut scratch: Vec<NodeScore> = Vec::new();
        for (j, w) in active.iter().enumerate() {
            let sp = w.plugin.score().expect("score plugin");
            let column = raw.iter().skip(j).step_by(p).copied();
            if sp.has_normalize() {
                if scratch.is_empty() {
                    scratch = totals.clone();
                }
                for (s, v) in scratch.iter_mut().zip(column) {
                    s.score = v;
                }
                let s = sp.normalize_score(state, pod, &mut scratch);
                if !s.is_success() {
                    return Err(s.with_plugin(w.plugin.name()));
                }
                add_weighted(&mut totals, scratch.iter().map(|s| s.score), w)?;
            } else {
                add_weighted(&mut totals, column, w)?;
            }
        }
        Ok(totals)
    }

    /// `RunReservePluginsReserve`.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in self.at(ExtensionPoint::Reserve) {
            if let Some(r) = p.reserve() {
                let s = r.reserve(state, pod, node);
                if !s.is_success() {
                    return s.with_plugin(p.name());
                }
            }
        }
        Status::success()
    }

    /// `RunReservePluginsUnreserve`, in reverse order.
    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.at(ExtensionPoint::Reserve).iter().rev() {
            if let Some(r) = p.reserve() {
                r.unreserve(state, pod, node);
            }
        }
    }

    /// `RunPermitPlugins`: Success, a rejection, or Wait (the pod is then parked until
    /// every waiting plugin allows it, one rejects it, or the timeout passes).
    pub fn run_permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let mut pending = HashSet::new();
        let mut timeout = Duration::ZERO;
        for p in self.at(ExtensionPoint::Permit) {
            let Some(pp) = p.permit() else { continue };
            let (s, t) = pp.permit(state, pod, node);
            if s.is_wait() {
                pending.insert(p.name().to_string());
                timeout = timeout.max(t.min(Duration::from_secs(15 * 60)));
                continue;
            }
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        if pending.is_empty() {
            return Status::success();
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.waiting.lock().insert(
            pod.uid().to_string(),
            WaitingPod {
                pending,
                tx: Some(tx),
            },
        );
        self.waiting_rx
            .lock()
            .insert(pod.uid().to_string(), (rx, timeout));
        Status::new(Code::Wait, "")
    }

    /// `WaitOnPermit`: resolves a Wait from [`run_permit`](Self::run_permit).
    pub async fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        let Some((rx, timeout)) = self.waiting_rx.lock().remove(pod.uid()) else {
            return Status::success();
        };
        let s = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => Status::unschedulable("rejected: waiting pod dropped"),
            Err(_) => Status::unschedulable(format!(
                "rejected due to timeout after waiting {timeout:?} at plugin(s)"
            )),
        };
        self.waiting.lock().remove(pod.uid());
        s
    }

    /// A Permit plugin allows a waiting pod.
    pub fn allow_waiting_pod(&self, uid: &str, plugin: &str) {
        let mut w = self.waiting.lock();
        if let Some(wp) = w.get_mut(uid) {
            wp.pending.remove(plugin);
            if wp.pending.is_empty()
                && let Some(tx) = wp.tx.take()
            {
                let _ = tx.send(Status::success());
            }
        }
    }

    /// Rejects a waiting pod (a plugin, or preemption evicting it).
    pub fn reject_waiting_pod(&self, uid: &str, plugin: &str, msg: &str) -> bool {
        let mut w = self.waiting.lock();
        if let Some(wp) = w.get_mut(uid)
            && let Some(tx) = wp.tx.take()
        {
            let _ = tx.send(Status::unschedulable(msg.to_string()).with_plugin(plugin));
            return true;
        }
        false
    }

    pub fn is_waiting(&self, uid: &str) -> bool {
        self.waiting.lock().contains_key(uid)
    }

    /// `RunPreBindPlugins`.
    pub async fn run_pre_bind(&self, pod: &PodInfo, node: &str) -> Status {
        for p in self.at(ExtensionPoint::PreBind) {
            if let Some(pb) = p.pre_bind() {
                let s = pb.pre_bind(pod, node).await;
                if !s.is_success() {
                    return s.with_plugin(p.name());
                }
            }
        }
        Status::success()
    }

    /// `RunBindPlugins`: the first binder that does not Skip.
    pub async fn run_bind(&self, pod: &PodInfo, node: &str) -> Status {
        for p in self.at(ExtensionPoint::Bind) {
            if let Some(b) = p.bind() {
                let s = b.bind(pod, node).await;
                if s.is_skip() {
                    continue;
                }
                return s.with_plugin(p.name());
            }
        }
        Status::skip()
    }

    /// `RunPostBindPlugins`.
    pub async fn run_post_bind(&self, pod: &PodInfo, node: &str) {
        for p in self.at(ExtensionPoint::PostBind) {
            if let Some(pb) = p.post_bind() {
                pb.post_bind(pod, node).await;
            }
        }
    }
}

/// Score rounds over fewer nodes than this run on the calling thread (see
/// `schedule_one::PARALLEL_FILTER_MIN_NODES`).
pub const PARALLEL_SCORE_MIN_NODES: usize = 1024;

/// Adds one plugin's (normalized) scores times its weight to the totals, checking
/// the range as `RunScorePlugins` does.
fn add_weighted(
    totals: &mut [NodeScore],
    scores: impl Iterator<Item = i64>,
    w: &Weighted,
) -> Result<(), Status> {
    for (t, score) in totals.iter_mut().zip(scores) {
        if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&score) {
            return Err(Status::error(format!(
                "plugin {:?} returns an invalid score {score}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                w.plugin.name(),
            )));
        }
        t.score += score * w.weight;
    }
    Ok(())
}

/// `DefaultNormalizeScore`: scales to `[0, max]` by the highest score; `reverse`
/// flips it.
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [NodeScore]) {
    let max_count = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if max_count == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut v = max * s.score / max_count;
        if reverse {
            v = max - v;
        }
        s.score = v;
    }
}
