//! Pod volumes, the pure part (upstream `pkg/volume/{emptydir,configmap,secret,downwardapi,
//! projected,hostpath}` and `kubelet_pods.go` `makeMounts`): where each volume lives under
//! the kubelet root (`pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`), the file payloads
//! of configMap, secret, downwardAPI and projected volumes (items, keys, modes, optional),
//! hostPath type checks, the CRI mounts of a container (readOnly, subPath, propagation), and
//! the mount table parsing teardown needs. The IO is [`crate::volume_manager`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret,
    ServiceAccountTokenProjection, Volume,
};

use crate::atomic_writer::{FileProjection, Payload};
use crate::config::NodeConfig;
use crate::env::{EnvSources, field_ref, resource_field_ref};
use crate::quantity::value;
use crate::sandbox::spec;

/// The default file mode of configMap, secret, downwardAPI and projected volumes.
pub const DEFAULT_MODE: u32 = 0o644;

/// Why a pod's volumes cannot be set up (the `FailedMount` event says it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    #[error("configmap references non-existent config key: {0}")]
    ConfigMapKey(String),
    #[error("secret references non-existent secret key: {0}")]
    SecretKey(String),
    #[error("downward API: {0}")]
    DownwardApi(String),
    #[error("hostPath type check failed: {path} is not a {want}")]
    HostPathType { path: String, want: String },
    #[error("hostPath {path}: {why}")]
    HostPath { path: String, why: String },
    #[error("volume {0:?} has a source this kubelet does not support")]
    Unsupported(String),
    #[error(
        "unable to find volume {volume:?} for the mount {mount_path:?} of container {container:?}"
    )]
    NoVolume {
        volume: String,
        mount_path: String,
        container: String,
    },
    #[error("invalid subPath {0:?}: must be a relative path without '..'")]
    SubPath(String),
    #[error("{what} {path}: {why}")]
    Io {
        what: &'static str,
        path: String,
        why: String,
    },
}

/// What a volume is, as far as this kubelet handles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeKind {
    /// Memory-backed when `medium: Memory` (tmpfs of `size_limit` bytes, or the node's
    /// memory without a limit).
    EmptyDir {
        memory: bool,
        size_limit: Option<i64>,
    },
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    HostPath {
        path: String,
        type_: String,
    },
    Unsupported,
}

impl VolumeKind {
    pub fn of(v: &Volume) -> Self {
        if let Some(e) = &v.empty_dir {
            VolumeKind::EmptyDir {
                memory: e.medium.as_deref() == Some("Memory"),
                size_limit: e.size_limit.as_ref().and_then(value),
            }
        } else if v.config_map.is_some() {
            VolumeKind::ConfigMap
        } else if v.secret.is_some() {
            VolumeKind::Secret
        } else if v.downward_api.is_some() {
            VolumeKind::DownwardApi
        } else if v.projected.is_some() {
            VolumeKind::Projected
        } else if let Some(h) = &v.host_path {
            VolumeKind::HostPath {
                path: h.path.clone(),
                type_: h.type_.clone().unwrap_or_default(),
            }
        } else {
            VolumeKind::Unsupported
        }
    }

    /// The plugin directory name under `volumes/` (upstream's escaped plugin name).
    pub fn plugin_dir(&self) -> Option<&'static str> {
        Some(match self {
            VolumeKind::EmptyDir { .. } => "kubernetes.io~empty-dir",
            VolumeKind::ConfigMap => "kubernetes.io~configmap",
            VolumeKind::Secret => "kubernetes.io~secret",
            VolumeKind::DownwardApi => "kubernetes.io~downward-api",
            VolumeKind::Projected => "kubernetes.io~projected",
            VolumeKind::HostPath { .. } | VolumeKind::Unsupported => return None,
        })
    }

    /// Whether the volume directory is a tmpfs (memory emptyDir; secret, downwardAPI and
    /// projected volumes are memory-backed upstream so secrets never reach the disk), and
    /// its size in bytes when bounded.
    pub fn tmpfs(&self) -> Option<Option<i64>> {
        match self {
            VolumeKind::EmptyDir {
                memory: true,
                size_limit,
            } => Some(*size_limit),
            VolumeKind::Secret | VolumeKind::DownwardApi | VolumeKind::Projected => Some(None),
            _ => None,
        }
    }

    /// Whether containers get the volume read-only whatever the mount says.
    pub fn read_only(&self) -> bool {
        matches!(
            self,
            VolumeKind::ConfigMap
                | VolumeKind::Secret
                | VolumeKind::DownwardApi
                | VolumeKind::Projected
        )
    }
}

