//! CustomResourceDefinition validation and defaulting (upstream's rules, paths and
//! messages).

use ferrokube_apiextensions::crd::{
    default_crd, validate_crd, validate_crd_status_update, validate_crd_update,
};
use ferrokube_apimachinery::errors::FieldError;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "required": ["name"], "properties": {
                        "name": {"type": "string"}, "port": {"x-kubernetes-int-or-string": true}
                    }}
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }},
            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
        }
    })
}

fn base() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": schema()},
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                "additionalPrinterColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]
            }]
        }
    })
}

fn crd(v: Value) -> CustomResourceDefinition {
    let mut c: CustomResourceDefinition = serde_json::from_value(v).unwrap();
    default_crd(&mut c);
    c
}

fn patched(f: impl FnOnce(&mut Value)) -> CustomResourceDefinition {
    let mut v = base();
    f(&mut v);
    crd(v)
}

fn msgs(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

/// Asserts `errs` holds an error whose message contains `want`.
#[track_caller]
fn has(errs: &[FieldError], want: &str) {
    let m = msgs(errs);
    assert!(
        m.iter().any(|e| e.contains(want)),
        "want {want:?} in {m:#?}"
    );
}

#[test]
fn defaulting() {
    let c = crd(base());
    assert_eq!(c.spec.names.singular.as_deref(), Some("widget"));
    assert_eq!(c.spec.names.list_kind.as_deref(), Some("WidgetList"));
    assert_eq!(c.spec.conversion.as_ref().unwrap().strategy, "None");
    assert_eq!(
        c.status.as_ref().unwrap().stored_versions.as_deref(),
        Some(&["v1".to_string()][..])
    );
    assert!(c.spec.versions[0].served && c.spec.versions[0].storage);
    // Given values are kept.
    let c = patched(|v| {
        v["spec"]["names"]["singular"] = json!("wid");
        v["spec"]["names"]["listKind"] = json!("Widgets");
        v["status"] = json!({"storedVersions": ["v0", "v1"]});
    });
    assert_eq!(c.spec.names.singular.as_deref(), Some("wid"));
    assert_eq!(c.spec.names.list_kind.as_deref(), Some("Widgets"));
    assert_eq!(c.status.unwrap().stored_versions.unwrap().len(), 2);
}

#[test]
fn valid_crd_passes() {
    assert_eq!(msgs(&validate_crd(&crd(base()))), Vec::<String>::new());
    // Two versions with different schemas, one served only.
    let c = patched(|v| {
        let mut v2 = v["spec"]["versions"][0].clone();
        v2["name"] = json!("v2beta1");
        v2["storage"] = json!(false);
        v2["schema"]["openAPIV3Schema"]["description"] = json!("newer");
        v["spec"]["versions"].as_array_mut().unwrap().push(v2);
    });
    assert_eq!(msgs(&validate_crd(&c)), Vec::<String>::new());
}

#[test]
fn name_and_group() {
    let errs = validate_crd(&patched(|v| {
        v["metadata"]["name"] = json!("gadgets.example.com")
    }));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"metadata.name: Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group"#
        ]
    );
    let errs = validate_crd(&patched(|v| {
        v["metadata"]["name"] = json!("widgets.example");
        v["spec"]["group"] = json!("example");
    }));
    assert_eq!(
        msgs(&errs),
        vec![r#"spec.group: Invalid value: "example": should be a domain with at least one dot"#]
    );
    let errs = validate_crd(&patched(|v| v["spec"]["group"] = json!("")));
    has(&errs, "spec.group: Required value");
    let errs = validate_crd(&patched(|v| v["spec"]["group"] = json!("Example.com")));
    has(
        &errs,
        r#"spec.group: Invalid value: "Example.com": a lowercase RFC 1123 subdomain"#,
    );
}

