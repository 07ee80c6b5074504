//! Kubeconfig documents (client-go's `clientcmd/api/v1` `Config`), the subset a
//! generated cluster needs: one cluster, one user, one context, current-context set,
//! credentials inline as base64 `*-data` fields.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// A kubeconfig document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub clusters: Vec<NamedCluster>,
    #[serde(default)]
    pub users: Vec<NamedUser>,
    #[serde(default)]
    pub contexts: Vec<NamedContext>,
    #[serde(rename = "current-context", default)]
    pub current_context: String,
    #[serde(default)]
    pub preferences: Preferences,
}

/// `preferences: {}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preferences {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCluster {
    pub name: String,
    pub cluster: Cluster,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub server: String,
    #[serde(
        rename = "certificate-authority-data",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub certificate_authority_data: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedUser {
    pub name: String,
    pub user: AuthInfo,
}

#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthInfo {
    #[serde(
        rename = "client-certificate-data",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_certificate_data: Option<String>,
    #[serde(
        rename = "client-key-data",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_key_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl std::fmt::Debug for AuthInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthInfo")
            .field("client_certificate_data", &self.client_certificate_data)
            .field(
                "client_key_data",
                &self.client_key_data.as_ref().map(|_| "[elided]"),
            )
            .field("token", &self.token.as_ref().map(|_| "[elided]"))
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedContext {
    pub name: String,
    pub context: Context,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub cluster: String,
    pub user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

impl Kubeconfig {
    /// One cluster, one user, one context named `{user}@{cluster}` (kubeadm's naming),
    /// which is the current context.
    pub fn single(
        cluster_name: &str,
        server_url: &str,
        ca_pem: &str,
        user_name: &str,
        user: AuthInfo,
    ) -> Self {
        let context_name = format!("{user_name}@{cluster_name}");
        Kubeconfig {
            api_version: "v1".into(),
            kind: "Config".into(),
            clusters: vec![NamedCluster {
                name: cluster_name.into(),
                cluster: Cluster {
                    server: server_url.into(),
                    certificate_authority_data: Some(b64(ca_pem)),
                },
            }],
            users: vec![NamedUser {
                name: user_name.into(),
                user,
            }],
            contexts: vec![NamedContext {
                name: context_name.clone(),
                context: Context {
                    cluster: cluster_name.into(),
                    user: user_name.into(),
                    namespace: None,
                },
            }],
            current_context: context_name,
            preferences: Preferences {},
        }
    }

    /// The YAML document.
    pub fn to_yaml(&self) -> String {
        // Serializing plain structs of strings into YAML cannot fail.
        serde_yaml_ng::to_string(self).expect("kubeconfig serializes to YAML")
    }

    /// Parses a kubeconfig YAML document.
    pub fn from_yaml(yaml: &str) -> Result<Self, serde_yaml_ng::Error> {
        serde_yaml_ng::from_str(yaml)
    }
}

/// A kubeconfig for a client-certificate user.
pub fn kubeconfig_yaml(
    cluster_name: &str,
    server_url: &str,
    ca_pem: &str,
    user_name: &str,
    client_cert_pem: &str,
    client_key_pem: &str,
) -> String {
    let user = AuthInfo {
        client_certificate_data: Some(b64(client_cert_pem)),
        client_key_data: Some(b64(client_key_pem)),
        token: None,
    };
    Kubeconfig::single(cluster_name, server_url, ca_pem, user_name, user).to_yaml()
}

/// A kubeconfig for a bearer-token user.
pub fn kubeconfig_token_yaml(
    cluster_name: &str,
    server_url: &str,
    ca_pem: &str,
    user_name: &str,
    token: &str,
) -> String {
    let user = AuthInfo {
        token: Some(token.into()),
        ..AuthInfo::default()
    };
    Kubeconfig::single(cluster_name, server_url, ca_pem, user_name, user).to_yaml()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_cert_kubeconfig_has_upstream_shape() {
        let yaml = kubeconfig_yaml(
            "ferrokube",
            "https://127.0.0.1:6443",
            "CA PEM\n",
            "admin",
            "CERT\n",
            "KEY\n",
        );
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(v["apiVersion"].as_str(), Some("v1"));
        assert_eq!(v["kind"].as_str(), Some("Config"));
        assert_eq!(v["current-context"].as_str(), Some("admin@ferrokube"));
        let cluster = &v["clusters"][0];
        assert_eq!(cluster["name"].as_str(), Some("ferrokube"));
        assert_eq!(
            cluster["cluster"]["server"].as_str(),
            Some("https://127.0.0.1:6443")
        );
        assert_eq!(
            cluster["cluster"]["certificate-authority-data"].as_str(),
            Some(b64("CA PEM\n").as_str())
        );
        let user = &v["users"][0];
        assert_eq!(user["name"].as_str(), Some("admin"));
        assert_eq!(
            user["user"]["client-certificate-data"].as_str(),
            Some(b64("CERT\n").as_str())
        );
        assert_eq!(
            user["user"]["client-key-data"].as_str(),
            Some(b64("KEY\n").as_str())
        );
        assert!(user["user"].get("token").is_none());
        let ctx = &v["contexts"][0];
        assert_eq!(ctx["name"].as_str(), Some("admin@ferrokube"));
        assert_eq!(ctx["context"]["cluster"].as_str(), Some("ferrokube"));
        assert_eq!(ctx["context"]["user"].as_str(), Some("admin"));

        let parsed = Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(parsed.to_yaml(), yaml);
    }

    #[test]
    fn token_kubeconfig() {
        let yaml = kubeconfig_token_yaml("c", "https://h:6443", "CA", "bob", "s3cr3t: with colon");
        let parsed = Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(
            parsed.users[0].user.token.as_deref(),
            Some("s3cr3t: with colon")
        );
        assert!(parsed.users[0].user.client_key_data.is_none());
        assert_eq!(parsed.current_context, "bob@c");
        assert!(!format!("{:?}", parsed.users[0].user).contains("s3cr3t"));
    }
}
