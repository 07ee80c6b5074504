//! Garbage collection (upstream `kuberuntime_gc.go`, `images/image_gc_manager.go`): dead
//! containers and sandboxes of the pods still here, pod log directories and pod cgroups
//! nothing owns any more, and unused images when the image filesystem is too full; and
//! the eviction manager's node-level reclaim under disk pressure (every unused container
//! and image, upstream `DeleteAllUnusedContainers` / `DeleteUnusedImages`).
//!
//! The planners are pure and table-tested; [`GarbageCollector`] runs them against the
//! runtime (containers every minute, images every five, as upstream).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use parking_lot::Mutex;

use crate::cri::CriClient;
use crate::status::{RuntimePod, RuntimeState};

/// Upstream's container GC policy (`--minimum-container-ttl-duration` 0,
/// `--maximum-dead-containers-per-container` 1, `--maximum-dead-containers` -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// Dead containers younger than this are kept.
    pub min_age: Duration,
    /// Dead containers kept per (pod, container name); negative = no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node; negative = no limit.
    pub max_containers: i32,
}

impl Default for ContainerGcPolicy {
    fn default() -> Self {
        ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// What container GC removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerGcPlan {
    pub containers: Vec<String>,
    pub sandboxes: Vec<String>,
}

/// A dead container's id and creation time (ns).
type Dead = (String, i64);

/// Plans container and sandbox GC (upstream `evictContainers` + `evictSandboxes`).
/// `removable(uid)` says the pod is gone from the kubelet or terminated, so all its dead
/// containers and non-ready sandboxes may go; other pods keep the newest
/// `max_per_pod_container` dead instances of each container (for `logs --previous`) and
/// their newest sandbox. Running containers and ready sandboxes are never touched, nor
/// sandboxes that still have containers.
pub fn plan_container_gc(
    pods: &BTreeMap<String, RuntimePod>,
    removable: impl Fn(&str) -> bool,
    policy: ContainerGcPolicy,
    now_ns: i64,
) -> ContainerGcPlan {
    let min_age = policy.min_age.as_nanos() as i64;
    // Units: (pod uid, container name) -> dead containers, newest first.
    let mut units: BTreeMap<(String, String), Vec<Dead>> = BTreeMap::new();
    for (pod_uid, rp) in pods {
        for c in &rp.containers {
            if c.state == RuntimeState::Running || now_ns - c.created_at < min_age {
                continue;
            }
            units
                .entry((pod_uid.clone(), c.name.clone()))
                .or_default()
                .push((c.id.clone(), c.created_at));
        }
    }
    for unit in units.values_mut() {
        unit.sort_by_key(|d| std::cmp::Reverse(d.1));
    }
    let mut remove: Vec<Dead> = vec![];
    units.retain(|(pod_uid, _), unit| {
        if removable(pod_uid) {
            remove.append(unit);
            false
        } else {
            true
        }
    });
    let enforce =
        |units: &mut BTreeMap<(String, String), Vec<Dead>>, keep: usize, remove: &mut Vec<Dead>| {
            for unit in units.values_mut() {
                if unit.len() > keep {
                    remove.extend(unit.drain(keep..));
                }
            }
        };
    if policy.max_per_pod_container >= 0 {
        enforce(
            &mut units,
            policy.max_per_pod_container as usize,
            &mut remove,
        );
    }
    if policy.max_containers >= 0 {
        let max = policy.max_containers as usize;
        let total: usize = units.values().map(Vec::len).sum();
        if total > max && !units.is_empty() {
            let per_unit = (max / units.len()).max(1);
            enforce(&mut units, per_unit, &mut remove);
            let mut rest: Vec<Dead> = units.into_values().flatten().collect();
            if rest.len() > max {
                rest.sort_by_key(|d| std::cmp::Reverse(d.1));
                remove.extend(rest.drain(max..));
            }
        }
    }
    let removed: BTreeSet<&str> = remove.iter().map(|(id, _)| id.as_str()).collect();
    let mut plan = ContainerGcPlan {
        containers: remove.iter().map(|(id, _)| id.clone()).collect(),
        sandboxes: vec![],
    };
    for (pod_uid, rp) in pods {
        let newest = rp
            .sandboxes
            .iter()
            .max_by_key(|s| s.created_at)
            .map(|s| &s.id);
        for s in &rp.sandboxes {
            let has_containers = rp
                .containers
                .iter()
                .any(|c| c.sandbox_id == s.id && !removed.contains(c.id.as_str()));
            if s.ready || has_containers {
                continue;
            }
            if removable(pod_uid) || Some(&s.id) != newest {
                plan.sandboxes.push(s.id.clone());
            }
        }
    }
    plan.containers.sort();
    plan
}

/// Pod UIDs named by directories `<ns>_<name>_<uid>` under `--pod-logs-dir`.
pub fn log_dir_uid(dir_name: &str) -> Option<&str> {
    let uid = dir_name.rsplit('_').next()?;
    (dir_name.matches('_').count() >= 2 && !uid.is_empty()).then_some(uid)
}

/// Upstream's image GC settings (`--image-gc-high-threshold` 85,
/// `--image-gc-low-threshold` 80, `--image-minimum-gc-age` 2m).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    pub high_threshold_percent: u8,
    pub low_threshold_percent: u8,
    pub min_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
        }
    }
}

