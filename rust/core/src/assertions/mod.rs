//! Assertion kinds: one `Check` trait, one dispatch enum, one module per kind.
use crate::error::Reason;
use crate::grade::CompiledAssertion;
use crate::proto::v1::{assertion, Assertion, Severity};
use crate::scope::Scope;
use crate::suite::Compiler;
use crate::trace::TraceView;

pub mod budget;
pub mod duration;
pub mod efficiency;
pub mod enums;
pub mod expression;
pub mod grounding;
pub mod no_repeat;
pub mod order;
pub mod sequence;
pub mod step_count;
pub mod tool_args;
pub mod tool_called;
pub mod tool_count;
pub mod tool_list;
pub mod trajectory;
pub mod trajectory_score;

/// The base (un-negated) result of one assertion on one trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub pass: bool,
    /// Meaningful only when `pass` is false.
    pub reason: Option<Reason>,
    pub message: String,
    /// 1-based call positions (§4 table).
    pub positions: Vec<u32>,
    /// §13 score of the un-negated result when the kind scores (`trajectory_score`); `None`
    /// means 1.0 on pass and 0.0 on fail.
    pub score: Option<f64>,
}

impl Outcome {
    pub fn pass(positions: Vec<u32>) -> Self {
        Outcome { pass: true, reason: None, message: String::new(), positions, score: None }
    }

    pub fn fail(reason: Reason, message: String, positions: Vec<u32>) -> Self {
        Outcome { pass: false, reason: Some(reason), message, positions, score: None }
    }

    /// This outcome with a metric score (§12 `trajectory_score`).
    #[must_use]
    pub fn with_score(mut self, score: f64) -> Self {
        self.score = Some(score);
        self
    }

    /// The §13 score of this (un-negated) outcome.
    pub fn score(&self) -> f64 {
        self.score.unwrap_or(if self.pass { 1.0 } else { 0.0 })
    }
}

/// One compiled assertion kind.
pub trait Check {
    /// Grades the trace; never panics on any input.
    fn check(&self, t: &TraceView<'_>) -> Outcome;

    /// Grades turn `turn` under `per_turn` (§11); `t` already holds only that turn's calls.
    /// Kinds with a reference (`trajectory_match`, `trajectory_score`) compare against the
    /// reference calls of that turn and return `None` when the turn has neither calls nor
    /// reference calls (skipped); every other kind grades `t` as it is.
    fn check_turn(&self, t: &TraceView<'_>, turn: u32) -> Option<Outcome> {
        let _ = turn;
        Some(self.check(t))
    }

    /// The turns (sorted, distinct, 0 read as 1) whose `check_turn` depends on the turn number
    /// and not only on the view: a reference's turns. `per_turn` grades the turns that have no
    /// calls, model calls, turn text or reference calls once for all of them.
    fn reference_turns(&self) -> &[u32] {
        &[]
    }
}

/// Static dispatch over every kind.
#[derive(Debug)]
pub enum Kind {
    ToolArgs(tool_args::ToolArgs),
    Sequence(sequence::Sequence),
    ToolList(tool_list::ToolList),
    ToolCalled(tool_called::ToolCalled),
    ToolCount(tool_count::ToolCount),
    StepCount(step_count::StepCount),
    Order(order::Order),
    NoRepeat(no_repeat::NoRepeat),
    Efficiency(efficiency::Efficiency),
    Grounding(grounding::Grounding),
    Trajectory(trajectory::Trajectory),
    TrajectoryScore(trajectory_score::ScoreCheck),
    Expression(expression::ExpressionCheck),
    Duration(duration::Duration),
    Budget(budget::Budget),
}

impl Check for Kind {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        match self {
            Kind::ToolArgs(k) => k.check(t),
            Kind::Sequence(k) => k.check(t),
            Kind::ToolList(k) => k.check(t),
            Kind::ToolCalled(k) => k.check(t),
            Kind::ToolCount(k) => k.check(t),
            Kind::StepCount(k) => k.check(t),
            Kind::Order(k) => k.check(t),
            Kind::NoRepeat(k) => k.check(t),
            Kind::Efficiency(k) => k.check(t),
            Kind::Grounding(k) => k.check(t),
            Kind::Trajectory(k) => k.check(t),
            Kind::TrajectoryScore(k) => k.check(t),
            Kind::Expression(k) => k.check(t),
            Kind::Duration(k) => k.check(t),
            Kind::Budget(k) => k.check(t),
        }
    }

