//! `/stats/summary` (upstream `k8s.io/kubelet/pkg/apis/stats/v1alpha1`, whose types
//! k8s-openapi does not carry, hence the serde structs here) and the collection behind
//! it, `/metrics/resource` ([`cpu_and_memory`], rendered by [`crate::resource_metrics`])
//! and `/metrics/cadvisor`: CRI `ListContainerStats` and `ImageFsInfo`, /proc for the
//! node, statvfs and a directory walk for filesystems and emptyDir volumes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use serde::Serialize;

use crate::cri::CriError;
use crate::kubelet::Kubelet;
use crate::metrics::ContainerSample;
use crate::sandbox::{name, namespace, uid};
use crate::volume::{VolumeKind, volume_dir};

/// A sample's time (upstream `metav1.Time`; the epoch when unset, so the stats structs
/// can derive `Default`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct StatsTime(pub Time);

impl Default for StatsTime {
    fn default() -> Self {
        StatsTime(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
    }
}

/// The summary of the node and its pods.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: StatsTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: StatsTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    pub time: StatsTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStats {
    pub time: StatsTime,
    /// The default interface's figures, inlined as upstream does.
    #[serde(flatten)]
    pub default: InterfaceStats,
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: StatsTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    pub name: String,
    /// The claim the volume is of, for a `persistentVolumeClaim` volume.
    #[serde(rename = "pvcRef", skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PvcReference {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volume: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

impl PodStats {
    /// The pod's ephemeral volumes (emptyDirs): its claimed volumes are not its
    /// ephemeral storage.
    pub fn ephemeral_volumes(&self) -> impl Iterator<Item = &VolumeStats> {
        self.volume.iter().filter(|v| v.pvc_ref.is_none())
    }
}

// ------------------------------------------------------------------ pure parts

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// A pod's CPU and memory: the sums over its containers (upstream sums the pod cgroup;
/// the containers are what the CRI reports).
pub fn pod_totals(
    containers: &[ContainerStats],
    time: &StatsTime,
) -> (Option<CpuStats>, Option<MemoryStats>) {
    let cpus: Vec<&CpuStats> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    let mems: Vec<&MemoryStats> = containers
        .iter()
        .filter_map(|c| c.memory.as_ref())
        .collect();
    let cpu = (!cpus.is_empty()).then(|| CpuStats {
        time: time.clone(),
        usage_nano_cores: cpus.iter().fold(None, |a, c| add(a, c.usage_nano_cores)),
        usage_core_nano_seconds: cpus
            .iter()
            .fold(None, |a, c| add(a, c.usage_core_nano_seconds)),
    });
    let memory = (!mems.is_empty()).then(|| MemoryStats {
        time: time.clone(),
        usage_bytes: mems.iter().fold(None, |a, m| add(a, m.usage_bytes)),
        working_set_bytes: mems.iter().fold(None, |a, m| add(a, m.working_set_bytes)),
        rss_bytes: mems.iter().fold(None, |a, m| add(a, m.rss_bytes)),
        ..Default::default()
    });
    (cpu, memory)
}

/// A pod's swap: the sum over its containers that report it.
pub fn pod_swap(containers: &[ContainerStats], time: &StatsTime) -> Option<SwapStats> {
    let swaps: Vec<&SwapStats> = containers.iter().filter_map(|c| c.swap.as_ref()).collect();
    (!swaps.is_empty()).then(|| SwapStats {
        time: time.clone(),
        swap_available_bytes: None,
        swap_usage_bytes: swaps.iter().fold(None, |a, s| add(a, s.swap_usage_bytes)),
    })
}

/// A pod's ephemeral storage (upstream `calcEphemeralStorage`): the containers' writable
/// layers and logs plus its disk-backed volumes, on the node filesystem's capacity.
pub fn ephemeral_storage(
    containers: &[ContainerStats],
    volumes: &[VolumeStats],
    node_fs: Option<&FsStats>,
    time: &StatsTime,
) -> FsStats {
    let used = containers
        .iter()
        .flat_map(|c| [c.rootfs.as_ref(), c.logs.as_ref()])
        .flatten()
        .chain(volumes.iter().map(|v| &v.fs))
        .filter_map(|f| f.used_bytes)
        .sum();
    FsStats {
        time: time.clone(),
        available_bytes: node_fs.and_then(|f| f.available_bytes),
        capacity_bytes: node_fs.and_then(|f| f.capacity_bytes),
        used_bytes: Some(used),
        ..Default::default()
    }
}

/// CPU time of the machine from /proc/stat's `cpu` line, in nanoseconds (busy jiffies
/// at USER_HZ 100: user, nice, system, irq, softirq, steal).
pub fn proc_stat_cpu_nanos(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| f.get(*i))
        .sum::<u64>();
    Some(busy * 10_000_000)
}

