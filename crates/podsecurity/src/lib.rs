//! The Pod Security Standards as upstream's `k8s.io/pod-security-admission` applies
//! them: the levels `privileged`, `baseline` and `restricted`, the namespace labels
//! `pod-security.kubernetes.io/{enforce,audit,warn}[-version]` that choose them, the
//! checks of each level ([`checks`], upstream's texts word for word) and the decisions
//! of the PodSecurity admission plugin: a pod that fails the enforced level is
//! forbidden (`violates PodSecurity "restricted:latest": ...`), one that fails the warn
//! level is admitted with a warning (`would violate PodSecurity ...`); pod controllers
//! (Deployments, Jobs, ...) only get warnings and audit notes, never a denial.
//!
//! Layer: pure, next to `api` and `validation`; the apiserver's PodSecurity admission
//! plugin calls it with the namespace's labels and the object. No IO; must not depend
//! on storage, registry, apiserver or client crates.
//!
//! Deviation: every policy version is evaluated with the checks of version 1.33 (this
//! server's version), except that the restricted checks younger than the requested
//! version are skipped, as upstream; the older variants of a few baseline checks
//! (seccomp annotations before 1.19, shorter sysctl lists) are not kept.

mod checks;
mod config;

use std::collections::BTreeMap;
use std::fmt;

pub use checks::Violation;
pub use config::{Configuration, Exemption, Exemptions};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The prefix of the namespace labels that set a policy; no other label is read.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// The minor version of the newest policy (`latest`).
pub const LATEST_MINOR: u32 = 33;

/// A Pod Security Standards level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A policy version: `latest` or `v1.<minor>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    Latest,
    Minor(u32),
}

impl Version {
    /// Upstream's `ParseVersion`: `latest` or `v1.<minor>`.
    pub fn parse(s: &str) -> Option<Version> {
        if s == "latest" {
            return Some(Version::Latest);
        }
        let minor = s.strip_prefix("v1.")?;
        let leading_zero = minor.len() > 1 && minor.starts_with('0');
        if minor.is_empty() || leading_zero || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        minor.parse().ok().map(Version::Minor)
    }

    /// The minor version the checks are chosen by.
    fn effective_minor(self) -> u32 {
        match self {
            Version::Latest => LATEST_MINOR,
            Version::Minor(m) => m.min(LATEST_MINOR),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

/// A level at a version, written `restricted:latest` as upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    pub const PRIVILEGED: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };
    pub const RESTRICTED: LevelVersion = LevelVersion {
        level: Level::Restricted,
        version: Version::Latest,
    };
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// A namespace's policy: the level enforced, audited and warned about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    /// The plugin's defaults without an AdmissionConfiguration: privileged everywhere.
    fn default() -> Self {
        Policy {
            enforce: LevelVersion::PRIVILEGED,
            audit: LevelVersion::PRIVILEGED,
            warn: LevelVersion::PRIVILEGED,
        }
    }
}

/// An invalid `pod-security.kubernetes.io/*` label value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelError {
    pub key: String,
    pub value: String,
    pub detail: &'static str,
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "metadata.labels[{}]: Invalid value: {:?}: {}",
            self.key, self.value, self.detail
        )
    }
}

impl Policy {
    /// Upstream's `PolicyToEvaluate`: the namespace's labels over `defaults`, and the
    /// label errors (`metadata.labels[pod-security.kubernetes.io/enforce]: Invalid
    /// value: ...`). An invalid enforce level fails closed (`restricted`), an invalid
    /// audit or warn level fails open (`privileged`), an invalid version is `latest`.
    /// Without a warn label, warn follows a stricter enforce level (and its version).
    pub fn from_labels(
        labels: Option<&BTreeMap<String, String>>,
        defaults: Policy,
    ) -> (Policy, Vec<LabelError>) {
        let mut policy = defaults;
        let mut errors = Vec::new();
        let Some(labels) = labels else {
            return (policy, errors);
        };
        let mut has_enforce_level = false;
        let (mut has_warn_level, mut has_warn_version) = (false, false);
        // The keys spelled out (LABEL_PREFIX + mode), not formatted: this runs on every
        // pod write.
        for (level_key, version_key, slot, fail_level) in [
            (
                "pod-security.kubernetes.io/enforce",
                "pod-security.kubernetes.io/enforce-version",
                &mut policy.enforce,
                Level::Restricted,
            ),
            (
                "pod-security.kubernetes.io/audit",
                "pod-security.kubernetes.io/audit-version",
                &mut policy.audit,
                Level::Privileged,
            ),
            (
                "pod-security.kubernetes.io/warn",
                "pod-security.kubernetes.io/warn-version",
                &mut policy.warn,
                Level::Privileged,
            ),
        ] {
            let mode = &level_key[LABEL_PREFIX.len()..];
            if let Some(value) = labels.get(level_key) {
                match Level::parse(value) {
                    Some(level) => {
                        slot.level = level;
                        has_enforce_level |= mode == "enforce";
                    }
                    None => {
                        slot.level = fail_level;
                        errors.push(LabelError {
                            key: level_key.to_string(),
                            value: value.clone(),
                            detail: "must be one of privileged, baseline, restricted",
                        });
                    }
                }
                has_warn_level |= mode == "warn";
            }
            if let Some(value) = labels.get(version_key) {
                slot.version = Version::parse(value).unwrap_or_else(|| {
                    errors.push(LabelError {
                        key: version_key.to_string(),
                        value: value.clone(),
                        detail: "must be \"latest\" or \"v1.x\"",
                    });
                    Version::Latest
                });
                has_warn_version |= mode == "warn";
            }
        }
        if !has_warn_level && has_enforce_level && policy.enforce.level > policy.warn.level {
            policy.warn.level = policy.enforce.level;
            if !has_warn_version {
                policy.warn.version = policy.enforce.version;
            }
        }
        (policy, errors)
    }

