//! The ValidatingAdmissionPolicy status controller (upstream
//! `pkg/controller/validatingadmissionpolicystatus` with the type checker of
//! `plugin/policy/validating/typechecking.go`): for a policy whose
//! `status.observedGeneration` is behind its generation, checks the field references
//! of each validation's `expression` and `messageExpression` against the schemas of
//! the kinds its `matchConstraints` name (and of its `paramKind`), and writes
//! `status.typeChecking.expressionWarnings` (fieldRef `spec.validations[i].expression`,
//! warning `<group/version, Kind=K>: ERROR: <input>:l:c: undefined field 'f' ...`)
//! and `status.observedGeneration`.
//!
//! As upstream, the kinds come from the resource rules without wildcards (at most
//! ten), resolved through the apiserver's discovery, and the schemas from its OpenAPI
//! v3 documents; a kind without a schema is skipped, and type checking never changes
//! what a policy admits. The checking itself is [`ferrokube_cel::typecheck`]: field
//! paths, not upstream's full CEL type checker.
//!
//! Pure part: [`kinds_to_check`], [`warnings`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    ExpressionWarning, ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec,
};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use ferrokube_cel::environments::{Compiler, Options, Returns};
use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::{Action, Controller, Result, done_unless_failed, enqueue_live};

/// Upstream `maxTypesToCheck`.
const MAX_KINDS_TO_CHECK: usize = 10;

/// A group, version and resource (plural) named by a policy's rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupVersionResource {
    pub group: String,
    pub version: String,
    pub resource: String,
}

/// A kind with its group and version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupVersionKind {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl std::fmt::Display for GroupVersionKind {
    /// Upstream `schema.GroupVersionKind.String()`: `apps/v1, Kind=Deployment`,
    /// `/v1, Kind=Pod` for the core group.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// Upstream `typesToCheck` before the REST mapping: the resources of
/// `matchConstraints.resourceRules`, skipping rules with wildcard groups or versions
/// and wildcard or subresource resources, each rule's combinations in sorted order.
pub fn kinds_to_check(spec: &ValidatingAdmissionPolicySpec) -> Vec<GroupVersionResource> {
    let mut out = Vec::new();
    let rules = spec
        .match_constraints
        .as_ref()
        .and_then(|m| m.resource_rules.as_ref());
    for rule in rules.into_iter().flatten() {
        let mut groups = rule.api_groups.clone().unwrap_or_default();
        let mut versions = rule.api_versions.clone().unwrap_or_default();
        if groups.iter().chain(&versions).any(|s| s.contains('*')) {
            continue;
        }
        let mut resources: Vec<String> = rule
            .resources
            .iter()
            .flatten()
            .filter(|r| !r.contains('*') && !r.contains('/'))
            .cloned()
            .collect();
        groups.sort();
        versions.sort();
        resources.sort();
        for group in &groups {
            for version in &versions {
                for resource in &resources {
                    out.push(GroupVersionResource {
                        group: group.clone(),
                        version: version.clone(),
                        resource: resource.clone(),
                    });
                }
            }
        }
    }
    out
}

/// An OpenAPI v3 document's `components.schemas` and the schema of one kind in it.
pub struct KindSchema {
    pub gvk: GroupVersionKind,
    pub components: serde_json::Map<String, Value>,
    /// The key of the kind's schema in `components`.
    pub name: String,
}

impl KindSchema {
    /// Finds `gvk` in an OpenAPI v3 document by its `x-kubernetes-group-version-kind`.
    pub fn find(document: &Value, gvk: &GroupVersionKind) -> Option<KindSchema> {
        let components = document.pointer("/components/schemas")?.as_object()?;
        let name = components.iter().find_map(|(name, schema)| {
            let listed = schema
                .get("x-kubernetes-group-version-kind")?
                .as_array()?
                .iter()
                .any(|g| {
                    g["group"].as_str().unwrap_or("") == gvk.group
                        && g["version"].as_str() == Some(gvk.version.as_str())
                        && g["kind"].as_str() == Some(gvk.kind.as_str())
                });
            listed.then(|| name.clone())
        })?;
        Some(KindSchema {
            gvk: gvk.clone(),
            components: components.clone(),
            name,
        })
    }

