//! The review APIs, answered from the authorizers and authenticators without
//! storing anything: `authorization.k8s.io/v1` SubjectAccessReview,
//! SelfSubjectAccessReview, LocalSubjectAccessReview and SelfSubjectRulesReview
//! (`kubectl auth can-i [--list]`), and `authentication.k8s.io/v1` TokenReview and
//! SelfSubjectReview (`kubectl auth whoami`); plus impersonation
//! (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-*`, checked with the `impersonate`
//! verb as upstream's `WithImpersonation` filter).

use std::collections::BTreeMap;

use bytes::Bytes;
use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath, go_quote};
use ferrokube_apimachinery::labels::{Operator, Requirement as LabelRequirement};
use ferrokube_apimachinery::validation::{
    validate_field_selector_requirement, validate_label_selector_requirement,
};
use ferrokube_auth::node::node_identity;
use ferrokube_auth::rbac::{
    RbacSource, SERVICE_ACCOUNT_USER_PREFIX, UnresolvedRole, aggregate_errors,
};
use ferrokube_auth::user::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS};
use ferrokube_auth::{
    Attributes, AuthRequest, AuthorizationMode, Decision, FieldRequirement, UserInfo,
    field_requirements, label_requirements,
};

use crate::authz_webhook::{Authorization, Verdict};
use http::HeaderMap;
use k8s_openapi::api::authorization::v1::{
    FieldSelectorAttributes, LabelSelectorAttributes, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{Value, json};

use crate::handler::State;

const AUTHZ_GROUP: &str = "authorization.k8s.io";
const AUTHN_GROUP: &str = "authentication.k8s.io";

/// Which review a path names: `(group, kind, namespace)`, whatever the method (a
/// review is create-only; the caller answers other methods 405).
pub(crate) fn review_path<'a>(
    segs: &[&'a str],
) -> Option<(&'static str, &'static str, Option<&'a str>)> {
    match segs {
        ["apis", AUTHZ_GROUP, "v1", "subjectaccessreviews"] => {
            Some((AUTHZ_GROUP, "SubjectAccessReview", None))
        }
        ["apis", AUTHZ_GROUP, "v1", "selfsubjectaccessreviews"] => {
            Some((AUTHZ_GROUP, "SelfSubjectAccessReview", None))
        }
        ["apis", AUTHZ_GROUP, "v1", "selfsubjectrulesreviews"] => {
            Some((AUTHZ_GROUP, "SelfSubjectRulesReview", None))
        }
        [
            "apis",
            AUTHZ_GROUP,
            "v1",
            "namespaces",
            ns,
            "localsubjectaccessreviews",
        ] => Some((AUTHZ_GROUP, "LocalSubjectAccessReview", Some(*ns))),
        ["apis", AUTHN_GROUP, "v1", "tokenreviews"] => Some((AUTHN_GROUP, "TokenReview", None)),
        ["apis", AUTHN_GROUP, "v1", "selfsubjectreviews"] => {
            Some((AUTHN_GROUP, "SelfSubjectReview", None))
        }
        _ => None,
    }
}

fn user_json(u: &UserInfo) -> Value {
    let mut v = json!({"username": u.name, "groups": u.groups});
    if !u.uid.is_empty() {
        v["uid"] = json!(u.uid);
    }
    if !u.extra.is_empty() {
        v["extra"] = json!(u.extra);
    }
    v
}

/// Upstream's validation of an access review (`ValidateSubjectAccessReviewSpec` and
/// its self and local forms), every error at once; `local_namespace` is a
/// LocalSubjectAccessReview's namespace.
fn validate_access_review(
    kind: &str,
    spec: &SubjectAccessReviewSpec,
    local_namespace: Option<&str>,
) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    let path = FieldPath::new("spec");
    let non_resource = spec.non_resource_attributes.as_ref().map(|n| {
        // Go's `%#v` of the internal type the error holds.
        format!(
            "authorization.NonResourceAttributes{{Path:{}, Verb:{}}}",
            go_quote(n.path.as_deref().unwrap_or("")),
            go_quote(n.verb.as_deref().unwrap_or(""))
        )
    });
    match (&spec.resource_attributes, &non_resource) {
        (Some(_), Some(printed)) => errs.push(FieldError::invalid_printed(
            &path.child("nonResourceAttributes"),
            printed,
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => errs.push(FieldError::invalid_printed(
            &path.child("resourceAttributes"),
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    if kind != "SelfSubjectAccessReview"
        && spec.user.as_deref().unwrap_or("").is_empty()
        && spec.groups.as_ref().is_none_or(Vec::is_empty)
    {
        errs.push(FieldError::invalid(
            &path.child("user"),
            "",
            "at least one of user or group must be specified",
        ));
    }
    if let Some(ra) = &spec.resource_attributes {
        let path = path.child("resourceAttributes");
        if let Some(selector) = &ra.field_selector {
            errs.extend(selector_errors(
                selector.raw_selector.as_deref(),
                selector.requirements.as_deref().unwrap_or(&[]),
                &path.child("fieldSelector"),
                validate_field_selector_requirement,
            ));
        }
        if let Some(selector) = &ra.label_selector {
            errs.extend(selector_errors(
                selector.raw_selector.as_deref(),
                selector.requirements.as_deref().unwrap_or(&[]),
                &path.child("labelSelector"),
                validate_label_selector_requirement,
            ));
        }
    }
    if let Some(namespace) = local_namespace {
        let spec_namespace = spec
            .resource_attributes
            .as_ref()
            .map(|ra| ra.namespace.as_deref().unwrap_or(""));
        if let Some(spec_namespace) = spec_namespace.filter(|ns| *ns != namespace) {
            errs.push(FieldError::invalid(
                &path.child("resourceAttributes").child("namespace"),
                spec_namespace,
                "must match metadata.namespace",
            ));
        }
        if let Some(printed) = &non_resource {
            errs.push(FieldError::invalid_printed(
                &path.child("nonResourceAttributes"),
                printed,
                "disallowed on this kind of request",
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(AUTHZ_GROUP, kind, "", errs))
    }
}

/// A review's selector: raw or requirements, not both, not neither; each requirement
/// checked with newer clients' operators let through (upstream's
/// AllowUnknownOperatorInRequirement).
fn selector_errors<R>(
    raw: Option<&str>,
    requirements: &[R],
    path: &FieldPath,
    validate_requirement: fn(&R, bool, &FieldPath) -> Vec<FieldError>,
) -> Vec<FieldError> {
    let raw = raw.unwrap_or("");
    let mut errs = match (raw.is_empty(), requirements.is_empty()) {
        (false, false) => vec![FieldError::invalid(
            &path.child("rawSelector"),
            raw,
            "may not specified at the same time as requirements",
        )],
        (true, true) => vec![FieldError::required(
            &path.child("requirements"),
            format!(
                "when {} is specified, requirements or rawSelector is required",
                path.as_str()
            ),
        )],
        _ => Vec::new(),
    };
    for (i, requirement) in requirements.iter().enumerate() {
        let at = path.child("requirements").index(i);
        errs.extend(validate_requirement(requirement, true, &at));
    }
    errs
}

/// Attributes of a (validated) review's spec for `user` (upstream
/// `ResourceAttributesFrom` and `NonResourceAttributesFrom`).
fn spec_attributes(spec: &SubjectAccessReviewSpec, user: UserInfo) -> Attributes {
    let Some(ra) = &spec.resource_attributes else {
        let nra = spec.non_resource_attributes.clone().unwrap_or_default();
        return Attributes {
            user,
            verb: nra.verb.unwrap_or_default(),
            path: nra.path.unwrap_or_default(),
            resource_request: false,
            ..Attributes::default()
        };
    };
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    Attributes {
        user,
        verb: s(&ra.verb),
        namespace: s(&ra.namespace),
        api_group: s(&ra.group),
        api_version: s(&ra.version),
        resource: s(&ra.resource),
        subresource: s(&ra.subresource),
        name: s(&ra.name),
        resource_request: true,
        path: String::new(),
        field_selector: ra
            .field_selector
            .as_ref()
            .map(review_field_selector)
            .unwrap_or_default(),
        label_selector: ra
            .label_selector
            .as_ref()
            .map(review_label_selector)
            .unwrap_or_default(),
    }
}

/// A review's field selector as the authorizers see a request's (upstream's
/// `ResourceAttributesFrom` with AuthorizeWithSelectors): its `rawSelector` parsed,
/// or its `requirements`, of which single-valued `In` and `NotIn` are an equality
/// and an inequality; with any other requirement (or an unparsable raw selector),
/// none.
fn review_field_selector(selector: &FieldSelectorAttributes) -> Vec<FieldRequirement> {
    if let Some(raw) = selector.raw_selector.as_deref().filter(|r| !r.is_empty()) {
        return field_requirements(raw).unwrap_or_default();
    }
    let requirements = selector.requirements.iter().flatten();
    requirements
        .map(|r| match (r.operator.as_str(), r.values.as_deref()) {
            (op @ ("In" | "NotIn"), Some([value])) => Some(FieldRequirement {
                field: r.key.clone(),
                equals: op == "In",
                value: value.clone(),
            }),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}

/// A review's label selector likewise (upstream's `labelSelectorAsSelector`): its
/// `rawSelector` parsed, or those of its `requirements` that are valid, since
/// leaving a requirement out only broadens the check.
fn review_label_selector(selector: &LabelSelectorAttributes) -> Vec<LabelRequirement> {
    if let Some(raw) = selector.raw_selector.as_deref().filter(|r| !r.is_empty()) {
        return label_requirements(raw).unwrap_or_default();
    }
    let requirements = selector.requirements.iter().flatten();
    requirements
        .filter_map(|r| {
            let operator = match r.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                _ => return None,
            };
            LabelRequirement::new(&r.key, operator, r.values.clone().unwrap_or_default()).ok()
        })
        .collect()
}

fn access_status(verdict: &Verdict) -> Value {
    // Upstream's status: each decision with its authorizer's reason, if it gave one.
    let decision = &verdict.decision;
    let mut status = json!({"allowed": decision.is_allowed()});
    if matches!(decision, Decision::Deny(_)) {
        status["denied"] = json!(true);
    }
    if !decision.reason().is_empty() {
        status["reason"] = json!(decision.reason());
    }
    if let Some(error) = &verdict.error {
        status["evaluationError"] = json!(error);
    }
    status
}

/// A policy rule as a review's ResourceRule / NonResourceRule.
fn split_rules(rules: &[PolicyRule]) -> (Vec<Value>, Vec<Value>) {
    let mut resource = Vec::new();
    let mut non_resource = Vec::new();
    for r in rules {
        if r.resources.as_ref().is_some_and(|v| !v.is_empty()) {
            let mut v = json!({"verbs": r.verbs, "apiGroups": r.api_groups.clone().unwrap_or_default(),
                "resources": r.resources.clone().unwrap_or_default()});
            if let Some(n) = r.resource_names.as_ref().filter(|n| !n.is_empty()) {
                v["resourceNames"] = json!(n);
            }
            resource.push(v);
        }
        if let Some(urls) = r.non_resource_urls.as_ref().filter(|u| !u.is_empty()) {
            non_resource.push(json!({"verbs": r.verbs, "nonResourceURLs": urls}));
        }
    }
    (resource, non_resource)
}

/// What the chain's rule resolvers say `user` may do in `namespace` (upstream's union
/// of `RulesFor`): the rules, whether they are incomplete, and the resolvers' errors.
struct ResolvedRules {
    rules: Vec<PolicyRule>,
    incomplete: bool,
    errors: Vec<String>,
}

fn rules_for(state: &State, user: &UserInfo, namespace: &str) -> ResolvedRules {
    let everything = || {
        vec![
            PolicyRule {
                verbs: vec!["*".into()],
                api_groups: Some(vec!["*".into()]),
                resources: Some(vec!["*".into()]),
                ..PolicyRule::default()
            },
            PolicyRule {
                verbs: vec!["*".into()],
                non_resource_urls: Some(vec!["*".into()]),
                ..PolicyRule::default()
            },
        ]
    };
    // `system:masters`' authorizer resolves no rules upstream: what its members see is
    // what RBAC binds them to (cluster-admin), once.
    let mut resolved = ResolvedRules {
        rules: Vec::new(),
        incomplete: false,
        errors: Vec::new(),
    };
    for mode in state.authorizer.modes() {
        match mode {
            AuthorizationMode::AlwaysAllow => resolved.rules.extend(everything()),
            AuthorizationMode::AlwaysDeny => {}
            // A node's permissions depend on its pods; upstream does not list them.
            AuthorizationMode::Node if node_identity(user).is_some() => {
                resolved.incomplete = true;
                resolved
                    .errors
                    .push("node authorizer does not support user rule resolution".into());
            }
            AuthorizationMode::Node => {}
            AuthorizationMode::Rbac => {
                let (rules, errors) = state.security.snapshot().rules_for(user, namespace);
                resolved.rules.extend(rules);
                resolved
                    .errors
                    .extend(errors.iter().map(UnresolvedRole::lister_message));
            }
            // Its rules are the remote service's.
            AuthorizationMode::Webhook => {
                resolved.incomplete = true;
                resolved
                    .errors
                    .push("webhook authorizer does not support user rule resolution".into());
            }
        }
    }
    resolved
}

/// A review whose fields have the wrong types is a 400, not read as left out (a
/// SubjectAccessReview's `groups` as a string would be no groups).
fn check_decodes(kind: &str, obj: &Value) -> Result<(), ApiError> {
    use k8s_openapi::api::{authentication::v1 as authn, authorization::v1 as authz};
    fn decodes<T: serde::de::DeserializeOwned>(kind: &str, obj: &Value) -> Result<(), ApiError> {
        ApiError::check_decodes_as::<T>(obj, kind, "v1")
    }
    match kind {
        "SelfSubjectAccessReview" => decodes::<authz::SelfSubjectAccessReview>(kind, obj),
        "SubjectAccessReview" => decodes::<authz::SubjectAccessReview>(kind, obj),
        "LocalSubjectAccessReview" => decodes::<authz::LocalSubjectAccessReview>(kind, obj),
        "SelfSubjectRulesReview" => decodes::<authz::SelfSubjectRulesReview>(kind, obj),
        "SelfSubjectReview" => decodes::<authn::SelfSubjectReview>(kind, obj),
        "TokenReview" => decodes::<authn::TokenReview>(kind, obj),
        _ => Ok(()),
    }
}

/// Answers a review; `user` is the (possibly impersonated) requester.
pub(crate) async fn answer(
    state: &State,
    kind: &str,
    group: &str,
    url_namespace: Option<&str>,
    user: &UserInfo,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let mut obj = crate::handler::decode_body(body, ct, kind)?;
    if !obj.is_object() {
        return Err(ApiError::bad_request("the request body is not an object"));
    }
    obj["apiVersion"] = json!(format!("{group}/v1"));
    obj["kind"] = json!(kind);
    check_decodes(kind, &obj)?;
    let spec = obj["spec"].clone();
    let status = match kind {
        "SelfSubjectAccessReview" | "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            // The review decoded in `check_decodes`; a self review's spec is a part of
            // this one's.
            let spec: SubjectAccessReviewSpec =
                serde_json::from_value(spec).map_err(|e| ApiError::undecodable(kind, "v1", e))?;
            if let Some(ns) = url_namespace
                && obj["metadata"]["namespace"]
                    .as_str()
                    .is_some_and(|given| !given.is_empty() && given != ns)
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            validate_access_review(kind, &spec, url_namespace)?;
            let subject = if kind == "SelfSubjectAccessReview" {
                user.clone()
            } else {
                UserInfo {
                    name: spec.user.clone().unwrap_or_default(),
                    uid: spec.uid.clone().unwrap_or_default(),
                    groups: spec.groups.clone().unwrap_or_default(),
                    extra: spec.extra.clone().unwrap_or_default().into_iter().collect(),
                }
            };
            let attrs = spec_attributes(&spec, subject);
            access_status(&state.authorizer.verdict(&attrs).await)
        }
        "SelfSubjectRulesReview" => {
            let ns = spec["namespace"].as_str().unwrap_or("");
            let resolved = rules_for(state, user, ns);
            let (resource, non_resource) = split_rules(&resolved.rules);
            let mut status = json!({"resourceRules": resource, "nonResourceRules": non_resource,
                "incomplete": resolved.incomplete});
            if !resolved.errors.is_empty() {
                status["evaluationError"] = json!(aggregate_errors(&resolved.errors));
            }
            status
        }
        "SelfSubjectReview" => json!({"userInfo": user_json(user)}),
        "TokenReview" => {
            let token = spec["token"].as_str().unwrap_or("");
            let mut h = HeaderMap::new();
            let value = format!("Bearer {token}");
            let user = match http::HeaderValue::from_str(&value) {
                Ok(v) => {
                    h.insert(http::header::AUTHORIZATION, v);
                    state
                        .authenticate(&AuthRequest {
                            headers: &h,
                            peer_certificates: &[],
                            path: "",
                        })
                        .await
                        .ok()
                        .flatten()
                }
                Err(_) => None,
            }
            .filter(|u| u.name != ANONYMOUS);
            match user {
                Some(u) => json!({"authenticated": true, "user": user_json(&u),
                    "audiences": spec["audiences"].as_array().cloned().unwrap_or_default()}),
                None => {
                    json!({"authenticated": false, "user": {}, "error": "invalid bearer token"})
                }
            }
        }
        _ => return Err(ApiError::internal(format!("no review kind {kind}"))),
    };
    obj["status"] = status;
    if obj["metadata"].is_null() {
        obj["metadata"] = json!({});
    }
    Ok(obj)
}

/// The `impersonate` check for one impersonated attribute.
fn impersonate_attrs(
    requester: &UserInfo,
    resource: &str,
    group: &str,
    namespace: &str,
    name: &str,
) -> Attributes {
    Attributes {
        user: requester.clone(),
        verb: "impersonate".into(),
        namespace: namespace.into(),
        api_group: group.into(),
        resource: resource.into(),
        name: name.into(),
        resource_request: true,
        ..Attributes::default()
    }
}

/// Upstream `WithImpersonation`: `Ok(None)` without impersonation headers; the
/// impersonated user when every part is allowed; 403 for the first part that is not,
/// 400 for impersonation headers without `Impersonate-User`.
pub(crate) async fn impersonate(
    authorizer: &Authorization,
    headers: &HeaderMap,
    requester: &UserInfo,
) -> Result<Option<UserInfo>, ApiError> {
    // Nearly every request has no impersonation header: one pass over the names.
    if !headers
        .keys()
        .any(|name| name.as_str().starts_with("impersonate-"))
    {
        return Ok(None);
    }
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    };
    let user = values("impersonate-user").into_iter().next();
    let groups = values("impersonate-group");
    let uid = values("impersonate-uid").into_iter().next();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-")
            && let Ok(v) = value.to_str()
        {
            let key = percent_decode(key);
            extra.entry(key).or_default().push(v.to_string());
        }
    }
    let Some(name) = user else {
        if !groups.is_empty() || uid.is_some() || !extra.is_empty() {
            return Err(ApiError::bad_request(
                "requested impersonation without impersonating a user",
            ));
        }
        return Ok(None);
    };
    // Every impersonated attribute needs its own permission, checked in this order.
    let mut checks = Vec::new();
    let mut groups_out = groups.clone();
    if let Some(rest) = name.strip_prefix(SERVICE_ACCOUNT_USER_PREFIX)
        && let Some((ns, sa)) = rest.split_once(':')
    {
        checks.push(impersonate_attrs(requester, "serviceaccounts", "", ns, sa));
        if groups.is_empty() {
            groups_out = vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
    } else {
        checks.push(impersonate_attrs(requester, "users", "", "", &name));
    }
    for g in &groups {
        checks.push(impersonate_attrs(requester, "groups", "", "", g));
    }
    if let Some(uid) = &uid {
        checks.push(impersonate_attrs(requester, "uids", AUTHN_GROUP, "", uid));
    }
    for (k, vs) in &extra {
        for v in vs {
            checks.push(impersonate_attrs(
                requester,
                &format!("userextras/{k}"),
                AUTHN_GROUP,
                "",
                v,
            ));
        }
    }
    for attrs in checks {
        let decision = authorizer.decide(&attrs).await;
        if !decision.is_allowed() {
            return Err(crate::security::forbidden(&attrs, &decision));
        }
    }
    if name == ANONYMOUS {
        if !groups_out.iter().any(|g| g == ALL_UNAUTHENTICATED) {
            groups_out.push(ALL_UNAUTHENTICATED.into());
        }
    } else if !groups_out.iter().any(|g| g == ALL_AUTHENTICATED) {
        groups_out.push(ALL_AUTHENTICATED.into());
    }
    Ok(Some(UserInfo {
        name,
        uid: uid.unwrap_or_default(),
        groups: groups_out,
        extra,
    }))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(hex), 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_auth::PrivilegedGroupsAuthorizer;
    use ferrokube_auth::user::SYSTEM_PRIVILEGED_GROUP;

    #[tokio::test]
    async fn impersonation_needs_the_verb() {
        let mut h = HeaderMap::new();
        // The chain of no mode: only system:masters' privilege.
        let masters = Authorization::new(
            ferrokube_auth::UnionAuthorizer::default()
                .push(PrivilegedGroupsAuthorizer::system_masters()),
            Vec::new(),
            Vec::new(),
        );
        let admin = UserInfo::new("admin", [SYSTEM_PRIVILEGED_GROUP]);
        assert_eq!(impersonate(&masters, &h, &admin).await.unwrap(), None);
        h.insert(
            "impersonate-user",
            "system:serviceaccount:default:default".parse().unwrap(),
        );
        let u = impersonate(&masters, &h, &admin).await.unwrap().unwrap();
        assert_eq!(u.name, "system:serviceaccount:default:default");
        assert_eq!(
            u.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                ALL_AUTHENTICATED
            ]
        );
        let alice = UserInfo::new("alice", [ALL_AUTHENTICATED]);
        let e = impersonate(&masters, &h, &alice).await.unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "serviceaccounts \"default\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"default\""
        );
        let mut only_group = HeaderMap::new();
        only_group.insert("impersonate-group", "g".parse().unwrap());
        assert_eq!(
            impersonate(&masters, &only_group, &admin)
                .await
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("bad%"), "bad%");
    }
}
