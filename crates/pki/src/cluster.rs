//! The on-disk PKI of a cluster, written idempotently by [`write_cluster_pki`].
//!
//! Layout (all in one directory; keys and kubeconfigs mode 0600, certificates 0644):
//!
//! | file | what |
//! | --- | --- |
//! | `ca.crt`, `ca.key` | cluster CA (client CA and serving CA) |
//! | `apiserver.crt/.key` | kube-apiserver serving cert |
//! | `admin.crt/.key` | `kubernetes-admin`, O `system:masters` |
//! | `controller-manager.crt/.key` | `system:kube-controller-manager` |
//! | `scheduler.crt/.key` | `system:kube-scheduler` |
//! | `kube-proxy.crt/.key` | `system:kube-proxy` |
//! | `kubelet.crt/.key` | `system:node:<node>`, O `system:nodes` |
//! | `kubelet-server.crt/.key` | kubelet serving cert (`--tls-cert-file`): node name, hostname, `localhost`, node IPs |
//! | `*.kubeconfig` | admin, controller-manager, scheduler, kube-proxy, kubelet |
//! | `sa.key`, `sa.pub` | service-account token signing key pair (ECDSA P-256) |
//! | `etcd-ca.crt`, `etcd-ca.key` | etcd's own CA: etcd trusts only the clients it signs |
//! | `etcd-server.crt/.key` | etcd member cert (serverAuth and clientAuth, so it serves as the peer cert too): `localhost`, hostname, node name, extra SANs, 127.0.0.1, the advertise address |
//! | `apiserver-etcd-client.crt/.key` | `kube-apiserver-etcd-client`, signed by the etcd CA (`--etcd-certfile`/`--etcd-keyfile`) |
//! | `front-proxy-ca.crt`, `front-proxy-ca.key` | the front-proxy CA (`--requestheader-client-ca-file`), as kubeadm's: only the certificates it signs may name users in `X-Remote-*` headers |
//! | `front-proxy-client.crt/.key` | `front-proxy-client` (clientAuth), signed by the front-proxy CA: the aggregator's client certificate towards extension apiservers (`--proxy-client-cert-file`/`--proxy-client-key-file`) |
//!
//! Re-running reuses everything that is present and still good: the CA when both
//! files load and it is within its validity window (a present but unusable CA is an
//! error, never silently replaced, since others may trust it); a leaf when it is signed
//! by the CA, not expired, matches its key and carries the expected subject, EKU and
//! (for the serving cert) every required SAN; otherwise the leaf is re-issued.

use std::fs;
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::{
    CertInfo, CertificateAuthority, PkiError, Result, Validity, generate_signing_key_pair,
    kubeconfig_yaml, public_key_pem_of,
};

/// The CN of the front-proxy client certificate (kubeadm's), which the apiserver's
/// `--requestheader-allowed-names` lists.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// Inputs of [`write_cluster_pki`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPkiOptions {
    /// The apiserver URL written into every kubeconfig, e.g. `https://127.0.0.1:6443`.
    pub server_url: String,
    /// Cluster name in the kubeconfigs.
    pub cluster_name: String,
    /// `--service-cluster-ip-range`; its first IP (the `kubernetes` Service's
    /// ClusterIP) goes into the apiserver cert. A dual-stack `v4,v6` pair uses the
    /// first range, as upstream.
    pub service_cluster_ip_range: String,
    /// `--advertise-address`, added as an IP SAN.
    pub advertise_address: Option<IpAddr>,
    /// The node name: kubelet client cert `system:node:<node_name>`, and a DNS SAN.
    pub node_name: String,
    /// The node's IPs (`--node-ip`): IP SANs of the kubelet serving cert, which the
    /// apiserver checks when it connects to the kubelet (logs, exec, port-forward).
    pub node_ips: Vec<IpAddr>,
    /// Extra apiserver SANs; entries that parse as IPs become IP SANs.
    pub extra_sans: Vec<String>,
    /// Cluster DNS domain, for `kubernetes.default.svc.<domain>`.
    pub dns_domain: String,
}

impl ClusterPkiOptions {
    /// Defaults: cluster `ferrokube`, service range `10.96.0.0/12`, node name = this
    /// machine's hostname, domain `cluster.local`.
    pub fn new(server_url: impl Into<String>) -> Self {
        ClusterPkiOptions {
            server_url: server_url.into(),
            cluster_name: "ferrokube".into(),
            service_cluster_ip_range: "10.96.0.0/12".into(),
            advertise_address: None,
            node_name: hostname(),
            node_ips: vec![IpAddr::from([127, 0, 0, 1])],
            extra_sans: Vec::new(),
            dns_domain: "cluster.local".into(),
        }
    }
}

