//! Where fields stand in a JSON document. Problems found in a decoded value (whose maps
//! are sorted) are reported in the order the document has them, as upstream's strict
//! decoder reports them: it reads the document once, front to back.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A field a problem is about: its path (`spec.containers[0].foo`, as the decoder
/// names it) and which occurrence of it in the document (1 for an unknown field, 2 for
/// the first repeat of a duplicate one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldAt<'a> {
    pub path: &'a str,
    pub occurrence: usize,
}

/// The order in which `body` (a JSON document) has `fields`: their indexes, by where
/// each stands in it, and those it does not have at the end (in their order).
pub fn document_order(body: &[u8], fields: &[FieldAt<'_>]) -> Vec<usize> {
    let mut wanted: HashMap<(&str, usize), Vec<usize>> = HashMap::new();
    for (i, f) in fields.iter().enumerate() {
        wanted.entry((f.path, f.occurrence)).or_default().push(i);
    }
    let paths = fields.iter().map(|f| f.path).collect();
    let mut walk = Walk {
        paths,
        wanted,
        seen: HashMap::new(),
        path: String::new(),
        events: 0,
        found: vec![None; fields.len()],
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    // A document that does not parse leaves what it has not reached unplaced.
    let _ = Node { walk: &mut walk }.deserialize(&mut de);
    let found = walk.found;
    let mut order: Vec<usize> = (0..fields.len()).collect();
    order.sort_by_key(|&i| (found[i].is_none(), found[i]));
    order
}

struct Walk<'f> {
    /// The paths asked for.
    paths: HashSet<&'f str>,
    /// By path and occurrence, the fields asked for there (a body may repeat a member
    /// thousands of times: each read looks up only its own occurrence).
    wanted: HashMap<(&'f str, usize), Vec<usize>>,
    /// Occurrences so far of the wanted paths.
    seen: HashMap<String, usize>,
    /// The path of the member being read.
    path: String,
    /// Members read so far.
    events: usize,
    /// Per field, the member count at which it was read.
    found: Vec<Option<usize>>,
}

impl Walk<'_> {
    /// A member at `self.path` was read.
    fn member(&mut self) {
        self.events += 1;
        if !self.paths.contains(self.path.as_str()) {
            return;
        }
        let n = self.seen.entry(self.path.clone()).or_default();
        *n += 1;
        let Some(fields) = self.wanted.get(&(self.path.as_str(), *n)) else {
            return;
        };
        for &field in fields {
            if self.found[field].is_none() {
                self.found[field] = Some(self.events);
            }
        }
    }
}

/// A value being read, anywhere in the document.
struct Node<'w, 'f> {
    walk: &'w mut Walk<'f>,
}

impl<'de> DeserializeSeed<'de> for Node<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        let parent = self.walk.path.len();
        while let Some(key) = access.next_key::<std::borrow::Cow<'de, str>>()? {
            if parent > 0 {
                self.walk.path.push('.');
            }
            self.walk.path.push_str(&key);
            self.walk.member();
            access.next_value_seed(Node {
                walk: &mut *self.walk,
            })?;
            self.walk.path.truncate(parent);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        let parent = self.walk.path.len();
        let mut i = 0usize;
        loop {
            use fmt::Write as _;
            let _ = write!(self.walk.path, "[{i}]");
            let more = access
                .next_element_seed(Node {
                    walk: &mut *self.walk,
                })?
                .is_some();
            self.walk.path.truncate(parent);
            if !more {
                return Ok(());
            }
            i += 1;
        }
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
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &str, occurrence: usize) -> FieldAt<'_> {
        FieldAt { path, occurrence }
    }

    #[test]
    fn fields_come_in_the_documents_order() {
        let body = br#"{"spec": {"zeta": 1, "containers": [{"name": "a"}, {"b": 2, "alpha": 3}]},
            "metadata": {"name": "x", "name": "y"}, "apiVersion": "v1"}"#;
        // As a sorted value names them: metadata before spec, alpha before b.
        let fields = [
            at("metadata.name", 2),
            at("spec.containers[1].alpha", 1),
            at("spec.containers[1].b", 1),
            at("spec.zeta", 1),
            at("nowhere", 1),
        ];
        assert_eq!(document_order(body, &fields), [3, 2, 1, 0, 4]);
    }

    #[test]
    fn a_later_repeat_is_placed_where_it_repeats() {
        let body = br#"{"a": 1, "b": 2, "a": 3, "c": 4, "a": 5}"#;
        let fields = [at("a", 3), at("c", 1), at("a", 2)];
        assert_eq!(document_order(body, &fields), [2, 1, 0]);
    }

    /// A body repeating one member tens of thousands of times: every repeat placed
    /// (each read looked through every repeat asked for, so a 2.7 MB body of 200,000
    /// repeats held a core for a minute and a half).
    #[test]
    fn thousands_of_repeats_are_each_placed() {
        const N: usize = 20_000;
        let mut body = String::from("{");
        for i in 0..N {
            if i == N / 2 {
                body.push_str(r#""u": 0, "#);
            }
            body.push_str(r#""a": 1, "#);
        }
        body.push_str(r#""z": 2}"#);
        // Asked for from the last repeat down, with the unknown member and one that is
        // not there at the end.
        let mut fields: Vec<FieldAt<'_>> = (2..=N).rev().map(|n| at("a", n)).collect();
        fields.push(at("u", 1));
        fields.push(at("a", N + 1));
        let order = document_order(body.as_bytes(), &fields);
        let repeats = N - 1;
        // Repeats 2 ..= N/2, then `u`, then the rest, then the missing one.
        let mut want: Vec<usize> = (0..repeats).rev().take(N / 2 - 1).collect();
        want.push(repeats);
        want.extend((0..repeats).rev().skip(N / 2 - 1));
        want.push(repeats + 1);
        assert_eq!(order, want);
    }
}
