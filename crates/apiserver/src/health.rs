//! `/healthz`, `/livez` and `/readyz` as upstream's `k8s.io/apiserver/pkg/server/healthz`
//! answers them: the endpoint runs all its checks (`?verbose` lists them,
//! `?exclude=<check>` skips one), `/<endpoint>/<check>` runs one, and a failure is a 500
//! whose body always lists every check.

use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};

use crate::handler::{Body, State, respond};

/// A check that a part outside this crate adds to the health endpoints (upstream's
/// `healthz.HealthChecker`), e.g. encryption at rest's `kms-providers`.
#[async_trait::async_trait]
pub trait HealthCheck: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &str;
    /// Whether `/livez` runs it as well as `/healthz` and `/readyz`. Upstream keeps
    /// checks of outside services (KMS plugins) off `/livez`: a restart would not
    /// mend them.
    fn on_livez(&self) -> bool {
        false
    }
    /// The reason is logged, never served: these endpoints are public.
    async fn check(&self) -> Result<(), String>;
}

/// The results of the added checks, by name, with where each applies.
struct Added {
    name: String,
    on_livez: bool,
    ok: bool,
}

/// The checks `endpoint` runs, in upstream's order, with their results.
fn checks(
    endpoint: &str,
    storage_ok: bool,
    shutting_down: bool,
    added: &[Added],
) -> Vec<(String, bool)> {
    let mut checks = vec![("ping".to_string(), true), ("etcd".to_string(), storage_ok)];
    checks.extend(
        added
            .iter()
            .filter(|a| endpoint != "livez" || a.on_livez)
            .map(|a| (a.name.clone(), a.ok)),
    );
    checks.push(("poststarthook/start-watch-cache".to_string(), true));
    if endpoint == "readyz" {
        checks.push(("shutdown".to_string(), !shutting_down));
    }
    checks
}

async fn run_added(added: &[Arc<dyn HealthCheck>]) -> Vec<Added> {
    let mut results = Vec::with_capacity(added.len());
    for check in added {
        let result = check.check().await;
        if let Err(reason) = &result {
            tracing::warn!(check = check.name(), %reason, "health check failed");
        }
        results.push(Added {
            name: check.name().to_string(),
            on_livez: check.on_livez(),
            ok: result.is_ok(),
        });
    }
    results
}

/// The excluded check names of a query: every `exclude` parameter, comma lists split.
fn excluded(query: Option<&str>) -> Vec<String> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(k, _)| k == "exclude")
        .flat_map(|(_, v)| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What a health path answers: `None` when it names no endpoint or check of this
/// server (a 404).
fn answer(
    path: &str,
    query: Option<&str>,
    results: impl Fn(&str) -> Vec<(String, bool)>,
) -> Option<(StatusCode, String)> {
    let path = path.trim_start_matches('/');
    let (endpoint, check) = match path.split_once('/') {
        Some((endpoint, check)) => (endpoint, Some(check)),
        None => (path, None),
    };
    if !matches!(endpoint, "healthz" | "livez" | "readyz") {
        return None;
    }
    let checks = results(endpoint);
    if let Some(check) = check {
        let (name, ok) = checks.iter().find(|(name, _)| *name == check)?;
        return Some(if *ok {
            (StatusCode::OK, "ok".to_string())
        } else {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {name} check failed\n"),
            )
        });
    }
    let mut excluded = excluded(query);
    let mut out = String::new();
    let mut failed = false;
    for (name, ok) in &checks {
        if let Some(i) = excluded.iter().position(|e| e == name) {
            excluded.remove(i);
            out.push_str(&format!("[+]{name} excluded: ok\n"));
        } else if *ok {
            out.push_str(&format!("[+]{name} ok\n"));
        } else {
            // Upstream withholds the reason: these endpoints are public.
            out.push_str(&format!("[-]{name} failed: reason withheld\n"));
            failed = true;
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        out.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            names.join(",")
        ));
    }
    if failed {
        out.push_str(&format!("{endpoint} check failed\n"));
        return Some((StatusCode::INTERNAL_SERVER_ERROR, out));
    }
    let verbose =
        form_urlencoded::parse(query.unwrap_or("").as_bytes()).any(|(k, _)| k == "verbose");
    if !verbose {
        return Some((StatusCode::OK, "ok".to_string()));
    }
    out.push_str(&format!("{endpoint} check passed\n"));
    Some((StatusCode::OK, out))
}

