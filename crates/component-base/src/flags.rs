//! The flags every upstream component takes from component-base, flattened into each
//! binary's own: the logging flags and `--feature-gates`, with one start-up step that
//! checks both, installs the logger and says which gates the binary does not act on.

use std::collections::BTreeMap;

use crate::featuregate::FeatureGates;
use crate::logs::{LOGGING_ALPHA_OPTIONS, LOGGING_BETA_OPTIONS, LoggingFlags};

/// `--feature-gates` and the logging flags.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct ComponentFlags {
    #[command(flatten)]
    pub logging: LoggingFlags,
    /// A set of key=value pairs that describe feature gates for alpha/experimental
    /// features (Kubernetes v1.33's gates; see docs/install.md for the ones Ferrokube
    /// acts on).
    #[arg(long, value_parser = crate::featuregate::value_parser)]
    pub feature_gates: Vec<String>,
}

impl ComponentFlags {
    /// Resolves the gates (`--feature-gates` over `from_config`, a config file's
    /// `featureGates`, as the kubelet merges them), installs the logger and logs the
    /// gates' warnings. `acts_on` names the gates this binary's behaviour follows
    /// (the logging gates are component-base's own); a gate set to anything but its
    /// default that is not among them gets a warning that it changes nothing here.
    pub fn init(
        &self,
        from_config: &BTreeMap<String, bool>,
        acts_on: &[&str],
    ) -> Result<FeatureGates, String> {
        let mut gates = FeatureGates::new();
        let mut warnings = gates.set_from_map(from_config)?;
        for value in &self.feature_gates {
            warnings.extend(gates.set(value)?);
        }
        self.logging.init(&|gate| gates.enabled(gate))?;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        for name in ignored_settings(&gates, acts_on) {
            tracing::warn!(
                "feature gate {name}={}: Ferrokube does not act on this gate; the setting changes nothing",
                gates.enabled(name)
            );
        }
        Ok(gates)
    }
}

/// The gates set away from their default that neither the binary nor component-base
/// acts on.
fn ignored_settings<'a>(gates: &'a FeatureGates, acts_on: &[&str]) -> Vec<&'a str> {
    gates
        .explicitly_set()
        .filter(|(name, _)| {
            !acts_on.contains(name) && ![LOGGING_ALPHA_OPTIONS, LOGGING_BETA_OPTIONS].contains(name)
        })
        .filter(|(name, value)| gates.spec(name).is_some_and(|spec| spec.default != *value))
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        component: ComponentFlags,
    }

    fn parse(args: &[&str]) -> Result<ComponentFlags, String> {
        let mut argv = vec!["component"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
            .map(|cli| cli.component)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn feature_gates_are_checked_when_parsed() {
        let flags = parse(&[
            "--feature-gates=InPlacePodVerticalScaling=false",
            "--feature-gates",
            "LoggingAlphaOptions=true",
            "--v=2",
        ])
        .unwrap();
        assert_eq!(flags.feature_gates.len(), 2);
        assert_eq!(flags.logging.verbosity, 2);
        let err = parse(&["--feature-gates=NoSuchGate=true"]).unwrap_err();
        assert!(
            err.contains("unrecognized feature gate: NoSuchGate"),
            "{err}"
        );
    }

    #[test]
    fn only_settings_away_from_the_default_that_nothing_acts_on_are_reported() {
        let mut gates = FeatureGates::new();
        gates
            .set("InPlacePodVerticalScaling=false,SidecarContainers=true,LoggingAlphaOptions=true,AllAlpha=false")
            .unwrap();
        assert_eq!(
            ignored_settings(&gates, &[]),
            vec!["InPlacePodVerticalScaling"]
        );
        assert!(ignored_settings(&gates, &["InPlacePodVerticalScaling"]).is_empty());
    }
}
