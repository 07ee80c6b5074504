//! In-place pod resize (InPlacePodVerticalScaling, beta and on by default in 1.33), the
//! pure part: what a pod's containers are allocated, whether a resize fits the node
//! (upstream `canResizePod`), and whether a running container's cgroup matches its
//! allocation (upstream `computePodResizeAction`). The runtime manager keeps the
//! allocations (in [`crate::allocation`]), actuates them through CRI
//! `UpdateContainerResources`, and reports them in `status.containerStatuses[*].resources`
//! and the `PodResizePending` and `PodResizeInProgress` conditions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::container::is_sidecar;
use crate::qos::PodCgroupResources;
use crate::quantity::{milli_value, value};
use crate::sandbox::spec;

/// The resources each resizable container (regular containers and sidecars) is
/// allocated, by name.
pub type Allocation = BTreeMap<String, ResourceRequirements>;

/// The condition a resize that cannot be actuated yet sets.
pub const RESIZE_PENDING: &str = "PodResizePending";
/// The condition a resize that is being (or failed to be) actuated sets.
pub const RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// The resizable containers of `pod`: its regular containers and its sidecars.
fn resizable(pod: &Pod) -> impl Iterator<Item = &Container> {
    let s = spec(pod);
    s.containers
        .iter()
        .chain(s.init_containers.iter().flatten().filter(|c| is_sidecar(c)))
}

/// What the spec asks for.
pub fn spec_allocation(pod: &Pod) -> Allocation {
    resizable(pod)
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// `pod` with its resizable containers' resources as `alloc` has them.
pub fn with_allocation(pod: &Pod, alloc: &Allocation) -> Pod {
    let mut p = pod.clone();
    if let Some(s) = p.spec.as_mut() {
        let inits = s
            .init_containers
            .iter_mut()
            .flatten()
            .filter(|c| is_sidecar(c));
        for c in s.containers.iter_mut().chain(inits) {
            if let Some(r) = alloc.get(&c.name) {
                c.resources = Some(r.clone());
            }
        }
    }
    p
}

fn request(c: &Container, name: &str, f: fn(&Quantity) -> Option<i64>) -> i64 {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(name))
        .and_then(f)
        .unwrap_or(0)
}

/// The pod's effective cpu (millicores) and memory (bytes) requests (upstream
/// `resource.PodRequests`): the regular containers and sidecars together, or an init
/// container with the sidecars started before it, whichever is more; plus the overhead.
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    let s = spec(pod);
    let mut out = [0i64; 2];
    for (i, (name, f)) in [
        ("cpu", milli_value as fn(&Quantity) -> Option<i64>),
        ("memory", value),
    ]
    .into_iter()
    .enumerate()
    {
        let mut sidecars = 0i64;
        let mut init_peak = 0i64;
        for c in s.init_containers.iter().flatten() {
            if is_sidecar(c) {
                sidecars += request(c, name, f);
                init_peak = init_peak.max(sidecars);
            } else {
                init_peak = init_peak.max(sidecars + request(c, name, f));
            }
        }
        let regular: i64 = s.containers.iter().map(|c| request(c, name, f)).sum();
        let overhead = s
            .overhead
            .as_ref()
            .and_then(|o| o.get(name))
            .and_then(f)
            .unwrap_or(0);
        out[i] = (regular + sidecars).max(init_peak) + overhead;
    }
    (out[0], out[1])
}

/// Whether a resize may be actuated now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Admit,
    /// `PodResizePending` with this reason (`Infeasible` or `Deferred`) and message.
    Pending {
        reason: &'static str,
        message: String,
    },
}

