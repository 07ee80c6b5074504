//! The informer cache: client-go's thread-safe `Indexer`. Objects by key
//! (`namespace/name`, or `name` for cluster-scoped ones), a built-in namespace index
//! and any custom indexes (index name -> index value -> keys).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use parking_lot::RwLock;

use crate::{Error, Result};

/// Computes the index values of an object (client-go `IndexFunc`).
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// The name of the always-present namespace index (client-go `NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// client-go's `MetaNamespaceKeyFunc`: `namespace/name`, or `name` without namespace.
pub fn object_key<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// The key of `name` in `namespace` (empty or `None` for cluster-scoped objects).
pub fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Index function: the object's namespace.
pub fn namespace_index<K: Resource>() -> IndexFn<K> {
    Arc::new(|o: &K| o.meta().namespace.iter().cloned().collect())
}

/// Index function: the uids of the object's owners (`metadata.ownerReferences[].uid`).
pub fn owner_uid_index<K: Resource>() -> IndexFn<K> {
    Arc::new(|o: &K| {
        o.meta()
            .owner_references
            .iter()
            .flatten()
            .map(|r| r.uid.clone())
            .collect()
    })
}

/// Index function: the node a pod is bound to (`spec.nodeName`; unbound pods are
/// indexed under nothing).
pub fn pod_node_name_index() -> IndexFn<Pod> {
    Arc::new(|p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .into_iter()
            .collect()
    })
}

struct Index<K> {
    func: IndexFn<K>,
    /// value -> keys
    entries: HashMap<String, BTreeSet<String>>,
}

impl<K> Index<K> {
    fn add(&mut self, key: &str, obj: &K) {
        for v in (self.func)(obj) {
            self.entries.entry(v).or_default().insert(key.to_string());
        }
    }

    fn remove(&mut self, key: &str, obj: &K) {
        for v in (self.func)(obj) {
            if let Some(keys) = self.entries.get_mut(&v) {
                keys.remove(key);
                if keys.is_empty() {
                    self.entries.remove(&v);
                }
            }
        }
    }
}

struct State<K> {
    items: HashMap<String, Arc<K>>,
    indices: HashMap<String, Index<K>>,
}

/// The indexed cache of one informer. Cheap to clone; clones share the cache. Readers
/// get `Arc`s of the cached objects: treat them as read-only (clone to modify).
pub struct Store<K> {
    state: Arc<RwLock<State<K>>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            state: self.state.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.read();
        f.debug_struct("Store")
            .field("items", &st.items.len())
            .field("indices", &st.indices.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<K: Resource + Send + Sync + 'static> Default for Store<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Resource + Send + Sync + 'static> Store<K> {
    /// An empty store with the namespace index.
    pub fn new() -> Self {
        let mut indices = HashMap::new();
        indices.insert(
            NAMESPACE_INDEX.to_string(),
            Index {
                func: namespace_index::<K>(),
                entries: HashMap::new(),
            },
        );
        Store {
            state: Arc::new(RwLock::new(State {
                items: HashMap::new(),
                indices,
            })),
        }
    }

    /// Registers an index, indexing the objects already cached. Names are unique.
    pub fn add_indexer(&self, name: &str, func: IndexFn<K>) -> Result<()> {
        let mut st = self.state.write();
        if st.indices.contains_key(name) {
            return Err(Error::IndexerConflict(name.to_string()));
        }
        let mut index = Index {
            func,
            entries: HashMap::new(),
        };
        for (k, o) in &st.items {
            index.add(k, o);
        }
        st.indices.insert(name.to_string(), index);
        Ok(())
    }

    /// The object with this key (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.state.read().items.get(key).cloned()
    }

    /// The object `name` in `namespace` (`None` for cluster-scoped objects).
    pub fn get_by_name(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.get(&key_of(namespace, name))
    }

    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.state.read().items.values().cloned().collect()
    }

    /// Every cached key.
    pub fn list_keys(&self) -> Vec<String> {
        self.state.read().items.keys().cloned().collect()
    }

