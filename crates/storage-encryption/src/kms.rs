//! The `kms` provider, API version v2: upstream's envelope encryption through an
//! external KMS plugin (`k8s.io/apiserver/.../envelope/kmsv2`).
//!
//! The apiserver makes a random 32-byte seed and has the plugin encrypt it once (the
//! key encryption key never leaves the plugin). Every write derives a fresh AES-256
//! key from the seed, HKDF-SHA256-Expand(seed, info) with 32 random bytes of info,
//! and seals the value with AES-GCM (random nonce, the etcd key as authenticated
//! data). The stored value is `k8s:enc:kms:v2:<name>:` and a protobuf
//! `EncryptedObject`: the info, nonce and ciphertext; the plugin's key ID; the
//! encrypted seed; the plugin's annotations.
//!
//! Reads look the encrypted seed (or, for data written with upstream's older
//! `AES_GCM_KEY` scheme, the encrypted key) up in a cache and ask the plugin to
//! decrypt it only on a miss; that call is the only asynchronous step, so the
//! provider itself stays synchronous and a miss is handed back as a [`DekRequest`]
//! that the storage decorator runs and retries.
//!
//! The plugin is polled (upstream's intervals: every minute while healthy, every ten
//! seconds while not). When its key ID changes, a new seed is made and encrypted;
//! data under the old key ID reads as stale, so rewriting it moves it to the new key.
//! A write seed is valid for three minutes after the last good poll: a plugin that
//! stays down fails writes after that, never reads of cached seeds.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use hyper_util::rt::TokioIo;
use prost::Message as _;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::metrics::{Direction, EncryptionMetrics, grpc_code_name, sha256_label};
use crate::providers::{GcmKey, Location, ReadError, TransformError, gcm_open, gcm_seal, random};

pub(crate) mod proto {
    tonic::include_proto!("v2");
}

use proto::EncryptedDekSourceType as SourceType;
use proto::key_management_service_client::KeyManagementServiceClient;

pub(crate) const KMS_V2_PREFIX: &str = "k8s:enc:kms:v2:";
/// Upstream's `commonSize`: seed, info and derived key.
const SEED_SIZE: usize = 32;
const INFO_SIZE: usize = 32;
const KEY_ID_MAX: usize = 1024;
const DEK_SOURCE_MAX: usize = 1024;
const ANNOTATIONS_MAX: usize = 32 * 1024;
/// How long a decrypted seed stays cached after its last use (upstream's `cacheTTL`).
const DEK_CACHE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Health check name when every KMS provider is v2 (upstream's `kmsReloadHealthCheckName`).
pub const KMS_HEALTH_CHECK: &str = "kms-providers";

/// The plugin's polling and the write seed's lifetime. The defaults are upstream's
/// (fixed there); tests shorten them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmsTimings {
    /// Between polls while the plugin is healthy.
    pub healthy_poll: Duration,
    /// Between polls while it is not.
    pub unhealthy_poll: Duration,
    /// How long after the last good poll writes may use the seed.
    pub write_seed_ttl: Duration,
    /// How long a health check's answer is reused, after a success and a failure.
    pub healthy_answer_ttl: Duration,
    pub unhealthy_answer_ttl: Duration,
}

impl Default for KmsTimings {
    fn default() -> Self {
        KmsTimings {
            healthy_poll: Duration::from_secs(60),
            unhealthy_poll: Duration::from_secs(10),
            write_seed_ttl: Duration::from_secs(180),
            healthy_answer_ttl: Duration::from_secs(20),
            unhealthy_answer_ttl: Duration::from_secs(3),
        }
    }
}

/// A data encryption key, or the seed keys are derived from.
enum Dek {
    Seed(Vec<u8>),
    Key(GcmKey),
}

/// HKDF-SHA256 with the seed as the pseudo-random key and no extract step
/// (upstream's `sha256KDFExpandOnly`), 32 bytes: an AES-256 key.
fn derive_key(seed: &[u8], info: &[u8]) -> Result<GcmKey, TransformError> {
    struct Len32;
    impl ring::hkdf::KeyType for Len32 {
        fn len(&self) -> usize {
            32
        }
    }
    let prk = ring::hkdf::Prk::new_less_safe(ring::hkdf::HKDF_SHA256, seed);
    let mut key = [0u8; 32];
    prk.expand(&[info], Len32)
        .and_then(|okm| okm.fill(&mut key))
        .map_err(|_| TransformError::new("failed to KDF expand seed with info"))?;
    GcmKey::new(&key).map_err(TransformError::new)
}

