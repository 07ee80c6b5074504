//! kube-apiserver: parses upstream's flags, chooses the storage backend
//! (`--etcd-servers` set: etcd; else embedded SQLite under `--data-dir`), and runs
//! `ferrokube_apiserver` until SIGTERM/SIGINT.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ferrokube_apimachinery::duration::parse_go_duration;
use ferrokube_apiserver::{Options, Server};
use ferrokube_storage::Storage;

#[derive(Parser, Debug)]
#[command(
    name = "kube-apiserver",
    about = "The Kubernetes API server (Ferrokube)"
)]
struct Args {
    /// The port on which to serve HTTPS with authentication and authorization.
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// File containing the default x509 certificate for HTTPS.
    #[arg(long)]
    tls_cert_file: PathBuf,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long)]
    tls_private_key_file: PathBuf,
    /// A pair of x509 certificate and private key file paths, optionally suffixed
    /// with a list of domain patterns which are fully qualified domain names,
    /// possibly with prefixed wildcard segments. If no domain patterns are provided,
    /// the names of the certificate are extracted. Non-wildcard matches trump over
    /// wildcard matches, explicit domain patterns trump over extracted names. For
    /// multiple key/certificate pairs, use the --tls-sni-cert-key multiple times.
    /// Examples: "example.crt,example.key" or "foo.crt,foo.key:*.foo.com,foo.com".
    #[arg(long)]
    tls_sni_cert_key: Vec<ferrokube_pki::serving::NamedCertKey>,
    #[command(flatten)]
    tls: ferrokube_pki::tls_options::TlsFlags,
    /// Client certificates signed by this CA authenticate with their CommonName.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Static bearer tokens (CSV: token,user,uid,"group1,group2").
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Client certificate the apiserver presents to kubelets.
    #[arg(long)]
    kubelet_client_certificate: Option<PathBuf>,
    /// Key of --kubelet-client-certificate.
    #[arg(long)]
    kubelet_client_key: Option<PathBuf>,
    /// CA that kubelet serving certificates must chain to (unset: not verified).
    #[arg(long)]
    kubelet_certificate_authority: Option<PathBuf>,
    /// Requests without credentials are system:anonymous (authorized by RBAC like
    /// any other) instead of 401.
    /// [default: true]
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    anonymous_auth: Option<bool>,
    /// Admission plugins to enable beyond the default set.
    #[arg(long, value_delimiter = ',')]
    enable_admission_plugins: Vec<String>,
    /// Admission plugins to disable.
    #[arg(long, value_delimiter = ',')]
    disable_admission_plugins: Vec<String>,
    /// An AdmissionConfiguration file with the plugins' configurations (e.g.
    /// PodSecurity's defaults and exemptions).
    #[arg(long)]
    admission_control_config_file: Option<PathBuf>,
    /// Seconds of the not-ready:NoExecute toleration DefaultTolerationSeconds adds.
    #[arg(long, default_value_t = 300)]
    default_not_ready_toleration_seconds: i64,
    /// Seconds of the unreachable:NoExecute toleration DefaultTolerationSeconds adds.
    #[arg(long, default_value_t = 300)]
    default_unreachable_toleration_seconds: i64,
    /// Ordered list of authorizers after system:masters: AlwaysAllow, AlwaysDeny, Node,
    /// RBAC, Webhook. Ferrokube defaults to Node,RBAC (upstream: AlwaysAllow). Not
    /// with --authorization-config.
    #[arg(long)]
    authorization_mode: Option<String>,
    /// File with an AuthorizationConfiguration (apiserver.config.k8s.io/v1): the
    /// authorizer chain, with any number of webhooks, their match conditions and
    /// failure policies. Replaces --authorization-mode and --authorization-webhook-*.
    /// Read again when it changes.
    #[arg(long)]
    authorization_config: Option<PathBuf>,
    /// Identifier of the service account token issuer (`iss`); repeat to accept
    /// more (the first issues new tokens).
    #[arg(long)]
    service_account_issuer: Vec<String>,
    /// PEM public keys verifying service account tokens; repeatable.
    #[arg(long)]
    service_account_key_file: Vec<PathBuf>,
    /// PEM private key (ECDSA P-256, PKCS#8) signing service account tokens.
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// Upper bound of requested token lifetimes (Go duration, e.g. 24h).
    #[arg(long)]
    service_account_max_token_expiration: Option<String>,
    /// If true, validate ServiceAccount tokens exist in etcd as part of
    /// authentication (legacy secret-based tokens; bound tokens are always checked).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    service_account_lookup: bool,
    /// Turns on projected service account expiration extension during token
    /// generation, which helps safe transition from legacy token to bound service
    /// account token feature. If this flag is enabled, admission injected tokens would
    /// be extended up to 1 year to prevent unexpected failure during transition,
    /// ignoring value of service-account-max-token-expiration.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    service_account_extend_token_expiration: bool,
    /// Audiences of the API; tokens must name one (default: the issuers).
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// Comma-separated etcd endpoints; unset: the embedded SQLite store.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "")]
    etcd_prefix: String,
    /// SSL Certificate Authority file used to secure etcd communication (https://
    /// --etcd-servers).
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// SSL certification file used to secure etcd communication.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// SSL key file used to secure etcd communication.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// The file containing configuration for encryption providers to be used for
    /// storing secrets in etcd (aescbc, aesgcm, secretbox, identity, kms v2).
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// Determines if the file set by --encryption-provider-config should be
    /// automatically reloaded if the disk contents change. The KMS plugins then share
    /// one health check, kms-providers.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    encryption_provider_config_automatic_reload: bool,
    /// Directory of the embedded store (when --etcd-servers is unset).
    #[arg(long, default_value = "/var/lib/ferrokube/apiserver")]
    data_dir: PathBuf,
    /// CIDR from which Service cluster IPs are allocated.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: String,
    /// Port range reserved for NodePort Services.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,
    /// The IP address advertised to cluster members (the kubernetes Endpoints).
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// Path to the audit.k8s.io/v1 Policy deciding what is audited at which level.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// File audit events are written to as JSON lines; '-' is standard output.
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Days to keep rotated audit log files (0: no limit).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    /// Rotated audit log files to keep (0: no limit).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Size in megabytes at which the audit log is rotated (0: 100).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Format of the audit log: json (legacy is refused).
    #[arg(long, default_value = "json")]
    audit_log_format: String,
    /// Strategy for writing audit events. blocking: requests wait when the writer is
    /// behind, no event is lost; blocking-strict: as blocking, and a request whose
    /// first event cannot be written fails; batch: requests never wait, events are
    /// dropped when the buffer is full.
    #[arg(long, default_value = "blocking")]
    audit_log_mode: String,
    /// The size of the buffer to store events before batching and writing. Only used
    /// in batch mode.
    #[arg(long, default_value_t = 10000)]
    audit_log_batch_buffer_size: usize,
    /// The maximum size of a batch. Only used in batch mode.
    #[arg(long, default_value_t = 1)]
    audit_log_batch_max_size: usize,
    /// The amount of time to wait before force writing the batch that hadn't reached
    /// the max size. Only used in batch mode.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    audit_log_batch_max_wait: Duration,
    /// Whether batching throttling is enabled. Only used in batch mode.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    audit_log_batch_throttle_enable: bool,
    /// Maximum average number of batches per second. Only used in batch mode.
    #[arg(long, default_value_t = 0.0)]
    audit_log_batch_throttle_qps: f64,
    /// Maximum number of requests sent at the same moment if ThrottleQPS was not
    /// utilized before. Only used in batch mode.
    #[arg(long, default_value_t = 0)]
    audit_log_batch_throttle_burst: u32,
    /// Whether event and batch truncating is enabled.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    audit_log_truncate_enabled: bool,
    /// Maximum size of the batch sent to the underlying backend. Actual serialized size
    /// can be several hundreds of bytes greater. If a batch exceeds this limit, it is
    /// split into several batches of smaller size.
    #[arg(long, default_value_t = 10485760)]
    audit_log_truncate_max_batch_size: usize,
    /// Maximum size of the audit event sent to the underlying backend. If the size of
    /// an event is greater than this number, first request and response are removed,
    /// and if this doesn't reduce the size enough, event is discarded.
    #[arg(long, default_value_t = 102400)]
    audit_log_truncate_max_event_size: usize,
    /// If set, the rotated log files will be compressed using gzip.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    audit_log_compress: bool,
    /// API group and version used for serializing audit events written to log.
    #[arg(long, default_value = "audit.k8s.io/v1")]
    audit_log_version: String,
    /// Path to a kubeconfig formatted file that defines the audit webhook
    /// configuration.
    #[arg(long)]
    audit_webhook_config_file: Option<PathBuf>,
    /// Strategy for sending audit events. blocking: requests wait when the sender is
    /// behind, no event is lost; blocking-strict: as blocking, and a request whose
    /// first event cannot be sent fails; batch: requests never wait, events are
    /// dropped when the buffer is full.
    #[arg(long, default_value = "batch")]
    audit_webhook_mode: String,
    /// The size of the buffer to store events before batching and writing.
    #[arg(long, default_value_t = 10000)]
    audit_webhook_batch_buffer_size: usize,
    /// The maximum size of a batch.
    #[arg(long, default_value_t = 400)]
    audit_webhook_batch_max_size: usize,
    /// The amount of time to wait before force writing the batch that hadn't reached
    /// the max size.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    audit_webhook_batch_max_wait: Duration,
    /// The amount of time to wait before retrying the first failed request.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    audit_webhook_initial_backoff: Duration,
    /// API group and version used for serializing audit events written to webhook.
    #[arg(long, default_value = "audit.k8s.io/v1")]
    audit_webhook_version: String,
    /// Whether batching throttling is enabled. Only used in batch mode.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    audit_webhook_batch_throttle_enable: bool,
    /// Maximum average number of batches per second. Only used in batch mode.
    #[arg(long, default_value_t = 10.0)]
    audit_webhook_batch_throttle_qps: f64,
    /// Maximum number of requests sent at the same moment if ThrottleQPS was not
    /// utilized before. Only used in batch mode.
    #[arg(long, default_value_t = 15)]
    audit_webhook_batch_throttle_burst: u32,
    /// Whether event and batch truncating is enabled.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    audit_webhook_truncate_enabled: bool,
    /// Maximum size of the batch sent to the underlying backend. Actual serialized size
    /// can be several hundreds of bytes greater. If a batch exceeds this limit, it is
    /// split into several batches of smaller size.
    #[arg(long, default_value_t = 10485760)]
    audit_webhook_truncate_max_batch_size: usize,
    /// Maximum size of the audit event sent to the underlying backend. If the size of
    /// an event is greater than this number, first request and response are removed,
    /// and if this doesn't reduce the size enough, event is discarded.
    #[arg(long, default_value_t = 102400)]
    audit_webhook_truncate_max_event_size: usize,
    /// Root certificate bundle to use to verify client certificates on incoming
    /// requests before trusting usernames in headers specified by
    /// --requestheader-username-headers.
    #[arg(long)]
    requestheader_client_ca_file: Option<PathBuf>,
    /// List of client certificate common names to allow to provide usernames in
    /// headers specified by --requestheader-username-headers. If empty, any client
    /// certificate validated by the authorities in --requestheader-client-ca-file is
    /// allowed.
    #[arg(long, value_delimiter = ',')]
    requestheader_allowed_names: Vec<String>,
    /// List of request headers to inspect for usernames. X-Remote-User is common.
    #[arg(long, value_delimiter = ',')]
    requestheader_username_headers: Vec<String>,
    /// List of request headers to inspect for UIDs. X-Remote-Uid is suggested.
    #[arg(long, value_delimiter = ',')]
    requestheader_uid_headers: Vec<String>,
    /// List of request headers to inspect for groups. X-Remote-Group is suggested.
    #[arg(long, value_delimiter = ',')]
    requestheader_group_headers: Vec<String>,
    /// List of request header prefixes to inspect. X-Remote-Extra- is suggested.
    #[arg(long, value_delimiter = ',')]
    requestheader_extra_headers_prefix: Vec<String>,
    /// Client certificate used to prove the identity of the aggregator or
    /// kube-apiserver when it must call out during a request (proxying to extension
    /// apiservers).
    #[arg(long)]
    proxy_client_cert_file: Option<PathBuf>,
    /// Private key of --proxy-client-cert-file.
    #[arg(long)]
    proxy_client_key_file: Option<PathBuf>,
    /// Turns on aggregator routing requests to endpoints IP rather than cluster IP.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    enable_aggregator_routing: bool,
    /// If true, replace the max-in-flight handler with an enhanced one that queues and
    /// dispatches with priority and fairness.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    enable_priority_and_fairness: bool,
    /// This and --max-mutating-requests-inflight are summed to determine the server's
    /// total concurrency limit (with priority and fairness). Otherwise the maximum
    /// number of non-mutating requests in flight at a given time.
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: u32,
    /// With priority and fairness, summed with --max-requests-inflight into the total
    /// concurrency limit. Otherwise the maximum number of mutating requests in flight
    /// at a given time.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: u32,
    /// If true, allow privileged containers.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    allow_privileged: bool,
    /// Enable to allow secrets of type 'bootstrap.kubernetes.io/token' in the
    /// 'kube-system' namespace to be used for TLS bootstrapping authentication.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    enable_bootstrap_token_auth: bool,
    /// List of the preferred NodeAddressTypes to use for kubelet connections.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP"
    )]
    kubelet_preferred_address_types: Vec<String>,
    /// A set of key=value pairs that enable or disable built-in APIs: v1=true|false
    /// for the core API group, <group>/<version>=true|false for a group-version (e.g.
    /// apps/v1=true), <group>/<version>/<resource>=true|false for one resource,
    /// api/all=true|false for every version, api/ga, api/beta and api/alpha for the
    /// versions of that class. Ferrokube serves one GA version of each built-in group;
    /// asking for a version it does not serve stops the start.
    #[arg(long, default_value = "")]
    runtime_config: String,
    /// Amount of time to retain events (Go duration).
    #[arg(long, default_value = "1h0m0s")]
    event_ttl: String,
    /// How long a request that is not long-running (not a watch, exec, attach,
    /// port-forward, log stream or proxy) may take before it is answered 504 (Go
    /// duration; 0: no limit). A shorter `?timeout=` on the request wins.
    #[arg(long, default_value = "1m0s")]
    request_timeout: String,
    /// Seconds a watch without timeoutSeconds is kept open at least; it ends after a
    /// random time between this and twice this, to spread out the load of reconnects
    /// (0: never).
    #[arg(long, default_value_t = 1800)]
    min_request_timeout: u64,
    /// Time to delay the termination. During that time the server keeps serving
    /// requests normally, while /readyz fails and this apiserver has left the
    /// kubernetes Service's endpoints, so load balancers can stop sending it traffic.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    shutdown_delay_duration: Duration,
    /// If true, the HTTP server keeps listening until all requests in flight that are
    /// not long-running have drained; during that window new requests are answered 429
    /// with a Retry-After header and `Connection: close`.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    shutdown_send_retry_after: bool,
    /// The longest the apiserver waits for its watches to end during a graceful
    /// shutdown.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    shutdown_watch_termination_grace_period: Duration,
    /// Directives for the Strict-Transport-Security response header, comma-separated
    /// (e.g. 'max-age=31536000,includeSubDomains,preload'); unset: no header.
    #[arg(long, value_delimiter = ',')]
    strict_transport_security_directives: Vec<String>,
    /// The interval of compaction requests (Go duration). If 0, the apiserver never
    /// compacts the store's history (on either backend).
    #[arg(long, default_value = "5m0s", value_parser = parse_go_duration)]
    etcd_compaction_interval: Duration,
    /// If true, SO_REUSEPORT is used when binding the port, which allows more than one
    /// instance to bind on the same address and port.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    permit_port_sharing: bool,
    /// If true, SO_REUSEADDR is used when binding the port (Ferrokube always sets
    /// it, as Go's listeners do).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    permit_address_sharing: bool,
    /// The limit that the server gives to clients for the maximum number of streams in
    /// an HTTP/2 connection. Zero means upstream's default (100).
    #[arg(long, default_value_t = 0)]
    http2_max_streams_per_connection: u32,
    /// To prevent HTTP/2 clients from getting stuck on a single apiserver, randomly
    /// close a connection (GOAWAY). The client's other in-flight requests won't be
    /// affected, and the client will reconnect, likely landing on a different
    /// apiserver after going through the load balancer again. This argument sets the
    /// fraction of requests that will be sent a GOAWAY. Clusters with single
    /// apiservers, or which don't use a load balancer, should NOT enable this. Min is
    /// 0 (off), Max is .02 (1/50 requests); .001 (1/1000) is a recommended starting
    /// point.
    #[arg(long, default_value_t = 0.0)]
    goaway_chance: f64,
    /// List of allowed origins for CORS, comma separated: regular expressions that
    /// must pin the host's start ('^' or '//') and end ('$' or ':'), e.g.
    /// '//example\.com(:|$)'. Empty: CORS off.
    #[arg(long, value_delimiter = ',')]
    cors_allowed_origins: Vec<String>,
    /// Overrides the URI for the JSON Web Key Set in the discovery doc served at
    /// /.well-known/openid-configuration (https only).
    #[arg(long)]
    service_account_jwks_uri: Option<String>,
    /// The hostname to use when generating externalized URLs for this apiserver (the
    /// service account issuer's JWKS URI); unset: the advertise address.
    #[arg(long)]
    external_hostname: Option<String>,
    /// Timeout for kubelet operations. Upstream keeps the value (HTTPTimeout) but its
    /// kubelet transports never use it; so neither does Ferrokube: logs, exec and
    /// proxy requests to kubelets last as long as their client keeps them.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration)]
    kubelet_timeout: Duration,
    /// Upstream's time in which /livez passes while post-start hooks run. Ferrokube's
    /// start-up work is done before the port opens, so it has no effect.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    livez_grace_period: Duration,
    /// The timeout to use when checking the storage's health (/healthz, /livez), on
    /// either backend.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    etcd_healthcheck_timeout: Duration,
    /// The timeout to use when checking the storage's readiness (/readyz), on either
    /// backend.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    etcd_readycheck_timeout: Duration,
    /// The storage backend for persistence: only etcd3 (upstream's one value) is
    /// accepted; without --etcd-servers the embedded store serves it.
    #[arg(long, default_value = "")]
    storage_backend: String,
    /// The media type objects are stored with upstream. Ferrokube stores JSON
    /// whatever this says (the value is checked as upstream checks it).
    #[arg(long, default_value = "application/vnd.kubernetes.protobuf")]
    storage_media_type: String,
    /// Use an endpoint reconciler (master-count, lease, none): who keeps the
    /// kubernetes Service's endpoints. master-count is deprecated.
    #[arg(long, default_value = "lease")]
    endpoint_reconciler_type: String,
    /// The number of apiservers running in the cluster, for
    /// --endpoint-reconciler-type=master-count (deprecated; default 1).
    #[arg(long)]
    apiserver_count: Option<usize>,
    /// Enable the watch cache. Ferrokube serves every resource's lists and watches
    /// from its watch cache whatever this says; false only logs a warning.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    watch_cache: bool,
    /// Watch cache size settings for some resources, comma-separated:
    /// resource[.group]#size. Checked as upstream does; only 0 (no cache for that
    /// resource) means anything upstream, and Ferrokube keeps its cache (a warning).
    #[arg(long, value_delimiter = ',')]
    watch_cache_sizes: Vec<String>,
    /// Default watch cache size (upstream: 0 disables the cache of resources without
    /// a size of their own; Ferrokube keeps its cache, with a warning).
    #[arg(long, default_value_t = 100)]
    default_watch_cache_size: i64,
    /// Upstream serves Go's profiler under /debug/pprof when true (its default).
    /// Ferrokube has no such endpoint whatever the value: it behaves as
    /// --profiling=false (profile it with perf instead).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    profiling: bool,
    /// Upstream's lock-contention profiling with --profiling; no effect here (see
    /// --profiling).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    contention_profiling: bool,
    /// The URL of the OpenID issuer, only HTTPS scheme will be accepted. If set, it
    /// will be used to verify the OIDC JSON Web Token (JWT).
    #[arg(long, default_value = "")]
    oidc_issuer_url: String,
    /// The client ID for the OpenID Connect client, must be set if oidc-issuer-url is
    /// set.
    #[arg(long, default_value = "")]
    oidc_client_id: String,
    /// If set, the OpenID server's certificate will be verified by one of the
    /// authorities in the oidc-ca-file, otherwise the host's root CA set will be used.
    #[arg(long)]
    oidc_ca_file: Option<PathBuf>,
    /// File with an AuthenticationConfiguration (apiserver.config.k8s.io/v1beta1):
    /// JWT issuers with their audiences, claim validation rules and claim mappings
    /// (CEL allowed), and anonymous (enabled, and the paths it is limited to). Not with
    /// the --oidc-* flags, nor (when it sets anonymous) with --anonymous-auth. Read
    /// again when it changes (anonymous excepted).
    #[arg(long)]
    authentication_config: Option<PathBuf>,
    /// The OpenID claim to use as the user name. Note that claims other than the
    /// default ('sub') is not guaranteed to be unique and immutable. This flag is
    /// experimental, please see the authentication documentation for further details.
    #[arg(long, default_value = "sub")]
    oidc_username_claim: String,
    /// If provided, all usernames will be prefixed with this value. If not provided,
    /// username claims other than 'email' are prefixed by the issuer URL to avoid
    /// clashes. To skip any prefixing, provide the value '-'.
    #[arg(long, default_value = "")]
    oidc_username_prefix: String,
    /// If provided, the name of a custom OpenID Connect claim for specifying user
    /// groups. The claim value is expected to be a string or array of strings. This
    /// flag is experimental, please see the authentication documentation for further
    /// details.
    #[arg(long, default_value = "")]
    oidc_groups_claim: String,
    /// If provided, all groups will be prefixed with this value to prevent conflicts
    /// with other authentication strategies.
    #[arg(long, default_value = "")]
    oidc_groups_prefix: String,
    /// Comma-separated list of allowed JOSE asymmetric signing algorithms. JWTs with a
    /// supported 'alg' header values are: RS256, RS384, RS512, ES256, ES384, ES512,
    /// PS256, PS384, PS512. Values are defined by RFC 7518
    /// https://tools.ietf.org/html/rfc7518#section-3.1.
    #[arg(long, value_delimiter = ',', default_value = "RS256")]
    oidc_signing_algs: Vec<String>,
    /// A key=value pair that describes a required claim in the ID Token. If set, the
    /// claim is verified to be present in the ID Token with a matching value. Repeat
    /// this flag to specify multiple claims.
    #[arg(long)]
    oidc_required_claim: Vec<String>,
    /// File with webhook configuration for token authentication in kubeconfig format.
    /// The API server will query the remote service to determine authentication for
    /// bearer tokens.
    #[arg(long)]
    authentication_token_webhook_config_file: Option<PathBuf>,
    /// The duration to cache responses from the webhook token authenticator.
    #[arg(long, default_value = "2m0s", value_parser = parse_go_duration)]
    authentication_token_webhook_cache_ttl: Duration,
    /// The API version of the authentication.k8s.io TokenReview to send to and expect
    /// from the webhook.
    #[arg(long, default_value = "v1beta1", value_parser = |s: &str| ferrokube_apiserver::ReviewVersion::parse("authentication", s))]
    authentication_token_webhook_version: ferrokube_apiserver::ReviewVersion,
    /// File with webhook configuration in kubeconfig format, used with
    /// --authorization-mode=Webhook. The API server will query the remote service to
    /// determine access on the API server's secure port.
    #[arg(long)]
    authorization_webhook_config_file: Option<PathBuf>,
    /// The API version of the authorization.k8s.io SubjectAccessReview to send to and
    /// expect from the webhook.
    #[arg(long, default_value = "v1beta1", value_parser = |s: &str| ferrokube_apiserver::ReviewVersion::parse("authorization", s))]
    authorization_webhook_version: ferrokube_apiserver::ReviewVersion,
    /// The duration to cache 'authorized' responses from the webhook authorizer.
    #[arg(long, default_value = "5m0s", value_parser = parse_go_duration)]
    authorization_webhook_cache_authorized_ttl: Duration,
    /// The duration to cache 'unauthorized' responses from the webhook authorizer.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    authorization_webhook_cache_unauthorized_ttl: Duration,
    #[command(flatten)]
    component: ferrokube_component_base::ComponentFlags,
}

