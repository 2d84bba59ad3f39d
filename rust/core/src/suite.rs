//! Suite validation and compilation: every problem with its field path, then an immutable plan.
use prost::Message;
use sha2::{Digest, Sha256};

use crate::assertions;
use crate::error::{CoreError, SuiteProblem};
use crate::grade::{self, CompiledAssertion};
use crate::limits::Limits;
use crate::proto::v1::{GradeResult, Suite, Trace};
use crate::trace::{wire_decode, Decoded, TraceView};
use crate::work::Stop;

/// Collects suite problems in suite order while compiling.
pub struct Compiler<'l> {
    pub limits: &'l Limits,
    problems: Vec<SuiteProblem>,
}

impl<'l> Compiler<'l> {
    pub fn new(limits: &'l Limits) -> Self {
        Compiler { limits, problems: Vec::new() }
    }

    /// Records a problem at `field`.
    pub fn problem(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.problems.push(SuiteProblem { field: field.into(), message: message.into() });
    }

    pub fn problem_count(&self) -> usize {
        self.problems.len()
    }

    /// Appends the problems another collector found (kept in its order).
    pub fn absorb(&mut self, other: Compiler<'_>) {
        self.problems.extend(other.problems);
    }
}

/// A validated, compiled suite: immutable, `Send + Sync`, shared by every grading thread.
#[derive(Debug)]
pub struct CompiledSuite {
    id: String,
    suite: Suite,
    assertions: Vec<CompiledAssertion>,
}

impl CompiledSuite {
    /// Validates and compiles `suite`; an invalid suite lists every problem in suite order.
    pub fn compile(suite: &Suite, limits: &Limits) -> Result<CompiledSuite, CoreError> {
        Self::compile_owned(suite.clone(), limits)
    }

    /// As [`CompiledSuite::compile`], taking ownership (no copy of the suite).
    pub fn compile_owned(suite: Suite, limits: &Limits) -> Result<CompiledSuite, CoreError> {
        let mut c = Compiler::new(limits);
        if suite.assertions.is_empty() {
            c.problem("assertions", "a suite needs at least one assertion");
        } else if suite.assertions.len() > limits.max_assertions_per_suite {
            c.problem(
                "assertions",
                format!(
                    "{} assertions; the limit is {}",
                    suite.assertions.len(),
                    limits.max_assertions_per_suite
                ),
            );
        }
        let mut compiled = Vec::with_capacity(suite.assertions.len());
        for (i, a) in suite.assertions.iter().enumerate() {
            let path = format!("assertions[{i}]");
            assertions::enums::check(a, &path, &mut c);
            if let Some(ca) = assertions::compile(a, &path, &mut c) {
                compiled.push(ca);
            }
        }
        if !c.problems.is_empty() {
            return Err(CoreError::InvalidSuite(c.problems));
        }
        Ok(CompiledSuite { id: suite_id(&suite), suite, assertions: compiled })
    }

    /// `"s1-"` + the first 32 hex digits of the SHA-256 of the canonical suite encoding.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn suite(&self) -> &Suite {
        &self.suite
    }

    /// Grades a decoded trace (limits on arguments apply: depth makes `ARGS_INVALID_JSON`);
    /// `Err` is `WORK_LIMIT_EXCEEDED` at field `trace`.
    pub fn grade(&self, trace: &Trace, limits: &Limits) -> Result<GradeResult, CoreError> {
        grade::grade(self, &self.assertions, trace, limits)
            .map_err(|stop| stop.error(limits.max_work_units, "trace".to_owned()))
    }

    /// Grades a trace view (see `TraceView::new` and `TraceView::from_parts`); `Err` when its
    /// work meter stopped the grading (see [`Stop::error`]).
    pub fn grade_view(&self, view: &TraceView<'_>) -> Result<GradeResult, Stop> {
        grade::grade_view(self, &self.assertions, view)
    }

    /// Grades a trace view into a serialized `TraceOutcome` holding the result.
    pub fn grade_view_encoded(&self, view: &TraceView<'_>) -> Result<Vec<u8>, Stop> {
        grade::grade_view_encoded(self, &self.assertions, view)
    }

    /// Decodes a serialized `Trace`, checks it against the limits, and grades it.
    pub fn check_and_grade(
        &self,
        trace_bytes: &[u8],
        limits: &Limits,
    ) -> Result<GradeResult, CoreError> {
        match wire_decode(trace_bytes, limits, "trace")? {
            Decoded::Parts(parts) => self
                .grade_view(&TraceView::from_parts(parts, limits))
                .map_err(|stop| stop.error(limits.max_work_units, "trace".to_owned())),
            Decoded::Owned(trace) => self.grade(&trace, limits),
        }
    }
}

/// The content id of a suite. prost encodes fields in tag order with defaults omitted, and a
/// `Suite` holds no maps, so equal suites have equal bytes on every replica.
pub fn suite_id(suite: &Suite) -> String {
    let digest = Sha256::digest(suite.encode_to_vec());
    let mut id = String::with_capacity(35);
    id.push_str("s1-");
    for b in &digest[..16] {
        use std::fmt::Write;
        let _ = write!(id, "{b:02x}");
    }
    id
}

// A compiled suite is shared by every grading thread and cached behind an `Arc`.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<CompiledSuite>();
    shared::<crate::batch::Grader>();
};
