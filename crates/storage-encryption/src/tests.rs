//! Unit tests: configuration decoding and validation, each provider's layout against
//! values built independently (by hand with RustCrypto, or published vectors), key
//! rotation, migration to and from identity, and the decorator's read, list, watch,
//! update and delete paths over a real SQLite store.

use std::sync::Arc;
use std::time::Duration;

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use aes_gcm::aead::{Aead, KeyInit, Payload};
use base64::Engine as _;
use bytes::Bytes;
use ferrokube_storage::{Preconditions, Storage, StorageError, Update, WatchEvent, WatchStream};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use futures::StreamExt;

use crate::metrics::Direction;
use crate::{ConfigError, EncryptedStorage, Encryption, EncryptionConfiguration};

const KEY1: [u8; 32] = [1; 32];
const KEY2: [u8; 32] = [2; 32];
const SECRET_KEY: &str = "/registry/secrets/default/s1";
const PLAIN: &[u8] =
    br#"{"kind":"Secret","metadata":{"name":"s1","uid":"u-1"},"data":{"password":"aHVudGVyMg=="}}"#;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A configuration of `resources` with the given provider list (YAML flow items).
fn yaml(resources: &str, providers: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [{resources}]\n  providers: [{providers}]\n"
    )
}

fn aescbc(name: &str, key: &[u8]) -> String {
    format!(
        "{{aescbc: {{keys: [{{name: {name}, secret: \"{}\"}}]}}}}",
        b64(key)
    )
}

fn aesgcm(name: &str, key: &[u8]) -> String {
    format!(
        "{{aesgcm: {{keys: [{{name: {name}, secret: \"{}\"}}]}}}}",
        b64(key)
    )
}

fn secretbox(name: &str, key: &[u8]) -> String {
    format!(
        "{{secretbox: {{keys: [{{name: {name}, secret: \"{}\"}}]}}}}",
        b64(key)
    )
}

const IDENTITY: &str = "{identity: {}}";

fn compile(text: &str) -> Result<Encryption, ConfigError> {
    Encryption::new(&EncryptionConfiguration::parse(text.as_bytes())?)
}

fn encryption(text: &str) -> Encryption {
    match compile(text) {
        Ok(e) => e,
        Err(e) => panic!("configuration refused: {e}\n{text}"),
    }
}

fn invalid(text: &str) -> String {
    match compile(text) {
        Ok(_) => panic!("configuration accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// A SQLite store and the decorator over it; the store stays reachable for raw reads.
struct Fixture {
    raw: Arc<SqliteStorage>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let raw = SqliteStorage::open(&dir.path().join("state.db"), SqliteOptions::default())
            .expect("open store");
        Fixture {
            raw: Arc::new(raw),
            _dir: dir,
        }
    }

    fn with(&self, text: &str) -> EncryptedStorage {
        self.with_prefix(text, "")
    }

    fn with_prefix(&self, text: &str, prefix: &str) -> EncryptedStorage {
        EncryptedStorage::new(self.raw.clone(), encryption(text), prefix)
    }

    async fn stored(&self, key: &str) -> Bytes {
        self.raw.get(key, None).await.expect("raw get").value
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn internal(err: StorageError) -> String {
    match err {
        StorageError::Internal(message) => message,
        other => panic!("expected an internal error, got {other}"),
    }
}

// ---- configuration

#[test]
fn yaml_and_json_decode_alike() {
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources:\n      - secrets\n      - configmaps\n    providers:\n      - aescbc:\n          keys:\n            - name: key1\n              secret: {}\n      - identity: {{}}\n",
        b64(&KEY1)
    );
    let json = format!(
        r#"{{"apiVersion":"apiserver.config.k8s.io/v1","kind":"EncryptionConfiguration","resources":[{{"resources":["secrets","configmaps"],"providers":[{{"aescbc":{{"keys":[{{"name":"key1","secret":"{}"}}]}}}},{{"identity":{{}}}}]}}]}}"#,
        b64(&KEY1)
    );
    let a = EncryptionConfiguration::parse(text.as_bytes()).expect("yaml");
    let b = EncryptionConfiguration::parse(json.as_bytes()).expect("json");
    assert_eq!(a, b);
    assert_eq!(a.resources[0].resources, ["secrets", "configmaps"]);
    assert!(a.resources[0].providers[1].identity.is_some());
    let printed = format!("{a:?}");
    assert!(
        !printed.contains(&b64(&KEY1)),
        "Debug shows a secret: {printed}"
    );
    Encryption::new(&a).expect("valid");
}

#[test]
fn decoding_is_strict() {
    let unknown = yaml("secrets", IDENTITY).replace("resources:\n-", "extra: 1\nresources:\n-");
    assert!(invalid(&unknown).contains("unknown field `extra`"));
    let typo = yaml("secrets", "{aes-cbc: {keys: []}}");
    assert!(invalid(&typo).contains("unknown field `aes-cbc`"));
    let kind = yaml("secrets", IDENTITY).replace("EncryptionConfiguration", "EncryptionConfig");
    assert!(invalid(&kind).contains("expected apiVersion"));
    let version = yaml("secrets", IDENTITY).replace("/v1", "/v1beta1");
    assert!(invalid(&version).contains("expected apiVersion"));
}

#[test]
fn load_reports_missing_and_empty_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing =
        Encryption::load(&dir.path().join("nope.yaml"), Arc::default()).expect_err("missing");
    assert!(matches!(missing, ConfigError::Read { .. }), "{missing}");
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "").expect("write");
    let err = Encryption::load(&empty, Arc::default()).expect_err("empty");
    assert!(err.to_string().contains("is empty"), "{err}");
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, yaml("secrets", &aescbc("key1", &KEY1))).expect("write");
    Encryption::load(&good, Arc::default()).expect("valid file");
}

