//! ClusterIP and NodePort allocation for Services.
//!
//! One allocator per registry, behind a mutex: an address or port is handed out at
//! most once by this process, whatever the concurrency. It is rebuilt from the stored
//! Services at start. Each cluster IP and node port is also claimed in storage
//! (`crate::service_claims`), so apiservers sharing an etcd never hand out one twice.
//!
//! As upstream's allocators, a value is picked at random, above the range's static
//! band first ([`static_band`]): kube-dns's `10.96.0.10` and other addresses or node
//! ports that manifests ask for stay free while the rest of the range has room.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use parking_lot::Mutex;
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    #[error("invalid service cluster IP range {0:?} (want an IPv4 CIDR like 10.96.0.0/12)")]
    Cidr(String),
    #[error("invalid service node port range {0:?} (want FROM-TO, e.g. 30000-32767)")]
    Ports(String),
}

/// An IPv4 CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub base: u32,
    pub bits: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, RangeError> {
        let err = || RangeError::Cidr(s.to_string());
        let (ip, bits) = s.split_once('/').ok_or_else(err)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| err())?;
        let bits: u8 = bits.parse().map_err(|_| err())?;
        if !(8..=30).contains(&bits) {
            return Err(err());
        }
        let mask = u32::MAX << (32 - bits);
        Ok(Cidr {
            base: u32::from(ip) & mask,
            bits,
        })
    }

    /// The CIDR of an IPv4 ServiceCIDR's `spec.cidrs` entry; `None` for IPv6 or a
    /// malformed one (validation keeps those out of the store).
    pub fn parse_any(s: &str) -> Option<Cidr> {
        let (ip, bits) = s.split_once('/')?;
        let ip: Ipv4Addr = ip.parse().ok()?;
        let bits: u8 = bits.parse().ok().filter(|b| *b <= 32)?;
        let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
        Some(Cidr {
            base: u32::from(ip) & mask,
            bits,
        })
    }

    fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.bits))
    }

    /// The broadcast address (the last one), as a number.
    fn last(&self) -> u32 {
        (u64::from(self.base) + self.size() - 1) as u32
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip >= self.base && u64::from(ip - self.base) < self.size()
    }

    /// The first usable address (the `kubernetes` Service's).
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.bits)
    }
}

pub fn parse_port_range(s: &str) -> Result<(u16, u16), RangeError> {
    let err = || RangeError::Ports(s.to_string());
    let (a, b) = s.split_once('-').ok_or_else(err)?;
    let a: u16 = a.trim().parse().map_err(|_| err())?;
    let b: u16 = b.trim().parse().map_err(|_| err())?;
    if a > b {
        return Err(err());
    }
    Ok((a, b))
}

#[derive(Debug)]
struct State {
    /// Cluster IPs known to be held (as `u32`): by this process's Services, or by
    /// IPAddress objects of other writers (learnt from the store).
    ips: HashSet<u32>,
    ports: HashSet<u16>,
}

/// Upstream's static band (KEP-3070 for cluster IPs, KEP-3668 for node ports): the
/// first `min(max(16, size / step), max)` values of a range are left to Services that
/// ask for a value (kube-dns's `10.96.0.10`), and handed out dynamically only once the
/// rest of the range is full. Ranges of 16 values or fewer have none.
fn static_band(size: u64, step: u64, max: u64) -> u64 {
    const MIN: u64 = 16;
    if size <= MIN {
        0
    } else {
        (size / step).clamp(MIN, max)
    }
}

/// A value of `lo..hi` that is not `taken`, as upstream's allocators pick one: from
/// a random place in the range above the static band `lo..lo + band`, wrapping
/// around, then likewise in the band.
fn pick_free(lo: u64, hi: u64, band: u64, taken: impl Fn(u64) -> bool) -> Option<u64> {
    let scan = |lo: u64, hi: u64| {
        let n = hi.checked_sub(lo).filter(|n| *n > 0)?;
        let start = random_below(n);
        (0..n).map(|i| lo + (start + i) % n).find(|v| !taken(*v))
    };
    let split = lo.saturating_add(band).min(hi);
    scan(split, hi).or_else(|| scan(lo, split))
}

/// A uniformly random value below `n` (> 0), from a v4 UUID's random bytes (the
/// registry's one source of randomness).
fn random_below(n: u64) -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    // The modulo bias over 2^64 is far below anything a range of addresses shows.
    u64::from_le_bytes(word) % n
}

/// Reserves cluster IPs and node ports in memory, so that two requests of one
/// apiserver never get the same one. Cluster IPs are also recorded as IPAddress
/// objects (`crate::service_claims`), which is what makes them unique across apiservers;
/// this set is the fast first check.
#[derive(Debug)]
pub struct ServiceAllocator {
    /// `--service-cluster-ip-range`: the default ServiceCIDR's range, searched first.
    cidr: Cidr,
    ports: (u16, u16),
    state: Mutex<State>,
}

