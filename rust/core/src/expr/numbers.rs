//! Mixed numbers (SPEC §14): arithmetic and ordering between `int`, `uint` and `double`
//! operands convert both to `double`, so `1.0 - c.args.x` works when `x` is an integer;
//! equality stays CEL's. Also the `math.*` functions.
//!
//! The `cel` crate evaluates operators in its interpreter, not through overloads, and rejects
//! `int - double`. Compilation therefore renames each arithmetic and ordering operator to a
//! function of ours (`@sub`, `@lt`, ...; names CEL source cannot spell) that converts mixed
//! numbers and otherwise does exactly what the crate's operator does, errors included. The
//! accumulator steps of comprehensions (`@result + [x]`, `@result + 1`) are kept as they are:
//! the crate runs them on a fast path it recognises by shape.
use std::cmp::Ordering;

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelUInt, Kind, DYN_TYPE, INT_TYPE, UINT_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError, Value as CelValue};

/// An operator, the function it becomes, and the crate's name for it in error messages.
struct Op {
    operator: &'static str,
    function: &'static str,
    apply: cel::common::functions::Function,
}

const OPS: [Op; 8] = [
    Op { operator: operators::ADD, function: "@add", apply: add },
    Op { operator: operators::SUBSTRACT, function: "@sub", apply: sub },
    Op { operator: operators::MULTIPLY, function: "@mul", apply: mul },
    Op { operator: operators::DIVIDE, function: "@div", apply: div },
    Op { operator: operators::LESS, function: "@lt", apply: lt },
    Op { operator: operators::LESS_EQUALS, function: "@le", apply: le },
    Op { operator: operators::GREATER, function: "@gt", apply: gt },
    Op { operator: operators::GREATER_EQUALS, function: "@ge", apply: ge },
];

/// Declares the operator functions and the `math` extension (with `math.floor`, `math.ceil`
/// and `math.round` also taking integers, as doubles) in `env`.
pub fn register(env: &mut Env) {
    for op in &OPS {
        env.add_overload(op.function, op.function, vec![DYN_TYPE, DYN_TYPE], op.apply)
            .expect("each operator function is declared once");
    }
    env.add_extension(cel::extensions::math).expect("the math extension is added once");
    // An integer is already whole: floor, ceil and round give it as a double.
    for name in ["math.floor", "math.ceil", "math.round"] {
        for t in [INT_TYPE, UINT_TYPE] {
            env.add_overload(name, &format!("{name}({})", t.name()), vec![t], whole)
                .expect("the math extension declares these for doubles only");
        }
    }
}

/// Renames the arithmetic and ordering operators of `e` to their mixed-number functions.
pub fn rewrite(e: &mut IdedExpr) {
    walk(e, &mut Vec::new());
}

