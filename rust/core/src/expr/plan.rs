//! The fast path's plan: the checked, number-rewritten and cost-instrumented tree of an
//! expression (see [`super::numbers`], [`super::cost`]) compiled into a small typed tree that
//! [`super::eval`] runs without the `cel` crate's interpreter.
//!
//! Only what the plan covers is compiled: literals, the bound variables and comprehension
//! variables (in slots, not looked up by name), field selection and `has()`, indexing, the
//! `all`, `exists`, `exists_one`, `map` and `filter` macros over lists, `size`, `in`, the
//! logical operators, `?:`, equality, the mixed-number arithmetic and ordering functions,
//! `%`, negation, `startsWith`, `endsWith`, `contains`, `matches` with a literal pattern, and
//! list literals. Anything else (map literals, conversions, `type`, `math.*`, optionals,
//! two-variable comprehensions, ...) makes [`compile`] answer `None`, and the expression is
//! always evaluated by the interpreter.
//!
//! Each `@cost() ? e : false` that instrumentation inserted becomes [`Node::Cost`], so the
//! fast path spends a unit exactly where the interpreter does.
use cel::common::ast::{operators, ComprehensionExpr, Expr, IdedExpr, LiteralValue};

use super::cost::COST;

/// A bound variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Global {
    Calls,
    Answer,
    Metadata,
    ModelCalls,
    Usage,
}

/// A literal.
#[derive(Debug)]
pub enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(String),
}

/// The mixed-number arithmetic functions (`@add`, ...) and `%`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    /// `_%_`: not renamed (no mixed numbers).
    Rem,
}

/// The ordering functions (`@lt`, ...), with the operator named in their errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub fn operator(self) -> &'static str {
        match self {
            Cmp::Lt => operators::LESS,
            Cmp::Le => operators::LESS_EQUALS,
            Cmp::Gt => operators::GREATER,
            Cmp::Ge => operators::GREATER_EQUALS,
        }
    }
}

/// String functions taking a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrFn {
    StartsWith,
    EndsWith,
    Contains,
}

/// A field name, resolved once: the keys of the records, or any other name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Name,
    Args,
    Result,
    ResultJson,
    Error,
    Position,
    DurationMs,
    Turn,
    Agent,
    Server,
    Model,
    InputTokens,
    OutputTokens,
    TotalTokens,
    Cost,
    StartTime,
    EndTime,
    Other,
}

impl Key {
    pub fn of(name: &str) -> Key {
        match name {
            "name" => Key::Name,
            "args" => Key::Args,
            "result" => Key::Result,
            "result_json" => Key::ResultJson,
            "error" => Key::Error,
            "position" => Key::Position,
            "duration_ms" => Key::DurationMs,
            "turn" => Key::Turn,
            "agent" => Key::Agent,
            "server" => Key::Server,
            "model" => Key::Model,
            "input_tokens" => Key::InputTokens,
            "output_tokens" => Key::OutputTokens,
            "total_tokens" => Key::TotalTokens,
            "cost" => Key::Cost,
            "start_time_unix_nano" => Key::StartTime,
            "end_time_unix_nano" => Key::EndTime,
            _ => Key::Other,
        }
    }
}

/// A field selection's name.
#[derive(Debug)]
pub struct Field {
    pub name: String,
    pub key: Key,
}

/// A macro's loop.
#[derive(Debug)]
pub enum Loop {
    /// `all`: stops at the first `false`.
    All(Node),
    /// `exists`: stops at the first `true`.
    Exists(Node),
    /// `exists_one`: a unit more for each element that passes (the `@result + 1` step).
    ExistsOne(Node),
    /// `map` (with its optional filter) and `filter` (which maps each element to itself).
    Map { guard: Option<Node>, item: Node },
}

/// A comprehension: its range, the slot of its variable, and its loop.
#[derive(Debug)]
pub struct Comprehension {
    pub range: Node,
    pub slot: usize,
    pub body: Loop,
}

