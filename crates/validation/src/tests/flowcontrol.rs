//! FlowSchema and PriorityLevelConfiguration: defaults, create and update rules, after
//! upstream's `pkg/apis/flowcontrol/validation` and `v1/defaults` tests.

use k8s_openapi::api::flowcontrol::v1 as flowcontrol;
use serde_json::{Value, json};

use super::{assert_errors, check_create, check_update, object};
use crate::Validate;
use crate::flowcontrol::required_entropy_bits;

/// `base` with `value` at `path`, numeric keys indexing arrays.
fn with(mut base: Value, path: &[&str], value: Value) -> Value {
    let mut cur = &mut base;
    for key in path {
        cur = match key.parse::<usize>() {
            Ok(i) if cur.is_array() => &mut cur[i],
            _ => &mut cur[*key],
        };
    }
    *cur = value;
    base
}

fn fs_spec() -> Value {
    json!({
        "priorityLevelConfiguration": {"name": "system-high"},
        "matchingPrecedence": 50,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{
            "subjects": [
                {"kind": "User", "user": {"name": "alice"}},
                {"kind": "Group", "group": {"name": "system:nodes"}},
                {"kind": "ServiceAccount", "serviceAccount": {"name": "*", "namespace": "kube-system"}},
            ],
            "resourceRules": [{"verbs": ["get", "list"], "apiGroups": [""],
                "resources": ["pods"], "namespaces": ["default"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["/healthz", "/apis/*"]}],
        }],
    })
}

fn fs(spec: Value) -> Value {
    json!({"metadata": {"name": "fk-schema"}, "spec": spec})
}

fn rule0(path: &[&str], value: Value) -> Value {
    let mut full = vec!["rules"];
    full.extend_from_slice(path);
    fs(with(fs_spec(), &full, value))
}