/// `<root>/pods/<uid>`.
pub fn pod_dir(root: &Path, pod_uid: &str) -> PathBuf {
    root.join("pods").join(pod_uid)
}

/// `<root>/pods/<uid>/volumes/<plugin>/<name>`.
pub fn volume_dir(root: &Path, pod_uid: &str, plugin: &str, name: &str) -> PathBuf {
    pod_dir(root, pod_uid)
        .join("volumes")
        .join(plugin)
        .join(name)
}

/// `<root>/pods/<uid>/containers/<container>`: termination message files.
pub fn container_dir(root: &Path, pod_uid: &str, container: &str) -> PathBuf {
    pod_dir(root, pod_uid).join("containers").join(container)
}

fn mode(m: Option<i32>, default: u32) -> u32 {
    m.map_or(default, |m| (m as u32) & 0o7777)
}

fn key_payload(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
    missing_key: impl Fn(String) -> VolumeError,
) -> Result<Payload, VolumeError> {
    let mut out = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                out.insert(
                    k.clone(),
                    FileProjection {
                        data: v.clone(),
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for it in items {
                let Some(v) = data.get(&it.key) else {
                    if optional {
                        continue;
                    }
                    return Err(missing_key(it.key.clone()));
                };
                out.insert(
                    it.path.clone(),
                    FileProjection {
                        data: v.clone(),
                        mode: mode(it.mode, default_mode),
                    },
                );
            }
        }
    }
    Ok(out)
}

fn config_map_bytes(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut m: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        m.insert(k.clone(), v.0.clone());
    }
    m
}

fn secret_bytes(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut m: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    // The apiserver folds stringData into data; a Secret handed in directly may still have it.
    for (k, v) in s.string_data.iter().flatten() {
        m.insert(k.clone(), v.clone().into_bytes());
    }
    m
}

/// A configMap volume's (or projection's) files.
pub fn config_map_payload(
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
    cm: Option<&ConfigMap>,
) -> Result<Payload, VolumeError> {
    let data = match cm {
        Some(cm) => config_map_bytes(cm),
        None if optional => BTreeMap::new(),
        None => return Err(VolumeError::ConfigMapNotFound(name.to_owned())),
    };
    key_payload(
        &data,
        items,
        default_mode,
        optional,
        VolumeError::ConfigMapKey,
    )
}

/// A secret volume's (or projection's) files.
pub fn secret_payload(
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
    secret: Option<&Secret>,
) -> Result<Payload, VolumeError> {
    let data = match secret {
        Some(s) => secret_bytes(s),
        None if optional => BTreeMap::new(),
        None => return Err(VolumeError::SecretNotFound(name.to_owned())),
    };
    key_payload(&data, items, default_mode, optional, VolumeError::SecretKey)
}

