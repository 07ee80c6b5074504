//! The ServiceAccount controller (upstream `pkg/controller/serviceaccount`):
//! a `default` ServiceAccount in every active namespace, recreated when deleted.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of};
use ferrokube_client::workqueue::WorkQueue;

use crate::{Action, Controller, Result, enqueue_live};

/// The ServiceAccounts every namespace gets.
pub const DEFAULT_SERVICE_ACCOUNTS: &[&str] = &["default"];

/// The names missing in a namespace (none while it terminates).
pub fn missing_accounts(ns: &Namespace, exists: &dyn Fn(&str) -> bool) -> Vec<&'static str> {
    let terminating = ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    if terminating {
        return vec![];
    }
    DEFAULT_SERVICE_ACCOUNTS
        .iter()
        .copied()
        .filter(|n| !exists(n))
        .collect()
}

/// The ServiceAccount controller.
pub struct ServiceAccountController {
    client: kube::Client,
    namespaces: Store<Namespace>,
    accounts: Store<ServiceAccount>,
}

impl ServiceAccountController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(ServiceAccountController {
            client,
            namespaces: factory.informer::<Namespace>().store(),
            accounts: factory.informer::<ServiceAccount>().store(),
        })
    }
}

#[async_trait::async_trait]
impl Controller for ServiceAccountController {
    fn name(&self) -> &'static str {
        "serviceaccount"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |_: &Namespace| true);
        let q = queue.clone();
        factory.informer::<ServiceAccount>().add_event_handler(
            move |n: Notification<ServiceAccount>| {
                if let Notification::Deleted { obj, .. } = n
                    && let Some(ns) = obj.metadata.namespace.clone()
                {
                    q.add(ns);
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(ns) = self.namespaces.get(key) else {
            return Ok(Action::Done);
        };
        let accounts = self.accounts.clone();
        let exists = move |n: &str| accounts.get(&key_of(Some(key), n)).is_some();
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), key);
        for name in missing_accounts(&ns, &exists) {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match api.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                // Exists (cache lag) or the namespace is terminating / gone.
                Err(kube::Error::Api(s)) if matches!(s.code, 409 | 403 | 404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_account_unless_terminating() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
        assert_eq!(missing_accounts(&ns, &|_| false), vec!["default"]);
        assert!(missing_accounts(&ns, &|n| n == "default").is_empty());
        let t: Namespace = serde_json::from_value(
            json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}}),
        )
        .unwrap();
        assert!(missing_accounts(&t, &|_| false).is_empty());
    }
}
