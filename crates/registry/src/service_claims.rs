//! Services' cluster IPs and node ports claimed in storage, so that apiservers sharing
//! an etcd never hand out one twice.
//!
//! Cluster IPs are recorded as networking.k8s.io/v1 IPAddress objects inside
//! ServiceCIDRs: upstream 1.33's allocator (`MultiCIDRServiceAllocator`, GA). The
//! in-memory [`ServiceAllocator`] picks an address no Service of this process holds;
//! creating the IPAddress named after it is what claims it (the loser of a race gets
//! AlreadyExists and picks again). The addresses of every ServiceCIDR not being
//! deleted may be handed out, the default one's (`--service-cluster-ip-range`) first.
//!
//! Node ports are claimed the same way, one key per port under [`NODE_PORT_CLAIMS`]
//! naming its Service. (Upstream keeps one bitmap, a RangeAllocation, under
//! `/registry/ranges/servicenodeports`; a key per port makes a claim one create, as
//! an address's.) These keys are not an API resource; they sit under `/registry/` so
//! that the watch caches see every revision of the store.
//!
//! [`ServiceClaims::reconcile`] is upstream's `kubernetes-service-cidr-controller`,
//! `repairip` and node-port repair in one pass, run at start and every
//! [`REPAIR_INTERVAL`]: the default ServiceCIDR `kubernetes` exists and is Ready; every
//! Service's cluster IP and node ports have their claims (stores written before claims
//! existed get theirs here); a claim this allocator made whose Service is gone, or
//! holds something else, is deleted once older than [`LEAK_GRACE`] (a Service create
//! claims before it stores the Service).

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use ferrokube_storage::{ListOptions, Preconditions, Storage, StorageError};
use serde_json::{Value, json};

use crate::allocator::{self, Cidr, Reserved, ServiceAllocator};
use crate::meta::{self, Clock};
use crate::store::{DeleteOptions, ListParams, Part, PatchType, Store, UpdateInput, WriteOptions};

/// The label naming who manages an IPAddress, and this allocator's value of it.
pub const MANAGED_BY_LABEL: &str = "ipaddress.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "ipallocator.k8s.io";
/// The label with an IPAddress's family.
pub const FAMILY_LABEL: &str = "ipaddress.kubernetes.io/ip-family";
/// The ServiceCIDR made from `--service-cluster-ip-range`.
pub const DEFAULT_SERVICE_CIDR: &str = "kubernetes";
/// Where node ports are claimed: one key per port.
pub const NODE_PORT_CLAIMS: &str = "/registry/ranges/servicenodeports/";
/// How often [`ServiceClaims::reconcile`] runs (upstream's default ServiceCIDR
/// controller's interval).
pub const REPAIR_INTERVAL: Duration = Duration::from_secs(10);
/// How old an IPAddress without its Service must be before it counts as leaked
/// (upstream `repairip`'s grace: the apiserver's request timeout).
pub const LEAK_GRACE: Duration = Duration::from_secs(60);

/// Who writes the IPAddress objects and the default ServiceCIDR, in their
/// `managedFields` (upstream's loopback client's User-Agent).
const FIELD_MANAGER: &str = "kube-apiserver";
/// Picks tried before a create gives up when other apiservers keep taking them.
const MAX_ATTEMPTS: usize = 16;

/// Where the claims are made; set once every store exists.
struct Ledger {
    addresses: Arc<Store>,
    cidrs: Option<Arc<Store>>,
    /// For the node-port keys.
    storage: Arc<dyn Storage>,
}

/// A Service store's allocator: in memory, and recorded as IPAddress objects.
pub struct ServiceClaims {
    allocator: ServiceAllocator,
    ledger: OnceLock<Ledger>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ServiceClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceClaims")
            .field("allocator", &self.allocator)
            .field("recorded", &self.ledger.get().is_some())
            .finish()
    }
}

