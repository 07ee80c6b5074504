//! QoS classes and the resource numbers derived from them (upstream `pkg/apis/core/v1/helper/qos`,
//! `pkg/kubelet/qos/policy.go`, `pkg/kubelet/cm/helpers_linux.go`). Pure functions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{milli_value, value};

/// A pod's QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The API spelling (`status.qosClass`).
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// CPU shares for zero CPU (cgroup v1 minimum), and the maximum.
pub const MIN_SHARES: i64 = 2;
pub const MAX_SHARES: i64 = 262_144;
/// The CFS period the kubelet uses (100 ms, in µs), and the smallest quota it writes.
pub const QUOTA_PERIOD: i64 = 100_000;
pub const MIN_QUOTA_PERIOD: i64 = 1_000;
/// oom_score_adj of Guaranteed and BestEffort containers.
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .chain(spec.map(|s| s.containers.as_slice()).unwrap_or_default())
}

fn compute_resources(list: Option<&BTreeMap<String, Quantity>>) -> BTreeMap<&str, i64> {
    let mut out = BTreeMap::new();
    for (name, q) in list.into_iter().flatten() {
        if name == "cpu" || name == "memory" {
            let v = milli_value(q).unwrap_or(0);
            if v != 0 {
                out.insert(name.as_str(), v);
            }
        }
    }
    out
}

/// The pod's QoS class, as upstream's `GetPodQOS` (compute resources cpu and memory only;
/// init containers count).
pub fn pod_qos(pod: &Pod) -> QosClass {
    let mut requests: BTreeMap<&str, i64> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i64> = BTreeMap::new();
    let mut guaranteed = true;
    for c in all_containers(pod) {
        let res = c.resources.as_ref();
        for (name, v) in compute_resources(res.and_then(|r| r.requests.as_ref())) {
            *requests.entry(name).or_default() += v;
        }
        let lim = compute_resources(res.and_then(|r| r.limits.as_ref()));
        if !(lim.contains_key("cpu") && lim.contains_key("memory")) {
            guaranteed = false;
        }
        for (name, v) in lim {
            *limits.entry(name).or_default() += v;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed {
        for (name, req) in &requests {
            if limits.get(name) != Some(req) {
                guaranteed = false;
                break;
            }
        }
    }
    if guaranteed && requests.len() == limits.len() {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The pod's QoS class as reported, or computed when status does not carry it yet.
pub fn qos_of(pod: &Pod) -> QosClass {
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => QosClass::Guaranteed,
        Some("Burstable") => QosClass::Burstable,
        Some("BestEffort") => QosClass::BestEffort,
        _ => pod_qos(pod),
    }
}

/// cgroup v1 `cpu.shares` for a CPU request in millicores (`MilliCPUToShares`).
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// CFS quota (µs per `period`) for a CPU limit in millicores; 0 means no limit
/// (`milliCPUToQuota`).
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli.saturating_mul(period) / 1000).max(MIN_QUOTA_PERIOD)
}

fn resource<'a>(c: &'a Container, limits: bool, name: &str) -> Option<&'a Quantity> {
    let r = c.resources.as_ref()?;
    if limits {
        r.limits.as_ref()
    } else {
        r.requests.as_ref()
    }?
    .get(name)
}

/// A container's oom_score_adj (`GetContainerOOMScoreAdjust`): -997 for Guaranteed, 1000 for
/// BestEffort, and for Burstable `1000 - 1000*memoryRequest/capacity` kept within [3, 999].
pub fn container_oom_score_adj(qos: QosClass, c: &Container, memory_capacity: i64) -> i64 {
    match qos {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            let request = resource(c, false, "memory").and_then(value).unwrap_or(0);
            let adj = if memory_capacity > 0 {
                1000 - (1000i128 * i128::from(request) / i128::from(memory_capacity)) as i64
            } else {
                1000
            };
            if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
                1000 + GUARANTEED_OOM_SCORE_ADJ
            } else if adj == BEST_EFFORT_OOM_SCORE_ADJ {
                adj - 1
            } else {
                adj
            }
        }
    }
}

