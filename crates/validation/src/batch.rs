//! batch/v1: Job and CronJob (`pkg/apis/batch/validation`).

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use k8s_openapi::api::batch::v1 as batch;

use crate::Validate;
use crate::core::validate_pod_template_spec;
use crate::cron::parse_cron_schedule;
use crate::util::*;

/// Upstream's limits on a Job's `successPolicy`.
const MAX_SUCCESS_POLICY_RULES: usize = 20;
const MAX_SUCCEEDED_INDEXES_LEN: usize = 64 * 1024;
/// Upstream's `maxManagedByLength`.
const MAX_MANAGED_BY_LEN: usize = 63;

/// An index list (`1,3-5`) as increasing, non-overlapping intervals below
/// `completions` (upstream `validateIndexesFormat`, with its messages).
pub fn parse_index_intervals(list: &str, completions: i32) -> Result<Vec<(i32, i32)>, String> {
    let mut out = Vec::new();
    if list.is_empty() {
        return Ok(out);
    }
    let mut last: Option<i32> = None;
    for fragment in list.split(',') {
        let limits: Vec<&str> = fragment.split('-').collect();
        if limits.len() > 2 {
            return Err(format!(
                "the fragment {fragment:?} violates the requirement that an index interval can have at most two parts separated by '-'"
            ));
        }
        let mut bounds = [0; 2];
        for (bound, text) in bounds.iter_mut().zip(&limits) {
            let x: i32 = text
                .parse()
                .map_err(|_| format!("cannot convert string to integer for index: {text:?}"))?;
            if x >= completions {
                return Err(format!("too large index: {text:?}"));
            }
            if let Some(prev) = last.filter(|prev| *prev >= x) {
                return Err(format!(
                    "non-increasing order, previous: {prev}, current: {x}"
                ));
            }
            *bound = x;
            last = Some(x);
        }
        let first = bounds[0];
        out.push((first, if limits.len() == 2 { bounds[1] } else { first }));
    }
    Ok(out)
}

