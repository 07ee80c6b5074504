//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) <-> JSON
//! (`serde_json::Value`) for every kind the apiserver serves, plus the meta kinds
//! (Status, DeleteOptions, WatchEvent, the List kinds, Scale, Eviction, Binding).
//!
//! The real kubectl and every client-go controller send typed built-in objects as
//! protobuf. Upstream's wire format (k8s.io/apimachinery `serializer/protobuf`):
//!
//! * an object is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message
//!   `{typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2, contentEncoding = 3,
//!   contentType = 4}` whose `raw` is the object's own message ([`decode`],
//!   [`encode`]);
//! * a watch stream (`;stream=watch`) is frames of a 4-byte big-endian length and a
//!   bare `metav1.WatchEvent {type = 1, object = 2 RawExtension {raw = 1}}` (no magic,
//!   no Unknown), whose `object.raw` is an enveloped object ([`encode_watch_frame`],
//!   [`decode_watch_frame`]).
//!
//! Messages are converted generically, guided by `schema.rs`: a table of every message
//! (field number, JSON name, wire kind, repeated / map / inline / Go-pointer) that
//! `hack/gen-protobuf-schema` generates from the k8s-pb crate's prost messages and the
//! upstream Go struct tags. Special types have their JSON forms: `resource.Quantity`
//! (string), `IntOrString`, `metav1.Time` / `MicroTime` (RFC 3339), `FieldsV1` and
//! `RawExtension` (raw JSON), `[]byte` (base64), named slices (`Verbs`) as arrays.
//! go-to-protobuf's conventions: a Go non-pointer scalar is always on the wire, so the
//! decoder leaves its zero out of the JSON when the Go field is `omitempty` (the JSON Go
//! itself would write); a pointer's zero is kept.
//! Unknown fields are skipped; malformed input is an error, never a panic.
//!
//! Layer: pure, used by the apiserver (and possibly the client). No IO; must not
//! depend on storage, registry or apiserver crates.

mod codec;
mod go_json;
#[rustfmt::skip]
mod schema;
mod table;
mod time;
mod transcode;
mod wire;

use serde_json::{Map, Value};

pub use go_json::{add_go_zero_structs, to_go_json_form};
pub use table::message_for;

/// The media type of protobuf request and response bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// The prefix of every enveloped object.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// The `typeMeta` of the `runtime.Unknown` envelope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeMeta {
    pub api_version: String,
    pub kind: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtobufError {
    #[error("provided data does not appear to be a protobuf message, expected prefix k8s\\0")]
    MissingMagic,
    #[error("empty body")]
    Empty,
    #[error("object has no kind or apiVersion in its envelope")]
    MissingKind,
    #[error("no protobuf schema for {api_version}, Kind={kind}")]
    UnknownKind { api_version: String, kind: String },
    #[error("unsupported content encoding {0:?}")]
    ContentEncoding(String),
    #[error("unexpected end of protobuf data")]
    Truncated,
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    #[error("wrong wire type for field {field:?}")]
    WireType { field: String },
    #[error("invalid UTF-8 in string field {field:?}")]
    Utf8 { field: String },
    #[error("objects nest too deeply")]
    TooDeep,
    #[error("{path}: {reason}")]
    Json { path: String, reason: String },
}

/// Decodes an enveloped object: `(typeMeta, JSON)`. The JSON carries `apiVersion` and
/// `kind` from the envelope, as a JSON body would.
pub fn decode(bytes: &[u8]) -> Result<(TypeMeta, Value), ProtobufError> {
    decode_depth(bytes, 0)
}

fn decode_depth(bytes: &[u8], depth: usize) -> Result<(TypeMeta, Value), ProtobufError> {
    let (tm, raw) = decode_envelope(bytes)?;
    if tm.kind.is_empty() || tm.api_version.is_empty() {
        return Err(ProtobufError::MissingKind);
    }
    let index =
        message_for(&tm.api_version, &tm.kind).ok_or_else(|| ProtobufError::UnknownKind {
            api_version: tm.api_version.clone(),
            kind: tm.kind.clone(),
        })?;
    let value = codec::decode_value(index, raw, depth)?.unwrap_or(Value::Null);
    let Value::Object(fields) = value else {
        return Err(ProtobufError::Malformed("top-level kind is not an object"));
    };
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), Value::String(tm.api_version.clone()));
    obj.insert("kind".into(), Value::String(tm.kind.clone()));
    obj.extend(fields);
    Ok((tm, Value::Object(obj)))
}