/// The CRI resources of one container: shares from the request (or the limit when only it
/// is set), CFS quota from the limit over a 100 ms period, memory limit, oom_score_adj.
pub fn container_resources(
    qos: QosClass,
    c: &Container,
    memory_capacity: i64,
) -> k8s_cri::v1::LinuxContainerResources {
    let cpu_request = resource(c, false, "cpu").and_then(milli_value).unwrap_or(0);
    let cpu_limit = resource(c, true, "cpu").and_then(milli_value).unwrap_or(0);
    let memory_limit = resource(c, true, "memory").and_then(value).unwrap_or(0);
    let shares = if cpu_request == 0 && cpu_limit != 0 {
        milli_cpu_to_shares(cpu_limit)
    } else {
        milli_cpu_to_shares(cpu_request)
    };
    k8s_cri::v1::LinuxContainerResources {
        cpu_period: QUOTA_PERIOD,
        cpu_quota: milli_cpu_to_quota(cpu_limit, QUOTA_PERIOD),
        cpu_shares: shares,
        memory_limit_in_bytes: memory_limit.max(0),
        oom_score_adj: container_oom_score_adj(qos, c, memory_capacity),
        ..Default::default()
    }
}

/// What the pod-level cgroup gets (`ResourceConfigForPod`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroupResources {
    pub cpu_shares: i64,
    /// `None`: no CFS quota (not every container has a CPU limit).
    pub cpu_quota: Option<i64>,
    pub cpu_period: i64,
    /// `None`: unlimited (not every container has a memory limit).
    pub memory_limit: Option<i64>,
}

/// A pod's total of one resource's requests (`limits` false) or limits: the sum over the
/// regular containers, or the largest init container's when that is more (init
/// containers run one at a time). The flag says whether every container declares it.
fn pod_total(pod: &Pod, limits: bool, name: &str, f: fn(&Quantity) -> Option<i64>) -> (i64, bool) {
    let spec = pod.spec.as_ref();
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let inits = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let mut total = 0i64;
    let mut all = true;
    for c in containers {
        match resource(c, limits, name).and_then(f) {
            Some(v) if v > 0 => total = total.saturating_add(v),
            _ => all = false,
        }
    }
    for c in inits {
        match resource(c, limits, name).and_then(f) {
            Some(v) if v > 0 => total = total.max(v),
            _ => all = false,
        }
    }
    (total, all)
}

/// The pod's CPU request in millicores (upstream `resource.PodRequests(pod)[cpu]`).
pub fn pod_cpu_request_milli(pod: &Pod) -> i64 {
    pod_total(pod, false, "cpu", milli_value).0
}

