//! Static pods (upstream `pkg/kubelet/config/file.go`, `common.go` and
//! `mirror_client.go`): pod manifests in `--pod-manifest-path` run by the kubelet without
//! the API, and the mirror pods that show them in the API.
//!
//! The pure part (decoding, upstream's defaulting and naming, the mirror pod, the
//! mirror reconciliation plan) is table-tested; [`StaticPodSource`] is the thin IO loop
//! that reads the directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ferrokube_api::defaults::ApplyDefaults;
use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// `kubetypes.ConfigHashAnnotationKey`: the static pod's UID, a hash of its manifest.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// `kubetypes.ConfigSourceAnnotationKey`: where the pod came from (`file`, `api`).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// `kubetypes.ConfigMirrorAnnotationKey`: on a mirror pod, the hash of its static pod.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// `kubetypes.FileSource`.
pub const FILE_SOURCE: &str = "file";
/// Upstream's `fileCheckFrequency`: the directory is read again this often even when
/// nothing seems to have changed.
pub const DEFAULT_FILE_CHECK_FREQUENCY: Duration = Duration::from_secs(20);
/// How often the directory's listing (names, sizes, mtimes) is compared with the last
/// one, standing in for upstream's inotify watch.
const CHANGE_POLL: Duration = Duration::from_secs(1);

/// The static pods of one directory scan by UID (the config hash).
pub type StaticPods = BTreeMap<String, Arc<Pod>>;

/// Whether the pod is a mirror pod (it carries the mirror annotation).
pub fn is_mirror_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
}

/// Whether the pod came from a file rather than the API.
pub fn is_static_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api")
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Decodes one manifest file: a v1 Pod or a v1 PodList, in YAML or JSON (upstream's
/// `tryDecodeSinglePod`, then `tryDecodePodList`).
pub fn decode_manifest(data: &[u8]) -> Result<Vec<Pod>, String> {
    let value: serde_json::Value =
        serde_yaml_ng::from_slice(data).map_err(|e| format!("not YAML or JSON: {e}"))?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    if api_version != "v1" {
        return Err(format!(
            "apiVersion {api_version:?}: a static pod manifest must be a v1 Pod or PodList"
        ));
    }
    match kind {
        "Pod" => serde_json::from_value(value)
            .map(|p| vec![p])
            .map_err(|e| format!("decoding the Pod: {e}")),
        "PodList" => {
            let items = value
                .get("items")
                .cloned()
                .unwrap_or(serde_json::Value::Array(vec![]));
            serde_json::from_value(items).map_err(|e| format!("decoding the PodList: {e}"))
        }
        other => Err(format!(
            "kind {other:?}: a static pod manifest must be a Pod or PodList"
        )),
    }
}

/// FNV-1a 128 over `bytes`, as 32 hex digits (the length of upstream's md5 UIDs).
fn hash_hex(parts: &[&[u8]]) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for part in parts {
        for &b in *part {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
    }
    format!("{h:032x}")
}

/// Upstream's `applyDefaults` for a file source, after the API's own defaulting: the UID
/// is a hash of the pod, the node and the file (unless the manifest sets one), the name
/// gets the `-<node>` suffix, the namespace defaults to `default`, the pod is bound to
/// this node, annotated with its hash and source, and tolerates every NoExecute taint.
pub fn apply_static_defaults(mut pod: Pod, file: &Path, node_name: &str) -> Result<Pod, String> {
    let base = pod.metadata.name.clone().unwrap_or_default();
    if base.is_empty() {
        return Err("metadata.name is required".into());
    }
    pod.apply_defaults();
    pod.status = None;
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        let json = serde_json::to_vec(&pod).unwrap_or_default();
        let host = format!("host:{node_name}");
        let source = format!("file:{}", file.display());
        pod.metadata.uid = Some(hash_hex(&[&json, host.as_bytes(), source.as_bytes()]));
    }
    let node = node_name.to_lowercase();
    pod.metadata.name = Some(format!("{base}-{node}"));
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_owned());
    let tolerate_no_execute = Toleration {
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if !tolerations.contains(&tolerate_no_execute) {
        tolerations.push(tolerate_no_execute);
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), FILE_SOURCE.into());
    Ok(pod)
}

