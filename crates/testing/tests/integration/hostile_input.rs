//! Rule 3 as a property: however a request is malformed, the answer is a `Status` in
//! the 4xx range, never a 5xx. A seeded generator (the same requests on every run)
//! mutates valid objects at random places into values of the wrong type, out-of-range
//! numbers and odd strings, and sends them as creates, dry-run creates, updates and
//! patches of every type; lists and deletes get out-of-range parameters. The bugs it
//! was written after (a list with `limit=9223372036854775807`, a strategic merge
//! patch with an unknown `$patch` directive, a delete with the largest grace period)
//! each answered 500 before.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

/// xorshift64*: reproducible, and enough to pick among a few choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn odd_values() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1e308),
        json!(0.5),
        json!(""),
        json!("x"),
        json!("-1"),
        json!("99999999999999999999"),
        json!("💥"),
        json!("a".repeat(300)),
        json!("10.0.0.0/33"),
        json!("2026-13-45T99:99:99Z"),
        json!([]),
        json!([null]),
        json!({}),
        json!({"": null}),
        json!({"$patch": "bogus"}),
    ]
}

/// Where in `v` a value could go: every member and element, as JSON pointer tokens.
fn places(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                at.push(k.clone());
                out.push(at.clone());
                places(x, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                at.push(i.to_string());
                out.push(at.clone());
                places(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// `seed` with one to three members or elements (never `apiVersion` or `kind`)
/// replaced by odd values or removed.
fn mutate(rng: &mut Rng, seed: &Value) -> Value {
    let odd = odd_values();
    let mut v = seed.clone();
    for _ in 0..=rng.below(3) {
        let mut all = Vec::new();
        places(&v, &mut Vec::new(), &mut all);
        all.retain(|p| p[0] != "apiVersion" && p[0] != "kind");
        if all.is_empty() {
            break;
        }
        let path = rng.pick(&all).clone();
        let pointer: String = path.iter().map(|t| format!("/{t}")).collect();
        if rng.below(4) == 0 {
            let (parent, last) = pointer.rsplit_once('/').unwrap_or_default();
            if let Some(Value::Object(m)) = v.pointer_mut(parent) {
                m.remove(last);
            }
        } else if let Some(slot) = v.pointer_mut(&pointer) {
            *slot = rng.pick(&odd).clone();
        }
    }
    v
}

fn seeds(ns: &str) -> Vec<(String, Value)> {
    let template = json!({"metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "nginx",
            "ports": [{"containerPort": 80}], "env": [{"name": "X", "value": "1"}],
            "resources": {"limits": {"cpu": "1"}}}],
            "tolerations": [{"key": "k", "operator": "Exists"}]}});
    vec![
        (format!("/api/v1/namespaces/{ns}/pods"), {
            // Scheduled, so that a delete is graceful.
            let mut spec = template["spec"].clone();
            spec["nodeName"] = json!("n1");
            json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": spec})
        }),
        (
            format!("/apis/apps/v1/namespaces/{ns}/deployments"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                    "strategy": {"type": "RollingUpdate",
                        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                    "template": template}}),
        ),
        (
            format!("/api/v1/namespaces/{ns}/services"),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                "spec": {"type": "NodePort", "selector": {"a": "b"},
                    "ports": [{"port": 80, "targetPort": "http", "protocol": "TCP"}]}}),
        ),
        (
            format!("/apis/batch/v1/namespaces/{ns}/jobs"),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                "spec": {"completions": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
                    "template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}]}}}}),
        ),
        (
            format!("/api/v1/namespaces/{ns}/resourcequotas"),
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
                "spec": {"hard": {"pods": "100"}}}),
        ),
        (
            format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "np"},
                "spec": {"podSelector": {"matchLabels": {"a": "b"}},
                    "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                        "ports": [{"port": 80, "endPort": 90}]}]}}),
        ),
    ]
}

