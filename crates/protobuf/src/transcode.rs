//! JSON bytes straight to protobuf, guided by the same field table as [`crate::codec`]
//! but without a `serde_json::Value` in between: a list answered in protobuf is made
//! from the stored JSON of each object, and decoding each into a value cost twice the
//! encoding itself.
//!
//! The output is the codec's message with the fields in the JSON's order rather than
//! by tag (protobuf readers take any order; Go's writer sorts them) and an inline
//! field's message (`json:",inline"`) after the others. Keys the table does not know
//! are skipped and `null` members left out, as the codec does. What it does not
//! handle, an inline field inside an inline field, is an error, and the caller
//! falls back to the codec.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize as _;
use serde::de::{
    self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;

use crate::ProtobufError;
use crate::codec::MAX_DEPTH;
use crate::table::{Field, Kind, Special, message, special};
use crate::wire;

/// Writes the message `index` (without key or length) from its JSON into `out`.
pub(crate) fn transcode(index: u16, json: &[u8], out: &mut Vec<u8>) -> Result<(), ProtobufError> {
    let json_error = |e: serde_json::Error| ProtobufError::Json {
        path: "(transcoding)".into(),
        reason: e.to_string(),
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    Message {
        index,
        out,
        depth: 0,
    }
    .deserialize(&mut de)
    .map_err(json_error)?;
    de.end().map_err(json_error)
}

/// A message's JSON, written into `out`.
struct Message<'o> {
    index: u16,
    out: &'o mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Message<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.depth > MAX_DEPTH {
            return Err(D::Error::custom("objects nest too deeply"));
        }
        if let Some(sp) = special(self.index) {
            if let Special::FieldsV1 | Special::RawExtension = sp {
                let raw = <&RawValue>::deserialize(d)?;
                wire::put_bytes(self.out, 1, raw.get().as_bytes());
                return Ok(());
            }
            return d.deserialize_any(SpecialValue { sp, out: self.out });
        }
        let msg = message(self.index);
        if msg.array {
            return d.deserialize_seq(Repeated {
                field: &msg.fields[0],
                out: self.out,
                depth: self.depth,
            });
        }
        d.deserialize_map(Fields {
            index: self.index,
            out: self.out,
            depth: self.depth,
        })
    }
}

/// The members of a message's JSON object.
struct Fields<'o> {
    index: u16,
    out: &'o mut Vec<u8>,
    depth: usize,
}

/// Where a JSON member goes: a field of the message, or of one of its inline fields.
pub(crate) enum Slot {
    Direct(&'static Field),
    Inline(usize, &'static Field),
}

pub(crate) fn find(index: u16, key: &str) -> Option<Slot> {
    let msg = message(index);
    if let Some(f) = msg.fields.iter().find(|f| !f.inline() && f.json == key) {
        return Some(Slot::Direct(f));
    }
    msg.fields
        .iter()
        .filter(|f| f.inline())
        .enumerate()
        .find_map(|(slot, f)| match f.kind {
            Kind::M(inner) => message(inner)
                .fields
                .iter()
                .find(|g| g.json == key && !g.inline())
                .map(|g| Slot::Inline(slot, g)),
            _ => None,
        })
}

impl<'de> Visitor<'de> for Fields<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let msg = message(self.index);
        let mut inline: Vec<(u32, Vec<u8>)> = Vec::new();
        for f in msg.fields.iter().filter(|f| f.inline()) {
            let Kind::M(inner) = f.kind else {
                continue;
            };
            if message(inner).fields.iter().any(|g| g.inline()) {
                return Err(A::Error::custom("an inline field inside an inline field"));
            }
            inline.push((f.tag, Vec::new()));
        }
        while let Some(key) = map.next_key_seed(Key)? {
            match find(self.index, &key) {
                Some(Slot::Direct(field)) => map.next_value_seed(FieldValue {
                    field,
                    out: &mut *self.out,
                    depth: self.depth,
                })?,
                Some(Slot::Inline(slot, field)) => map.next_value_seed(FieldValue {
                    field,
                    out: &mut inline[slot].1,
                    depth: self.depth + 1,
                })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // As the codec: an inline field's message is always written, empty or not.
        for (tag, body) in inline {
            wire::put_bytes(self.out, tag, &body);
        }
        Ok(())
    }
}

/// An object key, borrowed from the input when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// One member's value: nothing for `null`, else per the field's kind.
struct FieldValue<'o> {
    field: &'static Field,
    out: &'o mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for FieldValue<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for FieldValue<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the value of {:?}", self.field.json)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let field = self.field;
        match field.kind {
            Kind::MapS | Kind::MapB | Kind::MapM(_) => d.deserialize_map(Entries {
                field,
                out: self.out,
                depth: self.depth,
            }),
            _ if field.repeated() => d.deserialize_seq(Repeated {
                field,
                out: self.out,
                depth: self.depth,
            }),
            Kind::M(m) => wire::put_nested(self.out, field.tag, |b| {
                Message {
                    index: m,
                    out: b,
                    depth: self.depth + 1,
                }
                .deserialize(d)
            }),
            kind => d.deserialize_any(Scalar {
                tag: field.tag,
                kind,
                out: self.out,
            }),
        }
    }
}

/// A repeated field's array (or a named slice's), one field per element.
struct Repeated<'o> {
    field: &'static Field,
    out: &'o mut Vec<u8>,
    depth: usize,
}

