//! ValidatingAdmissionPolicy (upstream
//! `k8s.io/apiserver/pkg/admission/plugin/policy/validating`): admissionregistration.k8s.io/v1
//! policies hold CEL validations ([`ferrokube_cel`]); bindings apply them. For each
//! policy whose `matchConstraints` match the request (rules, excludeResourceRules,
//! resourceNames, namespace and object selectors), each of its bindings whose
//! `matchResources` also match is evaluated once per parameter object (`paramKind` +
//! the binding's `paramRef`, by name or selector, `parameterNotFoundAction`), with
//! `object`, `oldObject`, `request`, `params`, `namespaceObject`, `authorizer`
//! (upstream's CEL authz library over this apiserver's authorizer chain, asked for
//! the requesting user) and the policy's `variables`; `matchConditions` filter
//! first. A failed validation's message is its
//! `messageExpression`, its `message` or `failed expression: <expr>`; the binding's
//! `validationActions` decide: `Deny` rejects the request (code from `reason`, 422
//! Invalid by default, with upstream's `ValidatingAdmissionPolicy 'p' with binding 'b'
//! denied request: ...`), `Warn` adds a `Warning` header, `Audit` adds upstream's
//! `validation.policy.admission.k8s.io/validation_failure` annotation to the request's
//! audit event, as `auditAnnotations` add `<policy>/<key>` ones. Evaluation
//! and configuration errors follow the policy's `failurePolicy`. Each expression may
//! cost at most upstream's per-call limit, and one evaluation of a policy (its
//! variables, validations and messages for one binding and parameter object) at most
//! upstream's runtime budget ([`ferrokube_cel::RUNTIME_COST_BUDGET`]; audit
//! annotations get a budget of their own, as upstream's); past the budget the
//! evaluation is one error, `validation failed due to running out of cost budget, no
//! further validation rules will be run`, under the failure policy.
//!
//! Deviations: `matchPolicy: Equivalent` matches like `Exact` (one served version per
//! resource); policies, bindings, params and namespaces
//! are read from the watch cache (as upstream's informers) once it has applied this
//! apiserver's own writes ([`super::webhook::fresh`]); a policy is compiled when it first matches and again
//! after it changes; cost is metered as [`ferrokube_cel`] does it (per evaluated node
//! and comprehension iteration, not upstream's per-function costs) and not estimated
//! at create; match conditions are held to the per-call limit only.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::labels::Selector;
use ferrokube_auth::authz::{Attributes as AuthzAttributes, Authorizer};
use ferrokube_auth::user::UserInfo;
use ferrokube_cel::{Activation, AuthzCheck, AuthzDecision, CelAuthorizer, Program};
use ferrokube_registry::{Registry, Store};
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause;
use serde_json::Value;

use super::webhook::{
    cel_request, fresh, fresh_get, handled, labels_of, rule_matches, selectors_match,
};
use super::{Attributes, Plugin, PluginInit};

pub(crate) const NAME: &str = "ValidatingAdmissionPolicy";

const AR: &str = "admissionregistration.k8s.io";

struct ValidatingPolicy {
    registry: Arc<Registry>,
    /// The apiserver's authorizer chain, for CEL's `authorizer`.
    authorizer: Arc<dyn Authorizer>,
    policies: Arc<Store>,
    bindings: Arc<Store>,
    namespaces: Arc<Store>,
    /// Compiled policies by name, with the resourceVersion they were compiled at
    /// (parsing is the costly part of evaluating a policy).
    compiled: parking_lot::Mutex<BTreeMap<String, (String, CompileResult)>>,
}

/// A policy's compiled CEL, or the compiler's message.
type CompileResult = Arc<Result<Compiled, String>>;

/// Most compiled policies kept; past it the cache starts over.
const MAX_COMPILED: usize = 1024;

fn store(registry: &Registry, group: &str, plural: &str) -> Result<Arc<Store>, String> {
    ferrokube_api::resources::lookup(group, "v1", plural)
        .and_then(|info| registry.store_for(info))
        .cloned()
        .ok_or_else(|| format!("no store for {plural}"))
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(ValidatingPolicy {
        registry: init.registry.clone(),
        authorizer: init.authorizer.clone(),
        policies: store(init.registry, AR, "validatingadmissionpolicies")?,
        bindings: store(init.registry, AR, "validatingadmissionpolicybindings")?,
        namespaces: store(init.registry, "", "namespaces")?,
        compiled: Default::default(),
    }))
}

