//! Attribute and JSON values as the Python importer saw them: `json.loads` with exact numbers
//! (`exact_json.loads`), its compact re-serialisation (`exact_json.dumps`, and the
//! `json.dumps(default=str)` fallback), Python equality and `repr`. The mapping's output text
//! (arguments, results, report details) depends on these, so they follow `CPython` exactly.
use std::fmt::Write as _;

/// A value of an OTLP attribute (`AnyValue`) or of parsed attribute JSON.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    /// Python `int`, as its decimal text (JSON integers are unbounded).
    Int(String),
    Float(f64),
    /// Python `Decimal` of a JSON number with a fraction or exponent.
    Decimal(Dec),
    Str(String),
    List(Vec<Value>),
    Dict(Dict),
}

/// `Decimal`: sign, coefficient digits (no leading zeros, `"0"` for zero) and exponent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dec {
    neg: bool,
    digits: String,
    exp: i64,
}

/// A Python dict: first position of a key, last value.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Dict(pub(crate) Vec<(String, Value)>);

impl Dict {
    pub(crate) fn insert(&mut self, key: String, value: Value) {
        if let Some(slot) = self.0.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            self.0.push((key, value));
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

impl Value {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A non-empty string (Python's `isinstance(v, str) and v`).
    pub(crate) fn nonempty_str(&self) -> Option<&str> {
        self.as_str().filter(|s| !s.is_empty())
    }

    /// Python truthiness.
    pub(crate) fn truthy(&self) -> bool {
        match self {
            Value::None => false,
            Value::Bool(b) => *b,
            Value::Int(s) => s != "0",
            Value::Float(f) => *f != 0.0,
            Value::Decimal(d) => d.digits != "0",
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Dict(d) => !d.0.is_empty(),
        }
    }

    /// Python `str(value)` of the values `str()` is applied to (ids, group keys).
    pub(crate) fn py_str(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            other => repr(other),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Numbers

/// Python `repr(float)` (`'r'` format, shortest round trip).
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let mut out = String::new();
    crate::rows::push_float(&mut out, x);
    out
}

impl Dec {
    fn from_json(text: &str) -> Dec {
        let (neg, rest) = text.strip_prefix('-').map_or((false, text), |r| (true, r));
        let (mant, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().unwrap_or(0)),
            None => (rest, 0),
        };
        let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
        let all = format!("{int}{frac}");
        let trimmed = all.trim_start_matches('0');
        let digits = if trimmed.is_empty() { "0".to_string() } else { trimmed.to_string() };
        Dec { neg, digits, exp: exp - frac.len() as i64 }
    }

    /// `str(Decimal)` (to-scientific-string).
    fn to_text(&self) -> String {
        let n = self.digits.len() as i64;
        let left = self.exp + n;
        let dot = if self.exp <= 0 && left > -6 { left } else { 1 };
        let mut out = String::new();
        if self.neg {
            out.push('-');
        }
        if dot <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-dot) as usize));
            out.push_str(&self.digits);
        } else if dot >= n {
            out.push_str(&self.digits);
            out.extend(std::iter::repeat_n('0', (dot - n) as usize));
        } else {
            out.push_str(&self.digits[..dot as usize]);
            out.push('.');
            out.push_str(&self.digits[dot as usize..]);
        }
        if left != dot {
            let _ = write!(out, "E{:+}", left - dot);
        }
        out
    }
}

/// A finite number normalised for equality: sign, significant digits, exponent.
#[derive(PartialEq)]
enum Num {
    Finite(bool, String, i64),
    NaN,
    Inf(bool),
}

fn normal(neg: bool, digits: &str, exp: i64) -> Num {
    let d = digits.trim_start_matches('0');
    let t = d.trim_end_matches('0');
    if t.is_empty() {
        return Num::Finite(false, String::new(), 0);
    }
    Num::Finite(neg, t.to_string(), exp + (d.len() - t.len()) as i64)
}

fn number(v: &Value) -> Option<Num> {
    Some(match v {
        Value::Bool(b) => normal(false, if *b { "1" } else { "0" }, 0),
        Value::Int(s) => {
            let (neg, d) = s.strip_prefix('-').map_or((false, s.as_str()), |r| (true, r));
            normal(neg, d, 0)
        }
        Value::Decimal(d) => normal(d.neg, &d.digits, d.exp),
        Value::Float(f) if f.is_nan() => Num::NaN,
        Value::Float(f) if f.is_infinite() => Num::Inf(*f < 0.0),
        Value::Float(f) => {
            // Exact binary value: digits of the shortest repr are not enough for equality with
            // an exact decimal, so expand (finite floats only come from OTLP doubles here).
            let text = format!("{:.1100e}", f.abs());
            let (m, e) = text.split_once('e')?;
            let digits: String = m.chars().filter(char::is_ascii_digit).collect();
            normal(*f < 0.0, &digits, e.parse::<i64>().ok()? - (digits.len() as i64 - 1))
        }
        _ => return None,
    })
}

