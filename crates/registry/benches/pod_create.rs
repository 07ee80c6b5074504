//! Benchmark (not a test): the registry's own CPU per pod create, without HTTP, TLS,
//! authentication or admission, on the embedded SQLite store.
//!
//! `bench-apiserver` measures whole creates over HTTPS; on a small shared machine its
//! figures move by ±20 % from one run to the next, so it cannot rank changes to one
//! stage of the create path. This driver runs `Store::create` for the same pod as
//! `bench-apiserver` (decode and defaulting, system metadata, validation, encoding,
//! the write, and the watch cache applying the event) with 16 creates in flight on a
//! current-thread runtime. It then reports the on-CPU time per create of each thread, read
//! from `/proc/thread-self/schedstat` and `/proc/self/task/*/schedstat` (nanoseconds).
//! The runtime thread's share is the registry's work; the SQLite writer's share is the
//! store's.
//!
//! `cargo bench -p ferrokube-registry --bench pod_create [-- --creates N]`. Without
//! `--bench` (as `cargo test --benches` runs it) it does a few hundred creates, to
//! check that it still works.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use ferrokube_registry::{Registry, RegistryConfig, WriteOptions};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use futures::StreamExt;
use serde_json::{Value, json};

const IN_FLIGHT: usize = 16;

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "load"}},
        "spec": {"containers": [{
            "name": "main",
            "image": "registry.example/bench/app:1.0",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        }]},
    })
}

/// This thread's id, as `/proc/self/task` names it.
fn own_thread_id() -> String {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|link| Some(link.file_name()?.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// On-CPU nanoseconds of every thread of this process, by thread name (threads with
/// the same name summed); the calling thread, which runs the runtime, as "runtime".
fn cpu_by_thread() -> BTreeMap<String, u64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    let own = own_thread_id();
    for task in tasks.flatten() {
        let path = task.path();
        let name = if task.file_name().to_string_lossy() == own {
            "runtime (the registry and its watch cache)".to_string()
        } else {
            std::fs::read_to_string(path.join("comm")).unwrap_or_default()
        };
        let on_cpu = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        *by_name.entry(name.trim().to_string()).or_insert(0) += on_cpu;
    }
    by_name
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench");
    let creates = args
        .iter()
        .position(|a| a == "--creates")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(if benching { 40_000 } else { 300 });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(creates));
}

async fn run(creates: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default())
        .expect("open the store");
    let registry = Registry::new(Arc::new(storage), RegistryConfig::default())
        .await
        .expect("registry");
    let pods = registry
        .store("", "v1", "pods")
        .expect("pods store")
        .clone();
    let options = WriteOptions::default();
    let create_all = |prefix: &'static str, count: usize| {
        let pods = pods.clone();
        let options = options.clone();
        async move {
            futures::stream::iter(0..count)
                .map(|i| {
                    let (pods, options) = (pods.clone(), options.clone());
                    async move {
                        pods.create(Some("default"), pod(&format!("{prefix}-{i}")), &options)
                            .await
                            .expect("create")
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .for_each(|_| async {})
                .await;
        }
    };
    // Warm-up: prepared statements, the cache's first allocations, the page cache.
    create_all("warm", creates / 10).await;

    let before = cpu_by_thread();
    let started = Instant::now();
    create_all("pod", creates).await;
    let elapsed = started.elapsed();
    let after = cpu_by_thread();

    println!(
        "{creates} pod creates through Store::create, {IN_FLIGHT} in flight, no admission: {:.0}/s",
        creates as f64 / elapsed.as_secs_f64()
    );
    let mut total = 0;
    for (thread, ns) in &after {
        let used = ns.saturating_sub(before.get(thread).copied().unwrap_or(0));
        total += used;
        if used > 0 {
            println!(
                "  {thread}: {:.1} µs CPU per create",
                used as f64 / 1_000.0 / creates as f64
            );
        }
    }
    println!(
        "  all threads: {:.1} µs CPU per create",
        total as f64 / 1_000.0 / creates as f64
    );
}
