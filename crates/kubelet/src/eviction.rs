//! The eviction manager's decisions (upstream `pkg/kubelet/eviction`), pure and
//! table-tested: the node's signal observations from the stats summary, which hard and
//! soft thresholds are met (soft ones after their grace period, every met one until its
//! minimum reclaim is back), the node pressures they give (held for the pressure
//! transition period), pods over their local storage limits (emptyDir `sizeLimit`,
//! container and pod `ephemeral-storage` limits), the order pods are evicted in, and the
//! message an evicted pod gets. The kubelet's eviction loop ([`crate::kubelet`]) does the
//! IO: it reads the summary, applies the pressures and kills what is chosen here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::node::{EvictionThresholds, ParseError, Pressures, ThresholdValue, format_bytes};
use crate::quantity::value;
use crate::stats::{PodStats, Summary};

/// Upstream's `--eviction-pressure-transition-period` default.
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);
/// `Evicted`, the reason of an evicted pod's status.
pub const EVICTED_REASON: &str = "Evicted";
/// The reason of the `DisruptionTarget` condition an evicted pod gets.
pub const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// How often upstream's eviction manager looks at the node.
pub const DEFAULT_MONITORING_INTERVAL: Duration = Duration::from_secs(10);

/// The eviction settings besides the hard thresholds (which also shape allocatable and
/// live in [`crate::KubeletConfig::eviction_hard`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionSettings {
    /// `--eviction-soft`: met only after their grace period.
    pub soft: EvictionThresholds,
    /// `--eviction-soft-grace-period`: signal → how long a soft threshold must hold.
    pub soft_grace: BTreeMap<String, Duration>,
    /// `--eviction-minimum-reclaim`: how far above its threshold a met signal must come
    /// back before it stops being met.
    pub min_reclaim: BTreeMap<String, ThresholdValue>,
    /// `--eviction-pressure-transition-period` (5 m).
    pub pressure_transition: Duration,
    /// `--eviction-max-pod-grace-period`: the most grace a pod evicted for a soft
    /// threshold gets (0: its own).
    pub max_pod_grace_seconds: i64,
    /// How often the manager looks (upstream: 10 s).
    pub monitoring_interval: Duration,
}

impl Default for EvictionSettings {
    fn default() -> Self {
        EvictionSettings {
            soft: EvictionThresholds::default(),
            soft_grace: BTreeMap::new(),
            min_reclaim: BTreeMap::new(),
            pressure_transition: DEFAULT_PRESSURE_TRANSITION_PERIOD,
            max_pod_grace_seconds: 0,
            monitoring_interval: DEFAULT_MONITORING_INTERVAL,
        }
    }
}

fn setting_err(flag: &'static str, entry: &str, why: &'static str) -> ParseError {
    ParseError::Entry {
        flag,
        entry: entry.to_owned(),
        why,
    }
}

/// `signal=value` pairs, comma separated (the flags' `mapStringString`).
fn pairs(flag: &'static str, s: &str) -> Result<BTreeMap<String, String>, ParseError> {
    let mut out = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| setting_err(flag, entry, "expected signal=value"))?;
        if pressure_of(k.trim()).is_none() {
            return Err(setting_err(flag, entry, "unknown eviction signal"));
        }
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(out)
}

impl EvictionSettings {
    /// `--eviction-soft-grace-period` (`memory.available=1m30s,...`); `parse_duration`
    /// reads Go durations.
    pub fn parse_soft_grace(
        s: &str,
        parse_duration: impl Fn(&str) -> Option<Duration>,
    ) -> Result<BTreeMap<String, Duration>, ParseError> {
        let flag = "--eviction-soft-grace-period";
        pairs(flag, s)?
            .into_iter()
            .map(|(k, v)| match parse_duration(&v) {
                Some(d) => Ok((k, d)),
                None => Err(setting_err(flag, &format!("{k}={v}"), "bad duration")),
            })
            .collect()
    }

    /// `--eviction-minimum-reclaim` (`memory.available=0Mi,nodefs.available=500Mi`).
    pub fn parse_min_reclaim(s: &str) -> Result<BTreeMap<String, ThresholdValue>, ParseError> {
        let flag = "--eviction-minimum-reclaim";
        pairs(flag, s)?
            .into_iter()
            .map(|(k, v)| {
                let bad = |why| setting_err(flag, &format!("{k}={v}"), why);
                let t = if let Some(p) = v.strip_suffix('%') {
                    let p: f64 = p.parse().map_err(|_| bad("bad percentage"))?;
                    if !(p > 0.0 && p <= 100.0) {
                        return Err(bad("percentage must be positive"));
                    }
                    ThresholdValue::Percentage(p / 100.0)
                } else {
                    let q = value(&Quantity(v.clone())).ok_or_else(|| bad("bad quantity"))?;
                    if q < 0 {
                        return Err(bad("negative quantity"));
                    }
                    ThresholdValue::Quantity(q)
                };
                Ok((k, t))
            })
            .collect()
    }

