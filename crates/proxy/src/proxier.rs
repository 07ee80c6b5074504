//! The proxier's state: the Services, EndpointSlices and Node it has seen, the desired
//! ruleset kept up to date per changed Service, and a model of what is applied. It
//! plans transactions (full or incremental) and is told whether they were applied; it
//! runs nothing itself, so it is tested without nftables.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::net::IpFamily;
use crate::render::{self, ExistingObjects};
use crate::rules::{
    ProxyConfig, Ruleset, base_rules, primary_node_ip, service_key, service_key_of_slice,
    service_rules,
};

/// The annotation the endpoint controllers put on the EndpointSlices they write: the
/// time of the Pod or Service change that caused the write.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// One EndpointSlice change's trigger time, waiting to be programmed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TriggerTime {
    /// The Service key (`namespace/name`).
    service: String,
    /// The slice's `addressType`: the family whose proxier programs it.
    address_type: String,
    at: SystemTime,
}

/// A transaction to run, and what it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncPlan {
    /// The `nft -f` input; empty when nothing changed.
    pub transaction: String,
    pub full: bool,
    /// Services whose rules the transaction rewrites.
    pub changed_services: Vec<String>,
}

/// The API objects one family's proxier has seen (Services, EndpointSlices, this Node,
/// the host's addresses) and which Services changed since their rules were last
/// computed. Both backends' proxiers ([`Proxier`] for nftables,
/// [`crate::iptables_proxier::IptablesProxier`]) keep one; the informers feed it.
#[derive(Debug)]
pub struct ObjectCache {
    services: BTreeMap<String, Arc<Service>>,
    /// Service key -> slice name -> slice.
    slices: BTreeMap<String, BTreeMap<String, Arc<EndpointSlice>>>,
    /// Slice `namespace/name` -> the Service key it was filed under.
    slice_owner: HashMap<String, String>,
    node: Option<Arc<Node>>,
    host_addresses: Vec<IpAddr>,
    /// Services whose desired rules must be recomputed.
    dirty: BTreeSet<String>,
    base_dirty: bool,
    /// When this cache was made: older trigger times are not measured (upstream's
    /// `trackerStartTime`).
    started: SystemTime,
    /// Trigger times of EndpointSlice changes not yet taken into a sync plan (upstream's
    /// `lastChangeTriggerTimes`).
    trigger_times: Vec<TriggerTime>,
    /// Trigger times of changes a planned sync includes, until a sync succeeds.
    in_flight: Vec<TriggerTime>,
}

impl Default for ObjectCache {
    fn default() -> Self {
        ObjectCache {
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            slice_owner: HashMap::new(),
            node: None,
            host_addresses: Vec::new(),
            dirty: BTreeSet::new(),
            // The base rules are computed once before the first sync.
            base_dirty: true,
            started: SystemTime::now(),
            trigger_times: Vec::new(),
            in_flight: Vec::new(),
        }
    }
}

/// The slice's `endpoints.kubernetes.io/last-change-trigger-time`, if set and valid
/// (RFC 3339, as upstream's `getLastChangeTriggerTime` parses it).
pub fn last_change_trigger_time(slice: &EndpointSlice) -> Option<SystemTime> {
    let value = slice
        .metadata
        .annotations
        .as_ref()?
        .get(LAST_CHANGE_TRIGGER_TIME)?;
    match value.parse::<k8s_openapi::jiff::Timestamp>() {
        Ok(t) => Some(SystemTime::from(t)),
        Err(e) => {
            tracing::error!(value = %value, error = %e, "invalid {LAST_CHANGE_TRIGGER_TIME} annotation");
            None
        }
    }
}

/// Whether two versions of a slice differ in what the rules are made from.
fn same_endpoints(a: &EndpointSlice, b: &EndpointSlice) -> bool {
    a.address_type == b.address_type && a.endpoints == b.endpoints && a.ports == b.ports
}

impl ObjectCache {
    /// A Service was added or changed.
    pub fn service_updated(&mut self, svc: Arc<Service>) {
        let key = service_key(&svc);
        self.services.insert(key.clone(), svc);
        self.dirty.insert(key);
    }