/// The answers one request's CEL checks have had, by user and check (upstream's
/// `NewCachingAuthorizer` around each admission dispatch): every expression that asks
/// the same question gets the same answer, and a webhook authorizer is asked once.
type AuthzAnswers = Arc<Mutex<HashMap<(UserInfo, AuthzCheck), AuthzDecision>>>;

/// CEL's `authorizer`: the authorizer chain asked on behalf of one user (upstream
/// `authorizerVal`).
struct UserAuthorizer {
    chain: Arc<dyn Authorizer>,
    user: UserInfo,
    answers: AuthzAnswers,
}

impl std::fmt::Debug for UserAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("UserAuthorizer")
            .field(&self.user.name)
            .finish()
    }
}

impl UserAuthorizer {
    fn answers_held(&self) -> MutexGuard<'_, HashMap<(UserInfo, AuthzCheck), AuthzDecision>> {
        // A poisoned map still holds whole answers: each insert is one call.
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ask_chain(&self, check: &AuthzCheck) -> AuthzDecision {
        let attrs = AuthzAttributes {
            user: self.user.clone(),
            verb: check.verb.clone(),
            namespace: check.namespace.clone(),
            api_group: check.group.clone(),
            // Upstream's library asks about every version of the resource.
            api_version: if check.resource_request {
                "*".into()
            } else {
                String::new()
            },
            resource: check.resource.clone(),
            subresource: check.subresource.clone(),
            name: check.name.clone(),
            resource_request: check.resource_request,
            path: check.path.clone(),
            // Selectors that do not parse narrow nothing (upstream keeps the parse
            // error beside no requirements; no in-tree authorizer reads it).
            field_selector: ferrokube_auth::field_requirements(&check.field_selector)
                .unwrap_or_default(),
            label_selector: ferrokube_auth::label_requirements(&check.label_selector)
                .unwrap_or_default(),
        };
        let decision = self.chain.authorize(&attrs);
        AuthzDecision {
            allowed: decision.is_allowed(),
            reason: decision.reason().to_string(),
            error: None,
        }
    }
}

impl CelAuthorizer for UserAuthorizer {
    fn check(&self, check: &AuthzCheck) -> AuthzDecision {
        let key = (self.user.clone(), check.clone());
        if let Some(known) = self.answers_held().get(&key) {
            return known.clone();
        }
        // Not under the lock: the chain may call out (an authorization webhook).
        let decision = self.ask_chain(check);
        self.answers_held().insert(key, decision.clone());
        decision
    }

    /// Upstream `serviceaccount.ServiceAccountInfo.UserInfo`: the account's user
    /// name and its two groups; upstream's checks of the name and namespace.
    fn for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<dyn CelAuthorizer>, String> {
        use ferrokube_apimachinery::validation::{name_is_dns_subdomain, validate_namespace_name};
        if !name_is_dns_subdomain(name, false).is_empty() {
            return Err("Invalid service account name".into());
        }
        if !validate_namespace_name(namespace, false).is_empty() {
            return Err("Invalid service account namespace".into());
        }
        Ok(Arc::new(UserAuthorizer {
            chain: self.chain.clone(),
            answers: self.answers.clone(),
            user: UserInfo::new(
                ferrokube_auth::rbac::service_account_user(namespace, name),
                [
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{namespace}"),
                ],
            ),
        }))
    }
}

/// The CEL `authorizer` variable for the request (also webhook match conditions'):
/// `chain` asked for the requesting user, `requestResource` the request's resource.
pub(crate) fn cel_authorizer(
    chain: &Arc<dyn Authorizer>,
    a: &Attributes,
) -> ferrokube_cel::cel::Value {
    let authorizer = Arc::new(UserAuthorizer {
        chain: chain.clone(),
        answers: AuthzAnswers::default(),
        user: UserInfo::clone(&a.user),
    });
    ferrokube_cel::authorizer_value(
        authorizer,
        &ferrokube_cel::RequestResource {
            group: a.resource.group.to_string(),
            resource: a.resource.plural.to_string(),
            subresource: a.subresource.clone(),
            namespace: a.namespace.clone(),
            name: a.name.clone(),
        },
    )
}

