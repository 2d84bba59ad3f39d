//! The cost meter of CEL evaluations (SPEC §14): one unit per comprehension iteration and per
//! function call, counted, never timed, so the same expression and trace stop at the same
//! point on every run.
//!
//! The `cel` crate has no cost hook, so compilation rewrites the tree: every call `f(..)`
//! becomes `@cost() ? f(..) : false`, and so does the per-iteration part of each
//! comprehension's step. `@cost` (a name CEL source cannot spell) spends one unit of the
//! thread's meter and answers `true`, or an error once the meter is exhausted; the conditional
//! is lazy, so an exhausted meter skips the rest of the tree. The rewrite keeps the step shapes
//! the crate's comprehension fast paths recognise (`@result && x`, `@result + [x]`,
//! `c ? @result + [x] : @result`).
use std::cell::RefCell;

use cel::common::ast::{operators, CallExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::CelBool;
use cel::common::value::CowVal;
use cel::{Env, ExecutionError};

use crate::work::{CancelFlag, Work};

/// The metering function's name (see [`super::plan`], which reads the instrumented tree).
pub const COST: &str = "@cost";
/// Units between two looks at the cancellation flag.
const CANCEL_EVERY: u64 = 1024;

/// Why a metered evaluation stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// More than the expression's cost limit.
    CostLimit,
    /// More than the trace's work budget left.
    WorkLimit,
    Cancelled,
}

/// The units one evaluation spends: shared by the interpreter's `@cost` and the fast path
/// (see [`super::eval`]), so both stop at the same unit for the same reason.
pub struct Meter {
    used: u64,
    cost_limit: u64,
    /// Units the trace's work meter has left.
    work_left: u64,
    cancel: Option<CancelFlag>,
    stop: Option<Why>,
}

impl Meter {
    /// A meter for one evaluation with `cost_limit` and what `work` has left.
    pub fn new(cost_limit: u64, work: &Work) -> Self {
        Meter {
            used: 0,
            cost_limit,
            work_left: work.limit().saturating_sub(work.used()) / WORK_PER_COST_UNIT,
            cancel: work.cancel_flag().cloned(),
            stop: None,
        }
    }

    /// Spends one unit; `false` once the evaluation must stop (and from then on, without
    /// counting further units).
    #[inline]
    pub fn spend(&mut self) -> bool {
        if self.stop.is_none() {
            self.used += 1;
            if self.used > self.cost_limit {
                self.stop = Some(Why::CostLimit);
            } else if self.used > self.work_left {
                self.stop = Some(Why::WorkLimit);
            } else if self.used.is_multiple_of(CANCEL_EVERY)
                && self.cancel.as_ref().is_some_and(CancelFlag::is_cancelled)
            {
                self.stop = Some(Why::Cancelled);
            }
        }
        self.stop.is_none()
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn stop(&self) -> Option<Why> {
        self.stop
    }
}

thread_local! {
    static METER: RefCell<Option<Meter>> = const { RefCell::new(None) };
}

/// Declares `@cost` in `env`.
pub fn register(env: &mut Env) {
    env.add_overload(COST, "cost_meter", vec![], spend_one)
        .expect("@cost is declared once, and no standard function has that name");
}

fn spend_one<'b, 'v>(_: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let ok = METER.with_borrow_mut(|m| match m {
        // Outside a metered evaluation (never in grading) nothing is counted.
        None => true,
        Some(m) => m.spend(),
    });
    if ok {
        Ok(CowVal::Borrowed(&CelBool::TRUE))
    } else {
        Err(ExecutionError::function_error(COST, "the evaluation's cost budget is spent"))
    }
}

/// Work units one cost unit weighs against the trace's work meter: a CEL function call or
/// comprehension step costs about 0.7 µs (release), a pair comparison of the matching about
/// 50 ns, so `max_work_units` bounds grading time whatever a suite is made of.
pub const WORK_PER_COST_UNIT: u64 = 16;

/// Runs `eval` with this thread's meter set to `cost_limit` and what `work` has left; answers
/// its outcome, the units used and why it stopped early, if it did.
pub fn metered<T>(cost_limit: u64, work: &Work, eval: impl FnOnce() -> T) -> (T, u64, Option<Why>) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            METER.with_borrow_mut(Option::take);
        }
    }
    METER.with_borrow_mut(|m| *m = Some(Meter::new(cost_limit, work)));
    let reset = Reset;
    let out = eval();
    let (used, stop) = METER.with_borrow(|m| m.as_ref().map_or((0, None), |m| (m.used, m.stop)));
    drop(reset);
    (out, used, stop)
}