/// The mandatory schemas' fixed specs, as upstream's bootstrap objects are written.
fn mandatory_fs(name: &str) -> Value {
    let (pl, precedence, groups, dm) = match name {
        "exempt" => ("exempt", 1, vec!["system:masters"], Value::Null),
        _ => (
            "catch-all",
            10000,
            vec!["system:unauthenticated", "system:authenticated"],
            json!({"type": "ByUser"}),
        ),
    };
    let subjects: Vec<Value> = groups
        .into_iter()
        .map(|g| json!({"kind": "Group", "group": {"name": g}}))
        .collect();
    json!({
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": pl},
            "matchingPrecedence": precedence,
            "distinguisherMethod": dm,
            "rules": [{
                "subjects": subjects,
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "namespaces": ["*"], "clusterScope": true}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    })
}

#[test]
fn flow_schema_defaults() {
    let defaulted: flowcontrol::FlowSchema = object(
        json!({"metadata": {"name": "a"}, "spec": {"priorityLevelConfiguration": {"name": "p"}}}),
    );
    assert_eq!(defaulted.spec.unwrap().matching_precedence, Some(1000));
    // Zero is Go's unset.
    let zero: flowcontrol::FlowSchema =
        object(fs(with(fs_spec(), &["matchingPrecedence"], json!(0))));
    assert_eq!(zero.spec.unwrap().matching_precedence, Some(1000));
    let kept: flowcontrol::FlowSchema = object(fs(fs_spec()));
    assert_eq!(kept.spec.unwrap().matching_precedence, Some(50));
    // Upstream's spec is a struct: one is made for the default.
    let bare: flowcontrol::FlowSchema = object(json!({"metadata": {"name": "a"}}));
    assert_eq!(bare.spec.unwrap().matching_precedence, Some(1000));
}

#[test]
fn flow_schema_create() {
    let sa = |member: Value| {
        rule0(
            &["0"],
            json!({"subjects": [{"kind": "ServiceAccount", "serviceAccount": member}],
        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/"]}]}),
        )
    };
    check_create::<flowcontrol::FlowSchema>(vec![
        ("valid", fs(fs_spec()), vec![]),
        (
            "precedence too low",
            fs(with(fs_spec(), &["matchingPrecedence"], json!(-1))),
            vec!["spec.matchingPrecedence: Invalid value: -1: must be a positive value"],
        ),
        (
            "precedence too high",
            fs(with(fs_spec(), &["matchingPrecedence"], json!(10001))),
            vec!["spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000"],
        ),
        (
            "precedence 1 is exempt's",
            fs(with(fs_spec(), &["matchingPrecedence"], json!(1))),
            vec![
                "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1",
            ],
        ),
        (
            "distinguisher",
            fs(with(
                fs_spec(),
                &["distinguisherMethod"],
                json!({"type": "ByColor"}),
            )),
            vec!["spec.distinguisherMethod.type: Unsupported value"],
        ),
        (
            "no priority level",
            fs(with(
                fs_spec(),
                &["priorityLevelConfiguration"],
                json!({"name": ""}),
            )),
            vec![
                "spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
            ],
        ),
        (
            "bad priority level name",
            fs(with(
                fs_spec(),
                &["priorityLevelConfiguration"],
                json!({"name": "Not_A_Name"}),
            )),
            vec!["spec.priorityLevelConfiguration.name: Invalid value"],
        ),
        (
            "no rules at all",
            fs(with(fs_spec(), &["rules"], json!([]))),
            vec![],
        ),
        (
            "a rule without subjects nor rules",
            rule0(&["0"], json!({"subjects": []})),
            vec![
                "spec.rules[0].subjects: Required value: subjects must contain at least one value",
                "spec.rules[0]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty",
            ],
        ),
        (
            "subject members",
            rule0(
                &["0", "subjects"],
                json!([
                    {"kind": "User"},
                    {"kind": "User", "user": {"name": ""}, "group": {"name": "g"}},
                    {"kind": "Group", "group": {"name": "g"}, "user": {"name": "u"},
                        "serviceAccount": {"name": "s", "namespace": "n"}},
                    {"kind": "ServiceAccount", "serviceAccount": {"name": "s", "namespace": "n"},
                        "user": {"name": "u"}, "group": {"name": "g"}},
                    {"kind": "Robot"},
                ]),
            ),
            vec![
                "spec.rules[0].subjects[0].user: Required value: user is required when subject kind is 'User'",
                "spec.rules[0].subjects[1].user.name: Required value",
                "spec.rules[0].subjects[1].group: Forbidden: group is forbidden when subject kind is not 'Group'",
                "spec.rules[0].subjects[2].serviceAccount: Forbidden: serviceAccount is forbidden when subject kind is not 'ServiceAccount'",
                "spec.rules[0].subjects[2].user: Forbidden: user is forbidden when subject kind is not 'User'",
                "spec.rules[0].subjects[3].user: Forbidden: user is forbidden when subject kind is not 'User'",
                "spec.rules[0].subjects[3].group: Forbidden: group is forbidden when subject kind is not 'Group'",
                "spec.rules[0].subjects[4].kind: Unsupported value: \"Robot\": supported values: \"Group\", \"ServiceAccount\", \"User\"",
            ],
        ),
        (
            "service account missing",
            rule0(
                &["0"],
                json!({"subjects": [{"kind": "ServiceAccount"}],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/"]}]}),
            ),
            vec![
                "spec.rules[0].subjects[0].serviceAccount: Required value: serviceAccount is required when subject kind is 'ServiceAccount'",
            ],
        ),
        (
            "service account fields",
            sa(json!({"name": "", "namespace": ""})),
            vec![
                "spec.rules[0].subjects[0].serviceAccount.name: Required value",
                "spec.rules[0].subjects[0].serviceAccount.namespace: Required value: must specify namespace for service account",
            ],
        ),
        (
            "service account names",
            sa(json!({"name": "Bad_Name", "namespace": "Bad.NS"})),
            vec![
                "spec.rules[0].subjects[0].serviceAccount.name: Invalid value",
                "spec.rules[0].subjects[0].serviceAccount.namespace: Invalid value",
            ],
        ),
        (
            "every service account",
            sa(json!({"name": "*", "namespace": "ns"})),
            vec![],
        ),
        (
            "resource rule lists",
            rule0(
                &["0", "resourceRules"],
                json!([
                    {"verbs": [], "apiGroups": [], "resources": [], "namespaces": []},
                    {"verbs": ["*", "get"], "apiGroups": ["*", "apps"], "resources": ["*", "pods"],
                        "namespaces": ["*", "default"]},
                    {"verbs": ["get", "fly"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true},
                    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["Bad_NS", "ok"]},
                ]),
            ),
            vec![
                "spec.rules[0].resourceRules[0].verbs: Required value: verbs must contain at least one value",
                "spec.rules[0].resourceRules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "spec.rules[0].resourceRules[0].resources: Required value: resource rules must supply at least one resource",
                "spec.rules[0].resourceRules[0].namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace",
                "spec.rules[0].resourceRules[1].verbs: Invalid value: [\"*\",\"get\"]: if '*' is present, must not specify other verbs",
                "spec.rules[0].resourceRules[1].apiGroups: Invalid value: [\"*\",\"apps\"]: if '*' is present, must not specify other api groups",
                "spec.rules[0].resourceRules[1].resources: Invalid value: [\"*\",\"pods\"]: if '*' is present, must not specify other resources",
                "spec.rules[0].resourceRules[1].namespaces: Invalid value: [\"*\",\"default\"]: if '*' is present, must not specify other namespaces",
                "spec.rules[0].resourceRules[2].verbs: Unsupported value",
                "spec.rules[0].resourceRules[3].namespaces[0]: Invalid value",
            ],
        ),
        (
            "non-resource rules",
            rule0(
                &["0", "nonResourceRules"],
                json!([
                    {"verbs": [], "nonResourceURLs": []},
                    {"verbs": ["get"], "nonResourceURLs": ["*", "/x"]},
                    {"verbs": ["get"], "nonResourceURLs": ["", "/", "healthz", "/a b", "//a", "/a*", "/a/*/b/*", "/a/*"]},
                ]),
            ),
            vec![
                "spec.rules[0].nonResourceRules[0].verbs: Required value: verbs must contain at least one value",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs: Required value: nonResourceURLs must contain at least one value",
                "spec.rules[0].nonResourceRules[1].nonResourceURLs: Invalid value: [\"*\",\"/x\"]: if '*' is present, must not specify other non-resource URLs",
                "spec.rules[0].nonResourceRules[2].nonResourceURLs[0]: Invalid value: \"\": must not be empty",
                "spec.rules[0].nonResourceRules[2].nonResourceURLs[2]: Invalid value: \"healthz\": must start with slash",
                "spec.rules[0].nonResourceRules[2].nonResourceURLs[3]: Invalid value: \"/a b\": must not contain white-space",
                "spec.rules[0].nonResourceRules[2].nonResourceURLs[4]: Invalid value: \"//a\": must not contain double slash",
                "spec.rules[0].nonResourceRules[2].nonResourceURLs[5]: Invalid value: \"/a*\": wildcard can only do suffix matching",
                "spec.rules[0].nonResourceRules[2].nonResourceURLs[6]: Invalid value: \"/a/*/b/*\": wildcard can only do suffix matching",
            ],
        ),
        (
            "status conditions",
            json!({"metadata": {"name": "fk-schema"}, "spec": fs_spec(),
                "status": {"conditions": [{"type": "Dangling", "status": "False"},
                    {"type": "Dangling", "status": "True"}, {"status": "True"}]}}),
            vec![
                "status.conditions[1].type: Duplicate value: \"Dangling\"",
                "status.conditions[2].type: Required value: must not be empty",
            ],
        ),
    ]);
}

#[test]
fn mandatory_flow_schemas_are_fixed() {
    check_create::<flowcontrol::FlowSchema>(vec![
        ("exempt as upstream", mandatory_fs("exempt"), vec![]),
        ("catch-all as upstream", mandatory_fs("catch-all"), vec![]),
        (
            "exempt changed",
            with(
                mandatory_fs("exempt"),
                &["spec", "priorityLevelConfiguration", "name"],
                json!("other"),
            ),
            vec!["spec: Invalid value"],
        ),
        (
            "catch-all changed",
            with(
                mandatory_fs("catch-all"),
                &["spec", "distinguisherMethod"],
                Value::Null,
            ),
            vec!["spec: Invalid value"],
        ),
        (
            "catch-all made narrower",
            with(
                mandatory_fs("catch-all"),
                &["spec", "rules", "0", "resourceRules", "0", "clusterScope"],
                json!(false),
            ),
            vec!["spec: Invalid value"],
        ),
        (
            "another schema may copy them",
            with(
                mandatory_fs("catch-all"),
                &["metadata", "name"],
                json!("fk-copy"),
            ),
            vec![],
        ),
    ]);
    // The message names the schema.
    let changed: flowcontrol::FlowSchema = object(with(
        mandatory_fs("exempt"),
        &["spec", "matchingPrecedence"],
        json!(2),
    ));
    let errs = changed.validate_create();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0]
            .to_string()
            .ends_with("spec of 'exempt' must equal the fixed value"),
        "{}",
        errs[0]
    );
}

#[test]
fn flow_schema_update_revalidates() {
    check_update::<flowcontrol::FlowSchema>(vec![
        ("unchanged", fs(fs_spec()), fs(fs_spec()), vec![]),
        (
            "spec changes are free, the rules still hold",
            fs(with(
                fs_spec(),
                &["priorityLevelConfiguration"],
                json!({"name": ""}),
            )),
            fs(fs_spec()),
            vec!["spec.priorityLevelConfiguration.name: Required value"],
        ),
    ]);
}

fn plc(name: &str, spec: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": spec})
}

fn limited(l: Value) -> Value {
    plc("fk-level", json!({"type": "Limited", "limited": l}))
}

fn queuing(q: Value) -> Value {
    limited(json!({"limitResponse": {"type": "Queue", "queuing": q}}))
}

#[test]
fn priority_level_defaults() {
    let spec = |v: Value| {
        let pl: flowcontrol::PriorityLevelConfiguration = object(v);
        serde_json::to_value(pl.spec.unwrap()).unwrap()
    };
    assert_eq!(
        spec(queuing(json!({}))),
        json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 0,
            "limitResponse": {"type": "Queue",
                "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}}),
    );
    // v1's shares are a pointer: an explicit 0 stays.
    assert_eq!(
        spec(limited(
            json!({"nominalConcurrencyShares": 0, "lendablePercent": 10, "limitResponse": {"type": "Reject"}})
        )),
        json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 10,
            "limitResponse": {"type": "Reject"}}}),
    );
    // Zero queuing fields are Go's unset; an absent queuing stays absent.
    assert_eq!(
        spec(queuing(
            json!({"queues": 0, "handSize": 2, "queueLengthLimit": 0})
        ))["limited"]["limitResponse"]["queuing"],
        json!({"queues": 64, "handSize": 2, "queueLengthLimit": 50}),
    );
    assert_eq!(
        spec(limited(json!({"limitResponse": {"type": "Queue"}})))["limited"]["limitResponse"],
        json!({"type": "Queue"}),
    );
    assert_eq!(
        spec(plc("exempt", json!({"type": "Exempt", "exempt": {}}))),
        json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}),
    );
    assert_eq!(
        spec(plc("exempt", json!({"type": "Exempt"}))),
        json!({"type": "Exempt"}),
    );
}

