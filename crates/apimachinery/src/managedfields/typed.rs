//! The operations of server-side apply on JSON objects, steered by the built-in types'
//! list metadata: which lists are atomic, sets or keyed (`+listType`, `+listMapKey`,
//! else the `patchStrategy`/`patchMergeKey` tags, as upstream's schema conversion), and
//! which structs are atomic (`+structType=atomic`).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::set::FieldSet;
use crate::patch::meta;

/// A position in the type graph: the OpenAPI definition of the object at hand, if
/// known. Unknown objects are maps whose every key is a field; unknown lists atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    definition: Option<&'static str>,
    /// The field's own `+mapType`, which overrides its type's `+structType`:
    /// `Some(true)` for an atomic map (a Service's selector), `Some(false)` for a
    /// granular field of an atomic struct type.
    atomic_field: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Atomic,
    Set,
    Keyed(&'static [&'static str]),
}

impl Schema {
    /// The schema of a built-in kind (`("apps", "v1", "Deployment")`); unknown kinds get
    /// an untyped schema.
    pub fn for_kind(group: &str, version: &str, kind: &str) -> Schema {
        let definition = meta::definition_for(group, version, kind)
            .and_then(|d| crate::patch::BuiltinPatchSchema::for_definition(&d).definition());
        Schema {
            definition,
            atomic_field: None,
        }
    }

    pub fn untyped() -> Schema {
        Schema {
            definition: None,
            atomic_field: None,
        }
    }

    /// The schemas of this map's fields.
    fn members(&self) -> Members {
        Members(self.definition.map(meta::Fields::of).unwrap_or_default())
    }

    /// Whether the value is owned and replaced as one (`+structType=atomic`, or the
    /// field's `+mapType=atomic`).
    fn atomic_struct(&self) -> bool {
        self.atomic_field
            .unwrap_or_else(|| self.definition.is_some_and(meta::is_atomic_struct))
    }
}

/// The fields of the map a [`Schema`] describes: walks find a definition's rows once
/// per map, then look each field up among them by name.
#[derive(Clone, Copy)]
struct Members(meta::Fields);

impl Members {
    fn field(&self, name: &str) -> Schema {
        Schema {
            definition: self.0.field_type(name),
            atomic_field: self.0.map_type(name).map(|t| t == "atomic"),
        }
    }

    fn list_kind(&self, name: &str) -> ListKind {
        if let Some((ty, keys)) = self.0.list_type(name) {
            return match ty {
                "set" => ListKind::Set,
                "map" if !keys.is_empty() => ListKind::Keyed(keys),
                _ => ListKind::Atomic,
            };
        }
        match self.0.patch_keys(name) {
            Some((s, [])) if s.merges() => ListKind::Set,
            Some((s, keys)) if s.merges() => ListKind::Keyed(keys),
            _ => ListKind::Atomic,
        }
    }
}

/// The element naming one item of a list of `kind`, or `None` for an atomic list or an
/// item that cannot be named (a keyed item that is not an object).
fn item_element(kind: ListKind, item: &Value) -> Option<String> {
    match kind {
        ListKind::Atomic => None,
        ListKind::Set => Some(format!("v:{item}")),
        ListKind::Keyed(keys) => {
            let obj = item.as_object()?;
            let mut key = Map::new();
            for k in keys {
                match obj.get(*k) {
                    Some(v) => {
                        key.insert((*k).to_string(), v.clone());
                    }
                    // The one defaulted list-map key of the built-in types.
                    None if *k == "protocol" => {
                        key.insert("protocol".into(), Value::String("TCP".into()));
                    }
                    None => {}
                }
            }
            Some(format!("k:{}", Value::Object(key)))
        }
    }
}

/// Items of a non-atomic list by their elements, in list order; `None` when an item
/// cannot be named or two items share a name (such a list is treated as atomic).
fn index_items(kind: ListKind, list: &[Value]) -> Option<Vec<(String, &Value)>> {
    let out: Vec<(String, &Value)> = list
        .iter()
        .map(|item| Some((item_element(kind, item)?, item)))
        .collect::<Option<_>>()?;
    // A scan per item for the short lists most objects have; a set for long ones, where
    // the scans made a list of 20,000 containers cost 200 million comparisons on every
    // write of its object.
    let distinct = if out.len() <= 16 {
        out.iter()
            .enumerate()
            .all(|(i, (element, _))| out[..i].iter().all(|(other, _)| other != element))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(out.len());
        out.iter().all(|(element, _)| seen.insert(element.as_str()))
    };
    distinct.then_some(out)
}