/// Splits an enveloped object into its type and its message bytes.
pub fn decode_envelope(bytes: &[u8]) -> Result<(TypeMeta, &[u8]), ProtobufError> {
    if bytes.is_empty() {
        return Err(ProtobufError::Empty);
    }
    let Some(body) = bytes.strip_prefix(&MAGIC) else {
        return Err(ProtobufError::MissingMagic);
    };
    if body.is_empty() {
        return Err(ProtobufError::Empty);
    }
    let mut tm = TypeMeta::default();
    let mut raw: &[u8] = &[];
    let mut r = wire::Reader::new(body);
    let string = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| ProtobufError::Utf8 {
                field: "typeMeta".into(),
            })
    };
    while !r.is_empty() {
        match r.key()? {
            (1, wire::LEN) => {
                let mut tr = wire::Reader::new(r.bytes()?);
                while !tr.is_empty() {
                    match tr.key()? {
                        (1, wire::LEN) => tm.api_version = string(tr.bytes()?)?,
                        (2, wire::LEN) => tm.kind = string(tr.bytes()?)?,
                        (_, wt) => tr.skip(wt)?,
                    }
                }
            }
            (2, wire::LEN) => raw = r.bytes()?,
            (3, wire::LEN) => {
                let enc = string(r.bytes()?)?;
                if !enc.is_empty() {
                    return Err(ProtobufError::ContentEncoding(enc));
                }
            }
            (1..=3, _) => {
                return Err(ProtobufError::Malformed(
                    "wrong wire type in runtime.Unknown",
                ));
            }
            (_, wt) => r.skip(wt)?,
        }
    }
    Ok((tm, raw))
}

/// Encodes a JSON object as an enveloped protobuf object of `(api_version, kind)`.
/// `apiVersion` and `kind` inside the JSON are not message fields and are ignored.
pub fn encode(api_version: &str, kind: &str, object: &Value) -> Result<Vec<u8>, ProtobufError> {
    let index = message_index(api_version, kind)?;
    let mut raw = Vec::new();
    codec::encode_value(index, object, &mut raw, &codec::Path::Root(kind), 0)?;
    Ok(envelope(api_version, kind, &raw))
}

/// Encodes a list of `(api_version, list_kind)` (e.g. `v1 PodList`) from its
/// `metadata` and its items, each encoded straight from its own JSON value, so a list
/// is never gathered into one JSON value first.
pub fn encode_list<V: std::borrow::Borrow<Value>>(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: impl IntoIterator<Item = V>,
) -> Result<Vec<u8>, ProtobufError> {
    list(api_version, list_kind, metadata, |tag, index, raw| {
        for (i, item) in items.into_iter().enumerate() {
            put_item(raw, tag, index, i, item.borrow())?;
        }
        Ok(())
    })
}

/// [`encode_list`] from the items' JSON bytes (a cache's serializations), transcoded
/// without a JSON value in between; an item the transcoder cannot take is decoded and
/// encoded as [`encode_list`] does. The bytes are those of `encode_list` but for the
/// order of each message's fields (see `transcode.rs`).
pub fn encode_list_json<'a>(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, ProtobufError> {
    list(api_version, list_kind, metadata, |tag, index, raw| {
        for (i, json) in items.into_iter().enumerate() {
            let mark = raw.len();
            if wire::put_nested(raw, tag, |b| transcode::transcode(index, json, b)).is_ok() {
                continue;
            }
            raw.truncate(mark);
            let item: Value = serde_json::from_slice(json).map_err(|e| ProtobufError::Json {
                path: format!("items[{i}]"),
                reason: e.to_string(),
            })?;
            put_item(raw, tag, index, i, &item)?;
        }
        Ok(())
    })
}

/// Item `i` of a list, from its JSON value.
fn put_item(
    raw: &mut Vec<u8>,
    tag: u32,
    index: u16,
    i: usize,
    item: &Value,
) -> Result<(), ProtobufError> {
    wire::put_nested(raw, tag, |b| {
        let path = codec::Path::Index(&codec::Path::Root("items"), i);
        codec::encode_value(index, item, b, &path, 1)
    })
}

/// A list's envelope and metadata around the items `write_items` writes, given the
/// list message's `items` tag and the item message.
fn list(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    write_items: impl FnOnce(u32, u16, &mut Vec<u8>) -> Result<(), ProtobufError>,
) -> Result<Vec<u8>, ProtobufError> {
    let index = message_index(api_version, list_kind)?;
    let field = |name: &str| {
        table::message(index)
            .fields
            .iter()
            .find(|f| f.json == name)
            .and_then(|f| match f.kind {
                table::Kind::M(m) => Some((f.tag, m)),
                _ => None,
            })
            .ok_or(ProtobufError::UnknownKind {
                api_version: api_version.to_owned(),
                kind: list_kind.to_owned(),
            })
    };
    let (meta_tag, meta_index) = field("metadata")?;
    let (items_tag, item_index) = field("items")?;
    let mut raw = Vec::new();
    wire::put_nested(&mut raw, meta_tag, |b| {
        codec::encode_value(meta_index, metadata, b, &codec::Path::Root("metadata"), 1)
    })?;
    write_items(items_tag, item_index, &mut raw)?;
    Ok(envelope(api_version, list_kind, &raw))
}

