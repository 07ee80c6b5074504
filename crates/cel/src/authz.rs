//! Upstream's CEL authorization library (`k8s.io/apiserver/pkg/cel/library/authz.go`):
//! the `authorizer` variable of ValidatingAdmissionPolicy and webhook match conditions.
//!
//! ```text
//! authorizer.group('apps').resource('deployments').namespace('ns').name('web')
//!     .subresource('scale').check('update').allowed()
//! authorizer.path('/healthz').check('get').reason()
//! authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('list').errored()
//! authorizer.requestResource.check('delete').error()
//! ```
//!
//! The values are opaque CEL objects ([`Opaque`]) whose member functions build a check
//! and ask a [`CelAuthorizer`], which the apiserver backs with its authorizer chain
//! for the requesting user. `authorizer` itself is a map holding `requestResource`
//! (upstream declares the dotted variable `authorizer.requestResource`; this
//! interpreter selects fields only from maps), and the functions accept that map as
//! the authorizer of its request resource.

use std::fmt;
use std::sync::Arc;

use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Opaque, Value};
use kube_cel::cel::{Context, ExecutionError, ResolveResult};

/// What a check asks (upstream `authorizer.AttributesRecord` as the library fills
/// it: resource checks carry API version `*`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AuthzCheck {
    /// A resource check; otherwise a non-resource `path` check.
    pub resource_request: bool,
    pub path: String,
    /// The API verb (`get`, `update`, ...) or, for paths, the HTTP verb as written.
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// `fieldSelector(...)` and `labelSelector(...)` as written; empty when unset.
    pub field_selector: String,
    pub label_selector: String,
}

/// An authorizer's answer to one check (upstream `decisionVal`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthzDecision {
    pub allowed: bool,
    pub reason: String,
    /// The authorizer's error, if the check could not be decided.
    pub error: Option<String>,
}

/// The authorizer chain for one principal, as CEL's `authorizer` sees it.
pub trait CelAuthorizer: Send + Sync + fmt::Debug {
    /// Decides `check` for this authorizer's principal.
    fn check(&self, check: &AuthzCheck) -> AuthzDecision;

    /// The same chain for the service account `namespace/name` (upstream
    /// `serviceAccount`); an error text for an invalid name or namespace.
    fn for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<dyn CelAuthorizer>, String>;
}

/// The resource a request addresses, for `authorizer.requestResource`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestResource {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// An authorizer value; equal only to itself.
#[derive(Debug, Clone)]
struct AuthorizerVal(Arc<dyn CelAuthorizer>);

impl PartialEq for AuthorizerVal {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for AuthorizerVal {}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PathCheckVal {
    authorizer: AuthorizerVal,
    path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupCheckVal {
    authorizer: AuthorizerVal,
    group: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourceCheckVal {
    authorizer: AuthorizerVal,
    check: AuthzCheck,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct DecisionVal(AuthzDecision);

impl Opaque for AuthorizerVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.Authorizer"
    }
}

impl Opaque for PathCheckVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.PathCheck"
    }
}

impl Opaque for GroupCheckVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.GroupCheck"
    }
}

impl Opaque for ResourceCheckVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.ResourceCheck"
    }
}

impl Opaque for DecisionVal {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.authorization.Decision"
    }
}

/// The key of `authorizer`'s map that holds the request's resource check.
const REQUEST_RESOURCE: &str = "requestResource";

/// The value of the `authorizer` variable for a request by `authorizer`'s principal on
/// `request` (upstream `NewAuthorizerVal` plus `NewResourceAuthorizerVal`).
pub fn authorizer_value(authorizer: Arc<dyn CelAuthorizer>, request: &RequestResource) -> Value {
    let check = ResourceCheckVal {
        authorizer: AuthorizerVal(authorizer),
        check: AuthzCheck {
            resource_request: true,
            group: request.group.clone(),
            resource: request.resource.clone(),
            subresource: request.subresource.clone(),
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            ..AuthzCheck::default()
        },
    };
    crate::map_value([(REQUEST_RESOURCE.to_string(), Value::Opaque(Arc::new(check)))])
}

fn opaque<T: 'static>(v: &Value) -> Option<&T> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<T>(),
        _ => None,
    }
}

/// The authorizer a receiver stands for: an authorizer value, or the `authorizer`
/// map (whose request resource check knows its authorizer).
fn receiver_authorizer(this: &Value, function: &str) -> Result<AuthorizerVal, ExecutionError> {
    if let Some(a) = opaque::<AuthorizerVal>(this) {
        return Ok(a.clone());
    }
    if let Value::Map(m) = this
        && let Some(rr) = m.map.get(&kube_cel::cel::objects::Key::String(Arc::new(
            REQUEST_RESOURCE.to_string(),
        )))
        && let Some(check) = opaque::<ResourceCheckVal>(rr)
    {
        return Ok(check.authorizer.clone());
    }
    Err(no_overload(function, this))
}

