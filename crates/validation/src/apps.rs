//! apps/v1: Deployment, ReplicaSet, StatefulSet, DaemonSet, ControllerRevision
//! (`pkg/apis/apps/validation`).

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::Validate;
use crate::core::{validate_pod_template_spec, validate_pvc_spec};
use crate::util::*;

/// The selector rules every workload shares: valid, non-empty.
fn validate_selector(sel: &LabelSelector, path: &FieldPath, errs: &mut Errs) {
    label_selector(sel, path, errs);
    if selector_is_empty(sel) {
        errs.push(FieldError::invalid(
            path,
            json(sel),
            "empty selector is invalid for deployment",
        ));
    }
}

/// `ValidatePodTemplateSpecForReplicaSet` (also used for the other workloads): the
/// template's labels must match the selector, and its pods must restart Always.
fn validate_workload_template(
    template: &core::PodTemplateSpec,
    selector: &LabelSelector,
    path: &FieldPath,
    kind: &str,
    errs: &mut Errs,
) {
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    if selector_mismatch(selector, labels) {
        errs.push(FieldError::invalid(
            &path.child("metadata").child("labels"),
            json(&labels.cloned().unwrap_or_default()),
            "`selector` does not match template `labels`",
        ));
    }
    validate_pod_template_spec(template, path, errs);
    let spec_path = path.child("spec");
    if let Some(spec) = &template.spec {
        let rp = s(&spec.restart_policy);
        if rp != "Always" {
            errs.push(FieldError::not_supported(
                &spec_path.child("restartPolicy"),
                rp,
                &["Always"],
            ));
        }
        if spec.active_deadline_seconds.is_some() {
            errs.push(FieldError::forbidden(
                &spec_path.child("activeDeadlineSeconds"),
                format!("activeDeadlineSeconds in {kind} is not Supported"),
            ));
        }
    }
}

fn min_ready_and_history(
    min_ready: Option<i32>,
    history: Option<i32>,
    sp: &FieldPath,
    errs: &mut Errs,
) {
    nonnegative(min_ready.map(i64::from), &sp.child("minReadySeconds"), errs);
    nonnegative(
        history.map(i64::from),
        &sp.child("revisionHistoryLimit"),
        errs,
    );
}

impl Validate for apps::Deployment {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = apps::DeploymentSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        nonnegative(
            spec.replicas.map(i64::from),
            &sp.child("replicas"),
            &mut errs,
        );
        validate_selector(&spec.selector, &sp.child("selector"), &mut errs);
        validate_workload_template(
            &spec.template,
            &spec.selector,
            &sp.child("template"),
            "ReplicaSet",
            &mut errs,
        );
        min_ready_and_history(
            spec.min_ready_seconds,
            spec.revision_history_limit,
            &sp,
            &mut errs,
        );
        let st = sp.child("strategy");
        let strategy = spec.strategy.clone().unwrap_or_default();
        match s(&strategy.type_) {
            "Recreate" => {
                if strategy.rolling_update.is_some() {
                    errs.push(FieldError::forbidden(
                        &st.child("rollingUpdate"),
                        "may not be specified when strategy `type` is 'Recreate'",
                    ));
                }
            }
            "RollingUpdate" => match &strategy.rolling_update {
                None => errs.push(FieldError::required(&st.child("rollingUpdate"), "")),
                Some(ru) => validate_surge_and_unavailable(
                    ru.max_unavailable.as_ref(),
                    ru.max_surge.as_ref(),
                    &st.child("rollingUpdate"),
                    &mut errs,
                ),
            },
            "" => errs.push(FieldError::required(&st.child("type"), "")),
            other => errs.push(FieldError::not_supported(
                &st.child("type"),
                other,
                &["Recreate", "RollingUpdate"],
            )),
        }
        if let Some(pd) = spec.progress_deadline_seconds {
            nonnegative(
                Some(pd.into()),
                &sp.child("progressDeadlineSeconds"),
                &mut errs,
            );
            if pd <= spec.min_ready_seconds.unwrap_or(0) {
                errs.push(FieldError::invalid(
                    &sp.child("progressDeadlineSeconds"),
                    pd,
                    "must be greater than minReadySeconds",
                ));
            }
        }
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.selector,
                &o.selector,
                &p("spec").child("selector"),
                &mut errs,
            );
        }
        errs
    }
}

