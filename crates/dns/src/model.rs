//! The little of a Service and an EndpointSlice that DNS needs, taken out of the API
//! objects once per watch event so lookups never touch k8s-openapi types.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `namespace/name` of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        ServiceKey {
            namespace: namespace.to_ascii_lowercase(),
            name: name.to_ascii_lowercase(),
        }
    }
}

/// A named (or unnamed: empty name) port with its protocol in lower case (`tcp`,
/// `udp`, `sctp`), as SRV owner names spell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortModel {
    pub name: String,
    pub protocol: String,
    pub port: u16,
}

/// What a Service contributes to DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceKind {
    /// A ClusterIP (or NodePort/LoadBalancer) Service: its cluster IPs.
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the ready endpoint addresses answer.
    Headless,
    /// `type: ExternalName`: a CNAME to this name.
    ExternalName(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceModel {
    pub kind: ServiceKind,
    pub ports: Vec<PortModel>,
}

/// One endpoint of a slice: its addresses, whether DNS should publish it, and its
/// DNS hostname (`hostname` field, set for pods with `spec.hostname` + `subdomain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointModel {
    pub addresses: Vec<IpAddr>,
    pub ready: bool,
    pub hostname: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceModel {
    /// The Service the slice belongs to (its `kubernetes.io/service-name` label).
    pub service: ServiceKey,
    pub ports: Vec<PortModel>,
    pub endpoints: Vec<EndpointModel>,
}

fn protocol(p: Option<&str>) -> String {
    p.unwrap_or("TCP").to_ascii_lowercase()
}

/// The DNS view of a Service, or `None` when it publishes nothing (no cluster IP
/// assigned yet, or an ExternalName without a name).
pub fn service_model(svc: &Service) -> Option<ServiceModel> {
    let spec = svc.spec.as_ref()?;
    let ports = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(PortModel {
                name: p.name.clone().unwrap_or_default().to_ascii_lowercase(),
                protocol: protocol(p.protocol.as_deref()),
                port: u16::try_from(p.port).ok()?,
            })
        })
        .collect();
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        let target = spec.external_name.as_deref().unwrap_or("").trim();
        if target.is_empty() {
            return None;
        }
        ServiceKind::ExternalName(target.trim_end_matches('.').to_ascii_lowercase())
    } else {
        let mut ips: Vec<&str> = spec
            .cluster_ips
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if ips.is_empty()
            && let Some(ip) = spec.cluster_ip.as_deref()
        {
            ips.push(ip);
        }
        if ips.iter().any(|ip| ip.eq_ignore_ascii_case("None")) {
            ServiceKind::Headless
        } else {
            let parsed: Vec<IpAddr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
            if parsed.is_empty() {
                return None;
            }
            ServiceKind::ClusterIp(parsed)
        }
    };
    Some(ServiceModel { kind, ports })
}

/// The DNS view of an EndpointSlice, or `None` for slices DNS ignores (no Service
/// label, or `addressType: FQDN`).
pub fn slice_model(slice: &EndpointSlice) -> Option<SliceModel> {
    if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
        return None;
    }
    let namespace = slice.metadata.namespace.as_deref().unwrap_or("default");
    let service = slice
        .metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)
        .filter(|s| !s.is_empty())?;
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(PortModel {
                name: p.name.clone().unwrap_or_default().to_ascii_lowercase(),
                protocol: protocol(p.protocol.as_deref()),
                port: u16::try_from(p.port?).ok()?,
            })
        })
        .collect();
    let endpoints = slice
        .endpoints
        .iter()
        .map(|e| EndpointModel {
            addresses: e.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
            // The API says a nil `ready` means ready; the EndpointSlice controller
            // already sets it for publishNotReadyAddresses Services.
            ready: e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            hostname: e
                .hostname
                .as_deref()
                .filter(|h| !h.is_empty())
                .map(str::to_ascii_lowercase),
        })
        .collect();
    Some(SliceModel {
        service: ServiceKey::new(namespace, service),
        ports,
        endpoints,
    })
}
