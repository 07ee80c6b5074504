//! CEL types, the declared overloads of the functions an expression may call, and
//! cel-go's rules for matching the one against the other (`checker/types.go`:
//! assignability with type parameters, the most general of two types): what
//! [`crate::typecheck`] needs to type an expression as cel-go's checker does.
//!
//! A type may be [`Type::Unknown`]: what this crate cannot tell (a variable without a
//! schema, a function outside [`decls::DECLARATIONS`]). It matches anything, as `dyn`
//! does, but an issue whose types include it is never reported: cel-go, which knows
//! the type, may accept what a guess would refuse.

mod decls;

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use kube_cel::cel::common::ast::{CallExpr, Expr, IdedExpr};
use serde_json::Value;

/// What stands for a struct type in [`Type::Object`]: its schema node for the checker,
/// its declared type for the estimator. Two are the same type if they are the same
/// node.
pub(crate) trait Handle: Copy + fmt::Debug {
    fn same(self, other: Self) -> bool;

    /// The struct type's name when it has one cel-go would print: upstream's declared
    /// types (`kubernetes.AdmissionRequest`), and a CRD rule's object types once its
    /// check has named them ([`TypeNames`]: `selfType123.spec`).
    fn name(&self) -> Option<String>;
}

thread_local! {
    /// The names of the object types of the schema a check is running against, by the
    /// address of their schema nodes ([`NamesInUse`]).
    static OBJECT_NAMES: std::cell::RefCell<Option<std::sync::Arc<HashMap<usize, String>>>> =
        const { std::cell::RefCell::new(None) };
}

/// The names of a CRD rule node's object types, as upstream names its declared types:
/// `root_name` for the node, then `.field` for a property, `.@idx` for a list's items
/// and `.@elem` for a map's values (`DeclType.MaybeAssignTypeName`). Naming walks the
/// whole schema below the node, so it is done once per node, and only when a check
/// first needs a name (an issue is about to be reported).
#[derive(Debug)]
pub(crate) struct TypeNames {
    root_name: String,
    /// `root_name.metadata` for the metadata every resource has.
    metadata: Option<&'static Value>,
    names: std::sync::OnceLock<std::sync::Arc<HashMap<usize, String>>>,
}

impl TypeNames {
    pub(crate) fn new(root_name: String, metadata: Option<&'static Value>) -> Self {
        TypeNames {
            root_name,
            metadata,
            names: std::sync::OnceLock::new(),
        }
    }

    fn of(&self, root: &Value) -> std::sync::Arc<HashMap<usize, String>> {
        self.names
            .get_or_init(|| {
                fn walk(
                    node: &Value,
                    name: &str,
                    names: &mut HashMap<usize, String>,
                    depth: usize,
                ) {
                    if depth > 128 {
                        return;
                    }
                    names.insert(std::ptr::from_ref(node) as usize, name.to_string());
                    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
                        for (field, child) in properties {
                            walk(child, &format!("{name}.{field}"), names, depth + 1);
                        }
                    }
                    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
                        walk(items, &format!("{name}.@idx"), names, depth + 1);
                    }
                    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object())
                    {
                        walk(values, &format!("{name}.@elem"), names, depth + 1);
                    }
                }
                let mut names = HashMap::new();
                walk(root, &self.root_name, &mut names, 0);
                if let Some(metadata) = self.metadata {
                    let address = std::ptr::from_ref(metadata) as usize;
                    names.insert(address, format!("{}.metadata", self.root_name));
                }
                std::sync::Arc::new(names)
            })
            .clone()
    }
}

/// [`TypeNames`] in use by one check of a rule on `root`: installed for
/// [`Handle::name`] when first needed, removed when dropped.
pub(crate) struct NamesInUse<'n> {
    names: &'n TypeNames,
    installed: std::cell::Cell<bool>,
}

impl<'n> NamesInUse<'n> {
    pub(crate) fn new(names: &'n TypeNames) -> Self {
        NamesInUse {
            names,
            installed: std::cell::Cell::new(false),
        }
    }

