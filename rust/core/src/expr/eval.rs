//! The fast path: runs a [`Plan`] over the trace's own data, without the `cel` crate's
//! interpreter. Values borrow (see [`super::value`]), comprehension variables live in a fixed
//! array of slots, and an iteration allocates nothing.
//!
//! It gives the interpreter's answer or none: on anything that would be an error in the
//! interpreter (and on the few things it leaves to it, such as iterating a map, whose order
//! is the crate's `HashMap` order, or comparing two containers) it halts with
//! [`Halt::Fallback`], and the caller evaluates the expression again with the interpreter,
//! from scratch, so that error texts and CEL's error-absorbing `&&`/`||` stay the crate's.
//! Up to a halt it spends units exactly where the interpreter does (`Node::Cost`), on the
//! same [`Meter`]; so when the meter stops it, the interpreter would have stopped at that
//! same unit for the same reason, and [`Halt::Stop`] needs no second run.
use std::cell::OnceCell;
use std::rc::Rc;

use super::bind::{call_args, call_result, millis, parsed, turn, Parsed, Usage};
use super::cost::Meter;
use super::plan::{Arith, Comprehension, Global, Key, Lit, Loop, Node, Plan, StrFn};
use super::reads::Reads;
use super::value::{equal, order, V};
use super::{Bindings, MAX_COMPREHENSION_NESTING};
use crate::json::Value;

/// Why the fast path gave no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Halt {
    /// The interpreter must evaluate the expression.
    Fallback,
    /// The meter stopped the evaluation.
    Stop,
}

type Out<'a> = Result<V<'a>, Halt>;

/// Evaluates `plan`; `result_json` tells whether a call's `result_json` is parsed (else it
/// reads `null`, as bound for the interpreter).
pub fn run<'a>(
    plan: &'a Plan,
    b: &'a Bindings<'a>,
    parsed: &'a OnceCell<Vec<Parsed>>,
    result_json: bool,
    meter: &mut Meter,
) -> Out<'a> {
    debug_assert!(plan.slots <= MAX_COMPREHENSION_NESTING);
    let mut e = Eval { b, parsed, result_json, meter, slots: Default::default() };
    e.eval(&plan.root)
}

struct Eval<'a, 'm> {
    b: &'a Bindings<'a>,
    parsed: &'a OnceCell<Vec<Parsed>>,
    result_json: bool,
    meter: &'m mut Meter,
    slots: [V<'a>; MAX_COMPREHENSION_NESTING],
}

/// A list the fast path iterates and indexes.
enum Items<'a> {
    Calls(usize),
    ModelCalls(usize),
    List(Rc<Vec<V<'a>>>),
    Json(&'a [Value]),
}

impl<'a> Items<'a> {
    fn of(v: &V<'a>, b: &Bindings<'a>) -> Option<Items<'a>> {
        Some(match v {
            V::Calls => Items::Calls(b.calls.len()),
            V::ModelCalls => Items::ModelCalls(b.model_calls.len()),
            V::List(l) => Items::List(Rc::clone(l)),
            V::Json(Value::Array(items)) => Items::Json(items),
            _ => return None,
        })
    }

    fn len(&self) -> usize {
        match self {
            Items::Calls(n) | Items::ModelCalls(n) => *n,
            Items::List(l) => l.len(),
            Items::Json(items) => items.len(),
        }
    }

    fn get(&self, i: usize) -> Out<'a> {
        match self {
            Items::Calls(_) => Ok(V::Call(i)),
            Items::ModelCalls(_) => Ok(V::ModelCall(i)),
            Items::List(l) => Ok(l[i].clone()),
            Items::Json(items) => V::json(&items[i]).ok_or(Halt::Fallback),
        }
    }
}

fn bool_of(v: &V<'_>) -> Result<bool, Halt> {
    match v {
        V::Bool(b) => Ok(*b),
        _ => Err(Halt::Fallback),
    }
}

/// The entries of a JSON object, when every key is Unicode (the crate reads the others
/// lossily, so two keys could become one: left to the interpreter).
fn object(v: &Value) -> Option<&crate::json::Object> {
    let o = v.as_object()?;
    o.iter().all(|(k, _)| k.as_str().is_some()).then_some(o)
}

