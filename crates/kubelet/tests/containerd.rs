//! The runtime manager on the real containerd of this machine (CI runs hack/test.sh, which
//! starts it through hack/lib/runtime.sh). These tests fail, never skip, when containerd is
//! not reachable. Every pod they make is killed (containers, sandbox, cgroup, log dir) even
//! when a check fails; pod IPs are on the local cni0 bridge.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferrokube_kubelet::cri::{CriClient, DEFAULT_ENDPOINT};
use ferrokube_kubelet::env::EnvSources;
use ferrokube_kubelet::{NodeConfig, RuntimeManager};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, Container, ContainerStatus, EnvVar, EnvVarSource, HostAlias,
    ObjectFieldSelector, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn endpoint() -> String {
    std::env::var("FERROKUBE_CRI_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned())
}

async fn manager() -> RuntimeManager {
    let ep = endpoint();
    let cri = match CriClient::connect(&ep, Duration::from_secs(3)).await {
        Ok(c) => c,
        Err(e) => panic!(
            "containerd is not reachable at {ep}: {e}\n\
             start it with: sudo bash -c 'source hack/lib/runtime.sh && rt::ensure' (hack/test.sh does this)"
        ),
    };
    let v = cri
        .version()
        .await
        .unwrap_or_else(|e| panic!("CRI Version on {ep} failed: {e}"));
    assert_eq!(v.runtime_api_version, "v1", "containerd must serve CRI v1");
    let mut node = NodeConfig::new("ferrokube-test-node");
    node.node_ips = vec!["127.0.0.1".into()];
    RuntimeManager::new(cri, node)
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn pod(prefix: &str, restart_policy: &str, containers: Vec<Container>) -> Pod {
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let uid = format!("fk-test-{}-{n}-{nanos:x}", std::process::id());
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}-{n}")),
            namespace: Some("kubelet-test".into()),
            uid: Some(uid),
            labels: Some([("app".to_string(), prefix.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            restart_policy: Some(restart_policy.into()),
            termination_grace_period_seconds: Some(2),
            ..Default::default()
        }),
        status: None,
    }
}

fn busybox(name: &str, script: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("docker.io/library/busybox:latest".into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    }
}

/// Runs `body`, then kills the pod whatever happened, then checks the pod left nothing
/// behind; the body's error (or the cleanup's) fails the test.
async fn with_pod<F, Fut>(m: &RuntimeManager, pod: &Pod, body: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let result = body().await;
    let cleanup = m.kill_pod(pod, Some(2)).await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
    cleanup.expect("kill_pod");
}

fn status_of<'a>(st: &'a PodStatus, name: &str) -> Result<&'a ContainerStatus> {
    st.container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .with_context(|| format!("no status for container {name}: {st:?}"))
}

