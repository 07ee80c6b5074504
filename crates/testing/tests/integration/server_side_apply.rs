//! Server-side apply through kube-rs (`Patch::Apply`), over real HTTPS on the embedded
//! store: creation, field ownership in `managedFields`, removal of fields no longer
//! applied, conflicts and force, updates taking ownership, the status subresource,
//! dry run, and the errors of bad apply requests.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn deployment(replicas: i32, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}
            }
        }
    })
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

/// (manager, operation, subresource) of each managedFields entry.
fn managers(d: &Deployment) -> Vec<(String, String, String)> {
    d.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
                e.subresource.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn entry(m: &str, op: &str, sub: &str) -> (String, String, String) {
    (m.into(), op.into(), sub.into())
}

#[tokio::test]
async fn apply_owns_fields_and_conflicts() {
    let srv = TestApiServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    let as_ = |m: &str| PatchParams::apply(m);

    // An apply creates, and the applier owns what it set.
    let d = deps
        .patch(
            "web",
            &as_("ci"),
            &Patch::Apply(deployment(2, json!({"app": "web", "tier": "a"}))),
        )
        .await
        .unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(managers(&d), [entry("ci", "Apply", "")]);
    let fields = &d.metadata.managed_fields.as_ref().unwrap()[0];
    assert_eq!(fields.fields_type.as_deref(), Some("FieldsV1"));
    let v1 = &fields.fields_v1.as_ref().unwrap().0;
    assert_eq!(
        v1["f:metadata"]["f:labels"],
        json!({"f:app": {}, "f:tier": {}})
    );
    assert_eq!(
        v1["f:spec"]["f:template"]["f:spec"]["f:containers"][r#"k:{"name":"c"}"#],
        json!({".": {}, "f:image": {}, "f:name": {}})
    );
    // Defaults are nobody's.
    assert!(v1["f:spec"].get("f:strategy").is_none());

    // A label no longer applied is removed; the same apply twice changes nothing.
    let d = deps
        .patch(
            "web",
            &as_("ci"),
            &Patch::Apply(deployment(2, json!({"app": "web"}))),
        )
        .await
        .unwrap();
    let labels = d.metadata.labels.clone().unwrap();
    assert_eq!(labels.len(), 1, "{labels:?}");
    let rv = d.metadata.resource_version.clone();
    let again = deps
        .patch(
            "web",
            &as_("ci"),
            &Patch::Apply(deployment(2, json!({"app": "web"}))),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, rv);

    // Another applier changing an owned field conflicts; the same value is shared.
    let e = api_error(
        deps.patch(
            "web",
            &as_("other"),
            &Patch::Apply(deployment(5, json!({}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert_eq!(e.reason, "Conflict");
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "ci": .spec.replicas"#
    );
    let cause = &e.details.unwrap().causes[0];
    assert_eq!(cause.reason, "FieldManagerConflict");
    assert_eq!(cause.field, ".spec.replicas");
    let d = deps
        .patch(
            "web",
            &as_("other"),
            &Patch::Apply(deployment(2, json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(managers(&d).len(), 2);

    // Forced, the field changes hands.
    let d = deps
        .patch(
            "web",
            &as_("other").force(),
            &Patch::Apply(deployment(6, json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(6));
    let ci = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|e| e.manager.as_deref() == Some("ci"))
        .unwrap();
    assert!(
        ci.fields_v1.as_ref().unwrap().0["f:spec"]
            .get("f:replicas")
            .is_none()
    );

    // An update by another manager takes what it changes; the applier then conflicts
    // with it, named with its apiVersion.
    let pp = PatchParams {
        field_manager: Some("scaler".into()),
        ..Default::default()
    };
    let d = deps
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 9}})))
        .await
        .unwrap();
    assert!(managers(&d).contains(&entry("scaler", "Update", "")));
    let e = api_error(
        deps.patch(
            "web",
            &as_("other"),
            &Patch::Apply(deployment(6, json!({}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "scaler" using apps/v1: .spec.replicas"#
    );

    // The scale subresource is named in its entry.
    deps.patch_scale("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    let d = deps.get("web").await.unwrap();
    assert!(
        managers(&d).contains(&entry("scaler", "Update", "scale")),
        "{:?}",
        managers(&d)
    );

    // A server-side dry run changes nothing.
    let dry = PatchParams {
        dry_run: true,
        ..as_("other").force()
    };
    let out = deps
        .patch("web", &dry, &Patch::Apply(deployment(7, json!({}))))
        .await
        .unwrap();
    assert_eq!(out.spec.unwrap().replicas, Some(7));
    assert_eq!(
        deps.get("web").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );
    srv.stop().await;
}

/// The replicas field in one manager's entry of `d`, if it owns it there.
fn owns_replicas(d: &Deployment, manager: &str, operation: &str, sub: &str) -> bool {
    d.metadata.managed_fields.iter().flatten().any(|e| {
        (
            e.manager.as_deref(),
            e.operation.as_deref(),
            e.subresource.as_deref().unwrap_or(""),
        ) == (Some(manager), Some(operation), sub)
            && e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0["f:spec"].get("f:replicas").is_some())
    })
}

#[tokio::test]
async fn apply_through_scale() {
    let srv = TestApiServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    deps.patch(
        "web",
        &PatchParams::apply("ci"),
        &Patch::Apply(deployment(2, json!({}))),
    )
    .await
    .unwrap();
    let scale = |replicas: i32| {
        Patch::Apply(json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web"}, "spec": {"replicas": replicas},
        }))
    };

    // The Scale's replicas belong to whoever owns the Deployment's.
    let e = api_error(
        deps.patch_scale("web", &PatchParams::apply("hpa"), &scale(4))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "ci": .spec.replicas"#
    );

    // Forced, the applier takes them from the Deployment's owner, as an Apply entry
    // naming the subresource, under the Deployment's apiVersion.
    let s = deps
        .patch_scale("web", &PatchParams::apply("hpa").force(), &scale(4))
        .await
        .unwrap();
    assert_eq!(s.spec.unwrap().replicas, Some(4));
    let d = deps.get("web").await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(4));
    assert!(
        owns_replicas(&d, "hpa", "Apply", "scale"),
        "{:?}",
        managers(&d)
    );
    assert!(!owns_replicas(&d, "ci", "Apply", ""), "{:?}", managers(&d));
    let hpa = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|e| e.manager.as_deref() == Some("hpa"))
        .unwrap();
    assert_eq!(hpa.api_version.as_deref(), Some("apps/v1"));

    // Its next apply stays an apply; another applier now conflicts with it.
    deps.patch_scale("web", &PatchParams::apply("hpa"), &scale(5))
        .await
        .unwrap();
    let d = deps.get("web").await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(5));
    assert!(
        owns_replicas(&d, "hpa", "Apply", "scale"),
        "{:?}",
        managers(&d)
    );
    assert!(!managers(&d).contains(&entry("hpa", "Update", "scale")));
    let e = api_error(
        deps.patch(
            "web",
            &PatchParams::apply("ci"),
            &Patch::Apply(deployment(2, json!({}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "hpa" with subresource "scale": .spec.replicas"#
    );

    // Only a Scale may be applied there.
    let e = api_error(
        deps.patch_scale(
            "web",
            &PatchParams::apply("hpa"),
            &Patch::Apply(deployment(1, json!({}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert!(
        e.message.contains("expected API version (autoscaling/v1)"),
        "{}",
        e.message
    );
    // A replica count that is no number, or another object's name, is refused, not
    // read as 0.
    for bad in [
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web"},
            "spec": {"replicas": "x"}}),
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "other"},
            "spec": {"replicas": 1}}),
    ] {
        let e = api_error(
            deps.patch_scale("web", &PatchParams::apply("hpa"), &Patch::Apply(bad))
                .await
                .unwrap_err(),
        );
        assert_eq!(e.code, 400, "{}", e.message);
    }
    // Under fieldValidation=Strict, a field the Scale does not have is refused.
    let unknown = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web"}, "spec": {"replicas": 1, "bogus": true}});
    let e = api_error(
        deps.patch_scale(
            "web",
            &PatchParams::apply("hpa").validation_strict(),
            &Patch::Apply(unknown),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        r#"strict decoding error: unknown field "spec.bogus""#
    );
    // A resourceVersion in the Scale is a precondition: a stale one is a 409.
    let rv = deps
        .get("web")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    let stale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "resourceVersion": rv}, "spec": {"replicas": 1}});
    let e = api_error(
        deps.patch_scale("web", &PatchParams::apply("hpa"), &Patch::Apply(stale))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409, "{}", e.message);
    assert_eq!(
        deps.get("web").await.unwrap().spec.unwrap().replicas,
        Some(5)
    );
    srv.stop().await;
}

#[tokio::test]
async fn status_apply_and_tracked_creates() {
    let srv = TestApiServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(srv.client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), "default");

    // A status in a main-resource apply is ignored; the status subresource applies it.
    let mut with_status = deployment(1, json!({}));
    with_status["status"] = json!({"observedGeneration": 9});
    let d = deps
        .patch("web", &PatchParams::apply("ci"), &Patch::Apply(with_status))
        .await
        .unwrap();
    assert_ne!(d.status.and_then(|s| s.observed_generation), Some(9));
    let d = deps
        .patch_status(
            "web",
            &PatchParams::apply("ctl"),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"}, "status": {"observedGeneration": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(d.status.as_ref().unwrap().observed_generation, Some(1));
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(1));
    assert!(managers(&d).contains(&entry("ctl", "Apply", "status")));

    // A create is tracked, as upstream's: its writer owns what it set, with operation
    // Update, and an apply changing one of those fields meets it.
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "plain"}, "data": {"a": "1"}})).unwrap();
    let created = cms
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..PostParams::default()
            },
            &cm,
        )
        .await
        .unwrap();
    let fields = &created.metadata.managed_fields.as_ref().unwrap()[..];
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].manager.as_deref(), Some("creator"));
    assert_eq!(fields[0].operation.as_deref(), Some("Update"));
    assert_eq!(
        fields[0].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {".": {}, "f:a": {}}})
    );
    let config = |v: &str| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "plain"}, "data": {"a": v}}))
    };
    let conflict = |e| api_error(e).message;
    assert_eq!(
        conflict(
            cms.patch("plain", &PatchParams::apply("ci"), &config("2"))
                .await
                .unwrap_err()
        ),
        r#"Apply failed with 1 conflict: conflict with "creator" using v1: .data.a"#
    );

    // Once its managed fields are cleared, an object is untracked; its fields meet the
    // next apply as before-first-apply's.
    cms.patch(
        "plain",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"managedFields": [{}]}})),
    )
    .await
    .unwrap();
    assert_eq!(
        conflict(
            cms.patch("plain", &PatchParams::apply("ci"), &config("2"))
                .await
                .unwrap_err()
        ),
        r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.a"#
    );
    let cm = cms
        .patch("plain", &PatchParams::apply("ci"), &config("1"))
        .await
        .unwrap();
    let names: Vec<String> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| e.manager.clone())
        .collect();
    assert_eq!(names, ["ci", "before-first-apply"]);
    srv.stop().await;
}

