//! The static table of built-in resources the apiserver serves.
//!
//! One [`ResourceInfo`] per resource: everything discovery, routing and the registry
//! need to know about it that the k8s-openapi type does not carry. Adding a built-in
//! resource is one entry in [`RESOURCES`] (plus its strategy hook in the registry).
//! Values follow upstream's discovery documents for v1.33.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{LazyLock, Mutex};

/// A verb a resource supports (upstream discovery spells them in lower case).
pub type Verb = &'static str;

/// Verbs of an ordinary resource: every REST verb.
pub const ALL_VERBS: &[Verb] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Verbs of namespaces (upstream serves no deletecollection for them).
pub const NO_COLLECTION_DELETE: &[Verb] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// Verbs of a `status`-like subresource.
pub const GET_PATCH_UPDATE: &[Verb] = &["get", "patch", "update"];

/// Verbs of `pods/binding`, `pods/eviction` and `serviceaccounts/token`.
pub const CREATE_ONLY: &[Verb] = &["create"];

/// Verbs of the subresources the apiserver serves by connecting to the kubelet
/// (`pods/exec`, `pods/attach`, `pods/portforward`).
pub const CONNECT: &[Verb] = &["create", "get"];

/// Verbs of the `proxy` subresources (upstream's discovery lists these for
/// `pods/proxy`, `services/proxy` and `nodes/proxy`).
pub const PROXY: &[Verb] = &["create", "delete", "get", "patch", "update"];

/// Verbs of `pods/log`.
pub const GET_ONLY: &[Verb] = &["get"];

/// Verbs of `namespaces/finalize`.
pub const UPDATE_ONLY: &[Verb] = &["update"];

/// A subresource (`<resource>/<name>`), e.g. `status`, `scale`, `binding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubresourceInfo {
    pub name: &'static str,
    /// The kind served at the subresource (`Scale` for `scale`, the parent's kind for
    /// `status`).
    pub kind: &'static str,
    /// Group and version of that kind when it differs from the parent's
    /// (`autoscaling/v1` for `scale`, `policy/v1` for `eviction`).
    pub group: Option<&'static str>,
    pub version: Option<&'static str>,
    pub verbs: &'static [Verb],
}

const fn sub(name: &'static str, kind: &'static str, verbs: &'static [Verb]) -> SubresourceInfo {
    SubresourceInfo {
        name,
        kind,
        group: None,
        version: None,
        verbs,
    }
}

const fn sub_gv(
    name: &'static str,
    kind: &'static str,
    group: &'static str,
    version: &'static str,
    verbs: &'static [Verb],
) -> SubresourceInfo {
    SubresourceInfo {
        name,
        kind,
        group: Some(group),
        version: Some(version),
        verbs,
    }
}

/// One served resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResourceInfo {
    /// API group; `""` is the core (legacy) group served under `/api`.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// The URL segment (`pods`).
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub namespaced: bool,
    pub verbs: &'static [Verb],
    pub subresources: &'static [SubresourceInfo],
    /// Storage key prefix without trailing slash, as upstream lays out etcd
    /// (`/registry/services/specs`, `/registry/minions`).
    pub storage_prefix: &'static str,
}

impl ResourceInfo {
    /// `group/version`, or just `version` for the core group (the `apiVersion` field).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of the list (`PodList`).
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn subresource(&self, name: &str) -> Option<&'static SubresourceInfo> {
        self.subresources.iter().find(|s| s.name == name)
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresource(name).is_some()
    }

    /// Whether a DELETE that removes the object answers with the object, as upstream's
    /// stores with `ReturnDeletedObject` do; the others answer with a `Status` naming
    /// it. A DELETE that only marks the object (finalizers, a grace period) answers
    /// with the marked object either way.
    pub fn returns_deleted_object(&self) -> bool {
        self.group.is_empty()
            && matches!(
                self.plural,
                "pods"
                    | "services"
                    | "serviceaccounts"
                    | "namespaces"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
            )
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// Whether `name` (case-insensitive) names this resource: plural, singular, kind or
    /// a short name.
    pub fn is_named(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        name == self.plural
            || name == self.singular
            || name == self.kind.to_ascii_lowercase()
            || self.short_names.contains(&name.as_str())
    }
}

