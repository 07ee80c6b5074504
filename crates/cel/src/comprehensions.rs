//! cel-go's two-variable comprehensions (`ext.TwoVarComprehensions`, in Kubernetes'
//! CEL environment since 1.32): `range.all(k, v, p)`, `exists`, `existsOne`
//! (`exists_one`), `transformList`, `transformMap` and `transformMapEntry`, where `k`
//! is a list's index or a map's key and `v` the item or value.
//!
//! The optional library's `optMap` and `optFlatMap` macros are expanded here too.
//!
//! The `cel` crate's parser expands only the one-variable macros, and its interpreter
//! binds one iteration variable. [`expand`] turns the calls into cel-go's
//! comprehensions with two variables (what the type checker and the cost estimate
//! read), and [`runnable`] rewrites such a comprehension into ones the interpreter
//! runs: the range bound once, the loop over its indices (or keys), and `v` bound to
//! the range's entry in the loop's step. A binding is a comprehension over no items
//! whose accumulator is the bound variable (cel-go's `cel.bind`).

use kube_cel::cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr,
};
use kube_cel::cel::extractors::Arguments;
use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Context, ExecutionError, ResolveResult, Value};

use crate::typecheck;

/// cel-go's accumulator of a macro.
const ACCUMULATOR: &str = "@result";
/// The entries of a range to iterate: a list's indices, a map's keys.
const INDICES: &str = "@indices";
/// Inserts a key and value (or a map's entries) into a map, refusing a key it has.
const MAP_INSERT: &str = "cel.@mapInsert";
/// The bound range of a two-variable comprehension.
const RANGE: &str = "@range";
/// The iteration variable of a binding, which never iterates.
const UNUSED: &str = "#unused";

/// The receiver macros of two iteration variables (with three arguments, or four for
/// a transform with a filter).
const MACROS: &[&str] = &[
    "all",
    "exists",
    "existsOne",
    "exists_one",
    "transformList",
    "transformMap",
    "transformMapEntry",
];

/// Expands the two-variable macros and `optMap`/`optFlatMap` in `e`; cel-go's issue
/// (`argument must be a simple name`, ...) for a macro whose variables are not two
/// distinct names.
pub(crate) fn expand(e: &mut IdedExpr, source: &str) -> Result<(), String> {
    let mut ids = IdAllocator(max_id(e) + 1);
    expand_in(e, source, &mut ids)
}

struct IdAllocator(u64);

impl IdAllocator {
    fn node(&mut self, expr: Expr) -> IdedExpr {
        self.0 += 1;
        IdedExpr { id: self.0, expr }
    }

    fn accumulator(&mut self) -> IdedExpr {
        self.node(Expr::Ident(ACCUMULATOR.to_string()))
    }

    fn call(&mut self, function: &str, args: Vec<IdedExpr>) -> IdedExpr {
        self.node(Expr::Call(CallExpr {
            func_name: function.to_string(),
            target: None,
            args,
        }))
    }

    fn literal(&mut self, value: LiteralValue) -> IdedExpr {
        self.node(Expr::Literal(value))
    }
}

fn max_id(e: &IdedExpr) -> u64 {
    let mut max = e.id;
    visit_children(e, &mut |child| max = max.max(max_id(child)));
    max
}

/// Calls `f` on each direct sub-expression of `e`, in source order.
pub(crate) fn visit_children(e: &IdedExpr, f: &mut impl FnMut(&IdedExpr)) {
    match &e.expr {
        Expr::Call(c) => {
            c.target.as_deref().into_iter().chain(&c.args).for_each(f);
        }
        Expr::Select(s) => f(&s.operand),
        Expr::List(l) => l.elements.iter().for_each(f),
        Expr::Map(MapExpr { entries }) => {
            for entry in entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    f(&m.key);
                    f(&m.value);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(field) = &entry.expr {
                    f(&field.value);
                }
            }
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                f(x);
            }
        }
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => {}
    }
}

