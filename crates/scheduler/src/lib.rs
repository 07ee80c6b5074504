//! kube-scheduler, after upstream `pkg/scheduler`: places pending pods on nodes.
//!
//! * [`framework`]: one [`framework::Plugin`] shape with typed extension points
//!   (PreEnqueue, QueueSort, PreFilter, Filter, PostFilter, PreScore, Score,
//!   NormalizeScore, Reserve/Unreserve, Permit, PreBind, Bind, PostBind),
//!   [`framework::CycleState`], the plugin [`framework::Registry`] and the per-profile
//!   [`framework::Framework`] runtime.
//! * [`config`]: `KubeSchedulerConfiguration` (kubescheduler.config.k8s.io/v1) with
//!   upstream's defaults and plugin-set merging.
//! * [`cache`]: NodeInfo aggregates, assumed pods, incremental snapshots.
//! * [`queue`]: activeQ / backoffQ / unschedulable pods, event-driven requeueing.
//! * [`plugins`]: the default in-tree plugins with upstream semantics and weights.
//! * [`schedule_one`]: the pure scheduling algorithm of one cycle;
//!   [`scheduler`]: the loop with assume, Reserve, Permit and the async binding cycle.
//! * [`run`]: wiring to an apiserver (informers via kube-rs watchers, binding through
//!   `pods/binding`, status/events, health and metrics HTTP).
//!
//! Layer: a client-side component. It talks to the apiserver only over HTTP through
//! kube-rs; it must never depend on `storage*`, `registry`, `admission` or
//! `apiserver` (the test apiserver comes in through `ferrokube-testing` as a
//! dev-dependency only).

pub mod cache;
pub mod config;
pub mod framework;
pub mod metrics;
pub mod plugins;
pub mod queue;
pub mod resource;
pub mod run;
pub mod schedule_one;
pub mod scheduler;
pub mod status;
pub mod types;

pub use config::KubeSchedulerConfiguration;
pub use framework::{Framework, Plugin, Registry};
pub use status::{Code, Status};

#[cfg(test)]
mod tests;
