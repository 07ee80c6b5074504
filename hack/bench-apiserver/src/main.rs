//! API server benchmark driver (not a test). For each backend it spawns the real
//! `kube-apiserver` binary (fresh PKI and store) and measures, in the same run:
//!
//! * time from process start to `/readyz` 200, and idle RSS (`VmRSS` of the process
//!   after ready and 5 s idle);
//! * pod creates/s through the API with N concurrent clients (each a task), three
//!   times: with kube-rs's typed `Api<Pod>::create`; with pod JSON encoded up front and
//!   POSTed through `kube::Client::send` (the client's own serde work left out, as the
//!   baseline has none; those pods go to namespace `bench-preencoded`); and with the
//!   same JSON POSTed by a lean client, one hyper HTTP/1 connection per writer
//!   (`direct.rs`; namespace `bench-direct`), so that less of the two cores goes to
//!   the client's task hand-offs. All next to the
//!   raw storage baseline: `Storage::create` directly on the same backend type (a fresh
//!   SQLite file / the same etcd under another prefix) with the same concurrency, the
//!   same number of objects and values of the size the apiserver stores for a pod
//!   (driven both from one task and from a task per writer; the faster counts);
//! * on the embedded store, for reference only, the typed client's creates against the
//!   storage issue's raw SQLite baseline (raw rusqlite inserts with the store's
//!   durability, one commit per insert; `bench_storage::raw_sqlite_inserts`);
//! * the transport floor (`floor.rs`): the pre-encoded client against a server that
//!   only stores each body, showing how much of the gap to the raw baseline is HTTPS
//!   and the clients, and how much the apiserver's own work;
//! * where each create phase's CPU went (`cpu.rs`), per create: the apiserver (or the
//!   floor server), this driver (the clients; for the raw baseline the store itself),
//!   other processes (etcd), and the machine's idle share;
//! * GET latency p50/p99 (one pod, sequential) and LIST latency p50/p99 (a namespace of
//!   100 pods, resourceVersion unset, i.e. a consistent read);
//! * LIST of every created pod (default 50,000) from the watch cache (resourceVersion=0;
//!   JSON, and protobuf as client-go controllers ask for it, no compression; time until
//!   the whole body is received);
//! * watch fan-out: W watchers (default 1,000) on one namespace, E pod creates; events/s
//!   delivered across all watchers and delivery latency p50/p99 (from the create call to
//!   the event reaching each watcher).
//!
//! Usage: `cargo build --release -p kube-apiserver -p bench-apiserver &&
//! $CARGO_TARGET_DIR/release/bench-apiserver [--backends sqlite,etcd]`. The apiserver
//! binary is taken next to this one unless `--apiserver` says otherwise; it is only
//! ever stopped by its own pid.

use std::collections::HashMap;
use std::fs::File;
use std::net::TcpListener;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use ferrokube_storage::Storage;
use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;

mod cpu;
mod direct;
mod floor;

// The driver's clients share the two cores with the apiserver; on glibc's malloc their
// allocations (kube-rs, hyper, serde of each pod) took about a tenth of the driver's
// CPU. jemalloc, as in kube-apiserver, leaves more of the machine to the server
// measured; the raw baseline's writers run on it as well.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug, Clone)]
struct Args {
    /// Backends to measure, comma separated: sqlite, etcd.
    #[arg(long, default_value = "sqlite,etcd")]
    backends: String,
    /// The kube-apiserver binary (default: next to this binary).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// Concurrent clients for the create phases (API and raw).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Pods created through the API (all of them are then listed from the cache).
    #[arg(long, default_value_t = 50_000)]
    pods: usize,
    /// Sequential GETs and LISTs for the latency figures.
    #[arg(long, default_value_t = 2_000)]
    gets: usize,
    #[arg(long, default_value_t = 200)]
    lists: usize,
    /// LISTs of all pods from the cache (resourceVersion=0).
    #[arg(long, default_value_t = 10)]
    cache_lists: usize,
    #[arg(long, default_value_t = 1_000)]
    watchers: usize,
    /// Pod creates while the watchers listen.
    #[arg(long, default_value_t = 200)]
    watch_events: usize,
    /// Sequential ConfigMap creates that a validating admission webhook (an HTTPS
    /// server in this driver) admits; 0 leaves the phase out.
    #[arg(long, default_value_t = 500)]
    webhook_creates: usize,
    /// Seconds to stay idle before reading the RSS.
    #[arg(long, default_value_t = 5)]
    idle_secs: u64,
    /// Directory for data (default: a temp dir under /var/tmp).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// One more kube-apiserver flag, repeatable (e.g.
    /// `--apiserver-arg=--audit-policy-file=/tmp/policy.yaml`).
    #[arg(long, allow_hyphen_values = true)]
    apiserver_arg: Vec<String>,
    /// Run this driver (every client, and the raw baseline's writers) on one thread, a
    /// tokio current-thread runtime, instead of a worker per core. The clients' tasks
    /// then hand requests to each other without waking another thread.
    #[arg(long)]
    current_thread: bool,
    /// Rows inserted by each of the two runs of the storage issue's raw SQLite baseline
    /// (raw rusqlite, one commit per insert), shown for reference next to the API's
    /// creates on the embedded store; 0 leaves it out.
    #[arg(long, default_value_t = 4_000)]
    sqlite_reference_inserts: usize,
    /// The raw baseline and the typed client's creates alternate in this many rounds,
    /// each making its share of the pods, so that a change in the machine's speed during
    /// the run (this VM's disk and CPU change from one minute to the next) falls on both
    /// sides of the ratio.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    #[command(flatten)]
    floor: floor::FloorArgs,
}

