//! `Grader`, `CompiledSuite` and `Limits`: frozen wrappers over the core; bytes in, bytes out.
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{mpsc, Arc, Mutex};

use prost::Message;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};
use trajgrade_core::arrow_cols::{ArrowTraces, RawArray, RawTraces};
use trajgrade_core::jsonl_block::{Origin, Unit};
use trajgrade_core::work::CancelFlag;
use trajgrade_core::{CompiledSuite, Grader, Limits};

use crate::data::Data;
use crate::detach::run_detached;
use crate::dict_trace::Chunk;
use crate::errors::{internal_error, to_exception, PyCoreError};
use crate::jsonl::{check_range, origin, PyJsonlBlock};
use crate::lazy_result::LazyGradeResult;
use crate::parquet::ArrowColumns;

/// Every SPEC §7 limit; keyword construction, read-only attributes, defaults as in the core.
#[pyclass(frozen, get_all, eq, name = "Limits", module = "trajgrade._core")]
#[derive(Clone, PartialEq, Eq)]
pub struct PyLimits {
    max_trace_bytes: usize,
    max_calls_per_trace: usize,
    max_argument_bytes: usize,
    max_json_depth: usize,
    max_regex_bytes: usize,
    max_assertions_per_suite: usize,
    max_suite_bytes: usize,
    suite_cache_size: usize,
    max_batch_items: usize,
    max_work_units: u64,
    expression_cost_limit: u64,
}

impl PyLimits {
    fn to_core(&self) -> Limits {
        Limits {
            max_trace_bytes: self.max_trace_bytes,
            max_calls_per_trace: self.max_calls_per_trace,
            max_argument_bytes: self.max_argument_bytes,
            max_json_depth: self.max_json_depth,
            max_regex_bytes: self.max_regex_bytes,
            max_assertions_per_suite: self.max_assertions_per_suite,
            max_suite_bytes: self.max_suite_bytes,
            suite_cache_size: self.suite_cache_size,
            max_batch_items: self.max_batch_items,
            max_work_units: self.max_work_units,
            expression_cost_limit: self.expression_cost_limit,
        }
    }

    fn from_core(l: &Limits) -> Self {
        PyLimits {
            max_trace_bytes: l.max_trace_bytes,
            max_calls_per_trace: l.max_calls_per_trace,
            max_argument_bytes: l.max_argument_bytes,
            max_json_depth: l.max_json_depth,
            max_regex_bytes: l.max_regex_bytes,
            max_assertions_per_suite: l.max_assertions_per_suite,
            max_suite_bytes: l.max_suite_bytes,
            suite_cache_size: l.suite_cache_size,
            max_batch_items: l.max_batch_items,
            max_work_units: l.max_work_units,
            expression_cost_limit: l.expression_cost_limit,
        }
    }
}