    /// Upstream refuses a soft threshold without a grace period.
    pub fn validate(&self) -> Result<(), ParseError> {
        for signal in self.soft.thresholds.keys() {
            if !self.soft_grace.contains_key(signal) {
                return Err(setting_err(
                    "--eviction-soft",
                    signal,
                    "grace period must be specified for the soft eviction threshold",
                ));
            }
        }
        Ok(())
    }
}

/// What the node has left (bytes, inodes, PIDs) and of how much; `None` when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observations {
    /// signal (`memory.available`, `nodefs.available`, ...) -> (available, capacity).
    pub signals: BTreeMap<String, (i64, i64)>,
}

/// The node's signal observations from a stats summary (upstream
/// `makeSignalObservations`): `memory.available` is the capacity less the working set;
/// the filesystem signals are the node and image filesystems' free bytes and inodes;
/// `pid.available` comes from `(pid_max, processes)`.
pub fn observations(
    summary: &Summary,
    memory_capacity: i64,
    pids: Option<(i64, i64)>,
) -> Observations {
    let mut signals = BTreeMap::new();
    let n = |v: Option<u64>| v.map(|v| v as i64);
    if let Some(ws) = summary
        .node
        .memory
        .as_ref()
        .and_then(|m| n(m.working_set_bytes))
        && memory_capacity > 0
    {
        signals.insert(
            "memory.available".to_owned(),
            ((memory_capacity - ws).max(0), memory_capacity),
        );
    }
    let mut fs = |prefix: &str, f: Option<&crate::stats::FsStats>| {
        let Some(f) = f else { return };
        if let (Some(a), Some(c)) = (n(f.available_bytes), n(f.capacity_bytes)) {
            signals.insert(format!("{prefix}.available"), (a, c));
        }
        if let (Some(a), Some(c)) = (n(f.inodes_free), n(f.inodes)) {
            signals.insert(format!("{prefix}.inodesFree"), (a, c));
        }
    };
    fs("nodefs", summary.node.fs.as_ref());
    let image_fs = summary
        .node
        .runtime
        .as_ref()
        .and_then(|r| r.image_fs.as_ref());
    fs("imagefs", image_fs.or(summary.node.fs.as_ref()));
    fs("containerfs", image_fs.or(summary.node.fs.as_ref()));
    if let Some((max, used)) = pids {
        signals.insert("pid.available".to_owned(), ((max - used).max(0), max));
    }
    Observations { signals }
}

/// One threshold the manager acts on: the signal, its threshold as upstream prints it and
/// what is available, for the eviction message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetThreshold {
    pub signal: String,
    pub threshold: String,
    pub available: String,
    /// A hard threshold (the pod gets no grace) or a soft one.
    pub hard: bool,
}

/// The outcome of one look at the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// The pressures to report (soft thresholds count at once, as upstream's conditions).
    pub pressures: Pressures,
    /// Thresholds to reclaim for: hard ones, and soft ones held for their grace period.
    /// The memory ones first (upstream `byEvictionPriority`).
    pub reclaim: Vec<MetThreshold>,
}

/// Tracks, across looks, when each soft threshold was first met, which signals are met
/// (they stay met until their minimum reclaim is back) and the pressures' last times.
#[derive(Debug, Default)]
pub struct ThresholdTracker {
    soft_since: BTreeMap<String, Instant>,
    met: BTreeSet<String>,
    pressures: PressureTracker,
}

impl ThresholdTracker {
    pub fn evaluate(
        &mut self,
        hard: &EvictionThresholds,
        settings: &EvictionSettings,
        obs: &Observations,
        now: Instant,
    ) -> Evaluation {
        let mut met_now: Vec<String> = vec![];
        let mut reclaim: Vec<MetThreshold> = vec![];
        let mut still_met = BTreeSet::new();
        for (set, is_hard) in [(hard, true), (&settings.soft, false)] {
            for (signal, t) in &set.thresholds {
                let Some(&(available, capacity)) = obs.signals.get(signal) else {
                    continue;
                };
                let mut amount = t.amount(capacity);
                if self.met.contains(signal) {
                    amount += settings
                        .min_reclaim
                        .get(signal)
                        .map_or(0, |r| r.amount(capacity));
                }
                let key = format!("{}{signal}", if is_hard { "hard:" } else { "soft:" });
                if available >= amount {
                    self.soft_since.remove(&key);
                    continue;
                }
                met_now.push(signal.clone());
                let due = is_hard || {
                    let since = *self.soft_since.entry(key.clone()).or_insert(now);
                    let grace = settings.soft_grace.get(signal).copied().unwrap_or_default();
                    now.duration_since(since) >= grace
                };
                if due {
                    still_met.insert(signal.clone());
                    let display = match t {
                        ThresholdValue::Quantity(q) => format_bytes(*q),
                        ThresholdValue::Percentage(_) => format_bytes(t.amount(capacity)),
                    };
                    reclaim.push(MetThreshold {
                        signal: signal.clone(),
                        threshold: display,
                        available: format_bytes(available),
                        hard: is_hard,
                    });
                }
            }
        }
        self.met = still_met;
        let pressures = self
            .pressures
            .update(&met_now, now, settings.pressure_transition);
        reclaim.sort_by_key(|m| (!m.signal.starts_with("memory"), !m.hard));
        Evaluation { pressures, reclaim }
    }
}

