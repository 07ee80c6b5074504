//! Which PersistentVolume a claim binds to (upstream `component-helpers/storage/volume`),
//! shared by the PersistentVolume binder controller (no node: binds `Immediate`
//! claims) and the scheduler's VolumeBinding plugin (a node: binds
//! `WaitForFirstConsumer` claims to volumes that node can reach).

use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeSpec,
};

use ferrokube_apimachinery::labels::Selector;
use ferrokube_apimachinery::quantity;

use crate::nodeaffinity::node_selector_matches;

/// On a claim: the binding has been set up once (its later state is read in that light).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a claim or volume: the binder, not the user, set the binding.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a claim: the node the scheduler chose, for a provisioner to create the volume on.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// On a claim: the provisioner expected to create its volume.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The beta spelling of [`ANN_STORAGE_PROVISIONER`], still set alongside it.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// On a volume: the provisioner that created it.
pub const ANN_DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
/// The storage class annotation older objects carry instead of `storageClassName`.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// A StorageClass provisioner that means "no dynamic provisioning".
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The `PersistentVolumeSpec` members that are not its volume source (what is left names
/// the source: `hostPath`, `local`, `nfs`, `csi`, ...).
pub const SPEC_NON_SOURCE_FIELDS: &[&str] = &[
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
];

/// `GetPersistentVolumeClaimClass`: the beta annotation wins, then `storageClassName`;
/// "" is no class.
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| claim.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or("")
}

/// `GetPersistentVolumeClass`, the same for a volume.
pub fn volume_class(volume: &PersistentVolume) -> &str {
    annotation(&volume.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| volume.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or("")
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// `IsVolumeBoundToClaim`: the volume's claimRef names the claim (and its uid, when the
/// ref has one).
pub fn is_volume_bound_to_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(claim_ref) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if claim_ref.name != claim.metadata.name || claim_ref.namespace != claim.metadata.namespace {
        return false;
    }
    match claim_ref.uid.as_deref() {
        Some(uid) if !uid.is_empty() => claim.metadata.uid.as_deref() == Some(uid),
        _ => true,
    }
}

/// `CheckVolumeModeMismatches`: an unset mode is `Filesystem` on both sides.
pub fn volume_mode_mismatch(
    claim: &PersistentVolumeClaimSpec,
    volume: &PersistentVolumeSpec,
) -> bool {
    claim.volume_mode.as_deref().unwrap_or("Filesystem")
        != volume.volume_mode.as_deref().unwrap_or("Filesystem")
}

/// `CheckAccessModes`: the volume offers every mode the claim asks for.
pub fn access_modes_satisfied(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered = volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
        .iter()
        .all(|m| offered.contains(m))
}

/// `CheckNodeAffinity`: a volume without required node affinity is reachable from every
/// node.
pub fn volume_reachable_from(volume: &PersistentVolume, node: &Node) -> bool {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .is_none_or(|required| node_selector_matches(required, node))
}

/// The volume's `capacity.storage` in thousandths (0 when unset or unreadable).
pub fn volume_capacity(volume: &PersistentVolume) -> i128 {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| quantity::milli(&q.0))
        .unwrap_or(0)
}

/// The claim's `resources.requests.storage` in thousandths (0 when unset).
pub fn claim_request(claim: &PersistentVolumeClaim) -> i128 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| quantity::milli(&q.0))
        .unwrap_or(0)
}

