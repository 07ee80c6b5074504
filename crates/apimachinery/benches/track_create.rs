//! Benchmark (not a test): the CPU of tracking one create in `managedFields`
//! (`managedfields::track_create`), which every create through the apiserver pays.
//!
//! The object is the benchmark pod of `bench-apiserver` as the registry holds it when
//! it tracks the create: decoded and defaulted, before admission. The driver reports
//! the wall time per call on one thread, which is its CPU time on an otherwise idle core.
//!
//! `cargo bench -p ferrokube-apimachinery --bench track_create [-- --calls N]`. Without
//! `--bench` (as `cargo test --benches` runs it) it makes a few hundred calls and checks
//! the record, to show that it still works.

use std::time::Instant;

use ferrokube_apimachinery::managedfields::{Schema, Scope, Writer, track_create};
use serde_json::{Value, json};

/// `bench-apiserver`'s pod once defaulted, as the registry tracks it.
fn defaulted_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"app": "bench", "tier": "load"}},
        "spec": {
            "containers": [{
                "name": "main",
                "image": "registry.example/bench/app:1.0",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench");
    let calls: usize = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(if benching { 200_000 } else { 300 });
    let writer = Writer {
        manager: "kube-rs",
        api_version: "v1",
        subresource: "",
        now: "2026-12-02T10:00:00Z",
        schema: Schema::for_kind("", "v1", "Pod"),
        scope: Scope::AllButStatus,
    };
    let pods: Vec<Value> = (0..calls)
        .map(|i| defaulted_pod(&format!("pod-{i}")))
        .collect();

    let started = Instant::now();
    let mut tracked = Vec::with_capacity(calls);
    for pod in pods {
        tracked.push(track_create(pod, &writer));
    }
    let elapsed = started.elapsed();

    let entry = &tracked[calls - 1]["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "kube-rs");
    let fields = &entry["fieldsV1"];
    assert!(fields["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]["f:image"].is_object());
    assert!(
        fields.get("f:status").is_none(),
        "status is not the main resource's"
    );
    println!(
        "{calls} creates tracked: {:.2} µs per create ({} bytes of fieldsV1)",
        elapsed.as_secs_f64() * 1e6 / calls as f64,
        serde_json::to_string(fields).map_or(0, |s| s.len()),
    );
}
