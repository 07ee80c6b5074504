//! `--authorization-mode=...,Webhook,...` with `--authorization-webhook-config-file`:
//! a remote service answers SubjectAccessReviews (upstream
//! `k8s.io/apiserver/plugin/pkg/authorizer/webhook`), and [`Authorization`], the
//! `--authorization-mode` chain with the webhook in its place.
//!
//! - The review carries the request's attributes (resource or non-resource), the
//!   user, groups, uid and extra; `status.allowed` is Allow, `status.denied` Deny with
//!   `status.reason`, anything else no opinion.
//! - Answers are cached by the whole review (`--authorization-webhook-cache-authorized-ttl`,
//!   default 5m, for allowed; `--authorization-webhook-cache-unauthorized-ttl`, default
//!   30s, for the rest). Failed calls are not cached; they count as the failure
//!   policy says (the flags' webhook: no opinion), as upstream's `decisionOnError`.
//! - Calls are retried as upstream retries them
//!   ([`KubeconfigWebhook::post_json_retrying`]).
//!
//! The authorizer traits are synchronous; the webhook is not. Requests,
//! impersonation, the SubjectAccessReview APIs and the checks that run inside
//! admission (RBAC escalation, CSR approval and signing, owner references) ask the
//! chain asynchronously ([`Authorization::decide`]). CEL's `authorizer`, evaluated
//! synchronously, uses the [`Authorizer`] face of the chain, in which the webhook
//! gives the answer it gave before for the same review while that is cached, and no
//! opinion otherwise.
//!
//! `--authorization-config` ([`crate::authz_config`]) builds the same chain with any
//! number of webhooks, each with its own timeout, failure policy and match
//! conditions ([`WebhookSettings`]).
//!
//! Left out: the egress selector, and the webhook's rules in SelfSubjectRulesReviews
//! (upstream's webhook has none either and marks the answer incomplete, as here).
//!
//! A failed call or condition is the failure policy's decision, and the failure goes
//! with it ([`Verdict`]): a request nothing allowed then answers 500 with it, and an
//! access review shows it as `evaluationError`, as upstream's chain does.

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_auth::{Attributes, AuthorizationMode, Authorizer, Decision, UnionAuthorizer};
use k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus;
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

use crate::webhook_client::{KubeconfigWebhook, ReviewVersion};

/// Upstream's first backoff for this webhook's retries.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// How long one review call may take (upstream's webhook request timeout).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Reviews whose answers are kept at most.
const CACHE_SIZE: NonZeroUsize = NonZeroUsize::new(8192).unwrap();