    // Both per-turn hooks dispatch with no wildcard arm: a new kind must say how it grades a
    // turn (the default hooks grade the turn's view as it is).
    fn check_turn(&self, t: &TraceView<'_>, turn: u32) -> Option<Outcome> {
        match self {
            Kind::ToolArgs(k) => k.check_turn(t, turn),
            Kind::Sequence(k) => k.check_turn(t, turn),
            Kind::ToolList(k) => k.check_turn(t, turn),
            Kind::ToolCalled(k) => k.check_turn(t, turn),
            Kind::ToolCount(k) => k.check_turn(t, turn),
            Kind::StepCount(k) => k.check_turn(t, turn),
            Kind::Order(k) => k.check_turn(t, turn),
            Kind::NoRepeat(k) => k.check_turn(t, turn),
            Kind::Efficiency(k) => k.check_turn(t, turn),
            Kind::Grounding(k) => k.check_turn(t, turn),
            Kind::Trajectory(k) => k.check_turn(t, turn),
            Kind::TrajectoryScore(k) => k.check_turn(t, turn),
            Kind::Expression(k) => k.check_turn(t, turn),
            Kind::Duration(k) => k.check_turn(t, turn),
            Kind::Budget(k) => k.check_turn(t, turn),
        }
    }

    fn reference_turns(&self) -> &[u32] {
        match self {
            Kind::ToolArgs(k) => k.reference_turns(),
            Kind::Sequence(k) => k.reference_turns(),
            Kind::ToolList(k) => k.reference_turns(),
            Kind::ToolCalled(k) => k.reference_turns(),
            Kind::ToolCount(k) => k.reference_turns(),
            Kind::StepCount(k) => k.reference_turns(),
            Kind::Order(k) => k.reference_turns(),
            Kind::NoRepeat(k) => k.reference_turns(),
            Kind::Efficiency(k) => k.reference_turns(),
            Kind::Grounding(k) => k.reference_turns(),
            Kind::Trajectory(k) => k.reference_turns(),
            Kind::TrajectoryScore(k) => k.reference_turns(),
            Kind::Expression(k) => k.reference_turns(),
            Kind::Duration(k) => k.reference_turns(),
            Kind::Budget(k) => k.reference_turns(),
        }
    }
}

/// Validates and compiles one assertion at `path` (`assertions[i]`); problems go to `c`.
pub fn compile(a: &Assertion, path: &str, c: &mut Compiler<'_>) -> Option<CompiledAssertion> {
    use assertion::Kind as K;
    let Some(kind) = &a.kind else {
        c.problem(format!("{path}.kind"), "the assertion has no kind");
        return None;
    };
    // Before the kind, so its problems are reported even when the kind has some too.
    let scope = a.scope.as_ref().and_then(|s| Scope::compile(s, &format!("{path}.scope"), c));
    let (kind, default_name, soft_by_default) = match kind {
        K::ToolCallArgs(m) => {
            let k = tool_args::ToolArgs::compile(m, &format!("{path}.tool_call_args"), c)?;
            let name = k.default_name();
            (Kind::ToolArgs(k), name, false)
        }
        K::ToolSequence(m) => {
            let k = sequence::Sequence::compile(m, &format!("{path}.tool_sequence"), c)?;
            (Kind::Sequence(k), "tool_sequence".to_owned(), false)
        }
        K::AllowedTools(m) => {
            let k = tool_list::ToolList::compile(m, &format!("{path}.allowed_tools"), true, c)?;
            (Kind::ToolList(k), "no_unexpected_tool".to_owned(), false)
        }
        K::ForbiddenTools(m) => {
            let k = tool_list::ToolList::compile(m, &format!("{path}.forbidden_tools"), false, c)?;
            (Kind::ToolList(k), "no_forbidden_tool".to_owned(), false)
        }
        K::ToolCalled(m) => {
            let k = tool_called::ToolCalled::compile(m, &format!("{path}.tool_called"), c)?;
            let name = format!("tool_called:{}", m.tool);
            (Kind::ToolCalled(k), name, false)
        }
        K::ToolCount(m) => {
            let k = tool_count::ToolCount::compile(m, &format!("{path}.tool_count"), c)?;
            let shown = if m.tool.is_empty() { &m.glob } else { &m.tool };
            (Kind::ToolCount(k), format!("tool_count:{shown}"), false)
        }
        K::StepCount(m) => {
            let k = step_count::StepCount::compile(m, &format!("{path}.step_count"), c)?;
            (Kind::StepCount(k), "step_count".to_owned(), false)
        }
        K::Order(m) => {
            let k = order::Order::compile(m, &format!("{path}.order"), c)?;
            (Kind::Order(k), format!("order:{}->{}", m.before, m.after), false)
        }
        K::NoRepeatedCalls(m) => {
            let k = no_repeat::NoRepeat::compile(m, &format!("{path}.no_repeated_calls"), c)?;
            (Kind::NoRepeat(k), "no_repeated_calls".to_owned(), true)
        }
        K::Efficiency(m) => {
            let k = efficiency::Efficiency::compile(m, &format!("{path}.efficiency"), c)?;
            (Kind::Efficiency(k), "efficiency".to_owned(), true)
        }
        K::Grounding(m) => {
            let k = grounding::Grounding::compile(m, &format!("{path}.grounding"), c)?;
            (Kind::Grounding(k), "grounding".to_owned(), true)
        }
        K::TrajectoryMatch(m) => {
            let k = trajectory::Trajectory::compile(m, &format!("{path}.trajectory_match"), c)?;
            (Kind::Trajectory(k), "trajectory_match".to_owned(), false)
        }
        K::Expression(m) => {
            let k = expression::ExpressionCheck::compile(m, &format!("{path}.expression"), c)?;
            (Kind::Expression(k), "expression".to_owned(), false)
        }
        K::Duration(m) => {
            let k = duration::Duration::compile(m, &format!("{path}.duration"), c)?;
            (Kind::Duration(k), duration::Duration::default_name(m), false)
        }
        K::Budget(m) => {
            let k = budget::Budget::compile(m, &format!("{path}.budget"), c)?;
            (Kind::Budget(k), "budget".to_owned(), false)
        }
        K::TrajectoryScore(m) => {
            let at = format!("{path}.trajectory_score");
            let k = trajectory_score::ScoreCheck::compile(m, &at, c)?;
            (Kind::TrajectoryScore(k), "trajectory_score".to_owned(), false)
        }
    };
    let severity = match Severity::try_from(a.severity) {
        Ok(Severity::Hard) => Severity::Hard,
        Ok(Severity::Soft) => Severity::Soft,
        _ if soft_by_default => Severity::Soft,
        _ => Severity::Hard,
    };
    let name = if !a.name.is_empty() {
        a.name.clone()
    } else if a.negate {
        format!("not:{default_name}")
    } else {
        default_name
    };
    let weight = a.weight.unwrap_or(1.0);
    if !(weight.is_finite() && weight >= 0.0) {
        c.problem(format!("{path}.weight"), format!("weight {weight} is not a finite number >= 0"));
    }
    Some(CompiledAssertion {
        name,
        severity,
        negate: a.negate,
        plain: scope.is_none() && !a.negate,
        kind,
        scope,
        weight,
        report_only: a.report_only,
    })
}