/// Upstream `fieldpath.FormatMap`: sorted `key="value"` lines (Go-quoted values).
pub fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A downwardAPI volume's (or projection's) files.
pub fn downward_api_payload(
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    pod: &Pod,
    node: &NodeConfig,
    sources: &EnvSources,
) -> Result<Payload, VolumeError> {
    let mut out = Payload::new();
    for it in items {
        let data = if let Some(f) = &it.field_ref {
            match f.field_path.as_str() {
                "metadata.labels" => format_map(pod.metadata.labels.as_ref()),
                "metadata.annotations" => format_map(pod.metadata.annotations.as_ref()),
                p => field_ref(pod, node, sources, p)
                    .map_err(|e| VolumeError::DownwardApi(e.to_string()))?,
            }
        } else if let Some(r) = &it.resource_field_ref {
            let s = spec(pod);
            let name = r.container_name.as_deref().unwrap_or_default();
            let c = s
                .containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == name)
                .ok_or_else(|| {
                    VolumeError::DownwardApi(format!("container {name:?} not found in the pod"))
                })?;
            resource_field_ref(pod, c, node, r)
                .map_err(|e| VolumeError::DownwardApi(e.to_string()))?
        } else {
            return Err(VolumeError::DownwardApi(format!(
                "item {:?} has neither fieldRef nor resourceFieldRef",
                it.path
            )));
        };
        out.insert(
            it.path.clone(),
            FileProjection {
                data: data.into_bytes(),
                mode: mode(it.mode, default_mode),
            },
        );
    }
    Ok(out)
}

/// The files of a configMap, secret, downwardAPI or projected volume (`None` for other
/// kinds) and notes about sources left out (a projected serviceAccountToken, which needs
/// the TokenRequest API this cluster does not serve yet).
pub fn volume_payload(
    v: &Volume,
    pod: &Pod,
    node: &NodeConfig,
    sources: &EnvSources,
) -> Result<Option<(Payload, Vec<String>)>, VolumeError> {
    if let Some(c) = &v.config_map {
        let p = config_map_payload(
            &c.name,
            c.items.as_deref(),
            mode(c.default_mode, DEFAULT_MODE),
            c.optional.unwrap_or(false),
            sources.config_maps.get(&c.name),
        )?;
        return Ok(Some((p, vec![])));
    }
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let p = secret_payload(
            &name,
            s.items.as_deref(),
            mode(s.default_mode, DEFAULT_MODE),
            s.optional.unwrap_or(false),
            sources.secrets.get(&name),
        )?;
        return Ok(Some((p, vec![])));
    }
    if let Some(d) = &v.downward_api {
        let p = downward_api_payload(
            d.items.as_deref().unwrap_or_default(),
            mode(d.default_mode, DEFAULT_MODE),
            pod,
            node,
            sources,
        )?;
        return Ok(Some((p, vec![])));
    }
    let Some(proj) = &v.projected else {
        return Ok(None);
    };
    let default_mode = mode(proj.default_mode, DEFAULT_MODE);
    let mut out = Payload::new();
    let mut notes = vec![];
    for src in proj.sources.iter().flatten() {
        let part = if let Some(c) = &src.config_map {
            config_map_payload(
                &c.name,
                c.items.as_deref(),
                default_mode,
                c.optional.unwrap_or(false),
                sources.config_maps.get(&c.name),
            )?
        } else if let Some(s) = &src.secret {
            secret_payload(
                &s.name,
                s.items.as_deref(),
                default_mode,
                s.optional.unwrap_or(false),
                sources.secrets.get(&s.name),
            )?
        } else if let Some(d) = &src.downward_api {
            downward_api_payload(
                d.items.as_deref().unwrap_or_default(),
                default_mode,
                pod,
                node,
                sources,
            )?
        } else if let Some(t) = &src.service_account_token {
            let key = token_key(&TokenSpec::of(pod, t));
            match sources.service_account_tokens.get(&key) {
                Some(Ok(token)) => Payload::from([(
                    t.path.clone(),
                    FileProjection {
                        data: token.clone().into_bytes(),
                        mode: default_mode,
                    },
                )]),
                Some(Err(why)) => {
                    notes.push(format!(
                        "projected volume {:?}: serviceAccountToken {:?} left out: {why}",
                        v.name, t.path
                    ));
                    continue;
                }
                None => {
                    notes.push(format!(
                        "projected volume {:?}: serviceAccountToken {:?} left out: no token was requested",
                        v.name, t.path
                    ));
                    continue;
                }
            }
        } else {
            notes.push(format!(
                "projected volume {:?}: a source this kubelet does not support was left out",
                v.name
            ));
            continue;
        };
        out.extend(part);
    }
    Ok(Some((out, notes)))
}

