//! Server-side apply: field ownership in `metadata.managedFields`, the apply
//! operation and its conflicts, after upstream's `k8s.io/apimachinery/pkg/util/managedfields`
//! and `sigs.k8s.io/structured-merge-diff` (`Updater.Apply`, `Updater.Update`).
//!
//! Each entry of `managedFields` is one manager (name, operation `Apply` or `Update`,
//! subresource) and the set of fields it owns. An apply merges the applier's
//! configuration into the live object, removes what the applier owned before and no
//! longer sets (unless someone else owns it too), and fails with a 409 naming every
//! field it would change that another manager owns, unless forced. Other writes to an
//! object that has managed fields take ownership of what they change.
//!
//! Every create is tracked: its writer owns what it set. An object whose managed fields
//! were cleared (`[{}]`) is not tracked again until its next apply, which gives every
//! field already set to the manager `before-first-apply`, as upstream does.

mod scale;
mod set;
mod typed;
mod zero;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
use serde_json::{Map, Value, json};

pub use scale::{parent_managed_fields, scale_with_parent_managers};
pub use set::{FieldSet, path_string};
pub use typed::Schema;
use typed::{compare, created_fields, merge, remove_items, to_field_set};

use crate::errors::{ApiError, cause, reason};

/// The manager that owns what an object had before its first apply.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// The field manager of `kubectl apply --server-side`.
const KUBECTL: &str = "kubectl";

/// kubectl's client-side apply annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `metadata` members nobody owns (upstream's `stripMeta`).
const STRIPPED_METADATA: &[&str] = &[
    "f:name",
    "f:namespace",
    "f:creationTimestamp",
    "f:selfLink",
    "f:uid",
    "f:clusterName",
    "f:generation",
    "f:managedFields",
    "f:resourceVersion",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    time: Option<String>,
    subresource: String,
    fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: Operation, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }

    /// How upstream names a manager in a conflict (`printManager`).
    fn display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The managers of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Managed {
    entries: Vec<Entry>,
}

