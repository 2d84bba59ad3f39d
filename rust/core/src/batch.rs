//! The `Grader`: a dedicated rayon pool, the compiled-suite LRU, and the byte-level batch API.
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use prost::Message;
use rayon::prelude::*;

use crate::error::CoreError;
use crate::limits::Limits;
use crate::proto::v1::{
    batch_grade_traces_request, grade_trace_request, trace_outcome, BatchGradeTracesRequest,
    BatchGradeTracesResponse, GradeTraceRequest, GradeTraceResponse, ItemError, Suite, Trace,
    TraceOutcome,
};
use crate::suite::CompiledSuite;
use crate::trace::{check_trace, decode_trace};

/// Shared by every thread: limits, a rayon pool built once (never the global one), the suite LRU.
pub struct Grader {
    limits: Limits,
    pool: rayon::ThreadPool,
    suites: Mutex<LruCache<String, Arc<CompiledSuite>>>,
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
        Grader { limits, pool, suites: Mutex::new(LruCache::new(cap)) }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Decodes and compiles a serialized `Suite`, reusing the cached compilation of equal content.
    pub fn compile_suite(&self, suite_bytes: &[u8]) -> Result<Arc<CompiledSuite>, CoreError> {
        if suite_bytes.len() > self.limits.max_suite_bytes {
            return Err(CoreError::limit(
                "SUITE_TOO_LARGE",
                "suite".to_owned(),
                format!(
                    "suite is {} bytes; the limit is {}",
                    suite_bytes.len(),
                    self.limits.max_suite_bytes
                ),
            ));
        }
        let suite = Suite::decode(suite_bytes).map_err(|e| {
            CoreError::invalid_request("INVALID_SUITE", "suite".to_owned(), e.to_string())
        })?;
        self.compile_decoded(suite)
    }

    /// Compiles a serialized suite and keeps it; returns its id.
    pub fn register_suite(&self, suite_bytes: &[u8]) -> Result<String, CoreError> {
        Ok(self.compile_suite(suite_bytes)?.id().to_owned())
    }

    /// A compiled suite by id, if it is still cached.
    pub fn get_suite(&self, suite_id: &str) -> Option<Arc<CompiledSuite>> {
        self.lock().get(suite_id).cloned()
    }

    /// Each item: a serialized `GradeTraceRequest` → a serialized `GradeTraceResponse`, or that
    /// item's error. Items are graded in parallel on the pool.
    pub fn grade_requests(&self, requests: &[&[u8]]) -> Vec<Result<Vec<u8>, CoreError>> {
        self.pool.install(|| requests.par_iter().map(|r| self.grade_request(r)).collect())
    }

    /// A serialized `BatchGradeTracesRequest` → serialized `BatchGradeTracesResponse` (one
    /// `TraceOutcome` per trace; a bad trace becomes an `ItemError`).
    pub fn grade_batch_request(&self, request: &[u8]) -> Result<Vec<u8>, CoreError> {
        let req = BatchGradeTracesRequest::decode(request).map_err(|e| {
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
            Some(batch_grade_traces_request::SuiteRef::Suite(s)) => self.compile_decoded(s)?,
            Some(batch_grade_traces_request::SuiteRef::SuiteId(id)) => self.find_suite(&id)?,
            None => return Err(missing_suite()),
        };
        let outcomes = self.pool.install(|| {
            req.traces
                .par_iter()
                .enumerate()
                .map(|(i, t)| {
                    let field = format!("traces[{i}]");
                    let checked = check_trace(t, &self.limits, &field).map(|()| t);
                    outcome(checked, &suite, &self.limits, &t.id)
                })
                .collect()
        });
        Ok(BatchGradeTracesResponse { outcomes }.encode_to_vec())
    }

    /// Grades serialized `Trace` messages against one suite: one serialized `TraceOutcome` each.
    pub fn grade_traces(&self, suite: &CompiledSuite, traces: &[&[u8]]) -> Vec<Vec<u8>> {
        self.pool.install(|| {
            traces
                .par_iter()
                .enumerate()
                .map(|(i, bytes)| {
                    let field = format!("traces[{i}]");
                    match decode_trace(bytes, &self.limits, &field) {
                        Ok(t) => outcome(Ok(&t), suite, &self.limits, &t.id),
                        Err(e) => outcome(Err(e), suite, &self.limits, ""),
                    }
                    .encode_to_vec()
                })
                .collect()
        })
    }

    fn grade_request(&self, bytes: &[u8]) -> Result<Vec<u8>, CoreError> {
        let req = GradeTraceRequest::decode(bytes).map_err(|e| {
            CoreError::invalid_request("INVALID_REQUEST", String::new(), e.to_string())
        })?;
        let suite = match req.suite_ref {
            Some(grade_trace_request::SuiteRef::Suite(s)) => self.compile_decoded(s)?,
            Some(grade_trace_request::SuiteRef::SuiteId(id)) => self.find_suite(&id)?,
            None => return Err(missing_suite()),
        };
        let trace = req.trace.unwrap_or_default();
        check_trace(&trace, &self.limits, "trace")?;
        let result = suite.grade(&trace, &self.limits);
        Ok(GradeTraceResponse { result: Some(result) }.encode_to_vec())
    }

    fn compile_decoded(&self, suite: Suite) -> Result<Arc<CompiledSuite>, CoreError> {
        let id = crate::suite::suite_id(&suite);
        if let Some(hit) = self.lock().get(&id) {
            return Ok(Arc::clone(hit));
        }
        // Compile outside the lock: two threads may both compile a new suite; both results are equal.
        let compiled = Arc::new(CompiledSuite::compile_owned(suite, &self.limits)?);
        self.lock().put(id, Arc::clone(&compiled));
        Ok(compiled)
    }

    fn find_suite(&self, id: &str) -> Result<Arc<CompiledSuite>, CoreError> {
        self.get_suite(id).ok_or_else(|| CoreError::SuiteNotFound(id.to_owned()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Arc<CompiledSuite>>> {
        // A poisoned cache is still a valid cache: every entry is immutable.
        self.suites.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn missing_suite() -> CoreError {
    CoreError::invalid_request(
        "INVALID_REQUEST",
        "suite_ref".to_owned(),
        "the request names neither a suite nor a suite_id".to_owned(),
    )
}

fn outcome(
    trace: Result<&Trace, CoreError>,
    suite: &CompiledSuite,
    limits: &Limits,
    trace_id: &str,
) -> TraceOutcome {
    let outcome = match trace {
        Ok(t) => trace_outcome::Outcome::Result(suite.grade(t, limits)),
        Err(e) => trace_outcome::Outcome::Error(ItemError {
            trace_id: trace_id.to_owned(),
            reason_code: e.reason_code().to_owned(),
            field: e.field().to_owned(),
            message: e.message(),
        }),
    };
    TraceOutcome { outcome: Some(outcome) }
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
}
