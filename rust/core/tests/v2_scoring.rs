//! SPEC v2 §12 numeric tolerance and `trajectory_score` through the public API: the worked
//! examples 1 and 2 of §16, every `INVALID_ARGUMENT` path of both, and a differential test of
//! `trajectory_score` against brute-force pairings on small random traces.
// Scores are compared exactly: they are 4-decimal values the SPEC pins, byte for byte.
#![allow(clippy::float_cmp)]
use serde_json::{json, Value as Json};
use trajgrade_core::proto::v1::{AssertionResult, AssertionStatus, Suite, Trace};
use trajgrade_core::{CompiledSuite, CoreError, Limits};

fn compile(assertion: &Json) -> Result<CompiledSuite, CoreError> {
    let suite: Suite =
        serde_json::from_value(json!({ "assertions": [assertion] })).expect("a suite");
    CompiledSuite::compile(&suite, &Limits::default())
}

fn trace(calls: &Json) -> Trace {
    serde_json::from_value(json!({"id": "t", "calls": calls})).expect("a trace")
}

fn grade(assertion: &Json, calls: &Json) -> AssertionResult {
    let limits = Limits::default();
    let mut r =
        compile(assertion).expect("compiles").grade(&trace(calls), &limits).expect("graded");
    r.results.remove(0)
}

fn rejected(assertion: &Json) -> (String, String) {
    match compile(assertion) {
        Ok(_) => panic!("{assertion} should be rejected"),
        Err(e) => (e.field().to_owned(), e.to_string()),
    }
}

fn call(name: &str, args: &str) -> Json {
    json!({"name": name, "arguments_json": args})
}

fn tool_args(mode: &str, args: &str, tolerance: &Json) -> Json {
    json!({"tool_call_args": {"tool": "geo", "match": {
        "mode": mode, "args_json": args, "tolerance": tolerance}}})
}

// ---- §16 example 1 --------------------------------------------------------------------------