/// `FindMatchingVolume`: the volume pre-bound to the claim if there is one, else the
/// smallest Available volume of the claim's class, mode and size that its selector
/// (and, given a node, its access modes and the node's reach) accept.
///
/// * `node`: the scheduler's path; the volume's node affinity must admit it.
/// * `excluded`: volumes already chosen for the pod's other claims (scheduler path).
/// * `delay_binding`: the controller's path for a `WaitForFirstConsumer` claim: only a
///   pre-bound volume is returned; binding others is the scheduler's.
///
/// Errors: a claim naming a VolumeAttributesClass (the feature is off in v1.33 by
/// default) or with a selector that does not parse.
pub fn find_matching_volume<'a>(
    claim: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    node: Option<&Node>,
    excluded: &dyn Fn(&str) -> bool,
    delay_binding: bool,
) -> Result<Option<&'a PersistentVolume>, String> {
    let key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    );
    let default_spec = PersistentVolumeClaimSpec::default();
    let claim_spec = claim.spec.as_ref().unwrap_or(&default_spec);
    if claim_spec
        .volume_attributes_class_name
        .as_deref()
        .is_some_and(|c| !c.is_empty())
    {
        return Err(format!(
            "unsupported volumeAttributesClassName is set on claim {key} when the feature-gate VolumeAttributesClass is disabled"
        ));
    }
    let selector = match &claim_spec.selector {
        Some(s) => Some(Selector::from_label_selector(s).map_err(|e| {
            format!("error creating internal label selector for claim: {key}: {e}")
        })?),
        None => None,
    };
    let requested = claim_request(claim);
    let class = claim_class(claim);
    let mut smallest: Option<(&PersistentVolume, i128)> = None;
    for volume in volumes {
        let name = volume.metadata.name.as_deref().unwrap_or("");
        if excluded(name) {
            continue;
        }
        let default_volume_spec = PersistentVolumeSpec::default();
        let spec = volume.spec.as_ref().unwrap_or(&default_volume_spec);
        let bound_here = is_volume_bound_to_claim(volume, claim);
        if spec.claim_ref.is_some() && !bound_here {
            continue;
        }
        let capacity = volume_capacity(volume);
        if capacity < requested || volume_mode_mismatch(claim_spec, spec) {
            continue;
        }
        if spec
            .volume_attributes_class_name
            .as_deref()
            .is_some_and(|c| !c.is_empty())
            || volume.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let reachable = node.is_none_or(|n| volume_reachable_from(volume, n));
        if bound_here {
            // A pre-bound volume the node cannot reach makes the claim unusable there.
            return Ok(reachable.then_some(volume));
        }
        if node.is_none() && delay_binding {
            continue;
        }
        let available =
            volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available");
        let empty = std::collections::BTreeMap::new();
        let labels = volume.metadata.labels.as_ref().unwrap_or(&empty);
        if !available
            || selector.as_ref().is_some_and(|s| !s.matches(labels))
            || volume_class(volume) != class
            || !reachable
            || (node.is_some() && !access_modes_satisfied(claim, volume))
        {
            continue;
        }
        if smallest.is_none_or(|(_, c)| c > capacity) {
            smallest = Some((volume, capacity));
        }
    }
    Ok(smallest.map(|(v, _)| v))
}

