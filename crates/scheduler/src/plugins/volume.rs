//! VolumeBinding and VolumeRestrictions (upstream `plugins/volumebinding` and
//! `volumerestrictions`):
//! - claims must exist and not be terminating or Lost; unbound `Immediate` claims
//!   block scheduling (the binder controller binds them). A generic ephemeral volume is
//!   its claim `<pod>-<volume>`, which must be the pod's (the ephemeral volume
//!   controller creates it; until then the pod waits);
//! - a bound claim's volume must be reachable from the node (its node affinity);
//! - an unbound `WaitForFirstConsumer` claim needs, on the node, an Available volume
//!   that fits it (the smallest, as the binder controller would choose) or a class
//!   whose provisioner can create one there (not `kubernetes.io/no-provisioner`, its
//!   allowedTopologies admitting the node). Reserve assumes the choice so that pods
//!   in flight do not take the same volume; PreBind writes it (the volume's
//!   `claimRef`, or the claim's `volume.kubernetes.io/selected-node` for its
//!   provisioner) and waits, up to `bindTimeoutSeconds`, for the claims to be Bound;
//! - a ReadWriteOncePod claim may be used by one pod only (as upstream, among the
//!   claims pods name in `persistentVolumeClaim`; the snapshot counts the ephemeral
//!   ones as used too).
//!
//! Deviations: no CSIStorageCapacity checks and no StorageCapacityScoring.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_api::ephemeral;
use ferrokube_api::persistentvolume::{NOT_SUPPORTED_PROVISIONER, find_matching_volume};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use parking_lot::Mutex;
use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::*;
use crate::status::{Code, Status};
use crate::types::{PodInfo, node_selector_matches, pod_namespace};

pub const VOLUME_BINDING: &str = "VolumeBinding";
pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
pub const ERR_REASON_RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

/// How often PreBind looks whether the claims it set up are bound.
const BOUND_POLL: Duration = Duration::from_millis(200);

/// The claims of the pod's `persistentVolumeClaim` volumes (what VolumeRestrictions
/// reads, as upstream).
fn claim_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
        })
        .collect()
}

/// Every claim the pod's volumes use, with whether it is an ephemeral volume's (upstream
/// `podHasPVCs` / `GetPodVolumeClaims`).
fn pod_claims(pod: &Pod) -> Vec<(String, bool)> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| ephemeral::claim_of_volume(pod, v))
        .collect()
}

/// Upstream `podHasPVCs`' checks of one claim: it exists (an ephemeral volume's claim
/// may not have been created yet), is not Lost or being deleted, and for an ephemeral
/// volume is the pod's. The error is upstream's message.
fn usable_claim(
    lister: &dyn ClusterLister,
    pod: &Pod,
    name: &str,
    is_ephemeral: bool,
) -> Result<Arc<PersistentVolumeClaim>, String> {
    let Some(pvc) = lister.pvc(pod_namespace(pod), name) else {
        return Err(if is_ephemeral {
            format!(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{name}\""
            )
        } else {
            format!("persistentvolumeclaim \"{name}\" not found")
        });
    };
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
        return Err(format!(
            "persistentvolumeclaim \"{name}\" bound to non-existent persistentvolume \"{}\"",
            pvc.spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or_default()
        ));
    }
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err(format!("persistentvolumeclaim \"{name}\" is being deleted"));
    }
    if is_ephemeral {
        ephemeral::volume_is_for_pod(pod, &pvc)?;
    }
    Ok(pvc)
}

/// `VolumeBindingArgs`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the claims to be bound (upstream default 600).
    pub bind_timeout_seconds: Option<i64>,
}

/// What PreBind does for one unbound `WaitForFirstConsumer` claim.
#[derive(Debug, Clone)]
enum Decision {
    /// Bind it to this existing volume.
    Bind {
        claim: Arc<PersistentVolumeClaim>,
        volume: Arc<PersistentVolume>,
    },
    /// Ask its provisioner for a volume on the chosen node.
    Provision { claim: Arc<PersistentVolumeClaim> },
}

