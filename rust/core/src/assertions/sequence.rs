//! `tool_sequence`: steps found in order (greedy scan), exactly, or in any order (maximum matching).
use prost::Message;

use super::{Check, Outcome};
use crate::args::ArgsMatcher;
use crate::error::Reason;
use crate::glob::Glob;
use crate::matching::{self, CallLefts, Calls, Lefts, Meter};
use crate::proto::v1::{SequenceMode, ToolSequence};
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
struct Step {
    name: Glob,
    shown: String,
    /// The tool name when the step names one, case-sensitively.
    exact: Option<String>,
    args: Option<ArgsMatcher>,
}

impl Step {
    fn matches(&self, t: &TraceView<'_>, i: usize) -> bool {
        self.name.is_match(t.calls()[i].name) && self.args.as_ref().is_none_or(|m| m.is_match(t, i))
    }

    /// `; closest is call N: <difference>` when calls of this step's tool in `range` failed it
    /// only on their arguments (empty otherwise): the reason then points at the argument.
    fn closest(&self, t: &TraceView<'_>, range: std::ops::Range<usize>) -> String {
        let named = range.filter(|&i| self.name.is_match(t.calls()[i].name));
        self.args
            .as_ref()
            .and_then(|m| m.closest_reason(t, named))
            .map_or_else(String::new, |r| format!("; {r}"))
    }
}

#[derive(Debug)]
pub struct Sequence {
    steps: Vec<Step>,
    /// Classes of identical steps (same tool or glob and the same `match`) for the matching.
    lefts: Lefts,
    /// Whether some step compares arguments (else calls are matched by name alone).
    compares_args: bool,
    mode: SequenceMode,
}

/// The left side of the matching: classes of steps.
impl CallLefts for Sequence {
    fn compares_args(&self) -> bool {
        self.compares_args
    }

    fn name_ok(&self, class: usize, name: &str) -> bool {
        self.class_step(class).name.is_match(name)
    }

    fn exact_name(&self, class: usize) -> Option<&str> {
        self.class_step(class).exact.as_deref()
    }

    fn is_edge(&self, class: usize, t: &TraceView<'_>, r: usize) -> bool {
        self.class_step(class).matches(t, r)
    }
}

