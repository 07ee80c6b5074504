//! MutatingAdmissionWebhook and ValidatingAdmissionWebhook (upstream
//! `k8s.io/apiserver/pkg/admission/plugin/webhook`): the
//! admissionregistration.k8s.io/v1 configurations choose webhooks by rules
//! (operations, apiGroups, apiVersions, resources with `*` and `res/sub`, scope), a
//! namespace selector and an object selector; each chosen webhook gets an
//! `admission.k8s.io/v1` AdmissionReview over HTTPS (`clientConfig.url`, or
//! `clientConfig.service` reached through the Service's endpoints, verified against
//! `clientConfig.caBundle` with the name `<service>.<namespace>.svc`) within
//! `timeoutSeconds`. A denial is the webhook's status (`admission webhook "x" denied
//! the request: ...`); a failed call is a 500 under `failurePolicy: Fail` and
//! ignored under `Ignore`. Mutating webhooks run one after another and answer with
//! JSONPatches; `reinvocationPolicy: IfNeeded` calls a webhook once more when a later
//! one changed the object. Validating webhooks run concurrently. Webhook warnings
//! become `Warning` headers. Requests on the webhook configurations themselves are
//! never sent to webhooks, as upstream.
//!
//! Deviation: `matchPolicy: Equivalent` matches like `Exact`, since every resource is
//! served at exactly one group-version here. Services are reached through their
//! endpoints (upstream's `--enable-aggregator-routing` resolver), not the ClusterIP.
//! `matchConditions` (CEL, [`ferrokube_cel`]) are evaluated over `object`, `oldObject`,
//! `request` and `authorizer` after the rules and selectors: a false condition skips
//! the webhook, an evaluation error follows the failure policy. The
//! configurations are read from the watch cache, as upstream reads an informer's, once
//! the cache has applied this apiserver's own writes ([`fresh`]); their webhooks are
//! parsed and their `matchConditions` compiled once per version of the configurations.
//! The HTTPS calls go through [`crate::webhook_client`]. Without a caBundle nothing
//! is trusted, so such a
//! webhook's calls fail (upstream falls back to the system roots).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::labels::Selector;
use ferrokube_registry::{Registry, Store};
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::metrics::{self, Rejection, Step, WebhookCall};
use super::{Attributes, Operation, Plugin, PluginInit};
use crate::webhook_client::WebhookClient;
pub(super) use crate::webhook_client::fresh_get;

pub(crate) const MUTATING: &str = "MutatingAdmissionWebhook";
pub(crate) const VALIDATING: &str = "ValidatingAdmissionWebhook";

/// One webhook, whichever kind of configuration it came from.
#[derive(Clone, Debug)]
struct Hook {
    name: String,
    rules: Vec<ar::RuleWithOperations>,
    client: ar::WebhookClientConfig,
    fail_open: bool,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    side_effects: String,
    timeout: Duration,
    reinvoke_if_needed: bool,
    /// The `matchConditions`, compiled when the configuration was loaded (the
    /// configuration's validation compiled them; one that no longer compiles is an
    /// error when the webhook would be called).
    conditions: Arc<Result<Vec<(String, ferrokube_cel::Program)>, String>>,
    /// The AdmissionReview apiVersion the webhook speaks: v1, or v1beta1 when it lists
    /// only that (upstream sends the first version of the list it knows).
    review_version: &'static str,
}

/// Upstream picks the first of `admissionReviewVersions` it speaks.
fn review_version(versions: &[String]) -> &'static str {
    versions
        .iter()
        .find_map(|v| match v.as_str() {
            "v1" => Some(REVIEW_V1),
            "v1beta1" => Some(REVIEW_V1BETA1),
            _ => None,
        })
        .unwrap_or(REVIEW_V1)
}

const REVIEW_V1: &str = "admission.k8s.io/v1";
const REVIEW_V1BETA1: &str = "admission.k8s.io/v1beta1";

fn timeout_of(seconds: Option<i32>) -> Duration {
    Duration::from_secs(seconds.filter(|s| *s > 0).unwrap_or(10) as u64)
}

