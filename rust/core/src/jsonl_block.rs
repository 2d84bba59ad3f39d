//! Native JSONL regraded a block of lines at a time: lines found, rows written into one buffer,
//! and the run summary's counts kept, all in the core, so a bulk regrade does no per-line work
//! in Python (reading a line, copying it into `bytes`, counting its row cost about as much as
//! grading it).
//!
//! Lines end at `\n` (the last one may lack it); a line of only ASCII whitespace is skipped, as
//! Python's `bytes.isspace()` skips it. Rows and counts follow `docs/regrade.md`: each row is
//! what `Grader::grade_json_traces_to_json` writes for the line.
use std::ops::Range;

use prost::Message;

use crate::arrow_rows::ArrowRows;
use crate::proto::v1::{
    trace_outcome, AssertionStatus, GradeResult, ItemError, Severity, Trace, TraceOutcome, Verdict,
};

/// One non-blank line of a block.
#[derive(Clone, Copy, Debug)]
pub struct Line<'a> {
    /// The line, its `\n` included.
    pub text: &'a [u8],
    /// Where it starts in the block.
    pub start: usize,
    /// Its index among all the block's lines (blank ones counted), from 0.
    pub index: usize,
}

/// How much of a block to take: whole lines only, at most `max_items` non-blank ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// Bytes of the lines taken.
    pub consumed: usize,
    /// Non-blank lines among them (the traces).
    pub items: usize,
    /// Lines taken, blank ones included (for line numbers).
    pub lines: usize,
}

/// `bytes.isspace()`: non-empty and only space, `\t`, `\n`, `\r`, `\x0b`, `\x0c`.
fn is_blank(line: &[u8]) -> bool {
    !line.is_empty() && line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C))
}

/// Every line of `data` with its end (exclusive), the last one without `\n` included.
fn line_ends(data: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let tail = (data.last() != Some(&b'\n') && !data.is_empty()).then_some(data.len());
    memchr::memchr_iter(b'\n', data).map(|i| i + 1).chain(tail)
}

/// The first lines of `data` holding at most `max_items` non-blank lines (at least one line
/// when `max_items` > 0). A last line without `\n` counts only `at_eof`: otherwise the rest of
/// it is still to be read.
#[must_use]
pub fn split(data: &[u8], max_items: usize, at_eof: bool) -> Split {
    let mut split = Split { consumed: 0, items: 0, lines: 0 };
    for end in line_ends(data) {
        if end == data.len() && data.last() != Some(&b'\n') && !at_eof {
            break;
        }
        let blank = is_blank(&data[split.consumed..end]);
        if !blank && split.items == max_items {
            break;
        }
        split.items += usize::from(!blank);
        split.lines += 1;
        split.consumed = end;
    }
    split
}

/// The non-blank lines of `data`, every line of which is whole.
#[must_use]
pub fn lines(data: &[u8]) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (index, end) in line_ends(data).enumerate() {
        let text = &data[start..end];
        if !is_blank(text) {
            out.push(Line { text, start, index });
        }
        start = end;
    }
    out
}

/// Pass and fail counts of the results with one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssertionCount {
    pub name: String,
    /// The severity of the first result seen with this name.
    pub severity: Severity,
    pub passed: u64,
    pub failed: u64,
    /// Sum of the results' scores in units of 0.0001 (scores are rounded to 4 places, §13), so
    /// sums are exact and the same in any order.
    pub score_units: u64,
}

/// A line that does not decode as a `Trace`: what its error row says (`INVALID_TRACE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// The line's `id` when it is readable JSON with one, else `""`.
    pub trace_id: String,
    /// `origin`'s field of the line (`file:line N`).
    pub field: String,
    /// The decoder's message.
    pub message: String,
}

