//! The providers and their chains: upstream's `value.PrefixTransformer` lists, with
//! upstream's stored layouts byte for byte (see the crate docs for each layout).

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use aes::cipher::block_padding::{NoPadding, Pkcs7};
use aes::cipher::{BlockCipher, BlockDecryptMut, BlockEncryptMut, InnerIvInit, KeyInit};
use aes::{Aes128, Aes192, Aes256};
use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm, Nonce};
use bytes::Bytes;
use crypto_secretbox::XSalsa20Poly1305;

use crate::kms::{DekRequest, KmsV2};
use crate::metrics::{Direction, EncryptionMetrics, NOT_GRPC, OK};

pub(crate) const AESCBC_PREFIX: &str = "k8s:enc:aescbc:v1:";
pub(crate) const AESGCM_PREFIX: &str = "k8s:enc:aesgcm:v1:";
pub(crate) const SECRETBOX_PREFIX: &str = "k8s:enc:secretbox:v1:";
/// Reserved for encrypted values: JSON starts with `{` and protobuf with `k8s\0`, so
/// a value with this prefix is never plain data.
pub(crate) const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

const AES_BLOCK: usize = 16;
const GCM_NONCE: usize = 12;
const SECRETBOX_NONCE: usize = 24;
const SECRETBOX_OVERHEAD: usize = 16;

type Aes192Gcm = AesGcm<Aes192, U12>;

/// Why a value could not be transformed. The texts are upstream's, so an error reads
/// the same whichever apiserver wrote the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformError(String);

impl TransformError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        TransformError(message.into())
    }

    pub(crate) fn short() -> Self {
        TransformError::new("the stored data was shorter than the required size")
    }

    fn random() -> Self {
        TransformError::new("unable to read sufficient random bytes")
    }
}

impl fmt::Display for TransformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TransformError {}

/// Why a stored value could not be read yet.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// No provider could read it.
    Failed(TransformError),
    /// A KMS provider needs its plugin to decrypt the value's seed first; the
    /// decorator runs the request and reads again.
    MissingDek(Box<DekRequest>),
}

impl From<TransformError> for ReadError {
    fn from(e: TransformError) -> Self {
        ReadError::Failed(e)
    }
}

/// Upstream's `errors.Reduce(errors.NewAggregate(errs))`: one error stays itself,
/// several read `[a, b]` with repeats dropped; none is `fallback`.
fn aggregate(errors: Vec<TransformError>, fallback: &str) -> TransformError {
    let mut messages: Vec<String> = Vec::new();
    for e in errors {
        if !messages.contains(&e.0) {
            messages.push(e.0);
        }
    }
    match messages.len() {
        0 => TransformError::new(fallback),
        1 => TransformError(messages.remove(0)),
        _ => TransformError(format!("[{}]", messages.join(", "))),
    }
}

/// Where a value is stored: AES-GCM authenticates it, so a value copied under another
/// key does not decrypt. Upstream's `authenticatedDataString` is the full etcd key,
/// `--etcd-prefix` included, hence the backend's prefix here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Location<'a> {
    pub backend_prefix: &'a str,
    pub key: &'a str,
}

impl Location<'_> {
    pub(crate) fn authenticated_data(&self) -> Vec<u8> {
        let mut aad = Vec::with_capacity(self.backend_prefix.len() + self.key.len());
        aad.extend_from_slice(self.backend_prefix.as_bytes());
        aad.extend_from_slice(self.key.as_bytes());
        aad
    }
}

pub(crate) fn random<const N: usize>() -> Result<[u8; N], TransformError> {
    let mut bytes = [0u8; N];
    getrandom::getrandom(&mut bytes).map_err(|_| TransformError::random())?;
    Ok(bytes)
}

/// An AES key for CBC, by size (upstream takes 16, 24 or 32 bytes).
enum AesKey {
    A128(Box<Aes128>),
    A192(Box<Aes192>),
    A256(Box<Aes256>),
}

/// An AES-GCM key, by size.
pub(crate) enum GcmKey {
    A128(Box<Aes128Gcm>),
    A192(Box<Aes192Gcm>),
    A256(Box<Aes256Gcm>),
}

enum Cipher {
    Cbc(AesKey),
    Gcm(GcmKey),
    Secretbox(Box<XSalsa20Poly1305>),
}

