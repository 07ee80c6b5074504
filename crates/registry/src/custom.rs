//! Custom resources: the resources CustomResourceDefinitions declare, served by the
//! same generic [`Store`] as the built-in ones with a schema-driven strategy
//! ([`CustomResourceStrategy`]), and the definitions' own lifecycle that upstream's
//! apiextensions-apiserver controllers run in the apiserver: names accepted,
//! established, and on delete every custom resource removed before the definition
//! goes ([`run_definitions`]).
//!
//! What is served is a snapshot ([`Served`]) rebuilt from the definitions whenever one
//! changes and swapped whole, so a request sees one consistent set. A custom
//! resource's objects live at upstream's keys (`/registry/<group>/<plural>/...`), in
//! its storage version; every served version reads and writes them, with only
//! `apiVersion` converted (the `None` conversion strategy), or through the
//! definition's conversion webhook (the `Webhook` strategy, [`crate::conversion`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ferrokube_api::resources::{
    ALL_VERBS, GET_PATCH_UPDATE, ResourceInfo, SelectableField, SubresourceInfo, intern,
    intern_field_paths, intern_str, intern_strs, intern_subresources,
};
use ferrokube_apiextensions::printer::PrinterColumns;
use ferrokube_apiextensions::schema::StructuralSchema;
use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use ferrokube_apimachinery::validation::{
    name_is_dns_subdomain, validate_object_meta, validate_object_meta_update,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::conversion::{FallibleConversion, WebhookConversion, WebhookSlot};
use crate::meta;
use crate::store::{DeleteOptions, ListParams, Part, PatchType, UpdateInput, WatchParams};
use crate::strategy::{Decoded, Hooks, StorageConversion, Strategy, format_path, validate_meta};
use crate::{Store, WriteOptions};

pub const GROUP: &str = "apiextensions.k8s.io";
/// Upstream's finalizer on a definition being deleted, until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Whether `info` is the CustomResourceDefinitions resource itself.
pub fn is_definition(info: &ResourceInfo) -> bool {
    info.group == GROUP && info.kind == "CustomResourceDefinition"
}

/// One served version of one custom resource.
pub struct CustomResource {
    pub info: &'static ResourceInfo,
    pub store: Arc<Store>,
    /// The Table columns of this version.
    pub columns: PrinterColumns,
    /// The definition it is served from, as it was when this was built.
    pub definition: Arc<CustomResourceDefinition>,
    /// The served version's name.
    pub version: String,
    /// When the definition is being deleted: no new objects.
    pub terminating: bool,
}

impl std::fmt::Debug for CustomResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomResource")
            .field("group", &self.info.group)
            .field("version", &self.info.version)
            .field("plural", &self.info.plural)
            .finish()
    }
}

impl CustomResource {
    /// The served version's definition entry.
    pub fn version_spec(&self) -> Option<&CustomResourceDefinitionVersion> {
        self.definition
            .spec
            .versions
            .iter()
            .find(|v| v.name == self.version)
    }
}

/// Everything served at one moment.
#[derive(Debug, Default)]
pub struct Served {
    by_path: HashMap<(String, String, String), Arc<CustomResource>>,
    /// Group-versions in discovery order: groups by name, versions in upstream's
    /// version priority (GA over beta over alpha, higher numbers first).
    group_versions: Vec<(String, Vec<String>)>,
}

impl Served {
    /// The custom resource at `/apis/<group>/<version>/<plural>`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<CustomResource>> {
        self.by_path
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// Groups with their versions, preferred version first.
    pub fn group_versions(&self) -> &[(String, Vec<String>)] {
        &self.group_versions
    }

    /// The resources of one group-version, by plural.
    pub fn resources_of(&self, group: &str, version: &str) -> Vec<&Arc<CustomResource>> {
        let mut out: Vec<&Arc<CustomResource>> = self
            .by_path
            .values()
            .filter(|r| r.info.group == group && r.info.version == version)
            .collect();
        out.sort_by_key(|r| r.info.plural);
        out
    }