/// A service account token a projected volume asks for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokenSpec {
    /// The pod's service account (`default` when unset).
    pub service_account: String,
    /// "" = the API server's default audiences.
    pub audience: String,
    /// Requested lifetime (default one hour, as the API defaults it).
    pub expiration_seconds: i64,
}

impl TokenSpec {
    pub fn of(pod: &Pod, t: &ServiceAccountTokenProjection) -> Self {
        TokenSpec {
            service_account: spec(pod)
                .service_account_name
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_owned()),
            audience: t.audience.clone().unwrap_or_default(),
            expiration_seconds: t.expiration_seconds.unwrap_or(3600),
        }
    }
}

/// The key of a token in [`EnvSources::service_account_tokens`].
pub fn token_key(t: &TokenSpec) -> String {
    format!(
        "{}|{}|{}",
        t.service_account, t.audience, t.expiration_seconds
    )
}

/// The service account tokens the pod's projected volumes need.
pub fn token_requests(pod: &Pod) -> Vec<TokenSpec> {
    let mut out: Vec<TokenSpec> = spec(pod)
        .volumes
        .iter()
        .flatten()
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| TokenSpec::of(pod, t))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Names of the ConfigMaps and Secrets the pod's volumes read.
pub fn volume_references(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let (mut cms, mut secrets) = (vec![], vec![]);
    for v in spec(pod).volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            cms.push(c.name.clone());
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.push(s);
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                cms.push(c.name.clone());
            }
            if let Some(s) = &src.secret {
                secrets.push(s.name.clone());
            }
        }
    }
    (cms, secrets)
}

/// What is at a hostPath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFileKind {
    Missing,
    Directory,
    File,
    Socket,
    CharDevice,
    BlockDevice,
    Other,
}

/// What to do at a hostPath before mounting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPathAction {
    Nothing,
    /// `mkdir -p` with mode 0755.
    CreateDirectory,
    /// An empty file with mode 0644.
    CreateFile,
}

/// Upstream's hostPath type checks (`checkType`).
pub fn host_path_action(
    path: &str,
    type_: &str,
    found: HostFileKind,
) -> Result<HostPathAction, VolumeError> {
    use HostFileKind::*;
    let want = |want: &str| {
        Err(VolumeError::HostPathType {
            path: path.to_owned(),
            want: want.to_owned(),
        })
    };
    match (type_, found) {
        ("", _) => Ok(HostPathAction::Nothing),
        ("DirectoryOrCreate", Missing) => Ok(HostPathAction::CreateDirectory),
        ("DirectoryOrCreate" | "Directory", Directory) => Ok(HostPathAction::Nothing),
        ("DirectoryOrCreate" | "Directory", _) => want("directory"),
        ("FileOrCreate", Missing) => Ok(HostPathAction::CreateFile),
        ("FileOrCreate" | "File", File) => Ok(HostPathAction::Nothing),
        ("FileOrCreate" | "File", _) => want("file"),
        ("Socket", Socket) | ("CharDevice", CharDevice) | ("BlockDevice", BlockDevice) => {
            Ok(HostPathAction::Nothing)
        }
        ("Socket", _) => want("socket file"),
        ("CharDevice", _) => want("character device"),
        ("BlockDevice", _) => want("block device"),
        (other, _) => Err(VolumeError::HostPath {
            path: path.to_owned(),
            why: format!("unknown hostPath type {other:?}"),
        }),
    }
}

fn propagation(p: Option<&str>) -> i32 {
    match p {
        Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer as i32,
        Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional as i32,
        _ => cri::MountPropagation::PropagationPrivate as i32,
    }
}

/// A subPath must stay inside its volume.
pub fn validate_sub_path(p: &str) -> Result<(), VolumeError> {
    if p.starts_with('/') || p.split('/').any(|e| e == "..") {
        return Err(VolumeError::SubPath(p.to_owned()));
    }
    Ok(())
}