fn message_index(api_version: &str, kind: &str) -> Result<u16, ProtobufError> {
    message_for(api_version, kind).ok_or_else(|| ProtobufError::UnknownKind {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    })
}

/// `k8s\0` and the `runtime.Unknown` around a message's bytes.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + api_version.len() + kind.len() + 16);
    out.extend_from_slice(&MAGIC);
    // As Go's generated marshaller: every field of Unknown and TypeMeta is written,
    // the empty contentEncoding and contentType too.
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    wire::put_bytes(&mut type_meta, 1, api_version.as_bytes());
    wire::put_bytes(&mut type_meta, 2, kind.as_bytes());
    wire::put_bytes(&mut out, 1, &type_meta);
    wire::put_bytes(&mut out, 2, raw);
    wire::put_bytes(&mut out, 3, b"");
    wire::put_bytes(&mut out, 4, b"");
    out
}

/// Encodes the JSON of an object, taking `apiVersion` and `kind` from it.
pub fn encode_object(object: &Value) -> Result<Vec<u8>, ProtobufError> {
    let av = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if av.is_empty() || kind.is_empty() {
        return Err(ProtobufError::MissingKind);
    }
    encode(av, kind, object)
}

/// One frame of a protobuf watch stream: the 4-byte big-endian length and a
/// `WatchEvent {type, object: RawExtension {raw: <enveloped object>}}`. The object's
/// `apiVersion` and `kind` are taken from its JSON.
pub fn encode_watch_frame(event_type: &str, object: &Value) -> Result<Vec<u8>, ProtobufError> {
    watch_frame(event_type, &encode_object(object)?)
}

/// [`encode_watch_frame`] from an object's JSON bytes (a cache's serialization) of
/// `(api_version, kind)`, transcoded without a JSON value in between, as
/// [`encode_list_json`] does its items; JSON the transcoder cannot take is decoded and
/// encoded as `encode_watch_frame` does.
pub fn encode_watch_frame_json(
    event_type: &str,
    api_version: &str,
    kind: &str,
    json: &[u8],
) -> Result<Vec<u8>, ProtobufError> {
    let index = message_index(api_version, kind)?;
    let mut raw = Vec::with_capacity(json.len() / 2);
    let inner = match transcode::transcode(index, json, &mut raw) {
        Ok(()) => envelope(api_version, kind, &raw),
        Err(_) => {
            let object: Value = serde_json::from_slice(json).map_err(|e| ProtobufError::Json {
                path: kind.to_owned(),
                reason: e.to_string(),
            })?;
            encode(api_version, kind, &object)?
        }
    };
    watch_frame(event_type, &inner)
}

/// A watch frame around an enveloped object.
fn watch_frame(event_type: &str, inner: &[u8]) -> Result<Vec<u8>, ProtobufError> {
    let mut event = Vec::with_capacity(inner.len() + 16);
    wire::put_bytes(&mut event, 1, event_type.as_bytes());
    wire::put_nested::<ProtobufError>(&mut event, 2, |raw| {
        wire::put_bytes(raw, 1, inner);
        Ok(())
    })?;
    let len =
        u32::try_from(event.len()).map_err(|_| ProtobufError::Malformed("frame too large"))?;
    let mut out = Vec::with_capacity(event.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&event);
    Ok(out)
}

/// Decodes the first frame of a protobuf watch stream: `(event type, object JSON,
/// bytes consumed)`; `None` when `bytes` does not hold a whole frame yet.
pub fn decode_watch_frame(bytes: &[u8]) -> Result<Option<(String, Value, usize)>, ProtobufError> {
    let Some(len) = bytes.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let Some(event) = bytes.get(4..4 + len) else {
        return Ok(None);
    };
    let mut r = wire::Reader::new(event);
    let (mut event_type, mut object) = (String::new(), Value::Null);
    while !r.is_empty() {
        match r.key()? {
            (1, wire::LEN) => {
                event_type = std::str::from_utf8(r.bytes()?)
                    .map_err(|_| ProtobufError::Utf8 {
                        field: "type".into(),
                    })?
                    .to_owned();
            }
            (2, wire::LEN) => {
                let mut rr = wire::Reader::new(r.bytes()?);
                while !rr.is_empty() {
                    match rr.key()? {
                        (1, wire::LEN) => object = decode(rr.bytes()?)?.1,
                        (_, wt) => rr.skip(wt)?,
                    }
                }
            }
            (1 | 2, _) => return Err(ProtobufError::Malformed("wrong wire type in WatchEvent")),
            (_, wt) => r.skip(wt)?,
        }
    }
    Ok(Some((event_type, object, 4 + len)))
}

#[cfg(test)]
mod tests;
