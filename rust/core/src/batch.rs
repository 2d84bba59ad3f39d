//! The `Grader`: a dedicated rayon pool, the suite caches, and the byte-level batch API.
use std::num::NonZeroUsize;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use lru::LruCache;
use prost::Message;
use rayon::prelude::*;

use crate::arrow_cols::ArrowTraces;
use crate::error::CoreError;
use crate::jsonl_block::BlockRows;
use crate::limits::Limits;
use crate::proto::v1::{
    grade_trace_request, trace_outcome, GradeResult, GradeTraceRequest, GradeTraceResponse,
    ItemError, Suite, Trace, TraceOutcome,
};
use crate::suite::CompiledSuite;
use crate::trace::{check_parts, check_trace, wire_decode, Decoded, TraceView};
use crate::work::{CancelFlag, Stop};

/// Registered suites kept by default (see [`Grader::with_max_registered_suites`]).
pub const DEFAULT_MAX_REGISTERED_SUITES: usize = 10_000;

type SuiteCache = Mutex<LruCache<String, Arc<CompiledSuite>>>;

/// Shared by every thread: limits, a rayon pool built once (never the global one), and two
/// suite caches: inline-compiled suites (LRU of `suite_cache_size`) and registered suites (their
/// own LRU of `max_registered_suites`, so inline traffic never evicts a registered suite).
pub struct Grader {
    limits: Limits,
    pool: rayon::ThreadPool,
    suites: SuiteCache,
    registered: SuiteCache,
    /// SHA-256 of an inline suite's bytes exactly as they appeared in a request → its suite id
    /// (same capacity as the inline LRU). A hit is used only while that id is still cached, so
    /// it never changes which suite a request gets, only skips decoding and hashing it.
    raw_suites: Mutex<LruCache<[u8; 32], String>>,
}

/// `GradeTraceRequest` without its suite (fields 2 and 3 skipped as unknown): decoded when the
/// inline suite's raw bytes are already known.
#[derive(Clone, PartialEq, prost::Message)]
struct TraceOnlyRequest {
    #[prost(message, optional, tag = "1")]
    trace: Option<Trace>,
}

/// `BatchGradeTracesRequest` without its suite (fields 1 and 2 skipped as unknown).
#[derive(Clone, PartialEq, prost::Message)]
struct TracesOnlyEnvelope {
    #[prost(bytes = "vec", repeated, tag = "3")]
    traces: Vec<Vec<u8>>,
}

fn raw_key(suite_bytes: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(suite_bytes).into()
}

/// `BatchGradeTracesRequest` with each trace left as bytes (same field numbers), so one
/// undecodable trace becomes that item's error instead of failing the whole request.
#[derive(Clone, PartialEq, prost::Message)]
struct BatchEnvelope {
    #[prost(oneof = "EnvelopeSuite", tags = "1, 2")]
    suite_ref: Option<EnvelopeSuite>,
    #[prost(bytes = "vec", repeated, tag = "3")]
    traces: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum EnvelopeSuite {
    #[prost(message, tag = "1")]
    Suite(Suite),
    #[prost(string, tag = "2")]
    SuiteId(String),
}

/// `BatchGradeTracesResponse` written from already-encoded outcomes (field 1, repeated).
fn encode_outcomes(outcomes: &[Vec<u8>]) -> Vec<u8> {
    encode_outcomes_as(1, outcomes)
}

/// Already-encoded outcomes as the repeated message field `tag` (1: `BatchGradeTracesResponse`,
/// 2: `StreamGradeTracesResponse`).
fn encode_outcomes_as(tag: u32, outcomes: &[Vec<u8>]) -> Vec<u8> {
    use crate::wire::{varint_len, Writer};
    let total: usize = outcomes.iter().map(|o| 1 + varint_len(o.len() as u64) + o.len()).sum();
    let mut w = Writer::with_capacity(total);
    for o in outcomes {
        w.message_header(tag, o.len());
        w.buf.extend_from_slice(o);
    }
    w.buf
}

impl Grader {
    /// `threads` 0 means one per core.
    pub fn new(limits: Limits, threads: usize) -> Grader {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("trajgrade-{i}"))
            .build()
            .or_else(|_| rayon::ThreadPoolBuilder::new().num_threads(1).build())
            .expect("a one-thread rayon pool can always be built");
        let cap = NonZeroUsize::new(limits.suite_cache_size).unwrap_or(NonZeroUsize::MIN);
        let registered =
            NonZeroUsize::new(DEFAULT_MAX_REGISTERED_SUITES).unwrap_or(NonZeroUsize::MIN);
        Grader {
            limits,
            pool,
            suites: Mutex::new(LruCache::new(cap)),
            registered: Mutex::new(LruCache::new(registered)),
            raw_suites: Mutex::new(LruCache::new(cap)),
        }
    }

