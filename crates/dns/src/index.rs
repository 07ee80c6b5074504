//! The record index: Services and EndpointSlices (as [`crate::model`]s) in, DNS
//! answers out, following the Kubernetes DNS-Based Service Discovery specification
//! (schema 1.1.0) as CoreDNS's kubernetes plugin implements it with its default
//! Corefile (`pods insecure`, reverse zones served, TTL 5 s):
//!
//! | name | answer |
//! |---|---|
//! | `<svc>.<ns>.svc.<zone>` | A/AAAA: the cluster IPs; headless: every ready endpoint address; ExternalName: CNAME |
//! | `<ep>.<svc>.<ns>.svc.<zone>` | A/AAAA of the ready endpoint whose hostname (or dashed IP) is `<ep>` |
//! | `_<port>._<proto>.<svc>.<ns>.svc.<zone>` | SRV per named port: target the Service (or each ready endpoint of a headless one), with A/AAAA in the additional section |
//! | `<svc>.<ns>.svc.<zone>` SRV | SRV for every port of the Service |
//! | `<a-b-c-d>.<ns>.pod.<zone>` | A `a.b.c.d` (IPv6: `-` for `:`) |
//! | `<reversed-ip>.in-addr.arpa` / `ip6.arpa` | PTR: the Service of a cluster IP, `<ep>.<svc>.<ns>.svc.<zone>` of an endpoint IP |
//! | `<zone>` | SOA, NS `ns.dns.<zone>` |
//! | `dns-version.<zone>` | TXT `1.1.0` |
//!
//! Names inside the zone that do not exist get NXDOMAIN, names that exist without the
//! asked type (and empty non-terminals such as `svc.<zone>`) NOERROR without answers,
//! both with the zone's SOA. Unknown reverse names get NXDOMAIN. Anything else is not
//! ours and gets SERVFAIL: nothing is forwarded anywhere.
//!
//! The index is updated per watch event ([`DnsIndex::set_service`],
//! [`DnsIndex::set_slice`]); only the reverse (PTR) map is derived eagerly, per
//! Service. Lookups are a few hash probes.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use crate::model::{EndpointModel, PortModel, ServiceKey, ServiceKind, ServiceModel, SliceModel};

/// The version of the Kubernetes DNS schema served (`dns-version.<zone>` TXT).
pub const SCHEMA_VERSION: &str = "1.1.0";
/// CoreDNS's default TTL for the kubernetes plugin, in seconds.
pub const DEFAULT_TTL: u32 = 5;
/// How many CNAMEs inside the zone are followed for one answer.
const MAX_CNAME_CHAIN: usize = 8;

/// What the index serves.
#[derive(Debug, Clone)]
pub struct DnsConfig {
    /// The cluster domain, e.g. `cluster.local`.
    pub zone: Name,
    pub ttl: u32,
    /// This server's own addresses (its pod IPs): `ns.dns.<zone>` answers the cluster
    /// IPs of the Services whose endpoints include them, as CoreDNS does.
    pub own_ips: Vec<IpAddr>,
    /// SOA serial at start (bumped on every change).
    pub serial: u32,
}

impl DnsConfig {
    /// A config for `zone` (e.g. `cluster.local`) with CoreDNS's defaults.
    pub fn new(zone: &str) -> Result<Self, hickory_proto::ProtoError> {
        Ok(DnsConfig {
            zone: fqdn(zone)?,
            ttl: DEFAULT_TTL,
            own_ips: Vec::new(),
            serial: 1,
        })
    }
}

/// A lowercase, fully qualified name.
fn fqdn(name: &str) -> Result<Name, hickory_proto::ProtoError> {
    let mut n = Name::from_ascii(name.trim_end_matches('.'))?.to_lowercase();
    n.set_fqdn(true);
    Ok(n)
}

/// The result of one lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rcode: ResponseCode,
    pub authoritative: bool,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
}

impl Answer {
    fn servfail() -> Self {
        Answer {
            rcode: ResponseCode::ServFail,
            authoritative: false,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
        }
    }
}

