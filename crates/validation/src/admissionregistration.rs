//! admissionregistration.k8s.io/v1: the webhook configurations (upstream
//! `pkg/apis/admissionregistration/validation`, the v1 rules).

use std::collections::BTreeSet;

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_apimachinery::validation::is_dns1123_subdomain;
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::Validate;
use crate::admission_policy::Stored;
use crate::util::*;

/// The fields both webhook kinds share.
struct Webhook<'a> {
    name: &'a str,
    rules: Option<&'a Vec<ar::RuleWithOperations>>,
    client: &'a ar::WebhookClientConfig,
    failure_policy: &'a Option<String>,
    match_policy: &'a Option<String>,
    side_effects: &'a str,
    timeout_seconds: Option<i32>,
    admission_review_versions: &'a [String],
    namespace_selector: Option<&'a LabelSelector>,
    object_selector: Option<&'a LabelSelector>,
    match_conditions: Option<&'a Vec<ar::MatchCondition>>,
}

/// Which webhooks' match conditions to check: all (a create), or on an update none
/// when it changes none of them (upstream's `ignoreMatchConditions`), else all with
/// the old configuration's expressions compiled as they were stored.
fn conditions_to_check<'a>(
    new: &[Option<&Vec<ar::MatchCondition>>],
    old: Option<&[Option<&'a Vec<ar::MatchCondition>>]>,
) -> Option<Stored<'a>> {
    match old {
        None => Some(Stored::default()),
        Some(old) if old == new => None,
        Some(old) => Some(Stored::of(
            old.iter()
                .flatten()
                .flat_map(|conditions| conditions.iter())
                .map(|c| c.expression.trim()),
        )),
    }
}

