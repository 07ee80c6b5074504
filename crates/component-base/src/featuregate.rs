//! Feature gates as upstream's `k8s.io/component-base/featuregate` parses and
//! resolves them: the `--feature-gates` flag (`Key=bool,...`, repeatable), the
//! kubelet config file's `featureGates` map, `AllAlpha`/`AllBeta`, locked gates,
//! the GA/deprecated warnings and the `--help` list, with upstream's error and
//! warning texts.
//!
//! The set of known gates is Kubernetes v1.33's (see [`known_1_33()`]), resolved at
//! emulation version 1.33. Every upstream binary registers the same global gate,
//! so one table serves kube-apiserver, kubelet, kube-controller-manager,
//! kube-scheduler and kube-proxy alike.
//!
//! Where upstream's result depends on Go's random map order (which error is
//! reported first when several keys are bad, the order of warnings), keys are
//! taken in byte order instead.

use std::collections::BTreeMap;

use ferrokube_apimachinery::errors::{aggregate_texts, go_quote};
use std::fmt;

mod known_1_33;

/// Maturity of a gate, as upstream's `featuregate.prerelease`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreRelease {
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

impl PreRelease {
    /// Upstream's string for the stage: what `--help` prints. GA's is empty
    /// upstream; GA gates are never printed, so that never shows.
    pub fn as_str(self) -> &'static str {
        match self {
            PreRelease::Alpha => "ALPHA",
            PreRelease::Beta => "BETA",
            PreRelease::Ga => "",
            PreRelease::Deprecated => "DEPRECATED",
        }
    }
}

/// One gate's spec at the emulated version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureSpec {
    pub name: &'static str,
    pub default: bool,
    pub pre_release: PreRelease,
    pub lock_to_default: bool,
}

/// Upstream registers these two in every gate, at version 0.0, so they are
/// known whatever the emulated version.
pub const ALL_ALPHA: FeatureSpec = FeatureSpec {
    name: "AllAlpha",
    default: false,
    pre_release: PreRelease::Alpha,
    lock_to_default: false,
};

/// See [`ALL_ALPHA`].
pub const ALL_BETA: FeatureSpec = FeatureSpec {
    name: "AllBeta",
    default: false,
    pre_release: PreRelease::Beta,
    lock_to_default: false,
};

/// Every gate Kubernetes v1.33 knows, sorted by name, without `AllAlpha` and
/// `AllBeta`.
pub fn known_1_33() -> &'static [FeatureSpec] {
    known_1_33::KNOWN
}

/// The known gates plus what the user set.
#[derive(Clone, Debug)]
pub struct FeatureGates {
    /// Resolved values: explicit settings plus what `AllAlpha`/`AllBeta`
    /// filled in. Upstream's `enabled`.
    enabled: BTreeMap<&'static str, bool>,
    /// Exactly what the user set, `AllAlpha`/`AllBeta` included. Upstream's
    /// `enabledRaw`; every call re-validates all of it, as upstream does.
    raw: BTreeMap<String, bool>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self::new()
    }
}

impl FeatureGates {
    /// Kubernetes v1.33's gates, nothing set.
    pub fn new() -> Self {
        Self {
            enabled: BTreeMap::new(),
            raw: BTreeMap::new(),
        }
    }

    /// The gates after every `--feature-gates` occurrence in order, as pflag
    /// calls upstream's `Set` once per occurrence. Warnings are those of every
    /// call, so a GA gate set by an early occurrence is warned about again by
    /// each later one, as upstream logs it.
    pub fn from_flags<S: AsRef<str>>(values: &[S]) -> Result<(Self, Vec<String>), String> {
        let mut gates = Self::new();
        let mut warnings = Vec::new();
        for value in values {
            warnings.extend(gates.set(value.as_ref())?);
        }
        Ok((gates, warnings))
    }

