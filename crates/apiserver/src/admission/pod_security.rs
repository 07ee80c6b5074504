//! The PodSecurity admission plugin (upstream `plugin/pkg/admission/security/podsecurity`
//! over `k8s.io/pod-security-admission`): the namespace's
//! `pod-security.kubernetes.io/*` labels choose the levels, `ferrokube_podsecurity`
//! judges the pod. A pod that fails the enforced level is 403 (`pods "x" is forbidden:
//! violates PodSecurity "restricted:latest": ...`); one that fails the warn level is
//! admitted with a `Warning` header. Pod controllers (Deployments, Jobs, ...) are only
//! warned about, as upstream. Namespaces: invalid `pod-security.kubernetes.io/*` labels
//! are 422, and a new enforce level warns about the existing pods it would reject (also
//! on `--dry-run=server`).
//!
//! `--admission-control-config-file` may give a `PodSecurityConfiguration`: the policy
//! of namespaces without labels (`defaults`) and `exemptions` by namespace, user name
//! and runtime class. An exempt request is admitted unchecked with the audit annotation
//! `pod-security.kubernetes.io/exempt` (`namespace`, `user` or `runtimeClass`); an
//! exempt namespace that is given a policy is warned that it is ignored. Without a
//! configuration: privileged everywhere, no exemptions (upstream's default).
//!
//! The request's audit event gets upstream's annotations: `pod-security.kubernetes.io/
//! enforce-policy` (the level enforced on a pod; `privileged:latest` on a create in a
//! fully privileged namespace) and `pod-security.kubernetes.io/audit-violations` (the
//! audit level's verdict).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use ferrokube_podsecurity::{self as pss, Policy, Subject};
use ferrokube_registry::{ListParams, Store};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "PodSecurity";

/// Upstream's audit annotations (`api.EnforcedPolicyAnnotationKey`,
/// `api.AuditViolationsAnnotationKey` under the plugin's prefix).
const ENFORCE_POLICY_ANNOTATION: &str = "pod-security.kubernetes.io/enforce-policy";
const AUDIT_VIOLATIONS_ANNOTATION: &str = "pod-security.kubernetes.io/audit-violations";
const EXEMPT_ANNOTATION: &str = "pod-security.kubernetes.io/exempt";

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    let namespaces = ferrokube_api::resources::lookup("", "v1", "namespaces")
        .and_then(|info| init.registry.store_for(info))
        .cloned()
        .ok_or("no namespaces store")?;
    let pods = ferrokube_api::resources::lookup("", "v1", "pods")
        .and_then(|info| init.registry.store_for(info))
        .cloned()
        .ok_or("no pods store")?;
    let config = match init.options.configuration(NAME) {
        Some(value) => pss::Configuration::from_value(value)?,
        None => pss::Configuration::default(),
    };
    Ok(Arc::new(PodSecurity {
        namespaces,
        pods,
        config,
    }))
}

struct PodSecurity {
    namespaces: Arc<Store>,
    pods: Arc<Store>,
    config: pss::Configuration,
}

/// The object's `pod-security.kubernetes.io/*` labels, the only ones a policy reads;
/// the others are not copied (this runs for every pod write).
fn labels_of(object: &Value) -> Option<BTreeMap<String, String>> {
    let labels = object["metadata"]["labels"].as_object()?;
    Some(
        labels
            .iter()
            .filter(|(key, _)| key.starts_with(pss::LABEL_PREFIX))
            .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_string())))
            .collect(),
    )
}

impl PodSecurity {
    /// Upstream `ValidateNamespace`: invalid `pod-security.kubernetes.io/*` labels are
    /// 422; a new enforce level warns about the existing pods it would not admit.
    async fn validate_namespace(
        &self,
        a: &Attributes,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let defaults = self.config.defaults;
        let labels = labels_of(object);
        let (policy, errors) = Policy::from_labels(labels.as_ref(), defaults);
        let old_policy = old.map(|old| Policy::from_labels(labels_of(old).as_ref(), defaults));
        // Invalid labels are refused on create, and on update when they changed.
        let unchanged = old_policy
            .as_ref()
            .is_some_and(|(_, old_errors)| !old_errors.is_empty() && *old_errors == errors);
        if !errors.is_empty() && !unchanged {
            let path = FieldPath::new("metadata").child("labels");
            let errs = errors
                .iter()
                .map(|e| FieldError::invalid(&path.key(&e.key), e.value.as_str(), e.detail))
                .collect();
            return Err(ApiError::invalid("", "Namespace", &a.name, errs));
        }
        let exempt_warning = || {
            self.config
                .exempt_namespace(&a.name)
                .then(|| {
                    self.config
                        .exempt_namespace_warning(&a.name, &policy, labels.as_ref())
                })
                .flatten()
        };
        let Some((old_policy, _)) = old_policy else {
            if let Some(w) = exempt_warning() {
                a.warn(w);
            }
            return Ok(());
        };
        if policy.enforce == old_policy.enforce
            || policy.enforce.level == pss::Level::Privileged
            || (policy.enforce.version == old_policy.enforce.version
                && policy.enforce.level <= old_policy.enforce.level)
        {
            return Ok(());
        }
        if self.config.exempt_namespace(&a.name) {
            if let Some(w) = exempt_warning() {
                a.warn(w);
            }
            return Ok(());
        }
        let listed = self
            .pods
            .list(Some(&a.name), &ListParams::default())
            .await?;
        let pods: Vec<(String, ObjectMeta, PodSpec)> = listed
            .items
            .iter()
            .filter_map(|p| {
                let meta = ObjectMeta::deserialize(&p["metadata"]).ok()?;
                let spec = PodSpec::deserialize(&p["spec"]).ok()?;
                Some((meta.name.clone().unwrap_or_default(), meta, spec))
            })
            // Pods of an exempt runtime class are not checked, as upstream.
            .filter(|(_, _, spec)| {
                !self
                    .config
                    .exempt_runtime_class(spec.runtime_class_name.as_deref())
            })
            .collect();
        for w in pss::namespace_update_warnings(&a.name, &policy, &old_policy, &pods) {
            a.warn(w);
        }
        Ok(())
    }
}

