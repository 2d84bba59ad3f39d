//! Regrade output rows (docs/regrade.md): a `GradeResult` or an item error as one JSONL line,
//! byte for byte what `python/trajgrade/regrade/output.py` writes with
//! `json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"`.
use std::fmt::Write as _;

use crate::proto::v1::{AssertionStatus, GradeResult, ItemError, Severity, Verdict};

/// The `id` of a JSON trace line that did not decode as a `Trace`, or `""`.
pub fn lenient_json_id(line: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(o)) => match o.get("id") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// A graded row: `{"trace_id":..,"suite_id":..,"verdict":..,"score":..,"soft_failures":..,
/// "results":[{"name","status","severity","reason_code","reason","positions","score"}],
/// "mean_score":..}` and `\n` (`GradeResult`'s fields in protobuf field order).
pub fn result_row(r: &GradeResult) -> Vec<u8> {
    let mut s = String::with_capacity(256 + 128 * r.results.len());
    push_result_row(&mut s, r);
    s.into_bytes()
}

/// [`result_row`] appended to `s`.
pub fn push_result_row(s: &mut String, r: &GradeResult) {
    s.push_str("{\"trace_id\":");
    push_str(s, &r.trace_id);
    s.push_str(",\"suite_id\":");
    push_str(s, &r.suite_id);
    s.push_str(",\"verdict\":");
    let verdict = Verdict::try_from(r.verdict).unwrap_or_default();
    push_str(s, verdict.as_str_name());
    s.push_str(",\"score\":");
    push_float(s, r.score);
    let _ = write!(s, ",\"soft_failures\":{},\"results\":[", r.soft_failures);
    for (k, a) in r.results.iter().enumerate() {
        if k > 0 {
            s.push(',');
        }
        s.push_str("{\"name\":");
        push_str(s, &a.name);
        s.push_str(",\"status\":");
        push_str(s, AssertionStatus::try_from(a.status).unwrap_or_default().as_str_name());
        s.push_str(",\"severity\":");
        push_str(s, Severity::try_from(a.severity).unwrap_or_default().as_str_name());
        s.push_str(",\"reason_code\":");
        push_str(s, &a.reason_code);
        s.push_str(",\"reason\":");
        push_str(s, &a.reason);
        s.push_str(",\"positions\":[");
        for (j, p) in a.positions.iter().enumerate() {
            if j > 0 {
                s.push(',');
            }
            let _ = write!(s, "{p}");
        }
        s.push_str("],\"score\":");
        push_float(s, a.score);
        s.push('}');
    }
    s.push_str("],\"mean_score\":");
    push_float(s, r.mean_score);
    s.push_str("}\n");
}

/// An item-error row: `{"trace_id":..,"suite_id":..,"error":{"reason_code","field","message"}}`.
pub fn error_row(suite_id: &str, e: &ItemError) -> Vec<u8> {
    let mut s = String::with_capacity(128 + e.message.len());
    push_error_row(&mut s, suite_id, e);
    s.into_bytes()
}

/// [`error_row`] appended to `s`.
pub fn push_error_row(s: &mut String, suite_id: &str, e: &ItemError) {
    s.push_str("{\"trace_id\":");
    push_str(s, &e.trace_id);
    s.push_str(",\"suite_id\":");
    push_str(s, suite_id);
    s.push_str(",\"error\":{\"reason_code\":");
    push_str(s, &e.reason_code);
    s.push_str(",\"field\":");
    push_str(s, &e.field);
    s.push_str(",\"message\":");
    push_str(s, &e.message);
    s.push_str("}}\n");
}

/// A JSON string as Python's `json.dumps(..., ensure_ascii=False)` writes it.
fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut run = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0C => "\\f",
            0..=0x1F => "",
            _ => continue,
        };
        out.push_str(&s[run..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(esc);
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

/// A float as Python's `repr` writes it (shortest round-trip digits; `1.0`, `0.5`, `1e-05`).
pub(crate) fn push_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if x < 0.0 || (x == 0.0 && x.is_sign_negative()) {
        out.push('-');
    }
    let x = x.abs();
    if x == 0.0 {
        out.push_str("0.0");
        return;
    }
    // Shortest digits and the decimal point position from the JS form (same digits as repr).
    let mut buf = ryu_js::Buffer::new();
    let js = buf.format_finite(x);
    let (mantissa, exp) = match js.find('e') {
        Some(i) => (&js[..i], js[i + 1..].parse::<i32>().unwrap_or(0)),
        None => (js, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: String = format!("{int}{frac}");
    let lead = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_matches('0');
    // value = 0.DIGITS * 10^decpt
    let decpt = int.len() as i32 - lead as i32 + exp;
    if (-4 < decpt) && decpt <= 16 {
        if decpt <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-decpt) as usize));
            out.push_str(digits);
        } else if digits.len() as i32 <= decpt {
            out.push_str(digits);
            out.extend(std::iter::repeat_n('0', (decpt - digits.len() as i32) as usize));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

#[cfg(test)]
mod tests {
    use super::{push_float, push_str};

    #[test]
    fn floats_print_as_python_repr() {
        // Expected values from CPython's repr().
        for (x, want) in [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (0.5, "0.5"),
            (2.0 / 3.0, "0.6666666666666666"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.000_01, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123.25, "123.25"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.234_5e20, "1.2345e+20"),
        ] {
            let mut s = String::new();
            push_float(&mut s, x);
            assert_eq!(s, want, "{x}");
        }
    }

    #[test]
    fn strings_escape_as_python_json() {
        let mut s = String::new();
        push_str(&mut s, "a\"b\\c\n\t\u{1}\u{7f}é/😀");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\t\\u0001\u{7f}é/😀\"");
    }
}
