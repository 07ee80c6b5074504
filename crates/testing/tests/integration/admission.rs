//! The built-in admission plugins on the test apiserver, through a real client:
//! LimitRanger, ResourceQuota, DefaultTolerationSeconds, Priority and the others,
//! with upstream's 403 messages.

use std::time::Duration;

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{
    ConfigMap, LimitRange, Node, PersistentVolume, PersistentVolumeClaim, Pod, ResourceQuota,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn typed<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert_eq!(s.reason, "Forbidden");
            s.message
        }
        other => panic!("expected 403, got {other:?}"),
    }
}

fn pod(name: &str, resources: Value) -> Pod {
    typed(json!({"metadata": {"name": name}, "spec": {"containers": [
        {"name": "c", "image": "busybox", "resources": resources}]}}))
}

/// Dry-run creates of `probe` until `ready` holds for the result: objects reach the
/// plugins through the watch cache, a moment after they are written.
async fn until_admitted<F>(pods: &Api<Pod>, probe: &Pod, ready: F) -> Pod
where
    F: Fn(&Pod) -> bool,
{
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for _ in 0..100 {
        if let Ok(p) = pods.create(&dry, probe).await
            && ready(&p)
        {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the plugin never saw its objects");
}

#[tokio::test]
async fn limit_ranger_defaults_and_enforces() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let ns = "default";
    Api::<LimitRange>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "limits"}, "spec": {"limits": [
                {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                 "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "1"}},
                {"type": "Pod", "max": {"memory": "1Gi"}},
                {"type": "PersistentVolumeClaim", "max": {"storage": "2Gi"}}]}})),
        )
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let bare = pod("bare", json!({}));
    until_admitted(&pods, &bare, |p| p.metadata.annotations.is_some()).await;
    let created = pods.create(&PostParams::default(), &bare).await.unwrap();
    let r = created.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap();
    let requests = r.requests.unwrap();
    let limits = r.limits.unwrap();
    assert_eq!(requests["cpu"].0, "100m");
    // The LimitRange's own defaulting copied default into defaultRequest for memory.
    assert_eq!(requests["memory"].0, "256Mi");
    assert_eq!(limits["cpu"].0, "500m");
    assert_eq!(
        created.metadata.annotations.unwrap()["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c"
    );

    let big = pod(
        "big",
        json!({"limits": {"cpu": "2", "memory": "2Gi"}, "requests": {"cpu": "2", "memory": "2Gi"}}),
    );
    assert_eq!(
        forbidden(pods.create(&PostParams::default(), &big).await),
        "pods \"big\" is forbidden: [maximum cpu usage per Container is 1, but limit is 2, \
         maximum memory usage per Pod is 1Gi, but limit is 2Gi]"
    );
    // An in-place resize is held to the same limits.
    let resize = |cpu: &str| {
        let patch = json!({"spec": {"containers": [{"name": "c",
            "resources": {"limits": {"cpu": cpu}}}]}});
        let pods = pods.clone();
        async move {
            pods.patch_subresource(
                "resize",
                "bare",
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        }
    };
    assert_eq!(
        forbidden(resize("2").await),
        "pods \"bare\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
    );
    resize("800m").await.unwrap();

    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    let claim: PersistentVolumeClaim = typed(json!({"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}));
    assert_eq!(
        forbidden(claims.create(&PostParams::default(), &claim).await),
        "persistentvolumeclaims \"data\" is forbidden: maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 5Gi"
    );
}

#[tokio::test]
async fn resource_quota_charges_and_refuses_with_upstream_messages() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let ns = "default";
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    let hard = json!({"pods": "2", "requests.cpu": "1", "configmaps": "1"});
    quotas
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "compute"}, "spec": {"hard": hard}})),
        )
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let sized = |name: &str, cpu: &str| {
        pod(
            name,
            json!({"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}),
        )
    };
    // A quota the controller has not seen (no status.hard) is not enforced yet; one
    // with limits but no usage for them refuses what it tracks, as upstream.
    let probe = sized("probe", "100m");
    quotas
        .patch_status(
            "compute",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": hard, "used": {"configmaps": "0"}}})),
        )
        .await
        .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut refused = String::new();
    for _ in 0..100 {
        match pods.create(&dry, &probe).await {
            Err(kube::Error::Api(s)) if s.code == 403 => {
                refused = s.message;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert_eq!(
        refused,
        "pods \"probe\" is forbidden: status unknown for quota: compute, resources: pods,requests.cpu"
    );
    // What the resourcequota controller writes.
    quotas
        .patch_status(
            "compute",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": hard,
                "used": {"pods": "0", "requests.cpu": "0", "configmaps": "0"}}})),
        )
        .await
        .unwrap();
    until_admitted(&pods, &probe, |_| true).await;
    pods.create(&PostParams::default(), &sized("a", "600m"))
        .await
        .unwrap();
    let used = quotas
        .get_status("compute")
        .await
        .unwrap()
        .status
        .unwrap()
        .used
        .unwrap();
    assert_eq!(used["pods"].0, "1");
    assert_eq!(used["requests.cpu"].0, "600m");
    // A stale cache cannot admit it: the charge is written with the quota's
    // resourceVersion and re-checked on a conflict.
    assert_eq!(
        forbidden(
            pods.create(&PostParams::default(), &sized("b", "500m"))
                .await
        ),
        "pods \"b\" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=600m, limited: requests.cpu=1"
    );
    // An in-place resize is charged for what it adds.
    let resize = |cpu: &str| {
        let patch = json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}});
        let pods = pods.clone();
        async move {
            pods.patch_subresource(
                "resize",
                "a",
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        }
    };
    assert_eq!(
        forbidden(resize("1200m").await),
        "pods \"a\" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"
    );
    resize("900m").await.unwrap();
    let used = quotas
        .get_status("compute")
        .await
        .unwrap()
        .status
        .unwrap()
        .used
        .unwrap();
    assert_eq!(used["requests.cpu"].0, "900m");
    let bare = pod("bare", json!({}));
    assert_eq!(
        forbidden(pods.create(&PostParams::default(), &bare).await),
        "pods \"bare\" is forbidden: failed quota: compute: must specify requests.cpu for: c"
    );
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    cms.create(
        &PostParams::default(),
        &typed(json!({"metadata": {"name": "one"}})),
    )
    .await
    .unwrap();
    let two = cms
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "two"}})),
        )
        .await;
    assert_eq!(
        forbidden(two),
        "configmaps \"two\" is forbidden: exceeded quota: compute, requested: configmaps=1, used: configmaps=1, limited: configmaps=1"
    );
}

