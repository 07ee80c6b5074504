//! Field references checked against OpenAPI schemas: the part of upstream's
//! ValidatingAdmissionPolicy type checking (`plugin/policy/validating/typechecking.go`,
//! run by the validatingadmissionpolicy-status controller) and of its compilation of
//! a CRD's `x-kubernetes-validations` rules against their declared types
//! ([`check_rule_fields`]) that catches the common case, a misspelt or missing field
//! such as `object.spec.replica` or `self.replica`.
//!
//! The `cel` crate has no type checker, so this walks the parsed expression: selects
//! (and `has()` tests) rooted at `object`, `oldObject` or `params`, list and map
//! indexing, and the iteration variables of comprehensions (`all`, `exists`, `map`,
//! `filter`, ... over a list bind its items' schema) are resolved through the
//! schema's `properties`, `additionalProperties`, `items`, `$ref` and `allOf`.
//! Reported, in cel-go's words: `undefined field 'f'` and `type 'string' does not
//! support field selection`; for a CRD rule also `found no matching overload for
//! '_+_' applied to '(int, string)'` where an operator's operands are of known scalar
//! types (literals, schema fields, `size()` and the conversion functions) that none of
//! its standard overloads takes, and the same for the receiver and argument of the
//! string functions (`startsWith`, `endsWith`, `contains`, `matches`: `'string.(int)'`)
//! and `size()`'s operand. Not checked: other functions' arguments, the results of
//! other functions and of macros, `variables.*`, and anything under
//! `x-kubernetes-preserve-unknown-fields` or a schema without a type. The
//! position in each message is that of the first `.field` in the source (the parser
//! keeps no positions), which is exact unless the field name repeats.

use std::collections::HashMap;

use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;

use crate::Program;

/// Schemas and the `components/schemas` their `$ref`s point into (an OpenAPI v3
/// document's).
#[derive(Debug, Clone, Copy)]
pub struct Schemas<'a> {
    /// The schema of `object` and `oldObject`, if known.
    pub object: Option<&'a Value>,
    /// The schema of `params`, if known.
    pub params: Option<&'a Value>,
    /// `components.schemas` of the documents the schemas come from.
    pub components: &'a serde_json::Map<String, Value>,
}

/// The field references of a CustomResourceDefinition's `x-kubernetes-validations`
/// rule (or its `messageExpression`) checked against the schema node it sits on,
/// bound to `self` and `oldSelf`: upstream compiles each rule against the node's
/// declared type when the CRD is written, so `self.replicsa` is refused there, not
/// found when an object is validated. As upstream's declared types do, an
/// `x-kubernetes-int-or-string` value is dynamic (any selection compiles), and an
/// embedded resource (and the root) has `apiVersion`, `kind` and `metadata` whether
/// its schema lists them or not. Issues as [`check_fields`] gives them, and cel-go's
/// `found no matching overload` for an operator whose operands' types are known and
/// fit none of its overloads (`self.replicas + 'a'`).
pub fn check_rule_fields(program: &Program, node: &Value) -> RuleCheck {
    let components = serde_json::Map::new();
    let schemas = Schemas {
        object: None,
        params: None,
        components: &components,
    };
    let mut checker = Checker {
        schemas: &schemas,
        source: program.source(),
        issues: Vec::new(),
        bound: HashMap::new(),
        rule_self: Some(node),
        quiet: false,
    };
    checker.schema_of(program.expression());
    let mut result = None;
    if checker.issues.is_empty() {
        checker.quiet = true;
        result = checker.type_of(program.expression()).name();
    }
    RuleCheck {
        issues: checker.issues.join("\n"),
        result,
    }
}

/// Operators on operands of known types no overload of which takes them, in an
/// expression whose variables are all of unknown type (`1 + 'a'`, `size(x) + 'a'`):
/// what cel-go refuses whatever the variables hold. [`crate::compile`] runs it.
pub(crate) fn operator_issues(expression: &IdedExpr, source: &str) -> String {
    let components = serde_json::Map::new();
    let schemas = Schemas {
        object: None,
        params: None,
        components: &components,
    };
    let mut checker = Checker {
        schemas: &schemas,
        source,
        issues: Vec::new(),
        bound: HashMap::new(),
        rule_self: None,
        quiet: true,
    };
    checker.type_of(expression);
    checker.issues.join("\n")
}

