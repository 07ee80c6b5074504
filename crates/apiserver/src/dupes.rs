//! JSON and YAML request bodies parsed into values in one pass that also notes duplicate
//! object keys (upstream's strict decoding reports them as `duplicate field
//! "spec.replicas"`; `serde_json::Value` keeps the last one silently). One pass, because
//! every create and update parses its body: a second walk just for duplicates cost as
//! much as the parse.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The body as a JSON value (as `serde_json::from_slice` parses it: the last of duplicate
/// keys wins), and the paths of keys that occur twice in one object (`metadata.name`,
/// `spec.containers[0].image`), in document order.
pub(crate) fn parse_noting_duplicates(body: &[u8]) -> serde_json::Result<(Value, Vec<String>)> {
    let duplicates = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = ValueSeed {
        path: &Path::Root,
        duplicates: &duplicates,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok((value, duplicates.into_inner()))
}

/// [`parse_noting_duplicates`] for a YAML body (one document), with the same value
/// `serde_yaml_ng::from_slice` gives; a body nested too deeply for it is refused
/// unread ([`crate::yaml_nesting`]).
pub(crate) fn parse_yaml_noting_duplicates(
    body: &[u8],
) -> Result<(Value, Vec<String>), crate::yaml_nesting::YamlError> {
    crate::yaml_nesting::check(body)?;
    let duplicates = RefCell::new(Vec::new());
    let value = ValueSeed {
        path: &Path::Root,
        duplicates: &duplicates,
    }
    .deserialize(serde_yaml_ng::Deserializer::from_slice(body))?;
    Ok((value, duplicates.into_inner()))
}

/// Where a value sits, as a chain on the stack: rendered only for a duplicate.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(Path::Root, key) => f.write_str(key),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

struct ValueSeed<'a> {
    path: &'a Path<'a>,
    duplicates: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let value = access.next_value_seed(ValueSeed {
                path: &Path::Key(self.path, &key),
                duplicates: self.duplicates,
            })?;
            // One lookup per member: the duplicate's path is only rendered when found.
            match map.entry(key) {
                serde_json::map::Entry::Occupied(mut slot) => {
                    let path = Path::Key(self.path, slot.key()).to_string();
                    self.duplicates.borrow_mut().push(path);
                    slot.insert(value);
                }
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
            }
        }
        Ok(Value::Object(map))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(access.size_hint().unwrap_or(0));
        loop {
            let path = Path::Index(self.path, items.len());
            match access.next_element_seed(ValueSeed {
                path: &path,
                duplicates: self.duplicates,
            })? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duplicates(body: &[u8]) -> Vec<String> {
        parse_noting_duplicates(body).unwrap().1
    }

    #[test]
    fn finds_duplicates_at_every_depth() {
        let body = br#"{"metadata": {"name": "a", "name": "b"},
            "spec": {"containers": [{"name": "c", "image": "x", "image": "y"}]},
            "spec": {}}"#;
        assert_eq!(
            duplicates(body),
            ["metadata.name", "spec.containers[0].image", "spec"]
        );
        assert!(duplicates(br#"{"a": 1, "b": [1, {"a": 2}]}"#).is_empty());
        assert_eq!(
            duplicates(br#"[{"a": 1}, {"b": [0, {"c": 1, "c": 2}]}]"#),
            ["[1].b[1].c"]
        );
    }

    #[test]
    fn parses_exactly_as_serde_json() {
        let bodies: [&[u8]; 5] = [
            br#"{"a": 1, "a": {"b": [1, -2, 3.5, 1e400, "s\u00e9\n", null, true]}, "c": {}}"#,
            br#"{"n": 18446744073709551615, "m": -9223372036854775808, "f": 0.1}"#,
            br#"[]"#,
            br#""just a string""#,
            br#"  {"x": [[[]]]}  "#,
        ];
        for body in bodies {
            let ours = parse_noting_duplicates(body).map(|(v, _)| v).ok();
            let theirs = serde_json::from_slice::<Value>(body).ok();
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(body));
        }
        for bad in [&b"not json"[..], b"{\"a\": 1} trailing", b"{\"a\":", b""] {
            let ours = parse_noting_duplicates(bad).unwrap_err().to_string();
            let theirs = serde_json::from_slice::<Value>(bad)
                .unwrap_err()
                .to_string();
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn yaml_duplicates_and_values_as_serde_yaml() {
        let body = b"metadata:\n  name: a\n  name: b\ndata:\n  k: '1'\n  k: '2'\nspec: {x: [1, {y: 1, y: 2}]}\n";
        let (value, duplicates) = parse_yaml_noting_duplicates(body).unwrap();
        assert_eq!(duplicates, ["metadata.name", "data.k", "spec.x[1].y"]);
        assert_eq!(value["data"]["k"], "2");
        let bodies: [&[u8]; 5] = [
            b"a: 1\nb: -2\nc: 3.5\nd: true\ne: ~\nf: null\ng: 'x'\nh: \"y\"\ni: [1, [2]]\n",
            b"n: 18446744073709551615\nm: -9223372036854775808\nf: 0.1\n",
            b"- a\n- b: {c: d}\n",
            b"just a string",
            b"key: |\n  two\n  lines\n",
        ];
        for body in bodies {
            let ours = parse_yaml_noting_duplicates(body).map(|(v, _)| v).ok();
            let theirs = serde_yaml_ng::from_slice::<Value>(body).ok();
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(body));
        }
        for bad in [&b"a: [1"[..], b"a: 1\n---\nb: 2\n", b"\t- bad indent: ["] {
            assert!(parse_yaml_noting_duplicates(bad).is_err());
            assert!(serde_yaml_ng::from_slice::<Value>(bad).is_err());
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_yaml_noting_duplicates(deep.as_bytes()).is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let body = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_noting_duplicates(body.as_bytes()).is_err());
    }
}
