//! `step_count`: the number of calls lies within `[min, max]` (§9.18).
use super::{Check, Outcome};
use crate::error::Reason;
use crate::proto::v1::StepCount as StepCountMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct StepCount {
    min: Option<u32>,
    max: Option<u32>,
}

impl StepCount {
    pub fn compile(m: &StepCountMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        match (m.min, m.max) {
            (None, None) => {
                c.problem(path, "step_count needs min or max");
                None
            }
            (Some(min), Some(max)) if max < min => {
                c.problem(format!("{path}.max"), format!("max {max} is below min {min}"));
                None
            }
            (min, max) => Some(StepCount { min, max }),
        }
    }
}

impl Check for StepCount {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let n = t.len() as u64;
        if let Some(max) = self.max {
            if n > u64::from(max) {
                return Outcome::fail(
                    Reason::TooManySteps,
                    format!("{} has {n} call(s); at most {max} allowed", t.noun()),
                    vec![],
                );
            }
        }
        if let Some(min) = self.min {
            if n < u64::from(min) {
                return Outcome::fail(
                    Reason::CountOutOfRange,
                    format!("{} has {n} call(s); at least {min} required", t.noun()),
                    vec![],
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
    fn codes() {
        let r = run(r#"{"step_count":{"max":1}}"#, &[("a", None), ("b", None)]);
        assert_eq!(r.reason_code, "TOO_MANY_STEPS");
        let r = run(r#"{"step_count":{"min":3}}"#, &[("a", None)]);
        assert_eq!(r.reason_code, "COUNT_OUT_OF_RANGE");
        assert_eq!(rejected_field(r#"{"step_count":{}}"#), "assertions[0].step_count");
    }
}
