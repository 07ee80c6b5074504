//! `--authorization-config`: the structured authorization chain (upstream
//! `AuthorizationConfiguration`, `apiserver.config.k8s.io/v1`, GA in 1.32).
//!
//! The file lists the authorizers in order: `Node`, `RBAC`, `AlwaysAllow`,
//! `AlwaysDeny` once each, and any number of `Webhook`s, each with its own
//! kubeconfig, review version, timeout, cache TTLs, `failurePolicy` (`NoOpinion` or
//! `Deny` when the call fails or a condition cannot be evaluated) and
//! `matchConditions` (CEL over the v1 SubjectAccessReview's spec, `request`; the
//! webhook is asked only when all are true). It is validated as upstream validates it,
//! every problem named by its field; it replaces `--authorization-mode` and the
//! `--authorization-webhook-*` flags.
//!
//! The file is followed while the server runs ([`crate::config_reload`]): a changed
//! file that validates, keeps the non-webhook authorizers it started with and whose
//! webhooks connect replaces the chain ([`check_reload`]).
//!
//! Left out: the `InClusterConfig` connection (upstream refuses it in kube-apiserver
//! too), and ABAC.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferrokube_auth::AuthorizationMode;
use serde::Deserialize;

use crate::authz_webhook::{
    Authorization, FailurePolicy, Link, WebhookAuthorizer, WebhookSettings,
};
use crate::config_file::FieldErrors;
use crate::security::{self, ClusterState};
use crate::webhook_client::ReviewVersion;

/// Upstream's limit on a webhook's `matchConditions`.
const MAX_MATCH_CONDITIONS: usize = 64;

/// One authorizer of the file, ready to build.
pub(crate) enum ConfiguredAuthorizer {
    Mode(AuthorizationMode),
    Webhook {
        kubeconfig: PathBuf,
        settings: WebhookSettings,
    },
}

