//! `--admission-control-config-file`: upstream's `AdmissionConfiguration`
//! (`apiserver.config.k8s.io/v1`, also `apiserver.k8s.io/v1alpha1`), a list of
//! plugins each with its configuration inline (`configuration`) or in a file (`path`,
//! relative to the AdmissionConfiguration's own directory). Plugins read theirs when
//! the chain is built; a plugin that is not enabled never reads it.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

const API_VERSIONS: [&str; 2] = ["apiserver.config.k8s.io/v1", "apiserver.k8s.io/v1alpha1"];

/// Each listed plugin's configuration object, by plugin name.
pub(crate) fn read(path: &Path) -> Result<BTreeMap<String, Value>, String> {
    let doc = read_document(path)?;
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    if doc["kind"] != "AdmissionConfiguration" || !API_VERSIONS.contains(&api_version) {
        return Err(format!(
            "{}: expected kind AdmissionConfiguration in {}, got {:?}, {:?}",
            path.display(),
            API_VERSIONS.join(" or "),
            api_version,
            doc["kind"].as_str().unwrap_or_default()
        ));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut configurations = BTreeMap::new();
    let plugins = match &doc["plugins"] {
        Value::Null => return Ok(configurations),
        Value::Array(plugins) => plugins,
        other => return Err(format!("{}: plugins: not a list: {other}", path.display())),
    };
    for (i, plugin) in plugins.iter().enumerate() {
        let field = format!("{}: plugins[{i}]", path.display());
        let name = plugin["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{field}.name: Required value"))?;
        // As upstream: an inline configuration wins over a path.
        let configuration = match (&plugin["configuration"], plugin["path"].as_str()) {
            (Value::Null, None | Some("")) => continue,
            (Value::Null, Some(file)) => {
                read_document(&dir.join(file)).map_err(|e| format!("{field} ({name}): {e}"))?
            }
            (inline, _) => inline.clone(),
        };
        if configurations
            .insert(name.to_string(), configuration)
            .is_some()
        {
            return Err(format!("{field}.name: Duplicate value: {name:?}"));
        }
    }
    Ok(configurations)
}

/// A YAML or JSON file as one JSON value.
fn read_document(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_file_configurations_are_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("pss.yaml"),
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\n",
        )
        .unwrap();
        let file = dir.path().join("admission.yaml");
        std::fs::write(
            &file,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n\
             - name: PodSecurity\n  path: pss.yaml\n\
             - name: PodNodeSelector\n  configuration:\n    podNodeSelectorPluginConfig:\n      clusterDefaultNodeSelector: a=b\n\
             - name: EventRateLimit\n",
        )
        .unwrap();
        let c = read(&file).unwrap();
        assert_eq!(c["PodSecurity"]["kind"], "PodSecurityConfiguration");
        assert_eq!(
            c["PodNodeSelector"]["podNodeSelectorPluginConfig"]["clusterDefaultNodeSelector"],
            "a=b"
        );
        assert!(!c.contains_key("EventRateLimit"));
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admission.yaml");
        std::fs::write(&file, "apiVersion: v1\nkind: ConfigMap\n").unwrap();
        assert!(
            read(&file)
                .unwrap_err()
                .contains("expected kind AdmissionConfiguration")
        );
        std::fs::write(
            &file,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: missing.yaml\n",
        )
        .unwrap();
        let err = read(&file).unwrap_err();
        assert!(
            err.contains("plugins[0] (PodSecurity): cannot read"),
            "{err}"
        );
        assert!(
            read(&dir.path().join("none.yaml"))
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
