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
//! The `authorizer` variable and its library are in [`authz`]; the runtime cost limit
//! (upstream's per-call limit and per-evaluation budget) in `cost.rs`; the check of
//! field references against OpenAPI schemas (for a policy's `status.typeChecking`, and
//! for a CRD rule against its schema node when the CRD is written) in [`typecheck`].
//!
//! Deviations from upstream: expressions are parsed (optional syntax included), with
//! cel-go's two-variable comprehensions and `optMap`/`optFlatMap` expanded by
//! `comprehensions.rs`; their free variables and the functions they call are checked
//! against the declared ones (a misspelt function is refused at create, as upstream),
//! and they are typed as cel-go's checker types them against the declared overloads
//! ([`typecheck`]): with every variable of unknown type at compile, with the schema's
//! types for a CRD's rules (errors) and a policy's object (status warnings, as
//! upstream). What this checker cannot tell (a
//! variable without a schema, a function outside the table) matches anything, so a
//! type error upstream finds at create may only surface when the expression runs
//! (handled by the caller's failure policy). The cost is metered at run time per
//! evaluated node and comprehension iteration, and a CRD rule's worst-case cost is
//! estimated at the CRD's write as upstream estimates it ([`estimate`]). JSON objects
//! become plain CEL maps, so field names are not escaped (`object.metadata.labels['a.b/c']`
//! works as upstream; a field named after a CEL reserved word is also reachable as
//! `__word__`, upstream's escaped spelling).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use kube_cel::KubeCelExt;
pub use kube_cel::cel;
pub use kube_cel::cel::common::ast::IdedExpr;
use kube_cel::cel::common::ast::{EntryExpr, Expr};
use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Context, Value};

pub mod authz;
mod check;
mod comprehensions;
mod cost;
pub mod environments;
pub mod estimate;
mod limits;
pub mod typecheck;

pub use authz::{AuthzCheck, AuthzDecision, CelAuthorizer, RequestResource, authorizer_value};
pub use cost::{
    Budget, COST_LIMIT_EXCEEDED, OUT_OF_BUDGET, OutOfBudget, PER_CALL_LIMIT, RUNTIME_COST_BUDGET,
};

/// The variables of a ValidatingAdmissionPolicy's validations, message expressions,
/// audit annotations, variables and match conditions.
pub const POLICY_VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
    "authorizer",
];

/// The variables of a webhook's `matchConditions` (upstream declares `namespaceObject`
/// there too, and binds it to null).
pub const WEBHOOK_VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "authorizer",
];

/// Whether `name` is usable as an identifier without being a variable: one of CEL's
/// type denotations (`type(x) == int`, `google.protobuf.Duration`) or a namespace of
/// the libraries' functions (`sets.contains`).
fn is_builtin_ident(name: &str) -> bool {
    name == "google" || TYPE_NAMES.contains(&name) || check::NAMESPACES.contains(&name)
}

