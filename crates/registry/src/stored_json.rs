//! A stored object's JSON with its `metadata.resourceVersion` set, made from the stored
//! bytes without decoding them into a tree.
//!
//! Storage keeps objects without a resourceVersion (the store's revision is the
//! resourceVersion). Whatever serves a stored object needs it with one. Decoding into a
//! `serde_json::Value` and serializing again costs a tree of allocations per object and
//! about six times the object's size in memory while it is held; the watch cache does it
//! for every write. Here only the top level and `metadata` are split into raw members
//! (borrowed slices of the input) and written back with the new field, in the place a
//! `Value` (sorted keys) would put it; every other member is copied as it is. For what
//! a `Value` serializes to (compact, sorted keys), which is what this apiserver stores,
//! even that split stops at `metadata`: the members after it are copied unread, which
//! makes this a few times cheaper on the watch cache's path.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use ferrokube_storage::Revision;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// `value` (a JSON object) with `metadata.resourceVersion` = `revision` as a string;
/// `None` when `value` is not a JSON object or its metadata is not one. The members
/// after `metadata` in compact sorted JSON are not read, so their validity is the
/// writer's (the apiserver's own serializer); any other input is parsed whole.
pub fn with_resource_version(value: &[u8], revision: Revision) -> Option<Bytes> {
    sorted_with_resource_version(value, revision)
        .or_else(|| parsed_with_resource_version(value, revision))
}

/// [`with_resource_version`] for any JSON: the top level and metadata parsed into raw
/// members (validating the whole input), written back with the field set.
fn parsed_with_resource_version(value: &[u8], revision: Revision) -> Option<Bytes> {
    let top: Members<'_> = serde_json::from_slice(value).ok()?;
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(revision);
    let mut out = Vec::with_capacity(value.len() + digits.len() + 40);
    // Metadata is added (where it sorts) only when there is none; members of other
    // writers may come in any order.
    let mut wrote_metadata = false;
    let has_metadata = top.0.iter().any(|(key, _)| key == "metadata");
    let mut first = true;
    let mut separate = |out: &mut Vec<u8>| {
        if !first {
            out.push(b',');
        }
        first = false;
    };
    out.push(b'{');
    for (key, raw) in &top.0 {
        if key == "metadata" {
            // A second "metadata" member is dropped; none of our writers makes one.
            if !wrote_metadata {
                separate(&mut out);
                write_metadata(&mut out, raw.get().as_bytes(), digits)?;
                wrote_metadata = true;
            }
            continue;
        }
        if !has_metadata && !wrote_metadata && key.as_ref() > "metadata" {
            separate(&mut out);
            write_metadata(&mut out, b"{}", digits)?;
            wrote_metadata = true;
        }
        separate(&mut out);
        write_key(&mut out, key);
        out.extend_from_slice(raw.get().as_bytes());
    }
    if !wrote_metadata {
        separate(&mut out);
        write_metadata(&mut out, b"{}", digits)?;
    }
    out.push(b'}');
    Some(Bytes::from(out))
}

/// Index just past the string that opens at `at` (a `"`).
fn skip_string(b: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i] == b'"' {
            return Some(i + 1);
        }
        i += 2;
    }
}

