//! The generic codec: protobuf wire <-> JSON, guided by the field table.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Number, Value};

use crate::ProtobufError;
use crate::table::{Field, Kind, Special, message, special};
use crate::wire::{self, Reader};

/// Nesting limit of messages (Kubernetes objects nest a dozen levels; this bounds
/// the recursion on hostile input).
pub(crate) const MAX_DEPTH: usize = 100;

// ---------------------------------------------------------------------------------
// Decoding

/// Decodes a message into its JSON value (an object, or the JSON form of a special
/// type); `None` when the value is the zero value Go's JSON leaves out (a zero Time).
pub fn decode_value(index: u16, buf: &[u8], depth: usize) -> Result<Option<Value>, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    if let Some(sp) = special(index) {
        return decode_special(sp, buf, depth);
    }
    let msg = message(index);
    let mut out = Map::new();
    decode_fields(index, buf, &mut out, depth)?;
    if msg.array {
        return Ok(Some(
            out.remove("items").unwrap_or(Value::Array(Vec::new())),
        ));
    }
    Ok(Some(Value::Object(out)))
}

fn decode_fields(
    index: u16,
    buf: &[u8],
    out: &mut Map<String, Value>,
    depth: usize,
) -> Result<(), ProtobufError> {
    let msg = message(index);
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match msg.field(tag) {
            None => r.skip(wt)?,
            Some(field) => decode_field(field, wt, &mut r, out, depth)?,
        }
    }
    Ok(())
}

fn wrong_type(field: &Field) -> ProtobufError {
    ProtobufError::WireType {
        field: field.json.to_owned(),
    }
}

fn scalar(kind: Kind, wt: u8, r: &mut Reader<'_>, field: &Field) -> Result<Value, ProtobufError> {
    Ok(match (kind, wt) {
        (Kind::S, wire::LEN) => Value::String(
            std::str::from_utf8(r.bytes()?)
                .map_err(|_| ProtobufError::Utf8 {
                    field: field.json.to_owned(),
                })?
                .to_owned(),
        ),
        (Kind::B, wire::LEN) => Value::String(BASE64.encode(r.bytes()?)),
        (Kind::Bool, wire::VARINT) => Value::Bool(r.varint()? != 0),
        // int32 is sign-extended to 64 bits on the wire; keep the low 32.
        (Kind::I32, wire::VARINT) => Value::from(r.varint()? as i32),
        (Kind::I64, wire::VARINT) => Value::from(r.varint()? as i64),
        (Kind::F64, wire::I64) => {
            let f = f64::from_bits(r.fixed64()?);
            Value::Number(Number::from_f64(f).ok_or(ProtobufError::Malformed("non-finite double"))?)
        }
        _ => return Err(wrong_type(field)),
    })
}

pub(crate) fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn decode_field(
    field: &Field,
    wt: u8,
    r: &mut Reader<'_>,
    out: &mut Map<String, Value>,
    depth: usize,
) -> Result<(), ProtobufError> {
    match field.kind {
        Kind::M(index) => {
            if wt != wire::LEN {
                return Err(wrong_type(field));
            }
            let body = r.bytes()?;
            if field.inline() {
                return decode_fields(index, body, out, depth + 1);
            }
            let value = decode_value(index, body, depth + 1)?;
            if field.repeated() {
                push(out, field.json, value.unwrap_or(Value::Null));
            } else {
                match value {
                    // A message field seen twice merges (protobuf semantics).
                    Some(Value::Object(new)) => match out.get_mut(field.json) {
                        Some(Value::Object(old)) => old.extend(new),
                        _ => {
                            out.insert(field.json.to_owned(), Value::Object(new));
                        }
                    },
                    Some(v) => {
                        out.insert(field.json.to_owned(), v);
                    }
                    None => {
                        out.remove(field.json);
                    }
                }
            }
        }
        Kind::MapS | Kind::MapB | Kind::MapM(_) => {
            if wt != wire::LEN {
                return Err(wrong_type(field));
            }
            let (key, value) = decode_entry(field, r.bytes()?, depth)?;
            let map = out
                .entry(field.json.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key, value);
            }
        }
        kind if field.repeated() => {
            // Numbers and bools may come packed (one LEN of varints) or one per key.
            if wt == wire::LEN && matches!(kind, Kind::Bool | Kind::I32 | Kind::I64 | Kind::F64) {
                let body = r.bytes()?;
                let mut pr = Reader::new(body);
                let wt = if kind == Kind::F64 {
                    wire::I64
                } else {
                    wire::VARINT
                };
                while !pr.is_empty() {
                    let v = scalar(kind, wt, &mut pr, field)?;
                    push(out, field.json, v);
                }
            } else {
                let v = scalar(kind, wt, r, field)?;
                push(out, field.json, v);
            }
        }
        kind => {
            let v = scalar(kind, wt, r, field)?;
            if field.omitempty() && is_zero(&v) {
                // A Go non-pointer omitempty scalar: Go's JSON leaves the zero out.
                out.remove(field.json);
            } else {
                out.insert(field.json.to_owned(), v);
            }
        }
    }
    Ok(())
}

