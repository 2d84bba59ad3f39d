//! The fast path's values (see [`super::eval`]): scalars and handles that borrow the trace, the
//! plan's literals and the JSON parsed for one evaluation, so reading a call's field or
//! binding a comprehension variable copies a word or two and allocates nothing.
//!
//! Scalar equality and ordering are the `cel` crate's own: the scalar is lent to the crate as
//! its value type (built on the stack) and compared there, so both paths agree by
//! construction.
use std::cmp::Ordering;
use std::rc::Rc;

use cel::common::types::{CelBool, CelDouble, CelInt, CelNull, CelString, CelUInt};
use cel::common::value::Val;

use crate::json::Value;

/// A value on the fast path.
#[derive(Clone, Debug, Default)]
pub enum V<'a> {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(&'a str),
    /// The list `calls`; its elements are [`V::Call`]s.
    Calls,
    /// The call at this index of `calls`.
    Call(usize),
    ModelCalls,
    ModelCall(usize),
    Usage,
    Metadata,
    /// A JSON array or object (JSON scalars are read as the scalars above).
    Json(&'a Value),
    /// A list built by the expression (a list literal, `map`, `filter`).
    List(Rc<Vec<V<'a>>>),
}

/// A scalar lent to the crate as its own value type.
pub enum Scalar<'a> {
    Null(CelNull),
    Bool(CelBool),
    Int(CelInt),
    UInt(CelUInt),
    Double(CelDouble),
    Str(CelString<'a>),
}

impl Scalar<'_> {
    pub fn val(&self) -> &dyn Val {
        match self {
            Scalar::Null(v) => v,
            Scalar::Bool(v) => v,
            Scalar::Int(v) => v,
            Scalar::UInt(v) => v,
            Scalar::Double(v) => v,
            Scalar::Str(v) => v,
        }
    }
}

impl<'a> V<'a> {
    /// The value as the crate's scalar; `None` for lists, maps and records.
    pub fn scalar(&self) -> Option<Scalar<'a>> {
        Some(match *self {
            V::Null => Scalar::Null(CelNull),
            V::Bool(b) => Scalar::Bool(CelBool::from(b)),
            V::Int(i) => Scalar::Int(CelInt::from(i)),
            V::UInt(u) => Scalar::UInt(CelUInt::from(u)),
            V::Double(d) => Scalar::Double(CelDouble::from(d)),
            V::Str(s) => Scalar::Str(CelString::from(s)),
            _ => return None,
        })
    }

    /// A JSON value as CEL sees it (as `bind::json` converts it); `None` for a string that is
    /// not Unicode (the crate would read it lossily: left to the interpreter).
    pub fn json(v: &'a Value) -> Option<V<'a>> {
        Some(match v {
            Value::Null => V::Null,
            Value::Bool(b) => V::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => V::Int(i),
                None => V::Double(n.as_f64()),
            },
            Value::String(s) => V::Str(s.as_str()?),
            Value::Array(_) | Value::Object(_) => V::Json(v),
        })
    }

    /// A count as CEL sees a JSON number: `int` within int64, else `double`.
    #[allow(clippy::cast_precision_loss)]
    pub fn count(n: u128) -> V<'a> {
        match i64::try_from(n) {
            Ok(i) => V::Int(i),
            Err(_) => V::Double(n as f64),
        }
    }
}

/// `a == b` as the crate decides it, or `None` when the fast path does not compare these
/// (two containers).
pub fn equal(a: &V<'_>, b: &V<'_>) -> Option<bool> {
    // The common pairs without the crate's dispatch (its rules: the same as Rust's for these).
    #[allow(clippy::float_cmp)] // CEL's double equality is IEEE equality
    match (a, b) {
        (V::Str(x), V::Str(y)) => return Some(x == y),
        (V::Int(x), V::Int(y)) => return Some(x == y),
        (V::Double(x), V::Double(y)) => return Some(x == y),
        (V::Bool(x), V::Bool(y)) => return Some(x == y),
        (V::Null, V::Null) => return Some(true),
        // `null` equals nothing else (the crate builds, then drops, an error to say so).
        (V::Null, _) | (_, V::Null) => return Some(false),
        _ => {}
    }
    match (a.scalar(), b.scalar()) {
        (Some(x), Some(y)) => Some(x.val().equals(y.val())),
        // A scalar never equals a list, a map or a record, either way round.
        (Some(_), None) | (None, Some(_)) => Some(false),
        (None, None) => None,
    }
}

/// How `a` and `b` order for the ordering operators (`numbers::order_vals`); `None` where the
/// crate fails (or for containers).
#[allow(clippy::cast_precision_loss)] // mixed numbers compare as doubles (see `numbers`)
pub fn order(operator: &str, a: &V<'_>, b: &V<'_>) -> Option<Ordering> {
    // The common pairs without the crate's dispatch.
    match (a, b) {
        (V::Int(x), V::Int(y)) => return Some(x.cmp(y)),
        (V::Double(x), V::Double(y)) => return x.partial_cmp(y),
        (V::Int(x), V::Double(y)) => return (*x as f64).partial_cmp(y),
        (V::Double(x), V::Int(y)) => return x.partial_cmp(&(*y as f64)),
        (V::Str(x), V::Str(y)) => return Some(x.cmp(y)),
        _ => {}
    }
    let (x, y) = (a.scalar()?, b.scalar()?);
    super::numbers::order_vals(operator, x.val(), y.val()).ok()
}
