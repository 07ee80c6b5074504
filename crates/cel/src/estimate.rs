//! The worst-case cost of an expression, estimated before it runs: cel-go's
//! `checker.Cost` (`checker/cost.go`, v0.23) with Kubernetes' size estimator and
//! library costs (`k8s.io/apiserver/pkg/cel/library/cost.go`,
//! `apiextensions-apiserver/pkg/apiserver/schema/cel/compilation.go`), as v1.33 runs
//! them. Upstream refuses a CustomResourceDefinition whose `x-kubernetes-validations`
//! rules could cost more than a budget on the largest object a request can carry
//! (`estimated rule cost exceeds budget by factor of ...`), so a rule over an
//! unbounded list must declare `maxItems`; this is that estimate, for the same
//! refusal here.
//!
//! The numbers are upstream's: each node costs what cel-go charges for it, a
//! comprehension its range's largest size times its loop's cost, string functions by
//! the strings' longest lengths. Sizes come from the schema (`estimate/decl.rs`): `maxLength`,
//! `maxItems`, `maxProperties`, or what fits in one request.
//!
//! The `cel` crate has no type checker, so the types cel-go's checker gives each node
//! (which pick a function's overload and say whether a value has a constant size)
//! are inferred here from the schema and the functions' declared overloads
//! (`check.rs`, which the type checker resolves calls by too). Where that
//! inference does not know a type, the estimate reads the value as a
//! scalar and the call as the constant-cost overload: never dearer than upstream's
//! estimate, so that a CRD upstream admits is admitted here too.

use std::collections::HashMap;

use kube_cel::cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr,
    SelectExpr,
};
use serde_json::Value;

use crate::Program;
use crate::check;

mod decl;
#[cfg(test)]
mod tests;

use decl::{Decl, DeclKind, MAP_KEY, MAX_REQUEST_SIZE_BYTES};

/// Upstream `StaticEstimatedCostLimit`: the most one rule (times its cardinality) or
/// message expression may be estimated to cost.
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;

/// Upstream `StaticEstimatedCRDCostLimit`: the most all the rules of one schema may
/// be estimated to cost together.
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;

const STRING_TRAVERSAL_COST_FACTOR: f64 = 0.1;
const REGEX_STRING_LENGTH_COST_FACTOR: f64 = 0.25;
const LIST_CREATE_BASE_COST: u64 = 10;
const MAP_CREATE_BASE_COST: u64 = 30;
const STRUCT_CREATE_BASE_COST: u64 = 40;
const MAX_FORMAT_SIZE: u64 = 64;
const MAX_NAME_FORMAT_REGEX_SIZE: f64 = 128.0;

/// The accumulator of cel-go's macros, whose paths are not handed to estimators.
const ACCUMULATORS: &[&str] = &["@result", "@__result__"];

/// The names the Kubernetes libraries declare their types by.
const IP: &str = "net.IP";
const CIDR: &str = "net.CIDR";
const QUANTITY: &str = "kubernetes.Quantity";
const URL: &str = "kubernetes.URL";
const SEMVER: &str = "kubernetes.Semver";
const NAMED_FORMAT: &str = "kubernetes.NamedFormat";

/// A range of sizes or costs, as cel-go's `SizeEstimate` and `CostEstimate` (the same
/// arithmetic: saturating, factors rounded up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    pub min: u64,
    pub max: u64,
}

impl Estimate {
    const ZERO: Estimate = Estimate { min: 0, max: 0 };
    const UNKNOWN: Estimate = Estimate {
        min: 0,
        max: u64::MAX,
    };

    fn fixed(v: u64) -> Estimate {
        Estimate { min: v, max: v }
    }

