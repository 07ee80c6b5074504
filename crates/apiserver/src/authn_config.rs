//! `--authentication-config`: structured authentication (upstream
//! `AuthenticationConfiguration`, `apiserver.config.k8s.io/v1beta1`, beta in 1.30).
//!
//! Each `jwt` entry is a JWT authenticator of its own issuer, verified as the
//! `--oidc-*` flags' is ([`ferrokube_auth::OidcAuthenticator`], keys fetched by
//! [`crate::oidc`]), with:
//! - `issuer`: `url`, `discoveryURL` (where the discovery document is read instead of
//!   `<url>/.well-known/openid-configuration`), `certificateAuthority` (PEM; the
//!   host's roots without it), `audiences` (any of them, `audienceMatchPolicy:
//!   MatchAny`);
//! - `claimValidationRules`: a `claim` with its `requiredValue`, or a CEL
//!   `expression` over `claims` that must be true (`message` says why not);
//! - `claimMappings`: `username` and `groups` from a `claim` with a `prefix` or from
//!   an `expression`, `uid` from a `claim` or an `expression`, `extra` keys from
//!   `valueExpression`s;
//! - `userValidationRules`: CEL over the mapped `user` that must be true.
//!
//! `anonymous.enabled` turns anonymous requests on or off (it replaces
//! `--anonymous-auth`, which may then not be given), and `anonymous.conditions`
//! limits them to the listed paths (e.g. `/livez` and `/readyz` only). The file is
//! validated as upstream validates it, every problem named by its field; it cannot
//! be combined with the `--oidc-*` flags.
//!
//! The file is followed while the server runs ([`crate::config_reload`]): a changed
//! file's JWT authenticators replace the ones in use; `anonymous` is set at start.
//!
//! Left out: distributed claims and the egress selector.

use std::collections::BTreeMap;
use std::path::Path;

use ConfigVariable::{Claims, User};
use ferrokube_auth::UserInfo;
use ferrokube_auth::authn::oidc::{ClaimMapper, check_email_verified, issuer_url_errors};
use ferrokube_cel::Program;
use ferrokube_cel::environments::{ConfigVariable, compile_config};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::config_file::FieldErrors;

/// The file, validated.
pub(crate) struct AuthenticationConfig {
    pub jwt: Vec<JwtAuthenticator>,
    /// `anonymous`, when the file says.
    pub anonymous: Option<Anonymous>,
}

/// The file's `anonymous`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Anonymous {
    pub enabled: bool,
    /// `conditions`' paths: anonymous requests on these paths only (empty: any path).
    pub paths: Vec<String>,
}

