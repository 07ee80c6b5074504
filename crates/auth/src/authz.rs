//! Authorization: may this user do this (`k8s.io/apiserver/pkg/authorization`).

use ferrokube_apimachinery::labels::Requirement as LabelRequirement;

use crate::request_info::{FieldRequirement, RequestInfo};
use crate::user::{ALL_AUTHENTICATED, SYSTEM_PRIVILEGED_GROUP, UserInfo};

/// What is being asked (upstream `authorizer.AttributesRecord`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: UserInfo,
    /// Kube verb for resource requests (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`, `proxy`); lowercase HTTP method otherwise.
    pub verb: String,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub resource_request: bool,
    /// The (decoded) URL path.
    pub path: String,
    /// A list's, watch's or deletecollection's field selector (see
    /// [`RequestInfo::field_selector`]).
    pub field_selector: Vec<FieldRequirement>,
    /// Its label selector (see [`RequestInfo::label_selector`]).
    pub label_selector: Vec<LabelRequirement>,
}

impl Attributes {
    /// Attributes of a request from its parsed [`RequestInfo`] and its user.
    pub fn from_request_info(user: UserInfo, info: &RequestInfo) -> Self {
        Attributes {
            user,
            verb: info.verb.clone(),
            namespace: info.namespace.clone(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            resource: info.resource.clone(),
            subresource: info.subresource.clone(),
            name: info.name.clone(),
            resource_request: info.is_resource_request,
            path: info.path.clone(),
            field_selector: info.field_selector.clone(),
            label_selector: info.label_selector.clone(),
        }
    }

    /// Whether the verb only reads (`get`, `list`, `watch`), as upstream `IsReadOnly`.
    pub fn is_read_only(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list" | "watch")
    }
}

/// An authorizer's answer, each with its reason as upstream's `Authorize` returns it
/// (often empty): an allow's reaches the audit annotation and a SubjectAccessReview,
/// a refusal's the 403 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    /// Explicitly forbidden.
    Deny(String),
    /// No opinion: the next authorizer in a chain decides; at the end of the chain it
    /// means forbidden.
    NoOpinion(String),
}

impl Decision {
    /// Allowed, with no reason given.
    pub fn allow() -> Self {
        Decision::Allow(String::new())
    }

    /// No opinion, with no reason given.
    pub fn no_opinion() -> Self {
        Decision::NoOpinion(String::new())
    }

    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    pub fn is_no_opinion(&self) -> bool {
        matches!(self, Decision::NoOpinion(_))
    }

    /// Why, if the authorizer said (`""` otherwise).
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow(r) | Decision::Deny(r) | Decision::NoOpinion(r) => r,
        }
    }
}

/// Authorizes a request.
pub trait Authorizer: Send + Sync {
    fn authorize(&self, attrs: &Attributes) -> Decision;
}

impl<T: Authorizer + ?Sized> Authorizer for Box<T> {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        (**self).authorize(attrs)
    }
}

impl<T: Authorizer + ?Sized> Authorizer for std::sync::Arc<T> {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        (**self).authorize(attrs)
    }
}

/// `--authorization-mode=AlwaysAllow`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AlwaysAllowAuthorizer;

impl Authorizer for AlwaysAllowAuthorizer {
    fn authorize(&self, _attrs: &Attributes) -> Decision {
        Decision::allow()
    }
}

/// `--authorization-mode=AlwaysDeny`: no opinion, with the reason "Everything is
/// forbidden.", as upstream (a later authorizer in the chain may still allow).
#[derive(Debug, Clone, Copy, Default)]
pub struct AlwaysDenyAuthorizer;

impl Authorizer for AlwaysDenyAuthorizer {
    fn authorize(&self, _attrs: &Attributes) -> Decision {
        Decision::NoOpinion("Everything is forbidden.".to_string())
    }
}

/// Allows any user in `system:authenticated`; no opinion otherwise. Ferrokube's
/// stand-in until RBAC lands (not an upstream mode).
#[derive(Debug, Clone, Copy, Default)]
pub struct AuthenticatedOnlyAuthorizer;

