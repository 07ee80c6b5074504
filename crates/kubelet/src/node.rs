//! The Node object the kubelet registers and keeps current (upstream
//! `kubelet_node_status.go` and `nodestatus/setters.go`): capacity and allocatable,
//! `--kube-reserved`/`--system-reserved`/`--eviction-hard` parsing, conditions with
//! upstream's reasons, labels, addresses, and the "does the status need a write" rule.
//! Pure: machine facts and times are passed in.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::quantity::{milli_value, value};

/// The version the kubelet reports (`nodeInfo.kubeletVersion`).
pub const KUBELET_VERSION: &str = ferrokube_component_base::version::GIT_VERSION;
/// Upstream's default `maxPods`.
pub const DEFAULT_MAX_PODS: i64 = 110;
/// Upstream's default `--eviction-hard` (Linux).
pub const DEFAULT_EVICTION_HARD: &str =
    "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%";
/// How long an unchanged status may go without being reported (`nodeStatusReportFrequency`).
pub const NODE_STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(300);

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";

/// Errors of flag values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("invalid {flag} entry {entry:?}: {why}")]
    Entry {
        flag: &'static str,
        entry: String,
        why: &'static str,
    },
    /// `--node-labels` that upstream's flag validation refuses, with its text.
    #[error("{0}")]
    NodeLabels(String),
}

fn entry_err(flag: &'static str, entry: &str, why: &'static str) -> ParseError {
    ParseError::Entry {
        flag,
        entry: entry.to_owned(),
        why,
    }
}

/// Reserved resources (`--kube-reserved`, `--system-reserved`): CPU in millicores, the
/// others in bytes (or a count for `pid`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pid: i64,
}

impl Reserved {
    /// Parses `cpu=100m,memory=100Mi,ephemeral-storage=1Gi,pid=1000` (upstream's
    /// `ConfigurationMap` of resource name to quantity). Empty means nothing reserved.
    pub fn parse(flag: &'static str, s: &str) -> Result<Reserved, ParseError> {
        let mut map = BTreeMap::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (k, v) = entry
                .split_once('=')
                .ok_or_else(|| entry_err(flag, entry, "expected name=quantity"))?;
            map.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        Reserved::from_map(flag, &map)
    }

    /// From a `KubeletConfiguration` map (`kubeReserved`, `systemReserved`).
    pub fn from_map(
        flag: &'static str,
        map: &BTreeMap<String, String>,
    ) -> Result<Reserved, ParseError> {
        let mut r = Reserved::default();
        for (k, v) in map {
            let q = Quantity(v.clone());
            let entry = format!("{k}={v}");
            let bad = |why| entry_err(flag, &entry, why);
            match k.as_str() {
                "cpu" => r.cpu_milli = milli_value(&q).ok_or_else(|| bad("bad quantity"))?,
                "memory" => r.memory = value(&q).ok_or_else(|| bad("bad quantity"))?,
                "ephemeral-storage" => {
                    r.ephemeral_storage = value(&q).ok_or_else(|| bad("bad quantity"))?
                }
                "pid" => r.pid = value(&q).ok_or_else(|| bad("bad quantity"))?,
                _ => {
                    return Err(bad(
                        "unsupported resource (cpu, memory, ephemeral-storage, pid)",
                    ));
                }
            }
            if r.cpu_milli < 0 || r.memory < 0 || r.ephemeral_storage < 0 || r.pid < 0 {
                return Err(bad("negative quantity"));
            }
        }
        Ok(r)
    }
}

/// A hard eviction threshold's value: an absolute quantity or a fraction of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdValue {
    Quantity(i64),
    Percentage(f64),
}

impl ThresholdValue {
    /// The amount for a resource of `capacity`.
    pub fn amount(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * p) as i64,
        }
    }
}

/// The hard eviction thresholds (`--eviction-hard`): signal → value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvictionThresholds {
    pub thresholds: BTreeMap<String, ThresholdValue>,
}

const SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
    "allocatableMemory.available",
];

impl EvictionThresholds {
    /// Parses `memory.available<100Mi,nodefs.available<10%` (only `<` is valid).
    pub fn parse(s: &str) -> Result<EvictionThresholds, ParseError> {
        let mut map = BTreeMap::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (k, v) = entry
                .split_once('<')
                .ok_or_else(|| entry_err("--eviction-hard", entry, "expected signal<value"))?;
            map.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        EvictionThresholds::from_map(&map)
    }

