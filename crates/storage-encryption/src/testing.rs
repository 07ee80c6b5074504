//! A KMS v2 plugin for tests (feature `testing`): the plugin API served over gRPC on a
//! unix socket, as a real plugin serves it, with a key encryption key per key ID. Tests
//! switch its key ID and health and count its calls.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use tonic::{Request, Response, Status};

use crate::kms::proto;
use crate::kms::proto::key_management_service_server::{
    KeyManagementService, KeyManagementServiceServer,
};

/// The annotation the plugin stores next to each encrypted seed.
pub const ANNOTATION: &str = "key-id.kms.ferrokube.test";

struct State {
    /// False once the plugin is dropped: the server's connection tasks outlive the
    /// accept loop, so calls on a kept connection are refused here.
    serving: std::sync::atomic::AtomicBool,
    key_id: Mutex<String>,
    healthz: Mutex<String>,
    encrypt_calls: AtomicUsize,
    decrypt_calls: AtomicUsize,
}

/// The key encryption key of a key ID: derived from it, so a plugin started anew
/// still decrypts what an earlier one encrypted.
fn kek(key_id: &str) -> Aes256Gcm {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("ferrokube test kms {key_id}").as_bytes(),
    );
    Aes256Gcm::new_from_slice(digest.as_ref()).expect("a SHA-256 digest is an AES-256 key")
}

#[derive(Clone)]
struct Service(Arc<State>);

impl Service {
    fn serving(&self) -> Result<(), Status> {
        if self.0.serving.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Status::unavailable("the plugin has stopped"))
        }
    }
}

#[tonic::async_trait]
impl KeyManagementService for Service {
    async fn status(
        &self,
        _: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        self.serving()?;
        Ok(Response::new(proto::StatusResponse {
            version: "v2".into(),
            healthz: self.0.healthz.lock().unwrap().clone(),
            key_id: self.0.key_id.lock().unwrap().clone(),
        }))
    }

    async fn decrypt(
        &self,
        request: Request<proto::DecryptRequest>,
    ) -> Result<Response<proto::DecryptResponse>, Status> {
        self.serving()?;
        self.0.decrypt_calls.fetch_add(1, Ordering::SeqCst);
        let request = request.into_inner();
        if request.annotations.get(ANNOTATION).map(Vec::as_slice) != Some(request.key_id.as_bytes())
        {
            return Err(Status::invalid_argument(
                "annotations do not match the key ID",
            ));
        }
        if request.ciphertext.len() < 12 {
            return Err(Status::invalid_argument("ciphertext too short"));
        }
        let (nonce, sealed) = request.ciphertext.split_at(12);
        let plaintext = kek(&request.key_id)
            .decrypt(Nonce::from_slice(nonce), sealed)
            .map_err(|_| Status::invalid_argument("ciphertext does not open"))?;
        Ok(Response::new(proto::DecryptResponse { plaintext }))
    }

    async fn encrypt(
        &self,
        request: Request<proto::EncryptRequest>,
    ) -> Result<Response<proto::EncryptResponse>, Status> {
        self.serving()?;
        self.0.encrypt_calls.fetch_add(1, Ordering::SeqCst);
        let key_id = self.0.key_id.lock().unwrap().clone();
        let mut nonce = [0u8; 12];
        getrandom::getrandom(&mut nonce).map_err(|e| Status::internal(e.to_string()))?;
        let sealed = kek(&key_id)
            .encrypt(
                Nonce::from_slice(&nonce),
                request.into_inner().plaintext.as_slice(),
            )
            .map_err(|_| Status::internal("sealing failed"))?;
        Ok(Response::new(proto::EncryptResponse {
            ciphertext: [&nonce[..], &sealed].concat(),
            annotations: [(ANNOTATION.to_string(), key_id.clone().into_bytes())].into(),
            key_id,
        }))
    }
}

/// A running plugin; dropping it stops serving at once, open connections included
/// (the socket file stays).
pub struct TestKmsPlugin {
    socket: PathBuf,
    state: Arc<State>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestKmsPlugin {
    fn drop(&mut self) {
        self.state.serving.store(false, Ordering::SeqCst);
        self.server.abort();
    }
}

impl TestKmsPlugin {
    /// Serves on `socket` (which must not exist) with key ID `key_id`, healthy.
    pub fn start(socket: &Path, key_id: &str) -> std::io::Result<TestKmsPlugin> {
        let listener = tokio::net::UnixListener::bind(socket)?;
        let state = Arc::new(State {
            serving: std::sync::atomic::AtomicBool::new(true),
            key_id: Mutex::new(key_id.to_string()),
            healthz: Mutex::new("ok".into()),
            encrypt_calls: AtomicUsize::new(0),
            decrypt_calls: AtomicUsize::new(0),
        });
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        let service = KeyManagementServiceServer::new(Service(state.clone()));
        let server = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "test KMS plugin stopped");
            }
        });
        Ok(TestKmsPlugin {
            socket: socket.to_path_buf(),
            state,
            server,
        })
    }

    /// The `endpoint` of a `kms` provider that uses this plugin.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// New encryptions use `key_id`; status reports it.
    pub fn set_key_id(&self, key_id: &str) {
        *self.state.key_id.lock().unwrap() = key_id.to_string();
    }

    /// What status reports as health (`ok` is healthy).
    pub fn set_healthz(&self, healthz: &str) {
        *self.state.healthz.lock().unwrap() = healthz.to_string();
    }

    pub fn encrypt_calls(&self) -> usize {
        self.state.encrypt_calls.load(Ordering::SeqCst)
    }

    pub fn decrypt_calls(&self) -> usize {
        self.state.decrypt_calls.load(Ordering::SeqCst)
    }
}

/// The key ID a stored value of KMS v2 provider `provider` was sealed under, and
/// whether it was sealed with a derived key (`None`: not such a value).
pub fn sealed_under(stored: &[u8], provider: &str) -> Option<(String, bool)> {
    use prost::Message as _;
    let prefix = format!("{}{provider}:", crate::kms::KMS_V2_PREFIX);
    let object = proto::EncryptedObject::decode(stored.strip_prefix(prefix.as_bytes())?).ok()?;
    let derived = object.encrypted_dek_source_type
        == proto::EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed as i32;
    Some((object.key_id, derived))
}
