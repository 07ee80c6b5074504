//! `/openapi/v2`, `/swagger-2.0.0.pb-v1`, `/openapi/v3` and `/openapi/v3/<gv>`, as
//! kube-openapi's handlers serve them: content negotiation on `Accept` (JSON, or the
//! gnostic protobuf for v2), a quoted `ETag` (upper-case hex SHA-512 of the bytes),
//! `Last-Modified`, `If-None-Match` → 304, `Vary: Accept`; a v3 document asked for with
//! `?hash=` is immutable (`Cache-Control: public, immutable`, `Expires` a year out), and
//! a stale hash is redirected (301) to the current one.
//!
//! The documents are generated on a background thread started by the first OpenAPI
//! request (as kube-openapi builds its JSON and protobuf forms lazily), so start →
//! ready stays fast and a server nobody asks for OpenAPI (kubelets, controllers) keeps
//! none of them; requests wait for the build. They include the served custom
//! resources (as apiextensions-apiserver's OpenAPI controller merges them): when the
//! served set changes, the next OpenAPI request builds them again, reusing the built-in
//! documents (built once) and adding only the custom part. The extension apiservers'
//! documents, which the aggregator downloads ([`crate::aggregator`]), are added on each
//! build: the v3 documents of remote APIServices' group-versions served and indexed
//! next to the others the same way (their hash is this server's, of the bytes the
//! extension sent), their `/openapi/v2` paths and definitions merged into
//! `/openapi/v2` (JSON and protobuf) as upstream's aggregator merges them. Only their gzip form is held (about a
//! tenth of the JSON): a client that accepts gzip (kubectl, client-go) gets those bytes
//! as they are (`Content-Encoding: gzip`), any other gets them inflated on the fly in
//! 64 KiB chunks, so no request holds a whole uncompressed copy.

use std::collections::BTreeMap;
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_openapi::{CustomResourceVersion, Documents, Served, TurnedOff};
use ferrokube_registry::custom::CustomResources;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use tokio::sync::watch;

use crate::handler::{Body, accepts_gzip, respond};
use crate::output::parse_accept;

/// The extension apiservers' OpenAPI documents (the aggregator downloads them; see
/// [`crate::aggregator`]), served next to the local ones.
#[derive(Default, Debug)]
pub(crate) struct RemoteDocuments {
    /// The v3 documents of remote APIServices' group-versions, keyed as
    /// [`ferrokube_openapi::gv_path`].
    pub v3: BTreeMap<String, Served>,
    /// The `/openapi/v2` documents of the remote APIServices' servers, merged into
    /// the served one in this order.
    pub v2: Vec<Served>,
}

/// The documents served now, and what they were built from.
struct Current {
    /// The generation of the served custom resources they include.
    generation: u64,
    /// The built-in and custom resources' documents of that generation.
    local: Arc<Documents>,
    /// The extension apiservers' documents they include.
    remote: Arc<RemoteDocuments>,
    /// `local` with `remote` added: what is served.
    docs: Arc<Documents>,
    /// Their `Last-Modified`.
    last_modified: String,
}

/// The documents, built on first use and again on the first request after the served
/// custom resources change.
#[derive(Clone)]
pub(crate) struct OpenApi {
    custom: Arc<CustomResources>,
    /// Changes whenever the served custom resources do.
    generation: watch::Receiver<u64>,
    /// The extension apiservers' documents, replaced when they change.
    remote: watch::Receiver<Arc<RemoteDocuments>>,
    /// What `--runtime-config` turns off: left out of the documents.
    turned_off: Arc<TurnedOff>,
    /// The built-in documents, built once (on the first request) and kept: a rebuild
    /// only adds the custom resources to them.
    built_in: Arc<std::sync::Mutex<Option<Arc<Documents>>>>,
    /// What is served now; requests that find it stale wait for one rebuild.
    current: Arc<tokio::sync::Mutex<Option<Current>>>,
    /// `Last-Modified` of the built-in documents: when the server started.
    started: String,
}

/// Accept spellings of the v2 protobuf document.
const V2_PROTOBUF_ACCEPT: [&str; 2] = [
    ferrokube_openapi::V2_PROTOBUF_CONTENT_TYPE,
    ferrokube_openapi::V2_PROTOBUF_RESPONSE_CONTENT_TYPE,
];

