//! The audit policy (upstream `k8s.io/apiserver/pkg/apis/audit/v1` `Policy`, its
//! validation in `pkg/apis/audit/validation` and its evaluation in
//! `pkg/audit/policy/checker.go`): the first rule that matches a request decides its
//! level and omitted stages; no match is level `None`.
//!
//! audit.k8s.io has no k8s-openapi types (it is not a served API), so the file's shape
//! is declared here. As upstream's reader after its strict decoding fails, unknown
//! fields are ignored.

use serde::Deserialize;

/// How much of a request is recorded (upstream `audit.Level`), in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }

    fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "None" => Level::None,
            "Metadata" => Level::Metadata,
            "Request" => Level::Request,
            "RequestResponse" => Level::RequestResponse,
            _ => return None,
        })
    }
}

/// When in a request's life an event is written (upstream `audit.Stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    const ALL: [Stage; 4] = [
        Stage::RequestReceived,
        Stage::ResponseStarted,
        Stage::ResponseComplete,
        Stage::Panic,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }

    fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// What the policy decided for one request (upstream `RequestAuditConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RequestAuditConfig {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl RequestAuditConfig {
    pub(crate) fn records(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit_stages.contains(&stage)
    }
}

/// The parts of a request a rule looks at (upstream `authorizer.Attributes`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestFacts<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    pub resource_request: bool,
    pub namespace: &'a str,
    pub api_group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
    pub path: &'a str,
}

/// A loaded, validated policy.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
    omit_managed_fields: bool,
}

#[derive(Clone, Debug)]
struct Rule {
    level: Level,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    non_resource_urls: Vec<String>,
    omit_stages: Vec<Stage>,
    omit_managed_fields: Option<bool>,
}

/// The file's shape (audit.k8s.io/v1 `Policy`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct PolicyFile {
    api_version: String,
    kind: String,
    rules: Vec<RuleFile>,
    omit_stages: Vec<String>,
    omit_managed_fields: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RuleFile {
    level: String,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>, // "" matches cluster-scoped requests
    #[serde(rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    omit_stages: Vec<String>,
    omit_managed_fields: Option<bool>,
}

#[derive(Deserialize, Default, Clone, Debug)]
#[serde(rename_all = "camelCase", default)]
struct GroupResources {
    group: String,
    resources: Vec<String>,
    resource_names: Vec<String>,
}

impl Policy {
    /// Parses and validates a policy file's text (YAML or JSON). The error says what is
    /// wrong with upstream's field paths.
    pub(crate) fn parse(text: &str) -> Result<Policy, String> {
        let file: PolicyFile =
            serde_yaml_ng::from_str(text).map_err(|e| format!("failed decoding: {e}"))?;
        if file.api_version != "audit.k8s.io/v1" || file.kind != "Policy" {
            return Err(format!(
                "unknown group version field {:?} kind {:?} in policy: want apiVersion \
                 \"audit.k8s.io/v1\" and kind \"Policy\"",
                file.api_version, file.kind
            ));
        }
        let mut errors = Vec::new();
        let omit_stages = stages(&file.omit_stages, "omitStages", &mut errors);
        let mut rules = Vec::new();
        for (i, r) in file.rules.into_iter().enumerate() {
            let path = format!("rules[{i}]");
            let level = match Level::parse(&r.level) {
                Some(l) => l,
                None if r.level.is_empty() => {
                    errors.push(format!("{path}.level: Required value"));
                    Level::None
                }
                None => {
                    errors.push(format!(
                        "{path}.level: Unsupported value: {:?}: supported values: \"None\", \
                         \"Metadata\", \"Request\", \"RequestResponse\"",
                        r.level
                    ));
                    Level::None
                }
            };
            if !r.non_resource_urls.is_empty()
                && (!r.resources.is_empty() || !r.namespaces.is_empty())
            {
                errors.push(format!(
                    "{path}.nonResourceURLs: Invalid value: {:?}: rules cannot apply to both \
                     regular resources and non-resource URLs",
                    r.non_resource_urls
                ));
            }
            for (j, url) in r.non_resource_urls.iter().enumerate() {
                let field = format!("{path}.nonResourceURLs[{j}]");
                if !url.starts_with('/') && url != "*" {
                    errors.push(format!(
                        "{field}: Invalid value: {url:?}: non-resource URL rules must begin \
                         with a '/' character"
                    ));
                }
                if url.find('*').is_some_and(|at| at != url.len() - 1) {
                    errors.push(format!(
                        "{field}: Invalid value: {url:?}: non-resource URL wildcards '*' must \
                         be the final character of the rule"
                    ));
                }
            }
            for (j, gr) in r.resources.iter().enumerate() {
                let field = format!("{path}.resources[{j}]");
                if !gr.group.is_empty() {
                    let msgs =
                        ferrokube_apimachinery::validation::name_is_dns_subdomain(&gr.group, false);
                    if !msgs.is_empty() {
                        errors.push(format!(
                            "{field}.group: Invalid value: {:?}: {}",
                            gr.group,
                            msgs.join(",")
                        ));
                    }
                }
                if !gr.resource_names.is_empty() {
                    for (k, res) in gr.resources.iter().enumerate() {
                        if res.contains('*') {
                            errors.push(format!(
                                "{field}.resources[{k}]: Invalid value: {res:?}: using \
                                 resource names with wildcard is not allowed"
                            ));
                        }
                    }
                }
            }
            let omit = stages(&r.omit_stages, &format!("{path}.omitStages"), &mut errors);
            rules.push(Rule {
                level,
                users: r.users,
                user_groups: r.user_groups,
                verbs: r.verbs,
                resources: r.resources,
                namespaces: r.namespaces,
                non_resource_urls: r.non_resource_urls,
                omit_stages: omit,
                omit_managed_fields: r.omit_managed_fields,
            });
        }
        if !errors.is_empty() {
            return Err(errors.join(", "));
        }
        if rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        Ok(Policy {
            rules,
            omit_stages,
            omit_managed_fields: file.omit_managed_fields,
        })
    }

