//! The ServiceCIDR controller (upstream `pkg/controller/servicecidrs`, the
//! kube-controller-manager's `service-cidr-controller`).
//!
//! Every networking.k8s.io/v1 ServiceCIDR not being deleted gets the
//! [`SERVICE_CIDR_PROTECTION_FINALIZER`] (a strategic-merge patch) and the status
//! condition `Ready=True` ("Kubernetes Service CIDR is ready", server-side applied to
//! `/status` by field manager `service-cidr-controller`, forced). The apiserver's
//! default ServiceCIDR (`kubernetes`) is processed like any other, as upstream.
//!
//! A ServiceCIDR being deleted keeps its finalizer while it would orphan a Service's
//! cluster IP: when one of its prefixes is contained in (or equal to) no other
//! ServiceCIDR's and an IPAddress of the apiserver's allocator
//! (`ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io`) lies in it and in no
//! other ServiceCIDR, it gets `Ready=False`, reason `Terminating`. Otherwise the
//! finalizer goes once [`DELETION_GRACE_PERIOD`] has passed since its
//! deletionTimestamp (time for the apiservers' allocators to stop allocating from it).
//!
//! A ServiceCIDR is looked at again on its own events, when a ServiceCIDR that
//! overlaps it is added (a new parent may unblock it), and when an allocator's
//! IPAddress inside it is added, relabelled or deleted (a deleted one may unblock it).
//! The condition is applied only when its status, reason or message differ from the
//! cached object's (each apply would otherwise move lastTransitionTime and wake the
//! controller again).
//!
//! Pure part: [`Prefix`] (upstream's `netip.Prefix` operations and `PrefixContainsIP`),
//! [`containing_prefix`], [`containing_address`], [`overlapping`],
//! [`orphaned_address`], [`deletion_step`], [`condition_up_to_date`],
//! [`condition_apply`].

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::replicaset::is_not_found;
use crate::{Action, Controller, Result, done_unless_failed};

/// Upstream `ServiceCIDRProtectionFinalizer`.
pub const SERVICE_CIDR_PROTECTION_FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";

/// Upstream `controllerName`: the field manager of the status applies and the events'
/// component.
pub const FIELD_MANAGER: &str = "service-cidr-controller";

/// Upstream `deletionGracePeriod`: how long after its deletionTimestamp a ServiceCIDR
/// keeps its finalizer, so every allocator has seen the deletion before it goes.
pub const DELETION_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Upstream `networkingv1.LabelManagedBy`.
pub const LABEL_MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";

/// Upstream `ipallocator.ControllerName`: the apiserver's ClusterIP allocator.
pub const IP_ALLOCATOR: &str = "ipallocator.k8s.io";

/// Upstream `networkingv1.ServiceCIDRConditionReady`.
pub const CONDITION_READY: &str = "Ready";

/// Upstream `networkingv1.ServiceCIDRReasonTerminating`.
pub const REASON_TERMINATING: &str = "Terminating";

/// The Ready=True message.
pub const READY_MESSAGE: &str = "Kubernetes Service CIDR is ready";

/// The Ready=False message of a ServiceCIDR whose deletion is blocked.
pub const TERMINATING_MESSAGE: &str = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR";

/// An IP prefix: an address and a prefix length (upstream `netip.Prefix`, kept
/// unmasked as parsed; comparisons mask). The arithmetic is `ipnet`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix(IpNet);

impl Prefix {
    /// Upstream `netip.ParsePrefix`: `<address>/<bits>`, the length decimal without
    /// sign or leading zeros and at most the family's width; no zones.
    pub fn parse(s: &str) -> Option<Prefix> {
        let (addr, bits) = s.split_once('/')?;
        if bits.is_empty()
            || !bits.bytes().all(|b| b.is_ascii_digit())
            || (bits.len() > 1 && bits.starts_with('0'))
        {
            return None;
        }
        let bits: u8 = bits.parse().ok()?;
        let addr: IpAddr = addr.parse().ok()?;
        IpNet::new(addr, bits).ok().map(Prefix)
    }

