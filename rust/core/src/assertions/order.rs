//! `order`: every call of `after` is preceded by some call of `before` (§9.19).
use super::{Check, Outcome};
use crate::error::Reason;
use crate::proto::v1::Order as OrderMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct Order {
    before: String,
    after: String,
}

impl Order {
    pub fn compile(m: &OrderMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        if m.before.is_empty() {
            c.problem(format!("{path}.before"), "before is required");
        }
        if m.after.is_empty() {
            c.problem(format!("{path}.after"), "after is required");
        } else if m.after == m.before {
            c.problem(format!("{path}.after"), "before and after name the same tool");
        }
        (c.problem_count() == before)
            .then(|| Order { before: m.before.clone(), after: m.after.clone() })
    }
}

impl Check for Order {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let mut seen_before = false;
        for (i, call) in t.calls().iter().enumerate() {
            if call.name == self.before {
                seen_before = true;
            } else if call.name == self.after && !seen_before {
                return Outcome::fail(
                    Reason::OrderViolated,
                    format!(
                        "{} at call {} ran before any call to {}",
                        self.after,
                        t.pos(i),
                        self.before
                    ),
                    vec![t.pos(i)],
                );
            }
        }
        Outcome::pass(vec![])
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run};

    #[test]
    fn first_violation() {
        let o = r#"{"order":{"before":"auth","after":"pay"}}"#;
        let r = run(o, &[("pay", None), ("auth", None), ("pay", None)]);
        assert_eq!((r.reason_code.as_str(), r.positions.as_slice()), ("ORDER_VIOLATED", &[1][..]));
        assert_eq!(run(o, &[("x", None)]).reason_code, "");
        assert_eq!(
            rejected_field(r#"{"order":{"before":"a","after":"a"}}"#),
            "assertions[0].order.after"
        );
    }
}
