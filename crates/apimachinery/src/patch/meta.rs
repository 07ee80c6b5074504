//! Patch metadata of the built-in types: `patchStrategy` / `patchMergeKey` struct tags,
//! the field type graph, and `+listType` / `+listMapKey` markers, for Kubernetes v1.33.
//!
//! The same tables feed the OpenAPI generator's `x-kubernetes-patch-strategy`,
//! `x-kubernetes-patch-merge-key`, `x-kubernetes-list-type` and
//! `x-kubernetes-list-map-keys` extensions.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::table::{GROUP_PACKAGES, LIST_TYPES, PATCH_META, TYPE_GRAPH};
use super::{FieldPatchMeta, PatchSchema, Strategy};

type PatchRow = (&'static str, &'static str, Strategy, Option<&'static str>);
type TypeRow = (&'static str, &'static str, &'static str);
type ListRow = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

/// Rows of `table` whose first column is `definition` (tables are grouped by definition).
pub(crate) fn rows<'a, T>(
    table: &'a [T],
    definition: &str,
    def_of: impl Fn(&T) -> &str,
) -> &'a [T] {
    let start = table.partition_point(|r| def_of(r) < definition);
    let end = start + table[start..].partition_point(|r| def_of(r) == definition);
    &table[start..end]
}

/// The patch strategy and merge key of `definition.field`, if it has one.
pub fn lookup(definition: &str, field: &str) -> Option<(Strategy, Option<&'static str>)> {
    Fields::of(definition).lookup(field)
}

/// Every `(definition, field, strategy, merge key)` row.
pub fn iter()
-> impl Iterator<Item = &'static (&'static str, &'static str, Strategy, Option<&'static str>)> {
    PATCH_META.iter()
}

/// The definition of a field's object type (for lists and maps: of its items/values),
/// when that type is a struct.
pub fn field_type(definition: &str, field: &str) -> Option<&'static str> {
    Fields::of(definition).field_type(field)
}

/// `x-kubernetes-list-type` (`atomic`, `set`, `map`) and `x-kubernetes-list-map-keys`.
pub fn list_type(definition: &str, field: &str) -> Option<(&'static str, &'static [&'static str])> {
    Fields::of(definition).list_type(field)
}

/// What every table says about the fields of one definition. A walk over an object
/// finds a definition's rows once per map, then only compares field names.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fields {
    patch: &'static [PatchRow],
    types: &'static [TypeRow],
    lists: &'static [ListRow],
    map_types: &'static [(&'static str, &'static str, &'static str)],
}

impl Fields {
    /// The rows of `definition`; none for an unknown name.
    pub fn of(definition: &str) -> Fields {
        Fields::index().get(definition).copied().unwrap_or_default()
    }

    /// Every definition's rows by name, grouped once. Binary searches of the tables
    /// were most of the cost of tracking a create: the definition names share long
    /// prefixes (`io.k8s.api.core.v1.`), so each step compares many bytes.
    fn index() -> &'static HashMap<&'static str, Fields> {
        static INDEX: OnceLock<HashMap<&'static str, Fields>> = OnceLock::new();
        INDEX.get_or_init(|| {
            let mut index: HashMap<&'static str, Fields> = HashMap::new();
            for rows in PATCH_META.chunk_by(|a, b| a.0 == b.0) {
                index.entry(rows[0].0).or_default().patch = rows;
            }
            for rows in TYPE_GRAPH.chunk_by(|a, b| a.0 == b.0) {
                index.entry(rows[0].0).or_default().types = rows;
            }
            for rows in LIST_TYPES.chunk_by(|a, b| a.0 == b.0) {
                index.entry(rows[0].0).or_default().lists = rows;
            }
            for rows in FIELD_MAP_TYPES.chunk_by(|a, b| a.0 == b.0) {
                index.entry(rows[0].0).or_default().map_types = rows;
            }
            index
        })
    }

    /// The patch strategy and merge key of a field, if it has one.
    pub fn lookup(&self, field: &str) -> Option<(Strategy, Option<&'static str>)> {
        self.patch_row(field).map(|r| (r.2, r.3))
    }

