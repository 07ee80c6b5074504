//! Kubeconfig loading, client-side QPS limits and the client's request metrics
//! against the real apiserver.

use std::time::{Duration, Instant};

use ferrokube_client::config::{ClientOptions, build_client, client_with_limits};
use ferrokube_client::metrics::{rest_client_metrics, write_rest_client_metrics};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};

#[tokio::test]
async fn kubeconfig_flag_and_qps_burst() {
    let srv = TestApiServer::start().await.unwrap();
    let opts = ClientOptions {
        kubeconfig: Some(srv.kubeconfig.clone()),
        qps: 10.0,
        burst: 3,
        ..Default::default()
    };
    let client = opts.client().await.unwrap();
    let ns: Api<Namespace> = Api::all(client);
    let t = Instant::now();
    for _ in 0..8 {
        ns.get("default").await.unwrap();
    }
    // 3 from the burst, then 5 at 100 ms each.
    let limited = t.elapsed();
    assert!(limited >= Duration::from_millis(480), "{limited:?}");

    // A negative QPS disables the limiter.
    let config = opts.load_config().await.unwrap();
    let ns: Api<Namespace> = Api::all(client_with_limits(config, -1.0, 1).unwrap());
    let t = Instant::now();
    for _ in 0..8 {
        ns.get("default").await.unwrap();
    }
    let unlimited = t.elapsed();
    assert!(unlimited < limited, "{unlimited:?} vs {limited:?}");

    // --master overrides the server: an unreachable one fails.
    let bad = ClientOptions {
        master: Some("https://127.0.0.1:1".into()),
        ..opts.clone()
    };
    let ns: Api<Namespace> = Api::all(bad.client().await.unwrap());
    assert!(ns.get("default").await.is_err());
    srv.stop().await;
}

#[tokio::test]
async fn requests_are_recorded_by_code_method_and_host() {
    let srv = TestApiServer::start().await.unwrap();
    let opts = ClientOptions {
        kubeconfig: Some(srv.kubeconfig.clone()),
        ..Default::default()
    };
    let config = opts.load_config().await.unwrap();
    let host = config.cluster_url.authority().unwrap().to_string();
    let ns: Api<Namespace> = Api::all(build_client(config).unwrap());
    for _ in 0..3 {
        ns.get("default").await.unwrap();
    }
    assert!(ns.get("no-such-namespace").await.is_err());

    let metrics = rest_client_metrics();
    assert_eq!(metrics.requests.value(["200", &host, "GET"]), 3);
    assert_eq!(metrics.requests.value(["404", &host, "GET"]), 1);
    let latency = metrics.request_duration.get([&host, "GET"]).unwrap();
    assert_eq!(latency.count(), 4);
    // A namespace's JSON is some hundreds of bytes.
    let sizes = metrics.response_size.get([&host, "GET"]).unwrap();
    assert!(sizes.sum() > 4.0 * 64.0, "{}", sizes.sum());

    let mut page = String::new();
    write_rest_client_metrics(&mut page);
    let line =
        format!("rest_client_requests_total{{code=\"200\",host=\"{host}\",method=\"GET\"}} 3");
    assert!(page.lines().any(|l| l == line), "{page}");
    srv.stop().await;
}

#[tokio::test]
async fn writes_are_recorded_under_the_program_name() {
    let srv = TestApiServer::start().await.unwrap();
    let opts = ClientOptions {
        kubeconfig: Some(srv.kubeconfig.clone()),
        ..Default::default()
    };
    let config = opts.load_config().await.unwrap();
    // As client-go's, a component's client names its program and version, and the
    // apiserver records its writes under the program's name.
    let maps: Api<ConfigMap> = Api::namespaced(build_client(config).unwrap(), "default");
    let created = maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                serde_json::json!({"metadata": {"name": "agent"}, "data": {"x": "y"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let program = std::env::current_exe().unwrap();
    let program = program.file_name().unwrap().to_string_lossy();
    let managers = |map: &ConfigMap| -> Vec<String> {
        map.metadata
            .managed_fields
            .iter()
            .flatten()
            .map(|m| m.manager.clone().unwrap_or_default())
            .collect()
    };
    assert_eq!(managers(&created), [program.to_string()]);

    // A User-Agent of the configuration's own is kept.
    let mut config = opts.load_config().await.unwrap();
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static("my-operator/v2"),
    ));
    let maps: Api<ConfigMap> = Api::namespaced(build_client(config).unwrap(), "default");
    let patched = maps
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"a": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        managers(&patched),
        [program.to_string(), "my-operator".to_string()]
    );
    srv.stop().await;
}