/// `--authorization-mode` (Ferrokube's default Node,RBAC), which
/// `--authorization-config` replaces.
fn authorization_modes(
    mode_flag: Option<&str>,
    config_flag: Option<&Path>,
) -> anyhow::Result<Vec<ferrokube_apiserver::AuthorizationMode>> {
    if config_flag.is_some() && mode_flag.is_some() {
        anyhow::bail!(
            "--authorization-mode cannot be used with --authorization-config: the file lists the authorizers"
        );
    }
    ferrokube_apiserver::AuthorizationMode::parse_list(mode_flag.unwrap_or("Node,RBAC"))
        .map_err(|e| anyhow::anyhow!("--authorization-mode: {e}"))
}

/// Upstream's NodeAddressTypes.
const NODE_ADDRESS_TYPES: [&str; 5] = [
    "Hostname",
    "InternalIP",
    "ExternalIP",
    "InternalDNS",
    "ExternalDNS",
];

/// Checks `--watch-cache`, `--watch-cache-sizes` and `--default-watch-cache-size` as
/// upstream parses them; what they would turn off is a warning, since every list and
/// watch here is served from the cache.
fn watch_cache_warnings(
    watch_cache: bool,
    default_size: i64,
    sizes: &[String],
) -> anyhow::Result<Vec<String>> {
    let mut warnings = Vec::new();
    for setting in sizes {
        let Some((resource, size)) = setting.split_once('#').filter(|(_, s)| !s.contains('#'))
        else {
            anyhow::bail!("invalid value of watch cache size: {setting}");
        };
        let size: i64 = size
            .parse()
            .map_err(|_| anyhow::anyhow!("invalid size of watch cache size: {setting}"))?;
        if size < 0 {
            anyhow::bail!("watch cache size cannot be negative: {setting}");
        }
        if size == 0 {
            warnings.push(format!(
                "--watch-cache-sizes: {resource} is served from the watch cache all the same"
            ));
        }
    }
    if !watch_cache {
        warnings.push(
            "--watch-cache=false: every resource is served from the watch cache all the same"
                .into(),
        );
    } else if default_size == 0 {
        warnings.push("--default-watch-cache-size=0: every resource is served from the watch cache all the same".into());
    }
    Ok(warnings)
}