/// One failed validation (or configuration error) to act on.
struct Denial {
    policy: String,
    binding: String,
    message: String,
    /// Upstream's `reason` (empty: Invalid).
    reason: String,
}

/// What evaluating one binding with one parameter object produced.
#[derive(Default)]
struct Decisions {
    /// Index in `validations`, message and reason of the validations that failed (or
    /// errored under Fail).
    failed: Vec<(usize, String, String)>,
    /// `auditAnnotations` keys and their (string) values.
    audit_annotations: Vec<(String, String)>,
}

/// Upstream's audit annotation of a failed validation under the `Audit` action.
const VALIDATION_FAILURE_ANNOTATION: &str = "validation.policy.admission.k8s.io/validation_failure";

/// Upstream `maxAuditAnnotationValueLength`: longer values are cut.
const MAX_AUDIT_ANNOTATION_VALUE_LENGTH: usize = 10 * 1024;

/// A policy's CEL, compiled.
struct Compiled {
    variables: Vec<(String, Program)>,
    conditions: Vec<(String, Program)>,
    validations: Vec<CompiledValidation>,
    audits: Vec<(String, Program)>,
}

struct CompiledValidation {
    expression: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    reason: String,
}

fn compile(spec: &ar::ValidatingAdmissionPolicySpec) -> Result<Compiled, String> {
    let vars = ferrokube_cel::POLICY_VARIABLES;
    let c = |e: &str| ferrokube_cel::compile(e, vars).map_err(|e| e.0);
    Ok(Compiled {
        variables: spec
            .variables
            .iter()
            .flatten()
            .map(|v| Ok((v.name.clone(), c(&v.expression)?)))
            .collect::<Result<_, String>>()?,
        conditions: spec
            .match_conditions
            .iter()
            .flatten()
            .map(|m| Ok((m.name.clone(), c(&m.expression)?)))
            .collect::<Result<_, String>>()?,
        validations: spec
            .validations
            .iter()
            .flatten()
            .map(|v| {
                Ok(CompiledValidation {
                    expression: c(&v.expression)?,
                    message: v.message.clone().filter(|m| !m.is_empty()),
                    message_expression: match v.message_expression.as_deref() {
                        Some(me) if !me.trim().is_empty() => Some(c(me)?),
                        _ => None,
                    },
                    reason: v.reason.clone().unwrap_or_default(),
                })
            })
            .collect::<Result<_, String>>()?,
        audits: spec
            .audit_annotations
            .iter()
            .flatten()
            .map(|a| Ok((a.key.clone(), c(&a.value_expression)?)))
            .collect::<Result<_, String>>()?,
    })
}

