//! client-go's `rest_client_*` metrics (upstream's
//! `component-base/metrics/prometheus/restclient`): every API request a component's
//! clients make, counted by status code, method and host, with its latency and its
//! request and response sizes by verb and host.
//!
//! As in client-go the metrics are process-wide: every client built through
//! [`crate::config::build_client`] records into one set, and each component's
//! `/metrics` writes it with [`write_rest_client_metrics`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Instant;

use ferrokube_component_base::metrics::{CounterVec, HistogramVec};
use hyper::body::Body;
use tower::{Layer, Service};

/// Upstream's latency buckets, 5 ms to a minute.
const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];
/// Upstream's size buckets, 64 bytes to 16 MiB.
const SIZE_BUCKETS: [f64; 11] = [
    64.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0,
];

/// The code client-go counts a request under when no response came back.
const NO_RESPONSE_CODE: &str = "<error>";

/// The families, their label names sorted as client_golang prints them.
pub struct RestClientMetrics {
    pub rate_limiter_duration: HistogramVec<2>,
    pub request_duration: HistogramVec<2>,
    pub request_size: HistogramVec<2>,
    pub response_size: HistogramVec<2>,
    pub requests: CounterVec<3>,
}

impl RestClientMetrics {
    fn new() -> Self {
        RestClientMetrics {
            rate_limiter_duration: HistogramVec::histogram(
                "rest_client_rate_limiter_duration_seconds",
                "Client side rate limiter latency in seconds. Broken down by verb, and host.",
                ["host", "verb"],
                &LATENCY_BUCKETS,
            ),
            request_duration: HistogramVec::histogram(
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host.",
                ["host", "verb"],
                &LATENCY_BUCKETS,
            ),
            request_size: HistogramVec::histogram(
                "rest_client_request_size_bytes",
                "Request size in bytes. Broken down by verb and host.",
                ["host", "verb"],
                &SIZE_BUCKETS,
            ),
            response_size: HistogramVec::histogram(
                "rest_client_response_size_bytes",
                "Response size in bytes. Broken down by verb and host.",
                ["host", "verb"],
                &SIZE_BUCKETS,
            ),
            requests: CounterVec::new(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                ["code", "host", "method"],
            ),
        }
    }

    pub fn render(&self, out: &mut String) {
        self.rate_limiter_duration.render(out);
        self.request_duration.render(out);
        self.request_size.render(out);
        self.requests.render(out);
        self.response_size.render(out);
    }
}

static REST_CLIENT: LazyLock<RestClientMetrics> = LazyLock::new(RestClientMetrics::new);

/// The process's client metrics.
pub fn rest_client_metrics() -> &'static RestClientMetrics {
    &REST_CLIENT
}

/// Appends the process's `rest_client_*` families to a `/metrics` page.
pub fn write_rest_client_metrics(out: &mut String) {
    REST_CLIENT.render(out);
}

/// How long a request waited for its client's rate limiter, put on the request by
/// [`crate::config::RateLimit`] so that its latency includes the wait, as client-go's.
#[derive(Clone, Copy, Debug)]
pub struct ThrottleWait(pub std::time::Duration);

/// A tower layer recording each request in [`rest_client_metrics`]. It sits outside
/// kube's stack, where a request's URI is still a path, so it is told the host.
#[derive(Clone, Debug)]
pub struct RequestMetricsLayer {
    host: Arc<str>,
}

impl RequestMetricsLayer {
    /// `host` as client-go labels it: the server URL's host and port.
    pub fn new(host: &str) -> Self {
        RequestMetricsLayer { host: host.into() }
    }

    pub fn for_config(config: &kube::Config) -> Self {
        Self::new(&host_label(config))
    }
}