macro_rules! status {
    ($kind:literal) => {
        sub("status", $kind, GET_PATCH_UPDATE)
    };
}

macro_rules! scale {
    () => {
        sub_gv("scale", "Scale", "autoscaling", "v1", GET_PATCH_UPDATE)
    };
}

#[allow(clippy::too_many_arguments)]
const fn res(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    namespaced: bool,
    verbs: &'static [Verb],
    subresources: &'static [SubresourceInfo],
    storage_prefix: &'static str,
) -> ResourceInfo {
    ResourceInfo {
        group,
        version,
        kind,
        plural,
        singular,
        short_names,
        categories,
        namespaced,
        verbs,
        subresources,
        storage_prefix,
    }
}

const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];
const API_EXTENSIONS: &[&str] = &["api-extensions"];
const NO_SUBS: &[SubresourceInfo] = &[];

/// Every built-in resource, grouped by API group in discovery order.
#[rustfmt::skip]
pub static RESOURCES: &[ResourceInfo] = &[
    // ---- core/v1
    res("", "v1", "ConfigMap", "configmaps", "configmap", &["cm"], NONE, true, ALL_VERBS, NO_SUBS, "/registry/configmaps"),
    res("", "v1", "Endpoints", "endpoints", "endpoints", &["ep"], NONE, true, ALL_VERBS, NO_SUBS, "/registry/services/endpoints"),
    res("", "v1", "Event", "events", "event", &["ev"], NONE, true, ALL_VERBS, NO_SUBS, "/registry/events"),
    res("", "v1", "LimitRange", "limitranges", "limitrange", &["limits"], NONE, true, ALL_VERBS, NO_SUBS, "/registry/limitranges"),
    res("", "v1", "Namespace", "namespaces", "namespace", &["ns"], NONE, false, NO_COLLECTION_DELETE,
        &[sub("finalize", "Namespace", UPDATE_ONLY), status!("Namespace")], "/registry/namespaces"),
    res("", "v1", "Node", "nodes", "node", &["no"], NONE, false, ALL_VERBS,
        &[sub("proxy", "NodeProxyOptions", PROXY), status!("Node")], "/registry/minions"),
    res("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", &["pvc"], NONE, true, ALL_VERBS,
        &[status!("PersistentVolumeClaim")], "/registry/persistentvolumeclaims"),
    res("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", &["pv"], NONE, false, ALL_VERBS,
        &[status!("PersistentVolume")], "/registry/persistentvolumes"),
    res("", "v1", "Pod", "pods", "pod", &["po"], ALL, true, ALL_VERBS,
        &[sub("attach", "PodAttachOptions", CONNECT), sub("binding", "Binding", CREATE_ONLY), sub("ephemeralcontainers", "Pod", GET_PATCH_UPDATE), sub_gv("eviction", "Eviction", "policy", "v1", CREATE_ONLY),
          sub("exec", "PodExecOptions", CONNECT), sub("log", "Pod", GET_ONLY), sub("portforward", "PodPortForwardOptions", CONNECT),
          sub("proxy", "PodProxyOptions", PROXY), sub("resize", "Pod", GET_PATCH_UPDATE), status!("Pod")],
        "/registry/pods"),
    res("", "v1", "PodTemplate", "podtemplates", "podtemplate", NONE, NONE, true, ALL_VERBS, NO_SUBS, "/registry/podtemplates"),
    res("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", &["rc"], ALL, true, ALL_VERBS,
        &[scale!(), status!("ReplicationController")], "/registry/controllers"),
    res("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", &["quota"], NONE, true, ALL_VERBS,
        &[status!("ResourceQuota")], "/registry/resourcequotas"),
    res("", "v1", "Secret", "secrets", "secret", NONE, NONE, true, ALL_VERBS, NO_SUBS, "/registry/secrets"),
    res("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", &["sa"], NONE, true, ALL_VERBS, &[sub_gv("token", "TokenRequest", "authentication.k8s.io", "v1", CREATE_ONLY)], "/registry/serviceaccounts"),
    res("", "v1", "Service", "services", "service", &["svc"], ALL, true, ALL_VERBS,
        &[sub("proxy", "ServiceProxyOptions", PROXY), status!("Service")], "/registry/services/specs"),
    // ---- admissionregistration.k8s.io/v1
    res("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration", NONE, API_EXTENSIONS, false, ALL_VERBS, NO_SUBS, "/registry/mutatingwebhookconfigurations"),
    res("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations",
        "validatingwebhookconfiguration", NONE, API_EXTENSIONS, false, ALL_VERBS, NO_SUBS,
        "/registry/validatingwebhookconfigurations"),
    res("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies",
        "validatingadmissionpolicy", NONE, API_EXTENSIONS, false, ALL_VERBS, &[status!("ValidatingAdmissionPolicy")],
        "/registry/validatingadmissionpolicies"),
    res("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding", NONE, API_EXTENSIONS, false, ALL_VERBS, NO_SUBS,
        "/registry/validatingadmissionpolicybindings"),
    // ---- apiextensions.k8s.io/v1
    res("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition",
        &["crd", "crds"], API_EXTENSIONS, false, ALL_VERBS, &[status!("CustomResourceDefinition")],
        "/registry/apiextensions.k8s.io/customresourcedefinitions"),
    // ---- apiregistration.k8s.io/v1 (upstream's kube-aggregator; its etcd key)
    res("apiregistration.k8s.io", "v1", "APIService", "apiservices", "apiservice", NONE, API_EXTENSIONS, false, ALL_VERBS,
        &[status!("APIService")], "/registry/apiregistration.k8s.io/apiservices"),
    // ---- apps/v1
    res("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", NONE, NONE, true, ALL_VERBS, NO_SUBS,
        "/registry/controllerrevisions"),
    res("apps", "v1", "DaemonSet", "daemonsets", "daemonset", &["ds"], ALL, true, ALL_VERBS, &[status!("DaemonSet")],
        "/registry/daemonsets"),
    res("apps", "v1", "Deployment", "deployments", "deployment", &["deploy"], ALL, true, ALL_VERBS,
        &[scale!(), status!("Deployment")], "/registry/deployments"),
    res("apps", "v1", "ReplicaSet", "replicasets", "replicaset", &["rs"], ALL, true, ALL_VERBS,
        &[scale!(), status!("ReplicaSet")], "/registry/replicasets"),
    res("apps", "v1", "StatefulSet", "statefulsets", "statefulset", &["sts"], ALL, true, ALL_VERBS,
        &[scale!(), status!("StatefulSet")], "/registry/statefulsets"),
    // ---- autoscaling/v2
    res("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", &["hpa"], ALL, true,
        ALL_VERBS, &[status!("HorizontalPodAutoscaler")], "/registry/horizontalpodautoscalers"),
    // ---- autoscaling/v1: the same objects, stored in the v2 form (the registry converts)
    res("autoscaling", "v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", &["hpa"], ALL, true,
        ALL_VERBS, &[status!("HorizontalPodAutoscaler")], "/registry/horizontalpodautoscalers"),
    // ---- batch/v1
    res("batch", "v1", "CronJob", "cronjobs", "cronjob", &["cj"], ALL, true, ALL_VERBS, &[status!("CronJob")], "/registry/cronjobs"),
    res("batch", "v1", "Job", "jobs", "job", NONE, ALL, true, ALL_VERBS, &[status!("Job")], "/registry/jobs"),
    // ---- certificates.k8s.io/v1
    res("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", "certificatesigningrequest", &["csr"],
        NONE, false, ALL_VERBS,
        &[sub("approval", "CertificateSigningRequest", GET_PATCH_UPDATE), status!("CertificateSigningRequest")],
        "/registry/certificatesigningrequests"),
    // ---- coordination.k8s.io/v1
    res("coordination.k8s.io", "v1", "Lease", "leases", "lease", NONE, NONE, true, ALL_VERBS, NO_SUBS, "/registry/leases"),
    // ---- discovery.k8s.io/v1
    res("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", NONE, NONE, true, ALL_VERBS, NO_SUBS,
        "/registry/endpointslices"),
    // ---- events.k8s.io/v1 (stored apart from core events until the two views convert)
    // Stored with core v1 Events (one resource, as upstream; the registry converts).
    res("events.k8s.io", "v1", "Event", "events", "event", &["ev"], NONE, true, ALL_VERBS, NO_SUBS, "/registry/events"),
    // ---- flowcontrol.apiserver.k8s.io/v1
    res("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", "flowschema", NONE, NONE, false, ALL_VERBS,
        &[status!("FlowSchema")], "/registry/flowschemas"),
    res("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration", "prioritylevelconfigurations",
        "prioritylevelconfiguration", NONE, NONE, false, ALL_VERBS, &[status!("PriorityLevelConfiguration")],
        "/registry/prioritylevelconfigurations"),
    // ---- networking.k8s.io/v1
    res("networking.k8s.io", "v1", "IngressClass", "ingressclasses", "ingressclass", NONE, NONE, false, ALL_VERBS, NO_SUBS,
        "/registry/ingressclasses"),
    res("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", &["ing"], NONE, true, ALL_VERBS, &[status!("Ingress")],
        "/registry/ingress"),
    res("networking.k8s.io", "v1", "IPAddress", "ipaddresses", "ipaddress", NONE, NONE, false, ALL_VERBS, NO_SUBS,
        "/registry/ipaddresses"),
    res("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy", &["netpol"], NONE, true, ALL_VERBS, NO_SUBS,
        "/registry/networkpolicies"),
    res("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", "servicecidr", NONE, NONE, false, ALL_VERBS,
        &[status!("ServiceCIDR")], "/registry/servicecidrs"),
    // ---- node.k8s.io/v1
    res("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "runtimeclass", NONE, NONE, false, ALL_VERBS, NO_SUBS,
        "/registry/runtimeclasses"),
    // ---- policy/v1
    res("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", &["pdb"], NONE, true, ALL_VERBS,
        &[status!("PodDisruptionBudget")], "/registry/poddisruptionbudgets"),
    // ---- rbac.authorization.k8s.io/v1
    res("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", NONE, NONE, false,
        ALL_VERBS, NO_SUBS, "/registry/clusterrolebindings"),
    res("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", NONE, NONE, false, ALL_VERBS, NO_SUBS,
        "/registry/clusterroles"),
    res("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", NONE, NONE, true, ALL_VERBS, NO_SUBS,
        "/registry/rolebindings"),
    res("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", NONE, NONE, true, ALL_VERBS, NO_SUBS, "/registry/roles"),
    // ---- scheduling.k8s.io/v1
    res("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", &["pc"], NONE, false, ALL_VERBS, NO_SUBS,
        "/registry/priorityclasses"),
    // ---- storage.k8s.io/v1
    res("storage.k8s.io", "v1", "CSIDriver", "csidrivers", "csidriver", NONE, NONE, false, ALL_VERBS, NO_SUBS,
        "/registry/csidrivers"),
    res("storage.k8s.io", "v1", "CSINode", "csinodes", "csinode", NONE, NONE, false, ALL_VERBS, NO_SUBS, "/registry/csinodes"),
    res("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities", "csistoragecapacity", NONE, NONE, true, ALL_VERBS,
        NO_SUBS, "/registry/csistoragecapacities"),
    res("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", &["sc"], NONE, false, ALL_VERBS, NO_SUBS,
        "/registry/storageclasses"),
    res("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", "volumeattachment", NONE, NONE, false, ALL_VERBS,
        &[status!("VolumeAttachment")], "/registry/volumeattachments"),
];