    /// From a `KubeletConfiguration` `evictionHard` map.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<EvictionThresholds, ParseError> {
        let mut thresholds = BTreeMap::new();
        for (k, v) in map {
            let entry = format!("{k}<{v}");
            let bad = |why| entry_err("--eviction-hard", &entry, why);
            if !SIGNALS.contains(&k.as_str()) {
                return Err(bad("unknown eviction signal"));
            }
            let value = if let Some(p) = v.strip_suffix('%') {
                let p: f64 = p.parse().map_err(|_| bad("bad percentage"))?;
                if !(0.0..=100.0).contains(&p) {
                    return Err(bad("percentage out of range"));
                }
                ThresholdValue::Percentage(p / 100.0)
            } else {
                let q = value(&Quantity(v.clone())).ok_or_else(|| bad("bad quantity"))?;
                if q < 0 {
                    return Err(bad("negative quantity"));
                }
                ThresholdValue::Quantity(q)
            };
            // A threshold of 0 (or 0%) disables the signal, as upstream.
            if value.amount(1 << 40) != 0 {
                thresholds.insert(k.clone(), value);
            }
        }
        Ok(EvictionThresholds { thresholds })
    }

    fn amount(&self, signal: &str, capacity: i64) -> i64 {
        self.thresholds
            .get(signal)
            .map_or(0, |t| t.amount(capacity))
    }
}

/// What the machine has (read from /proc and statvfs by the caller).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineInfo {
    pub num_cpus: i64,
    /// MemTotal in bytes.
    pub memory_bytes: i64,
    /// Size of the filesystem holding the kubelet root dir, in bytes.
    pub root_fs_bytes: i64,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    /// The kernel's huge page pools: page size in bytes -> pages (upstream's cAdvisor
    /// `MachineInfo.HugePages`); empty when none could be read.
    pub hugepages: BTreeMap<u64, u64>,
}

/// The node's `hugepages-<size>` resources and their bytes, one per kernel pool
/// (upstream's `HugePageResourceName`: the page size as a BinarySI quantity).
pub fn hugepage_capacity(pools: &BTreeMap<u64, u64>) -> impl Iterator<Item = (String, i64)> + '_ {
    pools.iter().filter_map(|(size, pages)| {
        let size_i = i64::try_from(*size).ok().filter(|s| *s > 0)?;
        let bytes = i64::try_from(*pages).ok()?.checked_mul(size_i)?;
        Some((format!("hugepages-{}", format_bytes(size_i)), bytes))
    })
}

/// Capacity and allocatable of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    pub capacity: BTreeMap<String, Quantity>,
    pub allocatable: BTreeMap<String, Quantity>,
}

/// `n` bytes as upstream's canonical BinarySI string (the largest exact power of 1024).
pub fn format_bytes(n: i64) -> String {
    if n == 0 {
        return "0".into();
    }
    let suffixes = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut v = n;
    let mut i = 0;
    while i + 1 < suffixes.len() && v % 1024 == 0 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", suffixes[i])
}

/// Millicores as upstream's canonical DecimalSI string (`2`, `1500m`).
pub fn format_milli(m: i64) -> String {
    if m % 1000 == 0 {
        format!("{}", m / 1000)
    } else {
        format!("{m}m")
    }
}

/// Capacity and allocatable (upstream's `MachineInfo` and `GetNodeAllocatableReservation`):
/// allocatable = capacity − kube-reserved − system-reserved − hard eviction threshold, never
/// below zero.
pub fn node_resources(
    m: &MachineInfo,
    max_pods: i64,
    kube: &Reserved,
    system: &Reserved,
    eviction: &EvictionThresholds,
) -> Resources {
    let cpu = m.num_cpus * 1000;
    let mem = m.memory_bytes;
    let storage = m.root_fs_bytes;
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_owned(), Quantity(format_milli(cpu)));
    capacity.insert("memory".to_owned(), Quantity(format_bytes(mem)));
    capacity.insert(
        "ephemeral-storage".to_owned(),
        Quantity(format_bytes(storage)),
    );
    capacity.insert("pods".to_owned(), Quantity(max_pods.to_string()));
    if m.hugepages.is_empty() {
        // Nothing read of the kernel's pools: x86's two sizes, none preallocated.
        capacity.insert("hugepages-1Gi".to_owned(), Quantity("0".into()));
        capacity.insert("hugepages-2Mi".to_owned(), Quantity("0".into()));
    }
    for (name, bytes) in hugepage_capacity(&m.hugepages) {
        capacity.insert(name, Quantity(format_bytes(bytes)));
    }
    // Preallocated huge pages are memory no pod can have as such (upstream's setter).
    let huge_bytes: i64 = hugepage_capacity(&m.hugepages)
        .map(|(_, bytes)| bytes)
        .fold(0, i64::saturating_add);
    let sub = |cap: i64, reserved: i64| (cap - reserved).max(0);
    let mut allocatable = capacity.clone();
    allocatable.insert(
        "cpu".to_owned(),
        Quantity(format_milli(sub(cpu, kube.cpu_milli + system.cpu_milli))),
    );
    allocatable.insert(
        "memory".to_owned(),
        Quantity(format_bytes(sub(
            mem,
            (kube.memory + system.memory + eviction.amount("memory.available", mem))
                .saturating_add(huge_bytes),
        ))),
    );
    allocatable.insert(
        "ephemeral-storage".to_owned(),
        Quantity(format_bytes(sub(
            storage,
            kube.ephemeral_storage
                + system.ephemeral_storage
                + eviction.amount("nodefs.available", storage),
        ))),
    );
    Resources {
        capacity,
        allocatable,
    }
}

