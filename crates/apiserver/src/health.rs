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

/// What the configuration changes in upstream's post-start hooks.
#[derive(Clone, Copy, Debug)]
pub struct HookConfig {
    /// API Priority and Fairness is on (else the max-in-flight filter).
    pub priority_and_fairness: bool,
    /// `--proxy-client-cert-file` and `--proxy-client-key-file` are set.
    pub proxy_client_cert: bool,
    /// The groups whose storage brings a hook are served.
    pub core: bool,
    pub scheduling: bool,
    pub flowcontrol: bool,
    pub rbac: bool,
    /// APIServerIdentity: the identity lease's controllers run.
    pub apiserver_identity: bool,
}

/// The post-start hooks a v1.33 kube-apiserver lists, in its order (apiextensions
/// server, kube-apiserver, aggregator: each appends to the health lists as it is built),
/// as far as this configuration has them. Each names work this server does before it
/// serves (bootstraps, caches filled, controllers started), so all have finished once
/// the health endpoints answer. `autoregister-completion` is a check of its own.
#[derive(Clone, Debug)]
pub struct PostStartHooks {
    before_autoregistration: Vec<&'static str>,
}

impl PostStartHooks {
    pub fn new(c: HookConfig) -> PostStartHooks {
        let mut hooks = vec![
            "start-apiserver-admission-initializer",
            "generic-apiserver-start-informers",
        ];
        if c.priority_and_fairness {
            hooks.extend([
                "priority-and-fairness-config-consumer",
                "priority-and-fairness-filter",
            ]);
        } else {
            hooks.push("max-in-flight-filter");
        }
        hooks.extend([
            "storage-object-count-tracker-hook",
            "start-apiextensions-informers",
            "start-apiextensions-controllers",
            "crd-informer-synced",
            "start-system-namespaces-controller",
            "start-cluster-authentication-info-controller",
        ]);
        if c.apiserver_identity {
            hooks.extend([
                "start-kube-apiserver-identity-lease-controller",
                "start-kube-apiserver-identity-lease-garbage-collector",
            ]);
        }
        hooks.extend(["start-legacy-token-tracking-controller"]);
        for (served, hook) in [
            (c.core, "start-service-ip-repair-controllers"),
            (c.rbac, "rbac/bootstrap-roles"),
            (c.scheduling, "scheduling/bootstrap-system-priority-classes"),
            (c.flowcontrol, "priority-and-fairness-config-producer"),
        ] {
            if served {
                hooks.push(hook);
            }
        }
        hooks.extend([
            "bootstrap-controller",
            "start-kubernetes-service-cidr-controller",
        ]);
        if c.proxy_client_cert {
            hooks.push("aggregator-reload-proxy-client-cert");
        }
        hooks.extend([
            "start-kube-aggregator-informers",
            "apiservice-status-local-available-controller",
            "apiservice-status-remote-available-controller",
            "apiservice-registration-controller",
            "apiservice-discovery-controller",
            "kube-apiserver-autoregistration",
        ]);
        PostStartHooks {
            before_autoregistration: hooks,
        }
    }
}

/// The aggregator's hooks upstream adds as it prepares to run, after
/// `autoregister-completion`.
const AFTER_AUTOREGISTRATION: [&str; 2] = [
    "apiservice-openapi-controller",
    "apiservice-openapiv3-controller",
];

/// What the checks found.
struct Results<'a> {
    storage_ok: bool,
    shutting_down: bool,
    /// Every built-in group-version's APIService is registered and available.
    autoregistered: bool,
    added: &'a [Added],
    hooks: &'a PostStartHooks,
}

