//! JSON comparison modes (EXACT, SUBSET, PARTIAL) with difference counting for reasons (§9.7).
use std::fmt::Write;

use super::canonical::to_canonical;
use super::value::{Str, Value};

/// How expected arguments are compared with actual ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Deep equality.
    Exact,
    /// Every top-level expected key present in actual with a deep-equal value.
    Subset,
    /// Recursive subset: objects as SUBSET recursing, arrays same length element-wise.
    Partial,
}

/// How numbers compare where a comparison walk stands: exactly (§2) or within a tolerance
/// (§12, [`Within`](super::tolerance::Within)). `key` and `element` give the rule one level
/// down, so a tolerance limited to key paths knows where it applies.
pub trait NumberRule: Sized {
    /// The rule under object key `k`.
    #[must_use]
    fn key(&self, k: &Str) -> Self;
    /// The rule for an array element.
    #[must_use]
    fn element(&self) -> Self;
    /// Deep equality at this position.
    fn equal(&self, e: &Value, a: &Value) -> bool;
}

/// Exact decimal equality, the v1 rule: a zero-sized rule, so the walks compile to what they
/// were before tolerance existed.
#[derive(Clone, Copy, Debug)]
pub struct Exact;

impl NumberRule for Exact {
    #[inline]
    fn key(&self, _: &Str) -> Self {
        Exact
    }

    #[inline]
    fn element(&self) -> Self {
        Exact
    }

    #[inline]
    fn equal(&self, e: &Value, a: &Value) -> bool {
        e == a
    }
}

/// True when `actual` satisfies `expected` under `mode` (the fast path: no allocation).
pub fn matches(expected: &Value, actual: &Value, mode: Mode) -> bool {
    matches_by(expected, actual, mode, &Exact)
}

/// [`matches`] with numbers compared by `n`.
pub fn matches_by<N: NumberRule>(expected: &Value, actual: &Value, mode: Mode, n: &N) -> bool {
    match (mode, expected, actual) {
        (Mode::Subset, Value::Object(e), Value::Object(a)) => {
            e.iter().all(|(k, ev)| a.get(k).is_some_and(|av| n.key(k).equal(av, ev)))
        }
        (Mode::Partial, Value::Object(e), Value::Object(a)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| matches_by(ev, av, Mode::Partial, &n.key(k)))),
        (Mode::Partial, Value::Array(e), Value::Array(a)) => {
            let inner = n.element();
            e.len() == a.len()
                && e.iter().zip(a).all(|(ev, av)| matches_by(ev, av, Mode::Partial, &inner))
        }
        _ => n.equal(expected, actual),
    }
}

/// The differences between expected and actual: how many, and the first one described.
#[derive(Clone, Debug, Default)]
pub struct Diff {
    pub count: usize,
    /// `$.amount_cents expected 5000, got 500`.
    pub first: Option<String>,
}

/// Counts differences (§9.7: each missing key, extra key under EXACT, unequal scalar, type
/// mismatch, extra or missing array element counts 1) and describes the first one.
pub fn diff(expected: &Value, actual: &Value, mode: Mode) -> Diff {
    diff_by(expected, actual, mode, &Exact)
}

/// [`diff`] with numbers compared by `n` (a number within tolerance is no difference).
pub fn diff_by<N: NumberRule>(expected: &Value, actual: &Value, mode: Mode, n: &N) -> Diff {
    let mut d = Differ { diff: Diff::default(), path: String::from("$") };
    d.walk(expected, actual, mode, true, n);
    d.diff
}

struct Differ {
    diff: Diff,
    path: String,
}

/// Longest rendering of a value inside a reason.
const MAX_SHOWN: usize = 60;

/// A value for a reason: its canonical text, shortened.
pub fn show(v: &Value) -> String {
    // Numbers as written: canonical text rounds through float64 and could hide the difference.
    let mut s = match v {
        Value::Number(n) => n.raw().to_owned(),
        _ => to_canonical(v),
    };
    if s.len() > MAX_SHOWN {
        let mut cut = MAX_SHOWN;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// True when `s` holds characters that print as nothing on their own (combining marks,
/// zero-width characters, replacement characters standing for lone surrogates).
pub(super) fn invisible(s: &str) -> bool {
    s.chars().any(|c| {
        matches!(c, '\u{0300}'..='\u{036f}' | '\u{200b}'..='\u{200f}' | '\u{feff}' | '\u{fffd}')
    })
}

/// Writes every non-ASCII character as `\uXXXX` escapes (UTF-16 units, as JSON does).
pub(super) fn escape_non_ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{u:04x}");
            }
        }
    }
    out
}

