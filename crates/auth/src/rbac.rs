//! RBAC with upstream semantics (`plugin/pkg/auth/authorizer/rbac` and
//! `pkg/registry/rbac/validation`): rule matching, the rules a user holds through
//! bindings, the authorizer, and the "covers" check behind escalation prevention.
//!
//! The roles and bindings come from an [`RbacSource`] (the apiserver builds an
//! [`RbacSnapshot`] from its watch cache); this module does no IO.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

use crate::authz::{Attributes, Authorizer, Decision};
use crate::user::UserInfo;
use ferrokube_apimachinery::errors::go_quote;

/// `*` in verbs, apiGroups, resources and nonResourceURLs.
pub const ALL: &str = "*";
/// Prefix of service account user names (`system:serviceaccount:<ns>:<name>`).
pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";

/// One binding: which role, for whom.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub name: String,
    /// `""` for a ClusterRoleBinding.
    pub namespace: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

/// The binding and subject that granted a rule, written as upstream's binding
/// describers write it (`ClusterRoleBinding "x" of ClusterRole "y" to Group "z"`).
#[derive(Debug, Clone, Copy)]
pub struct RuleSource<'a> {
    pub binding: &'a Binding,
    pub subject: &'a Subject,
}

impl std::fmt::Display for RuleSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Binding {
            name,
            namespace,
            role_ref,
            ..
        } = self.binding;
        let (kind, name) = if namespace.is_empty() {
            ("ClusterRoleBinding", go_quote(name))
        } else {
            ("RoleBinding", go_quote(&format!("{name}/{namespace}")))
        };
        let subject = self.subject;
        let subject_name = if subject.kind == "ServiceAccount" {
            let ns = subject.namespace.as_deref().filter(|ns| !ns.is_empty());
            format!("{}/{}", subject.name, ns.unwrap_or(namespace))
        } else {
            subject.name.clone()
        };
        write!(
            f,
            "{kind} {name} of {} {} to {} {}",
            role_ref.kind,
            go_quote(&role_ref.name),
            subject.kind,
            go_quote(&subject_name)
        )
    }
}

/// A rule a user holds, or why a binding's rules could not be read (upstream's
/// visitor gets one or the other).
pub type VisitedRule<'a> = Result<(RuleSource<'a>, &'a PolicyRule), UnresolvedRole>;

/// Why a role reference gives no rules (upstream `GetRoleReferenceRules`' errors).
/// Upstream words a missing role as whoever looked it up: the authorizer's listers
/// name the resource in the singular, the RBAC registry's checks in the plural.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnresolvedRole {
    /// `kind` is `Role` or `ClusterRole`.
    Missing {
        kind: &'static str,
        name: String,
    },
    UnsupportedKind(String),
}

impl UnresolvedRole {
    /// As the authorizer's listers say it (`clusterrole.rbac.authorization.k8s.io "x"
    /// not found`).
    pub fn lister_message(&self) -> String {
        self.message("")
    }

    /// As the registry says it (`clusterroles.rbac.authorization.k8s.io "x" not
    /// found`): the RBAC storage's escalation and binding checks.
    pub fn registry_message(&self) -> String {
        self.message("s")
    }

    /// The missing role's resource (`roles`, `clusterroles`), if it is missing.
    pub fn missing_resource(&self) -> Option<(&'static str, &str)> {
        match self {
            UnresolvedRole::Missing { kind: "Role", name } => Some(("roles", name)),
            UnresolvedRole::Missing { name, .. } => Some(("clusterroles", name)),
            UnresolvedRole::UnsupportedKind(_) => None,
        }
    }

    fn message(&self, plural: &str) -> String {
        match self {
            UnresolvedRole::Missing { kind, name } => format!(
                "{}{plural}.rbac.authorization.k8s.io {} not found",
                kind.to_ascii_lowercase(),
                go_quote(name)
            ),
            UnresolvedRole::UnsupportedKind(kind) => {
                format!("unsupported role reference kind: {}", go_quote(kind))
            }
        }
    }
}

/// Every Role, ClusterRole and binding, indexed for lookups.
#[derive(Debug, Default, Clone)]
pub struct RbacSnapshot {
    cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>>,
    roles: HashMap<(String, String), Arc<Vec<PolicyRule>>>,
    cluster_role_bindings: Vec<Binding>,
    role_bindings: HashMap<String, Vec<Binding>>,
}

