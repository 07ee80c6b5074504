use std::collections::BTreeSet;
use std::time::Instant;

use ferrokube_api::resources::{RESOURCES, UNSTORED};
use prost::Message;

use super::*;
use crate::definitions::{V2_REF, refs};

fn def<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["definitions"]
        .get(name)
        .unwrap_or_else(|| panic!("no definition {name}"))
}

#[test]
fn pod_definition_has_gvk_and_patch_metadata() {
    let doc = swagger_v2();
    assert_eq!(doc["swagger"], "2.0");
    let pod = def(&doc, "io.k8s.api.core.v1.Pod");
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(
        pod["properties"]["spec"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.PodSpec"
    );
    let containers = &def(&doc, "io.k8s.api.core.v1.PodSpec")["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    assert_eq!(
        containers["items"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.Container"
    );
    let volumes = &def(&doc, "io.k8s.api.core.v1.PodSpec")["properties"]["volumes"];
    assert_eq!(volumes["x-kubernetes-patch-strategy"], "merge,retainKeys");
    let ports = &def(&doc, "io.k8s.api.core.v1.Container")["properties"]["ports"];
    assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
    assert_eq!(
        ports["x-kubernetes-list-map-keys"],
        json!(["containerPort", "protocol"])
    );
    // `+structType=atomic` types, as upstream's documents mark them.
    for atomic in [
        "io.k8s.api.core.v1.LocalObjectReference",
        "io.k8s.api.core.v1.NodeSelector",
        "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    ] {
        assert_eq!(
            def(&doc, atomic)["x-kubernetes-map-type"],
            "atomic",
            "{atomic}"
        );
    }
    assert_eq!(
        def(&doc, "io.k8s.api.core.v1.PodSpec").get("x-kubernetes-map-type"),
        None
    );
    let finalizers =
        &def(&doc, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")["properties"]["finalizers"];
    assert_eq!(finalizers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(finalizers["x-kubernetes-list-type"], "set");
    assert_eq!(
        pod.get("required"),
        None,
        "metadata is optional, as upstream"
    );
    assert_eq!(
        def(&doc, "io.k8s.api.core.v1.Binding")["required"],
        json!(["target"])
    );
    assert_eq!(
        def(&doc, "io.k8s.api.authorization.v1.SubjectAccessReview")["required"],
        json!(["spec"])
    );
    let ios = def(&doc, "io.k8s.apimachinery.pkg.util.intstr.IntOrString");
    assert_eq!(ios["type"], "string");
    assert_eq!(ios["format"], "int-or-string");
}

/// A resource's collection path as the document names it.
fn collection_path(r: &ferrokube_api::resources::ResourceInfo) -> String {
    let root = format!("/{}", gv_path(r.group, r.version));
    if r.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{root}/{}", r.plural)
    }
}

/// The reviews have a POST and nothing else; CustomResourceDefinitions and
/// ComponentStatuses a GET of the collection and of one, and their List; only
/// CustomResourceDefinitions a watch.
#[test]
fn unstored_resources_have_only_their_verbs_paths() {
    let doc = swagger_v2();
    let paths = doc["paths"].as_object().unwrap();
    for r in UNSTORED {
        let name = paths::definition_of(r.group, r.version, r.kind)
            .unwrap_or_else(|| panic!("{} has no type in kinds.rs", r.kind));
        assert_eq!(
            def(&doc, &name)["x-kubernetes-group-version-kind"],
            json!([{"group": r.group, "kind": r.kind, "version": r.version}]),
            "{name}"
        );
        let base = collection_path(r);
        let collection = paths[&base].as_object().unwrap();
        let one = paths.get(&format!("{base}/{{name}}"));
        if r.supports("list") {
            assert_eq!(collection.keys().collect::<Vec<_>>(), ["get", "parameters"]);
            assert!(one.unwrap().get("get").is_some());
            assert!(one.unwrap().get("patch").is_none());
            def(&doc, &format!("{name}List"));
            let watch = paths
                .get(&base.replace(&format!("/{}", r.plural), &format!("/watch/{}", r.plural)));
            assert_eq!(watch.is_some(), r.supports("watch"), "{base}: watch path");
        } else {
            assert_eq!(
                collection.keys().collect::<Vec<_>>(),
                ["parameters", "post"]
            );
            assert_eq!(collection["post"]["x-kubernetes-action"], "post");
            assert!(one.is_none(), "{base}/{{name}}");
        }
    }
}

#[test]
fn every_resource_kind_has_definitions_and_paths() {
    let doc = swagger_v2();
    let paths = doc["paths"].as_object().unwrap();
    for r in RESOURCES {
        let name = paths::definition_of(r.group, r.version, r.kind)
            .unwrap_or_else(|| panic!("{} has no type in kinds.rs", r.kind));
        let d = def(&doc, &name);
        assert_eq!(
            d["x-kubernetes-group-version-kind"],
            json!([{"group": r.group, "kind": r.kind, "version": r.version}]),
            "{name}"
        );
        let list = def(&doc, &format!("{name}List"));
        assert_eq!(
            list["x-kubernetes-group-version-kind"][0]["kind"],
            format!("{}List", r.kind)
        );
        let base = collection_path(r);
        let one = &paths[&format!("{base}/{{name}}")];
        let gvk = json!({"group": r.group, "kind": r.kind, "version": r.version});
        for (method, action) in [
            ("get", "get"),
            ("put", "put"),
            ("patch", "patch"),
            ("delete", "delete"),
        ] {
            assert_eq!(
                one[method]["x-kubernetes-action"], action,
                "{base} {method}"
            );
            assert_eq!(one[method]["x-kubernetes-group-version-kind"], gvk);
        }
        let collection = &paths[&base];
        assert_eq!(collection["get"]["x-kubernetes-action"], "list");
        assert_eq!(collection["post"]["x-kubernetes-action"], "post");
        assert_eq!(
            collection["delete"]["x-kubernetes-action"]
                .as_str()
                .is_some(),
            r.supports("deletecollection"),
            "{base}"
        );
        let patch_params: Vec<&str> = one["patch"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(patch_params.contains(&"fieldValidation"), "{base}");
        assert!(patch_params.contains(&"dryRun"));
        for sub in r.subresources {
            assert!(
                paths.contains_key(&format!("{base}/{{name}}/{}", sub.name)),
                "{base}/{}",
                sub.name
            );
        }
    }
    for kind in ["Status", "DeleteOptions", "WatchEvent", "Patch"] {
        def(
            &doc,
            &format!("io.k8s.apimachinery.pkg.apis.meta.v1.{kind}"),
        );
    }
    assert!(
        def(&doc, "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions")
            ["x-kubernetes-group-version-kind"]
            .as_array()
            .unwrap()
            .contains(&json!({"group": "apps", "kind": "DeleteOptions", "version": "v1"}))
    );
    for (name, gvk) in [
        (
            "io.k8s.api.autoscaling.v1.Scale",
            json!({"group": "autoscaling", "kind": "Scale", "version": "v1"}),
        ),
        (
            "io.k8s.api.policy.v1.Eviction",
            json!({"group": "policy", "kind": "Eviction", "version": "v1"}),
        ),
        (
            "io.k8s.api.core.v1.Binding",
            json!({"group": "", "kind": "Binding", "version": "v1"}),
        ),
    ] {
        assert_eq!(
            def(&doc, name)["x-kubernetes-group-version-kind"],
            json!([gvk])
        );
    }
}

#[test]
fn gvks_are_unique_across_definitions() {
    let doc = swagger_v2();
    let mut seen = BTreeSet::new();
    for (name, d) in doc["definitions"].as_object().unwrap() {
        for gvk in d["x-kubernetes-group-version-kind"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                seen.insert(gvk.to_string()),
                "{gvk} claimed twice (again by {name})"
            );
        }
    }
}

#[test]
fn v2_refs_resolve() {
    let doc = swagger_v2();
    let defs = doc["definitions"].as_object().unwrap();
    let mut found = Vec::new();
    refs(&doc, V2_REF, &mut found);
    assert!(found.len() > 1000);
    for target in found {
        assert!(defs.contains_key(target), "dangling $ref {target}");
    }
    let mut all = Vec::new();
    all_refs(&doc, &mut all);
    assert!(all.iter().all(|r| r.starts_with(V2_REF)), "non-local refs");
}

fn all_refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                // JSONSchemaProps has a property named `$ref`: an object, not a reference.
                match (k.as_str(), v.as_str()) {
                    ("$ref", Some(target)) => out.push(target),
                    _ => all_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| all_refs(v, out)),
        _ => {}
    }
}

#[test]
fn v3_documents_for_every_group_version() {
    let gvs = v3_group_versions();
    let mut expected: Vec<String> = ferrokube_api::resources::groups()
        .into_iter()
        .map(|(g, v)| gv_path(g, v))
        .collect();
    expected.sort();
    let mut sorted = gvs.clone();
    sorted.sort();
    assert_eq!(sorted, expected);
    assert!(gvs.contains(&"api/v1".to_string()));
    assert!(gvs.contains(&"apis/apps/v1".to_string()));
    assert!(v3_document("apis/nope/v1").is_none());

    for gv in &gvs {
        let doc = v3_document(gv).unwrap();
        assert_eq!(doc["openapi"], "3.0.0");
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut all = Vec::new();
        all_refs(&doc, &mut all);
        for r in all {
            let target = r
                .strip_prefix(v3::V3_REF)
                .unwrap_or_else(|| panic!("{gv}: non-v3 ref {r}"));
            assert!(schemas.contains_key(target), "{gv}: dangling {target}");
        }
        // Each kind of the group-version is there with its gvk, and its PATCH takes
        // fieldValidation (kubectl's server-side validation check).
        for r in RESOURCES
            .iter()
            .filter(|r| gv_path(r.group, r.version) == *gv)
        {
            let name = paths::definition_of(r.group, r.version, r.kind).unwrap();
            assert_eq!(
                schemas[&name]["x-kubernetes-group-version-kind"][0]["kind"],
                r.kind
            );
            let gvk = json!({"group": r.group, "kind": r.kind, "version": r.version});
            let patch = doc["paths"]
                .as_object()
                .unwrap()
                .values()
                .filter_map(|item| item.get("patch"))
                .find(|op| op["x-kubernetes-group-version-kind"] == gvk)
                .unwrap_or_else(|| panic!("{gv}: no PATCH for {}", r.kind));
            assert!(
                patch["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
            );
            assert!(
                patch["requestBody"]["content"]
                    .get("application/strategic-merge-patch+json")
                    .is_some()
            );
        }
    }
    let core = v3_document("api/v1").unwrap();
    let spec = &core["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"];
    assert_eq!(
        spec["properties"]["containers"]["x-kubernetes-patch-merge-key"],
        "name"
    );
    assert_eq!(
        spec["properties"]["containers"]["items"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.Container"
    );
    let list = &core["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    assert_eq!(
        list["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodList"
    );
    assert_eq!(
        core["paths"]["/api/v1/namespaces/{namespace}/pods"]["parameters"][0]["schema"]["type"],
        "string"
    );
    // Other groups' kinds stay out of the core document.
    assert!(
        core["components"]["schemas"]
            .get("io.k8s.api.apps.v1.Deployment")
            .is_none()
    );
}

#[test]
fn documents_are_hashed_and_indexed() {
    let started = Instant::now();
    let docs = Documents::build();
    let v2_json = docs.v2_json.decompressed().unwrap();
    println!(
        "Documents::build: {:?}; v2 JSON {} bytes ({} gzip), protobuf {} bytes ({} gzip), \
         {} v3 documents ({} bytes, {} gzip)",
        started.elapsed(),
        docs.v2_json.len,
        docs.v2_json.gzip.len(),
        docs.v2_protobuf.len,
        docs.v2_protobuf.gzip.len(),
        docs.v3.len(),
        docs.v3.values().map(|d| d.len).sum::<u64>(),
        docs.v3.values().map(|d| d.gzip.len()).sum::<usize>(),
    );
    assert_eq!(docs.v2_json.hash, content_hash(&v2_json));
    assert_eq!(docs.v2_json.hash.len(), 128);
    assert!(
        docs.v2_json
            .hash
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
    );
    let index: Value = serde_json::from_slice(&docs.v3_index.decompressed().unwrap()).unwrap();
    let apps = docs.v3("apis/apps/v1").unwrap();
    assert_eq!(
        index["paths"]["apis/apps/v1"]["serverRelativeURL"],
        format!("/openapi/v3/apis/apps/v1?hash={}", apps.hash)
    );
    assert_eq!(
        index["paths"].as_object().unwrap().len(),
        v3_group_versions().len()
    );
    // Generation is deterministic: the same bytes every time.
    assert_eq!(Documents::build().v2_json, docs.v2_json);
    let served: Value = serde_json::from_slice(&v2_json).unwrap();
    assert_eq!(served, swagger_v2());
}

#[test]
fn apis_turned_off_are_left_out() {
    let docs = Documents::build();
    let off = TurnedOff {
        group_versions: vec!["apis/batch/v1".to_string()],
        resources: vec![
            ("apis/apps/v1".to_string(), "daemonsets".to_string()),
            ("api/v1".to_string(), "namespaces".to_string()),
        ],
        subresources: vec![(
            "api/v1".to_string(),
            "serviceaccounts".to_string(),
            "token".to_string(),
        )],
    };
    let without = docs.without(&off);
    assert!(without.v3("apis/batch/v1").is_none());
    assert_eq!(
        without.v3("apis/rbac.authorization.k8s.io/v1"),
        docs.v3("apis/rbac.authorization.k8s.io/v1")
    );
    let index: Value = without.v3_index.json().unwrap();
    assert!(index["paths"].get("apis/batch/v1").is_none());
    assert!(index["paths"].get("apis/apps/v1").is_some());

    let paths = |doc: &Value| -> Vec<String> {
        doc["paths"].as_object().unwrap().keys().cloned().collect()
    };
    let v2 = without.v2_json.json().unwrap();
    let v2_paths = paths(&v2);
    assert!(
        v2_paths.iter().all(|p| !p.starts_with("/apis/batch/")),
        "{v2_paths:?}"
    );
    assert!(
        v2_paths.iter().all(|p| !p.contains("daemonsets")),
        "{v2_paths:?}"
    );
    assert!(v2_paths.contains(&"/apis/apps/v1/namespaces/{namespace}/deployments".to_string()));
    assert!(v2_paths.contains(&"/apis/apps/v1/watch/statefulsets".to_string()));
    // The core group's namespaces go; what is namespaced under them stays.
    let all_paths = paths(&docs.v2_json.json().unwrap());
    for gone in [
        "/api/v1/namespaces/{name}/finalize",
        "/api/v1/watch/namespaces",
        "/apis/apps/v1/watch/namespaces/{namespace}/daemonsets/{name}",
        "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
    ] {
        assert!(
            all_paths.contains(&gone.to_string()),
            "{gone} is served by default"
        );
        assert!(
            !v2_paths.contains(&gone.to_string()),
            "{gone} is turned off"
        );
    }
    assert!(v2_paths.contains(&"/api/v1/namespaces/{namespace}/pods".to_string()));
    // The resource of a subresource turned off stays.
    assert!(
        v2_paths.contains(&"/api/v1/namespaces/{namespace}/serviceaccounts/{name}".to_string())
    );
    let core = paths(&without.v3("api/v1").unwrap().json().unwrap());
    assert!(core.iter().all(|p| !p.ends_with("/token")), "{core:?}");
    assert!(core.contains(&"/api/v1/namespaces/{namespace}/serviceaccounts".to_string()));
    assert!(v2_paths.contains(&"/api/v1/watch/namespaces/{namespace}/pods/{name}".to_string()));
    // Kinds of other groups may refer to a removed group's definitions.
    assert!(
        v2["definitions"]
            .get("io.k8s.api.batch.v1.JobSpec")
            .is_some()
    );
    let apps = paths(&without.v3("apis/apps/v1").unwrap().json().unwrap());
    assert!(apps.iter().all(|p| !p.contains("daemonsets")), "{apps:?}");
    assert!(apps.contains(&"/apis/apps/v1/deployments".to_string()));
    let protobuf =
        proto::Document::decode(without.v2_protobuf.decompressed().unwrap().as_slice()).unwrap();
    assert!(
        protobuf
            .paths
            .unwrap()
            .path
            .iter()
            .all(|p| !p.name.starts_with("/apis/batch/"))
    );
    assert_eq!(docs.without(&TurnedOff::default()).v2_json, docs.v2_json);
}

#[test]
fn documents_are_held_gzip_compressed() {
    let docs = Documents::build();
    let every = [&docs.v2_json, &docs.v2_protobuf, &docs.v3_index]
        .into_iter()
        .chain(docs.v3.values());
    for doc in every {
        // A gzip stream (magic bytes), decompressing to `len` bytes with the hash.
        assert_eq!(&doc.gzip[..2], &[0x1f, 0x8b]);
        let plain = doc.decompressed().unwrap();
        assert_eq!(plain.len() as u64, doc.len);
        assert_eq!(content_hash(&plain), doc.hash);
    }
    assert_eq!(
        docs.v2_protobuf.decompressed().unwrap(),
        swagger_v2_protobuf()
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&docs.v3("api/v1").unwrap().decompressed().unwrap())
            .unwrap(),
        v3_document("api/v1").unwrap()
    );
    // What is held is a small fraction of the documents.
    let held: usize = docs.v3.values().map(|d| d.gzip.len()).sum::<usize>()
        + docs.v2_json.gzip.len()
        + docs.v2_protobuf.gzip.len();
    let plain: u64 =
        docs.v3.values().map(|d| d.len).sum::<u64>() + docs.v2_json.len + docs.v2_protobuf.len;
    assert!(held as u64 * 5 < plain, "{held} of {plain} bytes held");
}

#[test]
fn protobuf_decodes_to_the_same_document() {
    let doc = swagger_v2();
    let bytes = swagger_v2_protobuf();
    let decoded = proto::Document::decode(bytes.as_slice()).unwrap();
    assert_eq!(decoded.swagger, "2.0");
    let defs = decoded.definitions.unwrap().additional_properties;
    assert_eq!(defs.len(), doc["definitions"].as_object().unwrap().len());
    let paths = decoded.paths.unwrap().path;
    assert_eq!(paths.len(), doc["paths"].as_object().unwrap().len());

    let pod = defs
        .iter()
        .find(|d| d.name == "io.k8s.api.core.v1.Pod")
        .and_then(|d| d.value.as_ref())
        .unwrap();
    let gvk = pod
        .vendor_extension
        .iter()
        .find(|e| e.name == "x-kubernetes-group-version-kind")
        .unwrap();
    let yaml: Value = serde_json::from_str(&gvk.value.as_ref().unwrap().yaml).unwrap();
    assert_eq!(yaml, json!([{"group": "", "kind": "Pod", "version": "v1"}]));
    assert_eq!(pod.r#type.as_ref().unwrap().value, ["object"]);

    let spec = defs
        .iter()
        .find(|d| d.name == "io.k8s.api.core.v1.PodSpec")
        .and_then(|d| d.value.as_ref())
        .unwrap();
    let containers = spec
        .properties
        .as_ref()
        .unwrap()
        .additional_properties
        .iter()
        .find(|p| p.name == "containers")
        .and_then(|p| p.value.as_ref())
        .unwrap();
    assert_eq!(
        containers.items.as_ref().unwrap().schema[0].r#ref,
        "#/definitions/io.k8s.api.core.v1.Container"
    );
    let ext: BTreeMap<&str, &str> = containers
        .vendor_extension
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_ref().unwrap().yaml.as_str()))
        .collect();
    assert_eq!(ext["x-kubernetes-patch-strategy"], "\"merge\"");
    assert_eq!(ext["x-kubernetes-patch-merge-key"], "\"name\"");

    // Maps keep their value schema (labels: additionalProperties string).
    let meta = defs
        .iter()
        .find(|d| d.name == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        .and_then(|d| d.value.as_ref())
        .unwrap();
    let labels = meta
        .properties
        .as_ref()
        .unwrap()
        .additional_properties
        .iter()
        .find(|p| p.name == "labels")
        .and_then(|p| p.value.as_ref())
        .unwrap();
    match labels
        .additional_properties
        .as_deref()
        .and_then(|a| a.oneof.as_ref())
    {
        Some(proto::additional_properties_item::Oneof::Schema(s)) => {
            assert_eq!(s.r#type.as_ref().unwrap().value, ["string"])
        }
        other => panic!("labels additionalProperties: {other:?}"),
    }

    // Operations keep their parameters and extensions.
    let item = paths
        .iter()
        .find(|p| p.name == "/api/v1/namespaces/{namespace}/pods/{name}")
        .and_then(|p| p.value.as_ref())
        .unwrap();
    let patch = item.patch.as_ref().unwrap();
    assert_eq!(patch.operation_id, "patchCoreV1NamespacedPod");
    assert!(
        patch
            .vendor_extension
            .iter()
            .any(|e| e.name == "x-kubernetes-action")
    );
    assert!(patch.parameters.iter().any(|p| matches!(
        p.parameter.as_ref().and_then(|p| p.oneof.as_ref()),
        Some(proto::parameter::Oneof::NonBodyParameter(proto::NonBodyParameter {
            oneof: Some(proto::non_body_parameter::Oneof::QueryParameterSubSchema(q))
        })) if q.name == "fieldValidation"
    )));
}

fn crontab_resource() -> (
    &'static ferrokube_api::resources::ResourceInfo,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    use ferrokube_api::resources::{ALL_VERBS, GET_PATCH_UPDATE, ResourceInfo, SubresourceInfo};
    static SUBRESOURCES: &[SubresourceInfo] = &[
        SubresourceInfo {
            name: "scale",
            kind: "Scale",
            group: Some("autoscaling"),
            version: Some("v1"),
            verbs: GET_PATCH_UPDATE,
        },
        SubresourceInfo {
            name: "status",
            kind: "CronTab",
            group: None,
            version: None,
            verbs: GET_PATCH_UPDATE,
        },
    ];
    static INFO: ResourceInfo = ResourceInfo {
        group: "stable.example.com",
        version: "v1",
        kind: "CronTab",
        plural: "crontabs",
        singular: "crontab",
        short_names: &[],
        categories: &[],
        namespaced: true,
        verbs: ALL_VERBS,
        subresources: SUBRESOURCES,
        storage_prefix: "/registry/stable.example.com/crontabs",
    };
    let crd = serde_json::from_value(json!({
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "kind": "CronTab"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A CronTab.",
                    "properties": {"spec": {"type": "object", "properties": {
                        "cronSpec": {"type": "string", "description": "When."},
                        "note": {"type": "string", "nullable": true},
                    }}},
                }}}],
        },
    }))
    .unwrap();
    (&INFO, crd)
}

