//! `budget`: the scoped model calls stay within token, cost and count bounds (SPEC §12).
use super::{list_positions, Check, Outcome};
use crate::assertions::duration::grouped;
use crate::error::Reason;
use crate::proto::v1::Budget as BudgetMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

/// The upper bounds; `None` = unbounded.
#[derive(Debug)]
pub struct Budget {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    total_tokens: Option<u64>,
    cost: Option<f64>,
    model_calls: Option<u32>,
}

impl Budget {
    pub fn compile(m: &BudgetMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        let bounds = [
            m.max_input_tokens.is_some(),
            m.max_output_tokens.is_some(),
            m.max_total_tokens.is_some(),
            m.max_cost.is_some(),
            m.max_model_calls.is_some(),
        ];
        if !bounds.contains(&true) {
            c.problem(
                path,
                "set at least one bound: max_input_tokens, max_output_tokens, \
                 max_total_tokens, max_cost or max_model_calls",
            );
        }
        if let Some(cost) = m.max_cost {
            if !(cost.is_finite() && cost >= 0.0) {
                c.problem(
                    format!("{path}.max_cost"),
                    format!("max_cost {cost} is not a finite number >= 0"),
                );
            }
        }
        (c.problem_count() == before).then_some(Budget {
            input_tokens: m.max_input_tokens,
            output_tokens: m.max_output_tokens,
            total_tokens: m.max_total_tokens,
            cost: m.max_cost,
            model_calls: m.max_model_calls,
        })
    }
}

impl Check for Budget {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let calls = t.model_calls();
        // One pass over the model calls (the base units cover only the tool calls). When the
        // meter says stop, grading discards this outcome.
        if !t.work().spend(calls.len() as u64) {
            return Outcome::pass(vec![]);
        }
        if self.cost.is_some() {
            // A NaN cost is no figure to compare: read as not recorded.
            let missing: Vec<u32> = (1..)
                .zip(calls)
                .filter(|(_, m)| m.cost.is_none_or(f64::is_nan))
                .map(|(k, _)| k)
                .collect();
            if !missing.is_empty() {
                let (noun, verb) =
                    if missing.len() == 1 { ("call", "has") } else { ("calls", "have") };
                return Outcome::fail(
                    Reason::CostNotRecorded,
                    format!(
                        "model {noun} {} {verb} no recorded cost; max_cost needs the cost of \
                         every model call",
                        list_positions(&missing)
                    ),
                    vec![],
                );
            }
        }
        let input: u128 = calls.iter().map(|m| u128::from(m.input_tokens)).sum();
        let output: u128 = calls.iter().map(|m| u128::from(m.output_tokens)).sum();
        let mut over = Vec::new();
        for (figure, sum, max) in [
            ("input tokens", input, self.input_tokens),
            ("output tokens", output, self.output_tokens),
            ("total tokens", input + output, self.total_tokens),
        ] {
            if let Some(max) = max.filter(|&max| sum > u128::from(max)) {
                over.push(format!("{figure} {} > {}", grouped(sum), grouped(max)));
            }
        }
        if let Some(max) = self.cost {
            let cost: f64 = calls.iter().filter_map(|m| m.cost).sum();
            if cost > max {
                over.push(format!("cost {cost} > {max}"));
            }
        }
        let n = calls.len();
        if let Some(max) = self.model_calls.filter(|&max| n as u64 > u64::from(max)) {
            over.push(format!("model calls {} > {}", grouped(n as u64), grouped(max)));
        }
        if over.is_empty() {
            return Outcome::pass(vec![]);
        }
        let noun = if n == 1 { "model call" } else { "model calls" };
        Outcome::fail(
            Reason::OverBudget,
            format!("{} over {} {noun}", over.join(", "), grouped(n as u64)),
            vec![],
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run_trace};
    use crate::proto::v1::{ModelCall, Trace};

    fn usage(input: u64, output: u64, cost: Option<f64>) -> ModelCall {
        ModelCall { input_tokens: input, output_tokens: output, cost, ..ModelCall::default() }
    }

