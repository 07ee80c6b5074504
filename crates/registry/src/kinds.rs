//! The strategy hook of every built-in resource: its k8s-openapi type and [`Hooks`].
//! Adding a resource: one entry in `ferrokube_api::resources::RESOURCES` and one line
//! here.

use std::sync::Arc;

use ferrokube_api::resources::ResourceInfo;
use k8s_openapi::api;
use serde_json::{Value, json};

use crate::strategy::{Hooks, Strategy, TypedStrategy};

const GENERATION: Hooks = Hooks {
    tracks_generation: true,
    ..Hooks::PLAIN
};

const POD: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({"phase": "Pending"})),
    fields: &[
        ("spec.nodeName", "spec.nodeName"),
        ("spec.restartPolicy", "spec.restartPolicy"),
        ("spec.schedulerName", "spec.schedulerName"),
        ("spec.serviceAccountName", "spec.serviceAccountName"),
        ("spec.hostNetwork", "spec.hostNetwork"),
        ("status.phase", "status.phase"),
        ("status.podIP", "status.podIP"),
        ("status.nominatedNodeName", "status.nominatedNodeName"),
    ],
    prepare_create: None,
};

const NODE: Hooks = Hooks {
    fields: &[("spec.unschedulable", "spec.unschedulable")],
    ..Hooks::PLAIN
};

const NAMESPACE: Hooks = Hooks {
    initial_status: Some(|| json!({"phase": "Active"})),
    fields: &[("status.phase", "status.phase")],
    prepare_create: Some(|obj: &mut Value| {
        // Upstream's namespace strategy: the `kubernetes` finalizer, always.
        let spec = obj
            .as_object_mut()
            .map(|o| o.entry("spec").or_insert_with(|| json!({})));
        if let Some(spec) = spec.and_then(Value::as_object_mut) {
            let fins = spec.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(a) = fins.as_array_mut()
                && !a.iter().any(|f| f == "kubernetes")
            {
                a.push(json!("kubernetes"));
            }
        }
    }),
    ..Hooks::PLAIN
};

const SECRET: Hooks = Hooks {
    fields: &[("type", "type")],
    ..Hooks::PLAIN
};

const EVENT: Hooks = Hooks {
    fields: &[
        ("involvedObject.kind", "involvedObject.kind"),
        ("involvedObject.namespace", "involvedObject.namespace"),
        ("involvedObject.name", "involvedObject.name"),
        ("involvedObject.uid", "involvedObject.uid"),
        ("involvedObject.apiVersion", "involvedObject.apiVersion"),
        (
            "involvedObject.resourceVersion",
            "involvedObject.resourceVersion",
        ),
        ("involvedObject.fieldPath", "involvedObject.fieldPath"),
        ("reason", "reason"),
        ("reportingComponent", "reportingComponent"),
        ("source", "source.component"),
        ("type", "type"),
    ],
    ..Hooks::PLAIN
};

const REPLICAS: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({"replicas": 0})),
    fields: &[("status.replicas", "status.replicas")],
    prepare_create: None,
};

const WORKLOAD: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({})),
    ..Hooks::PLAIN
};

const JOB: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({})),
    fields: &[("status.successful", "status.successful")],
    prepare_create: None,
};

const STATUS_ONLY: Hooks = Hooks {
    initial_status: Some(|| json!({})),
    ..Hooks::PLAIN
};

const SERVICE: Hooks = Hooks {
    initial_status: Some(|| json!({"loadBalancer": {}})),
    fields: &[
        ("spec.clusterIP", "spec.clusterIP"),
        ("spec.type", "spec.type"),
    ],
    prepare_create: None,
    tracks_generation: false,
};

const PVC: Hooks = Hooks {
    initial_status: Some(|| json!({"phase": "Pending"})),
    ..Hooks::PLAIN
};

const PV: Hooks = Hooks {
    initial_status: Some(|| json!({"phase": "Pending"})),
    ..Hooks::PLAIN
};

const CSR: Hooks = Hooks {
    initial_status: Some(|| json!({})),
    fields: &[("spec.signerName", "spec.signerName")],
    ..Hooks::PLAIN
};

