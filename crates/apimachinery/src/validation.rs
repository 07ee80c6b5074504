//! Validation helpers every resource validator needs, after upstream's
//! `k8s.io/apimachinery/pkg/util/validation`, `pkg/api/validation` (object meta,
//! generic name functions), `pkg/api/validation/path` and `pkg/apis/meta/v1/validation`.
//!
//! The `is_*` functions return upstream's message strings (empty = valid); the
//! `validate_*` functions return [`FieldError`]s with upstream's exact texts.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldSelectorRequirement, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};

use crate::errors::{FieldError, FieldPath};

pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Total size of all annotation keys and values (256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_B: usize = 256 * 1024;
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;
pub const MAX_SUBRESOURCE_NAME_LENGTH: usize = 256;

pub const FIELD_IMMUTABLE_ERROR_MSG: &str = "field is immutable";
pub const IS_NEGATIVE_ERROR_MSG: &str = "must be greater than or equal to 0";

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const C_IDENTIFIER_FMT: &str = "[A-Za-z_][A-Za-z0-9_]*";
const C_IDENTIFIER_ERR_MSG: &str = "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'";

/// `validation.MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `validation.EmptyError`.
pub fn empty_error() -> String {
    "must be non-empty".to_string()
}

/// `validation.InclusiveRangeError`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

/// `validation.RegexError`: the message, examples and the regex used.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push('\'');
        s.push_str(e);
        s.push_str("', ");
    }
    s.push_str("regex used for validation is '");
    s.push_str(fmt);
    s.push_str("')");
    s
}

// --- character-class matchers standing in for upstream's regular expressions ---

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && lower_alnum(b[0])
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b[0].is_ascii_lowercase() && matches_dns1123_label(s)
}

