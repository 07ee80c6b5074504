//! What the pod hierarchy's top cgroups are given (upstream `cm/node_container_manager_linux.go`
//! and `cm/qos_container_manager_linux.go`): `kubepods` is held to the node's allocatable
//! CPU weight, memory and pids (`--enforce-node-allocatable=pods`, the default), the
//! cgroups named by `--system-reserved-cgroup` / `--kube-reserved-cgroup` to what is
//! reserved for them when asked, and the QoS tiers below `kubepods` get their CPU weight:
//! BestEffort the minimum, Burstable the sum of its pods' CPU requests. Without this every
//! tier had the kernel's default weight, so BestEffort pods competed for CPU as hard as
//! all Burstable pods together.
//!
//! Pure decisions only; the kubelet writes them with [`crate::cgroup::CgroupManager`].

use crate::node::Reserved;
use crate::qos::{MIN_SHARES, milli_cpu_to_shares};

/// `--enforce-node-allocatable` values (upstream `kubetypes`).
pub const PODS: &str = "pods";
pub const SYSTEM_RESERVED: &str = "system-reserved";
pub const SYSTEM_RESERVED_COMPRESSIBLE: &str = "system-reserved-compressible";
pub const KUBE_RESERVED: &str = "kube-reserved";
pub const KUBE_RESERVED_COMPRESSIBLE: &str = "kube-reserved-compressible";
pub const NONE: &str = "none";

/// A cgroup that is held to a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedCgroup {
    /// The cgroupfs name, e.g. `/system.slice`; it must exist.
    pub cgroup: String,
    /// The `-compressible` form: only the CPU weight is enforced.
    pub compressible_only: bool,
}

/// Which limits the kubelet enforces (`enforceNodeAllocatable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforcement {
    /// `pods`: `kubepods` gets allocatable (capacity less reservations) instead of capacity.
    pub pods: bool,
    pub system_reserved: Option<ReservedCgroup>,
    pub kube_reserved: Option<ReservedCgroup>,
}

impl Default for Enforcement {
    /// Upstream's default, `pods`.
    fn default() -> Self {
        Enforcement {
            pods: true,
            system_reserved: None,
            kube_reserved: None,
        }
    }
}

impl Enforcement {
    /// Checks the keys as upstream's `ValidateKubeletConfiguration` does and takes the
    /// reserved cgroups' names for the keys that need them. An empty list enforces
    /// nothing, as `none`.
    pub fn parse(
        keys: &[String],
        system_reserved_cgroup: &str,
        kube_reserved_cgroup: &str,
    ) -> Result<Enforcement, String> {
        let mut errors = vec![];
        let has = |k: &str| keys.iter().any(|v| v == k);
        for key in keys {
            match key.as_str() {
                PODS => {}
                SYSTEM_RESERVED | SYSTEM_RESERVED_COMPRESSIBLE if system_reserved_cgroup.is_empty() => {
                    errors.push(format!("invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be specified when {key:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"));
                }
                KUBE_RESERVED | KUBE_RESERVED_COMPRESSIBLE if kube_reserved_cgroup.is_empty() => {
                    errors.push(format!("invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be specified when {key:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"));
                }
                SYSTEM_RESERVED
                | SYSTEM_RESERVED_COMPRESSIBLE
                | KUBE_RESERVED
                | KUBE_RESERVED_COMPRESSIBLE => {}
                NONE if keys.len() > 1 => {
                    errors.push(format!("invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when {NONE:?} is specified"));
                }
                NONE => {}
                other => errors.push(format!(
                    "invalid configuration: option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are {PODS:?}, {SYSTEM_RESERVED:?}, {SYSTEM_RESERVED_COMPRESSIBLE:?}, {KUBE_RESERVED:?}, {KUBE_RESERVED_COMPRESSIBLE:?} or {NONE:?}"
                )),
            }
        }
        for (full, compressible) in [
            (SYSTEM_RESERVED, SYSTEM_RESERVED_COMPRESSIBLE),
            (KUBE_RESERVED, KUBE_RESERVED_COMPRESSIBLE),
        ] {
            if has(full) && has(compressible) {
                errors.push(format!("invalid configuration: both {full:?} and {compressible:?} cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)"));
            }
        }
        if !errors.is_empty() {
            return Err(errors.join(", "));
        }
        let reserved = |full: &str, compressible: &str, cgroup: &str| {
            (has(full) || has(compressible)).then(|| ReservedCgroup {
                cgroup: cgroup.to_owned(),
                compressible_only: has(compressible),
            })
        };
        Ok(Enforcement {
            pods: has(PODS),
            system_reserved: reserved(
                SYSTEM_RESERVED,
                SYSTEM_RESERVED_COMPRESSIBLE,
                system_reserved_cgroup,
            ),
            kube_reserved: reserved(
                KUBE_RESERVED,
                KUBE_RESERVED_COMPRESSIBLE,
                kube_reserved_cgroup,
            ),
        })
    }

