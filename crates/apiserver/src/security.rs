//! Authorization wiring over the apiserver's own objects: the RBAC and Node
//! authorizers read Roles, ClusterRoles, bindings, pods and claims from the
//! registry's watch cache (never from storage per request), the
//! `--authorization-mode` chain, the bootstrap policy reconciled at start, and the
//! ClusterRole aggregation loop.
//!
//! Deviation: upstream aggregates ClusterRoles in kube-controller-manager's
//! `clusterrole-aggregation` controller through the API; here the apiserver runs
//! the same computation as a background task over its own store, so aggregated
//! roles (`admin`, `edit`, `view`) are complete even before any controller-manager
//! runs and without a client identity of their own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::labels::Selector;
use ferrokube_auth::bootstrap::{self, AUTOUPDATE_ANNOTATION};
use ferrokube_auth::node::{NodeAuthorizer, NodeGraph};
use ferrokube_auth::rbac::{self, RbacAuthorizer, RbacSnapshot, RbacSource};
use ferrokube_auth::{
    AlwaysAllowAuthorizer, AlwaysDenyAuthorizer, Attributes, AuthorizationMode, Decision,
    PrivilegedGroupsAuthorizer, UnionAuthorizer,
};
use ferrokube_registry::{
    ListParams, Registry, Store, UpdateInput, WatchParams, WriteOptions, meta,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::authz_webhook::{Authorization, Link};
use crate::features::Features;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The objects under one resource in the watch cache, with a cheap identity: the
/// cache hands out the same `Arc` for an object until it changes.
pub(crate) fn cached(store: &Store, sub_prefix: &str) -> Vec<Arc<Value>> {
    // Called by admission and authorization on every request: no `format!`.
    let base = store.info().storage_prefix;
    let mut prefix = String::with_capacity(base.len() + 1 + sub_prefix.len());
    prefix.push_str(base);
    prefix.push('/');
    prefix.push_str(sub_prefix);
    store.cache().snapshot(&prefix).0
}

/// Roles, bindings, pods and claims as the authorizers see them.
pub(crate) struct ClusterState {
    cluster_roles: Arc<Store>,
    roles: Arc<Store>,
    cluster_role_bindings: Arc<Store>,
    role_bindings: Arc<Store>,
    pods: Arc<Store>,
    claims: Arc<Store>,
    service_accounts: Arc<Store>,
    /// None when storage.k8s.io/v1 is not served.
    volume_attachments: Option<Arc<Store>>,
    /// The last snapshot and the object pointers it was built from.
    rbac: Mutex<Option<(Vec<usize>, Arc<RbacSnapshot>)>>,
    /// The `--feature-gates` this server acts on: the authorizers built over this
    /// state read them, and so does the rest of the server (one copy).
    pub(crate) features: Features,
}

impl ClusterState {
    pub(crate) fn new(registry: &Registry, features: Features) -> Result<Self, ApiError> {
        let store = |group: &str, plural: &str| {
            registry
                .store(group, "v1", plural)
                .cloned()
                .ok_or_else(|| ApiError::internal(format!("no store for {plural}")))
        };
        Ok(ClusterState {
            cluster_roles: store(RBAC_GROUP, "clusterroles")?,
            roles: store(RBAC_GROUP, "roles")?,
            cluster_role_bindings: store(RBAC_GROUP, "clusterrolebindings")?,
            role_bindings: store(RBAC_GROUP, "rolebindings")?,
            pods: store("", "pods")?,
            claims: store("", "persistentvolumeclaims")?,
            service_accounts: store("", "serviceaccounts")?,
            volume_attachments: registry
                .store("storage.k8s.io", "v1", "volumeattachments")
                .cloned(),
            rbac: Mutex::new(None),
            features,
        })
    }

    /// A service account from the watch cache.
    pub(crate) fn service_account(&self, namespace: &str, name: &str) -> Option<Value> {
        cached(&self.service_accounts, &format!("{namespace}/{name}"))
            .into_iter()
            .find(|o| o["metadata"]["name"].as_str() == Some(name))
            .map(|o| (*o).clone())
    }
}

fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    T::deserialize(v).ok()
}