/// Upstream `reasonToCode`.
fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// Whether `m` matches the request (upstream `matching.Matches`): rules, exclusions,
/// then the namespace and object selectors.
async fn resources_match(
    namespaces: &Store,
    m: &ar::MatchResources,
    a: &Attributes,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, ApiError> {
    let named_rule_matches = |r: &ar::NamedRuleWithOperations| {
        let rule = ar::RuleWithOperations {
            api_groups: r.api_groups.clone(),
            api_versions: r.api_versions.clone(),
            operations: r.operations.clone(),
            resources: r.resources.clone(),
            scope: r.scope.clone(),
        };
        let names = r.resource_names.as_deref().unwrap_or_default();
        rule_matches(&rule, a) && (names.is_empty() || names.contains(&a.name))
    };
    // A binding without resourceRules leaves the resources to its policy.
    if let Some(rules) = &m.resource_rules
        && !rules.is_empty()
        && !rules.iter().any(named_rule_matches)
    {
        return Ok(false);
    }
    if m.exclude_resource_rules
        .iter()
        .flatten()
        .any(named_rule_matches)
    {
        return Ok(false);
    }
    selectors_match(
        namespaces,
        m.object_selector.as_ref(),
        m.namespace_selector.as_ref(),
        a,
        object,
        old,
    )
    .await
}

impl ValidatingPolicy {
    /// The policy's CEL compiled, from the cache when the policy has not changed.
    fn compiled(
        &self,
        name: &str,
        policy: &ar::ValidatingAdmissionPolicy,
        spec: &ar::ValidatingAdmissionPolicySpec,
    ) -> CompileResult {
        let version = policy.metadata.resource_version.clone().unwrap_or_default();
        if let Some((v, c)) = self.compiled.lock().get(name)
            && *v == version
            && !version.is_empty()
        {
            return c.clone();
        }
        let c = Arc::new(compile(spec));
        let mut cache = self.compiled.lock();
        if cache.len() >= MAX_COMPILED {
            cache.clear();
        }
        cache.insert(name.to_string(), (version, c.clone()));
        c
    }

    /// The parameter objects of one binding (upstream `CollectParams`): `[None]` when
    /// the policy takes none; empty when none is found and the binding allows that.
    async fn params(
        &self,
        policy: &ar::ValidatingAdmissionPolicySpec,
        binding: &ar::ValidatingAdmissionPolicyBindingSpec,
        a: &Attributes,
    ) -> Result<Vec<Option<Value>>, String> {
        let Some(kind) = &policy.param_kind else {
            return Ok(vec![None]);
        };
        let Some(reference) = &binding.param_ref else {
            return Err("paramRef is required when the policy has a paramKind".into());
        };
        let api_version = kind.api_version.as_deref().unwrap_or("");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind_name = kind.kind.as_deref().unwrap_or("");
        // A built-in kind, else a served custom resource (params are often those).
        let plural = ferrokube_api::resources::RESOURCES
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind_name)
            .map(|r| r.plural)
            .or_else(|| {
                let served = self.registry.custom().served();
                served
                    .all()
                    .find(|r| {
                        r.info.group == group
                            && r.info.version == version
                            && r.info.kind == kind_name
                    })
                    .map(|r| r.info.plural)
            });
        let resolved = plural
            .and_then(|p| self.registry.resolve(group, version, p))
            .ok_or_else(|| {
                format!("failed to find resource referenced by paramKind: '{api_version}, Kind={kind_name}'")
            })?;
        let (info, store) = (resolved.info, &resolved.store);
        let namespace = match reference.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => Some(ns.to_string()),
            None if info.namespaced => {
                if a.namespace.is_empty() {
                    return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
                }
                Some(a.namespace.clone())
            }
            None => None,
        };
        let ns = namespace.as_deref().filter(|_| info.namespaced);
        let found: Vec<Option<Value>> =
            if let Some(name) = reference.name.as_deref().filter(|n| !n.is_empty()) {
                match fresh_get(store, ns, name).await.map_err(|e| e.message)? {
                    Some(v) => vec![Some((*v).clone())],
                    None => vec![],
                }
            } else {
                let selector = reference.selector.clone().unwrap_or_default();
                let selector = Selector::from_label_selector(&selector)
                    .map_err(|e| format!("invalid paramRef selector: {e}"))?;
                let sub_prefix = ns.map(|n| format!("{n}/")).unwrap_or_default();
                fresh(store, &sub_prefix)
                    .await
                    .iter()
                    .map(|o| (**o).clone())
                    .filter(|o| selector.matches(&labels_of(Some(o))))
                    .map(Some)
                    .collect()
            };
        if found.is_empty() && reference.parameter_not_found_action.as_deref() != Some("Allow") {
            return Err(
                "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
            );
        }
        Ok(found)
    }

    /// The request's Namespace object (upstream `namespaceObject`), if namespaced.
    async fn namespace_object(&self, a: &Attributes) -> Result<Value, ApiError> {
        if a.namespace.is_empty() || a.is_core("namespaces") {
            return Ok(Value::Null);
        }
        Ok(fresh_get(&self.namespaces, None, &a.namespace)
            .await?
            .map_or(Value::Null, |ns| (*ns).clone()))
    }
}

/// Evaluates a compiled policy with one binding and one parameter object.
fn evaluate(
    compiled: &Compiled,
    fail_open: bool,
    base: &Activation,
    params: Option<&Value>,
    policy: &str,
) -> Decisions {
    evaluate_within(
        compiled,
        fail_open,
        base,
        params,
        policy,
        ferrokube_cel::RUNTIME_COST_BUDGET,
    )
}

