//! Front-proxy (request-header) authentication on a component's secure port, wired as
//! kube-controller-manager and kube-scheduler wire it from kubeadm's flags: the port
//! accepts client certificates of both CAs; a front-proxy certificate with an allowed
//! CN is the user its X-Remote-* headers name, one with another CN is refused, and an
//! ordinary client certificate is its own CN whatever headers it sends. A replaced CA
//! file is taken without a restart.

use crate::support;

use std::sync::Arc;

use clap::Parser;
use ferrokube_client::delegated::DelegatedAuthOptions;
use ferrokube_client::extension_authentication::{FILE_CHECK_INTERVAL, LookupFailure};
use ferrokube_client::serving::{Respond, SecureServingOptions, endpoint, serve};
use ferrokube_pki::CertificateAuthority;
use support::{TempDir, client_cert, free_addr, get, message};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    auth: DelegatedAuthOptions,
}

#[tokio::test]
async fn front_proxy_users_on_the_secure_port() {
    let client_ca = CertificateAuthority::generate("kubernetes").unwrap();
    let proxy_ca = CertificateAuthority::generate("front-proxy-ca").unwrap();
    let dir = TempDir::new();
    let ca_file = dir.write("ca.crt", client_ca.cert_pem());
    let proxy_ca_file = dir.write("front-proxy-ca.crt", proxy_ca.cert_pem());

    // kubeadm's flags (the kubeconfigs left out: no reviews, so only system:masters
    // passes the gate).
    let auth = Flags::try_parse_from([
        "kube-controller-manager".to_string(),
        format!("--client-ca-file={ca_file}"),
        format!("--requestheader-client-ca-file={proxy_ca_file}"),
        "--requestheader-allowed-names=front-proxy-client".to_string(),
    ])
    .unwrap()
    .auth;
    let addr = free_addr();
    let (tls, gate) = endpoint(
        &SecureServingOptions::default(),
        &auth,
        "test",
        addr.ip(),
        LookupFailure::Fatal,
    )
    .await
    .unwrap();
    let respond: Respond = Arc::new(|path| match path {
        "/healthz" => (200, "ok".into()),
        "/metrics" => (200, "up 1\n".into()),
        _ => (404, "404 page not found".into()),
    });
    let cancel = CancellationToken::new();
    let server = tokio::spawn(serve(addr, tls, respond, Some(gate), cancel.clone()));

    let proxy = client_cert(&proxy_ca, "front-proxy-client", &[]);
    let as_alice_admin = [
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "system:masters"),
    ];

    // The aggregator's request for alice in system:masters.
    assert_eq!(
        get(addr, "/metrics", Some(&proxy), &as_alice_admin).await,
        Ok((200, "up 1\n".into()))
    );
    // alice without system:masters: her own name, and no review to allow her.
    let (code, body) = get(
        addr,
        "/metrics",
        Some(&proxy),
        &[("X-Remote-User", "alice")],
    )
    .await
    .unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "alice" cannot get path "/metrics""#
    );
    // The front proxy's certificate names no user of its own: a 401, as upstream.
    assert_eq!(
        get(addr, "/metrics", Some(&proxy), &[]).await.unwrap().0,
        401
    );

    // A front-proxy certificate whose CN is not in --requestheader-allowed-names.
    let intruder = client_cert(&proxy_ca, "intruder", &[]);
    let (code, body) = get(addr, "/metrics", Some(&intruder), &as_alice_admin)
        .await
        .unwrap();
    assert_eq!(code, 401, "{body}");
    // Health stays open to it, as to everyone.
    assert_eq!(
        get(addr, "/healthz", Some(&intruder), &as_alice_admin).await,
        Ok((200, "ok".into()))
    );

    // An ordinary client certificate: the headers are ignored, the user is its CN.
    let bob = client_cert(&client_ca, "bob", &[]);
    let (code, body) = get(addr, "/metrics", Some(&bob), &as_alice_admin)
        .await
        .unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "bob" cannot get path "/metrics""#
    );
    let admin = client_cert(&client_ca, "kubernetes-admin", &["system:masters"]);
    assert_eq!(
        get(addr, "/metrics", Some(&admin), &[]).await,
        Ok((200, "up 1\n".into()))
    );

    // Headers without any certificate: anonymous.
    let (code, body) = get(addr, "/metrics", None, &as_alice_admin).await.unwrap();
    assert_eq!(code, 403);
    assert_eq!(
        message(&body),
        r#"forbidden: User "system:anonymous" cannot get path "/metrics""#
    );

    // A certificate of neither CA does not get through the handshake.
    let stranger_ca = CertificateAuthority::generate("stranger").unwrap();
    let stranger = client_cert(&stranger_ca, "front-proxy-client", &[]);
    assert!(
        get(addr, "/metrics", Some(&stranger), &as_alice_admin)
            .await
            .is_err()
    );

    // The client CA file is replaced (a CA rotation): within a few checks of the file,
    // the new CA's certificates name their users and the old CA's are refused.
    let new_ca = CertificateAuthority::generate("kubernetes-2").unwrap();
    dir.write("ca.crt", new_ca.cert_pem());
    let carol = client_cert(&new_ca, "carol", &[]);
    let mut rotated = false;
    for _ in 0..(3 * FILE_CHECK_INTERVAL.as_millis() / 100) {
        let by_carol = get(addr, "/metrics", Some(&carol), &[]).await;
        if by_carol
            .is_ok_and(|(code, body)| code == 403 && message(&body).contains(r#"User "carol""#))
        {
            rotated = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(rotated, "the new --client-ca-file was not taken");
    assert!(get(addr, "/metrics", Some(&bob), &[]).await.is_err());
    // The front proxy's CA file did not change: it still names its users.
    assert_eq!(
        get(addr, "/metrics", Some(&proxy), &as_alice_admin).await,
        Ok((200, "up 1\n".into()))
    );

    cancel.cancel();
    server.await.unwrap().unwrap();
}
