//! Upstream's logging flags (`k8s.io/component-base/logs/api/v1`), taken by every
//! binary with the same names, defaults and errors, and the `tracing` subscriber they
//! configure.
//!
//! * `-v`/`--v N` and `--vmodule pattern=N,...`: klog's verbosity. tracing has levels,
//!   not numbers: 0–1 is info, 2–4 debug, 5 and more trace, as everywhere in
//!   Ferrokube. A `--vmodule` pattern names a Rust module path (`ferrokube_registry`,
//!   `ferrokube_kubelet::pleg`), matched as a prefix, where klog's names a Go file:
//!   there are no Go files here to name. `RUST_LOG`, when set, wins over both.
//! * `--logging-format text|json`: `json` writes upstream's records (zapr through
//!   component-base's encoder config): `{"ts":<ms since the epoch>,"caller":"dir/file.rs:N",
//!   "msg":"...","v":N, ...}`, with `"err"` for errors, so log pipelines that parse an
//!   upstream component's JSON parse ours.
//! * `--log-flush-frequency`: checked as a Go duration. Every record is written straight
//!   to its stream, so no record waits for a flush.
//! * `--log-json-split-stream`, `--log-json-info-buffer-size` (alpha, behind the
//!   `LoggingAlphaOptions` gate as upstream): info records to stdout, errors to stderr.
//!   The buffer size is checked; info records are not buffered.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrokube_apimachinery::errors::{aggregate_texts, go_quote};
use serde::Deserialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::MakeWriterExt;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The gate upstream puts the JSON format behind (beta, on by default in 1.33).
pub const LOGGING_BETA_OPTIONS: &str = "LoggingBetaOptions";
/// The gate upstream puts the split streams and the info buffer behind (alpha).
pub const LOGGING_ALPHA_OPTIONS: &str = "LoggingAlphaOptions";

/// The logging flags every upstream component registers (`logsapi.AddFlags`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct LoggingFlags {
    /// number for the log level verbosity (0-1 info, 2-4 debug, 5 and more trace)
    #[arg(short = 'v', long = "v", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=i64::from(i32::MAX)))]
    pub verbosity: u32,
    /// comma-separated list of pattern=N settings for module-filtered logging (only
    /// works for text log format); a pattern is a Rust module path prefix, such as
    /// ferrokube_registry::store
    #[arg(long)]
    pub vmodule: Vec<String>,
    /// Sets the log format. Permitted formats: "json" (gated by LoggingBetaOptions),
    /// "text".
    #[arg(long, default_value = "text")]
    pub logging_format: String,
    /// Maximum number of seconds between log flushes (records are written unbuffered)
    #[arg(long, default_value = "5s", value_parser = ferrokube_apimachinery::duration::parse_go_duration)]
    pub log_flush_frequency: Duration,
    /// [Alpha] In JSON format, write error messages to stderr and info messages to
    /// stdout. The default is to write a single stream to stderr. Enable the
    /// LoggingAlphaOptions feature gate to use this.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub log_json_split_stream: bool,
    /// [Alpha] In JSON format with split output streams, the info messages can be
    /// buffered for a while to increase performance (a quantity of bytes; 0 disables
    /// buffering). Enable the LoggingAlphaOptions feature gate to use this.
    #[arg(long, default_value = "0")]
    pub log_json_info_buffer_size: String,
}

impl Default for LoggingFlags {
    fn default() -> Self {
        LoggingFlags {
            verbosity: 0,
            vmodule: Vec::new(),
            logging_format: "text".into(),
            log_flush_frequency: Duration::from_secs(5),
            log_json_split_stream: false,
            log_json_info_buffer_size: "0".into(),
        }
    }
}

/// The `logging` section of a component's configuration file (the kubelet's, kube-proxy's):
/// upstream's `LoggingConfiguration` of `k8s.io/component-base/logs/api/v1`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggingConfiguration {
    pub format: Option<String>,
    /// Nanoseconds as a number, or a Go duration string (upstream's
    /// `TimeOrMetaDuration`).
    pub flush_frequency: Option<serde_json::Value>,
    pub verbosity: Option<u32>,
    #[serde(default)]
    pub vmodule: Vec<VModuleItem>,
    #[serde(default)]
    pub options: FormatOptions,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VModuleItem {
    pub file_pattern: String,
    pub verbosity: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FormatOptions {
    #[serde(default)]
    pub json: StreamOptions,
    #[serde(default)]
    pub text: StreamOptions,
}

/// `options.json` and `options.text`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamOptions {
    pub split_stream: Option<bool>,
    /// A quantity, as a string or a number.
    pub info_buffer_size: Option<serde_json::Value>,
}

