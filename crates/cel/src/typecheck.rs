//! Field references checked against OpenAPI schemas: the part of upstream's
//! ValidatingAdmissionPolicy type checking (`plugin/policy/validating/typechecking.go`,
//! run by the validatingadmissionpolicy-status controller) and of its compilation of
//! a CRD's `x-kubernetes-validations` rules against their declared types
//! ([`check_rule_fields`]) that catches the common case, a misspelt or missing field
//! such as `object.spec.replica` or `self.replica`.
//!
//! The `cel` crate has no type checker, so this walks the parsed expression twice.
//! First for field references: selects (and `has()` tests) rooted at `object`,
//! `oldObject` or `params`, list and map indexing, and the iteration variables of
//! comprehensions are resolved through the schema's `properties`,
//! `additionalProperties`, `items`, `$ref` and `allOf`; reported, in cel-go's words:
//! `undefined field 'f'` and `type 'string' does not support field selection`. Then,
//! if that found nothing, as cel-go's checker types an expression: each node gets a
//! type (the schema's declared types, literals, comprehensions with their variables,
//! homogeneous list and map literals, optionals), each call is matched against the
//! declared overloads of the standard library and Kubernetes' libraries
//! (`check.rs`), and `found no matching overload for '_+_' applied to '(int,
//! string)'`, `expected type 'bool' but found 'int'` and the like are reported where
//! every type involved is known. The variables' types come from an [`Environment`]:
//! schemas, `dyn`, the authorizer's type, a policy's `variables` ([`crate::environments`]
//! builds the admission environments). What is not known here (a variable the
//! environment does not type, a function outside the table) matches anything and is
//! never named in an issue, so nothing cel-go accepts is refused. The position in
//! each message is that of the first occurrence of the field or operator in the
//! source (the parser keeps no positions), which is exact unless it repeats.

use std::collections::HashMap;

use kube_cel::cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue,
};
use serde_json::Value;

use crate::Program;
use crate::check::{self, Substitutions, Type, most_general};

/// A type whose struct types are schema nodes.
type SchemaType<'a> = Type<&'a Value>;

/// What a variable of an expression's environment is declared as.
#[derive(Debug, Clone, Copy)]
pub enum Declared<'a> {
    /// Of a schema's type: a kind's OpenAPI schema, or one of upstream's declared
    /// types (`crate::environments`).
    Schema(&'a Value),
    /// `dyn`: of a type known only when the expression runs.
    Dyn,
    /// `kubernetes.authorization.Authorizer`; `authorizer.requestResource` is then a
    /// `kubernetes.authorization.ResourceCheck`, as upstream declares both.
    Authorizer,
    /// A policy's `variables`: one field per variable compiled before, of its
    /// expression's type.
    Variables(&'a [(String, OutputType)]),
}

/// The variables an expression may use with their declared types (upstream's CEL
/// environment of the expression), and the `components/schemas` of the OpenAPI v3
/// document the schemas' `$ref`s point into. A variable not listed is of a type not
/// known here.
#[derive(Debug, Clone)]
pub struct Environment<'a> {
    pub variables: Vec<(&'static str, Declared<'a>)>,
    pub components: &'a serde_json::Map<String, Value>,
}

/// `components` of an environment whose schemas have no `$ref`s.
pub static NO_COMPONENTS: std::sync::LazyLock<serde_json::Map<String, Value>> =
    std::sync::LazyLock::new(serde_json::Map::new);

impl Environment<'_> {
    /// An environment declaring nothing: every variable's type is unknown.
    pub fn untyped() -> Environment<'static> {
        Environment {
            variables: Vec::new(),
            components: &NO_COMPONENTS,
        }
    }
}

impl<'a> Environment<'a> {
    fn declared(&self, name: &str) -> Option<Declared<'a>> {
        self.variables
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, d)| *d)
    }

    fn schema(&self, name: &str) -> Option<&'a Value> {
        match self.declared(name) {
            Some(Declared::Schema(s)) => Some(s),
            _ => None,
        }
    }
}

/// The type of an expression's result as a policy's `variables` keep it (upstream's
/// `convertCelTypeToDeclType`): scalars, and lists and maps of them; anything else is
/// `dyn`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputType(Type<check::NoObject>);

impl OutputType {
    /// The type of a variable whose expression did not compile.
    pub const DYN: OutputType = OutputType(Type::Dyn);

    pub(crate) fn of<O: check::Handle>(t: &Type<O>) -> OutputType {
        fn plain<O: check::Handle>(t: &Type<O>) -> Type<check::NoObject> {
            match t {
                Type::Bool => Type::Bool,
                Type::Int => Type::Int,
                Type::Uint => Type::Uint,
                Type::Double => Type::Double,
                Type::String => Type::String,
                Type::Bytes => Type::Bytes,
                Type::Null => Type::Null,
                Type::Duration => Type::Duration,
                Type::Timestamp => Type::Timestamp,
                Type::Unknown => Type::Unknown,
                Type::List(e) => Type::list(plain(e)),
                Type::Map(k, v) => Type::map(plain(k), plain(v)),
                _ => Type::Dyn,
            }
        }
        OutputType(plain(t))
    }
}

/// The field references of a CustomResourceDefinition's `x-kubernetes-validations`
/// rule (or its `messageExpression`) checked against the schema node it sits on,
/// bound to `self` and `oldSelf`: upstream compiles each rule against the node's
/// declared type when the CRD is written, so `self.replicsa` is refused there, not
/// found when an object is validated. As upstream's declared types do, an
/// `x-kubernetes-int-or-string` value is dynamic (any selection compiles), an
/// embedded resource (and the root) has `apiVersion`, `kind`, `metadata.name` and
/// `metadata.generateName` whether its schema lists them or not, and what an object
/// keeps under `x-kubernetes-preserve-unknown-fields` (or a property of no type) is
/// not accessible. With `optional_old_self` (the rule's
/// `optionalOldSelf`), `oldSelf` is an `optional_type` of the node's type. Issues as
/// [`check_fields`] gives them; then the expression is typed as cel-go's checker
/// types it, against the declared overloads of the standard library and Kubernetes'
/// libraries: `found no matching overload for '_+_' applied to '(int, string)'`,
/// `expected type 'bool' but found 'int'` and the like, where the types involved are
/// known.
pub fn check_rule_fields(program: &Program, node: &Value, optional_old_self: bool) -> RuleCheck {
    check_rule_on(program, node, optional_old_self, &RuleTypeNames::new(node))
}

