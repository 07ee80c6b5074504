//! The bootstrap RBAC policy the apiserver reconciles at start: upstream's
//! `plugin/pkg/auth/authorizer/rbac/bootstrappolicy` (policy.go, controller_policy.go,
//! namespace_policy.go) for v1.33 with the default feature gates: the same names,
//! labels, annotations, rules and bindings.
//!
//! Rules are written compactly: `rule("get list watch", "core apps", "pods
//! deployments")`, where `core` is the legacy group `""`.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

/// Set to `"false"` on a bootstrap object to keep the apiserver from reconciling it.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// `kubernetes.io/bootstrapping: rbac-defaults` on every bootstrap object.
pub const BOOTSTRAPPING_LABEL: &str = "kubernetes.io/bootstrapping";
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn words(s: &str) -> Vec<String> {
    s.split_whitespace()
        .map(|w| if w == "core" { "" } else { w }.to_string())
        .collect()
}

/// A resource rule.
pub fn rule(verbs: &str, groups: &str, resources: &str) -> PolicyRule {
    PolicyRule {
        verbs: words(verbs),
        api_groups: Some(words(groups)),
        resources: Some(words(resources)),
        ..PolicyRule::default()
    }
}

/// A resource rule restricted to names.
fn named(verbs: &str, groups: &str, resources: &str, names: &str) -> PolicyRule {
    PolicyRule {
        resource_names: Some(words(names)),
        ..rule(verbs, groups, resources)
    }
}

/// A non-resource URL rule.
fn urls(verbs: &str, paths: &str) -> PolicyRule {
    PolicyRule {
        verbs: words(verbs),
        non_resource_urls: Some(paths.split_whitespace().map(str::to_string).collect()),
        ..PolicyRule::default()
    }
}

fn event_rule() -> PolicyRule {
    rule("create update patch", "core events.k8s.io", "events")
}

const READ: &str = "get list watch";
const WRITE: &str = "create update patch delete deletecollection";
const READ_WRITE: &str = "get list watch create update patch delete deletecollection";

fn meta(namespace: Option<&str>, name: &str, extra_labels: &[&str]) -> ObjectMeta {
    let mut labels =
        BTreeMap::from([(BOOTSTRAPPING_LABEL.to_string(), "rbac-defaults".to_string())]);
    for l in extra_labels {
        labels.insert(l.to_string(), "true".to_string());
    }
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(
            AUTOUPDATE_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

fn cluster_role(name: &str, labels: &[&str], rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: meta(None, name, labels),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

fn aggregated(name: &str, labels: &[&str], selector_label: &str) -> ClusterRole {
    ClusterRole {
        metadata: meta(None, name, labels),
        rules: None,
        aggregation_rule: Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    selector_label.to_string(),
                    "true".to_string(),
                )])),
                match_expressions: None,
            }]),
        }),
    }
}

fn user(name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.into()),
        kind: "User".into(),
        name: name.into(),
        namespace: None,
    }
}

fn group(name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.into()),
        kind: "Group".into(),
        name: name.into(),
        namespace: None,
    }
}

fn service_account(namespace: &str, name: &str) -> Subject {
    Subject {
        api_group: None,
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC_GROUP.into(),
        kind: kind.into(),
        name: name.into(),
    }
}

fn cluster_binding(name: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(None, name, &[]),
        role_ref: role_ref("ClusterRole", name),
        subjects: (!subjects.is_empty()).then_some(subjects),
    }
}