fn is_headless_or_external(spec: &Value) -> bool {
    spec.get("type").and_then(Value::as_str) == Some("ExternalName")
        || spec.get("clusterIP").and_then(Value::as_str) == Some("None")
}

/// Whether the Service's type may hold node ports (upstream's `needsNodePort`).
fn wants_node_ports(spec: &Value) -> bool {
    matches!(
        spec.get("type").and_then(Value::as_str),
        Some("NodePort") | Some("LoadBalancer")
    )
}

/// Whether ports left without a node port get one (upstream's
/// `shouldAllocateNodePorts`): a LoadBalancer with `allocateLoadBalancerNodePorts:
/// false` only keeps the node ports it asks for.
fn allocates_node_ports(spec: &Value) -> bool {
    match spec.get("type").and_then(Value::as_str) {
        Some("NodePort") => true,
        Some("LoadBalancer") => spec.get("allocateLoadBalancerNodePorts") != Some(&json!(false)),
        _ => false,
    }
}

/// Whether the Service needs a `healthCheckNodePort` (upstream's `needsHCNodePort`):
/// a LoadBalancer that keeps external traffic on nodes with local endpoints, which
/// the load balancer tells apart by that port.
fn needs_health_check_node_port(spec: &Value) -> bool {
    spec.get("type").and_then(Value::as_str) == Some("LoadBalancer")
        && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
}