    fn add(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    fn multiply(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    fn factor(self, f: f64) -> Estimate {
        Estimate {
            min: by_factor(self.min, f),
            max: by_factor(self.max, f),
        }
    }

    fn union(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// cel-go's `multiplyByCostFactor`: the product rounded up, saturating.
fn by_factor(x: u64, f: f64) -> u64 {
    let xf = x as f64;
    if xf > 0.0 && f > 0.0 && xf > u64::MAX as f64 / f {
        return u64::MAX;
    }
    let ceil = (xf * f).ceil();
    if ceil >= 18_446_744_073_709_551_616.0 {
        return u64::MAX;
    }
    ceil as u64
}

/// A CRD schema node's types for estimating its rules: `self` and `oldSelf` are the
/// node's value.
#[derive(Debug)]
pub struct RuleScope {
    decl: Option<Decl>,
}

impl RuleScope {
    /// The node's schema (as JSON) and whether it is the CRD's root; an
    /// `x-kubernetes-embedded-resource` is a resource's root too.
    pub fn new(node: &Value, resource_root: bool) -> RuleScope {
        let embedded = node.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
        RuleScope {
            decl: Decl::of_schema(node, resource_root || embedded),
        }
    }

    /// Upstream's `maxCardinality`: how often a node of this type fits in one request,
    /// the factor a rule's cost is multiplied by where the schema bounds no list or map
    /// above it.
    pub fn max_cardinality(&self) -> u64 {
        let min = self.decl.as_ref().map_or(0, |d| d.min_serialized_size);
        (MAX_REQUEST_SIZE_BYTES / (min + 1)) as u64
    }

    /// The estimated worst-case cost of one evaluation of `program` (cel-go's
    /// `EstimateCost(...).Max`); 0 where the node has no CEL type.
    pub fn max_cost(&self, program: &Program) -> u64 {
        let Some(root) = &self.decl else {
            return 0;
        };
        let mut coster = Coster {
            root,
            paths: HashMap::new(),
            locals: HashMap::new(),
            sizes: HashMap::new(),
            entry_sizes: HashMap::new(),
            types: HashMap::new(),
            subs: check::Substitutions::default(),
        };
        coster.cost(program.expression()).max
    }
}

/// Upstream's `getCostErrorMessage`.
pub fn cost_error_message(cost_name: &str, cost: u64, limit: u64) -> String {
    let exceed = cost as f64 / limit as f64;
    let factor = if exceed > 100.0 {
        "more than 100x".to_string()
    } else if exceed < 1.5 {
        format!("{exceed:.6}x")
    } else {
        format!("{exceed:.1}x")
    };
    format!(
        "{cost_name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The types cel-go's checker would give, with the declared types of the rule's
/// schema as struct types; [`Ty::Unknown`] where this inference has none (read as
/// cheaply as possible).
type Ty<'d> = check::Type<&'d Decl>;

impl check::Handle for &Decl {
    fn same(self, other: Self) -> bool {
        std::ptr::eq(self, other)
    }

    fn name(&self) -> Option<String> {
        None
    }
}

impl<'d> Ty<'d> {
    fn of(d: &'d Decl) -> Ty<'d> {
        match &d.kind {
            DeclKind::Bool => Ty::Bool,
            DeclKind::Int => Ty::Int,
            DeclKind::Double => Ty::Double,
            DeclKind::String => Ty::String,
            DeclKind::Bytes => Ty::Bytes,
            DeclKind::Duration => Ty::Duration,
            DeclKind::Timestamp => Ty::Timestamp,
            DeclKind::Dyn => Ty::Dyn,
            DeclKind::List(e) => Ty::List(Box::new(Ty::of(e))),
            DeclKind::Map(v) => Ty::Map(Box::new(Ty::String), Box::new(Ty::of(v))),
            DeclKind::Object(_) => Ty::Object(d),
        }
    }

    /// Known and not `dyn`: a type that picks an overload.
    fn is_concrete(&self) -> bool {
        !matches!(self, Ty::Dyn | Ty::Unknown)
    }

    /// cel-go's `isScalar`: a value of constant size.
    fn is_scalar(&self) -> bool {
        matches!(
            self,
            Ty::Bool | Ty::Double | Ty::Duration | Ty::Int | Ty::Timestamp | Ty::Uint
        )
    }

    /// Struct or map kind: a field selection on it costs one (Kubernetes declares
    /// its quantities, URLs, versions and formats as struct types).
    fn is_selectable(&self) -> bool {
        matches!(self, Ty::Object(_) | Ty::Map(..))
            || matches!(
                self.library_type(),
                Some(QUANTITY | URL | SEMVER | NAMED_FORMAT)
            )
    }

    /// The name of a Kubernetes library's type (`net.IP`, `kubernetes.Quantity`, ...).
    fn library_type(&self) -> Option<&'static str> {
        match self {
            Ty::Opaque(name, params) if params.is_empty() => Some(*name),
            _ => None,
        }
    }

    /// The first type parameter (a list's items, a map's keys).
    fn first_param(&self) -> Option<&Ty<'d>> {
        match self {
            Ty::List(e) | Ty::Map(e, _) => Some(e),
            _ => None,
        }
    }

    fn same_kubernetes_type(&self, o: &Ty<'d>) -> bool {
        self.library_type().is_some() && self.library_type() == o.library_type()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    List,
    Map,
    Unknown,
}

/// cel-go's `entrySizeEstimate`: the sizes of a container's keys and values, where
/// the expression builds them.
#[derive(Clone, Copy)]
struct EntrySize {
    container: Container,
    key: Estimate,
    val: Estimate,
}

impl EntrySize {
    fn union(a: Option<EntrySize>, b: Option<EntrySize>) -> Option<EntrySize> {
        let (a, b) = (a?, b?);
        Some(EntrySize {
            container: a.container,
            key: a.key.union(b.key),
            val: a.val.union(b.val),
        })
    }
}

struct Local<'d> {
    path: Vec<String>,
    size: Option<Estimate>,
    entry: Option<EntrySize>,
    ty: Ty<'d>,
}

/// cel-go's `AstNode`: what a function's estimate sees of an operand.
struct Node<'e, 'd> {
    path: Option<Vec<String>>,
    ty: Ty<'d>,
    expr: Option<&'e IdedExpr>,
    size: Option<Estimate>,
}

struct CallEstimate {
    cost: Estimate,
    result_size: Option<Estimate>,
}

impl CallEstimate {
    fn only(cost: Estimate) -> CallEstimate {
        CallEstimate {
            cost,
            result_size: None,
        }
    }

    fn sized(cost: Estimate, size: Estimate) -> CallEstimate {
        CallEstimate {
            cost,
            result_size: Some(size),
        }
    }
}

/// The overloads whose estimates differ from a constant-cost call's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Overload {
    Other,
    IndexList,
    IndexMap,
    AddString,
    AddBytes,
    AddList,
    Equals,
    NotEquals,
    CompareStrings,
    InList,
    MatchesString,
    ContainsString,
    StartsOrEndsWith,
    Logical,
    Conditional,
    StringToBytes,
    BytesToString,
    FormatString,
    QuoteString,
    Sets(u8),
    CidrIp,
    ContainsIpString,
    ContainsCidrString,
}

struct Coster<'d> {
    root: &'d Decl,
    paths: HashMap<u64, Vec<String>>,
    locals: HashMap<String, Vec<Local<'d>>>,
    sizes: HashMap<u64, Estimate>,
    entry_sizes: HashMap<u64, EntrySize>,
    types: HashMap<u64, Ty<'d>>,
    subs: check::Substitutions<&'d Decl>,
}

impl<'d> Coster<'d> {
    fn cost(&mut self, e: &IdedExpr) -> Estimate {
        let (cost, ty) = match &e.expr {
            Expr::Literal(l) => (Estimate::ZERO, literal_type(l)),
            Expr::Ident(name) => self.cost_ident(e.id, name),
            Expr::Select(s) => self.cost_select(e.id, s),
            Expr::Call(c) => return self.cost_call(e, c),
            Expr::List(l) => self.cost_list(e.id, l),
            Expr::Map(m) => self.cost_map(e.id, m),
            Expr::Struct(s) => {
                let mut sum = Estimate::fixed(STRUCT_CREATE_BASE_COST);
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                (sum, Ty::Unknown)
            }
            Expr::Comprehension(c) if is_bind(c) => self.cost_bind(e.id, c),
            Expr::Comprehension(c) => self.cost_comprehension(e.id, c),
            _ => (Estimate::ZERO, Ty::Unknown),
        };
        self.types.insert(e.id, ty);
        cost
    }

    fn ty(&self, e: &IdedExpr) -> Ty<'d> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Unknown)
    }

    fn local(&self, name: &str) -> Option<&Local<'d>> {
        self.locals.get(name).and_then(|s| s.last())
    }

    fn cost_ident(&mut self, id: u64, name: &str) -> (Estimate, Ty<'d>) {
        let (path, ty) = match self.local(name) {
            Some(l) => (l.path.clone(), l.ty.clone()),
            None => {
                let ty = match name {
                    "self" | "oldSelf" => Ty::of(self.root),
                    "int" | "uint" | "double" | "bool" | "string" | "bytes" | "list" | "map"
                    | "null_type" | "type" => Ty::Kind(Box::new(Ty::Dyn)),
                    _ => Ty::Unknown,
                };
                (vec![name.to_string()], ty)
            }
        };
        self.paths.insert(id, path);
        (Estimate::fixed(1), ty)
    }

    fn cost_select(&mut self, id: u64, s: &SelectExpr) -> (Estimate, Ty<'d>) {
        // Kubernetes charges nothing for a presence test (`PresenceTestHasCost(false)`).
        if s.test {
            return (self.cost(&s.operand), Ty::Bool);
        }
        let mut sum = self.cost(&s.operand);
        let operand = self.ty(&s.operand);
        if operand.is_selectable() {
            sum = sum.add(Estimate::fixed(1));
        }
        let mut path = self.path(&s.operand);
        path.push(s.field.clone());
        self.paths.insert(id, path);
        let ty = match &operand {
            Ty::Object(d) => match &d.kind {
                DeclKind::Object(fields) => fields.get(&s.field).map_or(Ty::Unknown, Ty::of),
                _ => Ty::Unknown,
            },
            Ty::Map(_, v) => (**v).clone(),
            Ty::Dyn => Ty::Dyn,
            _ => Ty::Unknown,
        };
        (sum, ty)
    }

    fn cost_call(&mut self, e: &IdedExpr, call: &CallExpr) -> Estimate {
        let (name, target) = self.function_name(call);
        if name == "dyn" && call.args.len() == 1 && target.is_none() {
            let arg = &call.args[0];
            let cost = self.cost(arg);
            self.copy_sizes(e.id, arg);
            self.types.insert(e.id, Ty::Dyn);
            return Estimate::fixed(1).add(cost);
        }
        let mut arg_costs = Vec::with_capacity(call.args.len());
        let mut args = Vec::with_capacity(call.args.len());
        for arg in &call.args {
            arg_costs.push(self.cost(arg));
            args.push(self.node(arg));
        }
        let mut sum = Estimate::ZERO;
        let target = target.map(|t| {
            sum = sum.add(self.cost(t));
            self.node(t)
        });
        let arg_types: Vec<Ty<'d>> = args.iter().map(|a| a.ty.clone()).collect();
        let ty = self.result_type(&name, target.as_ref().map(|t| &t.ty), &arg_types);
        self.types.insert(e.id, ty);
        let mut fn_cost = Estimate {
            min: u64::MAX,
            max: 0,
        };
        let mut result_size: Option<Estimate> = None;
        for overload in overloads(&name, target.as_ref().map(|t| &t.ty), &arg_types) {
            let estimate =
                self.function_cost(e, &name, overload, target.as_ref(), &args, &arg_costs);
            fn_cost = fn_cost.union(estimate.cost);
            if let Some(size) = estimate.result_size {
                result_size = Some(result_size.map_or(size, |r| r.union(size)));
            }
            let index_path = match overload {
                Overload::IndexList => Some("@items"),
                Overload::IndexMap => Some("@values"),
                _ => None,
            };
            if let (Some(step), Some(container)) = (index_path, call.args.first()) {
                result_size = self.entry_size(container).map(|s| s.val);
                let mut path = self.path(container);
                path.push(step.to_string());
                self.paths.insert(e.id, path);
            }
            if result_size.is_none() {
                result_size = self.compute_size(e);
            }
        }
        if let Some(size) = result_size {
            self.sizes.insert(e.id, size);
        }
        sum.add(fn_cost)
    }

    /// The type of a call's result, from the declared overloads
    /// ([`check::resolve`]); unknown where no overload takes the arguments.
    fn result_type(&mut self, function: &str, target: Option<&Ty<'d>>, args: &[Ty<'d>]) -> Ty<'d> {
        let all: Vec<Ty<'d>> = target.into_iter().chain(args).cloned().collect();
        check::resolve(&mut self.subs, function, target.is_some(), &all).unwrap_or(Ty::Unknown)
    }

    /// The function a call names and its receiver ([`check::function_of`]).
    fn function_name<'c>(&self, call: &'c CallExpr) -> (String, Option<&'c IdedExpr>) {
        check::function_of(call, |name| self.local(name).is_some())
    }

    fn cost_list(&mut self, id: u64, list: &ListExpr) -> (Estimate, Ty<'d>) {
        let mut sum = Estimate::ZERO;
        let mut item = Estimate {
            min: if list.elements.is_empty() {
                0
            } else {
                u64::MAX
            },
            max: 0,
        };
        let mut elem_ty = Ty::Unknown;
        for e in &list.elements {
            sum = sum.add(self.cost(e));
            item = item.union(self.size_or_unknown(e));
            if !elem_ty.is_concrete() {
                elem_ty = self.ty(e);
            }
        }
        self.entry_sizes.insert(
            id,
            EntrySize {
                container: Container::List,
                key: Estimate::fixed(1),
                val: item,
            },
        );
        (
            sum.add(Estimate::fixed(LIST_CREATE_BASE_COST)),
            Ty::List(Box::new(elem_ty)),
        )
    }

    fn cost_map(&mut self, id: u64, map: &MapExpr) -> (Estimate, Ty<'d>) {
        let mut sum = Estimate::ZERO;
        let start = if map.entries.is_empty() { 0 } else { u64::MAX };
        let mut key = Estimate { min: start, max: 0 };
        let mut val = Estimate { min: start, max: 0 };
        let (mut key_ty, mut val_ty) = (Ty::Unknown, Ty::Unknown);
        for entry in &map.entries {
            let EntryExpr::MapEntry(entry) = &entry.expr else {
                continue;
            };
            sum = sum.add(self.cost(&entry.key));
            sum = sum.add(self.cost(&entry.value));
            key = key.union(self.size_or_unknown(&entry.key));
            val = val.union(self.size_or_unknown(&entry.value));
            if !key_ty.is_concrete() {
                key_ty = self.ty(&entry.key);
            }
            if !val_ty.is_concrete() {
                val_ty = self.ty(&entry.value);
            }
        }
        self.entry_sizes.insert(
            id,
            EntrySize {
                container: Container::Map,
                key,
                val,
            },
        );
        (
            sum.add(Estimate::fixed(MAP_CREATE_BASE_COST)),
            Ty::Map(Box::new(key_ty), Box::new(val_ty)),
        )
    }

    fn cost_comprehension(&mut self, id: u64, c: &ComprehensionExpr) -> (Estimate, Ty<'d>) {
        let mut sum = self.cost(&c.iter_range);
        sum = sum.add(self.cost(&c.accu_init));
        self.push_local(&c.accu_var, &c.accu_init);
        match &c.iter_var2 {
            Some(value_var) => {
                self.push_iter(&c.iter_var, &c.iter_range, IterVar::Key);
                self.push_iter(value_var, &c.iter_range, IterVar::Value);
            }
            None => self.push_iter(&c.iter_var, &c.iter_range, IterVar::Single),
        }
        let loop_cost = self.cost(&c.loop_cond);
        let step_cost = self.cost(&c.loop_step);
        self.pop(&c.iter_var);
        if let Some(value_var) = &c.iter_var2 {
            self.pop(value_var);
        }
        // The accumulator of `map` and `filter` starts as `[]`; its items are the
        // step's (for the type only: cel-go's checker knows it from the start).
        let step_ty = self.ty(&c.loop_step);
        if let Some(accu) = self.locals.get_mut(&c.accu_var).and_then(|s| s.last_mut())
            && matches!(&accu.ty, Ty::List(e) if !e.is_concrete())
            && matches!(&step_ty, Ty::List(e) if e.is_concrete())
        {
            accu.ty = step_ty;
        }
        sum = sum.add(self.cost(&c.result));
        self.pop(&c.accu_var);
        let range = self.size_or_unknown(&c.iter_range);
        sum = sum.add(range.multiply(step_cost.add(loop_cost)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(size) = self.compute_size(&c.accu_init) {
                    self.sizes.insert(id, size);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(id, range);
                if let Some(entry) = self.entry_size(&c.loop_step) {
                    self.entry_sizes.insert(id, entry);
                }
            }
            _ => {}
        }
        (sum, self.ty(&c.result))
    }

    fn cost_bind(&mut self, id: u64, c: &ComprehensionExpr) -> (Estimate, Ty<'d>) {
        let mut sum = self.cost(&c.iter_range);
        sum = sum.add(self.cost(&c.accu_init));
        self.push_local(&c.accu_var, &c.accu_init);
        sum = sum.add(self.cost(&c.result));
        self.pop(&c.accu_var);
        self.copy_sizes(id, &c.result);
        (sum, self.ty(&c.result))
    }

    fn push_local(&mut self, name: &str, e: &IdedExpr) {
        let local = Local {
            path: self.path(e),
            size: self.compute_size(e),
            entry: self.entry_size(e),
            ty: self.ty(e),
        };
        self.locals.entry(name.to_string()).or_default().push(local);
    }

    fn push_iter(&mut self, name: &str, range: &IdedExpr, var: IterVar) {
        let entry = self.entry_size(range);
        let range_ty = self.ty(range);
        let container = match entry.map_or(Container::Unknown, |e| e.container) {
            Container::Unknown => match range_ty {
                Ty::List(_) => Container::List,
                Ty::Map(..) => Container::Map,
                _ => Container::Unknown,
            },
            c => c,
        };
        let list = container == Container::List;
        let (step, size, ty) = match var {
            IterVar::Key if list => ("@indices", entry.map(|e| e.key), Ty::Int),
            IterVar::Key => ("@keys", entry.map(|e| e.key), map_key(&range_ty)),
            IterVar::Value if list => ("@items", entry.map(|e| e.val), element(&range_ty)),
            IterVar::Value => ("@values", entry.map(|e| e.val), map_value(&range_ty)),
            IterVar::Single if list => ("@items", entry.map(|e| e.val), element(&range_ty)),
            IterVar::Single => ("@keys", entry.map(|e| e.key), map_key(&range_ty)),
        };
        let mut path = self.path(range);
        path.push(step.to_string());
        self.locals
            .entry(name.to_string())
            .or_default()
            .push(Local {
                path,
                size,
                entry: None,
                ty,
            });
    }

    fn pop(&mut self, name: &str) {
        if let Some(stack) = self.locals.get_mut(name) {
            stack.pop();
        }
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(l) = self.local(name)
        {
            return l.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    fn node<'e>(&mut self, e: &'e IdedExpr) -> Node<'e, 'd> {
        let path = self.path(e);
        let path = (!path.is_empty() && !ACCUMULATORS.contains(&path[0].as_str())).then_some(path);
        Node {
            path,
            ty: self.ty(e),
            expr: Some(e),
            size: self.compute_size(e),
        }
    }

    fn copy_sizes(&mut self, dst: u64, src: &IdedExpr) {
        if let Some(size) = self.compute_size(src) {
            self.sizes.insert(dst, size);
        }
        if let Some(entry) = self.entry_size(src) {
            self.entry_sizes.insert(dst, entry);
        }
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Estimate {
        self.compute_size(e).unwrap_or(Estimate::UNKNOWN)
    }

    /// cel-go's `computeSize`: a call's result size, a literal's, the schema's bound
    /// for the value's path, a scalar's 1, a variable's. A value of a type this
    /// inference does not know counts as a scalar.
    fn compute_size(&mut self, e: &IdedExpr) -> Option<Estimate> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        if let Some(size) = literal_size(e) {
            return Some(size);
        }
        let path = self.path(e);
        if let Some(size) = self.estimate_size(&path) {
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        let ty = self.ty(e);
        if ty.is_scalar() {
            return Some(Estimate::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr
            && let Some(size) = self.local(name).and_then(|l| l.size)
        {
            return Some(size);
        }
        matches!(ty, Ty::Unknown).then_some(Estimate::fixed(1))
    }

    fn entry_size(&self, e: &IdedExpr) -> Option<EntrySize> {
        if let Some(entry) = self.entry_sizes.get(&e.id) {
            return Some(*entry);
        }
        match &e.expr {
            Expr::Ident(name) => self.local(name).and_then(|l| l.entry),
            _ => None,
        }
    }

    /// Kubernetes' `sizeEstimator`: the declared bound of the value at `path` (its
    /// first step, the variable, is the rule's node whatever its name).
    fn estimate_size(&self, path: &[String]) -> Option<Estimate> {
        let (_, steps) = path.split_first()?;
        let mut node = self.root;
        for step in steps {
            node = match (step.as_str(), &node.kind) {
                ("@items" | "@values", DeclKind::List(e) | DeclKind::Map(e)) => e,
                ("@keys", DeclKind::Map(_)) => &MAP_KEY,
                (field, DeclKind::Object(fields)) => fields.get(field)?,
                _ => return None,
            };
        }
        Some(Estimate {
            min: 0,
            max: node.max_elements.max(0) as u64,
        })
    }

    /// Gives the expression `id` the entries of both operands, where both have them
    /// (a conditional's branches, a concatenation's halves).
    fn unite_entry_sizes(&mut self, id: u64, a: &Node<'_, 'd>, b: &Node<'_, 'd>) {
        let entry = |n: &Node<'_, 'd>| n.expr.and_then(|x| self.entry_size(x));
        if let Some(united) = EntrySize::union(entry(a), entry(b)) {
            self.entry_sizes.insert(id, united);
        }
    }

    /// Kubernetes' `sizeEstimate` of an operand.
    fn node_size(&self, n: &Node<'_, 'd>) -> Estimate {
        if let Some(size) = n.size {
            return size;
        }
        n.path
            .as_deref()
            .and_then(|p| self.estimate_size(p))
            .unwrap_or(Estimate::UNKNOWN)
    }

    fn function_cost(
        &mut self,
        e: &IdedExpr,
        function: &str,
        overload: Overload,
        target: Option<&Node<'_, 'd>>,
        args: &[Node<'_, 'd>],
        arg_costs: &[Estimate],
    ) -> CallEstimate {
        let arg_sum = arg_costs.iter().fold(Estimate::ZERO, |sum, c| sum.add(*c));
        let with_args = |estimate: CallEstimate| CallEstimate {
            cost: estimate.cost.add(arg_sum),
            result_size: estimate.result_size,
        };
        let size = |n: &Node<'_, 'd>| n.size.unwrap_or(Estimate::UNKNOWN);
        if let Overload::Sets(factor) = overload
            && let [a, b] = args
        {
            let cost = self
                .node_size(a)
                .multiply(self.node_size(b))
                .factor(f64::from(factor))
                .add(Estimate::fixed(1));
            return with_args(CallEstimate {
                cost,
                result_size: None,
            });
        }
        if let Some(estimate) = self.kubernetes_call_cost(function, overload, target, args) {
            return with_args(estimate);
        }
        let traversal = STRING_TRAVERSAL_COST_FACTOR;
        let estimate = match (overload, target, args) {
            (Overload::FormatString, Some(t), _) => CallEstimate::only(size(t).factor(traversal)),
            (Overload::StringToBytes, _, [a]) => {
                let s = size(a);
                CallEstimate::sized(
                    s.factor(traversal),
                    Estimate {
                        min: s.min,
                        max: s.max.wrapping_mul(4),
                    },
                )
            }
            (Overload::BytesToString, _, [a]) => {
                let s = size(a);
                CallEstimate::sized(
                    s.factor(traversal),
                    Estimate {
                        min: s.min / 4,
                        max: s.max,
                    },
                )
            }
            (Overload::QuoteString, _, [a]) => {
                let s = size(a);
                CallEstimate::sized(
                    s.factor(traversal),
                    Estimate {
                        min: s.min.wrapping_add(2),
                        max: s.max.wrapping_mul(2).wrapping_add(2),
                    },
                )
            }
            (Overload::StartsOrEndsWith, _, [a]) => CallEstimate::only(size(a).factor(traversal)),
            (Overload::InList, _, [_, list]) => CallEstimate::only(size(list).factor(1.0)),
            (Overload::MatchesString, Some(t), [re]) => {
                let string = size(t).add(Estimate::fixed(1)).factor(traversal);
                let regex = size(re).factor(REGEX_STRING_LENGTH_COST_FACTOR);
                CallEstimate::only(string.multiply(regex))
            }
            (Overload::ContainsString, Some(t), [sub]) => CallEstimate::only(
                size(t)
                    .factor(traversal)
                    .multiply(size(sub).factor(traversal)),
            ),
            (Overload::Logical, _, [_, _]) => {
                let (lhs, rhs) = (arg_costs[0], arg_costs[1]);
                return CallEstimate {
                    cost: Estimate {
                        min: lhs.min,
                        max: lhs.add(rhs).max,
                    },
                    result_size: None,
                };
            }
            (Overload::Conditional, _, [_, a, b]) => {
                let result = size(a).union(size(b));
                self.unite_entry_sizes(e.id, a, b);
                let cost = arg_costs[0].add(arg_costs[1].union(arg_costs[2]));
                return CallEstimate {
                    cost,
                    result_size: Some(result),
                };
            }
            (Overload::AddString | Overload::AddBytes | Overload::AddList, _, [a, b]) => {
                let result = size(a).add(size(b));
                self.unite_entry_sizes(e.id, a, b);
                let cost = if overload == Overload::AddList {
                    Estimate::fixed(1)
                } else {
                    result.factor(traversal)
                };
                CallEstimate::sized(cost, result)
            }
            (Overload::CompareStrings | Overload::Equals | Overload::NotEquals, _, [a, b]) => {
                let smallest_max = size(a).max.min(size(b).max);
                let min = u64::from(smallest_max > 0);
                CallEstimate::only(
                    Estimate {
                        min,
                        max: smallest_max,
                    }
                    .factor(traversal),
                )
            }
            _ => CallEstimate::only(Estimate::fixed(1)),
        };
        with_args(estimate)
    }

    /// Kubernetes' `CostEstimator.EstimateCallCost` (v1.33, where cel-go hands every
    /// call a target, so its `target != nil` tests hold for global functions too).
    fn kubernetes_call_cost(
        &self,
        function: &str,
        overload: Overload,
        target: Option<&Node<'_, 'd>>,
        args: &[Node<'_, 'd>],
    ) -> Option<CallEstimate> {
        let traversal = STRING_TRAVERSAL_COST_FACTOR;
        let one = Estimate::fixed(1);
        let arg_size = |i: usize| args.get(i).map(|a| self.node_size(a));
        let estimate = match function {
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
                let t = target?;
                match element_node(t) {
                    Some(elem) => {
                        let mut el_cost = one;
                        if matches!(elem.ty, Ty::String | Ty::Bytes) {
                            el_cost = el_cost.add(self.node_size(&elem).factor(traversal));
                        }
                        CallEstimate::only(self.node_size(t).multiply(el_cost))
                    }
                    None => CallEstimate::only(self.node_size(t).factor(traversal)),
                }
            }
            "url" | "jsonpatch.escapeKey" if args.len() == 1 => {
                let s = arg_size(0)?;
                CallEstimate::sized(s.factor(traversal), s)
            }
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let s = self.node_size(target?);
                CallEstimate::sized(s.factor(traversal), s)
            }
            "replace" if args.len() >= 2 => {
                let s = self.node_size(target?);
                let (from, to) = (arg_size(0)?, arg_size(1)?);
                let (mut count, mut retained) = (Estimate::ZERO, Estimate::ZERO);
                if from.min == 0 {
                    count.max = if s.max < u64::MAX { s.max + 1 } else { s.max };
                    retained.max = s.max;
                } else if to.max <= from.min {
                    retained.max = s.max;
                } else {
                    count.max = (s.max as f64 / from.min as f64).ceil() as u64;
                }
                if from.max == 0 {
                    count.min = if s.min < u64::MAX { s.min + 1 } else { s.min };
                    retained.min = s.min;
                } else if from.max <= to.min {
                    retained.min = s.min;
                } else {
                    count.min = (s.min as f64 / from.max as f64).ceil() as u64;
                }
                let result = count.multiply(to).add(retained);
                CallEstimate::sized(s.factor(2.0 * traversal), result)
            }
            "split" => {
                let s = self.node_size(target?);
                let mut max = s.max;
                if let Some(Expr::Literal(LiteralValue::Int(limit))) =
                    args.get(1).and_then(|a| a.expr).map(|e| &e.expr)
                {
                    max = *limit.inner() as u64;
                }
                CallEstimate::sized(s.factor(2.0 * traversal), Estimate { min: 0, max })
            }
            "join" => {
                let t = target?;
                let list = self.node_size(t);
                let mut s = Estimate::ZERO;
                if let Some(elem) = element_node(t) {
                    s = list.multiply(self.node_size(&elem));
                }
                if let Some(separator) = arg_size(0) {
                    let separators = Estimate {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    s = s.add(separator.multiply(separators));
                }
                CallEstimate::sized(s.factor(traversal), s)
            }
            "find" | "findAll" if !args.is_empty() => {
                let s = self.node_size(target?);
                let string = s.add(one).factor(traversal);
                let regex = arg_size(0)?.factor(REGEX_STRING_LENGTH_COST_FACTOR);
                CallEstimate::sized(string.multiply(regex), Estimate { min: 0, max: s.max })
            }
            "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" | "semver" | "isSemver"
                if !args.is_empty() =>
            {
                CallEstimate::only(arg_size(0)?.factor(traversal))
            }
            "ip" if overload == Overload::CidrIp => CallEstimate::only(one),
            "ip" if !args.is_empty() => CallEstimate::only(arg_size(0)?.factor(traversal)),
            "ip.isCanonical" if !args.is_empty() => {
                CallEstimate::only(arg_size(0)?.factor(2.0 * traversal))
            }
            "masked"
            | "prefixLength"
            | "family"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "isGlobalUnicast" => CallEstimate::only(one),
            "containsIP" | "containsCIDR" if !args.is_empty() => {
                let ip = Estimate { min: 4, max: 16 };
                let mut cost = ip.add(ip).factor(traversal);
                if function == "containsCIDR" {
                    cost = cost.add(ip.factor(traversal)).add(one);
                }
                if matches!(
                    overload,
                    Overload::ContainsIpString | Overload::ContainsCidrString
                ) {
                    cost = cost.add(arg_size(0)?.factor(traversal));
                }
                CallEstimate::only(cost)
            }
            "validate" if !args.is_empty() => CallEstimate::only(
                arg_size(0)?
                    .factor(traversal)
                    .factor(MAX_NAME_FORMAT_REGEX_SIZE * REGEX_STRING_LENGTH_COST_FACTOR),
            ),
            "format.named" | "sign" | "asInteger" | "isInteger" | "asApproximateFloat"
            | "isGreaterThan" | "isLessThan" | "compareTo" | "add" | "sub" | "major" | "minor"
            | "patch" | "getScheme" | "getHostname" | "getHost" | "getPort" | "getEscapedPath"
            | "getQuery" => CallEstimate::only(one),
            "_==_" if args.len() == 2 && args[0].ty.same_kubernetes_type(&args[1].ty) => {
                match args[0].ty.library_type()? {
                    IP | CIDR | QUANTITY | SEMVER => CallEstimate::only(one),
                    NAMED_FORMAT => CallEstimate::only(
                        Estimate {
                            min: 1,
                            max: MAX_FORMAT_SIZE,
                        }
                        .factor(traversal),
                    ),
                    URL => {
                        // Upstream takes the right operand's size twice.
                        let size = args[1].size.map_or(one, |s| s.union(s));
                        CallEstimate::only(
                            Estimate {
                                min: 1,
                                max: size.max,
                            }
                            .factor(traversal),
                        )
                    }
                    _ => return None,
                }
            }
            _ => return None,
        };
        Some(estimate)
    }
}

/// Kubernetes' `listElementNode`: the items of a list (a map's keys), at the list's
/// path when it has one.
fn element_node<'e, 'd>(list: &Node<'e, 'd>) -> Option<Node<'e, 'd>> {
    let ty = list.ty.first_param()?.clone();
    let path = list.path.clone().map(|mut p| {
        p.push("@items".into());
        p
    });
    Some(Node {
        path,
        ty,
        expr: None,
        size: None,
    })
}

#[derive(Clone, Copy)]
enum IterVar {
    Single,
    Key,
    Value,
}

/// cel-go's `isBind`: `cel.bind(v, init, result)` expands to a comprehension over no
/// items whose accumulator is the bound variable.
fn is_bind(c: &ComprehensionExpr) -> bool {
    matches!(&c.iter_range.expr, Expr::List(l) if l.elements.is_empty())
        && matches!(&c.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if !b.inner())
        && c.accu_var != "@result"
}

fn literal_type<'d>(l: &LiteralValue) -> Ty<'d> {
    match l {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(_) => Ty::Bytes,
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::Null => Ty::Null,
        LiteralValue::String(_) => Ty::String,
        LiteralValue::UInt(_) => Ty::Uint,
    }
}

/// cel-go's `computeExprSize`: a literal's size (a string's in characters), a list or
/// map literal's number of entries.
fn literal_size(e: &IdedExpr) -> Option<Estimate> {
    let v = match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => s.inner().chars().count() as u64,
        Expr::Literal(LiteralValue::Bytes(b)) => b.inner().len() as u64,
        Expr::Literal(_) => 1,
        Expr::List(l) => l.elements.len() as u64,
        Expr::Map(m) => m.entries.len() as u64,
        _ => return None,
    };
    Some(Estimate::fixed(v))
}

fn element<'d>(t: &Ty<'d>) -> Ty<'d> {
    match t {
        Ty::List(e) => (**e).clone(),
        Ty::Dyn => Ty::Dyn,
        _ => Ty::Unknown,
    }
}