impl LoggingFlags {
    /// Takes the configuration file's `logging` settings for every flag not given on
    /// the command line (`on_command_line` answers by the flag's field name), as
    /// upstream's components let flags override their configuration file. Returns
    /// warnings to log once logging is set up.
    pub fn merge_config(
        &mut self,
        file: &LoggingConfiguration,
        on_command_line: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<String>, String> {
        let from_file = |name: &str| !on_command_line(name);
        if let Some(format) = file.format.as_ref().filter(|_| from_file("logging_format")) {
            self.logging_format = format.clone();
        }
        if let Some(v) = file.verbosity.filter(|_| from_file("verbosity")) {
            self.verbosity = v;
        }
        if !file.vmodule.is_empty() && from_file("vmodule") {
            self.vmodule = file
                .vmodule
                .iter()
                .map(|item| format!("{}={}", item.file_pattern, item.verbosity))
                .collect();
        }
        if let Some(f) = file
            .flush_frequency
            .as_ref()
            .filter(|_| from_file("log_flush_frequency"))
        {
            self.log_flush_frequency = match f {
                serde_json::Value::Number(n) => n
                    .as_u64()
                    .map(Duration::from_nanos)
                    .ok_or_else(|| format!("logging.flushFrequency: invalid value {n}"))?,
                serde_json::Value::String(s) => {
                    ferrokube_apimachinery::duration::parse_go_duration(s)
                        .map_err(|e| format!("logging.flushFrequency: {e}"))?
                }
                other => return Err(format!("logging.flushFrequency: invalid value {other}")),
            };
        }
        let json = &file.options.json;
        if let Some(split) = json
            .split_stream
            .filter(|_| from_file("log_json_split_stream"))
        {
            self.log_json_split_stream = split;
        }
        if let Some(size) = json
            .info_buffer_size
            .as_ref()
            .filter(|_| from_file("log_json_info_buffer_size"))
        {
            self.log_json_info_buffer_size = quantity_text(size, "json")?;
        }
        let text = &file.options.text;
        let text_buffer = match &text.info_buffer_size {
            Some(size) => ferrokube_apimachinery::quantity::value(&quantity_text(size, "text")?),
            None => Some(0),
        };
        let mut warnings = Vec::new();
        if text.split_stream == Some(true) || text_buffer != Some(0) {
            warnings.push(
                "logging.options.text: Ferrokube writes text logs to one unbuffered stream; splitStream and infoBufferSize change nothing"
                    .to_string(),
            );
        }
        Ok(warnings)
    }
}

/// An `infoBufferSize` quantity as the flag's text.
fn quantity_text(size: &serde_json::Value, format: &str) -> Result<String, String> {
    match size {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(format!(
            "logging.options.{format}.infoBufferSize: invalid value {other}"
        )),
    }
}

/// Whether the logs are upstream's JSON records or tracing's text lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The checked flags: what [`LoggingFlags::init`] installs.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggingConfig {
    pub format: LogFormat,
    /// `EnvFilter` directives: the `-v` level, then one per `--vmodule` pattern.
    pub directives: String,
    pub split_stream: bool,
}

