//! The two proxy backends behind one shape, so the informers, the bounded-frequency
//! sync loop, `/healthz`, `/metrics` and the service health servers ([`crate::run`])
//! are the same for both: a [`Backend`] (how to reach the kernel: `nft`, or
//! `iptables`) makes one [`FamilyProxier`] per IP family (its state and runner), which
//! the informers feed through its [`ObjectCache`] and the sync loop syncs.
//!
//! Also the mode switch of upstream's `platformCleanup`: starting in one mode removes
//! the other mode's rules ([`cleanup_other_mode`]); `--cleanup` removes both
//! ([`cleanup_all`]).

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::config::ProxyMode;
use crate::iptables::{Iptables, IptablesError};
use crate::iptables_proxier::IptablesProxier;
use crate::net::IpFamily;
use crate::nft::{Nft, NftError};
use crate::proxier::{ObjectCache, Proxier};
use crate::rules::{NodePortAddresses, ProxyConfig};
use crate::service_health::HealthPlan;

/// How the rules reach the kernel.
#[derive(Debug, Clone)]
pub enum Backend {
    Nftables(Nft),
    Iptables(Iptables),
}

impl Backend {
    pub fn mode(&self) -> ProxyMode {
        match self {
            Backend::Nftables(_) => ProxyMode::Nftables,
            Backend::Iptables(_) => ProxyMode::Iptables,
        }
    }

    /// A proxier for one family.
    pub fn proxier(&self, config: ProxyConfig) -> FamilyProxier {
        match self {
            Backend::Nftables(nft) => FamilyProxier::Nftables {
                proxier: Mutex::new(Proxier::new(config)),
                nft: nft.clone(),
            },
            Backend::Iptables(ipt) => FamilyProxier::Iptables {
                proxier: Mutex::new(IptablesProxier::new(config)),
                ipt: ipt.clone(),
            },
        }
    }
}

/// One family's proxier and the runner that applies its plans.
#[derive(Debug)]
pub enum FamilyProxier {
    Nftables {
        proxier: Mutex<Proxier>,
        nft: Nft,
    },
    Iptables {
        proxier: Mutex<IptablesProxier>,
        ipt: Iptables,
    },
}

/// iptables rule counts of one sync (upstream's `sync_proxy_rules_iptables_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IptablesCounts {
    /// Rules kube-proxy owns, per table.
    pub filter_total: usize,
    pub nat_total: usize,
    /// Rules the last restore wrote, per table.
    pub filter_last: usize,
    pub nat_last: usize,
}

/// What one family's sync did.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySync {
    pub ok: bool,
    pub full: bool,
    pub elapsed: Duration,
    /// Services with rules.
    pub services: usize,
    /// iptables mode: the rule counts after a successful restore.
    pub iptables: Option<IptablesCounts>,
    /// iptables mode: the restore itself failed (as opposed to the jumps).
    pub restore_failed: bool,
    /// Whether the sync counts in the sync latency metrics (false when it stopped
    /// before planning: the nftables table could not be listed).
    pub counted: bool,
    /// A successful sync: the `last-change-trigger-time`s of the EndpointSlice changes
    /// it programmed (kubeproxy_network_programming_duration_seconds measures from
    /// them; see [`crate::proxier::ObjectCache::programmed`]).
    pub trigger_times: Vec<SystemTime>,
}

impl FamilyProxier {
    /// The objects this family's proxier has seen (what the informers feed).
    pub fn objects<R>(&self, f: impl FnOnce(&mut ObjectCache) -> R) -> R {
        match self {
            FamilyProxier::Nftables { proxier, .. } => f(proxier.lock().objects_mut()),
            FamilyProxier::Iptables { proxier, .. } => f(proxier.lock().objects_mut()),
        }
    }

    pub fn family(&self) -> IpFamily {
        match self {
            FamilyProxier::Nftables { proxier, .. } => proxier.lock().config().family,
            FamilyProxier::Iptables { proxier, .. } => proxier.lock().config().family,
        }
    }

    /// Forces the next sync to be full.
    pub fn invalidate(&self) {
        match self {
            FamilyProxier::Nftables { proxier, .. } => proxier.lock().invalidate(),
            FamilyProxier::Iptables { proxier, .. } => proxier.lock().invalidate(),
        }
    }

