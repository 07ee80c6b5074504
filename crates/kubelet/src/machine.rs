//! Machine facts from /proc, /sys, /etc and statvfs (upstream gets them from cAdvisor).

use std::net::IpAddr;
use std::path::Path;

use crate::node::{MachineInfo, mem_total, os_image};

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Size in bytes of the filesystem holding `dir`.
pub fn fs_capacity(dir: &Path) -> std::io::Result<i64> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok((st.blocks() as i64).saturating_mul(st.fragment_size() as i64))
}

/// Reads the machine's CPUs, memory, the root dir's filesystem size and identity files.
pub fn read_machine_info(root_dir: &Path) -> std::io::Result<MachineInfo> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    Ok(MachineInfo {
        num_cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as i64),
        memory_bytes: mem_total(&meminfo).unwrap_or(0),
        root_fs_bytes: fs_capacity(root_dir)?,
        machine_id: read_trim("/etc/machine-id"),
        system_uuid: read_trim("/sys/class/dmi/id/product_uuid"),
        boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
        kernel_version: read_trim("/proc/sys/kernel/osrelease"),
        os_image: os_image(&std::fs::read_to_string("/etc/os-release").unwrap_or_default()),
        hugepages: read_hugepages(Path::new(HUGEPAGES_DIR)),
    })
}

/// Where the kernel lists its huge page pools.
pub const HUGEPAGES_DIR: &str = "/sys/kernel/mm/hugepages";

/// The page size in bytes of a pool directory named `hugepages-<n>kB`.
pub fn hugepage_pool_size(dir_name: &str) -> Option<u64> {
    dir_name
        .strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse::<u64>()
        .ok()?
        .checked_mul(1024)
}

/// The huge page pools under `dir` (page size in bytes -> `nr_hugepages`); a pool whose
/// count cannot be read has none, as cAdvisor reads it.
pub fn read_hugepages(dir: &Path) -> std::collections::BTreeMap<u64, u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Default::default();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let size = hugepage_pool_size(e.file_name().to_str()?)?;
            let pages = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            Some((size, pages))
        })
        .collect()
}

/// The machine's hostname, lowercased (upstream `nodeutil.GetHostname`).
pub fn hostname() -> String {
    let h = read_trim("/proc/sys/kernel/hostname");
    if h.is_empty() {
        "localhost".into()
    } else {
        h.to_lowercase()
    }
}

/// The source address of the default route (a UDP "connect" sends no packet). Falls back
/// to 127.0.0.1 when there is no route.
pub fn default_node_ip() -> IpAddr {
    let probe = || -> std::io::Result<IpAddr> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect("192.0.2.1:9")?;
        Ok(s.local_addr()?.ip())
    };
    probe().unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugepage_pools_from_their_directories() {
        assert_eq!(hugepage_pool_size("hugepages-2048kB"), Some(2 << 20));
        assert_eq!(hugepage_pool_size("hugepages-1048576kB"), Some(1 << 30));
        for bad in [
            "hugepages-2048",
            "hugepages-kB",
            "hugepages--1kB",
            "x-2048kB",
            "hugepages-99999999999999999999kB",
        ] {
            assert_eq!(hugepage_pool_size(bad), None, "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        for (pool, pages) in [
            ("hugepages-2048kB", Some("512\n")),
            ("hugepages-1048576kB", None),
            ("other", Some("3")),
        ] {
            std::fs::create_dir(dir.path().join(pool)).unwrap();
            if let Some(pages) = pages {
                std::fs::write(dir.path().join(pool).join("nr_hugepages"), pages).unwrap();
            }
        }
        assert_eq!(
            read_hugepages(dir.path()),
            [(2 << 20, 512), (1 << 30, 0)].into()
        );
        assert!(read_hugepages(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn reads_this_machine() {
        let m = read_machine_info(Path::new("/")).unwrap();
        assert!(m.num_cpus >= 1);
        assert!(m.memory_bytes > 64 << 20, "{m:?}");
        assert!(m.root_fs_bytes > 0);
        assert!(!m.kernel_version.is_empty());
        assert!(!hostname().is_empty());
        assert!(fs_capacity(Path::new("/definitely/not/here")).is_err());
    }
}
