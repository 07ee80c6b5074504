//! Services' cluster IPs recorded as IPAddress objects inside ServiceCIDRs, over the
//! embedded SQLite backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use ferrokube_registry::{
    Clock, DeleteOptions, ListParams, Part, Registry, RegistryConfig, Store, UpdateInput,
    WriteOptions,
};
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

fn open(dir: &tempfile::TempDir) -> Arc<SqliteStorage> {
    Arc::new(SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap())
}

async fn registry_with_ports(
    storage: Arc<SqliteStorage>,
    ports: &str,
    clock: Arc<ShiftedClock>,
) -> Registry {
    let config = RegistryConfig {
        service_node_port_range: ports.into(),
        clock,
        ..RegistryConfig::default()
    };
    Registry::new(storage, config).await.unwrap()
}

/// Who holds a node port's claim in storage (`namespace/name`), if anyone.
async fn port_claim(reg: &Registry, port: u64) -> Option<String> {
    let key = format!(
        "{}{port}",
        ferrokube_registry::service_claims::NODE_PORT_CLAIMS
    );
    match reg.storage().get(&key, None).await {
        Ok(kv) => {
            let claim: Value = serde_json::from_slice(&kv.value).unwrap();
            Some(format!(
                "{}/{}",
                claim["parentRef"]["namespace"].as_str().unwrap(),
                claim["parentRef"]["name"].as_str().unwrap()
            ))
        }
        Err(ferrokube_storage::StorageError::NotFound { .. }) => None,
        Err(e) => panic!("get node port claim {port}: {e:?}"),
    }
}

fn node_port(svc: &Value) -> u64 {
    svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap()
}

async fn registry_over(
    storage: Arc<SqliteStorage>,
    range: &str,
    clock: Arc<ShiftedClock>,
) -> Registry {
    let config = RegistryConfig {
        service_cluster_ip_range: range.into(),
        clock,
        ..RegistryConfig::default()
    };
    Registry::new(storage, config).await.unwrap()
}

fn services(reg: &Registry) -> &Arc<Store> {
    reg.store("", "v1", "services").unwrap()
}

fn addresses(reg: &Registry) -> &Arc<Store> {
    reg.store("networking.k8s.io", "v1", "ipaddresses").unwrap()
}

fn cidrs(reg: &Registry) -> &Arc<Store> {
    reg.store("networking.k8s.io", "v1", "servicecidrs")
        .unwrap()
}

async fn create_service(
    reg: &Registry,
    name: &str,
    spec: Value,
) -> Result<Value, ferrokube_apimachinery::errors::ApiError> {
    let mut spec = spec;
    if spec.get("ports").is_none() {
        spec["ports"] = json!([{"port": 80, "protocol": "TCP"}]);
    }
    services(reg)
        .create(
            Some("default"),
            json!({"metadata": {"name": name}, "spec": spec}),
            &WriteOptions::default(),
        )
        .await
        .map(|w| w.object)
}

async fn address(reg: &Registry, ip: &str) -> Option<Value> {
    match addresses(reg).get(None, ip).await {
        Ok(a) => Some(a),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("get IPAddress {ip}: {e:?}"),
    }
}

