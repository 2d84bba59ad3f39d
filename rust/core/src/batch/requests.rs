//! Serialized requests graded by the `Grader`: `GradeTraceRequest`s, `BatchGradeTracesRequest`
//! envelopes, `StreamGradeTracesRequest` chunks and bare `Trace` bytes.
use std::panic::{catch_unwind, AssertUnwindSafe};

use prost::Message;
use rayon::prelude::*;

use super::pool::raw_key;
use super::{guarded, item_error, Grader};
use crate::error::CoreError;
use crate::proto::v1::{grade_trace_request, GradeTraceRequest, GradeTraceResponse, Suite, Trace};
use crate::suite::CompiledSuite;
use crate::trace::{check_trace, wire_decode, Decoded, TraceView};
use crate::work::{CancelFlag, Stop};

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

    /// As [`Grader::grade_traces`], one trace after the other on the calling thread, each
    /// with a work limit of `cap` units (when below `max_work_units`): for a few traces that
    /// must not wait for the pool's threads to wake (a live result's latency). A trace that
    /// needs more than `cap` is `None`: grade it again with `grade_traces` (the full limit,
    /// from the start, so its outcome does not depend on where it was graded). The others are
    /// the same bytes as `grade_traces`.
    pub fn grade_traces_here(
        &self,
        suite: &CompiledSuite,
        traces: &[&[u8]],
        cap: u64,
    ) -> Vec<Option<Vec<u8>>> {
        let cap = Some(cap).filter(|&c| c < self.limits.max_work_units);
        traces
            .iter()
            .enumerate()
            .map(|(i, bytes)| {
                guarded(
                    || self.grade_trace_capped(suite, bytes, i, None, cap),
                    || crate::wire::lenient_trace_id(bytes),
                    i,
                    "traces",
                )
            })
            .collect()
    }

    fn grade_trace_bytes(
        &self,
        suite: &CompiledSuite,
        bytes: &[u8],
        i: usize,
        cancel: Option<&CancelFlag>,
    ) -> Vec<u8> {
        self.grade_trace_capped(suite, bytes, i, cancel, None)
            .expect("without a cap nothing is deferred")
    }

    /// One trace's `TraceOutcome`; `None` when `cap` (a work limit below `max_work_units`)
    /// was not enough.
    fn grade_trace_capped(
        &self,
        suite: &CompiledSuite,
        bytes: &[u8],
        i: usize,
        cancel: Option<&CancelFlag>,
        cap: Option<u64>,
    ) -> Option<Vec<u8>> {
        let field = || format!("traces[{i}]");
        let graded = |view: TraceView<'_>| {
            let view = match cap {
                Some(c) => view.with_work_limit(c),
                None => view,
            };
            match suite.grade_view_encoded(&view) {
                Ok(outcome) => Some(outcome),
                Err(Stop::WorkLimit) if cap.is_some() => None,
                Err(stop) => {
                    // The field path is only formatted when there is an error to report.
                    let e = stop.error(self.limits.max_work_units, field());
                    Some(item_error(view.id().to_owned(), e.reason_code(), field(), e.message()))
                }
            }
        };
        match wire_decode(bytes, &self.limits, "") {
            Ok(Decoded::Parts(parts)) => {
                graded(cancellable(TraceView::from_parts(parts, &self.limits), cancel))
            }
            Ok(Decoded::Owned(t)) => graded(cancellable(TraceView::new(&t, &self.limits), cancel)),
            Err(e) => Some(item_error(
                crate::wire::lenient_trace_id(bytes),
                e.reason_code(),
                format!("{}{}", field(), e.field()),
                e.message(),
            )),
        }
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
