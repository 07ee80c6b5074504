//! The resource quota controller (upstream `pkg/controller/resourcequota`): keeps
//! every ResourceQuota's `status.hard` equal to `spec.hard` and `status.used` equal to
//! what the namespace's objects use, recomputed when a quota or a counted object
//! changes and every five minutes (upstream `--resource-quota-sync-period`). The
//! ResourceQuota admission plugin charges creates in between and relies on this
//! status.
//!
//! Pods, services, configmaps, secrets, persistentvolumeclaims,
//! replicationcontrollers and resourcequotas are counted from typed informers (their
//! named resources, such as `requests.cpu`, and their `count/<resource>`). Any other
//! resource's `count/<resource>.<group>` (`count/deployments.apps`, a custom
//! resource's) is counted as upstream's generic object-count evaluator does, by a
//! metadata-only watch of the resource found through discovery (upstream's quota
//! monitor). Such a watch starts the first time a quota names the resource, not for
//! every resource up front; a resource discovery does not know yet (a CRD still to
//! come) is looked up again every 30 s while a quota names it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ferrokube_apimachinery::quota::{self, Usage};
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::PartialObjectMeta;
use kube::discovery::{Scope, verbs};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::{Action, Controller, Result};

/// Upstream's full recalculation period.
pub const RESYNC: Duration = Duration::from_secs(300);

/// How soon a resource discovery did not know is looked up again (upstream's quota
/// monitor re-runs discovery every 30 s).
const REDISCOVER: Duration = Duration::from_secs(30);

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