/// `--authorization-webhook-*`.
#[derive(Debug, Clone)]
pub struct AuthorizationWebhookOptions {
    /// `--authorization-webhook-config-file` (required with the `Webhook` mode).
    pub config_file: Option<std::path::PathBuf>,
    /// `--authorization-webhook-version` (default v1beta1).
    pub version: ReviewVersion,
    /// `--authorization-webhook-cache-authorized-ttl` (default 5m0s).
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl` (default 30s).
    pub unauthorized_ttl: Duration,
}

impl AuthorizationWebhookOptions {
    /// How the flags' webhook is asked: upstream's timeout, no opinion on failure.
    pub(crate) fn settings(&self) -> WebhookSettings {
        WebhookSettings {
            name: "webhook".into(),
            version: self.version,
            timeout: CALL_TIMEOUT,
            authorized_ttl: self.authorized_ttl,
            unauthorized_ttl: self.unauthorized_ttl,
            failure_policy: FailurePolicy::NoOpinion,
            match_conditions: Vec::new(),
        }
    }
}

impl Default for AuthorizationWebhookOptions {
    fn default() -> Self {
        AuthorizationWebhookOptions {
            config_file: None,
            version: ReviewVersion::V1beta1,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

/// What a webhook's answer is when its call fails or its match conditions cannot be
/// evaluated (`failurePolicy`; the flags' webhook has no opinion then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailurePolicy {
    NoOpinion,
    Deny,
}

/// How one authorization webhook is asked: the flags' settings, or an
/// `--authorization-config` entry's.
pub(crate) struct WebhookSettings {
    /// The authorizer's name, in logs and in the reason of a Deny on failure.
    pub name: String,
    pub version: ReviewVersion,
    /// One call's limit.
    pub timeout: Duration,
    /// How long answers are kept (zero: not kept).
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    pub failure_policy: FailurePolicy,
    /// CEL over the v1 review's spec (`request`): the webhook is only asked when all
    /// are true.
    pub match_conditions: Vec<(String, ferrokube_cel::Program)>,
}

/// The webhook authorizer with its cache.
pub(crate) struct WebhookAuthorizer {
    webhook: KubeconfigWebhook,
    settings: WebhookSettings,
    /// The review's spec (JSON) → when the answer expires, and the answer.
    cache: Mutex<lru::LruCache<String, (Instant, WebhookAnswer)>>,
}

impl WebhookAuthorizer {
    /// The webhook the kubeconfig at `path` names, asked as `settings` say.
    pub(crate) async fn connect(
        path: &Path,
        settings: WebhookSettings,
    ) -> Result<WebhookAuthorizer, String> {
        Ok(WebhookAuthorizer {
            webhook: KubeconfigWebhook::from_file(path)
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?,
            settings,
            cache: Mutex::new(lru::LruCache::new(CACHE_SIZE)),
        })
    }

    fn spec(&self, attrs: &Attributes) -> String {
        review_spec(attrs, self.settings.version).to_string()
    }

    /// The answer cached for this review, if any.
    fn cached(&self, spec: &str) -> Option<WebhookAnswer> {
        match self.cache.lock().get(spec) {
            Some((expires, answer)) if *expires > Instant::now() => Some(answer.clone()),
            _ => None,
        }
    }

    /// Whether the request is for this webhook (upstream's rule: any false condition
    /// skips it; otherwise an error is a failure).
    fn matches(&self, attrs: &Attributes) -> Result<bool, String> {
        if self.settings.match_conditions.is_empty() {
            return Ok(true);
        }
        let mut activation = ferrokube_cel::Activation::new();
        activation.bind_json("request", &review_spec(attrs, ReviewVersion::V1));
        ferrokube_cel::match_conditions(&self.settings.match_conditions, &activation)
    }

    /// The failure policy's answer to a failed call or condition (upstream's
    /// `decisionOnError`, with no reason), and the failure.
    fn failed(&self, error: String) -> WebhookAnswer {
        tracing::error!(authorizer = %self.settings.name, %error, "authorization webhook failed");
        let decision = match self.settings.failure_policy {
            FailurePolicy::NoOpinion => Decision::no_opinion(),
            FailurePolicy::Deny => Decision::Deny(String::new()),
        };
        (decision, Some(error))
    }

    /// The answer without waiting: the cached one, or no opinion.
    fn answer_now(&self, attrs: &Attributes) -> Decision {
        match self.matches(attrs) {
            Ok(true) => self
                .cached(&self.spec(attrs))
                .map_or_else(Decision::no_opinion, |(decision, _)| decision),
            Ok(false) => Decision::no_opinion(),
            Err(e) => self.failed(e).0,
        }
    }

    /// The webhook's answer, and why it failed when it did.
    async fn authorize(&self, attrs: &Attributes) -> WebhookAnswer {
        match self.matches(attrs) {
            Ok(true) => {}
            Ok(false) => return (Decision::no_opinion(), None),
            Err(e) => return self.failed(e),
        }
        let spec = self.spec(attrs);
        if let Some(answer) = self.cached(&spec) {
            return answer;
        }
        let answer = match self.review(&spec).await {
            Ok(status) => decision_of(status),
            Err(e) => return self.failed(e),
        };
        let ttl = if answer.0.is_allowed() {
            self.settings.authorized_ttl
        } else {
            self.settings.unauthorized_ttl
        };
        if !ttl.is_zero() && should_cache(attrs) {
            self.cache
                .lock()
                .put(spec, (Instant::now() + ttl, answer.clone()));
        }
        answer
    }

    /// One SubjectAccessReview, retried as upstream retries webhook calls.
    async fn review(&self, spec: &str) -> Result<SubjectAccessReviewStatus, String> {
        let api_version = self.settings.version.api_version("authorization.k8s.io");
        let body = format!(
            r#"{{"apiVersion":"{api_version}","kind":"SubjectAccessReview","metadata":{{"creationTimestamp":null}},"spec":{spec},"status":{{"allowed":false}}}}"#
        )
        .into_bytes();
        let answer = self
            .webhook
            .post_json_retrying(self.settings.timeout, FIRST_BACKOFF, body)
            .await
            .map_err(|e| e.to_string())?;
        let review: Value = serde_json::from_slice(&answer)
            .map_err(|e| format!("decoding the SubjectAccessReview: {e}"))?;
        serde_json::from_value(review["status"].clone())
            .map_err(|e| format!("decoding the SubjectAccessReview status: {e}"))
    }
}

/// The review's spec for `attrs`. The versions name every field alike but the
/// groups: `groups` in v1, `group` in v1beta1.
fn review_spec(attrs: &Attributes, version: ReviewVersion) -> Value {
    let groups = match version {
        ReviewVersion::V1 => "groups",
        ReviewVersion::V1beta1 => "group",
    };
    let mut spec = json!({"user": attrs.user.name});
    spec[groups] = json!(attrs.user.groups);
    if !attrs.user.uid.is_empty() {
        spec["uid"] = json!(attrs.user.uid);
    }
    if !attrs.user.extra.is_empty() {
        spec["extra"] = json!(attrs.user.extra);
    }
    if attrs.resource_request {
        spec["resourceAttributes"] = json!({
            "namespace": attrs.namespace,
            "verb": attrs.verb,
            "group": attrs.api_group,
            "version": attrs.api_version,
            "resource": attrs.resource,
            "subresource": attrs.subresource,
            "name": attrs.name,
        });
        let (fields, labels) = selector_requirements(attrs);
        if !fields.is_empty() {
            spec["resourceAttributes"]["fieldSelector"] = json!({"requirements": fields});
        }
        if !labels.is_empty() {
            spec["resourceAttributes"]["labelSelector"] = json!({"requirements": labels});
        }
    } else {
        spec["nonResourceAttributes"] = json!({"path": attrs.path, "verb": attrs.verb});
    }
    spec
}

/// A request's selectors as a review's requirements (upstream's
/// `fieldSelectorToAuthorizationAPI` and `labelSelectorToAuthorizationAPI`, with
/// AuthorizeWithSelectors): equalities as `In`, inequalities as `NotIn`, set and
/// existence operators as themselves; others (`gt`, `lt`) left out, which only
/// broadens the check.
fn selector_requirements(attrs: &Attributes) -> (Vec<Value>, Vec<Value>) {
    use ferrokube_apimachinery::labels::Operator;
    let fields = attrs
        .field_selector
        .iter()
        .map(|r| {
            let operator = if r.equals { "In" } else { "NotIn" };
            json!({"key": r.field, "operator": operator, "values": [r.value]})
        })
        .collect();
    let labels = attrs
        .label_selector
        .iter()
        .filter_map(|r| {
            let operator = match r.operator() {
                Operator::Equals | Operator::DoubleEquals | Operator::In => "In",
                Operator::NotEquals | Operator::NotIn => "NotIn",
                Operator::Exists => "Exists",
                Operator::DoesNotExist => "DoesNotExist",
                Operator::GreaterThan | Operator::LessThan => return None,
            };
            let mut requirement = json!({"key": r.key(), "operator": operator});
            if !r.values().is_empty() {
                requirement["values"] = json!(r.values());
            }
            Some(requirement)
        })
        .collect();
    (fields, labels)
}

/// A webhook's decision, and its failure if it failed.
type WebhookAnswer = (Decision, Option<String>);

/// Upstream's `maxControlledAttrCacheSize`.
const MAX_CONTROLLED_ATTRIBUTES_CACHED: usize = 10_000;

/// Whether an answer about these attributes may be cached (upstream `shouldCache`):
/// not when what the requester controls is so large that it may be an attempt to
/// crowd the cache out.
fn should_cache(attrs: &Attributes) -> bool {
    let controlled = [
        &attrs.namespace,
        &attrs.verb,
        &attrs.api_group,
        &attrs.api_version,
        &attrs.resource,
        &attrs.subresource,
        &attrs.name,
        &attrs.path,
    ]
    .iter()
    .map(|s| s.len())
    .sum::<usize>();
    controlled < MAX_CONTROLLED_ATTRIBUTES_CACHED
}

/// Upstream's reading of an answer: the webhook's reason goes with each decision; an
/// answer both allowing and denying is a denial and a failure.
fn decision_of(status: SubjectAccessReviewStatus) -> WebhookAnswer {
    let reason = status.reason.unwrap_or_default();
    match (status.allowed, status.denied.unwrap_or(false)) {
        (true, true) => (
            Decision::Deny(reason),
            Some("webhook subject access review returned both allow and deny response".into()),
        ),
        (_, true) => (Decision::Deny(reason), None),
        (true, false) => (Decision::Allow(reason), None),
        (false, false) => (Decision::NoOpinion(reason), None),
    }
}

/// What the chain answered, and why an authorizer on the way failed, if one did.
pub(crate) struct Verdict {
    pub decision: Decision,
    pub error: Option<String>,
}

/// One authorizer of the chain, as configured.
pub(crate) enum Link {
    Sync(Box<dyn Authorizer>),
    Webhook(Arc<WebhookAuthorizer>),
}

/// One stretch of the chain.
enum Step {
    /// Synchronous authorizers, asked in order.
    Chain(UnionAuthorizer),
    Webhook(Arc<WebhookAuthorizer>),
}

/// The authorizer chain (`--authorization-mode` or `--authorization-config`):
/// `system:masters` first, then the authorizers in order, each webhook in its place.
/// The first Allow or Deny is the answer.
///
/// The chain is replaced whole when `--authorization-config` changes
/// ([`Authorization::replace`]); a request is decided by the chain it found.
pub(crate) struct Authorization {
    current: RwLock<Arc<Chain>>,
    /// Whether selectors reach the authorizers (AuthorizeWithSelectors).
    with_selectors: bool,
}

struct Chain {
    steps: Vec<Step>,
    /// The modes the chain was configured with, for rules reviews.
    modes: Vec<AuthorizationMode>,
}

impl Authorization {
    /// The attributes the authorizers see: without selectors unless they may.
    fn attributes<'a>(&self, attrs: &'a Attributes) -> std::borrow::Cow<'a, Attributes> {
        if self.with_selectors
            || (attrs.field_selector.is_empty() && attrs.label_selector.is_empty())
        {
            return std::borrow::Cow::Borrowed(attrs);
        }
        let mut plain = attrs.clone();
        plain.field_selector.clear();
        plain.label_selector.clear();
        std::borrow::Cow::Owned(plain)
    }
}

impl Authorization {
    /// `first` (the chain's start), then `links` in order, configured as `modes`.
    pub(crate) fn new(
        first: UnionAuthorizer,
        links: Vec<Link>,
        modes: Vec<AuthorizationMode>,
    ) -> Authorization {
        let mut steps = Vec::new();
        let mut stretch = first;
        for link in links {
            match link {
                Link::Sync(authorizer) => stretch = stretch.push(authorizer),
                Link::Webhook(webhook) => {
                    steps.push(Step::Chain(std::mem::take(&mut stretch)));
                    steps.push(Step::Webhook(webhook));
                }
            }
        }
        steps.push(Step::Chain(stretch));
        Authorization {
            current: RwLock::new(Arc::new(Chain { steps, modes })),
            with_selectors: true,
        }
    }

    /// Whether requests' and reviews' field and label selectors reach the authorizers
    /// (upstream's AuthorizeWithSelectors gate, on by default in 1.33).
    pub(crate) fn with_selectors(mut self, with_selectors: bool) -> Authorization {
        self.with_selectors = with_selectors;
        self
    }

    /// Puts `other`'s chain in place of this one, for the requests that come next.
    pub(crate) fn replace(&self, other: Authorization) {
        *self.current.write() = other.current.into_inner();
    }

    /// The modes of the chain in use (`Webhook` once for each webhook).
    pub(crate) fn modes(&self) -> Vec<AuthorizationMode> {
        self.chain().modes.clone()
    }

    fn chain(&self) -> Arc<Chain> {
        self.current.read().clone()
    }

    /// The chain's answer, each webhook asked if the chain gets to it.
    pub(crate) async fn decide(&self, attrs: &Attributes) -> Decision {
        self.verdict(attrs).await.decision
    }

    /// The chain's answer with the failures met on the way (upstream's union
    /// authorizer): the deciding authorizer's own, or at the end of a chain without
    /// opinion, all of them.
    pub(crate) async fn verdict(&self, attrs: &Attributes) -> Verdict {
        let mut errors = Vec::new();
        let mut reasons = Vec::new();
        let chain = self.chain();
        let attrs = &*self.attributes(attrs);
        for step in &chain.steps {
            let (decision, error) = match step {
                Step::Chain(chain) => (chain.authorize(attrs), None),
                Step::Webhook(webhook) => webhook.authorize(attrs).await,
            };
            let Decision::NoOpinion(reason) = decision else {
                return Verdict { decision, error };
            };
            if !reason.is_empty() {
                reasons.push(reason);
            }
            errors.extend(error);
        }
        Verdict {
            decision: Decision::NoOpinion(reasons.join("\n")),
            error: (!errors.is_empty()).then(|| ferrokube_auth::rbac::aggregate_errors(&errors)),
        }
    }

    /// A chain of one synchronous authorizer.
    #[cfg(test)]
    pub(crate) fn of(authorizer: impl Authorizer + 'static) -> Authorization {
        Authorization::new(
            UnionAuthorizer::default().push(authorizer),
            Vec::new(),
            Vec::new(),
        )
    }
}

/// The chain without waiting: the webhook's cached answer, or no opinion.
impl Authorizer for Authorization {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        let mut reasons = Vec::new();
        let chain = self.chain();
        let attrs = &*self.attributes(attrs);
        for step in &chain.steps {
            let decision = match step {
                Step::Chain(chain) => chain.authorize(attrs),
                Step::Webhook(webhook) => webhook.answer_now(attrs),
            };
            let Decision::NoOpinion(reason) = decision else {
                return decision;
            };
            if !reason.is_empty() {
                reasons.push(reason);
            }
        }
        Decision::NoOpinion(reasons.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_auth::UserInfo;

    fn attrs() -> Attributes {
        Attributes {
            user: UserInfo::new("jane", ["devs"]),
            verb: "get".into(),
            namespace: "default".into(),
            api_group: "apps".into(),
            api_version: "v1".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            name: "web".into(),
            resource_request: true,
            path: "/apis/apps/v1/namespaces/default/deployments/web/scale".into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn a_resource_request_is_reviewed_with_its_attributes_and_user() {
        let spec = review_spec(&attrs(), ReviewVersion::V1);
        assert_eq!(spec["user"], "jane");
        assert_eq!(spec["groups"], json!(["devs"]));
        assert_eq!(
            spec["resourceAttributes"],
            json!({"namespace": "default", "verb": "get", "group": "apps", "version": "v1",
                "resource": "deployments", "subresource": "scale", "name": "web"})
        );
        assert!(spec.get("nonResourceAttributes").is_none());
        assert!(spec.get("uid").is_none());
    }

    /// AuthorizeWithSelectors: a list's selectors go with the review as requirements.
    #[test]
    fn selectors_are_reviewed_as_requirements() {
        let mut a = attrs();
        a.verb = "list".into();
        a.field_selector = ferrokube_auth::field_requirements("spec.nodeName=n1,a!=b").unwrap();
        a.label_selector =
            ferrokube_auth::label_requirements("tier in (web,api),!canary,n>3,x=y").unwrap();
        let spec = review_spec(&a, ReviewVersion::V1beta1);
        assert_eq!(
            spec["resourceAttributes"]["fieldSelector"],
            json!({"requirements": [
                {"key": "a", "operator": "NotIn", "values": ["b"]},
                {"key": "spec.nodeName", "operator": "In", "values": ["n1"]}]})
        );
        assert_eq!(
            spec["resourceAttributes"]["labelSelector"],
            json!({"requirements": [
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "In", "values": ["api", "web"]},
                {"key": "x", "operator": "In", "values": ["y"]}]})
        );
        let spec = review_spec(&attrs(), ReviewVersion::V1);
        assert!(spec["resourceAttributes"].get("fieldSelector").is_none());
        assert!(spec["resourceAttributes"].get("labelSelector").is_none());
    }

    #[test]
    fn answers_about_huge_requests_are_not_cached() {
        let mut a = attrs();
        assert!(should_cache(&a));
        a.name = "n".repeat(9_950);
        assert!(!should_cache(&a));
    }

    #[test]
    fn a_non_resource_request_is_reviewed_by_path() {
        let mut a = attrs();
        a.resource_request = false;
        a.path = "/healthz".into();
        let spec = review_spec(&a, ReviewVersion::V1beta1);
        assert_eq!(
            spec["nonResourceAttributes"],
            json!({"path": "/healthz", "verb": "get"})
        );
        assert!(spec.get("resourceAttributes").is_none());
        // v1beta1 names the groups `group`.
        assert_eq!(spec["group"], json!(["devs"]));
        assert!(spec.get("groups").is_none());
    }

    #[test]
    fn allowed_denied_and_neither() {
        let status = |allowed, denied: Option<bool>, reason: &str| SubjectAccessReviewStatus {
            allowed,
            denied,
            reason: Some(reason.into()),
            evaluation_error: None,
        };
        assert_eq!(
            decision_of(status(true, None, "yes")),
            (Decision::Allow("yes".into()), None)
        );
        assert_eq!(
            decision_of(status(false, Some(true), "no way")),
            (Decision::Deny("no way".into()), None)
        );
        assert_eq!(
            decision_of(status(false, None, "not mine")),
            (Decision::NoOpinion("not mine".into()), None)
        );
        let (decision, error) = decision_of(status(true, Some(true), "both"));
        assert_eq!(decision, Decision::Deny("both".into()));
        assert_eq!(
            error.as_deref(),
            Some("webhook subject access review returned both allow and deny response")
        );
    }

    #[test]
    fn webhooks_split_the_chain_in_their_places() {
        let webhook = || {
            Link::Webhook(Arc::new(WebhookAuthorizer {
                webhook: KubeconfigWebhook::unreachable_for_tests(),
                settings: WebhookSettings {
                    name: "w".into(),
                    version: ReviewVersion::V1,
                    timeout: CALL_TIMEOUT,
                    authorized_ttl: Duration::ZERO,
                    unauthorized_ttl: Duration::ZERO,
                    failure_policy: FailurePolicy::NoOpinion,
                    match_conditions: Vec::new(),
                },
                cache: Mutex::new(lru::LruCache::new(CACHE_SIZE)),
            }))
        };
        let sync = || Link::Sync(Box::new(Fixed(Decision::no_opinion())));
        let shape = |links: Vec<Link>| {
            Authorization::new(UnionAuthorizer::default(), links, Vec::new())
                .chain()
                .steps
                .iter()
                .map(|s| match s {
                    Step::Chain(_) => 'c',
                    Step::Webhook(_) => 'w',
                })
                .collect::<String>()
        };
        assert_eq!(shape(vec![sync(), sync()]), "c");
        assert_eq!(shape(vec![sync(), webhook(), sync()]), "cwc");
        assert_eq!(shape(vec![webhook(), webhook()]), "cwcwc");
    }

    struct Fixed(Decision);

    impl Authorizer for Fixed {
        fn authorize(&self, _: &Attributes) -> Decision {
            self.0.clone()
        }
    }

    /// Allows only requests without selectors.
    struct Unselected;

    impl Authorizer for Unselected {
        fn authorize(&self, attrs: &Attributes) -> Decision {
            if attrs.field_selector.is_empty() && attrs.label_selector.is_empty() {
                Decision::allow()
            } else {
                Decision::no_opinion()
            }
        }
    }

    /// AuthorizeWithSelectors off: the authorizers never see selectors.
    #[tokio::test]
    async fn selectors_reach_the_chain_only_when_they_may() {
        let mut a = attrs();
        a.verb = "list".into();
        a.label_selector = ferrokube_auth::label_requirements("tier=web").unwrap();
        let chain = |with_selectors| {
            Authorization::new(
                UnionAuthorizer::default().push(Unselected),
                Vec::new(),
                Vec::new(),
            )
            .with_selectors(with_selectors)
        };
        assert!(!chain(true).authorize(&a).is_allowed());
        assert!(!chain(true).verdict(&a).await.decision.is_allowed());
        assert!(chain(false).authorize(&a).is_allowed());
        assert!(chain(false).verdict(&a).await.decision.is_allowed());
    }

    #[test]
    fn without_a_webhook_the_chain_is_its_authorizers() {
        let chain = |d: Decision| {
            Authorization::new(
                UnionAuthorizer::default()
                    .push(Fixed(Decision::no_opinion()))
                    .push(Fixed(d)),
                Vec::new(),
                Vec::new(),
            )
        };
        assert_eq!(
            chain(Decision::allow()).authorize(&attrs()),
            Decision::allow()
        );
        assert_eq!(
            chain(Decision::no_opinion()).authorize(&attrs()),
            Decision::no_opinion()
        );
    }
}