/// The node's memory from /proc/meminfo (bytes): available, usage (total - free) and
/// working set (usage - inactive file pages, as upstream's working set).
pub fn meminfo_memory(meminfo: &str, time: &StatsTime) -> Option<MemoryStats> {
    let field = |k: &str| meminfo_bytes(meminfo, k);
    let total = field("MemTotal")?;
    let usage = total.saturating_sub(field("MemFree").unwrap_or(0));
    Some(MemoryStats {
        time: time.clone(),
        available_bytes: field("MemAvailable"),
        usage_bytes: Some(usage),
        working_set_bytes: Some(usage.saturating_sub(field("Inactive(file)").unwrap_or(0))),
        ..Default::default()
    })
}

/// The node's swap from /proc/meminfo: SwapTotal - SwapFree, what upstream's root
/// cgroup reports; no limit, hence no available bytes (as upstream for an unlimited one).
pub fn meminfo_swap(meminfo: &str, time: &StatsTime) -> Option<SwapStats> {
    let total = meminfo_bytes(meminfo, "SwapTotal")?;
    let free = meminfo_bytes(meminfo, "SwapFree").unwrap_or(0);
    Some(SwapStats {
        time: time.clone(),
        swap_available_bytes: None,
        swap_usage_bytes: Some(total.saturating_sub(free)),
    })
}

/// One /proc/meminfo field (kB), in bytes.
fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo
        .lines()
        .find(|l| l.split(':').next() == Some(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Interfaces from /proc/net/dev, without loopback and pod-side devices (veth, cni).
pub fn net_dev_interfaces(net_dev: &str) -> Vec<InterfaceStats> {
    net_dev
        .lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            if name == "lo" || name.starts_with("veth") || name.starts_with("cni") {
                return None;
            }
            let f: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(InterfaceStats {
                name: name.to_owned(),
                rx_bytes: *f.first()?,
                rx_errors: *f.get(2)?,
                tx_bytes: *f.get(8)?,
                tx_errors: *f.get(10)?,
            })
        })
        .collect()
}

// ------------------------------------------------------------------ IO

/// Capacity, free space and inodes of the filesystem holding `dir`.
pub fn statvfs_stats(dir: &Path, time: &StatsTime) -> Option<FsStats> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    let frag = st.fragment_size() as u64;
    let capacity = st.blocks() as u64 * frag;
    let available = st.blocks_available() as u64 * frag;
    Some(FsStats {
        time: time.clone(),
        available_bytes: Some(available),
        capacity_bytes: Some(capacity),
        used_bytes: Some(capacity.saturating_sub(st.blocks_free() as u64 * frag)),
        inodes_free: Some(st.files_free() as u64),
        inodes: Some(st.files() as u64),
        inodes_used: Some((st.files() as u64).saturating_sub(st.files_free() as u64)),
    })
}

/// Bytes (allocated blocks) and inodes under `dir`, not following symlinks nor leaving
/// its filesystem; bounded to 100,000 entries so a huge tree cannot stall a scrape.
pub fn disk_usage(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::symlink_metadata(dir).ok()?;
    let dev = root.dev();
    let (mut bytes, mut inodes) = (root.blocks() * 512, 1u64);
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            inodes += 1;
            bytes += m.blocks() * 512;
            if m.is_dir() && m.dev() == dev {
                stack.push(e.path());
            }
            if inodes >= 100_000 {
                return Some((bytes, inodes));
            }
        }
    }
    Some((bytes, inodes))
}