    /// Upstream's `Policy.Equivalent`: the same levels, and the same versions where the
    /// level is not privileged (a privileged level checks nothing at any version).
    pub fn equivalent(&self, other: &Policy) -> bool {
        let same = |a: LevelVersion, b: LevelVersion| {
            a.level == b.level && (a.level == Level::Privileged || a.version == b.version)
        };
        same(self.enforce, other.enforce)
            && same(self.audit, other.audit)
            && same(self.warn, other.warn)
    }

    /// Whether no mode checks anything (upstream's short cut).
    pub fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|lv| lv.level == Level::Privileged)
    }
}

/// The minimum policy minor of each restricted check (upstream's `MinimumVersion`).
fn restricted_minimum(id: &str) -> u32 {
    match id {
        "allowPrivilegeEscalation" => 8,
        "seccompProfile_restricted" => 19,
        "capabilities_restricted" => 22,
        "runAsUser" => 23,
        _ => 0,
    }
}

/// Every violation of `lv` by a pod (or pod template) with this metadata and spec, in
/// upstream's order: the baseline checks, then the restricted ones.
pub fn evaluate(lv: LevelVersion, meta: &ObjectMeta, spec: &PodSpec) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let minor = lv.version.effective_minor();
    let restricted: Vec<_> = if lv.level == Level::Restricted {
        checks::RESTRICTED
            .iter()
            .filter(|(id, _, _)| restricted_minimum(id) <= minor)
            .collect()
    } else {
        Vec::new()
    };
    let overridden = |id: &str| restricted.iter().any(|(_, _, o)| o.contains(&id));
    checks::BASELINE
        .iter()
        .filter(|(id, _)| !overridden(id))
        .filter_map(|(_, check)| check(meta, spec))
        .chain(
            restricted
                .iter()
                .filter_map(|(_, check, _)| check(meta, spec)),
        )
        .collect()
}

/// Upstream's `AggregateCheckResult.ForbiddenDetail`: `reason (detail), reason (detail)`.
pub fn forbidden_detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the plugin decides about one object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The denial's text after `<resource> "<name>" is forbidden: `, when enforced.
    pub forbidden: Option<String>,
    /// `Warning` headers for the response.
    pub warnings: Vec<String>,
    /// The audit level's verdict (`would violate ...`), for an audit annotation.
    pub audit: Option<String>,
}

/// Whether the object is a pod, or a pod controller whose template is only warned
/// about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    Pod,
    PodController,
}

