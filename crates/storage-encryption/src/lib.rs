//! Encryption at rest: kube-apiserver's `--encryption-provider-config`.
//!
//! An `EncryptionConfiguration` (`apiserver.config.k8s.io/v1`, YAML or JSON) names
//! resources (`secrets`, `<resource>.<group>`, `*.<group>`, `*.`, `*.*`) and, for each
//! rule, a list of providers: the first encrypts every write, all of them are tried on
//! reads. [`Encryption`] is such a file decoded, validated and compiled;
//! [`EncryptedStorage`] applies it to every value that passes.
//!
//! Layer: a [`ferrokube_storage::Storage`] decorator between the registry and the
//! backend (SQLite or etcd); the registry, its watch cache and everything above see
//! plain values only. It depends on `ferrokube-storage` (the contract),
//! `ferrokube-api` (the built-in resources' storage prefixes),
//! `ferrokube-apimachinery` (Go durations) and `ferrokube-component-base` (metric
//! kinds) and must depend on no other Ferrokube crate; the apiserver binary chooses
//! to wrap its backend with it, starts the KMS plugins' polling
//! ([`Encryption::start_kms`]), serves their health check ([`Encryption::kms_health`])
//! and renders [`EncryptionMetrics`] on `/metrics`.
//!
//! # Wire format (upstream's, so either apiserver reads what the other wrote)
//! * `aescbc`: `k8s:enc:aescbc:v1:<key name>:` + 16-byte random IV + AES-CBC
//!   ciphertext with PKCS#7 padding. No integrity: upstream's own docs advise against
//!   it for new setups, but it reads and writes the same bytes.
//! * `aesgcm`: `k8s:enc:aesgcm:v1:<key name>:` + 12-byte random nonce + AES-GCM
//!   ciphertext and tag. The additional authenticated data is the full etcd key: the
//!   backend's prefix (`--etcd-prefix`) followed by the key (`/registry/secrets/ns/n`).
//!   Upstream's etcd3 store passes `authenticatedDataString(preparedKey)`, and
//!   `prepareKey` joins the path prefix with the key, i.e. the very etcd key; its list
//!   uses `kv.Key` as read from etcd, the same bytes. With Ferrokube's default empty
//!   `--etcd-prefix` and keys under `/registry/`, that is upstream's default key.
//! * `secretbox`: `k8s:enc:secretbox:v1:<key name>:` + 24-byte random nonce + NaCl
//!   secretbox (XSalsa20-Poly1305, tag first).
//! * `kms` (`apiVersion: v2`): `k8s:enc:kms:v2:<provider name>:` + upstream's protobuf
//!   `EncryptedObject`: a key derived from a seed the KMS plugin encrypted
//!   (HKDF-SHA256, 32 bytes of info first in the data) seals the value with AES-GCM,
//!   the full etcd key authenticated as for `aesgcm`. See the `kms` module.
//! * `identity`: the value as it is. Reading, it takes any value that does not start
//!   with `k8s:enc:`; keys no rule covers are read the same way, so encrypted data
//!   under a rule that was removed is an error, not garbage.
//!
//! A value that no provider can read is an internal error naming its key ("no
//! matching prefix found" when no prefix matched, as upstream) on get and in the
//! update and delete paths; nothing panics. In lists and watch events it is logged
//! as an error and handed on empty, so the registry's watch cache skips it as
//! undecodable. Deviation: upstream fails every list of that resource (its cacher
//! does not start, and retries); here the one watch cache of all resources must keep
//! going, so the object is missing from lists and watches until it can be read
//! again. After such a value was left out, the watch under the cache ends when a
//! KMS plugin becomes healthy or the configuration is replaced (automatic reload),
//! and the cache lists everything again: a KMS plugin that starts after the
//! apiserver, as upstream allows, leaves no secret out for good.
//!
//! # Behaviour worth knowing
//! * A value read by any provider but the first, or any key but the first, is stale:
//!   a guaranteed update that keeps it unchanged still writes it back, re-encrypted,
//!   as upstream (that is what rewriting objects after a key rotation relies on).
//!   The registry's PUT and PATCH, though, read and compare-and-swap and skip a
//!   write that changes nothing, so `kubectl replace` of unchanged objects does not
//!   re-encrypt them as it does upstream; an actual change (a label, an annotation)
//!   does.
//! * The uid precondition is checked here on the plain value (the backend would see
//!   ciphertext); the backend still checks the revision.
//! * Events are one storage in core and `events.k8s.io`: the core rule applies (and,
//!   as upstream, `*.events.k8s.io` is refused). Custom resources
//!   (`/registry/<group>/<plural>/`) follow `<plural>.<group>`, `*.<group>` and `*.*`.
//!   Keys of no resource (allocator ranges, the apiserver endpoints' leases) are never
//!   encrypted.
//!
//! * Upstream's metrics ([`EncryptionMetrics`]) count every transformation, by
//!   provider prefix and, inside AES and secretbox providers, by key (`<name>:`), as
//!   upstream's nested prefix transformers do. A read that needs a KMS plugin to
//!   decrypt its seed is counted once, after the seed came: its time leaves out the
//!   plugin's call, which `..._kms_operations_latency_seconds` times instead.
//!
//! * With `--encryption-provider-config-automatic-reload`, [`EncryptionInUse::replace`]
//!   puts a changed file in use whole, once it validates and its KMS plugins are
//!   healthy; operations under way finish with the configuration they resolved. One
//!   `kms-providers` check then follows the configuration in use.
//!
//! # Upstream sources followed
//! `staging/src/k8s.io/apiserver/pkg/storage/value/transformer.go` (prefix
//! transformers, stale reads), `.../value/encrypt/{aes,secretbox,identity}`,
//! `.../server/options/encryptionconfig/config.go` (rule building, masking, resource
//! lookup), `.../apis/apiserver/validation/validation_encryption.go` (validation, same
//! error texts) and `.../storage/etcd3/store.go` (authenticated data).
//!
//! # Left out
//! * KMS v1 (deprecated upstream and off by default since 1.29): refused at start.
//! * KMS v1's metrics (`apiserver_envelope_encryption_dek_cache_fill_percent`,
//!   `..._dek_cache_inter_arrival_time_seconds`).
//! * Upstream's `AllowUnsafeMalformedObjectDeletion` for undecryptable objects.

mod config;
mod kms;
mod metrics;
mod providers;
mod resources;
mod storage;
#[cfg(feature = "testing")]
pub mod testing;

pub use config::{
    API_VERSION, AesConfiguration, ConfigError, Encryption, EncryptionConfiguration,
    IdentityConfiguration, KIND, Key, KmsConfiguration, ProviderConfiguration,
    ResourceConfiguration, SecretboxConfiguration,
};
pub use kms::{KMS_HEALTH_CHECK, KmsHealth, KmsTimings};
pub use metrics::EncryptionMetrics;
pub use providers::TransformError;
pub use storage::{EncryptedStorage, EncryptionInUse};

#[cfg(test)]
mod tests;