impl From<ar::ValidatingWebhook> for Hook {
    fn from(w: ar::ValidatingWebhook) -> Self {
        Hook {
            name: w.name,
            rules: w.rules.unwrap_or_default(),
            client: w.client_config,
            fail_open: w.failure_policy.as_deref() == Some("Ignore"),
            namespace_selector: w.namespace_selector,
            object_selector: w.object_selector,
            side_effects: w.side_effects,
            timeout: timeout_of(w.timeout_seconds),
            reinvoke_if_needed: false,
            conditions: compile_conditions(w.match_conditions.unwrap_or_default()),
            review_version: review_version(&w.admission_review_versions),
        }
    }
}

impl From<ar::MutatingWebhook> for Hook {
    fn from(w: ar::MutatingWebhook) -> Self {
        Hook {
            name: w.name,
            rules: w.rules.unwrap_or_default(),
            client: w.client_config,
            fail_open: w.failure_policy.as_deref() == Some("Ignore"),
            namespace_selector: w.namespace_selector,
            object_selector: w.object_selector,
            side_effects: w.side_effects,
            timeout: timeout_of(w.timeout_seconds),
            reinvoke_if_needed: w.reinvocation_policy.as_deref() == Some("IfNeeded"),
            conditions: compile_conditions(w.match_conditions.unwrap_or_default()),
            review_version: review_version(&w.admission_review_versions),
        }
    }
}

fn compile_conditions(
    conditions: Vec<ar::MatchCondition>,
) -> Arc<Result<Vec<(String, ferrokube_cel::Program)>, String>> {
    let compiled = conditions
        .into_iter()
        .map(|c| {
            ferrokube_cel::compile(&c.expression, ferrokube_cel::WEBHOOK_VARIABLES)
                .map(|program| (c.name.clone(), program))
                .map_err(|e| format!("matchCondition '{}': {e}", c.name))
        })
        .collect();
    Arc::new(compiled)
}

/// The objects of `store` under `sub_prefix` (`""`: all, `"ns/"`: one namespace's) as
/// its watch cache has them, once the cache has applied this apiserver's own writes
/// (a configuration created through this apiserver applies to its next request).
pub(super) async fn fresh(store: &Store, sub_prefix: &str) -> Vec<Arc<Value>> {
    store.cache().sync_own_writes().await;
    crate::security::cached(store, sub_prefix)
}

/// Upstream `rules.Matcher`: whether `rule` covers the request.
pub(super) fn rule_matches(rule: &ar::RuleWithOperations, a: &Attributes) -> bool {
    let any_or = |list: &Option<Vec<String>>, value: &str| {
        list.iter().flatten().any(|v| v == "*" || v == value)
    };
    if !any_or(&rule.operations, a.operation.as_str())
        || !any_or(&rule.api_groups, a.resource.group)
        || !any_or(&rule.api_versions, a.resource.version)
    {
        return false;
    }
    let resource_ok = rule.resources.iter().flatten().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == a.resource.plural) && (sub == "*" || sub == a.subresource)
    });
    if !resource_ok {
        return false;
    }
    // Namespaces are cluster-scoped even though their requests name a namespace.
    let is_namespace = a.is_core("namespaces");
    match rule.scope.as_deref().unwrap_or("*") {
        "Cluster" => a.namespace.is_empty() || is_namespace,
        "Namespaced" => !is_namespace && !a.namespace.is_empty(),
        _ => true,
    }
}

pub(super) fn labels_of(object: Option<&Value>) -> BTreeMap<String, String> {
    object
        .and_then(|o| serde_json::from_value(o["metadata"]["labels"].clone()).ok())
        .unwrap_or_default()
}

pub(super) fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, ApiError> {
    let Some(selector) = selector else {
        return Ok(true);
    };
    let s = Selector::from_label_selector(selector)
        .map_err(|e| ApiError::internal(format!("invalid label selector: {e}")))?;
    Ok(s.matches(labels))
}