/// Python `==` on parsed values (bool is an int, int == Decimal by value, NaN != NaN).
pub(crate) fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::None, Value::None) => true,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Dict(x), Value::Dict(y)) => {
            x.0.len() == y.0.len() && x.0.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        _ => match (number(a), number(b)) {
            (Some(Num::NaN), _) | (_, Some(Num::NaN)) => false,
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Serialisation

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `exact_json.dumps`; `None` where it raises (a non-finite float).
fn dumps_exact(v: &Value, out: &mut String) -> Option<()> {
    match v {
        Value::None => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Str(s) => json_string(s, out),
        Value::Int(s) => out.push_str(s),
        Value::Decimal(d) => out.push_str(&d.to_text()),
        Value::Float(f) if !f.is_finite() => return None,
        Value::Float(f) => out.push_str(&float_repr(*f)),
        Value::Dict(d) => {
            out.push('{');
            for (i, (k, item)) in d.0.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(k, out);
                out.push(':');
                dumps_exact(item, out)?;
            }
            out.push('}');
        }
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dumps_exact(item, out)?;
            }
            out.push(']');
        }
    }
    Some(())
}

/// `json.dumps(value, default=str, ensure_ascii=False)`.
fn dumps_std(v: &Value, out: &mut String) {
    match v {
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) if f.is_infinite() => {
            out.push_str(if *f > 0.0 { "Infinity" } else { "-Infinity" });
        }
        Value::Decimal(d) => json_string(&d.to_text(), out),
        Value::Dict(d) => {
            out.push('{');
            for (i, (k, item)) in d.0.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                json_string(k, out);
                out.push_str(": ");
                dumps_std(item, out);
            }
            out.push('}');
        }
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dumps_std(item, out);
            }
            out.push(']');
        }
        other => {
            let _ = dumps_exact(other, out);
        }
    }
}

/// `records.dumps_untrusted`.
pub(crate) fn dumps_untrusted(v: &Value) -> String {
    let mut out = String::new();
    if dumps_exact(v, &mut out).is_some() {
        return out;
    }
    out.clear();
    dumps_std(v, &mut out);
    out
}

/// The importer's `_text_or_json`: a string as it is, anything else as JSON text.
pub(crate) fn text_or_json(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        other => dumps_untrusted(other),
    }
}

/// Not `str.isprintable()` (approximated: controls, format characters, separators but space).
fn unprintable(c: char) -> bool {
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(c as u32, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E
            | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
            | 0xFEFF | 0xFFF9..=0xFFFB | 0xD800..=0xDFFF | 0xE000..=0xF8FF)
}

fn str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if unprintable(c) => {
                let n = c as u32;
                let _ = if n < 0x100 {
                    write!(out, "\\x{n:02x}")
                } else if n < 0x10000 {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn repr_into(v: &Value, out: &mut String) {
    match v {
        Value::None => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Int(s) => out.push_str(s),
        Value::Float(f) => out.push_str(&float_repr(*f)),
        Value::Decimal(d) => {
            let _ = write!(out, "Decimal('{}')", d.to_text());
        }
        Value::Str(s) => str_repr(s, out),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_into(item, out);
            }
            out.push(']');
        }
        Value::Dict(d) => {
            out.push('{');
            for (i, (k, item)) in d.0.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                str_repr(k, out);
                out.push_str(": ");
                repr_into(item, out);
            }
            out.push('}');
        }
    }
}

