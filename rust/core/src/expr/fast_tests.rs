//! The fast path (`plan`, `eval`) against the interpreter: the same outcome, the same error
//! text, the same work units and the same stop, on edge cases and on random expressions over
//! random traces, also under tiny cost limits and work budgets; and which path ran.
use std::cell::Cell;

use super::test_support::{with_bindings, Rng};
use super::{cost, Bindings, ExprCall, Expression};
use crate::trace::ModelCall;
use crate::work::Work;

/// The path an evaluation took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The fast path answered.
    Fast,
    /// The fast path covers the expression but handed this evaluation to the interpreter.
    FellBack,
    /// The fast path does not cover the expression.
    Interpreter,
}

thread_local! {
    static LAST: Cell<Option<Path>> = const { Cell::new(None) };
}

/// Records the path of this thread's last evaluation.
pub fn took(p: Path) {
    LAST.set(Some(p));
}

/// The outcome and the work of one evaluation.
type Outcome = (Result<bool, String>, u64, Option<crate::work::Stop>);

/// Evaluates `e` by `evaluate` (fast path first) and by the interpreter alone, each with its
/// own work budget of `work_limit`, asserts that they agree, and answers the outcome and the
/// path taken.
fn both(src: &str, e: &Expression, b: &Bindings<'_>, work_limit: u64) -> (Outcome, Path) {
    let (fast_work, slow_work) = (Work::new(work_limit, None), Work::new(work_limit, None));
    LAST.set(None);
    let fast = e.evaluate(b, &fast_work);
    let path = LAST.take().expect("evaluate records its path");
    let slow = e.evaluate_interpreted(b, &slow_work);
    let fast = (fast, fast_work.used(), fast_work.stopped());
    let slow = (slow, slow_work.used(), slow_work.stopped());
    assert_eq!(fast, slow, "{src} (limit {}, work {work_limit}, {path:?})", e.cost_limit);
    (fast, path)
}

fn compiled(src: &str, cost_limit: u64) -> Expression {
    Expression::compile(src, cost_limit).unwrap_or_else(|err| panic!("{src}: {err}"))
}

