//! flowcontrol.apiserver.k8s.io/v1 FlowSchema and PriorityLevelConfiguration, after
//! upstream 1.33 `pkg/apis/flowcontrol/validation` (`ValidateFlowSchema[Update]`,
//! `ValidatePriorityLevelConfiguration[Update]` and their status rules) with the options
//! the 1.33 registry strategies pass (a zero `nominalConcurrencyShares` is allowed).
//!
//! The mandatory objects (`internalbootstrap.MandatoryFlowSchemas` and
//! `MandatoryPriorityLevelConfigurations`: the `exempt` and `catch-all` flow schemas
//! and priority levels) may not be changed: an object with one of those names must
//! carry upstream's fixed spec (for the `exempt` priority level, all but
//! `spec.exempt`). Updates are validated as creates, as upstream's `Validate*Update`
//! are; the status subresource goes through the same rules, its spec copied from the
//! old object.

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_apimachinery::validation::{name_is_dns_subdomain, validate_namespace_name};
use k8s_openapi::api::flowcontrol::v1 as flowcontrol;
use serde_json::{Value, json};

use crate::Validate;
use crate::util::*;

/// `flowcontrol.FlowSchemaMaxMatchingPrecedence`.
const MAX_MATCHING_PRECEDENCE: i32 = 10_000;
/// `priorityLevelConfigurationQueuingMaxQueues` (10^7).
const MAX_QUEUES: i32 = 10_000_000;
/// `shufflesharding.MaxHashBits`.
const MAX_HASH_BITS: i64 = 60;
/// `flowcontrol.NameAll`, and the wildcard of verbs, groups, resources, namespaces
/// and non-resource URLs.
const ALL: &str = "*";
/// `flowcontrol.FlowSchemaNameExempt` and `PriorityLevelConfigurationNameExempt`.
const EXEMPT: &str = "exempt";
/// `flowcontrol.FlowSchemaNameCatchAll` and `PriorityLevelConfigurationNameCatchAll`.
const CATCH_ALL: &str = "catch-all";

/// `supportedDistinguisherMethods.List()` (sorted).
const DISTINGUISHER_METHODS: &[&str] = &["ByNamespace", "ByUser"];
/// `supportedVerbs.List()` (sorted).
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
];
/// `supportedSubjectKinds.List()` (sorted).
const SUBJECT_KINDS: &[&str] = &["Group", "ServiceAccount", "User"];
/// `supportedPriorityLevelEnablement.List()` (sorted).
const PRIORITY_LEVEL_TYPES: &[&str] = &["Exempt", "Limited"];
/// `supportedLimitResponseType.List()` (sorted).
const LIMIT_RESPONSE_TYPES: &[&str] = &["Queue", "Reject"];
/// `nsErrIntro`.
const NS_ERR_INTRO: &str = "each member of this list must be '*' or a DNS-1123 label; ";

/// `shufflesharding.RequiredEntropyBits`: a quick, slightly conservative estimate of the
/// hash bits shuffle sharding `deck_size` queues into hands of `hand_size` consumes.
pub(crate) fn required_entropy_bits(deck_size: i32, hand_size: i32) -> i64 {
    (f64::from(deck_size).log2() * f64::from(hand_size)).ceil() as i64
}

fn has_wildcard(items: &[String]) -> bool {
    items.iter().any(|i| i == ALL)
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    s(&meta.name)
}

// --- FlowSchema ------------------------------------------------------------------

/// `ValidateFlowSchema` less the object metadata (the registry's part).
fn validate_flow_schema(fs: &flowcontrol::FlowSchema) -> Errs {
    let mut errs = Errs::new();
    let name = name_of(&fs.metadata);
    let spec = fs.spec.clone().unwrap_or_default();
    let sp = p("spec");
    validate_flow_schema_spec(name, &spec, &sp, &mut errs);
    if let Some(fixed) = mandatory_flow_schema_spec(name)
        && flow_schema_semantic(&json(&spec)) != flow_schema_semantic(&fixed)
    {
        errs.push(FieldError::invalid(
            &sp,
            json(&spec),
            format!("spec of '{name}' must equal the fixed value"),
        ));
    }
    if let Some(status) = &fs.status {
        validate_flow_schema_status(status, &p("status"), &mut errs);
    }
    errs
}

