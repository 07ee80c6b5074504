//! HorizontalPodAutoscalers served as `autoscaling/v2` and `autoscaling/v1`: one
//! resource stored in the v2 form, what v1 has no field for carried in upstream's
//! `autoscaling.alpha.kubernetes.io/*` annotations.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

const V1: &str = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
const V2: &str = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";
const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";

fn target() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
}

async fn send(srv: &TestApiServer, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let (code, _, v) = TestApiServer::send_json(&srv.client, method, path, body)
        .await
        .unwrap();
    (code, v)
}

async fn get(srv: &TestApiServer, path: &str) -> Value {
    let (code, v) = send(srv, "GET", path, &Value::Null).await;
    assert_eq!(code, 200, "GET {path}: {v}");
    v
}

#[tokio::test]
async fn one_resource_seen_through_v1_and_v2() {
    let srv = TestApiServer::start().await.unwrap();

    // Written as v2 with a metric v1 cannot show and a behavior.
    let v2 = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "annotations": {METRICS: "stale", "team": "a"}},
        "spec": {
            "scaleTargetRef": target(), "minReplicas": 2, "maxReplicas": 5,
            "metrics": [
                {"type": "Pods", "pods": {"metric": {"name": "packets"},
                    "target": {"type": "AverageValue", "averageValue": "1k"}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 60}}}
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}
        }
    });
    let (code, created) = send(&srv, "POST", V2, &v2).await;
    assert_eq!(code, 201, "{created}");
    // Upstream's v2 drops the round-trip annotations: only conversion writes them.
    assert_eq!(created["metadata"]["annotations"], json!({"team": "a"}));

    let v1 = get(&srv, &format!("{V1}/web")).await;
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(v1["spec"]["minReplicas"], 2);
    let annotations = &v1["metadata"]["annotations"];
    assert_eq!(annotations["team"], "a");
    assert_eq!(
        annotations[METRICS],
        r#"[{"type":"Pods","pods":{"metricName":"packets","targetAverageValue":"1k"}}]"#
    );
    let behavior: Value = serde_json::from_str(annotations[BEHAVIOR].as_str().unwrap()).unwrap();
    assert_eq!(behavior["ScaleDown"]["StabilizationWindowSeconds"], 60);
    assert_eq!(behavior["ScaleUp"]["SelectPolicy"], "Max", "v2 defaults");
    assert_eq!(v1["metadata"]["generation"], 1);

    // A v1 update that keeps the annotations keeps what they carry.
    let mut update = v1.clone();
    update["spec"]["maxReplicas"] = json!(7);
    let (code, updated) = send(&srv, "PUT", &format!("{V1}/web"), &update).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"]["maxReplicas"], 7);
    let seen = get(&srv, &format!("{V2}/web")).await;
    assert_eq!(seen["spec"]["maxReplicas"], 7);
    assert_eq!(seen["spec"]["metrics"], v2["spec"]["metrics"]);
    assert_eq!(
        seen["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
        60
    );
    assert_eq!(seen["metadata"]["generation"], 2);
    assert!(seen["metadata"]["annotations"].get(METRICS).is_none());

    // Removing the annotation through v1 removes the metric it carried: a spec change.
    let (code, patched) = send(
        &srv,
        "PATCH",
        &format!("{V1}/web"),
        &json!({"metadata": {"annotations": {METRICS: null}}}),
    )
    .await;
    assert_eq!(code, 415, "a JSON body is not a patch type: {patched}");
    let (code, _, patched) = TestApiServer::raw(
        &srv.client,
        "PATCH",
        &format!("{V1}/web"),
        &[("content-type", "application/merge-patch+json")],
        serde_json::to_vec(&json!({"metadata": {"annotations": {METRICS: null}}})).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&patched));
    let seen = get(&srv, &format!("{V2}/web")).await;
    assert_eq!(seen["spec"]["metrics"], json!([v2["spec"]["metrics"][1]]));
    assert_eq!(seen["metadata"]["generation"], 3);
}

