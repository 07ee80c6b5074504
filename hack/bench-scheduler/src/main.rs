//! Scheduler benchmark driver (not a test), in the shape of upstream's
//! `test/integration/scheduler_perf` workloads:
//!
//! * `basic`: SchedulingBasic — nodes from `node-default.yaml` (4 CPU, 32Gi, 110 pods)
//!   and pods from `pod-default.yaml` (one container, 100m CPU / 500Mi requests);
//! * `spread`: TopologySpreading — nodes labelled round-robin with
//!   `topology.kubernetes.io/zone` in moon-1..3, pre-existing default pods, measured pods
//!   with a `maxSkew: 5` DoNotSchedule zone constraint (`pod-with-topology-spreading.yaml`);
//! * `anti-affinity`: SchedulingPodAntiAffinity — required pod anti-affinity on
//!   `kubernetes.io/hostname` (`pod-with-pod-anti-affinity.yaml`);
//! * `affinity`: SchedulingPodAffinity — every node in zone1, required pod affinity on
//!   the zone (`pod-with-pod-affinity.yaml`);
//! * `preferred-affinity` / `preferred-anti-affinity`: the preferred (scoring-only)
//!   variants on `kubernetes.io/hostname`.
//!
//! Nodes, the pre-existing ("init") pods and the measured pods are created through
//! the API with `--concurrency` requests in flight *before* the scheduler starts, so
//! creation is outside the measured window. Init pods are created already bound
//! (`spec.nodeName`, round-robin), as upstream's init phase leaves them. Then the
//! Ferrokube scheduler starts in-process (`ferrokube_scheduler::run::build`, the same
//! wiring as `cmd/kube-scheduler`) against an in-process apiserver
//! (`ferrokube_testing::TestApiServer`: HTTPS, embedded SQLite), and an independent
//! watch on the measured namespace records when each pod first shows
//! `spec.nodeName`. Throughput is measured pods / (last bind - first bind).
//! Latency percentiles come from the scheduler's own histograms
//! (`scheduler_pod_scheduling_sli_duration_seconds`, queue entry to bound, and
//! `scheduler_scheduling_attempt_duration_seconds{result="scheduled"}`).
//!
//! `--in-memory` runs the same scheduler without an apiserver: objects are fed to its
//! event handlers directly and binding is a no-op that confirms the pod the way the
//! informer would. The difference between the two runs is the cost of the API path.
//!
//! Usage: `bench-scheduler [--workload basic] [--nodes 5000] [--pods 10000] ...`

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use ferrokube_scheduler::KubeSchedulerConfiguration;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const INIT_NS: &str = "sched-0";
const MEASURE_NS: &str = "sched-1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Workload {
    Basic,
    Spread,
    Affinity,
    AntiAffinity,
    PreferredAffinity,
    PreferredAntiAffinity,
}

impl Workload {
    /// Upstream's 5000Nodes parameters (init pods, measured pods), except `basic`
    /// whose measured count is the 10,000.
    fn defaults(self) -> (usize, usize) {
        match self {
            Workload::Basic => (0, 10_000),
            Workload::Spread => (5_000, 2_000),
            Workload::Affinity => (5_000, 1_000),
            Workload::AntiAffinity => (1_000, 1_000),
            Workload::PreferredAffinity => (5_000, 1_000),
            Workload::PreferredAntiAffinity => (5_000, 1_000),
        }
    }

    fn upstream_name(self) -> &'static str {
        match self {
            Workload::Basic => "SchedulingBasic",
            Workload::Spread => "TopologySpreading",
            Workload::Affinity => "SchedulingPodAffinity",
            Workload::AntiAffinity => "SchedulingPodAntiAffinity",
            Workload::PreferredAffinity => "SchedulingPreferredPodAffinity",
            Workload::PreferredAntiAffinity => "SchedulingPreferredPodAntiAffinity",
        }
    }
}

