//! Pure validation of the built-in kinds the apiserver serves, after upstream's
//! `pkg/apis/*/validation`: `validate_create(obj)` and `validate_update(new, old)`
//! return *every* [`FieldError`] with upstream's field paths and message texts
//! (`spec.selector: Invalid value: ...: field is immutable`), never stopping at the
//! first and never panicking on user input.
//!
//! Scope: the type-specific rules (spec, data, immutability on update). `ObjectMeta`
//! (name, namespace, labels, annotations, ...) is validated by the registry with
//! `ferrokube_apimachinery::validation::validate_object_meta[_update]`, which knows the
//! resource's scope and name rule. Objects are expected to be defaulted already
//! (`ferrokube_api::defaults`), as upstream validates after defaulting.
//!
//! Layer: pure, below `registry`, next to `api` and `apimachinery`. No IO: no tokio,
//! no files, no clock. Must not depend on storage, registry, admission, apiserver or
//! client crates.

pub use ferrokube_apimachinery::errors::{FieldError, FieldErrorKind, FieldPath};

mod admission_policy;
mod admissionregistration;
mod apiregistration;
mod apps;
mod batch;
mod core;
pub mod cron;
mod flowcontrol;
mod networking_ip;
mod node;
mod other;
mod storage_csi;
mod util;

pub use batch::parse_index_intervals;
pub use core::{forbid_privileged, validate_pod_resize};
pub use cron::parse_cron_schedule;
pub use networking_ip::validate_ip_address_name;

/// Upstream `ValidateTolerations` on a list outside a pod (e.g. an admission plugin's
/// configuration), its errors under `path`.
pub fn validate_tolerations(
    tolerations: &[k8s_openapi::api::core::v1::Toleration],
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    core::validate_tolerations(tolerations, path, &mut errs);
    errs
}

/// Validation of one API type.
pub trait Validate {
    /// The type-specific rules for a new object.
    fn validate_create(&self) -> Vec<FieldError>;
    /// The rules for an update from `old`: the create rules on the new object where
    /// upstream re-validates, plus the immutable-field checks.
    fn validate_update(&self, old: &Self) -> Vec<FieldError>;
}

/// Implements [`Validate`] for types without type-specific rules.
macro_rules! no_rules {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::Validate for $t {
            fn validate_create(&self) -> Vec<$crate::FieldError> {
                Vec::new()
            }
            fn validate_update(&self, _old: &Self) -> Vec<$crate::FieldError> {
                Vec::new()
            }
        }
    )*};
}
pub(crate) use no_rules;

#[cfg(test)]
mod tests;
