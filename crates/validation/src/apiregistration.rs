//! apiregistration.k8s.io/v1: APIServices (kube-aggregator's
//! `pkg/apis/apiregistration/validation`: `ValidateAPIService`,
//! `ValidateAPIServiceUpdate`, `ValidateAPIServiceStatus[Update]`).
//!
//! The name rule is split as the registry splits every kind's: the registry checks
//! `metadata.name` / `generateName` with the minimal path-segment rule
//! (`path.IsValidPathSegmentName`), and [`name_errors`] adds the APIService rule on a
//! name that passes it: it must be `<spec.version>.<spec.group>`.

use ferrokube_apimachinery::errors::{FieldError, go_quote};
use ferrokube_apimachinery::validation::{
    is_dns1035_label, is_dns1123_subdomain, is_valid_port_num, validate_path_segment_name,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;

use crate::Validate;
use crate::util::*;

/// The condition statuses upstream accepts.
const CONDITION_STATUSES: &[&str] = &["True", "False", "Unknown"];

impl Validate for apiregistration::APIService {
    fn validate_create(&self) -> Vec<FieldError> {
        validate_api_service(self)
    }

    /// Upstream's main-resource update runs `ValidateAPIServiceUpdate` (the create
    /// rules on the new object) and its status update `ValidateAPIServiceStatusUpdate`.
    /// The registry keeps the status on the first and the spec on the second, so both
    /// sets of rules on every update give the same answers for objects stored valid.
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        let mut errs = validate_api_service(self);
        errs.extend(validate_api_service_status(self));
        errs
    }
}

