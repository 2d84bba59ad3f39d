//! Conformance: every case of tests/conformance/cases.jsonl through the pure core, bit for bit.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use serde_json::Value as Json;
use trajgrade_core::proto::v1::{AssertionStatus, GradeResult, Severity, Suite, Trace, Verdict};
use trajgrade_core::{CompiledSuite, CoreError, Limits};

fn cases_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/cases.jsonl")
}

/// Runs one case; `Err` describes every mismatch.
fn run_case(case: &Json) -> Result<(), String> {
    let suite: Suite = serde_json::from_value(case["suite"].clone())
        .map_err(|e| format!("suite does not decode: {e}"))?;
    let expect = &case["expect"];
    let limits = Limits::default();
    let compiled = CompiledSuite::compile(&suite, &limits);
    if let Some(code) = expect.get("error") {
        return match compiled {
            Ok(_) => Err(format!("expected {code}, the suite compiled")),
            Err(CoreError::InvalidSuite(problems)) => {
                let want = expect["field"].as_str().unwrap_or_default();
                match problems.first() {
                    Some(p) if p.field == want => Ok(()),
                    _ => Err(format!("expected field {want}, got {problems:?}")),
                }
            }
            Err(e) => Err(format!("expected INVALID_SUITE, got {e}")),
        };
    }
    let compiled = compiled.map_err(|e| format!("suite rejected: {e}"))?;
    let trace: Trace = serde_json::from_value(case["trace"].clone())
        .map_err(|e| format!("trace does not decode: {e}"))?;
    let got = compiled.grade(&trace, &limits).map_err(|e| format!("not graded: {e}"))?;
    compare(expect, &got)
}

fn compare(expect: &Json, got: &GradeResult) -> Result<(), String> {
    let mut errs = Vec::new();
    if got.trace_id != got.trace_id.trim() {
        errs.push("trace_id altered".to_owned());
    }
    if let Some(v) = expect.get("verdict").and_then(Json::as_str) {
        let g = Verdict::try_from(got.verdict).map_or("?", |v| v.as_str_name());
        if v != g {
            errs.push(format!("verdict: want {v}, got {g}"));
        }
    }
    if let Some(s) = expect.get("score").and_then(Json::as_f64) {
        if s.to_bits() != got.score.to_bits() {
            errs.push(format!("score: want {s}, got {}", got.score));
        }
    }
    if let Some(s) = expect.get("soft_failures").and_then(Json::as_u64) {
        if s != u64::from(got.soft_failures) {
            errs.push(format!("soft_failures: want {s}, got {}", got.soft_failures));
        }
    }
    if let Some(want) = expect.get("results").and_then(Json::as_array) {
        if want.len() != got.results.len() {
            errs.push(format!("results: want {}, got {}", want.len(), got.results.len()));
        }
        for (i, (w, g)) in want.iter().zip(&got.results).enumerate() {
            let status = AssertionStatus::try_from(g.status).map_or("?", |s| s.as_str_name());
            let severity = Severity::try_from(g.severity).map_or("?", |s| s.as_str_name());
            let fields = [
                ("name", g.name.as_str()),
                ("status", status),
                ("severity", severity),
                ("reason_code", g.reason_code.as_str()),
            ];
            for (field, value) in fields {
                if let Some(want) = w.get(field).and_then(Json::as_str) {
                    if want != value {
                        errs.push(format!("results[{i}].{field}: want {want:?}, got {value:?}"));
                    }
                }
            }
            if let Some(want) = w.get("positions").and_then(Json::as_array) {
                let want: Vec<u64> = want.iter().filter_map(Json::as_u64).collect();
                let got: Vec<u64> = g.positions.iter().map(|&p| u64::from(p)).collect();
                if want != got {
                    errs.push(format!("results[{i}].positions: want {want:?}, got {got:?}"));
                }
            }
            if errs.iter().any(|e| e.starts_with(&format!("results[{i}]"))) {
                errs.push(format!("results[{i}].reason was {:?}", g.reason));
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

#[test]
fn conformance_cases() {
    let path = cases_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut failures = Vec::new();
    let mut total = 0;
    // Panics are reported per case below; keep the default hook's backtraces out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // Split on '\n' only: other line separators may occur inside strings.
    for (n, line) in text.split('\n').enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        total += 1;
        let case: Json = match serde_json::from_str(line) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("line {}: not JSON: {e}", n + 1));
                continue;
            }
        };
        let id = case["id"].as_str().unwrap_or("?").to_owned();
        let outcome = catch_unwind(AssertUnwindSafe(|| run_case(&case)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("{id}: {e}")),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                failures.push(format!("{id}: panicked: {msg}"));
            }
        }
    }
    std::panic::set_hook(default_hook);
    assert_eq!(total, 293, "the corpus should hold 293 cases");
    assert!(
        failures.is_empty(),
        "{} of {total} conformance cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
