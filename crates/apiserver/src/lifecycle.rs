//! Graceful termination as upstream's generic apiserver runs it
//! (`k8s.io/apiserver/pkg/server/lifecycle_signals.go`), and the response headers
//! every answer carries (`--strict-transport-security-directives`).
//!
//! On SIGTERM (ShutdownInitiated) `/readyz` fails and this apiserver leaves the
//! `kubernetes` Service's endpoints, while every request is still served for
//! `--shutdown-delay-duration`, so load balancers move away first. Then
//! (AfterShutdownDelayDuration) either the listener stops at once and requests in
//! flight finish, or, with `--shutdown-send-retry-after`, the listener stays open
//! until the requests in flight have drained, and every new request but the health
//! probes, `/metrics` and the apiserver's own is answered 429 with `Retry-After` and
//! `Connection: close`, so clients retry elsewhere instead of meeting a closed port.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use crate::handler::{Body, respond};

/// `--shutdown-delay-duration`, `--shutdown-send-retry-after` and
/// `--shutdown-watch-termination-grace-period` (upstream's defaults: 0s, false, 0s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownOptions {
    /// How long `/readyz` fails while requests are still served.
    pub delay: Duration,
    /// After the delay, answer new requests 429 until those in flight have drained,
    /// and only then stop listening.
    pub send_retry_after: bool,
    /// How long the server waits for its watches to end once it told them to.
    pub watch_termination_grace_period: Duration,
}

/// Where a shutdown is, as the request handlers see it.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    /// The delay has passed with `--shutdown-send-retry-after`: new requests are
    /// refused (upstream's NotAcceptingNewRequest signal).
    not_accepting: AtomicBool,
}

impl Lifecycle {
    pub(crate) fn stop_accepting(&self) {
        self.not_accepting.store(true, Ordering::Relaxed);
    }

    /// The answer to a request that arrives once new requests are refused (None:
    /// serve it). Upstream's `WithRetryAfter`: a plain-text 429.
    pub(crate) fn refusal(&self, path: &str, headers: &HeaderMap) -> Option<Response<Body>> {
        if !self.not_accepting.load(Ordering::Relaxed) {
            return None;
        }
        let user_agent = headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        if exempt_from_retry_after(path, user_agent) {
            return None;
        }
        let mut r = respond(
            StatusCode::TOO_MANY_REQUESTS,
            "text/plain; charset=utf-8",
            "The apiserver is shutting down, please try again later.\n",
        );
        let headers = r.headers_mut();
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        headers.insert(
            "x-content-type-options",
            HeaderValue::from_static("nosniff"),
        );
        Some(r)
    }
}

/// Health probes, metrics scrapes and the apiserver's own loopback requests are
/// served to the end (upstream's `isRequestExemptFromRetryAfter`).
fn exempt_from_retry_after(path: &str, user_agent: Option<&str>) -> bool {
    user_agent.is_some_and(|ua| ua.starts_with("kube-apiserver/"))
        || ["/readyz", "/livez", "/healthz", "/metrics"]
            .iter()
            .any(|p| path.starts_with(p))
}

/// The `Strict-Transport-Security` header from `--strict-transport-security-directives`
/// (None when the list is empty: no header). Each directive is `max-age=<seconds>`,
/// `includeSubDomains` or `preload` (RFC 6797 section 6.1), as upstream checks them.
pub fn strict_transport_security(directives: &[String]) -> Result<Option<HeaderValue>, String> {
    if directives.is_empty() {
        return Ok(None);
    }
    for d in directives {
        if d.trim().is_empty() {
            return Err("empty value in strict-transport-security-directives".into());
        }
        let valid = matches!(d.as_str(), "includeSubDomains" | "preload")
            || d.split_once('=')
                .is_some_and(|(name, value)| name == "max-age" && !value.contains('='));
        if !valid {
            return Err("--strict-transport-security-directives invalid, allowed values: max-age=expireTime, includeSubDomains, preload. see https://tools.ietf.org/html/rfc6797#section-6.1 for more information".into());
        }
    }
    HeaderValue::from_str(&directives.join("; "))
        .map(Some)
        .map_err(|_| "--strict-transport-security-directives: not a valid header value".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_agent(ua: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::USER_AGENT, HeaderValue::from_str(ua).unwrap());
        h
    }

    #[test]
    fn new_requests_are_refused_only_after_stop_accepting() {
        let l = Lifecycle::default();
        let none = HeaderMap::new();
        assert!(l.refusal("/api/v1/pods", &none).is_none());
        l.stop_accepting();
        let r = l
            .refusal("/api/v1/pods", &user_agent("kubectl/v1.33"))
            .unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()[header::RETRY_AFTER], "5");
        assert_eq!(r.headers()[header::CONNECTION], "close");
        for exempt in ["/readyz", "/livez/ping", "/healthz", "/metrics"] {
            assert!(l.refusal(exempt, &none).is_none(), "{exempt}");
        }
        assert!(
            l.refusal("/api/v1/pods", &user_agent("kube-apiserver/v1.33.0"))
                .is_none()
        );
    }

    #[test]
    fn hsts_directives_as_upstream_checks_them() {
        let s = |v: &[&str]| {
            strict_transport_security(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(s(&[]), Ok(None));
        assert_eq!(
            s(&["max-age=31536000", "includeSubDomains", "preload"])
                .unwrap()
                .unwrap(),
            "max-age=31536000; includeSubDomains; preload"
        );
        assert!(s(&["max-age"]).unwrap_err().contains("allowed values"));
        assert!(s(&["maxage=1"]).is_err());
        assert!(s(&["max-age=1=2"]).is_err());
        assert!(s(&["includesubdomains"]).is_err());
        assert_eq!(
            s(&[" "]).unwrap_err(),
            "empty value in strict-transport-security-directives"
        );
    }
}