#[test]
fn custom_resources_are_added() {
    let (info, crd) = crontab_resource();
    let base = Documents::build();
    let started = Instant::now();
    let docs = base.with_custom(&[CustomResourceVersion {
        info,
        definition: &crd,
    }]);
    println!("Documents::with_custom: {:?}", started.elapsed());
    assert_eq!(base.with_custom(&[]).v2_json, base.v2_json);
    assert_ne!(docs.v2_json.hash, base.v2_json.hash);
    assert_ne!(docs.v3_index.hash, base.v3_index.hash);
    assert_eq!(docs.v3("apis/apps/v1"), base.v3("apis/apps/v1"));

    // v2: definitions and paths, next to the built-in ones.
    let v2: Value = serde_json::from_slice(&docs.v2_json.decompressed().unwrap()).unwrap();
    let kind = def(&v2, "com.example.stable.v1.CronTab");
    assert_eq!(
        kind["x-kubernetes-group-version-kind"],
        json!([{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
    );
    assert_eq!(
        kind["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(kind["properties"]["spec"]["properties"]["note"], json!({}));
    let list = def(&v2, "com.example.stable.v1.CronTabList");
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/definitions/com.example.stable.v1.CronTab"
    );
    assert!(v2["definitions"].get("io.k8s.api.core.v1.Pod").is_some());
    let item = &v2["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"];
    assert_eq!(
        item["patch"]["consumes"],
        json!([
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml"
        ])
    );
    assert_eq!(
        item["patch"]["operationId"],
        "patchStableExampleComV1NamespacedCronTab"
    );
    let scale =
        &v2["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}/scale"];
    assert_eq!(
        scale["get"]["responses"]["200"]["schema"]["$ref"],
        "#/definitions/io.k8s.api.autoscaling.v1.Scale"
    );
    assert!(
        v2["paths"]
            .get("/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}/status")
            .is_some()
    );
    let proto = proto::Document::decode(&docs.v2_protobuf.decompressed().unwrap()[..]).unwrap();
    assert_eq!(proto, proto::document(&v2));

    // v3: listed in the index; the schema as written, and what its paths reach.
    let index: Value = serde_json::from_slice(&docs.v3_index.decompressed().unwrap()).unwrap();
    let gv = docs.v3("apis/stable.example.com/v1").unwrap();
    assert_eq!(
        index["paths"]["apis/stable.example.com/v1"]["serverRelativeURL"],
        format!("/openapi/v3/apis/stable.example.com/v1?hash={}", gv.hash)
    );
    let v3: Value = serde_json::from_slice(&gv.decompressed().unwrap()).unwrap();
    let schemas = &v3["components"]["schemas"];
    let kind = &schemas["com.example.stable.v1.CronTab"];
    assert_eq!(
        kind["properties"]["spec"]["properties"]["note"],
        json!({"type": "string", "nullable": true})
    );
    assert_eq!(
        kind["properties"]["metadata"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    for reached in [
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        "io.k8s.api.autoscaling.v1.Scale",
        "com.example.stable.v1.CronTabList",
    ] {
        assert!(schemas.get(reached).is_some(), "{reached}");
    }
    assert!(schemas.get("io.k8s.api.core.v1.Pod").is_none());
    let mut found = Vec::new();
    refs(&v3, V2_REF, &mut found);
    assert!(found.is_empty(), "v2 references in v3: {found:?}");
    let collection = &v3["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs"];
    let params: Vec<&str> = collection["post"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(params.contains(&"fieldValidation") && params.contains(&"dryRun"));
}

#[test]
fn extension_v3_documents_are_added_to_the_index() {
    let doc = |s: &str| Served::new(s.as_bytes().to_vec());
    let base = Documents {
        v2_json: doc("{}"),
        v2_protobuf: doc(""),
        v3_index: doc("{}"),
        v3: BTreeMap::from([("api/v1".to_string(), doc(r#"{"openapi":"3.0.0"}"#))]),
    };
    let remote = doc(r#"{"openapi":"3.0.0","info":{"title":"metrics"}}"#);
    let extra = BTreeMap::from([("apis/metrics.k8s.io/v1beta1".to_string(), remote.clone())]);
    let docs = base.with_v3_documents(&extra);
    assert_eq!(docs.v3("apis/metrics.k8s.io/v1beta1"), Some(&remote));
    assert_eq!(docs.v3("api/v1"), base.v3("api/v1"));
    assert_eq!(docs.v2_json, base.v2_json);
    let index: Value = serde_json::from_slice(&docs.v3_index.decompressed().unwrap()).unwrap();
    assert_eq!(
        index["paths"]["apis/metrics.k8s.io/v1beta1"]["serverRelativeURL"],
        format!(
            "/openapi/v3/apis/metrics.k8s.io/v1beta1?hash={}",
            remote.hash
        )
    );
    assert!(index["paths"]["api/v1"].is_object());
    // Nothing added: the same documents.
    assert_eq!(
        base.with_v3_documents(&BTreeMap::new()).v3_index,
        base.v3_index
    );
}

#[test]
fn extension_v2_documents_are_merged_into_both_forms() {
    let doc = |v: Value| Served::new(serde_json::to_vec(&v).unwrap());
    let local = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": {"/api/v1/pods": {"get": {"operationId": "listCoreV1PodForAllNamespaces"}}},
        "definitions": {}});
    let base = Documents {
        v2_json: doc(local.clone()),
        v2_protobuf: Served::new(proto::encode(&local)),
        v3_index: doc(json!({"paths": {}})),
        v3: BTreeMap::new(),
    };
    let first = doc(
        json!({"paths": {"/apis/a.io/v1/xs": {"get": {"operationId": "listX",
        "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/io.a.X"}}}}}},
        "definitions": {"io.a.X": {"type": "object", "description": "first"}}}),
    );
    let second = doc(
        json!({"paths": {"/apis/b.io/v1/ys": {"get": {"operationId": "listY",
        "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/io.a.X"}}}}}},
        "definitions": {"io.a.X": {"type": "object", "description": "second"}}}),
    );
    let docs = base.with_v2_documents(&[first, second, doc(json!("not a document"))]);
    let v2: Value = serde_json::from_slice(&docs.v2_json.decompressed().unwrap()).unwrap();
    assert!(v2["paths"]["/api/v1/pods"].is_object());
    assert_eq!(
        v2["paths"]["/apis/a.io/v1/xs"]["get"]["operationId"],
        "listX"
    );
    assert_eq!(
        v2["paths"]["/apis/b.io/v1/ys"]["get"]["operationId"],
        "listY"
    );
    // The earlier document's definition is kept.
    assert_eq!(v2["definitions"]["io.a.X"]["description"], "first");
    assert_eq!(docs.v2_protobuf, Served::new(proto::encode(&v2)));
    assert_eq!(docs.v3_index, base.v3_index);
    assert_eq!(base.with_v2_documents(&[]).v2_json, base.v2_json);
}

/// Upstream's served documents carry the values of `+enum` fields (this text is
/// upstream's, from the 1.28 apiserver's `/openapi/v2`, which the generator's table
/// reproduces for every enum field of that release).
#[test]
fn enum_fields_carry_their_values() {
    let doc = swagger_v2();
    let strategy = &def(&doc, "io.k8s.api.apps.v1.DeploymentStrategy")["properties"]["type"];
    assert_eq!(strategy["enum"], json!(["Recreate", "RollingUpdate"]));
    assert_eq!(
        strategy["description"],
        "Type of deployment. Can be \"Recreate\" or \"RollingUpdate\". Default is RollingUpdate.\n\nPossible enum values:\n - `\"Recreate\"` Kill all existing pods before creating new ones.\n - `\"RollingUpdate\"` Replace the old ReplicaSets by new one using rolling update i.e gradually scale down the old ReplicaSets and scale up the new one."
    );
    // A value without a comment, and a pointer field.
    let operator = &def(&doc, "io.k8s.api.core.v1.Toleration")["properties"]["operator"];
    assert!(
        operator["description"]
            .as_str()
            .unwrap()
            .ends_with("\n\nPossible enum values:\n - `\"Equal\"`\n - `\"Exists\"`"),
        "{operator}"
    );
    let path_type =
        &def(&doc, "io.k8s.api.networking.v1.HTTPIngressPath")["properties"]["pathType"];
    assert_eq!(
        path_type["enum"],
        json!(["Exact", "ImplementationSpecific", "Prefix"])
    );
    // Inline embedded structs' fields, values sorted as quoted strings.
    let scope = &def(
        &doc,
        "io.k8s.api.admissionregistration.v1.RuleWithOperations",
    )["properties"]["scope"];
    assert_eq!(scope["enum"], json!(["*", "Cluster", "Namespaced"]));
    // A list of an enum type: its items.
    let modes =
        &def(&doc, "io.k8s.api.core.v1.PersistentVolumeClaimSpec")["properties"]["accessModes"];
    assert_eq!(
        modes["items"]["enum"],
        json!([
            "ReadOnlyMany",
            "ReadWriteMany",
            "ReadWriteOnce",
            "ReadWriteOncePod"
        ])
    );
    assert!(
        !modes["description"]
            .as_str()
            .unwrap()
            .contains("Possible enum values")
    );
    // The same in the OpenAPI v3 documents kubectl explain reads.
    let apps = v3_document("apis/apps/v1").unwrap();
    assert_eq!(
        apps["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentStrategy"]["properties"]["type"]
            ["enum"],
        json!(["Recreate", "RollingUpdate"])
    );
    // Every field of the table is found in the served definitions that have it.
    let defs = doc["definitions"].as_object().unwrap();
    let mut applied = 0;
    for (definition, field, _, list) in crate::enums::ENUM_FIELDS {
        if let Some(prop) = defs
            .get(*definition)
            .and_then(|d| d["properties"].get(*field))
        {
            let values = if *list {
                &prop["items"]["enum"]
            } else {
                &prop["enum"]
            };
            assert!(values.is_array(), "{definition}.{field}");
            applied += 1;
        }
    }
    assert!(applied > 80, "{applied}");
}

#[test]
fn fields_marked_map_type_carry_it() {
    let doc = swagger_v2();
    let service = &def(&doc, "io.k8s.api.core.v1.ServiceSpec")["properties"]["selector"];
    assert_eq!(service["x-kubernetes-map-type"], "atomic");
    let claim = &def(&doc, "io.k8s.api.core.v1.PersistentVolumeSpec")["properties"]["claimRef"];
    assert_eq!(claim["x-kubernetes-map-type"], "granular");
}

/// What upstream's 1.33 swagger.json says of definitions whose shape schemars gets
/// otherwise: CRD schema values of any JSON have no type, unions are declared, and
/// the apiextensions and apiregistration types carry their list types and merge keys.
#[test]
fn definitions_follow_upstreams_markers() {
    let doc = swagger_v2();
    let apiext = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1";
    assert_eq!(
        def(&doc, &format!("{apiext}.JSON"))
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["description"]
    );
    assert!(
        def(&doc, &format!("{apiext}.JSONSchemaPropsOrArray"))
            .get("oneOf")
            .is_none()
    );
    let rules =
        &def(&doc, &format!("{apiext}.JSONSchemaProps"))["properties"]["x-kubernetes-validations"];
    assert_eq!(rules["x-kubernetes-list-type"], "map");
    assert_eq!(rules["x-kubernetes-list-map-keys"], json!(["rule"]));
    assert_eq!(rules["x-kubernetes-patch-merge-key"], "rule");
    let conditions =
        &def(&doc, &format!("{apiext}.CustomResourceDefinitionStatus"))["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
    assert_eq!(
        def(&doc, "io.k8s.api.flowcontrol.v1.Subject")["x-kubernetes-unions"],
        json!([{"discriminator": "kind", "fields-to-discriminateBy":
            {"group": "Group", "serviceAccount": "ServiceAccount", "user": "User"}}])
    );
}