fn key_size_error(len: usize) -> String {
    format!("invalid key size {len}")
}

impl AesKey {
    fn new(secret: &[u8]) -> Result<Self, String> {
        let err = |_| key_size_error(secret.len());
        Ok(match secret.len() {
            16 => AesKey::A128(Box::new(Aes128::new_from_slice(secret).map_err(err)?)),
            24 => AesKey::A192(Box::new(Aes192::new_from_slice(secret).map_err(err)?)),
            32 => AesKey::A256(Box::new(Aes256::new_from_slice(secret).map_err(err)?)),
            n => return Err(key_size_error(n)),
        })
    }
}

impl GcmKey {
    pub(crate) fn new(secret: &[u8]) -> Result<Self, String> {
        let err = |_| key_size_error(secret.len());
        Ok(match secret.len() {
            16 => GcmKey::A128(Box::new(Aes128Gcm::new_from_slice(secret).map_err(err)?)),
            24 => GcmKey::A192(Box::new(Aes192Gcm::new_from_slice(secret).map_err(err)?)),
            32 => GcmKey::A256(Box::new(Aes256Gcm::new_from_slice(secret).map_err(err)?)),
            n => return Err(key_size_error(n)),
        })
    }

    fn seal(&self, nonce: &[u8], payload: Payload<'_, '_>) -> Result<Vec<u8>, aes_gcm::Error> {
        let nonce = Nonce::<U12>::from_slice(nonce);
        match self {
            GcmKey::A128(c) => c.encrypt(nonce, payload),
            GcmKey::A192(c) => c.encrypt(nonce, payload),
            GcmKey::A256(c) => c.encrypt(nonce, payload),
        }
    }

    fn open(&self, nonce: &[u8], payload: Payload<'_, '_>) -> Result<Vec<u8>, aes_gcm::Error> {
        let nonce = Nonce::<U12>::from_slice(nonce);
        match self {
            GcmKey::A128(c) => c.decrypt(nonce, payload),
            GcmKey::A192(c) => c.decrypt(nonce, payload),
            GcmKey::A256(c) => c.decrypt(nonce, payload),
        }
    }
}

/// Upstream's GCM transformer: a random 12-byte nonce, then the sealed value with the
/// location as authenticated data.
pub(crate) fn gcm_seal(
    key: &GcmKey,
    plain: &[u8],
    location: Location<'_>,
) -> Result<Vec<u8>, TransformError> {
    let nonce = random::<GCM_NONCE>()?;
    let aad = location.authenticated_data();
    let payload = Payload {
        msg: plain,
        aad: &aad,
    };
    let body = key
        .seal(&nonce, payload)
        .map_err(|_| TransformError::new("AES-GCM encryption failed"))?;
    Ok([&nonce[..], &body].concat())
}

pub(crate) fn gcm_open(
    key: &GcmKey,
    data: &[u8],
    location: Location<'_>,
) -> Result<Vec<u8>, TransformError> {
    if data.len() < GCM_NONCE {
        return Err(TransformError::short());
    }
    let (nonce, body) = data.split_at(GCM_NONCE);
    let aad = location.authenticated_data();
    let payload = Payload {
        msg: body,
        aad: &aad,
    };
    key.open(nonce, payload)
        .map_err(|_| TransformError::new("cipher: message authentication failed"))
}

fn cbc_encrypt<C>(cipher: &C, iv: &[u8], plain: &[u8]) -> Result<Vec<u8>, TransformError>
where
    C: BlockEncryptMut + BlockCipher + Clone,
{
    let mode = cbc::Encryptor::<C>::inner_iv_slice_init(cipher.clone(), iv)
        .map_err(|_| TransformError::new("invalid IV size"))?;
    Ok(mode.encrypt_padded_vec_mut::<Pkcs7>(plain))
}

fn cbc_decrypt<C>(cipher: &C, iv: &[u8], data: &[u8]) -> Result<Vec<u8>, TransformError>
where
    C: BlockDecryptMut + BlockCipher + Clone,
{
    let mode = cbc::Decryptor::<C>::inner_iv_slice_init(cipher.clone(), iv)
        .map_err(|_| TransformError::new("invalid IV size"))?;
    mode.decrypt_padded_vec_mut::<NoPadding>(data)
        .map_err(|_| TransformError::new("the stored data is not a multiple of the block size"))
}

