//! Pod volumes, the pure part (upstream `pkg/volume/{emptydir,configmap,secret,downwardapi,
//! projected,hostpath}` and `kubelet_pods.go` `makeMounts`): where each volume lives under
//! the kubelet root (`pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`), the file payloads
//! of configMap, secret, downwardAPI and projected volumes (items, keys, modes, optional),
//! hostPath type checks, `persistentVolumeClaim` volumes (and generic ephemeral volumes,
//! through their claim `<pod>-<volume>`, refused unless the pod owns it) resolved to their
//! hostPath or local PersistentVolume (upstream's desired-state populator and the
//! hostpath/local plugins), the
//! CRI mounts of a container (readOnly, subPath, propagation), and the mount table parsing
//! teardown needs. The IO is [`crate::volume_manager`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, PersistentVolume,
    PersistentVolumeClaim, Pod, Secret, ServiceAccountTokenProjection, Volume, VolumeMount,
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
    /// A subPath (as written, or a subPathExpr expanded) leaving its volume, in
    /// upstream's `makeMounts` words.
    #[error("error SubPath `{0}` must not be an absolute path")]
    SubPathAbsolute(String),
    #[error("unable to provision SubPath `{0}`: must not contain '..'")]
    SubPathBacksteps(String),
    /// A subPathExpr naming variables the container's environment lacks or has empty
    /// (upstream's `ExpandContainerVolumeMounts`; names sorted).
    #[error("missing value for {}", .0.join(", "))]
    SubPathExprMissing(Vec<String>),
    /// A mount asking for a recursively read-only mount the runtime cannot make
    /// (upstream's `resolveRecursiveReadOnly`).
    #[error("failed to resolve recursive read-only mode: {0}")]
    RecursiveReadOnly(String),
    /// Volumes upstream's desired-state populator could not process (a claim not bound yet,
    /// its PersistentVolume missing, a volume type this kubelet cannot mount): upstream's
    /// `WaitForAttachAndMount` error. `volumes` sorted; `errors` one per volume.
    #[error(
        "unmounted volumes=[{}], unattached volumes=[], failed to process volumes=[{}]: {}",
        .volumes.join(" "),
        .volumes.join(" "),
        .errors.join("; ")
    )]
    NotProcessed {
        volumes: Vec<String>,
        errors: Vec<String>,
    },
    /// A mount operation of one volume failed (upstream's `GenerateErrorDetailed`: the
    /// operation, the volume's spec name, the cause).
    #[error("{op} failed for volume {volume:?} : {why}")]
    Mount {
        op: &'static str,
        volume: String,
        why: String,
    },
    #[error("{what} {path}: {why}")]
    Io {
        what: &'static str,
        path: String,
        why: String,
    },
    /// More than one volume failed, each with its own error.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<VolumeError>),
}

impl VolumeError {
    /// The `FailedMount` event's message: upstream's "Unable to attach or mount volumes: ..."
    /// for volumes that could not be processed, the operation's own text for a failed mount
    /// operation, "MountVolume.SetUp failed: ..." otherwise.
    pub fn event_message(&self) -> String {
        match self {
            VolumeError::Several(_) => self.event_messages().join("; "),
            VolumeError::NotProcessed { .. } => {
                format!("Unable to attach or mount volumes: {self}")
            }
            VolumeError::Mount { .. } => self.to_string(),
            _ => format!("MountVolume.SetUp failed: {self}"),
        }
    }

    /// The `FailedMount` events: one per failed volume, as upstream's reconciler reports
    /// each volume's operation; pod volumes of one PersistentVolume fail as one.
    pub fn event_messages(&self) -> Vec<String> {
        match self {
            VolumeError::Several(errors) => {
                let mut messages: Vec<String> = vec![];
                for m in errors.iter().flat_map(Self::event_messages) {
                    if !messages.contains(&m) {
                        messages.push(m);
                    }
                }
                messages
            }
            _ => vec![self.event_message()],
        }
    }
}

/// Upstream's in-tree plugin names of the volumes this kubelet sets up.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io/empty-dir";
pub const CONFIG_MAP_PLUGIN: &str = "kubernetes.io/configmap";
pub const SECRET_PLUGIN: &str = "kubernetes.io/secret";
pub const DOWNWARD_API_PLUGIN: &str = "kubernetes.io/downward-api";
pub const PROJECTED_PLUGIN: &str = "kubernetes.io/projected";
pub const HOST_PATH_PLUGIN: &str = "kubernetes.io/host-path";
pub const LOCAL_VOLUME_PLUGIN: &str = "kubernetes.io/local-volume";

/// The plugin whose directory under a pod's `volumes/` is `dir` (upstream's escaped
/// name, `/` as `~`), among the plugins that keep one here.
pub fn plugin_of_dir(dir: &str) -> Option<&'static str> {
    [
        EMPTY_DIR_PLUGIN,
        CONFIG_MAP_PLUGIN,
        SECRET_PLUGIN,
        DOWNWARD_API_PLUGIN,
        PROJECTED_PLUGIN,
    ]
    .into_iter()
    .find(|p| p.replace('/', "~") == dir)
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
    /// A `persistentVolumeClaim` volume, or a generic ephemeral volume (its claim
    /// `<pod>-<volume>`, [`VolumeKind::in_pod`]); `read_only` is the pod's `readOnly` until
    /// the claim is resolved, then whether containers get the volume read-only
    /// ([`ResolvedClaim::read_only`]).
    PersistentVolumeClaim {
        claim: String,
        read_only: bool,
    },
    Unsupported,
}