impl ImageGcPolicy {
    /// Checks the thresholds as upstream's `NewImageGCManager` does.
    pub fn validate(&self) -> Result<(), String> {
        if self.high_threshold_percent > 100 {
            return Err(format!(
                "invalid --image-gc-high-threshold {}: must be in the range [0, 100]",
                self.high_threshold_percent
            ));
        }
        if self.low_threshold_percent > 100 {
            return Err(format!(
                "invalid --image-gc-low-threshold {}: must be in the range [0, 100]",
                self.low_threshold_percent
            ));
        }
        if self.low_threshold_percent > self.high_threshold_percent {
            return Err(format!(
                "--image-gc-low-threshold {} must be less than --image-gc-high-threshold {}",
                self.low_threshold_percent, self.high_threshold_percent
            ));
        }
        Ok(())
    }
}

/// An image as image GC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcImage {
    pub id: String,
    pub size_bytes: u64,
    pub pinned: bool,
    /// Seconds since first seen by this kubelet.
    pub age: Duration,
    /// When it was last used by a container (seconds, any monotonic origin); first seen
    /// when never used.
    pub last_used: u64,
}

/// Which images to remove (upstream `freeSpace`): nothing while the image filesystem's
/// usage is below the high threshold; otherwise enough bytes to get to the low
/// threshold, least recently used first, never an image in use, a pinned image or one
/// younger than the minimum age.
pub fn plan_image_gc(
    capacity_bytes: u64,
    available_bytes: u64,
    images: &[GcImage],
    in_use: &BTreeSet<String>,
    policy: ImageGcPolicy,
) -> Vec<String> {
    if capacity_bytes == 0 || policy.high_threshold_percent >= 100 {
        return vec![];
    }
    let used = capacity_bytes.saturating_sub(available_bytes);
    let usage_percent = used.saturating_mul(100) / capacity_bytes;
    if usage_percent < u64::from(policy.high_threshold_percent) {
        return vec![];
    }
    let target_used = capacity_bytes * u64::from(policy.low_threshold_percent) / 100;
    let mut to_free = used.saturating_sub(target_used);
    let mut out = vec![];
    for i in unused_images(images, in_use, policy) {
        if to_free == 0 {
            break;
        }
        out.push(i.id.clone());
        to_free = to_free.saturating_sub(i.size_bytes);
    }
    out
}