#[test]
fn example_1_tolerance() {
    let expected = r#"{"lat": 52.52, "lon": 13.405}"#;
    let calls = json!([call("geo", r#"{"lat": 52.5201, "lon": 13.405}"#)]);
    let r = grade(&tool_args("MATCH_MODE_SUBSET", expected, &json!({"abs": 0.001})), &calls);
    assert_eq!((r.status(), r.positions.as_slice()), (AssertionStatus::Pass, &[1][..]));

    let r = grade(&tool_args("MATCH_MODE_SUBSET", expected, &json!({"abs": 0.00001})), &calls);
    assert_eq!((r.status(), r.reason_code.as_str()), (AssertionStatus::Fail, "NO_MATCHING_CALL"));
    assert!(r.reason.ends_with("$.lat expected 52.52, got 52.5201"), "{}", r.reason);

    // A boolean never equals a number, whatever the tolerance.
    let bool_vs_number = json!([call("geo", r#"{"n": 1}"#)]);
    for tolerance in [json!({"abs": 10}), json!({"rel": 1e9}), json!({"abs": "Infinity"})] {
        for mode in ["MATCH_MODE_EXACT", "MATCH_MODE_SUBSET", "MATCH_MODE_PARTIAL"] {
            let r = grade(&tool_args(mode, r#"{"n": true}"#, &tolerance), &bool_vs_number);
            assert_eq!(r.reason_code, "NO_MATCHING_CALL", "{mode} {tolerance}");
        }
    }
}

// ---- tolerance everywhere numbers are compared ----------------------------------------------

#[test]
fn zero_tolerance_is_v1_equality() {
    let calls = json!([call("geo", r#"{"x": 1.0000001}"#), call("geo", r#"{"x": 1e0}"#)]);
    for tolerance in [json!({}), json!({"abs": 0, "rel": 0, "paths": ["x"]})] {
        let r = grade(&tool_args("MATCH_MODE_EXACT", r#"{"x": 1}"#, &tolerance), &calls);
        assert_eq!((r.status(), r.positions.as_slice()), (AssertionStatus::Pass, &[2][..]));
        let r = grade(&tool_args("MATCH_MODE_EXACT", r#"{"x": 2}"#, &tolerance), &calls);
        assert_eq!(r.reason, "no call to geo matched the expected arguments; closest is call 1: $.x expected 2, got 1.0000001");
    }
}

#[test]
fn relative_tolerance_and_paths() {
    let calls =
        json!([call("geo", r#"{"amount": 1009, "qty": 3.0001, "items": [{"price": 9.99}]}"#)]);
    let expected = r#"{"amount": 1000, "qty": 3, "items": [{"price": 10}]}"#;
    let pass = |tolerance: Json, mode: &str| {
        grade(&tool_args(mode, expected, &tolerance), &calls).status() == AssertionStatus::Pass
    };
    assert!(pass(json!({"rel": 0.01}), "MATCH_MODE_EXACT"));
    assert!(!pass(json!({"rel": 0.005}), "MATCH_MODE_EXACT"));
    // `paths` limits the tolerance: qty is exact unless named.
    assert!(!pass(
        json!({"rel": 0.01, "paths": ["amount", "items[].price"]}),
        "MATCH_MODE_PARTIAL"
    ));
    assert!(pass(
        json!({"rel": 0.01, "paths": ["amount", "items[].price", "qty"]}),
        "MATCH_MODE_PARTIAL"
    ));
    // A path names everything under it.
    assert!(pass(json!({"rel": 0.01, "paths": ["amount", "qty", "items"]}), "MATCH_MODE_SUBSET"));
    // Ignore applies first: an ignored key is gone, whatever the tolerance says.
    let ignoring = json!({"tool_call_args": {"tool": "geo", "match": {
        "mode": "MATCH_MODE_EXACT", "args_json": r#"{"amount": 1000, "items": [{"price": 10}]}"#,
        "ignore": ["qty"], "tolerance": {"rel": 0.01, "paths": ["qty", "amount", "items"]}}}});
    assert_eq!(grade(&ignoring, &calls).status(), AssertionStatus::Pass);
}

#[test]
fn overflowing_numbers_are_never_within_tolerance() {
    let calls = json!([call("geo", r#"{"x": 1e400}"#)]);
    let r = grade(&tool_args("MATCH_MODE_EXACT", r#"{"x": 2e400}"#, &json!({"rel": 10})), &calls);
    assert_eq!(r.reason_code, "NO_MATCHING_CALL");
    let r = grade(&tool_args("MATCH_MODE_EXACT", r#"{"x": 10e399}"#, &json!({"rel": 10})), &calls);
    assert_eq!(r.status(), AssertionStatus::Pass, "equal decimals are equal");
}

#[test]
fn the_closest_call_counts_differences_with_the_tolerance() {
    // Call 1 differs in two keys whatever the tolerance; call 2 in three without it (a, b and
    // the extra d) and in one with it (d): the tolerance moves the closest call.
    let calls = json!([
        call("geo", r#"{"a": 1, "b": 2, "c": "x", "e": 1}"#),
        call("geo", r#"{"a": 1.0004, "b": 2.0004, "c": "z", "d": 1}"#),
    ]);
    let expected = r#"{"a": 1, "b": 2, "c": "z"}"#;
    let r = grade(&tool_args("MATCH_MODE_EXACT", expected, &json!({})), &calls);
    assert_eq!(r.positions, vec![1]);
    assert!(r.reason.ends_with(r#"closest is call 1: $.c expected "z", got "x""#), "{}", r.reason);
    let r = grade(&tool_args("MATCH_MODE_EXACT", expected, &json!({"abs": 0.001})), &calls);
    assert_eq!(r.positions, vec![2]);
    assert!(r.reason.ends_with("closest is call 2: $.d is not expected, got 1"), "{}", r.reason);
}

#[test]
fn tolerance_in_sequence_steps_and_trajectory_overrides() {
    let calls = json!([call("geo", r#"{"lat": 52.5201}"#), call("pay", r#"{"amount": 10.004}"#)]);
    let step = |tolerance: Json| {
        json!({"tool_sequence": {"mode": "SEQUENCE_MODE_ANY_ORDER", "steps": [
            {"tool": "pay", "match": {"mode": "MATCH_MODE_PARTIAL", "args_json": r#"{"amount": 10}"#, "tolerance": tolerance}},
            {"tool": "geo"}]}})
    };
    assert_eq!(grade(&step(json!({"abs": 0.01})), &calls).status(), AssertionStatus::Pass);
    assert_eq!(grade(&step(json!({"abs": 0.001})), &calls).reason_code, "SEQUENCE_INCOMPLETE");

    let reference = json!([call("geo", r#"{"lat": 52.52}"#), call("pay", r#"{"amount": 10}"#)]);
    let overrides = json!([{"tool": "geo", "tolerance": {"abs": 0.001}},
                           {"tool": "pay", "args": "MATCH_MODE_SUBSET", "tolerance": {"rel": 0.001}}]);
    let m = json!({"trajectory_match": {"reference": reference, "overrides": overrides}});
    assert_eq!(grade(&m, &calls).status(), AssertionStatus::Pass);
    let s = json!({"trajectory_score": {"reference": reference, "overrides": overrides}});
    let r = grade(&s, &calls);
    assert_eq!(
        (r.status(), r.score, r.positions.as_slice()),
        (AssertionStatus::Pass, 1.0, &[1, 2][..])
    );
    // Without the override on pay, only geo pairs: F1 = 2 * 1 / 4.
    let s = json!({"trajectory_score": {"reference": reference, "overrides": [overrides[0]], "min_score": 0.5}});
    let r = grade(&s, &calls);
    assert_eq!(
        (r.status(), r.score, r.positions.as_slice()),
        (AssertionStatus::Pass, 0.5, &[1][..])
    );
}

#[test]
fn invalid_tolerances_are_rejected_at_their_field() {
    let m = |tolerance: Json| tool_args("MATCH_MODE_SUBSET", "{}", &tolerance);
    for (assertion, field) in [
        (m(json!({"abs": -1})), "assertions[0].tool_call_args.match.tolerance.abs"),
        (m(json!({"abs": "NaN"})), "assertions[0].tool_call_args.match.tolerance.abs"),
        (m(json!({"rel": -0.5})), "assertions[0].tool_call_args.match.tolerance.rel"),
        (m(json!({"rel": "NaN"})), "assertions[0].tool_call_args.match.tolerance.rel"),
        (
            m(json!({"abs": 1, "paths": ["a", "b[]"]})),
            "assertions[0].tool_call_args.match.tolerance.paths[1]",
        ),
        (
            json!({"tool_call_args": {"tool": "geo", "match": {"mode": "MATCH_MODE_REGEX", "pattern": "x", "tolerance": {"abs": 1}}}}),
            "assertions[0].tool_call_args.match.tolerance",
        ),
        (
            json!({"tool_sequence": {"steps": [{"tool": "a", "match": {"mode": "MATCH_MODE_IGNORE", "tolerance": {}}}]}}),
            "assertions[0].tool_sequence.steps[0].match.tolerance",
        ),
        (
            json!({"trajectory_match": {"reference": [{"name": "a"}], "overrides": [{"tool": "a", "args": "MATCH_MODE_IGNORE", "tolerance": {"abs": 1}}]}}),
            "assertions[0].trajectory_match.overrides[0].tolerance",
        ),
        (
            json!({"trajectory_score": {"args": "MATCH_MODE_IGNORE", "reference": [{"name": "a"}], "overrides": [{"tool": "a", "tolerance": {"abs": 1}}]}}),
            "assertions[0].trajectory_score.overrides[0].tolerance",
        ),
        (
            json!({"trajectory_score": {"reference": [{"name": "a"}], "overrides": [{"tool": "a", "tolerance": {"rel": -1}}]}}),
            "assertions[0].trajectory_score.overrides[0].tolerance.rel",
        ),
    ] {
        let (got, message) = rejected(&assertion);
        assert_eq!(got, field, "{assertion}: {message}");
    }
    let (_, message) = rejected(&m(json!({"abs": -1})));
    assert!(message.contains("abs must be >= 0, got -1"), "{message}");
}

// ---- §16 example 2 --------------------------------------------------------------------------

fn refund_reference() -> Json {
    json!([{"name": "lookup_account"}, {"name": "check_refund_eligibility"}, {"name": "issue_refund"}])
}

fn score(metric: &str, min_score: Option<f64>, names: &[&str]) -> AssertionResult {
    let mut s =
        json!({"reference": refund_reference(), "args": "MATCH_MODE_IGNORE", "metric": metric});
    if let Some(min) = min_score {
        s["min_score"] = json!(min);
    }
    let calls: Vec<Json> = names.iter().map(|n| json!({"name": n})).collect();
    grade(&json!({ "trajectory_score": s }), &Json::Array(calls))
}

#[test]
fn example_2_trajectory_score() {
    let calls = ["lookup_account", "log_event", "issue_refund"];
    let r = score("SCORE_METRIC_F1", Some(0.6), &calls);
    assert_eq!(r.name, "trajectory_score");
    assert_eq!(
        (r.status(), r.score, r.positions.as_slice()),
        (AssertionStatus::Pass, 0.6667, &[1, 3][..])
    );
    let r = score("SCORE_METRIC_UNSPECIFIED", Some(0.9), &calls);
    assert_eq!(
        (r.status(), r.score, r.positions.as_slice()),
        (AssertionStatus::Fail, 0.6667, &[2][..])
    );
    assert_eq!(r.reason_code, "SCORE_BELOW_MIN");
    assert_eq!(
        r.reason,
        "score 0.6667 < 0.9: matched 2 of 3 reference calls; unmatched reference 2 \
         check_refund_eligibility; extra call 2 log_event"
    );
    let r = score("SCORE_METRIC_ORDERED_F1", Some(0.0), &["issue_refund", "lookup_account"]);
    assert_eq!((r.status(), r.score), (AssertionStatus::Pass, 0.4));
    // Either call alone is a longest common subsequence; call 1 is the smaller vector.
    assert_eq!(r.positions, vec![1]);
}

#[test]
fn an_unmatched_reference_points_at_its_closest_call_within_the_tolerance() {
    let reference =
        json!([call("lookup", "{}"), call("refund", r#"{"amount": 5000, "currency": "USD"}"#)]);
    let calls =
        json!([call("lookup", "{}"), call("refund", r#"{"amount": 5000.4, "currency": "EUR"}"#)]);
    let s = |overrides: Json| json!({"trajectory_score": {"reference": reference, "overrides": overrides}});
    let r = grade(&s(json!([])), &calls);
    assert!(
        r.reason.ends_with("unmatched reference 2 refund (closest is call 2: $.amount expected 5000, got 5000.4); extra call 2 refund"),
        "{}",
        r.reason
    );
    // Within the tolerance the amount is no difference; the currency is the first one left.
    let r = grade(&s(json!([{"tool": "refund", "tolerance": {"abs": 1}}])), &calls);
    assert!(
        r.reason.contains(r#"(closest is call 2: $.currency expected "USD", got "EUR")"#),
        "{}",
        r.reason
    );
}

#[test]
fn metrics_and_min_score() {
    let calls = ["lookup_account", "log_event", "issue_refund", "log_event"];
    let s = |metric: &str| score(metric, Some(0.0), &calls).score;
    assert_eq!(s("SCORE_METRIC_PRECISION"), 0.5);
    assert_eq!(s("SCORE_METRIC_RECALL"), 0.6667);
    assert_eq!(s("SCORE_METRIC_F1"), 0.5714);
    assert_eq!(s("SCORE_METRIC_ORDERED_F1"), 0.5714);
    assert_eq!(score("SCORE_METRIC_PRECISION", Some(0.0), &[]).score, 0.0, "no call: 0");
    // Absent min_score is 1.0: only a perfect score passes.
    assert_eq!(score("SCORE_METRIC_F1", None, &calls).status(), AssertionStatus::Fail);
    let perfect = ["lookup_account", "check_refund_eligibility", "issue_refund"];
    let r = score("SCORE_METRIC_F1", None, &perfect);
    assert_eq!(
        (r.status(), r.score, r.positions.as_slice()),
        (AssertionStatus::Pass, 1.0, &[1, 2, 3][..])
    );
    // Rounded before the comparison: 0.66666... rounds to 0.6667 >= 0.6667.
    let r = score("SCORE_METRIC_RECALL", Some(0.6667), &calls);
    assert_eq!(r.status(), AssertionStatus::Pass);
}

#[test]
fn a_negated_score_is_one_minus_the_score() {
    let mut s = json!({"trajectory_score": {"reference": refund_reference(), "min_score": 0.9}});
    s["negate"] = json!(true);
    let r = grade(
        &s,
        &json!([{"name": "lookup_account"}, {"name": "log_event"}, {"name": "issue_refund"}]),
    );
    assert_eq!(
        (r.name.as_str(), r.status(), r.score),
        ("not:trajectory_score", AssertionStatus::Pass, 0.3333)
    );
}

#[test]
fn invalid_trajectory_scores_are_rejected_at_their_field() {
    let with = |extra: Json| {
        let mut s = json!({"reference": [{"name": "a"}]});
        for (k, v) in extra.as_object().expect("an object") {
            s[k] = v.clone();
        }
        json!({ "trajectory_score": s })
    };
    for (assertion, field) in [
        (with(json!({"min_score": 1.5})), "assertions[0].trajectory_score.min_score"),
        (with(json!({"min_score": -0.1})), "assertions[0].trajectory_score.min_score"),
        (with(json!({"min_score": "NaN"})), "assertions[0].trajectory_score.min_score"),
        (with(json!({"reference": []})), "assertions[0].trajectory_score.reference"),
        (
            with(json!({"reference": [{"name": ""}]})),
            "assertions[0].trajectory_score.reference[0].name",
        ),
        (with(json!({"args": "MATCH_MODE_REGEX"})), "assertions[0].trajectory_score.args"),
        (
            with(
                json!({"args": "MATCH_MODE_SUBSET", "reference": [{"name": "a", "arguments_json": "[1]"}]}),
            ),
            "assertions[0].trajectory_score.reference[0].arguments_json",
        ),
        (
            with(json!({"overrides": [{"tool": "a"}, {"tool": "a"}]})),
            "assertions[0].trajectory_score.overrides[1].tool",
        ),
    ] {
        let (got, message) = rejected(&assertion);
        assert_eq!(got, field, "{assertion}: {message}");
    }
    // An enum number the proto does not define (binary clients) is rejected too.
    let mut suite: Suite =
        serde_json::from_value(json!({"assertions": [with(json!({}))]})).expect("a suite");
    if let Some(trajgrade_core::proto::v1::assertion::Kind::TrajectoryScore(s)) =
        &mut suite.assertions[0].kind
    {
        s.metric = 9;
    }
    let Err(e) = CompiledSuite::compile(&suite, &Limits::default()) else {
        panic!("metric 9 should be rejected")
    };
    assert_eq!(e.field(), "assertions[0].trajectory_score.metric");
}

#[test]
fn a_huge_ordered_score_stops_at_the_work_limit() {
    let n = 5000;
    let reference: Vec<Json> = (0..n).map(|i| json!({"name": format!("t{}", i % 7)})).collect();
    let calls: Vec<Json> = (0..n).map(|i| json!({"name": format!("t{}", i % 5)})).collect();
    let s =
        json!({"trajectory_score": {"reference": reference, "metric": "SCORE_METRIC_ORDERED_F1"}});
    let limits = Limits { max_work_units: 1_000_000, ..Limits::default() };
    let suite: Suite = serde_json::from_value(json!({"assertions": [s]})).expect("a suite");
    let compiled = CompiledSuite::compile(&suite, &limits).expect("compiles");
    let started = std::time::Instant::now();
    let Err(e) = compiled.grade(&trace(&Json::Array(calls)), &limits) else {
        panic!("should stop at the work limit")
    };
    assert_eq!(e.reason_code(), "WORK_LIMIT_EXCEEDED");
    assert!(started.elapsed().as_secs_f64() < 2.0, "{:?}", started.elapsed());
}

// ---- differential test against brute force --------------------------------------------------

/// xorshift: reproducible random cases.
fn rng(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A reference call: a name and, optionally, the one argument `x` it requires.
type Ref = (u8, Option<u8>);
/// A call: a name and its argument `x`.
type Call = (u8, u8);

fn edge(r: Ref, c: Call) -> bool {
    r.0 == c.0 && r.1.is_none_or(|x| x == c.1)
}

/// All injective pairings (reference k -> call), by exhaustive search: the largest, and among
/// those the lexicographically smallest vector with "unpaired" after every call (§9.13).
fn brute_matching(refs: &[Ref], calls: &[Call]) -> Vec<Option<usize>> {
    fn go(
        k: usize,
        refs: &[Ref],
        calls: &[Call],
        used: &mut Vec<bool>,
        cur: &mut Vec<Option<usize>>,
        best: &mut Option<(usize, Vec<Option<usize>>)>,
    ) {
        if k == refs.len() {
            let m = cur.iter().flatten().count();
            let key = |v: &Vec<Option<usize>>| {
                v.iter().map(|p| p.unwrap_or(usize::MAX)).collect::<Vec<_>>()
            };
            let better = match best {
                None => true,
                Some((bm, bv)) => m > *bm || (m == *bm && key(cur) < key(bv)),
            };
            if better {
                *best = Some((m, cur.clone()));
            }
            return;
        }
        for j in 0..calls.len() {
            if !used[j] && edge(refs[k], calls[j]) {
                used[j] = true;
                cur.push(Some(j));
                go(k + 1, refs, calls, used, cur, best);
                cur.pop();
                used[j] = false;
            }
        }
        cur.push(None);
        go(k + 1, refs, calls, used, cur, best);
        cur.pop();
    }
    let mut best = None;
    go(0, refs, calls, &mut vec![false; calls.len()], &mut Vec::new(), &mut best);
    best.map(|(_, v)| v).unwrap_or_default()
}

/// All common subsequences: the longest, and among those the lexicographically smallest
/// vector of call positions in reference order.
fn brute_lcs(refs: &[Ref], calls: &[Call]) -> Vec<Option<usize>> {
    fn go(
        k: usize,
        next_call: usize,
        refs: &[Ref],
        calls: &[Call],
        cur: &mut Vec<Option<usize>>,
        best: &mut Option<(Vec<usize>, Vec<Option<usize>>)>,
    ) {
        if k == refs.len() {
            let seq: Vec<usize> = cur.iter().flatten().copied().collect();
            let better = match best {
                None => true,
                Some((bs, _)) => seq.len() > bs.len() || (seq.len() == bs.len() && seq < *bs),
            };
            if better {
                *best = Some((seq, cur.clone()));
            }
            return;
        }
        for j in next_call..calls.len() {
            if edge(refs[k], calls[j]) {
                cur.push(Some(j));
                go(k + 1, j + 1, refs, calls, cur, best);
                cur.pop();
            }
        }
        cur.push(None);
        go(k + 1, next_call, refs, calls, cur, best);
        cur.pop();
    }
    let mut best = None;
    go(0, 0, refs, calls, &mut Vec::new(), &mut best);
    best.map(|(_, v)| v).unwrap_or_default()
}

fn round4(x: f64) -> f64 {
    format!("{x:.4}").parse().expect("a number")
}

#[test]
fn trajectory_score_agrees_with_brute_force_pairings() {
    let mut next = rng(0x5eed_1234_abcd_ef01);
    let metrics = [
        "SCORE_METRIC_F1",
        "SCORE_METRIC_PRECISION",
        "SCORE_METRIC_RECALL",
        "SCORE_METRIC_ORDERED_F1",
    ];
    let limits = Limits::default();
    for case in 0..1500 {
        let names = 1 + (next() % 3) as u8;
        let refs: Vec<Ref> = (0..=(next() % 6))
            .map(|_| {
                (
                    (next() % u64::from(names)) as u8,
                    (!next().is_multiple_of(3)).then(|| (next() % 2) as u8),
                )
            })
            .collect();
        let calls: Vec<Call> = (0..next() % 8)
            .map(|_| ((next() % u64::from(names)) as u8, (next() % 2) as u8))
            .collect();
        let reference: Vec<Json> = refs
            .iter()
            .map(|&(n, x)| match x {
                Some(x) => {
                    json!({"name": format!("t{n}"), "arguments_json": format!(r#"{{"x": {x}}}"#)})
                }
                None => json!({"name": format!("t{n}")}),
            })
            .collect();
        let trace = trace(&Json::Array(
            calls
                .iter()
                .map(|&(n, x)| call(&format!("t{n}"), &format!(r#"{{"x": {x}.0}}"#)))
                .collect(),
        ));
        let metric = metrics[case % 4];
        let want = if metric == "SCORE_METRIC_ORDERED_F1" {
            brute_lcs(&refs, &calls)
        } else {
            brute_matching(&refs, &calls)
        };
        let m = want.iter().flatten().count();
        let (r, a) = (refs.len() as f64, calls.len() as f64);
        let raw = match metric {
            "SCORE_METRIC_PRECISION" => {
                if a == 0.0 {
                    0.0
                } else {
                    m as f64 / a
                }
            }
            "SCORE_METRIC_RECALL" => m as f64 / r,
            _ => 2.0 * m as f64 / (r + a),
        };
        let want_positions: Vec<u32> = want.iter().flatten().map(|&j| j as u32 + 1).collect();
        let want_extra: Vec<u32> =
            (0..calls.len()).filter(|j| !want.contains(&Some(*j))).map(|j| j as u32 + 1).collect();
        for min_score in [0.0, 1.0] {
            let s = json!({"trajectory_score": {"reference": reference, "metric": metric, "min_score": min_score}});
            let suite: Suite = serde_json::from_value(json!({"assertions": [s]})).expect("a suite");
            let got = CompiledSuite::compile(&suite, &limits)
                .expect("compiles")
                .grade(&trace, &limits)
                .expect("graded");
            let result = &got.results[0];
            let what = format!("case {case}: {metric} refs {refs:?} calls {calls:?}");
            assert_eq!(result.score, round4(raw), "{what}");
            if result.status() == AssertionStatus::Pass {
                assert_eq!(result.positions, want_positions, "{what}");
            } else {
                assert_eq!(result.positions, want_extra, "{what}");
            }
        }
    }
}
