//! The decoded JSON value model shared by every matcher.
use super::lex::{Decimal, NumberText};
use std::fmt;

/// A JSON value. Numbers keep their exact decimal value; strings are code-point sequences.
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(Str),
    Array(Vec<Value>),
    Object(Object),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }
}

/// Deep equality per SPEC §2 (exact decimals, `true != 1`, key order irrelevant).
impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Number(a), Value::Number(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Array(a), Value::Array(b)) => a == b,
            (Value::Object(a), Value::Object(b)) => {
                a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
            }
            _ => false,
        }
    }
}

/// A JSON string as WTF-8 bytes: UTF-8, except that a lone surrogate from a `\uD800`-style
/// escape is kept as its 3-byte generalized encoding. Byte equality is code-point equality.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Str(Box<[u8]>);

impl Str {
    /// Wraps WTF-8 bytes produced by the parser (or any valid UTF-8).
    pub(crate) fn from_wtf8(bytes: Vec<u8>) -> Self {
        Str(bytes.into_boxed_slice())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The text, when it holds no lone surrogate.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The text with each lone surrogate replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        match self.as_str() {
            Some(s) => s.to_owned(),
            None => self.code_points().map(|c| char::from_u32(c).unwrap_or('\u{fffd}')).collect(),
        }
    }

    /// The code points, lone surrogates included.
    pub fn code_points(&self) -> CodePoints<'_> {
        CodePoints { bytes: &self.0, at: 0 }
    }
}

impl From<&str> for Str {
    fn from(s: &str) -> Self {
        Str(s.as_bytes().into())
    }
}

impl From<String> for Str {
    fn from(s: String) -> Self {
        Str(s.into_bytes().into_boxed_slice())
    }
}

impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string_lossy(), f)
    }
}

impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

/// Iterator over the code points of WTF-8 bytes.
pub struct CodePoints<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Iterator for CodePoints<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let b = self.bytes;
        let i = self.at;
        let first = *b.get(i)?;
        let (cp, len) = if first < 0x80 {
            (u32::from(first), 1)
        } else if first < 0xE0 {
            ((u32::from(first & 0x1F) << 6) | u32::from(b[i + 1] & 0x3F), 2)
        } else if first < 0xF0 {
            (
                (u32::from(first & 0x0F) << 12)
                    | (u32::from(b[i + 1] & 0x3F) << 6)
                    | u32::from(b[i + 2] & 0x3F),
                3,
            )
        } else {
            (
                (u32::from(first & 0x07) << 18)
                    | (u32::from(b[i + 1] & 0x3F) << 12)
                    | (u32::from(b[i + 2] & 0x3F) << 6)
                    | u32::from(b[i + 3] & 0x3F),
                4,
            )
        };
        self.at += len;
        Some(cp)
    }
}

/// A JSON number: the source text plus its exact decimal value `(-1)^negative * digits * 10^exponent`,
/// normalised (no leading or trailing zeros in `digits`; zero has empty digits and is never negative).
#[derive(Clone, Debug)]
pub struct Number {
    raw: Box<str>,
    negative: bool,
    digits: Box<str>,
    exponent: i64,
}

impl Number {
    /// Builds a number from the text of a decimal number (`-`, digits, `.`, digits, `e`,
    /// exponent; leading zeros allowed), normalised as the tokenizer does (one normalisation,
    /// `NumberText::decimal`, for every reader).
    pub(crate) fn from_json_text(raw: &str) -> Number {
        let s = raw.as_bytes();
        let negative = s.first() == Some(&b'-');
        let exp_at = s.iter().position(|b| matches!(b, b'e' | b'E')).unwrap_or(s.len());
        let dot = s[..exp_at].iter().position(|&b| b == b'.').unwrap_or(exp_at);
        let text = NumberText {
            start: 0,
            negative,
            int: (usize::from(negative), dot),
            frac: ((dot + 1).min(exp_at), exp_at),
            exp: ((exp_at + 1).min(s.len()), s.len()),
        };
        Number::from_decimal(raw, &text.decimal(s))
    }

