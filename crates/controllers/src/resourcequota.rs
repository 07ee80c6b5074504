//! The resource quota controller (upstream `pkg/controller/resourcequota`): keeps
//! every ResourceQuota's `status.hard` equal to `spec.hard` and `status.used` equal to
//! what the namespace's objects use, recomputed when a quota or a counted object
//! changes and every five minutes (upstream `--resource-quota-sync-period`). The
//! ResourceQuota admission plugin charges creates in between and relies on this
//! status.
//!
//! Counted here: pods, services, configmaps, secrets, persistentvolumeclaims,
//! replicationcontrollers and resourcequotas (their named resources and their
//! `count/<resource>`). Deviation: `count/<resource>.<group>` of other kinds is left
//! out of `status.used` (upstream counts any resource through discovery), so
//! admission answers "status unknown" for such a quota.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_apimachinery::quota::{self, Usage};
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::{Action, Controller, Result};

/// Upstream's full recalculation period.
pub const RESYNC: Duration = Duration::from_secs(300);

/// The kinds counted here, as (plural, their objects in one namespace).
type Counted = Vec<(&'static str, Vec<Value>)>;

/// The kinds this controller counts (core/v1 plurals).
const KINDS: [&str; 7] = [
    "pods",
    "services",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "replicationcontrollers",
    "resourcequotas",
];

/// `status` a quota should have, from its spec and the namespace's counted objects:
/// None when the quota's current status is already right.
pub fn plan(quota: &Value, objects: &Counted) -> Option<Value> {
    let hard = quota::parse_list(&quota["spec"]["hard"]);
    let mut used = Usage::new();
    for name in hard.keys() {
        let mut total = quota::Amount::count(0);
        let mut known = false;
        for (plural, items) in objects {
            if !quota::tracks("", plural, name) {
                continue;
            }
            known = true;
            for obj in items {
                if !quota::scopes_match(quota, "", plural, obj) {
                    continue;
                }
                if let Some(a) = quota::usage("", plural, obj).get(name) {
                    if total.milli == 0 {
                        total.binary = a.binary;
                    }
                    total.milli = total.milli.saturating_add(a.milli);
                }
            }
        }
        if known {
            used.insert(name.clone(), total);
        }
    }
    let status = json!({"hard": quota::to_json(&hard), "used": quota::to_json(&used)});
    let current = &quota["status"];
    let same = |field: &str| {
        quota::parse_list(&current[field]) == quota::parse_list(&status[field])
            && current[field].as_object().map(|m| m.len())
                == status[field].as_object().map(|m| m.len())
    };
    if same("hard") && same("used") {
        None
    } else {
        Some(status)
    }
}

/// The resourcequota controller.
pub struct ResourceQuotaController {
    client: kube::Client,
    quotas: Store<ResourceQuota>,
    pods: Store<Pod>,
    services: Store<Service>,
    configmaps: Store<ConfigMap>,
    secrets: Store<Secret>,
    claims: Store<PersistentVolumeClaim>,
    controllers: Store<ReplicationController>,
}

impl ResourceQuotaController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(ResourceQuotaController {
            client,
            quotas: factory.informer::<ResourceQuota>().store(),
            pods: factory.informer::<Pod>().store(),
            services: factory.informer::<Service>().store(),
            configmaps: factory.informer::<ConfigMap>().store(),
            secrets: factory.informer::<Secret>().store(),
            claims: factory.informer::<PersistentVolumeClaim>().store(),
            controllers: factory.informer::<ReplicationController>().store(),
        })
    }

    /// The namespace's objects of each kind, as JSON, for the kinds `hard` tracks (the
    /// others stay empty: converting every Secret and ConfigMap for a pods-only quota
    /// would be wasted work on every pod event).
    fn counted(&self, ns: &str, hard: &Usage) -> Counted {
        fn values<K>(store: &Store<K>, ns: &str) -> Vec<Value>
        where
            K: ferrokube_client::informer::InformerResource + serde::Serialize,
        {
            store
                .list_namespace(ns)
                .iter()
                .filter_map(|o| serde_json::to_value(&**o).ok())
                .collect()
        }
        KINDS
            .into_iter()
            .map(|plural| {
                if !hard.keys().any(|name| quota::tracks("", plural, name)) {
                    return (plural, Vec::new());
                }
                let items = match plural {
                    "pods" => values(&self.pods, ns),
                    "services" => values(&self.services, ns),
                    "configmaps" => values(&self.configmaps, ns),
                    "secrets" => values(&self.secrets, ns),
                    "persistentvolumeclaims" => values(&self.claims, ns),
                    "replicationcontrollers" => values(&self.controllers, ns),
                    _ => values(&self.quotas, ns),
                };
                (plural, items)
            })
            .collect()
    }
}

