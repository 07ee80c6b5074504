//! Applying a strategic merge patch, after upstream's `StrategicMergeMapPatch`
//! (`k8s.io/apimachinery/pkg/util/strategicpatch/patch.go`, server-side options:
//! parallel lists merged, unmatched nulls ignored).

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use super::{FieldPatchMeta, PatchError, PatchSchema, Strategy};

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_DIRECTIVE: &str = "delete";
const REPLACE_DIRECTIVE: &str = "replace";
const MERGE_DIRECTIVE: &str = "merge";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

// mergepatch error texts.
const ERR_BAD_JSON_DOC: &str = "invalid JSON document";
const ERR_NO_LIST_OF_LISTS: &str = "lists of lists are not supported";
const ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST: &str =
    "invalid patch format of setElementOrder list";

/// A schema that knows nothing: every list is replaced, every map merged (what
/// upstream does for fields without tags).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPatchSchema;

impl PatchSchema for NoPatchSchema {
    fn lookup(&self, _name: &str) -> FieldPatchMeta {
        FieldPatchMeta::default()
    }
}

/// Applies a strategic merge patch to `doc` using `schema` for patch strategies and
/// merge keys. Both must be JSON objects (`invalid JSON document` otherwise).
///
/// Supported: maps merged recursively, `null` deletes, lists with strategy `merge`
/// merged by merge key (objects) or as sets (primitives), other lists replaced,
/// `$patch: replace|delete` on maps and `$patch: replace|delete` as list items,
/// `$setElementOrder/<list>`, `$retainKeys`, `$deleteFromPrimitiveList/<list>`.
pub fn strategic_merge_patch(
    doc: &Value,
    patch: &Value,
    schema: &dyn PatchSchema,
) -> Result<Value, PatchError> {
    let (Value::Object(original), Value::Object(patch)) = (doc, patch) else {
        return Err(PatchError::BadRequest(ERR_BAD_JSON_DOC.into()));
    };
    merge_map(original.clone(), patch.clone(), schema).map(Value::Object)
}

fn malformed(msg: impl Into<String>) -> PatchError {
    PatchError::Malformed(msg.into())
}

/// Go's `%v` of a decoded JSON value.
fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

fn go_fmt_map(m: &Map<String, Value>) -> String {
    go_fmt(&Value::Object(m.clone()))
}

/// Go's `reflect.TypeOf` name of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "%!s(<nil>)",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn err_bad_arg_type(expected: &str, actual: &Value) -> PatchError {
    malformed(format!(
        "expected a {expected}, but received a {}",
        go_type(actual)
    ))
}

const MAP_T: &str = "map[string]interface {}";
const SLICE_T: &str = "[]interface {}";

fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> PatchError {
    malformed(format!(
        "map: {} does not contain declared merge key: {key}",
        go_fmt_map(m)
    ))
}

fn err_bad_patch_type(t: &Value, m: &Map<String, Value>) -> PatchError {
    malformed(format!(
        "unknown patch type: {} in map: {}",
        go_fmt(t),
        go_fmt_map(m)
    ))
}

/// The "other" strategy once retainKeys is split off (`extractRetainKeysPatchStrategy`).
fn other_strategy(s: Option<Strategy>) -> Option<&'static str> {
    match s? {
        Strategy::Merge | Strategy::MergeRetainKeys => Some(MERGE_DIRECTIVE),
        Strategy::Replace => Some(REPLACE_DIRECTIVE),
        Strategy::RetainKeys => None,
    }
}

fn child_schema(meta: &mut FieldPatchMeta) -> Box<dyn PatchSchema> {
    meta.schema
        .take()
        .unwrap_or_else(|| Box::new(NoPatchSchema))
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: &dyn PatchSchema,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.get(DIRECTIVE_MARKER).cloned() {
        return handle_directive_in_merge_map(&directive, patch);
    }
    apply_retain_keys_directive(&mut original, &mut patch)?;
    merge_patch_into_original(&mut original, &mut patch, schema)?;

    for (key, patch_v) in patch {
        let (key, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
            (extract_key(&key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?, true)
        } else {
            (key, false)
        };
        if patch_v.is_null() {
            original.remove(&key);
            continue;
        }
        let same_kind = match (original.get(&key), &patch_v) {
            (None, _) => None,
            (Some(Value::Object(_)), Value::Object(_)) => Some(true),
            (Some(Value::Array(_)), Value::Array(_)) => Some(true),
            (Some(o), p) => {
                Some(!o.is_object() && !o.is_array() && !o.is_null() && same_scalar_type(o, p))
            }
        };
        if same_kind != Some(true) {
            // Absent from the original, or of another type: take the patch value.
            if !is_delete_list {
                let mut v = patch_v;
                discard_null_values(&mut v);
                match remove_directives(v) {
                    Some(v) => {
                        original.insert(key, v);
                    }
                    None => {
                        original.remove(&key);
                    }
                }
            }
            continue;
        }
        let orig_v = original.remove(&key).unwrap_or(Value::Null);
        let merged = match (orig_v, patch_v) {
            (Value::Object(o), Value::Object(p)) => {
                let mut meta = schema.lookup(&key);
                let child = child_schema(&mut meta);
                if other_strategy(meta.strategy) == Some(REPLACE_DIRECTIVE) {
                    Some(Value::Object(p))
                } else {
                    Some(Value::Object(merge_map(o, p, child.as_ref())?))
                }
            }
            (Value::Array(o), Value::Array(p)) => {
                let mut meta = schema.lookup(&key);
                let child = child_schema(&mut meta);
                Some(Value::Array(merge_slice_handler(
                    o,
                    p,
                    child.as_ref(),
                    other_strategy(meta.strategy),
                    meta.merge_key.as_deref().unwrap_or(""),
                    is_delete_list,
                )?))
            }
            (_, p) => remove_directives(p),
        };
        if let Some(v) = merged {
            original.insert(key, v);
        }
    }
    Ok(original)
}

fn same_scalar_type(a: &Value, b: &Value) -> bool {
    matches!(
        (a, b),
        (Value::Bool(_), Value::Bool(_))
            | (Value::Number(_), Value::Number(_))
            | (Value::String(_), Value::String(_))
    )
}

fn handle_directive_in_merge_map(
    directive: &Value,
    mut patch: Map<String, Value>,
) -> Result<Map<String, Value>, PatchError> {
    match directive.as_str() {
        Some(REPLACE_DIRECTIVE) => {
            patch.remove(DIRECTIVE_MARKER);
            Ok(patch)
        }
        Some(DELETE_DIRECTIVE) => Ok(Map::new()),
        _ => Err(err_bad_patch_type(directive, &patch)),
    }
}

fn extract_key(s: &str, prefix: &str) -> Result<String, PatchError> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ => Err(match prefix {
            DELETE_FROM_PRIMITIVE_LIST_PREFIX => {
                PatchError::BadRequest(ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST.into())
            }
            _ => PatchError::BadRequest(ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST.into()),
        }),
    }
}

