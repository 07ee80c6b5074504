//! The runtime's view of a pod (what the CRI reports, grouped per pod) and its conversion
//! into the API's `PodStatus` (upstream `kubelet_pods.go` `generateAPIPodStatus`,
//! `convertToAPIContainerStatuses`, `getPhase`, `status/generate.go`). Pure functions.

use std::collections::{BTreeMap, HashMap};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodIP, PodStatus, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::container::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_RESTART_COUNT_ANNOTATION, CONTAINER_TYPE_ANNOTATION,
    ContainerType, ephemeral_container, is_sidecar,
};
use crate::probe::{ProbeSnapshot, started_and_ready};
use crate::qos::pod_qos;
use crate::sandbox::{
    CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, spec,
};

/// The runtime state of a container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl From<i32> for RuntimeState {
    fn from(v: i32) -> Self {
        match cri::ContainerState::try_from(v) {
            Ok(cri::ContainerState::ContainerCreated) => RuntimeState::Created,
            Ok(cri::ContainerState::ContainerRunning) => RuntimeState::Running,
            Ok(cri::ContainerState::ContainerExited) => RuntimeState::Exited,
            _ => RuntimeState::Unknown,
        }
    }
}

/// One container instance as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeContainer {
    pub id: String,
    pub name: String,
    pub state: RuntimeState,
    /// Nanoseconds since the epoch (0 = unset).
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    /// The image as the user wrote it, and the image ID the runtime ran.
    pub image: String,
    pub image_ref: String,
    pub restart_count: i32,
    pub hash: String,
    /// Regular, init or ephemeral (from the kubelet's type annotation).
    pub kind: ContainerType,
    pub sandbox_id: String,
}

impl RuntimeContainer {
    /// From a CRI `ContainerStatus` (labels and annotations carry the kubelet's data).
    pub fn from_cri(s: &cri::ContainerStatus, sandbox_id: &str) -> Self {
        let ann = |k: &str| s.annotations.get(k).cloned().unwrap_or_default();
        RuntimeContainer {
            id: s.id.clone(),
            name: s
                .labels
                .get(CONTAINER_NAME_LABEL)
                .cloned()
                .or_else(|| s.metadata.as_ref().map(|m| m.name.clone()))
                .unwrap_or_default(),
            state: RuntimeState::from(s.state),
            created_at: s.created_at,
            started_at: s.started_at,
            finished_at: s.finished_at,
            exit_code: s.exit_code,
            reason: s.reason.clone(),
            message: s.message.clone(),
            image: s
                .image
                .as_ref()
                .map(|i| {
                    if i.user_specified_image.is_empty() {
                        i.image.clone()
                    } else {
                        i.user_specified_image.clone()
                    }
                })
                .unwrap_or_default(),
            image_ref: s.image_ref.clone(),
            restart_count: ann(CONTAINER_RESTART_COUNT_ANNOTATION).parse().unwrap_or(0),
            hash: ann(CONTAINER_HASH_ANNOTATION),
            kind: ContainerType::from_annotation(&ann(CONTAINER_TYPE_ANNOTATION)),
            sandbox_id: sandbox_id.to_owned(),
        }
    }
}

/// One sandbox as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSandbox {
    pub id: String,
    pub ready: bool,
    pub created_at: i64,
    pub attempt: u32,
    pub ips: Vec<String>,
    pub host_network: bool,
}

impl RuntimeSandbox {
    pub fn from_cri(s: &cri::PodSandboxStatus) -> Self {
        let mut ips = vec![];
        if let Some(n) = &s.network {
            if !n.ip.is_empty() {
                ips.push(n.ip.clone());
            }
            ips.extend(n.additional_ips.iter().map(|i| i.ip.clone()));
        }
        let host_network = s
            .linux
            .as_ref()
            .and_then(|l| l.namespaces.as_ref())
            .and_then(|n| n.options.as_ref())
            .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32);
        RuntimeSandbox {
            id: s.id.clone(),
            ready: s.state == cri::PodSandboxState::SandboxReady as i32,
            created_at: s.created_at,
            attempt: s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
            ips,
            host_network,
        }
    }
}

/// Everything the runtime has for one pod: sandboxes and containers, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimePod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<RuntimeSandbox>,
    pub containers: Vec<RuntimeContainer>,
}

impl RuntimePod {
    /// Sorts sandboxes and containers newest first (creation time, then restart count).
    pub fn sort(&mut self) {
        self.sandboxes.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.attempt.cmp(&a.attempt))
        });
        self.containers.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.restart_count.cmp(&a.restart_count))
        });
    }

    /// The newest instance of the container `name` of type `kind`.
    pub fn latest(&self, name: &str, kind: ContainerType) -> Option<&RuntimeContainer> {
        self.containers
            .iter()
            .find(|c| c.name == name && c.kind == kind)
    }

    /// The instances of `name` of type `kind`, newest first.
    pub fn instances<'a>(
        &'a self,
        name: &'a str,
        kind: ContainerType,
    ) -> impl Iterator<Item = &'a RuntimeContainer> + 'a {
        self.containers
            .iter()
            .filter(move |c| c.name == name && c.kind == kind)
    }

    /// The pod IPs of the newest sandbox.
    pub fn ips(&self) -> Vec<String> {
        self.sandboxes
            .first()
            .map(|s| s.ips.clone())
            .unwrap_or_default()
    }
}

