//! Benchmark (not a test): the CPU of evaluating a ValidatingAdmissionPolicy's
//! expressions against one Deployment, as the admission plugin does for every
//! matching request: a few validations, one with a comprehension (metered), one
//! message expression.
//!
//! `cargo bench -p ferrokube-cel --bench policy_eval [-- --evals N]`.
//! Without `--bench` (as `cargo test --benches` runs it) it makes a few thousand
//! evaluations and checks their results, to show that it still works.

use std::time::Instant;

use ferrokube_cel::{Activation, Budget, POLICY_VARIABLES, RUNTIME_COST_BUDGET, compile};
use serde_json::json;

const EXPRESSIONS: &[&str] = &[
    "object.spec.replicas <= 5",
    "object.metadata.name.startsWith('web') && size(object.metadata.labels) > 0",
    "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))",
    "'replicas: ' + string(object.spec.replicas) != ''",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let evals: u32 = args
        .iter()
        .position(|a| a == "--evals")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(if bench { 200_000 } else { 2_000 });

    let programs: Vec<_> = EXPRESSIONS
        .iter()
        .map(|e| compile(e, POLICY_VARIABLES).expect("the expressions compile"))
        .collect();
    let deployment = json!({
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "nginx", "image": "nginx:1.27"},
            {"name": "sidecar", "image": "busybox:1.36"}]}}}
    });
    let mut activation = Activation::new();
    activation
        .bind_json("object", &deployment)
        .bind_json("oldObject", &serde_json::Value::Null);

    let start = Instant::now();
    for _ in 0..evals {
        let mut budget = Budget::new(RUNTIME_COST_BUDGET);
        for p in &programs {
            let passed = budget.eval_bool(&activation, p).expect("within budget");
            assert_eq!(passed, Ok(true), "{}", p.source());
        }
    }
    let took = start.elapsed();
    if bench {
        println!(
            "{evals} policy evaluations of {} expressions: {:.2} µs per expression",
            programs.len(),
            took.as_secs_f64() * 1e6 / f64::from(evals) / programs.len() as f64
        );
    }
}