impl Validate for apps::ReplicaSet {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = apps::ReplicaSetSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        nonnegative(
            spec.replicas.map(i64::from),
            &sp.child("replicas"),
            &mut errs,
        );
        nonnegative(
            spec.min_ready_seconds.map(i64::from),
            &sp.child("minReadySeconds"),
            &mut errs,
        );
        validate_selector(&spec.selector, &sp.child("selector"), &mut errs);
        match &spec.template {
            Some(t) => validate_workload_template(
                t,
                &spec.selector,
                &sp.child("template"),
                "ReplicaSet",
                &mut errs,
            ),
            None => errs.push(FieldError::required(&sp.child("template"), "")),
        }
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.selector,
                &o.selector,
                &p("spec").child("selector"),
                &mut errs,
            );
        }
        errs
    }
}

/// The template as the StatefulSet controller makes its pods: each claim template is a
/// persistentVolumeClaim volume of that name (in place of a template volume of the same
/// name). Upstream leaves the template's pod spec unvalidated for want of this union
/// (its TODO in `ValidatePodTemplateSpecForStatefulSet`); checking the pods the
/// controller would make keeps the template's mounts of claim templates valid.
fn template_with_claim_volumes(spec: &apps::StatefulSetSpec) -> core::PodTemplateSpec {
    let mut template = spec.template.clone();
    let claims = spec.volume_claim_templates.as_deref().unwrap_or_default();
    if claims.is_empty() {
        return template;
    }
    let volumes = template
        .spec
        .get_or_insert_default()
        .volumes
        .get_or_insert_default();
    for claim in claims {
        let name = s(&claim.metadata.name);
        if name.is_empty() {
            continue;
        }
        let volume = core::Volume {
            name: name.to_string(),
            persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                claim_name: name.to_string(),
                read_only: None,
            }),
            ..Default::default()
        };
        match volumes.iter_mut().find(|v| v.name == name) {
            Some(existing) => *existing = volume,
            None => volumes.push(volume),
        }
    }
    template
}

