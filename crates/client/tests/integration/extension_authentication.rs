//! A component's secure port started as kubeadm starts kube-scheduler: kubeconfigs for
//! the reviews and no CA flag. The client CA and the front proxy's settings come from
//! the apiserver's `kube-system/extension-apiserver-authentication` ConfigMap: a cluster
//! client certificate names its user, the aggregator's front-proxy certificate names
//! the user in its headers, and a change of the ConfigMap's request-header part is
//! followed without a restart. `--authentication-skip-lookup` leaves client
//! certificates out; a lookup that fails stops the start unless tolerated.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use ferrokube_client::delegated::DelegatedAuthOptions;
use ferrokube_client::extension_authentication::{LookupFailure, NAME, NAMESPACE};
use ferrokube_client::serving::{Respond, SecureServingOptions, endpoint, serve};
use ferrokube_pki::CertificateAuthority;
use ferrokube_testing::{TestApiServer, with_aggregator_and_request_header};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::{TempDir, client_cert, free_addr, get, message};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    auth: DelegatedAuthOptions,
}

fn flags(args: &[String]) -> DelegatedAuthOptions {
    Flags::try_parse_from(std::iter::once("kube-scheduler".to_string()).chain(args.iter().cloned()))
        .unwrap()
        .auth
}

fn load_ca(srv: &TestApiServer, name: &str) -> CertificateAuthority {
    let pki = srv.dir().join("pki");
    let read = |ext: &str| std::fs::read_to_string(pki.join(format!("{name}.{ext}"))).unwrap();
    CertificateAuthority::load(&read("crt"), &read("key")).unwrap()
}

/// Starts the endpoint of `auth` on a free port; cancelled by the returned token.
async fn start(
    auth: &DelegatedAuthOptions,
    failure: LookupFailure,
) -> Result<(std::net::SocketAddr, CancellationToken), String> {
    let addr = free_addr();
    let (tls, gate) = endpoint(
        &SecureServingOptions::default(),
        auth,
        "kube-scheduler",
        addr.ip(),
        failure,
    )
    .await
    .map_err(|e| e.to_string())?;
    let respond: Respond = Arc::new(|path| match path {
        "/metrics" => (200, "up 1\n".into()),
        _ => (404, "404 page not found".into()),
    });
    let cancel = CancellationToken::new();
    tokio::spawn(serve(addr, tls, respond, Some(gate), cancel.clone()));
    Ok((addr, cancel))
}

#[tokio::test]
async fn client_cas_come_from_the_cluster_when_the_flags_leave_them_out() {
    let srv = TestApiServer::start_with(with_aggregator_and_request_header)
        .await
        .unwrap();
    let kubeconfig = srv.kubeconfig.display().to_string();
    let cluster_ca = load_ca(&srv, "ca");
    let proxy_ca = load_ca(&srv, "front-proxy-ca");
    // kubeadm's kube-scheduler flags.
    let kubeadm = flags(&[
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
    ]);
    let (addr, cancel) = start(&kubeadm, LookupFailure::Tolerate).await.unwrap();

    // A cluster client certificate is its user: an admin passes, bob is himself (and
    // RBAC gives him nothing).
    let admin = client_cert(&cluster_ca, "kubernetes-admin", &["system:masters"]);
    assert_eq!(
        get(addr, "/metrics", Some(&admin), &[]).await,
        Ok((200, "up 1\n".into()))
    );
    let bob = client_cert(&cluster_ca, "bob", &[]);
    let (code, body) = get(addr, "/metrics", Some(&bob), &[]).await.unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "bob" cannot get path "/metrics""#
    );
    // The aggregator's front-proxy certificate (CN front-proxy-client, the allowed
    // name the ConfigMap publishes) names the user in its headers.
    let proxy = client_cert(&proxy_ca, "front-proxy-client", &[]);
    let as_alice_admin = [
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "system:masters"),
    ];
    assert_eq!(
        get(addr, "/metrics", Some(&proxy), &as_alice_admin).await,
        Ok((200, "up 1\n".into()))
    );
    // Another CN of the front-proxy CA is not an allowed front proxy.
    let other = client_cert(&proxy_ca, "other-proxy", &[]);
    let (code, _) = get(addr, "/metrics", Some(&other), &as_alice_admin)
        .await
        .unwrap();
    assert_eq!(code, 401);

    // The allowed names change in the ConfigMap: the endpoint follows, bounded.
    let cms: Api<ConfigMap> = Api::namespaced(srv.client.clone(), NAMESPACE);
    cms.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"requestheader-allowed-names": "[\"other-proxy\"]"}})),
    )
    .await
    .unwrap();
    let mut followed = false;
    for _ in 0..100 {
        let by_other = get(addr, "/metrics", Some(&other), &as_alice_admin).await;
        let by_proxy = get(addr, "/metrics", Some(&proxy), &as_alice_admin).await;
        if by_other == Ok((200, "up 1\n".into())) && by_proxy.map(|(code, _)| code) == Ok(401) {
            followed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(followed, "the new allowed names were not taken within 10 s");
    cancel.cancel();

    // --authentication-skip-lookup: no CA, so no certificate is asked for and the
    // admin's request is anonymous.
    let mut skip = kubeadm.clone();
    skip.skip_lookup = true;
    let (addr, cancel) = start(&skip, LookupFailure::Tolerate).await.unwrap();
    let (code, body) = get(addr, "/metrics", Some(&admin), &[]).await.unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "system:anonymous" cannot get path "/metrics""#
    );
    cancel.cancel();

    // A lookup that fails (a kubeconfig whose token the apiserver refuses): fatal for
    // kube-controller-manager's default, tolerated when the flag says so.
    let dir = TempDir::new();
    let ca_pem = std::fs::read_to_string(srv.dir().join("pki/ca.crt")).unwrap();
    let ca_file = dir.write("ca.crt", &ca_pem);
    let bad = dir.write(
        "bad.kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {ca_file}\nusers:\n- name: u\n  user:\n    token: not-a-token\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            srv.url
        ),
    );
    let refused = flags(&[format!("--authentication-kubeconfig={bad}")]);
    let err = start(&refused, LookupFailure::Fatal).await.unwrap_err();
    assert!(
        err.contains("unable to load configmap based client CA or request-header configuration")
            && err.contains("401"),
        "{err}"
    );
    let tolerated = flags(&[
        format!("--authentication-kubeconfig={bad}"),
        "--authentication-tolerate-lookup-failure".to_string(),
    ]);
    let (addr, cancel) = start(&tolerated, LookupFailure::Fatal).await.unwrap();
    let (code, body) = get(addr, "/metrics", Some(&admin), &[]).await.unwrap();
    assert_eq!(
        (code, message(&body).contains("system:anonymous")),
        (403, true)
    );
    cancel.cancel();
    // And the scheduler's default tolerates it without the flag; `=false` does not.
    let (_, cancel) = start(&refused, LookupFailure::Tolerate).await.unwrap();
    cancel.cancel();
    let strict = flags(&[
        format!("--authentication-kubeconfig={bad}"),
        "--authentication-tolerate-lookup-failure=false".to_string(),
    ]);
    assert!(start(&strict, LookupFailure::Tolerate).await.is_err());
}
