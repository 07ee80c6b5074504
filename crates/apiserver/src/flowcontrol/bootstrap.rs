//! The API Priority and Fairness bootstrap configuration (upstream 1.33
//! `k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`) and its ensurer
//! (`pkg/registry/flowcontrol/ensurer` with the `priority-and-fairness-config-producer`
//! post-start hook of `pkg/registry/flowcontrol/rest`).
//!
//! The mandatory objects (`exempt` and `catch-all`) keep the P&F system working, so
//! their spec is always brought back to the bootstrap one (and their
//! `apf.kubernetes.io/autoupdate-spec` annotation back to `true`). The suggested ones
//! are created when missing and kept up to date while their annotation says `true`
//! (or, without a boolean annotation, while `metadata.generation` is 1, i.e. nobody
//! has edited them); operators may edit or delete them. Objects annotated `true` that
//! are no longer in the bootstrap set are deleted.
//!
//! Deviations: one pass ([`ensure`], run at start), not upstream's retry-every-second
//! then every-minute loop; the objects of one kind are written concurrently, every
//! priority level before any flow schema (upstream: suggested levels, suggested
//! schemas, mandatory levels, mandatory schemas, one at a time); a create that finds
//! the object already there (written concurrently) is left alone instead of being
//! read again and revised.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::user::{
    ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, NODES_GROUP, SYSTEM_PRIVILEGED_GROUP,
};
use ferrokube_registry::{DeleteOptions, Part, Registry, Store, UpdateInput, WriteOptions, meta};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::flowcontrol::v1::{
    ExemptPriorityLevelConfiguration, FlowDistinguisherMethod, FlowSchema, FlowSchemaSpec,
    GroupSubject, LimitResponse, LimitedPriorityLevelConfiguration, NonResourcePolicyRule,
    PolicyRulesWithSubjects, PriorityLevelConfiguration, PriorityLevelConfigurationReference,
    PriorityLevelConfigurationSpec, QueuingConfiguration, ResourcePolicyRule,
    ServiceAccountSubject, Subject, UserSubject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::security::{existing_objects, to_value};

const GROUP: &str = "flowcontrol.apiserver.k8s.io";
/// `flowcontrol.AutoUpdateAnnotationKey`.
pub(crate) const AUTOUPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";
/// The field manager of the ensurer's writes (upstream's).
const FIELD_MANAGER: &str = "api-priority-and-fairness-config-producer-v1";

/// `user.KubeControllerManager`, `user.KubeScheduler`,
/// `serviceaccount.AllServiceAccountsGroup`.
const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
const KUBE_SCHEDULER: &str = "system:kube-scheduler";
const ALL_SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// `flowcontrol.VerbAll`, `APIGroupAll`, `ResourceAll`, `NonResourceAll`,
/// `NamespaceEvery` and `NameAll`.
const ALL: &str = "*";
/// `coordinationv1.GroupName`; the core group is `""`.
const COORDINATION_GROUP: &str = "coordination.k8s.io";
const BY_USER: &str = "ByUser";
const BY_NAMESPACE: &str = "ByNamespace";

/// Upstream's defaults of the `flowcontrol/v1` types (`pkg/apis/flowcontrol/v1`).
const DEFAULT_MATCHING_PRECEDENCE: i32 = 1000;
const DEFAULT_NOMINAL_CONCURRENCY_SHARES: i32 = 30;
const DEFAULT_HAND_SIZE: i32 = 8;
const DEFAULT_QUEUES: i32 = 64;
const DEFAULT_QUEUE_LENGTH_LIMIT: i32 = 50;

/// How many bootstrap objects are written at once (the whole set is about 20).
const WRITES_IN_FLIGHT: usize = 32;

// ---------------------------------------------------------------------------
// The objects (default.go)
// ---------------------------------------------------------------------------

fn bootstrap_meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        annotations: Some(BTreeMap::from([(
            AUTOUPDATE_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

fn priority_level(name: &str, spec: PriorityLevelConfigurationSpec) -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: bootstrap_meta(name),
        spec: Some(spec),
        status: None,
    }
}

/// A `Limited` level with no borrowing limit.
fn limited(
    shares: i32,
    lendable_percent: i32,
    response: LimitResponse,
) -> PriorityLevelConfigurationSpec {
    PriorityLevelConfigurationSpec {
        type_: "Limited".to_string(),
        limited: Some(LimitedPriorityLevelConfiguration {
            nominal_concurrency_shares: Some(shares),
            lendable_percent: Some(lendable_percent),
            borrowing_limit_percent: None,
            limit_response: Some(response),
        }),
        exempt: None,
    }
}

fn queue(queues: i32, hand_size: i32, queue_length_limit: i32) -> LimitResponse {
    LimitResponse {
        type_: "Queue".to_string(),
        queuing: Some(QueuingConfiguration {
            queues: Some(queues),
            hand_size: Some(hand_size),
            queue_length_limit: Some(queue_length_limit),
        }),
    }
}

fn reject() -> LimitResponse {
    LimitResponse {
        type_: "Reject".to_string(),
        queuing: None,
    }
}

/// `newFlowSchema`: no distinguisher method when `distinguisher` is `None`.
fn flow_schema(
    name: &str,
    level: &str,
    matching_precedence: i32,
    distinguisher: Option<&str>,
    rules: PolicyRulesWithSubjects,
) -> FlowSchema {
    FlowSchema {
        metadata: bootstrap_meta(name),
        spec: Some(FlowSchemaSpec {
            priority_level_configuration: PriorityLevelConfigurationReference {
                name: level.to_string(),
            },
            matching_precedence: Some(matching_precedence),
            distinguisher_method: distinguisher.map(|d| FlowDistinguisherMethod {
                type_: d.to_string(),
            }),
            rules: Some(vec![rules]),
        }),
        status: None,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn groups(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|name| Subject {
            kind: "Group".to_string(),
            group: Some(GroupSubject {
                name: name.to_string(),
            }),
            ..Subject::default()
        })
        .collect()
}

fn users(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|name| Subject {
            kind: "User".to_string(),
            user: Some(UserSubject {
                name: name.to_string(),
            }),
            ..Subject::default()
        })
        .collect()
}

fn kube_system_service_accounts(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|name| Subject {
            kind: "ServiceAccount".to_string(),
            service_account: Some(ServiceAccountSubject {
                name: name.to_string(),
                namespace: "kube-system".to_string(),
            }),
            ..Subject::default()
        })
        .collect()
}

/// `resourceRule`; a false `clusterScope` is left out, as Go's `omitempty` does.
fn resource_rule(
    verbs: &[&str],
    api_groups: &[&str],
    resources: &[&str],
    namespaces: &[&str],
    cluster_scope: bool,
) -> ResourcePolicyRule {
    ResourcePolicyRule {
        verbs: strings(verbs),
        api_groups: strings(api_groups),
        resources: strings(resources),
        namespaces: Some(strings(namespaces)),
        cluster_scope: cluster_scope.then_some(true),
    }
}

fn non_resource_rule(verbs: &[&str], urls: &[&str]) -> NonResourcePolicyRule {
    NonResourcePolicyRule {
        verbs: strings(verbs),
        non_resource_urls: strings(urls),
    }
}

/// Every verb on every resource (cluster-scoped and in every namespace) and every
/// non-resource URL, for `subjects`.
fn everything(subjects: Vec<Subject>) -> PolicyRulesWithSubjects {
    PolicyRulesWithSubjects {
        subjects,
        resource_rules: Some(vec![resource_rule(&[ALL], &[ALL], &[ALL], &[ALL], true)]),
        non_resource_rules: Some(vec![non_resource_rule(&[ALL], &[ALL])]),
    }
}

/// `MandatoryPriorityLevelConfigurations`: `catch-all`, `exempt`.
pub(crate) fn mandatory_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![
        priority_level("catch-all", limited(5, 0, reject())),
        priority_level(
            "exempt",
            PriorityLevelConfigurationSpec {
                type_: "Exempt".to_string(),
                exempt: Some(ExemptPriorityLevelConfiguration {
                    nominal_concurrency_shares: Some(0),
                    lendable_percent: Some(0),
                }),
                limited: None,
            },
        ),
    ]
}

/// `MandatoryFlowSchemas`: `exempt`, `catch-all`.
pub(crate) fn mandatory_flow_schemas() -> Vec<FlowSchema> {
    vec![
        // Prevents priority inversion and keeps sysadmin requests always possible.
        flow_schema(
            "exempt",
            "exempt",
            1,
            None,
            everything(groups(&[SYSTEM_PRIVILEGED_GROUP])),
        ),
        // Only a minimal share, reached only when the suggested `global-default` is gone.
        flow_schema(
            "catch-all",
            "catch-all",
            10000,
            Some(BY_USER),
            everything(groups(&[ALL_UNAUTHENTICATED, ALL_AUTHENTICATED])),
        ),
    ]
}

/// `SuggestedPriorityLevelConfigurations`.
pub(crate) fn suggested_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![
        // System components that keep the cluster and its pods running (kubelet, kube-proxy).
        priority_level("system", limited(30, 33, queue(64, 6, 50))),
        // Node health reporting, apart from `system` so that it goes on under pod-startup load.
        priority_level("node-high", limited(40, 25, queue(64, 6, 50))),
        priority_level("leader-election", limited(10, 0, queue(16, 4, 50))),
        priority_level("workload-high", limited(40, 50, queue(128, 6, 50))),
        priority_level("workload-low", limited(100, 90, queue(128, 6, 50))),
        // The rest of the traffic.
        priority_level("global-default", limited(20, 50, queue(128, 6, 50))),
    ]
}

