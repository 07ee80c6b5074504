//! What every Ferrokube binary shares with upstream's `k8s.io/component-base`: the
//! flags that each upstream component takes the same way, with the same names,
//! defaults and errors.
//!
//! * [`logs`]: `-v`, `--vmodule`, `--logging-format` (text or upstream's JSON
//!   records), `--log-flush-frequency`, and the subscriber they configure.
//! * [`featuregate`]: `--feature-gates` and the kubelet config's `featureGates`,
//!   resolved against Kubernetes v1.33's known gates as upstream resolves them.
//! * [`flags`]: [`ComponentFlags`], both of the above as one set of flags with one
//!   start-up step (check, install the logger, warn about gates nothing acts on), and
//!   the API clients' [`ClientContentTypeFlag`].
//! * [`metrics`]: counters, gauges and histograms, alone or in label-keyed families,
//!   in the Prometheus text format (upstream's `component-base/metrics`).
//! * [`ratelimit`]: the token bucket of client-go's `flowcontrol`, which both sides
//!   use (a client's qps and burst, an audit backend's batch throttle).
//! * [`version`]: the version every binary reports, and client-go's default
//!   `User-Agent` built from it.
//!
//! Layer: under the binaries in `cmd/`, which flatten its flags into theirs, and under
//! every crate that records metrics. It depends only on apimachinery (Go durations, quantities) and tokio (the bucket's clock) and must not depend on any
//! other ferrokube crate.

pub mod featuregate;
pub mod flags;
pub mod logs;
pub mod metrics;
pub mod ratelimit;
pub mod version;

pub use featuregate::FeatureGates;
pub use flags::{ClientContentTypeFlag, ComponentFlags};