/// `ValidateFlowSchemaSpec`.
fn validate_flow_schema_spec(
    name: &str,
    spec: &flowcontrol::FlowSchemaSpec,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let mp = spec.matching_precedence.unwrap_or(0);
    let mpp = path.child("matchingPrecedence");
    if mp <= 0 {
        errs.push(FieldError::invalid(&mpp, mp, "must be a positive value"));
    }
    if mp > MAX_MATCHING_PRECEDENCE {
        errs.push(FieldError::invalid(
            &mpp,
            mp,
            format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
        ));
    }
    if mp == 1 && name != EXEMPT {
        errs.push(FieldError::invalid(
            &mpp,
            mp,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        ));
    }
    if let Some(dm) = &spec.distinguisher_method
        && !DISTINGUISHER_METHODS.contains(&dm.type_.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("distinguisherMethod").child("type"),
            json(dm),
            DISTINGUISHER_METHODS,
        ));
    }
    let pl = &spec.priority_level_configuration.name;
    let plp = path.child("priorityLevelConfiguration").child("name");
    if pl.is_empty() {
        errs.push(FieldError::required(
            &plp,
            "must reference a priority level",
        ));
    } else {
        msgs_invalid(name_is_dns_subdomain(pl, false), pl, &plp, errs);
    }
    for (i, rule) in spec.rules.iter().flatten().enumerate() {
        validate_policy_rules_with_subjects(rule, &path.child("rules").index(i), errs);
    }
}

/// `ValidateFlowSchemaPolicyRulesWithSubjects`.
fn validate_policy_rules_with_subjects(
    rule: &flowcontrol::PolicyRulesWithSubjects,
    path: &FieldPath,
    errs: &mut Errs,
) {
    if rule.subjects.is_empty() {
        errs.push(FieldError::required(
            &path.child("subjects"),
            "subjects must contain at least one value",
        ));
    }
    for (i, subject) in rule.subjects.iter().enumerate() {
        validate_subject(subject, &path.child("subjects").index(i), errs);
    }
    let resource_rules = rule.resource_rules.as_deref().unwrap_or_default();
    let non_resource_rules = rule.non_resource_rules.as_deref().unwrap_or_default();
    if resource_rules.is_empty() && non_resource_rules.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one of resourceRules and nonResourceRules has to be non-empty",
        ));
    }
    for (i, r) in resource_rules.iter().enumerate() {
        validate_resource_policy_rule(r, &path.child("resourceRules").index(i), errs);
    }
    for (i, r) in non_resource_rules.iter().enumerate() {
        validate_non_resource_policy_rule(r, &path.child("nonResourceRules").index(i), errs);
    }
}

const NOT_USER: &str = "user is forbidden when subject kind is not 'User'";
const NOT_GROUP: &str = "group is forbidden when subject kind is not 'Group'";
const NOT_SERVICE_ACCOUNT: &str =
    "serviceAccount is forbidden when subject kind is not 'ServiceAccount'";

/// `ValidateFlowSchemaSubject`: the member matching `kind`, and no other.
fn validate_subject(subject: &flowcontrol::Subject, path: &FieldPath, errs: &mut Errs) {
    let forbid = |present: bool, member: &str, msg: &str, errs: &mut Errs| {
        if present {
            errs.push(FieldError::forbidden(&path.child(member), msg));
        }
    };
    match subject.kind.as_str() {
        "ServiceAccount" => {
            validate_service_account_subject(
                subject.service_account.as_ref(),
                &path.child("serviceAccount"),
                errs,
            );
            forbid(subject.user.is_some(), "user", NOT_USER, errs);
            forbid(subject.group.is_some(), "group", NOT_GROUP, errs);
        }
        "User" => {
            named_subject(
                subject.user.as_ref().map(|u| u.name.as_str()),
                "user is required when subject kind is 'User'",
                &path.child("user"),
                errs,
            );
            forbid(
                subject.service_account.is_some(),
                "serviceAccount",
                NOT_SERVICE_ACCOUNT,
                errs,
            );
            forbid(subject.group.is_some(), "group", NOT_GROUP, errs);
        }
        "Group" => {
            named_subject(
                subject.group.as_ref().map(|g| g.name.as_str()),
                "group is required when subject kind is 'Group'",
                &path.child("group"),
                errs,
            );
            forbid(
                subject.service_account.is_some(),
                "serviceAccount",
                NOT_SERVICE_ACCOUNT,
                errs,
            );
            forbid(subject.user.is_some(), "user", NOT_USER, errs);
        }
        kind => errs.push(FieldError::not_supported(
            &path.child("kind"),
            kind,
            SUBJECT_KINDS,
        )),
    }
}