/// The decisions of an evaluation that ran out of its cost budget: one error under
/// the failure policy (upstream's `ForInput` error).
fn out_of_budget(fail_open: bool) -> Decisions {
    let mut decisions = Decisions::default();
    if !fail_open {
        decisions
            .failed
            .push((0, ferrokube_cel::OUT_OF_BUDGET.to_string(), String::new()));
    }
    decisions
}

/// [`evaluate`] with a runtime cost budget of `total` for the variables, validations
/// and messages (and another for the audit annotations).
fn evaluate_within(
    compiled: &Compiled,
    fail_open: bool,
    base: &Activation,
    params: Option<&Value>,
    policy: &str,
    total: u64,
) -> Decisions {
    let mut budget = ferrokube_cel::Budget::new(total);
    let mut activation = base.clone();
    activation.bind_json("params", params.unwrap_or(&Value::Null));
    // Variables in order, each seeing the earlier ones; one that fails is absent, so
    // an expression using it fails (upstream evaluates them lazily, with the same
    // outcome for the expressions that use them).
    let mut variables: Vec<(String, ferrokube_cel::cel::Value)> = Vec::new();
    activation.bind("variables", ferrokube_cel::map_value(Vec::new()));
    for (name, program) in &compiled.variables {
        let Ok(result) = budget.eval(&activation, program) else {
            return out_of_budget(fail_open);
        };
        if let Ok(v) = result {
            variables.push((name.clone(), v));
            activation.bind("variables", ferrokube_cel::map_value(variables.clone()));
        }
    }
    let mut decisions = Decisions::default();
    match ferrokube_cel::match_conditions(&compiled.conditions, &activation) {
        Ok(true) => {}
        Ok(false) => return decisions,
        Err(_) if fail_open => return decisions,
        Err(e) => {
            decisions.failed.push((0, e, String::new()));
            return decisions;
        }
    }
    for (index, v) in compiled.validations.iter().enumerate() {
        let Ok(result) = budget.eval_bool(&activation, &v.expression) else {
            return out_of_budget(fail_open);
        };
        match result {
            Ok(true) => {}
            Ok(false) => {
                let message = match &v.message_expression {
                    Some(me) => match budget.eval_string(&activation, me) {
                        Ok(m) => m.ok(),
                        Err(_) => return out_of_budget(fail_open),
                    },
                    None => None,
                };
                let message = message
                    .map(|m| m.trim().to_string())
                    .filter(|m| !m.is_empty() && !m.contains('\n'))
                    .or_else(|| v.message.clone())
                    .unwrap_or_else(|| format!("failed expression: {}", v.expression.source()));
                decisions.failed.push((index, message, v.reason.clone()));
            }
            Err(_) if fail_open => {}
            Err(e) => decisions.failed.push((
                index,
                format!(
                    "expression '{}' resulted in error: {e}",
                    v.expression.source()
                ),
                String::new(),
            )),
        }
    }
    let mut audit_budget = ferrokube_cel::Budget::new(total);
    for (key, program) in &compiled.audits {
        let Ok(result) = audit_budget.eval(&activation, program) else {
            if !fail_open {
                decisions
                    .failed
                    .push((0, ferrokube_cel::OUT_OF_BUDGET.to_string(), String::new()));
            }
            break;
        };
        match result {
            Ok(ferrokube_cel::cel::Value::Null) => {}
            Ok(ferrokube_cel::cel::Value::String(text)) => {
                let mut value = text.to_string();
                if value.len() > MAX_AUDIT_ANNOTATION_VALUE_LENGTH {
                    let mut cut = MAX_AUDIT_ANNOTATION_VALUE_LENGTH;
                    while !value.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    value.truncate(cut);
                }
                tracing::debug!(annotation = %format!("{policy}/{key}"), %value, "audit annotation");
                decisions.audit_annotations.push((key.clone(), value));
            }
            Ok(_) | Err(_) if fail_open => {}
            Ok(v) => decisions.failed.push((
                0,
                format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    program.source(),
                    ferrokube_cel::type_name(&v)
                ),
                String::new(),
            )),
            Err(e) => decisions.failed.push((
                0,
                format!("valueExpression of auditAnnotation '{key}' resulted in error: {e}"),
                String::new(),
            )),
        }
    }
    decisions
}