#[pymethods]
impl PyLimits {
    #[new]
    #[pyo3(signature = (
        *,
        max_trace_bytes = None,
        max_calls_per_trace = None,
        max_argument_bytes = None,
        max_json_depth = None,
        max_regex_bytes = None,
        max_assertions_per_suite = None,
        max_suite_bytes = None,
        suite_cache_size = None,
        max_batch_items = None,
        max_work_units = None,
        expression_cost_limit = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_trace_bytes: Option<usize>,
        max_calls_per_trace: Option<usize>,
        max_argument_bytes: Option<usize>,
        max_json_depth: Option<usize>,
        max_regex_bytes: Option<usize>,
        max_assertions_per_suite: Option<usize>,
        max_suite_bytes: Option<usize>,
        suite_cache_size: Option<usize>,
        max_batch_items: Option<usize>,
        max_work_units: Option<u64>,
        expression_cost_limit: Option<u64>,
    ) -> Self {
        let d = Limits::default();
        PyLimits {
            max_trace_bytes: max_trace_bytes.unwrap_or(d.max_trace_bytes),
            max_calls_per_trace: max_calls_per_trace.unwrap_or(d.max_calls_per_trace),
            max_argument_bytes: max_argument_bytes.unwrap_or(d.max_argument_bytes),
            max_json_depth: max_json_depth.unwrap_or(d.max_json_depth),
            max_regex_bytes: max_regex_bytes.unwrap_or(d.max_regex_bytes),
            max_assertions_per_suite: max_assertions_per_suite
                .unwrap_or(d.max_assertions_per_suite),
            max_suite_bytes: max_suite_bytes.unwrap_or(d.max_suite_bytes),
            suite_cache_size: suite_cache_size.unwrap_or(d.suite_cache_size),
            max_batch_items: max_batch_items.unwrap_or(d.max_batch_items),
            max_work_units: max_work_units.unwrap_or(d.max_work_units),
            expression_cost_limit: expression_cost_limit.unwrap_or(d.expression_cost_limit),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Limits(max_trace_bytes={}, max_calls_per_trace={}, max_argument_bytes={}, \
             max_json_depth={}, max_regex_bytes={}, max_assertions_per_suite={}, \
             max_suite_bytes={}, suite_cache_size={}, max_batch_items={}, max_work_units={}, \
             expression_cost_limit={})",
            self.max_trace_bytes,
            self.max_calls_per_trace,
            self.max_argument_bytes,
            self.max_json_depth,
            self.max_regex_bytes,
            self.max_assertions_per_suite,
            self.max_suite_bytes,
            self.suite_cache_size,
            self.max_batch_items,
            self.max_work_units,
            self.expression_cost_limit,
        )
    }
}

/// A request's cancellation: `cancel()` makes every grading given this token stop at its next
/// unit of work (its traces end as `CANCELLED`); thread-safe, cancelled once for good.
#[pyclass(frozen, name = "CancelToken", module = "trajgrade._core")]
#[derive(Default)]
pub struct PyCancelToken(CancelFlag);

#[pymethods]
impl PyCancelToken {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    fn cancel(&self) {
        self.0.cancel();
    }

    #[getter]
    fn cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    fn __repr__(&self) -> String {
        format!("CancelToken(cancelled={})", self.0.is_cancelled())
    }
}

pub(crate) fn flag(token: Option<&Bound<'_, PyCancelToken>>) -> Option<CancelFlag> {
    token.map(|t| t.get().0.clone())
}

pub(crate) fn bytes_list<'py>(py: Python<'py>, items: &[Vec<u8>]) -> Vec<Bound<'py, PyBytes>> {
    items.iter().map(|b| PyBytes::new(py, b)).collect()
}

pub(crate) fn borrow(items: &[PyBackedBytes]) -> Vec<&[u8]> {
    items.iter().map(|b| &b[..]).collect()
}

/// A validated, compiled suite, bound to the grader (limits, thread pool) that compiled it.
#[pyclass(frozen, name = "CompiledSuite", module = "trajgrade._core")]
pub struct PyCompiledSuite {
    grader: Arc<Grader>,
    suite: Arc<CompiledSuite>,
}

impl PyCompiledSuite {
    /// The grader that compiled the suite, and the suite (shared, not copied).
    pub(crate) fn parts(&self) -> (Arc<Grader>, Arc<CompiledSuite>) {
        (Arc::clone(&self.grader), Arc::clone(&self.suite))
    }

    /// One chunk graded on the pool, detached.
    fn grade_chunk(&self, py: Python<'_>, chunk: Chunk) -> PyResult<Graded> {
        let (grader, suite) = (Arc::clone(&self.grader), Arc::clone(&self.suite));
        run_detached(py, move || {
            let results = grader.grade_traces(&suite, &chunk.traces());
            (chunk, results)
        })
    }
}

#[pymethods]
impl PyCompiledSuite {
    #[getter]
    fn suite_id(&self) -> &str {
        self.suite.id()
    }

