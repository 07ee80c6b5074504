//! One family's iptables proxier state (upstream's iptables `Proxier` minus the IO):
//! the objects seen, the desired ruleset kept up to date per changed Service, and a
//! model of what is applied. It plans `iptables-restore` inputs and is told whether
//! they were applied; [`crate::iptables::Iptables`] runs them.
//!
//! As upstream: every restore rewrites the top-level chains (KUBE-SERVICES, ... : they
//! hold one rule per Service port); a full sync also rewrites every Service's own
//! chains and deletes the stale KUBE-SVC-/SEP-/... chains `iptables-save` shows; a
//! partial sync rewrites only the chains of the Services that changed and deletes the
//! chains they no longer have. The first sync, the one after a failure, the hourly one
//! and the one after the canary chain disappeared are full.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::iptables_rules::{
    IptablesBase, IptablesRuleset, IptablesServiceRules, RestoreScope, base_rules,
    is_service_chain, restore_input, service_rules,
};
use crate::proxier::ObjectCache;
use crate::rules::ProxyConfig;

/// A restore to run, and what it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IptablesPlan {
    /// The `iptables-restore --noflush` input; empty when nothing changed.
    pub restore: String,
    pub full: bool,
    /// Services whose own chains the restore rewrites.
    pub changed_services: Vec<String>,
    /// Chains the restore deletes.
    pub stale_chains: Vec<String>,
    /// Rules the restore writes (upstream's `sync_proxy_rules_iptables_last`).
    pub filter_rules: usize,
    pub nat_rules: usize,
}

/// What the kernel holds after the last successful restore.
#[derive(Debug, Clone)]
struct Applied {
    base: IptablesBase,
    services: BTreeMap<String, IptablesServiceRules>,
}

#[derive(Debug)]
pub struct IptablesProxier {
    config: ProxyConfig,
    objects: ObjectCache,
    desired: IptablesRuleset,
    /// `None` until the first full sync and after a failure (the next sync is full).
    applied: Option<Applied>,
    /// Services recomputed since the last successful restore.
    pending: BTreeSet<String>,
    canary_checked: Option<Instant>,
}

impl IptablesProxier {
    pub fn new(config: ProxyConfig) -> Self {
        let desired = IptablesRuleset {
            family: config.family,
            base: base_rules(&config, None, &[]),
            services: BTreeMap::new(),
        };
        IptablesProxier {
            config,
            objects: ObjectCache::default(),
            desired,
            applied: None,
            pending: BTreeSet::new(),
            canary_checked: None,
        }
    }

    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// The objects seen (what the informers feed).
    pub fn objects_mut(&mut self) -> &mut ObjectCache {
        &mut self.objects
    }

    /// Whether the next sync must be full (the caller then lists the nat table's
    /// chains for [`Self::plan`]).
    pub fn next_is_full(&mut self) -> bool {
        self.recompute();
        self.applied.is_none()
    }

    /// Forces the next sync to be full (periodic resync, canary gone).
    pub fn invalidate(&mut self) {
        self.applied = None;
    }

    /// Whether the canary should be looked at now (at most once per `interval`, and
    /// not before the first successful sync).
    pub fn canary_due(&mut self, now: Instant, interval: Duration) -> bool {
        if self.applied.is_none() {
            return false;
        }
        match self.canary_checked {
            Some(t) if now.saturating_duration_since(t) < interval => false,
            _ => {
                self.canary_checked = Some(now);
                true
            }
        }
    }

    /// What the service health servers serve.
    pub fn service_health(&self) -> crate::service_health::HealthPlan {
        self.objects.service_health(&self.config)
    }

    pub fn service_count(&self) -> usize {
        self.desired.services.len()
    }

    /// The desired ruleset (for tests and debugging).
    pub fn desired(&self) -> &IptablesRuleset {
        &self.desired
    }

