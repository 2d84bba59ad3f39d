//! Bulk regrading by the `Grader`: native JSONL lines and Arrow rows graded into outcomes or
//! regrade JSONL rows, one at a time or as a block (rows in one buffer with the summary counts).
use std::panic::{catch_unwind, AssertUnwindSafe};

use rayon::prelude::*;

use super::{guarded, item_error, Grader};
use crate::arrow_cols::ArrowTraces;
use crate::error::CoreError;
use crate::jsonl_block::{BlockRows, Origin};
use crate::proto::v1::{GradeResult, ItemError, Trace};
use crate::suite::CompiledSuite;
use crate::trace::{check_parts, check_trace, TraceView};
use crate::work::Stop;

impl Grader {
    /// Bulk regrading of native JSONL: each line is the protobuf JSON mapping of a `Trace`
    /// (proto or lowerCamel field names, as the pbjson impls accept). One serialized
    /// `TraceOutcome` per line; a line that does not decode is an `ItemError` `INVALID_TRACE`
    /// with field `lines[i]` and the decoder's message.
    pub fn grade_json_traces(&self, suite: &CompiledSuite, lines: &[&[u8]]) -> Vec<Vec<u8>> {
        self.pool.install(|| {
            lines
                .par_iter()
                .enumerate()
                .map(|(i, line)| {
                    let field = format!("lines[{i}]");
                    guarded(
                        || match self.grade_json_line(line, &field, |v| {
                            suite
                                .grade_view_encoded(v)
                                .map_err(|stop| (v.id().to_owned(), self.stop_error(stop, &field)))
                        }) {
                            Ok(Ok(outcome)) => outcome,
                            Ok(Err((id, e))) | Err((id, e)) => {
                                item_error(id, e.reason_code(), e.field().to_owned(), e.message())
                            }
                        },
                        || crate::rows::lenient_json_id(line),
                        i,
                        "lines",
                    )
                })
                .collect()
        })
    }

    /// As [`Grader::grade_json_traces`], but each output is the JSONL row the regrade command
    /// writes (docs/regrade.md), newline included: the `GradeResult` protobuf JSON with proto
    /// field names and every field, or `{"trace_id","suite_id","error":{...}}`.
    pub fn grade_json_traces_to_json(
        &self,
        suite: &CompiledSuite,
        lines: &[&[u8]],
    ) -> Vec<Vec<u8>> {
        self.pool.install(|| {
            lines
                .par_iter()
                .enumerate()
                .map(|(i, line)| {
                    let field = format!("lines[{i}]");
                    guarded_row(
                        suite,
                        || self.json_line_result(suite, line, &field),
                        || crate::rows::lenient_json_id(line),
                        &field,
                    )
                })
                .collect()
        })
    }

    /// Bulk regrading of a block of native JSONL (whole lines; see [`crate::jsonl_block`]):
    /// every row as [`Grader::grade_json_traces_to_json`] writes it, in one buffer, with the
    /// summary counts (and the rows as Arrow columns if `arrow`); an error row's field is `origin`'s (`file:line N`, then the path inside
    /// the trace for a limit error) and its message the decoder's. Error rows are always
    /// marked, failing rows up to `max_failing`.
    pub fn grade_jsonl_block(
        &self,
        suite: &CompiledSuite,
        data: &[u8],
        origin: &Origin<'_>,
        max_failing: usize,
        arrow: bool,
    ) -> BlockRows {
        let lines = crate::jsonl_block::lines(data);
        self.graded_block(suite, lines.len(), max_failing, arrow, |i| {
            let line = &lines[i];
            let field = origin.field(i, line.index);
            guarded_result(
                || self.json_line_result(suite, line.text, &field),
                || crate::rows::lenient_json_id(line.text),
                &field,
            )
        })
    }

