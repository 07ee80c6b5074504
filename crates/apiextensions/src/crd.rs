//! Validation and defaulting of a CustomResourceDefinition (upstream
//! `k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation` and the v1
//! `SetDefaults_*`).
//!
//! Upstream validates the *internal* form of the object, into which the v1 object is
//! converted first: when every version carries the same `schema`, `subresources` or
//! `additionalPrinterColumns`, the conversion moves it to the top level, so errors about
//! it are reported under `spec.validation`, `spec.subresources` and
//! `spec.additionalPrinterColumns` rather than `spec.versions[i]...`. The conversion's
//! webhook settings become `spec.conversion.webhookClientConfig` and
//! `spec.conversion.conversionReviewVersions`. The paths here follow the same rules so
//! that messages read as upstream's.
//!
//! `x-kubernetes-validations` rules are compiled against their node: a syntax error, a
//! variable other than `self` and `oldSelf`, a field the node's schema does not have,
//! an operator none of whose overloads takes its operands' known types, a rule known
//! not to be a bool and a `messageExpression` known not to be a string are refused,
//! as upstream's compile against the declared type refuses them. What needs a full
//! CEL type checker (function arguments, the types of function and macro results) and
//! the cost estimate are left to when an object is validated.
//!
//! Not covered: validation of `default` values against their
//! schema, structural-schema completeness of `anyOf`/`allOf`/`oneOf`/`not`, regex
//! syntax of `pattern`, the conversion webhook's `caBundle` PEM check, and resolving
//! `selectableFields` paths in the schema.

use std::collections::{BTreeMap, BTreeSet};

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_apimachinery::validation::{
    FIELD_IMMUTABLE_ERROR_MSG, is_dns1035_label, is_dns1123_subdomain, is_valid_port_num,
    name_is_dns_subdomain, validate_object_meta, validate_object_meta_update,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceConversion, CustomResourceDefinition,
    CustomResourceDefinitionNames, CustomResourceDefinitionSpec, CustomResourceDefinitionStatus,
    CustomResourceDefinitionVersion, CustomResourceSubresources, CustomResourceValidation,
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, SelectableField,
    ValidationRule,
};
use serde_json::json;

/// Upstream's `printerColumnDatatypes` (sorted, as `sets.List()` prints them).
const PRINTER_COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
/// Upstream's `customResourceColumnDefinitionFormats` (sorted).
const PRINTER_COLUMN_FORMATS: &[&str] = &[
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];
/// Upstream's `openapiV3Types` (sorted).
const OPENAPI_V3_TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];
/// Upstream's `supportedValidationReason` (sorted).
const VALIDATION_REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];
/// The ConversionReview versions the server understands.
const CONVERSION_REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
/// Upstream's `MaxSelectableFields`.
const MAX_SELECTABLE_FIELDS: usize = 8;
/// Upstream's `allowedFieldsAtRootSchema`, printed with Go's `%v`.
const ALLOWED_AT_ROOT: &str = "[Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations]";
/// The annotation protected groups (`*.k8s.io`, `*.kubernetes.io`) must carry.
const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

// ---------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------

/// Upstream's v1 defaulting (`SetDefaults_CustomResourceDefinition` and friends):
/// `names.singular` = lowercased kind and `names.listKind` = kind + `List` when empty,
/// `spec.conversion` = `{strategy: None}` when absent, a webhook service's port 443,
/// and — only when `status.storedVersions` is empty — the storage version as the
/// single stored version (upstream does this in `SetDefaults_CustomResourceDefinition`
/// too). Served/storage flags and printer columns are left as given (v1 has no
/// defaults for them).
pub fn default_crd(crd: &mut CustomResourceDefinition) {
    let spec = &mut crd.spec;
    if spec.names.singular.as_deref().unwrap_or("").is_empty() {
        spec.names.singular = Some(spec.names.kind.to_lowercase());
    }
    if spec.names.list_kind.as_deref().unwrap_or("").is_empty() && !spec.names.kind.is_empty() {
        spec.names.list_kind = Some(format!("{}List", spec.names.kind));
    }
    let conversion = spec
        .conversion
        .get_or_insert_with(|| CustomResourceConversion {
            strategy: "None".to_string(),
            webhook: None,
        });
    if let Some(service) = conversion
        .webhook
        .as_mut()
        .and_then(|w| w.client_config.as_mut())
        .and_then(|c| c.service.as_mut())
        && service.port.is_none()
    {
        service.port = Some(443);
    }
    let storage = spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone());
    let status = crd.status.get_or_insert_with(Default::default);
    if status.stored_versions.as_ref().is_none_or(Vec::is_empty)
        && let Some(storage) = storage
    {
        status.stored_versions = Some(vec![storage]);
    }
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

/// Options upstream derives from the old object on update (`validationOptions`).
#[derive(Clone, Copy)]
struct Opts<'a> {
    require_recognized_conversion_review_version: bool,
    require_immutable_names: bool,
    require_open_api_schema: bool,
    require_valid_property_type: bool,
    require_structural_schema: bool,
    require_atomic_set_type: bool,
    require_map_list_keys_map_set_validation: bool,
    /// Compile `x-kubernetes-validations` rules and check their field references.
    check_cel_rules: bool,
    /// The old object's spec, on update.
    old: Option<&'a CustomResourceDefinitionSpec>,
    /// Set for a version whose schema the update leaves as it was: no rule of it is
    /// refused for its estimated cost. Upstream suppresses only the per-rule limit and
    /// checks the schema's total again, which changes nothing for a schema upstream
    /// stored (its total passed then); a schema stored here before costs were estimated
    /// may be past it, and must stay updatable (the CRD's finalizer is removed by an
    /// update).
    suppress_per_expression_cost: bool,
}

impl<'a> Opts<'a> {
    fn create() -> Opts<'static> {
        Opts {
            require_recognized_conversion_review_version: true,
            require_immutable_names: false,
            require_open_api_schema: true,
            require_valid_property_type: true,
            require_structural_schema: true,
            require_atomic_set_type: true,
            require_map_list_keys_map_set_validation: true,
            check_cel_rules: true,
            old: None,
            suppress_per_expression_cost: false,
        }
    }

    /// Upstream's `suppressExpressionCostForUnchangedSchema`.
    fn for_version(self, v: &CustomResourceDefinitionVersion) -> Opts<'a> {
        let unchanged = self.old.is_some_and(|old| {
            old.versions
                .iter()
                .any(|o| o.name == v.name && o.schema == v.schema)
        });
        Opts {
            suppress_per_expression_cost: unchanged,
            ..self
        }
    }

    /// Ratcheting: a rule the old object already broke is not enforced on update.
    fn update(old: &'a CustomResourceDefinition) -> Opts<'a> {
        let old_schemas = || {
            old.spec
                .versions
                .iter()
                .filter_map(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
        };
        Opts {
            require_recognized_conversion_review_version: old
                .spec
                .conversion
                .as_ref()
                .and_then(|c| c.webhook.as_ref())
                .is_none_or(|w| {
                    w.conversion_review_versions.is_empty()
                        || w.conversion_review_versions
                            .iter()
                            .any(|v| CONVERSION_REVIEW_VERSIONS.contains(&v.as_str()))
                }),
            require_immutable_names: is_established(old),
            require_open_api_schema: old.spec.versions.iter().all(|v| {
                v.schema
                    .as_ref()
                    .is_some_and(|s| s.open_api_v3_schema.is_some())
            }),
            require_valid_property_type: !old_schemas().any(|s| {
                schema_has(s, &|s| {
                    s.type_
                        .as_deref()
                        .is_some_and(|t| !t.is_empty() && !OPENAPI_V3_TYPES.contains(&t))
                })
            }),
            require_structural_schema: !old_schemas()
                .any(|s| !validate_structural(s, &FieldPath::new("")).is_empty()),
            require_atomic_set_type: !old_schemas()
                .any(|s| schema_has(s, &has_non_atomic_set_items)),
            require_map_list_keys_map_set_validation: !old_schemas().any(|s| {
                schema_has(s, &|s| {
                    !validate_map_list_keys_map_set(s, &FieldPath::new("")).is_empty()
                })
            }),
            // A CRD stored before its rules were compiled at write time may hold one
            // that does not compile; it must stay updatable.
            check_cel_rules: !old_schemas().any(|root| {
                let mut broken = false;
                visit_rule_nodes(root, true, &mut |node, is_root| {
                    let Some(rules) = node.x_kubernetes_validations.as_deref() else {
                        return;
                    };
                    let scope = RuleNode::new(node, is_root);
                    broken |= rules.iter().any(|r| {
                        let compiled = scope.compile(r);
                        compiled.rule_error.is_some() || compiled.message_expression_error.is_some()
                    });
                });
                broken
            }),
            old: Some(&old.spec),
            suppress_per_expression_cost: false,
        }
    }
}

/// Upstream's `ValidateCustomResourceDefinition`, on the object after
/// [`default_crd`].
pub fn validate_crd(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let mut errs = validate_crd_metadata(crd);
    errs.extend(validate_spec(
        &crd.spec,
        Opts::create(),
        &FieldPath::new("spec"),
    ));
    errs.extend(validate_crd_status(crd));
    errs.extend(validate_stored_versions(
        stored_versions(crd),
        &crd.spec.versions,
        &FieldPath::from_parts(&["status", "storedVersions"]),
    ));
    errs.extend(validate_api_approval(crd, None));
    errs.extend(validate_preserve_unknown_fields(crd, None));
    errs
}

/// Upstream's `ValidateCustomResourceDefinitionUpdate`: everything [`validate_crd`]
/// checks (with upstream's ratcheting of rules the old object already broke), plus
/// the immutable fields: `spec.group` and `spec.names.plural` always, `spec.scope` and
/// `spec.names.kind` once the old object is `Established`.
pub fn validate_crd_update(
    new: &CustomResourceDefinition,
    old: &CustomResourceDefinition,
) -> Vec<FieldError> {
    let opts = Opts::update(old);
    let spec_path = FieldPath::new("spec");
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &FieldPath::new("metadata"));
    errs.extend(validate_spec(&new.spec, opts, &spec_path));
    if opts.require_immutable_names {
        immutable(
            &new.spec.scope,
            &old.spec.scope,
            &spec_path.child("scope"),
            &mut errs,
        );
        immutable(
            &new.spec.names.kind,
            &old.spec.names.kind,
            &FieldPath::from_parts(&["spec", "names", "kind"]),
            &mut errs,
        );
    }
    immutable(
        &new.spec.group,
        &old.spec.group,
        &spec_path.child("group"),
        &mut errs,
    );
    immutable(
        &new.spec.names.plural,
        &old.spec.names.plural,
        &FieldPath::from_parts(&["spec", "names", "plural"]),
        &mut errs,
    );
    errs.extend(validate_crd_status(new));
    errs.extend(validate_stored_versions(
        stored_versions(new),
        &new.spec.versions,
        &FieldPath::from_parts(&["status", "storedVersions"]),
    ));
    errs.extend(validate_api_approval(new, Some(old)));
    errs.extend(validate_preserve_unknown_fields(new, Some(old)));
    errs
}

