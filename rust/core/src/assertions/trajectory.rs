//! `trajectory_match`: the calls against a reference trajectory (strict, in order, superset,
//! subset or unordered) with per-tool argument overrides (§9.14-9.15).
use std::collections::HashMap;

use super::{list_positions, Check, Outcome};
use crate::args::{compile_paths, compile_tolerance, parse_field, ArgsMatcher, Comparison};
use crate::error::Reason;
use crate::json::compare::Mode;
use crate::json::path::KeyPath;
use crate::json::tolerance::Tolerance;
use crate::json::Value;
use crate::matching::{self, CallLefts, Calls, Lefts, Meter};
use crate::proto::v1::{MatchMode, ToolCall, ToolOverride, TrajectoryMatch, TrajectoryMode};
use crate::scope::turn_of;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Clone, Debug)]
pub(super) struct RefCall {
    pub(super) name: String,
    pub(super) args: ArgsMatcher,
    /// 1-based place in the suite's `reference` (reasons name it, also under `per_turn`).
    pub(super) number: usize,
}

impl RefCall {
    pub(super) fn matches(&self, t: &TraceView<'_>, i: usize) -> bool {
        t.calls()[i].name == self.name && self.args.is_match(t, i)
    }

    /// `closest is call N: <difference>` among the calls of this tool in `range`, when they
    /// failed this reference call only on their arguments.
    pub(super) fn closest(
        &self,
        t: &TraceView<'_>,
        range: std::ops::Range<usize>,
    ) -> Option<String> {
        let named = range.filter(|&i| t.calls()[i].name == self.name);
        self.args.closest_reason(t, named)
    }
}

#[derive(Debug)]
pub struct Trajectory {
    reference: Vec<RefCall>,
    /// Classes of identical reference calls (same name and arguments) for the matching.
    lefts: Lefts,
    /// Whether some reference call compares arguments (else calls are matched by name alone).
    compares_args: bool,
    mode: TrajectoryMode,
    /// The reference's turns (sorted, distinct; 0 counts as 1), for `per_turn` (§11).
    turns: Vec<u32>,
    /// With references in several turns, the trajectory of each turn of `turns` (its
    /// reference calls only); empty when they are all in one turn (that turn's is `self`).
    by_turn: Vec<Trajectory>,
}

/// The left side of the matching: classes of reference calls.
impl CallLefts for Trajectory {
    fn compares_args(&self) -> bool {
        self.compares_args
    }

    fn name_ok(&self, class: usize, name: &str) -> bool {
        self.class_ref(class).name == name
    }

    fn exact_name(&self, class: usize) -> Option<&str> {
        Some(&self.class_ref(class).name)
    }

    fn is_edge(&self, class: usize, t: &TraceView<'_>, r: usize) -> bool {
        self.class_ref(class).matches(t, r)
    }
    /// A reference call that compares no arguments matches exactly the calls of its name.
    fn by_name_alone(&self) -> bool {
        !self.compares_args
    }
}

struct Override {
    mode: Option<MatchMode>,
    ignore: Vec<KeyPath>,
    tolerance: Option<Tolerance>,
}

fn mode_of(raw: i32) -> MatchMode {
    MatchMode::try_from(raw).unwrap_or(MatchMode::Unspecified)
}