/// What the pod-level cgroup gets from its containers' requests and limits.
pub fn pod_cgroup_resources(pod: &Pod) -> PodCgroupResources {
    let cpu_requests = pod_cpu_request_milli(pod);
    let (cpu_limits, cpu_limits_declared) = pod_total(pod, true, "cpu", milli_value);
    let (memory_limits, memory_limits_declared) = pod_total(pod, true, "memory", value);
    match pod_qos(pod) {
        QosClass::BestEffort => PodCgroupResources {
            cpu_shares: MIN_SHARES,
            cpu_quota: None,
            cpu_period: QUOTA_PERIOD,
            memory_limit: None,
        },
        _ => PodCgroupResources {
            cpu_shares: milli_cpu_to_shares(cpu_requests),
            cpu_quota: cpu_limits_declared.then(|| milli_cpu_to_quota(cpu_limits, QUOTA_PERIOD)),
            cpu_period: QUOTA_PERIOD,
            memory_limit: memory_limits_declared.then_some(memory_limits),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, inits: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: (!inits.is_empty()).then_some(inits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn qos_classes() {
        let g = || {
            container(
                &[("cpu", "1"), ("memory", "1Gi")],
                &[("cpu", "1"), ("memory", "1Gi")],
            )
        };
        let cases: Vec<(&str, Pod, QosClass)> = vec![
            (
                "no resources",
                pod(vec![container(&[], &[])], vec![]),
                QosClass::BestEffort,
            ),
            (
                "zero requests",
                pod(vec![container(&[("cpu", "0")], &[])], vec![]),
                QosClass::BestEffort,
            ),
            (
                "other resources only",
                pod(vec![container(&[("nvidia.com/gpu", "1")], &[])], vec![]),
                QosClass::BestEffort,
            ),
            (
                "equal limits",
                pod(vec![g(), g()], vec![]),
                QosClass::Guaranteed,
            ),
            (
                "limits only",
                pod(
                    vec![container(&[], &[("cpu", "1"), ("memory", "1Gi")])],
                    vec![],
                ),
                QosClass::Burstable,
            ),
            (
                "request below limit",
                pod(
                    vec![container(
                        &[("cpu", "500m"), ("memory", "1Gi")],
                        &[("cpu", "1"), ("memory", "1Gi")],
                    )],
                    vec![],
                ),
                QosClass::Burstable,
            ),
            (
                "cpu limit only",
                pod(vec![container(&[("cpu", "1")], &[("cpu", "1")])], vec![]),
                QosClass::Burstable,
            ),
            (
                "one best-effort container",
                pod(vec![g(), container(&[], &[])], vec![]),
                QosClass::Burstable,
            ),
            (
                "init container without limits",
                pod(vec![g()], vec![container(&[], &[])]),
                QosClass::Burstable,
            ),
            (
                "same value, other spelling",
                pod(
                    vec![container(
                        &[("cpu", "1000m"), ("memory", "1024Mi")],
                        &[("cpu", "1"), ("memory", "1Gi")],
                    )],
                    vec![],
                ),
                QosClass::Guaranteed,
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(pod_qos(&p), want, "{name}");
        }
    }

    #[test]
    fn shares_and_quota() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_quota(0, QUOTA_PERIOD), 0);
        assert_eq!(milli_cpu_to_quota(5, QUOTA_PERIOD), 1000);
        assert_eq!(milli_cpu_to_quota(250, QUOTA_PERIOD), 25_000);
        assert_eq!(milli_cpu_to_quota(2000, QUOTA_PERIOD), 200_000);
    }

    #[test]
    fn oom_score_adj() {
        let gi = 1i64 << 30;
        let c = container(&[("memory", "1Gi")], &[]);
        assert_eq!(
            container_oom_score_adj(QosClass::Guaranteed, &c, 4 * gi),
            -997
        );
        assert_eq!(
            container_oom_score_adj(QosClass::BestEffort, &c, 4 * gi),
            1000
        );
        assert_eq!(
            container_oom_score_adj(QosClass::Burstable, &c, 4 * gi),
            750
        );
        assert_eq!(container_oom_score_adj(QosClass::Burstable, &c, gi), 3);
        let none = container(&[("cpu", "1")], &[]);
        assert_eq!(
            container_oom_score_adj(QosClass::Burstable, &none, 4 * gi),
            999
        );
        assert_eq!(container_oom_score_adj(QosClass::Burstable, &c, 0), 999);
    }

    #[test]
    fn container_cri_resources() {
        let c = container(
            &[("cpu", "250m"), ("memory", "64Mi")],
            &[("cpu", "500m"), ("memory", "128Mi")],
        );
        let r = container_resources(QosClass::Burstable, &c, 1 << 30);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (256, 50_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 128 << 20);
        assert_eq!(r.oom_score_adj, 938);
        let limit_only = container(&[], &[("cpu", "2")]);
        let r = container_resources(QosClass::Burstable, &limit_only, 1 << 30);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (2048, 200_000, 0)
        );
        let r = container_resources(QosClass::BestEffort, &container(&[], &[]), 1 << 30);
        assert_eq!((r.cpu_shares, r.cpu_quota, r.oom_score_adj), (2, 0, 1000));
    }

    #[test]
    fn pod_cgroup() {
        let g = container(
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1"), ("memory", "1Gi")],
        );
        let r = pod_cgroup_resources(&pod(vec![g.clone(), g.clone()], vec![]));
        assert_eq!(
            r,
            PodCgroupResources {
                cpu_shares: 2048,
                cpu_quota: Some(200_000),
                cpu_period: QUOTA_PERIOD,
                memory_limit: Some(2 << 30)
            }
        );
        let b = container(&[("cpu", "100m")], &[]);
        let r = pod_cgroup_resources(&pod(vec![g.clone(), b], vec![]));
        assert_eq!(
            r,
            PodCgroupResources {
                cpu_shares: 1126,
                cpu_quota: None,
                cpu_period: QUOTA_PERIOD,
                memory_limit: None
            }
        );
        let big_init = container(
            &[("cpu", "3"), ("memory", "3Gi")],
            &[("cpu", "3"), ("memory", "3Gi")],
        );
        let r = pod_cgroup_resources(&pod(vec![g], vec![big_init]));
        assert_eq!(r.memory_limit, Some(3 << 30));
        assert_eq!(r.cpu_shares, 3072);
        let r = pod_cgroup_resources(&pod(vec![container(&[], &[])], vec![]));
        assert_eq!(
            r,
            PodCgroupResources {
                cpu_shares: 2,
                cpu_quota: None,
                cpu_period: QUOTA_PERIOD,
                memory_limit: None
            }
        );
    }
}
