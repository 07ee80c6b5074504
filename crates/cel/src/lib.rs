//! Kubernetes CEL for admission (upstream `k8s.io/apiserver/pkg/cel` and
//! `pkg/admission/plugin/cel`): compiling an expression against the variables its
//! context declares (`object`, `oldObject`, `request`, `params`, ...), turning JSON
//! objects into CEL values, and evaluating. The language and Kubernetes' CEL libraries
//! (strings, lists, sets, regex, quantity, url, ip, semver, format, math) come from
//! the `cel` crate and `kube-cel`; this crate is the one place that glues them to
//! Ferrokube, shared by ValidatingAdmissionPolicy, webhook `matchConditions` and API
//! validation.
//!
//! Layer: pure library (no IO, no async); it must not depend on the registry, the
//! apiserver or any storage.
//!
//! Deviations from upstream: expressions are parsed, and their free variables checked
//! against the declared ones, but not type-checked (the `cel` crate has no checker), so
//! a misspelt field or function is found when the expression runs (and handled by the
//! caller's failure policy) instead of at create; there is no cost budget. JSON objects
//! become plain CEL maps, so field names are not escaped (`object.metadata.labels['a.b/c']`
//! works as upstream; a field named after a CEL reserved word is also reachable as
//! `__word__`, upstream's escaped spelling).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use kube_cel::KubeCelExt;
pub use kube_cel::cel;
use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr};
use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Context, Value};

/// The variables of a ValidatingAdmissionPolicy's validations, message expressions,
/// audit annotations, variables and match conditions (upstream's `authorizer` is not
/// offered).
pub const POLICY_VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
];

/// The variables of a webhook's `matchConditions` (upstream's `authorizer` is not
/// offered).
pub const WEBHOOK_VARIABLES: &[&str] = &["object", "oldObject", "request"];

/// Names usable as identifiers that are not variables: CEL's type denotations
/// (`type(x) == int`) and the namespaces of the libraries' functions.
const BUILTIN_IDENTS: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "optional",
    "math",
    "sets",
    "strings",
    "lists",
    "base64",
    "format",
    "jsonpatch",
    "ip",
];

/// CEL's reserved words; a JSON field with one of these names is also bound as
/// `__word__` (upstream's escaping).
const RESERVED: &[&str] = &[
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
    "true",
    "false",
    "null",
    "in",
];

/// A compiled expression and its source (for messages such as `failed expression: ...`).
pub struct Program {
    source: String,
    program: cel::Program,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Program").field(&self.source).finish()
    }
}

impl Program {
    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// Why an expression does not compile; the text is upstream's shape
/// (`compilation failed: ERROR: <input>:...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError(pub String);

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CompileError {}

/// Parses `source` and checks that every free identifier is one of `declared` (the
/// variables of the expression's context) or a CEL built-in.
pub fn compile(source: &str, declared: &[&str]) -> Result<Program, CompileError> {
    if source.trim().is_empty() {
        return Err(CompileError(
            "compilation failed: ERROR: <input>:1:1: expression is empty".into(),
        ));
    }
    // The parser of the `cel` crate panics on a few malformed inputs; a policy's
    // expression must never take the apiserver down, so such a panic is a compile
    // error.
    let parsed = std::panic::catch_unwind(|| cel::Program::compile(source))
        .map_err(|_| CompileError("compilation failed: ERROR: <input>: Syntax error".into()))?;
    let program = parsed.map_err(|e| {
        CompileError(format!(
            "compilation failed: ERROR: <input>: Syntax error: {}",
            e.to_string().replace('\n', "; ")
        ))
    })?;
    let mut free = BTreeSet::new();
    free_identifiers(program.expression(), &mut Vec::new(), &mut free);
    if let Some(name) = free
        .iter()
        .find(|n| !declared.contains(&n.as_str()) && !BUILTIN_IDENTS.contains(&n.as_str()))
    {
        return Err(CompileError(format!(
            "compilation failed: ERROR: <input>:1:1: undeclared reference to '{name}' (in container '')"
        )));
    }
    Ok(Program {
        source: source.to_string(),
        program,
    })
}

/// Collects the identifiers of `e` not bound by an enclosing comprehension (the
/// iteration variable of `all`, `exists`, `map`, ... or the accumulator).
fn free_identifiers(e: &IdedExpr, bound: &mut Vec<String>, out: &mut BTreeSet<String>) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.iter().any(|b| b == name) {
                out.insert(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(t) = &call.target {
                free_identifiers(t, bound, out);
            }
            for a in &call.args {
                free_identifiers(a, bound, out);
            }
        }
        Expr::Select(s) => free_identifiers(&s.operand, bound, out),
        Expr::List(l) => {
            for x in &l.elements {
                free_identifiers(x, bound, out);
            }
        }
        Expr::Map(m) => entries(&m.entries, bound, out),
        Expr::Struct(s) => entries(&s.entries, bound, out),
        Expr::Comprehension(c) => {
            free_identifiers(&c.iter_range, bound, out);
            free_identifiers(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                bound.push(v.clone());
            }
            bound.push(c.accu_var.clone());
            free_identifiers(&c.loop_cond, bound, out);
            free_identifiers(&c.loop_step, bound, out);
            free_identifiers(&c.result, bound, out);
            bound.truncate(depth);
        }
    }
}

