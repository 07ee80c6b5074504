//! The k8s-openapi types whose schemas the documents carry, keyed by group, version and
//! kind. Every kind `ferrokube_api::resources::served()` lists must be here (a test checks
//! it); the rest are the kinds served at subresources and the meta/v1 kinds operations
//! take and return.

use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates,
    coordination, core, discovery, events, flowcontrol, networking, node, policy, rbac, scheduling,
    storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
use schemars::{JsonSchema, SchemaGenerator};

/// Adds a type's definition (and every definition it references) to a generator.
pub(crate) type AddFn = fn(&mut SchemaGenerator);

/// One type: where it is served and how to add its schema to a generator.
pub(crate) struct KindEntry {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Adds the type's definition (and every definition it references).
    pub add: AddFn,
    /// The type's definition name (`io.k8s.api.core.v1.Pod`).
    pub name: fn() -> std::borrow::Cow<'static, str>,
    /// Whether the type has a `<Kind>List` served next to it.
    pub listable: bool,
}

fn add<T: JsonSchema>(generator: &mut SchemaGenerator) {
    generator.subschema_for::<T>();
}

macro_rules! kinds {
    ($( $group:literal $version:literal $kind:ident => $ty:ty, $listable:literal; )*) => {
        pub(crate) static KINDS: &[KindEntry] = &[
            $( KindEntry {
                group: $group,
                version: $version,
                kind: stringify!($kind),
                add: add::<$ty>,
                name: <$ty as JsonSchema>::schema_name,
                listable: $listable,
            }, )*
        ];
    };
}

