//! Every trace decoder reads every SPEC v2 field (§10) as prost does: the borrowed protobuf
//! decoder, the native JSON-line scanner (proto and lowerCamel names) and the serde path.
use prost::Message;
use trajgrade_core::json_trace;
use trajgrade_core::proto::v1::{ModelCall, ToolCall, Trace, Turn};
use trajgrade_core::trace::TraceView;
use trajgrade_core::wire::decode_trace;
use trajgrade_core::Limits;

/// A trace that sets every v2 field, with edge values (u32/u64 maxima, a cost of -0.0 and an
/// absent cost, escapes in the strings).
pub fn every_v2_field() -> Trace {
    Trace {
        id: "t-v2".to_owned(),
        calls: vec![
            ToolCall {
                name: "get_order".to_owned(),
                arguments_json: Some(r#"{"order_id": "A1"}"#.to_owned()),
                result: Some(r#"{"charged_times": 2}"#.to_owned()),
                id: "c1".to_owned(),
                start_time_unix_nano: 1_000,
                end_time_unix_nano: 2_350_001_000,
                turn: 1,
                agent: "triage".to_owned(),
                server: "orders-mcp".to_owned(),
                ..ToolCall::default()
            },
            ToolCall {
                name: "issue_refund".to_owned(),
                error: true,
                start_time_unix_nano: u64::MAX,
                turn: u32::MAX,
                agent: "triage/billing \"é\"".to_owned(),
                server: "payments\n".to_owned(),
                ..ToolCall::default()
            },
        ],
        final_answer: "refunded".to_owned(),
        metadata: [("env".to_owned(), "prod".to_owned())].into_iter().collect(),
        model_calls: vec![
            ModelCall {
                model: "gpt-x".to_owned(),
                input_tokens: 30_000,
                output_tokens: u64::MAX,
                cost: Some(0.125),
                turn: 1,
                agent: "triage".to_owned(),
                start_time_unix_nano: 5,
                end_time_unix_nano: 6,
            },
            ModelCall { cost: Some(-0.0), ..ModelCall::default() },
            ModelCall { model: "m".to_owned(), input_tokens: 1, ..ModelCall::default() },
        ],
        turns: vec![
            Turn { user_input: "refund me".to_owned(), final_answer: "done".to_owned() },
            Turn::default(),
        ],
    }
}

/// The v2 fields of a view, with costs as bits (so -0.0 and 0.0 differ).
fn fields(v: &TraceView<'_>) -> String {
    let costs: Vec<_> = v.model_calls().iter().map(|m| m.cost.map(f64::to_bits)).collect();
    let metas: Vec<_> = (0..v.len()).map(|i| v.call_meta(i)).collect();
    format!("{:?}\n{metas:?}\n{:?}\n{:?}\n{costs:?}", v.calls(), v.model_calls(), v.turns())
}

#[test]
fn protobuf_fast_path_reads_every_v2_field() {
    let limits = Limits::default();
    let t = every_v2_field();
    let bytes = t.encode_to_vec();
    let parts = decode_trace(&bytes).expect("the fast path takes it");
    let fast = TraceView::from_parts(parts, &limits);
    assert_eq!(fields(&fast), fields(&TraceView::new(&t, &limits)));
}

#[test]
fn json_line_fast_path_reads_every_v2_field_under_both_names() {
    let limits = Limits::default();
    let t = every_v2_field();
    let expected = fields(&TraceView::new(&t, &limits));
    let proto_names = serde_json::to_string(&t).expect("serializes");
    let camel = proto_names
        .replace("\"model_calls\"", "\"modelCalls\"")
        .replace("\"input_tokens\"", "\"inputTokens\"")
        .replace("\"output_tokens\"", "\"outputTokens\"")
        .replace("\"start_time_unix_nano\"", "\"startTimeUnixNano\"")
        .replace("\"end_time_unix_nano\"", "\"endTimeUnixNano\"")
        .replace("\"user_input\"", "\"userInput\"")
        .replace("\"final_answer\"", "\"finalAnswer\"");
    assert_ne!(camel, proto_names);
    for line in [&proto_names, &camel] {
        let mut buf = Vec::new();
        let decoded =
            json_trace::decode(line.as_bytes(), &mut buf).expect("the fast path takes it");
        assert_eq!(decoded.encoded_len, t.encoded_len(), "{line}");
        let serde: Trace = serde_json::from_str(line).expect("serde reads it");
        assert_eq!(serde, t, "{line}");
        assert_eq!(fields(&TraceView::from_parts(decoded.parts, &limits)), expected, "{line}");
    }
}

/// The same grading whichever decoder read the trace: prost, the borrowed protobuf decoder
/// (`grade_traces`) and the JSON-line scanner (`grade_json_traces`), on a suite whose every
/// assertion reads v2 fields.
#[test]
fn every_decoder_grades_v2_fields_alike() {
    use trajgrade_core::proto::v1::{trace_outcome, Suite, TraceOutcome};
    use trajgrade_core::{CompiledSuite, Grader};
    let suite: Suite = serde_json::from_str(
        r#"{"assertions":[
            {"duration":{"tool":"get_order","max_call_ms":"2000"}},
            {"duration":{"glob":"*","max_total_ms":"1"}},
            {"budget":{"max_input_tokens":"30000"}},
            {"budget":{"max_cost":1}},
            {"budget":{"max_model_calls":3,"max_total_tokens":"18446744073709551615"}},
            {"expression":{"expr":"calls.exists(c, c.agent == 'triage' && c.server == 'orders-mcp' && c.turn == 1)"}},
            {"expression":{"expr":"usage.input_tokens == 30001 && model_calls[1].cost == 0.0 && calls[1].duration_ms == null"}}
        ]}"#,
    )
    .expect("suite JSON decodes");
    let limits = Limits::default();
    let compiled = CompiledSuite::compile(&suite, &limits).expect("compiles");
    let t = every_v2_field();
    let by_prost = compiled.grade(&t, &limits).expect("graded");
    let codes: Vec<&str> = by_prost.results.iter().map(|r| r.reason_code.as_str()).collect();
    // Each assertion reads what the trace holds (none passes by reading defaults).
    assert_eq!(
        codes,
        [
            "TOO_SLOW",
            "TIMING_NOT_RECORDED",
            "OVER_BUDGET",
            "COST_NOT_RECORDED",
            "OVER_BUDGET",
            "",
            ""
        ]
    );
    let grader = Grader::new(limits, 1);
    let bytes = t.encode_to_vec();
    let line = serde_json::to_vec(&t).expect("serializes");
    let by_bytes = grader.grade_traces(&compiled, &[&bytes]);
    let by_line = grader.grade_json_traces(&compiled, &[&line]);
    assert_eq!(by_bytes, by_line);
    let outcome = TraceOutcome::decode(&by_bytes[0][..]).expect("decodes");
    assert_eq!(outcome.outcome, Some(trace_outcome::Outcome::Result(by_prost)));
}