/// Verbs of a collection served read-only.
pub const GET_LIST: &[Verb] = &["get", "list"];

/// Resources the apiserver answers itself, with nothing in storage and so no store in
/// the registry. Discovery and the OpenAPI documents list them with the rest, so the
/// real kubectl can map their kinds (`kubectl create -f review.yaml`).
/// - The access and token reviews: create-only, answered from the authorizers and
///   authenticators; and the legacy `bindings`, a pod's `binding` subresource with
///   the pod named in the body.
#[rustfmt::skip]
pub static UNSTORED: &[ResourceInfo] = &[
    // ---- core/v1: a pod's `binding` subresource, the pod named in the body.
    res("", "v1", "Binding", "bindings", "binding", NONE, NONE, true, CREATE_ONLY, NO_SUBS, ""),
    // ---- core/v1: the health of the scheduler, the controller manager and etcd, probed
    // on every read (deprecated upstream since 1.19, still served).
    res("", "v1", "ComponentStatus", "componentstatuses", "componentstatus", &["cs"], NONE, false, GET_LIST, NO_SUBS, ""),
    // ---- authentication.k8s.io/v1
    res("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", "selfsubjectreview", NONE, NONE, false,
        CREATE_ONLY, NO_SUBS, ""),
    res("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", "tokenreview", NONE, NONE, false, CREATE_ONLY, NO_SUBS, ""),
    // ---- authorization.k8s.io/v1
    res("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", "localsubjectaccessreview", NONE,
        NONE, true, CREATE_ONLY, NO_SUBS, ""),
    res("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", "selfsubjectaccessreview", NONE,
        NONE, false, CREATE_ONLY, NO_SUBS, ""),
    res("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", "selfsubjectrulesreview", NONE,
        NONE, false, CREATE_ONLY, NO_SUBS, ""),
    res("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", "subjectaccessreview", NONE, NONE, false,
        CREATE_ONLY, NO_SUBS, ""),
];