impl Dek {
    fn seal(&self, plain: &[u8], location: Location<'_>) -> Result<Vec<u8>, TransformError> {
        match self {
            Dek::Seed(seed) => {
                let info = random::<INFO_SIZE>()?;
                let key = derive_key(seed, &info)?;
                Ok([&info[..], &gcm_seal(&key, plain, location)?].concat())
            }
            Dek::Key(key) => gcm_seal(key, plain, location),
        }
    }

    fn open(&self, data: &[u8], location: Location<'_>) -> Result<Vec<u8>, TransformError> {
        match self {
            Dek::Seed(seed) => {
                if data.len() < INFO_SIZE {
                    return Err(TransformError::short());
                }
                let (info, rest) = data.split_at(INFO_SIZE);
                gcm_open(&derive_key(seed, info)?, rest, location)
            }
            Dek::Key(key) => gcm_open(key, data, location),
        }
    }
}

/// Decrypted seeds and keys by upstream's cache key, with their last use.
type DekCache = HashMap<Vec<u8>, (Arc<Dek>, Instant)>;

/// What writes use: the current seed and the fields every value it seals carries.
struct WriteState {
    seed: Arc<Dek>,
    key_id: String,
    /// Its hash, as logs and metrics show key IDs.
    key_id_hash: String,
    encrypted_seed: Vec<u8>,
    annotations: HashMap<String, Vec<u8>>,
    expires: SystemTime,
}

/// The last health check's answer, reused for a while as upstream's probe does.
struct Probe {
    answered: Option<Instant>,
    reuse_for: Duration,
    answer: Result<(), String>,
    /// The API version of the plugin's first good status; it may not change.
    version: Option<String>,
}

/// One configured `kms` provider of API version v2.
pub(crate) struct KmsV2 {
    name: String,
    prefix: Vec<u8>,
    /// `prefix` as text: the `transformer_prefix` label.
    label: String,
    metrics: Arc<EncryptionMetrics>,
    endpoint: String,
    timeout: Duration,
    client: OnceLock<KeyManagementServiceClient<Channel>>,
    timings: OnceLock<KmsTimings>,
    write: RwLock<Option<Arc<WriteState>>>,
    deks: Mutex<DekCache>,
    probe: tokio::sync::Mutex<Probe>,
    /// Counts the checks that passed after a failure (or first): values this provider
    /// could not read before may be readable now.
    recoveries: tokio::sync::watch::Sender<u64>,
    /// A seed could not be decrypted since the last check: the next check that
    /// passes counts as a recovery too.
    fetch_failed: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for KmsV2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("kms")
            .field("apiVersion", &"v2")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// Go's gRPC error text, as upstream's messages embed it.
fn grpc_error(status: &tonic::Status) -> String {
    format!(
        "rpc error: code = {} desc = {}",
        grpc_code_name(status.code()),
        status.message()
    )
}

/// Upstream's `GetHashIfNotEmpty`: key IDs are logged and reported hashed.
fn key_id_hash(key_id: &str) -> String {
    sha256_label(key_id)
}

/// The plugin API's full method names, as upstream's metrics label its calls.
const STATUS_METHOD: &str = "/v2.KeyManagementService/Status";
const ENCRYPT_METHOD: &str = "/v2.KeyManagementService/Encrypt";
const DECRYPT_METHOD: &str = "/v2.KeyManagementService/Decrypt";

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Upstream's `ValidateKeyID`; an error carries upstream's code (`empty`, `too_long`)
/// for `apiserver_envelope_encryption_invalid_key_id_from_status_total`.
fn validate_key_id(key_id: &str) -> Result<(), (&'static str, String)> {
    if key_id.is_empty() {
        return Err(("empty", "keyID is empty".into()));
    }
    if key_id.len() > KEY_ID_MAX {
        return Err((
            "too_long",
            format!(
                "keyID is {} bytes, which exceeds the max size of {KEY_ID_MAX}",
                key_id.len()
            ),
        ));
    }
    Ok(())
}

/// RFC 1123 subdomain rules, as upstream's `IsFullyQualifiedDomainName` (at least two
/// labels).
fn fully_qualified(name: &str) -> Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("Required value".into());
    }
    if name.split('.').count() < 2 {
        return Err(format!(
            "Invalid value: {name:?}: should be a domain with at least two segments separated by dots"
        ));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// Upstream's `ValidateEncryptedObject`, for what the plugin answers and what is read.
fn validate_object(object: &proto::EncryptedObject) -> Result<(), String> {
    if SourceType::try_from(object.encrypted_dek_source_type).is_err() {
        return Err(format!(
            "unknown encryptedDEKSourceType: {}",
            object.encrypted_dek_source_type
        ));
    }
    if object.encrypted_data.is_empty() {
        return Err("encrypted data is empty".into());
    }
    if object.encrypted_dek_source.is_empty() {
        return Err(
            "failed to validate encrypted DEK source: encrypted DEK source is empty".into(),
        );
    }
    if object.encrypted_dek_source.len() > DEK_SOURCE_MAX {
        return Err(format!(
            "failed to validate encrypted DEK source: encrypted DEK source is {} bytes, which exceeds the max size of {DEK_SOURCE_MAX}",
            object.encrypted_dek_source.len()
        ));
    }
    validate_key_id(&object.key_id).map_err(|(_, e)| format!("failed to validate key id: {e}"))?;
    let mut errors = Vec::new();
    let mut total = 0;
    let mut keys: Vec<&String> = object.annotations.keys().collect();
    keys.sort();
    for key in keys {
        if let Err(e) = fully_qualified(key) {
            errors.push(format!("annotations: {e}"));
        }
        total += key.len() + object.annotations[key].len();
    }
    if total > ANNOTATIONS_MAX {
        errors.push(format!(
            "total size of annotations is {total}, which exceeds the max size of {ANNOTATIONS_MAX}"
        ));
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(format!("failed to validate annotations: {}", errors[0])),
        _ => Err(format!(
            "failed to validate annotations: [{}]",
            errors.join(", ")
        )),
    }
}

/// Upstream's cache key: what identifies one encrypted seed or key (source type,
/// ciphertext, key ID and annotations, length-prefixed).
fn cache_key(object: &proto::EncryptedObject) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + object.encrypted_dek_source.len() + object.key_id.len());
    let mut add = |bytes: &[u8]| {
        key.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        key.extend_from_slice(bytes);
    };
    add(&object.encrypted_dek_source_type.to_be_bytes());
    add(&object.encrypted_dek_source);
    add(object.key_id.as_bytes());
    let mut annotations: Vec<_> = object.annotations.iter().collect();
    annotations.sort();
    for (k, v) in annotations {
        add(k.as_bytes());
        add(v);
    }
    key
}