impl Decision {
    fn volume(&self) -> Option<&str> {
        match self {
            Decision::Bind { volume, .. } => volume.metadata.name.as_deref(),
            Decision::Provision { .. } => None,
        }
    }
}

pub struct VolumeBinding {
    lister: Arc<dyn ClusterLister>,
    binder: Option<Arc<dyn VolumeBinder>>,
    bind_timeout: Duration,
    /// Decisions of pods between Reserve and the end of PreBind, by pod uid (upstream's
    /// assume cache): their volumes are taken for every other pod meanwhile.
    assumed: Mutex<HashMap<String, Vec<Decision>>>,
}

impl std::fmt::Debug for VolumeBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VolumeBinding")
    }
}

impl VolumeBinding {
    pub fn new(
        args: VolumeBindingArgs,
        lister: Arc<dyn ClusterLister>,
        binder: Option<Arc<dyn VolumeBinder>>,
    ) -> Self {
        let seconds = args.bind_timeout_seconds.unwrap_or(600).max(0);
        VolumeBinding {
            lister,
            binder,
            bind_timeout: Duration::from_secs(seconds as u64),
            assumed: Mutex::new(HashMap::new()),
        }
    }

    /// Volumes other pods in flight have been given.
    fn assumed_volumes(&self, except_pod: &str) -> HashSet<String> {
        self.assumed
            .lock()
            .iter()
            .filter(|(uid, _)| uid.as_str() != except_pod)
            .flat_map(|(_, ds)| ds.iter().filter_map(|d| d.volume().map(str::to_string)))
            .collect()
    }

    /// The decisions for `claims` on `node`, or the reason the node cannot have them.
    fn decide(
        &self,
        pod_uid: &str,
        claims: &[Arc<PersistentVolumeClaim>],
        node: &Node,
    ) -> Result<Vec<Decision>, Status> {
        let volumes = self.lister.pvs();
        let mut taken = self.assumed_volumes(pod_uid);
        let mut decisions = Vec::new();
        for claim in claims {
            let found = find_matching_volume(
                claim,
                volumes.iter().map(|v| v.as_ref()),
                Some(node),
                &|name| taken.contains(name),
                false,
            )
            .map_err(Status::error)?;
            if let Some(volume) = found {
                let name = volume.metadata.name.clone().unwrap_or_default();
                let volume = volumes
                    .iter()
                    .find(|v| v.metadata.name.as_deref() == Some(name.as_str()))
                    .cloned()
                    .expect("the match is one of the listed volumes");
                taken.insert(name);
                decisions.push(Decision::Bind {
                    claim: claim.clone(),
                    volume,
                });
            } else if self.can_provision(claim, node) {
                decisions.push(Decision::Provision {
                    claim: claim.clone(),
                });
            } else {
                return Err(Status::unresolvable(ERR_REASON_BIND_CONFLICT));
            }
        }
        Ok(decisions)
    }

    /// `checkVolumeProvisions`: the claim's class has a provisioner and admits the node.
    fn can_provision(&self, claim: &PersistentVolumeClaim, node: &Node) -> bool {
        let class = ferrokube_api::persistentvolume::claim_class(claim);
        let Some(class) = self.lister.storage_class(class) else {
            return false;
        };
        class.provisioner != NOT_SUPPORTED_PROVISIONER && topology_admits(&class, node)
    }

