//! Upstream's encryption-at-rest metrics: every transformation
//! (`apiserver_storage_transformation_*`), the KMS v2 data keys and plugin calls
//! (`apiserver_storage_*`, `apiserver_envelope_encryption_*`), with upstream's names,
//! labels, buckets and help texts.
//!
//! One [`EncryptionMetrics`] lives for the whole process and is handed to every
//! configuration built, so that counts go on across automatic reloads; the apiserver
//! binary renders it on `/metrics`.

use std::collections::VecDeque;
use std::time::Duration;

use ferrokube_component_base::metrics::{
    Collector, CounterVec, GaugeVec, HistogramVec, exponential_buckets, unix_now,
};
use parking_lot::Mutex;

/// In-process transformations take microseconds; a KMS call can take hundreds of
/// milliseconds (upstream's comment and buckets).
const TRANSFORMATION_BUCKETS: [f64; 25] = exponential_buckets(5e-6, 2.0);
const DATA_KEY_GENERATION_BUCKETS: [f64; 14] = exponential_buckets(5e-6, 2.0);
/// From 0.1 ms; the last bucket is [~52 s, +Inf).
const KMS_OPERATION_BUCKETS: [f64; 20] = exponential_buckets(0.0001, 2.0);

/// How many key ID label sets each key ID family keeps (upstream's LRU size): key IDs
/// rotate, and an old one's series must not stay for ever.
const KEY_ID_SERIES: usize = 100;

/// Upstream's `status` label of a transformation that failed before any gRPC call.
pub(crate) const NOT_GRPC: &str = "unknown-non-grpc";
pub(crate) const OK: &str = "OK";

/// Which way a value went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    FromStorage,
    ToStorage,
}

impl Direction {
    fn label(self) -> &'static str {
        match self {
            Direction::FromStorage => "from_storage",
            Direction::ToStorage => "to_storage",
        }
    }
}

/// The most recently used label sets of a key ID family, oldest first.
struct RecentLabels<const N: usize> {
    order: VecDeque<[String; N]>,
}

impl<const N: usize> RecentLabels<N> {
    /// Marks `labels` as used; the label set that fell out of the window, if any.
    fn touch(&mut self, labels: [&str; N]) -> Option<[String; N]> {
        if let Some(i) = self
            .order
            .iter()
            .position(|l| l.iter().map(String::as_str).eq(labels))
        {
            let used = self.order.remove(i).expect("found above");
            self.order.push_back(used);
            return None;
        }
        self.order.push_back(labels.map(str::to_string));
        (self.order.len() > KEY_ID_SERIES)
            .then(|| self.order.pop_front())
            .flatten()
    }
}

fn as_strs<const N: usize>(labels: &[String; N]) -> [&str; N] {
    std::array::from_fn(|i| labels[i].as_str())
}

/// The encryption metrics of one apiserver.
pub struct EncryptionMetrics {
    apiserver_id_hash: String,
    transformation_duration: HistogramVec<2>,
    transformation_operations: CounterVec<3>,
    cache_misses: CounterVec<0>,
    data_key_generation_duration: HistogramVec<0>,
    data_key_generation_failures: CounterVec<0>,
    kms_operations_latency: HistogramVec<3>,
    key_id_hash_total: CounterVec<4>,
    key_id_hash_last_timestamp: GaugeVec<4>,
    key_id_hash_status_last_timestamp: GaugeVec<3>,
    invalid_key_id_from_status: CounterVec<2>,
    dek_source_cache_size: GaugeVec<1>,
    used_key_ids: Mutex<RecentLabels<4>>,
    status_key_ids: Mutex<RecentLabels<3>>,
}

impl std::fmt::Debug for EncryptionMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptionMetrics").finish_non_exhaustive()
    }
}

impl Default for EncryptionMetrics {
    /// Metrics of no particular apiserver (an empty `apiserver_id_hash`, as upstream's
    /// hash of an empty identity).
    fn default() -> Self {
        EncryptionMetrics::new("")
    }
}

