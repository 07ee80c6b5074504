//! Services' cluster IPs recorded as networking.k8s.io/v1 IPAddress objects, inside
//! ServiceCIDRs: upstream 1.33's allocator (`MultiCIDRServiceAllocator`, GA).
//!
//! The in-memory [`ServiceAllocator`] picks an address no Service of this process
//! holds; creating the IPAddress object named after it is what claims it, so two
//! apiservers on one etcd never hand out the same address (the loser's create fails
//! with AlreadyExists and it picks again). The addresses of every ServiceCIDR not being
//! deleted may be handed out, the default one's (`--service-cluster-ip-range`) first.
//!
//! [`ServiceIps::reconcile`] is upstream's `kubernetes-service-cidr-controller` and
//! `repairip` in one pass, run at start and every [`REPAIR_INTERVAL`]: the default
//! ServiceCIDR `kubernetes` exists and is Ready; every Service's cluster IP has its
//! IPAddress (stores written before IPAddresses existed get theirs here); an IPAddress
//! this allocator made whose Service is gone, or holds another address, is deleted once
//! older than [`LEAK_GRACE`] (a Service create records its address before it
//! stores the Service).

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
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
/// How often [`ServiceIps::reconcile`] runs (upstream's default ServiceCIDR
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

/// The stores the allocations are recorded in; set once every store exists.
struct Ledger {
    addresses: Arc<Store>,
    cidrs: Option<Arc<Store>>,
}

/// A Service store's allocator: in memory, and recorded as IPAddress objects.
pub struct ServiceIps {
    allocator: ServiceAllocator,
    ledger: OnceLock<Ledger>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ServiceIps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceIps")
            .field("allocator", &self.allocator)
            .field("recorded", &self.ledger.get().is_some())
            .finish()
    }
}

/// Why recording an allocation failed.
enum RecordError {
    /// Another writer holds this address.
    Taken(Ipv4Addr),
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

impl ServiceIps {
    pub fn new(allocator: ServiceAllocator, clock: Arc<dyn Clock>) -> Self {
        ServiceIps {
            allocator,
            ledger: OnceLock::new(),
            clock,
        }
    }

    pub fn allocator(&self) -> &ServiceAllocator {
        &self.allocator
    }

    /// Starts recording allocations in `addresses` (the IPAddress store), within the
    /// ServiceCIDRs of `cidrs`.
    pub fn record_in(&self, addresses: Arc<Store>, cidrs: Option<Arc<Store>>) {
        let _ = self.ledger.set(Ledger { addresses, cidrs });
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
    /// [`ServiceAllocator::allocate_update`]. Finish with [`ServiceIps::finish_update`]
    /// after the write, or [`ServiceIps::rollback`] if it failed.
    pub async fn allocate_update(
        &self,
        new: &mut Value,
        old: &Value,
    ) -> Result<Reserved, ApiError> {
        self.claim(new, Some(old)).await
    }

    async fn claim(&self, svc: &mut Value, old: Option<&Value>) -> Result<Reserved, ApiError> {
        let (ns, name) = service_ref(svc);
        let extra = self.extra_ranges().await?;
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
                Err(RecordError::Taken(ip)) => {
                    // Picked again; a requested address now fails as already allocated.
                    self.allocator.release_reserved(&reserved);
                    self.allocator.mark_taken(ip);
                }
                Err(RecordError::Other(e)) => {
                    self.allocator.release_reserved(&reserved);
                    return Err(e);
                }
            }
        }
        Err(allocator::invalid_service(
            &name,
            vec![FieldError::internal(
                &FieldPath::new("spec").child("clusterIPs"),
                "failed to allocate a cluster IP: every address picked was taken meanwhile",
            )],
        ))
    }

