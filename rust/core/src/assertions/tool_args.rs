//! `tool_call_args`: some (ANY), every (ALL) or the n-th call of a tool matches `match` (§9.6-9.7).
use super::{Check, Outcome};
use crate::args::{describe, ArgsMatcher, CallMatch};
use crate::error::Reason;
use crate::proto::v1::{Quantifier, ToolCallArgs};
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct ToolArgs {
    tool: String,
    /// 1-based; negative counts from the end; 0 means "any call".
    call_index: i32,
    all: bool,
    matcher: ArgsMatcher,
}

impl ToolArgs {
    pub fn compile(m: &ToolCallArgs, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        if m.tool.is_empty() {
            c.problem(format!("{path}.tool"), "tool is required");
        }
        let all = Quantifier::try_from(m.quantifier) == Ok(Quantifier::All);
        if all && m.call_index != 0 {
            c.problem(
                format!("{path}.quantifier"),
                "QUANTIFIER_ALL cannot be combined with call_index",
            );
        }
        let Some(am) = &m.r#match else {
            c.problem(format!("{path}.match"), "match is required");
            return None;
        };
        let matcher = ArgsMatcher::compile(am, &format!("{path}.match"), false, c)?;
        if m.tool.is_empty() || (all && m.call_index != 0) {
            return None;
        }
        Some(ToolArgs { tool: m.tool.clone(), call_index: m.call_index, all, matcher })
    }

    pub fn default_name(&self) -> String {
        if self.call_index == 0 {
            format!("tool_call_args:{}", self.tool)
        } else {
            format!("tool_call_args:{}#{}", self.tool, self.call_index)
        }
    }

    fn calls(&self, t: &TraceView<'_>) -> Vec<usize> {
        t.calls().iter().enumerate().filter(|(_, c)| c.name == self.tool).map(|(i, _)| i).collect()
    }

    fn indexed(&self, t: &TraceView<'_>, calls: &[usize]) -> Outcome {
        let count = calls.len() as i64;
        let index = i64::from(self.call_index);
        let at = if index > 0 { index - 1 } else { count + index };
        let Some(&i) = usize::try_from(at).ok().and_then(|at| calls.get(at)) else {
            return Outcome::fail(
                Reason::CallIndexOutOfRange,
                format!(
                    "{} was called {count} time(s), so call_index {} selects no call",
                    self.tool, self.call_index
                ),
                vec![],
            );
        };
        let m = self.matcher.check(t, i);
        if matches!(m, CallMatch::Match) {
            return Outcome::pass(vec![t.pos(i)]);
        }
        let reason = category(&m);
        let message = format!(
            "call_index {} of {} did not match the expected arguments; it is {}",
            self.call_index,
            self.tool,
            describe(&m, t.pos(i))
        );
        Outcome::fail(reason, message, vec![t.pos(i)])
    }

    /// The closest of `candidates` (§9.7), as a failing outcome.
    fn closest(&self, t: &TraceView<'_>, candidates: &[usize], what: &str) -> Outcome {
        // Rank every candidate cheaply (from the text when possible), describe only the winner.
        let Some(i) = self.matcher.closest_index(t, candidates.iter().copied()) else {
            return Outcome::fail(Reason::NoMatchingCall, String::new(), vec![]);
        };
        let m = self.matcher.check_failing(t, i);
        let message = format!("{what}; closest is {}", describe(&m, t.pos(i)));
        Outcome::fail(category(&m), message, vec![t.pos(i)])
    }
}

fn category(m: &CallMatch<'_>) -> Reason {
    match m {
        CallMatch::NotRecorded => Reason::ArgsNotRecorded,
        CallMatch::Invalid(_) => Reason::ArgsInvalidJson,
        CallMatch::Match | CallMatch::Mismatch(_) => Reason::NoMatchingCall,
    }
}

impl Check for ToolArgs {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let calls = self.calls(t);
        if calls.is_empty() {
            return Outcome::fail(
                Reason::ToolNotCalled,
                format!("{} was never called", self.tool),
                vec![],
            );
        }
        if self.call_index != 0 {
            return self.indexed(t, &calls);
        }
        if self.all {
            let failing: Vec<usize> =
                calls.iter().copied().filter(|&i| !self.matcher.is_match(t, i)).collect();
            if failing.is_empty() {
                return Outcome::pass(calls.iter().map(|&i| t.pos(i)).collect());
            }
            let what = format!(
                "{} of {} calls to {} did not match the expected arguments",
                failing.len(),
                calls.len(),
                self.tool
            );
            return self.closest(t, &failing, &what);
        }
        if let Some(&i) = calls.iter().find(|&&i| self.matcher.is_match(t, i)) {
            return Outcome::pass(vec![t.pos(i)]);
        }
        let what = format!("no call to {} matched the expected arguments", self.tool);
        self.closest(t, &calls, &what)
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run};

    const REFUND: &str = r#"{"tool_call_args":{"tool":"issue_refund","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{\"amount_cents\":5000}"}}}"#;

    #[test]
    fn closest_call_reason_names_path_and_values() {
        let r = run(
            REFUND,
            &[
                ("issue_refund", Some(r#"{"amount_cents":1,"x":1}"#)),
                ("issue_refund", None),
                ("issue_refund", Some(r#"{"amount_cents":500}"#)),
            ],
        );
        assert_eq!(r.reason_code, "NO_MATCHING_CALL");
        assert_eq!(r.positions, [1]);
        assert_eq!(
            r.reason,
            "no call to issue_refund matched the expected arguments; closest is call 1: \
             $.amount_cents expected 5000, got 1"
        );
    }

    #[test]
    fn categories_rank_comparable_first() {
        let r = run(REFUND, &[("issue_refund", None), ("issue_refund", Some("{bad"))]);
        assert_eq!(
            (r.reason_code.as_str(), r.positions.as_slice()),
            ("ARGS_INVALID_JSON", &[2][..])
        );
        assert!(r.reason.contains("call 2, whose arguments are not valid JSON"), "{}", r.reason);
        assert!(r.reason.contains("line 1 column 2"), "{}", r.reason);
    }

    #[test]
    fn validation() {
        assert_eq!(
            rejected_field(r#"{"tool_call_args":{"tool":"f"}}"#),
            "assertions[0].tool_call_args.match"
        );
        assert_eq!(
            rejected_field(
                r#"{"tool_call_args":{"tool":"f","match":{"mode":"MATCH_MODE_EXACT","args_json":"{}","ignore":["a[0]"]}}}"#
            ),
            "assertions[0].tool_call_args.match.ignore[0]"
        );
    }
}