    /// The patch strategy of a field and its merge key as a list of keys (empty without
    /// one), as list-map keys are.
    pub fn patch_keys(&self, field: &str) -> Option<(Strategy, &'static [&'static str])> {
        self.patch_row(field).map(|r| (r.2, r.3.as_slice()))
    }

    fn patch_row(&self, field: &str) -> Option<&'static PatchRow> {
        self.patch.iter().find(|r| r.1 == field)
    }

    /// The definition of a field's object type, when that type is a struct.
    pub fn field_type(&self, field: &str) -> Option<&'static str> {
        self.types.iter().find(|r| r.1 == field).map(|r| r.2)
    }

    /// A field's `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`.
    pub fn list_type(&self, field: &str) -> Option<(&'static str, &'static [&'static str])> {
        self.lists.iter().find(|r| r.1 == field).map(|r| (r.2, r.3))
    }

    /// A field's own `+mapType` (`atomic` or `granular`), if upstream marks it.
    pub fn map_type(&self, field: &str) -> Option<&'static str> {
        self.map_types.iter().find(|r| r.1 == field).map(|r| r.2)
    }
}

/// Structs upstream marks `+structType=atomic`: owned and replaced as one value in
/// server-side apply, `x-kubernetes-map-type: atomic` in the OpenAPI documents.
const ATOMIC_STRUCTS: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
    "io.k8s.api.admissionregistration.v1.MatchResources",
    "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
    "io.k8s.api.admissionregistration.v1.ParamKind",
    "io.k8s.api.admissionregistration.v1.ParamRef",
    "io.k8s.api.admissionregistration.v1.Variable",
    "io.k8s.api.autoscaling.v1.CrossVersionObjectReference",
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.EndpointAddress",
    "io.k8s.api.core.v1.EndpointPort",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.NodeSelector",
    "io.k8s.api.core.v1.NodeSelectorTerm",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.ResourceFieldSelector",
    "io.k8s.api.core.v1.ScopeSelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.SecretReference",
    "io.k8s.api.core.v1.TopologySelectorTerm",
    "io.k8s.api.core.v1.TypedLocalObjectReference",
    "io.k8s.api.discovery.v1.EndpointPort",
    "io.k8s.api.networking.v1.ServiceBackendPort",
    "io.k8s.api.rbac.v1.RoleRef",
    "io.k8s.api.rbac.v1.Subject",
];

/// Fields upstream marks `+mapType` (`x-kubernetes-map-type` on the property): maps
/// owned and replaced as one value in server-side apply (a Service's selector, a
/// pod's nodeSelector), and a field of an atomic struct type made granular
/// (PersistentVolume's claimRef, an ObjectReference).
const FIELD_MAP_TYPES: &[(&str, &str, &str)] = &[
    (
        "io.k8s.api.core.v1.PersistentVolumeClaimStatus",
        "allocatedResourceStatuses",
        "granular",
    ),
    (
        "io.k8s.api.core.v1.PersistentVolumeSpec",
        "claimRef",
        "granular",
    ),
    ("io.k8s.api.core.v1.PodSpec", "nodeSelector", "atomic"),
    (
        "io.k8s.api.core.v1.ReplicationControllerSpec",
        "selector",
        "atomic",
    ),
    ("io.k8s.api.core.v1.ServiceSpec", "selector", "atomic"),
    ("io.k8s.api.node.v1.Scheduling", "nodeSelector", "atomic"),
];

/// Every `(definition, field, map type)` row of fields upstream marks `+mapType`.
pub fn field_map_types() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)>
{
    FIELD_MAP_TYPES.iter()
}

/// Whether upstream marks `definition` `+structType=atomic`.
pub fn is_atomic_struct(definition: &str) -> bool {
    ATOMIC_STRUCTS.contains(&definition)
}

/// Every definition upstream marks `+structType=atomic`.
pub fn atomic_structs() -> impl Iterator<Item = &'static str> {
    ATOMIC_STRUCTS.iter().copied()
}

/// Every `(definition, field, list type, map keys)` row.
pub fn list_types() -> impl Iterator<
    Item = &'static (
        &'static str,
        &'static str,
        &'static str,
        &'static [&'static str],
    ),
