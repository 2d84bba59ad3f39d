//! `tool_count`: the number of calls of a tool (or glob) lies within `[min, max]` (§9.17).
use super::{Check, Outcome};
use crate::error::Reason;
use crate::glob::Glob;
use crate::proto::v1::ToolCount as ToolCountMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct ToolCount {
    matcher: Glob,
    shown: String,
    min: u32,
    max: Option<u32>,
}

impl ToolCount {
    pub fn compile(m: &ToolCountMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        let matcher = match (m.tool.is_empty(), m.glob.is_empty()) {
            (false, false) => {
                c.problem(format!("{path}.glob"), "set tool or glob, not both");
                None
            }
            (true, true) => {
                c.problem(format!("{path}.tool"), "tool or glob is required");
                None
            }
            (false, true) => Some(Glob::exact(&m.tool, m.ignore_case)),
            (true, false) => match Glob::new(&m.glob, m.ignore_case) {
                Ok(g) => Some(g),
                Err(e) => {
                    c.problem(format!("{path}.glob"), e);
                    None
                }
            },
        };
        let min = match (m.min, m.max) {
            (Some(min), _) => min,
            (None, Some(_)) => 0,
            (None, None) => 1,
        };
        if let Some(max) = m.max {
            if max < min {
                c.problem(format!("{path}.max"), format!("max {max} is below min {min}"));
            }
        }
        let shown = if m.tool.is_empty() { m.glob.clone() } else { m.tool.clone() };
        let matcher = matcher?;
        (c.problem_count() == before).then_some(ToolCount { matcher, shown, min, max: m.max })
    }
}

impl Check for ToolCount {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let counted: Vec<u32> = t
            .calls()
            .iter()
            .enumerate()
            .filter(|(_, c)| self.matcher.is_match(c.name))
            .map(|(i, _)| t.pos(i))
            .collect();
        let n = counted.len() as u64;
        if n >= u64::from(self.min) && self.max.is_none_or(|max| n <= u64::from(max)) {
            return Outcome::pass(counted);
        }
        let range = match self.max {
            Some(max) if max == self.min => format!("exactly {max}"),
            Some(max) if self.min == 0 => format!("at most {max}"),
            Some(max) => format!("between {} and {max}", self.min),
            None => format!("at least {}", self.min),
        };
        Outcome::fail(
            Reason::CountOutOfRange,
            format!("{} was called {n} time(s); expected {range}", self.shown),
            counted,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run};

    #[test]
    fn bounds() {
        let r =
            run(r#"{"tool_count":{"tool":"a","max":1}}"#, &[("a", None), ("b", None), ("a", None)]);
        assert_eq!(
            (r.reason_code.as_str(), r.positions.as_slice()),
            ("COUNT_OUT_OF_RANGE", &[1, 3][..])
        );
        let r = run(r#"{"tool_count":{"tool":"a","max":1}}"#, &[]);
        assert_eq!(r.reason_code, "");
        assert_eq!(
            rejected_field(r#"{"tool_count":{"tool":"a","min":2,"max":1}}"#),
            "assertions[0].tool_count.max"
        );
    }
}