impl EncryptionMetrics {
    /// Metrics of the apiserver whose identity is `apiserver_id` (upstream's
    /// `apiserver-<uuid>`; the labels carry its SHA-256, not the identity).
    pub fn new(apiserver_id: &str) -> Self {
        const KEY_ID_LABELS: [&str; 4] = [
            "transformation_type",
            "provider_name",
            "key_id_hash",
            "apiserver_id_hash",
        ];
        EncryptionMetrics {
            apiserver_id_hash: sha256_label(apiserver_id),
            transformation_duration: HistogramVec::histogram(
                "apiserver_storage_transformation_duration_seconds",
                "[ALPHA] Latencies in seconds of value transformation operations.",
                ["transformation_type", "transformer_prefix"],
                &TRANSFORMATION_BUCKETS,
            ),
            transformation_operations: CounterVec::new(
                "apiserver_storage_transformation_operations_total",
                "[ALPHA] Total number of transformations.",
                ["transformation_type", "transformer_prefix", "status"],
            ),
            cache_misses: CounterVec::new(
                "apiserver_storage_envelope_transformation_cache_misses_total",
                "[ALPHA] Total number of cache misses while accessing key decryption key(KEK).",
                [],
            ),
            data_key_generation_duration: HistogramVec::histogram(
                "apiserver_storage_data_key_generation_duration_seconds",
                "[ALPHA] Latencies in seconds of data encryption key(DEK) generation operations.",
                [],
                &DATA_KEY_GENERATION_BUCKETS,
            ),
            data_key_generation_failures: CounterVec::new(
                "apiserver_storage_data_key_generation_failures_total",
                "[ALPHA] Total number of failed data encryption key(DEK) generation operations.",
                [],
            ),
            kms_operations_latency: HistogramVec::histogram(
                "apiserver_envelope_encryption_kms_operations_latency_seconds",
                "[ALPHA] KMS operation duration with gRPC error code status total.",
                ["provider_name", "method_name", "grpc_status_code"],
                &KMS_OPERATION_BUCKETS,
            ),
            key_id_hash_total: CounterVec::new(
                "apiserver_envelope_encryption_key_id_hash_total",
                "[ALPHA] Number of times a keyID is used split by transformation type, provider, and apiserver identity.",
                KEY_ID_LABELS,
            ),
            key_id_hash_last_timestamp: GaugeVec::new(
                "apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds",
                "[ALPHA] The last time in seconds when a keyID was used.",
                KEY_ID_LABELS,
            ),
            key_id_hash_status_last_timestamp: GaugeVec::new(
                "apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds",
                "[ALPHA] The last time in seconds when a keyID was returned by the Status RPC call.",
                ["provider_name", "key_id_hash", "apiserver_id_hash"],
            ),
            invalid_key_id_from_status: CounterVec::new(
                "apiserver_envelope_encryption_invalid_key_id_from_status_total",
                "[ALPHA] Number of times an invalid keyID is returned by the Status RPC call split by error.",
                ["provider_name", "error"],
            ),
            dek_source_cache_size: GaugeVec::new(
                "apiserver_envelope_encryption_dek_source_cache_size",
                "[ALPHA] Number of records in data encryption key (DEK) source cache. On a restart, this value is an approximation of the number of decrypt RPC calls the server will make to the KMS plugin.",
                ["provider_name"],
            ),
            used_key_ids: Mutex::new(RecentLabels {
                order: VecDeque::new(),
            }),
            status_key_ids: Mutex::new(RecentLabels {
                order: VecDeque::new(),
            }),
        }
    }

    /// Upstream's `RecordTransformation`: every transformation is counted by its
    /// outcome, and timed when it succeeded. `prefix` is the transformer's (a
    /// provider's, or within an AES or secretbox provider a key's `<name>:`).
    pub(crate) fn transformation(
        &self,
        direction: Direction,
        prefix: &str,
        took: Duration,
        status: &str,
    ) {
        let direction = direction.label();
        self.transformation_operations
            .inc([direction, prefix, status]);
        if status == OK {
            self.transformation_duration
                .observe([direction, prefix], took.as_secs_f64());
        }
    }

