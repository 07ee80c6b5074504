//! The admission chain (upstream `k8s.io/apiserver/pkg/admission`): one [`Plugin`]
//! shape with upstream's split into mutation ([`Plugin::admit`]) and validation
//! ([`Plugin::validate`]), the request's [`Attributes`], and the [`Chain`] built from
//! `--enable-admission-plugins` / `--disable-admission-plugins` ([`AdmissionPlugins`])
//! in upstream's recommended order: every enabled mutating plugin in order, then every
//! validating one in order.
//!
//! The handler hands the store one [`Chain::request`] per create, update, patch and
//! delete; the registry runs it where upstream's generic store does (mutation on
//! the decoded object of a create and on the updated object of every attempt of an
//! update's read-modify-write loop, validation on the final object; see
//! `ferrokube_registry::Admission`).
//!
//! Registering a plugin: a file here with a `new(&PluginInit<'_>)` factory, and its row in
//! [`PLUGINS`] (upstream's name, position and default).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::UserInfo;

use crate::authz_webhook::Authorization;
use ferrokube_registry::{Admission, Admit, Registry};
use serde_json::Value;

use crate::security::ClusterState;
use metrics::Step;

mod always_deny;
mod always_pull_images;
mod anti_affinity;
mod certificates;
mod config;
mod csr_strategy;
mod default_ingress_class;
mod default_storage_class;
mod default_toleration_seconds;
mod deny_external_ips;
mod direct;
mod escalation;
mod event_rate_limit;
mod extended_resource_toleration;
mod image_policy;
mod limit_ranger;
pub(crate) mod metrics;
mod namespace_autoprovision;
mod namespace_lifecycle;
mod node_restriction;
mod owner_references;
mod pod_node_selector;
mod pod_security;
mod pod_toleration_restriction;
mod priority;
mod pvc_resize;
mod resource_quota;
mod runtime_class;
mod service_account;
mod storage_protection;
mod taint_nodes_by_condition;
mod validating_policy;
mod webhook;

