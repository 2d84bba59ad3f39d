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
//!
//! The watch mode follows live grading and prints the first N results, then exits:
//!
//! ```text
//! trajgrade-conformance watch --addr ADDR [--suite ID]... [--verdict VERDICT_...]...
//!     [--service NAME]... --count N [--token T] [--timeout-s S]
//! ```
//!
//! Output lines: `{"rpc":"WatchResults","index":i,"response":WatchResultsResponse}`. `--token`
//! sends `authorization: Bearer T` on the call; `--timeout-s` (default 120) bounds the whole
//! watch.

use std::{process::ExitCode, time::Duration};

use serde::Deserialize;
use serde_json::json;
use tokio_stream::StreamExt;
use trajgrade_client::{
    pb::{
        trace_outcome, ImportSuiteRequest, Suite, Trace, TraceOutcome, Verdict, WatchResultsRequest,
    },
    Client,
};

const WATCH_USAGE: &str = "usage: trajgrade-conformance watch --addr ADDR [--suite ID]... \
    [--verdict V]... [--service S]... --count N [--token T] [--timeout-s S]";

/// The watch mode's flags.
struct WatchArgs {
    address: String,
    request: WatchResultsRequest,
    count: usize,
    token: Option<String>,
    timeout: Duration,
}

fn parse_watch(args: &[String]) -> Result<WatchArgs, String> {
    let mut address = None;
    let mut request = WatchResultsRequest::default();
    let mut count = 0;
    let mut token = None;
    let mut timeout = Duration::from_secs(120);
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?.clone();
        match flag.as_str() {
            "--addr" => address = Some(value),
            "--suite" => request.suite_ids.push(value),
            "--verdict" => request.verdicts.push(
                Verdict::from_str_name(&value).ok_or_else(|| format!("unknown verdict {value}"))?
                    as i32,
            ),
            "--service" => request.service_names.push(value),
            "--count" => count = value.parse().map_err(|e| format!("--count: {e}"))?,
            "--token" => token = Some(value),
            "--timeout-s" => {
                timeout = Duration::try_from_secs_f64(
                    value.parse().map_err(|e| format!("--timeout-s: {e}"))?,
                )
                .map_err(|e| format!("--timeout-s: {e}"))?;
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    match address {
        Some(address) if count > 0 => Ok(WatchArgs { address, request, count, token, timeout }),
        _ => Err("--addr and a --count above 0 are required".into()),
    }
}

async fn watch(args: WatchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut client = Client::connect(&args.address, Duration::from_secs(60)).await?;
    if let Some(token) = &args.token {
        client = client.with_token(token)?;
    }
    let mut printed = 0;
    let follow = async {
        let mut results = client.watch_results(args.request).await?;
        while printed < args.count {
            let Some(result) = results.next().await else { break };
            let response = serde_json::to_value(
                result.map_err(|e| format!("WatchResults after {printed} results: {e}"))?,
            )?;
            println!("{}", json!({"rpc": "WatchResults", "index": printed, "response": response}));
            printed += 1;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    tokio::time::timeout(args.timeout, follow).await.map_err(|_| "timed out")??;
    if printed < args.count {
        return Err(format!("WatchResults ended after {printed} of {} results", args.count).into());
    }
    Ok(())
}

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
    if args.first().map(String::as_str) == Some("watch") {
        let parsed = match parse_watch(&args[1..]) {
            Ok(parsed) => parsed,
            Err(e) => {
                eprintln!("{e}\n{WATCH_USAGE}");
                return ExitCode::from(2);
            }
        };
        return match watch(parsed).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("trajgrade-conformance watch: {e}");
                ExitCode::FAILURE
            }
        };
    }
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