#[test]
fn validation_follows_upstream() {
    let key = aescbc("key1", &KEY1);
    let cases: Vec<(String, &str)> = vec![
        (
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n".into(),
            "resources: Required value: at least one resources is required",
        ),
        (
            yaml("secrets", ""),
            "resources[0].providers: Required value: at least one resources[0].providers is required",
        ),
        (
            yaml("", &key),
            "resources[0].resources: Required value: at least one resources[0].resources is required",
        ),
        (
            yaml("secrets", &aescbc("key1", &[7; 8])),
            r#"resources[0].providers[0].aescbc.keys[0].secret: Invalid value: "REDACTED": secret is not of the expected length, got 8, expected one of [16 24 32]"#,
        ),
        (
            yaml("secrets", &secretbox("key1", &[7; 16])),
            "secret is not of the expected length, got 16, expected one of [32]",
        ),
        (
            yaml(
                "secrets",
                "{aesgcm: {keys: [{name: key1, secret: 'not base64!'}]}}",
            ),
            "secrets must be base64 encoded",
        ),
        (
            yaml(
                "secrets",
                &format!("{{aescbc: {{keys: [{{secret: \"{}\"}}]}}}}", b64(&KEY1)),
            ),
            "resources[0].providers[0].aescbc.keys[0].name: Required value: name is a mandatory field for a key",
        ),
        (
            yaml("secrets", "{aescbc: {keys: []}}"),
            "resources[0].providers[0].aescbc.keys: Required value: at least one keys is required",
        ),
        (
            yaml("secrets", "{}"),
            "provider does not contain any of the expected providers",
        ),
        (
            yaml(
                "secrets",
                &format!(
                    "{{identity: {{}}, aescbc: {{keys: [{{name: k, secret: \"{}\"}}]}}}}",
                    b64(&KEY1)
                ),
            ),
            "more than one provider specified in a single element",
        ),
        (
            yaml("secrets, secrets.", &key),
            r#"resources[0].resources: Invalid value: []string{"secrets", "secrets."}: the same resource cannot be specified multiple times"#,
        ),
        (
            yaml("secrets, '*.'", &key),
            "using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed",
        ),
        (
            yaml("'*.*', configmaps", &key),
            "using overlapping resources",
        ),
        (
            yaml("'*'", &key),
            r#"resources[0].resources[0]: Invalid value: "*": use '*.' to encrypt all the resources"#,
        ),
        (
            yaml("Secrets", &key),
            "resource name should not contain capital letters",
        ),
        (
            yaml("serviceipallocations", &key),
            "resources which do not have REST API/s cannot be encrypted",
        ),
        (
            yaml("'*.events.k8s.io'", &key),
            "objects are stored using the 'events' API group in etcd",
        ),
        (yaml("events.events.k8s.io", &key), "Use 'events' instead"),
        (
            yaml("deployments.extensions", &key),
            "'extensions' group has been removed",
        ),
        (
            yaml("'secrets.*'", &key),
            "encrypting the same resource across groups is not supported",
        ),
        (
            yaml(
                "secrets",
                "{kms: {apiVersion: v2, endpoint: 'unix:///tmp/kms.sock'}}",
            ),
            "resources[0].providers[0].kms.name: Required value: name is a mandatory field for a provider",
        ),
        (
            yaml(
                "secrets",
                "{kms: {apiVersion: v2, name: 'a:b', endpoint: 'unix:///tmp/kms.sock'}}",
            ),
            r#"resources[0].providers[0].kms.name: Invalid value: "a:b": invalid KMS provider name a:b, must not contain ':'"#,
        ),
        (
            yaml(
                "secrets",
                "{kms: {apiVersion: v2, name: k, endpoint: 'unix:///a'}}, {kms: {apiVersion: v2, name: k, endpoint: 'unix:///b'}}",
            ),
            r#"resources[0].providers[1].kms.name: Invalid value: "k": duplicate KMS provider name k, names must be unique"#,
        ),
        (
            yaml("secrets", "{kms: {apiVersion: v2, name: k}}"),
            r#"resources[0].providers[0].kms.endpoint: Invalid value: "": endpoint is a mandatory field for a kms"#,
        ),
        (
            yaml(
                "secrets",
                "{kms: {apiVersion: v2, name: k, endpoint: 'tcp://127.0.0.1:1'}}",
            ),
            r#"resources[0].providers[0].kms.endpoint: Invalid value: "tcp://127.0.0.1:1": unsupported scheme "tcp" for KMS provider, only unix is supported"#,
        ),
        (
            yaml(
                "secrets",
                "{kms: {apiVersion: v2, name: k, endpoint: 'unix:///a', timeout: -1s}}",
            ),
            "resources[0].providers[0].kms.timeout: Invalid value: -1s: timeout should be a positive value",
        ),
        (
            yaml(
                "secrets",
                "{kms: {apiVersion: v2, name: k, endpoint: 'unix:///a', cachesize: 10}}",
            ),
            "resources[0].providers[0].kms.cachesize: Invalid value: 10: cachesize is not supported in v2",
        ),
        (
            yaml(
                "secrets",
                "{kms: {apiVersion: v3, name: k, endpoint: 'unix:///a'}}",
            ),
            r#"resources[0].providers[0].kms.apiVersion: Invalid value: "v3": unsupported apiVersion apiVersion for KMS provider, only v1 and v2 are supported"#,
        ),
    ];
    for (text, want) in cases {
        let got = invalid(&text);
        assert!(got.contains(want), "\n got: {got}\nwant: {want}\n{text}");
        assert!(!got.contains(&b64(&KEY1)), "an error shows a secret: {got}");
    }
    // Several errors read as upstream's aggregate.
    let two = invalid(&yaml("Secrets", "{}"));
    assert!(two.starts_with('[') && two.contains(", "), "{two}");
}