    /// The suite as serialized `Suite` bytes.
    fn suite_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.suite.suite().encode_to_vec())
    }

    /// One serialized `Trace` → serialized `GradeResult`; a bad trace raises.
    fn grade<'py>(&self, py: Python<'py>, trace: PyBackedBytes) -> PyResult<Bound<'py, PyBytes>> {
        let (grader, suite) = (Arc::clone(&self.grader), Arc::clone(&self.suite));
        let result = run_detached(py, move || {
            suite.check_and_grade(&trace, grader.limits()).map(|r| r.encode_to_vec())
        })?
        .map_err(PyCoreError)?;
        Ok(PyBytes::new(py, &result))
    }

    /// Serialized `Trace`s → one serialized `TraceOutcome` each, graded in parallel.
    fn grade_batch<'py>(
        &self,
        py: Python<'py>,
        traces: Vec<PyBackedBytes>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let (grader, suite) = (Arc::clone(&self.grader), Arc::clone(&self.suite));
        let out = run_detached(py, move || grader.grade_traces(&suite, &borrow(&traces)))?;
        Ok(bytes_list(py, &out))
    }

    /// As `grade_batch`, graded on the calling thread, not on the pool (a few traces that must
    /// not wait for its threads to wake), each trace with a work limit of `max_work_units`
    /// (when below the grader's): a trace that needs more is `None`, to be graded again by
    /// `grade_batch` with the full limit.
    fn grade_here<'py>(
        &self,
        py: Python<'py>,
        traces: Vec<PyBackedBytes>,
        max_work_units: u64,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let (grader, suite) = (Arc::clone(&self.grader), Arc::clone(&self.suite));
        let out = run_detached(py, move || {
            grader.grade_traces_here(&suite, &borrow(&traces), max_work_units)
        })?;
        Ok(out.iter().map(|o| o.as_deref().map(|b| PyBytes::new(py, b))).collect())
    }

    /// The public batch path: `items` (`bytes` graded as they are, plain trace dicts encoded
    /// here; any other item becomes `prepare(i, item)`: `bytes` to grade, or anything else as
    /// that item's outcome) → `(outcomes, errors)`. `outcomes[i]` is item i's
    /// `LazyGradeResult`; when i is in `errors` (ascending) it is the core's serialized
    /// `ItemError` (its field numbered within a chunk) or what `prepare` returned.
    ///
    /// Items go to the core in chunks, graded on the pool by one worker thread per call: while
    /// it grades one chunk, this thread encodes the next (that needs the interpreter) and turns
    /// the one before into results, so the Python-side work overlaps grading.
    fn grade_inputs<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyList>,
        prepare: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<Bound<'py, PyAny>>, Vec<usize>)> {
        let mut out = Outcomes { items: Vec::with_capacity(items.len()), errors: Vec::new() };
        if items.len() <= INPUT_CHUNK {
            let (chunk, settled) = take_chunk(items, 0, prepare)?;
            let graded = self.grade_chunk(py, chunk)?;
            out.add(py, 0, graded, settled)?;
            return Ok((out.items, out.errors));
        }
        let (grader, suite) = (Arc::clone(&self.grader), Arc::clone(&self.suite));
        let (to_worker, chunks) = mpsc::channel::<Chunk>();
        let (to_caller, from_worker) = mpsc::channel::<Graded>();
        let from_worker = Mutex::new(from_worker); // waited on detached; a Receiver is not Sync
        std::thread::scope(|scope| -> PyResult<()> {
            let worker = scope.spawn(move || {
                for chunk in chunks {
                    let results = grader.grade_traces(&suite, &chunk.traces());
                    if to_caller.send((chunk, results)).is_err() {
                        return;
                    }
                }
            });
            let fed = feed(py, items, prepare, &mut out, &to_worker, &from_worker);
            drop(to_worker); // the worker ends once the chunks sent are graded
            let joined = py.detach(|| worker.join());
            fed?;
            joined.map_err(|_| internal_error("panic"))
        })?;
        Ok((out.items, out.errors))
    }

    fn __repr__(&self) -> String {
        format!("CompiledSuite(suite_id={:?})", self.suite.id())
    }
}