impl RbacSnapshot {
    pub fn add_cluster_role(&mut self, role: ClusterRole) {
        let name = role.metadata.name.unwrap_or_default();
        self.cluster_roles
            .insert(name, Arc::new(role.rules.unwrap_or_default()));
    }

    pub fn add_role(&mut self, role: Role) {
        let ns = role.metadata.namespace.unwrap_or_default();
        let name = role.metadata.name.unwrap_or_default();
        self.roles
            .insert((ns, name), Arc::new(role.rules.unwrap_or_default()));
    }

    pub fn add_cluster_role_binding(&mut self, b: ClusterRoleBinding) {
        self.cluster_role_bindings.push(Binding {
            name: b.metadata.name.unwrap_or_default(),
            namespace: String::new(),
            role_ref: b.role_ref,
            subjects: b.subjects.unwrap_or_default(),
        });
    }

    pub fn add_role_binding(&mut self, b: RoleBinding) {
        let ns = b.metadata.namespace.unwrap_or_default();
        self.role_bindings
            .entry(ns.clone())
            .or_default()
            .push(Binding {
                name: b.metadata.name.unwrap_or_default(),
                namespace: ns,
                role_ref: b.role_ref,
                subjects: b.subjects.unwrap_or_default(),
            });
    }

    /// The rules a role reference points at (`namespace` for a `Role` reference;
    /// upstream `GetRoleReferenceRules`).
    pub fn role_ref_rules(
        &self,
        role_ref: &RoleRef,
        namespace: &str,
    ) -> Result<Arc<Vec<PolicyRule>>, UnresolvedRole> {
        let (found, kind) = match role_ref.kind.as_str() {
            "ClusterRole" => (self.cluster_roles.get(&role_ref.name), "ClusterRole"),
            "Role" => (
                self.roles
                    .get(&(namespace.to_string(), role_ref.name.clone())),
                "Role",
            ),
            other => return Err(UnresolvedRole::UnsupportedKind(other.to_string())),
        };
        found.cloned().ok_or_else(|| UnresolvedRole::Missing {
            kind,
            name: role_ref.name.clone(),
        })
    }

    /// Visits every rule `user` holds in `namespace` (cluster-wide bindings first, then
    /// the namespace's; `""` for cluster scope only), and every binding of the user's
    /// whose role is missing, until `visit` returns false (upstream `VisitRulesFor`).
    pub fn visit_rules_for(
        &self,
        user: &UserInfo,
        namespace: &str,
        visit: &mut dyn FnMut(VisitedRule<'_>) -> bool,
    ) {
        let namespaced = if namespace.is_empty() {
            None
        } else {
            self.role_bindings.get(namespace)
        };
        let bindings = self
            .cluster_role_bindings
            .iter()
            .chain(namespaced.into_iter().flatten());
        for binding in bindings {
            let Some(subject) = applying_subject(&binding.subjects, user, &binding.namespace)
            else {
                continue;
            };
            match self.role_ref_rules(&binding.role_ref, &binding.namespace) {
                Ok(rules) => {
                    let source = RuleSource { binding, subject };
                    for rule in rules.iter() {
                        if !visit(Ok((source, rule))) {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if !visit(Err(e)) {
                        return;
                    }
                }
            }
        }
    }

    /// Every rule `user` holds in `namespace` (upstream `RulesFor`), and the errors
    /// met resolving the user's bindings.
    pub fn rules_for(
        &self,
        user: &UserInfo,
        namespace: &str,
    ) -> (Vec<PolicyRule>, Vec<UnresolvedRole>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        self.visit_rules_for(user, namespace, &mut |visited| {
            match visited {
                Ok((_, rule)) => rules.push(rule.clone()),
                Err(e) => errors.push(e),
            }
            true
        });
        (rules, errors)
    }

    /// The names of the ClusterRoles, for aggregation.
    pub fn cluster_role_names(&self) -> impl Iterator<Item = &str> {
        self.cluster_roles.keys().map(String::as_str)
    }
}

/// Where the RBAC authorizer gets roles and bindings from.
pub trait RbacSource: Send + Sync {
    fn snapshot(&self) -> Arc<RbacSnapshot>;
}

impl RbacSource for Arc<RbacSnapshot> {
    fn snapshot(&self) -> Arc<RbacSnapshot> {
        self.clone()
    }
}

/// Whether any subject names the user (upstream `appliesToUser`). Service account
/// subjects without a namespace take the binding's.
pub fn applies_to(subjects: &[Subject], user: &UserInfo, binding_namespace: &str) -> bool {
    applying_subject(subjects, user, binding_namespace).is_some()
}

/// The first of `subjects` that is `user` (upstream `appliesTo`).
fn applying_subject<'a>(
    subjects: &'a [Subject],
    user: &UserInfo,
    binding_namespace: &str,
) -> Option<&'a Subject> {
    subjects.iter().find(|s| match s.kind.as_str() {
        "User" => s.name == user.name,
        "Group" => user.in_group(&s.name),
        "ServiceAccount" => {
            let ns = match s.namespace.as_deref() {
                Some(ns) if !ns.is_empty() => ns,
                _ => binding_namespace,
            };
            !ns.is_empty() && user.name == service_account_user(ns, &s.name)
        }
        _ => false,
    })
}

/// `system:serviceaccount:<namespace>:<name>`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}")
}

