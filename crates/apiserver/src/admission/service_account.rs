//! ServiceAccount (upstream `plugin/pkg/admission/serviceaccount`), mutating, on pod
//! creation: defaults `spec.serviceAccountName` to `default`, rejects pods whose
//! service account does not exist, and unless automounting is off (pod, then service
//! account) adds the projected `kube-api-access-<suffix>` volume (token, the
//! `kube-root-ca.crt` CA bundle, the namespace) mounted read-only in every container
//! at [`SERVICE_ACCOUNT_MOUNT_PATH`]; the account's imagePullSecrets are added when
//! the pod has none. Mirror pods are left alone.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::Value;

use super::{Attributes, MIRROR_POD_ANNOTATION, Operation, Plugin, PluginInit, name_of};
use crate::security::ClusterState;

pub(crate) const NAME: &str = "ServiceAccount";

/// Where the plugin mounts the token volume.
pub(crate) const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

pub(crate) struct ServiceAccount {
    state: Arc<ClusterState>,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(ServiceAccount {
        state: init.security.clone(),
    }))
}

#[async_trait]
impl Plugin for ServiceAccount {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_pod_write(&[Operation::Create])
    }

    async fn admit(
        &self,
        a: &Attributes,
        pod: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let ns = a.namespace.as_str();
        admit_pod(
            a,
            pod,
            |sa| self.state.service_account(ns, sa),
            &ferrokube_registry::meta::random_suffix(),
        )
    }
}