/// One thing a Service holds.
#[derive(Debug, Clone, Copy)]
enum Claim {
    Ip(Ipv4Addr),
    Port(u16),
}

/// Why claiming failed.
enum ClaimError {
    /// Another writer holds this.
    Taken(Claim),
    Other(ApiError),
}

fn service_ref(svc: &Value) -> (String, String) {
    (
        meta::namespace(svc).to_string(),
        meta::name(svc).to_string(),
    )
}

/// Whether an IPAddress names the Service `ns`/`name` as its parent.
fn parent_is(address: &Value, ns: &str, name: &str) -> bool {
    let parent = &address["spec"]["parentRef"];
    parent["group"].as_str().unwrap_or("").is_empty()
        && parent["resource"] == "services"
        && parent["namespace"].as_str().unwrap_or("") == ns
        && parent["name"] == name
}

/// Whether a node-port claim names the Service `ns`/`name`.
fn port_claim_is(claim: &Value, ns: &str, name: &str) -> bool {
    claim["parentRef"]["namespace"] == ns && claim["parentRef"]["name"] == name
}

/// Whether a claim whose Service does not hold it is old enough to be a leak rather
/// than a create between its claim and its Service's write (no timestamp: a leak).
fn leaked(created: Option<&str>, now: jiff::Timestamp) -> bool {
    created
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_none_or(|t| now.duration_since(t).unsigned_abs() >= LEAK_GRACE)
}