    pub fn service_deleted(&mut self, svc: &Service) {
        let key = service_key(svc);
        self.services.remove(&key);
        self.dirty.insert(key);
    }

    /// An EndpointSlice was added or changed. A change of its endpoints carrying a
    /// trigger time later than this cache's start is measured once programmed
    /// (upstream's `EndpointSliceUpdate`).
    pub fn slice_updated(&mut self, slice: Arc<EndpointSlice>) {
        let id = slice_id(&slice);
        let previous = self.slice_owner.get(&id).and_then(|key| {
            let name = slice.metadata.name.as_deref().unwrap_or_default();
            self.slices.get(key)?.get(name).cloned()
        });
        let changed = previous.is_none_or(|old| !same_endpoints(&old, &slice));
        self.forget_slice(&id);
        if let Some(key) = service_key_of_slice(&slice) {
            if changed
                && let Some(at) = last_change_trigger_time(&slice)
                && at > self.started
            {
                self.trigger_times.push(TriggerTime {
                    service: key.clone(),
                    address_type: slice.address_type.clone(),
                    at,
                });
            }
            let name = slice.metadata.name.clone().unwrap_or_default();
            self.slices
                .entry(key.clone())
                .or_default()
                .insert(name, slice);
            self.slice_owner.insert(id, key.clone());
            self.dirty.insert(key);
        }
    }

    /// An EndpointSlice went away. Its Service's pending trigger times are dropped: a
    /// deletion's annotation is the time of the slice's last update, not of the change
    /// that deleted it (as upstream).
    pub fn slice_deleted(&mut self, slice: &EndpointSlice) {
        if let Some(key) = service_key_of_slice(slice) {
            self.trigger_times.retain(|t| t.service != key);
        }
        self.forget_slice(&slice_id(slice));
    }

    fn forget_slice(&mut self, id: &str) {
        let Some(key) = self.slice_owner.remove(id) else {
            return;
        };
        let name = id.split_once('/').map(|(_, n)| n).unwrap_or(id);
        if let Some(m) = self.slices.get_mut(&key) {
            m.remove(name);
            if m.is_empty() {
                self.slices.remove(&key);
            }
        }
        self.dirty.insert(key);
    }

    /// This node changed (or went away: `None`).
    pub fn node_updated(&mut self, node: Option<Arc<Node>>) {
        self.node = node;
        self.base_dirty = true;
    }

    /// The host's addresses (for `--nodeport-addresses` CIDRs).
    pub fn set_host_addresses(&mut self, addrs: Vec<IpAddr>) {
        if addrs != self.host_addresses {
            self.host_addresses = addrs;
            self.base_dirty = true;
        }
    }

    pub fn node(&self) -> Option<&Node> {
        self.node.as_deref()
    }

    pub fn host_addresses(&self) -> &[IpAddr] {
        &self.host_addresses
    }

    /// The Service with key `namespace/name`, if seen.
    pub fn service(&self, key: &str) -> Option<&Service> {
        self.services.get(key).map(Arc::as_ref)
    }

    /// The EndpointSlices filed under Service `key`.
    pub fn slices_of(&self, key: &str) -> Vec<&EndpointSlice> {
        self.slices
            .get(key)
            .into_iter()
            .flat_map(|m| m.values().map(|s| s.as_ref()))
            .collect()
    }

    /// The Services changed since the last call (their rules must be recomputed). The
    /// trigger times of the changes move with them into the sync being planned.
    pub fn take_dirty(&mut self) -> BTreeSet<String> {
        self.in_flight.append(&mut self.trigger_times);
        std::mem::take(&mut self.dirty)
    }

    /// A sync succeeded: the trigger times of the EndpointSlice changes of `family` it
    /// programmed, to measure (upstream's `LastChangeTriggerTimes` of the sync). Those
    /// of a failed sync stay until one succeeds; the other family's are its proxier's.
    pub fn programmed(&mut self, family: IpFamily) -> Vec<SystemTime> {
        self.in_flight
            .drain(..)
            .filter(|t| t.address_type == family.k8s())
            .map(|t| t.at)
            .collect()
    }

