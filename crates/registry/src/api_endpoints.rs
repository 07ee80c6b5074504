//! The `kubernetes` Service's Endpoints and EndpointSlice: every live apiserver's
//! advertise address (upstream's lease endpoint reconciler,
//! `--endpoint-reconciler-type=lease`, the default).
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

/// This apiserver's place in the `kubernetes` Service's endpoints.
pub(crate) struct ApiEndpoint {
    pub ip: IpAddr,
    pub port: u16,
    pub clock: Arc<dyn Clock>,
}

impl ApiEndpoint {
    fn lease_key(&self) -> String {
        format!("{MASTER_LEASES}{}", self.ip)
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
        let ips = self.live_addresses(storage).await.map_err(storage_err)?;
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
