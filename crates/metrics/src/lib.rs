//! Ferrokube's metrics-server: the cluster add-on behind `kubectl top` and the
//! HorizontalPodAutoscaler's resource metrics, as upstream's
//! kubernetes-sigs/metrics-server. Every metric resolution it scrapes each node's
//! kubelet `/metrics/resource`, keeps the last two points of every node and container,
//! and serves the CPU rate between them and the last memory working set as
//! `metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics over HTTPS, registered with the
//! apiserver's aggregation layer by an APIService (deploy/addons/metrics-server.yaml).
//!
//! * [`decode`]: the Prometheus text page -> points (pure);
//! * [`storage`]: last/previous points, usage rates, quantity and duration strings (pure);
//! * [`api`]: the metrics.k8s.io types, discovery, get/list with selectors (pure);
//! * [`scraper`]: kubelet HTTPS client (address choice, credentials, timeouts);
//! * [`server`]: the HTTPS endpoint with upstream's delegated authentication
//!   (request-header front proxy, client certificates, TokenReview: the client crate's
//!   gate, with the CAs the apiserver publishes) and authorization
//!   (SubjectAccessReview), and the health checks;
//! * [`run`]: informers, the collection loop and the endpoint together.
//!
//! Layer: client side, a cluster add-on. It talks to the API only through kube-rs and
//! `ferrokube-client` (plus the pure `ferrokube-apimachinery` and `ferrokube-pki`
//! libraries); it must never depend on storage*, registry or apiserver.
//! `ferrokube-testing` is a dev-dependency only.

pub mod api;
pub mod decode;
pub mod run;
pub mod scraper;
pub mod server;
pub mod storage;