impl Trajectory {
    pub fn compile(m: &TrajectoryMatch, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        let reference = compile_reference(&m.reference, m.args, &m.overrides, path, c);
        let mode = TrajectoryMode::try_from(m.mode).unwrap_or(TrajectoryMode::Unspecified);
        let reference = reference?;
        if c.problem_count() != before {
            return None;
        }
        let mut turns: Vec<u32> = m.reference.iter().map(|r| turn_of(r.turn)).collect();
        turns.sort_unstable();
        turns.dedup();
        let by_turn = if turns.len() > 1 {
            turns
                .iter()
                .map(|&k| {
                    let in_turn = |j: &usize| turn_of(m.reference[*j].turn) == k;
                    let picked: Vec<usize> = (0..m.reference.len()).filter(in_turn).collect();
                    Trajectory::new(
                        picked.iter().map(|&j| reference[j].clone()).collect(),
                        picked.iter().map(|&j| &m.reference[j]),
                        mode,
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(Trajectory { turns, by_turn, ..Trajectory::new(reference, &m.reference, mode) })
    }

    /// A trajectory of compiled reference calls and their messages (for the classes).
    fn new<'m>(
        reference: Vec<RefCall>,
        messages: impl IntoIterator<Item = &'m ToolCall>,
        mode: TrajectoryMode,
    ) -> Self {
        // Same name (so the same override) and the same argument text: the same matcher.
        let lefts = Lefts::new(messages.into_iter().map(|r| (&r.name, &r.arguments_json)));
        let compares_args = reference.iter().any(|r| !matches!(r.args, ArgsMatcher::Ignore));
        Trajectory { reference, lefts, compares_args, mode, turns: Vec::new(), by_turn: Vec::new() }
    }

    /// The trajectory turn `k` is graded against under `per_turn`: its reference calls, or
    /// `None` when it has none.
    fn of_turn(&self, k: u32) -> Option<&Trajectory> {
        let j = self.turns.binary_search(&k).ok()?;
        Some(self.by_turn.get(j).unwrap_or(self))
    }

    fn class_ref(&self, class: usize) -> &RefCall {
        &self.reference[self.lefts.first[class]]
    }

    fn strict(&self, t: &TraceView<'_>) -> Outcome {
        let n = self.reference.len();
        let mut meter = Meter::new(t.work());
        // Indices of this view's calls whose pair differs, then those beyond the reference.
        let mut differing = Vec::new();
        for i in 0..n.min(t.len()) {
            if meter.tick(1).is_none() {
                return stopped();
            }
            if !self.reference[i].matches(t, i) {
                differing.push(i);
            }
        }
        if differing.is_empty() && t.len() == n {
            return Outcome::pass((0..n).map(|i| t.pos(i)).collect());
        }
        let unmatched: Vec<u32> =
            differing.iter().copied().chain(n..t.len()).map(|i| t.pos(i)).collect();
        let mut why = Vec::new();
        if t.len() != n {
            why.push(format!("{} has {} calls, the reference {n}", t.noun(), t.len()));
        }
        if !unmatched.is_empty() {
            why.push(format!("calls {} do not match the reference", list_positions(&unmatched)));
            // The first pair that differs only in its arguments, pointed at.
            let first = differing.first().copied();
            if let Some(c) = first.and_then(|i| self.reference[i].closest(t, i..i + 1)) {
                let number = first.map_or(0, |i| self.reference[i].number);
                why.push(format!("reference call {number}: {c}"));
            }
        }
        Outcome::fail(Reason::TrajectoryMismatch, format!("STRICT: {}", why.join("; ")), unmatched)
    }

    fn in_order(&self, t: &TraceView<'_>) -> Outcome {
        let mut used = Vec::with_capacity(self.reference.len());
        let mut next = 0;
        let mut missing = None;
        let mut meter = Meter::new(t.work());
        for (k, r) in self.reference.iter().enumerate() {
            let found = (next..t.len()).find(|&i| meter.tick(1).is_none() || r.matches(t, i));
            if meter.stopped() {
                return stopped();
            }
            let Some(i) = found else {
                missing = Some(k);
                break;
            };
            used.push(i);
            next = i + 1;
        }
        let Some(k) = missing else {
            return Outcome::pass(used.iter().map(|&i| t.pos(i)).collect());
        };
        let mut taken = vec![false; t.len()];
        for &i in &used {
            taken[i] = true;
        }
        let unmatched: Vec<u32> = (0..t.len()).filter(|&i| !taken[i]).map(|i| t.pos(i)).collect();
        Outcome::fail(
            Reason::TrajectoryMismatch,
            format!(
                "IN_ORDER: matched {k} of {} reference calls; reference call {} {} not found after call {}{}",
                self.reference.len(),
                self.reference[k].number,
                self.reference[k].name,
                next.checked_sub(1).map_or(0, |i| t.pos(i)),
                self.reference[k].closest(t, next..t.len()).map_or_else(String::new, |c| format!("; {c}"))
            ),
            unmatched,
        )
    }

    fn matched(&self, t: &TraceView<'_>) -> Outcome {
        let problem = Calls { lefts: self, t };
        let Some(assigned) = matching::canonical(&problem, &self.lefts, t.work()) else {
            return stopped();
        };
        let size = assigned.iter().flatten().count();
        let (need_refs, need_calls) = match self.mode {
            TrajectoryMode::Superset => (true, false),
            TrajectoryMode::Subset => (false, true),
            _ => (true, true),
        };
        let refs_ok = !need_refs || size == self.reference.len();
        let calls_ok = !need_calls || size == t.len();
        if refs_ok && calls_ok {
            return Outcome::pass(assigned.iter().flatten().map(|&i| t.pos(i)).collect());
        }
        let mut taken = vec![false; t.len()];
        for &i in assigned.iter().flatten() {
            taken[i] = true;
        }
        let unmatched: Vec<usize> = (0..t.len()).filter(|&i| !taken[i]).collect();
        let mut why = Vec::new();
        if !refs_ok {
            let missing: Vec<String> = assigned
                .iter()
                .enumerate()
                .filter(|(_, a)| a.is_none())
                .map(|(k, _)| {
                    let r = &self.reference[k];
                    match r.closest(t, 0..t.len()) {
                        Some(c) => format!("{} (reference call {}; {c})", r.name, r.number),
                        None => format!("{} (reference call {})", r.name, r.number),
                    }
                })
                .collect();
            why.push(format!("no distinct call matches {}", missing.join(", ")));
        }
        if !calls_ok {
            let extra: Vec<String> = unmatched
                .iter()
                .map(|&i| format!("{} (call {})", t.calls()[i].name, t.pos(i)))
                .collect();
            why.push(format!("no distinct reference call matches {}", extra.join(", ")));
        }
        let mode = match self.mode {
            TrajectoryMode::Superset => "SUPERSET",
            TrajectoryMode::Subset => "SUBSET",
            _ => "UNORDERED",
        };
        Outcome::fail(
            Reason::TrajectoryMismatch,
            format!("{mode}: {}", why.join("; ")),
            unmatched.iter().map(|&i| t.pos(i)).collect(),
        )
    }
}

/// Compiles the reference calls of a `trajectory_match` or `trajectory_score` at `path`, with
/// the assertion's `args` mode and per-tool `overrides` (§9.15, §12 tolerance); `None` when
/// something is invalid (every problem goes to `c`, in field order).
pub(super) fn compile_reference(
    reference: &[ToolCall],
    args: i32,
    overrides: &[ToolOverride],
    path: &str,
    c: &mut Compiler<'_>,
) -> Option<Vec<RefCall>> {
    let before = c.problem_count();
    let base_mode = mode_of(args);
    // Overrides are validated first (the references depend on them) but reported after the
    // reference and args problems, in field order.
    let mut later = Compiler::new(c.limits);
    if base_mode == MatchMode::Regex {
        later.problem(format!("{path}.args"), "MATCH_MODE_REGEX is not a trajectory args mode");
    }
    let mut by_tool: HashMap<&str, Override> = HashMap::new();
    for (i, o) in overrides.iter().enumerate() {
        let at = format!("{path}.overrides[{i}]");
        if o.tool.is_empty() {
            later.problem(format!("{at}.tool"), "tool is required");
            continue;
        }
        if by_tool.contains_key(o.tool.as_str()) {
            later.problem(format!("{at}.tool"), format!("a second override for {}", o.tool));
            continue;
        }
        let mode = match mode_of(o.args) {
            MatchMode::Unspecified => None,
            MatchMode::Regex => {
                later.problem(
                    format!("{at}.args"),
                    "MATCH_MODE_REGEX is not a trajectory args mode",
                );
                None
            }
            other => Some(other),
        };
        let ignore = compile_paths(&o.ignore, &format!("{at}.ignore"), &mut later);
        let tolerance = o.tolerance.as_ref().and_then(|t| {
            let field = format!("{at}.tolerance");
            let effective = mode.unwrap_or(base_mode);
            if matches!(effective, MatchMode::Ignore | MatchMode::Regex) {
                let name = effective.as_str_name();
                later.problem(field, format!("tolerance is not used with {name}"));
                return None;
            }
            compile_tolerance(t, &field, &mut later)
        });
        by_tool.insert(&o.tool, Override { mode, ignore, tolerance });
    }

    if reference.is_empty() {
        c.problem(format!("{path}.reference"), "reference needs at least one call");
    }
    let mut out = Vec::with_capacity(reference.len());
    for (i, r) in reference.iter().enumerate() {
        let at = format!("{path}.reference[{i}]");
        if r.name.is_empty() {
            c.problem(format!("{at}.name"), "name is required");
            continue;
        }
        let o = by_tool.get(r.name.as_str());
        let mode = o.and_then(|o| o.mode).unwrap_or(base_mode);
        let args = match (&r.arguments_json, mode) {
            // A reference call without arguments constrains only the name (§9.15).
            (None, _) | (_, MatchMode::Ignore | MatchMode::Regex) => ArgsMatcher::Ignore,
            (Some(text), mode) => {
                let field = format!("{at}.arguments_json");
                let Some(expected) = parse_field(text, &field, c) else { continue };
                let mode = match mode {
                    MatchMode::Subset => Mode::Subset,
                    MatchMode::Partial => Mode::Partial,
                    _ => Mode::Exact,
                };
                if mode == Mode::Subset && !matches!(expected, Value::Object(_)) {
                    c.problem(field, "MATCH_MODE_SUBSET needs a JSON object");
                    continue;
                }
                let ignore = o.map(|o| o.ignore.clone()).unwrap_or_default();
                let tolerance = o.and_then(|o| o.tolerance.clone());
                ArgsMatcher::Compare(Comparison::new(mode, expected, ignore, None, tolerance))
            }
        };
        out.push(RefCall { name: r.name.clone(), args, number: i + 1 });
    }
    c.absorb(later);
    (c.problem_count() == before).then_some(out)
}

/// The outcome of a matching the work meter stopped (the grading loop reports the trace's
/// error instead).
fn stopped() -> Outcome {
    Outcome::fail(Reason::TrajectoryMismatch, "stopped: work limit or cancellation".into(), vec![])
}

impl Check for Trajectory {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        match self.mode {
            TrajectoryMode::InOrder => self.in_order(t),
            TrajectoryMode::Superset | TrajectoryMode::Subset | TrajectoryMode::Unordered => {
                self.matched(t)
            }
            TrajectoryMode::Unspecified | TrajectoryMode::Strict => self.strict(t),
        }
    }

    /// Turn `turn`'s calls against the reference calls of that turn (§11); a turn with neither
    /// is skipped.
    fn check_turn(&self, t: &TraceView<'_>, turn: u32) -> Option<Outcome> {
        match self.of_turn(turn) {
            Some(of_turn) => Some(of_turn.check(t)),
            None if t.is_empty() => None,
            None => Some(Trajectory::new(Vec::new(), [], self.mode).check(t)),
        }
    }

    fn reference_turns(&self) -> &[u32] {
        &self.turns
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run};

    #[test]
    fn spec_example_needs_maximum_matching() {
        let t = r#"{"trajectory_match":{"mode":"TRAJECTORY_MODE_SUPERSET","args":"MATCH_MODE_SUBSET","reference":[{"name":"f","arguments_json":"{\"x\":1}"},{"name":"f","arguments_json":"{}"}]}}"#;
        let r = run(t, &[("f", Some(r#"{"x":1,"y":2}"#)), ("f", Some(r#"{"x":1}"#))]);
        assert_eq!((r.reason_code.as_str(), r.positions.as_slice()), ("", &[1, 2][..]));
    }

    #[test]
    fn a_name_only_reference_moves_off_the_call_another_needs() {
        // First-fit gives call 1 to the name-only reference; the canonical matching moves it
        // to call 3, the only other call of f, so reference 2 gets call 1.
        let t = r#"{"trajectory_match":{"mode":"TRAJECTORY_MODE_UNORDERED","reference":[{"name":"f"},{"name":"f","arguments_json":"{\"i\":0}"},{"name":"g"}]}}"#;
        let r = run(t, &[("f", Some(r#"{"i":0}"#)), ("g", None), ("f", Some(r#"{"i":1}"#))]);
        assert_eq!((r.reason_code.as_str(), r.positions.as_slice()), ("", &[3, 1, 2][..]));
        // With a second reference of g and no second call of g, one reference stays unmatched.
        let t = t.replace(r#"{"name":"g"}]"#, r#"{"name":"g"},{"name":"g"}]"#);
        let r = run(&t, &[("f", Some(r#"{"i":0}"#)), ("g", None), ("f", Some(r#"{"i":1}"#))]);
        assert_eq!(r.reason_code, "TRAJECTORY_MISMATCH");
        assert!(r.reason.contains("g (reference call 4)"), "{}", r.reason);
    }

    #[test]
    fn a_reference_call_failing_on_its_arguments_points_at_the_closest_call() {
        let reference = |mode: &str| {
            format!(
                r#"{{"trajectory_match":{{"mode":"{mode}","args":"MATCH_MODE_SUBSET","reference":[{{"name":"refund","arguments_json":"{{\"amount\":5000}}"}}]}}}}"#
            )
        };
        let calls = [("lookup", None), ("refund", Some(r#"{"amount":500,"id":"o1"}"#))];
        let diff = "closest is call 2: $.amount expected 5000, got 500";
        for mode in ["TRAJECTORY_MODE_SUPERSET", "TRAJECTORY_MODE_UNORDERED"] {
            let r = run(&reference(mode), &calls);
            assert!(
                r.reason.contains(&format!("refund (reference call 1; {diff})")),
                "{}",
                r.reason
            );
        }
        let r = run(&reference("TRAJECTORY_MODE_IN_ORDER"), &calls);
        assert!(r.reason.ends_with(&format!("not found after call 0; {diff}")), "{}", r.reason);
        let r = run(&reference("TRAJECTORY_MODE_STRICT"), &calls[1..]);
        assert!(
            r.reason
                .ends_with("reference call 1: closest is call 1: $.amount expected 5000, got 500"),
            "{}",
            r.reason
        );
    }

    #[test]
    fn strict_positions_are_unmatched_calls() {
        let t = r#"{"trajectory_match":{"reference":[{"name":"a"},{"name":"b"}]}}"#;
        let r = run(t, &[("a", None), ("c", None), ("d", None)]);
        assert_eq!(
            (r.reason_code.as_str(), r.positions.as_slice()),
            ("TRAJECTORY_MISMATCH", &[2, 3][..])
        );
    }

    #[test]
    fn overrides_are_validated_after_references() {
        let t = r#"{"trajectory_match":{"reference":[{"name":"","arguments_json":"{}"}],"overrides":[{"tool":"a"},{"tool":"a"}]}}"#;
        assert_eq!(rejected_field(t), "assertions[0].trajectory_match.reference[0].name");
    }
}
