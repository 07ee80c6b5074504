//! Benchmark (not a test): the CPU of validating a CustomResourceDefinition whose one
//! wide node carries many `x-kubernetes-validations` rules, as a create or update of
//! it does (each rule compiled, field references checked, cost estimated).
//!
//! `cargo bench -p ferrokube-apiextensions --bench crd_rules [-- --properties N --rules M
//! [--refused]]`; with `--refused` every rule compares the node's object with an int,
//! which is refused naming the object's type (upstream's `selfType<n>`): the names of
//! the node's types are made once for all its rules.
//! Without `--bench` (as `cargo test --benches` runs it) it validates a small one and
//! checks that it passes, to show that it still works.

use std::time::Instant;

use ferrokube_apiextensions::crd::{default_crd, validate_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::json;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let properties = arg(&args, "--properties", if bench { 20_000 } else { 200 });
    let rules = arg(&args, "--rules", if bench { 2_000 } else { 20 }).min(properties);
    let refused = args.iter().any(|a| a == "--refused");

    let fields: serde_json::Map<_, _> = (0..properties)
        .map(|i| (format!("f{i}"), json!({"type": "string", "maxLength": 10})))
        .collect();
    let rule_list: Vec<_> = (0..rules)
        .map(|i| {
            if refused {
                json!({"rule": format!("self == {i}")})
            } else {
                json!({"rule": format!("self.f{i} == 'x'")})
            }
        })
        .collect();
    let spec =
        json!({"type": "object", "properties": fields, "x-kubernetes-validations": rule_list});
    let definition = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}],
        },
    });
    let size = serde_json::to_vec(&definition).expect("serializes").len();
    let mut crd: CustomResourceDefinition =
        serde_json::from_value(definition).expect("a CustomResourceDefinition");
    default_crd(&mut crd);

    let start = Instant::now();
    let errors = validate_crd(&crd);
    let took = start.elapsed();
    if refused {
        assert_eq!(errors.len(), rules, "{errors:?}");
        assert!(
            errors[0].to_string().contains("applied to '(selfType"),
            "{}",
            errors[0]
        );
    } else {
        assert!(errors.is_empty(), "{errors:?}");
    }
    if bench {
        let how = if refused { ", each refused" } else { "" };
        println!(
            "a CRD of {size} bytes, {properties} properties and {rules} rules{how} on one node: validated in {:.1} ms",
            took.as_secs_f64() * 1e3
        );
    }
}