impl VolumeKind {
    /// The kind of the pod's volume `v`: as [`VolumeKind::of`], and a generic ephemeral
    /// volume is mounted as the `persistentVolumeClaim` volume of its claim, never
    /// read-only by the pod (upstream's populator `createVolumeSpec`).
    pub fn in_pod(pod: &Pod, v: &Volume) -> Self {
        if v.persistent_volume_claim.is_none() && v.ephemeral.is_some() {
            return VolumeKind::PersistentVolumeClaim {
                claim: ferrokube_api::ephemeral::volume_claim_name(pod, v),
                read_only: false,
            };
        }
        VolumeKind::of(v)
    }

    /// The kind of a volume by its source alone: a generic ephemeral volume, whose claim
    /// is named after the pod, is `Unsupported` here ([`VolumeKind::in_pod`] knows it).
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
        } else if let Some(c) = &v.persistent_volume_claim {
            VolumeKind::PersistentVolumeClaim {
                claim: c.claim_name.clone(),
                read_only: c.read_only.unwrap_or(false),
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
            VolumeKind::HostPath { .. }
            | VolumeKind::PersistentVolumeClaim { .. }
            | VolumeKind::Unsupported => return None,
        })
    }

    /// Upstream's plugin name (`GetPluginName`), the `plugin_name` and `volume_plugin` of
    /// the volume manager's metrics; `None` for a claim until it is resolved
    /// ([`ClaimSource::plugin_name`]) and for a source this kubelet does not handle.
    pub fn plugin_name(&self) -> Option<&'static str> {
        Some(match self {
            VolumeKind::EmptyDir { .. } => EMPTY_DIR_PLUGIN,
            VolumeKind::ConfigMap => CONFIG_MAP_PLUGIN,
            VolumeKind::Secret => SECRET_PLUGIN,
            VolumeKind::DownwardApi => DOWNWARD_API_PLUGIN,
            VolumeKind::Projected => PROJECTED_PLUGIN,
            VolumeKind::HostPath { .. } => HOST_PATH_PLUGIN,
            VolumeKind::PersistentVolumeClaim { .. } | VolumeKind::Unsupported => return None,
        })
    }

    /// Whether the plugin sets the volume up again on every pod sync (upstream's
    /// `RequiresRemount`: the volumes whose contents follow API objects).
    pub fn requires_remount(&self) -> bool {
        matches!(
            self,
            VolumeKind::ConfigMap
                | VolumeKind::Secret
                | VolumeKind::DownwardApi
                | VolumeKind::Projected
        )
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
        match self {
            VolumeKind::ConfigMap
            | VolumeKind::Secret
            | VolumeKind::DownwardApi
            | VolumeKind::Projected => true,
            VolumeKind::PersistentVolumeClaim { read_only, .. } => *read_only,
            _ => false,
        }
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

/// A pod's claim and its PersistentVolume as the kubelet read them through the API, each
/// by name (what the Node authorizer allows: the claims of pods bound to the node, and the
/// volume such a claim names). `Err` holds the API's message.
#[derive(Debug, Clone)]
pub struct ClaimLookup {
    pub claim: Result<PersistentVolumeClaim, String>,
    /// `None` when the claim could not be read or is not bound to a volume yet (upstream
    /// reads the volume only then).
    pub volume: Option<Result<PersistentVolume, String>>,
}

/// The claims the pod's `persistentVolumeClaim` and generic ephemeral volumes use, sorted,
/// once each.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let mut out: Vec<String> = spec(pod)
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| ferrokube_api::ephemeral::claim_of_volume(pod, v))
        .map(|(name, _)| name)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The PersistentVolume a claim is bound to, or upstream's reason the claim cannot be used
/// yet (`getPVCExtractPV`): being deleted, not Bound, no `spec.volumeName`.
pub fn bound_volume_name(pvc: &PersistentVolumeClaim) -> Result<&str, &'static str> {
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err("PVC is being deleted");
    }
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err("PVC is not bound");
    }
    match pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
        Some(n) if !n.is_empty() => Ok(n),
        _ => Err("PVC has empty pvc.Spec.VolumeName"),
    }
}

/// The PersistentVolume sources this kubelet mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimSource {
    /// Checked like a hostPath volume (`type`), then bind-mounted from the host directly.
    HostPath { path: String, type_: String },
    /// A directory that must exist, bind-mounted from the host directly.
    Local { path: String },
}

impl ClaimSource {
    /// The plugin that mounts the PersistentVolume (upstream's hostPath or local plugin).
    pub fn plugin_name(&self) -> &'static str {
        match self {
            ClaimSource::HostPath { .. } => HOST_PATH_PLUGIN,
            ClaimSource::Local { .. } => LOCAL_VOLUME_PLUGIN,
        }
    }
}

