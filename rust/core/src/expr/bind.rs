//! The variables of one evaluation (SPEC §9.23, §14), as the `cel` crate's values. Strings
//! borrow the trace's text, and nothing is built that the expression cannot read: a variable
//! it does not name is not bound, calls, model calls and `usage` are [`Record`]s whose entries
//! are read on demand, and a call's `args` and `result_json` are parsed and converted only
//! when read (once per evaluation, however many copies of the call a comprehension makes).
//!
//! An evaluation's values live in layers, each borrowing the ones before: [`Parsed`] (the
//! JSON parsed from a call's text), [`Records`] (each record's entries, their converted JSON
//! and their map), then the `cel::Context` holding the variables.
use std::collections::HashMap;
use std::sync::OnceLock;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString,
};
use cel::common::value::Val;
use cel::Context;

use super::reads::{Reads, RESULT_JSON};
use super::record::{Entries, Record};
use super::{Bindings, ExprCall};
use crate::json::{parse, Value};
use crate::trace::{parse_args, Args, ModelCall};

type Boxed<'v> = Box<dyn Val + 'v>;

static NULL: CelNull = CelNull;

/// A call's JSON, parsed from its text when first read.
#[derive(Default)]
pub struct Parsed {
    args: OnceLock<Option<Value>>,
    result: OnceLock<Option<Value>>,
}

/// One [`Parsed`] per call when the expression names `calls`.
pub fn parsed(b: &Bindings<'_>, reads: Reads) -> Vec<Parsed> {
    if !reads.calls {
        return Vec::new();
    }
    std::iter::repeat_with(Parsed::default).take(b.calls.len()).collect()
}

/// A call's arguments as bound: the value given, else its text parsed (`null` when absent,
/// not JSON or too deep).
pub(super) fn call_args<'v>(
    c: &ExprCall<'v>,
    parsed: &'v Parsed,
    max_depth: usize,
) -> Option<&'v Value> {
    c.args.or_else(|| {
        let text = c.args_text?;
        parsed
            .args
            .get_or_init(|| match parse_args(text, max_depth) {
                Args::Parsed(v) => Some(v),
                Args::NotRecorded | Args::Invalid(_) => None,
            })
            .as_ref()
    })
}

/// A call's result parsed as JSON (`None`: absent, not JSON, or nested deeper than
/// `max_depth`).
fn parse_result(result: &str, max_depth: usize) -> Option<Value> {
    Some(result).filter(|r| !r.is_empty()).and_then(|r| parse(r, max_depth).ok())
}

/// A call's `result_json` as bound when the expression reads it: parsed once per evaluation.
pub(super) fn call_result<'v>(
    c: &ExprCall<'v>,
    parsed: &'v Parsed,
    max_depth: usize,
) -> Option<&'v Value> {
    parsed.result.get_or_init(|| parse_result(c.result, max_depth)).as_ref()
}

/// An evaluation's records: each one's entries, then the crate's values for them.
pub struct Records<'v> {
    calls: Vec<CallEntries<'v>>,
    model_calls: Vec<ModelEntries<'v>>,
    usage: Option<UsageEntries>,
    as_map: bool,
}

impl<'v> Records<'v> {
    /// The records of the variables `reads` names; `parsed` is [`parsed`]'s.
    pub fn new(b: &Bindings<'v>, parsed: &'v [Parsed], reads: Reads, result_json: bool) -> Self {
        let calls = if reads.calls {
            b.calls
                .iter()
                .zip(parsed)
                .map(|(c, p)| CallEntries::new(*c, p, b.max_json_depth, result_json))
                .collect()
        } else {
            Vec::new()
        };
        let model_calls = if reads.model_calls {
            b.model_calls.iter().map(|m| ModelEntries::new(*m)).collect()
        } else {
            Vec::new()
        };
        let usage = reads.usage.then(|| UsageEntries::new(b.model_calls));
        Records { calls, model_calls, usage, as_map: reads.records_as_maps }
    }

