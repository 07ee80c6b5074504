//! HorizontalPodAutoscalers end to end on the test apiserver: targets brought into
//! their bounds through the scale subresource without any metrics, the failure to
//! read metrics reported in the status, and a Deployment scaled on the cpu
//! utilization served by a small `metrics.k8s.io` extension apiserver behind the
//! apiserver's aggregation layer, and by `Pods`, `Object` and `External` metrics served
//! by a fake `custom.metrics.k8s.io` / `external.metrics.k8s.io` server the same way.
//! Every wait is bounded in time.

use crate::support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::podautoscaler::HpaConfig;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, HorizontalPodAutoscalerStatus};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use support::wait_for;
use tokio_util::sync::CancellationToken;

/// The autoscaler, replicaset and deployment controllers, syncing autoscalers every
/// second.
async fn start_manager(c: &Client, cancel: CancellationToken) -> anyhow::Result<Manager> {
    let cfg = ManagerConfig {
        controllers: vec![
            "replicaset".into(),
            "deployment".into(),
            "horizontalpodautoscaling".into(),
        ],
        hpa: HpaConfig {
            sync_period: Duration::from_secs(1),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Manager::start(c.clone(), &cfg, cancel).await?)
}

fn template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "img",
            "resources": {"requests": {"cpu": "100m"}}}]}})
}

async fn create_deployment(c: &Client, name: &str, replicas: i32) -> anyhow::Result<()> {
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    deps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": template()}
        }))?,
    )
    .await?;
    Ok(())
}

async fn create_hpa(
    c: &Client,
    name: &str,
    target: (&str, &str, &str),
    min: i32,
    max: i32,
    utilization: i32,
) -> anyhow::Result<()> {
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(c.clone(), "default");
    let (api_version, kind, target) = target;
    hpas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"minReplicas": min, "maxReplicas": max,
                "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": utilization}}}]}
        }))?,
    )
    .await?;
    Ok(())
}

async fn deployment_replicas(c: &Client, name: &str) -> anyhow::Result<Option<i32>> {
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    Ok(deps.get(name).await?.spec.and_then(|s| s.replicas))
}