    /// Makes the names of `root`'s object types what [`Handle::name`] gives.
    pub(crate) fn install(&self, root: &Value) {
        if self.installed.replace(true) {
            return;
        }
        let names = self.names.of(root);
        OBJECT_NAMES.with(|n| *n.borrow_mut() = Some(names));
    }
}

impl Drop for NamesInUse<'_> {
    fn drop(&mut self) {
        if self.installed.get() {
            OBJECT_NAMES.with(|n| *n.borrow_mut() = None);
        }
    }
}

/// The key of a schema node that names its struct type ([`Handle::name`]); only the
/// environments' own schemas (`crate::environments`) carry it.
pub(crate) const TYPE_NAME_KEY: &str = "x-ferrokube-cel-type-name";

impl Handle for &Value {
    fn same(self, other: Self) -> bool {
        std::ptr::eq(self, other)
    }

    fn name(&self) -> Option<String> {
        if let Some(name) = self.get(TYPE_NAME_KEY).and_then(Value::as_str) {
            return Some(name.to_string());
        }
        let address = std::ptr::from_ref(*self) as usize;
        OBJECT_NAMES.with(|n| n.borrow().as_ref()?.get(&address).cloned())
    }
}

/// The object handle of the declarations' types, which name no struct type.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NoObject {}

impl Handle for NoObject {
    fn same(self, _: Self) -> bool {
        match self {}
    }

    fn name(&self) -> Option<String> {
        match *self {}
    }
}