#[derive(Parser, Debug, Clone)]
#[command(about = "Scheduler throughput benchmark (upstream scheduler_perf shapes)")]
struct Args {
    #[arg(long, value_enum, default_value = "basic")]
    workload: Workload,
    #[arg(long, default_value_t = 5_000)]
    nodes: usize,
    /// Measured pods (default per workload: basic 10,000, spread 2,000, others 1,000).
    #[arg(long)]
    pods: Option<usize>,
    /// Pods that exist, bound, before the measurement (default: upstream's per workload).
    #[arg(long)]
    init_pods: Option<usize>,
    /// Create requests in flight while populating the cluster.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The scheduler's `parallelism` (upstream default 16).
    #[arg(long)]
    parallelism: Option<i32>,
    /// The scheduler's `percentageOfNodesToScore` (0: upstream's adaptive default).
    #[arg(long)]
    percentage_of_nodes_to_score: Option<i32>,
    /// Give up when the measured pods are not all bound after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Run the scheduler without an apiserver (no-op binder): the algorithm alone.
    #[arg(long)]
    in_memory: bool,
}

// ---- Object templates -------------------------------------------------------------

fn node(w: Workload, i: usize) -> Value {
    let name = format!("scheduler-perf-{i}");
    let mut labels = json!({ "kubernetes.io/hostname": name });
    match w {
        Workload::Spread => {
            labels["topology.kubernetes.io/zone"] = format!("moon-{}", i % 3 + 1).into();
        }
        Workload::Affinity => labels["topology.kubernetes.io/zone"] = "zone1".into(),
        _ => {}
    }
    let res = json!({ "pods": "110", "cpu": "4", "memory": "32Gi" });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": labels },
        "spec": {},
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [{ "type": "Ready", "status": "True" }],
            "phase": "Running"
        }
    })
}

fn term(color: &str, key: &str) -> Value {
    json!({
        "labelSelector": { "matchLabels": { "color": color } },
        "topologyKey": key,
        "namespaces": [MEASURE_NS, INIT_NS]
    })
}

/// The pod template of the workload; `measured` picks the measured template where
/// upstream's init pods use another one (spread: init pods are `pod-default.yaml`).
fn pod(w: Workload, measured: bool, ns: &str, name: &str, node: Option<&str>) -> Value {
    const HOST: &str = "kubernetes.io/hostname";
    const ZONE: &str = "topology.kubernetes.io/zone";
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "containers": [{
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "ports": [{ "containerPort": 80 }],
                "resources": {
                    "limits": { "cpu": "100m", "memory": "500Mi" },
                    "requests": { "cpu": "100m", "memory": "500Mi" }
                }
            }]
        }
    });
    let (color, extra) = match w {
        Workload::Basic => (None, None),
        Workload::Spread if !measured => (None, None),
        Workload::Spread => (
            Some("blue"),
            Some((
                "topologySpreadConstraints",
                json!([{
                    "maxSkew": 5,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": { "matchLabels": { "color": "blue" } }
                }]),
            )),
        ),
        Workload::Affinity => (
            Some("blue"),
            Some((
                "affinity",
                json!({ "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [term("blue", ZONE)]
                }}),
            )),
        ),
        Workload::AntiAffinity => (
            Some("green"),
            Some((
                "affinity",
                json!({ "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [term("green", HOST)]
                }}),
            )),
        ),
        Workload::PreferredAffinity => (
            Some("red"),
            Some((
                "affinity",
                json!({ "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution":
                        [{ "weight": 1, "podAffinityTerm": term("red", HOST) }]
                }}),
            )),
        ),
        Workload::PreferredAntiAffinity => (
            Some("yellow"),
            Some((
                "affinity",
                json!({ "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution":
                        [{ "weight": 1, "podAffinityTerm": term("yellow", HOST) }]
                }}),
            )),
        ),
    };
    if let Some(c) = color {
        p["metadata"]["labels"] = json!({ "color": c });
    }
    if let Some((k, v)) = extra {
        p["spec"][k] = v;
    }
    if let Some(n) = node {
        p["spec"]["nodeName"] = n.into();
    }
    p
}

fn node_name(i: usize) -> String {
    format!("scheduler-perf-{i}")
}

// ---- Metrics ----------------------------------------------------------------------

/// Cumulative buckets `(le, count)` of one histogram series in Prometheus text.
fn buckets(text: &str, series: &str, labels: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{series}_bucket{{{labels}");
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let le_at = rest.find("le=\"")? + 4;
            let le_end = le_at + rest[le_at..].find('"')?;
            let le = match &rest[le_at..le_end] {
                "+Inf" => f64::INFINITY,
                v => v.parse().ok()?,
            };
            let count = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, count))
        })
        .collect()
}

