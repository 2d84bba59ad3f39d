//! The `Grader`'s tests: every entry point, the caches, item errors and cancellation.
use prost::Message;

use super::Grader;
use crate::jsonl_block::{Origin, Unit};
use crate::limits::Limits;
use crate::proto::v1::{
    batch_grade_traces_request, grade_trace_request, trace_outcome, BatchGradeTracesRequest,
    BatchGradeTracesResponse, GradeTraceRequest, GradeTraceResponse, Suite, ToolCall, Trace,
    TraceOutcome,
};
use crate::suite::CompiledSuite;
use crate::trace::TraceView;

fn suite() -> Suite {
    serde_json::from_str(r#"{"assertions":[{"tool_called":{"tool":"a"}}]}"#).expect("decodes")
}

fn trace(id: &str, names: &[&str]) -> Trace {
    Trace {
        id: id.to_owned(),
        calls: names
            .iter()
            .map(|n| ToolCall { name: (*n).to_owned(), ..ToolCall::default() })
            .collect(),
        ..Trace::default()
    }
}

#[test]
fn inline_suites_over_max_suite_bytes_are_refused_on_every_path() {
    let encoded = suite().encode_to_vec();
    let limits = Limits { max_suite_bytes: encoded.len() - 1, ..Limits::default() };
    let g = Grader::new(limits, 1);
    let single = GradeTraceRequest {
        trace: Some(trace("t1", &["a"])),
        suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
    }
    .encode_to_vec();
    let batch = BatchGradeTracesRequest {
        suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
        traces: vec![trace("t1", &["a"])],
    }
    .encode_to_vec();
    let errors = [
        g.grade_requests(&[single.as_slice()]).remove(0).expect_err("too large"),
        g.grade_batch_request(&batch).expect_err("too large"),
        g.compile_suite(&encoded).expect_err("too large"),
        g.register_suite(&encoded).expect_err("too large"),
    ];
    for e in errors {
        assert_eq!((e.reason_code(), e.field()), ("SUITE_TOO_LARGE", "suite"));
        assert!(e.message().contains("max_suite_bytes"), "{}", e.message());
    }
    // At the limit it is graded (and the cached raw bytes do not bypass the check).
    let fits = Grader::new(Limits { max_suite_bytes: encoded.len(), ..Limits::default() }, 1);
    assert!(fits.grade_requests(&[single.as_slice()]).remove(0).is_ok());
    assert!(fits.grade_batch_request(&batch).is_ok());
}

/// A suite whose one step is never found, so that grading visits every call: work grows with
/// the trace.
fn scan_every_call() -> Suite {
    serde_json::from_str(
        r#"{"assertions":[{"tool_sequence":{"steps":[{"tool":"a"},{"tool":"b"}]}}]}"#,
    )
    .expect("decodes")
}

#[test]
fn here_grading_defers_what_needs_more_than_its_cap() {
    let g = Grader::new(Limits::default(), 1);
    let scan = scan_every_call();
    let request = |calls: &[&str]| {
        GradeTraceRequest {
            trace: Some(trace("t1", calls)),
            suite_ref: Some(grade_trace_request::SuiteRef::Suite(scan.clone())),
        }
        .encode_to_vec()
    };
    let (small, big) = (request(&["a"]), request(&["a"; 400]));
    let refs = [small.as_slice(), big.as_slice()];
    let full = g.grade_requests(&refs);
    // A generous cap grades both, byte for byte as the pool does.
    let roomy = g.grade_requests_here(&refs, &[], u64::MAX);
    for (here, pool) in roomy.iter().zip(&full) {
        assert_eq!(here.as_ref().expect("not deferred").as_ref().ok(), pool.as_ref().ok());
    }
    // A tight cap grades the small trace and hands the big one back, never an error.
    let units = |r: &[u8]| {
        let t = GradeTraceRequest::decode(r).expect("decodes").trace.expect("has a trace");
        let suite = CompiledSuite::compile(&scan, g.limits()).expect("compiles");
        let view = TraceView::new(&t, g.limits());
        suite.grade_view(&view).expect("graded");
        view.work().used()
    };
    let cap = units(&small);
    assert!(units(&big) > cap, "the big trace costs more");
    let tight = g.grade_requests_here(&refs, &[], cap);
    assert_eq!(tight[0].as_ref().expect("fits").as_ref().ok(), full[0].as_ref().ok());
    assert!(tight[1].is_none(), "deferred to the pool");
}

#[test]
fn traces_graded_here_match_the_pool_and_defer_what_needs_more_than_the_cap() {
    let g = Grader::new(Limits::default(), 1);
    let scan = scan_every_call();
    let compiled = g.compile_suite(&scan.encode_to_vec()).expect("compiles");
    let (small, big) =
        (trace("t1", &["a"]).encode_to_vec(), trace("t2", &["a"; 400]).encode_to_vec());
    let refs = [small.as_slice(), vec![0xFF].as_slice(), big.as_slice()].map(<[u8]>::to_vec);
    let refs: Vec<&[u8]> = refs.iter().map(Vec::as_slice).collect();
    let pool = g.grade_traces(&compiled, &refs);
    // A generous cap (at or above the grader's limit) grades all three as the pool does,
    // the undecodable one included (its ItemError, not a deferral).
    for cap in [u64::MAX, g.limits().max_work_units] {
        let here: Vec<Vec<u8>> =
            g.grade_traces_here(&compiled, &refs, cap).into_iter().map(Option::unwrap).collect();
        assert_eq!(here, pool);
    }
    // A tight cap grades the small trace and the bad bytes, and hands the big trace back.
    let units = |t: &[u8]| {
        let t = Trace::decode(t).expect("decodes");
        let view = TraceView::new(&t, g.limits());
        compiled.grade_view(&view).expect("graded");
        view.work().used()
    };
    let cap = units(&small);
    assert!(units(&big) > cap, "the big trace costs more");
    let tight = g.grade_traces_here(&compiled, &refs, cap);
    assert_eq!(tight[0].as_ref(), Some(&pool[0]));
    assert_eq!(tight[1].as_ref(), Some(&pool[1]));
    assert!(tight[2].is_none(), "deferred to the pool");
}

#[test]
fn stream_chunks_are_split_and_framed_in_the_core() {
    let g = Grader::new(Limits { max_batch_items: 3, ..Limits::default() }, 1);
    let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
    let traces =
        [trace("t1", &["a"]).encode_to_vec(), vec![0xFF], trace("t3", &["b"]).encode_to_vec()];
    let field = |tag: u8, value: &[u8]| {
        let mut out = vec![tag << 3 | 2];
        prost::encoding::encode_varint(value.len() as u64, &mut out);
        out.extend_from_slice(value);
        out
    };
    // The traces among other fields (a suite_id, a varint): only field 4 is graded.
    let mut message: Vec<u8> = traces.iter().flat_map(|t| field(4, t)).collect();
    message.extend(field(3, b"s1-ignored"));
    message.extend([0x28, 0x01]);
    let refs: Vec<&[u8]> = traces.iter().map(Vec::as_slice).collect();
    let expected: Vec<u8> =
        g.grade_traces(&compiled, &refs).iter().flat_map(|o| field(2, o)).collect();
    assert_eq!(g.grade_stream_chunk(&compiled, &message, None).expect("graded"), expected);
    let broken = g.grade_stream_chunk(&compiled, &message[..message.len() - 3], None);
    assert_eq!(broken.expect_err("truncated").reason_code(), "INVALID_REQUEST");
    let four: Vec<u8> = [&message[..], &field(4, &traces[0])].concat();
    let over = g.grade_stream_chunk(&compiled, &four, None).expect_err("over max_batch_items");
    assert_eq!(over.reason_code(), "TOO_MANY_TRACES");
}

#[test]
fn inline_suites_are_cached_by_raw_bytes() {
    let g = Grader::new(Limits { suite_cache_size: 1, ..Limits::default() }, 1);
    let request = |t: Trace| {
        GradeTraceRequest {
            trace: Some(t),
            suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
        }
        .encode_to_vec()
    };
    let cold = Grader::new(Limits::default(), 1);
    let mut bad = request(trace("t9", &["a"]));
    // Invalid UTF-8 in the trace id: the same prost error with or without a cached suite.
    let at = bad.windows(2).position(|w| w == b"t9").expect("id");
    bad[at] = 0xFF;
    let other = GradeTraceRequest {
        trace: Some(trace("t3", &["b"])),
        suite_ref: Some(grade_trace_request::SuiteRef::Suite(
            serde_json::from_str(r#"{"assertions":[{"tool_called":{"tool":"b"}}]}"#)
                .expect("decodes"),
        )),
    }
    .encode_to_vec();
    let mut both = request(trace("t4", &["a"]));
    both.extend(
        GradeTraceRequest {
            trace: None,
            suite_ref: Some(grade_trace_request::SuiteRef::SuiteId("nope".to_owned())),
        }
        .encode_to_vec(),
    );
    let reqs = [
        request(trace("t1", &["a"])),
        request(trace("t2", &["b"])),
        bad,
        other,
        request(trace("t5", &["a"])),
        both,
    ];
    for r in &reqs {
        let warm = g.grade_requests(&[r]).pop().expect("one");
        let fresh = cold.grade_requests(&[r]).pop().expect("one");
        match (warm, fresh) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("{a:?} vs {b:?}"),
        }
    }
    let batch = |id: &str| {
        BatchGradeTracesRequest {
            suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
            traces: vec![trace(id, &["a"]), trace("x", &[])],
        }
        .encode_to_vec()
    };
    for r in [batch("b1"), batch("b2")] {
        assert_eq!(
            g.grade_batch_request(&r).expect("grades"),
            cold.grade_batch_request(&r).expect("grades")
        );
    }
}

#[test]
fn suites_are_cached_by_content() {
    let g = Grader::new(Limits::default(), 1);
    let bytes = suite().encode_to_vec();
    let a = g.compile_suite(&bytes).expect("compiles");
    let id = g.register_suite(&bytes).expect("registers");
    assert_eq!(a.id(), id);
    assert!(id.starts_with("s1-") && id.len() == 35, "{id}");
    assert!(std::sync::Arc::ptr_eq(&a, &g.get_suite(&id).expect("cached")));
    assert!(g.get_suite("s1-unknown").is_none());
}

#[test]
fn per_item_errors_stay_in_their_item() {
    let g = Grader::new(Limits { max_calls_per_trace: 2, ..Limits::default() }, 2);
    let ok = GradeTraceRequest {
        trace: Some(trace("ok", &["a"])),
        suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
    }
    .encode_to_vec();
    let unknown = GradeTraceRequest {
        trace: Some(trace("u", &["a"])),
        suite_ref: Some(grade_trace_request::SuiteRef::SuiteId("s1-nope".to_owned())),
    }
    .encode_to_vec();
    let too_many = GradeTraceRequest {
        trace: Some(trace("big", &["a", "a", "a"])),
        suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
    }
    .encode_to_vec();
    let out = g.grade_requests(&[&ok, &unknown, &too_many, b"\xff\xff"]);
    let first = GradeTraceResponse::decode(out[0].as_deref().expect("graded")).expect("decodes");
    assert_eq!(first.result.expect("result").trace_id, "ok");
    assert_eq!(
        out[1].as_ref().map_err(crate::CoreError::reason_code).err(),
        Some("SUITE_NOT_FOUND")
    );
    let e = out[2].as_ref().expect_err("too many calls");
    assert_eq!((e.reason_code(), e.field()), ("TOO_MANY_CALLS", "trace.calls"));
    assert_eq!(
        out[3].as_ref().map_err(crate::CoreError::reason_code).err(),
        Some("INVALID_REQUEST")
    );
}

#[test]
fn batch_request_and_trace_bytes() {
    let g = Grader::new(Limits { max_calls_per_trace: 2, ..Limits::default() }, 2);
    let req = BatchGradeTracesRequest {
        suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
        traces: vec![trace("t0", &["a"]), trace("t1", &["a", "b", "c"]), trace("t2", &["b"])],
    };
    let resp = BatchGradeTracesResponse::decode(
        g.grade_batch_request(&req.encode_to_vec()).expect("graded").as_slice(),
    )
    .expect("decodes");
    assert_eq!(resp.outcomes.len(), 3);
    match &resp.outcomes[1].outcome {
        Some(trace_outcome::Outcome::Error(e)) => {
            assert_eq!((e.trace_id.as_str(), e.field.as_str()), ("t1", "traces[1].calls"));
        }
        other => panic!("expected an item error, got {other:?}"),
    }
    let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
    let t0 = trace("t0", &["a"]).encode_to_vec();
    let out = g.grade_traces(&compiled, &[&t0, b"\x0a"]);
    let bad = TraceOutcome::decode(out[1].as_slice()).expect("decodes");
    match bad.outcome {
        Some(trace_outcome::Outcome::Error(e)) => assert_eq!(e.reason_code, "INVALID_TRACE"),
        other => panic!("expected an item error, got {other:?}"),
    }
}

fn outcome_of(bytes: &[u8]) -> trace_outcome::Outcome {
    TraceOutcome::decode(bytes).expect("decodes").outcome.expect("set")
}

#[test]
fn one_undecodable_trace_does_not_sink_the_batch() {
    let g = Grader::new(Limits::default(), 2);
    // traces[1] has a name that is not UTF-8 (and id "bad"): prost would reject the batch.
    let mut raw = BatchGradeTracesRequest {
        suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
        traces: vec![trace("t0", &["a"])],
    }
    .encode_to_vec();
    let bad_trace = b"\x0a\x03bad\x12\x03\x0a\x01\xff";
    raw.push(0x1a);
    raw.push(bad_trace.len() as u8);
    raw.extend_from_slice(bad_trace);
    raw.extend(
        BatchGradeTracesRequest { suite_ref: None, traces: vec![trace("t2", &["b"])] }
            .encode_to_vec(),
    );
    let resp =
        BatchGradeTracesResponse::decode(g.grade_batch_request(&raw).expect("graded").as_slice())
            .expect("decodes");
    assert_eq!(resp.outcomes.len(), 3);
    match &resp.outcomes[1].outcome {
        Some(trace_outcome::Outcome::Error(e)) => assert_eq!(
            (e.trace_id.as_str(), e.reason_code.as_str(), e.field.as_str()),
            ("bad", "INVALID_TRACE", "traces[1]")
        ),
        other => panic!("expected an item error, got {other:?}"),
    }
    assert!(matches!(resp.outcomes[2].outcome, Some(trace_outcome::Outcome::Result(_))));
    // The same through grade_traces: the id is read leniently.
    let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
    match outcome_of(&g.grade_traces(&compiled, &[bad_trace])[0]) {
        trace_outcome::Outcome::Error(e) => assert_eq!(e.trace_id, "bad"),
        other @ trace_outcome::Outcome::Result(_) => {
            panic!("expected an item error, got {other:?}")
        }
    }
}

#[test]
fn a_trace_over_the_work_limit_is_its_item_error_alone() {
    let g = Grader::new(Limits { max_work_units: 50, ..Limits::default() }, 2);
    let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
    let small = trace("small", &["a"]).encode_to_vec();
    let names: Vec<&str> = vec!["a"; 60];
    let big = trace("big", &names).encode_to_vec();
    let out = g.grade_traces(&compiled, &[&small, &big, &small]);
    assert!(matches!(outcome_of(&out[0]), trace_outcome::Outcome::Result(_)));
    assert!(matches!(outcome_of(&out[2]), trace_outcome::Outcome::Result(_)));
    match outcome_of(&out[1]) {
        trace_outcome::Outcome::Error(e) => assert_eq!(
            (e.trace_id.as_str(), e.reason_code.as_str(), e.field.as_str(), e.message.as_str()),
            (
                "big",
                "WORK_LIMIT_EXCEEDED",
                "traces[1]",
                "grading needed more than 50 work units (limit max_work_units)"
            )
        ),
        other @ trace_outcome::Outcome::Result(_) => {
            panic!("expected an item error, got {other:?}")
        }
    }
    // The unary form: the request's error, at `trace`.
    let request = |t: Trace| {
        GradeTraceRequest {
            trace: Some(t),
            suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
        }
        .encode_to_vec()
    };
    let out = g.grade_requests(&[&request(trace("big", &names)), &request(trace("s", &["a"]))]);
    let e = out[0].as_ref().expect_err("over the limit");
    assert_eq!((e.reason_code(), e.field()), ("WORK_LIMIT_EXCEEDED", "trace"));
    assert!(out[1].is_ok());
    // JSON lines and their rows.
    let line = serde_json::to_vec(&trace("big", &names)).expect("json");
    let rows = g.grade_json_traces_to_json(&compiled, &[&line]);
    let row = String::from_utf8(rows[0].clone()).expect("utf-8");
    assert!(
        row.contains("\"reason_code\":\"WORK_LIMIT_EXCEEDED\",\"field\":\"lines[0]\""),
        "{row}"
    );
}

#[test]
fn a_cancelled_flag_stops_every_item() {
    let g = Grader::new(Limits::default(), 2);
    let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
    let t = trace("t", &["a"]).encode_to_vec();
    let flag = crate::work::CancelFlag::new();
    flag.cancel();
    let out = g.grade_traces_with(&compiled, &[&t, &t], Some(&flag));
    for o in &out {
        match outcome_of(o) {
            trace_outcome::Outcome::Error(e) => assert_eq!(e.reason_code, "CANCELLED"),
            other @ trace_outcome::Outcome::Result(_) => {
                panic!("expected an item error, got {other:?}")
            }
        }
    }
    let live = crate::work::CancelFlag::new();
    let out = g.grade_traces_with(&compiled, &[&t], Some(&live));
    assert!(matches!(outcome_of(&out[0]), trace_outcome::Outcome::Result(_)));
}

#[test]
fn a_panic_is_that_items_internal_error() {
    let out: Vec<u8> = super::guarded(|| panic!("boom"), || "t9".to_owned(), 4, "traces");
    match outcome_of(&out) {
        trace_outcome::Outcome::Error(e) => assert_eq!(
            (e.trace_id.as_str(), e.reason_code.as_str(), e.field.as_str(), e.message.as_str()),
            ("t9", "INTERNAL", "traces[4]", "internal error")
        ),
        other @ trace_outcome::Outcome::Result(_) => {
            panic!("expected an item error, got {other:?}")
        }
    }
}

#[test]
fn registered_suites_survive_inline_traffic_and_evict_lru() {
    let g = Grader::new(Limits { suite_cache_size: 1, ..Limits::default() }, 1)
        .with_max_registered_suites(2);
    let numbered = |n: usize| -> Vec<u8> {
        let json = format!(r#"{{"name":"s{n}","assertions":[{{"tool_called":{{"tool":"a"}}}}]}}"#);
        serde_json::from_str::<Suite>(&json).expect("decodes").encode_to_vec()
    };
    let r0 = g.register_suite(&numbered(0)).expect("registers");
    for n in 10..20 {
        g.compile_suite(&numbered(n)).expect("compiles");
    }
    assert!(g.get_suite(&r0).is_some(), "inline suites evicted a registered one");
    let r1 = g.register_suite(&numbered(1)).expect("registers");
    assert!(g.get_suite(&r0).is_some()); // r0 is now the most recently used
    let r2 = g.register_suite(&numbered(2)).expect("registers");
    assert!(g.get_suite(&r1).is_none(), "the least recently used registered suite goes");
    assert!(g.get_suite(&r0).is_some() && g.get_suite(&r2).is_some());
}

#[test]
fn json_lines() {
    let g = Grader::new(Limits::default(), 2);
    let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
    let lines: [&[u8]; 3] = [
        br#"{"id":"j0","calls":[{"name":"a","argumentsJson":"{}"}],"final_answer":"x"}"#,
        br#"{"id":"j1","calls":[{"nam":"a"}]}"#,
        b"not json",
    ];
    let out = g.grade_json_traces(&compiled, &lines);
    let t0 = trace("j0", &["a"]);
    let mut t0 = t0;
    t0.calls[0].arguments_json = Some("{}".to_owned());
    t0.final_answer = "x".to_owned();
    assert_eq!(out[0], g.grade_traces(&compiled, &[&t0.encode_to_vec()])[0]);
    match outcome_of(&out[1]) {
        trace_outcome::Outcome::Error(e) => {
            assert_eq!((e.trace_id.as_str(), e.field.as_str()), ("j1", "lines[1]"));
            assert_eq!(e.reason_code, "INVALID_TRACE");
            assert!(e.message.contains("nam"), "{}", e.message);
        }
        other @ trace_outcome::Outcome::Result(_) => {
            panic!("expected an item error, got {other:?}")
        }
    }
    let rows = g.grade_json_traces_to_json(&compiled, &lines);
    let id = compiled.id();
    assert_eq!(
        String::from_utf8(rows[0].clone()).expect("utf-8"),
        format!(
            "{{\"trace_id\":\"j0\",\"suite_id\":\"{id}\",\"verdict\":\"VERDICT_PASS\",\"score\":1.0,\"soft_failures\":0,\"results\":[{{\"name\":\"tool_called:a\",\"status\":\"ASSERTION_STATUS_PASS\",\"severity\":\"SEVERITY_HARD\",\"reason_code\":\"\",\"reason\":\"\",\"positions\":[1],\"score\":1.0}}],\"mean_score\":1.0}}\n"
        )
    );
    let error_row = String::from_utf8(rows[2].clone()).expect("utf-8");
    assert!(
        error_row.starts_with(&format!(
            "{{\"trace_id\":\"\",\"suite_id\":\"{id}\",\"error\":{{\"reason_code\":\"INVALID_TRACE\",\"field\":\"lines[2]\",\"message\":\""
        )),
        "{error_row}"
    );
}

#[test]
fn a_block_is_its_lines_rows_joined_and_counted() {
    use crate::json_trace::generate::{line, odd_line, Rng};
    let g = Grader::new(Limits { max_calls_per_trace: 5, ..Limits::default() }, 2);
    let suite: Suite = serde_json::from_str(
        r#"{"assertions":[{"tool_called":{"tool":"x"}},
            {"tool_count":{"tool":"y","max":1},"severity":"SEVERITY_SOFT"}]}"#,
    )
    .expect("decodes");
    let compiled = g.compile_suite(&suite.encode_to_vec()).expect("compiles");
    let mut rng = Rng(5);
    let mut data = Vec::new();
    let mut lines = Vec::new();
    // The file line number (from 12, the block's first) of each non-blank line.
    let mut numbers = Vec::new();
    let mut number = 12;
    for i in 0..700 {
        let mut l = if i % 4 == 0 { odd_line(&mut rng) } else { line(&mut rng).into_bytes() };
        l.retain(|&b| b != b'\n');
        l.push(b'\n');
        data.extend_from_slice(&l);
        // A line of only whitespace is skipped, as a regrade's reader skips it.
        if !l.iter().all(|b| b" \t\n\r\x0b\x0c".contains(b)) {
            lines.push(l);
            numbers.push(number);
        }
        number += 1;
        if i % 50 == 0 {
            data.extend_from_slice(b" \t\r\n");
            number += 1;
        }
    }
    let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    // The rows of the lines one by one, error fields (`lines[i]`) named by file and line.
    let rows: Vec<Vec<u8>> = g
        .grade_json_traces_to_json(&compiled, &refs)
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            let row = String::from_utf8(row).expect("utf-8");
            let at = format!("\"field\":\"t.jsonl:line {}", numbers[i]);
            row.replacen(&format!("\"field\":\"lines[{i}]"), &at, 1).into_bytes()
        })
        .collect();
    let origin = Origin { source: "t.jsonl", unit: Unit::Line, first: 12 };
    let block = g.grade_jsonl_block(&compiled, &data, &origin, 5, false);
    assert!(block.columns.is_none());
    // With Arrow columns, the same counts and marks; the rows written are the marked ones only.
    let arrowed = g.grade_jsonl_block(&compiled, &data, &origin, 5, true);
    let columns = arrowed.columns.as_ref().expect("asked for");
    let errors = columns.error.len - columns.error.nulls;
    assert_eq!((columns.rows, errors as u64), (block.items, block.errors));
    assert_eq!(
        (arrowed.items, arrowed.passed, arrowed.failed),
        (block.items, block.passed, block.failed)
    );
    assert_eq!(
        arrowed.marks.iter().map(|m| m.item).collect::<Vec<_>>(),
        block.marks.iter().map(|m| m.item).collect::<Vec<_>>()
    );
    // Only error and failing rows are written (each run of the pool marks up to max_failing
    // failing rows; the merge keeps the first max_failing marks).
    let written: Vec<&str> = arrowed.rows.split_inclusive('\n').collect();
    assert!(written.len() < block.items, "{} rows written", written.len());
    assert!(written.iter().all(|r| !r.contains("\"verdict\":\"VERDICT_PASS\"")));
    let no_sample = g.grade_jsonl_block(&compiled, &data, &origin, 0, true);
    assert_eq!(no_sample.rows.split_inclusive('\n').count() as u64, block.errors);
    for m in &arrowed.marks {
        assert_eq!(arrowed.rows.as_bytes()[m.row.clone()], rows[m.item][..]);
    }
    for (i, (got, want)) in block.rows.split_inclusive('\n').zip(&rows).enumerate() {
        assert_eq!(got.as_bytes(), &want[..], "row {i}: {:?}", String::from_utf8_lossy(refs[i]));
    }
    assert_eq!(block.rows.as_bytes(), rows.concat());
    assert_eq!(block.items, rows.len());
    let parsed: Vec<serde_json::Value> =
        rows.iter().map(|r| serde_json::from_slice(r).expect("row")).collect();
    let graded: Vec<_> = parsed.iter().filter(|r| r.get("error").is_none()).collect();
    let passes = graded.iter().filter(|r| r["verdict"] == "VERDICT_PASS").count();
    assert_eq!((block.passed, block.failed), (passes as u64, (graded.len() - passes) as u64));
    let soft: u64 = graded.iter().map(|r| r["soft_failures"].as_u64().expect("u32")).sum();
    assert_eq!(block.soft_failures, soft);
    for c in &block.assertions {
        let results = graded.iter().flat_map(|r| r["results"].as_array().expect("list"));
        let named: Vec<_> = results.filter(|a| a["name"] == c.name.as_str()).collect();
        let ok = named.iter().filter(|a| a["status"] == "ASSERTION_STATUS_PASS").count();
        assert_eq!((c.passed, c.failed), (ok as u64, (named.len() - ok) as u64), "{}", c.name);
    }
    let errors: Vec<usize> =
        (0..parsed.len()).filter(|&i| parsed[i].get("error").is_some()).collect();
    let failing: Vec<usize> = (0..parsed.len())
        .filter(|&i| parsed[i].get("error").is_none() && parsed[i]["verdict"] != "VERDICT_PASS")
        .take(5)
        .collect();
    let mut expected: Vec<usize> = errors.iter().chain(&failing).copied().collect();
    expected.sort_unstable();
    assert!(!errors.is_empty() && failing.len() == 5);
    assert_eq!(block.marks.iter().map(|m| m.item).collect::<Vec<_>>(), expected);
    for m in &block.marks {
        assert_eq!(m.error, errors.contains(&m.item));
        assert_eq!(block.rows.as_bytes()[m.row.clone()], rows[m.item][..]);
    }
    // Error rows count by reason code; every one names its file and line.
    let mut codes: Vec<(String, u64)> = Vec::new();
    for &i in &errors {
        let code = parsed[i]["error"]["reason_code"].as_str().expect("code").to_owned();
        match codes.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => codes.push((code, 1)),
        }
        let field = parsed[i]["error"]["field"].as_str().expect("field");
        assert!(field.starts_with(&format!("t.jsonl:line {}", numbers[i])), "{field}");
    }
    assert_eq!((block.errors, &block.error_codes), (errors.len() as u64, &codes));
    assert!(codes.len() > 1, "{codes:?}");
}