    /// Merges one `--feature-gates` value (`Key1=true,Key2=false`) into the
    /// gates, later settings winning. Returns the warnings upstream logs.
    ///
    /// Unlike upstream, a value that fails leaves the gates unchanged;
    /// upstream keeps the bad keys and fails every later call too, which no
    /// caller can observe since a failed flag ends the program.
    pub fn set(&mut self, value: &str) -> Result<Vec<String>, String> {
        let mut m = BTreeMap::new();
        for pair in value.split(',') {
            if pair.is_empty() {
                continue;
            }
            let (key, val) = match pair.split_once('=') {
                Some((key, val)) => (key.trim(), val.trim()),
                None => return Err(format!("missing bool value for {}", pair.trim())),
            };
            let Some(b) = parse_go_bool(val) else {
                let quoted = go_quote(val);
                return Err(format!(
                    "invalid value of {key}={val}, err: strconv.ParseBool: parsing {quoted}: invalid syntax"
                ));
            };
            m.insert(key.to_owned(), b);
        }
        self.set_from_map(&m)
    }

    /// Merges a map of settings, as the kubelet does with its config file's
    /// `featureGates`. Returns the warnings upstream logs.
    pub fn set_from_map(
        &mut self,
        settings: &BTreeMap<String, bool>,
    ) -> Result<Vec<String>, String> {
        let mut raw = self.raw.clone();
        raw.extend(settings.iter().map(|(k, v)| (k.clone(), *v)));

        let mut enabled = self.enabled.clone();
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        for (key, &value) in &raw {
            let Some(spec) = self.spec(key) else {
                // Upstream stops at the first unknown key, keeping what it found so far.
                errors.push(format!("unrecognized feature gate: {key}"));
                break;
            };
            if spec.lock_to_default && spec.default != value {
                errors.push(format!(
                    "cannot set feature gate {key} to {value}, feature is locked to {}",
                    spec.default
                ));
                continue;
            }
            if let Some(stage) = all_stage(spec.name) {
                // Only gates not already resolved take the blanket value, so an
                // explicit setting wins whatever the order of the keys.
                for gate in known_1_33::KNOWN.iter().filter(|g| g.pre_release == stage) {
                    enabled.entry(gate.name).or_insert(value);
                }
                enabled.insert(spec.name, value);
                continue;
            }
            enabled.insert(spec.name, value);
            match spec.pre_release {
                PreRelease::Deprecated => warnings.push(format!(
                    "Setting deprecated feature gate {key}={value}. It will be removed in a future release."
                )),
                PreRelease::Ga => warnings.push(format!(
                    "Setting GA feature gate {key}={value}. It will be removed in a future release."
                )),
                PreRelease::Alpha | PreRelease::Beta => {}
            }
        }
        if !errors.is_empty() {
            return Err(aggregate_texts(errors).unwrap_or_default());
        }
        self.raw = raw;
        self.enabled = enabled;
        Ok(warnings)
    }

    /// Whether the gate is on. Upstream panics on a gate it does not know, as
    /// a programming error; here an unknown name is simply off, so check names
    /// with [`FeatureGates::spec`] where a typo would matter.
    pub fn enabled(&self, name: &str) -> bool {
        match self.enabled.get(name) {
            Some(&value) => value,
            None => self.spec(name).is_some_and(|spec| spec.default),
        }
    }

    /// The spec of a known gate, `AllAlpha` and `AllBeta` included.
    pub fn spec(&self, name: &str) -> Option<&'static FeatureSpec> {
        match name {
            "AllAlpha" => Some(&ALL_ALPHA),
            "AllBeta" => Some(&ALL_BETA),
            _ => known_1_33::KNOWN
                .binary_search_by(|spec| spec.name.cmp(name))
                .ok()
                .map(|i| &known_1_33::KNOWN[i]),
        }
    }

    /// What the user set, in name order, `AllAlpha`/`AllBeta` included: for
    /// the "has no effect in this component" kind of warning.
    pub fn explicitly_set(&self) -> impl Iterator<Item = (&str, bool)> + '_ {
        self.raw.iter().map(|(k, &v)| (k.as_str(), v))
    }

    /// Upstream's `--feature-gates` help lines, `Name=true|false (BETA -
    /// default=true)`, sorted; GA and deprecated gates are left out as upstream
    /// leaves them out.
    pub fn known_features(&self) -> Vec<String> {
        let mut lines: Vec<String> =
            [&ALL_ALPHA, &ALL_BETA]
                .into_iter()
                .chain(known_1_33::KNOWN.iter().filter(|spec| {
                    matches!(spec.pre_release, PreRelease::Alpha | PreRelease::Beta)
                }))
                .map(|spec| {
                    format!(
                        "{}=true|false ({} - default={})",
                        spec.name,
                        spec.pre_release.as_str(),
                        spec.default
                    )
                })
                .collect();
        lines.sort();
        lines
    }
}

