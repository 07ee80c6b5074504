//! kube-proxy: Services and EndpointSlices -> nftables (default) or iptables rules on
//! this node.
//!
//! * [`model`], [`rules`]: the desired ruleset as a pure function of (Services,
//!   EndpointSlices, Node, config), in upstream's nftables-mode shape (table
//!   `ip kube-proxy`: ClusterIP, NodePort, externalIPs, load-balancer IPs, ClientIP
//!   affinity with timeouts, internal/external traffic policy Local, terminating
//!   fallback, masquerade of off-cluster and hairpin traffic, reject without endpoints,
//!   `loadBalancerSourceRanges` dropping other sources before DNAT).
//! * [`render`]: rulesets -> `nft -f` transactions: a full sync and an incremental one
//!   that rewrites only the chains and map elements of changed Services.
//! * [`proxier`]: the per-family state (objects seen, desired rules, a model of what is
//!   applied) that plans transactions; [`nft`] runs them (`nft -f -`, atomic).
//! * iptables mode (`--proxy-mode=iptables`): [`iptables_rules`], the same Services in
//!   upstream's iptables-mode shape (KUBE-SERVICES, KUBE-SVC-/SEP-/EXT-/SVL- chains
//!   with upstream's hashed names, statistic load-balancing, recent affinity, REJECT
//!   without endpoints) and the `iptables-restore` text of a sync (pure);
//!   [`iptables_proxier`], its per-family state planning full and partial restores;
//!   [`iptables`] runs them (`iptables-restore --noflush`, the built-in chains' jumps,
//!   the canary, the cleanup). Both tools run through [`command`].
//! * [`backend`]: the one shape of both backends (a [`backend::Backend`] makes one
//!   [`backend::FamilyProxier`] per family) and the mode switch's cleanup of the other
//!   mode's rules.
//! * [`run`]: informers -> proxiers -> sync loop with bounded frequency, and
//!   upstream's start-up events on the node (`Starting`, or why it could not start);
//!   [`health`]:
//!   upstream's `/healthz` semantics and the `/metrics` text (with the network
//!   programming latency from the EndpointSlices' `last-change-trigger-time`);
//!   [`service_health`]: the `healthCheckNodePort` servers of LoadBalancer Services
//!   with `externalTrafficPolicy: Local`; [`config`]: `KubeProxyConfiguration` and
//!   `--proxy-mode`.
//!
//! Layer: client side (a component on `ferrokube-client`'s informers and kube-rs). It
//! must not depend on the server side (storage*, registry, apiserver); `model`,
//! `rules`, `render`, `iptables_rules`, `proxier` and `iptables_proxier` do no IO.

pub mod backend;
pub mod command;
pub mod config;
pub mod health;
pub mod iptables;
pub mod iptables_proxier;
pub mod iptables_rules;
pub mod model;
pub mod net;
pub mod nft;
pub mod proxier;
pub mod render;
pub mod rules;
pub mod run;
pub mod service_health;
#[cfg(test)]
mod test_objects;