/// The names of a CRD rule node's object types, made when a rule on the node first
/// needs them and shared by the node's rules, as upstream names them once per node
/// (`selfType<n>`, the number changed on every write of the CRD so that no rule can
/// depend on it).
#[derive(Debug)]
pub struct RuleTypeNames(check::TypeNames);

impl RuleTypeNames {
    pub fn new(node: &Value) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let embedded = node
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true);
        let metadata: Option<&'static Value> = embedded.then_some(&*OBJECT_META);
        RuleTypeNames(check::TypeNames::new(format!("selfType{nanos}"), metadata))
    }
}

/// [`check_rule_fields`] with the node's object type names made once for all its
/// rules.
pub fn check_rule_on(
    program: &Program,
    node: &Value,
    optional_old_self: bool,
    names: &RuleTypeNames,
) -> RuleCheck {
    let names = check::NamesInUse::new(&names.0);
    let env = Environment::untyped();
    let mut checker = Checker::new(&env, program.source(), Some(node));
    checker.object_names = Some(&names);
    checker.optional_old_self = optional_old_self;
    checker.schema_of(program.expression());
    let mut result = None;
    if checker.issues.is_empty() {
        checker.quiet = true;
        let t = checker.type_of(program.expression());
        if !matches!(t, Type::Dyn | Type::Unknown | Type::Error | Type::Var(_)) {
            if t.mentions_object() {
                checker.name_objects();
            }
            result = Some(t.to_string());
        }
    }
    RuleCheck {
        issues: checker.issues.join("\n"),
        result,
    }
}

/// The type issues of an expression whose variables are all of unknown type
/// (`1 + 'a'`, `size(x) + 'a'`, `[1, 'a']`): what cel-go refuses whatever the
/// variables hold. [`crate::compile`] runs it.
pub(crate) fn operator_issues(expression: &IdedExpr, source: &str) -> String {
    let env = Environment::untyped();
    let mut checker = Checker::new(&env, source, None);
    checker.quiet = true;
    checker.type_of(expression);
    checker.issues.join("\n")
}

/// What [`check_rule_fields`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCheck {
    /// The issues, in cel-go's form, joined by newlines; empty when none.
    pub issues: String,
    /// cel-go's name of the expression's type when it is known and not `dyn`
    /// (`bool`, `string`, `list(int)`, ...), for upstream's "must evaluate to" checks.
    pub result: Option<String>,
}

/// The metadata every resource has in CEL.
static OBJECT_META: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    serde_json::json!({"type": "object", "properties": {
        "name": {"type": "string"}, "generateName": {"type": "string"}}})
});

/// Whether a CRD schema node has a CEL type (upstream's `SchemaDeclType` is not nil):
/// an int-or-string, a scalar, an object, or a list or map of such; not a node of no
/// type (`x-kubernetes-preserve-unknown-fields` alone), nor a list or map of one.
fn has_cel_type(schema: &Value) -> bool {
    let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-int-or-string") {
        return true;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string" | "boolean" | "number" | "integer") => true,
        Some("array") => schema.get("items").is_some_and(has_cel_type),
        Some("object") => match schema.get("additionalProperties") {
            Some(values) if values.is_object() => has_cel_type(values),
            _ => true,
        },
        _ => false,
    }
}

/// The types of the `authorizer` variables (Kubernetes' authorizer library).
const AUTHORIZER: &str = "kubernetes.authorization.Authorizer";
const RESOURCE_CHECK: &str = "kubernetes.authorization.ResourceCheck";

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
        "_?_:_" => "?",
        _ => return None,
    })
}

/// A bound on `$ref`/`allOf` hops while resolving one schema (recursive types).
const MAX_REF_HOPS: usize = 16;

impl<'a> Environment<'a> {
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

/// The issues of `program` in `env`, each in cel-go's form (`ERROR: <input>:1:12:
/// undefined field 'foo'` and the source line with a caret), joined by newlines; empty
/// when none is found. Without field issues, the expression is typed (upstream's
/// policy type checking reports its type errors too).
pub fn check_fields(program: &Program, env: &Environment<'_>) -> String {
    check_expression(program, env).0
}

/// An expression compiled and typed in an [`Environment`].
#[derive(Debug)]
pub struct Typed {
    pub program: Program,
    /// cel-go's name of the result type (`bool`, `list(string)`, `dyn`,
    /// `kubernetes.UserInfo`, ...), `None` when it is not known here.
    pub result: Option<String>,
    /// The result type as a policy's `variables` keep it.
    pub output: OutputType,
}

/// Compiles `source` with the variables `env` declares (upstream's `env.Compile`):
/// it must parse, use only declared variables and functions, and type-check; the
/// error is upstream's `compilation failed: ERROR: <input>:...`.
pub fn compile_in(source: &str, env: &Environment<'_>) -> Result<Typed, crate::CompileError> {
    let names: Vec<&str> = env.variables.iter().map(|(n, _)| *n).collect();
    let program = crate::compile(source, &names)?;
    let (issues, result) = check_expression(&program, env);
    if !issues.is_empty() {
        return Err(crate::CompileError(format!("compilation failed: {issues}")));
    }
    Ok(Typed {
        program,
        result: result.declared_name(),
        output: OutputType::of(&result),
    })
}

/// [`check_fields`]' issues, and the expression's type when they are none.
pub(crate) fn check_expression<'a>(
    program: &Program,
    env: &Environment<'a>,
) -> (String, Type<&'a Value>) {
    let mut checker = Checker::new(env, program.source(), None);
    checker.schema_of(program.expression());
    let mut result = Type::Error;
    if checker.issues.is_empty() {
        checker.quiet = true;
        let t = checker.type_of(program.expression());
        result = checker.subs.substitute(&t);
    }
    (checker.issues.join("\n"), result)
}

