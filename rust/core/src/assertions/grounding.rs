//! `grounding`: values (or numbers) stated in the final answer also occur in some call result (§9.22).
use std::collections::HashSet;

use super::{Check, Outcome};
use crate::error::Reason;
use crate::json::{self, Number, Value};
use crate::proto::v1::Grounding as GroundingMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct Grounding {
    values: Vec<String>,
    numbers: bool,
    max_depth: usize,
}

impl Grounding {
    pub fn compile(m: &GroundingMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        if m.values.is_empty() && !m.numbers {
            c.problem(path, "grounding needs values or numbers: true");
        }
        for (i, v) in m.values.iter().enumerate() {
            if v.is_empty() {
                c.problem(format!("{path}.values[{i}]"), "an empty value");
            }
        }
        (c.problem_count() == before).then(|| Grounding {
            values: m.values.clone(),
            numbers: m.numbers,
            max_depth: c.limits.max_json_depth,
        })
    }
}

/// What the call results offer as evidence.
struct Evidence<'t> {
    raw: Vec<&'t str>,
    /// Decoded JSON strings (keys and values) of results that are JSON.
    strings: Vec<String>,
    numbers: Vec<Number>,
}

impl Grounding {
    fn evidence<'t>(&self, t: &TraceView<'t>, need_values: bool) -> Evidence<'t> {
        let mut ev = Evidence { raw: Vec::new(), strings: Vec::new(), numbers: Vec::new() };
        for call in t.calls() {
            let Some(text) = call.result else { continue };
            ev.raw.push(text);
            if self.numbers {
                ev.numbers.extend(number_tokens(text));
            }
            if let Ok(v) = json::parse(text, self.max_depth) {
                collect(&v, need_values, self.numbers, &mut ev);
            }
        }
        ev
    }
}

fn collect(v: &Value, strings: bool, numbers: bool, ev: &mut Evidence<'_>) {
    match v {
        Value::String(s) if strings => ev.strings.push(s.to_string_lossy()),
        Value::Number(n) if numbers => ev.numbers.push(n.clone()),
        Value::Array(items) => items.iter().for_each(|i| collect(i, strings, numbers, ev)),
        Value::Object(o) => {
            for (k, val) in o.iter() {
                if strings {
                    ev.strings.push(k.to_string_lossy());
                }
                collect(val, strings, numbers, ev);
            }
        }
        _ => {}
    }
}

/// Unsigned decimal numbers in prose: digit runs, optional `,ddd` groups, optional fraction.
fn number_tokens(text: &str) -> Vec<Number> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut digits = String::new();
        while i < b.len() && b[i].is_ascii_digit() {
            digits.push(b[i] as char);
            i += 1;
        }
        // Thousands groups: exactly three digits after each comma, not followed by a digit.
        while b.get(i) == Some(&b',')
            && b.get(i + 1..i + 4).is_some_and(|g| g.iter().all(u8::is_ascii_digit))
            && !b.get(i + 4).is_some_and(u8::is_ascii_digit)
        {
            digits.extend(b[i + 1..i + 4].iter().map(|&c| c as char));
            i += 4;
        }
        if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            digits.push('.');
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                digits.push(b[i] as char);
                i += 1;
            }
        }
        out.push(Number::from_json_text(&digits));
    }
    out
}

impl Check for Grounding {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        let answer = t.final_answer();
        let stated: Vec<&String> =
            self.values.iter().filter(|v| answer.contains(v.as_str())).collect();
        let stated_numbers = if self.numbers { number_tokens(answer) } else { Vec::new() };
        if stated.is_empty() && stated_numbers.is_empty() {
            return Outcome::pass(vec![]);
        }
        let ev = self.evidence(t, !stated.is_empty());
        let mut missing: Vec<String> = Vec::new();
        for v in stated {
            // One unit per piece of evidence searched for the value.
            if !t.work().spend((ev.raw.len() + ev.strings.len()) as u64) {
                break;
            }
            let found = ev.raw.iter().any(|r| r.contains(v.as_str()))
                || ev.strings.iter().any(|s| s.contains(v.as_str()));
            if !found {
                missing.push(format!("{v:?}"));
            }
        }
        // A set, so many stated numbers against many result numbers stay linear.
        let evidence_numbers: HashSet<&Number> = ev.numbers.iter().collect();
        for n in &stated_numbers {
            if !evidence_numbers.contains(n) {
                missing.push(n.raw().to_owned());
            }
        }
        if missing.is_empty() {
            return Outcome::pass(vec![]);
        }
        Outcome::fail(
            Reason::UngroundedValue,
            format!("the final answer states {} which no tool result contains", missing.join(", ")),
            vec![],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::number_tokens;
    use crate::assertions::testing::suite;
    use crate::limits::Limits;
    use crate::proto::v1::{ToolCall, Trace};

    fn raws(t: &str) -> Vec<String> {
        number_tokens(t).iter().map(|n| n.raw().to_owned()).collect()
    }

    #[test]
    fn tokens() {
        assert_eq!(raws("Refunded $5,000.00 in 3 days."), ["5000.00", "3"]);
        assert_eq!(raws("1,2345 and 2.50."), ["1", "2345", "2.50"]);
        assert_eq!(raws("ORD-1042"), ["1042"]);
    }

    fn grade(assertion: &str, result: &str, answer: &str) -> String {
        let trace = Trace {
            calls: vec![ToolCall {
                name: "r".to_owned(),
                result: Some(result.to_owned()),
                ..ToolCall::default()
            }],
            final_answer: answer.to_owned(),
            ..Trace::default()
        };
        let s = suite(assertion).expect("compiles");
        s.grade(&trace, &Limits::default()).expect("graded").results.remove(0).reason_code
    }

    #[test]
    fn values_and_numbers() {
        let v = r#"{"grounding":{"values":["Zürich"]}}"#;
        assert_eq!(grade(v, r#"{"city":"Z\u00fcrich"}"#, "Sunny in Zürich"), "");
        assert_eq!(grade(v, "Zurich", "Sunny in Zürich"), "UNGROUNDED_VALUE");
        let n = r#"{"grounding":{"numbers":true}}"#;
        assert_eq!(grade(n, r#"{"amount":5e3}"#, "Refunded $5,000.00"), "");
        assert_eq!(grade(n, "price=2.5", "It costs 2.50, in 3 days"), "UNGROUNDED_VALUE");
    }
}
