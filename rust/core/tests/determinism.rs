//! Result bytes are pinned: a seeded corpus is graded through the byte-level API and the
//! SHA-256 of every output must equal the digest the pre-optimisation engine produced.
//!
//! The corpus: every conformance suite with its own trace plus seeded random traces built from
//! the names and argument texts that suite mentions (mutated: numbers rewritten, keys added,
//! text cut short, unrecorded), and a benchmark-shaped workload. Reasons, positions and scores
//! are all in the hashed bytes, so any change to a result (not only a verdict) shows here.
//! When a change to results is intended, update the digests and say why in the commit.
use std::collections::BTreeSet;
use std::path::PathBuf;

use prost::Message;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use trajgrade_core::proto::v1::{
    batch_grade_traces_request, grade_trace_request, trace_outcome, AssertionStatus,
    BatchGradeTracesRequest, BatchGradeTracesResponse, GradeResult, GradeTraceRequest,
    GradeTraceResponse, Suite, ToolCall, Trace, TraceOutcome,
};
use trajgrade_core::{Grader, Limits};

/// splitmix64, seeded.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn cases() -> Vec<Json> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/cases.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a case is JSON"))
        .collect()
}

/// Short strings of a suite (tool names, globs, keys) and its JSON texts (`args_json` ...).
fn harvest(v: &Json, names: &mut Vec<String>, texts: &mut Vec<String>) {
    match v {
        Json::String(s) => {
            let t = s.trim_start();
            if t.starts_with('{') || t.starts_with('[') {
                texts.push(s.clone());
            } else if !s.is_empty() && s.len() < 40 && !s.contains(' ') {
                names.push(s.clone());
            }
        }
        Json::Array(a) => a.iter().for_each(|x| harvest(x, names, texts)),
        Json::Object(o) => o.values().for_each(|x| harvest(x, names, texts)),
        _ => {}
    }
}

const NUMBERS: &[&str] = &[
    "5000",
    "5000.0",
    "5e3",
    "500",
    "-0",
    "0",
    "1e400",
    "9007199254740993",
    "0.1",
    "1E+2",
    "12.50",
];
const STRINGS: &[&str] = &[
    r#""USD""#,
    r#""Zo\u00eb""#,
    r#""\ud800x""#,
    r#""a\"b\\c\n""#,
    r#""gold""#,
    r#""""#,
    "\"caf\u{e9}\"",
];
const KEYS: &[&str] = &["amount_cents", "currency", "order", "items", "sku", "qty", "10", "a", "b"];