#[test]
fn json_lines_fast_and_serde_paths_agree() {
    use crate::json_trace::generate::{line, odd_line, Rng};
    use crate::trace::TraceView;
    let limits = Limits {
        max_calls_per_trace: 5,
        max_argument_bytes: 200,
        max_trace_bytes: 3000,
        ..Limits::default()
    };
    let g = Grader::new(limits, 2);
    let suite: Suite = serde_json::from_str(
        r#"{"assertions":[{"tool_called":{"tool":"x"}},
            {"tool_call_args":{"tool":"x","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{}"}}},
            {"expression":{"expr":"'env' in metadata && size(calls) > 0"}},
            {"no_repeated_calls":{}},{"grounding":{"numbers":true}}]}"#,
    )
    .expect("decodes");
    let compiled = g.compile_suite(&suite.encode_to_vec()).expect("compiles");
    let mut rng = Rng(3);
    let lines: Vec<Vec<u8>> = (0..6000)
        .map(|i| if i % 3 == 0 { odd_line(&mut rng) } else { line(&mut rng).into_bytes() })
        .collect();
    let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    let rows = g.grade_json_traces_to_json(&compiled, &refs);
    let outcomes = g.grade_json_traces(&compiled, &refs);
    let (mut graded, mut errors) = (0, 0);
    for (i, line) in refs.iter().enumerate() {
        // The previous path: serde_json + pbjson into an owned Trace.
        let (row, outcome) = match g.json_trace(line, &format!("lines[{i}]")) {
            Ok(t) => {
                graded += 1;
                let view = TraceView::new(&t, g.limits());
                (
                    crate::rows::result_row(&compiled.grade_view(&view).expect("graded")),
                    compiled.grade_view_encoded(&view).expect("graded"),
                )
            }
            Err((id, e)) => {
                errors += 1;
                let item = crate::proto::v1::ItemError {
                    trace_id: id.clone(),
                    reason_code: e.reason_code().to_owned(),
                    field: e.field().to_owned(),
                    message: e.message(),
                };
                (
                    crate::rows::error_row(compiled.id(), &item),
                    super::item_error(id, e.reason_code(), e.field().to_owned(), e.message()),
                )
            }
        };
        let shown = String::from_utf8_lossy(line);
        assert_eq!(String::from_utf8_lossy(&rows[i]), String::from_utf8_lossy(&row), "{shown}");
        assert_eq!(outcomes[i], outcome, "{shown}");
    }
    assert!(graded > 1000 && errors > 500, "{graded} graded, {errors} errors");
}