    /// The keys as `/configz` shows them (upstream's order of evaluation does not matter).
    pub fn keys(&self) -> Vec<String> {
        let mut keys = vec![];
        if self.pods {
            keys.push(PODS.to_owned());
        }
        for (r, full, compressible) in [
            (
                &self.system_reserved,
                SYSTEM_RESERVED,
                SYSTEM_RESERVED_COMPRESSIBLE,
            ),
            (
                &self.kube_reserved,
                KUBE_RESERVED,
                KUBE_RESERVED_COMPRESSIBLE,
            ),
        ] {
            if let Some(r) = r {
                keys.push(
                    if r.compressible_only {
                        compressible
                    } else {
                        full
                    }
                    .to_owned(),
                );
            }
        }
        if keys.is_empty() {
            keys.push(NONE.to_owned());
        }
        keys
    }
}

/// What a cgroup is held to; `None` leaves the file as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    pub cpu_shares: Option<i64>,
    /// `memory.limit_in_bytes`.
    pub memory_limit: Option<i64>,
    /// `pids.max`.
    pub pids_limit: Option<i64>,
    /// `hugetlb.<size>.limit_in_bytes` by upstream's page size name (`2MB`, `1GB`);
    /// written only where the hugetlb controller is mounted.
    pub hugetlb: Vec<(String, i64)>,
}

/// The machine as `kubepods` sees it (upstream's `internalCapacity`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeCapacity {
    pub cpu_milli: i64,
    pub memory: i64,
    /// The smaller of the kernel's `pid_max` and `threads-max` (upstream `pidlimit`).
    pub max_pids: Option<i64>,
    /// The kernel's huge page pools: page size in bytes -> pages.
    pub hugepages: std::collections::BTreeMap<u64, u64>,
}

/// Upstream's `HugePageUnitSizeFromByteSize`: a page size as the hugetlb controller
/// names it (`2MB` for 2 MiB, `1GB`, `64KB`); `None` past petabytes.
pub fn hugetlb_size_name(bytes: u64) -> Option<String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut size = bytes;
    let mut unit = 0;
    while size >= 1024 {
        size /= 1024;
        unit += 1;
    }
    UNITS.get(unit).map(|u| format!("{size}{u}"))
}

/// `kubepods`: the capacity, less what is reserved for the system and Kubernetes when
/// `pods` is enforced (eviction thresholds are not taken off: they are a signal, not a
/// cgroup limit). The CPU weight is always set, as upstream: the default weight is too
/// low for every pod together.
pub fn pods_cgroup_limits(
    capacity: &NodeCapacity,
    system: &Reserved,
    kube: &Reserved,
    enforcement: &Enforcement,
) -> CgroupLimits {
    let left = |total: i64, system: i64, kube: i64| {
        if enforcement.pods {
            total.saturating_sub(system).saturating_sub(kube).max(0)
        } else {
            total
        }
    };
    CgroupLimits {
        cpu_shares: Some(milli_cpu_to_shares(left(
            capacity.cpu_milli,
            system.cpu_milli,
            kube.cpu_milli,
        ))),
        memory_limit: Some(left(capacity.memory, system.memory, kube.memory)),
        pids_limit: capacity.max_pids.map(|max| left(max, system.pid, kube.pid)),
        // Every pool the kernel has gets a limit: its pages (no reservation takes huge
        // pages here), 0 for a pool without any, as upstream's cgroup manager sets the
        // sizes the node has none of.
        hugetlb: capacity
            .hugepages
            .iter()
            .filter_map(|(size, pages)| {
                let limit = i64::try_from(size.checked_mul(*pages)?).ok()?;
                Some((hugetlb_size_name(*size)?, limit))
            })
            .collect(),
    }
}