    /// Keeps `config.node_ip` on this node's IP of the family (the firewall rules of
    /// `loadBalancerSourceRanges` name it); when it changes every Service's rules are
    /// recomputed. A Node without such an address leaves the configured one.
    pub fn follow_node_ip(&mut self, config: &mut ProxyConfig) {
        if let Some(ip) = primary_node_ip(self.node.as_deref(), config.family)
            && config.node_ip != Some(ip)
        {
            config.node_ip = Some(ip);
            self.dirty.extend(self.services.keys().cloned());
        }
    }

    /// Whether the node or host addresses changed since the last call.
    pub fn take_base_dirty(&mut self) -> bool {
        std::mem::take(&mut self.base_dirty)
    }

    /// Brings one mode's desired rules up to date with what changed: the base part
    /// (`base`, made by `base_rules`) when the node or host addresses did, and each
    /// changed Service's rules in `services` (by `service_rules`; a Service that gets
    /// none is removed), whose keys go to `pending` for the next apply.
    pub fn recompute<B, S>(
        &mut self,
        config: &mut ProxyConfig,
        base: &mut B,
        services: &mut BTreeMap<String, S>,
        pending: &mut BTreeSet<String>,
        base_rules: impl Fn(&ProxyConfig, Option<&Node>, &[IpAddr]) -> B,
        service_rules: impl Fn(&Service, &[&EndpointSlice], &ProxyConfig) -> Option<S>,
    ) {
        if self.take_base_dirty() {
            self.follow_node_ip(config);
            *base = base_rules(config, self.node(), self.host_addresses());
        }
        for key in self.take_dirty() {
            let rules = self
                .service(&key)
                .and_then(|svc| service_rules(svc, &self.slices_of(&key), config));
            match rules {
                Some(r) => {
                    services.insert(key.clone(), r);
                }
                None => {
                    services.remove(&key);
                }
            }
            pending.insert(key);
        }
    }

    /// What the service health servers serve (upstream's `HealthCheckNodePorts` and
    /// `LocalReadyEndpoints`): per `healthCheckNodePort`, its Service and the ready
    /// endpoints of it on this node (counted per Service port, as upstream), and the
    /// addresses to listen on (the family's unspecified address: every one).
    pub fn service_health(&self, config: &ProxyConfig) -> crate::service_health::HealthPlan {
        let family = config.family;
        let mut services = BTreeMap::new();
        for (key, svc) in &self.services {
            let Some(port) = svc
                .spec
                .as_ref()
                .and_then(|s| s.health_check_node_port)
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
            else {
                continue;
            };
            let slices = self.slices_of(key);
            let local_endpoints = crate::model::service_ports(svc, family)
                .iter()
                .map(|p| {
                    crate::model::endpoints_for(p, &slices, family, &config.hostname)
                        .iter()
                        .filter(|e| e.local && e.ready)
                        .count()
                })
                .sum();
            services.insert(
                port,
                crate::service_health::ServedService {
                    namespace: svc.metadata.namespace.clone().unwrap_or_default(),
                    name: svc.metadata.name.clone().unwrap_or_default(),
                    local_endpoints,
                },
            );
        }
        let mut listen =
            crate::rules::nodeport_ips(config, self.node.as_deref(), &self.host_addresses);
        if listen.is_empty() {
            listen.push(match family {
                crate::net::IpFamily::V4 => IpAddr::from([0u8; 4]),
                crate::net::IpFamily::V6 => IpAddr::from([0u16; 8]),
            });
        }
        crate::service_health::HealthPlan { listen, services }
    }
}

/// One family's proxier state (upstream's `Proxier` minus the IO).
#[derive(Debug)]
pub struct Proxier {
    config: ProxyConfig,
    objects: ObjectCache,
    desired: Ruleset,
    /// What the last successful transaction left in the kernel; `None` until the first
    /// full sync and after a failure (the next sync is full).
    applied: Option<Ruleset>,
    /// Services recomputed since the last successful apply (what an incremental
    /// transaction must look at).
    pending: BTreeSet<String>,
}

