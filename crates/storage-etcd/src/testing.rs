//! [`EtcdProcess`]: a throwaway single-member etcd on loopback, for tests and
//! benchmarks (feature `testing`).
//!
//! It needs the `etcd` binary on `PATH` (Debian: `etcd-server`); without it,
//! [`EtcdProcess::start`] fails with a message that says so, so tests fail rather
//! than skip. The process is only ever stopped by its own pid.

use std::fmt;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a start may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Why an etcd could not be started.
#[derive(Debug)]
pub struct StartError(String);

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// A running etcd with its own data dir (removed on drop) and loopback ports.
pub struct EtcdProcess {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    /// Clients over TLS, with certificates required; health is then read on a plain
    /// metrics port.
    tls: Option<ServerTls>,
}

/// The PEMs of a TLS etcd: its serving pair and the CA its clients' certificates
/// must chain to.
#[derive(Clone)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    pub client_ca_pem: String,
    metrics_port: u16,
}

impl ServerTls {
    pub fn new(cert_pem: String, key_pem: String, client_ca_pem: String) -> Self {
        ServerTls {
            cert_pem,
            key_pem,
            client_ca_pem,
            metrics_port: 0,
        }
    }
}

impl fmt::Debug for EtcdProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdProcess")
            .field("pid", &self.pid())
            .field("endpoint", &self.endpoint())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Two distinct free loopback ports (free when asked; etcd binds them right after).
fn free_ports() -> std::io::Result<(u16, u16)> {
    let a = TcpListener::bind("127.0.0.1:0")?;
    let b = TcpListener::bind("127.0.0.1:0")?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

impl EtcdProcess {
    /// Starts a fresh etcd and waits (at most 20 s) until it reports healthy.
    pub async fn start() -> Result<EtcdProcess, StartError> {
        Self::start_with(None).await
    }

    /// Starts a fresh etcd that serves clients over TLS only and requires client
    /// certificates signed by `tls.client_ca_pem` (`--client-cert-auth`).
    pub async fn start_tls(tls: ServerTls) -> Result<EtcdProcess, StartError> {
        Self::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<ServerTls>) -> Result<EtcdProcess, StartError> {
        let mut last = None;
        // Another process may grab a port between our probe and etcd's bind: try anew.
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("ferrokube-etcd-")
                .tempdir()
                .map_err(|e| StartError(format!("cannot create a temp dir for etcd: {e}")))?;
            let (client_port, peer_port) =
                free_ports().map_err(|e| StartError(format!("no free loopback port: {e}")))?;
            let tls = match &tls {
                Some(t) => Some(ServerTls {
                    metrics_port: free_ports()
                        .map_err(|e| StartError(format!("no free loopback port: {e}")))?
                        .0,
                    ..t.clone()
                }),
                None => None,
            };
            let mut etcd = EtcdProcess {
                child: None,
                dir,
                client_port,
                peer_port,
                tls,
            };
            match etcd.launch().await {
                Ok(()) => return Ok(etcd),
                Err(err) if err.0.contains("not found on PATH") => return Err(err),
                // Dropping `etcd` kills what was started and removes its dir.
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| StartError("etcd did not start".into())))
    }

    /// The client URL, for [`crate::EtcdStorage::connect`].
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    /// The pid of the running etcd, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// etcd's own log (stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        let start = (start..log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(log.len());
        log[start..].to_string()
    }

    /// Kills etcd (by its pid) and waits for it to exit. Data is kept.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills etcd and starts it again on the same data dir and ports.
    pub async fn restart(&mut self) -> Result<(), StartError> {
        self.stop();
        self.launch().await
    }

    async fn launch(&mut self) -> Result<(), StartError> {
        self.stop();
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| StartError(format!("cannot open the etcd log: {e}")))?;
        let log_err = log
            .try_clone()
            .map_err(|e| StartError(format!("cannot open the etcd log: {e}")))?;
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new("etcd");
        if let Some(tls) = &self.tls {
            let write = |name: &str, pem: &str| {
                let path = self.dir.path().join(name);
                std::fs::write(&path, pem)
                    .map(|()| path_str(&path))
                    .map_err(|e| StartError(format!("cannot write {name}: {e}")))
            };
            command
                .arg(format!(
                    "--cert-file={}",
                    write("server.crt", &tls.cert_pem)?
                ))
                .arg(format!("--key-file={}", write("server.key", &tls.key_pem)?))
                .arg(format!(
                    "--trusted-ca-file={}",
                    write("client-ca.crt", &tls.client_ca_pem)?
                ))
                .arg("--client-cert-auth")
                .arg(format!(
                    "--listen-metrics-urls=http://127.0.0.1:{}",
                    tls.metrics_port
                ));
        }
        let child = command
            .arg("--name=t")
            .arg(format!("--data-dir={}", path_str(&self.data_dir())))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=t={peer}"))
            .arg("--logger=zap")
            .arg("--log-level=error")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    StartError(
                        "etcd not found on PATH: the etcd backend's tests need a real etcd \
                         (Debian: apt-get install etcd-server)"
                            .into(),
                    )
                } else {
                    StartError(format!("cannot run etcd: {e}"))
                }
            })?;
        self.child = Some(child);
        self.wait_healthy().await
    }

    async fn wait_healthy(&mut self) -> Result<(), StartError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(StartError(format!(
                    "etcd exited during startup ({status}); log:\n{}",
                    self.log_tail()
                )));
            }
            let health_port = match &self.tls {
                Some(tls) => tls.metrics_port,
                None => self.client_port,
            };
            if healthy(health_port).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(StartError(format!(
                    "etcd not healthy after {START_TIMEOUT:?}; log:\n{}",
                    self.log_tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn path_str(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// `GET /health` on the client port answers `"health":"true"`.
async fn healthy(port: u16) -> bool {
    let check = async {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        conn.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut response = Vec::new();
        conn.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).contains(r#""health":"true""#))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), check).await,
        Ok(Ok(true))
    )
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