/// Sends `items` to the worker chunk by chunk and takes each graded chunk back into `out`, one
/// chunk behind.
fn feed<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyList>,
    prepare: &Bound<'py, PyAny>,
    out: &mut Outcomes<'py>,
    to_worker: &mpsc::Sender<Chunk>,
    from_worker: &Mutex<mpsc::Receiver<Graded>>,
) -> PyResult<()> {
    let worker_gone = || internal_error("the grading thread stopped");
    let mut in_flight: Option<(usize, Vec<Bound<'py, PyAny>>)> = None;
    for start in (0..items.len()).step_by(INPUT_CHUNK).map(Some).chain([None]) {
        let next = match start {
            Some(start) => {
                let (chunk, settled) = take_chunk(items, start, prepare)?;
                to_worker.send(chunk).map_err(|_| worker_gone())?;
                Some((start, settled))
            }
            None => None,
        };
        if let Some((at, settled)) = in_flight.take() {
            let received = py.detach(|| from_worker.lock().ok().and_then(|rx| rx.recv().ok()));
            out.add(py, at, received.ok_or_else(worker_gone)?, settled)?;
        }
        in_flight = next;
    }
    Ok(())
}

/// `items[start..start + INPUT_CHUNK]` as a chunk, with what `prepare` settled, in order.
fn take_chunk<'py>(
    items: &Bound<'py, PyList>,
    start: usize,
    prepare: &Bound<'py, PyAny>,
) -> PyResult<(Chunk, Vec<Bound<'py, PyAny>>)> {
    let mut chunk = Chunk::default();
    let mut settled = Vec::new();
    for i in start..(start + INPUT_CHUNK).min(items.len()) {
        let item = items.get_item(i)?;
        if chunk.push(&item)?.is_none() {
            let prepared = prepare.call1((i, item))?;
            if !chunk.push_prepared(&prepared)? {
                settled.push(prepared);
            }
        }
    }
    Ok((chunk, settled))
}

/// A chunk and its core outcomes (serialized `TraceOutcome`s), in order.
type Graded = (Chunk, Vec<Vec<u8>>);

/// `grade_inputs`' answer as it is built, chunk by chunk.
struct Outcomes<'py> {
    items: Vec<Bound<'py, PyAny>>,
    errors: Vec<usize>,
}

impl<'py> Outcomes<'py> {
    /// One graded chunk starting at item `start`: its core outcomes and settled items, merged
    /// back in item order. A result becomes a `LazyGradeResult` owning the core's buffer.
    fn add(
        &mut self,
        py: Python<'py>,
        start: usize,
        (chunk, results): Graded,
        settled: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let (mut results, mut settled) = (results.into_iter(), settled.into_iter());
        for (i, was_graded) in (start..).zip(chunk.graded()) {
            if !was_graded {
                self.errors.push(i);
                self.items.extend(settled.next());
                continue;
            }
            let mut outcome = results.next().unwrap_or_default();
            let (number, value) = outcome_value(&outcome);
            if number == OUTCOME_RESULT {
                outcome.truncate(value.end);
                let result = LazyGradeResult::from_buffer(outcome, value.start);
                self.items.push(Bound::new(py, result)?.into_any());
            } else {
                self.errors.push(i);
                self.items.push(PyBytes::new(py, &outcome[value]).into_any());
            }
        }
        Ok(())
    }
}

/// Items encoded and graded per core call in `grade_inputs` (bounds the dict arena).
const INPUT_CHUNK: usize = 512;

/// `TraceOutcome.result` (field 1); `error` is field 2.
const OUTCOME_RESULT: u64 = 1;

/// The one field of a serialized `TraceOutcome` (the core writes exactly one): its number and
/// where its value lies.
fn outcome_value(outcome: &[u8]) -> (u64, Range<usize>) {
    let mut pos = 0;
    let mut read = || {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = outcome.get(pos).copied().unwrap_or(0);
            pos += 1;
            value |= u64::from(byte & 0x7F) << shift;
            if byte < 0x80 {
                break;
            }
        }
        value
    };
    let key = read();
    let len = read() as usize;
    let start = pos.min(outcome.len());
    (key >> 3, start..(start + len).min(outcome.len()))
}

/// One Arrow array: length, offset, validity bitmap, offsets, values, 64-bit offsets.
pub(crate) type ColumnBuffers = (usize, usize, Option<Data>, Option<Data>, Option<Data>, bool);