#[async_trait]
impl Plugin for ValidatingPolicy {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        // No binding: no policy applies (see `validate`), so it costs nothing.
        handled(a) && !self.bindings.cache().is_known_empty()
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let listed = fresh(&self.bindings, "").await;
        if listed.is_empty() {
            return Ok(());
        }
        let mut bindings_of: BTreeMap<String, Vec<ar::ValidatingAdmissionPolicyBinding>> =
            BTreeMap::new();
        for o in &listed {
            if let Ok(b) =
                serde_json::from_value::<ar::ValidatingAdmissionPolicyBinding>((**o).clone())
                && let Some(policy) = b.spec.as_ref().and_then(|s| s.policy_name.clone())
            {
                bindings_of.entry(policy).or_default().push(b);
            }
        }
        let mut denials: Vec<Denial> = Vec::new();
        let mut base: Option<Activation> = None;
        for (policy_name, mut bindings) in bindings_of {
            // A binding to a missing policy does nothing, as upstream.
            let Some(policy) = fresh_get(&self.policies, None, &policy_name).await? else {
                continue;
            };
            let Ok(policy) =
                serde_json::from_value::<ar::ValidatingAdmissionPolicy>((*policy).clone())
            else {
                continue;
            };
            let Some(spec) = &policy.spec else { continue };
            let fail_open = spec.failure_policy.as_deref() == Some("Ignore");
            let config_error = |binding: Option<&str>, err: String| Denial {
                policy: policy_name.clone(),
                binding: binding.unwrap_or("").to_string(),
                message: match binding {
                    Some(_) => format!("failed to configure binding: {err}"),
                    None => format!("failed to configure policy: {err}"),
                },
                reason: String::new(),
            };
            let Some(constraints) = &spec.match_constraints else {
                continue;
            };
            if !resources_match(&self.namespaces, constraints, a, object, old).await? {
                continue;
            }
            let compiled = self.compiled(&policy_name, &policy, spec);
            let compiled = match compiled.as_ref() {
                Ok(c) => c,
                Err(_) if fail_open => continue,
                Err(e) => {
                    denials.push(config_error(None, e.clone()));
                    continue;
                }
            };
            bindings.sort_by(|x, y| x.metadata.name.cmp(&y.metadata.name));
            // Upstream's auditAnnotationCollector: distinct values of a key over the
            // policy's bindings and params, joined with ", ".
            let mut audit_values: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for binding in &bindings {
                let binding_name = binding.metadata.name.clone().unwrap_or_default();
                let Some(bspec) = &binding.spec else { continue };
                if let Some(m) = &bspec.match_resources
                    && !resources_match(&self.namespaces, m, a, object, old).await?
                {
                    continue;
                }
                let params = match self.params(spec, bspec, a).await {
                    Ok(p) => p,
                    Err(_) if fail_open => continue,
                    Err(e) => {
                        denials.push(config_error(Some(&binding_name), e));
                        continue;
                    }
                };
                if params.is_empty() {
                    continue;
                }
                if base.is_none() {
                    let mut b = Activation::new();
                    b.bind_json("object", object.unwrap_or(&Value::Null))
                        .bind_json("oldObject", old.unwrap_or(&Value::Null))
                        .bind_json("request", &cel_request(a))
                        .bind_json("namespaceObject", &self.namespace_object(a).await?)
                        .bind("authorizer", cel_authorizer(&self.authorizer, a));
                    base = Some(b);
                }
                let Some(base) = &base else { continue };
                let actions = bspec.validation_actions.as_deref().unwrap_or_default();
                for p in &params {
                    let decisions = evaluate(compiled, fail_open, base, p.as_ref(), &policy_name);
                    for (key, value) in decisions.audit_annotations {
                        let values = audit_values.entry(key).or_default();
                        if !values.contains(&value) {
                            values.push(value);
                        }
                    }
                    for (index, message, reason) in decisions.failed {
                        for action in actions {
                            match action.as_str() {
                                "Deny" => denials.push(Denial {
                                    policy: policy_name.clone(),
                                    binding: binding_name.clone(),
                                    message: message.clone(),
                                    reason: reason.clone(),
                                }),
                                "Warn" => a.warn(format!(
                                    "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {message}"
                                )),
                                "Audit" => a.audit_annotations.add(
                                    VALIDATION_FAILURE_ANNOTATION,
                                    serde_json::json!([{
                                        "message": message,
                                        "policy": policy_name,
                                        "binding": binding_name,
                                        "expressionIndex": index,
                                        "validationActions": actions,
                                    }])
                                    .to_string(),
                                ),
                                _ => {}
                            }
                        }
                    }
                }
            }
            for (key, values) in audit_values {
                a.audit_annotations
                    .add(format!("{policy_name}/{key}"), values.join(", "));
            }
        }
        let Some(d) = denials.into_iter().next() else {
            return Ok(());
        };
        let message = if d.binding.is_empty() {
            format!(
                "ValidatingAdmissionPolicy '{}' denied request: {}",
                d.policy, d.message
            )
        } else {
            format!(
                "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
                d.policy, d.binding, d.message
            )
        };
        let mut err = a.forbidden(&message);
        err.reason = if d.reason.is_empty() {
            "Invalid".into()
        } else {
            d.reason
        };
        err.code = reason_code(&err.reason);
        if let Some(details) = err.details.as_mut() {
            details
                .causes
                .get_or_insert_with(Vec::new)
                .push(StatusCause {
                    message: Some(message),
                    ..Default::default()
                });
        }
        Err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> ar::ValidatingAdmissionPolicySpec {
        serde_json::from_value(v).unwrap()
    }