/// Where [`write_cluster_pki`] put everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PkiPaths {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub apiserver_cert: PathBuf,
    pub apiserver_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub controller_manager_cert: PathBuf,
    pub controller_manager_key: PathBuf,
    pub scheduler_cert: PathBuf,
    pub scheduler_key: PathBuf,
    pub kube_proxy_cert: PathBuf,
    pub kube_proxy_key: PathBuf,
    pub kubelet_cert: PathBuf,
    pub kubelet_key: PathBuf,
    pub kubelet_server_cert: PathBuf,
    pub kubelet_server_key: PathBuf,
    pub admin_kubeconfig: PathBuf,
    pub controller_manager_kubeconfig: PathBuf,
    pub scheduler_kubeconfig: PathBuf,
    pub kube_proxy_kubeconfig: PathBuf,
    pub kubelet_kubeconfig: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    pub etcd_ca_cert: PathBuf,
    pub etcd_ca_key: PathBuf,
    pub etcd_server_cert: PathBuf,
    pub etcd_server_key: PathBuf,
    pub apiserver_etcd_client_cert: PathBuf,
    pub apiserver_etcd_client_key: PathBuf,
    pub front_proxy_ca_cert: PathBuf,
    pub front_proxy_ca_key: PathBuf,
    pub front_proxy_client_cert: PathBuf,
    pub front_proxy_client_key: PathBuf,
    /// The files this run created or replaced (empty when everything was reused).
    pub written: Vec<PathBuf>,
}

impl PkiPaths {
    fn new(dir: &Path) -> Self {
        let p = |name: &str| dir.join(name);
        PkiPaths {
            dir: dir.to_path_buf(),
            ca_cert: p("ca.crt"),
            ca_key: p("ca.key"),
            apiserver_cert: p("apiserver.crt"),
            apiserver_key: p("apiserver.key"),
            admin_cert: p("admin.crt"),
            admin_key: p("admin.key"),
            controller_manager_cert: p("controller-manager.crt"),
            controller_manager_key: p("controller-manager.key"),
            scheduler_cert: p("scheduler.crt"),
            scheduler_key: p("scheduler.key"),
            kube_proxy_cert: p("kube-proxy.crt"),
            kube_proxy_key: p("kube-proxy.key"),
            kubelet_cert: p("kubelet.crt"),
            kubelet_key: p("kubelet.key"),
            kubelet_server_cert: p("kubelet-server.crt"),
            kubelet_server_key: p("kubelet-server.key"),
            admin_kubeconfig: p("admin.kubeconfig"),
            controller_manager_kubeconfig: p("controller-manager.kubeconfig"),
            scheduler_kubeconfig: p("scheduler.kubeconfig"),
            kube_proxy_kubeconfig: p("kube-proxy.kubeconfig"),
            kubelet_kubeconfig: p("kubelet.kubeconfig"),
            sa_key: p("sa.key"),
            sa_pub: p("sa.pub"),
            etcd_ca_cert: p("etcd-ca.crt"),
            etcd_ca_key: p("etcd-ca.key"),
            etcd_server_cert: p("etcd-server.crt"),
            etcd_server_key: p("etcd-server.key"),
            apiserver_etcd_client_cert: p("apiserver-etcd-client.crt"),
            apiserver_etcd_client_key: p("apiserver-etcd-client.key"),
            front_proxy_ca_cert: p("front-proxy-ca.crt"),
            front_proxy_ca_key: p("front-proxy-ca.key"),
            front_proxy_client_cert: p("front-proxy-client.crt"),
            front_proxy_client_key: p("front-proxy-client.key"),
            written: Vec::new(),
        }
    }