> {
    LIST_TYPES.iter()
}

/// The OpenAPI definition name of a built-in kind: `("apps", "v1", "Deployment")` →
/// `io.k8s.api.apps.v1.Deployment`. `None` for unknown groups or kinds.
pub fn definition_for(group: &str, version: &str, kind: &str) -> Option<String> {
    let prefix = match GROUP_PACKAGES.iter().find(|(g, _)| *g == group) {
        Some((_, p)) => (*p).to_string(),
        None if !group.contains('.') => format!("io.k8s.api.{group}"),
        None => return None,
    };
    let def = format!("{prefix}.{version}.{kind}");
    let known = !rows(TYPE_GRAPH, &def, |r| r.0).is_empty();
    known.then_some(def)
}

/// [`PatchSchema`] over the built-in tables, rooted at one OpenAPI definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinPatchSchema {
    definition: Option<&'static str>,
}

fn intern(definition: &str) -> Option<&'static str> {
    let start = TYPE_GRAPH.partition_point(|r| r.0 < definition);
    if let Some(r) = TYPE_GRAPH.get(start).filter(|r| r.0 == definition) {
        return Some(r.0);
    }
    TYPE_GRAPH
        .iter()
        .find(|r| r.2 == definition)
        .map(|r| r.2)
        .or_else(|| PATCH_META.iter().find(|r| r.0 == definition).map(|r| r.0))
}

impl BuiltinPatchSchema {
    /// The schema of a definition such as `io.k8s.api.core.v1.Pod`. Unknown names give
    /// a schema without metadata (every list replaced, every map merged).
    pub fn for_definition(definition: &str) -> Self {
        BuiltinPatchSchema {
            definition: intern(definition),
        }
    }

    /// The schema of a k8s-openapi resource type (`BuiltinPatchSchema::for_resource::<Pod>()`).
    pub fn for_resource<K: k8s_openapi::Resource>() -> Self {
        match definition_for(K::GROUP, K::VERSION, K::KIND) {
            Some(d) => Self::for_definition(&d),
            None => BuiltinPatchSchema { definition: None },
        }
    }

    /// The definition this schema describes, if known.
    pub fn definition(&self) -> Option<&'static str> {
        self.definition
    }
}

impl PatchSchema for BuiltinPatchSchema {
    fn lookup(&self, field: &str) -> FieldPatchMeta {
        let Some(def) = self.definition else {
            return FieldPatchMeta::default();
        };
        let fields = Fields::of(def);
        let (strategy, merge_key) = match fields.lookup(field) {
            Some((s, k)) => (Some(s), k.map(str::to_string)),
            None => (None, None),
        };
        let child = BuiltinPatchSchema {
            definition: fields.field_type(field),
        };
        FieldPatchMeta {
            strategy,
            merge_key,
            schema: Some(Box::new(child)),
        }
    }

