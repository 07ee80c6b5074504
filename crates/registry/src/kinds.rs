//! The strategy hook of every built-in resource: its k8s-openapi type and [`Hooks`].
//! Adding a resource: one entry in `ferrokube_api::resources::RESOURCES` and one line
//! here. Every kind gets upstream's defaulting (`ApplyDefaults`), validation
//! (`Validate`, after defaulting) and object-metadata validation with its name rule.
//!
//! The per-kind steps upstream's strategies take in `PrepareForCreate` /
//! `PrepareForUpdate` / `Validate` are the hook functions below: Job selector and
//! controller-uid labels, Namespace finalizers and phase, Pod phase/qosClass and the
//! scheduling-gated condition. Service IP families and allocation live in
//! [`crate::allocator`].

use std::sync::Arc;

use ferrokube_api::defaults::ApplyDefaults;
use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::validation::{
    ValidateNameFn, name_is_dns_label, name_is_dns_subdomain, name_is_dns1035_label,
    validate_object_meta_update, validate_path_segment_name,
};
use ferrokube_validation::Validate;
use k8s_openapi::api;
use serde_json::{Map, Value, json};

use crate::meta;
use crate::strategy::{GcPolicy, Hooks, StorageCodec, Strategy, TypedStrategy};

const GENERATION: Hooks = Hooks {
    tracks_generation: true,
    ..Hooks::PLAIN
};

const POD: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({"phase": "Pending"})),
    fields: &[
        ("spec.nodeName", "spec.nodeName", ""),
        ("spec.restartPolicy", "spec.restartPolicy", ""),
        ("spec.schedulerName", "spec.schedulerName", ""),
        ("spec.serviceAccountName", "spec.serviceAccountName", ""),
        ("spec.hostNetwork", "spec.hostNetwork", "false"),
        ("status.phase", "status.phase", ""),
        ("status.podIP", "status.podIP", ""),
        ("status.nominatedNodeName", "status.nominatedNodeName", ""),
    ],
    prepare_create: Some(pod_prepare_create),
    // `spec.ephemeralContainers` changes only through `/ephemeralcontainers`.
    prepare_update: Some(|new: &mut Value, old: &Value| {
        let ephemeral = old["spec"]["ephemeralContainers"].clone();
        meta::set_member(new, "spec", "ephemeralContainers", ephemeral);
    }),
    normalize: None,
    storage_codec: None,
    status_annotations: &[],
    gc_policy: GcPolicy::DeleteDependents,
    create_on_update: false,
    unconditional_update: true,
};

const NODE: Hooks = Hooks {
    fields: &[("spec.unschedulable", "spec.unschedulable", "false")],
    ..Hooks::PLAIN
};

const NAMESPACE: Hooks = Hooks {
    initial_status: Some(|| json!({"phase": "Active"})),
    // `name` as upstream keeps it for old clients.
    fields: &[
        ("status.phase", "status.phase", ""),
        ("name", "metadata.name", ""),
    ],
    prepare_create: Some(|obj: &mut Value, _now: &str| {
        // Upstream's namespace strategy: the `kubernetes` finalizer, always.
        let spec = obj
            .as_object_mut()
            .map(|o| o.entry("spec").or_insert_with(|| json!({})));
        if let Some(spec) = spec.and_then(Value::as_object_mut) {
            let fins = spec.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(a) = fins.as_array_mut()
                && !a.iter().any(|f| f == "kubernetes")
            {
                a.push(json!("kubernetes"));
            }
        }
    }),
    // `spec.finalizers` changes only through `/finalize`.
    prepare_update: Some(|new: &mut Value, old: &Value| {
        meta::set_member(new, "spec", "finalizers", old["spec"]["finalizers"].clone());
    }),
    ..Hooks::PLAIN
};

const SECRET: Hooks = Hooks {
    fields: &[("type", "type", "")],
    normalize: Some(secret_string_data),
    ..Hooks::PLAIN
};

/// Upstream's v1 → internal Secret conversion: `stringData` is written into `data`
/// (overriding keys present in both) and never stored.
fn secret_string_data(secret: &mut Value) {
    use base64::Engine;
    let Some(o) = secret.as_object_mut() else {
        return;
    };
    let Some(Value::Object(sd)) = o.remove("stringData") else {
        return;
    };
    if sd.is_empty() {
        return;
    }
    let data = o.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let s = v.as_str().unwrap_or_default();
            d.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(s.as_bytes())),
            );
        }
    }
}

