//! The one generic store: create, get, list, watch, update, patch, delete and
//! deletecollection for every resource, over [`Storage`], driven by a [`Strategy`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::depth::{MAX_JSON_DEPTH, depth_up_to};
use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use ferrokube_apimachinery::fields::FieldSelector;
use ferrokube_apimachinery::labels::Selector;
use ferrokube_apimachinery::managedfields::{self, Schema, Scope, Writer};
use ferrokube_apimachinery::resource_version;
use ferrokube_storage::{
    KeyValue, ListOptions, Preconditions, Revision, RevisionMatch, Storage, StorageError,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::allocator;
use crate::cache::{CachedObject, Filter, ResourceCache, WatchItem, decode_stored};
use crate::errors::{CONFLICT_MESSAGE, EXPIRED_CONTINUE, from_storage};
use crate::meta::{self, Clock};
use crate::service_claims::ServiceClaims;
use crate::stored_json::RevisionSlot;
use crate::strategy::{self, GcPolicy, Strategy};

mod binding;

/// `fieldValidation`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    #[default]
    Strict,
}

impl FieldValidation {
    pub fn parse(s: Option<&str>) -> Result<Self, ApiError> {
        match s {
            None | Some("") | Some("Strict") => Ok(FieldValidation::Strict),
            Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(o) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {o:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// The warnings for a request's response (upstream `warning.AddWarning`): shared by
/// everything that handles the request, so they go out with an error too. Identical
/// texts are dropped, and many cut, where the headers are written (the apiserver's
/// `warning_headers`, upstream's recorder), the one place they are read.
#[derive(Clone, Debug, Default)]
pub struct Warnings(Arc<parking_lot::Mutex<Vec<String>>>);

impl Warnings {
    pub fn add(&self, text: String) {
        self.0.lock().push(text);
    }

    /// The warnings added since the last take, in the order added.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// What a resource's `scale` subresource shows of it.
pub trait ScaleView {
    /// The field `spec.replicas` of the Scale is, as field names (`["spec", "replicas"]`).
    fn replicas_path(&self) -> &[String];
    /// The `autoscaling/v1` Scale of `obj`.
    fn to_scale(&self, obj: &Value) -> Value;

    /// The merge patch that sets the object's replicas field to `replicas`.
    fn replicas_patch(&self, replicas: i64) -> Value {
        self.replicas_path()
            .iter()
            .rev()
            .fold(json!(replicas), |inner, key| json!({ key: inner }))
    }
}

/// Options of create and update.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// Fields found twice in the request body (JSON keys), reported like unknown ones.
    pub duplicate_fields: Vec<String>,
    /// The request body when it is the object itself in JSON (a create's or a PUT's):
    /// unknown and duplicate fields are reported in its order, as upstream's decoder
    /// reads it (a patched object or a YAML body is decoded as a sorted map upstream
    /// too).
    pub json_body: Option<bytes::Bytes>,
    /// The request's admission (mutating, then validating), run by the store where
    /// upstream's generic registry runs it.
    pub admit: Option<Admit>,
    /// Who writes, for `metadata.managedFields`: the request's `fieldManager`, else
    /// the first part of its User-Agent (upstream's default).
    pub field_manager: Option<String>,
    /// The subresource a write of the main object came through (`scale`), named in
    /// its `managedFields` entry.
    pub via_subresource: Option<&'static str>,
    /// The body's `managedFields` are what the write leaves (a server-side apply
    /// through `scale` worked them out on the Scale): the write itself is not tracked.
    pub managed_fields_worked_out: bool,
    /// Where `fieldValidation=Warn` problems go when the request collects its
    /// warnings (so a write refused later still reports them); without it they are
    /// [`Written::warnings`].
    pub warnings: Option<Warnings>,
}

/// The admission of one request, as the store runs it (upstream's admission hooks
/// of `registry/generic/registry.Store`):
/// - create: [`Admission::mutate`] on the decoded, defaulted object (before name
///   generation, metadata preparation and validation), then
///   [`Admission::validate`] on the validated object;
/// - update and patch: in every attempt of the read-modify-write loop,
///   [`Admission::mutate`] on the updated object (patch applied, before the strategy
///   prepares and validates it), then [`Admission::validate`] on the final object
///   with the object it replaces (skipped when the update changes nothing);
/// - delete: [`Admission::validate_delete`] on the stored object in every attempt.
///
/// An error rejects the request with that status.
#[async_trait::async_trait]
pub trait Admission: Send + Sync {
    async fn mutate(&self, _new: &mut Value, _old: Option<&Value>) -> Result<(), ApiError> {
        Ok(())
    }
    /// May still change `new`, as upstream's validating plugins may (ImagePolicyWebhook
    /// marks a pod it admitted without an answer); the store keeps what it returns.
    async fn validate(&self, _new: &mut Value, _old: Option<&Value>) -> Result<(), ApiError> {
        Ok(())
    }
    async fn validate_delete(&self, _current: &Value) -> Result<(), ApiError> {
        Ok(())
    }
}

/// A request's [`Admission`].
#[derive(Clone)]
pub struct Admit(pub Arc<dyn Admission>);

impl std::fmt::Debug for Admit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admit")
    }
}

/// Options of delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub dry_run: bool,
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
    /// The deprecated `orphanDependents`; set, it overrides the propagation policy (the
    /// handler refuses both at once, as upstream's validation).
    pub orphan_dependents: Option<bool>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    /// The request's admission ([`Admission::validate_delete`]).
    pub admit: Option<Admit>,
}

/// Options of list.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: i64,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    /// `sendInitialEvents`, which a list refuses (422).
    pub send_initial_events: Option<bool>,
}

/// Whether watches take `sendInitialEvents` (upstream's WatchList gate, off by default
/// in 1.33): always here, as the streaming list is served.
const WATCH_LIST: bool = true;

/// Options of watch.
#[derive(Clone, Debug, Default)]
pub struct WatchParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
}

/// The patch formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
}

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
    /// `namespaces/<name>/finalize`: only `spec.finalizers`.
    Finalize,
    /// `certificatesigningrequests/<name>/approval`: only `status.conditions` (upstream
    /// `csrApprovalStrategy`).
    Approval,
    /// `pods/<name>/ephemeralcontainers`: only `spec.ephemeralContainers`.
    EphemeralContainers,
    /// `pods/<name>/resize`: only the containers' (and init containers') `resources`
    /// and `resizePolicy` (upstream `podResizeStrategy`).
    Resize,
}

/// A written object and the warnings for the response.
#[derive(Clone, Debug)]
pub struct Written {
    pub object: Value,
    /// `object` as JSON when the write already serialized it (a create); the handler
    /// answers JSON requests with it instead of serializing the object again.
    pub json: Option<Bytes>,
    pub warnings: Vec<String>,
    /// True when the write created the object (201).
    pub created: bool,
}

/// A list result.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The objects, each with its JSON serialization made once (shared with the watch
    /// cache when listed from it).
    pub items: Vec<CachedObject>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<i64>,
}

/// A delete result.
#[derive(Clone, Debug)]
pub struct Deleted {
    pub object: Value,
    /// False when the object was only marked (finalizers, graceful deletion).
    pub gone: bool,
}

/// Patch application, so a strategic-merge engine can be plugged in from outside.
pub type PatchFn = fn(&ResourceInfo, PatchType, &Value, &Value) -> Result<Value, ApiError>;

/// Applies a JSON patch or merge patch; strategic merge patch falls back to a merge
/// patch until a strategic engine is given to the store.
pub fn default_patch(
    _info: &ResourceInfo,
    ty: PatchType,
    doc: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    let mut out = doc.clone();
    match ty {
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut out, &p).map_err(ApiError::unprocessable_patch)?;
        }
        PatchType::Merge | PatchType::StrategicMerge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("patch body must be a JSON object"));
            }
            json_patch::merge(&mut out, patch);
        }
    }
    Ok(out)
}

/// The patch engines of the built-in types: RFC 6902 JSON patch (with upstream's
/// operation limit), RFC 7386 merge patch, and strategic merge patch with the patch
/// strategies and merge keys of the kind's OpenAPI definition
/// (`ferrokube_apimachinery::patch::BuiltinPatchSchema`).
pub fn builtin_patch(
    info: &ResourceInfo,
    ty: PatchType,
    doc: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    use ferrokube_apimachinery::patch::{self, BuiltinPatchSchema, meta::definition_for};
    let r = match ty {
        PatchType::Json => {
            let bytes = serde_json::to_vec(patch).map_err(ApiError::internal)?;
            patch::json_patch(doc, &bytes)
        }
        PatchType::Merge => patch::merge_patch_value(doc, patch),
        PatchType::StrategicMerge => {
            let schema = match definition_for(info.group, info.version, info.kind) {
                Some(d) => BuiltinPatchSchema::for_definition(&d),
                None => BuiltinPatchSchema::for_definition(""),
            };
            patch::strategic_merge_patch(doc, patch, &schema)
        }
    };
    r.map_err(|e| e.to_api_error())
}

trait UnprocessablePatch {
    fn unprocessable_patch(e: impl std::fmt::Display) -> ApiError;
}

impl UnprocessablePatch for ApiError {
    fn unprocessable_patch(e: impl std::fmt::Display) -> ApiError {
        ApiError {
            code: 422,
            reason: "Invalid".into(),
            message: format!("the server rejected our request due to an error in our request: {e}"),
            details: None,
        }
    }
}

/// How long a consistent list waits for the watch cache to reach the store's current
/// revision before it reads storage instead (the cache is normally milliseconds behind).
const CONSISTENT_READ_WAIT: Duration = Duration::from_secs(1);