/// `SuggestedFlowSchemas`, in upstream's order.
pub(crate) fn suggested_flow_schemas() -> Vec<FlowSchema> {
    let get_create_update = ["get", "create", "update"];
    let system_nodes = flow_schema(
        "system-nodes",
        "system",
        500,
        Some(BY_USER),
        everything(groups(&[NODES_GROUP])),
    );
    let system_node_high = flow_schema(
        "system-node-high",
        "node-high",
        400,
        Some(BY_USER),
        PolicyRulesWithSubjects {
            subjects: groups(&[NODES_GROUP]),
            resource_rules: Some(vec![
                resource_rule(&[ALL], &[""], &["nodes", "nodes/status"], &[ALL], true),
                resource_rule(&[ALL], &[COORDINATION_GROUP], &["leases"], &[ALL], false),
            ]),
            non_resource_rules: None,
        },
    );
    // Exempts probes.
    let probes = flow_schema(
        "probes",
        "exempt",
        2,
        None,
        PolicyRulesWithSubjects {
            subjects: groups(&[ALL_UNAUTHENTICATED, ALL_AUTHENTICATED]),
            resource_rules: None,
            non_resource_rules: Some(vec![non_resource_rule(
                &["get"],
                &["/healthz", "/readyz", "/livez"],
            )]),
        },
    );
    let system_leader_election = flow_schema(
        "system-leader-election",
        "leader-election",
        100,
        Some(BY_USER),
        PolicyRulesWithSubjects {
            subjects: [
                users(&[KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER]),
                kube_system_service_accounts(&[ALL]),
            ]
            .concat(),
            resource_rules: Some(vec![resource_rule(
                &get_create_update,
                &[COORDINATION_GROUP],
                &["leases"],
                &[ALL],
                false,
            )]),
            non_resource_rules: None,
        },
    );
    let workload_leader_election = flow_schema(
        "workload-leader-election",
        "leader-election",
        200,
        Some(BY_USER),
        PolicyRulesWithSubjects {
            subjects: kube_system_service_accounts(&[ALL]),
            resource_rules: Some(vec![
                resource_rule(
                    &get_create_update,
                    &[""],
                    &["endpoints", "configmaps"],
                    &[ALL],
                    false,
                ),
                resource_rule(
                    &get_create_update,
                    &[COORDINATION_GROUP],
                    &["leases"],
                    &[ALL],
                    false,
                ),
            ]),
            non_resource_rules: None,
        },
    );
    // Keeps the endpoints controllers' writes out of `workload-leader-election`.
    let endpoint_controller = flow_schema(
        "endpoint-controller",
        "workload-high",
        150,
        Some(BY_USER),
        PolicyRulesWithSubjects {
            subjects: [
                users(&[KUBE_CONTROLLER_MANAGER]),
                kube_system_service_accounts(&[
                    "endpoint-controller",
                    "endpointslicemirroring-controller",
                ]),
            ]
            .concat(),
            resource_rules: Some(vec![resource_rule(
                &get_create_update,
                &[""],
                &["endpoints"],
                &[ALL],
                false,
            )]),
            non_resource_rules: None,
        },
    );
    let kube_controller_manager = flow_schema(
        "kube-controller-manager",
        "workload-high",
        800,
        Some(BY_NAMESPACE),
        everything(users(&[KUBE_CONTROLLER_MANAGER])),
    );
    let kube_scheduler = flow_schema(
        "kube-scheduler",
        "workload-high",
        800,
        Some(BY_NAMESPACE),
        everything(users(&[KUBE_SCHEDULER])),
    );
    let kube_system_service_accounts_schema = flow_schema(
        "kube-system-service-accounts",
        "workload-high",
        900,
        Some(BY_NAMESPACE),
        everything(kube_system_service_accounts(&[ALL])),
    );
    let service_accounts = flow_schema(
        "service-accounts",
        "workload-low",
        9000,
        Some(BY_USER),
        everything(groups(&[ALL_SERVICE_ACCOUNTS_GROUP])),
    );
    let global_default = flow_schema(
        "global-default",
        "global-default",
        9900,
        Some(BY_USER),
        everything(groups(&[ALL_UNAUTHENTICATED, ALL_AUTHENTICATED])),
    );
    vec![
        system_nodes,
        system_node_high,
        probes,
        system_leader_election,
        workload_leader_election,
        endpoint_controller,
        kube_controller_manager,
        kube_scheduler,
        kube_system_service_accounts_schema,
        service_accounts,
        global_default,
    ]
}