const EVENT: Hooks = Hooks {
    fields: &[
        ("involvedObject.kind", "involvedObject.kind", ""),
        ("involvedObject.namespace", "involvedObject.namespace", ""),
        ("involvedObject.name", "involvedObject.name", ""),
        ("involvedObject.uid", "involvedObject.uid", ""),
        ("involvedObject.apiVersion", "involvedObject.apiVersion", ""),
        (
            "involvedObject.resourceVersion",
            "involvedObject.resourceVersion",
            "",
        ),
        ("involvedObject.fieldPath", "involvedObject.fieldPath", ""),
        ("reason", "reason", ""),
        ("reportingComponent", "reportingComponent", ""),
        ("source", "source.component", ""),
        ("type", "type", ""),
    ],
    gc_policy: GcPolicy::Unsupported,
    create_on_update: true,
    ..Hooks::PLAIN
};

/// `events.k8s.io/v1` Events are stored as core `v1` Events (one resource, as
/// upstream): created through one API, they are seen through the other.
const EVENTS_V1: Hooks = Hooks {
    // Upstream's events.k8s.io field labels (its conversion to the core labels), as
    // paths of the events.k8s.io form, in which lists are filtered.
    fields: &[
        ("regarding.kind", "regarding.kind", ""),
        ("regarding.namespace", "regarding.namespace", ""),
        ("regarding.name", "regarding.name", ""),
        ("regarding.uid", "regarding.uid", ""),
        ("regarding.apiVersion", "regarding.apiVersion", ""),
        ("regarding.resourceVersion", "regarding.resourceVersion", ""),
        ("regarding.fieldPath", "regarding.fieldPath", ""),
        ("reason", "reason", ""),
        ("reportingController", "reportingController", ""),
        ("source", "deprecatedSource.component", ""),
        ("type", "type", ""),
    ],
    storage_codec: Some(StorageCodec {
        to_storage: event_to_storage,
        from_storage: event_from_storage,
    }),
    gc_policy: GcPolicy::Unsupported,
    create_on_update: true,
    ..Hooks::PLAIN
};

/// `obj` converted through the typed forms `From` -> `To`, in Go's JSON form of `To`
/// (upstream encodes the converted struct: an events.k8s.io Event read as a core one
/// has `firstTimestamp: null`, `source: {}`); a value that does not fit (never one the
/// strategies wrote) passes unchanged.
fn through_typed<From, To>(obj: Value, convert: impl FnOnce(From) -> To) -> Value
where
    From: serde::de::DeserializeOwned,
    To: serde::Serialize + k8s_openapi::Resource,
{
    match serde_json::from_value::<From>(obj.clone()) {
        Ok(typed) => match serde_json::to_value(convert(typed)) {
            Ok(mut converted) => {
                ferrokube_protobuf::to_go_json_form(To::API_VERSION, To::KIND, &mut converted);
                converted
            }
            Err(_) => obj,
        },
        Err(_) => obj,
    }
}

fn event_to_storage(obj: Value) -> Value {
    through_typed(obj, ferrokube_api::conversion::event_to_core)
}

fn event_from_storage(obj: Value) -> Value {
    through_typed(obj, ferrokube_api::conversion::event_from_core)
}

/// Upstream drops the annotations autoscaling/v1 keeps v2's fields in from every
/// write of the v2 form, so that only conversion ever writes them.
const HPA: Hooks = Hooks {
    normalize: Some(|obj| {
        use ferrokube_api::conversion::autoscaling::ROUND_TRIP_ANNOTATIONS;
        meta::remove_annotations(obj, &ROUND_TRIP_ANNOTATIONS);
    }),
    ..WORKLOAD
};

/// `autoscaling/v1` HorizontalPodAutoscalers are stored in the v2 form (one resource,
/// as upstream); what v1 has no field for travels in annotations, the status ones with
/// the status half of a write.
const HPA_V1: Hooks = Hooks {
    storage_codec: Some(StorageCodec {
        to_storage: hpa_to_storage,
        from_storage: hpa_from_storage,
    }),
    status_annotations: &ferrokube_api::conversion::autoscaling::STATUS_ANNOTATIONS,
    ..WORKLOAD
};