/// Upstream's `ValidateCustomResourceDefinitionStatus`: `status.acceptedNames` follow
/// the same format rules as `spec.names` (each may be empty).
pub fn validate_crd_status(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let empty = CustomResourceDefinitionNames::default();
    let accepted = crd
        .status
        .as_ref()
        .and_then(|s| s.accepted_names.as_ref())
        .unwrap_or(&empty);
    validate_names(
        accepted,
        &FieldPath::from_parts(&["status", "acceptedNames"]),
    )
}

/// Upstream's `ValidateUpdateCustomResourceDefinitionStatus` (an update of the
/// `status` subresource): metadata update rules and [`validate_crd_status`].
pub fn validate_crd_status_update(
    new: &CustomResourceDefinition,
    old: &CustomResourceDefinition,
) -> Vec<FieldError> {
    let mut errs =
        validate_object_meta_update(&new.metadata, &old.metadata, &FieldPath::new("metadata"));
    errs.extend(validate_crd_status(new));
    errs
}

/// Upstream's `ValidateCustomResourceDefinitionStoredVersions`: at least one stored
/// version, the storage version among them, and every stored version still in
/// `spec.versions`.
pub fn validate_stored_versions(
    stored: &[String],
    versions: &[CustomResourceDefinitionVersion],
    path: &FieldPath,
) -> Vec<FieldError> {
    if stored.is_empty() {
        return vec![FieldError::invalid(
            path,
            json!(stored),
            "must have at least one stored version",
        )];
    }
    let mut errs = Vec::new();
    // Name -> last index, as upstream's map keeps it.
    let mut remaining: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, v) in stored.iter().enumerate() {
        remaining.insert(v.as_str(), i);
    }
    for v in versions {
        let found = remaining.remove(v.name.as_str()).is_some();
        if v.storage && !found {
            errs.push(FieldError::invalid(
                path,
                json!(stored),
                format!("must have the storage version {}", v.name),
            ));
        }
    }
    let mut missing: Vec<(usize, &str)> = remaining.into_iter().map(|(v, i)| (i, v)).collect();
    missing.sort();
    for (i, v) in missing {
        errs.push(FieldError::invalid(
            &path.index(i),
            v,
            format!(
                "missing from spec.versions; {v} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {v} and removes {v} from status.storedVersions"
            ),
        ));
    }
    errs
}

/// Upstream's `ValidateCustomResourceDefinitionNames`: the format of each non-empty
/// name (required-ness is checked for `spec.names` only).
pub fn validate_names(names: &CustomResourceDefinitionNames, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let label = |value: &str, p: FieldPath, errs: &mut Vec<FieldError>| {
        let e = is_dns1035_label(value);
        if !e.is_empty() {
            errs.push(FieldError::invalid(&p, value, e.join(",")));
        }
    };
    let mixed_case = |value: &str, p: FieldPath, errs: &mut Vec<FieldError>| {
        let e = is_dns1035_label(&value.to_lowercase());
        if !value.is_empty() && !e.is_empty() {
            errs.push(FieldError::invalid(
                &p,
                value,
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    e.join(",")
                ),
            ));
        }
    };
    if !names.plural.is_empty() {
        label(&names.plural, path.child("plural"), &mut errs);
    }
    let singular = names.singular.as_deref().unwrap_or("");
    if !singular.is_empty() {
        label(singular, path.child("singular"), &mut errs);
    }
    let list_kind = names.list_kind.as_deref().unwrap_or("");
    mixed_case(&names.kind, path.child("kind"), &mut errs);
    mixed_case(list_kind, path.child("listKind"), &mut errs);
    for (i, short) in names.short_names.iter().flatten().enumerate() {
        label(short, path.child("shortNames").index(i), &mut errs);
    }
    if !names.kind.is_empty() && names.kind == list_kind {
        errs.push(FieldError::invalid(
            &path.child("listKind"),
            list_kind,
            "kind and listKind may not be the same",
        ));
    }
    for (i, category) in names.categories.iter().flatten().enumerate() {
        label(category, path.child("categories").index(i), &mut errs);
    }
    errs
}

/// Upstream's `ValidateCustomResourceColumnDefinition`.
pub fn validate_column(col: &CustomResourceColumnDefinition, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if col.name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    }
    let types = format!("must be one of {}", PRINTER_COLUMN_TYPES.join(","));
    if col.type_.is_empty() {
        errs.push(FieldError::required(&path.child("type"), types));
    } else if !PRINTER_COLUMN_TYPES.contains(&col.type_.as_str()) {
        errs.push(FieldError::invalid(
            &path.child("type"),
            col.type_.as_str(),
            types,
        ));
    }
    let format = col.format.as_deref().unwrap_or("");
    if !format.is_empty() && !PRINTER_COLUMN_FORMATS.contains(&format) {
        errs.push(FieldError::invalid(
            &path.child("format"),
            format,
            format!("must be one of {}", PRINTER_COLUMN_FORMATS.join(",")),
        ));
    }
    if col.json_path.is_empty() {
        errs.push(FieldError::required(&path.child("JSONPath"), ""));
    } else {
        errs.extend(validate_simple_json_path(
            &col.json_path,
            &path.child("JSONPath"),
        ));
    }
    errs
}

// ---------------------------------------------------------------------------
// Metadata, approval, preserveUnknownFields
// ---------------------------------------------------------------------------

fn validate_crd_metadata(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let path = FieldPath::new("metadata");
    let mut errs = validate_object_meta(&crd.metadata, false, name_is_dns_subdomain, &path);
    // Upstream's name function also requires `<plural>.<group>`.
    let required = format!("{}.{}", crd.spec.names.plural, crd.spec.group);
    let msg = r#"must be spec.names.plural+"."+spec.group"#;
    let mut extra = Vec::new();
    let generate_name = crd.metadata.generate_name.as_deref().unwrap_or("");
    if !generate_name.is_empty() && generate_name != required {
        extra.push(FieldError::invalid(
            &path.child("generateName"),
            generate_name,
            msg,
        ));
    }
    let name = crd.metadata.name.as_deref().unwrap_or("");
    if !name.is_empty() && name != required {
        extra.push(FieldError::invalid(&path.child("name"), name, msg));
    }
    // Keep them beside the other name errors, where upstream reports them.
    let at = errs
        .iter()
        .rposition(|e| e.field == "metadata.name" || e.field == "metadata.generateName")
        .map_or(0, |i| i + 1);
    errs.splice(at..at, extra);
    errs
}

fn is_protected_community_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Approval {
    Missing,
    Bypassed,
    Approved,
    Invalid,
}

fn approval_state(crd: &CustomResourceDefinition) -> (Approval, String) {
    let annotation = crd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(API_APPROVED_ANNOTATION))
        .map_or("", String::as_str);
    if annotation.is_empty() {
        return (
            Approval::Missing,
            format!(
                "protected groups must have approval annotation \"{API_APPROVED_ANNOTATION}\", see https://github.com/kubernetes/enhancements/pull/1111"
            ),
        );
    }
    if annotation.starts_with("unapproved") {
        return (
            Approval::Bypassed,
            format!("not approved: \"{annotation}\""),
        );
    }
    // url.ParseRequestURI with a scheme and a host.
    let approved = annotation.split_once("://").is_some_and(|(scheme, rest)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && !rest.split(['/', '?', '#']).next().unwrap_or("").is_empty()
            && !annotation.contains(' ')
    });
    if approved {
        return (Approval::Approved, format!("approved in {annotation}"));
    }
    (
        Approval::Invalid,
        format!(
            "protected groups must have approval annotation \"{API_APPROVED_ANNOTATION}\" with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"
        ),
    )
}