/// The manifest files of `path`: the file itself, or the directory's regular files in
/// name order, skipping hidden ones (upstream ignores names starting with a dot).
fn manifest_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path)?;
    if meta.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = vec![];
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file()) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Reads every manifest under `path`. Files that do not decode are reported and left
/// out, as upstream logs and skips them; a missing directory means no static pods.
pub fn read_manifests(path: &Path, node_name: &str) -> (StaticPods, Vec<String>) {
    let mut pods = StaticPods::new();
    let mut errors = vec![];
    let files = match manifest_files(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => {
            errors.push(format!("{}: {e}", path.display()));
            vec![]
        }
    };
    for file in files {
        let decoded = std::fs::read(&file)
            .map_err(|e| e.to_string())
            .and_then(|data| decode_manifest(&data));
        match decoded {
            Ok(list) => {
                for p in list {
                    match apply_static_defaults(p, &file, node_name) {
                        Ok(p) => {
                            let uid = p.metadata.uid.clone().unwrap_or_default();
                            pods.insert(uid, Arc::new(p));
                        }
                        Err(e) => errors.push(format!("{}: {e}", file.display())),
                    }
                }
            }
            Err(e) => errors.push(format!("{}: {e}", file.display())),
        }
    }
    (pods, errors)
}

/// What the directory looks like without reading the files: names, sizes and mtimes.
fn fingerprint(path: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    manifest_files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|f| {
            let m = std::fs::metadata(&f).ok();
            let len = m.as_ref().map_or(0, |m| m.len());
            let mtime = m.and_then(|m| m.modified().ok());
            (f, len, mtime)
        })
        .collect()
}

/// The mirror pod of a static pod (upstream `CreateMirrorPod`): the same name,
/// namespace, labels, annotations and spec, the mirror annotation carrying the static
/// pod's hash, and the Node as its controlling owner. The UID is the apiserver's.
pub fn mirror_pod(static_pod: &Pod, node_uid: Option<&str>) -> Pod {
    let mut mirror = static_pod.clone();
    let hash = annotation(static_pod, CONFIG_HASH_ANNOTATION)
        .map(str::to_owned)
        .or_else(|| static_pod.metadata.uid.clone())
        .unwrap_or_default();
    mirror.metadata.uid = None;
    mirror.metadata.resource_version = None;
    mirror.status = None;
    mirror
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
    if let (Some(node_uid), Some(node)) = (
        node_uid,
        &static_pod.spec.as_ref().and_then(|s| s.node_name.clone()),
    ) {
        mirror.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: node.clone(),
            uid: node_uid.to_owned(),
            controller: Some(true),
            ..Default::default()
        }]);
    }
    mirror
}

/// Whether `mirror` is the current mirror of `static_pod` (upstream `IsMirrorPodOf`):
/// same name and namespace, and its mirror annotation equals the static pod's hash.
pub fn is_mirror_of(mirror: &Pod, static_pod: &Pod) -> bool {
    mirror.metadata.name == static_pod.metadata.name
        && mirror.metadata.namespace == static_pod.metadata.namespace
        && annotation(mirror, CONFIG_MIRROR_ANNOTATION).is_some()
        && annotation(mirror, CONFIG_MIRROR_ANNOTATION)
            == annotation(static_pod, CONFIG_HASH_ANNOTATION)
}