    /// A read needed the KMS plugin to decrypt its seed.
    pub(crate) fn cache_miss(&self) {
        self.cache_misses.inc([]);
    }

    /// A new seed was made and encrypted by the plugin (`Some(took)`) or not.
    pub(crate) fn data_key_generated(&self, took: Option<Duration>) {
        match took {
            Some(took) => self
                .data_key_generation_duration
                .observe([], took.as_secs_f64()),
            None => self.data_key_generation_failures.inc([]),
        }
    }

    /// One gRPC call to a KMS plugin: `method` is the full method name, `code` the
    /// status code's Go name.
    pub(crate) fn kms_call(&self, provider: &str, method: &str, took: Duration, code: &str) {
        self.kms_operations_latency
            .observe([provider, method, code], took.as_secs_f64());
    }

    /// A value was sealed or opened under the key ID whose hash is `key_id_hash`.
    pub(crate) fn key_id_used(&self, direction: Direction, provider: &str, key_id_hash: &str) {
        let labels = [
            direction.label(),
            provider,
            key_id_hash,
            self.apiserver_id_hash.as_str(),
        ];
        let mut recent = self.used_key_ids.lock();
        if let Some(old) = recent.touch(labels) {
            self.key_id_hash_total.remove(as_strs(&old));
            self.key_id_hash_last_timestamp.remove(as_strs(&old));
        }
        self.key_id_hash_total.inc(labels);
        self.key_id_hash_last_timestamp.set(labels, unix_now());
    }

    /// The plugin's status named a valid key ID.
    pub(crate) fn key_id_from_status(&self, provider: &str, key_id_hash: &str) {
        let labels = [provider, key_id_hash, self.apiserver_id_hash.as_str()];
        let mut recent = self.status_key_ids.lock();
        if let Some(old) = recent.touch(labels) {
            self.key_id_hash_status_last_timestamp.remove(as_strs(&old));
        }
        self.key_id_hash_status_last_timestamp
            .set(labels, unix_now());
    }

    /// The plugin's status named an invalid key ID (`error`: upstream's code, `empty`
    /// or `too_long`).
    pub(crate) fn invalid_key_id_from_status(&self, provider: &str, error: &str) {
        self.invalid_key_id_from_status.inc([provider, error]);
    }

    /// How many decrypted seeds `provider` holds.
    pub(crate) fn dek_source_cache_size(&self, provider: &str, size: usize) {
        self.dek_source_cache_size.set([provider], size as f64);
    }

    /// `transformer_prefix`, `status` → count (tests).
    #[cfg(test)]
    pub(crate) fn transformations(&self, direction: Direction, prefix: &str, status: &str) -> u64 {
        self.transformation_operations
            .value([direction.label(), prefix, status])
    }
}

impl Collector for EncryptionMetrics {
    fn collect(&self, out: &mut String) {
        self.transformation_duration.render(out);
        self.transformation_operations.render(out);
        self.cache_misses.render(out);
        self.data_key_generation_duration.render(out);
        self.data_key_generation_failures.render(out);
        self.kms_operations_latency.render(out);
        self.key_id_hash_total.render(out);
        self.key_id_hash_last_timestamp.render(out);
        self.key_id_hash_status_last_timestamp.render(out);
        self.invalid_key_id_from_status.render(out);
        self.dek_source_cache_size.render(out);
    }
}

