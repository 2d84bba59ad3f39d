//! A strict JSON parser with `JSON.parse` semantics and an explicit depth limit: the
//! tokenizer's walk (`lex.rs`) building a `Value`.
//!
//! Hand-written because no maintained crate keeps all three of: exact decimal numbers,
//! lone-surrogate escapes (JS accepts `"\uD800"`), and an error instead of a stack overflow
//! at a configurable depth. Recursion never exceeds `max_depth`.
use std::fmt;

use super::lex::{self, ErrorKind, LexError, Lexer, Literal, NumberText, Sink};
use super::value::{Number, Object, Str, Value};

/// Why a text is not JSON, with the 1-based line and column of the offending character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub message: String,
    pub line: usize,
    pub column: usize,
    pub offset: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at line {} column {}", self.message, self.line, self.column)
    }
}

impl std::error::Error for ParseError {}

/// Parses one JSON text. Containers nested deeper than `max_depth` are an error.
pub fn parse(text: &str, max_depth: usize) -> Result<Value, ParseError> {
    match lex::walk(text.as_bytes(), max_depth, &mut Build { text }) {
        Ok((_, v)) => Ok(v),
        Err(e) => Err(error(text, e, max_depth)),
    }
}

/// The message for a tokenizer error, with its line and column.
#[cold]
#[allow(clippy::naive_bytecount)] // error path only: not worth a bytecount dependency
fn error(text: &str, e: LexError, max_depth: usize) -> ParseError {
    let message = match e.kind {
        ErrorKind::ExpectedValue => "expected a JSON value",
        ErrorKind::ExpectedKey => "expected a string key",
        ErrorKind::ExpectedColon => "expected ':' after an object key",
        ErrorKind::ExpectedObjectEnd => "expected ',' or '}' in an object",
        ErrorKind::ExpectedArrayEnd => "expected ',' or ']' in an array",
        ErrorKind::LeadingZero => "leading zeros are not allowed in numbers",
        ErrorKind::ExpectedDigit => "expected a digit",
        ErrorKind::ExpectedFractionDigit => "expected a digit after the decimal point",
        ErrorKind::ExpectedExponentDigit => "expected a digit in the exponent",
        ErrorKind::BadHex => "expected four hex digits in a \\u escape",
        ErrorKind::BadEscape => "invalid escape in a string",
        ErrorKind::ControlCharacter => "control character in a string",
        ErrorKind::Unterminated => "unterminated string",
        ErrorKind::TrailingData => "unexpected data after the JSON value",
        ErrorKind::TooDeep | ErrorKind::Rejected => "",
    };
    let message = if e.kind == ErrorKind::TooDeep {
        format!("nesting deeper than the limit of {max_depth}")
    } else {
        message.to_owned()
    };
    let bytes = text.as_bytes();
    let at = e.at.min(bytes.len());
    let before = &bytes[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
    let message =
        if at >= bytes.len() { format!("{message} (unexpected end of input)") } else { message };
    ParseError { message, line, column, offset: at }
}

/// Builds the `Value`.
struct Build<'t> {
    text: &'t str,
}

impl Sink for Build<'_> {
    type Value = Value;
    type Key = Str;
    type Object = Object;
    type Array = Vec<Value>;

    #[inline]
    fn string(&mut self, lx: &mut Lexer<'_>) -> Result<Value, LexError> {
        Ok(Value::String(Self::key_str(lx)?))
    }

    #[inline]
    fn key(&mut self, lx: &mut Lexer<'_>, _: &mut Object) -> Result<Str, LexError> {
        Self::key_str(lx)
    }

    fn number(&mut self, s: &[u8], n: &NumberText) -> Value {
        Value::Number(Number::from_decimal(&self.text[n.start..n.end()], &n.decimal(s)))
    }

    fn literal(&mut self, l: Literal) -> Value {
        match l {
            Literal::True => Value::Bool(true),
            Literal::False => Value::Bool(false),
            Literal::Null => Value::Null,
        }
    }

    fn begin_object(&mut self, _: usize) -> Object {
        Object::new()
    }

    /// The last duplicate wins (in the first one's position: `Object::insert`).
    fn member(&mut self, o: &mut Object, k: Str, _: usize, v: Value) {
        o.insert(k, v);
    }

    fn end_object(&mut self, o: Object) -> Value {
        Value::Object(o)
    }

    fn begin_array(&mut self) -> Vec<Value> {
        Vec::new()
    }

    fn element(&mut self, a: &mut Vec<Value>, v: Value) {
        a.push(v);
    }

    fn end_array(&mut self, a: Vec<Value>) -> Value {
        Value::Array(a)
    }
}

impl Build<'_> {
    /// The decoded string at the cursor (WTF-8: lone surrogates kept).
    #[inline]
    fn key_str(lx: &mut Lexer<'_>) -> Result<Str, LexError> {
        let mut out = Vec::new();
        lx.string(&mut out)?;
        Ok(Str::from_wtf8(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(t: &str) -> Value {
        parse(t, 128).unwrap_or_else(|e| panic!("{t}: {e}"))
    }

    #[test]
    fn rejects_what_json_parse_rejects() {
        for bad in [
            "{\"a\":",
            "{'a': 1}",
            "{\"a\":NaN}",
            "{\"a\":1,}",
            "{\"a\":01}",
            "\u{feff}{}",
            "{\"a\":\"x\ty\"}",
            "\u{a0}{\"a\":1}",
            "{\"a\":1}{\"b\":2}",
            "[Infinity]",
            "yes",
            "",
            "1.",
            "-",
            "\"\\x\"",
        ] {
            assert!(parse(bad, 128).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn duplicates_last_wins_first_position() {
        let Value::Object(o) = ok(r#"{"a":1,"b":2,"a":3}"#) else { panic!() };
        let keys: Vec<String> = o.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(o.get(&Str::from("a")), Some(&ok("3")));
    }

    #[test]
    fn surrogates() {
        assert_eq!(ok(r#""\ud83d\ude00""#), ok("\"😀\""));
        let Value::String(s) = ok(r#""\uD800x""#) else { panic!() };
        assert!(s.as_str().is_none());
        assert_eq!(s.code_points().collect::<Vec<_>>(), [0xD800, u32::from('x')]);
    }

    #[test]
    fn depth_limit_is_an_error_not_an_overflow() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(&deep(128), 128).is_ok());
        let e = parse(&deep(129), 128).unwrap_err();
        assert!(e.message.contains("128"), "{e}");
        assert!(parse(&deep(100_000), 128).is_err());
    }

    #[test]
    fn error_position() {
        let e = parse("{\n  \"a\": tru }", 128).unwrap_err();
        assert_eq!((e.line, e.column), (2, 8));
    }
}
