//! The variables of one evaluation (SPEC §9.23, §14), built straight as the `cel` crate's
//! values: strings borrow the trace's text, nothing goes through the crate's owned `Value`
//! enum, and `result_json` is parsed only for an expression that can read it.
use std::collections::HashMap;

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString,
};
use cel::common::value::Val;

use super::ExprCall;
use crate::json::{parse, Value};
use crate::trace::ModelCall;

type Boxed<'v> = Box<dyn Val + 'v>;

/// The field every call has; `result_json` is the only one whose value costs a parse.
pub const RESULT_JSON: &str = "result_json";

/// Whether evaluating `e` can read a call's `result_json`: it names the field (`.result_json`,
/// `["result_json"]`, `has(..)`) or indexes with a computed key. Otherwise the field is bound
/// to `null` unparsed: no expression that does not read it can tell (a call map's keys and
/// size are the same, and two calls' `result_json` are equal whenever their `result` is).
pub fn reads_result_json(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Select(s) => s.field == RESULT_JSON || reads_result_json(&s.operand),
        Expr::Literal(LiteralValue::String(s)) => s.inner() == RESULT_JSON,
        // Message literals are rejected at compile time (no message type is declared).
        Expr::Literal(_) | Expr::Ident(_) | Expr::Unspecified | Expr::Struct(_) => false,
        Expr::Call(call) => {
            let computed_index = (call.func_name == operators::INDEX
                || call.func_name == operators::OPT_INDEX)
                && call.args.get(1).is_some_and(|k| !matches!(k.expr, Expr::Literal(_)));
            computed_index
                || call.target.as_deref().is_some_and(reads_result_json)
                || call.args.iter().any(reads_result_json)
        }
        Expr::Comprehension(c) => {
            [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .any(reads_result_json)
        }
        Expr::List(l) => l.elements.iter().any(reads_result_json),
        Expr::Map(m) => m.entries.iter().any(|entry| match &entry.expr {
            EntryExpr::MapEntry(me) => reads_result_json(&me.key) || reads_result_json(&me.value),
            EntryExpr::StructField(f) => reads_result_json(&f.value),
        }),
    }
}

/// Each call's result parsed as JSON (`None`: absent, not JSON, or nested deeper than
/// `max_depth`), when the expression reads it; otherwise nothing is parsed.
pub fn parsed_results(
    calls: &[ExprCall<'_>],
    wanted: bool,
    max_depth: usize,
) -> Vec<Option<Value>> {
    if !wanted {
        return Vec::new();
    }
    calls
        .iter()
        .map(|c| Some(c.result).filter(|r| !r.is_empty()).and_then(|r| parse(r, max_depth).ok()))
        .collect()
}

fn string(s: &str) -> Boxed<'_> {
    Box::new(CelString::from(s))
}

fn int<'v>(i: i64) -> Boxed<'v> {
    Box::new(CelInt::from(i))
}

fn null<'v>() -> Boxed<'v> {
    Box::new(CelNull)
}

/// An unsigned count as CEL sees a JSON number: `int` within int64, else `double`.
fn count<'v>(n: u128) -> Boxed<'v> {
    match i64::try_from(n) {
        Ok(i) => int(i),
        #[allow(clippy::cast_precision_loss)]
        Err(_) => Box::new(CelDouble::from(n as f64)),
    }
}

fn map<'v>(fields: Vec<(&'static str, Boxed<'v>)>) -> Boxed<'v> {
    let map: HashMap<CelMapKey<'v>, Boxed<'v>> =
        fields.into_iter().map(|(k, v)| (CelMapKey::from(k), v)).collect();
    Box::new(CelMap::from(map))
}

/// A duration in nanoseconds as milliseconds, or `null` when not recorded.
fn millis<'v>(ns: Option<u64>) -> Boxed<'v> {
    #[allow(clippy::cast_precision_loss)]
    ns.map_or_else(null, |ns| Box::new(CelDouble::from(ns as f64 / 1e6)))
}

/// A turn as bound: 0 (not recorded) reads as turn 1.
fn turn<'v>(t: u32) -> Boxed<'v> {
    int(i64::from(t.max(1)))
}