    /// Whether every claim the pod uses is bound, as far as the informers have seen.
    fn claims_bound(&self, pod: &Pod) -> Result<bool, String> {
        for (name, is_ephemeral) in pod_claims(pod) {
            let claim = usable_claim(&*self.lister, pod, &name, is_ephemeral)?;
            let bound = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_some_and(|v| !v.is_empty())
                && claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            if !bound {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// `MatchTopologySelectorTerms`: no terms admit every node; otherwise some term's every
/// label requirement must hold.
fn topology_admits(class: &StorageClass, node: &Node) -> bool {
    let Some(terms) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let empty = std::collections::BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    terms.iter().any(|term| {
        term.match_label_expressions
            .iter()
            .flatten()
            .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
    })
}

#[derive(Debug, Clone, Default)]
struct BindingState {
    /// PV names of the pod's bound claims.
    bound_pvs: Vec<String>,
    /// Unbound WaitForFirstConsumer claims.
    delayed: Vec<Arc<PersistentVolumeClaim>>,
    /// What Filter decided for the delayed claims on each feasible node, for Reserve.
    by_node: Arc<Mutex<HashMap<String, Vec<Decision>>>>,
}

const BINDING_KEY: &str = "PreFilterVolumeBinding";

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let claims = pod_claims(&pod.pod);
        if claims.is_empty() {
            return (None, Status::skip());
        }
        // Every claim is checked before any is looked at for binding, as upstream's
        // podHasPVCs runs first: a missing claim is the reason given.
        let pvcs: Result<Vec<_>, String> = claims
            .iter()
            .map(|(n, is_ephemeral)| usable_claim(&*self.lister, &pod.pod, n, *is_ephemeral))
            .collect();
        let pvcs = match pvcs {
            Ok(pvcs) => pvcs,
            Err(e) => return (None, Status::unresolvable(e)),
        };
        let mut st = BindingState::default();
        for pvc in pvcs {
            match pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|v| !v.is_empty())
            {
                Some(pv) => st.bound_pvs.push(pv),
                None => {
                    let mode = self
                        .lister
                        .storage_class(ferrokube_api::persistentvolume::claim_class(&pvc))
                        .and_then(|sc| sc.volume_binding_mode.clone())
                        .unwrap_or_else(|| "Immediate".into());
                    if mode == "WaitForFirstConsumer" {
                        st.delayed.push(pvc);
                    } else {
                        return (None, Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE));
                    }
                }
            }
        }
        state.write(BINDING_KEY, st);
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<BindingState>(BINDING_KEY) else {
            return Status::success();
        };
        for pv in &st.bound_pvs {
            let Some(pv) = self.lister.pv(pv) else {
                return Status::unresolvable(format!("persistentvolume \"{pv}\" not found"));
            };
            if let Some(req) = pv
                .spec
                .as_ref()
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref())
                && !node_selector_matches(req, node.node())
            {
                return Status::unresolvable(ERR_REASON_NODE_CONFLICT);
            }
        }
        if st.delayed.is_empty() {
            return Status::success();
        }
        match self.decide(pod.uid(), &st.delayed, node.node()) {
            Ok(decisions) => {
                let name = node.node().metadata.name.clone().unwrap_or_default();
                st.by_node.lock().insert(name, decisions);
                Status::success()
            }
            Err(status) => status,
        }
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(st) = state.read::<BindingState>(BINDING_KEY) else {
            return Status::success();
        };
        let Some(decisions) = st.by_node.lock().remove(node) else {
            return Status::success();
        };
        // Another pod may have reserved one of these volumes since this pod's Filter.
        let mut assumed = self.assumed.lock();
        let taken: HashSet<&str> = assumed
            .iter()
            .filter(|(uid, _)| uid.as_str() != pod.uid())
            .flat_map(|(_, ds)| ds.iter().filter_map(Decision::volume))
            .collect();
        if let Some(v) = decisions
            .iter()
            .filter_map(Decision::volume)
            .find(|v| taken.contains(v))
        {
            return Status::with_reasons(
                Code::Unschedulable,
                vec![format!(
                    "persistentvolume {v:?} was assumed for another pod"
                )],
            );
        }
        assumed.insert(pod.uid().to_string(), decisions);
        Status::success()
    }

    fn unreserve(&self, _: &mut CycleState, pod: &PodInfo, _: &str) {
        self.assumed.lock().remove(pod.uid());
    }
}