    /// Upstream `policyRuleEvaluator.EvaluatePolicyRule`: the first matching rule's
    /// level, its omitted stages with the policy's, and its `omitManagedFields` (else the
    /// policy's); `None` when no rule matches.
    pub(crate) fn evaluate(&self, r: &RequestFacts<'_>) -> RequestAuditConfig {
        for rule in &self.rules {
            if rule.matches(r) {
                let mut omit_stages = self.omit_stages.clone();
                for s in &rule.omit_stages {
                    if !omit_stages.contains(s) {
                        omit_stages.push(*s);
                    }
                }
                return RequestAuditConfig {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                };
            }
        }
        RequestAuditConfig {
            level: Level::None,
            omit_stages: self.omit_stages.clone(),
            omit_managed_fields: false,
        }
    }
}

fn stages(names: &[String], path: &str, errors: &mut Vec<String>) -> Vec<Stage> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match Stage::parse(name) {
            Some(s) => out.push(s),
            None => errors.push(format!(
                "{path}[{i}]: Invalid value: {name:?}: allowed stages are \"RequestReceived\", \
                 \"ResponseStarted\", \"ResponseComplete\", \"Panic\""
            )),
        }
    }
    out
}

impl Rule {
    /// Upstream `ruleMatches`.
    fn matches(&self, r: &RequestFacts<'_>) -> bool {
        if !self.users.is_empty() && !self.users.iter().any(|u| u == r.user) {
            return false;
        }
        if !self.user_groups.is_empty() && !self.user_groups.iter().any(|g| r.groups.contains(g)) {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.iter().any(|v| v == r.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(r);
        }
        if !self.non_resource_urls.is_empty() {
            return !r.resource_request
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(r.path, spec));
        }
        true
    }

