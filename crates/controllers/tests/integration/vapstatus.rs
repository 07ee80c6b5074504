//! The validatingadmissionpolicy-status controller on the test apiserver, under its
//! own ServiceAccount: a policy's misspelt field is a type checking warning in its
//! status against the schema the apiserver serves, and the warning goes once the
//! policy is fixed; `observedGeneration` follows. Every wait is bounded.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn type_checking_warnings_follow_the_policy() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["validatingadmissionpolicy-status".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(srv.client.clone());
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": "replicas.example.com"},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "validations": [
                {"expression": "object.spec.replicas <= int(params.data.max)"},
                {"expression": "object.spec.replica <= 5",
                 "messageExpression": "'replicas: ' + string(object.spec.replicas)"},
                {"expression": "object.spec.template.spec.containers.all(c, c.imagePullPolicy == 'Always')",
                 "messageExpression": "'missing: ' + params.dta.message"}]}}))?;
    policies.create(&PostParams::default(), &policy).await?;

    let status = wait_for(30, "type checking of generation 1", || async {
        let p = policies.get("replicas.example.com").await?;
        Ok(p.status.filter(|s| s.observed_generation == Some(1)))
    })
    .await?;
    let warnings = status
        .type_checking
        .and_then(|t| t.expression_warnings)
        .unwrap_or_default();
    let found: Vec<(&str, &str)> = warnings
        .iter()
        .map(|w| (w.field_ref.as_str(), w.warning.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "spec.validations[1].expression",
                "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica <= 5\n | ...........^\n"
            ),
            (
                "spec.validations[2].messageExpression",
                "apps/v1, Kind=Deployment: ERROR: <input>:1:21: undefined field 'dta'\n | 'missing: ' + params.dta.message\n | ....................^\n"
            ),
        ]
    );

    // Fixed: the next generation has no warnings.
    let mut fixed = policies.get("replicas.example.com").await?;
    if let Some(spec) = fixed.spec.as_mut() {
        let validations = spec.validations.as_mut().expect("validations");
        validations[1].expression = "object.spec.replicas <= 5".into();
        validations[2].message_expression = Some("'missing: ' + params.data.message".into());
    }
    policies
        .replace("replicas.example.com", &PostParams::default(), &fixed)
        .await?;
    let status = wait_for(30, "type checking of generation 2", || async {
        let p = policies.get("replicas.example.com").await?;
        Ok(p.status.filter(|s| s.observed_generation == Some(2)))
    })
    .await?;
    assert_eq!(
        status
            .type_checking
            .and_then(|t| t.expression_warnings)
            .unwrap_or_default(),
        []
    );

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