/// Index just past the value that starts at `at`: strings and containers by their
/// structure (brackets balanced, strings closed), scalars up to the next delimiter.
fn skip_value(b: &[u8], at: usize) -> Option<usize> {
    match *b.get(at)? {
        b'"' => skip_string(b, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = b[at..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace())
                .unwrap_or(b.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

/// One member of a compact object at `at` (just past `{` or `,`): the key's
/// unquoted bytes (only keys without escapes), the value's range, and the index just
/// past the value.
fn member(b: &[u8], at: usize) -> Option<(&[u8], usize, usize)> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let key_end = skip_string(b, at)?;
    let key = &b[at + 1..key_end - 1];
    if key.contains(&b'\\') || b.get(key_end) != Some(&b':') {
        return None;
    }
    let end = skip_value(b, key_end + 1)?;
    Some((key, key_end + 1, end))
}

/// The fast path of [`with_resource_version`], for the compact, key-sorted JSON a
/// `Value` serializes to (what this apiserver stores): the top level is read member by
/// member only up to `metadata`, metadata is rewritten, and everything after it is
/// copied unread when its first key sorts after `metadata`. Anything else (spacing,
/// escaped keys, other orders, no metadata) is `None`, for the full parse to decide.
fn sorted_with_resource_version(value: &[u8], revision: Revision) -> Option<Bytes> {
    if value.first() != Some(&b'{') || value.last() != Some(&b'}') {
        return None;
    }
    // Top level: find the metadata member.
    let mut at = 1;
    if value.get(at) == Some(&b'}') {
        return None;
    }
    let (m_start, m_end) = loop {
        let (key, start, end) = member(value, at)?;
        if key == b"metadata" {
            match value.get(end)? {
                b'}' if end + 1 == value.len() => break (start, end),
                b',' => {
                    let next = value.get(end + 1..)?;
                    let key_end = memchr::memchr(b'"', next.get(1..)?)? + 1;
                    if next[0] != b'"' || next[1..key_end] <= b"metadata"[..] {
                        return None;
                    }
                    break (start, end);
                }
                _ => return None,
            }
        }
        match value.get(end)? {
            b',' => at = end + 1,
            _ => return None,
        }
    };
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(revision);
    let meta = &value[m_start..m_end];
    let mut out = Vec::with_capacity(value.len() + digits.len() + 24);
    out.extend_from_slice(&value[..m_start]);
    write_metadata_members(&mut out, compact_members(meta)?, digits);
    out.extend_from_slice(&value[m_end..]);
    Some(Bytes::from(out))
}

/// The members of a compact metadata object with unescaped keys, read in place; `None`
/// for any other shape.
fn compact_members(meta: &[u8]) -> Option<Vec<(&[u8], MetaMember<'_>)>> {
    let mut members = Vec::with_capacity(8);
    if meta == b"{}" {
        return Some(members);
    }
    if meta.first() != Some(&b'{') {
        return None;
    }
    let mut at = 1;
    loop {
        let (key, _, end) = member(meta, at)?;
        members.push((key, MetaMember::Raw(&meta[at..end])));
        match meta.get(end)? {
            b',' => at = end + 1,
            b'}' if end + 1 == meta.len() => return Some(members),
            _ => return None,
        }
    }
}

/// `"metadata":{...}` from the raw metadata object with `resourceVersion` replaced.
fn write_metadata(out: &mut Vec<u8>, metadata: &[u8], digits: &str) -> Option<()> {
    let fields: Members<'_> = serde_json::from_slice(metadata).ok()?;
    write_key(out, "metadata");
    let members = fields.0.iter().map(|(key, raw)| {
        (
            key.as_bytes(),
            MetaMember::Parsed(key, raw.get().as_bytes()),
        )
    });
    write_metadata_members(out, members, digits);
    Some(())
}

/// A metadata member as it is written back.
enum MetaMember<'a> {
    /// `"key":value`, copied as it is.
    Raw(&'a [u8]),
    /// A key (written escaped) and its raw value.
    Parsed(&'a str, &'a [u8]),
    /// `"resourceVersion":"<digits>"`, the one written in.
    ResourceVersion,
}

/// A metadata object from its members (each with its unescaped key), without any
/// `resourceVersion` among them and with `"resourceVersion":"<digits>"` where a
/// `Value`'s sorted keys put it. Both paths write metadata here.
fn write_metadata_members<'a>(
    out: &mut Vec<u8>,
    members: impl IntoIterator<Item = (&'a [u8], MetaMember<'a>)>,
    digits: &str,
) {
    let mut first = true;
    let mut put = |out: &mut Vec<u8>, member: MetaMember<'_>| {
        if !first {
            out.push(b',');
        }
        first = false;
        match member {
            MetaMember::Raw(raw) => out.extend_from_slice(raw),
            MetaMember::Parsed(key, value) => {
                write_key(out, key);
                out.extend_from_slice(value);
            }
            MetaMember::ResourceVersion => {
                out.extend_from_slice(b"\"resourceVersion\":\"");
                out.extend_from_slice(digits.as_bytes());
                out.push(b'"');
            }
        }
    };
    out.push(b'{');
    let mut wrote_rv = false;
    for (key, member) in members {
        if key == b"resourceVersion" {
            continue;
        }
        if !wrote_rv && key > &b"resourceVersion"[..] {
            put(out, MetaMember::ResourceVersion);
            wrote_rv = true;
        }
        put(out, member);
    }
    if !wrote_rv {
        put(out, MetaMember::ResourceVersion);
    }
    out.push(b'}');
}

/// A new object serialized once for both forms a create needs: the stored one, without
/// `metadata.resourceVersion`, and the answer, with the revision the store gave it.
/// Serializing twice was a tenth of what a create cost the apiserver beyond storage.
/// The object is written with a placeholder resourceVersion, which a `Value` puts where
/// its sorted keys put the real one; the stored form cuts that member out, the answer
/// fills in the revision. Both are byte for byte what serializing the object without,
/// and then with, its resourceVersion gives.
pub struct RevisionSlot {
    json: String,
    /// The placeholder member with the comma that separates it from a neighbour.
    member: std::ops::Range<usize>,
    /// The placeholder value, quotes included.
    value: std::ops::Range<usize>,
}

const RV_MEMBER_KEY: &str = "\"resourceVersion\":";

impl RevisionSlot {
    /// `None` (serialize twice instead) when the object has no metadata object or
    /// already has a resourceVersion.
    pub fn encode(obj: &mut serde_json::Value) -> Option<RevisionSlot> {
        // Random per process, so no string in an object can be taken for the slot; the
        // member as serialized (the needle) is made once, not on every create.
        static PLACEHOLDER: std::sync::OnceLock<(String, memchr::memmem::Finder<'static>)> =
            std::sync::OnceLock::new();
        let (placeholder, needle) = PLACEHOLDER.get_or_init(|| {
            let placeholder = format!("ferrokube-rv-slot-{}", uuid::Uuid::new_v4());
            let needle = format!("{RV_MEMBER_KEY}\"{placeholder}\"");
            (
                placeholder,
                memchr::memmem::Finder::new(needle.as_bytes()).into_owned(),
            )
        });
        let metadata = obj.get_mut("metadata")?.as_object_mut()?;
        if metadata.contains_key("resourceVersion") {
            return None;
        }
        metadata.insert(
            "resourceVersion".to_string(),
            serde_json::Value::String(placeholder.clone()),
        );
        let json = serde_json::to_string(obj);
        if let Some(m) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("resourceVersion");
        }
        let json = json.ok()?;
        let start = needle.find(json.as_bytes())?;
        let end = start + needle.needle().len();
        if needle.find(&json.as_bytes()[end..]).is_some() {
            return None;
        }
        let bytes = json.as_bytes();
        let member = if start > 0 && bytes[start - 1] == b',' {
            start - 1..end
        } else if bytes.get(end) == Some(&b',') {
            start..end + 1
        } else {
            start..end
        };
        Some(RevisionSlot {
            member,
            value: start + RV_MEMBER_KEY.len()..end,
            json,
        })
    }

    /// The stored form: the object without its resourceVersion.
    pub fn stored(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.json.len() - self.member.len());
        out.extend_from_slice(&self.json.as_bytes()[..self.member.start]);
        out.extend_from_slice(&self.json.as_bytes()[self.member.end..]);
        Bytes::from(out)
    }

    /// The answer: the object with `revision` as its resourceVersion.
    pub fn with_revision(&self, revision: Revision) -> Bytes {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(revision);
        let mut out = Vec::with_capacity(self.json.len() + digits.len());
        out.extend_from_slice(&self.json.as_bytes()[..self.value.start]);
        out.push(b'"');
        out.extend_from_slice(digits.as_bytes());
        out.push(b'"');
        out.extend_from_slice(&self.json.as_bytes()[self.value.end..]);
        Bytes::from(out)
    }
}