/// Every resource discovery lists: the stored ones, then the [`UNSTORED`] ones.
pub fn served() -> impl Iterator<Item = &'static ResourceInfo> {
    RESOURCES.iter().chain(UNSTORED)
}

/// Groups in discovery order (core group first, as `""`), each with its one version.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in served() {
        if !out.iter().any(|(g, v)| *g == r.group && *v == r.version) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// The resources of one group-version.
pub fn resources_of(group: &str, version: &str) -> impl Iterator<Item = &'static ResourceInfo> {
    let group = group.to_string();
    let version = version.to_string();
    served().filter(move |r| r.group == group && r.version == version)
}

/// Looks a resource up by group, version and URL plural.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    position(group, version, plural).map(|i| &RESOURCES[i])
}

/// [`RESOURCES`] positions by URL plural (a plural names one or two resources). Every
/// request looks its resource up; a scan of the table compared ~60 strings each time.
static BY_PLURAL: LazyLock<HashMap<&'static str, Vec<usize>>> = LazyLock::new(|| {
    let mut by_plural: HashMap<&'static str, Vec<usize>> = HashMap::new();
    for (i, r) in RESOURCES.iter().enumerate() {
        by_plural.entry(r.plural).or_default().push(i);
    }
    by_plural
});

/// Where a resource is in [`RESOURCES`], by group, version and URL plural.
pub fn position(group: &str, version: &str, plural: &str) -> Option<usize> {
    BY_PLURAL.get(plural)?.iter().copied().find(|&i| {
        let r = &RESOURCES[i];
        r.group == group && r.version == version
    })
}