fn managed_by_allocator(address: &Value) -> bool {
    address["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
}

/// The IPv4 ranges of ServiceCIDRs not being deleted.
fn live_ranges(cidrs: &[Arc<Value>]) -> Vec<Cidr> {
    let mut ranges: Vec<Cidr> = cidrs
        .iter()
        .filter(|c| !meta::has_deletion_timestamp(c))
        .flat_map(|c| {
            c["spec"]["cidrs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter_map(Cidr::parse_any)
                .collect::<Vec<_>>()
        })
        .collect();
    ranges.sort_by_key(|c| (c.bits, c.base));
    ranges.dedup();
    ranges
}

impl ServiceClaims {
    pub fn new(allocator: ServiceAllocator, clock: Arc<dyn Clock>) -> Self {
        ServiceClaims {
            allocator,
            ledger: OnceLock::new(),
            clock,
        }
    }

    pub fn allocator(&self) -> &ServiceAllocator {
        &self.allocator
    }

    /// Starts claiming: addresses in `addresses` (the IPAddress store) within the
    /// ServiceCIDRs of `cidrs`, node ports in `storage`.
    pub fn claim_in(
        &self,
        addresses: Arc<Store>,
        cidrs: Option<Arc<Store>>,
        storage: Arc<dyn Storage>,
    ) {
        let _ = self.ledger.set(Ledger {
            addresses,
            cidrs,
            storage,
        });
    }

    /// The ranges of the other ServiceCIDRs, searched after the default one. Read
    /// from storage, not the watch cache: a Service asking for an address of a
    /// ServiceCIDR created just before must find it.
    async fn extra_ranges(&self) -> Result<Vec<Cidr>, ApiError> {
        let Some(cidrs) = self.ledger.get().and_then(|l| l.cidrs.as_ref()) else {
            return Ok(Vec::new());
        };
        let listed = Box::pin(cidrs.list(None, &ListParams::default())).await?;
        let items: Vec<Arc<Value>> = listed.items.iter().map(|o| o.value().clone()).collect();
        Ok(live_ranges(&items))
    }

    /// Fills in and claims the cluster IP and node ports of a new Service.
    pub async fn allocate(&self, svc: &mut Value) -> Result<Reserved, ApiError> {
        self.claim(svc, None).await
    }

    /// On update: claims what `new` holds beyond `old`; see
    /// [`ServiceAllocator::allocate_update`]. Finish with [`ServiceClaims::finish_update`]
    /// after the write, or [`ServiceClaims::rollback`] if it failed.
    pub async fn allocate_update(
        &self,
        new: &mut Value,
        old: &Value,
    ) -> Result<Reserved, ApiError> {
        self.claim(new, Some(old)).await
    }

    async fn claim(&self, svc: &mut Value, old: Option<&Value>) -> Result<Reserved, ApiError> {
        let (ns, name) = service_ref(svc);
        // A storage read, so only for a Service that may need it (not, for example,
        // an update keeping its address).
        let extra = if self.allocator.may_use_other_ranges(svc) {
            self.extra_ranges().await?
        } else {
            Vec::new()
        };
        for _ in 0..MAX_ATTEMPTS {
            let mut candidate = svc.clone();
            let reserved = match old {
                None => self.allocator.allocate(&mut candidate, &extra),
                Some(old) => self.allocator.allocate_update(&mut candidate, old, &extra),
            }
            .map_err(|errs| allocator::invalid_service(&name, errs))?;
            match self.record(&reserved, &ns, &name).await {
                Ok(()) => {
                    *svc = candidate;
                    return Ok(reserved);
                }
                Err(ClaimError::Taken(taken)) => {
                    // Picked again; a requested one now fails as already allocated.
                    self.allocator.release_reserved(&reserved);
                    match taken {
                        Claim::Ip(ip) => self.allocator.mark_ip_taken(ip),
                        Claim::Port(port) => self.allocator.mark_port_taken(port),
                    }
                }
                Err(ClaimError::Other(e)) => {
                    self.allocator.release_reserved(&reserved);
                    return Err(e);
                }
            }
        }
        Err(allocator::invalid_service(
            &name,
            vec![FieldError::internal(
                &FieldPath::new("spec").child("clusterIPs"),
                "failed to allocate: every cluster IP or node port picked was taken meanwhile",
            )],
        ))
    }

    /// Claims what a reservation holds, all or nothing.
    async fn record(&self, reserved: &Reserved, ns: &str, name: &str) -> Result<(), ClaimError> {
        let claims = reserved
            .ips()
            .map(Claim::Ip)
            .chain(reserved.ports().into_iter().map(Claim::Port));
        let mut made = Vec::new();
        for claim in claims {
            match self.make(claim, ns, name).await {
                Ok(()) => made.push(claim),
                Err(e) => {
                    for claim in made {
                        self.forget(claim, ns, name).await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Creates one claim for the Service `ns`/`name`.
    async fn make(&self, claim: Claim, ns: &str, name: &str) -> Result<(), ClaimError> {
        let Some(ledger) = self.ledger.get() else {
            return Ok(());
        };
        match claim {
            Claim::Ip(ip) => {
                let address = json!({
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "IPAddress",
                    "metadata": {
                        "name": ip.to_string(),
                        "labels": {FAMILY_LABEL: "IPv4", MANAGED_BY_LABEL: MANAGED_BY},
                    },
                    "spec": {"parentRef": {"resource": "services", "namespace": ns, "name": name}},
                });
                // Boxed: the Service store's create and delete come here, and this goes
                // back into a store's create.
                match Box::pin(ledger.addresses.create(None, address, &writer())).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_already_exists() => Err(ClaimError::Taken(claim)),
                    Err(e) => Err(ClaimError::Other(e)),
                }
            }
            Claim::Port(port) => {
                let value = json!({
                    "metadata": {
                        "name": port.to_string(),
                        "creationTimestamp": meta::format_time(self.clock.now()),
                    },
                    "parentRef": {"namespace": ns, "name": name},
                });
                let key = format!("{NODE_PORT_CLAIMS}{port}");
                match ledger.storage.create(&key, value.to_string().into()).await {
                    Ok(_) => Ok(()),
                    Err(StorageError::AlreadyExists { .. }) => Err(ClaimError::Taken(claim)),
                    Err(e) => Err(ClaimError::Other(ApiError::internal(format!(
                        "claiming node port {port}: {e}"
                    )))),
                }
            }
        }
    }

    /// Deletes a claim if it still names the Service `ns`/`name`. A failure is
    /// logged: [`ServiceClaims::reconcile`] deletes what stays behind.
    async fn forget(&self, claim: Claim, ns: &str, name: &str) {
        let Some(ledger) = self.ledger.get() else {
            return;
        };
        let failed = match claim {
            Claim::Ip(ip) => {
                let address = match ledger.addresses.get(None, &ip.to_string()).await {
                    Ok(a) => a,
                    Err(e) if e.is_not_found() => return,
                    Err(e) => {
                        tracing::warn!(%ip, error = %e, "reading the IPAddress of a released cluster IP failed");
                        return;
                    }
                };
                if !parent_is(&address, ns, name) {
                    return;
                }
                let opts = DeleteOptions {
                    precondition_uid: Some(meta::uid(&address).to_string()),
                    ..Default::default()
                };
                match Box::pin(ledger.addresses.delete(None, &ip.to_string(), &opts)).await {
                    Ok(_) => return,
                    Err(e) if e.is_not_found() || e.is_conflict() => return,
                    Err(e) => e.to_string(),
                }
            }
            Claim::Port(port) => {
                let key = format!("{NODE_PORT_CLAIMS}{port}");
                let current = match ledger.storage.get(&key, None).await {
                    Ok(kv) => kv,
                    Err(StorageError::NotFound { .. }) => return,
                    Err(e) => {
                        tracing::warn!(port, error = %e, "reading a released node port's claim failed");
                        return;
                    }
                };
                let holder: Value = serde_json::from_slice(&current.value).unwrap_or_default();
                if !port_claim_is(&holder, ns, name) {
                    return;
                }
                match ledger
                    .storage
                    .delete(&key, &Preconditions::revision(current.mod_revision))
                    .await
                {
                    Ok(_) => return,
                    Err(StorageError::NotFound { .. } | StorageError::Conflict { .. }) => return,
                    Err(e) => e.to_string(),
                }
            }
        };
        tracing::warn!(?claim, error = %failed, "deleting the claim of a released Service failed");
    }

    /// Gives back a reservation whose Service write did not happen.
    pub async fn rollback(&self, reserved: &Reserved, svc: &Value) {
        self.allocator.release_reserved(reserved);
        self.forget_all(reserved, svc).await;
    }

    /// After an update committed: gives back what `old` held and `new` does not.
    pub async fn finish_update(&self, new: &Value, old: &Value) {
        let dropped = self.allocator.finish_update(new, old);
        self.forget_all(&dropped, old).await;
    }

    /// After a Service was deleted: gives back what it held.
    pub async fn release(&self, svc: &Value) {
        let held = self.allocator.release(svc);
        self.forget_all(&held, svc).await;
    }

    async fn forget_all(&self, reserved: &Reserved, svc: &Value) {
        let (ns, name) = service_ref(svc);
        for ip in reserved.ips() {
            self.forget(Claim::Ip(ip), &ns, &name).await;
        }
        for port in reserved.ports() {
            self.forget(Claim::Port(port), &ns, &name).await;
        }
    }

    /// One pass of upstream's default ServiceCIDR controller, `repairip` and node-port
    /// repair; see the module's doc. `services` is the Service store.
    pub async fn reconcile(&self, services: &Store) -> Result<(), ApiError> {
        let Some(ledger) = self.ledger.get() else {
            return Ok(());
        };
        if let Some(cidrs) = &ledger.cidrs {
            self.ensure_default_cidr(cidrs).await?;
        }
        let (svcs, _) = services.cache().snapshot(&prefix(services));
        let mut ip_holders = HashMap::new();
        let mut port_holders = HashMap::new();
        for svc in &svcs {
            let held = self.allocator.holdings(svc);
            let holder = service_ref(svc);
            ip_holders.extend(held.ips().map(|ip| (ip, holder.clone())));
            port_holders.extend(held.ports().into_iter().map(|p| (p, holder.clone())));
        }
        let ips = self.reconcile_addresses(ledger, &ip_holders).await?;
        let ports = self.reconcile_port_claims(ledger, &port_holders).await?;
        self.allocator.resync(ips, ports);
        Ok(())
    }

    /// Makes the missing IPAddresses of `holders` and deletes leaked ones; returns
    /// the addresses held.
    async fn reconcile_addresses(
        &self,
        ledger: &Ledger,
        holders: &HashMap<Ipv4Addr, (String, String)>,
    ) -> Result<HashSet<Ipv4Addr>, ApiError> {
        let (addresses, _) = ledger
            .addresses
            .cache()
            .snapshot(&prefix(&ledger.addresses));
        let recorded: HashSet<&str> = addresses.iter().map(|a| meta::name(a)).collect();
        for (ip, (ns, name)) in holders {
            if !recorded.contains(ip.to_string().as_str()) {
                self.make_missing(Claim::Ip(*ip), ns, name).await?;
            }
        }
        let now = self.clock.now();
        let mut known: HashSet<Ipv4Addr> = holders.keys().copied().collect();
        for address in &addresses {
            let Ok(ip) = meta::name(address).parse::<Ipv4Addr>() else {
                continue;
            };
            let owner_holds = holders
                .get(&ip)
                .is_some_and(|(ns, name)| parent_is(address, ns, name));
            if !managed_by_allocator(address)
                || owner_holds
                || !leaked(meta::meta_str(address, "creationTimestamp"), now)
            {
                known.insert(ip);
                continue;
            }
            tracing::warn!(%ip, "IPAddress appears to have leaked: cleaning up");
            let opts = DeleteOptions {
                precondition_uid: Some(meta::uid(address).to_string()),
                ..Default::default()
            };
            match Box::pin(ledger.addresses.delete(None, &ip.to_string(), &opts)).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(known)
    }

    /// Makes the missing node-port claims of `holders` and deletes leaked ones;
    /// returns the ports held.
    async fn reconcile_port_claims(
        &self,
        ledger: &Ledger,
        holders: &HashMap<u16, (String, String)>,
    ) -> Result<HashSet<u16>, ApiError> {
        let storage_err = |e: StorageError| ApiError::internal(format!("node port claims: {e}"));
        let mut claims = Vec::new();
        let mut options = ListOptions::default();
        loop {
            let page = ledger
                .storage
                .list(NODE_PORT_CLAIMS, &options)
                .await
                .map_err(storage_err)?;
            claims.extend(page.items);
            match page.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        let claimed: HashSet<&str> = claims
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(NODE_PORT_CLAIMS))
            .collect();
        for (port, (ns, name)) in holders {
            if !claimed.contains(port.to_string().as_str()) {
                self.make_missing(Claim::Port(*port), ns, name).await?;
            }
        }
        let now = self.clock.now();
        let mut known: HashSet<u16> = holders.keys().copied().collect();
        for kv in &claims {
            let Some(port) = kv
                .key
                .strip_prefix(NODE_PORT_CLAIMS)
                .and_then(|p| p.parse::<u16>().ok())
            else {
                continue;
            };
            let claim: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
            let owner_holds = holders
                .get(&port)
                .is_some_and(|(ns, name)| port_claim_is(&claim, ns, name));
            if owner_holds || !leaked(meta::meta_str(&claim, "creationTimestamp"), now) {
                known.insert(port);
                continue;
            }
            tracing::warn!(port, "node port claim appears to have leaked: cleaning up");
            match ledger
                .storage
                .delete(&kv.key, &Preconditions::revision(kv.mod_revision))
                .await
            {
                Ok(_) | Err(StorageError::NotFound { .. } | StorageError::Conflict { .. }) => {}
                Err(e) => return Err(storage_err(e)),
            }
        }
        Ok(known)
    }

    /// Claims what a stored Service holds but has no claim for (someone else's claim
    /// of it is left alone).
    async fn make_missing(&self, claim: Claim, ns: &str, name: &str) -> Result<(), ApiError> {
        match self.make(claim, ns, name).await {
            Ok(()) | Err(ClaimError::Taken(_)) => Ok(()),
            Err(ClaimError::Other(e)) => Err(e),
        }
    }

    /// The ServiceCIDR `kubernetes` with `--service-cluster-ip-range`, Ready (upstream's
    /// `kubernetes-service-cidr-controller`: created when missing, never changed when
    /// it differs, its Ready condition set when it has none).
    async fn ensure_default_cidr(&self, cidrs: &Store) -> Result<(), ApiError> {
        let range = self.allocator.cidr().to_string();
        cidrs
            .ensure(
                None,
                json!({"metadata": {"name": DEFAULT_SERVICE_CIDR}, "spec": {"cidrs": [range]}}),
            )
            .await?;
        let current = cidrs.get(None, DEFAULT_SERVICE_CIDR).await?;
        let same_config = current["spec"]["cidrs"] == json!([range]);
        let ready = current["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready");
        let unset = ready.is_none_or(|c| c["status"] == "Unknown");
        if !same_config || !unset || meta::has_deletion_timestamp(&current) {
            if !same_config {
                tracing::warn!(
                    stored = %current["spec"]["cidrs"], flag = %range,
                    "the default ServiceCIDR does not match --service-cluster-ip-range; configure the flag to match it or delete it"
                );
            }
            return Ok(());
        }
        let status = json!({"status": {"conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "",
            "message": "Kubernetes default Service CIDR is ready",
            "lastTransitionTime": meta::format_time(self.clock.now()),
        }]}});
        cidrs
            .update(
                None,
                DEFAULT_SERVICE_CIDR,
                UpdateInput::Patch(PatchType::Merge, status),
                Part::Status,
                &writer(),
            )
            .await
            .map(drop)
    }
}

/// The watch-cache prefix of a store's objects.
fn prefix(store: &Store) -> String {
    format!("{}/", store.info().storage_prefix)
}

fn writer() -> WriteOptions {
    WriteOptions {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

/// Runs [`ServiceClaims::reconcile`] every [`REPAIR_INTERVAL`].
pub(crate) async fn repair_loop(ips: Arc<ServiceClaims>, services: Arc<Store>) {
    let mut ticker = tokio::time::interval(REPAIR_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        if let Err(e) = ips.reconcile(&services).await {
            tracing::warn!(error = %e, "repairing Services' cluster IP records failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(name: &str, cidrs: &[&str], deleting: bool) -> Arc<Value> {
        let mut c = json!({"metadata": {"name": name}, "spec": {"cidrs": cidrs}});
        if deleting {
            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(c)
    }

    #[test]
    fn live_ranges_skip_ipv6_and_deleting_cidrs() {
        let ranges = live_ranges(&[
            cidr("a", &["10.200.0.0/24", "fd00::/108"], false),
            cidr("b", &["10.100.0.0/16"], false),
            cidr("c", &["10.50.0.0/16"], true),
            cidr("d", &["10.200.0.0/24"], false),
        ]);
        let shown: Vec<String> = ranges.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.100.0.0/16", "10.200.0.0/24"]);
    }

    #[test]
    fn parent_matches_only_its_service() {
        let a = json!({"spec": {"parentRef": {"resource": "services", "namespace": "ns", "name": "web"}}});
        assert!(parent_is(&a, "ns", "web"));
        assert!(!parent_is(&a, "ns", "db"));
        assert!(!parent_is(&a, "other", "web"));
        let gateway = json!({"spec": {"parentRef": {"group": "gateway.networking.k8s.io",
            "resource": "services", "namespace": "ns", "name": "web"}}});
        assert!(!parent_is(&gateway, "ns", "web"));
    }
}
