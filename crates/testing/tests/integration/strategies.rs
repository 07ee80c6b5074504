//! Defaulting, validation and the per-kind strategy steps, seen through kube-rs.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn api_status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

fn deployment(name: &str) -> Deployment {
    from(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}
            }
        }
    }))
}

#[tokio::test]
async fn defaults_are_visible_after_create() {
    let srv = TestApiServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    let d = deps
        .create(&PostParams::default(), &deployment("web"))
        .await
        .unwrap();
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["spec"]["replicas"], 1);
    assert_eq!(v["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(v["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(v["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(v["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    let pod_spec = &v["spec"]["template"]["spec"];
    assert_eq!(pod_spec["restartPolicy"], "Always");
    assert_eq!(pod_spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod_spec["schedulerName"], "default-scheduler");
    let c = &pod_spec["containers"][0];
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(v["metadata"]["generation"], 1);

    // Pod: phase Pending and the QoS class on create.
    let pods: Api<Pod> = Api::namespaced(srv.client.clone(), "default");
    let p = pods
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "c", "image": "busybox:1.36",
                 "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}]}})),
        )
        .await
        .unwrap();
    let status = p.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.qos_class.as_deref(), Some("Guaranteed"));
    let c = &p.spec.unwrap().containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    // Requests default to limits.
    assert_eq!(
        c.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0,
        "1"
    );

    // Namespace: the kubernetes finalizer, phase Active, the name label; the
    // finalizer survives an update that leaves it out.
    let nss: Api<Namespace> = Api::all(srv.client.clone());
    let ns = nss
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "team-a"}})),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&ns).unwrap();
    assert_eq!(v["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(v["status"]["phase"], "Active");
    assert_eq!(
        v["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    let ns = nss
        .patch(
            "team-a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"finalizers": null}, "metadata": {"labels": {"x": "y"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        ns.spec.unwrap().finalizers.unwrap(),
        vec!["kubernetes".to_string()]
    );

    // Job: generated selector and controller-uid / job-name labels.
    let jobs: Api<Job> = Api::namespaced(srv.client.clone(), "default");
    let j = jobs
        .create(
            &PostParams::default(),
            &from(
                json!({"metadata": {"name": "pi"}, "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "pi", "image": "perl"}]}}}}),
            ),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&j).unwrap();
    let uid = v["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        v["spec"]["selector"]["matchLabels"],
        json!({"batch.kubernetes.io/controller-uid": uid})
    );
    let labels = &v["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["controller-uid"], uid);
    assert_eq!(labels["batch.kubernetes.io/controller-uid"], uid);
    assert_eq!(labels["job-name"], "pi");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
    assert_eq!(v["spec"]["backoffLimit"], 6);
    assert_eq!(v["spec"]["completionMode"], "NonIndexed");
}

#[tokio::test]
async fn invalid_objects_get_422_with_every_cause() {
    let srv = TestApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(srv.client.clone(), "default");
    let e = pods
        .create(
            &PostParams::default(),
            &from(
                json!({"metadata": {"name": "Bad_Name", "labels": {"k": "v v"}},
                "spec": {"containers": [{"name": "c"}]}}),
            ),
        )
        .await
        .unwrap_err();
    let s = api_status(e);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    let causes: Vec<String> = s
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    for want in [
        "metadata.name",
        "metadata.labels",
        "spec.containers[0].image",
    ] {
        assert!(
            causes.iter().any(|c| c == want),
            "{want} missing from {causes:?}"
        );
    }
    assert!(s.message.starts_with("Pod \"Bad_Name\" is invalid: "));

    // Immutable fields on update: a Deployment's selector.
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    deps.create(&PostParams::default(), &deployment("d"))
        .await
        .unwrap();
    let e = deps
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "selector": {"matchLabels": {"app": "other"}},
                "template": {"metadata": {"labels": {"app": "other"}}}}})),
        )
        .await
        .unwrap_err();
    let s = api_status(e);
    assert_eq!(s.code, 422);
    assert!(s.message.contains("field is immutable"), "{}", s.message);

    // A Service's name is a DNS-1035 label.
    let svcs: Api<Service> = Api::namespaced(srv.client.clone(), "default");
    let e = svcs
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "1svc"},
                "spec": {"ports": [{"port": 80}]}})),
        )
        .await
        .unwrap_err();
    let s = api_status(e);
    assert_eq!(s.code, 422);
    assert_eq!(s.details.unwrap().causes[0].field, "metadata.name");
}