/// The runtime's readiness from CRI `Status` (RuntimeReady and NetworkReady conditions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeHealth {
    /// `None` when the runtime did not answer (the error text is kept).
    pub status_error: Option<String>,
    pub runtime_ready: bool,
    pub runtime_reason: String,
    pub runtime_message: String,
    pub network_ready: bool,
    pub network_reason: String,
    pub network_message: String,
}

/// The node's pressures (from the eviction manager).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressures {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

fn cond(
    type_: &str,
    is_true: bool,
    reason: &str,
    message: String,
    old: &[NodeCondition],
    now: &Time,
) -> NodeCondition {
    let status = if is_true { "True" } else { "False" };
    let transition = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(transition),
    }
}

/// The four kubelet-owned conditions, in upstream's order (MemoryPressure, DiskPressure,
/// PIDPressure, Ready), keeping transition times of unchanged ones from `old`.
pub fn node_conditions(
    health: &RuntimeHealth,
    pressures: Pressures,
    old: &[NodeCondition],
    now: &Time,
) -> Vec<NodeCondition> {
    let mut errors = vec![];
    if let Some(e) = &health.status_error {
        errors.push(format!(
            "container runtime status check may not have completed yet: {e}"
        ));
    } else {
        if !health.runtime_ready {
            errors.push(format!(
                "container runtime not ready: RuntimeReady=false reason:{} message:{}",
                health.runtime_reason, health.runtime_message
            ));
        }
        if !health.network_ready {
            errors.push(format!(
                "container runtime network not ready: NetworkReady=false reason:{} message:{}",
                health.network_reason, health.network_message
            ));
        }
    }
    let ready = errors.is_empty();
    vec![
        if pressures.memory {
            cond(
                "MemoryPressure",
                true,
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available".into(),
                old,
                now,
            )
        } else {
            cond(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available".into(),
                old,
                now,
            )
        },
        if pressures.disk {
            cond(
                "DiskPressure",
                true,
                "KubeletHasDiskPressure",
                "kubelet has disk pressure".into(),
                old,
                now,
            )
        } else {
            cond(
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure".into(),
                old,
                now,
            )
        },
        if pressures.pid {
            cond(
                "PIDPressure",
                true,
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available".into(),
                old,
                now,
            )
        } else {
            cond(
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available".into(),
                old,
                now,
            )
        },
        if ready {
            cond(
                "Ready",
                true,
                "KubeletReady",
                "kubelet is posting ready status".into(),
                old,
                now,
            )
        } else {
            cond(
                "Ready",
                false,
                "KubeletNotReady",
                errors.join(", "),
                old,
                now,
            )
        },
    ]
}

/// The events upstream's node status setters record about the kubelet-owned conditions
/// going from `old` to `new`: each pressure condition when its status changes (a missing
/// one counts as Unknown, so the first status reports them all), Ready only when it
/// changes from a status it had (`NodeReady`/`NodeNotReady`).
pub fn condition_events(old: &[NodeCondition], new: &[NodeCondition]) -> Vec<&'static str> {
    let status = |conds: &[NodeCondition], type_: &str| {
        conds
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    };
    let mut events = vec![];
    for (type_, when_true, when_false) in [
        (
            "MemoryPressure",
            "NodeHasInsufficientMemory",
            "NodeHasSufficientMemory",
        ),
        (
            "DiskPressure",
            "NodeHasDiskPressure",
            "NodeHasNoDiskPressure",
        ),
        (
            "PIDPressure",
            "NodeHasInsufficientPID",
            "NodeHasSufficientPID",
        ),
        ("Ready", "NodeReady", "NodeNotReady"),
    ] {
        let Some(now) = status(new, type_) else {
            continue;
        };
        let before = status(old, type_);
        let changed = match before {
            None => type_ != "Ready",
            Some(before) => before != now,
        };
        if changed {
            events.push(if now == "True" { when_true } else { when_false });
        }
    }
    events
}

