//! Canonical text: byte-identical to JavaScript's `JSON.stringify(JSON.parse(text))`.
//!
//! REGEX matchers run on this text, so it sits on the hot path: everything is written into one
//! `String`, plain string runs are copied whole, small integers skip float formatting, and objects
//! only allocate (a small index vector) when they actually hold array-index keys.
use super::value::{Number, Object, Str, Value};

/// Prints `v` exactly as `JSON.stringify` would print the value `JSON.parse` built.
pub fn to_canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

/// Appends the canonical text of `v` to `out`.
pub fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(o) => write_object(o, out),
    }
}

/// The array index a property key denotes, if any: JS orders these keys first, ascending.
///
/// An array index is the canonical decimal string of an integer in `0..=2^32 - 2` (ECMA-262
/// "array index"), so `"01"`, `"-1"`, `"1.0"` and `"4294967295"` are ordinary keys.
fn array_index(key: &Str) -> Option<u32> {
    let b = key.as_bytes();
    match b {
        [b'0'] => Some(0),
        [b'1'..=b'9', rest @ ..] if rest.len() < 10 && rest.iter().all(u8::is_ascii_digit) => {
            let v = b.iter().fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
            u32::try_from(v).ok().filter(|&v| v != u32::MAX)
        }
        _ => None,
    }
}

fn write_object(o: &Object, out: &mut String) {
    out.push('{');
    let mut first = true;
    let mut entry = |k: &Str, v: &Value, out: &mut String| {
        if !first {
            out.push(',');
        }
        first = false;
        write_string(k, out);
        out.push(':');
        write_canonical(v, out);
    };
    // Common case: no index keys, insertion order is property order and nothing is allocated.
    if o.iter().any(|(k, _)| array_index(k).is_some()) {
        let mut indexed: Vec<(u32, &Str, &Value)> =
            o.iter().filter_map(|(k, v)| array_index(k).map(|i| (i, k, v))).collect();
        // Keys are unique, so indices are too: an unstable sort is deterministic.
        indexed.sort_unstable_by_key(|&(i, _, _)| i);
        for (_, k, v) in indexed {
            entry(k, v, out);
        }
        for (k, v) in o.iter().filter(|(k, _)| array_index(k).is_none()) {
            entry(k, v, out);
        }
    } else {
        for (k, v) in o.iter() {
            entry(k, v, out);
        }
    }
    out.push('}');
}

/// JS `Number#toString` of the nearest float64; non-finite values print `null` like
/// `JSON.stringify`, and `-0` prints `0`.
fn write_number(n: &Number, out: &mut String) {
    let raw = n.raw();
    // Fast path: an integer literal of at most 15 digits is exact in float64 and JS prints it
    // in full, so the source text already is the canonical text (except `-0`).
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    if digits.len() <= 15 && digits.bytes().all(|b| b.is_ascii_digit()) {
        if raw == "-0" {
            out.push('0');
        } else {
            out.push_str(raw);
        }
        return;
    }
    let f = n.as_f64();
    if f.is_finite() {
        let mut buf = ryu_js::Buffer::new();
        out.push_str(buf.format_finite(f));
    } else {
        out.push_str("null");
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Pushes `\u` and four lowercase hex digits, as JSON.stringify writes controls and lone
/// surrogates.
fn push_u_escape(out: &mut String, cp: u32) {
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX[((cp >> shift) & 0xF) as usize] as char);
    }
}

/// Writes a quoted JS string literal. `s` is WTF-8: a lone surrogate is the 3-byte sequence
/// `ED A0..BF 80..BF`, which valid UTF-8 never contains, so a byte scan finds it.
fn write_string(s: &Str, out: &mut String) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push('"');
    let mut run_start = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let lone_surrogate = c == 0xED && b.get(i + 1).is_some_and(|&n| n >= 0xA0);
        if c >= 0x20 && c != b'"' && c != b'\\' && !lone_surrogate {
            i += 1;
            continue;
        }
        push_run(out, &b[run_start..i]);
        if lone_surrogate {
            let cp = 0xD000 | (u32::from(b[i + 1] & 0x3F) << 6) | u32::from(b[i + 2] & 0x3F);
            push_u_escape(out, cp);
            i += 3;
        } else {
            match c {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                0x08 => out.push_str("\\b"),
                0x0C => out.push_str("\\f"),
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                _ => push_u_escape(out, u32::from(c)),
            }
            i += 1;
        }
        run_start = i;
    }
    push_run(out, &b[run_start..]);
    out.push('"');
}