fn validate_api_approval(
    new: &CustomResourceDefinition,
    old: Option<&CustomResourceDefinition>,
) -> Vec<FieldError> {
    if !is_protected_community_group(&new.spec.group) {
        return Vec::new();
    }
    let (state, reason) = approval_state(new);
    if old.is_some_and(|old| approval_state(old).0 == state) {
        return Vec::new();
    }
    let path = FieldPath::from_parts(&["metadata", "annotations"]).key(API_APPROVED_ANNOTATION);
    let value = new
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(API_APPROVED_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    match state {
        Approval::Missing => vec![FieldError::required(&path, reason)],
        Approval::Invalid => vec![FieldError::invalid(&path, value, reason)],
        Approval::Approved | Approval::Bypassed => Vec::new(),
    }
}

fn validate_preserve_unknown_fields(
    new: &CustomResourceDefinition,
    old: Option<&CustomResourceDefinition>,
) -> Vec<FieldError> {
    if old.is_some_and(|o| o.spec.preserve_unknown_fields == Some(true)) {
        return Vec::new();
    }
    if new.spec.preserve_unknown_fields == Some(true) {
        return vec![FieldError::invalid(
            &FieldPath::from_parts(&["spec", "preserveUnknownFields"]),
            true,
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        )];
    }
    Vec::new()
}

fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

fn stored_versions(crd: &CustomResourceDefinition) -> &[String] {
    crd.status
        .as_ref()
        .and_then(|s: &CustomResourceDefinitionStatus| s.stored_versions.as_deref())
        .unwrap_or(&[])
}

fn immutable<T: PartialEq + serde::Serialize>(
    new: &T,
    old: &T,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    if new != old {
        errs.push(FieldError::invalid(
            path,
            serde_json::to_value(new).unwrap_or_default(),
            FIELD_IMMUTABLE_ERROR_MSG,
        ));
    }
}

// ---------------------------------------------------------------------------
// Spec
// ---------------------------------------------------------------------------

/// Whether every version carries an identical value (upstream's conversion then
/// moves it to the top level).
fn all_identical<T: PartialEq>(
    versions: &[CustomResourceDefinitionVersion],
    f: impl Fn(&CustomResourceDefinitionVersion) -> T,
) -> bool {
    versions
        .first()
        .is_none_or(|first| versions.iter().all(|v| f(v) == f(first)))
}

fn status_enabled(sub: Option<&CustomResourceSubresources>) -> bool {
    sub.is_some_and(|s| s.status.is_some())
}

fn validate_spec<'a>(
    spec: &'a CustomResourceDefinitionSpec,
    mut opts: Opts<'_>,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let versions = &spec.versions;
    let preserve_unknown = spec.preserve_unknown_fields == Some(true);

    // Upstream's v1 -> internal conversion: identical per-version fields go top-level.
    let schema_top = !versions.is_empty() && all_identical(versions, |v| v.schema.clone());
    let sub_top = !versions.is_empty() && all_identical(versions, |v| v.subresources.clone());
    let cols_top =
        !versions.is_empty() && all_identical(versions, |v| v.additional_printer_columns.clone());
    let top_schema = if schema_top {
        versions[0].schema.as_ref()
    } else {
        None
    };
    let top_sub = if sub_top {
        versions[0].subresources.as_ref()
    } else {
        None
    };
    fn pick<T>(top: bool, v: Option<&T>) -> Option<&T> {
        if top { None } else { v }
    }
    let version_schema =
        |v: &'a CustomResourceDefinitionVersion| pick(schema_top, v.schema.as_ref());
    let version_sub =
        |v: &'a CustomResourceDefinitionVersion| pick(sub_top, v.subresources.as_ref());

    let group_path = path.child("group");
    if spec.group.is_empty() {
        errs.push(FieldError::required(&group_path, ""));
    } else {
        let e = is_dns1123_subdomain(&spec.group);
        if !e.is_empty() {
            errs.push(FieldError::invalid(
                &group_path,
                spec.group.as_str(),
                e.join(","),
            ));
        } else if spec.group.split('.').count() < 2 {
            errs.push(FieldError::invalid(
                &group_path,
                spec.group.as_str(),
                "should be a domain with at least one dot",
            ));
        }
    }
    enum_required(
        &spec.scope,
        &["Cluster", "Namespaced"],
        &path.child("scope"),
        &mut errs,
    );

    if !preserve_unknown {
        opts.require_structural_schema = true;
    }
    let top_has_schema = top_schema.is_some_and(|s| s.open_api_v3_schema.is_some());
    if !top_has_schema {
        for (i, v) in versions.iter().enumerate() {
            let has = version_schema(v).is_some_and(|s| s.open_api_v3_schema.is_some());
            let schema_path = path
                .child("versions")
                .index(i)
                .child("schema")
                .child("openAPIV3Schema");
            if opts.require_open_api_schema {
                if !has {
                    errs.push(FieldError::required(&schema_path, ""));
                }
            } else if !preserve_unknown && v.served && !has {
                errs.push(FieldError::required(
                    &schema_path,
                    "because otherwise all fields are pruned",
                ));
            }
        }
    }
    let all_schemas = || {
        versions
            .iter()
            .filter_map(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
    };
    if all_schemas().any(|s| schema_has(s, &|s| s.default.is_some())) {
        opts.require_structural_schema = true;
        if preserve_unknown {
            errs.push(FieldError::invalid(
                &path.child("preserveUnknownFields"),
                true,
                "must be false in order to use defaults in the schema",
            ));
        }
    }
    if all_schemas().any(|s| schema_has(s, &has_kubernetes_extensions)) {
        opts.require_structural_schema = true;
    }

    let mut storage_count = 0;
    let mut seen = BTreeSet::new();
    let mut unique = true;
    for (i, v) in versions.iter().enumerate() {
        let vp = path.child("versions").index(i);
        if v.storage {
            storage_count += 1;
        }
        if !seen.insert(v.name.as_str()) {
            unique = false;
        }
        let e = is_dns1035_label(&v.name);
        if !e.is_empty() {
            errs.push(FieldError::invalid(
                &vp.child("name"),
                v.name.as_str(),
                e.join(","),
            ));
        }
        let sub = top_sub.or(version_sub(v));
        validate_version(
            v,
            version_schema(v),
            version_sub(v),
            if cols_top {
                None
            } else {
                v.additional_printer_columns.as_deref()
            },
            &vp,
            status_enabled(sub),
            opts.for_version(v),
            &mut errs,
        );
    }
    if !unique {
        errs.push(FieldError::invalid(
            &path.child("versions"),
            json!(versions),
            "must contain unique version names",
        ));
    }
    if storage_count != 1 {
        errs.push(FieldError::invalid(
            &path.child("versions"),
            json!(versions),
            "must have exactly one version marked as storage version",
        ));
    }

    // Required names (the format is checked by validate_names).
    let names_path = path.child("names");
    for (field, value) in [
        ("plural", spec.names.plural.as_str()),
        ("singular", spec.names.singular.as_deref().unwrap_or("")),
        ("kind", spec.names.kind.as_str()),
        ("listKind", spec.names.list_kind.as_deref().unwrap_or("")),
    ] {
        if value.is_empty() {
            errs.push(FieldError::required(&names_path.child(field), ""));
        }
    }
    errs.extend(validate_names(&spec.names, &names_path));

    let any_status =
        status_enabled(top_sub) || versions.iter().any(|v| status_enabled(version_sub(v)));
    let top_opts = versions.first().map_or(opts, |v| opts.for_version(v));
    validate_schema(
        top_schema,
        any_status,
        top_opts,
        &path.child("validation"),
        &mut errs,
    );
    validate_subresources(top_sub, &path.child("subresources"), &mut errs);
    if cols_top {
        for (i, col) in versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .enumerate()
        {
            errs.extend(validate_column(
                col,
                &path.child("additionalPrinterColumns").index(i),
            ));
        }
    }
    if !versions.is_empty() && all_identical(versions, |v| v.selectable_fields.clone()) {
        if let Some(fields) = versions[0]
            .selectable_fields
            .as_deref()
            .filter(|f| !f.is_empty())
        {
            if top_schema
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .is_none()
            {
                errs.push(FieldError::invalid(
                    &path.child("selectableFields"),
                    "",
                    "may only be set when validations.schema is included",
                ));
            } else {
                validate_selectable_fields(fields, &path.child("selectableFields"), &mut errs);
            }
        }
    } else {
        for (i, v) in versions.iter().enumerate() {
            let Some(fields) = v.selectable_fields.as_deref().filter(|f| !f.is_empty()) else {
                continue;
            };
            let fp = path.child("versions").index(i).child("selectableFields");
            if version_schema(v)
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .is_none()
            {
                errs.push(FieldError::invalid(
                    &fp,
                    "",
                    "may only be set when `version.schema.openAPIV3Schema` is not included",
                ));
            } else {
                validate_selectable_fields(fields, &fp, &mut errs);
            }
        }
    }

    let conversion_path = path.child("conversion");
    if let Some(conversion) = &spec.conversion {
        if conversion.strategy != "None" && preserve_unknown {
            errs.push(FieldError::invalid(
                &conversion_path.child("strategy"),
                conversion.strategy.as_str(),
                "must be None if spec.preserveUnknownFields is true",
            ));
        }
        validate_conversion(
            conversion,
            opts.require_recognized_conversion_review_version,
            &conversion_path,
            &mut errs,
        );
    }
    errs
}

#[allow(clippy::too_many_arguments)]
fn validate_version(
    v: &CustomResourceDefinitionVersion,
    schema: Option<&CustomResourceValidation>,
    subresources: Option<&CustomResourceSubresources>,
    columns: Option<&[CustomResourceColumnDefinition]>,
    path: &FieldPath,
    status_enabled: bool,
    opts: Opts<'_>,
    errs: &mut Vec<FieldError>,
) {
    for m in validate_deprecation_warning(
        v.deprecated.unwrap_or(false),
        v.deprecation_warning.as_deref(),
    ) {
        errs.push(FieldError::invalid(
            &path.child("deprecationWarning"),
            json!(v.deprecation_warning),
            m,
        ));
    }
    validate_schema(schema, status_enabled, opts, &path.child("schema"), errs);
    validate_subresources(subresources, &path.child("subresources"), errs);
    for (i, col) in columns.into_iter().flatten().enumerate() {
        errs.extend(validate_column(
            col,
            &path.child("additionalPrinterColumns").index(i),
        ));
    }
}

fn validate_deprecation_warning(deprecated: bool, warning: Option<&str>) -> Vec<String> {
    let Some(warning) = warning else {
        return Vec::new();
    };
    if !deprecated {
        return vec!["can only be set for deprecated versions".to_string()];
    }
    let mut out = Vec::new();
    if warning.len() > 256 {
        out.push("must be <= 256 characters long".to_string());
    }
    if warning.is_empty() {
        out.push("must not be an empty string".to_string());
    }
    for (i, c) in warning.char_indices() {
        if c.is_control() {
            out.push(format!(
                "must only contain printable UTF-8 characters; control character found at index {i}"
            ));
            break;
        }
        if !ferrokube_apimachinery::errors::go_is_print(c) {
            out.push(format!(
                "must only contain printable UTF-8 characters; non-printable character found at index {i}"
            ));
            break;
        }
    }
    out
}

fn enum_required(value: &str, valid: &[&str], path: &FieldPath, errs: &mut Vec<FieldError>) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !valid.contains(&value) {
        errs.push(FieldError::not_supported(path, value, valid));
    }
}