pub(crate) const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Upstream `admission.Operation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    /// Upstream's spelling (`CREATE`, ...), as in AdmissionReview.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// What a plugin knows about the request (upstream `admission.Attributes` without
/// the objects, which the plugin methods take).
#[derive(Clone, Debug)]
pub(crate) struct Attributes {
    /// Shared: every plugin call of a request gets its own `Attributes`.
    pub user: Arc<UserInfo>,
    pub operation: Operation,
    /// Group, version, kind and plural of the addressed resource.
    pub resource: &'static ResourceInfo,
    /// `status`, `scale`, ...; empty for the main resource.
    pub subresource: String,
    /// Empty for cluster-scoped resources.
    pub namespace: String,
    /// Empty on a create whose object has only `generateName`.
    pub name: String,
    pub dry_run: bool,
    /// Warnings for the response (`Warning` headers), shared by every call of the
    /// request's chain.
    pub warnings: Warnings,
    /// Audit annotations for the request's audit event (upstream
    /// `Attributes.AddAnnotation`), shared with the request's audit record.
    pub audit_annotations: crate::audit::AuditAnnotations,
    /// Annotations a validating plugin puts on the object. Upstream's validating
    /// plugins may still change the object (ImagePolicyWebhook marks a pod it admitted
    /// without an answer); here validation sees it read-only, and these are set on it
    /// once the chain has admitted it.
    pub object_annotations: ObjectAnnotations,
}

/// See [`Attributes::object_annotations`]; shared by every call of a request's chain.
#[derive(Clone, Debug, Default)]
pub(crate) struct ObjectAnnotations(Arc<parking_lot::Mutex<Vec<(String, String)>>>);

impl ObjectAnnotations {
    pub(crate) fn add(&self, key: &str, value: &str) {
        self.0.lock().push((key.to_owned(), value.to_owned()));
    }

    /// Sets the annotations added since the last call on `object`.
    fn apply(&self, object: &mut Value) {
        let added = std::mem::take(&mut *self.0.lock());
        if added.is_empty() {
            return;
        }
        let meta = &mut object["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = Value::Object(Default::default());
        }
        for (key, value) in added {
            meta["annotations"][key] = Value::String(value);
        }
    }
}

/// The warnings plugins add to a response: the request's one collection, which the
/// store's field validation adds to as well.
pub(crate) use ferrokube_registry::store::Warnings;

impl Attributes {
    pub(crate) fn new(
        user: impl Into<Arc<UserInfo>>,
        operation: Operation,
        resource: &'static ResourceInfo,
    ) -> Self {
        Attributes {
            user: user.into(),
            operation,
            resource,
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            dry_run: false,
            warnings: Warnings::default(),
            audit_annotations: Default::default(),
            object_annotations: Default::default(),
        }
    }

    /// Adds a `Warning` header to the response.
    pub(crate) fn warn(&self, text: String) {
        self.warnings.add(text);
    }

    pub(crate) fn in_namespace(mut self, ns: Option<&str>) -> Self {
        self.namespace = ns.unwrap_or("").to_string();
        self
    }

    pub(crate) fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Whether the request addresses the core (`""` group) resource `plural`.
    pub(crate) fn is_core(&self, plural: &str) -> bool {
        self.resource.group.is_empty() && self.resource.plural == plural
    }

    /// Whether the request writes a pod itself (`pods`, no subresource) with one of
    /// `operations`: what the pod-mutating plugins handle.
    pub(crate) fn is_pod_write(&self, operations: &[Operation]) -> bool {
        self.is_core("pods") && self.subresource.is_empty() && operations.contains(&self.operation)
    }

    /// Whether the request addresses `plural` in `group`.
    pub(crate) fn is(&self, group: &str, plural: &str) -> bool {
        self.resource.group == group && self.resource.plural == plural
    }

    /// Upstream `admission.NewForbidden`: 403 `<resource> "<name>" is forbidden:
    /// <err>` (without the name when the request has none).
    pub(crate) fn forbidden(&self, err: impl std::fmt::Display) -> ApiError {
        self.forbidden_named(&self.name, err)
    }

    /// [`Attributes::forbidden`] for the object `name`.
    pub(crate) fn forbidden_named(&self, name: &str, err: impl std::fmt::Display) -> ApiError {
        ApiError::forbidden(self.resource.group, self.resource.plural, name, err)
    }
}

pub(crate) fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or("")
}

/// One admission plugin (upstream `admission.Interface` with `MutationInterface`
/// and `ValidationInterface`). Both steps default to admitting; a plugin overrides
/// the ones it has. Plugins read cluster state from the registry's watch caches
/// (kept in [`PluginInit`] by the factory), never from storage per request unless
/// they must.
#[async_trait]
pub(crate) trait Plugin: Send + Sync {
    /// Upstream's plugin name (`LimitRanger`, ...).
    fn name(&self) -> &'static str;

    /// Upstream `Handles(operation)` plus the resource filter: the chain skips a
    /// plugin for requests it does not handle.
    fn handles(&self, a: &Attributes) -> bool;

    /// Mutation: may change `object` (CREATE, UPDATE; `old` is the stored object on
    /// UPDATE). An error rejects the request.
    async fn admit(
        &self,
        _a: &Attributes,
        _object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Validation of the final object; on DELETE `object` is None and `old` the
    /// object being deleted. An error rejects the request.
    async fn validate(
        &self,
        _a: &Attributes,
        _object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }
}

/// What plugin factories get: the registry (stores and their watch caches), the
/// authorizer chain, the authorizers' cluster view and the admission options.
pub(crate) struct PluginInit<'a> {
    pub registry: &'a Arc<Registry>,
    pub authorizer: &'a Arc<Authorization>,
    pub security: &'a Arc<ClusterState>,
    pub options: &'a AdmissionPlugins,
}