/// A `persistentVolumeClaim` volume resolved to what is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedClaim {
    /// The PersistentVolume's name (upstream's volume spec name, the one events give).
    pub volume: String,
    pub source: ClaimSource,
    /// Containers get it read-only: the pod's `persistentVolumeClaim.readOnly` (upstream's
    /// `spec.ReadOnly`, the mounter's ReadOnly attribute), or for a local volume an `ro`
    /// in the PersistentVolume's `mountOptions` (upstream's bind mount takes them).
    pub read_only: bool,
    /// The PersistentVolume's `mountOptions`.
    pub mount_options: Vec<String>,
    /// Whether the pod's `fsGroup` owns the volume: local volumes mounted read-write
    /// (upstream's local mounter calls SetVolumeOwnership unless read-only); hostPath never.
    pub ownership: bool,
}

impl ResolvedClaim {
    /// The host path containers mount.
    pub fn path(&self) -> &str {
        match &self.source {
            ClaimSource::HostPath { path, .. } | ClaimSource::Local { path } => path,
        }
    }
}

/// Whether a container of the pod mounts the volume (`volumeMounts`) and whether one maps it
/// as a block device (`volumeDevices`), as upstream's `GetPodVolumeNames`.
fn volume_uses(pod: &Pod, name: &str) -> (bool, bool) {
    let s = spec(pod);
    let mut mounted = false;
    let mut device = false;
    let mut see =
        |mounts: Option<&Vec<k8s_openapi::api::core::v1::VolumeMount>>,
         devices: Option<&Vec<k8s_openapi::api::core::v1::VolumeDevice>>| {
            mounted |= mounts.into_iter().flatten().any(|m| m.name == name);
            device |= devices.into_iter().flatten().any(|d| d.name == name);
        };
    for c in s
        .containers
        .iter()
        .chain(s.init_containers.iter().flatten())
    {
        see(c.volume_mounts.as_ref(), c.volume_devices.as_ref());
    }
    for c in s.ephemeral_containers.iter().flatten() {
        see(c.volume_mounts.as_ref(), c.volume_devices.as_ref());
    }
    (mounted, device)
}