fn entries(
    entries: &[kube_cel::cel::common::ast::IdedEntryExpr],
    bound: &mut Vec<String>,
    out: &mut BTreeSet<String>,
) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::StructField(f) => free_identifiers(&f.value, bound, out),
            EntryExpr::MapEntry(m) => {
                free_identifiers(&m.key, bound, out);
                free_identifiers(&m.value, bound, out);
            }
        }
    }
}

/// A JSON value as CEL sees it: objects are maps with string keys, integers `int`
/// (or `uint` above `i64::MAX`), other numbers `double`.
pub fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(json_to_value).collect())),
        serde_json::Value::Object(o) => {
            let mut map = HashMap::with_capacity(o.len());
            for (k, v) in o {
                let value = json_to_value(v);
                if RESERVED.contains(&k.as_str()) {
                    map.insert(Key::String(Arc::new(format!("__{k}__"))), value.clone());
                }
                map.insert(Key::String(Arc::new(k.clone())), value);
            }
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A CEL map with string keys, for building variables such as `variables`.
pub fn map_value(entries: impl IntoIterator<Item = (String, Value)>) -> Value {
    let map: HashMap<Key, Value> = entries
        .into_iter()
        .map(|(k, v)| (Key::String(Arc::new(k)), v))
        .collect();
    Value::Map(Map { map: Arc::new(map) })
}

/// The variables one evaluation sees.
#[derive(Debug, Default, Clone)]
pub struct Activation {
    vars: Vec<(String, Value)>,
}

impl Activation {
    pub fn new() -> Self {
        Activation::default()
    }

    /// Binds `name` to a JSON value (`null` for an absent object, as upstream).
    pub fn bind_json(&mut self, name: &str, value: &serde_json::Value) -> &mut Self {
        self.bind(name, json_to_value(value))
    }

    /// Binds (or rebinds) `name`.
    pub fn bind(&mut self, name: &str, value: Value) -> &mut Self {
        match self.vars.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((name.to_string(), value)),
        }
        self
    }

    fn context(&self) -> Context<'static> {
        let mut ctx = Context::default();
        ctx.register_all();
        for (name, value) in &self.vars {
            ctx.add_variable_from_value(name.clone(), value.clone());
        }
        ctx
    }

    /// Evaluates `p`; the error text is the evaluation error.
    pub fn eval(&self, p: &Program) -> Result<Value, String> {
        let ctx = self.context();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.program.execute(&ctx))) {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("internal error evaluating the expression".into()),
        }
    }

    /// Evaluates a boolean expression (validations, match conditions).
    pub fn eval_bool(&self, p: &Program) -> Result<bool, String> {
        match self.eval(p)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expected a boolean result, got {}",
                type_name(&other)
            )),
        }
    }

    /// Evaluates a string expression (`messageExpression`, audit values).
    pub fn eval_string(&self, p: &Program) -> Result<String, String> {
        match self.eval(p)? {
            Value::String(s) => Ok((*s).clone()),
            other => Err(format!(
                "expected a string result, got {}",
                type_name(&other)
            )),
        }
    }
}

/// Upstream's `matchConditions` rule over compiled `(name, condition)` pairs: any
/// false condition means no match (even if another failed); otherwise any error is
/// the result (for the failure policy to judge); otherwise a match.
pub fn match_conditions(
    conditions: &[(String, Program)],
    activation: &Activation,
) -> Result<bool, String> {
    let mut first_error = None;
    for (name, condition) in conditions {
        match activation.eval_bool(condition) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                first_error.get_or_insert_with(|| format!("matchCondition '{name}' failed: {e}"));
            }
        }
    }
    first_error.map_or(Ok(true), Err)
}

