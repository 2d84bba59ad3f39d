//! Scale benchmark of the matching kinds (docs/performance.md, "Bounds per kind"): one grading
//! per case, from 10 to 10,000 calls and 1 to 10,000 references or steps, passing and failing.
//!
//! `make bench-scale` (or `cargo run --release --example scale -p trajgrade-core`) prints the
//! table: median time per grading over `--reps` (default 3) and the peak RSS of a child process
//! running the case alone. `scale --only NAME` runs one case; `scale --compare BINARY` runs each
//! case with this binary and with BINARY (e.g. this example built from an older commit),
//! interleaved, and prints both columns and their ratio. `--max-secs S` (default 60) stops
//! repeating a case that takes longer, `--timeout S` (default 120) kills a case's process.
//! `--filter TEXT` keeps the cases whose name holds TEXT.
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use prost::Message;
use trajgrade_core::proto::v1::{trace_outcome, Suite, Trace, TraceOutcome};
use trajgrade_core::{Grader, Limits};

/// One case: the assertion (JSON), the trace's calls (name, arguments) and whether it passes.
struct Case {
    name: String,
    assertion: String,
    calls: Vec<(String, String)>,
    pass: bool,
    /// Spread the calls over this many user turns (SPEC §10; 0 = no turns recorded).
    turns: usize,
}