/// The checks `endpoint` runs, in upstream's order, with their results: `ping`,
/// `log`, `etcd` everywhere; `etcd-readiness`, `informer-sync` and `shutdown` on
/// `/readyz` only; added checks (KMS) after the storage's, not on `/livez`.
fn checks(endpoint: &str, r: &Results<'_>) -> Vec<(String, bool)> {
    let ready = endpoint == "readyz";
    let mut checks = vec![
        ("ping".to_string(), true),
        ("log".to_string(), true),
        ("etcd".to_string(), r.storage_ok),
    ];
    if ready {
        checks.push(("etcd-readiness".to_string(), r.storage_ok));
    }
    checks.extend(
        r.added
            .iter()
            .filter(|a| endpoint != "livez" || a.on_livez)
            .map(|a| (a.name.clone(), a.ok)),
    );
    if ready {
        // The watch caches are filled before the server answers.
        checks.push(("informer-sync".to_string(), true));
    }
    let hook = |name: &str| (format!("poststarthook/{name}"), true);
    checks.extend(r.hooks.before_autoregistration.iter().map(|h| hook(h)));
    checks.push(("autoregister-completion".to_string(), r.autoregistered));
    checks.extend(AFTER_AUTOREGISTRATION.iter().map(|h| hook(h)));
    if ready {
        checks.push(("shutdown".to_string(), !r.shutting_down));
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
pub(crate) fn listed_paths(added: &[Arc<dyn HealthCheck>], hooks: &PostStartHooks) -> Vec<String> {
    let added: Vec<Added> = added
        .iter()
        .map(|c| Added {
            name: c.name().to_string(),
            on_livez: c.on_livez(),
            ok: true,
        })
        .collect();
    let results = Results {
        storage_ok: true,
        shutting_down: false,
        autoregistered: true,
        added: &added,
        hooks,
    };
    let mut paths = Vec::new();
    for endpoint in ["healthz", "livez", "readyz"] {
        paths.push(format!("/{endpoint}"));
        paths.extend(
            checks(endpoint, &results)
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
    let results = Results {
        storage_ok,
        shutting_down,
        autoregistered: state.aggregator.autoregistered(&state.registry).await,
        added: &added,
        hooks: &state.post_start_hooks,
    };
    let (code, body) = answer(path, query, |endpoint| checks(endpoint, &results))?;
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

    fn all_hooks() -> PostStartHooks {
        PostStartHooks::new(all_hooks_config())
    }

    fn answer_with(
        path: &str,
        query: Option<&str>,
        storage_ok: bool,
        added: &[Added],
    ) -> Option<(u16, String)> {
        let hooks = all_hooks();
        let results = Results {
            storage_ok,
            shutting_down: false,
            autoregistered: true,
            added,
            hooks: &hooks,
        };
        answer(path, query, |e| checks(e, &results)).map(|(c, b)| (c.as_u16(), b))
    }

    fn run(path: &str, query: Option<&str>, storage_ok: bool) -> Option<(u16, String)> {
        answer_with(path, query, storage_ok, &[])
    }

    /// What a v1.33 kube-apiserver lists with etcd, RBAC, priority and fairness and a
    /// front proxy's client certificate (upstream's registration order).
    const UPSTREAM_READYZ: &str = "[+]ping ok
[+]log ok
[+]etcd ok
[+]etcd-readiness ok
[+]informer-sync ok
[+]poststarthook/start-apiserver-admission-initializer ok
[+]poststarthook/generic-apiserver-start-informers ok
[+]poststarthook/priority-and-fairness-config-consumer ok
[+]poststarthook/priority-and-fairness-filter ok
[+]poststarthook/storage-object-count-tracker-hook ok
[+]poststarthook/start-apiextensions-informers ok
[+]poststarthook/start-apiextensions-controllers ok
[+]poststarthook/crd-informer-synced ok
[+]poststarthook/start-system-namespaces-controller ok
[+]poststarthook/start-cluster-authentication-info-controller ok
[+]poststarthook/start-kube-apiserver-identity-lease-controller ok
[+]poststarthook/start-kube-apiserver-identity-lease-garbage-collector ok
[+]poststarthook/start-legacy-token-tracking-controller ok
[+]poststarthook/start-service-ip-repair-controllers ok
[+]poststarthook/rbac/bootstrap-roles ok
[+]poststarthook/scheduling/bootstrap-system-priority-classes ok
[+]poststarthook/priority-and-fairness-config-producer ok
[+]poststarthook/bootstrap-controller ok
[+]poststarthook/start-kubernetes-service-cidr-controller ok
[+]poststarthook/aggregator-reload-proxy-client-cert ok
[+]poststarthook/start-kube-aggregator-informers ok
[+]poststarthook/apiservice-status-local-available-controller ok
[+]poststarthook/apiservice-status-remote-available-controller ok
[+]poststarthook/apiservice-registration-controller ok
[+]poststarthook/apiservice-discovery-controller ok
[+]poststarthook/kube-apiserver-autoregistration ok
[+]autoregister-completion ok
[+]poststarthook/apiservice-openapi-controller ok
[+]poststarthook/apiservice-openapiv3-controller ok
[+]shutdown ok
readyz check passed
";

    #[test]
    fn the_checks_are_upstreams_in_its_order() {
        assert_eq!(
            run("/readyz", Some("verbose"), true).unwrap(),
            (200, UPSTREAM_READYZ.to_string())
        );
        // /healthz and /livez: the same but for the readyz-only checks.
        let healthz: String = UPSTREAM_READYZ
            .lines()
            .filter(|l| {
                !["etcd-readiness", "informer-sync", "shutdown"]
                    .iter()
                    .any(|c| *l == format!("[+]{c} ok"))
            })
            .map(|l| format!("{}\n", l.replace("readyz", "healthz")))
            .collect();
        assert_eq!(run("/healthz", Some("verbose"), true).unwrap().1, healthz);
        assert_eq!(
            run("/livez", Some("verbose"), true).unwrap().1,
            healthz.replace("healthz", "livez")
        );
        // Without priority and fairness, the max-in-flight filter; without the front
        // proxy's certificate, no reload of it.
        let hooks = PostStartHooks::new(HookConfig {
            priority_and_fairness: false,
            proxy_client_cert: false,
            apiserver_identity: false,
            ..all_hooks_config()
        });
        assert!(
            !hooks
                .before_autoregistration
                .iter()
                .any(|h| h.contains("identity-lease"))
        );
        assert!(
            hooks
                .before_autoregistration
                .contains(&"max-in-flight-filter")
        );
        assert!(
            !hooks
                .before_autoregistration
                .iter()
                .any(|h| h.starts_with("priority-and-fairness-config-consumer")
                    || *h == "aggregator-reload-proxy-client-cert")
        );
    }

    fn all_hooks_config() -> HookConfig {
        HookConfig {
            priority_and_fairness: true,
            proxy_client_cert: true,
            core: true,
            scheduling: true,
            flowcontrol: true,
            rbac: true,
            apiserver_identity: true,
        }
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
        let run = |path: &str| answer_with(path, None, true, &added).unwrap();
        let (code, body) = run("/readyz");
        assert_eq!(code, 500);
        assert!(
            body.starts_with(
                "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[-]kms-providers failed: reason withheld\n[+]informer-sync ok\n"
            ),
            "{body}"
        );
        assert!(
            body.ends_with("[+]shutdown ok\nreadyz check failed\n"),
            "{body}"
        );
        assert_eq!(run("/healthz").0, 500);
        assert_eq!(run("/livez").0, 200);
        assert_eq!(
            run("/healthz/kms-providers"),
            (
                500,
                "internal server error: kms-providers check failed\n".to_string()
            )
        );
        let passing: Vec<Arc<dyn HealthCheck>> = vec![Arc::new(Fixed(Ok(())))];
        let added = run_added(&passing).await;
        assert_eq!(answer_with("/readyz", None, true, &added).unwrap().0, 200);
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
        let (code, body) = run("/healthz", None, false).unwrap();
        assert_eq!(code, 500);
        assert!(
            body.starts_with("[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n"),
            "{body}"
        );
        assert!(body.ends_with("healthz check failed\n"), "{body}");
        // Excluding the failing check passes.
        let (code, body) = run("/healthz", Some("exclude=etcd&verbose"), false).unwrap();
        assert_eq!(code, 200);
        assert!(body.contains("[+]etcd excluded: ok\n"), "{body}");
        assert!(body.ends_with("healthz check passed\n"), "{body}");
        // The readiness twin fails on /readyz too.
        let (_, body) = run("/readyz", None, false).unwrap();
        assert!(
            body.contains("[-]etcd-readiness failed: reason withheld\n"),
            "{body}"
        );
    }

    #[test]
    fn an_unfinished_autoregistration_fails_readiness_and_health() {
        let hooks = all_hooks();
        let results = Results {
            storage_ok: true,
            shutting_down: false,
            autoregistered: false,
            added: &[],
            hooks: &hooks,
        };
        for endpoint in ["/readyz", "/healthz", "/livez"] {
            let (code, body) = answer(endpoint, None, |e| checks(e, &results)).unwrap();
            assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{endpoint}");
            assert!(
                body.contains("[-]autoregister-completion failed: reason withheld\n"),
                "{body}"
            );
        }
    }

    #[test]
    fn single_checks() {
        assert_eq!(run("/readyz/etcd", None, true), Some((200, "ok".into())));
        assert_eq!(
            run("/livez/etcd", None, false),
            Some((500, "internal server error: etcd check failed\n".into()))
        );
        assert_eq!(
            run("/readyz/poststarthook/rbac/bootstrap-roles", None, true),
            Some((200, "ok".into()))
        );
        assert_eq!(
            run("/readyz/informer-sync", None, true),
            Some((200, "ok".into()))
        );
        assert_eq!(run("/livez/informer-sync", None, true), None);
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