/// A condition of the autoscaler's status: (status, reason, message).
fn condition(st: &HorizontalPodAutoscalerStatus, type_: &str) -> Option<(String, String, String)> {
    st.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Waits until the autoscaler's status satisfies `ok`.
async fn wait_status(
    c: &Client,
    name: &str,
    what: &str,
    ok: impl Fn(&HorizontalPodAutoscalerStatus) -> bool,
) -> anyhow::Result<HorizontalPodAutoscalerStatus> {
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(c.clone(), "default");
    wait_for(30, what, || async {
        let st = hpas.get(name).await?.status.unwrap_or_default();
        Ok(ok(&st).then_some(st))
    })
    .await
}

/// The notes of the events of `reason` about the autoscaler `name` recorded by the
/// autoscaler controller.
async fn event_notes(c: &Client, name: &str, reason: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("HorizontalPodAutoscaler")
                && e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some(reason)
                // Upstream's component name.
                && e.source.as_ref().and_then(|s| s.component.as_deref())
                    == Some("horizontal-pod-autoscaler")
        })
        .filter_map(|e| e.message)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn targets_are_brought_into_bounds_and_missing_metrics_are_reported() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let manager = start_manager(&c, cancel.clone()).await?;

    // One replica under a minimum of two: scaled up with no metrics API at all.
    create_deployment(&c, "web", 1).await?;
    create_hpa(&c, "web", ("apps/v1", "Deployment", "web"), 2, 5, 50).await?;
    wait_for(30, "the deployment scaled to the minimum", || async {
        Ok((deployment_replicas(&c, "web").await? == Some(2)).then_some(()))
    })
    .await?;
    // Within the bounds the metrics decide, and there are none.
    let st = wait_status(&c, "web", "ScalingActive False", |st| {
        condition(st, "ScalingActive").is_some_and(|(s, _, _)| s == "False")
    })
    .await?;
    let (_, reason, message) = condition(&st, "ScalingActive").unwrap();
    assert_eq!(reason, "FailedGetResourceMetric");
    assert_eq!(
        message,
        "the HPA was unable to compute the replica count: failed to get cpu utilization: \
         unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: \
         the server could not find the requested resource (get pods.metrics.k8s.io)"
    );
    let (able, able_reason, _) = condition(&st, "AbleToScale").unwrap();
    assert_eq!(
        (able.as_str(), able_reason.as_str()),
        ("True", "SucceededGetScale")
    );
    assert_eq!((st.current_replicas, st.desired_replicas), (Some(2), 2));
    assert!(st.last_scale_time.is_some());
    let rescaled = wait_for(20, "the SuccessfulRescale event", || async {
        let notes = event_notes(&c, "web", "SuccessfulRescale").await?;
        Ok((!notes.is_empty()).then_some(notes))
    })
    .await?;
    assert_eq!(
        rescaled,
        vec!["New size: 2; reason: Current number of replicas below Spec.MinReplicas"]
    );
    wait_for(20, "the FailedComputeMetricsReplicas event", || async {
        Ok((!event_notes(&c, "web", "FailedComputeMetricsReplicas")
            .await?
            .is_empty())
        .then_some(()))
    })
    .await?;
    // Still two: a failed metric changes nothing.
    assert_eq!(deployment_replicas(&c, "web").await?, Some(2));

    // Four replicas of a ReplicaSet over a maximum of two: scaled down to it.
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    rss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "big"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "big"}},
                     "template": {"metadata": {"labels": {"app": "big"}},
                                  "spec": {"containers": [{"name": "c", "image": "img"}]}}}
        }))?,
    )
    .await?;
    create_hpa(&c, "big", ("apps/v1", "ReplicaSet", "big"), 1, 2, 50).await?;
    wait_for(30, "the replicaset scaled to the maximum", || async {
        let rs = rss.get("big").await?;
        Ok((rs.spec.and_then(|s| s.replicas) == Some(2)).then_some(()))
    })
    .await?;
    let st = wait_status(&c, "big", "desired 2", |st| st.desired_replicas == 2).await?;
    assert_eq!(st.current_replicas, Some(4));
    assert_eq!(
        condition(&st, "AbleToScale").map(|(s, r, _)| (s, r)),
        Some(("True".into(), "SucceededRescale".into()))
    );
    let notes = event_notes(&c, "big", "SuccessfulRescale").await?;
    assert_eq!(
        notes,
        vec!["New size: 2; reason: Current number of replicas above Spec.MaxReplicas"]
    );

    // A target that does not exist: AbleToScale False.
    create_hpa(&c, "ghost", ("apps/v1", "Deployment", "ghost"), 1, 2, 50).await?;
    let st = wait_status(&c, "ghost", "FailedGetScale", |st| {
        condition(st, "AbleToScale").is_some_and(|(s, r, _)| s == "False" && r == "FailedGetScale")
    })
    .await?;
    let (_, _, message) = condition(&st, "AbleToScale").unwrap();
    assert!(
        message.starts_with("the HPA controller was unable to get the target's current scale: "),
        "{message}"
    );

    cancel.cancel();
    manager.wait().await;
    Ok(())
}

const GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";

/// Serves `respond` over HTTPS for `metrics.kube-system.svc` until `cancel`. Returns
/// its port and CA (PEM).
async fn serve_tls(
    respond: ferrokube_client::serving::Respond,
    cancel: CancellationToken,
) -> anyhow::Result<(u16, String)> {
    let ca = ferrokube_pki::CertificateAuthority::generate("metrics-ca")?;
    let issued = ca.issue_serving_cert(
        "metrics",
        &["metrics.kube-system.svc".to_string()],
        &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        ferrokube_pki::Validity::leaf_default(),
    )?;
    let tls = ferrokube_pki::serving::server_config(
        &issued.cert_pem,
        &issued.key_pem,
        None,
        ferrokube_pki::serving::ALPN_HTTP1,
        &Default::default(),
    )?;
    let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    tokio::spawn(ferrokube_client::serving::serve(
        addr, tls, respond, None, cancel,
    ));
    Ok((port, ca.cert_pem().to_string()))
}

