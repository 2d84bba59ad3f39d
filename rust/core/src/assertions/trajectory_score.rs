//! `trajectory_score` (§12): partial credit against a reference trajectory. F1, precision or
//! recall of the canonical maximum matching (§9.13, shared with `trajectory_match`), or F1 of
//! the canonical longest common subsequence; rounded to 4 decimals and compared with
//! `min_score`.
use std::collections::BTreeMap;
use std::fmt::Write;

use super::trajectory::{compile_reference, RefCall};
use super::{Check, Outcome};
use crate::args::ArgsMatcher;
use crate::error::Reason;
use crate::matching::{self, CallLefts, Calls, Lefts, Meter};
use crate::proto::v1::{ScoreMetric, TrajectoryScore};
use crate::score::round4;
use crate::suite::Compiler;
use crate::trace::TraceView;

#[derive(Debug)]
pub struct ScoreCheck {
    reference: Vec<RefCall>,
    /// Every reference call.
    whole: Part,
    /// The reference calls of each turn (`turn` 0 read as 1), for `per_turn` (§11).
    turns: BTreeMap<u32, Part>,
    /// The keys of `turns`, sorted (`per_turn` grades the other turns' runs once, §11).
    turn_numbers: Vec<u32>,
    metric: ScoreMetric,
    min_score: f64,
}

/// Some of the reference calls (all, or one turn's), in reference order, as the left side of
/// a matching.
#[derive(Debug)]
struct Part {
    /// Indexes into `ScoreCheck::reference`.
    refs: Vec<usize>,
    /// Classes of identical reference calls (same name and arguments), over `refs`.
    lefts: Lefts,
    compares_args: bool,
}

impl Part {
    fn new(refs: Vec<usize>, m: &TrajectoryScore, reference: &[RefCall]) -> Self {
        // Same name (so the same override) and the same argument text: the same matcher.
        let lefts = Lefts::new(refs.iter().map(|&k| {
            let r = &m.reference[k];
            (&r.name, &r.arguments_json)
        }));
        let compares_args = refs.iter().any(|&k| !matches!(reference[k].args, ArgsMatcher::Ignore));
        Part { refs, lefts, compares_args }
    }
}

/// A part against the calls: the `CallLefts` of the maximum matching.
struct Side<'s> {
    reference: &'s [RefCall],
    part: &'s Part,
}

impl Side<'_> {
    /// Reference call `k` of the part (0-based within the part).
    fn at(&self, k: usize) -> &RefCall {
        &self.reference[self.part.refs[k]]
    }

    fn class_ref(&self, class: usize) -> &RefCall {
        self.at(self.part.lefts.first[class])
    }
}

impl CallLefts for Side<'_> {
    fn compares_args(&self) -> bool {
        self.part.compares_args
    }

    fn name_ok(&self, class: usize, name: &str) -> bool {
        self.class_ref(class).name == name
    }

    fn exact_name(&self, class: usize) -> Option<&str> {
        Some(&self.class_ref(class).name)
    }

    fn is_edge(&self, class: usize, t: &TraceView<'_>, r: usize) -> bool {
        self.class_ref(class).matches(t, r)
    }
    /// A reference call that compares no arguments matches exactly the calls of its name.
    fn by_name_alone(&self) -> bool {
        !self.part.compares_args
    }
}

