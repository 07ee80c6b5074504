//! The CEL environments of admission expressions (upstream
//! `k8s.io/apiserver/pkg/admission/plugin/cel`, `compile.go` and `composition.go`):
//! which variables a ValidatingAdmissionPolicy's or a webhook's expression may use and
//! of what types, and what each kind of expression must evaluate to; and those of the
//! authentication and authorization configuration files ([`compile_config`]).
//!
//! `request` and `namespaceObject` have upstream's declared types (a misspelt
//! `request.operaton` is refused where the policy is written, as upstream refuses it);
//! `object`, `oldObject` and `params` are `dyn` where a policy is validated, and of
//! their kinds' schemas where its status is type-checked; `authorizer` is the
//! authorizer library's type; a policy's `variables` is an object with one field per
//! variable compiled before, of that variable's type.

use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::check::{NoObject, TYPE_NAME_KEY, Type};
use crate::typecheck::{self, Declared, Environment, NO_COMPONENTS, OutputType, Typed};
use crate::{CompileError, Program};

/// Which of the optional variables an expression's environment declares (upstream
/// `OptionalVariableDeclarations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// `params`: the policy has a `paramKind`.
    pub has_params: bool,
    /// `authorizer` and `authorizer.requestResource`.
    pub has_authorizer: bool,
}

/// What an expression must evaluate to (upstream `ExpressionAccessor.ReturnTypes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// A validation's or a match condition's expression.
    Bool,
    /// A validation's `messageExpression`.
    String,
    /// An audit annotation's `valueExpression`: a string, or null for no annotation.
    StringOrNull,
    /// A variable's expression, or any expression being type-checked.
    Any,
}

impl Returns {
    fn types(self) -> &'static [Type<NoObject>] {
        match self {
            Returns::Bool => &[Type::Bool],
            Returns::String => &[Type::String],
            Returns::StringOrNull => &[Type::String, Type::Null],
            Returns::Any => &[],
        }
    }

    /// Upstream's `must evaluate to bool but got int` when `result` (a type's name,
    /// `None` when not known here) is not one of the types.
    fn check(self, result: Option<&str>) -> Result<(), CompileError> {
        let types = self.types();
        let Some(got) = result else {
            return Ok(());
        };
        if types.is_empty()
            || types
                .iter()
                .any(|t| t.declared_name().as_deref() == Some(got))
        {
            return Ok(());
        }
        let names: Vec<String> = types.iter().filter_map(Type::declared_name).collect();
        Err(CompileError(match names.as_slice() {
            [one] => format!("must evaluate to {one} but got {got}"),
            _ => format!(
                "must evaluate to one of [{}] but got {got}",
                names.join(" ")
            ),
        }))
    }
}

/// A compiler of one policy's expressions (upstream's compiler, composited when the
/// policy has variables): it keeps the types of the variables compiled so far.
#[derive(Debug, Clone)]
pub struct Compiler<'a> {
    object: Declared<'a>,
    params: Declared<'a>,
    components: &'a serde_json::Map<String, Value>,
    /// `Some` when `variables` is declared: each variable compiled so far, with the
    /// type of its expression (`dyn` if it did not compile).
    variables: Option<Vec<(String, OutputType)>>,
}

impl Default for Compiler<'_> {
    fn default() -> Self {
        Compiler::new()
    }
}

impl Compiler<'static> {
    /// A compiler where `object`, `oldObject` and `params` are `dyn`, as upstream
    /// compiles a policy when it is written; `variables` is not declared.
    pub fn new() -> Self {
        Compiler {
            object: Declared::Dyn,
            params: Declared::Dyn,
            components: &NO_COMPONENTS,
            variables: None,
        }
    }
}

impl<'a> Compiler<'a> {
    /// A compiler where `object` and `oldObject` are of schema `object` and `params`
    /// of schema `params` (each `dyn` when `None`), `$ref`s resolved in `components`:
    /// upstream's type checking of a policy against one of its kinds.
    pub fn typed(
        object: Option<&'a Value>,
        params: Option<&'a Value>,
        components: &'a serde_json::Map<String, Value>,
    ) -> Self {
        let declared = |s: Option<&'a Value>| s.map_or(Declared::Dyn, Declared::Schema);
        Compiler {
            object: declared(object),
            params: declared(params),
            components,
            variables: None,
        }
    }