    fn schema(&self) -> Option<&Value> {
        self.components.get(&self.name)
    }
}

/// Upstream `TypeChecker.Check`: the warnings of `spec`'s validations against each of
/// `kinds` (with `params` as the schema of `params`), upstream's fieldRefs and texts.
pub fn warnings(
    spec: &ValidatingAdmissionPolicySpec,
    kinds: &[KindSchema],
    params: Option<&KindSchema>,
) -> Vec<ExpressionWarning> {
    let mut out = Vec::new();
    // Each kind's components with the params' added, so the $refs of params resolve in
    // the params' own document: merged once, not per expression.
    let components: Vec<serde_json::Map<String, Value>> = kinds
        .iter()
        .map(|kind| {
            let mut merged = kind.components.clone();
            for (k, v) in params.iter().flat_map(|p| &p.components) {
                merged.entry(k.clone()).or_insert_with(|| v.clone());
            }
            merged
        })
        .collect();
    // Upstream compiles the variables for each kind, then each expression with them
    // (`object` of the kind's type): a type checking compiler declares `variables`
    // whether the policy has any or not.
    let options = Options {
        has_params: spec.param_kind.is_some(),
        has_authorizer: true,
    };
    let compilers: Vec<Compiler<'_>> = kinds
        .iter()
        .zip(&components)
        .map(|(kind, components)| {
            let params = params.and_then(KindSchema::schema);
            let mut compiler = Compiler::typed(kind.schema(), params, components).with_variables();
            for v in spec.variables.iter().flatten() {
                let _ = compiler.compile_variable(&v.name, &v.expression, options);
            }
            compiler
        })
        .collect();
    let check = |expression: &str| -> Option<String> {
        let mut results = Vec::new();
        for (kind, compiler) in kinds.iter().zip(&compilers) {
            if let Err(e) = compiler.compile(expression, options, Returns::Any) {
                // The type checker reports cel-go's issues as they are.
                let issues = e.0.strip_prefix("compilation failed: ").unwrap_or(&e.0);
                results.push(format!("{}: {issues}\n", kind.gvk));
            }
        }
        (!results.is_empty()).then(|| results.join("\n"))
    };
    for (i, v) in spec.validations.iter().flatten().enumerate() {
        if let Some(warning) = check(&v.expression) {
            out.push(ExpressionWarning {
                field_ref: format!("spec.validations[{i}].expression"),
                warning,
            });
        }
        if let Some(me) = v.message_expression.as_deref().filter(|m| !m.is_empty())
            && let Some(warning) = check(me)
        {
            out.push(ExpressionWarning {
                field_ref: format!("spec.validations[{i}].messageExpression"),
                warning,
            });
        }
    }
    out
}

/// The controller.
pub struct VapStatusController {
    client: kube::Client,
    policies: Store<ValidatingAdmissionPolicy>,
}

fn needs_check(p: &ValidatingAdmissionPolicy) -> bool {
    let observed = p
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or(0);
    p.metadata.generation.unwrap_or(0) > observed
}