fn apply_retain_keys_directive(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(list) = retain else {
        return Err(PatchError::BadRequest(
            ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS.into(),
        ));
    };
    let keep = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        {
            continue;
        }
        if !keep(k) {
            return Err(PatchError::BadRequest(
                ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS.into(),
            ));
        }
    }
    original.retain(|k, _| keep(k));
    Ok(())
}

/// Whether list items are maps (merged by key) or scalars, as `sliceElementType`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ElemKind {
    Map,
    Scalar,
}

fn slice_element_kind(slices: &[&[Value]]) -> Result<ElemKind, PatchError> {
    let mut prev: Option<&'static str> = None;
    for s in slices {
        for v in *s {
            let t = match v {
                Value::Array(_) => {
                    if prev.is_none() {
                        return Err(PatchError::Unprocessable(ERR_NO_LIST_OF_LISTS.into()));
                    }
                    "slice"
                }
                other => go_type(other),
            };
            match prev {
                None => prev = Some(t),
                Some(p) if p != t => {
                    let all: Vec<Value> = slices.iter().map(|s| Value::Array(s.to_vec())).collect();
                    return Err(malformed(format!(
                        "list element types are not identical: {}",
                        go_fmt(&Value::Array(all))
                    )));
                }
                Some(_) => {}
            }
        }
    }
    match prev {
        None => Err(malformed("no elements in any of the given slices")),
        Some(MAP_T) => Ok(ElemKind::Map),
        Some(_) => Ok(ElemKind::Scalar),
    }
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: &dyn PatchSchema,
    strategy: Option<&str>,
    merge_key: &str,
    is_delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if strategy == Some(MERGE_DIRECTIVE) || is_delete_list {
        merge_slice(original, patch, schema, merge_key, is_delete_list)
    } else {
        Ok(patch)
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: &dyn PatchSchema,
    merge_key: &str,
    is_delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_kind(&[&original, &patch])?;
    let (server_order, patch, merged) = if kind == ElemKind::Scalar {
        if is_delete_list {
            let deleted: HashSet<String> = patch.iter().map(Value::to_string).collect();
            return Ok(original
                .into_iter()
                .filter(|v| !deleted.contains(&v.to_string()))
                .collect());
        }
        let mut both = original.clone();
        both.extend(patch.iter().cloned());
        (original, patch, deduplicate_scalars(both))
    } else {
        if merge_key.is_empty() {
            return Err(malformed(format!(
                "cannot merge lists without merge key for {}",
                schema.name()
            )));
        }
        let (original, patch) = merge_slice_with_special_elements(original, patch, merge_key)?;
        let merged =
            merge_slice_without_special_elements(original.clone(), &patch, merge_key, schema)?;
        (original, patch, merged)
    };
    let (patch_items, server_only) = partition(merged, &patch, merge_key, kind)?;
    normalize_element_order(
        patch_items,
        server_only,
        &patch,
        &server_order,
        merge_key,
        kind,
    )
}

/// Upstream's in-place deduplication, with its element order: for each element in
/// turn, every later copy of it is overwritten by the list's last element and the list
/// shortened (the moved element checked again in its new place). Upstream compares
/// every pair; here each value's positions are kept in an ordered set, so that a long
/// list (a patch of 100,000 finalizers) costs n log n instead of n².
fn deduplicate_scalars(mut s: Vec<Value>) -> Vec<Value> {
    if s.len() < 2 {
        return s;
    }
    let mut keys: Vec<String> = s.iter().map(Value::to_string).collect();
    let mut at: HashMap<String, BTreeSet<usize>> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        at.entry(key.clone()).or_default().insert(i);
    }
    let mut last = s.len() - 1;
    let mut i = 0;
    while i < last {
        let key = keys[i].clone();
        while let Some(&j) = at.get(&key).and_then(|p| p.range(i + 1..).next()) {
            // Overwrite the copy at `j` with the last element, as long as `j` holds one.
            loop {
                at.entry(key.clone()).or_default().remove(&j);
                if j == last {
                    s.pop();
                    keys.pop();
                    last -= 1;
                    break;
                }
                let moved = keys.pop().unwrap_or_default();
                let value = s.pop().unwrap_or(Value::Null);
                if let Some(p) = at.get_mut(&moved) {
                    p.remove(&last);
                    p.insert(j);
                }
                s[j] = value;
                keys[j] = moved.clone();
                last -= 1;
                if moved != key {
                    break;
                }
            }
        }
        i += 1;
    }
    s
}

