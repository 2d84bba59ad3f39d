//! A strict JSON parser with `JSON.parse` semantics and an explicit depth limit.
//!
//! Hand-written because no maintained crate keeps all three of: exact decimal numbers,
//! lone-surrogate escapes (JS accepts `"\uD800"`), and an error instead of a stack overflow
//! at a configurable depth. It is iterative-by-depth-bound: recursion never exceeds `max_depth`.
use std::fmt;

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
    let mut p = Parser { s: text.as_bytes(), i: 0, text, max_depth };
    p.skip_ws();
    let v = p.value(0)?;
    p.skip_ws();
    if p.i < p.s.len() {
        return Err(p.err("unexpected data after the JSON value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    text: &'a str,
    max_depth: usize,
}

impl Parser<'_> {
    #[cold]
    #[allow(clippy::naive_bytecount)] // error path only: not worth a bytecount dependency
    fn err(&self, message: &str) -> ParseError {
        let at = self.i.min(self.s.len());
        let before = &self.text.as_bytes()[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
        let message = if at >= self.s.len() {
            format!("{message} (unexpected end of input)")
        } else {
            message.to_owned()
        };
        ParseError { message, line, column, offset: at }
    }

    fn skip_ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        match self.s.get(self.i) {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.err("expected a JSON value")),
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, ParseError> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("expected a JSON value"))
        }
    }

    fn check_depth(&self, depth: usize) -> Result<(), ParseError> {
        if depth > self.max_depth {
            Err(self.err(&format!("nesting deeper than the limit of {}", self.max_depth)))
        } else {
            Ok(())
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.check_depth(depth)?;
        self.i += 1;
        let mut obj = Object::new();
        self.skip_ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Value::Object(obj));
        }
        loop {
            self.skip_ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.err("expected a string key"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.s.get(self.i) != Some(&b':') {
                return Err(self.err("expected ':' after an object key"));
            }
            self.i += 1;
            self.skip_ws();
            let v = self.value(depth)?;
            obj.insert(key, v);
            self.skip_ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(obj));
                }
                _ => return Err(self.err("expected ',' or '}' in an object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.check_depth(depth)?;
        self.i += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']' in an array")),
            }
        }
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.i;
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        match self.s.get(self.i) {
            Some(b'0') => {
                self.i += 1;
                if matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                    return Err(self.err("leading zeros are not allowed in numbers"));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("expected a digit")),
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return Err(self.err("expected a digit after the decimal point"));
            }
            self.digits();
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return Err(self.err("expected a digit in the exponent"));
            }
            self.digits();
        }
        Ok(Value::Number(Number::from_json_text(&self.text[start..self.i])))
    }

    fn digits(&mut self) {
        while matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let Some(h) = self.s.get(self.i..self.i + 4) else {
            return Err(self.err("expected four hex digits in a \\u escape"));
        };
        let mut v = 0u32;
        for &c in h {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(self.err("expected four hex digits in a \\u escape")),
            };
            v = v * 16 + u32::from(d);
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<Str, ParseError> {
        self.i += 1; // opening quote
        let mut out: Vec<u8> = Vec::new();
        loop {
            // Copy the run of plain bytes at once (the input is valid UTF-8 already).
            let run_start = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.extend_from_slice(&self.s[run_start..self.i]);
            match self.s.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Str::from_wtf8(out));
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("unterminated string"));
                    };
                    self.i += 1;
                    let c = match e {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0C,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let cp = self.unicode_escape()?;
                            push_wtf8(&mut out, cp);
                            continue;
                        }
                        _ => {
                            self.i -= 1;
                            return Err(self.err("invalid escape in a string"));
                        }
                    };
                    out.push(c);
                }
                Some(_) => return Err(self.err("control character in a string")),
            }
        }
    }

    /// After `\u`: one code point, joining a surrogate pair written as two escapes.
    fn unicode_escape(&mut self) -> Result<u32, ParseError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.s[self.i..].starts_with(b"\\u") {
            let save = self.i;
            self.i += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                return Ok(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00));
            }
            self.i = save; // a lone high surrogate followed by another escape
        }
        Ok(first)
    }
}

/// Appends a code point (a lone surrogate included) in generalized UTF-8.
fn push_wtf8(out: &mut Vec<u8>, cp: u32) {
    if cp < 0x80 {
        out.push(cp as u8);
    } else if cp < 0x800 {
        out.push(0xC0 | (cp >> 6) as u8);
        out.push(0x80 | (cp & 0x3F) as u8);
    } else if cp < 0x10000 {
        out.push(0xE0 | (cp >> 12) as u8);
        out.push(0x80 | ((cp >> 6) & 0x3F) as u8);
        out.push(0x80 | (cp & 0x3F) as u8);
    } else {
        out.push(0xF0 | (cp >> 18) as u8);
        out.push(0x80 | ((cp >> 12) & 0x3F) as u8);
        out.push(0x80 | ((cp >> 6) & 0x3F) as u8);
        out.push(0x80 | (cp & 0x3F) as u8);
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
