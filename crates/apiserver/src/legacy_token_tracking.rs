//! The legacy token tracking ConfigMap (upstream
//! `pkg/controlplane/controller/legacytokentracking`): `kube-system/
//! kube-apiserver-legacy-service-account-token-tracking` records under `since` the day
//! (UTC, `YYYY-MM-DD`) from which this apiserver labels legacy Secret tokens with the
//! day they were last used. The controller manager's legacy token cleaner reads it:
//! a token without that label counts as unused only since then.
//!
//! As upstream: created when missing (again after a deletion, at most once per 30
//! minutes, so that apiservers of a cluster do not fight over it), its `since`
//! rewritten to today when it does not parse as a date, and left alone otherwise.
//! Runs over the apiserver's own ConfigMap store until shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_registry::{Part, Store, UpdateInput, WatchParams, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

/// Upstream `ConfigMapName`.
pub(crate) const CONFIG_MAP_NAME: &str = "kube-apiserver-legacy-service-account-token-tracking";
/// Upstream `ConfigMapDataKey`.
pub(crate) const SINCE_KEY: &str = "since";
const NAMESPACE: &str = "kube-system";
/// Upstream's creation rate limit (`rate.Every(30*time.Minute)`, burst 1).
const CREATE_INTERVAL: Duration = Duration::from_secs(30 * 60);

/// What the ConfigMap needs, from the stored one (if any).
#[derive(Debug, PartialEq)]
pub(crate) enum Plan {
    Nothing,
    Create,
    /// Keep the object, with `since` set to today.
    RewriteSince,
}

/// Upstream `syncConfigMap`'s decision.
pub(crate) fn plan(current: Option<&Value>) -> Plan {
    let Some(cm) = current else {
        return Plan::Create;
    };
    let since = cm["data"][SINCE_KEY].as_str().unwrap_or("");
    if ferrokube_auth::authn::legacy::parse_day(since).is_some() {
        Plan::Nothing
    } else {
        Plan::RewriteSince
    }
}

fn today() -> String {
    ferrokube_auth::authn::legacy::utc_day(jiff::Timestamp::now()).to_string()
}

/// One sync; returns when a creation was made (for the rate limit), or the time
/// the next creation may happen when one was due but held back.
async fn sync(store: &Store, last_created: Option<Instant>) -> Result<Option<Instant>, String> {
    let current = match store.get(Some(NAMESPACE), CONFIG_MAP_NAME).await {
        Ok(cm) => Some(cm),
        Err(e) if e.code == 404 => None,
        Err(e) => return Err(e.message),
    };
    let opts = WriteOptions::default();
    match plan(current.as_ref()) {
        Plan::Nothing => Ok(None),
        Plan::Create => {
            if let Some(at) = last_created.map(|t| t + CREATE_INTERVAL)
                && at > Instant::now()
            {
                return Ok(Some(at));
            }
            let cm = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"namespace": NAMESPACE, "name": CONFIG_MAP_NAME},
                "data": {SINCE_KEY: today()},
            });
            match store.create(Some(NAMESPACE), cm, &opts).await {
                Ok(_) => Ok(Some(Instant::now())),
                Err(e) if e.code == 409 => Ok(None),
                Err(e) => Err(e.message),
            }
        }
        Plan::RewriteSince => {
            let patch = json!({"data": {SINCE_KEY: today()}});
            let update = UpdateInput::Patch(ferrokube_registry::PatchType::Merge, patch);
            match store
                .update(Some(NAMESPACE), CONFIG_MAP_NAME, update, Part::Main, &opts)
                .await
            {
                Ok(_) => Ok(None),
                Err(e) if matches!(e.code, 404 | 409) => Ok(None),
                Err(e) => Err(e.message),
            }
        }
    }
}

/// Keeps the ConfigMap until `shutdown` turns true.
pub(crate) async fn run(configmaps: Arc<Store>, mut shutdown: watch::Receiver<bool>) {
    let params = WatchParams {
        field_selector: Some(format!("metadata.name={CONFIG_MAP_NAME}")),
        ..Default::default()
    };
    let mut last_created: Option<Instant> = None;
    loop {
        let mut events = match configmaps.watch(Some(NAMESPACE), &params).await {
            Ok(rx) => rx,
            Err(e) => {
                tracing::warn!(error = %e, "watching the legacy token tracking ConfigMap failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        loop {
            // The next sync: at once, or when a held-back creation becomes allowed.
            let mut retry_at = None;
            match sync(&configmaps, last_created).await {
                Ok(Some(at)) if at > Instant::now() => retry_at = Some(at),
                Ok(Some(created)) => last_created = Some(created),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "syncing the legacy token tracking ConfigMap failed");
                    retry_at = Some(Instant::now() + Duration::from_secs(1));
                }
            }
            let wait = async {
                match retry_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                item = events.recv() => {
                    if item.is_none() {
                        break;
                    }
                }
                _ = wait => {}
                r = shutdown.changed() => {
                    if r.is_err() || *shutdown.borrow() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_unparsable_since_is_written_and_a_date_kept() {
        assert_eq!(plan(None), Plan::Create);
        assert_eq!(
            plan(Some(&json!({"data": {"since": "2026-12-05"}}))),
            Plan::Nothing
        );
        for bad in [
            json!({}),
            json!({"data": {}}),
            json!({"data": {"since": "yesterday"}}),
            json!({"data": {"since": "2026-13-01"}}),
            json!({"data": {"since": "2026-12-05T00:00:00Z"}}),
        ] {
            assert_eq!(plan(Some(&bad)), Plan::RewriteSince, "{bad}");
        }
    }

    #[test]
    fn today_is_a_utc_date() {
        let d = today();
        assert_eq!(d.len(), 10);
        assert!(d.parse::<jiff::civil::Date>().is_ok());
    }
}