fn health_check_node_port(spec: &Value) -> u64 {
    spec.get("healthCheckNodePort")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The IPv4 cluster IP a Service holds, if any.
pub fn cluster_ip(svc: &Value) -> Option<Ipv4Addr> {
    svc["spec"]
        .get("clusterIP")
        .and_then(Value::as_str)
        .and_then(|ip| ip.parse().ok())
}

/// The cluster IP a request names (`spec.clusterIP`, else `spec.clusterIPs[0]`), if
/// it names one rather than leaving it to the allocator.
pub fn requested_cluster_ip(svc: &Value) -> Option<&str> {
    let spec = &svc["spec"];
    spec.get("clusterIP")
        .and_then(Value::as_str)
        .or_else(|| spec["clusterIPs"].get(0).and_then(Value::as_str))
        .filter(|s| !s.is_empty() && *s != "None")
}

impl ServiceAllocator {
    pub fn new(cidr: Cidr, ports: (u16, u16)) -> Self {
        ServiceAllocator {
            cidr,
            ports,
            state: Mutex::new(State {
                ips: HashSet::new(),
                ports: HashSet::new(),
            }),
        }
    }

    pub fn cidr(&self) -> Cidr {
        self.cidr
    }

    /// Marks what an existing Service holds as taken (at start).
    pub fn restore(&self, svc: &Value) {
        let held = self.holdings(svc);
        let mut st = self.state.lock();
        st.ips.extend(held.ips);
        st.ports.extend(held.ports);
    }

    /// Marks an address another writer holds (its claim found in the store).
    pub fn mark_ip_taken(&self, ip: Ipv4Addr) {
        self.state.lock().ips.insert(u32::from(ip));
    }

    /// Marks a node port another writer holds (its claim found in the store).
    pub fn mark_port_taken(&self, port: u16) {
        self.state.lock().ports.insert(port);
    }

    /// Replaces the cluster IPs and node ports known to be held by what the store's
    /// Services and claims hold, forgetting those given back by other apiservers. One
    /// being reserved right now and missing here can only be handed out twice in
    /// memory: its claim in the store still goes to one of the two.
    pub fn resync(
        &self,
        ips: impl IntoIterator<Item = Ipv4Addr>,
        ports: impl IntoIterator<Item = u16>,
    ) {
        let mut st = self.state.lock();
        st.ips = ips.into_iter().map(u32::from).collect();
        st.ports = ports.into_iter().collect();
    }

    /// Whether allocating for `svc` may look past the default range: it wants a
    /// cluster IP and does not ask for an ordinary address of the default range (a
    /// request there gets the same answer whatever other ranges exist). Only then are
    /// the other ServiceCIDRs worth reading.
    pub fn may_use_other_ranges(&self, svc: &Value) -> bool {
        if is_headless_or_external(&svc["spec"]) {
            return false;
        }
        match requested_cluster_ip(svc).and_then(|r| r.parse::<Ipv4Addr>().ok()) {
            Some(ip) => {
                let n = u32::from(ip);
                !self.cidr.contains(ip) || n == self.cidr.base || n == self.cidr.last()
            }
            None => true,
        }
    }

    /// Fills in and reserves `spec.clusterIP(s)` and node ports of a new Service.
    /// `extra`: the ranges of the other ServiceCIDRs, searched after the default one.
    pub fn allocate(&self, svc: &mut Value, extra: &[Cidr]) -> Result<Reserved, Vec<FieldError>> {
        let mut st = self.state.lock();
        self.allocate_locked(&mut st, svc, extra)
    }

    /// On update: reserves what `new` holds beyond `old` (a node port for a Service
    /// that became NodePort, a cluster IP for one that stopped being ExternalName),
    /// atomically. What `old` holds stays reserved; after the write commits, call
    /// [`ServiceAllocator::finish_update`] to give back what `new` dropped, or
    /// [`ServiceAllocator::release_reserved`] if it did not commit.
    pub fn allocate_update(
        &self,
        new: &mut Value,
        old: &Value,
        extra: &[Cidr],
    ) -> Result<Reserved, Vec<FieldError>> {
        let mut st = self.state.lock();
        let held = self.holdings(old);
        for ip in &held.ips {
            st.ips.remove(ip);
        }
        for p in &held.ports {
            st.ports.remove(p);
        }
        let result = self.allocate_locked(&mut st, new, extra);
        for ip in &held.ips {
            st.ips.insert(*ip);
        }
        for p in &held.ports {
            st.ports.insert(*p);
        }
        result.map(|r| Reserved {
            ips: r
                .ips
                .into_iter()
                .filter(|i| !held.ips.contains(i))
                .collect(),
            ports: r
                .ports
                .into_iter()
                .filter(|p| !held.ports.contains(p))
                .collect(),
        })
    }

    /// After an update committed: gives back what `old` held and `new` does not, and
    /// returns it.
    pub fn finish_update(&self, new: &Value, old: &Value) -> Reserved {
        let (n, o) = (self.holdings(new), self.holdings(old));
        let dropped = Reserved {
            ips: o.ips.into_iter().filter(|i| !n.ips.contains(i)).collect(),
            ports: o
                .ports
                .into_iter()
                .filter(|p| !n.ports.contains(p))
                .collect(),
        };
        self.release_reserved(&dropped);
        dropped
    }

    /// Gives back a reservation.
    pub fn release_reserved(&self, r: &Reserved) {
        let mut st = self.state.lock();
        for ip in &r.ips {
            st.ips.remove(ip);
        }
        for p in &r.ports {
            st.ports.remove(p);
        }
    }

    /// The cluster IP and node ports (its health check's included) a stored Service
    /// holds.
    pub fn holdings(&self, svc: &Value) -> Reserved {
        let spec = &svc["spec"];
        let ips = cluster_ip(svc).map(u32::from).into_iter().collect();
        let ports = spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
            .chain(Some(health_check_node_port(spec)).filter(|n| *n != 0))
            .filter_map(|n| u16::try_from(n).ok())
            .collect();
        Reserved { ips, ports }
    }

    /// A free address of `cidr` other than its network and broadcast addresses
    /// (and, in the default range, the `kubernetes` Service's first address, which
    /// is only ever requested), above the static band while that has room.
    fn free_in(&self, st: &State, cidr: Cidr) -> Option<u32> {
        let reserved = if cidr == self.cidr { 2 } else { 1 };
        let (first, end) = (u64::from(cidr.base) + 1, u64::from(cidr.last()));
        let band = static_band(cidr.size(), 16, 256);
        pick_free(first, end, band, |ip| {
            ip < u64::from(cidr.base) + reserved || st.ips.contains(&(ip as u32))
        })
        .map(|ip| ip as u32)
    }

    fn allocate_locked(
        &self,
        st: &mut State,
        svc: &mut Value,
        extra: &[Cidr],
    ) -> Result<Reserved, Vec<FieldError>> {
        let spec_path = FieldPath::new("spec");
        let mut taken_ips = Vec::new();
        let mut taken_ports = Vec::new();
        let mut errs = Vec::new();
        let requested = requested_cluster_ip(svc).map(str::to_string);
        let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(Reserved::default());
        };
        let spec_v = Value::Object(spec.clone());
        if !is_headless_or_external(&spec_v) {
            let ip = match requested {
                Some(req) => {
                    let failed = |why: String| {
                        FieldError::invalid(
                            &spec_path.child("clusterIPs").index(0),
                            req.clone(),
                            format!("failed to allocate IP {req}: {why}"),
                        )
                    };
                    let ip = req.parse::<Ipv4Addr>().ok();
                    // Upstream's MetaAllocator: the widest range holding the address.
                    let range = ip.and_then(|ip| {
                        std::iter::once(self.cidr)
                            .chain(extra.iter().copied())
                            .filter(|c| c.contains(ip))
                            .min_by_key(|c| c.bits)
                    });
                    match (ip, range) {
                        (Some(ip), Some(range)) => {
                            let n = u32::from(ip);
                            if n == range.base || n == range.last() {
                                errs.push(failed(format!(
                                    "the provided IP ({req}) is not in the valid range. The range of valid IPs is {}",
                                    range
                                )));
                                None
                            } else if st.ips.contains(&n) {
                                errs.push(failed("provided IP is already allocated".into()));
                                None
                            } else {
                                Some(n)
                            }
                        }
                        _ => {
                            errs.push(failed(
                                "the provided network does not match the current range".into(),
                            ));
                            None
                        }
                    }
                }
                None => {
                    let found = self.free_in(st, self.cidr).or_else(|| {
                        extra
                            .iter()
                            .filter(|c| **c != self.cidr)
                            .find_map(|c| self.free_in(st, *c))
                    });
                    if found.is_none() {
                        errs.push(FieldError::internal(
                            &spec_path.child("clusterIPs"),
                            "range is full",
                        ));
                    }
                    found
                }
            };
            if let Some(n) = ip {
                st.ips.insert(n);
                taken_ips.push(n);
                let s = Ipv4Addr::from(n).to_string();
                spec.insert("clusterIP".into(), json!(s));
                spec.insert("clusterIPs".into(), json!([s]));
                spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
                spec.entry("ipFamilyPolicy")
                    .or_insert_with(|| json!("SingleStack"));
            }
        }
        if wants_node_ports(&spec_v)
            && let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut)
        {
            let allocate_all = allocates_node_ports(&spec_v);
            let port_number = |p: &Value| p.get("port").and_then(Value::as_u64).unwrap_or(0);
            let node_port = |p: &Value| p.get("nodePort").and_then(Value::as_u64).unwrap_or(0);
            // A dynamic pick never takes a port a later entry of this Service asks for.
            let requested: HashSet<u64> = ports.iter().map(node_port).collect();
            // As upstream's `initNodePorts`: the entries of one port number (53/UDP and
            // 53/TCP) share one node port, the one any of them asks for if one does.
            let mut by_port_number: HashMap<u64, u16> = HashMap::new();
            let mut failed: HashSet<(u64, u64)> = HashSet::new();
            let asked: Vec<(u64, u64)> = ports
                .iter()
                .map(|p| (port_number(p), node_port(p)))
                .collect();
            for (i, p) in ports.iter_mut().enumerate() {
                let path = spec_path.child("ports").index(i).child("nodePort");
                let (number, own) = (port_number(p), node_port(p));
                if own == 0 && !allocate_all {
                    continue;
                }
                let shared = by_port_number.get(&number).copied();
                let wanted = match shared {
                    Some(n) if own == 0 || own == u64::from(n) => {
                        set_node_port(p, n);
                        continue;
                    }
                    Some(_) => own,
                    None => asked
                        .iter()
                        .find(|(num, np)| *num == number && *np != 0)
                        .map_or(0, |(_, np)| *np),
                };
                // The port one number failed to get is reported once, at its first entry.
                if wanted != 0 && !failed.insert((number, wanted)) {
                    continue;
                }
                match self.take_node_port(st, &mut taken_ports, wanted, &requested, &path) {
                    Ok(n) => {
                        set_node_port(p, n);
                        by_port_number.entry(number).or_insert(n);
                    }
                    Err(e) => errs.push(e),
                }
            }
        }
        // Upstream's `allocHealthCheckNodePort`.
        if needs_health_check_node_port(&spec_v) {
            let path = spec_path.child("healthCheckNodePort");
            let wanted = health_check_node_port(&spec_v);
            match self.take_node_port(st, &mut taken_ports, wanted, &HashSet::new(), &path) {
                Ok(n) => {
                    spec.insert("healthCheckNodePort".into(), json!(n));
                }
                Err(e) => errs.push(e),
            }
        }
        init_ip_families(spec);
        if errs.is_empty() {
            Ok(Reserved {
                ips: taken_ips,
                ports: taken_ports,
            })
        } else {
            for ip in taken_ips {
                st.ips.remove(&ip);
            }
            for p in taken_ports {
                st.ports.remove(&p);
            }
            Err(errs)
        }
    }

    /// Reserves node port `wanted`, or (0) a free one not in `requested`, adding it
    /// to `taken`; the error is the one for `path`.
    fn take_node_port(
        &self,
        st: &mut State,
        taken: &mut Vec<u16>,
        wanted: u64,
        requested: &HashSet<u64>,
        path: &FieldPath,
    ) -> Result<u16, FieldError> {
        if wanted == 0 {
            let (lo, hi) = (u64::from(self.ports.0), u64::from(self.ports.1) + 1);
            let band = static_band(hi - lo, 32, 128);
            let found = pick_free(lo, hi, band, |n| {
                requested.contains(&n) || st.ports.contains(&(n as u16))
            })
            .map(|n| n as u16);
            let Some(n) = found else {
                return Err(FieldError::internal(path, "range is full"));
            };
            st.ports.insert(n);
            taken.push(n);
            return Ok(n);
        }
        let n = u16::try_from(wanted)
            .ok()
            .filter(|n| (self.ports.0..=self.ports.1).contains(n));
        let Some(n) = n else {
            return Err(FieldError::invalid(
                path,
                wanted,
                format!(
                    "provided port is not in the valid range. The range of valid ports is {}-{}",
                    self.ports.0, self.ports.1
                ),
            ));
        };
        if st.ports.contains(&n) {
            return Err(FieldError::invalid(
                path,
                wanted,
                "provided port is already allocated",
            ));
        }
        st.ports.insert(n);
        taken.push(n);
        Ok(n)
    }

    /// Gives back what a Service held, and returns it.
    pub fn release(&self, svc: &Value) -> Reserved {
        let held = self.holdings(svc);
        self.release_reserved(&held);
        held
    }
}

