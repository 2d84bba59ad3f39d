//! One CEL `expression` with a comprehension against v1 `trajectory_match`, on the same
//! 20-call workload traces (benches/workload.rs), in one run: the issue's bound is at most 2x.
//! `cargo bench -p trajgrade-core --bench expression`.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use trajgrade_core::{Grader, Limits};

mod workload;

/// (row, suite JSON): each a one-assertion suite.
const SUITES: [(&str, &str); 4] = [
    (
        "trajectory_match_superset",
        r#"{"assertions":[{"trajectory_match":{"mode":"TRAJECTORY_MODE_SUPERSET","args":"MATCH_MODE_IGNORE","reference":[{"name":"search_orders"},{"name":"get_order"},{"name":"issue_refund"}]}}]}"#,
    ),
    (
        "expression_comprehension",
        r#"{"assertions":[{"expression":{"expr":"calls.exists(c, c.name == 'issue_refund' && c.args.amount_cents >= 5000)"}}]}"#,
    ),
    (
        "expression_mixed_numbers",
        r#"{"assertions":[{"expression":{"expr":"calls.all(c, c.name != 'issue_refund' || math.abs(1.0 - c.args.amount_cents / 5000.0) <= 0.5)"}}]}"#,
    ),
    (
        "expression_result_json",
        r#"{"assertions":[{"expression":{"expr":"calls.all(c, c.result_json != null && c.result_json.ok)"}}]}"#,
    ),
];

fn bench(c: &mut Criterion) {
    let grader = Grader::new(Limits::default(), 1);
    let traces: Vec<Vec<u8>> =
        workload::traces(1000, 1234).iter().map(Message::encode_to_vec).collect();
    let refs: Vec<&[u8]> = traces.iter().map(Vec::as_slice).collect();
    let mut g = c.benchmark_group("kinds_20_calls");
    g.throughput(Throughput::Elements(refs.len() as u64));
    for (row, json) in SUITES {
        let suite: trajgrade_core::proto::v1::Suite =
            serde_json::from_str(json).expect("a bench suite decodes");
        let compiled =
            grader.compile_suite(&suite.encode_to_vec()).expect("a bench suite is valid");
        g.bench_function(row, |b| b.iter(|| grader.grade_traces(&compiled, &refs)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