/// A CEL type. `Object` is a schema node with declared properties (cel-go's struct
/// type of a Kubernetes schema); `Var` a type variable of one check, `Param` a type
/// parameter of a declaration.
#[derive(Clone, Debug)]
pub(crate) enum Type<O> {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    List(Box<Type<O>>),
    Map(Box<Type<O>>, Box<Type<O>>),
    /// `type(T)`: the type of a type value (`type(1)` is an `int`, of kind `type(int)`).
    Kind(Box<Type<O>>),
    /// `optional_type(T)` and the libraries' opaque types (`net.IP`, ...).
    Opaque(&'static str, Vec<Type<O>>),
    Object(O),
    Param(&'static str),
    Var(usize),
    Dyn,
    /// A failed check's type: matches anything, so one mistake is reported once.
    Error,
    Unknown,
}

impl<O: Handle> Type<O> {
    pub(crate) fn list(element: Type<O>) -> Type<O> {
        Type::List(Box::new(element))
    }

    pub(crate) fn map(key: Type<O>, value: Type<O>) -> Type<O> {
        Type::Map(Box::new(key), Box::new(value))
    }

    pub(crate) fn optional(value: Type<O>) -> Type<O> {
        Type::Opaque("optional_type", vec![value])
    }

    /// The value type of an `optional_type(T)`.
    pub(crate) fn optional_value(&self) -> Option<&Type<O>> {
        match self {
            Type::Opaque("optional_type", params) => params.first(),
            _ => None,
        }
    }

    /// Whether an issue naming this type may be reported: it holds nothing this crate
    /// guessed or cannot name as cel-go does (a schema's object type is named only in
    /// a CRD rule, [`TypeNames`]; a policy's kinds' types are not).
    pub(crate) fn is_reportable(&self) -> bool {
        match self {
            Type::Object(o) => o.name().is_some(),
            Type::Unknown | Type::Var(_) | Type::Param(_) => false,
            Type::List(e) | Type::Kind(e) => e.is_reportable(),
            Type::Map(k, v) => k.is_reportable() && v.is_reportable(),
            Type::Opaque(_, params) => params.iter().all(Type::is_reportable),
            _ => true,
        }
    }

    /// Whether a struct type is part of the type.
    pub(crate) fn mentions_object(&self) -> bool {
        match self {
            Type::Object(_) => true,
            Type::List(e) | Type::Kind(e) => e.mentions_object(),
            Type::Map(k, v) => k.mentions_object() || v.mentions_object(),
            Type::Opaque(_, params) => params.iter().any(Type::mentions_object),
            _ => false,
        }
    }

    /// Whether this crate's guess, [`Type::Unknown`], is part of the type.
    pub(crate) fn contains_unknown(&self) -> bool {
        match self {
            Type::Unknown => true,
            Type::List(e) | Type::Kind(e) => e.contains_unknown(),
            Type::Map(k, v) => k.contains_unknown() || v.contains_unknown(),
            Type::Opaque(_, params) => params.iter().any(Type::contains_unknown),
            _ => false,
        }
    }

    /// cel-go's `Type.String()`, the name upstream gives an expression's result type
    /// (`must evaluate to bool but got google.protobuf.Timestamp`), with type
    /// variables left unbound read as `dyn` (cel-go's final substitution); `None` when
    /// the type is not known or not named here.
    pub(crate) fn declared_name(&self) -> Option<String> {
        let joined = |params: &[Type<O>]| -> Option<String> {
            let names: Option<Vec<String>> = params.iter().map(Type::declared_name).collect();
            Some(names?.join(", "))
        };
        Some(match self {
            Type::Null => "null_type".to_string(),
            Type::Duration => "google.protobuf.Duration".to_string(),
            Type::Timestamp => "google.protobuf.Timestamp".to_string(),
            Type::List(e) => format!("list({})", e.declared_name()?),
            Type::Map(k, v) => format!("map({}, {})", k.declared_name()?, v.declared_name()?),
            Type::Kind(t) => format!("type({})", t.declared_name()?),
            Type::Opaque(name, params) if !params.is_empty() => {
                format!("{name}({})", joined(params)?)
            }
            Type::Var(_) => "dyn".to_string(),
            Type::Object(o) => o.name()?,
            Type::Unknown | Type::Error | Type::Param(_) => return None,
            other => other.to_string(),
        })
    }

    fn is_dyn_like(&self) -> bool {
        matches!(self, Type::Dyn | Type::Error | Type::Unknown)
    }
}

/// Types are equal as cel-go's `IsExactType`: objects when they are the same node.
impl<O: Handle> PartialEq for Type<O> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Type::List(a), Type::List(b)) | (Type::Kind(a), Type::Kind(b)) => a == b,
            (Type::Map(k1, v1), Type::Map(k2, v2)) => k1 == k2 && v1 == v2,
            (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => n1 == n2 && p1 == p2,
            (Type::Object(a), Type::Object(b)) => a.same(*b),
            (Type::Param(a), Type::Param(b)) => a == b,
            (Type::Var(a), Type::Var(b)) => a == b,
            (a, b) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
                    && !matches!(
                        a,
                        Type::List(_)
                            | Type::Kind(_)
                            | Type::Map(..)
                            | Type::Opaque(..)
                            | Type::Object(_)
                            | Type::Param(_)
                            | Type::Var(_)
                    )
            }
        }
    }
}

impl<'a> Type<&'a Value> {
    /// The declared type of a value of OpenAPI `schema` (upstream's `SchemaDeclType`),
    /// `$ref`s already followed by the caller's `resolve`.
    pub(crate) fn of_schema(schema: &'a Value, resolve: &dyn Fn(&'a Value) -> &'a Value) -> Self {
        let schema = resolve(schema);
        let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
        // Built-in types' OpenAPI marks an int-or-string by its format, a CRD's by the
        // extension; upstream reads both.
        if flag("x-kubernetes-int-or-string")
            || schema.get("format").and_then(Value::as_str) == Some("int-or-string")
        {
            return Type::Dyn;
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("integer") => Type::Int,
            Some("number") => Type::Double,
            Some("boolean") => Type::Bool,
            Some("array") => Type::list(
                schema
                    .get("items")
                    .map_or(Type::Dyn, |items| Type::of_schema(items, resolve)),
            ),
            Some("object") => {
                if let Some(values) = schema.get("additionalProperties")
                    && values.is_object()
                    && schema.get("properties").is_none()
                {
                    Type::map(Type::String, Type::of_schema(values, resolve))
                } else if flag("x-kubernetes-preserve-unknown-fields")
                    && schema.get("properties").is_none()
                {
                    Type::Dyn
                } else {
                    Type::Object(schema)
                }
            }
            Some("string") => match schema.get("format").and_then(Value::as_str) {
                Some("byte") => Type::Bytes,
                Some("duration") => Type::Duration,
                Some("date" | "date-time") => Type::Timestamp,
                _ => Type::String,
            },
            _ if flag("x-kubernetes-embedded-resource") || schema.get("properties").is_some() => {
                Type::Object(schema)
            }
            _ => Type::Dyn,
        }
    }
}