impl RbacSource for ClusterState {
    fn snapshot(&self) -> Arc<RbacSnapshot> {
        let parts = [
            cached(&self.cluster_roles, ""),
            cached(&self.roles, ""),
            cached(&self.cluster_role_bindings, ""),
            cached(&self.role_bindings, ""),
        ];
        let fingerprint: Vec<usize> = parts
            .iter()
            .flat_map(|p| p.iter().map(|o| Arc::as_ptr(o) as usize).chain([0]))
            .collect();
        let mut last = self.rbac.lock();
        if let Some((fp, snap)) = last.as_ref()
            && *fp == fingerprint
        {
            return snap.clone();
        }
        let [cluster_roles, roles, crbs, rbs] = parts;
        let mut snap = RbacSnapshot::default();
        cluster_roles
            .iter()
            .filter_map(|o| typed::<ClusterRole>(o))
            .for_each(|r| snap.add_cluster_role(r));
        roles
            .iter()
            .filter_map(|o| typed::<Role>(o))
            .for_each(|r| snap.add_role(r));
        crbs.iter()
            .filter_map(|o| typed::<ClusterRoleBinding>(o))
            .for_each(|b| snap.add_cluster_role_binding(b));
        rbs.iter()
            .filter_map(|o| typed::<RoleBinding>(o))
            .for_each(|b| snap.add_role_binding(b));
        let snap = Arc::new(snap);
        *last = Some((fingerprint, snap.clone()));
        snap
    }
}

impl NodeGraph for ClusterState {
    fn pods_on_node(&self, node: &str, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let sub = namespace.map(|ns| format!("{ns}/")).unwrap_or_default();
        cached(&self.pods, &sub)
            .into_iter()
            .filter(|p| p["spec"]["nodeName"].as_str() == Some(node))
            .collect()
    }

    fn persistent_volume_claim(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        cached(&self.claims, &format!("{namespace}/{name}"))
            .into_iter()
            .find(|c| c["metadata"]["name"].as_str() == Some(name))
    }

    fn volume_attachment(&self, name: &str) -> Option<Arc<Value>> {
        cached(self.volume_attachments.as_ref()?, name)
            .into_iter()
            .find(|va| va["metadata"]["name"].as_str() == Some(name))
    }
}

/// Lets a shared `Arc<ClusterState>` serve as the authorizers' source.
#[derive(Clone)]
pub(crate) struct Shared(pub Arc<ClusterState>);

impl RbacSource for Shared {
    fn snapshot(&self) -> Arc<RbacSnapshot> {
        self.0.snapshot()
    }
}

impl NodeGraph for Shared {
    fn pods_on_node(&self, node: &str, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.0.pods_on_node(node, namespace)
    }
    fn persistent_volume_claim(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.0.persistent_volume_claim(namespace, name)
    }
    fn volume_attachment(&self, name: &str) -> Option<Arc<Value>> {
        self.0.volume_attachment(name)
    }
}

/// The synchronous authorizer of an authorization mode (None for `Webhook`, which
/// the caller builds from its configuration).
pub(crate) fn mode_authorizer(
    mode: AuthorizationMode,
    state: &Arc<ClusterState>,
) -> Option<Box<dyn ferrokube_auth::Authorizer>> {
    match mode {
        AuthorizationMode::AlwaysAllow => Some(Box::new(AlwaysAllowAuthorizer)),
        AuthorizationMode::AlwaysDeny => Some(Box::new(AlwaysDenyAuthorizer)),
        AuthorizationMode::Node => Some(Box::new(
            NodeAuthorizer::new(Shared(state.clone()), bootstrap::node_rules())
                .narrowing_pods_and_nodes(state.features.authorize_node_with_selectors),
        )),
        AuthorizationMode::Rbac => Some(Box::new(RbacAuthorizer::new(Shared(state.clone())))),
        AuthorizationMode::Webhook => None,
    }
}

/// The chain: `system:masters` first, then `links` in order (configured as `modes`).
pub(crate) fn authorizer_chain(
    links: Vec<Link>,
    modes: Vec<AuthorizationMode>,
    features: Features,
) -> Authorization {
    Authorization::new(
        UnionAuthorizer::default().push(PrivilegedGroupsAuthorizer::system_masters()),
        links,
        modes,
    )
    .with_selectors(features.authorize_with_selectors)
}

pub(crate) fn to_value<T: serde::Serialize>(t: &T) -> Result<Value, ApiError> {
    serde_json::to_value(t).map_err(|e| ApiError::internal(e.to_string()))
}

fn autoupdate_off(existing: &Value) -> bool {
    existing["metadata"]["annotations"][AUTOUPDATE_ANNOTATION].as_str() == Some("false")
}