/// Why a pod breaks its local storage limits, in upstream's words (checked before any
/// threshold: upstream `localStorageEviction`), with the signal upstream counts the
/// eviction under: an emptyDir over its `sizeLimit` (`emptydirfs.limit`), the pod over
/// the sum of its containers' `ephemeral-storage` limits (`ephemeralpodfs.limit`), or a
/// container over its own (`ephemeralcontainerfs.limit`).
pub fn local_storage_violation(pod: &Pod, stats: &PodStats) -> Option<(&'static str, String)> {
    let spec = pod.spec.as_ref()?;
    for v in spec.volumes.iter().flatten() {
        let Some(ed) = &v.empty_dir else { continue };
        let Some(limit) = ed.size_limit.as_ref() else {
            continue;
        };
        let Some(limit_bytes) = value(limit).filter(|l| *l > 0) else {
            continue;
        };
        let used = stats
            .volume
            .iter()
            .find(|s| s.name == v.name)
            .and_then(|s| s.fs.used_bytes);
        if used.is_some_and(|u| u as i64 > limit_bytes) {
            return Some((
                "emptydirfs.limit",
                format!(
                    "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                    v.name, limit.0
                ),
            ));
        }
    }
    let limit_of = |c: &k8s_openapi::api::core::v1::Container| {
        c.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("ephemeral-storage")
            .and_then(value)
    };
    let container_used = |name: &str| -> i64 {
        stats
            .containers
            .iter()
            .filter(|c| c.name == name)
            .flat_map(|c| [c.rootfs.as_ref(), c.logs.as_ref()])
            .flatten()
            .filter_map(|f| f.used_bytes)
            .sum::<u64>() as i64
    };
    let limits: Vec<i64> = spec.containers.iter().filter_map(limit_of).collect();
    if !limits.is_empty() {
        let pod_limit: i64 = limits.iter().sum();
        let disk_volumes: i64 = stats
            .ephemeral_volumes()
            .filter_map(|v| v.fs.used_bytes)
            .sum::<u64>() as i64;
        let used: i64 = spec
            .containers
            .iter()
            .map(|c| container_used(&c.name))
            .sum::<i64>()
            + disk_volumes;
        if used > pod_limit {
            return Some((
                "ephemeralpodfs.limit",
                format!(
                    "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                    format_bytes(pod_limit)
                ),
            ));
        }
    }
    for c in &spec.containers {
        if let Some(limit) = limit_of(c)
            && container_used(&c.name) > limit
        {
            return Some((
                "ephemeralcontainerfs.limit",
                format!(
                    "Container {} exceeded its local ephemeral storage limit {:?}. ",
                    c.name,
                    format_bytes(limit)
                ),
            ));
        }
    }
    None
}

