//! The service-cidr controller on the test apiserver, under its own ServiceAccount:
//! a new ServiceCIDR gets the protection finalizer and Ready=True; deleting it while
//! an address of the apiserver's allocator lies only in it leaves it Terminating
//! (Ready=False), until the address goes or a ServiceCIDR containing it appears; then,
//! after the grace period, the finalizer goes; a Service's cluster IP, recorded by the
//! apiserver as such an address, holds its ServiceCIDR until the Service goes. The
//! test's own ServiceCIDRs (10.200-203) stay clear of the apiserver's default one.
//! Every wait is bounded.

use crate::support;

use std::time::{Duration, Instant};

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::servicecidrs::{
    READY_MESSAGE, REASON_TERMINATING, SERVICE_CIDR_PROTECTION_FINALIZER, TERMINATING_MESSAGE,
};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

async fn start(srv: &TestApiServer, cancel: &CancellationToken) -> anyhow::Result<Manager> {
    let cfg = ManagerConfig {
        controllers: vec!["service-cidr-controller".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    Ok(Manager::start(manager_client, &cfg, cancel.clone()).await?)
}

fn service_cidr(name: &str, cidr: &str) -> anyhow::Result<ServiceCIDR> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"cidrs": [cidr]}
    }))?)
}

/// An address as the apiserver's allocator records a Service's cluster IP.
fn allocated(ip: &str, service: &str) -> anyhow::Result<IPAddress> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": ip, "labels": {
            "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
            "ipaddress.kubernetes.io/ip-family": "IPv4"}},
        "spec": {"parentRef": {"group": "", "resource": "services",
                               "namespace": "default", "name": service}}
    }))?)
}

fn ready(c: &ServiceCIDR) -> Option<Condition> {
    c.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

fn finalizers(c: &ServiceCIDR) -> Vec<String> {
    c.metadata.finalizers.clone().unwrap_or_default()
}

/// Creates `name` and waits for the controller's finalizer and Ready=True.
async fn create_ready(cidrs: &Api<ServiceCIDR>, name: &str, cidr: &str) -> anyhow::Result<()> {
    cidrs
        .create(&PostParams::default(), &service_cidr(name, cidr)?)
        .await?;
    let c = wait_for(30, &format!("{name} protected and ready"), || async {
        let c = cidrs.get(name).await?;
        let done = finalizers(&c).contains(&SERVICE_CIDR_PROTECTION_FINALIZER.to_string())
            && ready(&c).is_some_and(|r| r.status == "True");
        Ok(done.then_some(c))
    })
    .await?;
    let r = ready(&c).expect("a Ready condition");
    assert_eq!(r.message, READY_MESSAGE);
    // The condition belongs to the controller's field manager.
    assert!(
        c.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("service-cidr-controller")
                && m.subresource.as_deref() == Some("status")),
        "{:?}",
        c.metadata.managed_fields
    );
    Ok(())
}

/// Waits for `name` to be held Terminating by an address; returns it.
async fn wait_terminating(cidrs: &Api<ServiceCIDR>, name: &str) -> anyhow::Result<ServiceCIDR> {
    let c = wait_for(30, &format!("{name} Ready=False, Terminating"), || async {
        let c = cidrs.get(name).await?;
        let held = ready(&c).is_some_and(|r| r.status == "False");
        Ok(held.then_some(c))
    })
    .await?;
    let r = ready(&c).expect("a Ready condition");
    assert_eq!(r.reason, REASON_TERMINATING);
    assert_eq!(r.message, TERMINATING_MESSAGE);
    assert!(c.metadata.deletion_timestamp.is_some());
    assert_eq!(finalizers(&c), [SERVICE_CIDR_PROTECTION_FINALIZER]);
    Ok(c)
}