/// `validateSuccessPolicy`: only for Indexed Jobs; 1 to 20 rules, each with
/// `succeededIndexes` in range, `succeededCount` (at most the completions and the
/// indexes it counts among), or both.
fn validate_success_policy(spec: &batch::JobSpec, path: &FieldPath, errs: &mut Errs) {
    let Some(policy) = &spec.success_policy else {
        return;
    };
    let path = path.child("successPolicy");
    if s(&spec.completion_mode) != "Indexed" {
        errs.push(FieldError::invalid(
            &path,
            json(policy),
            "requires indexed completion mode",
        ));
    }
    let rules_path = path.child("rules");
    if policy.rules.is_empty() {
        errs.push(FieldError::required(
            &rules_path,
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if policy.rules.len() > MAX_SUCCESS_POLICY_RULES {
        errs.push(FieldError::too_many(
            &rules_path,
            Some(policy.rules.len()),
            Some(MAX_SUCCESS_POLICY_RULES),
        ));
    }
    let completions = spec.completions.unwrap_or(0);
    for (i, rule) in policy.rules.iter().enumerate() {
        let rp = rules_path.index(i);
        let mut total = 0i64;
        if let Some(list) = &rule.succeeded_indexes {
            let ip = rp.child("succeededIndexes");
            if list.len() > MAX_SUCCEEDED_INDEXES_LEN {
                errs.push(FieldError::too_long(&ip, Some(MAX_SUCCEEDED_INDEXES_LEN)));
            }
            match parse_index_intervals(list, completions) {
                Ok(intervals) => {
                    total = intervals
                        .iter()
                        .map(|(a, b)| i64::from(*b) - i64::from(*a) + 1)
                        .sum()
                }
                Err(e) => errs.push(FieldError::invalid(
                    &ip,
                    json(list),
                    format!("error parsing succeededIndexes: {e}"),
                )),
            }
        }
        if let Some(count) = rule.succeeded_count {
            let cp = rp.child("succeededCount");
            nonnegative(Some(i64::from(count)), &cp, errs);
            if count > completions {
                errs.push(FieldError::invalid(
                    &cp,
                    json(&count),
                    format!(
                        "must be less than or equal to {completions} (the number of specified completions)"
                    ),
                ));
            }
            if rule.succeeded_indexes.is_some() && i64::from(count) > total {
                errs.push(FieldError::invalid(
                    &cp,
                    json(&count),
                    format!(
                        "must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"
                    ),
                ));
            }
        }
        if rule.succeeded_count.is_none() && rule.succeeded_indexes.is_none() {
            errs.push(FieldError::required(
                &rp,
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
    }
}

/// `validateJobSpec`; `require_selector` is false inside a CronJob's job template
/// (the Job controller's selector is generated when the Job is created).
/// Upstream's bounds for an Indexed Job (`maxParallelismForIndexedJob`,
/// `maxFailedIndexesForIndexedJob`, and the limits above `completionsSoftLimit` when
/// failures are tracked per index).
fn validate_indexed_limits(spec: &batch::JobSpec, path: &FieldPath, errs: &mut Errs) {
    const MAX_PARALLELISM: i32 = 100_000;
    const MAX_FAILED_INDEXES: i32 = 100_000;
    const COMPLETIONS_SOFT_LIMIT: i32 = 100_000;
    const LIMIT_FOR_HIGH_COMPLETIONS: i32 = 10_000;
    let Some(completions) = spec.completions else {
        errs.push(FieldError::required(
            &path.child("completions"),
            "when completion mode is Indexed",
        ));
        return;
    };
    if let Some(parallelism) = spec.parallelism.filter(|p| *p > MAX_PARALLELISM) {
        errs.push(FieldError::invalid(
            &path.child("parallelism"),
            parallelism,
            format!(
                "must be less than or equal to {MAX_PARALLELISM} when completion mode is Indexed"
            ),
        ));
    }
    if let Some(max_failed) = spec.max_failed_indexes {
        if max_failed > completions {
            errs.push(FieldError::invalid(
                &path.child("maxFailedIndexes"),
                max_failed,
                "must be less than or equal to completions",
            ));
        }
        if max_failed > MAX_FAILED_INDEXES {
            errs.push(FieldError::invalid(
                &path.child("maxFailedIndexes"),
                max_failed,
                format!("must be less than or equal to {MAX_FAILED_INDEXES}"),
            ));
        }
    }
    if completions > COMPLETIONS_SOFT_LIMIT && spec.backoff_limit_per_index.is_some() {
        let high = format!(
            "must be less than or equal to {LIMIT_FOR_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
        );
        match spec.max_failed_indexes {
            None => errs.push(FieldError::required(
                &path.child("maxFailedIndexes"),
                format!("must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"),
            )),
            Some(m) if m > LIMIT_FOR_HIGH_COMPLETIONS => errs.push(FieldError::invalid(
                &path.child("maxFailedIndexes"),
                m,
                &high,
            )),
            Some(_) => {}
        }
        if let Some(parallelism) = spec.parallelism.filter(|p| *p > LIMIT_FOR_HIGH_COMPLETIONS) {
            errs.push(FieldError::invalid(
                &path.child("parallelism"),
                parallelism,
                &high,
            ));
        }
    }
}

fn validate_job_spec(
    spec: &batch::JobSpec,
    require_selector: bool,
    path: &FieldPath,
    errs: &mut Errs,
) {
    for (v, name) in [
        (spec.parallelism, "parallelism"),
        (spec.completions, "completions"),
        (spec.backoff_limit, "backoffLimit"),
        (spec.ttl_seconds_after_finished, "ttlSecondsAfterFinished"),
    ] {
        nonnegative(v.map(i64::from), &path.child(name), errs);
    }
    if let Some(ads) = spec.active_deadline_seconds {
        nonnegative(Some(ads), &path.child("activeDeadlineSeconds"), errs);
    }
    match &spec.selector {
        None if require_selector => errs.push(FieldError::required(&path.child("selector"), "")),
        None => {}
        Some(sel) => {
            label_selector(sel, &path.child("selector"), errs);
            let labels = spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref());
            if selector_mismatch(sel, labels) {
                errs.push(FieldError::invalid(
                    &path.child("template").child("metadata").child("labels"),
                    json(&labels.cloned().unwrap_or_default()),
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    nonnegative(
        spec.backoff_limit_per_index.map(i64::from),
        &path.child("backoffLimitPerIndex"),
        errs,
    );
    if let Some(max_failed) = spec.max_failed_indexes {
        nonnegative(
            Some(i64::from(max_failed)),
            &path.child("maxFailedIndexes"),
            errs,
        );
        if spec.backoff_limit_per_index.is_none() {
            errs.push(FieldError::required(
                &path.child("backoffLimitPerIndex"),
                "when maxFailedIndexes is specified",
            ));
        }
    }
    if let Some(managed_by) = &spec.managed_by {
        let mp = path.child("managedBy");
        domain_prefixed_path(managed_by, &mp, errs);
        if managed_by.len() > MAX_MANAGED_BY_LEN {
            errs.push(FieldError::too_long(&mp, Some(MAX_MANAGED_BY_LEN)));
        }
    }
    let mode = s(&spec.completion_mode);
    match mode {
        "" | "NonIndexed" => {
            for (value, name) in [
                (spec.backoff_limit_per_index, "backoffLimitPerIndex"),
                (spec.max_failed_indexes, "maxFailedIndexes"),
            ] {
                if let Some(v) = value {
                    errs.push(FieldError::invalid(
                        &path.child(name),
                        v,
                        "requires indexed completion mode",
                    ));
                }
            }
        }
        "Indexed" => validate_indexed_limits(spec, path, errs),
        other => errs.push(FieldError::not_supported(
            &path.child("completionMode"),
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
    enum_optional(
        &spec.pod_replacement_policy,
        &["Failed", "TerminatingOrFailed"],
        &path.child("podReplacementPolicy"),
        errs,
    );
    if spec.pod_failure_policy.is_some() && s(&spec.pod_replacement_policy) == "TerminatingOrFailed"
    {
        errs.push(FieldError::not_supported(
            &path.child("podReplacementPolicy"),
            "TerminatingOrFailed",
            &["Failed"],
        ));
    }
    if let Some(pfp) = &spec.pod_failure_policy {
        for (i, rule) in pfp.rules.iter().enumerate() {
            let rp = path.child("podFailurePolicy").child("rules").index(i);
            enum_required(
                &rule.action,
                &["Count", "FailIndex", "FailJob", "Ignore"],
                &rp.child("action"),
                errs,
            );
            if rule.action == "FailIndex" && spec.backoff_limit_per_index.is_none() {
                errs.push(FieldError::invalid(
                    &rp.child("action"),
                    "FailIndex",
                    "requires the backoffLimitPerIndex to be set",
                ));
            }
            match (&rule.on_exit_codes, &rule.on_pod_conditions) {
                (Some(_), Some(c)) if !c.is_empty() => errs.push(FieldError::invalid(
                    &rp,
                    serde_json::Value::Null,
                    "specifying both OnExitCodes and OnPodConditions is not supported",
                )),
                (None, None) => errs.push(FieldError::invalid(
                    &rp,
                    serde_json::Value::Null,
                    "specifying one of OnExitCodes and OnPodConditions is required",
                )),
                _ => {}
            }
        }
    }
    validate_success_policy(spec, path, errs);
    validate_pod_template_spec(&spec.template, &path.child("template"), errs);
    let rp = spec
        .template
        .spec
        .as_ref()
        .map(|s| s.restart_policy.clone())
        .unwrap_or_default();
    let rp = s(&rp);
    if rp != "OnFailure" && rp != "Never" {
        errs.push(FieldError::not_supported(
            &path.child("template").child("spec").child("restartPolicy"),
            rp,
            &["OnFailure", "Never"],
        ));
    }
}

impl Validate for batch::Job {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let default = batch::JobSpec::default();
        validate_job_spec(
            self.spec.as_ref().unwrap_or(&default),
            true,
            &p("spec"),
            &mut errs,
        );
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let (Some(n), Some(o)) = (&self.spec, &old.spec) else {
            return errs;
        };
        let sp = p("spec");
        immutable(&n.selector, &o.selector, &sp.child("selector"), &mut errs);
        immutable(
            &n.completion_mode,
            &o.completion_mode,
            &sp.child("completionMode"),
            &mut errs,
        );
        immutable(
            &n.pod_failure_policy,
            &o.pod_failure_policy,
            &sp.child("podFailurePolicy"),
            &mut errs,
        );
        immutable(
            &n.managed_by,
            &o.managed_by,
            &sp.child("managedBy"),
            &mut errs,
        );
        immutable(
            &n.backoff_limit_per_index,
            &o.backoff_limit_per_index,
            &sp.child("backoffLimitPerIndex"),
            &mut errs,
        );
        immutable(
            &n.success_policy,
            &o.success_policy,
            &sp.child("successPolicy"),
            &mut errs,
        );
        // Suspended jobs that never started may change scheduling directives; for
        // simplicity (and like upstream for started jobs) the template is immutable
        // unless the job is suspended.
        if o.suspend != Some(true) {
            immutable(&n.template, &o.template, &sp.child("template"), &mut errs);
        }
        // Completions may only change together with parallelism for Indexed jobs
        // (elastic indexed jobs).
        let elastic = s(&n.completion_mode) == "Indexed" && n.completions == n.parallelism;
        if !elastic {
            immutable(
                &n.completions,
                &o.completions,
                &sp.child("completions"),
                &mut errs,
            );
        }
        errs
    }
}

impl Validate for batch::CronJob {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = batch::CronJobSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        let schedule = spec.schedule.as_str();
        let schp = sp.child("schedule");
        if schedule.is_empty() {
            errs.push(FieldError::required(&schp, ""));
        } else if schedule.contains("TZ") {
            errs.push(FieldError::invalid(
                &schp,
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        } else if let Err(e) = parse_cron_schedule(schedule) {
            errs.push(FieldError::invalid(&schp, schedule, e));
        }
        if let Some(tz) = spec.time_zone.as_deref()
            && (tz.is_empty() || tz.contains(' ') || tz.starts_with('/') || tz.contains(".."))
        {
            errs.push(FieldError::invalid(
                &sp.child("timeZone"),
                tz,
                "unknown time zone",
            ));
        }
        enum_required(
            s(&spec.concurrency_policy),
            &["Allow", "Forbid", "Replace"],
            &sp.child("concurrencyPolicy"),
            &mut errs,
        );
        nonnegative(
            spec.starting_deadline_seconds,
            &sp.child("startingDeadlineSeconds"),
            &mut errs,
        );
        nonnegative(
            spec.successful_jobs_history_limit.map(i64::from),
            &sp.child("successfulJobsHistoryLimit"),
            &mut errs,
        );
        nonnegative(
            spec.failed_jobs_history_limit.map(i64::from),
            &sp.child("failedJobsHistoryLimit"),
            &mut errs,
        );
        let jp = sp.child("jobTemplate");
        if let Some(meta) = &spec.job_template.metadata
            && let Some(l) = &meta.labels
        {
            errs.extend(ferrokube_apimachinery::validation::validate_labels(
                l,
                &jp.child("metadata").child("labels"),
            ));
        }
        match &spec.job_template.spec {
            Some(js) => validate_job_spec(js, false, &jp.child("spec"), &mut errs),
            None => errs.push(FieldError::required(
                &jp.child("spec").child("template"),
                "",
            )),
        }
        errs
    }

    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}
