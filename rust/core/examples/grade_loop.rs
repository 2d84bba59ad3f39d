//! A fixed amount of grading work for profilers (callgrind counts are deterministic):
//! `cargo build --release --example grade_loop -p trajgrade-core`, then
//! `valgrind --tool=callgrind target/release/examples/grade_loop 200` (default 20 000 traces),
//! `grade_loop N floor` for the prost decode-only floor, `grade_loop N threads T` for a pool of T,
//! `grade_loop N json` for native JSONL lines to regrade rows, `grade_loop N jsondecode` for the
//! JSON line decoder alone, `grade_loop N trajectory` for one v1 `trajectory_match` and
//! `grade_loop N per_turn` for the same assertion `per_turn` over 5 turns (calls and reference
//! spread over turns 1-5; the same traces in both); `grade_loop N expr 'EXPR'` for one
//! `expression` assertion, `grade_loop N inorder` for one v1 `trajectory_match` `IN_ORDER`
//! (the first trace's calls as the reference) on the same traces, `grade_loop N ordered_f1` for
//! one `trajectory_score` `ORDERED_F1` with that reference.
#[path = "../benches/workload.rs"]
mod workload;

use prost::Message;
use trajgrade_core::proto::v1::Trace;
use trajgrade_core::{Grader, Limits};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let mode = args.next();
    let floor = mode.as_deref() == Some("floor");
    let threads: usize = if mode.as_deref() == Some("threads") {
        args.next().and_then(|a| a.parse().ok()).unwrap_or(1)
    } else {
        1
    };
    let turns = matches!(mode.as_deref(), Some("trajectory" | "per_turn"));
    let traces: Vec<Vec<u8>> = workload::traces(n, 1234)
        .into_iter()
        .map(|mut t| {
            if turns {
                workload::spread_over_turns(&mut t, 5);
            }
            t.encode_to_vec()
        })
        .collect();
    let refs: Vec<&[u8]> = traces.iter().map(Vec::as_slice).collect();
    let lines: Vec<Vec<u8>> = if mode.as_deref().is_some_and(|m| m.starts_with("json")) {
        workload::traces(n, 1234).iter().map(|t| serde_json::to_vec(t).expect("json")).collect()
    } else {
        Vec::new()
    };
    let line_refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    let start = std::time::Instant::now();
    let bytes = if mode.as_deref() == Some("json") {
        let grader = Grader::new(Limits::default(), 1);
        let suite = grader.compile_suite(&workload::suite().encode_to_vec()).expect("valid");
        grader.grade_json_traces_to_json(&suite, &line_refs).iter().map(Vec::len).sum()
    } else if mode.as_deref() == Some("jsondecode") {
        let mut buf = Vec::new();
        line_refs
            .iter()
            .filter(|l| trajgrade_core::json_trace::decode(l, &mut buf).is_some())
            .count()
    } else if turns {
        let grader = Grader::new(Limits::default(), threads);
        let suite = workload::trajectory_suite(mode.as_deref() == Some("per_turn"));
        let suite = grader.compile_suite(&suite.encode_to_vec()).expect("valid");
        grader.grade_traces(&suite, &refs).iter().map(Vec::len).sum()
    } else if mode.as_deref() == Some("expr") {
        let grader = Grader::new(Limits::default(), 1);
        let expr = args.next().unwrap_or_else(|| "calls.all(c, c.name != '')".to_owned());
        let suite: trajgrade_core::proto::v1::Suite = serde_json::from_value(
            serde_json::json!({"assertions": [{"expression": {"expr": expr}}]}),
        )
        .expect("a suite");
        let suite = grader.compile_suite(&suite.encode_to_vec()).expect("valid");
        grader.grade_traces(&suite, &refs).iter().map(Vec::len).sum()
    } else if matches!(mode.as_deref(), Some("inorder" | "ordered_f1")) {
        let grader = Grader::new(Limits::default(), 1);
        let first = Trace::decode(refs[0]).expect("a trace");
        let reference: Vec<_> =
            first.calls.iter().map(|c| serde_json::json!({"name": c.name})).collect();
        let assertion = if mode.as_deref() == Some("inorder") {
            serde_json::json!({"trajectory_match": {"reference": reference, "mode": "TRAJECTORY_MODE_IN_ORDER"}})
        } else {
            serde_json::json!({"trajectory_score": {"reference": reference, "metric": "SCORE_METRIC_ORDERED_F1", "min_score": 0.5}})
        };
        let suite: trajgrade_core::proto::v1::Suite =
            serde_json::from_value(serde_json::json!({ "assertions": [assertion] }))
                .expect("a suite");
        let suite = grader.compile_suite(&suite.encode_to_vec()).expect("valid");
        grader.grade_traces(&suite, &refs).iter().map(Vec::len).sum()
    } else if floor {
        refs.iter().filter(|t| Trace::decode(**t).is_ok()).count()
    } else {
        let grader = Grader::new(Limits::default(), threads);
        let suite = grader.compile_suite(&workload::suite().encode_to_vec()).expect("valid");
        grader.grade_traces(&suite, &refs).iter().map(Vec::len).sum()
    };
    let secs = start.elapsed().as_secs_f64();
    println!("{n} traces in {secs:.3}s: {:.0}/s ({bytes})", n as f64 / secs);
}