    /// The compiler with `variables` declared (upstream's composited compiler, used
    /// when the policy has variables).
    pub fn with_variables(mut self) -> Self {
        self.variables = Some(Vec::new());
        self
    }

    /// Compiles a variable's expression and declares `variables.<name>` of its type
    /// for the expressions compiled after it (of `dyn` if it does not compile).
    pub fn compile_variable(
        &mut self,
        name: &str,
        source: &str,
        options: Options,
    ) -> Result<Program, CompileError> {
        let compiled = self.compile_typed(source, options, Returns::Any);
        let output = match &compiled {
            Ok((_, output)) => output.clone(),
            Err(_) => OutputType::DYN,
        };
        if let Some(variables) = &mut self.variables {
            match variables.iter_mut().find(|(n, _)| n == name) {
                Some(existing) => existing.1 = output,
                None => variables.push((name.to_string(), output)),
            }
        }
        compiled.map(|(program, _)| program)
    }

    /// Compiles `source` in the environment `options` describe (upstream
    /// `CompileCELExpression`): it must parse, use only declared variables and
    /// functions, type-check, and evaluate to one of `returns`.
    pub fn compile(
        &self,
        source: &str,
        options: Options,
        returns: Returns,
    ) -> Result<Program, CompileError> {
        self.compile_typed(source, options, returns)
            .map(|(program, _)| program)
    }

    fn compile_typed(
        &self,
        source: &str,
        options: Options,
        returns: Returns,
    ) -> Result<(Program, OutputType), CompileError> {
        let typed = typecheck::compile_in(source, &self.environment(options))?;
        returns.check(typed.result.as_deref())?;
        Ok((typed.program, typed.output))
    }

    fn environment(&self, options: Options) -> Environment<'_> {
        let mut variables = vec![
            ("object", self.object),
            ("oldObject", self.object),
            ("namespaceObject", Declared::Schema(&NAMESPACE)),
            ("request", Declared::Schema(&REQUEST)),
        ];
        if options.has_params {
            variables.push(("params", self.params));
        }
        if options.has_authorizer {
            variables.push(("authorizer", Declared::Authorizer));
        }
        if let Some(declared) = &self.variables {
            variables.push(("variables", Declared::Variables(declared)));
        }
        Environment {
            variables,
            components: self.components,
        }
    }
}

/// The one variable of an expression of the `--authentication-config` or
/// `--authorization-config` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigVariable {
    /// `claims`, a JWT's claims: `map(string, any)` (claim validation rules and claim
    /// mappings).
    Claims,
    /// `user`, the `kubernetes.UserInfo` a JWT authenticated (user validation rules).
    User,
    /// `request`, a `kubernetes.SubjectAccessReviewSpec` (an authorization webhook's
    /// match conditions).
    AuthorizationRequest,
}

/// Compiles an expression of the authentication or authorization configuration with
/// its variable declared as upstream declares it (`authentication/cel` and
/// `authorization/cel`, `compile.go`); the caller checks the result type, which the
/// two configurations word differently.
pub fn compile_config(source: &str, variable: ConfigVariable) -> Result<Typed, CompileError> {
    let declared = match variable {
        ConfigVariable::Claims => ("claims", Declared::Schema(&CLAIMS)),
        ConfigVariable::User => ("user", Declared::Schema(&USER_INFO)),
        ConfigVariable::AuthorizationRequest => {
            ("request", Declared::Schema(&SUBJECT_ACCESS_REVIEW))
        }
    };
    let env = Environment {
        variables: vec![declared],
        components: &NO_COMPONENTS,
    };
    typecheck::compile_in(source, &env)
}

/// A schema of one of upstream's declared object types, named `name`, with `fields`.
fn object_type(name: &str, fields: Value) -> Value {
    json!({"type": "object", TYPE_NAME_KEY: name, "properties": fields})
}

fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

fn timestamp() -> Value {
    json!({"type": "string", "format": "date-time"})
}