/// A node of the plan.
#[derive(Debug)]
pub enum Node {
    Lit(Lit),
    Global(Global),
    /// A comprehension variable.
    Slot(usize),
    /// `x.f`, or `has(x.f)` when `test`.
    Select {
        operand: Box<Node>,
        field: Field,
        test: bool,
    },
    Index(Box<Node>, Box<Node>),
    /// One unit, then the node.
    Cost(Box<Node>),
    Cond(Box<[Node; 3]>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Neg(Box<Node>),
    Eq(Box<Node>, Box<Node>),
    Ne(Box<Node>, Box<Node>),
    Arith(Arith, Box<Node>, Box<Node>),
    Cmp(Cmp, Box<Node>, Box<Node>),
    In(Box<Node>, Box<Node>),
    Size(Box<Node>),
    Str(StrFn, Box<Node>, Box<Node>),
    Matches(Box<Node>, Box<regex::Regex>),
    List(Vec<Node>),
    Loop(Box<Comprehension>),
}

/// A compiled plan: its root and the number of variable slots an evaluation needs.
#[derive(Debug)]
pub struct Plan {
    pub root: Node,
    pub slots: usize,
}

/// The plan of `e` (the instrumented tree), or `None` when it uses anything the fast path
/// does not cover.
pub fn compile(e: &IdedExpr) -> Option<Plan> {
    let mut c = Compiler { scope: Vec::new(), slots: 0 };
    let root = c.node(e)?;
    Some(Plan { root, slots: c.slots })
}

struct Compiler {
    /// Comprehension variables in scope, innermost last, with their slots.
    scope: Vec<(String, usize)>,
    slots: usize,
}

fn is_ident(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == name)
}

fn is_bool(e: &IdedExpr, b: bool) -> bool {
    matches!(&e.expr, Expr::Literal(LiteralValue::Boolean(v)) if *v.inner() == b)
}

/// The call `e` is, when it has no target and `n` arguments.
fn call_of<'e>(e: &'e IdedExpr, name: &str, n: usize) -> Option<&'e [IdedExpr]> {
    match &e.expr {
        Expr::Call(c) if c.target.is_none() && c.args.len() == n && c.func_name == name => {
            Some(&c.args)
        }
        _ => None,
    }
}

/// `e` when the tree is `@cost() ? e : false`.
fn metered(e: &IdedExpr) -> Option<&IdedExpr> {
    let [cost, inner, otherwise] = call_of(e, operators::CONDITIONAL, 3)? else { return None };
    (call_of(cost, COST, 0).is_some() && is_bool(otherwise, false)).then_some(inner)
}

fn boxed(n: Node) -> Box<Node> {
    Box::new(n)
}

impl Compiler {
    fn node(&mut self, e: &IdedExpr) -> Option<Node> {
        match &e.expr {
            Expr::Literal(l) => Some(Node::Lit(match l {
                LiteralValue::Null => Lit::Null,
                LiteralValue::Boolean(b) => Lit::Bool(*b.inner()),
                LiteralValue::Int(i) => Lit::Int(*i.inner()),
                LiteralValue::UInt(u) => Lit::UInt(*u.inner()),
                LiteralValue::Double(d) => Lit::Double(*d.inner()),
                LiteralValue::String(s) => Lit::Str(s.inner().to_owned()),
                LiteralValue::Bytes(_) => return None,
            })),
            Expr::Ident(name) => self.ident(name),
            Expr::Select(s) => Some(Node::Select {
                operand: boxed(self.node(&s.operand)?),
                field: Field { name: s.field.clone(), key: Key::of(&s.field) },
                test: s.test,
            }),
            Expr::List(l) if l.optional_indices.is_empty() => {
                l.elements.iter().map(|x| self.node(x)).collect::<Option<_>>().map(Node::List)
            }
            Expr::Call(_) => self.call(e),
            Expr::Comprehension(c) => self.comprehension(c),
            _ => None,
        }
    }