fn random_json(r: &mut Rng, depth: usize) -> String {
    match r.below(if depth > 3 { 4 } else { 7 }) {
        0 | 3 => (*r.pick(NUMBERS)).to_owned(),
        1 => (*r.pick(STRINGS)).to_owned(),
        2 => (*r.pick(&["true", "false", "null"])).to_owned(),
        4 | 5 => {
            let n = r.below(4);
            let body: Vec<String> = (0..n)
                .map(|_| format!("\"{}\": {}", r.pick(KEYS), random_json(r, depth + 1)))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        _ => {
            let n = r.below(4);
            let body: Vec<String> = (0..n).map(|_| random_json(r, depth + 1)).collect();
            format!("[{}]", body.join(", "))
        }
    }
}

/// One argument text: a suite text (maybe mutated), random JSON, or something invalid.
fn arguments(r: &mut Rng, texts: &[String]) -> Option<String> {
    let base =
        if !texts.is_empty() && r.chance(60) { r.pick(texts).clone() } else { random_json(r, 0) };
    Some(match r.below(12) {
        0 => return None,
        1 => String::new(),
        2 => base[..base.len() / 2].to_owned(),
        3 => base.replacen("5000", "5000.00", 1).replacen('1', "2", 1),
        4 if base.starts_with('{') && base.len() > 2 => {
            format!("{{\"extra\": {}, {}", random_json(r, 2), &base[1..])
        }
        5 => format!("{}{}", "[".repeat(130), "]".repeat(130)),
        6 => format!(" {base}\n"),
        _ => base,
    })
}

fn random_trace(r: &mut Rng, id: usize, names: &[String], texts: &[String]) -> Trace {
    let fallback = ["search_orders", "get_order", "issue_refund", "reply"].map(str::to_owned);
    let names = if names.is_empty() { &fallback[..] } else { names };
    let n = r.below(9);
    let calls = (0..n)
        .map(|_| ToolCall {
            name: if r.chance(85) { r.pick(names).clone() } else { "other_tool".to_owned() },
            arguments_json: arguments(r, texts),
            result: match r.below(4) {
                0 => None,
                1 => Some(r#"{"ok": true, "total": 50.00, "id": "ord-7"}"#.to_owned()),
                2 => Some(random_json(r, 1)),
                _ => Some("Refunded 1,250.50 USD for order 42".to_owned()),
            },
            error: r.chance(10),
            ..ToolCall::default()
        })
        .collect();
    Trace {
        id: format!("rand-{id}"),
        calls,
        final_answer: (*r.pick(&["", "Refunded 50.00 USD.", "Order 42: 1,250.50 refunded", "ok"]))
            .to_owned(),
        metadata: [("k".to_owned(), "v".to_owned())].into_iter().collect(),
        ..Trace::default()
    }
}

/// The benchmark shape: 20 calls of five tools, ~200-byte nested arguments.
fn bench_trace(r: &mut Rng, id: usize) -> Trace {
    const TOOLS: [&str; 5] =
        ["search_orders", "get_order", "check_refund_eligibility", "issue_refund", "send_email"];
    let calls = (0..20)
        .map(|_| {
            let tool = *r.pick(&TOOLS);
            let amount =
                if tool == "issue_refund" && r.chance(50) { "5000" } else { *r.pick(NUMBERS) };
            let args = format!(
                r#"{{"order": {{"id": "ord-{:06}", "customer": {{"tier": "{}", "name": "{}"}}, "items": [{{"sku": "s{}", "qty": {}}}, {{"sku": "s{}", "qty": {}}}]}}, "currency": "{}", "amount_cents": {amount}, "note": "xxxxxxxxxxxxxxxxxxxx"}}"#,
                r.below(1_000_000),
                r.pick(&["gold", "silver"]),
                r.pick(&["Zoë", "Ana"]),
                r.below(100),
                1 + r.below(3),
                r.below(100),
                1 + r.below(3),
                r.pick(&["USD", "USD", "EUR"]),
            );
            ToolCall {
                name: tool.to_owned(),
                arguments_json: Some(args),
                result: Some(r#"{"ok": true, "total": 50.00}"#.to_owned()),
                ..ToolCall::default()
            }
        })
        .collect();
    Trace {
        id: format!("bench-{id}"),
        calls,
        final_answer: "Refunded 50.00 USD.".to_owned(),
        ..Trace::default()
    }
}

const BENCH_SUITE: &str = r#"{"name":"bench","assertions":[
 {"tool_count":{"glob":"get_*","min":1,"max":20}},
 {"tool_call_args":{"tool":"issue_refund","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{\"currency\": \"USD\", \"amount_cents\": 5000}"}}},
 {"tool_call_args":{"tool":"get_order","match":{"mode":"MATCH_MODE_PARTIAL","args_json":"{\"order\": {\"customer\": {\"tier\": \"gold\"}, \"items\": [{}, {}]}}"}}},
 {"tool_sequence":{"steps":[{"tool":"search_orders"},{"tool":"check_refund_eligibility"},{"tool":"issue_refund"}],"mode":"SEQUENCE_MODE_IN_ORDER"}},
 {"step_count":{"max":25}},
 {"no_repeated_calls":{}},
 {"tool_call_args":{"tool":"issue_refund","quantifier":"QUANTIFIER_ALL","match":{"mode":"MATCH_MODE_EXACT","args_json":"{\"currency\": \"USD\"}","ignore":["order","note","amount_cents"]}}},
 {"tool_call_args":{"tool":"send_email","match":{"mode":"MATCH_MODE_REGEX","pattern":"tier\":\"gold","flags":"i"}}}
]}"#;