fn children_mut(e: &mut IdedExpr) -> Vec<&mut IdedExpr> {
    match &mut e.expr {
        Expr::Call(c) => c
            .target
            .as_deref_mut()
            .into_iter()
            .chain(&mut c.args)
            .collect(),
        Expr::Select(s) => vec![&mut *s.operand],
        Expr::List(l) => l.elements.iter_mut().collect(),
        Expr::Map(MapExpr { entries }) => entries
            .iter_mut()
            .flat_map(|entry| match &mut entry.expr {
                EntryExpr::MapEntry(m) => vec![&mut m.key, &mut m.value],
                EntryExpr::StructField(f) => vec![&mut f.value],
            })
            .collect(),
        Expr::Struct(s) => s
            .entries
            .iter_mut()
            .filter_map(|entry| match &mut entry.expr {
                EntryExpr::StructField(f) => Some(&mut f.value),
                EntryExpr::MapEntry(_) => None,
            })
            .collect(),
        Expr::Comprehension(c) => vec![
            &mut c.iter_range,
            &mut c.accu_init,
            &mut c.loop_cond,
            &mut c.loop_step,
            &mut c.result,
        ],
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => Vec::new(),
    }
}

fn expand_in(e: &mut IdedExpr, source: &str, ids: &mut IdAllocator) -> Result<(), String> {
    for child in children_mut(e) {
        expand_in(child, source, ids)?;
    }
    expand_call(e, source, ids)
}

/// Expands `e` if it is a two-variable macro's call. Kept out of [`expand_in`]'s
/// recursion: its frame is large, and expressions nest 250 deep on a worker's stack.
#[inline(never)]
fn expand_call(e: &mut IdedExpr, source: &str, ids: &mut IdAllocator) -> Result<(), String> {
    let Expr::Call(call) = &mut e.expr else {
        return Ok(());
    };
    let name = call.func_name.as_str();
    if matches!(name, "optMap" | "optFlatMap") && call.target.is_some() && call.args.len() == 2 {
        return expand_optional_map(e, source, ids);
    }
    let arity_fits = match name {
        "transformList" | "transformMap" | "transformMapEntry" => matches!(call.args.len(), 3 | 4),
        _ => call.args.len() == 3,
    };
    if call.target.is_none() || !MACROS.contains(&name) || !arity_fits {
        return Ok(());
    }
    let (key, value) = iteration_variables(&call.args[0], &call.args[1], source)?;
    let name = name.to_string();
    let range = call.target.take().map(|t| *t).unwrap_or_default();
    let mut args = std::mem::take(&mut call.args).into_iter().skip(2);
    let (first, second) = (args.next().unwrap_or_default(), args.next());
    let (filter, transform) = match second {
        Some(transform) => (Some(first), transform),
        None => (None, first),
    };
    let comprehension = |accu_init, loop_cond, loop_step, result| ComprehensionExpr {
        iter_range: range,
        iter_var: key.clone(),
        iter_var2: Some(value),
        accu_var: ACCUMULATOR.to_string(),
        accu_init,
        loop_cond,
        loop_step,
        result,
    };
    let expanded = match name.as_str() {
        "all" | "exists" => {
            let all = name == "all";
            let init = ids.literal(LiteralValue::Boolean(all.into()));
            let accu = ids.accumulator();
            let condition = if all {
                ids.call("@not_strictly_false", vec![accu])
            } else {
                let not = ids.call("!_", vec![accu]);
                ids.call("@not_strictly_false", vec![not])
            };
            let accu = ids.accumulator();
            let step = ids.call(if all { "_&&_" } else { "_||_" }, vec![accu, transform]);
            let result = ids.accumulator();
            comprehension(init, condition, step, result)
        }
        "existsOne" | "exists_one" => {
            let init = ids.literal(LiteralValue::Int(0.into()));
            let condition = ids.literal(LiteralValue::Boolean(true.into()));
            let (accu, one) = (ids.accumulator(), ids.literal(LiteralValue::Int(1.into())));
            let plus_one = ids.call("_+_", vec![accu, one]);
            let accu = ids.accumulator();
            let step = ids.call("_?_:_", vec![transform, plus_one, accu]);
            let (accu, one) = (ids.accumulator(), ids.literal(LiteralValue::Int(1.into())));
            let result = ids.call("_==_", vec![accu, one]);
            comprehension(init, condition, step, result)
        }
        _ => {
            let list = name == "transformList";
            let init = if list {
                ids.node(Expr::List(ListExpr::new(Vec::new())))
            } else {
                ids.node(Expr::Map(MapExpr {
                    entries: Vec::new(),
                }))
            };
            let condition = ids.literal(LiteralValue::Boolean(true.into()));
            let accu = ids.accumulator();
            let mut step = match name.as_str() {
                "transformList" => {
                    let item = ids.node(Expr::List(ListExpr::new(vec![transform])));
                    ids.call("_+_", vec![accu, item])
                }
                "transformMap" => {
                    let k = ids.node(Expr::Ident(key.clone()));
                    ids.call(MAP_INSERT, vec![accu, k, transform])
                }
                _ => ids.call(MAP_INSERT, vec![accu, transform]),
            };
            if let Some(filter) = filter {
                let accu = ids.accumulator();
                step = ids.call("_?_:_", vec![filter, step, accu]);
            }
            let result = ids.accumulator();
            comprehension(init, condition, step, result)
        }
    };
    e.expr = Expr::Comprehension(Box::new(expanded));
    Ok(())
}