fn main() -> Result<()> {
    let args = Args::parse();
    // Every client makes the same number of creates, and the cache LIST then expects
    // all of them: a remainder would be left uncreated and fail that check.
    if args.concurrency == 0 || args.pods % args.concurrency != 0 {
        bail!(
            "--pods ({}) must be a multiple of --concurrency ({})",
            args.pods,
            args.concurrency
        );
    }
    if args.rounds == 0 || args.rounds > args.pods / args.concurrency {
        bail!(
            "--rounds ({}) must be between 1 and the creates of each client (--pods / --concurrency = {})",
            args.rounds,
            args.pods / args.concurrency
        );
    }
    let mut runtime = if args.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    runtime.enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    if let Some(port) = args.floor.floor_serve {
        return floor::serve(port, &args.floor).await;
    }
    let apiserver = match &args.apiserver {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("no parent dir")?
            .join("kube-apiserver"),
    };
    if !apiserver.is_file() {
        bail!(
            "{} not found: build it (cargo build --release -p kube-apiserver) or pass --apiserver",
            apiserver.display()
        );
    }
    let base = match &args.dir {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::Builder::new()
            .prefix("bench-apiserver")
            .tempdir_in("/var/tmp")?,
    };
    eprintln!("kube-apiserver: {}", apiserver.display());
    eprintln!("load average at start: {}", loadavg());
    let mut rows = Vec::new();
    for backend in args.backends.split(',').map(str::trim) {
        let dir = base.path().join(backend);
        std::fs::create_dir_all(&dir)?;
        let found = match backend {
            "sqlite" => bench_backend(&args, &apiserver, &dir, Backend::Sqlite).await?,
            "etcd" => {
                let etcd = ferrokube_storage_etcd::testing::EtcdProcess::start()
                    .await
                    .map_err(|e| anyhow::anyhow!("starting etcd: {e}"))?;
                let rows =
                    bench_backend(&args, &apiserver, &dir, Backend::Etcd(etcd.endpoint())).await;
                drop(etcd);
                rows?
            }
            other => bail!("unknown backend {other:?}"),
        };
        rows.extend(found);
        eprintln!("load average after {backend}: {}", loadavg());
    }
    println!("\n| backend | measure | result | baseline | ratio |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

enum Backend {
    Sqlite,
    Etcd(String),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Etcd(_) => "etcd",
        }
    }
}

struct Row {
    backend: &'static str,
    measure: String,
    result: String,
    baseline: String,
    ratio: String,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "| {} | {} | {} | {} | {} |",
            self.backend, self.measure, self.result, self.baseline, self.ratio
        )
    }
}

