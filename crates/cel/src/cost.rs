//! A runtime cost limit for CEL evaluation (upstream's `PerCallLimit` and
//! `RuntimeCELCostBudget`, `k8s.io/apiserver/pkg/apis/cel/config.go`).
//!
//! The rewrite of what runs also spells each optional selection `x.?f` as `x[?'f']`
//! (the crate's own fails on an absent field) and turns two-variable comprehensions
//! into ones the interpreter runs ([`crate::comprehensions`]).
//!
//! The `cel` crate has no cost tracking, so the cost is metered by rewriting the
//! expression: each comprehension's loop condition `c` (the expansion of `all`,
//! `exists`, `exists_one`, `map`, `filter`) becomes `@cost(w, c, accumulator)`, where
//! `w` is the number of nodes of the loop's condition and step, and `@cost` adds `w`
//! to the evaluation's meter, plus a tenth of the accumulator's size when it is a list
//! or map (`map` and `filter` build their result by concatenation, which copies the
//! accumulator in this interpreter, so their work grows with the square of the list),
//! and fails once the meter passes the limit. One evaluation costs the
//! number of its nodes outside comprehension bodies plus `w` per iteration, which
//! is the shape of upstream's actual cost (one unit per evaluated node). Unlike
//! upstream, a function call costs one unit whatever the size of its arguments
//! (upstream charges string and list functions by size); every loop the language
//! can express is a comprehension, so this bounds the work of an evaluation.

use kube_cel::cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue};
use kube_cel::cel::common::types::CelInt;
use kube_cel::cel::{Context, ExecutionError, ResolveResult, Value};

/// Upstream `celconfig.PerCallLimit`: the most one expression may cost.
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// Upstream `celconfig.RuntimeCELCostBudget`: the most the expressions of one policy
/// evaluation may cost together.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// cel-go's error for an evaluation past its cost limit.
pub const COST_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// Upstream's error once a policy evaluation has spent its [`RUNTIME_COST_BUDGET`].
pub const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// Accumulator elements copied per unit of cost.
const ACCUMULATOR_COPIES_PER_UNIT: usize = 10;

/// The metering function's name; `@` cannot start a name the parser accepts, so no
/// expression can call it.
const COST_FUNCTION: &str = "@cost";

/// `e` with every comprehension metered, and the cost of `e` outside comprehension
/// bodies.
pub(crate) fn meter(e: &IdedExpr) -> (IdedExpr, u64) {
    let mut out = e.clone();
    let base = rewrite(&mut out);
    (out, base)
}

/// The cost of a map literal's or a struct's entries (keys and values).
fn rewrite_entries(entries: &mut [kube_cel::cel::common::ast::IdedEntryExpr]) -> u64 {
    use kube_cel::cel::common::ast::EntryExpr;
    entries
        .iter_mut()
        .map(|entry| match &mut entry.expr {
            EntryExpr::MapEntry(me) => rewrite(&mut me.key) + rewrite(&mut me.value),
            EntryExpr::StructField(f) => rewrite(&mut f.value),
        })
        .sum()
}

const OPTIONAL_SELECT: &str = "_?._";
const OPTIONAL_INDEX: &str = "_[?_]";

/// Meters the comprehensions in `e` (innermost first) and returns `e`'s node count
/// outside comprehension bodies.
fn rewrite(e: &mut IdedExpr) -> u64 {
    match &mut e.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => 1,
        Expr::Call(call) => {
            // The `cel` crate's `x.?f` fails when `x` has no `f` instead of giving
            // `optional.none()`; `x[?'f']` means the same for maps (what objects are
            // here) and evaluates as upstream does.
            if call.func_name == OPTIONAL_SELECT {
                call.func_name = OPTIONAL_INDEX.to_string();
            }
            let target = call.target.as_deref_mut().map_or(0, rewrite);
            1 + target + call.args.iter_mut().map(rewrite).sum::<u64>()
        }
        Expr::Select(s) => 1 + rewrite(&mut s.operand),
        Expr::List(l) => 1 + l.elements.iter_mut().map(rewrite).sum::<u64>(),
        Expr::Map(m) => 1 + rewrite_entries(&mut m.entries),
        Expr::Struct(s) => 1 + rewrite_entries(&mut s.entries),
        Expr::Comprehension(c) if c.iter_var2.is_some() => {
            let two_variables = std::mem::take(&mut **c);
            e.expr = crate::comprehensions::runnable(two_variables, e.id);
            rewrite(e)
        }
        Expr::Comprehension(c) => {
            let outside = rewrite(&mut c.iter_range) + rewrite(&mut c.accu_init);
            let per_iteration = (rewrite(&mut c.loop_cond) + rewrite(&mut c.loop_step)).max(1);
            let result = rewrite(&mut c.result);
            let cond = std::mem::take(&mut c.loop_cond);
            c.loop_cond = IdedExpr {
                id: cond.id,
                expr: Expr::Call(CallExpr {
                    func_name: COST_FUNCTION.to_string(),
                    target: None,
                    args: vec![
                        IdedExpr {
                            id: cond.id,
                            expr: Expr::Literal(LiteralValue::Int(CelInt::from(
                                i64::try_from(per_iteration).unwrap_or(i64::MAX),
                            ))),
                        },
                        IdedExpr {
                            id: cond.id,
                            expr: Expr::Ident(c.accu_var.clone()),
                        },
                        cond,
                    ],
                }),
            };
            1 + outside + result
        }
    }
}

