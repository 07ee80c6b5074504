//! Authentication and authorization of the kubelet API on `--port` (upstream
//! `pkg/kubelet/server/auth.go` and the auth filter of `server.go`):
//! - who: the verified client certificate's user (`authentication.x509.clientCAFile`),
//!   else the bearer token's (a TokenReview, `authentication.webhook.enabled`), else
//!   `system:anonymous` (`authentication.anonymous.enabled`), else 401 `Unauthorized`;
//! - may they: `authorization.mode` `AlwaysAllow`, or `Webhook`: a SubjectAccessReview
//!   of `nodes/<subresource>` named after this node, the subresource taken from the
//!   path ([`subresources`]); 403 `Forbidden (user=…, verb=…, resource=nodes,
//!   subresource(s)=[…])` when none is allowed, 500 when the review fails.
//!
//! The reviews and their caches are [`ferrokube_client::delegated::Gate`]'s.

use std::path::PathBuf;
use std::time::Duration;

use ferrokube_client::delegated::{Attributes, CacheTtl, Decision, Gate, ResourceRequest, User};

use crate::kubeletconfig::{ConfigFileError, KubeletConfiguration, parse_go_duration};

/// `authorization.mode` / `--authorization-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    Webhook,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            other => Err(format!("unknown authorization mode {other}")),
        }
    }
}

/// The kubelet's `authentication` and `authorization` settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthSettings {
    /// `authentication.x509.clientCAFile` / `--client-ca-file`.
    pub client_ca_file: Option<PathBuf>,
    /// `authentication.webhook.enabled` / `--authentication-token-webhook`.
    pub webhook: bool,
    /// `authentication.webhook.cacheTTL` / `--authentication-token-webhook-cache-ttl`.
    pub token_cache_ttl: Duration,
    /// `authentication.anonymous.enabled` / `--anonymous-auth`.
    pub anonymous: bool,
    /// `authorization.mode` / `--authorization-mode`.
    pub mode: AuthorizationMode,
    /// `authorization.webhook.cacheAuthorizedTTL`.
    pub authorized_ttl: Duration,
    /// `authorization.webhook.cacheUnauthorizedTTL`.
    pub unauthorized_ttl: Duration,
}

impl AuthSettings {
    /// Upstream's defaults: with a config file, v1beta1's (webhook authentication,
    /// no anonymous requests, `Webhook` authorization); without one, the flags' legacy
    /// defaults (anonymous requests, no webhook, `AlwaysAllow`). Cache TTLs 2m, 5m, 30s.
    pub fn defaults(config_file: bool) -> AuthSettings {
        AuthSettings {
            client_ca_file: None,
            webhook: config_file,
            token_cache_ttl: Duration::from_secs(120),
            anonymous: !config_file,
            mode: if config_file {
                AuthorizationMode::Webhook
            } else {
                AuthorizationMode::AlwaysAllow
            },
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
        }
    }

    /// The defaults, then what `file` (a `--config` file, when `Some`) sets.
    pub fn from_file(file: Option<&KubeletConfiguration>) -> Result<AuthSettings, ConfigFileError> {
        let mut s = AuthSettings::defaults(file.is_some());
        let Some(file) = file else {
            return Ok(s);
        };
        if let Some(a) = &file.authentication {
            if let Some(ca) = a.x509.client_ca_file.as_ref().filter(|c| !c.is_empty()) {
                s.client_ca_file = Some(ca.into());
            }
            if let Some(e) = a.webhook.enabled {
                s.webhook = e;
            }
            if let Some(d) = &a.webhook.cache_ttl {
                s.token_cache_ttl = parse_go_duration(d)?;
            }
            if let Some(e) = a.anonymous.enabled {
                s.anonymous = e;
            }
        }
        if let Some(a) = &file.authorization {
            if let Some(m) = &a.mode {
                s.mode = m.parse().map_err(ConfigFileError::Invalid)?;
            }
            if let Some(d) = &a.webhook.cache_authorized_ttl {
                s.authorized_ttl = parse_go_duration(d)?;
            }
            if let Some(d) = &a.webhook.cache_unauthorized_ttl {
                s.unauthorized_ttl = parse_go_duration(d)?;
            }
        }
        Ok(s)
    }
}

/// The API verb of an HTTP method, as upstream maps it ("" for others).
pub fn api_verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// `path` is `prefix` or below it (upstream's `isSubpath`).
fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The `nodes` subresources a request for `path` is authorized as, in order; any one
/// allowed lets it through (upstream with `KubeletFineGrainedAuthz`: `/pods`, `/healthz`,
/// `/configz` fall back to `proxy`).
pub fn subresources(path: &str) -> Vec<&'static str> {
    let mut subs = vec![];
    if is_subpath(path, "/pods") || is_subpath(path, "/runningpods/") {
        subs.push("pods");
    } else if is_subpath(path, "/healthz") {
        subs.push("healthz");
    } else if is_subpath(path, "/configz") {
        subs.push("configz");
    } else if is_subpath(path, "/statusz") {
        subs.push("statusz");
    }
    subs.push(if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else if is_subpath(path, "/spec/") {
        "spec"
    } else if is_subpath(path, "/checkpoint") {
        "checkpoint"
    } else {
        "proxy"
    });
    subs
}