fn validate_simple_json_path(s: &str, path: &FieldPath) -> Vec<FieldError> {
    if s.is_empty() {
        vec![FieldError::invalid(path, s, "must not be empty")]
    } else if !s.starts_with('.') {
        vec![FieldError::invalid(
            path,
            s,
            "must be a simple json path starting with .",
        )]
    } else {
        Vec::new()
    }
}

fn validate_subresources(
    sub: Option<&CustomResourceSubresources>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let Some(scale) = sub.and_then(|s| s.scale.as_ref()) else {
        return;
    };
    let spec_path = path.child("scale.specReplicasPath");
    if scale.spec_replicas_path.is_empty() {
        errs.push(FieldError::required(&spec_path, ""));
    } else {
        let e = validate_simple_json_path(&scale.spec_replicas_path, &spec_path);
        if !e.is_empty() {
            errs.extend(e);
        } else if !scale.spec_replicas_path.starts_with(".spec.") {
            errs.push(FieldError::invalid(
                &spec_path,
                scale.spec_replicas_path.as_str(),
                "should be a json path under .spec",
            ));
        }
    }
    let status_path = path.child("scale.statusReplicasPath");
    if scale.status_replicas_path.is_empty() {
        errs.push(FieldError::required(&status_path, ""));
    } else {
        let e = validate_simple_json_path(&scale.status_replicas_path, &status_path);
        if !e.is_empty() {
            errs.extend(e);
        } else if !scale.status_replicas_path.starts_with(".status.") {
            errs.push(FieldError::invalid(
                &status_path,
                scale.status_replicas_path.as_str(),
                "should be a json path under .status",
            ));
        }
    }
    if let Some(selector) = scale
        .label_selector_path
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        let selector_path = path.child("scale.labelSelectorPath");
        let e = validate_simple_json_path(selector, &selector_path);
        if !e.is_empty() {
            errs.extend(e);
        } else if !selector.starts_with(".spec.") && !selector.starts_with(".status.") {
            errs.push(FieldError::invalid(
                &selector_path,
                selector,
                "should be a json path under either .spec or .status",
            ));
        }
    }
}

fn validate_selectable_fields(
    fields: &[SelectableField],
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let mut unique = BTreeSet::new();
    for (i, f) in fields.iter().enumerate() {
        let jp = path.index(i).child("jsonPath");
        if f.json_path.is_empty() {
            errs.push(FieldError::required(&jp, ""));
            continue;
        }
        let normalized = f.json_path.trim_start_matches('.');
        if normalized == "metadata" || normalized.starts_with("metadata.") {
            errs.push(FieldError::invalid(
                &jp,
                f.json_path.as_str(),
                "must not point to fields in metadata",
            ));
        }
        if !unique.insert(normalized.to_string()) {
            errs.push(FieldError::duplicate(&jp, f.json_path.as_str()));
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errs.push(FieldError::too_many(
            path,
            Some(unique.len()),
            Some(MAX_SELECTABLE_FIELDS),
        ));
    }
}

fn validate_conversion(
    conversion: &CustomResourceConversion,
    require_recognized: bool,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    enum_required(
        &conversion.strategy,
        &["None", "Webhook"],
        &path.child("strategy"),
        errs,
    );
    let client_config = conversion
        .webhook
        .as_ref()
        .and_then(|w| w.client_config.as_ref());
    let review_versions: &[String] = conversion
        .webhook
        .as_ref()
        .map_or(&[], |w| w.conversion_review_versions.as_slice());
    let cc_path = path.child("webhookClientConfig");
    if conversion.strategy == "Webhook" {
        match client_config {
            None => errs.push(FieldError::required(
                &cc_path,
                "required when strategy is set to Webhook",
            )),
            Some(cc) => match (&cc.url, &cc.service) {
                (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
                    &cc_path,
                    "exactly one of url or service is required",
                )),
                (Some(url), None) => validate_webhook_url(url, &cc_path.child("url"), errs),
                (None, Some(svc)) => validate_webhook_service(
                    &svc.name,
                    &svc.namespace,
                    svc.path.as_deref(),
                    svc.port.unwrap_or(443),
                    &cc_path.child("service"),
                    errs,
                ),
            },
        }
        let vp = path.child("conversionReviewVersions");
        if review_versions.is_empty() {
            errs.push(FieldError::required(&vp, ""));
        } else {
            let mut seen = BTreeSet::new();
            let mut accepted = false;
            for (i, v) in review_versions.iter().enumerate() {
                if !seen.insert(v.as_str()) {
                    errs.push(FieldError::invalid(
                        &vp.index(i),
                        v.as_str(),
                        "duplicate version",
                    ));
                    continue;
                }
                for m in is_dns1035_label(v) {
                    errs.push(FieldError::invalid(&vp.index(i), v.as_str(), m));
                }
                accepted |= CONVERSION_REVIEW_VERSIONS.contains(&v.as_str());
            }
            if require_recognized && !accepted {
                errs.push(FieldError::invalid(
                    &vp,
                    json!(review_versions),
                    format!(
                        "must include at least one of {}",
                        CONVERSION_REVIEW_VERSIONS.join(", ")
                    ),
                ));
            }
        }
    } else {
        if client_config.is_some() {
            errs.push(FieldError::forbidden(
                &cc_path,
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if !review_versions.is_empty() {
            errs.push(FieldError::forbidden(
                &path.child("conversionReviewVersions"),
                "should not be set when strategy is not set to Webhook",
            ));
        }
    }
}

/// Upstream's `webhook.ValidateWebhookURL` with `forceHttps`.
fn validate_webhook_url(url: &str, path: &FieldPath, errs: &mut Vec<FieldError>) {
    const FORM: &str = "; desired format: https://host[/path]";
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) if !s.is_empty() && !s.contains(['/', '?', '#']) => (s, r),
        _ => ("", url),
    };
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = if scheme.is_empty() {
        ""
    } else {
        rest.split('/').next().unwrap_or("")
    };
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if scheme != "https" {
        errs.push(FieldError::invalid(
            path,
            scheme,
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if host.is_empty() {
        errs.push(FieldError::invalid(
            path,
            host,
            format!("host must be specified{FORM}"),
        ));
    }
    if let Some(user) = user {
        errs.push(FieldError::invalid(
            path,
            user,
            "user information is not permitted in the URL",
        ));
    }
    if !fragment.is_empty() {
        errs.push(FieldError::invalid(
            path,
            fragment,
            "fragments are not permitted in the URL",
        ));
    }
    if !query.is_empty() {
        errs.push(FieldError::invalid(
            path,
            query,
            "query parameters are not permitted in the URL",
        ));
    }
}

/// Upstream's `webhook.ValidateWebhookService`.
fn validate_webhook_service(
    name: &str,
    namespace: &str,
    url_path: Option<&str>,
    port: i32,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "service name is required",
        ));
    }
    if namespace.is_empty() {
        errs.push(FieldError::required(
            &path.child("namespace"),
            "service namespace is required",
        ));
    }
    let port_errs = is_valid_port_num(i64::from(port));
    if !port_errs.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("port"),
            port,
            format!("port is not valid: {}", port_errs.join(", ")),
        ));
    }
    let Some(url_path) = url_path else {
        return;
    };
    if url_path.is_empty() || url_path == "/" {
        return;
    }
    let pp = path.child("path");
    if url_path == "//" {
        errs.push(FieldError::invalid(
            &pp,
            url_path,
            "segment[0] may not be empty",
        ));
        return;
    }
    if !url_path.starts_with('/') {
        errs.push(FieldError::invalid(&pp, url_path, "must start with a '/'"));
    }
    let mut check = &url_path[1..];
    if let Some(stripped) = check.strip_suffix('/') {
        check = stripped;
    }
    for (i, step) in check.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(
                &pp,
                url_path,
                format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for m in is_dns1123_subdomain(step) {
            errs.push(FieldError::invalid(
                &pp,
                url_path,
                format!("segment[{i}]: {m}"),
            ));
        }
    }
}

// ---------------------------------------------------------------------------
// Schemas
// ---------------------------------------------------------------------------

fn flag(b: Option<bool>) -> bool {
    b.unwrap_or(false)
}