impl LoggingFlags {
    /// The logging configuration in effect (the file's `logging` with the flags over
    /// it), as upstream serializes a `LoggingConfiguration`: the kubelet's `/configz`
    /// shows it under `kubeletconfig.logging`. `flushFrequency` is a Go duration, as
    /// upstream's defaulting leaves it; text logs are one unbuffered stream here, so
    /// `options.text` shows what is in effect whatever the file asked for.
    pub fn effective_configuration(&self) -> serde_json::Value {
        let flush_nanos = i64::try_from(self.log_flush_frequency.as_nanos()).unwrap_or(i64::MAX);
        let mut json_options = serde_json::Map::new();
        if self.log_json_split_stream {
            json_options.insert("splitStream".into(), true.into());
        }
        let buffer = self.log_json_info_buffer_size.trim();
        json_options.insert(
            "infoBufferSize".into(),
            if buffer.is_empty() { "0" } else { buffer }.into(),
        );
        let mut logging = serde_json::json!({
            "format": self.logging_format,
            "flushFrequency": ferrokube_apimachinery::duration::go_duration(flush_nanos),
            "verbosity": self.verbosity,
            "options": {
                "text": {"infoBufferSize": "0"},
                "json": json_options,
            },
        });
        // Checked at start-up; an item that does not parse was refused there.
        let vmodule = parse_vmodule(&self.vmodule).unwrap_or_default();
        if !vmodule.is_empty() {
            logging["vmodule"] = vmodule
                .into_iter()
                .map(|(pattern, verbosity)| {
                    serde_json::json!({"filePattern": pattern, "verbosity": verbosity})
                })
                .collect();
        }
        logging
    }

    /// Checks the flags as upstream's `logsapi.Validate` does, against the feature
    /// gates `gate_enabled` answers for. The error lists every problem in upstream's
    /// field-error form (`format: Invalid value: "xml": Unsupported log format`).
    pub fn validate(&self, gate_enabled: &dyn Fn(&str) -> bool) -> Result<LoggingConfig, String> {
        let mut errors = Vec::new();
        let format = match self.logging_format.as_str() {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            other => {
                errors.push(format!(
                    "format: Invalid value: {}: Unsupported log format",
                    go_quote(other)
                ));
                None
            }
        };
        if format == Some(LogFormat::Json) && !gate_enabled(LOGGING_BETA_OPTIONS) {
            errors.push(format!(
                "format: Forbidden: Log format json is disabled, see {LOGGING_BETA_OPTIONS} feature"
            ));
        }
        let mut directives = vec![level_name(self.verbosity).to_string()];
        if self.verbosity <= 1 {
            // kube-rs logs every failed request at ERROR without naming it (the request
            // is in a span only debug shows); its callers log the same failure with what
            // it was about (an informer's retry, a failed reconcile), so at the default
            // verbosity these lines only add noise: dozens at each controller-manager
            // start while an aggregated API is still unavailable.
            directives.push(format!("{KUBE_RS_REQUEST_LOG}=off"));
        }
        let vmodule = match parse_vmodule(&self.vmodule) {
            Ok(items) => items,
            Err(e) => {
                errors.push(e);
                Vec::new()
            }
        };
        if !vmodule.is_empty() && format.is_some_and(|f| f != LogFormat::Text) {
            errors.push("vmodule: Forbidden: Only supported for text log format".into());
        }
        for (pattern, verbosity) in &vmodule {
            directives.push(format!("{pattern}={}", level_name(*verbosity)));
        }
        if self.log_json_split_stream && !gate_enabled(LOGGING_ALPHA_OPTIONS) {
            errors.push(format!(
                "options.json.splitStream: Forbidden: Feature {LOGGING_ALPHA_OPTIONS} is disabled"
            ));
        }
        match ferrokube_apimachinery::quantity::value(&self.log_json_info_buffer_size) {
            None => errors.push(format!(
                "invalid argument {} for \"--log-json-info-buffer-size\" flag: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                go_quote(&self.log_json_info_buffer_size)
            )),
            Some(0) => {}
            Some(_) if !gate_enabled(LOGGING_ALPHA_OPTIONS) => errors.push(format!(
                "options.json.infoBufferSize: Forbidden: Feature {LOGGING_ALPHA_OPTIONS} is disabled"
            )),
            Some(_) => {}
        }
        match (aggregate_texts(errors), format) {
            (None, Some(format)) => Ok(LoggingConfig {
                format,
                directives: directives.join(","),
                split_stream: self.log_json_split_stream,
            }),
            // An unknown format always left an error.
            (message, _) => Err(message.unwrap_or_default()),
        }
    }

    /// [`LoggingFlags::init`] with v1.33's default gates, for binaries that take no
    /// `--feature-gates` (kube-dns, metrics-server).
    pub fn init_with_default_gates(&self) -> Result<(), String> {
        let gates = crate::FeatureGates::new();
        self.init(&|gate| gates.enabled(gate))
    }

