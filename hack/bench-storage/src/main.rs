//! Storage benchmark driver (not a test): measures each backend next to its raw
//! baseline in the same run, and prints a Markdown table for `docs/benchmarks.md`.
//!
//! * creates/s with concurrent writers, next to raw rusqlite inserts with the same
//!   durability (WAL, synchronous=FULL, one commit per insert) or raw etcd-client puts
//!   at the same concurrency;
//! * guaranteed_updates/s with concurrent writers on distinct keys;
//! * watch delivery latency p50/p99 with N watchers (from the `create` call to the
//!   event reaching each watcher);
//! * database size after M updates over K keys with periodic compaction.
//!
//! Usage: `cargo run --release -p bench-storage -- [--backends sqlite,etcd] ...`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bench_storage::raw_sqlite_inserts;
use bytes::Bytes;
use clap::Parser;
use ferrokube_storage::{Preconditions, Storage, Update, WatchEvent};
use futures::StreamExt;
use hdrhistogram::Histogram;

#[derive(Parser, Debug, Clone)]
struct Args {
    /// Backends to measure, comma separated: sqlite, etcd.
    #[arg(long, default_value = "sqlite,etcd")]
    backends: String,
    /// Concurrent writers for the create and update phases.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Objects created in the create phase.
    #[arg(long, default_value_t = 20_000)]
    creates: usize,
    /// Updates in the guaranteed_update phase.
    #[arg(long, default_value_t = 20_000)]
    updates: usize,
    /// Size of every value written, in bytes.
    #[arg(long, default_value_t = 512)]
    value_size: usize,
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Events written while the watchers listen.
    #[arg(long, default_value_t = 2_000)]
    watch_events: usize,
    /// Updates in the churn phase (db size with compaction).
    #[arg(long, default_value_t = 1_000_000)]
    churn_updates: usize,
    #[arg(long, default_value_t = 1_000)]
    churn_keys: usize,
    /// Revisions kept behind the head by the churn phase's compactor.
    #[arg(long, default_value_t = 10_000)]
    churn_retain: i64,
    /// Request connections of the etcd backend (`EtcdOptions::connections`; 0: its
    /// default). The raw baselines use one etcd-client as it comes.
    #[arg(long, default_value_t = 0)]
    etcd_connections: usize,
    /// Directory for database files (default: a temp dir under /var/tmp).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let base = match &args.dir {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::Builder::new()
            .prefix("bench-storage")
            .tempdir_in("/var/tmp")?,
    };
    let mut rows = Vec::new();
    for backend in args.backends.split(',').map(str::trim) {
        match backend {
            "sqlite" => rows.extend(bench_sqlite(&args, base.path()).await?),
            "etcd" => rows.extend(bench_etcd(&args).await?),
            other => bail!("unknown backend {other:?}"),
        }
    }
    println!("\n| backend | measure | result | baseline | ratio |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    Ok(())
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
    Row {
        backend,
        measure: measure.into(),
        result: result.into(),
        baseline: "".into(),
        ratio: "".into(),
    }
}

fn compared(backend: &'static str, measure: &str, ours: f64, baseline: f64, what: &str) -> Row {
    Row {
        backend,
        measure: measure.into(),
        result: format!("{ours:.0}/s"),
        baseline: format!("{baseline:.0}/s ({what})"),
        ratio: format!("{:.0} %", 100.0 * ours / baseline),
    }
}

async fn bench_sqlite(args: &Args, base: &Path) -> Result<Vec<Row>> {
    let payload = value(args.value_size);
    let raw_single = raw_sqlite_inserts(&base.join("raw1.db"), 1, args.creates, &payload)?;
    let raw_concurrent = raw_sqlite_inserts(
        &base.join("rawn.db"),
        args.concurrency,
        args.creates,
        &payload,
    )?;
    eprintln!(
        "raw sqlite: {raw_single:.0}/s (1 writer), {raw_concurrent:.0}/s ({} writers)",
        args.concurrency
    );
    let open = |name: &str| {
        let path = base.join(name);
        async move {
            let store = ferrokube_storage_sqlite::SqliteStorage::open(&path, Default::default())
                .context("open sqlite store")?;
            Ok::<Arc<dyn Storage>, anyhow::Error>(Arc::new(store))
        }
    };
    let store = open("ferrokube.db").await?;
    let mut rows = common_phases("sqlite", store.clone(), args).await?;
    let creates = creates_per_second(&store, "/bench/c2/", args).await?;
    let best_raw = raw_single.max(raw_concurrent);
    rows.insert(
        0,
        compared(
            "sqlite",
            &format!("creates, {} writers", args.concurrency),
            creates,
            best_raw,
            "raw rusqlite inserts, fsync per commit, best of 1 and N writers",
        ),
    );
    drop(store);
    let churn_store = open("churn.db").await?;
    rows.push(churn("sqlite", churn_store, args).await?);
    Ok(rows)
}