/// Rewrites `e` so that evaluating it spends its cost (see the module docs).
pub fn instrument(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                instrument(target);
            }
            call.args.iter_mut().for_each(instrument);
            metered_node(e);
        }
        Expr::Comprehension(c) => {
            instrument(&mut c.iter_range);
            instrument(&mut c.accu_init);
            let accu = c.accu_var.clone();
            step(&mut c.loop_step, &accu);
        }
        Expr::Select(s) => instrument(&mut s.operand),
        Expr::List(l) => l.elements.iter_mut().for_each(instrument),
        Expr::Map(m) => {
            for entry in &mut m.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &mut entry.expr {
                    instrument(&mut me.key);
                    instrument(&mut me.value);
                }
            }
        }
        Expr::Struct(st) => {
            for entry in &mut st.entries {
                if let cel::common::ast::EntryExpr::StructField(f) = &mut entry.expr {
                    instrument(&mut f.value);
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn is_ident(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == name)
}

/// The elements of `@result + [..]`, when `e` is that.
fn appended<'e>(e: &'e mut IdedExpr, accu: &str) -> Option<&'e mut Vec<IdedExpr>> {
    let Expr::Call(call) = &mut e.expr else { return None };
    if call.func_name != operators::ADD || call.target.is_some() || call.args.len() != 2 {
        return None;
    }
    if !is_ident(&call.args[0], accu) {
        return None;
    }
    match &mut call.args[1].expr {
        Expr::List(l) => Some(&mut l.elements),
        _ => None,
    }
}

/// Instruments a comprehension's loop step, one unit per iteration on the part evaluated on
/// every iteration, keeping the step's shape.
fn step(e: &mut IdedExpr, accu: &str) {
    // `@result && x` / `@result || x` (all, exists): x.
    if let Expr::Call(call) = &mut e.expr {
        let fold = (call.func_name == operators::LOGICAL_AND
            || call.func_name == operators::LOGICAL_OR)
            && call.target.is_none()
            && call.args.len() == 2
            && is_ident(&call.args[0], accu);
        if fold {
            instrument(&mut call.args[1]);
            metered_node(&mut call.args[1]);
            return;
        }
        // `guard ? step : @result` (filter, exists_one): the guard.
        let guarded = call.func_name == operators::CONDITIONAL
            && call.target.is_none()
            && call.args.len() == 3
            && is_ident(&call.args[2], accu);
        if guarded {
            instrument(&mut call.args[0]);
            metered_node(&mut call.args[0]);
            let inner = &mut call.args[1];
            match appended(inner, accu) {
                Some(items) => items.iter_mut().for_each(instrument),
                None => instrument(inner),
            }
            return;
        }
    }
    // `@result + [x]` (map): x.
    if let Some(items) = appended(e, accu) {
        items.iter_mut().for_each(instrument);
        if let Some(first) = items.first_mut() {
            metered_node(first);
            return;
        }
    }
    instrument(e);
    metered_node(e);
}

/// `e` becomes `@cost() ? e : false`.
fn metered_node(e: &mut IdedExpr) {
    let id = e.id;
    let inner = std::mem::take(e);
    let cost = IdedExpr {
        id,
        expr: Expr::Call(CallExpr { func_name: COST.to_owned(), target: None, args: vec![] }),
    };
    let otherwise = IdedExpr { id, expr: Expr::Literal(LiteralValue::Boolean(CelBool::FALSE)) };
    *e = IdedExpr {
        id,
        expr: Expr::Call(CallExpr {
            func_name: operators::CONDITIONAL.to_owned(),
            target: None,
            args: vec![cost, inner, otherwise],
        }),
    };
}