/// `ValidateUserSubject` / `ValidateGroupSubject`: present, with a name.
fn named_subject(name: Option<&str>, missing: &str, path: &FieldPath, errs: &mut Errs) {
    match name {
        None => errs.push(FieldError::required(path, missing)),
        Some("") => errs.push(FieldError::required(&path.child("name"), "")),
        Some(_) => {}
    }
}

/// `ValidateServiceAccountSubject`.
fn validate_service_account_subject(
    sa: Option<&flowcontrol::ServiceAccountSubject>,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let Some(sa) = sa else {
        errs.push(FieldError::required(
            path,
            "serviceAccount is required when subject kind is 'ServiceAccount'",
        ));
        return;
    };
    let np = path.child("name");
    if sa.name.is_empty() {
        errs.push(FieldError::required(&np, ""));
    } else if sa.name != ALL {
        // `ValidateServiceAccountName` is `NameIsDNSSubdomain`.
        msgs_invalid(name_is_dns_subdomain(&sa.name, false), &sa.name, &np, errs);
    }
    let nsp = path.child("namespace");
    if sa.namespace.is_empty() {
        errs.push(FieldError::required(
            &nsp,
            "must specify namespace for service account",
        ));
    } else {
        msgs_invalid(
            validate_namespace_name(&sa.namespace, false),
            &sa.namespace,
            &nsp,
            errs,
        );
    }
}

/// The verbs of a resource or non-resource rule: at least one, `*` alone, or only
/// supported verbs.
fn validate_verbs(verbs: &[String], path: &FieldPath, errs: &mut Errs) {
    if verbs.is_empty() {
        errs.push(FieldError::required(
            path,
            "verbs must contain at least one value",
        ));
    } else if has_wildcard(verbs) {
        if verbs.len() > 1 {
            errs.push(FieldError::invalid(
                path,
                json(&verbs),
                "if '*' is present, must not specify other verbs",
            ));
        }
    } else if !verbs.iter().all(|v| VERBS.contains(&v.as_str())) {
        errs.push(FieldError::not_supported(path, json(&verbs), VERBS));
    }
}

/// At least one item, and `*` only alone.
fn validate_wildcard_list(
    items: &[String],
    path: &FieldPath,
    required: &str,
    what: &str,
    errs: &mut Errs,
) {
    if items.is_empty() {
        errs.push(FieldError::required(path, required));
    } else if items.len() > 1 && has_wildcard(items) {
        errs.push(FieldError::invalid(
            path,
            json(&items),
            format!("if '*' is present, must not specify other {what}"),
        ));
    }
}

