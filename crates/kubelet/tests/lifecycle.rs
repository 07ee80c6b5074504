//! Probes, lifecycle hooks, deadlines and volumes: the whole kubelet against a real
//! in-process apiserver (TestApiServer) and the real containerd of this machine. One test
//! function, so no two kubelets of this binary share the runtime at once (a kubelet removes
//! pods it does not know). Fails, never skips, when containerd is not reachable. Run it
//! under `flock /run/ferrokube-e2e.lock` when a cluster may share the runtime.

use std::time::Duration;

mod common;

use anyhow::{Context, Result, ensure};
use common::{Running, start_kubelet_with, wait_for};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

/// A kubelet of this test with the shared test defaults.
async fn start_kubelet(client: kube::Client, node_name: &str, root: &std::path::Path) -> Running {
    start_kubelet_with(client, node_name, root, |_| {}).await
}

const BUSYBOX: &str = "docker.io/library/busybox:latest";
const NGINX: &str = "docker.io/library/nginx:latest";

fn pod(name: &str, node: &str, spec: serde_json::Value) -> Result<Pod> {
    let mut spec = spec;
    spec["nodeName"] = json!(node);
    spec["terminationGracePeriodSeconds"] = json!(2);
    for c in spec["containers"].as_array_mut().context("containers")? {
        c["imagePullPolicy"] = json!("IfNotPresent");
    }
    for c in spec["initContainers"].as_array_mut().into_iter().flatten() {
        c["imagePullPolicy"] = json!("IfNotPresent");
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))?)
}

fn sh(name: &str, script: &str) -> serde_json::Value {
    json!({"name": name, "image": BUSYBOX, "command": ["sh", "-c", script]})
}

fn status_of(p: &Pod, container: &str) -> Option<ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)
        .cloned()
}

