//! `flowcontrol.apiserver.k8s.io/v1` FlowSchema and PriorityLevelConfiguration as
//! built-in resources through kube-rs: upstream's defaults and validation, the status
//! subresource kept apart from the spec, the Table columns `kubectl get` prints, and
//! discovery.
//!
//! The apiserver creates upstream's bootstrap configuration (`exempt`, `catch-all`,
//! ...) at start, and may write the `Dangling` condition of every FlowSchema: these
//! tests use their own object names and condition types, and count nothing.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const GROUP_PATH: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";

fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn to_json<T: k8s_openapi::serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

/// The code and message of a refused request.
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn get_json(client: &kube::Client, path: &str, accept: Option<&str>) -> Value {
    let mut req = http::Request::get(path);
    if let Some(a) = accept {
        req = req.header("Accept", a);
    }
    let req = req.body(Vec::new()).unwrap();
    serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
}

fn column_names(t: &Value) -> Vec<&str> {
    t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

fn condition_types(status: &Value) -> Vec<&str> {
    status["conditions"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default()
}

fn level(name: &str, limited: Value) -> PriorityLevelConfiguration {
    from(json!({"metadata": {"name": name}, "spec": {"type": "Limited", "limited": limited}}))
}

fn schema(name: &str, spec: Value) -> FlowSchema {
    from(json!({"metadata": {"name": name}, "spec": spec}))
}

fn rules() -> Value {
    json!([{
        "subjects": [{"kind": "Group", "group": {"name": "fk-test-group"}}],
        "resourceRules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"],
            "namespaces": ["*"]}],
    }])
}

