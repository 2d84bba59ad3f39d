//! SPEC §11 scope and `per_turn` through the public API: §16 example 3, agent / server / turn
//! filters, the per-turn answer and model calls, original positions, negation per turn,
//! `trajectory_match` per turn, and the work bounds.
//!
//! Scores are compared exactly: they are rounded to 4 decimals, and that rounding is the contract.
#![allow(clippy::float_cmp)]
use serde_json::{json, Value as Json};
use trajgrade_core::proto::v1::{AssertionResult, AssertionStatus, GradeResult, Suite, Trace};
use trajgrade_core::trace::TraceView;
use trajgrade_core::work::Stop;
use trajgrade_core::{CompiledSuite, Limits};

fn suite(assertions: &Json) -> CompiledSuite {
    let suite: Suite =
        serde_json::from_value(json!({ "assertions": assertions })).expect("a suite");
    CompiledSuite::compile(&suite, &Limits::default()).expect("compiles")
}

fn trace(t: &Json) -> Trace {
    serde_json::from_value(t.clone()).expect("a trace")
}

fn grade(assertions: &Json, t: &Json) -> GradeResult {
    suite(assertions).grade(&trace(t), &Limits::default()).expect("graded")
}

/// The one result of a one-assertion suite.
fn one(assertion: &Json, t: &Json) -> AssertionResult {
    grade(&json!([assertion]), t).results.remove(0)
}

fn rejected_field(assertion: &Json) -> String {
    let suite: Suite =
        serde_json::from_value(json!({ "assertions": [assertion] })).expect("a suite");
    match CompiledSuite::compile(&suite, &Limits::default()) {
        Ok(_) => panic!("{assertion} should be rejected"),
        Err(e) => e.field().to_owned(),
    }
}

fn call(name: &str, fields: &Json) -> Json {
    let mut c = json!({ "name": name });
    if let (Some(c), Some(f)) = (c.as_object_mut(), fields.as_object()) {
        c.extend(f.clone());
    }
    c
}

#[test]
fn example_3_per_turn_tool_called() {
    // Calls with turns [1, 1, 2]; only turn 1 calls get_order.
    let t = json!({"id": "t", "calls": [
        call("get_order", &json!({"turn": 1})),
        call("reply", &json!({"turn": 1})),
        call("reply", &json!({"turn": 2})),
    ]});
    let g =
        grade(&json!([{"tool_called": {"tool": "get_order"}, "scope": {"per_turn": true}}]), &t);
    let r = &g.results[0];
    assert_eq!(r.status(), AssertionStatus::Fail);
    assert!(r.reason.starts_with("turn 2: "), "{}", r.reason);
    assert_eq!(r.reason_code, "TOOL_NOT_CALLED");
    assert_eq!(r.name, "tool_called:get_order", "scope leaves the name alone");
    assert_eq!(r.score, 0.5);
    assert_eq!(g.mean_score, 0.5);
    assert_eq!(g.score, 0.0);
    assert!(r.positions.is_empty());
}

#[test]
fn per_turn_passing_positions_are_every_turns_in_turn_order() {
    // Turn 2's call comes first in the trace: positions still go turn by turn.
    let t = json!({"calls": [
        call("get_order", &json!({"turn": 2})),
        call("get_order", &json!({"turn": 0})),
        call("x", &json!({"turn": 1})),
    ]});
    let r = one(&json!({"tool_called": {"tool": "get_order"}, "scope": {"per_turn": true}}), &t);
    assert_eq!(
        (r.status(), r.positions.as_slice(), r.score),
        (AssertionStatus::Pass, &[2, 1][..], 1.0)
    );
    // A failing turn gives its own positions: turn 1 has two calls of x beyond max 1.
    let t = json!({"calls": [
        call("x", &json!({"turn": 2})),
        call("x", &json!({"turn": 1})),
        call("x", &json!({"turn": 1})),
    ]});
    let r = one(&json!({"tool_count": {"tool": "x", "max": 1}, "scope": {"per_turn": true}}), &t);
    assert_eq!(r.status(), AssertionStatus::Fail);
    assert_eq!(r.positions, [2, 3]);
    assert!(r.reason.starts_with("turn 1: x was called 2 time(s)"), "{}", r.reason);
    assert_eq!(r.score, 0.5);
}