/// Upstream's object and namespace selectors of a webhook or policy: the object (or,
/// on update and delete, the old object) must match the object selector; the
/// namespace's labels (the object's own for a Namespace; always a match for other
/// cluster-scoped objects) the namespace selector.
pub(super) async fn selectors_match(
    namespaces: &Store,
    object_selector: Option<&LabelSelector>,
    namespace_selector: Option<&LabelSelector>,
    a: &Attributes,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, ApiError> {
    let object_ok = selector_matches(object_selector, &labels_of(object))?
        || (old.is_some() && selector_matches(object_selector, &labels_of(old))?);
    if !object_ok {
        return Ok(false);
    }
    let selector = namespace_selector.filter(|s| {
        s.match_labels.as_ref().is_some_and(|m| !m.is_empty())
            || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
    });
    let Some(selector) = selector else {
        return Ok(true);
    };
    let labels = if a.is_core("namespaces") {
        labels_of(object.or(old))
    } else if a.namespace.is_empty() {
        // Cluster-scoped objects are never exempted by a namespace selector.
        return Ok(true);
    } else {
        match fresh_get(namespaces, None, &a.namespace).await? {
            Some(ns) => labels_of(Some(&ns)),
            None => BTreeMap::new(),
        }
    };
    selector_matches(Some(selector), &labels)
}

/// The CEL `request` variable: the AdmissionReview request without the objects
/// (which are the `object` and `oldObject` variables).
pub(super) fn cel_request(a: &Attributes) -> Value {
    let mut review = review_request(REVIEW_V1, "", a, None, None);
    let mut request = review["request"].take();
    if let Some(r) = request.as_object_mut() {
        r.remove("object");
        r.remove("oldObject");
        r.remove("uid");
    }
    request
}

/// Evaluates the webhook's `matchConditions` over `object`, `oldObject` and `request`
/// (the configuration's validation compiled them; one that no longer compiles is an
/// error here).
fn conditions_hold(
    hook: &Hook,
    a: &Attributes,
    object: Option<&Value>,
    old: Option<&Value>,
    authorizer: &Arc<dyn ferrokube_auth::authz::Authorizer>,
) -> Result<bool, String> {
    let conditions = hook.conditions.as_ref().as_ref().map_err(Clone::clone)?;
    let mut activation = ferrokube_cel::Activation::new();
    activation
        .bind_json("object", object.unwrap_or(&Value::Null))
        .bind_json("oldObject", old.unwrap_or(&Value::Null))
        .bind_json("request", &cel_request(a))
        .bind_json("namespaceObject", &Value::Null)
        .bind(
            "authorizer",
            super::validating_policy::cel_authorizer(authorizer, a),
        );
    ferrokube_cel::match_conditions(conditions, &activation)
}

/// The AdmissionReview request of one call (`admission.k8s.io/v1`).
fn review_request(
    version: &str,
    uid: &str,
    a: &Attributes,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let info = a.resource;
    let (kind_group, kind_version, kind) = match info.subresource(&a.subresource) {
        Some(sub) => (
            sub.group.unwrap_or(info.group),
            sub.version.unwrap_or(info.version),
            sub.kind,
        ),
        None => (info.group, info.version, info.kind),
    };
    let gvk = json!({"group": kind_group, "version": kind_version, "kind": kind});
    let gvr = json!({"group": info.group, "version": info.version, "resource": info.plural});
    let options_kind = match a.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => "",
    };
    let mut user = json!({"username": a.user.name, "groups": a.user.groups});
    if !a.user.uid.is_empty() {
        user["uid"] = json!(a.user.uid);
    }
    if !a.user.extra.is_empty() {
        user["extra"] = json!(a.user.extra);
    }
    let mut request = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": a.name,
        "operation": a.operation.as_str(),
        "userInfo": user,
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
    });
    if !a.subresource.is_empty() {
        request["subResource"] = json!(a.subresource);
        request["requestSubResource"] = json!(a.subresource);
    }
    if !a.namespace.is_empty() {
        request["namespace"] = json!(a.namespace);
    }
    if !options_kind.is_empty() {
        request["options"] = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
    }
    json!({"kind": "AdmissionReview", "apiVersion": version, "request": request})
}

/// A webhook's verdict.
#[derive(Debug, Default, PartialEq)]
struct Verdict {
    allowed: bool,
    status: Value,
    patch: Option<Vec<u8>>,
    warnings: Vec<String>,
    /// `response.auditAnnotations`, for the request's audit event.
    audit_annotations: Vec<(String, String)>,
}