    /// Binds the variables `reads` names in `ctx`.
    pub fn bind<'s>(&'s self, ctx: &mut Context<'_, 's>, b: &Bindings<'s>, reads: Reads) {
        let record = |entries: &'s dyn Entries<'v>| -> Boxed<'s> {
            Box::new(Record { entries, as_map: self.as_map })
        };
        if reads.calls {
            let items = self.calls.iter().map(|c| record(c)).collect::<Vec<_>>();
            ctx.add_variable_as_val("calls", Box::new(CelList::from(items)));
        }
        if reads.answer {
            ctx.add_variable_as_val("answer", string(b.answer));
        }
        if reads.metadata {
            ctx.add_variable_as_val("metadata", metadata(b.metadata));
        }
        if reads.model_calls {
            let items = self.model_calls.iter().map(|m| record(m)).collect::<Vec<_>>();
            ctx.add_variable_as_val("model_calls", Box::new(CelList::from(items)));
        }
        if let Some(usage) = &self.usage {
            ctx.add_variable_as_val("usage", record(usage));
        }
    }
}

/// A number as CEL sees a JSON number: `int` within int64, else `double`.
enum Count {
    Int(CelInt),
    Double(CelDouble),
}

impl Count {
    fn new(n: u128) -> Self {
        match i64::try_from(n) {
            Ok(i) => Count::Int(CelInt::from(i)),
            #[allow(clippy::cast_precision_loss)]
            Err(_) => Count::Double(CelDouble::from(n as f64)),
        }
    }

    fn val(&self) -> &(dyn Val + 'static) {
        match self {
            Count::Int(i) => i,
            Count::Double(d) => d,
        }
    }
}

fn or_null(v: Option<&CelDouble>) -> &(dyn Val + 'static) {
    v.map_or(&NULL, |d| d)
}

/// A call's entries (the keys of [`call_map`]).
struct CallEntries<'v> {
    call: ExprCall<'v>,
    parsed: &'v Parsed,
    max_depth: usize,
    /// Whether `result_json` is parsed; else it is `null` (see `reads_result_json`).
    result_json_read: bool,
    name: CelString<'v>,
    result: CelString<'v>,
    error: CelBool,
    position: CelInt,
    duration_ms: Option<CelDouble>,
    turn: CelInt,
    agent: CelString<'v>,
    server: CelString<'v>,
    args: OnceLock<Boxed<'v>>,
    result_json: OnceLock<Boxed<'v>>,
    map: OnceLock<CelMap<'v>>,
}

impl<'v> CallEntries<'v> {
    fn new(call: ExprCall<'v>, parsed: &'v Parsed, max_depth: usize, result_json: bool) -> Self {
        CallEntries {
            call,
            parsed,
            max_depth,
            result_json_read: result_json,
            name: CelString::from(call.name),
            result: CelString::from(call.result),
            error: CelBool::from(call.error),
            position: CelInt::from(i64::from(call.position)),
            duration_ms: call.duration_ns.map(|ns| CelDouble::from(millis(ns))),
            turn: CelInt::from(turn(call.turn)),
            agent: CelString::from(call.agent),
            server: CelString::from(call.server),
            args: OnceLock::new(),
            result_json: OnceLock::new(),
            map: OnceLock::new(),
        }
    }

    fn args_value(&self) -> Option<&'v Value> {
        call_args(&self.call, self.parsed, self.max_depth)
    }

    fn result_value(&self) -> Option<&'v Value> {
        if !self.result_json_read {
            return None;
        }
        self.parsed.result.get_or_init(|| parse_result(self.call.result, self.max_depth)).as_ref()
    }
}

impl<'v> Entries<'v> for CallEntries<'v> {
    fn len(&self) -> usize {
        CALL_KEYS
    }

    fn entry(&self, key: &str) -> Option<&(dyn Val + 'v)> {
        Some(match key {
            "name" => &self.name,
            "args" => &**self.args.get_or_init(|| self.args_value().map_or_else(null, json)),
            "result" => &self.result,
            RESULT_JSON => {
                &**self.result_json.get_or_init(|| self.result_value().map_or_else(null, json))
            }
            "error" => &self.error,
            "position" => &self.position,
            "duration_ms" => or_null(self.duration_ms.as_ref()),
            "turn" => &self.turn,
            "agent" => &self.agent,
            "server" => &self.server,
            _ => return None,
        })
    }

    fn map(&self) -> &CelMap<'v> {
        self.map.get_or_init(|| call_map(&self.call, self.args_value(), self.result_value()))
    }
}

/// A model call's entries (the keys of [`model_call_map`]).
struct ModelEntries<'v> {
    call: ModelCall<'v>,
    model: CelString<'v>,
    input_tokens: Count,
    output_tokens: Count,
    cost: Option<CelDouble>,
    turn: CelInt,
    agent: CelString<'v>,
    start: Count,
    end: Count,
    map: OnceLock<CelMap<'v>>,
}

