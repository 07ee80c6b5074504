//! `--authentication-token-webhook-config-file`: bearer tokens that no other
//! authenticator knows are sent to a remote service as TokenReviews (upstream
//! `k8s.io/apiserver/plugin/pkg/authenticator/token/webhook`, behind the token cache
//! of `pkg/authentication/token/cache` that `--authentication-token-webhook-cache-ttl`
//! sets).
//!
//! The webhook is the last token authenticator, as upstream orders them, and the only
//! asynchronous one: [`authenticate`] asks the synchronous chain first and the webhook
//! only for a bearer token the chain did not accept.
//!
//! - The review carries the apiserver's API audiences (`--api-audiences`, else the
//!   service account issuer); an answer naming audiences must share one with them.
//! - Answers (authenticated or not) are cached for the TTL under an HMAC of the token,
//!   never the token itself. Failed calls are not cached.
//! - Calls are retried as upstream retries them
//!   ([`KubeconfigWebhook::post_json_retrying`]).
//!
//! Left out: the cache's per-audience keys when a request carries its own audiences
//! (only the API audiences exist here), and the egress selector.

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_auth::{AuthError, AuthRequest, Authenticator, Bearer, UserInfo, bearer_token};
use k8s_openapi::api::authentication::v1::TokenReviewStatus;
use parking_lot::Mutex;
use serde_json::json;

use crate::webhook_client::{KubeconfigWebhook, ReviewVersion};

/// Upstream's first backoff for this webhook's retries.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// How long one TokenReview call may take (upstream's webhook request timeout).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Upstream's token cache holds this many tokens.
const CACHE_SIZE: NonZeroUsize = NonZeroUsize::new(4096).unwrap();

/// A token's HMAC under the cache's random key.
type TokenKey = [u8; 32];
/// When a cached answer expires, and the user (None: not authenticated).
type CachedAnswer = (Instant, Option<UserInfo>);

/// The webhook token authenticator with its cache.
pub(crate) struct TokenWebhook {
    webhook: KubeconfigWebhook,
    version: ReviewVersion,
    audiences: Vec<String>,
    ttl: Duration,
    cache_key: ring::hmac::Key,
    cache: Mutex<lru::LruCache<TokenKey, CachedAnswer>>,
}

impl TokenWebhook {
    pub(crate) async fn from_file(
        path: &Path,
        version: ReviewVersion,
        audiences: Vec<String>,
        ttl: Duration,
    ) -> Result<TokenWebhook, String> {
        let webhook = KubeconfigWebhook::from_file(path)
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let rng = ring::rand::SystemRandom::new();
        let cache_key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| "no random key for the token cache".to_string())?;
        Ok(TokenWebhook {
            webhook,
            version,
            audiences,
            ttl,
            cache_key,
            cache: Mutex::new(lru::LruCache::new(CACHE_SIZE)),
        })
    }

    /// The user `token` is, `Ok(None)` when the webhook says it is no one.
    async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let mut key = [0u8; 32];
        key.copy_from_slice(ring::hmac::sign(&self.cache_key, token.as_bytes()).as_ref());
        if let Some((expires, user)) = self.cache.lock().get(&key)
            && *expires > Instant::now()
        {
            return Ok(user.clone());
        }
        let status = self.review(token).await?;
        let user = self.user_of(status)?;
        if !self.ttl.is_zero() {
            self.cache
                .lock()
                .put(key, (Instant::now() + self.ttl, user.clone()));
        }
        Ok(user)
    }

    /// One TokenReview, retried as upstream retries webhook calls.
    async fn review(&self, token: &str) -> Result<TokenReviewStatus, AuthError> {
        let body = json!({
            "apiVersion": self.version.api_version("authentication.k8s.io"),
            "kind": "TokenReview",
            "metadata": {"creationTimestamp": null},
            "spec": {"token": token, "audiences": self.audiences},
            "status": {"user": {}},
        })
        .to_string()
        .into_bytes();
        let answer = self
            .webhook
            .post_json_retrying(CALL_TIMEOUT, FIRST_BACKOFF, body)
            .await
            .map_err(|e| AuthError::Webhook(e.to_string()))?;
        let review: serde_json::Value = serde_json::from_slice(&answer)
            .map_err(|e| AuthError::Webhook(format!("decoding the TokenReview: {e}")))?;
        serde_json::from_value(review["status"].clone())
            .map_err(|e| AuthError::Webhook(format!("decoding the TokenReview status: {e}")))
    }

    /// Upstream's reading of an answer: audiences first, then `authenticated`.
    fn user_of(&self, status: TokenReviewStatus) -> Result<Option<UserInfo>, AuthError> {
        if !self.audiences.is_empty() {
            let got = status.audiences.as_deref().unwrap_or_default();
            let shared = got.is_empty() || got.iter().any(|a| self.audiences.contains(a));
            if !shared {
                return Ok(None);
            }
        }
        if !status.authenticated.unwrap_or(false) {
            return match status.error.filter(|e| !e.is_empty()) {
                Some(e) => Err(AuthError::Webhook(e)),
                None => Ok(None),
            };
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(UserInfo {
            name: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default().into_iter().collect(),
        }))
    }
}