/// Upstream `canResizePod`: `wanted` (the pod with the resources its spec asks for) must
/// fit the node's allocatable cpu and memory (else `Infeasible`), and next to `used`
/// (the other pods' allocated requests; else `Deferred`, retried on later syncs).
pub fn decide(wanted: &Pod, used: (i64, i64), allocatable: (i64, i64)) -> Decision {
    let (cpu, memory) = pod_requests(wanted);
    if cpu > allocatable.0 || memory > allocatable.1 {
        let what = if memory > allocatable.1 {
            format!("memory, requested: {memory}, capacity: {}", allocatable.1)
        } else {
            format!("cpu, requested: {cpu}, capacity: {}", allocatable.0)
        };
        return Decision::Pending {
            reason: "Infeasible",
            message: format!("Node didn't have enough capacity: {what}"),
        };
    }
    for (name, requested, used, capacity) in [
        ("cpu", cpu, used.0, allocatable.0),
        ("memory", memory, used.1, allocatable.1),
    ] {
        if requested + used > capacity {
            return Decision::Pending {
                reason: "Deferred",
                message: format!(
                    "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            };
        }
    }
    Decision::Admit
}

const PAGE_SIZE: i64 = 4096;

/// The cgroup values of a container that a resize changes (`None`: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupValues {
    pub cpu_shares: i64,
    pub cpu_quota: Option<i64>,
    pub memory_limit: Option<i64>,
}

impl CgroupValues {
    /// Whether a cgroup with these values already has `sizes` (the CFS period is not
    /// read back: the kubelet writes the same one to every pod).
    pub fn holds(&self, sizes: &PodCgroupResources) -> bool {
        self.cpu_shares == sizes.cpu_shares
            && self.cpu_quota == sizes.cpu_quota
            && self.memory_limit == sizes.memory_limit
    }

    /// The values CRI resources ask for (0 quota or memory limit: unlimited).
    pub fn of(r: &k8s_cri::v1::LinuxContainerResources) -> Self {
        CgroupValues {
            cpu_shares: r.cpu_shares,
            cpu_quota: (r.cpu_quota > 0).then_some(r.cpu_quota),
            // The kernel keeps a memory limit in whole pages.
            memory_limit: (r.memory_limit_in_bytes > 0)
                .then_some(r.memory_limit_in_bytes / PAGE_SIZE * PAGE_SIZE),
        }
    }
}

/// The pod cgroup's sizes for the first step of a sync: `new`, but never below what the
/// cgroup has (`current`) while containers may still have to shrink first (cgroup v1
/// refuses a pod CFS quota below a container's); the sync narrows to `new` after.
pub fn widened(new: &PodCgroupResources, current: &CgroupValues) -> PodCgroupResources {
    let wider = |n: Option<i64>, c: Option<i64>| match (n, c) {
        (Some(n), Some(c)) => Some(n.max(c)),
        _ => None,
    };
    PodCgroupResources {
        cpu_quota: wider(new.cpu_quota, current.cpu_quota),
        memory_limit: wider(new.memory_limit, current.memory_limit),
        ..new.clone()
    }
}

/// The resources whose change a resize asks for, as `resizePolicy` names them: `cpu`
/// when the shares or the quota differ, `memory` when the limit does.
pub fn changed_resources(actual: &CgroupValues, wanted: &CgroupValues) -> Vec<&'static str> {
    let mut out = vec![];
    if actual.cpu_shares != wanted.cpu_shares || actual.cpu_quota != wanted.cpu_quota {
        out.push("cpu");
    }
    if actual.memory_limit != wanted.memory_limit {
        out.push("memory");
    }
    out
}

