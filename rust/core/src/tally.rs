//! A batch of graded outcomes counted for metrics: each outcome's verdict and score, and each
//! assertion's passes and failures by name. The live receiver counts its results from these
//! instead of decoding every `TraceOutcome` in Python to read three fields of it.
use prost::Message;

use crate::proto::v1::{trace_outcome, AssertionStatus, TraceOutcome};

/// What a batch of `TraceOutcome`s counts.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    /// Per outcome: its result's verdict (a `Verdict` number), or 0 for an error or an
    /// undecodable outcome.
    pub verdicts: Vec<i32>,
    /// Per outcome: its result's score (0 where `verdicts` holds 0).
    pub scores: Vec<f64>,
    /// Per assertion name, in order of first appearance: (name, passed, failed).
    pub assertions: Vec<(String, u64, u64)>,
}

/// Counts encoded `TraceOutcome`s (as `CompiledSuite.grade_batch` returns them).
pub fn tally<B: AsRef<[u8]>>(outcomes: &[B]) -> Tally {
    let mut out = Tally {
        verdicts: Vec::with_capacity(outcomes.len()),
        scores: Vec::with_capacity(outcomes.len()),
        assertions: Vec::new(),
    };
    for bytes in outcomes {
        let Ok(TraceOutcome { outcome: Some(trace_outcome::Outcome::Result(r)) }) =
            TraceOutcome::decode(bytes.as_ref())
        else {
            out.verdicts.push(0);
            out.scores.push(0.0);
            continue;
        };
        out.verdicts.push(r.verdict);
        out.scores.push(r.score);
        for (k, a) in r.results.into_iter().enumerate() {
            // Results come in suite order: position k is nearly always the name's slot.
            let slot = match out.assertions.get(k) {
                Some((name, _, _)) if *name == a.name => k,
                _ => {
                    if let Some(at) = out.assertions.iter().position(|(n, _, _)| *n == a.name) {
                        at
                    } else {
                        out.assertions.push((a.name, 0, 0));
                        out.assertions.len() - 1
                    }
                }
            };
            let passed = a.status == AssertionStatus::Pass as i32;
            let counts = &mut out.assertions[slot];
            counts.1 += u64::from(passed);
            counts.2 += u64::from(!passed);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::{AssertionResult, GradeResult, ItemError, Verdict};

    fn result(verdict: Verdict, score: f64, statuses: &[(&str, AssertionStatus)]) -> Vec<u8> {
        let results = statuses
            .iter()
            .map(|(name, status)| AssertionResult {
                name: (*name).to_owned(),
                status: *status as i32,
                ..AssertionResult::default()
            })
            .collect();
        let r = GradeResult { verdict: verdict as i32, score, results, ..GradeResult::default() };
        TraceOutcome { outcome: Some(trace_outcome::Outcome::Result(r)) }.encode_to_vec()
    }

    #[test]
    fn counts_verdicts_scores_and_assertions_by_name() {
        use AssertionStatus::{Fail, Pass};
        let error =
            TraceOutcome { outcome: Some(trace_outcome::Outcome::Error(ItemError::default())) }
                .encode_to_vec();
        let outcomes = vec![
            result(Verdict::Pass, 1.0, &[("a", Pass), ("b", Pass)]),
            error,
            result(Verdict::Fail, 0.5, &[("a", Fail), ("b", Pass)]),
            // Another order and a new name: still counted by name.
            result(Verdict::Fail, 0.0, &[("c", Fail), ("a", Fail)]),
            b"\xff".to_vec(),
        ];
        let t = tally(&outcomes);
        assert_eq!(t.verdicts, vec![1, 0, 2, 2, 0]);
        assert_eq!(t.scores, vec![1.0, 0.0, 0.5, 0.0, 0.0]);
        assert_eq!(
            t.assertions,
            vec![("a".to_owned(), 1, 2), ("b".to_owned(), 2, 0), ("c".to_owned(), 0, 1)]
        );
    }
}