// ---------------------------------------------------------------------------
// The ensurer (pkg/registry/flowcontrol/ensurer)
// ---------------------------------------------------------------------------

/// How a bootstrap object is maintained (`NewMandatoryEnsureStrategy`,
/// `NewSuggestedEnsureStrategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// The spec is always brought back to the bootstrap one.
    Mandatory,
    /// The spec is kept up to date only while the object is marked for auto-update.
    Suggested,
}

/// The kind of the objects planned for, which decides how their specs compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    PriorityLevel,
    FlowSchema,
}

/// The writes that bring one kind's objects to the bootstrap configuration.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    /// Bootstrap objects that do not exist.
    pub(crate) creates: Vec<Value>,
    /// Existing objects, revised (annotation and/or spec), to be written back.
    pub(crate) updates: Vec<Value>,
    /// Names of objects marked for auto-update that are no longer bootstrap objects.
    pub(crate) deletes: Vec<String>,
}

/// `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn autoupdate_annotation(obj: &Value) -> Option<&str> {
    obj["metadata"]["annotations"][AUTOUPDATE_ANNOTATION].as_str()
}

/// `shouldUpdateSpec`: the annotation when it is a boolean, else whether the object
/// is unedited (generation 1).
fn should_update_spec(current: &Value) -> bool {
    match autoupdate_annotation(current).and_then(parse_bool) {
        Some(auto_update) => auto_update,
        None => current["metadata"]["generation"].as_i64() == Some(1),
    }
}

/// An empty list is the same as a missing one (Go's semantic equality).
fn non_empty<T>(list: Option<Vec<T>>) -> Option<Vec<T>> {
    list.filter(|l| !l.is_empty())
}

/// A FlowSchema spec with upstream's defaults applied and the representations Go
/// does not tell apart (empty and missing lists, false and missing `clusterScope`)
/// made one.
fn normalized_flow_schema_spec(mut spec: FlowSchemaSpec) -> FlowSchemaSpec {
    if spec.matching_precedence.unwrap_or(0) == 0 {
        spec.matching_precedence = Some(DEFAULT_MATCHING_PRECEDENCE);
    }
    let rules = spec.rules.take().unwrap_or_default();
    let rules = rules
        .into_iter()
        .map(|mut rule| {
            let resource_rules = rule.resource_rules.take().unwrap_or_default();
            rule.resource_rules = non_empty(Some(
                resource_rules
                    .into_iter()
                    .map(|mut r| {
                        r.cluster_scope = r.cluster_scope.filter(|scope| *scope);
                        r.namespaces = non_empty(r.namespaces);
                        r
                    })
                    .collect(),
            ));
            rule.non_resource_rules = non_empty(rule.non_resource_rules);
            rule
        })
        .collect();
    spec.rules = non_empty(Some(rules));
    spec
}