/// How long a read that names a revision waits for the watch cache to reach it before
/// a 504 "Too large resource version" (upstream's watch cache `blockTimeout`).
const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

/// Attempts of one update against concurrent writers before it answers 409.
const MAX_UPDATE_ATTEMPTS: usize = 64;

/// The store of one resource.
pub struct Store {
    info: &'static ResourceInfo,
    strategy: Arc<dyn Strategy>,
    storage: Arc<dyn Storage>,
    cache: Arc<ResourceCache>,
    clock: Arc<dyn Clock>,
    services: Option<Arc<ServiceClaims>>,
    patch: PatchFn,
    bookmark_interval: Duration,
    namespace_prefix: &'static str,
    /// The namespaces' watch cache, for the namespace check of every create.
    namespaces: Arc<ResourceCache>,
    /// `--allow-privileged`; false refuses privileged containers in this resource's
    /// pod spec or pod template, if it has one.
    allow_privileged: bool,
    /// The kind's type, which steers field ownership in `managedFields`.
    field_schema: Schema,
}

/// `f` on `obj` with the field sets (`fieldsV1`) of its `managedFields` entries lifted
/// out for the call. Validation checks each entry's manager, operation and fields type,
/// never its field set, and its typed decode would otherwise copy every set.
fn without_field_sets<R>(obj: &mut Value, f: impl FnOnce(&Value) -> R) -> R {
    fn entries(obj: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
        obj.get_mut("metadata")
            .and_then(|m| m.get_mut("managedFields"))
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
    }
    let lifted: Vec<Option<Value>> = entries(obj).map(|e| e.remove("fieldsV1")).collect();
    let result = f(obj);
    for (entry, set) in entries(obj).zip(lifted) {
        if let Some(set) = set {
            entry.insert("fieldsV1".into(), set);
        }
    }
    result
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource", &self.info.plural)
            .finish()
    }
}

/// Upstream's 409 for a write whose uid precondition names another object than the
/// stored one (`stored` empty: none is stored).
pub fn uid_precondition_failed(
    info: &ResourceInfo,
    name: &str,
    wanted: &str,
    stored: &str,
) -> ApiError {
    ApiError::conflict(
        info.group,
        info.plural,
        name,
        format!("Precondition failed: UID in precondition: {wanted}, UID in object meta: {stored}"),
    )
}

/// Upstream's answer to a body naming another namespace than its URL
/// (`EnsureObjectNamespaceMatchesRequestNamespace`).
pub fn namespace_mismatch() -> ApiError {
    ApiError::bad_request(
        "the namespace of the provided object does not match the namespace sent on the request",
    )
}

/// Upstream's `checkName` answer to a body naming another object than its URL.
pub fn name_mismatch(body_name: &str, url_name: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
    ))
}

fn strip_rv(obj: &Value) -> Value {
    let mut o = obj.clone();
    meta::set_meta(&mut o, "resourceVersion", Value::Null);
    o
}

/// Refuses to store what could not be read back: serde_json reads at most
/// [`MAX_JSON_DEPTH`] levels, and an object as stored is deeper than the request that
/// made it (its `managedFields` repeat its fields further down; a JSON patch can add
/// depth). Upstream reads up to 10,000 levels; a client never gets an object it
/// cannot read back here, nor does the store keep one it cannot update or delete.
fn readable(obj: &Value) -> Result<(), ApiError> {
    if depth_up_to(obj, MAX_JSON_DEPTH) > MAX_JSON_DEPTH {
        return Err(ApiError::bad_request(format!(
            "the object is nested more than {MAX_JSON_DEPTH} levels deep as stored (with its \
             metadata.managedFields), deeper than this server reads back"
        )));
    }
    Ok(())
}

fn encode(obj: &Value) -> Result<Bytes, ApiError> {
    // The store's revision is the resourceVersion; a copy without it is made only when
    // the object carries one (updates), not for the common create.
    let bytes = if obj["metadata"].get("resourceVersion").is_some() {
        serde_json::to_vec(&strip_rv(obj))
    } else {
        serde_json::to_vec(obj)
    };
    bytes.map(Bytes::from).map_err(ApiError::internal)
}

/// What a generation bump looks at: the object without metadata, and without status
/// when status is written through its own subresource (upstream's custom resource
/// rule: without a status subresource, a status change is a change too; the built-in
/// kinds that track generation have one, or no status at all).
fn generation_part(obj: &Value, status_apart: bool) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        if status_apart {
            m.remove("status");
        }
    }
    o
}

fn parse_rv(s: &str) -> Result<Revision, ApiError> {
    resource_version::parse_resource_version_for_read(s)
}

/// A request's `labelSelector` and `fieldSelector` (absent or empty: `None`), each a 400
/// when it does not parse; a field selector may only name the `supported` fields.
pub fn parse_selectors(
    label_selector: Option<&str>,
    field_selector: Option<&str>,
    supported: &[&str],
) -> Result<(Option<Selector>, Option<FieldSelector>), ApiError> {
    let labels = match label_selector.filter(|s| !s.is_empty()) {
        Some(s) => Some(Selector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?),
        None => None,
    };
    let fields = match field_selector.filter(|s| !s.is_empty()) {
        Some(s) => {
            let fs = FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?;
            fs.check_supported(supported)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            Some(fs)
        }
        None => None,
    };
    Ok((labels, fields))
}