/// Everything the node object is built from.
#[derive(Debug, Clone, Default)]
pub struct NodeInputs {
    pub node_name: String,
    pub hostname: String,
    /// `--node-ip` (or the detected one): InternalIP addresses.
    pub node_ips: Vec<String>,
    /// `--node-labels`.
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub taints: Vec<Taint>,
    pub os: String,
    pub arch: String,
    /// `containerd://1.6.20` (runtime name and version from CRI Version).
    pub container_runtime_version: String,
    pub kubelet_port: i32,
    pub machine: MachineInfo,
    pub resources: Option<Resources>,
    pub images: Vec<ContainerImage>,
}

/// Go's `runtime.GOARCH` name of this build's architecture.
pub fn go_arch(rust_arch: &str) -> String {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
    .to_owned()
}

/// The default labels (upstream `initialNode`) merged over `--node-labels`.
pub fn node_labels(i: &NodeInputs) -> BTreeMap<String, String> {
    let mut l = i.labels.clone();
    l.insert(LABEL_HOSTNAME.into(), i.hostname.clone());
    l.insert(LABEL_OS.into(), i.os.clone());
    l.insert(LABEL_ARCH.into(), i.arch.clone());
    l.insert("beta.kubernetes.io/os".into(), i.os.clone());
    l.insert("beta.kubernetes.io/arch".into(), i.arch.clone());
    l
}

/// Upstream's node address setter without a cloud provider: an `InternalIP` for each
/// node IP, then the `Hostname` (also the serving certificate's names and IPs).
pub fn node_addresses(hostname: &str, node_ips: &[String]) -> Vec<NodeAddress> {
    let mut addresses: Vec<NodeAddress> = node_ips
        .iter()
        .map(|ip| NodeAddress {
            type_: "InternalIP".into(),
            address: ip.clone(),
        })
        .collect();
    addresses.push(NodeAddress {
        type_: "Hostname".into(),
        address: hostname.to_owned(),
    });
    addresses
}

/// The node's status (without conditions), as the setters produce it.
pub fn node_status(i: &NodeInputs, conditions: Vec<NodeCondition>) -> NodeStatus {
    let addresses = node_addresses(&i.hostname, &i.node_ips);
    let m = &i.machine;
    NodeStatus {
        addresses: Some(addresses),
        capacity: i.resources.as_ref().map(|r| r.capacity.clone()),
        allocatable: i.resources.as_ref().map(|r| r.allocatable.clone()),
        conditions: Some(conditions),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i.kubelet_port,
            }),
        }),
        images: (!i.images.is_empty()).then(|| i.images.clone()),
        node_info: Some(NodeSystemInfo {
            architecture: i.arch.clone(),
            boot_id: m.boot_id.clone(),
            container_runtime_version: i.container_runtime_version.clone(),
            kernel_version: m.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: m.machine_id.clone(),
            operating_system: i.os.clone(),
            os_image: m.os_image.clone(),
            system_uuid: m.system_uuid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Node the kubelet registers (upstream `initialNode`).
pub fn initial_node(i: &NodeInputs, conditions: Vec<NodeCondition>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(i.node_name.clone()),
            labels: Some(node_labels(i)),
            annotations: Some(
                [(
                    "volumes.kubernetes.io/controller-managed-attach-detach".to_owned(),
                    "true".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!i.taints.is_empty()).then(|| i.taints.clone()),
            ..Default::default()
        }),
        status: Some(node_status(i, conditions)),
    }
}

/// Parses `--register-with-taints` (`key=value:Effect,key:Effect`).
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, ParseError> {
    let mut out = vec![];
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |why| entry_err("--register-with-taints", entry, why);
        let (kv, effect) = entry
            .rsplit_once(':')
            .ok_or_else(|| bad("expected key[=value]:Effect"))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(bad(
                "effect must be NoSchedule, PreferNoSchedule or NoExecute",
            ));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (kv, None),
        };
        if key.is_empty() {
            return Err(bad("empty key"));
        }
        out.push(Taint {
            key: key.to_owned(),
            value,
            effect: effect.to_owned(),
            time_added: None,
        });
    }
    Ok(out)
}