/// What [`check_rule_fields`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCheck {
    /// The issues, in cel-go's form, joined by newlines; empty when none.
    pub issues: String,
    /// cel-go's name of the expression's type when it is known to be a scalar
    /// (`bool`, `string`, `int`, ...), for upstream's "must evaluate to" checks.
    pub result: Option<&'static str>,
}

/// A CEL type as far as [`Checker::type_of`] knows it; `Dyn` when it does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Int,
    Uint,
    Double,
    String,
    Bool,
    Bytes,
    Null,
    Timestamp,
    Duration,
    List,
    Map,
    Dyn,
}

impl Ty {
    /// cel-go's name of the type, for the scalar types issues are reported on.
    fn name(self) -> Option<&'static str> {
        Some(match self {
            Ty::Int => "int",
            Ty::Uint => "uint",
            Ty::Double => "double",
            Ty::String => "string",
            Ty::Bool => "bool",
            Ty::Bytes => "bytes",
            Ty::Timestamp => "google.protobuf.Timestamp",
            Ty::Duration => "google.protobuf.Duration",
            Ty::Null | Ty::List | Ty::Map | Ty::Dyn => return None,
        })
    }

    fn is_number(self) -> bool {
        matches!(self, Ty::Int | Ty::Uint | Ty::Double)
    }

    /// The declared type of a value of `schema` (upstream's `SchemaDeclType`).
    fn of_schema(schema: &Value) -> Ty {
        let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
        if flag("x-kubernetes-int-or-string") || flag("x-kubernetes-preserve-unknown-fields") {
            return Ty::Dyn;
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("integer") => Ty::Int,
            Some("number") => Ty::Double,
            Some("boolean") => Ty::Bool,
            Some("array") => Ty::List,
            Some("object") => Ty::Map,
            Some("string") => match schema.get("format").and_then(Value::as_str) {
                Some("byte") => Ty::Bytes,
                Some("duration") => Ty::Duration,
                Some("date" | "date-time") => Ty::Timestamp,
                _ => Ty::String,
            },
            _ => Ty::Dyn,
        }
    }
}

/// The result of binary operator `op` on `(a, b)`: `Some(Dyn)` when either is not
/// known, `None` when no overload takes them (as cel-go's standard declarations, with
/// the cross-type numeric comparisons Kubernetes enables).
fn binary_result(op: &str, a: Ty, b: Ty) -> Option<Ty> {
    use Ty::*;
    if a == Dyn || b == Dyn || a == Null || b == Null {
        return Some(match op {
            "_+_" | "_-_" | "_*_" | "_/_" | "_%_" => Dyn,
            _ => Bool,
        });
    }
    match op {
        "_+_" => match (a, b) {
            (Int | Uint | Double | String | Bytes | List | Duration, _) if a == b => Some(a),
            (Timestamp, Duration) | (Duration, Timestamp) => Some(Timestamp),
            _ => None,
        },
        "_-_" => match (a, b) {
            (Int | Uint | Double | Duration, _) if a == b => Some(a),
            (Timestamp, Timestamp) => Some(Duration),
            (Timestamp, Duration) => Some(Timestamp),
            _ => None,
        },
        "_*_" | "_/_" => (a == b && a.is_number()).then_some(a),
        "_%_" => (a == b && matches!(a, Int | Uint)).then_some(a),
        "_<_" | "_<=_" | "_>_" | "_>=_" => {
            let ordered = matches!(a, String | Bool | Bytes | Timestamp | Duration);
            ((a == b && ordered) || (a.is_number() && b.is_number())).then_some(Bool)
        }
        // Equality is defined for any two values of one type; numbers of different
        // types and aggregates are left alone.
        "_==_" | "_!=_" => {
            let comparable = a == b
                || (a.is_number() && b.is_number())
                || matches!(a, List | Map)
                || matches!(b, List | Map);
            comparable.then_some(Bool)
        }
        "_&&_" | "_||_" => (a == Bool && b == Bool).then_some(Bool),
        _ => Some(Dyn),
    }
}