/// Every image that may go, least recently used first: not in use, not pinned, at least
/// the minimum age.
fn unused_images<'a>(
    images: &'a [GcImage],
    in_use: &BTreeSet<String>,
    policy: ImageGcPolicy,
) -> Vec<&'a GcImage> {
    let mut candidates: Vec<&GcImage> = images
        .iter()
        .filter(|i| !i.pinned && !in_use.contains(&i.id) && i.age >= policy.min_age)
        .collect();
    candidates.sort_by(|a, b| a.last_used.cmp(&b.last_used).then(a.id.cmp(&b.id)));
    candidates
}

/// The images the eviction manager removes under disk pressure (upstream
/// `ImageGCManager.DeleteUnusedImages`): every unused one, least recently used first,
/// whatever the GC thresholds say (in use, pinned and young images still stay).
pub fn plan_unused_images(
    images: &[GcImage],
    in_use: &BTreeSet<String>,
    policy: ImageGcPolicy,
) -> Vec<String> {
    unused_images(images, in_use, policy)
        .into_iter()
        .map(|i| i.id.clone())
        .collect()
}

/// Image GC's memory: when each image was first seen and last used (upstream
/// `imageRecords`).
#[derive(Debug, Default)]
struct ImageRecords {
    records: Mutex<BTreeMap<String, (std::time::Instant, std::time::Instant)>>,
}

/// Runs the GC passes against the runtime.
pub struct GarbageCollector {
    pub container_policy: ContainerGcPolicy,
    pub image_policy: ImageGcPolicy,
    /// The sandbox (pause) image, never removed (upstream pins `--pod-infra-container-image`).
    pub sandbox_image: String,
    images: ImageRecords,
    /// The origin of the image records' "last used" seconds.
    origin: std::time::Instant,
}

impl GarbageCollector {
    pub fn new(
        container_policy: ContainerGcPolicy,
        image_policy: ImageGcPolicy,
        sandbox_image: impl Into<String>,
    ) -> Self {
        GarbageCollector {
            container_policy,
            image_policy,
            sandbox_image: sandbox_image.into(),
            images: ImageRecords::default(),
            origin: std::time::Instant::now(),
        }
    }

    /// Removes what [`plan_container_gc`] says, then log directories of pods neither the
    /// kubelet nor the runtime knows (`known` are the kubelet's pod UIDs).
    pub async fn collect_containers(
        &self,
        cri: &CriClient,
        pods: &BTreeMap<String, RuntimePod>,
        known: &BTreeSet<String>,
        pod_logs_dir: &Path,
    ) {
        self.remove_dead(cri, pods, |u| !known.contains(u)).await;
        let Ok(entries) = std::fs::read_dir(pod_logs_dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(uid) = log_dir_uid(&name) else {
                continue;
            };
            if !known.contains(uid) && !pods.contains_key(uid) {
                tracing::info!(dir = %e.path().display(), "removing the log directory of a removed pod");
                if let Err(err) = std::fs::remove_dir_all(e.path()) {
                    tracing::warn!(dir = %e.path().display(), error = %err, "pod log GC");
                }
            }
        }
    }

    /// The eviction manager's container reclaim (upstream
    /// `ContainerGC.DeleteAllUnusedContainers`): as the periodic pass, but every dead
    /// container and non-ready sandbox of a `removable` pod goes, where removable also
    /// covers pods that are terminated, not only removed.
    pub async fn delete_all_unused_containers(
        &self,
        cri: &CriClient,
        pods: &BTreeMap<String, RuntimePod>,
        removable: impl Fn(&str) -> bool,
    ) {
        self.remove_dead(cri, pods, removable).await;
    }