/// `ValidateFlowSchemaResourcePolicyRule`.
fn validate_resource_policy_rule(
    rule: &flowcontrol::ResourcePolicyRule,
    path: &FieldPath,
    errs: &mut Errs,
) {
    validate_verbs(&rule.verbs, &path.child("verbs"), errs);
    validate_wildcard_list(
        &rule.api_groups,
        &path.child("apiGroups"),
        "resource rules must supply at least one api group",
        "api groups",
        errs,
    );
    validate_wildcard_list(
        &rule.resources,
        &path.child("resources"),
        "resource rules must supply at least one resource",
        "resources",
        errs,
    );
    let namespaces = rule.namespaces.as_deref().unwrap_or_default();
    let nsp = path.child("namespaces");
    if namespaces.is_empty() && !rule.cluster_scope.unwrap_or(false) {
        errs.push(FieldError::required(
            &nsp,
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    } else if has_wildcard(namespaces) {
        if namespaces.len() > 1 {
            errs.push(FieldError::invalid(
                &nsp,
                json(&namespaces),
                "if '*' is present, must not specify other namespaces",
            ));
        }
    } else {
        for (i, ns) in namespaces.iter().enumerate() {
            for msg in validate_namespace_name(ns, false) {
                errs.push(FieldError::invalid(
                    &nsp.index(i),
                    ns.as_str(),
                    format!("{NS_ERR_INTRO}{msg}"),
                ));
            }
        }
    }
}

/// `ValidateFlowSchemaNonResourcePolicyRule`.
fn validate_non_resource_policy_rule(
    rule: &flowcontrol::NonResourcePolicyRule,
    path: &FieldPath,
    errs: &mut Errs,
) {
    validate_verbs(&rule.verbs, &path.child("verbs"), errs);
    let urls = &rule.non_resource_urls;
    let up = path.child("nonResourceURLs");
    if urls.is_empty() {
        errs.push(FieldError::required(
            &up,
            "nonResourceURLs must contain at least one value",
        ));
    } else if has_wildcard(urls) {
        if urls.len() > 1 {
            errs.push(FieldError::invalid(
                &up,
                json(urls),
                "if '*' is present, must not specify other non-resource URLs",
            ));
        }
    } else {
        for (i, url) in urls.iter().enumerate() {
            if let Some(msg) = non_resource_url_path_error(url) {
                errs.push(FieldError::invalid(&up.index(i), url.as_str(), msg));
            }
        }
    }
}

/// `ValidateNonResourceURLPath`: a leading slash, no white space, no double slash, and
/// a `*` only as a whole last segment (suffix matching).
fn non_resource_url_path_error(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("must not be empty");
    }
    if path == "/" {
        return None;
    }
    if !path.starts_with('/') {
        return Some("must start with slash");
    }
    if path.contains(' ') {
        return Some("must not contain white-space");
    }
    if path.contains("//") {
        return Some("must not contain double slash");
    }
    let wildcards = path.matches('*').count();
    if wildcards > 1 || (wildcards == 1 && !path.ends_with("/*")) {
        return Some("wildcard can only do suffix matching");
    }
    None
}

/// `ValidateFlowSchemaStatus`: condition types present and unique.
fn validate_flow_schema_status(
    status: &flowcontrol::FlowSchemaStatus,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let types = status.conditions.iter().flatten().map(|c| s(&c.type_));
    validate_condition_types(types, &path.child("conditions"), errs);
}

/// The conditions of either status: a type repeated is a duplicate, an empty one is
/// required.
fn validate_condition_types<'a>(
    types: impl Iterator<Item = &'a str>,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, ty) in types.enumerate() {
        let tp = path.index(i).child("type");
        if !seen.insert(ty) {
            errs.push(FieldError::duplicate(&tp, ty));
        }
        if ty.is_empty() {
            errs.push(FieldError::required(&tp, "must not be empty"));
        }
    }
}

/// The spec of a mandatory flow schema (`bootstrap.MandatoryFlowSchemaExempt` and
/// `MandatoryFlowSchemaCatchAll`), in its v1 wire form.
fn mandatory_flow_schema_spec(name: &str) -> Option<Value> {
    let (priority_level, precedence, groups): (&str, i32, &[&str]) = match name {
        EXEMPT => (EXEMPT, 1, &["system:masters"]),
        CATCH_ALL => (
            CATCH_ALL,
            MAX_MATCHING_PRECEDENCE,
            &["system:unauthenticated", "system:authenticated"],
        ),
        _ => return None,
    };
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "group": {"name": g}}))
        .collect();
    let mut spec = json!({
        "priorityLevelConfiguration": {"name": priority_level},
        "matchingPrecedence": precedence,
        "rules": [{
            "subjects": subjects,
            "resourceRules": [{"verbs": [ALL], "apiGroups": [ALL], "resources": [ALL],
                "namespaces": [ALL], "clusterScope": true}],
            "nonResourceRules": [{"verbs": [ALL], "nonResourceURLs": [ALL]}],
        }],
    });
    if name == CATCH_ALL {
        spec["distinguisherMethod"] = json!({"type": "ByUser"});
    }
    Some(spec)
}

/// A flow schema spec as `apiequality.Semantic.DeepEqual` compares the internal form:
/// absent and empty lists alike, an absent `clusterScope` false.
fn flow_schema_semantic(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, v)| {
                    !(v.is_null()
                        || v.as_array().is_some_and(Vec::is_empty)
                        || (k.as_str() == "clusterScope" && v.as_bool() == Some(false)))
                })
                .map(|(k, v)| (k.clone(), flow_schema_semantic(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(flow_schema_semantic).collect()),
        other => other.clone(),
    }
}