/// Groups pod sandboxes and containers by pod UID (from the kubelet's labels).
pub fn group_by_pod(
    sandboxes: &[(cri::PodSandboxStatus, HashMap<String, String>)],
    containers: &[(cri::ContainerStatus, String)],
) -> BTreeMap<String, RuntimePod> {
    let mut pods: BTreeMap<String, RuntimePod> = BTreeMap::new();
    for (s, labels) in sandboxes {
        let uid = labels
            .get(POD_UID_LABEL)
            .cloned()
            .or_else(|| s.metadata.as_ref().map(|m| m.uid.clone()));
        let Some(uid) = uid else { continue };
        let p = pods.entry(uid.clone()).or_default();
        p.uid = uid;
        if let Some(m) = &s.metadata {
            p.name = labels
                .get(POD_NAME_LABEL)
                .cloned()
                .unwrap_or_else(|| m.name.clone());
            p.namespace = labels
                .get(POD_NAMESPACE_LABEL)
                .cloned()
                .unwrap_or_else(|| m.namespace.clone());
        }
        p.sandboxes.push(RuntimeSandbox::from_cri(s));
    }
    for (c, sandbox_id) in containers {
        let Some(uid) = c.labels.get(POD_UID_LABEL) else {
            continue;
        };
        let p = pods.entry(uid.clone()).or_default();
        if p.uid.is_empty() {
            p.uid = uid.clone();
            p.name = c.labels.get(POD_NAME_LABEL).cloned().unwrap_or_default();
            p.namespace = c
                .labels
                .get(POD_NAMESPACE_LABEL)
                .cloned()
                .unwrap_or_default();
        }
        p.containers.push(RuntimeContainer::from_cri(c, sandbox_id));
    }
    for p in pods.values_mut() {
        p.sort();
    }
    pods
}

fn time(nanos: i64) -> Option<Time> {
    (nanos > 0)
        .then(|| Timestamp::from_nanosecond(i128::from(nanos)).ok())
        .flatten()
        .map(Time)
}

/// `time.Unix(0, nanos)` as upstream's terminated state carries it: 0 is the epoch.
fn epoch_time(nanos: i64) -> Option<Time> {
    Timestamp::from_nanosecond(i128::from(nanos.max(0)))
        .ok()
        .map(Time)
}

/// A runtime instance as an API `ContainerState`.
pub fn api_state(c: &RuntimeContainer) -> ContainerState {
    let id = Some(format!("containerd://{}", c.id));
    match c.state {
        RuntimeState::Running => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time(c.started_at),
            }),
            ..Default::default()
        },
        RuntimeState::Exited => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: c.exit_code,
                reason: Some(if c.reason.is_empty() {
                    if c.exit_code == 0 {
                        "Completed"
                    } else {
                        "Error"
                    }
                    .to_owned()
                } else {
                    c.reason.clone()
                }),
                message: (!c.message.is_empty()).then(|| c.message.clone()),
                // Upstream converts the runtime's nanoseconds as they are: a container
                // that never started shows the epoch (1970-01-01T00:00:00Z), not nothing.
                started_at: epoch_time(c.started_at),
                finished_at: epoch_time(c.finished_at),
                container_id: id,
                ..Default::default()
            }),
            ..Default::default()
        },
        RuntimeState::Created => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                message: None,
            }),
            ..Default::default()
        },
        RuntimeState::Unknown => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some("ContainerStatusUnknown".into()),
                message: Some(
                    "The container could not be located when the pod was terminated".into(),
                ),
                container_id: id,
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// Whether the container would be restarted after this instance (`ShouldContainerBeRestarted`).
pub fn should_restart(restart_policy: &str, latest: Option<&RuntimeContainer>) -> bool {
    match latest {
        None => true,
        Some(c) => match c.state {
            RuntimeState::Running => false,
            RuntimeState::Created | RuntimeState::Unknown => true,
            RuntimeState::Exited => match restart_policy {
                "Never" => false,
                "OnFailure" => c.exit_code != 0,
                _ => true,
            },
        },
    }
}

/// A waiting reason from the last sync (`CrashLoopBackOff`, `ErrImagePull`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingReason {
    pub reason: String,
    pub message: String,
}

fn container_statuses(
    pod: &Pod,
    containers: &[Container],
    kind: ContainerType,
    rt: &RuntimePod,
    reasons: &HashMap<String, WaitingReason>,
    default_waiting: &str,
    probes: &ProbeSnapshot,
) -> Vec<ContainerStatus> {
    let policy = spec(pod).restart_policy.as_deref().unwrap_or("Always");
    containers
        .iter()
        .map(|c| {
            let mut instances = rt.instances(&c.name, kind);
            let latest = instances.next();
            let previous = instances.next();
            let mut st = ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                image_id: String::new(),
                ready: false,
                restart_count: 0,
                started: Some(false),
                state: Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(default_waiting.to_owned()),
                        message: None,
                    }),
                    ..Default::default()
                }),
                volume_mounts: mount_statuses(c),
                ..Default::default()
            };
            if latest.is_none()
                && let Some(old) = old_status(pod, kind, &c.name)
            {
                // No instance in the runtime (removed while the kubelet was down, or the
                // pod is finished): upstream keeps a terminated status as it was, and
                // the restart count and last state of any other.
                if old.state.as_ref().is_some_and(|s| s.terminated.is_some()) {
                    st = old.clone();
                } else {
                    st.restart_count = old.restart_count;
                    st.last_state = old.last_state.clone();
                    if was_running_and_vanished(old) {
                        st.last_state = Some(vanished_state());
                    }
                }
            }
            if let Some(l) = latest {
                st.container_id = Some(format!("containerd://{}", l.id));
                // The image as the runtime names it (containerd 1.6 answers the image's
                // first tag, `docker.io/library/nginx:latest` for `nginx`), as upstream's
                // kubelet reports it; the spec's until an instance exists.
                if !l.image.is_empty() {
                    st.image = l.image.clone();
                }
                st.image_id = l.image_ref.clone();
                st.restart_count = l.restart_count;
                st.state = Some(api_state(l));
                let running = l.state == RuntimeState::Running;
                if kind == ContainerType::Regular || (kind == ContainerType::Init && is_sidecar(c))
                {
                    let (started, ready) = started_and_ready(c, &l.id, running, probes);
                    st.ready = ready;
                    st.started = Some(started);
                } else {
                    // Other init containers and ephemeral ones are never ready.
                    st.ready = false;
                    st.started = Some(running);
                }
                if let Some(p) = previous {
                    st.last_state = Some(api_state(p));
                } else if let Some(old) = old_status(pod, kind, &c.name) {
                    // The runtime no longer has the instance before this one (gone with a
                    // reboot, or removed while the kubelet was down): upstream keeps the
                    // last state it showed, and for an instance it showed running that is
                    // now replaced, says it is unknown how it ended.
                    if old.container_id == st.container_id {
                        st.last_state = old.last_state.clone();
                    } else if was_running_and_vanished(old) {
                        st.last_state = Some(vanished_state());
                    }
                }
            }
            let restarting = will_start(kind, is_sidecar(c), policy, latest);
            if let Some(r) = reasons.get(&c.name).filter(|_| restarting) {
                if st.state.as_ref().is_some_and(|s| s.terminated.is_some()) {
                    st.last_state = st.state.take();
                }
                st.state = Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(r.reason.clone()),
                        message: (!r.message.is_empty()).then(|| r.message.clone()),
                    }),
                    ..Default::default()
                });
            }
            // Go's `ContainerState` is a struct, never omitted: upstream always shows
            // `lastState: {}`.
            st.last_state.get_or_insert_with(Default::default);
            st
        })
        .collect()
}