    fn ident(&self, name: &str) -> Option<Node> {
        if let Some((_, slot)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Some(Node::Slot(*slot));
        }
        Some(Node::Global(match name {
            "calls" => Global::Calls,
            "answer" => Global::Answer,
            "metadata" => Global::Metadata,
            "model_calls" => Global::ModelCalls,
            "usage" => Global::Usage,
            // A type name (`int`, ...) or the accumulator outside the shapes below.
            _ => return None,
        }))
    }

    fn two(&mut self, args: &[IdedExpr]) -> Option<(Box<Node>, Box<Node>)> {
        Some((boxed(self.node(&args[0])?), boxed(self.node(&args[1])?)))
    }

    fn call(&mut self, e: &IdedExpr) -> Option<Node> {
        if let Some(inner) = metered(e) {
            return Some(Node::Cost(boxed(self.node(inner)?)));
        }
        let Expr::Call(call) = &e.expr else { return None };
        let args = &call.args;
        if let Some(target) = &call.target {
            let arg = |s: &mut Self| -> Option<Box<Node>> { Some(boxed(s.node(&args[0])?)) };
            return match (call.func_name.as_str(), args.len()) {
                ("size", 0) => Some(Node::Size(boxed(self.node(target)?))),
                (name @ ("startsWith" | "endsWith" | "contains"), 1) => {
                    let f = match name {
                        "startsWith" => StrFn::StartsWith,
                        "endsWith" => StrFn::EndsWith,
                        _ => StrFn::Contains,
                    };
                    Some(Node::Str(f, boxed(self.node(target)?), arg(self)?))
                }
                ("matches", 1) => {
                    let Expr::Literal(LiteralValue::String(p)) = &args[0].expr else {
                        return None;
                    };
                    // An invalid pattern is the interpreter's error to report.
                    let re = regex::Regex::new(p.inner()).ok()?;
                    Some(Node::Matches(boxed(self.node(target)?), Box::new(re)))
                }
                _ => None,
            };
        }
        let name = call.func_name.as_str();
        Some(match (name, args.len()) {
            (operators::CONDITIONAL, 3) => Node::Cond(Box::new([
                self.node(&args[0])?,
                self.node(&args[1])?,
                self.node(&args[2])?,
            ])),
            (operators::LOGICAL_AND, 2) => {
                let (a, b) = self.two(args)?;
                Node::And(a, b)
            }
            (operators::LOGICAL_OR, 2) => {
                let (a, b) = self.two(args)?;
                Node::Or(a, b)
            }
            (operators::LOGICAL_NOT, 1) => Node::Not(boxed(self.node(&args[0])?)),
            (operators::NEGATE, 1) => Node::Neg(boxed(self.node(&args[0])?)),
            ("size", 1) => Node::Size(boxed(self.node(&args[0])?)),
            (operators::EQUALS, 2) => {
                let (a, b) = self.two(args)?;
                Node::Eq(a, b)
            }
            (operators::NOT_EQUALS, 2) => {
                let (a, b) = self.two(args)?;
                Node::Ne(a, b)
            }
            (operators::INDEX, 2) => {
                let (a, b) = self.two(args)?;
                Node::Index(a, b)
            }
            (operators::IN, 2) => {
                let (a, b) = self.two(args)?;
                Node::In(a, b)
            }
            (operators::MODULO, 2) => {
                let (a, b) = self.two(args)?;
                Node::Arith(Arith::Rem, a, b)
            }
            (f @ ("@add" | "@sub" | "@mul" | "@div"), 2) => {
                let op = match f {
                    "@add" => Arith::Add,
                    "@sub" => Arith::Sub,
                    "@mul" => Arith::Mul,
                    _ => Arith::Div,
                };
                let (a, b) = self.two(args)?;
                Node::Arith(op, a, b)
            }
            (f @ ("@lt" | "@le" | "@gt" | "@ge"), 2) => {
                let op = match f {
                    "@lt" => Cmp::Lt,
                    "@le" => Cmp::Le,
                    "@gt" => Cmp::Gt,
                    _ => Cmp::Ge,
                };
                let (a, b) = self.two(args)?;
                Node::Cmp(op, a, b)
            }
            // The plain operators are left only in accumulator steps, matched below; other
            // functions are the interpreter's.
            _ => return None,
        })
    }