/// A `metrics.k8s.io/v1beta1` server over HTTPS for `metrics.kube-system.svc`: every
/// pod in `pods` uses `usage` cpu. Returns its port and CA (PEM).
async fn metrics_server(
    pods: Arc<Mutex<Vec<String>>>,
    usage: &'static str,
    cancel: CancellationToken,
) -> anyhow::Result<(u16, String)> {
    let respond: ferrokube_client::serving::Respond = Arc::new(move |path| match path {
        "/apis/metrics.k8s.io/v1beta1" => (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                "resources": [{"name": "pods", "singularName": "", "namespaced": true,
                    "kind": "PodMetrics", "verbs": ["get", "list"]}]})
            .to_string(),
        ),
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods" => {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let items: Vec<Value> = pods
                .lock()
                .iter()
                .map(|name| {
                    json!({"metadata": {"name": name, "namespace": "default"},
                        "timestamp": now, "window": "30s",
                        "containers": [{"name": "c", "usage": {"cpu": usage, "memory": "1Mi"}}]})
                })
                .collect();
            (
                200,
                json!({"kind": "PodMetricsList", "apiVersion": GROUP_VERSION,
                    "metadata": {}, "items": items})
                .to_string(),
            )
        }
        _ => (404, "404 page not found".into()),
    });
    serve_tls(respond, cancel).await
}

/// Registers the metrics server as `v1beta1.metrics.k8s.io` behind a Service and its
/// EndpointSlice, and waits for the APIService to be available.
async fn register_metrics_api(c: &Client, port: u16, ca: &str) -> anyhow::Result<()> {
    register_api_services(c, port, ca, &[("metrics.k8s.io", "v1beta1")]).await
}

