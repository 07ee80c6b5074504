//! `/openapi/v2`, `/swagger-2.0.0.pb-v1`, `/openapi/v3` and `/openapi/v3/<gv>`, as
//! kube-openapi's handlers serve them: content negotiation on `Accept` (JSON, or the
//! gnostic protobuf for v2), a quoted `ETag` (upper-case hex SHA-512 of the bytes),
//! `Last-Modified`, `If-None-Match` → 304, `Vary: Accept`; a v3 document asked for with
//! `?hash=` is immutable (`Cache-Control: public, immutable`, `Expires` a year out), and
//! a stale hash is redirected (301) to the current one.
//!
//! The documents are generated once, on a background thread started by the first
//! OpenAPI request (as kube-openapi builds its JSON and protobuf forms lazily), so start
//! → ready stays fast and a server nobody asks for OpenAPI (kubelets, controllers) does
//! not keep about 8 MiB of documents resident; requests wait for the build.

use std::sync::Arc;

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_openapi::{Documents, Served};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use tokio::sync::watch;

use crate::handler::{Body, respond};
use crate::output::parse_accept;

/// Where the build thread publishes the documents.
type DocumentsSender = watch::Sender<Option<Arc<Documents>>>;

/// The documents, once built.
#[derive(Clone)]
pub(crate) struct OpenApi {
    docs: watch::Receiver<Option<Arc<Documents>>>,
    /// Starts the build (once); taken by the first request.
    build: Arc<std::sync::Mutex<Option<DocumentsSender>>>,
    /// `Last-Modified` of every document: when the server started.
    last_modified: String,
}

/// Accept spellings of the v2 protobuf document.
const V2_PROTOBUF_ACCEPT: [&str; 2] = [
    ferrokube_openapi::V2_PROTOBUF_CONTENT_TYPE,
    ferrokube_openapi::V2_PROTOBUF_RESPONSE_CONTENT_TYPE,
];

impl OpenApi {
    /// Serves the documents, built on first use.
    pub(crate) fn start() -> OpenApi {
        let (tx, rx) = watch::channel(None);
        OpenApi {
            docs: rx,
            build: Arc::new(std::sync::Mutex::new(Some(tx))),
            last_modified: http_date(jiff::Timestamp::now()),
        }
    }