/// A container's CRI mounts from its volumeMounts and the host paths of the pod's volumes
/// (`volumes`: name -> (host path, kind)). Returns the mounts and the subPath directories
/// that must exist on the host (upstream creates missing ones).
pub fn container_mounts(
    c: &Container,
    volumes: &BTreeMap<String, (PathBuf, VolumeKind)>,
) -> Result<(Vec<cri::Mount>, Vec<PathBuf>), VolumeError> {
    let mut mounts = vec![];
    let mut make_dirs = vec![];
    for m in c.volume_mounts.iter().flatten() {
        let (host, kind) = volumes.get(&m.name).ok_or_else(|| VolumeError::NoVolume {
            volume: m.name.clone(),
            mount_path: m.mount_path.clone(),
            container: c.name.clone(),
        })?;
        let mut host_path = host.clone();
        if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            validate_sub_path(sub)?;
            host_path = host_path.join(sub);
            make_dirs.push(host_path.clone());
        }
        mounts.push(cri::Mount {
            container_path: m.mount_path.clone(),
            host_path: host_path.to_string_lossy().into_owned(),
            readonly: m.read_only.unwrap_or(false) || kind.read_only(),
            selinux_relabel: false,
            propagation: propagation(m.mount_propagation.as_deref()),
            ..Default::default()
        });
    }
    Ok((mounts, make_dirs))
}