struct Checker<'s, 'a> {
    env: &'s Environment<'a>,
    source: &'s str,
    issues: Vec<String>,
    /// Comprehension variables in scope, with their schema when known.
    bound: HashMap<String, Vec<Option<&'a Value>>>,
    /// A CRD rule's node, bound to `self` and `oldSelf` ([`check_rule_fields`]).
    rule_self: Option<&'a Value>,
    /// Set while [`Checker::type_of`] walks again what `schema_of` has reported on.
    quiet: bool,
    /// `oldSelf` is optional (a rule's `optionalOldSelf`).
    optional_old_self: bool,
    /// Type variables of [`Checker::type_of`].
    subs: Substitutions<&'a Value>,
    /// Comprehension variables in scope for [`Checker::type_of`], innermost last.
    locals: Vec<(String, SchemaType<'a>)>,
    /// How many `format` calls the expression being typed is inside of.
    inside_format: usize,
    /// A CRD rule's object type names, made when an issue may name one.
    object_names: Option<&'s check::NamesInUse<'s>>,
}

impl<'s, 'a> Checker<'s, 'a> {
    /// A checker of an expression written `source`; `rule_self` is a CRD rule's node.
    fn new(env: &'s Environment<'a>, source: &'s str, rule_self: Option<&'a Value>) -> Self {
        Checker {
            env,
            source,
            issues: Vec::new(),
            bound: HashMap::new(),
            rule_self,
            quiet: false,
            optional_old_self: false,
            subs: Substitutions::default(),
            locals: Vec::new(),
            inside_format: 0,
            object_names: None,
        }
    }

    /// Names a CRD rule's object types before an issue might name one (or the rule's
    /// result type is named).
    fn name_objects(&self) {
        if let (Some(names), Some(root)) = (self.object_names, self.rule_self) {
            names.install(root);
        }
    }

