//! The `kube-system/extension-apiserver-authentication` ConfigMap (upstream
//! `pkg/controlplane/controller/clusterauthenticationtrust`): how extension apiservers
//! (metrics-server, any aggregated API) should authenticate the requests this
//! apiserver sends them and the ones clients send them directly. They read it through
//! the `extension-apiserver-authentication-reader` Role.
//!
//! Keys: `client-ca-file` (the `--client-ca-file` bundle) and, when a request-header
//! CA is known, `requestheader-client-ca-file` with `requestheader-username-headers`,
//! `-uid-headers`, `-group-headers`, `-extra-headers-prefix` and `-allowed-names`, each
//! a JSON array of strings.
//!
//! As upstream, what this apiserver knows is merged into what the ConfigMap already
//! holds (several apiservers of one cluster each add theirs): string lists are the
//! union in order without duplicates, CA bundles the union of their certificates
//! (by DER, re-encoded as PEM) without the ones that expired more than five minutes
//! ago; the data is then replaced by that merge. Deviation: upstream's controller
//! keeps re-asserting the ConfigMap from a watch; here it is written at start and
//! again when a CA file changes (cert_reload.rs).
//! A stored value that does not parse is replaced instead of stopping the sync for
//! good (upstream's sync fails on it until someone repairs the ConfigMap).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::{Part, Registry, UpdateInput, WriteOptions};
use serde_json::{Value, json};

pub(crate) const NAMESPACE: &str = "kube-system";
pub(crate) const NAME: &str = "extension-apiserver-authentication";

const CLIENT_CA: &str = "client-ca-file";
const REQUEST_HEADER_CA: &str = "requestheader-client-ca-file";
const USERNAME_HEADERS: &str = "requestheader-username-headers";
const UID_HEADERS: &str = "requestheader-uid-headers";
const GROUP_HEADERS: &str = "requestheader-group-headers";
const EXTRA_HEADERS_PREFIX: &str = "requestheader-extra-headers-prefix";
const ALLOWED_NAMES: &str = "requestheader-allowed-names";

/// The lists, in the order upstream writes them.
const LISTS: [&str; 5] = [
    USERNAME_HEADERS,
    UID_HEADERS,
    GROUP_HEADERS,
    EXTRA_HEADERS_PREFIX,
    ALLOWED_NAMES,
];

/// What this apiserver publishes (upstream's `ClusterAuthenticationInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AuthenticationInfo {
    /// `--client-ca-file`'s PEM.
    pub client_ca: Option<String>,
    /// `--requestheader-client-ca-file`'s PEM and the `--requestheader-*` settings.
    pub request_header: Option<(String, ferrokube_auth::RequestHeaderConfig)>,
}

impl AuthenticationInfo {
    fn lists(&self) -> BTreeMap<&'static str, Vec<String>> {
        let mut lists = BTreeMap::new();
        if let Some((_, c)) = &self.request_header {
            lists.insert(USERNAME_HEADERS, c.username_headers.clone());
            lists.insert(UID_HEADERS, c.uid_headers.clone());
            lists.insert(GROUP_HEADERS, c.group_headers.clone());
            lists.insert(EXTRA_HEADERS_PREFIX, c.extra_header_prefixes.clone());
            lists.insert(ALLOWED_NAMES, c.allowed_names.clone());
        }
        lists
    }
}

