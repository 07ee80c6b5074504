//! The `kms` provider (API version v2) end to end: an in-process apiserver (see
//! `common`) whose secrets are sealed through a KMS v2 plugin served on a unix socket
//! (`testing::TestKmsPlugin`, gRPC as a real plugin speaks it).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Follow, PASSWORD, Running, contains, password, secret, start};
use ferrokube_storage::Storage as _;
use ferrokube_storage_encryption::KmsTimings;
use ferrokube_storage_encryption::testing::{TestKmsPlugin, sealed_under};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

const PROVIDER: &str = "test-kms";

fn config(plugin_socket: &Path) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - kms:
          apiVersion: v2
          name: {PROVIDER}
          endpoint: unix://{}
          timeout: 2s
      - identity: {{}}
",
        plugin_socket.display()
    )
}

/// Quick polls and no reuse of health answers, so that a test sees a change at once.
fn timings(write_seed_ttl: Duration) -> KmsTimings {
    KmsTimings {
        healthy_poll: Duration::from_millis(100),
        unhealthy_poll: Duration::from_millis(50),
        write_seed_ttl,
        healthy_answer_ttl: Duration::ZERO,
        unhealthy_answer_ttl: Duration::ZERO,
    }
}

/// A directory with the store and the plugin's socket.
struct Setup {
    dir: tempfile::TempDir,
    socket: std::path::PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("kms.sock");
        Setup { dir, socket }
    }

    /// A plugin on the socket (one that was dropped leaves its socket file behind).
    fn plugin(&self) -> TestKmsPlugin {
        let _ = std::fs::remove_file(&self.socket);
        TestKmsPlugin::start(&self.socket, "key-1").expect("plugin")
    }

    /// A server whose write seed lasts `write_seed_ttl` after the last good poll, and
    /// its secrets in `default`.
    async fn server(&self, write_seed_ttl: Duration) -> (Running, Api<Secret>) {
        let running = start(
            self.dir.path(),
            &config(&self.socket),
            timings(write_seed_ttl),
            Follow::No,
        )
        .await;
        let secrets = Api::namespaced(running.client.clone(), "default");
        (running, secrets)
    }
}

async fn stored(running: &Running, name: &str) -> Vec<u8> {
    running
        .raw
        .get(&format!("/registry/secrets/default/{name}"), None)
        .await
        .expect("raw read")
        .value
        .to_vec()
}