#[test]
fn priority_level_create() {
    check_create::<flowcontrol::PriorityLevelConfiguration>(vec![
        ("queuing", queuing(json!({})), vec![]),
        (
            "rejecting, zero shares",
            limited(
                json!({"nominalConcurrencyShares": 0, "borrowingLimitPercent": 300,
                "limitResponse": {"type": "Reject"}}),
            ),
            vec![],
        ),
        (
            "unknown type",
            plc("fk-level", json!({"type": "Sometimes"})),
            vec![
                "spec.type: Unsupported value: \"Sometimes\": supported values: \"Exempt\", \"Limited\"",
            ],
        ),
        (
            "no type",
            json!({"metadata": {"name": "fk-level"}}),
            vec!["spec.type: Unsupported value: \"\": supported values: \"Exempt\", \"Limited\""],
        ),
        (
            "only exempt is Exempt",
            plc("fk-level", json!({"type": "Exempt"})),
            vec![
                "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'",
            ],
        ),
        (
            "exempt with limits",
            plc(
                "exempt",
                json!({"type": "Exempt", "limited": {"limitResponse": {"type": "Reject"}},
                "exempt": {"nominalConcurrencyShares": -1, "lendablePercent": 101}}),
            ),
            vec![
                "spec.limited: Forbidden: must be nil if the type is not Limited",
                "spec.exempt.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
                "spec.exempt.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
                "spec: Invalid value",
            ],
        ),
        (
            "limited without limits",
            plc("fk-level", json!({"type": "Limited", "exempt": {}})),
            vec![
                "spec.exempt: Forbidden: must be nil if the type is Limited",
                "spec.limited: Required value: must not be empty when type is Limited",
            ],
        ),
        (
            "limited numbers",
            limited(
                json!({"nominalConcurrencyShares": -1, "lendablePercent": -1,
                "borrowingLimitPercent": -1, "limitResponse": {"type": "Reject"}}),
            ),
            vec![
                "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
                "spec.limited.lendablePercent: Invalid value: -1: must be between 0 and 100, inclusive",
                "spec.limited.borrowingLimitPercent: Invalid value: -1: if specified, must be a non-negative integer",
            ],
        ),
        (
            "no limit response",
            limited(json!({})),
            vec![
                "spec.limited.limitResponse.type: Unsupported value: \"\": supported values: \"Queue\", \"Reject\"",
            ],
        ),
        (
            "rejecting with queues",
            limited(json!({"limitResponse": {"type": "Reject", "queuing": {}}})),
            vec![
                "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited",
            ],
        ),
        (
            "queuing without queues",
            limited(json!({"limitResponse": {"type": "Queue"}})),
            vec![
                "spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is Limited",
            ],
        ),
        (
            "negative queuing",
            queuing(json!({"queues": -1, "handSize": -1, "queueLengthLimit": -1})),
            vec![
                "spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value: -1: must be positive",
                "spec.limited.limitResponse.queuing.queues: Invalid value: -1: must be positive",
                "spec.limited.limitResponse.queuing.handSize: Invalid value: -1: must be positive",
            ],
        ),
        (
            "hand larger than deck",
            queuing(json!({"queues": 4, "handSize": 5})),
            vec![
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)",
            ],
        ),
        (
            "too many queues",
            queuing(json!({"queues": 10_000_001, "handSize": 1})),
            vec![
                "spec.limited.limitResponse.queuing.queues: Invalid value: 10000001: must not be greater than 10000000",
            ],
        ),
        (
            "too much entropy",
            queuing(json!({"queues": 128, "handSize": 9})),
            vec![
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 9: required entropy bits of deckSize 128 and handSize 9 should not be greater than 60",
            ],
        ),
        (
            "just enough entropy",
            queuing(json!({"queues": 1024, "handSize": 6})),
            vec![],
        ),
        (
            "status conditions",
            json!({"metadata": {"name": "fk-level"}, "spec": {"type": "Limited",
                "limited": {"limitResponse": {"type": "Reject"}}},
                "status": {"conditions": [{"type": "A"}, {"type": "A"}, {"type": ""}]}}),
            vec![
                "status.conditions[1].type: Duplicate value: \"A\"",
                "status.conditions[2].type: Required value: must not be empty",
            ],
        ),
    ]);
}