fn push(out: &mut Map<String, Value>, key: &str, v: Value) {
    match out
        .entry(key.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        Value::Array(a) => a.push(v),
        other => *other = Value::Array(vec![v]),
    }
}

/// A map entry message `{key = 1, value = 2}`.
fn decode_entry(field: &Field, buf: &[u8], depth: usize) -> Result<(String, Value), ProtobufError> {
    let mut r = Reader::new(buf);
    let mut key = String::new();
    let mut value = None;
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match (tag, wt) {
            (1, wire::LEN) => {
                key = std::str::from_utf8(r.bytes()?)
                    .map_err(|_| ProtobufError::Utf8 {
                        field: field.json.to_owned(),
                    })?
                    .to_owned();
            }
            (2, wire::LEN) => {
                value = Some(match field.kind {
                    Kind::MapS => scalar(Kind::S, wt, &mut r, field)?,
                    Kind::MapB => scalar(Kind::B, wt, &mut r, field)?,
                    Kind::MapM(index) => {
                        decode_value(index, r.bytes()?, depth + 1)?.unwrap_or(Value::Null)
                    }
                    _ => return Err(wrong_type(field)),
                });
            }
            (1 | 2, _) => return Err(wrong_type(field)),
            (_, wt) => r.skip(wt)?,
        }
    }
    let value = match (value, field.kind) {
        (Some(v), _) => v,
        (None, Kind::MapM(index)) => decode_value(index, &[], depth + 1)?.unwrap_or(Value::Null),
        (None, _) => Value::String(String::new()),
    };
    Ok((key, value))
}

fn decode_special(sp: Special, buf: &[u8], depth: usize) -> Result<Option<Value>, ProtobufError> {
    let mut r = Reader::new(buf);
    let (mut int, mut int2, mut s, mut raw): (i64, i64, Option<&[u8]>, Option<&[u8]>) =
        (0, 0, None, None);
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        match (sp, tag, wt) {
            (Special::Quantity, 1, wire::LEN) | (Special::IntOrString, 3, wire::LEN) => {
                s = Some(r.bytes()?)
            }
            (Special::IntOrString | Special::Time | Special::MicroTime, 1, wire::VARINT) => {
                int = r.varint()? as i64;
            }
            (Special::IntOrString | Special::Time | Special::MicroTime, 2, wire::VARINT) => {
                int2 = i64::from(r.varint()? as i32);
            }
            (Special::FieldsV1 | Special::RawExtension, 1, wire::LEN) => raw = Some(r.bytes()?),
            (Special::Quantity | Special::FieldsV1 | Special::RawExtension, 1, _)
            | (Special::IntOrString | Special::Time | Special::MicroTime, 1 | 2, _)
            | (Special::IntOrString, 3, _) => {
                return Err(ProtobufError::Malformed(
                    "wrong wire type in a well-known type",
                ));
            }
            (_, _, wt) => r.skip(wt)?,
        }
    }
    let utf8 = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| ProtobufError::Utf8 {
                field: format!("{sp:?}"),
            })
    };
    Ok(match sp {
        Special::Quantity => Some(Value::String(match s {
            Some(b) => utf8(b)?,
            None => "0".to_owned(),
        })),
        Special::IntOrString => Some(if int == 1 {
            Value::String(s.map(utf8).transpose()?.unwrap_or_default())
        } else {
            Value::from(int2)
        }),
        Special::Time | Special::MicroTime => {
            if int == 0 && int2 == 0 {
                None
            } else {
                if !(0..1_000_000_000).contains(&int2) {
                    return Err(ProtobufError::Malformed("timestamp nanos out of range"));
                }
                let micros = (sp == Special::MicroTime).then_some((int2 / 1000) as u32);
                Some(Value::String(
                    crate::time::format(int, micros)
                        .ok_or(ProtobufError::Malformed("timestamp out of range"))?,
                ))
            }
        }
        Special::FieldsV1 | Special::RawExtension => match raw {
            None | Some([]) => None,
            Some(raw) if raw.starts_with(&crate::MAGIC) => {
                let (_, v) = crate::decode_depth(raw, depth + 1)?;
                Some(v)
            }
            Some(raw) => Some(
                serde_json::from_slice(raw).map_err(|e| ProtobufError::Json {
                    path: format!("{sp:?}"),
                    reason: e.to_string(),
                })?,
            ),
        },
    })
}

