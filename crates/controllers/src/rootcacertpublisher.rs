//! The root CA certificate publisher (upstream
//! `pkg/controller/certificates/rootcacertpublisher`): a ConfigMap `kube-root-ca.crt`
//! holding the cluster CA under `ca.crt` in every active namespace, recreated when
//! deleted and restored when edited. Pods read it through the projected
//! `kube-api-access-*` volume to verify the apiserver.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of};
use ferrokube_client::workqueue::WorkQueue;

use crate::{Action, Controller, Result, enqueue_live};

/// The ConfigMap's name (upstream `RootCACertConfigMapName`).
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// The key holding the CA bundle.
pub const CA_KEY: &str = "ca.crt";
/// Upstream `DescriptionAnnotation`.
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// Upstream `Description`, verbatim.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// What the publisher does for one namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing: the namespace is gone or terminating, or the ConfigMap is current.
    Nothing,
    /// Create the ConfigMap.
    Create(ConfigMap),
    /// Replace the existing ConfigMap's data and annotation (keeping its other metadata).
    Update(ConfigMap),
}

/// The CA bundle a client configuration trusts the apiserver with, as PEM. Without
/// `--root-ca-file`, upstream's publisher and tokens controller use their own client
/// config's `CAData`: the CA the manager's kubeconfig names.
pub fn bundle_of(config: &kube::Config) -> Option<String> {
    let certs = config.root_cert.as_ref().filter(|c| !c.is_empty())?;
    Some(
        certs
            .iter()
            .map(|der| ferrokube_pki::pem::encode_cert_pem(der))
            .collect(),
    )
}

fn terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// Upstream `syncNamespace` as a pure function of the namespace, the current
/// ConfigMap (if any) and the CA bundle.
pub fn plan(ns: Option<&Namespace>, current: Option<&ConfigMap>, root_ca: &str) -> Plan {
    let Some(ns) = ns.filter(|ns| !terminating(ns)) else {
        return Plan::Nothing;
    };
    let data = BTreeMap::from([(CA_KEY.to_string(), root_ca.to_string())]);
    let Some(cm) = current else {
        return Plan::Create(ConfigMap {
            metadata: ObjectMeta {
                name: Some(ROOT_CA_CONFIGMAP.into()),
                namespace: ns.metadata.name.clone(),
                annotations: Some(BTreeMap::from([(
                    DESCRIPTION_ANNOTATION.to_string(),
                    DESCRIPTION.to_string(),
                )])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        });
    };
    let described = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .map(String::as_str)
        == Some(DESCRIPTION);
    // Upstream compares the whole data map (extra keys are removed) and ignores
    // binaryData, as here.
    if cm.data.as_ref() == Some(&data) && described {
        return Plan::Nothing;
    }
    let mut updated = cm.clone();
    updated.data = Some(data);
    updated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
    Plan::Update(updated)
}

/// The root CA publisher controller.
pub struct RootCaCertPublisher {
    client: kube::Client,
    root_ca: String,
    namespaces: Store<Namespace>,
    configmaps: Store<ConfigMap>,
}

impl RootCaCertPublisher {
    /// `root_ca` is the PEM bundle to publish (the controller-manager's `--root-ca-file`).
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        root_ca: String,
    ) -> Arc<Self> {
        Arc::new(RootCaCertPublisher {
            client,
            root_ca,
            namespaces: factory.informer::<Namespace>().store(),
            configmaps: factory.informer::<ConfigMap>().store(),
        })
    }
}

#[async_trait::async_trait]
impl Controller for RootCaCertPublisher {
    fn name(&self) -> &'static str {
        "root-ca-cert-publisher"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |_: &Namespace| true);
        // Any change to (or deletion of) a kube-root-ca.crt resyncs its namespace;
        // additions are the publisher's own writes and need nothing.
        let q = queue.clone();
        factory.informer::<ConfigMap>().add_event_handler(
            move |n: Notification<ConfigMap>| {
                if matches!(n, Notification::Added { .. }) {
                    return;
                }
                let cm = n.object();
                if cm.metadata.name.as_deref() == Some(ROOT_CA_CONFIGMAP)
                    && let Some(ns) = cm.metadata.namespace.clone()
                {
                    q.add(ns);
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let ns = self.namespaces.get(key);
        let current = self.configmaps.get(&key_of(Some(key), ROOT_CA_CONFIGMAP));
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), key);
        let written = match plan(ns.as_deref(), current.as_deref(), &self.root_ca) {
            Plan::Nothing => return Ok(Action::Done),
            Plan::Create(cm) => api.create(&PostParams::default(), &cm).await,
            Plan::Update(cm) => {
                api.replace(ROOT_CA_CONFIGMAP, &PostParams::default(), &cm)
                    .await
            }
        };
        match written {
            Ok(_) => Ok(Action::Done),
            // Namespace terminating or gone: nothing to publish (upstream ignores these).
            Err(kube::Error::Api(s)) if matches!(s.code, 403 | 404) => Ok(Action::Done),
            // A stale cache (exists already / resourceVersion conflict): the informer
            // event that follows requeues with fresh state; retry meanwhile.
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

    fn ns(v: serde_json::Value) -> Namespace {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn bundle_of_a_client_config_is_its_ca_as_pem() {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        assert_eq!(bundle_of(&config), None);
        config.root_cert = Some(Vec::new());
        assert_eq!(bundle_of(&config), None);
        config.root_cert = Some(vec![vec![1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(
            bundle_of(&config).unwrap(),
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
             -----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n"
        );
    }

    #[test]
    fn creates_with_description_in_active_namespaces_only() {
        let a = ns(json!({"metadata": {"name": "a"}}));
        let Plan::Create(cm) = plan(Some(&a), None, CA) else {
            panic!("expected a create");
        };
        assert_eq!(cm.metadata.name.as_deref(), Some(ROOT_CA_CONFIGMAP));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("a"));
        assert_eq!(cm.data.as_ref().unwrap()[CA_KEY], CA);
        assert_eq!(
            cm.metadata.annotations.as_ref().unwrap()[DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
        // Idempotent once current.
        assert_eq!(plan(Some(&a), Some(&cm), CA), Plan::Nothing);
        let t = ns(json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}}));
        assert_eq!(plan(Some(&t), None, CA), Plan::Nothing);
        assert_eq!(plan(None, None, CA), Plan::Nothing);
    }

    #[test]
    fn restores_edited_data_and_annotation_keeping_other_metadata() {
        let a = ns(json!({"metadata": {"name": "a"}}));
        let edited: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": "a", "resourceVersion": "7",
                         "labels": {"x": "y"}, "annotations": {"other": "kept"}},
            "data": {"ca.crt": "tampered", "extra": "gone"}
        }))
        .unwrap();
        let Plan::Update(cm) = plan(Some(&a), Some(&edited), CA) else {
            panic!("expected an update");
        };
        assert_eq!(cm.data, Some(BTreeMap::from([(CA_KEY.into(), CA.into())])));
        let ann = cm.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[DESCRIPTION_ANNOTATION], DESCRIPTION);
        assert_eq!(ann["other"], "kept");
        assert_eq!(cm.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(cm.metadata.labels.as_ref().unwrap()["x"], "y");
    }
}