/// The optional library's `opt.optMap(v, expr)` and `opt.optFlatMap(v, expr)`, as
/// cel-go expands them: `opt.hasValue() ? optional.of(expr) : optional.none()` (without
/// `optional.of` for `optFlatMap`), with `v` bound to `opt.value()` in `expr`.
fn expand_optional_map(
    e: &mut IdedExpr,
    source: &str,
    ids: &mut IdAllocator,
) -> Result<(), String> {
    let Expr::Call(call) = &mut e.expr else {
        return Ok(());
    };
    let flat = call.func_name == "optFlatMap";
    let Expr::Ident(variable) = &call.args[0].expr else {
        let message = format!(
            "{}() variable name must be a simple identifier",
            call.func_name
        );
        return Err(typecheck::issue_text(source, 0, &message));
    };
    let variable = variable.clone();
    let Some(target) = call.target.take().map(|t| *t) else {
        return Ok(());
    };
    let body = call.args.pop().unwrap_or_default();
    let member = |ids: &mut IdAllocator, function: &str, mut receiver: IdedExpr| {
        renumber(&mut receiver, ids);
        ids.node(Expr::Call(CallExpr {
            func_name: function.to_string(),
            target: Some(Box::new(receiver)),
            args: Vec::new(),
        }))
    };
    let has_value = member(ids, "hasValue", target.clone());
    let value = member(ids, "value", target);
    let empty = ids.node(Expr::List(ListExpr::new(Vec::new())));
    let never = ids.literal(LiteralValue::Boolean(false.into()));
    let step = ids.node(Expr::Ident(variable.clone()));
    let mut mapped = ids.node(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: empty,
        iter_var: UNUSED.to_string(),
        iter_var2: None,
        accu_var: variable,
        accu_init: value,
        loop_cond: never,
        loop_step: step,
        result: body,
    })));
    if !flat {
        mapped = ids.call("optional.of", vec![mapped]);
    }
    let none = ids.call("optional.none", Vec::new());
    e.expr = Expr::Call(CallExpr {
        func_name: "_?_:_".to_string(),
        target: None,
        args: vec![has_value, mapped, none],
    });
    Ok(())
}

/// Gives `e` and everything in it fresh ids (a copy of a subexpression).
fn renumber(e: &mut IdedExpr, ids: &mut IdAllocator) {
    ids.0 += 1;
    e.id = ids.0;
    for child in children_mut(e) {
        renumber(child, ids);
    }
}

/// The two iteration variables of a macro (cel-go's `extractIterVars`).
fn iteration_variables(
    first: &IdedExpr,
    second: &IdedExpr,
    source: &str,
) -> Result<(String, String), String> {
    let name = |e: &IdedExpr| match &e.expr {
        Expr::Ident(n) => Ok(n.clone()),
        _ => Err(typecheck::issue_text(
            source,
            0,
            "argument must be a simple name",
        )),
    };
    let (key, value) = (name(first)?, name(second)?);
    if key == value {
        return Err(typecheck::issue_text(
            source,
            0,
            &format!("duplicate variable name: {key}"),
        ));
    }
    if key == ACCUMULATOR || value == ACCUMULATOR || key == "__result__" || value == "__result__" {
        return Err(typecheck::issue_text(
            source,
            0,
            "iteration variable overwrites accumulator variable",
        ));
    }
    Ok((key, value))
}

