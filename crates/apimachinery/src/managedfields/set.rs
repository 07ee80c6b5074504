//! Field sets: which paths of an object a manager owns, and their `FieldsV1` form.
//!
//! A path is a list of elements, each in its `FieldsV1` spelling: `f:<field>`,
//! `k:<key object>` (an item of a keyed list), `v:<value>` (an item of a set) and
//! `i:<index>`. The set is a trie; a node is a member when the path to it is in the
//! set (`"."` in `FieldsV1` when the node also has children).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A set of field paths (upstream's `fieldpath.Set`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Adds `path` (an empty path is the root, which is never a member).
    pub fn insert<S: AsRef<str>>(&mut self, path: &[S]) {
        let mut node = self;
        for e in path {
            node = node.children.entry(e.as_ref().to_string()).or_default();
        }
        if !path.is_empty() {
            node.member = true;
        }
    }

    pub fn contains<S: AsRef<str>>(&self, path: &[S]) -> bool {
        self.node(path).is_some_and(|n| n.member)
    }

    /// The subtree at `path`: the set's paths below it.
    pub fn node<S: AsRef<str>>(&self, path: &[S]) -> Option<&FieldSet> {
        let mut node = self;
        for e in path {
            node = node.children.get(e.as_ref())?;
        }
        Some(node)
    }

    pub fn child(&self, element: &str) -> Option<&FieldSet> {
        self.children.get(element)
    }

    pub fn is_member(&self) -> bool {
        self.member
    }

    /// Makes the path to this node a member.
    pub(super) fn mark_member(&mut self) {
        self.member = true;
    }

    /// Adds `child` below `element`, unless it is empty; a walk building a set bottom-up.
    pub(super) fn insert_child(&mut self, element: String, child: FieldSet) {
        if !child.is_empty() {
            self.children.insert(element, child);
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (e, o) in &other.children {
            self.children.entry(e.clone()).or_default().union_with(o);
        }
    }

    /// The members of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (e, c) in &self.children {
            let d = match other.children.get(e) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                out.children.insert(e.clone(), d);
            }
        }
        out
    }

    /// The members of both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (e, c) in &self.children {
            if let Some(o) = other.children.get(e) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(e.clone(), i);
                }
            }
        }
        out
    }

    /// Removes `path` itself, keeping what is below it.
    pub fn remove(&mut self, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        if let Some(c) = self.children.get_mut(*first) {
            if rest.is_empty() {
                c.member = false;
            } else {
                c.remove(rest);
            }
            if c.is_empty() {
                self.children.remove(*first);
            }
        }
    }

    /// Removes `path` and everything below it.
    pub fn remove_subtree(&mut self, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        if rest.is_empty() {
            self.children.remove(*first);
            return;
        }
        if let Some(c) = self.children.get_mut(*first) {
            c.remove_subtree(rest);
            if c.is_empty() {
                self.children.remove(*first);
            }
        }
    }

    /// `self` with only `path` and what is below it.
    pub fn only_subtree(&self, path: &[&str]) -> FieldSet {
        let mut out = FieldSet::new();
        if let Some(node) = self.node(path) {
            let mut cur = &mut out;
            for e in path {
                cur = cur.children.entry((*e).to_string()).or_default();
            }
            *cur = node.clone();
        }
        out
    }

    /// Every member path, in order.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (e, c) in &self.children {
            prefix.push(e.clone());
            c.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON of the set.
    pub fn to_fields_v1(&self) -> Value {
        self.clone().into_fields_v1()
    }

    /// The `FieldsV1` JSON of the set, which it is moved into.
    pub fn into_fields_v1(self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (e, c) in self.children {
            m.insert(e, c.into_fields_v1());
        }
        Value::Object(m)
    }

    /// Reads `FieldsV1` JSON.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let mut set = FieldSet::new();
        set.read(v, true)?;
        Ok(set)
    }

    fn read(&mut self, v: &Value, root: bool) -> Result<(), String> {
        let Value::Object(m) = v else {
            return Err(format!("expected an object in FieldsV1, got {v}"));
        };
        if m.is_empty() && !root {
            self.member = true;
        }
        for (k, c) in m {
            if k == "." {
                if !root {
                    self.member = true;
                }
                continue;
            }
            if !(k.starts_with("f:")
                || k.starts_with("k:")
                || k.starts_with("v:")
                || k.starts_with("i:"))
            {
                return Err(format!("unexpected key in FieldsV1: {k:?}"));
            }
            self.children.entry(k.clone()).or_default().read(c, false)?;
        }
        Ok(())
    }
}

/// A path as upstream prints it in conflicts: `.spec.containers[name="c"].image`.
pub fn path_string<S: AsRef<str>>(path: &[S]) -> String {
    let mut out = String::new();
    for e in path {
        let e = e.as_ref();
        if let Some(f) = e.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            let fields = match serde_json::from_str::<Map<String, Value>>(k) {
                Ok(m) => m
                    .iter()
                    .map(|(n, v)| format!("{n}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
                Err(_) => k.to_string(),
            };
            out.push('[');
            out.push_str(&fields);
            out.push(']');
        } else if let Some(v) = e.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else if let Some(i) = e.strip_prefix("i:") {
            out.push_str(&format!("[{i}]"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(paths: &[&[&str]]) -> FieldSet {
        let mut s = FieldSet::new();
        for p in paths {
            s.insert(p);
        }
        s
    }

    #[test]
    fn fields_v1_round_trip() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}
        });
        let s = FieldSet::from_fields_v1(&v).unwrap();
        assert!(s.contains(&["f:metadata", "f:labels"]));
        assert!(s.contains(&["f:metadata", "f:labels", "f:app"]));
        assert!(!s.contains(&["f:metadata"]));
        assert!(s.contains(&["f:spec", "f:containers", "k:{\"name\":\"c\"}", "f:image"]));
        assert_eq!(s.to_fields_v1(), v);
        assert!(FieldSet::from_fields_v1(&json!({"x": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_operations() {
        let a = set(&[&["f:a"], &["f:b", "f:c"], &["f:b", "f:d"]]);
        let b = set(&[&["f:b", "f:c"], &["f:e"]]);
        assert_eq!(a.difference(&b), set(&[&["f:a"], &["f:b", "f:d"]]));
        assert_eq!(a.intersection(&b), set(&[&["f:b", "f:c"]]));
        assert_eq!(a.union(&b).paths().len(), 4);
        assert!(a.difference(&a).is_empty());
        let mut without_b = a.clone();
        without_b.remove_subtree(&["f:b"]);
        assert_eq!(without_b, set(&[&["f:a"]]));
        assert_eq!(
            a.only_subtree(&["f:b"]),
            set(&[&["f:b", "f:c"], &["f:b", "f:d"]])
        );
    }

    #[test]
    fn paths_print_as_upstream() {
        assert_eq!(path_string(&["f:spec", "f:replicas"]), ".spec.replicas");
        assert_eq!(
            path_string(&["f:spec", "f:ports", "k:{\"port\":80,\"protocol\":\"TCP\"}"]),
            ".spec.ports[port=80,protocol=\"TCP\"]"
        );
        assert_eq!(
            path_string(&["f:metadata", "f:finalizers", "v:\"a\""]),
            ".metadata.finalizers[=\"a\"]"
        );
    }
}
