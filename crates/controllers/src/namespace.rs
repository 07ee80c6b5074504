//! The namespace controller (upstream `pkg/controller/namespace/deletion`).
//!
//! When a namespace is being deleted and still carries the `kubernetes` finalizer,
//! every namespaced resource found through API discovery is emptied in it (delete
//! collection, or list + delete where deletecollection is not served); the
//! `NamespaceDeletion*` / `NamespaceContent*` conditions report progress; once
//! nothing is left, `/finalize` removes the `kubernetes` finalizer and the apiserver
//! deletes the namespace.
//!
//! Pure part: [`deletion_conditions`] and [`remove_finalizer`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::discovery::{Discovery, Scope, verbs};

use ferrokube_client::error_message;
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::replicaset::is_not_found;
use crate::{Action, Controller, Result, done_unless_failed};

pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// What a deletion pass found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletionReport {
    /// Discovery errors (group versions that failed).
    pub discovery_errors: Vec<String>,
    /// Errors deleting content.
    pub delete_errors: Vec<String>,
    /// Remaining objects per `resource.group`.
    pub remaining: BTreeMap<String, usize>,
    /// Remaining finalizers (finalizer -> objects carrying it).
    pub finalizers: BTreeMap<String, usize>,
}

fn cond(t: &str, failed: bool, reason: &str, msg: String, now: Timestamp) -> NamespaceCondition {
    NamespaceCondition {
        type_: t.into(),
        status: if failed { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: (!msg.is_empty()).then_some(msg),
        last_transition_time: Some(Time(now)),
    }
}

/// Upstream's namespace deletion conditions for a report (status True = problem).
pub fn deletion_conditions(r: &DeletionReport, now: Timestamp) -> Vec<NamespaceCondition> {
    let disc = !r.discovery_errors.is_empty();
    let del = !r.delete_errors.is_empty();
    let rem = !r.remaining.is_empty();
    let fin = !r.finalizers.is_empty();
    let join = |m: &BTreeMap<String, usize>, unit: &str| {
        m.iter()
            .map(|(k, v)| format!("{k} has {v} {unit}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        cond(
            "NamespaceDeletionDiscoveryFailure",
            disc,
            if disc {
                "DiscoveryFailed"
            } else {
                "ResourcesDiscovered"
            },
            if disc {
                format!(
                    "Discovery failed for some groups: {}",
                    r.discovery_errors.join(", ")
                )
            } else {
                "All resources successfully discovered".into()
            },
            now,
        ),
        cond(
            "NamespaceDeletionGroupVersionParsingFailure",
            false,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
            now,
        ),
        cond(
            "NamespaceDeletionContentFailure",
            del,
            if del {
                "ContentDeletionFailed"
            } else {
                "ContentDeleted"
            },
            if del {
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    r.delete_errors.len(),
                    r.delete_errors.join(", ")
                )
            } else {
                "All content successfully deleted, may be waiting on finalization".into()
            },
            now,
        ),
        cond(
            "NamespaceContentRemaining",
            rem,
            if rem {
                "SomeResourcesRemain"
            } else {
                "ContentRemoved"
            },
            if rem {
                format!(
                    "Some resources are remaining: {}",
                    join(&r.remaining, "objects")
                )
            } else {
                "All content successfully removed".into()
            },
            now,
        ),
        cond(
            "NamespaceFinalizersRemaining",
            fin,
            if fin {
                "SomeFinalizersRemain"
            } else {
                "ContentHasNoFinalizers"
            },
            if fin {
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    join(&r.finalizers, "resource instances")
                )
            } else {
                "All content-preserving finalizers finished".into()
            },
            now,
        ),
    ]
}

/// Merges new conditions into old ones, keeping transition times of unchanged statuses.
pub fn merge_conditions(
    old: &[NamespaceCondition],
    new: Vec<NamespaceCondition>,
) -> Vec<NamespaceCondition> {
    new.into_iter()
        .map(|mut c| {
            if let Some(o) = old.iter().find(|o| o.type_ == c.type_)
                && o.status == c.status
            {
                c.last_transition_time = o.last_transition_time.clone();
            }
            c
        })
        .collect()
}

/// `spec.finalizers` without `kubernetes`.
pub fn remove_finalizer(ns: &Namespace) -> Vec<String> {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != FINALIZER_KUBERNETES)
        .collect()
}

fn has_finalizer(ns: &Namespace) -> bool {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER_KUBERNETES))
}

/// The namespace controller.
pub struct NamespaceController {
    client: kube::Client,
    namespaces: Store<Namespace>,
}