/// `ValidateAPIService` without the generic object-metadata checks (the registry's).
fn validate_api_service(svc: &apiregistration::APIService) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let default_spec = apiregistration::APIServiceSpec::default();
    let spec = svc.spec.as_ref().unwrap_or(&default_spec);
    let group = s(&spec.group);
    let version = s(&spec.version);
    name_errors(&svc.metadata, &format!("{version}.{group}"), &mut errs);

    let sp = p("spec");
    // In this case an empty group is allowed.
    if group.is_empty() && version != "v1" {
        errs.push(FieldError::required(
            &sp.child("group"),
            "only v1 may have an empty group and it better be legacy kube",
        ));
    }
    if !group.is_empty() {
        msgs_invalid(
            is_dns1123_subdomain(group),
            group,
            &sp.child("group"),
            &mut errs,
        );
    }
    msgs_invalid(
        is_dns1035_label(version),
        version,
        &sp.child("version"),
        &mut errs,
    );

    if spec.group_priority_minimum <= 0 || spec.group_priority_minimum > 20000 {
        errs.push(FieldError::invalid(
            &sp.child("groupPriorityMinimum"),
            spec.group_priority_minimum,
            "must be positive and less than 20000",
        ));
    }
    if spec.version_priority <= 0 || spec.version_priority > 1000 {
        errs.push(FieldError::invalid(
            &sp.child("versionPriority"),
            spec.version_priority,
            "must be positive and less than 1000",
        ));
    }

    let ca_bundle_len = spec.ca_bundle.as_ref().map_or(0, |b| b.0.len());
    let insecure = spec.insecure_skip_tls_verify.unwrap_or(false);
    let Some(service) = &spec.service else {
        // A local APIService: served by this server, reached over no TLS of its own.
        if ca_bundle_len != 0 {
            errs.push(FieldError::invalid(
                &sp.child("caBundle"),
                format!("{ca_bundle_len} bytes"),
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            errs.push(FieldError::invalid(
                &sp.child("insecureSkipTLSVerify"),
                insecure,
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return errs;
    };

    let svp = sp.child("service");
    if s(&service.namespace).is_empty() {
        errs.push(FieldError::required(&svp.child("namespace"), ""));
    }
    if s(&service.name).is_empty() {
        errs.push(FieldError::required(&svp.child("name"), ""));
    }
    // Defaulted to 443; unset reads as Go's zero.
    let port = service.port.unwrap_or(0);
    let port_errs = is_valid_port_num(port.into());
    if !port_errs.is_empty() {
        errs.push(FieldError::invalid(
            &svp.child("port"),
            port,
            format!("port is not valid: {}", port_errs.join(", ")),
        ));
    }
    if insecure && ca_bundle_len > 0 {
        errs.push(FieldError::invalid(
            &sp.child("insecureSkipTLSVerify"),
            insecure,
            "may not be true if caBundle is present",
        ));
    }
    errs
}

/// The name function upstream's `ValidateAPIService` hands `ValidateObjectMeta`, past
/// its path-segment check: `generateName` and `name` must both be
/// `spec.version + "." + spec.group`.
fn name_errors(meta: &ObjectMeta, required: &str, errs: &mut Vec<FieldError>) {
    let mp = p("metadata");
    for (field, value) in [
        ("generateName", s(&meta.generate_name)),
        ("name", s(&meta.name)),
    ] {
        // Empty: required (or nothing to check); not a path segment: the registry's
        // name rule reports it.
        if value.is_empty() || !validate_path_segment_name(value, false).is_empty() {
            continue;
        }
        if value != required {
            errs.push(FieldError::invalid(
                &mp.child(field),
                value,
                format!(
                    "must be `spec.version+\".\"+spec.group`: {}",
                    go_quote(required)
                ),
            ));
        }
    }
}

/// `ValidateAPIServiceStatus`: every condition's status is True, False or Unknown.
fn validate_api_service_status(svc: &apiregistration::APIService) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let conditions = svc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    for (i, c) in conditions.iter().enumerate() {
        if !CONDITION_STATUSES.contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                &p("status").child("conditions").index(i).child("status"),
                c.status.as_str(),
                CONDITION_STATUSES,
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn api_service(v: Value) -> apiregistration::APIService {
        serde_json::from_value(v).expect("fixture deserializes")
    }

    /// A valid remote APIService with `spec` changed by `f`.
    fn remote(f: impl FnOnce(&mut Value)) -> apiregistration::APIService {
        let mut v = json!({
            "metadata": {"name": "v1alpha1.widgets.example.com"},
            "spec": {"group": "widgets.example.com", "version": "v1alpha1",
                "groupPriorityMinimum": 1000, "versionPriority": 15,
                "service": {"namespace": "widgets", "name": "api", "port": 443}},
        });
        f(&mut v);
        api_service(v)
    }

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_api_services() {
        assert!(remote(|_| {}).validate_create().is_empty());
        let local = api_service(json!({
            "metadata": {"name": "v1.apps"},
            "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 17800,
                "versionPriority": 15}}));
        assert!(local.validate_create().is_empty());
        // The legacy group: only v1, named `v1.`.
        let legacy = api_service(json!({
            "metadata": {"name": "v1."},
            "spec": {"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}}));
        assert!(
            legacy.validate_create().is_empty(),
            "{:?}",
            legacy.validate_create()
        );
        let bounds = remote(|v| {
            v["spec"]["groupPriorityMinimum"] = json!(20000);
            v["spec"]["versionPriority"] = json!(1000);
            v["spec"]["caBundle"] = json!("Y2E=");
            v["spec"]["service"]["port"] = json!(65535);
        });
        assert!(bounds.validate_create().is_empty());
    }

    #[test]
    fn name_must_be_version_dot_group() {
        let svc = remote(|v| v["metadata"]["name"] = json!("widgets"));
        assert_eq!(
            rendered(&svc.validate_create()),
            [
                "metadata.name: Invalid value: \"widgets\": must be `spec.version+\".\"+spec.group`: \"v1alpha1.widgets.example.com\""
            ]
        );
        // Also the generate-name prefix (upstream's name function sees both).
        let svc = remote(|v| v["metadata"]["generateName"] = json!("v1alpha1."));
        assert_eq!(
            rendered(&svc.validate_create()),
            [
                "metadata.generateName: Invalid value: \"v1alpha1.\": must be `spec.version+\".\"+spec.group`: \"v1alpha1.widgets.example.com\""
            ]
        );
        // A name that is no path segment is the registry's to report.
        let svc = remote(|v| v["metadata"]["name"] = json!("a/b"));
        assert!(svc.validate_create().is_empty());
    }

    #[test]
    fn spec_rules_with_upstreams_messages() {
        let svc = api_service(json!({
            "metadata": {"name": "V1.Bad_Group"},
            "spec": {"group": "Bad_Group", "version": "V1", "groupPriorityMinimum": 0,
                "versionPriority": 1001,
                "service": {"port": 0}, "insecureSkipTLSVerify": true, "caBundle": "Y2E="}}));
        assert_eq!(
            rendered(&svc.validate_create()),
            [
                "spec.group: Invalid value: \"Bad_Group\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.version: Invalid value: \"V1\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
                "spec.service.namespace: Required value",
                "spec.service.name: Required value",
                "spec.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
            ]
        );
        let empty_group = api_service(json!({
            "metadata": {"name": "v2."},
            "spec": {"version": "v2", "groupPriorityMinimum": 1, "versionPriority": 1}}));
        assert_eq!(
            rendered(&empty_group.validate_create()),
            [
                "spec.group: Required value: only v1 may have an empty group and it better be legacy kube"
            ]
        );
    }

    #[test]
    fn no_spec_is_go_zero_values() {
        let svc = api_service(json!({"metadata": {"name": "x"}}));
        let fields: Vec<String> = svc.validate_create().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.group",
                "spec.version",
                "spec.groupPriorityMinimum",
                "spec.versionPriority"
            ]
        );
    }

    #[test]
    fn local_api_services_have_no_tls_settings() {
        let svc = remote(|v| {
            v["spec"].as_object_mut().unwrap().remove("service");
            v["spec"]["caBundle"] = json!("Y2EtYnVuZGxl");
            v["spec"]["insecureSkipTLSVerify"] = json!(true);
        });
        assert_eq!(
            rendered(&svc.validate_create()),
            [
                "spec.caBundle: Invalid value: \"9 bytes\": local APIServices may not have a caBundle",
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
            ]
        );
        // insecureSkipTLSVerify alone is allowed for a remote one.
        let svc = remote(|v| v["spec"]["insecureSkipTLSVerify"] = json!(true));
        assert!(svc.validate_create().is_empty());
    }

    #[test]
    fn update_checks_the_spec_and_the_condition_statuses() {
        let old = remote(|_| {});
        let new = remote(|v| {
            v["spec"]["versionPriority"] = json!(0);
            v["status"] = json!({"conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Available", "status": "Maybe"}]});
        });
        assert_eq!(
            rendered(&new.validate_update(&old)),
            [
                "spec.versionPriority: Invalid value: 0: must be positive and less than 1000",
                "status.conditions[1].status: Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\"",
            ]
        );
        // A changed version must rename the object, which cannot be.
        let renamed = remote(|v| v["spec"]["version"] = json!("v1beta1"));
        assert_eq!(
            rendered(&renamed.validate_update(&old)),
            [
                "metadata.name: Invalid value: \"v1alpha1.widgets.example.com\": must be `spec.version+\".\"+spec.group`: \"v1beta1.widgets.example.com\""
            ]
        );
    }
}
