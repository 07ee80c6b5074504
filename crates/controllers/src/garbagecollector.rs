//! The garbage collector (upstream `pkg/controller/garbagecollector`).
//!
//! Every resource that supports list, watch and delete is found through API discovery
//! (re-run periodically, so new CRDs are picked up) and watched as metadata only
//! (`PartialObjectMetadata`), building an ownerReferences graph in memory: uid ->
//! node, owner uid -> dependents. Work items are uids.
//!
//! Pure part: [`classify`] + [`decide`] (upstream `attemptToDeleteItem`: dangling
//! owners, owners waiting for their dependents' deletion, solid owners -> remove refs /
//! delete foreground / delete with the dependent's own policy) and
//! [`finalizer_step`] (the `orphan` and `foregroundDeletion` finalizers of an owner
//! being deleted). IO part: [`GarbageCollector`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::core::PartialObjectMeta;
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::json;

use ferrokube_client::informer::SharedInformerFactory;
use ferrokube_client::workqueue::WorkQueue;

use crate::replicaset::is_not_found;
use crate::{Action, Controller, Result};

pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";

/// One object in the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct GcNode {
    pub uid: String,
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub resource_version: Option<String>,
    pub owners: Vec<OwnerReference>,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

impl GcNode {
    pub fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }
    /// Being deleted in the foreground (waits for its blocking dependents).
    pub fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND)
    }
}

/// What an owner reference points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// Exists and is not waiting for its dependents.
    Solid,
    /// Does not exist (or has another uid).
    Dangling,
    /// Exists, being deleted in the foreground.
    WaitingForDependents,
}

/// Classifies an owner from its live state (`None`: absent).
pub fn classify(owner: Option<&GcNode>, r: &OwnerReference) -> OwnerState {
    match owner {
        None => OwnerState::Dangling,
        Some(o) if o.uid != r.uid => OwnerState::Dangling,
        Some(o) if o.deleting_dependents() => OwnerState::WaitingForDependents,
        Some(_) => OwnerState::Solid,
    }
}

/// The decision for a dependent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    /// Remove the references to these owner uids (dangling or waiting), keep the object.
    RemoveOwnerRefs(Vec<String>),
    /// Unblock references to these waiting owners first (a dependent that itself
    /// deletes dependents would deadlock), then delete in the foreground.
    UnblockThenDeleteForeground(Vec<String>),
    /// Delete with this propagation policy.
    Delete(&'static str),
}

/// Upstream `attemptToDeleteItem` for a live object (`has_dependents`: it owns
/// something; `dependent_deleting_dependents`: one of its own dependents is being
/// deleted in the foreground).
pub fn decide(
    item: &GcNode,
    owners: &[(OwnerReference, OwnerState)],
    has_dependents: bool,
    dependent_deleting_dependents: bool,
) -> Decision {
    if item.deleting && !item.deleting_dependents() {
        return Decision::Nothing;
    }
    if owners.is_empty() {
        return Decision::Nothing;
    }
    let solid = owners
        .iter()
        .filter(|(_, s)| *s == OwnerState::Solid)
        .count();
    let bad: Vec<String> = owners
        .iter()
        .filter(|(_, s)| *s != OwnerState::Solid)
        .map(|(r, _)| r.uid.clone())
        .collect();
    let waiting: Vec<String> = owners
        .iter()
        .filter(|(_, s)| *s == OwnerState::WaitingForDependents)
        .map(|(r, _)| r.uid.clone())
        .collect();
    if solid > 0 {
        return if bad.is_empty() {
            Decision::Nothing
        } else {
            Decision::RemoveOwnerRefs(bad)
        };
    }
    if !waiting.is_empty() && has_dependents {
        if dependent_deleting_dependents {
            return Decision::UnblockThenDeleteForeground(waiting);
        }
        return Decision::Delete("Foreground");
    }
    if item.deleting {
        // Already being deleted (foreground): nothing more to ask for.
        return Decision::Nothing;
    }
    if item.has_finalizer(ORPHAN) {
        Decision::Delete("Orphan")
    } else if item.has_finalizer(FOREGROUND) {
        Decision::Delete("Foreground")
    } else {
        Decision::Delete("Background")
    }
}