#[tokio::test]
async fn default_toleration_seconds_adds_not_ready_and_unreachable() {
    let server = TestApiServer::start_with(|o| {
        o.admission_plugins.default_unreachable_toleration_seconds = 60
    })
    .await
    .unwrap();
    let pods = Api::<Pod>::namespaced(server.client.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    let tolerations = serde_json::to_value(created.spec.unwrap().tolerations).unwrap();
    assert_eq!(
        tolerations,
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
        ])
    );
}

#[tokio::test]
async fn priority_resolves_classes_and_refuses_unknown_ones() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let classes = Api::<PriorityClass>::all(client.clone());
    // The built-in classes exist from the start.
    let node_critical = classes.get("system-node-critical").await.unwrap();
    assert_eq!(node_critical.value, 2_000_001_000);
    assert_eq!(
        classes.get("system-cluster-critical").await.unwrap().value,
        2_000_000_000
    );
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    let with_class = |name: &str, class: &str| -> Pod {
        typed(
            json!({"metadata": {"name": name}, "spec": {"priorityClassName": class,
            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
    };
    let critical = pods
        .create(
            &PostParams::default(),
            &with_class("critical", "system-cluster-critical"),
        )
        .await
        .unwrap();
    assert_eq!(critical.spec.unwrap().priority, Some(2_000_000_000));
    assert_eq!(
        forbidden(
            pods.create(&PostParams::default(), &with_class("lost", "missing"))
                .await
        ),
        "pods \"lost\" is forbidden: no PriorityClass with name missing was found"
    );
    let plain = pods
        .create(&PostParams::default(), &pod("plain", json!({})))
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(
        (plain.priority, plain.preemption_policy.as_deref()),
        (Some(0), Some("PreemptLowerPriority"))
    );

    // A global default class applies to pods without a class; a second is refused.
    classes
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "everyone"}, "value": 100,
                "globalDefault": true, "preemptionPolicy": "Never"})),
        )
        .await
        .unwrap();
    let mut seen = None;
    for _ in 0..100 {
        match classes
            .create(
                &PostParams::default(),
                &typed(json!({"metadata": {"name": "second"}, "value": 5,
                    "globalDefault": true})),
            )
            .await
        {
            Err(kube::Error::Api(s)) => {
                seen = Some(s);
                break;
            }
            Err(e) => panic!("{e}"),
            // The plugin had not seen `everyone` yet: undo and retry.
            Ok(_) => {
                classes.delete("second", &Default::default()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let s = seen.expect("a second default class was always accepted");
    assert_eq!(s.code, 403);
    assert_eq!(
        s.message,
        "priorityclasses.scheduling.k8s.io \"second\" is forbidden: PriorityClass everyone is already marked as default. Only one default can exist"
    );
    let defaulted = until_admitted(&pods, &pod("defaulted", json!({})), |p| {
        p.spec.as_ref().and_then(|s| s.priority) == Some(100)
    })
    .await
    .spec
    .unwrap();
    assert_eq!(defaulted.priority_class_name.as_deref(), Some("everyone"));
    assert_eq!(defaulted.preemption_policy.as_deref(), Some("Never"));
}

#[tokio::test]
async fn taint_nodes_by_condition_taints_new_nodes_not_ready() {
    let server = TestApiServer::start().await.unwrap();
    let nodes = Api::<Node>::all(server.client.clone());
    let created = nodes
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "n1"}, "spec": {"taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(created.spec.unwrap().taints).unwrap(),
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
               {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    );
    // Only creation: an update may remove it (the node lifecycle controller does).
    let updated = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .unwrap();
    assert_eq!(updated.spec.unwrap().taints, None);
}

/// Retries `call` while the webhook configuration has not reached the plugin's
/// cache yet (`call` succeeds), returning the first error.
async fn first_error<F, Fut>(mut call: F) -> (u16, String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (u16, Value)>,
{
    for _ in 0..100 {
        let (code, body) = call().await;
        if code >= 400 {
            return (code, body["message"].as_str().unwrap_or("").to_string());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the request never went through admission");
}

#[tokio::test]
async fn eviction_binding_and_connect_go_through_admission() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    // A webhook matching only the subresources, at an address nothing answers on,
    // failing closed: whatever reaches it is refused.
    let hooks = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "subresources"},
        "webhooks": [{"name": "subresources.example.com", "failurePolicy": "Fail",
            "timeoutSeconds": 1, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/review"},
            "rules": [
                {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                 "resources": ["pods/binding", "pods/eviction"]},
                {"operations": ["CONNECT"], "apiGroups": [""], "apiVersions": ["v1"],
                 "resources": ["pods/exec"]}]}]});
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        &hooks,
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    // Pods themselves are not matched.
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    let (code, message) = first_error(|| async {
        let (code, _, body) = TestApiServer::send_json(
            &client,
            "POST",
            "/api/v1/namespaces/default/pods/p/binding",
            &binding,
        )
        .await
        .unwrap();
        (code, body)
    })
    .await;
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("failed calling webhook \"subresources.example.com\""),
        "{message}"
    );
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "default"}});
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "POST",
        "/api/v1/namespaces/default/pods/p/eviction",
        &eviction,
    )
    .await
    .unwrap();
    assert_eq!(code, 500, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("failed calling webhook"),
        "{body}"
    );
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "POST",
        "/api/v1/namespaces/default/pods/p/exec?command=ls&stdout=1",
        &json!({}),
    )
    .await
    .unwrap();
    assert_eq!(code, 500, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("failed calling webhook"),
        "{body}"
    );
    // Neither the binding nor the eviction happened.
    let p = pods.get("p").await.unwrap();
    assert_eq!(p.spec.unwrap().node_name, None);
    assert!(p.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn node_restriction_sees_evictions() {
    let server = TestApiServer::start().await.unwrap();
    let pods = Api::<Pod>::namespaced(server.client.clone(), "default");
    let on_a: Pod = typed(
        json!({"metadata": {"name": "on-a"}, "spec": {"nodeName": "a",
        "containers": [{"name": "c", "image": "busybox"}]}}),
    );
    pods.create(&PostParams::default(), &on_a).await.unwrap();
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "on-a", "namespace": "default"}});
    let node_b = server
        .client_as("system:node:b", &["system:nodes"])
        .await
        .unwrap();
    let (code, _, body) = TestApiServer::send_json(
        &node_b,
        "POST",
        "/api/v1/namespaces/default/pods/on-a/eviction",
        &eviction,
    )
    .await
    .unwrap();
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "pods \"on-a\" is forbidden: node \"b\" can only evict pods with spec.nodeName set to itself"
    );
    let node_a = server
        .client_as("system:node:a", &["system:nodes"])
        .await
        .unwrap();
    let (code, _, body) = TestApiServer::send_json(
        &node_a,
        "POST",
        "/api/v1/namespaces/default/pods/on-a/eviction",
        &eviction,
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn default_storage_class_and_claim_resize() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let classes = Api::<StorageClass>::all(client.clone());
    for (name, default, expandable) in [("fast", "true", true), ("fixed", "false", false)] {
        classes
            .create(
                &PostParams::default(),
                &typed(json!({"metadata": {"name": name, "annotations": {
                    "storageclass.kubernetes.io/is-default-class": default}},
                    "provisioner": "example.com/disk", "allowVolumeExpansion": expandable})),
            )
            .await
            .unwrap();
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default");
    let claim = |name: &str, class: Option<&str>| -> PersistentVolumeClaim {
        let mut c = json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}});
        if let Some(class) = class {
            c["spec"]["storageClassName"] = json!(class);
        }
        typed(c)
    };
    // The class reaches the plugin through the watch cache, a moment after it is written.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut defaulted = None;
    for _ in 0..100 {
        let c = claims.create(&dry, &claim("bare", None)).await.unwrap();
        if c.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .is_some()
        {
            defaulted = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let defaulted = defaulted.expect("the default class never applied");
    assert_eq!(
        defaulted.spec.unwrap().storage_class_name.as_deref(),
        Some("fast")
    );
    // An explicit empty class stays empty (no dynamic provisioning).
    let none = claims
        .create(&PostParams::default(), &claim("none", Some("")))
        .await
        .unwrap();
    assert_eq!(none.spec.unwrap().storage_class_name.as_deref(), Some(""));

    // Resizing: bound claims of an expandable class may grow.
    for (name, class) in [("grows", "fast"), ("stuck", "fixed")] {
        claims
            .create(&PostParams::default(), &claim(name, Some(class)))
            .await
            .unwrap();
        claims
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Bound"}})),
            )
            .await
            .unwrap();
    }
    let grow = Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    let grown = claims
        .patch("grows", &PatchParams::default(), &grow)
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(grown.spec.unwrap().resources.unwrap().requests).unwrap(),
        json!({"storage": "2Gi"})
    );
    assert_eq!(
        forbidden(claims.patch("stuck", &PatchParams::default(), &grow).await),
        "persistentvolumeclaims \"stuck\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
    );
}

