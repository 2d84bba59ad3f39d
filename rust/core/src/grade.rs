//! Grading one trace: scope and per-turn grading, negation, severity, names, verdict, score and
//! soft failures (§4, §9.24-25, §11, §13).
use crate::assertions::{Check, Kind, Outcome};
use crate::error::Reason;
use crate::limits::Limits;
use crate::proto::v1::{AssertionResult, AssertionStatus, GradeResult, Severity, Trace, Verdict};
use crate::scope::{Scope, TurnStep};
use crate::suite::CompiledSuite;
use crate::trace::TraceView;
use crate::work::Stop;

/// One assertion ready to run: resolved name and severity, plus its compiled kind.
#[derive(Debug)]
pub struct CompiledAssertion {
    pub name: String,
    pub severity: Severity,
    pub negate: bool,
    pub kind: Kind,
    /// Which calls the kind sees (§11); `None` = the whole trace.
    pub scope: Option<Scope>,
    /// Weight in `mean_score` (§12; 1.0 when absent).
    pub weight: f64,
    /// Reported, counted in no summary figure (§12).
    pub report_only: bool,
    /// No scope and no negation (decided when the suite compiles): the kind's result is the
    /// assertion's, with no scope or negation step in between (the v1 shape).
    pub plain: bool,
}

/// The result of one assertion on one trace, before it becomes an `AssertionResult`.
#[derive(Debug)]
pub struct Ran {
    pub pass: bool,
    /// Empty when passing.
    pub reason_code: &'static str,
    /// Empty when passing.
    pub reason: String,
    pub positions: Vec<u32>,
    /// §13: 1.0 or 0.0 for pass/fail kinds.
    pub score: f64,
}

impl CompiledAssertion {
    /// Runs the kind on the assertion's scope and applies negation.
    #[inline]
    pub fn evaluate(&self, t: &TraceView<'_>) -> Ran {
        if self.plain {
            return Ran::plain(self.kind.check(t));
        }
        self.scoped(t)
    }

    /// [`evaluate`](Self::evaluate) with a scope or negation (kept out of line: most
    /// assertions have neither).
    #[inline(never)]
    fn scoped(&self, t: &TraceView<'_>) -> Ran {
        match &self.scope {
            None => self.negated(self.kind.check(t)),
            Some(scope) if scope.per_turn() => self.per_turn(scope, t),
            Some(scope) => self.negated(self.kind.check(&scope.view(t))),
        }
    }

    /// Grades each turn on its own (§11). Negation is part of the assertion, so it applies to
    /// each turn's result: a negated `per_turn` assertion passes iff the base assertion fails
    /// on every turn graded.
    fn per_turn(&self, scope: &Scope, t: &TraceView<'_>) -> Ran {
        let mut turns = PerTurn::default();
        scope.turns(t, self.kind.reference_turns()).for_each(|TurnStep { first, count, view }| {
            if let Some(base) = self.kind.check_turn(&view, first) {
                turns.add(first, count, self.negated(base));
            }
            view.work().stopped().is_none()
        });
        turns.finish()
    }