/// Resolves the pod's `persistentVolumeClaim` or generic ephemeral volume `v` from what
/// the kubelet read (upstream's populator `createVolumeSpec`: the claim bound, an
/// ephemeral volume's claim owned by the pod, its volume's `claimRef` the claim, the volume
/// mode, then a plugin for the source). The error is the populator's message for the
/// volume, the pod waits and the kubelet retries.
pub fn resolve_claim(
    pod: &Pod,
    v: &Volume,
    lookup: Option<&ClaimLookup>,
) -> Result<ResolvedClaim, String> {
    let Some((claim_name, is_ephemeral)) = ferrokube_api::ephemeral::claim_of_volume(pod, v) else {
        return Err(format!(
            "volume {:?} is not a persistentVolumeClaim volume",
            v.name
        ));
    };
    // An ephemeral volume's claim is never read-only through the pod.
    let claim_read_only = v
        .persistent_volume_claim
        .as_ref()
        .and_then(|c| c.read_only)
        .unwrap_or(false);
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let processing = |e: String| format!("error processing PVC {ns}/{claim_name}: {e}");
    let lookup = lookup.ok_or_else(|| {
        processing("failed to fetch PVC from API server: not read yet".to_owned())
    })?;
    let pvc = lookup
        .claim
        .as_ref()
        .map_err(|e| processing(format!("failed to fetch PVC from API server: {e}")))?;
    let pv_name = bound_volume_name(pvc).map_err(|e| processing(e.to_owned()))?;
    // The generated name is predictable: a claim of that name someone else made must not
    // give the pod their data. Upstream's message stands alone.
    if is_ephemeral {
        ferrokube_api::ephemeral::volume_is_for_pod(pod, pvc)?;
    }
    let pv = match &lookup.volume {
        Some(Ok(pv)) if pv.metadata.name.as_deref() == Some(pv_name) => pv,
        Some(Err(e)) => {
            return Err(processing(format!(
                "failed to fetch PV {pv_name} from API server: {e}"
            )));
        }
        _ => {
            return Err(processing(format!(
                "failed to fetch PV {pv_name} from API server: not read yet"
            )));
        }
    };
    let pv_spec = pv.spec.clone().unwrap_or_default();
    let Some(claim_ref) = &pv_spec.claim_ref else {
        return Err(processing(format!(
            "found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        )));
    };
    let claim_uid = pvc.metadata.uid.as_deref().unwrap_or_default();
    let ref_uid = claim_ref.uid.as_deref().unwrap_or_default();
    if ref_uid != claim_uid {
        return Err(processing(format!(
            "found PV object {pv_name} but its pv.Spec.ClaimRef.UID {ref_uid} does not point to claim.UID {claim_uid}"
        )));
    }
    let mode = pv_spec.volume_mode.as_deref().unwrap_or("Filesystem");
    let (mounted, device) = volume_uses(pod, &v.name);
    if mounted && mode != "Filesystem" {
        return Err(format!(
            "volume {} has volumeMode {mode}, but is specified in volumeMounts",
            v.name
        ));
    }
    if device && mode != "Block" {
        return Err(format!(
            "volume {} has volumeMode {mode}, but is specified in volumeDevices",
            v.name
        ));
    }
    let unsupported = |what: String| {
        format!(
            "failed to get Plugin from volumeSpec for volume {pv_name:?} err=no volume plugin matched: {what}"
        )
    };
    if mode == "Block" {
        return Err(unsupported(
            "raw block volumes (volumeMode Block) are not supported by this kubelet".to_owned(),
        ));
    }
    let mount_options = pv_spec.mount_options.clone().unwrap_or_default();
    let source = if let Some(h) = &pv_spec.host_path {
        ClaimSource::HostPath {
            path: h.path.clone(),
            type_: h.type_.clone().unwrap_or_default(),
        }
    } else if let Some(l) = &pv_spec.local {
        ClaimSource::Local {
            path: l.path.clone(),
        }
    } else {
        let spec_json = serde_json::to_value(&pv_spec).unwrap_or_default();
        let kind = spec_json
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .find(|k| {
                !ferrokube_api::persistentvolume::SPEC_NON_SOURCE_FIELDS.contains(&k.as_str())
            })
            .cloned();
        return Err(unsupported(match kind {
            Some(k) => format!(
                "volume type {k:?} is not supported by this kubelet (PersistentVolume sources it mounts: hostPath, local)"
            ),
            None => "the PersistentVolume has no volume source".to_owned(),
        }));
    };
    let (read_only, ownership) = match source {
        ClaimSource::HostPath { .. } => (claim_read_only, false),
        ClaimSource::Local { .. } => {
            let ro_option = mount_options.iter().any(|o| o == "ro");
            (claim_read_only || ro_option, !claim_read_only && !ro_option)
        }
    };
    Ok(ResolvedClaim {
        volume: pv_name.to_owned(),
        source,
        read_only,
        mount_options,
        ownership,
    })
}

/// What to do at a resolved claim's host path, found to be `found`, before containers mount
/// it: the hostPath plugin's type check (and its refusal of mount options), the local
/// plugin's checks (a directory that exists, no `..`).
pub fn claim_action(c: &ResolvedClaim, found: HostFileKind) -> Result<HostPathAction, VolumeError> {
    let fail = |op: &'static str, why: String| VolumeError::Mount {
        op,
        volume: c.volume.clone(),
        why,
    };
    match &c.source {
        ClaimSource::HostPath { path, type_ } => {
            if !c.mount_options.is_empty() {
                return Err(fail(
                    "MountVolume.MountOptionSupport check",
                    "Mount options are not supported for this volume type".to_owned(),
                ));
            }
            host_path_action(path, type_, found)
                .map_err(|e| fail("MountVolume.SetUp", e.to_string()))
        }
        ClaimSource::Local { path } => {
            const NEW_MOUNTER: &str = "MountVolume.NewMounter initialization";
            if path.is_empty() {
                return Err(fail(
                    NEW_MOUNTER,
                    "local volume source is nil or local path is not set".to_owned(),
                ));
            }
            match found {
                HostFileKind::Directory => {}
                HostFileKind::Missing => {
                    return Err(fail(NEW_MOUNTER, format!("path {path:?} does not exist")));
                }
                HostFileKind::BlockDevice => {
                    return Err(fail(
                        "MountVolume.MountDevice",
                        format!(
                            "local volume {path} is a block device: formatting and mounting block devices is not supported by this kubelet"
                        ),
                    ));
                }
                _ => {
                    return Err(fail(
                        NEW_MOUNTER,
                        "only directory and block device are supported".to_owned(),
                    ));
                }
            }
            if path.split('/').any(|e| e == "..") {
                return Err(fail(
                    "MountVolume.SetUp",
                    format!("invalid path: {path} must not contain '..'"),
                ));
            }
            Ok(HostPathAction::Nothing)
        }
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
    if p.starts_with('/') {
        return Err(VolumeError::SubPathAbsolute(p.to_owned()));
    }
    if p.split('/').any(|e| e == "..") {
        return Err(VolumeError::SubPathBacksteps(p.to_owned()));
    }
    Ok(())
}

/// Whether the runtime makes recursively read-only mounts. containerd reports it per
/// runtime handler from CRI 1.30 on (containerd 2.0); the 1.6 and 1.7 this project
/// installs do not, so a mount may only ask for it `IfPossible`.
pub const RUNTIME_SUPPORTS_RECURSIVE_READ_ONLY: bool = false;

/// Upstream's `resolveRecursiveReadOnly`: whether a mount is made recursively read-only,
/// or why it cannot be made as asked.
pub fn resolve_recursive_read_only(
    m: &VolumeMount,
    runtime_supports: bool,
) -> Result<bool, VolumeError> {
    let mode = match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    let refuse = |why: String| Err(VolumeError::RecursiveReadOnly(why));
    if m.read_only != Some(true) {
        return refuse(format!(
            "volume {:?} requested recursive read-only mode, but it is not read-only",
            m.name
        ));
    }
    if let Some(p) = m.mount_propagation.as_deref().filter(|p| *p != "None") {
        return refuse(format!(
            "volume {:?} requested recursive read-only mode, but it is not compatible with propagation {p:?}",
            m.name
        ));
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => refuse(format!(
            "volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
            m.name
        )),
        other => refuse(format!("unknown recursive read-only mode {other:?}")),
    }
}

/// A mount's subPathExpr with the container's `$(VAR)`s expanded (upstream's
/// `ExpandContainerVolumeMounts`: a variable missing or empty is an error).
fn expand_sub_path_expr(expr: &str, env: &[(String, String)]) -> Result<String, VolumeError> {
    let mut missing = BTreeSet::new();
    let expanded = crate::env::expand(expr, |name| {
        let value = env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty());
        if value.is_none() {
            missing.insert(name.to_owned());
        }
        Some(value.unwrap_or_default())
    });
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(VolumeError::SubPathExprMissing(
            missing.into_iter().collect(),
        ))
    }
}

/// A container's CRI mounts from its volumeMounts and the host paths of the pod's volumes
/// (`volumes`: name -> (host path, kind)); `env` is the container's environment, which
/// subPathExprs expand from. Returns the mounts and the subPath directories that must
/// exist on the host (upstream creates missing ones).
pub fn container_mounts(
    c: &Container,
    volumes: &BTreeMap<String, (PathBuf, VolumeKind)>,
    env: &[(String, String)],
) -> Result<(Vec<cri::Mount>, Vec<PathBuf>), VolumeError> {
    let mut mounts = vec![];
    let mut make_dirs = vec![];
    for m in c.volume_mounts.iter().flatten() {
        let (host, kind) = volumes.get(&m.name).ok_or_else(|| VolumeError::NoVolume {
            volume: m.name.clone(),
            mount_path: m.mount_path.clone(),
            container: c.name.clone(),
        })?;
        resolve_recursive_read_only(m, RUNTIME_SUPPORTS_RECURSIVE_READ_ONLY)?;
        let mut host_path = host.clone();
        let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
            Some(expr) => Some(expand_sub_path_expr(expr, env)?),
            None => m.sub_path.clone(),
        };
        if let Some(sub) = sub.as_deref().filter(|s| !s.is_empty()) {
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

    #[test]
    fn plugin_names_are_upstreams_and_match_their_directories() {
        let kinds = [
            (
                VolumeKind::EmptyDir {
                    memory: false,
                    size_limit: None,
                },
                Some("kubernetes.io/empty-dir"),
                false,
            ),
            (VolumeKind::ConfigMap, Some("kubernetes.io/configmap"), true),
            (VolumeKind::Secret, Some("kubernetes.io/secret"), true),
            (
                VolumeKind::DownwardApi,
                Some("kubernetes.io/downward-api"),
                true,
            ),
            (VolumeKind::Projected, Some("kubernetes.io/projected"), true),
            (
                VolumeKind::HostPath {
                    path: "/x".into(),
                    type_: String::new(),
                },
                Some("kubernetes.io/host-path"),
                false,
            ),
            (
                VolumeKind::PersistentVolumeClaim {
                    claim: "c".into(),
                    read_only: false,
                },
                None,
                false,
            ),
            (VolumeKind::Unsupported, None, false),
        ];
        for (kind, plugin, remount) in kinds {
            assert_eq!(kind.plugin_name(), plugin, "{kind:?}");
            assert_eq!(kind.requires_remount(), remount, "{kind:?}");
            if let Some(dir) = kind.plugin_dir() {
                assert_eq!(plugin_of_dir(dir), plugin, "{dir}");
            }
        }
        assert_eq!(plugin_of_dir("kubernetes.io~host-path"), None);
        assert_eq!(
            ClaimSource::Local { path: "/d".into() }.plugin_name(),
            "kubernetes.io/local-volume"
        );
        assert_eq!(
            ClaimSource::HostPath {
                path: "/d".into(),
                type_: String::new()
            }
            .plugin_name(),
            "kubernetes.io/host-path"
        );
    }

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
        let (mounts, dirs) = container_mounts(&c, &vols, &[]).unwrap();
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
            container_mounts(&bad, &vols, &[]),
            Err(VolumeError::SubPathBacksteps(_))
        ));
        let missing = Container {
            name: "c".into(),
            volume_mounts: Some(vec![vm("nope", "/x", None, false, None)]),
            ..Default::default()
        };
        assert!(matches!(
            container_mounts(&missing, &vols, &[]),
            Err(VolumeError::NoVolume { .. })
        ));
    }

    #[test]
    fn sub_path_exprs_expand_from_the_environment() {
        let vols: BTreeMap<_, _> = [(
            "data".to_owned(),
            (
                PathBuf::from("/v/data"),
                VolumeKind::EmptyDir {
                    memory: false,
                    size_limit: None,
                },
            ),
        )]
        .into();
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [{"name": "data", "mountPath": "/d", "subPathExpr": "logs/$(POD)"}]
        }))
        .unwrap();
        let env = [("POD".to_owned(), "web-0".to_owned())];
        let (mounts, dirs) = container_mounts(&c, &vols, &env).unwrap();
        assert_eq!(mounts[0].host_path, "/v/data/logs/web-0");
        assert_eq!(dirs, [PathBuf::from("/v/data/logs/web-0")]);
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [{"name": "data", "mountPath": "/d", "subPathExpr": "$(B)/$(A)/$(POD)"}]
        }))
        .unwrap();
        let env = [
            ("POD".to_owned(), "web-0".to_owned()),
            ("A".to_owned(), String::new()),
        ];
        let err = container_mounts(&c, &vols, &env).unwrap_err();
        assert_eq!(err.to_string(), "missing value for A, B");
        // An expansion leaving the volume, in upstream's words.
        let escape: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [{"name": "data", "mountPath": "/d", "subPathExpr": "$(DIR)"}]
        }))
        .unwrap();
        let refused = |dir: &str| {
            let env = [("DIR".to_owned(), dir.to_owned())];
            container_mounts(&escape, &vols, &env)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused("/etc"),
            "error SubPath `/etc` must not be an absolute path"
        );
        assert_eq!(
            refused("a/../../x"),
            "unable to provision SubPath `a/../../x`: must not contain '..'"
        );
    }

    #[test]
    fn recursive_read_only_is_resolved_as_upstream_does() {
        let mount =
            |json: serde_json::Value| -> VolumeMount { serde_json::from_value(json).unwrap() };
        let m = |mode: &str| {
            mount(
                serde_json::json!({"name": "mnt", "mountPath": "/m", "readOnly": true,
                "recursiveReadOnly": mode}),
            )
        };
        assert!(!resolve_recursive_read_only(&m("Disabled"), false).unwrap());
        assert!(!resolve_recursive_read_only(&m("IfPossible"), false).unwrap());
        assert!(resolve_recursive_read_only(&m("IfPossible"), true).unwrap());
        assert!(resolve_recursive_read_only(&m("Enabled"), true).unwrap());
        assert_eq!(
            resolve_recursive_read_only(&m("Enabled"), false)
                .unwrap_err()
                .to_string(),
            "failed to resolve recursive read-only mode: volume \"mnt\" requested recursive \
             read-only mode, but it is not supported by the runtime"
        );
        let writable = mount(serde_json::json!({"name": "mnt", "mountPath": "/m",
            "recursiveReadOnly": "IfPossible"}));
        assert!(resolve_recursive_read_only(&writable, true).is_err());
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

    fn claim_pod(volumes: serde_json::Value, mounts: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {
                "volumes": volumes,
                "containers": [{"name": "c", "volumeMounts": mounts}]
            }
        }))
        .unwrap()
    }

    fn claim(phase: &str, volume_name: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "claim-uid"},
            "spec": {"volumeName": volume_name},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn pv(name: &str, claim_uid: Option<&str>, extra: serde_json::Value) -> PersistentVolume {
        let mut spec = serde_json::json!({
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
        });
        if let Some(uid) = claim_uid {
            spec["claimRef"] = serde_json::json!({"namespace": "ns", "name": "c", "uid": uid});
        }
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))
            .unwrap()
    }

    fn lookup(c: PersistentVolumeClaim, v: Option<PersistentVolume>) -> ClaimLookup {
        ClaimLookup {
            claim: Ok(c),
            volume: v.map(Ok),
        }
    }

    #[test]
    fn ephemeral_volumes_resolve_through_their_claim_if_the_pod_owns_it() {
        let pod = claim_pod(
            serde_json::json!([
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
            ]),
            serde_json::json!([{"name": "scratch", "mountPath": "/scratch"}]),
        );
        let vols = spec(&pod).volumes.clone().unwrap();
        let scratch = &vols[0];
        // The kubelet reads the generated claim with the named one.
        assert_eq!(claim_names(&pod), ["c", "p-scratch"]);
        assert_eq!(
            VolumeKind::in_pod(&pod, scratch),
            VolumeKind::PersistentVolumeClaim {
                claim: "p-scratch".into(),
                read_only: false
            }
        );
        assert_eq!(VolumeKind::of(scratch), VolumeKind::Unsupported);
        assert_eq!(VolumeKind::in_pod(&pod, &vols[1]), VolumeKind::of(&vols[1]));

        let generated = |owner_uid: Option<&str>| {
            let mut c = claim("Bound", Some("pv1"));
            c.metadata.name = Some("p-scratch".into());
            if let Some(uid) = owner_uid {
                c.metadata.owner_references = Some(vec![
                    serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                        "name": "p", "uid": uid, "controller": true}))
                    .unwrap(),
                ]);
            }
            let volume = pv(
                "pv1",
                Some("claim-uid"),
                serde_json::json!({"local": {"path": "/mnt/disks/d1"}}),
            );
            lookup(c, Some(volume))
        };
        // The pod's own claim mounts as a persistentVolumeClaim volume: read-write, owned
        // by fsGroup on a local volume.
        let r = resolve_claim(&pod, scratch, Some(&generated(Some("u1")))).unwrap();
        assert_eq!(r.path(), "/mnt/disks/d1");
        assert!(!r.read_only && r.ownership);
        // Someone else's claim of that name, or one no pod controls, is refused with
        // upstream's message, without the processing prefix.
        for owner in [Some("someone-else"), None] {
            assert_eq!(
                resolve_claim(&pod, scratch, Some(&generated(owner))).unwrap_err(),
                "PVC ns/p-scratch was not created for pod ns/p (pod is not owner)"
            );
        }
        // Before that, the claim must be there and bound, as any claim.
        assert_eq!(
            resolve_claim(&pod, scratch, None).unwrap_err(),
            "error processing PVC ns/p-scratch: failed to fetch PVC from API server: not read yet"
        );
        let mut pending = generated(Some("u1"));
        pending.claim = Ok(claim("Pending", None));
        assert_eq!(
            resolve_claim(&pod, scratch, Some(&pending)).unwrap_err(),
            "error processing PVC ns/p-scratch: PVC is not bound"
        );
    }

    #[test]
    fn claims_resolve_to_their_volume_source() {
        let pod = claim_pod(
            serde_json::json!([
                {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
                {"name": "ro", "persistentVolumeClaim": {"claimName": "c", "readOnly": true}},
                {"name": "dev", "persistentVolumeClaim": {"claimName": "other"}},
            ]),
            serde_json::json!([
                {"name": "data", "mountPath": "/data"},
                {"name": "ro", "mountPath": "/ro"},
            ]),
        );
        let vols = spec(&pod).volumes.clone().unwrap();
        let (data, ro) = (&vols[0], &vols[1]);
        assert_eq!(claim_names(&pod), ["c", "other"]);
        assert_eq!(
            VolumeKind::of(ro),
            VolumeKind::PersistentVolumeClaim {
                claim: "c".into(),
                read_only: true
            }
        );
        assert_eq!(VolumeKind::of(data).plugin_dir(), None);

        // The claim, as upstream's populator checks it.
        let err = |l: Option<&ClaimLookup>| resolve_claim(&pod, data, l).unwrap_err();
        assert_eq!(
            err(Some(&ClaimLookup {
                claim: Err("persistentvolumeclaims \"c\" not found".into()),
                volume: None,
            })),
            "error processing PVC ns/c: failed to fetch PVC from API server: persistentvolumeclaims \"c\" not found"
        );
        assert!(err(None).starts_with("error processing PVC ns/c: failed to fetch PVC"));
        assert_eq!(
            err(Some(&lookup(claim("Pending", None), None))),
            "error processing PVC ns/c: PVC is not bound"
        );
        let mut deleting = claim("Bound", Some("pv1"));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(bound_volume_name(&deleting), Err("PVC is being deleted"));
        assert_eq!(
            bound_volume_name(&claim("Bound", None)),
            Err("PVC has empty pvc.Spec.VolumeName")
        );
        assert_eq!(bound_volume_name(&claim("Bound", Some("pv1"))), Ok("pv1"));
        // Bound by volumeName alone (no phase yet) is not enough.
        assert_eq!(
            bound_volume_name(&claim("Pending", Some("pv1"))),
            Err("PVC is not bound")
        );

        // The volume: read, bound back to this claim.
        let bound = claim("Bound", Some("pv1"));
        assert_eq!(
            err(Some(&ClaimLookup {
                claim: Ok(bound.clone()),
                volume: Some(Err("persistentvolumes \"pv1\" not found".into())),
            })),
            "error processing PVC ns/c: failed to fetch PV pv1 from API server: persistentvolumes \"pv1\" not found"
        );
        let host =
            serde_json::json!({"hostPath": {"path": "/srv/data", "type": "DirectoryOrCreate"}});
        assert_eq!(
            err(Some(&lookup(
                bound.clone(),
                Some(pv("pv1", None, host.clone()))
            ))),
            "error processing PVC ns/c: found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        );
        assert_eq!(
            err(Some(&lookup(
                bound.clone(),
                Some(pv("pv1", Some("someone-else"), host.clone()))
            ))),
            "error processing PVC ns/c: found PV object pv1 but its pv.Spec.ClaimRef.UID someone-else does not point to claim.UID claim-uid"
        );
        // A volume of another name than the claim's is not the one asked for.
        assert!(
            err(Some(&lookup(
                bound.clone(),
                Some(pv("pv2", Some("claim-uid"), host.clone()))
            )))
            .contains("failed to fetch PV pv1")
        );

        // hostPath: checked like a hostPath volume; readOnly from the pod's claim source;
        // no fsGroup ownership.
        let l = lookup(bound.clone(), Some(pv("pv1", Some("claim-uid"), host)));
        let hp = resolve_claim(&pod, data, Some(&l)).unwrap();
        assert_eq!(
            hp,
            ResolvedClaim {
                volume: "pv1".into(),
                source: ClaimSource::HostPath {
                    path: "/srv/data".into(),
                    type_: "DirectoryOrCreate".into()
                },
                read_only: false,
                mount_options: vec![],
                ownership: false,
            }
        );
        assert_eq!(hp.path(), "/srv/data");
        assert!(resolve_claim(&pod, ro, Some(&l)).unwrap().read_only);
        // Access modes do not make a mount read-only (upstream: only the claim source).
        let rox = pv(
            "pv1",
            Some("claim-uid"),
            serde_json::json!({"hostPath": {"path": "/srv"}, "accessModes": ["ReadOnlyMany"]}),
        );
        assert!(
            !resolve_claim(&pod, data, Some(&lookup(bound.clone(), Some(rox))))
                .unwrap()
                .read_only
        );

        // local: fsGroup ownership when read-write; `ro` in mountOptions makes it read-only.
        let local = |extra: serde_json::Value| {
            let mut spec = serde_json::json!({"local": {"path": "/mnt/disks/d1"}});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            lookup(bound.clone(), Some(pv("pv1", Some("claim-uid"), spec)))
        };
        let rw = resolve_claim(&pod, data, Some(&local(serde_json::json!({})))).unwrap();
        assert_eq!(
            rw.source,
            ClaimSource::Local {
                path: "/mnt/disks/d1".into()
            }
        );
        assert!(!rw.read_only && rw.ownership);
        let by_pod = resolve_claim(&pod, ro, Some(&local(serde_json::json!({})))).unwrap();
        assert!(by_pod.read_only && !by_pod.ownership);
        let by_options = resolve_claim(
            &pod,
            data,
            Some(&local(
                serde_json::json!({"mountOptions": ["ro", "noatime"]}),
            )),
        )
        .unwrap();
        assert!(by_options.read_only && !by_options.ownership);
        assert_eq!(by_options.mount_options, ["ro", "noatime"]);

        // Volume modes and sources this kubelet does not mount.
        assert_eq!(
            resolve_claim(
                &pod,
                data,
                Some(&local(serde_json::json!({"volumeMode": "Block"})))
            )
            .unwrap_err(),
            "volume data has volumeMode Block, but is specified in volumeMounts"
        );
        let nfs = lookup(
            bound.clone(),
            Some(pv(
                "pv1",
                Some("claim-uid"),
                serde_json::json!({"nfs": {"server": "10.0.0.1", "path": "/export"}}),
            )),
        );
        let e = resolve_claim(&pod, data, Some(&nfs)).unwrap_err();
        assert!(
            e.starts_with("failed to get Plugin from volumeSpec for volume \"pv1\"")
                && e.contains("volume type \"nfs\" is not supported by this kubelet"),
            "{e}"
        );
        let csi = lookup(
            bound,
            Some(pv(
                "pv1",
                Some("claim-uid"),
                serde_json::json!({"csi": {"driver": "d", "volumeHandle": "h"}}),
            )),
        );
        assert!(
            resolve_claim(&pod, data, Some(&csi))
                .unwrap_err()
                .contains("volume type \"csi\" is not supported")
        );
    }

    #[test]
    fn claim_actions_and_messages() {
        use HostFileKind::*;
        let claim = |source: ClaimSource, mount_options: &[&str]| ResolvedClaim {
            volume: "pv1".into(),
            source,
            read_only: false,
            mount_options: mount_options.iter().map(|o| o.to_string()).collect(),
            ownership: false,
        };
        let host = |t: &str| ClaimSource::HostPath {
            path: "/srv/x".into(),
            type_: t.into(),
        };
        let local = |p: &str| ClaimSource::Local { path: p.into() };
        let msg = |c: &ResolvedClaim, f| claim_action(c, f).unwrap_err().event_message();
        assert_eq!(
            claim_action(&claim(host("DirectoryOrCreate"), &[]), Missing),
            Ok(HostPathAction::CreateDirectory)
        );
        assert_eq!(
            claim_action(&claim(host(""), &[]), Missing),
            Ok(HostPathAction::Nothing)
        );
        assert_eq!(
            msg(&claim(host("Directory"), &[]), File),
            "MountVolume.SetUp failed for volume \"pv1\" : hostPath type check failed: /srv/x is not a directory"
        );
        assert_eq!(
            msg(&claim(host(""), &["ro"]), Directory),
            "MountVolume.MountOptionSupport check failed for volume \"pv1\" : Mount options are not supported for this volume type"
        );
        assert_eq!(
            claim_action(&claim(local("/mnt/d"), &["ro"]), Directory),
            Ok(HostPathAction::Nothing)
        );
        assert_eq!(
            msg(&claim(local("/mnt/d"), &[]), Missing),
            "MountVolume.NewMounter initialization failed for volume \"pv1\" : path \"/mnt/d\" does not exist"
        );
        assert!(
            msg(&claim(local("/mnt/d"), &[]), File)
                .ends_with("only directory and block device are supported")
        );
        assert!(msg(&claim(local("/dev/sdb"), &[]), BlockDevice).contains("block device"));
        assert!(msg(&claim(local("/mnt/../etc"), &[]), Directory).contains("invalid path"));
        assert!(msg(&claim(local(""), &[]), Directory).contains("local path is not set"));

        let e = VolumeError::NotProcessed {
            volumes: vec!["a".into(), "b".into()],
            errors: vec![
                "error processing PVC ns/c: PVC is not bound".into(),
                "x".into(),
            ],
        };
        assert_eq!(
            e.event_message(),
            "Unable to attach or mount volumes: unmounted volumes=[a b], unattached volumes=[], failed to process volumes=[a b]: error processing PVC ns/c: PVC is not bound; x"
        );
        assert_eq!(
            VolumeError::ConfigMapNotFound("c".into()).event_message(),
            "MountVolume.SetUp failed: configmap \"c\" not found"
        );
    }

    #[test]
    fn claimed_volumes_mount_read_only_as_resolved() {
        let vols: BTreeMap<String, (PathBuf, VolumeKind)> = [
            (
                "rw".to_owned(),
                (
                    PathBuf::from("/srv/rw"),
                    VolumeKind::PersistentVolumeClaim {
                        claim: "c".into(),
                        read_only: false,
                    },
                ),
            ),
            (
                "ro".to_owned(),
                (
                    PathBuf::from("/srv/ro"),
                    VolumeKind::PersistentVolumeClaim {
                        claim: "c".into(),
                        read_only: true,
                    },
                ),
            ),
        ]
        .into();
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [
                {"name": "rw", "mountPath": "/a"},
                {"name": "rw", "mountPath": "/b", "readOnly": true},
                {"name": "ro", "mountPath": "/c"},
                {"name": "rw", "mountPath": "/d", "subPath": "sub"},
            ]
        }))
        .unwrap();
        let (mounts, dirs) = container_mounts(&c, &vols, &[]).unwrap();
        let view: Vec<_> = mounts
            .iter()
            .map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.readonly))
            .collect();
        assert_eq!(
            view,
            [
                ("/a", "/srv/rw", false),
                ("/b", "/srv/rw", true),
                ("/c", "/srv/ro", true),
                ("/d", "/srv/rw/sub", false),
            ]
        );
        assert_eq!(dirs, [PathBuf::from("/srv/rw/sub")]);
    }
}
