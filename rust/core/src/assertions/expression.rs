//! `expression`: a CEL expression over `calls`, `answer` and `metadata` evaluates to true (§9.23).
use super::{Check, Outcome};
use crate::error::Reason;
use crate::expr::{Bindings, ExprCall, Expression};
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
            .map(|(i, c)| {
                let meta = t.call_meta(i);
                // Arguments a matcher already parsed are reused; others are parsed only if
                // the expression reads them.
                let (args, args_text) = match t.parsed_args(i) {
                    Some(Args::Parsed(v)) => (Some(v), None),
                    Some(_) => (None, None),
                    None => (None, c.arguments_json),
                };
                ExprCall {
                    name: c.name,
                    args,
                    args_text,
                    result: c.result.unwrap_or(""),
                    error: c.error,
                    // The original position, also under a scope (§11).
                    position: t.pos(i),
                    duration_ns: meta.duration_ns(),
                    turn: meta.turn,
                    agent: meta.agent,
                    server: meta.server,
                }
            })
            .collect();
        let bindings = Bindings {
            calls: &calls,
            // Scoped model calls under a scope, so `model_calls` and `usage` see what is in it.
            model_calls: t.model_calls(),
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
    use crate::assertions::testing::{rejected_field, run, run_trace};
    use crate::proto::v1::{ModelCall, ToolCall, Trace};

    /// Every §14 variable a suite binds from the trace's v2 fields.
    #[test]
    fn v2_variables_are_bound_from_the_trace() {
        let trace = Trace {
            calls: vec![
                ToolCall {
                    name: "get_order".to_owned(),
                    result: Some(r#"{"charged_times": 2}"#.to_owned()),
                    start_time_unix_nano: 1_000_000_000,
                    end_time_unix_nano: 3_350_000_000,
                    turn: 2,
                    agent: "triage/billing".to_owned(),
                    server: "orders-mcp".to_owned(),
                    ..ToolCall::default()
                },
                // Timing not recorded (end before start), turn 0 read as 1.
                ToolCall {
                    name: "log".to_owned(),
                    start_time_unix_nano: 5,
                    end_time_unix_nano: 4,
                    ..ToolCall::default()
                },
            ],
            model_calls: vec![
                ModelCall {
                    model: "big".to_owned(),
                    input_tokens: 30_000,
                    output_tokens: 1_000,
                    cost: Some(0.5),
                    turn: 1,
                    agent: "triage".to_owned(),
                    ..ModelCall::default()
                },
                ModelCall { input_tokens: 12_000, cost: Some(0.25), ..ModelCall::default() },
            ],
            ..Trace::default()
        };
        let e = |x: &str| format!(r#"{{"expression":{{"expr":{x:?}}}}}"#);
        for src in [
            "calls[0].duration_ms == 2350.0 && calls[1].duration_ms == null",
            "calls[0].turn == 2 && calls[1].turn == 1",
            "calls[0].agent == 'triage/billing' && calls[1].agent == ''",
            "calls[0].server == 'orders-mcp' && calls[1].server == ''",
            "calls[0].result_json.charged_times == 2 && calls[1].result_json == null",
            "model_calls.size() == 2 && model_calls[0].model == 'big' && model_calls[1].turn == 1",
            "model_calls[0].agent == 'triage' && model_calls[1].cost == 0.25",
            "usage.total_tokens == 43000 && usage.input_tokens == 42000 && usage.cost == 0.75",
        ] {
            assert_eq!(run_trace(&e(src), &trace).reason_code, "", "{src}");
        }
        // Each variable really reads the trace: a wrong expectation fails.
        for src in [
            "calls[0].duration_ms == 2351.0",
            "calls[0].turn == 1",
            "calls[0].server == ''",
            "usage.total_tokens == 0",
        ] {
            assert_eq!(run_trace(&e(src), &trace).reason_code, "EXPRESSION_FALSE", "{src}");
        }
    }

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
