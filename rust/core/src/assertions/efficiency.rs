//! `efficiency`: `len(calls) <= max_ratio * reference_steps`, computed in float64 (§9.21).
use super::{Check, Outcome};
use crate::error::Reason;
use crate::proto::v1::Efficiency as EfficiencyMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct Efficiency {
    reference_steps: u32,
    max_ratio: f64,
}

impl Efficiency {
    pub fn compile(m: &EfficiencyMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        if m.reference_steps == 0 {
            c.problem(format!("{path}.reference_steps"), "reference_steps must be at least 1");
        }
        if !m.max_ratio.is_finite() || m.max_ratio < 0.0 {
            c.problem(format!("{path}.max_ratio"), "max_ratio must be a finite, positive number");
        }
        let max_ratio = if m.max_ratio == 0.0 { 1.5 } else { m.max_ratio };
        (c.problem_count() == before)
            .then_some(Efficiency { reference_steps: m.reference_steps, max_ratio })
    }
}

impl Check for Efficiency {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let bound = self.max_ratio * f64::from(self.reference_steps);
        if t.len() as f64 <= bound {
            return Outcome::pass(vec![]);
        }
        Outcome::fail(
            Reason::TooManySteps,
            format!(
                "{} has {} calls; at most {bound} allowed ({} x {} reference steps)",
                t.noun(),
                t.len(),
                self.max_ratio,
                self.reference_steps
            ),
            vec![],
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run};

    #[test]
    fn float_bound() {
        let e = r#"{"efficiency":{"reference_steps":10,"max_ratio":0.7}}"#;
        assert_eq!(run(e, &[("a", None); 7]).reason_code, "");
        assert_eq!(run(e, &[("a", None); 8]).reason_code, "TOO_MANY_STEPS");
        assert_eq!(
            rejected_field(r#"{"efficiency":{}}"#),
            "assertions[0].efficiency.reference_steps"
        );
    }
}
