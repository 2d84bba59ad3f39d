//! The lazy binding against the eager one it replaced: every expression here must give the
//! same outcome, the same error text and spend the same cost units through both.
use super::test_support::{with_bindings, Rng};
use super::{Bindings, ExprCall, Expression};
use crate::json::{parse, Value};
use crate::work::Work;

/// Evaluates `src` through both bindings and asserts they agree; answers the outcome.
fn same(src: &str, b: &Bindings<'_>) -> Result<bool, String> {
    let e = match Expression::compile(src, 5_000) {
        Ok(e) => e,
        Err(err) => panic!("{src}: {err}"),
    };
    let (lazy_work, eager_work) = (Work::new(u64::MAX, None), Work::new(u64::MAX, None));
    let lazy = e.evaluate(b, &lazy_work);
    let eager = e.evaluate_eager(b, &eager_work);
    assert_eq!(lazy, eager, "{src}");
    assert_eq!(lazy_work.used(), eager_work.used(), "cost of {src}");
    lazy
}

const ARGS: [&str; 4] = [
    r#"{"order_id":"A-7","amount":5000,"r":1.5,"tags":["x","y"],"nested":{"k":[1,{"z":null}]}}"#,
    r#"{"order_id":"B-1","amount":5000.0,"s":"\ud800 lone","big":1e400,"neg":-0.0}"#,
    "",
    "not json",
];