fn validate_webhook(
    w: &Webhook<'_>,
    stored: Option<&Stored<'_>>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    // Upstream: a qualified name with at least three dot-separated segments.
    let name_path = path.child("name");
    if w.name.is_empty() {
        errs.push(FieldError::required(&name_path, ""));
    } else {
        for e in is_dns1123_subdomain(w.name) {
            errs.push(FieldError::invalid(&name_path, w.name, e));
        }
        if w.name.split('.').count() < 3 {
            errs.push(FieldError::invalid(
                &name_path,
                w.name,
                "should be a domain with at least three segments separated by dots",
            ));
        }
    }
    for (i, rule) in w.rules.into_iter().flatten().enumerate() {
        let rp = path.child("rules").index(i);
        let ops = rule.operations.as_deref().unwrap_or_default();
        if ops.is_empty() {
            errs.push(FieldError::required(&rp.child("operations"), ""));
        }
        for (j, op) in ops.iter().enumerate() {
            const OPS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
            if !OPS.contains(&op.as_str()) {
                errs.push(FieldError::not_supported(
                    &rp.child("operations").index(j),
                    op.as_str(),
                    OPS,
                ));
            }
        }
        for (field, values) in [
            ("apiGroups", &rule.api_groups),
            ("apiVersions", &rule.api_versions),
            ("resources", &rule.resources),
        ] {
            if values.as_ref().is_none_or(Vec::is_empty) {
                errs.push(FieldError::required(&rp.child(field), ""));
            }
        }
        enum_optional(
            &rule.scope,
            &["*", "Cluster", "Namespaced"],
            &rp.child("scope"),
            errs,
        );
    }
    enum_optional(
        w.failure_policy,
        &["Fail", "Ignore"],
        &path.child("failurePolicy"),
        errs,
    );
    enum_optional(
        w.match_policy,
        &["Equivalent", "Exact"],
        &path.child("matchPolicy"),
        errs,
    );
    const SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
    if w.side_effects.is_empty() {
        errs.push(FieldError::required(&path.child("sideEffects"), ""));
    } else if !SIDE_EFFECTS.contains(&w.side_effects) {
        errs.push(FieldError::not_supported(
            &path.child("sideEffects"),
            w.side_effects,
            SIDE_EFFECTS,
        ));
    }
    if let Some(t) = w.timeout_seconds
        && !(1..=30).contains(&t)
    {
        errs.push(FieldError::invalid(
            &path.child("timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    let versions_path = path.child("admissionReviewVersions");
    if w.admission_review_versions.is_empty() {
        errs.push(FieldError::required(&versions_path, ""));
    } else {
        let mut seen = BTreeSet::new();
        for (i, v) in w.admission_review_versions.iter().enumerate() {
            if !seen.insert(v.as_str()) {
                errs.push(FieldError::duplicate(&versions_path.index(i), v.as_str()));
            }
        }
        if !w
            .admission_review_versions
            .iter()
            .any(|v| v == "v1" || v == "v1beta1")
        {
            errs.push(FieldError::invalid(
                &versions_path,
                serde_json::json!(w.admission_review_versions),
                "must include at least one of v1, v1beta1",
            ));
        }
    }
    let cp = path.child("clientConfig");
    match (&w.client.url, &w.client.service) {
        (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
            &cp,
            "exactly one of url or service is required",
        )),
        (Some(url), None) => {
            if !url.starts_with("https://") {
                errs.push(FieldError::invalid(
                    &cp.child("url"),
                    url.as_str(),
                    "'https' is the only allowed URL scheme",
                ));
            } else if url.contains('#') || url.contains('?') {
                errs.push(FieldError::invalid(
                    &cp.child("url"),
                    url.as_str(),
                    "fragments and query parameters are not allowed",
                ));
            }
        }
        (None, Some(svc)) => {
            let sp = cp.child("service");
            if svc.name.is_empty() {
                errs.push(FieldError::required(
                    &sp.child("name"),
                    "service name is required",
                ));
            }
            if svc.namespace.is_empty() {
                errs.push(FieldError::required(
                    &sp.child("namespace"),
                    "service namespace is required",
                ));
            }
            if let Some(path) = svc.path.as_deref()
                && !path.is_empty()
                && !path.starts_with('/')
            {
                errs.push(FieldError::invalid(
                    &sp.child("path"),
                    path,
                    "must start with a '/'",
                ));
            }
            if let Some(port) = svc.port
                && !(1..=65535).contains(&port)
            {
                errs.push(FieldError::invalid(
                    &sp.child("port"),
                    port,
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
    if let Some(sel) = w.namespace_selector {
        label_selector(sel, &path.child("namespaceSelector"), errs);
    }
    if let Some(sel) = w.object_selector {
        label_selector(sel, &path.child("objectSelector"), errs);
    }
    if let Some(stored) = stored {
        crate::admission_policy::match_conditions(
            w.match_conditions,
            false,
            stored,
            &path.child("matchConditions"),
            errs,
        );
    }
}

fn unique_names<'a>(
    names: impl Iterator<Item = &'a str>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let mut seen = BTreeSet::new();
    for (i, n) in names.enumerate() {
        if !n.is_empty() && !seen.insert(n) {
            errs.push(FieldError::duplicate(&path.index(i).child("name"), n));
        }
    }
}

/// The two kinds of webhook, seen through the fields they share.
trait AnyWebhook {
    fn view(&self) -> Webhook<'_>;
}

macro_rules! any_webhook {
    ($($kind:ty),*) => {$(
        impl AnyWebhook for $kind {
            fn view(&self) -> Webhook<'_> {
                Webhook {
                    name: &self.name,
                    rules: self.rules.as_ref(),
                    client: &self.client_config,
                    failure_policy: &self.failure_policy,
                    match_policy: &self.match_policy,
                    side_effects: &self.side_effects,
                    timeout_seconds: self.timeout_seconds,
                    admission_review_versions: &self.admission_review_versions,
                    namespace_selector: self.namespace_selector.as_ref(),
                    object_selector: self.object_selector.as_ref(),
                    match_conditions: self.match_conditions.as_ref(),
                }
            }
        }
    )*};
}

any_webhook!(ar::ValidatingWebhook, ar::MutatingWebhook);

/// Each webhook's match conditions.
fn conditions_of<W: AnyWebhook>(hooks: &[W]) -> Vec<Option<&Vec<ar::MatchCondition>>> {
    hooks.iter().map(|w| w.view().match_conditions).collect()
}

/// A webhook configuration's `webhooks` (`old`: those of the configuration an update
/// replaces); `each` adds what one kind checks of its own.
fn validate_webhooks<W: AnyWebhook>(
    hooks: Option<&Vec<W>>,
    old: Option<Option<&Vec<W>>>,
    each: impl Fn(&W, &FieldPath, &mut Vec<FieldError>),
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let hooks = hooks.map(Vec::as_slice).unwrap_or_default();
    let new_conditions: Vec<_> = conditions_of(hooks);
    let old_conditions: Option<Vec<_>> =
        old.map(|o| conditions_of(o.map(Vec::as_slice).unwrap_or_default()));
    let stored = conditions_to_check(&new_conditions, old_conditions.as_deref());
    for (i, w) in hooks.iter().enumerate() {
        let path = p("webhooks").index(i);
        validate_webhook(&w.view(), stored.as_ref(), &path, &mut errs);
        each(w, &path, &mut errs);
    }
    unique_names(
        hooks.iter().map(|w| w.view().name),
        &p("webhooks"),
        &mut errs,
    );
    errs
}

impl Validate for ar::ValidatingWebhookConfiguration {
    fn validate_create(&self) -> Vec<FieldError> {
        validate_webhooks(self.webhooks.as_ref(), None, |_, _, _| {})
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        validate_webhooks(
            self.webhooks.as_ref(),
            Some(old.webhooks.as_ref()),
            |_, _, _| {},
        )
    }
}

/// A mutating webhook's own field.
fn reinvocation_policy(w: &ar::MutatingWebhook, path: &FieldPath, errs: &mut Vec<FieldError>) {
    enum_optional(
        &w.reinvocation_policy,
        &["IfNeeded", "Never"],
        &path.child("reinvocationPolicy"),
        errs,
    );
}

impl Validate for ar::MutatingWebhookConfiguration {
    fn validate_create(&self) -> Vec<FieldError> {
        validate_webhooks(self.webhooks.as_ref(), None, reinvocation_policy)
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        validate_webhooks(
            self.webhooks.as_ref(),
            Some(old.webhooks.as_ref()),
            reinvocation_policy,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(webhook: serde_json::Value) -> ar::ValidatingWebhookConfiguration {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "c"}, "webhooks": [webhook]}),
        )
        .unwrap()
    }

    #[test]
    fn webhook_configurations_follow_upstreams_rules() {
        let good = config(serde_json::json!({
            "name": "deny.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:8443/deny"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}));
        assert!(good.validate_create().is_empty());
        let bad = config(serde_json::json!({
            "name": "deny", "sideEffects": "Some", "admissionReviewVersions": ["v2"], "timeoutSeconds": 31,
            "clientConfig": {"url": "http://x/deny"},
            "matchConditions": [{"name": "c", "expression": "object.metadata.name =="},
                {"name": "c", "expression": "params.x"}],
            "rules": [{"operations": ["PATCH"], "apiGroups": [""], "apiVersions": ["v1"], "resources": []}]}));
        let messages: Vec<String> = bad
            .validate_create()
            .iter()
            .map(|e| e.to_string())
            .collect();
        for want in [
            "webhooks[0].name: Invalid value: \"deny\": should be a domain with at least three segments separated by dots",
            "webhooks[0].rules[0].operations[0]: Unsupported value: \"PATCH\"",
            "webhooks[0].rules[0].resources: Required value",
            "webhooks[0].sideEffects: Unsupported value: \"Some\"",
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            "webhooks[0].admissionReviewVersions: Invalid value",
            "webhooks[0].clientConfig.url: Invalid value: \"http://x/deny\": 'https' is the only allowed URL scheme",
            "webhooks[0].matchConditions[0].expression: Invalid value: \"object.metadata.name ==\": compilation failed: ",
            "webhooks[0].matchConditions[1].expression: Invalid value: \"params.x\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params'",
            "webhooks[0].matchConditions[1].name: Duplicate value: \"c\"",
        ] {
            assert!(
                messages.iter().any(|m| m.starts_with(want)),
                "{want}\n{messages:#?}"
            );
        }
    }

    #[test]
    fn match_conditions_must_be_bools_unless_an_update_keeps_them() {
        let hook = |expression: &str| {
            config(serde_json::json!({
                "name": "deny.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://127.0.0.1:8443/deny"},
                "matchConditions": [{"name": "c", "expression": expression}],
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}))
        };
        let six = hook("6");
        let messages: Vec<String> = six
            .validate_create()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                "webhooks[0].matchConditions[0].expression: Invalid value: \"6\": must evaluate to bool but got int"
            ]
        );
        // Upstream declares `namespaceObject` for webhooks too.
        assert!(
            hook("namespaceObject == null && request.userInfo.username != ''")
                .validate_create()
                .is_empty()
        );
        let mut relabelled = six.clone();
        relabelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert!(relabelled.validate_update(&six).is_empty());
        assert_eq!(hook("7").validate_update(&six).len(), 1);
        // A condition stored before is kept when others change (it compiles as it did).
        let mut more = six.clone();
        if let Some(c) = more.webhooks.as_mut().unwrap()[0].match_conditions.as_mut() {
            c.push(ar::MatchCondition {
                name: "d".into(),
                expression: "object.metadata.name".into(),
            });
        }
        let messages: Vec<String> = more
            .validate_update(&six)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                "webhooks[0].matchConditions[1].expression: Invalid value: \"object.metadata.name\": must evaluate to bool but got dyn"
            ]
        );
    }
}