/// Appends a run of bytes that holds no lone surrogate, hence valid UTF-8.
fn push_run(out: &mut String, run: &[u8]) {
    // The run boundaries fall on ASCII bytes or around a whole surrogate sequence, and the
    // parser only stores valid UTF-8 outside surrogate escapes, so this never fails; the
    // lossy fallback keeps the function total without `unsafe`.
    match std::str::from_utf8(run) {
        Ok(s) => out.push_str(s),
        Err(_) => out.push_str(&String::from_utf8_lossy(run)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;

    fn canon(text: &str) -> String {
        to_canonical(&parse(text, 128).unwrap())
    }

    #[test]
    fn no_whitespace() {
        assert_eq!(
            canon("{ \"a\" : 1 ,\n \"b\" : [ true , null ] }"),
            r#"{"a":1,"b":[true,null]}"#
        );
        assert_eq!(canon(" [ ] "), "[]");
        assert_eq!(canon("{}"), "{}");
    }

    #[test]
    fn numbers() {
        let cases = [
            ("1.0", "1"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("-0e5", "0"),
            ("1e400", "null"),
            ("-1e400", "null"),
            ("1e-400", "0"),
            ("0.30000000000000004", "0.30000000000000004"),
            ("0.10000000000000001", "0.1"),
            ("123.4560", "123.456"),
            ("1e21", "1e+21"),
            ("1E20", "100000000000000000000"),
            ("0.0000001", "1e-7"),
            ("0.000001", "0.000001"),
            ("1.5E-10", "1.5e-10"),
            ("9007199254740993", "9007199254740992"),
            ("123456789012345678901234567890", "1.2345678901234568e+29"),
            ("-123456789012345", "-123456789012345"),
            ("1e99999999999999999999", "null"),
            ("5e-324", "5e-324"),
        ];
        for (input, want) in cases {
            assert_eq!(canon(input), want, "{input}");
        }
    }

    #[test]
    fn key_order() {
        assert_eq!(
            canon(
                r#"{"b":1,"10":0,"a":1,"2":0,"01":1,"-1":2,"1.0":3,"4294967295":4,"4294967294":5}"#
            ),
            r#"{"2":0,"10":0,"4294967294":5,"b":1,"a":1,"01":1,"-1":2,"1.0":3,"4294967295":4}"#
        );
        assert_eq!(
            canon(r#"{"a":1,"b":2,"a":3,"o":{"z":1,"0":2},"l":[{"b":1,"1":0}]}"#),
            r#"{"a":3,"b":2,"o":{"0":2,"z":1},"l":[{"1":0,"b":1}]}"#
        );
        assert_eq!(canon(r#"{"":1,"0":2,"99999999999":3}"#), r#"{"0":2,"":1,"99999999999":3}"#);
    }

    #[test]
    fn strings() {
        assert_eq!(
            canon(r#""\u0008\u000C\u000a\r\t\u0001\u001F\u007f\/\"q\"\\""#),
            "\"\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}/\\\"q\\\"\\\\\""
        );
        assert_eq!(canon(r#""Z\u00fcrich \u2028 \ud83d\ude00""#), "\"Zürich \u{2028} 😀\"");
        assert_eq!(canon(r#""\uD800""#), r#""\ud800""#);
        assert_eq!(canon(r#""a\uDFFFb\uDBFF""#), r#""a\udfffb\udbff""#);
        assert_eq!(canon(r#""\ud800\ud800\udc00""#), "\"\\ud800\u{10000}\"");
        assert_eq!(canon(r#"{"\ud800":"\u0000"}"#), r#"{"\ud800":"\u0000"}"#);
    }
}
