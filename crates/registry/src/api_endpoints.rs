//! The `kubernetes` Service's Endpoints and EndpointSlice: every live apiserver's
//! advertise address, kept by one of upstream's `--endpoint-reconciler-type`s:
//! `lease` (the default, below), `master-count` (each apiserver adds itself and trims
//! the list to `--apiserver-count`) or `none` (nobody writes them).
//!
//! Each apiserver keeps a lease under [`MASTER_LEASES`] named after its advertise
//! address and renews it every [`ENDPOINT_INTERVAL`]; the Endpoints list the addresses
//! whose lease was renewed within [`MASTER_LEASE_TTL`], sorted. Upstream gives the
//! leases an etcd TTL; the storage contract has none, so each lease carries its renew
//! time and whoever reconciles deletes the expired ones. A graceful shutdown removes
//! the apiserver's own lease first, so pods stop dialing it at once; after a crash
//! its address goes when its lease expires. These keys are not an API resource; they
//! sit under `/registry/` so that the watch caches see every revision of the store.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_storage::{ListOptions, Preconditions, Storage, StorageError};
use serde_json::{Value, json};

use crate::meta::{self, Clock};
use crate::store::{Part, PatchType, Store, UpdateInput, WriteOptions};

/// Where the apiservers' leases are: one key per advertise address.
pub const MASTER_LEASES: &str = "/registry/masterleases/";
/// How long a lease lives unrenewed (upstream `--endpoint-reconciler` TTL, 15 s).
pub const MASTER_LEASE_TTL: Duration = Duration::from_secs(15);
/// How often an apiserver renews its lease and reconciles (upstream
/// `DefaultEndpointReconcilerInterval`).
pub const ENDPOINT_INTERVAL: Duration = Duration::from_secs(10);

/// `--endpoint-reconciler-type`, with `--apiserver-count` for `master-count`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EndpointReconciler {
    /// Each apiserver renews a lease; the endpoints list the live leases.
    #[default]
    Lease,
    /// Each apiserver adds its address and trims the list to this many.
    MasterCount(usize),
    /// The endpoints are not written.
    None,
}

impl EndpointReconciler {
    /// Upstream's flag values, with `--apiserver-count`'s.
    pub fn parse(kind: &str, apiserver_count: usize) -> Result<Self, String> {
        match kind {
            "lease" => Ok(EndpointReconciler::Lease),
            "master-count" if apiserver_count == 0 => Err(
                "--apiserver-count must be at least 1 with --endpoint-reconciler-type=master-count"
                    .into(),
            ),
            "master-count" => Ok(EndpointReconciler::MasterCount(apiserver_count)),
            "none" => Ok(EndpointReconciler::None),
            other => Err(format!(
                "unknown endpoint reconciler type {other:?}: valid values are master-count, lease, none"
            )),
        }
    }
}

/// This apiserver's place in the `kubernetes` Service's endpoints.
pub(crate) struct ApiEndpoint {
    pub ip: IpAddr,
    pub port: u16,
    pub clock: Arc<dyn Clock>,
    pub reconciler: EndpointReconciler,
}

impl ApiEndpoint {
    fn lease_key(&self) -> String {
        format!("{MASTER_LEASES}{}", self.ip)
    }

    /// Renews this apiserver's lease (or, `leaving`, deletes it); the live leases'
    /// addresses.
    async fn leased_addresses(
        &self,
        storage: &dyn Storage,
        leaving: bool,
    ) -> Result<Vec<String>, ApiError> {
        let storage_err = |e: StorageError| ApiError::internal(format!("apiserver leases: {e}"));
        if leaving {
            match storage
                .delete(&self.lease_key(), &Preconditions::default())
                .await
            {
                Ok(_) | Err(StorageError::NotFound { .. }) => {}
                Err(e) => return Err(storage_err(e)),
            }
        } else {
            self.renew(storage).await.map_err(storage_err)?;
        }
        self.live_addresses(storage).await.map_err(storage_err)
    }

    /// Creates or renews this apiserver's lease.
    async fn renew(&self, storage: &dyn Storage) -> Result<(), StorageError> {
        let key = self.lease_key();
        let value = json!({
            "metadata": {"name": self.ip.to_string()},
            "renewTime": meta::format_time(self.clock.now()),
        })
        .to_string();
        match storage.get(&key, None).await {
            Ok(current) => storage
                .compare_and_swap(&key, current.mod_revision, value.into())
                .await
                .map(drop),
            Err(StorageError::NotFound { .. }) => {
                storage.create(&key, value.into()).await.map(drop)
            }
            Err(e) => Err(e),
        }
    }