/// The element naming field `name` (`f:name`), without the formatting machinery: a
/// walk makes one per field.
fn field_element(name: &str) -> String {
    let mut e = String::with_capacity(name.len() + 2);
    e.push_str("f:");
    e.push_str(name);
    e
}

/// How a value is walked.
enum Shape<'a> {
    Leaf,
    Map(&'a Map<String, Value>),
    /// The named items, and whether each item is one leaf (a set's value, or a keyed
    /// item of an atomic struct type such as `OwnerReference`) rather than walked into.
    List(Vec<(String, &'a Value)>, bool),
}

fn shape<'a>(v: &'a Value, schema: Schema, list: ListKind) -> Shape<'a> {
    match v {
        Value::Object(m) if !schema.atomic_struct() => Shape::Map(m),
        Value::Array(items) => match index_items(list, items) {
            Some(named) => Shape::List(
                named,
                matches!(list, ListKind::Set) || schema.atomic_struct(),
            ),
            None => Shape::Leaf,
        },
        _ => Shape::Leaf,
    }
}

/// The fields `obj` sets, as an applier owns them (upstream's `ToFieldSet`): every
/// leaf, every item of a set or keyed list, and empty maps and lists as leaves.
pub fn to_field_set(obj: &Value, schema: Schema) -> FieldSet {
    match obj {
        Value::Object(m) => fields_of_map(m, schema, None, Collect::Set),
        _ => FieldSet::new(),
    }
}

/// What a walk collects: every field set, or (for a create) what differs from the
/// zero value, with the maps, lists and items it adds as members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Collect {
    Set,
    Created,
}

/// The fields of map `m`, as the children of the returned node. `zero`: the
/// definition whose zero value holds this map, if one does.
fn fields_of_map(
    m: &Map<String, Value>,
    schema: Schema,
    zero: Option<&'static str>,
    collect: Collect,
) -> FieldSet {
    let members = schema.members();
    let zeros = zero.map(zero_fields).unwrap_or_default();
    let mut node = FieldSet::new();
    for (k, v) in m {
        let field_zero = zeros.iter().find(|r| r.1 == k.as_str()).map(|r| r.2);
        let field = fields_of_value(
            v,
            members.field(k),
            members.list_kind(k),
            field_zero,
            collect,
        );
        node.insert_child(field_element(k), field);
    }
    node
}

fn fields_of_value(
    v: &Value,
    schema: Schema,
    list: ListKind,
    zero: Option<Zero>,
    collect: Collect,
) -> FieldSet {
    let added = collect == Collect::Created && zero.is_none();
    match shape(v, schema, list) {
        Shape::Map(m) if !m.is_empty() => {
            let inner = match zero {
                Some(Zero::Struct(d)) => Some(d),
                _ => None,
            };
            let mut node = fields_of_map(m, schema, inner, collect);
            if added {
                node.mark_member();
            }
            node
        }
        Shape::List(items, whole_items) if !items.is_empty() => {
            let mut node = FieldSet::new();
            if added {
                node.mark_member();
            }
            for (e, item) in items {
                let mut child = match item {
                    Value::Object(m) if !whole_items => fields_of_map(m, schema, None, collect),
                    _ => FieldSet::new(),
                };
                child.mark_member();
                node.insert_child(e, child);
            }
            node
        }
        _ if zero.is_some_and(|z| z.is(v)) => FieldSet::new(),
        _ => {
            let mut leaf = FieldSet::new();
            leaf.mark_member();
            leaf
        }
    }
}

/// What a Go zero value of a type holds at one of its fields (`zero.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// A non-pointer struct of this definition, itself a zero value.
    Struct(&'static str),
    /// A pointer, slice or map without `omitempty`, or a type that encodes its zero
    /// value as null.
    Null,
    EmptyString,
    Number,
    False,
}

