//! `tool_called`: the tool (exact name) was called at least once.
use super::{Check, Outcome};
use crate::error::Reason;
use crate::proto::v1::ToolCalled as ToolCalledMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct ToolCalled {
    tool: String,
}

impl ToolCalled {
    pub fn compile(m: &ToolCalledMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        if m.tool.is_empty() {
            c.problem(format!("{path}.tool"), "tool is required");
            return None;
        }
        Some(ToolCalled { tool: m.tool.clone() })
    }
}

impl Check for ToolCalled {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        match t.calls().iter().position(|c| c.name == self.tool) {
            Some(i) => Outcome::pass(vec![t.pos(i)]),
            None => Outcome::fail(
                Reason::ToolNotCalled,
                format!("{} was never called ({} calls in {})", self.tool, t.len(), t.noun()),
                vec![],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::run;

    #[test]
    fn presence() {
        let r = run(r#"{"tool_called":{"tool":"b"}}"#, &[("a", None), ("b", None), ("b", None)]);
        assert_eq!((r.status, r.positions.as_slice()), (1, &[2][..]));
        let r = run(r#"{"negate":true,"tool_called":{"tool":"b"}}"#, &[("b", None)]);
        assert_eq!(
            (r.name.as_str(), r.reason_code.as_str()),
            ("not:tool_called:b", "NEGATED_HELD")
        );
    }
}