    /// The addresses of the live leases, sorted; expired leases are deleted.
    async fn live_addresses(&self, storage: &dyn Storage) -> Result<Vec<String>, StorageError> {
        let mut leases = Vec::new();
        let mut options = ListOptions::default();
        loop {
            let page = storage.list(MASTER_LEASES, &options).await?;
            leases.extend(page.items);
            match page.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        let now = self.clock.now();
        let mut live = Vec::new();
        for kv in leases {
            let Some(ip) = kv.key.strip_prefix(MASTER_LEASES) else {
                continue;
            };
            let lease: Value = serde_json::from_slice(&kv.value).unwrap_or_default();
            let fresh = lease["renewTime"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| now.duration_since(t).unsigned_abs() < MASTER_LEASE_TTL);
            if fresh {
                live.push(ip.to_string());
                continue;
            }
            match storage
                .delete(&kv.key, &Preconditions::revision(kv.mod_revision))
                .await
            {
                Ok(_) | Err(StorageError::NotFound { .. } | StorageError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        live.sort();
        Ok(live)
    }

    /// Renews this apiserver's lease (or, `leaving`, deletes it) and makes the
    /// Endpoints and EndpointSlice list the live addresses.
    pub async fn reconcile(
        &self,
        storage: &dyn Storage,
        endpoints: &Store,
        slices: Option<&Store>,
        leaving: bool,
    ) -> Result<(), ApiError> {
        let ips = match self.reconciler {
            EndpointReconciler::None => return Ok(()),
            EndpointReconciler::Lease => self.leased_addresses(storage, leaving).await?,
            EndpointReconciler::MasterCount(count) => {
                let current = match endpoints.get(Some("default"), "kubernetes").await {
                    Ok(ep) => listed_addresses(&ep),
                    Err(e) if e.code == 404 => Vec::new(),
                    Err(e) => return Err(e),
                };
                counted_addresses(current, &self.ip.to_string(), count, leaving)
            }
        };
        let port = self.port;
        // No address at all (the last apiserver leaving): no subsets, as upstream.
        let subsets = if ips.is_empty() {
            Value::Null
        } else {
            let addresses: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
            json!([{
                "addresses": addresses,
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]
            }])
        };
        let labels = json!({"endpointslice.kubernetes.io/skip-mirror": "true"});
        let desired = json!({
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
            "subsets": subsets,
        });
        ensure_matches(endpoints, desired, &["subsets"]).await?;

        let Some(slices) = slices else {
            return Ok(());
        };
        let address_type = if self.ip.is_ipv6() { "IPv6" } else { "IPv4" };
        let slice_endpoints: Vec<Value> = ips
            .iter()
            .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
            .collect();
        let desired = json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": address_type,
            "endpoints": slice_endpoints,
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        });
        ensure_matches(slices, desired, &["addressType", "endpoints", "ports"]).await
    }
}

/// The addresses of Endpoints in the form the reconcilers write (one subset); any
/// other form starts over.
fn listed_addresses(endpoints: &Value) -> Vec<String> {
    match endpoints["subsets"].as_array().map(Vec::as_slice) {
        Some([subset]) => subset["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["ip"].as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Upstream's master-count reconciler: an apiserver that is missing adds itself
/// (sorted) and, when that makes the list longer than `count`, removes the addresses
/// after its own (wrapping around), so that apiservers that disagree converge; one
/// that leaves removes itself.
fn counted_addresses(mut ips: Vec<String>, own: &str, count: usize, leaving: bool) -> Vec<String> {
    if leaving {
        ips.retain(|ip| ip != own);
        return ips;
    }
    if ips.iter().any(|ip| ip == own) {
        return ips;
    }
    ips.push(own.to_string());
    ips.sort();
    ips.dedup();
    if let Some(at) = ips.iter().position(|ip| ip == own) {
        while ips.len() > count {
            let remove = (at + 1) % ips.len();
            ips.remove(remove);
        }
    }
    ips
}

/// Creates `desired` in the default namespace, or merge-patches the `fields` of the
/// stored object that differ from it.
pub(crate) async fn ensure_matches(
    store: &Store,
    desired: Value,
    fields: &[&str],
) -> Result<(), ApiError> {
    let name = desired["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    store.ensure(Some("default"), desired.clone()).await?;
    let current = store.get(Some("default"), &name).await?;
    let patch: serde_json::Map<String, Value> = fields
        .iter()
        .filter(|f| current[**f] != desired[**f])
        .map(|f| (f.to_string(), desired[*f].clone()))
        .collect();
    if patch.is_empty() {
        return Ok(());
    }
    store
        .update(
            Some("default"),
            &name,
            UpdateInput::Patch(PatchType::Merge, Value::Object(patch)),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(ips: &[&str]) -> Vec<String> {
        ips.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn master_count_adds_itself_and_trims_after_itself() {
        assert_eq!(
            counted_addresses(vec![], "10.0.0.2", 1, false),
            v(&["10.0.0.2"])
        );
        // Present: left alone, even when there are more than the count.
        let three = v(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        assert_eq!(
            counted_addresses(three.clone(), "10.0.0.2", 2, false),
            three
        );
        // Missing: added, then the ones after it go.
        assert_eq!(
            counted_addresses(v(&["10.0.0.1", "10.0.0.3"]), "10.0.0.2", 2, false),
            v(&["10.0.0.1", "10.0.0.2"])
        );
        // Last in order: the removal wraps around to the first.
        assert_eq!(
            counted_addresses(v(&["10.0.0.1", "10.0.0.2"]), "10.0.0.9", 2, false),
            v(&["10.0.0.2", "10.0.0.9"])
        );
        assert_eq!(
            counted_addresses(three, "10.0.0.2", 3, true),
            v(&["10.0.0.1", "10.0.0.3"])
        );
    }

    #[test]
    fn reconciler_flags() {
        assert_eq!(
            EndpointReconciler::parse("lease", 1),
            Ok(EndpointReconciler::Lease)
        );
        assert_eq!(
            EndpointReconciler::parse("master-count", 3),
            Ok(EndpointReconciler::MasterCount(3))
        );
        assert_eq!(
            EndpointReconciler::parse("none", 1),
            Ok(EndpointReconciler::None)
        );
        assert!(EndpointReconciler::parse("master-count", 0).is_err());
        assert!(
            EndpointReconciler::parse("leases", 1)
                .unwrap_err()
                .contains("valid values are master-count, lease, none")
        );
    }
}
