//! `expression`: a CEL expression over `calls`, `answer` and `metadata` evaluates to true (§9.23).
use super::{Check, Outcome};
use crate::error::Reason;
use crate::expr::{Bindings, ExprCall, ExprModelCall, Expression};
use crate::proto::v1::Expression as ExpressionMsg;
use crate::suite::Compiler;
use crate::trace::{Args, TraceView};

pub struct ExpressionCheck {
    source: String,
    program: Expression,
}

impl std::fmt::Debug for ExpressionCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpressionCheck").field("source", &self.source).finish_non_exhaustive()
    }
}

impl ExpressionCheck {
    pub fn compile(m: &ExpressionMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        if m.expr.trim().is_empty() {
            c.problem(format!("{path}.expr"), "expr is required");
            return None;
        }
        match Expression::compile(&m.expr, c.limits.expression_cost_limit) {
            Ok(program) => Some(ExpressionCheck { source: m.expr.clone(), program }),
            Err(e) => {
                c.problem(format!("{path}.expr"), e);
                None
            }
        }
    }
}

impl Check for ExpressionCheck {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let calls: Vec<ExprCall<'_>> = t
            .calls()
            .iter()
            .enumerate()
            .map(|(i, c)| ExprCall {
                name: c.name,
                args: match t.args(i) {
                    Args::Parsed(v) => Some(v),
                    _ => None,
                },
                result: c.result.unwrap_or(""),
                error: c.error,
                position: t.pos(i),
                ..ExprCall::default()
            })
            .collect();
        // The (scoped) model calls, so `model_calls` and `usage` see what is in scope (§14).
        let model_calls: Vec<ExprModelCall<'_>> = t
            .model_calls()
            .iter()
            .map(|m| ExprModelCall {
                model: m.model,
                input_tokens: m.input_tokens,
                output_tokens: m.output_tokens,
                cost: m.cost,
                turn: m.turn,
                agent: m.agent,
                start_time_unix_nano: m.start_time_unix_nano,
                end_time_unix_nano: m.end_time_unix_nano,
            })
            .collect();
        let bindings = Bindings {
            calls: &calls,
            model_calls: &model_calls,
            answer: t.final_answer(),
            metadata: t.metadata(),
            max_json_depth: t.max_depth(),
        };
        match self.program.evaluate(&bindings, t.work()) {
            Ok(true) => Outcome::pass(vec![]),
            Ok(false) => Outcome::fail(
                Reason::ExpressionFalse,
                format!("the expression `{}` is false", self.source),
                vec![],
            ),
            Err(e) => Outcome::fail(
                Reason::ExpressionError,
                format!("the expression `{}` could not be evaluated: {e}", self.source),
                vec![],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::{rejected_field, run};

    #[test]
    fn outcomes() {
        let calls = [("f", Some(r#"{"n":2}"#)), ("g", None)];
        let e = |x: &str| format!(r#"{{"expression":{{"expr":{x:?}}}}}"#);
        assert_eq!(
            run(&e("calls[0].args.n == 2 && calls[1].args == null"), &calls).reason_code,
            ""
        );
        assert_eq!(run(&e("size(calls) == 3"), &calls).reason_code, "EXPRESSION_FALSE");
        assert_eq!(run(&e("calls[5].name"), &calls).reason_code, "EXPRESSION_ERROR");
        let negated = r#"{"negate":true,"expression":{"expr":"calls[5].name == 'x'"}}"#;
        assert_eq!(run(negated, &calls).reason_code, "EXPRESSION_ERROR");
        assert_eq!(rejected_field(&e("calls.size() ==")), "assertions[0].expression.expr");
    }
}
