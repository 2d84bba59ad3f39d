//! `no_repeated_calls`: no (name, deep-equal arguments) pair occurs more than `max_identical` times.
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use super::{pos, Check, Outcome};
use crate::error::Reason;
use crate::json::Value;
use crate::proto::v1::NoRepeatedCalls;
use crate::suite::Compiler;
use crate::trace::{Args, TraceView};

#[derive(Debug)]
pub struct NoRepeat {
    /// Exact names to check; empty means every tool.
    tools: Vec<String>,
    max_identical: usize,
}

impl NoRepeat {
    pub fn compile(m: &NoRepeatedCalls, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        for (i, t) in m.tools.iter().enumerate() {
            if t.is_empty() {
                c.problem(format!("{path}.tools[{i}]"), "an empty tool name");
            }
        }
        let max_identical = if m.max_identical == 0 { 1 } else { m.max_identical as usize };
        (c.problem_count() == before).then(|| NoRepeat { tools: m.tools.clone(), max_identical })
    }
}

impl Check for NoRepeat {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        // Buckets by (name, order-insensitive structural hash); equality is then checked exactly.
        let mut buckets: HashMap<(&str, u64), Vec<Vec<usize>>> = HashMap::new();
        for (i, call) in t.calls().iter().enumerate() {
            if !self.tools.is_empty() && !self.tools.contains(&call.name) {
                continue;
            }
            // Unrecorded or invalid arguments are never identical to anything (§9.20).
            let Args::Parsed(v) = t.args(i) else { continue };
            let groups = buckets.entry((call.name.as_str(), hash_value(v))).or_default();
            let found = groups.iter_mut().find(|g| match t.args(g[0]) {
                Args::Parsed(first) => first == v,
                _ => false,
            });
            match found {
                Some(g) => g.push(i),
                None => groups.push(vec![i]),
            }
        }
        let mut positions = Vec::new();
        let mut described = Vec::new();
        for groups in buckets.values() {
            for g in groups.iter().filter(|g| g.len() > self.max_identical) {
                positions.extend(g[1..].iter().map(|&i| pos(i)));
                described.push((g[0], g.len()));
            }
        }
        if positions.is_empty() {
            return Outcome::pass(vec![]);
        }
        positions.sort_unstable();
        described.sort_unstable();
        let detail: Vec<String> = described
            .iter()
            .map(|&(first, n)| {
                format!(
                    "{} with the arguments of call {} was made {n} times",
                    t.calls()[first].name,
                    first + 1
                )
            })
            .collect();
        Outcome::fail(
            Reason::RepeatedCall,
            format!(
                "identical calls repeated (at most {} allowed): {}",
                self.max_identical,
                detail.join("; ")
            ),
            positions,
        )
    }
}

/// A hash consistent with SPEC §2 equality: object key order is irrelevant, numbers by value.
fn hash_value(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    feed(v, &mut h);
    h.finish()
}

fn feed(v: &Value, h: &mut DefaultHasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            for item in items {
                feed(item, h);
            }
        }
        Value::Object(o) => {
            // Sum of per-entry hashes: independent of key order.
            let mut sum = 0u64;
            for (k, val) in o.iter() {
                let mut eh = DefaultHasher::new();
                k.hash(&mut eh);
                feed(val, &mut eh);
                sum = sum.wrapping_add(eh.finish());
            }
            (5u8, o.len(), sum).hash(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::assertions::testing::run;

    #[test]
    fn groups_by_deep_equality() {
        let r = run(
            r#"{"no_repeated_calls":{}}"#,
            &[
                ("f", Some(r#"{"a":1,"b":[1.0]}"#)),
                ("f", Some(r#"{"b":[1],"a":1e0}"#)),
                ("g", Some(r#"{"a":1,"b":[1]}"#)),
                ("f", None),
                ("f", None),
                ("f", Some(r#"{"a":true,"b":[1]}"#)),
            ],
        );
        assert_eq!(r.severity, 2, "SOFT by default");
        assert_eq!((r.reason_code.as_str(), r.positions.as_slice()), ("REPEATED_CALL", &[2][..]));
    }
}