/// Adds the labels and annotations of `expected` that `existing` lacks.
fn merge_meta(existing: &mut Value, expected: &Value) -> bool {
    let mut changed = false;
    for field in ["labels", "annotations"] {
        let Some(want) = expected["metadata"][field].as_object() else {
            continue;
        };
        let have = &mut existing["metadata"][field];
        if !have.is_object() {
            *have = json!({});
        }
        for (k, v) in want {
            if have.get(k).is_none() {
                have[k] = v.clone();
                changed = true;
            }
        }
    }
    changed
}

fn rules_of(v: &Value) -> Vec<PolicyRule> {
    v.get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

/// Upstream's role reconciliation without removing extra permissions: missing
/// labels, annotations and (atomic) rules are added; aggregated roles get the
/// expected selectors added and their rules left to aggregation.
fn reconcile_role(existing: &Value, expected: &Value) -> Option<Value> {
    let mut out = existing.clone();
    let mut changed = merge_meta(&mut out, expected);
    if let Some(selectors) = expected["aggregationRule"]["clusterRoleSelectors"].as_array() {
        let have = out["aggregationRule"]["clusterRoleSelectors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut merged = have.clone();
        for s in selectors {
            if !merged.contains(s) {
                merged.push(s.clone());
            }
        }
        if merged != have {
            out["aggregationRule"] = json!({"clusterRoleSelectors": merged});
            changed = true;
        }
    } else {
        let have = rules_of(existing);
        let (covered, missing) = rbac::covers(&have, &rules_of(expected));
        if !covered {
            let mut rules = have;
            rules.extend(missing);
            out["rules"] = serde_json::to_value(rules).unwrap_or(Value::Null);
            changed = true;
        }
    }
    changed.then_some(out)
}

/// Missing subjects are added; a changed roleRef means delete and recreate.
enum BindingPlan {
    Keep,
    Update(Value),
    Recreate,
}

fn reconcile_binding(existing: &Value, expected: &Value) -> BindingPlan {
    if existing["roleRef"] != expected["roleRef"] {
        return BindingPlan::Recreate;
    }
    let mut out = existing.clone();
    let mut changed = merge_meta(&mut out, expected);
    let have = existing["subjects"].as_array().cloned().unwrap_or_default();
    let mut subjects = have.clone();
    for s in expected["subjects"].as_array().into_iter().flatten() {
        let same = |h: &Value| {
            h["kind"] == s["kind"] && h["name"] == s["name"] && h["namespace"] == s["namespace"]
        };
        if !subjects.iter().any(same) {
            subjects.push(s.clone());
        }
    }
    if subjects != have {
        out["subjects"] = Value::Array(subjects);
        changed = true;
    }
    if changed {
        BindingPlan::Update(out)
    } else {
        BindingPlan::Keep
    }
}

/// An object's (namespace, name); the namespace is empty for a cluster-scoped one.
fn object_key(obj: &Value) -> (String, String) {
    (
        meta::namespace(obj).to_string(),
        meta::name(obj).to_string(),
    )
}

/// The objects a store holds now, by [`object_key`]: one consistent LIST instead of a
/// read per bootstrap object.
pub(crate) async fn existing_objects(
    store: &Store,
) -> Result<HashMap<(String, String), Value>, ApiError> {
    let listed = store.list(None, &ListParams::default()).await?;
    Ok(listed
        .items
        .iter()
        .map(|item| (object_key(item.value()), Value::clone(item.value())))
        .collect())
}

/// Creates `expected`, or reconciles `existing` (the stored object) towards it.
async fn ensure_object(
    store: &Store,
    expected: Value,
    existing: Option<Value>,
    binding: bool,
) -> Result<(), ApiError> {
    let (ns, name) = object_key(&expected);
    let ns = Some(ns).filter(|ns| !ns.is_empty());
    let opts = WriteOptions::default();
    let Some(existing) = existing else {
        return match store.create(ns.as_deref(), expected, &opts).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        };
    };
    if autoupdate_off(&existing) {
        return Ok(());
    }
    let update = if binding {
        match reconcile_binding(&existing, &expected) {
            BindingPlan::Keep => None,
            BindingPlan::Update(v) => Some(v),
            BindingPlan::Recreate => {
                store
                    .delete(ns.as_deref(), &name, &Default::default())
                    .await?;
                store.create(ns.as_deref(), expected, &opts).await?;
                return Ok(());
            }
        }
    } else {
        reconcile_role(&existing, &expected)
    };
    if let Some(v) = update {
        store
            .update(
                ns.as_deref(),
                &name,
                UpdateInput::Replace(v),
                ferrokube_registry::Part::Main,
                &opts,
            )
            .await?;
    }
    Ok(())
}

/// How many bootstrap objects are written at once at start.
const BOOTSTRAP_WRITES_IN_FLIGHT: usize = 64;

/// Creates or reconciles every bootstrap role and binding (upstream's
/// `ensureRBACPolicy` post-start hook, run before serving here).
pub(crate) async fn reconcile_bootstrap_policy(registry: &Registry) -> Result<(), ApiError> {
    let store = |plural: &str| {
        registry
            .store(RBAC_GROUP, "v1", plural)
            .cloned()
            .ok_or_else(|| ApiError::internal(format!("no store for {plural}")))
    };
    let (cr, crb, r, rb) = (
        store("clusterroles")?,
        store("clusterrolebindings")?,
        store("roles")?,
        store("rolebindings")?,
    );
    // Every object is independent of the others, so they are written concurrently:
    // the store group-commits concurrent writes, and a fresh store's start waits on
    // a handful of commits instead of one per object (about 180 of them). What exists
    // is read with one LIST per store, not one read each: concurrent reads would open
    // read connections (and threads) that an idle apiserver then keeps.
    let mut wanted: Vec<(&Store, Value, bool)> = Vec::new();
    for role in bootstrap::cluster_roles()
        .iter()
        .chain(&bootstrap::controller_roles())
    {
        wanted.push((&cr, to_value(role)?, false));
    }
    for b in bootstrap::cluster_role_bindings()
        .iter()
        .chain(&bootstrap::controller_role_bindings())
        .chain(&bootstrap::controller_manager_bindings())
    {
        wanted.push((&crb, to_value(b)?, true));
    }
    for role in bootstrap::namespace_roles() {
        wanted.push((&r, to_value(&role)?, false));
    }
    for b in bootstrap::namespace_role_bindings() {
        wanted.push((&rb, to_value(&b)?, true));
    }
    let mut existing = HashMap::new();
    for store in [&cr, &crb, &r, &rb] {
        existing.insert(store.info().plural, existing_objects(store).await?);
    }
    let writes = wanted.into_iter().map(|(store, expected, binding)| {
        let stored = existing
            .get_mut(store.info().plural)
            .and_then(|objects| objects.remove(&object_key(&expected)));
        ensure_object(store, expected, stored, binding)
    });
    futures::stream::iter(writes)
        .buffer_unordered(BOOTSTRAP_WRITES_IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    // Serve only once the authorizers (which read the watch cache) see the policy,
    // as upstream's readyz waits for its rbac/bootstrap-roles post-start hook.
    let revision = registry
        .storage()
        .current_revision()
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    for store in [&cr, &crb, &r, &rb] {
        store
            .cache()
            .wait_for(revision, Duration::from_secs(30))
            .await?;
    }
    Ok(())
}

/// The rules an aggregated ClusterRole should have: the rules of every other
/// ClusterRole matching one of its selectors, by role name, without duplicates
/// (upstream `ClusterRoleAggregationController.syncClusterRole`).
pub(crate) fn aggregated_rules(role: &Value, all: &[Arc<Value>]) -> Option<Vec<Value>> {
    let selectors = role["aggregationRule"]["clusterRoleSelectors"].as_array()?;
    let selectors: Vec<Selector> = selectors
        .iter()
        .filter_map(|s| serde_json::from_value(s.clone()).ok())
        .filter_map(|ls| Selector::from_label_selector(&ls).ok())
        .collect();
    let name = &role["metadata"]["name"];
    let mut matching: Vec<&Arc<Value>> = all
        .iter()
        .filter(|o| o["metadata"]["name"] != *name)
        .filter(|o| {
            let labels: BTreeMap<String, String> = o["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default();
            selectors.iter().any(|s| s.matches(&labels))
        })
        .collect();
    matching.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    let mut rules: Vec<Value> = Vec::new();
    for o in matching {
        for r in o["rules"].as_array().into_iter().flatten() {
            if !rules.contains(r) {
                rules.push(r.clone());
            }
        }
    }
    Some(rules)
}

/// One pass over every aggregated ClusterRole; returns how many were updated.
async fn aggregate_once(store: &Store) -> usize {
    let all = cached(store, "");
    let mut updated = 0;
    for role in &all {
        let Some(rules) = aggregated_rules(role, &all) else {
            continue;
        };
        let have = role["rules"].as_array().cloned().unwrap_or_default();
        if have == rules {
            continue;
        }
        let name = role["metadata"]["name"].as_str().unwrap_or("");
        let patch = json!({"rules": rules});
        match store
            .update(
                None,
                name,
                UpdateInput::Patch(ferrokube_registry::PatchType::Merge, patch),
                ferrokube_registry::Part::Main,
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => updated += 1,
            Err(e) => tracing::warn!(role = name, error = %e, "aggregating ClusterRole failed"),
        }
    }
    updated
}

/// Keeps aggregated ClusterRoles up to date until `shutdown` turns true.
pub(crate) async fn run_aggregation(store: Arc<Store>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let mut rx = match store.watch(None, &WatchParams::default()).await {
            Ok(rx) => rx,
            Err(e) => {
                tracing::warn!(error = %e, "watching ClusterRoles for aggregation failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        aggregate_once(&store).await;
        loop {
            tokio::select! {
                item = rx.recv() => {
                    if item.is_none() {
                        break;
                    }
                    // Let a burst of changes settle, then aggregate once.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    while rx.try_recv().is_ok() {}
                    if *shutdown.borrow() {
                        return;
                    }
                    aggregate_once(&store).await;
                }
                r = shutdown.changed() => {
                    if r.is_err() || *shutdown.borrow() {
                        return;
                    }
                }
            }
        }
    }
}

/// The 403 of a request the authorizers did not allow, with upstream's message
/// (`forbiddenMessage` in `endpoints/handlers/responsewriters`).
pub(crate) fn forbidden(attrs: &Attributes, decision: &Decision) -> ApiError {
    let user = &attrs.user.name;
    let mut message = if !attrs.resource_request {
        format!("User {user:?} cannot {} path {:?}", attrs.verb, attrs.path)
    } else {
        let mut resource = attrs.resource.clone();
        if !attrs.subresource.is_empty() {
            resource = format!("{resource}/{}", attrs.subresource);
        }
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", attrs.namespace)
        };
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
            attrs.verb, attrs.api_group
        )
    };
    // Upstream keeps what looks like HTML out of the message; quotes may stay.
    message = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let reason = decision.reason();
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    if attrs.resource_request {
        ApiError::forbidden(&attrs.api_group, &attrs.resource, &attrs.name, message)
    } else {
        ApiError::forbidden("", "", "", message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregation_unions_matching_roles_in_name_order() {
        let agg = json!({"metadata": {"name": "view"}, "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"agg": "true"}}]}});
        let b = Arc::new(json!({"metadata": {"name": "b", "labels": {"agg": "true"}},
            "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}));
        let a = Arc::new(json!({"metadata": {"name": "a", "labels": {"agg": "true"}},
            "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]},
                      {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}));
        let other = Arc::new(json!({"metadata": {"name": "c"}, "rules": [{"verbs": ["*"]}]}));
        let rules = aggregated_rules(&agg, &[b, a, other, Arc::new(agg.clone())]).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0]["verbs"], json!(["list"]));
        assert!(aggregated_rules(&json!({"metadata": {}}), &[]).is_none());
    }

    #[test]
    fn reconciliation_adds_without_removing() {
        let expected = json!({"metadata": {"name": "r", "labels": {"l": "1"}, "annotations": {AUTOUPDATE_ANNOTATION: "true"}},
            "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]});
        let existing = json!({"metadata": {"name": "r", "labels": {"mine": "x"}},
            "rules": [{"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}]});
        let out = reconcile_role(&existing, &expected).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"mine": "x", "l": "1"}));
        let rules = out["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1]["verbs"], json!(["list"]));
        assert!(reconcile_role(&out, &expected).is_none());

        let eb = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "Group", "name": "g"}]});
        let have = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "User", "name": "u"}]});
        match reconcile_binding(&have, &eb) {
            BindingPlan::Update(v) => assert_eq!(v["subjects"].as_array().unwrap().len(), 2),
            _ => panic!("expected an update"),
        }
        let moved =
            json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "x"}});
        assert!(matches!(
            reconcile_binding(&moved, &eb),
            BindingPlan::Recreate
        ));
        assert!(autoupdate_off(
            &json!({"metadata": {"annotations": {AUTOUPDATE_ANNOTATION: "false"}}})
        ));
    }
}
