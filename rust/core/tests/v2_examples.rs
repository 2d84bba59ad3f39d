//! SPEC §16 worked examples 4 (`budget`) and 5 (`duration`), one test each, graded through the
//! public API.
use trajgrade_core::proto::v1::{
    AssertionResult, AssertionStatus, ModelCall, Suite, ToolCall, Trace, Verdict,
};
use trajgrade_core::{CompiledSuite, Limits};

/// Grades `trace` with a one-assertion suite given as protobuf JSON.
fn grade(assertion: &str, trace: &Trace) -> AssertionResult {
    let suite: Suite = serde_json::from_str(&format!(r#"{{"assertions":[{assertion}]}}"#))
        .expect("suite JSON decodes");
    let limits = Limits::default();
    let suite = CompiledSuite::compile(&suite, &limits).expect("suite compiles");
    let mut result = suite.grade(trace, &limits).expect("graded");
    assert_eq!(result.results.len(), 1);
    if result.results[0].status == AssertionStatus::Pass as i32 {
        assert_eq!(result.verdict, Verdict::Pass as i32);
    }
    result.results.remove(0)
}

/// Example 4's model calls: 30,000 tokens by the root agent, 12,000 by `billing`.
fn example_4_trace() -> Trace {
    Trace {
        id: "example-4".to_owned(),
        model_calls: vec![
            ModelCall { input_tokens: 25_000, output_tokens: 5_000, ..ModelCall::default() },
            ModelCall {
                input_tokens: 10_000,
                output_tokens: 2_000,
                agent: "billing".to_owned(),
                ..ModelCall::default()
            },
        ],
        ..Trace::default()
    }
}

#[test]
fn example_4_budget_over_total_tokens() {
    let r = grade(r#"{"budget":{"max_total_tokens":"40000"}}"#, &example_4_trace());
    assert_eq!(r.name, "budget");
    assert_eq!(r.status, AssertionStatus::Fail as i32);
    assert_eq!(r.reason_code, "OVER_BUDGET");
    assert_eq!(r.reason, "total tokens 42,000 > 40,000 over 2 model calls");
    assert!(r.positions.is_empty());
    assert_eq!(r.score.to_bits(), 0f64.to_bits());
}

#[test]
fn example_4_budget_scoped_to_billing() {
    let r = grade(
        r#"{"budget":{"max_total_tokens":"40000"},"scope":{"agent":"billing"}}"#,
        &example_4_trace(),
    );
    assert_eq!((r.status, r.reason_code.as_str()), (AssertionStatus::Pass as i32, ""));
    assert_eq!(r.score.to_bits(), 1f64.to_bits());
}

/// A refund call lasting `nanos`; its start is a real clock reading, since §10 reads a zero
/// start or end as "timing not recorded".
fn refund_lasting(nanos: u64) -> ToolCall {
    let start = 1_767_225_600_000_000_000;
    ToolCall {
        name: "issue_refund".to_owned(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + nanos,
        ..ToolCall::default()
    }
}

#[test]
fn example_5_duration_too_slow_and_timing_not_recorded() {
    let assertion = r#"{"duration":{"tool":"issue_refund","max_call_ms":"2000"}}"#;
    let lookup = ToolCall { name: "lookup_account".to_owned(), ..ToolCall::default() };
    let trace = Trace {
        calls: vec![lookup.clone(), lookup.clone(), lookup.clone(), refund_lasting(2_350_000_000)],
        ..Trace::default()
    };
    let r = grade(assertion, &trace);
    assert_eq!(r.name, "duration:issue_refund");
    assert_eq!((r.status, r.reason_code.as_str()), (AssertionStatus::Fail as i32, "TOO_SLOW"));
    assert_eq!(r.positions, [4]);
    assert_eq!(r.reason, "call 4 issue_refund took 2,350 ms; at most 2,000 ms allowed");
    // Untimed calls of other tools are not considered.
    assert_eq!(
        grade(
            assertion,
            &Trace { calls: vec![refund_lasting(2_000_000_000), lookup], ..Trace::default() }
        )
        .reason_code,
        ""
    );

    // The same call with end_time_unix_nano 0.
    let mut untimed = refund_lasting(2_350_000_000);
    untimed.end_time_unix_nano = 0;
    let r = grade(assertion, &Trace { calls: vec![untimed], ..Trace::default() });
    assert_eq!(r.reason_code, "TIMING_NOT_RECORDED");
    assert_eq!(r.positions, [1]);
    // §16 writes the slow call as running "from 0 to 2,350,000,000 ns"; read literally, a
    // start of 0 is "not recorded" by §10's rule, which this build follows.
    let literal = ToolCall { end_time_unix_nano: 2_350_000_000, ..refund_lasting(0) };
    let literal = ToolCall { start_time_unix_nano: 0, ..literal };
    let r = grade(assertion, &Trace { calls: vec![literal], ..Trace::default() });
    assert_eq!(r.reason_code, "TIMING_NOT_RECORDED");
}