/// The stored form gets the v2 defaults upstream applies when it reads the v2 object
/// back from storage.
fn hpa_to_storage(obj: Value) -> Value {
    through_typed(obj, |hpa| {
        let mut stored = ferrokube_api::conversion::autoscaling::hpa_v1_to_v2(hpa);
        stored.apply_defaults();
        stored
    })
}

fn hpa_from_storage(obj: Value) -> Value {
    through_typed(obj, ferrokube_api::conversion::autoscaling::hpa_v2_to_v1)
}

const REPLICAS: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({"replicas": 0})),
    fields: &[("status.replicas", "status.replicas", "0")],
    ..Hooks::PLAIN
};

/// core/v1's deletes orphan a controller's pods unless they say otherwise, as they did
/// before the garbage collector.
const REPLICATION_CONTROLLER: Hooks = Hooks {
    gc_policy: GcPolicy::OrphanDependents,
    ..REPLICAS
};

const WORKLOAD: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({})),
    ..Hooks::PLAIN
};

const JOB: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({})),
    fields: &[("status.successful", "status.succeeded", "0")],
    prepare_create: Some(job_prepare_create),
    // batch/v1's deletes orphan a job's pods unless they say otherwise, as they did
    // before the garbage collector.
    gc_policy: GcPolicy::OrphanDependents,
    ..Hooks::PLAIN
};

const STATUS_ONLY: Hooks = Hooks {
    initial_status: Some(|| json!({})),
    ..Hooks::PLAIN
};

/// Created with an empty status (`attached` is not optional), set by the attacher only
/// through the status subresource.
const VOLUME_ATTACHMENT: Hooks = Hooks {
    initial_status: Some(|| json!({"attached": false})),
    unconditional_update: false,
    ..Hooks::PLAIN
};

/// Kinds upstream creates on a PUT of a missing object (`AllowCreateOnUpdate`), with
/// nothing else of their own.
const CREATED_ON_UPDATE: Hooks = Hooks {
    create_on_update: true,
    ..Hooks::PLAIN
};

/// Kinds upstream updates only at a named resourceVersion
/// (`AllowUnconditionalUpdate` false), with nothing else of their own.
const CONDITIONAL_UPDATE: Hooks = Hooks {
    unconditional_update: false,
    ..Hooks::PLAIN
};

const SERVICE: Hooks = Hooks {
    initial_status: Some(|| json!({"loadBalancer": {}})),
    fields: &[
        ("spec.clusterIP", "spec.clusterIP", ""),
        ("spec.type", "spec.type", ""),
    ],
    create_on_update: true,
    ..Hooks::PLAIN
};

const PVC: Hooks = Hooks {
    initial_status: Some(|| json!({"phase": "Pending"})),
    // `name` as upstream keeps it for old clients.
    fields: &[("name", "metadata.name", "")],
    ..Hooks::PLAIN
};

const PV: Hooks = Hooks {
    initial_status: Some(|| json!({"phase": "Pending"})),
    // `name` as upstream keeps it for old clients.
    fields: &[("name", "metadata.name", "")],
    ..Hooks::PLAIN
};

const CSR: Hooks = Hooks {
    initial_status: Some(|| json!({})),
    fields: &[("spec.signerName", "spec.signerName", "")],
    ..Hooks::PLAIN
};

/// kube-aggregator's APIService strategy: a new object's status starts empty, and a
/// local APIService (no `spec.service`) is Available at once.
const API_SERVICE: Hooks = Hooks {
    initial_status: Some(|| json!({})),
    prepare_create: Some(api_service_prepare_create),
    unconditional_update: false,
    ..Hooks::PLAIN
};

/// Upstream's `PrepareForCreate`: local APIServices are marked available on create
/// (`NewLocalAvailableAPIServiceCondition`).
fn api_service_prepare_create(obj: &mut Value, now: &str) {
    if !obj["spec"]["service"].is_null() {
        return;
    }
    let condition = json!({
        "type": "Available",
        "status": "True",
        "lastTransitionTime": now,
        "reason": "Local",
        "message": "Local APIServices are always available",
    });
    meta::set_member(obj, "status", "conditions", json!([condition]));
}

