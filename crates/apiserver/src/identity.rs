//! The apiserver's identity (upstream's APIServerIdentity, on by default in 1.33): an
//! ID derived from the host name, and a Lease named by it in `kube-system` that the
//! apiserver renews (`pkg/controlplane/apiserver/server.go`, component-helpers' lease
//! controller), so that clients can count and tell apart the cluster's apiservers
//! (`kubectl get leases -n kube-system -l apiserver.kubernetes.io/identity`). A garbage
//! collector deletes the leases of apiservers that stopped renewing theirs an hour ago
//! (`apiserverleasegc`).

use std::time::Duration;

use ferrokube_registry::{Part, PatchType, Store, UpdateInput, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

const NAMESPACE: &str = "kube-system";
/// Upstream's `IdentityLeaseComponentLabelKey`, valued with the component's name.
const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
const COMPONENT: &str = "kube-apiserver";
/// Upstream's `IdentityLeaseDurationSeconds`, `IdentityLeaseRenewIntervalPeriod` and
/// `IdentityLeaseGCPeriod` (flags no longer since 1.26).
const LEASE_DURATION_SECONDS: i64 = 3600;
const RENEW_INTERVAL: Duration = Duration::from_secs(10);
const GC_PERIOD: Duration = Duration::from_secs(3600);

/// The host name as Go's `os.Hostname` reads it on Linux.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim_end_matches('\n').to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Upstream's APIServerID for `hostname`: `apiserver-` and the lowercase unpadded
/// base32 of the first 16 bytes of the SHA-256 of the length-prefixed (two bytes, big
/// endian) host name and component name, so that a restarted apiserver keeps its ID.
pub fn apiserver_id(hostname: &str) -> String {
    let mut data = Vec::with_capacity(hostname.len() + COMPONENT.len() + 4);
    for part in [hostname, COMPONENT] {
        let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
        data.extend_from_slice(&len.to_be_bytes());
        data.extend_from_slice(&part.as_bytes()[..usize::from(len)]);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &data);
    let encoded = data_encoding::BASE32_NOPAD.encode(&digest.as_ref()[..16]);
    format!("apiserver-{}", encoded.to_ascii_lowercase())
}

/// A Lease's `renewTime`: MicroTime, microseconds in UTC.
fn micro_time(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// Renews this apiserver's lease every ten seconds until `shutdown`: created when
/// missing (holder `<id>_<uuid>`, an hour's duration), else its `renewTime` and labels
/// set, as upstream's lease controller (which leaves a found lease's holder alone).
pub(crate) async fn run_lease(
    leases: std::sync::Arc<Store>,
    id: String,
    shutdown: watch::Receiver<bool>,
) {
    let host = hostname();
    let holder = format!("{id}_{}", ferrokube_registry::meta::new_uid());
    crate::every(RENEW_INTERVAL, true, shutdown, || async {
        if let Err(e) = renew(&leases, &id, &holder, &host).await {
            tracing::warn!(error = %e, lease = %id, "renewing the apiserver identity lease failed");
        }
    })
    .await;
}

async fn renew(leases: &Store, id: &str, holder: &str, host: &str) -> Result<(), String> {
    let labels = json!({IDENTITY_LABEL: COMPONENT, "kubernetes.io/hostname": host});
    let now = micro_time(jiff::Timestamp::now());
    let opts = WriteOptions::default();
    let patch = json!({"metadata": {"labels": labels}, "spec": {"renewTime": now}});
    let update = UpdateInput::Patch(PatchType::Merge, patch);
    match leases
        .update(Some(NAMESPACE), id, update, Part::Main, &opts)
        .await
    {
        Ok(_) => return Ok(()),
        Err(e) if e.code != 404 => return Err(e.message),
        Err(_) => {}
    }
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"namespace": NAMESPACE, "name": id, "labels": labels},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": now,
        },
    });
    match leases.create(Some(NAMESPACE), lease, &opts).await {
        Ok(_) => Ok(()),
        // Created meanwhile: renewed at the next tick.
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e.message),
    }
}

/// Whether an identity lease has run out (or cannot tell when it does), upstream's
/// `isLeaseExpired`.
fn expired(lease: &Value, now: jiff::Timestamp) -> bool {
    let renewed = lease["spec"]["renewTime"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let duration = lease["spec"]["leaseDurationSeconds"].as_i64();
    match (renewed, duration) {
        (Some(renewed), Some(seconds)) => renewed + jiff::SignedDuration::from_secs(seconds) < now,
        _ => true,
    }
}

/// Deletes expired identity leases at start and then hourly, until `shutdown`.
pub(crate) async fn run_lease_gc(leases: std::sync::Arc<Store>, shutdown: watch::Receiver<bool>) {
    crate::every(GC_PERIOD, true, shutdown, || async {
        if let Err(e) = collect(&leases).await {
            tracing::warn!(error = %e, "collecting expired apiserver identity leases failed");
        }
    })
    .await;
}

async fn collect(leases: &Store) -> Result<(), String> {
    let params = ferrokube_registry::ListParams {
        label_selector: Some(format!("{IDENTITY_LABEL}={COMPONENT}")),
        ..Default::default()
    };
    let listed = leases
        .list(Some(NAMESPACE), &params)
        .await
        .map_err(|e| e.message)?;
    let now = jiff::Timestamp::now();
    for lease in listed.items.iter().filter(|l| expired(l, now)) {
        let name = ferrokube_registry::meta::name(lease);
        // Deleted only as listed: another apiserver may have renewed it since.
        let opts = ferrokube_registry::DeleteOptions {
            precondition_resource_version: lease["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
            ..Default::default()
        };
        match leases.delete(Some(NAMESPACE), name, &opts).await {
            Ok(_) => tracing::info!(lease = name, "deleted an expired apiserver identity lease"),
            Err(e) if matches!(e.code, 404 | 409) => {}
            Err(e) => return Err(e.message),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_upstreams_for_the_host() {
        // The lease name of the Kubernetes documentation's example host.
        assert_eq!(
            apiserver_id("master-1"),
            "apiserver-wj467rbl25eeviqacfhvg2yvnm"
        );
        assert_eq!(apiserver_id("master-1").len(), 36);
        assert_ne!(apiserver_id("master-2"), apiserver_id("master-1"));
    }

    #[test]
    fn leases_expire_an_hour_after_their_renewal() {
        let now: jiff::Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let lease =
            |renewed: &str| json!({"spec": {"renewTime": renewed, "leaseDurationSeconds": 3600}});
        assert!(!expired(&lease("2026-12-07T11:30:00.000000Z"), now));
        assert!(expired(&lease("2026-12-07T10:59:59.000000Z"), now));
        assert!(expired(
            &json!({"spec": {"leaseDurationSeconds": 3600}}),
            now
        ));
        assert_eq!(micro_time(now), "2026-12-07T12:00:00.000000Z");
    }
}
