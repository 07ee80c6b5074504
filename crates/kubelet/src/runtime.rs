//! The runtime manager: turns a pod into sandboxes and containers on the CRI and reads
//! them back (upstream `kuberuntime_manager.go` SyncPod/KillPod/GetPodStatus). The decisions
//! are the pure functions of [`crate::actions`], [`crate::sandbox`], [`crate::container`],
//! [`crate::env`] and [`crate::status`]; this module only does the calls.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actions::compute_pod_actions;
use ferrokube_client::events::{EventRecorder, EventType};

use crate::allocation::{ALLOCATIONS_FILE, AllocationManager};
use crate::backoff::{Backoff, backoff_key};
use crate::cgroup::CgroupManager;
use crate::config::NodeConfig;
use crate::container::{
    ContainerInputs, ContainerType, PullDecision, TERMINATION_MESSAGE_PATH_ANNOTATION,
    TERMINATION_MESSAGE_POLICY_ANNOTATION, container_config, container_hash, ephemeral_container,
    is_sidecar, pull_decision,
};
use crate::credentials::pull_credentials;
use crate::cri::{CriClient, CriError};
use crate::env::{EnvSources, container_env};
use crate::lifecycle::{
    Hook, MAX_TERMINATION_MESSAGE, MIN_GRACE_SECONDS, TerminationOrdering, last_log_message,
    run_hook,
};
use crate::probe::ProbeResults;
use crate::probe_manager::container_ref;
use crate::qos::{container_resources, pod_cgroup_resources, qos_of};
use crate::resize::{
    CgroupValues, Decision, RESIZE_IN_PROGRESS, RESIZE_PENDING, changed_resources, restarts_for,
    spec_allocation, widened, with_allocation,
};
use crate::sandbox::{
    ETC_HOSTS_PATH, POD_UID_LABEL, hosts_file, name, namespace, pod_cgroup_parent, pod_log_dir,
    sandbox_config, spec, uid,
};
use crate::status::{
    RuntimePod, RuntimeState, StatusInputs, WaitingReason, group_by_pod, pod_status,
};
use crate::volume::{VolumeError, container_mounts};
use crate::volume_manager::{PodVolumes, VolumeManager};
use ferrokube_apimachinery::duration::go_duration;