/// A reserved cgroup: what its reservation names (all of it, or only the CPU weight for
/// the `-compressible` keys).
pub fn reserved_cgroup_limits(reserved: &Reserved, compressible_only: bool) -> CgroupLimits {
    let set = |v: i64| (v > 0).then_some(v);
    CgroupLimits {
        cpu_shares: set(reserved.cpu_milli).map(milli_cpu_to_shares),
        memory_limit: set(reserved.memory).filter(|_| !compressible_only),
        pids_limit: set(reserved.pid).filter(|_| !compressible_only),
        // No reservation here names huge pages.
        hugetlb: vec![],
    }
}

/// `kubepods/besteffort`: always the minimum CPU weight.
pub fn best_effort_cgroup_limits() -> CgroupLimits {
    CgroupLimits {
        cpu_shares: Some(MIN_SHARES),
        ..Default::default()
    }
}

/// `kubepods/burstable`: the weight of its active pods' CPU requests together.
pub fn burstable_cgroup_limits(cpu_requests_milli: impl IntoIterator<Item = i64>) -> CgroupLimits {
    CgroupLimits {
        cpu_shares: Some(milli_cpu_to_shares(
            cpu_requests_milli
                .into_iter()
                .fold(0i64, i64::saturating_add),
        )),
        ..Default::default()
    }
}