#[test]
fn mandatory_priority_levels_are_fixed() {
    let catch_all = |l: Value| plc("catch-all", json!({"type": "Limited", "limited": l}));
    check_create::<flowcontrol::PriorityLevelConfiguration>(vec![
        (
            "exempt as upstream",
            plc("exempt", json!({"type": "Exempt", "exempt": {}})),
            vec![],
        ),
        (
            "exempt's exempt member is free",
            plc(
                "exempt",
                json!({"type": "Exempt",
                "exempt": {"nominalConcurrencyShares": 10, "lendablePercent": 50}}),
            ),
            vec![],
        ),
        (
            "exempt must be Exempt",
            plc(
                "exempt",
                json!({"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}}),
            ),
            vec![
                "spec.type: Invalid value: \"Limited\": type must be 'Exempt' if and only if name is 'exempt'",
                "spec: Invalid value",
            ],
        ),
        (
            "catch-all as upstream",
            catch_all(json!({"nominalConcurrencyShares": 5, "limitResponse": {"type": "Reject"}})),
            vec![],
        ),
        (
            "catch-all with more shares",
            catch_all(json!({"nominalConcurrencyShares": 6, "limitResponse": {"type": "Reject"}})),
            vec!["spec: Invalid value"],
        ),
        (
            "catch-all that queues",
            catch_all(json!({"nominalConcurrencyShares": 5,
                "limitResponse": {"type": "Queue", "queuing": {}}})),
            vec!["spec: Invalid value"],
        ),
        (
            "catch-all must be Limited",
            plc("catch-all", json!({"type": "Exempt"})),
            vec![
                "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'",
                "spec: Invalid value",
            ],
        ),
    ]);
    let changed: flowcontrol::PriorityLevelConfiguration =
        object(plc("exempt", json!({"type": "Exempt", "limited": {}})));
    assert!(
        changed
            .validate_create()
            .iter()
            .any(|e| e.to_string().ends_with(
                "spec of 'exempt' except the 'spec.exempt' field must equal the fixed value"
            ))
    );
}

#[test]
fn priority_level_update_revalidates() {
    check_update::<flowcontrol::PriorityLevelConfiguration>(vec![
        ("unchanged", queuing(json!({})), queuing(json!({})), vec![]),
        (
            "to a bad hand",
            queuing(json!({"queues": 2, "handSize": 3})),
            queuing(json!({})),
            vec![
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 3: should not be greater than queues (2)",
            ],
        ),
    ]);
}

#[test]
fn shuffle_sharding_entropy() {
    assert_eq!(required_entropy_bits(64, 8), 48);
    assert_eq!(required_entropy_bits(128, 6), 42);
    assert_eq!(required_entropy_bits(1, 1), 0);
    // log2(10) * 3 = 9.97 rounds up.
    assert_eq!(required_entropy_bits(10, 3), 10);
    assert_eq!(required_entropy_bits(1 << 20, 3), 60);
    assert_eq!(required_entropy_bits(1 << 20, 4), 80);
}

#[test]
fn odd_input_does_not_panic() {
    let errs = object::<flowcontrol::FlowSchema>(json!({"metadata": {}, "spec": {
        "priorityLevelConfiguration": {"name": ""},
        "rules": [{"subjects": [{"kind": ""}], "resourceRules": [{"verbs": [""], "apiGroups": [""],
            "resources": [""]}], "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*x*"]}]}]}}))
    .validate_create();
    assert!(!errs.is_empty());
    let errs = object::<flowcontrol::PriorityLevelConfiguration>(
        json!({"metadata": {}, "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue",
            "queuing": {"queues": i32::MAX, "handSize": i32::MAX, "queueLengthLimit": i32::MIN}}}}}),
    )
    .validate_create();
    assert_errors(
        "extremes",
        &errs,
        &[
            "spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value",
            "spec.limited.limitResponse.queuing.queues: Invalid value",
            "spec.limited.limitResponse.queuing.handSize: Invalid value",
        ],
    );
}
