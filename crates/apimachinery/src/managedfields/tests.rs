use serde_json::{Value, json};

use super::*;

fn writer<'a>(manager: &'a str, now: &'a str) -> Writer<'a> {
    Writer {
        manager,
        api_version: "apps/v1",
        subresource: "",
        now,
        schema: Schema::for_kind("apps", "v1", "Deployment"),
        scope: Scope::AllButStatus,
    }
}

const RESOURCE: (&str, &str, &str) = ("apps", "deployments", "web");

fn config(replicas: i64, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "c", "image": "nginx"}]}}}
    })
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap().to_string(),
                        e["operation"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn apply_creates_and_records_the_applier() {
    let obj = apply(
        None,
        &config(2, json!({"a": "1"})),
        &writer("kubectl", "t1"),
        false,
        RESOURCE,
    )
    .unwrap();
    assert_eq!(obj["spec"]["replicas"], 2);
    assert_eq!(
        managers(&obj),
        [("kubectl".to_string(), "Apply".to_string())]
    );
    let e = &obj["metadata"]["managedFields"][0];
    assert_eq!(e["apiVersion"], "apps/v1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert_eq!(e["time"], "t1");
    assert_eq!(
        e["fieldsV1"]["f:metadata"],
        json!({"f:labels": {"f:a": {}}})
    );
    assert_eq!(e["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
    assert!(e["fieldsV1"].get("f:apiVersion").is_none());
}

#[test]
fn a_field_no_longer_applied_is_removed() {
    let w = writer("kubectl", "t1");
    let live = apply(
        None,
        &config(2, json!({"a": "1", "b": "2"})),
        &w,
        false,
        RESOURCE,
    )
    .unwrap();
    let obj = apply(
        Some(&live),
        &config(2, json!({"a": "1"})),
        &w,
        false,
        RESOURCE,
    )
    .unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({"a": "1"}));
    // A field set by someone else (not owned by the applier) stays.
    let mut live2 = live.clone();
    live2["spec"]["paused"] = json!(true);
    let obj = apply(
        Some(&live2),
        &config(3, json!({"a": "1", "b": "2"})),
        &w,
        false,
        RESOURCE,
    )
    .unwrap();
    assert_eq!(obj["spec"]["paused"], true);
    assert_eq!(obj["spec"]["replicas"], 3);
}

#[test]
fn another_applier_conflicts_unless_forced() {
    let live = apply(
        None,
        &config(2, json!({})),
        &writer("a", "t1"),
        false,
        RESOURCE,
    )
    .unwrap();
    let err = apply(
        Some(&live),
        &config(5, json!({})),
        &writer("b", "t2"),
        false,
        RESOURCE,
    )
    .unwrap_err();
    assert_eq!(err.code, 409);
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
    );
    let causes = err.details.unwrap().causes.unwrap();
    assert_eq!(causes[0].field.as_deref(), Some(".spec.replicas"));
    assert_eq!(causes[0].reason.as_deref(), Some("FieldManagerConflict"));
    // The same value is shared, not a conflict.
    let shared = apply(
        Some(&live),
        &config(2, json!({})),
        &writer("b", "t2"),
        false,
        RESOURCE,
    )
    .unwrap();
    assert_eq!(managers(&shared).len(), 2);
    // Forced: b takes the field from a.
    let forced = apply(
        Some(&live),
        &config(5, json!({})),
        &writer("b", "t2"),
        true,
        RESOURCE,
    )
    .unwrap();
    assert_eq!(forced["spec"]["replicas"], 5);
    let a = Managed::of(&forced).unwrap();
    let a = a.entries.iter().find(|e| e.manager == "a").unwrap();
    assert!(!a.fields.contains(&["f:spec", "f:replicas"]));
}

#[test]
fn an_update_takes_what_it_changes() {
    let live = apply(
        None,
        &config(2, json!({})),
        &writer("kubectl", "t1"),
        false,
        RESOURCE,
    )
    .unwrap();
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(7);
    let scaled = track_update(&live, scaled, &writer("kubectl-scale", "t2")).unwrap();
    assert_eq!(
        managers(&scaled),
        [
            ("kubectl".to_string(), "Apply".to_string()),
            ("kubectl-scale".to_string(), "Update".to_string())
        ]
    );
    let err = apply(
        Some(&scaled),
        &config(3, json!({})),
        &writer("kubectl", "t3"),
        false,
        RESOURCE,
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
    );
    // An untracked object stays untracked.
    let plain = config(1, json!({}));
    let mut new = plain.clone();
    new["spec"]["replicas"] = json!(2);
    let out = track_update(&plain, new, &writer("x", "t")).unwrap();
    assert!(out["metadata"].get("managedFields").is_none());
    // `[{}]` clears.
    let mut cleared = scaled.clone();
    cleared["metadata"]["managedFields"] = json!([{}]);
    let out = track_update(&scaled, cleared, &writer("x", "t")).unwrap();
    assert!(out["metadata"].get("managedFields").is_none());
}

#[test]
fn a_writer_without_a_name_has_an_entry_without_manager() {
    // A client that sends no User-Agent: upstream's entry leaves `manager` out
    // (omitempty), so its JSON and protobuf forms agree.
    let created = track_create(config(1, json!({})), &writer("", "t1"));
    let entry = &created["metadata"]["managedFields"][0];
    assert_eq!(entry["operation"], "Update");
    assert!(entry.get("manager").is_none(), "{entry}");
    let mut scaled = created.clone();
    scaled["spec"]["replicas"] = json!(2);
    let scaled = track_update(&created, scaled, &writer("", "t2")).unwrap();
    let entries = scaled["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert!(entries[0].get("manager").is_none(), "{entries:?}");
}

#[test]
fn the_first_apply_to_an_untracked_object_meets_before_first_apply() {
    let live = config(1, json!({"a": "1"}));
    let err = apply(
        Some(&live),
        &config(3, json!({"a": "1"})),
        &writer("kubectl", "t"),
        false,
        RESOURCE,
    )
    .unwrap_err();
    assert!(
        err.message
            .contains("conflict with \"before-first-apply\" using apps/v1: .spec.replicas"),
        "{}",
        err.message
    );
    let ok = apply(
        Some(&live),
        &config(1, json!({"a": "1", "b": "2"})),
        &writer("kubectl", "t"),
        false,
        RESOURCE,
    )
    .unwrap();
    assert_eq!(
        managers(&ok),
        [
            ("kubectl".to_string(), "Apply".to_string()),
            ("before-first-apply".to_string(), "Update".to_string())
        ]
    );
}

#[test]
fn status_is_outside_the_main_resource_apply() {
    let mut c = config(1, json!({}));
    c["status"] = json!({"replicas": 9});
    let obj = apply(None, &c, &writer("kubectl", "t"), false, RESOURCE).unwrap();
    assert!(obj.get("status").is_none());
}

#[test]
fn kubectl_takes_over_from_client_side_apply() {
    let mut live = config(1, json!({"a": "1"}));
    let last = config(1, json!({"a": "1"})).to_string();
    live["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": last});
    let next = config(3, json!({"a": "1"}));
    // Another manager still meets before-first-apply.
    assert_eq!(
        apply(Some(&live), &next, &writer("other", "t"), false, RESOURCE)
            .unwrap_err()
            .code,
        409
    );
    // kubectl takes the fields its annotation names, and keeps the annotation in step.
    let out = apply(Some(&live), &next, &writer("kubectl", "t"), false, RESOURCE).unwrap();
    assert_eq!(out["spec"]["replicas"], 3);
    let annotation =
        out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap();
    let annotation: Value = serde_json::from_str(annotation).unwrap();
    assert_eq!(annotation["spec"]["replicas"], 3);
    // Not when the annotation no longer matches the object.
    let mut drifted = live.clone();
    drifted["spec"]["replicas"] = json!(2);
    assert_eq!(
        apply(
            Some(&drifted),
            &next,
            &writer("kubectl", "t"),
            false,
            RESOURCE
        )
        .unwrap_err()
        .code,
        409
    );
}

/// A writer of `group/version` `kind` objects (a kind with a status subresource).
fn kind_writer<'a>(manager: &'a str, group: &str, api_version: &'a str, kind: &str) -> Writer<'a> {
    let version = api_version.rsplit('/').next().unwrap();
    Writer {
        manager,
        api_version,
        subresource: "",
        now: "t",
        schema: Schema::for_kind(group, version, kind),
        scope: Scope::AllButStatus,
    }
}

fn created_fields_v1(obj: Value, who: &Writer<'_>) -> Value {
    let obj = track_create(obj, who);
    let entries = obj["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["manager"], who.manager);
    assert_eq!(entries[0]["operation"], "Update");
    entries[0]["fieldsV1"].clone()
}

/// What upstream stored for `kubectl run nginx --image=nginx` (an etcd dump of v1.2x):
/// fields the zero value of a Pod already has (`spec`, `containers`) are not members,
/// maps and list items the create added are (`"."`), and neither admission's additions
/// nor the object's identity are anyone's.
#[test]
fn a_created_pod_is_owned_as_upstream_records_it() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"run": "nginx"},
                     "creationTimestamp": null},
        "spec": {
            "containers": [{"name": "nginx", "image": "nginx", "imagePullPolicy": "Always",
                "resources": {}, "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File"}],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "restartPolicy": "Always",
            "schedulerName": "default-scheduler", "securityContext": {},
            "terminationGracePeriodSeconds": 30},
        "status": {}
    });
    let want: Value = serde_json::from_str(
        r#"{"f:metadata":{"f:labels":{".":{},"f:run":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}"#,
    )
    .unwrap();
    assert_eq!(
        created_fields_v1(pod, &kind_writer("kubectl-run", "", "v1", "Pod")),
        want
    );
}

