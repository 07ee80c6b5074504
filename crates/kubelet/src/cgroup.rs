//! Pod cgroups under the cgroupfs driver on cgroup v1 (upstream `cm/pod_container_manager_linux.go`,
//! `cm/cgroup_manager_linux.go`). runc creates each container's own cgroup below the pod's
//! and removes only that one, so the kubelet creates and deletes the pod level itself.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::metrics::KubeletMetrics;
use crate::qos::PodCgroupResources;

/// Creates, sizes and removes cgroups below a cgroup v1 mount root (`/sys/fs/cgroup`).
/// Each write is timed into `kubelet_cgroup_manager_duration_seconds` by upstream's
/// method: `create` when the cgroup was missing, `update` when it existed and had its
/// values written, `destroy` when one was removed.
#[derive(Debug, Clone)]
pub struct CgroupManager {
    mount: PathBuf,
    metrics: Arc<KubeletMetrics>,
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {value:?} to {}: {e}", path.display()),
        )
    })
}

impl CgroupManager {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        CgroupManager {
            mount: mount.into(),
            metrics: Arc::default(),
        }
    }

    /// Records its operations in `metrics` (the kubelet's).
    pub fn with_metrics(mut self, metrics: Arc<KubeletMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Runs `write` as the operation that makes or changes `cgroup`, timed as `create`
    /// when the cgroup did not exist before, else `update`.
    fn timed_write(&self, cgroup: &str, write: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let operation = if self.exists(cgroup) {
            "update"
        } else {
            "create"
        };
        let started = Instant::now();
        let result = write();
        self.metrics
            .observe_cgroup_operation(operation, started.elapsed());
        result
    }

    /// The mounted hierarchies (each directory with a `cgroup.procs`; the cgroup2 `unified`
    /// mount of a hybrid layout is left to runc).
    pub fn hierarchies(&self) -> Vec<PathBuf> {
        let mut out = vec![];
        if let Ok(entries) = std::fs::read_dir(&self.mount) {
            for e in entries.flatten() {
                let p = e.path();
                if e.file_name() != "unified" && p.join("cgroup.procs").exists() {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }

    fn hierarchy(&self, controller: &str) -> Option<PathBuf> {
        self.hierarchies().into_iter().find(|h| {
            h.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.split(',').any(|c| c == controller))
        })
    }

    /// Whether the cgroup exists in any hierarchy.
    pub fn exists(&self, cgroup: &str) -> bool {
        self.hierarchies()
            .iter()
            .any(|h| h.join(cgroup.trim_start_matches('/')).is_dir())
    }

    /// Creates `cgroup` (e.g. `/kubepods/burstable/pod<uid>`) and its missing parents in
    /// every hierarchy, with the cpuset of each new level copied from its parent.
    /// Idempotent.
    fn ensure(&self, cgroup: &str) -> io::Result<()> {
        let rel = cgroup.trim_start_matches('/');
        for h in self.hierarchies() {
            let is_cpuset = h.join("cpuset.cpus").exists();
            let mut dir = h.clone();
            for part in rel.split('/').filter(|p| !p.is_empty()) {
                let parent = dir.clone();
                dir.push(part);
                if !dir.is_dir() {
                    match std::fs::create_dir(&dir) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(io::Error::new(
                                e.kind(),
                                format!("creating {}: {e}", dir.display()),
                            ));
                        }
                    }
                }
                if is_cpuset {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let current = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
                        if current.trim().is_empty() {
                            let from_parent = std::fs::read_to_string(parent.join(f))?;
                            write(&dir.join(f), from_parent.trim())?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the limits that are set to `cgroup`'s control files. `create` makes the
    /// cgroup first; otherwise a missing one is an error (upstream's reserved cgroups
    /// must exist).
    pub fn set_limits(
        &self,
        cgroup: &str,
        limits: &crate::node_allocatable::CgroupLimits,
        create: bool,
    ) -> io::Result<()> {
        if !create && !self.exists(cgroup) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{cgroup:?} cgroup does not exist"),
            ));
        }
        self.timed_write(cgroup, || {
            if create {
                self.ensure(cgroup)?;
            }
            self.write_limits(cgroup, limits)
        })
    }

    fn write_limits(
        &self,
        cgroup: &str,
        limits: &crate::node_allocatable::CgroupLimits,
    ) -> io::Result<()> {
        let rel = cgroup.trim_start_matches('/');
        for (controller, file, value) in [
            ("cpu", "cpu.shares", limits.cpu_shares),
            ("memory", "memory.limit_in_bytes", limits.memory_limit),
            ("pids", "pids.max", limits.pids_limit),
        ] {
            if let (Some(value), Some(h)) = (value, self.hierarchy(controller)) {
                write(&h.join(rel).join(file), &value.to_string())?;
            }
        }
        // Only with the hugetlb controller mounted, and only the sizes it has files for
        // (upstream skips huge pages where the controller is not enabled).
        if let Some(h) = self
            .hierarchy("hugetlb")
            .filter(|_| !limits.hugetlb.is_empty())
        {
            for (size, limit) in &limits.hugetlb {
                let file = h.join(rel).join(format!("hugetlb.{size}.limit_in_bytes"));
                if file.exists() {
                    write(&file, &limit.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Creates `cgroup` as [`Self::ensure`] does, then applies `res`. Idempotent.
    pub fn create(&self, cgroup: &str, res: &PodCgroupResources) -> io::Result<()> {
        self.timed_write(cgroup, || self.create_untimed(cgroup, res))
    }

    fn create_untimed(&self, cgroup: &str, res: &PodCgroupResources) -> io::Result<()> {
        self.ensure(cgroup)?;
        let rel = cgroup.trim_start_matches('/');
        if let Some(cpu) = self.hierarchy("cpu") {
            let d = cpu.join(rel);
            write(&d.join("cpu.shares"), &res.cpu_shares.to_string())?;
            write(&d.join("cpu.cfs_period_us"), &res.cpu_period.to_string())?;
            write(
                &d.join("cpu.cfs_quota_us"),
                &res.cpu_quota.unwrap_or(-1).to_string(),
            )?;
        }
        if let Some(mem) = self.hierarchy("memory") {
            let d = mem.join(rel);
            write(
                &d.join("memory.limit_in_bytes"),
                &res.memory_limit.unwrap_or(-1).to_string(),
            )?;
        }
        Ok(())
    }

    /// The cpu shares, CFS quota and memory limit `cgroup` has (`None`: it does not
    /// exist, or a file is unreadable).
    pub fn values(&self, cgroup: &str) -> Option<crate::resize::CgroupValues> {
        let number = |controller: &str, file: &str| -> Option<i64> {
            self.read(controller, cgroup, file)
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let quota = number("cpu", "cpu.cfs_quota_us")?;
        let memory = number("memory", "memory.limit_in_bytes")?;
        Some(crate::resize::CgroupValues {
            cpu_shares: number("cpu", "cpu.shares")?,
            cpu_quota: (quota > 0).then_some(quota),
            // cgroup v1 reads an unlimited memory limit as the largest page multiple.
            memory_limit: (memory > 0 && memory < 1 << 62).then_some(memory),
        })
    }

    /// Reads a control file of `cgroup` in the hierarchy of `controller`.
    pub fn read(&self, controller: &str, cgroup: &str, file: &str) -> io::Result<String> {
        let h = self.hierarchy(controller).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no {controller} hierarchy"),
            )
        })?;
        std::fs::read_to_string(h.join(cgroup.trim_start_matches('/')).join(file))
    }

    /// Removes `cgroup` and whatever empty cgroups are below it, in every hierarchy
    /// (including `unified`, where runc may have made it). Fails with `EBUSY` while
    /// processes remain; a missing cgroup is fine.
    pub fn remove(&self, cgroup: &str) -> io::Result<()> {
        let rel = cgroup.trim_start_matches('/');
        if rel.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "refusing to remove the root cgroup",
            ));
        }
        let mut roots: Vec<PathBuf> = self.hierarchies();
        let unified = self.mount.join("unified");
        if unified.is_dir() {
            roots.push(unified);
        }
        let dirs: Vec<PathBuf> = roots
            .iter()
            .map(|h| h.join(rel))
            .filter(|d| d.is_dir())
            .collect();
        if dirs.is_empty() {
            // Nothing to destroy: no operation.
            return Ok(());
        }
        let started = Instant::now();
        let mut first_err = None;
        for dir in dirs {
            if let Err(e) = remove_tree(&dir) {
                first_err.get_or_insert(io::Error::new(
                    e.kind(),
                    format!("removing {}: {e}", dir.display()),
                ));
            }
        }
        self.metrics
            .observe_cgroup_operation("destroy", started.elapsed());
        first_err.map_or(Ok(()), Err)
    }
}

/// rmdir depth first (cgroup directories hold only control files, which rmdir ignores).
fn remove_tree(dir: &Path) -> io::Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_root_and_ignores_missing() {
        let dir = std::env::temp_dir().join(format!("fk-cg-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("memory")).unwrap();
        std::fs::write(dir.join("memory/cgroup.procs"), "").unwrap();
        let m = CgroupManager::new(&dir);
        assert_eq!(m.hierarchies(), vec![dir.join("memory")]);
        assert!(m.remove("/").is_err());
        assert!(m.remove("/kubepods/podx").is_ok());
        assert!(!m.exists("/kubepods/podx"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn operations_are_timed_by_upstreams_method() {
        let dir = std::env::temp_dir().join(format!("fk-cg-metrics-{}", std::process::id()));
        for h in ["cpu,cpuacct", "memory"] {
            std::fs::create_dir_all(dir.join(h)).unwrap();
            std::fs::write(dir.join(h).join("cgroup.procs"), "").unwrap();
        }
        let metrics = Arc::new(KubeletMetrics::default());
        let m = CgroupManager::new(&dir).with_metrics(metrics.clone());
        let counts =
            || ["create", "update", "destroy"].map(|op| metrics.cgroup_operation_count(op));
        let res = PodCgroupResources {
            cpu_shares: 2,
            cpu_quota: None,
            cpu_period: 100_000,
            memory_limit: Some(1 << 20),
        };
        m.create("/kubepods/podu1", &res).unwrap();
        assert_eq!(counts(), [1, 0, 0], "a missing cgroup is created");
        m.create("/kubepods/podu1", &res).unwrap();
        assert_eq!(counts(), [1, 1, 0], "an existing one is updated");
        let limits = crate::node_allocatable::CgroupLimits {
            cpu_shares: Some(1024),
            ..Default::default()
        };
        m.set_limits("/kubepods", &limits, true).unwrap();
        m.set_limits("/reserved", &limits, true).unwrap();
        assert_eq!(counts(), [2, 2, 0]);
        assert!(m.set_limits("/missing", &limits, false).is_err());
        assert_eq!(counts(), [2, 2, 0], "a missing cgroup is not updated");
        // Outside a cgroupfs the control files are files: rmdir fails, as with
        // processes left in a cgroup, and the attempt is timed all the same.
        assert!(m.remove("/kubepods/podu1").is_err());
        assert_eq!(counts(), [2, 2, 1]);
        m.remove("/kubepods/podx").unwrap();
        assert_eq!(counts(), [2, 2, 1], "nothing to destroy");
        let page = metrics.render(&crate::metrics::KubeletGauges::default());
        assert!(
            page.contains(
                "# HELP kubelet_cgroup_manager_duration_seconds [ALPHA] Duration in seconds for cgroup manager operations. Broken down by method.\n# TYPE kubelet_cgroup_manager_duration_seconds histogram\n"
            ),
            "{page}"
        );
        assert!(
            page.contains(
                "kubelet_cgroup_manager_duration_seconds_count{operation_type=\"create\"} 2\n"
            ),
            "{page}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hugetlb_limits_go_to_the_sizes_the_controller_has() {
        use crate::node_allocatable::CgroupLimits;
        let dir = tempfile::tempdir().unwrap();
        let hugetlb = dir.path().join("hugetlb");
        std::fs::create_dir_all(hugetlb.join("kubepods")).unwrap();
        std::fs::write(hugetlb.join("cgroup.procs"), "").unwrap();
        // The kernel makes a file per page size it supports; here only 2MB.
        std::fs::write(hugetlb.join("kubepods/hugetlb.2MB.limit_in_bytes"), "-1").unwrap();
        let m = CgroupManager::new(dir.path());
        let limits = CgroupLimits {
            hugetlb: vec![("2MB".into(), 1 << 30), ("1GB".into(), 0)],
            ..Default::default()
        };
        m.set_limits("/kubepods", &limits, true).unwrap();
        assert_eq!(
            m.read("hugetlb", "/kubepods", "hugetlb.2MB.limit_in_bytes")
                .unwrap(),
            "1073741824"
        );
        assert!(
            m.read("hugetlb", "/kubepods", "hugetlb.1GB.limit_in_bytes")
                .is_err(),
            "a size the controller lacks is not made up"
        );
    }

    #[test]
    fn sets_the_limits_given_and_creates_only_when_asked() {
        use crate::node_allocatable::CgroupLimits;
        let dir = std::env::temp_dir().join(format!("fk-cg-limits-{}", std::process::id()));
        for h in ["cpu,cpuacct", "memory", "pids"] {
            std::fs::create_dir_all(dir.join(h)).unwrap();
            std::fs::write(dir.join(h).join("cgroup.procs"), "").unwrap();
        }
        let m = CgroupManager::new(&dir);
        let limits = CgroupLimits {
            cpu_shares: Some(2048),
            memory_limit: Some(1 << 30),
            pids_limit: None,
            // No hugetlb hierarchy here: nothing to write, and no error.
            hugetlb: vec![("2MB".into(), 1 << 30)],
        };
        let err = m.set_limits("/system.slice", &limits, false).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!m.exists("/system.slice"));

        m.set_limits("/kubepods", &limits, true).unwrap();
        assert_eq!(m.read("cpu", "/kubepods", "cpu.shares").unwrap(), "2048");
        assert_eq!(
            m.read("memory", "/kubepods", "memory.limit_in_bytes")
                .unwrap(),
            "1073741824"
        );
        assert!(
            m.read("pids", "/kubepods", "pids.max").is_err(),
            "left alone"
        );
        m.set_limits(
            "/kubepods",
            &CgroupLimits {
                pids_limit: Some(1000),
                ..Default::default()
            },
            false,
        )
        .unwrap();
        assert_eq!(m.read("pids", "/kubepods", "pids.max").unwrap(), "1000");
        assert_eq!(m.read("cpu", "/kubepods", "cpu.shares").unwrap(), "2048");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