impl OpenApi {
    /// Serves the documents of the built-in types and of `custom`, built on first use,
    /// and the extension apiservers' documents `remote` has.
    pub(crate) fn start(
        custom: Arc<CustomResources>,
        remote: watch::Receiver<Arc<RemoteDocuments>>,
        enablement: &crate::ApiEnablement,
    ) -> OpenApi {
        let mut turned_off = TurnedOff::default();
        for (g, v) in ferrokube_api::resources::groups() {
            let gv = ferrokube_openapi::gv_path(g, v);
            if !enablement.serves_group_version(g, v) {
                turned_off.group_versions.push(gv);
                continue;
            }
            for r in ferrokube_api::resources::resources_of(g, v) {
                if !enablement.serves_resource(g, v, r.plural) {
                    turned_off
                        .resources
                        .push((gv.clone(), r.plural.to_string()));
                    continue;
                }
                for s in r.subresources {
                    if !enablement.serves_subresource(g, r.plural, s.name) {
                        turned_off.subresources.push((
                            gv.clone(),
                            r.plural.to_string(),
                            s.name.to_string(),
                        ));
                    }
                }
            }
        }
        OpenApi {
            turned_off: Arc::new(turned_off),
            generation: custom.subscribe(),
            remote,
            custom,
            built_in: Arc::new(std::sync::Mutex::new(None)),
            current: Arc::new(tokio::sync::Mutex::new(None)),
            started: http_date(jiff::Timestamp::now()),
        }
    }

    /// The documents for what is served now, with their `Last-Modified`: the ones
    /// built before when neither the custom resources nor the extension apiservers'
    /// documents changed since, else built again on a thread of their own (the
    /// built-in part once, the custom part when it changed, the extensions' part
    /// each time).
    async fn documents(&self) -> Result<(Arc<Documents>, String), ApiError> {
        let mut current = self.current.lock().await;
        // Read before the snapshot: a change after it is seen by the next request.
        let generation = *self.generation.borrow();
        let remote = self.remote.borrow().clone();
        if let Some(c) = current.as_ref()
            && c.generation == generation
            && Arc::ptr_eq(&c.remote, &remote)
        {
            return Ok((c.docs.clone(), c.last_modified.clone()));
        }
        let local = current
            .as_ref()
            .filter(|c| c.generation == generation)
            .map(|c| c.local.clone());
        let served = self.custom.served();
        let built_in = self.built_in.clone();
        let turned_off = self.turned_off.clone();
        let extensions = remote.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("openapi-build".into())
            .spawn(move || {
                let local = local.unwrap_or_else(|| {
                    // Kept even when the request that started the build went away.
                    let base = {
                        let mut b = built_in.lock().unwrap_or_else(|p| p.into_inner());
                        b.get_or_insert_with(|| Arc::new(Documents::build().without(&turned_off)))
                            .clone()
                    };
                    let resources: Vec<CustomResourceVersion<'_>> = served
                        .all()
                        .map(|r| CustomResourceVersion {
                            info: r.info,
                            definition: &r.definition,
                        })
                        .collect();
                    if resources.is_empty() {
                        base
                    } else {
                        Arc::new(base.with_custom(&resources))
                    }
                });
                let docs = if extensions.v3.is_empty() && extensions.v2.is_empty() {
                    local.clone()
                } else {
                    Arc::new(
                        local
                            .with_v3_documents(&extensions.v3)
                            .with_v2_documents(&extensions.v2),
                    )
                };
                let _ = tx.send((local, docs));
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the OpenAPI build thread");
            return Err(ApiError::internal(
                "the OpenAPI documents could not be built",
            ));
        }
        let (local, docs) = rx
            .await
            .map_err(|_| ApiError::internal("the OpenAPI documents could not be built"))?;
        let last_modified = match current.as_ref() {
            Some(c) if c.docs.v3_index == docs.v3_index && c.docs.v2_json == docs.v2_json => {
                c.last_modified.clone()
            }
            Some(_) => http_date(jiff::Timestamp::now()),
            None if generation == 0 && remote.v3.is_empty() && remote.v2.is_empty() => {
                self.started.clone()
            }
            None => http_date(jiff::Timestamp::now()),
        };
        *current = Some(Current {
            generation,
            local,
            remote,
            docs: docs.clone(),
            last_modified: last_modified.clone(),
        });
        Ok((docs, last_modified))
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
                .map(|(d, lm)| content(&d.v2_protobuf, "application/octet-stream", headers, &lm)),
            "/openapi/v3" => self
                .documents()
                .await
                .map(|(d, lm)| content(&d.v3_index, "application/json", headers, &lm)),
            p => {
                let gv = p.strip_prefix("/openapi/v3/")?;
                self.v3(gv, query, accept, headers).await
            }
        };
        Some(r)
    }

