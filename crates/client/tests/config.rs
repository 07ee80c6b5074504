//! Kubeconfig loading and client-side QPS limits against the real apiserver.

use std::time::{Duration, Instant};

use ferrokube_client::config::{ClientOptions, client_with_limits};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

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
