//! admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and its Binding
//! (upstream `pkg/apis/admissionregistration/validation`), and the CEL `matchConditions`
//! the webhook configurations share: every CEL expression is compiled, and one that does
//! not compile is an `Invalid value` with the compiler's message, as upstream.

use std::collections::BTreeSet;

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_cel::environments::{Compiler, Options, Returns};
use ferrokube_cel::{CompileError, Program};
use k8s_openapi::api::admissionregistration::v1 as ar;

use crate::Validate;
use crate::util::*;

/// Upstream's limit on `matchConditions`.
const MAX_MATCH_CONDITIONS: usize = 64;

/// The expressions an update keeps from the object it replaces. Upstream compiles
/// them in the environment of stored expressions, which differs from a new
/// expression's in library versions only; here they need only compile as they did
/// when they were stored, so that an object an earlier Ferrokube accepted, with an
/// expression the type checks now refuse, stays updatable.
#[derive(Default)]
pub(crate) struct Stored<'a>(BTreeSet<&'a str>);

impl<'a> Stored<'a> {
    pub(crate) fn of(expressions: impl Iterator<Item = &'a str>) -> Self {
        Stored(expressions.collect())
    }
}

/// Reports what compiling `source` gave as the field's `Invalid value` with the
/// compiler's message; for an expression the update keeps, what compiling it as it
/// was stored gives instead (parsed, with only declared variables and functions).
fn report(
    compiled: Result<Program, CompileError>,
    source: &str,
    stored: &Stored<'_>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let compiled = if stored.0.contains(source) {
        ferrokube_cel::compile(source, ferrokube_cel::POLICY_VARIABLES)
    } else {
        compiled
    };
    if let Err(e) = compiled {
        errs.push(FieldError::invalid(path, source, e.0));
    }
}

/// `matchConditions` of a webhook or a policy: qualified, unique names, at most 64,
/// expressions that compile to a bool (with `params` declared if `has_params`).
pub(crate) fn match_conditions(
    conditions: Option<&Vec<ar::MatchCondition>>,
    has_params: bool,
    stored: &Stored<'_>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let conditions = conditions.map(Vec::as_slice).unwrap_or_default();
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errs.push(FieldError::too_many(
            path,
            Some(conditions.len()),
            Some(MAX_MATCH_CONDITIONS),
        ));
    }
    // Match conditions never see `variables` (upstream compiles them statelessly).
    let compiler = Compiler::new();
    let options = Options {
        has_params,
        has_authorizer: true,
    };
    let mut seen = BTreeSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let cp = path.index(i);
        let expression = c.expression.trim();
        if expression.is_empty() {
            errs.push(FieldError::required(&cp.child("expression"), ""));
        } else {
            let compiled = compiler.compile(expression, options, Returns::Bool);
            report(compiled, expression, stored, &cp.child("expression"), errs);
        }
        if c.name.is_empty() {
            errs.push(FieldError::required(&cp.child("name"), ""));
        } else {
            qualified_name(&c.name, &cp.child("name"), errs);
        }
        if !c.name.is_empty() && !seen.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(&cp.child("name"), c.name.as_str()));
        }
    }
}