/// Mount points from `/proc/self/mountinfo` (field 5), with the kernel's octal escapes
/// (`\040` for a space) undone.
pub fn parse_mountinfo(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_octal(p)))
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection, EmptyDirVolumeSource,
        ObjectFieldSelector, PodSpec, ProjectedVolumeSource, ResourceFieldSelector,
        ResourceRequirements, SecretProjection, SecretVolumeSource, ServiceAccountTokenProjection,
        VolumeMount, VolumeProjection,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn files(p: &Payload) -> Vec<(String, String, u32)> {
        p.iter()
            .map(|(k, f)| {
                (
                    k.clone(),
                    String::from_utf8_lossy(&f.data).into_owned(),
                    f.mode,
                )
            })
            .collect()
    }

    fn cm() -> ConfigMap {
        ConfigMap {
            data: Some([("a".into(), "1".into()), ("b".into(), "2".into())].into()),
            binary_data: Some([("bin".into(), ByteString(vec![0xff]))].into()),
            ..Default::default()
        }
    }

    fn ktp(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn config_map_payloads() {
        let p = config_map_payload("c", None, 0o644, false, Some(&cm())).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p["bin"].data, vec![0xff]);
        let items = [ktp("a", "dir/x", Some(0o400)), ktp("b", "y", None)];
        let p = config_map_payload("c", Some(&items), 0o600, false, Some(&cm())).unwrap();
        assert_eq!(
            files(&p),
            [
                ("dir/x".to_owned(), "1".to_owned(), 0o400),
                ("y".to_owned(), "2".to_owned(), 0o600)
            ]
        );
        let missing = [ktp("zz", "z", None)];
        assert_eq!(
            config_map_payload("c", Some(&missing), 0o644, false, Some(&cm())),
            Err(VolumeError::ConfigMapKey("zz".into()))
        );
        assert!(
            config_map_payload("c", Some(&missing), 0o644, true, Some(&cm()))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            config_map_payload("c", None, 0o644, false, None),
            Err(VolumeError::ConfigMapNotFound("c".into()))
        );
        assert!(
            config_map_payload("c", None, 0o644, true, None)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            VolumeError::ConfigMapNotFound("c".into()).to_string(),
            "configmap \"c\" not found"
        );
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                labels: Some([("b".into(), "2".into()), ("a".into(), "x\"y".into())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        limits: Some([("memory".into(), Quantity("64Mi".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn field(path: &str, fp: &str) -> DownwardAPIVolumeFile {
        DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                field_path: fp.into(),
                api_version: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn downward_api_and_projected_payloads() {
        let node = NodeConfig::new("n");
        let sources = EnvSources {
            config_maps: [("cm".into(), cm())].into(),
            secrets: [(
                "s".into(),
                Secret {
                    data: Some([("token".into(), ByteString(b"t0k".to_vec()))].into()),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        let items = vec![
            field("name", "metadata.name"),
            field("labels", "metadata.labels"),
            field("l-a", "metadata.labels['a']"),
            DownwardAPIVolumeFile {
                path: "mem".into(),
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: Some("c".into()),
                    resource: "limits.memory".into(),
                    divisor: Some(Quantity("1Mi".into())),
                }),
                mode: Some(0o400),
                ..Default::default()
            },
        ];
        let p = downward_api_payload(&items, 0o644, &pod(), &node, &sources).unwrap();
        assert_eq!(
            files(&p),
            [
                ("l-a".to_owned(), "x\"y".to_owned(), 0o644),
                (
                    "labels".to_owned(),
                    "a=\"x\\\"y\"\nb=\"2\"".to_owned(),
                    0o644
                ),
                ("mem".to_owned(), "64".to_owned(), 0o400),
                ("name".to_owned(), "p".to_owned(), 0o644),
            ]
        );

        let v = Volume {
            name: "all".into(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(0o440),
                sources: Some(vec![
                    VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: "cm".into(),
                            items: Some(vec![ktp("a", "cm-a", None)]),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        secret: Some(SecretProjection {
                            name: "s".into(),
                            items: None,
                            optional: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        secret: Some(SecretProjection {
                            name: "absent".into(),
                            items: None,
                            optional: Some(true),
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        downward_api: Some(DownwardAPIProjection {
                            items: Some(vec![field("ns", "metadata.namespace")]),
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        service_account_token: Some(ServiceAccountTokenProjection {
                            path: "token-sa".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        };
        let (p, notes) = volume_payload(&v, &pod(), &node, &sources)
            .unwrap()
            .unwrap();
        assert_eq!(
            files(&p),
            [
                ("cm-a".to_owned(), "1".to_owned(), 0o440),
                ("ns".to_owned(), "ns".to_owned(), 0o440),
                ("token".to_owned(), "t0k".to_owned(), 0o440),
            ]
        );
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("no token was requested"), "{notes:?}");
        let key = token_key(&TokenSpec {
            service_account: "default".into(),
            audience: String::new(),
            expiration_seconds: 3600,
        });
        assert_eq!(
            token_requests(&Pod {
                spec: Some(PodSpec {
                    volumes: Some(vec![v.clone(), v.clone()]),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .iter()
            .map(token_key)
            .collect::<Vec<_>>(),
            std::slice::from_ref(&key)
        );
        let mut with_token = sources.clone();
        with_token
            .service_account_tokens
            .insert(key.clone(), Ok("jwt".into()));
        let (p, notes) = volume_payload(&v, &pod(), &node, &with_token)
            .unwrap()
            .unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(p["token-sa"].data, b"jwt");
        assert_eq!(p["token-sa"].mode, 0o440);
        with_token.service_account_tokens.insert(
            key,
            Err("the server could not find the requested resource".into()),
        );
        let (p, notes) = volume_payload(&v, &pod(), &node, &with_token)
            .unwrap()
            .unwrap();
        assert!(!p.contains_key("token-sa"));
        assert!(notes[0].contains("could not find"), "{notes:?}");

        let secret_vol = Volume {
            name: "s".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("nope".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            volume_payload(&secret_vol, &pod(), &node, &sources),
            Err(VolumeError::SecretNotFound("nope".into()))
        );
        let empty = Volume {
            name: "e".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        };
        assert_eq!(volume_payload(&empty, &pod(), &node, &sources), Ok(None));
        assert_eq!(VolumeKind::of(&empty).tmpfs(), Some(Some(1 << 20)));
        let cmv = Volume {
            name: "c".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "cm".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(VolumeKind::of(&cmv).tmpfs(), None);
        assert_eq!(VolumeKind::of(&secret_vol).tmpfs(), Some(None));
        assert_eq!(
            volume_references(&Pod {
                spec: Some(PodSpec {
                    volumes: Some(vec![cmv, secret_vol, v]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            (
                vec!["cm".to_owned(), "cm".to_owned()],
                vec!["nope".to_owned(), "s".to_owned(), "absent".to_owned()]
            )
        );
    }

    #[test]
    fn paths_and_mounts() {
        let root = Path::new("/var/lib/kubelet");
        assert_eq!(
            volume_dir(root, "u1", "kubernetes.io~configmap", "cfg"),
            PathBuf::from("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~configmap/cfg")
        );
        let vols: BTreeMap<String, (PathBuf, VolumeKind)> = [
            (
                "cfg".to_owned(),
                (PathBuf::from("/v/cfg"), VolumeKind::ConfigMap),
            ),
            (
                "data".to_owned(),
                (
                    PathBuf::from("/v/data"),
                    VolumeKind::EmptyDir {
                        memory: false,
                        size_limit: None,
                    },
                ),
            ),
        ]
        .into();
        let vm =
            |name: &str, path: &str, sub: Option<&str>, ro: bool, prop: Option<&str>| VolumeMount {
                name: name.into(),
                mount_path: path.into(),
                sub_path: sub.map(str::to_owned),
                read_only: Some(ro),
                mount_propagation: prop.map(str::to_owned),
                ..Default::default()
            };
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                vm("cfg", "/etc/cfg", None, false, None),
                vm(
                    "data",
                    "/data",
                    Some("sub/dir"),
                    false,
                    Some("HostToContainer"),
                ),
                vm("data", "/ro", None, true, None),
            ]),
            ..Default::default()
        };
        let (mounts, dirs) = container_mounts(&c, &vols).unwrap();
        let view: Vec<_> = mounts
            .iter()
            .map(|m| {
                (
                    m.container_path.as_str(),
                    m.host_path.as_str(),
                    m.readonly,
                    m.propagation,
                )
            })
            .collect();
        assert_eq!(
            view,
            [
                (
                    "/etc/cfg",
                    "/v/cfg",
                    true,
                    cri::MountPropagation::PropagationPrivate as i32
                ),
                (
                    "/data",
                    "/v/data/sub/dir",
                    false,
                    cri::MountPropagation::PropagationHostToContainer as i32
                ),
                (
                    "/ro",
                    "/v/data",
                    true,
                    cri::MountPropagation::PropagationPrivate as i32
                ),
            ]
        );
        assert_eq!(dirs, [PathBuf::from("/v/data/sub/dir")]);
        let bad = Container {
            name: "c".into(),
            volume_mounts: Some(vec![vm("data", "/x", Some("../escape"), false, None)]),
            ..Default::default()
        };
        assert!(matches!(
            container_mounts(&bad, &vols),
            Err(VolumeError::SubPath(_))
        ));
        let missing = Container {
            name: "c".into(),
            volume_mounts: Some(vec![vm("nope", "/x", None, false, None)]),
            ..Default::default()
        };
        assert!(matches!(
            container_mounts(&missing, &vols),
            Err(VolumeError::NoVolume { .. })
        ));
    }

    #[test]
    fn host_path_types() {
        use HostFileKind::*;
        use HostPathAction::*;
        let ok = |t: &str, f| host_path_action("/x", t, f).ok();
        assert_eq!(ok("", Missing), Some(Nothing));
        assert_eq!(ok("DirectoryOrCreate", Missing), Some(CreateDirectory));
        assert_eq!(ok("DirectoryOrCreate", Directory), Some(Nothing));
        assert_eq!(ok("DirectoryOrCreate", File), None);
        assert_eq!(ok("Directory", Missing), None);
        assert_eq!(ok("FileOrCreate", Missing), Some(CreateFile));
        assert_eq!(ok("File", File), Some(Nothing));
        assert_eq!(ok("File", Directory), None);
        assert_eq!(ok("Socket", Socket), Some(Nothing));
        assert_eq!(ok("CharDevice", BlockDevice), None);
        assert_eq!(ok("Bogus", File), None);
    }

    #[test]
    fn mountinfo() {
        let text = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw\n\
                    37 35 0:5 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/s rw - tmpfs tmpfs rw\n";
        assert_eq!(
            parse_mountinfo(text),
            [
                PathBuf::from("/mnt/a b"),
                PathBuf::from("/var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/s")
            ]
        );
    }
}
