//! Pod volumes on the node (upstream volume manager + the in-tree plugins' SetUp/TearDown):
//! directories under `<root>/pods/<uid>/volumes`, tmpfs mounts for memory-backed volumes,
//! payloads through the [`crate::atomic_writer`], hostPath checks, termination message
//! files, `persistentVolumeClaim` volumes on hostPath and local PersistentVolumes (checked,
//! then mounted from the host path directly; the local ones owned by the pod's fsGroup), and
//! teardown (unmount, then remove) when the pod goes. Decisions are [`crate::volume`]'s.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use crate::atomic_writer;
use crate::config::NodeConfig;
use crate::env::EnvSources;
use crate::metrics::{
    ACTUAL_STATE_OF_WORLD, DESIRED_STATE_OF_WORLD, KubeletMetrics, VOLUME_APPLY_ACCESS_CONTROL,
    VOLUME_MOUNT, VOLUME_UNMOUNT,
};
use crate::sandbox::{namespace, spec, uid};
use crate::volume::{
    ClaimSource, HostFileKind, HostPathAction, ResolvedClaim, VolumeError, VolumeKind,
    claim_action, container_dir, host_path_action, parse_mountinfo, plugin_of_dir, pod_dir,
    resolve_claim, volume_dir, volume_payload,
};

/// Upstream `SetVolumeOwnership` for a pod's `fsGroup`: every file and directory under
/// `dir` (symlinks not followed) gets the group, group read (and write unless
/// `read_only`: configMap, secret, downwardAPI and projected volumes), and directories
/// group search plus setgid, so files made later inherit the group. With
/// `on_root_mismatch` (`fsGroupChangePolicy: OnRootMismatch`) nothing is walked when the
/// volume's root already has the group and the permissions. Returns whether the volume
/// was walked.
pub fn set_volume_ownership(
    dir: &Path,
    fs_group: u32,
    read_only: bool,
    on_root_mismatch: bool,
) -> Result<bool, VolumeError> {
    use std::os::unix::fs::MetadataExt;
    const SETGID: u32 = 0o2000;
    let mask = if read_only { 0o440 } else { 0o660 };
    let dir_mask = mask | 0o110 | SETGID;
    if on_root_mismatch {
        let meta = std::fs::metadata(dir).map_err(io("reading", dir))?;
        if meta.gid() == fs_group && meta.mode() & dir_mask == dir_mask {
            return Ok(false);
        }
    }
    // Bounded like upstream's walk: the volume's own tree only.
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
        std::os::unix::fs::lchown(&path, None, Some(fs_group)).map_err(io("chown", &path))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let want = if meta.is_dir() { dir_mask } else { mask };
        let mode = meta.mode() & 0o7777;
        if mode | want != mode {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | want))
                .map_err(io("chmod", &path))?;
        }
        if meta.is_dir() {
            for e in std::fs::read_dir(&path).map_err(io("listing", &path))? {
                pending.push(e.map_err(io("listing", &path))?.path());
            }
        }
    }
    Ok(true)
}

/// The volumes of one pod, ready to mount.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    /// Volume name -> host path and kind.
    pub volumes: BTreeMap<String, (PathBuf, VolumeKind)>,
    /// Notes for events (sources left out).
    pub notes: Vec<String>,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> VolumeError + 'a {
    move |e| VolumeError::Io {
        what,
        path: path.display().to_string(),
        why: e.to_string(),
    }
}

fn host_file_kind(path: &Path) -> HostFileKind {
    match std::fs::metadata(path) {
        Err(_) => HostFileKind::Missing,
        Ok(m) => {
            let t = m.file_type();
            if t.is_dir() {
                HostFileKind::Directory
            } else if t.is_file() {
                HostFileKind::File
            } else if t.is_socket() {
                HostFileKind::Socket
            } else if t.is_char_device() {
                HostFileKind::CharDevice
            } else if t.is_block_device() {
                HostFileKind::BlockDevice
            } else {
                HostFileKind::Other
            }
        }
    }
}

/// The mount points of this mount namespace.
fn mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

fn mount_tmpfs(dir: &Path, size: Option<i64>) -> Result<(), VolumeError> {
    let mut opts = String::from("mode=0777");
    if let Some(s) = size.filter(|s| *s > 0) {
        opts.push_str(&format!(",size={s}"));
    }
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(opts.as_str()),
    )
    .map_err(|e| VolumeError::Io {
        what: "mounting tmpfs on",
        path: dir.display().to_string(),
        why: e.to_string(),
    })
}

/// Does what a hostPath check asks for: a directory (0755) or an empty file (0644).
fn prepare_host_path(p: &Path, action: HostPathAction) -> Result<(), VolumeError> {
    match action {
        HostPathAction::Nothing => {}
        HostPathAction::CreateDirectory => {
            std::fs::create_dir_all(p).map_err(io("creating", p))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                .map_err(io("chmod", p))?;
        }
        HostPathAction::CreateFile => {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(p)
                .map_err(io("creating", p))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644))
                .map_err(io("chmod", p))?;
        }
    }
    Ok(())
}

