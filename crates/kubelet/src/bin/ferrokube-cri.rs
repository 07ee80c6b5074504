//! A small CRI tool for scripts, debugging and benchmarks (there is no crictl on these
//! machines):
//!
//! ```text
//! ferrokube-cri [--endpoint unix:///run/containerd/containerd.sock] pods|containers|images|version
//! ferrokube-cri [--endpoint ...] remove-all-pods
//! ferrokube-cri [--endpoint ...] floor [--count N] [--image REF] [--pause-image REF]
//! ```
//!
//! `floor` measures the physical floor of a pod start (issue 6's benchmark): through the
//! CRI only, with the kubelet's own sandbox and container configs for a one-container
//! BestEffort pod (`sleep 3600`), it times RunPodSandbox (containerd runs the CNI plugins
//! for the pod network), CreateContainer and StartContainer until ContainerStatus says
//! RUNNING, N times one after another, then prints every sample and p50/p99. The image
//! must be present (it is checked before timing: a pull is not part of the floor). Each
//! pod is stopped and removed after its sample, outside the timing; the floor's cgroups
//! (under `/ferrokube-cri-floor`) and log directories are removed at the end.
//!
//! Part of the kubelet crate (client side); like the kubelet it talks to the runtime only
//! through the CRI and never to the apiserver's storage.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrokube_kubelet::config::NodeConfig;
use ferrokube_kubelet::container::{ContainerInputs, ContainerType, container_config};
use ferrokube_kubelet::cri::{CriClient, DEFAULT_ENDPOINT};
use ferrokube_kubelet::sandbox::sandbox_config;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

#[path = "common/percentile.rs"]
mod percentile;

/// The floor's pods live in their own cgroup tree and namespace name, so nothing of the
/// kubelet's (pod cgroups, orphan cleanup by namespace/uid) is mistaken for them.
const FLOOR_CGROUP_ROOT: &str = "/ferrokube-cri-floor";
const FLOOR_NAMESPACE: &str = "ferrokube-cri-floor";
/// Bounds on `--count` and on how long one pod may take to reach RUNNING.
const MAX_COUNT: usize = 1000;
const RUNNING_DEADLINE: Duration = Duration::from_secs(60);

fn usage() -> ! {
    eprintln!(
        "usage: ferrokube-cri [--endpoint ENDPOINT] pods|containers|images|version|remove-all-pods\n       \
         ferrokube-cri [--endpoint ENDPOINT] floor [--count N] [--image REF] [--pause-image REF]"
    );
    std::process::exit(2)
}

/// `floor`'s options.
#[derive(Debug, PartialEq)]
struct FloorOptions {
    count: usize,
    image: String,
    /// Only for the record: the sandbox image is containerd's `sandbox_image`; when given,
    /// its presence is checked too, so a pull cannot hide in RunPodSandbox.
    pause_image: Option<String>,
}

fn parse_floor(args: &[String]) -> Result<FloorOptions, String> {
    let mut o = FloorOptions {
        count: 100,
        image: "docker.io/library/busybox:latest".into(),
        pause_image: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .clone();
        match flag.as_str() {
            "--count" => {
                o.count = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_COUNT).contains(n))
                    .ok_or_else(|| format!("--count must be 1..{MAX_COUNT}, got {value:?}"))?
            }
            "--image" => o.image = value,
            "--pause-image" => o.pause_image = Some(value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(o)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut endpoint = DEFAULT_ENDPOINT.to_owned();
    if args.first().map(String::as_str) == Some("--endpoint") {
        if args.len() < 2 {
            usage();
        }
        endpoint = args.remove(1);
        args.remove(0);
    }
    let Some((cmd, rest)) = args.split_first() else {
        usage()
    };
    let result = if cmd == "floor" {
        match parse_floor(rest) {
            Ok(o) => floor(&endpoint, &o).await,
            Err(e) => {
                eprintln!("ferrokube-cri floor: {e}");
                usage()
            }
        }
    } else if rest.is_empty() {
        run(&endpoint, cmd).await
    } else {
        usage()
    };
    if let Err(e) = result {
        eprintln!("ferrokube-cri: {e}");
        std::process::exit(1);
    }
}

/// The pod the floor starts: the benchmark pod's shape (one container, no resources, so
/// BestEffort; `sleep 3600`; default pod network).
fn floor_pod(index: usize, image: &str) -> Pod {
    let uid = format!("ferrokube-cri-floor-{}-{index}", std::process::id());
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("floor-{index}")),
            namespace: Some(FLOOR_NAMESPACE.into()),
            uid: Some(uid),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![floor_container(image)],
            restart_policy: Some("Never".into()),
            ..Default::default()
        }),
        status: None,
    }
}