    /// Every managed file, as (role, path).
    pub fn files(&self) -> Vec<(&'static str, &Path)> {
        vec![
            ("ca-cert", &self.ca_cert),
            ("ca-key", &self.ca_key),
            ("apiserver-cert", &self.apiserver_cert),
            ("apiserver-key", &self.apiserver_key),
            ("admin-cert", &self.admin_cert),
            ("admin-key", &self.admin_key),
            ("controller-manager-cert", &self.controller_manager_cert),
            ("controller-manager-key", &self.controller_manager_key),
            ("scheduler-cert", &self.scheduler_cert),
            ("scheduler-key", &self.scheduler_key),
            ("kube-proxy-cert", &self.kube_proxy_cert),
            ("kube-proxy-key", &self.kube_proxy_key),
            ("kubelet-cert", &self.kubelet_cert),
            ("kubelet-key", &self.kubelet_key),
            ("kubelet-server-cert", &self.kubelet_server_cert),
            ("kubelet-server-key", &self.kubelet_server_key),
            ("admin-kubeconfig", &self.admin_kubeconfig),
            (
                "controller-manager-kubeconfig",
                &self.controller_manager_kubeconfig,
            ),
            ("scheduler-kubeconfig", &self.scheduler_kubeconfig),
            ("kube-proxy-kubeconfig", &self.kube_proxy_kubeconfig),
            ("kubelet-kubeconfig", &self.kubelet_kubeconfig),
            ("sa-key", &self.sa_key),
            ("sa-pub", &self.sa_pub),
            ("etcd-ca-cert", &self.etcd_ca_cert),
            ("etcd-ca-key", &self.etcd_ca_key),
            ("etcd-server-cert", &self.etcd_server_cert),
            ("etcd-server-key", &self.etcd_server_key),
            (
                "apiserver-etcd-client-cert",
                &self.apiserver_etcd_client_cert,
            ),
            ("apiserver-etcd-client-key", &self.apiserver_etcd_client_key),
            ("front-proxy-ca-cert", &self.front_proxy_ca_cert),
            ("front-proxy-ca-key", &self.front_proxy_ca_key),
            ("front-proxy-client-cert", &self.front_proxy_client_cert),
            ("front-proxy-client-key", &self.front_proxy_client_key),
        ]
        .into_iter()
        .map(|(role, path)| (role, path.as_path()))
        .collect()
    }
}

/// The first usable IP of a service CIDR (network address + 1), the ClusterIP of the
/// `kubernetes` Service. For `a,b` (dual stack) the first range is used.
pub fn first_service_ip(cidr: &str) -> Result<IpAddr> {
    let first = cidr.split(',').next().unwrap_or_default().trim();
    let bad = || PkiError::InvalidOption(format!("invalid service CIDR {cidr:?}"));
    let (addr, prefix) = first.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let prefix: u32 = prefix.parse().map_err(|_| bad())?;
    let too_small = || {
        PkiError::InvalidOption(format!(
            "service CIDR {cidr:?} is too small to hold the kubernetes Service IP"
        ))
    };
    match addr {
        IpAddr::V4(v4) => {
            if prefix > 32 {
                return Err(bad());
            }
            if prefix >= 32 {
                return Err(too_small());
            }
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            Ok(IpAddr::V4((u32::from(v4) & mask).wrapping_add(1).into()))
        }
        IpAddr::V6(v6) => {
            if prefix > 128 {
                return Err(bad());
            }
            if prefix >= 128 {
                return Err(too_small());
            }
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            Ok(IpAddr::V6((u128::from(v6) & mask).wrapping_add(1).into()))
        }
    }
}

/// This machine's hostname, lowercased (as the kubelet derives its node name), or
/// `localhost` when it cannot be read.
pub fn hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .map(|s| s.trim().to_lowercase())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

enum LeafKind {
    Serving {
        cn: String,
        dns: Vec<String>,
        ips: Vec<IpAddr>,
        /// Also for client use (an etcd member's cert, used towards its peers too).
        peer: bool,
    },
    Client {
        cn: String,
        groups: Vec<String>,
    },
}

struct Leaf<'a> {
    cert: &'a Path,
    key: &'a Path,
    kind: LeafKind,
}