    fn activation(object: Value) -> Activation {
        let mut a = Activation::new();
        a.bind_json("object", &object)
            .bind_json("oldObject", &Value::Null)
            .bind_json("request", &json!({"operation": "CREATE"}))
            .bind_json("namespaceObject", &Value::Null);
        a
    }

    #[test]
    fn validations_yield_upstreams_messages() {
        let s = spec(json!({"validations": [
            {"expression": "object.spec.replicas <= 5"},
            {"expression": "object.spec.replicas <= params.max", "message": "too many", "reason": "Forbidden"},
            {"expression": "variables.r < 3", "messageExpression": "'replicas ' + string(variables.r) + ' >= 3'"},
            {"expression": "object.spec.nope == 1"}],
            "variables": [{"name": "r", "expression": "object.spec.replicas"}]}));
        let c = compile(&s).unwrap();
        let d = evaluate(
            &c,
            false,
            &activation(json!({"spec": {"replicas": 6}})),
            Some(&json!({"max": 4})),
            "p",
        );
        let messages: Vec<&str> = d.failed.iter().map(|(_, m, _)| m.as_str()).collect();
        assert_eq!(messages[0], "failed expression: object.spec.replicas <= 5");
        assert_eq!(messages[1], "too many");
        assert_eq!(d.failed[1].2, "Forbidden");
        assert_eq!(messages[2], "replicas 6 >= 3");
        assert!(
            messages[3].starts_with("expression 'object.spec.nope == 1' resulted in error: "),
            "{}",
            messages[3]
        );
        // Under Ignore an evaluation error admits.
        let d = evaluate(
            &c,
            true,
            &activation(json!({"spec": {"replicas": 1}})),
            Some(&json!({"max": 4})),
            "p",
        );
        assert!(d.failed.is_empty(), "{:?}", d.failed);
    }

    #[test]
    fn match_conditions_filter() {
        let s = spec(json!({"validations": [{"expression": "false"}],
            "matchConditions": [{"name": "big", "expression": "object.spec.replicas > 2"}]}));
        let c = compile(&s).unwrap();
        assert!(
            evaluate(
                &c,
                false,
                &activation(json!({"spec": {"replicas": 1}})),
                None,
                "p"
            )
            .failed
            .is_empty()
        );
        assert_eq!(
            evaluate(
                &c,
                false,
                &activation(json!({"spec": {"replicas": 3}})),
                None,
                "p"
            )
            .failed
            .len(),
            1
        );
        assert_eq!(reason_code("Forbidden"), 403);
        assert_eq!(reason_code(""), 422);
    }