/// Upstream `VerifyAdmissionResponse`: the response must be an AdmissionReview of the
/// request's version answering its uid (v1beta1 may leave the uid out), and a patch
/// must be a base64 JSONPatch.
fn parse_response(version: &str, uid: &str, body: &[u8]) -> Result<Verdict, String> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    if review["apiVersion"] != version || review["kind"] != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of {version}, Kind=AdmissionReview, got {}, Kind={}",
            review["apiVersion"].as_str().unwrap_or(""),
            review["kind"].as_str().unwrap_or("")
        ));
    }
    let response = &review["response"];
    if !response.is_object() {
        return Err("webhook response was absent".into());
    }
    let got = response["uid"].as_str().unwrap_or("");
    if got != uid && !(version == REVIEW_V1BETA1 && got.is_empty()) {
        return Err(format!("expected response.uid={uid:?}, got {got:?}"));
    }
    let patch = match response["patch"].as_str().filter(|p| !p.is_empty()) {
        None => None,
        Some(p) => {
            let ty = response["patchType"].as_str().unwrap_or("");
            if ty != "JSONPatch" {
                return Err(format!(
                    "webhook returned invalid patchType: {ty:?}; must be \"JSONPatch\""
                ));
            }
            use base64::Engine;
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(p)
                    .map_err(|e| format!("webhook returned an invalid patch: {e}"))?,
            )
        }
    };
    Ok(Verdict {
        allowed: response["allowed"].as_bool().unwrap_or(false),
        status: response["status"].clone(),
        patch,
        warnings: response["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str().map(str::to_string))
            .collect(),
        audit_annotations: response["auditAnnotations"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
    })
}

/// Upstream: a webhook's `auditAnnotations` are added to the request's audit event
/// as `<webhook name>/<key>`.
fn annotate(a: &Attributes, hook: &str, v: &Verdict) {
    for (key, value) in &v.audit_annotations {
        a.audit_annotations
            .add(format!("{hook}/{key}"), value.clone());
    }
}

/// Upstream `webhookerrors.ToStatusErr`: the webhook's status with the code raised to
/// at least 400 and the message prefixed with who denied it.
fn denial(hook: &str, status: &Value) -> ApiError {
    let denied_by = format!("admission webhook {hook:?} denied the request");
    let code = status["code"]
        .as_u64()
        .map(|c| c as u16)
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let message = status["message"].as_str().filter(|m| !m.is_empty());
    let reason = status["reason"].as_str().filter(|r| !r.is_empty());
    let message = match (message, reason) {
        (Some(m), _) => format!("{denied_by}: {m}"),
        (None, Some(r)) => format!("{denied_by}: {r}"),
        (None, None) => format!("{denied_by} without explanation"),
    };
    ApiError {
        code,
        reason: reason.unwrap_or("").to_string(),
        message,
        details: None,
    }
}

/// The webhooks of both kinds and what they need to reach them.
struct Webhooks {
    registry: Arc<Registry>,
    mutating: Arc<Store>,
    validating: Arc<Store>,
    namespaces: Arc<Store>,
    /// Reaches the webhooks (Services through their Endpoints).
    client: WebhookClient,
    /// The authorizer chain, for `authorizer` in match conditions.
    authorizer: Arc<dyn ferrokube_auth::authz::Authorizer>,
    /// The webhooks last loaded from each kind of configuration, with the cached
    /// configuration versions they came from.
    loaded_mutating: Loaded,
    loaded_validating: Loaded,
}

/// Parsed webhooks and the cache's configuration objects they were parsed from (the
/// cache replaces an object's `Arc` when the object changes; holding them keeps their
/// addresses from being reused).
type Loaded = parking_lot::Mutex<Option<(Vec<Arc<Value>>, Arc<Vec<Hook>>)>>;

fn store(init: &PluginInit<'_>, group: &str, plural: &str) -> Result<Arc<Store>, String> {
    let version = "v1";
    ferrokube_api::resources::lookup(group, version, plural)
        .and_then(|info| init.registry.store_for(info))
        .cloned()
        .ok_or_else(|| format!("no store for {plural}"))
}

fn webhooks(init: &PluginInit<'_>) -> Result<Arc<Webhooks>, String> {
    const AR: &str = "admissionregistration.k8s.io";
    Ok(Arc::new(Webhooks {
        registry: init.registry.clone(),
        mutating: store(init, AR, "mutatingwebhookconfigurations")?,
        validating: store(init, AR, "validatingwebhookconfigurations")?,
        namespaces: store(init, "", "namespaces")?,
        client: WebhookClient::new(init.registry)?,
        authorizer: init.authorizer.clone(),
        loaded_mutating: Loaded::default(),
        loaded_validating: Loaded::default(),
    }))
}

pub(crate) fn new_mutating(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(MutatingWebhook(webhooks(init)?)))
}