    /// What the service health servers serve.
    pub fn service_health(&self) -> HealthPlan {
        match self {
            FamilyProxier::Nftables { proxier, .. } => proxier.lock().service_health(),
            FamilyProxier::Iptables { proxier, .. } => proxier.lock().service_health(),
        }
    }

    /// One sync: plan, apply, follow. `canary_interval` (iptables mode): how often the
    /// canary chain is looked at.
    pub async fn sync(&self, canary_interval: Duration) -> FamilySync {
        match self {
            FamilyProxier::Nftables { proxier, nft } => sync_nft(proxier, nft).await,
            FamilyProxier::Iptables { proxier, ipt } => {
                sync_iptables(proxier, ipt, canary_interval).await
            }
        }
    }
}

fn cidr_mode(config: &ProxyConfig) -> bool {
    matches!(config.node_port_addresses, NodePortAddresses::Cidrs(_))
}

async fn sync_nft(proxier: &Mutex<Proxier>, nft: &Nft) -> FamilySync {
    let start = Instant::now();
    let (family, full, cidr_mode) = {
        let mut p = proxier.lock();
        let cidr_mode = cidr_mode(p.config());
        (p.config().family, p.next_is_full(), cidr_mode)
    };
    if cidr_mode {
        let addrs = host_addresses().await;
        proxier.lock().set_host_addresses(addrs);
    }
    let existing = if full {
        match nft.existing(family).await {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::error!(error = %e, "listing the nftables table failed");
                return FamilySync {
                    ok: false,
                    full,
                    elapsed: start.elapsed(),
                    services: proxier.lock().service_count(),
                    iptables: None,
                    restore_failed: false,
                    counted: false,
                    trigger_times: Vec::new(),
                };
            }
        }
    } else {
        None
    };
    let plan = proxier.lock().plan(existing.as_ref());
    let result = if plan.transaction.is_empty() {
        Ok(())
    } else {
        nft.apply(&plan.transaction).await
    };
    let elapsed = start.elapsed();
    let mut p = proxier.lock();
    let mut trigger_times = Vec::new();
    let ok = match result {
        Ok(()) => {
            p.applied(&plan);
            trigger_times = p.objects_mut().programmed(family);
            if !plan.transaction.is_empty() {
                tracing::info!(
                    family = family.nft(),
                    full = plan.full,
                    services = plan.changed_services.len(),
                    elapsed_ms = elapsed.as_secs_f64() * 1e3,
                    "synced nftables rules"
                );
            }
            true
        }
        Err(e) => {
            tracing::error!(error = %e, full = plan.full, "nftables sync failed; will resync fully");
            p.failed();
            false
        }
    };
    FamilySync {
        ok,
        full: plan.full,
        elapsed,
        services: p.service_count(),
        iptables: None,
        restore_failed: false,
        counted: true,
        trigger_times,
    }
}