/// Creates (or completes) the cluster PKI in `dir`; see the module docs for layout
/// and reuse rules.
pub fn write_cluster_pki(dir: &Path, options: &ClusterPkiOptions) -> Result<PkiPaths> {
    if options.server_url.is_empty() {
        return Err(PkiError::InvalidOption(
            "server URL must not be empty".into(),
        ));
    }
    if options.node_name.is_empty() {
        return Err(PkiError::InvalidOption(
            "node name must not be empty".into(),
        ));
    }
    let service_ip = first_service_ip(&options.service_cluster_ip_range)?;
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut paths = PkiPaths::new(dir);
    let mut written = Vec::new();
    let now = SystemTime::now();

    let ca = ensure_ca(
        &paths.ca_cert,
        &paths.ca_key,
        "ferrokube-ca",
        now,
        &mut written,
    )?;

    let mut dns = vec![
        "kubernetes".to_string(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        format!("kubernetes.default.svc.{}", options.dns_domain),
        "localhost".into(),
    ];
    let mut ips: Vec<IpAddr> = vec![IpAddr::from([127, 0, 0, 1]), service_ip];
    if let Some(addr) = options.advertise_address {
        ips.push(addr);
    }

    for name in [hostname(), options.node_name.to_lowercase()] {
        dns.push(name);
    }
    add_extra_sans(&options.extra_sans, &mut dns, &mut ips);
    dedup(&mut dns);
    dedup(&mut ips);

    let client = |cn: &str, groups: &[&str]| LeafKind::Client {
        cn: cn.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    };
    let node_user = format!("system:node:{}", options.node_name);
    let leaves = [
        Leaf {
            cert: &paths.apiserver_cert,
            key: &paths.apiserver_key,
            kind: LeafKind::Serving {
                cn: "kube-apiserver".into(),
                dns,
                ips,
                peer: false,
            },
        },
        Leaf {
            cert: &paths.admin_cert,
            key: &paths.admin_key,
            kind: client("kubernetes-admin", &["system:masters"]),
        },
        Leaf {
            cert: &paths.controller_manager_cert,
            key: &paths.controller_manager_key,
            kind: client("system:kube-controller-manager", &[]),
        },
        Leaf {
            cert: &paths.scheduler_cert,
            key: &paths.scheduler_key,
            kind: client("system:kube-scheduler", &[]),
        },
        Leaf {
            cert: &paths.kube_proxy_cert,
            key: &paths.kube_proxy_key,
            kind: client("system:kube-proxy", &[]),
        },
        Leaf {
            cert: &paths.kubelet_cert,
            key: &paths.kubelet_key,
            kind: client(&node_user, &["system:nodes"]),
        },
        Leaf {
            cert: &paths.kubelet_server_cert,
            key: &paths.kubelet_server_key,
            kind: kubelet_serving(options),
        },
    ];
    for leaf in &leaves {
        ensure_leaf(&ca, leaf, now, &mut written)?;
    }

    let kubeconfigs = [
        (
            &paths.admin_kubeconfig,
            "kubernetes-admin",
            &paths.admin_cert,
            &paths.admin_key,
        ),
        (
            &paths.controller_manager_kubeconfig,
            "system:kube-controller-manager",
            &paths.controller_manager_cert,
            &paths.controller_manager_key,
        ),
        (
            &paths.scheduler_kubeconfig,
            "system:kube-scheduler",
            &paths.scheduler_cert,
            &paths.scheduler_key,
        ),
        (
            &paths.kube_proxy_kubeconfig,
            "system:kube-proxy",
            &paths.kube_proxy_cert,
            &paths.kube_proxy_key,
        ),
        (
            &paths.kubelet_kubeconfig,
            node_user.as_str(),
            &paths.kubelet_cert,
            &paths.kubelet_key,
        ),
    ];
    for (path, user, cert, key) in kubeconfigs {
        let yaml = kubeconfig_yaml(
            &options.cluster_name,
            &options.server_url,
            ca.cert_pem(),
            user,
            &read(cert)?,
            &read(key)?,
        );
        write_if_changed(path, &yaml, 0o600, &mut written)?;
    }

    ensure_sa_keys(&paths, &mut written)?;

    // etcd has a CA of its own, as kubeadm lays it out: a client certificate of the
    // cluster CA (any kubelet's) must not open the store.
    let etcd_ca = ensure_ca(
        &paths.etcd_ca_cert,
        &paths.etcd_ca_key,
        "ferrokube-etcd-ca",
        now,
        &mut written,
    )?;
    let etcd_leaves = [
        Leaf {
            cert: &paths.etcd_server_cert,
            key: &paths.etcd_server_key,
            kind: etcd_serving(options),
        },
        Leaf {
            cert: &paths.apiserver_etcd_client_cert,
            key: &paths.apiserver_etcd_client_key,
            kind: client("kube-apiserver-etcd-client", &[]),
        },
    ];
    for leaf in &etcd_leaves {
        ensure_leaf(&etcd_ca, leaf, now, &mut written)?;
    }

    // The front proxy (the aggregator) has a CA of its own too, as kubeadm's: a
    // certificate of it lets its holder name any user in request headers, so no
    // ordinary client certificate may be one.
    let front_proxy_ca = ensure_ca(
        &paths.front_proxy_ca_cert,
        &paths.front_proxy_ca_key,
        "ferrokube-front-proxy-ca",
        now,
        &mut written,
    )?;
    ensure_leaf(
        &front_proxy_ca,
        &Leaf {
            cert: &paths.front_proxy_client_cert,
            key: &paths.front_proxy_client_key,
            kind: client(FRONT_PROXY_CLIENT, &[]),
        },
        now,
        &mut written,
    )?;

    paths.written = written;
    Ok(paths)
}

/// The kubelet's serving cert: CN the node name (upstream's self-signed one uses the
/// hostname), DNS SANs node name, hostname and `localhost`, IP SANs the node IPs and
/// 127.0.0.1.
fn kubelet_serving(options: &ClusterPkiOptions) -> LeafKind {
    let node = options.node_name.to_lowercase();
    let mut dns = vec![node.clone(), hostname(), "localhost".into()];
    let mut ips = options.node_ips.clone();
    ips.push(IpAddr::from([127, 0, 0, 1]));
    dedup(&mut dns);
    dedup(&mut ips);
    LeafKind::Serving {
        cn: node,
        dns,
        ips,
        peer: false,
    }
}

/// The etcd member's cert: the control plane's names and addresses, where the
/// apiserver (and other members) reach it.
fn etcd_serving(options: &ClusterPkiOptions) -> LeafKind {
    let mut dns = vec![
        "localhost".to_string(),
        hostname(),
        options.node_name.to_lowercase(),
    ];
    let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
    ips.extend(options.advertise_address);
    add_extra_sans(&options.extra_sans, &mut dns, &mut ips);
    dedup(&mut dns);
    dedup(&mut ips);
    LeafKind::Serving {
        cn: "etcd".into(),
        dns,
        ips,
        peer: true,
    }
}

/// `--extra-sans`: entries that parse as IPs are IP SANs, the others DNS SANs.
fn add_extra_sans(extra: &[String], dns: &mut Vec<String>, ips: &mut Vec<IpAddr>) {
    for san in extra {
        match san.parse::<IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => dns.push(san.clone()),
        }
    }
}