fn value(v: &Option<k8s_cri::v1::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn time_from_nanos(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(ns)).ok())
        .flatten()
        .map(Time)
}

/// The node CPU sample of the previous summary, to turn CPU time into a rate.
#[derive(Debug, Default)]
pub struct CpuRate {
    last: Mutex<Option<(Instant, u64)>>,
}

impl CpuRate {
    /// Nanocores between the previous sample and `now_nanos` (none on the first call).
    fn rate(&self, now_nanos: u64) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock();
        let rate = last.and_then(|(t, n)| {
            let dt = now.duration_since(t).as_nanos() as u64;
            (dt > 0).then(|| now_nanos.saturating_sub(n).saturating_mul(1_000_000_000) / dt)
        });
        *last = Some((now, now_nanos));
        rate
    }
}

/// CRI stats of every container, labelled for `/metrics/cadvisor`.
pub async fn container_samples(kubelet: &Kubelet) -> Vec<ContainerSample> {
    let cri = kubelet.runtime().cri();
    let Ok(stats) = cri.list_container_stats().await else {
        return vec![];
    };
    let containers: BTreeMap<String, k8s_cri::v1::Container> = cri
        .list_containers(None)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    let now_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    stats
        .into_iter()
        .filter_map(|s| {
            let attrs = s.attributes.as_ref()?;
            let c = containers.get(&attrs.id);
            let label = |k: &str| attrs.labels.get(k).cloned().unwrap_or_default();
            Some(ContainerSample {
                id: attrs.id.clone(),
                container: attrs
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                pod: label("io.kubernetes.pod.name"),
                namespace: label("io.kubernetes.pod.namespace"),
                image: c
                    .and_then(|c| c.image.as_ref())
                    .map(|i| i.image.clone())
                    .unwrap_or_default(),
                cpu_usage_core_nanoseconds: s
                    .cpu
                    .as_ref()
                    .and_then(|c| value(&c.usage_core_nano_seconds)),
                memory_working_set_bytes: s
                    .memory
                    .as_ref()
                    .and_then(|m| value(&m.working_set_bytes)),
                memory_usage_bytes: s.memory.as_ref().and_then(|m| value(&m.usage_bytes)),
                memory_rss_bytes: s.memory.as_ref().and_then(|m| value(&m.rss_bytes)),
                writable_layer_bytes: s.writable_layer.as_ref().and_then(|w| value(&w.used_bytes)),
                start_time_seconds: c
                    .filter(|c| c.created_at > 0)
                    .map(|c| c.created_at as f64 / 1e9),
                timestamp_ms: now_ms,
            })
        })
        .collect()
}

/// What one collection covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything `/stats/summary` shows (also what the eviction manager reads).
    Full,
    /// CPU, memory and swap of the node, pods and containers only (upstream
    /// `GetCPUAndMemoryStats`, behind `/metrics/resource`): no filesystem, network or
    /// image stats, so no directory walks on a scrape.
    CpuAndMemory,
}

/// Collects the summary of the node and the pods the kubelet runs. A runtime that does
/// not answer leaves the pods without container stats.
pub async fn summary(kubelet: &Kubelet, cpu_rate: &CpuRate) -> Summary {
    let (summary, error) = collect(kubelet, cpu_rate, Scope::Full).await;
    if let Some(e) = error {
        tracing::debug!(error = %e, "container stats for the summary");
    }
    summary
}

/// The node's, pods' and containers' CPU, memory and swap (upstream
/// `GetCPUAndMemoryStats`); an error when the runtime's container stats could not be
/// listed.
pub async fn cpu_and_memory(kubelet: &Kubelet, cpu_rate: &CpuRate) -> Result<Summary, CriError> {
    match collect(kubelet, cpu_rate, Scope::CpuAndMemory).await {
        (summary, None) => Ok(summary),
        (_, Some(e)) => Err(e),
    }
}