/// Every health endpoint and check path this server answers (`/readyz/etcd`), for the
/// root's path list.
pub(crate) fn listed_paths(added: &[Arc<dyn HealthCheck>]) -> Vec<String> {
    let added: Vec<Added> = added
        .iter()
        .map(|c| Added {
            name: c.name().to_string(),
            on_livez: c.on_livez(),
            ok: true,
        })
        .collect();
    let mut paths = Vec::new();
    for endpoint in ["healthz", "livez", "readyz"] {
        paths.push(format!("/{endpoint}"));
        paths.extend(
            checks(endpoint, true, false, &added)
                .into_iter()
                .map(|(name, _)| format!("/{endpoint}/{name}")),
        );
    }
    paths
}

/// Whether a request path is a health endpoint or one of its checks.
pub(crate) fn is_health_path(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"]
        .iter()
        .any(|e| path == *e || path.strip_prefix(e).is_some_and(|r| r.starts_with('/')))
}

/// `--etcd-healthcheck-timeout` (for `/healthz` and `/livez`) and
/// `--etcd-readycheck-timeout` (for `/readyz`), upstream's defaults 2 s each: a
/// storage that does not answer in time fails the check instead of holding the probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageCheckTimeouts {
    pub health: Duration,
    pub ready: Duration,
}

impl Default for StorageCheckTimeouts {
    fn default() -> Self {
        StorageCheckTimeouts {
            health: Duration::from_secs(2),
            ready: Duration::from_secs(2),
        }
    }
}

/// Whether the storage answered within `timeout`.
async fn storage_answers<T, E>(
    answer: impl std::future::Future<Output = Result<T, E>>,
    timeout: Duration,
) -> bool {
    matches!(tokio::time::timeout(timeout, answer).await, Ok(Ok(_)))
}