/// CEL's reserved words; a JSON field with one of these names is also bound as
/// `__word__` (upstream's escaping).
pub(crate) const RESERVED: &[&str] = &[
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
    expression: IdedExpr,
    /// The expression with a cost tick in every comprehension's loop condition
    /// ([`cost`]); this is what runs.
    metered: IdedExpr,
    /// The cost of evaluating the expression once, outside comprehension bodies.
    base_cost: u64,
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

    /// The parsed expression (for checkers that walk it).
    pub fn expression(&self) -> &IdedExpr {
        &self.expression
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
    limits::check(source)?;
    // The parser of the `cel` crate panics on a few malformed inputs; a policy's
    // expression must never take the apiserver down, so such a panic is a compile
    // error.
    // Kubernetes enables CEL's optional types, with their syntax (`self.?field`,
    // `list[?0]`, `[?opt]`, `{?'key': opt}`).
    let parsed = std::panic::catch_unwind(|| {
        cel::parser::Parser::new()
            .enable_optional_syntax(true)
            .parse(source)
    })
    .map_err(|_| CompileError("compilation failed: ERROR: <input>: Syntax error".into()))?;
    let mut expression = parsed.map_err(|e| {
        // The parser's errors are cel-go's issues already (`ERROR: <input>:1:17:
        // Syntax error: ...`, the source line and a caret), which upstream prints as
        // they are; cel-go indents the source line and the caret by one space.
        let issues = e.to_string().replace("\n| ", "\n | ");
        if issues.starts_with("ERROR: ") {
            CompileError(format!("compilation failed: {issues}"))
        } else {
            CompileError(format!(
                "compilation failed: ERROR: <input>: Syntax error: {issues}"
            ))
        }
    })?;
    comprehensions::expand(&mut expression, source)
        .map_err(|issue| CompileError(format!("compilation failed: {issue}")))?;
    let mut free = BTreeMap::new();
    free_identifiers(&expression, &mut Vec::new(), &mut free);
    // Each use of an undeclared variable, where it appears, as cel-go reports them.
    // The places are found in the source text; when the text names it more often
    // than the expression uses it free (a comprehension binds the same name
    // elsewhere), only its first place is reported, as no text place can be told
    // free.
    let mut undeclared: Vec<(usize, &str)> = free
        .iter()
        .filter(|(n, _)| !declared.contains(&n.as_str()) && !is_builtin_ident(n))
        .flat_map(|(n, &uses)| {
            let name: &str = n;
            let mut places = typecheck::identifier_positions(source, name);
            if places.len() != uses {
                places.truncate(1);
            }
            if places.is_empty() {
                places.push(0);
            }
            places.into_iter().map(move |at| (at, name))
        })
        .collect();
    if !undeclared.is_empty() {
        undeclared.sort();
        let issues: Vec<String> = undeclared
            .iter()
            .map(|(at, name)| {
                typecheck::issue_text(
                    source,
                    *at,
                    &format!("undeclared reference to '{name}' (in container '')"),
                )
            })
            .collect();
        return Err(CompileError(format!(
            "compilation failed: {}",
            issues.join("\n")
        )));
    }
    let issues = undeclared_function_issues(&expression, source);
    if !issues.is_empty() {
        return Err(CompileError(format!("compilation failed: {issues}")));
    }
    let issues = typecheck::operator_issues(&expression, source);
    if !issues.is_empty() {
        return Err(CompileError(format!("compilation failed: {issues}")));
    }
    let (metered, base_cost) = cost::meter(&expression);
    Ok(Program {
        source: source.to_string(),
        expression,
        metered,
        base_cost,
    })
}

/// Counts the uses of each identifier of `e` not bound by an enclosing comprehension
/// (the iteration variable of `all`, `exists`, `map`, ... or the accumulator).
fn free_identifiers(e: &IdedExpr, bound: &mut Vec<String>, out: &mut BTreeMap<String, usize>) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.iter().any(|b| b == name) {
                *out.entry(name.clone()).or_default() += 1;
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
    out: &mut BTreeMap<String, usize>,
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

/// Functions and macros of upstream's CEL environment that the `cel` crate does not
/// provide: an expression calling one compiles, as upstream, and its evaluation fails
/// (handled by the caller's failure policy), rather than being refused as undeclared.
const UPSTREAM_ONLY_FUNCTIONS: &[&str] = &[
    // Macros the parser expands in some forms only (`map` and `filter` with two or
    // three arguments, `has` of a selection).
    "map", "filter", "has",
];

/// cel-go's `undeclared reference to 'foo' (in container '')` for each call of a
/// function no library declares (`object.spec.name.lowerAsci()`), at the call's
/// opening parenthesis as cel-go places it; joined by newlines, empty when none.
/// Operators are calls too (`_+_`), and are never undeclared.
fn undeclared_function_issues(e: &IdedExpr, source: &str) -> String {
    let mut issues = Vec::new();
    let mut reported = BTreeSet::new();
    visit_calls(e, &mut |call| {
        let name = call.func_name.as_str();
        if name.starts_with(['_', '@', '!', '-'])
            || UPSTREAM_ONLY_FUNCTIONS.contains(&name)
            || reported.contains(name)
        {
            return;
        }
        let qualified = match call.target.as_deref().map(|t| &t.expr) {
            Some(Expr::Ident(prefix)) => Some(format!("{prefix}.{name}")),
            _ => None,
        };
        if qualified.as_deref().is_some_and(is_declared_function) || is_declared_function(name) {
            return;
        }
        reported.insert(name.to_string());
        let (written, global) = match (&call.target, &qualified) {
            // `optional.off(` reads as a global call of a namespaced name.
            (Some(_), Some(q)) if source.contains(&format!("{q}(")) => (format!("{q}("), true),
            (Some(_), _) => (format!(".{name}("), false),
            (None, _) => (format!("{name}("), true),
        };
        let at =
            typecheck::call_position(source, &written, global).map_or(0, |i| i + written.len() - 1);
        issues.push(typecheck::issue_text(
            source,
            at,
            &format!("undeclared reference to '{name}' (in container '')"),
        ));
    });
    issues.join("\n")
}

/// Whether evaluation finds a function named `name` (`size`, `optional.of`): asked of
/// a context registered as [`Activation`]'s are, by calling it with no arguments,
/// since the `cel` crate keeps its function table private. A declared function fails
/// on the missing arguments instead.
fn is_declared_function(name: &str) -> bool {
    use kube_cel::cel::ExecutionError;
    use kube_cel::cel::common::ast::CallExpr;
    let probe = IdedExpr {
        id: 0,
        expr: Expr::Call(CallExpr {
            func_name: name.to_string(),
            target: None,
            args: Vec::new(),
        }),
    };
    // A library function may index its arguments without checking their count.
    let outcome = std::panic::catch_unwind(|| Value::resolve(&probe, function_context()));
    !matches!(outcome, Ok(Err(ExecutionError::UndeclaredReference(n))) if n.as_str() == name)
}

/// The functions every evaluation sees, built once (a few hundred registrations):
/// CEL's standard functions, Kubernetes' libraries, the authorizer library, the
/// conversions the `cel` crate lacks and the cost meter's `@cost`. Evaluations bind
/// their variables in a scope of their own inside it.
fn function_context() -> &'static Context<'static> {
    static FUNCTIONS: std::sync::OnceLock<Context<'static>> = std::sync::OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let mut ctx = Context::default();
        ctx.register_all();
        authz::register(&mut ctx);
        cost::register(&mut ctx);
        comprehensions::register(&mut ctx);
        // cel-go's `dyn(x)` only changes what the type checker assumes; values are
        // unchanged.
        ctx.add_function("dyn", |v: Value| -> kube_cel::cel::ResolveResult { Ok(v) });
        ctx.add_function("bool", to_bool);
        // Go's `time.ParseDuration` reads `µs` and `μs` as microseconds; the `cel`
        // crate's parser knows `us` only.
        ctx.add_function(
            "duration",
            |s: Arc<String>| -> kube_cel::cel::ResolveResult {
                kube_cel::cel::functions::duration(Arc::new(s.replace(['µ', 'μ'], "u")))
            },
        );
        // The optional library's version 2, which the `cel` crate lacks.
        ctx.add_function(
            "optional.unwrap",
            |items: Arc<Vec<Value>>| -> kube_cel::cel::ResolveResult { unwrap_optionals(&items) },
        );
        ctx.add_function(
            "unwrapOpt",
            |This(items): This<Arc<Vec<Value>>>| -> kube_cel::cel::ResolveResult {
                unwrap_optionals(&items)
            },
        );
        ctx.add_function("type", |v: Value| -> kube_cel::cel::ResolveResult {
            Ok(type_value(type_name(&v)))
        });
        for name in TYPE_NAMES {
            ctx.add_variable_from_value(*name, type_value(name));
        }
        // `google.protobuf.Duration` is a selection from `google` to the parser.
        let protobuf = HashMap::from([(
            Key::from("protobuf"),
            Value::Map(Map {
                map: Arc::new(HashMap::from([
                    (Key::from("Duration"), type_value(DURATION_TYPE)),
                    (Key::from("Timestamp"), type_value(TIMESTAMP_TYPE)),
                ])),
            }),
        )]);
        ctx.add_variable_from_value(
            "google",
            Value::Map(Map {
                map: Arc::new(protobuf),
            }),
        );
        ctx
    })
}

