//! What the apiserver's `apiserver.config.k8s.io` configuration files
//! (`--authorization-config`, `--authentication-config`) share: strict decoding of
//! the kind, and upstream's field errors (`field.ErrorList`), every problem named by
//! its field, all of them at once.

use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The `apiVersion`s a file may have.
const API_VERSIONS: [&str; 3] = [
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1alpha1",
];

/// A file as read, and what it configures.
pub(crate) struct Loaded<T> {
    pub config: T,
    /// The text it was decoded from, for following the file
    /// ([`crate::config_reload`]).
    pub text: String,
}

/// Reads the file `flag` names and decodes it with `parse`; the error names the flag,
/// the file and what is wrong.
pub(crate) fn load<T>(
    flag: &str,
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Loaded<T>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{flag}: reading {}: {e}", path.display()))?;
    let config = parse(&text).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    Ok(Loaded { config, text })
}

/// A file's `apiVersion` and `kind`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// Decodes `text` (YAML or JSON) as a `kind` of `apiserver.config.k8s.io`; unknown
/// fields are errors, as upstream's strict decoding.
pub(crate) fn decode<T: DeserializeOwned>(text: &str, kind: &str) -> Result<T, String> {
    let meta: TypeMeta = serde_yaml_ng::from_str(text).map_err(|e| format!("decoding: {e}"))?;
    if meta.kind != kind || !API_VERSIONS.contains(&meta.api_version.as_str()) {
        return Err(format!(
            "no kind {:?} is registered for version {:?}: want kind {kind} in {}",
            meta.kind,
            meta.api_version,
            API_VERSIONS.join(", ")
        ));
    }
    serde_yaml_ng::from_str(text).map_err(|e| format!("strict decoding error: {e}"))
}

/// Upstream's field errors, collected.
#[derive(Default)]
pub(crate) struct FieldErrors(Vec<String>);

impl FieldErrors {
    pub(crate) fn required(&mut self, field: &str, detail: &str) {
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        self.0.push(format!("{field}: Required value{detail}"));
    }

    pub(crate) fn invalid(&mut self, field: &str, value: &str, detail: &str) {
        self.0
            .push(format!("{field}: Invalid value: {value:?}: {detail}"));
    }

    pub(crate) fn unsupported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.0.push(format!(
            "{field}: Unsupported value: {value:?}: supported values: {}",
            supported.join(", ")
        ));
    }

    pub(crate) fn duplicate(&mut self, field: &str, value: &str) {
        self.0.push(format!("{field}: Duplicate value: {value:?}"));
    }
}

impl FieldErrors {
    pub(crate) fn push(&mut self, error: String) {
        self.0.push(error);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Go's aggregate: `[a, b]`, or `Ok` when there is nothing.
    pub(crate) fn into_result(self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("[{}]", self.0.join(", ")))
        }
    }
}