/// cel-go's `FormatCELType`.
impl<O: Handle> fmt::Display for Type<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let joined = |params: &[Type<O>]| {
            params
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Double => f.write_str("double"),
            Type::String => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::Null => f.write_str("null"),
            Type::Duration => f.write_str("duration"),
            Type::Timestamp => f.write_str("timestamp"),
            Type::List(e) => write!(f, "list({e})"),
            Type::Map(k, v) => write!(f, "map({k}, {v})"),
            Type::Kind(t) => write!(f, "type({t})"),
            Type::Opaque(name, params) if params.is_empty() => f.write_str(name),
            Type::Opaque(name, params) => write!(f, "{name}({})", joined(params)),
            Type::Object(o) => f.write_str(o.name().as_deref().unwrap_or("object")),
            Type::Param(name) => f.write_str(name),
            Type::Var(i) => write!(f, "_var{i}"),
            Type::Dyn | Type::Unknown => f.write_str("dyn"),
            Type::Error => f.write_str("!error!"),
        }
    }
}

/// The prefixes of namespaced functions: the parser reads `sets.contains(a, b)` as a
/// call of `contains` on a variable `sets`.
pub(crate) const NAMESPACES: &[&str] = &[
    "sets",
    "math",
    "strings",
    "lists",
    "base64",
    "format",
    "ip",
    "optional",
    "jsonpatch",
];

/// The function `call` names and its receiver: `sets.contains(a, b)` is the global
/// `sets.contains`, unless `sets` is a variable in scope (`is_variable`).
pub(crate) fn function_of(
    call: &CallExpr,
    is_variable: impl Fn(&str) -> bool,
) -> (String, Option<&IdedExpr>) {
    if let Some(t) = call.target.as_deref()
        && let Expr::Ident(prefix) = &t.expr
        && NAMESPACES.contains(&prefix.as_str())
        && !is_variable(prefix)
    {
        return (format!("{prefix}.{}", call.func_name), None);
    }
    (call.func_name.clone(), call.target.as_deref())
}

/// One declared overload.
#[derive(Debug)]
pub(crate) struct Overload {
    /// Called on a receiver (`'a'.size()`), which is then the first parameter.
    pub member: bool,
    pub params: Vec<Type<NoObject>>,
    pub result: Type<NoObject>,
}

/// The overloads of `function`, empty when it is not declared in the table.
pub(crate) fn overloads(function: &str) -> &'static [Overload] {
    static TABLE: LazyLock<HashMap<&'static str, Vec<Overload>>> =
        LazyLock::new(|| parse_declarations(decls::DECLARATIONS));
    TABLE.get(function).map_or(&[], Vec::as_slice)
}

