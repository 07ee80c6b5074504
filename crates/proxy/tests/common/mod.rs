//! Helpers of the tests that program rules for real in throwaway network namespaces:
//! a "host" namespace (where the proxy's rules go) and a "pod" namespace behind a veth
//! pair serving HTTP with busybox, curl from the host, the root check; and
//! ([`objects`]) the API objects the tests make rules from.
#![allow(dead_code)] // Each test binary uses a part.

pub mod objects;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Root check through `id -u` (no libc call, no unsafe).
pub fn not_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() != "0")
        .unwrap_or(true)
}

/// Runs a command that must succeed.
pub fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command in namespace `ns`; returns its stdout (whatever the exit status).
pub fn ns_output(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The command prefix running a tool in namespace `ns`.
pub fn in_netns(ns: &str) -> Vec<String> {
    ["ip", "netns", "exec", ns]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// One network namespace, deleted on drop.
pub struct Netns(pub String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The host and pod namespaces (and the pod's web root and server), removed on drop.
pub struct Namespaces {
    pub host: String,
    pub pod: String,
    dir: std::path::PathBuf,
    server: Option<Child>,
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            // SIGTERM to `timeout`, which passes it on to busybox: a SIGKILL would end
            // `timeout` alone and leave busybox running (holding the namespace).
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            for _ in 0..20 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.host, &self.pod] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The two namespaces: host 10.244.0.1/24 on a veth to the pod's 10.244.0.5/24, the
/// pod's default route via the host, forwarding and route_localnet on in the host, and
/// (as hack/lib/runtime.sh) the Service CIDR 10.96.0.0/12 routed into an empty bridge,
/// so an un-NATed Service packet has a route (and dies there). `tag` (one character)
/// keeps the names of concurrent tests apart.
pub fn setup(tag: char) -> Namespaces {
    let id = std::process::id();
    let ns = Namespaces {
        host: format!("fkp-host{tag}-{id}"),
        pod: format!("fkp-pod{tag}-{id}"),
        dir: std::env::temp_dir().join(format!("fkp-www{tag}-{id}")),
        server: None,
    };
    let (h, p) = (ns.host.as_str(), ns.pod.as_str());
    sh(&["ip", "netns", "add", h]);
    sh(&["ip", "netns", "add", p]);
    let veth_h = format!("fk{tag}h{id}");
    let veth_p = format!("fk{tag}p{id}");
    let (vh, vp) = (
        &veth_h[..veth_h.len().min(15)],
        &veth_p[..veth_p.len().min(15)],
    );
    sh(&[
        "ip", "-n", h, "link", "add", vh, "type", "veth", "peer", "name", vp, "netns", p,
    ]);
    sh(&["ip", "-n", h, "addr", "add", "10.244.0.1/24", "dev", vh]);
    sh(&["ip", "-n", h, "link", "set", vh, "up"]);
    sh(&["ip", "-n", h, "link", "set", "lo", "up"]);
    sh(&["ip", "-n", p, "addr", "add", "10.244.0.5/24", "dev", vp]);
    sh(&["ip", "-n", p, "link", "set", vp, "up"]);
    sh(&["ip", "-n", p, "link", "set", "lo", "up"]);
    sh(&[
        "ip",
        "-n",
        p,
        "route",
        "add",
        "default",
        "via",
        "10.244.0.1",
    ]);
    sh(&["ip", "-n", h, "link", "add", "kube-svc0", "type", "bridge"]);
    sh(&["ip", "-n", h, "link", "set", "kube-svc0", "up"]);
    sh(&[
        "ip",
        "-n",
        h,
        "route",
        "add",
        "10.96.0.0/12",
        "dev",
        "kube-svc0",
    ]);
    for sysctl in [
        "net.ipv4.ip_forward=1",
        "net.ipv4.conf.all.route_localnet=1",
    ] {
        sh(&["ip", "netns", "exec", h, "sysctl", "-qw", sysctl]);
    }
    ns
}

/// busybox httpd on 10.244.0.5:8080 in the pod namespace ("hello from the pod\n"),
/// waited for (bounded).
pub fn start_server(ns: &mut Namespaces) {
    std::fs::create_dir_all(&ns.dir).unwrap();
    std::fs::write(ns.dir.join("index.html"), "hello from the pod\n").unwrap();
    let child = Command::new("timeout")
        .args([
            "120", "ip", "netns", "exec", &ns.pod, "busybox", "httpd", "-f", "-p",
        ])
        .arg("10.244.0.5:8080")
        .arg("-h")
        .arg(&ns.dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ns.server = Some(child);
    for _ in 0..50 {
        if curl(&ns.host, "http://10.244.0.5:8080/").0 == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("busybox httpd did not come up in the pod namespace");
}

/// For the load-balancer tests: four clients to tell apart, 192.0.2.10 and
/// 192.0.2.20 on the host namespace's loopback and 10.244.0.5 (the pod) and
/// 10.244.0.6 (on the pod namespace's loopback); and the load-balancer range
/// 198.51.100.0/24 (documentation addresses) routed into kube-svc0 like the Service
/// CIDR, so what is not DNATed dies there.
pub fn add_load_balancer_clients(ns: &Namespaces) {
    for addr in ["192.0.2.10/32", "192.0.2.20/32"] {
        sh(&["ip", "-n", &ns.host, "addr", "add", addr, "dev", "lo"]);
    }
    sh(&[
        "ip",
        "-n",
        &ns.pod,
        "addr",
        "add",
        "10.244.0.6/32",
        "dev",
        "lo",
    ]);
    sh(&[
        "ip",
        "-n",
        &ns.host,
        "route",
        "add",
        "198.51.100.0/24",
        "dev",
        "kube-svc0",
    ]);
}

/// curl from namespace `ns` with source address `source`, giving up after `max_secs`:
/// (exit code, body). Exit 28 = timed out (the packets were dropped).
pub fn curl_from(ns: &str, source: &str, url: &str, max_secs: u32) -> (i32, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "--interface", source])
        .args(["--max-time", &max_secs.to_string(), url])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// curl from namespace `ns`: (exit code, body). Exit 7 = connection refused, 28 =
/// timed out (3 s).
pub fn curl(ns: &str, url: &str) -> (i32, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "--max-time", "3", url])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}