#[async_trait::async_trait]
impl PreBindPlugin for VolumeBinding {
    async fn pre_bind(&self, pod: &PodInfo, node: &str) -> Status {
        let decisions = self.assumed.lock().get(pod.uid()).cloned();
        let Some(decisions) = decisions else {
            return Status::success();
        };
        let Some(binder) = &self.binder else {
            return Status::error("no API client to bind volumes with");
        };
        for d in &decisions {
            let written = match d {
                Decision::Bind { claim, volume } => binder.bind_volume(volume, claim).await,
                Decision::Provision { claim } => binder.select_node(claim, node).await,
            };
            if let Err(e) = written {
                self.assumed.lock().remove(pod.uid());
                return Status::error(format!("binding volumes: {e}"));
            }
        }
        // The binder controller (or the provisioner, then the controller) finishes the
        // binding; the pod goes to its node only with its claims bound.
        let deadline = Instant::now() + self.bind_timeout;
        let outcome = loop {
            match self.claims_bound(&pod.pod) {
                Ok(true) => break Status::success(),
                Ok(false) if Instant::now() < deadline => tokio::time::sleep(BOUND_POLL).await,
                Ok(false) => {
                    break Status::error("binding volumes: context deadline exceeded");
                }
                Err(e) => break Status::error(format!("binding volumes: {e}")),
            }
        };
        self.assumed.lock().remove(pod.uid());
        outcome
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        VOLUME_BINDING
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::PersistentVolumeClaim,
                ActionType::All,
                "PVCChange",
            )),
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::PersistentVolume,
                ActionType::All,
                "PVChange",
            )),
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::StorageClass,
                ActionType::All,
                "StorageClassChange",
            )),
            ClusterEventWithHint::always(EVENT_NODE_ADD),
            ClusterEventWithHint::always(EVENT_NODE_UPDATE),
        ]
    }
}

pub struct VolumeRestrictions {
    pub lister: Arc<dyn ClusterLister>,
}

impl std::fmt::Debug for VolumeRestrictions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VolumeRestrictions")
    }
}

