//! Helpers on objects as `serde_json::Value`: metadata access, time, names.

use serde_json::{Map, Value};

/// `metadata` of an object (created empty when missing).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("object");
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("metadata object")
}

/// Drops the `metadata` maps and lists that are empty: upstream's `ObjectMeta` has
/// them `omitempty`, so Go's encoding leaves them out and an empty one (e.g. the
/// `"annotations": {}` of `kubectl diff`'s patch) is neither stored nor served.
pub fn omit_empty_metadata(obj: &mut Value) {
    let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    m.retain(|field, value| match field.as_str() {
        "labels" | "annotations" => !value.as_object().is_some_and(Map::is_empty),
        "finalizers" | "ownerReferences" | "managedFields" => {
            !value.as_array().is_some_and(Vec::is_empty)
        }
        _ => true,
    });
}

/// Sets each of `keys` in `to`'s annotations to its value in `from`'s, or removes it
/// where `from` has none.
pub fn copy_annotations(to: &mut Value, from: &Value, keys: &[&str]) {
    if keys.is_empty() {
        return;
    }
    let source = from["metadata"]["annotations"].as_object();
    let m = meta_mut(to);
    let target = m
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(target) = target.as_object_mut() else {
        return;
    };
    for key in keys {
        match source.and_then(|a| a.get(*key)) {
            Some(v) => target.insert((*key).to_string(), v.clone()),
            None => target.remove(*key),
        };
    }
    if target.is_empty() {
        m.remove("annotations");
    }
}

/// Removes each of `keys` from `obj`'s annotations.
pub fn remove_annotations(obj: &mut Value, keys: &[&str]) {
    copy_annotations(obj, &Value::Null, keys);
}

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)?.get(field)?.as_str()
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or("")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

pub fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if value.is_null() {
        meta_mut(obj).remove(field);
    } else {
        meta_mut(obj).insert(field.to_string(), value);
    }
}

/// Sets `<parent>.<member>` (the parent object made if missing), or removes the member
/// when `value` is null: the one part of an object a subresource or hook owns
/// (`spec.finalizers`, `status.conditions`, `spec.ephemeralContainers`).
pub fn set_member(obj: &mut Value, parent: &str, member: &str, value: Value) {
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    let Some(p) = o
        .entry(parent)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
    else {
        return;
    };
    if value.is_null() {
        p.remove(member);
    } else {
        p.insert(member.to_string(), value);
    }
}

pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn has_deletion_timestamp(obj: &Value) -> bool {
    meta(obj)
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// The value at a dotted path (`spec.nodeName`), as a string for field selectors:
/// strings as they are, booleans and numbers printed, missing as `""`.
pub fn field_string(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// The clock, passed around so tests can fix it.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> jiff::Timestamp;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

/// RFC 3339 with second precision, as `metav1.Time` serializes.
pub fn format_time(t: jiff::Timestamp) -> String {
    // Every write stamps a time; the civil fields written directly cost a fraction
    // of `strftime`, which interprets its format string on each call.
    let dt = jiff::tz::Offset::UTC.to_datetime(t);
    let Ok(year) = u16::try_from(dt.year()) else {
        return format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second()
        );
    };
    // Digits pushed directly: `format!` costs more than the rest of this on the create path.
    let mut out = String::with_capacity(20);
    let mut push = |n: u16, width: u32, sep: char| {
        for place in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10u16.pow(place) % 10) as u8));
        }
        out.push(sep);
    };
    push(year, 4, '-');
    push(dt.month() as u16, 2, '-');
    push(dt.day() as u16, 2, 'T');
    push(dt.hour() as u16, 2, ':');
    push(dt.minute() as u16, 2, ':');
    push(dt.second() as u16, 2, 'Z');
    out
}

/// Five characters from upstream's alphabet for `generateName` suffixes.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_omitempty_metadata_is_dropped_and_the_rest_kept() {
        let mut obj = serde_json::json!({"metadata": {
            "name": "a", "labels": {}, "annotations": {"k": "v"}, "finalizers": [],
            "ownerReferences": [], "managedFields": [], "generateName": ""
        }, "data": {}});
        super::omit_empty_metadata(&mut obj);
        assert_eq!(
            obj,
            serde_json::json!({"metadata": {"name": "a", "annotations": {"k": "v"}, "generateName": ""}, "data": {}})
        );
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_rfc3339_seconds_in_utc() {
        for text in [
            "2026-01-02T03:04:05Z",
            "0987-12-31T23:59:59Z",
            "1970-01-01T00:00:00Z",
        ] {
            let t: jiff::Timestamp = text.parse().unwrap();
            assert_eq!(format_time(t), text);
        }
        let fraction: jiff::Timestamp = "2026-11-28T10:20:30.999Z".parse().unwrap();
        assert_eq!(format_time(fraction), "2026-11-28T10:20:30Z");
    }

    #[test]
    fn field_strings() {
        let v =
            json!({"spec": {"nodeName": "n1", "unschedulable": true}, "status": {"replicas": 3}});
        assert_eq!(field_string(&v, "spec.nodeName"), "n1");
        assert_eq!(field_string(&v, "spec.unschedulable"), "true");
        assert_eq!(field_string(&v, "status.replicas"), "3");
        assert_eq!(field_string(&v, "status.phase"), "");
    }

    #[test]
    fn time_format() {
        let t = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        assert_eq!(format_time(t), "2023-11-14T22:13:20Z");
        // Sub-second time is truncated, never rounded up into the next second.
        let late = jiff::Timestamp::new(1_700_000_000, 999_999_999).unwrap();
        assert_eq!(format_time(late), "2023-11-14T22:13:20Z");
        let early = jiff::Timestamp::from_second(-1).unwrap();
        assert_eq!(format_time(early), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn suffix_shape() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    #[test]
    fn meta_access() {
        let mut v = json!({});
        set_meta(&mut v, "name", json!("a"));
        assert_eq!(name(&v), "a");
        set_meta(&mut v, "name", Value::Null);
        assert_eq!(name(&v), "");
        assert!(!has_deletion_timestamp(&v));
    }
}