/// A Go duration flag's value (`1h0m0s`, `90m`, `500ms`).
fn go_duration(s: &str) -> Option<Duration> {
    ferrokube_apimachinery::duration::parse_go_duration(s).ok()
}

// jemalloc instead of glibc's malloc: with glibc, malloc and free took 17-23 % of the
// apiserver's CPU on the create path; jemalloc's per-thread caches raise pod creates by
// 9-35 % (docs/benchmarks.md, session 8) for 1-2 MiB more idle RSS.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's `malloc_conf`, read at its first allocation (before `main`, too early for
/// any setting made at run time). Two arenas for two cores; a background thread gives
/// freed pages back within about a second (dirty pages decay over 1 s, then are
/// returned at once), so the idle RSS follows the live heap as `malloc_trim` made it do
/// with glibc.
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);
// SAFETY: the pointer is to a 'static, immutable, NUL-terminated string, which any
// thread may read.
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}
// SAFETY: tikv-jemalloc-sys's jemalloc declares `extern const char *_rjem_malloc_conf`
// and only reads it; `MallocConf` is exactly one `const char *` to a C string.
#[allow(unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr());

/// A backend's `--audit-<plugin>-mode` and `-batch-*` flags, `batch` holding all but
/// the mode; checked as upstream checks them when the backend is `on`.
fn audit_batch_options(
    plugin: &str,
    on: bool,
    mode: &str,
    batch: ferrokube_apiserver::AuditBatchOptions,
) -> anyhow::Result<ferrokube_apiserver::AuditBatchOptions> {
    let batch = ferrokube_apiserver::AuditBatchOptions {
        mode: ferrokube_apiserver::AuditMode::parse_flag(&format!("--audit-{plugin}-mode"), mode)
            .map_err(anyhow::Error::msg)?,
        ..batch
    };
    if on {
        batch.validate(plugin).map_err(anyhow::Error::msg)?;
    }
    Ok(batch)
}