/// Upstream's `getHash`: `sha256:<hex>` of a non-empty value, and empty for an empty
/// one. Key IDs and the apiserver's identity are labelled hashed.
pub(crate) fn sha256_label(value: &str) -> String {
    if value.is_empty() {
        return String::new();
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Go's name of a gRPC status code (`codes.Code.String()`), as upstream's labels and
/// error texts carry it.
pub(crate) fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(m: &EncryptionMetrics) -> String {
        let mut out = String::new();
        m.collect(&mut out);
        out
    }

    #[test]
    fn transformations_are_counted_by_outcome_and_timed_when_they_succeed() {
        let m = EncryptionMetrics::default();
        let prefix = "k8s:enc:aesgcm:v1:";
        m.transformation(Direction::ToStorage, prefix, Duration::from_micros(20), OK);
        m.transformation(Direction::FromStorage, "unknown", Duration::ZERO, NOT_GRPC);
        let text = page(&m);
        for line in [
            "apiserver_storage_transformation_operations_total{transformation_type=\"to_storage\",transformer_prefix=\"k8s:enc:aesgcm:v1:\",status=\"OK\"} 1",
            "apiserver_storage_transformation_operations_total{transformation_type=\"from_storage\",transformer_prefix=\"unknown\",status=\"unknown-non-grpc\"} 1",
            "apiserver_storage_transformation_duration_seconds_bucket{transformation_type=\"to_storage\",transformer_prefix=\"k8s:enc:aesgcm:v1:\",le=\"0.00002\"} 1",
            "apiserver_storage_transformation_duration_seconds_bucket{transformation_type=\"to_storage\",transformer_prefix=\"k8s:enc:aesgcm:v1:\",le=\"0.00001\"} 0",
            // Label-less metrics show from the start, as upstream's.
            "apiserver_storage_envelope_transformation_cache_misses_total 0",
            "apiserver_storage_data_key_generation_failures_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("transformer_prefix=\"unknown\",le="),
            "failures are not timed"
        );
    }

    #[test]
    fn key_ids_are_labelled_hashed_with_the_apiserver_identity() {
        let m = EncryptionMetrics::new("apiserver-1");
        let key_id_hash = sha256_label("key-1");
        m.key_id_used(Direction::ToStorage, "vault", &key_id_hash);
        m.key_id_used(Direction::ToStorage, "vault", &key_id_hash);
        m.key_id_from_status("vault", &key_id_hash);
        let text = page(&m);
        let id_hash = sha256_label("apiserver-1");
        assert!(text.contains(&format!(
            "apiserver_envelope_encryption_key_id_hash_total{{transformation_type=\"to_storage\",provider_name=\"vault\",key_id_hash=\"{key_id_hash}\",apiserver_id_hash=\"{id_hash}\"}} 2"
        )), "{text}");
        assert!(text.contains(&format!(
            "apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds{{provider_name=\"vault\",key_id_hash=\"{key_id_hash}\",apiserver_id_hash=\"{id_hash}\"}} "
        )));
        assert_eq!(sha256_label(""), "");
        assert_eq!(
            sha256_label("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn only_the_last_hundred_key_id_label_sets_are_kept() {
        let m = EncryptionMetrics::default();
        for i in 0..=KEY_ID_SERIES {
            m.key_id_used(Direction::FromStorage, "vault", &format!("k{i}"));
            if i == 50 {
                // Used again: it becomes the newest, and k1 the oldest after k0.
                m.key_id_used(Direction::FromStorage, "vault", "k0");
            }
        }
        let counted = |k: &str| m.key_id_hash_total.value(["from_storage", "vault", k, ""]);
        assert_eq!((counted("k0"), counted("k1"), counted("k100")), (2, 0, 1));
        assert_eq!(m.key_id_hash_total.snapshot().len(), KEY_ID_SERIES);
        assert_eq!(m.key_id_hash_last_timestamp.snapshot().len(), KEY_ID_SERIES);
    }

    #[test]
    fn grpc_codes_have_gos_names() {
        assert_eq!(grpc_code_name(tonic::Code::Ok), "OK");
        assert_eq!(grpc_code_name(tonic::Code::Cancelled), "Canceled");
        assert_eq!(grpc_code_name(tonic::Code::Unavailable), "Unavailable");
    }
}