impl ScoreCheck {
    pub fn compile(m: &TrajectoryScore, path: &str, c: &mut Compiler<'_>) -> Option<Self> {
        let before = c.problem_count();
        let reference = compile_reference(&m.reference, m.args, &m.overrides, path, c);
        let min_score = m.min_score.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&min_score) {
            c.problem(
                format!("{path}.min_score"),
                format!("min_score must be in [0, 1], got {min_score}"),
            );
        }
        let reference = reference?;
        if c.problem_count() != before {
            return None;
        }
        let metric = ScoreMetric::try_from(m.metric).unwrap_or(ScoreMetric::Unspecified);
        let whole = Part::new((0..reference.len()).collect(), m, &reference);
        let mut by_turn: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (k, r) in m.reference.iter().enumerate() {
            by_turn.entry(r.turn.max(1)).or_default().push(k);
        }
        let turn_numbers = by_turn.keys().copied().collect();
        let turns = by_turn
            .into_iter()
            .map(|(turn, refs)| (turn, Part::new(refs, m, &reference)))
            .collect();
        Some(ScoreCheck { reference, whole, turns, turn_numbers, metric, min_score })
    }

    /// Scores the calls of `t` against `part`.
    fn score(&self, t: &TraceView<'_>, part: &Part) -> Outcome {
        let side = Side { reference: &self.reference, part };
        let paired = if self.metric == ScoreMetric::OrderedF1 {
            ordered_pairing(&side, t)
        } else {
            matching::canonical(&Calls { lefts: &side, t }, &part.lefts, t.work())
        };
        let Some(paired) = paired else {
            return stopped();
        };
        let (n_refs, n_calls) = (part.refs.len(), t.len());
        let m = paired.iter().flatten().count();
        let score = round4(self.metric_value(m, n_refs, n_calls));
        if score >= self.min_score {
            return Outcome::pass(paired.iter().flatten().map(|&i| t.pos(i)).collect())
                .with_score(score);
        }
        let mut taken = vec![false; n_calls];
        for &i in paired.iter().flatten() {
            taken[i] = true;
        }
        let extra_calls: Vec<usize> = (0..n_calls).filter(|&i| !taken[i]).collect();
        let extra: Vec<u32> = extra_calls.iter().map(|&i| t.pos(i)).collect();
        // One string, written in place: a failing score is the common case of a report-only
        // assertion, so its reason should cost little.
        let mut why = String::with_capacity(160);
        let in_order = if self.metric == ScoreMetric::OrderedF1 { " in order" } else { "" };
        let _ = write!(
            why,
            "score {score} < {}: matched {m} of {n_refs} reference calls{in_order}",
            self.min_score
        );
        let unmatched: Vec<usize> =
            paired.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(k, _)| k).collect();
        if !unmatched.is_empty() {
            why.push_str(if unmatched.len() == 1 {
                "; unmatched reference "
            } else {
                "; unmatched references "
            });
            // A reference call that failed only on its arguments points at its closest call,
            // as in trajectory_match: `3 issue_refund (closest is call 3: $.amount_cents ...)`.
            let shown: Vec<(usize, String)> = unmatched
                .iter()
                .take(MAX_LISTED + 1)
                .map(|&k| {
                    let rc = side.at(k);
                    let label = match rc.closest(t, 0..n_calls) {
                        Some(c) => format!("{} ({c})", rc.name),
                        None => rc.name.clone(),
                    };
                    (part.refs[k] + 1, label)
                })
                .collect();
            write_items(&mut why, &shown, unmatched.len());
        }
        if !extra.is_empty() {
            why.push_str(if extra.len() == 1 { "; extra call " } else { "; extra calls " });
            let shown: Vec<(usize, &str)> = extra_calls
                .iter()
                .take(MAX_LISTED + 1)
                .map(|&i| (t.pos(i) as usize, t.calls()[i].name))
                .collect();
            write_items(&mut why, &shown, extra.len());
        }
        Outcome::fail(Reason::ScoreBelowMin, why, extra).with_score(score)
    }

    /// The metric of §12 before rounding, in float64: m pairs, r reference calls, a calls.
    /// Precision with no call and recall with no reference call (a `per_turn` turn with calls
    /// but no reference) are 0, as the SPEC sets precision with no call.
    #[allow(clippy::cast_precision_loss)] // counts are at most the call limit, far below 2^53
    fn metric_value(&self, m: usize, r: usize, a: usize) -> f64 {
        let ratio = |num: usize, den: usize| if den == 0 { 0.0 } else { num as f64 / den as f64 };
        match self.metric {
            ScoreMetric::Precision => ratio(m, a),
            ScoreMetric::Recall => ratio(m, r),
            ScoreMetric::Unspecified | ScoreMetric::F1 | ScoreMetric::OrderedF1 => {
                ratio(2 * m, r + a)
            }
        }
    }
}