/// The socket path of a `unix://` endpoint (validation allows no other scheme); a
/// path starting with `@` is a Linux abstract socket, as upstream's `ParseEndpoint`.
fn socket_path(endpoint: &str) -> String {
    let rest = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    // `unix://host/path`: Go's URL parser takes `host` as the authority.
    let path = if rest.starts_with('/') {
        rest
    } else {
        rest.find('/').map_or("", |i| &rest[i..])
    };
    match path.strip_prefix("/@") {
        Some(abstract_name) => format!("@{abstract_name}"),
        None => path.to_string(),
    }
}

async fn dial(path: &str) -> std::io::Result<tokio::net::UnixStream> {
    if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt as _;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let stream = std::os::unix::net::UnixStream::connect_addr(&addr)?;
        stream.set_nonblocking(true)?;
        return tokio::net::UnixStream::from_std(stream);
    }
    tokio::net::UnixStream::connect(path).await
}

/// A read that needs the plugin: decrypting the seed (or key) a value was sealed with.
pub(crate) struct DekRequest {
    kms: Arc<KmsV2>,
    cache_key: Vec<u8>,
    object: proto::EncryptedObject,
}

impl fmt::Debug for DekRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DekRequest")
            .field("provider", &self.kms.name)
            .field("key_id_hash", &key_id_hash(&self.object.key_id))
            .finish()
    }
}

