//! The issue's target workload, shaped like `bench/workloads.py`: 20-call traces of five tools
//! with ~200-byte nested arguments, and the 5-assertion suite (`tool_count` glob, SUBSET and
//! nested PARTIAL `tool_call_args`, a 3-step `IN_ORDER` `tool_sequence`, `step_count`). Seeded.
#![allow(dead_code)]
use trajgrade_core::proto::v1::{
    assertion, Assertion, Scope, Suite, ToolCall, Trace, TrajectoryMatch, TrajectoryMode,
};

pub const SUITE_JSON: &str = r#"{"name":"bench","assertions":[
 {"tool_count":{"glob":"get_*","min":1,"max":20}},
 {"tool_call_args":{"tool":"issue_refund","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{\"currency\": \"USD\", \"amount_cents\": 5000}"}}},
 {"tool_call_args":{"tool":"get_order","match":{"mode":"MATCH_MODE_PARTIAL","args_json":"{\"order\": {\"customer\": {\"tier\": \"gold\"}, \"items\": [{}, {}]}}"}}},
 {"tool_sequence":{"steps":[{"tool":"search_orders"},{"tool":"check_refund_eligibility"},{"tool":"issue_refund"}],"mode":"SEQUENCE_MODE_IN_ORDER"}},
 {"step_count":{"max":25}}]}"#;

pub fn suite() -> Suite {
    serde_json::from_str(SUITE_JSON).expect("the bench suite decodes")
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const TOOLS: [&str; 5] =
    ["search_orders", "get_order", "check_refund_eligibility", "issue_refund", "send_email"];

/// `n` traces; the same `seed` gives the same traces.
pub fn traces(n: usize, seed: u64) -> Vec<Trace> {
    let mut r = Rng(seed);
    (0..n)
        .map(|i| {
            let calls = (0..20)
                .map(|_| {
                    let tool = r.pick(&TOOLS);
                    let mut amount = r.pick(&["5000", "500", "5000.0", "2500"]);
                    if tool == "issue_refund" && r.below(2) == 0 {
                        amount = "5000";
                    }
                    let head = format!(
                        r#"{{"order": {{"id": "ord-{:06}", "customer": {{"tier": "{}", "name": "{}"}}, "items": [{{"sku": "s{}", "qty": {}}}, {{"sku": "s{}", "qty": {}}}]}}, "currency": "{}", "amount_cents": {amount}, "note": ""#,
                        r.below(1_000_000),
                        r.pick(&["gold", "silver"]),
                        r.pick(&["Zoë", "Ana"]),
                        r.below(100),
                        1 + r.below(3),
                        r.below(100),
                        1 + r.below(3),
                        r.pick(&["USD", "USD", "EUR"]),
                    );
                    let pad = 200usize.saturating_sub(head.len() + 2);
                    ToolCall {
                        name: tool.to_owned(),
                        arguments_json: Some(format!("{head}{}\"}}", "x".repeat(pad))),
                        result: Some(r#"{"ok": true, "total": 50.00}"#.to_owned()),
                        ..ToolCall::default()
                    }
                })
                .collect();
            Trace {
                id: format!("bench-{i}"),
                calls,
                final_answer: "Refunded 50.00 USD.".to_owned(),
                ..Trace::default()
            }
        })
        .collect()
}

/// Spreads a trace's calls evenly over turns 1..=`turns`, in order.
pub fn spread_over_turns(t: &mut Trace, turns: usize) {
    let per_turn = t.calls.len().div_ceil(turns).max(1);
    for (i, c) in t.calls.iter_mut().enumerate() {
        c.turn = u32::try_from(i / per_turn + 1).expect("few turns");
    }
}

/// One SUPERSET `trajectory_match` of 10 name-only reference calls, two per turn over turns
/// 1-5; with `per_turn`, graded per turn (SPEC §11).
pub fn trajectory_suite(per_turn: bool) -> Suite {
    let reference = (0..10)
        .map(|j| ToolCall {
            name: TOOLS[j % TOOLS.len()].to_owned(),
            turn: u32::try_from(j / 2 + 1).expect("few turns"),
            ..ToolCall::default()
        })
        .collect();
    let kind = assertion::Kind::TrajectoryMatch(TrajectoryMatch {
        reference,
        mode: TrajectoryMode::Superset as i32,
        ..TrajectoryMatch::default()
    });
    let scope = per_turn.then(|| Scope { per_turn: true, ..Scope::default() });
    Suite {
        name: "bench-trajectory".to_owned(),
        assertions: vec![Assertion { kind: Some(kind), scope, ..Assertion::default() }],
    }
}