/// The operator's token in the source, for the position of an issue about it.
fn operator_token(op: &str) -> Option<&'static str> {
    Some(match op {
        "_+_" => "+",
        "_-_" => "-",
        "_*_" => "*",
        "_/_" => "/",
        "_%_" => "%",
        "_<_" => "<",
        "_<=_" => "<=",
        "_>_" => ">",
        "_>=_" => ">=",
        "_==_" => "==",
        "_!=_" => "!=",
        "_&&_" => "&&",
        "_||_" => "||",
        "!_" => "!",
        _ => return None,
    })
}

/// A bound on `$ref`/`allOf` hops while resolving one schema (recursive types).
const MAX_REF_HOPS: usize = 16;

impl<'a> Schemas<'a> {
    /// `schema` with `$ref`s and single-element `allOf`s followed.
    fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..MAX_REF_HOPS {
            if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
                let name = r.rsplit('/').next().unwrap_or(r);
                match self.components.get(name) {
                    Some(s) => schema = s,
                    None => return schema,
                }
            } else if let Some([only]) = schema
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                schema = only;
            } else {
                break;
            }
        }
        schema
    }
}

/// The issues of `program` against `schemas`, each in cel-go's form
/// (`ERROR: <input>:1:12: undefined field 'foo'` and the source line with a caret),
/// joined by newlines; empty when none is found.
pub fn check_fields(program: &Program, schemas: &Schemas<'_>) -> String {
    let mut checker = Checker {
        schemas,
        source: program.source(),
        issues: Vec::new(),
        bound: HashMap::new(),
        rule_self: None,
        quiet: false,
    };
    checker.schema_of(program.expression());
    checker.issues.join("\n")
}

struct Checker<'s, 'a> {
    schemas: &'s Schemas<'a>,
    source: &'s str,
    issues: Vec<String>,
    /// Comprehension variables in scope, with their schema when known.
    bound: HashMap<String, Vec<Option<&'a Value>>>,
    /// A CRD rule's node, bound to `self` and `oldSelf` ([`check_rule_fields`]).
    rule_self: Option<&'a Value>,
    /// Set while [`Checker::type_of`] walks again what `schema_of` has reported on.
    quiet: bool,
}