fn no_overload(function: &str, this: &Value) -> ExecutionError {
    ExecutionError::function_error(
        function,
        format!(
            "found no matching overload for '{function}' applied to '{}'",
            receiver_type(this)
        ),
    )
}

fn receiver_type(v: &Value) -> &str {
    match v {
        Value::Opaque(o) => o.runtime_type_name(),
        other => crate::type_name(other),
    }
}

fn resource_check(this: &Value, function: &str) -> Result<ResourceCheckVal, ExecutionError> {
    opaque::<ResourceCheckVal>(this)
        .cloned()
        .ok_or_else(|| no_overload(function, this))
}

fn decision<'a>(this: &'a Value, function: &str) -> Result<&'a AuthzDecision, ExecutionError> {
    opaque::<DecisionVal>(this)
        .map(|d| &d.0)
        .ok_or_else(|| no_overload(function, this))
}

fn wrap<T: Opaque>(v: T) -> ResolveResult {
    Ok(Value::Opaque(Arc::new(v)))
}

fn path(This(this): This<Value>, path: Arc<String>) -> ResolveResult {
    let authorizer = receiver_authorizer(&this, "path")?;
    if path.trim().is_empty() {
        return Err(ExecutionError::function_error(
            "path",
            "path must not be empty",
        ));
    }
    wrap(PathCheckVal {
        authorizer,
        path: (*path).clone(),
    })
}

fn group(This(this): This<Value>, group: Arc<String>) -> ResolveResult {
    wrap(GroupCheckVal {
        authorizer: receiver_authorizer(&this, "group")?,
        group: (*group).clone(),
    })
}

fn service_account(
    This(this): This<Value>,
    namespace: Arc<String>,
    name: Arc<String>,
) -> ResolveResult {
    let authorizer = receiver_authorizer(&this, "serviceAccount")?;
    let sa = authorizer
        .0
        .for_service_account(&namespace, &name)
        .map_err(|e| ExecutionError::function_error("serviceAccount", e))?;
    wrap(AuthorizerVal(sa))
}

fn resource(This(this): This<Value>, resource: Arc<String>) -> ResolveResult {
    let Some(g) = opaque::<GroupCheckVal>(&this) else {
        return Err(no_overload("resource", &this));
    };
    if resource.trim().is_empty() {
        return Err(ExecutionError::function_error(
            "resource",
            "resource must not be empty",
        ));
    }
    wrap(ResourceCheckVal {
        authorizer: g.authorizer.clone(),
        check: AuthzCheck {
            resource_request: true,
            group: g.group.clone(),
            resource: (*resource).clone(),
            ..AuthzCheck::default()
        },
    })
}

/// A ResourceCheck builder function: a copy of the receiver with one field set.
fn setter(
    function: &'static str,
    set: fn(&mut AuthzCheck, String),
) -> impl Fn(This<Value>, Arc<String>) -> ResolveResult + Send + Sync + 'static {
    move |This(this): This<Value>, value: Arc<String>| {
        let mut r = resource_check(&this, function)?;
        set(&mut r.check, (*value).clone());
        wrap(r)
    }
}

fn check(This(this): This<Value>, verb: Arc<String>) -> ResolveResult {
    let (authorizer, mut check) = if let Some(p) = opaque::<PathCheckVal>(&this) {
        (
            p.authorizer.clone(),
            AuthzCheck {
                path: p.path.clone(),
                ..AuthzCheck::default()
            },
        )
    } else {
        let r = resource_check(&this, "check")?;
        (r.authorizer, r.check)
    };
    check.verb = (*verb).clone();
    wrap(DecisionVal(authorizer.0.check(&check)))
}

fn allowed(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Bool(decision(&this, "allowed")?.allowed))
}

fn reason(This(this): This<Value>) -> ResolveResult {
    Ok(Value::String(Arc::new(
        decision(&this, "reason")?.reason.clone(),
    )))
}

fn errored(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Bool(decision(&this, "errored")?.error.is_some()))
}

fn error(This(this): This<Value>) -> ResolveResult {
    Ok(Value::String(Arc::new(
        decision(&this, "error")?.error.clone().unwrap_or_default(),
    )))
}

/// Adds the library's member functions to `ctx`.
pub(crate) fn register(ctx: &mut Context<'_>) {
    ctx.add_function("path", path);
    ctx.add_function("group", group);
    ctx.add_function("serviceAccount", service_account);
    ctx.add_function("resource", resource);
    ctx.add_function(
        "subresource",
        setter("subresource", |c, v| c.subresource = v),
    );
    ctx.add_function("namespace", setter("namespace", |c, v| c.namespace = v));
    ctx.add_function("name", setter("name", |c, v| c.name = v));
    ctx.add_function(
        "fieldSelector",
        setter("fieldSelector", |c, v| c.field_selector = v),
    );
    ctx.add_function(
        "labelSelector",
        setter("labelSelector", |c, v| c.label_selector = v),
    );
    ctx.add_function("check", check);
    ctx.add_function("allowed", allowed);
    ctx.add_function("reason", reason);
    ctx.add_function("errored", errored);
    ctx.add_function("error", error);
}