/// Upstream's record of a Pod made by `kubectl apply` (client-side): a list inside an
/// added item is added, with its items.
#[test]
fn lists_a_create_adds_are_members() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nginx", "namespace": "default", "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {
            "containers": [{"name": "nginx", "image": "nginx:1.14.2",
                "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {}, "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File"}],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "restartPolicy": "Always",
            "schedulerName": "default-scheduler", "securityContext": {},
            "terminationGracePeriodSeconds": 30}
    });
    let got = created_fields_v1(
        pod,
        &kind_writer("kubectl-client-side-apply", "", "v1", "Pod"),
    );
    assert_eq!(
        got["f:metadata"],
        json!({"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}})
    );
    assert_eq!(
        got["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"]["f:ports"],
        json!({".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}":
            {".": {}, "f:containerPort": {}, "f:protocol": {}}})
    );
}

/// Upstream's record of a Job a generated client created: the pod template is a
/// struct the zero value holds (no `"."`), its empty metadata is nobody's, and
/// `suspend: false` is owned (a pointer, absent from the zero value).
#[test]
fn structs_of_the_zero_value_are_not_members() {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi-933950"},
        "spec": {
            "backoffLimit": 6, "completionMode": "NonIndexed", "completions": 1,
            "parallelism": 1, "suspend": false,
            "template": {"metadata": {"creationTimestamp": null}, "spec": {
                "containers": [{"name": "pi", "image": "perl", "command": ["perl"],
                    "imagePullPolicy": "IfNotPresent", "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"}],
                "dnsPolicy": "ClusterFirst", "restartPolicy": "Never",
                "schedulerName": "default-scheduler", "securityContext": {},
                "terminationGracePeriodSeconds": 30}}}
    });
    let want: Value = serde_json::from_str(
        r#"{"f:spec":{"f:backoffLimit":{},"f:completionMode":{},"f:completions":{},"f:parallelism":{},"f:suspend":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"pi\"}":{".":{},"f:command":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}}"#,
    )
    .unwrap();
    assert_eq!(
        created_fields_v1(
            job,
            &kind_writer("OpenAPI-Generator", "batch", "batch/v1", "Job")
        ),
        want
    );
}