fn call_f(k: usize) -> (String, String) {
    ("f".into(), format!(r#"{{"i":{k}}}"#))
}

/// A reference call of `f` with the arguments of call `k` (or name only), or an absent tool.
fn reference(k: Option<usize>, absent: bool) -> String {
    match (absent, k) {
        (true, _) => r#"{"name":"g"}"#.into(),
        (false, None) => r#"{"name":"f"}"#.into(),
        (false, Some(k)) => format!(r#"{{"name":"f","arguments_json":"{{\"i\":{k}}}"}}"#),
    }
}

fn trajectory(mode: &str, l: usize, m: usize, args: bool, pass: bool) -> Case {
    // References are spread over the calls, in call order (IN_ORDER passes); failing, the last
    // one names an absent tool.
    let refs: Vec<String> =
        (0..l).map(|j| reference(args.then_some(j * m / l), !pass && j == l - 1)).collect();
    let which = if args { "args" } else { "name" };
    Case {
        name: format!("trajectory_match {mode} {which} L={l} M={m} {}", verdict(pass)),
        assertion: format!(
            r#"{{"trajectory_match":{{"mode":"TRAJECTORY_MODE_{mode}","reference":[{}]}}}}"#,
            refs.join(",")
        ),
        calls: (0..m).map(call_f).collect(),
        pass,
        turns: 0,
    }
}

fn sequence(mode: &str, l: usize, m: usize, glob: bool, pass: bool) -> Case {
    let steps: Vec<&str> = (0..l)
        .map(|j| match (!pass && j == l - 1, glob) {
            (true, _) => r#"{"tool":"g"}"#,
            (false, true) => r#"{"glob":"*"}"#,
            (false, false) => r#"{"tool":"f"}"#,
        })
        .collect();
    let which = if glob { "glob" } else { "tool" };
    Case {
        name: format!("tool_sequence {mode} {which} L={l} M={m} {}", verdict(pass)),
        assertion: format!(
            r#"{{"tool_sequence":{{"mode":"SEQUENCE_MODE_{mode}","steps":[{}]}}}}"#,
            steps.join(",")
        ),
        calls: (0..m).map(call_f).collect(),
        pass,
        turns: 0,
    }
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "pass"
    } else {
        "fail"
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for &m in &[10, 1000, 10_000] {
        let some = m.min(1000);
        for pass in [true, false] {
            out.push(trajectory("STRICT", m, m, true, pass));
            out.push(trajectory("IN_ORDER", some, m, true, pass));
            out.push(trajectory("SUPERSET", some, m, false, pass));
            out.push(trajectory("SUPERSET", some, m, true, pass));
            out.push(trajectory("SUBSET", m, m, false, pass));
            out.push(trajectory("UNORDERED", m, m, false, pass));
            out.push(trajectory("UNORDERED", m, m, true, pass));
            out.push(sequence("IN_ORDER", some, m, false, pass));
            out.push(sequence("EXACT", m, m, false, pass));
            out.push(sequence("ANY_ORDER", some, m, false, pass));
            out.push(sequence("ANY_ORDER", some, m, true, pass));
            // ALL: every call of f has {"i": ...}; failing, the last one does not.
            let mut calls: Vec<_> = (0..m).map(call_f).collect();
            if !pass {
                calls[m - 1].1 = r#"{"j":0}"#.into();
            }
            out.push(Case {
                name: format!("tool_call_args ALL L=1 M={m} {}", verdict(pass)),
                assertion: r#"{"tool_call_args":{"tool":"f","quantifier":"QUANTIFIER_ALL","match":{"mode":"MATCH_MODE_REGEX","pattern":"\"i\""}}}"#.into(),
                calls,
                pass,
                turns: 0,
            });
            // Failing, every call is made twice.
            out.push(Case {
                name: format!("no_repeated_calls L=1 M={m} {}", verdict(pass)),
                assertion: r#"{"no_repeated_calls":{}}"#.into(),
                calls: (0..m).map(|k| call_f(if pass { k } else { k / 2 })).collect(),
                pass,
                turns: 0,
            });
        }
    }
    // The 1-reference and 1-step corner.
    for pass in [true, false] {
        out.push(trajectory("UNORDERED", 1, 1, true, pass));
        out.push(trajectory("SUPERSET", 1, 10_000, true, pass));
        out.push(sequence("ANY_ORDER", 1, 10_000, true, pass));
    }
    out.extend(v2_cases());
    out.extend(limit_cases());
    out
}

/// SPEC v2 (issue #12's scale curve): 10 to 10,000 calls against a 50-call reference (fewer
/// when the trace is shorter) and a 50-step `ANY_ORDER` sequence: `trajectory_score` (maximum
/// matching; longest common subsequence) and `per_turn` over 5 turns; failing, the last
/// reference or step names an absent tool.
fn v2_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for &m in &[10, 100, 1000, 10_000] {
        let l = m.min(50);
        for pass in [true, false] {
            for metric in ["F1", "ORDERED_F1"] {
                let refs: Vec<String> =
                    (0..l).map(|j| reference(Some(j * m / l), !pass && j == l - 1)).collect();
                // min_score 0 reports any score (a pass); failing, 1 needs every pair.
                out.push(Case {
                    name: format!("trajectory_score {metric} args L={l} M={m} {}", verdict(pass)),
                    assertion: format!(
                        r#"{{"trajectory_score":{{"metric":"SCORE_METRIC_{metric}","min_score":{},"reference":[{}]}}}}"#,
                        u8::from(!pass),
                        refs.join(",")
                    ),
                    calls: (0..m).map(call_f).collect(),
                    pass,
                    turns: 0,
                });
            }
            // Each reference call keeps the turn of the call it names (5 turns).
            let refs: Vec<String> = (0..l)
                .map(|j| {
                    let k = j * m / l;
                    let r = reference(Some(k), !pass && j == l - 1);
                    format!(r#"{},"turn":{}}}"#, r.trim_end_matches('}'), 1 + k * 5 / m)
                })
                .collect();
            out.push(Case {
                name: format!("per_turn 5 turns, trajectory_match SUPERSET args L={l} M={m} {}", verdict(pass)),
                assertion: format!(
                    r#"{{"scope":{{"per_turn":true}},"trajectory_match":{{"mode":"TRAJECTORY_MODE_SUPERSET","reference":[{}]}}}}"#,
                    refs.join(",")
                ),
                calls: (0..m).map(call_f).collect(),
                pass,
                turns: 5,
            });
            out.push(sequence("ANY_ORDER", l, m, false, pass));
        }
    }
    out
}

/// The longest gradings the default limits allow: a CEL evaluation stopped by
/// `expression_cost_limit`, a trace stopped by `max_work_units` (CEL cost units, 16 work units
/// each, summed over four expressions), and the costliest matching we know within it (each
/// reference its own class: about 25,000,000 comparisons).
fn limit_cases() -> Vec<Case> {
    // 216^3 iterations, about 10^7: past the default cost limit of 10^6.
    let cubic = r#"{"expression":{"expr":"calls.all(a, calls.all(b, calls.all(c, a.position + b.position > 0)))"}}"#;
    let mut superset = trajectory("SUPERSET", 5000, 10_000, true, false);
    superset.name = format!("limits: matching, {}", superset.name);
    vec![
        Case {
            name: "limits: expression_cost_limit, expression M=216 fail".into(),
            assertion: cubic.into(),
            calls: (0..216).map(call_f).collect(),
            pass: false,
            turns: 0,
        },
        Case {
            name: "limits: max_work_units, 4 expressions M=216 fail".into(),
            assertion: [cubic; 4].join(","),
            calls: (0..216).map(call_f).collect(),
            pass: false,
            turns: 0,
        },
        superset,
    ]
}

/// Compiles the case's suite and grades its trace `reps` times (stopping early once the total
/// passes `max_secs`); returns the median seconds per grading and the reason code.
fn run(case: &Case, reps: usize, max_secs: f64) -> (f64, String) {
    let grader = Grader::new(Limits::default(), 1);
    let suite_json = format!(r#"{{"name":"scale","assertions":[{}]}}"#, case.assertion);
    let suite: Suite = serde_json::from_str(&suite_json).expect("the case's suite decodes");
    let compiled = grader.compile_suite(&suite.encode_to_vec()).expect("the case's suite compiles");
    let calls: Vec<String> = case
        .calls
        .iter()
        .enumerate()
        .map(|(k, (n, a))| {
            let turn = if case.turns == 0 { 0 } else { 1 + k * case.turns / case.calls.len() };
            format!(r#"{{"name":"{n}","arguments_json":{},"turn":{turn}}}"#, serde_json::json!(a))
        })
        .collect();
    let trace: Trace =
        serde_json::from_str(&format!(r#"{{"id":"t","calls":[{}]}}"#, calls.join(",")))
            .expect("the case's trace decodes");
    let bytes = trace.encode_to_vec();
    let mut times = Vec::new();
    let mut code = String::new();
    let started = Instant::now();
    for _ in 0..reps {
        let t0 = Instant::now();
        let out = grader.grade_traces(&compiled, &[&bytes]);
        times.push(t0.elapsed().as_secs_f64());
        code = match TraceOutcome::decode(out[0].as_slice()).expect("an outcome").outcome {
            Some(trace_outcome::Outcome::Result(r)) => {
                r.results.first().map_or_else(|| "NO_RESULT".into(), |a| a.reason_code.clone())
            }
            Some(trace_outcome::Outcome::Error(e)) => e.reason_code,
            None => "NO_OUTCOME".into(),
        };
        if started.elapsed().as_secs_f64() > max_secs {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], code)
}

/// Runs case `name` in a child `binary` and parses its `seconds code peak_kib` line; `None`
/// when it crashed or ran past `timeout` seconds (then it is killed).
fn child(
    binary: &str,
    name: &str,
    reps: usize,
    max_secs: f64,
    timeout: f64,
) -> Option<(f64, String, u64)> {
    let mut process = Command::new(binary)
        .args(["--only", name, "--reps", &reps.to_string(), "--max-secs", &max_secs.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let started = Instant::now();
    while process.try_wait().ok()?.is_none() {
        if started.elapsed().as_secs_f64() > timeout {
            let _ = process.kill();
            let _ = process.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut text = String::new();
    process.stdout.take()?.read_to_string(&mut text).ok()?;
    let mut it = text.split_whitespace();
    let secs = it.next()?.parse().ok()?;
    let code = it.next()?.to_owned();
    let kib = it.next()?.parse().ok()?;
    Some((secs, code, kib))
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn shown(secs: f64) -> String {
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opt = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let reps: usize = opt("--reps").and_then(|v| v.parse().ok()).unwrap_or(3);
    let max_secs: f64 = opt("--max-secs").and_then(|v| v.parse().ok()).unwrap_or(60.0);
    let timeout: f64 = opt("--timeout").and_then(|v| v.parse().ok()).unwrap_or(120.0);
    let all = cases();
    if let Some(name) = opt("--only") {
        let case = all.iter().find(|c| &c.name == name).expect("a known case name");
        let (secs, code) = run(case, reps, max_secs);
        let code = if code.is_empty() { "PASS".into() } else { code };
        println!("{secs} {code} {}", peak_rss_kib());
        return;
    }
    let me = std::env::current_exe().expect("this binary's path");
    let me = me.to_string_lossy();
    let other = opt("--compare");
    let filter = opt("--filter");
    match other {
        Some(_) => println!("| case | before | peak RSS | after | peak RSS | after/before |"),
        None => println!("| case | time per grading | peak RSS | outcome |"),
    }
    println!(
        "| --- | ---: | ---: |{}",
        if other.is_some() { " ---: | ---: | ---: |" } else { " --- |" }
    );
    for case in all.iter().filter(|c| filter.is_none_or(|f| c.name.contains(f.as_str()))) {
        let expect = if case.pass { "PASS" } else { "fail" };
        let cell = |r: &Option<(f64, String, u64)>| match r {
            Some((s, code, kib)) => {
                let wrong = (code == "PASS") != case.pass;
                let mark = if wrong { format!(" (WRONG: {code})") } else { String::new() };
                (format!("{}{mark}", shown(*s)), format!("{:.1} MiB", *kib as f64 / 1024.0))
            }
            None => (format!("> {timeout} s or crashed"), "-".into()),
        };
        if let Some(before_bin) = other {
            // Interleaved: before, then after, for each case.
            let before = child(before_bin, &case.name, reps, max_secs, timeout);
            let after = child(&me, &case.name, reps, max_secs, timeout);
            let ratio = match (&before, &after) {
                (Some(b), Some(a)) => format!("{:.3}", a.0 / b.0),
                _ => "-".into(),
            };
            let (bt, bm) = cell(&before);
            let (at, am) = cell(&after);
            println!("| {} | {bt} | {bm} | {at} | {am} | {ratio} |", case.name);
        } else {
            let after = child(&me, &case.name, reps, max_secs, timeout);
            let (at, am) = cell(&after);
            println!("| {} | {at} | {am} | {expect} |", case.name);
        }
    }
}