/// The plugin's pure logic, with the service account lookup and the volume name's
/// random suffix given.
pub(crate) fn admit_pod(
    a: &Attributes,
    pod: &mut Value,
    service_account: impl FnOnce(&str) -> Option<Value>,
    suffix: &str,
) -> Result<(), ApiError> {
    if !pod["metadata"]["annotations"][MIRROR_POD_ANNOTATION].is_null() {
        return Ok(());
    }
    let namespace = a.namespace.as_str();
    let name = pod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            pod["spec"]["serviceAccount"]
                .as_str()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or("default")
        .to_string();
    let Some(sa) = service_account(&name) else {
        return Err(a.forbidden_named(
            name_of(pod),
            format!(
                "error looking up service account {namespace}/{name}: serviceaccount {name:?} not found"
            ),
        ));
    };
    let spec = &mut pod["spec"];
    spec["serviceAccountName"] = Value::String(name.clone());
    spec["serviceAccount"] = Value::String(name);
    // Upstream copies the references' names into a pod that names no pull secret, whether
    // or not the token is mounted.
    if spec["imagePullSecrets"]
        .as_array()
        .is_none_or(|a| a.is_empty())
        && let Some(secrets) = sa["imagePullSecrets"].as_array().filter(|a| !a.is_empty())
    {
        spec["imagePullSecrets"] = secrets
            .iter()
            .map(|r| match &r["name"] {
                Value::String(n) if !n.is_empty() => serde_json::json!({ "name": n }),
                _ => serde_json::json!({}),
            })
            .collect();
    }
    let automount = spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let volume_name = format!("kube-api-access-{suffix}");
    let mut mounted = false;
    for kind in ["initContainers", "containers"] {
        // `get_mut`, not indexing: an index would add `kind: null` to a pod without it.
        let containers = spec.get_mut(kind).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            let has = c["volumeMounts"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| m["mountPath"] == SERVICE_ACCOUNT_MOUNT_PATH)
            });
            if has {
                continue;
            }
            if !c["volumeMounts"].is_array() {
                c["volumeMounts"] = Value::Array(Vec::new());
            }
            if let Some(m) = c["volumeMounts"].as_array_mut() {
                m.push(serde_json::json!({"name": volume_name, "readOnly": true,
                    "mountPath": SERVICE_ACCOUNT_MOUNT_PATH}));
                mounted = true;
            }
        }
    }
    if mounted {
        if !spec["volumes"].is_array() {
            spec["volumes"] = Value::Array(Vec::new());
        }
        if let Some(v) = spec["volumes"].as_array_mut() {
            v.push(serde_json::json!({
                "name": volume_name,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                    ]
                }
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_auth::UserInfo;
    use serde_json::json;

    fn attrs() -> Attributes {
        let info = ferrokube_api::resources::lookup("", "v1", "pods").unwrap();
        Attributes::new(UserInfo::new("alice", ["x"]), Operation::Create, info)
            .in_namespace(Some("ns"))
    }

    #[test]
    fn service_account_plugin_defaults_and_projects_the_token() {
        let a = attrs();
        let sa = || {
            Some(json!({"metadata": {"name": "default"}, "imagePullSecrets": [{"name": "pull"}]}))
        };
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "image": "x"}],
            "containers": [{"name": "c", "image": "x"},
                {"name": "own", "image": "x", "volumeMounts": [{"name": "mine", "mountPath": SERVICE_ACCOUNT_MOUNT_PATH}]}]}});
        admit_pod(&a, &mut pod, |_| sa(), "abcde").unwrap();
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "pull"}]));
        assert_eq!(spec["volumes"][0]["name"], "kube-api-access-abcde");
        assert_eq!(
            spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        assert_eq!(
            spec["containers"][0]["volumeMounts"][0],
            json!({"name": "kube-api-access-abcde", "readOnly": true, "mountPath": SERVICE_ACCOUNT_MOUNT_PATH})
        );
        assert_eq!(
            spec["initContainers"][0]["volumeMounts"][0]["name"],
            "kube-api-access-abcde"
        );
        assert_eq!(
            spec["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );

        let mut off = json!({"metadata": {"name": "p"}, "spec": {"automountServiceAccountToken": false,
            "serviceAccountName": "robot", "containers": [{"name": "c", "image": "x"}]}});
        admit_pod(&a, &mut off, |n| (n == "robot").then(|| json!({})), "x").unwrap();
        assert!(off["spec"]["volumes"].is_null());
        let mut missing = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let e = admit_pod(&a, &mut missing, |_| None, "x").unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods \"p\" is forbidden: error looking up service account ns/default: serviceaccount \"default\" not found"
        );
        let mut mirror =
            json!({"metadata": {"annotations": {MIRROR_POD_ANNOTATION: "x"}}, "spec": {}});
        admit_pod(&a, &mut mirror, |_| None, "x").unwrap();
        assert!(mirror["spec"]["serviceAccountName"].is_null());
    }

    #[test]
    fn service_account_plugin_copies_image_pull_secrets_into_pods_without_any() {
        let a = attrs();
        let sa = |automount: bool| {
            move |n: &str| {
                (n == "puller").then(|| {
                    json!({"metadata": {"name": "puller"},
                        "automountServiceAccountToken": automount,
                        "imagePullSecrets": [{"name": "regcred"}, {"name": "other"}, {}]})
                })
            }
        };
        let pod = |extra: Value| {
            let mut p = json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "puller",
                "containers": [{"name": "c", "image": "127.0.0.1:5001/private/busybox"}]}});
            for (k, v) in extra.as_object().unwrap() {
                p["spec"][k] = v.clone();
            }
            p
        };
        let copied = json!([{"name": "regcred"}, {"name": "other"}, {}]);
        // None named: the account's, in its order, whether or not the token is mounted.
        for automount in [true, false] {
            let mut p = pod(json!({}));
            admit_pod(&a, &mut p, sa(automount), "x").unwrap();
            assert_eq!(
                p["spec"]["imagePullSecrets"], copied,
                "automount {automount}"
            );
            assert_eq!(p["spec"]["volumes"].is_array(), automount);
        }
        // An empty list counts as none.
        let mut p = pod(json!({"imagePullSecrets": []}));
        admit_pod(&a, &mut p, sa(true), "x").unwrap();
        assert_eq!(p["spec"]["imagePullSecrets"], copied);
        // The pod's own are kept, not merged.
        let mut p = pod(json!({"imagePullSecrets": [{"name": "mine"}]}));
        admit_pod(&a, &mut p, sa(true), "x").unwrap();
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "mine"}]));
        // An account without pull secrets adds none.
        let mut p = pod(json!({}));
        admit_pod(&a, &mut p, |_| Some(json!({"imagePullSecrets": []})), "x").unwrap();
        assert!(p["spec"]["imagePullSecrets"].is_null());
    }
}