fn row(backend: &'static str, measure: impl Into<String>, result: impl Into<String>) -> Row {
    let r = Row {
        backend,
        measure: measure.into(),
        result: result.into(),
        baseline: String::new(),
        ratio: String::new(),
    };
    eprintln!("  {}: {}", r.measure, r.result);
    r
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// p50/p99 of a histogram of microseconds.
fn pcts(h: &Histogram<u64>) -> String {
    format!(
        "p50 {:.2} ms, p99 {:.2} ms",
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0
    )
}

/// A server this driver spawned (the apiserver or the floor): stopped (SIGTERM, then
/// SIGKILL after 10 s) by its pid.
struct ServerProcess {
    child: Child,
}

impl ServerProcess {
    /// Polls `path` through `client` until it answers 200. Fails when `limit` passes
    /// or the process exits first; `what` names it in the error.
    async fn wait_ready(
        &mut self,
        client: &kube::Client,
        path: &str,
        limit: Duration,
        what: &str,
        dir: &Path,
    ) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Ok((200, _)) = raw_get(client, path).await {
                return Ok(());
            }
            if started.elapsed() > limit {
                bail!("{what} not ready in {limit:?}; see {}", dir.display());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("{what} exited: {status}; see {}", dir.display());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .context("no VmRSS")?;
        Ok(line
            .split_whitespace()
            .nth(1)
            .context("VmRSS value")?
            .parse()?)
    }

    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A store of the backend's type next to the apiserver's own: a fresh SQLite file at
/// `sqlite_path`, or the same etcd under `etcd_prefix`.
async fn open_store(
    backend: &Backend,
    sqlite_path: &Path,
    etcd_prefix: &str,
) -> Result<Arc<dyn Storage>> {
    Ok(match backend {
        Backend::Sqlite => Arc::new(ferrokube_storage_sqlite::SqliteStorage::open(
            sqlite_path,
            Default::default(),
        )?),
        Backend::Etcd(endpoint) => Arc::new(
            ferrokube_storage_etcd::EtcdStorage::connect(
                std::slice::from_ref(endpoint),
                ferrokube_storage_etcd::EtcdOptions {
                    prefix: etcd_prefix.into(),
                    ..Default::default()
                },
            )
            .await?,
        ),
    })
}

/// A kube client from the admin kubeconfig.
async fn client(kubeconfig: &Path, compression: bool) -> Result<kube::Client> {
    client_of(kubeconfig, compression, None).await
}

/// A kube client from the admin kubeconfig, sent to `server` instead of the
/// kubeconfig's URL if given.
async fn client_of(
    kubeconfig: &Path,
    compression: bool,
    server: Option<&str>,
) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    if let Some(server) = server {
        cfg.cluster_url = server.parse()?;
    }
    cfg.disable_compression = !compression;
    cfg.read_timeout = Some(Duration::from_secs(300));
    Ok(kube::Client::try_from(cfg)?)
}

/// GET `path` through `client`; (status, body) with the body fully received.
async fn raw_get(client: &kube::Client, path: &str) -> Result<(u16, Bytes)> {
    raw_get_as(client, path, "application/json").await
}

async fn raw_get_as(client: &kube::Client, path: &str, accept: &str) -> Result<(u16, Bytes)> {
    let req = http::Request::get(path)
        .header("Accept", accept)
        .body(kube::client::Body::empty())?;
    let resp = client.send(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// The encoding a LIST from the cache is asked in.
#[derive(Clone, Copy)]
enum ListWire {
    Json,
    Protobuf,
}

/// `args.cache_lists` LISTs of every pod from the watch cache in `wire`: time until
/// the whole body is received; the count is checked on one more.
async fn cache_list(
    name: &'static str,
    client: &kube::Client,
    wire: ListWire,
    args: &Args,
) -> Result<Row> {
    let path = "/api/v1/namespaces/bench/pods?resourceVersion=0";
    let (accept, label) = match wire {
        ListWire::Json => ("application/json", "JSON"),
        ListWire::Protobuf => (ferrokube_protobuf::MEDIA_TYPE, "protobuf"),
    };
    let mut times = Vec::new();
    let mut body = Bytes::new();
    for _ in 0..args.cache_lists.max(1) {
        let t = Instant::now();
        let (status, b) = raw_get_as(client, path, accept).await?;
        times.push(t.elapsed());
        if status != 200 {
            bail!(
                "{path}: {status}: {}",
                String::from_utf8_lossy(&b[..b.len().min(500)])
            );
        }
        body = b;
    }
    let list: serde_json::Value = match wire {
        ListWire::Json => serde_json::from_slice(&body)?,
        ListWire::Protobuf => ferrokube_protobuf::decode(&body)?.1,
    };
    let count = list["items"].as_array().map_or(0, Vec::len);
    if count != args.pods {
        bail!(
            "cache list ({label}) returned {count} pods, want {}",
            args.pods
        );
    }
    times.sort();
    Ok(row(
        name,
        format!(
            "LIST {count} pods from the cache (resourceVersion=0, {label} {:.1} MiB, no gzip), {}×",
            body.len() as f64 / 1048576.0,
            times.len()
        ),
        format!(
            "p50 {}, max {}",
            ms(times[times.len() / 2]),
            ms(*times.last().expect("non-empty"))
        ),
    ))
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "load"}},
        "spec": {"containers": [{
            "name": "main",
            "image": "registry.example/bench/app:1.0",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        }]},
    }))
    .expect("pod literal")
}

