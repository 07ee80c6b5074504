//! kubeadm's front-proxy (request-header) flags over the test server's PKI.

use ferrokube_apiserver::Options;

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