/// What one allocation reserved (cluster IPs as offsets into the range).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reserved {
    ips: Vec<u32>,
    ports: Vec<u16>,
}

impl Reserved {
    /// The cluster IPs.
    pub fn ips(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.ips.iter().map(|n| Ipv4Addr::from(*n))
    }

    /// The node ports, each once (a Service may use one for TCP and UDP).
    pub fn ports(&self) -> Vec<u16> {
        let mut ports = self.ports.clone();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

fn set_node_port(port: &mut Value, n: u16) {
    if let Some(o) = port.as_object_mut() {
        o.insert("nodePort".into(), json!(n));
    }
}

/// `spec.ipFamilyPolicy`, `ipFamilies` and (headless) `clusterIPs` of a single-stack
/// IPv4 cluster, as upstream's service REST storage fills them in: nothing for
/// ExternalName; `RequireDualStack` for headless Services without a selector.
fn init_ip_families(spec: &mut serde_json::Map<String, Value>) {
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return;
    }
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    if headless {
        let selectorless = spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(|m| m.is_empty());
        let policy = if selectorless {
            "RequireDualStack"
        } else {
            "SingleStack"
        };
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!(policy));
        spec.entry("clusterIPs").or_insert_with(|| json!(["None"]));
    } else {
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
    }
    let empty = spec
        .get("ipFamilies")
        .and_then(Value::as_array)
        .is_none_or(|a| a.is_empty());
    if empty {
        spec.insert("ipFamilies".into(), json!(["IPv4"]));
    }
}