/// `openssl req -new -subj "/O=system:masters/O=dev/CN=alice"` (P-256).
const MASTERS_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHyMIGZAgEAMDcxFzAVBgNVBAoMDnN5c3RlbTptYXN0ZXJzMQwwCgYDVQQKDANk
ZXYxDjAMBgNVBAMMBWFsaWNlMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfv0V
wTTjpLjNyJX/EURUIJXr8rZmf/osMZRC5pt0e30W5wbLw3sOS4edW4YUQkstI5hj
7gJpz5zU+CaHFJIo3aAAMAoGCCqGSM49BAMCA0gAMEUCIDtCcOCvZ1YkaQGPDXi7
2G48E/IuylrRyTceFjbKN60RAiEA1tWv3RgFRag0+9OkKfWqvqthyDXPa4elnL6s
oQ0UNz4=
-----END CERTIFICATE REQUEST-----
";

#[tokio::test]
async fn certificate_plugins_check_signers_and_subjects() {
    use base64::Engine as _;
    let server = TestApiServer::start().await.unwrap();
    let admin = server.client.clone();
    let request = base64::engine::general_purpose::STANDARD.encode(MASTERS_CSR);
    let csr = |name: &str, signer: &str| {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name}, "spec": {"signerName": signer, "request": request,
            "usages": ["client auth"]}})
    };
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let (code, _, body) = TestApiServer::send_json(
        &admin,
        "POST",
        csrs,
        &csr("masters", "kubernetes.io/kube-apiserver-client"),
    )
    .await
    .unwrap();
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "certificatesigningrequests.certificates.k8s.io \"masters\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
    );
    let (code, _, body) =
        TestApiServer::send_json(&admin, "POST", csrs, &csr("mine", "example.com/issuer"))
            .await
            .unwrap();
    assert_eq!(code, 201, "{body}");

    // The approval subresource takes only the conditions (upstream's approval
    // strategy): the changed usages in the same body are dropped.
    let approval = format!("{csrs}/mine/approval");
    let mut approved = TestApiServer::send_json(&admin, "GET", &approval, &json!(null))
        .await
        .unwrap()
        .2;
    approved["spec"]["usages"] = json!(["server auth"]);
    approved["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "KubectlApprove", "message": "approved by the test"}]);
    let (code, _, body) = TestApiServer::send_json(&admin, "PUT", &approval, &approved)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"]["conditions"][0]["type"], "Approved");
    assert_eq!(body["spec"]["usages"], json!(["client auth"]));

    // Setting the certificate needs `sign` on the signer, which `signer` lacks.
    let (code, _, body) = TestApiServer::send_json(
        &admin,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "csr-status"}, "rules": [{"apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests/status"], "verbs": ["update"]}]}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    let (code, _, body) = TestApiServer::send_json(
        &admin,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "csr-status"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole", "name": "csr-status"},
            "subjects": [{"kind": "User", "name": "signer", "apiGroup": "rbac.authorization.k8s.io"}]}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    let signer = server.client_as("signer", &[]).await.unwrap();
    let object = format!("{csrs}/mine");
    let status = format!("{csrs}/mine/status");
    let mut signed = TestApiServer::send_json(&admin, "GET", &object, &json!(null))
        .await
        .unwrap()
        .2;
    signed["status"]["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode("x"));
    // Until the binding reaches the authorizer, RBAC itself refuses the update.
    let mut body = Value::Null;
    for _ in 0..100 {
        let (code, _, b) = TestApiServer::send_json(&signer, "PUT", &status, &signed)
            .await
            .unwrap();
        body = b;
        if code == 403
            && body["message"]
                .as_str()
                .unwrap_or("")
                .contains("signerName")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        body["message"],
        "certificatesigningrequests.certificates.k8s.io \"mine\" is forbidden: user not permitted to sign requests with signerName \"example.com/issuer\""
    );
}