kinds! {
    "" "v1" ComponentStatus => core::v1::ComponentStatus, true;
    "" "v1" ConfigMap => core::v1::ConfigMap, true;
    "" "v1" Endpoints => core::v1::Endpoints, true;
    "" "v1" Event => core::v1::Event, true;
    "" "v1" LimitRange => core::v1::LimitRange, true;
    "" "v1" Namespace => core::v1::Namespace, true;
    "" "v1" Node => core::v1::Node, true;
    "" "v1" PersistentVolumeClaim => core::v1::PersistentVolumeClaim, true;
    "" "v1" PersistentVolume => core::v1::PersistentVolume, true;
    "" "v1" Pod => core::v1::Pod, true;
    "" "v1" PodTemplate => core::v1::PodTemplate, true;
    "" "v1" ReplicationController => core::v1::ReplicationController, true;
    "" "v1" ResourceQuota => core::v1::ResourceQuota, true;
    "" "v1" Secret => core::v1::Secret, true;
    "" "v1" ServiceAccount => core::v1::ServiceAccount, true;
    "" "v1" Service => core::v1::Service, true;
    "" "v1" Binding => core::v1::Binding, false;
    "admissionregistration.k8s.io" "v1" MutatingWebhookConfiguration => admissionregistration::v1::MutatingWebhookConfiguration, true;
    "admissionregistration.k8s.io" "v1" ValidatingWebhookConfiguration => admissionregistration::v1::ValidatingWebhookConfiguration, true;
    "admissionregistration.k8s.io" "v1" ValidatingAdmissionPolicy => admissionregistration::v1::ValidatingAdmissionPolicy, true;
    "admissionregistration.k8s.io" "v1" ValidatingAdmissionPolicyBinding => admissionregistration::v1::ValidatingAdmissionPolicyBinding, true;
    "apiregistration.k8s.io" "v1" APIService => apiregistration::v1::APIService, true;
    "apps" "v1" ControllerRevision => apps::v1::ControllerRevision, true;
    "apps" "v1" DaemonSet => apps::v1::DaemonSet, true;
    "apps" "v1" Deployment => apps::v1::Deployment, true;
    "apps" "v1" ReplicaSet => apps::v1::ReplicaSet, true;
    "apps" "v1" StatefulSet => apps::v1::StatefulSet, true;
    "autoscaling" "v1" HorizontalPodAutoscaler => autoscaling::v1::HorizontalPodAutoscaler, true;
    "autoscaling" "v1" Scale => autoscaling::v1::Scale, false;
    "autoscaling" "v2" HorizontalPodAutoscaler => autoscaling::v2::HorizontalPodAutoscaler, true;
    "batch" "v1" CronJob => batch::v1::CronJob, true;
    "batch" "v1" Job => batch::v1::Job, true;
    "certificates.k8s.io" "v1" CertificateSigningRequest => certificates::v1::CertificateSigningRequest, true;
    "coordination.k8s.io" "v1" Lease => coordination::v1::Lease, true;
    "discovery.k8s.io" "v1" EndpointSlice => discovery::v1::EndpointSlice, true;
    "events.k8s.io" "v1" Event => events::v1::Event, true;
    "flowcontrol.apiserver.k8s.io" "v1" FlowSchema => flowcontrol::v1::FlowSchema, true;
    "flowcontrol.apiserver.k8s.io" "v1" PriorityLevelConfiguration => flowcontrol::v1::PriorityLevelConfiguration, true;
    "networking.k8s.io" "v1" IngressClass => networking::v1::IngressClass, true;
    "networking.k8s.io" "v1" Ingress => networking::v1::Ingress, true;
    "networking.k8s.io" "v1" IPAddress => networking::v1::IPAddress, true;
    "networking.k8s.io" "v1" NetworkPolicy => networking::v1::NetworkPolicy, true;
    "networking.k8s.io" "v1" ServiceCIDR => networking::v1::ServiceCIDR, true;
    "node.k8s.io" "v1" RuntimeClass => node::v1::RuntimeClass, true;
    "policy" "v1" PodDisruptionBudget => policy::v1::PodDisruptionBudget, true;
    "policy" "v1" Eviction => policy::v1::Eviction, false;
    "rbac.authorization.k8s.io" "v1" ClusterRoleBinding => rbac::v1::ClusterRoleBinding, true;
    "rbac.authorization.k8s.io" "v1" ClusterRole => rbac::v1::ClusterRole, true;
    "rbac.authorization.k8s.io" "v1" RoleBinding => rbac::v1::RoleBinding, true;
    "rbac.authorization.k8s.io" "v1" Role => rbac::v1::Role, true;
    "scheduling.k8s.io" "v1" PriorityClass => scheduling::v1::PriorityClass, true;
    "storage.k8s.io" "v1" CSIDriver => storage::v1::CSIDriver, true;
    "storage.k8s.io" "v1" CSINode => storage::v1::CSINode, true;
    "storage.k8s.io" "v1" CSIStorageCapacity => storage::v1::CSIStorageCapacity, true;
    "storage.k8s.io" "v1" StorageClass => storage::v1::StorageClass, true;
    "storage.k8s.io" "v1" VolumeAttachment => storage::v1::VolumeAttachment, true;
    "authentication.k8s.io" "v1" SelfSubjectReview => authentication::v1::SelfSubjectReview, false;
    "authentication.k8s.io" "v1" TokenRequest => authentication::v1::TokenRequest, false;
    "authentication.k8s.io" "v1" TokenReview => authentication::v1::TokenReview, false;
    "authorization.k8s.io" "v1" LocalSubjectAccessReview => authorization::v1::LocalSubjectAccessReview, false;
    "authorization.k8s.io" "v1" SelfSubjectAccessReview => authorization::v1::SelfSubjectAccessReview, false;
    "authorization.k8s.io" "v1" SelfSubjectRulesReview => authorization::v1::SelfSubjectRulesReview, false;
    "authorization.k8s.io" "v1" SubjectAccessReview => authorization::v1::SubjectAccessReview, false;
    "apiextensions.k8s.io" "v1" CustomResourceDefinition => apiextensions::v1::CustomResourceDefinition, true;
    "" "v1" Status => meta::Status, false;
    "" "v1" APIResourceList => meta::APIResourceList, false;
    "" "v1" APIGroup => meta::APIGroup, false;
    "" "v1" APIGroupList => meta::APIGroupList, false;
    "" "v1" APIVersions => meta::APIVersions, false;
}

/// meta/v1 kinds upstream registers in every group-version (their gvk extension lists
/// each one).
pub(crate) const PER_GROUP_VERSION: &[(&str, AddFn)] = &[
    ("DeleteOptions", add::<meta::DeleteOptions>),
    ("WatchEvent", add::<meta::WatchEvent<core::v1::Pod>>),
];

/// Definitions that operations reference without a kind of their own.
pub(crate) const SUPPORT: &[AddFn] = &[add::<meta::Patch>];

/// The definition names of the per-group-version meta kinds.
pub(crate) fn per_group_version_name(kind: &str) -> String {
    format!("io.k8s.apimachinery.pkg.apis.meta.v1.{kind}")
}
