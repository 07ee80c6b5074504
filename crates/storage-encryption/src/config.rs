//! The `EncryptionConfiguration` file (`apiserver.config.k8s.io/v1`): its types,
//! decoding (YAML or JSON, strict as upstream's), upstream's validation, and the
//! compiled [`Encryption`] the storage decorator uses.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use std::time::Duration;

use base64::Engine as _;
use ferrokube_apimachinery::duration::{go_duration, parse_go_duration};
use serde::Deserialize;

use crate::kms::{KmsHealth, KmsTimings, KmsV2};
use crate::metrics::EncryptionMetrics;
use crate::providers::{Kind, Provider};
use crate::resources::{GroupResource, Resolver, Rules};

pub const API_VERSION: &str = "apiserver.config.k8s.io/v1";
pub const KIND: &str = "EncryptionConfiguration";

/// Key sizes upstream accepts (`aes.NewCipher`).
const AES_KEY_SIZES: &[usize] = &[16, 24, 32];
/// Key size of secretbox (XSalsa20-Poly1305).
const SECRETBOX_KEY_SIZES: &[usize] = &[32];

/// The whole file. Unknown fields are errors, as upstream decodes it strictly.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    /// Rules in order; the first rule that names a resource (or its wildcard) wins.
    #[serde(default)]
    pub resources: Vec<ResourceConfiguration>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfiguration {
    /// `<resource>` (core), `<resource>.<group>`, `*.<group>`, `*.` (all of core) or
    /// `*.*`.
    #[serde(default)]
    pub resources: Vec<String>,
    /// The first encrypts writes; all are tried on reads.
    #[serde(default)]
    pub providers: Vec<ProviderConfiguration>,
}

/// Exactly one field must be set.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfiguration {
    #[serde(default)]
    pub aesgcm: Option<AesConfiguration>,
    #[serde(default)]
    pub aescbc: Option<AesConfiguration>,
    #[serde(default)]
    pub secretbox: Option<SecretboxConfiguration>,
    #[serde(default)]
    pub identity: Option<IdentityConfiguration>,
    #[serde(default)]
    pub kms: Option<KmsConfiguration>,
}

/// A `kms` provider: envelope encryption by an external plugin. Only API version v2
/// is implemented (upstream's v1 is deprecated and off by default since 1.29).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KmsConfiguration {
    /// `v1` when empty, as upstream defaults it.
    #[serde(default)]
    pub api_version: String,
    /// Part of every stored value's prefix: it must not change while data uses it.
    #[serde(default)]
    pub name: String,
    /// v1 only.
    #[serde(default, rename = "cachesize")]
    pub cache_size: Option<i32>,
    /// `unix:///path/to/socket` (or `unix:///@name`, an abstract socket).
    #[serde(default)]
    pub endpoint: String,
    /// Per plugin call, a Go duration; 3s when unset.
    #[serde(default)]
    pub timeout: Option<String>,
}

/// Upstream's default `timeout` of a KMS provider.
const KMS_DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

impl KmsConfiguration {
    fn api_version(&self) -> &str {
        if self.api_version.is_empty() {
            "v1"
        } else {
            &self.api_version
        }
    }

    /// The timeout in nanoseconds (negative allowed, to report it), or Go's parse
    /// error.
    fn timeout_nanos(&self) -> Result<i64, String> {
        let Some(text) = self.timeout.as_deref() else {
            return Ok(KMS_DEFAULT_TIMEOUT.as_nanos() as i64);
        };
        let (negative, magnitude) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let parsed =
            parse_go_duration(magnitude).map_err(|_| format!("time: invalid duration {text:?}"))?;
        let nanos = i64::try_from(parsed.as_nanos()).unwrap_or(i64::MAX);
        Ok(if negative { -nanos } else { nanos })
    }
}

/// The scheme of a URL as Go's `url.Parse` finds it (empty when there is none).
fn url_scheme(endpoint: &str) -> &str {
    match endpoint.split_once(':') {
        Some((scheme, _))
            if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            scheme
        }
        _ => "",
    }
}

