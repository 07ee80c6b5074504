//! Pod start latency through the whole cluster (issue 6's benchmark), the counterpart of
//! `ferrokube-cri floor`:
//!
//! ```text
//! KUBECONFIG=... bench-pod-start [--count N] [--image REF] [--namespace NS] [--keep K]
//! ```
//!
//! One watch on the benchmark's pods (label `app=bench-pod-start`) is opened first; then,
//! one after another (sequential: one pod in flight), each pod is created through the API
//! and timed from just before the create until the watch delivers it with phase Running.
//! The pods are the floor's shape: one busybox container `sleep 3600`, imagePullPolicy
//! IfNotPresent (the image must be present on the node), no resources (BestEffort).
//! Prints every sample, then p50/p99/max. Afterwards all but the last `--keep` pods are
//! deleted (grace 1 s), so a script can measure idle memory with K pods running.
//!
//! A client-side tool of the kubelet crate: it talks to the apiserver's REST API only.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};

#[path = "common/percentile.rs"]
mod percentile;

const LABEL_KEY: &str = "app";
const LABEL_VALUE: &str = "bench-pod-start";
const MAX_COUNT: usize = 1000;
/// How long one pod may take to become Running before the run fails.
const RUNNING_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, PartialEq)]
struct Options {
    count: usize,
    image: String,
    namespace: String,
    keep: usize,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        count: 100,
        image: "docker.io/library/busybox:latest".into(),
        namespace: "default".into(),
        keep: 0,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .clone();
        let number = |v: &str| {
            v.parse::<usize>()
                .ok()
                .filter(|n| *n <= MAX_COUNT)
                .ok_or_else(|| format!("{flag} must be 0..{MAX_COUNT}, got {v:?}"))
        };
        match flag.as_str() {
            "--count" => o.count = number(&value)?,
            "--keep" => o.keep = number(&value)?,
            "--image" => o.image = value,
            "--namespace" => o.namespace = value,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if o.count == 0 {
        return Err("--count must be at least 1".into());
    }
    Ok(o)
}

fn bench_pod(index: usize, image: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(index)),
            labels: Some([(LABEL_KEY.to_owned(), LABEL_VALUE.to_owned())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "bench".into(),
                image: Some(image.into()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec!["sleep".into(), "3600".into()]),
                ..Default::default()
            }],
            restart_policy: Some("Never".into()),
            // Only so the cleanup is quick (sleep as PID 1 ignores SIGTERM).
            termination_grace_period_seconds: Some(1),
            ..Default::default()
        }),
        status: None,
    }
}

fn pod_name(index: usize) -> String {
    format!("{LABEL_VALUE}-{index}")
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "bench-pod-start: {e}\nusage: bench-pod-start [--count N] [--image REF] [--namespace NS] [--keep K]"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o).await {
        eprintln!("bench-pod-start: {e}");
        std::process::exit(1);
    }
}

async fn run(o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::try_default().await?;
    let pods: Api<Pod> = Api::namespaced(client, &o.namespace);
    let selector = format!("{LABEL_KEY}={LABEL_VALUE}");
    remove_leftovers(&pods, &selector).await?;

    let mut events = Box::pin(watcher(
        pods.clone(),
        watcher::Config::default().labels(&selector),
    ));
    // The watch is established (its initial list done) before the first create.
    let init_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let next = tokio::time::timeout_at(init_deadline.into(), events.next()).await;
        match next.map_err(|_| "the watch did not start within 30 s")? {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("watch: {e}").into()),
            None => return Err("the watch ended".into()),
        }
    }

    let mut samples = Vec::with_capacity(o.count);
    for i in 1..=o.count {
        let name = pod_name(i);
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &bench_pod(i, &o.image))
            .await?;
        let deadline = t0 + RUNNING_DEADLINE;
        loop {
            let next = tokio::time::timeout_at(deadline.into(), events.next()).await;
            let event = next.map_err(|_| format!("{name} not Running within 60 s"))?;
            match event {
                Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)))
                    if p.metadata.name.as_deref() == Some(name.as_str()) && is_running(&p) =>
                {
                    break;
                }
                Some(Ok(_)) => {}
                // The watcher re-lists by itself after an error; keep waiting (bounded).
                Some(Err(e)) => eprintln!("  watch error (retrying): {e}"),
                None => return Err("the watch ended".into()),
            }
        }
        let elapsed = t0.elapsed();
        eprintln!("  {name} Running after {} ms", elapsed.as_millis());
        samples.push(elapsed);
    }
    println!("{}", percentile::summary("pod_start", &samples));

    let delete = DeleteParams {
        grace_period_seconds: Some(1),
        ..Default::default()
    };
    for i in 1..=o.count.saturating_sub(o.keep) {
        pods.delete(&pod_name(i), &delete).await?;
    }
    Ok(())
}

/// Deletes the pods an earlier run left and waits (at most 60 s) until they are gone, so
/// every create starts from a clean name and node.
async fn remove_leftovers(
    pods: &Api<Pod>,
    selector: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let list = ListParams::default().labels(selector);
    let delete = DeleteParams {
        grace_period_seconds: Some(1),
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = pods.list(&list).await?;
        if left.items.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} earlier bench pods still exist after 60 s",
                left.items.len()
            )
            .into());
        }
        for p in &left.items {
            if p.metadata.deletion_timestamp.is_none() {
                let name = p.metadata.name.clone().unwrap_or_default();
                match pods.delete(&name, &delete).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_parse_with_defaults_and_bounds() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.count, o.keep, o.namespace.as_str()), (100, 0, "default"));
        let o = parse(&strs(&["--count", "10", "--keep", "3", "--image", "nginx"])).unwrap();
        assert_eq!((o.count, o.keep, o.image.as_str()), (10, 3, "nginx"));
        assert!(parse(&strs(&["--count", "0"])).is_err());
        assert!(parse(&strs(&["--count", "5000"])).is_err());
        assert!(parse(&strs(&["--keep"])).is_err());
        assert!(parse(&strs(&["--what", "1"])).is_err());
    }

    #[test]
    fn the_bench_pod_is_the_floors_shape() {
        let p = bench_pod(7, "busybox");
        assert_eq!(p.metadata.name.as_deref(), Some("bench-pod-start-7"));
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.command.as_deref(),
            Some(&["sleep".to_owned(), "3600".to_owned()][..])
        );
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert!(c.resources.is_none(), "BestEffort, as the floor's pod");
        assert!(!is_running(&p));
    }
}