/// Registers the server at `port` as the APIService of each (group, version) behind
/// one Service and its EndpointSlice, and waits for every APIService to be available.
async fn register_api_services(
    c: &Client,
    port: u16,
    ca: &str,
    apis: &[(&str, &str)],
) -> anyhow::Result<()> {
    let ca_bundle = serde_json::to_value(k8s_openapi::ByteString(ca.as_bytes().to_vec()))?;
    for (group, version) in apis {
        let body = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")},
            "spec": {"group": group, "version": version,
                "service": {"namespace": "kube-system", "name": "metrics", "port": 443},
                "caBundle": ca_bundle, "groupPriorityMinimum": 100, "versionPriority": 100}});
        let path = "/apis/apiregistration.k8s.io/v1/apiservices";
        let (code, _, answer) = TestApiServer::send_json(c, "POST", path, &body).await?;
        anyhow::ensure!(code == 201, "POST {path}: {code} {answer}");
    }
    for (path, body) in [
        (
            "/api/v1/namespaces/kube-system/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "metrics"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "metrics-abc",
                    "labels": {"kubernetes.io/service-name": "metrics"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
        ),
    ] {
        let (code, _, answer) = TestApiServer::send_json(c, "POST", path, &body).await?;
        anyhow::ensure!(code == 201, "POST {path}: {code} {answer}");
    }
    for (group, version) in apis {
        let path = format!("/apis/apiregistration.k8s.io/v1/apiservices/{version}.{group}");
        wait_for(
            30,
            &format!("the APIService {version}.{group} available"),
            || async {
                let (code, _, svc) =
                    TestApiServer::send_json(c, "GET", &path, &Value::Null).await?;
                let available = code == 200
                    && svc["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Available" && c["status"] == "True");
                Ok(available.then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}

/// A stand-in kubelet for the `app=web` pods: each reported Running and Ready, started
/// ten minutes ago (past the cpu initialization period), until `cancel`.
async fn run_pods(c: Client, cancel: CancellationToken) {
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let long_ago = (k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::from_secs(600))
    .strftime("%Y-%m-%dT%H:%M:%SZ")
    .to_string();
    while !cancel.is_cancelled() {
        if let Ok(list) = pods.list(&ListParams::default().labels("app=web")).await {
            for p in list.items {
                let running = p
                    .status
                    .as_ref()
                    .is_some_and(|s| s.phase.as_deref() == Some("Running"));
                if running || p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let name = p.metadata.name.clone().unwrap_or_default();
                let status = json!({"status": {"phase": "Running", "startTime": long_ago,
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": long_ago}]}});
                let _ = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn running_pods(c: &Client) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    Ok(pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .is_some_and(|s| s.phase.as_deref() == Some("Running"))
        })
        .filter_map(|p| p.metadata.name)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cpu_utilization_from_the_metrics_api_doubles_the_replicas() -> anyhow::Result<()> {
    let srv = TestApiServer::start_with(ferrokube_testing::with_aggregator).await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();

    // Pods using twice their cpu request (200m of 100m).
    let measured = Arc::new(Mutex::new(Vec::new()));
    let (port, ca) = metrics_server(measured.clone(), "200m", cancel.clone()).await?;
    register_metrics_api(&c, port, &ca).await?;

    tokio::spawn(run_pods(c.clone(), cancel.clone()));
    let manager = start_manager(&c, cancel.clone()).await?;
    create_deployment(&c, "web", 2).await?;
    let first = wait_for(30, "two running pods", || async {
        let pods = running_pods(&c).await?;
        Ok((pods.len() == 2).then_some(pods))
    })
    .await?;
    // Only these two are measured: the pods added later have no metrics, which a
    // scale-up counts as idle, so the count settles at twice the start.
    *measured.lock() = first;

    create_hpa(&c, "web", ("apps/v1", "Deployment", "web"), 1, 10, 100).await?;
    wait_for(30, "the deployment doubled", || async {
        Ok((deployment_replicas(&c, "web").await? == Some(4)).then_some(()))
    })
    .await?;
    let st = wait_status(&c, "web", "desired 4 with cpu at 200%", |st| {
        st.desired_replicas == 4
            && st
                .current_metrics
                .as_ref()
                .and_then(|m| m.first())
                .and_then(|m| m.resource.as_ref())
                .is_some_and(|r| r.current.average_utilization == Some(200))
    })
    .await?;
    let resource = st.current_metrics.as_ref().unwrap()[0]
        .resource
        .clone()
        .unwrap();
    assert_eq!(resource.name, "cpu");
    assert_eq!(
        resource.current.average_value.map(|q| q.0),
        Some("200m".to_string())
    );
    assert!(st.last_scale_time.is_some());
    let (active, reason, message) = condition(&st, "ScalingActive").unwrap();
    assert_eq!(
        (active.as_str(), reason.as_str()),
        ("True", "ValidMetricFound")
    );
    assert_eq!(
        message,
        "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"
    );
    let notes = event_notes(&c, "web", "SuccessfulRescale").await?;
    assert_eq!(
        notes,
        vec!["New size: 4; reason: cpu resource utilization (percentage of request) above target"]
    );

    // Several sync periods later the count holds at four.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert_eq!(deployment_replicas(&c, "web").await?, Some(4));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(running_pods(&c).await?.len(), 4);

    cancel.cancel();
    manager.wait().await;
    Ok(())
}

/// What the fake custom and external metrics server reports.
#[derive(Default)]
struct Reported {
    /// Pods reporting the `qps` custom metric (each at 20).
    qps_pods: Vec<String>,
    /// The values of the external metric `queue` (summed by the autoscaler).
    queue: Vec<&'static str>,
}

/// A server for `custom.metrics.k8s.io/v1beta2` and `external.metrics.k8s.io/v1beta1`:
/// the `qps` metric of the pods in `reported`, `hits` = 100 on the Service `front`,
/// the external `queue` values.
async fn custom_metrics_server(
    reported: Arc<Mutex<Reported>>,
    cancel: CancellationToken,
) -> anyhow::Result<(u16, String)> {
    const CUSTOM: &str = "custom.metrics.k8s.io/v1beta2";
    const EXTERNAL: &str = "external.metrics.k8s.io/v1beta1";
    let respond: ferrokube_client::serving::Respond = Arc::new(move |path| {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let pod_value = |kind: &str, name: &str, metric: &str, value: &str| {
            json!({"describedObject": {"kind": kind, "namespace": "default", "name": name,
                    "apiVersion": "/v1"},
                "metric": {"name": metric}, "timestamp": now, "windowSeconds": 30,
                "value": value})
        };
        let list = |kind: &str, group_version: &str, items: Vec<Value>| {
            (
                200,
                json!({"kind": kind, "apiVersion": group_version, "metadata": {},
                    "items": items})
                .to_string(),
            )
        };
        match path {
            "/apis/custom.metrics.k8s.io/v1beta2" => (
                200,
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": CUSTOM,
                    "resources": [{"name": "pods/qps", "singularName": "", "namespaced": true,
                        "kind": "MetricValueList", "verbs": ["get"]},
                        {"name": "services/hits", "singularName": "", "namespaced": true,
                        "kind": "MetricValueList", "verbs": ["get"]}]})
                .to_string(),
            ),
            "/apis/external.metrics.k8s.io/v1beta1" => (
                200,
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": EXTERNAL,
                    "resources": [{"name": "queue", "singularName": "", "namespaced": true,
                        "kind": "ExternalMetricValueList", "verbs": ["get"]}]})
                .to_string(),
            ),
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/qps" => {
                let items = reported
                    .lock()
                    .qps_pods
                    .iter()
                    .map(|name| pod_value("Pod", name, "qps", "20"))
                    .collect();
                list("MetricValueList", CUSTOM, items)
            }
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/services/front/hits" => list(
                "MetricValueList",
                CUSTOM,
                vec![pod_value("Service", "front", "hits", "100")],
            ),
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue" => {
                let items = reported
                    .lock()
                    .queue
                    .iter()
                    .map(|v| {
                        json!({"metricName": "queue", "metricLabels": {"queue": "jobs"},
                            "timestamp": now, "value": v})
                    })
                    .collect();
                list("ExternalMetricValueList", EXTERNAL, items)
            }
            _ => (404, "404 page not found".into()),
        }
    });
    serve_tls(respond, cancel).await
}

async fn create_hpa_with(c: &Client, name: &str, max: i32, metrics: Value) -> anyhow::Result<()> {
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(c.clone(), "default");
    hpas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"minReplicas": 1, "maxReplicas": max,
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "metrics": metrics}
        }))?,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn custom_and_external_metrics_scale_a_deployment() -> anyhow::Result<()> {
    let srv = TestApiServer::start_with(ferrokube_testing::with_aggregator).await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();

    let reported = Arc::new(Mutex::new(Reported::default()));
    let (port, ca) = custom_metrics_server(reported.clone(), cancel.clone()).await?;
    register_api_services(
        &c,
        port,
        &ca,
        &[
            ("custom.metrics.k8s.io", "v1beta2"),
            ("external.metrics.k8s.io", "v1beta1"),
        ],
    )
    .await?;

    tokio::spawn(run_pods(c.clone(), cancel.clone()));
    let manager = start_manager(&c, cancel.clone()).await?;
    create_deployment(&c, "web", 2).await?;
    let first = wait_for(30, "two running pods", || async {
        let pods = running_pods(&c).await?;
        Ok((pods.len() == 2).then_some(pods))
    })
    .await?;
    // Only these two report qps (20 each, twice the target): the pods added later have
    // no metric, which a scale-up counts as idle, so the count settles at four.
    reported.lock().qps_pods = first;

    // A Pods metric with an averageValue target.
    create_hpa_with(
        &c,
        "qps",
        10,
        json!([{"type": "Pods", "pods": {"metric": {"name": "qps"},
            "target": {"type": "AverageValue", "averageValue": "10"}}}]),
    )
    .await?;
    wait_for(30, "the deployment doubled on qps", || async {
        Ok((deployment_replicas(&c, "web").await? == Some(4)).then_some(()))
    })
    .await?;
    let st = wait_status(&c, "qps", "desired 4 with qps at 20", |st| {
        st.desired_replicas == 4
            && st
                .current_metrics
                .as_ref()
                .and_then(|m| m.first())
                .and_then(|m| m.pods.as_ref())
                .is_some_and(|p| {
                    p.current.average_value.as_ref().map(|q| q.0.as_str()) == Some("20")
                })
    })
    .await?;
    let metric = &st.current_metrics.as_ref().unwrap()[0];
    assert_eq!(metric.type_, "Pods");
    assert_eq!(metric.pods.as_ref().unwrap().metric.name, "qps");
    let (active, reason, message) = condition(&st, "ScalingActive").unwrap();
    assert_eq!(
        (active.as_str(), reason.as_str(), message.as_str()),
        (
            "True",
            "ValidMetricFound",
            "the HPA was able to successfully calculate a replica count from pods metric qps"
        )
    );
    let notes = wait_for(20, "the qps SuccessfulRescale event", || async {
        let notes = event_notes(&c, "qps", "SuccessfulRescale").await?;
        Ok((!notes.is_empty()).then_some(notes))
    })
    .await?;
    assert_eq!(
        notes,
        vec!["New size: 4; reason: pods metric qps above target"]
    );
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(deployment_replicas(&c, "web").await?, Some(4));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Another autoscaler takes over: an External metric (30 in all, 5 a pod: six
    // pods) next to an Object metric at its target (no change on its own).
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(c.clone(), "default");
    hpas.delete("qps", &Default::default()).await?;
    reported.lock().queue = vec!["20", "10"];
    create_hpa_with(
        &c,
        "queue",
        10,
        json!([
            {"type": "Object", "object": {"metric": {"name": "hits"},
                "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "front"},
                "target": {"type": "Value", "value": "100"}}},
            {"type": "External", "external": {
                "metric": {"name": "queue", "selector": {"matchLabels": {"queue": "jobs"}}},
                "target": {"type": "AverageValue", "averageValue": "5"}}}
        ]),
    )
    .await?;
    wait_for(30, "the deployment at six on the queue", || async {
        Ok((deployment_replicas(&c, "web").await? == Some(6)).then_some(()))
    })
    .await?;
    let st = wait_status(&c, "queue", "desired 6 with both metrics", |st| {
        st.desired_replicas == 6
            && st
                .current_metrics
                .as_ref()
                .is_some_and(|m| m.len() == 2 && m[0].object.is_some() && m[1].external.is_some())
    })
    .await?;
    let metrics = st.current_metrics.as_ref().unwrap();
    let object = metrics[0].object.as_ref().unwrap();
    assert_eq!(metrics[0].type_, "Object");
    assert_eq!(
        (
            object.described_object.kind.as_str(),
            object.described_object.name.as_str(),
            object.metric.name.as_str()
        ),
        ("Service", "front", "hits")
    );
    assert_eq!(
        object.current.value.as_ref().map(|q| q.0.as_str()),
        Some("100")
    );
    let external = metrics[1].external.as_ref().unwrap();
    assert_eq!(metrics[1].type_, "External");
    assert_eq!(external.metric.name, "queue");
    // 30 over the scale's status.replicas at the time.
    assert!(external.current.average_value.is_some());
    let selector = "&LabelSelector{MatchLabels:map[string]string{queue: jobs,},\
                    MatchExpressions:[]LabelSelectorRequirement{},}";
    let notes = wait_for(20, "the queue SuccessfulRescale event", || async {
        let notes = event_notes(&c, "queue", "SuccessfulRescale").await?;
        Ok((!notes.is_empty()).then_some(notes))
    })
    .await?;
    assert_eq!(
        notes,
        vec![format!(
            "New size: 6; reason: external metric queue({selector}) above target"
        )]
    );
    // At six the queue is at its target per pod: the count holds, now 5 a pod.
    let st = wait_status(&c, "queue", "the queue at 5 a pod", |st| {
        st.current_metrics
            .as_ref()
            .and_then(|m| m.get(1))
            .and_then(|m| m.external.as_ref())
            .and_then(|e| e.current.average_value.as_ref())
            .is_some_and(|q| q.0 == "5")
    })
    .await?;
    assert_eq!(st.desired_replicas, 6);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(deployment_replicas(&c, "web").await?, Some(6));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A metric the server does not have: FailedGetObjectMetric with upstream's
    // message, and the autoscaler stops scaling.
    create_hpa_with(
        &c,
        "missing",
        10,
        json!([{"type": "Object", "object": {"metric": {"name": "misses"},
            "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "front"},
            "target": {"type": "Value", "value": "1"}}}]),
    )
    .await?;
    let st = wait_status(&c, "missing", "FailedGetObjectMetric", |st| {
        condition(st, "ScalingActive").is_some_and(|(s, _, _)| s == "False")
    })
    .await?;
    let (_, reason, message) = condition(&st, "ScalingActive").unwrap();
    assert_eq!(reason, "FailedGetObjectMetric");
    assert!(
        message.starts_with(
            "the HPA was unable to compute the replica count: unable to get metric misses: \
             Service on default front/unable to fetch metrics from custom metrics API: "
        ),
        "{message}"
    );
    hpas.delete("missing", &Default::default()).await?;

    cancel.cancel();
    manager.wait().await;
    Ok(())
}