/// The authorizer attributes of a `method` request for `path` on node `node_name`.
pub fn request_attributes(node_name: &str, method: &str, path: &str) -> Vec<Attributes> {
    subresources(path)
        .into_iter()
        .map(|sub| {
            Attributes::Resource(ResourceRequest {
                verb: api_verb(method).into(),
                group: String::new(),
                version: "v1".into(),
                resource: "nodes".into(),
                subresource: sub.into(),
                namespace: String::new(),
                name: node_name.into(),
            })
        })
        .collect()
}

/// Why a request is refused: the status code and upstream's plain-text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

/// The kubelet API's gate.
#[derive(Debug)]
pub struct KubeletAuth {
    node_name: String,
    mode: AuthorizationMode,
    gate: Gate,
}

impl KubeletAuth {
    /// `client` (the kubelet's own) makes the TokenReviews and SubjectAccessReviews.
    pub fn new(node_name: &str, settings: &AuthSettings, client: kube::Client) -> KubeletAuth {
        let ttl = CacheTtl {
            token: settings.token_cache_ttl,
            allowed: settings.authorized_ttl,
            denied: settings.unauthorized_ttl,
        };
        let authz = (settings.mode == AuthorizationMode::Webhook).then(|| client.clone());
        let authn = settings.webhook.then_some(client);
        KubeletAuth {
            node_name: node_name.to_owned(),
            mode: settings.mode,
            gate: Gate::new(vec![], authn, authz, ttl).with_anonymous(settings.anonymous),
        }
    }

