//! The service account tokens controller (upstream
//! `pkg/controller/serviceaccount/tokens_controller.go`, the
//! `serviceaccount-token-controller`): a Secret of type
//! `kubernetes.io/service-account-token` whose `kubernetes.io/service-account.name`
//! annotation names an existing ServiceAccount gets a legacy token (`data.token`,
//! signed with `--service-account-private-key-file`), `data.namespace`, `data.ca.crt`
//! (`--root-ca-file`) and the `kubernetes.io/service-account.uid` annotation. A token
//! Secret whose ServiceAccount does not exist (or has another uid) is deleted, and
//! deleting a ServiceAccount deletes its token Secrets.
//!
//! As upstream (since 1.24) no Secret is created for a ServiceAccount on its own. A
//! deleted token Secret's name is removed from its ServiceAccount's `secrets`
//! (upstream `removeSecretReference`, only when the account's uid is the one the
//! Secret named).
//!
//! Only token Secrets are listed and watched (field selector `type=...`, from the
//! manager's [`token_secrets_factory`]), not every Secret of the cluster.
//!
//! Pure part: [`token_secret_of`], [`missing_data`], [`without_reference`]. The
//! reconcile decides on the cached Secret, then updates a fresh copy only if it is
//! the same version (an update event follows otherwise), as upstream.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ferrokube_auth::authn::legacy::{LegacyClaims, LegacyTokenSigner};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{
    InformerConfig, Notification, SharedIndexInformer, SharedInformerFactory, Store, key_of,
    object_key,
};
use ferrokube_client::workqueue::WorkQueue;
use parking_lot::Mutex;

use crate::replicaset::{delete_exactly, is_conflict, is_not_found};
use crate::{Action, Controller, Error, Result, split_key};

/// Upstream `v1.SecretTypeServiceAccountToken`.
pub const TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// Upstream `v1.ServiceAccountNameKey`.
pub const SERVICE_ACCOUNT_NAME_KEY: &str = "kubernetes.io/service-account.name";
/// Upstream `v1.ServiceAccountUIDKey`.
pub const SERVICE_ACCOUNT_UID_KEY: &str = "kubernetes.io/service-account.uid";
const TOKEN_KEY: &str = "token";
const NAMESPACE_KEY: &str = "namespace";
const CA_KEY: &str = "ca.crt";

/// The (name, uid) of the ServiceAccount a token Secret is for; `None` for other
/// Secrets. The uid is empty when the annotation is not set yet.
pub fn token_secret_of(secret: &Secret) -> Option<(String, String)> {
    if secret.type_.as_deref() != Some(TOKEN_SECRET_TYPE) {
        return None;
    }
    let annotations = secret.metadata.annotations.as_ref()?;
    let name = annotations.get(SERVICE_ACCOUNT_NAME_KEY)?.clone();
    let uid = annotations
        .get(SERVICE_ACCOUNT_UID_KEY)
        .cloned()
        .unwrap_or_default();
    Some((name, uid))
}

/// The informer factory the tokens controller takes its Secrets from: only
/// `kubernetes.io/service-account-token` Secrets (the apiserver's `type` field
/// selector), so the manager does not cache every Secret.
pub fn token_secrets_factory(client: kube::Client) -> SharedInformerFactory {
    SharedInformerFactory::with_config(
        client,
        InformerConfig {
            field_selector: Some(format!("type={TOKEN_SECRET_TYPE}")),
            ..InformerConfig::default()
        },
    )
}

/// `account` without the reference to the Secret `secret`; `None` when it has none.
pub fn without_reference(account: &ServiceAccount, secret: &str) -> Option<ServiceAccount> {
    let refs = account.secrets.as_ref()?;
    let kept: Vec<_> = refs
        .iter()
        .filter(|r| r.name.as_deref() != Some(secret))
        .cloned()
        .collect();
    if kept.len() == refs.len() {
        return None;
    }
    let mut pruned = account.clone();
    pruned.secrets = Some(kept);
    Some(pruned)
}

/// What a token Secret lacks (upstream `secretUpdateNeeded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Missing {
    pub ca: bool,
    pub namespace: bool,
    pub token: bool,
}

impl Missing {
    pub fn any(self) -> bool {
        self.ca || self.namespace || self.token
    }
}

/// Upstream `secretUpdateNeeded`: the CA when one is configured and differs, the
/// namespace and the token when empty.
pub fn missing_data(secret: &Secret, root_ca: Option<&str>) -> Missing {
    let data = secret.data.as_ref();
    let value = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.as_slice());
    Missing {
        ca: root_ca.is_some_and(|ca| !ca.is_empty() && value(CA_KEY) != Some(ca.as_bytes())),
        namespace: value(NAMESPACE_KEY).is_none_or(<[u8]>::is_empty),
        token: value(TOKEN_KEY).is_none_or(<[u8]>::is_empty),
    }
}

