//! `map_otlp`: OTLP export requests to `Trace` bytes with the core's span-to-call mapping.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyString, PyTuple};
use trajgrade_core::otlp;

use crate::detach::run_detached;

/// (reason, count, examples) per reason, in first-seen order.
type Unmapped = Vec<(&'static str, u64, Vec<String>)>;
/// (traces, calls, model calls, merged duplicates, id collisions, unmapped).
type ReportTuple = (u64, u64, u64, u64, u64, Unmapped);

/// Map `ExportTraceServiceRequest` and `ExportLogsServiceRequest` bytes (arrival order) to
/// `Trace` bytes, one per trace id (or `group_by` value), and the import report's counts.
/// A malformed request raises `ValueError` naming it.
#[pyfunction]
#[pyo3(signature = (traces, logs, group_by=None, dedupe_window_s=300.0))]
pub fn map_otlp(
    py: Python<'_>,
    traces: Vec<PyBackedBytes>,
    logs: Vec<PyBackedBytes>,
    group_by: Option<PyBackedStr>,
    dedupe_window_s: f64,
) -> PyResult<(Vec<Bound<'_, PyBytes>>, ReportTuple)> {
    let (out, report) = run_detached(py, move || {
        let traces: Vec<&[u8]> = traces.iter().map(|b| &b[..]).collect();
        let logs: Vec<&[u8]> = logs.iter().map(|b| &b[..]).collect();
        let group_by = group_by.as_deref();
        otlp::map_requests(&traces, &logs, group_by, dedupe_window_s).map_err(|e| e.to_string())
    })?
    .map_err(PyValueError::new_err)?;
    let traces = out.iter().map(|t| PyBytes::new(py, t)).collect();
    let r = report;
    Ok((
        traces,
        (r.traces, r.calls, r.model_calls, r.merged_duplicates, r.id_collisions, r.unmapped),
    ))
}

/// Keyed attribute values: `()` (the shared empty tuple) when the span holds none of the keys,
/// the (key, value) pairs, or None when a key holds a non-string value (read in Python).
type Keyed<'py> = Option<Bound<'py, PyTuple>>;
/// A resource: (bytes, keyed values).
type ResourceTuple<'py> = (Bound<'py, PyBytes>, Keyed<'py>);
/// A span: (trace id, span id, parent span id (hex), start, flags, ends the run, encoded size,
/// bytes, resource index, keyed values).
type SpanTuple<'py> = (
    Bound<'py, PyString>,
    String,
    String,
    u64,
    u32,
    bool,
    usize,
    Bound<'py, PyBytes>,
    usize,
    Keyed<'py>,
);

fn keyed(py: Python<'_>, pairs: Option<Vec<(String, String)>>) -> PyResult<Keyed<'_>> {
    pairs.map(|pairs| PyTuple::new(py, pairs)).transpose()
}

/// Requests from this size are decoded with the interpreter released (`otlp_spans`).
const DETACH_REQUEST_BYTES: usize = 16 * 1024;

/// The spans of one `ExportTraceServiceRequest` as the live receiver's assembly reads them,
/// and their resources, with the string values of `keys`. A malformed request raises
/// `ValueError`. The spans of one trace share one trace id string (a request's spans come
/// grouped by trace).
#[pyfunction]
#[allow(clippy::needless_pass_by_value)] // pyo3 extracts the arguments as owned values
pub fn otlp_spans<'py>(
    py: Python<'py>,
    request: &[u8],
    keys: Vec<PyBackedStr>,
) -> PyResult<(Vec<ResourceTuple<'py>>, Vec<SpanTuple<'py>>)> {
    let keys: Vec<&str> = keys.iter().map(|k| &k[..]).collect();
    // A large request is decoded with the interpreter released (the grading thread's Python
    // goes on meanwhile); a small one is not worth the hand-over.
    let heads = if request.len() >= DETACH_REQUEST_BYTES {
        py.detach(|| otlp::heads::span_heads(request, &keys))
    } else {
        otlp::heads::span_heads(request, &keys)
    };
    let (resources, spans) = heads.map_err(|e| PyValueError::new_err(e.to_string()))?;
    let resources = resources
        .into_iter()
        .map(|r| Ok((PyBytes::new(py, &r.raw), keyed(py, r.keyed)?)))
        .collect::<PyResult<_>>()?;
    let mut last: Option<(String, Bound<'py, PyString>)> = None;
    let spans = spans
        .into_iter()
        .map(|s| {
            let trace_id = match &last {
                Some((text, string)) if *text == s.trace_id => string.clone(),
                _ => {
                    let string = PyString::new(py, &s.trace_id);
                    last = Some((s.trace_id, string.clone()));
                    string
                }
            };
            Ok((
                trace_id,
                s.span_id,
                s.parent,
                s.start,
                s.flags,
                s.ends_run,
                s.size,
                PyBytes::new(py, &s.raw),
                s.resource,
                keyed(py, s.keyed)?,
            ))
        })
        .collect::<PyResult<_>>()?;
    Ok((resources, spans))
}

/// A run: its spans' resources' bytes, its spans' bytes (parallel, arrival order) and its
/// events' bytes.
type RunTuple = (Vec<PyBackedBytes>, Vec<PyBackedBytes>, Vec<PyBackedBytes>);

/// Map the live receiver's completed runs in one call (the interpreter released once for all
/// of them): per run, its first `Trace`'s bytes, None when nothing maps, or the mapping's
/// error message (that run only). Each run maps as `map_otlp` maps one traces request of its
/// spans (a `ResourceSpans` per span) and one logs request of its events.
#[pyfunction]
#[pyo3(signature = (runs, group_by=None, dedupe_window_s=300.0))]
pub fn map_otlp_runs(
    py: Python<'_>,
    runs: Vec<RunTuple>,
    group_by: Option<PyBackedStr>,
    dedupe_window_s: f64,
) -> PyResult<Vec<Bound<'_, PyAny>>> {
    let out = run_detached(py, move || {
        let group_by = group_by.as_deref();
        runs.iter()
            .map(|(resources, spans, events)| {
                let parts = otlp::RunParts {
                    resources: resources.iter().map(|b| &b[..]).collect(),
                    spans: spans.iter().map(|b| &b[..]).collect(),
                    events: events.iter().map(|b| &b[..]).collect(),
                };
                otlp::map_run(&parts, group_by, dedupe_window_s).map_err(|e| e.to_string())
            })
            .collect::<Vec<_>>()
    })?;
    Ok(out
        .into_iter()
        .map(|run| match run {
            Ok(Some(trace)) => PyBytes::new(py, &trace).into_any(),
            Ok(None) => py.None().into_bound(py),
            Err(message) => PyString::new(py, &message).into_any(),
        })
        .collect())
}