fn map_key<'d>(t: &Ty<'d>) -> Ty<'d> {
    match t {
        Ty::Map(k, _) => (**k).clone(),
        Ty::Dyn => Ty::Dyn,
        _ => Ty::Unknown,
    }
}

fn map_value<'d>(t: &Ty<'d>) -> Ty<'d> {
    match t {
        Ty::Map(_, v) => (**v).clone(),
        Ty::Dyn => Ty::Dyn,
        _ => Ty::Unknown,
    }
}

/// The overloads cel-go's checker would pick for the call, as far as their estimates
/// differ: all that a `dyn` operand admits (their estimates are united), the
/// constant-cost one where an operand's type is not known here.
fn overloads(function: &str, target: Option<&Ty<'_>>, args: &[Ty<'_>]) -> Vec<Overload> {
    use Overload::*;
    let all_dyn = !args.is_empty() && args.iter().all(|a| matches!(a, Ty::Dyn));
    let concrete = args.iter().find(|a| a.is_concrete());
    match function {
        "_[_]" => match args.first() {
            Some(Ty::List(_)) => vec![IndexList],
            Some(Ty::Map(..)) => vec![IndexMap],
            Some(Ty::Dyn) => vec![IndexList, IndexMap],
            _ => vec![Other],
        },
        "_+_" => match concrete {
            Some(Ty::String) => vec![AddString],
            Some(Ty::Bytes) => vec![AddBytes],
            Some(Ty::List(_)) => vec![AddList],
            None if all_dyn => vec![Other, AddString, AddBytes, AddList],
            _ => vec![Other],
        },
        "_<_" | "_<=_" | "_>_" | "_>=_" => match concrete {
            Some(Ty::String | Ty::Bytes) => vec![CompareStrings],
            None if all_dyn => vec![Other, CompareStrings],
            _ => vec![Other],
        },
        "_==_" => vec![Equals],
        "_!=_" => vec![NotEquals],
        "@in" => match args.get(1) {
            Some(Ty::List(_)) => vec![InList],
            Some(Ty::Dyn) => vec![InList, Other],
            _ => vec![Other],
        },
        "matches" if target.is_some() && args.len() == 1 => vec![MatchesString],
        "contains" if target.is_some() && args.len() == 1 => vec![ContainsString],
        "startsWith" | "endsWith" if target.is_some() && args.len() == 1 => {
            vec![StartsOrEndsWith]
        }
        "_&&_" | "_||_" => vec![Logical],
        "_?_:_" => vec![Conditional],
        "bytes" => match args.first() {
            Some(Ty::String) => vec![StringToBytes],
            Some(Ty::Dyn) => vec![StringToBytes, Other],
            _ => vec![Other],
        },
        "string" => match args.first() {
            Some(Ty::Bytes) => vec![BytesToString],
            Some(Ty::Dyn) => vec![BytesToString, Other],
            _ => vec![Other],
        },
        "format" if target.is_some() => vec![FormatString],
        "strings.quote" => vec![QuoteString],
        "sets.contains" | "sets.intersects" => vec![Sets(1)],
        "sets.equivalent" => vec![Sets(2)],
        "ip" if target.is_some() => vec![CidrIp],
        "containsIP" if matches!(args.first(), Some(Ty::String)) => vec![ContainsIpString],
        "containsCIDR" if matches!(args.first(), Some(Ty::String)) => vec![ContainsCidrString],
        _ => vec![Other],
    }
}