/// The step for an owner that is being deleted with a GC finalizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizerStep {
    Nothing,
    /// Remove our reference from these dependents, then the `orphan` finalizer.
    Orphan(Vec<String>),
    /// No blocking dependents left: remove `foregroundDeletion`.
    RemoveForeground,
    /// Delete (attempt) these blocking dependents and wait.
    WaitFor(Vec<String>),
}

/// Upstream `attemptToOrphan` / `processDeletingDependentsItem`.
pub fn finalizer_step(owner: &GcNode, dependents: &[&GcNode]) -> FinalizerStep {
    if !owner.deleting {
        return FinalizerStep::Nothing;
    }
    if owner.has_finalizer(ORPHAN) {
        return FinalizerStep::Orphan(dependents.iter().map(|d| d.uid.clone()).collect());
    }
    if owner.has_finalizer(FOREGROUND) {
        let blocking: Vec<&&GcNode> = dependents
            .iter()
            .filter(|d| {
                d.owners
                    .iter()
                    .any(|r| r.uid == owner.uid && r.block_owner_deletion == Some(true))
            })
            .collect();
        if blocking.is_empty() {
            return FinalizerStep::RemoveForeground;
        }
        return FinalizerStep::WaitFor(
            blocking
                .iter()
                .filter(|d| !d.deleting_dependents())
                .map(|d| d.uid.clone())
                .collect(),
        );
    }
    FinalizerStep::Nothing
}

#[derive(Debug, Default)]
struct Graph {
    nodes: HashMap<String, GcNode>,
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    fn upsert(&mut self, n: GcNode) -> Option<GcNode> {
        let old = self.nodes.insert(n.uid.clone(), n.clone());
        if let Some(o) = &old {
            for r in &o.owners {
                if let Some(s) = self.dependents.get_mut(&r.uid) {
                    s.remove(&o.uid);
                }
            }
        }
        for r in &n.owners {
            self.dependents
                .entry(r.uid.clone())
                .or_default()
                .insert(n.uid.clone());
        }
        old
    }

    fn remove(&mut self, uid: &str) -> Option<GcNode> {
        let old = self.nodes.remove(uid)?;
        for r in &old.owners {
            if let Some(s) = self.dependents.get_mut(&r.uid) {
                s.remove(uid);
                if s.is_empty() {
                    self.dependents.remove(&r.uid);
                }
            }
        }
        Some(old)
    }

    fn dependents_of(&self, uid: &str) -> Vec<GcNode> {
        self.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| self.nodes.get(d).cloned())
            .collect()
    }
}

/// A discovered resource the collector watches.
#[derive(Debug, Clone)]
struct Res {
    ar: ApiResource,
    namespaced: bool,
}

/// The garbage collector.
pub struct GarbageCollector {
    client: kube::Client,
    graph: Arc<Mutex<Graph>>,
    resources: Arc<Mutex<HashMap<(String, String), Res>>>,
    rediscover: Duration,
}

impl GarbageCollector {
    /// The collector discovers and watches every resource itself with `client`
    /// (no shared informers: the resources are found at run time).
    pub fn new(client: kube::Client) -> Arc<Self> {
        Arc::new(GarbageCollector {
            client,
            graph: Arc::new(Mutex::new(Graph::default())),
            resources: Arc::new(Mutex::new(HashMap::new())),
            rediscover: Duration::from_secs(30),
        })
    }

    /// Number of objects in the graph (metrics, tests).
    pub fn graph_len(&self) -> usize {
        self.graph.lock().nodes.len()
    }

    fn node_of(ar: &ApiResource, o: &PartialObjectMeta<DynamicObject>) -> Option<GcNode> {
        let m = &o.metadata;
        Some(GcNode {
            uid: m.uid.clone()?,
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            namespace: m.namespace.clone(),
            name: m.name.clone()?,
            resource_version: m.resource_version.clone(),
            owners: m.owner_references.clone().unwrap_or_default(),
            finalizers: m.finalizers.clone().unwrap_or_default(),
            deleting: m.deletion_timestamp.is_some(),
        })
    }