/// Records at one name, before filtering by type.
enum Node {
    NxDomain,
    Exists {
        records: Vec<Record>,
        /// Address records of SRV targets.
        additionals: Vec<Record>,
    },
}

impl Node {
    fn empty() -> Self {
        Node::Exists {
            records: Vec::new(),
            additionals: Vec::new(),
        }
    }
}

/// Services and EndpointSlices of the whole cluster, indexed for DNS.
#[derive(Debug)]
pub struct DnsIndex {
    cfg: DnsConfig,
    /// `zone` as text with its trailing dot, for building names.
    zone_text: String,
    in_addr_arpa: Name,
    ip6_arpa: Name,
    services: HashMap<ServiceKey, ServiceModel>,
    /// (namespace, slice name) -> slice.
    slices: HashMap<(String, String), SliceModel>,
    /// Service -> names of its slices (slices may arrive before their Service).
    slices_of: HashMap<ServiceKey, BTreeSet<String>>,
    /// Namespace -> number of Services (a namespace with Services is an existing name).
    namespaces: HashMap<String, usize>,
    /// IP -> (owning Service, PTR target).
    ptr: HashMap<IpAddr, BTreeSet<(ServiceKey, Name)>>,
    /// What each Service put into `ptr`, to take it out again.
    ptr_of: HashMap<ServiceKey, Vec<(IpAddr, Name)>>,
}

impl DnsIndex {
    pub fn new(cfg: DnsConfig) -> Self {
        let zone_text = cfg.zone.to_ascii();
        DnsIndex {
            zone_text: if zone_text.ends_with('.') {
                zone_text
            } else {
                format!("{zone_text}.")
            },
            cfg,
            in_addr_arpa: fqdn("in-addr.arpa").expect("valid name"),
            ip6_arpa: fqdn("ip6.arpa").expect("valid name"),
            services: HashMap::new(),
            slices: HashMap::new(),
            slices_of: HashMap::new(),
            namespaces: HashMap::new(),
            ptr: HashMap::new(),
            ptr_of: HashMap::new(),
        }
    }

    pub fn config(&self) -> &DnsConfig {
        &self.cfg
    }

    /// Number of Services and EndpointSlices indexed.
    pub fn len(&self) -> (usize, usize) {
        (self.services.len(), self.slices.len())
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.slices.is_empty()
    }