/// Syncs and reads status until `done` holds (at most `limit`).
async fn sync_until(
    m: &RuntimeManager,
    pod: &mut Pod,
    sources: &EnvSources,
    limit: Duration,
    what: &str,
    done: impl Fn(&PodStatus) -> bool,
) -> Result<PodStatus> {
    let start = Instant::now();
    for _ in 0..300 {
        m.sync_pod(pod, sources).await.context("sync_pod")?;
        let st = m.pod_status(pod).await.context("pod_status")?;
        pod.status = Some(st.clone());
        if done(&st) {
            return Ok(st);
        }
        if start.elapsed() > limit {
            bail!("timed out after {limit:?} waiting for {what}; last status: {st:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("gave up waiting for {what}")
}

fn running(st: &PodStatus, name: &str) -> bool {
    status_of(st, name).is_ok_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// One HTTP GET with timeouts; returns the status line and body.
fn http_get(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")?;
    let mut out = String::new();
    s.take(1 << 20).read_to_string(&mut out)?;
    Ok(out)
}

fn assert_gone(m: &RuntimeManager, pod: &Pod, cgroup: &str, log_dir: &std::path::Path) {
    assert!(
        !m.cgroups().exists(cgroup),
        "pod cgroup {cgroup} left behind"
    );
    assert!(
        !log_dir.exists(),
        "pod log dir {} left behind",
        log_dir.display()
    );
    let _ = pod;
}

fn log_dir(m: &RuntimeManager, pod: &Pod) -> std::path::PathBuf {
    ferrokube_kubelet::sandbox::pod_log_dir(m.node(), pod)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_pod_runs_and_answers_http_then_is_removed() {
    let m = manager().await;
    let mut p = pod(
        "nginx",
        "Always",
        vec![Container {
            name: "nginx".into(),
            image: Some("docker.io/library/nginx:latest".into()),
            ..Default::default()
        }],
    );
    let cgroup = m.pod_cgroup(&p);
    let logs = log_dir(&m, &p);
    let snapshot = p.clone();
    with_pod(&m, &snapshot, || async {
        let st = sync_until(
            &m,
            &mut p,
            &EnvSources::default(),
            Duration::from_secs(60),
            "nginx running",
            |st| running(st, "nginx"),
        )
        .await?;
        let c = status_of(&st, "nginx")?;
        ensure!(
            c.container_id
                .as_deref()
                .is_some_and(|id| id.starts_with("containerd://")),
            "containerID: {c:?}"
        );
        // The repo digest the image was pulled as, as upstream reports it.
        ensure!(
            c.image_id.starts_with("docker.io/library/nginx@sha256:"),
            "imageID: {:?}",
            c.image_id
        );
        ensure!(
            c.image == "docker.io/library/nginx:latest",
            "image: {:?}",
            c.image
        );
        ensure!(
            c.ready && c.started == Some(true) && c.restart_count == 0,
            "{c:?}"
        );
        ensure!(
            st.phase.as_deref() == Some("Running"),
            "phase {:?}",
            st.phase
        );
        ensure!(st.qos_class.as_deref() == Some("BestEffort"));
        let ip = st.pod_ip.clone().context("no podIP")?;
        ensure!(
            ip.starts_with("10.244.0."),
            "pod IP {ip} is not on the local pod bridge"
        );
        ensure!(st.pod_ips.as_ref().is_some_and(|v| v[0].ip == ip));
        ensure!(m.cgroups().exists(&cgroup), "pod cgroup {cgroup} missing");
        ensure!(cgroup.starts_with("/kubepods/besteffort/pod"), "{cgroup}");
        let shares = m.cgroups().read("cpu", &cgroup, "cpu.shares")?;
        ensure!(
            shares.trim() == "2",
            "BestEffort pod cgroup cpu.shares = {shares}"
        );
        // HTTP 200 from the pod IP, bounded retries.
        let addr: SocketAddr = format!("{ip}:80").parse()?;
        let mut last = String::new();
        let mut ok = false;
        for _ in 0..50 {
            match http_get(addr) {
                Ok(r) if r.starts_with("HTTP/1.1 200") => {
                    ensure!(r.contains("Welcome to nginx"), "unexpected body: {r}");
                    ok = true;
                    break;
                }
                Ok(r) => last = r,
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ensure!(ok, "no HTTP 200 from {addr}: {last}");
        ensure!(
            logs.join("nginx/0.log").exists(),
            "container log {} missing",
            logs.join("nginx/0.log").display()
        );
        // A second sync of a converged pod changes nothing.
        let r = m.sync_pod(&p, &EnvSources::default()).await?;
        ensure!(
            r.started.is_empty() && !r.created_sandbox && !r.killed_pod,
            "{r:?}"
        );
        Ok(())
    })
    .await;
    let rt = m
        .runtime_pod(p.metadata.uid.as_deref().unwrap())
        .await
        .unwrap();
    assert!(
        rt.sandboxes.is_empty() && rt.containers.is_empty(),
        "left in the runtime: {rt:?}"
    );
    assert_gone(&m, &p, &cgroup, &logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_env_and_command() {
    let m = manager().await;
    let mut app = busybox(
        "app",
        "echo \"greeting=$GREETING name=$POD_NAME ip=$POD_IP color=$COLOR host=$(cat /etc/hostname)\"; exec sleep 3600",
    );
    app.env = Some(vec![
        EnvVar {
            name: "WHO".into(),
            value: Some("world".into()),
            value_from: None,
        },
        EnvVar {
            name: "GREETING".into(),
            value: Some("hello-$(WHO)".into()),
            value_from: None,
        },
        EnvVar {
            name: "POD_NAME".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
        },
        EnvVar {
            name: "POD_IP".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "status.podIP".into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
        },
        EnvVar {
            name: "COLOR".into(),
            value: None,
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: "settings".into(),
                    key: "color".into(),
                    optional: None,
                }),
                ..Default::default()
            }),
        },
    ]);
    let mut p = pod("envpod", "Always", vec![app]);
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers = Some(vec![busybox("setup", "echo init-ran")]);
    spec.subdomain = Some("grp".into());
    spec.host_aliases = Some(vec![HostAlias {
        ip: "10.1.2.3".into(),
        hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
    }]);
    let sources = EnvSources {
        config_maps: [(
            "settings".to_string(),
            ConfigMap {
                data: Some([("color".to_string(), "blue".to_string())].into()),
                ..Default::default()
            },
        )]
        .into(),
        ..Default::default()
    };
    let pod_name = p.metadata.name.clone().unwrap();
    let cgroup = m.pod_cgroup(&p);
    let logs = log_dir(&m, &p);
    let snapshot = p.clone();
    with_pod(&m, &snapshot, || async {
        let st = sync_until(
            &m,
            &mut p,
            &sources,
            Duration::from_secs(60),
            "app running",
            |st| running(st, "app"),
        )
        .await?;
        let init = st
            .init_container_statuses
            .as_ref()
            .context("no init statuses")?;
        let t = init[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .context("init not terminated")?;
        ensure!(
            t.exit_code == 0 && t.reason.as_deref() == Some("Completed"),
            "{t:?}"
        );
        ensure!(std::fs::read_to_string(logs.join("setup/0.log"))?.contains("init-ran"));
        let ip = st.pod_ip.clone().context("no pod IP")?;
        let want =
            format!("greeting=hello-world name={pod_name} ip={ip} color=blue host={pod_name}");
        let log = logs.join("app/0.log");
        let mut seen = String::new();
        for _ in 0..50 {
            seen = std::fs::read_to_string(&log).unwrap_or_default();
            if seen.contains(&want) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ensure!(
            seen.contains(&want),
            "log {} has {seen:?}, want {want:?}",
            log.display()
        );
        // The CRI log format: <RFC3339Nano> stdout F <line>
        ensure!(seen.split_whitespace().nth(1) == Some("stdout"), "{seen}");
        // ExecSync sees the same environment.
        let id = status_of(&st, "app")?.container_id.clone().unwrap();
        let id = id.trim_start_matches("containerd://");
        let out = m
            .cri()
            .exec_sync(id, vec!["sh".into(), "-c".into(), "echo $COLOR".into()], 5)
            .await?;
        ensure!(
            out.exit_code == 0 && String::from_utf8_lossy(&out.stdout).trim() == "blue",
            "{out:?}"
        );
        // The kubelet's hosts file, not the node's: the pod's name (and FQDN, for its
        // subdomain) at its IP, and its hostAliases.
        let out = m
            .cri()
            .exec_sync(id, vec!["cat".into(), "/etc/hosts".into()], 5)
            .await?;
        let hosts = String::from_utf8_lossy(&out.stdout);
        ensure!(
            hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"),
            "{hosts}"
        );
        ensure!(
            hosts
                .lines()
                .any(|l| l.starts_with(&format!("{ip}\t{pod_name}.grp."))
                    && l.ends_with(&format!(".svc.cluster.local\t{pod_name}"))),
            "no line for the pod at {ip}: {hosts}"
        );
        ensure!(
            hosts.ends_with("# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"),
            "{hosts}"
        );
        Ok(())
    })
    .await;
    assert_gone(&m, &p, &cgroup, &logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_container_restarts_then_backs_off() {
    let m = manager().await;
    let mut p = pod(
        "crasher",
        "Always",
        vec![busybox("crash", "echo dying; exit 3")],
    );
    let cgroup = m.pod_cgroup(&p);
    let logs = log_dir(&m, &p);
    let snapshot = p.clone();
    with_pod(&m, &snapshot, || async {
        let st = sync_until(
            &m,
            &mut p,
            &EnvSources::default(),
            Duration::from_secs(60),
            "CrashLoopBackOff after a restart",
            |st| {
                status_of(st, "crash").is_ok_and(|c| {
                    c.restart_count >= 1
                        && c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
                })
            },
        )
        .await?;
        let c = status_of(&st, "crash")?;
        ensure!(c.restart_count == 1, "restartCount {}", c.restart_count);
        let w = c.state.as_ref().unwrap().waiting.as_ref().unwrap();
        ensure!(
            w.message
                .as_deref()
                .is_some_and(|m| m.starts_with("back-off 10s restarting failed container=crash")),
            "{w:?}"
        );
        let last = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .context("no lastState.terminated")?;
        ensure!(
            last.exit_code == 3 && last.reason.as_deref() == Some("Error"),
            "{last:?}"
        );
        ensure!(!c.ready);
        ensure!(
            st.phase.as_deref() == Some("Running"),
            "phase {:?}",
            st.phase
        );
        ensure!(
            logs.join("crash/0.log").exists() && logs.join("crash/1.log").exists(),
            "one log per attempt"
        );
        Ok(())
    })
    .await;
    assert_gone(&m, &p, &cgroup, &logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_pod_with_restart_never_succeeds() {
    let m = manager().await;
    let mut p = pod("oneshot", "Never", vec![busybox("job", "echo done")]);
    let cgroup = m.pod_cgroup(&p);
    let logs = log_dir(&m, &p);
    let snapshot = p.clone();
    with_pod(&m, &snapshot, || async {
        let st = sync_until(
            &m,
            &mut p,
            &EnvSources::default(),
            Duration::from_secs(60),
            "Succeeded",
            |st| st.phase.as_deref() == Some("Succeeded"),
        )
        .await?;
        let c = status_of(&st, "job")?;
        let t = c
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .context("not terminated")?;
        ensure!(t.exit_code == 0 && c.restart_count == 0, "{c:?}");
        // Once done, the sandbox is stopped and nothing restarts.
        let r = m.sync_pod(&p, &EnvSources::default()).await?;
        ensure!(r.started.is_empty() && !r.created_sandbox, "{r:?}");
        let rt = m.runtime_pod(p.metadata.uid.as_deref().unwrap()).await?;
        ensure!(
            rt.sandboxes.iter().all(|s| !s.ready),
            "sandbox still ready: {rt:?}"
        );
        Ok(())
    })
    .await;
    assert_gone(&m, &p, &cgroup, &logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_manager_adopts_running_containers() {
    let first = manager().await;
    let mut p = pod(
        "adopt",
        "Always",
        vec![busybox("sleeper", "exec sleep 3600")],
    );
    let cgroup = first.pod_cgroup(&p);
    let logs = log_dir(&first, &p);
    let snapshot = p.clone();
    with_pod(&first, &snapshot, || async {
        let st = sync_until(
            &first,
            &mut p,
            &EnvSources::default(),
            Duration::from_secs(60),
            "sleeper running",
            |st| running(st, "sleeper"),
        )
        .await?;
        let id = status_of(&st, "sleeper")?.container_id.clone();
        // A kubelet restart: a new client and manager with no memory of the pod.
        let second = manager().await;
        let r = second.sync_pod(&p, &EnvSources::default()).await?;
        ensure!(
            r.started.is_empty() && !r.created_sandbox && !r.killed_pod,
            "restarted instead of adopting: {r:?}"
        );
        let st2 = second.pod_status(&p).await?;
        let c = status_of(&st2, "sleeper")?;
        ensure!(
            c.container_id == id,
            "container changed: {:?} -> {:?}",
            id,
            c.container_id
        );
        ensure!(c.restart_count == 0 && running(&st2, "sleeper"), "{c:?}");
        ensure!(st2.pod_ip == st.pod_ip, "pod IP changed");
        Ok(())
    })
    .await;
    assert_gone(&first, &p, &cgroup, &logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pleg_reports_start_and_death() {
    use ferrokube_kubelet::pleg::{EventType, GenericPleg};
    let m = manager().await;
    let mut pleg = GenericPleg::new(m.cri().clone());
    pleg.relist().await.expect("first relist");
    let mut p = pod("pleg", "Never", vec![busybox("short", "sleep 1")]);
    let uid = p.metadata.uid.clone().unwrap();
    let cgroup = m.pod_cgroup(&p);
    let logs = log_dir(&m, &p);
    let snapshot = p.clone();
    with_pod(&m, &snapshot, || async {
        m.sync_pod(&p, &EnvSources::default()).await?;
        let mut seen = vec![];
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            for e in pleg.relist().await? {
                if e.pod_uid == uid {
                    seen.push(e.kind);
                }
            }
            if seen.contains(&EventType::ContainerDied) {
                break;
            }
        }
        ensure!(
            seen.contains(&EventType::ContainerStarted),
            "events: {seen:?}"
        );
        ensure!(
            seen.contains(&EventType::ContainerDied),
            "container death not noticed: {seen:?}"
        );
        let st = sync_until(
            &m,
            &mut p,
            &EnvSources::default(),
            Duration::from_secs(10),
            "Succeeded",
            |st| st.phase.as_deref() == Some("Succeeded"),
        )
        .await?;
        ensure!(st.phase.as_deref() == Some("Succeeded"));
        Ok(())
    })
    .await;
    let events = pleg.relist().await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.pod_uid == uid && e.kind == EventType::ContainerRemoved),
        "removal not reported: {events:?}"
    );
    assert_gone(&m, &p, &cgroup, &logs);
}

/// A pod's RuntimeClass selects the CRI handler by the class's `handler`, not its name;
/// a class the kubelet cannot read leaves the pod without a sandbox (upstream's
/// FailedCreatePodSandBox), and once it resolves the pod starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_class_handler_selects_the_runtime() {
    let m = manager().await;
    let mut p = pod("rtclass", "Never", vec![busybox("job", "echo done")]);
    if let Some(spec) = p.spec.as_mut() {
        spec.runtime_class_name = Some("standard".into());
    }
    let cgroup = m.pod_cgroup(&p);
    let logs = log_dir(&m, &p);
    let snapshot = p.clone();
    with_pod(&m, &snapshot, || async {
        let unknown = EnvSources {
            runtime_handler: Some(Err(
                r#"runtimeclass.node.k8s.io "standard" not found"#.into()
            )),
            ..Default::default()
        };
        let err = m
            .sync_pod(&p, &unknown)
            .await
            .err()
            .context("a pod whose RuntimeClass is missing was synced")?;
        ensure!(err.to_string().contains("not found"), "{err}");
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let rt = m.runtime_pod(&uid).await?;
        ensure!(rt.sandboxes.is_empty(), "sandbox created: {rt:?}");
        // The class is named "standard"; its handler is containerd's "runc".
        let known = EnvSources {
            runtime_handler: Some(Ok("runc".into())),
            ..Default::default()
        };
        sync_until(
            &m,
            &mut p,
            &known,
            Duration::from_secs(60),
            "Succeeded",
            |st| st.phase.as_deref() == Some("Succeeded"),
        )
        .await?;
        Ok(())
    })
    .await;
    assert_gone(&m, &p, &cgroup, &logs);
}