    /// The five macros, as the parser expands them and `cost::instrument` rewrites them.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Option<Node> {
        if c.iter_var2.is_some() {
            return None;
        }
        let accu = c.accu_var.as_str();
        // The range is evaluated outside the loop's scope.
        let range = self.node(&c.iter_range)?;
        let slot = self.scope.len();
        self.slots = self.slots.max(slot + 1);
        self.scope.push((c.iter_var.clone(), slot));
        let body = self.body(c, accu);
        self.scope.pop();
        Some(Node::Loop(Box::new(Comprehension { range, slot, body: body? })))
    }

    #[allow(clippy::many_single_char_names)] // the parts of each macro's shape
    fn body(&mut self, c: &ComprehensionExpr, accu: &str) -> Option<Loop> {
        let init = &c.accu_init.expr;
        let returns_accu = is_ident(&c.result, accu);
        let true_cond = is_bool(&c.loop_cond, true);
        // all: true, @not_strictly_false(@result), @result && P, @result.
        if is_bool(&c.accu_init, true) && returns_accu {
            let [a] = call_of(&c.loop_cond, operators::NOT_STRICTLY_FALSE, 1)? else {
                return None;
            };
            let [left, p] = call_of(&c.loop_step, operators::LOGICAL_AND, 2)? else {
                return None;
            };
            return (is_ident(a, accu) && is_ident(left, accu))
                .then(|| self.node(p).map(Loop::All))?;
        }
        // exists: false, @not_strictly_false(!@result), @result || P, @result.
        if is_bool(&c.accu_init, false) && returns_accu {
            let [not] = call_of(&c.loop_cond, operators::NOT_STRICTLY_FALSE, 1)? else {
                return None;
            };
            let [a] = call_of(not, operators::LOGICAL_NOT, 1)? else { return None };
            let [left, p] = call_of(&c.loop_step, operators::LOGICAL_OR, 2)? else {
                return None;
            };
            return (is_ident(a, accu) && is_ident(left, accu))
                .then(|| self.node(p).map(Loop::Exists))?;
        }
        // exists_one: 0, true, P ? @cost() ? @result + 1 : false : @result, @result == 1.
        if matches!(init, Expr::Literal(LiteralValue::Int(i)) if *i.inner() == 0) {
            let [r, one] = call_of(&c.result, operators::EQUALS, 2)? else { return None };
            let [p, bump, otherwise] = call_of(&c.loop_step, operators::CONDITIONAL, 3)? else {
                return None;
            };
            let [a, one2] = call_of(metered(bump)?, operators::ADD, 2)? else { return None };
            let is_one = |e: &IdedExpr| matches!(&e.expr, Expr::Literal(LiteralValue::Int(i)) if *i.inner() == 1);
            let shape = true_cond
                && is_ident(r, accu)
                && is_one(one)
                && is_ident(otherwise, accu)
                && is_ident(a, accu)
                && is_one(one2);
            return shape.then(|| self.node(p).map(Loop::ExistsOne))?;
        }
        // map / filter: [], true, [G ?] @result + [X] [: @result], @result.
        if matches!(init, Expr::List(l) if l.elements.is_empty()) && returns_accu && true_cond {
            let (guard, step) = match call_of(&c.loop_step, operators::CONDITIONAL, 3) {
                Some([g, step, otherwise]) if is_ident(otherwise, accu) => (Some(g), step),
                Some(_) => return None,
                None => (None, &c.loop_step),
            };
            let [a, list] = call_of(step, operators::ADD, 2)? else { return None };
            let Expr::List(items) = &list.expr else { return None };
            if !is_ident(a, accu) || items.elements.len() != 1 || !items.optional_indices.is_empty()
            {
                return None;
            }
            let guard = match guard {
                Some(g) => Some(self.node(g)?),
                None => None,
            };
            let item = self.node(&items.elements[0])?;
            return Some(Loop::Map { guard, item });
        }
        None
    }
}
