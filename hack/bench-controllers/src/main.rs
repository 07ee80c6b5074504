//! bench-controllers: issue 5's controller-manager benchmark. Starts the in-process
//! test apiserver (HTTPS, embedded SQLite), registers `--nodes` fake Ready nodes (with
//! Leases renewed as a kubelet does), runs the real `kube-controller-manager` and
//! `kube-scheduler` binaries against it as child processes (no leader election), and
//! plays every node's kubelet with one watch: a pod bound to a fake node is reported
//! Running and Ready through `pods/status`, as the issue's fake nodes do. It creates a
//! Deployment with 0 replicas, scales it to `--replicas`, and reports the time until
//! the ReplicaSet has created all pods, until all are bound, and until the Deployment
//! reports them all available, plus the manager's CPU time (utime + stime from
//! /proc/<pid>/stat) and peak RSS (VmHWM). Both binaries run unthrottled
//! (`--kube-api-qps=-1`) unless `--kube-api-qps` says otherwise.
//!
//! Layer: a hack/ tool; it depends on ferrokube-testing for the apiserver and must
//! not be a dependency of anything.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::process::Child;
use tokio::sync::Semaphore;

#[derive(Debug, Parser)]
struct Args {
    /// The kube-controller-manager binary (build it with --release first).
    #[arg(long, default_value = "target/release/kube-controller-manager")]
    manager: PathBuf,
    /// The kube-scheduler binary that binds the pods to the fake nodes.
    #[arg(long, default_value = "target/release/kube-scheduler")]
    scheduler: PathBuf,
    /// The manager's `--controllers` (upstream syntax).
    #[arg(long, default_value = "*")]
    controllers: String,
    /// Replicas to scale the Deployment to.
    #[arg(long, default_value_t = 3000)]
    replicas: i32,
    /// Fake Ready nodes.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// The `--kube-api-qps` both binaries get. The default, -1, turns their client
    /// throttling off, so that the benchmark measures the controllers and the
    /// scheduler rather than upstream's 20 and 50 requests a second; `0` leaves each
    /// binary its own default.
    #[arg(long, default_value_t = -1.0, allow_negative_numbers = true)]
    kube_api_qps: f32,
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

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn spawn(binary: &Path, args: &[String]) -> anyhow::Result<Child> {
    tokio::process::Command::new(binary)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

const NODE_RESOURCES: &str = r#"{"cpu": "32", "memory": "256Gi", "pods": "110"}"#;

async fn register_nodes(c: &kube::Client, count: usize) -> anyhow::Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(c.clone());
    let resources: serde_json::Value = serde_json::from_str(NODE_RESOURCES)?;
    let mut names = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("fake-node-{i:04}");
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        }))?;
        nodes.create(&PostParams::default(), &node).await?;
        names.push(name);
    }
    heartbeat(c, &names, &resources).await?;
    Ok(names)
}

/// What a kubelet's status loop and lease renewal keep writing: Ready with capacity,
/// and a Lease in kube-node-lease, so node lifecycle keeps the nodes Ready.
async fn heartbeat(
    c: &kube::Client,
    names: &[String],
    resources: &serde_json::Value,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(c.clone());
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
    let now = k8s_openapi::jiff::Timestamp::now();
    let seconds = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let micros = now.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string();
    for name in names {
        let status = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": seconds, "lastTransitionTime": seconds}],
            "allocatable": resources, "capacity": resources}});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(status))
            .await?;
        let renew = json!({"spec": {"renewTime": micros}});
        match leases
            .patch(name, &PatchParams::default(), &Patch::Merge(&renew))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let lease = json!({"metadata": {"name": name, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micros}});
                leases
                    .create(&PostParams::default(), &serde_json::from_value(lease)?)
                    .await?;
            }
            other => {
                other?;
            }
        }
    }
    Ok(())
}

/// Progress of the benchmark's pods, as seen by one watch.
#[derive(Default)]
struct Counts {
    created: AtomicUsize,
    bound: AtomicUsize,
    running: AtomicUsize,
}