    #[test]
    fn running_out_of_the_cost_budget_is_one_error_under_the_failure_policy() {
        let s = spec(json!({"validations": [
            {"expression": "object.items.all(x, x > 0)"},
            {"expression": "object.items.all(x, x > 1)"},
            {"expression": "object.items.all(x, x > 2)"}]}));
        let c = compile(&s).unwrap();
        let object = json!({"items": [3, 4, 5, 6, 7, 8, 9, 10]});
        let mut one = activation(object.clone());
        one.bind_json("params", &Value::Null)
            .bind("variables", ferrokube_cel::map_value(Vec::new()));
        let (_, cost) = one.eval_metered(&c.validations[0].expression, u64::MAX);
        // Enough for two of the three validations.
        let d = evaluate_within(
            &c,
            false,
            &activation(object.clone()),
            None,
            "p",
            2 * cost + 1,
        );
        let failed: Vec<&str> = d.failed.iter().map(|(_, m, _)| m.as_str()).collect();
        assert_eq!(failed, [ferrokube_cel::OUT_OF_BUDGET]);
        let d = evaluate_within(
            &c,
            true,
            &activation(object.clone()),
            None,
            "p",
            2 * cost + 1,
        );
        assert!(d.failed.is_empty());
        // With enough budget, all three run and pass.
        let d = evaluate_within(&c, false, &activation(object), None, "p", 3 * cost);
        assert!(d.failed.is_empty(), "{:?}", d.failed);
    }
    #[derive(Default)]
    struct CountingChain {
        calls: std::sync::atomic::AtomicUsize,
    }

    impl Authorizer for CountingChain {
        fn authorize(&self, attrs: &AuthzAttributes) -> ferrokube_auth::Decision {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // A list only narrowed by both selectors.
            let narrowed = attrs.verb == "list"
                && attrs
                    .field_selector
                    .iter()
                    .any(|r| r.field == "spec.nodeName")
                && attrs.label_selector.iter().any(|r| r.key() == "tier");
            if attrs.user.name == "alice" && (attrs.verb == "get" || narrowed) {
                ferrokube_auth::Decision::allow()
            } else {
                ferrokube_auth::Decision::Deny("not alice's".into())
            }
        }
    }

    #[test]
    fn a_request_asks_the_chain_once_per_user_and_check() {
        let counting = Arc::new(CountingChain::default());
        let chain: Arc<dyn Authorizer> = counting.clone();
        let pods = "authorizer.group('').resource('pods').namespace('n')";
        let sa_pods = "authorizer.serviceAccount('n', 'sa').group('').resource('pods')";
        let s = spec(json!({"validations": [
            {"expression": format!("{pods}.check('get').allowed()")},
            {"expression": format!("{pods}.check('get').allowed()")},
            {"expression": format!("!{sa_pods}.check('get').allowed()")},
            {"expression": format!("{sa_pods}.check('get').reason() == 'not alice\\'s'")},
            {"expression": format!("!{pods}.check('delete').allowed()")},
            {"expression": format!("{pods}.fieldSelector('spec.nodeName=n1').labelSelector('tier=web').check('list').allowed()")},
            {"expression": format!("!{pods}.check('list').allowed()")}]}));
        let c = compile(&s).unwrap();
        let request = || {
            let mut a = activation(json!({}));
            let alice = UserAuthorizer {
                chain: chain.clone(),
                user: UserInfo::new("alice", ["team"]),
                answers: AuthzAnswers::default(),
            };
            a.bind(
                "authorizer",
                ferrokube_cel::authorizer_value(
                    Arc::new(alice),
                    &ferrokube_cel::RequestResource::default(),
                ),
            );
            a
        };
        let calls = || counting.calls.load(std::sync::atomic::Ordering::SeqCst);
        let d = evaluate(&c, false, &request(), None, "p");
        assert!(d.failed.is_empty(), "{:?}", d.failed);
        // alice get, the service account's get, alice delete, alice's two lists.
        assert_eq!(calls(), 5);
        // The next request asks again: answers are kept for one request only.
        let d = evaluate(&c, false, &request(), None, "p");
        assert!(d.failed.is_empty(), "{:?}", d.failed);
        assert_eq!(calls(), 10);
    }
}