impl Authorizer for AuthenticatedOnlyAuthorizer {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        if attrs.user.in_group(ALL_AUTHENTICATED) {
            Decision::allow()
        } else {
            Decision::no_opinion()
        }
    }
}

/// Allows members of any of the given groups; no opinion otherwise. The apiserver
/// puts one for `system:masters` first in its chain (upstream
/// `authorizerfactory.NewPrivilegedGroups`).
#[derive(Debug, Clone)]
pub struct PrivilegedGroupsAuthorizer {
    groups: Vec<String>,
}

impl PrivilegedGroupsAuthorizer {
    pub fn new(groups: impl IntoIterator<Item = impl Into<String>>) -> Self {
        PrivilegedGroupsAuthorizer {
            groups: groups.into_iter().map(Into::into).collect(),
        }
    }

    /// `system:masters` only.
    pub fn system_masters() -> Self {
        Self::new([SYSTEM_PRIVILEGED_GROUP])
    }
}

impl Authorizer for PrivilegedGroupsAuthorizer {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        if self.groups.iter().any(|g| attrs.user.in_group(g)) {
            Decision::allow()
        } else {
            Decision::no_opinion()
        }
    }
}

/// One entry of `--authorization-mode` (upstream's mode names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    AlwaysDeny,
    Node,
    Rbac,
    /// `Webhook`: a remote service answers SubjectAccessReviews
    /// (`--authorization-webhook-config-file`).
    Webhook,
}

impl AuthorizationMode {
    /// The mode's name in flags and files (`RBAC`, `Node`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::AlwaysDeny => "AlwaysDeny",
            AuthorizationMode::Node => "Node",
            AuthorizationMode::Rbac => "RBAC",
            AuthorizationMode::Webhook => "Webhook",
        }
    }

    /// Parses a comma-separated list in order; unknown and repeated modes are errors,
    /// with upstream's messages.
    pub fn parse_list(s: &str) -> Result<Vec<AuthorizationMode>, String> {
        let mut out = Vec::new();
        for m in s.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let mode = match m {
                "AlwaysAllow" => AuthorizationMode::AlwaysAllow,
                "AlwaysDeny" => AuthorizationMode::AlwaysDeny,
                "Node" => AuthorizationMode::Node,
                "RBAC" => AuthorizationMode::Rbac,
                "Webhook" => AuthorizationMode::Webhook,
                "ABAC" => {
                    return Err(format!("authorization-mode {m:?} is not supported"));
                }
                other => {
                    return Err(format!(
                        "authorization-mode {other:?} is not a valid mode; valid modes: AlwaysAllow, AlwaysDeny, Node, RBAC, Webhook"
                    ));
                }
            };
            if out.contains(&mode) {
                return Err(format!(
                    "authorization-mode {m:?} has mode specified more than once"
                ));
            }
            out.push(mode);
        }
        if out.is_empty() {
            return Err("at least one authorization-mode must be passed".into());
        }
        Ok(out)
    }
}

/// The `--authorization-mode` chain: asks each authorizer in order; the first
/// `Allow` or `Deny` is the answer; all no-opinion (or an empty chain) is
/// `NoOpinion` with their reasons, one per line (upstream's `unionAuthzHandler`).
#[derive(Default)]
pub struct UnionAuthorizer {
    authorizers: Vec<Box<dyn Authorizer>>,
}

impl std::fmt::Debug for UnionAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnionAuthorizer")
            .field("authorizers", &self.authorizers.len())
            .finish()
    }
}

impl UnionAuthorizer {
    pub fn new(authorizers: Vec<Box<dyn Authorizer>>) -> Self {
        UnionAuthorizer { authorizers }
    }

    /// Appends an authorizer to the chain.
    pub fn push(mut self, authorizer: impl Authorizer + 'static) -> Self {
        self.authorizers.push(Box::new(authorizer));
        self
    }
}