#[tokio::test]
async fn an_allocated_address_holds_its_service_cidr() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let manager = start(&srv, &cancel).await?;
    let cidrs: Api<ServiceCIDR> = Api::all(c.clone());
    let addresses: Api<IPAddress> = Api::all(c.clone());

    create_ready(&cidrs, "test-held", "10.200.0.0/24").await?;
    addresses
        .create(&PostParams::default(), &allocated("10.200.0.10", "web")?)
        .await?;
    cidrs.delete("test-held", &DeleteParams::default()).await?;
    let held = wait_terminating(&cidrs, "test-held").await?;

    // Past the grace period it is still held.
    let deleted = held
        .metadata
        .deletion_timestamp
        .expect("being deleted")
        .0
        .as_millisecond();
    let past_grace = deleted + 11_000 - k8s_openapi::jiff::Timestamp::now().as_millisecond();
    tokio::time::sleep(Duration::from_millis(past_grace.clamp(0, 15_000) as u64)).await;
    let still = cidrs.get("test-held").await?;
    assert_eq!(finalizers(&still), [SERVICE_CIDR_PROTECTION_FINALIZER]);

    // The address goes: so does the ServiceCIDR (its grace period is over already).
    addresses
        .delete("10.200.0.10", &DeleteParams::default())
        .await?;
    wait_for(30, "test-held deleted after its address", || async {
        Ok(cidrs.get_opt("test-held").await?.is_none().then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test]
async fn free_service_cidrs_go_after_the_grace_period() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let manager = start(&srv, &cancel).await?;
    let cidrs: Api<ServiceCIDR> = Api::all(c.clone());
    let addresses: Api<IPAddress> = Api::all(c.clone());

    // Nothing in it: it goes, but not before the grace period.
    create_ready(&cidrs, "test-free", "10.201.0.0/24").await?;
    // An address of someone else's does not hold it.
    let mut foreign = allocated("10.201.0.10", "web")?;
    foreign.metadata.labels = Some(
        [(
            "ipaddress.kubernetes.io/managed-by".to_string(),
            "someone-else".to_string(),
        )]
        .into(),
    );
    addresses.create(&PostParams::default(), &foreign).await?;
    cidrs.delete("test-free", &DeleteParams::default()).await?;
    let deleting = cidrs.get("test-free").await?;
    let deleted = deleting
        .metadata
        .deletion_timestamp
        .expect("being deleted")
        .0
        .as_millisecond();
    let started = Instant::now();
    wait_for(40, "test-free deleted", || async {
        Ok(cidrs.get_opt("test-free").await?.is_none().then_some(()))
    })
    .await?;
    // deletionTimestamp has whole seconds: the grace period ran at least 9 s.
    let gone = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    assert!(gone - deleted >= 9_000, "gone after {} ms", gone - deleted);
    assert!(started.elapsed() >= Duration::from_secs(8));

    // Held by an address, then released by a new ServiceCIDR containing it.
    create_ready(&cidrs, "test-child", "10.202.0.0/24").await?;
    addresses
        .create(&PostParams::default(), &allocated("10.202.0.10", "web")?)
        .await?;
    cidrs.delete("test-child", &DeleteParams::default()).await?;
    wait_terminating(&cidrs, "test-child").await?;
    create_ready(&cidrs, "test-parent", "10.202.0.0/16").await?;
    wait_for(40, "test-child deleted once contained", || async {
        Ok(cidrs.get_opt("test-child").await?.is_none().then_some(()))
    })
    .await?;
    // The parent now holds the address: deleting it waits.
    cidrs
        .delete("test-parent", &DeleteParams::default())
        .await?;
    wait_terminating(&cidrs, "test-parent").await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_services_cluster_ip_holds_its_service_cidr() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let manager = start(&srv, &cancel).await?;
    let cidrs: Api<ServiceCIDR> = Api::all(c.clone());
    let addresses: Api<IPAddress> = Api::all(c.clone());
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(c.clone(), "default");

    create_ready(&cidrs, "test-services", "10.203.0.0/24").await?;
    // The apiserver records the Service's cluster IP as an IPAddress of its allocator.
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"clusterIP": "10.203.0.10", "ports": [{"port": 80}]}
            }))?,
        )
        .await?;
    let ip = addresses.get("10.203.0.10").await?;
    let labels = ip.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("ipaddress.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("ipallocator.k8s.io")
    );
    cidrs
        .delete("test-services", &DeleteParams::default())
        .await?;
    wait_terminating(&cidrs, "test-services").await?;
    // The Service goes, its address with it, and then the ServiceCIDR.
    services.delete("web", &DeleteParams::default()).await?;
    wait_for(40, "test-services deleted after its Service", || async {
        Ok(cidrs
            .get_opt("test-services")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