/// Whether `c` restarts for a change of `resource` (its `resizePolicy`; `NotRequired` by
/// default).
pub fn restarts_for(c: &Container, resource: &str) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}))
            .unwrap()
    }

    fn res(cpu: &str, memory: &str) -> serde_json::Value {
        json!({"requests": {"cpu": cpu, "memory": memory}})
    }

    #[test]
    fn a_cgroup_holds_the_sizes_it_reads_back() {
        let sizes = PodCgroupResources {
            cpu_shares: 307,
            cpu_quota: Some(30_000),
            cpu_period: 100_000,
            memory_limit: None,
        };
        let read = CgroupValues {
            cpu_shares: 307,
            cpu_quota: Some(30_000),
            memory_limit: None,
        };
        assert!(read.holds(&sizes));
        for other in [
            CgroupValues {
                cpu_shares: 2,
                ..read
            },
            CgroupValues {
                cpu_quota: None,
                ..read
            },
            CgroupValues {
                memory_limit: Some(1 << 26),
                ..read
            },
        ] {
            assert!(!other.holds(&sizes), "{other:?}");
        }
    }

    #[test]
    fn requests_count_sidecars_with_the_containers_and_init_peaks() {
        let p = pod(json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": res("100m", "10Mi")},
                {"name": "big-init", "resources": res("2", "1Mi")}],
            "containers": [{"name": "a", "resources": res("300m", "20Mi")},
                           {"name": "b", "resources": res("200m", "30Mi")}],
            "overhead": {"cpu": "10m"}}));
        // The init container with the sidecar before it: 2100m beats 600m.
        assert_eq!(pod_requests(&p), (2110, 60 << 20));
        let alloc = spec_allocation(&p);
        assert_eq!(alloc.keys().collect::<Vec<_>>(), ["a", "b", "side"]);
    }

    #[test]
    fn a_resize_fits_or_waits() {
        let p = pod(json!({"containers": [{"name": "a", "resources": res("1500m", "1Gi")}]}));
        assert_eq!(decide(&p, (0, 0), (2000, 4 << 30)), Decision::Admit);
        assert_eq!(
            decide(&p, (600, 0), (2000, 4 << 30)),
            Decision::Pending {
                reason: "Deferred",
                message: "Node didn't have enough resource: cpu, requested: 1500, used: 600, capacity: 2000".into()
            }
        );
        assert_eq!(
            decide(&p, (0, 0), (1000, 4 << 30)),
            Decision::Pending {
                reason: "Infeasible",
                message: "Node didn't have enough capacity: cpu, requested: 1500, capacity: 1000"
                    .into()
            }
        );
        assert_eq!(
            decide(&p, (0, 0), (1000, 1 << 20)),
            Decision::Pending {
                reason: "Infeasible",
                message: format!(
                    "Node didn't have enough capacity: memory, requested: {}, capacity: {}",
                    1u64 << 30,
                    1 << 20
                )
            }
        );
    }

    #[test]
    fn allocations_replace_the_spec_resources() {
        let p = pod(json!({"containers": [{"name": "a", "resources": res("1", "1Gi")}]}));
        let mut alloc = spec_allocation(&p);
        alloc.insert(
            "a".into(),
            serde_json::from_value(res("500m", "1Gi")).unwrap(),
        );
        let q = with_allocation(&p, &alloc);
        assert_eq!(pod_requests(&q), (500, 1 << 30));
    }

    #[test]
    fn changes_and_restart_policies() {
        let base = CgroupValues {
            cpu_shares: 102,
            cpu_quota: Some(20000),
            memory_limit: Some(1 << 27),
        };
        let more_cpu = CgroupValues {
            cpu_quota: Some(30000),
            ..base
        };
        assert_eq!(changed_resources(&base, &base), Vec::<&str>::new());
        assert_eq!(changed_resources(&base, &more_cpu), ["cpu"]);
        let less_memory = CgroupValues {
            memory_limit: Some(1 << 26),
            ..base
        };
        assert_eq!(changed_resources(&base, &less_memory), ["memory"]);
        let c: Container = serde_json::from_value(json!({"name": "a", "resizePolicy": [
            {"resourceName": "memory", "restartPolicy": "RestartContainer"}]}))
        .unwrap();
        assert!(restarts_for(&c, "memory"));
        assert!(!restarts_for(&c, "cpu"));
        let cri = k8s_cri::v1::LinuxContainerResources {
            cpu_shares: 2,
            cpu_quota: 0,
            memory_limit_in_bytes: 0,
            ..Default::default()
        };
        assert_eq!(
            CgroupValues::of(&cri),
            CgroupValues {
                cpu_shares: 2,
                cpu_quota: None,
                memory_limit: None
            }
        );
    }
}