impl NamespaceController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(NamespaceController {
            client,
            namespaces: factory.informer::<Namespace>().store(),
        })
    }

    /// Deletes every namespaced object in `ns` and reports what remains.
    async fn delete_content(&self, ns: &str) -> DeletionReport {
        let mut report = DeletionReport::default();
        let disc = match Discovery::new(self.client.clone()).run().await {
            Ok(d) => d,
            Err(e) => {
                report.discovery_errors.push(error_message(&e).into_owned());
                return report;
            }
        };
        for g in disc.groups() {
            for (ar, caps) in g.recommended_resources() {
                if !matches!(caps.scope, Scope::Namespaced)
                    || !caps.supports_operation(verbs::LIST)
                    || !caps.supports_operation(verbs::DELETE)
                {
                    continue;
                }
                let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
                let label = if ar.group.is_empty() {
                    ar.plural.clone()
                } else {
                    format!("{}.{}", ar.plural, ar.group)
                };
                let dp = DeleteParams::background();
                if caps.supports_operation(verbs::DELETE_COLLECTION) {
                    if let Err(e) = api.delete_collection(&dp, &ListParams::default()).await
                        && !is_not_found(&e)
                    {
                        report
                            .delete_errors
                            .push(format!("{label}: {}", error_message(&e)));
                    }
                } else {
                    match api.list_metadata(&ListParams::default()).await {
                        Ok(list) => {
                            for o in list.items {
                                let name = o.metadata.name.unwrap_or_default();
                                if let Err(e) = api.delete(&name, &dp).await
                                    && !is_not_found(&e)
                                {
                                    report
                                        .delete_errors
                                        .push(format!("{label}: {}", error_message(&e)));
                                }
                            }
                        }
                        Err(e) => report
                            .delete_errors
                            .push(format!("{label}: {}", error_message(&e))),
                    }
                }
                let meta: Api<PartialObjectMeta<DynamicObject>> =
                    Api::namespaced_with(self.client.clone(), ns, &ar);
                match meta.list(&ListParams::default()).await {
                    Ok(list) if !list.items.is_empty() => {
                        report.remaining.insert(label, list.items.len());
                        for o in &list.items {
                            for f in o.metadata.finalizers.iter().flatten() {
                                *report.finalizers.entry(f.clone()).or_default() += 1;
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => report
                        .delete_errors
                        .push(format!("{label}: {}", error_message(&e))),
                }
            }
        }
        report
    }
}

#[async_trait::async_trait]
impl Controller for NamespaceController {
    fn name(&self) -> &'static str {
        "namespace"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<Namespace>().add_event_handler(
            move |n: Notification<Namespace>| {
                let o = n.object();
                if o.metadata.deletion_timestamp.is_some() {
                    q.add(object_key(&**o));
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(ns) = self.namespaces.get(key) else {
            return Ok(Action::Done);
        };
        if ns.metadata.deletion_timestamp.is_none() || !has_finalizer(&ns) {
            return Ok(Action::Done);
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let now = Timestamp::now();
        // Mark Terminating (the apiserver does too) and report progress.
        let report = self.delete_content(key).await;
        let old = ns
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let conds = merge_conditions(&old, deletion_conditions(&report, now));
        if conds != old {
            // A status update, as upstream's `updateNamespaceStatusFunc` (the
            // namespace-controller role grants `update` on namespaces/status, not
            // `patch`); a conflict retries the whole reconcile.
            let mut updated = (*ns).clone();
            let status = updated.status.get_or_insert_with(Default::default);
            status.phase = Some("Terminating".into());
            status.conditions = Some(conds);
            match api
                .replace_status(key, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(Action::Done),
                Err(e) => return Err(e.into()),
            }
        }
        if !report.remaining.is_empty()
            || !report.delete_errors.is_empty()
            || !report.discovery_errors.is_empty()
        {
            // Upstream estimates the wait from pods' grace periods; poll instead.
            return Ok(Action::RequeueAfter(Duration::from_secs(2)));
        }
        let Some(fresh) = api.get_opt(key).await? else {
            return Ok(Action::Done);
        };
        let mut fin = fresh.clone();
        fin.spec.get_or_insert_with(Default::default).finalizers = Some(remove_finalizer(&fresh));
        done_unless_failed(
            api.replace_subresource("finalize", key, &PostParams::default(), &fin)
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_report_progress() {
        let now = Timestamp::from_second(100).unwrap();
        let clean = deletion_conditions(&DeletionReport::default(), now);
        assert_eq!(clean.len(), 5);
        assert!(clean.iter().all(|c| c.status == "False"), "{clean:?}");
        assert_eq!(clean[3].reason.as_deref(), Some("ContentRemoved"));
        let mut r = DeletionReport::default();
        r.remaining.insert("pods".into(), 3);
        r.finalizers.insert("example.com/x".into(), 1);
        let c = deletion_conditions(&r, now);
        let rem = c
            .iter()
            .find(|c| c.type_ == "NamespaceContentRemaining")
            .unwrap();
        assert_eq!(
            (rem.status.as_str(), rem.reason.as_deref()),
            ("True", Some("SomeResourcesRemain"))
        );
        assert_eq!(
            rem.message.as_deref(),
            Some("Some resources are remaining: pods has 3 objects")
        );
        let fin = c
            .iter()
            .find(|c| c.type_ == "NamespaceFinalizersRemaining")
            .unwrap();
        assert_eq!(fin.reason.as_deref(), Some("SomeFinalizersRemain"));
        // Transition times are kept while the status does not change.
        let later = Timestamp::from_second(200).unwrap();
        let merged = merge_conditions(&c, deletion_conditions(&r, later));
        assert_eq!(merged[3].last_transition_time, Some(Time(now)));
        let merged = merge_conditions(&c, deletion_conditions(&DeletionReport::default(), later));
        assert_eq!(merged[3].last_transition_time, Some(Time(later)));
    }

    #[test]
    fn finalize_drops_only_kubernetes() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {"finalizers": ["kubernetes", "example.com/other"]}})).unwrap();
        assert!(has_finalizer(&ns));
        assert_eq!(remove_finalizer(&ns), vec!["example.com/other".to_string()]);
    }
}