impl Store {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        strategy: Arc<dyn Strategy>,
        storage: Arc<dyn Storage>,
        cache: Arc<ResourceCache>,
        clock: Arc<dyn Clock>,
        services: Option<Arc<ServiceClaims>>,
        patch: PatchFn,
        bookmark_interval: Duration,
        namespace_prefix: &'static str,
        namespaces: Arc<ResourceCache>,
        allow_privileged: bool,
    ) -> Self {
        let info = strategy.info();
        Store {
            info,
            field_schema: Schema::for_kind(info.group, info.version, info.kind),
            strategy,
            storage,
            cache,
            clock,
            services,
            patch,
            bookmark_interval,
            namespace_prefix,
            namespaces,
            allow_privileged,
        }
    }

    /// The cluster's policy on what a valid object may hold beyond its kind's rules:
    /// with `--allow-privileged=false`, no privileged container in a pod or a pod
    /// template (upstream checks it in the same validation, so it is a 422 too).
    fn cluster_policy_errors(&self, obj: &Value) -> Vec<FieldError> {
        if self.allow_privileged {
            return Vec::new();
        }
        let template: &[&str] = if self.info.group.is_empty() && self.info.plural == "pods" {
            &[]
        } else {
            match ferrokube_api::resources::pod_template_path(self.info.group, self.info.plural) {
                Some(path) => path,
                None => return Vec::new(),
            }
        };
        let mut path: Option<FieldPath> = None;
        let mut spec = obj;
        for part in template.iter().chain(&["spec"]) {
            path = Some(match path {
                None => FieldPath::new(part),
                Some(p) => p.child(part),
            });
            spec = &spec[*part];
        }
        match path {
            Some(path) => ferrokube_validation::forbid_privileged(spec, &path),
            None => Vec::new(),
        }
    }

    pub fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    pub fn strategy(&self) -> &Arc<dyn Strategy> {
        &self.strategy
    }

    pub fn key(&self, ns: Option<&str>, name: &str) -> String {
        match ns {
            Some(ns) if self.info.namespaced => {
                format!("{}/{ns}/{name}", self.info.storage_prefix)
            }
            _ => format!("{}/{name}", self.info.storage_prefix),
        }
    }

    fn prefix(&self, ns: Option<&str>) -> String {
        match ns {
            Some(ns) if self.info.namespaced => format!("{}/{ns}/", self.info.storage_prefix),
            _ => format!("{}/", self.info.storage_prefix),
        }
    }

    /// A stored object in the served form (differs only for resources stored in
    /// another's form, see [`crate::strategy::StorageCodec`]).
    fn served(&self, obj: Value) -> Value {
        match self.strategy.storage_conversion() {
            Some(c) => c.served_form(obj),
            None => obj,
        }
    }

    /// A stored object, decoded and in the served form (through the conversion
    /// webhook of a custom resource that has one).
    async fn decode_served(&self, value: &[u8], revision: Revision) -> Result<Value, ApiError> {
        let obj = decode_stored(value, revision)
            .ok_or_else(|| ApiError::internal("stored object is not JSON"))?;
        self.to_served(obj).await
    }

    /// A stored object in the served form.
    async fn to_served(&self, obj: Value) -> Result<Value, ApiError> {
        match self.strategy.fallible_conversion() {
            Some(c) => c
                .served_form(vec![obj], false)
                .await?
                .pop()
                .ok_or_else(|| ApiError::internal("conversion returned no object")),
            None => Ok(self.served(obj)),
        }
    }

    /// Stored objects in the served form: through a conversion webhook in one
    /// review, else as [`Store::served`] (a custom resource's webhook answers for all
    /// of them, as upstream sends a list's items in one request).
    async fn all_served(&self, objects: Vec<Value>) -> Result<Vec<Value>, ApiError> {
        match self.strategy.fallible_conversion() {
            Some(c) if !objects.is_empty() => c.served_form(objects, true).await,
            Some(_) => Ok(objects),
            None => Ok(objects.into_iter().map(|o| self.served(o)).collect()),
        }
    }

    /// The bytes stored for a served object, through a conversion webhook when the
    /// resource has one.
    async fn encode_stored(&self, obj: &Value) -> Result<Bytes, ApiError> {
        readable(obj)?;
        match self.strategy.fallible_conversion() {
            Some(c) => encode(&c.stored_form(obj.clone()).await?),
            None => self.encode(obj),
        }
    }

    /// The served form of what a write just stored: `written` (the served object it
    /// stored) at the new revision when a webhook converts, rather than a second
    /// webhook call after the write; else the stored bytes, decoded.
    async fn written_served(&self, written: &Value, kv: &KeyValue) -> Result<Value, ApiError> {
        if self.strategy.fallible_conversion().is_some() {
            let mut obj = written.clone();
            meta::set_meta(
                &mut obj,
                "resourceVersion",
                json!(kv.mod_revision.to_string()),
            );
            return Ok(obj);
        }
        self.decode_served(&kv.value, kv.mod_revision).await
    }

    /// A stored object in the served form, for lists: kept as its JSON (decoded only
    /// if a selector or a non-JSON output needs it) unless it converts.
    fn cached_served(&self, value: &[u8], revision: Revision) -> Option<CachedObject> {
        match self.strategy.storage_conversion() {
            Some(c) => decode_stored(value, revision).map(|o| CachedObject::new(c.served_form(o))),
            None => CachedObject::from_stored(value, revision),
        }
    }

    /// What a read of `obj` shows once it is stored. A served form written in another
    /// stored form may gain what that form defaults (an `autoscaling/v1` HPA's implied
    /// CPU target), so a write answers with the round trip, as upstream answers with
    /// the object decoded from storage.
    fn as_read_back(&self, obj: Value) -> Value {
        match self.strategy.storage_conversion() {
            Some(c) => c.served_form(c.stored_form(obj)),
            None => obj,
        }
    }

    /// The bytes stored for a served object.
    fn encode(&self, obj: &Value) -> Result<Bytes, ApiError> {
        match self.strategy.storage_conversion() {
            Some(c) => encode(&c.stored_form(obj.clone())),
            None => encode(obj),
        }
    }

    fn err(&self, name: &str, e: StorageError) -> ApiError {
        from_storage(self.info, name, e)
    }

    fn now(&self) -> String {
        meta::format_time(self.clock.now())
    }

    /// Checks body `apiVersion`/`kind` against the URL's.
    fn check_type(&self, obj: &Value) -> Result<(), ApiError> {
        check_type(obj, &self.info.api_version(), self.info.kind)
    }

    /// Decodes a request object and applies `fieldValidation`; `whole_body`: `obj` is
    /// the request's body (a create or a PUT), not the result of a patch, and a strict
    /// decoding error is said as upstream's decoder of bodies says it.
    fn decode(
        &self,
        obj: Value,
        opts: &WriteOptions,
        whole_body: bool,
    ) -> Result<(Value, Vec<String>), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "Object of kind {} could not be decoded: expected a JSON object",
                self.info.kind
            )));
        }
        self.check_type(&obj)?;
        let decoded = self.strategy.decode(obj)?;
        let body_of = whole_body.then_some(self.info);
        let warnings = field_validation(&decoded.unknown_fields, opts, body_of)?;
        Ok((decoded.object, warnings))
    }

    fn check_namespace(&self, ns: Option<&str>, obj: &mut Value) -> Result<(), ApiError> {
        if !self.info.namespaced {
            meta::set_meta(obj, "namespace", Value::Null);
            return Ok(());
        }
        let Some(ns) = ns else {
            return Err(ApiError::bad_request(
                "a namespace is required for a namespaced resource",
            ));
        };
        let body_ns = meta::namespace(obj);
        if !body_ns.is_empty() && body_ns != ns {
            return Err(namespace_mismatch());
        }
        meta::set_meta(obj, "namespace", json!(ns));
        Ok(())
    }

    /// NamespaceLifecycle: no new content in a missing or terminating namespace.
    async fn namespace_admits(&self, ns: &str, name: &str) -> Result<(), ApiError> {
        let key = format!("{}/{ns}", self.namespace_prefix);
        // As upstream's NamespaceLifecycle admission: the namespace as the watch cache
        // has it, and a live read only when the cache does not have it (yet), e.g. right
        // after the namespace was created.
        let found = match self.namespaces.get(&key) {
            Some(cached) => Ok(cached.value().clone()),
            None => self.storage.get(&key, None).await.map(|kv| {
                Arc::new(decode_stored(&kv.value, kv.mod_revision).unwrap_or(Value::Null))
            }),
        };
        match found {
            Ok(obj) => {
                if meta::has_deletion_timestamp(&obj)
                    || obj["status"]["phase"].as_str() == Some("Terminating")
                {
                    let mut e = ApiError::forbidden(
                        self.info.group,
                        self.info.plural,
                        name,
                        format!(
                            "unable to create new content in namespace {ns} because it is being terminated"
                        ),
                    );
                    let d = e.details.get_or_insert_with(Default::default);
                    d.causes.get_or_insert_with(Vec::new).push(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause {
                            reason: Some("NamespaceTerminating".into()),
                            message: Some(format!("namespace {ns} is being terminated")),
                            field: Some("metadata.namespace".into()),
                        },
                    );
                    return Err(e);
                }
                Ok(())
            }
            Err(StorageError::NotFound { .. }) => Err(ApiError::not_found("", "namespaces", ns)),
            Err(e) => Err(from_storage(self.info, ns, e)),
        }
    }

    /// Metadata and status a new object starts with.
    fn prepare_for_create(&self, obj: &mut Value) {
        let m = meta::meta_mut(obj);
        for f in [
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "creationTimestamp",
        ] {
            m.remove(f);
        }
        let hooks = *self.strategy.hooks();
        // One reading of the clock: the hook's times (a pod's conditions) are the
        // creation time.
        let now = self.now();
        meta::omit_empty_metadata(obj);
        meta::set_meta(obj, "uid", json!(meta::new_uid()));
        meta::set_meta(obj, "creationTimestamp", json!(now));
        // Upstream's strategies set the generation of the kinds that track it; the
        // others keep what the client gave (validated as non-negative).
        if hooks.tracks_generation {
            meta::set_meta(obj, "generation", json!(1));
        }
        if self.info.has_subresource("status") {
            meta::remove_annotations(obj, hooks.status_annotations);
            if let Some(o) = obj.as_object_mut() {
                match hooks.initial_status {
                    Some(f) => {
                        o.insert("status".into(), f());
                    }
                    None => {
                        o.remove("status");
                    }
                }
            }
        }
        if let Some(f) = hooks.prepare_create {
            f(obj, &now);
        }
    }

    pub async fn create(
        &self,
        ns: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.insert(ns, obj, opts, true).await
    }

    /// A create; `track`: the writer takes the fields it set (every create but an
    /// apply's, whose object already records its applier).
    async fn insert(
        &self,
        ns: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
        track: bool,
    ) -> Result<Written, ApiError> {
        // The one create not tracked here is an apply's, whose object is no request body.
        let whole_body = track;
        let (mut obj, warnings) = self.decode(obj, opts, whole_body)?;
        self.check_namespace(ns, &mut obj)?;
        if track {
            // As upstream's field manager: on the defaulted object, before admission.
            let (now, api_version) = (self.now(), self.info.api_version());
            obj = managedfields::track_create(
                obj,
                &self.field_writer(Part::Main, opts, &now, &api_version),
            );
        }
        if let Some(admit) = &opts.admit {
            admit.0.mutate(&mut obj, None).await?;
            // A mutating plugin may not move the object elsewhere.
            self.check_namespace(ns, &mut obj)?;
        }
        if meta::name(&obj).is_empty()
            && let Some(g) = meta::meta_str(&obj, "generateName").filter(|g| !g.is_empty())
        {
            let name = format!("{g}{}", meta::random_suffix());
            meta::set_meta(&mut obj, "name", json!(name));
        }
        // Upstream's storage refuses a create naming a version (a number other than 0:
        // anything else is not read as one), after validation and admission; its
        // dry run does not ask, nor does an apply's create (an update upstream).
        let names_version = track
            && meta::resource_version(&obj)
                .parse::<u64>()
                .is_ok_and(|v| v != 0);
        self.prepare_for_create(&mut obj);
        let name = meta::name(&obj).to_string();
        let mut errs = without_field_sets(&mut obj, |obj| self.strategy.validate_create(obj));
        errs.extend(self.cluster_policy_errors(&obj));
        if !errs.is_empty() {
            return Err(ApiError::invalid(
                self.info.group,
                self.info.kind,
                &name,
                errs,
            ));
        }
        if let Some(admit) = &opts.admit {
            admit.0.validate(&mut obj, None).await?;
        }
        if let Some(ns) = ns.filter(|_| self.info.namespaced) {
            self.namespace_admits(ns, &name).await?;
        }
        if names_version && !opts.dry_run {
            // Upstream answers this storage error as a 500; it is the request's fault.
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let key = self.key(ns, &name);
        let services = self.services.as_ref().filter(|_| !opts.dry_run);
        let claimed = match services {
            Some(ips) => Some(ips.allocate(&mut obj).await?),
            None => None,
        };
        if opts.dry_run {
            return match self.storage.get(&key, None).await {
                Ok(_) => Err(ApiError::already_exists(
                    self.info.group,
                    self.info.plural,
                    &name,
                )),
                Err(StorageError::NotFound { .. }) => Ok(Written {
                    object: self.as_read_back(obj),
                    json: None,
                    warnings,
                    created: true,
                }),
                Err(e) => Err(self.err(&name, e)),
            };
        }
        // One serialization for the stored form and the answer (a resource stored in
        // another's form is encoded through its codec instead).
        let converts = self.strategy.storage_conversion().is_some()
            || self.strategy.fallible_conversion().is_some();
        let slot = if converts {
            None
        } else {
            RevisionSlot::encode(&mut obj)
        };
        let bytes = match &slot {
            Some(slot) => readable(&obj).map(|()| slot.stored()),
            None => self.encode_stored(&obj).await,
        };
        let stored = match bytes {
            Ok(bytes) => self
                .storage
                .create(&key, bytes)
                .await
                .map_err(|e| self.err(&name, e)),
            Err(e) => Err(e),
        };
        match stored {
            Ok(rev) => {
                let mut obj = self.as_read_back(obj);
                meta::set_meta(&mut obj, "resourceVersion", json!(rev.to_string()));
                Ok(Written {
                    object: obj,
                    json: slot.map(|slot| slot.with_revision(rev)),
                    warnings,
                    created: true,
                })
            }
            Err(e) => {
                if let (Some(ips), Some(claimed)) = (services, &claimed) {
                    ips.rollback(claimed, &obj).await;
                }
                Err(e)
            }
        }
    }

    /// A GET with the request's `resourceVersion`, as api-concepts has it: unset or
    /// `0`, the current object; any other, an object not older than that revision,
    /// after waiting (at most 3 s, as upstream's watch cache) for the store to reach
    /// it, then a 504 "Too large resource version".
    pub async fn get_at(
        &self,
        ns: Option<&str>,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Value, ApiError> {
        self.wait_until_fresh(resource_version.unwrap_or(""))
            .await?;
        self.get(ns, name).await
    }

    /// The revision a watch naming none starts from: the store's current one when the
    /// cache is fed every revision (SQLite; etcd with progress notifications), else the
    /// cache's own, since it cannot be waited on to reach another resource's revision.
    async fn latest_revision(&self) -> Result<Revision, ApiError> {
        if self.storage.watch_sees_every_revision() {
            self.storage
                .current_revision()
                .await
                .map_err(|e| self.err("", e))
        } else {
            Ok(self.cache.revision())
        }
    }

    /// Waits until the cache has reached the revision `rv` names (`""` and `"0"` name
    /// none), as upstream's `waitUntilFreshAndBlock`; a malformed `rv` is a 400.
    async fn wait_until_fresh(&self, rv: &str) -> Result<(), ApiError> {
        let min = parse_rv(if rv.is_empty() { "0" } else { rv })?;
        if min > 0 {
            self.cache.wait_for(min, FRESHNESS_WAIT).await?;
        }
        Ok(())
    }

    pub async fn get(&self, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let kv = self
            .storage
            .get(&self.key(ns, name), None)
            .await
            .map_err(|e| self.err(name, e))?;
        let obj = decode_stored(&kv.value, kv.mod_revision)
            .ok_or_else(|| ApiError::internal(format!("stored object {name:?} is not JSON")))?;
        self.to_served(obj).await
    }

    /// A filter for label and field selectors.
    pub fn filter(
        &self,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Option<Filter>, ApiError> {
        let mut supported: Vec<&str> = vec!["metadata.name", "metadata.namespace"];
        supported.extend(self.strategy.hooks().fields.iter().map(|(f, ..)| *f));
        let (labels, fields) = parse_selectors(label_selector, field_selector, &supported)?;
        if labels.is_none() && fields.is_none() {
            return Ok(None);
        }
        let hooks = *self.strategy.hooks();
        let f: Filter = Arc::new(move |obj: &Value| {
            if let Some(l) = &labels
                && !l.matches(&meta::labels(obj))
            {
                return false;
            }
            if let Some(fs) = &fields {
                let get = |field: &str| -> Option<String> {
                    match field {
                        "metadata.name" => Some(meta::name(obj).to_string()),
                        "metadata.namespace" => Some(meta::namespace(obj).to_string()),
                        other => hooks.fields.iter().find(|(f, ..)| *f == other).map(
                            |(_, path, absent)| {
                                let v = meta::field_string(obj, path);
                                if v.is_empty() { absent.to_string() } else { v }
                            },
                        ),
                    }
                };
                if !fs.matches(&get) {
                    return false;
                }
            }
            true
        });
        Ok(Some(f))
    }

    pub async fn list(&self, ns: Option<&str>, p: &ListParams) -> Result<Listed, ApiError> {
        let filter = self.filter(p.label_selector.as_deref(), p.field_selector.as_deref())?;
        let rv = p.resource_version.as_deref().unwrap_or("");
        let rv_match = p.resource_version_match.as_deref().unwrap_or("");
        let cont = p.continue_token.as_deref().filter(|c| !c.is_empty());
        resource_version::check_list_options(&resource_version::ListOptionsInput {
            watch: false,
            resource_version: rv,
            resource_version_match: rv_match,
            continue_token: cont.unwrap_or(""),
            send_initial_events: p.send_initial_events,
            watch_list_enabled: WATCH_LIST,
        })?;
        let prefix = self.prefix(ns);
        // From the cache: RV=0, or NotOlderThan without a page to continue. As upstream's
        // cache, it pages such a list unless RV is 0, where the limit is ignored; the
        // next pages come from storage at the same revision.
        let from_cache = cont.is_none()
            && (rv == "0"
                || rv_match == "NotOlderThan"
                || (!rv.is_empty() && rv_match.is_empty() && p.limit <= 0));
        if from_cache {
            self.wait_until_fresh(rv).await?;
            let limit = if rv == "0" { 0 } else { p.limit };
            return self.list_from_cache(&prefix, filter.as_ref(), limit).await;
        }
        // A consistent read (no resourceVersion) of a whole list, from the cache once it
        // has applied the store's current revision, as upstream's
        // ConsistentListFromCache; read from storage when the backend cannot promise
        // that (etcd without progress requests) or the cache does not catch up soon.
        if cont.is_none()
            && rv.is_empty()
            && p.limit <= 0
            && self.storage.watch_sees_every_revision()
        {
            let current = self
                .storage
                .current_revision()
                .await
                .map_err(|e| self.err("", e))?;
            if self
                .cache
                .wait_for(current, CONSISTENT_READ_WAIT)
                .await
                .is_ok()
            {
                return self.list_from_cache(&prefix, filter.as_ref(), 0).await;
            }
            tracing::warn!(
                resource = self.info.plural,
                revision = current,
                "the watch cache did not reach the current revision; listing from storage"
            );
        }
        let revision = if rv.is_empty() {
            RevisionMatch::Latest
        } else {
            RevisionMatch::Exact(parse_rv(rv)?)
        };
        let limit = usize::try_from(p.limit.max(0)).unwrap_or(0);
        let mut opts = ListOptions {
            revision,
            limit,
            continue_token: cont.map(str::to_string),
        };
        let mut items: Vec<CachedObject> = Vec::new();
        loop {
            if limit > 0 {
                opts.limit = limit - items.len();
            }
            let page = self
                .storage
                .list(&prefix, &opts)
                .await
                .map_err(|e| match e {
                    StorageError::Expired { .. } if opts.continue_token.is_some() => {
                        ApiError::resource_expired(EXPIRED_CONTINUE)
                    }
                    StorageError::InvalidArgument(m) if opts.continue_token.is_some() => {
                        ApiError::bad_request(format!("invalid continue token: {m}"))
                    }
                    e => self.err("", e),
                })?;
            if self.strategy.fallible_conversion().is_some() {
                // The page in one conversion review, then filtered in the served form.
                let stored: Vec<Value> = page
                    .items
                    .iter()
                    .filter_map(|kv| decode_stored(&kv.value, kv.mod_revision))
                    .collect();
                for obj in self.all_served(stored).await? {
                    let obj = CachedObject::new(obj);
                    if filter.as_ref().is_none_or(|f| f(&obj)) {
                        items.push(obj);
                    }
                }
            } else {
                for KeyValue {
                    value,
                    mod_revision,
                    ..
                } in &page.items
                {
                    if let Some(obj) = self.cached_served(value, *mod_revision)
                        && filter.as_ref().is_none_or(|f| f(&obj))
                    {
                        items.push(obj);
                    }
                }
            }
            let done = page.continue_token.is_none() || limit == 0 || items.len() >= limit;
            if done {
                return Ok(Listed {
                    items,
                    resource_version: page.revision.to_string(),
                    remaining_item_count: (page.continue_token.is_some() && filter.is_none())
                        .then(|| i64::try_from(page.remaining).unwrap_or(i64::MAX)),
                    continue_token: page.continue_token,
                });
            }
            opts.continue_token = page.continue_token;
        }
    }

    /// The cache's objects under `prefix` that pass `filter`, in the served form: all of
    /// them, or with a positive `limit` the first page (upstream's cacher `GetList`: a
    /// page ends at the limit's last match, and continues after it at the cache's
    /// revision; the remaining count is given only without a selector).
    async fn list_from_cache(
        &self,
        prefix: &str,
        filter: Option<&Filter>,
        limit: i64,
    ) -> Result<Listed, ApiError> {
        let limit = usize::try_from(limit).unwrap_or(0);
        let (keys, items, rev) = if limit > 0 {
            self.cache.snapshot_keyed_objects(prefix)
        } else {
            let (items, rev) = self.cache.snapshot_objects(prefix);
            (Vec::new(), items, rev)
        };
        let items: Vec<CachedObject> = match self.strategy.storage_conversion() {
            _ if self.strategy.fallible_conversion().is_some() => self
                .all_served(items.into_iter().map(|o| (*o).clone()).collect())
                .await?
                .into_iter()
                .map(CachedObject::new)
                .collect(),
            Some(c) => items
                .into_iter()
                .map(|o| CachedObject::new(c.served_form((*o).clone())))
                .collect(),
            None => items,
        };
        let total = items.len();
        let mut listed = Listed {
            items: Vec::new(),
            resource_version: rev.to_string(),
            continue_token: None,
            remaining_item_count: None,
        };
        if limit == 0 {
            listed.items = match filter {
                Some(f) => items.into_iter().filter(|o| f(o)).collect(),
                None => items,
            };
            return Ok(listed);
        }
        for (i, o) in items.into_iter().enumerate() {
            if filter.is_none_or(|f| f(&o)) {
                listed.items.push(o);
            }
            if listed.items.len() >= limit {
                // The next page starts at the next key, which the snapshot has.
                if let Some(next) = keys.get(i + 1) {
                    let token = ferrokube_storage::ContinueToken {
                        revision: rev,
                        start_key: next.clone(),
                    };
                    listed.continue_token = Some(token.encode(prefix));
                    listed.remaining_item_count = filter
                        .is_none()
                        .then(|| i64::try_from(total - limit).unwrap_or(i64::MAX));
                }
                break;
            }
        }
        Ok(listed)
    }

    pub async fn watch(
        &self,
        ns: Option<&str>,
        p: &WatchParams,
    ) -> Result<mpsc::Receiver<WatchItem>, ApiError> {
        let filter = self
            .filter(p.label_selector.as_deref(), p.field_selector.as_deref())?
            .unwrap_or_else(|| Arc::new(|_: &Value| true));
        let rv = p.resource_version.as_deref().unwrap_or("");
        let rv_match = p.resource_version_match.as_deref().unwrap_or("");
        let errs = resource_version::validate_list_options(&resource_version::ListOptionsInput {
            watch: true,
            resource_version: rv,
            resource_version_match: rv_match,
            continue_token: "",
            send_initial_events: p.send_initial_events,
            watch_list_enabled: WATCH_LIST,
        });
        if !errs.is_empty() {
            return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", errs));
        }
        let requested = match rv {
            "" => None,
            rv => Some(parse_rv(rv)?),
        };
        let prefix = self.prefix(ns);
        // Where the stream starts, as upstream's cacher: `from` None sends the state as
        // ADDED events first (a legacy watch from "" or "0", or a streaming list, which
        // ends it with a bookmark when bookmarks are allowed); else events after `from`.
        let (from, initial_end) = match (p.send_initial_events, requested) {
            (Some(true), requested) => {
                // A consistent state: at least the store's current revision when the
                // request names none.
                let at = match requested {
                    None => self.latest_revision().await?,
                    Some(rv) => rv,
                };
                if at > 0 {
                    self.cache.wait_for(at, FRESHNESS_WAIT).await?;
                }
                (None, p.allow_bookmarks)
            }
            // No state: from the store's current revision ("") or the cache's ("0").
            (Some(false), None) => (Some(self.latest_revision().await?), false),
            (Some(false), Some(0)) => (Some(self.cache.revision()), false),
            (None, None | Some(0)) => (None, false),
            (_, Some(rv)) => (Some(rv), false),
        };
        let rx = self
            .cache
            .watch(
                prefix,
                from,
                initial_end,
                filter,
                p.allow_bookmarks,
                self.bookmark_interval,
            )
            .await?;
        Ok(
            match (
                self.strategy.storage_conversion(),
                self.strategy.fallible_conversion(),
            ) {
                (_, Some(_)) => converted_watch(rx, self.strategy.clone()),
                (Some(_), None) => served_watch(rx, self.strategy.clone()),
                (None, None) => rx,
            },
        )
    }

    /// The object an update stores, from the current one and the request, with the
    /// request's admission. Called once per attempt of the update loop.
    async fn compute_update(
        &self,
        name: &str,
        current: &KeyValue,
        input: &UpdateInput,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>, Value), ApiError> {
        let old = self
            .decode_served(&current.value, current.mod_revision)
            .await?;
        // A replacing body's uid is a precondition (upstream's
        // `DefaultUpdatedObjectInfo.Preconditions`), checked before anything else.
        if let UpdateInput::Replace(body) = input {
            let uid = meta::uid(body);
            if !uid.is_empty() && uid != meta::uid(&old) {
                return Err(uid_precondition_failed(
                    self.info,
                    name,
                    uid,
                    meta::uid(&old),
                ));
            }
        }
        let raw = match input {
            UpdateInput::Replace(v) => v.clone(),
            UpdateInput::Patch(ty, patch) => (self.patch)(self.info, *ty, &old, patch)?,
            UpdateInput::Apply { config, force } => managedfields::apply(
                Some(&old),
                config,
                &self.field_writer(part, opts, &self.now(), &self.info.api_version()),
                *force,
                (self.info.group, self.info.plural, name),
            )?,
        };
        let whole_body = matches!(input, UpdateInput::Replace(_));
        let (mut new, warnings) = self
            .decode(raw, opts, whole_body)
            .map_err(|e| match input {
                UpdateInput::Patch(ty, patch) => {
                    // Upstream shows the patched object for JSON and merge patches (its
                    // patcher still holds it) and the patch for strategic ones. The
                    // patched object went into the decode, so it is made again here,
                    // on the error path only.
                    let shown = match ty {
                        PatchType::Json | PatchType::Merge => {
                            (self.patch)(self.info, *ty, &old, patch).unwrap_or(Value::Null)
                        }
                        PatchType::StrategicMerge => patch.clone(),
                    };
                    patch_result_invalid(e, self.info, &shown)
                }
                _ => e,
            })?;
        if let Some(admit) = &opts.admit {
            admit.0.mutate(&mut new, Some(&old)).await?;
        }
        let new_name = meta::name(&new);
        if new_name.is_empty() {
            meta::set_meta(&mut new, "name", json!(name));
        } else if new_name != name {
            return Err(name_mismatch(new_name, name));
        }
        if self.info.namespaced {
            let old_ns = meta::namespace(&old).to_string();
            let new_ns = meta::namespace(&new);
            if !new_ns.is_empty() && new_ns != old_ns {
                return Err(namespace_mismatch());
            }
            meta::set_meta(&mut new, "namespace", json!(old_ns));
        }
        let rv = meta::resource_version(&new);
        if rv.is_empty() && !self.strategy.hooks().unconditional_update {
            // Upstream's store names the resource (its plural) where a kind would be,
            // and prints the missing version as Go's `%#v` of a uint64 0.
            return Err(ApiError::invalid(
                self.info.group,
                self.info.plural,
                name,
                vec![FieldError::invalid_printed(
                    &FieldPath::new("metadata").child("resourceVersion"),
                    "0x0",
                    "must be specified for an update",
                )],
            ));
        }
        if !rv.is_empty() && rv != current.mod_revision.to_string() {
            return Err(ApiError::conflict(
                self.info.group,
                self.info.plural,
                name,
                CONFLICT_MESSAGE,
            ));
        }
        let mut fin = match part {
            Part::Main => {
                let mut fin = new;
                let old_meta = meta::meta(&old).cloned().unwrap_or_default();
                keep_system_metadata(&mut fin, &old_meta);
                if self.info.has_subresource("status") {
                    self.take_status_half(&mut fin, &old);
                }
                if self.services.is_some() {
                    allocator::keep_allocated(&mut fin, &old);
                }
                if let Some(f) = self.strategy.hooks().prepare_update {
                    f(&mut fin, &old);
                }
                let status_apart = self.info.has_subresource("status");
                if self.strategy.hooks().tracks_generation
                    && self.generation_part(&fin, status_apart)
                        != self.generation_part(&old, status_apart)
                {
                    let g = old_meta
                        .get("generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    meta::set_meta(&mut fin, "generation", json!(g + 1));
                }
                fin
            }
            Part::Status => {
                let mut fin = old.clone();
                self.take_status_half(&mut fin, &new);
                if let Some(mf) = meta::meta(&new).and_then(|m| m.get("managedFields")) {
                    meta::set_meta(&mut fin, "managedFields", mf.clone());
                }
                fin
            }
            Part::Approval => {
                let mut fin = old.clone();
                let conditions = new["status"]["conditions"].clone();
                meta::set_member(&mut fin, "status", "conditions", conditions);
                fin
            }
            Part::EphemeralContainers => {
                let mut fin = old.clone();
                let ephemeral = new["spec"]["ephemeralContainers"].clone();
                meta::set_member(&mut fin, "spec", "ephemeralContainers", ephemeral);
                fin
            }
            Part::Resize => {
                let mut fin = crate::kinds::pod_resize(&new, &old);
                if fin["spec"] != old["spec"] {
                    let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
                    meta::set_meta(&mut fin, "generation", json!(g + 1));
                }
                fin
            }
            Part::Finalize => {
                let mut fin = old.clone();
                let fins = new["spec"]["finalizers"].clone();
                meta::set_member(&mut fin, "spec", "finalizers", fins);
                fin
            }
        };
        let tracked = |o: &Value| o["metadata"].get("managedFields").is_some();
        if !matches!(input, UpdateInput::Apply { .. })
            && !opts.managed_fields_worked_out
            && (tracked(&old) || tracked(&fin))
        {
            let (now, api_version) = (self.now(), self.info.api_version());
            fin = managedfields::track_update(
                &old,
                fin,
                &self.field_writer(part, opts, &now, &api_version),
            )?;
        }
        meta::omit_empty_metadata(&mut fin);
        meta::set_meta(
            &mut fin,
            "resourceVersion",
            json!(current.mod_revision.to_string()),
        );
        let mut errs = match part {
            Part::Resize => crate::kinds::validate_pod_resize(&fin, &old),
            _ => without_field_sets(&mut fin, |fin| self.strategy.validate_update(fin, &old)),
        };
        // Upstream validates the spec's containers on the main resource, and only the
        // ephemeral containers on their subresource; status and resize writes are not
        // held to it.
        match part {
            Part::Main => errs.extend(self.cluster_policy_errors(&fin)),
            Part::EphemeralContainers => errs.extend(
                self.cluster_policy_errors(&fin)
                    .into_iter()
                    .filter(|e| e.field.starts_with("spec.ephemeralContainers")),
            ),
            _ => {}
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid(
                self.info.group,
                self.info.kind,
                name,
                errs,
            ));
        }
        if let Some(admit) = &opts.admit
            && fin != old
        {
            admit.0.validate(&mut fin, Some(&old)).await?;
        }
        Ok((fin, warnings, old))
    }

    /// Gives `to` the status half of `from`: its `status` and the annotations the
    /// served form keeps status in.
    fn take_status_half(&self, to: &mut Value, from: &Value) {
        meta::copy_annotations(to, from, self.strategy.hooks().status_annotations);
        if let Some(o) = to.as_object_mut() {
            match from.get("status") {
                Some(s) => o.insert("status".into(), s.clone()),
                None => o.remove("status"),
            };
        }
    }

    /// What a spec change is judged on, in the stored form: a served form may keep part
    /// of the spec elsewhere (an `autoscaling/v1` HPA's other metrics and behavior are
    /// annotations), which the stored form has in its spec.
    fn generation_part(&self, obj: &Value, status_apart: bool) -> Value {
        match self.strategy.storage_conversion() {
            Some(c) => generation_part(&c.stored_form(obj.clone()), status_apart),
            None => generation_part(obj, status_apart),
        }
    }

    /// Who a write of `part` is in `metadata.managedFields`, and what it may own.
    fn field_writer<'a>(
        &self,
        part: Part,
        opts: &'a WriteOptions,
        now: &'a str,
        api_version: &'a str,
    ) -> Writer<'a> {
        let (subresource, scope) = match part {
            Part::Main if self.info.has_subresource("status") => ("", Scope::AllButStatus),
            Part::Main => ("", Scope::Object),
            Part::Status => ("status", Scope::StatusOnly),
            Part::Finalize => ("finalize", Scope::Object),
            Part::Approval => ("approval", Scope::Object),
            Part::EphemeralContainers => ("ephemeralcontainers", Scope::Object),
            Part::Resize => ("resize", Scope::Object),
        };
        Writer {
            // A write the apiserver makes itself; upstream makes those through its
            // loopback client, whose User-Agent names it.
            manager: opts.field_manager.as_deref().unwrap_or("kube-apiserver"),
            api_version,
            subresource: opts.via_subresource.unwrap_or(subresource),
            now,
            schema: self.field_schema,
            scope,
        }
    }

    /// Server-side apply: an update with [`UpdateInput::Apply`], or a create when the
    /// object does not exist (upstream's apply patcher creates too).
    pub async fn apply(
        &self,
        ns: Option<&str>,
        name: &str,
        config: Value,
        force: bool,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let input = UpdateInput::Apply {
            config: config.clone(),
            force,
        };
        match self.update(ns, name, input, part, opts).await {
            Err(e) if e.code == 404 && part == Part::Main => {
                let config_name = meta::name(&config);
                if !config_name.is_empty() && config_name != name {
                    return Err(name_mismatch(config_name, name));
                }
                let (now, api_version) = (self.now(), self.info.api_version());
                let mut obj = managedfields::apply(
                    None,
                    &config,
                    &self.field_writer(part, opts, &now, &api_version),
                    force,
                    (self.info.group, self.info.plural, name),
                )?;
                meta::set_meta(&mut obj, "name", json!(name));
                self.insert(ns, obj, opts, false).await
            }
            other => other,
        }
    }

    /// Server-side apply of an `autoscaling/v1` Scale through the `scale` subresource:
    /// the apply runs on the Scale `view` makes of the object, with the object's owners
    /// of its replicas field as the Scale's owners, and its outcome sets that field and
    /// its ownership on the object (upstream's `ScaleHandler`). Returns the written
    /// object.
    pub async fn apply_through_scale(
        &self,
        ns: Option<&str>,
        name: &str,
        (config, force): (&Value, bool),
        view: &(dyn ScaleView + Sync),
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let replicas = view.replicas_path();
        let opts = WriteOptions {
            via_subresource: Some("scale"),
            managed_fields_worked_out: true,
            ..opts.clone()
        };
        check_scale(config, name)?;
        let warnings = field_validation(
            &strategy::unknown_fields::<k8s_openapi::api::autoscaling::v1::Scale>(config),
            &opts,
            None,
        )?;
        let (now, api_version) = (self.now(), self.info.api_version());
        let who = Writer {
            subresource: "scale",
            api_version: "autoscaling/v1",
            schema: Schema::for_kind("autoscaling", "v1", "Scale"),
            scope: Scope::AllButStatus,
            ..self.field_writer(Part::Main, &opts, &now, &api_version)
        };
        // The write names the resourceVersion the apply read: a write in between
        // makes it start over from the new object, as a guaranteed update would. A
        // resourceVersion in the Scale is a precondition instead, as on any apply: a
        // write in between is the caller's 409.
        let precondition = meta::meta_str(config, "resourceVersion").filter(|rv| !rv.is_empty());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.get(ns, name).await?;
            let scale = managedfields::scale_with_parent_managers(
                view.to_scale(&current),
                &current,
                replicas,
            );
            let applied = managedfields::apply(
                Some(&scale),
                config,
                &who,
                force,
                (self.info.group, self.info.plural, name),
            )?;
            let managed =
                managedfields::parent_managed_fields(&current, &applied, replicas, &api_version);
            let mut patch = view.replicas_patch(applied["spec"]["replicas"].as_i64().unwrap_or(0));
            patch["metadata"] = json!({
                "resourceVersion": precondition.map_or_else(
                    || current["metadata"]["resourceVersion"].clone(),
                    |rv| json!(rv),
                ),
                "managedFields": managed,
            });
            let input = UpdateInput::Patch(PatchType::Merge, patch);
            match self.update(ns, name, input, Part::Main, &opts).await {
                Err(e)
                    if e.code == 409 && precondition.is_none() && attempt < MAX_UPDATE_ATTEMPTS =>
                {
                    continue;
                }
                Ok(mut written) => {
                    written.warnings.extend(warnings);
                    return Ok(written);
                }
                other => return other,
            }
        }
    }

    /// PUT (`input` a full object) or PATCH (`input` a patch) of the main resource or
    /// a subresource.
    pub async fn update(
        &self,
        ns: Option<&str>,
        name: &str,
        input: UpdateInput,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let key = self.key(ns, name);
        if opts.dry_run {
            let current = self
                .storage
                .get(&key, None)
                .await
                .map_err(|e| self.err(name, e))?;
            let (fin, warnings, _) = self
                .compute_update(name, &current, &input, part, opts)
                .await?;
            return Ok(Written {
                object: self.as_read_back(fin),
                json: None,
                warnings,
                created: false,
            });
        }
        // Service allocation of the current attempt (with the object that holds it),
        // given back when the attempt's write does not happen.
        let alloc = self.services.as_ref().filter(|_| part == Part::Main);
        let mut reserved: Option<(allocator::Reserved, Value)> = None;
        async fn release(
            alloc: Option<&Arc<ServiceClaims>>,
            reserved: &mut Option<(allocator::Reserved, Value)>,
        ) {
            if let (Some(ips), Some((r, svc))) = (alloc, reserved.take()) {
                ips.rollback(&r, &svc).await;
            }
        }
        // Read-modify-write, as storage's guaranteed update, but with the (async)
        // admission inside every attempt: a write that lost the race starts over from
        // the new current object, so admission always saw what is replaced.
        let mut attempt = 0;
        // The served object the successful attempt stored.
        let mut written = Value::Null;
        let (kv, warnings, replaced) = loop {
            attempt += 1;
            release(alloc, &mut reserved).await;
            let current = self
                .storage
                .get(&key, None)
                .await
                .map_err(|e| self.err(name, e))?;
            let (mut fin, warnings, old) = self
                .compute_update(name, &current, &input, part, opts)
                .await?;
            if fin == old {
                break (current, warnings, None);
            }
            if let Some(ips) = alloc {
                let r = ips.allocate_update(&mut fin, &old).await?;
                reserved = Some((r, fin.clone()));
            }
            let bytes = match self.encode_stored(&fin).await {
                Ok(b) => b,
                Err(e) => {
                    release(alloc, &mut reserved).await;
                    return Err(e);
                }
            };
            match self
                .storage
                .compare_and_swap(&key, current.mod_revision, bytes)
                .await
            {
                Ok(kv) => {
                    written = fin;
                    break (kv, warnings, Some(old));
                }
                Err(StorageError::Conflict { .. }) if attempt < MAX_UPDATE_ATTEMPTS => continue,
                Err(e) => {
                    release(alloc, &mut reserved).await;
                    return Err(self.err(name, e));
                }
            }
        };
        let unchanged = replaced.is_none();
        let object = match &replaced {
            Some(_) => self.written_served(&written, &kv).await?,
            None => self.decode_served(&kv.value, kv.mod_revision).await?,
        };
        if let (Some(ips), Some(old)) = (alloc, &replaced)
            && !unchanged
        {
            ips.finish_update(&object, old).await;
        }
        if !unchanged && self.is_finished_deleting(&object) {
            return self
                .finish_delete(&key, name, kv.mod_revision)
                .await
                .map(|object| Written {
                    object,
                    json: None,
                    warnings,
                    created: false,
                });
        }
        Ok(Written {
            object,
            json: None,
            warnings,
            created: false,
        })
    }

    /// A marked object whose finalizers are all gone.
    fn is_finished_deleting(&self, obj: &Value) -> bool {
        if !meta::has_deletion_timestamp(obj) || !meta::finalizers(obj).is_empty() {
            return false;
        }
        if self.info.kind == "Namespace" && self.info.group.is_empty() {
            return obj["spec"]["finalizers"]
                .as_array()
                .is_none_or(|a| a.is_empty());
        }
        if self.info.kind == "Pod" && self.info.group.is_empty() {
            // The kubelet finishes a graceful pod deletion with a delete of grace 0.
            return obj["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .is_none_or(|g| g == 0);
        }
        true
    }

    async fn finish_delete(
        &self,
        key: &str,
        name: &str,
        revision: Revision,
    ) -> Result<Value, ApiError> {
        match self
            .storage
            .delete(key, &Preconditions::revision(revision))
            .await
        {
            Ok(d) => {
                if let Some(ips) = &self.services {
                    ips.release(&decode_stored(&d.previous.value, d.revision).unwrap_or_default())
                        .await;
                }
                self.decode_served(&d.previous.value, d.previous.mod_revision)
                    .await
            }
            Err(e) => Err(self.err(name, e)),
        }
    }

    pub async fn delete(
        &self,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let key = self.key(ns, name);
        // A few rounds against concurrent writers; each round re-reads.
        for _ in 0..5 {
            let current = self
                .storage
                .get(&key, None)
                .await
                .map_err(|e| self.err(name, e))?;
            let obj = self
                .decode_served(&current.value, current.mod_revision)
                .await?;
            if let Some(uid) = &opts.precondition_uid
                && uid != meta::uid(&obj)
            {
                return Err(uid_precondition_failed(
                    self.info,
                    name,
                    uid,
                    meta::uid(&obj),
                ));
            }
            if let Some(rv) = &opts.precondition_resource_version
                && rv != meta::resource_version(&obj)
            {
                return Err(ApiError::conflict(
                    self.info.group,
                    self.info.plural,
                    name,
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta::resource_version(&obj)
                    ),
                ));
            }
            if let Some(admit) = &opts.admit {
                admit.0.validate_delete(&obj).await?;
            }
            let marked = self.mark_for_deletion(&obj, opts);
            let Some(marked) = marked else {
                if opts.dry_run {
                    return Ok(Deleted {
                        object: obj,
                        gone: true,
                    });
                }
                match self.finish_delete(&key, name, current.mod_revision).await {
                    Ok(object) => return Ok(Deleted { object, gone: true }),
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e),
                }
            };
            if marked == obj || opts.dry_run {
                return Ok(Deleted {
                    object: marked,
                    gone: false,
                });
            }
            let bytes = self.encode_stored(&marked).await?;
            match self
                .storage
                .compare_and_swap(&key, current.mod_revision, bytes)
                .await
            {
                Ok(kv) => {
                    let object = self.written_served(&marked, &kv).await?;
                    return Ok(Deleted {
                        object,
                        gone: false,
                    });
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(self.err(name, e)),
            }
        }
        Err(ApiError::conflict(
            self.info.group,
            self.info.plural,
            name,
            "too many concurrent writes during delete; retry",
        ))
    }

    /// `Some(marked object)` when the delete only marks the object (finalizers,
    /// propagation finalizers, graceful pod deletion, namespaces); `None` when it
    /// removes it now.
    fn mark_for_deletion(&self, obj: &Value, opts: &DeleteOptions) -> Option<Value> {
        let mut fins = gc_finalizers(self.strategy.hooks().gc_policy, meta::finalizers(obj), opts);
        // A definition first deletes its custom resources (upstream's CRD REST delete
        // adds the cleanup finalizer that `crate::custom` removes when they are gone).
        if crate::custom::is_definition(self.info)
            && !meta::has_deletion_timestamp(obj)
            && !fins.iter().any(|f| f == crate::custom::CLEANUP_FINALIZER)
        {
            fins.push(crate::custom::CLEANUP_FINALIZER.into());
        }
        let is_ns = self.info.group.is_empty() && self.info.kind == "Namespace";
        let is_pod = self.info.group.is_empty() && self.info.kind == "Pod";
        let ns_fins = is_ns
            && obj["spec"]["finalizers"]
                .as_array()
                .is_some_and(|a| !a.is_empty());
        let grace = if is_pod { self.pod_grace(obj, opts) } else { 0 };
        if fins.is_empty() && !ns_fins && grace == 0 {
            return None;
        }
        let mut marked = obj.clone();
        if !fins.is_empty() {
            meta::set_meta(&mut marked, "finalizers", json!(fins));
        }
        let already = meta::has_deletion_timestamp(obj);
        if grace > 0 {
            let prev = obj["metadata"]["deletionGracePeriodSeconds"].as_i64();
            if !already || prev.is_none_or(|p| grace < p) {
                // A grace period past year 9999 ends there (Go's arithmetic would wrap).
                let at = self
                    .clock
                    .now()
                    .checked_add(jiff::SignedDuration::from_secs(grace))
                    .unwrap_or(jiff::Timestamp::MAX);
                meta::set_meta(
                    &mut marked,
                    "deletionTimestamp",
                    json!(meta::format_time(at)),
                );
                meta::set_meta(&mut marked, "deletionGracePeriodSeconds", json!(grace));
                if let Some(g) = obj["metadata"]["generation"].as_i64() {
                    meta::set_meta(&mut marked, "generation", json!(g + 1));
                }
            }
        } else if !already
            || obj["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .is_some_and(|p| p > 0)
        {
            // A delete of grace 0 ends a pending graceful one (upstream's
            // `BeforeDelete` only ever shortens it): the kubelet's last delete of a pod
            // that still has finalizers, so the pod goes once they are removed.
            meta::set_meta(&mut marked, "deletionTimestamp", json!(self.now()));
            meta::set_meta(&mut marked, "deletionGracePeriodSeconds", json!(0));
        }
        if is_ns && let Some(o) = marked.as_object_mut() {
            let status = o.entry("status").or_insert_with(|| json!({}));
            if let Some(s) = status.as_object_mut() {
                s.insert("phase".into(), json!("Terminating"));
            }
        }
        Some(marked)
    }

    /// The grace period of a pod delete: 0 for a pod never scheduled or already
    /// terminal, else the request's or the pod's `terminationGracePeriodSeconds`.
    fn pod_grace(&self, pod: &Value, opts: &DeleteOptions) -> i64 {
        let scheduled = pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        let terminal = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded") | Some("Failed")
        );
        if !scheduled || terminal {
            return 0;
        }
        opts.grace_period_seconds
            .unwrap_or_else(|| {
                pod["spec"]["terminationGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(30)
            })
            .max(0)
    }

    pub async fn delete_collection(
        &self,
        ns: Option<&str>,
        list: &ListParams,
        opts: &DeleteOptions,
    ) -> Result<Vec<Value>, ApiError> {
        let listed = self.list(ns, list).await?;
        let mut out = Vec::new();
        for obj in listed.items {
            let item_ns = meta::namespace(&obj);
            let item_ns = (!item_ns.is_empty()).then_some(item_ns);
            match self.delete(item_ns, meta::name(&obj), opts).await {
                Ok(d) => out.push(d.object),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Creates `obj` unless an object of that name exists (built-in objects at start).
    pub async fn ensure(&self, ns: Option<&str>, obj: Value) -> Result<(), ApiError> {
        match self.get(ns, meta::name(&obj)).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        match self.create(ns, obj, &WriteOptions::default()).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn cache(&self) -> &Arc<ResourceCache> {
        &self.cache
    }
}

/// A watch of stored objects as a watch of the served form (the cache's selectors
/// only look at metadata here, which both forms share).
fn served_watch(
    mut rx: mpsc::Receiver<WatchItem>,
    strategy: Arc<dyn Strategy>,
) -> mpsc::Receiver<WatchItem> {
    let (tx, out) = mpsc::channel(rx.max_capacity());
    let convert = move |o: &Value| match strategy.storage_conversion() {
        Some(c) => c.served_form(o.clone()),
        None => o.clone(),
    };
    tokio::spawn(async move {
        while let Some(item) = rx.recv().await {
            let item = match item {
                WatchItem::Event(ev) => WatchItem::Event(Arc::new(ev.converted(&convert))),
                WatchItem::Synthetic(kind, obj) => {
                    WatchItem::Synthetic(kind, CachedObject::new(convert(&obj)))
                }
                other => other,
            };
            if tx.send(item).await.is_err() {
                break;
            }
        }
    });
    out
}

/// A watch of stored objects as a watch of the served form through a fallible
/// conversion (a custom resource's conversion webhook), one review per event. An event
/// that cannot be converted ends the watch with an ERROR event carrying the failure.
fn converted_watch(
    mut rx: mpsc::Receiver<WatchItem>,
    strategy: Arc<dyn Strategy>,
) -> mpsc::Receiver<WatchItem> {
    let (tx, out) = mpsc::channel(rx.max_capacity());
    tokio::spawn(async move {
        let Some(conversion) = strategy.fallible_conversion() else {
            return;
        };
        let convert = |o: &Value| {
            let o = o.clone();
            async move {
                conversion
                    .served_form(vec![o], false)
                    .await?
                    .pop()
                    .map(CachedObject::new)
                    .ok_or_else(|| ApiError::internal("conversion returned no object"))
            }
        };
        loop {
            let item = tokio::select! {
                item = rx.recv() => item,
                // The watcher went away: stop converting for it.
                () = tx.closed() => None,
            };
            let Some(item) = item else { break };
            let converted = match item {
                WatchItem::Event(ev) => convert(&ev.object)
                    .await
                    .map(|o| WatchItem::Event(Arc::new(ev.with_object(o)))),
                WatchItem::Synthetic(kind, obj) => {
                    convert(&obj).await.map(|o| WatchItem::Synthetic(kind, o))
                }
                other => Ok(other),
            };
            let (item, last) = match converted {
                Ok(item) => (item, false),
                Err(e) => (WatchItem::Error(e), true),
            };
            if tx.send(item).await.is_err() || last {
                break;
            }
        }
    });
    out
}

/// The body of an update: a whole object (PUT) or a patch.
#[derive(Clone, Debug)]
pub enum UpdateInput {
    Replace(Value),
    Patch(PatchType, Value),
    /// Server-side apply of a configuration (`application/apply-patch+yaml`) by
    /// [`WriteOptions::field_manager`]; `force` takes conflicting fields over.
    Apply {
        config: Value,
        force: bool,
    },
}

/// A patch whose result does not decode as the resource (`{"spec": {"replicas": "x"}}`):
/// upstream's patcher answers 422 ` "" is invalid: patch: Invalid value: "<shown>":
/// <why>` (kubectl: `The request is invalid: ...`), not a body's 400; `shown` is what
/// upstream shows, the patched object or the patch.
fn patch_result_invalid(e: ApiError, info: &ResourceInfo, shown: &Value) -> ApiError {
    match e.undecodable_why(info.kind, info.version) {
        Some(why) => {
            let invalid = FieldError::invalid(&FieldPath::new("patch"), shown.to_string(), why);
            ApiError::invalid("", "", "", vec![invalid])
        }
        None => e,
    }
}

/// An empty object of the store's kind (for patches that create nothing).
pub fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// The request's `fieldValidation` applied to a body's unknown fields and the
/// duplicate fields its decoder found: a 400 (`Strict`), warnings (`Warn`: sent to the
/// request's sink, or returned without one) or nothing (`Ignore`). `body_of`: the
/// resource whose request body they are in, for a create or a PUT, whose strict error
/// upstream's body decoder words as `<Kind> in version "<v>" cannot be handled as a
/// <Kind>: strict decoding error: ...` (a patch's is the bare strict decoding error).
fn field_validation(
    unknown: &[String],
    opts: &WriteOptions,
    body_of: Option<&ResourceInfo>,
) -> Result<Vec<String>, ApiError> {
    let problems = strict_problems(unknown, opts).into_iter();
    match opts.field_validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => match &opts.warnings {
            Some(sink) => {
                problems.for_each(|p| sink.add(p));
                Ok(Vec::new())
            }
            None => Ok(problems.collect()),
        },
        FieldValidation::Strict => {
            let problems: Vec<String> = problems.collect();
            if problems.is_empty() {
                return Ok(Vec::new());
            }
            let why = format!("strict decoding error: {}", problems.join(", "));
            Err(match body_of {
                Some(info) => ApiError::undecodable(info.kind, info.version, why),
                None => ApiError::bad_request(why),
            })
        }
    }
}

/// The unknown and duplicate fields as upstream's strict decoder words them, in the
/// body's order when it is JSON (each duplicate where it repeats), else unknown fields
/// first.
fn strict_problems(unknown: &[String], opts: &WriteOptions) -> Vec<String> {
    use ferrokube_apimachinery::document_order::{FieldAt, document_order};
    let mut fields: Vec<(FieldAt<'_>, &str)> = unknown
        .iter()
        .map(|f| {
            let at = FieldAt {
                path: f,
                occurrence: 1,
            };
            (at, "unknown")
        })
        .collect();
    let mut repeats: std::collections::HashMap<&str, usize> = Default::default();
    for f in &opts.duplicate_fields {
        let seen = repeats.entry(f).or_insert(1);
        *seen += 1;
        let at = FieldAt {
            path: f,
            occurrence: *seen,
        };
        fields.push((at, "duplicate"));
    }
    let order: Vec<usize> = match &opts.json_body {
        Some(body) if fields.len() > 1 => {
            let at: Vec<FieldAt<'_>> = fields.iter().map(|(at, _)| at.clone()).collect();
            document_order(body, &at)
        }
        _ => (0..fields.len()).collect(),
    };
    order
        .into_iter()
        .map(|i| format!("{} field {:?}", fields[i].1, fields[i].0.path))
        .collect()
}

const ORPHAN_FINALIZER: &str = "orphan";
const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Upstream `deletionFinalizersForGarbageCollection`: the finalizers an object keeps
/// when deleted, with the garbage collector's set as the delete asks (`orphan` to
/// orphan its dependents, `foregroundDeletion` to delete them first, neither for the
/// background), or as the object's own say when the delete says nothing, or as the
/// resource's default. Unchanged when that is the same set.
fn gc_finalizers(policy: GcPolicy, finalizers: Vec<String>, opts: &DeleteOptions) -> Vec<String> {
    if policy == GcPolicy::Unsupported {
        return finalizers;
    }
    // The first of the two the object has, which validation keeps it from having both
    // of.
    let held = finalizers
        .iter()
        .find(|f| *f == ORPHAN_FINALIZER || *f == FOREGROUND_FINALIZER)
        .map(String::as_str);
    let (orphan, foreground) = match (opts.orphan_dependents, opts.propagation_policy.as_deref()) {
        (Some(orphan), _) => (orphan, false),
        (None, Some("Orphan")) => (true, false),
        (None, Some("Foreground")) => (false, true),
        (None, Some("Background")) => (false, false),
        _ => match held {
            Some(ORPHAN_FINALIZER) => (true, false),
            Some(_) => (false, true),
            None => (policy == GcPolicy::OrphanDependents, false),
        },
    };
    let mut wanted: Vec<String> = finalizers
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    if orphan {
        wanted.push(ORPHAN_FINALIZER.into());
    }
    if foreground {
        wanted.push(FOREGROUND_FINALIZER.into());
    }
    let same = wanted.len() == finalizers.len() && wanted.iter().all(|f| finalizers.contains(f));
    if same { finalizers } else { wanted }
}

/// Checks a Scale written to `name`'s `scale` subresource (the body of a PUT, a
/// patched Scale, an apply configuration): its type, that it decodes as one (a replica
/// count that is no number is an error, not 0) and, where set, its name.
pub fn check_scale(scale: &Value, name: &str) -> Result<(), ApiError> {
    check_type(scale, "autoscaling/v1", "Scale")?;
    ApiError::check_decodes_as::<k8s_openapi::api::autoscaling::v1::Scale>(scale, "Scale", "v1")?;
    let body_name = meta::name(scale);
    if !body_name.is_empty() && body_name != name {
        return Err(name_mismatch(body_name, name));
    }
    Ok(())
}

/// Checks a body's `apiVersion`/`kind`, where set, against what the URL serves.
fn check_type(obj: &Value, want_api_version: &str, want_kind: &str) -> Result<(), ApiError> {
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != want_api_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({want_api_version})"
        )));
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != want_kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({want_kind})"
        )));
    }
    Ok(())
}