impl<'v> ModelEntries<'v> {
    fn new(m: ModelCall<'v>) -> Self {
        ModelEntries {
            call: m,
            model: CelString::from(m.model),
            input_tokens: Count::new(m.input_tokens.into()),
            output_tokens: Count::new(m.output_tokens.into()),
            cost: m.cost.map(CelDouble::from),
            turn: CelInt::from(turn(m.turn)),
            agent: CelString::from(m.agent),
            start: Count::new(m.start_time_unix_nano.into()),
            end: Count::new(m.end_time_unix_nano.into()),
            map: OnceLock::new(),
        }
    }
}

impl<'v> Entries<'v> for ModelEntries<'v> {
    fn len(&self) -> usize {
        MODEL_CALL_KEYS
    }

    fn entry(&self, key: &str) -> Option<&(dyn Val + 'v)> {
        Some(match key {
            "model" => &self.model,
            "input_tokens" => self.input_tokens.val(),
            "output_tokens" => self.output_tokens.val(),
            "cost" => or_null(self.cost.as_ref()),
            "turn" => &self.turn,
            "agent" => &self.agent,
            "start_time_unix_nano" => self.start.val(),
            "end_time_unix_nano" => self.end.val(),
            _ => return None,
        })
    }

    fn map(&self) -> &CelMap<'v> {
        self.map.get_or_init(|| model_call_map(&self.call))
    }
}

/// The model calls' token sums (never overflowing) and their total cost, `None` unless every
/// model call recorded one.
#[derive(Clone, Copy)]
pub(super) struct Usage {
    pub input: u128,
    pub output: u128,
    pub cost: Option<f64>,
}

impl Usage {
    pub(super) fn of(model_calls: &[ModelCall<'_>]) -> Self {
        Usage {
            input: model_calls.iter().map(|m| u128::from(m.input_tokens)).sum(),
            output: model_calls.iter().map(|m| u128::from(m.output_tokens)).sum(),
            cost: model_calls.iter().map(|m| m.cost).sum(),
        }
    }
}

/// `usage`'s entries (the keys of [`usage_map`]).
struct UsageEntries {
    usage: Usage,
    input: Count,
    output: Count,
    total: Count,
    cost: Option<CelDouble>,
    map: OnceLock<CelMap<'static>>,
}

impl UsageEntries {
    fn new(model_calls: &[ModelCall<'_>]) -> Self {
        let usage = Usage::of(model_calls);
        UsageEntries {
            usage,
            input: Count::new(usage.input),
            output: Count::new(usage.output),
            total: Count::new(usage.input + usage.output),
            cost: usage.cost.map(CelDouble::from),
            map: OnceLock::new(),
        }
    }
}

impl<'v> Entries<'v> for UsageEntries {
    fn len(&self) -> usize {
        USAGE_KEYS
    }

    fn entry(&self, key: &str) -> Option<&(dyn Val + 'v)> {
        Some(match key {
            "input_tokens" => self.input.val(),
            "output_tokens" => self.output.val(),
            "total_tokens" => self.total.val(),
            "cost" => or_null(self.cost.as_ref()),
            _ => return None,
        })
    }

    fn map(&self) -> &CelMap<'v> {
        self.map.get_or_init(|| usage_map(self.usage))
    }
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
    match Count::new(n) {
        Count::Int(i) => Box::new(i),
        Count::Double(d) => Box::new(d),
    }
}

fn map<'v>(fields: Vec<(&'static str, Boxed<'v>)>) -> CelMap<'v> {
    let map: HashMap<CelMapKey<'v>, Boxed<'v>> =
        fields.into_iter().map(|(k, v)| (CelMapKey::from(k), v)).collect();
    CelMap::from(map)
}

/// A duration in nanoseconds as milliseconds.
#[allow(clippy::cast_precision_loss)]
pub(super) fn millis(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A turn as bound: 0 (not recorded) reads as turn 1.
pub(super) fn turn(t: u32) -> i64 {
    i64::from(t.max(1))
}

const CALL_KEYS: usize = 10;
const MODEL_CALL_KEYS: usize = 8;
const USAGE_KEYS: usize = 4;

/// A call as the crate's own map; `args` and `result_json` as given (`None`: `null`).
fn call_map<'v>(
    c: &ExprCall<'v>,
    args: Option<&'v Value>,
    result_json: Option<&'v Value>,
) -> CelMap<'v> {
    map(vec![
        ("name", string(c.name)),
        ("args", args.map_or_else(null, json)),
        ("result", string(c.result)),
        (RESULT_JSON, result_json.map_or_else(null, json)),
        ("error", Box::new(CelBool::from(c.error))),
        ("position", int(i64::from(c.position))),
        (
            "duration_ms",
            c.duration_ns.map_or_else(null, |ns| Box::new(CelDouble::from(millis(ns)))),
        ),
        ("turn", int(turn(c.turn))),
        ("agent", string(c.agent)),
        ("server", string(c.server)),
    ])
}