async fn sync_iptables(
    proxier: &Mutex<IptablesProxier>,
    ipt: &Iptables,
    canary_interval: Duration,
) -> FamilySync {
    let start = Instant::now();
    let (family, mut full, cidr_mode, canary_due) = {
        let mut p = proxier.lock();
        let cidr_mode = cidr_mode(p.config());
        let canary_due = p.canary_due(start, canary_interval);
        (p.config().family, p.next_is_full(), cidr_mode, canary_due)
    };
    let failed = |p: &mut IptablesProxier, full: bool, restore_failed: bool| {
        p.failed();
        FamilySync {
            ok: false,
            full,
            elapsed: start.elapsed(),
            services: p.service_count(),
            iptables: None,
            restore_failed,
            counted: true,
            trigger_times: Vec::new(),
        }
    };
    if cidr_mode {
        let addrs = host_addresses().await;
        proxier.lock().objects_mut().set_host_addresses(addrs);
    }
    if !full && canary_due {
        match ipt.canary_exists(family).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    family = family.k8s(),
                    "iptables canary chain is gone (iptables flushed?); resyncing fully"
                );
                proxier.lock().invalidate();
                full = true;
            }
            Err(e) => tracing::warn!(error = %e, "checking the iptables canary chain failed"),
        }
    }
    let existing = if full {
        match ipt.nat_chains(family).await {
            Ok(c) => Some(c),
            Err(e) => {
                // As upstream: the restore goes ahead; only stale chains stay.
                tracing::error!(error = %e, "iptables-save failed: stale chains will not be deleted");
                Some(Default::default())
            }
        }
    } else {
        None
    };
    let (plan, jumps) = {
        let mut p = proxier.lock();
        let plan = p.plan(existing.as_ref());
        (plan, p.desired().base.jumps.clone())
    };
    if !plan.restore.is_empty()
        && let Err(e) = ipt.restore(family, &plan.restore).await
    {
        tracing::error!(error = %e, full = plan.full, "iptables-restore failed; will resync fully");
        return failed(&mut proxier.lock(), plan.full, true);
    }
    // The jumps from the built-in chains, once our chains exist: on full syncs only
    // (first start, after a failure or a flush, hourly), as upstream.
    if plan.full
        && let Err(e) = ipt.ensure_jumps(family, &jumps).await
    {
        tracing::error!(error = %e, "ensuring the jumps to kube-proxy's iptables chains failed; will resync fully");
        return failed(&mut proxier.lock(), plan.full, false);
    }
    let elapsed = start.elapsed();
    let mut p = proxier.lock();
    p.applied(&plan);
    if !plan.restore.is_empty() {
        tracing::info!(
            family = family.k8s(),
            full = plan.full,
            services = plan.changed_services.len(),
            deleted_chains = plan.stale_chains.len(),
            elapsed_ms = elapsed.as_secs_f64() * 1e3,
            "synced iptables rules"
        );
    }
    let (filter_total, nat_total) = p.rule_counts();
    let trigger_times = p.objects_mut().programmed(family);
    FamilySync {
        ok: true,
        full: plan.full,
        elapsed,
        services: p.service_count(),
        iptables: Some(IptablesCounts {
            filter_total,
            nat_total,
            filter_last: plan.filter_rules,
            nat_last: plan.nat_rules,
        }),
        restore_failed: false,
        counted: true,
        trigger_times,
    }
}

/// The host's addresses (`ip -j addr`), for `--nodeport-addresses` CIDRs.
async fn host_addresses() -> Vec<IpAddr> {
    let Ok(out) = tokio::process::Command::new("ip")
        .args(["-j", "addr", "show"])
        .output()
        .await
    else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["local"].as_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// Errors removing a mode's rules.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error("removing kube-proxy's nftables tables: {0}")]
    Nftables(NftError),
    #[error("removing kube-proxy's iptables rules: {0}")]
    Iptables(IptablesError),
}

/// What a cleanup removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Families whose `kube-proxy` nftables table was deleted.
    pub nftables: Vec<IpFamily>,
    /// Families whose KUBE-* iptables chains (and jumps) were removed.
    pub iptables: Vec<IpFamily>,
}

async fn cleanup_nftables(nft: &Nft) -> Result<Vec<IpFamily>, CleanupError> {
    match nft.cleanup().await {
        Ok(f) => Ok(f),
        // No nft on this host: no table either.
        Err(NftError::Command(e)) if e.is_not_installed() => Ok(Vec::new()),
        Err(e) => Err(CleanupError::Nftables(e)),
    }
}

/// Starting in `mode` removes the other mode's leftovers (upstream's
/// `platformCleanup`): iptables mode deletes the `kube-proxy` nftables tables;
/// nftables mode removes iptables mode's jumps and chains if `iptables-save` shows any.
/// A missing `nft` or `iptables` binary means nothing to remove.
pub async fn cleanup_other_mode(
    mode: ProxyMode,
    nft: &Nft,
    ipt: &Iptables,
) -> Result<Cleaned, CleanupError> {
    let mut out = Cleaned::default();
    match mode {
        ProxyMode::Iptables => out.nftables = cleanup_nftables(nft).await?,
        ProxyMode::Nftables => {
            out.iptables = ipt.cleanup().await.map_err(CleanupError::Iptables)?;
        }
    }
    Ok(out)
}

/// `--cleanup`: both modes' rules.
pub async fn cleanup_all(nft: &Nft, ipt: &Iptables) -> Result<Cleaned, CleanupError> {
    Ok(Cleaned {
        nftables: cleanup_nftables(nft).await?,
        iptables: ipt.cleanup().await.map_err(CleanupError::Iptables)?,
    })
}