fn floor_container(image: &str) -> Container {
    Container {
        name: "floor".into(),
        image: Some(image.into()),
        command: Some(vec!["sleep".into(), "3600".into()]),
        ..Default::default()
    }
}

async fn floor(endpoint: &str, o: &FloorOptions) -> Result<(), Box<dyn std::error::Error>> {
    let cri = CriClient::connect(endpoint, Duration::from_secs(10)).await?;
    // A pull must not be part of the floor: the image (and the sandbox image) must be there.
    let image_ref = cri
        .image_status(&o.image)
        .await?
        .ok_or_else(|| format!("image {} is not present; import it first", o.image))?
        .id;
    if let Some(pause) = &o.pause_image {
        cri.image_status(pause)
            .await?
            .ok_or_else(|| format!("sandbox image {pause} is not present"))?;
    }
    let log_root = std::env::temp_dir().join(format!("ferrokube-cri-floor-{}", std::process::id()));
    let mut node = NodeConfig::new("ferrokube-cri-floor");
    node.pod_logs_dir = log_root.clone();
    node.cgroup_root = FLOOR_CGROUP_ROOT.into();

    let mut samples = Vec::with_capacity(o.count);
    let mut outcome = Ok(());
    for i in 1..=o.count {
        match start_one(&cri, &node, i, &o.image, &image_ref).await {
            Ok((elapsed, sandbox_id)) => {
                samples.push(elapsed);
                eprintln!("  floor-{i} RUNNING after {} ms", elapsed.as_millis());
                if let Err(e) = remove_sandbox(&cri, &sandbox_id, 0).await {
                    outcome = Err(format!("removing sandbox {sandbox_id}: {e}"));
                    break;
                }
            }
            Err((e, sandbox_id)) => {
                if let Some(id) = sandbox_id {
                    let _ = remove_sandbox(&cri, &id, 0).await;
                }
                outcome = Err(format!("floor-{i}: {e}"));
                break;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&log_root);
    remove_cgroup_tree(Path::new("/sys/fs/cgroup"), FLOOR_CGROUP_ROOT);
    outcome?;

    println!("{}", percentile::summary("floor", &samples));
    Ok(())
}

/// One timed pod start. Returns the time from just before RunPodSandbox until
/// ContainerStatus reports RUNNING, and the sandbox to remove; on error, the sandbox if
/// one was made.
async fn start_one(
    cri: &CriClient,
    node: &NodeConfig,
    index: usize,
    image: &str,
    image_ref: &str,
) -> Result<(Duration, String), (String, Option<String>)> {
    let pod = floor_pod(index, image);
    let container = floor_container(image);
    let sandbox = sandbox_config(node, &pod, 0);
    let config = container_config(
        node,
        &pod,
        &ContainerInputs {
            container: &container,
            restart_count: 0,
            image_ref,
            env: &[],
            kind: ContainerType::Regular,
            pid_target: None,
        },
    )
    .map_err(|e| (e.to_string(), None))?;
    let log_dir = PathBuf::from(&sandbox.log_directory);

    let t0 = Instant::now();
    // The kubelet makes the pod's log directory before the sandbox; so does the floor.
    std::fs::create_dir_all(&log_dir).map_err(|e| (format!("{}: {e}", log_dir.display()), None))?;
    let sandbox_id = cri
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .map_err(|e| (format!("RunPodSandbox: {e}"), None))?;
    let fail =
        |what: &str, e: &dyn std::fmt::Display| (format!("{what}: {e}"), Some(sandbox_id.clone()));
    let container_id = cri
        .create_container(&sandbox_id, config, sandbox)
        .await
        .map_err(|e| fail("CreateContainer", &e))?;
    cri.start_container(&container_id)
        .await
        .map_err(|e| fail("StartContainer", &e))?;
    loop {
        let status = cri
            .container_status(&container_id)
            .await
            .map_err(|e| fail("ContainerStatus", &e))?;
        if status.state == cri::ContainerState::ContainerRunning as i32 {
            return Ok((t0.elapsed(), sandbox_id));
        }
        if status.state == cri::ContainerState::ContainerExited as i32 {
            return Err(fail("container", &"exited instead of running"));
        }
        if t0.elapsed() > RUNNING_DEADLINE {
            return Err(fail("container", &"not RUNNING within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Stops (with `grace_secs`, then SIGKILL) and removes the sandbox's containers, then the
/// sandbox.
async fn remove_sandbox(
    cri: &CriClient,
    sandbox_id: &str,
    grace_secs: i64,
) -> Result<(), Box<dyn std::error::Error>> {
    for c in cri
        .list_containers(Some(cri::ContainerFilter {
            pod_sandbox_id: sandbox_id.to_owned(),
            ..Default::default()
        }))
        .await?
    {
        match cri.stop_container(&c.id, grace_secs).await {
            Err(e) if !e.is_not_found() => return Err(e.into()),
            _ => {}
        }
        cri.remove_container(&c.id).await?;
    }
    match cri.stop_pod_sandbox(sandbox_id).await {
        Err(e) if !e.is_not_found() => return Err(e.into()),
        _ => {}
    }
    cri.remove_pod_sandbox(sandbox_id).await?;
    Ok(())
}

/// Removes `<mount>/<controller>/<root>` and the empty cgroups under it, in every v1
/// hierarchy (runc removes the containers' own cgroups; the parents it made stay).
fn remove_cgroup_tree(mount: &Path, root: &str) {
    fn remove_dirs(dir: &Path, depth: usize) {
        // Bounded: the floor's tree is root/besteffort/pod<uid>.
        if depth > 4 {
            return;
        }
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    remove_dirs(&e.path(), depth + 1);
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let Ok(controllers) = std::fs::read_dir(mount) else {
        return;
    };
    for c in controllers.flatten() {
        let tree = c.path().join(root.trim_start_matches('/'));
        if tree.is_dir() {
            remove_dirs(&tree, 0);
        }
    }
}

async fn run(endpoint: &str, cmd: &str) -> Result<(), Box<dyn std::error::Error>> {
    let cri = CriClient::connect(endpoint, Duration::from_secs(5)).await?;
    match cmd {
        "version" => {
            let v = cri.version().await?;
            println!(
                "{} {} (CRI {})",
                v.runtime_name, v.runtime_version, v.runtime_api_version
            );
        }
        "pods" => {
            for s in cri.list_pod_sandboxes(None).await? {
                let m = s.metadata.unwrap_or_default();
                println!(
                    "{}\t{}/{}\tattempt={}\tstate={}",
                    s.id, m.namespace, m.name, m.attempt, s.state
                );
            }
        }
        "containers" => {
            for c in cri.list_containers(None).await? {
                let m = c.metadata.unwrap_or_default();
                println!(
                    "{}\t{}\tattempt={}\tstate={}\tsandbox={}",
                    c.id, m.name, m.attempt, c.state, c.pod_sandbox_id
                );
            }
        }
        "images" => {
            for i in cri.list_images().await? {
                println!("{}\t{}", i.id, i.repo_tags.join(","));
            }
        }
        "remove-all-pods" => {
            let sandboxes = cri.list_pod_sandboxes(None).await?;
            for s in &sandboxes {
                remove_sandbox(&cri, &s.id, 2).await?;
            }
            println!("removed {} pod sandboxes", sandboxes.len());
        }
        _ => usage(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn floor_flags_parse_with_defaults_and_bounds() {
        let o = parse_floor(&[]).unwrap();
        assert_eq!(o.count, 100);
        assert_eq!(o.image, "docker.io/library/busybox:latest");
        let o = parse_floor(&strs(&[
            "--count",
            "7",
            "--image",
            "nginx",
            "--pause-image",
            "p",
        ]))
        .unwrap();
        assert_eq!(
            o,
            FloorOptions {
                count: 7,
                image: "nginx".into(),
                pause_image: Some("p".into())
            }
        );
        assert!(parse_floor(&strs(&["--count", "0"])).is_err());
        assert!(parse_floor(&strs(&["--count", "100000"])).is_err());
        assert!(parse_floor(&strs(&["--count"])).is_err());
        assert!(parse_floor(&strs(&["--bogus", "1"])).is_err());
    }

    #[test]
    fn the_floor_pod_gets_the_kubelet_configs_in_its_own_cgroup_tree() {
        let mut node = NodeConfig::new("n");
        node.cgroup_root = FLOOR_CGROUP_ROOT.into();
        let pod = floor_pod(3, "busybox");
        let sandbox = sandbox_config(&node, &pod, 0);
        let linux = sandbox.linux.unwrap();
        assert!(
            linux
                .cgroup_parent
                .starts_with("/ferrokube-cri-floor/besteffort/pod"),
            "{}",
            linux.cgroup_parent
        );
        let ns = linux.security_context.unwrap().namespace_options.unwrap();
        assert_eq!(
            ns.network,
            cri::NamespaceMode::Pod as i32,
            "the floor pod uses the CNI pod network"
        );
        let c = container_config(
            &node,
            &pod,
            &ContainerInputs {
                container: &floor_container("busybox"),
                restart_count: 0,
                image_ref: "sha256:x",
                env: &[],
                kind: ContainerType::Regular,
                pid_target: None,
            },
        )
        .unwrap();
        assert_eq!(c.command, ["sleep", "3600"]);
        assert_eq!(c.image.unwrap().image, "sha256:x");
    }
}