/// The `host` label of a client's metrics: the server URL's host and port.
pub fn host_label(config: &kube::Config) -> String {
    config
        .cluster_url
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default()
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> RequestMetrics<S> {
        RequestMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RequestMetrics<S> {
    inner: S,
    host: Arc<str>,
}

/// Whether a request is a watch, whose latency client-go does not observe: its
/// response is a stream that lasts as long as the watch.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

impl<S, B, RB> Service<http::Request<B>> for RequestMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    B: Body,
    RB: Body,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let metrics = rest_client_metrics();
        let method = req.method().clone();
        let host = self.host.clone();
        let watch = is_watch(req.uri());
        // As client-go: the declared length, 0 when unknown.
        let request_size = req.body().size_hint().exact().unwrap_or(0);
        metrics
            .request_size
            .observe([&host, method.as_str()], request_size as f64);
        let throttled = req
            .extensions()
            .get::<ThrottleWait>()
            .map_or(std::time::Duration::ZERO, |w| w.0);
        let start = Instant::now();
        let response = self.inner.call(req);
        Box::pin(async move {
            let result = response.await;
            let verb = method.as_str();
            match &result {
                Ok(resp) => {
                    let code = resp.status().as_u16().to_string();
                    metrics.requests.inc([&code, &host, verb]);
                    let size = resp.body().size_hint().exact().unwrap_or(0);
                    metrics.response_size.observe([&host, verb], size as f64);
                }
                Err(_) => metrics.requests.inc([NO_RESPONSE_CODE, &host, verb]),
            }
            if !watch {
                metrics
                    .request_duration
                    .observe([&host, verb], (throttled + start.elapsed()).as_secs_f64());
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use tower::ServiceExt;

    #[test]
    fn watches_are_told_apart_by_their_query() {
        assert!(is_watch(
            &"/api/v1/pods?watch=true&resourceVersion=1".parse().unwrap()
        ));
        assert!(is_watch(&"/api/v1/pods?watch=1".parse().unwrap()));
        assert!(!is_watch(&"/api/v1/pods?watch=false".parse().unwrap()));
        assert!(!is_watch(
            &"/api/v1/pods?allowWatchBookmarks=true".parse().unwrap()
        ));
        assert!(!is_watch(&"/api/v1/pods".parse().unwrap()));
    }

    #[tokio::test]
    async fn each_request_is_counted_with_its_code_and_sizes() {
        // A host of its own: the metrics are process-wide and tests run in parallel.
        let host = "layer-test.invalid:6443";
        let inner = tower::service_fn(|req: http::Request<Full<hyper::body::Bytes>>| async move {
            let status = if req.method() == http::Method::POST {
                201
            } else {
                404
            };
            let body = Full::new(hyper::body::Bytes::from_static(&[b'x'; 300]));
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(status).body(body).unwrap(),
            )
        });
        let svc = RequestMetricsLayer::new(host).layer(inner);
        let post = http::Request::post("/api/v1/namespaces/a/pods")
            .body(Full::new(hyper::body::Bytes::from_static(&[b'y'; 100])))
            .unwrap();
        svc.clone().oneshot(post).await.unwrap();
        for _ in 0..2 {
            let get = http::Request::get("/api/v1/namespaces/a/pods/b")
                .body(Full::default())
                .unwrap();
            svc.clone().oneshot(get).await.unwrap();
        }
        let watch = http::Request::get("/api/v1/pods?watch=true")
            .body(Full::default())
            .unwrap();
        svc.clone().oneshot(watch).await.unwrap();

        let m = rest_client_metrics();
        assert_eq!(m.requests.value(["201", host, "POST"]), 1);
        assert_eq!(m.requests.value(["404", host, "GET"]), 3);
        let request_size = m.request_size.get([host, "POST"]).expect("POST size");
        assert_eq!((request_size.count(), request_size.sum()), (1, 100.0));
        let response_size = m.response_size.get([host, "GET"]).expect("GET size");
        assert_eq!((response_size.count(), response_size.sum()), (3, 900.0));
        // The watch is counted but its latency is not observed.
        let latency = m.request_duration.get([host, "GET"]).expect("GET latency");
        assert_eq!(latency.count(), 2);
        // A request that waited for its rate limiter counts the wait in its latency.
        let mut delete = http::Request::delete("/api/v1/namespaces/a/pods/b")
            .body(Full::default())
            .unwrap();
        delete
            .extensions_mut()
            .insert(ThrottleWait(std::time::Duration::from_secs(2)));
        svc.clone().oneshot(delete).await.unwrap();
        let latency = m
            .request_duration
            .get([host, "DELETE"])
            .expect("DELETE latency");
        assert!((2.0..3.0).contains(&latency.sum()), "{}", latency.sum());

        let mut page = String::new();
        write_rest_client_metrics(&mut page);
        assert!(page.contains("# TYPE rest_client_requests_total counter"));
        assert!(page.contains(&format!(
            "rest_client_requests_total{{code=\"201\",host=\"{host}\",method=\"POST\"}} 1"
        )));
        assert!(page.contains("# TYPE rest_client_request_duration_seconds histogram"));
    }

    #[tokio::test]
    async fn a_request_without_a_response_counts_as_error() {
        let host = "error-test.invalid:6443";
        let inner = tower::service_fn(|_: http::Request<Full<hyper::body::Bytes>>| async {
            Err::<http::Response<Full<hyper::body::Bytes>>, _>(std::io::Error::other("refused"))
        });
        let svc = RequestMetricsLayer::new(host).layer(inner);
        let get = http::Request::get("/version")
            .body(Full::default())
            .unwrap();
        assert!(svc.oneshot(get).await.is_err());
        assert_eq!(
            rest_client_metrics()
                .requests
                .value([NO_RESPONSE_CODE, host, "GET"]),
            1
        );
    }
}