async fn address_names(reg: &Registry) -> Vec<String> {
    let listed = addresses(reg)
        .list(None, &ListParams::default())
        .await
        .unwrap();
    listed
        .items
        .iter()
        .map(|a| a["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn cluster_ips_are_recorded_and_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry_over(open(&dir), "10.96.0.0/12", Arc::default()).await;

    // The default ServiceCIDR, Ready, and the `kubernetes` Service's address.
    let default = cidrs(&reg).get(None, "kubernetes").await.unwrap();
    assert_eq!(default["spec"]["cidrs"], json!(["10.96.0.0/12"]));
    let ready = &default["status"]["conditions"][0];
    assert_eq!(
        (ready["type"].as_str(), ready["status"].as_str()),
        (Some("Ready"), Some("True"))
    );
    assert_eq!(ready["message"], "Kubernetes default Service CIDR is ready");
    let api = address(&reg, "10.96.0.1")
        .await
        .expect("the kubernetes Service's IPAddress");
    assert_eq!(
        api["spec"]["parentRef"],
        json!({"resource": "services", "namespace": "default", "name": "kubernetes"})
    );

    let svc = create_service(&reg, "web", json!({"type": "ClusterIP"}))
        .await
        .unwrap();
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let recorded = address(&reg, &ip)
        .await
        .expect("an IPAddress for the new Service");
    assert_eq!(
        recorded["metadata"]["labels"],
        json!({"ipaddress.kubernetes.io/ip-family": "IPv4",
               "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"})
    );
    assert_eq!(
        recorded["spec"]["parentRef"],
        json!({"resource": "services", "namespace": "default", "name": "web"})
    );

    // To ExternalName: the address goes; back to ClusterIP: a new one is recorded.
    let patch = |spec: Value| {
        UpdateInput::Patch(ferrokube_registry::PatchType::Merge, json!({"spec": spec}))
    };
    services(&reg)
        .update(
            Some("default"),
            "web",
            patch(
                json!({"type": "ExternalName", "externalName": "web.example.com",
                "clusterIP": null, "clusterIPs": null}),
            ),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        address(&reg, &ip).await.is_none(),
        "the dropped cluster IP's IPAddress remains"
    );
    let back = services(&reg)
        .update(
            Some("default"),
            "web",
            patch(json!({"type": "ClusterIP", "externalName": null})),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap()
        .object;
    let ip = back["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(address(&reg, &ip).await.is_some());

    services(&reg)
        .delete(Some("default"), "web", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(
        address(&reg, &ip).await.is_none(),
        "a deleted Service's IPAddress remains"
    );

    // A failed create gives its address back.
    create_service(&reg, "dup", json!({"clusterIP": "10.96.0.50"}))
        .await
        .unwrap();
    let err = create_service(&reg, "dup", json!({"clusterIP": "10.96.0.51"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);
    assert!(address(&reg, "10.96.0.51").await.is_none());
    assert!(address(&reg, "10.96.0.50").await.is_some());
}

#[tokio::test]
async fn an_address_recorded_by_another_writer_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry_over(open(&dir), "10.96.0.0/28", Arc::default()).await;
    // Records this apiserver has not seen yet (another apiserver's, or a gateway's):
    // every address of the /28 but .14 (.1 is the kubernetes Service's).
    for n in 2..=13 {
        let ip = format!("10.96.0.{n}");
        addresses(&reg)
            .create(
                None,
                json!({"metadata": {"name": ip},
                    "spec": {"parentRef": {"group": "example.com", "resource": "gateways",
                        "namespace": "default", "name": "gw"}}}),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
    }
    // Dynamic picks (from a random place) find them taken and go on to the free one.
    let svc = create_service(&reg, "picks", json!({})).await.unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.14");
    let err = create_service(&reg, "asks", json!({"clusterIP": "10.96.0.2"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("failed to allocate IP 10.96.0.2: provided IP is already allocated"),
        "{}",
        err.message
    );
    let gw = address(&reg, "10.96.0.2").await.unwrap();
    assert_eq!(
        gw["spec"]["parentRef"]["name"], "gw",
        "another writer's record was changed"
    );
}

#[tokio::test]
async fn two_apiservers_on_one_store_never_hand_out_one_address_twice() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir);
    // 13 addresses to hand out: a /28 less its network, broadcast and first address.
    let a = registry_over(storage.clone(), "10.96.0.0/28", Arc::default()).await;
    let b = registry_over(storage, "10.96.0.0/28", Arc::default()).await;
    let names: Vec<String> = (0..16).map(|i| format!("s{i}")).collect();
    let creates = names.iter().enumerate().map(|(i, name)| {
        let reg = if i % 2 == 0 { &a } else { &b };
        create_service(reg, name, json!({}))
    });
    let results = futures::future::join_all(creates).await;
    let mut ips: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|s| s["spec"]["clusterIP"].as_str().unwrap().to_string())
        .collect();
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(ips.len(), 13, "failures: {failed:?}");
    for e in &failed {
        assert!(
            e.message.contains("range is full") || e.message.contains("taken meanwhile"),
            "{}",
            e.message
        );
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 13, "an address was handed out twice");
    let mut recorded = address_names(&a).await;
    recorded.retain(|n| n != "10.96.0.1");
    recorded.sort();
    assert_eq!(recorded, ips);
}

#[tokio::test]
async fn other_service_cidrs_extend_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry_over(open(&dir), "10.96.0.0/29", Arc::default()).await;
    cidrs(&reg)
        .create(
            None,
            json!({"metadata": {"name": "extra"}, "spec": {"cidrs": ["10.200.0.0/30"]}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    let asked = create_service(&reg, "asked", json!({"clusterIP": "10.200.0.2"}))
        .await
        .unwrap();
    assert_eq!(asked["spec"]["clusterIP"], "10.200.0.2");
    let err = create_service(&reg, "outside", json!({"clusterIP": "10.201.0.2"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("failed to allocate IP 10.201.0.2: the provided network does not match the current range"),
        "{}",
        err.message
    );
    let err = create_service(&reg, "broadcast", json!({"clusterIP": "10.200.0.3"}))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("is not in the valid range"),
        "{}",
        err.message
    );
    // The default /29 has 5 addresses to hand out, then the other ServiceCIDR's last one.
    for i in 0..5 {
        let svc = create_service(&reg, &format!("d{i}"), json!({}))
            .await
            .unwrap();
        let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
        assert!(ip.starts_with("10.96.0."), "{ip}");
    }
    let spill = create_service(&reg, "spill", json!({})).await.unwrap();
    assert_eq!(spill["spec"]["clusterIP"], "10.200.0.1");
    let err = create_service(&reg, "full", json!({})).await.unwrap_err();
    assert!(err.message.contains("range is full"), "{}", err.message);
}

#[tokio::test]
async fn repair_records_missing_addresses_and_deletes_leaked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let reg = registry_over(open(&dir), "10.96.0.0/24", clock.clone()).await;
    // Asked for: a random address could be one of the records made below.
    let svc = create_service(&reg, "web", json!({"clusterIP": "10.96.0.10"}))
        .await
        .unwrap();
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    // A store from before IPAddresses: the Service's record is missing.
    addresses(&reg)
        .delete(None, &ip, &DeleteOptions::default())
        .await
        .unwrap();
    // A record whose Service never got stored (an apiserver died in between).
    let leaked = json!({"metadata": {"name": "10.96.0.77", "labels": {
            "ipaddress.kubernetes.io/ip-family": "IPv4",
            "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}},
        "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "gone"}}});
    addresses(&reg)
        .create(None, leaked, &WriteOptions::default())
        .await
        .unwrap();
    // Someone else's record is never touched.
    let foreign = json!({"metadata": {"name": "10.96.0.78"},
        "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "gone"}}});
    addresses(&reg)
        .create(None, foreign, &WriteOptions::default())
        .await
        .unwrap();

    reg.repair_service_claims().await.unwrap();
    assert!(
        address(&reg, &ip).await.is_some(),
        "the missing record was not made"
    );
    assert!(
        address(&reg, "10.96.0.77").await.is_some(),
        "deleted within the grace period"
    );

    clock.0.store(61, Ordering::SeqCst);
    reg.repair_service_claims().await.unwrap();
    assert!(
        address(&reg, "10.96.0.77").await.is_none(),
        "the leaked record stays"
    );
    assert!(address(&reg, "10.96.0.78").await.is_some());
    assert!(address(&reg, &ip).await.is_some());
    // The freed address can be asked for again.
    create_service(&reg, "again", json!({"clusterIP": "10.96.0.77"}))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_default_service_cidr_is_recreated_and_never_changed() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir);
    let reg = registry_over(storage.clone(), "10.96.0.0/24", Arc::default()).await;
    // Deleted (its finalizers are the controller manager's; none here): made again.
    cidrs(&reg)
        .delete(None, "kubernetes", &DeleteOptions::default())
        .await
        .unwrap();
    reg.repair_service_claims().await.unwrap();
    let again = cidrs(&reg).get(None, "kubernetes").await.unwrap();
    assert_eq!(again["spec"]["cidrs"], json!(["10.96.0.0/24"]));
    drop(reg);
    // Another apiserver with another flag leaves the stored one as it is.
    let other = registry_over(storage, "10.97.0.0/24", Arc::default()).await;
    let kept = cidrs(&other).get(None, "kubernetes").await.unwrap();
    assert_eq!(kept["spec"]["cidrs"], json!(["10.96.0.0/24"]));
}

#[tokio::test]
async fn node_ports_are_claimed_and_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry_with_ports(open(&dir), "30000-30099", Arc::default()).await;
    let svc = create_service(&reg, "np", json!({"type": "NodePort"}))
        .await
        .unwrap();
    let port = node_port(&svc);
    assert_eq!(port_claim(&reg, port).await.as_deref(), Some("default/np"));
    // To ClusterIP: the port goes, its claim too.
    services(&reg)
        .update(
            Some("default"),
            "np",
            UpdateInput::Patch(
                ferrokube_registry::PatchType::Merge,
                json!({"spec": {"type": "ClusterIP"}}),
            ),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(port_claim(&reg, port).await, None);
    let asked = services(&reg)
        .create(
            Some("default"),
            json!({"metadata": {"name": "asked2"}, "spec": {"type": "NodePort",
                "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30042}]}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(node_port(&asked), 30042);
    assert_eq!(
        port_claim(&reg, 30042).await.as_deref(),
        Some("default/asked2")
    );
    services(&reg)
        .delete(Some("default"), "asked2", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(port_claim(&reg, 30042).await, None);
}

#[tokio::test]
async fn two_apiservers_on_one_store_never_hand_out_one_node_port_twice() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(&dir);
    let a = registry_with_ports(storage.clone(), "30000-30009", Arc::default()).await;
    let b = registry_with_ports(storage, "30000-30009", Arc::default()).await;
    let names: Vec<String> = (0..12).map(|i| format!("np{i}")).collect();
    let creates = names.iter().enumerate().map(|(i, name)| {
        let reg = if i % 2 == 0 { &a } else { &b };
        create_service(reg, name, json!({"type": "NodePort"}))
    });
    let results = futures::future::join_all(creates).await;
    let mut ports: Vec<u64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(node_port)
        .collect();
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(ports.len(), 10, "failures: {failed:?}");
    for e in &failed {
        assert!(
            e.message.contains("range is full") || e.message.contains("taken meanwhile"),
            "{}",
            e.message
        );
    }
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(
        ports,
        (30000..30010).collect::<Vec<u64>>(),
        "a node port was handed out twice"
    );
    // A port another apiserver holds is taken when asked for.
    let err = services(&a)
        .create(
            Some("default"),
            json!({"metadata": {"name": "late"}, "spec": {"type": "NodePort",
                "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30003}]}}),
            &WriteOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("provided port is already allocated"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn repair_claims_missing_node_ports_and_deletes_leaked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let reg = registry_with_ports(open(&dir), "30000-30099", clock.clone()).await;
    // Asked for: a random port could be the leaked claim made below.
    let svc = create_service(
        &reg,
        "np",
        json!({"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30010}]}),
    )
    .await
    .unwrap();
    let port = node_port(&svc);
    let key = |p: u64| {
        format!(
            "{}{p}",
            ferrokube_registry::service_claims::NODE_PORT_CLAIMS
        )
    };
    // A store from before claims: the Service's is missing.
    reg.storage()
        .delete(&key(port), &ferrokube_storage::Preconditions::default())
        .await
        .unwrap();
    // A claim whose Service never got stored.
    let leaked = json!({"metadata": {"name": "30077",
            "creationTimestamp": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
        "parentRef": {"namespace": "default", "name": "gone"}});
    reg.storage()
        .create(&key(30077), leaked.to_string().into())
        .await
        .unwrap();
    reg.repair_service_claims().await.unwrap();
    assert_eq!(port_claim(&reg, port).await.as_deref(), Some("default/np"));
    assert!(
        port_claim(&reg, 30077).await.is_some(),
        "deleted within the grace period"
    );
    clock.0.store(61, Ordering::SeqCst);
    reg.repair_service_claims().await.unwrap();
    assert_eq!(
        port_claim(&reg, 30077).await,
        None,
        "the leaked claim stays"
    );
    assert_eq!(port_claim(&reg, port).await.as_deref(), Some("default/np"));
}