fn walk(e: &mut IdedExpr, accus: &mut Vec<String>) {
    match &mut e.expr {
        Expr::Call(call) => {
            let accumulates = call
                .args
                .first()
                .is_some_and(|a| matches!(&a.expr, Expr::Ident(n) if accus.iter().any(|v| v == n)));
            if call.target.is_none() && call.args.len() == 2 && !accumulates {
                if let Some(op) = OPS.iter().find(|op| op.operator == call.func_name) {
                    op.function.clone_into(&mut call.func_name);
                }
            }
            if let Some(target) = &mut call.target {
                walk(target, accus);
            }
            call.args.iter_mut().for_each(|a| walk(a, accus));
        }
        Expr::Comprehension(c) => {
            walk(&mut c.iter_range, accus);
            walk(&mut c.accu_init, accus);
            accus.push(c.accu_var.clone());
            walk(&mut c.loop_cond, accus);
            walk(&mut c.loop_step, accus);
            walk(&mut c.result, accus);
            accus.pop();
        }
        Expr::Select(s) => walk(&mut s.operand, accus),
        Expr::List(l) => l.elements.iter_mut().for_each(|x| walk(x, accus)),
        Expr::Map(m) => {
            for entry in &mut m.entries {
                match &mut entry.expr {
                    EntryExpr::MapEntry(me) => {
                        walk(&mut me.key, accus);
                        walk(&mut me.value, accus);
                    }
                    EntryExpr::StructField(f) => walk(&mut f.value, accus),
                }
            }
        }
        Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// The value of a number as a double.
#[allow(clippy::cast_precision_loss)]
fn as_f64(v: &dyn Val) -> Option<f64> {
    match v.get_type().kind() {
        Kind::Int => v.downcast_ref::<CelInt>().map(|i| *i.inner() as f64),
        Kind::UInt => v.downcast_ref::<CelUInt>().map(|u| *u.inner() as f64),
        Kind::Double => v.downcast_ref::<CelDouble>().map(|d| *d.inner()),
        _ => None,
    }
}

/// Both operands as doubles when they are numbers of different types.
fn mixed(args: &[CowVal<'_, '_>]) -> Option<(f64, f64)> {
    mixed_vals(args[0].as_ref(), args[1].as_ref())
}

fn mixed_vals(a: &dyn Val, b: &dyn Val) -> Option<(f64, f64)> {
    if a.get_type().kind() == b.get_type().kind() {
        return None;
    }
    Some((as_f64(a)?, as_f64(b)?))
}

/// The crate's error for an operator its operands do not support.
fn unsupported(name: &'static str, a: &dyn Val, b: &dyn Val) -> ExecutionError {
    let value = |v: &dyn Val| CelValue::try_from(v).unwrap_or(CelValue::Null);
    ExecutionError::UnsupportedBinaryOperator(name, value(a), value(b))
}

/// `math.floor`, `math.ceil` and `math.round` of an integer.
#[allow(clippy::needless_pass_by_value)] // the crate's function signature
fn whole<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    args.first()
        .and_then(|x| as_f64(x.as_ref()))
        .map(double)
        .ok_or_else(|| ExecutionError::function_error("math", "expected a number"))
}

fn double<'b, 'v>(x: f64) -> CowVal<'b, 'v> {
    CowVal::owned(CelDouble::from(x))
}

/// Defines an arithmetic operator function: doubles for mixed numbers, else the crate's
/// operator trait, with the crate's error when the left operand has none.
macro_rules! arithmetic {
    ($f:ident, $name:literal, $as:ident, $method:ident, $op:tt) => {
        fn $f<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
            if let Some((a, b)) = mixed(&args) {
                return Ok(double(a $op b));
            }
            let (a, b) = (args[0].as_ref(), args[1].as_ref());
            let imp = a.$as().ok_or_else(|| unsupported($name, a, b))?;
            Ok(CowVal::Owned(imp.$method(b)?.into_owned()))
        }
    };
}

arithmetic!(add, "add", as_adder, add, +);
arithmetic!(sub, "sub", as_subtractor, sub, -);
arithmetic!(mul, "mul", as_multiplier, mul, *);
arithmetic!(div, "div", as_divider, div, /);

/// How the operands order, as the crate's ordering operators see it (doubles for mixed
/// numbers); `operator` names the operator in the error when they do not order.
fn order(operator: &str, args: &[CowVal<'_, '_>]) -> Result<Ordering, ExecutionError> {
    order_vals(operator, args[0].as_ref(), args[1].as_ref())
}

/// [`order`] of two values (the fast path's too, see [`super::eval`]).
pub fn order_vals(operator: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    let no_overload = || {
        ExecutionError::no_such_overload(
            operator,
            vec![a.get_type().name().to_owned(), b.get_type().name().to_owned()],
        )
    };
    if let Some((x, y)) = mixed_vals(a, b) {
        return x.partial_cmp(&y).ok_or_else(no_overload);
    }
    a.as_comparer().ok_or_else(no_overload)?.compare(b).map_err(|e| match e {
        ExecutionError::NoSuchOverload(_)
        | ExecutionError::ValuesNotComparable(..)
        | ExecutionError::UnsupportedKeyType(_)
        | ExecutionError::UnexpectedType { .. } => no_overload(),
        other => other,
    })
}

/// Defines an ordering operator function.
macro_rules! ordering {
    ($f:ident, $operator:expr, $test:expr) => {
        fn $f<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
            let o = order($operator, &args)?;
            Ok(CowVal::Borrowed(if $test(o) { &CelBool::TRUE } else { &CelBool::FALSE }))
        }
    };
}

ordering!(lt, operators::LESS, |o| o == Ordering::Less);
ordering!(le, operators::LESS_EQUALS, |o| o != Ordering::Greater);
ordering!(gt, operators::GREATER, |o| o == Ordering::Greater);
ordering!(ge, operators::GREATER_EQUALS, |o| o != Ordering::Less);