/// The strategy for one table entry; `None` for a resource without one (a table
/// entry added without its hook, which the registry's tests catch).
pub fn strategy_for(info: &'static ResourceInfo) -> Option<Arc<dyn Strategy>> {
    use api::{
        admissionregistration::v1 as admissionregistration, apps::v1 as apps,
        autoscaling::v2 as autoscaling, batch::v1 as batch, certificates::v1 as certificates,
        coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
        events::v1 as events, flowcontrol::v1 as flowcontrol, networking::v1 as networking,
        node::v1 as node, policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling,
        storage::v1 as storage,
    };
    macro_rules! typed {
        ($t:ty, $hooks:expr) => {
            Arc::new(
                TypedStrategy::<$t>::new(info, $hooks)
                    .with_defaults(<$t as ApplyDefaults>::apply_defaults)
                    .with_validation(
                        <$t as Validate>::validate_create,
                        <$t as Validate>::validate_update,
                    )
                    .with_name_validation(name_rule(info)),
            ) as Arc<dyn Strategy>
        };
    }
    let s = match (info.group, info.kind) {
        ("apiregistration.k8s.io", "APIService") => {
            use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
            typed!(apiregistration::APIService, API_SERVICE)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            typed!(
                admissionregistration::MutatingWebhookConfiguration,
                CONDITIONAL_UPDATE
            )
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            typed!(
                admissionregistration::ValidatingWebhookConfiguration,
                CONDITIONAL_UPDATE
            )
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            typed!(
                admissionregistration::ValidatingAdmissionPolicy,
                Hooks {
                    unconditional_update: false,
                    ..GENERATION_STATUS
                }
            )
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            typed!(
                admissionregistration::ValidatingAdmissionPolicyBinding,
                CONDITIONAL_UPDATE
            )
        }
        ("", "ConfigMap") => typed!(core::ConfigMap, Hooks::PLAIN),
        ("", "Endpoints") => typed!(core::Endpoints, CREATED_ON_UPDATE),
        ("", "Event") => typed!(core::Event, EVENT),
        ("", "LimitRange") => typed!(core::LimitRange, CREATED_ON_UPDATE),
        ("", "Namespace") => typed!(core::Namespace, NAMESPACE),
        ("", "Node") => typed!(core::Node, NODE),
        ("", "PersistentVolumeClaim") => typed!(core::PersistentVolumeClaim, PVC),
        ("", "PersistentVolume") => typed!(core::PersistentVolume, PV),
        ("", "Pod") => typed!(core::Pod, POD),
        ("", "PodTemplate") => typed!(core::PodTemplate, Hooks::PLAIN),
        ("", "ReplicationController") => {
            typed!(core::ReplicationController, REPLICATION_CONTROLLER)
        }
        ("", "ResourceQuota") => typed!(core::ResourceQuota, STATUS_ONLY),
        ("", "Secret") => typed!(core::Secret, SECRET),
        ("", "ServiceAccount") => typed!(core::ServiceAccount, Hooks::PLAIN),
        ("", "Service") => typed!(core::Service, SERVICE),
        ("apps", "ControllerRevision") => typed!(apps::ControllerRevision, Hooks::PLAIN),
        ("apps", "DaemonSet") => typed!(apps::DaemonSet, WORKLOAD),
        ("apps", "Deployment") => typed!(apps::Deployment, WORKLOAD),
        ("apps", "ReplicaSet") => typed!(apps::ReplicaSet, REPLICAS),
        ("apps", "StatefulSet") => typed!(apps::StatefulSet, WORKLOAD),
        ("autoscaling", "HorizontalPodAutoscaler") if info.version == "v1" => {
            typed!(api::autoscaling::v1::HorizontalPodAutoscaler, HPA_V1)
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            typed!(autoscaling::HorizontalPodAutoscaler, HPA)
        }
        ("batch", "CronJob") => typed!(batch::CronJob, WORKLOAD),
        ("batch", "Job") => typed!(batch::Job, JOB),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            typed!(certificates::CertificateSigningRequest, CSR)
        }
        ("coordination.k8s.io", "Lease") => typed!(
            coordination::Lease,
            Hooks {
                create_on_update: true,
                unconditional_update: false,
                ..Hooks::PLAIN
            }
        ),
        ("discovery.k8s.io", "EndpointSlice") => typed!(discovery::EndpointSlice, Hooks::PLAIN),
        ("events.k8s.io", "Event") => typed!(events::Event, EVENTS_V1),
        // Upstream's flowcontrol strategies: created with an empty status and
        // generation 1, generation bumped on spec changes, status written only through
        // the status subresource (which keeps the spec).
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => {
            typed!(flowcontrol::FlowSchema, GENERATION_STATUS)
        }
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => {
            typed!(flowcontrol::PriorityLevelConfiguration, GENERATION_STATUS)
        }
        ("networking.k8s.io", "IngressClass") => typed!(networking::IngressClass, Hooks::PLAIN),
        ("networking.k8s.io", "Ingress") => typed!(networking::Ingress, GENERATION_STATUS),
        ("networking.k8s.io", "NetworkPolicy") => typed!(networking::NetworkPolicy, GENERATION),
        // Upstream's ipaddress strategy: no status, no generation; the name is the
        // address (`name_rule`).
        ("networking.k8s.io", "IPAddress") => typed!(networking::IPAddress, Hooks::PLAIN),
        // Upstream's servicecidr strategies: the status (`{}` until the ServiceCIDR
        // controller writes conditions) through the status subresource, which keeps
        // the spec.
        ("networking.k8s.io", "ServiceCIDR") => typed!(networking::ServiceCIDR, STATUS_ONLY),
        ("node.k8s.io", "RuntimeClass") => typed!(
            node::RuntimeClass,
            Hooks {
                create_on_update: true,
                unconditional_update: false,
                ..Hooks::PLAIN
            }
        ),
        ("policy", "PodDisruptionBudget") => typed!(
            policy::PodDisruptionBudget,
            Hooks {
                unconditional_update: false,
                ..WORKLOAD
            }
        ),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            typed!(rbac::ClusterRoleBinding, CREATED_ON_UPDATE)
        }
        ("rbac.authorization.k8s.io", "ClusterRole") => {
            typed!(rbac::ClusterRole, CREATED_ON_UPDATE)
        }
        ("rbac.authorization.k8s.io", "RoleBinding") => {
            typed!(rbac::RoleBinding, CREATED_ON_UPDATE)
        }
        ("rbac.authorization.k8s.io", "Role") => typed!(rbac::Role, CREATED_ON_UPDATE),
        ("scheduling.k8s.io", "PriorityClass") => typed!(scheduling::PriorityClass, Hooks::PLAIN),
        ("storage.k8s.io", "StorageClass") => typed!(storage::StorageClass, Hooks::PLAIN),
        ("storage.k8s.io", "CSIDriver") => typed!(
            storage::CSIDriver,
            Hooks {
                unconditional_update: false,
                ..GENERATION
            }
        ),
        ("storage.k8s.io", "CSINode") => typed!(storage::CSINode, CONDITIONAL_UPDATE),
        ("storage.k8s.io", "CSIStorageCapacity") => {
            typed!(storage::CSIStorageCapacity, CONDITIONAL_UPDATE)
        }
        ("storage.k8s.io", "VolumeAttachment") => {
            typed!(storage::VolumeAttachment, VOLUME_ATTACHMENT)
        }
        (crate::custom::GROUP, "CustomResourceDefinition") => {
            use ferrokube_apiextensions::crd;
            Arc::new(
                TypedStrategy::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::new(info, DEFINITION)
                    .with_defaults(crd::default_crd)
                    .with_validation(crd::validate_crd, crd::validate_crd_update),
            ) as Arc<dyn Strategy>
        }
        _ => return None,
    };
    Some(s)
}

