//! `--cors-allowed-origins`: cross-origin requests from browsers, as upstream's
//! `WithCORS`. A request whose `Origin` matches one of the patterns gets the
//! `Access-Control-*` headers; its preflight (`OPTIONS`) is answered 204 before
//! authentication, since browsers send preflights without credentials.

use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use regex::Regex;

use crate::handler::{Body, respond};

const ALLOWED_METHODS: &str = "POST, GET, OPTIONS, PUT, DELETE, PATCH";
const ALLOWED_HEADERS: &str = "Content-Type, Content-Length, Accept-Encoding, X-CSRF-Token, Authorization, X-Requested-With, If-Modified-Since";

/// The flag's help, which upstream repeats in its errors.
const HELP: &str = "List of allowed origins for CORS, comma separated. An allowed origin can be a regular expression to support subdomain matching. If this list is empty CORS will not be enabled. Please ensure each expression matches the entire hostname by anchoring to the start with '^' or including the '//' prefix, and by anchoring to the end with '$' or including the ':' port separator suffix. Examples of valid expressions are '//example\\.com(:|$)' and '^https://example\\.com(:|$)'";

/// The allowed origins' patterns (empty: CORS off).
#[derive(Debug, Clone, Default)]
pub struct CorsOrigins(Vec<Regex>);

impl CorsOrigins {
    /// Checks the patterns as upstream does: each must compile and pin the host's
    /// start (`^` or `//`) and end (`$` or `:`), so that `example.com` cannot match
    /// `example.com.evil.net` (CVE-2022-1996).
    pub fn parse(patterns: &[String]) -> Result<Self, String> {
        let mut out = Vec::new();
        for p in patterns {
            if p.is_empty() {
                return Err(format!(
                    "empty value in --cors-allowed-origins, help: {HELP}"
                ));
            }
            let invalid = |why: String| {
                format!(
                    "--cors-allowed-origins has an invalid regular expression: {why}, help: {HELP}"
                )
            };
            let re = Regex::new(p).map_err(|e| invalid(e.to_string()))?;
            let pins_start = p.contains('^') || p.contains("//");
            let pins_end = p.contains('$') || p.contains(':');
            if !pins_start || !pins_end {
                return Err(invalid(
                    "regular expression does not pin to start/end of host in the origin header"
                        .into(),
                ));
            }
            out.push(re);
        }
        Ok(CorsOrigins(out))
    }

    /// The `Access-Control-*` headers for a request from an allowed origin (None: no
    /// origin, or one not allowed; the request is served as any other).
    pub(crate) fn headers_for(&self, request: &HeaderMap) -> Option<HeaderMap> {
        if self.0.is_empty() {
            return None;
        }
        let origin = request.get(http::header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        if !self.0.iter().any(|re| re.is_match(text)) {
            return None;
        }
        let mut h = HeaderMap::new();
        h.insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        h.insert(
            http::header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOWED_METHODS),
        );
        h.insert(
            http::header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        h.insert(
            http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("Date"),
        );
        h.insert(
            http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        Some(h)
    }
}

/// The answer to an allowed origin's preflight: 204 with the CORS headers.
pub(crate) fn preflight(method: &Method, headers: &HeaderMap) -> Option<Response<Body>> {
    if method != Method::OPTIONS {
        return None;
    }
    let mut r = respond(StatusCode::NO_CONTENT, "text/plain; charset=utf-8", "");
    r.headers_mut().remove(http::header::CONTENT_TYPE);
    r.headers_mut().extend(headers.clone());
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(p: &[&str]) -> Result<CorsOrigins, String> {
        CorsOrigins::parse(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn request(origin: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        h
    }

    #[test]
    fn anchored_patterns_only() {
        assert!(origins(&[r"//example\.com(:|$)", r"^https://dash\.local$"]).is_ok());
        let unpinned = origins(&[r"example\.com"]).unwrap_err();
        assert!(
            unpinned.contains("does not pin to start/end of host"),
            "{unpinned}"
        );
        assert!(origins(&[r"^example\.com"]).is_err());
        assert!(origins(&[""]).unwrap_err().starts_with("empty value"));
        assert!(
            origins(&["^(unclosed$"])
                .unwrap_err()
                .contains("invalid regular expression")
        );
    }

    #[test]
    fn allowed_origins_get_the_headers() {
        let cors = origins(&[r"//example\.com(:|$)"]).unwrap();
        let h = cors.headers_for(&request("https://example.com")).unwrap();
        assert_eq!(
            h[http::header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://example.com"
        );
        assert_eq!(h[http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
        assert!(
            cors.headers_for(&request("https://example.com:8443"))
                .is_some()
        );
        assert!(
            cors.headers_for(&request("https://example.com.evil.net"))
                .is_none()
        );
        assert!(cors.headers_for(&HeaderMap::new()).is_none());
        assert!(
            CorsOrigins::default()
                .headers_for(&request("https://example.com"))
                .is_none()
        );
        let r = preflight(&Method::OPTIONS, &h).unwrap();
        assert_eq!(r.status(), 204);
        assert_eq!(
            r.headers()[http::header::ACCESS_CONTROL_ALLOW_METHODS],
            ALLOWED_METHODS
        );
        assert!(preflight(&Method::GET, &h).is_none());
    }
}