    /// Applies negation to the kind's result.
    fn negated(&self, base: Outcome) -> Ran {
        if !self.negate {
            return Ran::plain(base);
        }
        let expression_error = base.reason == Some(Reason::ExpressionError);
        let base_score = base.score();
        let (pass, reason, message) = if expression_error {
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
        Ran {
            pass,
            reason_code: if pass { "" } else { reason.map_or("", Reason::code) },
            reason: if pass { String::new() } else { message },
            positions: base.positions,
            // A negated score is its complement (§13); an expression error scores 0 either way.
            score: if expression_error { 0.0 } else { crate::score::round4(1.0 - base_score) },
        }
    }

    /// Runs the kind and applies negation, as a result message.
    pub fn run(&self, t: &TraceView<'_>) -> AssertionResult {
        let ran = self.evaluate(t);
        AssertionResult {
            name: self.name.clone(),
            status: status(ran.pass) as i32,
            severity: self.severity as i32,
            reason_code: ran.reason_code.to_owned(),
            reason: ran.reason,
            positions: ran.positions,
            score: ran.score,
        }
    }
}

impl Ran {
    /// The result of an assertion with no negation: the kind's outcome as it is (an
    /// expression error scores 0, §9.24).
    #[inline]
    fn plain(base: Outcome) -> Ran {
        let score = if base.reason == Some(Reason::ExpressionError) { 0.0 } else { base.score() };
        let pass = base.pass;
        Ran {
            pass,
            reason_code: if pass { "" } else { base.reason.map_or("", Reason::code) },
            reason: if pass { String::new() } else { base.message },
            positions: base.positions,
            score,
        }
    }
}

/// The results of a `per_turn` assertion's turns, folded in turn order (§11).
#[derive(Default)]
struct PerTurn {
    /// Turns graded (skipped ones not counted).
    graded: u64,
    score_sum: f64,
    /// The first failing turn and its result.
    first_failure: Option<(u32, Ran)>,
    /// Every passing turn's positions, in turn order.
    positions: Vec<u32>,
}

impl PerTurn {
    /// Adds the result of `count` alike turns from turn `first`.
    fn add(&mut self, first: u32, count: u64, ran: Ran) {
        self.graded += count;
        #[allow(clippy::cast_precision_loss)] // Exact: turns number at most 2^32.
        let count_f = count as f64;
        self.score_sum += ran.score * count_f;
        if !ran.pass && self.first_failure.is_none() {
            self.first_failure = Some((first, ran));
        } else if ran.pass {
            // Alike turns have no calls, hence no positions, beyond a single turn.
            debug_assert!(count == 1 || ran.positions.is_empty());
            self.positions.extend(ran.positions);
        }
    }

    /// Passes iff every graded turn passes (and when every turn was skipped, with score 1.0);
    /// the score is the mean of the turns' scores.
    fn finish(self) -> Ran {
        #[allow(clippy::cast_precision_loss)]
        let score = if self.graded == 0 {
            1.0
        } else {
            crate::score::round4(self.score_sum / self.graded as f64)
        };
        match self.first_failure {
            None => Ran {
                pass: true,
                reason_code: "",
                reason: String::new(),
                positions: self.positions,
                score,
            },
            Some((turn, ran)) => Ran {
                pass: false,
                reason_code: ran.reason_code,
                reason: format!("turn {turn}: {}", ran.reason),
                positions: ran.positions,
                score,
            },
        }
    }
}

fn status(pass: bool) -> AssertionStatus {
    if pass {
        AssertionStatus::Pass
    } else {
        AssertionStatus::Fail
    }
}

/// Verdict, score, soft failures and mean score of the results of `assertions` (§4, §13).
fn summary<'r>(
    assertions: &[CompiledAssertion],
    results: impl Iterator<Item = (bool, f64)> + 'r,
) -> (Verdict, f64, u32, f64) {
    let (pass, score, soft, mean) =
        crate::score::summarize(results.zip(assertions).map(|((pass, score), a)| {
            crate::score::Counted {
                pass,
                soft: a.severity == Severity::Soft,
                score,
                weight: a.weight,
                report_only: a.report_only,
            }
        }));
    (if pass { Verdict::Pass } else { Verdict::Fail }, score, soft, mean)
}

/// Grades `trace` against the compiled assertions of `suite`.
pub fn grade(
    suite: &CompiledSuite,
    assertions: &[CompiledAssertion],
    trace: &Trace,
    limits: &Limits,
) -> Result<GradeResult, Stop> {
    grade_view(suite, assertions, &TraceView::new(trace, limits))
}

/// Runs every assertion on `view` in suite order, each after its base unit of work; `Err` as
/// soon as the work meter says stop (never a partial result).
fn run_all<T>(
    assertions: &[CompiledAssertion],
    view: &TraceView<'_>,
    run: impl Fn(&CompiledAssertion) -> T,
) -> Result<Vec<T>, Stop> {
    let mut out = Vec::with_capacity(assertions.len());
    for a in assertions {
        // A `spend` that says no has set `stopped`. Pushing before the check is the same as
        // after it (`Err` drops every result) and writes each result into place once.
        if view.work().spend(assertion_units(view)) {
            out.push(run(a));
        }
        if let Some(stop) = view.work().stopped() {
            return Err(stop);
        }
    }
    Ok(out)
}

/// The base cost of one assertion on one trace: one unit, plus one per call (the scan most
/// kinds make); kinds that do more spend the rest themselves.
fn assertion_units(view: &TraceView<'_>) -> u64 {
    1 + view.len() as u64
}