async fn bench_etcd(args: &Args) -> Result<Vec<Row>> {
    let etcd = ferrokube_storage_etcd::testing::EtcdProcess::start()
        .await
        .context("start etcd")?;
    let endpoint = etcd.endpoint();
    let raw = raw_etcd_puts(&endpoint, args).await?;
    eprintln!("raw etcd: {raw:.0}/s ({} writers)", args.concurrency);
    let store: Arc<dyn Storage> = Arc::new(
        ferrokube_storage_etcd::EtcdStorage::connect(std::slice::from_ref(&endpoint), {
            let mut options = ferrokube_storage_etcd::EtcdOptions::default();
            if args.etcd_connections > 0 {
                options.connections = args.etcd_connections;
            }
            options
        })
        .await
        .context("connect to etcd")?,
    );
    let creates = creates_per_second(&store, "/bench/c2/", args).await?;
    let raw_txn = raw_etcd_txn_creates(&endpoint, args).await?;
    eprintln!("etcd: creates {creates:.0}/s, raw compare-and-put txns {raw_txn:.0}/s");
    let mut rows = vec![
        compared(
            "etcd",
            &format!("creates, {} writers", args.concurrency),
            creates,
            raw,
            "raw etcd-client puts, same concurrency",
        ),
        compared(
            "etcd",
            &format!(
                "(for reference) raw etcd-client compare-and-put txns, {} writers",
                args.concurrency
            ),
            raw_txn,
            raw,
            "raw etcd-client puts, same concurrency",
        ),
    ];
    rows.extend(common_phases("etcd", store.clone(), args).await?);
    rows.push(churn("etcd", store, args).await?);
    drop(etcd);
    Ok(rows)
}

fn value(size: usize) -> Bytes {
    Bytes::from(vec![b'v'; size])
}

async fn raw_etcd_puts(endpoint: &str, args: &Args) -> Result<f64> {
    let client = etcd_client::Client::connect([endpoint], None).await?;
    let payload = value(args.value_size);
    writes_per_second(args, |w, writes| {
        let mut kv = client.kv_client();
        let payload = payload.clone();
        async move {
            for i in 0..writes {
                kv.put(format!("/bench/raw/{w}/{i}"), payload.to_vec(), None)
                    .await?;
            }
            Ok::<(), etcd_client::Error>(())
        }
    })
    .await
}

/// Creates/s through `store`, measured as the raw baselines are.
async fn creates_per_second(store: &Arc<dyn Storage>, prefix: &str, args: &Args) -> Result<f64> {
    let payload = value(args.value_size);
    writes_per_second(args, |w, writes| {
        let store = store.clone();
        let payload = payload.clone();
        let prefix = prefix.to_string();
        async move {
            for i in 0..writes {
                store
                    .create(&format!("{prefix}{w}/{i}"), payload.clone())
                    .await?;
            }
            Ok::<(), ferrokube_storage::StorageError>(())
        }
    })
    .await
}

/// Creates as raw etcd-client transactions (`create_revision == 0` → put), what a
/// create that must refuse an existing key costs in etcd itself (not the baseline;
/// shown next to it).
async fn raw_etcd_txn_creates(endpoint: &str, args: &Args) -> Result<f64> {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let client = etcd_client::Client::connect([endpoint], None).await?;
    let payload = value(args.value_size);
    writes_per_second(args, |w, writes| {
        let mut kv = client.kv_client();
        let payload = payload.clone();
        async move {
            for i in 0..writes {
                let key = format!("/bench/rawtxn/{w}/{i}");
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key, payload.to_vec(), None)]);
                kv.txn(txn).await?;
            }
            Ok::<(), etcd_client::Error>(())
        }
    })
    .await
}

/// Writes/s of `args.concurrency` writers, each a spawned task (so every measure spreads
/// over the runtime's threads alike) made by `writer(index, writes)` to do its share of
/// `args.creates` writes.
async fn writes_per_second<W, E>(args: &Args, writer: impl Fn(usize, usize) -> W) -> Result<f64>
where
    W: Future<Output = Result<(), E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let writes = args.creates / args.concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|w| tokio::spawn(writer(w, writes)))
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok((writes * args.concurrency) as f64 / start.elapsed().as_secs_f64())
}