/// Whether `private_key_pem` is a key the controller can sign with (for the
/// command line's early check).
pub fn check_private_key(private_key_pem: &str) -> Result<()> {
    LegacyTokenSigner::new(private_key_pem)
        .map(drop)
        .map_err(|e| Error::Invalid(e.to_string()))
}

/// The tokens controller.
pub struct ServiceAccountTokenController {
    client: kube::Client,
    signer: LegacyTokenSigner,
    root_ca: Option<String>,
    secret_informer: SharedIndexInformer<Secret>,
    secrets: Store<Secret>,
    accounts: Store<ServiceAccount>,
    /// Deleted token Secrets (by key) and the (account name, uid) they named, until
    /// the account's reference to them is removed.
    deleted: Arc<Mutex<HashMap<String, (String, String)>>>,
}

impl ServiceAccountTokenController {
    /// `private_key_pem`: `--service-account-private-key-file`'s ECDSA P-256 key;
    /// `token_secrets`: a [`token_secrets_factory`] (started with the manager's).
    pub fn new(
        factory: &SharedInformerFactory,
        token_secrets: &SharedInformerFactory,
        client: kube::Client,
        private_key_pem: &str,
        root_ca: Option<String>,
    ) -> Result<Arc<Self>> {
        let signer = LegacyTokenSigner::new(private_key_pem)
            .map_err(|e| Error::Invalid(format!("--service-account-private-key-file: {e}")))?;
        let secret_informer = token_secrets.informer::<Secret>();
        Ok(Arc::new(ServiceAccountTokenController {
            client,
            signer,
            root_ca,
            secrets: secret_informer.store(),
            secret_informer,
            accounts: factory.informer::<ServiceAccount>().store(),
            deleted: Arc::default(),
        }))
    }

    /// Upstream `getServiceAccount(..., fetchOnCacheMiss=true)`: the account if it
    /// exists with `uid` (any uid when empty), from the cache or else the API.
    async fn service_account(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
    ) -> Result<Option<ServiceAccount>> {
        let uid_matches =
            |sa: &ServiceAccount| uid.is_empty() || sa.metadata.uid.as_deref() == Some(uid);
        if let Some(sa) = self.accounts.get(&key_of(Some(ns), name))
            && uid_matches(&sa)
        {
            return Ok(Some((*sa).clone()));
        }
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        Ok(api.get_opt(name).await?.filter(uid_matches))
    }

