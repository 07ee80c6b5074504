//! The CSR approving controller (upstream `pkg/controller/certificates/approver`,
//! the `certificatesigningrequest-approving-controller`): a pending kubelet client
//! request (signer `kube-apiserver-client-kubelet`, subject `system:node:<name>` in
//! `system:nodes`, upstream's usages and no SANs) is approved through `/approval`
//! with reason `AutoApproved` when a SubjectAccessReview says its requester
//! (`spec.username`, `uid`, `groups`, `extra`, which the apiserver fills in) may
//! `create` `certificatesigningrequests/selfnodeclient` (a node renewing its own
//! certificate: CN equals the requester) or `certificatesigningrequests/nodeclient`
//! (bootstrap tokens asking for any node). Anything else is left pending for a
//! person; a recognized request that no review allows is retried with backoff, as
//! upstream.
//!
//! Pure part: [`recognized_permissions`].

use std::sync::Arc;

use ferrokube_pki::csr::{CertificateRequest, parse_request_pem};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::csr::{
    APPROVED, KUBE_APISERVER_CLIENT_KUBELET, approval, condition, is_issued, usage_set,
    validate_kubelet_client,
};
use crate::replicaset::is_not_found;
use crate::{Action, Controller, Error, Result, enqueue_live};

/// Upstream's approval reason.
pub const AUTO_APPROVED: &str = "AutoApproved";

/// One way a request may be approved: the subresource the requester needs
/// `create` on, and the approval message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recognizer {
    pub subresource: &'static str,
    pub message: &'static str,
}

const SELF_NODE_CLIENT: Recognizer = Recognizer {
    subresource: "selfnodeclient",
    message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
};
const NODE_CLIENT: Recognizer = Recognizer {
    subresource: "nodeclient",
    message: "Auto approving kubelet client certificate after SubjectAccessReview.",
};

/// Upstream's recognizers in order: a kubelet client request is `selfnodeclient`
/// when its CN is the requester, and always `nodeclient`.
pub fn recognized_permissions(
    csr: &CertificateSigningRequest,
    req: &CertificateRequest,
) -> Vec<Recognizer> {
    let is_node_client = csr.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET
        && validate_kubelet_client(req, &usage_set(csr)).is_ok();
    if !is_node_client {
        return Vec::new();
    }
    let mut out = Vec::new();
    if csr.spec.username.as_deref() == Some(req.common_name.as_str()) {
        out.push(SELF_NODE_CLIENT);
    }
    out.push(NODE_CLIENT);
    out
}

/// The CSR approving controller.
pub struct CsrApprovingController {
    client: kube::Client,
    csrs: Store<CertificateSigningRequest>,
}

impl CsrApprovingController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(CsrApprovingController {
            client,
            csrs: factory.informer::<CertificateSigningRequest>().store(),
        })
    }

    /// Upstream `sarApprover.authorize`: a SubjectAccessReview for the requester.
    async fn authorized(&self, csr: &CertificateSigningRequest, subresource: &str) -> Result<bool> {
        let spec = &csr.spec;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: spec.username.clone(),
                uid: spec.uid.clone(),
                groups: spec.groups.clone(),
                extra: spec.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("certificates.k8s.io".into()),
                    resource: Some("certificatesigningrequests".into()),
                    verb: Some("create".into()),
                    subresource: Some(subresource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

#[async_trait::async_trait]
impl Controller for CsrApprovingController {
    fn name(&self) -> &'static str {
        "csrapproving"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |csr: &CertificateSigningRequest| {
            csr.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET
                && approval(csr) == (false, false)
                && !is_issued(csr)
        });
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(csr) = self.csrs.get(key) else {
            return Ok(Action::Done);
        };
        if is_issued(&csr) || approval(&csr) != (false, false) {
            return Ok(Action::Done);
        }
        let req = parse_request_pem(&csr.spec.request.0)
            .map_err(|e| Error::Invalid(format!("unable to parse csr {key:?}: {e}")))?;
        let recognizers = recognized_permissions(&csr, &req);
        for r in &recognizers {
            if !self.authorized(&csr, r.subresource).await? {
                continue;
            }
            let mut approved = (*csr).clone();
            let stamp = Time(k8s_openapi::jiff::Timestamp::now());
            approved
                .status
                .get_or_insert_with(Default::default)
                .conditions
                .get_or_insert_with(Vec::new)
                .push(condition(APPROVED, AUTO_APPROVED, r.message, stamp));
            let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
            // A stale cache gives a 409 (resourceVersion): the retry sees the fresh CSR.
            return match api
                .replace_subresource("approval", key, &PostParams::default(), &approved)
                .await
            {
                Ok(_) => {
                    tracing::info!(csr = key, via = r.subresource, "auto-approved");
                    Ok(Action::Done)
                }
                Err(e) if is_not_found(&e) => Ok(Action::Done),
                Err(e) => Err(e.into()),
            };
        }
        if recognizers.is_empty() {
            return Ok(Action::Done);
        }
        let tried: Vec<&str> = recognizers.iter().map(|r| r.subresource).collect();
        // Upstream's ignorable error: retried with backoff, the review may change.
        Err(Error::Invalid(format!(
            "recognized csr {key:?} as {tried:?} but subject access review was not approved"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csr::tests::request;
    use serde_json::json;

    fn node_request(cn: &str) -> CertificateRequest {
        request(cn, Some("system:nodes"), vec![])
    }

    fn csr(signer: &str, username: &str) -> CertificateSigningRequest {
        serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {
            "request": "", "signerName": signer, "username": username,
            "usages": ["digital signature", "client auth"]}}))
        .unwrap()
    }

    #[test]
    fn recognizers_as_upstream() {
        let req = node_request("system:node:n1");
        let subresources = |c: &CertificateSigningRequest| {
            recognized_permissions(c, &req)
                .iter()
                .map(|r| r.subresource)
                .collect::<Vec<_>>()
        };
        // A node renewing itself: selfnodeclient first, then nodeclient.
        let own = csr(KUBE_APISERVER_CLIENT_KUBELET, "system:node:n1");
        assert_eq!(subresources(&own), ["selfnodeclient", "nodeclient"]);
        // A bootstrap token asking for the node: nodeclient only.
        let bootstrap = csr(KUBE_APISERVER_CLIENT_KUBELET, "system:bootstrap:abcdef");
        assert_eq!(subresources(&bootstrap), ["nodeclient"]);
        // Another signer, or a request that is not a kubelet client one: nothing.
        let other = csr("kubernetes.io/kube-apiserver-client", "system:node:n1");
        assert!(subresources(&other).is_empty());
        let alice = node_request("alice");
        assert!(recognized_permissions(&own, &alice).is_empty());
    }
}