    /// Creates the IPAddress objects of a reservation.
    async fn record(&self, reserved: &Reserved, ns: &str, name: &str) -> Result<(), RecordError> {
        let Some(ledger) = self.ledger.get() else {
            return Ok(());
        };
        let mut made = Vec::new();
        for ip in reserved.ips() {
            let address = json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "IPAddress",
                "metadata": {
                    "name": ip.to_string(),
                    "labels": {FAMILY_LABEL: "IPv4", MANAGED_BY_LABEL: MANAGED_BY},
                },
                "spec": {"parentRef": {"resource": "services", "namespace": ns, "name": name}},
            });
            // Boxed: the Service store's create and delete come here, and these calls go
            // back into a store's create and delete.
            let written = Box::pin(ledger.addresses.create(None, address, &writer())).await;
            let failed = match written {
                Ok(_) => {
                    made.push(ip);
                    continue;
                }
                Err(e) if e.is_already_exists() => RecordError::Taken(ip),
                Err(e) => RecordError::Other(e),
            };
            for ip in made {
                self.forget(ip, ns, name).await;
            }
            return Err(failed);
        }
        Ok(())
    }

    /// Deletes the IPAddress of `ip` if it still names the Service `ns`/`name`. A
    /// failure is logged: [`ServiceIps::reconcile`] deletes what stays behind.
    async fn forget(&self, ip: Ipv4Addr, ns: &str, name: &str) {
        let Some(ledger) = self.ledger.get() else {
            return;
        };
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
            Ok(_) => {}
            Err(e) if e.is_not_found() || e.is_conflict() => {}
            Err(e) => {
                tracing::warn!(%ip, error = %e, "deleting the IPAddress of a released cluster IP failed")
            }
        }
    }

    /// Gives back a reservation whose Service write did not happen.
    pub async fn rollback(&self, reserved: &Reserved, svc: &Value) {
        self.allocator.release_reserved(reserved);
        let (ns, name) = service_ref(svc);
        for ip in reserved.ips() {
            self.forget(ip, &ns, &name).await;
        }
    }

    /// After an update committed: gives back what `old` held and `new` does not.
    pub async fn finish_update(&self, new: &Value, old: &Value) {
        let dropped = self.allocator.finish_update(new, old);
        let (ns, name) = service_ref(old);
        for ip in dropped.ips() {
            self.forget(ip, &ns, &name).await;
        }
    }

    /// After a Service was deleted: gives back what it held.
    pub async fn release(&self, svc: &Value) {
        let held = self.allocator.release(svc);
        let (ns, name) = service_ref(svc);
        for ip in held.ips() {
            self.forget(ip, &ns, &name).await;
        }
    }

    /// One pass of upstream's default ServiceCIDR controller and `repairip`; see the
    /// module's doc. `services` is the Service store.
    pub async fn reconcile(&self, services: &Store) -> Result<(), ApiError> {
        let Some(ledger) = self.ledger.get() else {
            return Ok(());
        };
        if let Some(cidrs) = &ledger.cidrs {
            self.ensure_default_cidr(cidrs).await?;
        }
        let (svcs, _) = services.cache().snapshot(&prefix(services));
        let (addresses, _) = ledger
            .addresses
            .cache()
            .snapshot(&prefix(&ledger.addresses));
        let recorded: HashMap<&str, &Value> = addresses
            .iter()
            .map(|a| (meta::name(a), a.as_ref()))
            .collect();
        let mut held: HashMap<Ipv4Addr, (String, String)> = HashMap::new();
        for svc in &svcs {
            let Some(ip) = allocator::cluster_ip(svc) else {
                continue;
            };
            let (ns, name) = service_ref(svc);
            if !recorded.contains_key(ip.to_string().as_str()) {
                let reserved = Reserved::of_ip(ip);
                match self.record(&reserved, &ns, &name).await {
                    Ok(()) | Err(RecordError::Taken(_)) => {}
                    Err(RecordError::Other(e)) => return Err(e),
                }
            }
            held.insert(ip, (ns, name));
        }
        let now = self.clock.now();
        let mut known: HashSet<Ipv4Addr> = held.keys().copied().collect();
        for address in &addresses {
            let Ok(ip) = meta::name(address).parse::<Ipv4Addr>() else {
                continue;
            };
            let owner_holds = held
                .get(&ip)
                .is_some_and(|(ns, name)| parent_is(address, ns, name));
            if !managed_by_allocator(address) || owner_holds {
                known.insert(ip);
                continue;
            }
            let age = meta::meta_str(address, "creationTimestamp")
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| now.duration_since(t).unsigned_abs())
                .unwrap_or_default();
            if age < LEAK_GRACE {
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
        self.allocator.resync(known);
        Ok(())
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

/// Runs [`ServiceIps::reconcile`] every [`REPAIR_INTERVAL`].
pub(crate) async fn repair_loop(ips: Arc<ServiceIps>, services: Arc<Store>) {
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