/// Errors that stop a sync (per-container failures are reported in [`SyncResult`]).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Cri(#[from] CriError),
    #[error("pod cgroup {cgroup}: {source}")]
    Cgroup {
        cgroup: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pod log directory {dir}: {source}")]
    LogDir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pod {0} has no uid")]
    NoUid(String),
    #[error("volumes: {0}")]
    Volume(#[from] VolumeError),
    #[error("{0}")]
    RuntimeClass(String),
}

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncResult {
    /// Containers started (by name).
    pub started: Vec<String>,
    /// Containers that could not be started, and why (also shown in their status).
    pub failed: Vec<(String, WaitingReason)>,
    /// Whether a new sandbox was created.
    pub created_sandbox: bool,
    /// Whether the pod's containers and sandbox were stopped.
    pub killed_pod: bool,
}

/// The CRI runtime manager of one node.
#[derive(Debug)]
pub struct RuntimeManager {
    cri: CriClient,
    node: NodeConfig,
    cgroups: CgroupManager,
    backoff: Mutex<Backoff>,
    /// Failed image pulls: back-off per pod and image, and the last error.
    image_pulls: Mutex<ImagePulls>,
    reasons: Mutex<HashMap<String, HashMap<String, WaitingReason>>>,
    /// Probe results, written by the probe workers ([`crate::probe_manager`]).
    probe_results: Arc<ProbeResults>,
    /// Where events go, once the kubelet has an event recorder.
    events: Arc<OnceLock<EventRecorder>>,
    /// Pod volumes under the kubelet root dir.
    volumes: VolumeManager,
    /// In-place resize: what each pod's containers are allocated, and why a resize
    /// waits or failed, by pod UID.
    allocations: AllocationManager,
    resizes: Mutex<HashMap<String, ResizeState>>,
}

/// A resize that is not done: it waits for room (`PodResizePending`), or updating a
/// container failed (`PodResizeInProgress`, reason `Error`).
#[derive(Debug, Clone, Default)]
struct ResizeState {
    pending: Option<(&'static str, String)>,
    error: Option<String>,
}

/// Upstream's image manager state: a pull that failed is not retried for the pod until
/// its back-off (10 s doubling to 5 min) has passed, and the container waits in
/// `ImagePullBackOff` with the failure that caused it.
#[derive(Debug, Default)]
struct ImagePulls {
    backoff: Backoff,
    last_error: HashMap<String, String>,
}

/// The image back-off key upstream uses: `<pod uid>_<image>`.
fn image_pull_key(pod: &Pod, image: &str) -> String {
    format!("{}_{image}", uid(pod))
}

fn reason(reason: &str, message: impl Into<String>) -> WaitingReason {
    WaitingReason {
        reason: reason.to_owned(),
        message: message.into(),
    }
}

fn nanos_to_time(n: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(n.max(0) as u64)
}

impl RuntimeManager {
    pub fn new(cri: CriClient, node: NodeConfig) -> Self {
        let metrics = cri.metrics().clone();
        let cgroups = CgroupManager::new(&node.cgroup_mount).with_metrics(metrics.clone());
        RuntimeManager {
            cri,
            node,
            cgroups,
            backoff: Mutex::new(Backoff::default()),
            image_pulls: Mutex::new(ImagePulls::default()),
            reasons: Mutex::new(HashMap::new()),
            probe_results: Arc::new(ProbeResults::default()),
            events: Arc::new(OnceLock::new()),
            volumes: VolumeManager::new("/var/lib/kubelet").with_metrics(metrics),
            allocations: AllocationManager::default(),
            resizes: Mutex::new(HashMap::new()),
        }
    }

    /// Upstream's allocation manager: a pod is allocated what its spec asks for when the
    /// kubelet first syncs it; a later change of its containers' resources (a resize) is
    /// allocated once `decide` (given the pod as the spec has it) admits it, else the
    /// pod shows `PodResizePending`.
    pub fn allocate(&self, pod: &Pod, decide: impl FnOnce(&Pod) -> Decision) {
        let pending = self.allocations.allocate(pod, decide);
        if let Ok(mut r) = self.resizes.lock() {
            r.entry(uid(pod).to_owned()).or_default().pending = pending;
        }
    }

    /// `pod` with its containers' resources as allocated (the spec's before its first
    /// allocation).
    pub fn allocated_pod(&self, pod: &Pod) -> Pod {
        match self.allocations.get(uid(pod)) {
            Some(alloc) => with_allocation(pod, &alloc),
            None => pod.clone(),
        }
    }

    /// Forgets a pod's allocation (it is gone from the node).
    pub fn forget_allocation(&self, pod_uid: &str) {
        self.allocations.forget(pod_uid);
        if let Ok(mut r) = self.resizes.lock() {
            r.remove(pod_uid);
        }
    }

    /// Upstream `doPodResizeAction`: running containers whose cgroup does not match
    /// their allocation are updated through the CRI, or restarted when their
    /// `resizePolicy` asks for it (then the next sync starts them with the new sizes).
    async fn actuate_resize(&self, pod: &Pod, rt: &RuntimePod) -> Result<(), CriError> {
        let cgroup = self.pod_cgroup(pod);
        let qos = qos_of(pod);
        let mut failed = None;
        for c in rt
            .containers
            .iter()
            .filter(|c| c.state == RuntimeState::Running)
        {
            let spec_c = spec_container(pod, c.kind, &c.name)
                .filter(|sc| c.kind == ContainerType::Regular || is_sidecar(sc));
            let Some(spec_c) = spec_c else { continue };
            let Some(actual) = self.cgroups.values(&format!("{cgroup}/{}", c.id)) else {
                continue;
            };
            let resources = container_resources(qos, spec_c, self.node.memory_capacity);
            let changed = changed_resources(&actual, &CgroupValues::of(&resources));
            if changed.is_empty() {
                continue;
            }
            if changed.iter().any(|r| restarts_for(spec_c, r)) {
                let note = format!("Container {} resize requires restart", c.name);
                self.container_event(pod, &c.name, EventType::Normal, "Killing", &note);
                self.kill_container(
                    pod,
                    Some(spec_c),
                    &c.id,
                    self.grace(pod, None),
                    rt.ips().first().map(String::as_str),
                )
                .await?;
                continue;
            }
            tracing::info!(pod = name(pod), container = %c.name, ?changed, "resizing container");
            if let Err(e) = self.cri.update_container_resources(&c.id, resources).await {
                failed.get_or_insert(e.rpc_error_text());
            }
        }
        if let Ok(mut r) = self.resizes.lock() {
            r.entry(uid(pod).to_owned()).or_default().error = failed;
        }
        Ok(())
    }

    /// Keeps pod state under `root` (`--root-dir`; `/var/lib/kubelet` by default): the
    /// pod volumes, and the allocations' checkpoint,
    /// whose allocations are taken back now (upstream's allocation manager reading
    /// its checkpoint at start).
    pub fn set_root_dir(&mut self, root: impl Into<std::path::PathBuf>) {
        let root = root.into();
        self.allocations
            .checkpointed_at(root.join(ALLOCATIONS_FILE));
        self.volumes = VolumeManager::new(root).with_metrics(self.cri.metrics().clone());
    }

    /// Forgets the allocations of pods `keep` does not name (upstream
    /// `RemoveOrphanedPods`): those deleted while the kubelet was down.
    pub fn retain_allocations(&self, keep: impl Fn(&str) -> bool) {
        self.allocations.retain(keep);
    }

    /// The pod volumes.
    pub fn volumes(&self) -> &VolumeManager {
        &self.volumes
    }

    /// The probe results the sync and status read.
    pub fn probe_results(&self) -> &Arc<ProbeResults> {
        &self.probe_results
    }

    /// The slot of the event recorder (set once by the kubelet).
    pub fn events(&self) -> &Arc<OnceLock<EventRecorder>> {
        &self.events
    }

    /// Records an event about `pod` when a recorder is set.
    pub fn pod_event(&self, pod: &Pod, type_: EventType, reason: &str, note: &str) {
        if let Some(rec) = self.events.get() {
            let mut r = container_ref(pod, "");
            r.field_path = None;
            rec.event(&r, None, type_, reason, reason, note);
        }
    }

    /// Records an event about a container of `pod` when a recorder is set.
    pub fn container_event(
        &self,
        pod: &Pod,
        container: &str,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        if let Some(rec) = self.events.get() {
            rec.event(
                &container_ref(pod, container),
                None,
                type_,
                reason,
                reason,
                note,
            );
        }
    }

    pub fn cri(&self) -> &CriClient {
        &self.cri
    }

    pub fn node(&self) -> &NodeConfig {
        &self.node
    }

    pub fn cgroups(&self) -> &CgroupManager {
        &self.cgroups
    }

    /// The pod's cgroup (as the sandbox's cgroup_parent names it).
    pub fn pod_cgroup(&self, pod: &Pod) -> String {
        pod_cgroup_parent(&self.node, qos_of(pod), uid(pod))
    }

    /// Every pod the runtime has (sandboxes and containers with full statuses), by UID.
    pub async fn runtime_pods(&self) -> Result<BTreeMap<String, RuntimePod>, CriError> {
        self.runtime_pods_filtered(None).await
    }

    /// What the runtime has for one pod UID.
    pub async fn runtime_pod(&self, pod_uid: &str) -> Result<RuntimePod, CriError> {
        let mut pods = self.runtime_pods_filtered(Some(pod_uid)).await?;
        Ok(pods.remove(pod_uid).unwrap_or_else(|| RuntimePod {
            uid: pod_uid.to_owned(),
            ..Default::default()
        }))
    }

    async fn runtime_pods_filtered(
        &self,
        pod_uid: Option<&str>,
    ) -> Result<BTreeMap<String, RuntimePod>, CriError> {
        let selector: HashMap<String, String> = pod_uid
            .map(|u| HashMap::from([(POD_UID_LABEL.to_owned(), u.to_owned())]))
            .unwrap_or_default();
        let sandboxes = self
            .cri
            .list_pod_sandboxes(Some(cri::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await?;
        let mut sandbox_statuses = vec![];
        for s in sandboxes {
            match self.cri.pod_sandbox_status(&s.id).await {
                Ok(st) => sandbox_statuses.push((st, s.labels)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let containers = self
            .cri
            .list_containers(Some(cri::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await?;
        let mut container_statuses = vec![];
        for c in containers {
            match self.cri.container_status(&c.id).await {
                Ok(mut st) => {
                    add_termination_message(&mut st);
                    container_statuses.push((st, c.pod_sandbox_id))
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(group_by_pod(&sandbox_statuses, &container_statuses))
    }

    /// The pod's API status from the runtime, with the waiting reasons of the last sync.
    pub async fn pod_status(&self, pod: &Pod) -> Result<PodStatus, CriError> {
        let rt = self.runtime_pod(uid(pod)).await?;
        Ok(self.status_from(pod, &rt))
    }

    /// [`RuntimeManager::pod_status`] from an already listed runtime view.
    pub fn status_from(&self, pod: &Pod, rt: &RuntimePod) -> PodStatus {
        self.status_with(pod, rt, false)
    }

    /// The pod's status; `deadline_exceeded` makes it Failed with `DeadlineExceeded`.
    pub fn status_with(&self, pod: &Pod, rt: &RuntimePod, deadline_exceeded: bool) -> PodStatus {
        self.status_finished(pod, rt, deadline_exceeded, None)
    }

    /// [`RuntimeManager::status_with`], and `evicted` (the eviction message) makes it
    /// Failed with `Evicted`.
    pub fn status_finished(
        &self,
        pod: &Pod,
        rt: &RuntimePod,
        deadline_exceeded: bool,
        evicted: Option<String>,
    ) -> PodStatus {
        let reasons = self
            .reasons
            .lock()
            .map(|r| r.get(uid(pod)).cloned().unwrap_or_default())
            .unwrap_or_default();
        let inputs = StatusInputs {
            reasons,
            host_ips: self.node.node_ips.clone(),
            probes: self.probe_results.snapshot(),
            deadline_exceeded,
            evicted,
            now: k8s_openapi::jiff::Timestamp::from_nanosecond(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos() as i128,
            )
            .ok(),
        };
        let mut status = pod_status(pod, rt, &inputs);
        self.add_resize_status(pod, &mut status, inputs.now.map(Time));
        status
    }

    /// Upstream's resize status: the allocated resources of every regular container and
    /// sidecar (`resources`; the apiserver accepts resizes of running pods only from a
    /// node that reports them), and `PodResizePending` / `PodResizeInProgress` while a
    /// resize waits or its update failed.
    fn add_resize_status(&self, pod: &Pod, status: &mut PodStatus, now: Option<Time>) {
        let alloc = self
            .allocations
            .get(uid(pod))
            .unwrap_or_else(|| spec_allocation(pod));
        let statuses = status
            .container_statuses
            .iter_mut()
            .flatten()
            .chain(status.init_container_statuses.iter_mut().flatten());
        for cs in statuses {
            if let Some(r) = alloc.get(&cs.name) {
                cs.resources = Some(r.clone());
            }
        }
        let state = self
            .resizes
            .lock()
            .ok()
            .and_then(|r| r.get(uid(pod)).cloned())
            .unwrap_or_default();
        let old = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
        let mut add = |type_: &str, reason: &str, message: &str| {
            let since = old
                .and_then(|cs| cs.iter().find(|c| c.type_ == type_ && c.status == "True"))
                .and_then(|c| c.last_transition_time.clone())
                .or_else(|| now.clone());
            status
                .conditions
                .get_or_insert_default()
                .push(PodCondition {
                    type_: type_.to_owned(),
                    status: "True".into(),
                    reason: Some(reason.to_owned()),
                    message: Some(message.to_owned()),
                    last_transition_time: since,
                    ..Default::default()
                });
        };
        if let Some((reason, message)) = &state.pending {
            add(RESIZE_PENDING, reason, message);
        }
        if let Some(message) = &state.error {
            add(RESIZE_IN_PROGRESS, "Error", message);
        }
    }

    fn set_reason(&self, pod: &Pod, container: &str, r: Option<WaitingReason>) {
        if let Ok(mut all) = self.reasons.lock() {
            let per_pod = all.entry(uid(pod).to_owned()).or_default();
            match r {
                Some(r) => {
                    per_pod.insert(container.to_owned(), r);
                }
                None => {
                    per_pod.remove(container);
                }
            }
        }
    }

    /// Brings the runtime in line with `pod`: one step of upstream's SyncPod (sandbox, then the
    /// next init container or the regular containers). Call again after PLEG events.
    pub async fn sync_pod(&self, pod: &Pod, sources: &EnvSources) -> Result<SyncResult, SyncError> {
        if uid(pod).is_empty() {
            return Err(SyncError::NoUid(name(pod).to_owned()));
        }
        let rt = self.runtime_pod(uid(pod)).await?;
        self.sync_pod_from(pod, rt, sources).await
    }

    /// [`RuntimeManager::sync_pod`] from an already listed runtime view of the pod.
    pub async fn sync_pod_from(
        &self,
        pod: &Pod,
        rt: RuntimePod,
        sources: &EnvSources,
    ) -> Result<SyncResult, SyncError> {
        let pod_uid = uid(pod);
        if pod_uid.is_empty() {
            return Err(SyncError::NoUid(name(pod).to_owned()));
        }
        // Containers get what they are allocated, which a pending resize has not changed.
        let allocated = self.allocated_pod(pod);
        let pod = &allocated;
        let actions = compute_pod_actions(pod, &rt, &self.probe_results.snapshot());
        let mut result = SyncResult::default();
        tracing::debug!(pod = name(pod), ?actions, "sync");

        // Volumes first, and on every sync so configMap/secret updates reach the files; a
        // failure blocks only starting containers (running ones keep their mounts).
        let finished = actions.kill_pod && !actions.create_sandbox;
        let starts_something = actions.create_sandbox
            || !actions.init_containers_to_start.is_empty()
            || !actions.containers_to_start.is_empty()
            || !actions.ephemeral_containers_to_start.is_empty();
        let volumes = if finished {
            self.volumes.release(pod_uid);
            PodVolumes::default()
        } else {
            match self.volumes.setup(pod, &self.node, sources) {
                Ok(v) => {
                    for note in &v.notes {
                        self.pod_event(pod, EventType::Warning, "FailedMount", note);
                    }
                    v
                }
                Err(e) => {
                    tracing::info!(pod = name(pod), error = %e, "volumes not ready");
                    for msg in e.event_messages() {
                        self.pod_event(pod, EventType::Warning, "FailedMount", &msg);
                    }
                    if starts_something {
                        return Err(SyncError::Volume(e));
                    }
                    PodVolumes::default()
                }
            }
        };

        if actions.kill_pod {
            if actions.create_sandbox && actions.attempt > 0 {
                self.pod_event(
                    pod,
                    EventType::Normal,
                    "SandboxChanged",
                    "Pod sandbox changed, it will be killed and re-created.",
                );
            }
            self.stop_pod(pod, &rt, None).await?;
            result.killed_pod = true;
            if !actions.create_sandbox {
                return Ok(result);
            }
        } else {
            for k in &actions.containers_to_kill {
                tracing::info!(pod = name(pod), container = %k.name, reason = %k.reason, "killing container");
                self.container_event(pod, &k.name, EventType::Normal, "Killing", &k.reason);
                let s = spec(pod);
                let c = s
                    .containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .find(|c| c.name == k.name);
                self.kill_container(
                    pod,
                    c,
                    &k.id,
                    k.grace
                        .map_or_else(|| self.grace(pod, None), |g| g.max(MIN_GRACE_SECONDS)),
                    rt.ips().first().map(String::as_str),
                )
                .await?;
            }
        }

        let cgroup = self.pod_cgroup(pod);
        let sizes = pod_cgroup_resources(pod);
        // A resize that shrinks shrinks the containers before the pod: widen, update the
        // containers, then narrow. A pod cgroup that already has its sizes (every sync
        // but the first and a resize's) is left alone.
        let current = self.cgroups.values(&cgroup);
        let sized = current.as_ref().is_some_and(|c| c.holds(&sizes));
        let first = match &current {
            Some(current) => widened(&sizes, current),
            None => sizes.clone(),
        };
        let size_pod = |res| {
            self.cgroups
                .create(&cgroup, res)
                .map_err(|source| SyncError::Cgroup {
                    cgroup: cgroup.clone(),
                    source,
                })
        };
        if !sized {
            size_pod(&first)?;
        }
        if !actions.create_sandbox && !actions.kill_pod {
            self.actuate_resize(pod, &rt).await?;
        }
        if !sized && first != sizes {
            size_pod(&sizes)?;
        }

        let sandbox_cfg = sandbox_config(&self.node, pod, actions.attempt);
        let (sandbox_id, ips) = if actions.create_sandbox {
            let dir = pod_log_dir(&self.node, pod);
            std::fs::create_dir_all(&dir).map_err(|source| SyncError::LogDir {
                dir: dir.display().to_string(),
                source,
            })?;
            // The class's handler, not its name, selects the runtime (upstream's
            // runtimeclass manager); a pod whose class is gone gets no sandbox.
            let handler = match &sources.runtime_handler {
                None => self.node.runtime_handler.clone(),
                Some(Ok(handler)) => handler.clone(),
                Some(Err(why)) => {
                    let message = format!("Failed to create pod sandbox: {why}");
                    self.pod_event(pod, EventType::Warning, "FailedCreatePodSandBox", &message);
                    return Err(SyncError::RuntimeClass(why.clone()));
                }
            };
            let started = self
                .cri
                .run_pod_sandbox(sandbox_cfg.clone(), &handler)
                .await;
            self.cri.metrics().observe_pod_started(started.is_err());
            let id = match started {
                Ok(id) => id,
                Err(e) => {
                    let message = format!("Failed to create pod sandbox: {}", e.rpc_error_text());
                    self.pod_event(pod, EventType::Warning, "FailedCreatePodSandBox", &message);
                    return Err(e.into());
                }
            };
            result.created_sandbox = true;
            let st = self.cri.pod_sandbox_status(&id).await?;
            let ips = crate::status::RuntimeSandbox::from_cri(&st).ips;
            (id, ips)
        } else {
            let Some(id) = actions.sandbox_id.clone() else {
                return Ok(result);
            };
            (id, rt.ips())
        };
        let sources = EnvSources {
            pod_ips: if spec(pod).host_network == Some(true) {
                self.node.node_ips.clone()
            } else {
                ips
            },
            ..sources.clone()
        };
        // A fresh sandbox has no containers: look only at what the old ones did for counts.
        // Ephemeral containers first (upstream: so a failing init container can be
        // debugged), then init containers (the next one, sidecars to restart), then the
        // regular ones (listed only once the pod has initialized).
        let s = spec(pod);
        let mut starts: Vec<(std::borrow::Cow<'_, Container>, ContainerType, Option<&str>)> =
            vec![];
        for e in &actions.ephemeral_containers_to_start {
            if let Some(ec) = s.ephemeral_containers.as_ref().and_then(|v| v.get(e.index)) {
                starts.push((
                    std::borrow::Cow::Owned(ephemeral_container(ec)),
                    ContainerType::Ephemeral,
                    e.target_id.as_deref(),
                ));
            }
        }
        for &i in &actions.init_containers_to_start {
            if let Some(c) = s.init_containers.as_ref().and_then(|v| v.get(i)) {
                starts.push((std::borrow::Cow::Borrowed(c), ContainerType::Init, None));
            }
        }
        for &i in &actions.containers_to_start {
            starts.push((
                std::borrow::Cow::Borrowed(&s.containers[i]),
                ContainerType::Regular,
                None,
            ));
        }
        for (c, kind, pid_target) in starts {
            let c = c.as_ref();
            match self
                .start_container(
                    pod,
                    c,
                    kind,
                    pid_target,
                    &sandbox_id,
                    &sandbox_cfg,
                    &rt,
                    &sources,
                    &volumes,
                )
                .await
            {
                Ok(()) => {
                    self.cri
                        .metrics()
                        .observe_container_started(kind.metric_label(), None);
                    self.set_reason(pod, &c.name, None);
                    result.started.push(c.name.clone());
                }
                Err(r) => {
                    // A container waiting out its crash back-off was not tried.
                    if r.reason != "CrashLoopBackOff" {
                        self.cri
                            .metrics()
                            .observe_container_started(kind.metric_label(), Some(&r.reason));
                    }
                    tracing::info!(pod = name(pod), container = %c.name, reason = %r.reason, message = %r.message, "container not started");
                    self.set_reason(pod, &c.name, Some(r.clone()));
                    result.failed.push((c.name.clone(), r));
                }
            }
        }
        Ok(result)
    }

    /// Pulls or finds the image; returns the image reference to create the container with
    /// (upstream's image manager `EnsureImageExists`, with its events about the container).
    async fn ensure_image(
        &self,
        pod: &Pod,
        c: &Container,
        sandbox_cfg: &cri::PodSandboxConfig,
        sources: &EnvSources,
    ) -> Result<String, WaitingReason> {
        let image = c.image.clone().unwrap_or_default();
        if image.is_empty() {
            return Err(reason("InvalidImageName", "container has no image"));
        }
        let event = |type_: EventType, why: &str, note: &str| {
            self.container_event(pod, &c.name, type_, why, note);
        };
        // ImageStatus first: a present image never makes the runtime contact a registry
        // unless the pull policy asks for it.
        let present = match self.cri.image_status(&image).await {
            Ok(present) => present,
            Err(e) => {
                let msg = format!(
                    "Failed to inspect image \"{image}\": {}",
                    e.rpc_error_text()
                );
                event(EventType::Warning, "InspectFailed", &msg);
                return Err(reason("ImageInspectError", msg));
            }
        };
        match pull_decision(c, present.is_some()) {
            PullDecision::UsePresent => {
                let msg = format!("Container image \"{image}\" already present on machine");
                event(EventType::Normal, "Pulled", &msg);
                Ok(present.map(|i| i.id).unwrap_or(image))
            }
            PullDecision::NeverPullAbsent => {
                let msg =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                event(EventType::Warning, "ErrImageNeverPull", &msg);
                Err(reason("ErrImageNeverPull", msg))
            }
            PullDecision::Pull => {
                let key = image_pull_key(pod, &image);
                {
                    let mut pulls = self
                        .image_pulls
                        .lock()
                        .map_err(|_| reason("ErrImagePull", "image pull state poisoned"))?;
                    if pulls
                        .backoff
                        .in_backoff_since_update(&key, SystemTime::now())
                        .is_some()
                    {
                        let mut msg = format!("Back-off pulling image \"{image}\"");
                        event(EventType::Normal, "BackOff", &msg);
                        if let Some(last) = pulls.last_error.get(&key) {
                            msg = format!("{msg}: {last}");
                        }
                        return Err(reason("ImagePullBackOff", msg));
                    }
                    pulls.last_error.remove(&key);
                }
                event(
                    EventType::Normal,
                    "Pulling",
                    &format!("Pulling image \"{image}\""),
                );
                let started = std::time::Instant::now();
                self.cri.metrics().image_started_pulling(uid(pod));
                // The pod's imagePullSecrets that exist; upstream warns about the others
                // and pulls without them.
                let (found, missing): (Vec<_>, Vec<_>) = spec(pod)
                    .image_pull_secrets
                    .iter()
                    .flatten()
                    .map(|r| (r.name.as_str(), sources.secrets.get(&r.name)))
                    .partition(|(_, secret)| secret.is_some());
                if !missing.is_empty() {
                    let names: Vec<_> = missing.iter().map(|(name, _)| *name).collect();
                    self.pod_event(
                        pod,
                        EventType::Warning,
                        "FailedToRetrieveImagePullSecret",
                        &format!(
                            "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                            names.join(", ")
                        ),
                    );
                }
                let pull_secrets: Vec<_> =
                    found.into_iter().filter_map(|(_, s)| s.cloned()).collect();
                let credentials = pull_credentials(&image, &pull_secrets);
                let pulled = self
                    .cri
                    .pull_image_with_auth(&image, Some(sandbox_cfg.clone()), &credentials)
                    .await;
                let took = started.elapsed();
                let image_ref = {
                    let mut pulls = self
                        .image_pulls
                        .lock()
                        .map_err(|_| reason("ErrImagePull", "image pull state poisoned"))?;
                    let now = SystemTime::now();
                    match pulled {
                        Ok(image_ref) => {
                            pulls.backoff.gc(now);
                            self.cri.metrics().image_finished_pulling(uid(pod));
                            image_ref
                        }
                        Err(e) => {
                            let msg = e.rpc_error_text();
                            let note = format!("Failed to pull image \"{image}\": {msg}");
                            event(EventType::Warning, "Failed", &note);
                            pulls.backoff.next(&key, now, now);
                            pulls.last_error.insert(key, format!("ErrImagePull: {msg}"));
                            return Err(reason("ErrImagePull", msg));
                        }
                    }
                };
                let size = match self.cri.image_status(&image_ref).await {
                    Ok(Some(i)) => i.size,
                    _ => 0,
                };
                // Pulls are not queued here, so both durations upstream reports are the
                // pull's own.
                let took = go_duration(took.as_millis() as i64 * 1_000_000);
                event(
                    EventType::Normal,
                    "Pulled",
                    &format!(
                        "Successfully pulled image \"{image}\" in {took} ({took} including waiting). Image size: {size} bytes."
                    ),
                );
                Ok(image_ref)
            }
        }
    }

    /// The mount of the pod's managed hosts file at `/etc/hosts` (upstream
    /// `makeHostsMount`), for a container that mounts nothing there itself, once the pod
    /// has IPs. Without it the runtime would give the container a copy of the node's file,
    /// in which the pod's own hostname and its hostAliases are missing.
    fn etc_hosts_mount(
        &self,
        pod: &Pod,
        c: &Container,
        pod_ips: &[String],
    ) -> Result<Option<cri::Mount>, String> {
        let mounts_own = c
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == ETC_HOSTS_PATH);
        if pod_ips.is_empty() || mounts_own {
            return Ok(None);
        }
        let node_hosts = if spec(pod).host_network == Some(true) {
            std::fs::read_to_string(ETC_HOSTS_PATH)
                .map_err(|e| format!("reading {ETC_HOSTS_PATH}: {e}"))?
        } else {
            String::new()
        };
        let content = hosts_file(pod, pod_ips, &self.node.cluster_domain, &node_hosts);
        let host = self
            .volumes
            .etc_hosts_file(uid(pod), &content)
            .map_err(|e| e.to_string())?;
        Ok(Some(cri::Mount {
            container_path: ETC_HOSTS_PATH.into(),
            host_path: host.to_string_lossy().into_owned(),
            selinux_relabel: true,
            ..Default::default()
        }))
    }

    /// Starts one instance of `c`; `kind` says which list it is from, and for an
    /// ephemeral container with a target, the target's runtime ID.
    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        &self,
        pod: &Pod,
        c: &Container,
        kind: ContainerType,
        pid_target: Option<&str>,
        sandbox_id: &str,
        sandbox_cfg: &cri::PodSandboxConfig,
        rt: &RuntimePod,
        sources: &EnvSources,
        volumes: &PodVolumes,
    ) -> Result<(), WaitingReason> {
        let latest = rt.latest(&c.name, kind);
        // CrashLoopBackOff: a restart waits for the back-off since the last exit.
        if let Some(l) = latest.filter(|l| l.state == RuntimeState::Exited) {
            let key = backoff_key(
                name(pod),
                namespace(pod),
                uid(pod),
                &c.name,
                &container_hash(c),
            );
            let finished = nanos_to_time(l.finished_at);
            let now = SystemTime::now();
            let mut b = self
                .backoff
                .lock()
                .map_err(|_| reason("RunContainerError", "back-off state poisoned"))?;
            if let Some(delay) = b.in_backoff_since(&key, finished, now) {
                let pod_name = format!("{}_{}({})", name(pod), namespace(pod), uid(pod));
                self.container_event(
                    pod,
                    &c.name,
                    EventType::Warning,
                    "BackOff",
                    &format!(
                        "Back-off restarting failed container {} in pod {pod_name}",
                        c.name
                    ),
                );
                return Err(reason(
                    "CrashLoopBackOff",
                    format!(
                        "back-off {} restarting failed container={} pod={pod_name}",
                        go_duration(delay.as_nanos() as i64),
                        c.name,
                    ),
                ));
            }
            b.next(&key, finished, now);
        }
        // Upstream's `Failed` event for each step that keeps the container from starting.
        let failed_event = |what: &str| {
            let note = format!("Error: {what}");
            self.container_event(pod, &c.name, EventType::Warning, "Failed", &note);
        };
        let failed = |why: &str, message: String| {
            failed_event(&message);
            reason(why, message)
        };
        // The image manager's own events carry the message; this one names the error.
        let image_ref = self
            .ensure_image(pod, c, sandbox_cfg, sources)
            .await
            .inspect_err(|r| failed_event(&r.reason))?;
        let restart_count = match latest {
            Some(l) => l.restart_count.saturating_add(1).max(0) as u32,
            None => self.restart_count_from_logs(pod, &c.name),
        };
        let config_err =
            |e: &dyn std::fmt::Display| failed("CreateContainerConfigError", e.to_string());
        let env = container_env(pod, c, &self.node, sources).map_err(|e| config_err(&e))?;
        let input = ContainerInputs {
            container: c,
            restart_count,
            image_ref: &image_ref,
            env: &env,
            kind,
            pid_target,
        };
        let mut cfg = container_config(&self.node, pod, &input).map_err(|e| config_err(&e))?;
        let (mut mounts, sub_paths) =
            container_mounts(c, &volumes.volumes, &env).map_err(|e| config_err(&e))?;
        self.volumes
            .make_sub_paths(&sub_paths)
            .map_err(|e| config_err(&e))?;
        let message_path = c
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into());
        if !message_path.is_empty() {
            let host = self
                .volumes
                .termination_message_file(uid(pod), &c.name, restart_count)
                .map_err(|e| config_err(&e))?;
            mounts.push(cri::Mount {
                container_path: message_path,
                host_path: host.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        if let Some(hosts) = self
            .etc_hosts_mount(pod, c, &sources.pod_ips)
            .map_err(|e| config_err(&e))?
        {
            mounts.push(hosts);
        }
        cfg.mounts = mounts;
        let id = self
            .cri
            .create_container(sandbox_id, cfg, sandbox_cfg.clone())
            .await
            .map_err(|e| failed("CreateContainerError", e.runtime_message()))?;
        self.container_event(
            pod,
            &c.name,
            EventType::Normal,
            "Created",
            &format!("Created container: {}", c.name),
        );
        self.cri
            .start_container(&id)
            .await
            .map_err(|e| failed("RunContainerError", e.runtime_message()))?;
        self.container_event(
            pod,
            &c.name,
            EventType::Normal,
            "Started",
            &format!("Started container {}", c.name),
        );
        if let Some(handler) = Hook::PostStart.of(c) {
            let timeout = Duration::from_secs(self.grace(pod, None) as u64);
            let ip = sources.pod_ips.first().map(String::as_str);
            if let Err(msg) = run_hook(&self.cri, pod, c, &id, ip, handler, timeout).await {
                // Upstream kills a container whose postStart hook failed.
                self.container_event(
                    pod,
                    &c.name,
                    EventType::Warning,
                    "FailedPostStartHook",
                    &msg,
                );
                self.container_event(
                    pod,
                    &c.name,
                    EventType::Normal,
                    "Killing",
                    "FailedPostStartHook",
                );
                let _ = self.stop_container(&id, self.grace(pod, None)).await;
                return Err(reason("PostStartHookError", msg));
            }
        }
        Ok(())
    }

    /// With no instance left in the runtime, the next restart count follows the newest log
    /// file (`<container>/<n>.log`), so logs of earlier instances are not overwritten.
    fn restart_count_from_logs(&self, pod: &Pod, container: &str) -> u32 {
        let dir = pod_log_dir(&self.node, pod).join(container);
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".log")?
                    .parse::<u32>()
                    .ok()
            })
            .max()
            .map_or(0, |n| n + 1)
    }

    fn grace(&self, pod: &Pod, override_secs: Option<i64>) -> i64 {
        override_secs
            .or(pod.metadata.deletion_grace_period_seconds)
            .or(spec(pod).termination_grace_period_seconds)
            .unwrap_or(30)
            .max(MIN_GRACE_SECONDS)
    }

    /// Stops one container: its preStop hook first (within the grace), then the runtime's
    /// SIGTERM and, after the grace left, SIGKILL.
    async fn kill_container(
        &self,
        pod: &Pod,
        c: Option<&Container>,
        id: &str,
        grace: i64,
        pod_ip: Option<&str>,
    ) -> Result<(), CriError> {
        kill_with_pre_stop(&self.cri, &self.events, pod, c, id, grace, pod_ip, None).await
    }

    async fn stop_container(&self, id: &str, grace: i64) -> Result<(), CriError> {
        match self.cri.stop_container(id, grace).await {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        }
    }

    /// Stops every running container (concurrently, each with the pod's grace) and every
    /// sandbox of the pod. Nothing is removed.
    pub async fn stop_pod(
        &self,
        pod: &Pod,
        rt: &RuntimePod,
        grace: Option<i64>,
    ) -> Result<(), CriError> {
        let grace = self.grace(pod, grace);
        let running: Vec<_> = rt
            .containers
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    RuntimeState::Running | RuntimeState::Created | RuntimeState::Unknown
                )
            })
            .collect();
        let pod_ip = rt.ips().first().cloned();
        // Every container runs its preStop hook at once; with sidecars, the regular (and
        // ephemeral) containers stop first, then the sidecars in reverse order, so each
        // serves the containers after it to the end (upstream `terminationOrdering`).
        let names: Vec<&str> = running.iter().map(|c| c.name.as_str()).collect();
        let ordering = TerminationOrdering::for_pod(spec(pod), &names).map(Arc::new);
        let mut tasks = tokio::task::JoinSet::new();
        for c in running {
            let note = format!("Stopping container {}", c.name);
            self.container_event(pod, &c.name, EventType::Normal, "Killing", &note);
            let cri = self.cri.clone();
            let id = c.id.clone();
            let name = c.name.clone();
            let spec_c = spec_container(pod, c.kind, &c.name).cloned();
            let pod = pod.clone();
            let pod_ip = pod_ip.clone();
            let events = self.events.clone();
            let ordering = ordering.clone();
            tasks.spawn(async move {
                kill_with_pre_stop(
                    &cri,
                    &events,
                    &pod,
                    spec_c.as_ref(),
                    &id,
                    grace,
                    pod_ip.as_deref(),
                    ordering.as_deref().map(|o| (o, name.as_str())),
                )
                .await
            });
        }
        let mut first_err = None;
        while let Some(r) = tasks.join_next().await {
            if let Ok(Err(e)) = r {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        for s in &rt.sandboxes {
            match self.cri.stop_pod_sandbox(&s.id).await {
                Err(e) if e.is_not_found() => {}
                r => r?,
            }
        }
        Ok(())
    }

    /// Frees what a finished pod still on the API server no longer needs, as upstream's
    /// `syncTerminatedPod`: its cgroup is removed and its volumes torn down (mounts
    /// undone, emptyDirs removed). Its directory (the containers' termination messages),
    /// sandboxes, containers and logs stay until the pod is deleted. Idempotent.
    pub async fn release_finished_pod(&self, pod: &Pod) -> Result<(), SyncError> {
        self.remove_pod_cgroup(pod).await?;
        self.volumes.unmount_volumes(uid(pod))?;
        Ok(())
    }

    async fn remove_pod_cgroup(&self, pod: &Pod) -> Result<(), SyncError> {
        let cgroup = self.pod_cgroup(pod);
        // The last processes may take a moment to leave the cgroup after runc is done.
        let mut last = Ok(());
        for _ in 0..50 {
            last = self.cgroups.remove(&cgroup);
            if last.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        last.map_err(|source| SyncError::Cgroup { cgroup, source })
    }

    /// Removes the pod from the node: stops containers (with `grace`, else the pod's),
    /// stops and removes sandboxes and containers, then removes the pod cgroup and the pod
    /// log directory. Idempotent.
    pub async fn kill_pod(&self, pod: &Pod, grace: Option<i64>) -> Result<(), SyncError> {
        let rt = self.runtime_pod(uid(pod)).await?;
        self.stop_pod(pod, &rt, grace).await?;
        for c in &rt.containers {
            self.cri.remove_container(&c.id).await?;
        }
        for s in &rt.sandboxes {
            self.cri.remove_pod_sandbox(&s.id).await?;
        }
        self.remove_pod_cgroup(pod).await?;
        self.volumes.teardown(uid(pod))?;
        let dir = pod_log_dir(&self.node, pod);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(SyncError::LogDir {
                    dir: dir.display().to_string(),
                    source: e,
                });
            }
            _ => {}
        }
        if let Ok(mut r) = self.reasons.lock() {
            r.remove(uid(pod));
        }
        self.forget_allocation(uid(pod));
        if let Ok(mut b) = self.backoff.lock() {
            b.reset_prefix(&format!("{}_{}_{}_", name(pod), namespace(pod), uid(pod)));
        }
        if let Ok(mut pulls) = self.image_pulls.lock() {
            let prefix = format!("{}_", uid(pod));
            pulls.backoff.reset_prefix(&prefix);
            pulls.last_error.retain(|k, _| !k.starts_with(&prefix));
        }
        Ok(())
    }
}

/// The spec of a runtime container of `pod` (`None` for ephemeral containers, which
/// have no hooks or resources of their own).
fn spec_container<'a>(pod: &'a Pod, kind: ContainerType, name: &str) -> Option<&'a Container> {
    let s = spec(pod);
    match kind {
        ContainerType::Regular => s.containers.iter().find(|c| c.name == name),
        ContainerType::Init => s.init_containers.iter().flatten().find(|c| c.name == name),
        ContainerType::Ephemeral => None,
    }
}

/// Runs the container's preStop hook bounded by `grace` (a failure is an event, not a stop),
/// waits for the container's turn when the pod's stop is ordered, then stops the container
/// with the grace left (upstream `killContainer`).
#[allow(clippy::too_many_arguments)]
async fn kill_with_pre_stop(
    cri: &CriClient,
    events: &OnceLock<EventRecorder>,
    pod: &Pod,
    c: Option<&Container>,
    id: &str,
    grace: i64,
    pod_ip: Option<&str>,
    ordering: Option<(&TerminationOrdering, &str)>,
) -> Result<(), CriError> {
    let mut grace = grace;
    if let Some((c, handler)) = c.and_then(|c| Hook::PreStop.of(c).map(|h| (c, h))) {
        let started = std::time::Instant::now();
        let timeout = Duration::from_secs(grace.max(0) as u64);
        if let Err(msg) = run_hook(cri, pod, c, id, pod_ip, handler, timeout).await {
            tracing::info!(pod = name(pod), container = %c.name, error = %msg, "preStop hook failed");
            if let Some(rec) = events.get() {
                rec.event(
                    &container_ref(pod, &c.name),
                    None,
                    EventType::Warning,
                    "FailedPreStopHook",
                    "FailedPreStopHook",
                    &msg,
                );
            }
        }
        grace -= started.elapsed().as_secs() as i64;
    }
    if let Some((ordering, name)) = ordering
        && grace > 0
    {
        grace -= ordering.wait_for_turn(name, grace).await.as_secs() as i64;
    }
    let stopped = match cri.stop_container(id, grace.max(MIN_GRACE_SECONDS)).await {
        Err(e) if e.is_not_found() => Ok(()),
        r => r,
    };
    if let Some((ordering, name)) = ordering {
        ordering.container_terminated(name);
    }
    stopped
}

/// Adds the container's termination message to an exited container's status message
/// (upstream `convertToKubeContainerStatus`): the file mounted at its
/// `terminationMessagePath`, or with `FallbackToLogsOnError` and a failure, its last log
/// lines.
fn add_termination_message(st: &mut cri::ContainerStatus) {
    if st.state != cri::ContainerState::ContainerExited as i32 {
        return;
    }
    let path = st
        .annotations
        .get(TERMINATION_MESSAGE_PATH_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let fallback = st
        .annotations
        .get(TERMINATION_MESSAGE_POLICY_ANNOTATION)
        .is_some_and(|p| p == "FallbackToLogsOnError")
        && st.exit_code != 0
        && st.reason != "ContainerCannotRun";
    let mut message = String::new();
    let file = st
        .mounts
        .iter()
        .find(|m| !path.is_empty() && m.container_path == path);
    if let Some(bytes) = file.and_then(|m| std::fs::read(&m.host_path).ok()) {
        let n = bytes.len().min(MAX_TERMINATION_MESSAGE);
        message = String::from_utf8_lossy(&bytes[..n]).into_owned();
    }
    if message.is_empty()
        && fallback
        && let Ok(log) = std::fs::read_to_string(&st.log_path)
    {
        message = last_log_message(&log);
    }
    if !message.is_empty() {
        if !st.message.is_empty() {
            st.message.push_str(": ");
        }
        st.message.push_str(&message);
    }
}