/// Where each element first occurs in a list, by its identity: the value of its merge
/// key for maps (none for a map without it), itself for scalars. Upstream scans the
/// list for every lookup; with an index a long list stays linear (a strategic patch of
/// 20,000 `env` entries took 19 s of one core by scanning).
struct Positions<'k> {
    first: HashMap<String, usize>,
    merge_key: &'k str,
    kind: ElemKind,
}

impl<'k> Positions<'k> {
    fn of(list: &[Value], merge_key: &'k str, kind: ElemKind) -> Positions<'k> {
        let mut first = HashMap::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            first.entry(identity(v, merge_key, kind)).or_insert(i);
        }
        Positions {
            first,
            merge_key,
            kind,
        }
    }

    fn get(&self, v: &Value) -> Option<usize> {
        self.first
            .get(&identity(v, self.merge_key, self.kind))
            .copied()
    }
}

/// What [`Positions`] finds an element by. A map's merge key's value as JSON text (a
/// missing key is `null`, as upstream compares it); a value that is not a map, in a
/// list of maps, is the empty text, which no JSON value prints as.
fn identity(v: &Value, merge_key: &str, kind: ElemKind) -> String {
    match kind {
        ElemKind::Map => match v.as_object() {
            Some(m) => m.get(merge_key).unwrap_or(&Value::Null).to_string(),
            None => String::new(),
        },
        ElemKind::Scalar => v.to_string(),
    }
}

fn merge_key_value<'a>(item: &'a Value, merge_key: &str) -> Result<&'a Value, PatchError> {
    let Value::Object(m) = item else {
        return Err(err_bad_arg_type(MAP_T, item));
    };
    m.get(merge_key)
        .ok_or_else(|| err_no_merge_key(m, merge_key))
}

/// The first map of a list whose merge key has a value, as upstream's
/// `findMapInSliceBasedOnKeyValue` finds it (scanning from the start, failing at the
/// first element that is not a map), from an index kept as the list grows.
struct KeyIndex {
    first: HashMap<String, usize>,
    /// Where the first element that is not a map is: a lookup that scans past it fails.
    not_a_map: Option<usize>,
}

impl KeyIndex {
    fn of(list: &[Value], merge_key: &str) -> KeyIndex {
        let mut index = KeyIndex {
            first: HashMap::with_capacity(list.len()),
            not_a_map: None,
        };
        for (i, v) in list.iter().enumerate() {
            index.add(i, v, merge_key);
        }
        index
    }

    fn add(&mut self, i: usize, v: &Value, merge_key: &str) {
        match v.as_object() {
            Some(m) => {
                if let Some(key) = m.get(merge_key) {
                    self.first.entry(key.to_string()).or_insert(i);
                }
            }
            None => {
                self.not_a_map.get_or_insert(i);
            }
        }
    }

    fn find(&self, value: &Value) -> Result<Option<usize>, PatchError> {
        let found = self.first.get(&value.to_string()).copied();
        match (found, self.not_a_map) {
            (Some(i), Some(bad)) if bad < i => Err(not_a_map(bad)),
            (None, Some(bad)) => Err(not_a_map(bad)),
            (found, _) => Ok(found),
        }
    }
}

fn not_a_map(i: usize) -> PatchError {
    malformed(format!("value for key {i} is not a map"))
}

fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut without_special = Vec::new();
    let mut replace = false;
    let mut deleted = HashSet::new();
    for v in patch {
        let Value::Object(m) = &v else {
            return Err(err_bad_arg_type(MAP_T, &v));
        };
        match m.get(DIRECTIVE_MARKER) {
            None => without_special.push(v),
            Some(directive) => match directive.as_str() {
                Some(DELETE_DIRECTIVE) => {
                    let Some(value) = m.get(merge_key) else {
                        return Err(err_no_merge_key(m, merge_key));
                    };
                    // Upstream removes matches one scan at a time, and its last scan
                    // (finding none) fails at an element that is not a map.
                    if let Some(bad) = original.iter().position(|v| !v.is_object()) {
                        return Err(not_a_map(bad));
                    }
                    deleted.insert(value.to_string());
                }
                Some(REPLACE_DIRECTIVE) => replace = true,
                Some(MERGE_DIRECTIVE) => {
                    return Err(malformed(
                        "merging lists cannot yet be specified in the patch",
                    ));
                }
                _ => return Err(err_bad_patch_type(directive, m)),
            },
        }
    }
    if replace {
        Ok((without_special, Vec::new()))
    } else {
        if !deleted.is_empty() {
            original.retain(|v| {
                v.get(merge_key)
                    .is_none_or(|key| !deleted.contains(&key.to_string()))
            });
        }
        Ok((original, without_special))
    }
}

fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    schema: &dyn PatchSchema,
) -> Result<Vec<Value>, PatchError> {
    let mut index = KeyIndex::of(&original, merge_key);
    for v in patch {
        let value = merge_key_value(v, merge_key)?;
        match index.find(value)? {
            Some(i) => {
                let (Value::Object(o), Value::Object(p)) =
                    (std::mem::take(&mut original[i]), v.clone())
                else {
                    return Err(err_bad_arg_type(MAP_T, v));
                };
                original[i] = Value::Object(merge_map(o, p, schema)?);
            }
            None => {
                index.add(original.len(), v, merge_key);
                original.push(v.clone());
            }
        }
    }
    Ok(original)
}

/// Splits `merged` into items present in `by` and server-only items.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut in_patch = Vec::new();
    let mut server_only = Vec::new();
    let whole = merge_key.is_empty() || kind == ElemKind::Scalar;
    let (values, keys) = if whole {
        (by.iter().map(Value::to_string).collect(), None)
    } else {
        (HashSet::new(), Some(KeyIndex::of(by, merge_key)))
    };
    for v in merged {
        let found = match &keys {
            None => values.contains(&v.to_string()),
            Some(keys) => keys.find(merge_key_value(&v, merge_key)?)?.is_some(),
        };
        if found {
            in_patch.push(v);
        } else {
            server_only.push(v);
        }
    }
    Ok((in_patch, server_only))
}

/// `to_sort` in the order of `order`, whose positions `positions` holds (items it
/// lacks last, deletions after them).
fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    positions: &Positions<'_>,
) -> Result<Vec<Value>, PatchError> {
    let (mut to_sort, to_delete) = if positions.kind == ElemKind::Map {
        for item in to_sort.iter().chain(order) {
            merge_key_value(item, positions.merge_key)?;
        }
        to_sort.into_iter().partition::<Vec<_>, _>(|v| {
            v.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some(DELETE_DIRECTIVE)
        })
    } else {
        (to_sort, Vec::new())
    };
    to_sort.sort_by_cached_key(|v| positions.get(v).unwrap_or(usize::MAX));
    to_sort.extend(to_delete);
    Ok(to_sort)
}

fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<Vec<Value>, PatchError> {
    let patch_positions = Positions::of(patch_order, merge_key, kind);
    let patch = normalize_slice_order(patch, patch_order, &patch_positions)?;
    let server_positions = Positions::of(server_order, merge_key, kind);
    let server_only = normalize_slice_order(server_only, server_order, &server_positions)?;
    Ok(merge_sorted_slice(server_only, patch, &server_positions))
}

/// Interleaves server-only items (`left`) into patch items (`right`), keeping each
/// side's order and placing a left item before a right item when the live list had
/// it first.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &Positions<'_>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (Some(l), Some(r)) => {
                let li = server_order.get(l);
                let ri = server_order.get(r);
                let left_first = matches!((li, ri), (Some(a), Some(b)) if a < b);
                if left_first {
                    out.extend(left.next());
                } else {
                    out.extend(right.next());
                }
            }
        }
    }
    out
}

/// `removeDirectives`: `None` when the value itself is a directive map.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

fn discard_null_values(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_null_values);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_null_values),
        _ => {}
    }
}

/// `mergePatchIntoOriginal`: applies `$setElementOrder/<list>` directives together
/// with their lists.
fn merge_patch_into_original(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: &dyn PatchSchema,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX))
        .cloned()
        .collect();
    for key in keys {
        let Some(order_v) = patch.remove(&key) else {
            continue;
        };
        let Value::Array(order) = &order_v else {
            return Err(err_bad_arg_type(SLICE_T, &order_v));
        };
        let original_key = extract_key(&key, SET_ELEMENT_ORDER_PREFIX)?;
        let original_list = match original.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_T, other)),
        };
        let patch_list = match patch.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_T, other)),
        };
        let mut meta = schema.lookup(&original_key);
        let child = child_schema(&mut meta);
        let strategy = other_strategy(meta.strategy);
        let merge_key = meta.merge_key.clone().unwrap_or_default();
        validate_patch_with_set_order_list(
            patch_list.as_deref().unwrap_or(&[]),
            order,
            &merge_key,
        )?;

        let merged = match (&original_list, &patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => match remove_directives(Value::Array(p.clone())) {
                Some(Value::Array(a)) => a,
                _ => continue,
            },
            (Some(o), Some(p)) => merge_slice_handler(
                o.clone(),
                p.clone(),
                child.as_ref(),
                strategy,
                &merge_key,
                false,
            )?,
            (None, None) => continue,
        };
        let kind = slice_element_kind(&[
            original_list.as_deref().unwrap_or(&[]),
            patch_list.as_deref().unwrap_or(&[]),
        ])?;
        let (patch_items, server_only) = if merge_key.is_empty() {
            partition(merged, order, "", ElemKind::Scalar)?
        } else {
            partition(merged, order, &merge_key, ElemKind::Map)?
        };
        let both = normalize_element_order(
            patch_items,
            server_only,
            order,
            original_list.as_deref().unwrap_or(&[]),
            &merge_key,
            kind,
        )?;
        original.insert(original_key.clone(), Value::Array(both));
        patch.remove(&original_key);
    }
    Ok(())
}