async fn bench_backend(
    args: &Args,
    apiserver: &Path,
    dir: &Path,
    backend: Backend,
) -> Result<Vec<Row>> {
    let name = backend.name();
    eprintln!("== {name}");
    let mut rows = Vec::new();

    // Spawn the real binary on a fresh PKI and store.
    let port = free_port()?;
    let url = format!("https://127.0.0.1:{port}");
    let pki = ferrokube_pki::write_cluster_pki(
        &dir.join("pki"),
        &ferrokube_pki::ClusterPkiOptions::new(url.clone()),
    )
    .map_err(|e| anyhow::anyhow!("pki: {e}"))?;
    let mut cmd = Command::new(apiserver);
    cmd.arg("--secure-port")
        .arg(port.to_string())
        .args([
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
        ])
        .arg("--tls-cert-file")
        .arg(&pki.apiserver_cert)
        .arg("--tls-private-key-file")
        .arg(&pki.apiserver_key)
        .arg("--client-ca-file")
        .arg(&pki.ca_cert)
        .arg("--data-dir")
        .arg(dir.join("data"))
        // No controller-manager runs here to create each namespace's default
        // ServiceAccount, so the ServiceAccount admission plugin (on by default, as
        // upstream) would refuse every pod.
        .arg("--disable-admission-plugins=ServiceAccount")
        .args(&args.apiserver_arg)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(File::create(dir.join("apiserver.log"))?)
        .stderr(File::create(dir.join("apiserver.err.log"))?);
    if let Backend::Etcd(endpoint) = &backend {
        cmd.arg("--etcd-servers").arg(endpoint);
    }
    let client_plain = client(&pki.admin_kubeconfig, false).await?;
    let started = Instant::now();
    let mut server = ServerProcess {
        child: cmd.spawn().context("spawning kube-apiserver")?,
    };
    server
        .wait_ready(
            &client_plain,
            "/readyz",
            Duration::from_secs(60),
            "kube-apiserver",
            dir,
        )
        .await?;
    let ready = started.elapsed();
    rows.push(row(
        name,
        "process start to /readyz 200 (fresh store)",
        ms(ready),
    ));
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let rss = server.rss_kib()?;
    rows.push(row(
        name,
        format!("idle RSS (VmRSS after ready + {} s idle)", args.idle_secs),
        format!("{:.1} MiB", rss as f64 / 1024.0),
    ));

    let client = client(&pki.admin_kubeconfig, true).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [
        "bench",
        "bench-preencoded",
        "bench-direct",
        "bench-small",
        "bench-watch",
    ] {
        let ns: Namespace = serde_json::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )?;
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "bench");

    // The size the apiserver stores for one such pod: its JSON as served back.
    let probe = Api::<Pod>::namespaced(client.clone(), "bench-small");
    probe.create(&PostParams::default(), &pod("probe")).await?;
    let (_, stored) = raw_get(&client_plain, "/api/v1/namespaces/bench-small/pods/probe").await?;
    let value = stored.clone();

    // Raw storage baseline: Storage::create on the same backend type.
    let raw = open_store(&backend, &dir.join("raw/state.db"), "/bench-raw").await?;
    let creates = phase_creates(args);
    let apiserver = Some((server.pid(), "apiserver"));
    let paired = paired_creates(args, raw, &value, &pods, apiserver).await?;
    let (raw_rate, typed_rate) = (paired.raw_rate(), paired.typed_rate());
    let (raw_cpu, typed_cpu) = (
        paired.raw_cpu.per_op(2 * creates),
        paired.typed_cpu.per_op(creates),
    );
    eprintln!("  api creates, kube-rs typed client: {typed_rate:.0}/s");

    // Pod creates through the API, with each client.
    let baseline = format!(
        "{raw_rate:.0}/s (Storage::create direct, same backend, {} writers, {}-byte values; the faster of one task and a task per writer)",
        args.concurrency,
        value.len()
    );
    let (preencoded_rate, preencoded_cpu) = cpu::measure(
        apiserver,
        creates,
        preencoded_creates(&client, "bench-preencoded", args),
    )
    .await?;
    eprintln!("  api creates, pre-encoded JSON: {preencoded_rate:.0}/s");
    let connector = direct::Connector::new(port, &pki)?;
    let (direct_rate, direct_cpu) = cpu::measure(
        apiserver,
        creates,
        direct_creates(&connector, "bench-direct", args),
    )
    .await?;
    eprintln!("  api creates, pre-encoded JSON, a hyper connection per client: {direct_rate:.0}/s");
    let (floor_rate, floor_cpu) = floor_creates(args, &pki, dir, &backend, value.len()).await?;
    eprintln!("  creates over HTTPS to a server that only stores the body: {floor_rate:.0}/s");
    for (client, rate) in [
        ("kube-rs typed client (Api::<Pod>::create)", typed_rate),
        ("pre-encoded pod JSON (kube::Client::send)", preencoded_rate),
        (
            "pre-encoded pod JSON, a hyper HTTP/1 connection per client (see direct.rs)",
            direct_rate,
        ),
        (
            "the transport floor: pre-encoded pod JSON to a server that only stores the body (see floor.rs), not the apiserver",
            floor_rate,
        ),
    ] {
        rows.push(Row {
            backend: name,
            measure: format!(
                "pod creates through the API, {} clients, {} pods, {client}",
                args.concurrency, args.pods
            ),
            result: format!("{rate:.0}/s"),
            baseline: baseline.clone(),
            // One decimal: the targets sit at round numbers, and 49.8 % is not 50 %.
            ratio: format!("{:.1} %", 100.0 * rate / raw_rate),
        });
    }
    rows.push(row(
        name,
        format!(
            "typed creates / raw baseline in each of the {} rounds (they alternate, raw first)",
            paired.rounds.len()
        ),
        paired.per_round(),
    ));
    if matches!(backend, Backend::Sqlite) && args.sqlite_reference_inserts > 0 {
        rows.extend(sqlite_reference_rows(
            name,
            args,
            &dir.join("reference"),
            &value,
            typed_rate,
        )?);
    }
    // Where each phase's CPU went, per create: the gap between the API and the raw
    // store is the apiserver's and the client's CPU on the same two cores; the floor
    // server's share is what HTTPS and storing cost a server that does nothing else.
    for (phase, used) in [
        ("raw storage baseline (the driver is the store)", raw_cpu),
        ("API, kube-rs typed client", typed_cpu),
        ("API, pre-encoded JSON", preencoded_cpu),
        (
            "API, pre-encoded JSON, a hyper connection per client",
            direct_cpu,
        ),
        (
            "the transport floor (pre-encoded JSON; the server only stores the body)",
            floor_cpu,
        ),
    ] {
        rows.push(row(
            name,
            format!("CPU per create, {phase}"),
            used.to_string(),
        ));
    }

    // How far the watch cache lags behind the last acknowledged create: a pod created
    // right after the burst is looked for with resourceVersion=0 (served from the cache,
    // which applies storage events in order, so seeing it means the burst is in too).
    let probe_pod = pod("cache-lag-probe");
    let created = Instant::now();
    probe.create(&PostParams::default(), &probe_pod).await?;
    let acked = created.elapsed();
    let lag = loop {
        let (_, body) = raw_get(
            &client_plain,
            "/api/v1/namespaces/bench-small/pods?resourceVersion=0&fieldSelector=metadata.name%3Dcache-lag-probe",
        )
        .await?;
        let list: serde_json::Value = serde_json::from_slice(&body)?;
        if list["items"].as_array().is_some_and(|i| !i.is_empty()) {
            break created.elapsed().saturating_sub(acked);
        }
        if created.elapsed() > Duration::from_secs(30) {
            bail!("a created pod did not reach the watch cache in 30 s");
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    };
    let all_pods = "/api/v1/namespaces/bench/pods?resourceVersion=0";
    let list: serde_json::Value =
        serde_json::from_slice(&raw_get(&client_plain, all_pods).await?.1)?;
    rows.push(row(
        name,
        "watch cache lag right after the create burst (create acknowledged → visible to a resourceVersion=0 LIST)",
        format!(
            "{}; the LIST then had {} of {} pods",
            ms(lag),
            list["items"].as_array().map_or(0, Vec::len),
            args.pods
        ),
    ));
    probe.delete("cache-lag-probe", &Default::default()).await?;

    // GET latency.
    let mut h = hist();
    for i in 0..args.gets {
        let name = format!(
            "pod-{}-{}",
            i % args.concurrency,
            i % (args.pods / args.concurrency)
        );
        let t = Instant::now();
        pods.get(&name).await?;
        h.record(t.elapsed().as_micros() as u64)?;
    }
    rows.push(row(
        name,
        format!("GET pod, sequential, {}×", args.gets),
        pcts(&h),
    ));

    if args.webhook_creates > 0 {
        rows.push(webhook_creates(name, &client, args.webhook_creates).await?);
    }

    // LIST latency: a namespace of 100 pods (the probe + 99), consistent read.
    futures::stream::iter(1..100)
        .map(|i| {
            let probe = probe.clone();
            async move {
                probe
                    .create(&PostParams::default(), &pod(&format!("small-{i}")))
                    .await
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let mut h = hist();
    for _ in 0..args.lists {
        let t = Instant::now();
        let list = probe.list(&ListParams::default()).await?;
        h.record(t.elapsed().as_micros() as u64)?;
        if list.items.len() != 100 {
            bail!("listed {} pods, want 100", list.items.len());
        }
    }
    rows.push(row(
        name,
        format!(
            "LIST 100 pods (resourceVersion unset), sequential, {}×",
            args.lists
        ),
        pcts(&h),
    ));

    // LIST of every pod from the watch cache, in JSON and in protobuf (what client-go
    // controllers ask for).
    for wire in [ListWire::Json, ListWire::Protobuf] {
        rows.push(cache_list(name, &client_plain, wire, args).await?);
    }

    rows.push(watch_fanout(name, &client, args).await?);

    let rss = server.rss_kib()?;
    rows.push(row(
        name,
        "RSS after the run",
        format!("{:.1} MiB", rss as f64 / 1024.0),
    ));
    server.stop();
    Ok(rows)
}

/// Sequential ConfigMap creates, each admitted by a validating webhook: their
/// latency, and how many connections the webhook accepted for them.
async fn webhook_creates(name: &'static str, client: &kube::Client, creates: usize) -> Result<Row> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::ConfigMap;
    let hook =
        ferrokube_testing::WebhookServer::start(|_path, review: serde_json::Value| async move {
            serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": true}})
        })
        .await
        .map_err(|e| anyhow::anyhow!("webhook server: {e}"))?;
    let config: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bench-allow"},
        "webhooks": [{
            "name": "allow.bench.example.com",
            "clientConfig": {"url": hook.url("/allow"), "caBundle": hook.ca_bundle()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "bench"}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        }]
    }))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "bench");
    let mut h = hist();
    for i in 0..creates {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("hooked-{i}")}, "data": {"a": "b"}
        }))?;
        let t = Instant::now();
        configmaps.create(&PostParams::default(), &cm).await?;
        h.record(t.elapsed().as_micros() as u64)?;
    }
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete("bench-allow", &Default::default())
        .await?;
    Ok(row(
        name,
        format!("ConfigMap create through a validating webhook, sequential, {creates}×"),
        format!(
            "{}; the webhook accepted {} connection(s)",
            pcts(&h),
            hook.connections()
        ),
    ))
}