/// Looks a resource up by group and kind (the first served version).
pub fn lookup_kind(group: &str, kind: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.kind == kind)
}

/// A resource known only at run time (a custom resource), made `'static` like the
/// built-in ones so that routing, admission and output treat both alike. Interned:
/// the same description twice is one allocation, so what is held for ever is bounded
/// by the distinct definitions seen, not by how often they are (re)built.
pub fn intern(info: ResourceInfo) -> &'static ResourceInfo {
    static INFOS: Interned<ResourceInfo> = LazyLock::new(Default::default);
    interned(&INFOS, &info, move || Box::leak(Box::new(info)))
}

/// A string made `'static` for [`intern`]ed resources, one allocation per distinct
/// string.
pub fn intern_str(s: &str) -> &'static str {
    static STRS: Interned<str> = LazyLock::new(Default::default);
    interned(&STRS, s, || Box::leak(s.to_owned().into_boxed_str()))
}

/// A list of strings made `'static` (short names, categories), interned whole.
pub fn intern_strs(items: &[String]) -> &'static [&'static str] {
    static LISTS: Interned<[&'static str]> = LazyLock::new(Default::default);
    let items: Vec<&'static str> = items.iter().map(|s| intern_str(s)).collect();
    interned(&LISTS, &items, || {
        Box::leak(items.clone().into_boxed_slice())
    })
}

/// A field selector's field, its path and its value when absent.
pub type SelectableField = (&'static str, &'static str, &'static str);

/// Field-selector fields and their paths (a custom resource's `selectableFields`) made
/// `'static`, interned whole.
pub fn intern_field_paths(items: Vec<SelectableField>) -> &'static [SelectableField] {
    static LISTS: Interned<[SelectableField]> = LazyLock::new(Default::default);
    interned(&LISTS, &items, || {
        Box::leak(items.clone().into_boxed_slice())
    })
}

/// Subresources made `'static` for [`intern`]ed resources.
pub fn intern_subresources(items: Vec<SubresourceInfo>) -> &'static [SubresourceInfo] {
    static LISTS: Interned<[SubresourceInfo]> = LazyLock::new(Default::default);
    interned(&LISTS, &items, || {
        Box::leak(items.clone().into_boxed_slice())
    })
}