fn has(list: &[String], s: &str) -> bool {
    list.iter().any(|x| x == s)
}

fn opt(list: &Option<Vec<String>>) -> &[String] {
    list.as_deref().unwrap_or(&[])
}

/// Whether `rule` allows the request (upstream `RuleAllows`).
pub fn rule_allows(attrs: &Attributes, rule: &PolicyRule) -> bool {
    let verbs = &rule.verbs;
    if !(has(verbs, ALL) || has(verbs, &attrs.verb)) {
        return false;
    }
    if attrs.resource_request {
        let combined = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let groups = opt(&rule.api_groups);
        (has(groups, ALL) || has(groups, &attrs.api_group))
            && resource_matches(opt(&rule.resources), &combined, &attrs.subresource)
            && resource_name_matches(opt(&rule.resource_names), &attrs.name)
    } else {
        opt(&rule.non_resource_urls)
            .iter()
            .any(|u| non_resource_url_covers(u, &attrs.path))
    }
}

fn resource_matches(rule_resources: &[String], combined: &str, subresource: &str) -> bool {
    rule_resources.iter().any(|r| {
        r == ALL
            || r == combined
            || (!subresource.is_empty()
                && r.len() == subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(subresource))
    })
}

fn resource_name_matches(names: &[String], name: &str) -> bool {
    names.is_empty() || has(names, name)
}

/// `*` matches everything; a rule URL ending in `*` matches by prefix.
fn non_resource_url_covers(rule_url: &str, requested: &str) -> bool {
    rule_url == ALL
        || rule_url == requested
        || rule_url
            .strip_suffix('*')
            .is_some_and(|prefix| requested.starts_with(prefix))
}

/// Whether any of `rules` allows the request.
pub fn rules_allow(attrs: &Attributes, rules: &[PolicyRule]) -> bool {
    rules.iter().any(|r| rule_allows(attrs, r))
}

/// `--authorization-mode=RBAC`.
pub struct RbacAuthorizer<S> {
    source: S,
}

impl<S: RbacSource> RbacAuthorizer<S> {
    pub fn new(source: S) -> Self {
        RbacAuthorizer { source }
    }

    pub fn source(&self) -> &S {
        &self.source
    }
}

impl<S> std::fmt::Debug for RbacAuthorizer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RbacAuthorizer")
    }
}

impl<S: RbacSource> Authorizer for RbacAuthorizer<S> {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        let snapshot = self.source.snapshot();
        let mut allowed_by = None;
        let mut errors = Vec::new();
        snapshot.visit_rules_for(&attrs.user, &attrs.namespace, &mut |visited| {
            match visited {
                Ok((source, rule)) if rule_allows(attrs, rule) => {
                    allowed_by = Some(source.to_string());
                    return false;
                }
                Ok(_) => {}
                Err(e) => errors.push(e.lister_message()),
            }
            true
        });
        match allowed_by {
            Some(source) => Decision::Allow(format!("RBAC: allowed by {source}")),
            None if errors.is_empty() => Decision::no_opinion(),
            None => Decision::NoOpinion(format!("RBAC: {}", aggregate_errors(&errors))),
        }
    }
}