/// The strategy for one table entry; `None` for a resource without one (a table
/// entry added without its hook, which the registry's tests catch).
pub fn strategy_for(info: &'static ResourceInfo) -> Option<Arc<dyn Strategy>> {
    use api::{
        apps::v1 as apps, autoscaling::v2 as autoscaling, batch::v1 as batch,
        certificates::v1 as certificates, coordination::v1 as coordination, core::v1 as core,
        discovery::v1 as discovery, events::v1 as events, networking::v1 as networking,
        policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling,
        storage::v1 as storage,
    };
    macro_rules! typed {
        ($t:ty, $hooks:expr) => {
            Arc::new(TypedStrategy::<$t>::new(info, $hooks)) as Arc<dyn Strategy>
        };
    }
    let s = match (info.group, info.kind) {
        ("", "ConfigMap") => typed!(core::ConfigMap, Hooks::PLAIN),
        ("", "Endpoints") => typed!(core::Endpoints, Hooks::PLAIN),
        ("", "Event") => typed!(core::Event, EVENT),
        ("", "LimitRange") => typed!(core::LimitRange, Hooks::PLAIN),
        ("", "Namespace") => typed!(core::Namespace, NAMESPACE),
        ("", "Node") => typed!(core::Node, NODE),
        ("", "PersistentVolumeClaim") => typed!(core::PersistentVolumeClaim, PVC),
        ("", "PersistentVolume") => typed!(core::PersistentVolume, PV),
        ("", "Pod") => typed!(core::Pod, POD),
        ("", "PodTemplate") => typed!(core::PodTemplate, Hooks::PLAIN),
        ("", "ReplicationController") => typed!(core::ReplicationController, REPLICAS),
        ("", "ResourceQuota") => typed!(core::ResourceQuota, STATUS_ONLY),
        ("", "Secret") => typed!(core::Secret, SECRET),
        ("", "ServiceAccount") => typed!(core::ServiceAccount, Hooks::PLAIN),
        ("", "Service") => typed!(core::Service, SERVICE),
        ("apps", "ControllerRevision") => typed!(apps::ControllerRevision, Hooks::PLAIN),
        ("apps", "DaemonSet") => typed!(apps::DaemonSet, WORKLOAD),
        ("apps", "Deployment") => typed!(apps::Deployment, WORKLOAD),
        ("apps", "ReplicaSet") => typed!(apps::ReplicaSet, REPLICAS),
        ("apps", "StatefulSet") => typed!(apps::StatefulSet, WORKLOAD),
        ("autoscaling", "HorizontalPodAutoscaler") => {
            typed!(autoscaling::HorizontalPodAutoscaler, WORKLOAD)
        }
        ("batch", "CronJob") => typed!(batch::CronJob, WORKLOAD),
        ("batch", "Job") => typed!(batch::Job, JOB),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            typed!(certificates::CertificateSigningRequest, CSR)
        }
        ("coordination.k8s.io", "Lease") => typed!(coordination::Lease, Hooks::PLAIN),
        ("discovery.k8s.io", "EndpointSlice") => typed!(discovery::EndpointSlice, Hooks::PLAIN),
        ("events.k8s.io", "Event") => typed!(events::Event, Hooks::PLAIN),
        ("networking.k8s.io", "IngressClass") => typed!(networking::IngressClass, Hooks::PLAIN),
        ("networking.k8s.io", "Ingress") => typed!(networking::Ingress, GENERATION_STATUS),
        ("networking.k8s.io", "NetworkPolicy") => typed!(networking::NetworkPolicy, GENERATION),
        ("policy", "PodDisruptionBudget") => typed!(policy::PodDisruptionBudget, WORKLOAD),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            typed!(rbac::ClusterRoleBinding, Hooks::PLAIN)
        }
        ("rbac.authorization.k8s.io", "ClusterRole") => typed!(rbac::ClusterRole, Hooks::PLAIN),
        ("rbac.authorization.k8s.io", "RoleBinding") => typed!(rbac::RoleBinding, Hooks::PLAIN),
        ("rbac.authorization.k8s.io", "Role") => typed!(rbac::Role, Hooks::PLAIN),
        ("scheduling.k8s.io", "PriorityClass") => typed!(scheduling::PriorityClass, Hooks::PLAIN),
        ("storage.k8s.io", "StorageClass") => typed!(storage::StorageClass, Hooks::PLAIN),
        _ => return None,
    };
    Some(s)
}

const GENERATION_STATUS: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({})),
    ..Hooks::PLAIN
};

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_api::resources::RESOURCES;

    #[test]
    fn every_resource_has_a_strategy() {
        for r in RESOURCES {
            let s = strategy_for(r).unwrap_or_else(|| panic!("no strategy for {}", r.plural));
            assert_eq!(s.info().plural, r.plural);
            if s.hooks().initial_status.is_some() {
                assert!(
                    r.has_subresource("status"),
                    "{} sets status but has no status subresource",
                    r.plural
                );
            }
        }
    }

    #[test]
    fn namespace_gets_kubernetes_finalizer() {
        let mut ns = json!({"metadata": {"name": "a"}});
        (NAMESPACE.prepare_create.unwrap())(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    }
}