pub(super) fn push_key(path: &mut String, key: &Str) {
    let plain = key.as_str().filter(|k| {
        !k.is_empty()
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !k.starts_with(|c: char| c.is_ascii_digit())
    });
    match plain {
        Some(k) => {
            path.push('.');
            path.push_str(k);
        }
        None => {
            let _ = write!(path, "[{}]", to_canonical(&Value::String(key.clone())));
        }
    }
}

impl Differ {
    fn note(&mut self, describe: impl FnOnce(&str) -> String) {
        self.diff.count += 1;
        if self.diff.first.is_none() {
            self.diff.first = Some(describe(&self.path));
        }
    }

    /// `top`: SUBSET compares top-level keys only, deep-equal below.
    fn walk<N: NumberRule>(&mut self, e: &Value, a: &Value, mode: Mode, top: bool, n: &N) {
        match (e, a) {
            (Value::Object(eo), Value::Object(ao)) => {
                let exact = mode == Mode::Exact;
                let child_mode = if mode == Mode::Subset && top { Mode::Exact } else { mode };
                for (k, ev) in eo.iter() {
                    let len = self.path.len();
                    push_key(&mut self.path, k);
                    match ao.get(k) {
                        Some(av) => self.walk(ev, av, child_mode, false, &n.key(k)),
                        None => self.note(|p| {
                            format!("{p} expected {}, got nothing (key missing)", show(ev))
                        }),
                    }
                    self.path.truncate(len);
                }
                if exact {
                    for (k, av) in ao.iter() {
                        if !eo.contains_key(k) {
                            let len = self.path.len();
                            push_key(&mut self.path, k);
                            self.note(|p| format!("{p} is not expected, got {}", show(av)));
                            self.path.truncate(len);
                        }
                    }
                }
            }
            (Value::Array(ea), Value::Array(aa)) if mode != Mode::Subset || !top => {
                let inner = n.element();
                for (i, (ev, av)) in ea.iter().zip(aa).enumerate() {
                    let len = self.path.len();
                    let _ = write!(self.path, "[{i}]");
                    self.walk(ev, av, mode, false, &inner);
                    self.path.truncate(len);
                }
                if ea.len() != aa.len() {
                    let (el, al) = (ea.len(), aa.len());
                    for _ in 0..el.abs_diff(al) {
                        self.note(|p| format!("{p} expected {el} elements, got {al}"));
                    }
                }
            }
            _ => {
                if e.type_name() != a.type_name() || !n.equal(e, a) {
                    self.note(|p| {
                        let (mut es, mut as_) = (show(e), show(a));
                        if invisible(&es) || invisible(&as_) {
                            // Combining or zero-width characters hide the difference in print:
                            // show the code points.
                            (es, as_) = (escape_non_ascii(&es), escape_non_ascii(&as_));
                        }
                        format!("{p} expected {es}, got {as_}")
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{diff, matches, Mode};
    use crate::json::{parse, Value};

    fn v(t: &str) -> Value {
        parse(t, 128).unwrap()
    }

    #[test]
    fn modes() {
        assert!(matches(&v(r#"{"a":1}"#), &v(r#"{"a":1.0,"b":2}"#), Mode::Subset));
        assert!(!matches(&v(r#"{"a":{"x":1}}"#), &v(r#"{"a":{"x":1,"y":2}}"#), Mode::Subset));
        assert!(matches(&v(r#"{"a":{"x":1}}"#), &v(r#"{"a":{"x":1,"y":2}}"#), Mode::Partial));
        assert!(!matches(&v(r#"{"a":[1]}"#), &v(r#"{"a":[1,2]}"#), Mode::Partial));
        assert!(!matches(&v("true"), &v("1"), Mode::Exact));
    }

    #[test]
    fn counting() {
        let d = diff(&v(r#"{"a":1,"b":[1,2,3]}"#), &v(r#"{"b":[1,5],"c":0}"#), Mode::Exact);
        assert_eq!(d.count, 4);
        let d = diff(&v(r#"{"amount_cents":5000}"#), &v(r#"{"amount_cents":500}"#), Mode::Subset);
        assert_eq!(d.count, 1);
        assert!(d.first.unwrap_or_default().starts_with("$.amount_cents expected"));
    }
}