/// The type names an expression may write as values (`type(x) == string`).
const TYPE_NAMES: &[&str] = &[
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
];
const DURATION_TYPE: &str = "google.protobuf.Duration";
const TIMESTAMP_TYPE: &str = "google.protobuf.Timestamp";

/// A CEL type as a value, what `type(x)` gives and `int` or `string` name: the `cel`
/// crate has none, so without them the documented test of an int-or-string
/// (`type(self) == string ? ... : ...`) failed every evaluation. Two are equal when
/// they name the same type.
#[derive(Debug, PartialEq, Eq)]
struct TypeValue(String);

impl kube_cel::cel::objects::Opaque for TypeValue {
    fn runtime_type_name(&self) -> &str {
        "type"
    }
}

/// The values of a list of optionals that have one (`optional.unwrap`, `unwrapOpt`).
fn unwrap_optionals(items: &[Value]) -> kube_cel::cel::ResolveResult {
    let mut values = Vec::with_capacity(items.len());
    for item in items {
        let optional = match item {
            Value::Opaque(o) => o.downcast_ref::<kube_cel::cel::objects::OptionalValue>(),
            _ => None,
        };
        match optional {
            Some(o) => values.extend(o.value().cloned()),
            None => {
                return Err(kube_cel::cel::ExecutionError::function_error(
                    "optional.unwrap",
                    format!("no such overload: a list item is a {}", type_name(item)),
                ));
            }
        }
    }
    Ok(Value::List(Arc::new(values)))
}

/// Whether `call` (a call of one argument, all literals) evaluates without an error:
/// cel-go's literal validators evaluate such a call when the expression is compiled.
fn evaluates(call: &IdedExpr) -> bool {
    std::panic::catch_unwind(|| Value::resolve(call, function_context()).is_ok()).unwrap_or(false)
}

fn type_value(name: &str) -> Value {
    Value::Opaque(Arc::new(TypeValue(name.to_string())))
}

/// cel-go's `bool()`: a bool as it is, a string as Go's `strconv.ParseBool` reads it.
fn to_bool(v: Value) -> kube_cel::cel::ResolveResult {
    match &v {
        Value::Bool(_) => Ok(v),
        Value::String(s) => match s.as_str() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(Value::Bool(false)),
            other => Err(kube_cel::cel::ExecutionError::function_error(
                "bool",
                format!("type conversion error from 'string' to 'bool': {other:?}"),
            )),
        },
        _ => Err(kube_cel::cel::ExecutionError::function_error(
            "bool",
            "type conversion error to 'bool'",
        )),
    }
}