impl Managed {
    /// Reads `metadata.managedFields`; absent or empty is an untracked object.
    pub fn of(obj: &Value) -> Result<Managed, String> {
        let Some(list) = obj["metadata"].get("managedFields") else {
            return Ok(Managed::default());
        };
        let Some(items) = list.as_array() else {
            if list.is_null() {
                return Ok(Managed::default());
            }
            return Err("metadata.managedFields must be a list".into());
        };
        let mut entries = Vec::with_capacity(items.len());
        for item in items {
            let s = |k: &str| {
                item.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let operation = match s("operation").as_str() {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                o => return Err(format!("managedFields: unsupported operation {o:?}")),
            };
            let fields = match item.get("fieldsV1") {
                Some(v) => FieldSet::from_fields_v1(v)?,
                None => FieldSet::new(),
            };
            entries.push(Entry {
                manager: s("manager"),
                operation,
                api_version: s("apiVersion"),
                time: item.get("time").and_then(Value::as_str).map(str::to_string),
                subresource: s("subresource"),
                fields,
            });
        }
        Ok(Managed { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `managedFields` list, in upstream's order (`Apply` before `Update`, then by
    /// time, manager, apiVersion, subresource); managers owning nothing are dropped.
    pub fn into_value(self) -> Value {
        let mut entries: Vec<Entry> = self
            .entries
            .into_iter()
            .filter(|e| !e.fields.is_empty())
            .collect();
        entries.sort_by(|a, b| {
            (
                a.operation.as_str(),
                &a.time,
                &a.manager,
                &a.api_version,
                &a.subresource,
            )
                .cmp(&(
                    b.operation.as_str(),
                    &b.time,
                    &b.manager,
                    &b.api_version,
                    &b.subresource,
                ))
        });
        Value::Array(
            entries
                .into_iter()
                .map(|e| {
                    let mut m = Map::new();
                    // `omitempty` upstream: a client without a User-Agent manages
                    // fields under no name, and its entry has no `manager`.
                    if !e.manager.is_empty() {
                        m.insert("manager".into(), json!(e.manager));
                    }
                    m.insert("operation".into(), json!(e.operation.as_str()));
                    m.insert("apiVersion".into(), json!(e.api_version));
                    if let Some(t) = &e.time {
                        m.insert("time".into(), json!(t));
                    }
                    m.insert("fieldsType".into(), json!("FieldsV1"));
                    m.insert("fieldsV1".into(), e.fields.into_fields_v1());
                    if !e.subresource.is_empty() {
                        m.insert("subresource".into(), json!(e.subresource));
                    }
                    Value::Object(m)
                })
                .collect(),
        )
    }

    fn position(&self, manager: &str, operation: Operation, subresource: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.is(manager, operation, subresource))
    }

    /// Sets one manager's fields; the time moves only when they change.
    fn set(&mut self, who: &Writer<'_>, operation: Operation, fields: FieldSet) {
        match self.position(who.manager, operation, who.subresource) {
            Some(i) => {
                let e = &mut self.entries[i];
                if e.fields != fields {
                    e.time = Some(who.now.to_string());
                }
                e.fields = fields;
                e.api_version = who.api_version.to_string();
            }
            None => self.entries.push(Entry {
                manager: who.manager.to_string(),
                operation,
                api_version: who.api_version.to_string(),
                time: Some(who.now.to_string()),
                subresource: who.subresource.to_string(),
                fields,
            }),
        }
    }
}

/// Which part of an object a write may own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The whole object.
    Object,
    /// The main resource of a kind with a status subresource: everything but `status`.
    AllButStatus,
    /// The status subresource: only `status`.
    StatusOnly,
}

/// Who writes, and how: what every entry it touches records.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    pub manager: &'a str,
    /// The object's `apiVersion` (`apps/v1`).
    pub api_version: &'a str,
    /// `""` for the main resource, else the subresource (`status`, `scale`).
    pub subresource: &'a str,
    /// RFC 3339, second precision.
    pub now: &'a str,
    pub schema: Schema,
    pub scope: Scope,
}

impl Writer<'_> {
    /// `fields` without what no one owns and what this write may not touch.
    fn ownable(&self, fields: FieldSet) -> FieldSet {
        if self.scope == Scope::StatusOnly {
            // Only `status`, which holds none of the fields nobody owns.
            return fields.only_subtree(&["f:status"]);
        }
        let mut out = fields;
        out.remove_subtree(&["f:apiVersion"]);
        out.remove_subtree(&["f:kind"]);
        for m in STRIPPED_METADATA {
            out.remove_subtree(&["f:metadata", m]);
        }
        if self.scope == Scope::AllButStatus {
            out.remove_subtree(&["f:status"]);
        }
        // Nobody owns `metadata` itself either, only what is in it.
        out.remove(&["f:metadata"]);
        out
    }
}

/// The object without `metadata.managedFields`, what the set operations compare.
fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    o
}

fn with_managed_fields(mut obj: Value, managed: Managed) -> Value {
    let list = managed.into_value();
    let empty = list.as_array().is_some_and(Vec::is_empty);
    if let Some(o) = obj.as_object_mut() {
        if empty {
            if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
        } else if let Some(m) = o
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
        {
            m.insert("managedFields".into(), list);
        }
    }
    obj
}

/// The configuration an apply may set: `status` dropped on a main resource whose
/// status is a subresource, everything but `status` and the object's identity
/// dropped on the status subresource.
fn scoped_config(config: &Value, scope: Scope) -> Value {
    let Value::Object(c) = config else {
        return config.clone();
    };
    let mut out = c.clone();
    match scope {
        Scope::Object => {}
        Scope::AllButStatus => {
            out.remove("status");
        }
        Scope::StatusOnly => {
            out.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
            if let Some(Value::Object(m)) = out.get_mut("metadata") {
                m.retain(|k, _| matches!(k.as_str(), "name" | "namespace"));
            }
        }
    }
    Value::Object(out)
}