    /// Removes what [`plan_container_gc`] plans.
    async fn remove_dead(
        &self,
        cri: &CriClient,
        pods: &BTreeMap<String, RuntimePod>,
        removable: impl Fn(&str) -> bool,
    ) {
        let now = k8s_openapi::jiff::Timestamp::now().as_nanosecond() as i64;
        let plan = plan_container_gc(pods, removable, self.container_policy, now);
        for id in &plan.containers {
            tracing::debug!(container = %id, "removing dead container");
            if let Err(e) = cri.remove_container(id).await {
                tracing::warn!(container = %id, error = %e, "container GC");
            }
        }
        for id in &plan.sandboxes {
            tracing::debug!(sandbox = %id, "removing dead sandbox");
            let _ = cri.stop_pod_sandbox(id).await;
            if let Err(e) = cri.remove_pod_sandbox(id).await {
                tracing::warn!(sandbox = %id, error = %e, "sandbox GC");
            }
        }
    }

    /// Frees image filesystem space when usage is at or above the high threshold.
    pub async fn collect_images(&self, cri: &CriClient, pods: &BTreeMap<String, RuntimePod>) {
        let Some(mountpoint) = image_fs_mountpoint(cri).await else {
            return;
        };
        let Ok(st) = nix::sys::statvfs::statvfs(Path::new(&mountpoint)) else {
            return;
        };
        let frag = st.fragment_size();
        let (capacity, available) = (st.blocks() * frag, st.blocks_available() * frag);
        let Some((gc_images, in_use_ids)) = self.image_view(cri, pods).await else {
            return;
        };
        let plan = plan_image_gc(
            capacity,
            available,
            &gc_images,
            &in_use_ids,
            self.image_policy,
        );
        remove_images(cri, &plan).await;
    }

    /// The eviction manager's image reclaim (upstream `ImageGCManager.DeleteUnusedImages`):
    /// every unused image, whatever the GC thresholds say.
    pub async fn delete_unused_images(&self, cri: &CriClient, pods: &BTreeMap<String, RuntimePod>) {
        let Some((gc_images, in_use_ids)) = self.image_view(cri, pods).await else {
            return;
        };
        let plan = plan_unused_images(&gc_images, &in_use_ids, self.image_policy);
        remove_images(cri, &plan).await;
    }

    /// The runtime's images as image GC sees them (records updated: first seen, last
    /// used) and the IDs of those in use.
    async fn image_view(
        &self,
        cri: &CriClient,
        pods: &BTreeMap<String, RuntimePod>,
    ) -> Option<(Vec<GcImage>, BTreeSet<String>)> {
        let images = cri.list_images().await.ok()?;
        // Images in use: every container's image reference (running or not, as upstream
        // counts all containers the runtime still has).
        let mut in_use = BTreeSet::new();
        for c in pods.values().flat_map(|p| &p.containers) {
            in_use.insert(c.image_ref.clone());
            in_use.insert(c.image.clone());
        }
        let now = std::time::Instant::now();
        let gc_images: Vec<GcImage> = {
            let mut records = self.images.records.lock();
            let present: BTreeSet<&String> = images.iter().map(|i| &i.id).collect();
            records.retain(|id, _| present.contains(id));
            images
                .iter()
                .map(|i| {
                    let used = in_use.contains(&i.id)
                        || i.repo_tags
                            .iter()
                            .chain(&i.repo_digests)
                            .any(|t| in_use.contains(t));
                    let rec = records.entry(i.id.clone()).or_insert((now, now));
                    if used {
                        rec.1 = now;
                    }
                    let sandbox = i.repo_tags.iter().any(|t| {
                        *t == self.sandbox_image || t.ends_with(&format!("/{}", self.sandbox_image))
                    });
                    GcImage {
                        id: i.id.clone(),
                        size_bytes: i.size,
                        pinned: i.pinned || sandbox,
                        age: now.duration_since(rec.0),
                        last_used: rec.1.duration_since(self.origin).as_secs(),
                    }
                })
                .collect()
        };
        // Images referenced by tag or digest count as in use under their ID as well.
        let in_use_ids: BTreeSet<String> = images
            .iter()
            .filter(|i| {
                in_use.contains(&i.id)
                    || i.repo_tags
                        .iter()
                        .chain(&i.repo_digests)
                        .any(|t| in_use.contains(t))
            })
            .map(|i| i.id.clone())
            .collect();
        Some((gc_images, in_use_ids))
    }
}