/// Grades a trace view against the compiled assertions of `suite`; `Err` when the work meter
/// stopped it (work limit or cancellation).
pub fn grade_view(
    suite: &CompiledSuite,
    assertions: &[CompiledAssertion],
    view: &TraceView<'_>,
) -> Result<GradeResult, Stop> {
    let results: Vec<AssertionResult> = run_all(assertions, view, |a| a.run(view))?;
    let (verdict, score, soft_failures, mean_score) = summary(
        assertions,
        results.iter().map(|r| (r.status == AssertionStatus::Pass as i32, r.score)),
    );
    Ok(GradeResult {
        trace_id: view.id().to_owned(),
        suite_id: suite.id().to_owned(),
        verdict: verdict as i32,
        score,
        soft_failures,
        results,
        mean_score,
    })
}

/// Grades a trace view and writes the serialized `TraceOutcome { result }` directly: the same
/// bytes as `TraceOutcome { outcome: Some(Result(grade_view(..))) }.encode_to_vec()`.
pub fn grade_view_encoded(
    suite: &CompiledSuite,
    assertions: &[CompiledAssertion],
    view: &TraceView<'_>,
) -> Result<Vec<u8>, Stop> {
    use crate::wire::{str_field_len, varint_field_len, varint_len, Writer};
    let ran: Vec<Ran> = run_all(assertions, view, |a| a.evaluate(view))?;
    let (verdict, score, soft_failures, mean_score) =
        summary(assertions, ran.iter().map(|r| (r.pass, r.score)));
    // Lengths first (each AssertionResult, then the GradeResult), then one exact-size write.
    let mut lens = Vec::with_capacity(ran.len());
    let mut results_len = 0;
    for (r, a) in ran.iter().zip(assertions) {
        let packed: usize = r.positions.iter().map(|&p| varint_len(u64::from(p))).sum();
        let len = str_field_len(a.name.as_bytes())
            + varint_field_len(status(r.pass) as u64)
            + varint_field_len(a.severity as u64)
            + str_field_len(r.reason_code.as_bytes())
            + str_field_len(r.reason.as_bytes())
            + if packed == 0 { 0 } else { 1 + varint_len(packed as u64) + packed }
            + double_field_len(r.score);
        lens.push((len, packed));
        results_len += 1 + varint_len(len as u64) + len;
    }
    let id = view.id().as_bytes();
    let grade_len = str_field_len(id)
        + str_field_len(suite.id().as_bytes())
        + varint_field_len(verdict as u64)
        + double_field_len(score)
        + varint_field_len(u64::from(soft_failures))
        + results_len
        + double_field_len(mean_score);
    let mut w = Writer::with_capacity(1 + varint_len(grade_len as u64) + grade_len);
    w.message_header(1, grade_len);
    w.str_field(1, id);
    w.str_field(2, suite.id().as_bytes());
    w.varint_field(3, verdict as u64);
    double_field(&mut w, 4, score);
    w.varint_field(5, u64::from(soft_failures));
    for ((r, a), &(len, packed)) in ran.iter().zip(assertions).zip(&lens) {
        w.message_header(6, len);
        w.str_field(1, a.name.as_bytes());
        w.varint_field(2, status(r.pass) as u64);
        w.varint_field(3, a.severity as u64);
        w.str_field(4, r.reason_code.as_bytes());
        w.str_field(5, r.reason.as_bytes());
        if packed != 0 {
            w.message_header(6, packed);
            for &p in &r.positions {
                w.varint(u64::from(p));
            }
        }
        double_field(&mut w, 7, r.score);
    }
    double_field(&mut w, 7, mean_score);
    Ok(w.buf)
}

/// Encoded length of a proto3 `double` field (absent when 0.0, as prost writes it).
fn double_field_len(v: f64) -> usize {
    if v == 0.0 {
        0
    } else {
        9
    }
}

/// Writes a proto3 `double` field (fixed64 wire type), omitted when 0.0 as prost omits it.
fn double_field(w: &mut crate::wire::Writer, tag: u32, v: f64) {
    if v != 0.0 {
        w.key(tag, 1);
        w.buf.extend_from_slice(&v.to_le_bytes());
    }
}
