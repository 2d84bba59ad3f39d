//! `allowed_tools` / `forbidden_tools`: every call's name allowed, or none forbidden (globs).
use super::{Check, Outcome};
use crate::error::Reason;
use crate::glob::Glob;
use crate::proto::v1::ToolList as ToolListMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct ToolList {
    globs: Vec<Glob>,
    /// true: an allowlist; false: a denylist.
    allow: bool,
}

impl ToolList {
    pub fn compile(m: &ToolListMsg, path: &str, allow: bool, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        if !allow && m.tools.is_empty() {
            c.problem(format!("{path}.tools"), "forbidden_tools needs at least one tool");
        }
        let mut globs = Vec::with_capacity(m.tools.len());
        for (i, t) in m.tools.iter().enumerate() {
            if t.is_empty() {
                c.problem(format!("{path}.tools[{i}]"), "an empty tool name");
                continue;
            }
            match Glob::new(t, m.ignore_case) {
                Ok(g) => globs.push(g),
                Err(e) => c.problem(format!("{path}.tools[{i}]"), e),
            }
        }
        (c.problem_count() == before).then_some(ToolList { globs, allow })
    }
}

impl Check for ToolList {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let mut offenders = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for (i, call) in t.calls().iter().enumerate() {
            let listed = self.globs.iter().any(|g| g.is_match(call.name));
            if listed != self.allow {
                offenders.push(t.pos(i));
                names.push(call.name);
            }
        }
        if offenders.is_empty() {
            return Outcome::pass(vec![]);
        }
        let detail: Vec<String> =
            offenders.iter().zip(&names).map(|(p, n)| format!("{n} (call {p})")).collect();
        let (reason, what) = if self.allow {
            (Reason::UnexpectedTool, "tools not in the allowed list were called")
        } else {
            (Reason::ForbiddenTool, "forbidden tools were called")
        };
        Outcome::fail(reason, format!("{what}: {}", detail.join(", ")), offenders)
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run};

    #[test]
    fn allowlist_names_each_offender() {
        let r = run(
            r#"{"allowed_tools":{"tools":["search_*","reply"]}}"#,
            &[("search_a", None), ("delete", None), ("reply", None), ("drop", None)],
        );
        assert_eq!(r.reason_code, "UNEXPECTED_TOOL");
        assert_eq!(r.positions, [2, 4]);
        assert!(r.reason.ends_with("delete (call 2), drop (call 4)"), "{}", r.reason);
    }

    #[test]
    fn forbidden_needs_tools() {
        assert_eq!(
            rejected_field(r#"{"forbidden_tools":{"tools":[]}}"#),
            "assertions[0].forbidden_tools.tools"
        );
        let r = run(
            r#"{"forbidden_tools":{"tools":["DEL*"],"ignore_case":true}}"#,
            &[("delete", None)],
        );
        assert_eq!((r.reason_code.as_str(), r.positions.as_slice()), ("FORBIDDEN_TOOL", &[1][..]));
    }
}