/// The controller's `findBestMatchForClaim` (its access-mode index): among volumes whose
/// access modes include all the claim's, those offering the fewest modes are tried
/// first, so a claim for `ReadWriteOnce` does not take a `ReadWriteMany` volume while a
/// `ReadWriteOnce` one fits.
pub fn find_best_match_for_claim<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &[&'a PersistentVolume],
    delay_binding: bool,
) -> Result<Option<&'a PersistentVolume>, String> {
    let modes = |v: &PersistentVolume| -> Vec<String> {
        let mut m = v
            .spec
            .as_ref()
            .and_then(|s| s.access_modes.clone())
            .unwrap_or_default();
        m.sort();
        m.dedup();
        m
    };
    let mut mode_sets: Vec<Vec<String>> = Vec::new();
    for v in volumes.iter().filter(|v| access_modes_satisfied(claim, v)) {
        let m = modes(v);
        if !mode_sets.contains(&m) {
            mode_sets.push(m);
        }
    }
    mode_sets.sort_by_key(Vec::len);
    for set in mode_sets {
        let same_modes = volumes.iter().copied().filter(|v| modes(v) == set);
        if let Some(found) =
            find_matching_volume(claim, same_modes, None, &|_| false, delay_binding)?
        {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn claim(spec: Value) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": spec}),
        )
        .unwrap()
    }

    fn volume(name: &str, size: &str, extra: Value) -> PersistentVolume {
        let mut v = json!({"metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": "/tmp"}},
            "status": {"phase": "Available"}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    /// `extra` merged over `base` (a JSON merge patch).
    fn merge(base: &mut Value, extra: Value) {
        *base = ferrokube_apimachinery::patch::merge_patch_value(base, &extra)
            .expect("a merge of JSON objects");
    }

    fn none(_: &str) -> bool {
        false
    }

    fn pick<'a>(
        c: &PersistentVolumeClaim,
        vs: &'a [PersistentVolume],
        node: Option<&Node>,
        delay: bool,
    ) -> Option<&'a str> {
        find_matching_volume(c, vs, node, &none, delay)
            .unwrap()
            .and_then(|v| v.metadata.name.as_deref())
    }

    fn request(size: &str) -> Value {
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}})
    }

    #[test]
    fn the_smallest_volume_that_fits() {
        let vs = [
            volume("big", "10Gi", json!({})),
            volume("small", "1Gi", json!({})),
            volume("fits", "2Gi", json!({})),
        ];
        assert_eq!(
            pick(&claim(request("1500Mi")), &vs, None, false),
            Some("fits")
        );
        assert_eq!(
            pick(&claim(request("1Gi")), &vs, None, false),
            Some("small")
        );
        assert_eq!(pick(&claim(request("20Gi")), &vs, None, false), None);
    }

    #[test]
    fn class_mode_selector_phase_and_claims_of_others() {
        let c = claim(request("1Gi"));
        let skip = |extra: Value| {
            let vs = [volume("v", "1Gi", extra)];
            pick(&c, &vs, None, false).is_none()
        };
        assert!(skip(json!({"spec": {"storageClassName": "fast"}})));
        assert!(skip(
            json!({"metadata": {"annotations": {ANN_BETA_STORAGE_CLASS: "fast"}}})
        ));
        assert!(skip(json!({"spec": {"volumeMode": "Block"}})));
        assert!(skip(json!({"status": {"phase": "Released"}})));
        assert!(skip(
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "other"}}})
        ));
        assert!(skip(
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
        ));
        assert!(!skip(json!({})));
        let with_selector = claim(json!({"resources": {"requests": {"storage": "1Gi"}},
            "selector": {"matchLabels": {"tier": "gold"}}}));
        let vs = [
            volume("plain", "1Gi", json!({})),
            volume(
                "gold",
                "5Gi",
                json!({"metadata": {"labels": {"tier": "gold"}}}),
            ),
        ];
        assert_eq!(pick(&with_selector, &vs, None, false), Some("gold"));
        let fast = claim(
            json!({"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}),
        );
        let vs = [volume(
            "f",
            "1Gi",
            json!({"spec": {"storageClassName": "fast"}}),
        )];
        assert_eq!(pick(&fast, &vs, None, false), Some("f"));
    }

    #[test]
    fn a_pre_bound_volume_wins_and_delay_binding_takes_only_it() {
        let c = claim(request("1Gi"));
        let vs = [
            volume("small", "1Gi", json!({})),
            volume(
                "mine",
                "5Gi",
                json!({"spec": {"claimRef": {"namespace": "ns", "name": "c"}},
                                         "status": {"phase": "Pending"}}),
            ),
        ];
        assert_eq!(pick(&c, &vs, None, false), Some("mine"));
        assert_eq!(pick(&c, &vs, None, true), Some("mine"));
        let stale_uid = [volume(
            "old",
            "1Gi",
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "c", "uid": "u0"}}}),
        )];
        assert_eq!(pick(&c, &stale_uid, None, false), None);
        let unbound = [volume("small", "1Gi", json!({}))];
        assert_eq!(pick(&c, &unbound, None, true), None);
    }

    #[test]
    fn the_scheduler_path_checks_reach_access_modes_and_exclusions() {
        let n1: Node = serde_json::from_value(
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}}),
        )
        .unwrap();
        let local = |name: &str, host: &str| {
            volume(
                name,
                "1Gi",
                json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                       "values": [host]}]}]}}}}),
            )
        };
        let c = claim(request("1Gi"));
        let vs = [local("elsewhere", "n2"), local("here", "n1")];
        assert_eq!(pick(&c, &vs, Some(&n1), false), Some("here"));
        let taken = |n: &str| n == "here";
        assert!(
            find_matching_volume(&c, &vs, Some(&n1), &taken, false)
                .unwrap()
                .is_none()
        );
        let rwx = claim(json!({"accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Gi"}}}));
        assert_eq!(pick(&rwx, &vs, Some(&n1), false), None);
        // The controller's path leaves access modes to its index.
        assert_eq!(
            pick(&rwx, &[volume("v", "1Gi", json!({}))], None, false),
            Some("v")
        );
        let pre_bound_elsewhere = [volume(
            "mine",
            "1Gi",
            json!({"spec": {
            "claimRef": {"namespace": "ns", "name": "c"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}}),
        )];
        assert_eq!(pick(&c, &pre_bound_elsewhere, Some(&n1), false), None);
    }

    #[test]
    fn the_controller_prefers_the_fewest_access_modes() {
        let rwo = claim(request("1Gi"));
        let many = volume(
            "many",
            "1Gi",
            json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadWriteMany"]}}),
        );
        let once_big = volume("once", "5Gi", json!({}));
        let rox = volume(
            "rox",
            "1Gi",
            json!({"spec": {"accessModes": ["ReadOnlyMany"]}}),
        );
        let name = |vs: &[&PersistentVolume]| {
            find_best_match_for_claim(&rwo, vs, false)
                .unwrap()
                .and_then(|v| v.metadata.name.clone())
        };
        assert_eq!(name(&[&many, &once_big, &rox]).as_deref(), Some("once"));
        assert_eq!(name(&[&many, &rox]).as_deref(), Some("many"));
        assert_eq!(name(&[&rox]), None);
    }

    #[test]
    fn volume_attribute_classes_are_refused() {
        let c = claim(json!({"volumeAttributesClassName": "gold"}));
        assert!(find_matching_volume(&c, &[], None, &none, false).is_err());
        let vs = [volume(
            "v",
            "1Gi",
            json!({"spec": {"volumeAttributesClassName": "gold"}}),
        )];
        assert_eq!(pick(&claim(request("1Gi")), &vs, None, false), None);
    }
}