    /// The address as parsed.
    pub fn addr(&self) -> IpAddr {
        self.0.addr()
    }

    /// The prefix length.
    pub fn bits(&self) -> u8 {
        self.0.prefix_len()
    }

    /// Upstream `Prefix.Masked().Addr()`: the network address.
    pub fn network(&self) -> IpAddr {
        self.0.network()
    }

    /// The last address of the prefix (all host bits set; upstream's
    /// `broadcastAddress`).
    pub fn last(&self) -> IpAddr {
        self.0.broadcast()
    }

    /// Upstream `Prefix.Overlaps`: same family, and equal over the shorter prefix
    /// (so one holds the other's network address).
    pub fn overlaps(&self, other: &Prefix) -> bool {
        self.0.contains(&other.network()) || other.0.contains(&self.network())
    }

    /// Upstream `servicecidr.ContainsPrefix`'s test: `other` lies within this prefix
    /// (overlapping, and this one no longer).
    pub fn contains_prefix(&self, other: &Prefix) -> bool {
        self.overlaps(other) && self.bits() <= other.bits()
    }

    /// Upstream `netip.Prefix.Contains`: `ip` is of the family and in the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }

    /// Upstream `servicecidr.PrefixContainsIP`: in the prefix, and neither its network
    /// address nor, for IPv4, its broadcast address (a ServiceCIDR never allocates
    /// those, so a Service holding one is not of that ServiceCIDR).
    pub fn contains_address(&self, ip: IpAddr) -> bool {
        if ip == self.network() || (ip.is_ipv4() && ip == self.last()) {
            return false;
        }
        self.contains(ip)
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The prefixes of `cidr`'s `spec.cidrs` that parse (upstream skips the others).
pub fn prefixes_of(cidr: &ServiceCIDR) -> Vec<Prefix> {
    cidr.spec
        .iter()
        .flat_map(|s| s.cidrs.iter().flatten())
        .filter_map(|c| Prefix::parse(c))
        .collect()
}

fn name_of(cidr: &ServiceCIDR) -> String {
    cidr.metadata.name.clone().unwrap_or_default()
}

/// The names of the ServiceCIDRs among `all` with a prefix for which `matches`.
fn names_where(all: &[Arc<ServiceCIDR>], matches: impl Fn(&Prefix) -> bool) -> BTreeSet<String> {
    all.iter()
        .filter(|c| prefixes_of(c).iter().any(&matches))
        .map(|c| name_of(c))
        .collect()
}

/// Upstream `servicecidr.ContainsPrefix`: the ServiceCIDRs with a prefix containing
/// (or equal to) `prefix`.
pub fn containing_prefix(all: &[Arc<ServiceCIDR>], prefix: &Prefix) -> BTreeSet<String> {
    names_where(all, |p| p.contains_prefix(prefix))
}

/// Upstream `servicecidr.ContainsAddress`: the ServiceCIDRs with a prefix that would
/// allocate `ip` ([`Prefix::contains_address`]).
pub fn containing_address(all: &[Arc<ServiceCIDR>], ip: IpAddr) -> BTreeSet<String> {
    names_where(all, |p| p.contains_address(ip))
}

/// Upstream `overlappingServiceCIDRs`: the ServiceCIDRs with a prefix overlapping one
/// of `cidr`'s (those containing it or contained in it; `cidr` itself when listed).
pub fn overlapping(all: &[Arc<ServiceCIDR>], cidr: &ServiceCIDR) -> BTreeSet<String> {
    let own = prefixes_of(cidr);
    names_where(all, |p| own.iter().any(|o| o.overlaps(p)))
}

/// The address of an IPAddress of the apiserver's allocator (upstream
/// `containingServiceCIDRs`' filter); `None` for others and unparsable names.
pub fn allocated_address(ip: &IPAddress) -> Option<IpAddr> {
    let managed_by = ip.metadata.labels.as_ref()?.get(LABEL_MANAGED_BY)?;
    if managed_by != IP_ALLOCATOR {
        return None;
    }
    ip.metadata.name.as_deref()?.parse().ok()
}

/// The ServiceCIDRs an IPAddress event concerns: those that would allocate an
/// allocator's address (it may block or unblock their deletion).
pub fn containing_ip_address(all: &[Arc<ServiceCIDR>], ip: &IPAddress) -> BTreeSet<String> {
    match allocated_address(ip) {
        Some(address) => containing_address(all, address),
        None => BTreeSet::new(),
    }
}

/// Upstream `canDeleteCIDR`, negated: the first allocator's address that deleting
/// `cidr` would orphan. Nothing when every prefix of `cidr` is contained in another
/// ServiceCIDR's (or equal to it); else an address of `ips` that only `cidr` would
/// allocate. (Upstream lists the addresses by their family label; an address is only
/// ever contained in prefixes of its own family, so looking at all is the same.)
pub fn orphaned_address(
    cidr: &ServiceCIDR,
    all: &[Arc<ServiceCIDR>],
    ips: &[Arc<IPAddress>],
) -> Option<IpAddr> {
    let name = name_of(cidr);
    let only_self =
        |names: &BTreeSet<String>| names.is_empty() || (names.len() == 1 && names.contains(&name));
    let own = prefixes_of(cidr);
    let has_parent = own.iter().all(|p| !only_self(&containing_prefix(all, p)));
    if has_parent {
        return None;
    }
    ips.iter()
        .filter_map(|ip| allocated_address(ip))
        .filter(|a| own.iter().any(|p| p.addr().is_ipv4() == a.is_ipv4()))
        .find(|a| {
            let names = containing_address(all, *a);
            names.len() == 1 && names.contains(&name)
        })
}

/// What a ServiceCIDR being deleted needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionStep {
    /// Deleting it would orphan this address: Ready=False, Terminating; keep the
    /// finalizer.
    Blocked(IpAddr),
    /// Nothing depends on it, but the grace period runs this much longer.
    Wait(Duration),
    /// The finalizer may go.
    Release,
}

/// Upstream `sync` for a ServiceCIDR with a deletionTimestamp, at `now`.
pub fn deletion_step(
    cidr: &ServiceCIDR,
    all: &[Arc<ServiceCIDR>],
    ips: &[Arc<IPAddress>],
    now: Timestamp,
) -> DeletionStep {
    if let Some(address) = orphaned_address(cidr, all, ips) {
        return DeletionStep::Blocked(address);
    }
    let Some(Time(deleted)) = &cidr.metadata.deletion_timestamp else {
        return DeletionStep::Release;
    };
    let elapsed = now.as_millisecond() - deleted.as_millisecond();
    let left = DELETION_GRACE_PERIOD.as_millis() as i64 - elapsed;
    if left > 0 {
        DeletionStep::Wait(Duration::from_millis(left as u64))
    } else {
        DeletionStep::Release
    }
}

/// Upstream `updateConditionIfNeeded`'s test: the Ready condition already has this
/// status, reason and message.
pub fn condition_up_to_date(cidr: &ServiceCIDR, status: &str, reason: &str, message: &str) -> bool {
    cidr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == CONDITION_READY))
        .is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
}