    /// Every served custom resource version.
    pub fn all(&self) -> impl Iterator<Item = &Arc<CustomResource>> {
        self.by_path.values()
    }

    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }
}

/// What building a custom resource's store takes (the registry's shared parts).
pub(crate) struct StoreFactory(pub(crate) Box<dyn Fn(Arc<dyn Strategy>) -> Store + Send + Sync>);

/// The served custom resources, swapped whole when a definition changes.
pub struct CustomResources {
    served: RwLock<Arc<Served>>,
    /// Bumped on every swap (the OpenAPI documents and discovery follow it).
    generation: tokio::sync::watch::Sender<u64>,
    factory: StoreFactory,
    /// The conversion webhook client every `Webhook`-strategy strategy calls.
    webhook: WebhookSlot,
}

impl std::fmt::Debug for CustomResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomResources").finish()
    }
}

impl CustomResources {
    pub(crate) fn new(factory: StoreFactory) -> Self {
        CustomResources {
            served: RwLock::new(Arc::new(Served::default())),
            generation: tokio::sync::watch::channel(0).0,
            factory,
            webhook: WebhookSlot::default(),
        }
    }

    /// Sets the client of conversion webhooks (once; later calls are ignored).
    pub fn set_conversion_webhook(&self, webhook: Arc<dyn crate::conversion::ConversionWebhook>) {
        let _ = self.webhook.set(webhook);
    }

    /// What is served now.
    pub fn served(&self) -> Arc<Served> {
        self.served
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A receiver that changes whenever what is served does.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Rebuilds the served set from the definitions, keeping the stores of the
    /// versions whose definition did not change.
    fn rebuild(&self, definitions: &[CustomResourceDefinition]) {
        let previous = self.served();
        let mut by_path = HashMap::new();
        let mut groups: BTreeMap<String, HashMap<String, i64>> = BTreeMap::new();
        for crd in definitions.iter().filter(|c| is_established(c)) {
            let terminating = crd.metadata.deletion_timestamp.is_some();
            let definition = Arc::new(crd.clone());
            // Once per definition, not per version: a definition of n versions would
            // compare its whole spec n times and build every version's schema n times
            // (2,000 versions: minutes of CPU and gigabytes).
            let mut compared_with: Option<(Arc<CustomResourceDefinition>, bool)> = None;
            let mut stored_schemas: Option<StoredSchemas> = None;
            for v in crd.spec.versions.iter().filter(|v| v.served) {
                let key = (
                    crd.spec.group.clone(),
                    v.name.clone(),
                    crd.spec.names.plural.clone(),
                );
                let unchanged = previous.by_path.get(&key).filter(|r| {
                    r.definition.metadata.uid == crd.metadata.uid
                        && r.terminating == terminating
                        && match &compared_with {
                            Some((d, same)) if Arc::ptr_eq(d, &r.definition) => *same,
                            _ => {
                                let same = r.definition.spec == crd.spec;
                                compared_with = Some((r.definition.clone(), same));
                                same
                            }
                        }
                });
                let resource = match unchanged {
                    Some(r) => r.clone(),
                    None => {
                        let stored_schemas = stored_schemas
                            .get_or_insert_with(|| StoredSchemas::new(crd))
                            .clone();
                        let strategy = Arc::new(CustomResourceStrategy::for_version(
                            &definition,
                            v,
                            &self.webhook,
                            stored_schemas,
                        ));
                        let info = strategy.info;
                        Arc::new(CustomResource {
                            info,
                            store: Arc::new((self.factory.0)(strategy)),
                            columns: PrinterColumns::new(v.additional_printer_columns.as_deref()),
                            definition: definition.clone(),
                            version: v.name.clone(),
                            terminating,
                        })
                    }
                };
                groups
                    .entry(crd.spec.group.clone())
                    .or_default()
                    .entry(v.name.clone())
                    .or_insert_with(|| version_priority(&v.name));
                by_path.insert(key, resource);
            }
        }
        let group_versions = groups
            .into_iter()
            .map(|(g, versions)| {
                let mut versions: Vec<(String, i64)> = versions.into_iter().collect();
                versions.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                (g, versions.into_iter().map(|(n, _)| n).collect())
            })
            .collect();
        let changed = by_path.len() != previous.by_path.len()
            || by_path
                .iter()
                .any(|(k, r)| previous.by_path.get(k).is_none_or(|p| !Arc::ptr_eq(p, r)));
        if !changed {
            return;
        }
        *self.served.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Served {
            by_path,
            group_versions,
        });
        self.generation.send_modify(|g| *g += 1);
    }
}