/// Python `repr(value)`.
pub(crate) fn repr(v: &Value) -> String {
    let mut out = String::new();
    repr_into(v, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Parsing: CPython's `json` C scanner, strict, `parse_float=Decimal`.

/// Nesting deeper than this is refused (`CPython` would raise `RecursionError` near 1000).
const MAX_DEPTH: usize = 900;

enum Fail {
    /// `StopIteration(idx)`: reported as "Expecting value".
    Stop(usize),
    Msg(&'static str, usize),
}

struct Parser<'a> {
    s: &'a [char],
    depth: usize,
}

fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

impl Parser<'_> {
    fn skip_ws(&self, mut i: usize) -> usize {
        while i < self.s.len() && is_ws(self.s[i]) {
            i += 1;
        }
        i
    }

    fn starts(&self, i: usize, word: &str) -> bool {
        let w: Vec<char> = word.chars().collect();
        self.s.len() >= i + w.len() && self.s[i..i + w.len()] == w[..]
    }

    fn scan(&mut self, i: usize) -> Result<(Value, usize), Fail> {
        let Some(&c) = self.s.get(i) else { return Err(Fail::Stop(i)) };
        match c {
            '"' => self.string(i + 1).map(|(s, e)| (Value::Str(s), e)),
            '{' | '[' => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(Fail::Msg("maximum recursion depth exceeded", i));
                }
                let r = if c == '{' { self.object(i + 1) } else { self.array(i + 1) };
                self.depth -= 1;
                r
            }
            'n' if self.starts(i, "null") => Ok((Value::None, i + 4)),
            't' if self.starts(i, "true") => Ok((Value::Bool(true), i + 4)),
            'f' if self.starts(i, "false") => Ok((Value::Bool(false), i + 5)),
            'N' if self.starts(i, "NaN") => Ok((Value::Float(f64::NAN), i + 3)),
            'I' if self.starts(i, "Infinity") => Ok((Value::Float(f64::INFINITY), i + 8)),
            '-' if self.starts(i, "-Infinity") => Ok((Value::Float(f64::NEG_INFINITY), i + 9)),
            _ => self.number(i),
        }
    }

    fn digits(&self, mut i: usize) -> usize {
        while i < self.s.len() && self.s[i].is_ascii_digit() {
            i += 1;
        }
        i
    }

    fn number(&self, start: usize) -> Result<(Value, usize), Fail> {
        let s = self.s;
        let mut i = start;
        if s.get(i) == Some(&'-') {
            i += 1;
        }
        match s.get(i) {
            Some('1'..='9') => i = self.digits(i + 1),
            Some('0') => i += 1,
            _ => return Err(Fail::Stop(start)),
        }
        let mut float = false;
        if s.get(i) == Some(&'.') && s.get(i + 1).is_some_and(char::is_ascii_digit) {
            float = true;
            i = self.digits(i + 2);
        }
        if matches!(s.get(i), Some('e' | 'E')) {
            let e_start = i;
            let mut j = i + 1;
            if matches!(s.get(j), Some('+' | '-')) {
                j += 1;
            }
            let end = self.digits(j);
            if end > j {
                float = true;
                i = end;
            } else {
                i = e_start;
            }
        }
        let text: String = s[start..i].iter().collect();
        let value = if float {
            Value::Decimal(Dec::from_json(&text))
        } else {
            let t = text.as_str();
            Value::Int(if t == "-0" { "0".into() } else { text })
        };
        Ok((value, i))
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let mut v = 0;
        for k in 0..4 {
            v = v * 16 + self.s.get(at + k)?.to_digit(16)?;
        }
        Some(v)
    }

    fn string(&self, begin: usize) -> Result<(String, usize), Fail> {
        let s = self.s;
        let len = s.len();
        let mut out = String::new();
        let mut end = begin;
        loop {
            let mut next = end;
            while next < len {
                let d = s[next];
                if d == '"' || d == '\\' {
                    break;
                }
                if (d as u32) <= 0x1f {
                    return Err(Fail::Msg("Invalid control character at", next));
                }
                next += 1;
            }
            if next >= len {
                return Err(Fail::Msg("Unterminated string starting at", begin - 1));
            }
            out.extend(&s[end..next]);
            if s[next] == '"' {
                return Ok((out, next + 1));
            }
            next += 1;
            if next == len {
                return Err(Fail::Msg("Unterminated string starting at", begin - 1));
            }
            let c = s[next];
            if c == 'u' {
                next += 1;
                end = next + 4;
                if end >= len {
                    return Err(Fail::Msg("Invalid \\uXXXX escape", next - 1));
                }
                let Some(mut code) = self.hex4(next) else {
                    return Err(Fail::Msg("Invalid \\uXXXX escape", end - 5));
                };
                if (0xD800..0xDC00).contains(&code)
                    && end + 6 < len
                    && s[end] == '\\'
                    && s[end + 1] == 'u'
                {
                    let Some(low) = self.hex4(end + 2) else {
                        return Err(Fail::Msg("Invalid \\uXXXX escape", end + 1));
                    };
                    if (0xDC00..0xE000).contains(&low) {
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                        end += 6;
                    }
                }
                // A lone surrogate cannot be UTF-8: the replacement character stands for it.
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            } else {
                end = next + 1;
                out.push(match c {
                    '"' => '"',
                    '\\' => '\\',
                    '/' => '/',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    _ => return Err(Fail::Msg("Invalid \\escape", end - 2)),
                });
            }
        }
    }

    fn object(&mut self, start: usize) -> Result<(Value, usize), Fail> {
        let s = self.s;
        let mut dict = Dict::default();
        let mut i = self.skip_ws(start);
        if s.get(i) == Some(&'}') {
            return Ok((Value::Dict(dict), i + 1));
        }
        loop {
            if s.get(i) != Some(&'"') {
                return Err(Fail::Msg("Expecting property name enclosed in double quotes", i));
            }
            let (key, after) = self.string(i + 1)?;
            i = self.skip_ws(after);
            if s.get(i) != Some(&':') {
                return Err(Fail::Msg("Expecting ':' delimiter", i));
            }
            i = self.skip_ws(i + 1);
            let (value, after) = self.scan(i)?;
            dict.insert(key, value);
            i = self.skip_ws(after);
            if s.get(i) == Some(&'}') {
                return Ok((Value::Dict(dict), i + 1));
            }
            if s.get(i) != Some(&',') {
                return Err(Fail::Msg("Expecting ',' delimiter", i));
            }
            i = self.skip_ws(i + 1);
        }
    }

    fn array(&mut self, start: usize) -> Result<(Value, usize), Fail> {
        let s = self.s;
        let mut items = Vec::new();
        let mut i = self.skip_ws(start);
        if s.get(i) == Some(&']') {
            return Ok((Value::List(items), i + 1));
        }
        loop {
            let (value, after) = self.scan(i)?;
            items.push(value);
            i = self.skip_ws(after);
            if s.get(i) == Some(&']') {
                return Ok((Value::List(items), i + 1));
            }
            if s.get(i) != Some(&',') {
                return Err(Fail::Msg("Expecting ',' delimiter", i));
            }
            i = self.skip_ws(i + 1);
        }
    }
}

