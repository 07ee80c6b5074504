//! The flags every upstream component takes from component-base, flattened into each
//! binary's own: the logging flags and `--feature-gates`, with one start-up step that
//! checks both, installs the logger and says which gates the binary does not act on;
//! and `--kube-api-content-type` of the components that are API clients.

use std::collections::BTreeMap;

use crate::featuregate::FeatureGates;
use crate::logs::{
    LOGGING_ALPHA_OPTIONS, LOGGING_BETA_OPTIONS, LoggingConfiguration, LoggingFlags,
};

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

    /// [`ComponentFlags::init`] for a component with a configuration file: the file's
    /// `logging` section under the logging flags given on the command line
    /// (`matches`), and its `featureGates` under `--feature-gates`.
    pub fn init_with_config(
        &mut self,
        matches: &clap::ArgMatches,
        logging: &LoggingConfiguration,
        feature_gates: &BTreeMap<String, bool>,
        acts_on: &[&str],
    ) -> Result<FeatureGates, String> {
        let warnings = self.merge_file_logging(matches, logging)?;
        let gates = self.init(feature_gates, acts_on)?;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        Ok(gates)
    }

    /// The file's `logging` under the logging flags `matches` got on the command line.
    fn merge_file_logging(
        &mut self,
        matches: &clap::ArgMatches,
        logging: &LoggingConfiguration,
    ) -> Result<Vec<String>, String> {
        let on_command_line =
            |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        self.logging.merge_config(logging, &on_command_line)
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

/// Upstream's media type for JSON requests to the API server.
const JSON: &str = "application/json";

/// `--kube-api-content-type` of the components that talk to the API server (the
/// controller manager, the scheduler, the kubelet, kube-proxy). Upstream's clients send
/// and ask for this type (its default: `application/vnd.kubernetes.protobuf`); this
/// project's clients (kube-rs) send and read JSON whatever it says, which the API server
/// serves for every request, so the flag is accepted for unit files written for
/// upstream and [`ClientContentTypeFlag::note`] says what it changes.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct ClientContentTypeFlag {
    /// Content type of requests sent to apiserver (upstream's default:
    /// application/vnd.kubernetes.protobuf). This component's client sends and reads
    /// application/json whatever this says.
    #[arg(long = "kube-api-content-type")]
    pub kube_api_content_type: Option<String>,
}

impl ClientContentTypeFlag {
    /// What the flag changes here, to log at start: `None` when it is unset or JSON.
    pub fn note(&self) -> Option<String> {
        let asked = self.kube_api_content_type.as_deref()?;
        (media_essence(asked) != JSON).then(|| {
            format!(
                "--kube-api-content-type={asked}: this component's client sends and reads {JSON} (the API server answers it in JSON)"
            )
        })
    }
}

fn media_essence(media_type: &str) -> &str {
    media_type.split(';').next().unwrap_or_default().trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        component: ComponentFlags,
        #[command(flatten)]
        content_type: ClientContentTypeFlag,
    }

    #[test]
    fn kube_api_content_type_is_accepted_and_explained() {
        let content_type = |args: &[&str]| {
            let mut argv = vec!["component"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv).unwrap().content_type
        };
        assert_eq!(content_type(&[]).note(), None);
        assert_eq!(
            content_type(&["--kube-api-content-type=application/json"]).note(),
            None
        );
        let note = content_type(&[
            "--kube-api-content-type",
            "application/vnd.kubernetes.protobuf",
        ])
        .note()
        .unwrap();
        assert!(
            note.starts_with("--kube-api-content-type=application/vnd.kubernetes.protobuf: "),
            "{note}"
        );
        assert!(note.contains("sends and reads application/json"), "{note}");
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

    /// A kubeadm-written `logging` section, and one that sets everything.
    fn file_logging(json: serde_json::Value) -> LoggingConfiguration {
        serde_json::from_value(json).unwrap()
    }

    fn merged(args: &[&str], file: &LoggingConfiguration) -> (ComponentFlags, Vec<String>) {
        use clap::{CommandFactory, FromArgMatches};
        let mut argv = vec!["component"];
        argv.extend_from_slice(args);
        let matches = Cli::command().try_get_matches_from(argv).unwrap();
        let mut flags = Cli::from_arg_matches(&matches).unwrap().component;
        let warnings = flags.merge_file_logging(&matches, file).unwrap();
        (flags, warnings)
    }

    #[test]
    fn the_config_files_logging_applies_under_the_command_line() {
        let kubeadm = file_logging(serde_json::json!({
            "flushFrequency": 0, "verbosity": 0,
            "options": {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}}}));
        let (flags, warnings) = merged(&["--v=3"], &kubeadm);
        assert_eq!(flags.logging.verbosity, 3);
        assert_eq!(flags.logging.log_flush_frequency, std::time::Duration::ZERO);
        assert_eq!(flags.logging.log_json_info_buffer_size, "0");
        assert!(warnings.is_empty(), "{warnings:?}");

        let full = file_logging(serde_json::json!({
            "format": "json", "flushFrequency": "10s", "verbosity": 4,
            "vmodule": [{"filePattern": "ferrokube_kubelet", "verbosity": 6}],
            "options": {"json": {"splitStream": true, "infoBufferSize": "1Mi"},
                        "text": {"splitStream": true}}}));
        let (flags, warnings) = merged(&[], &full);
        assert_eq!(flags.logging.logging_format, "json");
        assert_eq!(
            flags.logging.log_flush_frequency,
            std::time::Duration::from_secs(10)
        );
        assert_eq!(flags.logging.verbosity, 4);
        assert_eq!(flags.logging.vmodule, ["ferrokube_kubelet=6"]);
        assert!(flags.logging.log_json_split_stream);
        assert_eq!(flags.logging.log_json_info_buffer_size, "1Mi");
        assert_eq!(
            warnings.len(),
            1,
            "text options change nothing: {warnings:?}"
        );

        // Every flag given on the command line wins, even at its default value.
        let (flags, _) = merged(
            &[
                "--logging-format=text",
                "-v",
                "0",
                "--vmodule=x=1",
                "--log-flush-frequency=5s",
                "--log-json-split-stream=false",
                "--log-json-info-buffer-size=0",
            ],
            &full,
        );
        assert_eq!(flags.logging, parse(&["--vmodule=x=1"]).unwrap().logging);
    }

    #[test]
    fn a_bad_logging_section_is_an_error() {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().try_get_matches_from(["c"]).unwrap();
        let mut flags = Cli::from_arg_matches(&matches).unwrap().component;
        for (file, want) in [
            (
                serde_json::json!({"flushFrequency": "soon"}),
                "logging.flushFrequency",
            ),
            (
                serde_json::json!({"flushFrequency": -1}),
                "logging.flushFrequency",
            ),
            (
                serde_json::json!({"options": {"json": {"infoBufferSize": true}}}),
                "logging.options.json.infoBufferSize",
            ),
        ] {
            let err = flags
                .merge_file_logging(&matches, &file_logging(file))
                .unwrap_err();
            assert!(err.contains(want), "{err}");
        }
        // A format the file names is checked as the flag's is.
        flags
            .merge_file_logging(
                &matches,
                &file_logging(serde_json::json!({"format": "xml"})),
            )
            .unwrap();
        let err = flags.logging.validate(&|_| true).unwrap_err();
        assert!(err.contains("Unsupported log format"), "{err}");
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