/// Upstream's version priority (`version.CompareKubeAwareVersionStrings`): GA
/// versions first by number, then betas, then alphas, then anything else.
pub fn version_priority(v: &str) -> i64 {
    let Some(rest) = v.strip_prefix('v') else {
        return 0;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<i64>() else {
        return 0;
    };
    let tail = &rest[digits.len()..];
    let (level, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse::<i64>().unwrap_or(-1))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse::<i64>().unwrap_or(-1))
    } else {
        return 0;
    };
    if minor < 0 {
        return 0;
    }
    level * 1_000_000_000 + major * 10_000 + minor
}

fn condition<'a>(crd: &'a CustomResourceDefinition, ty: &str) -> Option<&'a str> {
    crd.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| c.status.as_str())
}

fn is_established(crd: &CustomResourceDefinition) -> bool {
    condition(crd, "Established") == Some("True")
}

/// The strategy of one served version of a custom resource.
pub struct CustomResourceStrategy {
    info: &'static ResourceInfo,
    schema: Option<StructuralSchema>,
    hooks: Hooks,
    conversion: Option<ApiVersionConversion>,
    /// The `Webhook` strategy: every version (the storage version's too: objects
    /// stored in an earlier storage version) converts through the webhook.
    webhook: Option<WebhookConversion>,
}

/// The `None` conversion: objects stored in the storage version are served in another
/// by their `apiVersion` alone, once read as upstream's storage codec reads them
/// ([`StoredSchemas::read`]).
struct ApiVersionConversion {
    served: String,
    stored: String,
    schemas: StoredSchemas,
}

impl StorageConversion for ApiVersionConversion {
    fn stored_form(&self, mut obj: Value) -> Value {
        obj["apiVersion"] = json!(self.stored);
        obj
    }

    fn served_form(&self, mut obj: Value) -> Value {
        self.schemas.read(&mut obj);
        obj["apiVersion"] = json!(self.served);
        obj
    }
}

/// The structural schema of each version of a definition, by `apiVersion`, to read
/// stored objects as upstream's storage codec decodes them: pruned and defaulted by the
/// schema of the version they are stored in before anything else. So a default added
/// to the schema shows on objects written before it, and a field the schema no longer
/// has is not served, though neither is written back until the object is.
#[derive(Clone, Default)]
pub(crate) struct StoredSchemas(Arc<HashMap<String, StructuralSchema>>);

impl StoredSchemas {
    fn new(crd: &CustomResourceDefinition) -> StoredSchemas {
        let schemas = crd
            .spec
            .versions
            .iter()
            .filter_map(|v| {
                let props = v.schema.as_ref()?.open_api_v3_schema.as_ref()?;
                Some((
                    format!("{}/{}", crd.spec.group, v.name),
                    StructuralSchema::new(props),
                ))
            })
            .collect();
        StoredSchemas(Arc::new(schemas))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Prunes and defaults a stored object by its own version's schema (none: as it is).
    pub(crate) fn read(&self, obj: &mut Value) {
        let schema = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|v| self.0.get(v));
        if let Some(schema) = schema {
            schema.prune(obj);
            schema.apply_defaults(obj);
        }
    }
}

impl CustomResourceStrategy {
    /// The strategy of `version` with the `None` conversion (a `Webhook` definition's
    /// conversions fail: no webhook client).
    pub fn new(crd: &CustomResourceDefinition, version: &CustomResourceDefinitionVersion) -> Self {
        Self::with_webhook(&Arc::new(crd.clone()), version, &WebhookSlot::default())
    }