// ---------------------------------------------------------------------------------
// Encoding

/// Where a value being encoded sits in its object, written out only for an error: an
/// encode visits every field, and formatting each one's path cost more than the rest
/// of the work on it.
#[derive(Clone, Copy)]
pub enum Path<'a> {
    Root(&'a str),
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
    Key(&'a Path<'a>, &'a str),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root(name) => f.write_str(name),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
            Path::Key(parent, key) => write!(f, "{parent}[{key}]"),
        }
    }
}

fn mismatch(path: &Path<'_>, expected: &'static str) -> ProtobufError {
    ProtobufError::Json {
        path: path.to_string(),
        reason: format!("expected {expected}"),
    }
}

/// Encodes the JSON value of a message (without key or length) into `out`.
pub fn encode_value(
    index: u16,
    value: &Value,
    out: &mut Vec<u8>,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::TooDeep);
    }
    if let Some(sp) = special(index) {
        return encode_special(sp, value, out, path);
    }
    let msg = message(index);
    if msg.array {
        let Value::Array(items) = value else {
            return Err(mismatch(path, "an array"));
        };
        for (i, item) in items.iter().enumerate() {
            encode_scalar(
                msg.fields[0].tag,
                msg.fields[0].kind,
                item,
                out,
                &Path::Index(path, i),
            )?;
        }
        return Ok(());
    }
    let Value::Object(map) = value else {
        return Err(mismatch(path, "an object"));
    };
    encode_fields(index, map, out, path, depth)
}

fn encode_fields(
    index: u16,
    map: &Map<String, Value>,
    out: &mut Vec<u8>,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), ProtobufError> {
    for field in message(index).fields {
        if field.inline() {
            let Kind::M(inner) = field.kind else {
                continue;
            };
            wire::put_nested(out, field.tag, |buf| {
                encode_fields(inner, map, buf, path, depth + 1)
            })?;
            continue;
        }
        let Some(value) = map.get(field.json) else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        let path = Path::Field(path, field.json);
        match field.kind {
            Kind::MapS | Kind::MapB | Kind::MapM(_) => {
                let Value::Object(entries) = value else {
                    return Err(mismatch(&path, "an object"));
                };
                for (k, v) in entries {
                    let vpath = Path::Key(&path, k);
                    wire::put_nested(out, field.tag, |entry| {
                        wire::put_bytes(entry, 1, k.as_bytes());
                        match field.kind {
                            Kind::MapS => encode_scalar(2, Kind::S, v, entry, &vpath),
                            Kind::MapB => encode_scalar(2, Kind::B, v, entry, &vpath),
                            Kind::MapM(i) => wire::put_nested(entry, 2, |b| {
                                encode_value(i, v, b, &vpath, depth + 1)
                            }),
                            _ => Ok(()),
                        }
                    })?;
                }
            }
            kind if field.repeated() => {
                let Value::Array(items) = value else {
                    return Err(mismatch(&path, "an array"));
                };
                for (i, item) in items.iter().enumerate() {
                    let ipath = Path::Index(&path, i);
                    match kind {
                        Kind::M(m) => wire::put_nested(out, field.tag, |b| {
                            encode_value(m, item, b, &ipath, depth + 1)
                        })?,
                        _ => encode_scalar(field.tag, kind, item, out, &ipath)?,
                    }
                }
            }
            Kind::M(m) => {
                // A special type may have no wire form for its value (not the case for
                // any Kubernetes type: every one encodes to a message).
                wire::put_nested(out, field.tag, |b| {
                    encode_value(m, value, b, &path, depth + 1)
                })?;
            }
            kind => encode_scalar(field.tag, kind, value, out, &path)?,
        }
    }
    Ok(())
}