/// The block's lines (whole lines, blank ones skipped, as `Grader::grade_jsonl_block` takes
/// them) as serialized `Trace`s, for a server to grade: each decoded by the decoder that
/// words the local engine's errors (`serde_json` and the pbjson impls), so an unreadable line
/// has the field and message of its local error row. The server applies its own limits.
pub fn traces(data: &[u8], origin: &Origin<'_>) -> Vec<Result<Vec<u8>, Unreadable>> {
    lines(data)
        .iter()
        .enumerate()
        .map(|(i, line)| match serde_json::from_slice::<Trace>(line.text) {
            Ok(trace) => Ok(trace.encode_to_vec()),
            Err(e) => Err(Unreadable {
                trace_id: crate::rows::lenient_json_id(line.text),
                field: origin.field(i, line.index),
                message: e.to_string(),
            }),
        })
        .collect()
}

/// A score (rounded to 4 places, in [0, 1]) in units of 0.0001.
pub fn score_units(score: f64) -> u64 {
    if score.is_finite() && score > 0.0 {
        // `round`, not truncation: 0.1234 * 10^4 may be 1233.9999999999998.
        (score * 10_000.0).round() as u64
    } else {
        0
    }
}

/// How a block's items are numbered in its input, for the `field` of their error rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// JSONL lines, blank ones counted (the line of item `i` is its [`Line::index`]).
    Line,
    /// Parquet rows, one per item.
    Row,
    /// Traces, one per item (a JSONL file resumed mid-file, where line numbers are unknown).
    Trace,
}

impl Unit {
    /// The word in the field: `line`, `row` or `trace`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Unit::Line => "line",
            Unit::Row => "row",
            Unit::Trace => "trace",
        }
    }
}

/// Where a block comes from: its error rows' `field` is `source:unit N` (docs/regrade.md), then
/// the path inside the trace for a limit error (`source:line 3.calls[2].arguments_json`).
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    /// The input's name (a file name).
    pub source: &'a str,
    pub unit: Unit,
    /// The number (from 1) of the block's first line (its line index 0), row or trace.
    pub first: u64,
}

impl Origin<'_> {
    /// The field of item `item`, on line index `line` of the block (JSONL; ignored otherwise).
    #[must_use]
    pub fn field(&self, item: usize, line: usize) -> String {
        let at = if self.unit == Unit::Line { line } else { item };
        format!("{}:{} {}", self.source, self.unit.name(), self.first + at as u64)
    }
}

/// A row the caller looks at: an error row (always), or a failing row (the first ones only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// Index among the block's items (rows).
    pub item: usize,
    /// The row in [`BlockRows::rows`].
    pub row: Range<usize>,
    pub error: bool,
}

/// A block's rows, in line order, and what the run summary needs from them: the counts of the
/// graded rows and of the error rows (by reason code), and marks for the summary's sample.
#[derive(Debug, Default)]
pub struct BlockRows {
    /// Every row, each ending in `\n`; with Arrow columns (Parquet output, which writes those)
    /// only the marked rows, the ones the caller reads.
    pub rows: String,
    pub items: usize,
    /// Graded rows with verdict `PASS`, and the other graded rows.
    pub passed: u64,
    pub failed: u64,
    pub soft_failures: u64,
    /// Sum of the graded rows' `mean_score` in units of 0.0001.
    pub mean_score_units: u64,
    /// By result name, in order of first appearance.
    pub assertions: Vec<AssertionCount>,
    /// Error rows, and their count by reason code in order of first appearance.
    pub errors: u64,
    pub error_codes: Vec<(String, u64)>,
    pub marks: Vec<Mark>,
    pub longest_row: usize,
    /// The same rows as Arrow columns, when asked for ([`BlockRows::new`]): Parquet output.
    /// `rows` then holds only the marked rows, and `longest_row` is the longest of those.
    pub columns: Option<ArrowRows>,
    failing_marks: usize,
}

impl BlockRows {
    /// An empty block; `arrow`: its rows are also written as Arrow columns.
    #[must_use]
    pub fn new(arrow: bool) -> Self {
        BlockRows { columns: arrow.then(ArrowRows::default), ..BlockRows::default() }
    }