impl VapStatusController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(VapStatusController {
            client,
            policies: factory.informer::<ValidatingAdmissionPolicy>().store(),
        })
    }

    /// The JSON document at `path`, fetched once per reconcile (`fetched` keeps it, or
    /// that there is none).
    async fn document<'a>(
        &self,
        path: String,
        fetched: &'a mut BTreeMap<String, Option<Value>>,
    ) -> Option<&'a Value> {
        if !fetched.contains_key(&path) {
            let request = http::Request::get(&path).body(Vec::new()).ok()?;
            let doc = match self.client.request::<Value>(request).await {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::debug!(path, error = %e, "type checking: no document");
                    None
                }
            };
            fetched.insert(path.clone(), doc);
        }
        fetched.get(&path)?.as_ref()
    }

    /// The kind serving `gvr`, from discovery (upstream's RESTMapper).
    async fn kind_of(
        &self,
        gvr: &GroupVersionResource,
        discovery: &mut BTreeMap<String, Option<Value>>,
    ) -> Option<GroupVersionKind> {
        let path = group_version_path("", &gvr.group, &gvr.version);
        let list = self.document(path, discovery).await?;
        let kind = list["resources"]
            .as_array()?
            .iter()
            .find(|r| r["name"].as_str() == Some(gvr.resource.as_str()))?["kind"]
            .as_str()?
            .to_string();
        Some(GroupVersionKind {
            group: gvr.group.clone(),
            version: gvr.version.clone(),
            kind,
        })
    }

    /// The schema of `gvk` from the apiserver's OpenAPI v3 document of its group
    /// version (upstream's ClientDiscoveryResolver).
    async fn schema_of(
        &self,
        gvk: &GroupVersionKind,
        documents: &mut BTreeMap<String, Option<Value>>,
    ) -> Option<KindSchema> {
        let path = group_version_path("/openapi/v3", &gvk.group, &gvk.version);
        KindSchema::find(self.document(path, documents).await?, gvk)
    }
}

/// `/api/v1` or `/apis/<group>/<version>` under `prefix`.
fn group_version_path(prefix: &str, group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("{prefix}/api/{version}")
    } else {
        format!("{prefix}/apis/{group}/{version}")
    }
}