/// The rules of `system:node` (upstream `NodeRules`), which the Node authorizer
/// applies to every kubelet.
pub fn node_rules() -> Vec<PolicyRule> {
    vec![
        rule("create", "authentication.k8s.io", "tokenreviews"),
        rule(
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews localsubjectaccessreviews",
        ),
        rule(READ, "core", "services"),
        rule("create get list watch", "core", "nodes"),
        rule("update patch", "core", "nodes/status"),
        rule("update patch", "core", "nodes"),
        rule("create update patch", "core", "events"),
        rule(READ, "core", "pods"),
        rule("create delete", "core", "pods"),
        rule("update patch", "core", "pods/status"),
        rule("create", "core", "pods/eviction"),
        rule(READ, "core", "secrets configmaps"),
        rule("get", "core", "persistentvolumeclaims persistentvolumes"),
        rule("get", "core", "endpoints"),
        rule(
            "create get list watch",
            "certificates.k8s.io",
            "certificatesigningrequests",
        ),
        rule(
            "get create update patch delete",
            "coordination.k8s.io",
            "leases",
        ),
        rule("get", "storage.k8s.io", "volumeattachments"),
        rule("create", "core", "serviceaccounts/token"),
        rule("get update patch", "core", "persistentvolumeclaims/status"),
        rule(READ, "storage.k8s.io", "csidrivers"),
        rule(
            "get create update patch delete",
            "storage.k8s.io",
            "csinodes",
        ),
        rule(READ, "node.k8s.io", "runtimeclasses"),
    ]
}

