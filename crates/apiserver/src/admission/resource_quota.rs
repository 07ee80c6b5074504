//! ResourceQuota (upstream `k8s.io/apiserver/pkg/admission/plugin/resourcequota`),
//! validating, last in the chain: a create (and a PVC update) is charged to every
//! ResourceQuota of its namespace whose `status.hard` tracks what the object uses
//! and whose scopes select it. Over a limit -> 403 `exceeded quota: <name>,
//! requested: ..., used: ..., limited: ...`; a quota the controller has not
//! measured yet -> 403 `status unknown for quota`; a cpu/memory quota and a
//! container without that request or limit -> 403 `failed quota: <name>: must
//! specify ...`. On success the new usage is written to the quotas' status (with
//! their resourceVersion, re-checked on a conflict), so concurrent creates cannot
//! both take the last unit; the resourcequota controller later recomputes it.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::quota::{self, Usage};
use ferrokube_registry::{ListParams, Part, Store, UpdateInput, WriteOptions};
use serde_json::Value;

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "ResourceQuota";

/// Rounds of charging against concurrent quota writers before giving up.
const ATTEMPTS: usize = 5;

pub(crate) struct ResourceQuota {
    quotas: Arc<Store>,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(ResourceQuota {
        quotas: init
            .registry
            .store("", "v1", "resourcequotas")
            .cloned()
            .ok_or("no resourcequotas store")?,
    }))
}

/// One quota's new usage after charging the request.
#[derive(Debug)]
pub(crate) struct Charge {
    pub quota: Value,
    pub used: Usage,
}

/// Upstream `CheckRequest` for one object against the namespace's quotas: the
/// quotas to update with their new usage, or the error text.
pub(crate) fn check(
    quotas: &[Value],
    group: &str,
    plural: &str,
    object: &Value,
    old: Option<&Value>,
) -> Result<Vec<Charge>, String> {
    let mut delta = quota::usage(group, plural, object);
    if let Some(old) = old {
        // Updates are charged only for what grows.
        delta = quota::subtract(&delta, &quota::usage(group, plural, old))
            .into_iter()
            .filter(|(_, a)| a.milli > 0)
            .collect();
    }
    let mut charges = Vec::new();
    for q in quotas {
        let name = q["metadata"]["name"].as_str().unwrap_or("");
        let hard = quota::parse_list(&q["status"]["hard"]);
        let interesting: BTreeSet<String> = hard
            .keys()
            .filter(|k| quota::tracks(group, plural, k))
            .cloned()
            .collect();
        if interesting.is_empty() || !quota::scopes_match(q, group, plural, object) {
            continue;
        }
        if group.is_empty() && plural == "pods" && old.is_none() {
            quota::pod_constraints(&interesting, object)
                .map_err(|e| format!("failed quota: {name}: {e}"))?;
        }
        let used = quota::parse_list(&q["status"]["used"]);
        if interesting.iter().any(|r| !used.contains_key(r)) {
            return Err(format!(
                "status unknown for quota: {name}, resources: {}",
                interesting.iter().cloned().collect::<Vec<_>>().join(",")
            ));
        }
        let requested = quota::mask(&delta, &interesting);
        if requested.is_empty() {
            continue;
        }
        let new_used = quota::add(&used, &requested);
        let exceeded: BTreeSet<String> = requested
            .keys()
            .filter(|k| new_used[*k].milli > hard[*k].milli)
            .cloned()
            .collect();
        if !exceeded.is_empty() {
            return Err(format!(
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                quota::pretty(&quota::mask(&requested, &exceeded)),
                quota::pretty(&quota::mask(&used, &exceeded)),
                quota::pretty(&quota::mask(&hard, &exceeded)),
            ));
        }
        charges.push(Charge {
            quota: q.clone(),
            used: new_used,
        });
    }
    Ok(charges)
}