/// The server-side apply configuration of `name`'s Ready condition (upstream's
/// `ServiceCIDRStatus().WithConditions(...)`), transitioned at `now`.
pub fn condition_apply(
    name: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": name},
        "status": {"conditions": [{
            "type": CONDITION_READY,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": Time(now),
        }]},
    })
}

fn has_finalizer(cidr: &ServiceCIDR) -> bool {
    cidr.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == SERVICE_CIDR_PROTECTION_FINALIZER)
}

/// The service-cidr controller.
pub struct ServiceCidrController {
    client: kube::Client,
    cidrs: Store<ServiceCIDR>,
    ips: Store<IPAddress>,
    recorder: Arc<dyn EventSink>,
}

impl ServiceCidrController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        recorder: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(ServiceCidrController {
            client,
            cidrs: factory.informer::<ServiceCIDR>().store(),
            ips: factory.informer::<IPAddress>().store(),
            recorder,
        })
    }

    fn api(&self) -> Api<ServiceCIDR> {
        Api::all(self.client.clone())
    }

    /// Upstream `updateConditionIfNeeded`: applies the Ready condition unless the
    /// cached object has it already.
    async fn apply_condition_if_needed(
        &self,
        cidr: &ServiceCIDR,
        status: &str,
        reason: &str,
        message: &str,
    ) -> kube::Result<()> {
        if condition_up_to_date(cidr, status, reason, message) {
            return Ok(());
        }
        let name = name_of(cidr);
        tracing::debug!(
            service_cidr = name,
            status,
            reason,
            "updating the Ready condition"
        );
        let body = condition_apply(&name, status, reason, message, Timestamp::now());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match self
            .api()
            .patch_status(&name, &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Upstream `addServiceCIDRFinalizerIfNeeded` / `removeServiceCIDRFinalizerIfNeeded`:
    /// a strategic-merge patch of `metadata.finalizers`.
    async fn patch_finalizer(&self, name: &str, add: bool) -> kube::Result<ServiceCIDR> {
        let patch = if add {
            json!({"metadata": {"finalizers": [SERVICE_CIDR_PROTECTION_FINALIZER]}})
        } else {
            json!({"metadata": {
                "$deleteFromPrimitiveList/finalizers": [SERVICE_CIDR_PROTECTION_FINALIZER]}})
        };
        self.api()
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
    }
}

fn enqueue_all(queue: &WorkQueue<String>, names: BTreeSet<String>) {
    for name in names {
        queue.add(name);
    }
}

#[async_trait::async_trait]
impl Controller for ServiceCidrController {
    fn name(&self) -> &'static str {
        FIELD_MANAGER
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let (q, cidrs) = (queue.clone(), self.cidrs.clone());
        factory.informer::<ServiceCIDR>().add_event_handler(
            move |n: Notification<ServiceCIDR>| match n {
                // A new ServiceCIDR may be the parent that unblocks a deletion.
                Notification::Added { obj, .. } => {
                    q.add(object_key(&*obj));
                    enqueue_all(&q, overlapping(&cidrs.list(), &obj));
                }
                Notification::Updated { new, .. } => q.add(object_key(&*new)),
                // Gone: nothing left to reconcile (upstream's sync of the key finds
                // nothing).
                Notification::Deleted { .. } => {}
            },
            None,
        );
        let (q, cidrs) = (queue.clone(), self.cidrs.clone());
        factory.informer::<IPAddress>().add_event_handler(
            move |n: Notification<IPAddress>| match n {
                Notification::Added { obj, .. } | Notification::Deleted { obj, .. } => {
                    enqueue_all(&q, containing_ip_address(&cidrs.list(), &obj));
                }
                // Only a change of labels can make an address count, or stop counting.
                Notification::Updated { old, new } => {
                    if old.metadata.labels != new.metadata.labels {
                        let all = cidrs.list();
                        enqueue_all(&q, containing_ip_address(&all, &old));
                        enqueue_all(&q, containing_ip_address(&all, &new));
                    }
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(cidr) = self.cidrs.get(key) else {
            return Ok(Action::Done);
        };
        let name = name_of(&cidr);
        if cidr.metadata.deletion_timestamp.is_some() {
            let all = self.cidrs.list();
            let ips = self.ips.list();
            return match deletion_step(&cidr, &all, &ips, Timestamp::now()) {
                DeletionStep::Blocked(address) => {
                    tracing::info!(service_cidr = name, %address, "deleting ServiceCIDR blocked by IP address");
                    self.apply_condition_if_needed(
                        &cidr,
                        "False",
                        REASON_TERMINATING,
                        TERMINATING_MESSAGE,
                    )
                    .await?;
                    Ok(Action::Done)
                }
                DeletionStep::Wait(left) => Ok(Action::RequeueAfter(left)),
                DeletionStep::Release if has_finalizer(&cidr) => {
                    tracing::info!(service_cidr = name, "removing the ServiceCIDR's finalizer");
                    done_unless_failed(self.patch_finalizer(&name, false).await)
                }
                DeletionStep::Release => Ok(Action::Done),
            };
        }
        if !has_finalizer(&cidr) {
            match self.patch_finalizer(&name, true).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(Action::Done),
                Err(e) => return Err(e.into()),
            }
        }
        if let Err(e) = self
            .apply_condition_if_needed(&cidr, "True", "", READY_MESSAGE)
            .await
        {
            tracing::info!(service_cidr = name, error = %e, "error updating ServiceCIDR status");
            emit(
                &*self.recorder,
                &*cidr,
                EventType::Warning,
                "KubernetesServiceCIDRError",
                "The ServiceCIDR Status can not be set to Ready=True".into(),
            );
            return Err(e.into());
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidr(name: &str, cidrs: &[&str]) -> Arc<ServiceCIDR> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"cidrs": cidrs}}))
                .unwrap(),
        )
    }

    fn deleting(name: &str, cidrs: &[&str], at: &str) -> Arc<ServiceCIDR> {
        let mut c = (*cidr(name, cidrs)).clone();
        c.metadata.deletion_timestamp = Some(Time(at.parse().unwrap()));
        c.metadata.finalizers = Some(vec![SERVICE_CIDR_PROTECTION_FINALIZER.into()]);
        Arc::new(c)
    }

    fn address(name: &str, managed_by: Option<&str>) -> Arc<IPAddress> {
        let mut v = json!({"metadata": {"name": name},
            "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "svc"}}});
        if let Some(m) = managed_by {
            v["metadata"]["labels"] = json!({LABEL_MANAGED_BY: m});
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefixes_parse_as_netip() {
        for (s, ok) in [
            ("10.0.0.0/24", true),
            ("10.0.0.1/24", true),
            ("0.0.0.0/0", true),
            ("10.0.0.0/32", true),
            ("10.0.0.0/33", false),
            ("10.0.0.0/024", false),
            ("10.0.0.0/+24", false),
            ("10.0.0.0/", false),
            ("10.0.0.0", false),
            ("2001:db8::/64", true),
            ("2001:db8::/128", true),
            ("2001:db8::/129", false),
            ("fe80::1%eth0/64", false),
            ("not-an-ip/8", false),
        ] {
            assert_eq!(Prefix::parse(s).is_some(), ok, "{s}");
        }
        let v4 = p("192.168.1.77/20");
        assert_eq!(v4.network(), ip("192.168.0.0"));
        assert_eq!(v4.last(), ip("192.168.15.255"));
        assert_eq!(p("10.1.2.3/0").network(), ip("0.0.0.0"));
        assert_eq!(p("10.1.2.3/0").last(), ip("255.255.255.255"));
        assert_eq!(p("10.1.2.3/32").last(), ip("10.1.2.3"));
        let v6 = p("2001:db8:1:2::5/63");
        assert_eq!(v6.network(), ip("2001:db8:1:2::"));
        assert_eq!(v6.last(), ip("2001:db8:1:3:ffff:ffff:ffff:ffff"));
        assert_eq!(p("::1/0").network(), ip("::"));
        assert_eq!(v4.to_string(), "192.168.1.77/20");
    }

    #[test]
    fn prefix_overlap_and_containment() {
        // (a, b, a overlaps b, a contains b)
        for (a, b, overlaps, contains) in [
            ("10.0.0.0/16", "10.0.1.0/24", true, true),
            ("10.0.1.0/24", "10.0.0.0/16", true, false),
            ("10.0.0.0/24", "10.0.0.0/24", true, true),
            ("10.0.0.7/24", "10.0.0.0/24", true, true),
            ("10.0.0.0/24", "10.0.1.0/24", false, false),
            ("0.0.0.0/0", "192.168.0.0/16", true, true),
            ("10.0.0.0/8", "2001:db8::/64", false, false),
            ("2001:db8::/48", "2001:db8:0:1::/64", true, true),
            ("2001:db8:0:1::/64", "2001:db8::/48", true, false),
            ("2001:db8::/64", "2001:db8:0:1::/64", false, false),
            ("::/0", "fd00::/8", true, true),
            ("2001:db8::/112", "2001:db8::/112", true, true),
        ] {
            assert_eq!(p(a).overlaps(&p(b)), overlaps, "{a} overlaps {b}");
            assert_eq!(p(a).contains_prefix(&p(b)), contains, "{a} contains {b}");
        }
    }

    #[test]
    fn addresses_exclude_network_and_ipv4_broadcast() {
        for (prefix, address, contained) in [
            ("10.0.0.0/24", "10.0.0.1", true),
            ("10.0.0.0/24", "10.0.0.254", true),
            ("10.0.0.0/24", "10.0.0.0", false),
            ("10.0.0.0/24", "10.0.0.255", false),
            ("10.0.0.0/24", "10.0.1.1", false),
            ("10.0.0.0/24", "2001:db8::1", false),
            ("10.0.0.0/16", "10.0.3.255", true),
            ("2001:db8::/64", "2001:db8::", false),
            ("2001:db8::/64", "2001:db8::1", true),
            // No broadcast in IPv6: the last address counts.
            ("2001:db8::/64", "2001:db8::ffff:ffff:ffff:ffff", true),
            ("2001:db8::/64", "2001:db8:0:1::1", false),
            ("2001:db8::/64", "10.0.0.1", false),
            // IPv4-mapped IPv6 is IPv6, as netip's.
            ("10.0.0.0/24", "::ffff:10.0.0.1", false),
        ] {
            assert_eq!(
                p(prefix).contains_address(ip(address)),
                contained,
                "{prefix} contains {address}"
            );
        }
    }

    #[test]
    fn lookups_over_service_cidrs() {
        let all = vec![
            cidr("kubernetes", &["10.0.0.0/24", "2001:db8::/112"]),
            cidr("big", &["10.0.0.0/16"]),
            cidr("twin", &["10.0.0.0/24"]),
            cidr("other", &["10.200.0.0/24"]),
            cidr("v6", &["2001:db8::/64"]),
        ];
        assert_eq!(
            containing_prefix(&all, &p("10.0.0.0/24")),
            names(&["big", "kubernetes", "twin"])
        );
        assert_eq!(containing_prefix(&all, &p("10.0.0.0/16")), names(&["big"]));
        assert_eq!(
            containing_prefix(&all, &p("2001:db8::/112")),
            names(&["kubernetes", "v6"])
        );
        assert_eq!(
            containing_address(&all, ip("10.0.0.10")),
            names(&["big", "kubernetes", "twin"])
        );
        // The /24s' broadcast address is an ordinary address of the /16; the network
        // address of all three is in none.
        assert_eq!(containing_address(&all, ip("10.0.0.255")), names(&["big"]));
        assert_eq!(containing_address(&all, ip("10.0.0.0")), names(&[]));
        assert_eq!(containing_address(&all, ip("10.201.0.1")), names(&[]));
        assert_eq!(
            containing_address(&all, ip("2001:db8::5")),
            names(&["kubernetes", "v6"])
        );
        assert_eq!(
            overlapping(&all, &cidr("new", &["10.0.0.0/20"])),
            names(&["big", "kubernetes", "twin"])
        );
        assert_eq!(
            overlapping(&all, &cidr("new", &["2001:db8::/120", "10.200.0.128/25"])),
            names(&["kubernetes", "other", "v6"])
        );
        // Only the allocator's addresses count.
        assert_eq!(
            containing_ip_address(&all, &address("10.200.0.9", Some(IP_ALLOCATOR))),
            names(&["other"])
        );
        assert!(containing_ip_address(&all, &address("10.200.0.9", Some("someone"))).is_empty());
        assert!(containing_ip_address(&all, &address("10.200.0.9", None)).is_empty());
    }

    #[test]
    fn deletion_waits_for_orphans_and_the_grace_period() {
        let at = "2026-01-01T00:00:00Z";
        let now = |s: &str| -> Timestamp { s.parse().unwrap() };
        let going = deleting("going", &["10.200.0.0/24", "fd00:200::/64"], at);
        let mut all = vec![cidr("kubernetes", &["10.0.0.0/24"]), going.clone()];
        let inside = address("10.200.0.10", Some(IP_ALLOCATOR));
        let inside6 = address("fd00:200::a", Some(IP_ALLOCATOR));
        let elsewhere = address("10.0.0.10", Some(IP_ALLOCATOR));
        let unmanaged = address("10.200.0.11", Some("someone"));
        let network = address("10.200.0.0", Some(IP_ALLOCATOR));

        // An allocator's address only this ServiceCIDR holds blocks it.
        for blocker in [&inside, &inside6] {
            assert!(matches!(
                deletion_step(
                    &going,
                    &all,
                    &[elsewhere.clone(), (*blocker).clone()],
                    now(at)
                ),
                DeletionStep::Blocked(_)
            ));
        }
        assert_eq!(
            orphaned_address(&going, &all, std::slice::from_ref(&inside)),
            Some(ip("10.200.0.10"))
        );
        // Other addresses do not; then the grace period runs from deletionTimestamp.
        let others = [elsewhere.clone(), unmanaged.clone(), network.clone()];
        assert_eq!(
            deletion_step(&going, &all, &others, now(at)),
            DeletionStep::Wait(Duration::from_secs(10))
        );
        assert_eq!(
            deletion_step(&going, &all, &others, now("2026-01-01T00:00:07.500Z")),
            DeletionStep::Wait(Duration::from_millis(2500))
        );
        assert_eq!(
            deletion_step(&going, &all, &others, now("2026-01-01T00:00:10Z")),
            DeletionStep::Release
        );
        assert_eq!(
            deletion_step(&going, &all, &[], now("2026-01-01T00:01:00Z")),
            DeletionStep::Release
        );

        // A parent for only one family: the other family's address still blocks.
        all.push(cidr("parent4", &["10.200.0.0/16"]));
        assert_eq!(
            orphaned_address(&going, &all, std::slice::from_ref(&inside)),
            None
        );
        assert_eq!(
            orphaned_address(&going, &all, &[inside.clone(), inside6.clone()]),
            Some(ip("fd00:200::a"))
        );
        // Parents for both (one of them equal): nothing is orphaned.
        all.push(cidr("twin6", &["fd00:200::/64"]));
        assert_eq!(
            deletion_step(
                &going,
                &all,
                &[inside.clone(), inside6.clone()],
                now("2026-01-01T00:00:11Z")
            ),
            DeletionStep::Release
        );
    }

    #[test]
    fn the_condition_is_applied_only_when_it_changes() {
        let mut c = (*cidr("a", &["10.200.0.0/24"])).clone();
        assert!(!condition_up_to_date(&c, "True", "", READY_MESSAGE));
        let body = condition_apply(
            "a",
            "True",
            "",
            READY_MESSAGE,
            "2026-01-01T00:00:00Z".parse().unwrap(),
        );
        assert_eq!(body["metadata"], json!({"name": "a"}));
        assert_eq!(body["kind"], "ServiceCIDR");
        assert_eq!(
            body["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True", "reason": "", "message": READY_MESSAGE,
                   "lastTransitionTime": "2026-01-01T00:00:00Z"})
        );
        c.status = Some(serde_json::from_value(body["status"].clone()).unwrap());
        assert!(condition_up_to_date(&c, "True", "", READY_MESSAGE));
        assert!(!condition_up_to_date(
            &c,
            "False",
            REASON_TERMINATING,
            TERMINATING_MESSAGE
        ));
        assert!(has_finalizer(&deleting("d", &[], "2026-01-01T00:00:00Z")));
        assert!(!has_finalizer(&c));
    }
}
