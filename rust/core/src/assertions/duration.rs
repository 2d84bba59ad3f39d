//! `duration`: every considered call takes at most `max_call_ms` and together at most
//! `max_total_ms` (SPEC §12). A call's duration is §10's (`CallMeta::duration_ns`).
use super::{list_positions, Check, Outcome};
use crate::error::Reason;
use crate::glob::Glob;
use crate::proto::v1::Duration as DurationMsg;
use crate::suite::Compiler;
use crate::trace::TraceView;

const NANOS_PER_MS: u128 = 1_000_000;

#[derive(Debug)]
pub struct Duration {
    /// `None`: every call in scope is considered.
    matcher: Option<Glob>,
    max_call_ms: Option<u64>,
    max_total_ms: Option<u64>,
}

impl Duration {
    pub fn compile(m: &DurationMsg, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        let matcher = match (m.tool.is_empty(), m.glob.is_empty()) {
            (false, false) => {
                c.problem(format!("{path}.glob"), "set tool or glob, not both");
                None
            }
            (true, true) => None,
            (false, true) => Some(Glob::exact(&m.tool, m.ignore_case)),
            (true, false) => match Glob::new(&m.glob, m.ignore_case) {
                Ok(g) => Some(g),
                Err(e) => {
                    c.problem(format!("{path}.glob"), e);
                    None
                }
            },
        };
        if m.max_call_ms.is_none() && m.max_total_ms.is_none() {
            c.problem(path, "set at least one bound: max_call_ms or max_total_ms");
        }
        (c.problem_count() == before).then_some(Duration {
            matcher,
            max_call_ms: m.max_call_ms,
            max_total_ms: m.max_total_ms,
        })
    }

    /// The result name: `duration` or `duration:<tool-or-glob>`.
    pub fn default_name(m: &DurationMsg) -> String {
        match (m.tool.as_str(), m.glob.as_str()) {
            ("", "") => "duration".to_owned(),
            ("", glob) => format!("duration:{glob}"),
            (tool, _) => format!("duration:{tool}"),
        }
    }
}

impl Check for Duration {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        // One pass over the calls: the base units every assertion spends cover it.
        let considered: Vec<(usize, Option<u64>)> = t
            .calls()
            .iter()
            .enumerate()
            .filter(|(_, c)| self.matcher.as_ref().is_none_or(|g| g.is_match(c.name)))
            .map(|(i, _)| (i, t.call_meta(i).duration_ns()))
            .collect();
        let untimed: Vec<u32> =
            considered.iter().filter(|(_, d)| d.is_none()).map(|&(i, _)| t.pos(i)).collect();
        if !untimed.is_empty() {
            let message = match untimed.as_slice() {
                [p] => format!(
                    "call {p} {} has no recorded timing (start and end times must both be set)",
                    t.calls()[*p as usize - 1].name
                ),
                _ => format!(
                    "calls {} have no recorded timing (start and end times must both be set)",
                    list_positions(&untimed)
                ),
            };
            return Outcome::fail(Reason::TimingNotRecorded, message, untimed);
        }
        let mut slow = Vec::new();
        let mut parts = Vec::new();
        if let Some(max) = self.max_call_ms {
            for &(i, d) in &considered {
                let d = u128::from(d.unwrap_or(0));
                if d > u128::from(max) * NANOS_PER_MS {
                    slow.push(t.pos(i));
                    parts.push(format!(
                        "call {} {} took {} ms",
                        t.pos(i),
                        t.calls()[i].name,
                        ms(d)
                    ));
                }
            }
            if !parts.is_empty() {
                parts = vec![format!("{}; at most {} ms allowed", parts.join(", "), grouped(max))];
            }
        }
        if let Some(max) = self.max_total_ms {
            let total: u128 = considered.iter().map(|&(_, d)| u128::from(d.unwrap_or(0))).sum();
            if total > u128::from(max) * NANOS_PER_MS {
                parts.push(format!(
                    "the {} call(s) took {} ms in total; at most {} ms allowed",
                    considered.len(),
                    ms(total),
                    grouped(max)
                ));
                if slow.is_empty() {
                    slow = considered.iter().map(|&(i, _)| t.pos(i)).collect();
                }
            }
        }
        if parts.is_empty() {
            Outcome::pass(considered.iter().map(|&(i, _)| t.pos(i)).collect())
        } else {
            Outcome::fail(Reason::TooSlow, parts.join("; "), slow)
        }
    }
}