    /// As [`Grader::grade_jsonl_block`] for the rows of Arrow columns (the rows of
    /// [`Grader::grade_arrow_traces_to_json`] in one buffer, error fields `origin`'s).
    pub fn grade_arrow_block(
        &self,
        suite: &CompiledSuite,
        traces: &ArrowTraces<'_>,
        origin: &Origin<'_>,
        max_failing: usize,
        arrow: bool,
    ) -> BlockRows {
        self.graded_block(suite, traces.rows(), max_failing, arrow, |i| {
            let field = origin.field(i, i);
            guarded_result(
                || self.grade_arrow_row(suite, traces, i, &field),
                || traces.id(i).to_owned(),
                &field,
            )
        })
    }

    /// Items `0..n` graded by `one` into one [`BlockRows`] (with Arrow columns if `arrow`):
    /// small runs in parallel, each writing into one buffer (no per-row allocation), then
    /// joined in order.
    fn graded_block(
        &self,
        suite: &CompiledSuite,
        n: usize,
        max_failing: usize,
        arrow: bool,
        one: impl Fn(usize) -> Result<GradeResult, ItemError> + Sync,
    ) -> BlockRows {
        const RUN: usize = 16;
        let runs: Vec<BlockRows> = self.pool.install(|| {
            (0..n.div_ceil(RUN))
                .into_par_iter()
                .map(|r| {
                    let mut out = BlockRows::new(arrow);
                    for i in r * RUN..n.min(r * RUN + RUN) {
                        out.add(i - r * RUN, &one(i), suite.id(), max_failing);
                    }
                    out
                })
                .collect()
        });
        let mut block = BlockRows::new(arrow);
        for run in runs {
            block.append(run, max_failing);
        }
        block
    }

    /// One JSON line graded, or its item error (`field`, then a path for a limit error).
    fn json_line_result(
        &self,
        suite: &CompiledSuite,
        line: &[u8],
        field: &str,
    ) -> Result<GradeResult, ItemError> {
        let graded = self.grade_json_line(line, field, |v| {
            suite.grade_view(v).map_err(|stop| (v.id().to_owned(), self.stop_error(stop, field)))
        });
        graded.and_then(|r| r).map_err(|(id, e)| ItemError {
            trace_id: id,
            reason_code: e.reason_code().to_owned(),
            field: e.field().to_owned(),
            message: e.message(),
        })
    }

    /// As [`Grader::grade_json_traces_to_json`] for the rows of Arrow columns (validated by
    /// [`ArrowTraces::new`]): the same row bytes as for the JSON lines of the same traces,
    /// limit errors included (field `lines[i]...`, `i` the row in the batch).
    pub fn grade_arrow_traces_to_json(
        &self,
        suite: &CompiledSuite,
        traces: &ArrowTraces<'_>,
    ) -> Vec<Vec<u8>> {
        self.pool.install(|| {
            (0..traces.rows())
                .into_par_iter()
                .map(|i| {
                    let field = format!("lines[{i}]");
                    guarded_row(
                        suite,
                        || self.grade_arrow_row(suite, traces, i, &field),
                        || traces.id(i).to_owned(),
                        &field,
                    )
                })
                .collect()
        })
    }

    /// One Arrow row checked as `grade_json_line` checks a line: borrowed parts when the encoded
    /// size is within the limit, else the decoded `Trace` and its exact size.
    fn grade_arrow_row(
        &self,
        suite: &CompiledSuite,
        traces: &ArrowTraces<'_>,
        i: usize,
        field: &str,
    ) -> Result<crate::proto::v1::GradeResult, ItemError> {
        let to_item = |id: String, e: CoreError| ItemError {
            trace_id: id,
            reason_code: e.reason_code().to_owned(),
            field: e.field().to_owned(),
            message: e.message(),
        };
        let (parts, encoded_len) = traces.parts(i);
        if encoded_len <= self.limits.max_trace_bytes {
            return match check_parts(&parts, &self.limits, field) {
                Ok(()) => {
                    let id = parts.id;
                    suite
                        .grade_view(&TraceView::from_parts(parts, &self.limits))
                        .map_err(|stop| to_item(id.to_owned(), self.stop_error(stop, field)))
                }
                Err(e) => Err(to_item(parts.id.to_owned(), e)),
            };
        }
        let trace = traces.trace(i);
        match check_trace(&trace, &self.limits, field) {
            Ok(()) => suite
                .grade_view(&TraceView::new(&trace, &self.limits))
                .map_err(|stop| to_item(trace.id.clone(), self.stop_error(stop, field))),
            Err(e) => Err(to_item(trace.id, e)),
        }
    }