    /// Checks the flags and installs the process's subscriber. `RUST_LOG`, when set,
    /// replaces the `-v`/`--vmodule` filter.
    pub fn init(&self, gate_enabled: &dyn Fn(&str) -> bool) -> Result<(), String> {
        let config = self.validate(gate_enabled)?;
        let filter = EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(&config.directives));
        // klog never colours; tracing's text format does unless told not to, which put
        // escape codes in every log file and `kubectl logs`. Colour only a terminal, and
        // not even that under NO_COLOR (the https://no-color.org convention).
        let colour = text_colour(
            config.format,
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        );
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(colour);
        // Upstream writes everything to stderr unless the streams are split.
        let result = match (config.format, config.split_stream) {
            (LogFormat::Text, _) => builder.with_writer(std::io::stderr).try_init(),
            (LogFormat::Json, false) => builder
                .event_format(UpstreamJson)
                .with_writer(std::io::stderr)
                .try_init(),
            (LogFormat::Json, true) => builder
                .event_format(UpstreamJson)
                .with_writer(
                    std::io::stderr
                        .with_max_level(Level::ERROR)
                        .or_else(std::io::stdout),
                )
                .try_init(),
        };
        result.map_err(|e| format!("installing the logger: {e}"))
    }
}

/// Whether the text format may colour its records: only on a terminal, without NO_COLOR.
fn text_colour(format: LogFormat, stderr_is_terminal: bool, no_color: bool) -> bool {
    format == LogFormat::Text && stderr_is_terminal && !no_color
}

/// The tracing target of kube-rs's per-request failure log.
const KUBE_RS_REQUEST_LOG: &str = "kube_client::client::builder";

/// klog's verbosity as tracing's level, the one mapping Ferrokube logs by.
fn level_name(verbosity: u32) -> &'static str {
    match verbosity {
        0..=1 => "info",
        2..=4 => "debug",
        _ => "trace",
    }
}

/// Upstream's `--vmodule` parser: each repetition of the flag adds its items; empty
/// items (a trailing comma) are skipped.
fn parse_vmodule(values: &[String]) -> Result<Vec<(String, u32)>, String> {
    let mut items = Vec::new();
    for item in values.iter().flat_map(|v| v.split(',')) {
        if item.is_empty() {
            continue;
        }
        let (pattern, level) = match item.split('=').collect::<Vec<_>>()[..] {
            [pattern, level] if !pattern.is_empty() && !level.is_empty() => (pattern, level),
            _ => {
                return Err(format!(
                    "{} does not have the pattern=N format",
                    go_quote(item)
                ));
            }
        };
        // Upstream parses a uint of 31 bits so that it fits an int32.
        let verbosity = level
            .parse::<u32>()
            .ok()
            .filter(|v| *v <= i32::MAX as u32)
            .ok_or_else(|| {
                format!(
                    "parsing verbosity in {}: strconv.ParseUint: parsing {}: invalid syntax",
                    go_quote(item),
                    go_quote(level)
                )
            })?;
        // A tracing target is matched as a prefix, which is what klog's trailing `*`
        // asks for; other glob characters have no module-path meaning.
        let pattern = pattern.strip_suffix('*').unwrap_or(pattern);
        if pattern.is_empty()
            || !pattern
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '-')
        {
            return Err(format!(
                "{}: a pattern here is a Rust module path prefix, such as ferrokube_registry::store",
                go_quote(item)
            ));
        }
        items.push((pattern.replace('-', "_"), verbosity));
    }
    Ok(items)
}

/// Upstream's JSON records: zap's JSON encoder with component-base's config (`ts` in
/// milliseconds since the epoch, `caller` as the last directory and the file, `msg`),
/// then zapr's `v` for info records or nothing for errors, then the fields.
struct UpstreamJson;

impl<S, N> FormatEvent<S, N> for UpstreamJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        writer.write_str(&json_record(now, event))
    }
}