fn match_resources(
    m: &ar::MatchResources,
    path: &FieldPath,
    require_rules: bool,
    errs: &mut Vec<FieldError>,
) {
    enum_optional(
        &m.match_policy,
        &["Equivalent", "Exact"],
        &path.child("matchPolicy"),
        errs,
    );
    if let Some(sel) = &m.namespace_selector {
        label_selector(sel, &path.child("namespaceSelector"), errs);
    }
    if let Some(sel) = &m.object_selector {
        label_selector(sel, &path.child("objectSelector"), errs);
    }
    if require_rules && m.resource_rules.as_ref().is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(&path.child("resourceRules"), ""));
    }
    for (field, rules) in [
        ("resourceRules", &m.resource_rules),
        ("excludeResourceRules", &m.exclude_resource_rules),
    ] {
        for (i, rule) in rules.iter().flatten().enumerate() {
            let rp = path.child(field).index(i);
            const OPS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
            let ops = rule.operations.as_deref().unwrap_or_default();
            if ops.is_empty() {
                errs.push(FieldError::required(&rp.child("operations"), ""));
            }
            for (j, op) in ops.iter().enumerate() {
                if !OPS.contains(&op.as_str()) {
                    errs.push(FieldError::not_supported(
                        &rp.child("operations").index(j),
                        op.as_str(),
                        OPS,
                    ));
                }
            }
            for (f, values) in [
                ("apiGroups", &rule.api_groups),
                ("apiVersions", &rule.api_versions),
                ("resources", &rule.resources),
            ] {
                if values.as_ref().is_none_or(Vec::is_empty) {
                    errs.push(FieldError::required(&rp.child(f), ""));
                }
            }
            enum_optional(
                &rule.scope,
                &["*", "Cluster", "Namespaced"],
                &rp.child("scope"),
                errs,
            );
        }
    }
}

/// A CEL identifier, as a variable name must be (upstream `validateVariable`).
fn is_cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Upstream's limits on a policy's audit annotations.
const MAX_AUDIT_ANNOTATIONS: usize = 20;
const MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH: usize = 5 * 1024;

