//! Services and EndpointSlices for the proxiers' unit tests.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

/// A ClusterIP Service `ns/name` on port 80.
pub fn svc(name: &str, ip: &str) -> Arc<Service> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]},
        }))
        .unwrap(),
    )
}

/// Slice `ns/name` of Service `svc`: port 8080 on each of `ips`.
pub fn slice(svc: &str, name: &str, ips: &[&str]) -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": name,
                         "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "ports": [{"port": 8080}],
            "endpoints": ips.iter().map(|ip| json!({"addresses": [ip]})).collect::<Vec<_>>(),
        }))
        .unwrap(),
    )
}