/// Parses `--node-labels` (`k=v,k2=v2`), refusing what upstream's `ValidateKubeletFlags`
/// refuses: `kubernetes.io`/`k8s.io` labels that are not the kubelet's own (the
/// NodeRestriction admission plugin would refuse them at registration), and invalid
/// keys or values.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, ParseError> {
    use ferrokube_api::kubelet_labels::{
        KUBELET_LABEL_NAMESPACES, KUBELET_LABELS, is_kubelet_label, is_kubernetes_label,
    };
    use ferrokube_apimachinery::validation::{is_qualified_name, is_valid_label_value};
    let mut out = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| entry_err("--node-labels", entry, "expected key=value"))?;
        if k.is_empty() {
            return Err(entry_err("--node-labels", entry, "empty key"));
        }
        out.insert(k.to_owned(), v.to_owned());
    }
    let unknown: Vec<&str> = out
        .keys()
        .map(String::as_str)
        .filter(|k| is_kubernetes_label(k) && !is_kubelet_label(k))
        .collect();
    if !unknown.is_empty() {
        return Err(ParseError::NodeLabels(format!(
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ({}) or be in the specifically allowed set ({})",
            unknown.join(" "),
            KUBELET_LABEL_NAMESPACES.join(", "),
            KUBELET_LABELS.join(", ")
        )));
    }
    // Upstream collects these in a map keyed by the bad key or value.
    let mut invalid: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (k, v) in &out {
        invalid.entry(k).or_default().extend(is_qualified_name(k));
        invalid
            .entry(v)
            .or_default()
            .extend(is_valid_label_value(v));
    }
    invalid.retain(|_, errs| !errs.is_empty());
    if !invalid.is_empty() {
        let each: Vec<String> = invalid
            .iter()
            .map(|(what, errs)| format!("'{what}' - {}", errs.join(", ")))
            .collect();
        return Err(ParseError::NodeLabels(format!(
            "invalid node labels: {}",
            each.join("; ")
        )));
    }
    Ok(out)
}

/// Whether a newly computed status must be written (upstream `tryUpdateNodeStatus`): when
/// patching it onto the server's `current` status would change anything but heartbeat
/// times, or when the last report is older than [`NODE_STATUS_REPORT_FREQUENCY`].
///
/// `current` is the Node as the apiserver has it now, not what this kubelet last wrote,
/// so a status someone else changed (the node lifecycle controller's `Unknown` after a
/// restart) is corrected at the next sync instead of after the report period. Only what
/// the kubelet sets is compared: fields and conditions others own do not count.
pub fn node_status_needs_update(
    current: Option<&NodeStatus>,
    new: &NodeStatus,
    since_last_report: Duration,
) -> bool {
    let Some(current) = current else {
        return true;
    };
    if since_last_report >= NODE_STATUS_REPORT_FREQUENCY {
        return true;
    }
    let (Ok(serde_json::Value::Object(current)), Ok(serde_json::Value::Object(new))) =
        (serde_json::to_value(current), serde_json::to_value(new))
    else {
        return true;
    };
    let without_heartbeat = |c: &serde_json::Value| {
        let mut c = c.clone();
        if let Some(o) = c.as_object_mut() {
            o.remove("lastHeartbeatTime");
        }
        c
    };
    new.iter().any(|(field, value)| {
        if field != "conditions" {
            return current.get(field) != Some(value);
        }
        let current_conditions = current
            .get(field)
            .and_then(|c| c.as_array())
            .map(Vec::as_slice)
            .unwrap_or_default();
        value.as_array().into_iter().flatten().any(|c| {
            current_conditions
                .iter()
                .find(|old| old.get("type") == c.get("type"))
                .is_none_or(|old| without_heartbeat(old) != without_heartbeat(c))
        })
    })
}

/// `/etc/os-release` → PRETTY_NAME (upstream's OS image), "Linux" when absent.
pub fn os_image(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "Linux".into())
}