/// Calls `f` on every call in `e` (operators included), outermost first.
fn visit_calls(e: &IdedExpr, f: &mut impl FnMut(&kube_cel::cel::common::ast::CallExpr)) {
    if let Expr::Call(call) = &e.expr {
        f(call);
    }
    comprehensions::visit_children(e, &mut |child| visit_calls(child, f));
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
        let mut ctx = function_context().new_inner_scope();
        for (name, value) in &self.vars {
            ctx.add_variable_from_value(name.clone(), value.clone());
        }
        ctx
    }

    /// Evaluates `p` within upstream's per-expression cost limit ([`PER_CALL_LIMIT`]);
    /// the error text is the evaluation error.
    pub fn eval(&self, p: &Program) -> Result<Value, String> {
        self.eval_metered(p, PER_CALL_LIMIT).0
    }

    /// Evaluates `p`, stopping once its cost passes `limit` with upstream's
    /// [`COST_LIMIT_EXCEEDED`]; also returns the cost spent (at most just over
    /// `limit`).
    pub fn eval_metered(&self, p: &Program, limit: u64) -> (Result<Value, String>, u64) {
        let ctx = self.context();
        let meter = cost::Meter::start(p.base_cost, limit);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Value::resolve(&p.metered, &ctx)
        }));
        let spent = meter.spent();
        // An over-limit error can be absorbed by `||`/`&&`; the limit still holds.
        if spent > limit {
            return (Err(COST_LIMIT_EXCEEDED.to_string()), spent);
        }
        let result = match result {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("internal error evaluating the expression".into()),
        };
        (result, spent)
    }

    /// Evaluates a boolean expression (validations, match conditions).
    pub fn eval_bool(&self, p: &Program) -> Result<bool, String> {
        self.eval(p).and_then(expect_bool)
    }

    /// Evaluates a string expression (`messageExpression`, audit values).
    pub fn eval_string(&self, p: &Program) -> Result<String, String> {
        self.eval(p).and_then(expect_string)
    }
}

fn expect_bool(v: Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(b),
        other => Err(format!(
            "expected a boolean result, got {}",
            type_name(&other)
        )),
    }
}