/// The rule `metadata.name` follows per kind (upstream's `Validate*Name`): DNS
/// subdomain unless the kind says otherwise.
fn name_rule(info: &ResourceInfo) -> ValidateNameFn {
    match (info.group, info.kind) {
        ("", "Namespace") => name_is_dns_label,
        ("", "Service") => name_is_dns1035_label,
        ("", "PersistentVolume") | ("rbac.authorization.k8s.io", _) => validate_path_segment_name,
        // "We don't care what you call your certificate requests."
        ("certificates.k8s.io", _) => validate_path_segment_name,
        // Upstream's APIService name function: `path.IsValidPathSegmentName` on the
        // name and the generateName prefix alike, then `<version>.<group>` (the
        // validation crate's part, as it needs the spec).
        ("apiregistration.k8s.io", _) => |name, _| validate_path_segment_name(name, false),
        // `ValidateIPAddressName`: the address in canonical form.
        ("networking.k8s.io", "IPAddress") => ferrokube_validation::validate_ip_address_name,
        _ => name_is_dns_subdomain,
    }
}

/// `batch.kubernetes.io/controller-uid` and friends (upstream's `generateSelector`, run
/// in the job strategy's `Validate` once the uid is known), unless
/// `spec.manualSelector`.
fn job_prepare_create(job: &mut Value, _now: &str) {
    const JOB_NAME_LABELS: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
    const UID_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];
    if job["spec"]["manualSelector"].as_bool() == Some(true) {
        return;
    }
    let name = json!(crate::meta::name(job));
    let uid = json!(crate::meta::uid(job));
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = object_at(spec, &["template", "metadata", "labels"]);
    for l in JOB_NAME_LABELS {
        labels.entry(l).or_insert_with(|| name.clone());
    }
    for l in UID_LABELS {
        labels.entry(l).or_insert_with(|| uid.clone());
    }
    object_at(spec, &["selector", "matchLabels"])
        .entry("batch.kubernetes.io/controller-uid")
        .or_insert(uid);
}