    /// Upstream `processGraphChanges` for one observed object.
    fn observe(graph: &Mutex<Graph>, queue: &WorkQueue<String>, n: GcNode) {
        let mut g = graph.lock();
        let old = g.upsert(n.clone());
        let owners_changed = old.as_ref().is_none_or(|o| o.owners != n.owners);
        if !n.owners.is_empty() && (owners_changed || n.deleting_dependents()) {
            queue.add(n.uid.clone());
        }
        if n.deleting && (n.has_finalizer(ORPHAN) || n.has_finalizer(FOREGROUND)) {
            queue.add(n.uid.clone());
            if n.deleting_dependents() {
                for d in g.dependents_of(&n.uid) {
                    queue.add(d.uid);
                }
            }
        }
    }

    fn forget(graph: &Mutex<Graph>, queue: &WorkQueue<String>, uid: &str) {
        let mut g = graph.lock();
        let removed = g.remove(uid);
        for d in g.dependents_of(uid) {
            queue.add(d.uid);
        }
        // Owners waiting in the foreground re-check their blocking dependents now,
        // as upstream's graph builder does: the last one gone lets them go.
        for owner in removed.iter().flat_map(|n| &n.owners) {
            if g.nodes
                .get(&owner.uid)
                .is_some_and(GcNode::deleting_dependents)
            {
                queue.add(owner.uid.clone());
            }
        }
    }

    async fn discover(client: &kube::Client) -> Result<Vec<Res>> {
        let disc = Discovery::new(client.clone()).run().await?;
        let mut out = Vec::new();
        for g in disc.groups() {
            for (ar, caps) in g.recommended_resources() {
                if !(caps.supports_operation(verbs::LIST)
                    && caps.supports_operation(verbs::WATCH)
                    && caps.supports_operation(verbs::DELETE))
                {
                    continue;
                }
                // Events are never owners or dependents worth collecting.
                if ar.kind == "Event" {
                    continue;
                }
                out.push(Res {
                    ar,
                    namespaced: matches!(caps.scope, Scope::Namespaced),
                });
            }
        }
        Ok(out)
    }

