//! The `kubernetes` Service's endpoints with several apiservers on one store: every
//! live apiserver's address, the leases of stopped ones expired.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use ferrokube_registry::{Clock, Registry, RegistryConfig};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use serde_json::{Value, json};

/// The system clock moved forward by a settable number of seconds.
#[derive(Default)]
struct ShiftedClock(AtomicI64);

impl Clock for ShiftedClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now() + jiff::SignedDuration::from_secs(self.0.load(Ordering::SeqCst))
    }
}

async fn apiserver(storage: Arc<SqliteStorage>, ip: [u8; 4], clock: Arc<ShiftedClock>) -> Registry {
    let config = RegistryConfig {
        advertise_address: IpAddr::from(ip),
        clock,
        ..RegistryConfig::default()
    };
    Registry::new(storage, config).await.unwrap()
}

/// The addresses of the Endpoints and of the EndpointSlice.
async fn addresses(reg: &Registry) -> (Vec<String>, Vec<String>) {
    let ep = reg
        .store("", "v1", "endpoints")
        .unwrap()
        .get(Some("default"), "kubernetes")
        .await
        .unwrap();
    let slice = reg
        .store("discovery.k8s.io", "v1", "endpointslices")
        .unwrap()
        .get(Some("default"), "kubernetes")
        .await
        .unwrap();
    let of_ep = ep["subsets"][0]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a["ip"].as_str().unwrap().to_string())
        .collect();
    let of_slice = slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["conditions"]["ready"], true);
            e["addresses"][0].as_str().unwrap().to_string()
        })
        .collect();
    (of_ep, of_slice)
}

fn both(ips: &[&str]) -> (Vec<String>, Vec<String>) {
    let v: Vec<String> = ips.iter().map(ToString::to_string).collect();
    (v.clone(), v)
}

#[tokio::test]
async fn every_live_apiserver_is_an_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(
        SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap(),
    );
    let clock_b = Arc::new(ShiftedClock::default());
    let a = apiserver(storage.clone(), [10, 0, 0, 2], Arc::default()).await;
    let b = apiserver(storage.clone(), [10, 0, 0, 1], clock_b.clone()).await;
    // b saw a's lease when it started; a sees b's on its next round.
    assert_eq!(addresses(&b).await, both(&["10.0.0.1", "10.0.0.2"]));
    a.reconcile_api_endpoints().await.unwrap();
    assert_eq!(addresses(&a).await, both(&["10.0.0.1", "10.0.0.2"]));

    // a stops gracefully: gone at once.
    a.remove_api_endpoint().await.unwrap();
    assert_eq!(addresses(&b).await, both(&["10.0.0.1"]));
    drop(a);

    // A third one starts, then stops without a word (a crash): its address stays until
    // its lease is older than the TTL, then the next round takes it out.
    let c = apiserver(storage.clone(), [10, 0, 0, 3], Arc::default()).await;
    drop(c);
    b.reconcile_api_endpoints().await.unwrap();
    assert_eq!(addresses(&b).await, both(&["10.0.0.1", "10.0.0.3"]));
    clock_b.0.store(16, Ordering::SeqCst);
    b.reconcile_api_endpoints().await.unwrap();
    assert_eq!(addresses(&b).await, both(&["10.0.0.1"]));
    // Its lease was deleted, not only skipped.
    use ferrokube_storage::Storage;
    let leases = storage
        .list(
            ferrokube_registry::api_endpoints::MASTER_LEASES,
            &ferrokube_storage::ListOptions::default(),
        )
        .await
        .unwrap();
    let keys: Vec<&str> = leases.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/registry/masterleases/10.0.0.1"]);
    let lease: Value = serde_json::from_slice(&leases.items[0].value).unwrap();
    assert_eq!(lease["metadata"], json!({"name": "10.0.0.1"}));
}