impl Validate for flowcontrol::FlowSchema {
    fn validate_create(&self) -> Vec<FieldError> {
        validate_flow_schema(self)
    }

    /// `ValidateFlowSchemaUpdate`: the create rules on the new object.
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        validate_flow_schema(self)
    }
}

// --- PriorityLevelConfiguration --------------------------------------------------

/// `ValidatePriorityLevelConfiguration` less the object metadata.
fn validate_priority_level(pl: &flowcontrol::PriorityLevelConfiguration) -> Errs {
    let mut errs = Errs::new();
    let name = name_of(&pl.metadata);
    let spec = pl.spec.clone().unwrap_or_default();
    let sp = p("spec");
    validate_priority_level_spec(&spec, name, &sp, &mut errs);
    validate_if_mandatory_priority_level(&spec, name, &sp, &mut errs);
    if let Some(status) = &pl.status {
        let types = status.conditions.iter().flatten().map(|c| s(&c.type_));
        validate_condition_types(types, &p("status").child("conditions"), &mut errs);
    }
    errs
}

/// `ValidateIfMandatoryPriorityLevelConfigurationObject`: `exempt` may change only its
/// `spec.exempt`; `catch-all` not at all.
fn validate_if_mandatory_priority_level(
    spec: &flowcontrol::PriorityLevelConfigurationSpec,
    name: &str,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let (fixed, detail) = match name {
        // `Type: Exempt` and nothing else but the free `exempt` member.
        EXEMPT => (
            spec.type_ == "Exempt" && spec.limited.is_none(),
            format!("spec of '{name}' except the 'spec.exempt' field must equal the fixed value"),
        ),
        // `Type: Limited`, `nominalConcurrencyShares: 5`, `lendablePercent: 0`,
        // `limitResponse: {type: Reject}`.
        CATCH_ALL => (
            spec.type_ == "Limited"
                && spec.exempt.is_none()
                && spec.limited.as_ref().is_some_and(|l| {
                    l.nominal_concurrency_shares.unwrap_or(0) == 5
                        && l.lendable_percent == Some(0)
                        && l.borrowing_limit_percent.is_none()
                        && l.limit_response
                            .as_ref()
                            .is_some_and(|r| r.type_ == "Reject" && r.queuing.is_none())
                }),
            format!("spec of '{name}' must equal the fixed value"),
        ),
        _ => return,
    };
    if !fixed {
        errs.push(FieldError::invalid(path, json(spec), detail));
    }
}

/// `ValidatePriorityLevelConfigurationSpec`.
fn validate_priority_level_spec(
    spec: &flowcontrol::PriorityLevelConfigurationSpec,
    name: &str,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let ty = spec.type_.as_str();
    if (name == EXEMPT) != (ty == "Exempt") {
        errs.push(FieldError::invalid(
            &path.child("type"),
            ty,
            "type must be 'Exempt' if and only if name is 'exempt'",
        ));
    }
    match ty {
        "Exempt" => {
            if spec.limited.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("limited"),
                    "must be nil if the type is not Limited",
                ));
            }
            if let Some(exempt) = &spec.exempt {
                validate_exempt(exempt, &path.child("exempt"), errs);
            }
        }
        "Limited" => {
            if spec.exempt.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("exempt"),
                    "must be nil if the type is Limited",
                ));
            }
            match &spec.limited {
                None => errs.push(FieldError::required(
                    &path.child("limited"),
                    "must not be empty when type is Limited",
                )),
                Some(limited) => validate_limited(limited, &path.child("limited"), errs),
            }
        }
        _ => errs.push(FieldError::not_supported(
            &path.child("type"),
            ty,
            PRIORITY_LEVEL_TYPES,
        )),
    }
}

/// `lendablePercent`, when set, is a percentage.
fn validate_lendable_percent(v: Option<i32>, path: &FieldPath, errs: &mut Errs) {
    if let Some(v) = v
        && !(0..=100).contains(&v)
    {
        errs.push(FieldError::invalid(
            &path.child("lendablePercent"),
            v,
            "must be between 0 and 100, inclusive",
        ));
    }
}