impl Proxier {
    pub fn new(config: ProxyConfig) -> Self {
        let desired = Ruleset {
            family: config.family,
            base: base_rules(&config, None, &[]),
            services: BTreeMap::new(),
        };
        Proxier {
            config,
            objects: ObjectCache::default(),
            desired,
            applied: None,
            pending: BTreeSet::new(),
        }
    }

    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// The objects seen (what the informers feed).
    pub fn objects_mut(&mut self) -> &mut ObjectCache {
        &mut self.objects
    }

    /// A Service was added or changed.
    pub fn service_updated(&mut self, svc: Arc<Service>) {
        self.objects.service_updated(svc);
    }

    pub fn service_deleted(&mut self, svc: &Service) {
        self.objects.service_deleted(svc);
    }

    /// An EndpointSlice was added or changed.
    pub fn slice_updated(&mut self, slice: Arc<EndpointSlice>) {
        self.objects.slice_updated(slice);
    }

    pub fn slice_deleted(&mut self, slice: &EndpointSlice) {
        self.objects.slice_deleted(slice);
    }

    /// This node changed (or went away: `None`).
    pub fn node_updated(&mut self, node: Option<Arc<Node>>) {
        self.objects.node_updated(node);
    }

    /// The host's addresses (for `--nodeport-addresses` CIDRs).
    pub fn set_host_addresses(&mut self, addrs: Vec<IpAddr>) {
        self.objects.set_host_addresses(addrs);
    }

    /// Whether the next sync must be a full one (first sync, after a failure, or when
    /// the base changed); the caller then lists the table's objects for [`Self::plan`].
    pub fn next_is_full(&mut self) -> bool {
        self.recompute();
        match &self.applied {
            None => true,
            Some(applied) => render::base_changed(applied, &self.desired),
        }
    }

    /// Forces the next sync to be full (periodic full resync).
    pub fn invalidate(&mut self) {
        self.applied = None;
    }

    /// What the service health servers serve (see [`ObjectCache::service_health`]).
    pub fn service_health(&self) -> crate::service_health::HealthPlan {
        self.objects.service_health(&self.config)
    }

    pub fn service_count(&self) -> usize {
        self.desired.services.len()
    }

    /// Recomputes the desired rules of every changed Service (and the base).
    fn recompute(&mut self) {
        self.objects.recompute(
            &mut self.config,
            &mut self.desired.base,
            &mut self.desired.services,
            &mut self.pending,
            base_rules,
            service_rules,
        );
    }

    /// Plans the next transaction. A full sync needs the table's current objects
    /// (`existing`, asked for only then); an incremental one touches only the changed
    /// Services.
    pub fn plan(&mut self, existing: Option<&ExistingObjects>) -> SyncPlan {
        if self.next_is_full() {
            let empty = ExistingObjects::default();
            return SyncPlan {
                transaction: render::full_sync(&self.desired, existing.unwrap_or(&empty)),
                full: true,
                changed_services: self.desired.services.keys().cloned().collect(),
            };
        }
        let Some(applied) = &self.applied else {
            unreachable!("checked above")
        };
        let changed: Vec<String> = self
            .pending
            .iter()
            .filter(|k| applied.services.get(*k) != self.desired.services.get(*k))
            .cloned()
            .collect();
        SyncPlan {
            transaction: render::incremental(applied, &self.desired, &changed),
            full: false,
            changed_services: changed,
        }
    }

    /// The planned transaction was applied: the model follows.
    pub fn applied(&mut self, plan: &SyncPlan) {
        match (&mut self.applied, plan.full) {
            (Some(applied), false) => {
                for key in std::mem::take(&mut self.pending) {
                    match self.desired.services.get(&key) {
                        Some(r) => {
                            applied.services.insert(key, r.clone());
                        }
                        None => {
                            applied.services.remove(&key);
                        }
                    }
                }
                applied.base = self.desired.base.clone();
            }
            _ => {
                self.applied = Some(self.desired.clone());
                self.pending.clear();
            }
        }
    }