/// A backend's `--audit-<plugin>-truncate-*` flags: None when not enabled; the sizes
/// are checked, as upstream checks them, whenever the backend is `on`.
fn audit_truncate_options(
    plugin: &str,
    on: bool,
    enabled: bool,
    sizes: ferrokube_apiserver::AuditTruncate,
) -> anyhow::Result<Option<ferrokube_apiserver::AuditTruncate>> {
    if on {
        sizes.validate(plugin).map_err(anyhow::Error::msg)?;
    }
    Ok(enabled.then_some(sizes))
}

/// TLS towards etcd from `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`.
/// https:// servers need the CA (no system roots are consulted); a client
/// certificate comes with its key.
fn etcd_tls(args: &Args) -> anyhow::Result<Option<ferrokube_storage_etcd::EtcdTls>> {
    let https = args.etcd_servers.iter().any(|s| s.starts_with("https://"));
    let read = |path: &PathBuf, what: &str| {
        std::fs::read_to_string(path).with_context(|| format!("reading {what} {}", path.display()))
    };
    let client = match (&args.etcd_certfile, &args.etcd_keyfile) {
        (Some(cert), Some(key)) => {
            Some((read(cert, "--etcd-certfile")?, read(key, "--etcd-keyfile")?))
        }
        (None, None) => None,
        _ => anyhow::bail!("--etcd-certfile and --etcd-keyfile must be given together"),
    };
    match (&args.etcd_cafile, https) {
        (Some(ca), true) => Ok(Some(ferrokube_storage_etcd::EtcdTls {
            ca_pem: read(ca, "--etcd-cafile")?,
            client,
        })),
        (None, true) => anyhow::bail!("https:// --etcd-servers need --etcd-cafile"),
        (Some(_), false) => {
            anyhow::bail!("--etcd-cafile is set but no --etcd-servers URL is https://")
        }
        (None, false) if client.is_some() => {
            anyhow::bail!("--etcd-certfile is set but no --etcd-servers URL is https://")
        }
        (None, false) => Ok(None),
    }
}

