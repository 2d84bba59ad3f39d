//! Every matching kind at 3,000 calls with first-fit failing (or the check failing) stays
//! within a small work-unit count and under 1 s, in the dev profile too: the
//! bounds of docs/performance.md ("Bounds per kind") as a test.
use std::time::Instant;

use trajgrade_core::proto::v1::{Suite, ToolCall, Trace};
use trajgrade_core::trace::TraceView;
use trajgrade_core::work::Stop;
use trajgrade_core::{CompiledSuite, Limits};

const M: usize = 3000;

fn call(name: &str, args: String) -> ToolCall {
    ToolCall { name: name.into(), arguments_json: Some(args), ..ToolCall::default() }
}

/// Calls `f {"i": k}` for k in 0..M.
fn calls() -> Vec<ToolCall> {
    (0..M).map(|k| call("f", format!(r#"{{"i":{k}}}"#))).collect()
}

fn reference(k: usize) -> String {
    format!(r#"{{"name":"f","arguments_json":"{{\"i\":{k}}}"}}"#)
}

fn trajectory(mode: &str, refs: &[String]) -> String {
    format!(
        r#"{{"trajectory_match":{{"mode":"TRAJECTORY_MODE_{mode}","reference":[{}]}}}}"#,
        refs.join(",")
    )
}

fn sequence(mode: &str, steps: &[&str]) -> String {
    format!(
        r#"{{"tool_sequence":{{"mode":"SEQUENCE_MODE_{mode}","steps":[{}]}}}}"#,
        steps.join(",")
    )
}

/// (name, assertion JSON, calls, expected reason code, most work units allowed). References
/// with distinct arguments cost up to one comparison per (reference, call) pair; identical
/// ones, and name-only ones, a few units per call.
fn cases() -> Vec<(&'static str, String, Vec<ToolCall>, &'static str, u64)> {
    let m = M as u64;
    let absent = r#"{"name":"g"}"#.to_owned();
    let by_name = r#"{"name":"f"}"#.to_owned();
    // References with the arguments of every call, the last one absent.
    let mut each: Vec<String> = (0..M - 1).map(reference).collect();
    each.push(absent.clone());
    // Name only, the last one absent.
    let mut names = vec![by_name.clone(); M - 1];
    names.push(absent.clone());
    // First-fit gives call 1 to the name-only reference that any call can satisfy, which the
    // next reference needs: the maximum matching must move it to the last call.
    let mut shifted = vec![by_name];
    shifted.extend((0..M - 1).map(reference));
    let mut some: Vec<String> = (0..999).map(|j| reference(j * 3)).collect();
    some.push(absent);
    let mut tools = vec![r#"{"tool":"f"}"#; M - 1];
    tools.push(r#"{"tool":"g"}"#);
    let mut globs = vec![r#"{"glob":"*"}"#; 999];
    globs.push(r#"{"tool":"g"}"#);
    let mut all = calls();
    all[M - 1] = call("f", r#"{"j":0}"#.into());
    let repeated = (0..M).map(|k| call("f", format!(r#"{{"i":{}}}"#, k / 2))).collect();
    let mismatch = "TRAJECTORY_MISMATCH";
    let incomplete = "SEQUENCE_INCOMPLETE";
    vec![
        ("STRICT", trajectory("STRICT", &each), calls(), mismatch, 4 * m),
        ("IN_ORDER", trajectory("IN_ORDER", &some), calls(), mismatch, 4 * m),
        ("SUPERSET names", trajectory("SUPERSET", &names[..1000]), calls(), "", 4 * m),
        ("SUPERSET args", trajectory("SUPERSET", &some), calls(), mismatch, 2 * 1000 * m),
        ("SUBSET names", trajectory("SUBSET", &names), calls(), mismatch, 8 * m),
        ("UNORDERED names", trajectory("UNORDERED", &names), calls(), mismatch, 8 * m),
        ("UNORDERED args", trajectory("UNORDERED", &each), calls(), mismatch, 8 * m),
        ("UNORDERED shifted", trajectory("UNORDERED", &shifted), calls(), "", 32 * m),
        ("sequence IN_ORDER", sequence("IN_ORDER", &tools), calls(), incomplete, 4 * m),
        ("sequence EXACT", sequence("EXACT", &tools), calls(), "SEQUENCE_MISMATCH", 4 * m),
        ("sequence ANY_ORDER", sequence("ANY_ORDER", &tools), calls(), incomplete, 8 * m),
        ("sequence ANY_ORDER glob", sequence("ANY_ORDER", &globs), calls(), incomplete, 8 * m),
        (
            "tool_call_args ALL",
            r#"{"tool_call_args":{"tool":"f","quantifier":"QUANTIFIER_ALL","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{\"i\":0}"}}}"#.into(),
            all,
            "NO_MATCHING_CALL",
            4 * m,
        ),
        ("no_repeated_calls", r#"{"no_repeated_calls":{}}"#.into(), repeated, "REPEATED_CALL", 4 * m),
    ]
}

#[test]
fn every_kind_at_3000_calls_is_bounded() {
    let limits = Limits::default();
    let mut slow = Vec::new();
    for (name, assertion, calls, code, max_units) in cases() {
        let suite: Suite =
            serde_json::from_str(&format!(r#"{{"name":"scale","assertions":[{assertion}]}}"#))
                .expect("the suite decodes");
        let suite = CompiledSuite::compile(&suite, &limits).expect("the suite compiles");
        let trace = Trace { id: "t".into(), calls, ..Trace::default() };
        let view = TraceView::new(&trace, &limits);
        let started = Instant::now();
        let result = suite.grade_view(&view).expect("graded within the default work limit");
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(result.results[0].reason_code, code, "{name}: {}", result.results[0].reason);
        let used = view.work().used();
        eprintln!("{name}: {used} work units, {secs:.3} s");
        assert!(used <= max_units, "{name}: {used} work units, at most {max_units} expected");
        // The issue's bound, each under 1 s (the dev profile optimises the core, rust/Cargo.toml;
        // release figures: make bench-scale); the work units above are the exact bound.
        if secs > 1.0 {
            slow.push(format!("{name}: {secs:.2} s"));
        }
    }
    assert!(slow.is_empty(), "slower than 1 s: {slow:?}");
}

#[test]
fn a_small_work_limit_stops_an_adversarial_matching() {
    // Every reference name-only but one per call with its arguments, and the name-only ones
    // first: the maximum flow and the canonical choice both search the whole class graph.
    let mut refs = vec![r#"{"name":"f"}"#.to_owned(); 1000];
    refs.extend((0..M - 1000).map(reference));
    let limits = Limits { max_work_units: 10_000, ..Limits::default() };
    let suite: Suite = serde_json::from_str(&format!(
        r#"{{"name":"scale","assertions":[{}]}}"#,
        trajectory("UNORDERED", &refs)
    ))
    .expect("the suite decodes");
    let suite = CompiledSuite::compile(&suite, &limits).expect("the suite compiles");
    let trace = Trace { id: "t".into(), calls: calls(), ..Trace::default() };
    let view = TraceView::new(&trace, &limits);
    let started = Instant::now();
    assert_eq!(suite.grade_view(&view).err(), Some(Stop::WorkLimit));
    assert_eq!(view.work().stopped(), Some(Stop::WorkLimit));
    assert!(view.work().used() < 10_000 + 1000, "{} units", view.work().used());
    assert!(started.elapsed().as_secs_f64() < 1.0, "{:?}", started.elapsed());
}