#[test]
fn names_rules() {
    let errs = validate_crd(&patched(|v| {
        v["spec"]["names"]["plural"] = json!("Widgets");
        v["metadata"]["name"] = json!("Widgets.example.com");
    }));
    has(
        &errs,
        r#"spec.names.plural: Invalid value: "Widgets": a DNS-1035 label must consist of lower case"#,
    );
    let errs = validate_crd(&patched(|v| v["spec"]["names"]["kind"] = json!("Wid_get")));
    has(
        &errs,
        r#"spec.names.kind: Invalid value: "Wid_get": may have mixed case, but should otherwise match: a DNS-1035 label"#,
    );
    let errs = validate_crd(&patched(|v| {
        v["spec"]["names"]["listKind"] = json!("Widget")
    }));
    has(
        &errs,
        r#"spec.names.listKind: Invalid value: "Widget": kind and listKind may not be the same"#,
    );
    let errs = validate_crd(&patched(|v| {
        v["spec"]["names"]["shortNames"] = json!(["ok", "Bad"])
    }));
    has(&errs, r#"spec.names.shortNames[1]: Invalid value: "Bad""#);
    let errs = validate_crd(&patched(|v| {
        v["spec"]["names"]["categories"] = json!(["a.b"])
    }));
    has(&errs, r#"spec.names.categories[0]: Invalid value: "a.b""#);
    let errs = validate_crd(&patched(|v| v["spec"]["names"]["kind"] = json!("")));
    has(&errs, "spec.names.kind: Required value");
    has(&errs, "spec.names.singular: Required value");
    has(&errs, "spec.names.listKind: Required value");
}

#[test]
fn scope_and_versions() {
    let errs = validate_crd(&patched(|v| v["spec"]["scope"] = json!("Global")));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#
        ]
    );
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["storage"] = json!(false)
    }));
    has(&errs, "spec.versions: Invalid value: ");
    has(
        &errs,
        "must have exactly one version marked as storage version",
    );
    let errs = validate_crd(&patched(|v| {
        let dup = v["spec"]["versions"][0].clone();
        v["spec"]["versions"].as_array_mut().unwrap().push(dup);
    }));
    has(&errs, "must contain unique version names");
    has(
        &errs,
        "must have exactly one version marked as storage version",
    );
    let errs = validate_crd(&patched(|v| v["spec"]["versions"][0]["name"] = json!("V1")));
    has(&errs, r#"spec.versions[0].name: Invalid value: "V1""#);
    let errs = validate_crd(&patched(|v| v["spec"]["versions"] = json!([])));
    has(
        &errs,
        "must have exactly one version marked as storage version",
    );
    has(
        &errs,
        "status.storedVersions: Invalid value: []: must have at least one stored version",
    );
}

#[test]
fn schema_required_and_structural() {
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]
            .as_object_mut()
            .unwrap()
            .remove("schema");
    }));
    assert_eq!(
        msgs(&errs),
        vec!["spec.versions[0].schema.openAPIV3Schema: Required value"]
    );
    // A single version's schema is reported at spec.validation, as upstream's
    // internal form moves it there.
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["loose"] = json!({});
    }));
    assert_eq!(
        msgs(&errs),
        vec![
            "spec.validation.openAPIV3Schema.properties[spec].properties[loose].type: Required value: must not be empty for specified object fields"
        ]
    );
    // With differing schemas, per version.
    let errs = validate_crd(&patched(|v| {
        let mut v2 = v["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        v2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["list"] =
            json!({"type": "array"});
        v["spec"]["versions"].as_array_mut().unwrap().push(v2);
    }));
    has(
        &errs,
        "spec.versions[1].schema.openAPIV3Schema.properties[spec].properties[list].items: Required value: must be specified",
    );
    // Root type.
    let errs = validate_crd(&patched(|v| {
        let s = &mut v["spec"]["versions"][0];
        s["schema"]["openAPIV3Schema"] = json!({"type": "string"});
        s.as_object_mut().unwrap().remove("subresources");
    }));
    has(
        &errs,
        r#"spec.validation.openAPIV3Schema.type: Invalid value: "string": must be object at the root"#,
    );
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            .as_object_mut()
            .unwrap()
            .remove("type");
    }));
    has(
        &errs,
        "spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root",
    );
    // int-or-string and preserve-unknown-fields may go without type (in the base).
    // metadata at the root.
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] =
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}});
    }));
    assert_eq!(msgs(&errs), Vec::<String>::new());
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] =
            json!({"type": "object", "properties": {"labels": {"type": "object"}}});
    }));
    has(
        &errs,
        "spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
    );
    // additionalProperties with properties.
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["additionalProperties"] =
            json!({"type": "string"});
    }));
    has(
        &errs,
        "spec.validation.openAPIV3Schema.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
    );
    // Nested value validations.
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["anyOf"] =
            json!([{"type": "object"}]);
    }));
    has(
        &errs,
        "spec.validation.openAPIV3Schema.properties[spec].anyOf[0].type: Forbidden: must be empty to be structural",
    );
    // Invalid type.
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["replicas"]["type"] = json!("int");
    }));
    has(
        &errs,
        r#"properties[replicas].type: Unsupported value: "int": supported values: "array", "boolean", "integer", "number", "object", "string""#,
    );
}

