//! `no_repeated_calls`: no (name, deep-equal arguments) pair occurs more than `max_identical` times.
use super::{Check, Outcome};
use crate::error::Reason;
use crate::json::fingerprint::{fingerprint, fingerprint_value};
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
        // Bucket by (fingerprint, name) straight from the text; only calls that share a bucket
        // are parsed and compared exactly.
        let mut keyed: Vec<(u64, &str, usize)> = Vec::with_capacity(t.len());
        for (i, call) in t.calls().iter().enumerate() {
            if !self.tools.is_empty() && !self.tools.iter().any(|t| t == call.name) {
                continue;
            }
            // Unrecorded or invalid arguments are never identical to anything (§9.20).
            let Some(text) = call.arguments_json else { continue };
            let fp = match fingerprint(text) {
                Some(fp) => fp,
                None => match t.args(i) {
                    Args::Parsed(v) => fingerprint_value(v),
                    _ => continue,
                },
            };
            keyed.push((fp, call.name, i));
        }
        // Sorting brings equal (fingerprint, name) keys together, calls in order within each.
        keyed.sort_unstable();
        let buckets = keyed.chunk_by(|a, b| a.0 == b.0 && a.1 == b.1);
        let mut positions = Vec::new();
        let mut described = Vec::new();
        for bucket in buckets.filter(|c| c.len() > self.max_identical) {
            let candidates: Vec<usize> = bucket.iter().map(|k| k.2).collect();
            for g in identical_groups(t, &candidates) {
                if g.len() > self.max_identical {
                    positions.extend(g[1..].iter().map(|&i| t.pos(i)));
                    described.push((g[0], g.len()));
                }
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
                    t.pos(first)
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

/// Splits same-fingerprint calls into groups of deep-equal, valid arguments (in call order).
fn identical_groups(t: &TraceView<'_>, candidates: &[usize]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &i in candidates {
        // One unit per group compared against (a deep comparison each).
        if !t.work().spend(groups.len() as u64 + 1) {
            break;
        }
        let Args::Parsed(v) = t.args(i) else { continue };
        let same =
            groups.iter_mut().find(|g| matches!(t.args(g[0]), Args::Parsed(first) if first == v));
        match same {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
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