/// `/proc/meminfo` → MemTotal in bytes.
pub fn mem_total(meminfo: &str) -> Option<i64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n: i64 = words.next()?.parse().ok()?;
    Some(match words.next() {
        Some("kB") => n * 1024,
        _ => n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn parses_reserved() {
        let r = Reserved::parse(
            "--kube-reserved",
            "cpu=100m, memory=100Mi,ephemeral-storage=1Gi,pid=100",
        )
        .unwrap();
        assert_eq!(
            r,
            Reserved {
                cpu_milli: 100,
                memory: 100 << 20,
                ephemeral_storage: 1 << 30,
                pid: 100
            }
        );
        assert_eq!(
            Reserved::parse("--kube-reserved", "").unwrap(),
            Reserved::default()
        );
        for bad in ["cpu", "cpu=abc", "gpu=1", "memory=-1Mi"] {
            assert!(Reserved::parse("--kube-reserved", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_eviction_thresholds() {
        let t = EvictionThresholds::parse(DEFAULT_EVICTION_HARD).unwrap();
        assert_eq!(
            t.thresholds["memory.available"],
            ThresholdValue::Quantity(100 << 20)
        );
        assert_eq!(
            t.thresholds["nodefs.available"],
            ThresholdValue::Percentage(0.1)
        );
        assert_eq!(
            t.thresholds["imagefs.available"],
            ThresholdValue::Percentage(0.15)
        );
        assert_eq!(
            t.thresholds["nodefs.inodesFree"],
            ThresholdValue::Percentage(0.05)
        );
        assert!(EvictionThresholds::parse("memory.available>1Mi").is_err());
        assert!(EvictionThresholds::parse("bogus.available<1Mi").is_err());
        assert!(EvictionThresholds::parse("nodefs.available<120%").is_err());
        assert!(
            EvictionThresholds::parse("memory.available<0")
                .unwrap()
                .thresholds
                .is_empty(),
            "a zero threshold disables the signal"
        );
    }

    #[test]
    fn formats_quantities() {
        assert_eq!(format_bytes(0), "0");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(4 << 30), "4Gi");
        assert_eq!(format_bytes(4018196 * 1024), "4018196Ki");
        assert_eq!(format_bytes((24 << 30) - (100 << 20)), "24476Mi");
        assert_eq!(format_milli(2000), "2");
        assert_eq!(format_milli(1900), "1900m");
    }

    #[test]
    fn allocatable_math() {
        let m = MachineInfo {
            num_cpus: 2,
            memory_bytes: 8 << 30,
            root_fs_bytes: 100 << 30,
            ..Default::default()
        };
        let evict = EvictionThresholds::parse(DEFAULT_EVICTION_HARD).unwrap();
        let r = node_resources(&m, 110, &Reserved::default(), &Reserved::default(), &evict);
        assert_eq!(r.capacity["cpu"], q("2"));
        assert_eq!(r.capacity["memory"], q("8Gi"));
        assert_eq!(r.capacity["ephemeral-storage"], q("100Gi"));
        assert_eq!(r.capacity["pods"], q("110"));
        assert_eq!(r.allocatable["cpu"], q("2"));
        assert_eq!(r.allocatable["memory"], q("8092Mi"));
        assert_eq!(
            r.allocatable["ephemeral-storage"],
            q("90Gi"),
            "90% of 100Gi"
        );
        assert_eq!(r.allocatable["pods"], q("110"));

        let kube = Reserved::parse("--kube-reserved", "cpu=200m,memory=1Gi").unwrap();
        let sys = Reserved::parse(
            "--system-reserved",
            "cpu=300m,memory=1Gi,ephemeral-storage=10Gi",
        )
        .unwrap();
        let r = node_resources(&m, 50, &kube, &sys, &EvictionThresholds::default());
        assert_eq!(r.allocatable["cpu"], q("1500m"));
        assert_eq!(r.allocatable["memory"], q("6Gi"));
        assert_eq!(r.allocatable["ephemeral-storage"], q("90Gi"));
        assert_eq!(r.allocatable["pods"], q("50"));

        let huge = Reserved::parse("--kube-reserved", "cpu=5,memory=100Gi").unwrap();
        let r = node_resources(&m, 110, &huge, &Reserved::default(), &evict);
        assert_eq!(r.allocatable["cpu"], q("0"), "never negative");
        assert_eq!(r.allocatable["memory"], q("0"));
        assert_eq!(r.capacity["hugepages-2Mi"], q("0"), "no pools read");
        assert_eq!(r.capacity["hugepages-1Gi"], q("0"));
    }

    #[test]
    fn hugepage_pools_are_capacity_and_leave_memory() {
        let m = MachineInfo {
            num_cpus: 2,
            memory_bytes: 8 << 30,
            root_fs_bytes: 100 << 30,
            hugepages: [(2 << 20, 512), (1 << 30, 0), (64 << 10, 3)].into(),
            ..Default::default()
        };
        let r = node_resources(
            &m,
            110,
            &Reserved::default(),
            &Reserved::default(),
            &EvictionThresholds::default(),
        );
        assert_eq!(r.capacity["hugepages-2Mi"], q("1Gi"));
        assert_eq!(r.capacity["hugepages-1Gi"], q("0"));
        assert_eq!(r.capacity["hugepages-64Ki"], q("192Ki"));
        assert_eq!(r.allocatable["hugepages-2Mi"], q("1Gi"));
        assert_eq!(r.capacity["memory"], q("8Gi"));
        assert_eq!(
            r.allocatable["memory"],
            q(&format_bytes((7 << 30) - (192 << 10))),
            "the pools' pages are not allocatable memory"
        );
        let odd: BTreeMap<u64, u64> = [(0, 5), (u64::MAX, 2), (4096, u64::MAX)].into();
        assert_eq!(
            hugepage_capacity(&odd).count(),
            0,
            "sizes that overflow are left out"
        );
    }

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn healthy() -> RuntimeHealth {
        RuntimeHealth {
            runtime_ready: true,
            network_ready: true,
            ..Default::default()
        }
    }

    #[test]
    fn conditions() {
        let c = node_conditions(&healthy(), Pressures::default(), &[], &t(100));
        let types: Vec<_> = c.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        let ready = &c[3];
        assert_eq!(ready.status, "True");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("kubelet is posting ready status")
        );
        assert_eq!(c[0].reason.as_deref(), Some("KubeletHasSufficientMemory"));
        assert_eq!(c[1].reason.as_deref(), Some("KubeletHasNoDiskPressure"));
        assert_eq!(c[2].reason.as_deref(), Some("KubeletHasSufficientPID"));
        assert!(c.iter().all(|c| c.last_transition_time == Some(t(100))));

        // Unchanged: the transition time is kept, the heartbeat moves.
        let c2 = node_conditions(&healthy(), Pressures::default(), &c, &t(110));
        assert_eq!(c2[3].last_transition_time, Some(t(100)));
        assert_eq!(c2[3].last_heartbeat_time, Some(t(110)));

        // Network not ready: Ready=False with upstream's message, new transition time.
        let mut h = healthy();
        h.network_ready = false;
        h.network_reason = "NetworkPluginNotReady".into();
        h.network_message = "cni plugin not initialized".into();
        let c3 = node_conditions(
            &h,
            Pressures {
                memory: true,
                ..Default::default()
            },
            &c2,
            &t(120),
        );
        assert_eq!(c3[3].status, "False");
        assert_eq!(c3[3].reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(
            c3[3].message.as_deref(),
            Some(
                "container runtime network not ready: NetworkReady=false \
                 reason:NetworkPluginNotReady message:cni plugin not initialized"
            )
        );
        assert_eq!(c3[3].last_transition_time, Some(t(120)));
        assert_eq!(c3[0].status, "True");
        assert_eq!(
            c3[0].reason.as_deref(),
            Some("KubeletHasInsufficientMemory")
        );

        let mut h = healthy();
        h.status_error = Some("connection refused".into());
        let c4 = node_conditions(&h, Pressures::default(), &[], &t(1));
        assert_eq!(c4[3].status, "False");
        assert!(
            c4[3]
                .message
                .as_deref()
                .unwrap()
                .contains("connection refused")
        );
    }

    #[test]
    fn condition_events_on_registration_and_transitions() {
        let healthy_now = node_conditions(&healthy(), Pressures::default(), &[], &t(1));
        assert_eq!(
            condition_events(&[], &healthy_now),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID"
            ],
            "a new Ready condition is no transition"
        );
        let same = node_conditions(&healthy(), Pressures::default(), &healthy_now, &t(11));
        assert!(condition_events(&healthy_now, &same).is_empty());
        let mut sick = healthy();
        sick.runtime_ready = false;
        let pressed = Pressures {
            memory: true,
            ..Default::default()
        };
        let bad = node_conditions(&sick, pressed, &same, &t(21));
        assert_eq!(
            condition_events(&same, &bad),
            ["NodeHasInsufficientMemory", "NodeNotReady"]
        );
        let good = node_conditions(&healthy(), Pressures::default(), &bad, &t(31));
        assert_eq!(
            condition_events(&bad, &good),
            ["NodeHasSufficientMemory", "NodeReady"]
        );
    }

    #[test]
    fn status_update_cadence() {
        let i = NodeInputs {
            node_name: "n".into(),
            hostname: "n".into(),
            ..Default::default()
        };
        let s1 = node_status(
            &i,
            node_conditions(&healthy(), Pressures::default(), &[], &t(1)),
        );
        let conds = s1.conditions.clone().unwrap();
        let s2 = node_status(
            &i,
            node_conditions(&healthy(), Pressures::default(), &conds, &t(11)),
        );
        assert!(node_status_needs_update(None, &s1, Duration::ZERO));
        assert!(
            !node_status_needs_update(Some(&s1), &s2, Duration::from_secs(10)),
            "only heartbeats changed"
        );
        assert!(
            node_status_needs_update(Some(&s1), &s2, Duration::from_secs(300)),
            "report every 5 min"
        );
        let mut h = healthy();
        h.runtime_ready = false;
        let s3 = node_status(
            &i,
            node_conditions(&h, Pressures::default(), &conds, &t(11)),
        );
        assert!(node_status_needs_update(
            Some(&s1),
            &s3,
            Duration::from_secs(10)
        ));
        // The server's copy is what counts: a controller's Unknown is written over at the
        // next sync, while what others own (another condition, volumesAttached) is not a
        // change.
        let mut marked_unknown = s1.clone();
        for c in marked_unknown.conditions.iter_mut().flatten() {
            c.status = "Unknown".into();
        }
        assert!(node_status_needs_update(
            Some(&marked_unknown),
            &s2,
            Duration::from_secs(10)
        ));
        let mut with_others = s1.clone();
        with_others
            .conditions
            .get_or_insert_default()
            .push(NodeCondition {
                type_: "NetworkUnavailable".into(),
                status: "False".into(),
                ..Default::default()
            });
        with_others.volumes_attached = Some(vec![]);
        assert!(!node_status_needs_update(
            Some(&with_others),
            &s2,
            Duration::from_secs(10)
        ));
        let mut condition_missing = s1.clone();
        condition_missing.conditions.get_or_insert_default().pop();
        assert!(node_status_needs_update(
            Some(&condition_missing),
            &s2,
            Duration::from_secs(10)
        ));
    }

    #[test]
    fn node_object() {
        let i = NodeInputs {
            node_name: "node-a".into(),
            hostname: "node-a".into(),
            node_ips: vec!["192.0.2.10".into()],
            labels: parse_labels("tier=edge,kubernetes.io/os=bogus").unwrap(),
            taints: parse_taints("dedicated=infra:NoSchedule,gpu:NoExecute").unwrap(),
            os: "linux".into(),
            arch: go_arch("x86_64"),
            container_runtime_version: "containerd://1.6.20".into(),
            kubelet_port: 10250,
            ..Default::default()
        };
        let n = initial_node(&i, vec![]);
        let labels = n.metadata.labels.unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "node-a");
        assert_eq!(
            labels["kubernetes.io/os"], "linux",
            "defaults win over --node-labels"
        );
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["tier"], "edge");
        let taints = n.spec.unwrap().taints.unwrap();
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[0].key, "dedicated");
        assert_eq!(taints[0].value.as_deref(), Some("infra"));
        assert_eq!(taints[1].effect, "NoExecute");
        let st = n.status.unwrap();
        let addrs = st.addresses.unwrap();
        assert_eq!(addrs[0].type_, "InternalIP");
        assert_eq!(addrs[0].address, "192.0.2.10");
        assert_eq!(addrs[1].type_, "Hostname");
        let info = st.node_info.unwrap();
        assert_eq!(info.kubelet_version, "v1.33.0");
        assert_eq!(info.container_runtime_version, "containerd://1.6.20");
        assert_eq!(
            st.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
            10250
        );
        assert!(parse_taints("a=b:Bogus").is_err());
        assert!(parse_taints("a=b").is_err());
        assert!(parse_labels("novalue").is_err());
        // Upstream's flag validation: no foreign kubernetes.io labels, valid names.
        assert_eq!(
            parse_labels("node-role.kubernetes.io/worker=,k8s.io/a=b,node.kubernetes.io/x=y")
                .unwrap_err()
                .to_string(),
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [k8s.io/a node-role.kubernetes.io/worker]\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix (kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set (beta.kubernetes.io/arch, beta.kubernetes.io/instance-type, beta.kubernetes.io/os, failure-domain.beta.kubernetes.io/region, failure-domain.beta.kubernetes.io/zone, kubernetes.io/arch, kubernetes.io/hostname, kubernetes.io/os, node.kubernetes.io/instance-type, topology.kubernetes.io/region, topology.kubernetes.io/zone)"
        );
        let invalid = parse_labels("bad key=x").unwrap_err().to_string();
        assert!(
            invalid.starts_with("invalid node labels: 'bad key' - "),
            "{invalid}"
        );
        assert!(parse_labels("team=blue,node.kubernetes.io/pool=a").is_ok());
    }

    #[test]
    fn proc_parsing() {
        assert_eq!(
            mem_total("MemTotal:       25165824 kB\nMemFree: 1 kB\n"),
            Some(25165824 * 1024)
        );
        assert_eq!(mem_total("nothing"), None);
        assert_eq!(
            os_image("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
        assert_eq!(os_image(""), "Linux");
    }
}