/// The `--oidc-*` flags but the CA file; the apiserver checks them at start.
fn oidc_config(args: &Args) -> anyhow::Result<ferrokube_apiserver::OidcConfig> {
    let mut required_claims = std::collections::BTreeMap::new();
    for pair in &args.oidc_required_claim {
        // Upstream's MapStringStringNoSplit: one pair per flag, split at the first '='.
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            anyhow::anyhow!("--oidc-required-claim {pair:?}: malformed pair, expect string=string")
        })?;
        required_claims.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(ferrokube_apiserver::OidcConfig {
        issuer_url: args.oidc_issuer_url.clone(),
        client_id: args.oidc_client_id.clone(),
        username_claim: args.oidc_username_claim.clone(),
        username_prefix: args.oidc_username_prefix.clone(),
        groups_claim: args.oidc_groups_claim.clone(),
        groups_prefix: args.oidc_groups_prefix.clone(),
        required_claims,
        signing_algs: args.oidc_signing_algs.clone(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let oidc = oidc_config(&args)?;
    // Checked before any store opens.
    if !matches!(args.storage_backend.as_str(), "" | "etcd3") {
        anyhow::bail!(
            "--storage-backend invalid, allowed values: etcd3. If not specified, it will default to 'etcd3'"
        );
    }
    if !matches!(
        args.storage_media_type.as_str(),
        "application/json" | "application/yaml" | "application/vnd.kubernetes.protobuf"
    ) {
        anyhow::bail!(
            "--storage-media-type {:?} invalid, allowed values: application/json, application/vnd.kubernetes.protobuf, application/yaml",
            args.storage_media_type
        );
    }
    // Upstream's check, NaN included.
    if !(0.0..=0.02).contains(&args.goaway_chance) {
        anyhow::bail!("--goaway-chance can not be less than 0 or greater than 0.02");
    }
    let feature_gates = args
        .component
        .init(&Default::default(), ferrokube_apiserver::features::ACTED_ON)
        .map_err(anyhow::Error::msg)?;
    let features = ferrokube_apiserver::features::Features::from_gates(&feature_gates)
        .map_err(anyhow::Error::msg)?;
    for warning in watch_cache_warnings(
        args.watch_cache,
        args.default_watch_cache_size,
        &args.watch_cache_sizes,
    )? {
        tracing::warn!("{warning}");
    }
    check_encryption_flags(&args)?;
    // Read before any store opens: a bad file stops the start at once. The file is
    // read once: with reload, the follower compares changes with this very text.
    let mut encryption_text = None;
    // Upstream derives its ID from the host only with APIServerIdentity; else none.
    let apiserver_id = if features.apiserver_identity {
        ferrokube_apiserver::new_apiserver_id()
    } else {
        String::new()
    };
    // Shown whether or not encryption is configured: upstream registers these always.
    let encryption_metrics = Arc::new(ferrokube_storage_encryption::EncryptionMetrics::new(
        &apiserver_id,
    ));
    let encryption = match &args.encryption_provider_config {
        Some(path) => {
            let data = std::fs::read(path).with_context(|| {
                format!("--encryption-provider-config: reading {}", path.display())
            })?;
            let encryption = ferrokube_storage_encryption::Encryption::from_file_content(
                path,
                &data,
                encryption_metrics.clone(),
            )
            .map_err(|e| anyhow::anyhow!("--encryption-provider-config: {e}"))?;
            if args.encryption_provider_config_automatic_reload {
                // UTF-8: the configuration decoded.
                encryption_text = Some(String::from_utf8_lossy(&data).into_owned());
            }
            Some(encryption)
        }
        None => None,
    };
    let storage: Arc<dyn Storage> = if args.etcd_servers.is_empty() {
        let path = args.data_dir.join("state.db");
        Arc::new(
            ferrokube_storage_sqlite::SqliteStorage::open(&path, Default::default())
                .with_context(|| format!("opening {}", path.display()))?,
        )
    } else {
        let opts = ferrokube_storage_etcd::EtcdOptions {
            prefix: args.etcd_prefix.clone(),
            tls: etcd_tls(&args)?,
            ..Default::default()
        };
        Arc::new(
            ferrokube_storage_etcd::EtcdStorage::connect(&args.etcd_servers, opts)
                .await
                .context("connecting to etcd")?,
        )
    };
    let mut encryption_in_use = None;
    let storage: Arc<dyn Storage> = match encryption {
        Some(encryption) => {
            for warning in encryption.warnings() {
                tracing::warn!("--encryption-provider-config: {warning}");
            }
            // KMS v2 plugins are asked for a seed before the first request, as upstream
            // primes them; one that does not answer is retried in the background.
            encryption.start_kms(Default::default()).await;
            // AES-GCM authenticates the full etcd key, --etcd-prefix included.
            let prefix = if args.etcd_servers.is_empty() {
                ""
            } else {
                args.etcd_prefix.as_str()
            };
            let encrypted =
                ferrokube_storage_encryption::EncryptedStorage::new(storage, encryption, prefix);
            encryption_in_use = Some(encrypted.in_use());
            Arc::new(encrypted)
        }
        None => storage,
    };
    let mut opts = Options::new(args.tls_cert_file, args.tls_private_key_file);
    opts.apiserver_id = apiserver_id;
    opts.features = features;
    opts.metrics_collectors.push(encryption_metrics);
    if let Some(in_use) = encryption_in_use {
        // Upstream serves kms-providers when KMS is configured, and always with reload.
        if encryption_text.is_some() || in_use.current().kms_health().is_some() {
            opts.health_checks
                .push(Arc::new(KmsProvidersCheck(in_use.clone())));
        }
        if let (Some(text), Some(path)) = (encryption_text, &args.encryption_provider_config) {
            opts.encryption_config_reload = Some(ferrokube_apiserver::FollowedConfig {
                path: path.clone(),
                text,
                apply: Arc::new(ReloadEncryption(in_use)),
            });
        }
    }
    opts.tls = args.tls.options_logged()?;
    opts.bind_address = args.bind_address;
    opts.secure_port = args.secure_port;
    opts.client_ca_file = args.client_ca_file;
    opts.token_auth_file = args.token_auth_file;
    opts.anonymous_auth = args.anonymous_auth;
    opts.admission_plugins = ferrokube_apiserver::AdmissionPlugins::default()
        .with_flags(
            &args.enable_admission_plugins,
            &args.disable_admission_plugins,
        )
        .map_err(|e| anyhow::anyhow!("--enable-admission-plugins: {e}"))?;
    if let Some(file) = &args.admission_control_config_file {
        opts.admission_plugins
            .read_config_file(file)
            .map_err(|e| anyhow::anyhow!("--admission-control-config-file: {e}"))?;
    }
    opts.admission_plugins.default_not_ready_toleration_seconds =
        args.default_not_ready_toleration_seconds;
    opts.admission_plugins
        .default_unreachable_toleration_seconds = args.default_unreachable_toleration_seconds;
    opts.kubelet_client_certificate = args.kubelet_client_certificate;
    opts.kubelet_client_key = args.kubelet_client_key;
    opts.kubelet_certificate_authority = args.kubelet_certificate_authority;
    opts.tls_sni_cert_keys = args.tls_sni_cert_key;
    opts.authorization_modes = authorization_modes(
        args.authorization_mode.as_deref(),
        args.authorization_config.as_deref(),
    )?;
    opts.authorization_config_file = args.authorization_config;
    opts.service_account_issuers = args.service_account_issuer;
    opts.service_account_lookup = args.service_account_lookup;
    opts.service_account_extend_token_expiration = args.service_account_extend_token_expiration;
    opts.service_account_key_files = args.service_account_key_file;
    opts.service_account_signing_key_file = args.service_account_signing_key_file;
    opts.api_audiences = args.api_audiences;
    opts.service_account_max_token_expiration = match &args.service_account_max_token_expiration {
        Some(d) => Some(
            go_duration(d)
                .and_then(|d| i64::try_from(d.as_secs()).ok())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--service-account-max-token-expiration: invalid duration {d:?}"
                    )
                })?,
        ),
        None => None,
    };
    opts.service_cluster_ip_range = args.service_cluster_ip_range;
    opts.service_node_port_range = args.service_node_port_range;
    opts.advertise_address = args.advertise_address;
    opts.audit_policy_file = args.audit_policy_file;
    // As upstream, a backend's flags are checked only when the backend is on.
    let audit_log_on = args.audit_log_path.is_some();
    if audit_log_on {
        ferrokube_apiserver::check_audit_log_format(&args.audit_log_format)
            .map_err(anyhow::Error::msg)?;
    }
    opts.audit_log = ferrokube_apiserver::AuditLogOptions {
        path: args.audit_log_path,
        max_age_days: args.audit_log_maxage,
        max_backups: args.audit_log_maxbackup,
        max_size_mb: args.audit_log_maxsize,
        compress: args.audit_log_compress,
        batch: audit_batch_options(
            "log",
            audit_log_on,
            &args.audit_log_mode,
            ferrokube_apiserver::AuditBatchOptions {
                mode: ferrokube_apiserver::AuditMode::Blocking,
                buffer_size: args.audit_log_batch_buffer_size,
                max_batch_size: args.audit_log_batch_max_size,
                max_batch_wait: args.audit_log_batch_max_wait,
                throttle: args.audit_log_batch_throttle_enable.then_some(
                    ferrokube_apiserver::AuditThrottle {
                        qps: args.audit_log_batch_throttle_qps,
                        burst: args.audit_log_batch_throttle_burst,
                    },
                ),
            },
        )?,
        truncate: audit_truncate_options(
            "log",
            audit_log_on,
            args.audit_log_truncate_enabled,
            ferrokube_apiserver::AuditTruncate {
                max_batch_size: args.audit_log_truncate_max_batch_size,
                max_event_size: args.audit_log_truncate_max_event_size,
            },
        )?,
    };
    let audit_webhook_on = args.audit_webhook_config_file.is_some();
    opts.audit_webhook = ferrokube_apiserver::AuditWebhookOptions {
        config_file: args.audit_webhook_config_file,
        initial_backoff: args.audit_webhook_initial_backoff,
        batch: audit_batch_options(
            "webhook",
            audit_webhook_on,
            &args.audit_webhook_mode,
            ferrokube_apiserver::AuditBatchOptions {
                mode: ferrokube_apiserver::AuditMode::Batch,
                buffer_size: args.audit_webhook_batch_buffer_size,
                max_batch_size: args.audit_webhook_batch_max_size,
                max_batch_wait: args.audit_webhook_batch_max_wait,
                throttle: args.audit_webhook_batch_throttle_enable.then_some(
                    ferrokube_apiserver::AuditThrottle {
                        qps: args.audit_webhook_batch_throttle_qps,
                        burst: args.audit_webhook_batch_throttle_burst,
                    },
                ),
            },
        )?,
        truncate: audit_truncate_options(
            "webhook",
            audit_webhook_on,
            args.audit_webhook_truncate_enabled,
            ferrokube_apiserver::AuditTruncate {
                max_batch_size: args.audit_webhook_truncate_max_batch_size,
                max_event_size: args.audit_webhook_truncate_max_event_size,
            },
        )?,
    };
    for (on, flag, version) in [
        (audit_log_on, "--audit-log-version", &args.audit_log_version),
        (
            audit_webhook_on,
            "--audit-webhook-version",
            &args.audit_webhook_version,
        ),
    ] {
        if on && version != "audit.k8s.io/v1" {
            anyhow::bail!("{flag}: {version:?} is not supported; supported: audit.k8s.io/v1");
        }
    }
    opts.requestheader_client_ca_file = args.requestheader_client_ca_file;
    opts.requestheader_allowed_names = args.requestheader_allowed_names;
    opts.requestheader_username_headers = args.requestheader_username_headers;
    opts.requestheader_uid_headers = args.requestheader_uid_headers;
    opts.requestheader_group_headers = args.requestheader_group_headers;
    opts.requestheader_extra_headers_prefix = args.requestheader_extra_headers_prefix;
    opts.proxy_client_cert_file = args.proxy_client_cert_file;
    opts.proxy_client_key_file = args.proxy_client_key_file;
    opts.enable_aggregator_routing = args.enable_aggregator_routing;
    opts.enable_priority_and_fairness = args.enable_priority_and_fairness;
    if args.max_requests_inflight == 0
        && args.max_mutating_requests_inflight == 0
        && args.enable_priority_and_fairness
    {
        anyhow::bail!(
            "--max-requests-inflight and --max-mutating-requests-inflight may not both be 0 with priority and fairness"
        );
    }
    opts.max_requests_inflight = args.max_requests_inflight;
    opts.max_mutating_requests_inflight = args.max_mutating_requests_inflight;
    opts.allow_privileged = args.allow_privileged;
    opts.enable_bootstrap_token_auth = args.enable_bootstrap_token_auth;
    if let Some(bad) = args
        .kubelet_preferred_address_types
        .iter()
        .find(|t| !NODE_ADDRESS_TYPES.contains(&t.as_str()))
    {
        anyhow::bail!(
            "--kubelet-preferred-address-types: unsupported address type {bad:?}, must be one of {}",
            NODE_ADDRESS_TYPES.join(", ")
        );
    }
    opts.kubelet_preferred_address_types = args.kubelet_preferred_address_types;
    let (api_enablement, warnings) =
        ferrokube_apiserver::ApiEnablement::parse(&args.runtime_config)
            .map_err(|e| anyhow::anyhow!("--runtime-config: {e}"))?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    opts.api_enablement = api_enablement;
    opts.request_timeout = go_duration(&args.request_timeout).ok_or_else(|| {
        anyhow::anyhow!(
            "--request-timeout: invalid duration {:?}",
            args.request_timeout
        )
    })?;
    opts.min_request_timeout = Duration::from_secs(args.min_request_timeout);
    opts.shutdown = ferrokube_apiserver::ShutdownOptions {
        delay: args.shutdown_delay_duration,
        send_retry_after: args.shutdown_send_retry_after,
        watch_termination_grace_period: args.shutdown_watch_termination_grace_period,
    };
    opts.strict_transport_security_directives = args.strict_transport_security_directives;
    opts.compaction_interval = args.etcd_compaction_interval;
    opts.permit_port_sharing = args.permit_port_sharing;
    opts.http2_max_streams_per_connection = args.http2_max_streams_per_connection;
    opts.goaway_chance = args.goaway_chance;
    opts.cors_allowed_origins = args.cors_allowed_origins;
    opts.storage_check_timeouts = ferrokube_apiserver::StorageCheckTimeouts {
        health: args.etcd_healthcheck_timeout,
        ready: args.etcd_readycheck_timeout,
    };
    opts.service_account_jwks_uri = args.service_account_jwks_uri;
    opts.external_hostname = args.external_hostname;
    // Accepted for upstream's units; their behaviour is fixed here (docs/install.md).
    tracing::debug!(
        livez_grace_period = ?args.livez_grace_period,
        permit_address_sharing = args.permit_address_sharing,
        profiling = args.profiling,
        contention_profiling = args.contention_profiling,
        kubelet_timeout = ?args.kubelet_timeout,
        "flags without effect: start-up work ends before the port opens, SO_REUSEADDR is always set, no /debug/pprof, and upstream's kubelet client uses no timeout either"
    );
    if args.apiserver_count.is_some() {
        tracing::warn!(
            "Flag --apiserver-count has been deprecated, apiserver-count is deprecated and will be removed in a future version."
        );
    }
    opts.endpoint_reconciler = ferrokube_apiserver::EndpointReconciler::parse(
        &args.endpoint_reconciler_type,
        args.apiserver_count.unwrap_or(1),
    )
    .map_err(|e| anyhow::anyhow!("--endpoint-reconciler-type: {e}"))?;
    opts.event_ttl = go_duration(&args.event_ttl)
        .ok_or_else(|| anyhow::anyhow!("--event-ttl: invalid duration {:?}", args.event_ttl))?;
    opts.oidc = oidc;
    opts.oidc_ca_file = args.oidc_ca_file;
    opts.authentication_config_file = args.authentication_config;
    opts.authentication_token_webhook_config_file = args.authentication_token_webhook_config_file;
    opts.authentication_token_webhook_cache_ttl = args.authentication_token_webhook_cache_ttl;
    opts.authentication_token_webhook_version = args.authentication_token_webhook_version;
    opts.authorization_webhook = ferrokube_apiserver::AuthorizationWebhookOptions {
        config_file: args.authorization_webhook_config_file,
        version: args.authorization_webhook_version,
        authorized_ttl: args.authorization_webhook_cache_authorized_ttl,
        unauthorized_ttl: args.authorization_webhook_cache_unauthorized_ttl,
    };
    let shutdown_timeout = opts.request_timeout;
    let config = opts.into_config(storage).await?;
    let server = Server::start(config).await?;
    tracing::info!(addr = %server.local_addr(), "serving");
    // Rust's heap is jemalloc's, which returns freed pages itself (see MALLOC_CONF); the
    // embedded SQLite still allocates from glibc (e.g. its page caches), which keeps
    // freed heap in its arenas. Hand that back 2 s after start, then
    // every 30 s, so the resident size follows what is live.
    let heap = ferrokube_heap::HeapTrimmer::new(Duration::from_secs(30), Duration::from_secs(2));
    heap.request();
    tokio::spawn(async move { heap.run().await });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    // Upstream's ShutdownTimeout: requests in flight get as long as any request may take.
    server.shutdown(shutdown_timeout).await;
    Ok(())
}

