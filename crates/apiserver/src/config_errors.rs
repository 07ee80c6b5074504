//! Upstream's field errors (`field.ErrorList`), as the apiserver's configuration
//! files (`--authorization-config`, `--authentication-config`) report them: every
//! problem named by its field, all of them at once.

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