#[test]
fn turns_run_to_the_highest_of_calls_model_calls_and_turn_texts() {
    let per_turn = json!({"tool_called": {"tool": "a"}, "scope": {"per_turn": true}});
    let score = |t: &Json| one(&per_turn, t).score;
    let calls = json!([call("a", &json!({}))]);
    // One turn: only the calls' (0 reads 1).
    assert_eq!(score(&json!({"calls": calls})), 1.0);
    // A model call in turn 4 adds turns 2-4, all without a call of a.
    assert_eq!(score(&json!({"calls": calls, "model_calls": [{"model": "m", "turn": 4}]})), 0.25);
    // Three turn texts: three turns.
    let turns = json!([{"final_answer": "1"}, {"final_answer": "2"}, {"final_answer": "3"}]);
    assert_eq!(score(&json!({"calls": calls, "turns": turns})), 0.3333);
    // An empty trace still has turn 1.
    let r = one(&per_turn, &json!({}));
    assert_eq!((r.status(), r.score), (AssertionStatus::Fail, 0.0));
    assert!(
        r.reason.starts_with("turn 1: a was never called (0 calls in the scope)"),
        "{}",
        r.reason
    );
}

#[test]
fn empty_turns_fail_tool_called_and_pass_forbidden_tools() {
    let t = json!({"calls": [call("a", &json!({"turn": 1})), call("a", &json!({"turn": 3}))]});
    let r = one(&json!({"tool_called": {"tool": "a"}, "scope": {"per_turn": true}}), &t);
    assert!(r.reason.starts_with("turn 2: "), "{}", r.reason);
    assert_eq!(r.score, 0.6667);
    let r = one(&json!({"forbidden_tools": {"tools": ["b"]}, "scope": {"per_turn": true}}), &t);
    assert_eq!((r.status(), r.score), (AssertionStatus::Pass, 1.0));
}

#[test]
fn negation_applies_to_each_turn() {
    // not: get_order called, per turn. Turn 1 calls it (the negation fails there), turn 2 not.
    let t = json!({"calls": [
        call("get_order", &json!({"turn": 1})),
        call("reply", &json!({"turn": 2})),
    ]});
    let negated =
        json!({"negate": true, "tool_called": {"tool": "get_order"}, "scope": {"per_turn": true}});
    let r = one(&negated, &t);
    assert_eq!(r.status(), AssertionStatus::Fail);
    assert_eq!(r.reason_code, "NEGATED_HELD");
    assert_eq!(r.name, "not:tool_called:get_order");
    assert!(
        r.reason.starts_with("turn 1: tool_called:get_order held but must not (calls 1)"),
        "{}",
        r.reason
    );
    assert_eq!(r.positions, [1]);
    assert_eq!(r.score, 0.5);
    // With get_order in no turn, the negation holds on every turn.
    let t =
        json!({"calls": [call("reply", &json!({"turn": 1})), call("reply", &json!({"turn": 2}))]});
    let r = one(&negated, &t);
    assert_eq!((r.status(), r.score), (AssertionStatus::Pass, 1.0));
}

#[test]
fn agent_glob_sees_sub_agents_not_the_agent_itself() {
    let t = json!({"calls": [
        call("a", &json!({})),
        call("a", &json!({"agent": "triage"})),
        call("a", &json!({"agent": "triage/billing"})),
        call("a", &json!({"agent": "triage/billing/refunds"})),
        call("a", &json!({"agent": "support"})),
    ]});
    let counted = |agent: &str| {
        one(&json!({"tool_count": {"glob": "*", "min": 0}, "scope": {"agent": agent}}), &t)
            .positions
    };
    assert_eq!(counted("triage/*"), [3, 4]);
    assert_eq!(counted("triage"), [2]);
    assert_eq!(counted("triage*"), [2, 3, 4]);
    assert_eq!(counted("Triage"), Vec::<u32>::new(), "case-sensitive");
    assert_eq!(counted("*"), [1, 2, 3, 4, 5], "`*` matches any path, the root's empty one too");
    assert_eq!(counted(""), [1, 2, 3, 4, 5], "empty = no filter");
}

