//! The controller side of upstream's in-tree hostPath volume plugin
//! (`pkg/volume/hostpath`), as the PersistentVolume binder uses it:
//!
//! - the provisioner behind kube-controller-manager's `--enable-hostpath-provisioner`:
//!   a directory `/tmp/hostpath_pv/<uuid>` per claim, made on the controller manager's
//!   own machine. As upstream warns, that is for development and for clusters whose
//!   nodes share the controller manager's filesystem (the single node of `hack/up.sh`,
//!   and its kind-style nodes, which are network namespaces on one host);
//! - the deleter of released hostPath volumes, which upstream's controller manager
//!   always has: it removes the directory when its path has `/tmp/` in it.
//!
//! The recycler (a scrubber pod for `Recycle` volumes) is not here.
//!
//! Layer: controllers; file system only, no API calls (the binder writes the objects).

use std::os::unix::fs::DirBuilderExt;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The plugin's name: StorageClasses name it as their provisioner, and the volumes it
/// provisions carry it in `pv.kubernetes.io/provisioned-by`.
pub const PLUGIN_NAME: &str = "kubernetes.io/host-path";

/// Upstream's directory under `/tmp` for provisioned volumes.
pub const DEFAULT_BASE: &str = "hostpath_pv";

/// Upstream `util.VolumeDynamicallyCreatedByKey`, with the value the plugin sets.
pub const ANN_CREATED_BY: &str = "kubernetes.io/createdby";
const CREATED_BY: &str = "hostpath-dynamic-provisioner";

/// The access modes the plugin offers when a claim names none.
const ACCESS_MODES: [&str; 1] = ["ReadWriteOnce"];

/// Why provisioning failed, in upstream's two places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionError {
    /// `NewProvisioner` refused (the event says "Failed to create provisioner: ...").
    Provisioner(String),
    /// `Provision` failed (the event says "Failed to provision volume with StorageClass ...").
    Provision(String),
}

/// The plugin as the controller manager configures it.
#[derive(Debug, Clone)]
pub struct HostPathPlugin {
    provisioning_enabled: bool,
    base: String,
}

impl HostPathPlugin {
    /// The plugin, provisioning only with `--enable-hostpath-provisioner`.
    pub fn new(provisioning_enabled: bool) -> Self {
        HostPathPlugin {
            provisioning_enabled,
            base: DEFAULT_BASE.to_string(),
        }
    }

    /// Provisions under `/tmp/<base>` instead of `/tmp/hostpath_pv` (upstream's plugin
    /// takes a base path for its tests the same way).
    pub fn with_base(mut self, base: &str) -> Self {
        self.base = base.to_string();
        self
    }

    /// Upstream `NewProvisioner` then `Provision`: the volume for `claim`, named
    /// `pv_name`, with its directory made. The caller binds it and sets the class.
    pub fn provision(
        &self,
        claim: &PersistentVolumeClaim,
        pv_name: &str,
        reclaim_policy: &str,
    ) -> Result<PersistentVolume, ProvisionError> {
        if !self.provisioning_enabled {
            return Err(ProvisionError::Provisioner(format!(
                "provisioning in volume plugin {PLUGIN_NAME:?} is disabled"
            )));
        }
        let spec = claim.spec.as_ref();
        if spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block") {
            return Err(ProvisionError::Provision(format!(
                "{PLUGIN_NAME} does not support block volume provisioning"
            )));
        }
        let path = format!("/tmp/{}/{}", self.base, uuid::Uuid::new_v4());
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&path)
            .map_err(|e| ProvisionError::Provision(format!("mkdir {path}: {e}")))?;
        Ok(provisioned_volume(claim, pv_name, &path, reclaim_policy))
    }
}

