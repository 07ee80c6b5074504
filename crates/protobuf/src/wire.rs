//! Protobuf wire format: varints, keys, length-delimited fields. Every read is
//! bounds-checked and returns an error on malformed input.

use crate::ProtobufError;

pub const VARINT: u8 = 0;
pub const I64: u8 = 1;
pub const LEN: u8 = 2;
pub const I32: u8 = 5;

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(ProtobufError::Truncated);
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(ProtobufError::Malformed("varint overflows 64 bits"));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Malformed("varint longer than 10 bytes"))
    }

    /// A field key: `(field number, wire type)`.
    pub fn key(&mut self) -> Result<(u32, u8), ProtobufError> {
        let key = self.varint()?;
        let tag = key >> 3;
        if tag == 0 || tag > u64::from(u32::MAX >> 3) {
            return Err(ProtobufError::Malformed("invalid field number"));
        }
        // Both narrowings are checked above / masked.
        Ok((tag as u32, (key & 7) as u8))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], ProtobufError> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| ProtobufError::Truncated)?;
        let end = self.pos.checked_add(len).ok_or(ProtobufError::Truncated)?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or(ProtobufError::Truncated)?;
        self.pos = end;
        Ok(out)
    }

    pub fn fixed64(&mut self) -> Result<u64, ProtobufError> {
        let end = self.pos.checked_add(8).ok_or(ProtobufError::Truncated)?;
        let b = self
            .buf
            .get(self.pos..end)
            .ok_or(ProtobufError::Truncated)?;
        self.pos = end;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn fixed32(&mut self) -> Result<(), ProtobufError> {
        let end = self.pos.checked_add(4).ok_or(ProtobufError::Truncated)?;
        self.buf
            .get(self.pos..end)
            .ok_or(ProtobufError::Truncated)?;
        self.pos = end;
        Ok(())
    }

    /// Skips a field of an unknown number.
    pub fn skip(&mut self, wire_type: u8) -> Result<(), ProtobufError> {
        match wire_type {
            VARINT => self.varint().map(drop),
            I64 => self.fixed64().map(drop),
            LEN => self.bytes().map(drop),
            I32 => self.fixed32(),
            // Groups (3, 4) are not used by Kubernetes and not supported.
            _ => Err(ProtobufError::Malformed("unsupported wire type")),
        }
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_key(out: &mut Vec<u8>, tag: u32, wire_type: u8) {
    put_varint(out, (u64::from(tag) << 3) | u64::from(wire_type));
}

pub fn put_bytes(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    put_key(out, tag, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes a length-delimited field whose body the closure writes. The body goes
/// straight into `out` after a one-byte length, widened in place when it turns out
/// longer than 127 bytes: a buffer per nested message cost an allocation and a copy
/// for every message of an object.
pub fn put_nested<E>(
    out: &mut Vec<u8>,
    tag: u32,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_key(out, tag, LEN);
    let at = out.len();
    out.push(0);
    body(out)?;
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let (mut prefix, mut n, mut v) = ([0u8; 10], 0, len as u64);
        while v >= 0x80 {
            prefix[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        prefix[n] = v as u8;
        out.splice(at..at + 1, prefix[..=n].iter().copied());
    }
    Ok(())
}

/// `intstr.IntOrString` holding a string: `{type = 1: 1, intVal = 2: 0, strVal = 3}`.
pub fn put_int_or_string_str(out: &mut Vec<u8>, s: &str) {
    put_key(out, 1, VARINT);
    put_varint(out, 1);
    put_key(out, 2, VARINT);
    put_varint(out, 0);
    put_bytes(out, 3, s.as_bytes());
}

/// `intstr.IntOrString` holding an integer: `{type = 1: 0, intVal = 2, strVal = 3: ""}`.
pub fn put_int_or_string_int(out: &mut Vec<u8>, v: i32) {
    put_key(out, 1, VARINT);
    put_varint(out, 0);
    put_key(out, 2, VARINT);
    put_varint(out, i64::from(v) as u64);
    put_bytes(out, 3, b"");
}

/// `metav1.Time` / `MicroTime`: `{seconds = 1, nanos = 2}`.
pub fn put_time(out: &mut Vec<u8>, secs: i64, nanos: i32) {
    put_key(out, 1, VARINT);
    put_varint(out, secs as u64);
    put_key(out, 2, VARINT);
    put_varint(out, i64::from(nanos) as u64);
}