/// CEL's name of a value's type, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Function(..) => "function",
        Value::Int(_) => "int",
        Value::UInt(_) => "uint",
        Value::Float(_) => "double",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::Bool(_) => "bool",
        Value::Duration(_) => "google.protobuf.Duration",
        Value::Timestamp(_) => "google.protobuf.Timestamp",
        Value::Opaque(_) => "opaque",
        Value::Null => "null_type",
    }
}

/// A CEL value back as JSON (for `params`-free messages and variables in tests);
/// values JSON cannot hold become their debug text.
pub fn value_to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::UInt(u) => (*u).into(),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Value::String(s) => serde_json::Value::String((**s).clone()),
        Value::List(l) => l.iter().map(value_to_json).collect(),
        Value::Map(m) => m
            .map
            .iter()
            .map(|(k, v)| {
                let key = match k {
                    Key::String(s) => (**s).clone(),
                    Key::Int(i) => i.to_string(),
                    Key::Uint(u) => u.to_string(),
                    Key::Bool(b) => b.to_string(),
                };
                (key, value_to_json(v))
            })
            .collect::<serde_json::Map<_, _>>()
            .into(),
        other => serde_json::Value::String(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const VAP: &[&str] = &["object", "oldObject", "request", "params", "variables"];

    fn eval(expr: &str, object: serde_json::Value) -> Result<Value, String> {
        let p = compile(expr, VAP).map_err(|e| e.0)?;
        let mut a = Activation::new();
        a.bind_json("object", &object)
            .bind("oldObject", Value::Null);
        a.eval(&p)
    }

    #[test]
    fn upstream_doc_example_and_macros() {
        let deploy = json!({"spec": {"replicas": 6},
            "metadata": {"name": "web", "namespace": "ns1", "labels": {"app.kubernetes.io/name": "web"}}});
        assert_eq!(
            eval("object.spec.replicas <= 5", deploy.clone()),
            Ok(Value::Bool(false))
        );
        for (expr, want) in [
            ("has(object.spec.replicas)", true),
            ("has(object.spec.paused)", false),
            (
                "object.metadata.labels['app.kubernetes.io/name'] == 'web'",
                true,
            ),
            ("object.metadata.namespace == 'ns1'", true),
            (
                "object.metadata.name.startsWith('we') && object.metadata.name.matches('^w.b$')",
                true,
            ),
            ("[1, 2, 3].all(x, x > 0) && [1, 2].exists(y, y == 2)", true),
            ("[1, 2, 3].map(x, x * 2).filter(x, x > 2).size() == 2", true),
            ("size(object.metadata.name) == 3", true),
            ("'a,b'.split(',').size() == 2", true),
            ("quantity('1Gi').isGreaterThan(quantity('500Mi'))", true),
            ("oldObject == null", true),
        ] {
            assert_eq!(eval(expr, deploy.clone()), Ok(Value::Bool(want)), "{expr}");
        }
    }

    #[test]
    fn compile_errors_are_reported() {
        let e = compile("object.spec.replicas <=", VAP).unwrap_err();
        assert!(e.0.starts_with("compilation failed: "), "{e}");
        let e = compile("objekt.spec.replicas > 1", VAP).unwrap_err();
        assert!(e.0.contains("undeclared reference to 'objekt'"), "{e}");
        // Comprehension variables are bound, not free.
        compile("object.items.all(i, i.x > 0)", VAP).unwrap();
        assert!(compile("params.x", &["object"]).is_err());
        assert!(compile("  ", VAP).is_err());
    }

    #[test]
    fn results_are_typed() {
        let p = compile("object.x", VAP).unwrap();
        let mut a = Activation::new();
        a.bind_json("object", &json!({"x": 1}));
        assert_eq!(
            a.eval_bool(&p).unwrap_err(),
            "expected a boolean result, got int"
        );
        let p = compile("'n=' + string(object.x)", VAP).unwrap();
        assert_eq!(a.eval_string(&p).unwrap(), "n=1");
        let missing = compile("object.y == 1", VAP).unwrap();
        assert!(a.eval_bool(&missing).is_err());
        assert_eq!(
            value_to_json(&json_to_value(&json!({"a": [1, "b", null]}))),
            json!({"a": [1, "b", null]})
        );
    }
}