impl DekRequest {
    /// Has the plugin decrypt the seed and caches it.
    pub(crate) async fn fetch(self) -> Result<(), TransformError> {
        let mut client = self.kms.client()?;
        let request = proto::DecryptRequest {
            ciphertext: self.object.encrypted_dek_source.clone(),
            uid: uuid::Uuid::new_v4().to_string(),
            key_id: self.object.key_id.clone(),
            annotations: self.object.annotations.clone(),
        };
        let start = Instant::now();
        let plain = self
            .kms
            .timed(DECRYPT_METHOD, client.decrypt(request))
            .await
            .map_err(|s| {
                self.kms
                    .fetch_failed
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                // The read's transformation failed with the plugin's code, as upstream
                // counts a read whose decrypt call failed.
                self.kms.metrics.transformation(
                    Direction::FromStorage,
                    &self.kms.label,
                    start.elapsed(),
                    grpc_code_name(s.code()),
                );
                TransformError::new(format!("failed to decrypt DEK, error: {}", grpc_error(&s)))
            })?
            .plaintext;
        let dek = match SourceType::try_from(self.object.encrypted_dek_source_type) {
            Ok(SourceType::HkdfSha256XnonceAesGcmSeed) => {
                if plain.len() < SEED_SIZE {
                    return Err(TransformError::new(format!(
                        "invalid seed length {} used for key generation",
                        plain.len()
                    )));
                }
                Dek::Seed(plain)
            }
            _ => Dek::Key(GcmKey::new(&plain).map_err(TransformError::new)?),
        };
        self.kms.remember(self.cache_key, Arc::new(dek));
        Ok(())
    }
}