/// The image filesystem's mountpoint as the runtime reports it.
pub async fn image_fs_mountpoint(cri: &CriClient) -> Option<String> {
    let fs = cri.image_fs_info().await.ok()?;
    fs.image_filesystems
        .first()
        .and_then(|f| f.fs_id.as_ref())
        .map(|i| i.mountpoint.clone())
}

async fn remove_images(cri: &CriClient, ids: &[String]) {
    for id in ids {
        tracing::info!(image = %id, "image GC: removing unused image");
        if let Err(e) = cri.remove_image(id).await {
            tracing::warn!(image = %id, error = %e, "image GC");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{RuntimeContainer, RuntimeSandbox};

    fn c(
        id: &str,
        name: &str,
        state: RuntimeState,
        created: i64,
        sandbox: &str,
    ) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            state,
            created_at: created,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            restart_count: 0,
            hash: String::new(),
            kind: crate::container::ContainerType::Regular,
            sandbox_id: sandbox.into(),
        }
    }

    fn s(id: &str, ready: bool, created: i64) -> RuntimeSandbox {
        RuntimeSandbox {
            id: id.into(),
            ready,
            created_at: created,
            attempt: 0,
            ips: vec![],
            host_network: false,
        }
    }

    fn pod(
        uid: &str,
        sandboxes: Vec<RuntimeSandbox>,
        containers: Vec<RuntimeContainer>,
    ) -> (String, RuntimePod) {
        (
            uid.into(),
            RuntimePod {
                uid: uid.into(),
                name: uid.into(),
                namespace: "default".into(),
                sandboxes,
                containers,
            },
        )
    }

    use RuntimeState::{Exited, Running};

    #[test]
    fn keeps_the_newest_dead_container_per_name_and_the_running_ones() {
        let pods: BTreeMap<_, _> = [pod(
            "p1",
            vec![s("s1", true, 1)],
            vec![
                c("run", "web", Running, 40, "s1"),
                c("d3", "web", Exited, 30, "s1"),
                c("d2", "web", Exited, 20, "s1"),
                c("d1", "web", Exited, 10, "s1"),
                c("side", "sidecar", Exited, 5, "s1"),
            ],
        )]
        .into();
        let plan = plan_container_gc(&pods, |_| false, ContainerGcPolicy::default(), 100);
        assert_eq!(plan.containers, ["d1", "d2"]);
        assert!(plan.sandboxes.is_empty());
        // A min age keeps young ones.
        let policy = ContainerGcPolicy {
            min_age: Duration::from_nanos(75),
            ..Default::default()
        };
        assert_eq!(
            plan_container_gc(&pods, |_| false, policy, 100).containers,
            ["d1"]
        );
        // No per-container limit, a node limit of 2 dead containers: the oldest go.
        let policy = ContainerGcPolicy {
            max_per_pod_container: -1,
            max_containers: 2,
            ..Default::default()
        };
        let plan = plan_container_gc(&pods, |_| false, policy, 100);
        assert_eq!(plan.containers, ["d1", "d2"], "per unit 1, then node-wide");
    }

    #[test]
    fn removed_pods_lose_all_dead_containers_and_non_ready_sandboxes() {
        let pods: BTreeMap<_, _> = [
            pod(
                "gone",
                vec![s("g-old", false, 1), s("g-new", false, 2)],
                vec![c("gd", "web", Exited, 5, "g-new")],
            ),
            pod(
                "live",
                vec![
                    s("l-old", false, 1),
                    s("l-new", false, 2),
                    s("l-ready", true, 0),
                ],
                vec![c("lc", "web", Exited, 5, "l-old")],
            ),
        ]
        .into();
        let plan = plan_container_gc(&pods, |u| u == "gone", ContainerGcPolicy::default(), 100);
        assert_eq!(plan.containers, ["gd"]);
        // gone: both sandboxes (its container goes too); live: l-old keeps its container,
        // l-new is the newest, l-ready is ready -> nothing of live.
        assert_eq!(plan.sandboxes, ["g-old", "g-new"]);
        let pods: BTreeMap<_, _> = [pod(
            "live",
            vec![s("a", false, 1), s("b", false, 2)],
            vec![],
        )]
        .into();
        assert_eq!(
            plan_container_gc(&pods, |_| false, ContainerGcPolicy::default(), 100).sandboxes,
            ["a"],
            "the newest sandbox of a live pod stays"
        );
    }

    #[test]
    fn log_dir_names() {
        assert_eq!(log_dir_uid("default_nginx_0123-abcd"), Some("0123-abcd"));
        assert_eq!(log_dir_uid("kube-system_my_pod_x_uid1"), Some("uid1"));
        assert_eq!(log_dir_uid("stray"), None);
        assert_eq!(log_dir_uid("a_b_"), None);
    }

    fn img(id: &str, size: u64, last_used: u64) -> GcImage {
        GcImage {
            id: id.into(),
            size_bytes: size,
            pinned: false,
            age: Duration::from_secs(3600),
            last_used,
        }
    }

    #[test]
    fn image_gc_frees_down_to_the_low_threshold_lru_first() {
        let policy = ImageGcPolicy::default();
        let images = [
            img("a", 30, 5),
            img("b", 30, 1),
            img("c", 30, 3),
            img("used", 500, 0),
        ];
        let in_use: BTreeSet<String> = ["used".to_string()].into();
        // 84% used: below the high threshold, nothing.
        assert!(plan_image_gc(1000, 160, &images, &in_use, policy).is_empty());
        // 90% used: free 100 bytes to reach 80%, least recently used first, never `used`.
        assert_eq!(
            plan_image_gc(1000, 100, &images, &in_use, policy),
            ["b", "c", "a",]
        );
        // 86%: 60 bytes, two images.
        assert_eq!(
            plan_image_gc(1000, 140, &images, &in_use, policy),
            ["b", "c"]
        );
        // Pinned and young images stay.
        let mut pinned = img("b", 30, 1);
        pinned.pinned = true;
        let mut young = img("c", 30, 3);
        young.age = Duration::from_secs(10);
        let images = [img("a", 30, 5), pinned, young];
        assert_eq!(
            plan_image_gc(1000, 100, &images, &BTreeSet::new(), policy),
            ["a"]
        );
        // 100 disables image GC.
        let off = ImageGcPolicy {
            high_threshold_percent: 100,
            ..policy
        };
        assert!(plan_image_gc(1000, 0, &images, &BTreeSet::new(), off).is_empty());
    }

    #[test]
    fn reclaim_deletes_every_unused_image_whatever_the_thresholds() {
        let policy = ImageGcPolicy::default();
        let mut pinned = img("pinned", 30, 0);
        pinned.pinned = true;
        let mut young = img("young", 30, 0);
        young.age = Duration::from_secs(10);
        let images = [
            img("a", 30, 5),
            img("b", 30, 1),
            img("used", 500, 0),
            pinned,
            young,
        ];
        let in_use: BTreeSet<String> = ["used".to_string()].into();
        // The periodic pass frees nothing at 10% usage; the reclaim frees every unused
        // image, least recently used first.
        assert!(plan_image_gc(1000, 900, &images, &in_use, policy).is_empty());
        assert_eq!(plan_unused_images(&images, &in_use, policy), ["b", "a"]);
    }

    #[test]
    fn image_gc_thresholds_are_checked() {
        assert!(ImageGcPolicy::default().validate().is_ok());
        let bad = ImageGcPolicy {
            high_threshold_percent: 70,
            low_threshold_percent: 80,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("must be less than"));
        let bad = ImageGcPolicy {
            high_threshold_percent: 101,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }
}
