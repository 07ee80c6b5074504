//! The legacy ServiceAccount token cleaner (upstream
//! `pkg/controller/serviceaccount/legacy_serviceaccount_token_cleaner.go`, the
//! `legacy-serviceaccount-token-cleaner-controller`): auto-generated Secret tokens
//! unused for `--legacy-service-account-token-clean-up-period` (default one year) are
//! first labelled `kubernetes.io/legacy-token-invalid-since: <day>` (the apiserver then
//! refuses them) and deleted once that label is a clean-up period old.
//!
//! A token is a candidate only when it is older than the period, its last-used day
//! (the apiserver's `kubernetes.io/legacy-token-last-used` label) is too, its
//! ServiceAccount (same uid) still lists it in `secrets` (so it was auto-generated),
//! and no pod in its namespace references it. Nothing happens until the apiserver
//! has tracked last use for a period (the `since` day of its
//! `kube-system/kube-apiserver-legacy-service-account-token-tracking` ConfigMap).
//! One pass at start, then one a day, as upstream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_auth::authn::legacy::{INVALIDATED_LABEL, LAST_USED_LABEL, parse_day, utc_day};
use ferrokube_auth::node::{Referenced, pod_references};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::jiff::civil::Date;
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::replicaset::{is_conflict, is_not_found};
use crate::{Action, Controller, Result};

/// Upstream `DefaultCleanerSyncInterval`.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// `--legacy-service-account-token-clean-up-period`'s default (upstream: 365 days).
pub const DEFAULT_CLEAN_UP_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600);
/// The apiserver's tracking ConfigMap in `kube-system` and its key.
pub const TRACKING_CONFIGMAP: &str = "kube-apiserver-legacy-service-account-token-tracking";
pub const TRACKING_SINCE_KEY: &str = "since";
const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
const SA_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
/// The one key this controller's queue holds: each pass looks at every token.
const PASS_KEY: &str = "legacy-tokens";

/// What a pass does to one Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Label it invalid since `day` (merge patch carrying its uid, as upstream).
    Invalidate {
        namespace: String,
        name: String,
        uid: String,
        day: String,
    },
    /// Delete it, on the resourceVersion it was judged at.
    Delete {
        namespace: String,
        name: String,
        resource_version: String,
    },
}

/// Upstream `evaluateSATokens` as a pure function: the steps of a pass at `now`, the
/// apiserver having tracked last use since `tracked_since` (its ConfigMap's day).
pub fn plan(
    now: Timestamp,
    tracked_since: Date,
    period: Duration,
    secrets: &[Arc<Secret>],
    service_account: impl Fn(&str, &str) -> Option<Arc<ServiceAccount>>,
    pods_in: impl Fn(&str) -> Vec<Arc<Pod>>,
) -> Vec<Step> {
    let Ok(period) = SignedDuration::try_from(period) else {
        return Vec::new();
    };
    // 00:00 UTC on the day after tracking started, as upstream.
    let Some(tracked_from) = tracked_since
        .tomorrow()
        .ok()
        .and_then(|d| d.to_zoned(TimeZone::UTC).ok())
        .map(|z| z.timestamp())
    else {
        return Vec::new();
    };
    let (Ok(tracked_long_enough), Ok(preserve_created_on_or_after)) =
        (tracked_from.checked_add(period), now.checked_sub(period))
    else {
        return Vec::new();
    };
    if now < tracked_long_enough {
        return Vec::new();
    }
    let preserve_used_on_or_after = utc_day(preserve_created_on_or_after);
    let mut referenced_in: HashMap<String, Vec<serde_json::Value>> = HashMap::new();
    let mut steps = Vec::new();
    for secret in secrets {
        let meta = &secret.metadata;
        if secret.type_.as_deref() != Some(TOKEN_TYPE) || meta.deletion_timestamp.is_some() {
            continue;
        }
        if meta
            .creation_timestamp
            .as_ref()
            .is_none_or(|t| t.0 >= preserve_created_on_or_after)
        {
            continue;
        }
        let labels = meta.labels.clone().unwrap_or_default();
        // Without the label the token counts as unused since tracking started; a label
        // that does not parse leaves its use unknown, and the token alone.
        if let Some(last_used) = labels.get(LAST_USED_LABEL) {
            match parse_day(last_used) {
                Some(day) if day < preserve_used_on_or_after => {}
                _ => continue,
            }
        }
        let (namespace, name) = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        let annotations = meta.annotations.clone().unwrap_or_default();
        let Some(sa_name) = annotations
            .get(SA_NAME_ANNOTATION)
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        let Some(sa) = service_account(&namespace, sa_name) else {
            continue;
        };
        let sa_uid = annotations
            .get(SA_UID_ANNOTATION)
            .map(String::as_str)
            .unwrap_or("");
        if !sa_uid.is_empty() && Some(sa_uid) != sa.metadata.uid.as_deref() {
            continue;
        }
        // Only a Secret its ServiceAccount lists is known to be auto-generated.
        let listed = sa
            .secrets
            .iter()
            .flatten()
            .any(|r| r.name.as_deref() == Some(name.as_str()));
        if !listed {
            continue;
        }
        let pods = referenced_in.entry(namespace.clone()).or_insert_with(|| {
            pods_in(&namespace)
                .iter()
                .filter_map(|p| serde_json::to_value(&**p).ok())
                .collect()
        });
        if pods
            .iter()
            .any(|p| pod_references(p, Referenced::Secret, &name))
        {
            continue;
        }
        match labels.get(INVALIDATED_LABEL).and_then(|d| parse_day(d)) {
            None => steps.push(Step::Invalidate {
                namespace,
                name,
                uid: meta.uid.clone().unwrap_or_default(),
                day: utc_day(now).to_string(),
            }),
            Some(since) if since < preserve_used_on_or_after => steps.push(Step::Delete {
                namespace,
                name,
                resource_version: meta.resource_version.clone().unwrap_or_default(),
            }),
            Some(_) => {}
        }
    }
    steps
}