impl Check for ScoreCheck {
    fn check(&self, t: &TraceView<'_>) -> Outcome {
        self.score(t, &self.whole)
    }

    fn check_turn(&self, t: &TraceView<'_>, turn: u32) -> Option<Outcome> {
        match self.turns.get(&turn.max(1)) {
            Some(part) => Some(self.score(t, part)),
            None if t.is_empty() => None,
            None => {
                let empty =
                    Part { refs: Vec::new(), lefts: Lefts::default(), compares_args: false };
                Some(self.score(t, &empty))
            }
        }
    }

    fn reference_turns(&self) -> &[u32] {
        &self.turn_numbers
    }
}

/// The canonical longest common subsequence of the part's reference calls and the calls
/// (§12 `ORDERED_F1`): among the longest, the one whose vector of call positions, in reference
/// order, is lexicographically smallest. For each reference call of the part, its call.
///
/// `L[i][j]`, the length of a longest common subsequence of references `i..` and calls `j..`,
/// falls by 0 or 1 from one call to the next, so each row is kept as a bit per call (the
/// drops) plus the value at each 64-call word: `R * A` bits, not `R * A` integers. The pairs
/// are then read off greedily: at each step the earliest call `j` for which the earliest
/// reference `i` it matches leaves `L[i+1][j+1]` equal to the length still needed (an earlier
/// reference leaves a superset of choices). O(R * A) time, metered per row.
fn ordered_pairing(side: &Side<'_>, t: &TraceView<'_>) -> Option<Vec<Option<usize>>> {
    let (n_refs, n_calls) = (side.part.refs.len(), t.len());
    let mut meter = Meter::new(t.work());
    let edges = Bits::edges(side, t, &mut meter)?;
    let table = Lengths::new(&edges, n_refs, n_calls, &mut meter)?;
    let mut out = vec![None; n_refs];
    let (mut next_ref, mut call) = (0, 0);
    let mut need = table.get(0, 0);
    while need > 0 && call < n_calls {
        meter.tick(1)?;
        let first = (next_ref..n_refs).find(|&k| edges.get(k, call));
        meter.tick((first.unwrap_or(n_refs) - next_ref) as u64)?;
        if let Some(k) = first.filter(|&k| table.get(k + 1, call + 1) + 1 == need) {
            out[k] = Some(call);
            next_ref = k + 1;
            need -= 1;
        }
        call += 1;
    }
    Some(out)
}

/// An `R x A` bit matrix, row-major.
struct Bits {
    words: usize,
    bits: Vec<u64>,
}

impl Bits {
    fn new(rows: usize, cols: usize) -> Self {
        let words = cols.div_ceil(64);
        Bits { words, bits: vec![0; rows * words] }
    }

    fn get(&self, i: usize, j: usize) -> bool {
        self.bits[i * self.words + j / 64] >> (j % 64) & 1 == 1
    }

    fn set(&mut self, i: usize, j: usize) {
        self.bits[i * self.words + j / 64] |= 1 << (j % 64);
    }

    /// Which reference call of the part matches which call; identical reference calls share
    /// one comparison per call.
    fn edges(side: &Side<'_>, t: &TraceView<'_>, meter: &mut Meter<'_>) -> Option<Bits> {
        let (n_refs, n_calls) = (side.part.refs.len(), t.len());
        let mut out = Bits::new(n_refs, n_calls);
        let mut class_row: Vec<Option<usize>> = vec![None; side.part.lefts.n_classes()];
        for k in 0..n_refs {
            meter.tick(n_calls as u64)?;
            let class = side.part.lefts.class[k] as usize;
            if let Some(src) = class_row[class] {
                let w = out.words;
                out.bits.copy_within(src * w..(src + 1) * w, k * w);
                continue;
            }
            let reference = side.at(k);
            for call in 0..n_calls {
                if reference.matches(t, call) {
                    out.set(k, call);
                }
            }
            class_row[class] = Some(k);
        }
        Some(out)
    }
}