impl Cipher {
    /// The value after the key name: nonce or IV, then the ciphertext.
    fn seal(&self, plain: &[u8], location: Location<'_>) -> Result<Vec<u8>, TransformError> {
        match self {
            Cipher::Cbc(key) => {
                let iv = random::<AES_BLOCK>()?;
                let body = match key {
                    AesKey::A128(c) => cbc_encrypt(c.as_ref(), &iv, plain)?,
                    AesKey::A192(c) => cbc_encrypt(c.as_ref(), &iv, plain)?,
                    AesKey::A256(c) => cbc_encrypt(c.as_ref(), &iv, plain)?,
                };
                Ok([&iv[..], &body].concat())
            }
            Cipher::Gcm(key) => gcm_seal(key, plain, location),
            Cipher::Secretbox(key) => {
                let nonce = random::<SECRETBOX_NONCE>()?;
                // Tag first, then ciphertext: NaCl's (and Go's) secretbox layout.
                let body = key
                    .encrypt(crypto_secretbox::Nonce::from_slice(&nonce), plain)
                    .map_err(|_| TransformError::new("secretbox encryption failed"))?;
                Ok([&nonce[..], &body].concat())
            }
        }
    }

    fn open(&self, data: &[u8], location: Location<'_>) -> Result<Vec<u8>, TransformError> {
        match self {
            Cipher::Cbc(key) => {
                if data.len() < AES_BLOCK {
                    return Err(TransformError::short());
                }
                let (iv, body) = data.split_at(AES_BLOCK);
                if body.len() % AES_BLOCK != 0 {
                    return Err(TransformError::new(
                        "the stored data is not a multiple of the block size",
                    ));
                }
                let mut result = match key {
                    AesKey::A128(c) => cbc_decrypt(c.as_ref(), iv, body)?,
                    AesKey::A192(c) => cbc_decrypt(c.as_ref(), iv, body)?,
                    AesKey::A256(c) => cbc_decrypt(c.as_ref(), iv, body)?,
                };
                // Upstream's PKCS#7 check, which also takes padding longer than a block.
                let pad = result.last().copied().unwrap_or(0);
                let pad_len = usize::from(pad);
                if pad_len == 0 || pad_len > result.len() {
                    return Err(TransformError::new(
                        "invalid PKCS7 data (empty or not padded)",
                    ));
                }
                let size = result.len() - pad_len;
                if result[size..].iter().any(|&b| b != pad) {
                    return Err(TransformError::new("invalid padding on input"));
                }
                result.truncate(size);
                Ok(result)
            }
            Cipher::Gcm(key) => gcm_open(key, data, location),
            Cipher::Secretbox(key) => {
                if data.len() < SECRETBOX_OVERHEAD + SECRETBOX_NONCE {
                    return Err(TransformError::short());
                }
                let (nonce, body) = data.split_at(SECRETBOX_NONCE);
                key.decrypt(crypto_secretbox::Nonce::from_slice(nonce), body)
                    // Upstream's text for a box that does not open.
                    .map_err(|_| {
                        TransformError::new("output array was not large enough for encryption")
                    })
            }
        }
    }
}

/// One key of a provider; values carry `<name>:` after the provider's prefix.
pub(crate) struct NamedKey {
    name: String,
    prefix: Vec<u8>,
    /// `prefix` as text: the key's `transformer_prefix` label.
    label: String,
    cipher: Cipher,
}

/// The kinds of keyed provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AesCbc,
    AesGcm,
    Secretbox,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::AesCbc => AESCBC_PREFIX,
            Kind::AesGcm => AESGCM_PREFIX,
            Kind::Secretbox => SECRETBOX_PREFIX,
        }
    }

    fn no_key(self) -> &'static str {
        match self {
            Kind::AesCbc | Kind::AesGcm => {
                "no matching key was found for the provided AES transformer"
            }
            Kind::Secretbox => "no matching key was found for the provided Secretbox transformer",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::AesCbc => "aescbc",
            Kind::AesGcm => "aesgcm",
            Kind::Secretbox => "secretbox",
        }
    }
}