/// A model call as the crate's own map.
fn model_call_map<'v>(m: &ModelCall<'v>) -> CelMap<'v> {
    map(vec![
        ("model", string(m.model)),
        ("input_tokens", count(m.input_tokens.into())),
        ("output_tokens", count(m.output_tokens.into())),
        ("cost", m.cost.map_or_else(null, |c| Box::new(CelDouble::from(c)))),
        ("turn", int(turn(m.turn))),
        ("agent", string(m.agent)),
        ("start_time_unix_nano", count(m.start_time_unix_nano.into())),
        ("end_time_unix_nano", count(m.end_time_unix_nano.into())),
    ])
}

/// `usage` as the crate's own map.
fn usage_map<'v>(u: Usage) -> CelMap<'v> {
    map(vec![
        ("input_tokens", count(u.input)),
        ("output_tokens", count(u.output)),
        ("total_tokens", count(u.input + u.output)),
        ("cost", u.cost.map_or_else(null, |c| Box::new(CelDouble::from(c)))),
    ])
}

/// `metadata`: a later duplicate key wins.
fn metadata<'v>(entries: &'v [(&'v str, &'v str)]) -> Boxed<'v> {
    let map: HashMap<CelMapKey<'v>, Boxed<'v>> =
        entries.iter().map(|&(k, v)| (CelMapKey::from(k), string(v))).collect();
    Box::new(CelMap::from(map))
}

/// A JSON value as CEL sees it (SPEC §9.23): integers within int64 are `int` (also when
/// written `1.0` or `1e2`, which denote integers), other numbers `double` (nearest float64),
/// objects maps with string keys, arrays lists. Strings borrow the value; a lone surrogate
/// becomes U+FFFD, since CEL strings are Unicode scalar values.
fn json(v: &Value) -> Boxed<'_> {
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

/// The binding before records (a test-only reference for the lazy one): every variable
/// built in full, each call and model call as its own map, `args` parsed and converted for
/// every call, `result_json` for every call when `result_json` is set.
#[cfg(test)]
pub mod eager {
    use super::{
        call_args, call_map, metadata, model_call_map, parse_result, string, usage_map, Boxed,
        Parsed, Usage,
    };
    use super::{Bindings, CelList, Context};
    use crate::json::Value;

    /// Each call's parsed result when `result_json` is set (else nothing is parsed).
    pub fn results(b: &Bindings<'_>, result_json: bool) -> Vec<Option<Value>> {
        if !result_json {
            return Vec::new();
        }
        b.calls.iter().map(|c| parse_result(c.result, b.max_json_depth)).collect()
    }

    /// Binds every variable in `ctx`; `parsed` holds one [`Parsed`] per call.
    pub fn bind<'v>(
        ctx: &mut Context<'_, 'v>,
        b: &Bindings<'v>,
        parsed: &'v [Parsed],
        results: &'v [Option<Value>],
    ) {
        let calls: Vec<Boxed<'v>> = b
            .calls
            .iter()
            .zip(parsed)
            .enumerate()
            .map(|(i, (c, p))| {
                let args = call_args(c, p, b.max_json_depth);
                let result = results.get(i).and_then(Option::as_ref);
                Box::new(call_map(c, args, result)) as Boxed<'v>
            })
            .collect();
        ctx.add_variable_as_val("calls", Box::new(CelList::from(calls)));
        ctx.add_variable_as_val("answer", string(b.answer));
        ctx.add_variable_as_val("metadata", metadata(b.metadata));
        let models: Vec<Boxed<'v>> =
            b.model_calls.iter().map(|m| Box::new(model_call_map(m)) as Boxed<'v>).collect();
        ctx.add_variable_as_val("model_calls", Box::new(CelList::from(models)));
        ctx.add_variable_as_val("usage", Box::new(usage_map(Usage::of(b.model_calls))));
    }
}