impl<'a> Checker<'_, 'a> {
    /// Checks `e` and returns its schema, if it is a known part of a schema.
    fn schema_of(&mut self, e: &IdedExpr) -> Option<&'a Value> {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => None,
            Expr::Ident(name) => match self.bound.get(name).and_then(|v| v.last()) {
                Some(schema) => *schema,
                None => match name.as_str() {
                    "object" | "oldObject" => self.schemas.object,
                    "params" => self.schemas.params,
                    "self" | "oldSelf" => self.rule_self,
                    _ => None,
                },
            },
            Expr::Select(s) => {
                let operand = self.schema_of(&s.operand)?;
                self.field(operand, &s.field)
            }
            Expr::Call(call) => {
                if let Some(t) = call.target.as_deref() {
                    self.schema_of(t);
                }
                let args: Vec<Option<&'a Value>> =
                    call.args.iter().map(|a| self.schema_of(a)).collect();
                if call.func_name == "_[_]" && call.target.is_none() {
                    let container = self.schemas.resolve(args.first().copied().flatten()?);
                    if let Some(items) = container.get("items") {
                        return Some(items);
                    }
                    if let Some(values) = container.get("additionalProperties")
                        && values.is_object()
                    {
                        return Some(values);
                    }
                    // A string literal index into an object with properties is a select.
                    if let Some(IdedExpr {
                        expr: Expr::Literal(LiteralValue::String(field)),
                        ..
                    }) = call.args.get(1)
                        && container.get("properties").is_some()
                    {
                        return self.field(container, field.inner());
                    }
                    return None;
                }
                None
            }
            Expr::List(l) => {
                for x in &l.elements {
                    self.schema_of(x);
                }
                None
            }
            Expr::Map(m) => {
                self.entries(&m.entries);
                None
            }
            Expr::Struct(s) => {
                self.entries(&s.entries);
                None
            }
            Expr::Comprehension(c) => {
                let range = self
                    .schema_of(&c.iter_range)
                    .map(|r| self.schemas.resolve(r));
                self.schema_of(&c.accu_init);
                // Over a list the variable is an item; over a map it is a key (a string).
                let item = range.and_then(|r| r.get("items"));
                self.bind(&c.iter_var, item);
                if let Some(v2) = &c.iter_var2 {
                    self.bind(v2, None);
                }
                self.bind(&c.accu_var, None);
                self.schema_of(&c.loop_cond);
                self.schema_of(&c.loop_step);
                self.schema_of(&c.result);
                self.unbind(&c.accu_var);
                if let Some(v2) = &c.iter_var2 {
                    self.unbind(v2);
                }
                self.unbind(&c.iter_var);
                None
            }
        }
    }

    fn entries(&mut self, entries: &[kube_cel::cel::common::ast::IdedEntryExpr]) {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(f) => {
                    self.schema_of(&f.value);
                }
                EntryExpr::MapEntry(m) => {
                    self.schema_of(&m.key);
                    self.schema_of(&m.value);
                }
            }
        }
    }

    fn bind(&mut self, name: &str, schema: Option<&'a Value>) {
        self.bound.entry(name.to_string()).or_default().push(schema);
    }

    fn unbind(&mut self, name: &str) {
        if let Some(v) = self.bound.get_mut(name) {
            v.pop();
            if v.is_empty() {
                self.bound.remove(name);
            }
        }
    }

    /// The schema of `field` of a value of schema `schema`; an issue if it has none.
    fn field(&mut self, schema: &'a Value, field: &str) -> Option<&'a Value> {
        let schema = self.schemas.resolve(schema);
        if schema
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true)
        {
            return None;
        }
        let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
        if flag("x-kubernetes-embedded-resource")
            && matches!(field, "apiVersion" | "kind" | "metadata")
            && schema.pointer(&format!("/properties/{field}")).is_none()
        {
            return None;
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            if let Some(p) = properties.get(field) {
                return Some(p);
            }
            // `__dash__`, `__dot__`, `__slash__`, `__underscores__` and `__keyword__`
            // spell names that are not CEL identifiers; not worth a false alarm.
            if schema.get("additionalProperties").is_none() && !field.contains("__") {
                self.issue(field, &format!("undefined field '{field}'"));
            }
            return None;
        }
        if let Some(values) = schema.get("additionalProperties") {
            return values.is_object().then_some(values);
        }
        if flag("x-kubernetes-int-or-string") {
            if self.rule_self.is_some() {
                return None;
            }
            self.issue(
                field,
                "type 'int-or-string' does not support field selection",
            );
            return None;
        }
        match schema.get("type").and_then(Value::as_str) {
            Some(t @ ("string" | "integer" | "number" | "boolean" | "array")) => {
                let cel_type = match t {
                    "integer" => "int",
                    "number" => "double",
                    "boolean" => "bool",
                    "array" => "list",
                    other => other,
                };
                self.issue(
                    field,
                    &format!("type '{cel_type}' does not support field selection"),
                );
                None
            }
            _ => None,
        }
    }

    /// The type of `e` as far as the schema and CEL's standard declarations tell,
    /// recording an issue for an operator no overload of which takes its operands.
    fn type_of(&mut self, e: &IdedExpr) -> Ty {
        match &e.expr {
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            },
            Expr::Select(s) if s.test => {
                self.type_of(&s.operand);
                Ty::Bool
            }
            Expr::Ident(_) | Expr::Select(_) => self.schema_of(e).map_or(Ty::Dyn, Ty::of_schema),
            Expr::List(l) => {
                for x in &l.elements {
                    self.type_of(x);
                }
                Ty::List
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        self.type_of(&m.key);
                        self.type_of(&m.value);
                    }
                }
                Ty::Map
            }
            Expr::Unspecified | Expr::Struct(_) => Ty::Dyn,
            Expr::Comprehension(c) => {
                let range = self
                    .schema_of(&c.iter_range)
                    .map(|r| self.schemas.resolve(r));
                let item = range.and_then(|r| r.get("items"));
                self.bind(&c.iter_var, item);
                if let Some(v2) = &c.iter_var2 {
                    self.bind(v2, None);
                }
                self.bind(&c.accu_var, None);
                self.type_of(&c.loop_step);
                self.unbind(&c.accu_var);
                if let Some(v2) = &c.iter_var2 {
                    self.unbind(v2);
                }
                self.unbind(&c.iter_var);
                Ty::Dyn
            }
            Expr::Call(call) => self.call_type(e, call),
        }
    }

    fn call_type(&mut self, e: &IdedExpr, call: &kube_cel::cel::common::ast::CallExpr) -> Ty {
        let target = call.target.as_deref().map(|t| self.type_of(t));
        let args: Vec<Ty> = call.args.iter().map(|a| self.type_of(a)).collect();
        let name = call.func_name.as_str();
        match (name, target, args.as_slice()) {
            ("_[_]", None, _) => self.schema_of(e).map_or(Ty::Dyn, Ty::of_schema),
            ("_?_:_", None, [_, a, b]) => {
                if a == b {
                    *a
                } else {
                    Ty::Dyn
                }
            }
            ("!_", None, [a]) => {
                self.expect_bool(name, &[*a]);
                Ty::Bool
            }
            ("-_", None, [a]) => {
                if matches!(a, Ty::String | Ty::Bool | Ty::Bytes | Ty::Timestamp) {
                    self.overload_issue("-", name, &[*a]);
                }
                *a
            }
            (_, None, [a, b]) if operator_token(name).is_some() => {
                match binary_result(name, *a, *b) {
                    Some(t) => t,
                    None => {
                        self.overload_issue(operator_token(name).unwrap_or(name), name, &[*a, *b]);
                        Ty::Dyn
                    }
                }
            }
            // The string functions take a string receiver and a string argument.
            ("startsWith" | "endsWith" | "contains" | "matches", Some(receiver), [arg]) => {
                if receiver != Ty::String || *arg != Ty::String {
                    self.call_overload_issue(name, Some(receiver), &[*arg]);
                }
                Ty::Bool
            }
            // size() takes a string, bytes, a list or a map.
            ("size", receiver, args) => {
                let operand = receiver.or_else(|| args.first().copied());
                if operand.is_some_and(|t| !matches!(t, Ty::String | Ty::Bytes)) {
                    self.call_overload_issue(name, receiver, args);
                }
                Ty::Int
            }
            ("int", None, [_]) => Ty::Int,
            ("uint", None, [_]) => Ty::Uint,
            ("double", None, [_]) => Ty::Double,
            ("string", None, [_]) => Ty::String,
            ("bytes", None, [_]) => Ty::Bytes,
            ("bool", None, [_]) => Ty::Bool,
            ("@in" | "startsWith" | "endsWith" | "contains" | "matches", _, _) => Ty::Bool,
            _ => Ty::Dyn,
        }
    }

    /// `!` takes a bool only.
    fn expect_bool(&mut self, op: &str, operands: &[Ty]) {
        if operands
            .iter()
            .any(|t| t.name().is_some() && *t != Ty::Bool)
        {
            let token = operator_token(op).unwrap_or(op);
            self.overload_issue(token, op, operands);
        }
    }

    /// cel-go's `found no matching overload for '_+_' applied to '(int, string)'`,
    /// only when every operand's type is known (a scalar).
    fn overload_issue(&mut self, token: &str, op: &str, operands: &[Ty]) {
        let Some(names) = operands
            .iter()
            .map(|t| t.name())
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        let message = format!(
            "found no matching overload for '{op}' applied to '({})'",
            names.join(", ")
        );
        let at = outside_strings(self.source, token).unwrap_or(0);
        self.issue_at(at, &message);
    }

    /// cel-go's `found no matching overload for 'startsWith' applied to 'int.(string)'`
    /// for a function call, at its opening parenthesis as cel-go places it; only when
    /// every type is known (a scalar).
    fn call_overload_issue(&mut self, function: &str, receiver: Option<Ty>, args: &[Ty]) {
        let name_of = |t: &Ty| t.name();
        let Some(arg_names) = args.iter().map(name_of).collect::<Option<Vec<_>>>() else {
            return;
        };
        let (signature, call) = match receiver {
            Some(r) => match r.name() {
                Some(r) => (
                    format!("{r}.({})", arg_names.join(", ")),
                    format!(".{function}("),
                ),
                None => return,
            },
            None => (
                format!("({})", arg_names.join(", ")),
                format!("{function}("),
            ),
        };
        let message =
            format!("found no matching overload for '{function}' applied to '{signature}'");
        let at =
            call_position(self.source, &call, receiver.is_none()).map_or(0, |i| i + call.len() - 1);
        self.issue_at(at, &message);
    }

    /// Records `message` at the first `.field` of the source, as cel-go prints it.
    fn issue(&mut self, field: &str, message: &str) {
        if self.quiet {
            return;
        }
        let needle = format!(".{field}");
        let at = self
            .source
            .match_indices(&needle)
            .map(|(i, _)| i)
            .find(|&i| {
                !self.source[i + needle.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
            .unwrap_or(0);
        self.issue_at(at, message);
    }

    /// Records `message` at byte offset `at` of the source, as cel-go prints it.
    fn issue_at(&mut self, at: usize, message: &str) {
        self.issues.push(issue_text(self.source, at, message));
    }
}

/// `message` at byte offset `at` of `source`, as cel-go prints an issue: the position,
/// the source line and a caret under the place.
pub(crate) fn issue_text(source: &str, at: usize, message: &str) -> String {
    let line_start = source[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_no = source[..at].matches('\n').count() + 1;
    let column = source[line_start..at].chars().count();
    let line = source[line_start..].lines().next().unwrap_or("");
    format!(
        "ERROR: <input>:{line_no}:{}: {message}\n | {line}\n | {}^",
        column + 1,
        ".".repeat(column)
    )
}

/// The byte offset of the first `token` in `source` outside string literals (the
/// parser keeps no positions, so an issue about an operator is placed at its first
/// occurrence, which is exact unless the operator repeats).
fn outside_strings(source: &str, token: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in source.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => quote = Some(c),
            None if source[i..].starts_with(token) => return Some(i),
            None => {}
        }
    }
    None
}

/// The byte offset of the first call written `call` (`.startsWith(`, or `size(` for a
/// global call, which must not be a member call or the tail of a longer name) outside
/// string literals.
pub(crate) fn call_position(source: &str, call: &str, global: bool) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = outside_strings(&source[from..], call).map(|i| i + from) {
        let before = source[..i].chars().next_back();
        if !global || !before.is_some_and(|c| c == '.' || c == '_' || c.is_alphanumeric()) {
            return Some(i);
        }
        from = i + call.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn components() -> serde_json::Map<String, Value> {
        json!({
            "Deployment": {"type": "object", "properties": {
                "apiVersion": {"type": "string"},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/ObjectMeta"}]},
                "spec": {"$ref": "#/components/schemas/DeploymentSpec"}}},
            "ObjectMeta": {"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "DeploymentSpec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "template": {"type": "object", "properties": {
                    "containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"}}}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            "Container": {"type": "object", "properties": {
                "name": {"type": "string"}, "image": {"type": "string"}}},
            "ConfigMap": {"type": "object", "properties": {
                "data": {"type": "object", "additionalProperties": {"type": "string"}}}}
        })
        .as_object()
        .unwrap()
        .clone()
    }

    fn check(expr: &str) -> String {
        let components = components();
        let schemas = Schemas {
            object: Some(&components["Deployment"]),
            params: Some(&components["ConfigMap"]),
            components: &components,
        };
        let program = crate::compile(expr, crate::POLICY_VARIABLES).unwrap();
        check_fields(&program, &schemas)
    }

    #[test]
    fn known_fields_pass() {
        for expr in [
            "object.spec.replicas <= 5",
            "has(object.spec.replicas) && oldObject.metadata.name == 'x'",
            "object.metadata.labels['app'] == 'web' && object.metadata.labels.app == 'web'",
            "object.spec.template.containers.all(c, c.image.startsWith('r/') && c.name != '')",
            "object.spec.template.containers[0].image != ''",
            "object.spec.extra.anything.goes",
            "int(params.data.max) >= object.spec.replicas",
            "params.data.exists(k, k.startsWith('a'))",
            "variables.foo.bar && request.userInfo.username != ''",
            "authorizer.requestResource.check('get').allowed()",
        ] {
            assert_eq!(check(expr), "", "{expr}");
        }
    }

    #[test]
    fn unknown_fields_are_reported_as_cel_go_does() {
        assert_eq!(
            check("object.spec.replica <= 5"),
            "ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica <= 5\n | ...........^"
        );
        assert_eq!(
            check("has(object.spec.paused)"),
            "ERROR: <input>:1:16: undefined field 'paused'\n | has(object.spec.paused)\n | ...............^"
        );
        assert!(
            check("object.spec.template.containers.all(c, c.imag != '')")
                .contains("undefined field 'imag'")
        );
        assert!(
            check("object.spec.template.containers[0].nam == 'x'")
                .contains("undefined field 'nam'")
        );
        assert!(
            check("object.spec.replicas.value > 1")
                .contains("type 'int' does not support field selection")
        );
        assert!(check("params.dta.max == '1'").contains("undefined field 'dta'"));
        // Each issue once, in order, joined by newlines.
        let two = check("object.foo == 1 ||\n  object.spec.bar == 2");
        assert_eq!(
            two.lines().filter(|l| l.starts_with("ERROR")).count(),
            2,
            "{two}"
        );
        assert!(
            two.contains("ERROR: <input>:2:14: undefined field 'bar'"),
            "{two}"
        );
        // A comprehension variable shadows nothing outside its scope.
        assert_eq!(
            check("[1].all(object, object > 0) && object.spec.replicas > 0"),
            ""
        );
    }

    #[test]
    fn without_schemas_nothing_is_reported() {
        let components = serde_json::Map::new();
        let schemas = Schemas {
            object: None,
            params: None,
            components: &components,
        };
        let program = crate::compile("object.whatever.x", crate::POLICY_VARIABLES).unwrap();
        assert_eq!(check_fields(&program, &schemas), "");
    }

    fn check_rule(rule: &str, node: &Value) -> String {
        let program = crate::compile(rule, &["self", "oldSelf"]).unwrap();
        check_rule_fields(&program, node).issues
    }

    fn rule_type(rule: &str, node: &Value) -> Option<&'static str> {
        let program = crate::compile(rule, &["self", "oldSelf"]).unwrap();
        check_rule_fields(&program, node).result
    }

    #[test]
    fn a_crd_rule_is_checked_against_its_node() {
        let node = json!({"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "port": {"x-kubernetes-int-or-string": true},
            "foo-bar": {"type": "string"},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                "properties": {"spec": {"type": "object"}}}}});
        for rule in [
            "self.replicas <= 5 && oldSelf.replicas >= 0",
            "has(self.replicas)",
            "self.items.all(i, i.name != '')",
            "self.labels.x == 'y'",
            "self.raw.anything.at.all",
            // int-or-string is dynamic in a CRD's declared types.
            "self.port.x == 1",
            // An escaped property name is not second-guessed.
            "self.foo__dash__bar == 'a'",
            // An embedded resource always has its type and object meta.
            "self.template.metadata.name == 'a' && self.template.kind == 'Pod'",
        ] {
            assert_eq!(check_rule(rule, &node), "", "{rule}");
        }
        assert_eq!(
            check_rule("self.replicsa > 1", &node),
            "ERROR: <input>:1:5: undefined field 'replicsa'\n | self.replicsa > 1\n | ....^"
        );
        assert_eq!(
            check_rule("self.items.exists(i, i.nmae == 'a')", &node),
            "ERROR: <input>:1:23: undefined field 'nmae'\n | self.items.exists(i, i.nmae == 'a')\n | ......................^"
        );
        assert_eq!(
            check_rule("has(oldSelf.missing)", &node),
            "ERROR: <input>:1:12: undefined field 'missing'\n | has(oldSelf.missing)\n | ...........^"
        );
        assert_eq!(
            check_rule("self.replicas.value == 1", &node),
            "ERROR: <input>:1:14: type 'int' does not support field selection\n | self.replicas.value == 1\n | .............^"
        );
        // A scalar node's own rule.
        assert_eq!(
            check_rule("self.size() > 1", &json!({"type": "string"})),
            ""
        );
        assert!(
            check_rule("self.x == 1", &json!({"type": "string"}))
                .contains("type 'string' does not support field selection")
        );
    }

    #[test]
    fn operators_on_known_types_are_checked_as_cel_go_does() {
        let node = json!({"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "ratio": {"type": "number"},
            "name": {"type": "string"},
            "on": {"type": "boolean"},
            "since": {"type": "string", "format": "date-time"},
            "ttl": {"type": "string", "format": "duration"},
            "port": {"x-kubernetes-int-or-string": true},
            "tags": {"type": "array", "items": {"type": "string"}},
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
        for rule in [
            "self.replicas + 1 > 2 && self.name + '-x' != 'a'",
            // Kubernetes compares numbers across types.
            "self.replicas < self.ratio && 1u <= self.replicas",
            "self.since + self.ttl > self.since && self.since - self.since == self.ttl",
            "self.tags + ['a'] == self.tags || size(self.tags) + 1 == 2",
            "self.port + 1 == 2 && self.raw.x + 'a' == 'b'",
            "!self.on ? self.replicas > 0 : self.name.startsWith('a')",
            "int(self.name) + 1 > 0 && string(self.replicas) + 'x' != ''",
            "'a+b' == self.name",
        ] {
            assert_eq!(check_rule(rule, &node), "", "{rule}");
            assert_eq!(rule_type(rule, &node), Some("bool"), "{rule}");
        }
        assert_eq!(
            check_rule("self.replicas + 'a' > 1", &node),
            "ERROR: <input>:1:15: found no matching overload for '_+_' applied to '(int, string)'\n \
             | self.replicas + 'a' > 1\n | ..............^"
        );
        assert_eq!(
            check_rule("self.name == 'x' && self.replicas", &node),
            "ERROR: <input>:1:18: found no matching overload for '_&&_' applied to '(bool, int)'\n \
             | self.name == 'x' && self.replicas\n | .................^"
        );
        assert!(
            check_rule("'a<b' != self.name && self.name < 3", &node)
                .starts_with("ERROR: <input>:1:33: found no matching overload for '_<_' applied to '(string, int)'"),
        );
        assert!(
            check_rule("self.since < '2024-01-01'", &node)
                .contains("applied to '(google.protobuf.Timestamp, string)'")
        );
        assert!(check_rule("self.on == 1", &node).contains("'_==_' applied to '(bool, int)'"));
        assert!(
            check_rule("self.replicas % 2.0 == 0", &node)
                .contains("'_%_' applied to '(int, double)'")
        );
        assert!(check_rule("!self.name", &node).contains("'!_' applied to '(string)'"));
        // A comprehension's item has its list's item type; its result is not followed.
        // Functions' receivers and arguments.
        assert_eq!(
            check_rule("self.name.startsWith('a') && self.replicas > 0", &node),
            ""
        );
        assert_eq!(
            check_rule("self.name.startsWith(1)", &node),
            "ERROR: <input>:1:21: found no matching overload for 'startsWith' applied to 'string.(int)'\n \
             | self.name.startsWith(1)\n | ....................^"
        );
        assert!(
            check_rule("self.replicas.endsWith('0')", &node)
                .contains("'endsWith' applied to 'int.(string)'")
        );
        assert!(
            check_rule("'size(' != self.name && size(self.replicas) > 1", &node).starts_with(
                "ERROR: <input>:1:29: found no matching overload for 'size' applied to '(int)'"
            )
        );
        assert!(check_rule("self.on.size() > 1", &node).contains("'size' applied to 'bool.()'"));
        // Lists, maps and values of unknown type are not judged.
        for rule in [
            "size(self.tags) > 0 && self.tags.size() < 9 && size(self.raw) > 0",
            "self.port.startsWith('a') && self.raw.x.contains(1) && sets.contains([1], [1])",
        ] {
            assert_eq!(check_rule(rule, &node), "", "{rule}");
        }
        assert_eq!(check_rule("self.tags.all(t, t + '!' != 'x')", &node), "");
        assert!(check_rule("self.tags.all(t, t + 1 != 'x')", &node).contains("'(string, int)'"));
        assert_eq!(rule_type("self.tags.all(t, t != 'x')", &node), None);
        // The rule's own type, for upstream's "must evaluate to a bool".
        assert_eq!(rule_type("self.replicas + 1", &node), Some("int"));
        assert_eq!(rule_type("self.name", &node), Some("string"));
        assert_eq!(rule_type("self.port", &node), None);
        assert_eq!(rule_type("self.tags.map(t, t)", &node), None);
    }
}
