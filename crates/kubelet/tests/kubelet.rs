//! The whole kubelet against a real in-process apiserver (TestApiServer) and the real
//! containerd of this machine (CI runs hack/test.sh, which starts it). Fails, never skips,
//! when containerd is not reachable. Every pod it makes is removed even when a check fails.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

mod common;

use anyhow::{Context, Result, ensure};
use common::{Running, start_kubelet_with, stop_kubelet, wait_for};
use ferrokube_kubelet::sandbox::pod_log_dir;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Container, ExecAction, Lifecycle, LifecycleHandler, Node, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

/// A kubelet of this test with the shared test defaults.
async fn start_kubelet(client: kube::Client, node_name: &str, root: &std::path::Path) -> Running {
    start_kubelet_with(client, node_name, root, |_| {}).await
}

fn http_get(ip: &str) -> Result<String> {
    let addr: SocketAddr = format!("{ip}:80").parse()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// The (reason, message) of the core events about the object named `name`.
async fn events_about(client: &kube::Client, name: &str) -> Result<Vec<(String, String)>> {
    Ok(ferrokube_testing::core_events_about(client, name)
        .await?
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pods_deletion_and_restart_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-it-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let mut kubelet = Some(start_kubelet(client.clone(), &node_name, root.path()).await);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("nginx".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.clone()),
            termination_grace_period_seconds: Some(5),
            containers: vec![Container {
                name: "nginx".into(),
                image: Some("docker.io/library/nginx:latest".into()),
                image_pull_policy: Some("IfNotPresent".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let mut created: Option<Pod> = None;
    // An image no registry serves: its pulls fail at once (nothing listens on port 1).
    const UNPULLABLE: &str = "127.0.0.1:1/ferrokube/unpullable:v1";
    let unpullable = Pod {
        metadata: ObjectMeta {
            name: Some("unpullable".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.clone()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "app".into(),
                image: Some(UNPULLABLE.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let mut created_unpullable = false;
    let mut created_hooked = false;

    let result = async {
        // ---- node registration, status and lease
        let nodes: Api<Node> = Api::all(client.clone());
        let node = wait_for("node Ready", Duration::from_secs(30), || async {
            let n = nodes.get_opt(&node_name).await?;
            Ok(n.filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.type_ == "Ready"
                                && c.status == "True"
                                && c.reason.as_deref() == Some("KubeletReady")
                        })
                    })
            }))
        })
        .await?;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        ensure!(
            labels.get("kubernetes.io/hostname") == Some(&node_name),
            "{labels:?}"
        );
        ensure!(labels.get("kubernetes.io/os").map(String::as_str) == Some("linux"));
        ensure!(labels.contains_key("kubernetes.io/arch"));
        ensure!(labels.get("ferrokube.test/role").map(String::as_str) == Some("kubelet-it"));
        let st = node.status.clone().context("node status")?;
        let cap = st.capacity.clone().context("capacity")?;
        let alloc = st.allocatable.clone().context("allocatable")?;
        for k in ["cpu", "memory", "ephemeral-storage", "pods"] {
            ensure!(
                cap.contains_key(k) && alloc.contains_key(k),
                "{k} in {cap:?} / {alloc:?}"
            );
        }
        ensure!(cap["pods"].0 == "110");
        ensure!(
            cap["memory"] != alloc["memory"],
            "eviction threshold subtracted"
        );
        let info = st.node_info.clone().context("nodeInfo")?;
        ensure!(info.kubelet_version == "v1.33.0");
        ensure!(
            info.container_runtime_version.starts_with("containerd://"),
            "{}",
            info.container_runtime_version
        );
        ensure!(!info.kernel_version.is_empty() && !info.os_image.is_empty());
        let conds: Vec<_> = st
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        ensure!(
            conds
                == [
                    ("MemoryPressure", "False"),
                    ("DiskPressure", "False"),
                    ("PIDPressure", "False"),
                    ("Ready", "True")
                ],
            "{conds:?}"
        );
        ensure!(
            st.addresses
                .iter()
                .flatten()
                .any(|a| a.type_ == "InternalIP" && a.address == "127.0.0.1")
        );
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        let lease = wait_for("node lease", Duration::from_secs(15), || async {
            Ok(leases.get_opt(&node_name).await?)
        })
        .await?;
        let spec = lease.spec.context("lease spec")?;
        ensure!(spec.holder_identity.as_deref() == Some(node_name.as_str()));
        ensure!(spec.lease_duration_seconds == Some(40));
        ensure!(spec.renew_time.is_some());
        ensure!(
            lease.metadata.owner_references.iter().flatten().any(|o| o.kind == "Node"
                && o.uid == node.metadata.uid.clone().unwrap_or_default()),
            "lease owned by the node"
        );

        // ---- the kubelet's events about its node, as upstream's (the UID is the name)
        let about_node = wait_for("node events", Duration::from_secs(20), || async {
            let got = events_about(&client, &node_name).await?;
            let has = |r: &str| got.iter().any(|(reason, _)| reason == r);
            Ok([
                "Starting",
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID",
            ]
            .iter()
            .all(|r| has(r))
            .then_some(got))
        })
        .await?;
        ensure!(
            about_node.contains(&(
                "NodeHasSufficientMemory".into(),
                format!("Node {node_name} status is now: NodeHasSufficientMemory")
            )),
            "{about_node:?}"
        );

        // ---- an image that cannot be pulled: ErrImagePull, then ImagePullBackOff
        pods.create(&PostParams::default(), &unpullable).await?;
        created_unpullable = true;

        // ---- a first sync that takes long (a postStart hook that sleeps): meanwhile the
        // pod shows its container as ContainerCreating, as upstream's status written
        // before the sync.
        let mut hooked = pod.clone();
        hooked.metadata.name = Some("hooked".into());
        hooked.spec.as_mut().context("spec")?.containers[0].lifecycle = Some(Lifecycle {
            post_start: Some(LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(vec!["sleep".into(), "15".into()]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        pods.create(&PostParams::default(), &hooked).await?;
        created_hooked = true;
        let creating = wait_for(
            "ContainerCreating while the postStart hook runs",
            Duration::from_secs(12),
            || async {
                let st = pods.get("hooked").await?.status.unwrap_or_default();
                let reason = st
                    .container_statuses
                    .iter()
                    .flatten()
                    .next()
                    .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
                Ok((reason.as_deref() == Some("ContainerCreating")).then_some(st))
            },
        )
        .await?;
        ensure!(creating.phase.as_deref() == Some("Pending"), "{creating:?}");

        // ---- a pod bound to the node runs and serves
        let p = pods.create(&PostParams::default(), &pod).await?;
        created = Some(p.clone());
        let running = wait_for("pod Running and Ready", Duration::from_secs(60), || async {
            let p = pods.get("nginx").await?;
            let ok = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && condition(&p, "Ready").as_deref() == Some("True")
                && p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some();
            Ok(ok.then_some(p))
        })
        .await?;
        let st = running.status.clone().context("pod status")?;
        for c in [
            "PodReadyToStartContainers",
            "Initialized",
            "ContainersReady",
            "Ready",
            "PodScheduled",
        ] {
            ensure!(
                condition(&running, c).as_deref() == Some("True"),
                "{c}: {st:?}"
            );
        }
        ensure!(st.qos_class.as_deref() == Some("BestEffort"));
        ensure!(st.host_ip.as_deref() == Some("127.0.0.1"));
        ensure!(st.start_time.is_some());
        let cs = &st
            .container_statuses
            .clone()
            .context("container statuses")?[0];
        ensure!(cs.ready && cs.restart_count == 0, "{cs:?}");
        let container_id = cs.container_id.clone().context("containerID")?;
        let pod_ip = st.pod_ip.clone().context("podIP")?;
        let body = wait_for("HTTP 200 from nginx", Duration::from_secs(20), || {
            let ip = pod_ip.clone();
            async move {
                let r = tokio::task::spawn_blocking(move || http_get(&ip)).await??;
                Ok(r.starts_with("HTTP/1.1 200").then_some(r))
            }
        })
        .await?;
        ensure!(body.contains("nginx"), "{body}");
        let about_nginx = wait_for(
            "nginx's container events",
            Duration::from_secs(20),
            || async {
                let got = events_about(&client, "nginx").await?;
                Ok((got.len() >= 3).then_some(got))
            },
        )
        .await?;
        for expected in [
            (
                "Pulled",
                "Container image \"docker.io/library/nginx:latest\" already present on machine",
            ),
            ("Created", "Created container: nginx"),
            ("Started", "Started container nginx"),
        ] {
            ensure!(
                about_nginx.contains(&(expected.0.into(), expected.1.into())),
                "{expected:?} in {about_nginx:?}"
            );
        }

        // The unpullable pod has failed a pull and now waits out its back-off.
        let waiting = wait_for("ImagePullBackOff", Duration::from_secs(60), || async {
            let p = pods.get("unpullable").await?;
            let waiting = p
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|cs| cs.into_iter().next())
                .and_then(|c| c.state)
                .and_then(|s| s.waiting);
            Ok(waiting.filter(|w| w.reason.as_deref() == Some("ImagePullBackOff")))
        })
        .await?;
        let message = waiting.message.unwrap_or_default();
        ensure!(
            message.starts_with(&format!(
                "Back-off pulling image \"{UNPULLABLE}\": ErrImagePull: rpc error: code = "
            )),
            "{message}"
        );
        let about_unpullable = events_about(&client, "unpullable").await?;
        let has = |reason: &str, prefix: &str| {
            about_unpullable
                .iter()
                .any(|(r, m)| r == reason && m.starts_with(prefix))
        };
        ensure!(
            has("Pulling", &format!("Pulling image \"{UNPULLABLE}\""))
                && has(
                    "Failed",
                    &format!("Failed to pull image \"{UNPULLABLE}\": rpc error: ")
                )
                && has("Failed", "Error: ErrImagePull")
                && has(
                    "BackOff",
                    &format!("Back-off pulling image \"{UNPULLABLE}\"")
                )
                && has("Failed", "Error: ImagePullBackOff"),
            "{about_unpullable:?}"
        );

        // ---- restart: the new kubelet adopts the running container
        stop_kubelet(kubelet.take().context("kubelet")?).await;
        kubelet = Some(start_kubelet(client.clone(), &node_name, root.path()).await);
        let k = kubelet.as_ref().context("kubelet")?.kubelet.clone();
        wait_for(
            "restarted kubelet sees the pod",
            Duration::from_secs(20),
            || {
                let k = k.clone();
                async move { Ok((!k.pods().is_empty()).then_some(())) }
            },
        )
        .await?;
        // Let a few syncs and PLEG relists happen.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let rt = k
            .runtime()
            .runtime_pod(&p.metadata.uid.clone().unwrap_or_default())
            .await?;
        ensure!(
            rt.containers.len() == 1 && rt.sandboxes.len() == 1,
            "nothing new was created: {rt:?}"
        );
        let p2 = pods.get("nginx").await?;
        let cs2 = &p2
            .status
            .clone()
            .context("status")?
            .container_statuses
            .context("cs")?[0];
        ensure!(cs2.restart_count == 0, "{cs2:?}");
        ensure!(
            cs2.container_id.as_deref() == Some(container_id.as_str()),
            "{cs2:?}"
        );
        ensure!(condition(&p2, "Ready").as_deref() == Some("True"));

        // ---- graceful deletion finishes the API deletion and cleans the node
        pods.delete("nginx", &DeleteParams::default()).await?;
        wait_for("pod object gone", Duration::from_secs(40), || async {
            Ok(pods.get_opt("nginx").await?.is_none().then_some(()))
        })
        .await?;
        let stopping = ("Killing".to_owned(), "Stopping container nginx".to_owned());
        wait_for("Killing event", Duration::from_secs(20), || async {
            let got = events_about(&client, "nginx").await?;
            Ok(got.contains(&stopping).then_some(()))
        })
        .await?;
        // The pod is terminated once: the informer's late events about the pod (its
        // terminal status, its deletion) start no second termination, whose status write
        // and delete would find the pod gone (this test's own GETs find it gone too).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let metrics = client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await?;
        let missed: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| l.contains("code=\"404\"") && l.contains("resource=\"pods\""))
            .filter(|l| l.contains("verb=\"PATCH\"") || l.contains("verb=\"DELETE\""))
            .collect();
        ensure!(
            missed.is_empty(),
            "requests about a pod already gone: {missed:?}"
        );
        let rt = k
            .runtime()
            .runtime_pod(&p.metadata.uid.clone().unwrap_or_default())
            .await?;
        ensure!(
            rt.containers.is_empty() && rt.sandboxes.is_empty(),
            "{rt:?}"
        );
        let cgroup = k.runtime().pod_cgroup(&p);
        ensure!(
            !k.runtime().cgroups().exists(&cgroup),
            "pod cgroup {cgroup} removed"
        );
        let dir = pod_log_dir(k.runtime().node(), &p);
        ensure!(!dir.exists(), "log dir {} removed", dir.display());
        Ok::<(), anyhow::Error>(())
    }
    .await;

    // Cleanup whatever happened: the pods on the node, then the kubelet and the apiserver.
    if let Some(r) = kubelet.take() {
        if let Some(p) = &created {
            let _ = r.kubelet.runtime().kill_pod(p, Some(2)).await;
        }
        for (created, name) in [
            (created_unpullable, "unpullable"),
            (created_hooked, "hooked"),
        ] {
            if created && let Ok(p) = pods.get(name).await {
                let _ = r.kubelet.runtime().kill_pod(&p, Some(1)).await;
            }
        }
        stop_kubelet(r).await;
    }
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
