//! The kubelet's `/stats/summary`, `/metrics`, `/metrics/cadvisor` and
//! `/metrics/resource` on the real containerd of this machine, read over the read-only
//! port: a busybox pod that writes 256 KiB into an emptyDir shows up with its
//! container's CPU and memory, the volume's usage and its ephemeral storage; the metrics
//! pages carry upstream's names, and `/metrics/resource` what metrics-server reads.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::{start_kubelet_with, stop_kubelet, wait_for};
use ferrokube_kubelet::server::{Endpoints, bind};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

/// GET `path` from the kubelet; the body of a 200 answer.
fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: kubelet\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    ensure!(
        out.starts_with("HTTP/1.1 200"),
        "GET {path}: {}",
        &out[..out.len().min(300)]
    );
    let (_, body) = out.split_once("\r\n\r\n").context("no body")?;
    Ok(body.to_owned())
}

fn jiff_now_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

/// One sample line of a Prometheus text page: value and timestamp (ms), when present.
fn sample(page: &str, series: &str) -> Result<(f64, Option<i64>)> {
    let line = page
        .lines()
        .find(|l| {
            l.strip_prefix(series)
                .is_some_and(|rest| rest.starts_with(' '))
        })
        .with_context(|| format!("no {series} in\n{page}"))?;
    let mut fields = line[series.len()..].split_whitespace();
    let value = fields.next().context("value")?.parse::<f64>()?;
    let ts = fields.next().map(str::parse::<i64>).transpose()?;
    ensure!(fields.next().is_none(), "{line}");
    Ok((value, ts))
}