/// The one collection behind [`summary`] and [`cpu_and_memory`]: what `scope` covers,
/// and the first runtime error met (the stats then lack what it would have given).
pub async fn collect(
    kubelet: &Kubelet,
    cpu_rate: &CpuRate,
    scope: Scope,
) -> (Summary, Option<CriError>) {
    let full = scope == Scope::Full;
    let now = StatsTime(Time(k8s_openapi::jiff::Timestamp::now()));
    let cfg = kubelet.config();
    let cri = kubelet.runtime().cri();
    let node_fs = full.then(|| statvfs_stats(&cfg.root_dir, &now)).flatten();
    let image_fs = if full {
        match cri.image_fs_info().await {
            Ok(info) => info.image_filesystems.first().map(|f| {
                let mountpoint = f
                    .fs_id
                    .as_ref()
                    .map(|i| i.mountpoint.clone())
                    .unwrap_or_default();
                let mut fs = statvfs_stats(Path::new(&mountpoint), &now).unwrap_or_default();
                fs.time = now.clone();
                fs.used_bytes = value(&f.used_bytes).or(fs.used_bytes);
                fs.inodes_used = value(&f.inodes_used).or(fs.inodes_used);
                fs
            }),
            Err(_) => None,
        }
    } else {
        None
    };
    let cpu_nanos = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| proc_stat_cpu_nanos(&s));
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let interfaces = if full {
        net_dev_interfaces(&std::fs::read_to_string("/proc/net/dev").unwrap_or_default())
    } else {
        vec![]
    };
    let boot = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .and_then(|up| {
            let secs = k8s_openapi::jiff::Timestamp::now().as_second() - up as i64;
            k8s_openapi::jiff::Timestamp::from_second(secs)
                .ok()
                .map(Time)
        });
    let node = NodeStats {
        node_name: cfg.node_name.clone(),
        start_time: boot,
        cpu: cpu_nanos.map(|n| CpuStats {
            time: now.clone(),
            usage_nano_cores: cpu_rate.rate(n),
            usage_core_nano_seconds: Some(n),
        }),
        memory: meminfo_memory(&meminfo, &now),
        network: interfaces.first().cloned().map(|default| NetworkStats {
            time: now.clone(),
            default,
            interfaces: interfaces.clone(),
        }),
        fs: node_fs.clone(),
        runtime: full.then_some(RuntimeStats { image_fs }),
        swap: meminfo_swap(&meminfo, &now),
    };

    // Container stats by pod UID.
    let mut error = None;
    let stats = cri.list_container_stats().await.unwrap_or_else(|e| {
        error.get_or_insert(e);
        vec![]
    });
    let containers: BTreeMap<String, k8s_cri::v1::Container> = cri
        .list_containers(None)
        .await
        .unwrap_or_else(|e| {
            error.get_or_insert(e);
            vec![]
        })
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    let mut by_pod: BTreeMap<String, Vec<ContainerStats>> = BTreeMap::new();
    for s in stats {
        let Some(attrs) = &s.attributes else { continue };
        let Some(pod_uid) = attrs.labels.get("io.kubernetes.pod.uid") else {
            continue;
        };
        let c = containers.get(&attrs.id);
        // Only the running (or newest) instance counts, as upstream's summary.
        if c.is_some_and(|c| c.state != k8s_cri::v1::ContainerState::ContainerRunning as i32) {
            continue;
        }
        let name = attrs
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let logs = if full {
            let log_dir = kubelet
                .runtime()
                .node()
                .pod_logs_dir
                .join(format!(
                    "{}_{}_{}",
                    attrs
                        .labels
                        .get("io.kubernetes.pod.namespace")
                        .cloned()
                        .unwrap_or_default(),
                    attrs
                        .labels
                        .get("io.kubernetes.pod.name")
                        .cloned()
                        .unwrap_or_default(),
                    pod_uid
                ))
                .join(&name);
            disk_usage(&log_dir).map(|(bytes, inodes)| FsStats {
                used_bytes: Some(bytes),
                inodes_used: Some(inodes),
                ..node_fs.clone().unwrap_or_default()
            })
        } else {
            None
        };
        let rootfs = if full {
            s.writable_layer.as_ref().map(|w| FsStats {
                used_bytes: value(&w.used_bytes),
                inodes_used: value(&w.inodes_used),
                ..image_fs_or(&node, &now)
            })
        } else {
            None
        };
        by_pod
            .entry(pod_uid.clone())
            .or_default()
            .push(ContainerStats {
                name,
                start_time: c.and_then(|c| time_from_nanos(c.created_at)),
                cpu: s.cpu.as_ref().map(|c| CpuStats {
                    time: sample_time(c.timestamp, &now),
                    usage_nano_cores: value(&c.usage_nano_cores),
                    usage_core_nano_seconds: value(&c.usage_core_nano_seconds),
                }),
                memory: s.memory.as_ref().map(|m| MemoryStats {
                    time: sample_time(m.timestamp, &now),
                    available_bytes: value(&m.available_bytes),
                    usage_bytes: value(&m.usage_bytes),
                    working_set_bytes: value(&m.working_set_bytes),
                    rss_bytes: value(&m.rss_bytes),
                    page_faults: value(&m.page_faults),
                    major_page_faults: value(&m.major_page_faults),
                }),
                rootfs,
                logs,
                swap: s.swap.as_ref().map(|w| SwapStats {
                    time: sample_time(w.timestamp, &now),
                    swap_available_bytes: value(&w.swap_available_bytes),
                    swap_usage_bytes: value(&w.swap_usage_bytes),
                }),
            });
    }

    let mut pods: Vec<Pod> = kubelet.pods();
    pods.sort_by(|a, b| (namespace(a), name(a)).cmp(&(namespace(b), name(b))));
    let pods = pods
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .map(|p| {
            let mut containers = by_pod.remove(uid(p)).unwrap_or_default();
            containers.sort_by(|a, b| a.name.cmp(&b.name));
            let mut volume = if full {
                empty_dir_stats(&cfg.root_dir, p, &now)
            } else {
                vec![]
            };
            let (cpu, memory) = pod_totals(&containers, &now);
            // Only the ephemeral volumes count as the pod's ephemeral storage.
            let ephemeral =
                full.then(|| ephemeral_storage(&containers, &volume, node_fs.as_ref(), &now));
            if full {
                volume.extend(local_claim_stats(
                    &kubelet.runtime().volumes().local_claims(uid(p)),
                    &now,
                ));
            }
            PodStats {
                pod_ref: PodReference {
                    name: name(p).to_owned(),
                    namespace: namespace(p).to_owned(),
                    uid: uid(p).to_owned(),
                },
                start_time: p.status.as_ref().and_then(|s| s.start_time.clone()),
                swap: pod_swap(&containers, &now),
                containers,
                cpu,
                memory,
                volume,
                ephemeral_storage: ephemeral,
            }
        })
        .collect();
    (Summary { node, pods }, error)
}