/// `request` (upstream `BuildRequestType`): an AdmissionRequest without `uid`,
/// `object` and `oldObject`.
static REQUEST: LazyLock<Value> = LazyLock::new(|| {
    let gvk = object_type(
        "kubernetes.GroupVersionKind",
        json!({"group": {"type": "string"}, "version": {"type": "string"},
            "kind": {"type": "string"}}),
    );
    let gvr = object_type(
        "kubernetes.GroupVersionResource",
        json!({"group": {"type": "string"}, "version": {"type": "string"},
            "resource": {"type": "string"}}),
    );
    object_type(
        "kubernetes.AdmissionRequest",
        json!({
            "kind": gvk, "resource": gvr, "subResource": {"type": "string"},
            "requestKind": gvk, "requestResource": gvr,
            "requestSubResource": {"type": "string"},
            "name": {"type": "string"}, "namespace": {"type": "string"},
            "operation": {"type": "string"}, "userInfo": *USER_INFO,
            "dryRun": {"type": "boolean"},
            // `dyn` upstream: a schema of no type.
            "options": {},
        }),
    )
});

/// A request's user: `request.userInfo` and the authentication configuration's `user`.
static USER_INFO: LazyLock<Value> = LazyLock::new(|| {
    object_type(
        "kubernetes.UserInfo",
        json!({"username": {"type": "string"}, "uid": {"type": "string"},
            "groups": strings(),
            "extra": {"type": "object", "additionalProperties": strings()}}),
    )
});

/// A JWT's claims: `map(string, any)`, read as `map(string, dyn)` (cel-go checks
/// `any` as it checks `dyn`).
static CLAIMS: LazyLock<Value> =
    LazyLock::new(|| json!({"type": "object", "additionalProperties": {}}));

/// An authorization webhook's `request` (upstream's `buildRequestType` of
/// `authorization/cel`).
static SUBJECT_ACCESS_REVIEW: LazyLock<Value> = LazyLock::new(|| {
    let requirements = json!({"type": "array", "items": object_type(
        "kubernetes.SelectorRequirement",
        json!({"key": {"type": "string"}, "operator": {"type": "string"},
            "values": strings()}),
    )});
    let selector = |name: &str| {
        object_type(
            name,
            json!({"rawSelector": {"type": "string"}, "requirements": requirements}),
        )
    };
    let resource = object_type(
        "kubernetes.ResourceAttributes",
        json!({"namespace": {"type": "string"}, "verb": {"type": "string"},
            "group": {"type": "string"}, "version": {"type": "string"},
            "resource": {"type": "string"}, "subresource": {"type": "string"},
            "name": {"type": "string"},
            "fieldSelector": selector("kubernetes.FieldSelectorAttributes"),
            "labelSelector": selector("kubernetes.LabelSelectorAttributes")}),
    );
    let non_resource = object_type(
        "kubernetes.NonResourceAttributes",
        json!({"path": {"type": "string"}, "verb": {"type": "string"}}),
    );
    object_type(
        "kubernetes.SubjectAccessReviewSpec",
        json!({"resourceAttributes": resource, "nonResourceAttributes": non_resource,
            "user": {"type": "string"}, "groups": strings(),
            "extra": {"type": "object", "additionalProperties": strings()},
            "uid": {"type": "string"}}),
    )
});

/// `namespaceObject` (upstream `BuildNamespaceType`): a Namespace without the
/// metadata upstream leaves out (managed fields, owner references, ...).
static NAMESPACE: LazyLock<Value> = LazyLock::new(|| {
    let condition = object_type(
        "kubernetes.NamespaceCondition",
        json!({"status": {"type": "string"}, "type": {"type": "string"},
            "lastTransitionTime": timestamp(), "message": {"type": "string"},
            "reason": {"type": "string"}}),
    );
    let labels = json!({"type": "object", "additionalProperties": {"type": "string"}});
    object_type(
        "kubernetes.Namespace",
        json!({
            "metadata": object_type("kubernetes.NamespaceMetadata", json!({
                "name": {"type": "string"}, "generateName": {"type": "string"},
                "namespace": {"type": "string"}, "labels": labels,
                "annotations": labels, "UID": {"type": "string"},
                "creationTimestamp": timestamp(),
                "deletionGracePeriodSeconds": {"type": "integer"},
                "deletionTimestamp": timestamp(), "generation": {"type": "integer"},
                "resourceVersion": {"type": "string"}, "finalizers": strings(),
            })),
            "spec": object_type("kubernetes.NamespaceSpec", json!({"finalizers": strings()})),
            "status": object_type("kubernetes.NamespaceStatus", json!({
                "conditions": {"type": "array", "items": condition},
                "phase": {"type": "string"},
            })),
        }),
    )
});

#[cfg(test)]
mod tests;