    async fn v2(&self, accept: &str, headers: &HeaderMap) -> Result<Response<Body>, ApiError> {
        let (docs, lm) = self.documents().await?;
        for m in ordered(accept) {
            let (ty, sub) = m.split_once('/').unwrap_or((m.as_str(), ""));
            let json = (ty == "application" || ty == "*") && (sub == "json" || sub == "*");
            if json {
                return Ok(with_vary(content(
                    &docs.v2_json,
                    "application/json",
                    headers,
                    &lm,
                )));
            }
            if V2_PROTOBUF_ACCEPT.contains(&m.as_str()) {
                return Ok(with_vary(content(
                    &docs.v2_protobuf,
                    ferrokube_openapi::V2_PROTOBUF_RESPONSE_CONTENT_TYPE,
                    headers,
                    &lm,
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
        let (docs, lm) = self.documents().await?;
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
        let mut r = with_vary(content(doc, "application/json", headers, &lm));
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
}

/// The document with `ETag` and `Last-Modified`, or 304 when `If-None-Match`
/// matches: the held gzip bytes when the client accepts gzip, else inflated.
fn content(
    doc: &Served,
    content_type: &str,
    headers: &HeaderMap,
    last_modified: &str,
) -> Response<Body> {
    let etag = format!("\"{}\"", doc.hash);
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut r = if matches {
        respond(StatusCode::NOT_MODIFIED, content_type, "")
    } else if accepts_gzip(headers) {
        let mut r = respond(StatusCode::OK, content_type, doc.gzip.clone());
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        let mut r = respond(StatusCode::OK, content_type, "");
        *r.body_mut() = Inflating::new(doc).boxed_unsync();
        r
    };
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(last_modified) {
        h.insert(header::LAST_MODIFIED, v);
    }
    // The body depends on both: the media type and whether it is gzip-encoded.
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    r
}

/// Chunks an [`Inflating`] body sends.
const INFLATE_CHUNK: u64 = 64 * 1024;

/// A held document inflated as the client reads it, [`INFLATE_CHUNK`] bytes a frame, so
/// a client without gzip costs one chunk of memory rather than a document's copy.
struct Inflating {
    decoder: flate2::read::GzDecoder<bytes::buf::Reader<Bytes>>,
    /// Uncompressed bytes not yet sent (the exact size hint: a `Content-Length`).
    remaining: u64,
}

impl Inflating {
    fn new(doc: &Served) -> Inflating {
        Inflating {
            decoder: flate2::read::GzDecoder::new(doc.gzip.clone().reader()),
            remaining: doc.len,
        }
    }
}

impl hyper::body::Body for Inflating {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let mut chunk = vec![0; this.remaining.min(INFLATE_CHUNK) as usize];
        match this.decoder.read_exact(&mut chunk) {
            Ok(()) => {
                this.remaining -= chunk.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(chunk)))))
            }
            Err(e) => {
                // Cannot happen for the bytes the build compressed; ending early makes
                // the connection fail on the short body rather than send garbage.
                tracing::error!(error = %e, "inflating an OpenAPI document failed");
                this.remaining = 0;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
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

/// `Vary: Accept` on a response that has no `Vary` yet ([`OpenApi::content`] sets its
/// own).
fn with_vary(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .entry(header::VARY)
        .or_insert(HeaderValue::from_static("Accept"));
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
