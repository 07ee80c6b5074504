//! The only place that runs iptables: `iptables-restore --noflush` (each table
//! atomic), `iptables-save`, the jumps from the built-in chains (`iptables -C`, then
//! `-I` when missing: upstream's `EnsureRule`), the canary check, and the cleanup of
//! everything iptables mode creates. `ip6tables*` for IPv6. `-w 5` waits for the
//! xtables lock as upstream (a no-op with the nf_tables backend).

use std::collections::BTreeSet;

use crate::command::{self, CommandError};
use crate::iptables_rules::{JumpRule, KUBE_PROXY_CANARY, cleanup_input, saved_chains};
use crate::net::IpFamily;

/// Errors running iptables.
pub type IptablesError = CommandError;

#[derive(Debug, Clone, Copy)]
enum Tool {
    Iptables,
    Restore,
    Save,
}

/// How to run iptables: a command prefix before the binary (empty, or e.g.
/// `["ip", "netns", "exec", "ns1"]` in tests).
#[derive(Debug, Clone, Default)]
pub struct Iptables {
    prefix: Vec<String>,
}

impl Iptables {
    pub fn with_prefix(prefix: Vec<String>) -> Self {
        Iptables { prefix }
    }

    fn binary(family: IpFamily, tool: Tool) -> &'static str {
        match (family, tool) {
            (IpFamily::V4, Tool::Iptables) => "iptables",
            (IpFamily::V4, Tool::Restore) => "iptables-restore",
            (IpFamily::V4, Tool::Save) => "iptables-save",
            (IpFamily::V6, Tool::Iptables) => "ip6tables",
            (IpFamily::V6, Tool::Restore) => "ip6tables-restore",
            (IpFamily::V6, Tool::Save) => "ip6tables-save",
        }
    }

    /// Runs the tool with `args` (and `stdin`); returns stdout.
    async fn run(
        &self,
        family: IpFamily,
        tool: Tool,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, IptablesError> {
        let mut argv: Vec<&str> = self.prefix.iter().map(String::as_str).collect();
        argv.push(Self::binary(family, tool));
        argv.extend_from_slice(args);
        command::run(&argv, stdin).await
    }

    /// Applies a restore input without flushing other chains (`iptables-restore -w 5
    /// --noflush`): each table's part is committed atomically.
    pub async fn restore(&self, family: IpFamily, input: &str) -> Result<(), IptablesError> {
        self.run(
            family,
            Tool::Restore,
            &["-w", "5", "--noflush"],
            Some(input),
        )
        .await
        .map(|_| ())
    }

    /// `iptables-save` of one table, or of all.
    pub async fn save(
        &self,
        family: IpFamily,
        table: Option<&str>,
    ) -> Result<String, IptablesError> {
        match table {
            Some(t) => self.run(family, Tool::Save, &["-t", t], None).await,
            None => self.run(family, Tool::Save, &[], None).await,
        }
    }

    /// The chains of the nat table (for the stale-chain deletion of a full sync).
    pub async fn nat_chains(&self, family: IpFamily) -> Result<BTreeSet<String>, IptablesError> {
        Ok(saved_chains(&self.save(family, Some("nat")).await?, "nat"))
    }

    /// Makes sure each jump exists: `iptables -C`, and `-I` (first in the built-in
    /// chain) when it does not. Returns how many were inserted.
    pub async fn ensure_jumps(
        &self,
        family: IpFamily,
        jumps: &[JumpRule],
    ) -> Result<usize, IptablesError> {
        let mut inserted = 0;
        for j in jumps {
            let args = j.args();
            let mut check = vec!["-w", "5", "-t", j.table, "-C", j.chain];
            check.extend(args.iter().map(String::as_str));
            match self.run(family, Tool::Iptables, &check, None).await {
                Ok(_) => continue,
                // Exit 1: no such rule (upstream's checkRule).
                Err(IptablesError::Failed { code: Some(1), .. }) => {}
                Err(e) => return Err(e),
            }
            let mut insert = vec!["-w", "5", "-t", j.table, "-I", j.chain];
            insert.extend(args.iter().map(String::as_str));
            self.run(family, Tool::Iptables, &insert, None).await?;
            inserted += 1;
        }
        Ok(inserted)
    }

    /// Whether the mangle table's canary chain exists (gone after a flush of
    /// iptables by someone else, e.g. a firewall reload).
    pub async fn canary_exists(&self, family: IpFamily) -> Result<bool, IptablesError> {
        match self
            .run(
                family,
                Tool::Iptables,
                &["-w", "5", "-t", "mangle", "-S", KUBE_PROXY_CANARY],
                None,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(IptablesError::Failed { code: Some(1), .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes what iptables mode created in `family` (jumps from the built-in chains,
    /// KUBE-* chains), in one restore; cheap when there is nothing (one
    /// `iptables-save`). Returns whether anything was removed; iptables not being
    /// installed is nothing to remove.
    pub async fn cleanup_family(&self, family: IpFamily) -> Result<bool, IptablesError> {
        let saved = match self.save(family, None).await {
            Ok(s) => s,
            Err(e) if e.is_not_installed() || not_installed_in_netns(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        if !saved.contains("KUBE-") {
            return Ok(false);
        }
        let Some(input) = cleanup_input(&saved) else {
            return Ok(false);
        };
        self.restore(family, &input).await?;
        Ok(true)
    }

    /// [`Self::cleanup_family`] for IPv4 and IPv6 (`--cleanup`, and nftables mode's
    /// start). Returns the families something was removed from.
    pub async fn cleanup(&self) -> Result<Vec<IpFamily>, IptablesError> {
        let mut cleaned = Vec::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            if self.cleanup_family(family).await? {
                cleaned.push(family);
            }
        }
        Ok(cleaned)
    }
}

/// `ip netns exec ns iptables-save` without the binary: exec fails in the child.
fn not_installed_in_netns(e: &IptablesError) -> bool {
    matches!(e, IptablesError::Failed { stderr, .. } if stderr.contains("No such file or directory") && stderr.contains("exec"))
}
