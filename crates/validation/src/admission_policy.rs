//! admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and its Binding
//! (upstream `pkg/apis/admissionregistration/validation`), and the CEL `matchConditions`
//! the webhook configurations share: every CEL expression is compiled, and one that does
//! not compile is an `Invalid value` with the compiler's message, as upstream.

use std::collections::BTreeSet;

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use k8s_openapi::api::admissionregistration::v1 as ar;

use crate::Validate;
use crate::util::*;

/// Upstream's limit on `matchConditions`.
const MAX_MATCH_CONDITIONS: usize = 64;

/// Compiles `expression` against `variables`; an error is the field's `Invalid value`.
fn expression(expression: &str, variables: &[&str], path: &FieldPath, errs: &mut Vec<FieldError>) {
    if expression.trim().is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if let Err(e) = ferrokube_cel::compile(expression, variables) {
        errs.push(FieldError::invalid(path, expression, e.0));
    }
}

/// `matchConditions` of a webhook or a policy: qualified, unique names, at most 64,
/// compiling expressions.
pub(crate) fn match_conditions(
    conditions: Option<&Vec<ar::MatchCondition>>,
    variables: &[&str],
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
    let mut seen = BTreeSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let cp = path.index(i);
        if c.name.is_empty() {
            errs.push(FieldError::required(&cp.child("name"), ""));
        } else {
            qualified_name(&c.name, &cp.child("name"), errs);
            if !seen.insert(c.name.as_str()) {
                errs.push(FieldError::duplicate(&cp.child("name"), c.name.as_str()));
            }
        }
        expression(&c.expression, variables, &cp.child("expression"), errs);
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

impl Validate for ar::ValidatingAdmissionPolicy {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&sp, ""));
            return errs;
        };
        enum_optional(
            &spec.failure_policy,
            &["Fail", "Ignore"],
            &sp.child("failurePolicy"),
            &mut errs,
        );
        match &spec.match_constraints {
            None => errs.push(FieldError::required(&sp.child("matchConstraints"), "")),
            Some(m) => match_resources(m, &sp.child("matchConstraints"), true, &mut errs),
        }
        if let Some(pk) = &spec.param_kind {
            let pp = sp.child("paramKind");
            if pk.api_version.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::required(&pp.child("apiVersion"), ""));
            }
            if pk.kind.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::required(&pp.child("kind"), ""));
            }
        }
        let vars = ferrokube_cel::POLICY_VARIABLES;
        let validations = spec.validations.as_deref().unwrap_or_default();
        let audits = spec.audit_annotations.as_deref().unwrap_or_default();
        if validations.is_empty() && audits.is_empty() {
            errs.push(FieldError::required(
                &sp.child("validations"),
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        for (i, v) in validations.iter().enumerate() {
            let vp = sp.child("validations").index(i);
            expression(&v.expression, vars, &vp.child("expression"), &mut errs);
            if let Some(me) = v
                .message_expression
                .as_deref()
                .filter(|m| !m.trim().is_empty())
            {
                expression(me, vars, &vp.child("messageExpression"), &mut errs);
            }
            if let Some(m) = &v.message
                && m.contains('\n')
            {
                errs.push(FieldError::invalid(
                    &vp.child("message"),
                    m.as_str(),
                    "message must not contain line breaks",
                ));
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
        let mut keys = BTreeSet::new();
        for (i, a) in audits.iter().enumerate() {
            let ap = sp.child("auditAnnotations").index(i);
            if a.key.is_empty() {
                errs.push(FieldError::required(&ap.child("key"), ""));
            } else if !keys.insert(a.key.as_str()) {
                errs.push(FieldError::duplicate(&ap.child("key"), a.key.as_str()));
            }
            expression(
                &a.value_expression,
                vars,
                &ap.child("valueExpression"),
                &mut errs,
            );
        }
        let mut names = BTreeSet::new();
        for (i, v) in spec.variables.iter().flatten().enumerate() {
            let vp = sp.child("variables").index(i);
            if v.name.is_empty() {
                errs.push(FieldError::required(&vp.child("name"), ""));
            } else if !is_cel_identifier(&v.name) {
                errs.push(FieldError::invalid(
                    &vp.child("name"),
                    v.name.as_str(),
                    "name is not a valid CEL identifier",
                ));
            } else if !names.insert(v.name.as_str()) {
                errs.push(FieldError::duplicate(&vp.child("name"), v.name.as_str()));
            }
            expression(&v.expression, vars, &vp.child("expression"), &mut errs);
        }
        match_conditions(
            spec.match_conditions.as_ref(),
            vars,
            &sp.child("matchConditions"),
            &mut errs,
        );
        errs
    }

    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
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