/// The object at `path` under `m`, created (and replacing non-objects) as needed.
fn object_at<'a>(m: &'a mut Map<String, Value>, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut cur = m;
    for k in path {
        let v = cur.entry(*k).or_insert_with(|| json!({}));
        if !v.is_object() {
            *v = json!({});
        }
        cur = v.as_object_mut().expect("object");
    }
    cur
}

/// Upstream's pod `PrepareForCreate`: status `Pending` with the QoS class, and the
/// `PodScheduled=False/SchedulingGated` condition when scheduling gates are set.
fn pod_prepare_create(pod: &mut Value, now: &str) {
    let qos = pod_qos_class(pod);
    let gated = pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty());
    let Some(o) = pod.as_object_mut() else {
        return;
    };
    let status = o
        .entry("status")
        .or_insert_with(|| json!({"phase": "Pending"}));
    if let Some(s) = status.as_object_mut() {
        s.insert("qosClass".into(), json!(qos));
        if gated {
            s.insert(
                "conditions".into(),
                json!([{
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": null,
                    "lastTransitionTime": now,
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }]),
            );
        }
    }
}

/// Upstream `dropNonResizeUpdates` (`pods/<name>/resize`): the stored pod with each
/// container's and init container's `resources` and `resizePolicy` taken from `new`,
/// matched by name (a reordered list is left to validation).
pub(crate) fn pod_resize(new: &Value, old: &Value) -> Value {
    let mut fin = old.clone();
    for list in ["containers", "initContainers"] {
        // `pointer_mut`, not indexing: an index would add `list: null` to the pod.
        let Some(containers) = fin
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in containers {
            let name = c["name"].clone();
            let Some(from) = new["spec"][list]
                .as_array()
                .and_then(|n| n.iter().find(|n| n["name"] == name))
            else {
                continue;
            };
            for field in ["resources", "resizePolicy"] {
                match from.get(field) {
                    Some(v) => c[field] = v.clone(),
                    None => {
                        if let Some(o) = c.as_object_mut() {
                            o.remove(field);
                        }
                    }
                }
            }
        }
    }
    fin
}

/// Upstream's resize strategy `ValidateUpdate`: metadata, then
/// [`ferrokube_validation::validate_pod_resize`], and the QoS class kept.
pub(crate) fn validate_pod_resize(
    new: &Value,
    old: &Value,
) -> Vec<ferrokube_validation::FieldError> {
    use ferrokube_validation::{FieldError, FieldPath};
    let typed = |v: &Value| serde_json::from_value::<api::core::v1::Pod>(v.clone());
    let (Ok(n), Ok(o)) = (typed(new), typed(old)) else {
        return vec![FieldError::invalid(
            &FieldPath::new("spec"),
            Value::Null,
            "the pod does not decode as a Pod",
        )];
    };
    let mut errs =
        validate_object_meta_update(&n.metadata, &o.metadata, &FieldPath::new("metadata"));
    errs.extend(ferrokube_validation::validate_pod_resize(&n, &o));
    let old_qos = old["status"]["qosClass"]
        .as_str()
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| pod_qos_class(old));
    let new_qos = pod_qos_class(new);
    if old_qos != new_qos {
        errs.push(FieldError::invalid(
            &FieldPath::new("spec"),
            json!(new["status"]["qosClass"].as_str().unwrap_or_default()),
            "Pod QOS Class may not change as a result of resizing",
        ));
    }
    errs
}

