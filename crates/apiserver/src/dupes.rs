//! Duplicate JSON object keys in a request body (upstream's strict decoding reports
//! them as `duplicate field "spec.replicas"`; `serde_json::Value` keeps the last one
//! silently).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Paths of keys that occur twice in one JSON object (`metadata.name`,
/// `spec.containers[0].image`), in document order. Empty for bodies that are not
/// JSON (the decoder reports those).
pub(crate) fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let out = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(body);
    let walk = Walk {
        path: String::new(),
        out: &out,
    };
    if walk.deserialize(&mut de).is_err() {
        return Vec::new();
    }
    out.into_inner()
}

struct Walk<'a> {
    path: String,
    out: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) {
                self.out.borrow_mut().push(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                out: self.out,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        while seq
            .next_element_seed(Walk {
                path: format!("{}[{i}]", self.path),
                out: self.out,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_duplicates_at_every_depth() {
        let body = br#"{"metadata": {"name": "a", "name": "b"},
            "spec": {"containers": [{"name": "c", "image": "x", "image": "y"}]},
            "spec": {}}"#;
        assert_eq!(
            duplicate_fields(body),
            ["metadata.name", "spec.containers[0].image", "spec"]
        );
        assert!(duplicate_fields(br#"{"a": 1, "b": [1, {"a": 2}]}"#).is_empty());
        assert!(duplicate_fields(b"not json").is_empty());
    }
}
