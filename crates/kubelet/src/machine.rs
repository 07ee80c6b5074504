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
    })
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
