//! The feature gates this apiserver acts on (`--feature-gates`), read once at start
//! into [`Features`]; each is looked at where upstream's kube-apiserver looks at it.
//! Every other gate keeps its v1.33 default here, and setting it is warned about.

use ferrokube_component_base::featuregate::FeatureGates;

/// The gates [`Features`] reads.
pub const ACTED_ON: &[&str] = &[
    "APIServerIdentity",
    "AggregatedDiscoveryRemoveBetaType",
    "AllowParsingUserUIDFromCertAuth",
    "AuthorizeNodeWithSelectors",
    "AuthorizeWithSelectors",
    "ServiceAccountNodeAudienceRestriction",
    "StorageVersionHash",
];

/// What the gates turn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// APIServerIdentity: the `apiserver-<id>` Lease in kube-system.
    pub apiserver_identity: bool,
    /// AggregatedDiscoveryRemoveBetaType: aggregated discovery `v2beta1` not served.
    pub remove_discovery_beta: bool,
    /// AllowParsingUserUIDFromCertAuth: a client certificate's subject may carry a UID.
    pub uid_from_client_certificate: bool,
    /// AuthorizeNodeWithSelectors: a node reads only its own pods and Node.
    pub authorize_node_with_selectors: bool,
    /// AuthorizeWithSelectors: field and label selectors reach the authorizers.
    pub authorize_with_selectors: bool,
    /// ServiceAccountNodeAudienceRestriction: a kubelet's token audiences are checked.
    pub node_token_audiences: bool,
    /// StorageVersionHash: discovery gives each stored resource's storageVersionHash.
    pub storage_version_hash: bool,
}

impl Default for Features {
    /// Kubernetes v1.33's defaults.
    fn default() -> Self {
        Features::from_gates(&FeatureGates::new()).expect("v1.33's defaults are consistent")
    }
}

impl Features {
    /// The gates' values, refused where upstream's validation refuses them.
    pub fn from_gates(gates: &FeatureGates) -> Result<Features, String> {
        let on = |name: &str| gates.enabled(name);
        let features = Features {
            apiserver_identity: on("APIServerIdentity"),
            remove_discovery_beta: on("AggregatedDiscoveryRemoveBetaType"),
            uid_from_client_certificate: on("AllowParsingUserUIDFromCertAuth"),
            authorize_node_with_selectors: on("AuthorizeNodeWithSelectors"),
            authorize_with_selectors: on("AuthorizeWithSelectors"),
            node_token_audiences: on("ServiceAccountNodeAudienceRestriction"),
            storage_version_hash: on("StorageVersionHash"),
        };
        // Upstream's `validateNodeSelectorAuthorizationFeature`.
        if features.authorize_node_with_selectors && !features.authorize_with_selectors {
            return Err(
                "AuthorizeNodeWithSelectors feature requires AuthorizeWithSelectors feature to be enabled"
                    .into(),
            );
        }
        Ok(features)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_on_and_gates_turn_them_off() {
        let all_on = Features::default();
        assert!(all_on.authorize_with_selectors && all_on.storage_version_hash);
        let (gates, _) =
            FeatureGates::from_flags(&["StorageVersionHash=false,APIServerIdentity=false"])
                .unwrap();
        let some_off = Features::from_gates(&gates).unwrap();
        assert!(!some_off.storage_version_hash && !some_off.apiserver_identity);
        assert!(some_off.authorize_node_with_selectors);
        let (gates, _) = FeatureGates::from_flags(&["AuthorizeWithSelectors=false"]).unwrap();
        assert_eq!(
            Features::from_gates(&gates).unwrap_err(),
            "AuthorizeNodeWithSelectors feature requires AuthorizeWithSelectors feature to be enabled"
        );
        let (gates, _) = FeatureGates::from_flags(&[
            "AuthorizeWithSelectors=false,AuthorizeNodeWithSelectors=false",
        ])
        .unwrap();
        assert!(
            !Features::from_gates(&gates)
                .unwrap()
                .authorize_with_selectors
        );
        for name in ACTED_ON {
            assert!(gates.spec(name).is_some(), "{name}");
        }
    }
}