    /// Deletes the token Secret (upstream `deleteToken`, with a UID precondition).
    async fn delete_secret(&self, secret: &Secret, ns: &str, name: &str) -> Result<Action> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        delete_exactly(&api, name, secret.metadata.uid.clone()).await?;
        Ok(Action::Done)
    }

    /// Upstream `removeSecretReference`: the account named `sa_name` (when its uid is
    /// `sa_uid`, any when empty) no longer lists the Secret `secret`.
    async fn remove_reference(
        &self,
        ns: &str,
        sa_name: &str,
        sa_uid: &str,
        secret: &str,
    ) -> Result<()> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        let Some(sa) = api.get_opt(sa_name).await? else {
            return Ok(());
        };
        if !sa_uid.is_empty() && sa.metadata.uid.as_deref() != Some(sa_uid) {
            return Ok(());
        }
        let Some(pruned) = without_reference(&sa, secret) else {
            return Ok(());
        };
        // A conflict is retried by the queue with a fresh read.
        match api.replace(sa_name, &PostParams::default(), &pruned).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Upstream `generateTokenIfNeeded` on a fresh copy of the cached Secret.
    async fn fill(&self, sa: &ServiceAccount, cached: &Secret, ns: &str, name: &str) -> Result<()> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let Some(mut live) = api.get_opt(name).await? else {
            return Ok(());
        };
        if live.metadata.resource_version != cached.metadata.resource_version {
            // The cache is behind; the update event brings this key back.
            return Ok(());
        }
        let missing = missing_data(&live, self.root_ca.as_deref());
        if !missing.any() {
            return Ok(());
        }
        let sa_name = sa.metadata.name.clone().unwrap_or_default();
        let sa_uid = sa.metadata.uid.clone().unwrap_or_default();
        let data = live.data.get_or_insert_with(BTreeMap::new);
        if missing.ca
            && let Some(ca) = &self.root_ca
        {
            data.insert(CA_KEY.into(), ByteString(ca.as_bytes().to_vec()));
        }
        if missing.namespace {
            data.insert(NAMESPACE_KEY.into(), ByteString(ns.as_bytes().to_vec()));
        }
        if missing.token {
            let claims = LegacyClaims::new(ns, &sa_name, &sa_uid, name);
            let token = self
                .signer
                .sign(&claims)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            data.insert(TOKEN_KEY.into(), ByteString(token.into_bytes()));
        }
        let annotations = live.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(SERVICE_ACCOUNT_NAME_KEY.into(), sa_name);
        annotations.insert(SERVICE_ACCOUNT_UID_KEY.into(), sa_uid);
        match api.replace(name, &PostParams::default(), &live).await {
            Ok(_) => Ok(()),
            // Changed meanwhile (an event follows) or deleted: nothing to do.
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait::async_trait]
impl Controller for ServiceAccountTokenController {
    fn name(&self) -> &'static str {
        "serviceaccount_tokens_secret"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        let deleted = self.deleted.clone();
        self.secret_informer.add_event_handler(
            move |n: Notification<Secret>| {
                let Some((sa_name, sa_uid)) = token_secret_of(n.object()) else {
                    return;
                };
                let key = object_key(&**n.object());
                if matches!(n, Notification::Deleted { .. }) {
                    deleted.lock().insert(key.clone(), (sa_name, sa_uid));
                }
                q.add(key);
            },
            None,
        );
        // A deleted account takes its token Secrets with it.
        let q = queue.clone();
        let secrets = self.secrets.clone();
        factory.informer::<ServiceAccount>().add_event_handler(
            move |n: Notification<ServiceAccount>| {
                let Notification::Deleted { obj, .. } = n else {
                    return;
                };
                let ns = obj.metadata.namespace.as_deref().unwrap_or("");
                for s in secrets.list_namespace(ns) {
                    if token_secret_of(&s).is_some_and(|(name, _)| obj.metadata.name == Some(name))
                    {
                        q.add(object_key(&*s));
                    }
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(secret) = self.secrets.get(key) else {
            let named = self.deleted.lock().get(key).cloned();
            if let Some((sa_name, sa_uid)) = named {
                self.remove_reference(ns, &sa_name, &sa_uid, name).await?;
                self.deleted.lock().remove(key);
            }
            return Ok(Action::Done);
        };
        // Created again under that name: nothing left to prune.
        self.deleted.lock().remove(key);
        let Some((sa_name, sa_uid)) = token_secret_of(&secret) else {
            return Ok(Action::Done);
        };
        let Some(sa) = self.service_account(ns, &sa_name, &sa_uid).await? else {
            tracing::info!(secret = key, account = %sa_name, "service account does not exist; deleting its token secret");
            return self.delete_secret(&secret, ns, name).await;
        };
        if missing_data(&secret, self.root_ca.as_deref()).any() {
            self.fill(&sa, &secret, ns, name).await?;
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(v: serde_json::Value) -> Secret {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_annotated_token_secrets_are_ours() {
        let s = secret(json!({"metadata": {"name": "t", "annotations": {
            SERVICE_ACCOUNT_NAME_KEY: "builder"}}, "type": TOKEN_SECRET_TYPE}));
        assert_eq!(token_secret_of(&s), Some(("builder".into(), String::new())));
        let opaque = secret(json!({"metadata": {"name": "t", "annotations": {
            SERVICE_ACCOUNT_NAME_KEY: "builder"}}, "type": "Opaque"}));
        assert_eq!(token_secret_of(&opaque), None);
        let bare = secret(json!({"metadata": {"name": "t"}, "type": TOKEN_SECRET_TYPE}));
        assert_eq!(token_secret_of(&bare), None);
    }

    #[test]
    fn pruning_removes_only_the_named_reference() {
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "builder"},
            "secrets": [{"name": "a"}, {"name": "gone"}, {"name": "b"}]}))
        .unwrap();
        let pruned = without_reference(&sa, "gone").unwrap();
        let names: Vec<_> = pruned
            .secrets
            .unwrap()
            .into_iter()
            .filter_map(|r| r.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(without_reference(&sa, "other").is_none());
        let bare: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert!(without_reference(&bare, "gone").is_none());
    }

    #[test]
    fn missing_data_as_upstream() {
        let empty = secret(json!({"metadata": {"name": "t"}}));
        assert_eq!(
            missing_data(&empty, Some("CA")),
            Missing {
                ca: true,
                namespace: true,
                token: true
            }
        );
        // Without a root CA nothing is wanted there.
        assert!(!missing_data(&empty, None).ca);
        // base64 of "CA", "ns", "jwt".
        let full = secret(json!({"metadata": {"name": "t"},
            "data": {"ca.crt": "Q0E=", "namespace": "bnM=", "token": "and0"}}));
        assert!(!missing_data(&full, Some("CA")).any());
        // A changed CA is put in again.
        assert_eq!(
            missing_data(&full, Some("NEW")),
            Missing {
                ca: true,
                ..Missing::default()
            }
        );
    }
}
