//! Ephemeral containers (`kubectl debug`): added to a running pod through the
//! `pods/ephemeralcontainers` subresource of a real in-process apiserver (TestApiServer),
//! run by the whole kubelet on the real containerd of this machine. One runs to the end,
//! one joins its target's PID namespace; both show in `ephemeralContainerStatuses`, their
//! logs are served by the kubelet, neither is restarted nor changes the pod's readiness,
//! and deleting the pod stops them with it. Fails, never skips, when containerd is not
//! reachable. Run it under `flock /run/ferrokube-e2e.lock` when a cluster may share the
//! runtime.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

mod common;

use anyhow::{Context, Result, ensure};
use common::{start_kubelet_with, wait_for};
use ferrokube_kubelet::container::ContainerType;
use ferrokube_kubelet::server::{Endpoints, bind};
use ferrokube_kubelet::status::RuntimeState;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const BUSYBOX: &str = "docker.io/library/busybox:latest";

/// GET `path` from the kubelet's API port (plain HTTP here): the body of a 200 answer.
fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    // HTTP/1.0: the body ends with the connection, never chunked.
    write!(s, "GET {path} HTTP/1.0\r\nHost: kubelet\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").context("no body")?;
    ensure!(
        head.lines().next().is_some_and(|l| l.contains(" 200 ")),
        "GET {path}: {}",
        &out[..out.len().min(300)]
    );
    Ok(body.to_owned())
}

fn ephemeral_status(p: &Pod, name: &str) -> Option<ContainerStatus> {
    p.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .cloned()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_containers_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-eph-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let kubelet = start_kubelet_with(client.clone(), &node_name, root.path(), |_| {}).await;
    let (addr, _srv) = bind(
        "127.0.0.1:0".parse().expect("addr"),
        kubelet.kubelet.clone(),
        Endpoints::Api,
        kubelet.cancel.clone(),
    )
    .await
    .expect("kubelet API port");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut created: Option<Pod> = None;

    let result = async {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "target", "namespace": "default"},
            "spec": {
                "nodeName": node_name,
                "terminationGracePeriodSeconds": 2,
                "containers": [{
                    "name": "app", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                }],
            },
        }))?;
        created = Some(pods.create(&PostParams::default(), &pod).await?);
        wait_for("target Running and Ready", Duration::from_secs(60), || async {
            let p = pods.get("target").await?;
            Ok(ready(&p).then_some(()))
        })
        .await?;

        // What `kubectl debug` sends: a strategic merge patch of the subresource.
        pods.patch_subresource(
            "ephemeralcontainers",
            "target",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"ephemeralContainers": [
                {"name": "hello", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                 "command": ["echo", "hi"]},
                {"name": "debugger", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                 "stdin": true, "targetContainerName": "app",
                 "command": ["sh", "-c", "echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline); sleep 3600"]},
            ]}})),
        )
        .await?;

        let last = std::sync::Mutex::new(None::<Pod>);
        let waited = wait_for(
            "hello terminated with 0 and debugger running",
            Duration::from_secs(60),
            || async {
                let p = pods.get("target").await?;
                let done = ephemeral_status(&p, "hello")
                    .and_then(|s| s.state?.terminated)
                    .is_some_and(|t| t.exit_code == 0);
                let running = ephemeral_status(&p, "debugger")
                    .and_then(|s| s.state?.running)
                    .is_some();
                *last.lock().unwrap() = Some(p.clone());
                Ok((done && running).then_some(p))
            },
        )
        .await;
        if waited.is_err() {
            eprintln!("last status: {:#?}", last.lock().unwrap().as_ref().map(|p| &p.status));
        }
        let p = waited?;
        let st = p.status.clone().context("status")?;
        let dbg = ephemeral_status(&p, "debugger").context("debugger status")?;
        ensure!(
            !dbg.ready && dbg.started == Some(true) && dbg.restart_count == 0,
            "{dbg:?}"
        );
        ensure!(dbg.container_id.as_deref().is_some_and(|id| id.starts_with("containerd://")));
        ensure!(!dbg.image_id.is_empty(), "{dbg:?}");
        ensure!(st.phase.as_deref() == Some("Running") && ready(&p), "{st:?}");
        ensure!(st.container_statuses.as_ref().is_some_and(|cs| cs.len() == 1));

        // Logs through the kubelet, as `kubectl logs target -c <name>` gets them.
        let hello = tokio::task::spawn_blocking(move || {
            get(addr, "/containerLogs/default/target/hello")
        })
        .await??;
        ensure!(hello == "hi\n", "hello's log: {hello:?}");
        // The debugger sees the target's processes: its PID 1 is the app's sleep.
        let debugger = wait_for("the debugger's log", Duration::from_secs(20), || async {
            let log = tokio::task::spawn_blocking(move || {
                get(addr, "/containerLogs/default/target/debugger")
            })
            .await??;
            Ok((!log.is_empty()).then_some(log))
        })
        .await?;
        ensure!(
            debugger.trim_end() == "pid1=sleep 3600",
            "debugger's log: {debugger:?}"
        );

        // Marked as ephemeral on the runtime, and never started again: after more than
        // a sync period there is still one instance of each.
        tokio::time::sleep(Duration::from_secs(7)).await;
        let uid = p.metadata.uid.clone().context("uid")?;
        let rt = kubelet.kubelet.runtime().runtime_pod(&uid).await?;
        for name in ["hello", "debugger"] {
            let instances: Vec<_> = rt.containers.iter().filter(|c| c.name == name).collect();
            ensure!(
                instances.len() == 1 && instances[0].kind == ContainerType::Ephemeral,
                "{name}: {instances:?}"
            );
        }
        let p = pods.get("target").await?;
        ensure!(
            ephemeral_status(&p, "hello").is_some_and(|s| s.restart_count == 0),
            "{:?}",
            p.status
        );
        ensure!(ready(&p), "still Ready: {:?}", p.status);

        // Deleting the pod stops the ephemeral containers with the rest.
        pods.delete("target", &DeleteParams::default()).await?;
        wait_for("target gone", Duration::from_secs(40), || async {
            Ok(pods.get_opt("target").await?.is_none().then_some(()))
        })
        .await?;
        let rt = kubelet.kubelet.runtime().runtime_pod(&uid).await?;
        ensure!(
            rt.containers
                .iter()
                .all(|c| c.state != RuntimeState::Running),
            "nothing of the pod runs: {rt:?}"
        );
        Ok::<(), anyhow::Error>(())
    }
    .await;

    // Cleanup whatever happened: the pod through the API, then directly on the runtime,
    // then the kubelet and the apiserver.
    let _ = pods.delete("target", &DeleteParams::default()).await;
    let _ = wait_for("target gone", Duration::from_secs(30), || async {
        Ok(pods.get_opt("target").await?.is_none().then_some(()))
    })
    .await;
    if let Some(p) = &created {
        let _ = kubelet.kubelet.runtime().kill_pod(p, Some(2)).await;
    }
    kubelet.cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), kubelet.task).await;
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