/// `calls`: `results` is empty when the expression does not read `result_json`.
pub fn calls<'v>(calls: &'v [ExprCall<'v>], results: &'v [Option<Value>]) -> Boxed<'v> {
    let items: Vec<Boxed<'v>> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            map(vec![
                ("name", string(c.name)),
                ("args", c.args.map_or_else(null, json)),
                ("result", string(c.result)),
                (RESULT_JSON, results.get(i).and_then(Option::as_ref).map_or_else(null, json)),
                ("error", Box::new(CelBool::from(c.error))),
                ("position", int(i64::from(c.position))),
                ("duration_ms", millis(c.duration_ns)),
                ("turn", turn(c.turn)),
                ("agent", string(c.agent)),
                ("server", string(c.server)),
            ])
        })
        .collect();
    Box::new(CelList::from(items))
}

/// `model_calls`.
pub fn model_calls<'v>(model_calls: &'v [ModelCall<'v>]) -> Boxed<'v> {
    let items: Vec<Boxed<'v>> = model_calls
        .iter()
        .map(|m| {
            map(vec![
                ("model", string(m.model)),
                ("input_tokens", count(m.input_tokens.into())),
                ("output_tokens", count(m.output_tokens.into())),
                ("cost", m.cost.map_or_else(null, |c| Box::new(CelDouble::from(c)))),
                ("turn", turn(m.turn)),
                ("agent", string(m.agent)),
                ("start_time_unix_nano", count(m.start_time_unix_nano.into())),
                ("end_time_unix_nano", count(m.end_time_unix_nano.into())),
            ])
        })
        .collect();
    Box::new(CelList::from(items))
}

/// `usage`: the model calls' token sums (never overflowing) and their total cost, `null`
/// unless every model call recorded one.
pub fn usage<'v>(model_calls: &[ModelCall<'_>]) -> Boxed<'v> {
    let input: u128 = model_calls.iter().map(|m| u128::from(m.input_tokens)).sum();
    let output: u128 = model_calls.iter().map(|m| u128::from(m.output_tokens)).sum();
    let cost: Option<f64> = model_calls.iter().map(|m| m.cost).sum();
    map(vec![
        ("input_tokens", count(input)),
        ("output_tokens", count(output)),
        ("total_tokens", count(input + output)),
        ("cost", cost.map_or_else(null, |c| Box::new(CelDouble::from(c)))),
    ])
}

/// `metadata`: a later duplicate key wins.
pub fn metadata<'v>(entries: &'v [(&'v str, &'v str)]) -> Boxed<'v> {
    let map: HashMap<CelMapKey<'v>, Boxed<'v>> =
        entries.iter().map(|&(k, v)| (CelMapKey::from(k), string(v))).collect();
    Box::new(CelMap::from(map))
}

/// A JSON value as CEL sees it (SPEC §9.23): integers within int64 are `int` (also when
/// written `1.0` or `1e2`, which denote integers), other numbers `double` (nearest float64),
/// objects maps with string keys, arrays lists. Strings borrow the value; a lone surrogate
/// becomes U+FFFD, since CEL strings are Unicode scalar values.
pub fn json(v: &Value) -> Boxed<'_> {
    match v {
        Value::Null => null(),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => int(i),
            None => Box::new(CelDouble::from(n.as_f64())),
        },
        Value::String(s) => text(s),
        Value::Array(items) => Box::new(CelList::from(items.iter().map(json).collect::<Vec<_>>())),
        Value::Object(o) => {
            let map: HashMap<CelMapKey<'_>, Boxed<'_>> = o
                .iter()
                .map(|(k, v)| {
                    let key = match k.as_str() {
                        Some(k) => CelMapKey::from(k),
                        None => CelMapKey::from(k.to_string_lossy()),
                    };
                    (key, json(v))
                })
                .collect();
            Box::new(CelMap::from(map))
        }
    }
}

fn text(s: &crate::json::Str) -> Boxed<'_> {
    match s.as_str() {
        Some(s) => string(s),
        None => Box::new(CelString::from(s.to_string_lossy())),
    }
}