thread_local! {
    /// The meter of the evaluation running on this thread: (spent, limit). An
    /// evaluation runs start to end on one thread (`Value::resolve` is synchronous), so
    /// the shared context's `@cost` finds its meter here instead of capturing one,
    /// which lets every evaluation share one context of functions.
    static CURRENT: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}

/// The cost spent by one evaluation on this thread, from [`Meter::start`] until
/// dropped.
pub(crate) struct Meter {
    /// The meter of an evaluation this one runs inside, put back when it ends.
    outer: Option<(u64, u64)>,
}

impl Meter {
    /// Starts metering an evaluation at `base` (its cost outside loops).
    pub(crate) fn start(base: u64, limit: u64) -> Self {
        Meter {
            outer: CURRENT.replace(Some((base, limit))),
        }
    }

    pub(crate) fn spent(&self) -> u64 {
        CURRENT.get().map_or(0, |(spent, _)| spent)
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        CURRENT.set(self.outer);
    }
}

/// Adds the `@cost` function, counting into the evaluation's [`Meter`], to `ctx`.
pub(crate) fn register(ctx: &mut Context<'_>) {
    ctx.add_function(
        COST_FUNCTION,
        |weight: i64, accumulator: Value, condition: Value| -> ResolveResult {
            let copied = match &accumulator {
                Value::List(l) => l.len(),
                Value::Map(m) => m.map.len(),
                _ => 0,
            };
            let weight = u64::try_from(weight).unwrap_or(0)
                + u64::try_from(copied / ACCUMULATOR_COPIES_PER_UNIT).unwrap_or(u64::MAX);
            // Outside a metered evaluation nothing is counted (none runs one).
            let Some((spent, limit)) = CURRENT.get() else {
                return Ok(condition);
            };
            let now = spent.saturating_add(weight);
            CURRENT.set(Some((now, limit)));
            if now > limit {
                return Err(ExecutionError::function_error(
                    COST_FUNCTION,
                    COST_LIMIT_EXCEEDED,
                ));
            }
            Ok(condition)
        },
    );
}

/// An evaluation spent more than what remained of its [`Budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBudget;

impl std::fmt::Display for OutOfBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(OUT_OF_BUDGET)
    }
}

/// A cost budget shared by several evaluations (upstream's `remainingBudget` of one
/// policy evaluation): each expression gets at most [`PER_CALL_LIMIT`] and what
/// remains.
#[derive(Debug, Clone)]
pub struct Budget {
    remaining: u64,
}

impl Budget {
    pub fn new(total: u64) -> Self {
        Budget { remaining: total }
    }

    /// What is left.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Evaluates `p`, charging its cost; [`OutOfBudget`] when it cost more than
    /// remained (nothing remains after that).
    pub fn eval(
        &mut self,
        activation: &crate::Activation,
        p: &crate::Program,
    ) -> Result<Result<Value, String>, OutOfBudget> {
        let (result, spent) = activation.eval_metered(p, PER_CALL_LIMIT.min(self.remaining));
        if spent > self.remaining {
            self.remaining = 0;
            return Err(OutOfBudget);
        }
        self.remaining -= spent;
        Ok(result)
    }

    /// [`Budget::eval`] of a boolean expression.
    pub fn eval_bool(
        &mut self,
        activation: &crate::Activation,
        p: &crate::Program,
    ) -> Result<Result<bool, String>, OutOfBudget> {
        Ok(self.eval(activation, p)?.and_then(crate::expect_bool))
    }

    /// [`Budget::eval`] of a string expression.
    pub fn eval_string(
        &mut self,
        activation: &crate::Activation,
        p: &crate::Program,
    ) -> Result<Result<String, String>, OutOfBudget> {
        Ok(self.eval(activation, p)?.and_then(crate::expect_string))
    }
}