/// The suffix LCS lengths `L[i][j]` in `R * A` bits (see [`ordered_pairing`]).
struct Lengths {
    a: usize,
    /// Bit `(i, j)`: `L[i][j] - L[i][j+1]` (0 or 1).
    drops: Bits,
    /// `L[i][64 w]` for each row `i` and word `w`.
    at_word: Vec<u32>,
}

impl Lengths {
    fn new(edges: &Bits, r: usize, a: usize, meter: &mut Meter<'_>) -> Option<Self> {
        let mut drops = Bits::new(r, a);
        let words = drops.words;
        let mut at_word = vec![0u32; r * words];
        let mut below = vec![0u32; a + 1];
        let mut row = vec![0u32; a + 1];
        for i in (0..r).rev() {
            meter.tick(a as u64)?;
            row[a] = 0;
            // A word of edges read, and a word of drops written, per 64 calls.
            let (edge_row, drop_row) = (i * words..(i + 1) * words, i * words..(i + 1) * words);
            let (edge_row, drop_row) = (&edges.bits[edge_row], &mut drops.bits[drop_row]);
            for w in (0..words).rev() {
                let (edge_word, mut drop_word) = (edge_row[w], 0u64);
                for j in (w * 64..a.min(w * 64 + 64)).rev() {
                    let bit = j % 64;
                    let l = if edge_word >> bit & 1 == 1 {
                        below[j + 1] + 1
                    } else {
                        below[j].max(row[j + 1])
                    };
                    drop_word |= u64::from(l > row[j + 1]) << bit;
                    row[j] = l;
                }
                drop_row[w] = drop_word;
                at_word[i * words + w] = row[w * 64];
            }
            std::mem::swap(&mut below, &mut row);
        }
        Some(Lengths { a, drops, at_word })
    }

    /// `L[i][j]`; 0 past the last reference call or the last call.
    fn get(&self, i: usize, j: usize) -> u32 {
        if j >= self.a || i * self.drops.words >= self.at_word.len() {
            return 0;
        }
        let (w, bit) = (j / 64, j % 64);
        let word = self.drops.bits[i * self.drops.words + w];
        let passed = (word & ((1u64 << bit) - 1)).count_ones();
        self.at_word[i * self.drops.words + w] - passed
    }
}

/// The outcome of a scoring the work meter stopped (the grading loop reports the trace's
/// error instead).
fn stopped() -> Outcome {
    Outcome::fail(Reason::ScoreBelowMin, "stopped: work limit or cancellation".into(), vec![])
}

/// At most this many items are named in a reason; the rest are counted.
const MAX_LISTED: usize = 10;

/// Writes `2 a`, `2 a and 4 b`, `2 a, 4 b and 5 c` (number and label of each item); past
/// [`MAX_LISTED`] items, `2 a, 4 b, ... and 12 more`. `first` holds the first items (at least
/// `MAX_LISTED + 1` of them when there are more), `total` counts them all.
fn write_items<S: std::fmt::Display>(out: &mut String, first: &[(usize, S)], total: usize) {
    let shown = if total > MAX_LISTED { &first[..MAX_LISTED] } else { first };
    for (k, (n, name)) in shown.iter().enumerate() {
        if k > 0 {
            out.push_str(if k + 1 == shown.len() && total <= MAX_LISTED { " and " } else { ", " });
        }
        let _ = write!(out, "{n} {name}");
    }
    if total > MAX_LISTED {
        let _ = write!(out, " and {} more", total - MAX_LISTED);
    }
}

#[cfg(test)]
mod tests {
    use super::{write_items, ScoreCheck};
    use crate::assertions::testing::run;
    use crate::assertions::Check;
    use crate::limits::Limits;
    use crate::proto::v1::{ToolCall, Trace, TrajectoryScore};
    use crate::suite::Compiler;
    use crate::trace::TraceView;

