//! Service account tokens on the server side: the `serviceaccounts/token`
//! TokenRequest subresource (bound JWTs: audiences, expiry, bound to a pod or a
//! secret), the service account authenticator's view of those objects, and the
//! issuer discovery documents (`/.well-known/openid-configuration`,
//! `/openid/v1/jwks`).

use std::sync::Arc;

use bytes::Bytes;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::ServiceAccountTokenAuthenticator;
use ferrokube_auth::authn::legacy::LegacySecret;
use ferrokube_auth::authn::serviceaccount::{
    BoundObjects, Claims, KubernetesClaim, Ref, TokenIssuer, new_jti, now_unix,
};
use ferrokube_registry::{Part, PatchType, Store, UpdateInput, WriteOptions};
use http::{HeaderMap, Method};
use serde_json::{Value, json};

/// Upstream's default and bounds of `spec.expirationSeconds`.
const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;
const MAX_EXPIRATION: i64 = 1 << 32;
/// The expiration the kubelet asks for (1h7s), which upstream's
/// `--service-account-extend-token-expiration` recognises: such a pod-bound token is
/// valid for a year, with a `warnafter` at the hour asked for, so clients that never
/// read their projected token again keep working while the stale use is noticed.
const WARN_ONLY_EXPIRATION: i64 = 60 * 60 + 7;
const EXTENDED_EXPIRATION: i64 = 24 * 365 * 60 * 60;

/// What the TokenRequest API and the discovery endpoints need.
pub(crate) struct Tokens {
    pub issuer: Option<TokenIssuer>,
    pub authenticator: Arc<ServiceAccountTokenAuthenticator<CachedObjects>>,
    /// `--api-audiences`: the default audiences of a token.
    pub api_audiences: Vec<String>,
    /// `--service-account-max-token-expiration`.
    pub max_expiration: Option<i64>,
    /// `--service-account-extend-token-expiration`.
    pub extend_expiration: bool,
    /// `--service-account-jwks-uri` or `https://<advertise>/openid/v1/jwks`.
    pub jwks_uri: String,
    pub service_accounts: Arc<Store>,
    pub pods: Arc<Store>,
    pub secrets: Arc<Store>,
    pub nodes: Arc<Store>,
    /// ServiceAccountNodeAudienceRestriction: a kubelet's token audiences are checked.
    pub node_audiences_restricted: bool,
}

fn cached_one(store: &Store, namespace: &str, name: &str) -> Option<Arc<Value>> {
    let prefix = format!("{}/{namespace}/{name}", store.info().storage_prefix);
    store
        .cache()
        .snapshot(&prefix)
        .0
        .into_iter()
        .find(|o| o["metadata"]["name"].as_str() == Some(name))
}