impl Zero {
    /// Whether `v` is this zero value, so a create setting it changes nothing.
    fn is(&self, v: &Value) -> bool {
        match self {
            Zero::Struct(_) => v.as_object().is_some_and(Map::is_empty),
            Zero::Null => v.is_null(),
            Zero::EmptyString => v.as_str() == Some(""),
            Zero::Number => v.as_f64() == Some(0.0),
            Zero::False => *v == Value::Bool(false),
        }
    }
}

/// The rows of `definition` in the zero-value table.
fn zero_fields(definition: &str) -> &'static [(&'static str, &'static str, Zero)] {
    meta::rows(super::zero::ZERO_FIELDS, definition, |r| r.0)
}

/// The fields a create sets, as upstream's field manager finds them: `obj` compared
/// with its kind's Go zero value (structured-merge-diff's `Compare`). Every leaf that
/// differs from the zero value, and every map, list and list item the zero value does
/// not have, which `FieldsV1` shows as `"."` when it also has children. An untyped
/// object's zero value is empty.
pub fn created_fields(obj: &Value, schema: Schema) -> FieldSet {
    match obj {
        Value::Object(m) => fields_of_map(m, schema, schema.definition, Collect::Created),
        _ => FieldSet::new(),
    }
}

/// What changed between two objects (upstream's `Comparison`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

/// The paths added, modified and removed from `old` to `new`.
pub fn compare(old: &Value, new: &Value, schema: Schema) -> Comparison {
    let mut c = Comparison::default();
    if let (Value::Object(o), Value::Object(n)) = (old, new) {
        compare_maps(Some(o), Some(n), schema, &mut Vec::new(), &mut c);
    }
    c
}

fn compare_maps(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    schema: Schema,
    path: &mut Vec<String>,
    c: &mut Comparison,
) {
    let empty = Map::new();
    let (o, n) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let members = schema.members();
    for (k, ov) in o {
        path.push(field_element(k));
        compare_values(
            Some(ov),
            n.get(k),
            members.field(k),
            members.list_kind(k),
            path,
            c,
        );
        path.pop();
    }
    for (k, nv) in n {
        if o.contains_key(k) {
            continue;
        }
        path.push(field_element(k));
        compare_values(
            None,
            Some(nv),
            members.field(k),
            members.list_kind(k),
            path,
            c,
        );
        path.pop();
    }
}

fn compare_leaf(old: Option<&Value>, new: Option<&Value>, path: &[String], c: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(o), Some(n)) if o != n => c.modified.insert(path),
        _ => {}
    }
}

fn compare_values(
    old: Option<&Value>,
    new: Option<&Value>,
    schema: Schema,
    list: ListKind,
    path: &mut Vec<String>,
    c: &mut Comparison,
) {
    let os = old.map(|v| shape(v, schema, list));
    let ns = new.map(|v| shape(v, schema, list));
    let empty = |s: &Option<Shape<'_>>| match s {
        None => true,
        Some(Shape::Map(m)) => m.is_empty(),
        Some(Shape::List(items, _)) => items.is_empty(),
        Some(Shape::Leaf) => false,
    };
    // Both empty or absent: a leaf, which keeps `{}` apart from absent.
    if empty(&os) && empty(&ns) {
        return compare_leaf(old, new, path, c);
    }
    match (os, ns) {
        (Some(Shape::Map(o)), Some(Shape::Map(n))) => {
            compare_maps(Some(o), Some(n), schema, path, c)
        }
        (None, Some(Shape::Map(n))) => {
            c.added.insert(path);
            compare_maps(None, Some(n), schema, path, c);
        }
        (Some(Shape::Map(o)), None) => {
            c.removed.insert(path);
            compare_maps(Some(o), None, schema, path, c);
        }
        (Some(Shape::List(o, whole_items)), Some(Shape::List(n, _))) => {
            compare_lists(&o, &n, whole_items, schema, path, c)
        }
        (None, Some(Shape::List(n, whole_items))) => {
            c.added.insert(path);
            compare_lists(&[], &n, whole_items, schema, path, c);
        }
        (Some(Shape::List(o, whole_items)), None) => {
            c.removed.insert(path);
            compare_lists(&o, &[], whole_items, schema, path, c);
        }
        _ => compare_leaf(old, new, path, c),
    }
}