type Factory = fn(&PluginInit<'_>) -> Result<Arc<dyn Plugin>, String>;

/// A known plugin: upstream's name, whether upstream enables it by default, and
/// Ferrokube's implementation (None: the name is accepted, nothing runs).
pub(crate) struct Registration {
    pub name: &'static str,
    pub default_on: bool,
    pub new: Option<Factory>,
}

const fn known(name: &'static str, default_on: bool) -> Registration {
    Registration {
        name,
        default_on,
        new: None,
    }
}

const fn plugin(name: &'static str, default_on: bool, new: Factory) -> Registration {
    Registration {
        name,
        default_on,
        new: Some(new),
    }
}

/// Every plugin name upstream's kube-apiserver 1.33 knows, in upstream's order
/// (`pkg/kubeapiserver/options/plugins.go` `AllOrderedPlugins`), with upstream's
/// default-on set. Deviation: NodeRestriction is on by default (upstream leaves it
/// to the installer; kubeadm enables it), since Ferrokube's kubelets use node
/// identities from the start. NamespaceLifecycle's namespace checks on writes are the
/// store's own, the plugin keeps the immortal namespaces.
pub(crate) const PLUGINS: &[Registration] = &[
    known("AlwaysAdmit", false),
    plugin(
        namespace_autoprovision::NAME,
        false,
        namespace_autoprovision::new,
    ),
    plugin(namespace_lifecycle::NAME, true, namespace_lifecycle::new),
    known("NamespaceExists", false),
    plugin(anti_affinity::NAME, false, anti_affinity::new),
    plugin(limit_ranger::NAME, true, limit_ranger::new),
    plugin(service_account::NAME, true, service_account::new),
    plugin(node_restriction::NAME, true, node_restriction::new),
    plugin(
        taint_nodes_by_condition::NAME,
        true,
        taint_nodes_by_condition::new,
    ),
    plugin(always_pull_images::NAME, false, always_pull_images::new),
    plugin(image_policy::NAME, false, image_policy::new),
    plugin(pod_security::NAME, true, pod_security::new),
    plugin(pod_node_selector::NAME, false, pod_node_selector::new),
    plugin(priority::NAME, true, priority::new),
    plugin(
        default_toleration_seconds::NAME,
        true,
        default_toleration_seconds::new,
    ),
    plugin(
        pod_toleration_restriction::NAME,
        false,
        pod_toleration_restriction::new,
    ),
    plugin(event_rate_limit::NAME, false, event_rate_limit::new),
    plugin(
        extended_resource_toleration::NAME,
        false,
        extended_resource_toleration::new,
    ),
    plugin(
        default_storage_class::NAME,
        true,
        default_storage_class::new,
    ),
    plugin(storage_protection::NAME, true, storage_protection::new),
    plugin(owner_references::NAME, false, owner_references::new),
    plugin(pvc_resize::NAME, true, pvc_resize::new),
    plugin(runtime_class::NAME, true, runtime_class::new),
    plugin(certificates::APPROVAL, true, certificates::new_approval),
    plugin(certificates::SIGNING, true, certificates::new_signing),
    known("ClusterTrustBundleAttest", true),
    plugin(
        certificates::SUBJECT_RESTRICTION,
        true,
        certificates::new_subject_restriction,
    ),
    plugin(
        default_ingress_class::NAME,
        true,
        default_ingress_class::new,
    ),
    plugin(deny_external_ips::NAME, false, deny_external_ips::new),
    known("PodTopologyLabels", true),
    known("MutatingAdmissionPolicy", false),
    plugin(webhook::MUTATING, true, webhook::new_mutating),
    plugin(validating_policy::NAME, true, validating_policy::new),
    plugin(webhook::VALIDATING, true, webhook::new_validating),
    plugin(resource_quota::NAME, true, resource_quota::new),
    plugin(always_deny::NAME, false, always_deny::new),
];

/// The admission options: which plugins are on (`--enable-admission-plugins`,
/// `--disable-admission-plugins`) and the plugins' own flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionPlugins {
    enabled: BTreeSet<&'static str>,
    /// `--default-not-ready-toleration-seconds` (DefaultTolerationSeconds).
    pub default_not_ready_toleration_seconds: i64,
    /// `--default-unreachable-toleration-seconds` (DefaultTolerationSeconds).
    pub default_unreachable_toleration_seconds: i64,
    /// Plugins' configurations from `--admission-control-config-file`, by name.
    configurations: BTreeMap<String, Value>,
}