#[test]
fn list_types() {
    let set_list = |f: fn(&mut Value)| {
        patched(|v| {
            f(
                &mut v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                    ["ports"],
            )
        })
    };
    let errs = validate_crd(&set_list(|p| p["x-kubernetes-list-type"] = json!("bag")));
    has(
        &errs,
        r#"properties[ports].x-kubernetes-list-type: Unsupported value: "bag": supported values: "atomic", "set", "map""#,
    );
    let errs = validate_crd(&set_list(|p| p["x-kubernetes-list-map-keys"] = json!([])));
    has(
        &errs,
        "properties[ports].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
    );
    let errs = validate_crd(&set_list(|p| {
        p["x-kubernetes-list-map-keys"] = json!(["nope"])
    }));
    has(&errs, "entries must all be names of item properties");
    let errs = validate_crd(&set_list(|p| p["items"]["required"] = json!([])));
    has(
        &errs,
        "properties[ports].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
    );
    let errs = validate_crd(&set_list(|p| {
        p["x-kubernetes-list-type"] = json!("set");
        p.as_object_mut()
            .unwrap()
            .remove("x-kubernetes-list-map-keys");
    }));
    has(
        &errs,
        "properties[ports].items.x-kubernetes-map-type: Invalid value",
    );
    has(
        &errs,
        "must be atomic as item of a list with x-kubernetes-list-type=set",
    );
}

#[test]
fn subresources_and_columns() {
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] =
            json!(".status.replicas");
        v["spec"]["versions"][0]["subresources"]["scale"]["statusReplicasPath"] =
            json!("status.replicas");
    }));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.subresources.scale.specReplicasPath: Invalid value: ".status.replicas": should be a json path under .spec"#,
            r#"spec.subresources.scale.statusReplicasPath: Invalid value: "status.replicas": must be a simple json path starting with ."#,
        ]
    );
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
            {"name": "", "type": "int", "format": "weird", "jsonPath": "spec.x"},
            {"name": "B", "type": "", "jsonPath": ""}
        ]);
    }));
    assert_eq!(
        msgs(&errs),
        vec![
            "spec.additionalPrinterColumns[0].name: Required value",
            r#"spec.additionalPrinterColumns[0].type: Invalid value: "int": must be one of boolean,date,integer,number,string"#,
            r#"spec.additionalPrinterColumns[0].format: Invalid value: "weird": must be one of byte,date,date-time,double,float,int32,int64,password"#,
            r#"spec.additionalPrinterColumns[0].JSONPath: Invalid value: "spec.x": must be a simple json path starting with ."#,
            "spec.additionalPrinterColumns[1].type: Required value: must be one of boolean,date,integer,number,string",
            "spec.additionalPrinterColumns[1].JSONPath: Required value",
        ]
    );
    // Status subresource: only some root fields.
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"] =
            json!(true);
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["nullable"] = json!(true);
    }));
    has(&errs, "spec.validation.openAPIV3Schema: Invalid value: ");
    has(
        &errs,
        "fields are allowed at the root of the schema if the status subresource is enabled",
    );
    has(
        &errs,
        "spec.validation.openAPIV3Schema.nullable: Forbidden: nullable cannot be true at the root",
    );
}