    /// The number `raw` whose normalised value the tokenizer already worked out.
    pub(crate) fn from_decimal(raw: &str, d: &Decimal<'_>) -> Number {
        let digits: String = d.int.iter().chain(d.frac).map(|&b| char::from(b)).collect();
        Number {
            raw: raw.into(),
            negative: d.negative,
            digits: digits.into(),
            exponent: d.exponent,
        }
    }

    /// The number as written in the source text.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The nearest float64 (what JavaScript would hold); may be infinite.
    pub fn as_f64(&self) -> f64 {
        self.raw.parse::<f64>().unwrap_or(f64::NAN)
    }

    /// The value as an i64 when it is an integer within range.
    pub fn as_i64(&self) -> Option<i64> {
        if self.digits.is_empty() {
            return Some(0);
        }
        if self.exponent < 0 || self.exponent > 19 || self.digits.len() as i64 + self.exponent > 19
        {
            return None;
        }
        let mut text = String::with_capacity(21);
        if self.negative {
            text.push('-');
        }
        text.push_str(&self.digits);
        for _ in 0..self.exponent {
            text.push('0');
        }
        text.parse::<i64>().ok()
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Significant digits without leading or trailing zeros (empty for zero).
    pub fn digits(&self) -> &str {
        &self.digits
    }

    /// Power of ten applied to `digits`.
    pub fn exponent(&self) -> i64 {
        self.exponent
    }
}

impl PartialEq for Number {
    fn eq(&self, other: &Self) -> bool {
        self.negative == other.negative
            && self.exponent == other.exponent
            && self.digits == other.digits
    }
}

impl Eq for Number {}

impl std::hash::Hash for Number {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.negative.hash(state);
        self.exponent.hash(state);
        self.digits.hash(state);
    }
}

/// A JSON object: keys unique, in first-insertion order (the last duplicate's value wins).
#[derive(Clone, Debug, Default)]
pub struct Object {
    entries: Vec<(Str, Value)>,
}

impl Object {
    pub fn new() -> Self {
        Object { entries: Vec::new() }
    }

    /// Inserts or replaces (keeping the first position), as `JSON.parse` does with duplicates.
    pub fn insert(&mut self, key: Str, value: Value) {
        if let Some(slot) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            self.entries.push((key, value));
        }
    }

    pub fn get(&self, key: &Str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &Str) -> Option<&mut Value> {
        self.entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn remove(&mut self, key: &Str) -> Option<Value> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    pub fn contains_key(&self, key: &Str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in insertion order (not JS property order: see canonical.rs for that).
    pub fn iter(&self) -> impl Iterator<Item = (&Str, &Value)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Number {
        Number::from_json_text(s)
    }

    #[test]
    fn decimal_equality_is_exact() {
        assert_eq!(n("1"), n("1.0"));
        assert_eq!(n("1"), n("1e0"));
        assert_eq!(n("1"), n("10e-1"));
        assert_eq!(n("-0"), n("0"));
        assert_eq!(n("0.0e5"), n("-0.000"));
        assert_eq!(n("5000.00"), n("5e3"));
        assert_ne!(n("0.1"), n("0.10000000000000001"));
        assert_ne!(n("9007199254740993"), n("9007199254740992"));
        assert_ne!(n("1"), n("-1"));
        assert_eq!(n("1E+2"), n("100"));
    }

    #[test]
    fn as_i64_only_for_exact_integers() {
        assert_eq!(n("125e-1").as_i64(), None);
        assert_eq!(n("1.2e1").as_i64(), Some(12));
        assert_eq!(n("-9223372036854775808").as_i64(), Some(i64::MIN));
        assert_eq!(n("9223372036854775808").as_i64(), None);
    }
}