/// `/metrics/resource` as metrics-server reads it: the test pod's container CPU and
/// memory with upstream's labels and millisecond timestamps, the node's, and no error.
fn check_resource_metrics(page: &str, now_ms: i64) -> Result<()> {
    for help in [
        "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds",
        "# TYPE container_cpu_usage_seconds_total counter",
        "# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes",
        "# TYPE container_memory_working_set_bytes gauge",
        "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds",
        "# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes",
        "# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    ] {
        ensure!(page.lines().any(|l| l == help), "{help} in\n{page}");
    }
    let recent = |what: &str, ts: Option<i64>| -> Result<()> {
        let ts = ts.with_context(|| format!("{what} has no timestamp"))?;
        ensure!(
            (now_ms - 120_000..=now_ms + 1_000).contains(&ts),
            "{what}: timestamp {ts} is not a recent time in ms (now {now_ms})"
        );
        Ok(())
    };
    let labels = "{container=\"writer\",namespace=\"default\",pod=\"stats\"}";
    let (cpu, ts) = sample(page, &format!("container_cpu_usage_seconds_total{labels}"))?;
    ensure!(cpu > 0.0 && cpu < 3600.0, "container CPU seconds {cpu}");
    recent("container_cpu_usage_seconds_total", ts)?;
    let (mem, ts) = sample(page, &format!("container_memory_working_set_bytes{labels}"))?;
    ensure!(mem >= 1.0, "container working set {mem}");
    recent("container_memory_working_set_bytes", ts)?;
    let (start, ts) = sample(page, &format!("container_start_time_seconds{labels}"))?;
    ensure!(ts.is_none(), "start times carry no timestamp");
    ensure!(
        (start * 1000.0) as i64 <= now_ms && (start * 1000.0) as i64 > now_ms - 600_000,
        "container start {start}"
    );
    let pod_labels = "{namespace=\"default\",pod=\"stats\"}";
    let (pod_cpu, _) = sample(page, &format!("pod_cpu_usage_seconds_total{pod_labels}"))?;
    ensure!(
        pod_cpu >= cpu,
        "pod CPU {pod_cpu} covers its container's {cpu}"
    );
    let (pod_mem, _) = sample(page, &format!("pod_memory_working_set_bytes{pod_labels}"))?;
    ensure!(pod_mem >= mem);
    let (node_cpu, ts) = sample(page, "node_cpu_usage_seconds_total")?;
    ensure!(node_cpu > 0.0);
    recent("node_cpu_usage_seconds_total", ts)?;
    let (node_mem, ts) = sample(page, "node_memory_working_set_bytes")?;
    ensure!(node_mem > 0.0);
    recent("node_memory_working_set_bytes", ts)?;
    ensure!(sample(page, "resource_scrape_error")? == (0.0, None));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_and_metrics_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-stats-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let mut kubelet =
        Some(start_kubelet_with(client.clone(), &node_name, root.path(), |_| {}).await);
    let k = kubelet.as_ref().expect("kubelet").kubelet.clone();
    let cancel = kubelet.as_ref().expect("kubelet").cancel.clone();
    let (addr, _srv) = bind(
        "127.0.0.1:0".parse().expect("addr"),
        k.clone(),
        Endpoints::ReadOnly,
        cancel,
    )
    .await
    .expect("read-only port");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("stats".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.clone()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "writer".into(),
                image: Some("docker.io/library/busybox:latest".into()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec![
                    "sh".into(),
                    "-c".into(),
                    "dd if=/dev/urandom of=/scratch/f bs=1024 count=256 && exec sleep 3600".into(),
                ]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/scratch".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let mut created = None;

    let result = async {
        created = Some(pods.create(&PostParams::default(), &pod).await?);
        let p = wait_for("pod Running", Duration::from_secs(60), || async {
            let p = pods.get("stats").await?;
            Ok(
                (p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                    .then_some(p),
            )
        })
        .await?;
        let uid = p.metadata.uid.clone().context("uid")?;

        let summary: Value = wait_for(
            "the pod in /stats/summary",
            Duration::from_secs(30),
            || async {
                let v: Value = serde_json::from_str(
                    &tokio::task::spawn_blocking(move || get(addr, "/stats/summary")).await??,
                )?;
                let pod = v["pods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["podRef"]["uid"] == uid.as_str())
                    .cloned();
                let ready = pod.as_ref().is_some_and(|p| {
                    p["volume"][0]["usedBytes"].as_u64().unwrap_or(0) >= 256 * 1024
                        && p["containers"][0]["memory"]["workingSetBytes"]
                            .as_u64()
                            .is_some()
                });
                Ok(ready.then_some(v))
            },
        )
        .await?;
        ensure!(summary["node"]["nodeName"] == node_name.as_str());
        ensure!(
            summary["node"]["memory"]["workingSetBytes"]
                .as_u64()
                .unwrap_or(0)
                > 0,
            "{}",
            summary["node"]
        );
        ensure!(summary["node"]["fs"]["capacityBytes"].as_u64().unwrap_or(0) > 0);
        ensure!(
            summary["node"]["runtime"]["imageFs"]["usedBytes"]
                .as_u64()
                .unwrap_or(0)
                > 0,
            "{}",
            summary["node"]
        );
        let pod = summary["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["podRef"]["name"] == "stats")
            .context("pod in the summary")?;
        ensure!(pod["podRef"]["namespace"] == "default");
        let c = &pod["containers"][0];
        ensure!(c["name"] == "writer", "{c}");
        ensure!(
            c["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0,
            "{c}"
        );
        ensure!(c["rootfs"].is_object() && c["logs"].is_object(), "{c}");
        ensure!(pod["volume"][0]["name"] == "scratch", "{pod}");
        let eph = pod["ephemeral-storage"]["usedBytes"].as_u64().unwrap_or(0);
        ensure!(
            eph >= 256 * 1024,
            "ephemeral storage counts the emptyDir: {pod}"
        );

        // The pod workers' counts come with the next housekeeping pass (2 s); the
        // startup SLI once the kubelet's watch shows the pod running.
        let metrics = wait_for(
            "pod counts and the startup SLI in /metrics",
            Duration::from_secs(20),
            || async {
                let page = tokio::task::spawn_blocking(move || get(addr, "/metrics")).await??;
                let done = [
                    "kubelet_desired_pods{static=\"\"} 1",
                    "kubelet_active_pods{static=\"\"} 1",
                    "kubelet_working_pods{config=\"desired\",lifecycle=\"sync\",static=\"\"} 1",
                    "kubelet_pod_start_sli_duration_seconds_count 1",
                    "kubelet_pod_start_total_duration_seconds_count 1",
                ]
                .into_iter()
                .filter(|line| !page.lines().any(|l| l == *line))
                .collect::<Vec<_>>();
                // Retried until the time is up; the last miss is the failure's message.
                ensure!(done.is_empty(), "missing {done:?} in\n{page}");
                Ok(Some(page))
            },
        )
        .await?;
        ensure!(
            metrics
                .lines()
                .filter(|l| l.starts_with("kubelet_working_pods{"))
                .count()
                == 15,
            "{metrics}"
        );
        for line in [
            "kubelet_mirror_pods 0",
            "kubelet_desired_pods{static=\"true\"} 0",
            "# TYPE kubelet_pod_status_sync_duration_seconds histogram",
        ] {
            ensure!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
        }
        ensure!(
            metrics
                .lines()
                .any(|l| l.starts_with("kubelet_orphaned_runtime_pods_total ")),
            "{metrics}"
        );
        // The read-only port's requests: the summaries read above, and this scrape,
        // in flight while its page is made.
        let http = |name: &str, path: &str| {
            metrics.lines().find_map(|l| {
                l.strip_prefix(&format!("{name}{{long_running=\"false\",method=\"GET\",path=\"{path}\",server_type=\"readonly\"}} "))
                    .and_then(|v| v.parse::<f64>().ok())
            })
        };
        ensure!(
            http("kubelet_http_requests_total", "stats").unwrap_or(0.0) >= 1.0,
            "{metrics}"
        );
        ensure!(
            http("kubelet_http_requests_duration_seconds_count", "stats").unwrap_or(0.0) >= 1.0,
            "{metrics}"
        );
        ensure!(
            http("kubelet_http_inflight_requests", "metrics") == Some(1.0),
            "{metrics}"
        );
        for line in [
            "kubelet_running_containers{container_state=\"running\"}",
            "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"} ",
            "kubelet_runtime_operations_total{operation_type=\"start_container\"} ",
            "kubelet_pod_start_duration_seconds_count 1",
        ] {
            ensure!(metrics.contains(line), "{line} in\n{metrics}");
        }
        let running: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_running_pods "))
            .context("kubelet_running_pods")?
            .parse()?;
        ensure!(running >= 1);
        let relists: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_pleg_relist_duration_seconds_count "))
            .context("relist count")?
            .parse()?;
        ensure!(relists >= 1);

        let cadvisor =
            tokio::task::spawn_blocking(move || get(addr, "/metrics/cadvisor")).await??;
        ensure!(
            cadvisor.lines().any(|l| l
                .starts_with("container_cpu_usage_seconds_total{container=\"writer\",")
                && l.contains("namespace=\"default\",pod=\"stats\"}")),
            "{cadvisor}"
        );
        ensure!(cadvisor.contains("container_memory_working_set_bytes{container=\"writer\""));

        let resource =
            tokio::task::spawn_blocking(move || get(addr, "/metrics/resource")).await??;
        check_resource_metrics(&resource, jiff_now_ms())?;
        Ok::<(), anyhow::Error>(())
    }
    .await;

    if let Some(r) = kubelet.take() {
        if let Some(p) = &created {
            let _ = r.kubelet.runtime().kill_pod(p, Some(1)).await;
        }
        stop_kubelet(r).await;
    }
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
