//! Grading throughput: a 20-call trace (~200-byte arguments) against a 5-assertion suite.
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use prost::Message;
use trajgrade_core::proto::v1::{
    assertion, ArgsMatch, Assertion, MatchMode, NoRepeatedCalls, SequenceStep, StepCount, Suite,
    ToolCall, ToolCallArgs, ToolList, ToolSequence, Trace,
};
use trajgrade_core::{CompiledSuite, Grader, Limits};

mod workload;

const TOOLS: [&str; 5] =
    ["search_orders", "get_order", "check_refund_eligibility", "issue_refund", "reply"];

fn trace(seed: usize) -> Trace {
    let calls = (0..20)
        .map(|i| {
            let name = TOOLS[i % TOOLS.len()];
            let args = format!(
                r#"{{"order_id":"ORD-{:05}","amount_cents":{},"currency":"USD","reason":"customer reported a damaged item on delivery","items":[{{"sku":"SKU-{i}","qty":1}},{{"sku":"SKU-{}","qty":2}}],"notify":true}}"#,
                seed * 31 + i,
                5000 + i,
                i + 1
            );
            ToolCall {
                name: name.to_owned(),
                arguments_json: Some(args),
                result: Some(format!(r#"{{"ok":true,"n":{i}}}"#)),
                ..ToolCall::default()
            }
        })
        .collect();
    Trace {
        id: format!("t{seed}"),
        calls,
        final_answer: "Refunded 50.04 USD.".to_owned(),
        ..Trace::default()
    }
}

fn suite() -> Suite {
    let kind = |k: assertion::Kind| Assertion { kind: Some(k), ..Assertion::default() };
    let step = |t: &str| SequenceStep { tool: t.to_owned(), ..SequenceStep::default() };
    Suite {
        name: "bench".to_owned(),
        assertions: vec![
            kind(assertion::Kind::ToolCallArgs(ToolCallArgs {
                tool: "issue_refund".to_owned(),
                r#match: Some(ArgsMatch {
                    mode: MatchMode::Subset as i32,
                    args_json: r#"{"amount_cents":5018,"currency":"USD"}"#.to_owned(),
                    ..ArgsMatch::default()
                }),
                ..ToolCallArgs::default()
            })),
            kind(assertion::Kind::ToolSequence(ToolSequence {
                steps: vec![step("search_orders"), step("check_refund_eligibility"), step("reply")],
                ..ToolSequence::default()
            })),
            kind(assertion::Kind::AllowedTools(ToolList {
                tools: vec![
                    "search_*".to_owned(),
                    "get_*".to_owned(),
                    "check_*".to_owned(),
                    "issue_refund".to_owned(),
                    "reply".to_owned(),
                ],
                ignore_case: false,
            })),
            kind(assertion::Kind::NoRepeatedCalls(NoRepeatedCalls::default())),
            kind(assertion::Kind::StepCount(StepCount { min: None, max: Some(30) })),
        ],
    }
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let compiled = CompiledSuite::compile(&suite(), &limits).expect("the bench suite is valid");
    let t = trace(1);
    let bytes = t.encode_to_vec();

    let mut g = c.benchmark_group("grade");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decoded_trace", |b| b.iter(|| compiled.grade(&t, &limits)));
    g.bench_function("trace_bytes", |b| b.iter(|| compiled.check_and_grade(&bytes, &limits)));
    g.finish();

    let grader = Grader::new(limits.clone(), 1);
    let traces: Vec<Vec<u8>> = (0..1000).map(|i| trace(i).encode_to_vec()).collect();
    let refs: Vec<&[u8]> = traces.iter().map(Vec::as_slice).collect();
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Elements(refs.len() as u64));
    g.bench_function("grade_traces_1000_one_thread", |b| {
        b.iter_batched(|| (), |()| grader.grade_traces(&compiled, &refs), BatchSize::SmallInput);
    });
    g.finish();

    // The issue's target (bench/workloads.py shape): bytes in, TraceOutcome bytes out.
    let suite_bytes = workload::suite().encode_to_vec();
    let compiled = grader.compile_suite(&suite_bytes).expect("the workload suite is valid");
    let traces: Vec<Vec<u8>> =
        workload::traces(1000, 1234).iter().map(Message::encode_to_vec).collect();
    let refs: Vec<&[u8]> = traces.iter().map(Vec::as_slice).collect();
    let mut g = c.benchmark_group("workload");
    g.throughput(Throughput::Elements(refs.len() as u64));
    g.bench_function("grade_traces_1000_one_thread", |b| {
        b.iter(|| grader.grade_traces(&compiled, &refs));
    });
    let two = Grader::new(limits.clone(), 2);
    g.bench_function("grade_traces_1000_two_threads", |b| {
        b.iter(|| two.grade_traces(&compiled, &refs));
    });
    g.bench_function("decode_only_floor_1000", |b| {
        b.iter(|| refs.iter().filter(|t| Trace::decode(**t).is_ok()).count());
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