    /// Adds, replaces (`Some`) or removes (`None`) the Service `namespace/name`.
    pub fn set_service(&mut self, namespace: &str, name: &str, model: Option<ServiceModel>) {
        let key = ServiceKey::new(namespace, name);
        let existed = match model {
            Some(m) => self.services.insert(key.clone(), m).is_some(),
            None => {
                if self.services.remove(&key).is_none() {
                    return;
                }
                let n = self.namespaces.entry(key.namespace.clone()).or_default();
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.namespaces.remove(&key.namespace);
                }
                true
            }
        };
        if !existed {
            *self.namespaces.entry(key.namespace.clone()).or_default() += 1;
        }
        self.changed(&key);
    }

    /// Adds, replaces (`Some`) or removes (`None`) the EndpointSlice
    /// `namespace/name`.
    pub fn set_slice(&mut self, namespace: &str, name: &str, model: Option<SliceModel>) {
        let id = (namespace.to_ascii_lowercase(), name.to_string());
        let old = self.slices.remove(&id);
        if let Some(old) = &old
            && let Some(set) = self.slices_of.get_mut(&old.service)
        {
            set.remove(&id.1);
            if set.is_empty() {
                self.slices_of.remove(&old.service);
            }
        }
        let new_service = model.as_ref().map(|m| m.service.clone());
        if let Some(m) = model {
            self.slices_of
                .entry(m.service.clone())
                .or_default()
                .insert(id.1.clone());
            self.slices.insert(id, m);
        }
        if let Some(old) = old
            && Some(&old.service) != new_service.as_ref()
        {
            self.changed(&old.service);
        }
        if let Some(s) = new_service {
            self.changed(&s);
        }
    }

    /// Re-derives the reverse entries of one Service and bumps the SOA serial.
    fn changed(&mut self, key: &ServiceKey) {
        self.cfg.serial = self.cfg.serial.wrapping_add(1);
        for (ip, target) in self.ptr_of.remove(key).unwrap_or_default() {
            if let Some(set) = self.ptr.get_mut(&ip) {
                set.remove(&(key.clone(), target));
                if set.is_empty() {
                    self.ptr.remove(&ip);
                }
            }
        }
        let Some(svc) = self.services.get(key) else {
            return;
        };
        let Ok(svc_name) = self.service_name(key) else {
            return;
        };
        let mut entries = Vec::new();
        if let ServiceKind::ClusterIp(ips) = &svc.kind {
            entries.extend(ips.iter().map(|ip| (*ip, svc_name.clone())));
        }
        if !matches!(svc.kind, ServiceKind::ExternalName(_)) {
            for ep in self.ready_endpoints(key) {
                for ip in &ep.addresses {
                    if let Ok(n) = Name::from_ascii(endpoint_label(ep, *ip))
                        .and_then(|l| l.append_domain(&svc_name))
                    {
                        entries.push((*ip, n));
                    }
                }
            }
        }
        for (ip, target) in &entries {
            self.ptr
                .entry(*ip)
                .or_default()
                .insert((key.clone(), target.clone()));
        }
        self.ptr_of.insert(key.clone(), entries);
    }

    fn service_name(&self, key: &ServiceKey) -> Result<Name, hickory_proto::ProtoError> {
        Name::from_ascii(format!(
            "{}.{}.svc.{}",
            key.name, key.namespace, self.zone_text
        ))
    }

    fn slices_for<'a>(&'a self, key: &'a ServiceKey) -> impl Iterator<Item = &'a SliceModel> + 'a {
        self.slices_of
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(move |name| self.slices.get(&(key.namespace.clone(), name.clone())))
    }

    fn ready_endpoints<'a>(
        &'a self,
        key: &'a ServiceKey,
    ) -> impl Iterator<Item = &'a EndpointModel> + 'a {
        self.slices_for(key)
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.ready)
    }

    fn record(&self, owner: &Name, data: RData) -> Record {
        Record::from_rdata(owner.clone(), self.cfg.ttl, data)
    }

    fn addr(&self, owner: &Name, ip: IpAddr) -> Record {
        match ip {
            IpAddr::V4(v4) => self.record(owner, RData::A(A(v4))),
            IpAddr::V6(v6) => self.record(owner, RData::AAAA(AAAA(v6))),
        }
    }

    /// The zone's SOA record (also the authority of negative answers).
    pub fn soa(&self) -> Record {
        let zone = &self.cfg.zone;
        let mname = Name::from_ascii(format!("ns.dns.{}", self.zone_text)).unwrap_or_default();
        let rname = Name::from_ascii(format!("hostmaster.{}", self.zone_text)).unwrap_or_default();
        self.record(
            zone,
            RData::SOA(SOA::new(
                mname,
                rname,
                self.cfg.serial,
                7200,
                1800,
                86400,
                self.cfg.ttl,
            )),
        )
    }

    /// Answers one question. `qname` may be in any case; answers are owned by it as
    /// asked.
    pub fn lookup(&self, qname: &Name, qtype: RecordType) -> Answer {
        let mut qname = qname.clone();
        qname.set_fqdn(true);
        let lower = qname.to_lowercase();
        if self.cfg.zone.zone_of(&lower) {
            return self.lookup_in_zone(&qname, &lower, qtype, 0);
        }
        if self.in_addr_arpa.zone_of(&lower) || self.ip6_arpa.zone_of(&lower) {
            return self.lookup_reverse(&qname, &lower, qtype);
        }
        Answer::servfail()
    }

    fn negative(&self, rcode: ResponseCode) -> Answer {
        Answer {
            rcode,
            authoritative: true,
            answers: Vec::new(),
            authorities: vec![self.soa()],
            additionals: Vec::new(),
        }
    }

    fn lookup_in_zone(
        &self,
        qname: &Name,
        lower: &Name,
        qtype: RecordType,
        depth: usize,
    ) -> Answer {
        let (records, additionals) = match self.node(qname, lower, qtype) {
            Node::NxDomain => return self.negative(ResponseCode::NXDomain),
            Node::Exists {
                records,
                additionals,
            } => (records, additionals),
        };
        let cname = records
            .iter()
            .find(|r| r.record_type() == RecordType::CNAME)
            .cloned();
        if let Some(cname) = cname
            && qtype != RecordType::CNAME
            && qtype != RecordType::ANY
        {
            let mut answer = Answer {
                rcode: ResponseCode::NoError,
                authoritative: true,
                answers: vec![cname.clone()],
                authorities: Vec::new(),
                additionals: Vec::new(),
            };
            // Follow the alias while it stays inside the zone; outside it, the client
            // resolves the target itself (nothing is forwarded from here).
            if let RData::CNAME(CNAME(target)) = &cname.data {
                let target_lower = target.to_lowercase();
                if depth < MAX_CNAME_CHAIN && self.cfg.zone.zone_of(&target_lower) {
                    let next = self.lookup_in_zone(target, &target_lower, qtype, depth + 1);
                    answer.rcode = next.rcode;
                    answer.answers.extend(next.answers);
                    answer.authorities = next.authorities;
                    answer.additionals = next.additionals;
                }
            }
            return answer;
        }
        let answers: Vec<Record> = records
            .into_iter()
            .filter(|r| qtype == RecordType::ANY || r.record_type() == qtype)
            .collect();
        if answers.is_empty() {
            return self.negative(ResponseCode::NoError);
        }
        let has_srv = answers.iter().any(|r| r.record_type() == RecordType::SRV);
        Answer {
            rcode: ResponseCode::NoError,
            authoritative: true,
            answers,
            authorities: Vec::new(),
            additionals: if has_srv { additionals } else { Vec::new() },
        }
    }

    fn lookup_reverse(&self, qname: &Name, lower: &Name, qtype: RecordType) -> Answer {
        let ip = lower
            .parse_arpa_name()
            .ok()
            .filter(|net| net.prefix_len() == net.max_prefix_len())
            .map(|net| net.addr());
        let Some(targets) = ip.and_then(|ip| self.ptr.get(&ip)) else {
            return Answer {
                rcode: ResponseCode::NXDomain,
                authoritative: false,
                answers: Vec::new(),
                authorities: Vec::new(),
                additionals: Vec::new(),
            };
        };
        let answers = if qtype == RecordType::PTR || qtype == RecordType::ANY {
            let unique: BTreeSet<&Name> = targets.iter().map(|(_, t)| t).collect();
            unique
                .into_iter()
                .map(|t| self.record(qname, RData::PTR(PTR(t.clone()))))
                .collect()
        } else {
            Vec::new()
        };
        Answer {
            rcode: ResponseCode::NoError,
            authoritative: true,
            answers,
            authorities: Vec::new(),
            additionals: Vec::new(),
        }
    }

    /// The records at one name inside the zone (SRV records of a Service name only
    /// when asked for: they are the costly ones).
    fn node(&self, qname: &Name, lower: &Name, qtype: RecordType) -> Node {
        let extra = usize::from(lower.num_labels()) - usize::from(self.cfg.zone.num_labels());
        // Labels below the zone, nearest to the zone first.
        let labels: Vec<&str> = lower
            .iter()
            .take(extra)
            .map(|l| std::str::from_utf8(l).unwrap_or(""))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        match labels.as_slice() {
            [] => Node::Exists {
                records: vec![
                    self.soa(),
                    self.record(
                        qname,
                        RData::NS(NS(Name::from_ascii(format!("ns.dns.{}", self.zone_text))
                            .unwrap_or_default())),
                    ),
                ],
                additionals: Vec::new(),
            },
            ["dns-version"] => Node::Exists {
                records: vec![self.record(
                    qname,
                    RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_string()])),
                )],
                additionals: Vec::new(),
            },
            ["dns"] => Node::empty(),
            ["dns", "ns"] => Node::Exists {
                records: self
                    .own_service_ips()
                    .into_iter()
                    .map(|ip| self.addr(qname, ip))
                    .collect(),
                additionals: Vec::new(),
            },
            ["svc"] | ["pod"] | ["pod", _] => Node::empty(),
            ["svc", ns] => {
                if self.namespaces.contains_key(*ns) {
                    Node::empty()
                } else {
                    Node::NxDomain
                }
            }
            ["svc", ns, svc] => self.service_node(qname, &ServiceKey::new(ns, svc), qtype),
            ["svc", ns, svc, proto] if proto.starts_with('_') => {
                let key = ServiceKey::new(ns, svc);
                match self.services.get(&key) {
                    Some(s) if s.ports.iter().any(|p| p.protocol == proto[1..]) => Node::empty(),
                    _ => Node::NxDomain,
                }
            }
            ["svc", ns, svc, endpoint] => {
                self.endpoint_node(qname, &ServiceKey::new(ns, svc), endpoint)
            }
            ["svc", ns, svc, proto, port] if proto.starts_with('_') && port.starts_with('_') => {
                self.srv_node(
                    qname,
                    &ServiceKey::new(ns, svc),
                    Some((&port[1..], &proto[1..])),
                )
            }
            ["pod", _ns, dashed] => match parse_dashed_ip(dashed) {
                Some(ip) => Node::Exists {
                    records: vec![self.addr(qname, ip)],
                    additionals: Vec::new(),
                },
                None => Node::NxDomain,
            },
            _ => Node::NxDomain,
        }
    }

    fn own_service_ips(&self) -> Vec<IpAddr> {
        let mut out = BTreeSet::new();
        for own in &self.cfg.own_ips {
            for (key, _) in self.ptr.get(own).into_iter().flatten() {
                if let Some(ServiceModel {
                    kind: ServiceKind::ClusterIp(ips),
                    ..
                }) = self.services.get(key)
                {
                    out.extend(ips.iter().copied());
                }
            }
        }
        out.into_iter().collect()
    }

    fn service_node(&self, qname: &Name, key: &ServiceKey, qtype: RecordType) -> Node {
        let Some(svc) = self.services.get(key) else {
            return Node::NxDomain;
        };
        let mut records = Vec::new();
        match &svc.kind {
            ServiceKind::ExternalName(target) => {
                if let Ok(t) = fqdn(target) {
                    records.push(self.record(qname, RData::CNAME(CNAME(t))));
                }
                return Node::Exists {
                    records,
                    additionals: Vec::new(),
                };
            }
            ServiceKind::ClusterIp(ips) => {
                records.extend(ips.iter().map(|ip| self.addr(qname, *ip)));
            }
            ServiceKind::Headless => {
                let mut seen = BTreeSet::new();
                for ep in self.ready_endpoints(key) {
                    for ip in &ep.addresses {
                        if seen.insert(*ip) {
                            records.push(self.addr(qname, *ip));
                        }
                    }
                }
            }
        }
        if !matches!(qtype, RecordType::SRV | RecordType::ANY) {
            return Node::Exists {
                records,
                additionals: Vec::new(),
            };
        }
        if let Node::Exists {
            records: srv,
            additionals,
        } = self.srv_node(qname, key, None)
        {
            records.extend(srv);
            return Node::Exists {
                records,
                additionals,
            };
        }
        Node::Exists {
            records,
            additionals: Vec::new(),
        }
    }

    /// SRV records of a Service: for one named port (`Some((port, proto))`) or for
    /// all of its ports (`None`, a SRV query for the Service name itself).
    fn srv_node(&self, qname: &Name, key: &ServiceKey, port: Option<(&str, &str)>) -> Node {
        let Some(svc) = self.services.get(key) else {
            return Node::NxDomain;
        };
        let Ok(svc_name) = self.service_name(key) else {
            return Node::NxDomain;
        };
        let wanted = |p: &PortModel| match port {
            Some((name, proto)) => !name.is_empty() && p.name == name && p.protocol == proto,
            None => true,
        };
        if !svc.ports.iter().any(wanted) {
            return match port {
                Some(_) => Node::NxDomain,
                None => Node::empty(),
            };
        }
        // (port, target, target address) per SRV record.
        let mut targets: Vec<(u16, Name, Option<IpAddr>)> = Vec::new();
        match &svc.kind {
            ServiceKind::ExternalName(_) => {}
            ServiceKind::ClusterIp(_) => {
                for p in svc.ports.iter().filter(|p| wanted(p)) {
                    targets.push((p.port, svc_name.clone(), None));
                }
            }
            ServiceKind::Headless => {
                // The port of a headless SRV record is the endpoint's (target) port.
                for slice in self.slices_for(key) {
                    for p in slice.ports.iter().filter(|p| wanted(p)) {
                        for ep in slice.endpoints.iter().filter(|e| e.ready) {
                            for ip in &ep.addresses {
                                if let Ok(n) = Name::from_ascii(endpoint_label(ep, *ip))
                                    .and_then(|l| l.append_domain(&svc_name))
                                {
                                    targets.push((p.port, n, Some(*ip)));
                                }
                            }
                        }
                    }
                }
            }
        }
        let weight = u16::try_from(100 / targets.len().max(1))
            .unwrap_or(1)
            .max(1);
        let mut records = Vec::new();
        let mut additionals = Vec::new();
        let mut seen_additional = BTreeSet::new();
        for (port, target, ip) in targets {
            records.push(self.record(qname, RData::SRV(SRV::new(0, weight, port, target.clone()))));
            if !seen_additional.insert(target.clone()) {
                continue;
            }
            match (ip, &svc.kind) {
                (Some(ip), _) => additionals.push(self.addr(&target, ip)),
                (None, ServiceKind::ClusterIp(ips)) => {
                    additionals.extend(ips.iter().map(|ip| self.addr(&target, *ip)));
                }
                _ => {}
            }
        }
        Node::Exists {
            records,
            additionals,
        }
    }

    fn endpoint_node(&self, qname: &Name, key: &ServiceKey, label: &str) -> Node {
        match self.services.get(key) {
            Some(s) if !matches!(s.kind, ServiceKind::ExternalName(_)) => {}
            _ => return Node::NxDomain,
        }
        let mut seen = BTreeSet::new();
        let mut records = Vec::new();
        for ep in self.ready_endpoints(key) {
            for ip in &ep.addresses {
                if endpoint_label(ep, *ip) == label && seen.insert(*ip) {
                    records.push(self.addr(qname, *ip));
                }
            }
        }
        if records.is_empty() {
            Node::NxDomain
        } else {
            Node::Exists {
                records,
                additionals: Vec::new(),
            }
        }
    }
}

/// The DNS label of one endpoint address: its hostname, or the address with `-` for
/// `.` and `:` (CoreDNS's default endpoint naming).
pub fn endpoint_label(ep: &EndpointModel, ip: IpAddr) -> String {
    match &ep.hostname {
        Some(h) => h.clone(),
        None => dashed_ip(ip),
    }
}

/// `10.244.0.5` -> `10-244-0-5`; `fd00::5` -> `fd00--5`.
pub fn dashed_ip(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The inverse of [`dashed_ip`], for pod names: `10-244-0-5` -> 10.244.0.5.
pub fn parse_dashed_ip(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label
            .replace('-', ".")
            .parse::<std::net::Ipv4Addr>()
            .ok()
            .map(IpAddr::V4)
    } else {
        label
            .replace('-', ":")
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    }
}