/// The task limit of the machine: the smaller of `pid_max` and `threads-max`.
pub fn read_max_pids() -> Option<i64> {
    ["/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok()?.trim().parse::<i64>().ok())
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_enforcement_keys_as_upstream_validates_them() {
        assert_eq!(
            Enforcement::parse(&keys(&["pods"]), "", ""),
            Ok(Enforcement::default())
        );
        let none = Enforcement::parse(&keys(&["none"]), "", "").unwrap();
        assert!(!none.pods && none.system_reserved.is_none());
        assert_eq!(none.keys(), ["none"]);
        assert_eq!(Enforcement::parse(&[], "", "").unwrap(), none);

        let all = Enforcement::parse(
            &keys(&["pods", "system-reserved", "kube-reserved-compressible"]),
            "/system.slice",
            "/kube.slice",
        )
        .unwrap();
        assert_eq!(
            all.system_reserved,
            Some(ReservedCgroup {
                cgroup: "/system.slice".into(),
                compressible_only: false
            })
        );
        assert_eq!(
            all.kube_reserved,
            Some(ReservedCgroup {
                cgroup: "/kube.slice".into(),
                compressible_only: true
            })
        );
        assert_eq!(
            all.keys(),
            ["pods", "system-reserved", "kube-reserved-compressible"]
        );

        let err = Enforcement::parse(&keys(&["system-reserved"]), "", "").unwrap_err();
        assert!(
            err.contains("systemReservedCgroup (--system-reserved-cgroup) must be specified"),
            "{err}"
        );
        let err = Enforcement::parse(&keys(&["kube-reserved"]), "", "").unwrap_err();
        assert!(
            err.contains("kubeReservedCgroup (--kube-reserved-cgroup)"),
            "{err}"
        );
        let err = Enforcement::parse(&keys(&["none", "pods"]), "", "").unwrap_err();
        assert!(
            err.contains("may not contain additional enforcements"),
            "{err}"
        );
        let err = Enforcement::parse(&keys(&["Pods"]), "", "").unwrap_err();
        assert!(err.contains("option \"Pods\" specified"), "{err}");
        let err = Enforcement::parse(
            &keys(&["system-reserved", "system-reserved-compressible"]),
            "/s",
            "",
        )
        .unwrap_err();
        assert!(err.contains("cannot be specified together"), "{err}");
    }

    #[test]
    fn kubepods_gets_allocatable_when_pods_are_enforced_and_capacity_otherwise() {
        let capacity = NodeCapacity {
            cpu_milli: 2000,
            memory: 8 << 30,
            max_pids: Some(4_194_304),
            ..Default::default()
        };
        let system = Reserved {
            cpu_milli: 500,
            memory: 1 << 30,
            pid: 1000,
            ..Default::default()
        };
        let kube = Reserved {
            cpu_milli: 100,
            memory: 256 << 20,
            ..Default::default()
        };
        assert_eq!(
            pods_cgroup_limits(&capacity, &system, &kube, &Enforcement::default()),
            CgroupLimits {
                cpu_shares: Some(1433),
                memory_limit: Some((8 << 30) - (1 << 30) - (256 << 20)),
                pids_limit: Some(4_193_304),
                hugetlb: vec![],
            }
        );
        let none = Enforcement::parse(&[], "", "").unwrap();
        assert_eq!(
            pods_cgroup_limits(&capacity, &system, &kube, &none),
            CgroupLimits {
                cpu_shares: Some(2048),
                memory_limit: Some(8 << 30),
                pids_limit: Some(4_194_304),
                hugetlb: vec![],
            }
        );
        // More reserved than there is leaves nothing, not a negative limit.
        let greedy = Reserved {
            memory: 16 << 30,
            ..Default::default()
        };
        let l = pods_cgroup_limits(&capacity, &greedy, &kube, &Enforcement::default());
        assert_eq!(l.memory_limit, Some(0));
    }

    #[test]
    fn reserved_cgroups_get_what_their_reservation_names() {
        let r = Reserved {
            cpu_milli: 250,
            memory: 512 << 20,
            ..Default::default()
        };
        assert_eq!(
            reserved_cgroup_limits(&r, false),
            CgroupLimits {
                cpu_shares: Some(256),
                memory_limit: Some(512 << 20),
                pids_limit: None,
                hugetlb: vec![],
            }
        );
        assert_eq!(
            reserved_cgroup_limits(&r, true),
            CgroupLimits {
                cpu_shares: Some(256),
                ..Default::default()
            }
        );
    }

    #[test]
    fn kubepods_holds_every_huge_page_pool_to_its_pages() {
        let capacity = NodeCapacity {
            cpu_milli: 1000,
            memory: 4 << 30,
            hugepages: [(2 << 20, 512), (1 << 30, 0), (64 << 10, 2), (u64::MAX, 2)].into(),
            ..Default::default()
        };
        let l = pods_cgroup_limits(
            &capacity,
            &Reserved::default(),
            &Reserved::default(),
            &Enforcement::default(),
        );
        assert_eq!(
            l.hugetlb,
            [
                ("64KB".to_string(), 128 << 10),
                ("2MB".to_string(), 1 << 30),
                ("1GB".to_string(), 0),
            ],
            "a size whose bytes overflow is left out"
        );
        assert_eq!(hugetlb_size_name(2 << 20).as_deref(), Some("2MB"));
        assert_eq!(hugetlb_size_name(1 << 30).as_deref(), Some("1GB"));
        assert_eq!(hugetlb_size_name(512).as_deref(), Some("512B"));
        assert_eq!(hugetlb_size_name(1 << 50).as_deref(), Some("1PB"));
        assert_eq!(hugetlb_size_name(u64::MAX), None);
    }

    #[test]
    fn qos_tiers_weights() {
        assert_eq!(best_effort_cgroup_limits().cpu_shares, Some(2));
        assert_eq!(burstable_cgroup_limits([]).cpu_shares, Some(2));
        assert_eq!(burstable_cgroup_limits([100, 250]).cpu_shares, Some(358));
    }
}
