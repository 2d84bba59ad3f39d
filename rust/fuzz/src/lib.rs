//! The checks behind each fuzz target, shared by `fuzz_targets/*.rs` (libFuzzer, nightly) and
//! the `replay` binary (stable: seed corpus plus seeded random inputs), so both modes run the
//! same assertions. Every function panics on a violated property; that panic is the finding.
//!
//! The core turns a panic inside `grade_traces` into an `ItemError` with reason `INTERNAL`; the
//! checks here treat such an outcome as a crash too (under libFuzzer the panic hook aborts first).
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arbitrary::{Arbitrary, Unstructured};
use prost::Message;
use trajgrade_core::json::{canonical::to_canonical, parse, Value};
use trajgrade_core::proto::v1::{
    assertion, trace_outcome, ArgsMatch, Assertion, AssertionStatus, Budget, Duration, Efficiency,
    Expression, GradeResult, Grounding, ModelCall, NoRepeatedCalls, Order, SequenceStep, StepCount,
    Suite, ToolCall, ToolCallArgs, ToolCalled, ToolCount, ToolList, ToolOverride, ToolSequence,
    Trace, TraceOutcome, TrajectoryMatch, Turn,
};
use trajgrade_core::{CompiledSuite, Grader, Limits};

/// One fuzz target's checks.
pub type Target = fn(&[u8]);

/// The fuzz targets by name, in the order the Makefile runs them.
pub const TARGETS: &[(&str, Target)] = &[
    ("decode_trace", decode_trace),
    ("compile_suite", compile_suite),
    ("canonical_text", canonical_text),
    ("grade", grade),
    ("json_trace", json_trace),
    ("expression", expression),
    ("matching", matching),
];

fn grader(threads: usize) -> &'static Grader {
    static ONE: OnceLock<Grader> = OnceLock::new();
    static TWO: OnceLock<Grader> = OnceLock::new();
    let cell = if threads == 1 { &ONE } else { &TWO };
    cell.get_or_init(|| Grader::new(Limits::default(), threads))
}

/// The fixed suite `decode_trace` grades every input with: one assertion of each kind.
pub const FIXED_SUITE_JSON: &str = r#"{"name":"fuzz-fixed","assertions":[
 {"tool_call_args":{"tool":"a","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{\"x\":1}"}}},
 {"tool_call_args":{"tool":"b","call_index":-1,"match":{"mode":"MATCH_MODE_REGEX","pattern":"^\\{.*\\d+\\}$","flags":"i"}}},
 {"tool_call_args":{"tool":"a","quantifier":"QUANTIFIER_ALL","match":{"mode":"MATCH_MODE_PARTIAL","args_json":"{\"x\":1,\"y\":[1,2]}","ignore":["$.z"],"defaults_json":"{\"w\":0}"}}},
 {"tool_call_args":{"tool":"c","match":{"mode":"MATCH_MODE_EXACT","args_json":"{\"q\":\"\\ud800\",\"n\":1e2}"}}},
 {"tool_sequence":{"steps":[{"tool":"a"},{"glob":"b*","ignore_case":true}],"mode":"SEQUENCE_MODE_ANY_ORDER"}},
 {"tool_sequence":{"steps":[{"tool":"a","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{}"}},{"tool":"b"}]}},
 {"allowed_tools":{"tools":["a","b*","[c-d]"]}},
 {"forbidden_tools":{"tools":["z"]},"negate":true},
 {"tool_called":{"tool":"a"}},
 {"tool_count":{"glob":"?","min":1,"max":3}},
 {"step_count":{"max":5}},
 {"order":{"before":"a","after":"b"}},
 {"no_repeated_calls":{}},
 {"efficiency":{"reference_steps":2}},
 {"grounding":{"numbers":true}},
 {"grounding":{"values":["42","x"]}},
 {"trajectory_match":{"reference":[{"name":"a","arguments_json":"{\"x\":1}"},{"name":"b"}],"mode":"TRAJECTORY_MODE_UNORDERED","args":"MATCH_MODE_SUBSET"}},
 {"expression":{"expr":"size(calls) < 4 && answer != 'x'"},"name":"expr"},
 {"expression":{"expr":"calls.exists(c, c.name == 'a' && c.args != null)"},"name":"expr2","negate":true},
 {"duration":{"glob":"a*","max_call_ms":"2","max_total_ms":"5"}},
 {"budget":{"max_total_tokens":"1000","max_cost":0.5,"max_model_calls":3}},
 {"expression":{"expr":"calls.all(c, c.turn <= 2 || c.agent != '' || c.server != '' || c.duration_ms == null) && usage.total_tokens < 5000 && model_calls.all(m, m.cost == null || m.turn > 0)"},"name":"expr_v2"}
]}"#;