impl Validate for apps::StatefulSet {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = apps::StatefulSetSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        match s(&spec.pod_management_policy) {
            "OrderedReady" | "Parallel" => {}
            "" => errs.push(FieldError::required(&sp.child("podManagementPolicy"), "")),
            other => errs.push(FieldError::invalid(
                &sp.child("podManagementPolicy"),
                other,
                "must be 'OrderedReady' or 'Parallel'",
            )),
        }
        let up = sp.child("updateStrategy");
        let strategy = spec.update_strategy.clone().unwrap_or_default();
        match s(&strategy.type_) {
            "OnDelete" => {
                if strategy.rolling_update.is_some() {
                    errs.push(FieldError::invalid(
                        &up.child("rollingUpdate"),
                        json(&strategy.rolling_update),
                        "only allowed for updateStrategy 'RollingUpdate'",
                    ));
                }
            }
            "RollingUpdate" => {
                if let Some(ru) = &strategy.rolling_update {
                    let rp = up.child("rollingUpdate");
                    nonnegative(
                        ru.partition.map(i64::from),
                        &rp.child("partition"),
                        &mut errs,
                    );
                    if let Some(mu) = &ru.max_unavailable {
                        int_or_percent(mu, &rp.child("maxUnavailable"), &mut errs);
                        if is_zero(mu) {
                            errs.push(FieldError::invalid(
                                &rp.child("maxUnavailable"),
                                json(mu),
                                "must be greater than 0",
                            ));
                        }
                    }
                }
            }
            "" => errs.push(FieldError::required(&up, "")),
            other => errs.push(FieldError::invalid(
                &up,
                other,
                "must be 'RollingUpdate' or 'OnDelete'",
            )),
        }
        if let Some(policy) = &spec.persistent_volume_claim_retention_policy {
            let pp = sp.child("persistentVolumeClaimRetentionPolicy");
            enum_required(
                s(&policy.when_deleted),
                &["Retain", "Delete"],
                &pp.child("whenDeleted"),
                &mut errs,
            );
            enum_required(
                s(&policy.when_scaled),
                &["Retain", "Delete"],
                &pp.child("whenScaled"),
                &mut errs,
            );
        }
        nonnegative(
            spec.replicas.map(i64::from),
            &sp.child("replicas"),
            &mut errs,
        );
        min_ready_and_history(
            spec.min_ready_seconds,
            spec.revision_history_limit,
            &sp,
            &mut errs,
        );
        if let Some(o) = &spec.ordinals {
            nonnegative(
                o.start.map(i64::from),
                &sp.child("ordinals").child("start"),
                &mut errs,
            );
        }
        if let Some(name) = spec.service_name.as_deref().filter(|n| !n.is_empty()) {
            dns_label(name, &sp.child("serviceName"), &mut errs);
        }
        validate_selector(&spec.selector, &sp.child("selector"), &mut errs);
        validate_workload_template(
            &template_with_claim_volumes(spec),
            &spec.selector,
            &sp.child("template"),
            "StatefulSet",
            &mut errs,
        );
        for (i, pvc) in spec.volume_claim_templates.iter().flatten().enumerate() {
            let vp = sp.child("volumeClaimTemplates").index(i);
            if s(&pvc.metadata.name).is_empty() {
                errs.push(FieldError::required(
                    &vp.child("metadata").child("name"),
                    "",
                ));
            }
            if let Some(pvc_spec) = &pvc.spec {
                validate_pvc_spec(pvc_spec, &vp.child("spec"), &mut errs);
            }
        }
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let (Some(n), Some(o)) = (&self.spec, &old.spec) else {
            return errs;
        };
        // Only these fields may change; everything else must equal the old spec.
        let mut munged = n.clone();
        munged.replicas = o.replicas;
        munged.ordinals.clone_from(&o.ordinals);
        munged.template.clone_from(&o.template);
        munged.update_strategy.clone_from(&o.update_strategy);
        munged.min_ready_seconds = o.min_ready_seconds;
        munged
            .persistent_volume_claim_retention_policy
            .clone_from(&o.persistent_volume_claim_retention_policy);
        munged.revision_history_limit = o.revision_history_limit;
        if munged != *o {
            errs.push(FieldError::forbidden(
                &p("spec"),
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
        errs
    }
}

impl Validate for apps::DaemonSet {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = apps::DaemonSetSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        validate_selector(&spec.selector, &sp.child("selector"), &mut errs);
        validate_workload_template(
            &spec.template,
            &spec.selector,
            &sp.child("template"),
            "DaemonSet",
            &mut errs,
        );
        min_ready_and_history(
            spec.min_ready_seconds,
            spec.revision_history_limit,
            &sp,
            &mut errs,
        );
        let up = sp.child("updateStrategy");
        let strategy = spec.update_strategy.clone().unwrap_or_default();
        match s(&strategy.type_) {
            "OnDelete" => {}
            "RollingUpdate" => match &strategy.rolling_update {
                None => errs.push(FieldError::required(&up.child("rollingUpdate"), "")),
                Some(ru) => validate_surge_and_unavailable(
                    ru.max_unavailable.as_ref(),
                    ru.max_surge.as_ref(),
                    &up.child("rollingUpdate"),
                    &mut errs,
                ),
            },
            "" => errs.push(FieldError::required(&up.child("type"), "")),
            other => errs.push(FieldError::not_supported(
                &up.child("type"),
                other,
                &["OnDelete", "RollingUpdate"],
            )),
        }
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.selector,
                &o.selector,
                &p("spec").child("selector"),
                &mut errs,
            );
        }
        errs
    }
}

impl Validate for apps::ControllerRevision {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        nonnegative(Some(self.revision), &p("revision"), &mut errs);
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable(&self.data, &old.data, &p("data"), &mut errs);
        errs
    }
}

/// The `maxUnavailable` / `maxSurge` pair of a rolling update (Deployments and
/// DaemonSets share the rule): each an int or a percentage, and not both zero.
fn validate_surge_and_unavailable(
    max_unavailable: Option<&IntOrString>,
    max_surge: Option<&IntOrString>,
    path: &FieldPath,
    errs: &mut Errs,
) {
    if let Some(mu) = max_unavailable {
        int_or_percent(mu, &path.child("maxUnavailable"), errs);
    }
    if let Some(ms) = max_surge {
        int_or_percent(ms, &path.child("maxSurge"), errs);
    }
    if max_unavailable.is_none_or(is_zero) && max_surge.is_none_or(is_zero) {
        errs.push(FieldError::invalid(
            &path.child("maxUnavailable"),
            json(&max_unavailable),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
}