#[test]
fn rules_masked_by_an_earlier_wildcard_are_refused() {
    let key = aescbc("key1", &KEY1);
    let two = |first: &str, second: &str| {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [{first}]\n  providers: [{key}]\n- resources: [{second}]\n  providers: [{IDENTITY}]\n"
        )
    };
    let err = invalid(&two("'*.'", "secrets"));
    assert!(
        err.contains(r#"resource "secrets" is masked by earlier rule "*.""#),
        "{err}"
    );
    let err = invalid(&two("'*.*'", "deployments.apps"));
    assert!(
        err.contains(r#"resource "deployments.apps" is masked by earlier rule "*.*""#),
        "{err}"
    );
    let err = invalid(&two("'*.apps'", "'*.apps'"));
    assert!(err.contains("masked by earlier rule \"*.apps\""), "{err}");
    // The specific rule first is what upstream asks for.
    encryption(&two("secrets", "'*.'"));
    encryption(&two("deployments.apps", "'*.*'"));
}

#[test]
fn upstream_leniencies_are_warnings() {
    let text = yaml(
        "secrets",
        &format!(
            "{{aescbc: {{keys: [{{name: k, secret: \"{}\"}}, {{name: k, secret: \"{}\"}}]}}}}, {IDENTITY}, {IDENTITY}",
            b64(&KEY1),
            b64(&KEY2)
        ),
    );
    let e = encryption(&text);
    assert_eq!(e.warnings().len(), 2, "{:?}", e.warnings());
    assert!(e.warnings()[0].contains("key name \"k\" is used more than once"));
    assert!(e.warnings()[1].contains("identity is listed more than once"));
    let shown = format!("{e:?}");
    assert!(
        !shown.contains(&b64(&KEY1)) && shown.contains("aescbc"),
        "{shown}"
    );
}

// ---- providers, against independently built values

#[tokio::test]
async fn aescbc_layout_matches_a_value_built_by_hand() {
    let f = Fixture::new();
    let s = f.with(&yaml("secrets", &aescbc("key1", &KEY1)));
    let iv = [9u8; 16];
    let body = cbc::Encryptor::<aes::Aes256>::new(&KEY1.into(), &iv.into())
        .encrypt_padded_vec_mut::<Pkcs7>(PLAIN);
    let by_hand = [b"k8s:enc:aescbc:v1:key1:".as_slice(), &iv, &body].concat();
    f.raw
        .create(SECRET_KEY, Bytes::from(by_hand))
        .await
        .expect("raw create");
    assert_eq!(s.get(SECRET_KEY, None).await.expect("get").value, PLAIN);

    // Our own write has the same layout, byte for byte, and decrypts by hand.
    let revision = f
        .raw
        .get(SECRET_KEY, None)
        .await
        .expect("raw get")
        .mod_revision;
    s.compare_and_swap(SECRET_KEY, revision, Bytes::from_static(PLAIN))
        .await
        .expect("rewrite");
    let stored = f.stored(SECRET_KEY).await;
    let rest = stored
        .strip_prefix(b"k8s:enc:aescbc:v1:key1:".as_slice())
        .expect("prefix");
    let (iv, body) = rest.split_at(16);
    assert_eq!(body.len() % 16, 0);
    assert_eq!(
        body.len(),
        (PLAIN.len() / 16 + 1) * 16,
        "PKCS#7 always pads"
    );
    let iv: [u8; 16] = iv.try_into().expect("iv");
    let plain = cbc::Decryptor::<aes::Aes256>::new(&KEY1.into(), &iv.into())
        .decrypt_padded_vec_mut::<Pkcs7>(body)
        .expect("decrypts by hand");
    assert_eq!(plain, PLAIN);
    assert!(!contains(&stored, b"aHVudGVyMg=="));
}

#[test]
fn aescbc_matches_the_nist_vector() {
    // NIST SP 800-38A F.2.1 (CBC-AES128): the first ciphertext block. With PKCS#7 a
    // full block of padding follows, so the value is two blocks.
    let key = hex("2b7e151628aed2a6abf7158809cf4f3c");
    let iv = hex("000102030405060708090a0b0c0d0e0f");
    let block = hex("6bc1bee22e409f96e93d7e117393172a");
    let e = encryption(&yaml("secrets", &aescbc("nist", &key)));
    let chain = e.resolver.resolve(SECRET_KEY).expect("configured");
    let body = cbc::Encryptor::<aes::Aes128>::new_from_slices(&key, &iv)
        .expect("sizes")
        .encrypt_padded_vec_mut::<Pkcs7>(&block);
    assert_eq!(body[..16], hex("7649abac8119b246cee98e9b12e9197d")[..]);
    let stored = Bytes::from([b"k8s:enc:aescbc:v1:nist:".as_slice(), &iv, &body].concat());
    let location = crate::providers::Location {
        backend_prefix: "",
        key: SECRET_KEY,
    };
    let (plain, stale) = chain
        .decrypt(&stored, location, &e.metrics)
        .expect("decrypts");
    assert_eq!(plain, block);
    assert!(!stale);
    // Counted as upstream's nested prefix transformers count: the provider's prefix
    // and, inside it, the key's.
    let read = |prefix| {
        e.metrics
            .transformations(Direction::FromStorage, prefix, "OK")
    };
    assert_eq!((read("k8s:enc:aescbc:v1:"), read("nist:")), (1, 1));
}

#[tokio::test]
async fn aesgcm_authenticates_the_full_etcd_key() {
    let f = Fixture::new();
    let text = yaml("secrets", &aesgcm("key1", &KEY1));
    let nonce = [5u8; 12];
    let cipher = aes_gcm::Aes256Gcm::new_from_slice(&KEY1).expect("key");
    let seal = |aad: &[u8]| {
        let body = cipher
            .encrypt(
                aes_gcm::Nonce::from_slice(&nonce),
                Payload { msg: PLAIN, aad },
            )
            .expect("seal");
        Bytes::from([b"k8s:enc:aesgcm:v1:key1:".as_slice(), &nonce, &body].concat())
    };
    // As upstream with `--etcd-prefix=/registry` and key `/secrets/default/s1`.
    f.raw
        .create(SECRET_KEY, seal(SECRET_KEY.as_bytes()))
        .await
        .expect("raw");
    assert_eq!(
        f.with(&text)
            .get(SECRET_KEY, None)
            .await
            .expect("get")
            .value,
        PLAIN
    );
    // The same bytes under another key do not authenticate.
    let other = "/registry/secrets/default/s2";
    f.raw
        .create(other, seal(SECRET_KEY.as_bytes()))
        .await
        .expect("raw");
    let err = internal(
        f.with(&text)
            .get(other, None)
            .await
            .expect_err("moved value"),
    );
    assert!(
        err.contains("cipher: message authentication failed"),
        "{err}"
    );
    assert!(err.contains(other), "{err}");
    // A backend prefix is part of the authenticated key.
    let third = "/registry/secrets/default/s3";
    f.raw
        .create(third, seal(b"/etcd/registry/secrets/default/s3"))
        .await
        .expect("raw");
    assert!(f.with(&text).get(third, None).await.is_err());
    let prefixed = f.with_prefix(&text, "/etcd");
    assert_eq!(prefixed.get(third, None).await.expect("get").value, PLAIN);
    // Our writes: 12-byte nonce + ciphertext + 16-byte tag, sealed with the full key.
    prefixed
        .create("/registry/secrets/default/s4", Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let stored = f.stored("/registry/secrets/default/s4").await;
    let rest = stored
        .strip_prefix(b"k8s:enc:aesgcm:v1:key1:".as_slice())
        .expect("prefix");
    assert_eq!(rest.len(), 12 + PLAIN.len() + 16);
    let opened = cipher
        .decrypt(
            aes_gcm::Nonce::from_slice(&rest[..12]),
            Payload {
                msg: &rest[12..],
                aad: b"/etcd/registry/secrets/default/s4",
            },
        )
        .expect("opens by hand");
    assert_eq!(opened, PLAIN);
}

#[tokio::test]
async fn secretbox_reads_the_nacl_vector() {
    // golang.org/x/crypto/nacl/secretbox TestSecretBox, "generated using the C
    // implementation of NaCl": key 32×1, nonce 24×2, message 64×3.
    let f = Fixture::new();
    let s = f.with(&yaml("secrets", &secretbox("key1", &[1; 32])));
    let sealed = hex(
        "8442bc313f4626f1359e3b50122b6ce6fe66ddfe7d39d14e637eb4fd5b45beadab55198df6ab5368439792a23c87db70acb6156dc5ef957ac04f6276cf6093b84be77ff0849cc33e34b7254d5a8f65ad",
    );
    let stored = [
        b"k8s:enc:secretbox:v1:key1:".as_slice(),
        &[2u8; 24],
        &sealed,
    ]
    .concat();
    f.raw
        .create(SECRET_KEY, Bytes::from(stored))
        .await
        .expect("raw");
    assert_eq!(
        s.get(SECRET_KEY, None).await.expect("get").value,
        vec![3u8; 64]
    );
    // Our write: prefix, 24-byte nonce, 16-byte tag, ciphertext.
    s.create("/registry/secrets/default/s2", Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let ours = f.stored("/registry/secrets/default/s2").await;
    let rest = ours
        .strip_prefix(b"k8s:enc:secretbox:v1:key1:".as_slice())
        .expect("prefix");
    assert_eq!(rest.len(), 24 + 16 + PLAIN.len());
    assert_eq!(
        s.get("/registry/secrets/default/s2", None)
            .await
            .expect("get")
            .value,
        PLAIN
    );
}

#[tokio::test]
async fn every_provider_and_key_size_round_trips() {
    let f = Fixture::new();
    let providers = [
        aescbc("k", &[3; 16]),
        aescbc("k", &[3; 24]),
        aescbc("k", &[3; 32]),
        aesgcm("k", &[3; 16]),
        aesgcm("k", &[3; 24]),
        aesgcm("k", &[3; 32]),
        secretbox("k", &[3; 32]),
        IDENTITY.to_string(),
    ];
    for (i, provider) in providers.iter().enumerate() {
        let s = f.with(&yaml("secrets", provider));
        let key = format!("/registry/secrets/ns/s{i}");
        s.create(&key, Bytes::from_static(PLAIN))
            .await
            .expect("create");
        let stored = f.stored(&key).await;
        if provider == IDENTITY {
            assert_eq!(stored, PLAIN);
        } else {
            assert!(stored.starts_with(b"k8s:enc:"), "{provider}");
            assert!(!contains(&stored, b"hunter"), "{provider}");
            assert!(!contains(&stored, b"aHVudGVyMg=="), "{provider}");
        }
        assert_eq!(
            s.get(&key, None).await.expect("get").value,
            PLAIN,
            "{provider}"
        );
        // Empty values too (CBC pads them to one block).
        let empty = format!("{key}-empty");
        s.create(&empty, Bytes::new()).await.expect("create empty");
        assert_eq!(s.get(&empty, None).await.expect("get").value, Bytes::new());
    }
}

// ---- rotation and migration

#[tokio::test]
async fn a_second_key_reads_old_data_after_rotation() {
    let f = Fixture::new();
    let before = f.with(&yaml("secrets", &aescbc("key1", &KEY1)));
    before
        .create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let rotated_text = yaml(
        "secrets",
        &format!(
            "{{aescbc: {{keys: [{{name: key2, secret: \"{}\"}}, {{name: key1, secret: \"{}\"}}]}}}}",
            b64(&KEY2),
            b64(&KEY1)
        ),
    );
    let rotated = f.with(&rotated_text);
    assert_eq!(
        rotated.get(SECRET_KEY, None).await.expect("get").value,
        PLAIN
    );
    // New writes use the new first key.
    rotated
        .create("/registry/secrets/default/new", Bytes::from_static(PLAIN))
        .await
        .expect("create");
    assert!(
        f.stored("/registry/secrets/default/new")
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key2:")
    );
    // A no-op update of a stale value rewrites it with the new key.
    let kv = rotated
        .guaranteed_update(SECRET_KEY, &Preconditions::default(), &mut |_| {
            Ok(Update::Keep)
        })
        .await
        .expect("update");
    assert_eq!(kv.value, PLAIN);
    assert!(
        f.stored(SECRET_KEY)
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key2:")
    );
    // Now current: a second no-op leaves the revision alone.
    let again = rotated
        .guaranteed_update(SECRET_KEY, &Preconditions::default(), &mut |_| {
            Ok(Update::Keep)
        })
        .await
        .expect("update");
    assert_eq!(again.mod_revision, kv.mod_revision);
    // Dropping the old key once everything is rewritten still reads it all.
    let only_new = f.with(&yaml("secrets", &aescbc("key2", &KEY2)));
    assert_eq!(
        only_new.get(SECRET_KEY, None).await.expect("get").value,
        PLAIN
    );
}

#[tokio::test]
async fn providers_rotate_across_kinds() {
    let f = Fixture::new();
    f.with(&yaml("secrets", &secretbox("old", &KEY1)))
        .create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let s = f.with(&yaml(
        "secrets",
        &format!("{}, {}", aesgcm("new", &KEY2), secretbox("old", &KEY1)),
    ));
    assert_eq!(s.get(SECRET_KEY, None).await.expect("get").value, PLAIN);
}

#[tokio::test]
async fn identity_first_reads_data_encrypted_earlier() {
    let f = Fixture::new();
    f.with(&yaml("secrets", &aescbc("key1", &KEY1)))
        .create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let decrypting = f.with(&yaml(
        "secrets",
        &format!("{IDENTITY}, {}", aescbc("key1", &KEY1)),
    ));
    assert_eq!(
        decrypting.get(SECRET_KEY, None).await.expect("get").value,
        PLAIN
    );
    decrypting
        .create("/registry/secrets/default/plain", Bytes::from_static(PLAIN))
        .await
        .expect("create");
    assert_eq!(f.stored("/registry/secrets/default/plain").await, PLAIN);
    // The stale encrypted value is written back in plain on a no-op update.
    decrypting
        .guaranteed_update(SECRET_KEY, &Preconditions::default(), &mut |_| {
            Ok(Update::Keep)
        })
        .await
        .expect("update");
    assert_eq!(f.stored(SECRET_KEY).await, PLAIN);
}

#[tokio::test]
async fn encrypting_config_reads_plain_data_with_identity_listed() {
    let f = Fixture::new();
    f.raw
        .create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("raw");
    let with_identity = f.with(&yaml(
        "secrets",
        &format!("{}, {IDENTITY}", aescbc("key1", &KEY1)),
    ));
    assert_eq!(
        with_identity
            .get(SECRET_KEY, None)
            .await
            .expect("get")
            .value,
        PLAIN
    );
    let without = f.with(&yaml("secrets", &aescbc("key1", &KEY1)));
    let err = internal(
        without
            .get(SECRET_KEY, None)
            .await
            .expect_err("plain unreadable"),
    );
    assert_eq!(
        err,
        format!("unable to transform key {SECRET_KEY:?}: no matching prefix found")
    );
}

// ---- wrong keys and undecryptable data

#[tokio::test]
async fn wrong_keys_are_errors_naming_the_key() {
    let f = Fixture::new();
    f.with(&yaml("secrets", &aesgcm("key1", &KEY1)))
        .create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let cases = [
        (
            aesgcm("key1", &KEY2),
            "cipher: message authentication failed",
        ),
        (
            aesgcm("other", &KEY1),
            "no matching key was found for the provided AES transformer",
        ),
        (secretbox("key1", &KEY1), "no matching prefix found"),
        (IDENTITY.to_string(), "no matching prefix found"),
    ];
    for (provider, want) in cases {
        let s = f.with(&yaml("secrets", &provider));
        let err = internal(s.get(SECRET_KEY, None).await.expect_err("unreadable"));
        assert!(
            err.contains(want) && err.contains(SECRET_KEY),
            "{provider}: {err}"
        );
        // Lists hand it on empty (the watch cache skips it), never fail.
        let listed = s
            .list("/registry/secrets/", &Default::default())
            .await
            .expect("list");
        assert_eq!(listed.items.len(), 1, "{provider}");
        assert!(listed.items[0].value.is_empty(), "{provider}");
    }
    // Two keys of one name: both tried, both errors reported.
    let two = yaml(
        "secrets",
        &format!(
            "{{aesgcm: {{keys: [{{name: key1, secret: \"{}\"}}, {{name: key1, secret: \"{}\"}}]}}}}",
            b64(&KEY2),
            b64(&[4; 32])
        ),
    );
    let err = internal(
        f.with(&two)
            .get(SECRET_KEY, None)
            .await
            .expect_err("unreadable"),
    );
    assert!(
        err.ends_with("cipher: message authentication failed"),
        "{err}"
    );
    let two_right = two.replace(&b64(&[4; 32]), &b64(&KEY1));
    assert_eq!(
        f.with(&two_right)
            .get(SECRET_KEY, None)
            .await
            .expect("second key")
            .value,
        PLAIN
    );
}

#[tokio::test]
async fn corrupt_values_are_errors_not_panics() {
    let f = Fixture::new();
    let s = f.with(&yaml(
        "secrets",
        &format!(
            "{}, {}, {}",
            aescbc("c", &KEY1),
            aesgcm("g", &KEY1),
            secretbox("s", &KEY1)
        ),
    ));
    let values: Vec<Vec<u8>> = vec![
        b"k8s:enc:aescbc:v1:c:".to_vec(),
        b"k8s:enc:aescbc:v1:c:0123456789abcdef".to_vec(),
        b"k8s:enc:aescbc:v1:c:0123456789abcdef01234".to_vec(),
        [b"k8s:enc:aescbc:v1:c:".as_slice(), &[0u8; 48]].concat(),
        b"k8s:enc:aesgcm:v1:g:short".to_vec(),
        [b"k8s:enc:aesgcm:v1:g:".as_slice(), &[0u8; 40]].concat(),
        b"k8s:enc:secretbox:v1:s:short".to_vec(),
        [b"k8s:enc:secretbox:v1:s:".as_slice(), &[0u8; 60]].concat(),
        b"k8s:enc:kms:v2:vault:whatever".to_vec(),
    ];
    for (i, value) in values.into_iter().enumerate() {
        let key = format!("/registry/secrets/ns/bad{i}");
        f.raw.create(&key, Bytes::from(value)).await.expect("raw");
        let err = internal(s.get(&key, None).await.expect_err("corrupt"));
        assert!(err.contains(&key), "{err}");
    }
    let err = internal(
        s.get("/registry/secrets/ns/bad0", None)
            .await
            .expect_err("corrupt"),
    );
    assert!(
        err.contains("the stored data was shorter than the required size"),
        "{err}"
    );
    let err = internal(
        s.get("/registry/secrets/ns/bad2", None)
            .await
            .expect_err("corrupt"),
    );
    assert!(err.contains("not a multiple of the block size"), "{err}");
}

#[tokio::test]
async fn unconfigured_keys_pass_but_never_as_ciphertext() {
    let f = Fixture::new();
    let s = f.with(&yaml("secrets", &aescbc("key1", &KEY1)));
    let cm = "/registry/configmaps/default/c1";
    s.create(cm, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    assert_eq!(f.stored(cm).await, PLAIN);
    // Encrypted data where no rule applies (the rule was removed): an error.
    let old = "/registry/configmaps/default/c2";
    f.raw
        .create(
            old,
            Bytes::from_static(b"k8s:enc:aescbc:v1:key1:0123456789abcdef"),
        )
        .await
        .expect("raw");
    let err = internal(s.get(old, None).await.expect_err("ciphertext"));
    assert!(
        err.contains("identity transformer tried to read encrypted data"),
        "{err}"
    );
}

// ---- which keys a rule covers

#[tokio::test]
async fn rules_cover_builtin_custom_and_wildcard_resources() {
    let f = Fixture::new();
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [deployments.apps, events, crontabs.stable.example.com]\n  providers: [{}]\n- resources: ['*.apps', '*.example.org']\n  providers: [{}]\n- resources: ['*.']\n  providers: [{}]\n",
        aescbc("specific", &KEY1),
        aesgcm("group", &KEY1),
        secretbox("core", &KEY1),
    );
    let s = f.with(&text);
    let cases = [
        (
            "/registry/deployments/ns/d",
            Some("k8s:enc:aescbc:v1:specific:"),
        ),
        (
            "/registry/statefulsets/ns/d",
            Some("k8s:enc:aesgcm:v1:group:"),
        ),
        ("/registry/events/ns/e", Some("k8s:enc:aescbc:v1:specific:")),
        (
            "/registry/stable.example.com/crontabs/ns/c",
            Some("k8s:enc:aescbc:v1:specific:"),
        ),
        ("/registry/stable.example.com/others/ns/c", None),
        ("/registry/widgets.example.org/gizmos/g", None),
        (
            "/registry/example.org/gizmos/g",
            Some("k8s:enc:aesgcm:v1:group:"),
        ),
        ("/registry/secrets/ns/s", Some("k8s:enc:secretbox:v1:core:")),
        (
            "/registry/services/specs/ns/s",
            Some("k8s:enc:secretbox:v1:core:"),
        ),
        ("/registry/minions/n", Some("k8s:enc:secretbox:v1:core:")),
        ("/registry/jobs/ns/j", None),
        ("/registry/ranges/servicenodeports/30000", None),
        ("/registry/masterleases/10.0.0.1", None),
        ("/other/key", None),
    ];
    for (key, want) in cases {
        s.create(key, Bytes::from_static(PLAIN))
            .await
            .expect("create");
        let stored = f.stored(key).await;
        match want {
            Some(prefix) => assert!(stored.starts_with(prefix.as_bytes()), "{key}"),
            None => assert_eq!(stored, PLAIN, "{key}"),
        }
        assert_eq!(s.get(key, None).await.expect("get").value, PLAIN, "{key}");
    }
    // `*.*` covers everything of a resource, custom ones too, but no other key.
    let all = f.with(&yaml("'*.*'", &aescbc("all", &KEY2)));
    for key in [
        "/registry/jobs/ns/j2",
        "/registry/widgets.example.org/gizmos/g2",
    ] {
        all.create(key, Bytes::from_static(PLAIN))
            .await
            .expect("create");
        assert!(
            f.stored(key).await.starts_with(b"k8s:enc:aescbc:v1:all:"),
            "{key}"
        );
    }
    all.create("/registry/ranges/serviceips/x", Bytes::from_static(PLAIN))
        .await
        .expect("create");
    assert_eq!(f.stored("/registry/ranges/serviceips/x").await, PLAIN);
}

// ---- the decorator's other paths

#[tokio::test]
async fn list_and_watch_return_plain_values() {
    let f = Fixture::new();
    let s = f.with(&yaml("secrets", &aescbc("key1", &KEY1)));
    let start = s.current_revision().await.expect("revision");
    let mut watch = s.watch("/registry/", start).await.expect("watch");
    let a = "/registry/secrets/ns/a";
    s.create(a, Bytes::from_static(b"{\"v\":1}"))
        .await
        .expect("create");
    let kv = s.get(a, None).await.expect("get");
    s.compare_and_swap(a, kv.mod_revision, Bytes::from_static(b"{\"v\":2}"))
        .await
        .expect("cas");
    s.delete(a, &Preconditions::default())
        .await
        .expect("delete");
    s.create("/registry/secrets/ns/b", Bytes::from_static(b"{\"v\":3}"))
        .await
        .expect("create");
    s.create(
        "/registry/configmaps/ns/c",
        Bytes::from_static(b"{\"v\":4}"),
    )
    .await
    .expect("create");

    match next(&mut watch).await {
        WatchEvent::Added(kv) => assert_eq!(kv.value, &b"{\"v\":1}"[..]),
        other => panic!("{other:?}"),
    }
    match next(&mut watch).await {
        WatchEvent::Modified { current, previous } => {
            assert_eq!(current.value, &b"{\"v\":2}"[..]);
            assert_eq!(previous.value, &b"{\"v\":1}"[..]);
        }
        other => panic!("{other:?}"),
    }
    match next(&mut watch).await {
        WatchEvent::Deleted { previous, .. } => assert_eq!(previous.value, &b"{\"v\":2}"[..]),
        other => panic!("{other:?}"),
    }
    let listed = s
        .list("/registry/", &Default::default())
        .await
        .expect("list");
    let values: Vec<&[u8]> = listed.items.iter().map(|kv| kv.value.as_ref()).collect();
    assert_eq!(values, [&b"{\"v\":4}"[..], b"{\"v\":3}"]);
    // A watch from the start replays history decrypted, too.
    let mut replay = s.watch("/registry/secrets/", start).await.expect("watch");
    assert!(
        matches!(next(&mut replay).await, WatchEvent::Added(kv) if kv.value == b"{\"v\":1}"[..])
    );
}

#[tokio::test]
async fn an_undecryptable_event_is_handed_on_empty_and_the_watch_goes_on() {
    let f = Fixture::new();
    let s = f.with(&yaml("secrets", &aescbc("key1", &KEY1)));
    let mut watch = s.watch("/registry/secrets/", 0).await.expect("watch");
    f.raw
        .create(
            "/registry/secrets/ns/x",
            Bytes::from_static(b"{\"plain\":true}"),
        )
        .await
        .expect("raw");
    s.create("/registry/secrets/ns/y", Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let mut next = async || loop {
        match tokio::time::timeout(Duration::from_secs(20), watch.next()).await {
            Ok(Some(Ok(WatchEvent::Progress(_)))) => continue,
            Ok(Some(Ok(event))) => break event,
            other => panic!("expected an event, got {other:?}"),
        }
    };
    match next().await {
        WatchEvent::Added(kv) => {
            assert_eq!(kv.key, "/registry/secrets/ns/x");
            assert!(kv.value.is_empty());
        }
        other => panic!("{other:?}"),
    }
    match next().await {
        WatchEvent::Added(kv) => assert_eq!(kv.value, PLAIN),
        other => panic!("{other:?}"),
    }
    let err = internal(
        s.get("/registry/secrets/ns/x", None)
            .await
            .expect_err("unreadable"),
    );
    assert!(err.contains("/registry/secrets/ns/x") && err.contains("no matching prefix found"));
}

#[tokio::test]
async fn uid_preconditions_see_the_plain_value() {
    let f = Fixture::new();
    let s = f.with(&yaml("secrets", &aesgcm("key1", &KEY1)));
    s.create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let right = Preconditions {
        revision: None,
        uid: Some("u-1".into()),
    };
    let wrong = Preconditions {
        revision: None,
        uid: Some("u-2".into()),
    };
    let mut seen = Vec::new();
    let kv = s
        .guaranteed_update(SECRET_KEY, &right, &mut |current| {
            seen.push(current.map(|kv| kv.value.clone()));
            Ok(Update::Write(Bytes::from_static(
                br#"{"metadata":{"uid":"u-1"},"n":2}"#,
            )))
        })
        .await
        .expect("update with the right uid");
    assert_eq!(seen, [Some(Bytes::from_static(PLAIN))]);
    assert_eq!(kv.value, &br#"{"metadata":{"uid":"u-1"},"n":2}"#[..]);
    assert!(
        f.stored(SECRET_KEY)
            .await
            .starts_with(b"k8s:enc:aesgcm:v1:key1:")
    );
    let err = s
        .guaranteed_update(SECRET_KEY, &wrong, &mut |_| Ok(Update::Keep))
        .await
        .expect_err("wrong uid");
    assert!(err.is_conflict(), "{err}");
    let stale = Preconditions::revision(kv.mod_revision - 1);
    assert!(
        s.guaranteed_update(SECRET_KEY, &stale, &mut |_| Ok(Update::Keep))
            .await
            .expect_err("old revision")
            .is_conflict()
    );
    let missing = s
        .guaranteed_update("/registry/secrets/ns/missing", &right, &mut |_| {
            Ok(Update::Keep)
        })
        .await
        .expect_err("missing");
    assert!(missing.is_not_found(), "{missing}");
    // An abort of the caller's own comes back as it was.
    let aborted = s
        .guaranteed_update(SECRET_KEY, &right, &mut |_| Err("no thanks".into()))
        .await
        .expect_err("aborted");
    assert!(
        matches!(&aborted, StorageError::Aborted(e) if e.to_string() == "no thanks"),
        "{aborted}"
    );

    assert!(
        s.delete(SECRET_KEY, &wrong)
            .await
            .expect_err("wrong uid")
            .is_conflict()
    );
    let deleted = s.delete(SECRET_KEY, &right).await.expect("delete");
    assert_eq!(
        deleted.previous.value,
        &br#"{"metadata":{"uid":"u-1"},"n":2}"#[..]
    );
    assert!(
        s.get(SECRET_KEY, None)
            .await
            .expect_err("gone")
            .is_not_found()
    );
}

#[tokio::test]
async fn guaranteed_update_creates_encrypted() {
    let f = Fixture::new();
    let s = f.with(&yaml("secrets", &secretbox("key1", &KEY1)));
    let kv = s
        .guaranteed_update(SECRET_KEY, &Preconditions::default(), &mut |current| {
            assert!(current.is_none());
            Ok(Update::Write(Bytes::from_static(PLAIN)))
        })
        .await
        .expect("create by update");
    assert_eq!(kv.value, PLAIN);
    assert!(
        f.stored(SECRET_KEY)
            .await
            .starts_with(b"k8s:enc:secretbox:v1:key1:")
    );
}

async fn next(watch: &mut WatchStream) -> WatchEvent {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), watch.next()).await {
            Ok(Some(Ok(WatchEvent::Progress(_)))) => continue,
            Ok(Some(Ok(event))) => return event,
            other => panic!("no event: {other:?}"),
        }
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn kms_v1_is_refused_and_v2_accepted() {
    let err = invalid(&yaml(
        "secrets",
        "{kms: {name: old, endpoint: 'unix:///tmp/kms.sock'}}",
    ));
    assert!(
        err.contains("could not configure KMS plugin \"old\": KMSv1 is deprecated"),
        "{err}"
    );
    let encryption = compile(&yaml(
        "secrets",
        "{kms: {apiVersion: v2, name: vault, endpoint: 'unix:///tmp/kms.sock', timeout: 1s}}",
    ))
    .expect("a v2 provider is accepted");
    assert_eq!(
        encryption.kms_health().map(|h| h.name()),
        Some("kms-providers")
    );
}

// ---- the configuration replaced while in use

/// A secret written under key2, then listed (and so left out) by a decorator that
/// has only key1.
async fn left_out_by_a_list() -> (Fixture, EncryptedStorage, ferrokube_storage::ListResult) {
    let f = Fixture::new();
    f.with(&yaml("secrets", &aescbc("k2", &KEY2)))
        .create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    let s = f.with(&yaml("secrets", &aescbc("k1", &KEY1)));
    let listed = s
        .list("/registry/", &Default::default())
        .await
        .expect("list");
    (f, s, listed)
}

#[tokio::test]
async fn a_replaced_configuration_reads_what_the_old_one_left_out_after_one_relist() {
    let (_store, s, listed) = left_out_by_a_list().await;
    let item = listed
        .items
        .iter()
        .find(|kv| kv.key == SECRET_KEY)
        .expect("listed");
    assert!(item.value.is_empty(), "left out");
    let mut watch = s.watch("/registry/", listed.revision).await.expect("watch");

    let in_use = s.in_use();
    let both = yaml(
        "secrets",
        &format!("{}, {}", aescbc("k1", &KEY1), aescbc("k2", &KEY2)),
    );
    in_use
        .replace(&both, Default::default())
        .await
        .expect("replace");
    // The watch ends, so that its consumer lists again, and then reads the value.
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the watch ends in time");
    assert!(matches!(ended, Some(Err(_))), "{ended:?}");
    let listed = s
        .list("/registry/", &Default::default())
        .await
        .expect("list");
    let item = listed
        .items
        .iter()
        .find(|kv| kv.key == SECRET_KEY)
        .expect("listed");
    assert_eq!(&item.value[..], PLAIN);
    // Nothing is left out any more: the next watch carries on.
    let mut watch = s.watch("/registry/", listed.revision).await.expect("watch");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), watch.next())
            .await
            .is_err(),
        "a watch with nothing left out does not end"
    );
    // A reload that does not load changes nothing.
    assert!(
        in_use
            .replace("kind: Nope\n", Default::default())
            .await
            .is_err()
    );
    assert_eq!(
        &s.get(SECRET_KEY, None).await.expect("get").value[..],
        PLAIN
    );
}

#[tokio::test]
async fn a_value_left_out_and_then_deleted_makes_no_relists() {
    let (f, s, listed) = left_out_by_a_list().await;
    let mut watch = s.watch("/registry/", listed.revision).await.expect("watch");
    f.raw
        .delete(SECRET_KEY, &Preconditions::default())
        .await
        .expect("delete underneath");
    match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
        Ok(Some(Ok(WatchEvent::Deleted { previous, .. }))) => assert_eq!(previous.key, SECRET_KEY),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.left_out(), 0);
}