fn uid_of(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

/// The bound objects as the watch cache has them.
pub(crate) struct CachedObjects {
    pub service_accounts: Arc<Store>,
    pub pods: Arc<Store>,
    pub secrets: Arc<Store>,
}

impl BoundObjects for CachedObjects {
    fn service_account_uid(&self, namespace: &str, name: &str) -> Option<String> {
        cached_one(&self.service_accounts, namespace, name).map(|o| uid_of(&o))
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<(String, bool)> {
        cached_one(&self.pods, namespace, name).map(|o| {
            let deleted = o["metadata"]["deletionTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t.as_second() < now_unix());
            (uid_of(&o), deleted)
        })
    }

    fn secret_uid(&self, namespace: &str, name: &str) -> Option<String> {
        cached_one(&self.secrets, namespace, name).map(|o| uid_of(&o))
    }

    fn legacy_token_secret(&self, namespace: &str, name: &str) -> Option<LegacySecret> {
        use base64::Engine as _;
        let secret = cached_one(&self.secrets, namespace, name)?;
        // An undecodable value matches no token.
        let token = secret["data"]["token"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        Some(LegacySecret {
            token,
            deleting: !secret["metadata"]["deletionTimestamp"].is_null(),
            invalidated: secret["metadata"]["labels"]
                .get(ferrokube_auth::authn::legacy::INVALIDATED_LABEL)
                .is_some(),
        })
    }

    /// Upstream's legacy validator: label the Secret with today's date unless it
    /// already says today (or tomorrow, for clocks a little ahead); a merge patch
    /// carrying the uid, written in the background so authentication never waits.
    fn legacy_token_used(&self, namespace: &str, name: &str) {
        use ferrokube_auth::authn::legacy::LAST_USED_LABEL;
        let Some(secret) = cached_one(&self.secrets, namespace, name) else {
            return;
        };
        let today = ferrokube_auth::authn::legacy::utc_day(jiff::Timestamp::now());
        let tomorrow = today.tomorrow().unwrap_or(today);
        let last_used = secret["metadata"]["labels"][LAST_USED_LABEL].as_str();
        if [today, tomorrow]
            .iter()
            .any(|d| last_used == Some(d.to_string().as_str()))
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let patch = json!({"metadata": {"uid": secret["metadata"]["uid"].clone(),
            "labels": {LAST_USED_LABEL: today.to_string()}}});
        let (store, ns, name) = (
            self.secrets.clone(),
            namespace.to_string(),
            name.to_string(),
        );
        runtime.spawn(async move {
            let written = store
                .update(
                    Some(&ns),
                    &name,
                    UpdateInput::Patch(PatchType::Merge, patch),
                    Part::Main,
                    &WriteOptions::default(),
                )
                .await;
            if let Err(e) = written {
                tracing::warn!(secret = %format!("{ns}/{name}"), error = %e.message,
                    "labelling a legacy service account token secret with last-used failed");
            }
        });
    }
}

/// `POST .../namespaces/{ns}/serviceaccounts/{name}/token`.
pub(crate) fn token_request_path<'a>(
    method: &Method,
    segs: &[&'a str],
) -> Option<(&'a str, &'a str)> {
    match segs {
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "serviceaccounts",
            name,
            "token",
        ] if method == Method::POST => Some((*ns, *name)),
        _ => None,
    }
}

fn invalid_expiration(value: i64, detail: &str) -> ApiError {
    let mut e = ApiError::bad_request(format!(
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: {value}: {detail}"
    ));
    e.code = 422;
    e.reason = "Invalid".into();
    e
}

/// A kubelet's token request, as NodeRestriction admits it (upstream's
/// `admitServiceAccount`, with ServiceAccountNodeAudienceRestriction, on in 1.33): bound
/// to a pod (named, with its uid) scheduled on the node, for at most one audience, which
/// a projected service account token volume of the pod names, or which an authorizer
/// lets the node request (verb `request-serviceaccounts-token-audience`, the audience
/// as resource, the service account as name). CSI drivers' token audiences are not
/// looked at (no CSI here). [`NodeToken::admit`] answers the pod it read.
struct NodeToken<'a> {
    node: &'a str,
    requester: &'a ferrokube_auth::UserInfo,
    namespace: &'a str,
    service_account: &'a str,
}

impl NodeToken<'_> {
    fn forbidden(&self, message: String) -> ApiError {
        ApiError::forbidden("", "serviceaccounts", self.service_account, message)
    }

    async fn admit(
        &self,
        tokens: &Tokens,
        authorizer: &crate::authz_webhook::Authorization,
        spec: &Value,
    ) -> Result<Value, ApiError> {
        let bound = &spec["boundObjectRef"];
        let pod_name = bound["name"].as_str().unwrap_or("");
        if bound["apiVersion"].as_str() != Some("v1")
            || bound["kind"].as_str() != Some("Pod")
            || pod_name.is_empty()
        {
            return Err(self.forbidden("node requested token not bound to a pod".into()));
        }
        let want_uid = bound["uid"].as_str().unwrap_or("");
        if want_uid.is_empty() {
            return Err(
                self.forbidden("node requested token with a pod binding without a uid".into())
            );
        }
        let pod = tokens.pods.get(Some(self.namespace), pod_name).await?;
        if uid_of(&pod) != want_uid {
            return Err(self.forbidden(format!(
                "the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"
            )));
        }
        if pod["spec"]["nodeName"].as_str() != Some(self.node) {
            return Err(self.forbidden(
                "node requested token bound to a pod scheduled on a different node".into(),
            ));
        }
        if !tokens.node_audiences_restricted {
            return Ok(pod);
        }
        let requested = match spec["audiences"].as_array().map(Vec::as_slice) {
            None | Some([]) => "",
            Some([one]) => one.as_str().unwrap_or(""),
            Some(_) => return Err(self.forbidden("node may only request 0 or 1 audiences".into())),
        };
        let volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
        let in_pod_spec = volumes
            .flat_map(|v| v["projected"]["sources"].as_array().into_iter().flatten())
            .filter(|source| source["serviceAccountToken"].is_object())
            .any(|source| {
                source["serviceAccountToken"]["audience"]
                    .as_str()
                    .unwrap_or("")
                    == requested
            });
        if in_pod_spec {
            return Ok(pod);
        }
        let attrs = ferrokube_auth::Attributes {
            user: self.requester.clone(),
            verb: "request-serviceaccounts-token-audience".into(),
            namespace: self.namespace.into(),
            api_version: "v1".into(),
            resource: requested.into(),
            name: self.service_account.into(),
            resource_request: true,
            ..ferrokube_auth::Attributes::default()
        };
        let verdict = authorizer.verdict(&attrs).await;
        if verdict.decision.is_allowed() {
            return Ok(pod);
        }
        let user = &self.requester.name;
        Err(self.forbidden(match verdict.error {
            Some(e) => format!(
                "audience {requested:?} not found in pod spec volume, error authorizing {user} to request tokens for this audience: {e}"
            ),
            None => format!(
                "audience {requested:?} not found in pod spec volume, {user} is not authorized to request tokens for this audience"
            ),
        }))
    }
}

/// Issues a bound token (upstream `TokenREST.Create`).
pub(crate) async fn create(
    tokens: &Tokens,
    authorizer: &crate::authz_webhook::Authorization,
    requester: &ferrokube_auth::UserInfo,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let Some(issuer) = &tokens.issuer else {
        return Err(ApiError::not_found("", "serviceaccounts", "token"));
    };
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let mut req = crate::handler::decode_body(body, ct, "TokenRequest")?;
    // The status is the answer's: upstream overwrites whatever came. Clients send an
    // empty one (client-go's JSON `{"token": "", "expirationTimestamp": null}`, the
    // same in protobuf), which k8s-openapi's type, whose two fields are required,
    // would refuse.
    if let Some(obj) = req.as_object_mut() {
        obj.remove("status");
    }
    // Fields of the wrong type are refused, not read as left out.
    ApiError::check_decodes_as::<k8s_openapi::api::authentication::v1::TokenRequest>(
        &req,
        "TokenRequest",
        "v1",
    )?;
    let spec = &req["spec"];
    let sa = tokens.service_accounts.get(Some(ns), name).await?;
    let mut expiration = spec["expirationSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_EXPIRATION);
    if expiration < MIN_EXPIRATION {
        return Err(invalid_expiration(
            expiration,
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration > MAX_EXPIRATION {
        return Err(invalid_expiration(
            expiration,
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if let Some(max) = tokens.max_expiration {
        expiration = expiration.min(max);
    }
    let audiences: Vec<String> = match spec["audiences"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => tokens.api_audiences.clone(),
    };
    let mut claim = KubernetesClaim {
        namespace: ns.to_string(),
        serviceaccount: Ref {
            name: name.to_string(),
            uid: uid_of(&sa),
        },
        ..KubernetesClaim::default()
    };
    let bound = &spec["boundObjectRef"];
    // A kubelet's request is admitted first; the pod it is bound to, read for that, is
    // the bound object below.
    let mut admitted_pod = None;
    if let Some(node) = ferrokube_auth::node::node_identity(requester).filter(|n| !n.is_empty()) {
        let token = NodeToken {
            node,
            requester,
            namespace: ns,
            service_account: name,
        };
        admitted_pod = Some(token.admit(tokens, authorizer, spec).await?);
    }
    if bound.is_object() {
        let kind = bound["kind"].as_str().unwrap_or("");
        let bname = bound["name"].as_str().unwrap_or("");
        let store = match kind {
            "Pod" => &tokens.pods,
            "Secret" => &tokens.secrets,
            other => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for object of kind {other:?}"
                )));
            }
        };
        let obj = match admitted_pod {
            Some(pod) => pod,
            None => store.get(Some(ns), bname).await?,
        };
        let uid = uid_of(&obj);
        if let Some(want) = bound["uid"].as_str().filter(|u| !u.is_empty())
            && want != uid
        {
            return Err(ApiError::conflict(
                "",
                store.info().plural,
                bname,
                format!(
                    "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        let r = Ref {
            name: bname.to_string(),
            uid,
        };
        if kind == "Pod" {
            if let Some(node) = obj["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())
                && let Ok(n) = tokens.nodes.get(None, node).await
            {
                claim.node = Some(Ref {
                    name: node.to_string(),
                    uid: uid_of(&n),
                });
            }
            claim.pod = Some(r);
        } else {
            claim.secret = Some(r);
        }
    }
    let now = now_unix();
    let mut valid_for = expiration;
    if tokens.extend_expiration
        && claim.pod.is_some()
        && expiration == WARN_ONLY_EXPIRATION
        && audiences.iter().all(|a| tokens.api_audiences.contains(a))
    {
        claim.warnafter = Some(now + expiration);
        valid_for = EXTENDED_EXPIRATION;
    }
    let claims = Claims {
        aud: audiences.clone(),
        exp: now + valid_for,
        iat: now,
        iss: String::new(),
        jti: new_jti(),
        kubernetes: claim,
        nbf: now,
        sub: ferrokube_auth::rbac::service_account_user(ns, name),
    };
    let token = issuer
        .sign(claims)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    // The status shows the expiration asked for, also for an extended token.
    let expiration_timestamp = jiff::Timestamp::from_second(now + expiration)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let mut out_spec = json!({"audiences": audiences, "expirationSeconds": expiration,
        "boundObjectRef": if bound.is_object() { bound.clone() } else { Value::Null }});
    if !bound.is_object()
        && let Some(o) = out_spec.as_object_mut()
    {
        o.remove("boundObjectRef");
    }
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": out_spec,
        "status": {"token": token, "expirationTimestamp": expiration_timestamp},
    }))
}

/// `/.well-known/openid-configuration`.
pub(crate) fn openid_configuration(tokens: &Tokens) -> Option<Value> {
    let issuer = tokens.issuer.as_ref()?;
    Some(json!({
        "issuer": issuer.issuer(),
        "jwks_uri": tokens.jwks_uri,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_paths() {
        let segs = [
            "api",
            "v1",
            "namespaces",
            "default",
            "serviceaccounts",
            "sa",
            "token",
        ];
        assert_eq!(
            token_request_path(&Method::POST, &segs),
            Some(("default", "sa"))
        );
        assert_eq!(token_request_path(&Method::GET, &segs), None);
        assert_eq!(token_request_path(&Method::POST, &segs[..6]), None);
        let e = invalid_expiration(10, "may not specify a duration less than 10 minutes");
        assert_eq!(e.code, 422);
    }
}
