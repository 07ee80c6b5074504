//! node.k8s.io/v1 RuntimeClass on the test apiserver: the resource (create, get, list,
//! table, 422s with upstream's field paths, handler immutability) and the RuntimeClass
//! admission plugin (unknown class 403, overhead set and checked, node selector merged
//! or refused on conflict, tolerations appended), with upstream's messages.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

const CLASSES: &str = "/apis/node.k8s.io/v1/runtimeclasses";

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

fn pod_with(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    typed(json!({"metadata": {"name": name}, "spec": spec}))
}

/// The causes of a 422 Status as `field: message` lines.
fn causes(body: &Value) -> Vec<String> {
    body["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn runtime_classes_are_served_validated_and_printed() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let classes = Api::<RuntimeClass>::all(client.clone());
    let created = classes
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "kata"}, "handler": "kata",
                "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
                "scheduling": {"nodeSelector": {"runtime": "kata"}}})),
        )
        .await
        .unwrap();
    assert_eq!(created.handler, "kata");
    let got = classes.get("kata").await.unwrap();
    assert_eq!(
        got.overhead.as_ref().unwrap().pod_fixed.as_ref().unwrap()["memory"].0,
        "120Mi"
    );
    let listed = classes.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .map(|c| c.metadata.name.as_deref().unwrap_or(""))
            .collect::<Vec<_>>(),
        vec!["kata"]
    );

    // Discovery lists the resource, cluster-scoped, with every verb.
    let (code, _, discovery) =
        TestApiServer::send_json(&client, "GET", "/apis/node.k8s.io/v1", &Value::Null)
            .await
            .unwrap();
    assert_eq!(code, 200, "{discovery}");
    let resource = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "runtimeclasses")
        .expect("runtimeclasses in discovery")
        .clone();
    assert_eq!(resource["kind"], "RuntimeClass");
    assert_eq!(resource["namespaced"], false);
    assert_eq!(resource["verbs"].as_array().unwrap().len(), 8);

    // The table kubectl get prints: NAME, HANDLER, AGE.
    let (code, _, body) = TestApiServer::raw(
        &client,
        "GET",
        CLASSES,
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    let table: Value = serde_json::from_slice(&body).unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Name", "Handler", "Age"]);
    assert_eq!(table["rows"][0]["cells"][0], "kata");
    assert_eq!(table["rows"][0]["cells"][1], "kata");

    // Validation: 422 with every cause and upstream's field paths.
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "POST",
        CLASSES,
        &json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": "bad"}, "handler": "Not_A_Label",
            "overhead": {"podFixed": {"cpu": "-1"}},
            "scheduling": {"nodeSelector": {"bad key!": "v"},
                "tolerations": [{"key": "k", "operator": "Near"}]}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    let invalid = causes(&body);
    let fields: Vec<&str> = invalid
        .iter()
        .map(|c| c.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "handler",
            "overhead.limits[cpu]",
            "scheduling.nodeSelector",
            "scheduling.tolerations[0].operator"
        ],
        "{invalid:#?}"
    );
    assert!(
        invalid[1].ends_with("must be greater than or equal to 0"),
        "{invalid:#?}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("RuntimeClass.node.k8s.io \"bad\" is invalid: "),
        "{body}"
    );

    // The handler is immutable; the overhead may change.
    let mut changed = got.clone();
    changed.handler = "runc".into();
    let (code, _, body) = TestApiServer::send_json(
        &client,
        "PUT",
        &format!("{CLASSES}/kata"),
        &serde_json::to_value(&changed).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        ["handler: Invalid value: \"runc\": field is immutable"],
        "{body}"
    );
    let mut more = got;
    more.overhead = Some(typed(json!({"podFixed": {"cpu": "500m"}})));
    let replaced = classes
        .replace("kata", &PostParams::default(), &more)
        .await
        .unwrap();
    assert_eq!(
        replaced.overhead.unwrap().pod_fixed.unwrap()["cpu"].0,
        "500m"
    );
}