impl Sequence {
    pub fn compile(m: &ToolSequence, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        if m.steps.is_empty() {
            c.problem(format!("{path}.steps"), "a sequence needs at least one step");
        }
        let mut steps = Vec::with_capacity(m.steps.len());
        for (i, s) in m.steps.iter().enumerate() {
            let at = format!("{path}.steps[{i}]");
            let name = match (s.tool.is_empty(), s.glob.is_empty()) {
                (false, false) => {
                    c.problem(format!("{at}.glob"), "set tool or glob, not both");
                    None
                }
                (true, true) => {
                    c.problem(format!("{at}.tool"), "tool or glob is required");
                    None
                }
                (false, true) => Some((Glob::exact(&s.tool, s.ignore_case), s.tool.clone())),
                (true, false) => match Glob::new(&s.glob, s.ignore_case) {
                    Ok(g) => Some((g, s.glob.clone())),
                    Err(e) => {
                        c.problem(format!("{at}.glob"), e);
                        None
                    }
                },
            };
            let args = s
                .r#match
                .as_ref()
                .map(|am| ArgsMatcher::compile(am, &format!("{at}.match"), true, c));
            let exact = (!s.tool.is_empty() && !s.ignore_case).then(|| s.tool.clone());
            if let Some((name, shown)) = name {
                match args {
                    Some(None) => {}
                    Some(Some(m)) => steps.push(Step { name, shown, exact, args: Some(m) }),
                    None => steps.push(Step { name, shown, exact, args: None }),
                }
            }
        }
        let mode = SequenceMode::try_from(m.mode).unwrap_or(SequenceMode::Unspecified);
        if c.problem_count() != before {
            return None;
        }
        let lefts = Lefts::new(m.steps.iter().map(|s| {
            (&s.tool, &s.glob, s.ignore_case, s.r#match.as_ref().map(Message::encode_to_vec))
        }));
        let compares_args = steps
            .iter()
            .any(|s| s.args.as_ref().is_some_and(|a| !matches!(a, ArgsMatcher::Ignore)));
        Some(Sequence { steps, lefts, compares_args, mode })
    }

    fn class_step(&self, class: usize) -> &Step {
        &self.steps[self.lefts.first[class]]
    }

    fn in_order(&self, t: &TraceView<'_>) -> Outcome {
        let mut positions = Vec::with_capacity(self.steps.len());
        let mut next = 0;
        let mut meter = Meter::new(t.work());
        for (k, step) in self.steps.iter().enumerate() {
            let found = (next..t.len()).find(|&i| meter.tick(1).is_none() || step.matches(t, i));
            if meter.stopped() {
                return stopped();
            }
            let Some(i) = found else {
                let after = if next == 0 {
                    format!("in {}", t.noun())
                } else {
                    format!("after call {}", t.pos(next - 1))
                };
                return Outcome::fail(
                    Reason::SequenceIncomplete,
                    format!(
                        "matched {k} of {} steps; step {} {} not found {after}{}",
                        self.steps.len(),
                        k + 1,
                        step.shown,
                        step.closest(t, next..t.len())
                    ),
                    positions,
                );
            };
            positions.push(t.pos(i));
            next = i + 1;
        }
        Outcome::pass(positions)
    }

    fn exact(&self, t: &TraceView<'_>) -> Outcome {
        let n = self.steps.len();
        let common = n.min(t.len());
        let mut meter = Meter::new(t.work());
        let first_mismatch =
            (0..common).find(|&k| meter.tick(1).is_none() || !self.steps[k].matches(t, k));
        if meter.stopped() {
            return stopped();
        }
        if let Some(k) = first_mismatch {
            let name = t.calls()[k].name;
            let what = if self.steps[k].name.is_match(name) {
                format!(
                    "call {} ({name}) does not match the arguments of step {}{}",
                    t.pos(k),
                    k + 1,
                    self.steps[k].closest(t, k..k + 1)
                )
            } else {
                format!(
                    "call {} is {name}, expected step {} {}",
                    t.pos(k),
                    k + 1,
                    self.steps[k].shown
                )
            };
            return Outcome::fail(
                Reason::SequenceMismatch,
                format!("matched {k} of {n} steps; {what}"),
                (0..k).map(|i| t.pos(i)).collect(),
            );
        }
        let matched: Vec<u32> = (0..common).map(|i| t.pos(i)).collect();
        if t.len() < n {
            return Outcome::fail(
                Reason::SequenceIncomplete,
                format!(
                    "matched {common} of {n} steps; {} ended before step {} {}",
                    t.noun(),
                    common + 1,
                    self.steps[common].shown
                ),
                matched,
            );
        }
        if t.len() > n {
            return Outcome::fail(
                Reason::SequenceMismatch,
                format!(
                    "all {n} steps matched, but {} has {} extra call(s) from call {}",
                    t.noun(),
                    t.len() - n,
                    t.pos(n)
                ),
                matched,
            );
        }
        Outcome::pass(matched)
    }

    fn any_order(&self, t: &TraceView<'_>) -> Outcome {
        let problem = Calls { lefts: self, t };
        let Some(assigned) = matching::canonical(&problem, &self.lefts, t.work()) else {
            return stopped();
        };
        match assigned.iter().position(Option::is_none) {
            None => Outcome::pass(assigned.iter().flatten().map(|&i| t.pos(i)).collect()),
            Some(k) => {
                let matched = assigned.iter().filter(|a| a.is_some()).count();
                let missing: Vec<String> = assigned
                    .iter()
                    .zip(&self.steps)
                    .enumerate()
                    .filter(|(_, (a, _))| a.is_none())
                    .map(|(j, (_, s))| {
                        let closest = s.closest(t, 0..t.len());
                        match closest.strip_prefix("; ") {
                            Some(c) => format!("step {} {} ({c})", j + 1, s.shown),
                            None => format!("step {} {}", j + 1, s.shown),
                        }
                    })
                    .collect();
                Outcome::fail(
                    Reason::SequenceIncomplete,
                    format!(
                        "matched {matched} of {} steps (each needs a distinct call); not found: {}",
                        self.steps.len(),
                        missing.join(", ")
                    ),
                    assigned[..k].iter().flatten().map(|&i| t.pos(i)).collect(),
                )
            }
        }
    }
}

/// The outcome of a scan the work meter stopped (the grading loop reports the trace's error
/// instead).
fn stopped() -> Outcome {
    Outcome::fail(Reason::SequenceIncomplete, "stopped: work limit or cancellation".into(), vec![])
}

impl Check for Sequence {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        match self.mode {
            SequenceMode::Exact => self.exact(t),
            SequenceMode::AnyOrder => self.any_order(t),
            SequenceMode::Unspecified | SequenceMode::InOrder => self.in_order(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::run;

    #[test]
    fn in_order_reason_says_how_far() {
        let seq =
            r#"{"tool_sequence":{"steps":[{"tool":"lookup"},{"tool":"check"},{"tool":"refund"}]}}"#;
        let r = run(seq, &[("x", None), ("lookup", None), ("refund", None)]);
        assert_eq!(r.reason_code, "SEQUENCE_INCOMPLETE");
        assert_eq!(r.positions, [2]);
        assert_eq!(r.reason, "matched 1 of 3 steps; step 2 check not found after call 2");
    }

    // The promptfoo article's failing scenario: the step's tool was called, with other arguments.
    const CUSTOMER: &str = r#"{"name":"find_customer","match":{"mode":"MATCH_MODE_PARTIAL","args_json":"{\"legal_name\":\"PT Sinar Jaya Abadi\"}"}}"#;
    const CALLS: &[(&str, Option<&str>)] = &[
        ("search", Some(r#"{"q":"x"}"#)),
        ("find_customer", Some(r#"{"legal_name":"PT Sinar Jaya"}"#)),
        ("find_customer", Some(r#"{"legal_name":"Sinar Jaya","city":"Jakarta"}"#)),
    ];

    fn steps(mode: &str) -> String {
        let step = CUSTOMER.replacen(r#""name""#, r#""tool""#, 1);
        format!(r#"{{"tool_sequence":{{"mode":"{mode}","steps":[{step}]}}}}"#)
    }

    #[test]
    fn a_step_failing_on_its_arguments_points_at_the_closest_call() {
        let r = run(&steps("SEQUENCE_MODE_IN_ORDER"), CALLS);
        assert_eq!(
            (r.reason_code.as_str(), r.positions.as_slice()),
            ("SEQUENCE_INCOMPLETE", &[][..])
        );
        assert_eq!(
            r.reason,
            "matched 0 of 1 steps; step 1 find_customer not found in the trace; closest is call 2: \
             $.legal_name expected \"PT Sinar Jaya Abadi\", got \"PT Sinar Jaya\""
        );
        let r = run(&steps("SEQUENCE_MODE_ANY_ORDER"), CALLS);
        assert!(
            r.reason.ends_with(
                "not found: step 1 find_customer (closest is call 2: $.legal_name expected \
                 \"PT Sinar Jaya Abadi\", got \"PT Sinar Jaya\")"
            ),
            "{}",
            r.reason
        );
        let r = run(&steps("SEQUENCE_MODE_EXACT"), &CALLS[1..2]);
        assert!(
            r.reason.ends_with(
                "call 1 (find_customer) does not match the arguments of step 1; closest is call \
                 1: $.legal_name expected \"PT Sinar Jaya Abadi\", got \"PT Sinar Jaya\""
            ),
            "{}",
            r.reason
        );
        // A step whose tool was never called keeps the plain reason.
        let r = run(&steps("SEQUENCE_MODE_IN_ORDER"), &CALLS[..1]);
        assert_eq!(r.reason, "matched 0 of 1 steps; step 1 find_customer not found in the trace");
    }

    #[test]
    fn any_order_uses_maximum_matching() {
        let seq = r#"{"tool_sequence":{"mode":"SEQUENCE_MODE_ANY_ORDER","steps":[{"glob":"f_*"},{"tool":"f_a"}]}}"#;
        let r = run(seq, &[("f_a", None), ("f_b", None)]);
        assert_eq!(r.reason_code, "");
        assert_eq!(r.positions, [2, 1]);
    }

    #[test]
    fn identical_glob_steps_leave_the_call_a_tool_step_needs() {
        let seq = r#"{"tool_sequence":{"mode":"SEQUENCE_MODE_ANY_ORDER","steps":[{"glob":"f_*"},{"tool":"f_a"},{"glob":"f_*"}]}}"#;
        let r = run(seq, &[("f_a", None), ("f_b", None), ("f_c", None)]);
        assert_eq!((r.reason_code.as_str(), r.positions.as_slice()), ("", &[2, 1, 3][..]));
        // Two calls for three steps: any two steps make a maximum matching, so step 1 keeps
        // the earliest call and step 2 is the one left out.
        let r = run(seq, &[("f_a", None), ("f_b", None)]);
        assert_eq!(r.reason_code, "SEQUENCE_INCOMPLETE");
        assert_eq!(r.positions, [1], "the calls matched before the first unmatched step");
        assert!(r.reason.ends_with("not found: step 2 f_a"), "{}", r.reason);
    }

    #[test]
    fn exact_prefix_is_incomplete() {
        let seq = r#"{"tool_sequence":{"mode":"SEQUENCE_MODE_EXACT","steps":[{"tool":"a"},{"tool":"b"}]}}"#;
        let r = run(seq, &[("a", None)]);
        assert_eq!(
            (r.reason_code.as_str(), r.positions.as_slice()),
            ("SEQUENCE_INCOMPLETE", &[1][..])
        );
        let r = run(seq, &[("a", None), ("b", None), ("c", None)]);
        assert_eq!(
            (r.reason_code.as_str(), r.positions.as_slice()),
            ("SEQUENCE_MISMATCH", &[1, 2][..])
        );
    }
}