    /// Keeps at most `n` registered suites (default 10 000; 0 means 1). Registering one more
    /// evicts the least recently used registered suite (used = registered again, looked up by
    /// `get_suite`, or named by a request's `suite_id`).
    #[must_use]
    pub fn with_max_registered_suites(self, n: usize) -> Grader {
        let cap = NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
        lock(&self.registered).resize(cap);
        self
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Decodes and compiles a serialized `Suite`, reusing the cached compilation of equal content.
    pub fn compile_suite(&self, suite_bytes: &[u8]) -> Result<Arc<CompiledSuite>, CoreError> {
        self.compile_decoded(self.decode_suite(suite_bytes)?)
    }

    fn decode_suite(&self, suite_bytes: &[u8]) -> Result<Suite, CoreError> {
        self.check_suite_len(suite_bytes.len())?;
        Suite::decode(suite_bytes).map_err(|e| {
            CoreError::invalid_request("INVALID_SUITE", "suite".to_owned(), e.to_string())
        })
    }

    /// `max_suite_bytes` holds for every suite, however it arrives (registered, inline in a
    /// request, a stream chunk's).
    fn check_suite_len(&self, len: usize) -> Result<(), CoreError> {
        if len <= self.limits.max_suite_bytes {
            return Ok(());
        }
        Err(CoreError::limit(
            "SUITE_TOO_LARGE",
            "suite".to_owned(),
            format!(
                "suite is {len} bytes; the limit is {} (max_suite_bytes)",
                self.limits.max_suite_bytes
            ),
        ))
    }

    /// [`Grader::check_suite_len`] for the inline suite (field `tag`) of a request, before the
    /// request is decoded (a huge suite is refused without building it).
    fn check_inline_suite_len(&self, request: &[u8], tag: u32) -> Result<(), CoreError> {
        self.check_suite_len(crate::wire::message_field_len(request, tag))
    }

    /// Compiles a serialized suite and keeps it among the registered suites; returns its id.
    /// Registered suites are never evicted by inline suites; beyond `max_registered_suites` the
    /// least recently used registered suite is.
    pub fn register_suite(&self, suite_bytes: &[u8]) -> Result<String, CoreError> {
        let suite = self.decode_suite(suite_bytes)?;
        let id = crate::suite::suite_id(&suite);
        if lock(&self.registered).get(&id).is_some() {
            return Ok(id);
        }
        let cached = lock(&self.suites).get(&id).cloned();
        let compiled = match cached {
            Some(c) => c,
            None => Arc::new(CompiledSuite::compile_owned(suite, &self.limits)?),
        };
        lock(&self.registered).put(id.clone(), compiled);
        Ok(id)
    }

    /// A compiled suite by id: a registered one, or an inline one still in the LRU.
    pub fn get_suite(&self, suite_id: &str) -> Option<Arc<CompiledSuite>> {
        if let Some(s) = lock(&self.registered).get(suite_id) {
            return Some(Arc::clone(s));
        }
        lock(&self.suites).get(suite_id).cloned()
    }

    /// Each item: a serialized `GradeTraceRequest` → a serialized `GradeTraceResponse`, or that
    /// item's error. Items are graded in parallel on the pool; a panic is that item's
    /// `CoreError::Internal`.
    pub fn grade_requests(&self, requests: &[&[u8]]) -> Vec<Result<Vec<u8>, CoreError>> {
        self.grade_requests_with(requests, &[])
    }

    /// As [`Grader::grade_requests`]; item `i` stops at its next unit of work once
    /// `cancels[i]` is cancelled (`CoreError::Cancelled`). Items past the end of `cancels`
    /// cannot be cancelled.
    pub fn grade_requests_with(
        &self,
        requests: &[&[u8]],
        cancels: &[Option<CancelFlag>],
    ) -> Vec<Result<Vec<u8>, CoreError>> {
        self.pool.install(|| {
            requests
                .par_iter()
                .enumerate()
                .map(|(i, r)| {
                    let cancel = cancels.get(i).and_then(Option::as_ref);
                    // Without a cap nothing is deferred.
                    self.grade_request_guarded(r, cancel, None).unwrap_or_else(|| {
                        Err(CoreError::Internal("deferred without a cap".to_owned()))
                    })
                })
                .collect()
        })
    }

    /// As `grade_requests_with`, one item after the other on the calling thread, each with a
    /// work limit of `cap` units (when below `max_work_units`): for a batch too small to be
    /// worth waking the pool's threads (the wake-ups and their spinning cost more than grading
    /// a few traces), where the caller must not be held long. An item that needs more than
    /// `cap` is `None`: grade it again with `grade_requests_with` (the full limit, from the
    /// start, so its answer does not depend on where it was graded). The others are the same
    /// bytes as `grade_requests`.
    pub fn grade_requests_here(
        &self,
        requests: &[&[u8]],
        cancels: &[Option<CancelFlag>],
        cap: u64,
    ) -> Vec<Option<Result<Vec<u8>, CoreError>>> {
        requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                self.grade_request_guarded(r, cancels.get(i).and_then(Option::as_ref), Some(cap))
            })
            .collect()
    }

    /// One request, a panic being that item's `Internal` error; `None` when it needed more
    /// than `cap` work units.
    fn grade_request_guarded(
        &self,
        request: &[u8],
        cancel: Option<&CancelFlag>,
        cap: Option<u64>,
    ) -> Option<Result<Vec<u8>, CoreError>> {
        catch_unwind(AssertUnwindSafe(|| self.grade_request(request, cancel, cap)))
            .unwrap_or_else(|_| Err(CoreError::Internal("grading panicked".to_owned())))
            .transpose()
    }

    /// A serialized `BatchGradeTracesRequest` → serialized `BatchGradeTracesResponse` (one
    /// `TraceOutcome` per trace; a bad trace, undecodable ones included, becomes an `ItemError`).
    /// Err only for a bad envelope, too many traces, or a bad or unknown suite.
    pub fn grade_batch_request(&self, request: &[u8]) -> Result<Vec<u8>, CoreError> {
        self.grade_batch_request_with(request, None)
    }

    /// As [`Grader::grade_batch_request`]; every trace stops at its next unit of work once
    /// `cancel` is cancelled (that trace's `ItemError` `CANCELLED`).
    pub fn grade_batch_request_with(
        &self,
        request: &[u8],
        cancel: Option<&CancelFlag>,
    ) -> Result<Vec<u8>, CoreError> {
        self.check_inline_suite_len(request, 1)?;
        if let Some(suite) = self.raw_hit(request, 1, 2) {
            if let Ok(req) = TracesOnlyEnvelope::decode(request) {
                if req.traces.len() <= self.limits.max_batch_items {
                    let refs: Vec<&[u8]> = req.traces.iter().map(Vec::as_slice).collect();
                    return Ok(encode_outcomes(&self.grade_traces_with(&suite, &refs, cancel)));
                }
            }
        }
        let raw = crate::wire::sole_message_field(request, 1, 2).map(raw_key);
        let req = BatchEnvelope::decode(request).map_err(|e| {
            CoreError::invalid_request("INVALID_REQUEST", String::new(), e.to_string())
        })?;
        if req.traces.len() > self.limits.max_batch_items {
            return Err(CoreError::limit(
                "TOO_MANY_TRACES",
                "traces".to_owned(),
                format!(
                    "batch has {} traces; the limit is {}",
                    req.traces.len(),
                    self.limits.max_batch_items
                ),
            ));
        }
        let suite = match req.suite_ref {
            Some(EnvelopeSuite::Suite(s)) => self.compile_raw(s, raw)?,
            Some(EnvelopeSuite::SuiteId(id)) => self.find_suite(&id)?,
            None => return Err(missing_suite()),
        };
        let refs: Vec<&[u8]> = req.traces.iter().map(Vec::as_slice).collect();
        Ok(encode_outcomes(&self.grade_traces_with(&suite, &refs, cancel)))
    }

    /// One `StreamGradeTracesRequest` chunk against its suite (the caller resolved the suite
    /// ref, which may have been set by an earlier message) → the `StreamGradeTracesResponse`
    /// bytes: one `outcomes` entry (field 2) per trace of `traces` (field 4), in order, each
    /// graded where it stands in the message (never copied). A trace that does not decode or is
    /// over a limit is that item's `ItemError` (field `traces[i]`, i within the message).
    /// Err for broken framing or more than `max_batch_items` traces.
    pub fn grade_stream_chunk(
        &self,
        suite: &CompiledSuite,
        message: &[u8],
        cancel: Option<&CancelFlag>,
    ) -> Result<Vec<u8>, CoreError> {
        let traces = crate::wire::repeated_len_field(message, 4).ok_or_else(|| {
            CoreError::invalid_request(
                "INVALID_REQUEST",
                "traces".to_owned(),
                "request is not a valid protobuf message".to_owned(),
            )
        })?;
        if traces.len() > self.limits.max_batch_items {
            return Err(CoreError::limit(
                "TOO_MANY_TRACES",
                "traces".to_owned(),
                format!(
                    "{} traces in one StreamGradeTracesRequest; the limit is {}",
                    traces.len(),
                    self.limits.max_batch_items
                ),
            ));
        }
        Ok(encode_outcomes_as(2, &self.grade_traces_with(suite, &traces, cancel)))
    }

    /// Grades serialized `Trace` messages against one suite: one serialized `TraceOutcome` each.
    /// An undecodable trace, a limit exceeded or a panic is that item's `ItemError` (field
    /// `traces[i]...`, `trace_id` filled whenever field 1 of the bytes is readable).
    pub fn grade_traces(&self, suite: &CompiledSuite, traces: &[&[u8]]) -> Vec<Vec<u8>> {
        self.grade_traces_with(suite, traces, None)
    }

    /// As [`Grader::grade_traces`]; every trace stops at its next unit of work once `cancel`
    /// is cancelled (that trace's `ItemError` `CANCELLED`).
    pub fn grade_traces_with(
        &self,
        suite: &CompiledSuite,
        traces: &[&[u8]],
        cancel: Option<&CancelFlag>,
    ) -> Vec<Vec<u8>> {
        self.pool.install(|| {
            traces
                .par_iter()
                .enumerate()
                .map(|(i, bytes)| {
                    guarded(
                        || self.grade_trace_bytes(suite, bytes, i, cancel),
                        || crate::wire::lenient_trace_id(bytes),
                        i,
                        "traces",
                    )
                })
                .collect()
        })
    }

    fn grade_trace_bytes(
        &self,
        suite: &CompiledSuite,
        bytes: &[u8],
        i: usize,
        cancel: Option<&CancelFlag>,
    ) -> Vec<u8> {
        let field = || format!("traces[{i}]");
        let stopped = |id: &str, stop: Stop| {
            let e = stop.error(self.limits.max_work_units, field());
            item_error(id.to_owned(), e.reason_code(), field(), e.message())
        };
        // The field path is only formatted when there is an error to report.
        match wire_decode(bytes, &self.limits, "") {
            Ok(Decoded::Parts(parts)) => {
                let view = cancellable(TraceView::from_parts(parts, &self.limits), cancel);
                suite.grade_view_encoded(&view).unwrap_or_else(|stop| stopped(view.id(), stop))
            }
            Ok(Decoded::Owned(t)) => {
                let view = cancellable(TraceView::new(&t, &self.limits), cancel);
                suite.grade_view_encoded(&view).unwrap_or_else(|stop| stopped(view.id(), stop))
            }
            Err(e) => item_error(
                crate::wire::lenient_trace_id(bytes),
                e.reason_code(),
                format!("{}{}", field(), e.field()),
                e.message(),
            ),
        }
    }

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
                    guarded(
                        || match self.grade_json_line(line, i, |v| {
                            suite
                                .grade_view_encoded(v)
                                .map_err(|stop| (v.id().to_owned(), self.stop_error(stop, i)))
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
                    guarded_row(
                        suite,
                        || self.json_line_result(suite, line, i),
                        || crate::rows::lenient_json_id(line),
                        i,
                    )
                })
                .collect()
        })
    }

    /// Bulk regrading of a block of native JSONL (whole lines; see [`crate::jsonl_block`]):
    /// every row as [`Grader::grade_json_traces_to_json`] writes it, in one buffer, with the
    /// summary counts; error rows (field `lines[i]`, `i` the item in the block) are always
    /// marked, failing rows up to `max_failing`.
    pub fn grade_jsonl_block(
        &self,
        suite: &CompiledSuite,
        data: &[u8],
        max_failing: usize,
    ) -> BlockRows {
        let lines = crate::jsonl_block::lines(data);
        self.graded_block(suite, lines.len(), max_failing, |i| {
            let line = &lines[i];
            let graded = guarded_result(
                || self.json_line_result(suite, line.text, i),
                || crate::rows::lenient_json_id(line.text),
                i,
            );
            (graded, line.index, line.start..line.start + line.text.len())
        })
    }

    /// As [`Grader::grade_jsonl_block`] for the rows of Arrow columns (the rows of
    /// [`Grader::grade_arrow_traces_to_json`] in one buffer); a mark's `line` is its row and
    /// its `text` empty.
    pub fn grade_arrow_block(
        &self,
        suite: &CompiledSuite,
        traces: &ArrowTraces<'_>,
        max_failing: usize,
    ) -> BlockRows {
        self.graded_block(suite, traces.rows(), max_failing, |i| {
            let graded = guarded_result(
                || self.grade_arrow_row(suite, traces, i),
                || traces.id(i).to_owned(),
                i,
            );
            (graded, i, 0..0)
        })
    }

    /// Items `0..n` graded by `one` (its outcome, line index and text range) into one
    /// [`BlockRows`]: small runs in parallel, each writing into one buffer (no per-row
    /// allocation), then joined in order.
    fn graded_block(
        &self,
        suite: &CompiledSuite,
        n: usize,
        max_failing: usize,
        one: impl Fn(usize) -> (Result<GradeResult, ItemError>, usize, Range<usize>) + Sync,
    ) -> BlockRows {
        const RUN: usize = 16;
        let runs: Vec<BlockRows> = self.pool.install(|| {
            (0..n.div_ceil(RUN))
                .into_par_iter()
                .map(|r| {
                    let mut out = BlockRows::default();
                    for i in r * RUN..n.min(r * RUN + RUN) {
                        let (graded, line, text) = one(i);
                        out.add(i - r * RUN, line, text, &graded, suite.id(), max_failing);
                    }
                    out
                })
                .collect()
        });
        let mut block = BlockRows::default();
        for run in runs {
            block.append(run, max_failing);
        }
        block
    }

    /// One JSON line graded, or its item error (field `lines[i]...`).
    fn json_line_result(
        &self,
        suite: &CompiledSuite,
        line: &[u8],
        i: usize,
    ) -> Result<GradeResult, ItemError> {
        let graded = self.grade_json_line(line, i, |v| {
            suite.grade_view(v).map_err(|stop| (v.id().to_owned(), self.stop_error(stop, i)))
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
                    guarded_row(
                        suite,
                        || self.grade_arrow_row(suite, traces, i),
                        || traces.id(i).to_owned(),
                        i,
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
    ) -> Result<crate::proto::v1::GradeResult, ItemError> {
        let to_item = |id: String, e: CoreError| ItemError {
            trace_id: id,
            reason_code: e.reason_code().to_owned(),
            field: e.field().to_owned(),
            message: e.message(),
        };
        let field = format!("lines[{i}]");
        let (parts, encoded_len) = traces.parts(i);
        if encoded_len <= self.limits.max_trace_bytes {
            return match check_parts(&parts, &self.limits, &field) {
                Ok(()) => {
                    let id = parts.id;
                    suite
                        .grade_view(&TraceView::from_parts(parts, &self.limits))
                        .map_err(|stop| to_item(id.to_owned(), self.stop_error(stop, i)))
                }
                Err(e) => Err(to_item(parts.id.to_owned(), e)),
            };
        }
        let trace = traces.trace(i);
        match check_trace(&trace, &self.limits, &field) {
            Ok(()) => suite
                .grade_view(&TraceView::new(&trace, &self.limits))
                .map_err(|stop| to_item(trace.id.clone(), self.stop_error(stop, i))),
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
        i: usize,
        grade: impl FnOnce(&TraceView<'_>) -> R,
    ) -> Result<R, (String, CoreError)> {
        let mut buf = DecodeBuf(DECODE_BUF.take());
        if let Some(json) = crate::json_trace::decode(line, &mut buf.0) {
            if json.encoded_len <= self.limits.max_trace_bytes {
                let parts = json.parts;
                return match check_parts(&parts, &self.limits, &format!("lines[{i}]")) {
                    Ok(()) => Ok(grade(&TraceView::from_parts(parts, &self.limits))),
                    Err(e) => Err((parts.id.to_owned(), e)),
                };
            }
        }
        let trace = self.json_trace(line, i)?;
        Ok(grade(&TraceView::new(&trace, &self.limits)))
    }

    /// Decodes (`serde_json` + pbjson) and checks one JSON line; the error comes with the trace
    /// id when readable.
    fn json_trace(&self, line: &[u8], i: usize) -> Result<Trace, (String, CoreError)> {
        let field = format!("lines[{i}]");
        let trace: Trace = serde_json::from_slice(line).map_err(|e| {
            let e = CoreError::invalid_request("INVALID_TRACE", field.clone(), e.to_string());
            (crate::rows::lenient_json_id(line), e)
        })?;
        match check_trace(&trace, &self.limits, &field) {
            Ok(()) => Ok(trace),
            Err(e) => Err((trace.id, e)),
        }
    }

    /// The item error of a JSON line or Arrow row whose grading stopped (field `lines[i]`).
    fn stop_error(&self, stop: Stop, i: usize) -> CoreError {
        stop.error(self.limits.max_work_units, format!("lines[{i}]"))
    }

    /// A decoded request's trace, checked and graded (field `trace`); `Ok(None)` when `cap`
    /// (a work limit below `max_work_units`) was not enough.
    fn grade_request_trace(
        &self,
        suite: &CompiledSuite,
        trace: &Trace,
        cancel: Option<&CancelFlag>,
        cap: Option<u64>,
    ) -> Result<Option<Vec<u8>>, CoreError> {
        check_trace(trace, &self.limits, "trace")?;
        let mut view = cancellable(TraceView::new(trace, &self.limits), cancel);
        let cap = cap.filter(|&c| c < self.limits.max_work_units);
        if let Some(c) = cap {
            view = view.with_work_limit(c);
        }
        match suite.grade_view(&view) {
            Ok(result) => Ok(Some(GradeTraceResponse { result: Some(result) }.encode_to_vec())),
            Err(Stop::WorkLimit) if cap.is_some() => Ok(None),
            Err(stop) => Err(stop.error(self.limits.max_work_units, "trace".to_owned())),
        }
    }

    fn grade_request(
        &self,
        bytes: &[u8],
        cancel: Option<&CancelFlag>,
        cap: Option<u64>,
    ) -> Result<Option<Vec<u8>>, CoreError> {
        self.check_inline_suite_len(bytes, 2)?;
        if let Some(suite) = self.raw_hit(bytes, 2, 3) {
            if let Ok(req) = TraceOnlyRequest::decode(bytes) {
                let trace = req.trace.unwrap_or_default();
                return self.grade_request_trace(&suite, &trace, cancel, cap);
            }
        }
        let raw = crate::wire::sole_message_field(bytes, 2, 3).map(raw_key);
        let req = GradeTraceRequest::decode(bytes).map_err(|e| {
            CoreError::invalid_request("INVALID_REQUEST", String::new(), e.to_string())
        })?;
        let suite = match req.suite_ref {
            Some(grade_trace_request::SuiteRef::Suite(s)) => self.compile_raw(s, raw)?,
            Some(grade_trace_request::SuiteRef::SuiteId(id)) => self.find_suite(&id)?,
            None => return Err(missing_suite()),
        };
        let trace = req.trace.unwrap_or_default();
        self.grade_request_trace(&suite, &trace, cancel, cap)
    }

    fn compile_decoded(&self, suite: Suite) -> Result<Arc<CompiledSuite>, CoreError> {
        let id = crate::suite::suite_id(&suite);
        if let Some(hit) = self.get_suite(&id) {
            return Ok(hit);
        }
        // Compile outside the lock: two threads may both compile a new suite; both results are equal.
        let compiled = Arc::new(CompiledSuite::compile_owned(suite, &self.limits)?);
        lock(&self.suites).put(id, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// The compiled suite for an inline suite whose raw bytes (field `tag` of `request`, the
    /// only suite reference in it) were compiled before and whose id is still cached.
    fn raw_hit(&self, request: &[u8], tag: u32, rival: u32) -> Option<Arc<CompiledSuite>> {
        let raw = crate::wire::sole_message_field(request, tag, rival)?;
        let id = lock_raw(&self.raw_suites).get(&raw_key(raw)).cloned()?;
        self.get_suite(&id)
    }

    /// [`Grader::compile_decoded`], remembering the raw bytes' hash for [`Grader::raw_hit`].
    fn compile_raw(
        &self,
        suite: Suite,
        raw: Option<[u8; 32]>,
    ) -> Result<Arc<CompiledSuite>, CoreError> {
        let compiled = self.compile_decoded(suite)?;
        if let Some(key) = raw {
            lock_raw(&self.raw_suites).put(key, compiled.id().to_owned());
        }
        Ok(compiled)
    }

    fn find_suite(&self, id: &str) -> Result<Arc<CompiledSuite>, CoreError> {
        self.get_suite(id).ok_or_else(|| CoreError::SuiteNotFound(id.to_owned()))
    }
}

fn lock(cache: &SuiteCache) -> std::sync::MutexGuard<'_, LruCache<String, Arc<CompiledSuite>>> {
    // A poisoned cache is still a valid cache: every entry is immutable.
    cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock_raw(
    cache: &Mutex<LruCache<[u8; 32], String>>,
) -> std::sync::MutexGuard<'_, LruCache<[u8; 32], String>> {
    cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// Runs one item's grading; a panic becomes that item's `INTERNAL` error with a generic message.
fn guarded(
    grade: impl FnOnce() -> Vec<u8>,
    trace_id: impl FnOnce() -> String,
    i: usize,
    list: &str,
) -> Vec<u8> {
    catch_unwind(AssertUnwindSafe(grade)).unwrap_or_else(|_| {
        item_error(trace_id(), "INTERNAL", format!("{list}[{i}]"), "internal error".to_owned())
    })
}

/// As [`guarded`] for the regrade JSONL rows: the result row, or the item's error row (a panic
/// becomes `INTERNAL` at `lines[i]`).
fn guarded_row(
    suite: &CompiledSuite,
    grade: impl FnOnce() -> Result<GradeResult, ItemError>,
    trace_id: impl FnOnce() -> String,
    i: usize,
) -> Vec<u8> {
    match guarded_result(grade, trace_id, i) {
        Ok(r) => crate::rows::result_row(&r),
        Err(e) => crate::rows::error_row(suite.id(), &e),
    }
}

/// One JSONL item's grading; a panic becomes its `INTERNAL` error at `lines[i]`.
fn guarded_result(
    grade: impl FnOnce() -> Result<GradeResult, ItemError>,
    trace_id: impl FnOnce() -> String,
    i: usize,
) -> Result<GradeResult, ItemError> {
    catch_unwind(AssertUnwindSafe(grade)).unwrap_or_else(|_| {
        Err(ItemError {
            trace_id: trace_id(),
            reason_code: "INTERNAL".to_owned(),
            field: format!("lines[{i}]"),
            message: "internal error".to_owned(),
        })
    })
}

fn item_error(trace_id: String, reason_code: &str, field: String, message: String) -> Vec<u8> {
    TraceOutcome {
        outcome: Some(trace_outcome::Outcome::Error(ItemError {
            trace_id,
            reason_code: reason_code.to_owned(),
            field,
            message,
        })),
    }
    .encode_to_vec()
}

/// `view`, stopping at its next unit of work once `cancel` (if any) is cancelled.
fn cancellable<'a>(view: TraceView<'a>, cancel: Option<&CancelFlag>) -> TraceView<'a> {
    match cancel {
        Some(flag) => view.with_cancel(flag.clone()),
        None => view,
    }
}

fn missing_suite() -> CoreError {
    CoreError::invalid_request(
        "INVALID_REQUEST",
        "suite_ref".to_owned(),
        "the request names neither a suite nor a suite_id".to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::Grader;
    use crate::limits::Limits;
    use crate::proto::v1::{
        batch_grade_traces_request, grade_trace_request, trace_outcome, BatchGradeTracesRequest,
        BatchGradeTracesResponse, GradeTraceRequest, GradeTraceResponse, Suite, ToolCall, Trace,
        TraceOutcome,
    };
    use crate::suite::CompiledSuite;
    use crate::trace::TraceView;

    fn suite() -> Suite {
        serde_json::from_str(r#"{"assertions":[{"tool_called":{"tool":"a"}}]}"#).expect("decodes")
    }

    fn trace(id: &str, names: &[&str]) -> Trace {
        Trace {
            id: id.to_owned(),
            calls: names
                .iter()
                .map(|n| ToolCall { name: (*n).to_owned(), ..ToolCall::default() })
                .collect(),
            ..Trace::default()
        }
    }

    #[test]
    fn inline_suites_over_max_suite_bytes_are_refused_on_every_path() {
        let encoded = suite().encode_to_vec();
        let limits = Limits { max_suite_bytes: encoded.len() - 1, ..Limits::default() };
        let g = Grader::new(limits, 1);
        let single = GradeTraceRequest {
            trace: Some(trace("t1", &["a"])),
            suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
        }
        .encode_to_vec();
        let batch = BatchGradeTracesRequest {
            suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
            traces: vec![trace("t1", &["a"])],
        }
        .encode_to_vec();
        let errors = [
            g.grade_requests(&[single.as_slice()]).remove(0).expect_err("too large"),
            g.grade_batch_request(&batch).expect_err("too large"),
            g.compile_suite(&encoded).expect_err("too large"),
            g.register_suite(&encoded).expect_err("too large"),
        ];
        for e in errors {
            assert_eq!((e.reason_code(), e.field()), ("SUITE_TOO_LARGE", "suite"));
            assert!(e.message().contains("max_suite_bytes"), "{}", e.message());
        }
        // At the limit it is graded (and the cached raw bytes do not bypass the check).
        let fits = Grader::new(Limits { max_suite_bytes: encoded.len(), ..Limits::default() }, 1);
        assert!(fits.grade_requests(&[single.as_slice()]).remove(0).is_ok());
        assert!(fits.grade_batch_request(&batch).is_ok());
    }

    #[test]
    fn here_grading_defers_what_needs_more_than_its_cap() {
        let g = Grader::new(Limits::default(), 1);
        // A step that is never found: the scan visits every call.
        let scan: Suite = serde_json::from_str(
            r#"{"assertions":[{"tool_sequence":{"steps":[{"tool":"a"},{"tool":"b"}]}}]}"#,
        )
        .expect("decodes");
        let request = |calls: &[&str]| {
            GradeTraceRequest {
                trace: Some(trace("t1", calls)),
                suite_ref: Some(grade_trace_request::SuiteRef::Suite(scan.clone())),
            }
            .encode_to_vec()
        };
        let (small, big) = (request(&["a"]), request(&["a"; 400]));
        let refs = [small.as_slice(), big.as_slice()];
        let full = g.grade_requests(&refs);
        // A generous cap grades both, byte for byte as the pool does.
        let roomy = g.grade_requests_here(&refs, &[], u64::MAX);
        for (here, pool) in roomy.iter().zip(&full) {
            assert_eq!(here.as_ref().expect("not deferred").as_ref().ok(), pool.as_ref().ok());
        }
        // A tight cap grades the small trace and hands the big one back, never an error.
        let units = |r: &[u8]| {
            let t = GradeTraceRequest::decode(r).expect("decodes").trace.expect("has a trace");
            let suite = CompiledSuite::compile(&scan, g.limits()).expect("compiles");
            let view = TraceView::new(&t, g.limits());
            suite.grade_view(&view).expect("graded");
            view.work().used()
        };
        let cap = units(&small);
        assert!(units(&big) > cap, "the big trace costs more");
        let tight = g.grade_requests_here(&refs, &[], cap);
        assert_eq!(tight[0].as_ref().expect("fits").as_ref().ok(), full[0].as_ref().ok());
        assert!(tight[1].is_none(), "deferred to the pool");
    }

    #[test]
    fn stream_chunks_are_split_and_framed_in_the_core() {
        let g = Grader::new(Limits { max_batch_items: 3, ..Limits::default() }, 1);
        let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
        let traces =
            [trace("t1", &["a"]).encode_to_vec(), vec![0xFF], trace("t3", &["b"]).encode_to_vec()];
        let field = |tag: u8, value: &[u8]| {
            let mut out = vec![tag << 3 | 2];
            prost::encoding::encode_varint(value.len() as u64, &mut out);
            out.extend_from_slice(value);
            out
        };
        // The traces among other fields (a suite_id, a varint): only field 4 is graded.
        let mut message: Vec<u8> = traces.iter().flat_map(|t| field(4, t)).collect();
        message.extend(field(3, b"s1-ignored"));
        message.extend([0x28, 0x01]);
        let refs: Vec<&[u8]> = traces.iter().map(Vec::as_slice).collect();
        let expected: Vec<u8> =
            g.grade_traces(&compiled, &refs).iter().flat_map(|o| field(2, o)).collect();
        assert_eq!(g.grade_stream_chunk(&compiled, &message, None).expect("graded"), expected);
        let broken = g.grade_stream_chunk(&compiled, &message[..message.len() - 3], None);
        assert_eq!(broken.expect_err("truncated").reason_code(), "INVALID_REQUEST");
        let four: Vec<u8> = [&message[..], &field(4, &traces[0])].concat();
        let over = g.grade_stream_chunk(&compiled, &four, None).expect_err("over max_batch_items");
        assert_eq!(over.reason_code(), "TOO_MANY_TRACES");
    }

    #[test]
    fn inline_suites_are_cached_by_raw_bytes() {
        let g = Grader::new(Limits { suite_cache_size: 1, ..Limits::default() }, 1);
        let request = |t: Trace| {
            GradeTraceRequest {
                trace: Some(t),
                suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
            }
            .encode_to_vec()
        };
        let cold = Grader::new(Limits::default(), 1);
        let mut bad = request(trace("t9", &["a"]));
        // Invalid UTF-8 in the trace id: the same prost error with or without a cached suite.
        let at = bad.windows(2).position(|w| w == b"t9").expect("id");
        bad[at] = 0xFF;
        let other = GradeTraceRequest {
            trace: Some(trace("t3", &["b"])),
            suite_ref: Some(grade_trace_request::SuiteRef::Suite(
                serde_json::from_str(r#"{"assertions":[{"tool_called":{"tool":"b"}}]}"#)
                    .expect("decodes"),
            )),
        }
        .encode_to_vec();
        let mut both = request(trace("t4", &["a"]));
        both.extend(
            GradeTraceRequest {
                trace: None,
                suite_ref: Some(grade_trace_request::SuiteRef::SuiteId("nope".to_owned())),
            }
            .encode_to_vec(),
        );
        let reqs = [
            request(trace("t1", &["a"])),
            request(trace("t2", &["b"])),
            bad,
            other,
            request(trace("t5", &["a"])),
            both,
        ];
        for r in &reqs {
            let warm = g.grade_requests(&[r]).pop().expect("one");
            let fresh = cold.grade_requests(&[r]).pop().expect("one");
            match (warm, fresh) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("{a:?} vs {b:?}"),
            }
        }
        let batch = |id: &str| {
            BatchGradeTracesRequest {
                suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
                traces: vec![trace(id, &["a"]), trace("x", &[])],
            }
            .encode_to_vec()
        };
        for r in [batch("b1"), batch("b2")] {
            assert_eq!(
                g.grade_batch_request(&r).expect("grades"),
                cold.grade_batch_request(&r).expect("grades")
            );
        }
    }

    #[test]
    fn suites_are_cached_by_content() {
        let g = Grader::new(Limits::default(), 1);
        let bytes = suite().encode_to_vec();
        let a = g.compile_suite(&bytes).expect("compiles");
        let id = g.register_suite(&bytes).expect("registers");
        assert_eq!(a.id(), id);
        assert!(id.starts_with("s1-") && id.len() == 35, "{id}");
        assert!(std::sync::Arc::ptr_eq(&a, &g.get_suite(&id).expect("cached")));
        assert!(g.get_suite("s1-unknown").is_none());
    }

    #[test]
    fn per_item_errors_stay_in_their_item() {
        let g = Grader::new(Limits { max_calls_per_trace: 2, ..Limits::default() }, 2);
        let ok = GradeTraceRequest {
            trace: Some(trace("ok", &["a"])),
            suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
        }
        .encode_to_vec();
        let unknown = GradeTraceRequest {
            trace: Some(trace("u", &["a"])),
            suite_ref: Some(grade_trace_request::SuiteRef::SuiteId("s1-nope".to_owned())),
        }
        .encode_to_vec();
        let too_many = GradeTraceRequest {
            trace: Some(trace("big", &["a", "a", "a"])),
            suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
        }
        .encode_to_vec();
        let out = g.grade_requests(&[&ok, &unknown, &too_many, b"\xff\xff"]);
        let first =
            GradeTraceResponse::decode(out[0].as_deref().expect("graded")).expect("decodes");
        assert_eq!(first.result.expect("result").trace_id, "ok");
        assert_eq!(
            out[1].as_ref().map_err(crate::CoreError::reason_code).err(),
            Some("SUITE_NOT_FOUND")
        );
        let e = out[2].as_ref().expect_err("too many calls");
        assert_eq!((e.reason_code(), e.field()), ("TOO_MANY_CALLS", "trace.calls"));
        assert_eq!(
            out[3].as_ref().map_err(crate::CoreError::reason_code).err(),
            Some("INVALID_REQUEST")
        );
    }

    #[test]
    fn batch_request_and_trace_bytes() {
        let g = Grader::new(Limits { max_calls_per_trace: 2, ..Limits::default() }, 2);
        let req = BatchGradeTracesRequest {
            suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
            traces: vec![trace("t0", &["a"]), trace("t1", &["a", "b", "c"]), trace("t2", &["b"])],
        };
        let resp = BatchGradeTracesResponse::decode(
            g.grade_batch_request(&req.encode_to_vec()).expect("graded").as_slice(),
        )
        .expect("decodes");
        assert_eq!(resp.outcomes.len(), 3);
        match &resp.outcomes[1].outcome {
            Some(trace_outcome::Outcome::Error(e)) => {
                assert_eq!((e.trace_id.as_str(), e.field.as_str()), ("t1", "traces[1].calls"));
            }
            other => panic!("expected an item error, got {other:?}"),
        }
        let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
        let t0 = trace("t0", &["a"]).encode_to_vec();
        let out = g.grade_traces(&compiled, &[&t0, b"\x0a"]);
        let bad = TraceOutcome::decode(out[1].as_slice()).expect("decodes");
        match bad.outcome {
            Some(trace_outcome::Outcome::Error(e)) => assert_eq!(e.reason_code, "INVALID_TRACE"),
            other => panic!("expected an item error, got {other:?}"),
        }
    }

    fn outcome_of(bytes: &[u8]) -> trace_outcome::Outcome {
        TraceOutcome::decode(bytes).expect("decodes").outcome.expect("set")
    }

    #[test]
    fn one_undecodable_trace_does_not_sink_the_batch() {
        let g = Grader::new(Limits::default(), 2);
        // traces[1] has a name that is not UTF-8 (and id "bad"): prost would reject the batch.
        let mut raw = BatchGradeTracesRequest {
            suite_ref: Some(batch_grade_traces_request::SuiteRef::Suite(suite())),
            traces: vec![trace("t0", &["a"])],
        }
        .encode_to_vec();
        let bad_trace = b"\x0a\x03bad\x12\x03\x0a\x01\xff";
        raw.push(0x1a);
        raw.push(bad_trace.len() as u8);
        raw.extend_from_slice(bad_trace);
        raw.extend(
            BatchGradeTracesRequest { suite_ref: None, traces: vec![trace("t2", &["b"])] }
                .encode_to_vec(),
        );
        let resp = BatchGradeTracesResponse::decode(
            g.grade_batch_request(&raw).expect("graded").as_slice(),
        )
        .expect("decodes");
        assert_eq!(resp.outcomes.len(), 3);
        match &resp.outcomes[1].outcome {
            Some(trace_outcome::Outcome::Error(e)) => assert_eq!(
                (e.trace_id.as_str(), e.reason_code.as_str(), e.field.as_str()),
                ("bad", "INVALID_TRACE", "traces[1]")
            ),
            other => panic!("expected an item error, got {other:?}"),
        }
        assert!(matches!(resp.outcomes[2].outcome, Some(trace_outcome::Outcome::Result(_))));
        // The same through grade_traces: the id is read leniently.
        let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
        match outcome_of(&g.grade_traces(&compiled, &[bad_trace])[0]) {
            trace_outcome::Outcome::Error(e) => assert_eq!(e.trace_id, "bad"),
            other @ trace_outcome::Outcome::Result(_) => {
                panic!("expected an item error, got {other:?}")
            }
        }
    }

    #[test]
    fn a_trace_over_the_work_limit_is_its_item_error_alone() {
        let g = Grader::new(Limits { max_work_units: 50, ..Limits::default() }, 2);
        let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
        let small = trace("small", &["a"]).encode_to_vec();
        let names: Vec<&str> = vec!["a"; 60];
        let big = trace("big", &names).encode_to_vec();
        let out = g.grade_traces(&compiled, &[&small, &big, &small]);
        assert!(matches!(outcome_of(&out[0]), trace_outcome::Outcome::Result(_)));
        assert!(matches!(outcome_of(&out[2]), trace_outcome::Outcome::Result(_)));
        match outcome_of(&out[1]) {
            trace_outcome::Outcome::Error(e) => assert_eq!(
                (e.trace_id.as_str(), e.reason_code.as_str(), e.field.as_str(), e.message.as_str()),
                (
                    "big",
                    "WORK_LIMIT_EXCEEDED",
                    "traces[1]",
                    "grading needed more than 50 work units (limit max_work_units)"
                )
            ),
            other @ trace_outcome::Outcome::Result(_) => {
                panic!("expected an item error, got {other:?}")
            }
        }
        // The unary form: the request's error, at `trace`.
        let request = |t: Trace| {
            GradeTraceRequest {
                trace: Some(t),
                suite_ref: Some(grade_trace_request::SuiteRef::Suite(suite())),
            }
            .encode_to_vec()
        };
        let out = g.grade_requests(&[&request(trace("big", &names)), &request(trace("s", &["a"]))]);
        let e = out[0].as_ref().expect_err("over the limit");
        assert_eq!((e.reason_code(), e.field()), ("WORK_LIMIT_EXCEEDED", "trace"));
        assert!(out[1].is_ok());
        // JSON lines and their rows.
        let line = serde_json::to_vec(&trace("big", &names)).expect("json");
        let rows = g.grade_json_traces_to_json(&compiled, &[&line]);
        let row = String::from_utf8(rows[0].clone()).expect("utf-8");
        assert!(
            row.contains("\"reason_code\":\"WORK_LIMIT_EXCEEDED\",\"field\":\"lines[0]\""),
            "{row}"
        );
    }

    #[test]
    fn a_cancelled_flag_stops_every_item() {
        let g = Grader::new(Limits::default(), 2);
        let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
        let t = trace("t", &["a"]).encode_to_vec();
        let flag = crate::work::CancelFlag::new();
        flag.cancel();
        let out = g.grade_traces_with(&compiled, &[&t, &t], Some(&flag));
        for o in &out {
            match outcome_of(o) {
                trace_outcome::Outcome::Error(e) => assert_eq!(e.reason_code, "CANCELLED"),
                other @ trace_outcome::Outcome::Result(_) => {
                    panic!("expected an item error, got {other:?}")
                }
            }
        }
        let live = crate::work::CancelFlag::new();
        let out = g.grade_traces_with(&compiled, &[&t], Some(&live));
        assert!(matches!(outcome_of(&out[0]), trace_outcome::Outcome::Result(_)));
    }

    #[test]
    fn a_panic_is_that_items_internal_error() {
        let out = super::guarded(|| panic!("boom"), || "t9".to_owned(), 4, "traces");
        match outcome_of(&out) {
            trace_outcome::Outcome::Error(e) => assert_eq!(
                (e.trace_id.as_str(), e.reason_code.as_str(), e.field.as_str(), e.message.as_str()),
                ("t9", "INTERNAL", "traces[4]", "internal error")
            ),
            other @ trace_outcome::Outcome::Result(_) => {
                panic!("expected an item error, got {other:?}")
            }
        }
    }

    #[test]
    fn registered_suites_survive_inline_traffic_and_evict_lru() {
        let g = Grader::new(Limits { suite_cache_size: 1, ..Limits::default() }, 1)
            .with_max_registered_suites(2);
        let numbered = |n: usize| -> Vec<u8> {
            let json =
                format!(r#"{{"name":"s{n}","assertions":[{{"tool_called":{{"tool":"a"}}}}]}}"#);
            serde_json::from_str::<Suite>(&json).expect("decodes").encode_to_vec()
        };
        let r0 = g.register_suite(&numbered(0)).expect("registers");
        for n in 10..20 {
            g.compile_suite(&numbered(n)).expect("compiles");
        }
        assert!(g.get_suite(&r0).is_some(), "inline suites evicted a registered one");
        let r1 = g.register_suite(&numbered(1)).expect("registers");
        assert!(g.get_suite(&r0).is_some()); // r0 is now the most recently used
        let r2 = g.register_suite(&numbered(2)).expect("registers");
        assert!(g.get_suite(&r1).is_none(), "the least recently used registered suite goes");
        assert!(g.get_suite(&r0).is_some() && g.get_suite(&r2).is_some());
    }

    #[test]
    fn json_lines() {
        let g = Grader::new(Limits::default(), 2);
        let compiled = g.compile_suite(&suite().encode_to_vec()).expect("compiles");
        let lines: [&[u8]; 3] = [
            br#"{"id":"j0","calls":[{"name":"a","argumentsJson":"{}"}],"final_answer":"x"}"#,
            br#"{"id":"j1","calls":[{"nam":"a"}]}"#,
            b"not json",
        ];
        let out = g.grade_json_traces(&compiled, &lines);
        let t0 = trace("j0", &["a"]);
        let mut t0 = t0;
        t0.calls[0].arguments_json = Some("{}".to_owned());
        t0.final_answer = "x".to_owned();
        assert_eq!(out[0], g.grade_traces(&compiled, &[&t0.encode_to_vec()])[0]);
        match outcome_of(&out[1]) {
            trace_outcome::Outcome::Error(e) => {
                assert_eq!((e.trace_id.as_str(), e.field.as_str()), ("j1", "lines[1]"));
                assert_eq!(e.reason_code, "INVALID_TRACE");
                assert!(e.message.contains("nam"), "{}", e.message);
            }
            other @ trace_outcome::Outcome::Result(_) => {
                panic!("expected an item error, got {other:?}")
            }
        }
        let rows = g.grade_json_traces_to_json(&compiled, &lines);
        let id = compiled.id();
        assert_eq!(
            String::from_utf8(rows[0].clone()).expect("utf-8"),
            format!(
                "{{\"trace_id\":\"j0\",\"suite_id\":\"{id}\",\"verdict\":\"VERDICT_PASS\",\"score\":1.0,\"soft_failures\":0,\"results\":[{{\"name\":\"tool_called:a\",\"status\":\"ASSERTION_STATUS_PASS\",\"severity\":\"SEVERITY_HARD\",\"reason_code\":\"\",\"reason\":\"\",\"positions\":[1],\"score\":1.0}}],\"mean_score\":1.0}}\n"
            )
        );
        let error_row = String::from_utf8(rows[2].clone()).expect("utf-8");
        assert!(
            error_row.starts_with(&format!(
                "{{\"trace_id\":\"\",\"suite_id\":\"{id}\",\"error\":{{\"reason_code\":\"INVALID_TRACE\",\"field\":\"lines[2]\",\"message\":\""
            )),
            "{error_row}"
        );
    }

    #[test]
    fn a_block_is_its_lines_rows_joined_and_counted() {
        use crate::json_trace::generate::{line, odd_line, Rng};
        let g = Grader::new(Limits { max_calls_per_trace: 5, ..Limits::default() }, 2);
        let suite: Suite = serde_json::from_str(
            r#"{"assertions":[{"tool_called":{"tool":"x"}},
                {"tool_count":{"tool":"y","max":1},"severity":"SEVERITY_SOFT"}]}"#,
        )
        .expect("decodes");
        let compiled = g.compile_suite(&suite.encode_to_vec()).expect("compiles");
        let mut rng = Rng(5);
        let mut data = Vec::new();
        let mut lines = Vec::new();
        for i in 0..700 {
            let mut l = if i % 4 == 0 { odd_line(&mut rng) } else { line(&mut rng).into_bytes() };
            l.retain(|&b| b != b'\n');
            l.push(b'\n');
            data.extend_from_slice(&l);
            if i % 50 == 0 {
                data.extend_from_slice(b" \t\r\n");
            }
            // A line of only whitespace is skipped, as a regrade's reader skips it.
            if !l.iter().all(|b| b" \t\n\r\x0b\x0c".contains(b)) {
                lines.push(l);
            }
        }
        let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let rows = g.grade_json_traces_to_json(&compiled, &refs);
        let block = g.grade_jsonl_block(&compiled, &data, 5);
        for (i, (got, want)) in block.rows.split_inclusive('\n').zip(&rows).enumerate() {
            assert_eq!(
                got.as_bytes(),
                &want[..],
                "row {i}: {:?}",
                String::from_utf8_lossy(refs[i])
            );
        }
        assert_eq!(block.rows.as_bytes(), rows.concat());
        assert_eq!(block.items, rows.len());
        let parsed: Vec<serde_json::Value> =
            rows.iter().map(|r| serde_json::from_slice(r).expect("row")).collect();
        let graded: Vec<_> = parsed.iter().filter(|r| r.get("error").is_none()).collect();
        let passes = graded.iter().filter(|r| r["verdict"] == "VERDICT_PASS").count();
        assert_eq!((block.passed, block.failed), (passes as u64, (graded.len() - passes) as u64));
        let soft: u64 = graded.iter().map(|r| r["soft_failures"].as_u64().expect("u32")).sum();
        assert_eq!(block.soft_failures, soft);
        for c in &block.assertions {
            let results = graded.iter().flat_map(|r| r["results"].as_array().expect("list"));
            let named: Vec<_> = results.filter(|a| a["name"] == c.name.as_str()).collect();
            let ok = named.iter().filter(|a| a["status"] == "ASSERTION_STATUS_PASS").count();
            assert_eq!((c.passed, c.failed), (ok as u64, (named.len() - ok) as u64), "{}", c.name);
        }
        let errors: Vec<usize> =
            (0..parsed.len()).filter(|&i| parsed[i].get("error").is_some()).collect();
        let failing: Vec<usize> = (0..parsed.len())
            .filter(|&i| parsed[i].get("error").is_none() && parsed[i]["verdict"] != "VERDICT_PASS")
            .take(5)
            .collect();
        let mut expected: Vec<usize> = errors.iter().chain(&failing).copied().collect();
        expected.sort_unstable();
        assert!(!errors.is_empty() && failing.len() == 5);
        assert_eq!(block.marks.iter().map(|m| m.item).collect::<Vec<_>>(), expected);
        for m in &block.marks {
            assert_eq!(m.error, errors.contains(&m.item));
            assert_eq!(block.rows.as_bytes()[m.row.clone()], rows[m.item][..]);
            assert_eq!(data[m.text.clone()], lines[m.item][..]);
        }
    }

    #[test]
    fn json_lines_fast_and_serde_paths_agree() {
        use crate::json_trace::generate::{line, odd_line, Rng};
        use crate::trace::TraceView;
        let limits = Limits {
            max_calls_per_trace: 5,
            max_argument_bytes: 200,
            max_trace_bytes: 3000,
            ..Limits::default()
        };
        let g = Grader::new(limits, 2);
        let suite: Suite = serde_json::from_str(
            r#"{"assertions":[{"tool_called":{"tool":"x"}},
                {"tool_call_args":{"tool":"x","match":{"mode":"MATCH_MODE_SUBSET","args_json":"{}"}}},
                {"expression":{"expr":"'env' in metadata && size(calls) > 0"}},
                {"no_repeated_calls":{}},{"grounding":{"numbers":true}}]}"#,
        )
        .expect("decodes");
        let compiled = g.compile_suite(&suite.encode_to_vec()).expect("compiles");
        let mut rng = Rng(3);
        let lines: Vec<Vec<u8>> = (0..6000)
            .map(|i| if i % 3 == 0 { odd_line(&mut rng) } else { line(&mut rng).into_bytes() })
            .collect();
        let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let rows = g.grade_json_traces_to_json(&compiled, &refs);
        let outcomes = g.grade_json_traces(&compiled, &refs);
        let (mut graded, mut errors) = (0, 0);
        for (i, line) in refs.iter().enumerate() {
            // The previous path: serde_json + pbjson into an owned Trace.
            let (row, outcome) = match g.json_trace(line, i) {
                Ok(t) => {
                    graded += 1;
                    let view = TraceView::new(&t, g.limits());
                    (
                        crate::rows::result_row(&compiled.grade_view(&view).expect("graded")),
                        compiled.grade_view_encoded(&view).expect("graded"),
                    )
                }
                Err((id, e)) => {
                    errors += 1;
                    let item = crate::proto::v1::ItemError {
                        trace_id: id.clone(),
                        reason_code: e.reason_code().to_owned(),
                        field: e.field().to_owned(),
                        message: e.message(),
                    };
                    (
                        crate::rows::error_row(compiled.id(), &item),
                        super::item_error(id, e.reason_code(), e.field().to_owned(), e.message()),
                    )
                }
            };
            let shown = String::from_utf8_lossy(line);
            assert_eq!(String::from_utf8_lossy(&rows[i]), String::from_utf8_lossy(&row), "{shown}");
            assert_eq!(outcomes[i], outcome, "{shown}");
        }
        assert!(graded > 1000 && errors > 500, "{graded} graded, {errors} errors");
    }
}