#[test]
fn the_zero_value_table_is_sorted() {
    let rows = super::zero::ZERO_FIELDS;
    assert!(rows.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
}

#[test]
fn a_create_is_tracked_under_its_writer() {
    let mut body = config(2, json!({"a": "1"}));
    body["status"] = json!({"replicas": 9});
    let obj = track_create(body, &writer("kubectl-create", "t1"));
    assert_eq!(
        managers(&obj),
        [("kubectl-create".to_string(), "Update".to_string())]
    );
    let e = &obj["metadata"]["managedFields"][0];
    assert_eq!(e["apiVersion"], "apps/v1");
    assert_eq!(e["time"], "t1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    // What the request set, less the object's identity and the status subresource's part.
    assert_eq!(
        e["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}
        })
    );
    // The created object then meets an apply as its creator's.
    let err = apply(
        Some(&obj),
        &config(3, json!({"a": "1"})),
        &writer("kubectl", "t2"),
        false,
        RESOURCE,
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"kubectl-create\" using apps/v1: .spec.replicas"
    );
}

#[test]
fn a_create_takes_what_it_sets_from_the_managers_the_body_names() {
    let mut body = config(1, json!({}));
    body["metadata"]["managedFields"] = json!([
        {"manager": "other", "operation": "Apply", "apiVersion": "apps/v1",
         "fieldsType": "FieldsV1",
         "fieldsV1": {"f:spec": {"f:replicas": {}, "f:paused": {}}}}]);
    let obj = track_create(body, &writer("ci", "t"));
    let entries = obj["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(
        managers(&obj),
        [
            ("other".to_string(), "Apply".to_string()),
            ("ci".to_string(), "Update".to_string())
        ]
    );
    assert_eq!(entries[0]["fieldsV1"], json!({"f:spec": {"f:paused": {}}}));
    assert!(entries[1]["fieldsV1"]["f:spec"].get("f:replicas").is_some());

    // Entries that do not parse are dropped, as upstream resets them.
    let mut bad = config(1, json!({}));
    bad["metadata"]["managedFields"] =
        json!([{"manager": "m", "operation": "Sideways", "fieldsV1": {}}]);
    let obj = track_create(bad, &writer("ci", "t"));
    assert_eq!(managers(&obj), [("ci".to_string(), "Update".to_string())]);
}

/// A keyed list whose items cannot all be told apart (two containers of one name) is
/// owned whole, as an atomic list; told apart, each item is its own member.
#[test]
fn a_list_with_items_of_one_key_is_owned_whole() {
    let pod = |names: &[&str]| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": names.iter()
                .map(|n| json!({"name": n, "image": "nginx"}))
                .collect::<Vec<_>>()}})
    };
    let who = kind_writer("test", "", "v1", "Pod");
    let many: Vec<String> = (0..3000).map(|i| format!("c{i}")).collect();
    let distinct = created_fields_v1(
        pod(&many.iter().map(String::as_str).collect::<Vec<_>>()),
        &who,
    );
    let items = distinct["f:spec"]["f:containers"].as_object().unwrap();
    assert_eq!(items.len(), 3000);
    assert!(items.contains_key("k:{\"name\":\"c2999\"}"));
    let mut same: Vec<&str> = many.iter().map(String::as_str).collect();
    same.push("c1500");
    let atomic = created_fields_v1(pod(&same), &who);
    assert_eq!(atomic["f:spec"]["f:containers"], json!({}));
    let short = created_fields_v1(pod(&["a", "b", "a"]), &who);
    assert_eq!(short["f:spec"]["f:containers"], json!({}));
    let short = created_fields_v1(pod(&["a", "b"]), &who);
    assert_eq!(
        short["f:spec"]["f:containers"].as_object().unwrap().len(),
        2
    );
}