#[tokio::test]
async fn bad_apply_requests() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let patch = |query: &str, ct: &str, body: &str| {
        http::Request::builder()
            .method("PATCH")
            .uri(format!("/api/v1/namespaces/default/configmaps/x{query}"))
            .header("Content-Type", ct)
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n";
    const APPLY: &str = "application/apply-patch+yaml";
    let managed =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  managedFields: [{manager: m}]\n";
    // (query, content type, body, code, part of the message)
    let cases = [
        (
            "",
            APPLY,
            yaml,
            422,
            "fieldManager: Required value: is required for apply patch",
        ),
        (
            "?force=true",
            "application/merge-patch+json",
            "{}",
            422,
            "force: Forbidden: may not be specified for non-apply patch",
        ),
        ("?fieldManager=m", APPLY, "data: [\n", 400, ""),
        (
            "?fieldManager=m",
            APPLY,
            "data: {a: b}\n",
            400,
            "apiVersion must be set",
        ),
        (
            "?fieldManager=m",
            APPLY,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\n",
            400,
            "does not match the name on the URL",
        ),
        (
            "?fieldManager=m",
            APPLY,
            managed,
            400,
            "managedFields must be nil",
        ),
    ];
    for (query, ct, body, code, message) in cases {
        let e = api_error(
            c.request::<ConfigMap>(patch(query, ct, body))
                .await
                .unwrap_err(),
        );
        assert_eq!(e.code, code, "{query} {body}: {}", e.message);
        assert!(e.message.contains(message), "{}", e.message);
    }

    // A YAML apply creates with 201.
    let created = c
        .request::<ConfigMap>(patch("?fieldManager=m", APPLY, yaml))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["a"], "b");
    srv.stop().await;
}