    fn recompute(&mut self) {
        self.objects.recompute(
            &mut self.config,
            &mut self.desired.base,
            &mut self.desired.services,
            &mut self.pending,
            base_rules,
            service_rules,
        );
    }

    /// Plans the next restore. A full one needs the nat table's chains now
    /// (`existing_nat_chains`, from `iptables-save -t nat`; asked for only then).
    pub fn plan(&mut self, existing_nat_chains: Option<&BTreeSet<String>>) -> IptablesPlan {
        if self.next_is_full() {
            let desired_chains = self.desired.service_chains();
            let stale: BTreeSet<String> = existing_nat_chains
                .into_iter()
                .flatten()
                .filter(|c| is_service_chain(c) && !desired_chains.contains(c.as_str()))
                .cloned()
                .collect();
            let r = restore_input(
                &self.desired,
                RestoreScope {
                    services: None,
                    stale: &stale,
                    canary: true,
                },
            );
            return IptablesPlan {
                restore: r.text,
                full: true,
                changed_services: self.desired.services.keys().cloned().collect(),
                stale_chains: stale.into_iter().collect(),
                filter_rules: r.filter_rules,
                nat_rules: r.nat_rules,
            };
        }
        let Some(applied) = &self.applied else {
            unreachable!("checked above")
        };
        let changed: BTreeSet<String> = self
            .pending
            .iter()
            .filter(|k| applied.services.get(*k) != self.desired.services.get(*k))
            .cloned()
            .collect();
        if changed.is_empty() && applied.base == self.desired.base {
            return IptablesPlan {
                restore: String::new(),
                full: false,
                changed_services: Vec::new(),
                stale_chains: Vec::new(),
                filter_rules: 0,
                nat_rules: 0,
            };
        }
        let mut stale = BTreeSet::new();
        for key in &changed {
            let keep: BTreeSet<&str> = self
                .desired
                .services
                .get(key)
                .map(|s| s.chain_names().collect())
                .unwrap_or_default();
            if let Some(old) = applied.services.get(key) {
                stale.extend(
                    old.chain_names()
                        .filter(|c| !keep.contains(c))
                        .map(str::to_string),
                );
            }
        }
        let r = restore_input(
            &self.desired,
            RestoreScope {
                services: Some(&changed),
                stale: &stale,
                canary: false,
            },
        );
        IptablesPlan {
            restore: r.text,
            full: false,
            changed_services: changed.into_iter().collect(),
            stale_chains: stale.into_iter().collect(),
            filter_rules: r.filter_rules,
            nat_rules: r.nat_rules,
        }
    }

    /// The planned restore was applied: the model follows.
    pub fn applied(&mut self, plan: &IptablesPlan) {
        match (&mut self.applied, plan.full) {
            (Some(applied), false) => {
                for key in std::mem::take(&mut self.pending) {
                    match self.desired.services.get(&key) {
                        Some(r) => {
                            applied.services.insert(key, r.clone());
                        }
                        None => {
                            applied.services.remove(&key);
                        }
                    }
                }
                applied.base = self.desired.base.clone();
            }
            _ => {
                self.applied = Some(Applied {
                    base: self.desired.base.clone(),
                    services: self.desired.services.clone(),
                });
                self.pending.clear();
            }
        }
    }

    /// The planned restore failed: nothing is known about the kernel any more.
    pub fn failed(&mut self) {
        self.applied = None;
    }