/// A PriorityLevelConfiguration spec with upstream's defaults applied
/// (`SetObjectDefaults_PriorityLevelConfiguration`).
fn normalized_priority_level_spec(
    mut spec: PriorityLevelConfigurationSpec,
) -> PriorityLevelConfigurationSpec {
    if let Some(limited) = &mut spec.limited {
        limited
            .nominal_concurrency_shares
            .get_or_insert(DEFAULT_NOMINAL_CONCURRENCY_SHARES);
        limited.lendable_percent.get_or_insert(0);
        // A struct, not a pointer, in Go: missing is the zero value.
        let response = limited.limit_response.get_or_insert_with(Default::default);
        if let Some(q) = &mut response.queuing {
            for (field, default) in [
                (&mut q.hand_size, DEFAULT_HAND_SIZE),
                (&mut q.queues, DEFAULT_QUEUES),
                (&mut q.queue_length_limit, DEFAULT_QUEUE_LENGTH_LIMIT),
            ] {
                if field.unwrap_or(0) == 0 {
                    *field = Some(default);
                }
            }
        }
    }
    if let Some(exempt) = &mut spec.exempt {
        exempt.nominal_concurrency_shares.get_or_insert(0);
        exempt.lendable_percent.get_or_insert(0);
    }
    spec
}

fn spec_of<T: serde::de::DeserializeOwned>(obj: &Value) -> Option<T> {
    serde_json::from_value(obj.get("spec")?.clone()).ok()
}

/// `flowSchemaSpecEqual` / `plcSpecEqualish`: whether the defaulted bootstrap spec
/// equals the stored one. The `exempt` level's shares and lendable percent are the
/// operator's to tune: only the presence of `spec.exempt` is compared.
fn spec_equalish(kind: Kind, bootstrap: &Value, current: &Value) -> bool {
    match kind {
        Kind::FlowSchema => {
            let (Some(expected), Some(actual)) = (
                spec_of::<FlowSchemaSpec>(bootstrap),
                spec_of::<FlowSchemaSpec>(current),
            ) else {
                return false;
            };
            normalized_flow_schema_spec(expected) == normalized_flow_schema_spec(actual)
        }
        Kind::PriorityLevel => {
            let (Some(expected), Some(actual)) = (
                spec_of::<PriorityLevelConfigurationSpec>(bootstrap),
                spec_of::<PriorityLevelConfigurationSpec>(current),
            ) else {
                return false;
            };
            let mut expected = normalized_priority_level_spec(expected);
            let actual = normalized_priority_level_spec(actual);
            if meta::name(bootstrap) == "exempt" {
                let Some(actual_exempt) = &actual.exempt else {
                    return false;
                };
                if let Some(exempt) = &mut expected.exempt {
                    exempt.nominal_concurrency_shares = actual_exempt.nominal_concurrency_shares;
                    exempt.lendable_percent = actual_exempt.lendable_percent;
                }
            }
            expected == actual
        }
    }
}

/// `strategy.ReviseIfNeeded`: the stored object revised towards the bootstrap one, or
/// `None` when it is up to date. The annotation is set to whether the spec is
/// auto-updated when it does not already say so.
fn revise(kind: Kind, strategy: Strategy, current: &Value, bootstrap: &Value) -> Option<Value> {
    let auto_update_spec = match strategy {
        Strategy::Mandatory => true,
        Strategy::Suggested => should_update_spec(current),
    };
    let update_annotation =
        autoupdate_annotation(current).and_then(parse_bool) != Some(auto_update_spec);
    let spec_changed = auto_update_spec && !spec_equalish(kind, bootstrap, current);
    if !(update_annotation || spec_changed) {
        return None;
    }
    let mut revised = current.clone();
    if spec_changed {
        revised["spec"] = bootstrap["spec"].clone();
    }
    if update_annotation {
        revised["metadata"]["annotations"][AUTOUPDATE_ANNOTATION] =
            Value::String(auto_update_spec.to_string());
    }
    Some(revised)
}

/// The creates, updates and deletes that bring the `existing` objects of one kind to
/// the `wanted` bootstrap objects (upstream `EnsureConfigurations` for each strategy,
/// then `RemoveUnwantedObjects` over all of them): missing objects are created,
/// existing ones revised by their strategy, and existing objects not wanted whose
/// annotation parses as `true` deleted.
pub(crate) fn plan(kind: Kind, existing: &[Value], wanted: &[(Strategy, Value)]) -> Plan {
    let by_name: HashMap<&str, &Value> = existing.iter().map(|o| (meta::name(o), o)).collect();
    let mut plan = Plan::default();
    for (strategy, bootstrap) in wanted {
        match by_name.get(meta::name(bootstrap)) {
            None => plan.creates.push(bootstrap.clone()),
            Some(current) => {
                if let Some(revised) = revise(kind, *strategy, current, bootstrap) {
                    plan.updates.push(revised);
                }
            }
        }
    }
    let wanted_names: HashSet<&str> = wanted.iter().map(|(_, o)| meta::name(o)).collect();
    for current in existing {
        let name = meta::name(current);
        if !wanted_names.contains(name)
            && autoupdate_annotation(current).and_then(parse_bool) == Some(true)
        {
            plan.deletes.push(name.to_string());
        }
    }
    plan
}