/// `ValidateLimitedPriorityLevelConfiguration` (zero shares allowed, as 1.33's
/// strategies ask).
fn validate_limited(
    limited: &flowcontrol::LimitedPriorityLevelConfiguration,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let shares = limited.nominal_concurrency_shares.unwrap_or(0);
    if shares < 0 {
        errs.push(FieldError::invalid(
            &path.child("nominalConcurrencyShares"),
            shares,
            "must be a non-negative integer",
        ));
    }
    let response = limited.limit_response.clone().unwrap_or_default();
    validate_limit_response(&response, &path.child("limitResponse"), errs);
    validate_lendable_percent(limited.lendable_percent, path, errs);
    if let Some(b) = limited.borrowing_limit_percent
        && b < 0
    {
        errs.push(FieldError::invalid(
            &path.child("borrowingLimitPercent"),
            b,
            "if specified, must be a non-negative integer",
        ));
    }
}

/// `ValidateExemptPriorityLevelConfiguration`.
fn validate_exempt(
    exempt: &flowcontrol::ExemptPriorityLevelConfiguration,
    path: &FieldPath,
    errs: &mut Errs,
) {
    if let Some(n) = exempt.nominal_concurrency_shares
        && n < 0
    {
        errs.push(FieldError::invalid(
            &path.child("nominalConcurrencyShares"),
            n,
            "must be a non-negative integer",
        ));
    }
    validate_lendable_percent(exempt.lendable_percent, path, errs);
}

/// `ValidateLimitResponse`.
fn validate_limit_response(
    response: &flowcontrol::LimitResponse,
    path: &FieldPath,
    errs: &mut Errs,
) {
    match response.type_.as_str() {
        "Reject" => {
            if response.queuing.is_some() {
                errs.push(FieldError::forbidden(
                    &path.child("queuing"),
                    "must be nil if limited.limitResponse.type is not Limited",
                ));
            }
        }
        "Queue" => match &response.queuing {
            None => errs.push(FieldError::required(
                &path.child("queuing"),
                "must not be empty if limited.limitResponse.type is Limited",
            )),
            Some(q) => validate_queuing(q, &path.child("queuing"), errs),
        },
        ty => errs.push(FieldError::not_supported(
            &path.child("type"),
            ty,
            LIMIT_RESPONSE_TYPES,
        )),
    }
}

/// `ValidatePriorityLevelQueuingConfiguration`: positive fields, at most 10^7 queues,
/// a hand no larger than the deck and within shuffle sharding's 60 hash bits.
fn validate_queuing(q: &flowcontrol::QueuingConfiguration, path: &FieldPath, errs: &mut Errs) {
    let queue_length_limit = q.queue_length_limit.unwrap_or(0);
    if queue_length_limit <= 0 {
        errs.push(FieldError::invalid(
            &path.child("queueLengthLimit"),
            queue_length_limit,
            "must be positive",
        ));
    }
    let queues = q.queues.unwrap_or(0);
    let qp = path.child("queues");
    if queues <= 0 {
        errs.push(FieldError::invalid(&qp, queues, "must be positive"));
    } else if queues > MAX_QUEUES {
        errs.push(FieldError::invalid(
            &qp,
            queues,
            format!("must not be greater than {MAX_QUEUES}"),
        ));
    }
    let hand_size = q.hand_size.unwrap_or(0);
    let hp = path.child("handSize");
    if hand_size <= 0 {
        errs.push(FieldError::invalid(&hp, hand_size, "must be positive"));
    } else if hand_size > queues {
        errs.push(FieldError::invalid(
            &hp,
            hand_size,
            format!("should not be greater than queues ({queues})"),
        ));
    } else if required_entropy_bits(queues, hand_size) > MAX_HASH_BITS {
        errs.push(FieldError::invalid(
            &hp,
            hand_size,
            format!(
                "required entropy bits of deckSize {queues} and handSize {hand_size} should not be greater than {MAX_HASH_BITS}"
            ),
        ));
    }
}

impl Validate for flowcontrol::PriorityLevelConfiguration {
    fn validate_create(&self) -> Vec<FieldError> {
        validate_priority_level(self)
    }

    /// `ValidatePriorityLevelConfigurationUpdate`: the create rules on the new object.
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        validate_priority_level(self)
    }
}