impl<'de> Visitor<'de> for Repeated<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an array for {:?}", self.field.json)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (tag, kind) = (self.field.tag, self.field.kind);
        loop {
            let more = match kind {
                Kind::M(m) => seq.next_element_seed(Nested {
                    tag,
                    index: m,
                    out: &mut *self.out,
                    depth: self.depth + 1,
                })?,
                kind => seq.next_element_seed(ScalarSeed(Scalar {
                    tag,
                    kind,
                    out: &mut *self.out,
                }))?,
            };
            if more.is_none() {
                return Ok(());
            }
        }
    }
}

/// A message as a field of its parent: key, length, body.
struct Nested<'o> {
    tag: u32,
    index: u16,
    out: &'o mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Nested<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        wire::put_nested(self.out, self.tag, |b| {
            Message {
                index: self.index,
                out: b,
                depth: self.depth,
            }
            .deserialize(d)
        })
    }
}

/// A map field's object: one `{key = 1, value = 2}` entry per member.
struct Entries<'o> {
    field: &'static Field,
    out: &'o mut Vec<u8>,
    depth: usize,
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object for {:?}", self.field.json)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(Key)? {
            wire::put_nested(self.out, self.field.tag, |entry| {
                wire::put_bytes(entry, 1, key.as_bytes());
                match self.field.kind {
                    Kind::MapM(m) => map.next_value_seed(Nested {
                        tag: 2,
                        index: m,
                        out: entry,
                        depth: self.depth + 1,
                    }),
                    Kind::MapB => map.next_value_seed(ScalarSeed(Scalar {
                        tag: 2,
                        kind: Kind::B,
                        out: entry,
                    })),
                    _ => map.next_value_seed(ScalarSeed(Scalar {
                        tag: 2,
                        kind: Kind::S,
                        out: entry,
                    })),
                }
            })?;
        }
        Ok(())
    }
}

/// A scalar field, written as the codec writes it.
struct Scalar<'o> {
    tag: u32,
    kind: Kind,
    out: &'o mut Vec<u8>,
}

struct ScalarSeed<'o>(Scalar<'o>);

impl<'de> DeserializeSeed<'de> for ScalarSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self.0)
    }
}

impl Scalar<'_> {
    fn int<E: de::Error>(self, v: i64) -> Result<(), E> {
        match self.kind {
            Kind::I32 => {
                let v = i32::try_from(v).map_err(|_| E::custom("expected a 32-bit integer"))?;
                wire::put_key(self.out, self.tag, wire::VARINT);
                wire::put_varint(self.out, i64::from(v) as u64);
            }
            Kind::I64 => {
                wire::put_key(self.out, self.tag, wire::VARINT);
                wire::put_varint(self.out, v as u64);
            }
            Kind::F64 => self.float(v as f64)?,
            _ => return Err(E::custom("unexpected number")),
        }
        Ok(())
    }

    fn float<E: de::Error>(self, v: f64) -> Result<(), E> {
        wire::put_key(self.out, self.tag, wire::I64);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }
}

impl<'de> Visitor<'de> for Scalar<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {:?} scalar", self.kind)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        match self.kind {
            Kind::S => wire::put_bytes(self.out, self.tag, v.as_bytes()),
            Kind::B => {
                let bytes = BASE64
                    .decode(v)
                    .map_err(|e| E::custom(format!("invalid base64: {e}")))?;
                wire::put_bytes(self.out, self.tag, &bytes);
            }
            _ => return Err(E::custom("unexpected string")),
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        if self.kind != Kind::Bool {
            return Err(E::custom("unexpected boolean"));
        }
        wire::put_key(self.out, self.tag, wire::VARINT);
        wire::put_varint(self.out, u64::from(v));
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.int(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        if self.kind == Kind::F64 {
            return self.float(v as f64);
        }
        self.int(i64::try_from(v).map_err(|_| E::custom("integer out of range"))?)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match self.kind {
            Kind::F64 => self.float(v),
            // The codec takes a float with no fraction as an integer.
            Kind::I32 | Kind::I64 if v.fract() == 0.0 && v.abs() < 9.2e18 => self.int(v as i64),
            _ => Err(E::custom("unexpected number")),
        }
    }
}

/// The JSON forms of the special types but raw JSON (see [`Message`]).
struct SpecialValue<'o> {
    sp: Special,
    out: &'o mut Vec<u8>,
}

impl SpecialValue<'_> {
    fn number<E: de::Error>(self, n: serde_json::Number) -> Result<(), E> {
        match self.sp {
            Special::Quantity => wire::put_bytes(self.out, 1, n.to_string().as_bytes()),
            Special::IntOrString => {
                let v = n
                    .as_i64()
                    .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                    .and_then(|v| i32::try_from(v).ok())
                    .ok_or_else(|| E::custom("expected a 32-bit integer"))?;
                wire::put_int_or_string_int(self.out, v);
            }
            _ => return Err(E::custom("unexpected number")),
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for SpecialValue<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the JSON form of a {:?}", self.sp)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        match self.sp {
            Special::Quantity => wire::put_bytes(self.out, 1, s.as_bytes()),
            Special::IntOrString => wire::put_int_or_string_str(self.out, s),
            Special::Time | Special::MicroTime => {
                let (secs, nanos) =
                    crate::time::parse(s).ok_or_else(|| E::custom("expected an RFC 3339 time"))?;
                wire::put_time(self.out, secs, nanos);
            }
            Special::FieldsV1 | Special::RawExtension => {
                return Err(E::custom("raw JSON is read whole"));
            }
        }
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.number(v.into())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.number(v.into())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        let n = serde_json::Number::from_f64(v).ok_or_else(|| E::custom("not a finite number"))?;
        self.number(n)
    }
}
