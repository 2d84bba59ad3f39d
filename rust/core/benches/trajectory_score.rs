//! `trajectory_score` F1 and `ORDERED_F1` against v1 `trajectory_match` with the same reference,
//! on the 20-call workload traces (benches/workload.rs), in one run: the issue's bound is at
//! most 2x. `cargo bench -p trajgrade-core --bench trajectory_score`.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use trajgrade_core::{Grader, Limits};

mod workload;

/// Names only, as the other kinds' rows.
const NAMES: &str = r#""args":"MATCH_MODE_IGNORE","reference":[{"name":"search_orders"},{"name":"get_order"},{"name":"issue_refund"}]"#;
/// Five reference calls, two comparing arguments.
const ARGS: &str = r#""args":"MATCH_MODE_SUBSET","reference":[{"name":"search_orders"},{"name":"get_order","arguments_json":"{\"currency\": \"USD\"}"},{"name":"check_refund_eligibility"},{"name":"issue_refund","arguments_json":"{\"amount_cents\": 5000}"},{"name":"send_email"}]"#;

fn suites() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (label, reference) in [("names", NAMES), ("args", ARGS)] {
        let rows = [
            (
                "trajectory_match_superset",
                "trajectory_match",
                r#""mode":"TRAJECTORY_MODE_SUPERSET""#,
            ),
            ("trajectory_score_f1", "trajectory_score", r#""metric":"SCORE_METRIC_F1""#),
            (
                "trajectory_score_ordered_f1",
                "trajectory_score",
                r#""metric":"SCORE_METRIC_ORDERED_F1""#,
            ),
        ];
        for (row, kind, option) in rows {
            let json = format!(r#"{{"assertions":[{{"{kind}":{{{option},{reference}}}}}]}}"#);
            out.push((format!("{row}/{label}"), json));
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let grader = Grader::new(Limits::default(), 1);
    let traces: Vec<Vec<u8>> =
        workload::traces(1000, 1234).iter().map(Message::encode_to_vec).collect();
    let refs: Vec<&[u8]> = traces.iter().map(Vec::as_slice).collect();
    let mut g = c.benchmark_group("trajectory_score_20_calls");
    g.throughput(Throughput::Elements(refs.len() as u64));
    for (row, json) in suites() {
        let suite: trajgrade_core::proto::v1::Suite =
            serde_json::from_str(&json).expect("a bench suite decodes");
        let compiled =
            grader.compile_suite(&suite.encode_to_vec()).expect("a bench suite is valid");
        g.bench_function(row, |b| b.iter(|| grader.grade_traces(&compiled, &refs)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