const PATCH_TYPES: &[&str] = &[
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_never_get_a_5xx() {
    let srv = TestApiServer::start().await.unwrap();
    let client = srv.client_without_retries().await.unwrap();
    let ns = "hostile";
    let (code, _, _) = TestApiServer::send_json(
        &client,
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    let seeds = seeds(ns);
    let mut rng = Rng(0x5eed_f00d_cafe_beef);
    let mut failures = Vec::new();
    let mut answered_ok = 0;
    // What this test made and has not deleted yet.
    let mut created: Vec<String> = Vec::new();
    for i in 0..400 {
        let (collection, seed) = rng.pick(&seeds).clone();
        let name = format!("h{i}");
        let (method, path, content_type, body) = match rng.below(5) {
            // A create (half of them dry-run) of a mutated object.
            0 | 1 => {
                let mut obj = mutate(&mut rng, &seed);
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("name".into(), json!(name));
                }
                let dry = if rng.below(2) == 0 { "?dryRun=All" } else { "" };
                let body = serde_json::to_vec(&obj).unwrap();
                (
                    "POST",
                    format!("{collection}{dry}"),
                    "application/json",
                    body,
                )
            }
            // A patch of every type on a valid object.
            2 | 3 => {
                let mut obj = seed.clone();
                obj["metadata"]["name"] = json!(name);
                let (code, _, _) = TestApiServer::send_json(&client, "POST", &collection, &obj)
                    .await
                    .unwrap();
                assert!(code < 500, "creating the valid {collection} {name}: {code}");
                if code == 201 {
                    created.push(format!("{collection}/{name}"));
                }
                let content_type = *rng.pick(PATCH_TYPES);
                let body = match content_type {
                    "application/json-patch+json" => {
                        let mut all = Vec::new();
                        places(&seed, &mut Vec::new(), &mut all);
                        let pointer: String =
                            rng.pick(&all).iter().map(|t| format!("/{t}")).collect();
                        json!([{"op": rng.pick(&["add", "replace", "remove", "test", "move", "copy"]),
                            "path": format!("{pointer}{}", rng.pick(&["", "/-", "/0", "/~1x"])),
                            "from": "/metadata/labels",
                            "value": rng.pick(&odd_values())}])
                    }
                    "application/apply-patch+yaml" => {
                        let mut obj = mutate(&mut rng, &seed);
                        obj["metadata"] = json!({"name": name});
                        obj
                    }
                    _ if rng.below(3) == 0 => json!({"spec": {
                        "$patch": rng.pick(&["replace", "delete", "merge", "bogus"]),
                        "$setElementOrder/containers": [{"name": "z"}],
                        "$retainKeys": ["x"]}}),
                    _ => {
                        let mut patch = mutate(&mut rng, &seed);
                        if let Some(m) = patch.as_object_mut() {
                            m.remove("metadata");
                        }
                        patch
                    }
                };
                let force = if rng.below(2) == 0 { "&force=true" } else { "" };
                (
                    "PATCH",
                    format!("{collection}/{name}?fieldManager=hostile{force}"),
                    content_type,
                    serde_json::to_vec(&body).unwrap(),
                )
            }
            // A list or delete with parameters out of range.
            _ => {
                let query = rng.pick(&[
                    "limit=9223372036854775807",
                    "limit=-1",
                    "continue=bm90IGEgdG9rZW4",
                    "resourceVersion=abc",
                    "resourceVersion=0&resourceVersionMatch=Bogus",
                    "labelSelector=a%20in%20(",
                    "fieldSelector=bogus.field%3D1",
                    "timeoutSeconds=-5",
                    "gracePeriodSeconds=9223372036854775807",
                    "propagationPolicy=Bogus",
                ]);
                // Deletes only ever name what this test made.
                match created.is_empty() || rng.below(2) == 0 {
                    true => (
                        "GET",
                        format!("{collection}?{query}"),
                        "application/json",
                        vec![],
                    ),
                    false => {
                        let target = created.swap_remove(rng.below(created.len()));
                        let query = if rng.below(2) == 0 {
                            "gracePeriodSeconds=9223372036854775807"
                        } else {
                            query
                        };
                        (
                            "DELETE",
                            format!("{target}?{query}"),
                            "application/json",
                            vec![],
                        )
                    }
                }
            }
        };
        let (code, _, answer) = TestApiServer::raw(
            &client,
            method,
            &path,
            &[
                ("content-type", content_type),
                ("accept", "application/json"),
            ],
            body.clone(),
        )
        .await
        .unwrap();
        if code >= 500 {
            failures.push(format!(
                "{method} {path} ({content_type}) {}: {code} {}",
                String::from_utf8_lossy(&body),
                String::from_utf8_lossy(&answer)
            ));
        } else if code < 300 {
            answered_ok += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "answered 5xx:\n{}",
        failures.join("\n")
    );
    // The generator must still reach the code behind the checks, not only the checks.
    assert!(answered_ok > 40, "only {answered_ok} requests succeeded");
    srv.stop().await;
}

/// Depth a request can build but a JSON parser would not read: a JSON patch whose
/// operations each add a deep value below the last one (the apiserver's stack
/// overflowed on the result, which aborts the process), copies of a document into
/// itself (it doubled with each), and a custom resource just shallow enough to be
/// accepted whose stored form (with `managedFields`) was too deep to read back (every
/// later GET, update and delete of it answered 500).
#[tokio::test]
async fn depth_built_by_a_request_is_refused_not_stored_or_overflowed() {
    let server = TestApiServer::start().await.unwrap();
    let c = server.client.clone();
    let send = |method: &'static str, path: String, content_type: &'static str, body: Value| {
        let c = c.clone();
        async move {
            let (code, _, bytes) = TestApiServer::raw(
                &c,
                method,
                &path,
                &[("content-type", content_type)],
                serde_json::to_vec(&body).unwrap(),
            )
            .await
            .unwrap();
            (code, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let json = "application/json";
    let nested = |levels: usize| (0..levels).fold(json!("x"), |v, _| json!({"a": v}));

    let cm = "/api/v1/namespaces/default/configmaps/deep".to_string();
    let (code, body) = send(
        "POST",
        "/api/v1/namespaces/default/configmaps".into(),
        json,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deep"}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let mut ops = Vec::new();
    let mut path = "/data".to_string();
    for _ in 0..100 {
        ops.push(json!({"op": "add", "path": path.clone(), "value": nested(100)}));
        path.push_str(&"/a".repeat(100));
    }
    let (code, body) = send(
        "PATCH",
        cm.clone(),
        "application/json-patch+json",
        json!(ops),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("nested more than 128 levels deep"), "{body}");
    let copies: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "/metadata", "path": format!("/metadata/annotations/c{i}")}))
        .collect();
    let (code, body) = send(
        "PATCH",
        cm.clone(),
        "application/json-patch+json",
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"pad": "x".repeat(4096)}}])
            .as_array()
            .unwrap()
            .iter()
            .cloned()
            .chain(copies)
            .collect::<Value>(),
    )
    .await;
    // Upstream answers a failed operation with its generic 422 and no details.
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("the server rejected our request"), "{body}");
    let (code, body) = send("GET", cm, json, Value::Null).await;
    assert_eq!(code, 200, "the server still answers: {body}");

    let group = "deep.example.com";
    let (code, body) = send(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into(),
        json,
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("things.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "things", "kind": "Thing"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let things = format!("/apis/{group}/v1/namespaces/default/things");
    let thing = |name: &str, levels: usize| {
        json!({"apiVersion": format!("{group}/v1"), "kind": "Thing",
            "metadata": {"name": name}, "spec": nested(levels)})
    };
    let mut created = 0;
    for _ in 0..100 {
        let (code, body) = send("POST", things.clone(), json, thing("ok", 100)).await;
        if code == 201 {
            created += 1;
            break;
        }
        assert_eq!(code, 404, "only until the definition is served: {body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(created, 1);
    let (code, body) = send("GET", format!("{things}/ok"), json, Value::Null).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = send("POST", things.clone(), json, thing("deep", 124)).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("nested more than 128 levels deep as stored"),
        "{body}"
    );
    let (code, _) = send("GET", format!("{things}/deep"), json, Value::Null).await;
    assert_eq!(code, 404, "nothing was stored");
    // A merge patch deepening a stored object is refused the same way, and the object
    // stays as it was.
    let (code, body) = send(
        "PATCH",
        format!("{things}/ok"),
        "application/merge-patch+json",
        json!({"spec": {"a": {"b": nested(122)}}}),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = send("GET", format!("{things}/ok"), json, Value::Null).await;
    assert_eq!(code, 200, "{body}");
}

/// A watch asked to run longer than a clock can count (`timeoutSeconds` near
/// `i64::MAX`) runs without a deadline; its deadline overflowed the clock, and the
/// request answered 500.
#[tokio::test]
async fn a_watch_timeout_past_the_clocks_range_is_no_deadline() {
    let server = TestApiServer::start().await.unwrap();
    let request = http::Request::builder()
        .method("GET")
        .uri("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=9223372036854775807")
        .body(kube::client::Body::empty())
        .unwrap();
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        server.client.send(request),
    )
    .await
    .expect("the watch answers at once")
    .unwrap();
    assert_eq!(response.status(), 200);
}

/// YAML bodies whose flow collections (`[`, `{`) nest past the 128 levels a YAML
/// document is read to are refused before libyaml reads them: its scanner costs the
/// square of the open collections, and 80,000 `[` took 12 s of a core (release build),
/// so a 2 MiB body kept a core busy for hours. Brackets that open nothing (in a block
/// scalar) are text as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_yaml_is_refused_unread() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client_without_retries().await.unwrap();
    let brackets = "[".repeat(2 << 20);
    let configmap = |name: &str, value: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  x: {value}\n")
    };
    let review = format!(
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {brackets}\n"
    );
    for (method, path, content_type, body, refused) in [
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/yaml",
            configmap("deep", &brackets),
            "error converting YAML to JSON: yaml: recursion limit exceeded at line 6 column 134",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/deep?fieldManager=test",
            "application/apply-patch+yaml",
            configmap("deep", &brackets),
            "error decoding YAML: recursion limit exceeded at line 6 column 134",
        ),
        (
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            "application/yaml",
            review,
            "recursion limit exceeded at line 4 column 138",
        ),
    ] {
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            TestApiServer::raw(
                &client,
                method,
                path,
                &[("content-type", content_type)],
                body.into_bytes(),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("{method} {path} still unanswered after 60 s"));
        let (code, _, bytes) = answer.unwrap();
        let body = String::from_utf8_lossy(&bytes);
        assert_eq!(code, 400, "{method} {path}: {body}");
        assert!(body.contains(refused), "{method} {path}: {body}");
    }
    let text = format!("{}{}", "[".repeat(5000), "{".repeat(5000));
    let (code, _, bytes) = TestApiServer::raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", "application/yaml")],
        configmap("text", &format!("|\n    {text}")).into_bytes(),
    )
    .await
    .unwrap();
    let created: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["data"]["x"], json!(format!("{text}\n")));
}