fn json_int(value: &Value, path: &Path<'_>) -> Result<i64, ProtobufError> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| mismatch(path, "an integer")),
        _ => Err(mismatch(path, "an integer")),
    }
}

fn encode_scalar(
    tag: u32,
    kind: Kind,
    value: &Value,
    out: &mut Vec<u8>,
    path: &Path<'_>,
) -> Result<(), ProtobufError> {
    match kind {
        Kind::S => {
            let Value::String(s) = value else {
                return Err(mismatch(path, "a string"));
            };
            wire::put_bytes(out, tag, s.as_bytes());
        }
        Kind::B => {
            let Value::String(s) = value else {
                return Err(mismatch(path, "a base64 string"));
            };
            let bytes = BASE64.decode(s).map_err(|e| ProtobufError::Json {
                path: path.to_string(),
                reason: format!("invalid base64: {e}"),
            })?;
            wire::put_bytes(out, tag, &bytes);
        }
        Kind::Bool => {
            let Value::Bool(b) = value else {
                return Err(mismatch(path, "a boolean"));
            };
            wire::put_key(out, tag, wire::VARINT);
            wire::put_varint(out, u64::from(*b));
        }
        Kind::I32 => {
            let v = json_int(value, path)?;
            let v = i32::try_from(v).map_err(|_| mismatch(path, "a 32-bit integer"))?;
            wire::put_key(out, tag, wire::VARINT);
            wire::put_varint(out, i64::from(v) as u64);
        }
        Kind::I64 => {
            let v = json_int(value, path)?;
            wire::put_key(out, tag, wire::VARINT);
            wire::put_varint(out, v as u64);
        }
        Kind::F64 => {
            let Some(f) = value.as_f64() else {
                return Err(mismatch(path, "a number"));
            };
            wire::put_key(out, tag, wire::I64);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Kind::M(_) | Kind::MapS | Kind::MapB | Kind::MapM(_) => {
            return Err(mismatch(path, "a scalar"));
        }
    }
    Ok(())
}

fn encode_special(
    sp: Special,
    value: &Value,
    out: &mut Vec<u8>,
    path: &Path<'_>,
) -> Result<(), ProtobufError> {
    match sp {
        Special::Quantity => match value {
            Value::String(s) => wire::put_bytes(out, 1, s.as_bytes()),
            Value::Number(n) => wire::put_bytes(out, 1, n.to_string().as_bytes()),
            _ => return Err(mismatch(path, "a quantity")),
        },
        Special::IntOrString => match value {
            Value::String(s) => wire::put_int_or_string_str(out, s),
            Value::Number(_) => {
                let v = i32::try_from(json_int(value, path)?)
                    .map_err(|_| mismatch(path, "a 32-bit integer"))?;
                wire::put_int_or_string_int(out, v);
            }
            _ => return Err(mismatch(path, "an integer or a string")),
        },
        Special::Time | Special::MicroTime => {
            let Value::String(s) = value else {
                return Err(mismatch(path, "an RFC 3339 time"));
            };
            let (secs, nanos) =
                crate::time::parse(s).ok_or_else(|| mismatch(path, "an RFC 3339 time"))?;
            wire::put_time(out, secs, nanos);
        }
        Special::FieldsV1 | Special::RawExtension => {
            let raw = serde_json::to_vec(value).map_err(|e| ProtobufError::Json {
                path: path.to_string(),
                reason: e.to_string(),
            })?;
            wire::put_bytes(out, 1, &raw);
        }
    }
    Ok(())
}
