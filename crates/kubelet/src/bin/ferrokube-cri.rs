//! A small CRI tool for scripts and debugging (there is no crictl on these machines):
//!
//! ```text
//! ferrokube-cri [--endpoint unix:///run/containerd/containerd.sock] pods|containers|images|version
//! ferrokube-cri [--endpoint ...] remove-all-pods
//! ```

use std::time::Duration;

use ferrokube_kubelet::cri::{CriClient, DEFAULT_ENDPOINT};

fn usage() -> ! {
    eprintln!(
        "usage: ferrokube-cri [--endpoint ENDPOINT] pods|containers|images|version|remove-all-pods"
    );
    std::process::exit(2)
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
    let [cmd] = args.as_slice() else { usage() };
    if let Err(e) = run(&endpoint, cmd).await {
        eprintln!("ferrokube-cri: {e}");
        std::process::exit(1);
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
                for c in cri
                    .list_containers(Some(k8s_cri::v1::ContainerFilter {
                        pod_sandbox_id: s.id.clone(),
                        ..Default::default()
                    }))
                    .await?
                {
                    match cri.stop_container(&c.id, 2).await {
                        Err(e) if !e.is_not_found() => return Err(e.into()),
                        _ => {}
                    }
                    cri.remove_container(&c.id).await?;
                }
                match cri.stop_pod_sandbox(&s.id).await {
                    Err(e) if !e.is_not_found() => return Err(e.into()),
                    _ => {}
                }
                cri.remove_pod_sandbox(&s.id).await?;
            }
            println!("removed {} pod sandboxes", sandboxes.len());
        }
        _ => usage(),
    }
    Ok(())
}