/// The trace of the edge cases.
fn with_trace<T>(f: impl FnOnce(&Bindings<'_>) -> T) -> T {
    let calls = [
        ExprCall {
            name: "get_order",
            args_text: Some(
                r#"{"order_id":"A-7","amount":5000,"r":1.5,"tags":["x","y"],"n":null,"big":9223372036854775808,"neg":-3}"#,
            ),
            result: r#"{"charged_times": 2, "items": [{"sku": "x"}]}"#,
            position: 1,
            duration_ns: Some(2_350_000_000),
            agent: "triage/billing",
            server: "orders",
            ..ExprCall::default()
        },
        ExprCall {
            name: "issue_refund",
            args_text: Some(r#"{"order_id":"B-1","amount":12.5,"s":"\ud800","e":{}}"#),
            result: "not json",
            error: true,
            position: 2,
            duration_ns: None,
            turn: 2,
            ..ExprCall::default()
        },
        ExprCall {
            name: "log",
            args_text: Some("not json"),
            position: 3,
            turn: 3,
            ..ExprCall::default()
        },
    ];
    with_bindings(&calls, f)
}

/// Edge cases: each with its outcome through both paths, and the path it must take.
const EDGES: &[(&str, Result<bool, &str>, Path)] = {
    use Path::{Fast, FellBack as Back, Interpreter as Interp};
    &[
        // Overflow and division by zero: the interpreter's errors.
        ("9223372036854775807 + 1 > 0", Err("Overflow from binary operator 'add': Int(9223372036854775807), Int(1)"), Back),
        ("-9223372036854775807 - 2 < 0", Err("Overflow from binary operator 'sub': Int(-9223372036854775807), Int(2)"), Back),
        ("calls[0].args.amount * 9223372036854775807 > 0", Err("Overflow from binary operator 'mul': Int(5000), Int(9223372036854775807)"), Back),
        ("calls[0].args.amount / 0 == 1", Err("Division by zero of Int(5000)"), Back),
        ("calls[0].args.amount % 0 == 1", Err("Remainder by zero of Int(5000)"), Back),
        ("calls[0].args.amount / 0.0 > 1.0e308", Ok(true), Fast),
        ("1u - 2u == 0u", Err("Overflow from binary operator 'sub': UInt(1), UInt(2)"), Back),
        ("-(-9223372036854775807 - 1) == 1", Err("Overflow from binary operator 'negate': Int(-9223372036854775808), Null"), Back),
        ("7 % 3 == 1 && -7 / 2 == -3 && 7u % 2u == 1u", Ok(true), Fast),
        // Mixed numbers.
        ("1.0 - calls[0].position == 0.0 && calls[0].position + 0.5 == 1.5", Ok(true), Fast),
        ("calls[0].args.r * 2 == 3 && 1u + 1.5 == 2.5 && 1 < 1.5 && 2u > 1", Ok(true), Fast),
        ("1 == 1.0 && 1u == 1 && 1.5 != 1", Ok(true), Fast),
        ("calls[0].args.big > 9.2e18 && calls[0].args.neg < 0u", Ok(true), Fast),
        ("'a' < 1", Err("found no matching overload for '_<_' applied to '(string, int)'"), Back),
        ("'a' < 'b' && 'b' >= 'b' && 'B' < 'a'", Ok(true), Fast),
        ("true < false", Ok(false), Fast),
        ("1.5 % 1.0 == 0.5", Err("Unsupported binary operator 'rem': Float(1.5), Float(1.0)"), Back),
        // Null handling.
        ("calls[1].duration_ms == null && calls[0].duration_ms != null", Ok(true), Fast),
        ("calls[1].duration_ms < 5000.0", Err("found no matching overload for '_<_' applied to '(null_type, double)'"), Back),
        ("calls.all(c, c.duration_ms == null || c.duration_ms < 5000.0)", Ok(true), Fast),
        ("calls[2].args == null && calls[0].args.n == null && null == null", Ok(true), Fast),
        ("calls[2].args.x == 1", Err("found no matching overload for '_._' applied to '(null_type, string)'"), Back),
        ("calls[0].args != null && calls[0] != null && null != calls", Ok(true), Fast),
        // `in` on lists and maps.
        ("'x' in calls[0].args.tags && !('z' in calls[0].args.tags) && 2 in [1, 2.0]", Ok(true), Fast),
        ("'order_id' in calls[0].args && !('nope' in calls[0].args) && 'env' in metadata", Ok(true), Fast),
        ("'name' in calls[0] && 'cost' in usage && !('x' in model_calls[0])", Ok(true), Fast),
        ("1 in calls && !('a' in calls)", Ok(false), Fast),
        ("1 in calls[0].args", Ok(false), Back),
        ("calls[0] in calls", Ok(true), Back),
        // has().
        ("has(calls[0].args.order_id) && !has(calls[0].args.nope) && has(calls[0].name)", Ok(true), Fast),
        ("has(metadata.env) && !has(metadata.nope) && has(usage.cost) && !has(calls[0].nope)", Ok(true), Fast),
        ("has(calls[2].args.x)", Err("found no matching overload for '_._' applied to '(null_type, string)'"), Back),
        ("has(calls[0].args.tags.x)", Err("found no matching overload for '_._' applied to '(list, string)'"), Back),
        // String functions.
        ("answer.startsWith('Your') && answer.endsWith('.') && answer.contains('refund')", Ok(true), Fast),
        ("answer.matches('^Y.*way\\\\.$') && !answer.matches('^x')", Ok(true), Fast),
        ("answer.matches('(')", Err("Error executing function 'matches': '(' not a valid regex:\nregex parse error:\n    (\n    ^\nerror: unclosed group"), Interp),
        ("calls[0].position.startsWith('1')", Err("found no matching overload for 'startsWith' applied to 'int.(string)'"), Back),
        ("size('héllo') == 5 && size(answer) == 26 && answer.size() == 26", Ok(true), Fast),
        ("calls[1].args.s.startsWith('\\uFFFD')", Ok(true), Back),
        // Nested comprehensions up to the nesting limit.
        ("calls.all(a, calls.all(b, calls.all(c, calls.all(d, a.position + b.position + c.position + d.position > 3))))", Ok(true), Fast),
        ("calls.exists(a, calls.exists_one(b, a.position + b.position == 3))", Ok(true), Fast),
        ("calls.map(a, calls.filter(b, b.position > a.position).size()) == [2, 1, 0]", Ok(true), Back),
        ("calls.map(a, calls.filter(b, b.position > a.position).size())[0] == 2", Ok(true), Fast),
        ("calls.map(c, c.name, c.position * 2)[1] == 4", Err("Unexpected type: got 'string', want 'bool'"), Back),
        ("calls.map(c, c.position > 1, c.position * 2)[0] == 4", Ok(true), Fast),
        ("calls.filter(c, c.error)[0].name == 'issue_refund' && calls.filter(c, c.turn > 5).size() == 0", Ok(true), Fast),
        ("calls[0].args.tags.all(t, t != '') && [1, 2, 3].exists_one(x, x == 2)", Ok(true), Fast),
        ("calls.all(c, c.args.amount > 1)", Err("found no matching overload for '_._' applied to '(null_type, string)'"), Back),
        ("calls.exists(c, c.args.amount > 10000) || true", Ok(true), Back),
        ("calls.all(c, c.args.x)", Err("found no matching overload for '_._' applied to '(null_type, string)'"), Back),
        ("calls.all(c, c.name)", Err("found no matching overload for '_&&_' applied to '(bool, string)'"), Back),
        ("calls[0].args.all(k, k != '')", Ok(true), Back),
        ("type(answer) == string && calls.all(c, c.name != '')", Ok(true), Interp),
        // result_json.
        ("calls[0].result_json.charged_times == 2 && calls[0].result_json.items[0].sku == 'x'", Ok(true), Fast),
        ("calls[1].result_json == null && calls[2].result_json == null", Ok(true), Fast),
        ("calls[0]['result' + '_json'].charged_times == 2", Ok(true), Back),
        // usage and model_calls.
        ("usage.output_tokens == 2010 && usage.cost == null && type(usage.input_tokens) == double", Ok(true), Interp),
        ("usage.input_tokens > 1.8e19 && usage.total_tokens > usage.output_tokens", Ok(true), Fast),
        ("model_calls[0].model == 'big' && model_calls[0].turn == 1 && model_calls[1].turn == 2", Ok(true), Fast),
        ("model_calls[1].end_time_unix_nano - model_calls[1].start_time_unix_nano == 4", Ok(true), Fast),
        ("model_calls.exists(m, m.cost == null) && model_calls.filter(m, m.cost != null).size() == 1", Ok(true), Fast),
        ("size(calls[0]) == 10 && size(model_calls[0]) == 8 && size(usage) == 4 && size(metadata) == 2", Ok(true), Fast),
        ("metadata.env == 'dev' && metadata['region'] == 'eu'", Ok(true), Fast),
        // Indexes.
        ("calls[3].name == 'x'", Err("Index out of bounds: Int(3)"), Back),
        ("calls[-1].name == 'x'", Err("Index out of bounds: Int(-1)"), Back),
        ("calls[1.0].name == 'issue_refund'", Ok(true), Back),
        ("calls[0]['name'] == 'get_order' && calls[0].args['tags'][1] == 'y'", Ok(true), Fast),
        // Not a bool.
        ("calls.size()", Err("the expression evaluated to int (Int(3)), not a bool"), Back),
        ("calls[0].args", Err("the expression evaluated to a map, not a bool"), Back),
        ("1 || true", Ok(true), Back),
        ("true ? 1 : 2", Err("the expression evaluated to int (Int(1)), not a bool"), Back),
    ]
};

#[test]
fn edge_cases_agree_and_take_the_expected_path() {
    let wrong: Vec<String> = with_trace(|b| {
        EDGES
            .iter()
            .filter_map(|(src, want, path)| {
                let e = compiled(src, 1_000_000);
                let ((got, _, _), took) = both(src, &e, b, u64::MAX);
                let want = (want.map_err(str::to_owned), *path);
                (want != (got.clone(), took)).then(|| format!("{src}: {got:?} by {took:?}"))
            })
            .collect()
    });
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_bench_expressions_take_the_fast_path() {
    let calls: Vec<ExprCall<'_>> = (1..=20)
        .map(|position| ExprCall {
            name: "get_order",
            position,
            duration_ns: Some(u64::from(position) * 1_000_000),
            ..ExprCall::default()
        })
        .collect();
    let model_calls = [ModelCall { input_tokens: 500, output_tokens: 50, ..ModelCall::default() }];
    let b = Bindings { calls: &calls, model_calls: &model_calls, ..Bindings::default() };
    for (src, units) in [
        // `&&`, the 20 iterations (a unit each, and one for `!=`), `<` and `size`.
        ("calls.all(c, c.name != \"\") && size(calls) < 100", 1 + 20 * 2 + 2),
        // `&&`, 20 × (the iteration, `||`, `==`, `<`), `<`.
        (
            "calls.all(c, c.duration_ms == null || c.duration_ms < 5000.0) && \
             usage.total_tokens < 100000",
            1 + 20 * 4 + 1,
        ),
    ] {
        let e = compiled(src, 100_000);
        let ((got, used, stop), path) = both(src, &e, &b, u64::MAX);
        assert_eq!((got, path, stop), (Ok(true), Path::Fast, None), "{src}");
        assert_eq!(used, units * cost::WORK_PER_COST_UNIT, "{src}");
    }
}

#[test]
fn limits_stop_both_paths_at_the_same_unit() {
    with_trace(|b| {
        let src =
            "calls.all(a, calls.all(b, calls.exists_one(c, a.position + c.position > b.position)))";
        for limit in 0..60 {
            let e = compiled(src, limit);
            let ((got, _, _), path) = both(src, &e, b, u64::MAX);
            if got.is_err() {
                assert_eq!(got, Err(format!("cost limit of {limit} exceeded")));
            }
            assert_eq!(path, Path::Fast);
            for work in [0, 15, 16, 17, 100, 16 * 30, 16 * 31] {
                let e = compiled(src, 1_000);
                let _ = both(src, &e, b, work);
            }
        }
    });
}

/// Random JSON values.
impl Rng {
    fn json(&mut self, depth: u32) -> String {
        let keys = ["a", "k", "order_id", "amount", "tags"];
        match self.below(if depth == 0 { 4 } else { 6 }) {
            0 => self.pick(&["null", "true", "false"]).to_owned(),
            1 => self
                .pick(&["0", "-1", "5000", "1.5", "1e2", "9223372036854775808", "2.5e-3"])
                .to_owned(),
            2 => self
                .pick(&["\"\"", "\"x\"", "\"A-7\"", "\"\\u00e9t\\u00e9\"", "\"\\ud800\""])
                .to_owned(),
            3 => format!("\"{}\"", self.pick(&keys)),
            4 => {
                let n = self.below(4);
                let items: Vec<String> = (0..n).map(|_| self.json(depth - 1)).collect();
                format!("[{}]", items.join(","))
            }
            _ => {
                let n = self.below(4);
                let fields: Vec<String> = (0..n)
                    .map(|_| format!("\"{}\":{}", self.pick(&keys), self.json(depth - 1)))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }
        }
    }
}

/// What a comprehension variable holds, for the generator.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Call,
    ModelCall,
    Any,
}

/// Random expressions over the trace variables, mostly of the kinds the fast path covers,
/// with errors of every sort along the way.
struct Gen {
    rng: Rng,
    /// Comprehension variables in scope.
    scope: Vec<(String, Kind)>,
}

impl Gen {
    fn var(&mut self, kind: Kind) -> Option<String> {
        let vars: Vec<&String> =
            self.scope.iter().filter(|(_, k)| *k == kind).map(|(n, _)| n).collect();
        (!vars.is_empty()).then(|| vars[self.rng.below(vars.len())].clone())
    }

    /// A call: a variable or an index (perhaps out of range).
    fn call(&mut self) -> String {
        match self.var(Kind::Call) {
            Some(v) if self.rng.below(4) > 0 => v,
            _ => format!("calls[{}]", self.rng.below(5)),
        }
    }

    fn bool(&mut self, depth: u32) -> String {
        if depth == 0 {
            return match self.rng.below(6) {
                0 => self.rng.pick(&["true", "false"]).to_owned(),
                1 => format!("{}.error", self.call()),
                2 => format!("has({}.args.{})", self.call(), self.rng.pick(&["a", "k", "amount"])),
                3 => format!("{} {} {}", self.num(0), self.cmp(), self.num(0)),
                4 => format!(
                    "{} {} {}",
                    self.string(0),
                    self.rng.pick(&["==", "!="]),
                    self.string(0)
                ),
                _ => format!("{}.duration_ms == null", self.call()),
            };
        }
        let d = depth - 1;
        match self.rng.below(16) {
            0 => format!("{} && {}", self.bool(d), self.bool(d)),
            1 => format!("({} || {})", self.bool(d), self.bool(d)),
            2 => format!("!({})", self.bool(d)),
            3 => format!("({} ? {} : {})", self.bool(d), self.bool(d), self.bool(d)),
            4 => format!("{} {} {}", self.num(d), self.cmp(), self.num(d)),
            5 => format!(
                "{}.{}({})",
                self.string(d),
                self.rng.pick(&["startsWith", "endsWith", "contains"]),
                self.string(0)
            ),
            6 => format!(
                "{}.matches('{}')",
                self.string(d),
                self.rng.pick(&["^g", "_", "x$", "[0-9]"])
            ),
            7 => format!(
                "{} in {}",
                self.string(0),
                self.rng.pick(&["metadata", "calls[0].args", "calls[1]", "usage", "['x', 'log']"])
            ),
            8 => format!(
                "{} in {}",
                self.num(0),
                self.rng.pick(&["[1, 2.5, 5000]", "calls[0].args.tags", "calls"])
            ),
            9 => {
                format!("has({}.{})", self.call(), self.rng.pick(&["name", "nope", "result_json"]))
            }
            10 => format!("{} == {}", self.any(d), self.any(d)),
            _ => self.comprehension(d),
        }
    }

    fn cmp(&mut self) -> &'static str {
        self.rng.pick(&["<", "<=", ">", ">=", "==", "!="])
    }

    fn comprehension(&mut self, depth: u32) -> String {
        let names = ["c", "d", "x", "calls"];
        let name = names[self.rng.below(names.len())].to_owned();
        let (range, kind) = match self.rng.below(6) {
            0 | 1 => ("calls".to_owned(), Kind::Call),
            2 => ("calls.filter(f, f.position > 1)".to_owned(), Kind::Call),
            3 => ("model_calls".to_owned(), Kind::ModelCall),
            4 => (format!("{}.args.tags", self.call()), Kind::Any),
            _ => ("[1, 2, 3.5, 'x', null]".to_owned(), Kind::Any),
        };
        let macro_ = self.rng.pick(&["all", "exists", "exists_one", "filter", "map"]);
        self.scope.push((name.clone(), kind));
        let body = match macro_ {
            "map" => self.any(depth),
            _ => self.bool(depth),
        };
        self.scope.pop();
        match macro_ {
            "filter" | "map" => {
                format!(
                    "{range}.{macro_}({name}, {body}).size() {} {}",
                    self.cmp(),
                    self.rng.below(4)
                )
            }
            _ => format!("{range}.{macro_}({name}, {body})"),
        }
    }

    fn num(&mut self, depth: u32) -> String {
        if depth == 0 || self.rng.below(2) == 0 {
            let model = self.var(Kind::ModelCall);
            let any = self.var(Kind::Any);
            return match self.rng.below(11) {
                0 => self.rng.pick(&["0", "1", "-3", "5000", "9223372036854775807"]).to_owned(),
                1 => self.rng.pick(&["1.5", "0.0", "2.5e-3", "1e300"]).to_owned(),
                2 => self.rng.pick(&["0u", "2u", "18446744073709551615u"]).to_owned(),
                3 => format!("{}.position", self.call()),
                4 => format!("{}.turn", self.call()),
                5 => format!("{}.duration_ms", self.call()),
                6 => format!("{}.args.{}", self.call(), self.rng.pick(&["amount", "a", "k"])),
                7 => format!(
                    "size({})",
                    self.rng.pick(&["calls", "answer", "metadata", "calls[0].args", "model_calls"])
                ),
                8 => format!(
                    "usage.{}",
                    self.rng.pick(&["input_tokens", "output_tokens", "total_tokens", "cost"])
                ),
                9 => match model {
                    Some(m) => format!(
                        "{m}.{}",
                        self.rng.pick(&["input_tokens", "cost", "turn", "end_time_unix_nano"])
                    ),
                    None => "model_calls[0].output_tokens".to_owned(),
                },
                _ => any.unwrap_or_else(|| "1".to_owned()),
            };
        }
        let d = depth - 1;
        match self.rng.below(3) {
            0 => format!("-{}", self.num(d)),
            1 => format!("size({}.name)", self.call()),
            _ => format!(
                "({} {} {})",
                self.num(d),
                self.rng.pick(&["+", "-", "*", "/", "%"]),
                self.num(d)
            ),
        }
    }

    fn string(&mut self, depth: u32) -> String {
        let _ = depth;
        match self.rng.below(8) {
            0 => format!("'{}'", self.rng.pick(&["", "get_order", "log", "x", "prod"])),
            1 => "answer".to_owned(),
            2 => format!("metadata.{}", self.rng.pick(&["env", "region", "nope"])),
            3 => format!("{}.name", self.call()),
            4 => format!("{}.result", self.call()),
            5 => format!("{}.agent", self.call()),
            6 => format!("{}.args.order_id", self.call()),
            _ => match self.var(Kind::ModelCall) {
                Some(m) => format!("{m}.model"),
                None => format!("{}['server']", self.call()),
            },
        }
    }

    fn any(&mut self, depth: u32) -> String {
        match self.rng.below(5) {
            0 => self.bool(depth.min(1)),
            1 | 2 => self.num(depth),
            3 => self.string(depth),
            _ => match self.var(Kind::Any) {
                Some(v) => v,
                None => format!("{}.args", self.call()),
            },
        }
    }
}

/// Owned text of a random trace, borrowed by its bindings.
struct Texts {
    args: Vec<String>,
    results: Vec<String>,
}

#[test]
fn random_expressions_agree_with_the_interpreter() {
    let mut gen = Gen { rng: Rng(0x243F_6A88_85A3_08D3), scope: Vec::new() };
    let (mut fast, mut fell_back, mut interpreted, mut stopped) = (0, 0, 0, 0);
    for round in 0..1_500 {
        let n = gen.rng.below(5);
        let texts = Texts {
            args: (0..n)
                .map(|_| if gen.rng.below(8) == 0 { "{".to_owned() } else { gen.rng.json(2) })
                .collect(),
            results: (0..n).map(|_| gen.rng.json(2)).collect(),
        };
        let names = ["get_order", "issue_refund", "log", ""];
        let calls: Vec<ExprCall<'_>> = (0..n)
            .map(|i| ExprCall {
                name: names[gen.rng.below(names.len())],
                args_text: Some(&texts.args[i]),
                result: if gen.rng.below(4) == 0 { "" } else { &texts.results[i] },
                error: gen.rng.below(3) == 0,
                position: u32::try_from(i).expect("small") * 2 + 1,
                duration_ns: [None, Some(0), Some(1_500_000), Some(7_000_000_000)]
                    [gen.rng.below(4)],
                turn: u32::try_from(gen.rng.below(3)).expect("small"),
                agent: ["", "triage/billing"][gen.rng.below(2)],
                server: ["", "orders"][gen.rng.below(2)],
                args: None,
            })
            .collect();
        let model_calls: Vec<ModelCall<'_>> = (0..gen.rng.below(3))
            .map(|_| ModelCall {
                model: ["big", "small"][gen.rng.below(2)],
                input_tokens: [0, 500, u64::MAX][gen.rng.below(3)],
                output_tokens: [0, 50][gen.rng.below(2)],
                cost: [None, Some(0.25)][gen.rng.below(2)],
                turn: 1,
                agent: "",
                start_time_unix_nano: 5,
                end_time_unix_nano: 9,
            })
            .collect();
        let b = Bindings {
            calls: &calls,
            model_calls: &model_calls,
            answer: ["", "get_order done", "x"][gen.rng.below(3)],
            metadata: &[("env", "prod"), ("region", "eu"), ("env", "dev")],
            max_json_depth: 3,
        };
        let src = gen.bool(3);
        let Ok(e) = Expression::compile(&src, 10_000) else {
            // Too deep a nest of comprehensions: a compile error on both paths alike.
            continue;
        };
        let ((_, _, _), path) = both(&src, &e, &b, u64::MAX);
        match path {
            Path::Fast => fast += 1,
            Path::FellBack => fell_back += 1,
            Path::Interpreter => interpreted += 1,
        }
        // Tiny cost limits and work budgets: the stopped outcomes agree too.
        let limit = [0, 1, 2, 3, 5, 8, 13, 40][round % 8];
        let tight = Expression::compile(&src, limit).expect("compiled above");
        if both(&src, &tight, &b, u64::MAX).0 .0 == Err(format!("cost limit of {limit} exceeded")) {
            stopped += 1;
        }
        let work = [0, 15, 16, 33, 160, 1_600][round % 6];
        let _ = both(&src, &e, &b, work);
    }
    // The generator mostly makes expressions the fast path answers.
    assert!(
        fast > 600 && fell_back > 100 && stopped > 300,
        "{fast} {fell_back} {interpreted} {stopped}"
    );
}

#[test]
fn scalar_shortcuts_agree_with_the_crate() {
    use super::value::{equal, order, V};
    let values = [
        V::Null,
        V::Bool(true),
        V::Bool(false),
        V::Int(0),
        V::Int(-1),
        V::Int(i64::MAX),
        V::Int(9_007_199_254_740_993),
        V::UInt(1),
        V::Double(0.0),
        V::Double(-0.0),
        V::Double(f64::NAN),
        V::Double(f64::INFINITY),
        V::Double(9_007_199_254_740_992.0),
        V::Double(-1.0),
        V::Str(""),
        V::Str("a"),
        V::Str("é"),
        V::Str("b"),
    ];
    for a in &values {
        for b in &values {
            let (x, y) = (a.scalar().expect("scalar"), b.scalar().expect("scalar"));
            assert_eq!(equal(a, b), Some(x.val().equals(y.val())), "{a:?} == {b:?}");
            let crate_order = super::numbers::order_vals("_<_", x.val(), y.val()).ok();
            assert_eq!(order("_<_", a, b), crate_order, "{a:?} < {b:?}");
        }
    }
}