/// Each element of an indexed list by its path element, with its first position (a
/// list may repeat one; the first is the one that counts, as in upstream's lookups).
/// An index, not a scan per lookup: comparing or merging lists of n items stays
/// linear (a list of 20,000 items was 400 million string comparisons).
fn first_items<'l, 'a>(items: &'l [(String, &'a Value)]) -> HashMap<&'l str, (usize, &'a Value)> {
    let mut first = HashMap::with_capacity(items.len());
    for (i, (e, v)) in items.iter().enumerate() {
        first.entry(e.as_str()).or_insert((i, *v));
    }
    first
}

fn compare_lists(
    old: &[(String, &Value)],
    new: &[(String, &Value)],
    whole_items: bool,
    schema: Schema,
    path: &mut Vec<String>,
    c: &mut Comparison,
) {
    let (old_items, new_items) = (first_items(old), first_items(new));
    let mut elements: Vec<&String> = old.iter().map(|(e, _)| e).collect();
    elements.extend(
        new.iter()
            .map(|(e, _)| e)
            .filter(|e| !old_items.contains_key(e.as_str())),
    );
    for e in elements {
        path.push(e.clone());
        let (o, n) = (
            old_items.get(e.as_str()).map(|f| f.1),
            new_items.get(e.as_str()).map(|f| f.1),
        );
        if whole_items {
            compare_leaf(o, n, path, c);
        } else {
            match (o, n) {
                (None, Some(_)) => c.added.insert(path),
                (Some(_), None) => c.removed.insert(path),
                _ => {}
            }
            match (o, n) {
                (Some(Value::Object(om)), Some(Value::Object(nm))) => {
                    compare_maps(Some(om), Some(nm), schema, path, c)
                }
                (None, Some(Value::Object(nm))) => compare_maps(None, Some(nm), schema, path, c),
                (Some(Value::Object(om)), None) => compare_maps(Some(om), None, schema, path, c),
                _ => compare_leaf(o, n, path, c),
            }
        }
        path.pop();
    }
}

