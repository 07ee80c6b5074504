//! Strategies: what differs per resource, behind one trait the generic store calls.
//!
//! [`TypedStrategy<K>`] is the one implementation: it decodes the JSON object into the
//! k8s-openapi type `K` (reporting unknown fields), applies upstream's defaults
//! (`ferrokube_api::defaults`), re-encodes, and runs the per-kind [`Hooks`] (initial
//! status, generation tracking, selectable fields, prepare-for-create/update steps).
//! Validation runs on the defaulted object, as upstream: object metadata
//! (`validate_object_meta[_update]` with the kind's name rule) plus the kind's own
//! rules (`ferrokube_validation`). Nothing is written per resource beyond one table
//! entry in [`crate::kinds`].

use std::marker::PhantomData;

use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use ferrokube_apimachinery::validation::{
    ValidateNameFn, name_is_dns_subdomain, validate_object_meta, validate_object_meta_update,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::meta;

/// An object decoded from a request: normalized (typed round trip, defaults applied),
/// and the unknown fields the round trip dropped (`spec.foo`, `spec.containers[0].x`).
#[derive(Debug, Clone)]
pub struct Decoded {
    pub object: Value,
    pub unknown_fields: Vec<String>,
}

/// What the generic store needs to know about one resource.
pub trait Strategy: Send + Sync + 'static {
    fn info(&self) -> &'static ResourceInfo;

    /// Decodes into the typed form and back: unknown fields dropped and reported,
    /// defaults applied. A body that does not fit the type is a 400.
    fn decode(&self, obj: Value) -> Result<Decoded, ApiError>;

    /// Validation of a new object (metadata and kind-specific).
    fn validate_create(&self, obj: &Value) -> Vec<FieldError>;

    /// Validation of an update (immutable fields and kind-specific).
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError>;

    fn hooks(&self) -> &Hooks;

    /// The conversion between stored and served forms; `None` when they are the same.
    fn storage_conversion(&self) -> Option<&dyn StorageConversion> {
        self.hooks()
            .storage_codec
            .as_ref()
            .map(|c| c as &dyn StorageConversion)
    }

    /// The conversion between stored and served forms when it may fail or wait (a
    /// custom resource's conversion webhook); used instead of
    /// [`Strategy::storage_conversion`] when present.
    fn fallible_conversion(&self) -> Option<&dyn crate::conversion::FallibleConversion> {
        None
    }
}

/// Per-kind behaviour that is data or a plain function, not a type.
#[derive(Clone, Copy)]
pub struct Hooks {
    /// `metadata.generation` starts at 1 and is bumped on every spec change.
    pub tracks_generation: bool,
    /// The status a new object gets (the main resource never writes status when the
    /// resource has a status subresource). `None`: status is dropped.
    pub initial_status: Option<fn() -> Value>,
    /// Field selectors beyond `metadata.name`/`metadata.namespace`: (selector field,
    /// dotted path into the object, the value when the object leaves the field out:
    /// upstream formats its typed zero value, `false` or `0`).
    pub fields: &'static [ferrokube_api::resources::SelectableField],
    /// Extra changes on create (after defaults and system metadata, before
    /// validation); the second argument is the current time (RFC 3339).
    pub prepare_create: Option<fn(&mut Value, &str)>,
    /// Extra changes on an update of the main resource (new, old), after the
    /// generic ones (system metadata and status kept), before validation.
    pub prepare_update: Option<fn(&mut Value, &Value)>,
    /// Conversion of a decoded request object to its stored form (every write),
    /// e.g. a Secret's `stringData` folded into `data`.
    pub normalize: Option<fn(&mut Value)>,
    /// For a resource stored in another resource's form (under that resource's
    /// storage prefix): the conversions between the two.
    pub storage_codec: Option<StorageCodec>,
    /// Annotations that hold part of the status in this served form (an
    /// `autoscaling/v1` HPA carries v2's conditions and metric statuses in them): they
    /// move with the status half of a write, as `status` does.
    pub status_annotations: &'static [&'static str],
    /// What a delete that names no propagation does with the object's dependents.
    pub gc_policy: GcPolicy,
    /// Upstream's `AllowCreateOnUpdate`: a PUT of a missing object creates it.
    pub create_on_update: bool,
    /// Upstream's `AllowUnconditionalUpdate`: an update naming no resourceVersion
    /// replaces whatever is stored; without it, such an update is refused (422).
    pub unconditional_update: bool,
}