/// Rewrites a two-variable comprehension into ones the interpreter runs (see the
/// module's doc). The bound range's name cannot be written in an expression; a nested
/// comprehension's shadows it only inside its own loop, where the outer's entry is
/// already bound.
pub(crate) fn runnable(c: ComprehensionExpr, id: u64) -> Expr {
    let Some(value) = c.iter_var2 else {
        return Expr::Comprehension(Box::new(c));
    };
    let range_var = RANGE;
    let node = |expr| IdedExpr { id, expr };
    let ident = |name: &str| node(Expr::Ident(name.to_string()));
    let entry = node(Expr::Call(CallExpr {
        func_name: "_[_]".to_string(),
        target: None,
        args: vec![ident(range_var), ident(&c.iter_var)],
    }));
    let bind_value = |body: IdedExpr| node(bind(&value, entry.clone(), body, id));
    let indices = node(Expr::Call(CallExpr {
        func_name: INDICES.to_string(),
        target: None,
        args: vec![ident(range_var)],
    }));
    let loop_over_indices = node(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: indices,
        iter_var: c.iter_var,
        iter_var2: None,
        accu_var: c.accu_var,
        accu_init: c.accu_init,
        // The macros' conditions read only the accumulator (the interpreter evaluates
        // a condition before it binds the iteration's variable).
        loop_cond: c.loop_cond,
        loop_step: bind_value(c.loop_step),
        result: c.result,
    })));
    bind(range_var, c.iter_range, loop_over_indices, id)
}

/// `body` with `name` bound to `value`: a comprehension over no items.
fn bind(name: &str, value: IdedExpr, body: IdedExpr, id: u64) -> Expr {
    let node = |expr| IdedExpr { id, expr };
    Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: node(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: UNUSED.to_string(),
        iter_var2: None,
        accu_var: name.to_string(),
        accu_init: value,
        loop_cond: node(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: node(Expr::Ident(name.to_string())),
        result: body,
    }))
}

/// Adds `@indices` and `cel.@mapInsert` to `ctx`.
pub(crate) fn register(ctx: &mut Context<'_>) {
    ctx.add_function(INDICES, |range: Value| -> ResolveResult {
        match range {
            Value::List(items) => Ok(Value::List(
                (0..items.len())
                    .map(|i| Value::Int(i64::try_from(i).unwrap_or(i64::MAX)))
                    .collect::<Vec<_>>()
                    .into(),
            )),
            Value::Map(m) => Ok(Value::List(
                m.map
                    .keys()
                    .cloned()
                    .map(Value::from)
                    .collect::<Vec<_>>()
                    .into(),
            )),
            other => Err(ExecutionError::function_error(
                INDICES,
                format!("no such overload: cannot iterate over {other:?}"),
            )),
        }
    });
    ctx.add_function(MAP_INSERT, |Arguments(args): Arguments| -> ResolveResult {
        let insert_error = |k: &Key| {
            ExecutionError::function_error(
                MAP_INSERT,
                format!("insert failed: key {k:?} already exists"),
            )
        };
        match args.as_slice() {
            [Value::Map(m), key, value] => {
                let key: Key = key.clone().try_into().map_err(|_| {
                    ExecutionError::function_error(MAP_INSERT, "unsupported key type")
                })?;
                if m.map.contains_key(&key) {
                    return Err(insert_error(&key));
                }
                let mut map = (*m.map).clone();
                map.insert(key, value.clone());
                Ok(Value::Map(Map { map: map.into() }))
            }
            [Value::Map(m), Value::Map(update)] => {
                let mut map = (*m.map).clone();
                for (k, v) in update.map.iter() {
                    if map.contains_key(k) {
                        return Err(insert_error(k));
                    }
                    map.insert(k.clone(), v.clone());
                }
                Ok(Value::Map(Map { map: map.into() }))
            }
            _ => Err(ExecutionError::function_error(
                MAP_INSERT,
                "no such overload",
            )),
        }
    });
}