/// `config` merged into `live` (upstream's `Merge`): maps merged key by key, set and
/// keyed lists item by item (an item in both merged; the live list's own items keep
/// their place, the config's come in its order), anything else replaced by `config`.
pub fn merge(live: &Value, config: &Value, schema: Schema) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) if !schema.atomic_struct() => {
            let mut out = l.clone();
            let members = schema.members();
            for (k, cv) in c {
                let merged = match l.get(k) {
                    Some(lv) => merge_field(lv, cv, members.field(k), members.list_kind(k)),
                    None => cv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        _ => config.clone(),
    }
}

fn merge_field(live: &Value, config: &Value, schema: Schema, list: ListKind) -> Value {
    match (live, config) {
        (Value::Array(l), Value::Array(c)) => {
            let (Some(li), Some(ci)) = (index_items(list, l), index_items(list, c)) else {
                return config.clone();
            };
            let is_set = matches!(list, ListKind::Set);
            let (live_items, config_items) = (first_items(&li), first_items(&ci));
            let mut out = Vec::with_capacity(l.len().max(c.len()));
            let mut next = 0; // the config's items before `next` are placed
            let place = |item: &Value, out: &mut Vec<Value>, e: &str| {
                let merged = match live_items.get(e) {
                    Some((_, lv)) if !is_set => merge(lv, item, schema),
                    _ => item.clone(),
                };
                out.push(merged);
            };
            for (e, lv) in &li {
                match config_items.get(e.as_str()) {
                    None => out.push((*lv).clone()),
                    Some(&(pos, _)) => {
                        // The config's items up to this shared one, in its order.
                        if pos >= next {
                            for (ce, cv) in &ci[next..=pos] {
                                place(cv, &mut out, ce);
                            }
                            next = pos + 1;
                        }
                    }
                }
            }
            for (ce, cv) in &ci[next..] {
                place(cv, &mut out, ce);
            }
            Value::Array(out)
        }
        (Value::Object(_), Value::Object(_)) => merge(live, config, schema),
        _ => config.clone(),
    }
}

/// `obj` without the members of `remove` (upstream's `RemoveItems`): a member field
/// is dropped, a member item is dropped from its list. Maps and lists left empty by a
/// removal are dropped too, as an unset field would be.
pub fn remove_items(obj: &Value, remove: &FieldSet, schema: Schema) -> Value {
    match obj {
        Value::Object(m) => Value::Object(remove_from_map(m, remove, schema)),
        _ => obj.clone(),
    }
}

fn remove_from_map(
    m: &Map<String, Value>,
    remove: &FieldSet,
    schema: Schema,
) -> Map<String, Value> {
    let mut out = Map::new();
    let members = schema.members();
    for (k, v) in m {
        let Some(node) = remove.child(&field_element(k)) else {
            out.insert(k.clone(), v.clone());
            continue;
        };
        if node.is_member() {
            continue;
        }
        let kept = remove_below(v, node, members.field(k), members.list_kind(k));
        if let Some(kept) = kept {
            out.insert(k.clone(), kept);
        }
    }
    out
}

/// The value without what `node` names below it; `None` when a removal left it empty.
fn remove_below(v: &Value, node: &FieldSet, schema: Schema, list: ListKind) -> Option<Value> {
    match shape(v, schema, list) {
        Shape::Map(m) => {
            let kept = remove_from_map(m, node, schema);
            (!kept.is_empty() || m.is_empty()).then_some(Value::Object(kept))
        }
        Shape::List(items, whole_items) => {
            let mut kept = Vec::with_capacity(items.len());
            for (e, item) in &items {
                match node.child(e) {
                    None => kept.push((*item).clone()),
                    Some(n) if n.is_member() => {}
                    Some(n) => match item {
                        Value::Object(im) if !whole_items => {
                            kept.push(Value::Object(remove_from_map(im, n, schema)))
                        }
                        _ => kept.push((*item).clone()),
                    },
                }
            }
            (!kept.is_empty() || items.is_empty()).then_some(Value::Array(kept))
        }
        Shape::Leaf => Some(v.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Schema {
        Schema::for_kind("apps", "v1", "Deployment")
    }

    #[test]
    fn field_set_of_a_deployment() {
        let d = json!({
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [
                    {"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
                     "resources": {}}
                ]}}
            }
        });
        let set = to_field_set(&d, deployment());
        let c = r#"k:{"name":"c"}"#;
        let port = r#"k:{"containerPort":80,"protocol":"TCP"}"#;
        let fv1 = set.to_fields_v1();
        let ctr = &fv1["f:spec"]["f:template"]["f:spec"]["f:containers"][c];
        assert_eq!(ctr["."], json!({}));
        assert_eq!(ctr["f:image"], json!({}));
        assert_eq!(ctr["f:resources"], json!({}));
        assert_eq!(
            ctr["f:ports"][port],
            json!({".": {}, "f:containerPort": {}})
        );
        // LabelSelector is an atomic struct.
        assert_eq!(fv1["f:spec"]["f:selector"], json!({}));
        assert_eq!(fv1["f:metadata"]["f:labels"], json!({"f:app": {}}));
    }

    #[test]
    fn atomic_struct_items_are_owned_whole() {
        // OwnerReference (apimachinery) and RoleRef/Subject (rbac) are
        // +structType=atomic upstream: an item or field of theirs is one leaf.
        let binding = json!({
            "metadata": {"name": "b", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}
            ]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "alice"}]
        });
        let set = to_field_set(
            &binding,
            Schema::for_kind("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        );
        let fv1 = set.to_fields_v1();
        assert_eq!(
            fv1["f:metadata"]["f:ownerReferences"],
            json!({r#"k:{"uid":"u1"}"#: {}})
        );
        assert_eq!(fv1["f:roleRef"], json!({}));
        assert_eq!(fv1["f:subjects"], json!({}));
    }

    #[test]
    fn fields_marked_map_type_override_their_type() {
        // A Service's selector and a pod's nodeSelector are +mapType=atomic: owned and
        // replaced whole, so a second applier takes the selector, not one label of it.
        let service = json!({"spec": {"selector": {"app": "a", "tier": "web"}}});
        let schema = Schema::for_kind("", "v1", "Service");
        assert_eq!(
            to_field_set(&service, schema).to_fields_v1()["f:spec"]["f:selector"],
            json!({})
        );
        let merged = merge(
            &service,
            &json!({"spec": {"selector": {"app": "b"}}}),
            schema,
        );
        assert_eq!(merged["spec"]["selector"], json!({"app": "b"}));
        let pod = json!({"spec": {"nodeSelector": {"disk": "ssd"}}});
        let fv1 = to_field_set(&pod, Schema::for_kind("", "v1", "Pod")).to_fields_v1();
        assert_eq!(fv1["f:spec"]["f:nodeSelector"], json!({}));
        // A PersistentVolume's claimRef is an ObjectReference (atomic) made granular.
        let pv = json!({"spec": {"claimRef": {"name": "c", "namespace": "n"}}});
        let fv1 = to_field_set(&pv, Schema::for_kind("", "v1", "PersistentVolume")).to_fields_v1();
        assert_eq!(
            fv1["f:spec"]["f:claimRef"],
            json!({"f:name": {}, "f:namespace": {}})
        );
        // Labels stay granular.
        let fv1 = to_field_set(
            &json!({"metadata": {"labels": {"a": "1"}}}),
            Schema::for_kind("", "v1", "Service"),
        )
        .to_fields_v1();
        assert_eq!(fv1["f:metadata"]["f:labels"], json!({"f:a": {}}));
    }

    #[test]
    fn custom_resource_definitions_and_api_services_are_typed() {
        // Their conditions are list-maps keyed by type, as upstream's markers say.
        let status = json!({"status": {"conditions": [
            {"type": "Established", "status": "True"},
            {"type": "NamesAccepted", "status": "True"}
        ]}});
        for (group, kind) in [
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("apiregistration.k8s.io", "APIService"),
        ] {
            let fv1 = to_field_set(&status, Schema::for_kind(group, "v1", kind)).to_fields_v1();
            assert!(
                fv1["f:status"]["f:conditions"]
                    .get(r#"k:{"type":"Established"}"#)
                    .is_some(),
                "{kind}: {fv1}"
            );
        }
    }

    #[test]
    fn merge_keyed_lists_and_maps() {
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x", "imagePullPolicy": "Always"},
            {"name": "b", "image": "y"}
        ]}}}, "metadata": {"labels": {"a": "1"}}});
        let config = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "z"},
            {"name": "a", "image": "x2"}
        ]}}}, "metadata": {"labels": {"b": "2"}}});
        let m = merge(&live, &config, deployment());
        assert_eq!(m["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        assert_eq!(
            m["spec"]["template"]["spec"]["containers"],
            json!([
                {"name": "c", "image": "z"},
                {"name": "a", "image": "x2", "imagePullPolicy": "Always"},
                {"name": "b", "image": "y"}
            ])
        );
        // Atomic lists are replaced.
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "args": ["1", "2"]}]}}}});
        let config = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "args": ["3"]}]}}}});
        let m = merge(&live, &config, deployment());
        assert_eq!(
            m["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["3"])
        );
    }

    #[test]
    fn compare_names_what_changed() {
        let old = json!({"spec": {"replicas": 1, "paused": false},
            "metadata": {"finalizers": ["a", "b"]}});
        let new = json!({"spec": {"replicas": 2, "minReadySeconds": 5},
            "metadata": {"finalizers": ["b", "c"]}});
        let c = compare(&old, &new, deployment());
        assert!(c.modified.contains(&["f:spec", "f:replicas"]));
        assert!(c.added.contains(&["f:spec", "f:minReadySeconds"]));
        assert!(c.removed.contains(&["f:spec", "f:paused"]));
        assert!(
            c.removed
                .contains(&["f:metadata", "f:finalizers", "v:\"a\""])
        );
        assert!(c.added.contains(&["f:metadata", "f:finalizers", "v:\"c\""]));
        assert!(
            !c.modified
                .contains(&["f:metadata", "f:finalizers", "v:\"b\""])
        );
        assert_eq!(compare(&old, &old, deployment()), Comparison::default());
    }

    #[test]
    fn remove_items_drops_members_and_emptied_maps() {
        let obj = json!({"metadata": {"labels": {"a": "1"}, "name": "x"},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}}});
        let mut rm = FieldSet::new();
        rm.insert(&["f:metadata", "f:labels", "f:a"]);
        rm.insert(&["f:spec", "f:replicas"]);
        rm.insert(&[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            r#"k:{"name":"b"}"#,
        ]);
        let out = remove_items(&obj, &rm, deployment());
        assert_eq!(
            out,
            json!({"metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "x"}]}}}})
        );
    }
}