/// Upstream's `GarbageCollectionPolicy` of a resource (its strategy's
/// `DefaultGarbageCollectionPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPolicy {
    /// Dependents are deleted in the background (most resources).
    DeleteDependents,
    /// Dependents are orphaned unless the delete says otherwise: kinds whose deletes
    /// orphaned before the garbage collector existed (core/v1 ReplicationControllers,
    /// batch/v1 Jobs).
    OrphanDependents,
    /// The garbage collector's finalizers are never added (Events).
    Unsupported,
}

/// How a resource served from another resource's storage converts: objects are
/// validated and returned in the served form, written in the stored form (e.g.
/// `events.k8s.io/v1` Events kept as core `v1` Events, as upstream).
#[derive(Clone, Copy)]
pub struct StorageCodec {
    pub to_storage: fn(Value) -> Value,
    pub from_storage: fn(Value) -> Value,
}

/// How a resource's stored form and served form differ, when they do: the conversions
/// the store runs on every write and read. A [`StorageCodec`] is one; a custom
/// resource served in a version other than its storage version has another.
pub trait StorageConversion: Send + Sync {
    fn stored_form(&self, obj: Value) -> Value;
    fn served_form(&self, obj: Value) -> Value;
}

impl StorageConversion for StorageCodec {
    fn stored_form(&self, obj: Value) -> Value {
        (self.to_storage)(obj)
    }

    fn served_form(&self, obj: Value) -> Value {
        (self.from_storage)(obj)
    }
}

impl Hooks {
    pub const PLAIN: Hooks = Hooks {
        tracks_generation: false,
        initial_status: None,
        fields: &[],
        prepare_create: None,
        prepare_update: None,
        normalize: None,
        storage_codec: None,
        status_annotations: &[],
        gc_policy: GcPolicy::DeleteDependents,
        create_on_update: false,
        unconditional_update: true,
    };
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("tracks_generation", &self.tracks_generation)
            .field("fields", &self.fields)
            .finish()
    }
}

/// Defaulting of a typed object (upstream's `SetDefaults_*`).
pub type DefaultFn<K> = fn(&mut K);
/// Validation of a new typed object.
pub type ValidateFn<K> = fn(&K) -> Vec<FieldError>;
/// Validation of a typed update (new, old).
pub type ValidateUpdateFn<K> = fn(&K, &K) -> Vec<FieldError>;

/// The generic strategy over a k8s-openapi type.
pub struct TypedStrategy<K> {
    info: &'static ResourceInfo,
    hooks: Hooks,
    defaults: DefaultFn<K>,
    validate: ValidateFn<K>,
    validate_update: ValidateUpdateFn<K>,
    name_fn: ValidateNameFn,
    _k: PhantomData<fn() -> K>,
}

impl<K> TypedStrategy<K>
where
    K: Serialize
        + DeserializeOwned
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Send
        + Sync
        + 'static,
{
    pub fn new(info: &'static ResourceInfo, hooks: Hooks) -> Self {
        TypedStrategy {
            info,
            hooks,
            defaults: |_| {},
            validate: |_| Vec::new(),
            validate_update: |_, _| Vec::new(),
            name_fn: name_is_dns_subdomain,
            _k: PhantomData,
        }
    }

    pub fn with_defaults(mut self, f: DefaultFn<K>) -> Self {
        self.defaults = f;
        self
    }

    pub fn with_validation(mut self, create: ValidateFn<K>, update: ValidateUpdateFn<K>) -> Self {
        self.validate = create;
        self.validate_update = update;
        self
    }

    /// The rule `metadata.name` and `generateName` follow (DNS subdomain unless set).
    pub fn with_name_validation(mut self, f: ValidateNameFn) -> Self {
        self.name_fn = f;
        self
    }

    fn typed(&self, obj: &Value) -> Option<K> {
        // From the borrowed tree: no copy of the object first.
        K::deserialize(obj).ok()
    }

    /// The typed decode that names each member the type does not have
    /// (`spec.containers[0].foo`); a body that does not fit the type is a 400.
    fn decode_naming_unknown(&self, obj: &Value) -> Result<(K, Vec<String>), ApiError> {
        let (typed, unknown) = decode_naming::<K>(obj);
        let typed = typed.map_err(|_| {
            ApiError::undecodable(
                self.info.kind,
                self.info.version,
                ferrokube_apimachinery::errors::decode_failure::<K>(obj, ""),
            )
        })?;
        Ok((typed, unknown))
    }

    /// Upstream's defaults applied, back in the generic form.
    fn defaulted(&self, mut typed: K) -> Result<Value, ApiError> {
        (self.defaults)(&mut typed);
        serde_json::to_value(&typed).map_err(ApiError::internal)
    }
}

