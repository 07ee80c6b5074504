//! Ferrokube's cluster DNS: the `kube-dns` addon, answering like CoreDNS's
//! kubernetes plugin (DNS-Based Service Discovery spec, schema 1.1.0).
//!
//! * [`model`]: the DNS view of a Service and an EndpointSlice (pure).
//! * [`index`]: [`index::DnsIndex`], updated per watch event, and `lookup(name,
//!   type) -> Answer` (pure, table-tested): A/AAAA for Services, headless
//!   endpoints and dashed pod names, SRV for ports, PTR, CNAME for ExternalName,
//!   SOA/NS for the zone, NXDOMAIN/NODATA inside it, SERVFAIL outside it (nothing is
//!   forwarded).
//! * [`server`]: the hickory-server request handler and the UDP/TCP listeners.
//! * [`run`]: informers (on [`ferrokube_client`]) feeding the index, plus
//!   `/health`, `/ready` and `/metrics`.
//! * [`stub`]: a one-question UDP/TCP stub for tests, benchmarks and probes.
//!
//! Layer: client side (a cluster add-on). It talks to the API only through kube-rs
//! and `ferrokube-client`, and must never depend on storage*, registry or apiserver
//! (`ferrokube-testing` is a dev-dependency for the integration test).

pub mod index;
pub mod model;
pub mod run;
pub mod server;
pub mod stub;

pub use index::{Answer, DnsConfig, DnsIndex};
