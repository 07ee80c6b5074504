//! The API objects the rule tests build rules from: Services in namespace `ns` with
//! one `http` port 80 -> 8080, their EndpointSlices, and the node `node-a`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

/// The proxy's node.
pub const NODE: &str = "node-a";

/// Service `ns/name` with cluster IP `ip`; `spec`'s fields replace the defaults'.
pub fn service(name: &str, ip: &str, spec: Value) -> Service {
    let mut s = json!({
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"clusterIP": ip, "clusterIPs": [ip], "type": "ClusterIP",
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
    });
    if let (Some(a), Value::Object(b)) = (s["spec"].as_object_mut(), spec) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
    serde_json::from_value(s).unwrap()
}

/// An endpoint: (ip, node, ready, serving, terminating).
pub type Ep<'a> = (&'a str, &'a str, bool, bool, bool);

pub fn ready<'a>(ip: &'a str, node: &'a str) -> Ep<'a> {
    (ip, node, true, true, false)
}

/// Slice `ns/name` of `service` in address family `family` (`IPv4`, `IPv6`).
pub fn slice_family(service: &str, name: &str, family: &str, eps: &[Ep<'_>]) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": "ns", "name": name,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": family,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": eps.iter().map(|(ip, node, ready, serving, terminating)| json!({
            "addresses": [ip], "nodeName": node,
            "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

/// The proxy's Node with these InternalIPs.
pub fn node(addresses: &[&str]) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": NODE},
        "status": {"addresses": addresses.iter().map(|a| json!({"type": "InternalIP", "address": a})).collect::<Vec<_>>()},
    }))
    .unwrap()
}

/// The netns tests' Service: `default/web`, NodePort 30080, cluster IP 10.96.0.20.
pub fn web_service() -> Arc<Service> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
                     "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]},
        }))
        .unwrap(),
    )
}

/// The netns tests' slice of `web`: the pod 10.244.0.5:8080 on `node-a`.
pub fn web_slice(ready: bool) -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "web-1",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.244.0.5"], "nodeName": NODE,
                           "conditions": {"ready": ready}}],
        }))
        .unwrap(),
    )
}

/// The load-balancer tests' Service: `default/lb`, type LoadBalancer, cluster IP
/// 10.96.0.30, load-balancer IP 198.51.100.10 (in its status), port 80 to the pod's
/// 8080, with these `loadBalancerSourceRanges`.
pub fn lb_service(ranges: &[&str]) -> Arc<Service> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "lb"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.30", "clusterIPs": ["10.96.0.30"],
                     "ports": [{"port": 80, "protocol": "TCP"}],
                     "loadBalancerSourceRanges": ranges},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.10"}]}},
        }))
        .unwrap(),
    )
}

/// The slice of `lb`: the pod 10.244.0.5:8080 on `node-a`, ready.
pub fn lb_slice() -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "lb-1",
                         "labels": {"kubernetes.io/service-name": "lb"}},
            "addressType": "IPv4",
            "ports": [{"port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.244.0.5"], "nodeName": NODE,
                           "conditions": {"ready": true}}],
        }))
        .unwrap(),
    )
}