/// One `jwt` entry, ready to build.
pub(crate) struct JwtAuthenticator {
    pub issuer: String,
    pub discovery_url: Option<String>,
    /// `certificateAuthority`'s certificates: the roots the issuer's certificate must
    /// chain to (None: the host's).
    pub certificate_authority: Option<rustls::RootCertStore>,
    pub audiences: Vec<String>,
    pub mapper: JwtClaims,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    // Checked by `config_file::decode`; here so that strict decoding accepts them.
    #[serde(default, rename = "apiVersion")]
    _api_version: String,
    #[serde(default, rename = "kind")]
    _kind: String,
    #[serde(default)]
    jwt: Vec<FileJwt>,
    anonymous: Option<FileAnonymous>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileAnonymous {
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    conditions: Vec<FileAnonymousCondition>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileAnonymousCondition {
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileJwt {
    #[serde(default)]
    issuer: FileIssuer,
    #[serde(default)]
    claim_validation_rules: Vec<FileClaimRule>,
    #[serde(default)]
    claim_mappings: FileClaimMappings,
    #[serde(default)]
    user_validation_rules: Vec<FileUserRule>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileIssuer {
    #[serde(default)]
    url: String,
    #[serde(rename = "discoveryURL")]
    discovery_url: Option<String>,
    certificate_authority: Option<String>,
    #[serde(default)]
    audiences: Vec<String>,
    #[serde(default)]
    audience_match_policy: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileClaimRule {
    #[serde(default)]
    claim: String,
    #[serde(default)]
    required_value: String,
    #[serde(default)]
    expression: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileClaimMappings {
    #[serde(default)]
    username: FileClaimOrExpression,
    #[serde(default)]
    groups: FileClaimOrExpression,
    #[serde(default)]
    uid: FileClaimOrExpression,
    #[serde(default)]
    extra: Vec<FileExtra>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileClaimOrExpression {
    #[serde(default)]
    claim: String,
    prefix: Option<String>,
    #[serde(default)]
    expression: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileExtra {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value_expression: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileUserRule {
    #[serde(default)]
    expression: String,
    #[serde(default)]
    message: String,
}

/// Where a user attribute comes from.
enum Source {
    /// A claim, with a prefix before its value(s).
    Claim {
        claim: String,
        prefix: String,
    },
    Expression(Program),
}

/// A claim validation rule.
enum ClaimRule {
    /// The claim must be this string.
    Required { claim: String, value: String },
    /// The expression must be true; `message` (or the expression) says why not.
    Expression { program: Program, message: String },
}

/// A structured JWT authenticator's rules from verified claims to the user.
pub(crate) struct JwtClaims {
    claim_rules: Vec<ClaimRule>,
    username: Source,
    groups: Option<Source>,
    uid: Option<Source>,
    extra: Vec<(String, Program)>,
    user_rules: Vec<(Program, String)>,
}

/// Reads and validates the file. `service_account_issuers` may not be JWT issuers
/// (the service account authenticator owns their tokens).
pub(crate) fn load(
    path: &Path,
    service_account_issuers: &[String],
) -> Result<crate::config_file::Loaded<AuthenticationConfig>, String> {
    crate::config_file::load("--authentication-config", path, |text| {
        parse(text, service_account_issuers)
    })
}

pub(crate) fn parse(
    text: &str,
    service_account_issuers: &[String],
) -> Result<AuthenticationConfig, String> {
    let config: FileConfig = crate::config_file::decode(text, "AuthenticationConfiguration")?;
    let mut errors = FieldErrors::default();
    let mut jwt = Vec::new();
    let mut seen_issuers: Vec<&str> = Vec::new();
    for (i, j) in config.jwt.iter().enumerate() {
        let field = format!("jwt[{i}]");
        let url = j.issuer.url.as_str();
        if seen_issuers.contains(&url) && !url.is_empty() {
            errors.duplicate(&format!("{field}.issuer.url"), url);
        }
        seen_issuers.push(url);
        if let Some(authenticator) =
            jwt_authenticator(j, &field, service_account_issuers, &mut errors)
        {
            jwt.push(authenticator);
        }
    }
    let anonymous = config.anonymous.as_ref().map(|a| {
        if !a.enabled && !a.conditions.is_empty() {
            let paths: Vec<&str> = a.conditions.iter().map(|c| c.path.as_str()).collect();
            errors.invalid(
                "anonymous.conditions",
                &format!("{paths:?}"),
                "enabled should be set to true when conditions are defined",
            );
        }
        let mut paths: Vec<String> = Vec::new();
        for (i, condition) in a.conditions.iter().enumerate() {
            let field = format!("anonymous.conditions[{i}].path");
            if condition.path.is_empty() {
                errors.required(&field, "path is required");
            } else if paths.contains(&condition.path) {
                errors.duplicate(&field, &condition.path);
            } else {
                paths.push(condition.path.clone());
            }
        }
        Anonymous {
            enabled: a.enabled,
            paths,
        }
    });
    errors.into_result()?;
    Ok(AuthenticationConfig { jwt, anonymous })
}

fn jwt_authenticator(
    j: &FileJwt,
    field: &str,
    service_account_issuers: &[String],
    errors: &mut FieldErrors,
) -> Option<JwtAuthenticator> {
    let before = errors.len();
    let issuer = &j.issuer;
    for e in issuer_url_errors(
        &format!("{field}.issuer.url"),
        &issuer.url,
        service_account_issuers,
    ) {
        errors.push(e);
    }
    if let Some(discovery) = &issuer.discovery_url {
        let f = format!("{field}.issuer.discoveryURL");
        for e in issuer_url_errors(&f, discovery, &[]) {
            errors.push(e);
        }
        if discovery.trim_end_matches('/') == issuer.url.trim_end_matches('/') {
            errors.invalid(&f, discovery, "discoveryURL must be different from URL");
        }
    }
    let certificate_authority = match &issuer.certificate_authority {
        Some(pem) => match crate::oidc::ca_file_roots(pem.as_bytes()) {
            Ok(roots) => Some(roots),
            Err(e) => {
                errors.invalid(
                    &format!("{field}.issuer.certificateAuthority"),
                    "<omitted>",
                    &e,
                );
                None
            }
        },
        None => None,
    };
    let audiences_field = format!("{field}.issuer.audiences");
    if issuer.audiences.is_empty() {
        errors.required(
            &audiences_field,
            "at least one issuer.audiences is required",
        );
    }
    for (k, a) in issuer.audiences.iter().enumerate() {
        if a.is_empty() {
            errors.required(
                &format!("{audiences_field}[{k}]"),
                "audience can't be empty",
            );
        } else if issuer.audiences[..k].contains(a) {
            errors.duplicate(&format!("{audiences_field}[{k}]"), a);
        }
    }
    let policy_field = format!("{field}.issuer.audienceMatchPolicy");
    match issuer.audience_match_policy.as_str() {
        "MatchAny" => {}
        "" if issuer.audiences.len() <= 1 => {}
        "" => errors.invalid(
            &policy_field,
            "",
            "audienceMatchPolicy must be MatchAny for multiple audiences",
        ),
        other => errors.unsupported(&policy_field, other, &["MatchAny"]),
    }

    let mut claim_rules = Vec::new();
    let mut seen_claims: Vec<&str> = Vec::new();
    for (k, r) in j.claim_validation_rules.iter().enumerate() {
        let f = format!("{field}.claimValidationRules[{k}]");
        match (r.claim.is_empty(), r.expression.is_empty()) {
            (true, true) => errors.required(&f, "claim or expression is required"),
            (false, false) => {
                errors.invalid(&f, &r.claim, "claim and expression can't both be set")
            }
            (false, true) => {
                if !r.message.is_empty() {
                    errors.invalid(
                        &format!("{f}.message"),
                        &r.message,
                        "message can't be set when claim is set",
                    );
                }
                if seen_claims.contains(&r.claim.as_str()) {
                    errors.duplicate(&format!("{f}.claim"), &r.claim);
                }
                seen_claims.push(&r.claim);
                claim_rules.push(ClaimRule::Required {
                    claim: r.claim.clone(),
                    value: r.required_value.clone(),
                });
            }
            (true, false) => {
                if !r.required_value.is_empty() {
                    errors.invalid(
                        &format!("{f}.requiredValue"),
                        &r.required_value,
                        "requiredValue can't be set when expression is set",
                    );
                }
                if let Some(program) = compile(
                    &r.expression,
                    Claims,
                    true,
                    &format!("{f}.expression"),
                    errors,
                ) {
                    claim_rules.push(ClaimRule::Expression {
                        program,
                        message: r.message.clone(),
                    });
                }
            }
        }
    }

    let mappings = &j.claim_mappings;
    let f = format!("{field}.claimMappings");
    let username = source(&mappings.username, true, &format!("{f}.username"), errors);
    if username.is_none()
        && mappings.username.claim.is_empty()
        && mappings.username.expression.is_empty()
    {
        errors.required(&format!("{f}.username"), "claim or expression is required");
    }
    let groups = source(&mappings.groups, true, &format!("{f}.groups"), errors);
    let uid = source(&mappings.uid, false, &format!("{f}.uid"), errors);
    let mut extra = Vec::new();
    for (k, e) in mappings.extra.iter().enumerate() {
        let ef = format!("{f}.extra[{k}]");
        if e.key.is_empty() {
            errors.required(&format!("{ef}.key"), "");
        } else if let Some(why) = extra_key_problem(&e.key) {
            errors.invalid(&format!("{ef}.key"), &e.key, why);
        } else if mappings.extra[..k].iter().any(|o| o.key == e.key) {
            errors.duplicate(&format!("{ef}.key"), &e.key);
        }
        if e.value_expression.is_empty() {
            errors.required(
                &format!("{ef}.valueExpression"),
                "valueExpression is required",
            );
        } else if let Some(program) = compile(
            &e.value_expression,
            Claims,
            false,
            &format!("{ef}.valueExpression"),
            errors,
        ) {
            extra.push((e.key.clone(), program));
        }
    }
    let mut user_rules = Vec::new();
    for (k, r) in j.user_validation_rules.iter().enumerate() {
        let rf = format!("{field}.userValidationRules[{k}].expression");
        if r.expression.is_empty() {
            errors.required(&rf, "expression is required");
        } else if let Some(program) = compile(&r.expression, User, true, &rf, errors) {
            user_rules.push((program, r.message.clone()));
        }
    }
    if errors.len() > before {
        return None;
    }
    Some(JwtAuthenticator {
        issuer: issuer.url.clone(),
        discovery_url: issuer.discovery_url.clone(),
        certificate_authority,
        audiences: issuer.audiences.clone(),
        mapper: JwtClaims {
            claim_rules,
            username: username?,
            groups,
            uid,
            extra,
            user_rules,
        },
    })
}

/// A `claim` (with its `prefix` where `prefixed`) or an `expression`; None when
/// neither is set, or after recording what is wrong.
fn source(
    c: &FileClaimOrExpression,
    prefixed: bool,
    field: &str,
    errors: &mut FieldErrors,
) -> Option<Source> {
    match (c.claim.is_empty(), c.expression.is_empty()) {
        (true, true) => {
            if c.prefix.is_some() {
                errors.invalid(
                    &format!("{field}.prefix"),
                    c.prefix.as_deref().unwrap_or(""),
                    "prefix can't be set when claim is not set",
                );
            }
            None
        }
        (false, false) => {
            errors.invalid(field, &c.claim, "claim and expression can't both be set");
            None
        }
        (false, true) => match (&c.prefix, prefixed) {
            (None, true) => {
                errors.required(&format!("{field}.prefix"), "prefix is required when claim is set. It can be set to an empty string to disable prefixing");
                None
            }
            (Some(p), false) => {
                errors.invalid(
                    &format!("{field}.prefix"),
                    p,
                    "prefix can't be set for this claim mapping",
                );
                None
            }
            (prefix, _) => Some(Source::Claim {
                claim: c.claim.clone(),
                prefix: prefix.clone().unwrap_or_default(),
            }),
        },
        (true, false) => {
            if let Some(p) = &c.prefix {
                errors.invalid(
                    &format!("{field}.prefix"),
                    p,
                    "prefix can't be set when expression is set",
                );
                return None;
            }
            compile(
                &c.expression,
                Claims,
                false,
                &format!("{field}.expression"),
                errors,
            )
            .map(Source::Expression)
        }
    }
}

/// Why an extra key is refused (upstream: a lowercase, domain-prefixed path outside
/// the Kubernetes domains), if it is.
fn extra_key_problem(key: &str) -> Option<&'static str> {
    let Some((domain, name)) = key.split_once('/') else {
        return Some("must be a domain-prefix path (such as \"acme.io/foo\")");
    };
    if domain.is_empty() || name.is_empty() || !domain.contains('.') {
        return Some("must be a domain-prefix path (such as \"acme.io/foo\")");
    }
    if key != key.to_lowercase() {
        return Some("key must be lowercase");
    }
    let reserved = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    if reserved("kubernetes.io") || reserved("k8s.io") {
        return Some("k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use");
    }
    None
}

/// Compiles `expression` with `variable` declared as upstream declares it; a rule
/// (`is_rule`) must evaluate to a bool (upstream's `must evaluate to bool`, which
/// names no found type), a mapping to anything.
fn compile(
    expression: &str,
    variable: ConfigVariable,
    is_rule: bool,
    field: &str,
    errors: &mut FieldErrors,
) -> Option<Program> {
    let compiled =
        compile_config(expression, variable).and_then(|typed| match typed.result.as_deref() {
            Some(found) if is_rule && found != "bool" => {
                Err(ferrokube_cel::CompileError("must evaluate to bool".into()))
            }
            _ => Ok(typed.program),
        });
    match compiled {
        Ok(program) => Some(program),
        Err(e) => {
            errors.invalid(field, expression, &e.0);
            None
        }
    }
}

/// A CEL result as strings: a string, or a list of strings (`what` names it in the
/// error).
fn strings(value: &Value, what: &str) -> Result<Vec<String>, String> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    format!("oidc: error evaluating {what}: a list item is not a string")
                })
            })
            .collect(),
        Value::Null => Ok(Vec::new()),
        _ => Err(format!(
            "oidc: error evaluating {what}: got {value}, wanted a string or a list of strings"
        )),
    }
}

impl JwtClaims {
    fn eval(
        &self,
        program: &Program,
        activation: &ferrokube_cel::Activation,
        what: &str,
    ) -> Result<Value, String> {
        activation
            .eval(program)
            .map(|v| ferrokube_cel::value_to_json(&v))
            .map_err(|e| format!("oidc: error evaluating {what} expression: {e}"))
    }

    /// A claim's value(s): a string, or for groups a list of strings too.
    fn claim_values(
        claims: &Map<String, Value>,
        claim: &str,
        list: bool,
    ) -> Result<Option<Vec<String>>, String> {
        match claims.get(claim) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
            Some(Value::Array(items)) if list => items
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        format!("oidc: parse claim {claim}: a list item is not a string")
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!(
                "oidc: parse claim {claim}: json: cannot unmarshal {} into Go value of type string",
                match other {
                    Value::Bool(_) => "bool",
                    Value::Number(_) => "number",
                    Value::Array(_) => "array",
                    _ => "object",
                }
            )),
        }
    }