fn str_of(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

fn items_schema(s: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match &s.items {
        Some(JSONSchemaPropsOrArray::Schema(b)) => Some(b),
        _ => None,
    }
}

/// Upstream's `SchemaHas`: `pred` holds for `s` or any schema nested in it.
fn schema_has(s: &JSONSchemaProps, pred: &dyn Fn(&JSONSchemaProps) -> bool) -> bool {
    if pred(s) {
        return true;
    }
    let children = s
        .properties
        .iter()
        .flat_map(|m| m.values())
        .chain(s.pattern_properties.iter().flat_map(|m| m.values()))
        .chain(s.definitions.iter().flat_map(|m| m.values()))
        .chain(s.all_of.iter().flatten())
        .chain(s.one_of.iter().flatten())
        .chain(s.any_of.iter().flatten())
        .chain(s.not.as_deref())
        .chain(match &s.items {
            Some(JSONSchemaPropsOrArray::Schema(b)) => std::slice::from_ref(&**b).iter(),
            Some(JSONSchemaPropsOrArray::Schemas(v)) => v.iter(),
            None => [].iter(),
        })
        .chain(match &s.additional_properties {
            Some(JSONSchemaPropsOrBool::Schema(b)) => Some(&**b),
            _ => None,
        })
        .chain(match &s.additional_items {
            Some(JSONSchemaPropsOrBool::Schema(b)) => Some(&**b),
            _ => None,
        });
    for child in children {
        if schema_has(child, pred) {
            return true;
        }
    }
    false
}

fn has_kubernetes_extensions(s: &JSONSchemaProps) -> bool {
    flag(s.x_kubernetes_int_or_string)
        || s.x_kubernetes_preserve_unknown_fields.is_some()
        || flag(s.x_kubernetes_embedded_resource)
        || s.x_kubernetes_list_type.is_some()
        || s.x_kubernetes_list_map_keys
            .as_ref()
            .is_some_and(|k| !k.is_empty())
        || s.x_kubernetes_map_type.is_some()
        || s.x_kubernetes_validations
            .as_ref()
            .is_some_and(|v| !v.is_empty())
}

fn has_non_atomic_set_items(s: &JSONSchemaProps) -> bool {
    if str_of(&s.x_kubernetes_list_type) != "set" {
        return false;
    }
    let Some(is) = items_schema(s) else {
        return false;
    };
    match str_of(&is.type_) {
        "array" => is
            .x_kubernetes_list_type
            .as_deref()
            .is_some_and(|t| t != "atomic"),
        "object" => str_of(&is.x_kubernetes_map_type) != "atomic",
        _ => false,
    }
}

/// Upstream's `validateCustomResourceDefinitionValidation` (without CEL).
fn validate_schema(
    validation: Option<&CustomResourceValidation>,
    status_enabled: bool,
    opts: Opts<'_>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let Some(schema) = validation.and_then(|v| v.open_api_v3_schema.as_ref()) else {
        return;
    };
    let root = path.child("openAPIV3Schema");
    let mut local = Vec::new();
    if status_enabled {
        validate_root_with_status(schema, &root, &mut local);
    }
    if flag(schema.nullable) {
        local.push(FieldError::forbidden(
            &root.child("nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let mut opts = opts;
    if opts.require_structural_schema {
        let structural = validate_structural(schema, &root);
        // Upstream compiles rules only against a structural schema's declared types.
        opts.check_cel_rules &= structural.is_empty();
        local.extend(structural);
    }
    let ssv = SpecValidator {
        allow_defaults: true,
        disallow_defaults_reason: String::new(),
        inside_resource_meta: false,
        require_valid_property_type: opts.require_valid_property_type,
    };
    let mut costs = RuleCosts::default();
    let mut cel = CelContext {
        cardinality: Some(1),
        costs: &mut costs,
    };
    validate_openapi_schema(schema, &root, &ssv, true, opts, Some(&mut cel), &mut local);
    if !opts.suppress_per_expression_cost {
        costs.errors(&root, &mut local);
    }
    errs.extend(local);
}

/// With the status subresource only some fields may be set at the root, so that
/// `properties[status]` alone carries the status's validation.
fn validate_root_with_status(s: &JSONSchemaProps, root: &FieldPath, errs: &mut Vec<FieldError>) {
    // Go's struct field order; `true` marks the allowed ones. Zero values are skipped.
    let set: [(bool, bool); 43] = [
        (s.id.as_deref().is_some_and(|x| !x.is_empty()), false),
        (s.schema.as_deref().is_some_and(|x| !x.is_empty()), false),
        (s.ref_path.is_some(), false),
        (
            s.description.as_deref().is_some_and(|x| !x.is_empty()),
            true,
        ),
        (!str_of(&s.type_).is_empty(), true), // Type: checked below
        (flag(s.nullable), false),
        (s.format.as_deref().is_some_and(|x| !x.is_empty()), true),
        (s.title.as_deref().is_some_and(|x| !x.is_empty()), true),
        (s.default.is_some(), false),
        (s.maximum.is_some(), true),
        (flag(s.exclusive_maximum), true),
        (s.minimum.is_some(), true),
        (flag(s.exclusive_minimum), true),
        (s.max_length.is_some(), true),
        (s.min_length.is_some(), true),
        (s.pattern.as_deref().is_some_and(|x| !x.is_empty()), true),
        (s.max_items.is_some(), true),
        (s.min_items.is_some(), true),
        (flag(s.unique_items), true),
        (s.multiple_of.is_some(), true),
        (s.enum_.is_some(), false),
        (s.max_properties.is_some(), false),
        (s.min_properties.is_some(), false),
        (s.required.is_some(), true),
        (s.items.is_some(), true),
        (s.all_of.is_some(), false),
        (s.one_of.is_some(), false),
        (s.any_of.is_some(), false),
        (s.not.is_some(), false),
        (s.properties.is_some(), true),
        (s.additional_properties.is_some(), false),
        (s.pattern_properties.is_some(), false),
        (s.dependencies.is_some(), false),
        (s.additional_items.is_some(), false),
        (s.definitions.is_some(), false),
        (s.external_docs.is_some(), true),
        (s.example.is_some(), true),
        (s.x_kubernetes_preserve_unknown_fields.is_some(), true),
        (flag(s.x_kubernetes_embedded_resource), false),
        (flag(s.x_kubernetes_int_or_string), false),
        (s.x_kubernetes_list_map_keys.is_some(), false),
        (s.x_kubernetes_list_type.is_some(), false),
        (
            s.x_kubernetes_map_type.is_some() || s.x_kubernetes_validations.is_some(),
            false,
        ),
    ];
    for (i, (is_set, allowed)) in set.into_iter().enumerate() {
        if !is_set {
            continue;
        }
        if i == 4 {
            let t = str_of(&s.type_);
            if t != "object" {
                errs.push(FieldError::invalid(
                    &root.child("type"),
                    t,
                    r#"only "object" is allowed as the type at the root of the schema if the status subresource is enabled"#,
                ));
                return;
            }
            continue;
        }
        // x-kubernetes-validations is allowed; the last entry lumps it with the map type.
        if i == 42 && s.x_kubernetes_map_type.is_none() {
            continue;
        }
        if !allowed {
            errs.push(FieldError::invalid(
                root,
                serde_json::to_value(s).unwrap_or_default(),
                format!(
                    "only {ALLOWED_AT_ROOT} fields are allowed at the root of the schema if the status subresource is enabled"
                ),
            ));
            return;
        }
    }
}

#[derive(Clone)]
struct SpecValidator {
    allow_defaults: bool,
    disallow_defaults_reason: String,
    inside_resource_meta: bool,
    require_valid_property_type: bool,
}

impl SpecValidator {
    fn with_forbidden_defaults(&self, reason: String) -> SpecValidator {
        SpecValidator {
            allow_defaults: false,
            disallow_defaults_reason: reason,
            ..self.clone()
        }
    }

    fn with_inside_resource_meta(&self) -> SpecValidator {
        SpecValidator {
            inside_resource_meta: true,
            ..self.clone()
        }
    }

    /// Upstream's `specStandardValidatorV3.validate`.
    fn validate(&self, s: &JSONSchemaProps, path: &FieldPath, errs: &mut Vec<FieldError>) {
        let t = str_of(&s.type_);
        if self.require_valid_property_type && !t.is_empty() && !OPENAPI_V3_TYPES.contains(&t) {
            errs.push(FieldError::not_supported(
                &path.child("type"),
                t,
                OPENAPI_V3_TYPES,
            ));
        }
        if s.default.is_some() && !self.allow_defaults {
            let mut detail = "must not be set".to_string();
            if !self.disallow_defaults_reason.is_empty() {
                detail.push(' ');
                detail.push_str(&self.disallow_defaults_reason);
            }
            errs.push(FieldError::forbidden(&path.child("default"), detail));
        }
        if !str_of(&s.id).is_empty() {
            errs.push(FieldError::forbidden(
                &path.child("id"),
                "id is not supported",
            ));
        }
        if s.additional_items.is_some() {
            errs.push(FieldError::forbidden(
                &path.child("additionalItems"),
                "additionalItems is not supported",
            ));
        }
        if s.pattern_properties.as_ref().is_some_and(|m| !m.is_empty()) {
            errs.push(FieldError::forbidden(
                &path.child("patternProperties"),
                "patternProperties is not supported",
            ));
        }
        if s.definitions.as_ref().is_some_and(|m| !m.is_empty()) {
            errs.push(FieldError::forbidden(
                &path.child("definitions"),
                "definitions is not supported",
            ));
        }
        if s.dependencies.is_some() {
            errs.push(FieldError::forbidden(
                &path.child("dependencies"),
                "dependencies is not supported",
            ));
        }
        if s.ref_path.is_some() {
            errs.push(FieldError::forbidden(
                &path.child("$ref"),
                "$ref is not supported",
            ));
        }
        if t == "null" {
            errs.push(FieldError::forbidden(
                &path.child("type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        }
        if matches!(&s.items, Some(JSONSchemaPropsOrArray::Schemas(v)) if !v.is_empty()) {
            errs.push(FieldError::forbidden(
                &path.child("items"),
                "items must be a schema object and not an array",
            ));
        }
        if self.inside_resource_meta && flag(s.x_kubernetes_embedded_resource) {
            errs.push(FieldError::forbidden(
                &path.child("x-kubernetes-embedded-resource"),
                "must not be used inside of resource meta",
            ));
        }
    }
}

/// Upstream's `ValidateCustomResourceDefinitionOpenAPISchema` (the schema errors, and
/// the rules' compilation and cost estimates). `cel` is upstream's `CELSchemaContext`
/// for the nodes whose rules count towards the schema's cost (not those under
/// `allOf`, `not` and the like, where rules are forbidden anyway).
#[allow(clippy::too_many_arguments)]
fn validate_openapi_schema(
    s: &JSONSchemaProps,
    path: &FieldPath,
    ssv: &SpecValidator,
    is_root: bool,
    opts: Opts<'_>,
    mut cel: Option<&mut CelContext<'_>>,
    errs: &mut Vec<FieldError>,
) {
    ssv.validate(s, path, errs);
    if flag(s.unique_items) {
        errs.push(FieldError::forbidden(
            &path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let has_properties = s.properties.as_ref().is_some_and(|p| !p.is_empty());
    if let Some(ap) = &s.additional_properties {
        let (allows, schema) = match ap {
            JSONSchemaPropsOrBool::Bool(b) => (*b, None),
            JSONSchemaPropsOrBool::Schema(b) => (true, Some(&**b)),
        };
        if has_properties && (!allows || schema.is_some()) {
            errs.push(FieldError::forbidden(
                &path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if let Some(schema) = schema {
            let sub = if ssv.inside_resource_meta {
                ssv.with_forbidden_defaults(
                    "inside additionalProperties applying to object metadata".to_string(),
                )
            } else {
                ssv.clone()
            };
            validate_openapi_schema(
                schema,
                &path.child("additionalProperties"),
                &sub,
                false,
                opts,
                cel.as_deref_mut().map(|c| c.child(s)).as_mut(),
                errs,
            );
        }
    }
    for (name, prop) in s.properties.iter().flatten() {
        let mut sub = ssv.clone();
        if (is_root || flag(s.x_kubernetes_embedded_resource))
            && matches!(name.as_str(), "metadata" | "kind" | "apiVersion")
        {
            sub = sub.with_inside_resource_meta();
            if is_root {
                sub = sub.with_forbidden_defaults(format!("in top-level {name}"));
            }
        }
        validate_openapi_schema(
            prop,
            &path.child("properties").key(name),
            &sub,
            false,
            opts,
            cel.as_deref_mut().map(|c| c.child(s)).as_mut(),
            errs,
        );
    }
    if let Some(not) = &s.not {
        validate_openapi_schema(not, &path.child("not"), ssv, false, opts, None, errs);
    }
    for (field, list) in [
        ("allOf", &s.all_of),
        ("oneOf", &s.one_of),
        ("anyOf", &s.any_of),
    ] {
        for (i, sub) in list.iter().flatten().enumerate() {
            validate_openapi_schema(
                sub,
                &path.child(field).index(i),
                ssv,
                false,
                opts,
                None,
                errs,
            );
        }
    }
    for (name, sub) in s.definitions.iter().flatten() {
        validate_openapi_schema(
            sub,
            &path.child("definitions").key(name),
            ssv,
            false,
            opts,
            None,
            errs,
        );
    }
    match &s.items {
        Some(JSONSchemaPropsOrArray::Schema(b)) => {
            validate_openapi_schema(
                b,
                &path.child("items"),
                ssv,
                false,
                opts,
                cel.as_deref_mut().map(|c| c.child(s)).as_mut(),
                errs,
            );
        }
        Some(JSONSchemaPropsOrArray::Schemas(v)) => {
            for (i, sub) in v.iter().enumerate() {
                validate_openapi_schema(
                    sub,
                    &path.child("items").index(i),
                    ssv,
                    false,
                    opts,
                    None,
                    errs,
                );
            }
        }
        None => {}
    }
    for (name, dep) in s.dependencies.iter().flatten() {
        if let k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrStringArray::Schema(b) = dep {
            validate_openapi_schema(
                b,
                &path.child("dependencies").key(name),
                ssv,
                false,
                opts,
                None,
                errs,
            );
        }
    }
    if s.x_kubernetes_preserve_unknown_fields == Some(false) {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            false,
            "must be true or undefined",
        ));
    }
    let t = str_of(&s.type_);
    if let Some(map_type) = &s.x_kubernetes_map_type {
        if t != "object" {
            let msg = "must be object if x-kubernetes-map-type is specified";
            if t.is_empty() {
                errs.push(FieldError::required(&path.child("type"), msg));
            } else {
                errs.push(FieldError::invalid(&path.child("type"), t, msg));
            }
        }
        if map_type != "atomic" && map_type != "granular" {
            errs.push(FieldError::not_supported(
                &path.child("x-kubernetes-map-type"),
                map_type.as_str(),
                &["atomic", "granular"],
            ));
        }
    }
    let list_type = s.x_kubernetes_list_type.as_deref();
    if list_type.is_some() && t != "array" {
        let msg = "must be array if x-kubernetes-list-type is specified";
        if t.is_empty() {
            errs.push(FieldError::required(&path.child("type"), msg));
        } else {
            errs.push(FieldError::invalid(&path.child("type"), t, msg));
        }
    } else if opts.require_atomic_set_type
        && list_type == Some("set")
        && let Some(is) = items_schema(s)
    {
        let msg = "must be atomic as item of a list with x-kubernetes-list-type=set";
        match str_of(&is.type_) {
            "array"
                if is
                    .x_kubernetes_list_type
                    .as_deref()
                    .is_some_and(|t| t != "atomic") =>
            {
                errs.push(FieldError::invalid(
                    &path.child("items").child("x-kubernetes-list-type"),
                    json!(is.x_kubernetes_list_type),
                    msg,
                ));
            }
            "object" if str_of(&is.x_kubernetes_map_type) != "atomic" => {
                errs.push(FieldError::invalid(
                    &path.child("items").child("x-kubernetes-map-type"),
                    json!(is.x_kubernetes_list_type),
                    msg,
                ));
            }
            _ => {}
        }
    }
    if let Some(lt) = list_type
        && !matches!(lt, "atomic" | "set" | "map")
    {
        errs.push(FieldError::not_supported(
            &path.child("x-kubernetes-list-type"),
            lt,
            &["atomic", "set", "map"],
        ));
    }
    let keys = s.x_kubernetes_list_map_keys.as_deref().unwrap_or(&[]);
    if !keys.is_empty() {
        let msg = "must be map if x-kubernetes-list-map-keys is non-empty";
        match list_type {
            None => errs.push(FieldError::required(
                &path.child("x-kubernetes-list-type"),
                msg,
            )),
            Some("map") => {}
            Some(lt) => errs.push(FieldError::invalid(
                &path.child("x-kubernetes-list-type"),
                lt,
                msg,
            )),
        }
    }
    if list_type == Some("map") {
        if keys.is_empty() {
            errs.push(FieldError::required(
                &path.child("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match &s.items {
            None => errs.push(FieldError::required(
                &path.child("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(JSONSchemaPropsOrArray::Schemas(v)) => errs.push(FieldError::invalid(
                &path.child("items"),
                json!(v),
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            Some(JSONSchemaPropsOrArray::Schema(is)) => {
                let it = str_of(&is.type_);
                if it != "object" {
                    errs.push(FieldError::invalid(
                        &path.child("items").child("type"),
                        it,
                        "must be object if parent array's x-kubernetes-list-type is map",
                    ));
                } else {
                    let mut seen = BTreeSet::new();
                    for k in keys {
                        match is.properties.as_ref().and_then(|p| p.get(k)) {
                            Some(ks) => {
                                if matches!(str_of(&ks.type_), "array" | "object") {
                                    errs.push(FieldError::invalid(
                                        &path.child("items").child("properties").key(k).child("type"),
                                        it,
                                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                    ));
                                }
                            }
                            None => errs.push(FieldError::invalid(
                                &path.child("x-kubernetes-list-map-keys"),
                                json!(keys),
                                "entries must all be names of item properties",
                            )),
                        }
                        if !seen.insert(k.as_str()) {
                            errs.push(FieldError::invalid(
                                &path.child("x-kubernetes-list-map-keys"),
                                json!(keys),
                                "must not contain duplicate entries",
                            ));
                        }
                    }
                }
            }
        }
    }
    if opts.require_map_list_keys_map_set_validation {
        errs.extend(validate_map_list_keys_map_set(s, path));
    }
    // The node's types, built once for all its rules.
    let mut rule_node = None;
    for (i, rule) in s.x_kubernetes_validations.iter().flatten().enumerate() {
        let rp = path.child("x-kubernetes-validations").index(i);
        let trimmed_rule = rule.rule.trim();
        let message = str_of(&rule.message);
        let trimmed_msg = message.trim();
        let has_newline = |s: &str| s.contains('\n') || s.contains('\r');
        if trimmed_rule.is_empty() {
            errs.push(FieldError::required(
                &rp.child("rule"),
                "rule is not specified",
            ));
        } else if !message.is_empty() && trimmed_msg.is_empty() {
            errs.push(FieldError::invalid(
                &rp.child("message"),
                message,
                "must be non-empty if specified",
            ));
        } else if has_newline(trimmed_msg) {
            errs.push(FieldError::invalid(
                &rp.child("message"),
                message,
                "must not contain line breaks",
            ));
        } else if has_newline(trimmed_rule) && trimmed_msg.is_empty() {
            errs.push(FieldError::required(
                &rp.child("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        let message_expression = str_of(&rule.message_expression);
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            errs.push(FieldError::required(
                &rp.child("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = &rule.reason
            && !VALIDATION_REASONS.contains(&reason.as_str())
        {
            errs.push(FieldError::not_supported(
                &rp.child("reason"),
                reason.as_str(),
                VALIDATION_REASONS,
            ));
        }
        let field_path = str_of(&rule.field_path);
        if !field_path.is_empty() && field_path.trim().is_empty() {
            errs.push(FieldError::invalid(
                &rp.child("fieldPath"),
                field_path,
                "must be non-empty if specified",
            ));
        }
        if has_newline(field_path) {
            errs.push(FieldError::invalid(
                &rp.child("fieldPath"),
                field_path,
                "must not contain line breaks",
            ));
        }
        if opts.check_cel_rules && !trimmed_rule.is_empty() {
            let compiled = rule_node
                .get_or_insert_with(|| RuleNode::new(s, is_root))
                .compile(rule);
            let printed = go_printed_rule(rule);
            // Upstream's per-expression limit, unless the schema is unchanged.
            let check_cost = |errs: &mut Vec<FieldError>, field: &str, what: &str, cost: u64| {
                let limit = ferrokube_cel::estimate::STATIC_ESTIMATED_COST_LIMIT;
                if !opts.suppress_per_expression_cost && cost > limit {
                    errs.push(FieldError::forbidden(
                        &rp.child(field),
                        ferrokube_cel::estimate::cost_error_message(what, cost, limit),
                    ));
                }
            };
            if let Some(cel) = cel.as_deref_mut() {
                // How often the rule can run in one object: the bounds of the lists
                // and maps above it, or as often as its node fits in a request.
                let cardinality = cel.cardinality.unwrap_or(compiled.rule_cardinality);
                let cost = compiled.rule_cost.saturating_mul(cardinality);
                check_cost(errs, "rule", "estimated rule cost", cost);
                cel.costs.observe(rp.child("rule"), cost);
            }
            if let Some(e) = compiled.rule_error {
                errs.push(FieldError::invalid_printed(&rp.child("rule"), &printed, e));
            }
            if let Some(e) = compiled.message_expression_error {
                errs.push(FieldError::invalid_printed(
                    &rp.child("messageExpression"),
                    &printed,
                    e,
                ));
            } else if let Some(cel) = cel.as_deref_mut()
                && let Some(cost) = compiled.message_expression_cost
            {
                check_cost(
                    errs,
                    "messageExpression",
                    "estimated messageExpression cost",
                    cost,
                );
                cel.costs.observe(rp.child("messageExpression"), cost);
            }
        }
    }
}

/// The rule as upstream's compile errors show it: Go's `%#v` of its internal
/// `apiextensions.ValidationRule`, which users and tools match on. A set pointer
/// prints as an address in Go; a fixed stand-in here, as no address is meaningful.
fn go_printed_rule(rule: &ValidationRule) -> String {
    use ferrokube_apimachinery::errors::go_quote;
    let pointer = |ty: &str, set: bool| {
        let target = if set { "0xc000010000" } else { "nil" };
        format!("(*{ty})({target})")
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{}, FieldPath:{}, OptionalOldSelf:{}}}",
        go_quote(&rule.rule),
        go_quote(str_of(&rule.message)),
        go_quote(str_of(&rule.message_expression)),
        pointer("apiextensions.FieldValueErrorReason", rule.reason.is_some()),
        go_quote(str_of(&rule.field_path)),
        pointer("bool", rule.optional_old_self.is_some()),
    )
}

/// A rule as upstream's `compileRule` compiles it.
#[derive(Default)]
struct CompiledRule {
    /// Why the rule does not compile (`compilation failed: ...`: a syntax error, an
    /// undeclared variable, a field its node does not have or an operator on operands
    /// of known types none of its overloads takes; or a rule known not to be a bool).
    rule_error: Option<String>,
    /// Why its `messageExpression` (which must be a string) does not; it is only
    /// compiled when the rule compiles.
    message_expression_error: Option<String>,
    /// The rule's estimated worst-case cost (0 if it does not compile).
    rule_cost: u64,
    /// How often a node of the rule's type fits in one request.
    rule_cardinality: u64,
    /// The message expression's estimated worst-case cost, if it compiled.
    message_expression_cost: Option<u64>,
}

/// A schema node its rules are compiled against: `self` and `oldSelf` have its type;
/// the root also has `apiVersion`, `kind` and `metadata`, as an embedded resource
/// does.
struct RuleNode {
    typed: serde_json::Value,
    scope: ferrokube_cel::estimate::RuleScope,
    /// The node's object type names, shared by its rules' checks.
    type_names: ferrokube_cel::typecheck::RuleTypeNames,
}

impl RuleNode {
    fn new(node: &JSONSchemaProps, is_root: bool) -> RuleNode {
        let mut typed = serde_json::to_value(node).unwrap_or_default();
        if is_root && let Some(map) = typed.as_object_mut() {
            map.insert("x-kubernetes-embedded-resource".into(), true.into());
        }
        let scope = ferrokube_cel::estimate::RuleScope::new(&typed, is_root);
        let type_names = ferrokube_cel::typecheck::RuleTypeNames::new(&typed);
        RuleNode {
            typed,
            scope,
            type_names,
        }
    }

    /// The expression's type when known and its estimated cost, or why it does not
    /// compile; `optional_old_self` is the rule's `optionalOldSelf`.
    fn compile_expression(
        &self,
        source: &str,
        optional_old_self: bool,
    ) -> Result<(Option<String>, u64), String> {
        const VARIABLES: &[&str] = &["self", "oldSelf"];
        let program = ferrokube_cel::compile(source, VARIABLES).map_err(|e| e.0)?;
        let check = ferrokube_cel::typecheck::check_rule_on(
            &program,
            &self.typed,
            optional_old_self,
            &self.type_names,
        );
        if check.issues.is_empty() {
            Ok((check.result, self.scope.max_cost(&program)))
        } else {
            Err(format!("compilation failed: {}", check.issues))
        }
    }

    /// Compiles a rule and its `messageExpression`.
    fn compile(&self, rule: &ValidationRule) -> CompiledRule {
        let mut compiled = CompiledRule::default();
        if rule.rule.trim().is_empty() {
            return compiled;
        }
        let optional_old_self = rule.optional_old_self == Some(true);
        match self.compile_expression(&rule.rule, optional_old_self) {
            Err(e) => {
                compiled.rule_error = Some(e);
                return compiled;
            }
            Ok((Some(t), _)) if t != "bool" => {
                compiled.rule_error = Some("cel expression must evaluate to a bool".into());
                return compiled;
            }
            Ok((_, cost)) => {
                compiled.rule_cost = cost;
                compiled.rule_cardinality = self.scope.max_cardinality();
            }
        }
        let message_expression = str_of(&rule.message_expression);
        if message_expression.trim().is_empty() {
            return compiled;
        }
        match self.compile_expression(message_expression, optional_old_self) {
            Err(e) => compiled.message_expression_error = Some(format!("messageExpression {e}")),
            Ok((Some(t), _)) if t != "string" => {
                compiled.message_expression_error =
                    Some("messageExpression must evaluate to a string".into());
            }
            Ok((_, cost)) => compiled.message_expression_cost = Some(cost),
        }
        compiled
    }
}

/// The estimated costs of a schema's rules (upstream's `TotalCost`).
#[derive(Default)]
struct RuleCosts {
    total: u64,
    /// The four dearest rules of at least 1 % of the schema's limit, dearest first.
    most_expensive: Vec<(FieldPath, u64)>,
}

impl RuleCosts {
    fn observe(&mut self, path: FieldPath, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < ferrokube_cel::estimate::STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path, cost));
        self.most_expensive
            .sort_by_key(|(_, c)| std::cmp::Reverse(*c));
        self.most_expensive.truncate(4);
    }

    /// Upstream's refusal of a schema whose rules together cost too much: each of the
    /// dearest rules, then the schema.
    fn errors(&self, root: &FieldPath, errs: &mut Vec<FieldError>) {
        let limit = ferrokube_cel::estimate::STATIC_ESTIMATED_CRD_COST_LIMIT;
        if self.total <= limit {
            return;
        }
        for (path, _) in &self.most_expensive {
            errs.push(FieldError::forbidden(
                path,
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errs.push(FieldError::forbidden(
            root,
            ferrokube_cel::estimate::cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                self.total,
                limit,
            ),
        ));
    }
}

/// Upstream's `CELSchemaContext` as far as costs go: how often a node can occur in
/// one object (`None`: without bound) and the schema's running total.
struct CelContext<'c> {
    cardinality: Option<u64>,
    costs: &'c mut RuleCosts,
}

impl CelContext<'_> {
    /// The context of a child of `parent` (upstream's `childContext`): the cardinality
    /// times the number of children `parent` can have (`extractMaxElements`).
    fn child(&mut self, parent: &JSONSchemaProps) -> CelContext<'_> {
        let max_elements = match str_of(&parent.type_) {
            "object" if parent.additional_properties.is_some() => parent.max_properties,
            "array" => parent.max_items,
            _ => Some(1),
        };
        CelContext {
            cardinality: self
                .cardinality
                .zip(max_elements)
                .map(|(c, m)| c.saturating_mul(m.max(0) as u64)),
            costs: self.costs,
        }
    }
}

/// Calls `f` on every schema node that may carry rules (`properties`,
/// `additionalProperties` and `items`, the structural ones), with whether it is the root.
fn visit_rule_nodes(
    s: &JSONSchemaProps,
    is_root: bool,
    f: &mut impl FnMut(&JSONSchemaProps, bool),
) {
    f(s, is_root);
    for p in s.properties.iter().flat_map(BTreeMap::values) {
        visit_rule_nodes(p, false, f);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(a)) = &s.additional_properties {
        visit_rule_nodes(a, false, f);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(i)) = &s.items {
        visit_rule_nodes(i, false, f);
    }
}

/// Upstream's `validateMapListKeysMapSet`.
fn validate_map_list_keys_map_set(s: &JSONSchemaProps, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(is) = items_schema(s) else {
        return errs;
    };
    let Some(lt) = s.x_kubernetes_list_type.as_deref() else {
        return errs;
    };
    if lt != "set" && lt != "map" {
        return errs;
    }
    if flag(is.nullable) {
        errs.push(FieldError::forbidden(
            &path.child("items").child("nullable"),
            format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
        ));
    }
    if lt == "map" {
        let required = is.required.as_deref().unwrap_or(&[]);
        for k in s.x_kubernetes_list_map_keys.iter().flatten() {
            let Some(ks) = is.properties.as_ref().and_then(|p| p.get(k)) else {
                continue;
            };
            let kp = path.child("items").child("properties").key(k);
            if !required.contains(k) && ks.default.is_none() {
                errs.push(FieldError::required(
                    &kp.child("default"),
                    "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                ));
            }
            if flag(ks.nullable) {
                errs.push(FieldError::forbidden(
                    &kp.child("nullable"),
                    "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                ));
            }
        }
    }
    errs
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// Upstream's `structuralschema.ValidateStructural` (invariants; completeness is not
/// checked), errors sorted by their message as upstream sorts them.
fn validate_structural(s: &JSONSchemaProps, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    structural_invariants(s, Level::Root, path, &mut errs);
    errs.sort_by_cached_key(ToString::to_string);
    errs
}

fn structural_invariants(
    s: &JSONSchemaProps,
    lvl: Level,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let t = str_of(&s.type_);
    let items = items_schema(s);
    if t == "array" && s.items.is_none() {
        errs.push(FieldError::required(
            &path.child("items"),
            "must be specified",
        ));
    }
    if let Some(items) = items {
        structural_invariants(items, Level::Item, &path.child("items"), errs);
    }
    for (name, prop) in s.properties.iter().flatten() {
        structural_invariants(
            prop,
            Level::Field,
            &path.child("properties").key(name),
            errs,
        );
    }
    if let Some(ap) = &s.additional_properties {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(
                &path.child("additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let JSONSchemaPropsOrBool::Schema(b) = ap {
            structural_invariants(b, Level::Field, &path.child("additionalProperties"), errs);
        }
    }
    let int_or_string = flag(s.x_kubernetes_int_or_string);
    let preserve = flag(s.x_kubernetes_preserve_unknown_fields);
    let embedded = flag(s.x_kubernetes_embedded_resource);
    if int_or_string && preserve {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-embedded-resource"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    // Value validations: anyOf/allOf/oneOf/not may not carry structural fields.
    let skip_any_of = is_int_or_string_any_of(s.any_of.as_deref());
    let skip_first_all_of_any_of = s
        .all_of
        .as_deref()
        .and_then(|a| a.first())
        .is_some_and(|first| is_int_or_string_any_of(first.any_of.as_deref()));
    value_validation(s, skip_any_of, skip_first_all_of_any_of, path, errs);

    let check_metadata = lvl == Level::Root || embedded;
    if embedded && t != "object" {
        let msg = "must be object if x-kubernetes-embedded-resource is true";
        if t.is_empty() {
            errs.push(FieldError::required(&path.child("type"), msg));
        } else {
            errs.push(FieldError::invalid(&path.child("type"), t, msg));
        }
    } else if t.is_empty() && !int_or_string && !preserve {
        let msg = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(&path.child("type"), msg));
    }
    if embedded && s.additional_properties.is_some() {
        errs.push(FieldError::forbidden(
            &path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !t.is_empty() && t != "object" {
        errs.push(FieldError::invalid(
            &path.child("type"),
            t,
            "must be object at the root",
        ));
    }
    let props = s.properties.as_ref();
    if check_metadata {
        for name in ["kind", "apiVersion"] {
            if let Some(p) = props.and_then(|p| p.get(name)) {
                let pt = str_of(&p.type_);
                if pt != "string" {
                    errs.push(FieldError::invalid(
                        &path.child("properties").key(name).child("type"),
                        pt,
                        "must be string",
                    ));
                }
            }
        }
    }
    if let Some(metadata) = props.and_then(|p| p.get("metadata")) {
        let mp = path.child("properties").key("metadata");
        let mt = str_of(&metadata.type_);
        if check_metadata && mt != "object" {
            errs.push(FieldError::invalid(&mp.child("type"), mt, "must be object"));
        }
        if lvl == Level::Root && !metadata_is_implicit(metadata) {
            errs.push(FieldError::forbidden(
                &mp,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && props.is_none_or(BTreeMap::is_empty) {
        errs.push(FieldError::required(
            &path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// Whether a root `metadata` schema specifies nothing beyond `type`, `default` and
/// `name`/`generateName` properties (fields the structural schema drops are ignored).
fn metadata_is_implicit(m: &JSONSchemaProps) -> bool {
    let mut rest = m.clone();
    rest.type_ = None;
    rest.default = None;
    if let Some(p) = &rest.properties {
        let only_names = !p.is_empty() && p.keys().all(|k| k == "name" || k == "generateName");
        if only_names {
            rest.properties = None;
        }
    }
    // Not part of a structural schema.
    rest.id = None;
    rest.schema = None;
    rest.ref_path = None;
    rest.example = None;
    rest.external_docs = None;
    rest.definitions = None;
    rest.dependencies = None;
    rest.pattern_properties = None;
    rest.additional_items = None;
    // Plain Go bools: false is the zero value.
    for b in [
        &mut rest.nullable,
        &mut rest.unique_items,
        &mut rest.exclusive_maximum,
        &mut rest.exclusive_minimum,
        &mut rest.x_kubernetes_embedded_resource,
        &mut rest.x_kubernetes_int_or_string,
    ] {
        if *b == Some(false) {
            *b = None;
        }
    }
    for s in [
        &mut rest.description,
        &mut rest.title,
        &mut rest.format,
        &mut rest.pattern,
    ] {
        if s.as_deref() == Some("") {
            *s = None;
        }
    }
    rest == JSONSchemaProps::default()
}

fn is_int_or_string_any_of(any_of: Option<&[JSONSchemaProps]>) -> bool {
    let Some([a, b]) = any_of else {
        return false;
    };
    let only_type = |s: &JSONSchemaProps, t: &str| {
        *s == JSONSchemaProps {
            type_: Some(t.to_string()),
            ..Default::default()
        }
    };
    only_type(a, "integer") && only_type(b, "string")
}

fn value_validation(
    s: &JSONSchemaProps,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, v) in s.any_of.iter().flatten().enumerate() {
            nested_value_validation(v, false, &path.child("anyOf").index(i), errs);
        }
    }
    for (i, v) in s.all_of.iter().flatten().enumerate() {
        nested_value_validation(
            v,
            skip_first_all_of_any_of && i == 0,
            &path.child("allOf").index(i),
            errs,
        );
    }
    for (i, v) in s.one_of.iter().flatten().enumerate() {
        nested_value_validation(v, false, &path.child("oneOf").index(i), errs);
    }
    if let Some(not) = &s.not {
        nested_value_validation(not, false, &path.child("not"), errs);
    }
}

/// Upstream's `validateNestedValueValidation`: inside `anyOf`/`allOf`/`oneOf`/`not`
/// only value validations may appear.
fn nested_value_validation(
    v: &JSONSchemaProps,
    skip_any_of: bool,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    value_validation(v, skip_any_of, false, path, errs);
    if let Some(items) = items_schema(v) {
        nested_value_validation(items, false, &path.child("items"), errs);
    }
    for (name, p) in v.properties.iter().flatten() {
        nested_value_validation(p, false, &path.child("properties").key(name), errs);
    }
    let forbid = |field: &str, msg: &str, errs: &mut Vec<FieldError>| {
        errs.push(FieldError::forbidden(&path.child(field), msg));
    };
    if !str_of(&v.type_).is_empty() {
        forbid("type", "must be empty to be structural", errs);
    }
    if v.additional_properties.is_some() {
        forbid(
            "additionalProperties",
            "must be undefined to be structural",
            errs,
        );
    }
    if v.default.is_some() {
        forbid("default", "must be undefined to be structural", errs);
    }
    if !str_of(&v.title).is_empty() {
        forbid("title", "must be empty to be structural", errs);
    }
    if !str_of(&v.description).is_empty() {
        forbid("description", "must be empty to be structural", errs);
    }
    if flag(v.nullable) {
        forbid("nullable", "must be false to be structural", errs);
    }
    if flag(v.x_kubernetes_preserve_unknown_fields) {
        forbid(
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
            errs,
        );
    }
    if flag(v.x_kubernetes_embedded_resource) {
        forbid(
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
            errs,
        );
    }
    if flag(v.x_kubernetes_int_or_string) {
        forbid(
            "x-kubernetes-int-or-string",
            "must be false to be structural",
            errs,
        );
    }
    if v.x_kubernetes_list_map_keys
        .as_ref()
        .is_some_and(|k| !k.is_empty())
    {
        forbid(
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
            errs,
        );
    }
    if v.x_kubernetes_list_type.is_some() {
        forbid(
            "x-kubernetes-list-type",
            "must be undefined to be structural",
            errs,
        );
    }
    if v.x_kubernetes_map_type.is_some() {
        forbid(
            "x-kubernetes-map-type",
            "must be undefined to be structural",
            errs,
        );
    }
    if v.x_kubernetes_validations
        .as_ref()
        .is_some_and(|x| !x.is_empty())
    {
        forbid(
            "x-kubernetes-validations",
            "must be empty to be structural",
            errs,
        );
    }
    if v.properties
        .as_ref()
        .is_some_and(|p| p.contains_key("metadata"))
    {
        errs.push(FieldError::forbidden(
            &path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
}