/// One entry of a `providers` list.
pub(crate) enum Provider {
    /// Stores values as they are; reads any value without the encrypted prefix.
    Identity,
    /// Writes with its first key; reads with any key whose name the value carries.
    Keyed { kind: Kind, keys: Vec<NamedKey> },
    /// Envelope encryption through a KMS v2 plugin.
    KmsV2(Arc<KmsV2>),
}

impl fmt::Debug for Provider {
    /// Names only: secrets never reach a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Identity => f.write_str("identity"),
            Provider::Keyed { kind, keys } => f
                .debug_struct(kind.name())
                .field(
                    "keys",
                    &keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
                )
                .finish(),
            Provider::KmsV2(kms) => kms.fmt(f),
        }
    }
}

impl Provider {
    /// A keyed provider from `(name, secret)` pairs in config order; the secrets are
    /// already decoded and of a valid size (validation checked both).
    pub(crate) fn keyed(kind: Kind, keys: &[(String, Vec<u8>)]) -> Result<Provider, String> {
        if keys.is_empty() {
            return Err(format!("{} provider has no valid keys", kind.name()));
        }
        let mut named = Vec::with_capacity(keys.len());
        for (name, secret) in keys {
            let cipher = match kind {
                Kind::AesCbc => AesKey::new(secret).map(Cipher::Cbc),
                Kind::AesGcm => GcmKey::new(secret).map(Cipher::Gcm),
                Kind::Secretbox => XSalsa20Poly1305::new_from_slice(secret)
                    .map(|c| Cipher::Secretbox(Box::new(c)))
                    .map_err(|_| {
                        format!(
                            "expected key size 32 for secretbox provider, got {}",
                            secret.len()
                        )
                    }),
            }
            .map_err(|e| format!("error while creating cipher for named key {name}: {e}"))?;
            named.push(NamedKey {
                name: name.clone(),
                prefix: format!("{name}:").into_bytes(),
                label: format!("{name}:"),
                cipher,
            });
        }
        Ok(Provider::Keyed { kind, keys: named })
    }

    fn is_identity(&self) -> bool {
        matches!(self, Provider::Identity)
    }

    /// Upstream's `transformer_prefix` label of a read: the stored prefix, and
    /// `identity` for identity.
    fn label(&self) -> &str {
        match self {
            Provider::Identity => "identity",
            Provider::Keyed { kind, .. } => kind.prefix(),
            Provider::KmsV2(kms) => kms.label(),
        }
    }
}

/// The providers one resource is configured with: the first writes, all read.
#[derive(Debug)]
pub(crate) struct Chain {
    providers: Vec<Arc<Provider>>,
}

impl Chain {
    pub(crate) fn new(providers: Vec<Arc<Provider>>) -> Chain {
        Chain { providers }
    }

    /// Whether stored values may differ from plain ones (any provider encrypts).
    pub(crate) fn transforms(&self) -> bool {
        self.providers.iter().any(|p| !p.is_identity())
    }

    /// The stored form of `plain`, by the first provider (and its first key).
    pub(crate) fn encrypt(
        &self,
        plain: &Bytes,
        location: Location<'_>,
        metrics: &EncryptionMetrics,
    ) -> Result<Bytes, TransformError> {
        let start = Instant::now();
        let provider = self
            .providers
            .first()
            .ok_or_else(|| TransformError::new("no provider is configured"))?;
        let sealed = match provider.as_ref() {
            Provider::Identity => Ok(plain.clone()),
            Provider::KmsV2(kms) => kms
                .encrypt(plain, location)
                .map(|body| Bytes::from([kms.prefix(), &body].concat())),
            Provider::Keyed { kind, keys } => match keys.first() {
                None => Err(TransformError::new(kind.no_key())),
                Some(key) => {
                    let body = key.cipher.seal(plain, location);
                    record(metrics, Direction::ToStorage, &key.label, start, &body);
                    body.map(|body| {
                        let prefix = kind.prefix().as_bytes();
                        let mut out =
                            Vec::with_capacity(prefix.len() + key.prefix.len() + body.len());
                        out.extend_from_slice(prefix);
                        out.extend_from_slice(&key.prefix);
                        out.extend_from_slice(&body);
                        Bytes::from(out)
                    })
                }
            },
        };
        // A write's label is the prefix written, empty for identity.
        let written_prefix = if provider.is_identity() {
            ""
        } else {
            provider.label()
        };
        record(
            metrics,
            Direction::ToStorage,
            written_prefix,
            start,
            &sealed,
        );
        sealed
    }