    /// Upstream `ruleMatchesResource`: `resource/subresource`, `*`, `*/subresource` and
    /// `resource/*`, within resourceNames when given.
    fn matches_resource(&self, r: &RequestFacts<'_>) -> bool {
        if !r.resource_request {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == r.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = if r.subresource.is_empty() {
            r.resource.to_string()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        self.resources
            .iter()
            .filter(|gr| gr.group == r.api_group)
            .any(|gr| {
                gr.resources.is_empty()
                    || gr.resources.iter().any(|res| {
                        (gr.resource_names.is_empty()
                            || gr.resource_names.iter().any(|n| n == r.name))
                            && (*res == combined
                                || res == "*"
                                || (!r.subresource.is_empty()
                                    && res.strip_prefix("*/") == Some(r.subresource))
                                || res.strip_suffix("/*") == Some(r.resource))
                    })
            })
    }
}

/// Upstream `pathMatches`: `*`, exact, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(verb: &'a str, resource: &'a str, sub: &'a str, ns: &'a str) -> RequestFacts<'a> {
        RequestFacts {
            user: "alice",
            groups: &[],
            verb,
            resource_request: true,
            namespace: ns,
            api_group: "",
            resource,
            subresource: sub,
            name: "n",
            path: "/api/v1/x",
        }
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:kube-proxy"]
  - level: Metadata
    resources: [{group: "", resources: ["secrets", "pods/log"]}]
  - level: RequestResponse
    resources: [{group: "", resources: ["configmaps"], resourceNames: ["cm1"]}]
    omitStages: ["ResponseStarted"]
  - level: Request
    resources: [{group: "", resources: ["*/status"]}]
  - level: Request
    namespaces: ["kube-system"]
  - level: Metadata
    nonResourceURLs: ["/healthz*", "/version"]
"#;

    #[test]
    fn first_matching_rule_decides() {
        let p = Policy::parse(POLICY).unwrap();
        let secrets = p.evaluate(&facts("get", "secrets", "", "default"));
        assert_eq!(secrets.level, Level::Metadata);
        assert_eq!(secrets.omit_stages, vec![Stage::RequestReceived]);
        assert_eq!(
            p.evaluate(&facts("get", "pods", "log", "default")).level,
            Level::Metadata
        );
        // pods/log is listed, plain pods is not.
        assert_eq!(
            p.evaluate(&facts("get", "pods", "", "default")).level,
            Level::None
        );
        let mut cm1 = facts("update", "configmaps", "", "default");
        cm1.name = "cm1";
        let cm = p.evaluate(&cm1);
        assert_eq!(cm.level, Level::RequestResponse);
        assert_eq!(
            cm.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted]
        );
        let mut other_name = facts("update", "configmaps", "", "default");
        other_name.name = "cm2";
        assert_eq!(p.evaluate(&other_name).level, Level::None);
        assert_eq!(
            p.evaluate(&facts("update", "pods", "status", "default"))
                .level,
            Level::Request
        );
        assert_eq!(
            p.evaluate(&facts("list", "pods", "", "kube-system")).level,
            Level::Request
        );
        let mut proxy = facts("get", "secrets", "", "default");
        proxy.user = "system:kube-proxy";
        assert_eq!(p.evaluate(&proxy).level, Level::None);
        let mut health = facts("get", "", "", "");
        health.resource_request = false;
        health.path = "/healthz/etcd";
        assert_eq!(p.evaluate(&health).level, Level::Metadata);
        health.path = "/version/x";
        assert_eq!(p.evaluate(&health).level, Level::None);
    }

    #[test]
    fn groups_and_verbs_narrow_a_rule() {
        let p = Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Request\n  \
             userGroups: [admins]\n  verbs: [create]\n- level: Metadata\n",
        )
        .unwrap();
        let groups = vec!["admins".to_string()];
        let mut f = facts("create", "pods", "", "default");
        assert_eq!(p.evaluate(&f).level, Level::Metadata);
        f.groups = &groups;
        assert_eq!(p.evaluate(&f).level, Level::Request);
        f.verb = "get";
        assert_eq!(p.evaluate(&f).level, Level::Metadata);
    }

    #[test]
    fn invalid_policies_say_what_is_wrong() {
        let err = |text: &str| Policy::parse(text).unwrap_err();
        let head = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";
        assert!(
            err(&format!("{head}rules:\n- level: Everything\n")).contains(
                "rules[0].level: Unsupported value: \"Everything\": supported values: \"None\""
            )
        );
        assert!(
            err(&format!("{head}rules:\n- verbs: [get]\n"))
                .contains("rules[0].level: Required value")
        );
        assert!(err(&format!("{head}rules: []\n")).contains("loaded illegal policy with 0 rules"));
        assert!(
            err(&format!(
                "{head}omitStages: [Done]\nrules:\n- level: None\n"
            ))
            .contains("omitStages[0]: Invalid value: \"Done\"")
        );
        assert!(
            err(&format!(
                "{head}rules:\n- level: Metadata\n  nonResourceURLs: [\"/a\"]\n  namespaces: [x]\n"
            ))
            .contains("rules cannot apply to both regular resources and non-resource URLs")
        );
        assert!(
            err(&format!(
                "{head}rules:\n- level: Metadata\n  nonResourceURLs: [\"/a*b\"]\n"
            ))
            .contains("must be the final character")
        );
        assert!(err(&format!(
            "{head}rules:\n- level: Metadata\n  resources: [{{resources: [\"*\"], resourceNames: [a]}}]\n"
        ))
        .contains("using resource names with wildcard is not allowed"));
        assert!(
            err("apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: None\n")
                .contains("unknown group version")
        );
        assert!(err("rules: [").contains("failed decoding"));
    }
}
