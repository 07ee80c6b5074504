//! CustomResourceDefinition conversion webhooks (upstream
//! `apiextensions-apiserver/pkg/apiserver/conversion/webhook_converter.go`): one
//! `apiextensions.k8s.io` ConversionReview (`request.uid`, `desiredAPIVersion`,
//! `objects`) POSTed to `spec.conversion.webhook.clientConfig` through the shared
//! [`crate::webhook_client`] within upstream's 30 s, in the first of
//! `conversionReviewVersions` the server speaks (v1 or v1beta1). The answer must be a
//! ConversionReview of that version (v1: its apiVersion, kind and `response.uid`
//! checked; v1beta1 is not, as upstream) whose `response.result.status` is
//! `Success`. The registry ([`ferrokube_registry::conversion`]) decides what is sent
//! and checks the converted objects.

use std::time::Duration;

use async_trait::async_trait;
use ferrokube_registry::conversion::ConversionWebhook;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::webhook_client::{ClientConfig, WebhookClient};

/// Upstream's webhook client timeout for conversion calls.
const TIMEOUT: Duration = Duration::from_secs(30);

const REVIEW_V1: &str = "apiextensions.k8s.io/v1";
const REVIEW_V1BETA1: &str = "apiextensions.k8s.io/v1beta1";

/// A ConversionReview as sent (k8s-openapi has no type for it).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'static str,
    kind: &'static str,
    request: ReviewRequest<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewRequest<'a> {
    uid: &'a str,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: &'a str,
    objects: Vec<Value>,
}

/// A ConversionReview as answered.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    response: Option<AnswerResponse>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerResponse {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    converted_objects: Vec<Value>,
    #[serde(default)]
    result: Status,
}

/// Upstream `createConversionReviewObjects`: the first listed version it speaks.
fn review_version(versions: &[String]) -> Option<&'static str> {
    versions.iter().find_map(|v| match v.as_str() {
        "v1" => Some(REVIEW_V1),
        "v1beta1" => Some(REVIEW_V1BETA1),
        _ => None,
    })
}

/// Go's `GroupVersionKind.String()`.
fn gvk(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// Upstream `getConvertedObjectsFromResponse`.
fn converted_objects(version: &str, uid: &str, body: &[u8]) -> Result<Vec<Value>, String> {
    let answer: Answer = serde_json::from_slice(body)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    if version == REVIEW_V1
        && (answer.api_version != REVIEW_V1 || answer.kind != "ConversionReview")
    {
        return Err(format!(
            "expected webhook response of {}, got {}",
            gvk(REVIEW_V1, "ConversionReview"),
            gvk(&answer.api_version, &answer.kind)
        ));
    }
    let response = answer.response.ok_or("no response provided")?;
    if version == REVIEW_V1 && response.uid != uid {
        return Err(format!(
            "expected response.uid={uid:?}, got {:?}",
            response.uid
        ));
    }
    let status = response.result.status.unwrap_or_default();
    if status != "Success" {
        return Err(match response.result.message.filter(|m| !m.is_empty()) {
            Some(m) => m,
            None => format!("response.result.status was '{status}', not 'Success'"),
        });
    }
    Ok(response.converted_objects)
}

/// The apiserver's [`ConversionWebhook`].
pub(crate) struct ConversionWebhooks {
    client: WebhookClient,
}

impl ConversionWebhooks {
    pub(crate) fn new(client: WebhookClient) -> Self {
        ConversionWebhooks { client }
    }
}

#[async_trait]
impl ConversionWebhook for ConversionWebhooks {
    async fn convert(
        &self,
        crd: &CustomResourceDefinition,
        desired_api_version: &str,
        objects: Vec<Value>,
    ) -> Result<Vec<Value>, String> {
        let webhook = crd
            .spec
            .conversion
            .as_ref()
            .and_then(|c| c.webhook.as_ref())
            .ok_or("the definition has no conversion webhook")?;
        let config = webhook
            .client_config
            .as_ref()
            .ok_or("the conversion webhook has no clientConfig")?;
        let version = review_version(&webhook.conversion_review_versions)
            .ok_or("no supported conversion review versions")?;
        let uid = ferrokube_registry::meta::new_uid();
        let review = Review {
            api_version: version,
            kind: "ConversionReview",
            request: ReviewRequest {
                uid: &uid,
                desired_api_version,
                objects,
            },
        };
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let answer = self
            .client
            .post_json(&ClientConfig::from(config), TIMEOUT, body)
            .await?;
        converted_objects(version, &uid, &answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_known_review_version_is_used() {
        let v = |vs: &[&str]| review_version(&vs.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["v2", "v1beta1", "v1"]), Some(REVIEW_V1BETA1));
        assert_eq!(v(&["v1", "v1beta1"]), Some(REVIEW_V1));
        assert_eq!(v(&["v9"]), None);
    }

    #[test]
    fn reviews_are_sent_and_answers_checked_as_upstream() {
        let review = Review {
            api_version: REVIEW_V1,
            kind: "ConversionReview",
            request: ReviewRequest {
                uid: "u1",
                desired_api_version: "ex.com/v2",
                objects: vec![json!({"apiVersion": "ex.com/v1"})],
            },
        };
        assert_eq!(
            serde_json::to_value(&review).unwrap(),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "u1", "desiredAPIVersion": "ex.com/v2",
                    "objects": [{"apiVersion": "ex.com/v1"}]}})
        );
        let ok = |uid: &str| {
            json!({"apiVersion": REVIEW_V1, "kind": "ConversionReview",
                "response": {"uid": uid, "result": {"status": "Success"},
                    "convertedObjects": [{"apiVersion": "ex.com/v2"}]}})
            .to_string()
        };
        assert_eq!(
            converted_objects(REVIEW_V1, "u1", ok("u1").as_bytes()).unwrap(),
            [json!({"apiVersion": "ex.com/v2"})]
        );
        assert_eq!(
            converted_objects(REVIEW_V1, "u2", ok("u1").as_bytes()).unwrap_err(),
            "expected response.uid=\"u2\", got \"u1\""
        );
        // v1beta1 answers are not checked for their uid.
        let beta = json!({"apiVersion": REVIEW_V1BETA1, "kind": "ConversionReview",
            "response": {"result": {"status": "Success"}, "convertedObjects": []}});
        assert!(converted_objects(REVIEW_V1BETA1, "u1", beta.to_string().as_bytes()).is_ok());
        assert_eq!(
            converted_objects(REVIEW_V1, "u1", beta.to_string().as_bytes()).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got apiextensions.k8s.io/v1beta1, Kind=ConversionReview"
        );
        let failed = json!({"apiVersion": REVIEW_V1, "kind": "ConversionReview",
            "response": {"uid": "u1", "result": {"status": "Failure", "message": "cannot"}}});
        assert_eq!(
            converted_objects(REVIEW_V1, "u1", failed.to_string().as_bytes()).unwrap_err(),
            "cannot"
        );
        let failed = json!({"apiVersion": REVIEW_V1, "kind": "ConversionReview",
            "response": {"uid": "u1", "result": {"status": "Failure"}}});
        assert_eq!(
            converted_objects(REVIEW_V1, "u1", failed.to_string().as_bytes()).unwrap_err(),
            "response.result.status was 'Failure', not 'Success'"
        );
        let none = json!({"apiVersion": REVIEW_V1, "kind": "ConversionReview"});
        assert_eq!(
            converted_objects(REVIEW_V1, "u1", none.to_string().as_bytes()).unwrap_err(),
            "no response provided"
        );
    }
}