/// The pod metadata and spec of `object` (a pod, or a pod controller's template).
fn pod_of(object: &Value, a: &Attributes) -> Result<Option<(ObjectMeta, PodSpec)>, ApiError> {
    let (meta, spec) = if a.is_core("pods") {
        (&object["metadata"], &object["spec"])
    } else {
        let Some(path) =
            ferrokube_api::resources::pod_template_path(a.resource.group, a.resource.plural)
        else {
            return Ok(None);
        };
        let template = path.iter().fold(object, |v, k| &v[*k]);
        (&template["metadata"], &template["spec"])
    };
    if spec.is_null() {
        return Ok(None);
    }
    let decode_err = |e: serde_json::Error| ApiError::bad_request(format!("decoding pod: {e}"));
    let meta: ObjectMeta = if meta.is_null() {
        ObjectMeta::default()
    } else {
        ObjectMeta::deserialize(meta).map_err(decode_err)?
    };
    let spec = PodSpec::deserialize(spec).map_err(decode_err)?;
    Ok(Some((meta, spec)))
}

#[async_trait]
impl Plugin for PodSecurity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        if a.is_core("namespaces") {
            return matches!(a.operation, Operation::Create | Operation::Update)
                && a.subresource.is_empty();
        }
        if !matches!(a.operation, Operation::Create | Operation::Update) || a.namespace.is_empty() {
            return false;
        }
        if a.is_core("pods") {
            // Upstream ignores every pod subresource but ephemeralcontainers.
            return a.subresource.is_empty() || a.subresource == "ephemeralcontainers";
        }
        a.subresource.is_empty()
            && ferrokube_api::resources::pod_template_path(a.resource.group, a.resource.plural)
                .is_some()
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(object) = object else {
            return Ok(());
        };
        if a.is_core("namespaces") {
            return self.validate_namespace(a, object, old).await;
        }
        if self.config.exempt_namespace(&a.namespace) {
            return exempt(a, pss::Exemption::Namespace);
        }
        if self.config.exempt_user(&a.user.name) {
            return exempt(a, pss::Exemption::User);
        }
        // From the watch cache (this apiserver's own namespace writes applied), as
        // upstream's namespace lister.
        let namespace =
            match super::webhook::fresh_get(&self.namespaces, None, &a.namespace).await? {
                Some(ns) => ns,
                // The store rejects writes into missing namespaces itself.
                None => return Ok(()),
            };
        let (policy, errors) =
            Policy::from_labels(labels_of(&namespace).as_ref(), self.config.defaults);
        if policy.fully_privileged() && errors.is_empty() {
            // Upstream's short-circuit answer, after its check for significant updates.
            if old.is_none() {
                a.audit_annotations.add(
                    ENFORCE_POLICY_ANNOTATION,
                    pss::LevelVersion::PRIVILEGED.to_string(),
                );
            }
            return Ok(());
        }
        let Some((meta, spec)) = pod_of(object, a)? else {
            return Ok(());
        };
        if let Some(old) = old
            && let Some((old_meta, old_spec)) = pod_of(old, a)?
            && !pss::is_significant_pod_update(&meta, &spec, &old_meta, &old_spec)
        {
            return Ok(());
        }
        if self
            .config
            .exempt_runtime_class(spec.runtime_class_name.as_deref())
        {
            return exempt(a, pss::Exemption::RuntimeClass);
        }
        let subject = if a.is_core("pods") {
            Subject::Pod
        } else {
            Subject::PodController
        };
        let decision = pss::decide(&policy, subject, &meta, &spec);
        if subject == Subject::Pod {
            a.audit_annotations
                .add(ENFORCE_POLICY_ANNOTATION, policy.enforce.to_string());
        }
        if let Some(audit) = decision.audit {
            a.audit_annotations.add(AUDIT_VIOLATIONS_ANNOTATION, audit);
        }
        if let Some(denial) = decision.forbidden {
            return Err(a.forbidden(denial));
        }
        for w in decision.warnings {
            a.warn(w);
        }
        Ok(())
    }
}

/// An exempt request: admitted unchecked, with upstream's audit annotation.
fn exempt(a: &Attributes, by: pss::Exemption) -> Result<(), ApiError> {
    a.audit_annotations
        .add(EXEMPT_ANNOTATION, by.as_str().to_string());
    Ok(())
}
