//! The audit log (upstream `k8s.io/apiserver/pkg/audit`, `plugin/pkg/audit/log`).
//!
//! Layer: HTTP (part of the apiserver's request pipeline). It sees requests and
//! responses, never storage or the registry.
//!
//! This file holds the per-request annotations sink that admission plugins fill
//! (upstream `admission.Attributes.AddAnnotation`).

use std::sync::Arc;

/// A request's audit annotations (upstream `audit.AddAuditAnnotation` and
/// `admission.Attributes.AddAnnotation`), shared by every stage that adds some: the
/// authorizer's decision and admission plugins. As upstream, a key keeps its first
/// value: a later, different value for the same key is ignored.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuditAnnotations(Arc<parking_lot::Mutex<Vec<(String, String)>>>);

impl AuditAnnotations {
    pub(crate) fn add(&self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let mut annotations = self.0.lock();
        if annotations.iter().all(|(k, _)| *k != key) {
            annotations.push((key, value.into()));
        }
    }

    /// The annotations added so far, in the order they were added.
    #[allow(dead_code)] // read by the audit event builder (next commit)
    pub(crate) fn snapshot(&self) -> Vec<(String, String)> {
        self.0.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_keeps_its_first_value() {
        let annotations = AuditAnnotations::default();
        let shared = annotations.clone();
        annotations.add("a", "1");
        shared.add("a", "2");
        shared.add("b", "3");
        assert_eq!(
            annotations.snapshot(),
            vec![("a".into(), "1".into()), ("b".into(), "3".into())]
        );
    }
}