/// `status` a quota should have, from its spec, the namespace's objects of the kinds
/// counted from informers and `counts`, the number of objects of every other resource
/// a `count/...` name measures (names not in it are not known yet, and are left out
/// of `used`, as upstream leaves out resources without an evaluator): None when the
/// quota's current status is already right.
pub fn plan(quota: &Value, objects: &Counted, counts: &BTreeMap<String, i128>) -> Option<Value> {
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
        } else if let Some(n) = counts.get(name) {
            used.insert(name.clone(), quota::Amount::count(*n));
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
    monitors: CountMonitors,
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
            monitors: CountMonitors::default(),
        })
    }

    /// The number of objects in `ns` of each resource a `count/...` name of `hard`
    /// measures and the informers here do not, from their monitors (started here the
    /// first time a quota names them); true when some name is not counted yet, so
    /// that the quota is looked at again.
    async fn monitored_counts(
        &self,
        quota: &Value,
        ns: &str,
        hard: &Usage,
    ) -> (BTreeMap<String, i128>, bool) {
        let mut counts = BTreeMap::new();
        let mut pending = false;
        for name in hard.keys() {
            let Some((group, plural)) = counted_resource(name) else {
                continue;
            };
            if KINDS.iter().any(|p| quota::tracks("", p, name)) {
                continue;
            }
            match self
                .monitors
                .count(&self.client, &self.quotas, name, ns)
                .await
            {
                // As upstream's object-count evaluator: a quota with scopes selects
                // only pods, so it counts none of these.
                Some(n) if quota::scopes_match(quota, group, plural, &Value::Null) => {
                    counts.insert(name.clone(), n);
                }
                Some(_) => {
                    counts.insert(name.clone(), 0);
                }
                None => pending = true,
            }
        }
        (counts, pending)
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

/// The (group, plural) a `count/<plural>[.<group>]` name measures.
fn counted_resource(name: &str) -> Option<(&str, &str)> {
    let resource = name.strip_prefix("count/")?;
    let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
    (!plural.is_empty()).then_some((group, plural))
}

/// The live objects of one resource, by namespace, as its monitor last saw them.
#[derive(Default)]
struct MonitoredObjects {
    /// The first list is in: the counts are the resource's, not a partial view.
    synced: bool,
    names: HashMap<String, HashSet<String>>,
}

enum Monitor {
    /// Discovery did not know the resource (or could not be asked) at this time.
    Unknown(Instant),
    Watching(Arc<Mutex<MonitoredObjects>>),
}

/// Upstream's quota monitor, for the resources quotas count by `count/...` alone: a
/// metadata-only watch per resource, started the first time a quota names it. Each
/// object that comes or goes sends its namespace's quotas to the queue.
#[derive(Default)]
struct CountMonitors {
    queue: OnceLock<WorkQueue<String>>,
    monitors: tokio::sync::Mutex<HashMap<String, Monitor>>,
}

impl CountMonitors {
    /// The number of objects in `ns` that count `name` measures; None until its
    /// resource is found and its monitor has listed it.
    async fn count(
        &self,
        client: &kube::Client,
        quotas: &Store<ResourceQuota>,
        name: &str,
        ns: &str,
    ) -> Option<i128> {
        let mut monitors = self.monitors.lock().await;
        let stale = match monitors.get(name) {
            Some(Monitor::Watching(objects)) => {
                let objects = objects.lock();
                return objects
                    .synced
                    .then(|| objects.names.get(ns).map_or(0, |n| n.len() as i128));
            }
            Some(Monitor::Unknown(at)) => at.elapsed() >= REDISCOVER,
            None => true,
        };
        if stale {
            let (group, plural) = counted_resource(name)?;
            let monitor = match quotable_resource(client, group, plural).await {
                Some(ar) => Monitor::Watching(self.start(client, quotas, ar)),
                None => Monitor::Unknown(Instant::now()),
            };
            monitors.insert(name.to_string(), monitor);
        }
        None
    }

    fn start(
        &self,
        client: &kube::Client,
        quotas: &Store<ResourceQuota>,
        ar: ApiResource,
    ) -> Arc<Mutex<MonitoredObjects>> {
        let objects = Arc::new(Mutex::new(MonitoredObjects::default()));
        let Some(queue) = self.queue.get().cloned() else {
            return objects;
        };
        let (seen, quotas) = (objects.clone(), quotas.clone());
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &ar);
        tokio::spawn(async move {
            let recount = |ns: &str| {
                for quota in quotas.list_namespace(ns) {
                    queue.add(object_key(&*quota));
                }
            };
            let mut relist: Option<HashMap<String, HashSet<String>>> = None;
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let key = |o: &PartialObjectMeta<DynamicObject>| {
                    Some((o.metadata.namespace.clone()?, o.metadata.name.clone()?))
                };
                match event {
                    Ok(Event::Init) => relist = Some(HashMap::new()),
                    Ok(Event::InitApply(o)) => {
                        if let (Some(listed), Some((ns, name))) = (relist.as_mut(), key(&o)) {
                            listed.entry(ns).or_default().insert(name);
                        }
                    }
                    Ok(Event::InitDone) => {
                        let Some(listed) = relist.take() else {
                            continue;
                        };
                        let mut objects = seen.lock();
                        // After the first list every quota naming the resource waits
                        // for its count; after a relist, those whose namespace changed.
                        let changed: HashSet<String> = if objects.synced {
                            listed
                                .keys()
                                .chain(objects.names.keys())
                                .filter(|ns| listed.get(*ns) != objects.names.get(*ns))
                                .cloned()
                                .collect()
                        } else {
                            quotas
                                .list()
                                .iter()
                                .filter_map(|q| q.metadata.namespace.clone())
                                .collect()
                        };
                        objects.names = listed;
                        objects.synced = true;
                        drop(objects);
                        changed.iter().for_each(|ns| recount(ns));
                    }
                    Ok(Event::Apply(o)) => {
                        if let Some((ns, name)) = key(&o)
                            && seen
                                .lock()
                                .names
                                .entry(ns.clone())
                                .or_default()
                                .insert(name)
                        {
                            recount(&ns);
                        }
                    }
                    Ok(Event::Delete(o)) => {
                        let Some((ns, name)) = key(&o) else {
                            continue;
                        };
                        let removed = {
                            let mut objects = seen.lock();
                            let names = &mut objects.names;
                            let removed = names.get_mut(&ns).is_some_and(|n| n.remove(&name));
                            // An emptied namespace leaves no entry, so that a relist
                            // finding none there sees no change.
                            if names.get(&ns).is_some_and(HashSet::is_empty) {
                                names.remove(&ns);
                            }
                            removed
                        };
                        if removed {
                            recount(&ns);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(resource = %ar.plural, error = %e, "quota monitor watch error");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        });
        objects
    }
}

/// The resource `group`/`plural` as discovery serves it, if it is one a quota can
/// count (upstream `GetQuotableResources`: namespaced, with create, list, watch and
/// delete).
async fn quotable_resource(
    client: &kube::Client,
    group: &str,
    plural: &str,
) -> Option<ApiResource> {
    let served = match kube::discovery::group(client, group).await {
        Ok(served) => served,
        Err(e) => {
            tracing::debug!(group, error = %e, "quota monitor discovery");
            return None;
        }
    };
    served
        .recommended_resources()
        .into_iter()
        .find(|(ar, caps)| {
            ar.plural == plural
                && matches!(caps.scope, Scope::Namespaced)
                && [verbs::CREATE, verbs::LIST, verbs::WATCH, verbs::DELETE]
                    .iter()
                    .all(|v| caps.supports_operation(v))
        })
        .map(|(ar, _)| ar)
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
        let _ = self.monitors.queue.set(queue.clone());
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
        let (counts, pending) = self.monitored_counts(&quota, &ns, &hard).await;
        // A count still to come arrives with its monitor's first list; one whose
        // resource discovery did not know is looked up again soon.
        let next = if pending { REDISCOVER } else { RESYNC };
        let Some(status) = plan(&quota, &self.counted(&ns, &hard), &counts) else {
            return Ok(Action::RequeueAfter(next));
        };
        let mut updated = quota;
        updated["status"] = status;
        let updated: ResourceQuota = serde_json::from_value(updated)?;
        let api: Api<ResourceQuota> = Api::namespaced(self.client.clone(), &ns);
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(Action::RequeueAfter(next)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::Done),
            // A conflict (admission charged the quota meanwhile): the informer event
            // that follows requeues with fresh state; retry meanwhile.
            Err(e) => Err(e.into()),
        }
    }
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
        let counts = BTreeMap::from([("count/deployments.apps".to_string(), 3)]);
        let status = plan(&quota, &objects, &counts).unwrap();
        assert_eq!(status["hard"]["pods"], "4");
        assert_eq!(
            status["used"],
            json!({"pods": "2", "requests.cpu": "750m", "configmaps": "2",
                "count/deployments.apps": "3"})
        );
        let mut synced = quota.clone();
        synced["status"] = status;
        assert_eq!(plan(&synced, &objects, &counts), None);
        // A count not known yet is left out of `used`, not shown as 0.
        let unknown = plan(&quota, &objects, &BTreeMap::new()).unwrap();
        assert!(unknown["used"].get("count/deployments.apps").is_none());
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
        assert_eq!(
            plan(&quota, &objects, &BTreeMap::new()).unwrap()["used"]["pods"],
            "1"
        );
    }
}