fn dedup<T: PartialEq + Clone>(v: &mut Vec<T>) {
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    for x in v.drain(..) {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    *v = out;
}

fn ensure_ca(
    cert: &Path,
    key: &Path,
    common_name: &str,
    now: SystemTime,
    written: &mut Vec<PathBuf>,
) -> Result<CertificateAuthority> {
    match (cert.exists(), key.exists()) {
        (true, true) => {
            let cert_pem = read(cert)?;
            let ca = CertificateAuthority::load(&cert_pem, &read(key)?).map_err(|e| {
                PkiError::Certificate(format!("existing CA {}: {e}", cert.display()))
            })?;
            let info = CertInfo::from_pem(&cert_pem)?;
            if !info.is_valid_at(now) {
                return Err(PkiError::Certificate(format!(
                    "existing CA {} is outside its validity window; remove {} and {} to create a new CA",
                    cert.display(),
                    cert.display(),
                    key.display()
                )));
            }
            restrict_mode(key)?;
            Ok(ca)
        }
        (false, false) => {
            let ca = CertificateAuthority::generate(common_name)?;
            let pem = ca.to_pem();
            write_file(key, &pem.key_pem, 0o600, written)?;
            write_file(cert, &pem.cert_pem, 0o644, written)?;
            Ok(ca)
        }
        (has_cert, _) => {
            let (present, missing) = if has_cert { (cert, key) } else { (key, cert) };
            Err(PkiError::Certificate(format!(
                "{} exists without {}; refusing to replace a partial CA",
                present.display(),
                missing.display(),
            )))
        }
    }
}

fn leaf_reusable(ca: &CertificateAuthority, leaf: &Leaf<'_>, now: SystemTime) -> bool {
    let (Ok(cert_pem), Ok(key_pem)) = (fs::read_to_string(leaf.cert), fs::read_to_string(leaf.key))
    else {
        return false;
    };
    let Ok(info) = CertInfo::from_pem(&cert_pem) else {
        return false;
    };
    if !info.is_valid_at(now)
        || !info.matches_key(&key_pem)
        || !matches!(info.is_signed_by(ca.cert_pem()), Ok(true))
    {
        return false;
    }
    match &leaf.kind {
        LeafKind::Serving { cn, dns, ips, peer } => {
            info.server_auth
                && (info.client_auth || !peer)
                && info.common_name.as_deref() == Some(cn.as_str())
                && dns.iter().all(|d| info.dns_sans.contains(d))
                && ips.iter().all(|ip| info.ip_sans.contains(ip))
        }
        LeafKind::Client { cn, groups } => {
            info.client_auth
                && info.common_name.as_deref() == Some(cn.as_str())
                && &info.organizations == groups
        }
    }
}

fn ensure_leaf(
    ca: &CertificateAuthority,
    leaf: &Leaf<'_>,
    now: SystemTime,
    written: &mut Vec<PathBuf>,
) -> Result<()> {
    if leaf_reusable(ca, leaf, now) {
        restrict_mode(leaf.key)?;
        return Ok(());
    }
    let issued = match &leaf.kind {
        LeafKind::Serving {
            cn,
            dns,
            ips,
            peer: false,
        } => ca.issue_serving_cert(cn, dns, ips, Validity::leaf_default())?,
        LeafKind::Serving {
            cn,
            dns,
            ips,
            peer: true,
        } => ca.issue_peer_cert(cn, dns, ips, Validity::leaf_default())?,
        LeafKind::Client { cn, groups } => {
            ca.issue_client_cert(cn, groups, Validity::leaf_default())?
        }
    };
    write_file(leaf.key, &issued.key_pem, 0o600, written)?;
    write_file(leaf.cert, &issued.cert_pem, 0o644, written)?;
    Ok(())
}

fn ensure_sa_keys(paths: &PkiPaths, written: &mut Vec<PathBuf>) -> Result<()> {
    let existing = fs::read_to_string(&paths.sa_key)
        .ok()
        .and_then(|key| public_key_pem_of(&key).ok());
    match existing {
        Some(public) => {
            restrict_mode(&paths.sa_key)?;
            write_if_changed(&paths.sa_pub, &public, 0o644, written)
        }
        None => {
            let (private, public) = generate_signing_key_pair()?;
            write_file(&paths.sa_key, &private, 0o600, written)?;
            write_file(&paths.sa_pub, &public, 0o644, written)
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(io_err(path))
}

fn restrict_mode(path: &Path) -> Result<()> {
    let meta = fs::metadata(path).map_err(io_err(path))?;
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_err(path))?;
    }
    Ok(())
}

fn write_if_changed(
    path: &Path,
    contents: &str,
    mode: u32,
    written: &mut Vec<PathBuf>,
) -> Result<()> {
    if fs::read_to_string(path).is_ok_and(|old| old == contents) {
        if mode == 0o600 {
            restrict_mode(path)?;
        }
        return Ok(());
    }
    write_file(path, contents, mode, written)
}

/// Writes atomically: a temp file created with `mode` in the same directory, then
/// renamed over `path`, so a reader never sees a half-written key.
fn write_file(path: &Path, contents: &str, mode: u32, written: &mut Vec<PathBuf>) -> Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    file.write_all(contents.as_bytes()).map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    drop(file);
    // The umask may have narrowed `mode`; certificates should still be readable.
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))?;
    written.push(path.to_path_buf());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kubeconfig;
    use base64::Engine as _;

    fn opts() -> ClusterPkiOptions {
        let mut o = ClusterPkiOptions::new("https://127.0.0.1:6443");
        o.node_name = "node-a".into();
        o.node_ips = vec!["192.0.2.20".parse().unwrap()];
        o.advertise_address = Some("192.0.2.10".parse().unwrap());
        o.extra_sans = vec!["api.example.test".into(), "198.51.100.7".into()];
        o
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn first_service_ip_cases() {
        let ip = |s: &str| first_service_ip(s).unwrap().to_string();
        assert_eq!(ip("10.96.0.0/12"), "10.96.0.1");
        assert_eq!(ip("10.96.5.7/12"), "10.96.0.1");
        assert_eq!(ip("10.0.0.0/24"), "10.0.0.1");
        assert_eq!(ip("10.0.0.0/31"), "10.0.0.1");
        assert_eq!(ip("fd00:10:96::/112"), "fd00:10:96::1");
        assert_eq!(ip("10.96.0.0/12,fd00::/108"), "10.96.0.1");
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/32",
            "x/8",
            "::/128",
            "::/129",
        ] {
            assert!(first_service_ip(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_full_layout_with_expected_subjects_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let paths = write_cluster_pki(dir.path(), &opts()).unwrap();
        assert_eq!(paths.written.len(), paths.files().len());
        for (role, path) in paths.files() {
            assert!(path.exists(), "{role}");
            let expect = if role.ends_with("-key") || role.ends_with("kubeconfig") {
                0o600
            } else {
                0o644
            };
            assert_eq!(mode(path), expect, "{role}");
        }
        let ca_pem = fs::read_to_string(&paths.ca_cert).unwrap();

        let api = CertInfo::from_pem(&fs::read_to_string(&paths.apiserver_cert).unwrap()).unwrap();
        assert!(api.server_auth);
        for d in [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
            "node-a",
            "api.example.test",
        ] {
            assert!(api.dns_sans.contains(&d.to_string()), "{d}");
        }
        for ip in ["127.0.0.1", "10.96.0.1", "192.0.2.10", "198.51.100.7"] {
            assert!(api.ip_sans.contains(&ip.parse().unwrap()), "{ip}");
        }
        assert!(api.is_signed_by(&ca_pem).unwrap());

        let subject = |p: &Path| {
            let i = CertInfo::from_pem(&fs::read_to_string(p).unwrap()).unwrap();
            assert!(i.client_auth && i.is_signed_by(&ca_pem).unwrap());
            (i.common_name.unwrap(), i.organizations)
        };
        assert_eq!(
            subject(&paths.admin_cert),
            ("kubernetes-admin".into(), vec!["system:masters".into()])
        );
        assert_eq!(
            subject(&paths.controller_manager_cert).0,
            "system:kube-controller-manager"
        );
        assert_eq!(subject(&paths.scheduler_cert).0, "system:kube-scheduler");
        assert_eq!(subject(&paths.kube_proxy_cert).0, "system:kube-proxy");
        assert_eq!(
            subject(&paths.kubelet_cert),
            ("system:node:node-a".into(), vec!["system:nodes".into()])
        );

        let kubelet_server =
            CertInfo::from_pem(&fs::read_to_string(&paths.kubelet_server_cert).unwrap()).unwrap();
        assert!(kubelet_server.server_auth && !kubelet_server.client_auth);
        assert!(kubelet_server.is_signed_by(&ca_pem).unwrap());
        assert_eq!(kubelet_server.common_name.as_deref(), Some("node-a"));
        for d in ["node-a", "localhost"] {
            assert!(kubelet_server.dns_sans.contains(&d.to_string()), "{d}");
        }
        for ip in ["127.0.0.1", "192.0.2.20"] {
            assert!(
                kubelet_server.ip_sans.contains(&ip.parse().unwrap()),
                "{ip}"
            );
        }

        let kc =
            Kubeconfig::from_yaml(&fs::read_to_string(&paths.kubelet_kubeconfig).unwrap()).unwrap();
        assert_eq!(kc.clusters[0].cluster.server, "https://127.0.0.1:6443");
        assert_eq!(kc.users[0].name, "system:node:node-a");
        let decode = |s: &Option<String>| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(s.as_ref().unwrap())
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(
            decode(&kc.clusters[0].cluster.certificate_authority_data),
            ca_pem
        );
        assert_eq!(
            decode(&kc.users[0].user.client_certificate_data),
            fs::read_to_string(&paths.kubelet_cert).unwrap()
        );

        let sa_key = fs::read_to_string(&paths.sa_key).unwrap();
        assert_eq!(
            public_key_pem_of(&sa_key).unwrap(),
            fs::read_to_string(&paths.sa_pub).unwrap()
        );
    }

    #[test]
    fn second_run_reuses_everything() {
        let dir = tempfile::tempdir().unwrap();
        let first = write_cluster_pki(dir.path(), &opts()).unwrap();
        let snapshot: Vec<String> = first
            .files()
            .iter()
            .map(|(_, p)| fs::read_to_string(p).unwrap())
            .collect();
        let second = write_cluster_pki(dir.path(), &opts()).unwrap();
        assert!(second.written.is_empty(), "{:?}", second.written);
        let again: Vec<String> = second
            .files()
            .iter()
            .map(|(_, p)| fs::read_to_string(p).unwrap())
            .collect();
        assert_eq!(snapshot, again);
    }

    #[test]
    fn etcd_has_its_own_ca() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_cluster_pki(dir.path(), &opts()).unwrap();
        let read = |path: &Path| fs::read_to_string(path).unwrap();
        let (ca, etcd_ca) = (read(&p.ca_cert), read(&p.etcd_ca_cert));
        assert_ne!(ca, etcd_ca);
        let server = CertInfo::from_pem(&read(&p.etcd_server_cert)).unwrap();
        assert!(server.is_signed_by(&etcd_ca).unwrap());
        assert!(!server.is_signed_by(&ca).unwrap());
        assert!(server.server_auth && server.client_auth);
        assert!(server.dns_sans.contains(&"localhost".to_string()));
        assert!(server.ip_sans.contains(&IpAddr::from([127, 0, 0, 1])));
        let client = CertInfo::from_pem(&read(&p.apiserver_etcd_client_cert)).unwrap();
        assert!(client.is_signed_by(&etcd_ca).unwrap());
        assert!(client.client_auth && !client.server_auth);
        assert_eq!(
            client.common_name.as_deref(),
            Some("kube-apiserver-etcd-client")
        );
        let mode = fs::metadata(&p.etcd_ca_key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn the_front_proxy_has_its_own_ca() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_cluster_pki(dir.path(), &opts()).unwrap();
        let read = |path: &Path| fs::read_to_string(path).unwrap();
        let (ca, etcd_ca, proxy_ca) = (
            read(&p.ca_cert),
            read(&p.etcd_ca_cert),
            read(&p.front_proxy_ca_cert),
        );
        assert_ne!(ca, proxy_ca);
        assert_ne!(etcd_ca, proxy_ca);
        let ca_info = CertInfo::from_pem(&proxy_ca).unwrap();
        assert!(ca_info.is_ca);
        assert_eq!(
            ca_info.common_name.as_deref(),
            Some("ferrokube-front-proxy-ca")
        );
        let client = CertInfo::from_pem(&read(&p.front_proxy_client_cert)).unwrap();
        assert!(client.is_signed_by(&proxy_ca).unwrap());
        assert!(!client.is_signed_by(&ca).unwrap());
        assert!(client.client_auth && !client.server_auth);
        assert_eq!(client.common_name.as_deref(), Some(FRONT_PROXY_CLIENT));
        assert!(client.organizations.is_empty());
        assert!(client.matches_key(&read(&p.front_proxy_client_key)));
        assert_eq!(mode(&p.front_proxy_ca_key), 0o600);
        assert_eq!(mode(&p.front_proxy_client_key), 0o600);

        // Reused on the next run; a damaged client certificate alone is re-issued.
        fs::write(&p.front_proxy_client_cert, "garbage").unwrap();
        let again = write_cluster_pki(dir.path(), &opts()).unwrap();
        assert_eq!(
            again.written,
            vec![
                again.front_proxy_client_key.clone(),
                again.front_proxy_client_cert.clone()
            ]
        );
        assert_eq!(read(&again.front_proxy_ca_cert), proxy_ca);
    }

    #[test]
    fn changed_options_and_damaged_leaves_reissue_only_what_is_needed() {
        let dir = tempfile::tempdir().unwrap();
        let first = write_cluster_pki(dir.path(), &opts()).unwrap();
        let ca_before = fs::read_to_string(&first.ca_cert).unwrap();
        let admin_before = fs::read_to_string(&first.admin_cert).unwrap();

        // A new advertise address needs new serving certs (apiserver, etcd), nothing else.
        let mut o = opts();
        o.advertise_address = Some("192.0.2.99".parse().unwrap());
        let second = write_cluster_pki(dir.path(), &o).unwrap();
        assert_eq!(
            second.written,
            vec![
                second.apiserver_key.clone(),
                second.apiserver_cert.clone(),
                second.etcd_server_key.clone(),
                second.etcd_server_cert.clone()
            ]
        );

        // A corrupt leaf and a mismatched key are replaced.
        fs::write(&first.scheduler_cert, "garbage").unwrap();
        fs::copy(&first.admin_key, &first.kube_proxy_key).unwrap();
        let third = write_cluster_pki(dir.path(), &o).unwrap();
        assert!(third.written.contains(&third.scheduler_cert));
        assert!(third.written.contains(&third.kube_proxy_cert));
        assert!(third.written.contains(&third.scheduler_kubeconfig));
        assert!(!third.written.contains(&third.admin_cert));
        assert_eq!(fs::read_to_string(&third.ca_cert).unwrap(), ca_before);
        assert_eq!(fs::read_to_string(&third.admin_cert).unwrap(), admin_before);

        // A leaf signed by another CA is replaced.
        let other = CertificateAuthority::generate("other").unwrap();
        let foreign = other
            .issue_client_cert(
                "kubernetes-admin",
                &["system:masters".into()],
                Validity::leaf_default(),
            )
            .unwrap();
        fs::write(&first.admin_cert, &foreign.cert_pem).unwrap();
        fs::write(&first.admin_key, &foreign.key_pem).unwrap();
        let fourth = write_cluster_pki(dir.path(), &o).unwrap();
        assert!(fourth.written.contains(&fourth.admin_cert));
        let admin = CertInfo::from_pem(&fs::read_to_string(&fourth.admin_cert).unwrap()).unwrap();
        assert!(admin.is_signed_by(&ca_before).unwrap());
        assert_eq!(mode(&fourth.admin_key), 0o600);
    }

    #[test]
    fn existing_ca_is_reused_and_a_broken_ca_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("my-ca").unwrap().to_pem();
        fs::write(dir.path().join("ca.crt"), &ca.cert_pem).unwrap();
        fs::write(dir.path().join("ca.key"), &ca.key_pem).unwrap();
        fs::set_permissions(dir.path().join("ca.key"), fs::Permissions::from_mode(0o644)).unwrap();
        let paths = write_cluster_pki(dir.path(), &opts()).unwrap();
        assert!(!paths.written.contains(&paths.ca_cert));
        assert_eq!(mode(&paths.ca_key), 0o600);
        let admin = CertInfo::from_pem(&fs::read_to_string(&paths.admin_cert).unwrap()).unwrap();
        assert_eq!(admin.issuer_common_name.as_deref(), Some("my-ca"));

        let partial = tempfile::tempdir().unwrap();
        fs::write(partial.path().join("ca.crt"), &ca.cert_pem).unwrap();
        assert!(write_cluster_pki(partial.path(), &opts()).is_err());

        let broken = tempfile::tempdir().unwrap();
        fs::write(broken.path().join("ca.crt"), "nope").unwrap();
        fs::write(broken.path().join("ca.key"), &ca.key_pem).unwrap();
        assert!(write_cluster_pki(broken.path(), &opts()).is_err());
        assert_eq!(
            fs::read_to_string(broken.path().join("ca.crt")).unwrap(),
            "nope"
        );
    }

    #[test]
    fn invalid_options_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts();
        o.service_cluster_ip_range = "bogus".into();
        assert!(write_cluster_pki(dir.path(), &o).is_err());
        let mut o = opts();
        o.node_name.clear();
        assert!(write_cluster_pki(dir.path(), &o).is_err());
    }
}