/// One record, newline included.
fn json_record(now: Duration, event: &Event<'_>) -> String {
    let metadata = event.metadata();
    let mut fields = JsonFields::default();
    event.record(&mut fields);
    let mut line = String::with_capacity(128);
    let _ = write!(line, "{{\"ts\":{}", now.as_nanos() as f64 / 1e6);
    if let Some(file) = metadata.file() {
        let caller = format!("{}:{}", short_caller(file), metadata.line().unwrap_or(0));
        let _ = write!(line, ",\"caller\":{}", serde_json::Value::from(caller));
    }
    let _ = write!(line, ",\"msg\":{}", serde_json::Value::from(fields.message));
    if let Some(v) = verbosity_of(*metadata.level()) {
        let _ = write!(line, ",\"v\":{v}");
    }
    for (name, value) in fields.values {
        let _ = write!(line, ",{}:{value}", serde_json::Value::from(name));
    }
    line.push_str("}\n");
    line
}

/// zapr's `v` of an info record at this level; errors carry none.
fn verbosity_of(level: Level) -> Option<u32> {
    match level {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(2),
        Level::TRACE => Some(5),
    }
}

/// zap's ShortCallerEncoder: the file's directory's last element and its name.
fn short_caller(file: &str) -> &str {
    let mut slashes = file.rmatch_indices('/').map(|(i, _)| i);
    match (slashes.next(), slashes.next()) {
        (Some(_), Some(before)) => &file[before + 1..],
        _ => file,
    }
}

/// An event's message and fields as JSON, `error` named `err` as zapr names it.
#[derive(Default)]
struct JsonFields {
    message: String,
    values: Vec<(&'static str, serde_json::Value)>,
}

impl JsonFields {
    fn push(&mut self, field: &Field, value: serde_json::Value) {
        let name = match field.name() {
            "error" => "err",
            name => name,
        };
        self.values.push((name, value));
    }
}

impl Visit for JsonFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.push(field, value.into());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.push(field, format!("{value:?}").into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        logging: LoggingFlags,
    }

    fn flags(args: &[&str]) -> LoggingFlags {
        let mut argv = vec!["component"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).unwrap().logging
    }

    fn defaults(gate: &str) -> bool {
        gate == LOGGING_BETA_OPTIONS
    }

    #[test]
    fn defaults_are_upstreams() {
        let f = flags(&[]);
        assert_eq!(f, LoggingFlags::default());
        let config = f.validate(&defaults).unwrap();
        assert_eq!(config.format, LogFormat::Text);
        assert_eq!(config.directives, "info,kube_client::client::builder=off");
        assert!(!config.split_stream);
    }

    #[test]
    fn verbosity_and_vmodule_become_directives() {
        let f = flags(&[
            "-v",
            "3",
            "--vmodule",
            "ferrokube_registry::store=5,ferrokube_kubelet*=1,",
            "--vmodule=kube-proxy=2",
        ]);
        assert_eq!(
            f.validate(&defaults).unwrap().directives,
            "debug,ferrokube_registry::store=trace,ferrokube_kubelet=info,kube_proxy=debug"
        );
        assert_eq!(flags(&["--v=7"]).verbosity, 7);
        assert!(Cli::try_parse_from(["c", "--v=-1"]).is_err());
    }

    #[test]
    fn the_effective_configuration_is_serialized_as_upstreams() {
        assert_eq!(
            flags(&[]).effective_configuration(),
            serde_json::json!({
                "format": "text",
                "flushFrequency": "5s",
                "verbosity": 0,
                "options": {
                    "text": {"infoBufferSize": "0"},
                    "json": {"infoBufferSize": "0"},
                },
            })
        );
        let f = flags(&[
            "--logging-format=json",
            "--log-flush-frequency=1m30s",
            "-v",
            "2",
            "--vmodule=ferrokube_registry::store=5",
            "--log-json-split-stream",
            "--log-json-info-buffer-size=5Mi",
        ]);
        assert_eq!(
            f.effective_configuration(),
            serde_json::json!({
                "format": "json",
                "flushFrequency": "1m30s",
                "verbosity": 2,
                "vmodule": [{"filePattern": "ferrokube_registry::store", "verbosity": 5}],
                "options": {
                    "text": {"infoBufferSize": "0"},
                    "json": {"splitStream": true, "infoBufferSize": "5Mi"},
                },
            })
        );
    }