/// A body with thousands of unknown fields under `fieldValidation=Warn`: upstream's
/// recorder bounds the `Warning` headers (each text cut to 256 characters once they pass
/// 4,096 in all, none added past that), and so does this server. It answered with a
/// header per field, which clients refuse (kube-rs, hyper: more than 100 headers), and
/// collecting them compared each with all before it.
#[tokio::test]
async fn warnings_for_thousands_of_unknown_fields_are_bounded() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client_without_retries().await.unwrap();
    let long = "x".repeat(300);
    let mut configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "unknown-fields"}});
    for i in 0..8000 {
        configmap[format!("u{i}-{long}")] = json!(1);
    }
    let (code, headers, bytes) = TestApiServer::raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldValidation=Warn",
        &[("content-type", "application/json")],
        serde_json::to_vec(&configmap).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&bytes));
    let warnings: Vec<&str> = headers
        .get_all("warning")
        .iter()
        .map(|w| w.to_str().unwrap())
        .collect();
    // Twelve warnings of 321 characters fit in 4,096; the thirteenth starts the cutting,
    // and three more cut ones reach 4,096 again.
    assert_eq!(warnings.len(), 16, "{warnings:?}");
    let first: String = format!("unknown field \"u0-{long}\"")
        .chars()
        .take(256)
        .collect();
    assert_eq!(
        warnings[0],
        format!("299 - \"{}\"", first.replace('"', "\\\""))
    );
}