#[test]
fn conversion() {
    let errs = validate_crd(&patched(|v| {
        v["spec"]["conversion"] = json!({"strategy": "Magic"})
    }));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.conversion.strategy: Unsupported value: "Magic": supported values: "None", "Webhook""#
        ]
    );
    let errs = validate_crd(&patched(|v| {
        v["spec"]["conversion"] = json!({"strategy": "Webhook"})
    }));
    assert_eq!(
        msgs(&errs),
        vec![
            "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
            "spec.conversion.conversionReviewVersions: Required value",
        ]
    );
    let ok = patched(|v| {
        v["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"service": {"name": "conv", "namespace": "default", "path": "/convert"}},
            "conversionReviewVersions": ["v1"]
        }})
    });
    assert_eq!(msgs(&validate_crd(&ok)), Vec::<String>::new());
    let errs = validate_crd(&patched(|v| {
        v["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "http://conv.example.com/x?y=1"},
            "conversionReviewVersions": ["v9"]
        }})
    }));
    has(
        &errs,
        r#"spec.conversion.webhookClientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme"#,
    );
    has(
        &errs,
        r#"spec.conversion.webhookClientConfig.url: Invalid value: "y=1": query parameters are not permitted in the URL"#,
    );
    has(
        &errs,
        "spec.conversion.conversionReviewVersions: Invalid value: ",
    );
    has(&errs, "must include at least one of v1, v1beta1");
    let errs =
        validate_crd(&patched(
            |v| {
                v["spec"]["conversion"] =
                    json!({"strategy": "None", "webhook": {"conversionReviewVersions": ["v1"]}})
            },
        ));
    has(
        &errs,
        "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook",
    );
}

#[test]
fn stored_versions_and_approval() {
    let errs = validate_crd(&patched(|v| {
        v["status"] = json!({"storedVersions": ["v0"]})
    }));
    assert_eq!(
        msgs(&errs),
        vec![
            r#"status.storedVersions: Invalid value: ["v0"]: must have the storage version v1"#,
            r#"status.storedVersions[0]: Invalid value: "v0": missing from spec.versions; v0 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v0 and removes v0 from status.storedVersions"#,
        ]
    );
    let errs = validate_crd(&patched(|v| {
        v["metadata"]["name"] = json!("widgets.apps.k8s.io");
        v["spec"]["group"] = json!("apps.k8s.io");
    }));
    has(
        &errs,
        r#"metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation "api-approved.kubernetes.io""#,
    );
    let errs = validate_crd(&patched(|v| {
        v["metadata"]["name"] = json!("widgets.apps.k8s.io");
        v["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"});
        v["spec"]["group"] = json!("apps.k8s.io");
    }));
    assert_eq!(msgs(&errs), Vec::<String>::new());
    let errs = validate_crd(&patched(|v| {
        v["spec"]["preserveUnknownFields"] = json!(true)
    }));
    has(
        &errs,
        "spec.preserveUnknownFields: Invalid value: true: cannot set to true",
    );
}

fn with_rv(mut c: CustomResourceDefinition) -> CustomResourceDefinition {
    c.metadata.resource_version = Some("1".into());
    c
}

#[test]
fn update_immutability() {
    let old = with_rv(crd(base()));
    assert_eq!(msgs(&validate_crd_update(&old, &old)), Vec::<String>::new());
    // Group and plural are always immutable.
    let new = with_rv(patched(|v| {
        v["spec"]["group"] = json!("other.com");
        v["metadata"]["name"] = json!("widgets.other.com");
    }));
    let errs = validate_crd_update(&new, &old);
    has(
        &errs,
        r#"spec.group: Invalid value: "other.com": field is immutable"#,
    );
    has(
        &errs,
        "metadata.name: Invalid value: \"widgets.other.com\": field is immutable",
    );
    let new = with_rv(patched(|v| {
        v["spec"]["names"]["plural"] = json!("gadgets");
        v["metadata"]["name"] = json!("gadgets.example.com");
    }));
    has(
        &validate_crd_update(&new, &old),
        r#"spec.names.plural: Invalid value: "gadgets": field is immutable"#,
    );
    // Scope and kind only once established.
    let new = with_rv(patched(|v| {
        v["spec"]["scope"] = json!("Cluster");
        v["spec"]["names"]["kind"] = json!("Gadget");
        v["spec"]["names"]["listKind"] = json!("GadgetList");
    }));
    assert_eq!(msgs(&validate_crd_update(&new, &old)), Vec::<String>::new());
    let mut established = old.clone();
    established.status.as_mut().unwrap().conditions = Some(vec![
        serde_json::from_value(json!({"type": "Established", "status": "True"})).unwrap(),
    ]);
    let errs = validate_crd_update(&new, &established);
    assert_eq!(
        msgs(&errs),
        vec![
            r#"spec.scope: Invalid value: "Cluster": field is immutable"#,
            r#"spec.names.kind: Invalid value: "Gadget": field is immutable"#,
        ]
    );
    // Removing a stored version.
    let new = with_rv(patched(|v| {
        v["spec"]["versions"][0]["name"] = json!("v2");
        v["status"] = json!({"storedVersions": ["v1", "v2"]});
    }));
    has(
        &validate_crd_update(&new, &old),
        "status.storedVersions[0]: Invalid value: \"v1\": missing from spec.versions",
    );
}