fn fixed_suite() -> &'static Arc<CompiledSuite> {
    static SUITE: OnceLock<Arc<CompiledSuite>> = OnceLock::new();
    SUITE.get_or_init(|| {
        let suite: Suite = serde_json::from_str(FIXED_SUITE_JSON).expect("fixed suite JSON");
        grader(1).compile_suite(&suite.encode_to_vec()).expect("fixed suite compiles")
    })
}

/// Decodes one outcome, panicking on undecodable bytes or an `INTERNAL` item error.
fn outcome(bytes: &[u8]) -> trace_outcome::Outcome {
    let o = TraceOutcome::decode(bytes)
        .unwrap_or_else(|e| panic!("outcome bytes do not decode as TraceOutcome: {e}"))
        .outcome
        .expect("TraceOutcome with neither result nor error");
    if let trace_outcome::Outcome::Error(e) = &o {
        assert!(e.reason_code != "INTERNAL", "core panicked while grading: {e:?}");
    }
    o
}

/// `decode_trace`: arbitrary bytes as a serialized `Trace`, graded with the fixed suite.
/// Never panics; the outcome always decodes; the fast encoded path and `check_and_grade`
/// (prost decode + prost encode) agree byte for byte.
pub fn decode_trace(data: &[u8]) {
    let suite = fixed_suite();
    let g = grader(1);
    let outs = g.grade_traces(suite, &[data]);
    assert_eq!(outs.len(), 1);
    let got = outcome(&outs[0]);
    match suite.check_and_grade(data, g.limits()) {
        Ok(result) => {
            let want = TraceOutcome { outcome: Some(trace_outcome::Outcome::Result(result)) };
            assert!(
                want.encode_to_vec() == outs[0],
                "grade_traces bytes differ from prost-encoded check_and_grade: {got:?} vs {want:?}"
            );
        }
        Err(e) => match &got {
            trace_outcome::Outcome::Error(item) => assert_eq!(
                item.reason_code,
                e.reason_code(),
                "item error differs from check_and_grade's error {e}"
            ),
            trace_outcome::Outcome::Result(r) => {
                panic!("check_and_grade failed ({e}) but grade_traces graded: {r:?}")
            }
        },
    }
}

/// `compile_suite`: arbitrary bytes as a serialized `Suite` (Ok or a `CoreError`, never a
/// panic), and, when the bytes are UTF-8, as protobuf-JSON text through the pbjson serde path.
pub fn compile_suite(data: &[u8]) {
    let g = grader(1);
    if let Ok(s) = g.compile_suite(data) {
        // Decoding succeeded, so compiling the decoded message directly must agree.
        let decoded = Suite::decode(data).expect("a compiled suite's bytes decode");
        let direct = CompiledSuite::compile(&decoded, g.limits()).expect("compiles directly");
        assert_eq!(s.id(), direct.id(), "suite id depends on the path");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(suite) = serde_json::from_str::<Suite>(text) {
            let bytes = suite.encode_to_vec();
            let first = g.compile_suite(&bytes).map(|s| s.id().to_owned());
            let again = grader(2).compile_suite(&bytes).map(|s| s.id().to_owned());
            match (&first, &again) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "suite id differs between graders"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                _ => panic!("compile differs between graders: {first:?} vs {again:?}"),
            }
        }
    }
}