impl Default for AdmissionPlugins {
    /// Upstream's default-on set (see [`PLUGINS`]).
    fn default() -> Self {
        AdmissionPlugins {
            enabled: PLUGINS
                .iter()
                .filter(|p| p.default_on)
                .map(|p| p.name)
                .collect(),
            default_not_ready_toleration_seconds: 300,
            default_unreachable_toleration_seconds: 300,
            configurations: BTreeMap::new(),
        }
    }
}

impl AdmissionPlugins {
    /// Applies the enable and disable lists (upstream plugin names; unknown names
    /// are an error, as upstream's).
    pub fn with_flags(mut self, enable: &[String], disable: &[String]) -> Result<Self, String> {
        for (names, on) in [(enable, true), (disable, false)] {
            for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
                self.set(n, on)?;
            }
        }
        Ok(self)
    }

    /// Turns one plugin on or off by upstream name.
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), String> {
        let Some(p) = PLUGINS.iter().find(|p| p.name == name) else {
            let known: Vec<&str> = PLUGINS.iter().map(|p| p.name).collect();
            return Err(format!(
                "unknown admission plugin {name:?}; known: {}",
                known.join(", ")
            ));
        };
        if on {
            self.enabled.insert(p.name);
        } else {
            self.enabled.remove(p.name);
        }
        Ok(())
    }

    /// Reads `--admission-control-config-file` (an `AdmissionConfiguration`); each
    /// plugin checks its own configuration when the server starts.
    pub fn read_config_file(&mut self, path: &std::path::Path) -> Result<(), String> {
        self.configurations = config::read(path)?;
        Ok(())
    }

    /// The configuration the AdmissionConfiguration gives plugin `name`, if any.
    pub(crate) fn configuration(&self, name: &str) -> Option<&Value> {
        self.configurations.get(name)
    }

    /// Whether the plugin named `name` is on.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.enabled.contains(name)
    }
}

/// The enabled plugins in order, and the always-on RBAC escalation check.
pub(crate) struct Chain {
    plugins: Vec<Arc<dyn Plugin>>,
    authorizer: Arc<Authorization>,
    security: Arc<ClusterState>,
}

impl Chain {
    pub(crate) fn new(init: &PluginInit<'_>) -> Result<Chain, String> {
        let mut plugins = Vec::new();
        for p in PLUGINS.iter().filter(|p| init.options.is_enabled(p.name)) {
            match p.new {
                Some(new) => plugins.push(new(init).map_err(|e| format!("{}: {e}", p.name))?),
                // What NamespaceExists checks, the store enforces itself (a write into
                // a missing namespace is refused); AlwaysAdmit checks nothing.
                None if matches!(p.name, "NamespaceExists" | "AlwaysAdmit") => {}
                None => tracing::warn!(
                    plugin = p.name,
                    "admission plugin enabled but not implemented by Ferrokube; it does nothing"
                ),
            }
        }
        let names: Vec<&str> = plugins.iter().map(|p| p.name()).collect();
        tracing::info!(plugins = ?names, "admission chain");
        Ok(Chain {
            plugins,
            authorizer: init.authorizer.clone(),
            security: init.security.clone(),
        })
    }

    /// Mutating admission: every plugin that handles the request, in order.
    pub(crate) async fn admit(
        &self,
        a: &Attributes,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        for p in self.plugins.iter().filter(|p| p.handles(a)) {
            let start = Instant::now();
            let admitted = p.admit(a, object, old).await;
            metrics::observe_plugin(
                p.name(),
                Step::Admit,
                a.operation,
                start.elapsed(),
                admitted.is_err(),
            );
            admitted?;
        }
        // Upstream's CSR strategy, which no flag turns off (see `csr_strategy`).
        csr_strategy::prepare(a, object, old, || {
            jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
        });
        Ok(())
    }