/// A pod's usage and requests of the resource a signal starves, for [`rank`], and the
/// containers over their requests for the message (name, usage, request).
pub fn candidate(
    pod: &Pod,
    stats: Option<&PodStats>,
    signal: &str,
) -> (Candidate, Vec<(String, String, String)>) {
    let spec = pod.spec.clone().unwrap_or_default();
    let resource = match signal {
        s if s.starts_with("memory") || s.starts_with("allocatableMemory") => "memory",
        s if s.ends_with("inodesFree") || s == "pid.available" => "",
        _ => "ephemeral-storage",
    };
    let request_of = |c: &k8s_openapi::api::core::v1::Container| {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .and_then(value)
            .unwrap_or(0)
    };
    let container_usage = |name: &str| -> i64 {
        let Some(st) = stats else { return 0 };
        st.containers
            .iter()
            .filter(|c| c.name == name)
            .map(|c| match resource {
                "memory" => c
                    .memory
                    .as_ref()
                    .and_then(|m| m.working_set_bytes)
                    .unwrap_or(0),
                "ephemeral-storage" => [c.rootfs.as_ref(), c.logs.as_ref()]
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.used_bytes)
                    .sum(),
                _ => [c.rootfs.as_ref(), c.logs.as_ref()]
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.inodes_used)
                    .sum(),
            })
            .sum::<u64>() as i64
    };
    let volumes: i64 = match (resource, stats) {
        ("ephemeral-storage", Some(st)) => st
            .ephemeral_volumes()
            .filter_map(|v| v.fs.used_bytes)
            .sum::<u64>() as i64,
        ("", Some(st)) if signal != "pid.available" => st
            .ephemeral_volumes()
            .filter_map(|v| v.fs.inodes_used)
            .sum::<u64>() as i64,
        _ => 0,
    };
    let mut over = vec![];
    let mut usage = volumes;
    let mut requests = 0;
    for c in &spec.containers {
        let (u, r) = (container_usage(&c.name), request_of(c));
        usage += u;
        requests += r;
        if !resource.is_empty() && u > r {
            over.push((c.name.clone(), format_bytes(u), format_bytes(r)));
        }
    }
    if signal == "pid.available" {
        usage = 0;
    }
    (
        Candidate {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            priority: spec.priority.unwrap_or(0),
            usage,
            requests,
            critical: is_critical(pod),
        },
        over,
    )
}

/// The signals whose hard threshold is met: available below the threshold's amount.
pub fn thresholds_met(thresholds: &EvictionThresholds, obs: &Observations) -> Vec<String> {
    thresholds
        .thresholds
        .iter()
        .filter(|(signal, t)| {
            obs.signals
                .get(*signal)
                .is_some_and(|(available, capacity)| *available < t.amount(*capacity))
        })
        .map(|(s, _)| s.clone())
        .collect()
}

/// The node condition a signal drives.
pub fn pressure_of(signal: &str) -> Option<&'static str> {
    match signal {
        "memory.available" | "allocatableMemory.available" => Some("MemoryPressure"),
        "nodefs.available"
        | "nodefs.inodesFree"
        | "imagefs.available"
        | "imagefs.inodesFree"
        | "containerfs.available"
        | "containerfs.inodesFree" => Some("DiskPressure"),
        "pid.available" => Some("PIDPressure"),
        _ => None,
    }
}

/// Remembers when each signal was last met, so a pressure stays on for the transition
/// period after its threshold stops being met (upstream's anti-flapping).
#[derive(Debug, Default)]
pub struct PressureTracker {
    last_met: BTreeMap<&'static str, Instant>,
}

impl PressureTracker {
    pub fn update(&mut self, met: &[String], now: Instant, transition: Duration) -> Pressures {
        for s in met {
            if let Some(p) = pressure_of(s) {
                self.last_met.insert(p, now);
            }
        }
        let on = |p: &str| {
            self.last_met.get(p).is_some_and(|t| {
                now.duration_since(*t) < transition || met.iter().any(|s| pressure_of(s) == Some(p))
            })
        };
        Pressures {
            memory: on("MemoryPressure"),
            disk: on("DiskPressure"),
            pid: on("PIDPressure"),
        }
    }
}

/// One pod as ranking sees it: its priority, its usage of the starved resource and what
/// it requested of it (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub priority: i32,
    pub usage: i64,
    pub requests: i64,
    /// Static, mirror and system-critical pods are never evicted.
    pub critical: bool,
}

/// Upstream's ranking for memory and disk: pods whose usage exceeds their requests
/// first, then lower priority first, then the largest usage above requests first. The
/// critical ones are left out.
pub fn rank(mut pods: Vec<Candidate>) -> Vec<Candidate> {
    pods.retain(|p| !p.critical);
    pods.sort_by(|a, b| {
        let exceeds = |p: &Candidate| p.usage > p.requests;
        exceeds(b)
            .cmp(&exceeds(a))
            .then(a.priority.cmp(&b.priority))
            .then((b.usage - b.requests).cmp(&(a.usage - a.requests)))
            .then(a.uid.cmp(&b.uid))
    });
    pods
}

/// Whether a pod is critical for eviction: static or mirror pods, and priorities at or
/// above system-cluster-critical's 2000000000 (upstream `IsCriticalPod`).
pub fn is_critical(pod: &Pod) -> bool {
    let static_or_mirror =
        crate::static_pods::is_static_pod(pod) || crate::static_pods::is_mirror_pod(pod);
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    static_or_mirror || priority >= 2_000_000_000
}

/// The resource name of a signal in upstream's eviction message.
fn resource_of(signal: &str) -> &'static str {
    match signal {
        "memory.available" | "allocatableMemory.available" => "memory",
        "pid.available" => "pids",
        s if s.ends_with("inodesFree") => "inodes",
        _ => "ephemeral-storage",
    }
}