pub(crate) fn new_validating(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(ValidatingWebhook(webhooks(init)?)))
}

/// Requests no webhook sees (upstream `IsExemptAdmissionConfigurationResource`).
pub(super) fn handled(a: &Attributes) -> bool {
    a.resource.group != "admissionregistration.k8s.io"
        && matches!(
            a.operation,
            Operation::Create | Operation::Update | Operation::Delete | Operation::Connect
        )
}

impl Webhooks {
    /// The configurations' webhooks, configurations sorted by name as upstream: from
    /// the watch cache, parsed again only when a configuration changed.
    async fn load<T, H>(&self, store: &Store, loaded: &Loaded) -> Arc<Vec<Hook>>
    where
        T: serde::de::DeserializeOwned,
        H: Into<Hook>,
        T: WebhookList<H>,
    {
        let objects = fresh(store, "").await;
        if let Some((seen, hooks)) = &*loaded.lock()
            && seen.len() == objects.len()
            && seen.iter().zip(&objects).all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return hooks.clone();
        }
        let mut configs: Vec<(String, Vec<H>)> = objects
            .iter()
            .filter_map(|o| serde_json::from_value::<T>((**o).clone()).ok())
            .map(T::into_hooks)
            .collect();
        configs.sort_by(|a, b| a.0.cmp(&b.0));
        let hooks: Arc<Vec<Hook>> = Arc::new(
            configs
                .into_iter()
                .flat_map(|(_, hooks)| hooks.into_iter().map(Into::into))
                .collect(),
        );
        *loaded.lock() = Some((objects, hooks.clone()));
        hooks
    }

    /// Whether `hook` applies to the request (rules, then selectors, then
    /// `matchConditions`; a condition that fails to evaluate follows the failure
    /// policy: skipped under `Ignore`, an error under `Fail`).
    async fn applies(
        &self,
        hook: &Hook,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<bool, ApiError> {
        if !hook.rules.iter().any(|r| rule_matches(r, a)) {
            return Ok(false);
        }
        if !selectors_match(
            &self.namespaces,
            hook.object_selector.as_ref(),
            hook.namespace_selector.as_ref(),
            a,
            object,
            old,
        )
        .await?
        {
            return Ok(false);
        }
        if hook.conditions.as_ref().as_ref().is_ok_and(Vec::is_empty) {
            return Ok(true);
        }
        match conditions_hold(hook, a, object, old, &self.authorizer) {
            Ok(matched) => Ok(matched),
            Err(e) if hook.fail_open => {
                tracing::warn!(webhook = %hook.name, error = %e, "matchConditions failed, skipping the webhook");
                Ok(false)
            }
            Err(e) => Err(ApiError::internal(format!(
                "failed to evaluate the matchConditions of webhook {:?}: {e}",
                hook.name
            ))),
        }
    }

    /// Sends one AdmissionReview and reads the verdict (`Err`: the call failed).
    async fn call(
        &self,
        hook: &Hook,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Verdict, String> {
        let uid = ferrokube_registry::meta::new_uid();
        let review = review_request(hook.review_version, &uid, a, object, old);
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let answer = self
            .client
            .post_json(&(&hook.client).into(), hook.timeout, body)
            .await
            .map_err(|e| format!("failed to call webhook: {e}"))?;
        parse_response(hook.review_version, &uid, &answer)
    }
}

/// The webhooks of one configuration kind.
trait WebhookList<H> {
    fn into_hooks(self) -> (String, Vec<H>);
}

impl WebhookList<ar::ValidatingWebhook> for ar::ValidatingWebhookConfiguration {
    fn into_hooks(self) -> (String, Vec<ar::ValidatingWebhook>) {
        (
            self.metadata.name.unwrap_or_default(),
            self.webhooks.unwrap_or_default(),
        )
    }
}

impl WebhookList<ar::MutatingWebhook> for ar::MutatingWebhookConfiguration {
    fn into_hooks(self) -> (String, Vec<ar::MutatingWebhook>) {
        (
            self.metadata.name.unwrap_or_default(),
            self.webhooks.unwrap_or_default(),
        )
    }
}

/// What one call ended in, after the failure policy.
enum Outcome {
    Verdict(Verdict),
    /// Failed open (`failurePolicy: Ignore`).
    Ignored,
}

/// Calls `hook` in `step`, applying its failure policy and the dry-run rule; the call
/// is counted in the webhook metrics as upstream's dispatchers count it.
async fn invoke(
    hooks: &Webhooks,
    hook: &Hook,
    step: Step,
    a: &Attributes,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Outcome, ApiError> {
    let start = Instant::now();
    let observe = |code: u16, rejection: Option<Rejection>| {
        metrics::observe_webhook(&WebhookCall {
            name: &hook.name,
            step,
            operation: a.operation,
            elapsed: start.elapsed(),
            code,
            rejection,
        })
    };
    if a.dry_run && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun") {
        observe(400, Some(Rejection::Denied));
        return Err(ApiError::bad_request(format!(
            "admission webhook {:?} does not support dry run",
            hook.name
        )));
    }
    match hooks.call(hook, a, object, old).await {
        Ok(v) if v.allowed => {
            observe(200, None);
            Ok(Outcome::Verdict(v))
        }
        Ok(v) => {
            observe(denial(&hook.name, &v.status).code, Some(Rejection::Denied));
            Ok(Outcome::Verdict(v))
        }
        Err(e) if hook.fail_open => {
            observe(503, None);
            metrics::observe_fail_open(&hook.name, step);
            tracing::warn!(webhook = %hook.name, error = %e, "failed calling webhook, failing open");
            Ok(Outcome::Ignored)
        }
        Err(e) => {
            observe(503, Some(Rejection::CallFailed));
            Err(ApiError::internal(format!(
                "failed calling webhook {:?}: {e}",
                hook.name
            )))
        }
    }
}

struct MutatingWebhook(Arc<Webhooks>);

#[async_trait]
impl Plugin for MutatingWebhook {
    fn name(&self) -> &'static str {
        MUTATING
    }

    fn handles(&self, a: &Attributes) -> bool {
        // No configuration: the request is not the plugin's, so it costs nothing.
        handled(a) && a.operation != Operation::Delete && !self.0.mutating.cache().is_known_empty()
    }

    async fn admit(
        &self,
        a: &Attributes,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let hooks = self
            .0
            .load::<ar::MutatingWebhookConfiguration, ar::MutatingWebhook>(
                &self.0.mutating,
                &self.0.loaded_mutating,
            )
            .await;
        // The object each IfNeeded webhook last saw, to call it again if a later
        // webhook changed the object (once, as upstream).
        let mut seen: Vec<(usize, Value)> = Vec::new();
        for (i, hook) in hooks.iter().enumerate() {
            if !self.0.applies(hook, a, Some(&*object), old).await? {
                continue;
            }
            self.mutate_once(hook, a, object, old).await?;
            if hook.reinvoke_if_needed {
                seen.push((i, object.clone()));
            }
        }
        for (i, before) in seen {
            if *object != before {
                self.mutate_once(&hooks[i], a, object, old).await?;
            }
        }
        Ok(())
    }
}

