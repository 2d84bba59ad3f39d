//! What the expression tests share: a small deterministic generator, and the model calls,
//! answer and metadata their hand-written traces carry beside their calls.
use super::{Bindings, ExprCall};
use crate::trace::ModelCall;

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("small")
    }

    /// One of `from`.
    pub fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[self.below(from.len())]
    }
}

/// Binds `calls` with two model calls (cost recorded and not, a token count at `u64::MAX`,
/// turn, agent and times set and not), an answer, and metadata with a repeated key.
pub fn with_bindings<T>(calls: &[ExprCall<'_>], f: impl FnOnce(&Bindings<'_>) -> T) -> T {
    let model_calls = [
        ModelCall {
            model: "big",
            input_tokens: 30_000,
            output_tokens: 10,
            cost: Some(0.25),
            agent: "triage",
            ..ModelCall::default()
        },
        ModelCall {
            model: "small",
            input_tokens: u64::MAX,
            output_tokens: 2_000,
            cost: None,
            turn: 2,
            start_time_unix_nano: 5,
            end_time_unix_nano: 9,
            ..ModelCall::default()
        },
    ];
    let b = Bindings {
        calls,
        model_calls: &model_calls,
        answer: "Your refund is on its way.",
        metadata: &[("env", "prod"), ("region", "eu"), ("env", "dev")],
        max_json_depth: 8,
    };
    f(&b)
}
