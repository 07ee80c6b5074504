//! VolumeBinding and VolumeRestrictions, as far as PVs exist here: claims must exist;
//! unbound `Immediate` claims block scheduling; bound claims' PV node affinity must
//! match; a ReadWriteOncePod claim may be used by one pod only. (Dynamic provisioning
//! and binding of `WaitForFirstConsumer` claims are not done by this scheduler.)

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::*;
use crate::status::Status;
use crate::types::{PodInfo, node_selector_matches, pod_namespace};

pub const VOLUME_BINDING: &str = "VolumeBinding";
pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
pub const ERR_REASON_RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

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

pub struct VolumeBinding {
    pub lister: Arc<dyn ClusterLister>,
}

impl std::fmt::Debug for VolumeBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VolumeBinding")
    }
}

#[derive(Debug, Clone, Default)]
struct BindingState {
    /// PV names of the pod's bound claims.
    bound_pvs: Vec<String>,
    /// Unbound WaitForFirstConsumer claims.
    delayed: Vec<String>,
}

const BINDING_KEY: &str = "PreFilterVolumeBinding";

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let names = claim_names(&pod.pod);
        if names.is_empty() {
            return (None, Status::skip());
        }
        let ns = pod_namespace(&pod.pod);
        let mut st = BindingState::default();
        for n in names {
            let Some(pvc) = self.lister.pvc(ns, &n) else {
                return (
                    None,
                    Status::unresolvable(format!("persistentvolumeclaim \"{n}\" not found")),
                );
            };
            if pvc.metadata.deletion_timestamp.is_some() {
                return (
                    None,
                    Status::unresolvable(format!("persistentvolumeclaim \"{n}\" is being deleted")),
                );
            }
            match pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|v| !v.is_empty())
            {
                Some(pv) => st.bound_pvs.push(pv),
                None => {
                    let mode = pvc
                        .spec
                        .as_ref()
                        .and_then(|s| s.storage_class_name.as_deref())
                        .and_then(|sc| self.lister.storage_class(sc))
                        .and_then(|sc| sc.volume_binding_mode.clone())
                        .unwrap_or_else(|| "Immediate".into());
                    if mode == "WaitForFirstConsumer" {
                        st.delayed.push(n);
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
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
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
        Status::success()
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
        let vb = VolumeBinding { lister: lister() };
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