/// Upstream's `validateKMSConfiguration`, in its order.
fn validate_kms(
    kms: &KmsConfiguration,
    path: &str,
    names: &mut Vec<String>,
    errs: &mut Vec<FieldError>,
) {
    let version = kms.api_version();
    let name_path = format!("{path}.name");
    if kms.name.is_empty() {
        errs.push(FieldError::required(
            &name_path,
            "name is a mandatory field for a provider",
        ));
    }
    if version != "v1" && kms.name.contains(':') {
        errs.push(FieldError::invalid(
            &name_path,
            quoted(&kms.name),
            format!(
                "invalid KMS provider name {}, must not contain ':'",
                kms.name
            ),
        ));
    }
    if version != "v1" && names.contains(&kms.name) {
        errs.push(FieldError::invalid(
            &name_path,
            quoted(&kms.name),
            format!(
                "duplicate KMS provider name {}, names must be unique",
                kms.name
            ),
        ));
    }
    match kms.timeout_nanos() {
        Err(e) => errs.push(FieldError::invalid(
            format!("{path}.timeout"),
            quoted(kms.timeout.as_deref().unwrap_or("")),
            e,
        )),
        Ok(nanos) if nanos <= 0 => errs.push(FieldError::invalid(
            format!("{path}.timeout"),
            go_duration(nanos),
            "timeout should be a positive value",
        )),
        Ok(_) => {}
    }
    let endpoint_path = format!("{path}.endpoint");
    if kms.endpoint.is_empty() {
        errs.push(FieldError::invalid(
            &endpoint_path,
            quoted(""),
            "endpoint is a mandatory field for a kms",
        ));
    } else if url_scheme(&kms.endpoint) != "unix" {
        errs.push(FieldError::invalid(
            &endpoint_path,
            quoted(&kms.endpoint),
            format!(
                "unsupported scheme {:?} for KMS provider, only unix is supported",
                url_scheme(&kms.endpoint)
            ),
        ));
    }
    if let Some(size) = kms.cache_size {
        if version != "v1" {
            errs.push(FieldError::invalid(
                format!("{path}.cachesize"),
                size.to_string(),
                "cachesize is not supported in v2",
            ));
        } else if size == 0 {
            errs.push(FieldError::invalid(
                format!("{path}.cachesize"),
                size.to_string(),
                "cachesize should be a positive value, or negative to disable",
            ));
        }
    }
    if version != "v1" && version != "v2" {
        // Upstream formats its message with the field's name, not its value.
        errs.push(FieldError::invalid(
            format!("{path}.apiVersion"),
            quoted(version),
            "unsupported apiVersion apiVersion for KMS provider, only v1 and v2 are supported",
        ));
    }
    names.push(kms.name.clone());
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AesConfiguration {
    #[serde(default)]
    pub keys: Vec<Key>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SecretboxConfiguration {
    #[serde(default)]
    pub keys: Vec<Key>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfiguration {}

/// A named key; `secret` is base64 (standard alphabet, padded).
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Key {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub secret: String,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("secret", &"REDACTED")
            .finish()
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("error reading encryption provider configuration file {path:?}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("encryption provider configuration file {0:?} is empty")]
    Empty(String),
    #[error("error decoding encryption provider configuration: {0}")]
    Decode(String),
    /// Validation errors, upstream's field error texts.
    #[error("{0}")]
    Invalid(String),
    #[error("error while building transformers: {0}")]
    Build(String),
}

/// One validation failure, printed as upstream's `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldError {
    path: String,
    /// `None`: a required value is missing; else the bad value as printed.
    value: Option<String>,
    detail: String,
}

impl FieldError {
    fn required(path: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            value: None,
            detail: detail.into(),
        }
    }

    fn invalid(path: impl Into<String>, value: String, detail: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            value: Some(value),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            None => write!(f, "{}: Required value: {}", self.path, self.detail),
            Some(v) => write!(f, "{}: Invalid value: {v}: {}", self.path, self.detail),
        }
    }
}

/// Upstream's `ToAggregate`: one error alone, several as `[a, b]`.
fn aggregate(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// Go's `%#v` of a `[]string`, as upstream prints an invalid resource list.
fn string_list(items: &[String]) -> String {
    format!(
        "[]string{{{}}}",
        items
            .iter()
            .map(|s| quoted(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Go's `base64.StdEncoding`, which skips line breaks.
fn decode_secret(secret: &str) -> Option<Vec<u8>> {
    let compact: String = secret
        .chars()
        .filter(|c| *c != '\r' && *c != '\n')
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}

impl EncryptionConfiguration {
    /// Decodes a file's content: JSON when it starts with `{`, YAML otherwise.
    pub fn parse(data: &[u8]) -> Result<EncryptionConfiguration, ConfigError> {
        let text = std::str::from_utf8(data)
            .map_err(|e| ConfigError::Decode(format!("not UTF-8: {e}")))?;
        let config: EncryptionConfiguration = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| ConfigError::Decode(e.to_string()))?
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Decode(e.to_string()))?
        };
        if config.api_version != API_VERSION || config.kind != KIND {
            return Err(ConfigError::Decode(format!(
                "expected apiVersion {API_VERSION:?} and kind {KIND:?}, got {:?} and {:?}",
                config.api_version, config.kind
            )));
        }
        Ok(config)
    }

    /// Upstream's `ValidateEncryptionConfiguration` (without reload).
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.resources.is_empty() {
            errs.push(FieldError::required(
                "resources",
                "at least one resources is required",
            ));
            return errs;
        }
        let mut kms_names = Vec::new();
        for (i, conf) in self.resources.iter().enumerate() {
            let r = format!("resources[{i}].resources");
            let p = format!("resources[{i}].providers");
            if conf.resources.is_empty() {
                errs.push(FieldError::required(
                    &r,
                    format!("at least one {r} is required"),
                ));
            }
            validate_overlap(&conf.resources, &r, &mut errs);
            validate_names(&conf.resources, &r, &mut errs);
            if conf.providers.is_empty() {
                errs.push(FieldError::required(
                    &p,
                    format!("at least one {p} is required"),
                ));
            }
            for (j, provider) in conf.providers.iter().enumerate() {
                let path = format!("{p}[{j}]");
                validate_single(provider, &path, &mut errs);
                if let Some(kms) = &provider.kms {
                    validate_kms(kms, &format!("{path}.kms"), &mut kms_names, &mut errs);
                } else if let Some(aes) = &provider.aesgcm {
                    validate_keys(
                        &aes.keys,
                        &format!("{path}.aesgcm.keys"),
                        AES_KEY_SIZES,
                        &mut errs,
                    );
                } else if let Some(aes) = &provider.aescbc {
                    validate_keys(
                        &aes.keys,
                        &format!("{path}.aescbc.keys"),
                        AES_KEY_SIZES,
                        &mut errs,
                    );
                } else if let Some(sb) = &provider.secretbox {
                    validate_keys(
                        &sb.keys,
                        &format!("{path}.secretbox.keys"),
                        SECRETBOX_KEY_SIZES,
                        &mut errs,
                    );
                }
            }
        }
        errs
    }

    /// What upstream accepts but is likely a mistake: a key name used twice in one
    /// provider (reads try both, writes use the first) and `identity` listed twice.
    fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (i, conf) in self.resources.iter().enumerate() {
            let mut identities = 0;
            for (j, provider) in conf.providers.iter().enumerate() {
                if provider.identity.is_some() {
                    identities += 1;
                    if identities == 2 {
                        warnings.push(format!(
                            "resources[{i}].providers[{j}]: identity is listed more than once"
                        ));
                    }
                }
                let keyed = [
                    ("aesgcm", provider.aesgcm.as_ref().map(|a| &a.keys)),
                    ("aescbc", provider.aescbc.as_ref().map(|a| &a.keys)),
                    ("secretbox", provider.secretbox.as_ref().map(|s| &s.keys)),
                ];
                for (kind, keys) in keyed {
                    let Some(keys) = keys else { continue };
                    for (k, key) in keys.iter().enumerate() {
                        if keys[..k].iter().any(|earlier| earlier.name == key.name) {
                            warnings.push(format!(
                                "resources[{i}].providers[{j}].{kind}.keys[{k}].name: key name {:?} is used more than once",
                                key.name
                            ));
                        }
                    }
                }
            }
        }
        warnings
    }
}

fn validate_overlap(resources: &[String], path: &str, errs: &mut Vec<FieldError>) {
    if resources.len() < 2 {
        return;
    }
    let parsed: Vec<GroupResource> = resources.iter().map(|r| GroupResource::parse(r)).collect();
    let (mut duplicate, mut overlap) = (false, false);
    for (i, a) in parsed.iter().enumerate() {
        for (j, b) in parsed.iter().enumerate() {
            if i == j {
                continue;
            }
            // Only the first repeat is taken as a duplicate (upstream's loop): a second
            // one of a wildcard also reports the overlap.
            if a == b && !duplicate {
                duplicate = true;
                continue;
            }
            if (a.group == "*" && a.resource == "*")
                || (a.group == b.group && (a.resource == "*" || b.resource == "*"))
            {
                overlap = true;
            }
        }
    }
    if duplicate {
        errs.push(FieldError::invalid(
            path,
            string_list(resources),
            "the same resource cannot be specified multiple times",
        ));
    }
    if overlap {
        errs.push(FieldError::invalid(
            path,
            string_list(resources),
            "using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked",
        ));
    }
}

fn validate_names(resources: &[String], path: &str, errs: &mut Vec<FieldError>) {
    for (j, res) in resources.iter().enumerate() {
        let at = format!("{path}[{j}]");
        let gr = GroupResource::parse(res);
        let detail = if res.to_lowercase() != *res {
            "resource name should not contain capital letters"
        } else if res == "*" {
            "use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"
        } else if matches!(
            res.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            "resources which do not have REST API/s cannot be encrypted"
        } else if gr.group == "events.k8s.io" {
            "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file"
        } else if gr.group == "extensions" {
            "'extensions' group has been removed and cannot be used for encryption"
        } else if gr.group == "*" && gr.resource != "*" {
            "encrypting the same resource across groups is not supported"
        } else {
            continue;
        };
        errs.push(FieldError::invalid(at, quoted(res), detail));
    }
}

fn validate_single(provider: &ProviderConfiguration, path: &str, errs: &mut Vec<FieldError>) {
    let found = [
        provider.kms.is_some(),
        provider.aesgcm.is_some(),
        provider.aescbc.is_some(),
        provider.secretbox.is_some(),
        provider.identity.is_some(),
    ]
    .iter()
    .filter(|set| **set)
    .count();
    let detail = match found {
        0 => {
            "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"
        }
        1 => return,
        _ => {
            "more than one provider specified in a single element, should split into different list elements"
        }
    };
    errs.push(FieldError::invalid(path, "{...}".to_string(), detail));
}

fn validate_keys(keys: &[Key], path: &str, sizes: &[usize], errs: &mut Vec<FieldError>) {
    if keys.is_empty() {
        errs.push(FieldError::required(path, "at least one keys is required"));
        return;
    }
    for (i, key) in keys.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if key.name.is_empty() {
            errs.push(FieldError::required(
                format!("{at}.name"),
                "name is a mandatory field for a key",
            ));
        }
        if key.secret.is_empty() {
            errs.push(FieldError::required(
                format!("{at}.secret"),
                "secret is a mandatory field for a key",
            ));
            continue;
        }
        // Never echo key material: upstream prints REDACTED as the value.
        let redacted = || quoted("REDACTED");
        match decode_secret(&key.secret) {
            None => errs.push(FieldError::invalid(
                format!("{at}.secret"),
                redacted(),
                "secrets must be base64 encoded",
            )),
            Some(secret) if !sizes.contains(&secret.len()) => errs.push(FieldError::invalid(
                format!("{at}.secret"),
                redacted(),
                format!(
                    "secret is not of the expected length, got {}, expected one of {}",
                    secret.len(),
                    go_int_list(sizes)
                ),
            )),
            Some(_) => {}
        }
    }
}