/// The cleaner.
pub struct LegacyTokenCleanerController {
    client: kube::Client,
    period: Duration,
    secrets: Store<Secret>,
    service_accounts: Store<ServiceAccount>,
    pods: Store<Pod>,
    /// The time a pass judges by: the clock, or a later one in tests (a token must be
    /// a clean-up period old).
    now: Box<dyn Fn() -> Timestamp + Send + Sync>,
}

impl LegacyTokenCleanerController {
    /// `period`: `--legacy-service-account-token-clean-up-period`.
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        period: Duration,
    ) -> Arc<Self> {
        Self::with_clock(factory, client, period, Box::new(Timestamp::now))
    }

    pub fn with_clock(
        factory: &SharedInformerFactory,
        client: kube::Client,
        period: Duration,
        now: Box<dyn Fn() -> Timestamp + Send + Sync>,
    ) -> Arc<Self> {
        Arc::new(LegacyTokenCleanerController {
            client,
            period,
            secrets: factory.informer::<Secret>().store(),
            service_accounts: factory.informer::<ServiceAccount>().store(),
            pods: factory.informer::<Pod>().store(),
            now,
        })
    }

    /// The tracking ConfigMap's day, read live as upstream (the controller's role may
    /// get only that one ConfigMap).
    async fn tracked_since(&self) -> Result<Option<Date>> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
        let cm = match api.get(TRACKING_CONFIGMAP).await {
            Ok(cm) => cm,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let since = cm.data.as_ref().and_then(|d| d.get(TRACKING_SINCE_KEY));
        Ok(since.and_then(|s| parse_day(s)))
    }

    async fn apply(&self, step: &Step) -> kube::Result<()> {
        match step {
            Step::Invalidate {
                namespace,
                name,
                uid,
                day,
            } => {
                let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
                let patch = json!({"metadata": {"uid": uid, "labels": {INVALIDATED_LABEL: day}}});
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Step::Delete {
                namespace,
                name,
                resource_version,
            } => {
                let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: None,
                        resource_version: Some(resource_version.clone()),
                    }),
                    ..Default::default()
                };
                match api.delete(name, &dp).await {
                    Ok(_) => Ok(()),
                    // Changed or gone since it was judged: the next pass looks again.
                    Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Controller for LegacyTokenCleanerController {
    fn name(&self) -> &'static str {
        "legacy-serviceaccount-token-cleaner"
    }

    fn watch(self: Arc<Self>, _factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        // Passes are timed, not driven by events (upstream `wait.Until`).
        queue.add(PASS_KEY.to_string());
    }

    async fn reconcile(&self, _key: &str) -> Result<Action> {
        // Upstream logs a missing or unreadable ConfigMap and waits for the next pass.
        let Some(since) = self.tracked_since().await? else {
            return Ok(Action::RequeueAfter(SYNC_INTERVAL));
        };
        let secrets = self.secrets.list();
        let steps = plan(
            (self.now)(),
            since,
            self.period,
            &secrets,
            |ns, name| self.service_accounts.get_by_name(Some(ns), name),
            |ns| self.pods.list_namespace(ns),
        );
        for step in &steps {
            // As upstream: a failed write is logged, the others still happen.
            if let Err(e) = self.apply(step).await {
                tracing::warn!(?step, error = %e, "cleaning a legacy ServiceAccount token failed");
            }
        }
        Ok(Action::RequeueAfter(SYNC_INTERVAL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const YEAR: Duration = DEFAULT_CLEAN_UP_PERIOD;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn day(s: &str) -> Date {
        s.parse().unwrap()
    }

    fn secret(name: &str, created: &str, labels: Value) -> Arc<Secret> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {
                    "namespace": "ns", "name": name, "uid": format!("uid-{name}"),
                    "resourceVersion": "7", "creationTimestamp": created, "labels": labels,
                    "annotations": {SA_NAME_ANNOTATION: "builder", SA_UID_ANNOTATION: "sa-uid"},
                },
                "type": TOKEN_TYPE,
            }))
            .unwrap(),
        )
    }

    fn builder(listed: &[&str]) -> Arc<ServiceAccount> {
        let secrets: Vec<Value> = listed.iter().map(|n| json!({"name": n})).collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": "ns", "name": "builder", "uid": "sa-uid"},
                "secrets": secrets,
            }))
            .unwrap(),
        )
    }

    fn run(
        now: &str,
        secrets: &[Arc<Secret>],
        sa: Arc<ServiceAccount>,
        pods: Vec<Arc<Pod>>,
    ) -> Vec<Step> {
        plan(
            ts(now),
            day("2024-01-01"),
            YEAR,
            secrets,
            |ns, name| (ns == "ns" && name == "builder").then(|| sa.clone()),
            |_| pods.clone(),
        )
    }

    fn invalidate(name: &str, on: &str) -> Step {
        Step::Invalidate {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            day: on.into(),
        }
    }

    #[test]
    fn an_old_unused_listed_token_is_invalidated_then_deleted_a_period_later() {
        let sa = builder(&["old"]);
        let fresh = secret("old", "2024-06-01T00:00:00Z", json!({}));
        assert_eq!(
            run("2025-12-01T10:00:00Z", &[fresh], sa.clone(), vec![]),
            [invalidate("old", "2025-12-01")]
        );
        let labelled = secret(
            "old",
            "2024-06-01T00:00:00Z",
            json!({INVALIDATED_LABEL: "2025-12-01"}),
        );
        assert!(
            run(
                "2026-06-01T00:00:00Z",
                std::slice::from_ref(&labelled),
                sa.clone(),
                vec![]
            )
            .is_empty()
        );
        assert_eq!(
            run("2026-12-05T00:00:00Z", &[labelled], sa, vec![]),
            [Step::Delete {
                namespace: "ns".into(),
                name: "old".into(),
                resource_version: "7".into(),
            }]
        );
    }

    #[test]
    fn tokens_in_use_or_of_unknown_origin_are_kept() {
        let now = "2025-12-01T10:00:00Z";
        let created = "2024-06-01T00:00:00Z";
        // Used within the period; an unparsable last-used day.
        let used = secret("used", created, json!({LAST_USED_LABEL: "2025-06-01"}));
        let unknown = secret("unknown", created, json!({LAST_USED_LABEL: "June"}));
        // Not listed by its ServiceAccount: maybe made by hand.
        let unlisted = secret("unlisted", created, json!({}));
        // Younger than the period.
        let young = secret("young", "2025-06-01T00:00:00Z", json!({}));
        let sa = builder(&["used", "unknown", "young", "mounted"]);
        let mounted = secret("mounted", created, json!({LAST_USED_LABEL: "2024-07-01"}));
        let pod: Arc<Pod> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": "ns", "name": "p"},
                "spec": {"containers": [{"name": "c"}],
                         "volumes": [{"name": "t", "secret": {"secretName": "mounted"}}]},
            }))
            .unwrap(),
        );
        let all = [used, unknown, unlisted, young, mounted.clone()];
        assert!(run(now, &all, sa.clone(), vec![pod]).is_empty());
        // The same mounted token, once no pod uses it, goes.
        assert_eq!(
            run(now, &[mounted], sa, vec![]),
            [invalidate("mounted", "2025-12-01")]
        );
    }

    #[test]
    fn a_service_account_with_another_uid_or_a_short_tracking_history_stops_it() {
        let s = secret("old", "2020-01-01T00:00:00Z", json!({}));
        let mut other: ServiceAccount = (*builder(&["old"])).clone();
        other.metadata.uid = Some("recreated".into());
        assert!(
            run(
                "2025-12-01T00:00:00Z",
                std::slice::from_ref(&s),
                Arc::new(other),
                vec![]
            )
            .is_empty()
        );
        // Tracking began during 2024-01-01, so from 2024-01-02 00:00: a period (365
        // days, 2024 a leap year) of it has passed on 2025-01-01 00:00.
        assert!(
            run(
                "2024-12-31T23:59:59Z",
                std::slice::from_ref(&s),
                builder(&["old"]),
                vec![]
            )
            .is_empty()
        );
        assert_eq!(
            run("2025-01-01T00:00:00Z", &[s], builder(&["old"]), vec![]),
            [invalidate("old", "2025-01-01")]
        );
    }

    #[test]
    fn days_parse_as_upstreams_date_format_only() {
        assert_eq!(parse_day("2025-01-02"), Some(day("2025-01-02")));
        for bad in ["2025-1-2", "2025-01-02T00:00:00Z", "", "2025-02-30"] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
    }
}