    #[test]
    fn bad_vmodule_items_get_upstreams_errors() {
        let check = |value: &str| {
            flags(&["--vmodule", value])
                .validate(&defaults)
                .unwrap_err()
        };
        assert_eq!(
            check("store"),
            "\"store\" does not have the pattern=N format"
        );
        assert_eq!(
            check("a=b=1"),
            "\"a=b=1\" does not have the pattern=N format"
        );
        assert_eq!(check("=1"), "\"=1\" does not have the pattern=N format");
        assert_eq!(
            check("store=x"),
            "parsing verbosity in \"store=x\": strconv.ParseUint: parsing \"x\": invalid syntax"
        );
        assert!(check("sto?re=1").contains("Rust module path prefix"));
    }

    #[test]
    fn formats_and_gates_are_checked_as_upstream() {
        assert_eq!(
            flags(&["--logging-format", "xml"])
                .validate(&defaults)
                .unwrap_err(),
            "format: Invalid value: \"xml\": Unsupported log format"
        );
        let json = flags(&["--logging-format=json"]);
        assert_eq!(json.validate(&defaults).unwrap().format, LogFormat::Json);
        assert_eq!(
            json.validate(&|_| false).unwrap_err(),
            "format: Forbidden: Log format json is disabled, see LoggingBetaOptions feature"
        );
        assert_eq!(
            flags(&["--logging-format=json", "--vmodule=a=1"])
                .validate(&defaults)
                .unwrap_err(),
            "vmodule: Forbidden: Only supported for text log format"
        );
        let split = flags(&[
            "--logging-format=json",
            "--log-json-split-stream",
            "--log-json-info-buffer-size=1Mi",
        ]);
        assert_eq!(
            split.validate(&defaults).unwrap_err(),
            "[options.json.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled, options.json.infoBufferSize: Forbidden: Feature LoggingAlphaOptions is disabled]"
        );
        assert!(split.validate(&|_| true).unwrap().split_stream);
        assert!(
            flags(&["--log-json-info-buffer-size=lots"])
                .validate(&defaults)
                .unwrap_err()
                .contains("--log-json-info-buffer-size")
        );
        assert_eq!(
            flags(&["--log-flush-frequency=250ms"]).log_flush_frequency,
            Duration::from_millis(250)
        );
        assert!(Cli::try_parse_from(["c", "--log-flush-frequency=soon"]).is_err());
    }

    /// Every record the subscriber writes, through the JSON formatter.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn text_records_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(text_colour(LogFormat::Text, true, false));
        assert!(
            !text_colour(LogFormat::Text, false, false),
            "a file or pipe"
        );
        assert!(!text_colour(LogFormat::Text, true, true), "NO_COLOR");
        assert!(!text_colour(LogFormat::Json, true, false));

        // What a log file receives with colour off: the plain line, no escape codes.
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_ansi(text_colour(LogFormat::Text, false, false))
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(addr = "127.0.0.1:10259", "serving");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains('\x1b'), "{text:?}");
        assert!(text.contains(" WARN "), "{text:?}");
        assert!(
            text.contains("serving addr=\"127.0.0.1:10259\""),
            "{text:?}"
        );
    }

    #[test]
    fn json_records_have_upstreams_keys_in_upstreams_order() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .event_format(UpstreamJson)
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(pod = "default/web", restarts = 3u64, "Pod started");
            tracing::debug!(ready = true, "probe");
            tracing::error!(error = %"connection refused", "Sync failed");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert!(
            first["ts"].as_f64().unwrap() > 1.6e12,
            "milliseconds: {first}"
        );
        assert!(
            lines[0].contains("\"caller\":\"src/logs.rs:"),
            "{}",
            lines[0]
        );
        let after_ts = &lines[0][lines[0].find(",\"caller\"").unwrap()..];
        assert!(
            after_ts.contains(
                ",\"msg\":\"Pod started\",\"v\":0,\"pod\":\"default/web\",\"restarts\":3}"
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].ends_with(",\"msg\":\"probe\",\"v\":2,\"ready\":true}"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].ends_with(",\"msg\":\"Sync failed\",\"err\":\"connection refused\"}"),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn the_caller_is_the_last_directory_and_the_file() {
        assert_eq!(short_caller("crates/kubelet/src/pleg.rs"), "src/pleg.rs");
        assert_eq!(short_caller("src/main.rs"), "src/main.rs");
        assert_eq!(short_caller("main.rs"), "main.rs");
    }
}