/// Upstream's check of the encryption at rest flags.
fn check_encryption_flags(args: &Args) -> anyhow::Result<()> {
    if args.encryption_provider_config_automatic_reload && args.encryption_provider_config.is_none()
    {
        anyhow::bail!(
            "--encryption-provider-config-automatic-reload must be set with --encryption-provider-config"
        );
    }
    Ok(())
}

/// Encryption at rest's `kms-providers` check on `/healthz` and `/readyz`, of the
/// configuration in use (which only automatic reload replaces).
#[derive(Debug)]
struct KmsProvidersCheck(ferrokube_storage_encryption::EncryptionInUse);

#[async_trait::async_trait]
impl ferrokube_apiserver::HealthCheck for KmsProvidersCheck {
    fn name(&self) -> &str {
        ferrokube_storage_encryption::KMS_HEALTH_CHECK
    }

    async fn check(&self) -> Result<(), String> {
        self.0.check_kms().await
    }
}

/// `--encryption-provider-config-automatic-reload`: a changed file replaces the
/// configuration in use once it loads and its KMS plugins are healthy.
struct ReloadEncryption(ferrokube_storage_encryption::EncryptionInUse);

#[async_trait::async_trait]
impl ferrokube_apiserver::ApplyConfig for ReloadEncryption {
    async fn apply(&self, text: String) -> Result<(), String> {
        self.0.replace(&text, Default::default()).await
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Args, audit_batch_options, audit_truncate_options, check_encryption_flags, go_duration,
        watch_cache_warnings,
    };
    use clap::Parser as _;
    use std::time::Duration;