/// Upstream's eviction message: `The node was low on resource: memory. Threshold
/// quantity: 100Mi, available: 50Mi. ` followed, per container using the resource, by
/// `Container c was using 300Mi, request is 0, has larger consumption of memory. `.
pub fn eviction_message(
    signal: &str,
    threshold: &str,
    available: &str,
    containers: &[(String, String, String)],
) -> String {
    let resource = resource_of(signal);
    let mut m = format!(
        "The node was low on resource: {resource}. Threshold quantity: {threshold}, available: {available}. "
    );
    for (name, usage, request) in containers {
        m.push_str(&format!(
            "Container {name} was using {usage}, request is {request}, has larger consumption of {resource}. "
        ));
    }
    m
}

/// A node-level way to free disk that the eviction manager tries before it evicts any pod
/// (upstream `nodeReclaimFunc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeReclaim {
    /// Every dead container and non-ready sandbox no live pod needs (upstream
    /// `ContainerGC.DeleteAllUnusedContainers`).
    DeleteUnusedContainers,
    /// Every image no container uses, least recently used first (upstream
    /// `ImageGCManager.DeleteUnusedImages`).
    DeleteUnusedImages,
}

/// The reclaim steps for a signal, in the order they run (upstream
/// `buildSignalToNodeReclaimFuncs`): containers first, since removing them is what frees
/// their images. Without a dedicated image filesystem every disk signal gets both; with
/// one, the node filesystem's signals get none (only logs and pods' own files live there)
/// and the image filesystem's get both. Memory and PIDs have none.
pub fn node_reclaim_steps(signal: &str, dedicated_image_fs: bool) -> &'static [NodeReclaim] {
    const BOTH: &[NodeReclaim] = &[
        NodeReclaim::DeleteUnusedContainers,
        NodeReclaim::DeleteUnusedImages,
    ];
    match signal {
        "nodefs.available" | "nodefs.inodesFree" if dedicated_image_fs => &[],
        "nodefs.available"
        | "nodefs.inodesFree"
        | "imagefs.available"
        | "imagefs.inodesFree"
        | "containerfs.available"
        | "containerfs.inodesFree" => BOTH,
        _ => &[],
    }
}

/// Whether a fresh observation relieves every met threshold: each signal back to at least
/// its threshold plus its minimum reclaim (upstream `thresholdsMet(..., enforceMinReclaim
/// = true)` finding none). A signal no longer observed counts as relieved, as upstream.
pub fn relieved(
    met: &[MetThreshold],
    hard: &EvictionThresholds,
    settings: &EvictionSettings,
    obs: &Observations,
) -> bool {
    met.iter().all(|m| {
        let set = if m.hard { hard } else { &settings.soft };
        let (Some(t), Some(&(available, capacity))) =
            (set.thresholds.get(&m.signal), obs.signals.get(&m.signal))
        else {
            return true;
        };
        let min_reclaim = settings
            .min_reclaim
            .get(&m.signal)
            .map_or(0, |r| r.amount(capacity));
        available >= t.amount(capacity) + min_reclaim
    })
}

/// The IO a node-level reclaim needs: the kubelet runs the steps against the CRI and
/// observes the node again from a fresh stats summary; tests use a fake.
pub trait NodeReclaimer {
    fn reclaim(&self, step: NodeReclaim) -> impl std::future::Future<Output = ()> + Send;
    fn observe(&self) -> impl std::future::Future<Output = Observations> + Send;
}

