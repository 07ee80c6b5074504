//! Ferrokube's client side: what controllers, the scheduler, the kubelet and the proxy
//! need on top of kube-rs, in the shape of client-go.
//!
//! * [`informer`]: shared informers. One list+watch per resource type (and namespace)
//!   per process, built on kube-runtime's `watcher` (relist on 410, streaming lists
//!   with `sendInitialEvents`), feeding an indexed cache ([`informer::Store`]: get by
//!   key, list by namespace, custom indexers) and any number of change streams /
//!   event handlers with add/update/delete (old and new), periodic resync and
//!   `has_synced`. [`informer::SharedInformerFactory`] hands every consumer the same one.
//! * [`workqueue`]: client-go's rate-limited work queue: deduplicating, one worker per
//!   key at a time, per-item exponential backoff plus an overall token bucket,
//!   delayed adds, graceful shutdown with drain, and upstream's workqueue metrics.
//! * [`leaderelection`]: leader election on `coordination.k8s.io/v1` Leases with
//!   upstream's algorithm, defaults and `--leader-elect*` flags.
//! * [`events`]: an `events.k8s.io/v1` recorder with upstream's series aggregation and
//!   bounded, rate-limited queueing.
//! * [`serving`]: the HTTPS `--secure-port` endpoint (health and metrics) of the
//!   scheduler and the controller manager, with a self-signed certificate by default;
//!   [`delegated`]: its authentication and authorization, delegated to the apiserver
//!   (TokenReview, SubjectAccessReview) as upstream's components do, with the client
//!   CAs its flags leave out read from the apiserver's ConfigMap
//!   ([`extension_authentication`]).
//! * [`process`]: a cancellation token for SIGTERM or Ctrl-C,
//!   shared by the client-side binaries.
//! * [`config`]: kubeconfig / in-cluster loading (`--kubeconfig`, `KUBECONFIG`) and
//!   client-side QPS/burst limiting as a tower layer (`--kube-api-qps`/`--kube-api-burst`).
//!
//! Layer: client side. Controllers, scheduler, kubelet and proxy sit on this crate;
//! it sits on kube-rs (`kube::Client`, `Api<K>`, kube-runtime) and k8s-openapi. It
//! must never depend on the server side (storage*, registry, admission, apiserver);
//! `ferrokube-testing` is a dev-dependency only, for tests against a real apiserver.

pub mod config;
pub mod delegated;
pub mod events;
pub mod extension_authentication;
pub mod informer;
pub mod leaderelection;
pub mod metrics;
pub mod process;
pub mod serving;
pub mod workqueue;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the apiserver failed.
    #[error("api: {0}")]
    Kube(#[from] kube::Error),
    /// Loading a kubeconfig or in-cluster configuration failed.
    #[error("config: {0}")]
    Config(String),
    /// An index name that was never registered.
    #[error("index {0:?} does not exist")]
    IndexNotFound(String),
    /// An indexer with this name is already registered.
    #[error("indexer {0:?} already exists")]
    IndexerConflict(String),
    /// Caches did not sync within the allowed time.
    #[error("timed out waiting for caches to sync: {0:?}")]
    CacheSyncTimeout(Vec<String>),
    /// Invalid leader election settings.
    #[error("leader election: {0}")]
    LeaderElectionConfig(String),
    /// This process held the lease and lost it; the component should exit.
    #[error("leader election lost: {0}")]
    LeaderElectionLost(String),
    /// An event was rejected before it reached the API.
    #[error("event: {0}")]
    InvalidEvent(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What client-go's `err.Error()` says of a failed request: the apiserver's `Status`
/// message alone for an API error (`pods "x" is forbidden: ...`), the transport's
/// error otherwise. Events and condition messages that quote a failed request use it,
/// as upstream's controllers quote `err`; kube-rs's own `Display` of an API error
/// appends the whole `Status` in Rust's debug notation, which users should not read.
pub fn error_message(error: &kube::Error) -> std::borrow::Cow<'_, str> {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => {
            std::borrow::Cow::Borrowed(&status.message)
        }
        other => std::borrow::Cow::Owned(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::error_message;

    #[test]
    fn an_api_error_reads_as_its_status_message() {
        let message = r#"pods "p" is forbidden: violates PodSecurity "restricted:latest""#;
        let error = kube::Error::Api(
            kube::core::Status::failure(message, "Forbidden")
                .with_code(403)
                .boxed(),
        );
        assert_eq!(error_message(&error), message);
        // kube-rs's own rendering carries the Status's debug form.
        assert!(error.to_string().contains("Status {"));
    }

    #[test]
    fn an_api_error_without_a_message_and_other_errors_read_as_kube_rs_renders_them() {
        let bare = kube::Error::Api(kube::core::Status::failure("", "InternalError").boxed());
        assert_eq!(error_message(&bare), bare.to_string());
        let other = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(error_message(&other), other.to_string());
    }
}