    /// Writes and counts item `item`'s outcome; failing rows are marked until `max_failing`.
    pub fn add(
        &mut self,
        item: usize,
        graded: &Result<GradeResult, ItemError>,
        suite_id: &str,
        max_failing: usize,
    ) {
        let start = self.rows.len();
        let mark = match graded {
            Ok(r) => {
                let failing = r.verdict != Verdict::Pass as i32 && self.failing_marks < max_failing;
                if let Some(columns) = &mut self.columns {
                    columns.push_result(r);
                }
                if failing || self.columns.is_none() {
                    crate::rows::push_result_row(&mut self.rows, r);
                }
                self.count(r);
                self.failing_marks += usize::from(failing);
                failing.then_some(false)
            }
            Err(e) => {
                crate::rows::push_error_row(&mut self.rows, suite_id, e);
                if let Some(columns) = &mut self.columns {
                    columns.push_item_error(suite_id, e);
                }
                self.count_error(&e.reason_code, 1);
                Some(true)
            }
        };
        self.items += 1;
        self.longest_row = self.longest_row.max(self.rows.len() - start);
        if let Some(error) = mark {
            self.marks.push(Mark { item, row: start..self.rows.len(), error });
        }
    }

    fn count_error(&mut self, reason_code: &str, n: u64) {
        self.errors += n;
        match self.error_codes.iter_mut().find(|(code, _)| code == reason_code) {
            Some((_, count)) => *count += n,
            None => self.error_codes.push((reason_code.to_owned(), n)),
        }
    }