/// Upstream's `status.volumeMounts` (RecursiveReadOnlyMounts, on since 1.31): the
/// container's mounts as asked, a read-only one saying whether it was made recursively
/// read-only (`Disabled` when the runtime cannot, or when the mode cannot be resolved:
/// the container then fails to start, saying why).
fn mount_statuses(c: &Container) -> Option<Vec<VolumeMountStatus>> {
    let mounts = c.volume_mounts.as_ref().filter(|m| !m.is_empty())?;
    Some(
        mounts
            .iter()
            .map(|m| {
                let read_only = m.read_only == Some(true);
                let recursive = crate::volume::resolve_recursive_read_only(
                    m,
                    crate::volume::RUNTIME_SUPPORTS_RECURSIVE_READ_ONLY,
                )
                .unwrap_or(false);
                VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: read_only.then_some(true),
                    recursive_read_only: read_only
                        .then(|| if recursive { "Enabled" } else { "Disabled" }.to_owned()),
                }
            })
            .collect(),
    )
}

/// Whether the API shows the container running and no termination before it: when the
/// runtime has lost that instance, its end is unknown.
fn was_running_and_vanished(old: &ContainerStatus) -> bool {
    old.state.as_ref().is_some_and(|s| s.running.is_some())
        && old
            .last_state
            .as_ref()
            .is_none_or(|s| s.terminated.is_none())
}

/// Upstream's last state for a container shown running that the runtime no longer has
/// (`convertToAPIContainerStatuses`), wording and all.
fn vanished_state() -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some("ContainerStatusUnknown".into()),
            message: Some(
                "The container could not be located when the pod was deleted.  The container used to be Running"
                    .into(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container's status in the pod's current API status.
fn old_status<'a>(pod: &'a Pod, kind: ContainerType, name: &str) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    let list = match kind {
        ContainerType::Regular => &st.container_statuses,
        ContainerType::Init => &st.init_container_statuses,
        ContainerType::Ephemeral => &st.ephemeral_container_statuses,
    };
    list.iter().flatten().find(|c| c.name == name)
}

/// Whether the container will be started (again), so a waiting reason of the last sync
/// is what its status shows.
fn will_start(
    kind: ContainerType,
    sidecar: bool,
    policy: &str,
    latest: Option<&RuntimeContainer>,
) -> bool {
    match kind {
        // Sidecars run again whenever they stop.
        ContainerType::Init if sidecar => latest.is_none_or(|c| c.state != RuntimeState::Running),
        // Init containers run again after a failure unless the policy is Never.
        ContainerType::Init => match latest {
            None => true,
            Some(c) if c.state == RuntimeState::Exited => c.exit_code != 0 && policy != "Never",
            Some(c) => c.state != RuntimeState::Running,
        },
        // Ephemeral containers start once and never again.
        ContainerType::Ephemeral => latest.is_none(),
        ContainerType::Regular => should_restart(policy, latest),
    }
}

/// The phase of a pod this kubelet is deleting once its containers have stopped
/// (upstream `getPhase` of a terminal pod): `Succeeded` when every container exited 0,
/// else `Failed`; a terminal phase already in `status` stays.
pub fn terminal_phase(status: &PodStatus) -> &'static str {
    match status.phase.as_deref() {
        Some("Succeeded") => return "Succeeded",
        Some("Failed") => return "Failed",
        _ => {}
    }
    let mut statuses = status.container_statuses.iter().flatten().peekable();
    let exited_0 = |s: &ContainerStatus| {
        s.state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    };
    if statuses.peek().is_some() && statuses.all(exited_0) {
        "Succeeded"
    } else {
        "Failed"
    }
}