/// Calls covering every field: `args` given parsed, as text (valid, empty, invalid) and
/// absent; results that are JSON, not JSON and empty; timings recorded or not.
fn with_calls<T>(f: impl FnOnce(&Bindings<'_>) -> T) -> T {
    let parsed = parse(ARGS[0], 128).expect("valid");
    let calls = [
        ExprCall {
            name: "get_order",
            args: Some(&parsed),
            result: r#"{"charged_times": 2, "items": [{"sku": "x"}]}"#,
            position: 1,
            duration_ns: Some(2_350_000_000),
            agent: "triage/billing",
            server: "orders",
            ..ExprCall::default()
        },
        ExprCall {
            name: "issue_refund",
            args_text: Some(ARGS[1]),
            result: "not json",
            error: true,
            position: 3,
            duration_ns: Some(0),
            turn: 2,
            ..ExprCall::default()
        },
        ExprCall {
            name: "log",
            args_text: Some(ARGS[2]),
            position: 4,
            turn: 3,
            ..ExprCall::default()
        },
        ExprCall {
            name: "get_order",
            args_text: Some(ARGS[3]),
            result: "[[[[[[[[[[1]]]]]]]]]]",
            position: 7,
            ..ExprCall::default()
        },
        ExprCall { name: "noop", position: 9, ..ExprCall::default() },
    ];
    with_bindings(&calls, f)
}

/// True expressions reading every call field, `args`, map equality, iteration, `has()`,
/// `size()`.
const TRUE: &[&str] = &[
    // Each field, by selection, index and has().
    "calls[0].name == 'get_order' && calls[1].error && !calls[0].error",
    "calls[0].result.startsWith('{') && calls[4].result == ''",
    "calls[0].result_json.charged_times == 2 && calls[1].result_json == null",
    "calls[3].result_json == null && calls[2].result_json == null",
    "calls[0].position == 1 && calls[1].position == 3 && type(calls[0].position) == int",
    "calls[0].duration_ms == 2350.0 && calls[1].duration_ms == 0.0 && calls[2].duration_ms == null",
    "calls[0].turn == 1 && calls[1].turn == 2 && calls[4].turn == 1",
    "calls[0].agent == 'triage/billing' && calls[0].server == 'orders' && calls[1].agent == ''",
    "calls[0]['name'] == 'get_order' && calls[1]['args'].order_id == 'B-1'",
    "has(calls[0].name) && has(calls[0].result_json) && !has(calls[0].nope)",
    "has(calls[0].args.order_id) && !has(calls[0].args.nope) && has(calls[1].args.big)",
    "'name' in calls[0] && !('nope' in calls[0]) && !(1 in calls[0])",
    "size(calls[0]) == 10 && calls[1].size() == 10 && size(usage) == 4",
    // Arguments: given, parsed from text, empty text, invalid text, absent.
    "calls[0].args.amount == 5000 && calls[0].args.r == 1.5 && calls[0].args.tags[1] == 'y'",
    "calls[0].args.nested.k[1].z == null && size(calls[0].args.nested.k) == 2",
    "calls[1].args.amount == 5000 && type(calls[1].args.amount) == int",
    "calls[1].args.s.startsWith('\\uFFFD') && calls[1].args.big > 1.0e308",
    "calls[2].args == {} && calls[3].args == null && calls[4].args == null",
    "calls.all(c, c.args == null || size(c.args) >= 0)",
    "calls.filter(c, c.args != null).size() == 3",
    "calls.map(c, c.args).size() == 5",
    "calls.exists(c, c.args.order_id == 'B-1')",
    "calls[0].args == calls[0].args && calls[0].args != calls[1].args",
    "calls[0].args.nested == {'k': [1, {'z': null}]}",
    // Equality of records, with records and with literal maps.
    "calls[0] == calls[0] && calls[0] != calls[3] && calls[2] == calls[2]",
    "calls[1] == calls[1] && model_calls[0] == model_calls[0] && usage == usage",
    "calls[4] == {'name': 'noop', 'args': null, 'result': '', 'result_json': null, \
     'error': false, 'position': 9, 'duration_ms': null, 'turn': 1, 'agent': '', 'server': ''}",
    "{'name': 'noop', 'args': null, 'result': '', 'result_json': null, 'error': false, \
     'position': 9, 'duration_ms': null, 'turn': 1, 'agent': '', 'server': ''} == calls[4]",
    "{'name': 'noop'} != calls[4] && calls[4] != {'name': 'noop'} && calls[4] != 'noop'",
    "usage == {'input_tokens': usage.input_tokens, 'output_tokens': 2010, \
     'total_tokens': usage.total_tokens, 'cost': null}",
    "calls == calls && calls != [] && calls[0] in calls && !(calls[0] in [calls[1]])",
    "calls.exists(c, c == calls[1]) && calls.exists_one(c, c == calls[0])",
    "calls.map(c, c)[2] == calls[2] && calls.filter(c, c.error)[0] == calls[1]",
    "[calls[0], 1][0] == calls[0] && dyn(calls[3]).position == 7",
    "(calls + calls).size() == 10 && (calls + calls)[5] == calls[0]",
    "optional.of(calls[0]).value().name == 'get_order' && calls[0].?name == optional.of('get_order')",
    "calls[?0].hasValue() && !calls[?9].hasValue() && calls[0].?nope == optional.none()",
    "type(calls[0]) == map && type(usage) == map && type(calls) == list",
    // Iterating over a record's keys: in the built map's order, which varies between runs, so
    // only loops that visit every key (the cost of one that stops early varies too).
    "calls[0].all(k, k != '') && !calls[0].exists(k, k == 'nope')",
    "calls[0].map(k, k).size() == 10 && calls[0].filter(k, k.startsWith('r')).size() == 2",
    "usage.all(k, k.endsWith('tokens') || k == 'cost') && !model_calls[1].exists(k, k == '')",
    "calls[0].exists_one(k, calls[0][k] == 'orders')",
    // Lists of records.
    "size(calls) == 5 && calls.size() == 5 && calls.filter(c, c.error).size() == 1",
    "calls.filter(c, c.turn > 1)[0].name == 'issue_refund' && calls[size(calls) - 1].name == 'noop'",
    "calls.all(c, calls.exists(d, d.position == c.position))",
    "calls.map(c, c.name).filter(n, n == 'get_order').size() == 2",
    "calls.all(c, c.duration_ms == null || c.duration_ms < 5000.0) && usage.total_tokens > 1",
    "calls.all(c, c.name != '') && size(calls) < 100",
    // Model calls and usage.
    "model_calls[0].model == 'big' && model_calls[0].turn == 1 && model_calls[1].turn == 2",
    "type(model_calls[1].input_tokens) == double && model_calls[1].cost == null",
    "model_calls[1].end_time_unix_nano - model_calls[1].start_time_unix_nano == 4",
    "type(usage.input_tokens) == double && usage.output_tokens == 2010 && usage.cost == null",
    "model_calls.all(m, m.agent == '' || m.agent == 'triage')",
    // Other variables.
    "answer.contains('refund') && metadata.env == 'dev' && metadata.size() == 2",
];

/// Expressions failing in each way a record can be part of an error, or not a bool.
const FAILING: &[&str] = &[
    "calls.all(c, c.args.order_id != '')",
    "calls[0].nope == 1",
    "calls[0].args.nope == 1",
    "calls[3].args.x == 1",
    "calls[9].name == 'x'",
    "calls[1.5].name == 'x'",
    "calls[-1].name == 'x'",
    "calls['a'].name == 'x'",
    "calls[0][1] == 'x'",
    "calls[0][1.5] == 'x'",
    "calls[0][null] == 'x'",
    "calls[0][[1]] == 'x'",
    "calls[0] + 1 == 2",
    "1 + calls[0] == 2",
    "calls[0] - calls[1] == 2",
    "calls[0] < calls[1]",
    "calls[0] > 1.5",
    "-calls[0] == 1",
    "!calls[0]",
    "calls[0] && true",
    "calls[0] || false",
    "{calls[0]: 1}.size() == 1",
    "calls[0] in {'a': 1}",
    "calls[0] in calls[1]",
    "string(calls[0]) == ''",
    "int(calls[0].args) == 1",
    "calls[0].startsWith('a')",
    "calls[0].args.amount / 0 == 1",
    "model_calls[0].input_tokens + 9223372036854775807 > 0",
    "calls.all(c, c.args.amount > 1)",
    "calls.exists(c, c.nope)",
    "calls.map(c, c.nope).size() == 1",
    "calls.filter(c, c.args.amount > 0).size() == 2",
    // Stopped by the cost limit at the same unit.
    "calls.all(a, calls.all(b, calls.all(c, calls.all(d, \
     a.position + b.position + c.position + d.position + 1 + 2 + 3 + 4 + 5 > 0))))",
    "calls.all(a, calls.all(b, calls.all(c, calls.all(d, \
     a == b || a.args == b.args || c.name + d.name != '' && 1 + 2 + 3 + 4 + 5 > 0))))",
    // Results that are not bools.
    "calls[0]",
    "calls",
    "calls[0].args",
    "calls.map(c, c.name)",
    "calls.filter(c, c.error)",
    "[calls[0].name, calls[0].position]",
    "usage",
    "model_calls",
    "calls[0].duration_ms",
    // (Not `optional.of(calls[0])`: its message shows the map in `HashMap` order, as it did.)
    "optional.of(calls[0]).value()",
];

#[test]
fn lazy_binding_reads_every_field_right() {
    with_calls(|b| {
        for src in TRUE {
            assert_eq!(same(src, b), Ok(true), "{src}");
        }
    });
}

#[test]
fn lazy_binding_fails_with_the_same_errors() {
    with_calls(|b| {
        for src in FAILING {
            assert!(same(src, b).is_err(), "{src}");
        }
    });
}

#[test]
fn lazy_binding_matches_without_model_calls_or_calls() {
    let b = Bindings { max_json_depth: 8, ..Bindings::default() };
    for src in [
        "calls == [] && model_calls == [] && usage.cost == 0.0 && usage.total_tokens == 0",
        "usage == {'input_tokens': 0, 'output_tokens': 0, 'total_tokens': 0, 'cost': 0.0}",
        "size(calls) == 0 && calls.all(c, c.nope) && metadata == {} && answer == ''",
        "calls[0].name == 'x'",
    ] {
        same(src, &b).ok();
    }
}

/// Random JSON arguments.
impl Rng {
    fn argument_json(&mut self, depth: u32) -> String {
        let keys = ["a", "b", "k", "order_id", "amount", ""];
        match self.below(if depth == 0 { 5 } else { 7 }) {
            0 => "null".to_owned(),
            1 => ["true", "false"][self.below(2)].to_owned(),
            2 => ["0", "-1", "5000", "1.5", "1e2", "9223372036854775808", "-0.0", "2.5e-3"]
                [self.below(8)]
            .to_owned(),
            3 => {
                ["\"\"", "\"x\"", "\"A-7\"", "\"\\u00e9\"", "\"\\ud800\""][self.below(5)].to_owned()
            }
            4 => format!("\"{}\"", keys[self.below(6)]),
            5 => {
                let n = self.below(4);
                let items: Vec<String> = (0..n).map(|_| self.argument_json(depth - 1)).collect();
                format!("[{}]", items.join(","))
            }
            _ => {
                let n = self.below(5);
                let fields: Vec<String> = (0..n)
                    .map(|_| {
                        let k = keys[self.below(6)];
                        format!("\"{k}\":{}", self.argument_json(depth - 1))
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            }
        }
    }
}

#[test]
fn random_arguments_read_the_same_through_both_bindings() {
    let exprs = [
        "calls.all(c, has(c.args.a) ? c.args.a == c.args.a : true)",
        "calls.exists(c, c.args.amount > 1)",
        "calls.all(c, c.args == null || size(c.args) < 3)",
        "calls[0].args == calls[1].args",
        "calls[0].args.k == calls[1].args.k",
        "calls.filter(c, c.args.a == null).size() > 0",
        "calls.map(c, c.args.b).size() == 3",
        "calls.exists(c, 'order_id' in c.args)",
        "calls.all(c, c.args.k[0] == 1 || true)",
        "calls[2].args.a.b == 1",
        "calls.exists_one(c, c == calls[1])",
        "calls[0] == calls[1]",
        "calls[1].args",
        "calls[0].args.amount + 1 > 0",
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..150 {
        let texts: Vec<String> = (0..3)
            .map(|_| if rng.below(6) == 0 { "{\"a\":".to_owned() } else { rng.argument_json(3) })
            .collect();
        let calls: Vec<ExprCall<'_>> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| ExprCall {
                name: "f",
                args_text: Some(t),
                position: u32::try_from(i).expect("small") + 1,
                ..ExprCall::default()
            })
            .collect();
        // The same arguments given parsed, as a matcher leaves them.
        let values: Vec<Option<Value>> = texts.iter().map(|t| parse(t, 3).ok()).collect();
        let given: Vec<ExprCall<'_>> = calls
            .iter()
            .zip(&values)
            .map(|(c, v)| ExprCall { args: v.as_ref(), args_text: None, ..*c })
            .collect();
        for src in exprs {
            let b = Bindings { calls: &calls, max_json_depth: 3, ..Bindings::default() };
            let from_text = same(src, &b);
            let b = Bindings { calls: &given, max_json_depth: 3, ..Bindings::default() };
            assert_eq!(same(src, &b), from_text, "{src} on {texts:?}");
        }
    }
}