#[tokio::test]
async fn priority_levels_are_defaulted_validated_and_printed() {
    let srv = TestApiServer::start().await.unwrap();
    let levels: Api<PriorityLevelConfiguration> = Api::all(srv.client.clone());

    // A status sent on create is dropped: the APF controller alone writes it.
    let mut body = level(
        "fk-test-level",
        json!({"limitResponse": {"type": "Queue", "queuing": {}}}),
    );
    body.status = from(json!({"conditions": [{"type": "FkTestCondition", "status": "True"}]}));
    let created = levels.create(&PostParams::default(), &body).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        condition_types(&to_json(&created.status)).is_empty(),
        "{:?}",
        created.status
    );
    let spec = to_json(&created.spec);
    assert_eq!(
        spec["limited"],
        json!({"nominalConcurrencyShares": 30, "lendablePercent": 0,
            "limitResponse": {"type": "Queue",
                "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}})
    );

    // v1 keeps an explicit zero share (a "jail" level).
    let jail = levels
        .create(
            &PostParams::default(),
            &level(
                "fk-test-jail",
                json!({"nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        to_json(&jail.spec)["limited"]["nominalConcurrencyShares"],
        0
    );

    // Invalid levels, each refused with its field.
    let cases = [
        (
            level(
                "fk-test-hand",
                json!({"limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 5}}}),
            ),
            "spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)",
        ),
        (
            level(
                "fk-test-entropy",
                json!({"limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 9}}}),
            ),
            "spec.limited.limitResponse.queuing.handSize: Invalid value: 9: required entropy bits of deckSize 128 and handSize 9 should not be greater than 60",
        ),
        (
            level(
                "fk-test-lend",
                json!({"lendablePercent": 101, "limitResponse": {"type": "Reject"}}),
            ),
            "spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
        ),
        (
            from(json!({"metadata": {"name": "fk-test-exempt"}, "spec": {"type": "Exempt"}})),
            "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'",
        ),
        (
            from(json!({"metadata": {"name": "fk-test-nolimits"}, "spec": {"type": "Limited"}})),
            "spec.limited: Required value: must not be empty when type is Limited",
        ),
    ];
    for (body, want) in cases {
        let (code, msg) = refusal(levels.create(&PostParams::default(), &body).await);
        assert_eq!(code, 422, "{msg}");
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }

    // Status through the subresource: the spec sent along is ignored.
    let patched = levels
        .patch_status(
            "fk-test-level",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": {"limited": {"nominalConcurrencyShares": 99}},
                "status": {"conditions": [{"type": "FkTestCondition", "status": "True",
                    "reason": "Testing", "lastTransitionTime": "2025-01-01T00:00:00Z"}]},
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        to_json(&patched.spec)["limited"]["nominalConcurrencyShares"],
        30
    );
    assert!(condition_types(&to_json(&patched.status)).contains(&"FkTestCondition"));
    assert_eq!(patched.metadata.generation, Some(1));
    // The main resource: the spec changes (and the generation with it), the status
    // sent along is ignored.
    let updated = levels
        .patch(
            "fk-test-level",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": {"limited": {"nominalConcurrencyShares": 40}},
                "status": {"conditions": [{"type": "FkIgnored", "status": "True"}]},
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        to_json(&updated.spec)["limited"]["nominalConcurrencyShares"],
        40
    );
    assert_eq!(updated.metadata.generation, Some(2));
    let types = to_json(&updated.status);
    assert!(
        condition_types(&types).contains(&"FkTestCondition"),
        "{types}"
    );
    assert!(!condition_types(&types).contains(&"FkIgnored"), "{types}");

    let t = get_json(
        &srv.client,
        &format!("{GROUP_PATH}/prioritylevelconfigurations/fk-test-level"),
        Some(TABLE),
    )
    .await;
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "Type",
            "NominalConcurrencyShares",
            "Queues",
            "HandSize",
            "QueueLengthLimit",
            "Age"
        ]
    );
    assert_eq!(
        t["rows"][0]["cells"].as_array().unwrap()[..6],
        [
            json!("fk-test-level"),
            json!("Limited"),
            json!(40),
            json!(64),
            json!(8),
            json!(50)
        ]
    );
    let t = get_json(
        &srv.client,
        &format!("{GROUP_PATH}/prioritylevelconfigurations/fk-test-jail"),
        Some(TABLE),
    )
    .await;
    assert_eq!(
        t["rows"][0]["cells"].as_array().unwrap()[1..6],
        [
            json!("Limited"),
            json!(0),
            json!("<none>"),
            json!("<none>"),
            json!("<none>")
        ]
    );
}

#[tokio::test]
async fn flow_schemas_are_defaulted_validated_and_printed() {
    let srv = TestApiServer::start().await.unwrap();
    let levels: Api<PriorityLevelConfiguration> = Api::all(srv.client.clone());
    levels
        .create(
            &PostParams::default(),
            &level(
                "fk-test-target",
                json!({"limitResponse": {"type": "Reject"}}),
            ),
        )
        .await
        .unwrap();
    let schemas: Api<FlowSchema> = Api::all(srv.client.clone());

    let created = schemas
        .create(
            &PostParams::default(),
            &schema(
                "fk-test-schema",
                json!({"priorityLevelConfiguration": {"name": "fk-test-target"}, "rules": rules()}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let spec = to_json(&created.spec);
    assert_eq!(spec["matchingPrecedence"], 1000);
    assert!(spec.get("distinguisherMethod").is_none(), "{spec}");

    // Invalid schemas, each refused with its field.
    let cases = [
        (
            schema(
                "fk-test-precedence",
                json!({"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 1}),
            ),
            "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1",
        ),
        (
            schema(
                "fk-test-too-late",
                json!({"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 10001}),
            ),
            "spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000",
        ),
        (
            schema("fk-test-no-level", json!({"rules": rules()})),
            "spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
        ),
        (
            schema(
                "fk-test-user",
                json!({"priorityLevelConfiguration": {"name": "p"}, "rules": [{
                    "subjects": [{"kind": "User"}],
                    "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}]}),
            ),
            "spec.rules[0].subjects[0].user: Required value: user is required when subject kind is 'User'",
        ),
        (
            schema(
                "fk-test-urls",
                json!({"priorityLevelConfiguration": {"name": "p"}, "rules": [{
                    "subjects": [{"kind": "Group", "group": {"name": "g"}}],
                    "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/a*"]}]}]}),
            ),
            "spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: \"/a*\": wildcard can only do suffix matching",
        ),
        (
            schema(
                "fk-test-namespaces",
                json!({"priorityLevelConfiguration": {"name": "p"}, "rules": [{
                    "subjects": [{"kind": "Group", "group": {"name": "g"}}],
                    "resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}]}),
            ),
            "spec.rules[0].resourceRules[0].namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace",
        ),
    ];
    for (body, want) in cases {
        let (code, msg) = refusal(schemas.create(&PostParams::default(), &body).await);
        assert_eq!(code, 422, "{msg}");
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }

    // Status through the subresource: the spec sent along is ignored. The Dangling
    // condition set is the true one (the level exists), whoever writes it last.
    let patched = schemas
        .patch_status(
            "fk-test-schema",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": {"matchingPrecedence": 5},
                "status": {"conditions": [
                    {"type": "FkTestCondition", "status": "True", "reason": "Testing",
                        "lastTransitionTime": "2025-01-01T00:00:00Z"},
                    {"type": "Dangling", "status": "False", "reason": "Found",
                        "lastTransitionTime": "2025-01-01T00:00:00Z"}]},
            })),
        )
        .await
        .unwrap();
    assert_eq!(to_json(&patched.spec)["matchingPrecedence"], 1000);
    assert!(condition_types(&to_json(&patched.status)).contains(&"FkTestCondition"));
    assert_eq!(patched.metadata.generation, Some(1));
    // A status condition without a type is refused there.
    let (code, msg) = refusal(
        schemas
            .patch_status(
                "fk-test-schema",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{"status": "True"}]}})),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(
        msg.contains("status.conditions[0].type: Required value"),
        "{msg}"
    );

    // The main resource: the spec changes, the status sent along is ignored.
    let updated = schemas
        .patch(
            "fk-test-schema",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": {"matchingPrecedence": 2000, "distinguisherMethod": {"type": "ByNamespace"}},
                "status": {"conditions": [{"type": "FkIgnored", "status": "True"}]},
            })),
        )
        .await
        .unwrap();
    assert_eq!(to_json(&updated.spec)["matchingPrecedence"], 2000);
    assert_eq!(updated.metadata.generation, Some(2));
    let status = to_json(&updated.status);
    assert!(
        condition_types(&status).contains(&"FkTestCondition"),
        "{status}"
    );
    assert!(!condition_types(&status).contains(&"FkIgnored"), "{status}");
    let (code, msg) = refusal(
        schemas
            .patch(
                "fk-test-schema",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"distinguisherMethod": {"type": "ByColor"}}})),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("spec.distinguisherMethod.type"), "{msg}");

    // MissingPL prints the Dangling condition's status: False, as set above and as the
    // APF controller (when on) computes it, once it has seen the level.
    let mut t = Value::Null;
    for _ in 0..50 {
        t = get_json(
            &srv.client,
            &format!("{GROUP_PATH}/flowschemas/fk-test-schema"),
            Some(TABLE),
        )
        .await;
        if t["rows"][0]["cells"][5] == "False" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "PriorityLevel",
            "MatchingPrecedence",
            "DistinguisherMethod",
            "Age",
            "MissingPL"
        ]
    );
    let cells = t["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(
        cells[..4],
        [
            json!("fk-test-schema"),
            json!("fk-test-target"),
            json!(2000),
            json!("ByNamespace")
        ]
    );
    assert_eq!(cells[5], "False", "{cells:?}");
}

#[tokio::test]
async fn discovery_lists_both_with_status() {
    let srv = TestApiServer::start().await.unwrap();
    let list = get_json(&srv.client, GROUP_PATH, None).await;
    let resources = list["resources"].as_array().unwrap();
    let find = |name: &str| {
        resources
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {list}"))
    };
    for (name, kind) in [
        ("flowschemas", "FlowSchema"),
        ("flowschemas/status", "FlowSchema"),
        ("prioritylevelconfigurations", "PriorityLevelConfiguration"),
        (
            "prioritylevelconfigurations/status",
            "PriorityLevelConfiguration",
        ),
    ] {
        let r = find(name);
        assert_eq!(r["kind"], kind, "{r}");
        assert_eq!(r["namespaced"], false, "{r}");
    }
    assert_eq!(
        find("flowschemas/status")["verbs"],
        json!(["get", "patch", "update"])
    );
    assert_eq!(find("flowschemas")["singularName"], json!("flowschema"));
    let groups = get_json(&srv.client, "/apis", None).await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "flowcontrol.apiserver.k8s.io"),
        "{groups}"
    );
}

/// The mandatory objects keep upstream's fixed spec (the `exempt` level all but its
/// `spec.exempt`). They are the apiserver's bootstrap objects when it makes them, and
/// created here otherwise.
#[tokio::test]
async fn mandatory_objects_keep_their_spec() {
    let srv = TestApiServer::start().await.unwrap();
    let schemas: Api<FlowSchema> = Api::all(srv.client.clone());
    if schemas.get_opt("catch-all").await.unwrap().is_none() {
        let catch_all = schema(
            "catch-all",
            json!({
                "priorityLevelConfiguration": {"name": "catch-all"},
                "matchingPrecedence": 10000,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": [
                        {"kind": "Group", "group": {"name": "system:unauthenticated"}},
                        {"kind": "Group", "group": {"name": "system:authenticated"}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                        "namespaces": ["*"], "clusterScope": true}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }],
            }),
        );
        schemas
            .create(&PostParams::default(), &catch_all)
            .await
            .unwrap();
    }
    let (code, msg) = refusal(
        schemas
            .patch(
                "catch-all",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"matchingPrecedence": 9999}})),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(
        msg.contains("spec of 'catch-all' must equal the fixed value"),
        "{msg}"
    );

    let levels: Api<PriorityLevelConfiguration> = Api::all(srv.client.clone());
    if levels.get_opt("exempt").await.unwrap().is_none() {
        let exempt = from(json!({"metadata": {"name": "exempt"}, "spec": {"type": "Exempt"}}));
        levels
            .create(&PostParams::default(), &exempt)
            .await
            .unwrap();
    }
    let changed = levels
        .patch(
            "exempt",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"exempt": {"nominalConcurrencyShares": 10}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        to_json(&changed.spec)["exempt"],
        json!({"nominalConcurrencyShares": 10, "lendablePercent": 0})
    );
    let (code, msg) = refusal(
        levels
            .patch(
                "exempt",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"type": "Limited",
                    "limited": {"limitResponse": {"type": "Reject"}}}})),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(
        msg.contains("spec of 'exempt' except the 'spec.exempt' field must equal the fixed value"),
        "{msg}"
    );
}