/// Server-side apply of `config` by `who` onto `live` (`None`: the object does not
/// exist yet). Returns the new object with its `managedFields`, or a 409 listing the
/// conflicts when another manager owns a field the apply changes and `force` is off.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    who: &Writer<'_>,
    force: bool,
    resource: (&str, &str, &str),
) -> Result<Value, ApiError> {
    let empty = json!({});
    let live = live.unwrap_or(&empty);
    // Stored entries that do not parse count as none, as upstream resets them.
    let mut managed = Managed::of(live).unwrap_or_default();
    let live_plain = without_managed_fields(live);
    if managed.is_empty() && live_plain != empty {
        // An untracked object: what it has is the before-first-apply manager's.
        let all = Writer {
            scope: Scope::Object,
            ..*who
        }
        .ownable(to_field_set(&live_plain, who.schema));
        if !all.is_empty() {
            let before = Writer {
                manager: BEFORE_FIRST_APPLY,
                subresource: "",
                scope: Scope::Object,
                ..*who
            };
            managed.set(&before, Operation::Update, all);
        }
    }
    let config = scoped_config(&without_managed_fields(config), who.scope);
    let merged = merge(&live_plain, &config, who.schema);
    let config_set = who.ownable(to_field_set(&config, who.schema));
    let last = managed
        .position(who.manager, Operation::Apply, who.subresource)
        .map(|i| managed.entries[i].fields.clone());
    managed.set(who, Operation::Apply, config_set.clone());

    // What the applier owned and no longer sets goes, unless someone else owns it
    // (or something below it).
    let pruned = match last {
        Some(last) => {
            let mut keep = config_set.clone();
            for e in &managed.entries {
                if !e.is(who.manager, Operation::Apply, who.subresource) {
                    keep.union_with(&e.fields);
                }
            }
            let gone = disowned(&last, &keep);
            remove_items(&merged, &gone, who.schema)
        }
        None => merged,
    };

    let changes = compare(&live_plain, &pruned, who.schema);
    let changed = changes.modified.union(&changes.added);
    let mut conflicts: Vec<(String, Vec<String>)> = Vec::new();
    for e in &managed.entries {
        if e.is(who.manager, Operation::Apply, who.subresource) {
            continue;
        }
        for path in e.fields.intersection(&changed).paths() {
            conflicts.push((e.display(), path));
        }
    }
    // kubectl moving an object from client-side to server-side apply: conflicts on
    // fields of its last-applied configuration are taken over (upstream's
    // `lastAppliedManager`), when that configuration still matches the object.
    let force = force
        || (who.manager == KUBECTL
            && !conflicts.is_empty()
            && last_applied_fields(&live_plain, who.schema)
                .is_some_and(|allowed| conflicts.iter().all(|(_, p)| allowed.contains(p))));
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts, resource));
    }
    for e in &mut managed.entries {
        if e.is(who.manager, Operation::Apply, who.subresource) {
            continue;
        }
        let mut fields = e.fields.difference(&changes.removed);
        if force {
            fields = fields.difference(&changed);
        }
        e.fields = fields;
    }
    let mut out = with_managed_fields(pruned, managed);
    // kubectl's server-side apply keeps a client-side apply annotation in step, so a
    // later client-side apply starts from this configuration (`lastAppliedUpdater`).
    if who.manager == KUBECTL
        && live_plain["metadata"]["annotations"]
            .get(LAST_APPLIED)
            .is_some()
    {
        let mut applied = config.clone();
        if let Some(a) = applied
            .get_mut("metadata")
            .and_then(|m| m.get_mut("annotations"))
            .and_then(Value::as_object_mut)
        {
            a.remove(LAST_APPLIED);
        }
        if let Some(a) = out
            .get_mut("metadata")
            .and_then(|m| m.get_mut("annotations"))
            .and_then(Value::as_object_mut)
        {
            a.insert(LAST_APPLIED.into(), Value::String(applied.to_string()));
        }
    }
    Ok(out)
}

/// The fields of the object's client-side apply annotation, when each still has the
/// annotation's value in the object.
fn last_applied_fields(live: &Value, schema: Schema) -> Option<FieldSet> {
    let text = live["metadata"]["annotations"]
        .get(LAST_APPLIED)?
        .as_str()?;
    let last: Value = serde_json::from_str(text).ok()?;
    let fields = to_field_set(&last, schema);
    let diff = compare(&last, live, schema);
    let differs = diff.modified.union(&diff.removed);
    differs.intersection(&fields).is_empty().then_some(fields)
}

/// The members of `last` that `keep` has nothing at or below.
fn disowned(last: &FieldSet, keep: &FieldSet) -> FieldSet {
    let mut out = FieldSet::new();
    for path in last.paths() {
        if keep.node(&path).is_none() {
            out.insert(&path);
        }
    }
    out
}