/// Go's `%v` of an `[]int`: `[16 24 32]`.
fn go_int_list(items: &[usize]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// A validated configuration, compiled: the providers with their keys and which keys
/// each rule covers. Holds key material; its `Debug` shows key names only.
#[derive(Debug)]
pub struct Encryption {
    pub(crate) resolver: Resolver,
    warnings: Vec<String>,
    kms: Vec<Arc<KmsV2>>,
    pub(crate) metrics: Arc<EncryptionMetrics>,
}

impl Encryption {
    /// Reads, decodes, validates and compiles the file of `--encryption-provider-config`,
    /// recording into `metrics`.
    pub fn load(path: &Path, metrics: Arc<EncryptionMetrics>) -> Result<Encryption, ConfigError> {
        let data = std::fs::read(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Encryption::from_file_content(path, &data, metrics)
    }

    /// [`Encryption::load`] of a file already read (`data`, from `path`).
    pub fn from_file_content(
        path: &Path,
        data: &[u8],
        metrics: Arc<EncryptionMetrics>,
    ) -> Result<Encryption, ConfigError> {
        if data.is_empty() {
            return Err(ConfigError::Empty(path.display().to_string()));
        }
        Encryption::with_metrics(&EncryptionConfiguration::parse(data)?, metrics)
    }

    /// Validates and compiles a decoded configuration, with metrics of its own.
    pub fn new(config: &EncryptionConfiguration) -> Result<Encryption, ConfigError> {
        Encryption::with_metrics(config, Arc::default())
    }

    /// Validates and compiles a decoded configuration that records into `metrics`.
    pub fn with_metrics(
        config: &EncryptionConfiguration,
        metrics: Arc<EncryptionMetrics>,
    ) -> Result<Encryption, ConfigError> {
        let errs = config.validate();
        if !errs.is_empty() {
            return Err(ConfigError::Invalid(aggregate(&errs)));
        }
        let mut entries = Vec::with_capacity(config.resources.len());
        let mut kms = Vec::new();
        for conf in &config.resources {
            let providers = conf
                .providers
                .iter()
                .map(|provider| build_provider(provider, &metrics))
                .collect::<Result<Vec<_>, _>>()
                .map_err(ConfigError::Build)?;
            kms.extend(providers.iter().filter_map(|p| match p.as_ref() {
                Provider::KmsV2(k) => Some(k.clone()),
                _ => None,
            }));
            let resources = conf
                .resources
                .iter()
                .map(|r| GroupResource::parse(r))
                .collect();
            entries.push((resources, providers));
        }
        let rules = Rules::build(entries).map_err(ConfigError::Build)?;
        Ok(Encryption {
            resolver: Resolver::new(rules),
            warnings: config.warnings(),
            kms,
            metrics,
        })
    }

    /// Starts the KMS v2 providers: each connects to its plugin, asks it once for its
    /// status and a seed (a plugin that does not answer is logged and retried in the
    /// background; until it answers, that provider fails reads and writes), and then
    /// polls it for as long as this configuration lives. Call it once, in a Tokio
    /// runtime, before the storage serves requests.
    pub async fn start_kms(&self, timings: KmsTimings) {
        for kms in &self.kms {
            kms.start(timings).await;
        }
    }

    /// The KMS providers' call timeouts added up (upstream's `kmsTimeoutSum`).
    pub(crate) fn kms_timeout_sum(&self) -> Duration {
        self.kms.iter().map(|k| k.timeout()).sum()
    }

    /// One receiver per KMS provider, changed when its plugin becomes healthy.
    pub(crate) fn kms_recoveries(&self) -> Vec<tokio::sync::watch::Receiver<u64>> {
        self.kms.iter().map(|k| k.recoveries()).collect()
    }

    /// The `kms-providers` health check, when any provider is KMS v2.
    pub fn kms_health(&self) -> Option<KmsHealth> {
        KmsHealth::new(self.kms.clone())
    }

    /// What its transformations and KMS plugins record into.
    pub fn metrics(&self) -> &Arc<EncryptionMetrics> {
        &self.metrics
    }

    /// Accepted oddities worth a log line at start (see upstream's leniency above).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

fn build_provider(
    provider: &ProviderConfiguration,
    metrics: &Arc<EncryptionMetrics>,
) -> Result<Arc<Provider>, String> {
    let (kind, keys) = if let Some(aes) = &provider.aesgcm {
        (Kind::AesGcm, &aes.keys)
    } else if let Some(aes) = &provider.aescbc {
        (Kind::AesCbc, &aes.keys)
    } else if let Some(sb) = &provider.secretbox {
        (Kind::Secretbox, &sb.keys)
    } else if provider.identity.is_some() {
        return Ok(Arc::new(Provider::Identity));
    } else if let Some(kms) = &provider.kms {
        if kms.api_version() != "v2" {
            return Err(format!(
                "could not configure KMS plugin {:?}: KMSv1 is deprecated and will only receive security updates going forward. Use KMSv2 instead. Ferrokube implements KMSv2 only",
                kms.name
            ));
        }
        let timeout = kms
            .timeout_nanos()
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .map_or(KMS_DEFAULT_TIMEOUT, Duration::from_nanos);
        return Ok(Arc::new(Provider::KmsV2(Arc::new(KmsV2::new(
            &kms.name,
            &kms.endpoint,
            timeout,
            metrics.clone(),
        )))));
    } else {
        return Err(
            "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"
                .to_string(),
        );
    };
    let decoded = keys
        .iter()
        .map(|k| {
            decode_secret(&k.secret)
                .map(|secret| (k.name.clone(), secret))
                .ok_or_else(|| format!("could not obtain secret for named key {}", k.name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Provider::keyed(kind, &decoded).map(Arc::new)
}