/// What an update keeps of the stored object's system metadata, as upstream's
/// `BeforeUpdate`: its generation and creation time always; its uid when the update
/// names none; its deletion time and grace period once set (an update cannot take them
/// off). Any other change of these (another uid, a deletion time on a live object) is
/// left for the metadata validation to refuse as immutable.
fn keep_system_metadata(new: &mut Value, old_meta: &serde_json::Map<String, Value>) {
    let old = |f: &str| old_meta.get(f).filter(|v| !v.is_null()).cloned();
    meta::set_meta(new, "generation", old("generation").unwrap_or(Value::Null));
    if meta::uid(new).is_empty() {
        meta::set_meta(new, "uid", old("uid").unwrap_or(Value::Null));
    }
    if let Some(created) = old("creationTimestamp") {
        meta::set_meta(new, "creationTimestamp", created);
    }
    if let Some(deleted) = old("deletionTimestamp") {
        meta::set_meta(new, "deletionTimestamp", deleted);
    }
    let grace_given = meta::meta(new)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .is_some_and(|v| !v.is_null());
    if let (Some(grace), false) = (old("deletionGracePeriodSeconds"), grace_given) {
        meta::set_meta(new, "deletionGracePeriodSeconds", grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_sees_managed_fields_without_their_field_sets() {
        let mut obj = json!({"metadata": {"name": "a", "managedFields": [
            {"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:k": {}}}},
            {"manager": "n", "operation": "Apply"},
        ]}});
        let before = obj.clone();
        let seen = without_field_sets(&mut obj, Value::clone);
        let entries = seen["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["manager"], "m");
        assert!(entries.iter().all(|e| e.get("fieldsV1").is_none()));
        assert_eq!(obj, before, "the sets are back after the call");
    }

    #[test]
    fn selector_errors_read_as_upstream() {
        let message = |label: Option<&str>, field: Option<&str>| {
            let e = parse_selectors(label, field, &["metadata.name"]).unwrap_err();
            assert_eq!(e.code, 400);
            e.message
        };
        // The parser's own prefix, once (it was doubled).
        assert_eq!(
            message(Some("a in ("), None),
            "unable to parse requirement: found '', expected: ',', ')' or identifier"
        );
        assert_eq!(
            message(None, Some("spec.nodeName=x")),
            "field label not supported: spec.nodeName"
        );
        assert!(
            parse_selectors(
                Some("a in (b)"),
                Some("metadata.name=x"),
                &["metadata.name"]
            )
            .is_ok()
        );
    }
}