    /// Starts building the documents on a thread of their own, the first time only.
    fn build_once(&self) {
        let tx = self
            .build
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(tx) = tx else {
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("openapi-build".into())
            .spawn(move || {
                let docs = Documents::build();
                let _ = tx.send(Some(Arc::new(docs)));
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the OpenAPI build thread");
        }
    }

    async fn documents(&self) -> Result<Arc<Documents>, ApiError> {
        self.build_once();
        let mut rx = self.docs.clone();
        let docs = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ApiError::internal("the OpenAPI documents could not be built"))?;
        docs.clone()
            .ok_or_else(|| ApiError::internal("the OpenAPI documents could not be built"))
    }

    /// Serves `path` (already known to be an OpenAPI path), or `None` when it is not
    /// one.
    pub(crate) async fn serve(
        &self,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Option<Result<Response<Body>, ApiError>> {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .filter(|a| !a.trim().is_empty())
            .unwrap_or("*/*");
        let path = path.trim_end_matches('/');
        let r = match path {
            "/openapi/v2" => self.v2(accept, headers).await,
            "/swagger-2.0.0.pb-v1" => self
                .documents()
                .await
                .map(|d| self.content(&d.v2_protobuf, "application/octet-stream", headers)),
            "/openapi/v3" => self
                .documents()
                .await
                .map(|d| self.content(&d.v3_index, "application/json", headers)),
            p => {
                let gv = p.strip_prefix("/openapi/v3/")?;
                self.v3(gv, query, accept, headers).await
            }
        };
        Some(r)
    }

    async fn v2(&self, accept: &str, headers: &HeaderMap) -> Result<Response<Body>, ApiError> {
        let docs = self.documents().await?;
        for m in ordered(accept) {
            let (ty, sub) = m.split_once('/').unwrap_or((m.as_str(), ""));
            let json = (ty == "application" || ty == "*") && (sub == "json" || sub == "*");
            if json {
                return Ok(with_vary(self.content(
                    &docs.v2_json,
                    "application/json",
                    headers,
                )));
            }
            if V2_PROTOBUF_ACCEPT.contains(&m.as_str()) {
                return Ok(with_vary(self.content(
                    &docs.v2_protobuf,
                    ferrokube_openapi::V2_PROTOBUF_RESPONSE_CONTENT_TYPE,
                    headers,
                )));
            }
        }
        Ok(with_vary(not_acceptable()))
    }

    async fn v3(
        &self,
        gv: &str,
        query: Option<&str>,
        accept: &str,
        headers: &HeaderMap,
    ) -> Result<Response<Body>, ApiError> {
        let docs = self.documents().await?;
        let acceptable = ordered(accept).into_iter().any(|m| {
            let (ty, sub) = m.split_once('/').unwrap_or((m.as_str(), ""));
            (ty == "application" || ty == "*") && (sub == "json" || sub == "*")
        });
        if !acceptable {
            return Ok(with_vary(not_acceptable()));
        }
        let Some(doc) = docs.v3(gv) else {
            return Ok(with_vary(respond(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "404 page not found\n",
            )));
        };
        let hash = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .find(|(k, _)| k == "hash")
            .map(|(_, v)| v.into_owned())
            .filter(|h| !h.is_empty());
        if let Some(h) = &hash
            && *h != doc.hash
        {
            let mut r = respond(
                StatusCode::MOVED_PERMANENTLY,
                "text/html; charset=utf-8",
                "",
            );
            if let Ok(v) = HeaderValue::from_str(&format!("/openapi/v3/{gv}?hash={}", doc.hash)) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            return Ok(with_vary(r));
        }
        let mut r = with_vary(self.content(doc, "application/json", headers));
        if hash.is_some() {
            let h = r.headers_mut();
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable"),
            );
            let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(365 * 24);
            if let Ok(v) = HeaderValue::from_str(&http_date(expires)) {
                h.insert(header::EXPIRES, v);
            }
        }
        Ok(r)
    }

    /// The bytes with `ETag` and `Last-Modified`, or 304 when `If-None-Match` matches.
    fn content(&self, doc: &Served, content_type: &str, headers: &HeaderMap) -> Response<Body> {
        let etag = format!("\"{}\"", doc.hash);
        let matches = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
        let mut r = if matches {
            respond(StatusCode::NOT_MODIFIED, content_type, "")
        } else {
            respond(StatusCode::OK, content_type, doc.bytes.clone())
        };
        let h = r.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&etag) {
            h.insert(header::ETAG, v);
        }
        if let Ok(v) = HeaderValue::from_str(&self.last_modified) {
            h.insert(header::LAST_MODIFIED, v);
        }
        r
    }
}

/// The media ranges of `Accept` (essences), highest `q` first, in order otherwise.
fn ordered(accept: &str) -> Vec<String> {
    let mut ms: Vec<(f32, usize, String)> = parse_accept(accept)
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let q = m.param("q").and_then(|q| q.parse().ok()).unwrap_or(1.0);
            (q, i, m.essence)
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    ms.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ms.into_iter().map(|(_, _, e)| e).collect()
}

fn with_vary(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

fn not_acceptable() -> Response<Body> {
    respond(StatusCode::NOT_ACCEPTABLE, "text/plain; charset=utf-8", "")
}

/// An HTTP date (RFC 9110 IMF-fixdate).
fn http_date(t: jiff::Timestamp) -> String {
    t.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_order() {
        assert_eq!(
            ordered(
                "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
            ),
            vec![
                "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                "application/json"
            ]
        );
        assert_eq!(ordered("*/*"), vec!["*/*"]);
    }

    #[test]
    fn dates() {
        let t = jiff::Timestamp::from_second(0).unwrap();
        assert_eq!(http_date(t), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}
