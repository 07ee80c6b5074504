//! Ferrokube's kubelet: the node agent that runs the pods bound to its node.
//!
//! Layer: client side. It talks to the API only through kube-rs and to the container
//! runtime (containerd) only through the CRI v1 gRPC API; it must not depend on the
//! storage, registry, admission or apiserver crates.
//!
//! Map:
//! - [`cri`]: the CRI client over a unix socket (tonic).
//! - [`credentials`]: image pull credentials from `imagePullSecrets` (upstream's docker
//!   keyring: registry keys, glob/port/path matching, image name normalisation).
//! - Pure computations, table-tested: [`qos`] (QoS class, shares/quota, oom_score_adj,
//!   pod cgroup resources), [`sandbox`] (sandbox config, DNS, port mappings),
//!   [`container`] (container config, spec hash, pull decision), [`env`] (environment
//!   and `$(VAR)` expansion), [`status`] (container statuses, phase, conditions),
//!   [`backoff`] (CrashLoopBackOff), [`actions`] (what a sync must do), [`quantity`],
//!   [`probe`] (probe timing, the probe worker's decisions, started/ready, targets),
//!   [`lifecycle`] (activeDeadlineSeconds, preStop grace; postStart/preStop hook runs;
//!   the sidecars' stop order), [`resize`] (in-place pod resize: allocations, whether a
//!   resize fits, which cgroup values change), [`allocation`] (what each pod is
//!   allocated, checkpointed under the root dir),
//!   [`volume`] (volume paths, configMap/secret/downwardAPI/projected payloads, hostPath
//!   checks, persistentVolumeClaim volumes resolved to hostPath/local PVs, CRI mounts), [`atomic_writer`] (upstream's `..data` symlink-swap layout),
//!   [`node_allocatable`] (`--enforce-node-allocatable`: what `kubepods`, the reserved
//!   cgroups and the QoS tiers are held to).
//! - IO, kept thin: [`cgroup`] (pod, QoS and reserved cgroups under the cgroupfs driver,
//!   cgroup v1),
//!   [`runtime`] (the runtime manager: sync, status, kill), [`pleg`] (relisting),
//!   [`prober`] (exec/httpGet/tcpSocket/grpc probes), [`probe_manager`] (probe workers),
//!   [`volume_manager`] (volume dirs, tmpfs mounts, payload writes, teardown).
//! - Node and API side: [`node`] (pure: capacity/allocatable, reserved and eviction
//!   parsing, conditions, the Node object, the status cadence), [`machine`] (/proc,
//!   statvfs), [`status_manager`] (pods/status only when changed), [`kubelet`] (node
//!   registration/status/Lease loops, pod workers on an informer + PLEG, graceful
//!   deletion, orphan cleanup), [`kubeletconfig`] (`KubeletConfiguration` v1beta1),
//!   [`server`] (plain-HTTP healthz and read-only port; the HTTPS kubelet API on
//!   `--port`), [`auth`] (that API's authentication and authorization: client
//!   certificates, TokenReview, SubjectAccessReview of `nodes/<subresource>`), [`logs`] (CRI log files and `PodLogOptions`), [`log_rotation`]
//!   (`--container-log-max-size`/`--container-log-max-files`), [`eviction`] (the
//!   eviction manager's decisions), [`streaming`] (exec,
//!   attach and port-forward handed to the runtime's streaming server), [`static_pods`]
//!   (`--pod-manifest-path` manifests, upstream's naming and hash, mirror pods),
//!   [`bootstrap`] (TLS bootstrapping: `--bootstrap-kubeconfig`, a node client
//!   certificate requested through a CertificateSigningRequest), [`cert_rotation`]
//!   (`rotateCertificates`: that certificate renewed before it expires) over
//!   [`rotating_transport`] (the API client presenting the current certificate, its
//!   connections closed when it changes),
//!   [`stats`] (`/stats/summary` and its collection), [`metrics`] (`/metrics`,
//!   `/metrics/cadvisor`; pure inputs: [`working_pods`], the pod counts of each
//!   housekeeping pass, and [`pod_startup`], the pod startup SLI), [`resource_metrics`] (`/metrics/resource`, pure rendering of
//!   the summary's CPU and memory for metrics-server).

pub mod actions;
pub mod allocation;
pub mod atomic_writer;
pub mod auth;
pub mod backoff;
pub mod bootstrap;
pub mod cert_rotation;
pub mod cgroup;
pub mod config;
pub mod container;
pub mod credentials;
pub mod cri;
pub mod csi_node;
pub mod env;
pub mod eviction;
pub mod gc;
pub mod kubelet;
pub mod kubeletconfig;
pub mod lifecycle;
pub mod log_rotation;
pub mod logs;
pub mod machine;
pub mod metrics;
pub mod node;
pub mod node_allocatable;
pub mod pleg;
pub mod pod_startup;
pub mod probe;
pub mod probe_manager;
pub mod prober;
pub mod qos;
pub mod quantity;
pub mod resize;
pub mod resource_metrics;
pub mod rotating_transport;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod static_pods;
pub mod stats;
pub mod status;
pub mod status_manager;
pub mod streaming;
pub mod system_logs;
pub mod volume;
pub mod volume_manager;
pub mod working_pods;

pub use config::{HostDns, NodeConfig};
pub use cri::{CriClient, CriError};
pub use kubelet::{Kubelet, KubeletConfig, KubeletError};
pub use runtime::{RuntimeManager, SyncError};