/// Deep equality where numbers compare as the doubles `JSON.stringify` prints (a non-finite
/// double prints as `null`): the relation between a value and the parse of its canonical text.
fn js_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(n), Value::Null) => !n.as_f64().is_finite(),
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| js_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| js_equal(v, w)))
        }
        _ => a == b,
    }
}

/// `canonical_text`: arbitrary text through `json::parse` (depth limit); if Ok, the canonical
/// text parses, re-canonicalises to the same bytes, and the parses are deep-equal.
pub fn canonical_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let depth = Limits::default().max_json_depth;
    let Ok(v1) = parse(text, depth) else { return };
    let c1 = to_canonical(&v1);
    let v2 =
        parse(&c1, depth).unwrap_or_else(|e| panic!("canonical text {c1:?} does not parse: {e}"));
    let c2 = to_canonical(&v2);
    assert_eq!(c1, c2, "canonical text is not idempotent");
    let v3 = parse(&c2, depth).expect("canonical text parses");
    assert!(v2 == v3, "parses of the same canonical text differ: {c1:?}");
    assert!(js_equal(&v1, &v2), "canonical text {c1:?} does not denote the parsed value {v1:?}");
}

// ---------------------------------------------------------------------------------------------
// `grade`: structured input.

const NAMES: [&str; 5] = ["a", "b", "c", "A", "lookup_order"];

#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Other(String),
}