/// One step of keeping the API's mirror pods in line with the static pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorAction {
    /// Create the mirror of the static pod with this UID.
    Create { static_uid: String },
    /// Delete this mirror pod (by namespace, name and its own UID as precondition):
    /// outdated, being deleted, or its static pod is gone.
    Delete {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// The mirror pods to create and delete (upstream's `syncPod` mirror handling plus
/// `deleteOrphanedMirrorPods`). `mirrors` are the API's mirror pods bound to this node.
/// A mirror that is outdated or being deleted is deleted now and recreated on a later
/// round, once the API no longer has it.
pub fn plan_mirrors(statics: &StaticPods, mirrors: &[Arc<Pod>]) -> Vec<MirrorAction> {
    let mut actions = vec![];
    let key = |p: &Pod| {
        (
            p.metadata.namespace.clone().unwrap_or_default(),
            p.metadata.name.clone().unwrap_or_default(),
        )
    };
    let by_key: BTreeMap<_, _> = mirrors.iter().map(|m| (key(m), m)).collect();
    let statics_by_key: BTreeMap<_, _> = statics.values().map(|s| (key(s), s)).collect();
    for (uid, s) in statics {
        match by_key.get(&key(s)) {
            None => actions.push(MirrorAction::Create {
                static_uid: uid.clone(),
            }),
            Some(m) if m.metadata.deletion_timestamp.is_some() || !is_mirror_of(m, s) => {
                actions.push(delete_action(m))
            }
            Some(_) => {}
        }
    }
    for m in mirrors {
        if !statics_by_key.contains_key(&key(m)) {
            actions.push(delete_action(m));
        }
    }
    actions
}

fn delete_action(m: &Pod) -> MirrorAction {
    MirrorAction::Delete {
        namespace: m.metadata.namespace.clone().unwrap_or_default(),
        name: m.metadata.name.clone().unwrap_or_default(),
        uid: m.metadata.uid.clone().unwrap_or_default(),
    }
}

/// Reads `--pod-manifest-path` every `check_frequency` and whenever its listing changes,
/// publishing the static pods when they differ from the last scan.
pub struct StaticPodSource {
    pub path: PathBuf,
    pub node_name: String,
    pub check_frequency: Duration,
}

impl StaticPodSource {
    pub async fn run(self, tx: watch::Sender<StaticPods>, cancel: CancellationToken) {
        let mut last_fingerprint = None;
        let mut last_full = None::<tokio::time::Instant>;
        let mut reported: Vec<String> = vec![];
        loop {
            let fp = fingerprint(&self.path);
            let due = last_full.is_none_or(|t| t.elapsed() >= self.check_frequency);
            if due || last_fingerprint.as_ref() != Some(&fp) {
                let (pods, errors) = read_manifests(&self.path, &self.node_name);
                if errors != reported {
                    for e in &errors {
                        tracing::warn!(error = %e, "static pod manifest skipped");
                    }
                    reported = errors;
                }
                tx.send_if_modified(|current| {
                    let changed = current.keys().ne(pods.keys());
                    if changed {
                        *current = pods;
                    }
                    changed
                });
                last_fingerprint = Some(fp);
                last_full = Some(tokio::time::Instant::now());
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(CHANGE_POLL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\n\
         spec:\n  containers:\n  - name: c\n    image: busybox\n";

    fn static_pod(manifest: &str, file: &str) -> Pod {
        let p = decode_manifest(manifest.as_bytes()).unwrap().remove(0);
        apply_static_defaults(p, Path::new(file), "Node-A").unwrap()
    }

    #[test]
    fn decodes_pods_lists_and_json_and_rejects_the_rest() {
        assert_eq!(decode_manifest(MANIFEST.as_bytes()).unwrap().len(), 1);
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
        assert_eq!(
            decode_manifest(json.as_bytes()).unwrap()[0]
                .metadata
                .name
                .as_deref(),
            Some("j")
        );
        let list = "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: i}]}\n\
                    - metadata: {name: b}\n  spec: {containers: [{name: c, image: i}]}\n";
        assert_eq!(decode_manifest(list.as_bytes()).unwrap().len(), 2);
        for bad in [
            "apiVersion: apps/v1\nkind: Deployment\n",
            "apiVersion: v1\nkind: Service\n",
            "{not yaml: [",
            "just text",
        ] {
            assert!(decode_manifest(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_name_namespace_node_annotations_and_tolerations() {
        let p = static_pod(MANIFEST, "/etc/kubernetes/manifests/web.yaml");
        assert_eq!(p.metadata.name.as_deref(), Some("web-node-a"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let uid = p.metadata.uid.clone().unwrap();
        assert_eq!(uid.len(), 32);
        let ann = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], uid);
        assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "file");
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("Node-A"));
        assert_eq!(
            spec.restart_policy.as_deref(),
            Some("Always"),
            "API defaults applied"
        );
        let tol = spec.tolerations.as_ref().unwrap();
        assert_eq!(tol.len(), 1);
        assert_eq!(tol[0].effect.as_deref(), Some("NoExecute"));
        assert!(is_static_pod(&p) && !is_mirror_pod(&p));
        // The same manifest gives the same UID; another file, node or content does not.
        assert_eq!(
            static_pod(MANIFEST, "/etc/kubernetes/manifests/web.yaml")
                .metadata
                .uid,
            Some(uid.clone())
        );
        assert_ne!(
            static_pod(MANIFEST, "/other/web.yaml").metadata.uid,
            Some(uid.clone())
        );
        let changed = MANIFEST.replace("busybox", "nginx");
        assert_ne!(
            static_pod(&changed, "/etc/kubernetes/manifests/web.yaml")
                .metadata
                .uid,
            Some(uid)
        );
        let unnamed =
            decode_manifest(b"apiVersion: v1\nkind: Pod\nspec: {containers: []}\n").unwrap();
        assert!(apply_static_defaults(unnamed[0].clone(), Path::new("/x"), "n").is_err());
    }

    #[test]
    fn mirror_pods_carry_the_hash_and_the_node_owner() {
        let s = static_pod(MANIFEST, "/m/web.yaml");
        let m = mirror_pod(&s, Some("node-uid"));
        assert!(m.metadata.uid.is_none());
        assert!(is_mirror_pod(&m));
        assert!(is_mirror_of(&m, &s));
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "Node-A", "node-uid")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(m.metadata.labels.as_ref().unwrap()["app"], "web");
        let newer = static_pod(&MANIFEST.replace("busybox", "nginx"), "/m/web.yaml");
        assert!(!is_mirror_of(&m, &newer));
    }

    #[test]
    fn plans_mirror_creation_replacement_and_orphan_deletion() {
        let s = Arc::new(static_pod(MANIFEST, "/m/web.yaml"));
        let uid = s.metadata.uid.clone().unwrap();
        let statics: StaticPods = [(uid.clone(), s.clone())].into();
        assert_eq!(
            plan_mirrors(&statics, &[]),
            [MirrorAction::Create {
                static_uid: uid.clone()
            }]
        );

        let mut current = mirror_pod(&s, None);
        current.metadata.uid = Some("m1".into());
        assert_eq!(plan_mirrors(&statics, &[Arc::new(current.clone())]), []);

        let mut deleting = current.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let delete_m1 = MirrorAction::Delete {
            namespace: "default".into(),
            name: "web-node-a".into(),
            uid: "m1".into(),
        };
        assert_eq!(
            plan_mirrors(&statics, &[Arc::new(deleting)]),
            std::slice::from_ref(&delete_m1)
        );

        let mut outdated = current.clone();
        outdated
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_MIRROR_ANNOTATION.into(), "old".into());
        assert_eq!(
            plan_mirrors(&statics, &[Arc::new(outdated)]),
            std::slice::from_ref(&delete_m1)
        );

        assert_eq!(
            plan_mirrors(&StaticPods::new(), &[Arc::new(current)]),
            [delete_m1]
        );
    }

    #[test]
    fn reads_a_directory_skipping_hidden_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("web.yaml"), MANIFEST).unwrap();
        std::fs::write(
            dir.path().join(".hidden.yaml"),
            MANIFEST.replace("web", "hidden"),
        )
        .unwrap();
        std::fs::write(dir.path().join("bad.yaml"), "kind: Deployment").unwrap();
        let (pods, errors) = read_manifests(dir.path(), "n1");
        let names: Vec<_> = pods
            .values()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["web-n1"]);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("bad.yaml"), "{errors:?}");
        let (none, errors) = read_manifests(&dir.path().join("missing"), "n1");
        assert!(none.is_empty() && errors.is_empty());
        let (single, _) = read_manifests(&dir.path().join("web.yaml"), "n1");
        assert_eq!(single.len(), 1);
    }
}