/// The ConfigMap's data after merging `ours` into the `existing` data at `now`.
pub(crate) fn merged_data(
    existing: &BTreeMap<String, String>,
    ours: &AuthenticationInfo,
    now: SystemTime,
) -> BTreeMap<String, String> {
    let mut data = BTreeMap::new();
    let ca = |key: &str, ours: Option<&str>| {
        combine_bundles(existing.get(key).map(String::as_str), ours, now)
    };
    if let Some(bundle) = ca(CLIENT_CA, ours.client_ca.as_deref()) {
        data.insert(CLIENT_CA.to_string(), bundle);
    }
    let Some(request_header_ca) = ca(
        REQUEST_HEADER_CA,
        ours.request_header.as_ref().map(|(pem, _)| pem.as_str()),
    ) else {
        return data;
    };
    let our_lists = ours.lists();
    for key in LISTS {
        let mut merged: Vec<String> = existing
            .get(key)
            .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
            .unwrap_or_default();
        for v in our_lists.get(key).into_iter().flatten() {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        let mut unique: Vec<String> = Vec::with_capacity(merged.len());
        for v in merged {
            if !unique.contains(&v) {
                unique.push(v);
            }
        }
        data.insert(
            key.to_string(),
            serde_json::to_string(&unique).unwrap_or_else(|_| "[]".into()),
        );
    }
    data.insert(REQUEST_HEADER_CA.to_string(), request_header_ca);
    data
}

/// Upstream's `combineCertLists`: the certificates of both bundles, not expired more
/// than five minutes before `now`, without duplicates, as PEM; `None` when none is
/// left. A bundle that does not parse contributes nothing.
fn combine_bundles(lhs: Option<&str>, rhs: Option<&str>, now: SystemTime) -> Option<String> {
    let slack = now.checked_sub(Duration::from_secs(300)).unwrap_or(now);
    let mut ders: Vec<Vec<u8>> = Vec::new();
    for bundle in [lhs, rhs].into_iter().flatten() {
        let Ok(certs) = ferrokube_pki::pem::parse_cert_pem_bundle(bundle) else {
            continue;
        };
        for cert in certs {
            let Ok(info) = ferrokube_pki::CertInfo::from_der(cert.as_ref()) else {
                continue;
            };
            if info.not_after > slack && !ders.iter().any(|d| d == cert.as_ref()) {
                ders.push(cert.as_ref().to_vec());
            }
        }
    }
    if ders.is_empty() {
        return None;
    }
    Some(
        ders.iter()
            .map(|d| ferrokube_pki::pem::encode_cert_pem(d))
            .collect(),
    )
}

/// Creates or updates the ConfigMap so it holds `ours` (merged with what it holds).
pub(crate) async fn publish(
    registry: &Registry,
    ours: &AuthenticationInfo,
) -> Result<(), ApiError> {
    let store = registry
        .store("", "v1", "configmaps")
        .ok_or_else(|| ApiError::internal("no store for configmaps"))?;
    let opts = WriteOptions::default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result = match store.get(Some(NAMESPACE), NAME).await {
            Ok(mut current) => {
                let existing: BTreeMap<String, String> =
                    serde_json::from_value(current["data"].clone()).unwrap_or_default();
                let data = merged_data(&existing, ours, SystemTime::now());
                if data == existing {
                    return Ok(());
                }
                current["data"] = json!(data);
                store
                    .update(
                        Some(NAMESPACE),
                        NAME,
                        UpdateInput::Replace(current),
                        Part::Main,
                        &opts,
                    )
                    .await
                    .map(drop)
            }
            Err(e) if e.is_not_found() => {
                let data = merged_data(&BTreeMap::new(), ours, SystemTime::now());
                let object: Value = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": NAME, "namespace": NAMESPACE},
                    "data": data,
                });
                store.create(Some(NAMESPACE), object, &opts).await.map(drop)
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => return Ok(()),
            // Another apiserver wrote it in between: merge into its version.
            Err(e) if (e.is_conflict() || e.is_already_exists()) && attempt < 5 => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_auth::RequestHeaderConfig;
    use ferrokube_pki::{CertificateAuthority, Validity};

    fn kubeadm(ca: &str) -> (String, RequestHeaderConfig) {
        (
            ca.to_string(),
            RequestHeaderConfig {
                username_headers: vec!["X-Remote-User".into()],
                uid_headers: vec![],
                group_headers: vec!["X-Remote-Group".into()],
                extra_header_prefixes: vec!["X-Remote-Extra-".into()],
                allowed_names: vec!["front-proxy-client".into()],
            },
        )
    }

    #[test]
    fn fresh_data_has_every_key_as_upstream_writes_it() {
        let client = CertificateAuthority::generate("client").unwrap();
        let proxy = CertificateAuthority::generate("proxy").unwrap();
        let ours = AuthenticationInfo {
            client_ca: Some(client.cert_pem().to_string()),
            request_header: Some(kubeadm(proxy.cert_pem())),
        };
        let data = merged_data(&BTreeMap::new(), &ours, SystemTime::now());
        assert_eq!(data[CLIENT_CA], client.cert_pem());
        assert_eq!(data[REQUEST_HEADER_CA], proxy.cert_pem());
        assert_eq!(data[USERNAME_HEADERS], r#"["X-Remote-User"]"#);
        assert_eq!(data[UID_HEADERS], "[]");
        assert_eq!(data[GROUP_HEADERS], r#"["X-Remote-Group"]"#);
        assert_eq!(data[EXTRA_HEADERS_PREFIX], r#"["X-Remote-Extra-"]"#);
        assert_eq!(data[ALLOWED_NAMES], r#"["front-proxy-client"]"#);
        assert_eq!(data.len(), 7);
        // Idempotent.
        assert_eq!(merged_data(&data, &ours, SystemTime::now()), data);

        // Without request-header settings only the client CA is published.
        let only_client = AuthenticationInfo {
            client_ca: Some(client.cert_pem().to_string()),
            request_header: None,
        };
        let data = merged_data(&BTreeMap::new(), &only_client, SystemTime::now());
        assert_eq!(data.keys().collect::<Vec<_>>(), vec![CLIENT_CA]);
        assert!(
            merged_data(
                &BTreeMap::new(),
                &AuthenticationInfo::default(),
                SystemTime::now()
            )
            .is_empty()
        );
    }

    #[test]
    fn merges_with_what_other_apiservers_wrote() {
        let client = CertificateAuthority::generate("client").unwrap();
        let other_client = CertificateAuthority::generate("other-client").unwrap();
        let proxy = CertificateAuthority::generate("proxy").unwrap();
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        let expired = CertificateAuthority::generate_with_validity(
            "expired",
            Validity {
                not_before: now - 3 * day,
                not_after: now - day,
            },
        )
        .unwrap();
        let mut existing = BTreeMap::new();
        existing.insert(
            CLIENT_CA.to_string(),
            format!("{}{}", other_client.cert_pem(), expired.cert_pem()),
        );
        existing.insert(
            USERNAME_HEADERS.to_string(),
            r#"["X-Other","X-Remote-User"]"#.into(),
        );
        existing.insert(GROUP_HEADERS.to_string(), "not json".into());
        existing.insert("unrelated".to_string(), "dropped".into());
        let ours = AuthenticationInfo {
            client_ca: Some(client.cert_pem().to_string()),
            request_header: Some(kubeadm(proxy.cert_pem())),
        };
        let data = merged_data(&existing, &ours, now);
        assert_eq!(
            data[CLIENT_CA],
            format!("{}{}", other_client.cert_pem(), client.cert_pem())
        );
        assert_eq!(data[USERNAME_HEADERS], r#"["X-Other","X-Remote-User"]"#);
        assert_eq!(data[GROUP_HEADERS], r#"["X-Remote-Group"]"#);
        assert!(!data.contains_key("unrelated"));

        // Request-header keys another apiserver published stay, even if this one has
        // none.
        let plain = AuthenticationInfo {
            client_ca: Some(client.cert_pem().to_string()),
            request_header: None,
        };
        let kept = merged_data(&data, &plain, now);
        assert_eq!(kept, data);
    }
}
