//! The plugin's configuration (upstream `PodSecurityConfiguration`,
//! `pod-security.admission.config.k8s.io/v1`, also `v1beta1` and `v1alpha1`), as an
//! AdmissionConfiguration carries it: the policy of namespaces without labels, and the
//! requests exempt from any policy.

use serde_json::Value;

use crate::{Level, LevelVersion, Policy, Version};

const API_VERSIONS: [&str; 3] = [
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];

/// Who and what is never checked: upstream's `exemptions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exemptions {
    pub usernames: Vec<String>,
    pub namespaces: Vec<String>,
    pub runtime_classes: Vec<String>,
}

/// What a request is exempt by, as the `pod-security.kubernetes.io/exempt` audit
/// annotation names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exemption {
    Namespace,
    User,
    RuntimeClass,
}

impl Exemption {
    pub fn as_str(self) -> &'static str {
        match self {
            Exemption::Namespace => "namespace",
            Exemption::User => "user",
            Exemption::RuntimeClass => "runtimeClass",
        }
    }
}

/// A validated configuration. The default is upstream's without a file: privileged
/// everywhere, no exemptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Configuration {
    pub defaults: Policy,
    pub exemptions: Exemptions,
}

impl Configuration {
    /// Reads a `PodSecurityConfiguration` object; every invalid field is named, as
    /// upstream's `ValidatePodSecurityConfiguration` does.
    pub fn from_value(config: &Value) -> Result<Configuration, String> {
        let api_version = config["apiVersion"].as_str().unwrap_or_default();
        let kind = config["kind"].as_str().unwrap_or_default();
        if !API_VERSIONS.contains(&api_version) || kind != "PodSecurityConfiguration" {
            return Err(format!(
                "unexpected configuration {api_version:?}, {kind:?}: expected kind \
                 PodSecurityConfiguration in {}",
                API_VERSIONS.join(", ")
            ));
        }
        let mut errors = Vec::new();
        let defaults = &config["defaults"];
        let mut mode = |name: &str| -> LevelVersion {
            let mut lv = LevelVersion::PRIVILEGED;
            let level_field = format!("defaults.{name}");
            match defaults.get(name) {
                None | Some(Value::Null) => {}
                Some(v) => match v.as_str().and_then(Level::parse) {
                    Some(level) => lv.level = level,
                    None => errors.push(format!(
                        "{level_field}: Unsupported value: {v}: supported values: \"baseline\", \"privileged\", \"restricted\""
                    )),
                },
            }
            let version_field = format!("defaults.{name}-version");
            match defaults.get(format!("{name}-version")) {
                None | Some(Value::Null) => {}
                Some(v) => match v.as_str().and_then(Version::parse) {
                    Some(version) => lv.version = version,
                    None => errors.push(format!(
                        "{version_field}: Invalid value: {v}: must be \"latest\" or \"v1.x\""
                    )),
                },
            }
            lv
        };
        let policy = Policy {
            enforce: mode("enforce"),
            audit: mode("audit"),
            warn: mode("warn"),
        };
        let exemptions = &config["exemptions"];
        let mut list = |field: &str, valid: fn(&str) -> Option<&'static str>| -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            let items = match &exemptions[field] {
                Value::Null => return out,
                Value::Array(items) => items,
                other => {
                    errors.push(format!(
                        "exemptions.{field}: Invalid value: {other}: must be a list of strings"
                    ));
                    return out;
                }
            };
            for (i, item) in items.iter().enumerate() {
                let path = format!("exemptions.{field}[{i}]");
                let Some(s) = item.as_str() else {
                    errors.push(format!("{path}: Invalid value: {item}: must be a string"));
                    continue;
                };
                if let Some(problem) = valid(s) {
                    errors.push(format!("{path}: Invalid value: {s:?}: {problem}"));
                } else if out.iter().any(|o| o == s) {
                    errors.push(format!("{path}: Duplicate value: {s:?}"));
                } else {
                    out.push(s.to_string());
                }
            }
            out
        };
        let exemptions = Exemptions {
            usernames: list("usernames", |s| s.is_empty().then_some("must be non-empty")),
            namespaces: list("namespaces", |s| {
                (!is_dns1123_label(s)).then_some(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                )
            }),
            runtime_classes: list("runtimeClasses", |s| {
                (!is_dns1123_subdomain(s)).then_some(
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                )
            }),
        };
        if !errors.is_empty() {
            return Err(errors.join(", "));
        }
        Ok(Configuration {
            defaults: policy,
            exemptions,
        })
    }

    /// Whether pods in `namespace` are exempt.
    pub fn exempt_namespace(&self, namespace: &str) -> bool {
        !namespace.is_empty() && self.exemptions.namespaces.iter().any(|n| n == namespace)
    }

    /// Whether requests of `username` are exempt.
    pub fn exempt_user(&self, username: &str) -> bool {
        !username.is_empty() && self.exemptions.usernames.iter().any(|u| u == username)
    }

    /// Whether pods of this runtime class are exempt.
    pub fn exempt_runtime_class(&self, runtime_class: Option<&str>) -> bool {
        runtime_class.is_some_and(|rc| {
            !rc.is_empty() && self.exemptions.runtime_classes.iter().any(|r| r == rc)
        })
    }

    /// Upstream's `exemptNamespaceWarning`: an exempt namespace whose labels set a
    /// policy that checks something is told that the policy is ignored.
    pub fn exempt_namespace_warning(
        &self,
        namespace: &str,
        policy: &Policy,
        labels: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Option<String> {
        if policy.fully_privileged() || policy.equivalent(&self.defaults) {
            return None;
        }
        let has = |key: &str| labels.is_some_and(|l| l.contains_key(key));
        let mut parts = Vec::new();
        for (mode, lv) in [
            ("enforce", policy.enforce),
            ("audit", policy.audit),
            ("warn", policy.warn),
        ] {
            let level_key = format!("{}{mode}", crate::LABEL_PREFIX);
            let version_key = format!("{level_key}-version");
            if lv.level != Level::Privileged && (has(&level_key) || has(&version_key)) {
                parts.push(format!("{mode}={lv}"));
            }
        }
        Some(format!(
            "namespace {namespace:?} is exempt from Pod Security, and the policy ({}) will be ignored",
            parts.join(", ")
        ))
    }
}

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_exemptions_are_read() {
        let c = Configuration::from_value(&json!({
            "apiVersion": "pod-security.admission.config.k8s.io/v1",
            "kind": "PodSecurityConfiguration",
            "defaults": {"enforce": "baseline", "enforce-version": "v1.30", "warn": "restricted"},
            "exemptions": {"usernames": ["alice"], "namespaces": ["kube-system"],
                           "runtimeClasses": ["kata"]}
        }))
        .unwrap();
        assert_eq!(c.defaults.enforce.to_string(), "baseline:v1.30");
        assert_eq!(c.defaults.audit, LevelVersion::PRIVILEGED);
        assert_eq!(c.defaults.warn.to_string(), "restricted:latest");
        assert!(c.exempt_namespace("kube-system") && !c.exempt_namespace("default"));
        assert!(c.exempt_user("alice") && !c.exempt_user(""));
        assert!(c.exempt_runtime_class(Some("kata")) && !c.exempt_runtime_class(None));
    }

    #[test]
    fn invalid_fields_are_named() {
        let err = Configuration::from_value(&json!({
            "apiVersion": "pod-security.admission.config.k8s.io/v1beta1",
            "kind": "PodSecurityConfiguration",
            "defaults": {"enforce": "strict", "audit-version": "1.30"},
            "exemptions": {"namespaces": ["Bad_NS", "ok", "ok"]}
        }))
        .unwrap_err();
        assert!(
            err.contains("defaults.enforce: Unsupported value: \"strict\""),
            "{err}"
        );
        assert!(
            err.contains("defaults.audit-version: Invalid value: \"1.30\""),
            "{err}"
        );
        assert!(
            err.contains("exemptions.namespaces[0]: Invalid value: \"Bad_NS\""),
            "{err}"
        );
        assert!(
            err.contains("exemptions.namespaces[2]: Duplicate value: \"ok\""),
            "{err}"
        );
        let err =
            Configuration::from_value(&json!({"apiVersion": "v1", "kind": "Pod"})).unwrap_err();
        assert!(
            err.contains("expected kind PodSecurityConfiguration"),
            "{err}"
        );
    }

    #[test]
    fn exempt_namespaces_with_a_policy_are_warned() {
        let c = Configuration::default();
        let labels: std::collections::BTreeMap<String, String> = [(
            "pod-security.kubernetes.io/enforce".to_string(),
            "restricted".to_string(),
        )]
        .into();
        let (policy, _) = Policy::from_labels(Some(&labels), c.defaults);
        assert_eq!(
            c.exempt_namespace_warning("ns", &policy, Some(&labels))
                .unwrap(),
            "namespace \"ns\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored"
        );
        assert_eq!(c.exempt_namespace_warning("ns", &c.defaults, None), None);
    }
}