#[tokio::test]
async fn service_ip_families_and_node_ports_on_type_change() {
    let srv = TestApiServer::start().await.unwrap();
    let svcs: Api<Service> = Api::namespaced(srv.client.clone(), "default");
    let s = svcs
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}})),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    let ip = spec.cluster_ip.clone().unwrap();
    assert_eq!(spec.cluster_ips.unwrap(), vec![ip.clone()]);
    assert_eq!(spec.ip_families.unwrap(), vec!["IPv4".to_string()]);
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(spec.ports.unwrap()[0].node_port, None);

    // ClusterIP -> NodePort: a node port is allocated, the cluster IP kept.
    let s = svcs
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "NodePort"}})),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some(ip.as_str()));
    let port = spec.ports.unwrap()[0].node_port.unwrap();
    assert!((30000..=32767).contains(&port), "{port}");
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));

    // The port is taken: a second Service asking for it is refused.
    let e = svcs
        .create(
            &PostParams::default(),
            &from(
                json!({"metadata": {"name": "other"}, "spec": {"type": "NodePort",
                "ports": [{"port": 80, "nodePort": port}]}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(api_status(e).code, 422);

    // Back to ClusterIP: the node port is dropped and given back.
    let s = svcs
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    assert_eq!(spec.ports.unwrap()[0].node_port, None);
    assert_eq!(spec.external_traffic_policy, None);
    svcs.create(
        &PostParams::default(),
        &from(
            json!({"metadata": {"name": "other"}, "spec": {"type": "NodePort",
            "ports": [{"port": 80, "nodePort": port}]}}),
        ),
    )
    .await
    .unwrap();

    // Headless with a selector.
    let s = svcs
        .create(
            &PostParams::default(),
            &from(
                json!({"metadata": {"name": "headless"}, "spec": {"clusterIP": "None",
                "selector": {"app": "x"}, "ports": [{"port": 80}]}}),
            ),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    assert_eq!(spec.cluster_ips.unwrap(), vec!["None".to_string()]);
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
}

/// Upstream stores what its Go structs encode: the zero of a non-pointer `omitempty`
/// field is left out whoever sent it (`kubectl get -o yaml` never shows
/// `readyReplicas: 0`); a pointer's zero was set and stays.
#[tokio::test]
async fn zeros_go_leaves_out_are_not_stored() {
    let srv = TestApiServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    let mut d = deployment("zeros");
    let spec = d.spec.as_mut().unwrap();
    spec.replicas = Some(0);
    spec.min_ready_seconds = Some(0);
    let container = &mut spec.template.spec.as_mut().unwrap().containers[0];
    container.stdin = Some(false);
    container.ports = Some(vec![from(json!({"containerPort": 80, "hostPort": 0}))]);
    let created = deps.create(&PostParams::default(), &d).await.unwrap();
    let spec = created.spec.unwrap();
    assert_eq!((spec.replicas, spec.min_ready_seconds), (Some(0), None));
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!(container.stdin, None);
    let port = &container.ports.as_ref().unwrap()[0];
    assert_eq!((port.container_port, port.host_port), (80, None));

    // The status subresource too: omitempty counters go, the pointer stays.
    let status = json!({"status": {"replicas": 0, "readyReplicas": 0, "availableReplicas": 2,
        "collisionCount": 0}});
    let written = deps
        .patch_status("zeros", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        (
            written.replicas,
            written.ready_replicas,
            written.available_replicas,
            written.collision_count
        ),
        (None, None, Some(2), Some(0))
    );
    let read = deps.get("zeros").await.unwrap().status.unwrap();
    assert_eq!(read, written);
    srv.stop().await;
}