fn write_key(out: &mut Vec<u8>, key: &str) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
}

/// The members of a JSON object in their order, keys borrowed where they have no
/// escapes, values as raw slices of the input.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

/// A member name, borrowed from the input when it needs no unescaping.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Key(k), v)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push((k, v));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// What decoding, setting the field and serializing gives (the reference).
    fn through_value(v: &Value, revision: Revision) -> Vec<u8> {
        let mut v = v.clone();
        v.as_object_mut()
            .unwrap()
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .unwrap()
            .insert("resourceVersion".into(), json!(revision.to_string()));
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn matches_decoding_and_serializing_byte_for_byte() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "a", "namespace": "default", "uid": "u",
                                "labels": {"app": "x\"y"}},
                   "spec": {"containers": [{"name": "c", "image": "nginx"}],
                            "template": {"metadata": {"name": "nested"}}},
                   "status": {"phase": "Pending"}}),
            // Fields sorting before and after resourceVersion, and only one of them.
            json!({"metadata": {"annotations": {"a": "b"}, "selfLink": "s"}}),
            json!({"metadata": {"uid": "u"}}),
            json!({"metadata": {"annotations": {}}}),
            json!({"metadata": {}}),
            // No metadata at all: it is added where it sorts.
            json!({"apiVersion": "v1", "kind": "X"}),
            json!({"spec": {}}),
            json!({}),
            // Keys and values that need escapes.
            json!({"a\"b": "\u{1}\n", "metadata": {"name": "é\\"}, "z": [1, 2.5, null]}),
        ];
        for obj in objects {
            let stored = serde_json::to_vec(&obj).unwrap();
            let got = with_resource_version(&stored, 42).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&through_value(&obj, 42)),
                "for {obj}"
            );
        }
    }

    #[test]
    fn a_revision_slot_gives_both_serializations_byte_for_byte() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "a", "namespace": "default", "uid": "u",
                                "creationTimestamp": "2026-01-01T00:00:00Z",
                                "labels": {"app": "x\"y"}},
                   "spec": {"containers": [{"name": "c", "image": "nginx"}],
                            "template": {"metadata": {"name": "nested",
                                                      "resourceVersion": "5"}}},
                   "status": {"phase": "Pending"}}),
            // resourceVersion the first, the last and the only member of metadata.
            json!({"metadata": {"uid": "u"}}),
            json!({"metadata": {"annotations": {"a": "b"}}}),
            json!({"metadata": {}}),
            // A string that looks like the member, in a field before it.
            json!({"metadata": {"annotations": {"resourceVersion": "x"},
                                "name": "\"resourceVersion\":\"y\""}}),
            json!({"a\"b": "\u{1}\n", "metadata": {"name": "é\\"}, "z": [1, 2.5, null]}),
        ];
        for obj in objects {
            let mut written = obj.clone();
            let slot = RevisionSlot::encode(&mut written).unwrap();
            assert_eq!(written, obj, "the object is left as it was");
            assert_eq!(
                String::from_utf8_lossy(&slot.stored()),
                serde_json::to_string(&obj).unwrap(),
                "stored form of {obj}"
            );
            assert_eq!(
                String::from_utf8_lossy(&slot.with_revision(1234567)),
                String::from_utf8_lossy(&through_value(&obj, 1234567)),
                "answer for {obj}"
            );
        }
    }

    #[test]
    fn no_revision_slot_without_metadata_or_with_a_resource_version() {
        for obj in [
            json!({"kind": "X"}),
            json!({"metadata": "not an object"}),
            json!({"metadata": {"name": "a", "resourceVersion": "3"}}),
        ] {
            let mut written = obj.clone();
            assert!(RevisionSlot::encode(&mut written).is_none(), "for {obj}");
            assert_eq!(written, obj);
        }
    }

    #[test]
    fn a_values_serialization_takes_the_unparsed_path_with_the_same_result() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "a", "namespace": "default", "uid": "u",
                                "annotations": {"resourceVersion": "x",
                                                "k": "\"resourceVersion\":\"y\"\\"},
                                "labels": {"app": "x\"y"}},
                   "spec": {"containers": [{"name": "c", "image": "nginx"}],
                            "template": {"metadata": {"name": "nested",
                                                      "resourceVersion": "1"}},
                            "x": [1, -2.5e3, true, false, null, {}, [[]]]},
                   "status": {"phase": "Pending"}}),
            json!({"metadata": {"annotations": {"a": "b"}, "selfLink": "s"}}),
            json!({"metadata": {"resourceVersion": "5"}}),
            json!({"metadata": {"name": "x", "resourceVersion": "5"}}),
            json!({"metadata": {"resourceVersion": "5", "uid": "x"}}),
            json!({"metadata": {"name": "\"metadata\":{}"}, "spec": {"metadata": 1}}),
            json!({"metadata": {}}),
        ];
        for obj in objects {
            let stored = serde_json::to_vec(&obj).unwrap();
            let fast = sorted_with_resource_version(&stored, 77).expect("the unparsed path");
            assert_eq!(
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&parsed_with_resource_version(&stored, 77).unwrap()),
                "for {obj}"
            );
        }
        // What the unparsed path leaves to the full parse: no metadata, escaped keys,
        // spacing, members after metadata that sort before it, a second metadata.
        for other in [
            &br#"{"kind":"X"}"#[..],
            br#"{}"#,
            br#"{"a\"b":1,"metadata":{}}"#,
            br#"{"metadata":{"a\"b":1}}"#,
            br#"{"kind": "X", "metadata": {}}"#,
            br#"{"metadata":{},"kind":"X"}"#,
            br#"{"metadata":{},"metadata":{}}"#,
            br#"{"metadata":{"a":1,}}"#,
            br#"{"metadata":5}"#,
        ] {
            assert!(
                sorted_with_resource_version(other, 1).is_none(),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[test]
    fn replaces_a_resource_version_already_there() {
        let got = with_resource_version(br#"{"metadata":{"name":"a","resourceVersion":"7"}}"#, 9)
            .unwrap();
        assert_eq!(
            &got[..],
            br#"{"metadata":{"name":"a","resourceVersion":"9"}}"#
        );
    }

    #[test]
    fn keeps_member_order_and_spacing_of_other_writers() {
        let got = with_resource_version(br#"{"kind": "X", "metadata": {"name": "a"}}"#, 3).unwrap();
        let v: Value = serde_json::from_slice(&got).unwrap();
        assert_eq!(
            v,
            json!({"kind": "X", "metadata": {"name": "a", "resourceVersion": "3"}})
        );
        // Metadata after members that sort behind it.
        let got = with_resource_version(br#"{"spec":{"a":1},"metadata":{"uid":"u"}}"#, 4).unwrap();
        assert_eq!(
            &got[..],
            br#"{"spec":{"a":1},"metadata":{"resourceVersion":"4","uid":"u"}}"#
        );
    }

    #[test]
    fn rejects_what_is_not_an_object_with_object_metadata() {
        for bad in [
            &b"not json"[..],
            b"[1,2]",
            b"\"s\"",
            b"{\"metadata\":5}",
            b"{\"metadata\":{\"name\":}}",
            b"{\"spec\":{\"a\":[1,}}",
            b"{\"a\":1} trailing",
        ] {
            assert!(
                with_resource_version(bad, 1).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