/// Phases measured the same way on every backend: updates/s and watch latency.
async fn common_phases(
    backend: &'static str,
    store: Arc<dyn Storage>,
    args: &Args,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // guaranteed_update on distinct keys per writer (1,000 keys in all).
    let keys_per_writer = (1000 / args.concurrency).max(1);
    for w in 0..args.concurrency {
        for k in 0..keys_per_writer {
            store
                .create(&format!("/bench/u/{w}/{k}"), Bytes::from_static(b"0"))
                .await?;
        }
    }
    let per_writer = args.updates / args.concurrency;
    let payload = value(args.value_size);
    let start = Instant::now();
    futures::future::try_join_all((0..args.concurrency).map(|w| {
        let store = store.clone();
        let payload = payload.clone();
        async move {
            for i in 0..per_writer {
                let key = format!("/bench/u/{w}/{}", i % keys_per_writer);
                store
                    .guaranteed_update(&key, &Preconditions::default(), &mut |_| {
                        Ok(Update::Write(payload.clone()))
                    })
                    .await?;
            }
            Ok::<(), ferrokube_storage::StorageError>(())
        }
    }))
    .await?;
    let updates = (per_writer * args.concurrency) as f64 / start.elapsed().as_secs_f64();
    rows.push(row(
        backend,
        format!("guaranteed_updates, {} writers", args.concurrency),
        format!("{updates:.0}/s"),
    ));

    // Watch latency: N watchers, one writer; each value carries its send time.
    let epoch = Instant::now();
    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let mut watch = store.watch("/bench/w/", 0).await?;
        let expected = args.watch_events;
        watchers.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new(3).expect("histogram");
            let mut seen = 0;
            while seen < expected {
                let item = tokio::time::timeout(Duration::from_secs(60), watch.next()).await;
                match item {
                    Ok(Some(Ok(WatchEvent::Added(kv)))) => {
                        let sent: u64 = std::str::from_utf8(&kv.value)
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0);
                        let now = epoch.elapsed().as_micros() as u64;
                        histogram.record(now.saturating_sub(sent)).ok();
                        seen += 1;
                    }
                    Ok(Some(Ok(_))) => {}
                    other => return Err(format!("watcher ended after {seen}: {other:?}")),
                }
            }
            Ok(histogram)
        }));
    }
    let start = Instant::now();
    for i in 0..args.watch_events {
        let sent = epoch.elapsed().as_micros().to_string();
        store
            .create(&format!("/bench/w/{i}"), Bytes::from(sent))
            .await?;
    }
    let write_time = start.elapsed();
    let mut all = Histogram::<u64>::new(3)?;
    for watcher in watchers {
        let histogram = watcher.await?.map_err(anyhow::Error::msg)?;
        all.add(histogram)?;
    }
    rows.push(row(
        backend,
        format!(
            "watch delivery, {} watchers, {} events ({:.0} events/s written)",
            args.watchers,
            args.watch_events,
            args.watch_events as f64 / write_time.as_secs_f64()
        ),
        format!(
            "p50 {:.2} ms, p99 {:.2} ms",
            all.value_at_quantile(0.5) as f64 / 1000.0,
            all.value_at_quantile(0.99) as f64 / 1000.0
        ),
    ));
    Ok(rows)
}

/// Steady churn: updates over a fixed key set with a compactor keeping
/// `churn_retain` revisions; reports the store size at the end.
async fn churn(backend: &'static str, store: Arc<dyn Storage>, args: &Args) -> Result<Row> {
    for k in 0..args.churn_keys {
        store
            .create(&format!("/bench/churn/{k}"), value(args.value_size))
            .await?;
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let compactor = {
        let store = store.clone();
        let done = done.clone();
        let retain = args.churn_retain;
        tokio::spawn(async move {
            let mut compactions = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let head = store.current_revision().await?;
                if head > retain {
                    store.compact(head - retain).await?;
                    compactions += 1;
                }
            }
            Ok::<u64, ferrokube_storage::StorageError>(compactions)
        })
    };
    let per_writer = args.churn_updates / args.concurrency;
    let keys_per_writer = (args.churn_keys / args.concurrency).max(1);
    let payload = value(args.value_size);
    let start = Instant::now();
    let mut peak = 0u64;
    let writers = futures::future::try_join_all((0..args.concurrency).map(|w| {
        let store = store.clone();
        let payload = payload.clone();
        async move {
            for i in 0..per_writer {
                let key = format!("/bench/churn/{}", w * keys_per_writer + i % keys_per_writer);
                store
                    .guaranteed_update(&key, &Preconditions::default(), &mut |_| {
                        Ok(Update::Write(payload.clone()))
                    })
                    .await?;
            }
            Ok::<(), ferrokube_storage::StorageError>(())
        }
    }));
    tokio::pin!(writers);
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            result = &mut writers => { result?; break; }
            _ = tick.tick() => {
                let stats = store.stats().await?;
                peak = peak.max(stats.size_bytes);
                eprintln!("{backend} churn: {:.0} s, revision {}, size {:.1} MiB",
                    start.elapsed().as_secs_f64(), stats.current_revision,
                    stats.size_bytes as f64 / 1048576.0);
            }
        }
    }
    let elapsed = start.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let compactions = compactor.await??;
    let head = store.current_revision().await?;
    store.compact(head).await?;
    // Let background compaction finish its batches.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = store.stats().await?;
    peak = peak.max(stats.size_bytes);
    Ok(row(
        backend,
        format!(
            "size after {} updates over {} keys ({:.0} updates/s, {compactions} compactions keeping {} revisions)",
            per_writer * args.concurrency,
            args.churn_keys,
            (per_writer * args.concurrency) as f64 / elapsed.as_secs_f64(),
            args.churn_retain
        ),
        format!(
            "{:.1} MiB at the end, {:.1} MiB peak (live data {:.1} MiB)",
            stats.size_bytes as f64 / 1048576.0,
            peak as f64 / 1048576.0,
            (args.churn_keys * args.value_size) as f64 / 1048576.0
        ),
    ))
}