// ---- kms

#[tokio::test]
async fn an_update_of_a_value_sealed_with_an_unknown_seed_asks_the_plugin_then_rewrites_it() {
    let f = Fixture::new();
    let socket = f._dir.path().join("kms.sock");
    let plugin = crate::testing::TestKmsPlugin::start(&socket, "key-1").expect("plugin");
    let config = yaml(
        "secrets",
        &format!(
            "{{kms: {{apiVersion: v2, name: vault, endpoint: '{}'}}}}",
            plugin.endpoint()
        ),
    );
    let first = encryption(&config);
    first.start_kms(Default::default()).await;
    let first = EncryptedStorage::new(f.raw.clone(), first, "");
    first
        .create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    // Another server: its own seed, and no copy of the first one's.
    let second = encryption(&config);
    second.start_kms(Default::default()).await;
    let second = EncryptedStorage::new(f.raw.clone(), second, "");
    assert_eq!(plugin.encrypt_calls(), 2);
    let mut seen = None;
    let updated = second
        .guaranteed_update(SECRET_KEY, &Preconditions::default(), &mut |current| {
            seen = current.map(|kv| kv.value.clone());
            Ok(Update::Write(Bytes::from_static(b"{\"v\":2}")))
        })
        .await
        .expect("update");
    assert_eq!(seen.as_deref(), Some(PLAIN));
    assert_eq!(&updated.value[..], b"{\"v\":2}");
    assert_eq!(plugin.decrypt_calls(), 1, "the first seed, decrypted once");
    // Stored anew under the second server's seed: the first reads it only through
    // the plugin too.
    assert_eq!(
        &first.get(SECRET_KEY, None).await.expect("get").value[..],
        b"{\"v\":2}"
    );
    assert_eq!(plugin.decrypt_calls(), 2);
}