    /// The objects in `namespace`.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.by_index(NAMESPACE_INDEX, namespace)
            .unwrap_or_default()
    }

    /// The objects whose index `index` has `value` (client-go `ByIndex`).
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>> {
        let st = self.state.read();
        let idx = st
            .indices
            .get(index)
            .ok_or_else(|| Error::IndexNotFound(index.to_string()))?;
        Ok(idx
            .entries
            .get(value)
            .into_iter()
            .flatten()
            .filter_map(|k| st.items.get(k).cloned())
            .collect())
    }

    /// The keys whose index `index` has `value` (client-go `IndexKeys`).
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>> {
        let st = self.state.read();
        let idx = st
            .indices
            .get(index)
            .ok_or_else(|| Error::IndexNotFound(index.to_string()))?;
        Ok(idx
            .entries
            .get(value)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// The values index `index` currently has (client-go `ListIndexFuncValues`).
    pub fn index_values(&self, index: &str) -> Result<Vec<String>> {
        let st = self.state.read();
        let idx = st
            .indices
            .get(index)
            .ok_or_else(|| Error::IndexNotFound(index.to_string()))?;
        let mut v: Vec<String> = idx.entries.keys().cloned().collect();
        v.sort();
        Ok(v)
    }

    /// The objects sharing any value of `index` with `obj` (client-go `Index`).
    pub fn index(&self, index: &str, obj: &K) -> Result<Vec<Arc<K>>> {
        let st = self.state.read();
        let idx = st
            .indices
            .get(index)
            .ok_or_else(|| Error::IndexNotFound(index.to_string()))?;
        let mut keys = BTreeSet::new();
        for v in (idx.func)(obj) {
            if let Some(ks) = idx.entries.get(&v) {
                keys.extend(ks.iter().cloned());
            }
        }
        Ok(keys
            .iter()
            .filter_map(|k| st.items.get(k).cloned())
            .collect())
    }

    pub fn len(&self) -> usize {
        self.state.read().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inserts or replaces; returns the previous object.
    pub(crate) fn insert(&self, key: String, obj: Arc<K>) -> Option<Arc<K>> {
        let mut st = self.state.write();
        let State { items, indices } = &mut *st;
        let old = items.insert(key.clone(), obj.clone());
        for idx in indices.values_mut() {
            if let Some(o) = &old {
                idx.remove(&key, o);
            }
            idx.add(&key, &obj);
        }
        old
    }

    /// Removes; returns the removed object.
    pub(crate) fn remove(&self, key: &str) -> Option<Arc<K>> {
        let mut st = self.state.write();
        let State { items, indices } = &mut *st;
        let old = items.remove(key);
        if let Some(o) = &old {
            for idx in indices.values_mut() {
                idx.remove(key, o);
            }
        }
        old
    }

    /// Replaces the whole content; returns the previous content.
    pub(crate) fn replace(&self, new: HashMap<String, Arc<K>>) -> HashMap<String, Arc<K>> {
        let mut st = self.state.write();
        let State { items, indices } = &mut *st;
        for idx in indices.values_mut() {
            idx.entries.clear();
            for (k, o) in &new {
                idx.add(k, o);
            }
        }
        std::mem::replace(items, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn pod(ns: &str, name: &str, node: Option<&str>, owners: &[&str]) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                owner_references: Some(
                    owners
                        .iter()
                        .map(|u| OwnerReference {
                            uid: (*u).into(),
                            name: "o".into(),
                            kind: "ReplicaSet".into(),
                            api_version: "apps/v1".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn names(v: Vec<Arc<Pod>>) -> Vec<String> {
        let mut n: Vec<String> = v.iter().map(|p| object_key(p.as_ref())).collect();
        n.sort();
        n
    }

    #[test]
    fn keys() {
        assert_eq!(object_key(pod("ns", "a", None, &[]).as_ref()), "ns/a");
        assert_eq!(key_of(None, "n1"), "n1");
        assert_eq!(key_of(Some(""), "n1"), "n1");
        assert_eq!(key_of(Some("x"), "n1"), "x/n1");
    }

    #[test]
    fn get_list_namespace_and_custom_indexes() {
        let s = Store::<Pod>::new();
        s.add_indexer("node", pod_node_name_index()).unwrap();
        s.insert("a/p1".into(), pod("a", "p1", Some("n1"), &["u1"]));
        s.insert("a/p2".into(), pod("a", "p2", Some("n2"), &["u1", "u2"]));
        s.insert("b/p3".into(), pod("b", "p3", None, &[]));
        // Owner index added after objects exist: existing ones are indexed.
        s.add_indexer("owner", owner_uid_index()).unwrap();
        assert!(matches!(
            s.add_indexer("owner", owner_uid_index()),
            Err(Error::IndexerConflict(_))
        ));

        assert_eq!(s.len(), 3);
        assert!(s.get("a/p1").is_some());
        assert!(s.get_by_name(Some("b"), "p3").is_some());
        assert!(s.get("p3").is_none());
        assert_eq!(names(s.list_namespace("a")), ["a/p1", "a/p2"]);
        assert_eq!(names(s.list_namespace("zzz")), Vec::<String>::new());
        assert_eq!(names(s.by_index("node", "n1").unwrap()), ["a/p1"]);
        assert_eq!(names(s.by_index("owner", "u1").unwrap()), ["a/p1", "a/p2"]);
        assert_eq!(s.index_keys("owner", "u2").unwrap(), ["a/p2"]);
        assert_eq!(s.index_values("node").unwrap(), ["n1", "n2"]);
        assert_eq!(
            names(s.index("owner", &pod("x", "q", None, &["u2"])).unwrap()),
            ["a/p2"]
        );
        assert!(matches!(
            s.by_index("nope", "x"),
            Err(Error::IndexNotFound(_))
        ));

        // Update moves index entries; old values vanish.
        s.insert("a/p1".into(), pod("a", "p1", Some("n2"), &[]));
        assert_eq!(names(s.by_index("node", "n2").unwrap()), ["a/p1", "a/p2"]);
        assert!(s.by_index("node", "n1").unwrap().is_empty());
        assert_eq!(s.index_values("node").unwrap(), ["n2"]);
        assert_eq!(names(s.by_index("owner", "u1").unwrap()), ["a/p2"]);

        // Delete removes from every index.
        assert!(s.remove("a/p2").is_some());
        assert!(s.remove("a/p2").is_none());
        assert!(s.by_index("owner", "u1").unwrap().is_empty());
        assert_eq!(names(s.list_namespace("a")), ["a/p1"]);

        // Replace rebuilds indexes.
        let mut m = HashMap::new();
        m.insert("c/p9".to_string(), pod("c", "p9", Some("n9"), &["u9"]));
        let old = s.replace(m);
        assert_eq!(old.len(), 2);
        assert_eq!(names(s.list()), ["c/p9"]);
        assert!(s.list_namespace("a").is_empty());
        assert_eq!(s.index_values("node").unwrap(), ["n9"]);
        assert_eq!(names(s.by_index("owner", "u9").unwrap()), ["c/p9"]);
    }
}