    /// Decodes one JSON line, checks it against the limits and grades it with `grade`; an
    /// error comes with the trace id when readable. The borrowed scanner (`json_trace`) decodes
    /// what it can; any other line, and one whose size may exceed the limit, goes through
    /// `serde_json` and the pbjson impls, so errors keep their exact text.
    fn grade_json_line<R>(
        &self,
        line: &[u8],
        field: &str,
        grade: impl FnOnce(&TraceView<'_>) -> R,
    ) -> Result<R, (String, CoreError)> {
        let mut buf = DecodeBuf(DECODE_BUF.take());
        if let Some(json) = crate::json_trace::decode(line, &mut buf.0) {
            if json.encoded_len <= self.limits.max_trace_bytes {
                let parts = json.parts;
                return match check_parts(&parts, &self.limits, field) {
                    Ok(()) => Ok(grade(&TraceView::from_parts(parts, &self.limits))),
                    Err(e) => Err((parts.id.to_owned(), e)),
                };
            }
        }
        let trace = self.json_trace(line, field)?;
        Ok(grade(&TraceView::new(&trace, &self.limits)))
    }

    /// Decodes (`serde_json` + pbjson) and checks one JSON line; the error comes with the trace
    /// id when readable.
    pub(super) fn json_trace(
        &self,
        line: &[u8],
        field: &str,
    ) -> Result<Trace, (String, CoreError)> {
        let trace: Trace = serde_json::from_slice(line).map_err(|e| {
            let e = CoreError::invalid_request("INVALID_TRACE", field.to_owned(), e.to_string());
            (crate::rows::lenient_json_id(line), e)
        })?;
        match check_trace(&trace, &self.limits, field) {
            Ok(()) => Ok(trace),
            Err(e) => Err((trace.id, e)),
        }
    }

    /// The item error of a JSON line or Arrow row whose grading stopped.
    fn stop_error(&self, stop: Stop, field: &str) -> CoreError {
        stop.error(self.limits.max_work_units, field.to_owned())
    }
}

thread_local! {
    /// Each pool thread's buffer for unescaped JSON strings, reused from line to line.
    static DECODE_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Hands the decode buffer back to the thread when a line is done (or unwinds); a buffer grown
/// past 1 MiB by a huge line is dropped instead of kept.
struct DecodeBuf(Vec<u8>);

impl Drop for DecodeBuf {
    fn drop(&mut self) {
        if self.0.capacity() <= 1 << 20 {
            DECODE_BUF.set(std::mem::take(&mut self.0));
        }
    }
}

/// As [`guarded`] for the regrade JSONL rows: the result row, or the item's error row (a panic
/// becomes `INTERNAL` at `field`).
fn guarded_row(
    suite: &CompiledSuite,
    grade: impl FnOnce() -> Result<GradeResult, ItemError>,
    trace_id: impl FnOnce() -> String,
    field: &str,
) -> Vec<u8> {
    match guarded_result(grade, trace_id, field) {
        Ok(r) => crate::rows::result_row(&r),
        Err(e) => crate::rows::error_row(suite.id(), &e),
    }
}

/// One JSONL item's grading; a panic becomes its `INTERNAL` error at `field`.
fn guarded_result(
    grade: impl FnOnce() -> Result<GradeResult, ItemError>,
    trace_id: impl FnOnce() -> String,
    field: &str,
) -> Result<GradeResult, ItemError> {
    catch_unwind(AssertUnwindSafe(grade)).unwrap_or_else(|_| {
        Err(ItemError {
            trace_id: trace_id(),
            reason_code: "INTERNAL".to_owned(),
            field: field.to_owned(),
            message: "internal error".to_owned(),
        })
    })
}