fn hex(d: &[u8]) -> String {
    use std::fmt::Write;
    d.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Grades the corpus through every byte-level entry point; one digest per entry point.
fn digests(threads: usize) -> ([String; 4], BTreeSet<String>) {
    let grader = Grader::new(Limits::default(), threads);
    let mut r = Rng(0x6465_7465_726d_696e);
    let mut codes = BTreeSet::new();
    let (mut traces_h, mut batch_h, mut requests_h, mut bench_h) =
        (Sha256::new(), Sha256::new(), Sha256::new(), Sha256::new());
    for case in cases() {
        if case["expect"].get("error").is_some() {
            continue;
        }
        let suite: Suite = serde_json::from_value(case["suite"].clone()).expect("suite decodes");
        let own: Trace = serde_json::from_value(case["trace"].clone()).expect("trace decodes");
        let (mut names, mut texts) = (Vec::new(), Vec::new());
        harvest(&case["suite"], &mut names, &mut texts);
        harvest(&case["trace"], &mut names, &mut texts);
        let mut traces = vec![own];
        for k in 0..12 {
            traces.push(random_trace(&mut r, k, &names, &texts));
        }
        let bytes: Vec<Vec<u8>> = traces.iter().map(Message::encode_to_vec).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let compiled = grader.compile_suite(&suite.encode_to_vec()).expect("suite compiles");
        for out in grader.grade_traces(&compiled, &refs) {
            match TraceOutcome::decode(out.as_slice()).expect("decodes").outcome {
                Some(trace_outcome::Outcome::Result(g)) => {
                    codes.extend(g.results.into_iter().map(|a| a.reason_code));
                }
                other => panic!("an item error in the corpus: {other:?}"),
            }
            let out = v1_outcome(&out);
            traces_h.update((out.len() as u64).to_le_bytes());
            traces_h.update(&out);
        }
        let batch = BatchGradeTracesRequest {
            suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite.clone())),
            traces: traces.clone(),
        };
        let out = grader.grade_batch_request(&batch.encode_to_vec()).expect("graded");
        let mut response = BatchGradeTracesResponse::decode(out.as_slice()).expect("decodes");
        response.outcomes.iter_mut().for_each(strip_v2_outcome);
        batch_h.update(response.encode_to_vec());
        let requests: Vec<Vec<u8>> = traces
            .iter()
            .take(3)
            .map(|t| {
                GradeTraceRequest {
                    trace: Some(t.clone()),
                    suite_ref: Some(grade_trace_request::SuiteRef::SuiteId(
                        compiled.id().to_owned(),
                    )),
                }
                .encode_to_vec()
            })
            .collect();
        let refs: Vec<&[u8]> = requests.iter().map(Vec::as_slice).collect();
        let here = grader.grade_requests_here(&refs, &[], u64::MAX);
        for (out, same) in grader.grade_requests(&refs).into_iter().zip(here) {
            let out = out.expect("graded");
            // The calling-thread path (small server batches) writes the same bytes.
            assert_eq!(Some(&out), same.expect("not deferred without a cap").as_ref().ok());
            let mut response = GradeTraceResponse::decode(out.as_slice()).expect("decodes");
            strip_v2(response.result.as_mut().expect("a result"));
            requests_h.update(response.encode_to_vec());
        }
    }
    let suite: Suite = serde_json::from_str(BENCH_SUITE).expect("bench suite decodes");
    let compiled = grader.compile_suite(&suite.encode_to_vec()).expect("bench suite compiles");
    let bytes: Vec<Vec<u8>> = (0..400).map(|i| bench_trace(&mut r, i).encode_to_vec()).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    for out in grader.grade_traces(&compiled, &refs) {
        let out = v1_outcome(&out);
        bench_h.update((out.len() as u64).to_le_bytes());
        bench_h.update(&out);
    }
    ([traces_h, batch_h, requests_h, bench_h].map(|h| hex(&h.finalize())), codes)
}

/// Checks the SPEC v2 figures of a v1 result (each result's `score` is 1.0 or 0.0 as it passes;
/// `mean_score` is `score` rounded to 4 places) and clears them: the digests pin the v1 fields,
/// which v2 leaves byte-identical.
fn strip_v2(g: &mut GradeResult) {
    for r in &mut g.results {
        let pass = r.status == AssertionStatus::Pass as i32;
        assert_eq!(r.score.to_bits(), f64::to_bits(if pass { 1.0 } else { 0.0 }), "{r:?}");
        r.score = 0.0;
    }
    let rounded: f64 = format!("{:.4}", g.score).parse().expect("a number");
    assert_eq!(g.mean_score.to_bits(), rounded.to_bits(), "{g:?}");
    g.mean_score = 0.0;
}

fn strip_v2_outcome(o: &mut TraceOutcome) {
    if let Some(trace_outcome::Outcome::Result(g)) = o.outcome.as_mut() {
        strip_v2(g);
    }
}

/// A serialized `TraceOutcome` without its v2 figures (prost's encoding equals the core's).
fn v1_outcome(out: &[u8]) -> Vec<u8> {
    let mut o = TraceOutcome::decode(out).expect("decodes");
    assert_eq!(o.encode_to_vec(), out, "the core's bytes are prost's encoding");
    strip_v2_outcome(&mut o);
    o.encode_to_vec()
}

/// Produced by the engine at commit e48bed5 (before the performance work); the first three
/// changed on purpose at a15bc41, when a sequence step or reference call failing only on its
/// arguments started naming the closest call in its reason (issue 11: reason text only; the
/// bench digest, whose suite has no such step, is unchanged).
const EXPECTED: [&str; 4] = [
    "bbf6a18d45877dab683f33dbb1ed3b7a0c9ed6f73e8e3623b1b075e1c21fd6b8",
    "bb75a32ae5fc3cb7193664be1ced0e9d4331702e637451d8d72f8b586d2166f3",
    "913a2ff289cf5b3cd5f3163227612c09dac89c2448cfda409e13761c0b0a8810",
    "796761e416f445da99af146aaaee6eedfec96126f08ee2999262b89df89fe25f",
];

#[test]
fn result_bytes_are_pinned() {
    let (got, codes) = digests(2);
    // The corpus must exercise failures of (nearly) every kind, or the digest proves little.
    assert!(codes.len() >= 16, "too few reason codes in the corpus: {codes:?}");
    assert_eq!(got, digests(1).0, "results depend on the thread count");
    assert_eq!(got, EXPECTED.map(str::to_owned), "result bytes changed");
}