    fn name(&self) -> String {
        self.definition
            .map(|d| d.rsplit('.').next().unwrap_or(d).to_string())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_upstream_tags() {
        let cases: [(&str, &str, Strategy, Option<&str>); 16] = [
            (
                "io.k8s.api.core.v1.PodSpec",
                "containers",
                Strategy::Merge,
                Some("name"),
            ),
            (
                "io.k8s.api.core.v1.PodSpec",
                "initContainers",
                Strategy::Merge,
                Some("name"),
            ),
            (
                "io.k8s.api.core.v1.PodSpec",
                "ephemeralContainers",
                Strategy::Merge,
                Some("name"),
            ),
            (
                "io.k8s.api.core.v1.PodSpec",
                "volumes",
                Strategy::MergeRetainKeys,
                Some("name"),
            ),
            (
                "io.k8s.api.core.v1.PodSpec",
                "imagePullSecrets",
                Strategy::Merge,
                Some("name"),
            ),
            (
                "io.k8s.api.core.v1.PodSpec",
                "hostAliases",
                Strategy::Merge,
                Some("ip"),
            ),
            (
                "io.k8s.api.core.v1.Container",
                "ports",
                Strategy::Merge,
                Some("containerPort"),
            ),
            (
                "io.k8s.api.core.v1.Container",
                "env",
                Strategy::Merge,
                Some("name"),
            ),
            (
                "io.k8s.api.core.v1.Container",
                "volumeMounts",
                Strategy::Merge,
                Some("mountPath"),
            ),
            (
                "io.k8s.api.core.v1.Container",
                "volumeDevices",
                Strategy::Merge,
                Some("devicePath"),
            ),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "ownerReferences",
                Strategy::Merge,
                Some("uid"),
            ),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "finalizers",
                Strategy::Merge,
                None,
            ),
            (
                "io.k8s.api.core.v1.ServiceSpec",
                "ports",
                Strategy::Merge,
                Some("port"),
            ),
            (
                "io.k8s.api.core.v1.PodStatus",
                "conditions",
                Strategy::Merge,
                Some("type"),
            ),
            (
                "io.k8s.api.core.v1.NodeStatus",
                "addresses",
                Strategy::Merge,
                Some("type"),
            ),
            (
                "io.k8s.api.apps.v1.DeploymentSpec",
                "strategy",
                Strategy::RetainKeys,
                None,
            ),
        ];
        for (def, field, s, k) in cases {
            assert_eq!(lookup(def, field), Some((s, k)), "{def}.{field}");
        }
        assert_eq!(lookup("io.k8s.api.core.v1.NodeSpec", "taints"), None);
        assert_eq!(lookup("io.k8s.api.core.v1.PodSpec", "nope"), None);
        assert!(iter().count() > 80);
        assert!(iter().any(|r| r.0 == "io.k8s.api.core.v1.NodeStatus" && r.1 == "conditions"));
    }

    #[test]
    fn tables_are_sorted_by_definition() {
        assert!(PATCH_META.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(TYPE_GRAPH.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(LIST_TYPES.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn type_graph_and_list_types() {
        assert_eq!(
            field_type("io.k8s.api.core.v1.Pod", "spec"),
            Some("io.k8s.api.core.v1.PodSpec")
        );
        assert_eq!(
            field_type("io.k8s.api.core.v1.PodSpec", "containers"),
            Some("io.k8s.api.core.v1.Container")
        );
        // Inlined VolumeSource fields belong to Volume.
        assert_eq!(
            field_type("io.k8s.api.core.v1.Volume", "hostPath"),
            Some("io.k8s.api.core.v1.HostPathVolumeSource")
        );
        assert_eq!(
            field_type("io.k8s.api.apps.v1.Deployment", "metadata"),
            Some("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        );
        assert_eq!(
            list_type(
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "finalizers"
            ),
            Some(("set", &[][..]))
        );
        assert_eq!(
            list_type(
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "ownerReferences"
            ),
            Some(("map", &["uid"][..]))
        );
        assert!(list_types().count() > 100);
    }

    #[test]
    fn definitions_for_kinds() {
        assert_eq!(
            definition_for("", "v1", "Pod").as_deref(),
            Some("io.k8s.api.core.v1.Pod")
        );
        assert_eq!(
            definition_for("apps", "v1", "Deployment").as_deref(),
            Some("io.k8s.api.apps.v1.Deployment")
        );
        assert_eq!(
            definition_for("rbac.authorization.k8s.io", "v1", "Role").as_deref(),
            Some("io.k8s.api.rbac.v1.Role")
        );
        assert_eq!(
            definition_for("networking.k8s.io", "v1", "Ingress").as_deref(),
            Some("io.k8s.api.networking.v1.Ingress")
        );
        assert_eq!(definition_for("example.com", "v1", "Foo"), None);
        assert_eq!(definition_for("", "v1", "NoSuchKind"), None);
        let s = BuiltinPatchSchema::for_resource::<k8s_openapi::api::core::v1::Pod>();
        assert_eq!(s.definition(), Some("io.k8s.api.core.v1.Pod"));
        let s = BuiltinPatchSchema::for_resource::<k8s_openapi::api::batch::v1::Job>();
        assert_eq!(s.definition(), Some("io.k8s.api.batch.v1.Job"));
        let spec = s.lookup("spec").schema.unwrap();
        assert_eq!(spec.name(), "JobSpec");
    }
}