#[test]
fn update_ratchets_schema_requirement() {
    // An old object without a schema relaxes the rule to served versions (pruning).
    let mut old = with_rv(crd(base()));
    old.spec.versions[0].schema = None;
    let mut new = old.clone();
    new.spec.versions[0].deprecated = Some(true);
    assert_eq!(
        msgs(&validate_crd_update(&new, &old)),
        vec![
            "spec.versions[0].schema.openAPIV3Schema: Required value: because otherwise all fields are pruned"
        ]
    );
    new.spec.versions[0].served = false;
    assert_eq!(msgs(&validate_crd_update(&new, &old)), Vec::<String>::new());
    let fresh = with_rv(crd(base()));
    has(
        &validate_crd_update(&new, &fresh),
        "spec.versions[0].schema.openAPIV3Schema: Required value",
    );
}

#[test]
fn status_update() {
    let old = with_rv(crd(base()));
    let mut new = old.clone();
    new.status.as_mut().unwrap().accepted_names =
        Some(serde_json::from_value(json!({"plural": "Bad!", "kind": "Widget"})).unwrap());
    let errs = validate_crd_status_update(&new, &old);
    has(
        &errs,
        r#"status.acceptedNames.plural: Invalid value: "Bad!""#,
    );
}

#[test]
fn deprecation_warning() {
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["deprecationWarning"] = json!("old")
    }));
    has(
        &errs,
        r#"spec.versions[0].deprecationWarning: Invalid value: "old": can only be set for deprecated versions"#,
    );
    let errs = validate_crd(&patched(|v| {
        v["spec"]["versions"][0]["deprecated"] = json!(true);
        v["spec"]["versions"][0]["deprecationWarning"] = json!("x".repeat(300));
    }));
    has(&errs, "must be <= 256 characters long");
}

/// Sets the rules of `spec` in the base CRD's schema.
fn with_spec_rules(rules: Value) -> CustomResourceDefinition {
    patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
            rules;
    })
}

