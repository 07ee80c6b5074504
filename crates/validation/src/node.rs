//! node.k8s.io/v1: RuntimeClass (`pkg/apis/node/validation`).

use ferrokube_apimachinery::errors::FieldError;
use ferrokube_apimachinery::validation::validate_labels;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::node::v1 as node;

use crate::Validate;
use crate::core::{validate_resources, validate_tolerations};
use crate::util::*;

impl Validate for node::RuntimeClass {
    /// Upstream `ValidateRuntimeClass`: the handler is a DNS-1123 label; the overhead
    /// is checked as container limits are (upstream reuses
    /// `ValidateResourceRequirements`, hence its `overhead.limits[...]` paths); the
    /// scheduling node selector as labels and its tolerations as a pod's.
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        dns_label(&self.handler, &p("handler"), &mut errs);
        if let Some(overhead) = &self.overhead {
            let as_limits = core::ResourceRequirements {
                limits: overhead.pod_fixed.clone(),
                ..Default::default()
            };
            validate_resources(&as_limits, &p("overhead"), &mut errs);
        }
        if let Some(scheduling) = &self.scheduling {
            let sp = p("scheduling");
            if let Some(selector) = &scheduling.node_selector {
                errs.extend(validate_labels(selector, &sp.child("nodeSelector")));
            }
            if let Some(tolerations) = &scheduling.tolerations {
                validate_tolerations(tolerations, &sp.child("tolerations"), &mut errs);
            }
        }
        errs
    }

    /// Upstream's strategy validates the new object, then `ValidateRuntimeClassUpdate`:
    /// the handler is immutable (overhead and scheduling may change; pods admitted
    /// before keep what they were given).
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable(&self.handler, &old.handler, &p("handler"), &mut errs);
        errs
    }
}