impl KmsV2 {
    pub(crate) fn new(
        name: &str,
        endpoint: &str,
        timeout: Duration,
        metrics: Arc<EncryptionMetrics>,
    ) -> KmsV2 {
        let label = format!("{KMS_V2_PREFIX}{name}:");
        KmsV2 {
            name: name.to_string(),
            prefix: label.clone().into_bytes(),
            label,
            metrics,
            endpoint: endpoint.to_string(),
            timeout,
            client: OnceLock::new(),
            timings: OnceLock::new(),
            write: RwLock::new(None),
            deks: Mutex::new(HashMap::new()),
            probe: tokio::sync::Mutex::new(Probe {
                answered: None,
                reuse_for: Duration::ZERO,
                answer: Ok(()),
                version: None,
            }),
            recoveries: tokio::sync::watch::Sender::new(0),
            fetch_failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.recoveries.subscribe()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// A call to the plugin, timed and counted by its outcome.
    async fn timed<T>(
        &self,
        method: &str,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        let start = Instant::now();
        let result = call.await;
        let code = match &result {
            Ok(_) => grpc_code_name(tonic::Code::Ok),
            Err(status) => grpc_code_name(status.code()),
        };
        self.metrics
            .kms_call(&self.name, method, start.elapsed(), code);
        result.map(tonic::Response::into_inner)
    }

    fn timings(&self) -> KmsTimings {
        self.timings.get().copied().unwrap_or_default()
    }

    fn client(&self) -> Result<KeyManagementServiceClient<Channel>, TransformError> {
        self.client.get().cloned().ok_or_else(|| {
            TransformError::new(format!("KMS provider {} is not started", self.name))
        })
    }

    fn remember(&self, cache_key: Vec<u8>, dek: Arc<Dek>) {
        let now = Instant::now();
        let mut deks = self.deks.lock().unwrap_or_else(|e| e.into_inner());
        deks.retain(|_, (_, used)| now.duration_since(*used) < DEK_CACHE_TTL);
        deks.insert(cache_key, (dek, now));
        self.metrics.dek_source_cache_size(&self.name, deks.len());
    }

    fn cached(&self, cache_key: &[u8]) -> Option<Arc<Dek>> {
        let mut deks = self.deks.lock().unwrap_or_else(|e| e.into_inner());
        let (dek, used) = deks.get_mut(cache_key)?;
        *used = Instant::now();
        Some(dek.clone())
    }

    fn write_state(&self) -> Option<Arc<WriteState>> {
        self.write.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The stored form of `plain` (after the provider's prefix), sealed with a key
    /// derived from the current seed.
    pub(crate) fn encrypt(
        &self,
        plain: &[u8],
        location: Location<'_>,
    ) -> Result<Vec<u8>, TransformError> {
        // Upstream's message for a provider whose plugin never answered.
        let state = self
            .write_state()
            .ok_or_else(|| TransformError::new("got unexpected nil transformer"))?;
        let now = SystemTime::now();
        if now > state.expires {
            return Err(TransformError::new(format!(
                "encryptedDEKSource with keyID hash {:?} expired at {} (current time is {})",
                key_id_hash(&state.key_id),
                rfc3339(state.expires),
                rfc3339(now)
            )));
        }
        let encrypted_data = state.seed.seal(plain, location)?;
        self.metrics
            .key_id_used(Direction::ToStorage, &self.name, &state.key_id_hash);
        let object = proto::EncryptedObject {
            encrypted_data,
            key_id: state.key_id.clone(),
            encrypted_dek_source: state.encrypted_seed.clone(),
            annotations: state.annotations.clone(),
            encrypted_dek_source_type: SourceType::HkdfSha256XnonceAesGcmSeed as i32,
        };
        Ok(object.encode_to_vec())
    }

    /// The plain form of `data` (after the provider's prefix) and whether it is stale
    /// (sealed under another key ID than the plugin's current one).
    pub(crate) fn decrypt(
        self: &Arc<Self>,
        data: &[u8],
        location: Location<'_>,
    ) -> Result<(Vec<u8>, bool), ReadError> {
        let object = proto::EncryptedObject::decode(data).map_err(|e| {
            TransformError::new(format!("proto: cannot parse invalid wire-format data: {e}"))
        })?;
        validate_object(&object).map_err(TransformError::new)?;
        // Upstream reads nothing until the plugin has answered once.
        let state = self
            .write_state()
            .ok_or_else(|| TransformError::new("got unexpected nil transformer"))?;
        let key = cache_key(&object);
        let Some(dek) = self.cached(&key) else {
            self.metrics.cache_miss();
            return Err(ReadError::MissingDek(Box::new(DekRequest {
                kms: self.clone(),
                cache_key: key,
                object: proto::EncryptedObject {
                    encrypted_data: Vec::new(),
                    ..object
                },
            })));
        };
        self.metrics.key_id_used(
            Direction::FromStorage,
            &self.name,
            &key_id_hash(&object.key_id),
        );
        let plain = dek.open(&object.encrypted_data, location)?;
        let stale = object.key_id != state.key_id
            || object.encrypted_dek_source_type != SourceType::HkdfSha256XnonceAesGcmSeed as i32;
        Ok((plain, stale))
    }

    /// Connects (lazily: a plugin that is not up yet is dialled again on each call),
    /// primes the seed with one health check, and polls in the background for as long
    /// as the provider lives.
    pub(crate) async fn start(self: &Arc<Self>, timings: KmsTimings) {
        let _ = self.timings.set(timings);
        let path = socket_path(&self.endpoint);
        let channel = Endpoint::from_static("http://kms.local")
            .timeout(self.timeout)
            .connect_timeout(self.timeout)
            // The URI is a placeholder: the connector dials the socket.
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(dial(&path).await?)) }
            }));
        let _ = self.client.set(KeyManagementServiceClient::new(channel));
        let primed = self.check_logged().await;
        let weak = Arc::downgrade(self);
        tokio::spawn(poll(weak, primed, timings));
    }

    async fn check_logged(&self) -> bool {
        match self.check().await {
            Ok(()) => true,
            Err(err) => {
                tracing::error!(name = %self.name, error = %err, "kms plugin failed health check probe");
                false
            }
        }
    }

    /// Upstream's `kmsv2PluginProbe.check`: the plugin's status, a new seed when its
    /// key ID changed, the answer reused for a while.
    pub(crate) async fn check(&self) -> Result<(), String> {
        let mut probe = self.probe.lock().await;
        if probe
            .answered
            .is_some_and(|at| at.elapsed() < probe.reuse_for)
        {
            return probe.answer.clone();
        }
        let was_healthy = probe.answered.is_some() && probe.answer.is_ok();
        let answer = self.status_and_rotate(&mut probe.version).await;
        let fetch_failed = self
            .fetch_failed
            .swap(false, std::sync::atomic::Ordering::SeqCst);
        if answer.is_ok() && (!was_healthy || fetch_failed) {
            self.recoveries.send_modify(|n| *n += 1);
        }
        let timings = self.timings();
        probe.reuse_for = if answer.is_ok() {
            timings.healthy_answer_ttl
        } else {
            timings.unhealthy_answer_ttl
        };
        probe.answered = Some(Instant::now());
        probe.answer = answer.clone();
        answer
    }

    async fn status_and_rotate(&self, version: &mut Option<String>) -> Result<(), String> {
        let mut client = self.client().map_err(|e| e.to_string())?;
        let status = self
            .timed(STATUS_METHOD, client.status(proto::StatusRequest {}))
            .await
            .map_err(|s| {
                format!(
                    "failed to perform status section of the healthz check for KMS Provider {}, error: {}",
                    self.name,
                    grpc_error(&s)
                )
            })?;
        let mut errors = Vec::new();
        if status.healthz != "ok" {
            errors.push(format!("got unexpected healthz status: {}", status.healthz));
        }
        if status.version != "v2" && status.version != "v2beta1" {
            errors.push(format!(
                "expected KMSv2 API version v2, got {}",
                status.version
            ));
        } else {
            let first = version.get_or_insert_with(|| status.version.clone());
            if *first != status.version {
                errors.push(format!(
                    "KMSv2 API version should not change after the initial status response version {first}, got {}",
                    status.version
                ));
            }
        }
        match validate_key_id(&status.key_id) {
            Err((code, e)) => {
                self.metrics.invalid_key_id_from_status(&self.name, code);
                errors.push(format!(
                    "got invalid KMSv2 KeyID hash {:?}: {e}",
                    key_id_hash(&status.key_id)
                ));
            }
            Ok(()) => {
                self.metrics
                    .key_id_from_status(&self.name, &key_id_hash(&status.key_id));
                if let Err(e) = self
                    .rotate_on_key_id_change(&mut client, &status.key_id)
                    .await
                {
                    errors.push(e);
                }
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(format!(
                "kmsv2 Provider {} is not healthy, error: {}",
                self.name, errors[0]
            )),
            _ => Err(format!(
                "kmsv2 Provider {} is not healthy, error: [{}]",
                self.name,
                errors.join(", ")
            )),
        }
    }

    /// Upstream's `rotateDEKOnKeyIDChange`: the same key ID extends the seed's write
    /// lifetime; another one makes a new seed, kept only if the plugin encrypted it
    /// under that very key ID. On failure the old seed stays until it expires.
    async fn rotate_on_key_id_change(
        &self,
        client: &mut KeyManagementServiceClient<Channel>,
        status_key_id: &str,
    ) -> Result<(), String> {
        // Taken before the call: the TTL bounds the time since the plugin was last seen.
        let expires = SystemTime::now() + self.timings().write_seed_ttl;
        let current = self.write_state();
        if let Some(state) = current.as_ref().filter(|s| s.key_id == status_key_id) {
            let extended = WriteState {
                seed: state.seed.clone(),
                key_id: state.key_id.clone(),
                key_id_hash: state.key_id_hash.clone(),
                encrypted_seed: state.encrypted_seed.clone(),
                annotations: state.annotations.clone(),
                expires,
            };
            *self.write.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(extended));
            return Ok(());
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let generation = Instant::now();
        let generated = self.generate_seed(client, &uid).await;
        self.metrics
            .data_key_generated(generated.as_ref().ok().map(|_| generation.elapsed()));
        let failed = |why: String| {
            format!(
                "failed to rotate DEK uid={uid:?}, statusKeyIDHash={:?}, stateKeyIDHash={:?}: {why}",
                key_id_hash(status_key_id),
                key_id_hash(current.as_ref().map_or("", |s| s.key_id.as_str())),
            )
        };
        let (seed, object) = generated.map_err(failed)?;
        if object.key_id != status_key_id {
            return Err(failed(format!(
                "the plugin encrypted with keyID hash {:?}",
                key_id_hash(&object.key_id)
            )));
        }
        let seed = Arc::new(Dek::Seed(seed));
        // Values this server writes are read back without asking the plugin.
        self.remember(cache_key(&object), seed.clone());
        *self.write.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(WriteState {
            seed,
            key_id_hash: key_id_hash(&object.key_id),
            key_id: object.key_id,
            encrypted_seed: object.encrypted_dek_source,
            annotations: object.annotations,
            expires,
        }));
        tracing::info!(
            name = %self.name,
            uid = %uid,
            key_id_hash = %key_id_hash(status_key_id),
            "KMS v2 DEK seed rotated"
        );
        Ok(())
    }

    /// Upstream's `GenerateTransformer`: a random seed, encrypted by the plugin, and
    /// the fields values sealed with it carry (checked as stored objects are).
    async fn generate_seed(
        &self,
        client: &mut KeyManagementServiceClient<Channel>,
        uid: &str,
    ) -> Result<(Vec<u8>, proto::EncryptedObject), String> {
        let seed = random::<SEED_SIZE>().map_err(|e| e.to_string())?.to_vec();
        let request = proto::EncryptRequest {
            plaintext: seed.clone(),
            uid: uid.to_string(),
        };
        let response = self
            .timed(ENCRYPT_METHOD, client.encrypt(request))
            .await
            .map_err(|s| format!("failed to encrypt DEK, error: {}", grpc_error(&s)))?;
        let object = proto::EncryptedObject {
            // Any non-empty value passes the check of the other fields.
            encrypted_data: vec![0],
            key_id: response.key_id,
            encrypted_dek_source: response.ciphertext,
            annotations: response.annotations,
            encrypted_dek_source_type: SourceType::HkdfSha256XnonceAesGcmSeed as i32,
        };
        validate_object(&object)?;
        Ok((seed, object))
    }
}