/// How the writers of a create phase are driven.
#[derive(Clone, Copy)]
enum Drive {
    /// Every writer's loop in one task (`try_join_all`).
    Joined,
    /// Each writer its own task.
    TaskPerWriter,
}

/// Runs `args.concurrency` writers, each doing the creates `items` numbers in a row
/// (`create(writer, i)`); returns creates per second over all of them. Every create
/// phase (raw storage and the API's clients) has this one shape.
async fn creates_per_second<F, Fut>(
    args: &Args,
    items: Range<usize>,
    drive: Drive,
    create: F,
) -> Result<f64>
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let creates = items.len() * args.concurrency;
    let writer = |w: usize| {
        let (create, items) = (create.clone(), items.clone());
        async move {
            for i in items {
                create(w, i).await?;
            }
            Ok::<(), anyhow::Error>(())
        }
    };
    let start = Instant::now();
    match drive {
        Drive::Joined => {
            futures::future::try_join_all((0..args.concurrency).map(writer)).await?;
        }
        Drive::TaskPerWriter => {
            let tasks: Vec<_> = (0..args.concurrency)
                .map(|w| tokio::spawn(writer(w)))
                .collect();
            for task in tasks {
                task.await??;
            }
        }
    }
    Ok(creates as f64 / start.elapsed().as_secs_f64())
}