impl ConfiguredAuthorizer {
    /// The mode it is, for the parts of the server that ask which modes are on.
    pub(crate) fn mode(&self) -> AuthorizationMode {
        match self {
            ConfiguredAuthorizer::Mode(mode) => *mode,
            ConfiguredAuthorizer::Webhook { .. } => AuthorizationMode::Webhook,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AuthorizationConfiguration {
    // Checked by `config_file::decode`; here so that strict decoding accepts them.
    #[serde(default, rename = "apiVersion")]
    _api_version: String,
    #[serde(default, rename = "kind")]
    _kind: String,
    #[serde(default)]
    authorizers: Vec<AuthorizerConfiguration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AuthorizerConfiguration {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    name: String,
    webhook: Option<WebhookConfiguration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WebhookConfiguration {
    #[serde(rename = "authorizedTTL")]
    authorized_ttl: Option<String>,
    #[serde(rename = "unauthorizedTTL")]
    unauthorized_ttl: Option<String>,
    cache_authorized_requests: Option<bool>,
    cache_unauthorized_requests: Option<bool>,
    timeout: Option<String>,
    #[serde(default)]
    subject_access_review_version: String,
    #[serde(default)]
    match_condition_subject_access_review_version: String,
    #[serde(default)]
    failure_policy: String,
    #[serde(default)]
    connection_info: ConnectionInfo,
    #[serde(default)]
    match_conditions: Vec<MatchCondition>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConnectionInfo {
    #[serde(default, rename = "type")]
    kind: String,
    kube_config_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchCondition {
    #[serde(default)]
    expression: String,
}

/// The chain of `configured` (`system:masters` first), over the cluster's state.
/// `from_file`: configured by `--authorization-config` (for the errors' wording).
pub(crate) async fn build(
    configured: Vec<ConfiguredAuthorizer>,
    state: &Arc<ClusterState>,
    from_file: bool,
) -> Result<Authorization, String> {
    let modes = configured.iter().map(ConfiguredAuthorizer::mode).collect();
    let mut links = Vec::new();
    for c in configured {
        match c {
            ConfiguredAuthorizer::Mode(mode) => {
                links.extend(security::mode_authorizer(mode, state).map(Link::Sync));
            }
            ConfiguredAuthorizer::Webhook {
                kubeconfig,
                settings,
            } => {
                let flag = if from_file {
                    format!("--authorization-config: authorizer {:?}", settings.name)
                } else {
                    "--authorization-webhook-config-file".into()
                };
                let webhook = WebhookAuthorizer::connect(&kubeconfig, settings)
                    .await
                    .map_err(|e| format!("{flag}: {e}"))?;
                links.push(Link::Webhook(Arc::new(webhook)));
            }
        }
    }
    Ok(security::authorizer_chain(links, modes, state.features))
}

/// What a changed file may not do that the first could (upstream's reload rules):
/// leave out a non-webhook authorizer it had, or bring in Node or RBAC, whose state
/// is set up at start.
pub(crate) fn check_reload(
    started_with: &[AuthorizationMode],
    configured: &[ConfiguredAuthorizer],
) -> Result<(), String> {
    let modes: Vec<AuthorizationMode> = configured.iter().map(ConfiguredAuthorizer::mode).collect();
    let missing: Vec<&str> = started_with
        .iter()
        .filter(|m| **m != AuthorizationMode::Webhook && !modes.contains(m))
        .map(|m| m.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing required types: [{}]", missing.join(" ")));
    }
    for mode in [AuthorizationMode::Node, AuthorizationMode::Rbac] {
        if modes.contains(&mode) && !started_with.contains(&mode) {
            return Err(format!(
                "authorizer type {} is not allowed if it was not enabled at initial server startup",
                mode.as_str()
            ));
        }
    }
    Ok(())
}

/// Reads and validates the file; the error names the file and every problem.
pub(crate) fn load(
    path: &Path,
) -> Result<crate::config_file::Loaded<Vec<ConfiguredAuthorizer>>, String> {
    crate::config_file::load("--authorization-config", path, parse)
}

pub(crate) fn parse(text: &str) -> Result<Vec<ConfiguredAuthorizer>, String> {
    let config: AuthorizationConfiguration =
        crate::config_file::decode(text, "AuthorizationConfiguration")?;
    let mut errors = FieldErrors::default();
    if config.authorizers.is_empty() {
        errors.required(
            "authorizers",
            "at least one authorization mode must be defined",
        );
    }
    let mut seen_types: Vec<&str> = Vec::new();
    let mut seen_names: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for (i, a) in config.authorizers.iter().enumerate() {
        let field = |f: &str| format!("authorizers[{i}].{f}");
        let kind = a.kind.as_str();
        if kind.is_empty() {
            errors.required(&field("type"), "");
            continue;
        }
        let mode = match AuthorizationMode::parse_list(kind) {
            Ok(modes) if modes.len() == 1 => modes[0],
            _ => {
                errors.unsupported(
                    &field("type"),
                    kind,
                    &["AlwaysAllow", "AlwaysDeny", "Node", "RBAC", "Webhook"],
                );
                continue;
            }
        };
        if seen_types.contains(&kind) && mode != AuthorizationMode::Webhook {
            errors.duplicate(&field("type"), kind);
            continue;
        }
        seen_types.push(kind);
        if a.name.is_empty() {
            errors.required(&field("name"), "");
        } else if seen_names.contains(&a.name.as_str()) {
            errors.duplicate(&field("name"), &a.name);
        } else {
            let problems = ferrokube_apimachinery::validation::is_dns1123_subdomain(&a.name);
            if !problems.is_empty() {
                errors.invalid(
                    &field("name"),
                    &a.name,
                    &format!("authorizer name is invalid: {}", problems.join(", ")),
                );
            }
        }
        seen_names.push(&a.name);
        match (mode, &a.webhook) {
            (AuthorizationMode::Webhook, None) => {
                errors.required(&field("webhook"), "required when type=Webhook");
            }
            (AuthorizationMode::Webhook, Some(w)) => {
                if let Some(webhook) = webhook(&a.name, w, &field("webhook"), &mut errors) {
                    out.push(webhook);
                }
            }
            (_, Some(_)) => errors.invalid(
                &field("webhook"),
                "non-null",
                "may only be specified when type=Webhook",
            ),
            (mode, None) => out.push(ConfiguredAuthorizer::Mode(mode)),
        }
    }
    errors.into_result().map(|()| out)
}

/// A duration field: `default` when absent; it must be over zero.
fn duration(
    value: Option<&str>,
    default: Option<Duration>,
    field: &str,
    errors: &mut FieldErrors,
) -> Duration {
    let Some(text) = value else {
        return default.unwrap_or_else(|| {
            errors.required(field, "");
            Duration::ZERO
        });
    };
    match ferrokube_apimachinery::duration::parse_go_duration(text) {
        Ok(d) if d.is_zero() => {
            errors.required(field, "");
            d
        }
        Ok(d) => d,
        Err(e) => {
            errors.invalid(field, text, &e);
            Duration::ZERO
        }
    }
}

/// One webhook's settings, or None after recording what is wrong with them.
fn webhook(
    name: &str,
    w: &WebhookConfiguration,
    field: &str,
    errors: &mut FieldErrors,
) -> Option<ConfiguredAuthorizer> {
    let before = errors.len();
    let f = |sub: &str| format!("{field}.{sub}");
    let timeout = duration(w.timeout.as_deref(), None, &f("timeout"), errors);
    if timeout > Duration::from_secs(30) {
        errors.invalid(
            &f("timeout"),
            w.timeout.as_deref().unwrap_or_default(),
            "must be > 0s and <= 30s",
        );
    }
    let cached = |ttl: Duration, on: Option<bool>| {
        if on == Some(false) {
            Duration::ZERO
        } else {
            ttl
        }
    };
    let authorized_ttl = cached(
        duration(
            w.authorized_ttl.as_deref(),
            Some(Duration::from_secs(300)),
            &f("authorizedTTL"),
            errors,
        ),
        w.cache_authorized_requests,
    );
    let unauthorized_ttl = cached(
        duration(
            w.unauthorized_ttl.as_deref(),
            Some(Duration::from_secs(30)),
            &f("unauthorizedTTL"),
            errors,
        ),
        w.cache_unauthorized_requests,
    );
    let version = match w.subject_access_review_version.as_str() {
        "" => {
            errors.required(&f("subjectAccessReviewVersion"), "");
            ReviewVersion::V1
        }
        "v1" => ReviewVersion::V1,
        "v1beta1" => ReviewVersion::V1beta1,
        other => {
            errors.unsupported(&f("subjectAccessReviewVersion"), other, &["v1", "v1beta1"]);
            ReviewVersion::V1
        }
    };
    match w.match_condition_subject_access_review_version.as_str() {
        "" if !w.match_conditions.is_empty() => errors.required(
            &f("matchConditionSubjectAccessReviewVersion"),
            "required if match conditions are specified",
        ),
        "" | "v1" => {}
        other => errors.unsupported(
            &f("matchConditionSubjectAccessReviewVersion"),
            other,
            &["v1"],
        ),
    }
    let failure_policy = match w.failure_policy.as_str() {
        "NoOpinion" => FailurePolicy::NoOpinion,
        "Deny" => FailurePolicy::Deny,
        "" => {
            errors.required(&f("failurePolicy"), "");
            FailurePolicy::NoOpinion
        }
        other => {
            errors.unsupported(&f("failurePolicy"), other, &["NoOpinion", "Deny"]);
            FailurePolicy::NoOpinion
        }
    };
    let kubeconfig = match (
        w.connection_info.kind.as_str(),
        &w.connection_info.kube_config_file,
    ) {
        ("", _) => {
            errors.required(&f("connectionInfo.type"), "");
            None
        }
        ("KubeConfigFile", None) => {
            errors.required(&f("connectionInfo.kubeConfigFile"), "");
            None
        }
        ("KubeConfigFile", Some(file)) if file.is_empty() => {
            errors.required(&f("connectionInfo.kubeConfigFile"), "");
            None
        }
        ("KubeConfigFile", Some(file)) if !Path::new(file).is_absolute() => {
            errors.invalid(
                &f("connectionInfo.kubeConfigFile"),
                file,
                "must be an absolute path",
            );
            None
        }
        ("KubeConfigFile", Some(file)) => match std::fs::metadata(file) {
            Ok(m) if m.is_file() => Some(PathBuf::from(file)),
            Ok(_) => {
                errors.invalid(
                    &f("connectionInfo.kubeConfigFile"),
                    file,
                    "must be a regular file",
                );
                None
            }
            Err(e) => {
                errors.invalid(
                    &f("connectionInfo.kubeConfigFile"),
                    file,
                    &format!("error loading file: {e}"),
                );
                None
            }
        },
        ("InClusterConfig", _) => {
            errors.invalid(
                &f("connectionInfo.type"),
                "InClusterConfig",
                "kube-apiserver cannot reach itself as an authorization webhook; use KubeConfigFile",
            );
            None
        }
        (other, _) => {
            errors.unsupported(
                &f("connectionInfo.type"),
                other,
                &["InClusterConfig", "KubeConfigFile"],
            );
            None
        }
    };
    let match_conditions = conditions(&w.match_conditions, &f("matchConditions"), errors);
    if errors.len() > before {
        return None;
    }
    Some(ConfiguredAuthorizer::Webhook {
        kubeconfig: kubeconfig?,
        settings: WebhookSettings {
            name: name.to_string(),
            version,
            timeout,
            authorized_ttl,
            unauthorized_ttl,
            failure_policy,
            match_conditions,
        },
    })
}

/// The compiled `matchConditions` (named by their expressions, as upstream's
/// messages name them).
fn conditions(
    conditions: &[MatchCondition],
    field: &str,
    errors: &mut FieldErrors,
) -> Vec<(String, ferrokube_cel::Program)> {
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errors.push(format!(
            "{field}: Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
            conditions.len()
        ));
        return Vec::new();
    }
    let mut out: Vec<(String, ferrokube_cel::Program)> = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let field = format!("{field}[{i}].expression");
        if c.expression.trim().is_empty() {
            errors.required(&field, "");
            continue;
        }
        if out.iter().any(|(e, _)| *e == c.expression) {
            errors.duplicate(&field, &c.expression);
            continue;
        }
        let request = ferrokube_cel::environments::ConfigVariable::AuthorizationRequest;
        let compiled = ferrokube_cel::environments::compile_config(&c.expression, request)
            .and_then(|typed| match typed.result.as_deref() {
                Some(found) if found != "bool" => Err(ferrokube_cel::CompileError(format!(
                    "must evaluate to bool but got {found}"
                ))),
                _ => Ok(typed.program),
            });
        match compiled {
            Ok(program) => out.push((c.expression.clone(), program)),
            Err(e) => errors.invalid(&field, &c.expression, &e.0),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_keeps_the_authorizers_the_server_started_with() {
        use AuthorizationMode::*;
        let modes = |m: &[AuthorizationMode]| -> Vec<ConfiguredAuthorizer> {
            m.iter().map(|m| ConfiguredAuthorizer::Mode(*m)).collect()
        };
        let started = [Node, Rbac, Webhook];
        assert_eq!(check_reload(&started, &modes(&[Node, Rbac])), Ok(()));
        assert_eq!(
            check_reload(&started, &modes(&[Rbac, AlwaysAllow])).unwrap_err(),
            "missing required types: [Node]"
        );
        assert_eq!(
            check_reload(&started, &modes(&[AlwaysDeny])).unwrap_err(),
            "missing required types: [Node RBAC]"
        );
        assert_eq!(
            check_reload(&[AlwaysAllow], &modes(&[AlwaysAllow, Rbac])).unwrap_err(),
            "authorizer type RBAC is not allowed if it was not enabled at initial server startup"
        );
        assert_eq!(
            check_reload(&[AlwaysAllow], &modes(&[AlwaysDeny, AlwaysAllow])),
            Ok(())
        );
    }

    fn kinds(authorizers: &[ConfiguredAuthorizer]) -> Vec<String> {
        authorizers
            .iter()
            .map(|a| match a {
                ConfiguredAuthorizer::Mode(m) => format!("{m:?}"),
                ConfiguredAuthorizer::Webhook { settings, .. } => {
                    format!("Webhook {}", settings.name)
                }
            })
            .collect()
    }

    #[test]
    fn a_chain_of_modes_and_webhooks_in_order() {
        let kubeconfig = tempfile::NamedTempFile::new().unwrap();
        let path = kubeconfig.path().display();
        let text = format!(
            r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
  - {{type: Node, name: node}}
  - type: Webhook
    name: first.example.com
    webhook:
      timeout: 3s
      subjectAccessReviewVersion: v1
      matchConditionSubjectAccessReviewVersion: v1
      failurePolicy: Deny
      connectionInfo: {{type: KubeConfigFile, kubeConfigFile: {path}}}
      matchConditions:
        - expression: has(request.resourceAttributes)
  - {{type: RBAC, name: rbac}}
  - type: Webhook
    name: second
    webhook:
      timeout: 30s
      authorizedTTL: 1m
      cacheUnauthorizedRequests: false
      subjectAccessReviewVersion: v1beta1
      failurePolicy: NoOpinion
      connectionInfo: {{type: KubeConfigFile, kubeConfigFile: {path}}}
"#
        );
        let authorizers = parse(&text).unwrap();
        assert_eq!(
            kinds(&authorizers),
            [
                "Node",
                "Webhook first.example.com",
                "Rbac",
                "Webhook second"
            ]
        );
        let ConfiguredAuthorizer::Webhook { settings, .. } = &authorizers[1] else {
            unreachable!()
        };
        assert_eq!(settings.timeout, Duration::from_secs(3));
        assert_eq!(settings.authorized_ttl, Duration::from_secs(300));
        assert_eq!(settings.unauthorized_ttl, Duration::from_secs(30));
        assert_eq!(settings.failure_policy, FailurePolicy::Deny);
        assert_eq!(settings.match_conditions.len(), 1);
        let ConfiguredAuthorizer::Webhook { settings, .. } = &authorizers[3] else {
            unreachable!()
        };
        assert_eq!(settings.authorized_ttl, Duration::from_secs(60));
        assert_eq!(settings.unauthorized_ttl, Duration::ZERO);
        assert_eq!(settings.version, ReviewVersion::V1beta1);
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let text = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
  - {type: RBAC, name: rbac}
  - {type: RBAC, name: rbac2}
  - {type: Node, name: Bad_Name}
  - {type: Magic, name: magic}
  - {type: AlwaysAllow, name: allow, webhook: {timeout: 1s}}
  - type: Webhook
    name: hook
    webhook:
      timeout: 31s
      subjectAccessReviewVersion: v2
      failurePolicy: Maybe
      connectionInfo: {type: KubeConfigFile, kubeConfigFile: relative/path}
      matchConditions:
        - expression: "request.user == "
        - expression: "true"
        - expression: "true"
        - expression: "request.user"
        - expression: "request.usr == 'a'"
        - expression: "has(request.resourceAttributes) && request.resourceAttributes.namespace == 'x'"
"#;
        let e = parse(text).err().unwrap();
        for want in [
            r#"authorizers[1].type: Duplicate value: "RBAC""#,
            r#"authorizers[2].name: Invalid value: "Bad_Name": authorizer name is invalid"#,
            r#"authorizers[3].type: Unsupported value: "Magic""#,
            r#"authorizers[4].webhook: Invalid value: "non-null": may only be specified when type=Webhook"#,
            r#"authorizers[5].webhook.timeout: Invalid value: "31s": must be > 0s and <= 30s"#,
            r#"authorizers[5].webhook.subjectAccessReviewVersion: Unsupported value: "v2""#,
            "authorizers[5].webhook.matchConditionSubjectAccessReviewVersion: Required value",
            r#"authorizers[5].webhook.failurePolicy: Unsupported value: "Maybe""#,
            r#"authorizers[5].webhook.connectionInfo.kubeConfigFile: Invalid value: "relative/path": must be an absolute path"#,
            r#"authorizers[5].webhook.matchConditions[0].expression: Invalid value: "request.user == ": compilation failed"#,
            r#"authorizers[5].webhook.matchConditions[2].expression: Duplicate value: "true""#,
            r#"authorizers[5].webhook.matchConditions[3].expression: Invalid value: "request.user": must evaluate to bool but got string"#,
            r#"authorizers[5].webhook.matchConditions[4].expression: Invalid value: "request.usr == 'a'": compilation failed: ERROR: <input>:1:8: undefined field 'usr'"#,
        ] {
            assert!(e.contains(want), "{want}\nnot in\n{e}");
        }
        assert!(!e.contains("matchConditions[5]"), "{e}");
        assert!(!e.contains("compilation failed: compilation failed"), "{e}");
    }

    #[test]
    fn the_file_must_be_an_authorization_configuration() {
        let e = parse("apiVersion: v1\nkind: ConfigMap\n").err().unwrap();
        assert!(e.contains("want kind AuthorizationConfiguration"), "{e}");
        let e = parse(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers: []\nextra: 1\n",
        )
        .err()
        .unwrap();
        assert!(e.contains("unknown field `extra`"), "{e}");
        let e = parse("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n")
            .err()
            .unwrap();
        assert!(
            e.contains(
                "authorizers: Required value: at least one authorization mode must be defined"
            ),
            "{e}"
        );
    }
}