/// The `managedFields` of `new` after a write that is not an apply (PUT, PATCH, a
/// subresource): on an object with managed fields, the writer takes what it changed.
/// `new`'s own `managedFields` win when the request changed them (a client resetting
/// them); `[{}]` clears them. An object without managed fields stays untracked.
pub fn track_update(old: &Value, new: Value, who: &Writer<'_>) -> Result<Value, ApiError> {
    let requested = new["metadata"].get("managedFields");
    let stored = old["metadata"].get("managedFields");
    let requested_changes = match requested {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) if a.is_empty() => false,
        Some(r) => Some(r) != stored,
    };
    if requested_changes {
        let cleared = requested
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().all(|e| e.as_object().is_some_and(Map::is_empty)));
        if cleared {
            return Ok(with_managed_fields(new, Managed::default()));
        }
        let managed = Managed::of(&new)
            .map_err(|e| ApiError::bad_request(format!("invalid managedFields: {e}")))?;
        return Ok(with_managed_fields(new, managed));
    }
    let mut managed = Managed::of(old).unwrap_or_default();
    if managed.is_empty() {
        // Untracked, the common case: nothing to compute, nothing to copy.
        return Ok(with_managed_fields(new, managed));
    }
    let new_plain = without_managed_fields(&new);
    let changes = compare(&without_managed_fields(old), &new_plain, who.schema);
    let changed = who.ownable(changes.modified.union(&changes.added));
    let mut mine = FieldSet::new();
    for e in &mut managed.entries {
        let fields = e.fields.difference(&changes.removed);
        if e.is(who.manager, Operation::Update, who.subresource) {
            mine = fields;
        } else {
            e.fields = fields.difference(&changed);
        }
    }
    let fields = mine.union(&changed);
    let known = managed
        .position(who.manager, Operation::Update, who.subresource)
        .is_some();
    if known || !fields.is_empty() {
        managed.set(who, Operation::Update, fields);
    }
    Ok(with_managed_fields(new_plain, managed))
}

/// The `managedFields` of an object a write that is not an apply creates. Upstream
/// tracks every create: the writer owns, with operation `Update`, every field the
/// request set once defaulted (admission's additions are nobody's). Managers the body
/// names in its own `managedFields` keep only what the writer did not set, as an
/// update takes over what it adds; entries that do not parse are dropped, as upstream
/// resets them.
pub fn track_create(mut new: Value, who: &Writer<'_>) -> Value {
    let mut managed = Managed::of(&new).unwrap_or_default();
    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    let fields = who.ownable(created_fields(&new, who.schema));
    let mut mine = FieldSet::new();
    for e in &mut managed.entries {
        if e.is(who.manager, Operation::Update, who.subresource) {
            mine = std::mem::take(&mut e.fields);
        } else {
            e.fields = e.fields.difference(&fields);
        }
    }
    let fields = if mine.is_empty() {
        fields
    } else {
        mine.union(&fields)
    };
    managed.set(who, Operation::Update, fields);
    with_managed_fields(new, managed)
}

/// The 409 of an apply with conflicts (upstream's `NewConflictError`).
fn conflict_error(conflicts: &[(String, Vec<String>)], resource: (&str, &str, &str)) -> ApiError {
    let message = if let [(manager, path)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {manager}: {}",
            path_string(path)
        )
    } else {
        let mut managers: Vec<&String> = conflicts.iter().map(|(m, _)| m).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            for (_, p) in conflicts.iter().filter(|(x, _)| x == m) {
                lines.push(format!("- {}", path_string(p)));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let (group, plural, name) = resource;
    ApiError {
        code: 409,
        reason: reason::CONFLICT.into(),
        message,
        details: Some(Box::new(StatusDetails {
            group: (!group.is_empty()).then(|| group.to_string()),
            kind: Some(plural.to_string()),
            name: Some(name.to_string()),
            causes: Some(
                conflicts
                    .iter()
                    .map(|(m, p)| StatusCause {
                        reason: Some(cause::FIELD_MANAGER_CONFLICT.into()),
                        message: Some(format!("conflict with {m}")),
                        field: Some(path_string(p)),
                    })
                    .collect(),
            ),
            ..Default::default()
        })),
    }
}

#[cfg(test)]
mod tests;