/// The pod phase from container statuses (upstream `getPhase`): sidecars count as
/// running containers and keep the pod Pending only until they have started, before
/// any regular container has.
pub fn pod_phase(
    pod: &Pod,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
) -> &'static str {
    let s = spec(pod);
    let policy = s.restart_policy.as_deref().unwrap_or("Always");
    let mut pending_init = 0;
    let mut failed_init = 0;
    for c in s
        .init_containers
        .iter()
        .flatten()
        .filter(|c| !is_sidecar(c))
    {
        let Some(st) = init_statuses.iter().find(|s| s.name == c.name) else {
            pending_init += 1;
            continue;
        };
        let state = st.state.clone().unwrap_or_default();
        if state.running.is_some() {
            pending_init += 1;
        } else if let Some(t) = &state.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if state.waiting.is_some() {
            match st.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    let mut pending_sidecars = 0;
    for c in s.init_containers.iter().flatten().filter(|c| is_sidecar(c)) {
        let Some(st) = init_statuses.iter().find(|s| s.name == c.name) else {
            unknown += 1;
            continue;
        };
        let state = st.state.clone().unwrap_or_default();
        if state.running.is_some() {
            if st.started != Some(true) {
                pending_sidecars += 1;
            }
            running += 1;
        } else if state.terminated.is_some() {
            // A stopped sidecar counts for nothing.
        } else if state.waiting.is_some() {
            if st
                .last_state
                .as_ref()
                .is_none_or(|l| l.terminated.is_none())
            {
                pending_sidecars += 1;
                waiting += 1;
            }
        } else {
            pending_sidecars += 1;
            unknown += 1;
        }
    }
    // Whether a regular container has run (upstream `HasAnyActiveRegularContainerStarted`).
    let regular_started = statuses.iter().any(|st| {
        st.state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || st
                .last_state
                .as_ref()
                .is_some_and(|l| l.terminated.is_some())
    });
    for c in &s.containers {
        let Some(st) = statuses.iter().find(|s| s.name == c.name) else {
            unknown += 1;
            continue;
        };
        let state = st.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.waiting.is_some() {
            if st
                .last_state
                .as_ref()
                .is_some_and(|l| l.terminated.is_some())
            {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    if pending_init > 0
        || (pending_sidecars > 0 && !regular_started)
        || (failed_init > 0 && running == 0 && stopped == 0)
        || waiting > 0
    {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    old: Option<&PodStatus>,
    now: &Time,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_));
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: (!ok).then(|| reason.map(str::to_owned)).flatten(),
        last_transition_time,
        ..Default::default()
    }
}

/// Inputs of [`pod_status`] besides the pod and the runtime view.
#[derive(Debug, Clone, Default)]
pub struct StatusInputs {
    /// Waiting reasons from the last sync, by container name.
    pub reasons: HashMap<String, WaitingReason>,
    /// The node's IPs (hostIP/hostIPs).
    pub host_ips: Vec<String>,
    /// Now, for new condition transitions and a first startTime.
    pub now: Option<Timestamp>,
    /// Probe results by container ID (started/ready).
    pub probes: ProbeSnapshot,
    /// `activeDeadlineSeconds` has passed: the pod is Failed with `DeadlineExceeded`.
    pub deadline_exceeded: bool,
    /// The eviction manager evicted the pod with this message: it is Failed with
    /// `Evicted` and a `DisruptionTarget` condition.
    pub evicted: Option<String>,
}

/// The API status of `pod` from what the runtime reports.
pub fn pod_status(pod: &Pod, rt: &RuntimePod, inputs: &StatusInputs) -> PodStatus {
    let s = spec(pod);
    let old = pod.status.as_ref();
    let now = Time(inputs.now.unwrap_or(Timestamp::UNIX_EPOCH));
    let inits = s.init_containers.clone().unwrap_or_default();
    let init_statuses = container_statuses(
        pod,
        &inits,
        ContainerType::Init,
        rt,
        &inputs.reasons,
        "PodInitializing",
        &inputs.probes,
    );
    // Initialized (upstream `GeneratePodInitializedCondition`): a regular container has
    // run, or every init container is done: exited 0, or for a sidecar, started.
    let regular_ran = s.containers.iter().any(|c| {
        rt.latest(&c.name, ContainerType::Regular)
            .is_some_and(|l| l.state != RuntimeState::Created)
    });
    let init_done = regular_ran
        || inits.iter().all(|c| {
            if is_sidecar(c) {
                return init_statuses
                    .iter()
                    .any(|st| st.name == c.name && st.started == Some(true));
            }
            rt.latest(&c.name, ContainerType::Init)
                .is_some_and(|l| l.state == RuntimeState::Exited && l.exit_code == 0)
        });
    let default_waiting = if inits.is_empty() || init_done {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let statuses = container_statuses(
        pod,
        &s.containers,
        ContainerType::Regular,
        rt,
        &inputs.reasons,
        default_waiting,
        &inputs.probes,
    );
    // Ephemeral containers have their own list and count for nothing else: not the
    // phase, not the Ready and ContainersReady conditions.
    let ephemeral: Vec<Container> = s
        .ephemeral_containers
        .iter()
        .flatten()
        .map(ephemeral_container)
        .collect();
    let ephemeral_statuses = container_statuses(
        pod,
        &ephemeral,
        ContainerType::Ephemeral,
        rt,
        &inputs.reasons,
        "ContainerCreating",
        &inputs.probes,
    );
    // A terminal phase is final (upstream keeps it whatever the runtime says later).
    let old_phase = old.and_then(|o| o.phase.as_deref());
    let (phase, reason, message) = match old_phase {
        Some(p @ ("Succeeded" | "Failed")) => (
            if p == "Failed" { "Failed" } else { "Succeeded" },
            old.and_then(|o| o.reason.clone()),
            old.and_then(|o| o.message.clone()),
        ),
        _ if inputs.deadline_exceeded => (
            "Failed",
            Some(crate::lifecycle::DEADLINE_REASON.to_owned()),
            Some(crate::lifecycle::DEADLINE_MESSAGE.to_owned()),
        ),
        _ if inputs.evicted.is_some() => (
            "Failed",
            Some(crate::eviction::EVICTED_REASON.to_owned()),
            inputs.evicted.clone(),
        ),
        _ => (pod_phase(pod, &init_statuses, &statuses), None, None),
    };
    let sandbox_ready = rt.sandboxes.first().is_some_and(|sb| sb.ready);
    // Sidecars count for readiness too (upstream `GenerateContainersReadyCondition`).
    let sidecars_ready = inits
        .iter()
        .filter(|c| is_sidecar(c))
        .all(|c| init_statuses.iter().any(|st| st.name == c.name && st.ready));
    let containers_ready =
        !statuses.is_empty() && statuses.iter().all(|c| c.ready) && sidecars_ready;
    let terminal = phase == "Succeeded" || phase == "Failed";
    let mut conditions = vec![
        condition("PodReadyToStartContainers", sandbox_ready, None, old, &now),
        condition(
            "Initialized",
            init_done,
            Some("ContainersNotInitialized"),
            old,
            &now,
        ),
        condition(
            "Ready",
            containers_ready && !terminal,
            Some(if terminal {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            }),
            old,
            &now,
        ),
        condition(
            "ContainersReady",
            containers_ready && !terminal,
            Some(if terminal {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            }),
            old,
            &now,
        ),
    ];
    if let Some(scheduled) = old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
    {
        conditions.push(scheduled.clone());
    }
    // An eviction's DisruptionTarget condition (upstream adds it with the Failed phase);
    // kept once written.
    let old_target = old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"));
    if let Some(target) = old_target {
        conditions.push(target.clone());
    } else if let Some(message) = &inputs.evicted {
        conditions.push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some(crate::eviction::TERMINATION_BY_KUBELET.into()),
            message: Some(message.clone()),
            last_transition_time: Some(now.clone()),
            ..Default::default()
        });
    }
    let ips = rt.ips();
    let pod_ips =
        if rt.sandboxes.first().is_some_and(|sb| sb.host_network) || s.host_network == Some(true) {
            inputs.host_ips.clone()
        } else {
            ips
        };
    PodStatus {
        phase: Some(phase.to_owned()),
        reason,
        message,
        conditions: Some(conditions),
        host_ip: inputs.host_ips.first().cloned(),
        host_ips: (!inputs.host_ips.is_empty()).then(|| {
            inputs
                .host_ips
                .iter()
                .map(|ip| k8s_openapi::api::core::v1::HostIP { ip: ip.clone() })
                .collect()
        }),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: old.and_then(|o| o.start_time.clone()).or(Some(now)),
        qos_class: Some(pod_qos(pod).as_str().to_owned()),
        init_container_statuses: (!inits.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral_statuses),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status of the pod's condition `t` (which must be there).
    fn condition_status(st: &PodStatus, t: &str) -> String {
        st.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
            .status
            .clone()
    }
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(containers: &[&str], inits: &[&str], policy: &str) -> Pod {
        let mk = |n: &&str| Container {
            name: (*n).into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: containers.iter().map(mk).collect(),
                init_containers: (!inits.is_empty()).then(|| inits.iter().map(mk).collect()),
                restart_policy: Some(policy.into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn a_container_that_never_started_shows_the_epoch_as_upstream() {
        let mut c = rc("c", RuntimeState::Exited, 128, 5, 0, false);
        c.started_at = 0;
        c.reason = "StartError".into();
        let t = api_state(&c).terminated.unwrap();
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["startedAt"], "1970-01-01T00:00:00Z");
        assert_eq!(json["reason"], "StartError");
        assert!(json["finishedAt"].as_str().is_some());
    }

    fn rc(
        name: &str,
        state: RuntimeState,
        exit: i32,
        created: i64,
        restarts: i32,
        init: bool,
    ) -> RuntimeContainer {
        RuntimeContainer {
            id: format!("{name}-{created}"),
            name: name.into(),
            state,
            created_at: created,
            started_at: if state == RuntimeState::Created {
                0
            } else {
                created + 1
            },
            finished_at: if state == RuntimeState::Exited {
                created + 2
            } else {
                0
            },
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: "docker.io/library/busybox:latest".into(),
            image_ref: "sha256:bb".into(),
            restart_count: restarts,
            hash: String::new(),
            kind: if init {
                ContainerType::Init
            } else {
                ContainerType::Regular
            },
            sandbox_id: "sb".into(),
        }
    }

    fn rt(containers: Vec<RuntimeContainer>) -> RuntimePod {
        let mut p = RuntimePod {
            uid: "u".into(),
            sandboxes: vec![RuntimeSandbox {
                id: "sb".into(),
                ready: true,
                created_at: 1,
                attempt: 0,
                ips: vec!["10.244.0.9".into()],
                host_network: false,
            }],
            containers,
            ..Default::default()
        };
        p.sort();
        p
    }

    use RuntimeState::*;

    #[test]
    fn phases() {
        let cases: Vec<(&str, Pod, Vec<RuntimeContainer>, &str)> = vec![
            ("nothing yet", pod(&["a"], &[], "Always"), vec![], "Pending"),
            (
                "running",
                pod(&["a"], &[], "Always"),
                vec![rc("a", Running, 0, 10, 0, false)],
                "Running",
            ),
            (
                "one of two running",
                pod(&["a", "b"], &[], "Always"),
                vec![rc("a", Running, 0, 10, 0, false)],
                "Pending",
            ),
            (
                "crashed, Always",
                pod(&["a"], &[], "Always"),
                vec![rc("a", Exited, 1, 10, 0, false)],
                "Running",
            ),
            (
                "succeeded, Never",
                pod(&["a"], &[], "Never"),
                vec![rc("a", Exited, 0, 10, 0, false)],
                "Succeeded",
            ),
            (
                "failed, Never",
                pod(&["a"], &[], "Never"),
                vec![rc("a", Exited, 2, 10, 0, false)],
                "Failed",
            ),
            (
                "failed, OnFailure",
                pod(&["a"], &[], "OnFailure"),
                vec![rc("a", Exited, 2, 10, 0, false)],
                "Running",
            ),
            (
                "succeeded, OnFailure",
                pod(&["a"], &[], "OnFailure"),
                vec![rc("a", Exited, 0, 10, 0, false)],
                "Succeeded",
            ),
            (
                "init running",
                pod(&["a"], &["i"], "Always"),
                vec![rc("i", Running, 0, 10, 0, true)],
                "Pending",
            ),
            (
                "init failed, Never",
                pod(&["a"], &["i"], "Never"),
                vec![rc("i", Exited, 1, 10, 0, true)],
                "Failed",
            ),
            (
                "init failed, Always",
                pod(&["a"], &["i"], "Always"),
                vec![rc("i", Exited, 1, 10, 0, true)],
                "Pending",
            ),
            (
                "init done, app running",
                pod(&["a"], &["i"], "Always"),
                vec![
                    rc("i", Exited, 0, 10, 0, true),
                    rc("a", Running, 0, 20, 0, false),
                ],
                "Running",
            ),
        ];
        for (name, p, cs, want) in cases {
            let st = pod_status(&p, &rt(cs), &StatusInputs::default());
            assert_eq!(st.phase.as_deref(), Some(want), "{name}");
        }
    }

    #[test]
    fn image_is_the_runtimes_once_an_instance_exists_and_last_state_always_shows() {
        let p = pod(&["a", "b"], &[], "Always");
        let st = pod_status(
            &p,
            &rt(vec![rc("a", Running, 0, 10, 0, false)]),
            &StatusInputs::default(),
        );
        let json = serde_json::to_value(st.container_statuses.unwrap()).unwrap();
        assert_eq!(json[0]["image"], "docker.io/library/busybox:latest");
        assert_eq!(json[1]["image"], "busybox", "no instance yet: the spec's");
        assert_eq!(json[0]["lastState"], serde_json::json!({}));
        assert_eq!(json[1]["lastState"], serde_json::json!({}));
    }

    #[test]
    fn volume_mounts_are_reported_as_upstream_does() {
        let mut p = pod(&["a"], &[], "Always");
        p.spec.as_mut().unwrap().containers[0].volume_mounts = Some(
            serde_json::from_value(serde_json::json!([
                {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                 "readOnly": true},
                {"name": "data", "mountPath": "/data"},
                {"name": "cfg", "mountPath": "/cfg", "readOnly": true,
                 "recursiveReadOnly": "IfPossible"}
            ]))
            .unwrap(),
        );
        let st = pod_status(
            &p,
            &rt(vec![rc("a", Running, 0, 10, 0, false)]),
            &StatusInputs::default(),
        );
        let json = serde_json::to_value(st.container_statuses.unwrap()).unwrap();
        assert_eq!(
            json[0]["volumeMounts"],
            serde_json::json!([
                {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                 "readOnly": true, "recursiveReadOnly": "Disabled"},
                {"name": "data", "mountPath": "/data"},
                {"name": "cfg", "mountPath": "/cfg", "readOnly": true,
                 "recursiveReadOnly": "Disabled"}
            ])
        );
    }

    #[test]
    fn container_status_fields() {
        let p = pod(&["a"], &[], "Always");
        let r = rt(vec![
            rc("a", Exited, 1, 10, 0, false),
            rc("a", Running, 0, 20, 1, false),
        ]);
        let st = pod_status(
            &p,
            &r,
            &StatusInputs {
                host_ips: vec!["192.168.1.5".into()],
                ..Default::default()
            },
        );
        let cs = &st.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, 1);
        assert!(cs.ready);
        assert_eq!(cs.started, Some(true));
        assert_eq!(cs.container_id.as_deref(), Some("containerd://a-20"));
        assert_eq!(cs.image, "docker.io/library/busybox:latest");
        assert_eq!(cs.image_id, "sha256:bb");
        assert!(cs.state.as_ref().unwrap().running.is_some());
        let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
        assert_eq!(last.container_id.as_deref(), Some("containerd://a-10"));
        assert_eq!(st.pod_ip.as_deref(), Some("10.244.0.9"));
        assert_eq!(st.host_ip.as_deref(), Some("192.168.1.5"));
        assert_eq!(st.qos_class.as_deref(), Some("BestEffort"));
        let cond = |t: &str| condition_status(&st, t);
        assert_eq!(cond("Ready"), "True");
        assert_eq!(cond("ContainersReady"), "True");
        assert_eq!(cond("Initialized"), "True");
        assert_eq!(cond("PodReadyToStartContainers"), "True");
    }

    #[test]
    fn waiting_reasons_move_termination_to_last_state() {
        let p = pod(&["a"], &[], "Always");
        let r = rt(vec![rc("a", Exited, 1, 10, 3, false)]);
        let reasons = HashMap::from([(
            "a".to_string(),
            WaitingReason {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 40s".into(),
            },
        )]);
        let st = pod_status(
            &p,
            &r,
            &StatusInputs {
                reasons: reasons.clone(),
                ..Default::default()
            },
        );
        let cs = &st.container_statuses.as_ref().unwrap()[0];
        let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(
            cs.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            1
        );
        assert_eq!(cs.restart_count, 3);
        assert!(!cs.ready);
        assert_eq!(st.phase.as_deref(), Some("Running"));
        // With Never the container will not restart: the reason is not shown.
        let p = pod(&["a"], &[], "Never");
        let st = pod_status(
            &p,
            &r,
            &StatusInputs {
                reasons,
                ..Default::default()
            },
        );
        let cs = &st.container_statuses.as_ref().unwrap()[0];
        assert!(cs.state.as_ref().unwrap().terminated.is_some());
        assert_eq!(st.phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn initializing_pod() {
        let p = pod(&["a"], &["i1", "i2"], "Always");
        let st = pod_status(
            &p,
            &rt(vec![
                rc("i1", Exited, 0, 10, 0, true),
                rc("i2", Running, 0, 20, 0, true),
            ]),
            &StatusInputs::default(),
        );
        let main = &st.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            main.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("PodInitializing")
        );
        let inits = st.init_container_statuses.as_ref().unwrap();
        assert!(inits[0].state.as_ref().unwrap().terminated.is_some());
        assert!(inits[1].state.as_ref().unwrap().running.is_some());
        assert!(!inits[1].ready, "init containers are never ready");
        let cond = |t: &str| {
            st.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .clone()
        };
        assert_eq!(cond("Initialized").status, "False");
        assert_eq!(
            cond("Initialized").reason.as_deref(),
            Some("ContainersNotInitialized")
        );
    }

    #[test]
    fn readiness_probe_drives_ready_and_conditions() {
        use crate::probe::{ProbeKind, ProbeResult};
        use k8s_openapi::api::core::v1::Probe;
        let mut p = pod(&["a"], &[], "Always");
        p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Probe::default());
        p.spec.as_mut().unwrap().containers[0].startup_probe = Some(Probe::default());
        let r = rt(vec![rc("a", Running, 0, 10, 0, false)]);
        let with = |results: &[(ProbeKind, ProbeResult)]| {
            let st = pod_status(
                &p,
                &r,
                &StatusInputs {
                    probes: results
                        .iter()
                        .map(|(k, v)| (("a-10".to_owned(), *k), *v))
                        .collect(),
                    ..Default::default()
                },
            );
            let cs = st.container_statuses.clone().unwrap().remove(0);
            let cond = |t: &str| condition_status(&st, t);
            (
                cs.started.unwrap(),
                cs.ready,
                cond("ContainersReady"),
                cond("Ready"),
            )
        };
        use ProbeKind::*;
        use ProbeResult::*;
        let f = || "False".to_owned();
        let t = || "True".to_owned();
        assert_eq!(with(&[]), (false, false, f(), f()));
        assert_eq!(
            with(&[(Readiness, Success)]),
            (false, false, f(), f()),
            "not started"
        );
        assert_eq!(with(&[(Startup, Success)]), (true, false, f(), f()));
        assert_eq!(
            with(&[(Startup, Success), (Readiness, Success)]),
            (true, true, t(), t())
        );
        assert_eq!(
            with(&[(Startup, Success), (Readiness, Failure)]),
            (true, false, f(), f())
        );
    }

    #[test]
    fn an_evicted_pod_fails_with_a_disruption_target() {
        let mut p = pod(&["a"], &[], "Always");
        let r = rt(vec![rc("a", Running, 0, 10, 0, false)]);
        let message = "The node was low on resource: memory. ";
        let st = pod_status(
            &p,
            &r,
            &StatusInputs {
                evicted: Some(message.into()),
                ..Default::default()
            },
        );
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("Evicted"));
        assert_eq!(st.message.as_deref(), Some(message));
        let target = |st: &PodStatus| {
            st.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "DisruptionTarget")
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let want = Some((
            "True".to_owned(),
            Some("TerminationByKubelet".to_owned()),
            Some(message.to_owned()),
        ));
        assert_eq!(target(&st), want);
        p.status = Some(st);
        let later = pod_status(&p, &r, &StatusInputs::default());
        assert_eq!(later.reason.as_deref(), Some("Evicted"), "stays Evicted");
        assert_eq!(target(&later), want, "the condition stays");
    }

    #[test]
    fn a_deleted_pod_ends_failed_unless_every_container_exited_0() {
        let status = |phase: &str, codes: &[i32]| -> PodStatus {
            serde_json::from_value(serde_json::json!({
                "phase": phase,
                "containerStatuses": codes.iter().enumerate().map(|(i, c)| serde_json::json!({
                    "name": format!("c{i}"), "ready": false, "restartCount": 0,
                    "image": "i", "imageID": "",
                    "state": {"terminated": {"exitCode": c}}})).collect::<Vec<_>>(),
            }))
            .unwrap()
        };
        assert_eq!(terminal_phase(&status("Running", &[0, 0])), "Succeeded");
        assert_eq!(terminal_phase(&status("Running", &[0, 137])), "Failed");
        assert_eq!(terminal_phase(&status("Pending", &[])), "Failed");
        // A phase written before stays.
        assert_eq!(terminal_phase(&status("Succeeded", &[137])), "Succeeded");
    }

    #[test]
    fn terminal_phase_is_final_and_deadline_fails_the_pod() {
        let mut p = pod(&["a"], &[], "Always");
        let r = rt(vec![rc("a", Running, 0, 10, 0, false)]);
        let st = pod_status(
            &p,
            &r,
            &StatusInputs {
                deadline_exceeded: true,
                ..Default::default()
            },
        );
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
        let ready = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodCompleted"))
        );
        p.status = Some(st);
        let later = pod_status(&p, &r, &StatusInputs::default());
        assert_eq!(later.phase.as_deref(), Some("Failed"), "stays Failed");
        assert_eq!(
            later.message.as_deref(),
            Some(crate::lifecycle::DEADLINE_MESSAGE)
        );
    }

    #[test]
    fn condition_transition_times_are_kept() {
        let mut p = pod(&["a"], &[], "Always");
        let r = rt(vec![rc("a", Running, 0, 10, 0, false)]);
        let t1 = Timestamp::from_second(1000).unwrap();
        let st1 = pod_status(
            &p,
            &r,
            &StatusInputs {
                now: Some(t1),
                ..Default::default()
            },
        );
        p.status = Some(st1);
        let t2 = Timestamp::from_second(2000).unwrap();
        let st2 = pod_status(
            &p,
            &r,
            &StatusInputs {
                now: Some(t2),
                ..Default::default()
            },
        );
        let ready = st2
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.last_transition_time, Some(Time(t1)));
        assert_eq!(st2.start_time, Some(Time(t1)));
    }

    #[test]
    fn restart_rules() {
        let c = |s, e| rc("a", s, e, 1, 0, false);
        assert!(should_restart("Never", None));
        assert!(!should_restart("Always", Some(&c(Running, 0))));
        assert!(should_restart("Always", Some(&c(Exited, 0))));
        assert!(should_restart("OnFailure", Some(&c(Exited, 1))));
        assert!(!should_restart("OnFailure", Some(&c(Exited, 0))));
        assert!(!should_restart("Never", Some(&c(Exited, 1))));
        assert!(should_restart("Never", Some(&c(Created, 0))));
    }

    #[test]
    fn a_running_container_the_runtime_lost_ended_unknown() {
        let mut p = pod(&["app"], &[], "Always");
        let running = pod_status(
            &p,
            &rt(vec![rc("app", Running, 0, 10, 0, false)]),
            &StatusInputs::default(),
        );
        p.status = Some(running);
        let unknown = |st: &PodStatus| {
            let cs = &st.container_statuses.as_ref().unwrap()[0];
            let last = cs.last_state.as_ref()?.terminated.as_ref()?;
            Some((
                last.exit_code,
                last.reason.clone()?,
                cs.state.as_ref()?.running.is_some(),
            ))
        };
        // After a reboot: the runtime has nothing of the pod.
        let gone = pod_status(&p, &rt(vec![]), &StatusInputs::default());
        assert_eq!(
            unknown(&gone),
            Some((137, "ContainerStatusUnknown".into(), false))
        );
        // The new instance runs before the status above reached the pod object: the
        // old one is still inferred, then kept while the same instance runs.
        let replaced = rt(vec![rc("app", Running, 0, 20, 1, false)]);
        let restarted = pod_status(&p, &replaced, &StatusInputs::default());
        assert_eq!(
            unknown(&restarted),
            Some((137, "ContainerStatusUnknown".into(), true))
        );
        p.status = Some(restarted.clone());
        let later = pod_status(&p, &replaced, &StatusInputs::default());
        assert_eq!(
            later.container_statuses.as_ref().unwrap()[0].last_state,
            restarted.container_statuses.as_ref().unwrap()[0].last_state
        );
        // A container that simply keeps running has an empty last state.
        let mut fresh = pod(&["app"], &[], "Always");
        let same = rt(vec![rc("app", Running, 0, 10, 0, false)]);
        fresh.status = Some(pod_status(&fresh, &same, &StatusInputs::default()));
        let again = pod_status(&fresh, &same, &StatusInputs::default());
        assert_eq!(
            again.container_statuses.unwrap()[0].last_state,
            Some(ContainerState::default())
        );
    }

    #[test]
    fn statuses_of_containers_gone_from_the_runtime_are_kept() {
        let mut p = pod(&["done", "waiting"], &[], "Never");
        let finished = pod_status(
            &p,
            &rt(vec![
                rc("done", Exited, 0, 10, 0, false),
                rc("waiting", Exited, 1, 11, 0, false),
            ]),
            &StatusInputs::default(),
        );
        assert_eq!(finished.phase.as_deref(), Some("Failed"));
        // The runtime forgot both containers (removed while the kubelet was down).
        let mut old = finished.clone();
        let statuses = old.container_statuses.as_mut().unwrap();
        statuses[1].state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            }),
            ..Default::default()
        });
        statuses[1].restart_count = 4;
        p.status = Some(old.clone());
        let again = pod_status(&p, &rt(vec![]), &StatusInputs::default());
        let cs = again.container_statuses.unwrap();
        assert_eq!(
            cs[0],
            old.container_statuses.as_ref().unwrap()[0],
            "terminated: kept"
        );
        assert_eq!(
            cs[1]
                .state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("ContainerCreating"),
            "not terminated: the default state"
        );
        assert_eq!(cs[1].restart_count, 4, "with its restart count");
        assert_eq!(again.phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn ephemeral_container_statuses_count_for_nothing_else() {
        use k8s_openapi::api::core::v1::EphemeralContainer;
        let mut p = pod(&["a"], &[], "Always");
        p.spec.as_mut().unwrap().ephemeral_containers = Some(
            ["dbg", "later", "broken"]
                .iter()
                .map(|n| EphemeralContainer {
                    name: (*n).into(),
                    image: Some("busybox".into()),
                    target_container_name: Some("a".into()),
                    ..Default::default()
                })
                .collect(),
        );
        let mut dbg = rc("dbg", Running, 0, 20, 0, false);
        dbg.kind = ContainerType::Ephemeral;
        let reasons = HashMap::from([(
            "broken".to_string(),
            WaitingReason {
                reason: "ErrImagePull".into(),
                message: "no such image".into(),
            },
        )]);
        let inputs = StatusInputs {
            reasons,
            ..Default::default()
        };
        let st = pod_status(
            &p,
            &rt(vec![rc("a", Running, 0, 10, 0, false), dbg.clone()]),
            &inputs,
        );
        let es = st.ephemeral_container_statuses.as_ref().unwrap();
        assert_eq!(es.len(), 3);
        assert_eq!(es[0].name, "dbg");
        assert!(es[0].state.as_ref().unwrap().running.is_some());
        assert_eq!(es[0].container_id.as_deref(), Some("containerd://dbg-20"));
        assert_eq!(
            (es[0].image.as_str(), es[0].image_id.as_str()),
            ("docker.io/library/busybox:latest", "sha256:bb")
        );
        assert_eq!(
            (es[0].ready, es[0].started, es[0].restart_count),
            (false, Some(true), 0)
        );
        let waiting = |i: usize| {
            es[i]
                .state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .clone()
        };
        assert_eq!(waiting(1).as_deref(), Some("ContainerCreating"));
        assert_eq!(waiting(2).as_deref(), Some("ErrImagePull"));
        // Not in the regular statuses; the pod is Running and Ready although no
        // ephemeral container is ready.
        assert_eq!(st.container_statuses.as_ref().unwrap().len(), 1);
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(condition_status(&st, "Ready"), "True");
        assert_eq!(condition_status(&st, "ContainersReady"), "True");

        // Exited: terminated, no waiting reason over it, the pod as before.
        dbg.state = Exited;
        dbg.finished_at = 30;
        let st = pod_status(
            &p,
            &rt(vec![rc("a", Running, 0, 10, 0, false), dbg]),
            &inputs,
        );
        let es = st.ephemeral_container_statuses.as_ref().unwrap();
        let t = es[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(es[0].started, Some(false));
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(condition_status(&st, "Ready"), "True");

        // A pod whose regular container succeeded (Never) is Succeeded whatever its
        // ephemeral containers do.
        let mut never = p.clone();
        never.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        let mut running = rc("dbg", Running, 0, 20, 0, false);
        running.kind = ContainerType::Ephemeral;
        let st = pod_status(
            &never,
            &rt(vec![rc("a", Exited, 0, 10, 0, false), running]),
            &StatusInputs::default(),
        );
        assert_eq!(st.phase.as_deref(), Some("Succeeded"));

        // Without ephemeral containers the field stays unset.
        let st = pod_status(
            &pod(&["a"], &[], "Always"),
            &rt(vec![rc("a", Running, 0, 10, 0, false)]),
            &StatusInputs::default(),
        );
        assert!(st.ephemeral_container_statuses.is_none());
    }

    #[test]
    fn container_type_from_the_annotation() {
        let mut st = cri::ContainerStatus {
            id: "x".into(),
            ..Default::default()
        };
        for (value, kind) in [
            (None, ContainerType::Regular),
            (Some("init"), ContainerType::Init),
            (Some("EPHEMERAL"), ContainerType::Ephemeral),
            (Some("REGULAR"), ContainerType::Regular),
        ] {
            st.annotations.clear();
            if let Some(v) = value {
                st.annotations
                    .insert(CONTAINER_TYPE_ANNOTATION.to_owned(), v.to_owned());
            }
            assert_eq!(
                RuntimeContainer::from_cri(&st, "sb").kind,
                kind,
                "{value:?}"
            );
        }
    }
}