    /// (filter, nat) rules of the whole desired ruleset.
    pub fn rule_counts(&self) -> (usize, usize) {
        self.desired.rule_counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::IpFamily;

    use crate::test_objects::{slice, svc};

    #[test]
    fn full_then_partial_syncs() {
        let mut p = IptablesProxier::new(ProxyConfig::new(IpFamily::V4, "n"));
        p.objects_mut().service_updated(svc("a", "10.96.0.1"));
        p.objects_mut().service_updated(svc("b", "10.96.0.2"));
        p.objects_mut()
            .slice_updated(slice("a", "a-1", &["10.244.0.1", "10.244.0.2"]));
        // A leftover chain from an earlier run, and someone else's chain.
        let existing: BTreeSet<String> = ["KUBE-SVC-OLDOLDOLDOLDOLDO", "CNI-XYZ", "KUBE-SERVICES"]
            .map(String::from)
            .into();
        let plan = p.plan(Some(&existing));
        assert!(plan.full);
        assert!(
            plan.restore
                .starts_with("*mangle\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n")
        );
        assert_eq!(plan.stale_chains, ["KUBE-SVC-OLDOLDOLDOLDOLDO"]);
        assert!(plan.restore.contains("-X KUBE-SVC-OLDOLDOLDOLDOLDO\n"));
        assert!(
            plan.restore
                .contains("--probability 0.5000000000 -j KUBE-SEP-"),
            "{}",
            plan.restore
        );
        assert!(plan.restore.contains("\"ns/b has no endpoints\""));
        p.applied(&plan);

        // Nothing changed: nothing to restore.
        let plan = p.plan(None);
        assert!(!plan.full && plan.restore.is_empty(), "{plan:?}");
        p.applied(&plan);

        // b gets an endpoint: a partial restore writes b's chains only, and still the
        // whole top-level chains.
        p.objects_mut()
            .slice_updated(slice("b", "b-1", &["10.244.0.9"]));
        let plan = p.plan(None);
        assert!(!plan.full);
        assert_eq!(plan.changed_services, ["ns/b"]);
        assert!(plan.restore.contains("--to-destination 10.244.0.9:8080"));
        assert!(!plan.restore.contains("--to-destination 10.244.0.1:8080"));
        assert!(
            plan.restore
                .contains("\"ns/a cluster IP\" -m tcp -p tcp -d 10.96.0.1"),
            "a's KUBE-SERVICES rule is rewritten with the chain: {}",
            plan.restore
        );
        assert!(!plan.restore.contains("*mangle"));
        p.applied(&plan);

        // a loses an endpoint: its SEP chain goes.
        let gone = p
            .desired()
            .services
            .get("ns/a")
            .unwrap()
            .chain_names()
            .filter(|c| c.starts_with("KUBE-SEP-"))
            .map(str::to_string)
            .collect::<Vec<_>>();
        p.objects_mut()
            .slice_updated(slice("a", "a-1", &["10.244.0.1"]));
        let plan = p.plan(None);
        assert_eq!(plan.changed_services, ["ns/a"]);
        assert_eq!(plan.stale_chains.len(), 1);
        assert!(gone.contains(&plan.stale_chains[0]));
        p.applied(&plan);

        // Service b deleted: all its chains go, and its KUBE-SERVICES rule.
        let b_chains: Vec<String> = p.desired().services["ns/b"]
            .chain_names()
            .map(str::to_string)
            .collect();
        p.objects_mut().service_deleted(&svc("b", "10.96.0.2"));
        let plan = p.plan(None);
        assert_eq!(plan.stale_chains, {
            let mut c = b_chains.clone();
            c.sort();
            c
        });
        assert!(!plan.restore.contains("10.96.0.2"));
        p.applied(&plan);

        // A failure makes the next sync full; the canary is looked at once per period.
        p.failed();
        assert!(!p.canary_due(Instant::now(), Duration::from_secs(30)));
        assert!(p.plan(Some(&BTreeSet::new())).full);
    }

    #[test]
    fn canary_checked_once_per_interval() {
        let mut p = IptablesProxier::new(ProxyConfig::new(IpFamily::V4, "n"));
        let plan = p.plan(Some(&BTreeSet::new()));
        p.applied(&plan);
        let t0 = Instant::now();
        let period = Duration::from_secs(30);
        assert!(p.canary_due(t0, period));
        assert!(!p.canary_due(t0 + Duration::from_secs(29), period));
        assert!(p.canary_due(t0 + Duration::from_secs(30), period));
    }
}