/// The storage issue's raw SQLite baseline (raw rusqlite inserts with the store's
/// durability, one commit per insert; the faster of one writer and `--concurrency`
/// writers) and the typed client's creates against it. Shown for reference only: the
/// apiserver's target is measured against `Storage::create`, whose group commit makes
/// it several times faster than this.
fn sqlite_reference_rows(
    name: &'static str,
    args: &Args,
    dir: &Path,
    value: &Bytes,
    typed_rate: f64,
) -> Result<Vec<Row>> {
    std::fs::create_dir_all(dir)?;
    let n = args.sqlite_reference_inserts;
    let single = bench_storage::raw_sqlite_inserts(&dir.join("one.db"), 1, n, value)?;
    let concurrent =
        bench_storage::raw_sqlite_inserts(&dir.join("many.db"), args.concurrency, n, value)?;
    eprintln!(
        "  reference, raw rusqlite inserts: {single:.0}/s (1 writer), {concurrent:.0}/s ({} writers)",
        args.concurrency
    );
    let reference = single.max(concurrent);
    let what = format!(
        "{reference:.0}/s (raw rusqlite inserts, WAL + synchronous=FULL, one commit per insert, {}-byte values; the faster of 1 and {} writers)",
        value.len(),
        args.concurrency
    );
    Ok(vec![Row {
        backend: name,
        measure: format!(
            "reference only: pod creates through the API, kube-rs typed client, against the storage issue's raw SQLite baseline ({n} inserts per run)"
        ),
        result: format!("{typed_rate:.0}/s"),
        baseline: what,
        ratio: format!("{:.1} %", 100.0 * typed_rate / reference),
    }])
}

/// Each writer's creates in a whole phase.
fn per_writer(args: &Args) -> usize {
    args.pods / args.concurrency
}

/// The creates a phase makes: `pods` spread evenly over the writers (`main` refuses a
/// remainder).
fn phase_creates(args: &Args) -> usize {
    per_writer(args) * args.concurrency
}

/// The raw baseline's and the typed client's creates, alternating in rounds.
struct Paired {
    /// Each round's creates (on each side), raw baseline rate and typed rate.
    rounds: Vec<(usize, f64, f64)>,
    raw_cpu: cpu::CpuUsed,
    typed_cpu: cpu::CpuUsed,
}

impl Paired {
    /// The raw baseline over all rounds: every create over the time they all took.
    fn raw_rate(&self) -> f64 {
        overall_rate(self.rounds.iter().map(|r| (r.0, r.1)))
    }

    /// The typed client's creates over all rounds.
    fn typed_rate(&self) -> f64 {
        overall_rate(self.rounds.iter().map(|r| (r.0, r.2)))
    }

    /// Each round's ratio, then their median.
    fn per_round(&self) -> String {
        let mut ratios: Vec<f64> = self.rounds.iter().map(|r| 100.0 * r.2 / r.1).collect();
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.1} %")).collect();
        ratios.sort_by(f64::total_cmp);
        let mid = ratios.len() / 2;
        let median = if ratios.len() % 2 == 1 {
            ratios[mid]
        } else {
            (ratios[mid - 1] + ratios[mid]) / 2.0
        };
        format!("{} (median {median:.1} %)", each.join(", "))
    }
}

/// Creates per second over spans of `(creates, rate)`: all the creates over the sum of
/// the spans' times.
fn overall_rate(spans: impl Iterator<Item = (usize, f64)>) -> f64 {
    let (creates, secs) = spans.fold((0.0, 0.0), |(n, t), (creates, rate)| {
        (n + creates as f64, t + creates as f64 / rate)
    });
    creates / secs
}