/// `n` with a comma every three digits: `2,350`.
pub(crate) fn grouped(n: impl Into<u128>) -> String {
    let digits = n.into().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (k, ch) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Nanoseconds as exact milliseconds: whole milliseconds grouped (`2,350`), a fraction only
/// when there is one, without trailing zeros (`2,000.0005`), so a reason never rounds a call
/// that is over its bound down to the bound.
fn ms(nanos: u128) -> String {
    let (whole, frac) = (nanos / NANOS_PER_MS, nanos % NANOS_PER_MS);
    if frac == 0 {
        grouped(whole)
    } else {
        let frac = format!("{frac:06}");
        format!("{}.{}", grouped(whole), frac.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::{grouped, ms};
    use crate::assertions::testing::{rejected_field, run_trace};
    use crate::proto::v1::{ToolCall, Trace};

    fn timed(name: &str, start: u64, end: u64) -> ToolCall {
        ToolCall {
            name: name.to_owned(),
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            ..ToolCall::default()
        }
    }

    fn trace(calls: Vec<ToolCall>) -> Trace {
        Trace { calls, ..Trace::default() }
    }

    #[test]
    fn numbers_in_reasons() {
        assert_eq!(grouped(0u64), "0");
        assert_eq!(grouped(999u64), "999");
        assert_eq!(grouped(1_000u64), "1,000");
        assert_eq!(grouped(41_230u64), "41,230");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(ms(2_350_000_000), "2,350");
        assert_eq!(ms(2_000_000_500), "2,000.0005");
        assert_eq!(ms(1), "0.000001");
        assert_eq!(ms(120_000_000), "120");
    }

    #[test]
    fn per_call_bound() {
        let t = trace(vec![
            timed("lookup", 1, 100_000_001),
            timed("issue_refund", 10, 2_000_000_010),
            timed("issue_refund", 10, 2_000_000_011),
        ]);
        let r = run_trace(r#"{"duration":{"tool":"issue_refund","max_call_ms":"2000"}}"#, &t);
        assert_eq!(r.name, "duration:issue_refund");
        assert_eq!(r.reason_code, "TOO_SLOW");
        assert_eq!(r.positions, [3]);
        assert_eq!(r.reason, "call 3 issue_refund took 2,000.000001 ms; at most 2,000 ms allowed");
        // Exactly at the bound passes; positions are the considered calls.
        let r = run_trace(r#"{"duration":{"glob":"issue_*","max_call_ms":"2001"}}"#, &t);
        assert_eq!((r.name.as_str(), r.reason_code.as_str()), ("duration:issue_*", ""));
        assert_eq!(r.positions, [2, 3]);
    }

    #[test]
    fn total_bound() {
        let t = trace(vec![timed("a", 1, 1_500_000_001), timed("b", 1, 1_000_000_001)]);
        let r = run_trace(r#"{"duration":{"max_total_ms":"2000"}}"#, &t);
        assert_eq!((r.name.as_str(), r.reason_code.as_str()), ("duration", "TOO_SLOW"));
        assert_eq!(r.positions, [1, 2]);
        assert_eq!(r.reason, "the 2 call(s) took 2,500 ms in total; at most 2,000 ms allowed");
        // Both bounds exceeded: positions are the slow calls, the reason names both figures.
        let r = run_trace(r#"{"duration":{"max_call_ms":"1200","max_total_ms":"2000"}}"#, &t);
        assert_eq!(r.positions, [1]);
        assert_eq!(
            r.reason,
            "call 1 a took 1,500 ms; at most 1,200 ms allowed; \
             the 2 call(s) took 2,500 ms in total; at most 2,000 ms allowed"
        );
        // Sums and bounds never overflow.
        let t = trace(vec![timed("a", 1, u64::MAX), timed("a", 1, u64::MAX)]);
        let max = u64::MAX.to_string();
        let r = run_trace(&format!(r#"{{"duration":{{"max_total_ms":"{max}"}}}}"#), &t);
        assert_eq!(r.reason_code, "");
    }

    #[test]
    fn timing_not_recorded() {
        let t = trace(vec![timed("a", 1, 2), timed("b", 0, 5), timed("a", 5, 0), timed("a", 9, 8)]);
        let r = run_trace(r#"{"duration":{"tool":"a","max_call_ms":"1"}}"#, &t);
        assert_eq!(r.reason_code, "TIMING_NOT_RECORDED");
        assert_eq!(r.positions, [3, 4]);
        assert_eq!(
            r.reason,
            "calls 3 and 4 have no recorded timing (start and end times must both be set)"
        );
        let r = run_trace(r#"{"duration":{"tool":"b","max_total_ms":"1"}}"#, &t);
        assert_eq!(r.positions, [2]);
        assert_eq!(
            r.reason,
            "call 2 b has no recorded timing (start and end times must both be set)"
        );
        // No call considered: pass.
        let r = run_trace(r#"{"duration":{"tool":"c","max_call_ms":"1"}}"#, &t);
        assert_eq!((r.reason_code.as_str(), r.positions.len()), ("", 0));
    }

    #[test]
    fn invalid() {
        assert_eq!(rejected_field(r#"{"duration":{"tool":"a"}}"#), "assertions[0].duration");
        assert_eq!(
            rejected_field(r#"{"duration":{"tool":"a","glob":"b*","max_call_ms":"1"}}"#),
            "assertions[0].duration.glob"
        );
        assert_eq!(
            rejected_field(r#"{"duration":{"glob":"a\\","max_call_ms":"1"}}"#),
            "assertions[0].duration.glob"
        );
    }
}