#[test]
fn server_glob_and_original_positions() {
    let t = json!({"calls": [
        call("search", &json!({"server": "web"})),
        call("lookup", &json!({"server": "mcp-crm", "arguments_json": r#"{"id":1}"#})),
        call("search", &json!({"server": "web"})),
        call("refund", &json!({"server": "mcp-pay", "arguments_json": r#"{"amount":500}"#})),
    ]});
    let scoped = |a: Json| {
        let mut a = a;
        a["scope"] = json!({"server": "mcp-*"});
        one(&a, &t)
    };
    let r = scoped(json!({"tool_sequence": {"steps": [{"tool": "lookup"}, {"tool": "refund"}],
        "mode": "SEQUENCE_MODE_EXACT"}}));
    assert_eq!((r.status(), r.positions.as_slice()), (AssertionStatus::Pass, &[2, 4][..]));
    let r = scoped(json!({"allowed_tools": {"tools": ["lookup"]}}));
    assert_eq!(r.positions, [4]);
    assert!(r.reason.contains("refund (call 4)"), "{}", r.reason);
    // The closest call is named by its position in the trace.
    let r = scoped(json!({"tool_call_args": {"tool": "refund",
        "match": {"mode": "MATCH_MODE_SUBSET", "args_json": r#"{"amount":5000}"#}}}));
    assert_eq!(r.positions, [4]);
    assert!(
        r.reason.contains("closest is call 4: $.amount expected 5000, got 500"),
        "{}",
        r.reason
    );
    let r = scoped(
        json!({"trajectory_match": {"reference": [{"name": "lookup"}, {"name": "search"}]}}),
    );
    assert_eq!(r.positions, [4]);
    let r = scoped(json!({"order": {"before": "lookup", "after": "search"}}));
    assert_eq!(r.status(), AssertionStatus::Pass, "the search calls are out of scope");
    let r = scoped(json!({"tool_sequence": {"steps": [{"tool": "refund"}, {"tool": "lookup"}]}}));
    assert_eq!(r.positions, [4]);
    assert!(r.reason.ends_with("step 2 lookup not found after call 4"), "{}", r.reason);
    // no_repeated_calls names the first call of a group by its position too.
    let t = json!({"calls": [
        call("x", &json!({"arguments_json": "{}"})),
        call("y", &json!({"arguments_json": "{}", "server": "s"})),
        call("y", &json!({"arguments_json": "{}", "server": "s"})),
    ]});
    let r = one(&json!({"no_repeated_calls": {}, "scope": {"server": "s"}}), &t);
    assert_eq!(r.positions, [3]);
    assert!(r.reason.contains("arguments of call 2"), "{}", r.reason);
}

#[test]
fn counting_kinds_count_what_is_in_scope() {
    let t = json!({"calls": [
        call("a", &json!({"agent": "x"})),
        call("b", &json!({"agent": "y"})),
        call("c", &json!({"agent": "y"})),
    ]});
    let with = |a: Json, agent: &str| {
        let mut a = a;
        a["scope"] = json!({"agent": agent});
        one(&a, &t).status()
    };
    let step = json!({"step_count": {"max": 1}});
    assert_eq!(with(step.clone(), "x"), AssertionStatus::Pass);
    assert_eq!(with(step, "y"), AssertionStatus::Fail);
    let eff = json!({"efficiency": {"reference_steps": 1, "max_ratio": 1.0}});
    assert_eq!(with(eff.clone(), "x"), AssertionStatus::Pass);
    assert_eq!(with(eff, "*"), AssertionStatus::Fail);
    let r = one(&json!({"step_count": {"max": 1}, "scope": {"agent": "y"}}), &t);
    assert_eq!(r.reason, "the scope has 2 call(s); at most 1 allowed");
}

#[test]
fn a_single_turn_sees_its_calls_and_its_answer() {
    let t = json!({
        "calls": [
            call("lookup", &json!({"turn": 1, "result": "order 77 costs 12.50"})),
            call("lookup", &json!({"turn": 2, "result": "order 88 costs 99.00"})),
        ],
        "turns": [{"final_answer": "It costs 12.50."}, {"final_answer": "It costs 99.00."}],
        "final_answer": "It costs 99.00.",
    });
    let expr = |e: &str, turn: u32| {
        one(&json!({"expression": {"expr": e}, "scope": {"turn": turn}}), &t).status()
    };
    assert_eq!(
        expr("answer == 'It costs 12.50.' && size(calls) == 1 && calls[0].position == 1", 1),
        AssertionStatus::Pass
    );
    assert_eq!(
        expr("answer == 'It costs 99.00.' && calls[0].position == 2", 2),
        AssertionStatus::Pass
    );
    // Turn 3 is not in `turns`: the trace's answer, and no calls.
    assert_eq!(expr("answer == 'It costs 99.00.' && calls == []", 3), AssertionStatus::Pass);
    // Grounding against the turn's answer and the turn's results only.
    let grounding = |turn: u32| {
        one(&json!({"grounding": {"numbers": true}, "scope": {"turn": turn}}), &t).status()
    };
    assert_eq!(grounding(1), AssertionStatus::Pass);
    assert_eq!(grounding(2), AssertionStatus::Pass);
    let t2 = json!({"calls": t["calls"], "turns": [{"final_answer": "It costs 99.00."}]});
    let r = one(&json!({"grounding": {"numbers": true}, "scope": {"turn": 1}}), &t2);
    assert_eq!(r.reason_code, "UNGROUNDED_VALUE", "turn 2's result is out of scope");
    // per_turn grades each turn against its own answer.
    let r = one(&json!({"grounding": {"numbers": true}, "scope": {"per_turn": true}}), &t);
    assert_eq!((r.status(), r.score), (AssertionStatus::Pass, 1.0));
    let swapped = json!({"calls": t["calls"], "turns": [t["turns"][1], t["turns"][0]]});
    let r = one(&json!({"grounding": {"numbers": true}, "scope": {"per_turn": true}}), &swapped);
    assert_eq!((r.status(), r.score), (AssertionStatus::Fail, 0.0));
    assert!(r.reason.starts_with("turn 1: "), "{}", r.reason);
}

#[test]
fn model_calls_are_filtered_by_agent_and_turn_not_server() {
    use AssertionStatus::Pass;
    let t = json!({
        "calls": [call("a", &json!({"agent": "billing", "server": "s1"}))],
        "model_calls": [
            {"model": "big", "input_tokens": 25000, "output_tokens": 5000, "cost": 0.5},
            {"model": "small", "input_tokens": 10000, "output_tokens": 2000, "cost": 0.1,
             "agent": "billing", "turn": 2},
        ],
    });
    let expr = |e: &str, scope: Json| {
        one(&json!({"expression": {"expr": e}, "scope": scope}), &t).status()
    };
    assert_eq!(expr("size(model_calls) == 2 && usage.total_tokens == 42000", json!({})), Pass);
    assert_eq!(
        expr("size(model_calls) == 1 && model_calls[0].model == 'small' && usage.total_tokens == 12000",
            json!({"agent": "billing"})),
        Pass
    );
    // Turn 0 reads as turn 1.
    assert_eq!(
        expr("size(model_calls) == 1 && model_calls[0].model == 'big' && usage.input_tokens == 25000",
            json!({"turn": 1})),
        Pass
    );
    // `server` filters calls, never model calls.
    assert_eq!(expr("calls == [] && size(model_calls) == 2", json!({"server": "other"})), Pass);
    // Per turn: each turn's model calls.
    assert_eq!(
        expr("size(model_calls) == 1 && (usage.total_tokens == 30000 || usage.total_tokens == 12000)",
            json!({"per_turn": true})),
        Pass
    );
}

#[test]
fn scoping_by_an_agent_no_call_has_grades_as_an_empty_trace() {
    let t = json!({"calls": [call("a", &json!({"agent": "x", "arguments_json": "{}"}))],
        "final_answer": "done"});
    let empty = json!({"final_answer": "done"});
    for a in [
        json!({"tool_called": {"tool": "a"}}),
        json!({"step_count": {"min": 1}}),
        json!({"forbidden_tools": {"tools": ["a"]}}),
        json!({"trajectory_match": {"reference": [{"name": "a"}]}}),
        json!({"expression": {"expr": "size(calls) == 0"}}),
    ] {
        let mut scoped = a.clone();
        scoped["scope"] = json!({"agent": "nobody"});
        let (s, e) = (one(&scoped, &t), one(&a, &empty));
        assert_eq!((s.status, s.positions, s.score), (e.status, e.positions, e.score), "{a}");
    }
}

#[test]
fn trajectory_match_per_turn_uses_each_turns_reference() {
    let reference = json!([
        {"name": "lookup", "turn": 1},
        {"name": "refund", "turn": 1},
        {"name": "lookup"},
        {"name": "reply", "turn": 3},
    ]);
    let tm = |mode: &str| json!({"trajectory_match": {"reference": reference, "mode": mode}, "scope": {"per_turn": true}});
    // Turn 1's reference is lookup, refund, lookup (turn 0 counts as 1); turn 2 has no
    // reference call and no call (skipped); turn 3's is reply.
    let t = json!({"calls": [
        call("lookup", &json!({"turn": 1})),
        call("refund", &json!({"turn": 1})),
        call("lookup", &json!({"turn": 1})),
        call("reply", &json!({"turn": 3})),
    ]});
    let r = one(&tm("TRAJECTORY_MODE_STRICT"), &t);
    assert_eq!(
        (r.status(), r.positions.as_slice(), r.score),
        (AssertionStatus::Pass, &[1, 2, 3, 4][..], 1.0)
    );
    // Turn 3 replies twice: it fails, turn 2 stays skipped, turn 1 passes: mean of 2 turns.
    let mut t3 = t.clone();
    t3["calls"].as_array_mut().expect("calls").push(call("reply", &json!({"turn": 3})));
    let r = one(&tm("TRAJECTORY_MODE_STRICT"), &t3);
    assert_eq!(r.status(), AssertionStatus::Fail);
    assert_eq!(r.score, 0.5);
    assert_eq!(r.positions, [5]);
    assert!(
        r.reason.starts_with("turn 3: STRICT: the scope has 2 calls, the reference 1"),
        "{}",
        r.reason
    );
    // A turn with calls and no reference calls is graded (against an empty reference).
    let t2 = json!({"calls": [
        call("lookup", &json!({"turn": 1})), call("refund", &json!({"turn": 1})),
        call("lookup", &json!({"turn": 1})), call("extra", &json!({"turn": 2})),
        call("reply", &json!({"turn": 3})),
    ]});
    let r = one(&tm("TRAJECTORY_MODE_UNORDERED"), &t2);
    assert_eq!(
        (r.status(), r.positions.as_slice(), r.score),
        (AssertionStatus::Fail, &[4][..], 0.6667)
    );
    assert!(
        r.reason
            .starts_with("turn 2: UNORDERED: no distinct reference call matches extra (call 4)"),
        "{}",
        r.reason
    );
    let r = one(&tm("TRAJECTORY_MODE_SUPERSET"), &t2);
    assert_eq!((r.status(), r.score), (AssertionStatus::Pass, 1.0));
    let r = one(&tm("TRAJECTORY_MODE_IN_ORDER"), &t2);
    assert_eq!((r.status(), r.score), (AssertionStatus::Pass, 1.0));
    // Reference numbers in reasons are the suite's: turn 3's reply is reference call 4.
    let t4 = json!({"calls": [
        call("lookup", &json!({"turn": 1})), call("refund", &json!({"turn": 1})),
        call("lookup", &json!({"turn": 1})), call("other", &json!({"turn": 3})),
    ]});
    let r = one(&tm("TRAJECTORY_MODE_SUPERSET"), &t4);
    assert!(
        r.reason.starts_with("turn 3: SUPERSET: no distinct call matches reply (reference call 4)"),
        "{}",
        r.reason
    );
    // The whole trace without per_turn ignores the reference's turns.
    let whole =
        json!({"trajectory_match": {"reference": reference, "mode": "TRAJECTORY_MODE_STRICT"}});
    assert_eq!(one(&whole, &t).status(), AssertionStatus::Pass);
}

#[test]
fn trajectory_match_per_turn_with_every_turn_skipped_passes() {
    // One turn, no calls; the reference is all in turn 2 (beyond the trace's last turn).
    let a = json!({"trajectory_match": {"reference": [{"name": "a", "turn": 2}]}, "scope": {"per_turn": true}});
    let r = one(&a, &json!({}));
    assert_eq!((r.status(), r.score, r.positions.len()), (AssertionStatus::Pass, 1.0, 0));
    // Negated, every turn still skipped: the result passes too (negation is per graded turn).
    let mut negated = a.clone();
    negated["negate"] = json!(true);
    assert_eq!(one(&negated, &json!({})).status(), AssertionStatus::Pass);
}

#[test]
fn invalid_scopes_are_rejected_at_their_field() {
    assert_eq!(
        rejected_field(
            &json!({"tool_called": {"tool": "a"}, "scope": {"turn": 2, "per_turn": true}})
        ),
        "assertions[0].scope"
    );
    assert_eq!(
        rejected_field(&json!({"tool_called": {"tool": "a"}, "scope": {"agent": "[ab"}})),
        "assertions[0].scope.agent"
    );
    assert_eq!(
        rejected_field(&json!({"tool_called": {"tool": "a"}, "scope": {"server": "x\\"}})),
        "assertions[0].scope.server"
    );
    // A scope problem is reported along with the kind's.
    let suite: Suite = serde_json::from_value(json!({"assertions": [
        {"tool_called": {"tool": ""}, "scope": {"agent": "[x"}}]}))
    .expect("a suite");
    let err = CompiledSuite::compile(&suite, &Limits::default()).expect_err("rejected");
    let text = err.to_string();
    assert!(text.contains("scope.agent") && text.contains("tool_called.tool"), "{text}");
}

#[test]
fn a_far_turn_costs_a_few_gradings_not_one_per_turn() {
    // One call in turn 4,000,000,000: the 3,999,999,998 turns between grade alike, once.
    let t = json!({"calls": [
        call("a", &json!({"turn": 1})),
        call("a", &json!({"turn": 4_000_000_000u32})),
    ]});
    let started = std::time::Instant::now();
    let r = one(&json!({"tool_called": {"tool": "a"}, "scope": {"per_turn": true}}), &t);
    assert!(started.elapsed().as_secs() < 5);
    assert!(r.reason.starts_with("turn 2: "), "{}", r.reason);
    // 2 passing turns of 4e9: the mean rounds to 0.
    assert_eq!((r.status(), r.score), (AssertionStatus::Fail, 0.0));
    let r = one(&json!({"tool_count": {"tool": "a", "max": 1}, "scope": {"per_turn": true}}), &t);
    assert_eq!(
        (r.status(), r.score, r.positions.as_slice()),
        (AssertionStatus::Pass, 1.0, &[1, 2][..])
    );
}

#[test]
fn every_turn_spends_from_the_one_work_meter() {
    // 100 turns of one call each. Unscoped, the assertion costs 1 + 100 units; per turn, each
    // turn spends its own units on top, from the same meter.
    let calls: Vec<Json> = (1..=100).map(|k| call("a", &json!({"turn": k}))).collect();
    let t = trace(&json!({"calls": calls}));
    let limits = Limits::default();
    let unscoped = suite(&json!([{"tool_called": {"tool": "a"}}]));
    let per_turn = suite(&json!([{"tool_called": {"tool": "a"}, "scope": {"per_turn": true}}]));
    let limit = 150;
    let view = || TraceView::new(&t, &limits).with_work_limit(limit);
    assert!(unscoped.grade_view(&view()).is_ok());
    assert_eq!(per_turn.grade_view(&view()).err(), Some(Stop::WorkLimit));
    assert!(per_turn.grade_view(&TraceView::new(&t, &limits)).is_ok());
}