impl<'a> Eval<'a, '_> {
    #[allow(clippy::many_single_char_names)] // operands, as in the plan
    fn eval(&mut self, n: &'a Node) -> Out<'a> {
        match n {
            Node::Lit(l) => Ok(match l {
                Lit::Null => V::Null,
                Lit::Bool(b) => V::Bool(*b),
                Lit::Int(i) => V::Int(*i),
                Lit::UInt(u) => V::UInt(*u),
                Lit::Double(d) => V::Double(*d),
                Lit::Str(s) => V::Str(s),
            }),
            Node::Global(g) => Ok(match g {
                Global::Calls => V::Calls,
                Global::Answer => V::Str(self.b.answer),
                Global::Metadata => V::Metadata,
                Global::ModelCalls => V::ModelCalls,
                Global::Usage => V::Usage,
            }),
            Node::Slot(s) => Ok(self.slots[*s].clone()),
            Node::Cost(inner) => {
                if self.meter.spend() {
                    self.eval(inner)
                } else {
                    Err(Halt::Stop)
                }
            }
            Node::Select { operand, field, test } => {
                let v = self.eval(operand)?;
                let found = self.lookup(&v, &field.name, field.key)?;
                if *test {
                    Ok(V::Bool(found.is_some()))
                } else {
                    found.ok_or(Halt::Fallback)
                }
            }
            Node::Index(a, i) => {
                let v = self.eval(a)?;
                let i = self.eval(i)?;
                self.index(&v, &i)
            }
            Node::Cond(parts) => {
                let [c, yes, no] = &**parts;
                let c = self.eval(c)?;
                if bool_of(&c)? {
                    self.eval(yes)
                } else {
                    self.eval(no)
                }
            }
            // `&&` and `||` as the interpreter runs them when nothing fails: the left operand
            // decides alone, or the right one must be a bool.
            Node::And(a, b) => {
                if !bool_of(&self.eval(a)?)? {
                    return Ok(V::Bool(false));
                }
                Ok(V::Bool(bool_of(&self.eval(b)?)?))
            }
            Node::Or(a, b) => {
                if bool_of(&self.eval(a)?)? {
                    return Ok(V::Bool(true));
                }
                Ok(V::Bool(bool_of(&self.eval(b)?)?))
            }
            Node::Not(a) => Ok(V::Bool(!bool_of(&self.eval(a)?)?)),
            Node::Neg(a) => match self.eval(a)? {
                V::Int(i) => i.checked_neg().map(V::Int).ok_or(Halt::Fallback),
                V::Double(d) => Ok(V::Double(-d)),
                _ => Err(Halt::Fallback),
            },
            Node::Eq(a, b) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                equal(&a, &b).map(V::Bool).ok_or(Halt::Fallback)
            }
            Node::Ne(a, b) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                equal(&a, &b).map(|e| V::Bool(!e)).ok_or(Halt::Fallback)
            }
            Node::Arith(op, a, b) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                arith(*op, &a, &b).ok_or(Halt::Fallback)
            }
            Node::Cmp(op, a, b) => {
                let (x, y) = (self.eval(a)?, self.eval(b)?);
                let o = order(op.operator(), &x, &y).ok_or(Halt::Fallback)?;
                Ok(V::Bool(match op {
                    super::plan::Cmp::Lt => o.is_lt(),
                    super::plan::Cmp::Le => o.is_le(),
                    super::plan::Cmp::Gt => o.is_gt(),
                    super::plan::Cmp::Ge => o.is_ge(),
                }))
            }
            Node::In(a, c) => {
                let (a, c) = (self.eval(a)?, self.eval(c)?);
                self.contains(&c, &a).map(V::Bool)
            }
            Node::Size(a) => {
                let v = self.eval(a)?;
                let n = self.size(&v).ok_or(Halt::Fallback)?;
                Ok(V::Int(i64::try_from(n).map_err(|_| Halt::Fallback)?))
            }
            Node::Str(f, s, x) => {
                // The interpreter evaluates a method's arguments before its target.
                let x = self.eval(x)?;
                let s = self.eval(s)?;
                let (V::Str(s), V::Str(x)) = (s, x) else { return Err(Halt::Fallback) };
                Ok(V::Bool(match f {
                    StrFn::StartsWith => s.starts_with(x),
                    StrFn::EndsWith => s.ends_with(x),
                    StrFn::Contains => s.contains(x),
                }))
            }
            Node::Matches(s, re) => match self.eval(s)? {
                V::Str(s) => Ok(V::Bool(re.is_match(s))),
                _ => Err(Halt::Fallback),
            },
            Node::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for x in items {
                    out.push(self.eval(x)?);
                }
                Ok(V::List(Rc::new(out)))
            }
            Node::Loop(c) => self.comprehension(c),
        }
    }

    fn comprehension(&mut self, c: &'a Comprehension) -> Out<'a> {
        let range = self.eval(&c.range)?;
        // Maps iterate in `HashMap` order in the crate: left to it.
        let items = Items::of(&range, self.b).ok_or(Halt::Fallback)?;
        let n = items.len();
        match &c.body {
            Loop::All(p) | Loop::Exists(p) => {
                // `all` goes on while `true`, `exists` while `false`.
                let go_on = matches!(c.body, Loop::All(_));
                for i in 0..n {
                    self.slots[c.slot] = items.get(i)?;
                    if bool_of(&self.eval(p)?)? != go_on {
                        return Ok(V::Bool(!go_on));
                    }
                }
                Ok(V::Bool(go_on))
            }
            Loop::ExistsOne(p) => {
                let mut count = 0usize;
                for i in 0..n {
                    self.slots[c.slot] = items.get(i)?;
                    if bool_of(&self.eval(p)?)? {
                        // The unit of the step's `@result + 1`.
                        if !self.meter.spend() {
                            return Err(Halt::Stop);
                        }
                        count += 1;
                    }
                }
                Ok(V::Bool(count == 1))
            }
            Loop::Map { guard, item } => {
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    self.slots[c.slot] = items.get(i)?;
                    if let Some(g) = guard {
                        if !bool_of(&self.eval(g)?)? {
                            continue;
                        }
                    }
                    out.push(self.eval(item)?);
                }
                Ok(V::List(Rc::new(out)))
            }
        }
    }

    fn parsed(&self, i: usize) -> &'a Parsed {
        let all =
            self.parsed.get_or_init(|| parsed(self.b, Reads { calls: true, ..Reads::default() }));
        &all[i]
    }

    /// The value at string key `name` (`key` resolved) of a map or record: `Ok(None)` when it
    /// has no such key, `Fallback` when `v` is not a map the fast path reads.
    fn lookup(&self, v: &V<'a>, name: &str, key: Key) -> Result<Option<V<'a>>, Halt> {
        let b = self.b;
        Ok(match v {
            V::Call(i) => {
                let c = &b.calls[*i];
                Some(match key {
                    Key::Name => V::Str(c.name),
                    Key::Args => match call_args(c, self.parsed(*i), b.max_json_depth) {
                        Some(v) => V::json(v).ok_or(Halt::Fallback)?,
                        None => V::Null,
                    },
                    Key::Result => V::Str(c.result),
                    Key::ResultJson if self.result_json => {
                        match call_result(c, self.parsed(*i), b.max_json_depth) {
                            Some(v) => V::json(v).ok_or(Halt::Fallback)?,
                            None => V::Null,
                        }
                    }
                    Key::ResultJson => V::Null,
                    Key::Error => V::Bool(c.error),
                    Key::Position => V::Int(i64::from(c.position)),
                    Key::DurationMs => c.duration_ns.map_or(V::Null, |ns| V::Double(millis(ns))),
                    Key::Turn => V::Int(turn(c.turn)),
                    Key::Agent => V::Str(c.agent),
                    Key::Server => V::Str(c.server),
                    _ => return Ok(None),
                })
            }
            V::ModelCall(i) => {
                let m = &b.model_calls[*i];
                Some(match key {
                    Key::Model => V::Str(m.model),
                    Key::InputTokens => V::count(m.input_tokens.into()),
                    Key::OutputTokens => V::count(m.output_tokens.into()),
                    Key::Cost => m.cost.map_or(V::Null, V::Double),
                    Key::Turn => V::Int(turn(m.turn)),
                    Key::Agent => V::Str(m.agent),
                    Key::StartTime => V::count(m.start_time_unix_nano.into()),
                    Key::EndTime => V::count(m.end_time_unix_nano.into()),
                    _ => return Ok(None),
                })
            }
            V::Usage => {
                let u = Usage::of(b.model_calls);
                Some(match key {
                    Key::InputTokens => V::count(u.input),
                    Key::OutputTokens => V::count(u.output),
                    Key::TotalTokens => V::count(u.input + u.output),
                    Key::Cost => u.cost.map_or(V::Null, V::Double),
                    _ => return Ok(None),
                })
            }
            // A later duplicate key wins.
            V::Metadata => {
                b.metadata.iter().rev().find(|(k, _)| *k == name).map(|(_, v)| V::Str(v))
            }
            V::Json(j) => {
                let o = object(j).ok_or(Halt::Fallback)?;
                match o.iter().find(|(k, _)| k.as_str() == Some(name)) {
                    Some((_, v)) => Some(V::json(v).ok_or(Halt::Fallback)?),
                    None => None,
                }
            }
            _ => return Err(Halt::Fallback),
        })
    }

    fn index(&self, v: &V<'a>, i: &V<'a>) -> Out<'a> {
        match i {
            V::Str(k) => self.lookup(v, k, Key::of(k))?.ok_or(Halt::Fallback),
            V::Int(i) => {
                let items = Items::of(v, self.b).ok_or(Halt::Fallback)?;
                let i = usize::try_from(*i).map_err(|_| Halt::Fallback)?;
                if i < items.len() {
                    items.get(i)
                } else {
                    Err(Halt::Fallback)
                }
            }
            _ => Err(Halt::Fallback),
        }
    }

    /// `a in c`.
    fn contains(&self, c: &V<'a>, a: &V<'a>) -> Result<bool, Halt> {
        if let Some(items) = Items::of(c, self.b) {
            for i in 0..items.len() {
                // The crate asks each element whether it equals `a`.
                if equal(&items.get(i)?, a).ok_or(Halt::Fallback)? {
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        match a {
            V::Str(k) => Ok(self.lookup(c, k, Key::of(k))?.is_some()),
            _ => Err(Halt::Fallback),
        }
    }

    fn size(&self, v: &V<'a>) -> Option<usize> {
        Some(match v {
            V::Str(s) => s.chars().count(),
            V::Call(_) => 10,
            V::ModelCall(_) => 8,
            V::Usage => 4,
            V::Metadata => {
                let m = self.b.metadata;
                (0..m.len()).filter(|&i| !m[i + 1..].iter().any(|(k, _)| *k == m[i].0)).count()
            }
            V::Json(j @ Value::Object(_)) => object(j)?.len(),
            _ => Items::of(v, self.b)?.len(),
        })
    }
}

/// The mixed-number arithmetic of `numbers` (doubles when the operands are numbers of
/// different types) and the crate's own for one type; `None` where the crate fails.
#[allow(clippy::cast_precision_loss)]
fn arith<'a>(op: Arith, a: &V<'a>, b: &V<'a>) -> Option<V<'a>> {
    let float = |v: &V<'_>| match *v {
        V::Int(i) => Some(i as f64),
        V::UInt(u) => Some(u as f64),
        V::Double(d) => Some(d),
        _ => None,
    };
    let same = std::mem::discriminant(a) == std::mem::discriminant(b);
    if !same && op != Arith::Rem {
        let (x, y) = (float(a)?, float(b)?);
        return Some(V::Double(match op {
            Arith::Add => x + y,
            Arith::Sub => x - y,
            Arith::Mul => x * y,
            Arith::Div => x / y,
            Arith::Rem => unreachable!("% does not mix"),
        }));
    }
    Some(match (a, b) {
        (V::Int(x), V::Int(y)) => V::Int(match op {
            Arith::Add => x.checked_add(*y)?,
            Arith::Sub => x.checked_sub(*y)?,
            Arith::Mul => x.checked_mul(*y)?,
            Arith::Div => x.checked_div(*y)?,
            Arith::Rem => x.checked_rem(*y)?,
        }),
        (V::UInt(x), V::UInt(y)) => V::UInt(match op {
            Arith::Add => x.checked_add(*y)?,
            Arith::Sub => x.checked_sub(*y)?,
            Arith::Mul => x.checked_mul(*y)?,
            Arith::Div => x.checked_div(*y)?,
            Arith::Rem => x.checked_rem(*y)?,
        }),
        (V::Double(x), V::Double(y)) => V::Double(match op {
            Arith::Add => x + y,
            Arith::Sub => x - y,
            Arith::Mul => x * y,
            Arith::Div => x / y,
            Arith::Rem => return None,
        }),
        _ => return None,
    })
}