fn expect_string(v: Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok((*s).clone()),
        other => Err(format!(
            "expected a string result, got {}",
            type_name(&other)
        )),
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

/// cel-go's name of a value's type (`type(v)`, and messages).
pub fn type_name(v: &Value) -> &str {
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
        Value::Duration(_) => DURATION_TYPE,
        Value::Timestamp(_) => TIMESTAMP_TYPE,
        Value::Opaque(o) => o.runtime_type_name(),
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
    fn two_variable_comprehensions_run_as_cel_go_runs_them() {
        let object = json!({"spec": {"ports": [80, 443], "limits": {"cpu": 2, "memory": 4}}});
        for (expr, want) in [
            ("object.spec.ports.all(i, p, p > i)", true),
            ("object.spec.ports.exists(i, p, i == 1 && p == 443)", true),
            ("object.spec.ports.existsOne(i, p, p > 100)", true),
            ("object.spec.limits.all(k, v, k.size() > 2 && v > 1)", true),
            ("object.spec.limits.exists_one(k, v, v == 2)", true),
            (
                "object.spec.ports.transformList(i, p, p + i) == [80, 444]",
                true,
            ),
            (
                "object.spec.ports.transformList(i, p, i > 0, p) == [443]",
                true,
            ),
            (
                "object.spec.limits.transformMap(k, v, v * 2) == {'cpu': 4, 'memory': 8}",
                true,
            ),
            (
                "object.spec.limits.transformMap(k, v, k == 'cpu', v) == {'cpu': 2}",
                true,
            ),
            (
                "object.spec.ports.transformMapEntry(i, p, {string(p): i}) == {'80': 0, '443': 1}",
                true,
            ),
            // Nested: the inner range and variables shadow nothing outside.
            (
                "object.spec.ports.all(i, p, object.spec.ports.exists(j, q, q == p && j == i))",
                true,
            ),
            // The one-variable forms are unchanged.
            (
                "object.spec.ports.all(p, p > 0) && object.spec.limits.all(k, k != '')",
                true,
            ),
        ] {
            assert_eq!(eval(expr, object.clone()), Ok(Value::Bool(want)), "{expr}");
        }
        let err = eval(
            "[1, 2].transformMapEntry(i, v, {'k': v}).size() > 0",
            object.clone(),
        )
        .unwrap_err();
        assert!(err.contains("already exists"), "{err}");
        for (expr, issue) in [
            ("[1].all(i, i, true)", "duplicate variable name: i"),
            ("[1].all(i, 1, true)", "argument must be a simple name"),
            (
                "[1].all(i, __result__, true)",
                "iteration variable overwrites accumulator variable",
            ),
        ] {
            let err = compile(expr, VAP).map_err(|e| e.0);
            assert!(
                err.as_ref().is_err_and(|e| e.contains(issue)),
                "{expr}: {err:?}"
            );
        }
    }

    #[test]
    fn types_are_values() {
        for (expr, percent, want) in [
            // The documented test of an int-or-string.
            (
                "type(object.x) == string ? object.x == '99%' : object.x == 42",
                json!("99%"),
                true,
            ),
            (
                "type(object.x) == string ? object.x == '99%' : object.x == 42",
                json!(42),
                true,
            ),
            ("type(object.x) == int", json!("1"), false),
            (
                "type(object.x) == list && type(1u) == uint && type(b'a') == bytes",
                json!([1]),
                true,
            ),
            (
                "type(object.x) == map && type(type(1)) == type && type(null) == null_type",
                json!({}),
                true,
            ),
            (
                "type(duration('1s')) == google.protobuf.Duration && type(1.5) == double",
                json!(0),
                true,
            ),
        ] {
            let object = json!({"x": percent});
            assert_eq!(eval(expr, object), Ok(Value::Bool(want)), "{expr}");
        }
    }

    #[test]
    fn optional_syntax_selects_indexes_and_builds_optionals() {
        let object = json!({"spec": {"driver": {"type": "Managed"}, "ports": [80, 443],
            "labels": {"a": "b"}}});
        for (expr, want) in [
            ("object.spec.?driver.?type.orValue('') == 'Managed'", true),
            ("object.spec.?missing.?type.orValue('none') == 'none'", true),
            (
                "!object.?status.hasValue() && object.?spec.hasValue()",
                true,
            ),
            ("object.spec.ports[?1].orValue(0) == 443", true),
            ("object.spec.ports[?5].orValue(0) == 0", true),
            ("object.spec.labels[?'a'].value() == 'b'", true),
            (
                "object.spec.?labels.?z.or(optional.of('y')).value() == 'y'",
                true,
            ),
            (
                "[?object.spec.?driver.?type, ?optional.none()].size() == 1",
                true,
            ),
            (
                "{?'t': object.spec.?driver.?type, ?'u': optional.none()}.size() == 1",
                true,
            ),
            (
                "object.spec.?driver.?type.optMap(t, t + '!').value() == 'Managed!'",
                true,
            ),
            ("!object.spec.?missing.optMap(t, t).hasValue()", true),
            (
                "object.spec.?ports.optFlatMap(p, p[?0]).orValue(0) == 80",
                true,
            ),
            (
                "optional.unwrap([object.spec.?driver.?type, object.spec.?nope]) == ['Managed']",
                true,
            ),
            (
                "[optional.of(1), optional.none(), optional.of(2)].unwrapOpt() == [1, 2]",
                true,
            ),
        ] {
            assert_eq!(eval(expr, object.clone()), Ok(Value::Bool(want)), "{expr}");
        }
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

    /// Compiles and runs `source` on a thread with the stack of a tokio worker (2 MiB);
    /// a stack overflow there aborts this whole test binary, as it would the apiserver.
    fn on_a_worker_stack(source: String) -> Result<Result<Value, String>, String> {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let p = compile(&source, VAP).map_err(|e| e.0)?;
                Ok(Activation::new().eval(&p))
            })
            .unwrap()
            .join()
            .expect("compiling and running an expression does not panic")
    }

    #[test]
    fn deep_expressions_are_refused_before_they_overflow_the_stack() {
        for terms in [300, 3_000, 30_000] {
            let chain = vec!["1"; terms].join("+");
            assert_eq!(
                on_a_worker_stack(chain).unwrap_err(),
                "compilation failed: ERROR: <input>:-1:0: max recursion depth exceeded",
                "{terms} terms"
            );
        }
        for deep in [
            format!("object{}", ".a".repeat(5_000)),
            format!("[0]{}", "[0]".repeat(5_000)),
            format!("{}true", "!".repeat(5_000)),
            format!("{}1{}", "(".repeat(5_000), ")".repeat(5_000)),
            format!("{}1{}", "[".repeat(5_000), "]".repeat(5_000)),
            // A quote the lexer does not read as a string hides nothing.
            format!("'\\q {}'", "+1".repeat(5_000)),
            format!("'\n{}'", "+1".repeat(5_000)),
            format!("1 ' {}", "+1".repeat(5_000)),
        ] {
            let head: String = deep.chars().take(12).collect();
            assert!(on_a_worker_stack(deep).is_err(), "{head}...");
        }
        // What stays within the limits compiles and runs on such a stack.
        let longest = vec!["1"; 251].join(" + ");
        assert_eq!(on_a_worker_stack(longest), Ok(Ok(Value::Int(251))));
        let nested = format!("{}1{}", "(1 + ".repeat(80), ")".repeat(80));
        assert_eq!(on_a_worker_stack(nested), Ok(Ok(Value::Int(81))));
        let wide = vec!["1 + 1 == 2"; 5_000].join(" && ");
        assert_eq!(on_a_worker_stack(wide), Ok(Ok(Value::Bool(true))));
        // As long as the size limit lets a logical chain be.
        let widest = vec!["true"; 16_000].join("||");
        assert_eq!(on_a_worker_stack(widest), Ok(Ok(Value::Bool(true))));
    }

    #[test]
    fn compile_errors_are_reported() {
        let e = compile("object.spec.replicas <=", VAP).unwrap_err();
        assert!(e.0.starts_with("compilation failed: "), "{e}");
        let e = compile("objekt.spec.replicas > 1", VAP).unwrap_err();
        assert!(e.0.contains("undeclared reference to 'objekt'"), "{e}");
        // Each undeclared variable where it appears, with the source and a caret.
        let e = compile("object.x + parms.y > veriables.z", VAP).unwrap_err();
        assert_eq!(
            e.0,
            "compilation failed: ERROR: <input>:1:12: undeclared reference to 'parms' (in container '')\n | object.x + parms.y > veriables.z\n | ...........^\nERROR: <input>:1:22: undeclared reference to 'veriables' (in container '')\n | object.x + parms.y > veriables.z\n | .....................^"
        );
        // Every use of one is reported, as cel-go's checker reports each identifier;
        // a name a comprehension also binds is reported once (its free uses cannot be
        // told from the bound ones in the text).
        let e = compile("parms.x > 0 && 'parms' != parms.y", VAP).unwrap_err();
        assert_eq!(
            e.0,
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'parms' (in container '')\n | parms.x > 0 && 'parms' != parms.y\n | ^\nERROR: <input>:1:27: undeclared reference to 'parms' (in container '')\n | parms.x > 0 && 'parms' != parms.y\n | ..........................^"
        );
        let e = compile("object.items.all(j, j > 0) && j > 1 && j < 9", VAP).unwrap_err();
        assert_eq!(e.0.matches("undeclared reference to 'j'").count(), 1, "{e}");
        // Comprehension variables are bound, not free.
        compile("object.items.all(i, i.x > 0)", VAP).unwrap();
        assert!(compile("params.x", &["object"]).is_err());
        assert!(compile("  ", VAP).is_err());
        // Operands whose types are known whatever the variables hold.
        assert_eq!(
            compile("1 + 'a' == object.x", VAP).unwrap_err().0,
            "compilation failed: ERROR: <input>:1:3: found no matching overload for '_+_' \
             applied to '(int, string)'\n | 1 + 'a' == object.x\n | ..^"
        );
        assert!(
            compile("size(object.items) > 'three'", VAP)
                .unwrap_err()
                .0
                .contains("'_>_' applied to '(int, string)'")
        );
        // A variable's type is not known here.
        compile("object.x + 'a' == 'b' && object.y + 1 > 2", VAP).unwrap();
    }

    #[test]
    fn calls_of_undeclared_functions_do_not_compile() {
        assert_eq!(
            compile("object.metadata.name.lowerAsci() == 'a'", VAP)
                .unwrap_err()
                .0,
            "compilation failed: ERROR: <input>:1:31: undeclared reference to 'lowerAsci' \
             (in container '')\n | object.metadata.name.lowerAsci() == 'a'\n | \
             ..............................^"
        );
        assert!(
            compile("sizee(object.items) > 1", VAP)
                .unwrap_err()
                .0
                .contains("<input>:1:6: undeclared reference to 'sizee'")
        );
        assert!(
            compile("optional.off(1).hasValue()", VAP)
                .unwrap_err()
                .0
                .contains("undeclared reference to 'off'")
        );
        // Every library upstream's environment has, as policies use them.
        for expr in [
            "size(object.items) > 0 && object.metadata.name.startsWith('a')",
            "object.metadata.name.matches('^a') && object.x.endsWith('b')",
            "object.metadata.name.lowerAscii().split('-').join('') != ''",
            "quantity(object.q).isGreaterThan(quantity('1Gi'))",
            "isQuantity(object.q) && url(object.u).getHost() == 'h'",
            "ip(object.ip).family() == 4 && cidr('10.0.0.0/8').containsIP(ip(object.ip))",
            "sets.contains([1, 2], [1]) && [1, 2].isSorted() && [1, 2].sum() == 3",
            "math.greatest(1, 2) == 2 && optional.of(1).hasValue()",
            "optional.none().orValue(1) == 1 && optional.ofNonZeroValue(object.x).hasValue()",
            "authorizer.group('apps').resource('deployments').check('create').allowed()",
            "duration('1s') < duration('2s') && timestamp(object.t).getFullYear() > 2000",
            "int(object.n) + 1 > uint(2) && string(1) == '1' && double(1) > 0.5",
            "format.dns1123Label().validate(object.metadata.name).hasValue()",
            "dyn(object.x) == 1 && bool('true')",
            "type(object.x) == int",
            "object.items.all(i, i.x > 0) && object.items.exists(i, i.x > 0)",
            "object.items.map(i, i.x).filter(x, x > 0).size() > 0",
        ] {
            compile(expr, POLICY_VARIABLES).unwrap_or_else(|e| panic!("{expr}: {e}"));
        }
    }

    #[test]
    fn dyn_and_bool_convert_as_cel_go_does() {
        let obj = json!({"x": 1});
        assert_eq!(
            eval("dyn(object.x) == 1", obj.clone()),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            eval("bool('True') && !bool('0') && bool(true)", obj.clone()),
            Ok(Value::Bool(true))
        );
        assert!(eval("bool('yes')", obj).is_err());
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

    /// Allows `update` of deployments in `ns1` for `alice` and of anything for the
    /// service account `ns1/robot`; errors on the `error` verb; records the checks.
    #[derive(Debug)]
    struct FakeAuthorizer {
        user: String,
        checks: std::sync::Arc<parking_lot_free::Checks>,
    }

    mod parking_lot_free {
        #[derive(Debug, Default)]
        pub struct Checks(pub std::sync::Mutex<Vec<(String, super::AuthzCheck)>>);
    }

    impl CelAuthorizer for FakeAuthorizer {
        fn check(&self, check: &AuthzCheck) -> AuthzDecision {
            self.checks
                .0
                .lock()
                .unwrap()
                .push((self.user.clone(), check.clone()));
            if check.verb == "error" {
                return AuthzDecision {
                    allowed: false,
                    reason: String::new(),
                    error: Some("webhook unreachable".into()),
                };
            }
            let allowed = self.user == "system:serviceaccount:ns1:robot"
                || (check.verb == "update"
                    && check.resource == "deployments"
                    && check.namespace == "ns1");
            AuthzDecision {
                allowed,
                reason: if allowed { "granted" } else { "no rule" }.into(),
                error: None,
            }
        }

        fn for_service_account(
            &self,
            namespace: &str,
            name: &str,
        ) -> Result<Arc<dyn CelAuthorizer>, String> {
            if name.contains('@') {
                return Err("Invalid service account name".into());
            }
            Ok(Arc::new(FakeAuthorizer {
                user: format!("system:serviceaccount:{namespace}:{name}"),
                checks: self.checks.clone(),
            }))
        }
    }

    #[test]
    fn authorizer_library_builds_checks_and_reads_decisions() {
        let checks = Arc::new(parking_lot_free::Checks::default());
        let authz = Arc::new(FakeAuthorizer {
            user: "alice".into(),
            checks: checks.clone(),
        });
        let mut a = Activation::new();
        a.bind(
            "authorizer",
            authorizer_value(
                authz,
                &RequestResource {
                    group: "apps".into(),
                    resource: "deployments".into(),
                    subresource: "scale".into(),
                    namespace: "ns1".into(),
                    name: "web".into(),
                },
            ),
        );
        let run = |e: &str| {
            let p = compile(e, POLICY_VARIABLES).map_err(|e| e.0)?;
            a.eval(&p)
        };
        for (expr, want) in [
            (
                "authorizer.group('apps').resource('deployments').namespace('ns1').check('update').allowed()",
                true,
            ),
            (
                "authorizer.group('apps').resource('deployments').namespace('ns2').check('update').allowed()",
                false,
            ),
            (
                "authorizer.group('apps').resource('deployments').namespace('ns1').check('get').reason() == 'no rule'",
                true,
            ),
            ("authorizer.requestResource.check('update').allowed()", true),
            ("authorizer.requestResource.check('error').errored()", true),
            (
                "authorizer.requestResource.check('error').error() == 'webhook unreachable'",
                true,
            ),
            (
                "authorizer.requestResource.check('update').error() == ''",
                true,
            ),
            ("authorizer.path('/healthz').check('get').allowed()", false),
            (
                "authorizer.serviceAccount('ns1', 'robot').group('').resource('secrets').check('list').allowed()",
                true,
            ),
        ] {
            assert_eq!(run(expr), Ok(Value::Bool(want)), "{expr}");
        }
        let recorded = checks.0.lock().unwrap().clone();
        let (user, first) = &recorded[0];
        assert_eq!(user, "alice");
        assert_eq!(
            *first,
            AuthzCheck {
                resource_request: true,
                verb: "update".into(),
                group: "apps".into(),
                resource: "deployments".into(),
                namespace: "ns1".into(),
                ..AuthzCheck::default()
            }
        );
        // requestResource carries the request's subresource and name.
        let (_, rr) = &recorded[3];
        assert_eq!(
            (rr.subresource.as_str(), rr.name.as_str()),
            ("scale", "web")
        );
        // A path check is not a resource request.
        let (_, path) = recorded.iter().find(|(_, c)| !c.path.is_empty()).unwrap();
        assert!(!path.resource_request);
        assert_eq!(
            (path.path.as_str(), path.verb.as_str()),
            ("/healthz", "get")
        );
        assert_eq!(
            recorded.last().unwrap().0,
            "system:serviceaccount:ns1:robot"
        );

        // Upstream's argument errors.
        for (expr, want) in [
            (
                "authorizer.path(' ').check('get').allowed()",
                "path must not be empty",
            ),
            (
                "authorizer.group('').resource('').check('get').allowed()",
                "resource must not be empty",
            ),
            (
                "authorizer.serviceAccount('ns1', 'a@b').group('').resource('pods').check('get').allowed()",
                "Invalid service account name",
            ),
            (
                "'x'.check('get').allowed()",
                "found no matching overload for 'check' applied to 'string.(string)'",
            ),
        ] {
            let e = run(expr).unwrap_err();
            assert!(e.contains(want), "{expr}: {e}");
        }
        // Without the variable bound, the expression fails at run time.
        let p = compile(
            "authorizer.path('/x').check('get').allowed()",
            POLICY_VARIABLES,
        )
        .unwrap();
        assert!(Activation::new().eval(&p).is_err());
        assert!(compile("authorizer.path('/x')", &["object"]).is_err());
        assert!(compile("authorizer.path('/x')", WEBHOOK_VARIABLES).is_ok());
    }

    #[test]
    fn evaluation_past_the_cost_limit_is_cancelled() {
        let items: Vec<i64> = (0..2000).collect();
        let mut a = Activation::new();
        a.bind_json("object", &json!({"items": items}));
        // 2,000 x 2,000 inner iterations: far past the per-call limit.
        let nested = compile("object.items.all(x, object.items.all(y, x + y >= 0))", VAP).unwrap();
        let (result, spent) = a.eval_metered(&nested, PER_CALL_LIMIT);
        assert_eq!(result, Err(COST_LIMIT_EXCEEDED.to_string()));
        // Stopped at the limit, not after the whole 4,000,000 iterations.
        assert!(
            spent > PER_CALL_LIMIT && spent < PER_CALL_LIMIT + 100,
            "{spent}"
        );
        assert_eq!(a.eval(&nested), Err(COST_LIMIT_EXCEEDED.to_string()));
        // An over-limit error absorbed by `||` still fails the evaluation.
        let absorbed = compile(
            "object.items.all(x, object.items.all(y, x + y >= 0)) || true",
            VAP,
        )
        .unwrap();
        assert_eq!(a.eval(&absorbed), Err(COST_LIMIT_EXCEEDED.to_string()));

        // One loop over the same list is cheap, and its cost grows with the list.
        let single = compile("object.items.all(x, x >= 0)", VAP).unwrap();
        let (result, spent) = a.eval_metered(&single, PER_CALL_LIMIT);
        assert_eq!(result, Ok(Value::Bool(true)));
        assert!((2000..20_000).contains(&spent), "{spent}");
        let mut small = Activation::new();
        small.bind_json("object", &json!({"items": [1, 2]}));
        let (_, small_spent) = small.eval_metered(&single, PER_CALL_LIMIT);
        assert!(small_spent < spent / 100, "{small_spent} vs {spent}");
        // A loop-free expression costs its nodes (`_>_`, `size`, the select, the
        // identifier, the literal).
        let flat = compile("object.items.size() > 1", VAP).unwrap();
        let (result, spent) = a.eval_metered(&flat, 5);
        assert_eq!((result, spent), (Ok(Value::Bool(true)), 5));
        assert_eq!(
            a.eval_metered(&flat, 4).0,
            Err(COST_LIMIT_EXCEEDED.to_string())
        );
    }

    #[test]
    fn a_budget_is_shared_by_evaluations_until_spent() {
        let mut a = Activation::new();
        a.bind_json("object", &json!({"items": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}));
        let p = compile("object.items.all(x, x > 0)", VAP).unwrap();
        let (_, one) = a.eval_metered(&p, PER_CALL_LIMIT);
        let mut budget = Budget::new(2 * one + one / 2);
        assert_eq!(budget.eval_bool(&a, &p), Ok(Ok(true)));
        assert_eq!(budget.eval_bool(&a, &p), Ok(Ok(true)));
        assert_eq!(budget.remaining(), one / 2);
        assert_eq!(budget.eval_bool(&a, &p), Err(OutOfBudget));
        assert_eq!(budget.remaining(), 0);
        assert_eq!(OutOfBudget.to_string(), OUT_OF_BUDGET);
        // Within a large budget, the per-call limit still applies.
        let nested = compile(
            "object.items.all(x, object.items.all(y, object.items.all(z, x + y + z > 0)))",
            VAP,
        )
        .unwrap();
        let (_, nested_cost) = a.eval_metered(&nested, PER_CALL_LIMIT);
        let mut budget = Budget::new(RUNTIME_COST_BUDGET);
        assert_eq!(budget.eval_bool(&a, &nested), Ok(Ok(true)));
        assert_eq!(budget.remaining(), RUNTIME_COST_BUDGET - nested_cost);
        assert_eq!(
            budget.eval_string(&a, &nested),
            Ok(Err("expected a string result, got bool".into()))
        );
    }

    #[test]
    fn building_a_long_list_costs_with_its_length() {
        let a = Activation::new();
        let short = compile("lists.range(1000).map(x, x * 2).size() == 1000", VAP).unwrap();
        assert_eq!(a.eval(&short), Ok(Value::Bool(true)));
        // 20,000 appends each copying the list so far: stopped at the limit.
        let long = compile("lists.range(20000).map(x, x * 2).size() == 20000", VAP).unwrap();
        let (result, spent) = a.eval_metered(&long, PER_CALL_LIMIT);
        assert_eq!(result, Err(COST_LIMIT_EXCEEDED.to_string()));
        assert!(spent < PER_CALL_LIMIT + 10_000, "{spent}");
    }
}