    /// Authenticates and authorizes one request; the user when it may proceed.
    pub async fn check(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        certificate_user: Option<User>,
    ) -> Result<User, Refusal> {
        let user = self
            .gate
            .authenticate(bearer, certificate_user)
            .await
            .map_err(|_| Refusal {
                code: 401,
                message: "Unauthorized".into(),
            })?;
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Ok(user);
        }
        let attrs = request_attributes(&self.node_name, method, path);
        let describe = |what: &str| {
            format!(
                "{what} (user={}, verb={}, resource=nodes, subresource(s)=[{}])",
                user.name,
                api_verb(method),
                subresources(path).join(" ")
            )
        };
        match self.gate.authorize_any(&user, &attrs).await {
            Ok(Decision::Allow) => Ok(user),
            Ok(Decision::Deny(reason)) => {
                tracing::debug!(user = %user.name, path, reason, "kubelet API request forbidden");
                Err(Refusal {
                    code: 403,
                    message: describe("Forbidden"),
                })
            }
            Err(e) => {
                tracing::error!(user = %user.name, path, error = %e, "authorization error");
                Err(Refusal {
                    code: 500,
                    message: describe("Authorization error"),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_subresources() {
        for (path, want) in [
            ("/stats/summary", &["stats"][..]),
            ("/stats", &["stats"]),
            ("/metrics", &["metrics"]),
            ("/metrics/cadvisor", &["metrics"]),
            ("/metrics/resource", &["metrics"]),
            ("/metrics/probes", &["metrics"]),
            ("/logs/", &["log"]),
            ("/logs/syslog", &["log"]),
            ("/spec/", &["spec"]),
            ("/checkpoint/ns/pod/c", &["checkpoint"]),
            ("/pods", &["pods", "proxy"]),
            ("/pods/", &["pods", "proxy"]),
            ("/runningpods/", &["pods", "proxy"]),
            ("/healthz", &["healthz", "proxy"]),
            ("/healthz/syncloop", &["healthz", "proxy"]),
            ("/configz", &["configz", "proxy"]),
            ("/exec/default/nginx/nginx", &["proxy"]),
            ("/attach/default/nginx/nginx", &["proxy"]),
            ("/portForward/default/nginx", &["proxy"]),
            ("/containerLogs/default/nginx/nginx", &["proxy"]),
            ("/run/default/nginx/nginx", &["proxy"]),
            ("/podsx", &["proxy"]),
            ("/metricsx", &["proxy"]),
            ("/statsx", &["proxy"]),
            ("/", &["proxy"]),
        ] {
            assert_eq!(subresources(path), want, "{path}");
        }
    }

    #[test]
    fn methods_map_to_verbs() {
        for (method, verb) in [
            ("GET", "get"),
            ("POST", "create"),
            ("PUT", "update"),
            ("PATCH", "patch"),
            ("DELETE", "delete"),
            ("HEAD", ""),
        ] {
            assert_eq!(api_verb(method), verb);
        }
    }

    #[test]
    fn request_attributes_name_the_node() {
        let attrs = request_attributes("node-a", "POST", "/exec/ns/pod/c");
        assert_eq!(
            attrs,
            [Attributes::Resource(ResourceRequest {
                verb: "create".into(),
                group: String::new(),
                version: "v1".into(),
                resource: "nodes".into(),
                subresource: "proxy".into(),
                namespace: String::new(),
                name: "node-a".into(),
            })]
        );
        let attrs = request_attributes("node-a", "GET", "/pods");
        let subs: Vec<_> = attrs
            .iter()
            .map(|a| match a {
                Attributes::Resource(r) => (r.verb.as_str(), r.subresource.as_str()),
                Attributes::NonResource { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(subs, [("get", "pods"), ("get", "proxy")]);
    }

    #[test]
    fn settings_defaults_follow_upstream() {
        let flags_only = AuthSettings::from_file(None).unwrap();
        assert!(flags_only.anonymous && !flags_only.webhook);
        assert_eq!(flags_only.mode, AuthorizationMode::AlwaysAllow);
        let empty = KubeletConfiguration::from_yaml(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
        )
        .unwrap();
        let file = AuthSettings::from_file(Some(&empty)).unwrap();
        assert!(!file.anonymous && file.webhook);
        assert_eq!(file.mode, AuthorizationMode::Webhook);
        assert_eq!(
            (
                file.token_cache_ttl,
                file.authorized_ttl,
                file.unauthorized_ttl
            ),
            (
                Duration::from_secs(120),
                Duration::from_secs(300),
                Duration::from_secs(30)
            )
        );
        let set = KubeletConfiguration::from_yaml(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             authentication:\n  x509: {clientCAFile: /pki/ca.crt}\n\
             \x20 webhook: {enabled: false, cacheTTL: 10s}\n  anonymous: {enabled: true}\n\
             authorization:\n  mode: AlwaysAllow\n\
             \x20 webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 0s}\n",
        )
        .unwrap();
        let s = AuthSettings::from_file(Some(&set)).unwrap();
        assert_eq!(
            s,
            AuthSettings {
                client_ca_file: Some("/pki/ca.crt".into()),
                webhook: false,
                token_cache_ttl: Duration::from_secs(10),
                anonymous: true,
                mode: AuthorizationMode::AlwaysAllow,
                authorized_ttl: Duration::from_secs(60),
                unauthorized_ttl: Duration::ZERO,
            }
        );
        let bad = KubeletConfiguration::from_yaml(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             authorization: {mode: RBAC}\n",
        )
        .unwrap();
        assert_eq!(
            AuthSettings::from_file(Some(&bad)).unwrap_err().to_string(),
            "unknown authorization mode RBAC"
        );
    }

    fn offline_client() -> kube::Client {
        // Nothing listens on port 1: every review fails.
        let cfg = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(cfg).unwrap()
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Default::default(),
        }
    }

    #[tokio::test]
    async fn refusals_as_upstream_words_them() {
        let mut settings = AuthSettings::defaults(true);
        let auth = KubeletAuth::new("node-a", &settings, offline_client());
        // Anonymous requests are off: no credentials is a 401.
        let r = auth.check("GET", "/pods", None, None).await.unwrap_err();
        assert_eq!((r.code, r.message.as_str()), (401, "Unauthorized"));
        // An unknown token cannot be reviewed: 401.
        let r = auth
            .check("GET", "/pods", Some("token"), None)
            .await
            .unwrap_err();
        assert_eq!(r.code, 401);
        // system:masters needs no review.
        let admin = user("kubernetes-admin", &["system:masters"]);
        assert_eq!(
            auth.check("POST", "/exec/a/b/c", None, Some(admin.clone()))
                .await,
            Ok(admin)
        );
        // Others are reviewed; the review fails: 500.
        let r = auth
            .check("GET", "/pods", None, Some(user("alice", &[])))
            .await
            .unwrap_err();
        assert_eq!(
            (r.code, r.message.as_str()),
            (
                500,
                "Authorization error (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])"
            )
        );
        // AlwaysAllow with anonymous requests: anyone.
        settings.mode = AuthorizationMode::AlwaysAllow;
        settings.anonymous = true;
        let auth = KubeletAuth::new("node-a", &settings, offline_client());
        let anon = auth.check("GET", "/pods", None, None).await.unwrap();
        assert_eq!(anon.name, "system:anonymous");
        assert_eq!(anon.groups, ["system:unauthenticated"]);
        // Without webhook authentication a token is ignored (anonymous here).
        settings.webhook = false;
        let auth = KubeletAuth::new("node-a", &settings, offline_client());
        let anon = auth.check("GET", "/pods", Some("t"), None).await.unwrap();
        assert_eq!(anon.name, "system:anonymous");
    }
}