    /// The strategy of `version`; a `Webhook` definition converts through `webhook`.
    pub fn with_webhook(
        crd: &Arc<CustomResourceDefinition>,
        version: &CustomResourceDefinitionVersion,
        webhook: &WebhookSlot,
    ) -> Self {
        Self::for_version(crd, version, webhook, StoredSchemas::new(crd))
    }

    /// [`Self::with_webhook`] with the definition's stored schemas built once for all
    /// its versions.
    fn for_version(
        crd: &Arc<CustomResourceDefinition>,
        version: &CustomResourceDefinitionVersion,
        webhook: &WebhookSlot,
        stored_schemas: StoredSchemas,
    ) -> Self {
        let spec = &crd.spec;
        let names = &spec.names;
        let subresources = version
            .subresources
            .as_ref()
            .map(|s| {
                let mut subs = Vec::new();
                if s.scale.is_some() {
                    subs.push(SubresourceInfo {
                        name: "scale",
                        kind: "Scale",
                        group: Some("autoscaling"),
                        version: Some("v1"),
                        verbs: GET_PATCH_UPDATE,
                    });
                }
                if s.status.is_some() {
                    subs.push(SubresourceInfo {
                        name: "status",
                        kind: intern_str(&names.kind),
                        group: None,
                        version: None,
                        verbs: GET_PATCH_UPDATE,
                    });
                }
                subs
            })
            .unwrap_or_default();
        let singular = names
            .singular
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| names.kind.to_ascii_lowercase());
        let info = intern(ResourceInfo {
            group: intern_str(&spec.group),
            version: intern_str(&version.name),
            kind: intern_str(&names.kind),
            plural: intern_str(&names.plural),
            singular: intern_str(&singular),
            short_names: intern_strs(names.short_names.as_deref().unwrap_or_default()),
            categories: intern_strs(names.categories.as_deref().unwrap_or_default()),
            namespaced: spec.scope == "Namespaced",
            verbs: ALL_VERBS,
            subresources: intern_subresources(subresources),
            storage_prefix: intern_str(&format!("/registry/{}/{}", spec.group, names.plural)),
        });
        let storage_version = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
            .unwrap_or_else(|| version.name.clone());
        let schema_of = |v: &CustomResourceDefinitionVersion| {
            v.schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(StructuralSchema::new)
        };
        let schema = schema_of(version);
        let by_webhook = spec
            .conversion
            .as_ref()
            .is_some_and(|c| c.strategy == "Webhook");
        let served = format!("{}/{}", spec.group, version.name);
        let stored = format!("{}/{}", spec.group, storage_version);
        let webhook = by_webhook.then(|| WebhookConversion {
            definition: crd.clone(),
            kind: names.kind.clone(),
            served: served.clone(),
            stored: stored.clone(),
            webhook: webhook.clone(),
            served_schema: schema.clone(),
            stored_schema: spec.versions.iter().find(|v| v.storage).and_then(schema_of),
            stored_schemas: stored_schemas.clone(),
        });
        // Objects are read through the conversion even in their own version when a
        // schema may prune or default them.
        let conversion = (!by_webhook
            && (storage_version != version.name || !stored_schemas.is_empty()))
        .then_some(ApiVersionConversion {
            served,
            stored,
            schemas: stored_schemas,
        });
        // `selectableFields` (`.spec.color`) are field selectors (`spec.color`).
        let fields: Vec<SelectableField> = version
            .selectable_fields
            .iter()
            .flatten()
            .map(|f| {
                let path = intern_str(f.json_path.trim_start_matches('.'));
                (path, path, "")
            })
            .collect();
        CustomResourceStrategy {
            info,
            schema,
            hooks: Hooks {
                tracks_generation: true,
                fields: intern_field_paths(fields),
                unconditional_update: false,
                ..Hooks::PLAIN
            },
            conversion,
            webhook,
        }
    }

    fn object_meta(obj: &Value) -> Option<ObjectMeta> {
        serde_json::from_value(obj.get("metadata")?.clone()).ok()
    }
}

