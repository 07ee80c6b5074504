//! The node labels a kubelet may set itself (upstream `k8s.io/kubelet/pkg/apis`'
//! well-known labels): the NodeRestriction admission plugin lets a kubelet touch no
//! other `kubernetes.io`/`k8s.io` label, and the kubelet refuses others in
//! `--node-labels`.

/// Labels a kubelet sets itself (upstream `kubeletLabels`), sorted.
pub const KUBELET_LABELS: [&str; 11] = [
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// Label namespaces (and their subdomains) a kubelet may use (upstream
/// `kubeletLabelNamespaces`), sorted.
pub const KUBELET_LABEL_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The namespace of a label key: what precedes its `/` (`""` without one).
pub fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

/// Whether `namespace` is `domain` or a subdomain of it.
pub fn in_namespace(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// A label in the `kubernetes.io` or `k8s.io` namespaces or their subdomains.
pub fn is_kubernetes_label(key: &str) -> bool {
    let namespace = label_namespace(key);
    in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io")
}

/// Upstream `IsKubeletLabel`.
pub fn is_kubelet_label(key: &str) -> bool {
    let namespace = label_namespace(key);
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|allowed| in_namespace(namespace, allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_labels_as_upstream() {
        for own in [
            "kubernetes.io/hostname",
            "node.kubernetes.io/exclude-from-external-load-balancers",
            "a.kubelet.kubernetes.io/b",
        ] {
            assert!(is_kubernetes_label(own) && is_kubelet_label(own), "{own}");
        }
        for foreign in ["node-role.kubernetes.io/worker", "k8s.io/x", "a.k8s.io/y"] {
            assert!(
                is_kubernetes_label(foreign) && !is_kubelet_label(foreign),
                "{foreign}"
            );
        }
        assert!(!is_kubernetes_label("example.com/team"));
        assert!(!is_kubernetes_label("notkubernetes.io/x"));
        assert!(!is_kubernetes_label("plain"));
        assert!(KUBELET_LABELS.is_sorted());
    }
}
