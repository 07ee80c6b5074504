//! EventRateLimit on the test apiserver, configured through an AdmissionConfiguration
//! file as `--admission-control-config-file` reads it: core/v1 Events over a
//! namespace's burst are 429, dry runs and events.k8s.io Events are not limited, and
//! the plugin refuses to start without a configuration.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

fn admission_config(o: &mut ferrokube_apiserver::Options, name: &str, yaml: &str) {
    o.admission_plugins
        .set("EventRateLimit", true)
        .expect("a known plugin");
    ferrokube_testing::with_admission_config(o, &format!("event-rate-limit-{name}"), yaml);
}

/// A namespace may create five events at once, then one a second.
fn with_namespace_limit(o: &mut ferrokube_apiserver::Options) {
    admission_config(
        o,
        "namespace",
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: EventRateLimit
  configuration:
    apiVersion: eventratelimit.admission.k8s.io/v1alpha1
    kind: Configuration
    limits:
    - type: Namespace
      qps: 1
      burst: 5
"#,
    );
}

fn with_no_limits(o: &mut ferrokube_apiserver::Options) {
    admission_config(
        o,
        "empty",
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins: []\n",
    );
}

fn event(name: &str) -> Value {
    event_in("default", name)
}

fn event_in(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
        "reason": "Test", "message": "m", "type": "Normal",
        "source": {"component": "test"}})
}

#[tokio::test]
async fn events_over_the_namespace_burst_are_too_many_requests() {
    let server = TestApiServer::start_with(with_namespace_limit)
        .await
        .unwrap();
    // kube-rs retries a 429 by default; the 429s are the answers here.
    let mut config = server.kube_config().await.unwrap();
    config.default_retry = false;
    let c = kube::Client::try_from(config).unwrap();
    let path = "/api/v1/namespaces/default/events";
    // Dry runs spend no tokens.
    for i in 0..10 {
        let (code, _, v) = TestApiServer::send_json(
            &c,
            "POST",
            &format!("{path}?dryRun=All"),
            &event(&format!("dry-{i}")),
        )
        .await
        .unwrap();
        assert_eq!(code, 201, "{v}");
    }
    // Thirty at once: the burst passes, the rest are refused (admission runs before
    // the write, so the store's sync latency does not refill the bucket in between).
    let results = futures::future::join_all((0..30).map(|i| {
        let c = c.clone();
        async move {
            TestApiServer::send_json(&c, "POST", path, &event(&format!("e{i}")))
                .await
                .unwrap()
        }
    }))
    .await;
    let created = results.iter().filter(|(code, _, _)| *code == 201).count();
    let refused: Vec<&Value> = results
        .iter()
        .filter(|(code, _, _)| *code != 201)
        .map(|(code, _, v)| {
            assert_eq!(*code, 429, "{v}");
            v
        })
        .collect();
    assert!((5..30).contains(&created), "{created} of 30 admitted");
    let v = refused[0];
    assert_eq!(v["reason"], "TooManyRequests");
    assert_eq!(
        v["message"],
        "Too many requests: Too many requests: limit reached on type Namespace for key default"
    );
    // events.k8s.io Events are another kind to upstream's plugin.
    let (code, _, v) = TestApiServer::send_json(
        &c,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "new"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "test",
            "reportingInstance": "test-1", "action": "Test", "reason": "Test", "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{v}");
    // Another namespace has its own bucket.
    let (code, _, v) = TestApiServer::send_json(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/events",
        &event_in("kube-system", "k"),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{v}");
}

#[tokio::test]
async fn event_rate_limit_without_limits_stops_the_start() {
    let Err(err) = TestApiServer::start_with(with_no_limits).await else {
        panic!("the server started without EventRateLimit's configuration");
    };
    let err = err.to_string();
    assert!(
        err.contains("EventRateLimit: limits: Required value: must not be empty"),
        "{err}"
    );
}
