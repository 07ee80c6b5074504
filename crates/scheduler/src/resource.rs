//! Resource quantities and pod requests, after `k8s.io/component-helpers/resource`
//! (`PodRequests`) and the scheduler's `framework.Resource`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";

/// Requests assumed for a container that names no cpu request (scoring only).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Requests assumed for a container that names no memory request (scoring only).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A parsed quantity as an exact rational `mantissa * 10^exp10 * 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    mantissa: i128,
    exp10: i32,
    exp2: u32,
}

fn parse(s: &str) -> Option<Parsed> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (neg, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    if num.is_empty() || num == "." {
        return None;
    }
    let (int_part, frac_part) = match num.split_once('.') {
        Some((a, b)) => (a, b),
        None => (num, ""),
    };
    let mut mantissa: i128 = 0;
    for c in int_part.chars().chain(frac_part.chars()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(c.to_digit(10)? as i128)?;
    }
    let mut exp10 = -(frac_part.len() as i32);
    let mut exp2 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let rest = other.strip_prefix(['e', 'E'])?;
            let e: i32 = rest.parse().ok()?;
            exp10 += e;
        }
    }
    Some(Parsed {
        mantissa: if neg { -mantissa } else { mantissa },
        exp10,
        exp2,
    })
}

/// `value * 10^scale`, rounded up (as `Quantity.ScaledValue` does), saturating.
fn scaled(p: Parsed, scale: i32) -> i64 {
    let mut num = p.mantissa;
    let mut den: i128 = 1;
    let e = p.exp10 + scale;
    for _ in 0..e.max(0) {
        num = num.saturating_mul(10);
    }
    for _ in 0..(-e).max(0) {
        den = den.saturating_mul(10);
    }
    num = num.saturating_mul(1i128 << p.exp2.min(100));
    let q = num.div_euclid(den);
    let r = num.rem_euclid(den);
    let v = if r != 0 { q + 1 } else { q };
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// `Quantity.Value()`: the integer value, rounded up; 0 when unparseable.
pub fn quantity_value(q: &Quantity) -> i64 {
    parse(&q.0).map(|p| scaled(p, 0)).unwrap_or(0)
}

/// `Quantity.MilliValue()`: the value in thousandths, rounded up; 0 when unparseable.
pub fn quantity_milli_value(q: &Quantity) -> i64 {
    parse(&q.0).map(|p| scaled(p, 3)).unwrap_or(0)
}

/// `framework.Resource`: amounts of cpu (milli), memory, ephemeral storage, pods and
/// scalar (extended, hugepages) resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pod_number: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// A resource list (`v1.ResourceList`) as a `Resource`.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Resource {
        let mut r = Resource::default();
        for (name, q) in list.into_iter().flatten() {
            r.set(name, q);
        }
        r
    }

    fn set(&mut self, name: &str, q: &Quantity) {
        match name {
            CPU => self.milli_cpu = quantity_milli_value(q),
            MEMORY => self.memory = quantity_value(q),
            EPHEMERAL_STORAGE => self.ephemeral_storage = quantity_value(q),
            PODS => self.allowed_pod_number = quantity_value(q),
            other if is_scalar_resource(other) => {
                self.scalar.insert(other.to_string(), quantity_value(q));
            }
            _ => {}
        }
    }

    /// The amount of one named resource (cpu in milli units).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pod_number,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, o: &Resource) {
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.ephemeral_storage += o.ephemeral_storage;
        self.allowed_pod_number += o.allowed_pod_number;
        for (k, v) in &o.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, o: &Resource) {
        self.milli_cpu -= o.milli_cpu;
        self.memory -= o.memory;
        self.ephemeral_storage -= o.ephemeral_storage;
        self.allowed_pod_number -= o.allowed_pod_number;
        for (k, v) in &o.scalar {
            *self.scalar.entry(k.clone()).or_default() -= v;
        }
    }

    /// Component-wise maximum (`SetMaxResource`).
    pub fn set_max(&mut self, o: &Resource) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(o.allowed_pod_number);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// Extended resources (`example.com/foo`), hugepages and attachable volumes count as