pub(crate) async fn serve(
    state: &State,
    path: &str,
    query: Option<&str>,
) -> Option<Response<Body>> {
    let timeout = if path.starts_with("/readyz") {
        state.storage_check_timeouts.ready
    } else {
        state.storage_check_timeouts.health
    };
    let storage_ok = storage_answers(state.registry.storage().current_revision(), timeout).await;
    let shutting_down = *state.shutdown_initiated.borrow();
    let added = run_added(&state.health_checks).await;
    let (code, body) = answer(path, query, |endpoint| {
        checks(endpoint, storage_ok, shutting_down, &added)
    })?;
    let mut r = respond(code, "text/plain; charset=utf-8", body);
    r.headers_mut().insert(
        "x-content-type-options",
        http::HeaderValue::from_static("nosniff"),
    );
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(path: &str, query: Option<&str>, storage_ok: bool) -> Option<(u16, String)> {
        answer(path, query, |e| checks(e, storage_ok, false, &[])).map(|(c, b)| (c.as_u16(), b))
    }

    #[derive(Debug)]
    struct Fixed(Result<(), String>);

    #[async_trait::async_trait]
    impl HealthCheck for Fixed {
        fn name(&self) -> &str {
            "kms-providers"
        }
        async fn check(&self) -> Result<(), String> {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn added_checks_run_on_healthz_and_readyz_only() {
        let failing: Vec<Arc<dyn HealthCheck>> = vec![Arc::new(Fixed(Err("plugin down".into())))];
        let added = run_added(&failing).await;
        let run = |path: &str| answer(path, None, |e| checks(e, true, false, &added)).unwrap();
        let (code, body) = run("/readyz");
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body,
            "[+]ping ok\n[+]etcd ok\n[-]kms-providers failed: reason withheld\n[+]poststarthook/start-watch-cache ok\n[+]shutdown ok\nreadyz check failed\n"
        );
        assert_eq!(run("/healthz").0, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(run("/livez").0, StatusCode::OK);
        assert_eq!(
            run("/healthz/kms-providers"),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error: kms-providers check failed\n".to_string()
            )
        );
        let passing: Vec<Arc<dyn HealthCheck>> = vec![Arc::new(Fixed(Ok(())))];
        let added = run_added(&passing).await;
        let (code, _) = answer("/readyz", None, |e| checks(e, true, false, &added)).unwrap();
        assert_eq!(code, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_storage_that_does_not_answer_fails_the_check() {
        let t = Duration::from_millis(50);
        assert!(storage_answers(async { Ok::<_, ()>(1) }, t).await);
        assert!(!storage_answers(async { Err::<(), _>(()) }, t).await);
        assert!(!storage_answers(std::future::pending::<Result<(), ()>>(), t).await);
    }

    #[test]
    fn endpoints_and_verbose() {
        assert_eq!(run("/readyz", None, true), Some((200, "ok".into())));
        assert_eq!(
            run("/readyz", Some("verbose"), true).unwrap().1,
            "[+]ping ok\n[+]etcd ok\n[+]poststarthook/start-watch-cache ok\n[+]shutdown ok\nreadyz check passed\n"
        );
        assert!(
            !run("/livez", Some("verbose"), true)
                .unwrap()
                .1
                .contains("shutdown")
        );
        assert_eq!(run("/metrics", None, true), None);
    }

    #[test]
    fn a_failure_is_500_and_always_verbose() {
        assert_eq!(
            run("/healthz", None, false),
            Some((
                500,
                "[+]ping ok\n[-]etcd failed: reason withheld\n[+]poststarthook/start-watch-cache ok\nhealthz check failed\n".into()
            ))
        );
        // Excluding the failing check passes.
        assert_eq!(
            run("/healthz", Some("exclude=etcd&verbose"), false).unwrap(),
            (
                200,
                "[+]ping ok\n[+]etcd excluded: ok\n[+]poststarthook/start-watch-cache ok\nhealthz check passed\n".into()
            )
        );
    }

    #[test]
    fn single_checks() {
        assert_eq!(run("/readyz/etcd", None, true), Some((200, "ok".into())));
        assert_eq!(
            run("/livez/etcd", None, false),
            Some((500, "internal server error: etcd check failed\n".into()))
        );
        assert_eq!(
            run("/readyz/poststarthook/start-watch-cache", None, true),
            Some((200, "ok".into()))
        );
        assert_eq!(run("/livez/shutdown", None, true), None);
        assert_eq!(run("/readyz/nope", None, true), None);
    }

    #[test]
    fn unknown_exclusions_are_warned_about() {
        let (code, body) = run(
            "/readyz",
            Some("exclude=nope,ping&exclude=other&verbose"),
            true,
        )
        .unwrap();
        assert_eq!(code, 200);
        assert!(body.starts_with("[+]ping excluded: ok\n"), "{body}");
        assert!(
            body.contains(
                "warn: some health checks cannot be excluded: no matches for \"nope\",\"other\"\n"
            ),
            "{body}"
        );
    }

    #[test]
    fn health_paths() {
        for p in [
            "/healthz",
            "/livez",
            "/readyz",
            "/readyz/etcd",
            "/livez/poststarthook/x",
        ] {
            assert!(is_health_path(p), "{p}");
        }
        for p in ["/healthzz", "/readyzetcd", "/api", "/"] {
            assert!(!is_health_path(p), "{p}");
        }
    }
}