fn is_rwop(pvc: &PersistentVolumeClaim) -> bool {
    pvc.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .is_some_and(|m| m.iter().any(|x| x == "ReadWriteOncePod"))
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let names = claim_names(&pod.pod);
        if names.is_empty() {
            return (None, Status::skip());
        }
        let ns = pod_namespace(&pod.pod);
        for n in names {
            if let Some(pvc) = self.lister.pvc(ns, &n)
                && is_rwop(&pvc)
                && snap.used_pvcs.contains(&format!("{ns}/{n}"))
            {
                return (None, Status::unresolvable(ERR_REASON_RWOP_CONFLICT));
            }
        }
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        Status::success()
    }
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        VOLUME_RESTRICTIONS
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::always(EVENT_ASSIGNED_POD_DELETE),
            ClusterEventWithHint::always(ClusterEvent::new(
                EventResource::PersistentVolumeClaim,
                ActionType::All,
                "PVCChange",
            )),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::json;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Fake {
        pvcs: HashMap<String, Arc<PersistentVolumeClaim>>,
        pvs: HashMap<String, Arc<PersistentVolume>>,
        scs: HashMap<String, Arc<StorageClass>>,
    }
    impl ClusterLister for Fake {
        fn pvc(&self, ns: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.pvcs.get(&format!("{ns}/{name}")).cloned()
        }
        fn pvs(&self) -> Vec<Arc<PersistentVolume>> {
            let mut all: Vec<_> = self.pvs.values().cloned().collect();
            all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            all
        }
        fn pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
            self.pvs.get(name).cloned()
        }
        fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>> {
            self.scs.get(name).cloned()
        }
    }

    fn with_claim(name: &str, claim: &str) -> Arc<Pod> {
        pod(
            name,
            json!({"spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}}),
        )
    }

    fn lister() -> Arc<Fake> {
        let mut f = Fake::default();
        let pvc = |v: serde_json::Value| {
            Arc::new(serde_json::from_value::<PersistentVolumeClaim>(v).unwrap())
        };
        f.pvcs.insert(
            "default/bound".into(),
            pvc(json!({"metadata": {"name": "bound"}, "spec": {"volumeName": "pv1"}})),
        );
        f.pvcs.insert(
            "default/unbound".into(),
            pvc(json!({"metadata": {"name": "unbound"}, "spec": {}})),
        );
        f.pvcs.insert(
            "default/wffc".into(),
            pvc(json!({"metadata": {"name": "wffc"}, "spec": {"storageClassName": "late"}})),
        );
        f.pvcs.insert("default/rwop".into(), pvc(json!({"metadata": {"name": "rwop"}, "spec": {"accessModes": ["ReadWriteOncePod"], "volumeName": "pv1"}})));
        f.pvs.insert(
            "pv1".into(),
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "pv1"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}))
                .unwrap(),
            ),
        );
        f.scs.insert(
            "late".into(),
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "late"}, "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer"})).unwrap()),
        );
        Arc::new(f)
    }

    #[test]
    fn volume_binding() {
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), lister(), None);
        let snap = snapshot(vec![
            (node("n1", json!({})), vec![]),
            (node("n2", json!({})), vec![]),
        ]);
        let got = filter_all(&vb, &with_claim("p", "bound"), &snap);
        assert!(got[0].1.is_success());
        assert_eq!(got[1].1.message(), ERR_REASON_NODE_CONFLICT);
        let got = filter_all(&vb, &with_claim("p", "unbound"), &snap);
        assert_eq!(got[0].1.message(), ERR_REASON_UNBOUND_IMMEDIATE);
        let got = filter_all(&vb, &with_claim("p", "missing"), &snap);
        assert_eq!(
            got[0].1.message(),
            "persistentvolumeclaim \"missing\" not found"
        );
        assert!(
            filter_all(&vb, &with_claim("p", "wffc"), &snap)
                .iter()
                .all(|(_, s)| s.is_success())
        );
    }

    /// A lister with one local volume on `n1` and a claim for it in a
    /// WaitForFirstConsumer class without a provisioner; `bound` makes the claim Bound.
    fn local_volumes(bound: bool) -> Arc<Fake> {
        let mut f = Fake::default();
        let mut claim = json!({"metadata": {"name": "data", "namespace": "default", "uid": "c1"},
            "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}});
        if bound {
            claim["spec"]["volumeName"] = json!("local-n1");
            claim["status"] = json!({"phase": "Bound"});
        }
        f.pvcs.insert(
            "default/data".into(),
            Arc::new(serde_json::from_value(claim).unwrap()),
        );
        f.pvcs.insert(
            "default/fast".into(),
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "fast", "namespace": "default"},
                "spec": {"storageClassName": "late", "resources": {"requests": {"storage": "1Gi"}}}})).unwrap()),
        );
        f.pvs.insert(
            "local-n1".into(),
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "local-n1", "resourceVersion": "7"},
                "spec": {"storageClassName": "local", "capacity": {"storage": "5Gi"},
                         "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/disk"},
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}},
                "status": {"phase": "Available"}})).unwrap()),
        );
        f.scs.insert(
            "local".into(),
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "local"},
                "provisioner": NOT_SUPPORTED_PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer"})).unwrap()),
        );
        f.scs.insert(
            "late".into(),
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "late"}, "provisioner": "x",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "kubernetes.io/hostname", "values": ["n2"]}]}]}))
                .unwrap(),
            ),
        );
        Arc::new(f)
    }

    /// What PreBind asked the API for.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl VolumeBinder for Recorded {
        async fn bind_volume(
            &self,
            volume: &PersistentVolume,
            claim: &PersistentVolumeClaim,
        ) -> Result<(), String> {
            self.0.lock().push(format!(
                "bind {} to {}",
                volume.metadata.name.as_deref().unwrap_or(""),
                claim.metadata.name.as_deref().unwrap_or("")
            ));
            Ok(())
        }
        async fn select_node(
            &self,
            claim: &PersistentVolumeClaim,
            node: &str,
        ) -> Result<(), String> {
            self.0.lock().push(format!(
                "provision {} on {node}",
                claim.metadata.name.as_deref().unwrap_or("")
            ));
            Ok(())
        }
    }

    /// PreFilter, Filter on `node` and Reserve there, as the scheduler runs them.
    fn reserve_on(vb: &VolumeBinding, pod: &Arc<Pod>, snap: &Snapshot, node: &str) -> Status {
        let info = pi(pod);
        let mut state = CycleState::new();
        let (_, s) = PreFilterPlugin::pre_filter(vb, &mut state, &info, snap);
        assert!(s.is_success(), "{}", s.message());
        let n = snap
            .node_info_list
            .iter()
            .find(|n| n.name() == node)
            .unwrap();
        let s = FilterPlugin::filter(vb, &state, &info, n);
        if !s.is_success() {
            return s;
        }
        ReservePlugin::reserve(vb, &mut state, &info, node)
    }

    #[test]
    fn wait_for_first_consumer_claims_take_a_reachable_volume_or_a_provisioner() {
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), local_volumes(false), None);
        let snap = snapshot(vec![
            (node("n1", json!({})), vec![]),
            (node("n2", json!({})), vec![]),
        ]);
        let got = filter_all(&vb, &with_claim("p", "data"), &snap);
        assert!(got[0].1.is_success(), "{}", got[0].1.message());
        assert_eq!(got[1].1.message(), ERR_REASON_BIND_CONFLICT);
        // No volume at all, a provisioner limited to n2 by allowedTopologies.
        let got = filter_all(&vb, &with_claim("p", "fast"), &snap);
        assert_eq!(got[0].1.message(), ERR_REASON_BIND_CONFLICT);
        assert!(got[1].1.is_success());
    }

    #[test]
    fn a_reserved_volume_is_not_offered_to_another_pod() {
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), local_volumes(false), None);
        let snap = snapshot(vec![(node("n1", json!({})), vec![])]);
        let first = with_claim("a", "data");
        assert!(reserve_on(&vb, &first, &snap, "n1").is_success());
        let second = with_claim("b", "data");
        assert_eq!(
            reserve_on(&vb, &second, &snap, "n1").message(),
            ERR_REASON_BIND_CONFLICT
        );
        // Unreserve gives it back.
        ReservePlugin::unreserve(&vb, &mut CycleState::new(), &pi(&first), "n1");
        assert!(reserve_on(&vb, &second, &snap, "n1").is_success());
    }

    #[tokio::test]
    async fn pre_bind_writes_the_choice_and_waits_for_the_claims() {
        let snap = snapshot(vec![
            (node("n1", json!({})), vec![]),
            (node("n2", json!({})), vec![]),
        ]);
        let timeout_now = VolumeBindingArgs {
            bind_timeout_seconds: Some(0),
        };
        // The claim never becomes bound: PreBind writes the volume's claimRef, then
        // gives up at the timeout, and the volume is free again.
        let api = Arc::new(Recorded::default());
        let vb = VolumeBinding::new(timeout_now.clone(), local_volumes(false), Some(api.clone()));
        let pod = with_claim("p", "data");
        assert!(reserve_on(&vb, &pod, &snap, "n1").is_success());
        let s = PreBindPlugin::pre_bind(&vb, &pi(&pod), "n1").await;
        assert!(!s.is_success());
        assert!(
            s.message().contains("context deadline exceeded"),
            "{}",
            s.message()
        );
        assert_eq!(*api.0.lock(), vec!["bind local-n1 to data".to_string()]);
        assert!(vb.assumed.lock().is_empty());
        // A claim for a provisioner gets the node.
        let api = Arc::new(Recorded::default());
        let vb = VolumeBinding::new(timeout_now.clone(), local_volumes(false), Some(api.clone()));
        let pod = with_claim("p", "fast");
        assert!(reserve_on(&vb, &pod, &snap, "n2").is_success());
        let _ = PreBindPlugin::pre_bind(&vb, &pi(&pod), "n2").await;
        assert_eq!(*api.0.lock(), vec!["provision fast on n2".to_string()]);
        // Bound claims: nothing to write, nothing to wait for.
        let api = Arc::new(Recorded::default());
        let vb = VolumeBinding::new(timeout_now, local_volumes(true), Some(api.clone()));
        let pod = with_claim("p", "data");
        assert!(reserve_on(&vb, &pod, &snap, "n1").is_success());
        assert!(
            PreBindPlugin::pre_bind(&vb, &pi(&pod), "n1")
                .await
                .is_success()
        );
        assert!(api.0.lock().is_empty());
    }

    /// A pod `p` with the generic ephemeral volume `scratch` (its claim `p-scratch`).
    fn with_ephemeral(name: &str) -> Arc<Pod> {
        pod(
            name,
            json!({"spec": {"volumes": [{"name": "scratch",
                "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}}),
        )
    }

    /// [`lister`] with these claims added (`default/<name>`).
    fn lister_with(claims: &[serde_json::Value]) -> Arc<Fake> {
        let mut f = lister();
        for c in claims {
            let c: PersistentVolumeClaim = serde_json::from_value(c.clone()).unwrap();
            let key = format!("default/{}", c.metadata.name.as_deref().unwrap());
            Arc::get_mut(&mut f).unwrap().pvcs.insert(key, Arc::new(c));
        }
        f
    }

    fn owned_by(uid: &str) -> serde_json::Value {
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": true}])
    }

    #[test]
    fn ephemeral_volumes_are_their_generated_claims() {
        let snap = snapshot(vec![
            (node("n1", json!({})), vec![]),
            (node("n2", json!({})), vec![]),
        ]);
        let p = with_ephemeral("p");
        // Not created yet: the pod waits for the controller.
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), lister(), None);
        let got = filter_all(&vb, &p, &snap);
        assert_eq!(
            got[0].1.message(),
            "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\""
        );
        assert_eq!(got[0].1.code, Code::UnschedulableAndUnresolvable);
        // Someone else's claim of that name is never used.
        for owners in [owned_by("uid-other"), json!(null)] {
            let f = lister_with(&[
                json!({"metadata": {"name": "p-scratch", "namespace": "default",
                "ownerReferences": owners}, "spec": {"volumeName": "pv1"}}),
            ]);
            let vb = VolumeBinding::new(VolumeBindingArgs::default(), f, None);
            assert_eq!(
                filter_all(&vb, &p, &snap)[0].1.message(),
                "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
            );
        }
        // The pod's own claim is a claim like any other: bound to pv1 (on n1 only) ...
        let f = lister_with(&[
            json!({"metadata": {"name": "p-scratch", "namespace": "default",
            "ownerReferences": owned_by("uid-p")}, "spec": {"volumeName": "pv1"}}),
        ]);
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), f, None);
        let got = filter_all(&vb, &p, &snap);
        assert!(got[0].1.is_success(), "{}", got[0].1.message());
        assert_eq!(got[1].1.message(), ERR_REASON_NODE_CONFLICT);
        // ... or unbound: Immediate waits for the binder, WaitForFirstConsumer for a
        // provisioner on the chosen node.
        let f = lister_with(&[
            json!({"metadata": {"name": "p-scratch", "namespace": "default",
            "ownerReferences": owned_by("uid-p")}, "spec": {}}),
        ]);
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), f, None);
        assert_eq!(
            filter_all(&vb, &p, &snap)[0].1.message(),
            ERR_REASON_UNBOUND_IMMEDIATE
        );
        let api = Arc::new(Recorded::default());
        let f = lister_with(&[
            json!({"metadata": {"name": "p-scratch", "namespace": "default",
            "ownerReferences": owned_by("uid-p")}, "spec": {"storageClassName": "late"}}),
        ]);
        let vb = VolumeBinding::new(
            VolumeBindingArgs {
                bind_timeout_seconds: Some(0),
            },
            f,
            Some(api.clone()),
        );
        assert!(reserve_on(&vb, &p, &snap, "n2").is_success());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _ = rt.block_on(PreBindPlugin::pre_bind(&vb, &pi(&p), "n2"));
        assert_eq!(*api.0.lock(), vec!["provision p-scratch on n2".to_string()]);
        // Lost and being-deleted claims, upstream's messages.
        let f = lister_with(&[
            json!({"metadata": {"name": "p-scratch", "namespace": "default",
            "ownerReferences": owned_by("uid-p")}, "spec": {"volumeName": "gone"},
            "status": {"phase": "Lost"}}),
        ]);
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), f, None);
        assert_eq!(
            filter_all(&vb, &p, &snap)[0].1.message(),
            "persistentvolumeclaim \"p-scratch\" bound to non-existent persistentvolume \"gone\""
        );
        let f = lister_with(&[
            json!({"metadata": {"name": "p-scratch", "namespace": "default",
            "ownerReferences": owned_by("uid-p"), "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"volumeName": "pv1"}}),
        ]);
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), f, None);
        assert_eq!(
            filter_all(&vb, &p, &snap)[0].1.message(),
            "persistentvolumeclaim \"p-scratch\" is being deleted"
        );
        // Every claim is checked before binding is looked at: the missing ephemeral
        // claim is the reason, not the unbound Immediate claim before it.
        let both = pod(
            "p",
            json!({"spec": {"volumes": [
                {"name": "v", "persistentVolumeClaim": {"claimName": "unbound"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}}),
        );
        let vb = VolumeBinding::new(VolumeBindingArgs::default(), lister(), None);
        assert!(
            filter_all(&vb, &both, &snap)[0]
                .1
                .message()
                .starts_with("waiting for ephemeral volume controller")
        );
    }

    #[test]
    fn a_pods_ephemeral_claim_counts_as_used_for_read_write_once_pod() {
        let f = lister_with(&[
            json!({"metadata": {"name": "other-scratch", "namespace": "default",
            "ownerReferences": owned_by("uid-other")},
            "spec": {"accessModes": ["ReadWriteOncePod"], "volumeName": "pv1"}}),
        ]);
        let vr = VolumeRestrictions { lister: f };
        let used = snapshot(vec![(node("n1", json!({})), vec![with_ephemeral("other")])]);
        assert_eq!(
            filter_all(&vr, &with_claim("p", "other-scratch"), &used)[0]
                .1
                .message(),
            ERR_REASON_RWOP_CONFLICT
        );
        let free = snapshot(vec![(node("n1", json!({})), vec![])]);
        assert!(
            filter_all(&vr, &with_claim("p", "other-scratch"), &free)[0]
                .1
                .is_success()
        );
    }

    #[test]
    fn read_write_once_pod() {
        let vr = VolumeRestrictions { lister: lister() };
        let free = snapshot(vec![(node("n1", json!({})), vec![])]);
        assert!(
            filter_all(&vr, &with_claim("p", "rwop"), &free)[0]
                .1
                .is_success()
        );
        let used = snapshot(vec![(
            node("n1", json!({})),
            vec![with_claim("other", "rwop")],
        )]);
        assert_eq!(
            filter_all(&vr, &with_claim("p", "rwop"), &used)[0]
                .1
                .message(),
            ERR_REASON_RWOP_CONFLICT
        );
    }
}