/// The apiserver's authentication: the synchronous chain, then (for a bearer token
/// the chain did not accept) the token webhook, whose success wins as in upstream's
/// union and whose failure joins the chain's errors.
pub(crate) async fn authenticate(
    chain: &dyn Authenticator,
    webhook: Option<&Arc<TokenWebhook>>,
    request: &AuthRequest<'_>,
) -> Result<Option<UserInfo>, AuthError> {
    let first = chain.authenticate(request);
    let Some(webhook) = webhook else {
        return first;
    };
    let Bearer::Token(token) = bearer_token(request.headers) else {
        return first;
    };
    let chain_error = match first {
        Ok(user) => return Ok(user),
        Err(e) => e,
    };
    match webhook.authenticate_token(token).await {
        Ok(Some(user)) => Ok(Some(user.with_authenticated_group())),
        Ok(None) => Err(chain_error),
        Err(webhook_error) => Err(match chain_error {
            AuthError::InvalidBearerToken => webhook_error,
            AuthError::Aggregate(mut errors) => {
                errors.push(webhook_error);
                AuthError::Aggregate(errors)
            }
            other => AuthError::Aggregate(vec![other, webhook_error]),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo as ReviewUser;

    fn webhook(audiences: &[&str]) -> TokenWebhook {
        // `user_of` reads only the audiences; the target is never called.
        let rng = ring::rand::SystemRandom::new();
        TokenWebhook {
            webhook: KubeconfigWebhook::unreachable_for_tests(),
            version: ReviewVersion::V1,
            audiences: audiences.iter().map(|a| a.to_string()).collect(),
            ttl: Duration::from_secs(120),
            cache_key: ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap(),
            cache: Mutex::new(lru::LruCache::new(NonZeroUsize::new(4).unwrap())),
        }
    }

    fn status(authenticated: bool, audiences: Option<&[&str]>) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(authenticated),
            audiences: audiences.map(|a| a.iter().map(|s| s.to_string()).collect()),
            user: Some(ReviewUser {
                username: Some("jane".into()),
                uid: Some("42".into()),
                groups: Some(vec!["devs".into()]),
                extra: None,
            }),
            error: None,
        }
    }

    #[test]
    fn an_authenticated_answer_is_its_user() {
        let user = webhook(&["api"])
            .user_of(status(true, None))
            .unwrap()
            .unwrap();
        assert_eq!((user.name.as_str(), user.uid.as_str()), ("jane", "42"));
        assert_eq!(user.groups, vec!["devs".to_string()]);
    }

    #[test]
    fn audiences_of_the_answer_must_meet_the_apis() {
        let hook = webhook(&["api"]);
        assert!(
            hook.user_of(status(true, Some(&["other"])))
                .unwrap()
                .is_none()
        );
        assert!(
            hook.user_of(status(true, Some(&["other", "api"])))
                .unwrap()
                .is_some()
        );
        // Without audiences of its own the apiserver checks none.
        assert!(
            webhook(&[])
                .user_of(status(true, Some(&["other"])))
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn an_unauthenticated_answer_with_an_error_is_that_error() {
        let mut s = status(false, None);
        assert!(webhook(&[]).user_of(s.clone()).unwrap().is_none());
        s.error = Some("token expired".into());
        let err = webhook(&[]).user_of(s).unwrap_err();
        assert_eq!(err.to_string(), "token expired");
    }

    #[test]
    fn the_version_flag_takes_upstreams_values_only() {
        assert_eq!(
            ReviewVersion::parse("authentication", "v1beta1"),
            Ok(ReviewVersion::V1beta1)
        );
        let err = ReviewVersion::parse("authentication", "v2").unwrap_err();
        assert_eq!(
            err,
            "unsupported authentication webhook version \"v2\", supported versions are \"v1\", \"v1beta1\""
        );
    }
}