/// A CRI sample's time (nanoseconds since the epoch), else `now`.
fn sample_time(ns: i64, now: &StatsTime) -> StatsTime {
    time_from_nanos(ns)
        .map(StatsTime)
        .unwrap_or_else(|| now.clone())
}

fn image_fs_or(node: &NodeStats, now: &StatsTime) -> FsStats {
    node.runtime
        .as_ref()
        .and_then(|r| r.image_fs.clone())
        .or_else(|| node.fs.clone())
        .unwrap_or(FsStats {
            time: now.clone(),
            ..Default::default()
        })
}

/// The filesystem figures of claimed local volumes (upstream's local plugin measures the
/// filesystem its path is on: `MetricsStatFS`).
pub fn local_claim_stats(
    claims: &[crate::volume_manager::LocalClaimVolume],
    now: &StatsTime,
) -> Vec<VolumeStats> {
    claims
        .iter()
        .filter_map(|c| {
            Some(VolumeStats {
                fs: statvfs_stats(&c.path, now)?,
                name: c.volume.clone(),
                pvc_ref: Some(PvcReference {
                    name: c.claim.clone(),
                    namespace: c.namespace.clone(),
                }),
            })
        })
        .collect()
}

/// Usage of the pod's disk-backed emptyDir volumes (memory-backed ones are not
/// ephemeral storage and are left out, as upstream's summary does for tmpfs).
fn empty_dir_stats(root: &Path, pod: &Pod, now: &StatsTime) -> Vec<VolumeStats> {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    volumes
        .iter()
        .filter_map(|v| {
            let kind = VolumeKind::of(v);
            if !matches!(kind, VolumeKind::EmptyDir { memory: false, .. }) {
                return None;
            }
            let dir = volume_dir(root, uid(pod), kind.plugin_dir()?, &v.name);
            let (bytes, inodes) = disk_usage(&dir)?;
            let mut fs = statvfs_stats(&dir, now)?;
            fs.used_bytes = Some(bytes);
            fs.inodes_used = Some(inodes);
            Some(VolumeStats {
                fs,
                name: v.name.clone(),
                pvc_ref: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> StatsTime {
        StatsTime(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap(),
        ))
    }

    #[test]
    fn summary_json_has_upstream_field_names() {
        let s = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                fs: Some(FsStats {
                    time: t(),
                    available_bytes: Some(5),
                    capacity_bytes: Some(10),
                    ..Default::default()
                }),
                network: Some(NetworkStats {
                    time: t(),
                    default: InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: 1,
                        ..Default::default()
                    },
                    interfaces: vec![],
                }),
                swap: Some(SwapStats {
                    time: t(),
                    swap_available_bytes: None,
                    swap_usage_bytes: Some(3),
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "default".into(),
                    uid: "u".into(),
                },
                volume: vec![VolumeStats {
                    fs: FsStats {
                        time: t(),
                        used_bytes: Some(4096),
                        ..Default::default()
                    },
                    name: "scratch".into(),
                    pvc_ref: None,
                }],
                ephemeral_storage: Some(FsStats {
                    time: t(),
                    used_bytes: Some(1),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["node"]["nodeName"], "n1");
        assert_eq!(v["node"]["fs"]["capacityBytes"], 10);
        assert_eq!(v["node"]["network"]["name"], "eth0");
        assert_eq!(v["node"]["network"]["rxBytes"], 1);
        assert_eq!(v["pods"][0]["podRef"]["uid"], "u");
        assert_eq!(v["pods"][0]["volume"][0]["name"], "scratch");
        assert_eq!(v["pods"][0]["volume"][0]["usedBytes"], 4096);
        assert_eq!(v["pods"][0]["ephemeral-storage"]["usedBytes"], 1);
        assert_eq!(v["pods"][0]["containers"], serde_json::json!([]));
        assert_eq!(v["node"]["swap"]["swapUsageBytes"], 3);
        assert!(v["node"]["swap"].get("swapAvailableBytes").is_none());
        assert!(v["node"].get("cpu").is_none(), "absent stats are left out");
        assert!(v["pods"][0]["volume"][0].get("pvcRef").is_none());
    }

    #[test]
    fn claimed_local_volumes_are_measured_with_their_claim() {
        let dir = std::env::temp_dir();
        let claims = [crate::volume_manager::LocalClaimVolume {
            volume: "data".into(),
            claim: "db".into(),
            namespace: "shop".into(),
            path: dir.clone(),
        }];
        let stats = local_claim_stats(&claims, &t());
        let v = serde_json::to_value(&stats).unwrap();
        assert_eq!(v[0]["name"], "data");
        assert_eq!(
            v[0]["pvcRef"],
            serde_json::json!({"name": "db", "namespace": "shop"})
        );
        assert_eq!(
            stats[0].fs.capacity_bytes,
            statvfs_stats(&dir, &t()).unwrap().capacity_bytes
        );
        // Not the pod's ephemeral storage.
        let pod = PodStats {
            volume: stats,
            ..Default::default()
        };
        assert_eq!(pod.ephemeral_volumes().count(), 0);
    }

    #[test]
    fn pod_totals_and_ephemeral_storage_sum_the_parts() {
        let c = |cpu: u64, ws: u64, rootfs: u64| ContainerStats {
            cpu: Some(CpuStats {
                time: t(),
                usage_nano_cores: Some(cpu),
                usage_core_nano_seconds: Some(cpu * 10),
            }),
            memory: Some(MemoryStats {
                time: t(),
                working_set_bytes: Some(ws),
                ..Default::default()
            }),
            rootfs: Some(FsStats {
                time: t(),
                used_bytes: Some(rootfs),
                ..Default::default()
            }),
            logs: Some(FsStats {
                time: t(),
                used_bytes: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cs = [c(100, 1000, 10), c(50, 24, 20)];
        let (cpu, mem) = pod_totals(&cs, &t());
        assert_eq!(cpu.as_ref().unwrap().usage_nano_cores, Some(150));
        assert_eq!(cpu.unwrap().usage_core_nano_seconds, Some(1500));
        let mem = mem.unwrap();
        assert_eq!(mem.working_set_bytes, Some(1024));
        assert_eq!(mem.usage_bytes, None, "no container reported it");
        assert_eq!(pod_totals(&[], &t()), (None, None));
        assert_eq!(pod_swap(&cs, &t()), None, "no container reports swap");
        let swapping = |used: u64| ContainerStats {
            swap: Some(SwapStats {
                time: t(),
                swap_available_bytes: Some(1),
                swap_usage_bytes: Some(used),
            }),
            ..Default::default()
        };
        let swap = pod_swap(&[swapping(5), cs[0].clone(), swapping(7)], &t()).unwrap();
        assert_eq!(swap.swap_usage_bytes, Some(12));
        assert_eq!(swap.swap_available_bytes, None);
        let vol = VolumeStats {
            fs: FsStats {
                time: t(),
                used_bytes: Some(100),
                ..Default::default()
            },
            name: "v".into(),
            pvc_ref: None,
        };
        let node = FsStats {
            time: t(),
            capacity_bytes: Some(1 << 30),
            available_bytes: Some(1 << 29),
            ..Default::default()
        };
        let e = ephemeral_storage(&cs, &[vol], Some(&node), &t());
        assert_eq!(e.used_bytes, Some(10 + 20 + 1 + 1 + 100));
        assert_eq!(e.capacity_bytes, Some(1 << 30));
    }

    #[test]
    fn proc_parsers() {
        let stat = "cpu  100 5 50 9000 20 3 2 1 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(
            proc_stat_cpu_nanos(stat),
            Some((100 + 5 + 50 + 3 + 2 + 1) * 10_000_000)
        );
        assert_eq!(proc_stat_cpu_nanos("intr 1"), None);
        let mem = "MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    600 kB\nInactive(file):  300 kB\n";
        let m = meminfo_memory(mem, &t()).unwrap();
        assert_eq!(m.available_bytes, Some(600 * 1024));
        assert_eq!(m.usage_bytes, Some(800 * 1024));
        assert_eq!(m.working_set_bytes, Some(500 * 1024));
        assert_eq!(meminfo_swap(mem, &t()), None, "no swap lines");
        let swap = meminfo_swap("SwapTotal:   4096 kB\nSwapFree:    1024 kB\n", &t()).unwrap();
        assert_eq!(swap.swap_usage_bytes, Some(3072 * 1024));
        assert_eq!(
            swap.swap_available_bytes, None,
            "unlimited, as the root cgroup"
        );
        let none = meminfo_swap("SwapTotal:   0 kB\nSwapFree:    0 kB\n", &t()).unwrap();
        assert_eq!(none.swap_usage_bytes, Some(0));
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n\
                       lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 500 5 1 0 0 0 0 0 700 7 2 0 0 0 0 0\nveth1234: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n";
        let ifs = net_dev_interfaces(dev);
        assert_eq!(
            ifs,
            [InterfaceStats {
                name: "eth0".into(),
                rx_bytes: 500,
                rx_errors: 1,
                tx_bytes: 700,
                tx_errors: 2
            }]
        );
    }

    #[test]
    fn disk_usage_counts_files_and_inodes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/f"), vec![7u8; 64 * 1024]).unwrap();
        let (bytes, inodes) = disk_usage(d.path()).unwrap();
        assert!(bytes >= 64 * 1024, "{bytes}");
        assert_eq!(inodes, 3);
        assert!(disk_usage(&d.path().join("missing")).is_none());
    }
}
