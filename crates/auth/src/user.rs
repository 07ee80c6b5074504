//! The authenticated user (`k8s.io/apiserver/pkg/authentication/user`).

use std::collections::BTreeMap;

/// `system:anonymous`: the user of a request with no credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// `system:authenticated`: added to every authenticated (non-anonymous) user.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// `system:unauthenticated`: the anonymous user's group.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// `system:masters`: members bypass authorization.
pub const SYSTEM_PRIVILEGED_GROUP: &str = "system:masters";
/// `system:nodes`: kubelets.
pub const NODES_GROUP: &str = "system:nodes";
/// Extra key carrying an identifier of the credential used (e.g. `X509SHA256=<hex>`).
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// Who made a request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups, no uid and no extra.
    pub fn new(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        UserInfo {
            name: name.into(),
            groups: groups.into_iter().map(Into::into).collect(),
            ..UserInfo::default()
        }
    }

    /// The anonymous user: `system:anonymous`, group `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo::new(ANONYMOUS, [ALL_UNAUTHENTICATED])
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Upstream's `AuthenticatedGroupAdder`: appends `system:authenticated` unless the
    /// user is `system:anonymous` or already carries `system:authenticated` or
    /// `system:unauthenticated`.
    pub fn with_authenticated_group(mut self) -> Self {
        if self.name != ANONYMOUS
            && !self
                .groups
                .iter()
                .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED)
        {
            self.groups.push(ALL_AUTHENTICATED.to_string());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_adder_rules() {
        let u = UserInfo::new("alice", ["dev"]).with_authenticated_group();
        assert_eq!(u.groups, vec!["dev", ALL_AUTHENTICATED]);
        // Idempotent.
        assert_eq!(u.clone().with_authenticated_group(), u);
        assert_eq!(
            UserInfo::anonymous().with_authenticated_group(),
            UserInfo::anonymous()
        );
        let weird = UserInfo::new("bob", [ALL_UNAUTHENTICATED]).with_authenticated_group();
        assert_eq!(weird.groups, vec![ALL_UNAUTHENTICATED]);
        let anon_named = UserInfo::new(ANONYMOUS, Vec::<String>::new()).with_authenticated_group();
        assert!(anon_named.groups.is_empty());
    }
}