/// The object upstream's `Provision` returns for a directory at `path`.
pub fn provisioned_volume(
    claim: &PersistentVolumeClaim,
    pv_name: &str,
    path: &str,
    reclaim_policy: &str,
) -> PersistentVolume {
    let spec = claim.spec.clone().unwrap_or_default();
    let access_modes = match spec.access_modes {
        Some(modes) if !modes.is_empty() => modes,
        _ => ACCESS_MODES.iter().map(|m| m.to_string()).collect(),
    };
    let capacity = spec
        .resources
        .and_then(|r| r.requests)
        .and_then(|mut r| r.remove("storage"))
        .unwrap_or_default();
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name.to_string()),
            annotations: Some([(ANN_CREATED_BY.to_string(), CREATED_BY.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            persistent_volume_reclaim_policy: Some(reclaim_policy.to_string()),
            access_modes: Some(access_modes),
            capacity: Some([("storage".to_string(), capacity)].into()),
            host_path: Some(HostPathVolumeSource {
                path: path.to_string(),
                type_: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// Upstream `hostPathDeleter.Delete`: removes the directory (or file) at `path`, which
/// must match upstream's unanchored regular expression `/tmp/.+`. A path that is
/// already gone is deleted.
pub fn delete(path: &str) -> Result<(), String> {
    if !under_tmp(path) {
        return Err(format!(
            "host_path deleter only supports /tmp/.+ but received provided {path}"
        ));
    }
    let removed = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("remove {path}: {e}")),
    }
}

/// Go's `regexp.MustCompile("/tmp/.+").MatchString(path)`: `/tmp/` somewhere, then a
/// character that is not a newline.
fn under_tmp(path: &str) -> bool {
    path.match_indices("/tmp/")
        .any(|(i, _)| path[i + 5..].chars().next().is_some_and(|c| c != '\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(spec: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "data", "namespace": "ns"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn the_volume_takes_the_claims_size_and_modes() {
        let c = claim(json!({"accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "3Gi"}}}));
        let v = provisioned_volume(&c, "pvc-1", "/tmp/hostpath_pv/x", "Delete");
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            json!({"apiVersion": "v1", "kind": "PersistentVolume",
                   "metadata": {"name": "pvc-1",
                    "annotations": {"kubernetes.io/createdby": "hostpath-dynamic-provisioner"}},
                   "spec": {"accessModes": ["ReadWriteMany"], "capacity": {"storage": "3Gi"},
                            "hostPath": {"path": "/tmp/hostpath_pv/x"},
                            "persistentVolumeReclaimPolicy": "Delete"}})
        );
        // No modes in the claim: the plugin's own.
        let v = provisioned_volume(&claim(json!({})), "pvc-2", "/tmp/p", "Retain");
        let spec = v.spec.unwrap();
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
    }

    #[test]
    fn provisioning_needs_the_flag_and_a_filesystem_claim() {
        let c = claim(json!({"resources": {"requests": {"storage": "1Gi"}}}));
        assert_eq!(
            HostPathPlugin::new(false)
                .provision(&c, "pvc-1", "Delete")
                .unwrap_err(),
            ProvisionError::Provisioner(
                "provisioning in volume plugin \"kubernetes.io/host-path\" is disabled".into()
            )
        );
        let block = claim(json!({"volumeMode": "Block"}));
        assert_eq!(
            HostPathPlugin::new(true)
                .provision(&block, "pvc-1", "Delete")
                .unwrap_err(),
            ProvisionError::Provision(
                "kubernetes.io/host-path does not support block volume provisioning".into()
            )
        );
    }

    #[test]
    fn provisioned_directories_are_made_and_deleted() {
        let base = format!("ferrokube-hostpath-unit-{}", uuid::Uuid::new_v4());
        let plugin = HostPathPlugin::new(true).with_base(&base);
        let c = claim(json!({"resources": {"requests": {"storage": "1Gi"}}}));
        let v = plugin.provision(&c, "pvc-1", "Delete").unwrap();
        let path = v.spec.unwrap().host_path.unwrap().path;
        assert!(path.starts_with(&format!("/tmp/{base}/")), "{path}");
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.is_dir());
        std::fs::write(format!("{path}/file"), b"data").unwrap();
        delete(&path).unwrap();
        assert!(!std::path::Path::new(&path).exists());
        // Gone already: deleted.
        delete(&path).unwrap();
        std::fs::remove_dir(format!("/tmp/{base}")).unwrap();
    }

    #[test]
    fn only_paths_with_tmp_in_them_are_deleted() {
        for ok in ["/tmp/a", "/var/tmp/x", "/data/tmp/y/z"] {
            assert!(under_tmp(ok), "{ok}");
        }
        for refused in ["/tmp/", "/tmp", "/data/x", "/tmpx/y", "/tmp/\n"] {
            assert!(!under_tmp(refused), "{refused:?}");
        }
        assert_eq!(
            delete("/srv/data").unwrap_err(),
            "host_path deleter only supports /tmp/.+ but received provided /srv/data"
        );
    }
}