/// The result type of a call of `function` (on a receiver, the first of `args`, if
/// `member`) as cel-go's `resolveOverload` finds it: the result of the one overload
/// `args` match, `dyn` if several match with different results. `Some(Unknown)` when
/// the function is not in the table, or when the result rests on a guess (several
/// overloads, or a type parameter, matched by an unknown argument); `None` when no
/// overload matches.
pub(crate) fn resolve<O: Handle>(
    subs: &mut Substitutions<O>,
    function: &str,
    member: bool,
    args: &[Type<O>],
) -> Option<Type<O>> {
    let declared = overloads(function);
    if declared.is_empty() {
        return Some(Type::Unknown);
    }
    let guessed = args.iter().any(Type::contains_unknown);
    let mut result: Option<Type<O>> = None;
    for overload in declared {
        if overload.member != member || overload.params.len() != args.len() {
            continue;
        }
        let (params, returns) = subs.instantiate(overload);
        if subs.all_assignable(&params, args) {
            let returns = subs.substitute(&returns);
            result = Some(match result {
                None => returns,
                Some(r) if matches!(r, Type::Dyn | Type::Unknown) || r == returns => r,
                Some(_) if guessed => Type::Unknown,
                Some(_) => Type::Dyn,
            });
        }
    }
    let result = result?;
    if guessed && subs.has_unbound(&result) {
        return Some(Type::Unknown);
    }
    Some(result)
}

/// Parses the declaration table: `name (T, ...) -> R` or `name T0.(T, ...) -> R`.
fn parse_declarations(table: &'static str) -> HashMap<&'static str, Vec<Overload>> {
    let mut functions: HashMap<&'static str, Vec<Overload>> = HashMap::new();
    for line in table.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // A line that does not parse declares nothing (the table's test parses each).
        if let Some((name, overload)) = parse_overload(line) {
            functions.entry(name).or_default().push(overload);
        }
    }
    functions
}

fn parse_overload(line: &'static str) -> Option<(&'static str, Overload)> {
    let line = line.split(" #").next()?.trim();
    let (name, signature) = line.split_once(' ')?;
    let (call, result) = signature.rsplit_once(" -> ")?;
    let open = call.find(".(").map(|i| i + 1).or_else(|| call.find('('))?;
    let member = call[..open].ends_with('.');
    let mut params = Vec::new();
    if member {
        params.push(parse_type(call[..open - 1].trim())?);
    } else if open != 0 {
        return None;
    }
    let args = call[open..].strip_prefix('(')?.strip_suffix(')')?;
    for arg in split_top_level(args) {
        params.push(parse_type(arg)?);
    }
    Some((
        name,
        Overload {
            member,
            params,
            result: parse_type(result.trim())?,
        },
    ))
}

/// `a, list(b), map(c, d)` split at the commas outside parentheses.
fn split_top_level(s: &'static str) -> Vec<&'static str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        parts.push(s[start..].trim());
    }
    parts
}

fn parse_type(s: &'static str) -> Option<Type<NoObject>> {
    let (name, params) = match s.find('(') {
        Some(i) => (
            &s[..i],
            split_top_level(s[i + 1..].strip_suffix(')')?)
                .into_iter()
                .map(parse_type)
                .collect::<Option<Vec<_>>>()?,
        ),
        None => (s, Vec::new()),
    };
    let one = |params: &[Type<NoObject>]| params.first().cloned();
    Some(match (name, params.len()) {
        ("bool", 0) => Type::Bool,
        ("int", 0) => Type::Int,
        ("uint", 0) => Type::Uint,
        ("double", 0) => Type::Double,
        ("string", 0) => Type::String,
        ("bytes", 0) => Type::Bytes,
        ("null_type" | "null", 0) => Type::Null,
        ("dyn", 0) => Type::Dyn,
        ("google.protobuf.Timestamp" | "timestamp", 0) => Type::Timestamp,
        ("google.protobuf.Duration" | "duration", 0) => Type::Duration,
        ("list", 1) => Type::list(one(&params)?),
        ("map", 2) => Type::map(params[0].clone(), params[1].clone()),
        ("type", 1) => Type::Kind(Box::new(one(&params)?)),
        (p, 0) if p.len() == 1 && p.chars().all(|c| c.is_ascii_uppercase()) => Type::Param(p),
        (opaque, _) => Type::Opaque(opaque, params),
    })
}

