//! CEL expressions over a trace (`calls`, `answer`, `metadata`), compiled once per suite.
//! Owned by the canonical-text/regex/CEL work; this is the interface the assertion calls.
use std::collections::HashMap;

use crate::json::Value;

/// One call as an expression sees it.
pub struct ExprCall<'a> {
    pub name: &'a str,
    /// Parsed arguments; `None` when not recorded or not valid JSON (CEL `null`).
    pub args: Option<&'a Value>,
    /// Raw result text (`""` when absent).
    pub result: &'a str,
    pub error: bool,
    /// 1-based position.
    pub position: u32,
}

/// A compiled CEL program.
pub struct Expression {
    _private: (),
}

impl Expression {
    /// Parses and checks `source`; the error is a message for `expression.expr`.
    pub fn compile(source: &str) -> Result<Expression, String> {
        let _ = source;
        unimplemented!("CEL compile")
    }

    /// Evaluates to a bool; anything else (or an evaluation error) is `Err` with a message.
    pub fn evaluate(
        &self,
        calls: &[ExprCall<'_>],
        answer: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<bool, String> {
        let _ = (calls, answer, metadata);
        unimplemented!("CEL evaluate")
    }
}