// ---- metrics

#[tokio::test]
async fn transformations_are_counted_by_prefix_and_outcome() {
    use Direction::{FromStorage, ToStorage};
    let f = Fixture::new();
    let gcm = f.with(&yaml("secrets", &aesgcm("key1", &KEY1)));
    gcm.create(SECRET_KEY, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    gcm.get(SECRET_KEY, None).await.expect("get");
    let metrics = gcm.in_use().current().metrics().clone();
    let count = |direction, prefix, status| metrics.transformations(direction, prefix, status);
    assert_eq!(count(ToStorage, "k8s:enc:aesgcm:v1:", "OK"), 1);
    assert_eq!(count(ToStorage, "key1:", "OK"), 1);
    assert_eq!(count(FromStorage, "k8s:enc:aesgcm:v1:", "OK"), 1);
    assert_eq!(count(FromStorage, "key1:", "OK"), 1);

    // Identity first: its writes carry the empty prefix, its reads `identity`.
    let plain_first = f.with(&yaml(
        "secrets",
        &format!("{IDENTITY}, {}", aesgcm("key1", &KEY1)),
    ));
    let plain_key = "/registry/secrets/default/s2";
    plain_first
        .create(plain_key, Bytes::from_static(PLAIN))
        .await
        .expect("create");
    plain_first.get(plain_key, None).await.expect("get");
    plain_first.get(SECRET_KEY, None).await.expect("get");
    let metrics = plain_first.in_use().current().metrics().clone();
    let count = |direction, prefix, status| metrics.transformations(direction, prefix, status);
    assert_eq!(count(ToStorage, "", "OK"), 1);
    assert_eq!(count(FromStorage, "identity", "OK"), 1);
    assert_eq!(count(FromStorage, "k8s:enc:aesgcm:v1:", "OK"), 1);

    // A provider whose prefix matches but which cannot read fails under its prefix;
    // a value no provider's prefix matches is `unknown`.
    let other = f.with(&yaml("secrets", &aesgcm("key2", &KEY2)));
    other.get(SECRET_KEY, None).await.expect_err("other key");
    other.get(plain_key, None).await.expect_err("not encrypted");
    let metrics = other.in_use().current().metrics().clone();
    let count = |direction, prefix, status| metrics.transformations(direction, prefix, status);
    assert_eq!(
        count(FromStorage, "k8s:enc:aesgcm:v1:", "unknown-non-grpc"),
        1
    );
    assert_eq!(count(FromStorage, "unknown", "unknown-non-grpc"), 1);
    assert_eq!(count(FromStorage, "k8s:enc:aesgcm:v1:", "OK"), 0);
}