#[test]
fn rules_are_compiled_against_their_node() {
    let good = with_spec_rules(json!([
        {"rule": "self.replicas <= 10 && self.ports.all(p, p.name != '')"},
        {"rule": "self.replicas >= oldSelf.replicas", "messageExpression": "oldSelf.replicas > 1 ? 'may not shrink' : 'may not shrink to 0'"},
        {"rule": "has(self.extra) || has(self.ports)"},
    ]));
    assert_eq!(msgs(&validate_crd(&good)), Vec::<String>::new());

    // The fields `extra` keeps under x-kubernetes-preserve-unknown-fields are not in
    // its CEL type (the ValidationRule's documentation: "Unknown data preserved in
    // custom resources via x-kubernetes-preserve-unknown-fields is not accessible in
    // CEL expressions").
    let unknown = with_spec_rules(json!([{"rule": "self.extra.anything == 1"}]));
    let errs = msgs(&validate_crd(&unknown));
    assert!(
        errs.len() == 1
            && errs[0].ends_with(
                "compilation failed: ERROR: <input>:1:11: undefined field 'anything'\n \
             | self.extra.anything == 1\n | ..........^"
            ),
        "{errs:#?}"
    );

    let bad = with_spec_rules(json!([
        {"rule": "self.replicsa <= 10"},
        {"rule": "self.replicas <="},
        {"rule": "object.spec.replicas > 1"},
        {"rule": "self.ports.exists(p, p.nmae == 'a')"},
        {"rule": "self.replicas > 1", "messageExpression": "'too few: ' + self.replica"},
    ]));
    let errs = msgs(&validate_crd(&bad));
    let rules = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations";
    assert_eq!(errs.len(), 5, "{errs:#?}");
    assert_eq!(
        errs[0],
        format!(
            "{rules}[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self.replicsa <= 10\", \
             Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), \
             FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: compilation failed: \
             ERROR: <input>:1:5: undefined field 'replicsa'\n | self.replicsa <= 10\n | ....^"
        )
    );
    assert!(
        errs[1].starts_with(&format!(
            "{rules}[1].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self.replicas <=\", \
             Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), \
             FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: compilation failed: \
             ERROR: <input>:1:17: Syntax error: mismatched input '<EOF>' expecting"
        )) && errs[1].ends_with("\n | self.replicas <=\n | ................^"),
        "{errs:#?}"
    );
    assert!(
        errs[2].ends_with("compilation failed: ERROR: <input>:1:1: undeclared reference to 'object' (in container '')\n | object.spec.replicas > 1\n | ^"),
        "{errs:#?}"
    );
    assert!(
        errs[3].contains("[3].rule: Invalid value: ") && errs[3].contains("undefined field 'nmae'"),
        "{errs:#?}"
    );
    assert!(
        errs[4].starts_with(&format!(
            "{rules}[4].messageExpression: Invalid value: apiextensions.ValidationRule{{\
             Rule:\"self.replicas > 1\", Message:\"\", \
             MessageExpression:\"'too few: ' + self.replica\", \
             Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", \
             OptionalOldSelf:(*bool)(nil)}}: messageExpression compilation failed:"
        )) && errs[4].contains(
            ": messageExpression compilation failed: ERROR: <input>:1:19: undefined field 'replica'"
        ),
        "{errs:#?}"
    );

    // Operators on operands of known types, and the rule's and message's own types.
    let typed = with_spec_rules(json!([
        {"rule": "self.replicas + 'x' == 'y'"},
        {"rule": "self.replicas"},
        {"rule": "self.replicas > 1", "messageExpression": "self.replicas"},
        {"rule": "self.ports.all(p, p.port == 80)", "messageExpression": "'bad: ' + self.ports[0].name"},
    ]));
    let errs = msgs(&validate_crd(&typed));
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(
        errs[0].starts_with(&format!("{rules}[0].rule: Invalid value: "))
            && errs[0].contains(
                ": compilation failed: ERROR: <input>:1:15: found no matching overload for '_+_' applied to '(int, string)'"
            ),
        "{errs:#?}"
    );
    assert!(
        errs[1].starts_with(&format!("{rules}[1].rule: Invalid value: "))
            && errs[1].ends_with(": cel expression must evaluate to a bool"),
        "{errs:#?}"
    );
    assert!(
        errs[2].starts_with(&format!("{rules}[2].messageExpression: Invalid value: "))
            && errs[2].ends_with(": messageExpression must evaluate to a string"),
        "{errs:#?}"
    );

    // The root has the object's type and metadata whether the schema lists them or not.
    let root = patched(|v| {
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = json!([{"rule": "self.metadata.name.size() < 20 && self.kind == 'Widget' && has(self.spec)"}]);
    });
    assert_eq!(msgs(&validate_crd(&root)), Vec::<String>::new());
}

#[test]
fn a_stored_rule_that_does_not_compile_keeps_the_crd_updatable() {
    // As a Ferrokube before rules were compiled at write time could store it.
    let old = with_rv(with_spec_rules(json!([{"rule": "self.replicsa <= 10"}])));
    let mut new = old.clone();
    new.spec.versions[0].deprecated = Some(true);
    assert_eq!(msgs(&validate_crd_update(&new, &old)), Vec::<String>::new());
    // From a CRD whose rules compile, a broken one is refused on update too.
    let fine = with_rv(crd(base()));
    has(
        &validate_crd_update(&new, &fine),
        "undefined field 'replicsa'",
    );
}