/// The raw baseline and the typed client's creates in `args.rounds` alternating rounds,
/// each round making its share of every writer's creates. The typed creates go to
/// `pods`' namespace, `pod-{writer}-{i}` as in one phase.
async fn paired_creates(
    args: &Args,
    raw: Arc<dyn Storage>,
    value: &Bytes,
    pods: &Api<Pod>,
    apiserver: Option<(u32, &'static str)>,
) -> Result<Paired> {
    let per_writer = per_writer(args);
    let mut paired = Paired {
        rounds: Vec::with_capacity(args.rounds),
        raw_cpu: cpu::CpuUsed::default(),
        typed_cpu: cpu::CpuUsed::default(),
    };
    for round in 0..args.rounds {
        let items = per_writer * round / args.rounds..per_writer * (round + 1) / args.rounds;
        let creates = items.len() * args.concurrency;
        let (raw_rate, raw_cpu) =
            cpu::measure_used(None, raw_creates(raw.clone(), value, args, items.clone())).await?;
        let (typed_rate, typed_cpu) =
            cpu::measure_used(apiserver, typed_creates(pods, args, items)).await?;
        paired.raw_cpu += raw_cpu;
        paired.typed_cpu += typed_cpu;
        paired.rounds.push((creates, raw_rate, typed_rate));
    }
    Ok(paired)
}

/// The raw baseline, measured in both ways a caller could drive the store. The faster
/// one is the baseline, so the API is never compared with a handicapped store.
async fn raw_creates(
    store: Arc<dyn Storage>,
    value: &Bytes,
    args: &Args,
    items: Range<usize>,
) -> Result<f64> {
    let mut rates = Vec::new();
    for (drive, prefix) in [(Drive::Joined, "raw-joined"), (Drive::TaskPerWriter, "raw")] {
        let (store, value) = (store.clone(), value.clone());
        rates.push(
            creates_per_second(args, items.clone(), drive, move |w, i| {
                let (store, value) = (store.clone(), value.clone());
                async move {
                    store
                        .create(&format!("/registry/pods/{prefix}/pod-{w}-{i}"), value)
                        .await?;
                    Ok(())
                }
            })
            .await?,
        );
    }
    let (joined, spawned) = (rates[0], rates[1]);
    eprintln!(
        "  raw storage creates: {joined:.0}/s joined in one task, {spawned:.0}/s a task per writer"
    );
    Ok(joined.max(spawned))
}

/// Creates through kube-rs's typed API: the client serializes each `Pod` and
/// deserializes each answer into one, work that shares the machine with the server.
async fn typed_creates(pods: &Api<Pod>, args: &Args, items: Range<usize>) -> Result<f64> {
    let pods = pods.clone();
    creates_per_second(args, items, Drive::TaskPerWriter, move |w, i| {
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &pod(&format!("pod-{w}-{i}")))
                .await?;
            Ok(())
        }
    })
    .await
}

/// The pod JSON the pre-encoded phases POST, encoded once; only the name is spliced in.
#[derive(Clone)]
struct PodJson(String);

impl PodJson {
    fn new() -> Result<PodJson> {
        Ok(PodJson(serde_json::to_string(&pod("NAME"))?))
    }

    fn named(&self, writer: usize, i: usize) -> Bytes {
        Bytes::from(self.0.replace("\"NAME\"", &format!("\"pod-{writer}-{i}\"")))
    }
}