    /// The planned transaction failed: nothing is known about the kernel any more.
    pub fn failed(&mut self) {
        self.applied = None;
    }

    /// The desired ruleset (for tests and debugging).
    pub fn desired(&self) -> &Ruleset {
        &self.desired
    }
}

fn slice_id(slice: &EndpointSlice) -> String {
    format!(
        "{}/{}",
        slice.metadata.namespace.as_deref().unwrap_or_default(),
        slice.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::IpFamily;
    use serde_json::json;

    use crate::test_objects::{slice, svc};

    #[test]
    fn first_sync_is_full_then_incremental_per_service() {
        let mut p = Proxier::new(ProxyConfig::new(IpFamily::V4, "n"));
        p.service_updated(svc("a", "10.96.0.1"));
        p.service_updated(svc("b", "10.96.0.2"));
        p.slice_updated(slice("a", "a-1", &["10.244.0.1"]));
        let plan = p.plan(None);
        assert!(plan.full);
        assert!(plan.transaction.starts_with("add table ip kube-proxy"));
        p.applied(&plan);

        // Nothing changed: an empty incremental plan.
        let plan = p.plan(None);
        assert!(!plan.full && plan.transaction.is_empty(), "{plan:?}");
        p.applied(&plan);

        p.slice_updated(slice("b", "b-1", &["10.244.0.2"]));
        let plan = p.plan(None);
        assert!(!plan.full);
        assert_eq!(plan.changed_services, ["ns/b"]);
        assert!(plan.transaction.contains("dnat to 10.244.0.2:8080"));
        assert!(!plan.transaction.contains("10.244.0.1"));
        p.applied(&plan);

        // A Service update that changes nothing in the rules plans nothing.
        p.service_updated(svc("b", "10.96.0.2"));
        assert!(p.plan(None).transaction.is_empty());

        // Slice deleted: b goes back to rejecting.
        p.slice_deleted(&slice("b", "b-1", &[]));
        let plan = p.plan(None);
        assert!(
            plan.transaction.contains("no-endpoint-services"),
            "{}",
            plan.transaction
        );

        // A failed apply makes the next sync full.
        p.failed();
        assert!(p.next_is_full());
        assert!(p.plan(None).full);
    }

    /// `s` with the trigger-time annotation `at` (and address type `family`).
    fn triggered(s: Arc<EndpointSlice>, at: SystemTime, family: &str) -> Arc<EndpointSlice> {
        let mut s = (*s).clone();
        let stamp = k8s_openapi::jiff::Timestamp::try_from(at).unwrap();
        s.metadata.annotations =
            Some([(LAST_CHANGE_TRIGGER_TIME.to_string(), stamp.to_string())].into());
        s.address_type = family.into();
        Arc::new(s)
    }

    #[test]
    fn trigger_times_are_measured_once_their_change_is_programmed() {
        let mut p = Proxier::new(ProxyConfig::new(IpFamily::V4, "n"));
        let start = SystemTime::now();
        let later = |ms: u64| start + std::time::Duration::from_millis(ms);
        p.service_updated(svc("a", "10.96.0.1"));
        // A trigger older than the proxier (the initial list) is not measured; nor is
        // a slice without the annotation, nor one with a malformed one.
        let old = start - std::time::Duration::from_secs(60);
        p.slice_updated(triggered(slice("a", "a-1", &["10.244.0.1"]), old, "IPv4"));
        p.slice_updated(slice("a", "a-2", &["10.244.0.2"]));
        let mut bad = (*slice("a", "a-3", &["10.244.0.3"])).clone();
        bad.metadata.annotations = Some(
            [(
                LAST_CHANGE_TRIGGER_TIME.to_string(),
                "yesterday".to_string(),
            )]
            .into(),
        );
        p.slice_updated(Arc::new(bad));
        let plan = p.plan(None);
        p.applied(&plan);
        assert!(p.objects_mut().programmed(IpFamily::V4).is_empty());

        // A change with a trigger time: measured by the sync that programs it.
        let t1 = later(1);
        p.slice_updated(triggered(slice("a", "a-1", &["10.244.0.9"]), t1, "IPv4"));
        assert!(
            p.objects_mut().programmed(IpFamily::V4).is_empty(),
            "not planned yet"
        );
        let plan = p.plan(None);
        assert_eq!(plan.changed_services, ["ns/a"]);
        // The sync failed: nothing is measured; the next successful one measures it.
        p.failed();
        let plan = p.plan(None);
        assert!(plan.full);
        p.applied(&plan);
        assert_eq!(p.objects_mut().programmed(IpFamily::V4), [t1]);
        assert!(p.objects_mut().programmed(IpFamily::V4).is_empty(), "once");

        // An update that changes no endpoint (only the annotation) is no change.
        p.slice_updated(triggered(
            slice("a", "a-1", &["10.244.0.9"]),
            later(2),
            "IPv4",
        ));
        p.plan(None);
        assert!(p.objects_mut().programmed(IpFamily::V4).is_empty());

        // Two changes before one sync: both measured.
        let (t3, t4) = (later(3), later(4));
        p.slice_updated(triggered(slice("a", "a-1", &["10.244.0.7"]), t3, "IPv4"));
        p.slice_updated(triggered(slice("a", "a-2", &["10.244.0.8"]), t4, "IPv4"));
        p.plan(None);
        assert_eq!(p.objects_mut().programmed(IpFamily::V4), [t3, t4]);

        // A slice deleted before the sync drops its Service's pending trigger times.
        p.slice_updated(triggered(
            slice("a", "a-1", &["10.244.0.6"]),
            later(5),
            "IPv4",
        ));
        p.slice_deleted(&slice("a", "a-2", &[]));
        p.plan(None);
        assert!(p.objects_mut().programmed(IpFamily::V4).is_empty());

        // The other family's slices are its proxier's to measure.
        p.slice_updated(triggered(slice("a", "a-6", &["fd00::6"]), later(6), "IPv6"));
        p.plan(None);
        assert!(p.objects_mut().programmed(IpFamily::V4).is_empty());
    }

    #[test]
    fn node_ip_follows_the_node_and_recomputes_services() {
        let mut p = Proxier::new(ProxyConfig::new(IpFamily::V4, "n"));
        let lb: Service = serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "lb"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9",
                     "loadBalancerSourceRanges": ["192.168.0.0/24"],
                     "ports": [{"port": 80}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}},
        }))
        .unwrap();
        p.service_updated(Arc::new(lb));
        p.slice_updated(slice("lb", "lb-1", &["10.244.0.1"]));
        let plan = p.plan(None);
        assert!(
            plan.transaction
                .contains("ip saddr != { 192.168.0.0/24 } drop"),
            "{}",
            plan.transaction
        );
        p.applied(&plan);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"addresses": [{"type": "ExternalIP", "address": "203.0.113.1"},
                                     {"type": "InternalIP", "address": "fd00::4"},
                                     {"type": "InternalIP", "address": "192.168.0.4"}]},
        }))
        .unwrap();
        p.node_updated(Some(Arc::new(node)));
        let plan = p.plan(None);
        assert_eq!(p.config().node_ip, Some("192.168.0.4".parse().unwrap()));
        assert_eq!(plan.changed_services, ["ns/lb"]);
        assert!(
            plan.transaction
                .contains("ip saddr != { 192.168.0.0/24, 198.51.100.7 } drop"),
            "{}",
            plan.transaction
        );
    }

    #[test]
    fn node_change_updates_node_port_ips_incrementally() {
        let mut p = Proxier::new(ProxyConfig::new(IpFamily::V4, "n"));
        let plan = p.plan(None);
        p.applied(&plan);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.4"}]},
        }))
        .unwrap();
        p.node_updated(Some(Arc::new(node)));
        let plan = p.plan(None);
        assert!(!plan.full);
        assert_eq!(
            plan.transaction,
            "add element ip kube-proxy nodeport-ips { 192.168.0.4 }\n"
        );
    }
}