#[async_trait]
impl Plugin for ResourceQuota {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        // Upstream's pod evaluator also charges what an in-place resize adds.
        let resize =
            a.operation == Operation::Update && a.is_core("pods") && a.subresource == "resize";
        !a.namespace.is_empty()
            && (resize
                || (a.subresource.is_empty()
                    && (a.operation == Operation::Create
                        || (a.operation == Operation::Update
                            && a.is_core("persistentvolumeclaims")))))
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(object) = object else {
            return Ok(());
        };
        let ns = a.namespace.as_str();
        let (group, plural) = (a.resource.group, a.resource.plural);
        // From the watch cache with this apiserver's own writes (a quota just created
        // or charged) applied; a charge against a stale quota fails its update with a
        // conflict, and the retry below reads storage.
        let mut quotas: Vec<Value> = super::webhook::fresh(&self.quotas, &format!("{ns}/"))
            .await
            .iter()
            .map(|q| (**q).clone())
            .collect();
        for _ in 0..ATTEMPTS {
            if quotas.is_empty() {
                return Ok(());
            }
            let charges = check(&quotas, group, plural, object, old).map_err(|e| a.forbidden(e))?;
            if charges.is_empty() || a.dry_run {
                return Ok(());
            }
            let mut conflict = false;
            for c in charges {
                let mut q = c.quota;
                q["status"]["used"] = quota::to_json(&c.used);
                let name = q["metadata"]["name"].as_str().unwrap_or("").to_string();
                match self
                    .quotas
                    .update(
                        Some(ns),
                        &name,
                        UpdateInput::Replace(q),
                        Part::Status,
                        &WriteOptions::default(),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_conflict() => {
                        conflict = true;
                        break;
                    }
                    Err(e) => {
                        return Err(a.forbidden(format!(
                            "unable to update status of quota {name}: {}",
                            e.message
                        )));
                    }
                }
            }
            if !conflict {
                return Ok(());
            }
            // Somebody charged a quota meanwhile: re-read them all and check again.
            // (Quotas already charged in this round stay charged; the controller's
            // recomputation corrects the excess, as upstream's.)
            quotas = self
                .quotas
                .list(Some(ns), &ListParams::default())
                .await?
                .items
                .iter()
                .map(|q| (**q).clone())
                .collect();
        }
        Err(a.forbidden("unable to update quota status: too many concurrent quota updates"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(hard: Value, used: Value) -> Value {
        json!({"metadata": {"name": "compute"}, "spec": {"hard": hard.clone()},
            "status": {"hard": hard, "used": used}})
    }

    fn pod(cpu: &str) -> Value {
        json!({"spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "64Mi"}}}]}})
    }

    #[test]
    fn charges_within_limits_and_refuses_beyond() {
        let q = quota(
            json!({"pods": "2", "requests.cpu": "1"}),
            json!({"pods": "1", "requests.cpu": "500m"}),
        );
        let charges = check(std::slice::from_ref(&q), "", "pods", &pod("500m"), None).unwrap();
        assert_eq!(quota::pretty(&charges[0].used), "pods=2,requests.cpu=1");
        assert_eq!(
            check(&[q], "", "pods", &pod("600m"), None).unwrap_err(),
            "exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1"
        );
    }

    #[test]
    fn unknown_status_missing_requests_and_unrelated_objects() {
        let fresh = json!({"metadata": {"name": "compute"}, "spec": {"hard": {"pods": "1"}},
            "status": {"hard": {"pods": "1"}}});
        assert_eq!(
            check(&[fresh], "", "pods", &pod("1"), None).unwrap_err(),
            "status unknown for quota: compute, resources: pods"
        );
        let q = quota(json!({"limits.cpu": "4"}), json!({"limits.cpu": "0"}));
        let bare = json!({"spec": {"containers": [{"name": "c"}]}});
        assert_eq!(
            check(std::slice::from_ref(&q), "", "pods", &bare, None).unwrap_err(),
            "failed quota: compute: must specify limits.cpu for: c"
        );
        assert!(
            check(&[q], "", "configmaps", &json!({}), None)
                .unwrap()
                .is_empty()
        );
        let counts = quota(json!({"configmaps": "1"}), json!({"configmaps": "1"}));
        assert_eq!(
            check(&[counts], "", "configmaps", &json!({}), None).unwrap_err(),
            "exceeded quota: compute, requested: configmaps=1, used: configmaps=1, limited: configmaps=1"
        );
    }

    #[test]
    fn claim_resizes_are_charged_for_the_growth() {
        let q = quota(
            json!({"requests.storage": "10Gi"}),
            json!({"requests.storage": "8Gi"}),
        );
        let claim = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        let charges = check(
            std::slice::from_ref(&q),
            "",
            "persistentvolumeclaims",
            &claim("5Gi"),
            Some(&claim("4Gi")),
        )
        .unwrap();
        assert_eq!(quota::pretty(&charges[0].used), "requests.storage=9Gi");
        assert!(
            check(
                &[q],
                "",
                "persistentvolumeclaims",
                &claim("7Gi"),
                Some(&claim("4Gi"))
            )
            .unwrap_err()
            .starts_with("exceeded quota: compute, requested: requests.storage=3Gi")
        );
    }
}