/// Unmounts what is mounted at or below `dir` (deepest first; a busy mount is detached).
fn unmount_below(dir: &Path, mounts: &[PathBuf]) -> Result<(), VolumeError> {
    let mut below: Vec<&PathBuf> = mounts.iter().filter(|m| m.starts_with(dir)).collect();
    below.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    below.dedup();
    for m in below {
        if let Err(e) = nix::mount::umount(m) {
            // Still busy: detach it so the directory can go; the kernel frees it later.
            nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH).map_err(|e2| {
                VolumeError::Io {
                    what: "unmounting",
                    path: m.display().to_string(),
                    why: format!("{e}; detach: {e2}"),
                }
            })?;
        }
    }
    Ok(())
}

/// One pod's volumes in the volume manager's two states (upstream's desired and actual
/// states of the world), by volume name, each with its plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PodVolumeStates {
    /// The volumes the pod wants mounted: every volume of its spec that a plugin handles
    /// (a claim once it resolves to a PersistentVolume), until the pod is done with them.
    desired: BTreeMap<String, &'static str>,
    /// The volumes set up, until torn down.
    mounted: BTreeMap<String, &'static str>,
}

/// Sets up and tears down pod volumes under the kubelet root.
///
/// Its metrics, as upstream's volume manager and operation generator record them:
/// `volume_manager_total_volumes` ([`Self::volume_counts`]) and, in the kubelet's
/// `storage_operation_duration_seconds`, each volume's SetUp (`volume_mount`: the first
/// one of a pod's volume, and every later one of a volume set up again on each sync,
/// configMap, secret, downwardAPI and projected, as upstream remounts those), each
/// fsGroup ownership walk (`volume_apply_access_control`) and each volume's TearDown
/// (`volume_unmount`).
#[derive(Debug, Clone)]
pub struct VolumeManager {
    root: PathBuf,
    /// `(pod UID, volume name)` of claimed local volumes the pod's fsGroup already owns:
    /// upstream sets a local volume's ownership when it mounts it, once, not on every sync.
    owned: Arc<parking_lot::Mutex<BTreeSet<(String, String)>>>,
    /// The claimed local volumes each pod has set up, by pod UID: the volumes whose
    /// usage the kubelet reports (upstream's local plugin measures its volumes; its
    /// hostPath plugin does not).
    local_claims: Arc<parking_lot::Mutex<BTreeMap<String, Vec<LocalClaimVolume>>>>,
    /// Each pod's volumes, desired and mounted, by pod UID.
    states: Arc<parking_lot::Mutex<BTreeMap<String, PodVolumeStates>>>,
    metrics: Arc<KubeletMetrics>,
}

/// A pod's volume of a claim bound to a `local` PersistentVolume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalClaimVolume {
    /// The pod's volume name.
    pub volume: String,
    /// The PersistentVolumeClaim, in the pod's namespace.
    pub claim: String,
    pub namespace: String,
    /// The local path mounted.
    pub path: PathBuf,
}