/// Upstream `reclaimNodeLevelResources`: runs the reclaim steps of the threshold to
/// reclaim (the first of `met`) in order, then observes the node again. True when that
/// relieved every met threshold, so no pod is evicted this round; false (evict) when the
/// signal has no steps or the pressure stays.
pub async fn reclaim_node_level<R: NodeReclaimer>(
    reclaimer: &R,
    met: &[MetThreshold],
    dedicated_image_fs: bool,
    hard: &EvictionThresholds,
    settings: &EvictionSettings,
) -> bool {
    let Some(first) = met.first() else {
        return false;
    };
    let steps = node_reclaim_steps(&first.signal, dedicated_image_fs);
    if steps.is_empty() {
        return false;
    }
    for step in steps {
        reclaimer.reclaim(*step).await;
    }
    let obs = reclaimer.observe().await;
    relieved(met, hard, settings, &obs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(pairs: &[(&str, i64, i64)]) -> Observations {
        Observations {
            signals: pairs
                .iter()
                .map(|(s, a, c)| (s.to_string(), (*a, *c)))
                .collect(),
        }
    }

    #[test]
    fn thresholds_by_quantity_and_percentage() {
        let t = EvictionThresholds::parse(
            "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%",
        )
        .unwrap();
        let gib = 1 << 30;
        assert!(thresholds_met(&t, &obs(&[("memory.available", gib, 4 * gib)])).is_empty());
        assert_eq!(
            thresholds_met(
                &t,
                &obs(&[
                    ("memory.available", 50 << 20, 4 * gib),
                    ("nodefs.available", 9 * gib, 100 * gib),
                    ("imagefs.available", 20 * gib, 100 * gib),
                ])
            ),
            ["memory.available", "nodefs.available"]
        );
        // Unknown observations never meet a threshold.
        assert!(thresholds_met(&t, &Observations::default()).is_empty());
    }

    #[test]
    fn pressures_hold_for_the_transition_period() {
        let mut tracker = PressureTracker::default();
        let t0 = Instant::now();
        let period = Duration::from_secs(300);
        let p = tracker.update(&["memory.available".into()], t0, period);
        assert!(p.memory && !p.disk && !p.pid);
        let p = tracker.update(&[], t0 + Duration::from_secs(60), period);
        assert!(p.memory, "still within the transition period");
        let p = tracker.update(&[], t0 + Duration::from_secs(301), period);
        assert!(!p.memory);
        let p = tracker.update(
            &["imagefs.available".into()],
            t0 + Duration::from_secs(302),
            period,
        );
        assert!(p.disk && !p.memory);
        assert_eq!(pressure_of("pid.available"), Some("PIDPressure"));
    }

    fn c(uid: &str, priority: i32, usage: i64, requests: i64) -> Candidate {
        Candidate {
            uid: uid.into(),
            priority,
            usage,
            requests,
            critical: false,
        }
    }

    #[test]
    fn ranking_puts_over_request_low_priority_big_users_first() {
        let mut critical = c("static", -10, 1 << 40, 0);
        critical.critical = true;
        let ranked = rank(vec![
            c("within-requests", 0, 100, 200),
            c("over-high-prio", 1000, 500, 100),
            c("over-small", 0, 150, 100),
            c("over-big", 0, 900, 100),
            critical,
        ]);
        let order: Vec<&str> = ranked.iter().map(|c| c.uid.as_str()).collect();
        assert_eq!(
            order,
            [
                "over-big",
                "over-small",
                "over-high-prio",
                "within-requests"
            ]
        );
    }

    fn settings() -> EvictionSettings {
        EvictionSettings {
            soft: EvictionThresholds::parse("memory.available<1Gi").unwrap(),
            soft_grace: EvictionSettings::parse_soft_grace("memory.available=30s", |d| {
                (d == "30s").then_some(Duration::from_secs(30))
            })
            .unwrap(),
            min_reclaim: EvictionSettings::parse_min_reclaim("nodefs.available=10%").unwrap(),
            pressure_transition: Duration::from_secs(60),
            ..Default::default()
        }
    }

    #[test]
    fn soft_thresholds_wait_for_their_grace_and_met_ones_for_their_reclaim() {
        let gib = 1i64 << 30;
        let hard = EvictionThresholds::parse("nodefs.available<10%").unwrap();
        let cfg = settings();
        assert!(cfg.validate().is_ok());
        let mut tracker = ThresholdTracker::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Memory below the soft threshold: pressure at once, no eviction before 30 s.
        let low_memory = obs(&[
            ("memory.available", gib / 2, 8 * gib),
            ("nodefs.available", 50 * gib, 100 * gib),
        ]);
        let e = tracker.evaluate(&hard, &cfg, &low_memory, at(0));
        assert!(e.pressures.memory && e.reclaim.is_empty(), "{e:?}");
        let e = tracker.evaluate(&hard, &cfg, &low_memory, at(31));
        assert_eq!(e.reclaim.len(), 1);
        assert_eq!(
            (e.reclaim[0].signal.as_str(), e.reclaim[0].hard),
            ("memory.available", false)
        );
        assert_eq!(e.reclaim[0].threshold, "1Gi");
        assert_eq!(e.reclaim[0].available, "512Mi");
        // The disk goes under 10%: a hard threshold, evicting at once, memory first.
        let both_low = obs(&[
            ("memory.available", gib / 2, 8 * gib),
            ("nodefs.available", 9 * gib, 100 * gib),
        ]);
        let e = tracker.evaluate(&hard, &cfg, &both_low, at(32));
        let order: Vec<_> = e.reclaim.iter().map(|m| m.signal.as_str()).collect();
        assert_eq!(order, ["memory.available", "nodefs.available"]);
        // At 15% the disk stays met: its minimum reclaim (10%) asks for 20%.
        let disk_partly_back = obs(&[
            ("memory.available", 4 * gib, 8 * gib),
            ("nodefs.available", 15 * gib, 100 * gib),
        ]);
        let e = tracker.evaluate(&hard, &cfg, &disk_partly_back, at(33));
        assert_eq!(e.reclaim.len(), 1, "{e:?}");
        assert!(e.pressures.disk);
        let disk_back = obs(&[
            ("memory.available", 4 * gib, 8 * gib),
            ("nodefs.available", 25 * gib, 100 * gib),
        ]);
        let e = tracker.evaluate(&hard, &cfg, &disk_back, at(34));
        assert!(e.reclaim.is_empty());
        assert!(e.pressures.disk, "held for the transition period");
        let e = tracker.evaluate(&hard, &cfg, &disk_back, at(100));
        assert_eq!(e.pressures, Pressures::default());
        // A soft threshold without a grace period is refused, as upstream.
        let mut bad = settings();
        bad.soft_grace.clear();
        assert!(bad.validate().is_err());
        assert!(EvictionSettings::parse_min_reclaim("memory.available=-1Mi").is_err());
        assert!(EvictionSettings::parse_min_reclaim("bogus=1Mi").is_err());
    }

    #[test]
    fn observations_from_the_summary() {
        use crate::stats::{FsStats, MemoryStats, NodeStats, RuntimeStats};
        let summary = Summary {
            node: NodeStats {
                memory: Some(MemoryStats {
                    working_set_bytes: Some(3 << 30),
                    ..Default::default()
                }),
                fs: Some(FsStats {
                    available_bytes: Some(10),
                    capacity_bytes: Some(100),
                    inodes_free: Some(7),
                    inodes: Some(70),
                    ..Default::default()
                }),
                runtime: Some(RuntimeStats { image_fs: None }),
                ..Default::default()
            },
            pods: vec![],
        };
        let o = observations(&summary, 8 << 30, Some((4_194_304, 300)));
        assert_eq!(o.signals["memory.available"], (5 << 30, 8 << 30));
        assert_eq!(o.signals["nodefs.available"], (10, 100));
        assert_eq!(o.signals["nodefs.inodesFree"], (7, 70));
        assert_eq!(
            o.signals["imagefs.available"],
            (10, 100),
            "imagefs on nodefs"
        );
        assert_eq!(o.signals["pid.available"], (4_194_004, 4_194_304));
    }

    #[test]
    fn local_storage_limits_in_upstream_words() {
        use crate::stats::{ContainerStats, FsStats, VolumeStats};
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
                "containers": [{"name": "c", "resources": {"limits": {"ephemeral-storage": "4Mi"}}}],
            },
        }))
        .unwrap();
        let used = |b: u64| FsStats {
            used_bytes: Some(b),
            ..Default::default()
        };
        let stats = |volume: u64, rootfs: u64| PodStats {
            volume: vec![VolumeStats {
                fs: used(volume),
                name: "scratch".into(),
                pvc_ref: None,
            }],
            containers: vec![ContainerStats {
                name: "c".into(),
                rootfs: Some(used(rootfs)),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(local_storage_violation(&pod, &stats(1 << 20, 0)), None);
        let violation = |emptydir, rootfs| {
            local_storage_violation(&pod, &stats(emptydir, rootfs))
                .map(|(signal, message)| format!("{signal}: {message}"))
        };
        assert_eq!(
            violation(2 << 20, 0).as_deref(),
            Some(
                "emptydirfs.limit: Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
            )
        );
        assert_eq!(
            violation(1 << 20, 4 << 20).as_deref(),
            Some(
                "ephemeralpodfs.limit: Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. "
            )
        );
    }

    #[test]
    fn candidates_use_the_starved_resource() {
        use crate::stats::{ContainerStats, MemoryStats};
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [
                {"name": "a", "resources": {"requests": {"memory": "1Mi"}}},
                {"name": "b"},
            ]},
        }))
        .unwrap();
        let mem = |ws: u64| MemoryStats {
            working_set_bytes: Some(ws),
            ..Default::default()
        };
        let stats = PodStats {
            containers: vec![
                ContainerStats {
                    name: "a".into(),
                    memory: Some(mem(512 << 10)),
                    ..Default::default()
                },
                ContainerStats {
                    name: "b".into(),
                    memory: Some(mem(2 << 20)),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let (c, over) = candidate(&pod, Some(&stats), "memory.available");
        assert_eq!((c.usage, c.requests), ((512 << 10) + (2 << 20), 1 << 20));
        assert_eq!(over, [("b".to_owned(), "2Mi".to_owned(), "0".to_owned())]);
    }

    #[test]
    fn critical_pods_and_messages() {
        let mut p = Pod::default();
        assert!(!is_critical(&p));
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            priority: Some(2_000_001_000),
            ..Default::default()
        });
        assert!(is_critical(&p));
        let mut s = Pod::default();
        s.metadata.annotations = Some(
            [(
                crate::static_pods::CONFIG_SOURCE_ANNOTATION.to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        assert!(is_critical(&s));
        assert_eq!(
            eviction_message(
                "memory.available",
                "100Mi",
                "50Mi",
                &[("c".into(), "300Mi".into(), "0".into())]
            ),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container c was using 300Mi, request is 0, has larger consumption of memory. "
        );
        assert!(
            eviction_message("nodefs.inodesFree", "5%", "1k", &[]).contains("resource: inodes.")
        );
        assert!(
            eviction_message("nodefs.available", "10%", "1Gi", &[])
                .contains("resource: ephemeral-storage.")
        );
    }

    /// Records the reclaim calls in order; `observe` answers the next observation.
    struct FakeReclaimer {
        calls: parking_lot::Mutex<Vec<String>>,
        after: Observations,
    }

    impl NodeReclaimer for FakeReclaimer {
        async fn reclaim(&self, step: NodeReclaim) {
            self.calls.lock().push(format!("{step:?}"));
        }
        async fn observe(&self) -> Observations {
            self.calls.lock().push("observe".into());
            self.after.clone()
        }
    }

    fn met(signal: &str, hard: bool) -> MetThreshold {
        MetThreshold {
            signal: signal.into(),
            threshold: String::new(),
            available: String::new(),
            hard,
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn disk_signals_reclaim_containers_then_images() {
        use NodeReclaim::*;
        for signal in ["nodefs.available", "nodefs.inodesFree", "imagefs.available"] {
            assert_eq!(
                node_reclaim_steps(signal, false),
                [DeleteUnusedContainers, DeleteUnusedImages],
                "{signal}"
            );
        }
        // With its own image filesystem, nodefs pressure cannot be helped by images.
        assert!(node_reclaim_steps("nodefs.available", true).is_empty());
        assert_eq!(
            node_reclaim_steps("imagefs.inodesFree", true),
            [DeleteUnusedContainers, DeleteUnusedImages]
        );
        assert!(node_reclaim_steps("memory.available", false).is_empty());
        assert!(node_reclaim_steps("pid.available", false).is_empty());
    }

    #[test]
    fn reclaim_runs_before_eviction_and_spares_the_pods_when_it_relieves() {
        let hard = EvictionThresholds::parse("nodefs.available<10%").unwrap();
        let settings = settings();
        let under = [met("nodefs.available", true)];
        // Reclaim brings nodefs back to 20% free: containers, then images, then one more
        // look; no eviction.
        let fake = FakeReclaimer {
            calls: Default::default(),
            after: obs(&[("nodefs.available", 200, 1000)]),
        };
        assert!(block_on(reclaim_node_level(
            &fake, &under, false, &hard, &settings
        )));
        assert_eq!(
            *fake.calls.lock(),
            ["DeleteUnusedContainers", "DeleteUnusedImages", "observe"]
        );
        // Still 5% free after the reclaim: evict.
        let fake = FakeReclaimer {
            calls: Default::default(),
            after: obs(&[("nodefs.available", 50, 1000)]),
        };
        assert!(!block_on(reclaim_node_level(
            &fake, &under, false, &hard, &settings
        )));
        assert_eq!(fake.calls.lock().len(), 3);
        // Memory pressure has no node-level reclaim: straight to eviction, nothing run.
        let fake = FakeReclaimer {
            calls: Default::default(),
            after: obs(&[]),
        };
        let memory = [met("memory.available", true), met("nodefs.available", true)];
        assert!(!block_on(reclaim_node_level(
            &fake, &memory, false, &hard, &settings
        )));
        assert!(fake.calls.lock().is_empty());
    }

    #[test]
    fn relief_needs_every_met_signal_back_above_its_minimum_reclaim() {
        let hard = EvictionThresholds::parse("nodefs.available<10%,imagefs.available<10%").unwrap();
        let mut settings = settings();
        settings.min_reclaim = EvictionSettings::parse_min_reclaim("nodefs.available=5%").unwrap();
        let both = [
            met("nodefs.available", true),
            met("imagefs.available", true),
        ];
        // 12% free is above the threshold but not above threshold + 5% minimum reclaim.
        let o = obs(&[
            ("nodefs.available", 120, 1000),
            ("imagefs.available", 500, 1000),
        ]);
        assert!(!relieved(&both, &hard, &settings, &o));
        let o = obs(&[
            ("nodefs.available", 150, 1000),
            ("imagefs.available", 500, 1000),
        ]);
        assert!(relieved(&both, &hard, &settings, &o));
        let o = obs(&[
            ("nodefs.available", 150, 1000),
            ("imagefs.available", 50, 1000),
        ]);
        assert!(
            !relieved(&both, &hard, &settings, &o),
            "imagefs still under"
        );
    }
}