const ARROW_COLUMNS: [&str; 28] = [
    "id",
    "final_answer",
    "calls",
    "calls.name",
    "calls.arguments_json",
    "calls.result",
    "calls.error",
    "calls.id",
    "calls.start_time_unix_nano",
    "calls.end_time_unix_nano",
    "calls.turn",
    "calls.agent",
    "calls.server",
    "metadata",
    "metadata.key",
    "metadata.value",
    "model_calls",
    "model_calls.model",
    "model_calls.input_tokens",
    "model_calls.output_tokens",
    "model_calls.cost",
    "model_calls.turn",
    "model_calls.agent",
    "model_calls.start_time_unix_nano",
    "model_calls.end_time_unix_nano",
    "turns",
    "turns.user_input",
    "turns.final_answer",
];

fn raw_array(c: &ColumnBuffers) -> RawArray<'_> {
    RawArray {
        len: c.0,
        offset: c.1,
        validity: c.2.as_deref(),
        offsets: c.3.as_deref(),
        large: c.5,
        values: c.4.as_deref(),
    }
}

/// `ValueError` for a column name the Arrow entry points do not know.
pub(crate) fn check_columns(columns: &HashMap<String, ColumnBuffers>) -> PyResult<()> {
    match columns.keys().find(|k| !ARROW_COLUMNS.contains(&k.as_str())) {
        Some(name) => Err(PyValueError::new_err(format!(
            "unknown column {name:?}; expected one of {ARROW_COLUMNS:?}"
        ))),
        None => Ok(()),
    }
}

/// The batch's columns as the core reads them (absent columns `None`).
pub(crate) fn raw_traces(rows: usize, columns: &HashMap<String, ColumnBuffers>) -> RawTraces<'_> {
    let get = |name: &str| columns.get(name).map(raw_array);
    RawTraces {
        rows,
        id: get("id"),
        final_answer: get("final_answer"),
        calls: get("calls"),
        call_name: get("calls.name"),
        call_arguments_json: get("calls.arguments_json"),
        call_result: get("calls.result"),
        call_error: get("calls.error"),
        call_id: get("calls.id"),
        call_start_time_unix_nano: get("calls.start_time_unix_nano"),
        call_end_time_unix_nano: get("calls.end_time_unix_nano"),
        call_turn: get("calls.turn"),
        call_agent: get("calls.agent"),
        call_server: get("calls.server"),
        metadata: get("metadata"),
        metadata_key: get("metadata.key"),
        metadata_value: get("metadata.value"),
        model_calls: get("model_calls"),
        model_call_model: get("model_calls.model"),
        model_call_input_tokens: get("model_calls.input_tokens"),
        model_call_output_tokens: get("model_calls.output_tokens"),
        model_call_cost: get("model_calls.cost"),
        model_call_turn: get("model_calls.turn"),
        model_call_agent: get("model_calls.agent"),
        model_call_start_time_unix_nano: get("model_calls.start_time_unix_nano"),
        model_call_end_time_unix_nano: get("model_calls.end_time_unix_nano"),
        turns: get("turns"),
        turn_user_input: get("turns.user_input"),
        turn_final_answer: get("turns.final_answer"),
    }
}

/// Limits, a dedicated thread pool and the compiled-suite cache; shared by every thread.
#[pyclass(frozen, name = "Grader", module = "trajgrade._core")]
pub struct PyGrader {
    inner: Arc<Grader>,
    threads: usize,
}

impl PyGrader {
    fn wrap(&self, suite: Arc<CompiledSuite>) -> PyCompiledSuite {
        PyCompiledSuite { grader: Arc::clone(&self.inner), suite }
    }
}

const _: () = assert!(trajgrade_core::DEFAULT_MAX_REGISTERED_SUITES == 10_000);