impl VolumeManager {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        VolumeManager {
            root: root.into(),
            owned: Arc::default(),
            local_claims: Arc::default(),
            states: Arc::default(),
            metrics: Arc::default(),
        }
    }

    /// Records its operations in `metrics` (the kubelet's).
    pub fn with_metrics(mut self, metrics: Arc<KubeletMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// How many pod volumes each plugin has in each state (`desired_state_of_world`,
    /// `actual_state_of_world`), by `(plugin, state)`; a pair with none is left out.
    pub fn volume_counts(&self) -> BTreeMap<(&'static str, &'static str), u64> {
        let mut counts = BTreeMap::new();
        for pod in self.states.lock().values() {
            for (volumes, state) in [
                (&pod.desired, DESIRED_STATE_OF_WORLD),
                (&pod.mounted, ACTUAL_STATE_OF_WORLD),
            ] {
                for plugin in volumes.values() {
                    *counts.entry((*plugin, state)).or_default() += 1;
                }
            }
        }
        counts
    }

    /// The pod is done with its volumes (it has finished): they leave the desired state.
    /// Those still set up stay mounted, and counted so, until [`Self::teardown`].
    pub fn release(&self, pod_uid: &str) {
        let mut states = self.states.lock();
        if let Some(s) = states.get_mut(pod_uid) {
            s.desired.clear();
            if s.mounted.is_empty() {
                states.remove(pod_uid);
            }
        }
    }

    /// Upstream's ownership walk of a SetUp, timed as `volume_apply_access_control` when
    /// it walked (an `OnRootMismatch` volume whose root matches is not).
    fn apply_ownership(
        &self,
        plugin: &str,
        dir: &Path,
        fs_group: u32,
        read_only: bool,
        on_root_mismatch: bool,
    ) -> Result<(), VolumeError> {
        let started = Instant::now();
        let walked = set_volume_ownership(dir, fs_group, read_only, on_root_mismatch);
        if !matches!(walked, Ok(false)) {
            self.metrics.observe_storage_operation(
                plugin,
                VOLUME_APPLY_ACCESS_CONTROL,
                walked.is_ok(),
                started.elapsed(),
            );
        }
        walked.map(|_| ())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes every volume of `pod` ready (idempotent; configMap/secret/downwardAPI/projected
    /// contents are rewritten when they changed, atomically).
    pub fn setup(
        &self,
        pod: &Pod,
        node: &NodeConfig,
        sources: &EnvSources,
    ) -> Result<PodVolumes, VolumeError> {
        let pod_uid = uid(pod);
        let mut out = PodVolumes::default();
        let mounted = mount_points();
        let psc = spec(pod).security_context.as_ref();
        let fs_group = psc.and_then(|sc| sc.fs_group).map(|g| g as u32);
        let on_root_mismatch = psc
            .and_then(|sc| sc.fs_group_change_policy.as_deref())
            .is_some_and(|p| p == "OnRootMismatch");
        // Volumes that could not be processed (claims not bound yet, ...): the others are
        // still set up, then the pod waits with all of these named.
        let mut not_processed: Vec<(String, String)> = vec![];
        // Volumes whose mount failed: each is reported on its own, as upstream's
        // reconciler mounts each volume in its own operation.
        let mut failed: Vec<VolumeError> = vec![];
        let mut local_claims: Vec<LocalClaimVolume> = vec![];
        let before = self.states.lock().get(pod_uid).cloned().unwrap_or_default();
        let mut states = PodVolumeStates::default();
        for v in spec(pod).volumes.iter().flatten() {
            let mut kind = VolumeKind::in_pod(pod, v);
            // A claim's plugin is known once it resolves.
            let mut plugin = kind.plugin_name();
            let kind_plugin = plugin.unwrap_or_default();
            let started = Instant::now();
            let mut set_up = || -> Result<PathBuf, VolumeError> {
                Ok(match &mut kind {
                    VolumeKind::Unsupported => {
                        return Err(VolumeError::Unsupported(v.name.clone()));
                    }
                    VolumeKind::HostPath { path, type_ } => {
                        let p = PathBuf::from(&*path);
                        prepare_host_path(&p, host_path_action(path, type_, host_file_kind(&p))?)?;
                        p
                    }
                    VolumeKind::PersistentVolumeClaim { claim, read_only } => {
                        let resolved = match resolve_claim(pod, v, sources.claims.get(&*claim)) {
                            Ok(r) => r,
                            Err(e) => {
                                return Err(VolumeError::NotProcessed {
                                    volumes: vec![v.name.clone()],
                                    errors: vec![e],
                                });
                            }
                        };
                        *read_only = resolved.read_only;
                        plugin = Some(resolved.source.plugin_name());
                        let path = self.setup_claim(
                            pod_uid,
                            &v.name,
                            &resolved,
                            fs_group,
                            on_root_mismatch,
                        )?;
                        if matches!(resolved.source, ClaimSource::Local { .. }) {
                            local_claims.push(LocalClaimVolume {
                                volume: v.name.clone(),
                                claim: claim.clone(),
                                namespace: namespace(pod).to_owned(),
                                path: path.clone(),
                            });
                        }
                        path
                    }
                    _ => {
                        let plugin = kind.plugin_dir().unwrap_or("kubernetes.io~unknown");
                        let dir = volume_dir(&self.root, pod_uid, plugin, &v.name);
                        let fresh = !dir.exists();
                        std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
                        if let Some(size) = kind.tmpfs()
                            && !mounted.contains(&dir)
                        {
                            // An unbounded memory emptyDir is bounded by node memory.
                            let bound = match kind {
                                VolumeKind::EmptyDir { .. } => Some(node.memory_capacity),
                                _ => None,
                            };
                            mount_tmpfs(&dir, size.or(bound))?;
                        }
                        if fresh && matches!(kind, VolumeKind::EmptyDir { .. }) {
                            // emptyDir is world-writable as upstream makes it.
                            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                                .map_err(io("chmod", &dir))?;
                            if let Some(g) = fs_group {
                                self.apply_ownership(
                                    kind_plugin,
                                    &dir,
                                    g,
                                    false,
                                    on_root_mismatch,
                                )?;
                            }
                        }
                        if let Some((payload, notes)) = volume_payload(v, pod, node, sources)? {
                            out.notes.extend(notes);
                            let now = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .unwrap_or_default()
                                .as_nanos() as i128;
                            let written =
                                atomic_writer::write(&dir, &payload, now).map_err(|e| {
                                    VolumeError::Io {
                                        what: "writing volume",
                                        path: dir.display().to_string(),
                                        why: e.to_string(),
                                    }
                                })?;
                            // Each write makes a new timestamped directory: own it again.
                            // Upstream applies no change policy to these volumes.
                            if let Some(g) = fs_group.filter(|_| written || fresh) {
                                self.apply_ownership(kind_plugin, &dir, g, true, false)?;
                            }
                        }
                        dir
                    }
                })
            };
            let result = set_up();
            // Upstream's desired state holds the volumes a plugin handles, a claim once
            // it resolves; each is mounted by its own operation.
            if let Some(plugin) = plugin {
                let was_mounted = before.mounted.contains_key(&v.name);
                if !was_mounted || kind.requires_remount() {
                    self.metrics.observe_storage_operation(
                        plugin,
                        VOLUME_MOUNT,
                        result.is_ok(),
                        started.elapsed(),
                    );
                }
                states.desired.insert(v.name.clone(), plugin);
                // A volume set up before stays mounted when setting it up again fails.
                if result.is_ok() || was_mounted {
                    states.mounted.insert(v.name.clone(), plugin);
                }
            }
            match result {
                Ok(path) => {
                    out.volumes.insert(v.name.clone(), (path, kind));
                }
                Err(VolumeError::NotProcessed { volumes, errors }) => {
                    not_processed.extend(volumes.into_iter().zip(errors));
                }
                Err(e @ (VolumeError::Mount { .. } | VolumeError::Unsupported(_))) => {
                    failed.push(e)
                }
                Err(e) => failed.push(VolumeError::Mount {
                    op: "MountVolume.SetUp",
                    volume: v.name.clone(),
                    why: e.to_string(),
                }),
            }
        }
        {
            let mut known = self.local_claims.lock();
            if local_claims.is_empty() {
                known.remove(pod_uid);
            } else {
                known.insert(pod_uid.to_owned(), local_claims);
            }
        }
        // A volume mounted before that no longer resolves (its claim's volume went) is
        // still mounted, and still wanted until the pod goes.
        for (name, plugin) in before.mounted {
            states.mounted.entry(name.clone()).or_insert(plugin);
            states.desired.entry(name).or_insert(plugin);
        }
        {
            let mut all = self.states.lock();
            if states == PodVolumeStates::default() {
                all.remove(pod_uid);
            } else {
                all.insert(pod_uid.to_owned(), states);
            }
        }
        if !not_processed.is_empty() {
            not_processed.sort();
            let (volumes, errors) = not_processed.into_iter().unzip();
            failed.push(VolumeError::NotProcessed { volumes, errors });
        }
        match failed.len() {
            0 => {}
            1 => return Err(failed.remove(0)),
            _ => return Err(VolumeError::Several(failed)),
        }
        Ok(out)
    }

    /// A claimed hostPath or local volume: the plugin's checks (creating what a hostPath
    /// type asks for), then the pod's fsGroup on a read-write local volume, once per pod.
    /// Containers mount the host path itself.
    fn setup_claim(
        &self,
        pod_uid: &str,
        volume: &str,
        c: &ResolvedClaim,
        fs_group: Option<u32>,
        on_root_mismatch: bool,
    ) -> Result<PathBuf, VolumeError> {
        let p = PathBuf::from(c.path());
        prepare_host_path(&p, claim_action(c, host_file_kind(&p))?).map_err(|e| {
            VolumeError::Mount {
                op: "MountVolume.SetUp",
                volume: c.volume.clone(),
                why: e.to_string(),
            }
        })?;
        if let Some(g) = fs_group.filter(|_| c.ownership) {
            let key = (pod_uid.to_owned(), volume.to_owned());
            if !self.owned.lock().contains(&key) {
                self.apply_ownership(c.source.plugin_name(), &p, g, false, on_root_mismatch)
                    .map_err(|e| VolumeError::Mount {
                        op: "MountVolume.SetUp",
                        volume: c.volume.clone(),
                        why: e.to_string(),
                    })?;
                self.owned.lock().insert(key);
            }
        }
        Ok(p)
    }

    /// Creates the subPath directories a container's mounts need.
    pub fn make_sub_paths(&self, dirs: &[PathBuf]) -> Result<(), VolumeError> {
        for d in dirs {
            if !d.exists() {
                std::fs::create_dir_all(d).map_err(io("creating subPath", d))?;
            }
        }
        Ok(())
    }

    /// An empty termination message file for one container instance, to mount at its
    /// `terminationMessagePath`.
    pub fn termination_message_file(
        &self,
        pod_uid: &str,
        container: &str,
        restart_count: u32,
    ) -> Result<PathBuf, VolumeError> {
        let dir = container_dir(&self.root, pod_uid, container);
        std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        let f = dir.join(format!("termination-{restart_count}"));
        std::fs::write(&f, b"").map_err(io("creating", &f))?;
        // Any container user may write its message.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666))
            .map_err(io("chmod", &f))?;
        Ok(f)
    }

    /// Writes the pod's hosts file (`content`) where its containers' `/etc/hosts` mount
    /// reads it (upstream's `<pod dir>/etc-hosts`), rewritten for every container start.
    pub fn etc_hosts_file(&self, pod_uid: &str, content: &str) -> Result<PathBuf, VolumeError> {
        let dir = pod_dir(&self.root, pod_uid);
        std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        let f = dir.join("etc-hosts");
        std::fs::write(&f, content).map_err(io("writing", &f))?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644))
            .map_err(io("chmod", &f))?;
        Ok(f)
    }

    /// The claimed local volumes of the pod `pod_uid` (as its last setup found them).
    pub fn local_claims(&self, pod_uid: &str) -> Vec<LocalClaimVolume> {
        self.local_claims
            .lock()
            .get(pod_uid)
            .cloned()
            .unwrap_or_default()
    }

    /// Every pod's claimed local volumes.
    pub fn all_local_claims(&self) -> Vec<LocalClaimVolume> {
        self.local_claims
            .lock()
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// Tears the pod's volumes down, each as its own operation (`volume_unmount`): its
    /// mounts unmounted, its directory removed (hostPath and claimed volumes have
    /// nothing of the pod's to remove). The volumes are the ones set up, and those
    /// found in the pod's directory (upstream's reconstruction, after a restart). Then
    /// whatever else is mounted in the pod's directory is unmounted (deepest first) and
    /// the directory removed.
    pub fn teardown(&self, pod_uid: &str) -> Result<(), VolumeError> {
        if pod_uid.is_empty() {
            return Ok(());
        }
        self.unmount_volumes(pod_uid)?;
        let dir = pod_dir(&self.root, pod_uid);
        if !dir.exists() {
            return Ok(());
        }
        unmount_below(&dir, &mount_points())?;
        std::fs::remove_dir_all(&dir).map_err(io("removing", &dir))
    }

    /// Tears the pod's volumes down as [`VolumeManager::teardown`] does, but keeps the
    /// pod's directory (its containers' termination messages, its hosts file): what
    /// upstream does for a finished pod still on the API server.
    pub fn unmount_volumes(&self, pod_uid: &str) -> Result<(), VolumeError> {
        self.owned.lock().retain(|(uid, _)| uid != pod_uid);
        self.local_claims.lock().remove(pod_uid);
        if pod_uid.is_empty() {
            return Ok(());
        }
        let dir = pod_dir(&self.root, pod_uid);
        let mut volumes: BTreeMap<String, &'static str> = self
            .states
            .lock()
            .get(pod_uid)
            .map(|s| s.mounted.clone())
            .unwrap_or_default();
        for plugin_dir in std::fs::read_dir(dir.join("volumes"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Some(plugin) = plugin_dir.file_name().to_str().and_then(plugin_of_dir) else {
                continue;
            };
            for v in std::fs::read_dir(plugin_dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if let Ok(name) = v.file_name().into_string() {
                    volumes.entry(name).or_insert(plugin);
                }
            }
        }
        if volumes.is_empty() {
            // Nothing left (a finished pod's later syncs): no mount table to read.
            self.states.lock().remove(pod_uid);
            return Ok(());
        }
        let mounts = mount_points();
        let mut failed = None;
        for (name, plugin) in &volumes {
            let started = Instant::now();
            // hostPath and claimed volumes have no directory of the pod's.
            let plugin_dir = plugin.replace('/', "~");
            let torn_down = match plugin_of_dir(&plugin_dir) {
                Some(_) => {
                    let vdir = volume_dir(&self.root, pod_uid, &plugin_dir, name);
                    unmount_below(&vdir, &mounts).and_then(|()| {
                        match std::fs::remove_dir_all(&vdir) {
                            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                                Err(io("removing", &vdir)(e))
                            }
                            _ => Ok(()),
                        }
                    })
                }
                None => Ok(()),
            };
            self.metrics.observe_storage_operation(
                plugin,
                VOLUME_UNMOUNT,
                torn_down.is_ok(),
                started.elapsed(),
            );
            match torn_down {
                Ok(()) => {
                    if let Some(s) = self.states.lock().get_mut(pod_uid) {
                        s.mounted.remove(name);
                        s.desired.remove(name);
                    }
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        self.states.lock().remove(pod_uid);
        Ok(())
    }

    /// Pod UIDs that have a directory under `<root>/pods`.
    pub fn pod_uids_on_disk(&self) -> Vec<String> {
        std::fs::read_dir(self.root.join("pods"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource, PodSpec,
        Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn fs_group_owns_volumes_with_setgid_dirs() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        std::fs::create_dir_all(vol.join("sub")).unwrap();
        std::fs::write(vol.join("sub/file"), "x").unwrap();
        std::fs::set_permissions(vol.join("sub/file"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::os::unix::fs::symlink("sub/file", vol.join("link")).unwrap();
        assert!(set_volume_ownership(&vol, 4321, false, false).unwrap());
        for (p, mode) in [("", 0o2770), ("sub", 0o2770), ("sub/file", 0o660)] {
            let m = std::fs::metadata(vol.join(p)).unwrap();
            assert_eq!(m.gid(), 4321, "{p}");
            assert_eq!(m.mode() & mode, mode, "{p}: {:o}", m.mode());
        }
        assert_eq!(
            std::fs::symlink_metadata(vol.join("link")).unwrap().gid(),
            4321
        );
        // OnRootMismatch: a matching root means no walk.
        std::os::unix::fs::lchown(vol.join("sub/file"), None, Some(0)).unwrap();
        assert!(!set_volume_ownership(&vol, 4321, false, true).unwrap());
        assert_eq!(std::fs::metadata(vol.join("sub/file")).unwrap().gid(), 0);
        set_volume_ownership(&vol, 4321, false, false).unwrap();
        assert_eq!(std::fs::metadata(vol.join("sub/file")).unwrap().gid(), 4321);
        // Read-only volumes get group read only.
        let ro = tmp.path().join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::write(ro.join("key"), "v").unwrap();
        std::fs::set_permissions(ro.join("key"), std::fs::Permissions::from_mode(0o400)).unwrap();
        set_volume_ownership(&ro, 4321, true, false).unwrap();
        assert_eq!(
            std::fs::metadata(ro.join("key")).unwrap().mode() & 0o777,
            0o440
        );
    }

    #[test]
    fn disk_volumes_set_up_update_and_tear_down() {
        let tmp = tempfile::tempdir().unwrap();
        let vm = VolumeManager::new(tmp.path());
        let host_dir = tmp.path().join("host/made");
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![
                    Volume {
                        name: "cfg".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: "cm".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    Volume {
                        name: "scratch".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    },
                    Volume {
                        name: "host".into(),
                        host_path: Some(HostPathVolumeSource {
                            path: host_dir.display().to_string(),
                            type_: Some("DirectoryOrCreate".into()),
                        }),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            status: None,
        };
        let cm = |v: &str| ConfigMap {
            data: Some([("key".into(), v.into())].into()),
            ..Default::default()
        };
        let node = NodeConfig::new("n");
        let mut sources = EnvSources {
            config_maps: [("cm".into(), cm("one"))].into(),
            ..Default::default()
        };
        let vols = vm.setup(&pod, &node, &sources).unwrap();
        let cfg = &vols.volumes["cfg"].0;
        assert_eq!(
            cfg,
            &tmp.path()
                .join("pods/u1/volumes/kubernetes.io~configmap/cfg")
        );
        assert_eq!(std::fs::read_to_string(cfg.join("key")).unwrap(), "one");
        assert!(host_dir.is_dir());
        let scratch = &vols.volumes["scratch"].0;
        assert_eq!(
            std::fs::metadata(scratch).unwrap().permissions().mode() & 0o777,
            0o777
        );
        sources.config_maps.insert("cm".into(), cm("two"));
        vm.setup(&pod, &node, &sources).unwrap();
        assert_eq!(std::fs::read_to_string(cfg.join("key")).unwrap(), "two");
        sources.config_maps.clear();
        assert_eq!(
            vm.setup(&pod, &node, &sources).unwrap_err(),
            VolumeError::Mount {
                op: "MountVolume.SetUp",
                volume: "cfg".into(),
                why: VolumeError::ConfigMapNotFound("cm".into()).to_string(),
            }
        );
        let f = vm.termination_message_file("u1", "c", 0).unwrap();
        assert!(f.starts_with(tmp.path().join("pods/u1/containers/c")));
        assert_eq!(vm.pod_uids_on_disk(), ["u1"]);
        vm.teardown("u1").unwrap();
        assert!(!tmp.path().join("pods/u1").exists());
        assert!(host_dir.is_dir(), "hostPath contents are never removed");
    }

    #[test]
    fn each_failed_volume_is_reported_with_its_name_and_the_others_are_set_up() {
        let tmp = tempfile::tempdir().unwrap();
        let vm = VolumeManager::new(tmp.path());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {
                "containers": [{"name": "c"}],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "missing-cm"}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "sec", "secret": {"secretName": "missing-secret"}},
                ]
            }
        }))
        .unwrap();
        let e = vm
            .setup(&pod, &NodeConfig::new("n"), &EnvSources::default())
            .unwrap_err();
        assert_eq!(
            e.event_messages(),
            [
                "MountVolume.SetUp failed for volume \"cfg\" : configmap \"missing-cm\" not found",
                "MountVolume.SetUp failed for volume \"sec\" : secret \"missing-secret\" not found",
            ]
        );
        assert!(
            volume_dir(tmp.path(), "u1", "kubernetes.io~empty-dir", "scratch").is_dir(),
            "the emptyDir between the two failures is set up"
        );
    }

    #[test]
    fn volume_states_and_operations_are_counted_by_plugin() {
        use crate::metrics::{KubeletGauges, KubeletMetrics};
        let tmp = tempfile::tempdir().unwrap();
        let metrics = Arc::new(KubeletMetrics::default());
        let vm = VolumeManager::new(tmp.path().join("kubelet")).with_metrics(metrics.clone());
        let host_dir = tmp.path().join("host");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {
                "securityContext": {"fsGroup": 4321},
                "containers": [{"name": "c"}],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "cm"}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "host", "hostPath": {"path": host_dir, "type": "DirectoryOrCreate"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "unbound"}},
                    {"name": "nfs", "nfs": {"server": "s", "path": "/"}},
                ]
            }
        }))
        .unwrap();
        let node = NodeConfig::new("n");
        let cm = ConfigMap {
            data: Some([("key".into(), "v".into())].into()),
            ..Default::default()
        };
        let mut sources = EnvSources {
            config_maps: [("cm".into(), cm)].into(),
            ..Default::default()
        };
        let counts = |vm: &VolumeManager| -> Vec<(&str, &str, u64)> {
            vm.volume_counts()
                .into_iter()
                .map(|((p, s), n)| (p, s, n))
                .collect()
        };
        let ops = |plugin: &str, op: &str| {
            (
                metrics.storage_operation_count(plugin, op, true),
                metrics.storage_operation_count(plugin, op, false),
            )
        };
        // The unbound claim and the unsupported source fail the setup; neither is in
        // either state, nor mounted by any operation.
        assert!(vm.setup(&pod, &node, &sources).is_err());
        let all_three = |state| {
            vec![
                ("kubernetes.io/configmap", state, 1),
                ("kubernetes.io/empty-dir", state, 1),
                ("kubernetes.io/host-path", state, 1),
            ]
        };
        let mut both = all_three(ACTUAL_STATE_OF_WORLD);
        both.extend(all_three(DESIRED_STATE_OF_WORLD));
        both.sort();
        assert_eq!(counts(&vm), both);
        for plugin in [
            "kubernetes.io/configmap",
            "kubernetes.io/empty-dir",
            "kubernetes.io/host-path",
        ] {
            assert_eq!(ops(plugin, VOLUME_MOUNT), (1, 0), "{plugin}");
        }
        // The fsGroup walks: the new emptyDir, the configMap's first payload.
        assert_eq!(
            ops("kubernetes.io/empty-dir", VOLUME_APPLY_ACCESS_CONTROL),
            (1, 0)
        );
        assert_eq!(
            ops("kubernetes.io/configmap", VOLUME_APPLY_ACCESS_CONTROL),
            (1, 0)
        );
        assert_eq!(
            ops("kubernetes.io/host-path", VOLUME_APPLY_ACCESS_CONTROL),
            (0, 0)
        );

        // A later sync sets up again only what follows API objects; the unchanged
        // configMap is not walked again.
        assert!(vm.setup(&pod, &node, &sources).is_err());
        assert_eq!(ops("kubernetes.io/configmap", VOLUME_MOUNT), (2, 0));
        assert_eq!(ops("kubernetes.io/empty-dir", VOLUME_MOUNT), (1, 0));
        assert_eq!(ops("kubernetes.io/host-path", VOLUME_MOUNT), (1, 0));
        assert_eq!(
            ops("kubernetes.io/configmap", VOLUME_APPLY_ACCESS_CONTROL),
            (1, 0)
        );
        // Its ConfigMap gone, the remount fails; the volume stays mounted.
        sources.config_maps.clear();
        assert!(vm.setup(&pod, &node, &sources).is_err());
        assert_eq!(ops("kubernetes.io/configmap", VOLUME_MOUNT), (2, 1));
        assert_eq!(counts(&vm), both);

        let page = metrics.render(&KubeletGauges {
            volumes: vm
                .volume_counts()
                .into_iter()
                .map(|((p, s), n)| ((p.to_owned(), s.to_owned()), n))
                .collect(),
            ..Default::default()
        });
        for line in [
            "# HELP volume_manager_total_volumes [ALPHA] Number of volumes in Volume Manager",
            "# TYPE volume_manager_total_volumes gauge",
            "volume_manager_total_volumes{plugin_name=\"kubernetes.io/configmap\",state=\"actual_state_of_world\"} 1",
            "volume_manager_total_volumes{plugin_name=\"kubernetes.io/host-path\",state=\"desired_state_of_world\"} 1",
            "# HELP storage_operation_duration_seconds [ALPHA] Storage operation duration",
            "# TYPE storage_operation_duration_seconds histogram",
            "storage_operation_duration_seconds_count{migrated=\"false\",operation_name=\"volume_mount\",status=\"fail-unknown\",volume_plugin=\"kubernetes.io/configmap\"} 1",
            "storage_operation_duration_seconds_bucket{migrated=\"false\",operation_name=\"volume_mount\",status=\"success\",volume_plugin=\"kubernetes.io/empty-dir\",le=\"600\"} 1",
            "storage_operation_duration_seconds_count{migrated=\"false\",operation_name=\"volume_apply_access_control\",status=\"success\",volume_plugin=\"kubernetes.io/empty-dir\"} 1",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }

        // A finished pod no longer wants its volumes; they stay mounted until teardown.
        vm.release("u1");
        let actual = all_three(ACTUAL_STATE_OF_WORLD);
        assert_eq!(counts(&vm), actual);
        vm.teardown("u1").unwrap();
        assert_eq!(counts(&vm), vec![]);
        for plugin in [
            "kubernetes.io/configmap",
            "kubernetes.io/empty-dir",
            "kubernetes.io/host-path",
        ] {
            assert_eq!(ops(plugin, VOLUME_UNMOUNT), (1, 0), "{plugin}");
        }
        assert!(host_dir.is_dir(), "a hostPath's directory is the host's");

        // After a restart, the volumes found in a pod's directory are torn down each as
        // its own operation (upstream's reconstruction).
        sources
            .config_maps
            .insert("cm".into(), ConfigMap::default());
        vm.setup(&pod, &node, &sources).unwrap_err();
        let restarted = Arc::new(KubeletMetrics::default());
        let vm2 = VolumeManager::new(tmp.path().join("kubelet")).with_metrics(restarted.clone());
        assert_eq!(counts(&vm2), vec![]);
        vm2.teardown("u1").unwrap();
        assert!(!tmp.path().join("kubelet/pods/u1").exists());
        for (plugin, n) in [
            ("kubernetes.io/configmap", 1),
            ("kubernetes.io/empty-dir", 1),
            ("kubernetes.io/host-path", 0),
        ] {
            assert_eq!(
                restarted.storage_operation_count(plugin, VOLUME_UNMOUNT, true),
                n,
                "{plugin}"
            );
        }
    }

    #[test]
    fn claimed_host_path_and_local_volumes() {
        use crate::volume::ClaimLookup;
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let vm = VolumeManager::new(tmp.path().join("kubelet"));
        let host_dir = tmp.path().join("pv/host");
        let local_dir = tmp.path().join("pv/local");
        std::fs::create_dir_all(local_dir.join("sub")).unwrap();
        std::fs::write(local_dir.join("sub/f"), "x").unwrap();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {
                "securityContext": {"fsGroup": 4321},
                "containers": [{"name": "c"}],
                "volumes": [
                    {"name": "host", "persistentVolumeClaim": {"claimName": "host"}},
                    {"name": "local", "persistentVolumeClaim": {"claimName": "local"}},
                    {"name": "local-ro",
                     "persistentVolumeClaim": {"claimName": "local", "readOnly": true}},
                    {"name": "scratch", "emptyDir": {}},
                ]
            }
        }))
        .unwrap();
        let claim = |name: &str, bound: bool| ClaimLookup {
            claim: Ok(serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid")},
                "spec": {"volumeName": bound.then(|| format!("pv-{name}"))},
                "status": {"phase": if bound { "Bound" } else { "Pending" }}
            }))
            .unwrap()),
            volume: bound.then(|| {
                let source = if name == "host" {
                    serde_json::json!({"path": host_dir, "type": "DirectoryOrCreate"})
                } else {
                    serde_json::json!({"path": local_dir})
                };
                let key = if name == "host" { "hostPath" } else { "local" };
                Ok(serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("pv-{name}")},
                    "spec": {
                        key: source,
                        "claimRef": {"namespace": "ns", "name": name, "uid": format!("{name}-uid")}
                    }
                }))
                .unwrap())
            }),
        };
        let node = NodeConfig::new("n");
        let mut sources = EnvSources {
            claims: [
                ("host".to_owned(), claim("host", true)),
                ("local".to_owned(), claim("local", false)),
            ]
            .into(),
            ..Default::default()
        };
        // An unbound claim: the pod waits, its other volumes are set up meanwhile.
        let e = vm.setup(&pod, &node, &sources).unwrap_err();
        assert_eq!(
            e,
            VolumeError::NotProcessed {
                volumes: vec!["local".into(), "local-ro".into()],
                errors: vec![
                    "error processing PVC ns/local: PVC is not bound".into(),
                    "error processing PVC ns/local: PVC is not bound".into()
                ],
            }
        );
        assert!(host_dir.is_dir(), "DirectoryOrCreate made the hostPath");
        assert!(
            tmp.path()
                .join("kubelet/pods/u1/volumes/kubernetes.io~empty-dir/scratch")
                .is_dir()
        );

        sources
            .claims
            .insert("local".to_owned(), claim("local", true));
        let vols = vm.setup(&pod, &node, &sources).unwrap();
        let view = |n: &str| vols.volumes[n].clone();
        assert_eq!(
            view("host"),
            (
                host_dir.clone(),
                VolumeKind::PersistentVolumeClaim {
                    claim: "host".into(),
                    read_only: false
                }
            )
        );
        assert_eq!(view("local").0, local_dir);
        assert_eq!(
            view("local-ro").1,
            VolumeKind::PersistentVolumeClaim {
                claim: "local".into(),
                read_only: true
            }
        );
        // fsGroup owns the local volume (setgid dirs), never the hostPath one.
        for p in ["", "sub", "sub/f"] {
            assert_eq!(
                std::fs::metadata(local_dir.join(p)).unwrap().gid(),
                4321,
                "{p}"
            );
        }
        assert_eq!(
            std::fs::metadata(&local_dir).unwrap().mode() & 0o2070,
            0o2070
        );
        assert_ne!(std::fs::metadata(&host_dir).unwrap().gid(), 4321);
        // Once per pod: a later sync does not walk the volume again.
        std::os::unix::fs::lchown(local_dir.join("sub/f"), None, Some(0)).unwrap();
        vm.setup(&pod, &node, &sources).unwrap();
        assert_eq!(std::fs::metadata(local_dir.join("sub/f")).unwrap().gid(), 0);
        // The claims count under the plugin of their PersistentVolume; the read-only
        // one is not walked.
        let counts = vm.volume_counts();
        for state in [DESIRED_STATE_OF_WORLD, ACTUAL_STATE_OF_WORLD] {
            assert_eq!(counts[&("kubernetes.io/local-volume", state)], 2);
            assert_eq!(counts[&("kubernetes.io/host-path", state)], 1);
        }
        let m = &vm.metrics;
        assert_eq!(
            m.storage_operation_count("kubernetes.io/local-volume", VOLUME_MOUNT, true),
            2
        );
        assert_eq!(
            m.storage_operation_count(
                "kubernetes.io/local-volume",
                VOLUME_APPLY_ACCESS_CONTROL,
                true
            ),
            1
        );

        // Teardown leaves the host paths alone; a local path that is gone fails the mount.
        vm.teardown("u1").unwrap();
        assert!(host_dir.is_dir() && local_dir.join("sub/f").is_file());
        std::fs::remove_dir_all(&local_dir).unwrap();
        let e = vm.setup(&pod, &node, &sources).unwrap_err();
        assert_eq!(
            vm.metrics
                .storage_operation_count("kubernetes.io/local-volume", VOLUME_MOUNT, false),
            2,
            "both pod volumes of the missing local path failed"
        );
        assert_eq!(
            e.event_message(),
            format!(
                "MountVolume.NewMounter initialization failed for volume \"pv-local\" : path {:?} does not exist",
                local_dir.display().to_string()
            )
        );
        vm.teardown("u1").unwrap();
    }
}