/// Type variables and what they stand for, during one check (cel-go's `mapping`).
pub(crate) struct Substitutions<O> {
    bound: Vec<Option<Type<O>>>,
    /// The bindings an assignability test in progress has replaced, to undo them if
    /// it fails (copying every binding per test would make a check quadratic).
    trail: Vec<(usize, Option<Type<O>>)>,
}

impl<O> Default for Substitutions<O> {
    fn default() -> Self {
        Substitutions {
            bound: Vec::new(),
            trail: Vec::new(),
        }
    }
}

impl<O: Handle> Substitutions<O> {
    pub(crate) fn fresh(&mut self) -> Type<O> {
        self.bound.push(None);
        Type::Var(self.bound.len() - 1)
    }

    /// `overload`'s parameter and result types with fresh variables for its type
    /// parameters.
    pub(crate) fn instantiate(&mut self, overload: &Overload) -> (Vec<Type<O>>, Type<O>) {
        let mut vars: Vec<(&'static str, Type<O>)> = Vec::new();
        let mut with_vars = |t: &Type<NoObject>| self.replace_params(t, &mut vars);
        let params = overload.params.iter().map(&mut with_vars).collect();
        let result = with_vars(&overload.result);
        (params, result)
    }

    /// A declared type, with fresh variables for its type parameters.
    pub(crate) fn declared(&mut self, t: &Type<NoObject>) -> Type<O> {
        self.replace_params(t, &mut Vec::new())
    }

    fn replace_params(
        &mut self,
        t: &Type<NoObject>,
        vars: &mut Vec<(&'static str, Type<O>)>,
    ) -> Type<O> {
        match t {
            Type::Param(name) => match vars.iter().find(|(n, _)| n == name) {
                Some((_, v)) => v.clone(),
                None => {
                    let v = self.fresh();
                    vars.push((name, v.clone()));
                    v
                }
            },
            Type::List(e) => Type::list(self.replace_params(e, vars)),
            Type::Map(k, v) => {
                Type::map(self.replace_params(k, vars), self.replace_params(v, vars))
            }
            Type::Kind(e) => Type::Kind(Box::new(self.replace_params(e, vars))),
            Type::Opaque(name, params) => Type::Opaque(
                name,
                params
                    .iter()
                    .map(|p| self.replace_params(p, vars))
                    .collect(),
            ),
            Type::Bool => Type::Bool,
            Type::Int => Type::Int,
            Type::Uint => Type::Uint,
            Type::Double => Type::Double,
            Type::String => Type::String,
            Type::Bytes => Type::Bytes,
            Type::Null => Type::Null,
            Type::Duration => Type::Duration,
            Type::Timestamp => Type::Timestamp,
            Type::Var(v) => Type::Var(*v),
            Type::Dyn => Type::Dyn,
            Type::Error => Type::Error,
            Type::Unknown => Type::Unknown,
            Type::Object(never) => match *never {},
        }
    }

    /// `t` with every bound variable replaced by what it stands for; unbound ones are
    /// left as they are (cel-go's `substitute` without `typeParamToDyn`).
    pub(crate) fn substitute(&self, t: &Type<O>) -> Type<O> {
        match t {
            Type::Var(i) => match &self.bound[*i] {
                Some(b) => self.substitute(b),
                None => t.clone(),
            },
            Type::List(e) => Type::list(self.substitute(e)),
            Type::Map(k, v) => Type::map(self.substitute(k), self.substitute(v)),
            Type::Kind(e) => Type::Kind(Box::new(self.substitute(e))),
            Type::Opaque(name, params) => {
                Type::Opaque(name, params.iter().map(|p| self.substitute(p)).collect())
            }
            other => other.clone(),
        }
    }

    /// Whether a value of type `from` may be used where `to` is expected, binding
    /// type variables as needed; the bindings are kept only if it may (cel-go's
    /// `isAssignable`).
    pub(crate) fn assignable(&mut self, to: &Type<O>, from: &Type<O>) -> bool {
        let mark = self.trail.len();
        let ok = self.assign(to, from);
        self.settle(mark, ok);
        ok
    }

    /// [`Self::assignable`] for lists of types, all or nothing.
    pub(crate) fn all_assignable(&mut self, to: &[Type<O>], from: &[Type<O>]) -> bool {
        let mark = self.trail.len();
        let ok = to.len() == from.len() && to.iter().zip(from).all(|(t, f)| self.assign(t, f));
        self.settle(mark, ok);
        ok
    }

    /// Keeps the bindings made since `mark` if the test succeeded, else undoes them
    /// (tests do not nest: `assign` never starts one).
    fn settle(&mut self, mark: usize, keep: bool) {
        if keep {
            self.trail.clear();
            return;
        }
        while self.trail.len() > mark {
            if let Some((v, previous)) = self.trail.pop() {
                self.bound[v] = previous;
            }
        }
    }

    fn bind(&mut self, v: usize, t: Type<O>) {
        let previous = self.bound[v].replace(t);
        self.trail.push((v, previous));
    }

    fn assign(&mut self, to: &Type<O>, from: &Type<O>) -> bool {
        if let Type::Var(v) = from
            && let Some(ok) = self.assign_var(*v, to)
        {
            return ok;
        }
        if let Type::Var(v) = to {
            return self.assign_var(*v, from).unwrap_or(false);
        }
        if to.is_dyn_like() || from.is_dyn_like() {
            return true;
        }
        match (to, from) {
            (Type::Null, other) | (other, Type::Null) => nullable(other),
            (Type::List(a), Type::List(b)) => self.assign(a, b),
            (Type::Map(k1, v1), Type::Map(k2, v2)) => self.assign(k1, k2) && self.assign(v1, v2),
            (Type::Kind(_), Type::Kind(_)) => true,
            (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
                n1 == n2
                    && p1.len() == p2.len()
                    && p1.iter().zip(p2).all(|(a, b)| self.assign(a, b))
            }
            // Object types are named after their schema node upstream; which two nodes
            // share a name is not followed here.
            (Type::Object(_), Type::Object(_)) => true,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }

    /// Assigns `other` to or from variable `v` (cel-go's `isValidTypeSubstitution`):
    /// an unbound variable is bound, a bound one must agree and widens to the more
    /// general type. `None` when `v` is unbound and `other` mentions it.
    fn assign_var(&mut self, v: usize, other: &Type<O>) -> Option<bool> {
        if let Type::Var(o) = other
            && self.root(*o) == self.root(v)
        {
            return Some(true);
        }
        match self.bound[v].clone() {
            Some(current) => {
                if !self.assign(other, &current) {
                    return Some(false);
                }
                let general = most_general(other, &self.substitute(&current));
                if !self.mentions(v, &general) {
                    self.bind(v, general);
                }
                Some(true)
            }
            None => {
                if self.mentions(v, other) {
                    return None;
                }
                self.bind(v, other.clone());
                Some(true)
            }
        }
    }

    /// Whether `t` holds a variable nothing is bound to.
    pub(crate) fn has_unbound(&self, t: &Type<O>) -> bool {
        match t {
            Type::Var(v) => self.bound[*v].as_ref().is_none_or(|b| self.has_unbound(b)),
            Type::List(e) | Type::Kind(e) => self.has_unbound(e),
            Type::Map(k, v) => self.has_unbound(k) || self.has_unbound(v),
            Type::Opaque(_, params) => params.iter().any(|p| self.has_unbound(p)),
            _ => false,
        }
    }

    fn root(&self, mut v: usize) -> usize {
        while let Some(Type::Var(next)) = &self.bound[v] {
            if *next == v {
                break;
            }
            v = *next;
        }
        v
    }

    fn mentions(&self, v: usize, t: &Type<O>) -> bool {
        match t {
            Type::Var(o) => *o == v || self.bound[*o].as_ref().is_some_and(|b| self.mentions(v, b)),
            Type::List(e) | Type::Kind(e) => self.mentions(v, e),
            Type::Map(k, val) => self.mentions(v, k) || self.mentions(v, val),
            Type::Opaque(_, params) => params.iter().any(|p| self.mentions(v, p)),
            _ => false,
        }
    }
}

/// Types a `null` may stand for (cel-go's legacy nullability).
fn nullable<O>(t: &Type<O>) -> bool {
    matches!(
        t,
        Type::Null | Type::Opaque(..) | Type::Object(_) | Type::Duration | Type::Timestamp
    )
}

/// The more general of two agreeing types (cel-go's `mostGeneral`); what this crate
/// does not know is more general than `dyn`.
pub(crate) fn most_general<O: Handle>(a: &Type<O>, b: &Type<O>) -> Type<O> {
    match (a, b) {
        (Type::Unknown, _) | (_, Type::Unknown) => Type::Unknown,
        (Type::Dyn | Type::Error, _) => a.clone(),
        (_, Type::Dyn | Type::Error) => b.clone(),
        (Type::List(x), Type::List(y)) => Type::list(most_general(x, y)),
        (Type::Map(k1, v1), Type::Map(k2, v2)) => {
            Type::map(most_general(k1, k2), most_general(v1, v2))
        }
        (Type::Opaque(n, p1), Type::Opaque(_, p2)) if p1.len() == p2.len() => Type::Opaque(
            n,
            p1.iter().zip(p2).map(|(x, y)| most_general(x, y)).collect(),
        ),
        _ => a.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declaration_parses() {
        for line in decls::DECLARATIONS.lines().map(str::trim) {
            if !line.is_empty() && !line.starts_with('#') {
                assert!(parse_overload(line).is_some(), "{line}");
            }
        }
        let table = parse_declarations(decls::DECLARATIONS);
        for function in [
            "_+_",
            "size",
            "startsWith",
            "optional.of",
            "orValue",
            "quantity",
        ] {
            assert!(table.contains_key(function), "{function}");
        }
    }

    #[test]
    fn signatures_parse_as_cel_go_prints_them() {
        let (name, o) = parse_overload("startsWith string.(string) -> bool").unwrap();
        assert_eq!(name, "startsWith");
        assert!(o.member);
        assert_eq!(o.params, vec![Type::String, Type::String]);
        let (_, o) = parse_overload("_[_] (map(A, B), A) -> B").unwrap();
        assert!(!o.member);
        assert_eq!(
            o.params,
            vec![
                Type::map(Type::Param("A"), Type::Param("B")),
                Type::Param("A")
            ]
        );
        assert_eq!(o.result, Type::Param("B"));
        let (name, o) = parse_overload("optional.none () -> optional_type(T)").unwrap();
        assert_eq!(name, "optional.none");
        assert_eq!(o.result, Type::optional(Type::Param("T")));
        assert!(o.params.is_empty());
    }

    #[test]
    fn type_variables_bind_and_widen() {
        let mut s: Substitutions<&Value> = Substitutions::default();
        let a = s.fresh();
        assert!(s.assignable(&Type::list(a.clone()), &Type::list(Type::Int)));
        assert_eq!(s.substitute(&a), Type::Int);
        assert!(!s.assignable(&a, &Type::String));
        assert!(s.assignable(&a, &Type::Dyn));
        assert_eq!(s.substitute(&a), Type::Dyn);
        let b = s.fresh();
        assert!(!s.all_assignable(&[b.clone(), b.clone()], &[Type::Int, Type::String]));
        assert_eq!(s.substitute(&b), b, "a failed match binds nothing");
        assert!(s.assignable(&Type::Timestamp, &Type::Null));
        assert!(!s.assignable(&Type::Int, &Type::Null));
        assert_eq!(
            Type::<NoObject>::map(Type::String, Type::list(Type::optional(Type::Timestamp)))
                .to_string(),
            "map(string, list(optional_type(timestamp)))"
        );
    }
}