#[tokio::test]
async fn v1_objects_get_the_implied_cpu_target_and_v2_validation() {
    let srv = TestApiServer::start().await.unwrap();
    let hpa = |name: &str, annotations: Value| {
        json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"scaleTargetRef": target(), "maxReplicas": 3}
        })
    };
    let (code, created) = send(&srv, "POST", V1, &hpa("plain", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["minReplicas"], 1);
    // The CPU target v1 always implied, made explicit as upstream's conversion does.
    assert_eq!(created["spec"]["targetCPUUtilizationPercentage"], 80);
    let seen = get(&srv, &format!("{V2}/plain")).await;
    assert_eq!(
        seen["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}])
    );

    // What the annotations carry is validated as the internal (v2-shaped) object is.
    let no_policies = hpa(
        "bad",
        json!({BEHAVIOR: r#"{"ScaleUp":{"StabilizationWindowSeconds":60}}"#}),
    );
    let (code, status) = send(&srv, "POST", V1, &no_policies).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.behavior.scaleUp.policies"
    );
    let bad_min = json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "bad"},
        "spec": {"scaleTargetRef": target(), "maxReplicas": 3, "minReplicas": 0}
    });
    let (code, status) = send(&srv, "POST", V1, &bad_min).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.minReplicas");
}

#[tokio::test]
async fn status_annotations_move_with_the_status_half() {
    let srv = TestApiServer::start().await.unwrap();
    let v1 = json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "annotations": {
            // A create starts with an empty status, whatever the annotations say.
            CONDITIONS: r#"[{"type":"AbleToScale","status":"True","lastTransitionTime":null}]"#
        }},
        "spec": {"scaleTargetRef": target(), "maxReplicas": 4, "targetCPUUtilizationPercentage": 50}
    });
    let (code, created) = send(&srv, "POST", V1, &v1).await;
    assert_eq!(code, 201, "{created}");
    assert!(
        created["metadata"].get("annotations").is_none(),
        "{created}"
    );

    // The controller's status (v2) shows in v1 as fields and annotations.
    let mut status = get(&srv, &format!("{V2}/web")).await;
    status["status"] = json!({
        "currentReplicas": 2, "desiredReplicas": 3,
        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 42, "averageValue": "120m"}}}],
        "conditions": [{"type": "ScalingActive", "status": "True",
            "lastTransitionTime": "2026-01-02T03:04:05Z", "reason": "ValidMetricFound"}]
    });
    let (code, written) = send(&srv, "PUT", &format!("{V2}/web/status"), &status).await;
    assert_eq!(code, 200, "{written}");
    let seen = get(&srv, &format!("{V1}/web")).await;
    assert_eq!(seen["status"]["currentCPUUtilizationPercentage"], 42);
    assert_eq!(seen["status"]["desiredReplicas"], 3);
    let annotations = &seen["metadata"]["annotations"];
    assert_eq!(
        annotations[CONDITIONS],
        r#"[{"type":"ScalingActive","status":"True","lastTransitionTime":"2026-01-02T03:04:05Z","reason":"ValidMetricFound"}]"#
    );
    assert_eq!(
        annotations[CURRENT_METRICS],
        r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":42,"currentAverageValue":"120m"}}]"#
    );

    // A v1 write of the main resource leaves the status its annotations carry alone.
    let mut main = seen.clone();
    main["metadata"]["annotations"][CONDITIONS] = json!("[]");
    main["spec"]["maxReplicas"] = json!(6);
    let (code, written) = send(&srv, "PUT", &format!("{V1}/web"), &main).await;
    assert_eq!(code, 200, "{written}");
    let v2 = get(&srv, &format!("{V2}/web")).await;
    assert_eq!(v2["spec"]["maxReplicas"], 6);
    assert_eq!(v2["status"]["conditions"][0]["type"], "ScalingActive");

    // A v1 status write: its fields and its status annotations are the new status.
    let mut status = get(&srv, &format!("{V1}/web")).await;
    status["status"]["currentCPUUtilizationPercentage"] = json!(77);
    let annotations = status["metadata"]["annotations"].as_object_mut().unwrap();
    annotations.remove(CURRENT_METRICS);
    annotations.remove(CONDITIONS);
    let (code, written) = send(&srv, "PUT", &format!("{V1}/web/status"), &status).await;
    assert_eq!(code, 200, "{written}");
    let v2 = get(&srv, &format!("{V2}/web")).await;
    assert_eq!(
        v2["status"]["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 77}}}])
    );
    assert!(v2["status"].get("conditions").is_none(), "{v2}");
    assert_eq!(v2["spec"]["maxReplicas"], 6);
}