/// `validation.IsQualifiedName`: `[prefix/]name` as used by label and annotation keys.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.len() {
        1 => parts[0],
        2 => {
            let prefix = parts[0];
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            parts[1]
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `validation.IsValidLabelValue`.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `validation.IsDNS1123Label`.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `validation.IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `validation.IsDNS1035Label`.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1035_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    if !matches_dns1035_label(value) {
        errs.push(regex_error(
            DNS1035_LABEL_ERR_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `validation.IsCIdentifier`.
pub fn is_c_identifier(value: &str) -> Vec<String> {
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_');
    if ok {
        Vec::new()
    } else {
        vec![regex_error(
            C_IDENTIFIER_ERR_MSG,
            C_IDENTIFIER_FMT,
            &["my_name", "MY_NAME", "MyName"],
        )]
    }
}

/// `validation.IsValidPortNum`.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

/// `validation.IsValidPortName` (IANA_SVC_NAME).
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    let b = port.as_bytes();
    if b.is_empty()
        || !b
            .iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !b.iter().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if !b.is_empty() && (b[0] == b'-' || b[b.len() - 1] == b'-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

// --- object names ---

/// A name validation function: `(name, is_generate_name_prefix) -> messages`
/// (upstream's `ValidateNameFunc`).
pub type ValidateNameFn = fn(&str, bool) -> Vec<String>;

/// `path.IsValidPathSegmentName` / `IsValidPathSegmentPrefix` (`ValidatePathSegmentName`):
/// the minimal rule every object name obeys, as it is a URL path segment.
pub fn validate_path_segment_name(name: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for illegal in [".", ".."] {
            if name == illegal {
                return vec![format!("may not be '{illegal}'")];
            }
        }
    }
    let mut errs = Vec::new();
    for illegal in ["/", "%"] {
        if name.contains(illegal) {
            errs.push(format!("may not contain '{illegal}'"));
        }
    }
    errs
}

/// Upstream's `maskTrailingDash`: a generateName prefix may end in `-`.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        format!("{}a", &name[..name.len() - 2])
    } else {
        name.to_string()
    }
}

/// `NameIsDNSSubdomain`: most resources' name rule.
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        is_dns1123_subdomain(&mask_trailing_dash(name))
    } else {
        is_dns1123_subdomain(name)
    }
}

/// `NameIsDNSLabel`: namespaces and other label-like names.
pub fn name_is_dns_label(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        is_dns1123_label(&mask_trailing_dash(name))
    } else {
        is_dns1123_label(name)
    }
}

/// `NameIsDNS1035Label`: services and other names that become DNS labels.
pub fn name_is_dns1035_label(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        is_dns1035_label(&mask_trailing_dash(name))
    } else {
        is_dns1035_label(name)
    }
}

/// `ValidateNamespaceName`.
pub fn validate_namespace_name(name: &str, prefix: bool) -> Vec<String> {
    name_is_dns_label(name, prefix)
}

// --- field-level validators ---

/// `ValidateNonnegativeField`.
pub fn validate_nonnegative_field(value: i64, path: &FieldPath) -> Vec<FieldError> {
    if value < 0 {
        vec![FieldError::invalid(path, value, IS_NEGATIVE_ERROR_MSG)]
    } else {
        Vec::new()
    }
}

/// `ValidateLabelName`.
pub fn validate_label_name(name: &str, path: &FieldPath) -> Vec<FieldError> {
    is_qualified_name(name)
        .into_iter()
        .map(|m| FieldError::invalid(path, name, m))
        .collect()
}

/// `metav1validation.ValidateLabelSelectorRequirement` (label values always checked);
/// `allow_unknown_operator` is upstream's `AllowUnknownOperatorInRequirement`.
pub fn validate_label_selector_requirement(
    requirement: &LabelSelectorRequirement,
    allow_unknown_operator: bool,
    path: &FieldPath,
) -> Vec<FieldError> {
    let values = requirement.values.as_deref().unwrap_or(&[]);
    let mut errs = selector_operator_errors(
        &requirement.operator,
        values.is_empty(),
        allow_unknown_operator,
        path,
    );
    errs.extend(validate_label_name(&requirement.key, &path.child("key")));
    for (i, value) in values.iter().enumerate() {
        let value_path = path.child("values").index(i);
        errs.extend(
            is_valid_label_value(value)
                .into_iter()
                .map(|m| FieldError::invalid(&value_path, value.as_str(), m)),
        );
    }
    errs
}

/// `metav1validation.ValidateFieldSelectorRequirement`.
pub fn validate_field_selector_requirement(
    requirement: &FieldSelectorRequirement,
    allow_unknown_operator: bool,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if requirement.key.is_empty() {
        errs.push(FieldError::required(
            &path.child("key"),
            "must be specified",
        ));
    }
    let no_values = requirement.values.as_ref().is_none_or(Vec::is_empty);
    errs.extend(selector_operator_errors(
        &requirement.operator,
        no_values,
        allow_unknown_operator,
        path,
    ));
    errs
}

/// The operator and value-count checks label and field selector requirements share.
fn selector_operator_errors(
    operator: &str,
    no_values: bool,
    allow_unknown_operator: bool,
    path: &FieldPath,
) -> Vec<FieldError> {
    match operator {
        "In" | "NotIn" if no_values => vec![FieldError::required(
            &path.child("values"),
            "must be specified when `operator` is 'In' or 'NotIn'",
        )],
        "Exists" | "DoesNotExist" if !no_values => vec![FieldError::forbidden(
            &path.child("values"),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )],
        "In" | "NotIn" | "Exists" | "DoesNotExist" => Vec::new(),
        _ if allow_unknown_operator => Vec::new(),
        op => vec![FieldError::invalid(
            &path.child("operator"),
            op,
            "not a valid selector operator",
        )],
    }
}

/// `v1validation.ValidateLabels`.
pub fn validate_labels(labels: &BTreeMap<String, String>, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in labels {
        errs.extend(validate_label_name(k, path));
        errs.extend(
            is_valid_label_value(v)
                .into_iter()
                .map(|m| FieldError::invalid(path, v.as_str(), m)),
        );
    }
    errs
}

/// Total size of annotation keys and values, and whether it is over the limit.
pub fn annotations_size(annotations: &BTreeMap<String, String>) -> usize {
    annotations.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// `ValidateAnnotations`: keys are qualified names (checked lower-cased), total size
/// at most 256 KiB.
pub fn validate_annotations(
    annotations: &BTreeMap<String, String>,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for k in annotations.keys() {
        for m in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k.as_str(), m));
        }
    }
    if annotations_size(annotations) > TOTAL_ANNOTATION_SIZE_LIMIT_B {
        errs.push(FieldError::too_long(
            path,
            Some(TOTAL_ANNOTATION_SIZE_LIMIT_B),
        ));
    }
    errs
}

/// Splits an apiVersion into (group, version) like `schema.ParseGroupVersion`;
/// `None` when it has more than one `/`.
fn parse_group_version(api_version: &str) -> Option<(&str, &str)> {
    if api_version.is_empty() || api_version == "/" {
        return Some(("", ""));
    }
    match api_version.matches('/').count() {
        0 => Some(("", api_version)),
        1 => api_version.split_once('/'),
        _ => None,
    }
}

fn validate_owner_reference(r: &OwnerReference, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (group, version) = parse_group_version(&r.api_version).unwrap_or(("", ""));
    if version.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("apiVersion"),
            r.api_version.as_str(),
            "version must not be empty",
        ));
    }
    if r.kind.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("kind"),
            r.kind.as_str(),
            "kind must not be empty",
        ));
    }
    if r.name.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("name"),
            r.name.as_str(),
            "name must not be empty",
        ));
    }
    if r.uid.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("uid"),
            r.uid.as_str(),
            "uid must not be empty",
        ));
    }
    // BannedOwners: core/v1 Event.
    if group.is_empty() && version == "v1" && r.kind == "Event" {
        errs.push(FieldError::invalid(
            path,
            serde_json::to_value(r).unwrap_or_default(),
            format!(
                "{group}/{version}, Kind={} is disallowed from being an owner",
                r.kind
            ),
        ));
    }
    errs
}

/// `ValidateOwnerReferences`: each reference complete, at most one controller.
pub fn validate_owner_references(refs: &[OwnerReference], path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut first_controller: Option<String> = None;
    for r in refs {
        errs.extend(validate_owner_reference(r, path));
        if r.controller == Some(true) {
            let cur = format!("{}/{}", r.kind, r.name);
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    serde_json::to_value(refs).unwrap_or_default(),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {cur}"
                    ),
                )),
                None => first_controller = Some(cur),
            }
        }
    }
    errs
}

/// `ValidateFinalizerName`: a qualified name.
pub fn validate_finalizer_name(name: &str, path: &FieldPath) -> Vec<FieldError> {
    is_qualified_name(name)
        .into_iter()
        .map(|m| FieldError::invalid(path, name, m))
        .collect()
}

pub const FINALIZER_ORPHAN_DEPENDENTS: &str = "orphan";
pub const FINALIZER_DELETE_DEPENDENTS: &str = "foregroundDeletion";

/// `ValidateFinalizers`.
pub fn validate_finalizers(finalizers: &[String], path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for f in finalizers {
        errs.extend(validate_finalizer_name(f, path));
    }
    let orphan = finalizers.iter().any(|f| f == FINALIZER_ORPHAN_DEPENDENTS);
    let delete = finalizers.iter().any(|f| f == FINALIZER_DELETE_DEPENDENTS);
    if orphan && delete {
        errs.push(FieldError::invalid(
            path,
            serde_json::to_value(finalizers).unwrap_or_default(),
            format!("finalizer {FINALIZER_ORPHAN_DEPENDENTS} and {FINALIZER_DELETE_DEPENDENTS} cannot be both set"),
        ));
    }
    errs
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| crate::errors::go_quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// `ValidateNoNewFinalizers`: once deletion started, no finalizer may be added.
pub fn validate_no_new_finalizers(
    new: &[String],
    old: &[String],
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut extra: Vec<String> = new.iter().filter(|f| !old.contains(f)).cloned().collect();
    extra.sort();
    extra.dedup();
    if extra.is_empty() {
        return Vec::new();
    }
    vec![FieldError::forbidden(
        path,
        format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers {}",
            go_string_slice(&extra)
        ),
    )]
}

/// `ValidateFieldManager`.
pub fn validate_field_manager(manager: &str, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errs.push(FieldError::too_long(path, Some(FIELD_MANAGER_MAX_LENGTH)));
    }
    for (i, c) in manager.char_indices() {
        if c.is_control() {
            errs.push(FieldError::invalid(
                path,
                manager,
                format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    errs
}

/// `ValidateManagedFields`.
pub fn validate_managed_fields(
    entries: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let p = path.index(i);
        let op = e.operation.as_deref().unwrap_or("");
        if op != "Apply" && op != "Update" {
            errs.push(FieldError::invalid(
                &p.child("operation"),
                op,
                "must be `Apply` or `Update`",
            ));
        }
        if let Some(ft) = e.fields_type.as_deref()
            && !ft.is_empty()
            && ft != "FieldsV1"
        {
            errs.push(FieldError::invalid(
                &p.child("fieldsType"),
                ft,
                "must be `FieldsV1`",
            ));
        }
        errs.extend(validate_field_manager(
            e.manager.as_deref().unwrap_or(""),
            &p.child("manager"),
        ));
        if e.subresource.as_deref().unwrap_or("").len() > MAX_SUBRESOURCE_NAME_LENGTH {
            errs.push(FieldError::too_long(
                &p.child("subresource"),
                Some(MAX_SUBRESOURCE_NAME_LENGTH),
            ));
        }
    }
    errs
}

/// `ValidateObjectMeta`: name or generateName (checked with `name_fn`), namespace
/// required for namespaced kinds and forbidden for cluster-scoped ones, generation,
/// labels, annotations, owner references, finalizers and managed fields.
pub fn validate_object_meta(
    meta: &ObjectMeta,
    requires_namespace: bool,
    name_fn: ValidateNameFn,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let generate_name = meta.generate_name.as_deref().unwrap_or("");
    if !generate_name.is_empty() {
        for m in name_fn(generate_name, true) {
            errs.push(FieldError::invalid(
                &path.child("generateName"),
                generate_name,
                m,
            ));
        }
    }
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name or generateName is required",
        ));
    } else {
        for m in name_fn(name, false) {
            errs.push(FieldError::invalid(&path.child("name"), name, m));
        }
    }
    let namespace = meta.namespace.as_deref().unwrap_or("");
    if requires_namespace {
        if namespace.is_empty() {
            errs.push(FieldError::required(&path.child("namespace"), ""));
        } else {
            for m in validate_namespace_name(namespace, false) {
                errs.push(FieldError::invalid(&path.child("namespace"), namespace, m));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("namespace"),
            "not allowed on this type",
        ));
    }
    errs.extend(validate_common_meta(meta, path));
    errs.extend(validate_finalizers(
        meta.finalizers.as_deref().unwrap_or(&[]),
        &path.child("finalizers"),
    ));
    errs
}

fn validate_common_meta(meta: &ObjectMeta, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(validate_nonnegative_field(
        meta.generation.unwrap_or(0),
        &path.child("generation"),
    ));
    if let Some(l) = &meta.labels {
        errs.extend(validate_labels(l, &path.child("labels")));
    }
    if let Some(a) = &meta.annotations {
        errs.extend(validate_annotations(a, &path.child("annotations")));
    }
    errs.extend(validate_owner_references(
        meta.owner_references.as_deref().unwrap_or(&[]),
        &path.child("ownerReferences"),
    ));
    errs.into_iter()
        .chain(validate_managed_fields(
            meta.managed_fields.as_deref().unwrap_or(&[]),
            &path.child("managedFields"),
        ))
        .collect()
}

fn immutable<T: PartialEq + serde::Serialize>(
    new: &T,
    old: &T,
    path: &FieldPath,
) -> Option<FieldError> {
    (new != old).then(|| {
        FieldError::invalid(
            path,
            serde_json::to_value(new).unwrap_or_default(),
            FIELD_IMMUTABLE_ERROR_MSG,
        )
    })
}

/// `ValidateObjectMetaUpdate`: immutable identity fields, resourceVersion present,
/// generation not decremented, no new finalizers while deleting, plus the same
/// label/annotation/ownerReference/managedFields checks as on create.
pub fn validate_object_meta_update(
    new: &ObjectMeta,
    old: &ObjectMeta,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old.deletion_timestamp.is_some() {
        errs.extend(validate_no_new_finalizers(
            new.finalizers.as_deref().unwrap_or(&[]),
            old.finalizers.as_deref().unwrap_or(&[]),
            &path.child("finalizers"),
        ));
    }
    let rv = new.resource_version.as_deref().unwrap_or("");
    if rv.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("resourceVersion"),
            rv,
            "must be specified for an update",
        ));
    }
    let (ng, og) = (new.generation.unwrap_or(0), old.generation.unwrap_or(0));
    if ng < og {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            ng,
            "must not be decremented",
        ));
    }
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    errs.extend(immutable(&s(&new.name), &s(&old.name), &path.child("name")));
    errs.extend(immutable(
        &s(&new.namespace),
        &s(&old.namespace),
        &path.child("namespace"),
    ));
    errs.extend(immutable(&s(&new.uid), &s(&old.uid), &path.child("uid")));
    errs.extend(immutable(
        &new.creation_timestamp,
        &old.creation_timestamp,
        &path.child("creationTimestamp"),
    ));
    errs.extend(immutable(
        &new.deletion_timestamp,
        &old.deletion_timestamp,
        &path.child("deletionTimestamp"),
    ));
    errs.extend(immutable(
        &new.deletion_grace_period_seconds,
        &old.deletion_grace_period_seconds,
        &path.child("deletionGracePeriodSeconds"),
    ));
    let mut common = validate_common_meta(new, path);
    // Generation is checked above against the old value, not for sign.
    common.retain(|e| e.field != path.child("generation").as_str());
    errs.extend(common);
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for good in [
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "1234",
            "simple/simple",
            "now-with-dashes/simple",
            "now-with-dashes/now-with-dashes",
            "now.with.dots/simple",
            "now-with.dashes-and.dots/simple",
            "1-num.2-num/3-num",
            "1234/5678",
            "1.2.3.4/5678",
            "Uppercase_Is_OK_123",
            "example.com/Uppercase_Is_OK_123",
            "requests.storage-foo",
            &"a".repeat(63),
            &format!("{}/{}", "a".repeat(253), "b".repeat(63)),
        ] {
            assert!(
                is_qualified_name(good).is_empty(),
                "{good}: {:?}",
                is_qualified_name(good)
            );
        }
        for bad in [
            "nospecialchars%^=@",
            "cantendwithadash-",
            "-cantstartwithadash-",
            "only/one/slash",
            "Example.com/abc",
            "example_com/abc",
            "example.com/",
            "/simple",
            &"a".repeat(64),
            &format!("{}/b", "a".repeat(254)),
        ] {
            assert!(!is_qualified_name(bad).is_empty(), "{bad}");
        }
        assert_eq!(
            is_qualified_name("a/b/c"),
            vec![
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ]
        );
        assert_eq!(
            is_qualified_name("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(
            is_qualified_name("x/"),
            vec![
                "name part must be non-empty".to_string(),
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string()
            ]
        );
    }

    #[test]
    fn label_values() {
        for good in [
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "end-with-num-1",
            "1234",
            "",
            "A",
            &"a".repeat(63),
        ] {
            assert!(is_valid_label_value(good).is_empty(), "{good}");
        }
        for bad in [
            "nospecialchars%^=@",
            "Tama-nui-te-rā.is.Māori.sun",
            "\\backslashes\\are\\bad",
            "-starts-with-dash",
            "ends-with-dash-",
            ".starts.with.dot",
            &"a".repeat(64),
        ] {
            assert!(!is_valid_label_value(bad).is_empty(), "{bad}");
        }
        assert_eq!(
            is_valid_label_value(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn dns_names() {
        for good in [
            "a",
            "ab",
            "abc",
            "a1",
            "a-1",
            "a--1--2--b",
            "0",
            "01",
            "012",
            "1a",
            "1-a",
            &"a".repeat(63),
        ] {
            assert!(is_dns1123_label(good).is_empty(), "{good}");
        }
        for bad in [
            "",
            "A",
            "ABC",
            "aBc",
            "A1",
            "A-1",
            "1-A",
            "-",
            "a-",
            "-a",
            "1-",
            "_",
            "a_",
            "a.",
            "a.b",
            "a@b",
            &"a".repeat(64),
        ] {
            assert!(!is_dns1123_label(bad).is_empty(), "{bad}");
        }
        assert_eq!(
            is_dns1123_label("a.b"),
            vec!["must not contain dots".to_string()]
        );
        for good in [
            "a",
            "a.b.c.d.e",
            "aaa.bbb.ccc",
            "a1.b2",
            "11.22.33",
            "a--1.2--b",
            &"a".repeat(253),
        ] {
            assert!(is_dns1123_subdomain(good).is_empty(), "{good}");
        }
        for bad in [
            "",
            "A",
            "a.B",
            "-a",
            "a-",
            "a..b",
            "a.",
            ".a",
            "a_b",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad).is_empty(), "{bad}");
        }
        assert_eq!(
            is_dns1123_subdomain("Foo"),
            vec!["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string()]
        );
        for good in ["a", "ab", "a1", "a-1", "a--1--2--b", &"a".repeat(63)] {
            assert!(is_dns1035_label(good).is_empty(), "{good}");
        }
        for bad in [
            "0",
            "01",
            "1a",
            "1-a",
            "",
            "A",
            "a.b",
            "a-",
            &"a".repeat(64),
        ] {
            assert!(!is_dns1035_label(bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn generate_name_prefixes_may_end_in_dash() {
        assert!(name_is_dns_subdomain("foo-", true).is_empty());
        assert!(!name_is_dns_subdomain("foo-", false).is_empty());
        assert!(name_is_dns_label("foo-", true).is_empty());
        assert!(name_is_dns1035_label("foo-", true).is_empty());
        assert!(!name_is_dns1035_label("1foo-", true).is_empty());
    }

    #[test]
    fn path_segment_names() {
        let cases: [(&str, bool, Vec<&str>); 7] = [
            ("foo", false, vec![]),
            (".", false, vec!["may not be '.'"]),
            ("..", false, vec!["may not be '..'"]),
            (".", true, vec![]),
            ("a/b", false, vec!["may not contain '/'"]),
            (
                "a%b/",
                false,
                vec!["may not contain '/'", "may not contain '%'"],
            ),
            ("a%", true, vec!["may not contain '%'"]),
        ];
        for (name, prefix, want) in cases {
            assert_eq!(validate_path_segment_name(name, prefix), want, "{name}");
        }
    }

    #[test]
    fn misc_validators() {
        assert!(is_c_identifier("_a1").is_empty());
        assert!(!is_c_identifier("1a").is_empty());
        assert!(is_valid_port_num(80).is_empty());
        assert_eq!(
            is_valid_port_num(0),
            vec!["must be between 1 and 65535, inclusive".to_string()]
        );
        assert!(is_valid_port_name("http").is_empty());
        assert_eq!(
            is_valid_port_name("-a--"),
            vec![
                "must not contain consecutive hyphens".to_string(),
                "must not begin or end with a hyphen".to_string()
            ]
        );
        assert!(!is_valid_port_name("1234").is_empty());
    }

    fn meta(name: &str, ns: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: (!name.is_empty()).then(|| name.to_string()),
            namespace: ns.map(str::to_string),
            ..Default::default()
        }
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn object_meta_name_and_namespace() {
        let p = FieldPath::new("metadata");
        assert!(
            validate_object_meta(
                &meta("ok", Some("default")),
                true,
                name_is_dns_subdomain,
                &p
            )
            .is_empty()
        );
        assert_eq!(
            messages(&validate_object_meta(
                &meta("", Some("default")),
                true,
                name_is_dns_subdomain,
                &p
            )),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert_eq!(
            messages(&validate_object_meta(
                &meta("ok", None),
                true,
                name_is_dns_subdomain,
                &p
            )),
            vec!["metadata.namespace: Required value"]
        );
        assert_eq!(
            messages(&validate_object_meta(
                &meta("ok", Some("default")),
                false,
                name_is_dns_subdomain,
                &p
            )),
            vec!["metadata.namespace: Forbidden: not allowed on this type"]
        );
        let errs = validate_object_meta(
            &meta("Foo", Some("default")),
            true,
            name_is_dns_subdomain,
            &p,
        );
        assert_eq!(
            messages(&errs),
            vec![
                "metadata.name: Invalid value: \"Foo\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        let errs =
            validate_object_meta(&meta("ok", Some("Bad_NS")), true, name_is_dns_subdomain, &p);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.namespace");
        let mut gen_only = meta("", Some("ns"));
        gen_only.generate_name = Some("web-".into());
        // generateName alone is not enough at validation time: the registry fills
        // in the name before validating, as upstream does.
        assert_eq!(
            validate_object_meta(&gen_only, true, name_is_dns_subdomain, &p).len(),
            1
        );
        gen_only.generate_name = Some("Web-".into());
        assert_eq!(
            validate_object_meta(&gen_only, true, name_is_dns_subdomain, &p).len(),
            2
        );
    }

    #[test]
    fn object_meta_labels_annotations_owners_finalizers() {
        let p = FieldPath::new("metadata");
        let mut m = meta("ok", Some("ns"));
        m.generation = Some(-1);
        m.labels = Some(BTreeMap::from([
            ("bad key!".to_string(), "v".to_string()),
            ("k".to_string(), "-bad".to_string()),
        ]));
        m.annotations = Some(BTreeMap::from([(
            "a".to_string(),
            "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B),
        )]));
        m.owner_references = Some(vec![
            OwnerReference {
                api_version: "".into(),
                kind: "".into(),
                name: "".into(),
                uid: "".into(),
                ..Default::default()
            },
            OwnerReference {
                api_version: "v1".into(),
                kind: "Event".into(),
                name: "e".into(),
                uid: "u1".into(),
                ..Default::default()
            },
            OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "a".into(),
                uid: "u2".into(),
                controller: Some(true),
                ..Default::default()
            },
            OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "b".into(),
                uid: "u3".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        m.finalizers = Some(vec![
            "orphan".into(),
            "foregroundDeletion".into(),
            "bad/fin/alizer".into(),
        ]);
        let errs = validate_object_meta(&m, true, name_is_dns_subdomain, &p);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "metadata.generation",
                "metadata.labels",
                "metadata.labels",
                "metadata.annotations",
                "metadata.ownerReferences.apiVersion",
                "metadata.ownerReferences.kind",
                "metadata.ownerReferences.name",
                "metadata.ownerReferences.uid",
                "metadata.ownerReferences",
                "metadata.ownerReferences",
                "metadata.finalizers",
                "metadata.finalizers",
            ]
        );
        let msgs = messages(&errs);
        assert_eq!(
            msgs[0],
            "metadata.generation: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            msgs[3],
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
        assert!(
            msgs[8].ends_with("/v1, Kind=Event is disallowed from being an owner"),
            "{}",
            msgs[8]
        );
        assert!(msgs[9].ends_with("Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and ReplicaSet/b"));
        assert!(msgs[11].ends_with("finalizer orphan and foregroundDeletion cannot be both set"));
    }

    #[test]
    fn annotation_size_limit_is_inclusive() {
        let p = FieldPath::new("metadata").child("annotations");
        let at = BTreeMap::from([(
            "a".to_string(),
            "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B - 1),
        )]);
        assert!(validate_annotations(&at, &p).is_empty());
        let over = BTreeMap::from([("a".to_string(), "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B))]);
        assert_eq!(validate_annotations(&over, &p).len(), 1);
        // Keys are checked case-insensitively.
        let upper = BTreeMap::from([("Example.COM/Key".to_string(), String::new())]);
        assert!(validate_annotations(&upper, &p).is_empty());
    }

    #[test]
    fn object_meta_update() {
        let p = FieldPath::new("metadata");
        let mut old = meta("a", Some("ns"));
        old.uid = Some("u1".into());
        old.generation = Some(2);
        old.resource_version = Some("5".into());
        old.finalizers = Some(vec!["x/a".into()]);
        let mut new = old.clone();
        assert!(validate_object_meta_update(&new, &old, &p).is_empty());
        new.name = Some("b".into());
        new.uid = Some("u2".into());
        new.generation = Some(1);
        new.resource_version = None;
        assert_eq!(
            messages(&validate_object_meta_update(&new, &old, &p)),
            vec![
                "metadata.resourceVersion: Invalid value: \"\": must be specified for an update",
                "metadata.generation: Invalid value: 1: must not be decremented",
                "metadata.name: Invalid value: \"b\": field is immutable",
                "metadata.uid: Invalid value: \"u2\": field is immutable",
            ]
        );
        let mut deleting = old.clone();
        deleting.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        ));
        let mut new = deleting.clone();
        new.finalizers = Some(vec!["x/a".into(), "x/b".into()]);
        assert_eq!(
            messages(&validate_object_meta_update(&new, &deleting, &p)),
            vec![
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"x/b\"}"
            ]
        );
    }
}