fn with_root_schema(schema: Value) -> CustomResourceDefinition {
    patched(|v| v["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema)
}

#[test]
fn rules_estimated_to_cost_too_much_are_refused() {
    let root = "spec.validation.openAPIV3Schema";
    let advice = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
    // Upstream's "forbid double-nested rule with no limit set": the rule is too dear
    // on its own and pushes the schema past its total.
    let nested = |max_items: Option<i64>| {
        let mut list = json!({
            "type": "array",
            "items": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["key"], "properties": {"key": {"type": "string"}}
            }},
            "x-kubernetes-validations": [{"rule": "self.all(x, x.all(y, x[y].key == x[y].key))"}],
        });
        if let Some(m) = max_items {
            list["maxItems"] = json!(m);
            list["items"]["maxProperties"] = json!(m);
            list["items"]["additionalProperties"]["properties"]["key"]["maxLength"] = json!(m);
        }
        json!({"type": "object", "properties": {"value": list}})
    };
    let rule = format!("{root}.properties[value].x-kubernetes-validations[0].rule");
    assert_eq!(
        msgs(&validate_crd(&with_root_schema(nested(None)))),
        vec![
            format!(
                "{rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {advice}"
            ),
            format!(
                "{rule}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
            ),
            format!(
                "{root}: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {advice}"
            ),
        ]
    );
    // With every list, map and string bounded, the same rule is cheap.
    assert_eq!(
        msgs(&validate_crd(&with_root_schema(nested(Some(10))))),
        Vec::<String>::new()
    );

    // Upstream's "forbid validation rules where cost total exceeds total limit": each
    // rule alone fits, but not all together; the cheap one is not named.
    let contains = json!([{"rule": "self.contains('keyword')"}]);
    let total = json!({"type": "object", "properties": {
        "list": {"type": "array", "maxItems": 100000,
            "items": {"type": "string", "maxLength": 5000, "x-kubernetes-validations": contains}},
        "map": {"type": "object", "maxProperties": 1000,
            "additionalProperties": {"type": "string", "maxLength": 5000, "x-kubernetes-validations": contains}},
        "field": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 50 && self < 100"}]},
    }});
    let errs = msgs(&validate_crd(&with_root_schema(total)));
    let list_rule = format!("{root}.properties[list].items.x-kubernetes-validations[0].rule");
    let map_rule =
        format!("{root}.properties[map].additionalProperties.x-kubernetes-validations[0].rule");
    assert_eq!(errs.len(), 4, "{errs:#?}");
    assert!(
        errs[0].starts_with(&format!(
            "{list_rule}: Forbidden: estimated rule cost exceeds budget by factor of 20.0x"
        )),
        "{errs:#?}"
    );
    assert_eq!(
        errs[1],
        format!(
            "{list_rule}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
        )
    );
    assert_eq!(
        errs[2],
        format!(
            "{map_rule}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
        )
    );
    assert!(errs[3].starts_with(&format!("{root}: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of 2.0x")), "{errs:#?}");

    // A message expression is estimated on its own (upstream's "forbid
    // messageExpression ..." cases): eight strings of a request's length each.
    let message = json!({"type": "object", "properties": {"f": {
        "type": "array", "items": {"type": "string"},
        "x-kubernetes-validations": [{"rule": "true", "messageExpression": "self[0] + self[1] + self[2] + self[3] + self[4] + self[5] + self[6] + self[7]"}],
    }}});
    let errs = msgs(&validate_crd(&with_root_schema(message)));
    assert!(
        errs.iter().any(|e| e.starts_with(&format!("{root}.properties[f].x-kubernetes-validations[0].messageExpression: Forbidden: estimated messageExpression cost exceeds budget"))),
        "{errs:#?}"
    );
}

#[test]
fn an_unchanged_schema_keeps_its_dear_rules_on_update() {
    // Upstream's ratcheting: a version whose schema the update leaves alone is not
    // refused for one dear rule; nor here for its total, which a schema stored before
    // costs were estimated may pass.
    let dear = json!({"type": "object", "properties": {"s": {
        "type": "string",
        "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$') && self.matches('^[a-z]*$') && self.matches('[a-z]+$') && self.matches('^[a-z]+')"}],
    }}});
    let mut with_list = dear.clone();
    with_list["properties"]["list"] = json!({"type": "array", "items": dear["properties"]["s"]});
    let old = with_rv(with_root_schema(json!({"type": "object"})));
    let new = with_rv(with_root_schema(with_list.clone()));
    has(
        &validate_crd_update(&new, &old),
        "estimated rule cost exceeds budget",
    );
    let mut deprecated = new.clone();
    deprecated.spec.versions[0].deprecated = Some(true);
    assert_eq!(
        msgs(&validate_crd_update(&deprecated, &new)),
        Vec::<String>::new()
    );
    // A string conversion has no known length: upstream refuses to concatenate it
    // (kubernetes/kubernetes#124234).
    let message = with_spec_rules(json!([
        {"rule": "self.replicas >= 0", "messageExpression": "'invalid replicas: ' + string(self.replicas)"},
    ]));
    has(
        &validate_crd(&message),
        "x-kubernetes-validations[0].messageExpression: Forbidden: estimated messageExpression cost exceeds budget by factor of more than 100x",
    );
}