impl MutatingWebhook {
    async fn mutate_once(
        &self,
        hook: &Hook,
        a: &Attributes,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let called = invoke(&self.0, hook, Step::Admit, a, Some(&*object), old);
        let Outcome::Verdict(v) = crate::metrics::exclude_from_sli(called).await? else {
            return Ok(());
        };
        annotate(a, &hook.name, &v);
        for w in &v.warnings {
            a.warn(w.clone());
        }
        if !v.allowed {
            return Err(denial(&hook.name, &v.status));
        }
        if let Some(patch) = &v.patch {
            let patched =
                ferrokube_apimachinery::patch::json_patch(object, patch).map_err(|e| {
                    ApiError::internal(format!(
                        "admission webhook {:?} returned a patch that does not apply: {e}",
                        hook.name
                    ))
                })?;
            // As upstream decodes the patched object again: fields a patch added get
            // their defaults.
            *object = match self.0.registry.store_for(a.resource) {
                Some(store) => store.strategy().decode(patched)?.object,
                None => patched,
            };
        }
        Ok(())
    }
}

struct ValidatingWebhook(Arc<Webhooks>);

#[async_trait]
impl Plugin for ValidatingWebhook {
    fn name(&self) -> &'static str {
        VALIDATING
    }

    fn handles(&self, a: &Attributes) -> bool {
        handled(a) && !self.0.validating.cache().is_known_empty()
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let hooks = self
            .0
            .load::<ar::ValidatingWebhookConfiguration, ar::ValidatingWebhook>(
                &self.0.validating,
                &self.0.loaded_validating,
            )
            .await;
        let mut chosen = Vec::new();
        for hook in hooks.iter() {
            if self.0.applies(hook, a, object, old).await? {
                chosen.push(hook);
            }
        }
        let calls = chosen
            .iter()
            .map(|hook| invoke(&self.0, hook, Step::Validate, a, object, old));
        // They run at once: the request waits for the slowest, which is what its SLI
        // latency leaves out.
        let outcomes = crate::metrics::exclude_from_sli(futures::future::join_all(calls)).await;
        let mut first_error = None;
        for (hook, outcome) in chosen.iter().zip(outcomes) {
            match outcome {
                Ok(Outcome::Verdict(v)) => {
                    annotate(a, &hook.name, &v);
                    for w in &v.warnings {
                        a.warn(w.clone());
                    }
                    if !v.allowed && first_error.is_none() {
                        first_error = Some(denial(&hook.name, &v.status));
                    }
                }
                Ok(Outcome::Ignored) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_auth::UserInfo;

    fn attrs(op: Operation, group: &str, plural: &str, sub: &str, ns: &str) -> Attributes {
        let info = ferrokube_api::resources::RESOURCES
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap();
        let mut a = Attributes::new(UserInfo::new("alice", ["devs"]), op, info)
            .in_namespace(Some(ns).filter(|n| !n.is_empty()))
            .named("x");
        a.subresource = sub.into();
        a
    }

    fn rule(
        ops: &[&str],
        groups: &[&str],
        resources: &[&str],
        scope: &str,
    ) -> ar::RuleWithOperations {
        let v = |s: &[&str]| Some(s.iter().map(|s| s.to_string()).collect());
        ar::RuleWithOperations {
            operations: v(ops),
            api_groups: v(groups),
            api_versions: v(&["*"]),
            resources: v(resources),
            scope: Some(scope.into()),
        }
    }

    #[test]
    fn rules_match_operations_resources_subresources_and_scope() {
        let create_pod = attrs(Operation::Create, "", "pods", "", "default");
        assert!(rule_matches(
            &rule(&["CREATE"], &[""], &["pods"], "*"),
            &create_pod
        ));
        assert!(rule_matches(
            &rule(&["*"], &["*"], &["*"], "Namespaced"),
            &create_pod
        ));
        assert!(!rule_matches(
            &rule(&["UPDATE"], &[""], &["pods"], "*"),
            &create_pod
        ));
        assert!(!rule_matches(
            &rule(&["CREATE"], &["apps"], &["pods"], "*"),
            &create_pod
        ));
        assert!(!rule_matches(
            &rule(&["CREATE"], &[""], &["pods"], "Cluster"),
            &create_pod
        ));
        let status = attrs(Operation::Update, "", "pods", "status", "default");
        assert!(!rule_matches(&rule(&["*"], &[""], &["pods"], "*"), &status));
        assert!(!rule_matches(&rule(&["*"], &[""], &["*"], "*"), &status));
        assert!(rule_matches(
            &rule(&["*"], &[""], &["pods/*"], "*"),
            &status
        ));
        assert!(rule_matches(
            &rule(&["*"], &[""], &["*/status"], "*"),
            &status
        ));
        assert!(rule_matches(&rule(&["*"], &[""], &["*/*"], "*"), &status));
        let ns = attrs(Operation::Create, "", "namespaces", "", "x");
        assert!(rule_matches(
            &rule(&["*"], &[""], &["namespaces"], "Cluster"),
            &ns
        ));
        assert!(!rule_matches(
            &rule(&["*"], &[""], &["namespaces"], "Namespaced"),
            &ns
        ));
    }

    #[test]
    fn reviews_carry_the_request_and_responses_are_checked() {
        let a = attrs(Operation::Create, "apps", "deployments", "", "default");
        let obj = json!({"metadata": {"name": "x"}});
        let r = review_request(REVIEW_V1, "u1", &a, Some(&obj), None);
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(
            r["request"]["kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(r["request"]["resource"]["resource"], "deployments");
        assert_eq!(r["request"]["operation"], "CREATE");
        assert_eq!(r["request"]["namespace"], "default");
        assert_eq!(r["request"]["userInfo"]["username"], "alice");
        assert_eq!(r["request"]["options"]["kind"], "CreateOptions");
        assert_eq!(r["request"]["object"], obj);

        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": true, "patchType": "JSONPatch",
                "patch": "W3sib3AiOiAiYWRkIiwgInBhdGgiOiAiL2EiLCAidmFsdWUiOiAxfV0=",
                "warnings": ["careful"], "auditAnnotations": {"checked": "yes"}}});
        let v = parse_response(REVIEW_V1, "u1", ok.to_string().as_bytes()).unwrap();
        assert!(v.allowed);
        assert_eq!(
            v.audit_annotations,
            [("checked".to_string(), "yes".to_string())]
        );
        let a = attrs(Operation::Create, "apps", "deployments", "", "default");
        annotate(&a, "hook.example.com", &v);
        assert_eq!(
            a.audit_annotations.snapshot(),
            [("hook.example.com/checked".to_string(), "yes".to_string())]
        );
        assert_eq!(
            v.patch.as_deref(),
            Some(&br#"[{"op": "add", "path": "/a", "value": 1}]"#[..])
        );
        assert_eq!(v.warnings, ["careful"]);
        let e = parse_response(REVIEW_V1, "u2", ok.to_string().as_bytes()).unwrap_err();
        assert_eq!(e, "expected response.uid=\"u2\", got \"u1\"");
        let bad_type = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": true, "patchType": "Merge", "patch": "e30="}});
        assert!(parse_response(REVIEW_V1, "u1", bad_type.to_string().as_bytes()).is_err());
        // A v1beta1 webhook answers in v1beta1; a v1 answer to it is refused.
        assert_eq!(review_version(&["v1beta1".into()]), REVIEW_V1BETA1);
        assert_eq!(review_version(&["v2".into(), "v1".into()]), REVIEW_V1);
        assert!(parse_response(REVIEW_V1BETA1, "u1", ok.to_string().as_bytes()).is_err());
        let beta = json!({"apiVersion": REVIEW_V1BETA1, "kind": "AdmissionReview",
            "response": {"allowed": true}});
        assert!(
            parse_response(REVIEW_V1BETA1, "u1", beta.to_string().as_bytes())
                .unwrap()
                .allowed
        );
    }

    #[test]
    fn denials_keep_the_webhooks_code_and_message() {
        let e = denial(
            "deny.example.com",
            &json!({"code": 403, "message": "no pods today"}),
        );
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request: no pods today"
        );
        let e = denial("d.example.com", &Value::Null);
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"d.example.com\" denied the request without explanation"
        );
    }

    #[test]
    fn selectors_match_labels() {
        let sel: LabelSelector =
            serde_json::from_value(json!({"matchLabels": {"team": "a"}})).unwrap();
        let labels = labels_of(Some(&json!({"metadata": {"labels": {"team": "a"}}})));
        assert!(selector_matches(Some(&sel), &labels).unwrap());
        assert!(!selector_matches(Some(&sel), &BTreeMap::new()).unwrap());
        assert!(selector_matches(None, &BTreeMap::new()).unwrap());
    }
}