    /// The plain form of a stored value and whether it is stale (read by anything but
    /// the first provider and key, so a write should store it anew), as upstream's
    /// prefix transformers: every provider whose prefix the value carries is tried in
    /// order, a failure does not stop the search, and identity reads what carries no
    /// encrypted prefix.
    pub(crate) fn decrypt(
        &self,
        stored: &Bytes,
        location: Location<'_>,
        metrics: &EncryptionMetrics,
    ) -> Result<(Bytes, bool), ReadError> {
        let start = Instant::now();
        let mut errors = Vec::new();
        for (i, provider) in self.providers.iter().enumerate() {
            let opened = match provider.as_ref() {
                Provider::Identity => {
                    if stored.starts_with(ENCRYPTED_PREFIX) {
                        // Upstream drops identity's own error so that an encrypting
                        // provider further down still gets its turn.
                        continue;
                    }
                    Ok((stored.clone(), false))
                }
                Provider::KmsV2(kms) => {
                    let Some(rest) = stored.strip_prefix(kms.prefix()) else {
                        continue;
                    };
                    match kms.decrypt(rest, location) {
                        Ok((plain, stale)) => Ok((Bytes::from(plain), stale)),
                        Err(ReadError::Failed(e)) => Err(e),
                        // Counted once the seed came and the read is tried again.
                        Err(missing) => return Err(missing),
                    }
                }
                Provider::Keyed { kind, keys } => {
                    let Some(rest) = stored.strip_prefix(kind.prefix().as_bytes()) else {
                        continue;
                    };
                    open_with_keys(kind, keys, rest, location, metrics)
                }
            };
            record(
                metrics,
                Direction::FromStorage,
                provider.label(),
                start,
                &opened,
            );
            match opened {
                Ok((plain, stale)) => return Ok((plain, stale || i != 0)),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            metrics.transformation(Direction::FromStorage, "unknown", start.elapsed(), NOT_GRPC);
        }
        Err(aggregate(errors, "no matching prefix found").into())
    }
}

/// A keyed provider's read of `data` (after its prefix): each key whose `<name>:` the
/// value carries is tried, in order, and counted as upstream's inner prefix
/// transformers count. Stale when read by any key but the first.
fn open_with_keys(
    kind: &Kind,
    keys: &[NamedKey],
    data: &[u8],
    location: Location<'_>,
    metrics: &EncryptionMetrics,
) -> Result<(Bytes, bool), TransformError> {
    let start = Instant::now();
    let mut errors = Vec::new();
    for (j, key) in keys.iter().enumerate() {
        let Some(sealed) = data.strip_prefix(key.prefix.as_slice()) else {
            continue;
        };
        let opened = key.cipher.open(sealed, location);
        record(metrics, Direction::FromStorage, &key.label, start, &opened);
        match opened {
            Ok(plain) => return Ok((Bytes::from(plain), j != 0)),
            Err(e) => errors.push(e),
        }
    }
    Err(aggregate(errors, kind.no_key()))
}

/// Counts a transformation by `prefix`, timed from `start` when it succeeded. Errors
/// here are never a gRPC call's: a KMS plugin's failures surface where its seed is
/// fetched.
fn record<T>(
    metrics: &EncryptionMetrics,
    direction: Direction,
    prefix: &str,
    start: Instant,
    outcome: &Result<T, TransformError>,
) {
    let status = if outcome.is_ok() { OK } else { NOT_GRPC };
    metrics.transformation(direction, prefix, start.elapsed(), status);
}

/// Reads of keys no rule covers: values as stored, but never encrypted ones (upstream
/// falls back to the identity transformer, which refuses them).
pub(crate) fn check_unencrypted(stored: &[u8]) -> Result<(), TransformError> {
    if stored.starts_with(ENCRYPTED_PREFIX) {
        return Err(TransformError::new(
            "identity transformer tried to read encrypted data",
        ));
    }
    Ok(())
}