/// A quantity's value (enough to compare and to tell zero from positive).
fn quantity(q: &Value) -> Option<f64> {
    match q {
        Value::String(s) => ferrokube_apimachinery::quantity::approx(s),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// Upstream's `qos.GetPodQOS` (container-level resources; pod-level resources are
/// alpha in v1.33): `BestEffort` without cpu/memory requests or limits,
/// `Guaranteed` when every container limits cpu and memory and requests equal
/// limits, `Burstable` otherwise.
pub fn pod_qos_class(pod: &Value) -> &'static str {
    // Sums of cpu and memory (in that order) over the containers that set them; every
    // create of a pod computes this, so fixed arrays rather than maps.
    const RESOURCES: [&str; 2] = ["cpu", "memory"];
    let mut requests: [Option<f64>; 2] = [None; 2];
    let mut limits: [Option<f64>; 2] = [None; 2];
    let mut guaranteed = true;
    let spec = &pod["spec"];
    let containers = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|k| spec[k].as_array().into_iter().flatten());
    for c in containers {
        let res = &c["resources"];
        for (sum, key) in [(&mut requests, "requests"), (&mut limits, "limits")] {
            let set = &res[key];
            let mut found = 0;
            for (total, name) in sum.iter_mut().zip(RESOURCES) {
                if let Some(q) = set.get(name).and_then(quantity)
                    && q > 0.0
                {
                    *total.get_or_insert(0.0) += q;
                    found += 1;
                }
            }
            if key == "limits" && found < RESOURCES.len() {
                guaranteed = false;
            }
        }
    }
    if requests.iter().chain(&limits).all(Option::is_none) {
        return "BestEffort";
    }
    // Guaranteed: the same resources requested as limited, each request its limit.
    let requests_equal_limits = requests.iter().zip(&limits).all(|(r, l)| match (r, l) {
        (Some(r), Some(l)) => (l - r).abs() <= f64::EPSILON * l.abs().max(1.0),
        (None, None) => true,
        _ => false,
    });
    if guaranteed && requests_equal_limits {
        return "Guaranteed";
    }
    "Burstable"
}

/// CustomResourceDefinitions: upstream's status on create and the storage versions
/// recorded as stored (`crate::custom`).
const DEFINITION: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({})),
    prepare_create: Some(crate::custom::definition_prepare_create),
    prepare_update: Some(crate::custom::definition_prepare_update),
    unconditional_update: false,
    ..Hooks::PLAIN
};