/// The bootstrap objects of one kind with their strategies, suggested first (the
/// order upstream ensures them in).
fn wanted<T: serde::Serialize>(
    suggested: Vec<T>,
    mandatory: Vec<T>,
) -> Result<Vec<(Strategy, Value)>, ApiError> {
    let suggested = suggested
        .iter()
        .map(|o| Ok((Strategy::Suggested, to_value(o)?)));
    let mandatory = mandatory
        .iter()
        .map(|o| Ok((Strategy::Mandatory, to_value(o)?)));
    suggested.chain(mandatory).collect()
}

enum Write {
    Create(Value),
    Update(Value),
    Delete(String),
}

/// A plan's creates and updates, and its deletes.
fn writes(plan: Plan) -> (Vec<Write>, Vec<Write>) {
    let creates = plan.creates.into_iter().map(Write::Create);
    let updates = plan.updates.into_iter().map(Write::Update);
    let deletes = plan.deletes.into_iter().map(Write::Delete);
    (creates.chain(updates).collect(), deletes.collect())
}

/// A write's result, with the errors upstream tolerates taken as success.
fn tolerating<T>(
    result: Result<T, ApiError>,
    tolerated: fn(&ApiError) -> bool,
) -> Result<(), ApiError> {
    match result {
        Err(e) if !tolerated(&e) => Err(e),
        _ => Ok(()),
    }
}

/// One write of a plan. As upstream, an object created or deleted concurrently and
/// an update refused for a concurrent change are not errors.
async fn write(store: &Store, write: Write) -> Result<(), ApiError> {
    let opts = WriteOptions {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..WriteOptions::default()
    };
    match write {
        Write::Create(obj) => tolerating(
            store.create(None, obj, &opts).await,
            ApiError::is_already_exists,
        ),
        Write::Update(obj) => {
            let name = meta::name(&obj).to_string();
            let update = UpdateInput::Replace(obj);
            tolerating(
                store.update(None, &name, update, Part::Main, &opts).await,
                ApiError::is_conflict,
            )
        }
        Write::Delete(name) => tolerating(
            store.delete(None, &name, &DeleteOptions::default()).await,
            ApiError::is_not_found,
        ),
    }
}

