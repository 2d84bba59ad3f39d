//! Grading one trace: negation, severity, names, verdict, score and soft failures (§4, §9.24-25).
use crate::assertions::{Check, Kind};
use crate::error::Reason;
use crate::limits::Limits;
use crate::proto::v1::{AssertionResult, AssertionStatus, GradeResult, Severity, Trace, Verdict};
use crate::suite::CompiledSuite;
use crate::trace::TraceView;

/// One assertion ready to run: resolved name and severity, plus its compiled kind.
#[derive(Debug)]
pub struct CompiledAssertion {
    pub name: String,
    pub severity: Severity,
    pub negate: bool,
    pub kind: Kind,
}

impl CompiledAssertion {
    /// Runs the kind and applies negation.
    pub fn run(&self, t: &TraceView<'_>) -> AssertionResult {
        let base = self.kind.check(t);
        let (pass, reason, message) = if !self.negate {
            (base.pass, base.reason, base.message)
        } else if base.reason == Some(Reason::ExpressionError) {
            // An expression that cannot be evaluated is a failure either way (§9.24).
            (false, base.reason, base.message)
        } else if base.pass {
            let at = if base.positions.is_empty() {
                String::new()
            } else {
                format!(" (calls {})", crate::assertions::list_positions(&base.positions))
            };
            (
                false,
                Some(Reason::NegatedHeld),
                format!(
                    "{} held but must not{at}",
                    self.name.strip_prefix("not:").unwrap_or(&self.name)
                ),
            )
        } else {
            (true, None, String::new())
        };
        AssertionResult {
            name: self.name.clone(),
            status: if pass { AssertionStatus::Pass } else { AssertionStatus::Fail } as i32,
            severity: self.severity as i32,
            reason_code: if pass {
                String::new()
            } else {
                reason.map(Reason::code).unwrap_or_default().to_owned()
            },
            reason: if pass { String::new() } else { message },
            positions: base.positions,
        }
    }
}

/// Grades `trace` against the compiled assertions of `suite`.
pub fn grade(
    suite: &CompiledSuite,
    assertions: &[CompiledAssertion],
    trace: &Trace,
    limits: &Limits,
) -> GradeResult {
    let view = TraceView::new(trace, limits);
    let results: Vec<AssertionResult> = assertions.iter().map(|a| a.run(&view)).collect();
    let passing = results.iter().filter(|r| r.status == AssertionStatus::Pass as i32).count();
    let hard_failed = results
        .iter()
        .any(|r| r.status == AssertionStatus::Fail as i32 && r.severity == Severity::Hard as i32);
    let soft_failures = results
        .iter()
        .filter(|r| r.status == AssertionStatus::Fail as i32 && r.severity == Severity::Soft as i32)
        .count();
    let score = if results.is_empty() { 1.0 } else { passing as f64 / results.len() as f64 };
    GradeResult {
        trace_id: trace.id.clone(),
        suite_id: suite.id().to_owned(),
        verdict: if hard_failed { Verdict::Fail } else { Verdict::Pass } as i32,
        score,
        soft_failures: soft_failures as u32,
        results,
    }
}