    #[test]
    fn per_turn_compares_a_turn_with_its_own_reference_calls() {
        let m: TrajectoryScore = serde_json::from_str(
            r#"{"reference":[{"name":"a"},{"name":"b","turn":2},{"name":"c","turn":2}]}"#,
        )
        .expect("decodes");
        let limits = Limits::default();
        let mut c = Compiler::new(&limits);
        let k = ScoreCheck::compile(&m, "assertions[0].trajectory_score", &mut c).expect("valid");
        let turn = |names: &[&str], turn: u32| {
            let trace = Trace {
                calls: names
                    .iter()
                    .map(|&n| ToolCall { name: n.to_owned(), ..ToolCall::default() })
                    .collect(),
                ..Trace::default()
            };
            k.check_turn(&TraceView::new(&trace, &limits), turn).map(|o| (o.pass, o.score()))
        };
        assert_eq!(turn(&["a"], 1), Some((true, 1.0)));
        assert_eq!(turn(&["a"], 0), Some((true, 1.0)), "turn 0 reads as 1");
        assert_eq!(turn(&["b"], 2), Some((false, 0.6667)));
        assert_eq!(turn(&[], 3), None, "no calls and no reference calls: skipped");
        assert_eq!(turn(&["z"], 3), Some((false, 0.0)), "calls where none are expected");
        assert_eq!(turn(&[], 2), Some((false, 0.0)));
    }

    fn names(calls: &[&'static str]) -> Vec<(&'static str, Option<&'static str>)> {
        calls.iter().map(|&n| (n, None)).collect()
    }

    #[test]
    fn items_are_listed_like_positions() {
        let list = |items: &[(usize, &str)]| {
            let mut out = String::new();
            write_items(&mut out, &items[..items.len().min(11)], items.len());
            out
        };
        assert_eq!(list(&[(2, "a")]), "2 a");
        assert_eq!(list(&[(2, "a"), (4, "b")]), "2 a and 4 b");
        assert_eq!(list(&[(2, "a"), (4, "b"), (5, "c")]), "2 a, 4 b and 5 c");
        let many: Vec<(usize, &str)> = (1..=12).map(|i| (i, "x")).collect();
        assert_eq!(list(&many[..10]), "1 x, 2 x, 3 x, 4 x, 5 x, 6 x, 7 x, 8 x, 9 x and 10 x");
        assert_eq!(
            list(&many[..11]),
            "1 x, 2 x, 3 x, 4 x, 5 x, 6 x, 7 x, 8 x, 9 x, 10 x and 1 more"
        );
        assert!(list(&many).ends_with("10 x and 2 more"), "{}", list(&many));
    }

    #[test]
    fn several_unmatched_and_extra_calls_are_listed() {
        let t = r#"{"trajectory_score":{"args":"MATCH_MODE_IGNORE","reference":[{"name":"a"},{"name":"b"},{"name":"c"}]}}"#;
        let r = run(t, &names(&["a", "x", "y"]));
        assert_eq!(r.reason_code, "SCORE_BELOW_MIN");
        assert_eq!(
            r.reason,
            "score 0.3333 < 1: matched 1 of 3 reference calls; unmatched references 2 b and \
             3 c; extra calls 2 x and 3 y"
        );
        assert_eq!(r.positions, vec![2, 3]);
    }

    #[test]
    fn ordered_f1_takes_the_lexicographically_smallest_longest_subsequence() {
        // Reference [a, b]; calls [b, a, b]: the longest common subsequences are a@2 b@3 only.
        let t = r#"{"trajectory_score":{"metric":"SCORE_METRIC_ORDERED_F1","min_score":0,"reference":[{"name":"a"},{"name":"b"}]}}"#;
        let r = run(t, &names(&["b", "a", "b"]));
        assert_eq!(r.positions, vec![2, 3]);
        // Reference [a, a]; calls [a, a, a]: the earliest two.
        let t = t.replace(r#"{"name":"b"}"#, r#"{"name":"a"}"#);
        let r = run(&t, &names(&["a", "a", "a"]));
        assert_eq!((r.positions.as_slice(), r.score), (&[1, 2][..], 0.8));
    }
}