/// Lists positions for a reason: `1, 3 and 4`.
pub(crate) fn list_positions(p: &[u32]) -> String {
    match p {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(ToString::to_string).collect();
            format!("{} and {last}", init.join(", "))
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Builds one-assertion suites and small traces for the per-kind tests.
    use crate::limits::Limits;
    use crate::proto::v1::{AssertionResult, Suite, ToolCall, Trace};
    use crate::suite::CompiledSuite;

    /// Compiles a suite whose only assertion is `assertion` (protobuf JSON).
    pub fn suite(assertion: &str) -> Result<CompiledSuite, crate::CoreError> {
        let json = format!(r#"{{"assertions":[{assertion}]}}"#);
        let suite: Suite = serde_json::from_str(&json).expect("test suite JSON decodes");
        CompiledSuite::compile(&suite, &Limits::default())
    }

    /// Grades `trace` with the one-assertion suite.
    pub fn run_trace(assertion: &str, trace: &Trace) -> AssertionResult {
        let s = suite(assertion).expect("test suite compiles");
        let mut r = s.grade(trace, &Limits::default()).expect("graded");
        r.results.remove(0)
    }

    /// Grades `calls` (name, arguments text) with the one-assertion suite.
    pub fn run(assertion: &str, calls: &[(&str, Option<&str>)]) -> AssertionResult {
        let trace = Trace {
            id: "t".to_owned(),
            calls: calls
                .iter()
                .map(|(n, a)| ToolCall {
                    name: (*n).to_owned(),
                    arguments_json: a.map(str::to_owned),
                    ..ToolCall::default()
                })
                .collect(),
            ..Trace::default()
        };
        let s = suite(assertion).expect("test suite compiles");
        let mut r = s.grade(&trace, &Limits::default()).expect("graded");
        r.results.remove(0)
    }

    /// The first problem's field of a suite that must be rejected.
    pub fn rejected_field(assertion: &str) -> String {
        match suite(assertion) {
            Ok(_) => panic!("{assertion} should be rejected"),
            Err(e) => e.field().to_owned(),
        }
    }
}

#[cfg(test)]
mod v2_weight_tests {
    use super::testing::{rejected_field, suite};

    #[test]
    fn invalid_weights_are_rejected_at_their_field() {
        for (assertion, field) in [
            (r#"{"tool_called":{"tool":"a"},"weight":-1}"#, "assertions[0].weight"),
            (r#"{"tool_called":{"tool":"a"},"weight":"NaN"}"#, "assertions[0].weight"),
            (r#"{"tool_called":{"tool":"a"},"weight":"Infinity"}"#, "assertions[0].weight"),
        ] {
            assert_eq!(rejected_field(assertion), field, "{assertion}");
        }
        // Explicit v1 defaults of the new fields are not v2 use.
        assert!(suite(r#"{"tool_called":{"tool":"a"},"report_only":false}"#).is_ok());
    }
}
