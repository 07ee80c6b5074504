//! Static pods on the real containerd of this machine, with a real in-process apiserver:
//! a manifest file runs as a pod with upstream's name and hash, its mirror pod shows it
//! (and its status) in the API, a deleted mirror comes back without the containers
//! restarting, and removing the file stops the pod and deletes the mirror.

mod common;

use std::time::Duration;

use anyhow::{Context, ensure};
use common::{start_kubelet_with, stop_kubelet, wait_for};
use ferrokube_kubelet::static_pods::{
    CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION,
};
use ferrokube_kubelet::status::RuntimeState;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::DeleteParams;

const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-web\n  labels: {app: static-web}\n\
spec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: web\n    image: docker.io/library/nginx:latest\n    imagePullPolicy: IfNotPresent\n";

fn annotation(p: &Pod, key: &str) -> Option<String> {
    p.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pod_runs_with_a_mirror_pod_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-static-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let manifests = root.path().join("manifests");
    std::fs::create_dir_all(&manifests).expect("manifest dir");
    std::fs::write(manifests.join("web.yaml"), MANIFEST).expect("manifest");
    let dir = manifests.clone();
    let mut kubelet = Some(
        start_kubelet_with(client.clone(), &node_name, root.path(), |c| {
            c.static_pod_path = Some(dir);
        })
        .await,
    );
    let k = kubelet.as_ref().expect("kubelet").kubelet.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod_name = format!("static-web-{node_name}");
    let mut static_uid = None;

    let result = async {
        // ---- the mirror pod appears, owned by the node, and carries the static pod's status
        let mirror = wait_for("mirror pod Running", Duration::from_secs(60), || async {
            let p = pods.get_opt(&pod_name).await?;
            Ok(p.filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
        })
        .await?;
        let hash = annotation(&mirror, CONFIG_MIRROR_ANNOTATION).context("mirror annotation")?;
        static_uid = Some(hash.clone());
        ensure!(annotation(&mirror, CONFIG_HASH_ANNOTATION) == Some(hash.clone()));
        ensure!(annotation(&mirror, CONFIG_SOURCE_ANNOTATION).as_deref() == Some("file"));
        ensure!(
            mirror.metadata.uid.as_deref() != Some(hash.as_str()),
            "the mirror has its own UID"
        );
        let node: Node = Api::all(client.clone()).get(&node_name).await?;
        ensure!(
            mirror
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Node"
                    && o.name == node_name
                    && o.uid == node.metadata.uid.clone().unwrap_or_default()),
            "owned by the node: {:?}",
            mirror.metadata.owner_references
        );
        let cs = mirror
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .context("container statuses on the mirror")?;
        ensure!(cs.len() == 1 && cs[0].ready, "{cs:?}");
        let container_id = cs[0].container_id.clone().context("containerID")?;
        // The runtime pod is the static pod's (its UID is the hash), not the mirror's.
        let rt = k.runtime().runtime_pod(&hash).await?;
        ensure!(
            rt.containers
                .iter()
                .filter(|c| c.state == RuntimeState::Running)
                .count()
                == 1,
            "{rt:?}"
        );
        ensure!(
            k.pods()
                .iter()
                .any(|p| p.metadata.uid.as_deref() == Some(hash.as_str()))
        );

        // ---- a mirror deleted in the API is recreated; the container keeps running
        pods.delete(&pod_name, &DeleteParams::default()).await?;
        let old_uid = mirror.metadata.uid.clone();
        let again = wait_for("mirror pod recreated", Duration::from_secs(30), || async {
            let p = pods.get_opt(&pod_name).await?;
            Ok(p.filter(|p| {
                p.metadata.uid != old_uid
                    && p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            }))
        })
        .await?;
        let cs = again
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .context("statuses on the new mirror")?;
        ensure!(
            cs[0].container_id.as_deref() == Some(container_id.as_str())
                && cs[0].restart_count == 0,
            "same container, not restarted: {cs:?}"
        );

        // ---- the file goes: the pod stops and its mirror is deleted
        std::fs::remove_file(manifests.join("web.yaml"))?;
        wait_for("static pod stopped", Duration::from_secs(30), || async {
            let rt = k.runtime().runtime_pod(&hash).await?;
            Ok(rt
                .containers
                .iter()
                .all(|c| c.state != RuntimeState::Running)
                .then_some(()))
        })
        .await?;
        wait_for("mirror pod deleted", Duration::from_secs(30), || async {
            Ok(pods.get_opt(&pod_name).await?.is_none().then_some(()))
        })
        .await?;
        Ok::<(), anyhow::Error>(())
    }
    .await;

    if let Some(r) = kubelet.take() {
        if let Some(uid) = &static_uid {
            let pod = Pod {
                metadata: ObjectMeta {
                    name: Some(pod_name.clone()),
                    namespace: Some("default".into()),
                    uid: Some(uid.clone()),
                    ..Default::default()
                },
                spec: Some(Default::default()),
                status: None,
            };
            let _ = r.kubelet.runtime().kill_pod(&pod, Some(2)).await;
        }
        stop_kubelet(r).await;
    }
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