#[tokio::test]
async fn discovery_prefers_v2_and_tables_print_v1_from_every_metric() {
    let srv = TestApiServer::start().await.unwrap();
    let group = get(&srv, "/apis/autoscaling").await;
    assert_eq!(group["preferredVersion"]["version"], "v2");
    assert_eq!(
        group["versions"],
        json!([{"groupVersion": "autoscaling/v2", "version": "v2"},
               {"groupVersion": "autoscaling/v1", "version": "v1"}])
    );
    let apis = get(&srv, "/apis").await;
    let autoscaling: Vec<&Value> = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["name"] == "autoscaling")
        .collect();
    assert_eq!(autoscaling.len(), 1, "one group with two versions");
    let v1 = get(&srv, "/apis/autoscaling/v1").await;
    let names: Vec<&str> = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "horizontalpodautoscalers",
            "horizontalpodautoscalers/status"
        ]
    );

    let v2 = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": target(), "maxReplicas": 5,
            "metrics": [
                {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 60}}}
            ]
        }
    });
    let (code, created) = send(&srv, "POST", V2, &v2).await;
    assert_eq!(code, 201, "{created}");
    let (code, _, table) = TestApiServer::raw(
        &srv.client,
        "GET",
        V1,
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    let table: Value = serde_json::from_slice(&table).unwrap();
    let row = &table["rows"][0]["cells"];
    assert_eq!(row[1], "Deployment/web");
    assert_eq!(row[2], "memory: <unknown>/100Mi, cpu: <unknown>/60%");
}

#[tokio::test]
async fn a_v1_client_lists_and_watches_v2_writes_in_its_own_form() {
    use futures::StreamExt;
    use k8s_openapi::api::autoscaling::{v1, v2};
    use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

    let srv = TestApiServer::start().await.unwrap();
    let as_v1: Api<v1::HorizontalPodAutoscaler> = Api::namespaced(srv.client.clone(), "default");
    let as_v2: Api<v2::HorizontalPodAutoscaler> = Api::namespaced(srv.client.clone(), "default");
    let start = as_v1.list(&ListParams::default()).await.unwrap();
    let rv = start.metadata.resource_version.unwrap();
    let mut events = as_v1
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();

    let hpa: v2::HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": target(), "maxReplicas": 4, "metrics": [
            {"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 70}}}]}
    }))
    .unwrap();
    as_v2.create(&PostParams::default(), &hpa).await.unwrap();

    let event = tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
        .await
        .expect("a watch event within 10 s")
        .expect("the watch stays open")
        .unwrap();
    let WatchEvent::Added(added) = event else {
        panic!("expected ADDED, got {event:?}");
    };
    let spec = added.spec.unwrap();
    assert_eq!(spec.target_cpu_utilization_percentage, Some(70));
    assert_eq!(spec.max_replicas, 4);

    let listed = as_v1.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0]
            .spec
            .as_ref()
            .unwrap()
            .target_cpu_utilization_percentage,
        Some(70)
    );
}
