//! ClusterIP and NodePort allocation for Services.
//!
//! One allocator per registry, behind a mutex: an address or port is handed out at
//! most once, whatever the concurrency. It is rebuilt from the stored Services at
//! start. (With several apiservers on one etcd this must move into storage, as
//! upstream's IPAddress objects; one apiserver per store for now.)

use std::collections::HashSet;
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

    fn size(&self) -> u32 {
        1u32 << (32 - self.bits)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip >= self.base && ip - self.base < self.size()
    }

    /// The first usable address (the `kubernetes` Service's).
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
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
    ips: HashSet<u32>,
    next_ip: u32,
    ports: HashSet<u16>,
    next_port: u16,
}

#[derive(Debug)]
pub struct ServiceAllocator {
    cidr: Cidr,
    ports: (u16, u16),
    state: Mutex<State>,
}

fn is_headless_or_external(spec: &Value) -> bool {
    spec.get("type").and_then(Value::as_str) == Some("ExternalName")
        || spec.get("clusterIP").and_then(Value::as_str) == Some("None")
}

fn wants_node_ports(spec: &Value) -> bool {
    matches!(
        spec.get("type").and_then(Value::as_str),
        Some("NodePort") | Some("LoadBalancer")
    )
}

impl ServiceAllocator {
    pub fn new(cidr: Cidr, ports: (u16, u16)) -> Self {
        ServiceAllocator {
            cidr,
            ports,
            state: Mutex::new(State {
                ips: HashSet::new(),
                next_ip: 2,
                ports: HashSet::new(),
                next_port: 0,
            }),
        }
    }

    pub fn cidr(&self) -> Cidr {
        self.cidr
    }

    /// Marks what an existing Service holds as taken (at start).
    pub fn restore(&self, svc: &Value) {
        let mut st = self.state.lock();
        let spec = &svc["spec"];
        if let Some(ip) = spec.get("clusterIP").and_then(Value::as_str)
            && let Ok(ip) = ip.parse::<Ipv4Addr>()
            && self.cidr.contains(ip)
        {
            st.ips.insert(u32::from(ip) - self.cidr.base);
        }
        for p in spec["ports"].as_array().into_iter().flatten() {
            if let Some(n) = p.get("nodePort").and_then(Value::as_u64) {
                st.ports.insert(n as u16);
            }
        }
    }