/// A watch asked for a negative `timeoutSeconds` ends at once, as upstream's timer of a
/// negative duration fires at once; it ran for the default time (30 to 60 minutes).
#[tokio::test]
async fn a_watch_with_a_negative_timeout_ends_at_once() {
    use http_body_util::BodyExt;
    let server = TestApiServer::start().await.unwrap();
    let request = http::Request::builder()
        .method("GET")
        .uri("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=-1")
        .body(kube::client::Body::empty())
        .unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        let response = server.client.send(request).await.unwrap();
        assert_eq!(response.status(), 200);
        response.into_body().collect().await.unwrap().to_bytes()
    })
    .await
    .expect("the watch ends at once");
    assert!(ended.is_empty(), "{ended:?}");
}

/// An expression nesting runs of unary operators (`(!!(!!...`) is refused before the
/// CEL parser reads it: the parser doubles its time for each such level, so a rule of
/// a few hundred characters would hold a core for days. Fewer levels compile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_runs_of_unary_operators_are_refused_unparsed() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client_without_retries().await.unwrap();
    let policy = |name: &str, levels: usize| {
        let expression = format!("{}true{}", "(!!".repeat(levels), ")".repeat(levels));
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "validations": [{"expression": expression}],
            },
        })
    };
    let path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        TestApiServer::raw(
            &client,
            "POST",
            path,
            &[("content-type", "application/json")],
            serde_json::to_vec(&policy("deep", 40)).unwrap(),
        ),
    )
    .await
    .expect("answered before the parser would have finished");
    let (code, _, bytes) = answer.unwrap();
    let body = String::from_utf8_lossy(&bytes);
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("runs of unary operators (such as '--' or '!!') nested in more than 8 levels of brackets"),
        "{body}"
    );
    let (code, _, bytes) = TestApiServer::raw(
        &client,
        "POST",
        path,
        &[("content-type", "application/json")],
        serde_json::to_vec(&policy("shallow", 8)).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&bytes));
}