    /// Validating admission: RBAC escalation prevention, then every plugin that
    /// handles the request, in order.
    pub(crate) async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if let Some(new) = object
            && escalation::applies(a)
        {
            escalation::check(&self.authorizer, &self.security, a, new, old).await?;
        }
        for p in self.plugins.iter().filter(|p| p.handles(a)) {
            let start = Instant::now();
            let validated = p.validate(a, object, old).await;
            metrics::observe_plugin(
                p.name(),
                Step::Validate,
                a.operation,
                start.elapsed(),
                validated.is_err(),
            );
            validated?;
        }
        Ok(())
    }

    /// The store's hook for one request. `a.operation` is set per call (CREATE
    /// without an old object, UPDATE with one, DELETE from the delete path).
    pub(crate) fn request(self: &Arc<Self>, a: Attributes) -> Admit {
        Admit(Arc::new(RequestAdmission {
            chain: self.clone(),
            attributes: a,
        }))
    }
}

/// [`Chain`] bound to one request, as the registry calls it.
struct RequestAdmission {
    chain: Arc<Chain>,
    attributes: Attributes,
}

impl RequestAdmission {
    fn attributes(&self, operation: Operation, object: &Value) -> Attributes {
        let mut a = self.attributes.clone();
        a.operation = operation;
        if a.name.is_empty() {
            a.name = name_of(object).to_string();
        }
        a
    }
}

fn write_operation(old: Option<&Value>) -> Operation {
    if old.is_some() {
        Operation::Update
    } else {
        Operation::Create
    }
}

#[async_trait]
impl Admission for RequestAdmission {
    async fn mutate(&self, new: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        let a = self.attributes(write_operation(old), new);
        let start = Instant::now();
        let admitted = self.chain.admit(&a, new, old).await;
        metrics::observe_step(Step::Admit, a.operation, start.elapsed(), admitted.is_err());
        admitted
    }

    async fn validate(&self, new: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        let a = self.attributes(write_operation(old), new);
        let start = Instant::now();
        let validated = self.chain.validate(&a, Some(new), old).await;
        metrics::observe_step(
            Step::Validate,
            a.operation,
            start.elapsed(),
            validated.is_err(),
        );
        validated?;
        a.object_annotations.apply(new);
        Ok(())
    }

    async fn validate_delete(&self, current: &Value) -> Result<(), ApiError> {
        let a = self.attributes(Operation::Delete, current);
        let start = Instant::now();
        let validated = self.chain.validate(&a, None, Some(current)).await;
        metrics::observe_step(
            Step::Validate,
            a.operation,
            start.elapsed(),
            validated.is_err(),
        );
        validated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_use_upstream_names_and_defaults() {
        let d = AdmissionPlugins::default();
        for on in [
            "NamespaceLifecycle",
            "LimitRanger",
            "ServiceAccount",
            "NodeRestriction",
            "Priority",
            "DefaultTolerationSeconds",
            "ResourceQuota",
            "PodSecurity",
        ] {
            assert!(d.is_enabled(on), "{on}");
        }
        for off in ["AlwaysPullImages", "PodNodeSelector", "AlwaysDeny"] {
            assert!(!d.is_enabled(off), "{off}");
        }
        let off = d
            .clone()
            .with_flags(&[], &["ServiceAccount".into()])
            .unwrap();
        assert!(!off.is_enabled("ServiceAccount") && off.is_enabled("NodeRestriction"));
        let on = off
            .with_flags(&["ServiceAccount".into()], &["NodeRestriction".into()])
            .unwrap();
        assert!(on.is_enabled("ServiceAccount") && !on.is_enabled("NodeRestriction"));
        let e = d.with_flags(&["Bogus".into()], &[]).unwrap_err();
        assert!(e.contains("unknown admission plugin \"Bogus\""), "{e}");
    }

    #[test]
    fn plugin_table_has_unique_names() {
        let names: BTreeSet<&str> = PLUGINS.iter().map(|p| p.name).collect();
        assert_eq!(names.len(), PLUGINS.len());
        assert_eq!(Operation::Connect.as_str(), "CONNECT");
    }
}