/// scalar resources.
pub fn is_scalar_resource(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/')
            && !name.starts_with("kubernetes.io/")
            && !name.starts_with("requests."))
}

/// Options for [`pod_requests`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PodRequestsOptions {
    /// Substitute the non-zero defaults for containers that request no cpu/memory
    /// (`NonMissingContainerRequests`), as the scoring plugins do.
    pub non_zero_defaults: bool,
}

fn container_requests(c: &Container, opts: PodRequestsOptions) -> Resource {
    let reqs = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let mut r = Resource::from_list(reqs);
    if opts.non_zero_defaults {
        let has = |n: &str| reqs.is_some_and(|m| m.contains_key(n));
        if !has(CPU) {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !has(MEMORY) {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
    }
    r
}

fn is_restartable_init(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// `resource.PodRequests`: the sum of the app containers' requests (plus restartable
/// init "sidecar" containers), the component-wise maximum with every init container's
/// request (each plus the sidecars started before it), then the pod overhead.
pub fn pod_requests(pod: &Pod, opts: PodRequestsOptions) -> Resource {
    let mut reqs = Resource::default();
    let Some(spec) = pod.spec.as_ref() else {
        return reqs;
    };
    for c in &spec.containers {
        reqs.add(&container_requests(c, opts));
    }
    let mut restartable = Resource::default();
    let mut init_max = Resource::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c, opts);
        if is_restartable_init(c) {
            restartable.add(&r);
            reqs.add(&r);
            init_max.set_max(&restartable);
        } else {
            let mut t = r;
            t.add(&restartable);
            init_max.set_max(&t);
        }
    }
    reqs.set_max(&init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&Resource::from_list(Some(overhead)));
    }
    reqs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        let cases = [
            ("1", 1, 1000),
            ("100m", 1, 100),
            ("1.5", 2, 1500),
            ("2Gi", 2 * 1024 * 1024 * 1024, 2 * 1024 * 1024 * 1024 * 1000),
            ("1k", 1000, 1_000_000),
            ("1e3", 1000, 1_000_000),
            ("0.1", 1, 100),
            ("128974848", 128974848, 128974848000),
            ("129M", 129_000_000, 129_000_000_000),
            ("123Mi", 123 * 1024 * 1024, 123 * 1024 * 1024 * 1000),
            ("1n", 1, 1),
        ];
        for (s, v, m) in cases {
            let q = Quantity(s.into());
            assert_eq!(quantity_value(&q), v, "{s}");
            assert_eq!(quantity_milli_value(&q), m, "{s}");
        }
        assert_eq!(quantity_value(&Quantity("bogus".into())), 0);
    }

    #[test]
    fn pod_requests_init_containers_and_overhead() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "overhead": {"cpu": "10m", "memory": "1Mi"},
                "initContainers": [
                    {"name": "i1", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                    {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                    {"name": "i2", "resources": {"requests": {"cpu": "500m", "memory": "3Gi"}}}
                ],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "300m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "200m"}}}
                ]
            }
        }))
        .unwrap();
        let r = pod_requests(&pod, PodRequestsOptions::default());
        // containers 500m + sidecar 100m = 600m; init max(2000m, 500m+100m) = 2000m.
        assert_eq!(r.milli_cpu, 2000 + 10);
        // containers 1Gi; init max(1Gi, 3Gi) = 3Gi.
        assert_eq!(r.memory, 3 * 1024 * 1024 * 1024 + 1024 * 1024);
        let nz = pod_requests(
            &pod,
            PodRequestsOptions {
                non_zero_defaults: true,
            },
        );
        // i2 runs next to the sidecar, whose missing memory request counts as 200Mi.
        assert_eq!(nz.memory, 3 * 1024 * 1024 * 1024 + 201 * 1024 * 1024);
        let empty: Pod =
            serde_json::from_value(json!({"spec": {"containers": [{"name": "a"}]}})).unwrap();
        let e = pod_requests(
            &empty,
            PodRequestsOptions {
                non_zero_defaults: true,
            },
        );
        assert_eq!((e.milli_cpu, e.memory), (100, 200 * 1024 * 1024));
        assert!(pod_requests(&empty, PodRequestsOptions::default()).is_zero());
    }
}