impl Authorizer for UnionAuthorizer {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        let mut reasons = Vec::new();
        for authorizer in &self.authorizers {
            match authorizer.authorize(attrs) {
                Decision::NoOpinion(reason) => {
                    if !reason.is_empty() {
                        reasons.push(reason);
                    }
                }
                decided => return decided,
            }
        }
        Decision::NoOpinion(reasons.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(user: UserInfo) -> Attributes {
        Attributes {
            user,
            verb: "get".into(),
            resource: "pods".into(),
            resource_request: true,
            ..Attributes::default()
        }
    }

    struct Fixed(Decision);
    impl Authorizer for Fixed {
        fn authorize(&self, _: &Attributes) -> Decision {
            self.0.clone()
        }
    }

    #[test]
    fn simple_authorizers() {
        let alice = UserInfo::new("alice", [ALL_AUTHENTICATED]);
        let anon = UserInfo::anonymous();
        let admin = UserInfo::new("admin", [SYSTEM_PRIVILEGED_GROUP, ALL_AUTHENTICATED]);
        assert_eq!(
            AlwaysAllowAuthorizer.authorize(&attrs(anon.clone())),
            Decision::allow()
        );
        assert_eq!(
            AlwaysDenyAuthorizer.authorize(&attrs(admin.clone())),
            Decision::NoOpinion("Everything is forbidden.".into())
        );
        assert_eq!(
            AuthenticatedOnlyAuthorizer.authorize(&attrs(alice.clone())),
            Decision::allow()
        );
        assert_eq!(
            AuthenticatedOnlyAuthorizer.authorize(&attrs(anon.clone())),
            Decision::no_opinion()
        );
        let masters = PrivilegedGroupsAuthorizer::system_masters();
        assert_eq!(masters.authorize(&attrs(admin)), Decision::allow());
        assert_eq!(masters.authorize(&attrs(alice)), Decision::no_opinion());
    }

    #[test]
    fn union_respects_order_and_first_decision() {
        let a = attrs(UserInfo::new("u", Vec::<String>::new()));
        let deny = || Fixed(Decision::Deny("no".into()));
        let chain = UnionAuthorizer::default()
            .push(Fixed(Decision::no_opinion()))
            .push(deny())
            .push(AlwaysAllowAuthorizer);
        assert_eq!(chain.authorize(&a), Decision::Deny("no".into()));
        let chain = UnionAuthorizer::default()
            .push(Fixed(Decision::no_opinion()))
            .push(AlwaysAllowAuthorizer)
            .push(deny());
        assert_eq!(chain.authorize(&a), Decision::allow());
        let chain = UnionAuthorizer::new(vec![Box::new(Fixed(Decision::no_opinion()))]);
        assert_eq!(chain.authorize(&a), Decision::no_opinion());
        let because = |r: &str| Fixed(Decision::NoOpinion(r.into()));
        let chain = UnionAuthorizer::default()
            .push(because("first"))
            .push(Fixed(Decision::no_opinion()))
            .push(because("second"));
        assert_eq!(
            chain.authorize(&a),
            Decision::NoOpinion("first\nsecond".into())
        );
        let chain = UnionAuthorizer::default()
            .push(because("first"))
            .push(Fixed(Decision::Allow("granted".into())));
        assert_eq!(chain.authorize(&a), Decision::Allow("granted".into()));
        assert_eq!(
            UnionAuthorizer::default().authorize(&a),
            Decision::no_opinion()
        );
        assert!(!Decision::no_opinion().is_allowed());
    }

    #[test]
    fn authorization_modes_parse_in_order() {
        assert_eq!(
            AuthorizationMode::parse_list("Node,RBAC").unwrap(),
            vec![AuthorizationMode::Node, AuthorizationMode::Rbac]
        );
        assert_eq!(
            AuthorizationMode::parse_list("RBAC, AlwaysAllow").unwrap(),
            vec![AuthorizationMode::Rbac, AuthorizationMode::AlwaysAllow]
        );
        assert!(AuthorizationMode::parse_list("RBAC,RBAC").is_err());
        assert!(AuthorizationMode::parse_list("rbac").is_err());
        assert!(AuthorizationMode::parse_list("").is_err());
    }

    #[test]
    fn read_only_verbs() {
        let mut a = attrs(UserInfo::default());
        for (verb, ro) in [
            ("get", true),
            ("list", true),
            ("watch", true),
            ("create", false),
            ("patch", false),
        ] {
            a.verb = verb.into();
            assert_eq!(a.is_read_only(), ro, "{verb}");
        }
    }
}
