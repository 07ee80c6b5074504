//! What the kubelet's certificate tests share: kube-controller-manager's CSR
//! controllers against the test apiserver.

use ferrokube_controllers::csrsigning::{CsrSigningConfig, SIGNERS, SignerCa};
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use tokio_util::sync::CancellationToken;

/// kube-controller-manager with the CSR approving and signing controllers, every
/// signer on the test cluster CA, the controllers writing as their ServiceAccounts.
pub async fn start_csr_controllers(
    srv: &TestApiServer,
    cancel: &CancellationToken,
) -> anyhow::Result<Manager> {
    let pki = srv.dir().join("pki");
    let ca = SignerCa {
        cert_pem: std::fs::read_to_string(pki.join("ca.crt"))?,
        key_pem: std::fs::read_to_string(pki.join("ca.key"))?,
    };
    let cfg = ManagerConfig {
        controllers: vec!["csrsigning".into(), "csrapproving".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        csr_signing: CsrSigningConfig {
            signers: SIGNERS
                .iter()
                .map(|s| (s.to_string(), ca.clone()))
                .collect(),
            ..Default::default()
        },
        ..Default::default()
    };
    let client = srv.client_as("system:kube-controller-manager", &[]).await?;
    Ok(Manager::start(client, &cfg, cancel.clone()).await?)
}