impl Name {
    fn get(&self) -> String {
        match self {
            Name::Known(i) => NAMES[usize::from(*i) % NAMES.len()].to_owned(),
            Name::Other(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Scalar {
    Int(i16),
    Big(i64),
    Float(f32),
    Bool(bool),
    Null,
    Str(u8),
    Text(String),
    Arr(Vec<i8>),
}

impl Scalar {
    fn json(&self) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Big(i) => i.to_string(),
            Scalar::Float(f) if f.is_finite() => format!("{f:e}"),
            Scalar::Float(_) | Scalar::Null => "null".to_owned(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Str(i) => format!("\"{}\"", NAMES[usize::from(*i) % NAMES.len()]),
            Scalar::Text(s) => serde_json::to_string(s).expect("string"),
            Scalar::Arr(v) => serde_json::to_string(v).expect("array"),
        }
    }
}

/// A JSON text: mostly a small object over a few keys, sometimes raw (likely invalid) text.
#[derive(Arbitrary, Debug)]
enum JsonText {
    Object(Vec<(u8, Scalar)>),
    Nested(u8, Vec<(u8, Scalar)>),
    Scalar(Scalar),
    Raw(String),
}

const KEYS: [&str; 5] = ["x", "y", "z", "0", "id"];

fn object(items: &[(u8, Scalar)]) -> String {
    let body: Vec<String> = items
        .iter()
        .take(6)
        .map(|(k, v)| format!("\"{}\":{}", KEYS[usize::from(*k) % KEYS.len()], v.json()))
        .collect();
    format!("{{{}}}", body.join(","))
}

impl JsonText {
    fn get(&self) -> String {
        match self {
            JsonText::Object(items) => object(items),
            JsonText::Nested(k, items) => {
                format!("{{\"{}\":{}}}", KEYS[usize::from(*k) % KEYS.len()], object(items))
            }
            JsonText::Scalar(s) => s.json(),
            JsonText::Raw(s) => s.clone(),
        }
    }
}

const AGENTS: [&str; 4] = ["", "triage", "triage/billing", "billing"];

/// SPEC v2 call and model call fields: turn, agent path and a start and end time (either may
/// be 0, i.e. not recorded; the end may precede the start).
#[derive(Arbitrary, Debug)]
struct V2In {
    turn: u8,
    agent: u8,
    start: u32,
    millis: Option<u16>,
}

impl V2In {
    fn turn(&self) -> u32 {
        u32::from(self.turn % 4)
    }

    fn agent(&self) -> String {
        AGENTS[usize::from(self.agent) % AGENTS.len()].to_owned()
    }

    /// `(start, end)` in nanoseconds.
    fn times(&self) -> (u64, u64) {
        let start = u64::from(self.start);
        let end = self.millis.map_or(0, |ms| start.saturating_add(u64::from(ms) * 1_000_000));
        (start, if self.start.is_multiple_of(7) { start / 2 } else { end })
    }
}

#[derive(Arbitrary, Debug)]
struct CallIn {
    name: Name,
    args: Option<JsonText>,
    result: Option<String>,
    error: bool,
    v2: Option<(V2In, u8)>,
}

impl CallIn {
    fn get(&self) -> ToolCall {
        let mut call = ToolCall {
            name: self.name.get(),
            arguments_json: self.args.as_ref().map(JsonText::get),
            result: self.result.clone(),
            error: self.error,
            ..ToolCall::default()
        };
        if let Some((v2, server)) = &self.v2 {
            (call.start_time_unix_nano, call.end_time_unix_nano) = v2.times();
            call.turn = v2.turn();
            call.agent = v2.agent();
            call.server = ["", "orders-mcp", "payments"][usize::from(*server) % 3].to_owned();
        }
        call
    }
}

#[derive(Arbitrary, Debug)]
struct ModelCallIn {
    input_tokens: u16,
    output_tokens: u16,
    huge: bool,
    cost: Option<f32>,
    v2: V2In,
}

impl ModelCallIn {
    fn get(&self) -> ModelCall {
        let (start, end) = self.v2.times();
        ModelCall {
            model: "m".to_owned(),
            input_tokens: if self.huge { u64::MAX } else { u64::from(self.input_tokens) },
            output_tokens: u64::from(self.output_tokens),
            cost: self.cost.map(f64::from),
            turn: self.v2.turn(),
            agent: self.v2.agent(),
            start_time_unix_nano: start,
            end_time_unix_nano: end,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct MatchIn {
    mode: u8,
    args: JsonText,
    pattern: Option<String>,
    flags: Option<String>,
    ignore: Vec<String>,
    defaults: Option<JsonText>,
}

impl MatchIn {
    fn get(&self) -> ArgsMatch {
        ArgsMatch {
            mode: i32::from(self.mode % 6),
            args_json: self.args.get(),
            pattern: self.pattern.clone().unwrap_or_else(|| "\\d".to_owned()),
            flags: self.flags.clone().unwrap_or_default(),
            ignore: self.ignore.iter().take(3).cloned().collect(),
            defaults_json: self.defaults.as_ref().map(JsonText::get).unwrap_or_default(),
            ..ArgsMatch::default()
        }
    }
}

#[derive(Arbitrary, Debug)]
struct StepIn {
    tool: Name,
    glob: Option<String>,
    ignore_case: bool,
    m: Option<MatchIn>,
}

#[derive(Arbitrary, Debug)]
enum KindIn {
    Args {
        tool: Name,
        call_index: i8,
        quantifier: u8,
        m: Option<MatchIn>,
    },
    Sequence {
        steps: Vec<StepIn>,
        mode: u8,
    },
    Allowed {
        tools: Vec<Name>,
        ignore_case: bool,
    },
    Forbidden {
        tools: Vec<Name>,
        ignore_case: bool,
    },
    Called {
        tool: Name,
    },
    Count {
        tool: Name,
        glob: Option<String>,
        ignore_case: bool,
        min: Option<u8>,
        max: Option<u8>,
    },
    Steps {
        min: Option<u8>,
        max: Option<u8>,
    },
    Order {
        before: Name,
        after: Name,
    },
    NoRepeat {
        tools: Vec<Name>,
        max_identical: u8,
    },
    Efficiency {
        reference_steps: u8,
        max_ratio: f32,
    },
    Grounding {
        values: Vec<String>,
        numbers: bool,
    },
    Trajectory {
        reference: Vec<CallIn>,
        mode: u8,
        args: u8,
        overrides: Vec<(Name, u8, Vec<String>)>,
    },
    Expression {
        expr: ExprIn,
    },
    Duration {
        tool: Name,
        glob: Option<String>,
        ignore_case: bool,
        max_call_ms: Option<u8>,
        max_total_ms: Option<u16>,
    },
    Budget {
        max_input_tokens: Option<u16>,
        max_output_tokens: Option<u16>,
        max_total_tokens: Option<u16>,
        max_cost: Option<f32>,
        max_model_calls: Option<u8>,
    },
}

const EXPRS: [&str; 9] = [
    "calls.all(c, c.duration_ms == null || c.duration_ms < 10.0)",
    "usage.total_tokens < 1000 && (usage.cost == null || usage.cost < 1.0)",
    "model_calls.exists(m, m.agent == 'billing') || calls.exists(c, c.turn == 2 && c.server != '')",
    "size(calls) > 1",
    "calls.exists(c, c.name == 'a')",
    "calls.all(c, c.args != null && c.args.x == 1)",
    "answer.contains('4')",
    "size(calls) == 0 || calls[0].position == 1",
    "calls.map(c, c.args.x)[0] > 0",
];

#[derive(Arbitrary, Debug)]
enum ExprIn {
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct AssertionIn {
    name: Option<String>,
    severity: u8,
    negate: bool,
    kind: KindIn,
}

fn names(v: &[Name]) -> Vec<String> {
    v.iter().take(4).map(Name::get).collect()
}

impl AssertionIn {
    fn get(&self) -> Assertion {
        use assertion::Kind;
        let kind = match &self.kind {
            KindIn::Args { tool, call_index, quantifier, m } => Kind::ToolCallArgs(ToolCallArgs {
                tool: tool.get(),
                call_index: i32::from(*call_index % 4),
                quantifier: i32::from(quantifier % 3),
                r#match: m.as_ref().map(MatchIn::get),
            }),
            KindIn::Sequence { steps, mode } => Kind::ToolSequence(ToolSequence {
                steps: steps
                    .iter()
                    .take(4)
                    .map(|s| SequenceStep {
                        tool: if s.glob.is_some() { String::new() } else { s.tool.get() },
                        glob: s.glob.clone().unwrap_or_default(),
                        ignore_case: s.ignore_case,
                        r#match: s.m.as_ref().map(MatchIn::get),
                    })
                    .collect(),
                mode: i32::from(mode % 4),
            }),
            KindIn::Allowed { tools, ignore_case } => {
                Kind::AllowedTools(ToolList { tools: names(tools), ignore_case: *ignore_case })
            }
            KindIn::Forbidden { tools, ignore_case } => {
                Kind::ForbiddenTools(ToolList { tools: names(tools), ignore_case: *ignore_case })
            }
            KindIn::Called { tool } => Kind::ToolCalled(ToolCalled { tool: tool.get() }),
            KindIn::Count { tool, glob, ignore_case, min, max } => Kind::ToolCount(ToolCount {
                tool: if glob.is_some() { String::new() } else { tool.get() },
                glob: glob.clone().unwrap_or_default(),
                ignore_case: *ignore_case,
                min: min.map(|v| u32::from(v % 8)),
                max: max.map(|v| u32::from(v % 8)),
            }),
            KindIn::Steps { min, max } => Kind::StepCount(StepCount {
                min: min.map(|v| u32::from(v % 8)),
                max: max.map(|v| u32::from(v % 8)),
            }),
            KindIn::Order { before, after } => {
                Kind::Order(Order { before: before.get(), after: after.get() })
            }
            KindIn::NoRepeat { tools, max_identical } => Kind::NoRepeatedCalls(NoRepeatedCalls {
                tools: names(tools),
                max_identical: u32::from(max_identical % 4),
            }),
            KindIn::Efficiency { reference_steps, max_ratio } => Kind::Efficiency(Efficiency {
                reference_steps: u32::from(*reference_steps % 8),
                max_ratio: f64::from(*max_ratio),
            }),
            KindIn::Grounding { values, numbers } => Kind::Grounding(Grounding {
                values: values.iter().take(4).cloned().collect(),
                numbers: *numbers,
            }),
            KindIn::Trajectory { reference, mode, args, overrides } => {
                Kind::TrajectoryMatch(TrajectoryMatch {
                    reference: reference.iter().take(5).map(CallIn::get).collect(),
                    mode: i32::from(mode % 6),
                    args: i32::from(args % 6),
                    overrides: overrides
                        .iter()
                        .take(2)
                        .map(|(t, m, ig)| ToolOverride {
                            tool: t.get(),
                            args: i32::from(m % 6),
                            ignore: ig.iter().take(2).cloned().collect(),
                            ..ToolOverride::default()
                        })
                        .collect(),
                })
            }
            KindIn::Duration { tool, glob, ignore_case, max_call_ms, max_total_ms } => {
                Kind::Duration(Duration {
                    tool: if glob.is_some() { String::new() } else { tool.get() },
                    glob: glob.clone().unwrap_or_default(),
                    ignore_case: *ignore_case,
                    max_call_ms: max_call_ms.map(u64::from),
                    max_total_ms: max_total_ms.map(u64::from),
                })
            }
            KindIn::Budget {
                max_input_tokens,
                max_output_tokens,
                max_total_tokens,
                max_cost,
                max_model_calls,
            } => Kind::Budget(Budget {
                max_input_tokens: max_input_tokens.map(u64::from),
                max_output_tokens: max_output_tokens.map(u64::from),
                max_total_tokens: max_total_tokens.map(u64::from),
                max_cost: max_cost.map(f64::from),
                max_model_calls: max_model_calls.map(|n| u32::from(n % 8)),
            }),
            KindIn::Expression { expr } => Kind::Expression(Expression {
                expr: match expr {
                    ExprIn::Known(i) => EXPRS[usize::from(*i) % EXPRS.len()].to_owned(),
                    ExprIn::Raw(s) => s.clone(),
                },
            }),
        };
        Assertion {
            name: self.name.clone().unwrap_or_default(),
            severity: i32::from(self.severity % 3),
            negate: self.negate,
            kind: Some(kind),
            ..Assertion::default()
        }
    }
}

/// The structured input of the `grade` target.
#[derive(Arbitrary, Debug)]
pub struct GradeInput {
    trace_id: String,
    calls: Vec<CallIn>,
    final_answer: String,
    metadata: Vec<(String, String)>,
    model_calls: Vec<ModelCallIn>,
    turns: Vec<(String, String)>,
    assertions: Vec<AssertionIn>,
}

impl GradeInput {
    /// The trace and suite this input denotes (calls and assertions capped at 8 and 5).
    pub fn build(&self) -> (Trace, Suite) {
        let trace = Trace {
            id: self.trace_id.clone(),
            calls: self.calls.iter().take(8).map(CallIn::get).collect(),
            final_answer: self.final_answer.clone(),
            metadata: self.metadata.iter().take(3).cloned().collect(),
            model_calls: self.model_calls.iter().take(4).map(ModelCallIn::get).collect(),
            turns: self
                .turns
                .iter()
                .take(3)
                .map(|(u, a)| Turn { user_input: u.clone(), final_answer: a.clone() })
                .collect(),
        };
        let suite = Suite {
            name: "fuzz".to_owned(),
            assertions: self.assertions.iter().take(5).map(AssertionIn::get).collect(),
        };
        (trace, suite)
    }
}

fn graded(bytes: &[u8]) -> GradeResult {
    match outcome(bytes) {
        trace_outcome::Outcome::Result(r) => r,
        trace_outcome::Outcome::Error(e) => {
            panic!("a well-formed trace became an item error: {e:?}")
        }
    }
}

/// How many `grade` inputs got as far as grading (a compiled, non-trivial suite): the replay
/// harness prints it, so a generator that only builds invalid suites shows.
pub static GRADED: AtomicUsize = AtomicUsize::new(0);

/// `grade`: a fuzz-built trace and suite. Compiled suites grade identically at 1 and 2
/// threads; negating every assertion flips each status except `EXPRESSION_ERROR` (SPEC §9.24),
/// and `not:` prefixes default names only (§9.25).
pub fn grade(data: &[u8]) {
    let Ok(input) = GradeInput::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let (trace, suite) = input.build();
    let Ok(compiled) = grader(1).compile_suite(&suite.encode_to_vec()) else { return };
    GRADED.fetch_add(1, Ordering::Relaxed);
    let trace_bytes = trace.encode_to_vec();
    let batch: Vec<&[u8]> = vec![&trace_bytes; 4];
    let one = grader(1).grade_traces(&compiled, &batch);
    let two = grader(2).grade_traces(&compiled, &batch);
    assert!(one == two, "1 and 2 threads grade differently");
    assert!(one.iter().all(|o| *o == one[0]), "identical traces grade differently");
    let base = graded(&one[0]);
    assert_eq!(base.results.len(), suite.assertions.len());

    let mut negated_suite = suite.clone();
    for a in &mut negated_suite.assertions {
        a.negate = !a.negate;
    }
    let negated = grader(2)
        .compile_suite(&negated_suite.encode_to_vec())
        .expect("the negated suite compiles when the suite does");
    let flipped = graded(&grader(2).grade_traces(&negated, &[&trace_bytes])[0]);
    let pass = AssertionStatus::Pass as i32;
    let fail = AssertionStatus::Fail as i32;
    for ((a, r), n) in suite.assertions.iter().zip(&base.results).zip(&flipped.results) {
        let expression_error =
            |x: &trajgrade_core::proto::v1::AssertionResult| x.reason_code == "EXPRESSION_ERROR";
        if expression_error(r) || expression_error(n) {
            assert!(
                r.status == fail && n.status == fail && expression_error(r) && expression_error(n),
                "EXPRESSION_ERROR must fail either way: {r:?} vs {n:?}"
            );
        } else {
            assert!(
                (r.status == pass && n.status == fail) || (r.status == fail && n.status == pass),
                "negation did not flip the status: {r:?} vs {n:?}"
            );
        }
        assert_eq!(r.positions, n.positions, "negated assertions report their base positions");
        assert_eq!(r.severity, n.severity);
        if a.name.is_empty() {
            let (plain, not) = if a.negate { (&n.name, &r.name) } else { (&r.name, &n.name) };
            assert_eq!(*not, format!("not:{plain}"), "default name of a negated assertion");
        } else {
            assert_eq!(r.name, a.name);
            assert_eq!(n.name, a.name);
        }
    }
}

/// `json_trace`: arbitrary bytes as one native JSONL line. The borrowed decoder
/// (`trajgrade_core::json_trace`) never accepts what `serde_json` + pbjson reject, and decodes
/// what it accepts to the same trace; grading the line never panics.
pub fn json_trace(data: &[u8]) {
    let mut buf = Vec::new();
    if let Some(fast) = trajgrade_core::json_trace::decode(data, &mut buf) {
        let t: Trace = serde_json::from_slice(data)
            .unwrap_or_else(|e| panic!("the borrowed decoder accepts what serde rejects: {e}"));
        let p = &fast.parts;
        assert_eq!((p.id, p.final_answer), (t.id.as_str(), t.final_answer.as_str()));
        let calls: Vec<_> = t.calls.iter().map(trajgrade_core::trace::Call::from_message).collect();
        assert_eq!(p.calls, calls);
        let metas: Vec<_> =
            t.calls.iter().map(trajgrade_core::call_meta::CallMeta::from_message).collect();
        assert_eq!(p.call_metas.to_vec(calls.len()), metas);
        let model_calls: Vec<_> =
            t.model_calls.iter().map(trajgrade_core::trace::ModelCall::from_message).collect();
        assert_eq!(p.model_calls, model_calls);
        let costs = |m: &[trajgrade_core::trace::ModelCall<'_>]| -> Vec<Option<u64>> {
            m.iter().map(|m| m.cost.map(f64::to_bits)).collect()
        };
        assert_eq!(costs(&p.model_calls), costs(&model_calls), "costs differ in their bits");
        let turns: Vec<(&str, &str)> =
            t.turns.iter().map(|u| (u.user_input.as_str(), u.final_answer.as_str())).collect();
        let got: Vec<(&str, &str)> =
            p.turns.iter().map(|u| (u.user_input, u.final_answer)).collect();
        assert_eq!(got, turns);
        let meta: std::collections::HashMap<&str, &str> = p.metadata.iter().copied().collect();
        let want: std::collections::HashMap<&str, &str> =
            t.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(meta, want);
        // Exact unless a metadata key repeats (each entry counted: an upper bound).
        assert!(fast.encoded_len >= t.encoded_len());
        if meta.len() == p.metadata.len() {
            assert_eq!(fast.encoded_len, t.encoded_len());
        }
    }
    let outs = grader(1).grade_json_traces(fixed_suite(), &[data]);
    assert_eq!(outs.len(), 1);
    outcome(&outs[0]);
}

/// `expression`: arbitrary text as a CEL expression (`expression.expr`). Compiling never panics
/// and gives the same answer twice; a compiled expression evaluates, on a small fixed trace,
/// without panicking, within its cost limit, to the same answer and units on every run.
pub fn expression(data: &[u8]) {
    use trajgrade_core::expr::{Bindings, ExprCall, Expression as Cel};
    use trajgrade_core::trace::ModelCall as BoundModelCall;
    use trajgrade_core::work::Work;
    let source = String::from_utf8_lossy(data);
    let first = Cel::compile(&source, 20_000);
    let again = Cel::compile(&source, 20_000);
    let Ok(e) = first else {
        assert_eq!(first.err(), again.err(), "compile errors differ between runs");
        return;
    };
    assert!(again.is_ok(), "compiles once but not twice");
    let args = parse(r#"{"a":1,"b":[1,2,{"c":"x"}],"d":null}"#, 16).expect("fixed args parse");
    let calls: Vec<ExprCall<'_>> = (0..4)
        .map(|i| ExprCall {
            name: ["a", "b", "a", "c"][i],
            args: (i % 2 == 0).then_some(&args),
            args_text: (i == 1).then_some(r#"{"a":2,"e":[true]}"#),
            result: ["{\"ok\":true,\"n\":2}", "", "not json", "[1, 2.5]"][i],
            error: i == 3,
            position: i as u32 + 1,
            duration_ns: (i != 1).then_some(1_500_000 * i as u64),
            turn: [0, 1, 2, 2][i],
            agent: ["", "triage", "triage/billing", ""][i],
            server: ["", "orders", "", "payments"][i],
        })
        .collect();
    let model_calls = [
        BoundModelCall {
            model: "m",
            input_tokens: 100,
            output_tokens: 20,
            cost: Some(0.5),
            turn: 1,
            ..BoundModelCall::default()
        },
        BoundModelCall {
            model: "m",
            input_tokens: u64::MAX,
            output_tokens: 1,
            cost: None,
            turn: 2,
            agent: "triage",
            ..BoundModelCall::default()
        },
    ];
    let bindings = Bindings {
        calls: &calls,
        model_calls: &model_calls,
        answer: "the answer",
        metadata: &[("env", "prod")],
        max_json_depth: 16,
    };
    let run = || {
        let work = Work::new(1_000_000, None);
        let got = e.evaluate(&bindings, &work);
        (got, work.used())
    };
    let (got, used) = run();
    let cost = used / trajgrade_core::expr::cost::WORK_PER_COST_UNIT;
    assert!(cost <= 20_001, "spent {cost} cost units past the cost limit of 20000");
    assert_eq!((got, used), run(), "evaluation differs between runs");
}

/// `matching`: arbitrary bytes as a bipartite graph with classes of identical lefts and rights,
/// names and accepted names (`matching::Explicit::from_bytes`, up to 39 lefts and rights).
/// `matching::canonical` equals the canonical matching by definition (SPEC §9.13) on the
/// expanded graph; under a small work limit it returns that matching or stops, never panics.
pub fn matching(data: &[u8]) {
    use trajgrade_core::matching::{by_definition, canonical, Explicit};
    use trajgrade_core::work::Work;
    let g = Explicit::from_bytes(data);
    let want = by_definition(&g.expanded(), g.n_right_total());
    let got = canonical(&g, &g.lefts(), &Work::new(u64::MAX, None));
    assert_eq!(got.as_ref(), Some(&want), "{g:?}");
    let limited = Work::new(u64::from(data.first().copied().unwrap_or(0)), None);
    if let Some(got) = canonical(&g, &g.lefts(), &limited) {
        assert_eq!(got, want, "{g:?} under a work limit");
    }
}