/// Enqueues every quota of the namespace of each changed object.
fn on_change<K>(
    factory: &SharedInformerFactory,
    queue: &WorkQueue<String>,
    quotas: Store<ResourceQuota>,
) where
    K: ferrokube_client::informer::InformerResource,
{
    let q = queue.clone();
    factory.informer::<K>().add_event_handler(
        move |n: Notification<K>| {
            let Some(ns) = kube::Resource::meta(&**n.object()).namespace.clone() else {
                return;
            };
            for quota in quotas.list_namespace(&ns) {
                q.add(object_key(&*quota));
            }
        },
        None,
    );
}

#[async_trait::async_trait]
impl Controller for ResourceQuotaController {
    fn name(&self) -> &'static str {
        "resourcequota"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<ResourceQuota>().add_event_handler(
            move |n: Notification<ResourceQuota>| {
                // As upstream's updateQuota: a status-only change (admission charging the
                // quota) is not a reason to recount; recounting then, from informers that
                // may not have seen the charged object yet, would undo the charge.
                let recount = match &n {
                    Notification::Added { .. } => true,
                    Notification::Updated { old, new } => {
                        old.metadata.resource_version == new.metadata.resource_version
                            || old.spec.as_ref().and_then(|s| s.hard.as_ref())
                                != new.spec.as_ref().and_then(|s| s.hard.as_ref())
                    }
                    Notification::Deleted { .. } => false,
                };
                if recount {
                    q.add(object_key(&**n.object()));
                }
            },
            None,
        );
        on_change::<Pod>(factory, queue, self.quotas.clone());
        on_change::<Service>(factory, queue, self.quotas.clone());
        on_change::<ConfigMap>(factory, queue, self.quotas.clone());
        on_change::<Secret>(factory, queue, self.quotas.clone());
        on_change::<PersistentVolumeClaim>(factory, queue, self.quotas.clone());
        on_change::<ReplicationController>(factory, queue, self.quotas.clone());
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(current) = self.quotas.get(key) else {
            return Ok(Action::Done);
        };
        let ns = current.metadata.namespace.clone().unwrap_or_default();
        let name = current.metadata.name.clone().unwrap_or_default();
        let quota = serde_json::to_value(&*current)?;
        let hard = quota::parse_list(&quota["spec"]["hard"]);
        let Some(status) = plan(&quota, &self.counted(&ns, &hard)) else {
            return Ok(Action::RequeueAfter(RESYNC));
        };
        let mut updated = quota;
        updated["status"] = status;
        let updated: ResourceQuota = serde_json::from_value(updated)?;
        let api: Api<ResourceQuota> = Api::namespaced(self.client.clone(), &ns);
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(Action::RequeueAfter(RESYNC)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::Done),
            // A conflict (admission charged the quota meanwhile): the informer event
            // that follows requeues with fresh state; retry meanwhile.
            Err(e) => Err(e.into()),
        }
    }
}

/// The resource names of `hard` this controller cannot measure.
pub fn unmeasured(hard: &Usage) -> BTreeSet<String> {
    hard.keys()
        .filter(|k| !KINDS.iter().any(|p| quota::tracks("", p, k)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mirrors_hard_and_sums_what_is_used() {
        let quota = json!({"metadata": {"name": "q"}, "spec": {"hard": {
            "pods": "4", "requests.cpu": "2", "configmaps": "10", "count/deployments.apps": "1"}}});
        let pod = |cpu: &str| {
            json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu}}}]}})
        };
        let done = json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Succeeded"}});
        let objects: Counted = vec![
            ("pods", vec![pod("250m"), pod("500m"), done]),
            ("configmaps", vec![json!({}), json!({})]),
            ("services", vec![]),
        ];
        let status = plan(&quota, &objects).unwrap();
        assert_eq!(status["hard"]["pods"], "4");
        assert_eq!(
            status["used"],
            json!({"pods": "2", "requests.cpu": "750m", "configmaps": "2"})
        );
        let mut synced = quota.clone();
        synced["status"] = status;
        assert_eq!(plan(&synced, &objects), None);
        assert_eq!(
            unmeasured(&quota::parse_list(&quota["spec"]["hard"])),
            BTreeSet::from(["count/deployments.apps".to_string()])
        );
    }

    #[test]
    fn scoped_quotas_count_only_selected_pods() {
        let quota = json!({"spec": {"hard": {"pods": "5"}, "scopes": ["BestEffort"]}});
        let objects: Counted = vec![(
            "pods",
            vec![
                json!({"spec": {"containers": [{"name": "a"}]}}),
                json!({"spec": {"containers": [{"name": "b", "resources": {"limits": {"cpu": "1"}}}]}}),
            ],
        )];
        assert_eq!(plan(&quota, &objects).unwrap()["used"]["pods"], "1");
    }
}