    fn count(&mut self, r: &GradeResult) {
        if r.verdict == Verdict::Pass as i32 {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        self.soft_failures += u64::from(r.soft_failures);
        self.mean_score_units += score_units(r.mean_score);
        for (k, a) in r.results.iter().enumerate() {
            let passed = u64::from(a.status == AssertionStatus::Pass as i32);
            // Results come in suite order, so position k is nearly always the name's slot.
            let slot = match self.assertions.get(k) {
                Some(c) if c.name == a.name => k,
                _ => {
                    if let Some(at) = self.assertions.iter().position(|c| c.name == a.name) {
                        at
                    } else {
                        self.assertions.push(AssertionCount {
                            name: a.name.clone(),
                            severity: Severity::try_from(a.severity).unwrap_or_default(),
                            passed: 0,
                            failed: 0,
                            score_units: 0,
                        });
                        self.assertions.len() - 1
                    }
                }
            };
            let c = &mut self.assertions[slot];
            c.passed += passed;
            c.failed += 1 - passed;
            c.score_units += score_units(a.score);
        }
    }

    /// Appends the block part that follows this one (its items, rows and marks shift).
    pub fn append(&mut self, next: BlockRows, max_failing: usize) {
        let (row_base, item_base) = (self.rows.len(), self.items);
        self.rows.push_str(&next.rows);
        self.items += next.items;
        self.passed += next.passed;
        self.failed += next.failed;
        self.soft_failures += next.soft_failures;
        self.mean_score_units += next.mean_score_units;
        self.longest_row = self.longest_row.max(next.longest_row);
        if let (Some(mine), Some(theirs)) = (&mut self.columns, &next.columns) {
            mine.append(theirs);
        }
        for (code, n) in next.error_codes {
            self.count_error(&code, n);
        }
        for c in next.assertions {
            match self.assertions.iter_mut().find(|mine| mine.name == c.name) {
                Some(mine) => {
                    mine.passed += c.passed;
                    mine.failed += c.failed;
                    mine.score_units += c.score_units;
                }
                None => self.assertions.push(c),
            }
        }
        for mut m in next.marks {
            if !m.error {
                if self.failing_marks >= max_failing {
                    continue;
                }
                self.failing_marks += 1;
            }
            m.item += item_base;
            m.row = m.row.start + row_base..m.row.end + row_base;
            self.marks.push(m);
        }
    }
}

/// One record for [`outcome_rows`]: a serialized `TraceOutcome` (graded elsewhere: by
/// `CompiledSuite::grade_batch`, or by a server), or an input record the caller could not read
/// as a trace, written as its `INVALID_TRACE` error row.
#[derive(Clone, Copy, Debug)]
pub enum Outcome<'a> {
    Encoded(&'a [u8]),
    Unreadable { trace_id: &'a str, field: &'a str, message: &'a str },
}

/// The rows and counts of records graded outside a block entry point (importer formats,
/// Parquet layouts the core does not read, a server's outcomes), as a [`BlockRows`]: the same
/// rows, counts and marks as the block entry points give for the same outcomes.
#[must_use]
pub fn outcome_rows(
    suite_id: &str,
    items: &[Outcome<'_>],
    max_failing: usize,
    arrow: bool,
) -> BlockRows {
    let mut block = BlockRows::new(arrow);
    for (i, item) in items.iter().enumerate() {
        let graded = match *item {
            Outcome::Encoded(bytes) => match TraceOutcome::decode(bytes) {
                Ok(TraceOutcome { outcome: Some(trace_outcome::Outcome::Result(r)) }) => Ok(r),
                Ok(TraceOutcome { outcome: Some(trace_outcome::Outcome::Error(e)) }) => Err(e),
                _ => Err(ItemError {
                    trace_id: String::new(),
                    reason_code: "INTERNAL".to_owned(),
                    field: format!("outcomes[{i}]"),
                    message: "not a serialized TraceOutcome".to_owned(),
                }),
            },
            Outcome::Unreadable { trace_id, field, message } => Err(ItemError {
                trace_id: trace_id.to_owned(),
                reason_code: "INVALID_TRACE".to_owned(),
                field: field.to_owned(),
                message: message.to_owned(),
            }),
        };
        block.add(i, &graded, suite_id, max_failing);
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_takes_whole_lines_up_to_max_items() {
        let data = b"a\n\n  \nb\nc\nd";
        assert_eq!(split(data, 10, false), Split { consumed: 10, items: 3, lines: 5 });
        assert_eq!(split(data, 10, true), Split { consumed: 11, items: 4, lines: 6 });
        // Blank lines before the line that would exceed max_items are taken.
        assert_eq!(split(data, 1, true), Split { consumed: 6, items: 1, lines: 3 });
        assert_eq!(split(data, 2, true), Split { consumed: 8, items: 2, lines: 4 });
        assert_eq!(split(b"", 5, true), Split { consumed: 0, items: 0, lines: 0 });
        assert_eq!(split(b"abc", 5, false), Split { consumed: 0, items: 0, lines: 0 });
        assert_eq!(split(b" \x0b\x0c\r\n", 0, false), Split { consumed: 5, items: 0, lines: 1 });
    }

    #[test]
    fn lines_skip_blank_ones_and_keep_positions() {
        let data = b"x\n\t\r\n\ny\r\nz";
        let got: Vec<_> = lines(data).iter().map(|l| (l.text, l.start, l.index)).collect();
        assert_eq!(got, [(&b"x\n"[..], 0, 0), (&b"y\r\n"[..], 6, 3), (&b"z"[..], 9, 4)]);
        // An empty last "line" after the final newline is not a line.
        assert_eq!(lines(b"x\n").len(), 1);
        // Only bytes.isspace() bytes are blank: a NUL or a non-ASCII space is a (bad) trace.
        assert_eq!(lines(b"\0\n\xc2\xa0\n").len(), 2);
    }

    #[test]
    fn traces_encode_each_line_or_say_why_not_where() {
        let data = b"{\"id\":\"a\",\"calls\":[{\"name\":\"t\"}]}\n\n{\"id\":\"b\",\"calls\":5}\n[";
        let origin = Origin { source: "in.jsonl", unit: Unit::Line, first: 10 };
        let got = traces(data, &origin);
        assert_eq!(got.len(), 3);
        let trace = Trace::decode(got[0].as_ref().expect("line 10 is a trace").as_slice());
        let trace = trace.expect("the bytes are a Trace");
        assert_eq!((trace.id.as_str(), trace.calls[0].name.as_str()), ("a", "t"));
        let bad = got[1].as_ref().expect_err("line 12 is not a trace");
        assert_eq!((bad.trace_id.as_str(), bad.field.as_str()), ("b", "in.jsonl:line 12"));
        assert!(bad.message.contains("expected a sequence"), "{}", bad.message);
        let cut = got[2].as_ref().expect_err("line 13 is cut short");
        assert_eq!((cut.trace_id.as_str(), cut.field.as_str()), ("", "in.jsonl:line 13"));
    }

    #[test]
    fn outcome_rows_write_and_count_as_a_block() {
        use crate::proto::v1::AssertionResult;
        let result = |id: &str, pass: bool| GradeResult {
            trace_id: id.to_owned(),
            suite_id: "s".to_owned(),
            verdict: if pass { Verdict::Pass } else { Verdict::Fail } as i32,
            score: 0.5,
            mean_score: 0.25,
            results: vec![AssertionResult {
                name: "a".to_owned(),
                status: if pass { AssertionStatus::Pass } else { AssertionStatus::Fail } as i32,
                severity: Severity::Soft as i32,
                score: 0.25,
                ..AssertionResult::default()
            }],
            ..GradeResult::default()
        };
        let encoded = |o: trace_outcome::Outcome| TraceOutcome { outcome: Some(o) }.encode_to_vec();
        let error = ItemError {
            trace_id: "e".to_owned(),
            reason_code: "TOO_MANY_CALLS".to_owned(),
            field: "traces[2]".to_owned(),
            message: "too many".to_owned(),
        };
        let items = [
            encoded(trace_outcome::Outcome::Result(result("p", true))),
            encoded(trace_outcome::Outcome::Result(result("f", false))),
            encoded(trace_outcome::Outcome::Error(error.clone())),
        ];
        let block = outcome_rows(
            "s",
            &[
                Outcome::Encoded(&items[0]),
                Outcome::Unreadable { trace_id: "u", field: "f.jsonl:line 2", message: "bad" },
                Outcome::Encoded(&items[1]),
                Outcome::Encoded(&items[2]),
                Outcome::Encoded(b"\xff"),
            ],
            1,
            false,
        );
        let unreadable = ItemError {
            trace_id: "u".to_owned(),
            reason_code: "INVALID_TRACE".to_owned(),
            field: "f.jsonl:line 2".to_owned(),
            message: "bad".to_owned(),
        };
        let rows = [
            crate::rows::result_row(&result("p", true)),
            crate::rows::error_row("s", &unreadable),
            crate::rows::result_row(&result("f", false)),
            crate::rows::error_row("s", &error),
        ]
        .concat();
        assert!(block.rows.as_bytes().starts_with(&rows), "{}", block.rows);
        assert!(block.rows.ends_with("\"reason_code\":\"INTERNAL\",\"field\":\"outcomes[4]\",\"message\":\"not a serialized TraceOutcome\"}}\n"));
        assert_eq!((block.items, block.passed, block.failed, block.errors), (5, 1, 1, 3));
        assert_eq!((block.soft_failures, block.mean_score_units), (0, 5000));
        let codes: Vec<(&str, u64)> =
            block.error_codes.iter().map(|(c, n)| (c.as_str(), *n)).collect();
        assert_eq!(codes, [("INVALID_TRACE", 1), ("TOO_MANY_CALLS", 1), ("INTERNAL", 1)]);
        let a = &block.assertions[0];
        assert_eq!((a.passed, a.failed, a.score_units, a.severity), (1, 1, 5000, Severity::Soft));
        // Every error row marked, failing rows up to max_failing (1).
        let marks: Vec<(usize, bool)> = block.marks.iter().map(|m| (m.item, m.error)).collect();
        assert_eq!(marks, [(1, true), (2, false), (3, true), (4, true)]);
    }
}