/// Several errors as one, as apimachinery's `utilerrors.NewAggregate` prints them:
/// one alone as itself, more as `[a, b]` with repeats left out.
pub fn aggregate_errors(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Whether `owner` covers every permission in `servant` (upstream
/// `validation.Covers`); the second value lists the uncovered atomic rules.
pub fn covers(owner: &[PolicyRule], servant: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let mut missing = Vec::new();
    for rule in servant {
        for sub in breakdown(rule) {
            if !owner.iter().any(|o| rule_covers(o, &sub)) {
                missing.push(sub);
            }
        }
    }
    (missing.is_empty(), missing)
}

/// One rule per verb x group x resource x resourceName, and per verb x URL
/// (upstream `BreakdownRule`).
pub fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let one = |s: &String| Some(vec![s.clone()]);
    for group in opt(&rule.api_groups) {
        for resource in opt(&rule.resources) {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: vec![verb.clone()],
                    ..PolicyRule::default()
                };
                if opt(&rule.resource_names).is_empty() {
                    out.push(base);
                } else {
                    for n in opt(&rule.resource_names) {
                        out.push(PolicyRule {
                            resource_names: one(n),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for url in opt(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: vec![verb.clone()],
                ..PolicyRule::default()
            });
        }
    }
    out
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups =
        has(opt(&owner.api_groups), ALL) || has_all(opt(&owner.api_groups), opt(&sub.api_groups));
    let resources = resource_covers_all(opt(&owner.resources), opt(&sub.resources));
    let urls = opt(&sub.non_resource_urls).iter().all(|u| {
        opt(&owner.non_resource_urls)
            .iter()
            .any(|o| non_resource_url_covers(o, u))
    });
    let names = if opt(&sub.resource_names).is_empty() {
        opt(&owner.resource_names).is_empty()
    } else {
        opt(&owner.resource_names).is_empty()
            || has_all(opt(&owner.resource_names), opt(&sub.resource_names))
    };
    verbs && groups && resources && urls && names
}

fn resource_covers_all(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

/// A compact text form of rules for escalation messages, as upstream prints them
/// (`{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`).
pub fn describe_rule(r: &PolicyRule) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut parts = Vec::new();
    if !opt(&r.api_groups).is_empty() {
        parts.push(format!("APIGroups:[{}]", list(opt(&r.api_groups))));
    }
    if !opt(&r.resources).is_empty() {
        parts.push(format!("Resources:[{}]", list(opt(&r.resources))));
    }
    if !opt(&r.resource_names).is_empty() {
        parts.push(format!("ResourceNames:[{}]", list(opt(&r.resource_names))));
    }
    if !opt(&r.non_resource_urls).is_empty() {
        parts.push(format!(
            "NonResourceURLs:[{}]",
            list(opt(&r.non_resource_urls))
        ));
    }
    parts.push(format!("Verbs:[{}]", list(&r.verbs)));
    format!("{{{}}}", parts.join(", "))
}

/// Upstream `ConfirmNoEscalation`: `Err(message)` when `user` does not hold every
/// rule in `rules` in `namespace`.
pub fn confirm_no_escalation(
    snapshot: &RbacSnapshot,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (owned, errors) = snapshot.rules_for(user, namespace);
    let (ok, missing) = covers(&owned, rules);
    if ok {
        return Ok(());
    }
    let missing: Vec<String> = missing.iter().map(describe_rule).collect();
    // Go's `%q` of a string slice: `["a" "b"]`.
    let groups: Vec<String> = user.groups.iter().map(|g| go_quote(g)).collect();
    let mut message = format!(
        "user {} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        groups.join(" "),
        missing.join("\n")
    );
    if !errors.is_empty() {
        // Go's `%v` of a one-element slice holding the aggregate; the RBAC storage
        // resolves through the registry.
        let errors: Vec<String> = errors
            .iter()
            .map(UnresolvedRole::registry_message)
            .collect();
        message.push_str(&format!(
            "; resolution errors: [{}]",
            aggregate_errors(&errors)
        ));
    }
    Err(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    pub(crate) fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        PolicyRule {
            verbs: v(verbs),
            api_groups: Some(v(groups)),
            resources: Some(v(resources)),
            ..PolicyRule::default()
        }
    }

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            user: UserInfo::new("alice", ["dev"]),
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: "ns".into(),
            resource_request: true,
            ..Attributes::default()
        }
    }

    #[test]
    fn rule_matching_follows_upstream() {
        let r = rule(&["get", "list"], &[""], &["pods", "pods/log"]);
        assert!(rule_allows(&attrs("get", "", "pods", "", "p"), &r));
        assert!(rule_allows(&attrs("get", "", "pods", "log", "p"), &r));
        assert!(!rule_allows(&attrs("get", "", "pods", "exec", "p"), &r));
        assert!(!rule_allows(&attrs("create", "", "pods", "", ""), &r));
        assert!(!rule_allows(&attrs("get", "apps", "pods", "", "p"), &r));
        let star = rule(&["*"], &["*"], &["*"]);
        assert!(rule_allows(
            &attrs("escalate", "x.io", "things", "sub", "n"),
            &star
        ));
        let any_scale = rule(&["get"], &["*"], &["*/scale"]);
        assert!(rule_allows(
            &attrs("get", "apps", "deployments", "scale", "d"),
            &any_scale
        ));
        assert!(!rule_allows(
            &attrs("get", "apps", "deployments", "", "d"),
            &any_scale
        ));
        // `pods/*` is not a wildcard upstream.
        let pods_any = rule(&["get"], &[""], &["pods/*"]);
        assert!(!rule_allows(
            &attrs("get", "", "pods", "log", "p"),
            &pods_any
        ));
        let mut named = rule(&["get", "update"], &[""], &["configmaps"]);
        named.resource_names = Some(vec!["a".into()]);
        assert!(rule_allows(
            &attrs("get", "", "configmaps", "", "a"),
            &named
        ));
        assert!(!rule_allows(
            &attrs("get", "", "configmaps", "", "b"),
            &named
        ));
        assert!(!rule_allows(
            &attrs("list", "", "configmaps", "", ""),
            &named
        ));
    }

    #[test]
    fn non_resource_urls() {
        let r = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: Some(vec!["/healthz".into(), "/apis/*".into()]),
            ..PolicyRule::default()
        };
        let mut a = Attributes {
            verb: "get".into(),
            path: "/healthz".into(),
            ..Attributes::default()
        };
        assert!(rule_allows(&a, &r));
        a.path = "/apis/apps/v1".into();
        assert!(rule_allows(&a, &r));
        a.path = "/apis".into();
        assert!(!rule_allows(&a, &r));
        a.path = "/healthz/etcd".into();
        assert!(!rule_allows(&a, &r));
        a.verb = "post".into();
        a.path = "/healthz".into();
        assert!(!rule_allows(&a, &r));
    }

    fn meta(ns: Option<&str>, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            ..ObjectMeta::default()
        }
    }

    fn subject(kind: &str, name: &str, ns: Option<&str>) -> Subject {
        Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(Into::into),
            api_group: None,
        }
    }

    fn role_ref(kind: &str, name: &str) -> RoleRef {
        RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn bindings_grant_in_scope() {
        let mut s = RbacSnapshot::default();
        s.add_cluster_role(ClusterRole {
            metadata: meta(None, "reader"),
            rules: Some(vec![rule(&["get"], &[""], &["pods"])]),
            ..ClusterRole::default()
        });
        s.add_role(Role {
            metadata: meta(Some("ns"), "writer"),
            rules: Some(vec![rule(&["create"], &[""], &["pods"])]),
        });
        s.add_role_binding(RoleBinding {
            metadata: meta(Some("ns"), "b1"),
            role_ref: role_ref("ClusterRole", "reader"),
            subjects: Some(vec![subject("Group", "dev", None)]),
        });
        s.add_role_binding(RoleBinding {
            metadata: meta(Some("ns"), "b2"),
            role_ref: role_ref("Role", "writer"),
            subjects: Some(vec![subject("ServiceAccount", "robot", None)]),
        });
        let authz = RbacAuthorizer::new(Arc::new(s));
        let a = attrs("get", "", "pods", "", "p");
        assert_eq!(
            authz.authorize(&a),
            Decision::Allow(
                r#"RBAC: allowed by RoleBinding "b1/ns" of ClusterRole "reader" to Group "dev""#
                    .into()
            )
        );
        let mut other_ns = a.clone();
        other_ns.namespace = "other".into();
        assert_eq!(authz.authorize(&other_ns), Decision::no_opinion());
        let mut robot = attrs("create", "", "pods", "", "");
        assert_eq!(authz.authorize(&robot), Decision::no_opinion());
        robot.user = UserInfo::new(service_account_user("ns", "robot"), Vec::<String>::new());
        assert_eq!(
            authz.authorize(&robot),
            Decision::Allow(
                r#"RBAC: allowed by RoleBinding "b2/ns" of Role "writer" to ServiceAccount "robot/ns""#
                    .into()
            )
        );
    }

    /// A binding whose role is missing: upstream's lister errors become the reason
    /// of the refusal, and of a refused escalation.
    #[test]
    fn missing_roles_are_the_reason() {
        let mut s = RbacSnapshot::default();
        s.add_cluster_role_binding(ClusterRoleBinding {
            metadata: meta(None, "gone"),
            role_ref: role_ref("ClusterRole", "ghost"),
            subjects: Some(vec![subject("User", "alice", None)]),
        });
        s.add_cluster_role(ClusterRole {
            metadata: meta(None, "reader"),
            rules: Some(vec![rule(&["get"], &[""], &["pods"])]),
            ..ClusterRole::default()
        });
        s.add_cluster_role_binding(ClusterRoleBinding {
            metadata: meta(None, "read"),
            role_ref: role_ref("ClusterRole", "reader"),
            subjects: Some(vec![subject("Group", "dev", None)]),
        });
        s.add_role_binding(RoleBinding {
            metadata: meta(Some("ns"), "local"),
            role_ref: role_ref("Role", "absent"),
            subjects: Some(vec![subject("Group", "dev", None)]),
        });
        let snapshot = Arc::new(s);
        let authz = RbacAuthorizer::new(snapshot.clone());
        assert_eq!(
            authz.authorize(&attrs("delete", "", "pods", "", "p")),
            Decision::NoOpinion(
                r#"RBAC: [clusterrole.rbac.authorization.k8s.io "ghost" not found, role.rbac.authorization.k8s.io "absent" not found]"#
                    .into()
            )
        );
        let mut cluster = attrs("delete", "", "nodes", "", "n");
        cluster.namespace.clear();
        assert_eq!(
            authz.authorize(&cluster),
            Decision::NoOpinion(
                r#"RBAC: clusterrole.rbac.authorization.k8s.io "ghost" not found"#.into()
            )
        );
        // An allow is not held back by another binding's missing role.
        assert_eq!(
            authz.authorize(&attrs("get", "", "pods", "", "p")),
            Decision::Allow(
                r#"RBAC: allowed by ClusterRoleBinding "read" of ClusterRole "reader" to Group "dev""#
                    .into()
            )
        );
        let alice = UserInfo::new("alice", ["dev"]);
        let err =
            confirm_no_escalation(&snapshot, &alice, "", &[rule(&["list"], &[""], &["pods"])])
                .unwrap_err();
        assert!(
            err.ends_with(
                r#"; resolution errors: [clusterroles.rbac.authorization.k8s.io "ghost" not found]"#
            ),
            "{err}"
        );
        assert_eq!(
            aggregate_errors(&["a".into(), "b".into(), "a".into()]),
            "[a, b]"
        );
        assert_eq!(aggregate_errors(&["a".into(), "a".into()]), "a");
    }

    #[test]
    fn covers_breaks_rules_down() {
        let owner = vec![
            rule(&["get", "list"], &[""], &["pods", "*/status"]),
            PolicyRule {
                verbs: vec!["get".into()],
                non_resource_urls: Some(vec!["/api/*".into()]),
                ..PolicyRule::default()
            },
        ];
        assert!(covers(&owner, &[rule(&["get"], &[""], &["pods"])]).0);
        assert!(covers(&owner, &[rule(&["list"], &[""], &["deployments/status"])]).0);
        let (ok, missing) = covers(&owner, &[rule(&["get", "delete"], &[""], &["pods"])]);
        assert!(!ok);
        assert_eq!(missing, vec![rule(&["delete"], &[""], &["pods"])]);
        let mut named = rule(&["get"], &[""], &["pods"]);
        named.resource_names = Some(vec!["x".into()]);
        assert!(covers(&owner, &[named.clone()]).0);
        // A name-restricted owner does not cover the unrestricted rule.
        assert!(!covers(&[named], &[rule(&["get"], &[""], &["pods"])]).0);
        let url = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: Some(vec!["/api/v1".into()]),
            ..PolicyRule::default()
        };
        assert!(covers(&owner, &[url]).0);
        assert!(
            covers(
                &[rule(&["*"], &["*"], &["*"])],
                &[rule(&["escalate"], &["x"], &["y/z"])]
            )
            .0
        );
    }

    #[test]
    fn escalation_message_names_missing_rules() {
        let s = RbacSnapshot::default();
        let err = confirm_no_escalation(
            &s,
            &UserInfo::new("bob", ["g"]),
            "ns",
            &[rule(&["get"], &[""], &["secrets"])],
        )
        .unwrap_err();
        assert!(err.starts_with("user \"bob\" (groups=[\"g\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"), "{err}");
    }
}