fn condition(p: &Pod, type_: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// Waits until `check` holds for the pod `name`; returns the pod.
async fn wait_pod(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Pod) -> bool,
) -> Result<Pod> {
    let r = wait_for(&format!("{name}: {what}"), timeout, || async {
        let p = pods.get(name).await?;
        Ok(check(&p).then_some(p))
    })
    .await;
    if r.is_err()
        && let Ok(p) = pods.get(name).await
    {
        eprintln!("{name} last status: {:#?}", p.status);
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_hooks_deadlines_and_volumes_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-lc-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let kubelet = start_kubelet(client.clone(), &node_name, root.path()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut created: Vec<Pod> = vec![];

    let result = async {
        let n = &node_name;
        let order_dir = root.path().join("sidecar-order");
        let specs = vec![
            // Liveness fails at once: the container is killed and started again.
            pod("liveness", n, json!({"containers": [{
                "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
                "livenessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1},
            }]}))?,
            // Ready while /tmp/ready exists, for ~6 s, then not ready.
            pod("readiness", n, json!({"containers": [{
                "name": "c", "image": BUSYBOX,
                "command": ["sh", "-c", "touch /tmp/ready; sleep 6; rm /tmp/ready; sleep 3600"],
                "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1},
            }]}))?,
            // postStart writes a file; the startup and readiness probes look for it.
            pod("hooks", n, json!({"containers": [{
                "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
                "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo hooked > /tmp/poststart"]}}},
                "startupProbe": {"exec": {"command": ["test", "-f", "/tmp/poststart"]}, "periodSeconds": 1},
                "readinessProbe": {"exec": {"command": ["grep", "-q", "hooked", "/tmp/poststart"]}, "periodSeconds": 1},
            }]}))?,
            // A failing postStart hook kills the container.
            pod("badhook", n, json!({"containers": [{
                "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
                "lifecycle": {"postStart": {"exec": {"command": ["false"]}}},
            }]}))?,
            // httpGet on a named port and tcpSocket against nginx.
            pod("web", n, json!({"containers": [{
                "name": "nginx", "image": NGINX,
                "ports": [{"name": "http", "containerPort": 80}],
                "readinessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1},
            }]}))?,
            // activeDeadlineSeconds ends the pod.
            pod("deadline", n, json!({"activeDeadlineSeconds": 3, "containers": [
                {"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"]},
            ]}))?,
            // A crashing container backs off.
            pod("crash", n, json!({"containers": [sh("c", "exit 3")]}))?,
            // Termination messages: the file, and the log on error.
            pod("message", n, json!({"restartPolicy": "Never", "containers": [
                sh("file", "printf done-msg > /dev/termination-log"),
                {"name": "logs", "image": BUSYBOX, "command": ["sh", "-c", "echo from-logs; exit 1"],
                 "terminationMessagePolicy": "FallbackToLogsOnError"},
            ]}))?,
            // A sidecar (an init container that always restarts) between two steps: it
            // starts in order, keeps running beside the app, and counts for readiness.
            // On delete each container notes when SIGTERM reached it: the app first,
            // then the sidecars in reverse order (side2 takes its time; side would
            // come first if both had SIGTERM at once).
            pod("sidecar", n, json!({
                "volumes": [{"name": "order", "hostPath": {"path": order_dir.display().to_string(), "type": "DirectoryOrCreate"}}],
                "initContainers": [
                    sh("first", "echo first"),
                    {"name": "side", "image": BUSYBOX, "restartPolicy": "Always",
                     "command": ["sh", "-c", "trap 'echo side >> /order/log; exit 0' TERM; touch /tmp/up; while true; do sleep 0.2; done"],
                     "volumeMounts": [{"name": "order", "mountPath": "/order"}],
                     "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/up"]}, "periodSeconds": 1}},
                    {"name": "side2", "image": BUSYBOX, "restartPolicy": "Always",
                     "command": ["sh", "-c", "trap 'sleep 0.5; echo side2 >> /order/log; exit 0' TERM; while true; do sleep 0.2; done"],
                     "volumeMounts": [{"name": "order", "mountPath": "/order"}]},
                ],
                "containers": [{"name": "app", "image": BUSYBOX,
                    "command": ["sh", "-c", "trap 'sleep 1; echo app >> /order/log; exit 0' TERM; while true; do sleep 0.2; done"],
                    "volumeMounts": [{"name": "order", "mountPath": "/order"}]}],
            }))?,
            // A finished app ends the pod although its sidecar would run on. Once it
            // has, its emptyDir and cgroup are freed while the pod is still there. The
            // sidecar (`sleep` as PID 1 ignores SIGTERM) takes its whole grace period to
            // stop, and meanwhile the status shows the app finished.
            pod("sidecar-job", n, json!({
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "initContainers": [
                    {"name": "side", "image": BUSYBOX, "restartPolicy": "Always", "command": ["sleep", "3600"]},
                ],
                "containers": [{"name": "app", "image": BUSYBOX,
                    "command": ["sh", "-c", "echo data > /scratch/x; sleep 1; echo done"],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            }))?,
        ];
        // The projected token comes from TokenRequest for the pod's service account.
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        if sas.get_opt("default").await?.is_none() {
            sas.create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "default"}}))?,
            )
            .await?;
        }
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
        cms.create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "cfg"}, "data": {"greeting": "hello"},
        }))?).await?;
        secrets.create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "sec"}, "stringData": {"password": "s3cret"},
        }))?).await?;
        let host_dir = root.path().join("host-volume");
        let volumes_pod = pod("volumes", n, json!({
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
                {"name": "shared", "emptyDir": {}},
                {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                {"name": "info", "downwardAPI": {"items": [
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                ]}},
                {"name": "proj", "projected": {"sources": [
                    {"configMap": {"name": "cfg", "items": [{"key": "greeting", "path": "cm/greeting"}]}},
                    {"secret": {"name": "sec"}},
                    {"serviceAccountToken": {"path": "token"}},
                ]}},
                {"name": "host", "hostPath": {"path": host_dir.display().to_string(), "type": "DirectoryOrCreate"}},
            ],
            "containers": [
                {"name": "writer", "image": BUSYBOX,
                 "command": ["sh", "-c", "echo shared-data > /shared/x; sleep 3600"],
                 "volumeMounts": [{"name": "shared", "mountPath": "/shared"}, {"name": "mem", "mountPath": "/mem"}]},
                {"name": "reader", "image": BUSYBOX, "command": ["sleep", "3600"],
                 "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo bye > /host/prestop"]}}},
                 "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "sec", "mountPath": "/etc/sec"},
                    {"name": "shared", "mountPath": "/shared", "readOnly": true},
                    {"name": "info", "mountPath": "/etc/info"},
                    {"name": "proj", "mountPath": "/etc/proj"},
                    {"name": "host", "mountPath": "/host"},
                    {"name": "cfg", "mountPath": "/single", "subPath": "greeting"},
                 ]},
            ],
        }))?;
        let specs: Vec<Pod> = specs.into_iter().chain([volumes_pod]).collect();
        for p in &specs {
            created.push(pods.create(&PostParams::default(), p).await?);
        }

        // ---- sidecars
        let init_status = |p: &Pod, name: &str| {
            p.status
                .as_ref()
                .and_then(|s| s.init_container_statuses.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == name).cloned())
        };
        let with_sidecar = wait_pod(&pods, "sidecar", "Running, Ready, Initialized", Duration::from_secs(60), |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && condition(p, "Ready").as_deref() == Some("True")
                && condition(p, "Initialized").as_deref() == Some("True")
        })
        .await?;
        let first = init_status(&with_sidecar, "first").context("first's status")?;
        ensure!(
            first.state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code) == Some(0),
            "{first:?}"
        );
        let side = init_status(&with_sidecar, "side").context("side's status")?;
        ensure!(
            side.state.as_ref().is_some_and(|s| s.running.is_some())
                && side.started == Some(true)
                && side.ready,
            "{side:?}"
        );
        let app = status_of(&with_sidecar, "app").context("app's status")?;
        ensure!(app.ready && app.state.as_ref().is_some_and(|s| s.running.is_some()), "{app:?}");
        wait_pod(&pods, "sidecar-job", "app finished while its sidecar stops", Duration::from_secs(60), |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && status_of(p, "app").and_then(|c| c.state?.terminated).is_some()
                && init_status(p, "side").and_then(|c| c.state?.running).is_some()
        })
        .await?;
        let job = wait_pod(&pods, "sidecar-job", "Succeeded", Duration::from_secs(60), |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
        })
        .await?;
        let side = init_status(&job, "side").context("the job's sidecar status")?;
        ensure!(
            side.state.as_ref().is_some_and(|s| s.terminated.is_some()),
            "the sidecar is stopped once the app is done: {side:?}"
        );
        let job_uid = job.metadata.uid.clone().context("uid")?;
        let job_dir = root.path().join("pods").join(&job_uid);
        let scratch = job_dir.join("volumes/kubernetes.io~empty-dir/scratch");
        let job_cgroup = kubelet.kubelet.runtime().pod_cgroup(&job);
        wait_for("the finished pod's emptyDir and cgroup freed", Duration::from_secs(30), || async {
            Ok((!scratch.exists() && !kubelet.kubelet.runtime().cgroups().exists(&job_cgroup))
                .then_some(()))
        })
        .await?;
        ensure!(job_dir.is_dir(), "the finished pod keeps its directory until it is deleted");
        let job = pods.get("sidecar-job").await?;
        ensure!(
            status_of(&job, "app").and_then(|c| c.state?.terminated).is_some_and(|t| t.exit_code == 0),
            "the finished pod's status stays: {:?}",
            job.status
        );

        let restarted = wait_pod(&pods, "liveness", "restartCount >= 1", Duration::from_secs(60), |p| {
            status_of(p, "c").is_some_and(|c| c.restart_count >= 1)
        })
        .await?;
        let cs = status_of(&restarted, "c").context("status")?;
        let last = cs.last_state.and_then(|s| s.terminated).context("lastState.terminated")?;
        ensure!(last.exit_code == 137 || last.exit_code == 143, "killed: {last:?}");

        wait_pod(&pods, "readiness", "ready", Duration::from_secs(60), |p| {
            status_of(p, "c").is_some_and(|c| c.ready)
                && condition(p, "Ready").as_deref() == Some("True")
                && condition(p, "ContainersReady").as_deref() == Some("True")
        })
        .await?;
        let p = wait_pod(&pods, "readiness", "not ready again", Duration::from_secs(30), |p| {
            status_of(p, "c").is_some_and(|c| !c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
                && condition(p, "Ready").as_deref() == Some("False")
        })
        .await?;
        ensure!(status_of(&p, "c").is_some_and(|c| c.restart_count == 0), "readiness never restarts");

        let p = wait_pod(&pods, "hooks", "started and ready", Duration::from_secs(60), |p| {
            status_of(p, "c").is_some_and(|c| c.started == Some(true) && c.ready)
        })
        .await?;
        ensure!(status_of(&p, "c").is_some_and(|c| c.restart_count == 0));

        wait_pod(&pods, "badhook", "PostStartHookError, restarted", Duration::from_secs(60), |p| {
            status_of(p, "c").is_some_and(|c| {
                c.restart_count >= 1
                    || c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref())
                        == Some("PostStartHookError")
            })
        })
        .await?;

        wait_pod(&pods, "web", "ready through httpGet", Duration::from_secs(60), |p| {
            status_of(p, "nginx").is_some_and(|c| c.ready && c.restart_count == 0)
        })
        .await?;

        let p = wait_pod(&pods, "deadline", "Failed", Duration::from_secs(60), |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
        })
        .await?;
        let st = p.status.clone().context("status")?;
        ensure!(st.reason.as_deref() == Some("DeadlineExceeded"), "{st:?}");
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let rt = kubelet.kubelet.runtime().runtime_pod(&uid).await?;
        ensure!(
            rt.containers.iter().all(|c| c.state != ferrokube_kubelet::status::RuntimeState::Running),
            "deadline pod's containers stopped: {rt:?}"
        );

        wait_pod(&pods, "crash", "CrashLoopBackOff", Duration::from_secs(60), |p| {
            status_of(p, "c").is_some_and(|c| {
                c.restart_count >= 1
                    && c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref())
                        == Some("CrashLoopBackOff")
            })
        })
        .await?;

        // Termination messages.
        let p = wait_pod(&pods, "message", "both containers terminated", Duration::from_secs(60), |p| {
            ["file", "logs"].iter().all(|c| {
                status_of(p, c).is_some_and(|s| s.state.as_ref().is_some_and(|s| s.terminated.is_some()))
            })
        })
        .await?;
        let message = |c: &str| {
            status_of(&p, c)
                .and_then(|s| s.state)
                .and_then(|s| s.terminated)
                .and_then(|t| t.message)
        };
        ensure!(message("file").as_deref() == Some("done-msg"), "{:?}", message("file"));
        ensure!(message("logs").as_deref() == Some("from-logs\n"), "{:?}", message("logs"));

        // Volumes: every kind shows its data inside the containers.
        let p = wait_pod(&pods, "volumes", "Running and Ready", Duration::from_secs(60), |p| {
            condition(p, "Ready").as_deref() == Some("True")
        })
        .await?;
        let cri = kubelet.kubelet.runtime().cri().clone();
        let id = |c: &str| -> Result<String> {
            let cid = status_of(&p, c).and_then(|s| s.container_id).context("container id")?;
            Ok(cid.trim_start_matches("containerd://").to_owned())
        };
        let (reader, writer) = (id("reader")?, id("writer")?);
        let exec = |id: String, cmd: &'static str| {
            let cri = cri.clone();
            async move {
                let r = cri
                    .exec_sync(&id, vec!["sh".into(), "-c".into(), cmd.into()], 10)
                    .await?;
                ensure!(r.exit_code == 0, "{cmd}: exit {} {}", r.exit_code, String::from_utf8_lossy(&r.stderr));
                Ok::<String, anyhow::Error>(String::from_utf8_lossy(&r.stdout).into_owned())
            }
        };
        for (cmd, want) in [
            ("cat /etc/cfg/greeting", "hello"),
            ("cat /etc/sec/password", "s3cret"),
            ("stat -L -c %a /etc/sec/password", "400\n"),
            ("cat /shared/x", "shared-data\n"),
            ("cat /etc/info/name", "volumes"),
            ("cat /etc/proj/cm/greeting /etc/proj/password", "hellos3cret"),
            ("awk -F. '{print NF}' /etc/proj/token", "3\n"),
            ("cat /single", "hello"),
            ("touch /etc/cfg/x 2>/dev/null || echo read-only", "read-only\n"),
            ("touch /shared/y 2>/dev/null || echo read-only", "read-only\n"),
        ] {
            let got = exec(reader.clone(), cmd).await?;
            ensure!(got == want, "{cmd}: got {got:?}, want {want:?}");
        }
        let mounts = exec(writer.clone(), "grep ' /mem ' /proc/mounts").await?;
        ensure!(mounts.starts_with("tmpfs /mem tmpfs") && mounts.contains("size=16384k"), "{mounts}");
        let pod_uid = p.metadata.uid.clone().unwrap_or_default();
        let cfg_dir = root.path().join(format!("pods/{pod_uid}/volumes/kubernetes.io~configmap/cfg"));
        ensure!(std::fs::read_link(cfg_dir.join("..data"))?.to_string_lossy().starts_with("..2"));
        ensure!(std::fs::read_link(cfg_dir.join("greeting"))? == std::path::Path::new("..data/greeting"));

        // A configMap update reaches the files.
        let mut cm = cms.get("cfg").await?;
        cm.data = Some([("greeting".to_owned(), "updated".to_owned())].into());
        cms.replace("cfg", &PostParams::default(), &cm).await?;
        let exec2 = &exec;
        let reader2 = reader.clone();
        wait_for("configMap update in the volume", Duration::from_secs(40), || {
            let r = reader2.clone();
            async move {
                let got = exec2(r, "cat /etc/cfg/greeting /etc/proj/cm/greeting").await?;
                Ok((got == "updatedupdated").then_some(()))
            }
        })
        .await?;

        // Deleting a pod with sidecars stops the app, then the sidecars in reverse order
        // (late in the test: the checks above watch pods in time windows).
        pods.delete("sidecar", &DeleteParams::default()).await?;
        wait_for("sidecar pod gone", Duration::from_secs(40), || async {
            Ok(pods.get_opt("sidecar").await?.is_none().then_some(()))
        })
        .await?;
        let order = std::fs::read_to_string(order_dir.join("log"))?;
        ensure!(order == "app\nside2\nside\n", "stop order: {order:?}");

        // Deleting the pod runs the preStop hook and removes its volumes (tmpfs unmounted).
        pods.delete("volumes", &DeleteParams::default()).await?;
        wait_for("volumes pod gone", Duration::from_secs(40), || async {
            Ok(pods.get_opt("volumes").await?.is_none().then_some(()))
        })
        .await?;
        ensure!(std::fs::read_to_string(host_dir.join("prestop"))? == "bye\n", "preStop ran");
        let pod_dir = root.path().join(format!("pods/{pod_uid}"));
        ensure!(!pod_dir.exists(), "{} removed", pod_dir.display());
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        ensure!(!mountinfo.contains(&pod_uid), "no mount of the pod left: {mountinfo}");

        // Events: the liveness failures and the kill are recorded.
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        wait_for("Unhealthy and Killing events for liveness", Duration::from_secs(20), || async {
            let list = events.list(&ListParams::default()).await?;
            let about = |reason: &str| {
                list.items.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("liveness")
                })
            };
            Ok((about("Unhealthy") && about("Killing")).then_some(()))
        })
        .await?;
        Ok::<(), anyhow::Error>(())
    }
    .await;

    // Cleanup whatever happened: pods through the API (the kubelet finishes them), then
    // directly on the runtime, then the kubelet and the apiserver.
    for p in &created {
        let _ = pods
            .delete(
                p.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await;
    }
    let _ = wait_for("pods gone", Duration::from_secs(40), || async {
        Ok(pods
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await;
    for p in &created {
        let _ = kubelet.kubelet.runtime().kill_pod(p, Some(2)).await;
    }
    kubelet.cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), kubelet.task).await;
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
