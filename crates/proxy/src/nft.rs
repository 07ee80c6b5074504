//! The only place that runs `nft`: a transaction on stdin (`nft -f -`, atomic), the
//! objects of our table (`nft -j list table`), and the cleanup of our tables.

use crate::command::{self, CommandError};
use crate::net::IpFamily;
use crate::render::ExistingObjects;
use crate::rules::TABLE;

/// Errors running `nft`.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error("parsing nft JSON: {0}")]
    Json(String),
}

impl NftError {
    /// `nft` said the table does not exist.
    fn is_no_such_table(&self) -> bool {
        matches!(self, NftError::Command(CommandError::Failed { stderr, .. }) if stderr.contains("No such file"))
    }
}

/// How to run `nft`: the command line before nft's own arguments (`["nft"]`, or e.g.
/// `["ip", "netns", "exec", "ns1", "nft"]` in tests).
#[derive(Debug, Clone)]
pub struct Nft {
    argv: Vec<String>,
}

impl Default for Nft {
    fn default() -> Self {
        Nft {
            argv: vec!["nft".into()],
        }
    }
}

impl Nft {
    pub fn with_command(argv: Vec<String>) -> Self {
        Nft { argv }
    }

    /// Runs `nft <args>`, optionally with `stdin`; returns stdout.
    async fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String, NftError> {
        let argv: Vec<&str> = self
            .argv
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        Ok(command::run(&argv, stdin).await?)
    }

    /// Applies one transaction atomically (`nft -f -`).
    pub async fn apply(&self, transaction: &str) -> Result<(), NftError> {
        self.run(&["-f", "-"], Some(transaction)).await.map(|_| ())
    }

    /// What our table in `family` holds now (an absent table is empty).
    pub async fn existing(&self, family: IpFamily) -> Result<ExistingObjects, NftError> {
        match self
            .run(&["-j", "list", "table", family.nft(), TABLE], None)
            .await
        {
            Ok(json) => parse_existing(&json),
            Err(e) if e.is_no_such_table() => Ok(ExistingObjects::default()),
            Err(e) => Err(e),
        }
    }

    /// The human-readable listing of our table (`nft list table`).
    pub async fn list(&self, family: IpFamily) -> Result<String, NftError> {
        self.run(&["list", "table", family.nft(), TABLE], None)
            .await
    }

    /// Deletes our tables in both families (`--cleanup`); absent tables are fine.
    /// Returns the families whose table was deleted.
    pub async fn cleanup(&self) -> Result<Vec<IpFamily>, NftError> {
        let mut deleted = Vec::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            match self
                .run(&["delete", "table", family.nft(), TABLE], None)
                .await
            {
                Ok(_) => deleted.push(family),
                Err(e) if e.is_no_such_table() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}

/// Parses `nft -j list table` output into chain, set and map names.
pub fn parse_existing(json: &str) -> Result<ExistingObjects, NftError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| NftError::Json(e.to_string()))?;
    let mut out = ExistingObjects {
        table: true,
        ..Default::default()
    };
    for item in v["nftables"].as_array().into_iter().flatten() {
        if let Some(c) = item.get("chain") {
            if let Some(n) = c["name"].as_str() {
                out.chains.insert(n.to_string());
            }
        } else if let Some(s) = item.get("set") {
            if let Some(n) = s["name"].as_str() {
                out.sets.insert(n.to_string(), s["timeout"].as_u64());
            }
        } else if let Some(m) = item.get("map")
            && let Some(n) = m["name"].as_str()
        {
            out.maps.insert(n.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listing() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "ip", "name": "kube-proxy", "handle": 1}},
            {"chain": {"family": "ip", "table": "kube-proxy", "name": "services", "handle": 2}},
            {"set": {"family": "ip", "name": "affinity-X", "table": "kube-proxy", "type": "ipv4_addr", "flags": ["timeout"], "timeout": 10800}},
            {"set": {"family": "ip", "name": "nodeport-ips", "table": "kube-proxy", "type": "ipv4_addr"}},
            {"map": {"family": "ip", "name": "service-ips", "table": "kube-proxy", "type": ["ipv4_addr"], "map": "verdict"}},
            {"rule": {"family": "ip", "table": "kube-proxy", "chain": "services", "handle": 9, "expr": []}}]}"#;
        let e = parse_existing(json).unwrap();
        assert!(e.table);
        assert_eq!(e.chains.iter().collect::<Vec<_>>(), ["services"]);
        assert_eq!(e.sets.get("affinity-X"), Some(&Some(10800)));
        assert_eq!(e.sets.get("nodeport-ips"), Some(&None));
        assert!(e.maps.contains("service-ips"));
        assert!(parse_existing("not json").is_err());
    }
}
