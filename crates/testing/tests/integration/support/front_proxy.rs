//! kubeadm's front-proxy (request-header) flags over the test server's PKI, and what
//! the apiserver publishes of them.

use ferrokube_apiserver::Options;
use ferrokube_testing::TestApiServer;
use serde_json::Value;

/// kubeadm's flags (plus the UID header), with the test PKI's front-proxy CA.
pub fn front_proxy(o: &mut Options) {
    let pki = o
        .client_ca_file
        .as_ref()
        .and_then(|ca| ca.parent())
        .expect("the test server has a client CA in its PKI directory")
        .to_path_buf();
    o.requestheader_client_ca_file = Some(pki.join("front-proxy-ca.crt"));
    o.requestheader_allowed_names = vec!["front-proxy-client".into()];
    o.requestheader_username_headers = vec!["X-Remote-User".into()];
    o.requestheader_uid_headers = vec!["X-Remote-Uid".into()];
    o.requestheader_group_headers = vec!["X-Remote-Group".into()];
    o.requestheader_extra_headers_prefix = vec!["X-Remote-Extra-".into()];
    o.proxy_client_cert_file = Some(pki.join("front-proxy-client.crt"));
    o.proxy_client_key_file = Some(pki.join("front-proxy-client.key"));
}

/// The data of `kube-system/extension-apiserver-authentication`.
pub async fn published_data(client: &kube::Client) -> serde_json::Map<String, Value> {
    let (code, _, body) = TestApiServer::raw(
        client,
        "GET",
        "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["data"].as_object().unwrap().clone()
}