async fn write_all(store: &Store, writes: Vec<Write>) -> Result<(), ApiError> {
    futures::stream::iter(writes.into_iter().map(|w| write(store, w)))
        .buffer_unordered(WRITES_IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// The objects a store holds now (one LIST).
async fn listed(store: &Store) -> Result<Vec<Value>, ApiError> {
    Ok(existing_objects(store).await?.into_values().collect())
}

/// Creates, revises and removes the APF bootstrap configuration (upstream's
/// `priority-and-fairness-config-producer` post-start hook, one pass): what exists is
/// read with one LIST per resource, then the priority levels are written, then the
/// flow schemas, then the unwanted flow schemas and then the unwanted priority levels
/// deleted (upstream's order); it returns once the watch caches, which the filter
/// reads, see the writes.
pub(crate) async fn ensure(registry: &Registry) -> Result<(), ApiError> {
    let store = |plural: &str| {
        registry
            .store(GROUP, "v1", plural)
            .cloned()
            .ok_or_else(|| ApiError::internal(format!("no store for {plural}.{GROUP}")))
    };
    let (levels, schemas) = (store("prioritylevelconfigurations")?, store("flowschemas")?);
    let wanted_levels = wanted(suggested_priority_levels(), mandatory_priority_levels())?;
    let wanted_schemas = wanted(suggested_flow_schemas(), mandatory_flow_schemas())?;
    let level_plan = plan(Kind::PriorityLevel, &listed(&levels).await?, &wanted_levels);
    let schema_plan = plan(Kind::FlowSchema, &listed(&schemas).await?, &wanted_schemas);
    let (level_upserts, level_deletes) = writes(level_plan);
    let (schema_upserts, schema_deletes) = writes(schema_plan);
    write_all(&levels, level_upserts).await?;
    write_all(&schemas, schema_upserts).await?;
    write_all(&schemas, schema_deletes).await?;
    write_all(&levels, level_deletes).await?;
    let revision = registry
        .storage()
        .current_revision()
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    for store in [&levels, &schemas] {
        store
            .cache()
            .wait_for(revision, Duration::from_secs(30))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names<T>(objects: &[T], name: impl Fn(&T) -> &Option<String>) -> Vec<&str> {
        objects
            .iter()
            .map(|o| name(o).as_deref().unwrap_or_default())
            .collect()
    }

    fn all_levels() -> Vec<PriorityLevelConfiguration> {
        [mandatory_priority_levels(), suggested_priority_levels()].concat()
    }

    fn all_schemas() -> Vec<FlowSchema> {
        [mandatory_flow_schemas(), suggested_flow_schemas()].concat()
    }

    fn level(name: &str) -> PriorityLevelConfiguration {
        all_levels()
            .into_iter()
            .find(|l| l.metadata.name.as_deref() == Some(name))
            .unwrap()
    }

    fn schema(name: &str) -> FlowSchemaSpec {
        all_schemas()
            .into_iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap()
            .spec
            .unwrap()
    }

    #[test]
    fn the_sets_are_upstreams() {
        assert_eq!(
            names(&mandatory_priority_levels(), |o| &o.metadata.name),
            ["catch-all", "exempt"]
        );
        assert_eq!(
            names(&mandatory_flow_schemas(), |o| &o.metadata.name),
            ["exempt", "catch-all"]
        );
        assert_eq!(
            names(&suggested_priority_levels(), |o| &o.metadata.name),
            [
                "system",
                "node-high",
                "leader-election",
                "workload-high",
                "workload-low",
                "global-default"
            ]
        );
        assert_eq!(
            names(&suggested_flow_schemas(), |o| &o.metadata.name),
            [
                "system-nodes",
                "system-node-high",
                "probes",
                "system-leader-election",
                "workload-leader-election",
                "endpoint-controller",
                "kube-controller-manager",
                "kube-scheduler",
                "kube-system-service-accounts",
                "service-accounts",
                "global-default"
            ]
        );
    }

    #[test]
    fn spot_checks_against_upstream() {
        let exempt = level("exempt").spec.unwrap();
        assert_eq!(exempt.type_, "Exempt");
        assert!(exempt.limited.is_none());
        let e = exempt.exempt.unwrap();
        assert_eq!(
            (e.nominal_concurrency_shares, e.lendable_percent),
            (Some(0), Some(0))
        );

        // Upstream's TestBootstrapPriorityLevelConfigurationWithBorrowing.
        for (name, shares, lendable) in [
            ("leader-election", 10, 0),
            ("node-high", 40, 25),
            ("system", 30, 33),
            ("workload-high", 40, 50),
            ("workload-low", 100, 90),
            ("global-default", 20, 50),
            ("catch-all", 5, 0),
        ] {
            let spec = level(name).spec.unwrap();
            assert_eq!(spec.type_, "Limited", "{name}");
            let l = spec.limited.unwrap();
            assert_eq!(l.nominal_concurrency_shares, Some(shares), "{name}");
            assert_eq!(l.lendable_percent, Some(lendable), "{name}");
            assert_eq!(l.borrowing_limit_percent, None, "{name}");
        }
        let catch_all = level("catch-all").spec.unwrap().limited.unwrap();
        assert_eq!(catch_all.limit_response.unwrap().type_, "Reject");
        let leader = level("leader-election").spec.unwrap().limited.unwrap();
        let q = leader.limit_response.unwrap().queuing.unwrap();
        assert_eq!(
            (q.queues, q.hand_size, q.queue_length_limit),
            (Some(16), Some(4), Some(50))
        );

        let fs = schema("exempt");
        assert_eq!(fs.matching_precedence, Some(1));
        assert_eq!(fs.priority_level_configuration.name, "exempt");
        assert!(fs.distinguisher_method.is_none());
        assert_eq!(fs.rules.unwrap()[0].subjects, groups(&["system:masters"]));

        let fs = schema("catch-all");
        assert_eq!(fs.matching_precedence, Some(10000));
        assert_eq!(fs.distinguisher_method.unwrap().type_, "ByUser");
        assert_eq!(
            fs.rules.unwrap()[0].subjects,
            groups(&["system:unauthenticated", "system:authenticated"])
        );

        let fs = schema("global-default");
        assert_eq!(fs.matching_precedence, Some(9900));
        assert_eq!(fs.priority_level_configuration.name, "global-default");

        let fs = schema("system-nodes");
        assert_eq!(fs.matching_precedence, Some(500));
        let rules = fs.rules.unwrap();
        assert_eq!(
            serde_json::to_value(&rules[0].subjects).unwrap(),
            json!([{"kind": "Group", "group": {"name": "system:nodes"}}])
        );

        let fs = schema("probes");
        assert_eq!(
            (
                fs.matching_precedence,
                fs.priority_level_configuration.name.as_str()
            ),
            (Some(2), "exempt")
        );
        let rule = &fs.rules.unwrap()[0];
        assert!(rule.resource_rules.is_none());
        let nr = &rule.non_resource_rules.as_ref().unwrap()[0];
        assert_eq!(nr.verbs, ["get"]);
        assert_eq!(nr.non_resource_urls, ["/healthz", "/readyz", "/livez"]);

        let fs = schema("endpoint-controller");
        assert_eq!(fs.matching_precedence, Some(150));
        assert_eq!(
            serde_json::to_value(&fs.rules.unwrap()[0]).unwrap(),
            json!({
                "subjects": [
                    {"kind": "User", "user": {"name": "system:kube-controller-manager"}},
                    {"kind": "ServiceAccount", "serviceAccount":
                        {"name": "endpoint-controller", "namespace": "kube-system"}},
                    {"kind": "ServiceAccount", "serviceAccount":
                        {"name": "endpointslicemirroring-controller", "namespace": "kube-system"}},
                ],
                "resourceRules": [{"verbs": ["get", "create", "update"], "apiGroups": [""],
                    "resources": ["endpoints"], "namespaces": ["*"]}],
            })
        );

        // 1.33 dropped the kube-system endpoints/configmaps rule of this one.
        let fs = schema("system-leader-election");
        let rule = &fs.rules.unwrap()[0];
        assert_eq!(rule.subjects.len(), 3);
        assert_eq!(rule.resource_rules.as_ref().unwrap().len(), 1);

        for name in [
            "kube-controller-manager",
            "kube-scheduler",
            "kube-system-service-accounts",
        ] {
            let fs = schema(name);
            assert_eq!(
                fs.distinguisher_method.unwrap().type_,
                "ByNamespace",
                "{name}"
            );
            assert_eq!(
                fs.priority_level_configuration.name, "workload-high",
                "{name}"
            );
        }
        let fs = schema("service-accounts");
        assert_eq!(fs.matching_precedence, Some(9000));
        assert_eq!(
            fs.rules.unwrap()[0].subjects,
            groups(&["system:serviceaccounts"])
        );
    }

    #[test]
    fn every_object_is_sane() {
        let levels = all_levels();
        let schemas = all_schemas();
        let level_names: HashSet<&str> = levels
            .iter()
            .map(|l| l.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(level_names.len(), levels.len(), "level names are unique");
        let schema_names: HashSet<&str> = schemas
            .iter()
            .map(|s| s.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(schema_names.len(), schemas.len(), "schema names are unique");

        for l in &levels {
            let v = to_value(l).unwrap();
            assert_eq!(v["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
            assert_eq!(v["kind"], "PriorityLevelConfiguration");
            assert_eq!(v["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true");
            let spec = l.spec.clone().unwrap();
            match spec.type_.as_str() {
                "Exempt" => assert!(spec.exempt.is_some() && spec.limited.is_none()),
                "Limited" => {
                    let limited = spec.limited.as_ref().unwrap();
                    let response = limited.limit_response.as_ref().unwrap();
                    assert_eq!(response.queuing.is_some(), response.type_ == "Queue");
                }
                other => panic!("type {other}"),
            }
            // Upstream: the registered defaulting makes no change to these objects.
            assert_eq!(normalized_priority_level_spec(spec.clone()), spec);
        }
        for s in &schemas {
            let v = to_value(s).unwrap();
            assert_eq!(v["kind"], "FlowSchema");
            assert_eq!(v["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true");
            let spec = s.spec.clone().unwrap();
            assert!(
                level_names.contains(spec.priority_level_configuration.name.as_str()),
                "{:?} names a missing level",
                s.metadata.name
            );
            assert!((1..=10000).contains(&spec.matching_precedence.unwrap()));
            for rule in spec.rules.as_ref().unwrap() {
                assert!(!rule.subjects.is_empty());
                for r in rule.resource_rules.iter().flatten() {
                    // Go leaves a false clusterScope out.
                    assert_ne!(r.cluster_scope, Some(false));
                }
            }
            assert_eq!(normalized_flow_schema_spec(spec.clone()), spec);
        }
    }

    /// The bootstrap objects as the store holds them after creating them.
    fn stored(objects: &[(Strategy, Value)]) -> Vec<Value> {
        objects
            .iter()
            .map(|(_, o)| {
                let mut o = o.clone();
                o["metadata"]["uid"] = json!("u");
                o["metadata"]["resourceVersion"] = json!("7");
                o["metadata"]["generation"] = json!(1);
                o["status"] = json!({});
                o
            })
            .collect()
    }

    fn find<'a>(objects: &'a mut [Value], name: &str) -> &'a mut Value {
        objects.iter_mut().find(|o| meta::name(o) == name).unwrap()
    }

    fn wanted_levels() -> Vec<(Strategy, Value)> {
        wanted(suggested_priority_levels(), mandatory_priority_levels()).unwrap()
    }

    fn wanted_schemas() -> Vec<(Strategy, Value)> {
        wanted(suggested_flow_schemas(), mandatory_flow_schemas()).unwrap()
    }

    #[test]
    fn plan_creates_what_is_missing_and_keeps_what_is_current() {
        let want = wanted_schemas();
        let p = plan(Kind::FlowSchema, &[], &want);
        assert_eq!(p.creates.len(), 13);
        assert!(p.updates.is_empty() && p.deletes.is_empty());
        assert_eq!(meta::name(&p.creates[0]), "system-nodes");
        assert_eq!(meta::name(&p.creates[12]), "catch-all");

        let p = plan(Kind::FlowSchema, &stored(&want), &want);
        assert_eq!(p, Plan::default());
        let want = wanted_levels();
        assert_eq!(
            plan(Kind::PriorityLevel, &stored(&want), &want),
            Plan::default()
        );

        // Only catch-all missing.
        let mut have = stored(&want);
        have.retain(|o| meta::name(o) != "catch-all");
        let p = plan(Kind::PriorityLevel, &have, &want);
        assert_eq!(p.creates.len(), 1);
        assert_eq!(meta::name(&p.creates[0]), "catch-all");
    }

    #[test]
    fn spec_comparison_applies_defaults() {
        let want = wanted_schemas();
        let mut have = stored(&want);
        // What Go does not tell apart: a false clusterScope, empty lists.
        let o = find(&mut have, "system-leader-election");
        o["spec"]["rules"][0]["resourceRules"][0]["clusterScope"] = json!(false);
        o["spec"]["rules"][0]["nonResourceRules"] = json!([]);
        assert_eq!(plan(Kind::FlowSchema, &have, &want), Plan::default());

        let want = wanted_levels();
        let mut have = stored(&want);
        // Operator-tuned exempt shares are kept.
        let o = find(&mut have, "exempt");
        o["spec"]["exempt"] = json!({"nominalConcurrencyShares": 10, "lendablePercent": 20});
        assert_eq!(plan(Kind::PriorityLevel, &have, &want), Plan::default());
        // A spec that lost `exempt` is restored.
        let o = find(&mut have, "exempt");
        o["spec"] = json!({"type": "Exempt"});
        let p = plan(Kind::PriorityLevel, &have, &want);
        assert_eq!(p.updates.len(), 1);
        assert_eq!(
            p.updates[0]["spec"]["exempt"]["nominalConcurrencyShares"],
            0
        );

        // A queuing config relying on the defaults equals one spelling them out.
        let mut a = json!({"spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 30,
            "lendablePercent": 0, "limitResponse": {"type": "Queue",
            "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}}});
        a["metadata"]["name"] = json!("x");
        let b = json!({"metadata": {"name": "x"}, "spec": {"type": "Limited", "limited": {
            "limitResponse": {"type": "Queue", "queuing": {}}}}});
        assert!(spec_equalish(Kind::PriorityLevel, &a, &b));
        let c = json!({"metadata": {"name": "x"}, "spec": {"type": "Limited", "limited": {
            "limitResponse": {"type": "Queue", "queuing": {"queues": 32}}}}});
        assert!(!spec_equalish(Kind::PriorityLevel, &a, &c));
    }

    #[test]
    fn mandatory_objects_are_always_restored() {
        let want = wanted_levels();
        let mut have = stored(&want);
        let o = find(&mut have, "catch-all");
        o["spec"]["limited"]["nominalConcurrencyShares"] = json!(50);
        o["metadata"]["annotations"][AUTOUPDATE_ANNOTATION] = json!("false");
        o["metadata"]["generation"] = json!(2);
        o["metadata"]["labels"] = json!({"mine": "yes"});
        let p = plan(Kind::PriorityLevel, &have, &want);
        assert!(p.creates.is_empty() && p.deletes.is_empty());
        assert_eq!(p.updates.len(), 1);
        let u = &p.updates[0];
        assert_eq!(u["spec"]["limited"]["nominalConcurrencyShares"], 5);
        assert_eq!(u["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true");
        // The rest of the stored object is kept, resourceVersion included.
        assert_eq!(u["metadata"]["labels"]["mine"], "yes");
        assert_eq!(u["metadata"]["resourceVersion"], "7");

        // Same spec, annotation missing: only the annotation is written.
        let mut have = stored(&want);
        let o = find(&mut have, "exempt");
        o["metadata"]["annotations"] = json!({});
        o["metadata"]["generation"] = json!(3);
        let spec = o["spec"].clone();
        let p = plan(Kind::PriorityLevel, &have, &want);
        assert_eq!(p.updates.len(), 1);
        assert_eq!(
            p.updates[0]["metadata"]["annotations"][AUTOUPDATE_ANNOTATION],
            "true"
        );
        assert_eq!(p.updates[0]["spec"], spec);
    }

    #[test]
    fn suggested_objects_follow_their_annotation() {
        let want = wanted_schemas();
        let edit = |annotation: Option<&str>, generation: i64| {
            let mut have = stored(&want);
            let o = find(&mut have, "service-accounts");
            o["spec"]["matchingPrecedence"] = json!(8000);
            o["metadata"]["generation"] = json!(generation);
            match annotation {
                Some(a) => o["metadata"]["annotations"][AUTOUPDATE_ANNOTATION] = json!(a),
                None => o["metadata"]["annotations"] = json!({}),
            }
            plan(Kind::FlowSchema, &have, &want)
        };
        // Marked for auto-update: the spec is restored.
        for annotation in ["true", "True", "1"] {
            let p = edit(Some(annotation), 2);
            assert_eq!(p.updates.len(), 1, "{annotation}");
            assert_eq!(p.updates[0]["spec"]["matchingPrecedence"], 9000);
            assert_eq!(
                p.updates[0]["metadata"]["annotations"][AUTOUPDATE_ANNOTATION],
                annotation
            );
        }
        // Opted out: left alone.
        assert_eq!(edit(Some("false"), 2), Plan::default());
        // No (or a malformed) annotation and unedited: restored and marked `true`.
        for annotation in [None, Some("yes")] {
            let p = edit(annotation, 1);
            assert_eq!(p.updates.len(), 1);
            assert_eq!(p.updates[0]["spec"]["matchingPrecedence"], 9000);
            assert_eq!(
                p.updates[0]["metadata"]["annotations"][AUTOUPDATE_ANNOTATION],
                "true"
            );
        }
        // No annotation and edited: the operator's spec is kept and marked `false`.
        let p = edit(None, 2);
        assert_eq!(p.updates.len(), 1);
        assert_eq!(p.updates[0]["spec"]["matchingPrecedence"], 8000);
        assert_eq!(
            p.updates[0]["metadata"]["annotations"][AUTOUPDATE_ANNOTATION],
            "false"
        );
    }

    #[test]
    fn unwanted_objects_marked_true_are_deleted() {
        let want = wanted_levels();
        let mut have = stored(&want);
        let extra = |name: &str, annotations: Value| {
            json!({"metadata": {"name": name, "annotations": annotations},
                "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}}})
        };
        have.push(extra("old-true", json!({AUTOUPDATE_ANNOTATION: "true"})));
        have.push(extra("old-t", json!({AUTOUPDATE_ANNOTATION: "t"})));
        have.push(extra("old-false", json!({AUTOUPDATE_ANNOTATION: "false"})));
        have.push(extra(
            "old-malformed",
            json!({AUTOUPDATE_ANNOTATION: "yes"}),
        ));
        have.push(extra("users-own", json!({"other": "x"})));
        let p = plan(Kind::PriorityLevel, &have, &want);
        assert!(p.creates.is_empty() && p.updates.is_empty());
        assert_eq!(p.deletes, ["old-true", "old-t"]);
    }
}