/// Upstream's `EvaluatePod` / `EvaluatePodController`: enforce (pods only), audit, then
/// warn, reusing an evaluation when two modes name the same level and version; no
/// warning on a request that is denied anyway.
pub fn decide(policy: &Policy, subject: Subject, meta: &ObjectMeta, spec: &PodSpec) -> Decision {
    let mut decision = Decision::default();
    if policy.fully_privileged() {
        return decision;
    }
    let mut cache: Vec<(LevelVersion, Vec<Violation>)> = Vec::new();
    let mut eval = |lv: LevelVersion| -> Vec<Violation> {
        if let Some((_, v)) = cache.iter().find(|(k, _)| *k == lv) {
            return v.clone();
        }
        let v = evaluate(lv, meta, spec);
        cache.push((lv, v.clone()));
        v
    };
    if subject == Subject::Pod {
        let v = eval(policy.enforce);
        if !v.is_empty() {
            decision.forbidden = Some(format!(
                "violates PodSecurity {:?}: {}",
                policy.enforce.to_string(),
                forbidden_detail(&v)
            ));
        }
    }
    let v = eval(policy.audit);
    if !v.is_empty() {
        decision.audit = Some(format!(
            "would violate PodSecurity {:?}: {}",
            policy.audit.to_string(),
            forbidden_detail(&v)
        ));
    }
    if decision.forbidden.is_none() {
        let v = eval(policy.warn);
        if !v.is_empty() {
            decision.warnings.push(format!(
                "would violate PodSecurity {:?}: {}",
                policy.warn.to_string(),
                forbidden_detail(&v)
            ));
        }
    }
    decision
}

/// Upstream's warnings when a namespace's enforce level changes (`kubectl label ns x
/// pod-security.kubernetes.io/enforce=restricted`, also with `--dry-run=server`): the
/// existing pods that would not be admitted, grouped by their violations in pod order
/// (`web-1 (and 2 other pods): privileged, runAsNonRoot != true`). Nothing when the new
/// enforce level is privileged or unchanged.
pub fn namespace_update_warnings(
    namespace: &str,
    new: &Policy,
    old: &Policy,
    pods: &[(String, ObjectMeta, PodSpec)],
) -> Vec<String> {
    // Upstream skips the pods when the enforce policy is unchanged, privileged, or
    // relaxed at the same version.
    if new.enforce.level == Level::Privileged
        || new.enforce == old.enforce
        || (new.enforce.version == old.enforce.version && new.enforce.level <= old.enforce.level)
    {
        return Vec::new();
    }
    // (reasons, first pod, other pods)
    let mut groups: Vec<(String, String, usize)> = Vec::new();
    for (name, meta, spec) in pods {
        let violations = evaluate(new.enforce, meta, spec);
        if violations.is_empty() {
            continue;
        }
        let reasons = violations
            .iter()
            .map(|v| v.reason.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        match groups.iter_mut().find(|(r, _, _)| *r == reasons) {
            Some(group) => group.2 += 1,
            None => groups.push((reasons, name.clone(), 0)),
        }
    }
    if groups.is_empty() {
        return Vec::new();
    }
    let mut warnings = vec![format!(
        "existing pods in namespace {namespace:?} violate the new PodSecurity enforce level {:?}",
        new.enforce.to_string()
    )];
    for (reasons, first, others) in groups {
        warnings.push(match others {
            0 => format!("{first}: {reasons}"),
            1 => format!("{first} (and 1 other pod): {reasons}"),
            n => format!("{first} (and {n} other pods): {reasons}"),
        });
    }
    warnings
}

/// Upstream's `isSignificantPodUpdate`: an update is evaluated only when it changes a
/// container image, the number of (ephemeral) containers or a seccomp annotation;
/// other pod updates (labels, status, ...) are admitted without a check.
pub fn is_significant_pod_update(
    new_meta: &ObjectMeta,
    new: &PodSpec,
    old_meta: &ObjectMeta,
    old: &PodSpec,
) -> bool {
    let annotation = |m: &ObjectMeta, k: &str| {
        m.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned()
            .unwrap_or_default()
    };
    if annotation(new_meta, "seccomp.security.alpha.kubernetes.io/pod")
        != annotation(old_meta, "seccomp.security.alpha.kubernetes.io/pod")
    {
        return true;
    }
    let ephemeral = |s: &PodSpec| s.ephemeral_containers.as_ref().map_or(0, Vec::len);
    if ephemeral(new) != ephemeral(old) {
        return true;
    }
    let pairs: Vec<(&str, Option<&String>, Option<&String>)> = {
        let new_init = new.init_containers.as_deref().unwrap_or_default();
        let old_init = old.init_containers.as_deref().unwrap_or_default();
        if new.containers.len() != old.containers.len() || new_init.len() != old_init.len() {
            return true;
        }
        new.containers
            .iter()
            .zip(&old.containers)
            .chain(new_init.iter().zip(old_init))
            .map(|(n, o)| (n.name.as_str(), n.image.as_ref(), o.image.as_ref()))
            .collect()
    };
    pairs.into_iter().any(|(name, new_image, old_image)| {
        let key = format!("container.seccomp.security.alpha.kubernetes.io/{name}");
        new_image != old_image || annotation(new_meta, &key) != annotation(old_meta, &key)
    })
}

#[cfg(test)]
mod tests;