#[tokio::test]
async fn runtime_class_admission_sets_overhead_and_scheduling() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let classes = Api::<RuntimeClass>::all(client.clone());
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    classes
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "kata"}, "handler": "kata",
                "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
                "scheduling": {"nodeSelector": {"runtime": "kata"},
                    "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}]}})),
        )
        .await
        .unwrap();
    classes
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "plain"}, "handler": "runc"})),
        )
        .await
        .unwrap();

    // 1. An unknown class is refused, as upstream words it.
    assert_eq!(
        forbidden(
            pods.create(
                &PostParams::default(),
                &pod_with("lost", json!({"runtimeClassName": "missing"}))
            )
            .await
        ),
        "pods \"lost\" is forbidden: pod rejected: RuntimeClass \"missing\" not found"
    );

    // 2-4. Overhead set, node selector merged, tolerations appended after the pod's.
    let admitted = pods
        .create(
            &PostParams::default(),
            &pod_with(
                "sandboxed",
                json!({"runtimeClassName": "kata", "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "gpu", "operator": "Exists"}]}),
            ),
        )
        .await
        .unwrap();
    let spec = admitted.spec.unwrap();
    let overhead = spec.overhead.unwrap();
    assert_eq!(
        (overhead["cpu"].0.as_str(), overhead["memory"].0.as_str()),
        ("250m", "120Mi")
    );
    let selector = spec.node_selector.unwrap();
    assert_eq!(
        selector.into_iter().collect::<Vec<_>>(),
        [
            ("disk".to_string(), "ssd".to_string()),
            ("runtime".to_string(), "kata".to_string())
        ]
    );
    let keys: Vec<Option<String>> = spec
        .tolerations
        .unwrap()
        .into_iter()
        .map(|t| t.key)
        .collect();
    // The pod's own, DefaultTolerationSeconds' two (that plugin runs first, as
    // upstream orders them), then the class's.
    assert_eq!(
        keys,
        [
            Some("gpu".to_string()),
            Some("node.kubernetes.io/not-ready".to_string()),
            Some("node.kubernetes.io/unreachable".to_string()),
            Some("kata".to_string())
        ]
    );

    // A conflicting node selector is refused.
    assert_eq!(
        forbidden(
            pods.create(
                &PostParams::default(),
                &pod_with(
                    "elsewhere",
                    json!({"runtimeClassName": "kata", "nodeSelector": {"runtime": "runc"}})
                )
            )
            .await
        ),
        "pods \"elsewhere\" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; pod.spec.nodeSelector[runtime] = runc"
    );

    // An overhead the pod brings must be the class's; without a class overhead none
    // is allowed.
    assert_eq!(
        forbidden(
            pods.create(
                &PostParams::default(),
                &pod_with(
                    "greedy",
                    json!({"runtimeClassName": "kata", "overhead": {"cpu": "1"}})
                )
            )
            .await
        ),
        "pods \"greedy\" is forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
    );
    pods.create(
        &PostParams::default(),
        &pod_with(
            "exact",
            json!({"runtimeClassName": "kata", "overhead": {"cpu": "0.25", "memory": "120Mi"}}),
        ),
    )
    .await
    .unwrap();
    for (name, spec) in [
        ("classless", json!({"overhead": {"cpu": "1"}})),
        (
            "plain-overhead",
            json!({"runtimeClassName": "plain", "overhead": {"cpu": "1"}}),
        ),
    ] {
        assert_eq!(
            forbidden(
                pods.create(&PostParams::default(), &pod_with(name, spec))
                    .await
            ),
            format!(
                "pods \"{name}\" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
            )
        );
    }
    // A class without overhead or scheduling leaves the pod as it is.
    let plain = pods
        .create(
            &PostParams::default(),
            &pod_with("plain", json!({"runtimeClassName": "plain"})),
        )
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(plain.runtime_class_name.as_deref(), Some("plain"));
    assert!(plain.overhead.is_none() && plain.node_selector.is_none());
}