    /// Fills in and reserves `spec.clusterIP(s)` and node ports of a new Service.
    pub fn allocate(&self, svc: &mut Value) -> Result<(), Vec<FieldError>> {
        let mut st = self.state.lock();
        let spec_path = FieldPath::new("spec");
        let mut taken_ips = Vec::new();
        let mut taken_ports = Vec::new();
        let mut errs = Vec::new();
        let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let spec_v = Value::Object(spec.clone());
        if !is_headless_or_external(&spec_v) {
            let requested = spec_v
                .get("clusterIP")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string);
            let ip = match requested {
                Some(req) => {
                    match req.parse::<Ipv4Addr>() {
                        Ok(ip) if self.cidr.contains(ip) => {
                            let off = u32::from(ip) - self.cidr.base;
                            if st.ips.contains(&off) {
                                errs.push(FieldError::invalid(
                                &spec_path.child("clusterIPs").index(0),
                                req.clone(),
                                format!("failed to allocate IP {req}: provided IP is already allocated"),
                            ));
                                None
                            } else {
                                Some(off)
                            }
                        }
                        _ => {
                            errs.push(FieldError::invalid(
                            &spec_path.child("clusterIPs").index(0),
                            req.clone(),
                            format!(
                                "failed to allocate IP {req}: the provided IP ({req}) is not in the valid range. The range of valid IPs is {}/{}",
                                Ipv4Addr::from(self.cidr.base),
                                self.cidr.bits
                            ),
                        ));
                            None
                        }
                    }
                }
                None => {
                    let size = self.cidr.size();
                    // Offsets 0 (network), 1 (kubernetes, requested explicitly) and the
                    // broadcast address are never handed out dynamically.
                    let mut found = None;
                    for i in 0..size {
                        let off = 2 + (st.next_ip - 2 + i) % (size - 3);
                        if !st.ips.contains(&off) {
                            found = Some(off);
                            break;
                        }
                    }
                    if found.is_none() {
                        errs.push(FieldError::internal(
                            &spec_path.child("clusterIPs"),
                            "range is full",
                        ));
                    }
                    found
                }
            };
            if let Some(off) = ip {
                st.ips.insert(off);
                st.next_ip = off + 1;
                taken_ips.push(off);
                let s = Ipv4Addr::from(self.cidr.base + off).to_string();
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
            let span = u32::from(self.ports.1 - self.ports.0) + 1;
            for (i, p) in ports.iter_mut().enumerate() {
                let path = spec_path.child("ports").index(i).child("nodePort");
                match p.get("nodePort").and_then(Value::as_u64) {
                    Some(n) if n != 0 => {
                        let n16 = n as u16;
                        if n > u64::from(u16::MAX) || n16 < self.ports.0 || n16 > self.ports.1 {
                            errs.push(FieldError::invalid(
                                &path,
                                n,
                                format!(
                                    "provided port is not in the valid range. The range of valid ports is {}-{}",
                                    self.ports.0, self.ports.1
                                ),
                            ));
                        } else if st.ports.contains(&n16) || taken_ports.contains(&n16) {
                            errs.push(FieldError::invalid(
                                &path,
                                n,
                                "provided port is already allocated",
                            ));
                        } else {
                            st.ports.insert(n16);
                            taken_ports.push(n16);
                        }
                    }
                    _ => {
                        let mut found = None;
                        for k in 0..span {
                            let cand = self.ports.0 + ((u32::from(st.next_port) + k) % span) as u16;
                            if !st.ports.contains(&cand) {
                                found = Some(cand);
                                break;
                            }
                        }
                        match found {
                            Some(n) => {
                                st.ports.insert(n);
                                st.next_port = n - self.ports.0 + 1;
                                taken_ports.push(n);
                                if let Some(o) = p.as_object_mut() {
                                    o.insert("nodePort".into(), json!(n));
                                }
                            }
                            None => errs.push(FieldError::internal(&path, "range is full")),
                        }
                    }
                }
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            for off in taken_ips {
                st.ips.remove(&off);
            }
            for p in taken_ports {
                st.ports.remove(&p);
            }
            Err(errs)
        }
    }

    /// Gives back what a Service held.
    pub fn release(&self, svc: &Value) {
        let mut st = self.state.lock();
        let spec = &svc["spec"];
        if let Some(ip) = spec.get("clusterIP").and_then(Value::as_str)
            && let Ok(ip) = ip.parse::<Ipv4Addr>()
            && self.cidr.contains(ip)
        {
            st.ips.remove(&(u32::from(ip) - self.cidr.base));
        }
        for p in spec["ports"].as_array().into_iter().flatten() {
            if let Some(n) = p.get("nodePort").and_then(Value::as_u64) {
                st.ports.remove(&(n as u16));
            }
        }
    }
}

/// On update, keeps allocated values the client left out (upstream's
/// `patchAllocatedValues`): clusterIP(s), ipFamilies and node ports by port.
pub fn keep_allocated(new: &mut Value, old: &Value) {
    let old_spec = &old["spec"];
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
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
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if p.get("nodePort").and_then(Value::as_u64).unwrap_or(0) == 0
                && let Some(old_p) = old_spec["ports"].as_array().and_then(|a| {
                    a.iter().find(|o| {
                        o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol")
                    })
                })
                && let Some(n) = old_p.get("nodePort")
                && let Some(o) = p.as_object_mut()
            {
                o.insert("nodePort".into(), n.clone());
            }
        }
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
            a.allocate(&mut s).unwrap();
            let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();
            assert_ne!(ip, "10.96.0.1");
            assert_ne!(ip, "10.96.0.15");
            assert!(seen.insert(ip));
        }
        let mut s = json!({"spec": {}});
        assert!(a.allocate(&mut s).is_err());
        a.release(&json!({"spec": {"clusterIP": "10.96.0.5"}}));
        let mut s = json!({"spec": {}});
        a.allocate(&mut s).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "10.96.0.5");
    }

    #[test]
    fn requested_ip_and_ports() {
        let a = alloc();
        let mut s = json!({"spec": {"clusterIP": "10.96.0.1"}});
        a.allocate(&mut s).unwrap();
        let mut s = json!({"spec": {"clusterIP": "10.96.0.1"}});
        let errs = a.allocate(&mut s).unwrap_err();
        assert!(errs[0].detail.contains("already allocated"));
        let mut s = json!({"spec": {"clusterIP": "10.1.0.1"}});
        assert!(a.allocate(&mut s).is_err());
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30002}]}});
        a.allocate(&mut s).unwrap();
        assert_eq!(s["spec"]["ports"][0]["nodePort"], 30000);
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}});
        // Only 30001 is left: the second port fails and the first is given back.
        assert!(a.allocate(&mut s).is_err());
        let mut s = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        a.allocate(&mut s).unwrap();
        assert_eq!(s["spec"]["ports"][0]["nodePort"], 30001);
    }

    #[test]
    fn headless_gets_nothing() {
        let a = alloc();
        let mut s = json!({"spec": {"clusterIP": "None"}});
        a.allocate(&mut s).unwrap();
        assert_eq!(s["spec"]["clusterIP"], "None");
    }

    #[test]
    fn keeps_allocated_on_update() {
        let old = json!({"spec": {"clusterIP": "10.96.0.3", "clusterIPs": ["10.96.0.3"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}]}});
        let mut new = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}]}});
        keep_allocated(&mut new, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.3");
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30001);
    }
}