/// Upstream `ClusterRoles()`.
pub fn cluster_roles() -> Vec<ClusterRole> {
    let discovery_urls =
        "/api /api/* /apis /apis/* /healthz /livez /openapi /openapi/* /readyz /version /version/";
    let public_info_urls = "/healthz /livez /readyz /version /version/";
    let scheduler_leader = named(
        "get update",
        "coordination.k8s.io",
        "leases",
        "kube-scheduler",
    );
    vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![rule("*", "*", "*"), urls("*", "*")],
        ),
        cluster_role("system:discovery", &[], vec![urls("get", discovery_urls)]),
        cluster_role(
            "system:monitoring",
            &[],
            vec![urls(
                "get",
                "/healthz /healthz/* /livez /livez/* /metrics /metrics/slis /readyz /readyz/*",
            )],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    "create",
                    "authorization.k8s.io",
                    "selfsubjectaccessreviews selfsubjectrulesreviews",
                ),
                rule("create", "authentication.k8s.io", "selfsubjectreviews"),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![urls("get", public_info_urls)],
        ),
        aggregated("admin", &[], AGGREGATE_TO_ADMIN),
        aggregated("edit", &[AGGREGATE_TO_ADMIN], AGGREGATE_TO_EDIT),
        aggregated("view", &[AGGREGATE_TO_EDIT], AGGREGATE_TO_VIEW),
        cluster_role(
            "system:aggregate-to-admin",
            &[AGGREGATE_TO_ADMIN],
            vec![
                rule(
                    "create",
                    "authorization.k8s.io",
                    "localsubjectaccessreviews",
                ),
                rule(
                    READ_WRITE,
                    "rbac.authorization.k8s.io",
                    "roles rolebindings",
                ),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[AGGREGATE_TO_EDIT],
            vec![
                rule(
                    READ,
                    "core",
                    "pods/attach pods/proxy pods/exec pods/portforward secrets services/proxy",
                ),
                rule("impersonate", "core", "serviceaccounts"),
                rule(
                    WRITE,
                    "core",
                    "pods pods/attach pods/proxy pods/exec pods/portforward",
                ),
                rule("create", "core", "pods/eviction"),
                rule(
                    WRITE,
                    "core",
                    "replicationcontrollers replicationcontrollers/scale serviceaccounts services services/proxy persistentvolumeclaims configmaps secrets events",
                ),
                rule("create", "core", "serviceaccounts/token"),
                rule(
                    WRITE,
                    "apps",
                    "statefulsets statefulsets/scale daemonsets deployments deployments/scale deployments/rollback replicasets replicasets/scale",
                ),
                rule(WRITE, "autoscaling", "horizontalpodautoscalers"),
                rule(WRITE, "batch", "jobs cronjobs"),
                rule(
                    WRITE,
                    "extensions",
                    "daemonsets deployments deployments/scale deployments/rollback ingresses replicasets replicasets/scale replicationcontrollers/scale networkpolicies",
                ),
                rule(WRITE, "policy", "poddisruptionbudgets"),
                rule(WRITE, "networking.k8s.io", "networkpolicies ingresses"),
                rule(READ_WRITE, "coordination.k8s.io", "leases"),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[AGGREGATE_TO_VIEW],
            vec![
                rule(
                    READ,
                    "core",
                    "pods replicationcontrollers replicationcontrollers/scale serviceaccounts services services/status endpoints persistentvolumeclaims persistentvolumeclaims/status configmaps",
                ),
                rule(
                    READ,
                    "core",
                    "limitranges resourcequotas bindings events pods/status resourcequotas/status namespaces/status replicationcontrollers/status pods/log",
                ),
                rule(READ, "core", "namespaces"),
                rule(READ, "discovery.k8s.io", "endpointslices"),
                rule(
                    READ,
                    "apps",
                    "controllerrevisions statefulsets statefulsets/status statefulsets/scale daemonsets daemonsets/status deployments deployments/status deployments/scale replicasets replicasets/status replicasets/scale",
                ),
                rule(
                    READ,
                    "autoscaling",
                    "horizontalpodautoscalers horizontalpodautoscalers/status",
                ),
                rule(READ, "batch", "jobs cronjobs cronjobs/status jobs/status"),
                rule(
                    READ,
                    "extensions",
                    "daemonsets daemonsets/status deployments deployments/scale deployments/status ingresses ingresses/status replicasets replicasets/scale replicasets/status replicationcontrollers/scale networkpolicies",
                ),
                rule(
                    READ,
                    "policy",
                    "poddisruptionbudgets poddisruptionbudgets/status",
                ),
                rule(
                    READ,
                    "networking.k8s.io",
                    "networkpolicies ingresses ingresses/status",
                ),
            ],
        ),
        cluster_role(
            "system:heapster",
            &[],
            vec![
                rule(READ, "core", "events pods nodes namespaces"),
                rule(READ, "extensions", "deployments"),
            ],
        ),
        cluster_role("system:node", &[], node_rules()),
        cluster_role(
            "system:node-problem-detector",
            &[],
            vec![
                rule("get", "core", "nodes"),
                rule("patch", "core", "nodes/status"),
                event_rule(),
            ],
        ),
        cluster_role(
            "system:kubelet-api-admin",
            &[],
            vec![
                rule(READ, "core", "nodes"),
                rule("proxy", "core", "nodes"),
                rule(
                    "*",
                    "core",
                    "nodes/proxy nodes/metrics nodes/stats nodes/log",
                ),
            ],
        ),
        cluster_role(
            "system:node-bootstrapper",
            &[],
            vec![rule(
                "create get list watch",
                "certificates.k8s.io",
                "certificatesigningrequests",
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                rule("create", "authentication.k8s.io", "tokenreviews"),
                rule("create", "authorization.k8s.io", "subjectaccessreviews"),
            ],
        ),
        cluster_role(
            "system:kube-aggregator",
            &[],
            vec![rule(READ, "core", "services endpoints")],
        ),
        cluster_role(
            "system:kube-controller-manager",
            &[],
            vec![
                event_rule(),
                rule("create", "coordination.k8s.io", "leases"),
                named(
                    "get update",
                    "coordination.k8s.io",
                    "leases",
                    "kube-controller-manager",
                ),
                rule("create", "core", "secrets serviceaccounts"),
                rule("delete", "core", "secrets"),
                rule(
                    "get",
                    "core",
                    "namespaces secrets serviceaccounts configmaps",
                ),
                rule("update", "core", "secrets serviceaccounts"),
                rule("create", "authentication.k8s.io", "tokenreviews"),
                rule("create", "authorization.k8s.io", "subjectaccessreviews"),
                rule("list watch", "*", "*"),
                rule("create", "core", "serviceaccounts/token"),
            ],
        ),
        cluster_role(
            "system:kube-dns",
            &[],
            vec![rule("list watch", "core", "endpoints services")],
        ),
        cluster_role(
            "system:persistent-volume-provisioner",
            &[],
            vec![
                rule("create delete get list watch", "core", "persistentvolumes"),
                rule("get list watch update", "core", "persistentvolumeclaims"),
                rule(READ, "storage.k8s.io", "storageclasses"),
                rule("watch", "core", "events"),
                event_rule(),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[],
            vec![rule(
                "create",
                "certificates.k8s.io",
                "certificatesigningrequests/nodeclient",
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[],
            vec![rule(
                "create",
                "certificates.k8s.io",
                "certificatesigningrequests/selfnodeclient",
            )],
        ),
        cluster_role(
            "system:volume-scheduler",
            &[],
            vec![
                rule("get list watch update patch", "core", "persistentvolumes"),
                rule(READ, "storage.k8s.io", "storageclasses"),
                rule(
                    "get list watch update patch",
                    "core",
                    "persistentvolumeclaims",
                ),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:legacy-unknown-approver",
            &[],
            vec![named(
                "approve",
                "certificates.k8s.io",
                "signers",
                "kubernetes.io/legacy-unknown",
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:kubelet-serving-approver",
            &[],
            vec![named(
                "approve",
                "certificates.k8s.io",
                "signers",
                "kubernetes.io/kubelet-serving",
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            &[],
            vec![named(
                "approve",
                "certificates.k8s.io",
                "signers",
                "kubernetes.io/kube-apiserver-client",
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            &[],
            vec![named(
                "approve",
                "certificates.k8s.io",
                "signers",
                "kubernetes.io/kube-apiserver-client-kubelet",
            )],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            &[],
            vec![urls(
                "get",
                "/.well-known/openid-configuration /openid/v1/jwks",
            )],
        ),
        cluster_role(
            "system:node-proxier",
            &[],
            vec![
                rule("list watch", "core", "services endpoints"),
                rule(READ, "core", "nodes"),
                event_rule(),
                rule("list watch", "discovery.k8s.io", "endpointslices"),
            ],
        ),
        cluster_role(
            "system:kube-scheduler",
            &[],
            vec![
                event_rule(),
                rule("create", "coordination.k8s.io", "leases"),
                scheduler_leader,
                rule(READ, "core", "nodes"),
                rule("get list watch delete", "core", "pods"),
                rule("create", "core", "pods/binding bindings"),
                rule("patch update", "core", "pods/status"),
                rule(READ, "core", "replicationcontrollers services"),
                rule(READ, "apps extensions", "replicasets"),
                rule(READ, "apps", "statefulsets"),
                rule(READ, "policy", "poddisruptionbudgets"),
                rule(READ, "core", "persistentvolumeclaims persistentvolumes"),
                rule("create", "authentication.k8s.io", "tokenreviews"),
                rule("create", "authorization.k8s.io", "subjectaccessreviews"),
                rule(READ, "storage.k8s.io", "csinodes"),
                rule(READ, "core", "namespaces"),
                rule(READ, "storage.k8s.io", "csidrivers"),
                rule(READ, "storage.k8s.io", "csistoragecapacities"),
            ],
        ),
    ]
}

/// Upstream `ClusterRoleBindings()`.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        cluster_binding("cluster-admin", vec![group("system:masters")]),
        cluster_binding("system:monitoring", vec![group("system:monitoring")]),
        cluster_binding("system:discovery", vec![group("system:authenticated")]),
        cluster_binding("system:basic-user", vec![group("system:authenticated")]),
        cluster_binding(
            "system:public-info-viewer",
            vec![
                group("system:authenticated"),
                group("system:unauthenticated"),
            ],
        ),
        cluster_binding("system:node-proxier", vec![user("system:kube-proxy")]),
        cluster_binding(
            "system:kube-controller-manager",
            vec![user("system:kube-controller-manager")],
        ),
        cluster_binding(
            "system:kube-dns",
            vec![service_account("kube-system", "kube-dns")],
        ),
        cluster_binding("system:kube-scheduler", vec![user("system:kube-scheduler")]),
        cluster_binding(
            "system:volume-scheduler",
            vec![user("system:kube-scheduler")],
        ),
        // Since 1.8 nodes are authorized by the Node authorizer; the binding exists
        // without subjects.
        cluster_binding("system:node", vec![]),
        cluster_binding(
            "system:service-account-issuer-discovery",
            vec![group("system:serviceaccounts")],
        ),
    ]
}

/// Upstream `ControllerRoles()`: `system:controller:<name>` for each controller.
pub fn controller_roles() -> Vec<ClusterRole> {
    let c = |name: &str, mut rules: Vec<PolicyRule>, events: bool| {
        if events {
            rules.push(event_rule());
        }
        cluster_role(&format!("system:controller:{name}"), &[], rules)
    };
    vec![
        c(
            "attachdetach-controller",
            vec![
                rule(
                    "list watch",
                    "core",
                    "persistentvolumes persistentvolumeclaims",
                ),
                rule(READ, "core", "nodes"),
                rule("patch update", "core", "nodes/status"),
                rule("list watch", "core", "pods"),
                event_rule(),
                rule(
                    "list watch get create delete",
                    "storage.k8s.io",
                    "volumeattachments",
                ),
                rule(READ, "storage.k8s.io", "csidrivers"),
                rule(READ, "storage.k8s.io", "csinodes"),
            ],
            false,
        ),
        c(
            "clusterrole-aggregation-controller",
            vec![rule(
                "escalate get list watch update patch",
                "rbac.authorization.k8s.io",
                "clusterroles",
            )],
            false,
        ),
        c(
            "cronjob-controller",
            vec![
                rule("get list watch update", "batch", "cronjobs"),
                rule("get list watch create update delete patch", "batch", "jobs"),
                rule("update", "batch", "cronjobs/status"),
                rule("update", "batch", "cronjobs/finalizers"),
                rule("list watch delete", "core", "pods"),
            ],
            true,
        ),
        c(
            "daemon-set-controller",
            vec![
                rule(READ, "apps extensions", "daemonsets"),
                rule("update", "apps extensions", "daemonsets/status"),
                rule("update", "apps extensions", "daemonsets/finalizers"),
                rule("list watch", "core", "nodes"),
                rule("list watch create delete patch", "core", "pods"),
                rule("create", "core", "pods/binding"),
                rule(
                    "get list watch create delete update patch",
                    "apps",
                    "controllerrevisions",
                ),
            ],
            true,
        ),
        c(
            "deployment-controller",
            vec![
                rule("get list watch update", "apps extensions", "deployments"),
                rule("update", "apps extensions", "deployments/status"),
                rule("update", "apps extensions", "deployments/finalizers"),
                rule(
                    "get list watch create update patch delete",
                    "apps extensions",
                    "replicasets",
                ),
                // Pods are listed to decide when a Recreate rollout may go on.
                rule("get list watch update", "core", "pods"),
            ],
            true,
        ),
        c(
            "disruption-controller",
            vec![
                rule(READ, "apps extensions", "deployments"),
                rule(READ, "apps extensions", "replicasets"),
                rule(READ, "core", "replicationcontrollers"),
                rule(READ, "policy", "poddisruptionbudgets"),
                rule(READ, "apps", "statefulsets"),
                rule("update", "policy", "poddisruptionbudgets/status"),
                rule("patch update", "core", "pods/status"),
                rule("get", "*", "*/scale"),
            ],
            true,
        ),
        c(
            "endpoint-controller",
            vec![
                rule(READ, "core", "services pods"),
                rule("get list watch create update delete", "core", "endpoints"),
                rule("create", "core", "endpoints/restricted"),
            ],
            true,
        ),
        c(
            "endpointslice-controller",
            vec![
                rule(READ, "core", "services pods nodes"),
                rule("update", "core", "services/finalizers"),
                rule(
                    "create delete get list update watch",
                    "discovery.k8s.io",
                    "endpointslices",
                ),
            ],
            true,
        ),
        c(
            "endpointslicemirroring-controller",
            vec![
                rule(READ, "core", "services endpoints"),
                rule("update", "core", "services/finalizers"),
                rule("update", "core", "endpoints/finalizers"),
                rule(
                    "create delete get list update watch",
                    "discovery.k8s.io",
                    "endpointslices",
                ),
            ],
            true,
        ),
        c(
            "expand-controller",
            vec![
                rule("get list watch update patch", "core", "persistentvolumes"),
                rule("update patch", "core", "persistentvolumeclaims/status"),
                rule(READ, "core", "persistentvolumeclaims"),
            ],
            true,
        ),
        c(
            "ephemeral-volume-controller",
            vec![
                rule(READ, "core", "pods"),
                rule("update", "core", "pods/finalizers"),
                rule("get list watch create", "core", "persistentvolumeclaims"),
            ],
            true,
        ),
        c(
            "generic-garbage-collector",
            vec![rule("get list watch patch update delete", "*", "*")],
            true,
        ),
        c(
            "horizontal-pod-autoscaler",
            vec![
                rule(READ, "autoscaling", "horizontalpodautoscalers"),
                rule("update", "autoscaling", "horizontalpodautoscalers/status"),
                rule("get update", "*", "*/scale"),
                rule("list", "core", "pods"),
                rule("list", "metrics.k8s.io", "pods"),
                rule("get list", "custom.metrics.k8s.io", "*"),
                rule("get list", "external.metrics.k8s.io", "*"),
            ],
            true,
        ),
        c(
            "job-controller",
            vec![
                rule("get list watch update patch", "batch", "jobs"),
                rule("update", "batch", "jobs/status"),
                rule("update", "batch", "jobs/finalizers"),
                rule("list watch create delete patch", "core", "pods"),
            ],
            true,
        ),
        c(
            "namespace-controller",
            vec![
                rule("get list watch delete", "core", "namespaces"),
                rule("update", "core", "namespaces/finalize namespaces/status"),
                rule("get list watch delete deletecollection", "*", "*"),
            ],
            false,
        ),
        c(
            "node-controller",
            vec![
                rule("get list update delete patch watch", "core", "nodes"),
                rule("patch update", "core", "nodes/status"),
                rule("patch update", "core", "pods/status"),
                rule("list watch delete get", "core", "pods"),
            ],
            true,
        ),
        c(
            "persistent-volume-binder",
            vec![
                rule(
                    "get list watch update create delete",
                    "core",
                    "persistentvolumes",
                ),
                rule("update", "core", "persistentvolumes/status"),
                rule("get list watch update", "core", "persistentvolumeclaims"),
                rule("update", "core", "persistentvolumeclaims/status"),
                rule("list watch get create delete", "core", "pods"),
                rule(READ, "storage.k8s.io", "storageclasses"),
                rule("list watch", "core", "nodes"),
                event_rule(),
                rule("watch", "core", "events"),
            ],
            false,
        ),
        c(
            "pod-garbage-collector",
            vec![
                rule("list watch delete", "core", "pods"),
                rule(READ, "core", "nodes"),
                rule("patch", "core", "pods/status"),
            ],
            false,
        ),
        c(
            "replicaset-controller",
            vec![
                rule("get list watch update", "apps extensions", "replicasets"),
                rule("update", "apps extensions", "replicasets/status"),
                rule("update", "apps extensions", "replicasets/finalizers"),
                rule("list watch patch create delete", "core", "pods"),
            ],
            true,
        ),
        c(
            "replication-controller",
            vec![
                rule("get list watch update", "core", "replicationcontrollers"),
                rule("update", "core", "replicationcontrollers/status"),
                rule("update", "core", "replicationcontrollers/finalizers"),
                rule("list watch patch create delete", "core", "pods"),
            ],
            true,
        ),
        c(
            "resourcequota-controller",
            vec![
                rule("list watch", "*", "*"),
                rule("update", "core", "resourcequotas/status"),
            ],
            true,
        ),
        c(
            "route-controller",
            vec![
                rule("list watch", "core", "nodes"),
                rule("patch", "core", "nodes/status"),
            ],
            true,
        ),
        c(
            "service-account-controller",
            vec![rule("create", "core", "serviceaccounts")],
            true,
        ),
        c(
            "service-controller",
            vec![
                rule(READ, "core", "services"),
                rule("patch update", "core", "services/status"),
                rule("list watch", "core", "nodes"),
            ],
            true,
        ),
        c(
            "statefulset-controller",
            vec![
                rule("list watch", "core", "pods"),
                rule(READ, "apps", "statefulsets"),
                rule("update", "apps", "statefulsets/status"),
                rule("update", "apps", "statefulsets/finalizers"),
                rule("get create delete update patch", "core", "pods"),
                rule(
                    "get create delete update patch list watch",
                    "apps",
                    "controllerrevisions",
                ),
                rule("get create list watch", "core", "persistentvolumeclaims"),
                rule("update delete", "core", "persistentvolumeclaims"),
                rule("update", "core", "pods/finalizers"),
            ],
            true,
        ),
        c(
            "ttl-controller",
            vec![rule("update patch list watch", "core", "nodes")],
            true,
        ),
        c(
            "certificate-controller",
            vec![
                rule(
                    "get list watch delete",
                    "certificates.k8s.io",
                    "certificatesigningrequests",
                ),
                rule(
                    "update",
                    "certificates.k8s.io",
                    "certificatesigningrequests/status certificatesigningrequests/approval",
                ),
                named(
                    "approve",
                    "certificates.k8s.io",
                    "signers",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                ),
                named(
                    "sign",
                    "certificates.k8s.io",
                    "signers",
                    "kubernetes.io/legacy-unknown kubernetes.io/kube-apiserver-client kubernetes.io/kube-apiserver-client-kubelet kubernetes.io/kubelet-serving",
                ),
                rule("create", "authorization.k8s.io", "subjectaccessreviews"),
            ],
            true,
        ),
        c(
            "pvc-protection-controller",
            vec![
                rule("get list watch update", "core", "persistentvolumeclaims"),
                rule("update", "core", "persistentvolumeclaims/status"),
                rule(READ, "core", "pods"),
            ],
            true,
        ),
        c(
            "pv-protection-controller",
            vec![rule("get list watch update", "core", "persistentvolumes")],
            true,
        ),
        c(
            "ttl-after-finished-controller",
            vec![rule("get list watch delete", "batch", "jobs")],
            true,
        ),
        c(
            "root-ca-cert-publisher",
            vec![rule("create update", "core", "configmaps")],
            true,
        ),
        c(
            "legacy-service-account-token-cleaner",
            vec![
                named(
                    "get",
                    "core",
                    "configmaps",
                    "kube-apiserver-legacy-service-account-token-tracking",
                ),
                rule("delete patch", "core", "secrets"),
            ],
            false,
        ),
        c(
            "validatingadmissionpolicy-status-controller",
            vec![
                rule(
                    READ,
                    "admissionregistration.k8s.io",
                    "validatingadmissionpolicies",
                ),
                rule(
                    "get patch update",
                    "admissionregistration.k8s.io",
                    "validatingadmissionpolicies/status",
                ),
            ],
            true,
        ),
        c(
            "service-cidrs-controller",
            vec![
                rule(
                    "get list watch patch update",
                    "networking.k8s.io",
                    "servicecidrs",
                ),
                rule(
                    "patch update",
                    "networking.k8s.io",
                    "servicecidrs/finalizers",
                ),
                rule("patch update", "networking.k8s.io", "servicecidrs/status"),
                rule(READ, "networking.k8s.io", "ipaddresses"),
            ],
            true,
        ),
    ]
}

/// Upstream `ControllerRoleBindings()`: each controller role bound to the
/// controller's service account in `kube-system`.
pub fn controller_role_bindings() -> Vec<ClusterRoleBinding> {
    controller_roles()
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .map(|name| {
            let sa = name
                .strip_prefix("system:controller:")
                .unwrap_or(&name)
                .to_string();
            cluster_binding(&name, vec![service_account("kube-system", &sa)])
        })
        .collect()
}

/// Ferrokube's addition: each controller role also bound to the controller
/// manager's own user. Upstream's kube-controller-manager runs each controller with
/// its service account's token (`--use-service-account-credentials`); without that
/// flag "it runs all control loops using its own credential, which must be granted
/// all the relevant roles" (upstream RBAC docs). Ferrokube's controller-manager uses
/// one client, so these bindings grant exactly the per-controller roles, no more.
pub fn controller_manager_bindings() -> Vec<ClusterRoleBinding> {
    controller_roles()
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .map(|role| {
            let controller = role.strip_prefix("system:controller:").unwrap_or(&role);
            ClusterRoleBinding {
                metadata: meta(
                    None,
                    &format!("ferrokube:kube-controller-manager:{controller}"),
                    &[],
                ),
                role_ref: role_ref("ClusterRole", &role),
                subjects: Some(vec![user("system:kube-controller-manager")]),
            }
        })
        .collect()
}

/// Upstream `NamespaceRoles()`.
pub fn namespace_roles() -> Vec<Role> {
    let role = |ns: &str, name: &str, rules: Vec<PolicyRule>| Role {
        metadata: meta(Some(ns), name, &[]),
        rules: Some(rules),
    };
    let leader = || {
        vec![
            rule(
                "get list watch create update",
                "coordination.k8s.io",
                "leases",
            ),
            rule(
                "get list watch create update",
                "coordination.k8s.io",
                "leasecandidates",
            ),
        ]
    };
    vec![
        role(
            "kube-system",
            "extension-apiserver-authentication-reader",
            vec![named(
                READ,
                "core",
                "configmaps",
                "extension-apiserver-authentication",
            )],
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            leader(),
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            leader(),
        ),
        role(
            "kube-system",
            "system:controller:bootstrap-signer",
            vec![rule(READ, "core", "secrets")],
        ),
        role(
            "kube-system",
            "system:controller:cloud-provider",
            vec![rule("create get list watch", "core", "configmaps")],
        ),
        role(
            "kube-system",
            "system:controller:token-cleaner",
            vec![
                rule("delete get list watch", "core", "secrets"),
                event_rule(),
            ],
        ),
        role(
            "kube-public",
            "system:controller:bootstrap-signer",
            vec![
                rule(READ, "core", "configmaps"),
                named("update", "core", "configmaps", "cluster-info"),
                event_rule(),
            ],
        ),
    ]
}

/// Upstream `NamespaceRoleBindings()`.
pub fn namespace_role_bindings() -> Vec<RoleBinding> {
    let binding = |ns: &str, name: &str, role: &str, subjects: Vec<Subject>| RoleBinding {
        metadata: meta(Some(ns), name, &[]),
        role_ref: role_ref("Role", role),
        subjects: Some(subjects),
    };
    vec![
        binding(
            "kube-system",
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            vec![
                user("system:kube-controller-manager"),
                user("system:kube-scheduler"),
            ],
        ),
        binding(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            vec![
                user("system:kube-controller-manager"),
                service_account("kube-system", "kube-controller-manager"),
                service_account("kube-system", "leader-election-controller"),
            ],
        ),
        binding(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            vec![
                user("system:kube-scheduler"),
                service_account("kube-system", "kube-scheduler"),
            ],
        ),
        binding(
            "kube-system",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            vec![service_account("kube-system", "bootstrap-signer")],
        ),
        binding(
            "kube-system",
            "system:controller:cloud-provider",
            "system:controller:cloud-provider",
            vec![service_account("kube-system", "cloud-provider")],
        ),
        binding(
            "kube-system",
            "system:controller:token-cleaner",
            "system:controller:token-cleaner",
            vec![service_account("kube-system", "token-cleaner")],
        ),
        binding(
            "kube-public",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            vec![service_account("kube-system", "bootstrap-signer")],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_bindings_point_at_roles() {
        let roles: Vec<String> = cluster_roles()
            .into_iter()
            .chain(controller_roles())
            .filter_map(|r| r.metadata.name)
            .collect();
        let set: HashSet<&String> = roles.iter().collect();
        assert_eq!(set.len(), roles.len());
        for b in cluster_role_bindings()
            .into_iter()
            .chain(controller_role_bindings())
        {
            assert!(set.contains(&b.role_ref.name), "{:?}", b.metadata.name);
        }
        let ns_roles: HashSet<(String, String)> = namespace_roles()
            .into_iter()
            .map(|r| (r.metadata.namespace.unwrap(), r.metadata.name.unwrap()))
            .collect();
        for b in namespace_role_bindings() {
            let key = (b.metadata.namespace.unwrap(), b.role_ref.name);
            assert!(ns_roles.contains(&key), "{key:?}");
        }
        for name in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:basic-user",
            "system:discovery",
            "system:public-info-viewer",
            "system:kube-scheduler",
            "system:kube-controller-manager",
            "system:node",
            "system:node-proxier",
            "system:controller:replicaset-controller",
        ] {
            assert!(set.contains(&name.to_string()), "{name}");
        }
    }

    #[test]
    fn every_object_carries_label_and_autoupdate() {
        for r in cluster_roles() {
            let m = r.metadata;
            assert_eq!(m.labels.unwrap()[BOOTSTRAPPING_LABEL], "rbac-defaults");
            assert_eq!(m.annotations.unwrap()[AUTOUPDATE_ANNOTATION], "true");
        }
    }
}