    #[test]
    fn component_base_flags_as_a_hardened_unit_passes_them() {
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--service-account-lookup=true",
            "--feature-gates=InPlacePodVerticalScaling=true,SidecarContainers=true",
            "--logging-format=json",
            "--log-flush-frequency=10s",
        ])
        .unwrap();
        assert!(args.service_account_lookup);
        assert_eq!(args.component.logging.logging_format, "json");
        assert_eq!(args.component.feature_gates.len(), 1);
        // A gate upstream does not know, or a locked one changed, stops the start.
        for gates in ["NoSuchGate=true", "SidecarContainers=false"] {
            let err = Args::try_parse_from([
                "kube-apiserver",
                "--tls-cert-file=c",
                "--tls-private-key-file=k",
                &format!("--feature-gates={gates}"),
            ])
            .unwrap_err()
            .to_string();
            assert!(err.contains("feature gate"), "{err}");
        }
    }

    #[test]
    fn the_authorization_config_replaces_the_mode_flag() {
        use ferrokube_apiserver::AuthorizationMode;
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "kube-apiserver",
                "--tls-cert-file=c",
                "--tls-private-key-file=k",
            ];
            argv.extend_from_slice(extra);
            let args = Args::try_parse_from(argv).unwrap();
            super::authorization_modes(
                args.authorization_mode.as_deref(),
                args.authorization_config.as_deref(),
            )
        };
        assert_eq!(
            parse(&[]).unwrap(),
            [AuthorizationMode::Node, AuthorizationMode::Rbac]
        );
        assert_eq!(
            parse(&["--authorization-mode=RBAC"]).unwrap(),
            [AuthorizationMode::Rbac]
        );
        assert!(parse(&["--authorization-config=/etc/authz.yaml"]).is_ok());
        let e = parse(&[
            "--authorization-config=/etc/authz.yaml",
            "--authorization-mode=RBAC",
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot be used with --authorization-config"),
            "{e}"
        );
    }

    #[test]
    fn audit_log_flags_with_upstreams_defaults_and_checks() {
        let base = [
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
        ];
        let d = Args::try_parse_from(base).unwrap();
        assert_eq!(d.audit_log_mode, "blocking");
        assert_eq!(
            (d.audit_log_batch_buffer_size, d.audit_log_batch_max_size),
            (10000, 1)
        );
        assert_eq!(d.audit_log_batch_max_wait, Duration::ZERO);
        assert!(!d.audit_log_batch_throttle_enable);
        assert!(!d.audit_log_truncate_enabled && !d.audit_log_compress);
        assert_eq!(d.audit_log_version, "audit.k8s.io/v1");

        let set = Args::try_parse_from(base.into_iter().chain([
            "--audit-log-path=/var/log/audit.log",
            "--audit-log-mode=batch",
            "--audit-log-batch-max-size=100",
            "--audit-log-batch-max-wait=2s",
            "--audit-log-batch-throttle-enable",
            "--audit-log-batch-throttle-qps=5",
            "--audit-log-batch-throttle-burst=7",
            "--audit-log-truncate-enabled",
            "--audit-log-truncate-max-event-size=2048",
            "--audit-log-compress",
        ]))
        .unwrap();
        let batch = audit_batch_options(
            "log",
            true,
            &set.audit_log_mode,
            ferrokube_apiserver::AuditBatchOptions {
                mode: ferrokube_apiserver::AuditMode::Blocking,
                buffer_size: set.audit_log_batch_buffer_size,
                max_batch_size: set.audit_log_batch_max_size,
                max_batch_wait: set.audit_log_batch_max_wait,
                throttle: set.audit_log_batch_throttle_enable.then_some(
                    ferrokube_apiserver::AuditThrottle {
                        qps: set.audit_log_batch_throttle_qps,
                        burst: set.audit_log_batch_throttle_burst,
                    },
                ),
            },
        )
        .unwrap();
        assert_eq!(batch.mode, ferrokube_apiserver::AuditMode::Batch);
        assert_eq!(
            (batch.max_batch_size, batch.max_batch_wait),
            (100, Duration::from_secs(2))
        );
        assert_eq!(
            batch.throttle,
            Some(ferrokube_apiserver::AuditThrottle { qps: 5.0, burst: 7 })
        );
        assert!(set.audit_log_compress);

        // Upstream's checks, made only when the backend is on.
        let no_qps = ferrokube_apiserver::AuditBatchOptions {
            throttle: Some(ferrokube_apiserver::AuditThrottle { qps: 0.0, burst: 0 }),
            ..ferrokube_apiserver::AuditBatchOptions::log_default()
        };
        assert!(audit_batch_options("log", false, "batch", no_qps.clone()).is_ok());
        assert_eq!(
            audit_batch_options("log", true, "batch", no_qps)
                .unwrap_err()
                .to_string(),
            "invalid audit batch log throttle QPS 0, must be a positive number"
        );
        assert!(
            audit_batch_options(
                "webhook",
                true,
                "strict",
                ferrokube_apiserver::AuditBatchOptions::webhook_default()
            )
            .unwrap_err()
            .to_string()
            .starts_with("invalid audit webhook mode strict, allowed modes are")
        );
        let sizes = ferrokube_apiserver::AuditTruncate {
            max_batch_size: 1024,
            max_event_size: set.audit_log_truncate_max_event_size,
        };
        assert_eq!(
            audit_truncate_options("log", true, true, sizes)
                .unwrap_err()
                .to_string(),
            "invalid audit truncate log max batch size 1024, must be greater than max event \
             size (2048)"
        );
        assert_eq!(
            audit_truncate_options("log", false, false, sizes).unwrap(),
            None
        );
    }

    #[test]
    fn webhook_flags_with_upstreams_defaults_and_values() {
        use ferrokube_apiserver::ReviewVersion;
        let defaults = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
        ])
        .unwrap();
        assert_eq!(
            defaults.authentication_token_webhook_cache_ttl,
            Duration::from_secs(120)
        );
        assert_eq!(
            defaults.authentication_token_webhook_version,
            ReviewVersion::V1beta1
        );
        assert_eq!(
            defaults.authorization_webhook_version,
            ReviewVersion::V1beta1
        );
        assert_eq!(
            defaults.authorization_webhook_cache_authorized_ttl,
            Duration::from_secs(300)
        );
        assert_eq!(
            defaults.authorization_webhook_cache_unauthorized_ttl,
            Duration::from_secs(30)
        );
        assert_eq!(defaults.audit_webhook_mode, "batch");
        assert_eq!(defaults.audit_webhook_batch_max_size, 400);
        assert_eq!(
            defaults.audit_webhook_batch_max_wait,
            Duration::from_secs(30)
        );
        assert_eq!(
            defaults.audit_webhook_initial_backoff,
            Duration::from_secs(10)
        );
        assert!(defaults.audit_webhook_batch_throttle_enable);
        assert_eq!(
            (
                defaults.audit_webhook_batch_throttle_qps,
                defaults.audit_webhook_batch_throttle_burst
            ),
            (10.0, 15)
        );
        assert!(!defaults.audit_webhook_truncate_enabled);
        assert_eq!(
            (
                defaults.audit_webhook_truncate_max_batch_size,
                defaults.audit_webhook_truncate_max_event_size
            ),
            (10 * 1024 * 1024, 100 * 1024)
        );
        let set = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--authentication-token-webhook-config-file=/etc/authn.kubeconfig",
            "--authentication-token-webhook-cache-ttl=10s",
            "--authentication-token-webhook-version=v1",
            "--authorization-mode=Node,Webhook,RBAC",
            "--authorization-webhook-config-file=/etc/authz.kubeconfig",
            "--authorization-webhook-version=v1",
            "--authorization-webhook-cache-authorized-ttl=1m",
            "--audit-webhook-config-file=/etc/audit.kubeconfig",
            "--audit-webhook-batch-max-wait=5s",
            "--audit-webhook-batch-throttle-enable=false",
            "--audit-webhook-truncate-enabled",
        ])
        .unwrap();
        assert_eq!(
            set.authentication_token_webhook_cache_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(set.authentication_token_webhook_version, ReviewVersion::V1);
        assert_eq!(set.authorization_webhook_version, ReviewVersion::V1);
        assert_eq!(
            set.authorization_webhook_cache_authorized_ttl,
            Duration::from_secs(60)
        );
        assert_eq!(set.audit_webhook_batch_max_wait, Duration::from_secs(5));
        assert!(!set.audit_webhook_batch_throttle_enable);
        assert!(set.audit_webhook_truncate_enabled);
        assert!(set.authorization_webhook_config_file.is_some());
        assert!(set.audit_webhook_config_file.is_some());
        let err = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--authorization-webhook-version=v2",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("unsupported authorization webhook version \"v2\""),
            "{err}"
        );
    }

    #[test]
    fn front_proxy_flags_as_kubeadm_passes_them() {
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--requestheader-client-ca-file=/pki/front-proxy-ca.crt",
            "--requestheader-allowed-names=front-proxy-client,other",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-uid-headers=X-Remote-Uid",
            "--proxy-client-cert-file=/pki/front-proxy-client.crt",
            "--proxy-client-key-file=/pki/front-proxy-client.key",
            "--enable-aggregator-routing",
        ])
        .unwrap();
        assert_eq!(
            args.requestheader_allowed_names,
            vec!["front-proxy-client", "other"]
        );
        assert_eq!(args.requestheader_username_headers, vec!["X-Remote-User"]);
        assert_eq!(args.requestheader_uid_headers, vec!["X-Remote-Uid"]);
        assert_eq!(args.requestheader_group_headers, vec!["X-Remote-Group"]);
        assert_eq!(
            args.requestheader_extra_headers_prefix,
            vec!["X-Remote-Extra-"]
        );
        assert!(args.enable_aggregator_routing);
        assert!(args.proxy_client_key_file.is_some());
        // Upstream kube-apiserver's defaults: all empty, routing off.
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
        ])
        .unwrap();
        assert!(args.requestheader_client_ca_file.is_none());
        assert!(args.requestheader_username_headers.is_empty());
        assert!(args.requestheader_allowed_names.is_empty());
        assert!(!args.enable_aggregator_routing);
        assert!(args.enable_priority_and_fairness);
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--enable-aggregator-routing=false",
            "--enable-priority-and-fairness=false",
        ])
        .unwrap();
        assert!(!args.enable_aggregator_routing);
        assert!(!args.enable_priority_and_fairness);
    }

    #[test]
    fn automatic_reload_needs_an_encryption_config() {
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "kube-apiserver",
                "--tls-cert-file=/pki/apiserver.crt",
                "--tls-private-key-file=/pki/apiserver.key",
            ];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv).expect("flags parse")
        };
        let err =
            check_encryption_flags(&parse(&["--encryption-provider-config-automatic-reload"]))
                .expect_err("no file to reload");
        assert_eq!(
            err.to_string(),
            "--encryption-provider-config-automatic-reload must be set with --encryption-provider-config"
        );
        let args = parse(&[
            "--encryption-provider-config=/etc/kubernetes/enc.yaml",
            "--encryption-provider-config-automatic-reload=true",
        ]);
        assert!(args.encryption_provider_config_automatic_reload);
        assert!(check_encryption_flags(&args).is_ok());
        assert!(!parse(&[]).encryption_provider_config_automatic_reload);
    }

    #[test]
    fn watch_cache_flags_parse_as_upstream() {
        let sizes = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(
            watch_cache_warnings(true, 100, &sizes(&["pods#1000", "deployments.apps#500"]))
                .unwrap()
                .is_empty()
        );
        let w = watch_cache_warnings(true, 100, &sizes(&["events#0"])).unwrap();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("events"));
        assert_eq!(watch_cache_warnings(false, 100, &[]).unwrap().len(), 1);
        for (bad, message) in [
            ("pods", "invalid value of watch cache size: pods"),
            ("pods#1#2", "invalid value of watch cache size: pods#1#2"),
            ("pods#x", "invalid size of watch cache size: pods#x"),
            ("pods#-1", "watch cache size cannot be negative: pods#-1"),
        ] {
            let err = watch_cache_warnings(true, 100, &sizes(&[bad])).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
    }

    /// The command kubeadm 1.33 writes into kube-apiserver's static pod manifest (its
    /// `getAPIServerCommand` with an external etcd): every flag parses, with
    /// kubeadm's values.
    #[test]
    fn kubeadm_command_line() {
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--advertise-address=192.168.0.10",
            "--allow-privileged=true",
            "--authorization-mode=Node,RBAC",
            "--client-ca-file=/etc/kubernetes/pki/ca.crt",
            "--enable-admission-plugins=NodeRestriction",
            "--enable-bootstrap-token-auth=true",
            "--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt",
            "--etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt",
            "--etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key",
            "--etcd-servers=https://127.0.0.1:2379",
            "--kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt",
            "--kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key",
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            "--proxy-client-cert-file=/etc/kubernetes/pki/front-proxy-client.crt",
            "--proxy-client-key-file=/etc/kubernetes/pki/front-proxy-client.key",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            "--secure-port=6443",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=/etc/kubernetes/pki/sa.pub",
            "--service-account-signing-key-file=/etc/kubernetes/pki/sa.key",
            "--service-cluster-ip-range=10.96.0.0/12",
            "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt",
            "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key",
        ])
        .unwrap();
        assert!(args.allow_privileged);
        assert!(args.enable_bootstrap_token_auth);
        assert_eq!(
            args.kubelet_preferred_address_types,
            ["InternalIP", "ExternalIP", "Hostname"]
        );
        assert_eq!(args.etcd_servers, ["https://127.0.0.1:2379"]);
        // Upstream's defaults for the flags kubeadm leaves out.
        assert_eq!(args.max_requests_inflight, 400);
        assert_eq!(args.max_mutating_requests_inflight, 200);
        assert_eq!(
            go_duration(&args.event_ttl),
            Some(Duration::from_secs(3600))
        );
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "-v=2",
            "--event-ttl=30m",
            "--max-requests-inflight=0",
        ])
        .unwrap();
        assert!(!args.allow_privileged);
        assert!(!args.enable_bootstrap_token_auth);
        assert_eq!(
            args.kubelet_preferred_address_types,
            [
                "Hostname",
                "InternalDNS",
                "InternalIP",
                "ExternalDNS",
                "ExternalIP"
            ]
        );
        assert_eq!(args.component.logging.verbosity, 2);
        assert!(args.service_account_lookup);
        assert_eq!(
            go_duration(&args.event_ttl),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(args.max_requests_inflight, 0);
    }

    #[test]
    fn oidc_flags() {
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--oidc-issuer-url=https://dex.example.com",
            "--oidc-client-id=kubernetes",
            "--oidc-username-claim=email",
            "--oidc-groups-claim=groups",
            "--oidc-groups-prefix=oidc:",
            "--oidc-signing-algs=RS256,ES256",
            "--oidc-required-claim=hd=example.com",
            "--oidc-required-claim=tier=a=b",
            "--oidc-ca-file=/pki/dex-ca.crt",
        ])
        .unwrap();
        let c = super::oidc_config(&args).unwrap();
        assert_eq!(c.issuer_url, "https://dex.example.com");
        assert_eq!(c.username_claim, "email");
        assert_eq!(c.signing_algs, ["RS256", "ES256"]);
        assert_eq!(c.required_claims["hd"], "example.com");
        assert_eq!(c.required_claims["tier"], "a=b");
        assert!(args.oidc_ca_file.is_some());
        // Upstream's defaults.
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
        ])
        .unwrap();
        assert_eq!(
            super::oidc_config(&args).unwrap(),
            ferrokube_apiserver::OidcConfig::default()
        );
        let args = Args::try_parse_from([
            "kube-apiserver",
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--oidc-required-claim=novalue",
        ])
        .unwrap();
        assert!(super::oidc_config(&args).is_err());
    }

    #[test]
    fn durations() {
        let secs = |s| go_duration(s).map(|d| d.as_secs());
        assert_eq!(secs("24h"), Some(86400));
        assert_eq!(secs("1h30m10s"), Some(5410));
        assert_eq!(secs("10"), None);
        assert_eq!(secs(""), None);
        assert_eq!(secs("5d"), None);
    }
}
