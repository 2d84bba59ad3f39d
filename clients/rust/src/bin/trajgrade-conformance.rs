//! Grades a test vector through every grading RPC and prints one JSON line per outcome.
//!
//! ```text
//! trajgrade-conformance <address> <vectors.json>
//! ```
//!
//! vectors.json is `{"suite": Suite, "traces": [Trace, ...]}` in the protobuf JSON mapping.
//! Output: `{"rpc":"RegisterSuite","suite_id":...}`, then one
//! `{"rpc":"GradeTrace"|"BatchGradeTraces"|"StreamGradeTraces"|"StreamGradeTracesOnePerMessage","index":i,"outcome":TraceOutcome}`
//! per trace and RPC. StreamGradeTraces sends chunks of 4 traces per message (the last one
//! partial); StreamGradeTracesOnePerMessage sends the single-trace form. Each
//! ImportSuiteRequest of the optional `imports` list is sent as it stands and printed as
//! `{"rpc":"ImportSuite","index":i,"response":ImportSuiteResponse}`.

use std::{process::ExitCode, time::Duration};

use serde::Deserialize;
use serde_json::json;
use trajgrade_client::{
    pb::{trace_outcome, ImportSuiteRequest, Suite, Trace, TraceOutcome},
    Client,
};

#[derive(Deserialize)]
struct Vectors {
    suite: Suite,
    traces: Vec<Trace>,
    #[serde(default)]
    imports: Vec<ImportSuiteRequest>,
}

fn emit(rpc: &str, outcomes: &[TraceOutcome]) -> Result<(), serde_json::Error> {
    for (index, outcome) in outcomes.iter().enumerate() {
        println!(
            "{}",
            json!({"rpc": rpc, "index": index, "outcome": serde_json::to_value(outcome)?})
        );
    }
    Ok(())
}

async fn run(address: &str, path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let text = tokio::fs::read_to_string(path).await?;
    let Vectors { suite, traces, imports } = serde_json::from_str(&text)?;
    let mut client = Client::connect(address, Duration::from_secs(60)).await?;

    let suite_id = client.register_suite(suite).await?;
    println!("{}", json!({"rpc": "RegisterSuite", "suite_id": suite_id}));

    let mut single = Vec::with_capacity(traces.len());
    for trace in &traces {
        let result = client.grade_trace(&suite_id, trace.clone()).await?;
        single.push(TraceOutcome { outcome: Some(trace_outcome::Outcome::Result(result)) });
    }
    emit("GradeTrace", &single)?;
    emit("BatchGradeTraces", &client.batch_grade_traces(&suite_id, traces.clone()).await?)?;
    let chunked = client.stream_grade_traces_chunked(&suite_id, traces.clone(), 4).await?;
    emit("StreamGradeTraces", &chunked)?;
    let single = client.stream_grade_traces_chunked(&suite_id, traces, 1).await?;
    emit("StreamGradeTracesOnePerMessage", &single)?;
    for (index, request) in imports.into_iter().enumerate() {
        let response = serde_json::to_value(client.import_suite(request).await?)?;
        println!("{}", json!({"rpc": "ImportSuite", "index": index, "response": response}));
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [address, path] = args.as_slice() else {
        eprintln!("usage: trajgrade-conformance <address> <vectors.json>");
        return ExitCode::from(2);
    };
    match run(address, path).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trajgrade-conformance: {e}");
            ExitCode::FAILURE
        }
    }
}