    fn start_monitor(self: &Arc<Self>, res: Res, queue: WorkQueue<String>) {
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::all_with(self.client.clone(), &res.ar);
        let graph = self.graph.clone();
        tokio::spawn(async move {
            let mut seen: HashSet<String> = HashSet::new();
            let mut relist: Option<HashSet<String>> = None;
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(Event::Init) => relist = Some(HashSet::new()),
                    Ok(Event::InitApply(o)) => {
                        if let Some(n) = Self::node_of(&res.ar, &o) {
                            if let Some(r) = relist.as_mut() {
                                r.insert(n.uid.clone());
                            }
                            seen.insert(n.uid.clone());
                            Self::observe(&graph, &queue, n);
                        }
                    }
                    Ok(Event::InitDone) => {
                        if let Some(r) = relist.take() {
                            for gone in seen.difference(&r).cloned().collect::<Vec<_>>() {
                                Self::forget(&graph, &queue, &gone);
                            }
                            seen = r;
                        }
                    }
                    Ok(Event::Apply(o)) => {
                        if let Some(n) = Self::node_of(&res.ar, &o) {
                            seen.insert(n.uid.clone());
                            Self::observe(&graph, &queue, n);
                        }
                    }
                    Ok(Event::Delete(o)) => {
                        if let Some(uid) = o.metadata.uid.clone() {
                            seen.remove(&uid);
                            Self::forget(&graph, &queue, &uid);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(kind = %res.ar.kind, error = %e, "gc monitor watch error");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        });
    }

    fn api_for(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Option<Api<DynamicObject>> {
        let res = self
            .resources
            .lock()
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()?;
        Some(match (res.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &res.ar),
            (true, None) => return None,
            (false, _) => Api::all_with(self.client.clone(), &res.ar),
        })
    }

    /// The live owner (graph first, then a GET, as upstream's `isDangling`).
    async fn owner_state(&self, item: &GcNode, r: &OwnerReference) -> Result<OwnerState> {
        if let Some(o) = self.graph.lock().nodes.get(&r.uid).cloned() {
            return Ok(classify(Some(&o), r));
        }
        let Some(api) = self.api_for(&r.api_version, &r.kind, item.namespace.as_deref()) else {
            // Unknown kind: cannot prove it absent; treat as solid (upstream retries).
            return Ok(OwnerState::Solid);
        };
        match api.get_metadata_opt(&r.name).await? {
            None => Ok(OwnerState::Dangling),
            Some(o) => {
                let n = Self::node_of(&self.ar_of(&r.api_version, &r.kind), &o);
                Ok(classify(n.as_ref(), r))
            }
        }
    }

    fn ar_of(&self, api_version: &str, kind: &str) -> ApiResource {
        self.resources
            .lock()
            .get(&(api_version.to_string(), kind.to_string()))
            .map(|r| r.ar.clone())
            .unwrap_or_else(|| ApiResource {
                group: String::new(),
                version: String::new(),
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                plural: String::new(),
            })
    }

    async fn patch_meta(&self, n: &GcNode, meta: serde_json::Value) -> Result<()> {
        let Some(api) = self.api_for(&n.api_version, &n.kind, n.namespace.as_deref()) else {
            return Ok(());
        };
        match api
            .patch_metadata(
                &n.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": meta})),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete(&self, n: &GcNode, policy: &str) -> Result<()> {
        let Some(api) = self.api_for(&n.api_version, &n.kind, n.namespace.as_deref()) else {
            return Ok(());
        };
        let dp = DeleteParams {
            propagation_policy: Some(match policy {
                "Orphan" => PropagationPolicy::Orphan,
                "Foreground" => PropagationPolicy::Foreground,
                _ => PropagationPolicy::Background,
            }),
            preconditions: Some(Preconditions {
                uid: Some(n.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&n.name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait::async_trait]
impl Controller for GarbageCollector {
    fn name(&self) -> &'static str {
        "garbage-collector"
    }

    fn watch(self: Arc<Self>, _factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut started: HashSet<(String, String)> = HashSet::new();
            loop {
                match Self::discover(&self.client).await {
                    Ok(list) => {
                        for r in list {
                            let key = (r.ar.api_version.clone(), r.ar.kind.clone());
                            self.resources.lock().insert(key.clone(), r.clone());
                            if started.insert(key) {
                                self.start_monitor(r, queue.clone());
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "garbage collector discovery failed"),
                }
                if queue.is_shutting_down() {
                    return;
                }
                tokio::time::sleep(self.rediscover).await;
            }
        });
    }

    async fn reconcile(&self, uid: &str) -> Result<Action> {
        let (item, dependents) = {
            let g = self.graph.lock();
            let Some(item) = g.nodes.get(uid).cloned() else {
                return Ok(Action::Done);
            };
            (item, g.dependents_of(uid))
        };
        // An owner being deleted with a GC finalizer.
        let deps: Vec<&GcNode> = dependents.iter().collect();
        match finalizer_step(&item, &deps) {
            FinalizerStep::Orphan(uids) => {
                for d in dependents.iter().filter(|d| uids.contains(&d.uid)) {
                    let owners: Vec<&OwnerReference> =
                        d.owners.iter().filter(|r| r.uid != item.uid).collect();
                    self.patch_meta(
                        d,
                        json!({"ownerReferences": owners, "resourceVersion": d.resource_version}),
                    )
                    .await?;
                }
                let fins: Vec<&String> = item.finalizers.iter().filter(|f| *f != ORPHAN).collect();
                self.patch_meta(
                    &item,
                    json!({"finalizers": fins, "resourceVersion": item.resource_version}),
                )
                .await?;
                return Ok(Action::Done);
            }
            FinalizerStep::RemoveForeground => {
                let fins: Vec<&String> = item
                    .finalizers
                    .iter()
                    .filter(|f| *f != FOREGROUND)
                    .collect();
                self.patch_meta(
                    &item,
                    json!({"finalizers": fins, "resourceVersion": item.resource_version}),
                )
                .await?;
                return Ok(Action::Done);
            }
            FinalizerStep::WaitFor(uids) => {
                // The blocking dependents are processed as items of their own.
                return Ok(if uids.is_empty() {
                    Action::RequeueAfter(Duration::from_secs(5))
                } else {
                    Action::RequeueAfter(Duration::from_secs(10))
                });
            }
            FinalizerStep::Nothing => {}
        }
        if item.owners.is_empty() {
            return Ok(Action::Done);
        }
        let mut owners = Vec::new();
        for r in &item.owners {
            owners.push((r.clone(), self.owner_state(&item, r).await?));
        }
        let dep_deleting = dependents.iter().any(|d| d.deleting_dependents());
        match decide(&item, &owners, !dependents.is_empty(), dep_deleting) {
            Decision::Nothing => {}
            Decision::RemoveOwnerRefs(uids) => {
                let keep: Vec<&OwnerReference> = item
                    .owners
                    .iter()
                    .filter(|r| !uids.contains(&r.uid))
                    .collect();
                self.patch_meta(
                    &item,
                    json!({"ownerReferences": keep, "resourceVersion": item.resource_version}),
                )
                .await?;
            }
            Decision::UnblockThenDeleteForeground(uids) => {
                let refs: Vec<OwnerReference> = item
                    .owners
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        if uids.contains(&r.uid) {
                            r.block_owner_deletion = Some(false);
                        }
                        r
                    })
                    .collect();
                self.patch_meta(
                    &item,
                    json!({"ownerReferences": refs, "resourceVersion": item.resource_version}),
                )
                .await?;
                self.delete(&item, "Foreground").await?;
            }
            Decision::Delete(policy) => self.delete(&item, policy).await?,
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(uid: &str, owners: &[(&str, bool)], fins: &[&str], deleting: bool) -> GcNode {
        GcNode {
            uid: uid.into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: uid.into(),
            resource_version: Some("1".into()),
            owners: owners
                .iter()
                .map(|(u, block)| OwnerReference {
                    uid: u.to_string(),
                    name: u.to_string(),
                    kind: "ConfigMap".into(),
                    api_version: "v1".into(),
                    block_owner_deletion: Some(*block),
                    controller: None,
                })
                .collect(),
            finalizers: fins.iter().map(|s| s.to_string()).collect(),
            deleting,
        }
    }

    fn refs(n: &GcNode, states: &[OwnerState]) -> Vec<(OwnerReference, OwnerState)> {
        n.owners
            .iter()
            .cloned()
            .zip(states.iter().copied())
            .collect()
    }

    #[test]
    fn classify_owners() {
        let r = OwnerReference {
            uid: "o".into(),
            ..Default::default()
        };
        assert_eq!(classify(None, &r), OwnerState::Dangling);
        assert_eq!(
            classify(Some(&node("other", &[], &[], false)), &r),
            OwnerState::Dangling
        );
        assert_eq!(
            classify(Some(&node("o", &[], &[], false)), &r),
            OwnerState::Solid
        );
        assert_eq!(
            classify(Some(&node("o", &[], &[FOREGROUND], true)), &r),
            OwnerState::WaitingForDependents
        );
        // Deleting in the background (no finalizer) is still "solid" until it is gone.
        assert_eq!(
            classify(Some(&node("o", &[], &[], true)), &r),
            OwnerState::Solid
        );
    }

    #[test]
    fn decisions() {
        use OwnerState::*;
        let d = node("d", &[("a", true), ("b", true)], &[], false);
        type Case = (&'static str, GcNode, Vec<OwnerState>, bool, bool, Decision);
        let cases: Vec<Case> = vec![
            (
                "all solid",
                d.clone(),
                vec![Solid, Solid],
                false,
                false,
                Decision::Nothing,
            ),
            (
                "one dangling, one solid: drop the dangling ref",
                d.clone(),
                vec![Solid, Dangling],
                false,
                false,
                Decision::RemoveOwnerRefs(vec!["b".into()]),
            ),
            (
                "waiting + solid: drop the waiting ref",
                d.clone(),
                vec![WaitingForDependents, Solid],
                false,
                false,
                Decision::RemoveOwnerRefs(vec!["a".into()]),
            ),
            (
                "all dangling: background delete",
                d.clone(),
                vec![Dangling, Dangling],
                false,
                false,
                Decision::Delete("Background"),
            ),
            (
                "dangling, orphan finalizer",
                node("d", &[("a", true)], &[ORPHAN], false),
                vec![Dangling],
                false,
                false,
                Decision::Delete("Orphan"),
            ),
            (
                "waiting owner, has dependents: foreground",
                d.clone(),
                vec![WaitingForDependents, Dangling],
                true,
                false,
                Decision::Delete("Foreground"),
            ),
            (
                "waiting owner, no dependents: background",
                d.clone(),
                vec![WaitingForDependents, Dangling],
                false,
                false,
                Decision::Delete("Background"),
            ),
            (
                "cycle: unblock first",
                d.clone(),
                vec![WaitingForDependents, WaitingForDependents],
                true,
                true,
                Decision::UnblockThenDeleteForeground(vec!["a".into(), "b".into()]),
            ),
            (
                "being deleted in background: nothing",
                node("d", &[("a", true)], &[], true),
                vec![Dangling],
                false,
                false,
                Decision::Nothing,
            ),
            (
                "no owners",
                node("d", &[], &[], false),
                vec![],
                false,
                false,
                Decision::Nothing,
            ),
        ];
        for (what, item, states, has_deps, dep_del, want) in cases {
            assert_eq!(
                decide(&item, &refs(&item, &states), has_deps, dep_del),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn finalizer_steps() {
        let owner = node("o", &[], &[FOREGROUND], true);
        let blocking = node("b", &[("o", true)], &[], false);
        let nonblocking = node("n", &[("o", false)], &[], false);
        assert_eq!(
            finalizer_step(&owner, &[&blocking, &nonblocking]),
            FinalizerStep::WaitFor(vec!["b".into()])
        );
        assert_eq!(
            finalizer_step(&owner, &[&nonblocking]),
            FinalizerStep::RemoveForeground
        );
        assert_eq!(finalizer_step(&owner, &[]), FinalizerStep::RemoveForeground);
        let orphaner = node("o", &[], &[ORPHAN], true);
        assert_eq!(
            finalizer_step(&orphaner, &[&blocking]),
            FinalizerStep::Orphan(vec!["b".into()])
        );
        assert_eq!(
            finalizer_step(&node("o", &[], &[ORPHAN], false), &[&blocking]),
            FinalizerStep::Nothing
        );
    }

    #[test]
    fn graph_tracks_dependents() {
        let mut g = Graph::default();
        g.upsert(node("d1", &[("o", true)], &[], false));
        g.upsert(node("d2", &[("o", true)], &[], false));
        assert_eq!(g.dependents_of("o").len(), 2);
        // Re-parenting moves the edge.
        g.upsert(node("d2", &[("p", true)], &[], false));
        assert_eq!(g.dependents_of("o").len(), 1);
        assert_eq!(g.dependents_of("p").len(), 1);
        g.remove("d1");
        assert!(g.dependents_of("o").is_empty());
    }

    #[tokio::test]
    async fn a_dependent_gone_wakes_its_owner_waiting_in_the_foreground() {
        let graph = Mutex::new(Graph::default());
        let queue: WorkQueue<String> = WorkQueue::new("gc-test");
        GarbageCollector::observe(&graph, &queue, node("waiting", &[], &[FOREGROUND], true));
        GarbageCollector::observe(&graph, &queue, node("kept", &[], &[], false));
        GarbageCollector::observe(
            &graph,
            &queue,
            node("d", &[("waiting", true), ("kept", true)], &[], false),
        );
        while !queue.is_empty() {
            let item = queue.get().await.expect("queued");
            queue.done(&item);
        }
        GarbageCollector::forget(&graph, &queue, "d");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await.as_deref(), Some("waiting"));
    }
}
