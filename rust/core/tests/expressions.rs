//! SPEC §14 expressions through the public API: the worked examples 6 and 7 of §16 and the
//! cost limit's determinism across runs and thread counts.
use prost::Message;
use serde_json::{json, Value as Json};
use trajgrade_core::proto::v1::{
    trace_outcome, AssertionStatus, GradeResult, Suite, Trace, TraceOutcome,
};
use trajgrade_core::{CompiledSuite, CoreError, Grader, Limits};

fn suite(expr: &str) -> Suite {
    serde_json::from_value(json!({"assertions": [{"name": "e", "expression": {"expr": expr}}]}))
        .expect("a suite")
}

fn trace(calls: &Json) -> Trace {
    serde_json::from_value(json!({"id": "t", "calls": calls, "final_answer": "done"}))
        .expect("a trace")
}

fn grade(expr: &str, calls: &Json) -> GradeResult {
    let limits = Limits::default();
    CompiledSuite::compile(&suite(expr), &limits)
        .expect("compiles")
        .grade(&trace(calls), &limits)
        .expect("graded")
}

/// (status, reason code) of the one result.
fn outcome(expr: &str, calls: &Json) -> (AssertionStatus, String) {
    let r = &grade(expr, calls).results[0];
    (r.status(), r.reason_code.clone())
}

/// §16 example 6: the rule-based lesson's exercise 1 ("`issue_refund` only after a `get_order`
/// result showed `charged_times >= 2`") as CEL.
const EXERCISE_1: &str = "calls.all(r, r.name != \"issue_refund\" || calls.exists(c, \
    c.name == \"get_order\" && c.position < r.position && c.result_json != null && \
    has(c.result_json.charged_times) && c.result_json.charged_times >= 2))";

/// The lesson's runs (spec/seeds/rule-based-trajectory-lesson.md), as its importer maps them.
fn lesson_run(name: &str, charged_times: u32) -> Json {
    let order =
        format!(r#"{{"order_id": "A-7", "amount": 49.0, "charged_times": {charged_times}}}"#);
    let get_order =
        json!({"name": "get_order", "arguments_json": r#"{"order_id": "A-7"}"#, "result": order});
    let refund = json!({
        "name": "issue_refund",
        "arguments_json": r#"{"order_id": "A-7", "amount": 49.0}"#,
        "result": r#"{"refunded": "49.00"}"#,
    });
    match name {
        "careful" => json!([get_order, refund]),
        "lucky guess" => json!([refund]),
        _ => unreachable!("{name}"),
    }
}

#[test]
fn example_6_lesson_exercise_1_as_cel() {
    use AssertionStatus::{Fail, Pass};
    assert_eq!(outcome(EXERCISE_1, &lesson_run("careful", 2)), (Pass, String::new()));
    assert_eq!(
        outcome(EXERCISE_1, &lesson_run("lucky guess", 2)),
        (Fail, "EXPRESSION_FALSE".to_owned())
    );
    assert_eq!(
        outcome(EXERCISE_1, &lesson_run("careful", 1)),
        (Fail, "EXPRESSION_FALSE".to_owned())
    );
    // A get_order whose result is not JSON, or absent, never shows the charge.
    let unreadable = json!([
        {"name": "get_order", "result": "charged_times: 2"},
        {"name": "get_order"},
        {"name": "issue_refund"},
    ]);
    assert_eq!(outcome(EXERCISE_1, &unreadable), (Fail, "EXPRESSION_FALSE".to_owned()));
}

#[test]
fn example_7_nesting_5_is_rejected_and_nesting_3_hits_the_cost_limit() {
    let five = "calls.all(a, calls.all(b, calls.all(c, calls.all(d, calls.all(e, true)))))";
    match CompiledSuite::compile(&suite(five), &Limits::default()) {
        Err(CoreError::InvalidSuite(problems)) => {
            assert_eq!(problems[0].field, "assertions[0].expression.expr");
            assert!(problems[0].message.contains("nest more than 4 deep"), "{problems:?}");
        }
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
    let three = "calls.all(a, calls.all(b, calls.all(c, true)))";
    let calls: Vec<Json> = (0..1000).map(|_| json!({"name": "f"})).collect();
    let started = std::time::Instant::now();
    let r = &grade(three, &Json::Array(calls)).results[0];
    assert_eq!(r.status(), AssertionStatus::Fail);
    assert_eq!(r.reason_code, "EXPRESSION_ERROR");
    assert!(r.reason.ends_with("cost limit of 1000000 exceeded"), "{}", r.reason);
    assert!(started.elapsed().as_secs() < 30, "took {:?}", started.elapsed());
}

#[test]
fn unknown_identifiers_are_rejected_with_the_field_path() {
    for (expr, message) in [
        ("json(answer) == 1", "unknown function `json`"),
        ("foo.bar == 1", "unknown identifier `foo`"),
        ("calls.all(c, c.duration_ms < limit)", "unknown identifier `limit`"),
    ] {
        match CompiledSuite::compile(&suite(expr), &Limits::default()) {
            Err(CoreError::InvalidSuite(problems)) => {
                assert_eq!(problems[0].field, "assertions[0].expression.expr");
                assert_eq!(problems[0].message, message);
            }
            other => panic!("{expr}: expected INVALID_ARGUMENT, got {other:?}"),
        }
    }
}

/// The same over-budget expression, graded many times on one and on two threads, gives the
/// same bytes every time (the limit counts units, never time); a lower configured limit
/// stops it at that limit instead.
#[test]
fn the_cost_limit_is_the_same_on_every_run_and_thread_count() {
    let expr =
        "calls.all(a, calls.all(b, calls.all(c, a.position + b.position >= 2 + 0 * c.position)))";
    let calls: Vec<Json> = (0..120).map(|i| json!({"name": format!("f{}", i % 3)})).collect();
    let bytes = trace(&Json::Array(calls)).encode_to_vec();
    let traces: Vec<&[u8]> = vec![bytes.as_slice(); 4];
    let mut seen: Vec<Vec<u8>> = Vec::new();
    for (threads, limit) in [(1, 200_000), (2, 200_000), (1, 200_000), (2, 20_000)] {
        let limits = Limits { expression_cost_limit: limit, ..Limits::default() };
        let grader = Grader::new(limits, threads);
        let compiled = grader.compile_suite(&suite(expr).encode_to_vec()).expect("compiles");
        let out = grader.grade_traces(&compiled, &traces);
        assert!(out.windows(2).all(|w| w[0] == w[1]), "results differ within a run");
        let Some(trace_outcome::Outcome::Result(result)) =
            TraceOutcome::decode(out[0].as_slice()).expect("an outcome").outcome
        else {
            panic!("not graded");
        };
        assert!(
            result.results[0].reason.ends_with(&format!("cost limit of {limit} exceeded")),
            "{}",
            result.results[0].reason
        );
        if limit == 200_000 {
            seen.push(out[0].clone());
        }
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "results differ between runs or threads");
}
