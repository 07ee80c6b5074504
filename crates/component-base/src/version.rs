//! The version every Ferrokube binary reports as upstream's `k8s.io/component-base/version`
//! does, and client-go's default `User-Agent` built from it.

/// The Kubernetes release the binaries speak for (`/version`'s `gitVersion`, a node's
/// `kubeletVersion`).
pub const GIT_VERSION: &str = "v1.33.0";

/// `/version`'s `gitCommit`.
pub const GIT_COMMIT: &str = "ferrokube";

/// client-go's `DefaultKubernetesUserAgent`: `kube-controller-manager/v1.33.0
/// (linux/amd64) kubernetes/ferroku` for the program `program` (a path; its last
/// component is taken). The apiserver names a writer that gives no field manager by
/// the part before the first `/`, so a component's writes are recorded as its own
/// in `managedFields`, as upstream's are.
pub fn default_user_agent(program: &str) -> String {
    let command = match program.rsplit('/').next() {
        Some(c) if !c.is_empty() => c,
        _ => "unknown",
    };
    // Upstream keeps a commit's first 7 characters.
    let commit: String = GIT_COMMIT.chars().take(7).collect();
    format!(
        "{command}/{GIT_VERSION} ({}/{}) kubernetes/{commit}",
        std::env::consts::OS,
        go_arch(std::env::consts::ARCH)
    )
}

/// Go's name of a CPU architecture (`GOARCH`) for Rust's.
fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_as_client_go_builds_it() {
        let ua = default_user_agent("/usr/local/bin/kube-controller-manager");
        assert!(
            ua.starts_with("kube-controller-manager/v1.33.0 (linux/"),
            "{ua}"
        );
        assert!(ua.ends_with(") kubernetes/ferroku"), "{ua}");
        assert!(default_user_agent("").starts_with("unknown/v1.33.0 "));
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
    }
}