const GENERATION_STATUS: Hooks = Hooks {
    tracks_generation: true,
    initial_status: Some(|| json!({})),
    ..Hooks::PLAIN
};

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_api::resources::RESOURCES;

    #[test]
    fn every_resource_has_a_strategy() {
        for r in RESOURCES {
            let s = strategy_for(r).unwrap_or_else(|| panic!("no strategy for {}", r.plural));
            assert_eq!(s.info().plural, r.plural);
            if s.hooks().initial_status.is_some() {
                assert!(
                    r.has_subresource("status"),
                    "{} sets status but has no status subresource",
                    r.plural
                );
            }
        }
    }

    /// The stored form (Go's encoding of the kind's struct: zero values of unset
    /// structs, null times) is read back by the kind's type, and decoding it again
    /// changes nothing.
    #[test]
    fn every_kinds_stored_form_decodes_to_itself() {
        for r in RESOURCES {
            let s = strategy_for(r).unwrap();
            let body = json!({"apiVersion": r.api_version(), "kind": r.kind,
                "metadata": {"name": "a"}});
            let first = s
                .decode(body)
                .unwrap_or_else(|e| panic!("{}: {e:?}", r.plural))
                .object;
            assert_eq!(
                first["metadata"]["creationTimestamp"],
                Value::Null,
                "{}",
                r.plural
            );
            let again = s
                .decode(first.clone())
                .unwrap_or_else(|e| panic!("{} again: {e:?}", r.plural));
            assert!(
                again.unknown_fields.is_empty(),
                "{}: {:?}",
                r.plural,
                again.unknown_fields
            );
            assert_eq!(again.object, first, "{}", r.plural);
        }
        // Defaulting sees an unset struct as upstream's does, as its zero value.
        let strategy = |group: &str, plural: &str| {
            strategy_for(ferrokube_api::resources::lookup(group, "v1", plural).unwrap()).unwrap()
        };
        let policy = strategy(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
        )
        .decode(json!({"metadata": {"name": "a"}}))
        .unwrap()
        .object;
        assert_eq!(policy["spec"], json!({"failurePolicy": "Fail"}));
        assert_eq!(policy["status"], json!({}));
        let service = strategy("", "services")
            .decode(json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}))
            .unwrap()
            .object;
        assert_eq!(service["status"], json!({"loadBalancer": {}}));
    }

    #[test]
    fn pod_resize_takes_resources_and_adds_no_list() {
        let old = json!({"spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "1"}}}]}});
        let new = json!({"spec": {"containers": [{"name": "c", "image": "y",
            "resources": {"requests": {"cpu": "2"}}}]}});
        assert_eq!(
            pod_resize(&new, &old),
            json!({"spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "2"}}}]}})
        );
    }

    #[test]
    fn namespace_gets_kubernetes_finalizer() {
        let mut ns = json!({"metadata": {"name": "a"}});
        (NAMESPACE.prepare_create.unwrap())(&mut ns, "");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        let mut upd = json!({"metadata": {"name": "a"}, "spec": {}});
        (NAMESPACE.prepare_update.unwrap())(&mut upd, &ns);
        assert_eq!(upd["spec"]["finalizers"], json!(["kubernetes"]));
    }

    #[test]
    fn local_api_services_are_available_on_create() {
        let now = "2025-01-01T00:00:00Z";
        let mut local = json!({"metadata": {"name": "v1.example.com"}, "spec": {}, "status": {}});
        api_service_prepare_create(&mut local, now);
        assert_eq!(
            local["status"],
            json!({"conditions": [{"type": "Available", "status": "True",
                "lastTransitionTime": now, "reason": "Local",
                "message": "Local APIServices are always available"}]})
        );
        let mut remote = json!({"metadata": {"name": "v1.example.com"},
            "spec": {"service": {"namespace": "n", "name": "s"}}, "status": {}});
        api_service_prepare_create(&mut remote, now);
        assert_eq!(remote["status"], json!({}));
        // The name rule: path segments only here; `<version>.<group>` is validation's.
        let info =
            ferrokube_api::resources::lookup_kind("apiregistration.k8s.io", "APIService").unwrap();
        let rule = name_rule(info);
        assert!(rule("v1.example.com", false).is_empty());
        assert_eq!(rule("..", true), ["may not be '..'"]);
    }

    #[test]
    fn job_selector_and_labels() {
        let mut job = json!({"metadata": {"name": "j", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"app": "x", "job-name": "mine"}}}}});
        job_prepare_create(&mut job, "");
        let labels = &job["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["app"], "x");
        assert_eq!(labels["job-name"], "mine");
        assert_eq!(labels["batch.kubernetes.io/job-name"], "j");
        assert_eq!(labels["controller-uid"], "u1");
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], "u1");
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}})
        );
        let mut manual = json!({"metadata": {"name": "j", "uid": "u1"},
            "spec": {"manualSelector": true, "template": {}}});
        job_prepare_create(&mut manual, "");
        assert!(manual["spec"].get("selector").is_none());
    }

    #[test]
    fn secret_string_data_goes_into_data() {
        let mut s = json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "hunter2"}});
        secret_string_data(&mut s);
        assert_eq!(s, json!({"data": {"a": "eA==", "b": "aHVudGVyMg=="}}));
    }

    #[test]
    fn qos_classes() {
        let pod = |res: Value| json!({"spec": {"containers": [{"name": "c", "resources": res}]}});
        assert_eq!(pod_qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            pod_qos_class(&pod(json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        assert_eq!(
            pod_qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"},
                "requests": {"cpu": "1000m", "memory": "1024Mi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            pod_qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"},
                "requests": {"cpu": "500m", "memory": "1Gi"}}))),
            "Burstable"
        );
        // Only other resources: best effort.
        assert_eq!(
            pod_qos_class(&pod(json!({"limits": {"nvidia.com/gpu": "1"}}))),
            "BestEffort"
        );
        let mut p = json!({"spec": {"containers": [{"name": "c"}],
            "schedulingGates": [{"name": "g"}]}, "status": {"phase": "Pending"}});
        pod_prepare_create(&mut p, "2024-01-01T00:00:00Z");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert_eq!(p["status"]["conditions"][0]["reason"], "SchedulingGated");
    }
}