#[async_trait::async_trait]
impl Controller for VapStatusController {
    fn name(&self) -> &'static str {
        "validatingadmissionpolicy-status"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, needs_check);
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(policy) = self.policies.get(key) else {
            return Ok(Action::Done);
        };
        if !needs_check(&policy) {
            return Ok(Action::Done);
        }
        let Some(spec) = &policy.spec else {
            return Ok(Action::Done);
        };
        let mut discovery = BTreeMap::new();
        let mut documents = BTreeMap::new();
        let mut gvks = BTreeSet::new();
        for gvr in kinds_to_check(spec) {
            if let Some(gvk) = self.kind_of(&gvr, &mut discovery).await {
                gvks.insert(gvk);
                if gvks.len() == MAX_KINDS_TO_CHECK {
                    break;
                }
            }
        }
        let mut kinds = Vec::new();
        for gvk in &gvks {
            if let Some(schema) = self.schema_of(gvk, &mut documents).await {
                kinds.push(schema);
            }
        }
        let params = match &spec.param_kind {
            Some(pk) => {
                let api_version = pk.api_version.as_deref().unwrap_or("");
                let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
                let gvk = GroupVersionKind {
                    group: group.into(),
                    version: version.into(),
                    kind: pk.kind.clone().unwrap_or_default(),
                };
                self.schema_of(&gvk, &mut documents).await
            }
            None => None,
        };
        let found = warnings(spec, &kinds, params.as_ref());
        let status = json!({"status": {
            "observedGeneration": policy.metadata.generation,
            // null removes warnings of an earlier generation (merge patch).
            "typeChecking": {"expressionWarnings": if found.is_empty() { Value::Null } else { json!(found) }},
        }});
        let api: Api<ValidatingAdmissionPolicy> = Api::all(self.client.clone());
        done_unless_failed(
            api.patch_status(key, &PatchParams::default(), &Patch::Merge(&status))
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> ValidatingAdmissionPolicySpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn kinds_come_from_rules_without_wildcards() {
        let s = spec(json!({"matchConstraints": {"resourceRules": [
            {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["statefulsets", "deployments", "deployments/scale", "*"]},
            {"apiGroups": ["*"], "apiVersions": ["v1"], "resources": ["pods"]},
            {"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"]},
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}}));
        let names: Vec<String> = kinds_to_check(&s)
            .iter()
            .map(|g| format!("{}/{}/{}", g.group, g.version, g.resource))
            .collect();
        assert_eq!(
            names,
            [
                "apps/v1/deployments",
                "apps/v1/statefulsets",
                "/v1/configmaps"
            ]
        );
        assert!(kinds_to_check(&spec(json!({}))).is_empty());
    }

    fn document() -> Value {
        json!({"components": {"schemas": {
            "io.k8s.api.apps.v1.Deployment": {"type": "object",
                "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
                "properties": {"spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}]}}},
            "io.k8s.api.apps.v1.DeploymentSpec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
            "io.k8s.api.core.v1.ConfigMap": {"type": "object",
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMap"}],
                "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}}}}}}})
    }

    #[test]
    fn warnings_name_the_field_and_the_kind_as_upstream() {
        let doc = document();
        let deployment = GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        };
        let config_map = GroupVersionKind {
            group: "".into(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        assert_eq!(config_map.to_string(), "/v1, Kind=ConfigMap");
        let kinds = vec![KindSchema::find(&doc, &deployment).unwrap()];
        let params = KindSchema::find(&doc, &config_map).unwrap();
        assert!(
            KindSchema::find(
                &doc,
                &GroupVersionKind {
                    kind: "Nope".into(),
                    ..deployment.clone()
                }
            )
            .is_none()
        );
        let s = spec(
            json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, "validations": [
            {"expression": "object.spec.replicas <= int(params.data.max)"},
            {"expression": "object.spec.replica <= 5", "messageExpression": "'too many: ' + string(object.spec.replicas)"},
            {"expression": "true", "messageExpression": "params.dat.x"}]}),
        );
        let found = warnings(&s, &kinds, Some(&params));
        assert_eq!(
            found,
            vec![
                ExpressionWarning {
                    field_ref: "spec.validations[1].expression".into(),
                    warning: "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica <= 5\n | ...........^\n".into(),
                },
                ExpressionWarning {
                    field_ref: "spec.validations[2].messageExpression".into(),
                    warning: "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'dat'\n | params.dat.x\n | ......^\n".into(),
                },
            ]
        );
        // Without schemas there is nothing to say.
        assert!(warnings(&s, &[], None).is_empty());
    }

    /// Upstream's `TestTypeCheck` cases of variables and the authorizer.
    #[test]
    fn variables_and_the_authorizer_are_typed_as_upstream_types_them() {
        let doc = document();
        let deployment = GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        };
        let kinds = vec![KindSchema::find(&doc, &deployment).unwrap()];
        let check = |policy: Value| -> Vec<String> {
            warnings(&spec(policy), &kinds, None)
                .into_iter()
                .map(|w| format!("{}: {}", w.field_ref, w.warning))
                .collect()
        };
        let validation = |variable: &str, expression: &str| {
            json!({"variables": [{"name": "v", "expression": variable}],
                "validations": [{"expression": expression}]})
        };
        assert!(check(validation("true", "variables.v")).is_empty());
        let missing = check(validation("true", "variables.nonExisting"));
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].starts_with("spec.validations[0].expression: apps/v1, Kind=Deployment: ERROR: <input>:1:10: undefined field 'nonExisting'"),
            "{missing:?}"
        );
        let wrong = check(validation(
            "'something'",
            "variables.v == object.spec.replicas",
        ));
        assert!(
            wrong[0].contains("found no matching overload for '_==_' applied to '(string, int)'"),
            "{wrong:?}"
        );
        // A variable that does not type-check is reported nowhere and is `dyn` after.
        assert!(
            check(validation(
                "object.spec.replicas == 'str'",
                "variables.v == object.spec.replicas"
            ))
            .is_empty()
        );
        let authorizer =
            |expression: &str| check(json!({"validations": [{"expression": expression}]}));
        assert!(
            authorizer("authorizer.group('').resource('endpoints').check('create').allowed()")
                .is_empty()
        );
        let invalid = authorizer("authorizer.allowed()");
        assert!(
            invalid[0].contains(
                "found no matching overload for 'allowed' applied to 'kubernetes.authorization.Authorizer"
            ),
            "{invalid:?}"
        );
        // `params` is declared only for a policy with a `paramKind`.
        let undeclared = authorizer("params.data.x == 'a'");
        assert!(
            undeclared[0].contains("undeclared reference to 'params'"),
            "{undeclared:?}"
        );
    }
}