/// Upstream's `primeAndProbeKMSv2` loop: a check per healthy interval; after a
/// failure, checks at the quicker interval until one passes.
async fn poll(kms: Weak<KmsV2>, primed: bool, timings: KmsTimings) {
    let quick_until_healthy = |kms: &Weak<KmsV2>| {
        let kms = kms.clone();
        async move {
            loop {
                tokio::time::sleep(timings.unhealthy_poll).await;
                let Some(kms) = kms.upgrade() else {
                    return false;
                };
                if kms.check_logged().await {
                    return true;
                }
            }
        }
    };
    if !primed && !quick_until_healthy(&kms).await {
        return;
    }
    loop {
        tokio::time::sleep(timings.healthy_poll).await;
        let Some(live) = kms.upgrade() else {
            return;
        };
        let healthy = live.check_logged().await;
        drop(live);
        if !healthy && !quick_until_healthy(&kms).await {
            return;
        }
    }
}

/// The `kms-providers` health check over every KMS v2 provider of a configuration
/// (on `/healthz` and `/readyz`, not `/livez`, as upstream).
#[derive(Clone)]
pub struct KmsHealth {
    providers: Vec<Arc<KmsV2>>,
}

impl fmt::Debug for KmsHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.providers).finish()
    }
}

impl KmsHealth {
    pub(crate) fn new(providers: Vec<Arc<KmsV2>>) -> Option<KmsHealth> {
        (!providers.is_empty()).then_some(KmsHealth { providers })
    }