    fn trace(model_calls: Vec<ModelCall>) -> Trace {
        Trace { model_calls, ..Trace::default() }
    }

    #[test]
    fn token_bounds_name_each_exceeded_figure() {
        let mut calls = vec![usage(3_000, 230, Some(0.5)); 11];
        calls.push(usage(5_000, 3_000, Some(0.25)));
        let t = trace(calls);
        let r = run_trace(r#"{"budget":{"max_total_tokens":"40000"}}"#, &t);
        assert_eq!((r.name.as_str(), r.reason_code.as_str()), ("budget", "OVER_BUDGET"));
        assert_eq!(r.reason, "total tokens 43,530 > 40,000 over 12 model calls");
        assert!(r.positions.is_empty());
        let r = run_trace(
            r#"{"budget":{"max_input_tokens":"38000","max_output_tokens":"5530",
                "max_cost":5.75,"max_model_calls":11}}"#,
            &t,
        );
        // Every sum exactly at its bound holds; only the count is over.
        assert_eq!(r.reason, "model calls 12 > 11 over 12 model calls");
    }

    #[test]
    fn within_every_bound_passes() {
        let t = trace(vec![usage(10, 5, Some(0.5)), usage(20, 5, Some(0.25))]);
        let r = run_trace(
            r#"{"budget":{"max_input_tokens":"30","max_output_tokens":"10","max_total_tokens":"40",
                "max_cost":0.75,"max_model_calls":2}}"#,
            &t,
        );
        assert_eq!(
            (r.reason_code.as_str(), r.score.to_bits(), r.severity),
            ("", 1f64.to_bits(), 1)
        );
        // No model calls: every sum is 0.
        let r = run_trace(r#"{"budget":{"max_total_tokens":"0","max_cost":0}}"#, &trace(vec![]));
        assert_eq!(r.reason_code, "");
    }

    #[test]
    fn several_figures_and_no_overflow() {
        let t = trace(vec![usage(u64::MAX, u64::MAX, Some(1.5)), usage(u64::MAX, 1, Some(1.0))]);
        let r = run_trace(
            r#"{"budget":{"max_input_tokens":"18446744073709551615","max_cost":2,"max_model_calls":1}}"#,
            &t,
        );
        assert_eq!(r.reason_code, "OVER_BUDGET");
        assert_eq!(
            r.reason,
            "input tokens 36,893,488,147,419,103,230 > 18,446,744,073,709,551,615, cost 2.5 > 2, \
             model calls 2 > 1 over 2 model calls"
        );
    }

    #[test]
    fn cost_not_recorded() {
        let t = trace(vec![usage(1, 1, Some(0.1)), usage(1, 1, None), usage(1, 1, Some(f64::NAN))]);
        let r = run_trace(r#"{"budget":{"max_cost":100}}"#, &t);
        assert_eq!(r.reason_code, "COST_NOT_RECORDED");
        assert_eq!(
            r.reason,
            "model calls 2 and 3 have no recorded cost; max_cost needs the cost of every model call"
        );
        // Without a cost bound an absent cost does not matter.
        let r = run_trace(r#"{"budget":{"max_total_tokens":"6"}}"#, &t);
        assert_eq!(r.reason_code, "");
        let r = run_trace(r#"{"budget":{"max_cost":1}}"#, &trace(vec![usage(1, 1, None)]));
        assert_eq!(
            r.reason,
            "model call 1 has no recorded cost; max_cost needs the cost of every model call"
        );
    }

    #[test]
    fn invalid() {
        assert_eq!(rejected_field(r#"{"budget":{}}"#), "assertions[0].budget");
        for bad in ["-1", r#""NaN""#, r#""Infinity""#, r#""-Infinity""#] {
            let a = format!(r#"{{"budget":{{"max_cost":{bad}}}}}"#);
            assert_eq!(rejected_field(&a), "assertions[0].budget.max_cost", "{a}");
        }
    }
}