/// `histogram_quantile` with linear interpolation inside the bucket; `None` when
/// empty, and the largest finite bound (reported as "> bound") when the quantile
/// falls in +Inf.
fn quantile(b: &[(f64, f64)], q: f64) -> Option<(f64, bool)> {
    let total = b.last()?.1;
    if total == 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lo, mut below) = (0.0, 0.0);
    for &(le, c) in b {
        if c >= rank {
            if le.is_infinite() {
                return Some((lo, true));
            }
            let frac = if c > below {
                (rank - below) / (c - below)
            } else {
                1.0
            };
            return Some((lo + (le - lo) * frac, false));
        }
        if le.is_finite() {
            lo = le;
        }
        below = c;
    }
    None
}

fn fmt_q(v: Option<(f64, bool)>) -> String {
    match v {
        None => "n/a".into(),
        Some((s, true)) => format!("> {:.0} ms", s * 1e3),
        Some((s, false)) if s < 0.1 => format!("{:.1} ms", s * 1e3),
        Some((s, false)) => format!("{:.0} ms", s * 1e3),
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Bind times observed for the measured pods.
#[derive(Default)]
struct Binds {
    seen: HashSet<String>,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Binds {
    /// Records a bind; returns the number of distinct pods bound so far.
    fn record(&mut self, key: String) -> usize {
        if self.seen.insert(key) {
            let now = Instant::now();
            self.first.get_or_insert(now);
            self.last = Some(now);
        }
        self.seen.len()
    }
}

fn scheduler_config(args: &Args) -> KubeSchedulerConfiguration {
    let mut c = KubeSchedulerConfiguration::default_config();
    if let Some(p) = args.parallelism {
        c.parallelism = Some(p);
    }
    if let Some(p) = args.percentage_of_nodes_to_score {
        c.percentage_of_nodes_to_score = Some(p);
    }
    c
}

struct Outcome {
    bound: usize,
    first: Instant,
    last: Instant,
    started: Instant,
    metrics: String,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let (def_init, def_pods) = args.workload.defaults();
    let init = args.init_pods.unwrap_or(def_init);
    let pods = args.pods.unwrap_or(def_pods);
    if args.nodes == 0 || pods == 0 {
        bail!("--nodes and --pods must be positive");
    }
    if args.workload == Workload::AntiAffinity && init + pods > args.nodes {
        bail!("anti-affinity places one pod per node: init + pods must be <= nodes");
    }
    eprintln!(
        "workload {:?} ({}): {} nodes, {} init pods, {} measured pods{}; load average {}",
        args.workload,
        args.workload.upstream_name(),
        args.nodes,
        init,
        pods,
        if args.in_memory { ", in-memory" } else { "" },
        load_average()
    );
    let load_before = load_average();
    let out = if args.in_memory {
        run_in_memory(&args, init, pods).await?
    } else {
        run_api(&args, init, pods).await?
    };
    let load_after = load_average();
    report(&args, init, pods, &out, &load_before, &load_after);
    Ok(())
}

fn report(args: &Args, init: usize, pods: usize, o: &Outcome, lb: &str, la: &str) {
    let window = o.last.duration_since(o.first).as_secs_f64();
    let rate = if window > 0.0 {
        (o.bound.saturating_sub(1)) as f64 / window
    } else {
        f64::NAN
    };
    let since_start = o.last.duration_since(o.started).as_secs_f64();
    let e2e = buckets(
        &o.metrics,
        "scheduler_pod_scheduling_sli_duration_seconds",
        "",
    );
    let attempt = buckets(
        &o.metrics,
        "scheduler_scheduling_attempt_duration_seconds",
        "profile=\"default-scheduler\",result=\"scheduled\",",
    );
    let unsched: f64 = o
        .metrics
        .lines()
        .filter(|l| {
            l.starts_with("scheduler_schedule_attempts_total")
                && !l.contains("result=\"scheduled\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b);
    println!();
    println!(
        "| workload | nodes | init pods | measured pods | mode | pods/s (first→last bind) | window | start→last bind | e2e p50 | e2e p99 | attempt p50 | attempt p99 | failed attempts | load avg before → after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {:.0} | {:.2} s | {:.2} s | {} | {} | {} | {} | {} | {} → {} |",
        args.workload.upstream_name(),
        args.nodes,
        init,
        pods,
        if args.in_memory {
            "in-memory"
        } else {
            "apiserver"
        },
        rate,
        window,
        since_start,
        fmt_q(quantile(&e2e, 0.5)),
        fmt_q(quantile(&e2e, 0.99)),
        fmt_q(quantile(&attempt, 0.5)),
        fmt_q(quantile(&attempt, 0.99)),
        unsched,
        lb,
        la
    );
}

// ---- Against the in-process apiserver -------------------------------------------

async fn run_api(args: &Args, init: usize, pods: usize) -> Result<Outcome> {
    // No node lifecycle controller runs here to lift the not-ready taint that
    // TaintNodesByCondition puts on new nodes.
    let srv = ferrokube_testing::TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("TaintNodesByCondition", false)
            .expect("a known plugin")
    })
    .await
    .map_err(|e| anyhow::anyhow!("starting the test apiserver: {e}"))?;
    let result = populate_and_measure(&srv, args, init, pods).await;
    srv.stop().await;
    result
}

async fn new_client(srv: &ferrokube_testing::TestApiServer) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(&srv.kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

async fn populate_and_measure(
    srv: &ferrokube_testing::TestApiServer,
    args: &Args,
    init: usize,
    pods: usize,
) -> Result<Outcome> {
    let client = new_client(srv).await?;
    let c = args.concurrency.max(1);
    let t = Instant::now();
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in [INIT_NS, MEASURE_NS] {
        let n: Namespace = serde_json::from_value(json!({ "metadata": { "name": ns } }))?;
        nss.create(&PostParams::default(), &n).await?;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let w = args.workload;
    futures::stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let n: Node = serde_json::from_value(node(w, i))?;
                let status = n.status.clone();
                nodes.create(&PostParams::default(), &n).await?;
                // Status is not writable on create.
                nodes
                    .patch_status(
                        &node_name(i),
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(c)
        .try_collect::<()>()
        .await
        .context("creating nodes")?;
    eprintln!(
        "created {} nodes in {:.1} s",
        args.nodes,
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let nodes_n = args.nodes;
    let create_pods = |ns: &'static str, count: usize, measured: bool| {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        futures::stream::iter(0..count)
            .map(move |i| {
                let api = api.clone();
                async move {
                    let bound = (!measured).then(|| node_name(i % nodes_n));
                    let p: Pod = serde_json::from_value(pod(
                        w,
                        measured,
                        ns,
                        &format!("pod-{i}"),
                        bound.as_deref(),
                    ))?;
                    api.create(&PostParams::default(), &p).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(c)
            .try_collect::<()>()
    };
    create_pods(INIT_NS, init, false)
        .await
        .context("creating init pods")?;
    create_pods(MEASURE_NS, pods, true)
        .await
        .context("creating measured pods")?;
    eprintln!(
        "created {init} init pods and {pods} measured pods in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // An independent watch on the measured namespace, established before the
    // scheduler starts.
    let watch_client = new_client(srv).await?;
    let api: Api<Pod> = Api::namespaced(watch_client, MEASURE_NS);
    let list = api.list_metadata(&ListParams::default().limit(1)).await?;
    let mut rv = list.metadata.resource_version.unwrap_or_default();
    let binds = Arc::new(Mutex::new(Binds::default()));
    let done = CancellationToken::new();
    let mut stream = api
        .watch(&WatchParams::default().timeout(290), &rv)
        .await?
        .boxed();
    let watcher = {
        let binds = binds.clone();
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                while let Some(ev) = stream.try_next().await? {
                    let p = match ev {
                        WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
                        WatchEvent::Bookmark(b) => {
                            rv = b.metadata.resource_version;
                            continue;
                        }
                        WatchEvent::Deleted(_) => continue,
                        WatchEvent::Error(e) => bail!("watch: {e:?}"),
                    };
                    if let Some(v) = &p.metadata.resource_version {
                        rv.clone_from(v);
                    }
                    let bound = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty());
                    if bound {
                        let n = binds
                            .lock()
                            .record(p.metadata.name.clone().unwrap_or_default());
                        if n >= pods {
                            done.cancel();
                            return Ok(());
                        }
                    }
                }
                stream = api
                    .watch(&WatchParams::default().timeout(290), &rv)
                    .await?
                    .boxed();
            }
        })
    };

    let config = scheduler_config(args);
    let running = ferrokube_scheduler::run::build(srv.client.clone(), &config)?;
    let scheduler = running.scheduler.clone();
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(running.run(cancel.clone()));
    let progress = progress_printer(binds.clone(), pods, started);
    let finished = tokio::select! {
        _ = done.cancelled() => true,
        _ = tokio::time::sleep(Duration::from_secs(args.timeout)) => false,
        r = task_finished(&watcher) => { r?; false }
    };
    progress.abort();
    let metrics = scheduler.metrics.render(scheduler.queue.pending());
    cancel.cancel();
    let _ = task.await;
    watcher.abort();
    if !finished {
        let sample = Api::<Pod>::namespaced(srv.client.clone(), MEASURE_NS)
            .get("pod-0")
            .await
            .ok()
            .and_then(|p| p.status)
            .and_then(|s| s.conditions);
        bail!(
            "only {} of {pods} pods bound after {} s; pending: {:?}; pod-0 conditions: {sample:?}\n{}",
            binds.lock().seen.len(),
            args.timeout,
            scheduler.queue.pending(),
            metrics
                .lines()
                .filter(|l| l.starts_with("scheduler_schedule_attempts_total"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let b = binds.lock();
    Ok(Outcome {
        bound: b.seen.len(),
        first: b.first.context("no bind")?,
        last: b.last.context("no bind")?,
        started,
        metrics,
    })
}

async fn task_finished(h: &tokio::task::JoinHandle<Result<()>>) -> Result<()> {
    while !h.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the watch ended early")
}

fn progress_printer(
    binds: Arc<Mutex<Binds>>,
    pods: usize,
    started: Instant,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let n = binds.lock().seen.len();
            eprintln!(
                "t={:>5.1}s bound {n}/{pods} (+{}/s)",
                started.elapsed().as_secs_f64(),
                n - last
            );
            last = n;
        }
    })
}

// ---- In memory (no apiserver) ----------------------------------------------------

mod in_memory {
    use super::*;
    use ferrokube_scheduler::cache::Cache;
    use ferrokube_scheduler::framework::{ClusterLister, Framework, Handle, PodBinder};
    use ferrokube_scheduler::metrics::Metrics;
    use ferrokube_scheduler::plugins::default_registry;
    use ferrokube_scheduler::queue::{BackoffConfig, RealClock, SchedulingQueue};
    use ferrokube_scheduler::scheduler::{PodEvent, Scheduler, SchedulerApi};
    use k8s_openapi::api::core::v1::PodCondition;
    use tokio::sync::mpsc;

    struct NoLister;
    impl ClusterLister for NoLister {}

    /// Binding succeeds at once; the bound pod goes to the informer stand-in.
    struct Binder(mpsc::UnboundedSender<(Pod, String)>);

    #[async_trait::async_trait]
    impl PodBinder for Binder {
        async fn bind(&self, pod: &Pod, node: &str) -> Result<(), String> {
            self.0
                .send((pod.clone(), node.to_string()))
                .map_err(|e| e.to_string())
        }
    }

    struct NoApi;
    #[async_trait::async_trait]
    impl SchedulerApi for NoApi {
        async fn update_pod_status(
            &self,
            _: &Pod,
            _: PodCondition,
            _: Option<String>,
        ) -> Result<(), String> {
            Ok(())
        }
        async fn evict_victim(&self, _: &Pod, _: &str) -> Result<(), String> {
            Ok(())
        }
        fn event(&self, _: &str, _: PodEvent<'_>) {}
    }

    pub(super) async fn run(args: &Args, init: usize, pods: usize) -> Result<Outcome> {
        let config = scheduler_config(args);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handle = Handle {
            lister: Arc::new(NoLister),
            binder: Some(Arc::new(Binder(tx))),
            volume_binder: None,
            parallelism: config.parallelism.unwrap_or(16).max(1) as usize,
        };
        let registry = default_registry();
        let mut fws = Vec::new();
        for p in &config.profiles {
            fws.push(Arc::new(Framework::new(&registry, p, handle.clone())?));
        }
        let queue = Arc::new(SchedulingQueue::new(
            &fws,
            BackoffConfig {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(10),
            },
            Arc::new(RealClock),
        ));
        let sched = Arc::new(Scheduler::new(
            fws,
            Arc::new(Mutex::new(Cache::new(Duration::from_secs(15 * 60)))),
            queue,
            Arc::new(NoApi),
            Arc::new(Metrics::new()),
            config.percentage_of_nodes_to_score.unwrap_or(0),
        ));
        let w = args.workload;
        let uid = AtomicUsize::new(0);
        let with_uid = |mut p: Value| -> Result<Pod> {
            p["metadata"]["uid"] = format!("uid-{}", uid.fetch_add(1, Ordering::Relaxed)).into();
            Ok(serde_json::from_value(p)?)
        };
        for i in 0..args.nodes {
            sched.on_node(None, Arc::new(serde_json::from_value(node(w, i))?));
        }
        for i in 0..init {
            let n = node_name(i % args.nodes);
            let p = with_uid(pod(w, false, INIT_NS, &format!("pod-{i}"), Some(&n)))?;
            sched.on_pod(None, Arc::new(p));
        }
        for i in 0..pods {
            let p = with_uid(pod(w, true, MEASURE_NS, &format!("pod-{i}"), None))?;
            sched.on_pod(None, Arc::new(p));
        }
        let binds = Arc::new(Mutex::new(Binds::default()));
        let done = CancellationToken::new();
        // The informer stand-in: confirms the assumed pod as the watch would.
        let confirm = {
            let sched = sched.clone();
            let binds = binds.clone();
            let done = done.clone();
            tokio::spawn(async move {
                while let Some((old, node)) = rx.recv().await {
                    let key = old.metadata.name.clone().unwrap_or_default();
                    let mut new = old.clone();
                    if let Some(s) = new.spec.as_mut() {
                        s.node_name = Some(node);
                    }
                    sched.on_pod(Some(&old), Arc::new(new));
                    if binds.lock().record(key) >= pods {
                        done.cancel();
                    }
                }
            })
        };
        let started = Instant::now();
        let main = tokio::spawn(sched.clone().run());
        let progress = progress_printer(binds.clone(), pods, started);
        let ok = tokio::select! {
            _ = done.cancelled() => true,
            _ = tokio::time::sleep(Duration::from_secs(args.timeout)) => false,
        };
        progress.abort();
        let metrics = sched.metrics.render(sched.queue.pending());
        sched.queue.close();
        let _ = main.await;
        confirm.abort();
        let b = binds.lock();
        if !ok {
            bail!(
                "only {} of {pods} pods bound after {} s",
                b.seen.len(),
                args.timeout
            );
        }
        Ok(Outcome {
            bound: b.seen.len(),
            first: b.first.context("no bind")?,
            last: b.last.context("no bind")?,
            started,
            metrics,
        })
    }
}

async fn run_in_memory(args: &Args, init: usize, pods: usize) -> Result<Outcome> {
    in_memory::run(args, init, pods).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_interpolates_within_buckets() {
        let text = "x_bucket{le=\"0.001\"} 0\nx_bucket{le=\"0.002\"} 50\nx_bucket{le=\"0.004\"} 100\nx_bucket{le=\"+Inf\"} 100\n";
        let b = buckets(text, "x", "");
        assert_eq!(b.len(), 4);
        let (p50, over) = quantile(&b, 0.5).unwrap();
        assert!(!over && (p50 - 0.002).abs() < 1e-9);
        let (p99, _) = quantile(&b, 0.99).unwrap();
        assert!(p99 > 0.0039 && p99 <= 0.004);
        let text = "x_bucket{le=\"1\"} 1\nx_bucket{le=\"+Inf\"} 10\n";
        assert_eq!(quantile(&buckets(text, "x", ""), 0.99), Some((1.0, true)));
    }
}
