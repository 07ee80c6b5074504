//! bench-controllers: issue 5's controller-manager benchmark. Starts the in-process
//! test apiserver (HTTPS, embedded SQLite), runs the real `kube-controller-manager`
//! binary against it as a child process (`--controllers=deployment,replicaset`, no
//! leader election), creates a Deployment with 0 replicas, scales it to `--replicas`,
//! and reports the time until the ReplicaSet's pods all exist, plus the manager's CPU
//! time (utime + stime from /proc/<pid>/stat) and peak RSS (VmHWM). No kubelet or
//! scheduler runs: pods stay Pending, which is what the ReplicaSet controller's
//! creation path needs.
//!
//! Layer: a hack/ tool; it depends on ferrokube-testing for the apiserver and must
//! not be a dependency of anything.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[derive(Debug, Parser)]
struct Args {
    /// The kube-controller-manager binary (build it with --release first).
    #[arg(long, default_value = "target/release/kube-controller-manager")]
    manager: PathBuf,
    /// Replicas to scale the Deployment to.
    #[arg(long, default_value_t = 3000)]
    replicas: i32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

/// (CPU seconds, peak RSS in KiB) of a live process.
fn usage(pid: u32) -> anyhow::Result<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).unwrap_or(&"0").parse::<u64>()?
        + fields.get(12).unwrap_or(&"0").parse::<u64>()?;
    // USER_HZ is 100 on Linux.
    let cpu = ticks as f64 / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or("0")
        .parse()?;
    Ok((cpu, hwm))
}

async fn pod_count(pods: &Api<Pod>) -> anyhow::Result<usize> {
    Ok(pods
        .list_metadata(&ListParams::default().labels("app=bench"))
        .await?
        .items
        .len())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let srv = ferrokube_testing::TestApiServer::start().await?;
    let c = srv.client.clone();
    let mut child = tokio::process::Command::new(&args.manager)
        .arg(format!("--kubeconfig={}", srv.kubeconfig.display()))
        .arg("--controllers=deployment,replicaset")
        .arg("--leader-elect=false")
        .arg("--secure-port=0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", args.manager.display()))?;
    let pid = child.id().context("manager pid")?;

    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {"metadata": {"labels": {"app": "bench"}},
                         "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
        }
    }))?;
    deps.create(&PostParams::default(), &d).await?;
    // Let the manager start and create the (empty) ReplicaSet first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cpu0, _) = usage(pid)?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let start = Instant::now();
    deps.patch(
        "bench",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": args.replicas}})),
    )
    .await?;
    let deadline = start + Duration::from_secs(args.timeout);
    let elapsed = loop {
        if pod_count(&pods).await? >= args.replicas as usize {
            break start.elapsed();
        }
        if Instant::now() > deadline {
            let _ = child.kill().await;
            bail!("timed out after {}s", args.timeout);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (cpu1, hwm) = usage(pid)?;
    println!(
        "replicas={} all_pods_created_s={:.2} manager_cpu_s_during_scale={:.2} manager_cpu_s_total={:.2} manager_peak_rss_mib={:.1}",
        args.replicas,
        elapsed.as_secs_f64(),
        cpu1 - cpu0,
        cpu1,
        hwm as f64 / 1024.0
    );
    let _ = child.kill().await;
    srv.stop().await;
    Ok(())
}