/// Upstream `validateValidatingAdmissionPolicySpec`, in its order; `stored` holds the
/// expressions of the object an update replaces, and `check_match_conditions` is false
/// when an update changes neither them nor `paramKind`.
fn validate_policy(
    policy: &ar::ValidatingAdmissionPolicy,
    stored: &Stored<'_>,
    check_match_conditions: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let sp = p("spec");
    let Some(spec) = &policy.spec else {
        errs.push(FieldError::required(&sp, ""));
        return errs;
    };
    enum_optional(
        &spec.failure_policy,
        &["Fail", "Ignore"],
        &sp.child("failurePolicy"),
        &mut errs,
    );
    if let Some(pk) = &spec.param_kind {
        let pp = sp.child("paramKind");
        if pk.api_version.as_deref().unwrap_or("").is_empty() {
            errs.push(FieldError::required(&pp.child("apiVersion"), ""));
        }
        if pk.kind.as_deref().unwrap_or("").is_empty() {
            errs.push(FieldError::required(&pp.child("kind"), ""));
        }
    }
    match &spec.match_constraints {
        None => errs.push(FieldError::required(&sp.child("matchConstraints"), "")),
        Some(m) => match_resources(m, &sp.child("matchConstraints"), true, &mut errs),
    }
    let has_params = spec.param_kind.is_some();
    if check_match_conditions {
        match_conditions(
            spec.match_conditions.as_ref(),
            has_params,
            stored,
            &sp.child("matchConditions"),
            &mut errs,
        );
    }
    let variables = spec.variables.as_deref().unwrap_or_default();
    // `variables` is declared only in a policy that has some (upstream's
    // composited compiler); each is typed for the expressions after it.
    let mut compiler = Compiler::new();
    if !variables.is_empty() {
        compiler = compiler.with_variables();
    }
    let options = Options {
        has_params,
        has_authorizer: true,
    };
    for (i, v) in variables.iter().enumerate() {
        let vp = sp.child("variables").index(i);
        if v.name.trim().is_empty() {
            errs.push(FieldError::required(
                &vp.child("name"),
                "name is not specified",
            ));
        } else if !is_cel_identifier(&v.name) {
            errs.push(FieldError::invalid(
                &vp.child("name"),
                v.name.as_str(),
                "name is not a valid CEL identifier",
            ));
        }
        let ep = vp.child("expression");
        if v.expression.trim().is_empty() {
            errs.push(FieldError::required(&ep, "expression is not specified"));
        } else {
            let compiled = compiler.compile_variable(&v.name, &v.expression, options);
            report(compiled, &v.expression, stored, &ep, &mut errs);
        }
    }
    let validations = spec.validations.as_deref().unwrap_or_default();
    let audits = spec.audit_annotations.as_deref().unwrap_or_default();
    if validations.is_empty() && audits.is_empty() {
        for field in ["validations", "auditAnnotations"] {
            errs.push(FieldError::required(
                &sp.child(field),
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        return errs;
    }
    // Message expressions see no `authorizer` upstream.
    let message_options = Options {
        has_params,
        has_authorizer: false,
    };
    for (i, v) in validations.iter().enumerate() {
        let vp = sp.child("validations").index(i);
        let ep = vp.child("expression");
        if v.expression.trim().is_empty() {
            errs.push(FieldError::required(&ep, "expression is not specified"));
        } else {
            let compiled = compiler.compile(&v.expression, options, Returns::Bool);
            report(compiled, &v.expression, stored, &ep, &mut errs);
        }
        if let Some(me) = v.message_expression.as_deref().filter(|m| !m.is_empty()) {
            let mp = vp.child("messageExpression");
            if me.trim().is_empty() {
                errs.push(FieldError::invalid(
                    &mp,
                    me,
                    "must be non-empty if specified",
                ));
            } else {
                let compiled = compiler.compile(me, message_options, Returns::String);
                report(compiled, me, stored, &mp, &mut errs);
            }
        }
        if let Some(m) = v.message.as_deref().filter(|m| !m.is_empty()) {
            let detail = if m.trim().is_empty() {
                Some("message must be non-empty if specified")
            } else if m.trim().contains(['\n', '\r']) {
                Some("message must not contain line breaks")
            } else {
                None
            };
            if let Some(detail) = detail {
                errs.push(FieldError::invalid(&vp.child("message"), m, detail));
            }
        }
        enum_optional(
            &v.reason,
            &[
                "Unauthorized",
                "Forbidden",
                "Invalid",
                "RequestEntityTooLarge",
            ],
            &vp.child("reason"),
            &mut errs,
        );
    }
    if audits.len() > MAX_AUDIT_ANNOTATIONS {
        errs.push(FieldError::invalid(
            &sp.child("auditAnnotations"),
            serde_json::to_value(audits).unwrap_or_default(),
            format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    let mut keys = BTreeSet::new();
    for (i, a) in audits.iter().enumerate() {
        let ap = sp.child("auditAnnotations").index(i);
        // The annotation is recorded as `<policy name>/<key>`, which must be a
        // qualified name.
        if name.is_empty() {
            errs.push(FieldError::invalid(
                &ap.child("key"),
                a.key.as_str(),
                "requires metadata.name be non-empty",
            ));
        } else {
            qualified_name(&format!("{name}/{}", a.key), &ap.child("key"), &mut errs);
        }
        let vp = ap.child("valueExpression");
        let value = a.value_expression.trim();
        if value.is_empty() {
            errs.push(FieldError::required(
                &vp,
                "valueExpression is not specified",
            ));
        } else if value.len() > MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH {
            errs.push(FieldError::required(
                &vp,
                format!(
                    "must not exceed {MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH} bytes in length"
                ),
            ));
        } else {
            let compiled = compiler.compile(value, options, Returns::StringOrNull);
            report(compiled, value, stored, &vp, &mut errs);
        }
        if !keys.insert(a.key.as_str()) {
            errs.push(FieldError::duplicate(&ap.child("key"), a.key.as_str()));
        }
    }
    errs
}

/// Every CEL expression of `policy`.
fn expressions(policy: &ar::ValidatingAdmissionPolicy) -> Stored<'_> {
    let mut all = BTreeSet::new();
    if let Some(spec) = &policy.spec {
        for v in spec.validations.iter().flatten() {
            all.insert(v.expression.as_str());
            all.extend(v.message_expression.as_deref());
        }
        for a in spec.audit_annotations.iter().flatten() {
            all.insert(a.value_expression.trim());
        }
        for v in spec.variables.iter().flatten() {
            all.insert(v.expression.as_str());
        }
        for c in spec.match_conditions.iter().flatten() {
            all.insert(c.expression.trim());
        }
    }
    Stored(all)
}

impl Validate for ar::ValidatingAdmissionPolicy {
    fn validate_create(&self) -> Vec<FieldError> {
        validate_policy(self, &Stored::default(), true)
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let conditions = |p: &Self| {
            p.spec
                .as_ref()
                .map(|s| (s.param_kind.clone(), s.match_conditions.clone()))
        };
        let changed_conditions = conditions(self) != conditions(old);
        validate_policy(self, &expressions(old), changed_conditions)
    }
}

impl Validate for ar::ValidatingAdmissionPolicyBinding {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&sp, ""));
            return errs;
        };
        if spec.policy_name.as_deref().unwrap_or("").is_empty() {
            errs.push(FieldError::required(&sp.child("policyName"), ""));
        }
        if let Some(m) = &spec.match_resources {
            match_resources(m, &sp.child("matchResources"), false, &mut errs);
        }
        if let Some(r) = &spec.param_ref {
            let rp = sp.child("paramRef");
            match (r.name.as_deref().filter(|n| !n.is_empty()), &r.selector) {
                (Some(_), Some(_)) => errs.push(FieldError::forbidden(
                    &rp.child("name"),
                    "name and selector are mutually exclusive",
                )),
                (None, None) => errs.push(FieldError::required(
                    &rp,
                    "one of name or selector must be specified",
                )),
                (None, Some(sel)) => label_selector(sel, &rp.child("selector"), &mut errs),
                (Some(_), None) => {}
            }
            match r.parameter_not_found_action.as_deref() {
                None | Some("") => errs.push(FieldError::required(
                    &rp.child("parameterNotFoundAction"),
                    "",
                )),
                Some(_) => enum_optional(
                    &r.parameter_not_found_action,
                    &["Allow", "Deny"],
                    &rp.child("parameterNotFoundAction"),
                    &mut errs,
                ),
            }
        }
        let ap = sp.child("validationActions");
        let actions = spec.validation_actions.as_deref().unwrap_or_default();
        if actions.is_empty() {
            errs.push(FieldError::required(
                &ap,
                "at least one validation action is required",
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, a) in actions.iter().enumerate() {
            if !seen.insert(a.as_str()) {
                errs.push(FieldError::duplicate(&ap.index(i), a.as_str()));
            }
            const ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
            if !ACTIONS.contains(&a.as_str()) {
                errs.push(FieldError::not_supported(&ap.index(i), a.as_str(), ACTIONS));
            }
        }
        if seen.contains("Deny") && seen.contains("Warn") {
            errs.push(FieldError::invalid(
                &ap,
                serde_json::json!(actions),
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ));
        }
        errs
    }

    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(v: serde_json::Value) -> ar::ValidatingAdmissionPolicy {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": v})).unwrap()
    }

    fn rules() -> serde_json::Value {
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["deployments"]}]})
    }

    #[test]
    fn policies_compile_their_expressions() {
        let ok = policy(json!({"matchConstraints": rules(),
            "validations": [{"expression": "object.spec.replicas <= 5",
                "messageExpression": "'replicas: ' + string(object.spec.replicas)"}],
            "variables": [{"name": "r", "expression": "object.spec.replicas"}]}));
        assert_eq!(ok.validate_create(), vec![]);
        let bad = policy(json!({"matchConstraints": rules(),
            "validations": [{"expression": "object.spec.replicas <="}, {"expression": "objekt.x"},
                {"expression": "object.metadata.name.lowerAsci() == 'a'"}]}));
        let errs = bad.validate_create();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[2]
                .to_string()
                .contains("undeclared reference to 'lowerAsci'"),
            "{}",
            errs[2]
        );
        assert!(errs[0].to_string().starts_with(
            "spec.validations[0].expression: Invalid value: \"object.spec.replicas <=\": compilation failed: "
        ), "{}", errs[0].to_string());
        assert!(
            errs[1]
                .to_string()
                .contains("undeclared reference to 'objekt'"),
            "{}",
            errs[1].to_string()
        );
        let none = policy(json!({"validations": []}));
        let bodies: Vec<String> = none
            .validate_create()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            bodies.contains(&"spec.matchConstraints: Required value".to_string()),
            "{bodies:?}"
        );
    }

    fn messages(p: &ar::ValidatingAdmissionPolicy) -> Vec<String> {
        p.validate_create()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Cases of upstream's `TestValidateValidatingAdmissionPolicy`.
    #[test]
    fn expressions_are_compiled_in_upstreams_environments() {
        let with = |extra: serde_json::Value| {
            let mut spec = json!({"matchConstraints": rules()});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            messages(&policy(spec))
        };
        let found = with(json!({"validations": [{"expression": "params.x < 100"}]}));
        assert!(
            found[0].contains("undeclared reference to 'params'"),
            "{found:?}"
        );
        assert_eq!(
            with(
                json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "validations": [{"expression": "int(params.data.x) < 100"}]})
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            with(json!({"validations": [{"expression": "true", "messageExpression": "0 == 0"}]})),
            [
                "spec.validations[0].messageExpression: Invalid value: \"0 == 0\": must evaluate to string but got bool"
            ]
        );
        assert_eq!(
            with(json!({"auditAnnotations": [{"key": "a", "valueExpression": "true"}]})),
            [
                "spec.auditAnnotations[0].valueExpression: Invalid value: \"true\": must evaluate to one of [string null_type] but got bool"
            ]
        );
        assert_eq!(
            with(
                json!({"matchConditions": [{"name": "m", "expression": "6"}],
                "validations": [{"expression": "true"}]})
            ),
            [
                "spec.matchConditions[0].expression: Invalid value: \"6\": must evaluate to bool but got int"
            ]
        );
        // A field of `object` is `dyn`, not a bool.
        let found = with(json!({"validations": [{"expression": "object.spec.paused"}]}));
        assert_eq!(
            found,
            [
                "spec.validations[0].expression: Invalid value: \"object.spec.paused\": must evaluate to bool but got dyn"
            ]
        );
        let found = with(json!({"validations": [{"expression": "request.operaton == 'CREATE'"}]}));
        assert!(found[0].contains("undefined field 'operaton'"), "{found:?}");
        let found = with(json!({"validations": [{"expression": "true",
            "messageExpression": "authorizer.requestResource.check('get').reason()"}]}));
        assert!(
            found[0].contains("undeclared reference to 'authorizer'"),
            "{found:?}"
        );
        let found = with(json!({"variables": [
                {"name": "4ever", "expression": "true"},
                {"name": "sum", "expression": "114 + '514'"},
                {"name": "early", "expression": "variables.foo + 1"},
                {"name": "foo", "expression": "1"}],
            "validations": [{"expression": "variables.foo == 1"},
                {"expression": "variables.replicas == 2"}]}));
        assert_eq!(found.len(), 4, "{found:?}");
        assert_eq!(
            found[0],
            "spec.variables[0].name: Invalid value: \"4ever\": name is not a valid CEL identifier"
        );
        assert!(found[1].starts_with("spec.variables[1].expression: Invalid value: \"114 + '514'\": compilation failed: ERROR: <input>:1:5: found no matching overload for '_+_' applied to '(int, string)'"), "{found:?}");
        assert!(found[2].starts_with("spec.variables[2].expression: Invalid value: \"variables.foo + 1\": compilation failed: ERROR: <input>:1:10: undefined field 'foo'"), "{found:?}");
        assert!(found[3].starts_with("spec.validations[1].expression: Invalid value: \"variables.replicas == 2\": compilation failed: ERROR: <input>:1:10: undefined field 'replicas'"), "{found:?}");
        let found = with(json!({"validations": [{"expression": "variables.x"}]}));
        assert!(
            found[0].contains("undeclared reference to 'variables'"),
            "{found:?}"
        );
    }

    #[test]
    fn audit_annotations_are_checked_as_upstream_checks_them() {
        let annotations = |list: serde_json::Value| {
            let p: ar::ValidatingAdmissionPolicy = serde_json::from_value(json!({
                "metadata": {"name": "config"},
                "spec": {"matchConstraints": rules(), "auditAnnotations": list}}))
            .unwrap();
            messages(&p)
        };
        let found = annotations(json!([{"key": "@", "valueExpression": "'x'"}]));
        assert!(
            found[0].starts_with("spec.auditAnnotations[0].key: Invalid value: \"config/@\": name part must consist of alphanumeric characters"),
            "{found:?}"
        );
        let found = annotations(json!([{"key": "a", "valueExpression": "'x'"},
            {"key": "a", "valueExpression": "null"}]));
        assert_eq!(
            found,
            ["spec.auditAnnotations[1].key: Duplicate value: \"a\""]
        );
        let long = format!("'{}'", "x".repeat(5 * 1024));
        let found = annotations(json!([{"key": "a", "valueExpression": long}]));
        assert_eq!(
            found,
            [
                "spec.auditAnnotations[0].valueExpression: Required value: must not exceed 5120 bytes in length"
            ]
        );
        let many: Vec<serde_json::Value> = (0..21)
            .map(|i| json!({"key": format!("k{i}"), "valueExpression": "'x'"}))
            .collect();
        let found = annotations(json!(many));
        assert!(
            found[0].ends_with("must not have more than 20 auditAnnotations"),
            "{found:?}"
        );
    }

    /// An update keeps what an earlier Ferrokube stored without the type checks, and
    /// leaves unchanged match conditions alone, as upstream does.
    #[test]
    fn an_update_keeps_stored_expressions() {
        let stored = policy(json!({"matchConstraints": rules(),
            "matchConditions": [{"name": "m", "expression": "object.metadata.name"}],
            "validations": [{"expression": "object.spec.paused"}]}));
        assert_eq!(stored.validate_create().len(), 2);
        let mut labelled = stored.clone();
        labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert_eq!(labelled.validate_update(&stored), vec![]);
        // Match conditions changed around one stored before: it is kept.
        let mut more = stored.clone();
        more.spec
            .as_mut()
            .unwrap()
            .match_conditions
            .as_mut()
            .unwrap()
            .push(ar::MatchCondition {
                name: "n".into(),
                expression: "true".into(),
            });
        assert_eq!(more.validate_update(&stored), vec![]);
        let mut changed = stored.clone();
        changed.spec.as_mut().unwrap().validations.as_mut().unwrap()[0].expression =
            "object.spec.suspended".into();
        let found: Vec<String> = changed
            .validate_update(&stored)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "spec.validations[0].expression: Invalid value: \"object.spec.suspended\": must evaluate to bool but got dyn"
            ]
        );
    }

    #[test]
    fn bindings_need_a_policy_and_actions() {
        let b: ar::ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": "b"},
            "spec": {"validationActions": ["Deny", "Warn"], "paramRef": {"name": "x"}}}))
        .unwrap();
        let bodies: Vec<String> = b
            .validate_create()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            bodies.contains(&"spec.policyName: Required value".to_string()),
            "{bodies:?}"
        );
        assert!(
            bodies
                .iter()
                .any(|b| b.contains("must not contain both Deny and Warn")),
            "{bodies:?}"
        );
        assert!(
            bodies.contains(&"spec.paramRef.parameterNotFoundAction: Required value".to_string()),
            "{bodies:?}"
        );
    }
}
