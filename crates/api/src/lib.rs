//! Built-in Kubernetes kinds for Ferrokube.
//!
//! Layer: the bottom of both the server and the client side, next to `apimachinery`.
//! Types are k8s-openapi's (never hand-written); this crate adds what the type
//! definitions do not carry: the static table of served resources ([`resources`]) and
//! upstream's defaulting ([`defaults`]), container image references ([`image`]), conversions between kinds two groups
//! serve from one stored form ([`conversion`]), server-side Table printing ([`printers`]),
//! the PodDisruptionBudget condition helpers that the eviction subresource and the
//! disruption controller share ([`pdb`]), node selector matching ([`nodeaffinity`]: the
//! scheduler, the DaemonSet controller, volume node affinity) and the choice of a
//! PersistentVolume for a claim ([`persistentvolume`]: the binder controller and the
//! scheduler's VolumeBinding), and the claim behind a generic ephemeral volume
//! ([`ephemeral`]: its controller, the scheduler, the kubelet, PVC protection), and the
//! node labels a kubelet may set itself ([`kubelet_labels`]: NodeRestriction, the
//! kubelet's `--node-labels`).
//!
//! No IO: no tokio, no files, no clock (times are passed in). Must not depend on
//! storage, registry, admission, apiserver or client crates.

pub mod conversion;
pub mod defaults;
pub mod ephemeral;
pub mod image;
pub mod kubelet_labels;
pub mod nodeaffinity;
pub mod pdb;
pub mod persistentvolume;
pub mod printers;
pub mod resources;