/// The relative order of patch items must follow `$setElementOrder`, and every
/// (non-delete) patch item must be in it.
fn validate_patch_with_set_order_list(
    patch: &[Value],
    order: &[Value],
    merge_key: &str,
) -> Result<(), PatchError> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if merge_key.is_empty() {
        patch.iter().collect()
    } else {
        let mut out = Vec::new();
        for v in patch {
            let Value::Object(m) = v else {
                return Err(err_bad_arg_type(MAP_T, v));
            };
            if m.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some(DELETE_DIRECTIVE) {
                out.push(v);
            }
        }
        out
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        if non_delete[pi]
            .as_object()
            .is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
        {
            pi += 1;
            continue;
        }
        let equal = if merge_key.is_empty() {
            non_delete[pi] == &order[oi]
        } else {
            merge_key_value(non_delete[pi], merge_key)? == merge_key_value(&order[oi], merge_key)?
        };
        if equal {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(malformed(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER_PREFIX} list:\n{}\n",
            go_fmt(&Value::Array(patch.to_vec())),
            go_fmt(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::BuiltinPatchSchema;
    use serde_json::json;

    fn pod() -> BuiltinPatchSchema {
        BuiltinPatchSchema::for_definition("io.k8s.api.core.v1.Pod")
    }

    fn apply(schema: &dyn PatchSchema, doc: Value, patch: Value) -> Value {
        strategic_merge_patch(&doc, &patch, schema).unwrap_or_else(|e| panic!("{patch}: {e}"))
    }

    fn pod_with(containers: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    #[test]
    fn containers_merge_by_name() {
        let doc = pod_with(json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]));
        let cases = [
            // Change one container; the other is kept.
            (
                json!({"spec": {"containers": [{"name": "b", "image": "z"}]}}),
                json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}]),
            ),
            // A new name goes before the server-only items: without $setElementOrder
            // upstream cannot place it relative to them and puts patch items first.
            (
                json!({"spec": {"containers": [{"name": "c", "image": "q"}]}}),
                json!([{"name": "c", "image": "q"}, {"name": "a", "image": "x"}, {"name": "b", "image": "y"}]),
            ),
            // $patch: delete removes by merge key.
            (
                json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
                json!([{"name": "b", "image": "y"}]),
            ),
            // $patch: replace replaces the whole list with the other items.
            (
                json!({"spec": {"containers": [{"name": "c", "image": "q"}, {"$patch": "replace"}]}}),
                json!([{"name": "c", "image": "q"}]),
            ),
            // null inside an item deletes that field only.
            (
                json!({"spec": {"containers": [{"name": "a", "image": null}]}}),
                json!([{"name": "a"}, {"name": "b", "image": "y"}]),
            ),
            // Patch order wins over live order for patched items.
            (
                json!({"spec": {"containers": [{"name": "b", "image": "y2"}, {"name": "a", "image": "x2"}]}}),
                json!([{"name": "b", "image": "y2"}, {"name": "a", "image": "x2"}]),
            ),
        ];
        for (patch, want) in cases {
            let got = apply(&pod(), doc.clone(), patch.clone());
            assert_eq!(got["spec"]["containers"], want, "{patch}");
            assert_eq!(got["metadata"]["name"], "p");
        }
    }

    #[test]
    fn nested_lists_merge_by_their_keys() {
        let doc = pod_with(json!([{
            "name": "a",
            "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "volumeMounts": [{"mountPath": "/data", "name": "d"}],
            "args": ["x", "y"]
        }]));
        let patch = json!({"spec": {"containers": [{
            "name": "a",
            "ports": [{"containerPort": 80, "name": "web"}, {"containerPort": 8080}],
            "env": [{"name": "B", "value": "3"}, {"name": "A", "$patch": "delete"}],
            "volumeMounts": [{"mountPath": "/data", "readOnly": true}],
            "args": ["z"]
        }]}});
        let got = apply(&pod(), doc, patch);
        let c = &got["spec"]["containers"][0];
        // 80 keeps its place before 443 (both live); 8080 is new and follows the patch.
        assert_eq!(
            c["ports"],
            json!([{"containerPort": 80, "name": "web"}, {"containerPort": 8080}, {"containerPort": 443}])
        );
        assert_eq!(c["env"], json!([{"name": "B", "value": "3"}]));
        assert_eq!(
            c["volumeMounts"],
            json!([{"mountPath": "/data", "name": "d", "readOnly": true}])
        );
        // args has no strategy: replaced.
        assert_eq!(c["args"], json!(["z"]));
    }

    #[test]
    fn primitive_lists_with_merge_strategy_are_sets() {
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}});
        let cases = [
            (
                json!({"metadata": {"finalizers": ["b", "c"]}}),
                json!(["a", "b", "c"]),
            ),
            (
                json!({"metadata": {"finalizers": ["a"]}}),
                json!(["a", "b"]),
            ),
            (
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
                json!(["b"]),
            ),
            (
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "b"]}}),
                json!([]),
            ),
            (
                json!({"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]}}),
                json!(["c", "b"]),
            ),
            (json!({"metadata": {"finalizers": null}}), Value::Null),
        ];
        for (patch, want) in cases {
            let got = apply(&pod(), doc.clone(), patch.clone());
            assert_eq!(got["metadata"]["finalizers"], want, "{patch}");
        }
        // Deleting from a list the object does not have is a no-op.
        let got = apply(
            &pod(),
            json!({"metadata": {}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(got, json!({"metadata": {}}));
    }

    #[test]
    fn set_element_order() {
        let doc = pod_with(
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}, {"name": "c", "image": "w"}]),
        );
        // Reorder without changing contents.
        let got = apply(
            &pod(),
            doc.clone(),
            json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]}}),
        );
        assert_eq!(
            got["spec"]["containers"],
            json!([{"name": "c", "image": "w"}, {"name": "a", "image": "x"}, {"name": "b", "image": "y"}])
        );
        // Change one item and put a new one first.
        let got = apply(
            &pod(),
            doc.clone(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "d"}, {"name": "a"}, {"name": "b"}, {"name": "c"}],
                "containers": [{"name": "d", "image": "n"}, {"name": "b", "image": "y2"}]
            }}),
        );
        assert_eq!(
            got["spec"]["containers"],
            json!([{"name": "d", "image": "n"}, {"name": "a", "image": "x"}, {"name": "b", "image": "y2"}, {"name": "c", "image": "w"}])
        );
        // Primitive list order.
        let got = apply(
            &pod(),
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "b", "a"], "finalizers": ["c"]}}),
        );
        assert_eq!(got["metadata"]["finalizers"], json!(["c", "b", "a"]));
        // A patch item missing from the order list is rejected.
        let err = strategic_merge_patch(
            &doc,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "z", "image": "i"}]}}),
            &pod(),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("The order in patch list:"),
            "{err}"
        );
        assert_eq!(err.to_api_error().code, 400);
        // Malformed directive key.
        let err = strategic_merge_patch(&doc, &json!({"spec": {"$setElementOrder": []}}), &pod())
            .unwrap_err();
        assert_eq!(
            err,
            PatchError::BadRequest("invalid patch format of setElementOrder list".into())
        );
        assert_eq!(err.to_api_error().code, 400);
    }

    #[test]
    fn retain_keys() {
        let deploy = BuiltinPatchSchema::for_definition("io.k8s.api.apps.v1.Deployment");
        let doc = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let got = apply(
            &deploy,
            doc.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(got["spec"]["strategy"], json!({"type": "Recreate"}));
        // Without the directive the map is merged as usual.
        let got = apply(
            &deploy,
            doc.clone(),
            json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": 0}}}}),
        );
        assert_eq!(
            got["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
        );
        // A patched field outside $retainKeys is an error.
        let err = strategic_merge_patch(
            &doc,
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
            &deploy,
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::BadRequest("invalid patch format of retainKeys".into())
        );
        let err = strategic_merge_patch(
            &doc,
            &json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
            &deploy,
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::BadRequest("invalid patch format of retainKeys".into())
        );

        // Volumes: merge by name plus retainKeys inside an item.
        let doc = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}]}});
        let got = apply(
            &pod(),
            doc,
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}),
        );
        assert_eq!(
            got["spec"]["volumes"],
            json!([{"name": "v", "hostPath": {"path": "/x"}}, {"name": "w", "emptyDir": {}}])
        );
    }

    #[test]
    fn map_directives_and_nulls() {
        let doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}, "spec": {"nodeName": "n"}});
        let cases = [
            (
                json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
                json!({"labels": {"c": "3"}, "annotations": {"x": "y"}}),
            ),
            (
                json!({"metadata": {"labels": {"$patch": "delete"}}}),
                json!({"labels": {}, "annotations": {"x": "y"}}),
            ),
            (
                json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
                json!({"labels": {"b": "2", "c": "3"}, "annotations": {"x": "y"}}),
            ),
            (
                json!({"metadata": {"annotations": null}}),
                json!({"labels": {"a": "1", "b": "2"}}),
            ),
            // A directive map for an absent field adds nothing.
            (
                json!({"metadata": {"ownerReferences": {"$patch": "delete"}}}),
                json!({"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}),
            ),
        ];
        for (patch, want) in cases {
            let got = apply(&pod(), doc.clone(), patch.clone());
            assert_eq!(got["metadata"], want, "{patch}");
            assert_eq!(got["spec"]["nodeName"], "n");
        }
        // Top-level replace and delete.
        assert_eq!(
            apply(
                &pod(),
                doc.clone(),
                json!({"$patch": "replace", "kind": "Pod"})
            ),
            json!({"kind": "Pod"})
        );
        assert_eq!(
            apply(&pod(), doc.clone(), json!({"$patch": "delete"})),
            json!({})
        );
        // New values lose their directives and nulls.
        let got = apply(
            &pod(),
            json!({"spec": {}}),
            json!({"spec": {"containers": [{"name": "a", "image": null}, {"name": "b", "$patch": "delete"}]}}),
        );
        assert_eq!(got["spec"]["containers"], json!([{"name": "a"}]));
    }

    #[test]
    fn lists_without_strategy_are_replaced() {
        let doc = json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}], "containers": [{"name": "c", "command": ["x"]}]}});
        let got = apply(
            &pod(),
            doc,
            json!({"spec": {"tolerations": [{"key": "c"}]}}),
        );
        assert_eq!(got["spec"]["tolerations"], json!([{"key": "c"}]));
        assert_eq!(
            got["spec"]["containers"],
            json!([{"name": "c", "command": ["x"]}])
        );
        // With no schema at all, merge-able lists are replaced too.
        let got = apply(
            &NoPatchSchema,
            json!({"l": [1, 2], "m": {"a": 1}}),
            json!({"l": [3], "m": {"b": 2}}),
        );
        assert_eq!(got, json!({"l": [3], "m": {"a": 1, "b": 2}}));
    }

    #[test]
    fn owner_references_merge_by_uid_and_status_conditions_by_type() {
        let doc = json!({
            "metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}
        });
        let got = apply(
            &pod(),
            doc,
            json!({
                "metadata": {"ownerReferences": [{"uid": "2", "name": "b2"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }),
        );
        assert_eq!(
            got["metadata"]["ownerReferences"],
            json!([{"uid": "1", "name": "a"}, {"uid": "2", "name": "b2"}])
        );
        assert_eq!(
            got["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
    }

    #[test]
    fn errors_match_upstream() {
        let doc = pod_with(json!([{"name": "a", "image": "x"}]));
        let cases: [(Value, PatchError); 6] = [
            (
                json!({"spec": {"containers": [{"image": "y"}]}}),
                PatchError::Malformed(
                    "map: map[image:y] does not contain declared merge key: name".into(),
                ),
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "$patch": "merge"}]}}),
                PatchError::Malformed("merging lists cannot yet be specified in the patch".into()),
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "$patch": "frob"}]}}),
                PatchError::Malformed(
                    "unknown patch type: frob in map: map[$patch:frob name:a]".into(),
                ),
            ),
            (
                json!({"metadata": {"$patch": "frob"}}),
                PatchError::Malformed("unknown patch type: frob in map: map[$patch:frob]".into()),
            ),
            (
                json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}),
                PatchError::BadRequest("invalid patch format of primitive list".into()),
            ),
            (
                json!({"spec": {"containers": [["a"]]}}),
                PatchError::Malformed(
                    "list element types are not identical: [[map[image:x name:a]] [[a]]]".into(),
                ),
            ),
        ];
        for (patch, want) in cases {
            assert_eq!(
                strategic_merge_patch(&doc, &patch, &pod()).unwrap_err(),
                want,
                "{patch}"
            );
        }
        let lol = strategic_merge_patch(
            &json!({"metadata": {"finalizers": [["a"]]}}),
            &json!({"metadata": {"finalizers": [["b"]]}}),
            &pod(),
        )
        .unwrap_err();
        assert_eq!(
            lol,
            PatchError::Unprocessable("lists of lists are not supported".into())
        );
        assert_eq!(lol.to_api_error().code, 422);
        assert_eq!(
            strategic_merge_patch(&json!([]), &json!({}), &pod()).unwrap_err(),
            PatchError::BadRequest("invalid JSON document".into())
        );
        let e = PatchError::Malformed("boom".into()).to_api_error();
        assert_eq!(
            (e.code, e.reason.as_str(), e.message.as_str()),
            (400, "BadRequest", "boom")
        );
    }

    #[test]
    fn scalar_dedup_matches_upstream_order() {
        assert_eq!(
            deduplicate_scalars(vec![json!(1), json!(2), json!(1), json!(3)]),
            vec![json!(1), json!(2), json!(3)]
        );
        assert_eq!(
            deduplicate_scalars(vec![json!("a"), json!("a")]),
            vec![json!("a")]
        );
        assert_eq!(deduplicate_scalars(vec![]), Vec::<Value>::new());
        // Upstream swaps the last element into a duplicate's place.
        assert_eq!(
            deduplicate_scalars(vec![json!(1), json!(1), json!(2), json!(3)]),
            vec![json!(1), json!(3), json!(2)]
        );
    }

    /// Upstream's `deduplicateScalars` as written, comparing every pair.
    fn upstream_dedup(mut s: Vec<Value>) -> Vec<Value> {
        if s.is_empty() {
            return s;
        }
        let mut length = s.len() - 1;
        let mut i = 0;
        while i < length {
            let mut j = i + 1;
            while j <= length {
                if s[i] == s[j] {
                    s[j] = s[length].clone();
                    s.truncate(length);
                    length -= 1;
                    continue;
                }
                j += 1;
            }
            i += 1;
        }
        s
    }

    #[test]
    fn scalar_dedup_orders_exactly_as_upstream_on_any_list() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for round in 0..3000 {
            let len = round % 40;
            let alphabet = 1 + round % 7;
            let list: Vec<Value> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let n = seed % alphabet as u64;
                    if n.is_multiple_of(2) {
                        json!(n)
                    } else {
                        json!(format!("v{n}"))
                    }
                })
                .collect();
            assert_eq!(
                deduplicate_scalars(list.clone()),
                upstream_dedup(list.clone()),
                "{list:?}"
            );
        }
    }

    #[test]
    fn long_lists_merge_by_key_and_keep_upstreams_order() {
        let env = |range: std::ops::Range<usize>| -> Vec<Value> {
            range
                .map(|i| json!({"name": format!("E{i}"), "value": format!("{i}")}))
                .collect()
        };
        let doc = pod_with(json!([{"name": "a", "env": env(0..20_000)}]));
        let mut patched_env = env(10_000..30_000);
        patched_env.reverse();
        let patch = json!({"spec": {"containers": [{"name": "a", "env": patched_env.clone()}]}});
        let out = apply(&pod(), doc, patch);
        let merged = out["spec"]["containers"][0]["env"].as_array().unwrap();
        assert_eq!(merged.len(), 30_000);
        // The patch's items in its order, the new ones first (they have no place in
        // the live list), the server-only ones before the patch items the live list had
        // after them.
        let names: Vec<&str> = merged.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(
            [
                names[0],
                names[9_999],
                names[10_000],
                names[19_999],
                names[20_000],
                names[29_999]
            ],
            ["E29999", "E20000", "E0", "E9999", "E19999", "E10000"]
        );
        let finalizers: Vec<Value> = (0..50_000)
            .map(|i| json!(format!("f{}", i % 1000)))
            .collect();
        let out = apply(
            &pod(),
            json!({"metadata": {"finalizers": ["f1"]}}),
            json!({"metadata": {"finalizers": finalizers}}),
        );
        assert_eq!(
            out["metadata"]["finalizers"].as_array().unwrap().len(),
            1000
        );
    }

    /// The shape of upstream's test type `MergeItem` (patch_test.go).
    struct MergeItemSchema;

    impl PatchSchema for MergeItemSchema {
        fn lookup(&self, name: &str) -> FieldPatchMeta {
            let (strategy, merge_key) = match name {
                "mergingList" => (Some(Strategy::Merge), Some("name")),
                "mergingIntList" => (Some(Strategy::Merge), None),
                "mergeItemPtr" => (Some(Strategy::Merge), Some("name")),
                "replacingItem" => (Some(Strategy::Replace), None),
                "retainKeysMap" => (Some(Strategy::RetainKeys), None),
                "retainKeysMergingList" => (Some(Strategy::MergeRetainKeys), Some("name")),
                _ => (None, None),
            };
            FieldPatchMeta {
                strategy,
                merge_key: merge_key.map(str::to_string),
                schema: Some(Box::new(MergeItemSchema)),
            }
        }
        fn name(&self) -> String {
            "mergeItem".into()
        }
    }

    #[test]
    fn upstream_custom_cases() {
        // From customStrategicMergePatchRawTestCases and the retainKeys cases.
        let ok_cases = [
            (
                json!({"mergingList": [{"name": 1}, {"name": 3}]}),
                json!({"$setElementOrder/mergingList": [{"name": 3}, {"name": 2}, {"name": 1}],
                       "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
                json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
            ),
            (
                json!({"mergingIntList": [1, 3]}),
                json!({"$setElementOrder/mergingIntList": [3, 2, 1]}),
                json!({"mergingIntList": [3, 1]}),
            ),
            (
                json!({"mergingIntList": [1, 2]}),
                json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
                json!({"mergingIntList": [1, 2]}),
            ),
            (
                json!({"mergingIntList": null}),
                json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
                json!({"mergingIntList": null}),
            ),
            (
                json!({"foo": ["bar"]}),
                json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
                json!({"foo": ["bar"]}),
            ),
            // retainKeys map can add / change a field when no directive is present.
            (
                json!({"retainKeysMap": {"name": "foo"}}),
                json!({"retainKeysMap": {"value": "bar"}}),
                json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
            ),
            // ... and clears what the directive does not list.
            (
                json!({"retainKeysMap": {"name": "foo", "value": "bar", "other": "x"}}),
                json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "baz"}}),
                json!({"retainKeysMap": {"name": "foo", "value": "baz"}}),
            ),
            // retainKeys inside items of a merging list.
            (
                json!({"retainKeysMergingList": [{"name": "a", "value": "1", "other": "x"}, {"name": "b"}]}),
                json!({"retainKeysMergingList": [{"name": "a", "$retainKeys": ["name", "other"], "other": "y"}]}),
                json!({"retainKeysMergingList": [{"name": "a", "other": "y"}, {"name": "b"}]}),
            ),
            // A replace-strategy map is replaced, a merge pointer merged.
            (
                json!({"replacingItem": {"a": 1, "b": 2}, "mergeItemPtr": {"name": "x", "value": "1"}}),
                json!({"replacingItem": {"c": 3}, "mergeItemPtr": {"other": "o"}}),
                json!({"replacingItem": {"c": 3}, "mergeItemPtr": {"name": "x", "value": "1", "other": "o"}}),
            ),
            // Int lists with merge strategy are sets; without it they are replaced.
            (
                json!({"mergingIntList": [1, 2], "nonMergingIntList": [1, 2]}),
                json!({"mergingIntList": [2, 3], "nonMergingIntList": [3]}),
                json!({"mergingIntList": [1, 2, 3], "nonMergingIntList": [3]}),
            ),
            // Delete an item of a merging list and nested merging lists.
            (
                json!({"mergingList": [{"name": "1", "mergingList": [{"name": "x", "value": "a"}]}, {"name": "2"}]}),
                json!({"mergingList": [{"name": "2", "$patch": "delete"}, {"name": "1", "mergingList": [{"name": "x", "value": "b"}]}]}),
                json!({"mergingList": [{"name": "1", "mergingList": [{"name": "x", "value": "b"}]}]}),
            ),
        ];
        for (original, patch, want) in ok_cases {
            let got = strategic_merge_patch(&original, &patch, &MergeItemSchema)
                .unwrap_or_else(|e| panic!("{patch}: {e}"));
            assert_eq!(got, want, "{original} + {patch}");
        }
        let err_cases = [
            (
                json!({"mergingList": [{"name": 1}, {"name": 3}, {"name": 2}]}),
                json!({"$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
                       "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
                "doesn't match",
            ),
            (
                json!({"mergingIntList": [1, 3, 2]}),
                json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]}),
                "doesn't match",
            ),
            (
                json!({"mergingList": [{"name": 1, "value": "a"}]}),
                json!({"mergingList": [{"value": "b"}]}),
                "does not contain declared merge key",
            ),
            (
                json!({"nonMergingList": [{"name": 1}]}),
                json!({"$deleteFromPrimitiveList/nonMergingList": [{"name": 1}]}),
                "cannot merge lists without merge key for mergeItem",
            ),
        ];
        for (original, patch, want) in err_cases {
            let err = strategic_merge_patch(&original, &patch, &MergeItemSchema).unwrap_err();
            assert!(err.to_string().contains(want), "{patch}: {err}");
        }
    }
}