/// Every fake node's kubelet in one watch over the benchmark's pods: a pod bound and
/// not yet Running is reported Running and Ready (at most 32 status writes in flight).
async fn fake_kubelets(c: kube::Client, counts: Arc<Counts>) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let in_flight = Arc::new(Semaphore::new(32));
    let mut seen = std::collections::HashSet::new();
    let mut bound = std::collections::HashSet::new();
    let mut running = std::collections::HashSet::new();
    let cfg = watcher::Config::default().labels("app=bench");
    let mut events = std::pin::pin!(watcher(pods.clone(), cfg).applied_objects());
    while let Some(pod) = events.try_next().await? {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if seen.insert(name.clone()) {
            counts.created.fetch_add(1, Ordering::Relaxed);
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        if node.is_none() || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if bound.insert(name.clone()) {
            counts.bound.fetch_add(1, Ordering::Relaxed);
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase == Some("Running") {
            if running.insert(name.clone()) {
                counts.running.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let permit = in_flight.clone().acquire_owned().await?;
        let pods = pods.clone();
        let n = seen.len();
        tokio::spawn(async move {
            let now = k8s_openapi::jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            let ip = format!("10.244.{}.{}", (n >> 8) & 255, n & 255);
            let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "hostIP": "192.0.2.1", "startTime": now,
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                    {"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
            let _ = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await;
            drop(permit);
        });
    }
    Ok(())
}

async fn available(deps: &Api<Deployment>) -> anyhow::Result<i32> {
    Ok(deps
        .get_status("bench")
        .await?
        .status
        .and_then(|s| s.available_replicas)
        .unwrap_or(0))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let srv = ferrokube_testing::TestApiServer::start().await?;
    let c = srv.client.clone();
    let kubeconfig = format!("--kubeconfig={}", srv.kubeconfig.display());
    let names = register_nodes(&c, args.nodes).await?;
    let qps: Vec<String> = if args.kube_api_qps == 0.0 {
        Vec::new()
    } else {
        vec![format!("--kube-api-qps={}", args.kube_api_qps)]
    };
    let mut manager = spawn(
        &args.manager,
        &[
            vec![
                kubeconfig.clone(),
                format!("--controllers={}", args.controllers),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ],
            qps.clone(),
        ]
        .concat(),
    )?;
    let mut scheduler = spawn(
        &args.scheduler,
        &[
            vec![
                kubeconfig,
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                "--secure-port=0".into(),
            ],
            qps,
        ]
        .concat(),
    )?;
    let pid = manager.id().context("manager pid")?;

    let counts = Arc::new(Counts::default());
    let kubelets = tokio::spawn(fake_kubelets(c.clone(), counts.clone()));
    let beats = {
        let c = c.clone();
        tokio::spawn(async move {
            let resources: serde_json::Value =
                serde_json::from_str(NODE_RESOURCES).unwrap_or_default();
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let _ = heartbeat(&c, &names, &resources).await;
            }
        })
    };

    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {"metadata": {"labels": {"app": "bench"}},
                         "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                  "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
        }
    }))?;
    deps.create(&PostParams::default(), &d).await?;
    // Let the manager start and create the (empty) ReplicaSet first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let load_before = load_average();
    let (cpu0, _) = usage(pid)?;
    let start = Instant::now();
    deps.patch(
        "bench",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": args.replicas}})),
    )
    .await?;
    let want = args.replicas as usize;
    let deadline = start + Duration::from_secs(args.timeout);
    let (mut created_at, mut bound_at, mut running_at) = (None, None, None);
    let available_at = loop {
        let now = start.elapsed();
        if created_at.is_none() && counts.created.load(Ordering::Relaxed) >= want {
            created_at = Some(now);
        }
        if bound_at.is_none() && counts.bound.load(Ordering::Relaxed) >= want {
            bound_at = Some(now);
        }
        if running_at.is_none() && counts.running.load(Ordering::Relaxed) >= want {
            running_at = Some(now);
        }
        if running_at.is_some() && available(&deps).await? >= args.replicas {
            break start.elapsed();
        }
        if kubelets.is_finished() {
            bail!("the fake kubelets' watch ended: {:?}", kubelets.await);
        }
        if let Some(status) = manager.try_wait()? {
            bail!("kube-controller-manager exited: {status}");
        }
        if let Some(status) = scheduler.try_wait()? {
            bail!("kube-scheduler exited: {status}");
        }
        if Instant::now() > deadline {
            bail!(
                "timed out after {}s: created {} bound {} running {}",
                args.timeout,
                counts.created.load(Ordering::Relaxed),
                counts.bound.load(Ordering::Relaxed),
                counts.running.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (cpu1, hwm) = usage(pid)?;
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64()).unwrap_or(f64::NAN);
    println!(
        "replicas={} nodes={} controllers={} all_pods_created_s={:.2} all_bound_s={:.2} all_running_s={:.2} deployment_available_s={:.2} manager_cpu_s_during_scale={:.2} manager_cpu_s_total={:.2} manager_peak_rss_mib={:.1} load_before=\"{}\" load_after=\"{}\"",
        args.replicas,
        args.nodes,
        args.controllers,
        secs(created_at),
        secs(bound_at),
        secs(running_at),
        available_at.as_secs_f64(),
        cpu1 - cpu0,
        cpu1,
        hwm as f64 / 1024.0,
        load_before,
        load_average(),
    );
    beats.abort();
    kubelets.abort();
    let _ = manager.kill().await;
    let _ = scheduler.kill().await;
    srv.stop().await;
    Ok(())
}