impl Strategy for CustomResourceStrategy {
    fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    fn decode(&self, mut obj: Value) -> Result<Decoded, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "Object of kind {} could not be decoded: the body is not a JSON object",
                self.info.kind
            )));
        }
        let mut unknown = Vec::new();
        // `metadata` is ObjectMeta's, whatever the schema says; its unknown members are
        // dropped and named like any other.
        if let Some(m) = obj.get("metadata").filter(|m| !m.is_null()) {
            let typed: ObjectMeta = serde_ignored::deserialize(m, |path| {
                unknown.push(format!("metadata.{}", format_path(&path)))
            })
            .map_err(|_| {
                let why =
                    ferrokube_apimachinery::errors::decode_failure::<ObjectMeta>(m, "metadata");
                ApiError::undecodable(self.info.kind, self.info.version, why)
            })?;
            obj["metadata"] = serde_json::to_value(typed).map_err(ApiError::internal)?;
        }
        if let Some(schema) = &self.schema {
            unknown.extend(schema.prune(&mut obj));
            schema.apply_defaults(&mut obj);
        }
        Ok(Decoded {
            object: obj,
            unknown_fields: unknown,
        })
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_meta(self.info, obj);
        if !errs.is_empty() {
            return errs;
        }
        if let Some(m) = Self::object_meta(obj) {
            errs.extend(validate_object_meta(
                &m,
                self.info.namespaced,
                name_is_dns_subdomain,
                &FieldPath::new("metadata"),
            ));
        }
        if let Some(schema) = &self.schema {
            errs.extend(schema.validate(obj, None));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = validate_meta(self.info, new);
        if !errs.is_empty() {
            return errs;
        }
        if let (Some(n), Some(o)) = (Self::object_meta(new), Self::object_meta(old)) {
            errs.extend(validate_object_meta_update(
                &n,
                &o,
                &FieldPath::new("metadata"),
            ));
        }
        if let Some(schema) = &self.schema {
            errs.extend(schema.validate(new, Some(old)));
        }
        errs
    }

    fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    fn storage_conversion(&self) -> Option<&dyn StorageConversion> {
        self.conversion
            .as_ref()
            .map(|c| c as &dyn StorageConversion)
    }

    fn fallible_conversion(&self) -> Option<&dyn FallibleConversion> {
        self.webhook.as_ref().map(|c| c as &dyn FallibleConversion)
    }
}