/// `ObjectMeta`'s members. Clients written in Go send `"creationTimestamp": null`
/// (an unset `metav1.Time`), which the typed round trip drops like any null; under
/// `metadata` such a null is known to be a field, not an unknown member.
const OBJECT_META_FIELDS: &[&str] = &[
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// Whether every member of `body`, at any depth, is still in `typed`, the body after
/// the typed round trip, at the same place. If so, the body had no unknown fields: the
/// typed form only writes members its type has, so a member found there is a known
/// field (or an entry of a free-form map, which is never unknown). `false` only means
/// "not proven", and the caller names the unknown fields the slow way. `key` is the
/// member name `body` sits under.
fn keeps_every_member(body: &Value, typed: &Value, key: Option<&str>) -> bool {
    match (body, typed) {
        (Value::Object(body), Value::Object(typed)) => {
            // Both maps iterate in key order, so one pass over each suffices; were
            // they in another order, a member would only be missed, never wrongly found.
            let mut typed = typed.iter().peekable();
            body.iter().all(|(name, value)| {
                while typed
                    .peek()
                    .is_some_and(|(t, _)| t.as_str() < name.as_str())
                {
                    typed.next();
                }
                match typed.peek() {
                    Some((t, kept)) if *t == name => keeps_every_member(value, kept, Some(name)),
                    _ => {
                        value.is_null()
                            && key == Some("metadata")
                            && OBJECT_META_FIELDS.contains(&name.as_str())
                    }
                }
            })
        }
        (Value::Object(body), _) => body.is_empty(),
        (Value::Array(body), Value::Array(typed)) => {
            body.len() == typed.len()
                && body
                    .iter()
                    .zip(typed)
                    .all(|(b, t)| keeps_every_member(b, t, None))
        }
        (Value::Array(body), _) => body.is_empty(),
        _ => true,
    }
}

/// The members of `obj` that type `K` does not have, as `spec.containers[0].foo`
/// paths; an `obj` that does not decode as `K` has none named here (its decode fails
/// with its own error).
pub(crate) fn unknown_fields<K: DeserializeOwned>(obj: &Value) -> Vec<String> {
    decode_naming::<K>(obj).1
}

/// `obj` decoded as `K`, and the paths of its members `K` does not have.
fn decode_naming<K: DeserializeOwned>(obj: &Value) -> (Result<K, serde_json::Error>, Vec<String>) {
    let mut unknown = Vec::new();
    let typed = serde_ignored::deserialize(obj, |path| unknown.push(format_path(&path)));
    (typed, unknown)
}

/// `spec.containers[0].foo` from serde_ignored's path.
pub(crate) fn format_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", format_path(parent)),
        Path::Map { parent, key } => {
            let p = format_path(parent);
            if p.is_empty() {
                key.to_string()
            } else {
                format!("{p}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => format_path(parent),
    }
}

impl<K> Strategy for TypedStrategy<K>
where
    K: Serialize
        + DeserializeOwned
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Send
        + Sync
        + 'static,
{
    fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    fn decode(&self, mut obj: Value) -> Result<Decoded, ApiError> {
        // Upstream decodes into its Go struct, where an unset non-pointer struct is
        // its zero value, which defaulting then fills (a policy without a `spec` gets
        // `failurePolicy: Fail`); k8s-openapi's types would hold no value there.
        ferrokube_protobuf::add_go_zero_structs(K::API_VERSION, K::KIND, &mut obj);
        // Naming unknown fields (serde_ignored) copies every member name of the body,
        // and most bodies have none. So decode without it first: when the typed round
        // trip kept every member of the body, none was unknown. Otherwise the body is
        // decoded once more, only to name them.
        let (mut object, unknown) = match K::deserialize(&obj) {
            Ok(typed) => {
                let object = self.defaulted(typed)?;
                let unknown = if keeps_every_member(&obj, &object, None) {
                    Vec::new()
                } else {
                    self.decode_naming_unknown(&obj)?.1
                };
                (object, unknown)
            }
            Err(_) => {
                let (typed, unknown) = self.decode_naming_unknown(&obj)?;
                (self.defaulted(typed)?, unknown)
            }
        };
        if let Some(f) = self.hooks.normalize {
            f(&mut object);
        }
        // Upstream stores what its Go struct encodes: the zero of a non-pointer
        // `omitempty` field (`status.readyReplicas: 0`, `stdin: false`) is left out,
        // whoever sent it, and an unset time of a non-pointer field is null.
        ferrokube_protobuf::to_go_json_form(K::API_VERSION, K::KIND, &mut object);
        Ok(Decoded {
            object,
            unknown_fields: unknown,
        })
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_meta(self.info, obj);
        if !errs.is_empty() {
            return errs;
        }
        if let Some(k) = self.typed(obj) {
            let path = FieldPath::new("metadata");
            errs.extend(validate_object_meta(
                k.metadata(),
                self.info.namespaced,
                self.name_fn,
                &path,
            ));
            errs.extend((self.validate)(&k));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = validate_meta(self.info, new);
        if !errs.is_empty() {
            return errs;
        }
        if let (Some(n), Some(o)) = (self.typed(new), self.typed(old)) {
            let path = FieldPath::new("metadata");
            errs.extend(validate_object_meta_update(
                n.metadata(),
                o.metadata(),
                &path,
            ));
            errs.extend((self.validate_update)(&n, &o));
        }
        errs
    }

    fn hooks(&self) -> &Hooks {
        &self.hooks
    }
}

/// The object-metadata checks every kind shares that the store relies on: a name
/// that can be a path segment. Kind-specific and full metadata validation comes from
/// the validation crate through [`TypedStrategy::with_validation`].
pub(crate) fn validate_meta(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = FieldPath::new("metadata");
    let name = meta::name(obj);
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name or generateName is required",
        ));
    } else if name == "." || name == ".." || name.contains('/') || name.contains('%') {
        errs.push(FieldError::invalid(
            &path.child("name"),
            name,
            format!(
                "may not be '.' or '..' and may not contain '/' or '%' ({})",
                info.kind
            ),
        ));
    } else if name.len() > 253 {
        errs.push(FieldError::too_long(&path.child("name"), Some(253)));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_api::resources::lookup;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    #[test]
    fn decode_reports_unknown_fields() {
        let s = TypedStrategy::<k8s_openapi::api::core::v1::Pod>::new(
            lookup("", "v1", "pods").unwrap(),
            Hooks::PLAIN,
        );
        let d = s
            .decode(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "a", "bogus": 1},
                "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyX": "x"}]}
            }))
            .unwrap();
        assert_eq!(
            d.unknown_fields,
            vec!["metadata.bogus", "spec.containers[0].imagePullPolicyX"]
        );
        assert!(d.object["metadata"].get("bogus").is_none());
    }

    fn pods() -> TypedStrategy<k8s_openapi::api::core::v1::Pod> {
        TypedStrategy::new(lookup("", "v1", "pods").unwrap(), Hooks::PLAIN)
    }

    #[test]
    fn decode_reports_unknown_members_with_null_values() {
        let d = pods()
            .decode(json!({
                "metadata": {"name": "a", "creationTimestamp": null, "bogus": null},
                "spec": {"containers": [{"name": "c", "image": "i"}], "priority": null,
                    "x": null}
            }))
            .unwrap();
        assert_eq!(d.unknown_fields, vec!["metadata.bogus", "spec.x"]);
        assert!(d.object["spec"].get("priority").is_none());
    }

    #[test]
    fn decode_of_known_fields_only_matches_the_naming_decode() {
        // A body as kubectl sends it (Go's unset time as null, empty objects), and one
        // with a free-form map and nested arrays.
        let bodies = [
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "a", "creationTimestamp": null, "labels": {"run": "a"}},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {},
                    "ports": [{"containerPort": 80}]}], "dnsPolicy": "ClusterFirst"},
                "status": {}
            }),
            json!({
                "metadata": {"name": "b", "annotations": {"x": "y"}},
                "spec": {"containers": [{"name": "c", "image": "i",
                    "env": [{"name": "E", "value": "v"}], "args": ["-v"]}],
                    "tolerations": [{"key": "k", "operator": "Exists"}]}
            }),
        ];
        let s = pods();
        for body in bodies {
            let d = s.decode(body.clone()).unwrap();
            assert!(d.unknown_fields.is_empty(), "{:?}", d.unknown_fields);
            // The single decode sufficed.
            assert!(keeps_every_member(&body, &d.object, None));
            let (typed, unknown) = s.decode_naming_unknown(&body).unwrap();
            assert!(unknown.is_empty());
            let mut slow = s.defaulted(typed).unwrap();
            ferrokube_protobuf::to_go_json_form("v1", "Pod", &mut slow);
            assert_eq!(d.object, slow);
        }
    }

    #[test]
    fn only_an_object_meta_null_counts_as_kept() {
        let kept = |body: Value, typed: Value| keeps_every_member(&body, &typed, None);
        let typed = json!({"metadata": {"name": "a"}, "spec": {"a": [{"b": 1}]}});
        assert!(kept(
            json!({"metadata": {"name": "a", "creationTimestamp": null}}),
            typed.clone()
        ));
        assert!(!kept(
            json!({"metadata": {"name": "a", "bogus": null}}),
            typed.clone()
        ));
        // A null outside `metadata` may be an unknown member: not proven.
        assert!(!kept(
            json!({"spec": {"creationTimestamp": null}}),
            typed.clone()
        ));
        assert!(!kept(
            json!({"spec": {"a": [{"b": 1, "c": 2}]}}),
            typed.clone()
        ));
        assert!(!kept(
            json!({"spec": {"a": [{"b": 1}, {"b": 2}]}}),
            typed.clone()
        ));
        assert!(kept(json!({"spec": {"a": [{"b": "1"}]}}), typed.clone()));
        // A member missing from the typed form is not proven known, even when empty.
        assert!(!kept(json!({"spec": {"c": {}}}), typed.clone()));
        assert!(!kept(json!({"status": {}}), typed.clone()));
        assert!(kept(json!({"spec": {}}), typed));
    }

    #[test]
    fn decode_rejects_wrong_types() {
        let s =
            TypedStrategy::<ConfigMap>::new(lookup("", "v1", "configmaps").unwrap(), Hooks::PLAIN);
        let err = s.decode(json!({"metadata": {"name": 5}})).unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn meta_validation() {
        let s =
            TypedStrategy::<ConfigMap>::new(lookup("", "v1", "configmaps").unwrap(), Hooks::PLAIN);
        assert_eq!(s.validate_create(&json!({"metadata": {}})).len(), 1);
        assert_eq!(
            s.validate_create(&json!({"metadata": {"name": "a/b"}}))
                .len(),
            1
        );
        assert!(
            s.validate_create(&json!({"metadata": {"name": "ok", "namespace": "default"}}))
                .is_empty()
        );
        // Object metadata: the name rule, the namespace, labels.
        let errs = s.validate_create(&json!({"metadata": {"name": "Not_OK",
            "labels": {"a": "b c"}}}));
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["metadata.name", "metadata.namespace", "metadata.labels"]
        );
    }
}