    /// The values a [`Source`] gives.
    fn values(
        &self,
        source: &Source,
        claims: &Map<String, Value>,
        activation: &ferrokube_cel::Activation,
        what: &str,
        list: bool,
    ) -> Result<Vec<String>, String> {
        match source {
            Source::Claim { claim, prefix } => Ok(Self::claim_values(claims, claim, list)?
                .unwrap_or_default()
                .into_iter()
                .map(|v| format!("{prefix}{v}"))
                .collect()),
            Source::Expression(program) => {
                let value = self.eval(program, activation, what)?;
                if !list && !value.is_string() {
                    return Err(format!(
                        "oidc: error evaluating {what} expression: got {value}, wanted a string"
                    ));
                }
                strings(&value, what)
            }
        }
    }
}

impl ClaimMapper for JwtClaims {
    fn user(&self, claims: &Map<String, Value>) -> Result<UserInfo, String> {
        let mut activation = ferrokube_cel::Activation::new();
        activation.bind_json("claims", &Value::Object(claims.clone()));
        for rule in &self.claim_rules {
            match rule {
                ClaimRule::Required { claim, value } => {
                    let got = Self::claim_values(claims, claim, false)?.ok_or_else(|| {
                        format!("oidc: required claim {claim} not present in ID token")
                    })?;
                    if got.first() != Some(value) {
                        return Err(format!(
                            "oidc: required claim {claim} value does not match. Got = {}, want = {value}",
                            got.first().map(String::as_str).unwrap_or_default()
                        ));
                    }
                }
                ClaimRule::Expression { program, message } => {
                    if self.eval(program, &activation, "claim validation")? != Value::Bool(true) {
                        return Err(format!(
                            "oidc: error evaluating claim validation expression: {}",
                            if message.is_empty() {
                                program.source()
                            } else {
                                message
                            }
                        ));
                    }
                }
            }
        }
        if let Source::Claim { claim, .. } = &self.username
            && claim == "email"
        {
            check_email_verified(claims)?;
        }
        let username = match &self.username {
            Source::Claim { claim, .. } if Self::claim_values(claims, claim, false)?.is_none() => {
                return Err(format!(
                    "oidc: parse username claims {claim:?}: claim not present"
                ));
            }
            source => self
                .values(source, claims, &activation, "username", false)?
                .pop()
                .unwrap_or_default(),
        };
        if username.is_empty() {
            return Err("oidc: empty username is not allowed".into());
        }
        let mut user = UserInfo {
            name: username,
            ..UserInfo::default()
        };
        if let Some(groups) = &self.groups {
            user.groups = self.values(groups, claims, &activation, "groups", true)?;
        }
        if let Some(uid) = &self.uid {
            user.uid = self
                .values(uid, claims, &activation, "uid", false)?
                .pop()
                .unwrap_or_default();
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, program) in &self.extra {
            let value = self.eval(program, &activation, "extra")?;
            let values: Vec<String> = strings(&value, "extra")?
                .into_iter()
                .filter(|v| !v.is_empty())
                .collect();
            if !values.is_empty() {
                extra.insert(key.clone(), values);
            }
        }
        user.extra.extend(extra);
        if !self.user_rules.is_empty() {
            let mut activation = ferrokube_cel::Activation::new();
            activation.bind_json(
                "user",
                &json!({"username": user.name, "uid": user.uid, "groups": user.groups,
                    "extra": user.extra}),
            );
            for (program, message) in &self.user_rules {
                if self.eval(program, &activation, "user validation")? != Value::Bool(true) {
                    return Err(format!(
                        "oidc: error evaluating user info validation rule: {}",
                        if message.is_empty() {
                            program.source()
                        } else {
                            message
                        }
                    ));
                }
            }
        }
        Ok(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
  - issuer:
      url: https://issuer.example
      audiences: [kubernetes, other]
      audienceMatchPolicy: MatchAny
    claimValidationRules:
      - {claim: hd, requiredValue: example.com}
      - {expression: "claims.sub != 'mallory'", message: mallory is banned}
    claimMappings:
      username: {expression: "'jwt:' + claims.sub"}
      groups: {claim: groups, prefix: "oidc:"}
      uid: {claim: sub}
      extra:
        - {key: example.com/tenant, valueExpression: claims.tenant}
    userValidationRules:
      - {expression: "!user.username.startsWith('jwt:system:')", message: no system users}
anonymous: {enabled: false}
"#;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn claims_become_the_user_through_rules_and_mappings() {
        let config = parse(GOOD, &[]).unwrap();
        assert_eq!(
            config.anonymous,
            Some(Anonymous {
                enabled: false,
                paths: vec![]
            })
        );
        let jwt = &config.jwt[0];
        assert_eq!(jwt.audiences, ["kubernetes", "other"]);
        let user = jwt
            .mapper
            .user(&claims(json!({"sub": "alice", "hd": "example.com",
                "groups": ["dev", "ops"], "tenant": "acme"})))
            .unwrap();
        assert_eq!(user.name, "jwt:alice");
        assert_eq!(user.groups, ["oidc:dev", "oidc:ops"]);
        assert_eq!(user.uid, "alice");
        assert_eq!(user.extra["example.com/tenant"], ["acme"]);

        let refused = |c: Value| jwt.mapper.user(&claims(c)).unwrap_err();
        assert!(
            refused(json!({"sub": "mallory", "hd": "example.com"})).contains("mallory is banned")
        );
        assert!(
            refused(json!({"sub": "alice", "hd": "evil.com"}))
                .contains("required claim hd value does not match")
        );
        assert!(refused(json!({"sub": "alice"})).contains("required claim hd not present"));
        assert!(
            refused(json!({"sub": "system:x", "hd": "example.com", "tenant": "acme"}))
                .contains("no system users")
        );
    }

    #[test]
    fn anonymous_conditions_are_its_paths() {
        let text = r#"
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
anonymous:
  enabled: true
  conditions: [{path: /livez}, {path: /readyz}]
"#;
        let config = parse(text, &[]).unwrap();
        assert!(config.jwt.is_empty());
        assert_eq!(
            config.anonymous,
            Some(Anonymous {
                enabled: true,
                paths: vec!["/livez".into(), "/readyz".into()]
            })
        );
    }

    #[test]
    fn an_email_username_must_be_verified() {
        let text = r#"
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
  - issuer: {url: "https://issuer.example", audiences: [k]}
    claimMappings:
      username: {claim: email, prefix: ""}
"#;
        let config = parse(text, &[]).unwrap();
        let mapper = &config.jwt[0].mapper;
        let user = mapper
            .user(&claims(
                json!({"email": "a@example.com", "email_verified": true}),
            ))
            .unwrap();
        assert_eq!(user.name, "a@example.com");
        assert!(user.groups.is_empty());
        assert!(
            mapper
                .user(&claims(
                    json!({"email": "a@example.com", "email_verified": false})
                ))
                .unwrap_err()
                .contains("email not verified")
        );
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let text = r#"
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
  - issuer: {url: "http://issuer.example", audiences: [a, b]}
    claimValidationRules:
      - {claim: x, expression: "true"}
    claimMappings:
      username: {claim: sub}
      extra:
        - {key: kubernetes.io/x, valueExpression: "claims.x"}
  - issuer: {url: "https://kubernetes.default.svc", audiences: [""]}
    claimMappings:
      username: {expression: "claims.sub +"}
  - issuer: {url: "https://kubernetes.default.svc", audiences: [k]}
    claimMappings: {}
  - issuer: {url: "https://three.example", audiences: [k]}
    claimValidationRules:
      - {expression: "claims.foo"}
      - {expression: "claims.?email_verified.orValue(true)"}
      - {expression: "claims.exp > 0 && claims.iss.startsWith('https://')"}
    claimMappings:
      username: {expression: "user.username"}
      groups: {expression: "claims.groups"}
    userValidationRules:
      - {expression: "user.username"}
      - {expression: "user.nmae == 'x'"}
      - {expression: "!user.groups.exists(g, g == 'system:masters')"}
anonymous: {enabled: false, conditions: [{path: /livez}, {path: ""}, {path: /livez}]}
"#;
        let e = parse(text, &["https://kubernetes.default.svc".into()])
            .err()
            .unwrap();
        for want in [
            r#"jwt[0].issuer.url: Invalid value: "http://issuer.example": URL scheme must be https"#,
            "jwt[0].issuer.audienceMatchPolicy: Invalid value: \"\": audienceMatchPolicy must be MatchAny for multiple audiences",
            r#"jwt[0].claimValidationRules[0]: Invalid value: "x": claim and expression can't both be set"#,
            "jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set",
            r#"jwt[0].claimMappings.extra[0].key: Invalid value: "kubernetes.io/x": k8s.io, kubernetes.io and their subdomains are reserved"#,
            "jwt[1].issuer.url: Invalid value: \"https://kubernetes.default.svc\": URL must not overlap with disallowed issuers",
            "jwt[1].issuer.audiences[0]: Required value: audience can't be empty",
            r#"jwt[1].claimMappings.username.expression: Invalid value: "claims.sub +": compilation failed"#,
            r#"jwt[2].issuer.url: Duplicate value: "https://kubernetes.default.svc""#,
            "jwt[2].claimMappings.username: Required value: claim or expression is required",
            r#"anonymous.conditions: Invalid value: "[\"/livez\", \"\", \"/livez\"]": enabled should be set to true when conditions are defined"#,
            "anonymous.conditions[1].path: Required value: path is required",
            r#"anonymous.conditions[2].path: Duplicate value: "/livez""#,
            r#"jwt[3].claimValidationRules[0].expression: Invalid value: "claims.foo": must evaluate to bool"#,
            r#"jwt[3].claimValidationRules[1].expression: Invalid value: "claims.?email_verified.orValue(true)": must evaluate to bool"#,
            r#"jwt[3].claimMappings.username.expression: Invalid value: "user.username": compilation failed: ERROR: <input>:1:1: undeclared reference to 'user'"#,
            r#"jwt[3].userValidationRules[0].expression: Invalid value: "user.username": must evaluate to bool"#,
            r#"jwt[3].userValidationRules[1].expression: Invalid value: "user.nmae == 'x'": compilation failed: ERROR: <input>:1:5: undefined field 'nmae'"#,
        ] {
            assert!(e.contains(want), "{want}\nnot in\n{e}");
        }
        for valid in [
            "claimValidationRules[2]",
            "claimMappings.groups",
            "userValidationRules[2]",
        ] {
            assert!(!e.contains(&format!("jwt[3].{valid}")), "{valid}: {e}");
        }
        assert!(!e.contains("compilation failed: compilation failed"), "{e}");
        let e = parse("apiVersion: v1\nkind: Pod\n", &[]).err().unwrap();
        assert!(e.contains("want kind AuthenticationConfiguration"), "{e}");
    }
}