/// Upstream's `String()`: the resolved settings as `k=v` pairs, sorted, which
/// is the value upstream's startup flag dump (`FLAG: --feature-gates=...`) prints.
impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.enabled.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// A clap `value_parser` for one `--feature-gates` occurrence: it rejects at
/// parse time what upstream's pflag rejects at parse time, and hands back the
/// string for [`FeatureGates::from_flags`] to merge with the others.
pub fn value_parser(value: &str) -> Result<String, String> {
    FeatureGates::new().set(value)?;
    Ok(value.to_owned())
}

fn all_stage(name: &str) -> Option<PreRelease> {
    match name {
        "AllAlpha" => Some(PreRelease::Alpha),
        "AllBeta" => Some(PreRelease::Beta),
        _ => None,
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(value: &str) -> FeatureGates {
        let mut g = FeatureGates::new();
        g.set(value).unwrap();
        g
    }

    #[test]
    fn table_is_sorted_unique_and_sized() {
        let known = known_1_33();
        assert!(known.windows(2).all(|w| w[0].name < w[1].name));
        assert_eq!(known.len(), 189);
        assert!(
            known
                .iter()
                .all(|s| s.name != "AllAlpha" && s.name != "AllBeta")
        );
        // An alpha gate on by default would be a transcription error: upstream's
        // linter forbids it (NodeLogQuery, the one exception, is beta by 1.33).
        assert!(
            !known
                .iter()
                .any(|s| s.pre_release == PreRelease::Alpha && s.default)
        );
    }

    #[test]
    fn table_facts_for_1_33() {
        let g = FeatureGates::new();
        let check = |n: &str, default: bool, pre: PreRelease, lock: bool| {
            let spec = g.spec(n).unwrap_or_else(|| panic!("{n} missing"));
            assert_eq!(
                (spec.default, spec.pre_release, spec.lock_to_default),
                (default, pre, lock),
                "{n}"
            );
        };
        check("InPlacePodVerticalScaling", true, PreRelease::Beta, false);
        check("SidecarContainers", true, PreRelease::Ga, true);
        check("NodeSwap", true, PreRelease::Beta, false);
        check("MultiCIDRServiceAllocator", true, PreRelease::Ga, false);
        check("WatchList", false, PreRelease::Beta, false);
        check("KMSv1", false, PreRelease::Deprecated, false);
        check(
            "WatchFromStorageWithoutResourceVersion",
            false,
            PreRelease::Deprecated,
            true,
        );
        check("ContextualLogging", true, PreRelease::Beta, false);
        check("LoggingAlphaOptions", false, PreRelease::Alpha, false);
        check("LoggingBetaOptions", true, PreRelease::Beta, false);
        check("ComponentSLIs", true, PreRelease::Ga, true);
        check("InOrderInformers", true, PreRelease::Beta, false);
        check("CustomCPUCFSQuotaPeriod", false, PreRelease::Alpha, false);
        check("RuntimeClassInImageCriApi", false, PreRelease::Alpha, false);
        // Go identifiers, not gate names.
        assert!(g.spec("CPUCFSQuotaPeriod").is_none());
        assert!(g.spec("RuntimeClassInImageCriAPI").is_none());
        // Removed before 1.33, or added after it.
        for gone in [
            "AppArmor",
            "JobPodFailurePolicy",
            "PDBUnhealthyPodEvictionPolicy",
            "KubeletPodResourcesListUseActivePods",
            "DRAExtendedResource",
        ] {
            assert!(g.spec(gone).is_none(), "{gone}");
        }
    }

    #[test]
    fn defaults_without_settings() {
        let g = FeatureGates::new();
        assert!(g.enabled("InPlacePodVerticalScaling"));
        assert!(!g.enabled("DRAAdminAccess"));
        assert!(!g.enabled("AllAlpha"));
        assert!(!g.enabled("NoSuchGate"));
        assert_eq!(g.explicitly_set().count(), 0);
        assert_eq!(g.to_string(), "");
    }

    #[test]
    fn parses_pairs_trims_and_skips_empty() {
        let g = gates(" DRAAdminAccess = true ,,NodeSwap=F,");
        assert!(g.enabled("DRAAdminAccess"));
        assert!(!g.enabled("NodeSwap"));
        assert_eq!(
            g.explicitly_set().collect::<Vec<_>>(),
            [("DRAAdminAccess", true), ("NodeSwap", false)]
        );
        assert_eq!(g.to_string(), "DRAAdminAccess=true,NodeSwap=false");
    }

    #[test]
    fn accepts_every_go_bool_spelling() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(
                gates(&format!("DRAAdminAccess={t}")).enabled("DRAAdminAccess"),
                "{t}"
            );
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert!(!gates(&format!("NodeSwap={f}")).enabled("NodeSwap"), "{f}");
        }
    }

    #[test]
    fn error_texts() {
        let err = |v: &str| FeatureGates::new().set(v).unwrap_err();
        assert_eq!(err("NodeSwap"), "missing bool value for NodeSwap");
        assert_eq!(
            err(" NodeSwap ,Bogus=true"),
            "missing bool value for NodeSwap"
        );
        assert_eq!(
            err("NodeSwap=yes"),
            r#"invalid value of NodeSwap=yes, err: strconv.ParseBool: parsing "yes": invalid syntax"#
        );
        assert_eq!(
            err("NodeSwap="),
            r#"invalid value of NodeSwap=, err: strconv.ParseBool: parsing "": invalid syntax"#
        );
        assert_eq!(
            err("NodeSwap=a\"b"),
            r#"invalid value of NodeSwap=a"b, err: strconv.ParseBool: parsing "a\"b": invalid syntax"#
        );
        assert_eq!(err("Bogus=true"), "unrecognized feature gate: Bogus");
        assert_eq!(
            err("SidecarContainers=false"),
            "cannot set feature gate SidecarContainers to false, feature is locked to true"
        );
        assert_eq!(
            err("SidecarContainers=false,AnyVolumeDataSource=false"),
            "[cannot set feature gate AnyVolumeDataSource to false, feature is locked to true, \
             cannot set feature gate SidecarContainers to false, feature is locked to true]"
        );
        // Syntax errors come before any lookup, so the unknown key is not reported.
        assert_eq!(
            err("Bogus=true,NodeSwap"),
            "missing bool value for NodeSwap"
        );
    }

    #[test]
    fn locked_gate_may_be_set_to_its_default_with_a_warning() {
        let mut g = FeatureGates::new();
        let warnings = g.set("SidecarContainers=true").unwrap();
        assert_eq!(
            warnings,
            [
                "Setting GA feature gate SidecarContainers=true. It will be removed in a future release."
            ]
        );
        assert!(g.enabled("SidecarContainers"));
    }

    #[test]
    fn warnings_for_ga_and_deprecated_only() {
        let mut g = FeatureGates::new();
        let warnings = g
            .set("KMSv1=true,MultiCIDRServiceAllocator=false,NodeSwap=false,DRAAdminAccess=true")
            .unwrap();
        assert_eq!(
            warnings,
            [
                "Setting deprecated feature gate KMSv1=true. It will be removed in a future release.",
                "Setting GA feature gate MultiCIDRServiceAllocator=false. It will be removed in a future release.",
            ]
        );
        assert!(g.enabled("KMSv1"));
        assert!(!g.enabled("MultiCIDRServiceAllocator"));
    }

    #[test]
    fn failed_set_changes_nothing() {
        let mut g = gates("NodeSwap=false");
        assert!(g.set("DRAAdminAccess=true,Bogus=true").is_err());
        assert!(!g.enabled("DRAAdminAccess"));
        assert_eq!(g.explicitly_set().count(), 1);
        // A later good value still applies, since the bad keys were not kept.
        g.set("DRAAdminAccess=true").unwrap();
        assert!(g.enabled("DRAAdminAccess"));
    }

    #[test]
    fn all_alpha_and_all_beta_fill_unset_gates() {
        let g = gates("AllAlpha=true,DRADeviceTaints=false");
        assert!(g.enabled("AllAlpha"));
        assert!(g.enabled("DRAAdminAccess"));
        assert!(g.enabled("LoggingAlphaOptions"));
        assert!(g.enabled("ClientsAllowCBOR"));
        assert!(
            !g.enabled("DRADeviceTaints"),
            "explicit setting wins over AllAlpha"
        );
        assert!(
            !g.enabled("DisableAllocatorDualWrite"),
            "beta gates untouched by AllAlpha"
        );
        assert!(!g.enabled("AllBeta"));

        let g = gates("InPlacePodVerticalScaling=true,AllBeta=false");
        assert!(!g.enabled("NodeSwap"));
        assert!(!g.enabled("ContextualLogging"));
        assert!(g.enabled("InPlacePodVerticalScaling"));
        assert!(
            g.enabled("SidecarContainers"),
            "GA gates untouched by AllBeta"
        );
        assert!(
            !g.enabled("DRAAdminAccess"),
            "alpha gates untouched by AllBeta"
        );

        // AllAlpha/AllBeta are neither warned about nor locked.
        assert_eq!(
            FeatureGates::new()
                .set("AllAlpha=true,AllBeta=true")
                .unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn repeated_flags_merge_later_wins() {
        let (g, warnings) = FeatureGates::from_flags(&[
            "NodeSwap=false,KMSv1=true",
            "NodeSwap=true,DRAAdminAccess=true",
        ])
        .unwrap();
        assert!(g.enabled("NodeSwap"));
        assert!(g.enabled("DRAAdminAccess"));
        assert!(g.enabled("KMSv1"));
        // Upstream re-validates every earlier setting on each occurrence.
        let kms =
            "Setting deprecated feature gate KMSv1=true. It will be removed in a future release.";
        assert_eq!(warnings, [kms, kms]);

        // Later occurrences cannot take back what an earlier AllAlpha filled in,
        // as upstream's resolved map keeps it.
        let (g, _) = FeatureGates::from_flags(&["AllAlpha=true", "AllAlpha=false"]).unwrap();
        assert!(!g.enabled("AllAlpha"));
        assert!(g.enabled("DRAAdminAccess"));

        // An explicit setting after AllAlpha still wins.
        let (g, _) = FeatureGates::from_flags(&["AllAlpha=true", "DRAAdminAccess=false"]).unwrap();
        assert!(!g.enabled("DRAAdminAccess"));

        assert_eq!(
            FeatureGates::from_flags(&["NodeSwap=true", "Bogus=1"]).unwrap_err(),
            "unrecognized feature gate: Bogus"
        );
    }

    #[test]
    fn set_from_map_merges_with_flags() {
        let (mut g, _) = FeatureGates::from_flags(&["NodeSwap=false"]).unwrap();
        let config = BTreeMap::from([
            ("DRAAdminAccess".to_owned(), true),
            ("NodeSwap".to_owned(), true),
        ]);
        assert_eq!(g.set_from_map(&config).unwrap(), Vec::<String>::new());
        assert!(g.enabled("NodeSwap"));
        assert!(g.enabled("DRAAdminAccess"));
        let bad = BTreeMap::from([("NodeSwap ".to_owned(), true)]);
        assert_eq!(
            g.set_from_map(&bad).unwrap_err(),
            "unrecognized feature gate: NodeSwap "
        );
    }

    #[test]
    fn known_features_lists_alpha_and_beta_like_help() {
        let lines = FeatureGates::new().known_features();
        assert!(lines.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            lines[0],
            "APIResponseCompression=true|false (BETA - default=true)"
        );
        assert!(lines.contains(&"AllAlpha=true|false (ALPHA - default=false)".to_owned()));
        assert!(lines.contains(&"AllBeta=true|false (BETA - default=false)".to_owned()));
        assert!(
            lines
                .contains(&"InPlacePodVerticalScaling=true|false (BETA - default=true)".to_owned())
        );
        assert!(lines.contains(&"DRAAdminAccess=true|false (ALPHA - default=false)".to_owned()));
        assert!(
            !lines.iter().any(|l| l.starts_with("SidecarContainers=")),
            "GA hidden"
        );
        assert!(
            !lines.iter().any(|l| l.starts_with("KMSv1=")),
            "deprecated hidden"
        );
        let stages = known_1_33()
            .iter()
            .filter(|s| matches!(s.pre_release, PreRelease::Alpha | PreRelease::Beta))
            .count();
        assert_eq!(lines.len(), stages + 2);
    }

    #[test]
    fn clap_value_parser_validates_one_occurrence() {
        assert_eq!(value_parser("NodeSwap=false").unwrap(), "NodeSwap=false");
        assert_eq!(
            value_parser("Bogus=true").unwrap_err(),
            "unrecognized feature gate: Bogus"
        );
    }
}