fn error_text(chars: &[char], msg: &str, pos: usize) -> String {
    let before = &chars[..pos.min(chars.len())];
    let line = before.iter().filter(|&&c| c == '\n').count() + 1;
    let col = match before.iter().rposition(|&c| c == '\n') {
        Some(nl) => pos - nl,
        None => pos + 1,
    };
    format!("{msg}: line {line} column {col} (char {pos})")
}

/// `exact_json.loads(text)`; the error is `str(JSONDecodeError)`.
pub(crate) fn loads(text: &str) -> Result<Value, String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.first() == Some(&'\u{FEFF}') {
        return Err(error_text(&chars, "Unexpected UTF-8 BOM (decode using utf-8-sig)", 0));
    }
    let mut parser = Parser { s: &chars, depth: 0 };
    let start = parser.skip_ws(0);
    match parser.scan(start) {
        Ok((value, end)) => {
            let end = parser.skip_ws(end);
            if end != chars.len() {
                return Err(error_text(&chars, "Extra data", end));
            }
            Ok(value)
        }
        Err(Fail::Stop(at)) => Err(error_text(&chars, "Expecting value", at)),
        Err(Fail::Msg(msg, at)) => Err(error_text(&chars, msg, at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        for (x, want) in [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0.0"),
            (1.5, "1.5"),
            (123_456_789.125, "123456789.125"),
            (1.234_567_890_123_456_8e17, "1.2345678901234568e+17"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn decimal_text_matches_python() {
        for (text, want) in [
            ("1.50", "1.50"),
            ("-1.50e3", "-1.50E+3"),
            ("0.00000001", "1E-8"),
            ("1e5", "1E+5"),
            ("0.0", "0.0"),
            ("-0.0", "-0.0"),
            ("0.000001", "0.000001"),
            ("1E-7", "1E-7"),
            ("12.5e-2", "0.125"),
        ] {
            assert_eq!(Dec::from_json(text).to_text(), want, "{text}");
        }
    }

    #[test]
    fn errors_match_python() {
        assert_eq!(loads("").unwrap_err(), "Expecting value: line 1 column 1 (char 0)");
        assert_eq!(
            loads("{\"a\" 1}").unwrap_err(),
            "Expecting ':' delimiter: line 1 column 6 (char 5)"
        );
        assert_eq!(
            loads("[1,\n2 x").unwrap_err(),
            "Expecting ',' delimiter: line 2 column 3 (char 6)"
        );
        assert_eq!(loads("{} x").unwrap_err(), "Extra data: line 1 column 4 (char 3)");
        assert_eq!(
            loads("\"ab").unwrap_err(),
            "Unterminated string starting at: line 1 column 1 (char 0)"
        );
    }

    #[test]
    fn equality_is_pythons() {
        let a = loads("{\"x\": 1, \"y\": [true, 2.0]}").unwrap();
        let b = loads("{\"y\": [1, 2], \"x\": 1.00}").unwrap();
        assert!(py_eq(&a, &b));
        assert!(!py_eq(&loads("NaN").unwrap(), &loads("NaN").unwrap()));
        assert_eq!(
            dumps_untrusted(&loads("{\"a\": NaN, \"b\": 1.5}").unwrap()),
            "{\"a\": NaN, \"b\": \"1.5\"}"
        );
        assert_eq!(dumps_untrusted(&a), "{\"x\":1,\"y\":[true,2.0]}");
    }
}