#[tokio::test]
async fn storage_object_in_use_protection_adds_finalizers() {
    let server = TestApiServer::start().await.unwrap();
    let claims = Api::<PersistentVolumeClaim>::namespaced(server.client.clone(), "default");
    let claim = claims
        .create(
            &PostParams::default(),
            &typed(
                json!({"metadata": {"name": "data", "finalizers": ["example.com/keep"]},
                "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        claim.metadata.finalizers.unwrap(),
        ["example.com/keep", "kubernetes.io/pvc-protection"]
    );
    let volumes = Api::<PersistentVolume>::all(server.client.clone());
    let volume = volumes
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "disk"}, "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/tmp/disk"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        volume.metadata.finalizers.unwrap(),
        ["kubernetes.io/pv-protection"]
    );
}

/// DefaultIngressClass (on by default): an Ingress naming no class gets the default
/// IngressClass. DenyServiceExternalIPs (off by default): once turned on, no new
/// external IPs on a Service.
#[tokio::test]
async fn default_ingress_class_and_deny_external_ips() {
    let server = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("DenyServiceExternalIPs", true)
            .expect("a known plugin")
    })
    .await
    .unwrap();
    let client = server.client.clone();
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "POST",
        "/apis/networking.k8s.io/v1/ingressclasses",
        &json!({"metadata": {"name": "nginx", "annotations": {
            "ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "k8s.io/ingress-nginx"}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    // The class reaches the plugin through the watch cache, a moment after it is written.
    let ingress = json!({"metadata": {"name": "web"}, "spec": {"defaultBackend": {
        "service": {"name": "web", "port": {"number": 80}}}}});
    let mut class = Value::Null;
    for _ in 0..100 {
        let (code, _, body) = TestApiServer::send_json(
            &client,
            "POST",
            "/apis/networking.k8s.io/v1/namespaces/default/ingresses?dryRun=All",
            &ingress,
        )
        .await
        .unwrap();
        assert_eq!(code, 201, "{body}");
        class = body["spec"]["ingressClassName"].clone();
        if !class.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(class, "nginx");

    let svc = |ips: Value| json!({"metadata": {"name": "ext"}, "spec": {"ports": [{"port": 80}], "externalIPs": ips}});
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "POST",
        "/api/v1/namespaces/default/services",
        &svc(json!(["192.0.2.10"])),
    )
    .await
    .unwrap();
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "services \"ext\" is forbidden: use of external IPs is denied by admission control"
    );
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "POST",
        "/api/v1/namespaces/default/services",
        &svc(json!([])),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    server.stop().await;
}

/// AlwaysPullImages (off by default): once on, a new pod pulls every image always.
#[tokio::test]
async fn always_pull_images_when_enabled() {
    let server = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("AlwaysPullImages", true)
            .expect("a known plugin")
    })
    .await
    .unwrap();
    let (code, _, body) = TestApiServer::send_json(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/pods",
        &json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "image": "busybox", "imagePullPolicy": "Never"}],
            "containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent"}]}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["spec"]["initContainers"][0]["imagePullPolicy"],
        "Always"
    );
    assert_eq!(body["spec"]["containers"][0]["imagePullPolicy"], "Always");
    server.stop().await;
}