/// Waits (at most 10 s) for `done` to hold.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The status and body of a GET of `path`.
async fn get_text(client: &kube::Client, path: &str) -> (u16, String) {
    let request = http::Request::get(path).body(Vec::new()).expect("request");
    let response = client.send(request.map(Into::into)).await.expect("send");
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The value of the one series in `page` whose line starts with `series` (name and
/// the leading labels); None when there is none.
fn metric(page: &str, series: &str) -> Option<f64> {
    let mut values = page
        .lines()
        .filter(|line| line.starts_with(series))
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok());
    let value = values.next();
    assert!(values.next().is_none(), "more than one series {series}");
    value
}

fn api_error_code(err: kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_are_sealed_by_the_plugin_and_read_after_a_restart() {
    let setup = Setup::new();
    let plugin = setup.plugin();
    let (running, secrets) = setup.server(Duration::from_secs(180)).await;
    for name in ["s1", "s2", "s3"] {
        secrets
            .create(&PostParams::default(), &secret(name))
            .await
            .expect("create");
    }
    let raw = stored(&running, "s1").await;
    assert!(
        raw.starts_with(b"k8s:enc:kms:v2:test-kms:"),
        "stored as {:?}",
        String::from_utf8_lossy(&raw[..raw.len().min(40)])
    );
    assert!(!contains(&raw, PASSWORD.as_bytes()));
    assert_eq!(sealed_under(&raw, PROVIDER), Some(("key-1".into(), true)));
    // One seed for every write: the plugin encrypted it once, at start.
    assert_eq!(plugin.encrypt_calls(), 1);
    assert_eq!(plugin.decrypt_calls(), 0);
    let got = secrets.get("s2").await.expect("get");
    assert_eq!(password(&got), Some(PASSWORD.as_bytes()));
    // Upstream's metrics: one seed made, three values sealed under key-1's hash.
    let (code, page) = get_text(&running.client, "/metrics").await;
    assert_eq!(code, 200);
    let kms_calls = |method: &str| {
        metric(
            &page,
            &format!(
                "apiserver_envelope_encryption_kms_operations_latency_seconds_count{{provider_name=\"{PROVIDER}\",method_name=\"/v2.KeyManagementService/{method}\",grpc_status_code=\"OK\"}}"
            ),
        )
    };
    assert_eq!(kms_calls("Encrypt"), Some(1.0), "{page}");
    assert!(kms_calls("Status").is_some_and(|n| n >= 1.0));
    assert_eq!(
        metric(
            &page,
            "apiserver_storage_data_key_generation_duration_seconds_count"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &page,
            &format!(
                "apiserver_storage_transformation_operations_total{{transformation_type=\"to_storage\",transformer_prefix=\"k8s:enc:kms:v2:{PROVIDER}:\",status=\"OK\"}}"
            )
        ),
        Some(3.0)
    );
    assert_eq!(
        metric(
            &page,
            &format!(
                "apiserver_envelope_encryption_key_id_hash_total{{transformation_type=\"to_storage\",provider_name=\"{PROVIDER}\",key_id_hash=\"sha256:"
            )
        ),
        Some(3.0)
    );
    assert_eq!(
        metric(
            &page,
            "apiserver_storage_envelope_transformation_cache_misses_total"
        ),
        Some(0.0)
    );
    let Running { server, raw, .. } = running;
    server.shutdown(Duration::from_secs(5)).await;
    // The store is opened anew by the next server.
    drop(raw);

    // A new server has a new seed, and asks the plugin for the old one once.
    let (running, secrets) = setup.server(Duration::from_secs(180)).await;
    assert_eq!(plugin.encrypt_calls(), 2);
    let listed = secrets.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 3);
    for s in &listed.items {
        assert_eq!(password(s), Some(PASSWORD.as_bytes()));
    }
    for name in ["s1", "s2", "s3"] {
        let got = secrets.get(name).await.expect("get after restart");
        assert_eq!(password(&got), Some(PASSWORD.as_bytes()));
    }
    assert_eq!(plugin.decrypt_calls(), 1, "the old seed is decrypted once");
    let (_, page) = get_text(&running.client, "/metrics").await;
    assert_eq!(
        metric(
            &page,
            "apiserver_storage_envelope_transformation_cache_misses_total"
        ),
        Some(1.0),
        "{page}"
    );
    // Its own seed and the first server's.
    assert_eq!(
        metric(
            &page,
            &format!(
                "apiserver_envelope_encryption_dek_source_cache_size{{provider_name=\"{PROVIDER}\"}}"
            )
        ),
        Some(2.0)
    );
    running.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_key_id_rotates_the_seed_and_rewrites_move_data_to_it() {
    let setup = Setup::new();
    let plugin = setup.plugin();
    let (running, secrets) = setup.server(Duration::from_secs(180)).await;
    secrets
        .create(&PostParams::default(), &secret("old"))
        .await
        .expect("create");

    plugin.set_key_id("key-2");
    eventually("the seed to rotate", || async {
        plugin.encrypt_calls() == 2
    })
    .await;
    secrets
        .create(&PostParams::default(), &secret("new"))
        .await
        .expect("create after rotation");
    assert_eq!(
        sealed_under(&stored(&running, "new").await, PROVIDER),
        Some(("key-2".into(), true))
    );
    // The old secret still reads, and a change rewrites it under the new key ID.
    assert_eq!(
        sealed_under(&stored(&running, "old").await, PROVIDER),
        Some(("key-1".into(), true))
    );
    let patch = serde_json::json!({"metadata": {"labels": {"migrated": "yes"}}});
    let patched = secrets
        .patch("old", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    assert_eq!(password(&patched), Some(PASSWORD.as_bytes()));
    assert_eq!(
        sealed_under(&stored(&running, "old").await, PROVIDER),
        Some(("key-2".into(), true))
    );
    running.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unhealthy_plugin_fails_readiness_and_a_gone_one_fails_writes_once_the_seed_expires() {
    let setup = Setup::new();
    let plugin = setup.plugin();
    let (running, secrets) = setup.server(Duration::from_secs(2)).await;
    let client = running.client.clone();
    secrets
        .create(&PostParams::default(), &secret("kept"))
        .await
        .expect("create");
    assert_eq!(get_text(&client, "/readyz/kms-providers").await.0, 200);

    plugin.set_healthz("disk on fire");
    let (code, body) = get_text(&client, "/readyz?verbose").await;
    assert_eq!(code, 500);
    assert!(
        body.contains("[-]kms-providers failed: reason withheld"),
        "{body}"
    );
    let (code, _) = get_text(&client, "/healthz").await;
    assert_eq!(code, 500);
    // A plugin outside the server is no reason to restart it.
    assert_eq!(get_text(&client, "/livez").await.0, 200);
    plugin.set_healthz("ok");
    assert_eq!(get_text(&client, "/readyz").await.0, 200);

    // The plugin goes away: reads of the cached seed go on; writes stop once the seed
    // outlives its time since the last good poll.
    drop(plugin);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut attempt = 0;
    let refused = loop {
        assert!(Instant::now() < deadline, "writes still accepted");
        attempt += 1;
        let name = format!("late-{attempt}");
        match secrets.create(&PostParams::default(), &secret(&name)).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(err) => break api_error_code(err),
        }
    };
    let (code, message) = refused;
    assert_eq!(code, 500, "{message}");
    assert!(message.contains("expired at"), "{message}");
    let got = secrets
        .get("kept")
        .await
        .expect("a cached seed still reads");
    assert_eq!(password(&got), Some(PASSWORD.as_bytes()));
    // The refused write counted under the provider's prefix, and the status calls to
    // the gone plugin by their gRPC code.
    let (_, page) = get_text(&client, "/metrics").await;
    assert_eq!(
        metric(
            &page,
            &format!(
                "apiserver_storage_transformation_operations_total{{transformation_type=\"to_storage\",transformer_prefix=\"k8s:enc:kms:v2:{PROVIDER}:\",status=\"unknown-non-grpc\"}}"
            )
        ),
        Some(1.0),
        "{page}"
    );
    let failed_status_call = format!(
        "apiserver_envelope_encryption_kms_operations_latency_seconds_count{{provider_name=\"{PROVIDER}\",method_name=\"/v2.KeyManagementService/Status\",grpc_status_code=\""
    );
    assert!(
        page.lines()
            .any(|l| l.starts_with(&failed_status_call) && !l.contains("\"OK\"")),
        "{page}"
    );
    running.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_that_comes_up_after_the_server_is_used_once_it_answers() {
    let setup = Setup::new();
    // Data sealed by an earlier server, whose plugin then went away.
    let plugin = setup.plugin();
    let (running, secrets) = setup.server(Duration::from_secs(180)).await;
    secrets
        .create(&PostParams::default(), &secret("kept"))
        .await
        .expect("create");
    let Running { server, raw, .. } = running;
    server.shutdown(Duration::from_secs(5)).await;
    drop(raw);
    drop(plugin);

    let (running, secrets) = setup.server(Duration::from_secs(180)).await;
    let err = secrets
        .create(&PostParams::default(), &secret("early"))
        .await
        .expect_err("no plugin yet");
    let (code, message) = api_error_code(err);
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("got unexpected nil transformer"),
        "{message}"
    );
    assert_eq!(get_text(&running.client, "/readyz").await.0, 500);
    // The old secret cannot be read: a get fails, and lists (from the cache) leave
    // it out for now.
    let (code, message) = api_error_code(secrets.get("kept").await.expect_err("unreadable"));
    assert_eq!(code, 500, "{message}");
    let listed = |secrets: Api<Secret>| async move {
        secrets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect::<Vec<String>>()
    };
    assert!(listed(secrets.clone()).await.is_empty());

    let plugin = setup.plugin();
    eventually("the server to be primed", || async {
        secrets
            .create(&PostParams::default(), &secret("late"))
            .await
            .is_ok()
    })
    .await;
    assert_eq!(plugin.encrypt_calls(), 1);
    assert_eq!(get_text(&running.client, "/readyz").await.0, 200);
    let kept = secrets.get("kept").await.expect("get");
    assert_eq!(password(&kept), Some(PASSWORD.as_bytes()));
    // Once the plugin answers, the cache lists again and finds the old secret.
    eventually("the old secret to be listed again", || async {
        listed(secrets.clone()).await.contains(&"kept".to_string())
    })
    .await;
    running.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_automatic_reload_a_changed_file_is_put_in_use_once_it_loads() {
    let setup = Setup::new();
    let plugin = setup.plugin();
    let aescbc =
        "{aescbc: {keys: [{name: key1, secret: 'KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio='}]}}";
    let header = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n";
    let first = format!("{header}      - {aescbc}\n");
    let running = start(
        setup.dir.path(),
        &first,
        timings(Duration::from_secs(180)),
        Follow::AutomaticReload,
    )
    .await;
    let client = running.client.clone();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    secrets
        .create(&PostParams::default(), &secret("before"))
        .await
        .expect("create");
    assert!(
        stored(&running, "before")
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key1:")
    );
    // The one kms-providers check is there even without a KMS provider.
    assert_eq!(get_text(&client, "/readyz/kms-providers").await.0, 200);

    // KMS first, aescbc still there to read what it wrote.
    let second = format!(
        "{header}      - {{kms: {{apiVersion: v2, name: {PROVIDER}, endpoint: '{}'}}}}\n      - {aescbc}\n",
        plugin.endpoint()
    );
    std::fs::write(setup.dir.path().join("encryption.yaml"), &second).expect("write config");
    let mut attempt = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        attempt += 1;
        let name = format!("after-{attempt}");
        secrets
            .create(&PostParams::default(), &secret(&name))
            .await
            .expect("create during the reload");
        if sealed_under(&stored(&running, &name).await, PROVIDER).is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new configuration was not put in use"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let got = secrets.get("before").await.expect("read under the old key");
    assert_eq!(password(&got), Some(PASSWORD.as_bytes()));
    let (_, metrics) = get_text(&client, "/metrics").await;
    let reloads: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_encryption_config_controller_automatic_reloads_total{")
        })
        .collect();
    assert_eq!(reloads.len(), 1, "{reloads:?}");
    assert!(reloads[0].ends_with("status=\"success\"} 1"), "{reloads:?}");

    // The check follows the configuration in use: its plugin now.
    plugin.set_healthz("sick");
    assert_eq!(get_text(&client, "/readyz/kms-providers").await.0, 500);
    plugin.set_healthz("ok");

    // A file that does not load is counted and leaves the configuration in use.
    std::fs::write(setup.dir.path().join("encryption.yaml"), "kind: Nonsense\n")
        .expect("write config");
    eventually("the failed reload to be counted", || {
        let client = client.clone();
        async move {
            get_text(&client, "/metrics").await.1.lines().any(|l| {
                l.starts_with("apiserver_encryption_config_controller_automatic_reloads_total{")
                    && l.ends_with("status=\"failure\"} 1")
            })
        }
    })
    .await;
    secrets
        .create(&PostParams::default(), &secret("still-kms"))
        .await
        .expect("create");
    assert_eq!(
        sealed_under(&stored(&running, "still-kms").await, PROVIDER),
        Some(("key-1".into(), true))
    );
    running.server.shutdown(Duration::from_secs(5)).await;
}
