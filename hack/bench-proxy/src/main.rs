//! kube-proxy benchmark: with N ClusterIP Services (2 endpoints each) programmed in a
//! throwaway network namespace, how long one EndpointSlice change takes to become rules
//! in place: the rule generation + rendering (pure), the `nft -f` apply of the
//! incremental transaction, and both together. Also the first (full) sync.
//!
//!   cargo run --release -p bench-proxy -- --services 1000,10000 --changes 20
//!
//! Needs root (`ip netns`, `nft`); the namespace is deleted at the end.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use ferrokube_proxy::net::{IpFamily, parse_cidrs};
use ferrokube_proxy::nft::Nft;
use ferrokube_proxy::proxier::Proxier;
use ferrokube_proxy::rules::ProxyConfig;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

#[derive(Debug, Parser)]
struct Opts {
    /// Comma-separated Service counts.
    #[arg(long, default_value = "1000,10000", value_delimiter = ',')]
    services: Vec<usize>,
    /// EndpointSlice changes measured per size.
    #[arg(long, default_value_t = 20)]
    changes: usize,
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn service(i: usize) -> Arc<Service> {
    let ip = format!("10.{}.{}.{}", 96 + i / 65536, (i / 256) % 256, i % 256);
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "bench", "name": format!("svc-{i}")},
            "spec": {"clusterIP": ip, "clusterIPs": [ip],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))
        .expect("valid Service"),
    )
}

fn slice(i: usize, endpoints: usize, generation: usize) -> Arc<EndpointSlice> {
    let eps: Vec<_> = (0..endpoints)
        .map(|e| {
            let n = i * 4 + e + generation;
            json!({"addresses": [format!("10.{}.{}.{}", 128 + n / 65536, (n / 256) % 256, n % 256)],
                   "nodeName": "bench-node", "conditions": {"ready": true}})
        })
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "bench", "name": format!("svc-{i}-abcde"),
                         "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": eps,
        }))
        .expect("valid EndpointSlice"),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(label: &str, mut v: Vec<Duration>) -> String {
    v.sort();
    let p = |q: f64| ms(v[((v.len() as f64 - 1.0) * q).round() as usize]);
    format!(
        "{label}: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        p(0.5),
        p(0.9),
        p(1.0)
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    if opts.changes == 0 {
        bail!("--changes must be at least 1");
    }
    let ns = Netns(format!("fk-bench-proxy-{}", std::process::id()));
    let st = Command::new("ip").args(["netns", "add", &ns.0]).status()?;
    if !st.success() {
        bail!("ip netns add {} failed (root needed)", ns.0);
    }
    let nft = Nft::with_command(
        ["ip", "netns", "exec", &ns.0, "nft"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
    );
    println!(
        "kube-proxy (nftables) benchmark: ClusterIP Services with 2 endpoints each; one EndpointSlice change = one Service's endpoint replaced"
    );
    for &n in &opts.services {
        nft.cleanup().await?;
        let mut cfg = ProxyConfig::new(IpFamily::V4, "bench-node");
        cfg.cluster_cidrs = parse_cidrs("10.128.0.0/9").map_err(anyhow::Error::msg)?;
        let mut p = Proxier::new(cfg);
        for i in 0..n {
            p.service_updated(service(i));
            p.slice_updated(slice(i, 2, 0));
        }
        let t = Instant::now();
        assert!(p.next_is_full());
        let existing = nft.existing(IpFamily::V4).await?;
        let plan = p.plan(Some(&existing));
        let gen_full = t.elapsed();
        let t = Instant::now();
        nft.apply(&plan.transaction).await.context("full sync")?;
        let apply_full = t.elapsed();
        p.applied(&plan);
        println!(
            "\n{n} Services: full sync: generate {:.1} ms ({} KiB of nft input), nft apply {:.1} ms",
            ms(gen_full),
            plan.transaction.len() / 1024,
            ms(apply_full)
        );

        let (mut gens, mut applies, mut totals) = (Vec::new(), Vec::new(), Vec::new());
        for c in 0..opts.changes {
            let i = (c * 7919) % n;
            p.slice_updated(slice(i, 2, 1 + c));
            let t0 = Instant::now();
            assert!(!p.next_is_full());
            let plan = p.plan(None);
            let generated = t0.elapsed();
            let t1 = Instant::now();
            nft.apply(&plan.transaction)
                .await
                .context("incremental sync")?;
            let applied = t1.elapsed();
            p.applied(&plan);
            if plan.changed_services.len() != 1 {
                bail!(
                    "expected one changed Service, got {:?}",
                    plan.changed_services
                );
            }
            gens.push(generated);
            applies.push(applied);
            totals.push(t0.elapsed());
        }
        println!("  EndpointSlice change x{}:", opts.changes);
        println!("    {}", summary("generate + render", gens));
        println!("    {}", summary("nft -f apply     ", applies));
        println!("    {}", summary("total            ", totals));
        let listing = nft.list(IpFamily::V4).await?;
        let chains = listing.matches("\tchain ").count();
        println!("  table holds {chains} chains");
    }
    nft.cleanup().await?;
    Ok(())
}