/// The definitions' status as upstream's naming and establishing controllers keep it
/// (`acceptedNames`, `NamesAccepted`, `Established`, `Terminating`), given every
/// definition. `None` when the stored status is already right.
fn desired_status(
    crd: &CustomResourceDefinition,
    all: &[CustomResourceDefinition],
) -> Option<Value> {
    let names = &crd.spec.names;
    let mut conflict = None;
    for other in all {
        if other.metadata.uid == crd.metadata.uid || other.spec.group != crd.spec.group {
            continue;
        }
        let Some(accepted) = other
            .status
            .as_ref()
            .and_then(|s| s.accepted_names.as_ref())
        else {
            continue;
        };
        if accepted.plural == names.plural {
            conflict = Some((
                "PluralConflict",
                format!("{:?} is already in use", names.plural),
            ));
        } else if accepted.kind == names.kind {
            conflict = Some((
                "KindConflict",
                format!("{:?} is already in use", names.kind),
            ));
        }
    }
    let now = meta::format_time(jiff::Timestamp::now());
    let old_conditions: Vec<Value> = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| {
            c.iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default();
    let set = |conditions: &mut Vec<Value>, ty: &str, status: &str, reason: &str, message: &str| {
        let existing = conditions.iter_mut().find(|c| c["type"] == ty);
        let transition = match &existing {
            Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
            _ => json!(now),
        };
        let c = json!({"type": ty, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": transition});
        match existing {
            Some(e) => *e = c,
            None => conditions.push(c),
        }
    };
    let mut conditions = old_conditions.clone();
    let mut status =
        serde_json::to_value(crd.status.clone().unwrap_or_default()).unwrap_or_else(|_| json!({}));
    match conflict {
        Some((reason, message)) => {
            set(&mut conditions, "NamesAccepted", "False", reason, &message);
            if condition(crd, "Established") != Some("True") {
                set(
                    &mut conditions,
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
        }
        None => {
            set(
                &mut conditions,
                "NamesAccepted",
                "True",
                "NoConflicts",
                "no conflicts found",
            );
            let mut accepted = serde_json::to_value(names).unwrap_or_else(|_| json!({}));
            if accepted
                .get("singular")
                .is_none_or(|s| s.as_str() == Some(""))
            {
                accepted["singular"] = json!(names.kind.to_ascii_lowercase());
            }
            if accepted
                .get("listKind")
                .is_none_or(|s| s.as_str() == Some(""))
            {
                accepted["listKind"] = json!(format!("{}List", names.kind));
            }
            status["acceptedNames"] = accepted;
            set(
                &mut conditions,
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            );
        }
    }
    if crd.metadata.deletion_timestamp.is_some() {
        set(
            &mut conditions,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
    }
    status["conditions"] = json!(conditions);
    let current = serde_json::to_value(crd.status.clone().unwrap_or_default()).ok()?;
    (status != current).then_some(status)
}

/// The definitions' controller: keeps their status, what is served, and the cleanup
/// of deleted definitions. Runs until aborted.
pub(crate) async fn run_definitions(definitions: Arc<Store>, custom: Arc<CustomResources>) {
    loop {
        let mut events = match definitions.watch(None, &WatchParams::default()).await {
            Ok(rx) => rx,
            Err(e) => {
                tracing::warn!(error = %e, "watching CustomResourceDefinitions failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        loop {
            let again = sync_definitions(&definitions, &custom).await;
            // A cleanup waiting for objects with finalizers looks again later; any
            // change of a definition looks at once.
            let wait = if again {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(300)
            };
            match tokio::time::timeout(wait, events.recv()).await {
                Ok(Some(_)) => {
                    // Take whatever else is queued: one sync covers them all.
                    while events.try_recv().is_ok() {}
                }
                Ok(None) => break,
                Err(_) => {}
            }
        }
    }
}

/// One pass over every definition; `true` when a cleanup is still in progress.
async fn sync_definitions(definitions: &Store, custom: &CustomResources) -> bool {
    let listed = match definitions
        .list(
            None,
            &ListParams {
                resource_version: Some("0".into()),
                ..Default::default()
            },
        )
        .await
    {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "listing CustomResourceDefinitions failed");
            return true;
        }
    };
    let all: Vec<CustomResourceDefinition> = listed
        .items
        .iter()
        .filter_map(|o| serde_json::from_value((**o).clone()).ok())
        .collect();
    let desired: Vec<Option<Value>> = all.iter().map(|crd| desired_status(crd, &all)).collect();
    // Serve what the status about to be written says: a client that reads
    // `Established` must find the resource served (upstream serves a definition once
    // its names are accepted), not wait for this loop to see its own write.
    let effective: Vec<CustomResourceDefinition> = all
        .iter()
        .zip(&desired)
        .map(|(crd, status)| {
            let mut crd = crd.clone();
            if let Some(status) = status.clone().and_then(|s| serde_json::from_value(s).ok()) {
                crd.status = Some(status);
            }
            crd
        })
        .collect();
    custom.rebuild(&effective);
    let mut pending = false;
    for (crd, desired) in all.iter().zip(desired) {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if let Some(status) = desired {
            let patch = json!({"status": status});
            if let Err(e) = definitions
                .update(
                    None,
                    &name,
                    UpdateInput::Patch(PatchType::Merge, patch),
                    Part::Status,
                    &WriteOptions {
                        field_manager: Some("kube-apiserver".into()),
                        ..Default::default()
                    },
                )
                .await
                && !e.is_not_found()
            {
                tracing::warn!(crd = name, error = %e, "updating a definition's status failed");
                pending = true;
            }
        }
        let deleting = crd.metadata.deletion_timestamp.is_some()
            && crd
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == CLEANUP_FINALIZER));
        if deleting {
            pending |= !clean_up(definitions, custom, crd).await;
        }
    }
    pending
}

/// Deletes every object of a definition being deleted; once none is left, removes
/// the cleanup finalizer. `true` when done.
async fn clean_up(
    definitions: &Store,
    custom: &CustomResources,
    crd: &CustomResourceDefinition,
) -> bool {
    let served = custom.served();
    // The storage version's store when it is served: it converts nothing, so a
    // conversion webhook that is down does not hold the cleanup up.
    let storage_version = crd.spec.versions.iter().find(|v| v.storage);
    let store = served
        .all()
        .filter(|r| r.definition.metadata.uid == crd.metadata.uid)
        .max_by_key(|r| storage_version.is_some_and(|v| v.name == r.version))
        .map(|r| r.store.clone());
    if let Some(store) = store {
        let listed = match store.list(None, &ListParams::default()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "listing custom resources to delete failed");
                return false;
            }
        };
        if !listed.items.is_empty() {
            for o in &listed.items {
                let ns = meta::namespace(o);
                let ns = (!ns.is_empty()).then_some(ns);
                if let Err(e) = store
                    .delete(ns, meta::name(o), &DeleteOptions::default())
                    .await
                    && !e.is_not_found()
                {
                    tracing::warn!(error = %e, "deleting a custom resource failed");
                }
            }
            return false;
        }
    }
    let name = crd.metadata.name.clone().unwrap_or_default();
    let finalizers: Vec<&String> = crd
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != CLEANUP_FINALIZER)
        .collect();
    let patch = json!({"metadata": {"finalizers": finalizers,
        "resourceVersion": crd.metadata.resource_version}});
    match definitions
        .update(
            None,
            &name,
            UpdateInput::Patch(PatchType::Merge, patch),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
    {
        Ok(_) => true,
        Err(e) if e.is_not_found() => true,
        Err(e) => {
            tracing::debug!(crd = name, error = %e, "removing the cleanup finalizer failed");
            false
        }
    }
}

/// `prepare_create` of definitions: upstream's status on create (the storage version
/// recorded as stored).
pub(crate) fn definition_prepare_create(obj: &mut Value, _now: &str) {
    obj["status"] = json!({"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": []});
    record_storage_version(obj);
}

/// `prepare_update` of definitions: a new storage version is recorded as stored.
pub(crate) fn definition_prepare_update(obj: &mut Value, _old: &Value) {
    record_storage_version(obj);
}

fn record_storage_version(obj: &mut Value) {
    let Some(storage) = obj["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str())
        .map(str::to_string)
    else {
        return;
    };
    let status = &mut obj["status"];
    if !status.is_object() {
        *status = json!({});
    }
    let stored = &mut status["storedVersions"];
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut()
        && !list.iter().any(|v| v == storage.as_str())
    {
        list.push(json!(storage));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority_orders_as_upstream() {
        let mut vs = vec![
            "v1alpha1", "v2", "v1beta2", "v1", "foo", "v1beta1", "v10", "v2alpha1",
        ];
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(
            vs,
            vec![
                "v10", "v2", "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1", "foo"
            ]
        );
    }

    #[test]
    fn storage_version_is_recorded_once() {
        let mut crd = json!({"spec": {"versions": [
            {"name": "v1", "storage": false}, {"name": "v2", "storage": true}]}});
        definition_prepare_create(&mut crd, "");
        assert_eq!(crd["status"]["storedVersions"], json!(["v2"]));
        crd["spec"]["versions"][0]["storage"] = json!(true);
        crd["spec"]["versions"][1]["storage"] = json!(false);
        definition_prepare_update(&mut crd, &Value::Null);
        definition_prepare_update(&mut crd, &Value::Null);
        assert_eq!(crd["status"]["storedVersions"], json!(["v2", "v1"]));
    }
}