    pub fn name(&self) -> &'static str {
        KMS_HEALTH_CHECK
    }

    /// Every provider's check in turn; the failures as upstream's aggregate.
    pub async fn check(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        for (i, kms) in self.providers.iter().enumerate() {
            if let Err(e) = kms.check().await {
                errors.push(format!("kms-provider-{i}: {e}"));
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(format!("[{}]", errors.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location() -> Location<'static> {
        Location {
            backend_prefix: "",
            key: "/registry/secrets/default/s",
        }
    }

    fn primed(kms: &KmsV2, key_id: &str) {
        let object = proto::EncryptedObject {
            encrypted_data: vec![0],
            key_id: key_id.into(),
            encrypted_dek_source: b"sealed seed".to_vec(),
            annotations: HashMap::from([("a.example.com".to_string(), b"x".to_vec())]),
            encrypted_dek_source_type: 1,
        };
        let seed = Arc::new(Dek::Seed(vec![7; 32]));
        kms.remember(cache_key(&object), seed.clone());
        *kms.write.write().unwrap() = Some(Arc::new(WriteState {
            seed,
            key_id: key_id.into(),
            key_id_hash: key_id_hash(key_id),
            encrypted_seed: object.encrypted_dek_source,
            annotations: object.annotations,
            expires: SystemTime::now() + Duration::from_secs(60),
        }));
    }

    #[test]
    fn the_derived_key_is_rfc5869_expand_only_with_the_seed_as_prk() {
        // HKDF-Expand for one block: T(1) = HMAC-SHA256(PRK, info || 0x01).
        let seed = [3u8; 32];
        let info = [9u8; 32];
        let hmac = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &seed);
        let t1 = ring::hmac::sign(&hmac, &[&info[..], &[1u8]].concat());
        let expected = GcmKey::new(t1.as_ref()).unwrap();
        let derived = derive_key(&seed, &info).unwrap();
        let sealed = gcm_seal(&expected, b"plain", location()).unwrap();
        assert_eq!(gcm_open(&derived, &sealed, location()).unwrap(), b"plain");
    }

    #[test]
    fn a_value_round_trips_and_carries_upstreams_fields() {
        let kms = Arc::new(KmsV2::new(
            "vault",
            "unix:///tmp/k.sock",
            Duration::from_secs(3),
            Arc::default(),
        ));
        primed(&kms, "key-1");
        let stored = kms.encrypt(b"{\"kind\":\"Secret\"}", location()).unwrap();
        let object = proto::EncryptedObject::decode(stored.as_slice()).unwrap();
        assert_eq!(object.key_id, "key-1");
        assert_eq!(object.encrypted_dek_source, b"sealed seed");
        assert_eq!(object.encrypted_dek_source_type, 1);
        assert_eq!(object.annotations["a.example.com"], b"x");
        // 32 bytes of info, a 12-byte nonce, ciphertext and a 16-byte tag.
        assert_eq!(object.encrypted_data.len(), 32 + 12 + 17 + 16);
        let (plain, stale) = kms.decrypt(&stored, location()).unwrap();
        assert_eq!(plain, b"{\"kind\":\"Secret\"}");
        assert!(!stale);
        // Another key authenticates other data: a copied value does not open.
        let elsewhere = Location {
            backend_prefix: "",
            key: "/registry/secrets/default/other",
        };
        match kms.decrypt(&stored, elsewhere) {
            Err(ReadError::Failed(e)) => {
                assert_eq!(e.to_string(), "cipher: message authentication failed")
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn another_key_id_is_stale_and_an_unknown_seed_needs_the_plugin() {
        let kms = Arc::new(KmsV2::new(
            "vault",
            "unix:///tmp/k.sock",
            Duration::from_secs(3),
            Arc::default(),
        ));
        primed(&kms, "key-1");
        let stored = kms.encrypt(b"x", location()).unwrap();
        // The plugin moved to key-2: old data reads, as stale.
        primed(&kms, "key-2");
        assert!(kms.decrypt(&stored, location()).unwrap().1);
        // A seed this server never saw must be decrypted by the plugin.
        let mut object = proto::EncryptedObject::decode(stored.as_slice()).unwrap();
        object.encrypted_dek_source = b"another seed".to_vec();
        match kms.decrypt(&object.encode_to_vec(), location()) {
            Err(ReadError::MissingDek(request)) => {
                assert_eq!(request.object.encrypted_dek_source, b"another seed");
                assert!(request.object.encrypted_data.is_empty());
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn writes_fail_without_a_seed_or_after_it_expired() {
        let kms = KmsV2::new(
            "vault",
            "unix:///tmp/k.sock",
            Duration::from_secs(3),
            Arc::default(),
        );
        assert_eq!(
            kms.encrypt(b"x", location()).unwrap_err().to_string(),
            "got unexpected nil transformer"
        );
        primed(&kms, "key-1");
        let state = kms.write_state().unwrap();
        *kms.write.write().unwrap() = Some(Arc::new(WriteState {
            seed: state.seed.clone(),
            key_id: state.key_id.clone(),
            key_id_hash: state.key_id_hash.clone(),
            encrypted_seed: state.encrypted_seed.clone(),
            annotations: state.annotations.clone(),
            expires: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        }));
        let err = kms.encrypt(b"x", location()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "encryptedDEKSource with keyID hash \"{}\" expired at 2023-11-14T22:13:20Z (current time is ",
                key_id_hash("key-1")
            )),
            "{err}"
        );
    }

    #[test]
    fn stored_objects_are_validated_as_upstream() {
        let good = proto::EncryptedObject {
            encrypted_data: vec![1],
            key_id: "k".into(),
            encrypted_dek_source: vec![2],
            annotations: HashMap::new(),
            encrypted_dek_source_type: 1,
        };
        assert_eq!(validate_object(&good), Ok(()));
        let cases: Vec<(proto::EncryptedObject, &str)> = vec![
            (
                proto::EncryptedObject {
                    encrypted_dek_source_type: 7,
                    ..good.clone()
                },
                "unknown encryptedDEKSourceType: 7",
            ),
            (
                proto::EncryptedObject {
                    encrypted_data: vec![],
                    ..good.clone()
                },
                "encrypted data is empty",
            ),
            (
                proto::EncryptedObject {
                    encrypted_dek_source: vec![0; 1025],
                    ..good.clone()
                },
                "failed to validate encrypted DEK source: encrypted DEK source is 1025 bytes, which exceeds the max size of 1024",
            ),
            (
                proto::EncryptedObject {
                    key_id: String::new(),
                    ..good.clone()
                },
                "failed to validate key id: keyID is empty",
            ),
            (
                proto::EncryptedObject {
                    annotations: HashMap::from([("Nope".to_string(), vec![])]),
                    ..good.clone()
                },
                "failed to validate annotations: annotations: Invalid value: \"Nope\": should be a domain with at least two segments separated by dots",
            ),
        ];
        for (object, want) in cases {
            assert_eq!(validate_object(&object).unwrap_err(), want);
        }
    }

    #[test]
    fn endpoints_name_sockets_as_upstream() {
        assert_eq!(socket_path("unix:///run/kms.sock"), "/run/kms.sock");
        assert_eq!(socket_path("unix:///@kms"), "@kms");
        assert_eq!(socket_path("unix://host/run/kms.sock"), "/run/kms.sock");
    }
}