    /// Checks `e` and returns its schema, if it is a known part of a schema.
    fn schema_of(&mut self, e: &IdedExpr) -> Option<&'a Value> {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => None,
            Expr::Ident(name) => match self.bound.get(name).and_then(|v| v.last()) {
                Some(schema) => *schema,
                None => match name.as_str() {
                    "self" | "oldSelf" => self.rule_self,
                    name => self.env.schema(name),
                },
            },
            Expr::Select(s) => {
                if let Expr::Ident(name) = &s.operand.expr
                    && !self.bound.contains_key(name)
                    && let Some(Declared::Variables(variables)) = self.env.declared(name)
                {
                    if !variables.iter().any(|(n, _)| *n == s.field) {
                        self.issue(&s.field, &format!("undefined field '{}'", s.field));
                    }
                    return None;
                }
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
                    let container = self.env.resolve(args.first().copied().flatten()?);
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
                let range = self.schema_of(&c.iter_range).map(|r| self.env.resolve(r));
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
        let schema = self.env.resolve(schema);
        let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
        // A CRD rule sees only what the schema declares: the fields an object keeps
        // under `x-kubernetes-preserve-unknown-fields` are not in its CEL type, nor is
        // a property of no type (upstream's `SchemaDeclType`). A policy's object is
        // not judged there.
        let crd_rule = self.rule_self.is_some();
        if flag("x-kubernetes-preserve-unknown-fields") && !crd_rule {
            return None;
        }
        // A resource's root and an embedded resource always have their type and
        // `metadata.name` and `metadata.generateName`, and no other metadata unless
        // declared (upstream's `WithTypeAndObjectMeta`).
        if flag("x-kubernetes-embedded-resource")
            && matches!(field, "apiVersion" | "kind" | "metadata")
        {
            let declared = schema.pointer(&format!("/properties/{field}"));
            if field != "metadata" || !crd_rule {
                return declared;
            }
            let names = |m: &serde_json::Map<String, Value>| {
                m.contains_key("name") && m.contains_key("generateName")
            };
            return match declared.map(|d| d.get("properties").and_then(Value::as_object)) {
                None | Some(None) => Some(&OBJECT_META),
                Some(Some(properties)) if names(properties) => declared,
                // Declared members besides the ones every resource has: not followed.
                Some(Some(_)) => None,
            };
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            if let Some(p) = properties.get(field)
                && (!crd_rule || has_cel_type(p))
            {
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
        if flag("x-kubernetes-int-or-string")
            || schema.get("format").and_then(Value::as_str) == Some("int-or-string")
        {
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
            // An object that declares no properties has no fields in a CRD rule.
            Some("object") if crd_rule && !field.contains("__") => {
                self.issue(field, &format!("undefined field '{field}'"));
                None
            }
            _ => None,
        }
    }

    /// The type of `e` as cel-go's checker gives it, recording issues as cel-go words
    /// them where the types involved are known (see [`Type::is_reportable`]).
    fn type_of(&mut self, e: &IdedExpr) -> SchemaType<'a> {
        let t = match &e.expr {
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Bytes(_) => Type::Bytes,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::Int(_) => Type::Int,
                LiteralValue::Null => Type::Null,
                LiteralValue::String(_) => Type::String,
                LiteralValue::UInt(_) => Type::Uint,
            },
            Expr::Ident(name) => self.ident_type(name),
            Expr::Select(s) => {
                let selected = match self.declared_member(&s.operand, &s.field) {
                    Some(t) => t,
                    None => {
                        let operand = self.type_of(&s.operand);
                        self.select_type(&operand, &s.field, false)
                    }
                };
                if s.test { Type::Bool } else { selected }
            }
            Expr::List(l) => {
                let mut elements: Option<SchemaType<'a>> = None;
                for (i, x) in l.elements.iter().enumerate() {
                    let mut t = self.type_of(x);
                    if l.optional_indices.contains(&i) {
                        match t.optional_value() {
                            Some(v) => t = v.clone(),
                            None if matches!(t, Type::Dyn | Type::Error | Type::Unknown) => {}
                            None => {
                                let expected = Type::optional(t.clone());
                                self.mismatch(x, &expected, &t);
                            }
                        }
                    }
                    elements = Some(self.join(x, elements, t));
                }
                Type::list(elements.unwrap_or_else(|| self.subs.fresh()))
            }
            Expr::Map(m) => {
                let (mut keys, mut values) = (None, None);
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        let k = self.type_of(&entry.key);
                        keys = Some(self.join(&entry.key, keys, k));
                        let mut v = self.type_of(&entry.value);
                        if entry.optional
                            && let Some(inner) = v.optional_value()
                        {
                            v = inner.clone();
                        }
                        values = Some(self.join(&entry.value, values, v));
                    }
                }
                let key = keys.unwrap_or_else(|| self.subs.fresh());
                let value = values.unwrap_or_else(|| self.subs.fresh());
                Type::map(key, value)
            }
            Expr::Unspecified | Expr::Struct(_) => Type::Unknown,
            Expr::Comprehension(c) => self.comprehension_type(c),
            Expr::Call(call) => self.call_type(call),
        };
        self.subs.substitute(&t)
    }

    /// The type of a member of a variable the environment declares by member:
    /// `variables.name` (an issue if no variable has that name) and
    /// `authorizer.requestResource`. `None` for any other selection.
    fn declared_member(&mut self, operand: &IdedExpr, field: &str) -> Option<SchemaType<'a>> {
        let Expr::Ident(name) = &operand.expr else {
            return None;
        };
        if self.locals.iter().any(|(n, _)| n == name) {
            return None;
        }
        match self.env.declared(name)? {
            Declared::Variables(variables) => {
                Some(match variables.iter().find(|(n, _)| n == field) {
                    Some((_, t)) => self.subs.declared(&t.0),
                    None => {
                        self.issue(field, &format!("undefined field '{field}'"));
                        Type::Error
                    }
                })
            }
            Declared::Authorizer if field == "requestResource" => {
                Some(Type::Opaque(RESOURCE_CHECK, Vec::new()))
            }
            _ => None,
        }
    }

    fn ident_type(&mut self, name: &str) -> SchemaType<'a> {
        if let Some((_, t)) = self.locals.iter().rev().find(|(n, _)| n == name) {
            return t.clone();
        }
        let env = self.env;
        let resolve = |s: &'a Value| env.resolve(s);
        let schema = match name {
            "self" | "oldSelf" => self.rule_self,
            // Type names are values of kind `type(...)`.
            "int" | "uint" | "double" | "bool" | "string" | "bytes" | "null_type" => {
                let named = match name {
                    "int" => Type::Int,
                    "uint" => Type::Uint,
                    "double" => Type::Double,
                    "bool" => Type::Bool,
                    "string" => Type::String,
                    "bytes" => Type::Bytes,
                    _ => Type::Null,
                };
                return Type::Kind(Box::new(named));
            }
            _ => match self.env.declared(name) {
                Some(Declared::Schema(s)) => Some(s),
                Some(Declared::Dyn) => return Type::Dyn,
                Some(Declared::Authorizer) => return Type::Opaque(AUTHORIZER, Vec::new()),
                Some(Declared::Variables(_)) | None => None,
            },
        };
        match schema {
            Some(s) if name == "oldSelf" && self.optional_old_self => {
                Type::optional(Type::of_schema(s, &resolve))
            }
            Some(s) => Type::of_schema(s, &resolve),
            None => Type::Unknown,
        }
    }

    /// The type of `field` of a value of type `operand` (cel-go's `checkSelectField`);
    /// an optional operand, or `optional` (`?.`), makes the result optional.
    fn select_type(
        &mut self,
        operand: &SchemaType<'a>,
        field: &str,
        optional: bool,
    ) -> SchemaType<'a> {
        let (target, was_optional) = match operand.optional_value() {
            Some(v) => (v.clone(), true),
            None => (operand.clone(), false),
        };
        let selected = match &target {
            Type::Map(_, value) => (**value).clone(),
            Type::Object(schema) => {
                let env = self.env;
                let resolve = |s: &'a Value| env.resolve(s);
                match self.field(schema, field) {
                    Some(s) => Type::of_schema(s, &resolve),
                    None => self.root_member_type(schema, field),
                }
            }
            Type::Var(_) => {
                self.subs.assignable(&Type::Dyn, &target);
                Type::Dyn
            }
            Type::Dyn | Type::Error | Type::Unknown => target.clone(),
            other => {
                self.name_objects();
                if other.is_reportable() {
                    let message = format!("type '{other}' does not support field selection");
                    let at = self.field_position(field);
                    self.issue_at(at, &message);
                }
                Type::Error
            }
        };
        if was_optional || optional {
            Type::optional(selected)
        } else {
            selected
        }
    }

    /// `apiVersion` and `kind` of a resource root whose schema does not list them
    /// (strings, as upstream declares them); anything else not found is not known.
    fn root_member_type(&self, schema: &Value, field: &str) -> SchemaType<'a> {
        let embedded = schema
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true);
        match field {
            "apiVersion" | "kind" if embedded => Type::String,
            _ => Type::Unknown,
        }
    }

    /// Two element types of one literal list or map: the more general if they agree,
    /// an issue if they do not (Kubernetes enables homogeneous aggregate literals).
    fn join(
        &mut self,
        e: &IdedExpr,
        previous: Option<SchemaType<'a>>,
        current: SchemaType<'a>,
    ) -> SchemaType<'a> {
        let Some(previous) = previous else {
            return current;
        };
        if self.subs.assignable(&previous, &current) {
            return most_general(&previous, &current);
        }
        // cel-go joins them as `dyn` and its homogeneous-literal validator reports
        // them, except at any depth inside a `format` call's arguments.
        if self.inside_format == 0 {
            self.mismatch(e, &previous, &current);
        }
        Type::Dyn
    }

    /// cel-go's `expected type 'X' but found 'Y'` about `e`.
    fn mismatch(&mut self, e: &IdedExpr, expected: &SchemaType<'a>, found: &SchemaType<'a>) {
        let (expected, found) = (self.subs.substitute(expected), self.subs.substitute(found));
        self.name_objects();
        if expected.is_reportable() && found.is_reportable() {
            let message = format!("expected type '{expected}' but found '{found}'");
            let at = self.position_of(e);
            self.issue_at(at, &message);
        }
    }

    /// A comprehension's type (cel-go's `checkComprehension`): the range's element (or
    /// key) types its variables, the loop condition is a bool, the step has the
    /// accumulator's type.
    fn comprehension_type(&mut self, c: &ComprehensionExpr) -> SchemaType<'a> {
        let range = self.type_of(&c.iter_range);
        let accu = self.type_of(&c.accu_init);
        let two = c.iter_var2.is_some();
        let (first, second) = match &range {
            Type::List(e) if two => (Type::Int, (**e).clone()),
            Type::List(e) => ((**e).clone(), Type::Dyn),
            Type::Map(k, v) => ((**k).clone(), (**v).clone()),
            Type::Var(_) => {
                self.subs.assignable(&Type::Dyn, &range);
                (Type::Dyn, Type::Dyn)
            }
            Type::Dyn | Type::Error => (Type::Dyn, Type::Dyn),
            Type::Unknown => (Type::Unknown, Type::Unknown),
            Type::Object(_)
                if !{
                    self.name_objects();
                    range.is_reportable()
                } =>
            {
                (Type::Unknown, Type::Unknown)
            }
            other => {
                if other.is_reportable() {
                    let message = format!(
                        "expression of type '{other}' cannot be range of a comprehension \
                         (must be list, map, or dynamic)"
                    );
                    let at = self.position_of(&c.iter_range);
                    self.issue_at(at, &message);
                }
                (Type::Error, Type::Error)
            }
        };
        let scope = self.locals.len();
        self.locals.push((c.accu_var.clone(), accu.clone()));
        self.locals.push((c.iter_var.clone(), first));
        if let Some(v2) = &c.iter_var2 {
            self.locals.push((v2.clone(), second));
        }
        let condition = self.type_of(&c.loop_cond);
        if !self.subs.assignable(&Type::Bool, &condition) {
            self.mismatch(&c.loop_cond, &Type::Bool, &condition);
        }
        let step = self.type_of(&c.loop_step);
        if !self.subs.assignable(&accu, &step) {
            self.mismatch(&c.loop_step, &accu, &step);
        }
        self.locals.truncate(scope + 1);
        let result = self.type_of(&c.result);
        self.locals.truncate(scope);
        result
    }

    /// A call's type: the declared overloads its receiver and arguments match (cel-go's
    /// `resolveOverload`); an issue if none does and the types are all known.
    fn call_type(&mut self, call: &CallExpr) -> SchemaType<'a> {
        let name = call.func_name.as_str();
        if name == "_?._"
            && let [
                operand,
                IdedExpr {
                    expr: Expr::Literal(LiteralValue::String(field)),
                    ..
                },
            ] = call.args.as_slice()
        {
            let operand = self.type_of(operand);
            return self.select_type(&operand, field.inner(), true);
        }
        let (qualified, target) =
            check::function_of(call, |n| self.locals.iter().any(|(l, _)| l == n));
        let name = qualified.as_str();
        match name {
            "matches" => self.validate_regex_literal(call),
            "duration" | "timestamp" => self.validate_time_literal(name, call),
            _ => {}
        }
        let format = name == "format";
        self.inside_format += usize::from(format);
        let mut args: Vec<SchemaType<'a>> = Vec::with_capacity(call.args.len() + 1);
        if let Some(target) = target {
            args.push(self.type_of(target));
        }
        for a in &call.args {
            args.push(self.type_of(a));
        }
        self.inside_format -= usize::from(format);
        // cel-go checks each operand of `&&` and `||` against bool on its own.
        if matches!(name, "_&&_" | "_||_") {
            for (a, t) in call.args.iter().zip(&args) {
                if !self.subs.assignable(&Type::Bool, t) {
                    self.mismatch(a, &Type::Bool, t);
                }
            }
            return Type::Bool;
        }
        let member = target.is_some();
        let declared = check::overloads(name);
        if declared.is_empty() {
            return Type::Unknown;
        }
        let candidates = declared
            .iter()
            .filter(|o| o.member == member && o.params.len() == args.len());
        // With an operand of a type not known here, only a result every overload
        // shares is certain: picking an overload by a guess would word the issue of a
        // later call, not the one cel-go reports first.
        if args.iter().any(Type::contains_unknown) {
            let mut results = candidates.map(|o| &o.result);
            let first = results.next();
            return match first {
                Some(r) if r.is_reportable() && results.all(|o| o == r) => self.subs.declared(r),
                _ => Type::Unknown,
            };
        }
        if let Some(result) = check::resolve(&mut self.subs, name, member, &args) {
            return result;
        }
        let args: Vec<SchemaType<'a>> = args.iter().map(|a| self.subs.substitute(a)).collect();
        self.name_objects();
        if !args.iter().all(Type::is_reportable) {
            return Type::Unknown;
        }
        let names: Vec<String> = args.iter().map(ToString::to_string).collect();
        let (signature, at) = if member {
            let call_text = format!(".{name}(");
            let at = call_position(self.source, &call_text, false)
                .map_or(0, |i| i + call_text.len() - 1);
            (format!("{}.({})", names[0], names[1..].join(", ")), at)
        } else if let Some(token) = operator_token(name) {
            let at = outside_strings(self.source, token).unwrap_or(0);
            (format!("({})", names.join(", ")), at)
        } else {
            let call_text = format!("{name}(");
            let at =
                call_position(self.source, &call_text, true).map_or(0, |i| i + call_text.len() - 1);
            (format!("({})", names.join(", ")), at)
        };
        let message = format!("found no matching overload for '{name}' applied to '{signature}'");
        self.issue_at(at, &message);
        Type::Error
    }

    /// cel-go's regex literal validator (Kubernetes enables it since 1.29): a
    /// `matches` call whose first argument is a string literal that is not a regular
    /// expression is refused (`invalid matches argument`). As cel-go, the first
    /// argument is the pattern of `s.matches(p)` and the string of `matches(s, p)`.
    fn validate_regex_literal(&mut self, call: &CallExpr) {
        let Some(IdedExpr {
            expr: Expr::Literal(LiteralValue::String(pattern)),
            ..
        }) = call.args.first()
        else {
            return;
        };
        if regex::Regex::new(pattern.inner()).is_ok() {
            return;
        }
        let (written, global) = match call.target {
            Some(_) => (".matches(", false),
            None => ("matches(", true),
        };
        let at = call_position(self.source, written, global).map_or(0, |i| i + written.len());
        self.issue_at(at, "invalid matches argument");
    }

    /// cel-go's duration and timestamp literal validators (Kubernetes enables them
    /// since 1.29): `duration('1x')` or `timestamp('noon')` is refused at compile
    /// (`invalid duration argument`), as the call with its literal fails when run.
    fn validate_time_literal(&mut self, function: &str, call: &CallExpr) {
        if call.target.is_some() {
            return;
        }
        let [
            literal @ IdedExpr {
                expr: Expr::Literal(LiteralValue::String(_)),
                ..
            },
        ] = call.args.as_slice()
        else {
            return;
        };
        let alone = IdedExpr {
            id: 0,
            expr: Expr::Call(CallExpr {
                func_name: function.to_string(),
                target: None,
                args: vec![literal.clone()],
            }),
        };
        if crate::evaluates(&alone) {
            return;
        }
        let written = format!("{function}(");
        let at = call_position(self.source, &written, true).map_or(0, |i| i + written.len());
        self.issue_at(at, &format!("invalid {function} argument"));
    }

    /// Where `e` starts in the source, as far as its text tells (the parser keeps no
    /// positions): an identifier, a selected field or an operator; else the start.
    fn position_of(&self, e: &IdedExpr) -> usize {
        match &e.expr {
            Expr::Ident(name) => identifier_position(self.source, name).unwrap_or(0),
            Expr::Select(s) => self.field_position(&s.field),
            Expr::Call(c) => operator_token(&c.func_name)
                .and_then(|token| outside_strings(self.source, token))
                .or_else(|| c.args.first().map(|a| self.position_of(a)))
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// The position of the first `.field` of the source, as cel-go places an issue
    /// about a selection.
    fn field_position(&self, field: &str) -> usize {
        let needle = format!(".{field}");
        self.source
            .match_indices(&needle)
            .map(|(i, _)| i)
            .find(|&i| {
                !self.source[i + needle.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
            .unwrap_or(0)
    }

    /// Records `message` at the first `.field` of the source, as cel-go prints it.
    fn issue(&mut self, field: &str, message: &str) {
        if self.quiet {
            return;
        }
        let at = self.field_position(field);
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

/// The byte offset of the first occurrence of identifier `name` outside string
/// literals that is not part of a longer name or a selected field.
pub(crate) fn identifier_position(source: &str, name: &str) -> Option<usize> {
    identifier_places(source, name).next()
}

/// The byte offsets of every place `name` is written as an identifier (not a field
/// after `.`, not part of a longer name) outside string literals.
pub(crate) fn identifier_positions(source: &str, name: &str) -> Vec<usize> {
    identifier_places(source, name).collect()
}

fn identifier_places<'a>(source: &'a str, name: &'a str) -> impl Iterator<Item = usize> + 'a {
    let mut from = 0;
    std::iter::from_fn(move || {
        while let Some(i) = outside_strings(&source[from..], name).map(|i| i + from) {
            from = i + name.len();
            let before = source[..i].chars().next_back();
            let after = source[i + name.len()..].chars().next();
            let part_of_name = |c: Option<char>| c.is_some_and(|c| c == '_' || c.is_alphanumeric());
            if !part_of_name(before) && before != Some('.') && !part_of_name(after) {
                return Some(i);
            }
        }
        None
    })
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
        let env = Environment {
            variables: vec![
                ("object", Declared::Schema(&components["Deployment"])),
                ("oldObject", Declared::Schema(&components["Deployment"])),
                ("params", Declared::Schema(&components["ConfigMap"])),
            ],
            components: &components,
        };
        let program = crate::compile(expr, crate::POLICY_VARIABLES).unwrap();
        check_fields(&program, &env)
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
    fn a_policy_is_typed_against_its_schemas() {
        assert!(
            check("object.spec.replicas + 'a' > 1")
                .contains("found no matching overload for '_+_' applied to '(int, string)'")
        );
        assert!(
            check("object.spec.template.containers.all(c, c.image)")
                .contains("expected type 'bool' but found 'string'")
        );
        assert_eq!(
            check("object.spec.replicas + int(params.data.max) > 1 && object.spec.extra.x == 1"),
            ""
        );
    }

    #[test]
    fn without_schemas_nothing_is_reported() {
        let program = crate::compile("object.whatever.x", crate::POLICY_VARIABLES).unwrap();
        assert_eq!(check_fields(&program, &Environment::untyped()), "");
    }

    fn check_rule(rule: &str, node: &Value) -> String {
        let program = crate::compile(rule, &["self", "oldSelf"]).unwrap();
        check_rule_fields(&program, node, false).issues
    }

    fn rule_type(rule: &str, node: &Value) -> Option<String> {
        let program = crate::compile(rule, &["self", "oldSelf"]).unwrap();
        check_rule_fields(&program, node, false).result
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
            "has(self.raw) && self.raw == oldSelf.raw",
            // int-or-string is dynamic in a CRD's declared types.
            "self.port.x == 1",
            // An escaped property name is not second-guessed.
            "self.foo__dash__bar == 'a'",
            // An embedded resource always has its type and object meta.
            "self.template.metadata.name == 'a' && self.template.kind == 'Pod'",
        ] {
            assert_eq!(check_rule(rule, &node), "", "{rule}");
        }
        // What an object keeps under x-kubernetes-preserve-unknown-fields is not in
        // its CEL type, nor is a property of no type.
        assert_eq!(
            check_rule("self.raw.anything.at.all", &node),
            "ERROR: <input>:1:9: undefined field 'anything'\n | self.raw.anything.at.all\n | ........^"
        );
        let with_untyped = json!({"type": "object", "properties": {
            "blob": {"x-kubernetes-preserve-unknown-fields": true},
            "blobs": {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": true}},
            "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"known": {"type": "string"}}}}});
        for (rule, field) in [
            ("has(self.blob)", "blob"),
            ("self.blobs.size() > 0", "blobs"),
            ("self.open.unknown == 'a'", "unknown"),
        ] {
            assert!(
                check_rule(rule, &with_untyped).contains(&format!("undefined field '{field}'")),
                "{rule}"
            );
        }
        assert_eq!(check_rule("self.open.known == 'a'", &with_untyped), "");
        // A resource's metadata has its name and generateName, declared or not, and
        // nothing else that is not declared.
        let root = json!({"type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}}});
        assert_eq!(
            check_rule(
                "self.metadata.name == 'a' && self.metadata.generateName == ''",
                &root
            ),
            ""
        );
        assert!(
            check_rule("self.metadata.labels.size() > 0", &root)
                .contains("undefined field 'labels'")
        );
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
            "self.port + 1 == 2 && self.port + 'a' == 'b'",
            "!self.on ? self.replicas > 0 : self.name.startsWith('a')",
            "int(self.name) + 1 > 0 && string(self.replicas) + 'x' != ''",
            "'a+b' == self.name",
        ] {
            assert_eq!(check_rule(rule, &node), "", "{rule}");
            assert_eq!(rule_type(rule, &node), Some("bool".into()), "{rule}");
        }
        assert_eq!(
            check_rule("self.replicas + 'a' > 1", &node),
            "ERROR: <input>:1:15: found no matching overload for '_+_' applied to '(int, string)'\n \
             | self.replicas + 'a' > 1\n | ..............^"
        );
        assert_eq!(
            check_rule("self.name == 'x' && self.replicas", &node),
            "ERROR: <input>:1:25: expected type 'bool' but found 'int'\n \
             | self.name == 'x' && self.replicas\n | ........................^"
        );
        assert!(
            check_rule("'a<b' != self.name && self.name < 3", &node)
                .starts_with("ERROR: <input>:1:33: found no matching overload for '_<_' applied to '(string, int)'"),
        );
        assert!(
            check_rule("self.since < '2024-01-01'", &node)
                .contains("applied to '(timestamp, string)'")
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
            "self.port.startsWith('a') && self.port.contains('1') && sets.contains([1], [1])",
        ] {
            assert_eq!(check_rule(rule, &node), "", "{rule}");
        }
        assert_eq!(check_rule("self.tags.all(t, t + '!' != 'x')", &node), "");
        assert!(check_rule("self.tags.all(t, t + 1 != 'x')", &node).contains("'(string, int)'"));
        assert_eq!(
            rule_type("self.tags.all(t, t != 'x')", &node),
            Some("bool".into())
        );
        // The rule's own type, for upstream's "must evaluate to a bool".
        assert_eq!(rule_type("self.replicas + 1", &node), Some("int".into()));
        assert_eq!(rule_type("self.name", &node), Some("string".into()));
        assert_eq!(rule_type("self.port", &node), None);
        assert_eq!(
            rule_type("self.tags.map(t, t.size())", &node),
            Some("list(int)".into())
        );
    }

    /// The issues of a rule as a CRD's validation gives them: those found without the
    /// node's types when it is compiled, else those of the check against them.
    fn rule_issues(rule: &str, node: &Value, optional_old_self: bool) -> String {
        match crate::compile(rule, &["self", "oldSelf"]) {
            Ok(program) => check_rule_fields(&program, node, optional_old_self).issues,
            Err(e) => e.0.trim_start_matches("compilation failed: ").to_string(),
        }
    }

    fn check_optional_rule(rule: &str, node: &Value) -> String {
        rule_issues(rule, node, true)
    }

    /// The first issue's message, without its position and source lines.
    fn first_message(issues: &str) -> &str {
        issues
            .lines()
            .next()
            .and_then(|l| l.splitn(5, ':').nth(4))
            .map_or("", str::trim)
    }

    #[test]
    fn calls_are_typed_against_the_declared_overloads() {
        let node = json!({"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "name": {"type": "string", "maxLength": 10},
            "tags": {"type": "array", "items": {"type": "string"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "port": {"x-kubernetes-int-or-string": true},
            "o": {"type": "object", "properties": {"i": {"type": "integer"}, "s": {"type": "string"}}}}});
        for rule in [
            "self.name.lowerAscii() + 'x' == 'y' && self.name.split(',').size() > 1",
            "self.tags.map(t, t.size()).sum() > 1 && self.tags.filter(t, t != '').size() >= 0",
            "self.counts.all(k, k.startsWith('a')) && self.counts.exists(k, self.counts[k] > 1)",
            "duration(self.name) > duration('1s') && timestamp(self.name) > timestamp('2020-01-01T00:00:00Z')",
            "quantity(self.name).isGreaterThan(quantity('1')) && isQuantity(self.name)",
            "url(self.name).getHost() == 'a' && ip(self.name).family() == 4 && cidr(self.name).containsIP(self.name)",
            "self.tags.join(',') == 'a' && self.tags.isSorted() && self.tags.indexOf('a') > -1",
            "has(self.name) ? self.name.size() > 0 : true",
            "self.replicas in [1, 2] && self.name in self.tags && 'a' in self.counts",
            "[1, 2, 3].exists(x, x == self.replicas) && [self.replicas, 1].all(x, x > 0)",
            "self.port == 1 || self.port == 'a' || type(self.port) == string",
            "dyn(self.replicas) == 'a' || self.replicas == dyn('a')",
            "self.o.i > 1 && self.o.s.matches('^a') && self.replicas < 2.5",
            "[self.o, self.o].size() == 2 && {'a': self.replicas}.a == 1",
            "self.tags.map(t, [t]).all(l, l.size() == 1) && [[1], []].size() == 2",
            "optional.of(self.name).orValue('') == '' && optional.none().orValue(1) == 1",
            "self.name.format([1]) != '' && strings.quote(self.name) != ''",
            "optional.of(self.name).optMap(n, n.size()).orValue(0) > 1",
            "duration('1µs') < duration('1.5h') && timestamp('2024-01-01T00:00:00Z') < timestamp(self.name)",
            "type(self.port) == string ? self.port.endsWith('%') : self.port < 10",
            // A format call's arguments may mix types.
            "'%s has %d'.format([self.name, self.replicas]) != ''",
            // Two variables: a list's index and item, a map's key and value.
            "self.tags.all(i, t, i >= 0 && t.startsWith('a')) && self.counts.exists(k, v, k.size() > v)",
            "self.tags.transformList(i, t, t.size() + i).sum() > 0 && self.counts.transformMap(k, v, v * 2).size() > 0",
        ] {
            assert_eq!(check_rule(rule, &node), "", "{rule}");
        }
        for (rule, message) in [
            (
                "self.name.lowerAscii() + 1 == 2",
                "found no matching overload for '_+_' applied to '(string, int)'",
            ),
            (
                "self.tags.map(t, t.size()).sum() == 'x'",
                "found no matching overload for '_==_' applied to '(int, string)'",
            ),
            (
                "self.name.split(',') == 'a'",
                "found no matching overload for '_==_' applied to '(list(string), string)'",
            ),
            (
                "self.counts.all(k, k + 1 == 2)",
                "found no matching overload for '_+_' applied to '(string, int)'",
            ),
            (
                "self.replicas == 1.0",
                "found no matching overload for '_==_' applied to '(int, double)'",
            ),
            (
                "[1, 2].exists(x, x == 'a')",
                "found no matching overload for '_==_' applied to '(int, string)'",
            ),
            (
                "self.replicas in self.tags",
                "found no matching overload for '@in' applied to '(int, list(string))'",
            ),
            (
                "self.tags.all(t, t)",
                "expected type 'bool' but found 'string'",
            ),
            (
                "has(self.name) ? self.name : 1",
                "found no matching overload for '_?_:_' applied to '(bool, string, int)'",
            ),
            (
                "self.name.join(',') == 'a'",
                "found no matching overload for 'join' applied to 'string.(string)'",
            ),
            (
                "timestamp(self.name) < 1",
                "found no matching overload for '_<_' applied to '(timestamp, int)'",
            ),
            (
                "quantity(self.name).isGreaterThan(1)",
                "found no matching overload for 'isGreaterThan' applied to 'kubernetes.Quantity.(int)'",
            ),
            (
                "[1, 'a'].size() > 1",
                "expected type 'int' but found 'string'",
            ),
            (
                "self.replicas.all(x, x > 0)",
                "expression of type 'int' cannot be range of a comprehension (must be list, map, or dynamic)",
            ),
            (
                "self.name.size().x == 1",
                "type 'int' does not support field selection",
            ),
            (
                "self.tags.all(i, t, i == t)",
                "found no matching overload for '_==_' applied to '(int, string)'",
            ),
            (
                "self.counts.transformList(k, v, k + v).size() > 0",
                "found no matching overload for '_+_' applied to '(string, int)'",
            ),
            (
                "optional.of(self.name).optMap(n, n + 1).hasValue()",
                "found no matching overload for '_+_' applied to '(string, int)'",
            ),
            (
                "optional.of(self.name).optMap(1, 2).hasValue()",
                "optMap() variable name must be a simple identifier",
            ),
            ("self.name.matches('[a-')", "invalid matches argument"),
            (
                "duration('1x') > duration('1s')",
                "invalid duration argument",
            ),
            (
                "timestamp(self.name) > timestamp('noon')",
                "invalid timestamp argument",
            ),
            (
                "type(self.replicas) == 'int'",
                "found no matching overload for '_==_' applied to '(type(int), string)'",
            ),
            // Namespaced functions are the library's, not calls on a variable.
            (
                "sets.contains(self.tags, [1])",
                "found no matching overload for 'sets.contains' applied to '(list(string), list(int))'",
            ),
            (
                "optional.of(self.replicas).orValue('none') == 'none'",
                "found no matching overload for 'orValue' applied to 'optional_type(int).(string)'",
            ),
        ] {
            let issues = rule_issues(rule, &node, false);
            assert_eq!(first_message(&issues), message, "{rule}: {issues}");
        }

        // With optionalOldSelf, oldSelf is optional: its value must be unwrapped.
        for rule in [
            "self.replicas >= oldSelf.replicas.value()",
            "self.replicas >= oldSelf.replicas.orValue(1)",
            "oldSelf.hasValue() ? self.o.i >= oldSelf.o.i.value() : true",
            "self.o == oldSelf.o.value()",
        ] {
            assert_eq!(check_optional_rule(rule, &node), "", "{rule}");
        }
        assert_eq!(
            first_message(&check_optional_rule(
                "self.replicas >= oldSelf.replicas",
                &node
            )),
            "found no matching overload for '_>=_' applied to '(int, optional_type(int))'"
        );
        assert_eq!(
            first_message(&check_optional_rule(
                "self.replicas >= oldSelf.name.orValue(0)",
                &node
            )),
            "found no matching overload for 'orValue' applied to 'optional_type(string).(int)'"
        );
    }
}

#[cfg(test)]
mod object_type_tests {
    use super::*;
    use serde_json::json;

    fn first(rule: &str, node: &Value) -> String {
        let program = crate::compile(rule, &["self", "oldSelf"]).unwrap();
        let issues = check_rule_fields(&program, node, false).issues;
        issues.lines().next().unwrap_or("").to_string()
    }

    /// A CRD rule's object types are named as upstream names them (`selfType<n>` and
    /// the path below it, the number changed on every check), so what cel-go refuses
    /// about an object is refused here too.
    #[test]
    fn object_types_are_named_after_the_rule_node() {
        let node = json!({"type": "object", "properties": {
            "o": {"type": "object", "properties": {"i": {"type": "integer"}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "spec": {"type": "object", "properties": {"x": {"type": "integer"}}}}});
        let issue = first("self.o == 1", &node);
        let named = regex::Regex::new(
            r"found no matching overload for '_==_' applied to '\(selfType\d+\.o, int\)'$",
        )
        .unwrap();
        assert!(named.is_match(&issue), "{issue}");
        let issue = first("size(self.spec) > 0", &node);
        assert!(
            regex::Regex::new(r"applied to '\(selfType\d+\.spec\)'$")
                .unwrap()
                .is_match(&issue),
            "{issue}"
        );
        let issue = first("self.list[0] == 'a'", &node);
        assert!(issue.contains(".list.@idx, string)'"), "{issue}");
        let issue = first("self.spec.all(k, k == 'x')", &node);
        assert!(
            issue.contains("cannot be range of a comprehension (must be list, map, or dynamic)"),
            "{issue}"
        );
        // Comparisons of one object type, nulls and maps stay accepted.
        for ok in [
            "self.o == oldSelf.o",
            "self.o != null",
            "self.m.all(k, self.m[k] != '')",
            "has(self.o.i) && self.o.i > 0",
            "self.list.all(e, e.a != '')",
        ] {
            let program = crate::compile(ok, &["self", "oldSelf"]).unwrap();
            assert_eq!(check_rule_fields(&program, &node, false).issues, "", "{ok}");
        }
    }
}