fn needs_cluster_ip(spec: &Value) -> bool {
    spec.get("type").and_then(Value::as_str) != Some("ExternalName")
}

/// On update: keeps allocated values the client left out (upstream's
/// `patchAllocatedValues`: clusterIP(s) while both need one, node ports by port name
/// while both need them), then clears fields the new type no longer uses when they
/// are unchanged from the old object (upstream's `dropTypeDependentFields`).
pub fn keep_allocated(new: &mut Value, old: &Value) {
    let old_spec = &old["spec"];
    let new_spec = new["spec"].clone();
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let (old_np, new_np) = (wants_node_ports(old_spec), wants_node_ports(&new_spec));
    let (old_ip, new_ip) = (needs_cluster_ip(old_spec), needs_cluster_ip(&new_spec));
    if old_np && new_np {
        let node_port = |p: &Value| p.get("nodePort").and_then(Value::as_u64).unwrap_or(0);
        let used: HashSet<u64> = new_spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(node_port)
            .filter(|n| *n != 0)
            .collect();
        for p in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if node_port(p) != 0 {
                continue;
            }
            let name = p.get("name").cloned().unwrap_or(json!(""));
            let old_n = old_spec["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o.get("name").cloned().unwrap_or(json!("")) == name)
                .map(node_port)
                .unwrap_or(0);
            if old_n != 0
                && !used.contains(&old_n)
                && let Some(o) = p.as_object_mut()
            {
                o.insert("nodePort".into(), json!(old_n));
            }
        }
    }
    let (old_hc, new_hc) = (
        needs_health_check_node_port(old_spec),
        needs_health_check_node_port(&new_spec),
    );
    if old_hc
        && new_hc
        && health_check_node_port(&new_spec) == 0
        && let Some(v) = old_spec.get("healthCheckNodePort")
    {
        spec.insert("healthCheckNodePort".into(), v.clone());
    }
    if old_hc
        && !new_hc
        && new_spec.get("healthCheckNodePort") == old_spec.get("healthCheckNodePort")
    {
        spec.remove("healthCheckNodePort");
    }
    if old_ip && new_ip {
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let empty = match spec.get(f) {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if empty && let Some(v) = old_spec.get(f) {
                spec.insert(f.into(), v.clone());
            }
        }
    }
    if old_ip && !new_ip {
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if spec.get(f) == old_spec.get(f) {
                spec.remove(f);
            }
        }
    }
    if old_np && !new_np {
        let same = new_spec["ports"].as_array().into_iter().flatten().all(|p| {
            p.get("nodePort").is_none_or(|n| {
                n.as_u64() == Some(0)
                    || old_spec["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|o| o.get("nodePort") == Some(n))
            })
        });
        if same {
            for p in spec
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(o) = p.as_object_mut() {
                    o.remove("nodePort");
                }
            }
        }
    }
    if spec.get("type").and_then(Value::as_str) != Some("LoadBalancer") {
        spec.remove("allocateLoadBalancerNodePorts");
    }
    let externally_accessible = matches!(
        spec.get("type").and_then(Value::as_str),
        Some("NodePort" | "LoadBalancer")
    ) || (spec.get("type").and_then(Value::as_str)
        == Some("ClusterIP")
        && spec
            .get("externalIPs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty()));
    if !externally_accessible {
        spec.remove("externalTrafficPolicy");
    }
    if !new_ip {
        spec.remove("internalTrafficPolicy");
    }
}

pub fn invalid_service(name: &str, errs: Vec<FieldError>) -> ApiError {
    ApiError::invalid("", "Service", name, errs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc() -> ServiceAllocator {
        ServiceAllocator::new(Cidr::parse("10.96.0.0/28").unwrap(), (30000, 30002))
    }

    #[test]
    fn allocates_unique_ips_until_full() {
        let a = alloc();
        let mut seen = HashSet::new();
        // /28: 16 addresses, minus network, .1 and broadcast = 13 dynamic.
        for _ in 0..13 {
            let mut s = json!({"spec": {"type": "ClusterIP"}});
            a.allocate(&mut s, &[]).unwrap();
            let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();
            assert_ne!(ip, "10.96.0.1");
            assert_ne!(ip, "10.96.0.15");
            assert!(seen.insert(ip));
        }
        let mut s = json!({"spec": {}});
        assert!(a.allocate(&mut s, &[]).is_err());
        a.release(&json!({"spec": {"clusterIP": "10.96.0.5"}}));
        let mut s = json!({"spec": {}});
        a.allocate(&mut s, &[]).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "10.96.0.5");
    }

    #[test]
    fn requested_ip_and_ports() {
        let a = alloc();
        let mut s = json!({"spec": {"clusterIP": "10.96.0.1"}});
        a.allocate(&mut s, &[]).unwrap();
        let mut s = json!({"spec": {"clusterIP": "10.96.0.1"}});
        let errs = a.allocate(&mut s, &[]).unwrap_err();
        assert!(errs[0].detail.contains("already allocated"));
        let mut s = json!({"spec": {"clusterIP": "10.1.0.1"}});
        assert!(a.allocate(&mut s, &[]).is_err());
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30002}]}});
        a.allocate(&mut s, &[]).unwrap();
        let first = s["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!(first == 30000 || first == 30001, "{first}");
        let left = 30001 - (first - 30000);
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}});
        // One port is left: the second port fails and the first is given back.
        assert!(a.allocate(&mut s, &[]).is_err());
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        a.allocate(&mut s, &[]).unwrap();
        assert_eq!(s["spec"]["ports"][0]["nodePort"], left);
    }

    #[test]
    fn static_band_sizes_are_upstreams() {
        // Cluster IPs: min(max(16, size / 16), 256); none for 16 addresses or fewer.
        assert_eq!(static_band(16, 16, 256), 0);
        assert_eq!(static_band(256, 16, 256), 16);
        assert_eq!(static_band(1024, 16, 256), 64);
        assert_eq!(static_band(1 << 20, 16, 256), 256);
        // Node ports: min(max(16, size / 32), 128); 30000-32767 keeps 86.
        assert_eq!(static_band(2768, 32, 128), 86);
        assert_eq!(static_band(100, 32, 128), 16);
        assert_eq!(static_band(10, 32, 128), 0);
    }

    #[test]
    fn dynamic_cluster_ips_leave_the_static_band_until_the_rest_is_full() {
        // /24: addresses .1 to .254; .1 is the kubernetes Service's, .1 to .16 the
        // static band, so .17 to .254 (238) go first.
        let a = ServiceAllocator::new(Cidr::parse("10.96.0.0/24").unwrap(), (30000, 30002));
        let last_octet = |s: &Value| {
            s["spec"]["clusterIP"]
                .as_str()
                .unwrap()
                .parse::<Ipv4Addr>()
                .unwrap()
                .octets()[3]
        };
        let mut seen = HashSet::new();
        for _ in 0..238 {
            let mut s = json!({"spec": {"type": "ClusterIP"}});
            a.allocate(&mut s, &[]).unwrap();
            let octet = last_octet(&s);
            assert!((17..=254).contains(&octet), "{octet} is in the static band");
            assert!(seen.insert(octet));
        }
        // kube-dns's usual address is still free to ask for.
        let mut dns = json!({"spec": {"clusterIP": "10.96.0.10"}});
        a.allocate(&mut dns, &[]).unwrap();
        // The upper range is full: the band's other addresses are handed out, never .1.
        for _ in 0..14 {
            let mut s = json!({"spec": {"type": "ClusterIP"}});
            a.allocate(&mut s, &[]).unwrap();
            let octet = last_octet(&s);
            assert!((2..=16).contains(&octet) && octet != 10, "{octet}");
            assert!(seen.insert(octet));
        }
        assert!(a.allocate(&mut json!({"spec": {}}), &[]).is_err());
    }

    #[test]
    fn dynamic_node_ports_leave_the_static_band_until_the_rest_is_full() {
        // 30000-30099: 100 ports, the first 16 kept for Services that ask for one.
        let a = ServiceAllocator::new(Cidr::parse("10.96.0.0/24").unwrap(), (30000, 30099));
        let mut ports = HashSet::new();
        for _ in 0..84 {
            let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
            a.allocate(&mut s, &[]).unwrap();
            let port = s["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
            assert!(
                (30016..=30099).contains(&port),
                "{port} is in the static band"
            );
            assert!(ports.insert(port));
        }
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        a.allocate(&mut s, &[]).unwrap();
        let port = s["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!((30000..30016).contains(&port), "{port}");
    }

    #[test]
    fn only_some_services_need_the_other_ranges() {
        let a = alloc();
        for (spec, may) in [
            (json!({"type": "ClusterIP"}), true),
            (json!({"clusterIP": "10.96.0.5"}), false),
            (json!({"clusterIP": "10.96.0.0"}), true),
            (json!({"clusterIP": "10.96.0.15"}), true),
            (json!({"clusterIP": "10.200.0.5"}), true),
            (json!({"clusterIP": "None"}), false),
            (
                json!({"type": "ExternalName", "externalName": "x.example"}),
                false,
            ),
        ] {
            assert_eq!(
                a.may_use_other_ranges(&json!({"spec": spec})),
                may,
                "{spec}"
            );
        }
    }

    #[test]
    fn headless_gets_nothing() {
        let a = alloc();
        let mut s = json!({"spec": {"clusterIP": "None"}});
        a.allocate(&mut s, &[]).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "None");
    }

    #[test]
    fn keeps_allocated_on_update() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.3", "clusterIPs": ["10.96.0.3"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}]}});
        let mut new =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}});
        keep_allocated(&mut new, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.3");
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30001);
        // NodePort -> ClusterIP: the node ports go, the cluster IP stays.
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        keep_allocated(&mut new, &old);
        assert!(new["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.3");
        // -> ExternalName: the cluster IP goes too.
        let mut new = old.clone();
        new["spec"]["type"] = json!("ExternalName");
        keep_allocated(&mut new, &old);
        assert!(new["spec"].get("clusterIP").is_none());
    }

    #[test]
    fn update_to_node_port_allocates_and_releases() {
        let a = alloc();
        let mut old = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        a.allocate(&mut old, &[]).unwrap();
        assert_eq!(old["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(old["spec"]["ipFamilyPolicy"], "SingleStack");
        let mut new = old.clone();
        new["spec"]["type"] = json!("NodePort");
        let r = a.allocate_update(&mut new, &old, &[]).unwrap();
        let port = new["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!((30000..=30002).contains(&port), "{port}");
        assert_eq!(new["spec"]["clusterIP"], old["spec"]["clusterIP"]);
        a.finish_update(&new, &old);
        // Back to ClusterIP: the port is given back after the commit.
        let mut back = new.clone();
        back["spec"]["type"] = json!("ClusterIP");
        keep_allocated(&mut back, &new);
        let r2 = a.allocate_update(&mut back, &new, &[]).unwrap();
        assert_eq!(r2, Reserved::default());
        a.finish_update(&back, &new);
        let mut other =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 1, "nodePort": port}]}});
        a.allocate(&mut other, &[]).unwrap();
        // A failed write gives back its reservation.
        a.release_reserved(&r);
    }

    #[test]
    fn one_port_number_shares_a_node_port_across_protocols() {
        let a = ServiceAllocator::new(Cidr::parse("10.96.0.0/28").unwrap(), (30000, 30009));
        let mut s = json!({"spec": {"type": "NodePort", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            {"name": "web", "port": 80, "protocol": "TCP"}]}});
        let r = a.allocate(&mut s, &[]).unwrap();
        let ports = &s["spec"]["ports"];
        assert_eq!(ports[0]["nodePort"], ports[1]["nodePort"], "{s}");
        assert_ne!(ports[0]["nodePort"], ports[2]["nodePort"], "{s}");
        assert_eq!(r.ports().len(), 2);
        // The one an entry asks for is the one its port number gets (a fresh range:
        // the picks above are random).
        let b = ServiceAllocator::new(Cidr::parse("10.96.0.0/28").unwrap(), (30000, 30009));
        let mut asked = json!({"spec": {"type": "NodePort", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "nodePort": 30007}]}});
        b.allocate(&mut asked, &[]).unwrap();
        // Asked for again by another Service: one error, at the first entry of 53.
        let mut again = json!({"spec": {"type": "NodePort", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "nodePort": 30007}]}});
        let errs = b.allocate(&mut again, &[]).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            format!("{errs:?}").contains("spec.ports[0].nodePort"),
            "{errs:?}"
        );
        let ports = &asked["spec"]["ports"];
        assert_eq!(
            (ports[0]["nodePort"].clone(), ports[1]["nodePort"].clone()),
            (json!(30007), json!(30007))
        );
    }

    #[test]
    fn a_load_balancer_without_node_port_allocation_keeps_only_those_asked_for() {
        let a = ServiceAllocator::new(Cidr::parse("10.96.0.0/28").unwrap(), (30000, 30009));
        let mut s = json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
            "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30005}]}});
        let r = a.allocate(&mut s, &[]).unwrap();
        assert!(s["spec"]["ports"][0].get("nodePort").is_none(), "{s}");
        assert_eq!(s["spec"]["ports"][1]["nodePort"], 30005);
        assert_eq!(r.ports(), [30005]);
        let mut default = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        a.allocate(&mut default, &[]).unwrap();
        assert!(
            default["spec"]["ports"][0]["nodePort"].is_u64(),
            "{default}"
        );
    }

    #[test]
    fn a_local_load_balancer_holds_a_health_check_node_port() {
        let a = ServiceAllocator::new(Cidr::parse("10.96.0.0/28").unwrap(), (30000, 30009));
        let mut lb = json!({"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
            "ports": [{"port": 80}]}});
        let r = a.allocate(&mut lb, &[]).unwrap();
        let hc = lb["spec"]["healthCheckNodePort"]
            .as_u64()
            .expect("allocated");
        assert!((30000..=30009).contains(&hc));
        assert_ne!(json!(hc), lb["spec"]["ports"][0]["nodePort"]);
        assert_eq!(r.ports().len(), 2);
        assert!(a.holdings(&lb).ports().contains(&(hc as u16)));
        // Another Service cannot ask for it, nor for one outside the range.
        let mut taken = json!({"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
            "healthCheckNodePort": hc, "ports": [{"port": 80}]}});
        let errs = a.allocate(&mut taken, &[]).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(
            format!("{errs:?}").contains("provided port is already allocated"),
            "{errs:?}"
        );
        assert!(
            format!("{errs:?}").contains("healthCheckNodePort"),
            "{errs:?}"
        );
        // Cluster traffic policy: the field is dropped and the port given back.
        let mut cluster = lb.clone();
        cluster["spec"]["externalTrafficPolicy"] = json!("Cluster");
        keep_allocated(&mut cluster, &lb);
        assert!(
            cluster["spec"].get("healthCheckNodePort").is_none(),
            "{cluster}"
        );
        a.allocate_update(&mut cluster, &lb, &[]).unwrap();
        let dropped = a.finish_update(&cluster, &lb);
        assert_eq!(dropped.ports(), [hc as u16]);
        // An update that leaves it out keeps it while the Service still needs one.
        let mut local = lb.clone();
        local["spec"]
            .as_object_mut()
            .unwrap()
            .remove("healthCheckNodePort");
        keep_allocated(&mut local, &lb);
        assert_eq!(local["spec"]["healthCheckNodePort"], json!(hc));
    }

    #[test]
    fn headless_ip_families() {
        let a = alloc();
        let mut s = json!({"spec": {"clusterIP": "None", "selector": {"a": "b"}}});
        a.allocate(&mut s, &[]).unwrap();
        assert_eq!(s["spec"]["clusterIPs"], json!(["None"]));
        assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
        let mut s = json!({"spec": {"clusterIP": "None"}});
        a.allocate(&mut s, &[]).unwrap();
        assert_eq!(s["spec"]["ipFamilyPolicy"], "RequireDualStack");
        let mut s = json!({"spec": {"type": "ExternalName", "externalName": "x.example"}});
        a.allocate(&mut s, &[]).unwrap();
        assert!(s["spec"].get("ipFamilies").is_none());
    }
}