/// The `'static` values handed out so far, one per distinct value.
type Interned<T> = LazyLock<Mutex<HashSet<&'static T>>>;

/// The copy of `value` held in `set`; `leak` makes it the first time it is seen.
fn interned<T: ?Sized + Hash + Eq>(
    set: &Interned<T>,
    value: &T,
    leak: impl FnOnce() -> &'static T,
) -> &'static T {
    let mut set = set.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(value) {
        return found;
    }
    let leaked = leak();
    set.insert(leaked);
    leaked
}

/// Where a resource keeps its pod template (`None`: not a pod controller), for the
/// resources upstream validates as pod templates (and PodSecurity warns about).
pub fn pod_template_path(group: &str, resource: &str) -> Option<&'static [&'static str]> {
    match (group, resource) {
        ("", "podtemplates") => Some(&["template"]),
        ("", "replicationcontrollers")
        | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(&["spec", "template"]),
        ("batch", "cronjobs") => Some(&["spec", "jobTemplate", "spec", "template"]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn every_resource_is_found_at_its_position() {
        for (i, r) in RESOURCES.iter().enumerate() {
            assert_eq!(position(r.group, r.version, r.plural), Some(i));
            assert!(std::ptr::eq(
                lookup(r.group, r.version, r.plural).unwrap(),
                r
            ));
        }
        assert_eq!(position("apps", "v1", "pods"), None);
        assert_eq!(position("", "v2", "pods"), None);
        assert_eq!(position("", "v1", "nonsense"), None);
    }

    #[test]
    fn plurals_unique_per_group_version() {
        let mut seen = HashSet::new();
        for r in RESOURCES {
            assert!(
                seen.insert((r.group, r.version, r.plural)),
                "duplicate {}",
                r.plural
            );
            assert_eq!(r.plural, r.plural.to_ascii_lowercase());
            assert!(r.storage_prefix.starts_with("/registry/"));
            assert!(!r.storage_prefix.ends_with('/'));
        }
    }

    #[test]
    fn unstored_resources_are_apart_from_the_stored_ones() {
        for r in UNSTORED {
            assert_eq!(r.storage_prefix, "", "{}", r.plural);
            assert_eq!(lookup(r.group, r.version, r.plural), None, "{}", r.plural);
            assert!(!r.supports("update") && !r.supports("delete"));
        }
        assert_eq!(served().count(), RESOURCES.len() + UNSTORED.len());
        assert!(groups().contains(&("authorization.k8s.io", "v1")));
        assert_eq!(
            resources_of("authentication.k8s.io", "v1")
                .map(|r| r.plural)
                .collect::<Vec<_>>(),
            ["selfsubjectreviews", "tokenreviews"]
        );
    }

    /// A short name names one resource: the versions of one resource share it, and
    /// Events, served in two groups, share `ev`.
    #[test]
    fn short_names_unique_across_groups_except_events() {
        let mut seen = HashMap::new();
        for r in served() {
            for s in r.short_names {
                if *s == "ev" && r.group == "events.k8s.io" {
                    continue;
                }
                let owner = seen.entry(*s).or_insert((r.group, r.plural));
                assert_eq!(*owner, (r.group, r.plural), "short name {s} used twice");
            }
        }
    }

    #[test]
    fn storage_prefixes_do_not_nest() {
        let prefixes: Vec<String> = RESOURCES
            .iter()
            .map(|r| format!("{}/", r.storage_prefix))
            .collect();
        for (i, a) in prefixes.iter().enumerate() {
            for (j, b) in prefixes.iter().enumerate() {
                if i != j && a != b {
                    assert!(!b.starts_with(a.as_str()), "{b} is under {a}");
                }
            }
        }
    }

    /// Storage is shared only by one resource's versions (HorizontalPodAutoscalers)
    /// and by Events, the one resource served in two groups.
    #[test]
    fn shared_storage_is_only_versions_and_events() {
        let mut shared = Vec::new();
        for (i, a) in RESOURCES.iter().enumerate() {
            for b in &RESOURCES[i + 1..] {
                if a.storage_prefix == b.storage_prefix {
                    assert_eq!((a.kind, a.plural), (b.kind, b.plural));
                    shared.push((a.api_version(), b.api_version(), a.kind));
                }
            }
        }
        assert_eq!(
            shared,
            [
                ("v1".to_string(), "events.k8s.io/v1".to_string(), "Event"),
                (
                    "autoscaling/v2".to_string(),
                    "autoscaling/v1".to_string(),
                    "HorizontalPodAutoscaler"
                ),
            ]
        );
    }

    #[test]
    fn lookups() {
        let pods = lookup("", "v1", "pods").unwrap();
        assert_eq!(pods.kind, "Pod");
        assert!(pods.namespaced);
        assert!(pods.is_named("po"));
        assert!(pods.has_subresource("binding"));
        assert_eq!(pods.api_version(), "v1");
        assert_eq!(pods.list_kind(), "PodList");
        let deploy = lookup_kind("apps", "Deployment").unwrap();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(
            deploy.subresource("scale").unwrap().group,
            Some("autoscaling")
        );
        assert!(
            !lookup("", "v1", "namespaces")
                .unwrap()
                .supports("deletecollection")
        );
        assert_eq!(groups()[0], ("", "v1"));
        assert_eq!(resources_of("apps", "v1").count(), 5);
        // Upstream's kube-aggregator resource, under its etcd key.
        let apiservices = lookup_kind("apiregistration.k8s.io", "APIService").unwrap();
        assert_eq!(apiservices.plural, "apiservices");
        assert!(!apiservices.namespaced);
        assert!(apiservices.has_subresource("status"));
        assert_eq!(apiservices.categories, ["api-extensions"]);
        assert!(apiservices.short_names.is_empty());
        assert_eq!(
            apiservices.storage_prefix,
            "/registry/apiregistration.k8s.io/apiservices"
        );
    }

    #[test]
    fn pod_templates() {
        assert_eq!(
            pod_template_path("apps", "deployments"),
            Some(&["spec", "template"][..])
        );
        assert_eq!(
            pod_template_path("batch", "cronjobs"),
            Some(&["spec", "jobTemplate", "spec", "template"][..])
        );
        assert_eq!(pod_template_path("", "pods"), None);
    }
}