/// Reads the answer to a create whole; anything but 201 is an error carrying it.
async fn expect_created<B>(resp: http::Response<B>) -> Result<()>
where
    B: hyper::body::Body,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    if status != 201 {
        bail!(
            "create answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}

/// Creates as plain HTTPS POSTs of pod JSON encoded up front (only the name is spliced
/// in), through the same kube-rs connection pool; each answer is read whole and must
/// be 201. This leaves the client's serde work out, as the raw baseline has none.
async fn preencoded_creates(client: &kube::Client, ns: &str, args: &Args) -> Result<f64> {
    let pod_json = PodJson::new()?;
    let path = format!("/api/v1/namespaces/{ns}/pods");
    let client = client.clone();
    let all = 0..per_writer(args);
    creates_per_second(args, all, Drive::TaskPerWriter, move |w, i| {
        let body = pod_json.named(w, i);
        let (client, path) = (client.clone(), path.clone());
        async move {
            let req = http::Request::post(path)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json")
                .body(kube::client::Body::from(body))?;
            expect_created(client.send(req).await?).await
        }
    })
    .await
}

/// The pre-encoded creates again, each client on its own hyper connection
/// (`direct.rs`) instead of kube-rs's pooled client. The connections are made before
/// the clock starts, as the kube-rs pool's are by the earlier phases.
async fn direct_creates(connector: &direct::Connector, ns: &str, args: &Args) -> Result<f64> {
    let pod_json = PodJson::new()?;
    let path = Arc::new(format!("/api/v1/namespaces/{ns}/pods"));
    let mut senders = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        senders.push(tokio::sync::Mutex::new(connector.connect().await?));
    }
    let senders = Arc::new(senders);
    let all = 0..per_writer(args);
    creates_per_second(args, all, Drive::TaskPerWriter, move |w, i| {
        let body = pod_json.named(w, i);
        let (senders, path) = (senders.clone(), path.clone());
        async move {
            // Each writer only ever locks its own sender: never contended.
            let mut sender = senders[w].lock().await;
            direct::post_created(&mut sender, &path, body).await
        }
    })
    .await
}

/// Starts the floor server (this binary, `--floor-serve`) on the backend's store type
/// and drives it with the pre-encoded client; see `floor.rs`. Returns the rate and the
/// CPU per create, the floor server's own included.
async fn floor_creates(
    args: &Args,
    pki: &ferrokube_pki::PkiPaths,
    dir: &Path,
    backend: &Backend,
    value_bytes: usize,
) -> Result<(f64, cpu::CpuPerOp)> {
    let port = free_port()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("--floor-serve")
        .arg(port.to_string())
        .arg("--floor-cert")
        .arg(&pki.apiserver_cert)
        .arg("--floor-key")
        .arg(&pki.apiserver_key)
        .arg("--floor-client-ca")
        .arg(&pki.ca_cert)
        .arg("--floor-value-bytes")
        .arg(value_bytes.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(dir.join("floor.err.log"))?);
    match backend {
        Backend::Sqlite => {
            cmd.arg("--floor-sqlite").arg(dir.join("floor/state.db"));
        }
        Backend::Etcd(endpoint) => {
            cmd.arg("--floor-etcd").arg(endpoint);
        }
    }
    let mut server = ServerProcess {
        child: cmd.spawn().context("spawning the floor server")?,
    };
    let url = format!("https://127.0.0.1:{port}");
    let client = client_of(&pki.admin_kubeconfig, true, Some(&url)).await?;
    server
        .wait_ready(
            &client,
            "/",
            Duration::from_secs(30),
            "the floor server",
            dir,
        )
        .await?;
    let measured = cpu::measure(
        Some((server.pid(), "floor server")),
        phase_creates(args),
        preencoded_creates(&client, "floor", args),
    )
    .await;
    server.stop();
    measured
}

/// W watchers on `bench-watch`, then E pod creates; every watcher must see every event.
async fn watch_fanout(name: &'static str, client: &kube::Client, args: &Args) -> Result<Row> {
    let api: Api<Pod> = Api::namespaced(client.clone(), "bench-watch");
    let rv = api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .context("list without resourceVersion")?;
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let latencies = Arc::new(Mutex::new(hist()));
    let delivered = Arc::new(AtomicU64::new(0));
    let mut streams = Vec::with_capacity(args.watchers);
    let connect = Instant::now();
    // Establish every watch (response headers received) before the first event.
    let opened: Vec<_> = futures::stream::iter(0..args.watchers)
        .map(|_| {
            let api = api.clone();
            let rv = rv.clone();
            async move {
                api.watch(&WatchParams::default().timeout(290), &rv)
                    .await
                    .map(|s| s.boxed())
            }
        })
        .buffer_unordered(64)
        .try_collect()
        .await?;
    eprintln!(
        "  {} watches established in {}",
        opened.len(),
        ms(connect.elapsed())
    );
    let last_delivery = Arc::new(Mutex::new(Instant::now()));
    for mut stream in opened {
        let sent = sent.clone();
        let latencies = latencies.clone();
        let delivered = delivered.clone();
        let last_delivery = last_delivery.clone();
        let want = args.watch_events;
        streams.push(tokio::spawn(async move {
            let mut seen = 0;
            while seen < want {
                match stream.next().await {
                    Some(Ok(WatchEvent::Added(p))) => {
                        let now = Instant::now();
                        let name = p.metadata.name.unwrap_or_default();
                        let at = sent.lock().get(&name).copied();
                        if let Some(at) = at {
                            latencies
                                .lock()
                                .record(now.duration_since(at).as_micros().max(1) as u64)?;
                        }
                        seen += 1;
                        delivered.fetch_add(1, Ordering::Relaxed);
                        *last_delivery.lock() = now;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => bail!("watch error: {e}"),
                    None => bail!("watch ended after {seen} events"),
                }
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    let first = Instant::now();
    futures::stream::iter(0..args.watch_events)
        .map(|i| {
            let api = api.clone();
            let sent = sent.clone();
            async move {
                let name = format!("w-{i}");
                sent.lock().insert(name.clone(), Instant::now());
                api.create(&PostParams::default(), &pod(&name)).await
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let written = first.elapsed();
    let all = tokio::time::timeout(
        Duration::from_secs(280),
        futures::future::try_join_all(streams),
    )
    .await
    .context("watchers did not receive every event in 280 s")??;
    for r in all {
        r?;
    }
    let span = last_delivery.lock().duration_since(first);
    let total = delivered.load(Ordering::Relaxed);
    let h = latencies.lock();
    Ok(row(
        name,
        format!(
            "watch fan-out: {} watchers × {} pod creates ({:.0} creates/s written)",
            args.watchers,
            args.watch_events,
            args.watch_events as f64 / written.as_secs_f64()
        ),
        format!(
            "{:.0} events/s delivered; delivery {}",
            total as f64 / span.as_secs_f64(),
            pcts(&h)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paired(rounds: &[(usize, f64, f64)]) -> Paired {
        Paired {
            rounds: rounds.to_vec(),
            raw_cpu: cpu::CpuUsed::default(),
            typed_cpu: cpu::CpuUsed::default(),
        }
    }

    #[test]
    fn the_rate_over_rounds_is_every_create_over_the_time_they_all_took() {
        // 1,000 creates in 1 s, then 1,000 in 0.25 s: 2,000 in 1.25 s, not the mean rate.
        let p = paired(&[(1_000, 1_000.0, 500.0), (1_000, 4_000.0, 1_000.0)]);
        assert!((p.raw_rate() - 1_600.0).abs() < 1e-9, "{}", p.raw_rate());
        // 2 s and 1 s.
        assert!((p.typed_rate() - 2_000.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn each_rounds_ratio_is_shown_with_their_median() {
        let odd = paired(&[(10, 100.0, 40.0), (10, 100.0, 55.0), (10, 200.0, 90.0)]);
        assert_eq!(odd.per_round(), "40.0 %, 55.0 %, 45.0 % (median 45.0 %)");
        let even = paired(&[(10, 100.0, 40.0), (10, 100.0, 50.0)]);
        assert_eq!(even.per_round(), "40.0 %, 50.0 % (median 45.0 %)");
    }
}