#[pymethods]
impl PyGrader {
    #[new]
    #[pyo3(signature = (
        limits = None,
        threads = 0,
        // A literal so Python sees the default (the const below keeps it equal to the core's).
        max_registered_suites = 10_000,
    ))]
    fn new(
        limits: Option<&Bound<'_, PyLimits>>,
        threads: usize,
        max_registered_suites: usize,
    ) -> Self {
        let limits = limits.map_or_else(Limits::default, |l| l.get().to_core());
        let grader = Grader::new(limits, threads).with_max_registered_suites(max_registered_suites);
        PyGrader { inner: Arc::new(grader), threads }
    }

    #[getter]
    fn limits(&self) -> PyLimits {
        PyLimits::from_core(self.inner.limits())
    }

    /// Serialized `Suite` → a compiled suite (cached by content); raises `InvalidSuiteError`.
    fn compile_suite(&self, py: Python<'_>, suite: PyBackedBytes) -> PyResult<PyCompiledSuite> {
        let grader = Arc::clone(&self.inner);
        let compiled =
            run_detached(py, move || grader.compile_suite(&suite))?.map_err(PyCoreError)?;
        Ok(self.wrap(compiled))
    }

    /// Compiles and keeps a serialized `Suite`; returns its id.
    fn register_suite(&self, py: Python<'_>, suite: PyBackedBytes) -> PyResult<String> {
        let grader = Arc::clone(&self.inner);
        Ok(run_detached(py, move || grader.register_suite(&suite))?.map_err(PyCoreError)?)
    }

    fn get_suite(&self, suite_id: &str) -> Option<PyCompiledSuite> {
        self.inner.get_suite(suite_id).map(|s| self.wrap(s))
    }

    /// Serialized `GradeTraceRequest`s → serialized `GradeTraceResponse` or that item's error;
    /// item `i` stops once `cancels[i]` is cancelled (`CancelledError`).
    #[pyo3(signature = (requests, cancels = None))]
    fn grade_requests<'py>(
        &self,
        py: Python<'py>,
        requests: Vec<PyBackedBytes>,
        cancels: Option<Vec<Option<Bound<'py, PyCancelToken>>>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let grader = Arc::clone(&self.inner);
        let flags: Vec<Option<CancelFlag>> =
            cancels.unwrap_or_default().iter().map(|t| flag(t.as_ref())).collect();
        let out = run_detached(py, move || grader.grade_requests_with(&borrow(&requests), &flags))?;
        out.into_iter()
            .map(|item| match item {
                Ok(bytes) => Ok(PyBytes::new(py, &bytes).into_any()),
                Err(e) => to_exception(py, &e),
            })
            .collect()
    }

    /// As `grade_requests`, graded on the calling thread, not on the pool (small batches), each
    /// item with a work limit of `max_work_units` (when below the grader's): an item that needs
    /// more is `None`, to be graded again by `grade_requests` with the full limit.
    #[pyo3(signature = (requests, cancels = None, max_work_units = u64::MAX))]
    fn grade_requests_here<'py>(
        &self,
        py: Python<'py>,
        requests: Vec<PyBackedBytes>,
        cancels: Option<Vec<Option<Bound<'py, PyCancelToken>>>>,
        max_work_units: u64,
    ) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
        let grader = Arc::clone(&self.inner);
        let flags: Vec<Option<CancelFlag>> =
            cancels.unwrap_or_default().iter().map(|t| flag(t.as_ref())).collect();
        let out = run_detached(py, move || {
            grader.grade_requests_here(&borrow(&requests), &flags, max_work_units)
        })?;
        out.into_iter()
            .map(|item| match item {
                None => Ok(None),
                Some(Ok(bytes)) => Ok(Some(PyBytes::new(py, &bytes).into_any())),
                Some(Err(e)) => to_exception(py, &e).map(Some),
            })
            .collect()
    }

    /// A serialized `BatchGradeTracesRequest` → serialized `BatchGradeTracesResponse`; once
    /// `cancel` is cancelled, the traces not yet graded end as `CANCELLED` item errors.
    #[pyo3(signature = (request, cancel = None))]
    fn grade_batch_request<'py>(
        &self,
        py: Python<'py>,
        request: PyBackedBytes,
        cancel: Option<&Bound<'py, PyCancelToken>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let grader = Arc::clone(&self.inner);
        let cancel = flag(cancel);
        let out =
            run_detached(py, move || grader.grade_batch_request_with(&request, cancel.as_ref()))?
                .map_err(PyCoreError)?;
        Ok(PyBytes::new(py, &out))
    }

    /// A serialized `StreamGradeTracesRequest` chunk (`traces`) against `suite` → serialized
    /// `StreamGradeTracesResponse` (one `outcomes` entry per trace): split and framed here.
    #[pyo3(signature = (suite, message, cancel = None))]
    fn grade_stream_chunk<'py>(
        &self,
        py: Python<'py>,
        suite: &Bound<'py, PyCompiledSuite>,
        message: PyBackedBytes,
        cancel: Option<&Bound<'py, PyCancelToken>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (grader, suite) = (Arc::clone(&self.inner), Arc::clone(&suite.get().suite));
        let cancel = flag(cancel);
        let out =
            run_detached(py, move || grader.grade_stream_chunk(&suite, &message, cancel.as_ref()))?
                .map_err(PyCoreError)?;
        Ok(PyBytes::new(py, &out))
    }

    /// `data[start:end]`, whole lines of native JSONL (blank lines skipped) → a `JsonlBlock`:
    /// every row as `bench.grade_json_traces_to_json` writes it, in one buffer, with the counts a
    /// regrade summary needs; error rows are always marked, failing rows up to `max_failing`.
    /// An error row's field is `source:unit N` (`unit` `line`: `first` + the line's index in
    /// the block, blank lines counted; `row` or `trace`: `first` + the item's index), then the
    /// path inside the trace for a limit error. Mark offsets are in `rows`.
    #[pyo3(signature = (
        suite, data, start, end, max_failing, source, first = 1, unit = "line", arrow = false
    ))]
    #[allow(clippy::too_many_arguments)] // the block, its range and its origin, as Python names them
    fn grade_jsonl_block(
        &self,
        py: Python<'_>,
        suite: &Bound<'_, PyCompiledSuite>,
        data: Data,
        start: usize,
        end: usize,
        max_failing: usize,
        source: String,
        first: u64,
        unit: &str,
        arrow: bool,
    ) -> PyResult<PyJsonlBlock> {
        check_range(data.len(), start, end)?;
        let unit = origin(&source, unit, first)?.unit;
        let (grader, suite) = (Arc::clone(&self.inner), Arc::clone(&suite.get().suite));
        let block = run_detached(py, move || {
            let origin = Origin { source: &source, unit, first };
            grader.grade_jsonl_block(&suite, &data[start..end], &origin, max_failing, arrow)
        })?;
        PyJsonlBlock::new(py, block)
    }

    /// Rows of one Arrow record batch in the native trace schema → a `JsonlBlock` (as
    /// `grade_jsonl_block` gives it for the same traces), read from the raw buffers: counts for
    /// the summary, error rows marked, failing rows up to `max_failing` (a mark's `line` is its
    /// row in the batch). `columns` maps a column name (`id`, `final_answer`, `calls`,
    /// `calls.name`, ..., `metadata`, `metadata.key`, `metadata.value`) to `(length, offset,
    /// validity, offsets, values, large_offsets)`, or is an `ArrowBatch` of `ParquetTraces`;
    /// bad buffers raise `ValueError`. An error row's field is `source:row N`, N = `first` +
    /// the row's index in the batch.
    #[pyo3(signature = (suite, rows, columns, max_failing, source, first = 1, arrow = false))]
    #[allow(clippy::too_many_arguments)] // the batch and its origin, as Python names them
    fn grade_arrow_block(
        &self,
        py: Python<'_>,
        suite: &Bound<'_, PyCompiledSuite>,
        rows: usize,
        columns: ArrowColumns,
        max_failing: usize,
        source: String,
        first: u64,
        arrow: bool,
    ) -> PyResult<PyJsonlBlock> {
        origin(&source, "row", first)?;
        let (grader, suite) = (Arc::clone(&self.inner), Arc::clone(&suite.get().suite));
        let block = run_detached(py, move || {
            let origin = Origin { source: &source, unit: Unit::Row, first };
            columns
                .raw(rows)
                .and_then(|raw| ArrowTraces::new(&raw))
                .map(|t| grader.grade_arrow_block(&suite, &t, &origin, max_failing, arrow))
        })?
        .map_err(PyValueError::new_err)?;
        PyJsonlBlock::new(py, block)
    }

    fn __repr__(&self) -> String {
        format!("Grader(threads={})", self.threads)
    }
}
