//! `map_otlp`: OTLP export requests to `Trace` bytes with the core's span-to-call mapping.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{IntoPyDict, PyBytes, PyDict, PyList, PySet, PyString, PyTuple};

use crate::live_span::{self, LiveSpan};
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

/// A row of spans of one trace in an export (`spans[first:end]`), with what assembly reads of
/// them together: (trace id, first, end, encoded size, one ends the run, one is a root, their
/// keys as a set, the first non-empty string `service.name` of their resources or "").
pub(crate) type Row<'py> = (
    Bound<'py, PyString>,
    usize,
    usize,
    usize,
    bool,
    bool,
    Bound<'py, PySet>,
    Bound<'py, PyString>,
);

/// Keyed string values as a dict, or (None: a key holds another type) `convert(raw, resource)`'s
/// dict, the importer's conversion made in Python (rare: routing keys are strings).
fn keyed_dict<'py>(
    py: Python<'py>,
    pairs: Option<Vec<(String, String)>>,
    raw: &Bound<'py, PyBytes>,
    resource: bool,
    convert: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    match pairs {
        Some(pairs) => Ok(pairs.into_py_dict(py)?.into_any()),
        None => convert.call1((raw, resource)),
    }
}

/// The `service.name` of a resource's dict when it is a non-empty string.
fn service_of<'py>(resource: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyString>>> {
    let Ok(dict) = resource.downcast::<PyDict>() else { return Ok(None) };
    Ok(dict
        .get_item("service.name")?
        .and_then(|v| v.downcast_into::<PyString>().ok())
        .filter(|s| s.to_str().is_ok_and(|s| !s.is_empty())))
}

/// Requests from this size are decoded with the interpreter released (`otlp_spans`).
const DETACH_REQUEST_BYTES: usize = 16 * 1024;

/// The spans of one `ExportTraceServiceRequest` as the live receiver's assembly holds them
/// (`LiveSpan`s, request order) and their rows, one per run of consecutive spans of one trace
/// (a request's spans come grouped by trace). `keys` are the attributes read (the string
/// values by the core, any other through `convert(raw, resource)`), `taken` the frozenset each
/// span records them as. A malformed request raises `ValueError`, before anything is made.
#[pyfunction]
#[allow(clippy::needless_pass_by_value)] // pyo3 extracts the arguments as owned values
pub fn otlp_spans<'py>(
    py: Python<'py>,
    request: &[u8],
    keys: Vec<PyBackedStr>,
    taken: Bound<'py, PyAny>,
    convert: Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, Vec<Row<'py>>)> {
    let keys: Vec<&str> = keys.iter().map(|k| &k[..]).collect();
    // A large request is decoded with the interpreter released (the grading thread's Python
    // goes on meanwhile); a small one is not worth the hand-over.
    let heads = if request.len() >= DETACH_REQUEST_BYTES {
        py.detach(|| otlp::heads::span_heads(request, &keys))
    } else {
        otlp::heads::span_heads(request, &keys)
    };
    let (resources, heads) = heads.map_err(|e| PyValueError::new_err(e.to_string()))?;
    live_spans(py, resources, heads, &taken, &convert)
}

/// The `LiveSpan`s and rows of decoded heads (`otlp_spans`; the core's transport decodes an
/// export's heads as it arrives, and the loop makes its spans from them).
pub(crate) fn live_spans<'py>(
    py: Python<'py>,
    resources: Vec<otlp::heads::ResourceHead<'_>>,
    heads: Vec<otlp::heads::SpanHead<'_>>,
    taken: &Bound<'py, PyAny>,
    convert: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, Vec<Row<'py>>)> {
    // One dict per resource, shared by its spans (routes read each resource once).
    let mut held = Vec::with_capacity(resources.len());
    for resource in resources {
        let raw = PyBytes::new(py, &resource.raw);
        let dict = keyed_dict(py, resource.keyed, &raw, true, convert)?;
        let service = service_of(&dict)?;
        held.push((raw, dict, service));
    }
    let empty = PyDict::new(py).into_any().unbind();
    let blank = PyString::new(py, "");
    let spans = PyList::empty(py);
    let mut rows: Vec<Row<'py>> = Vec::new();
    let mut last: Option<String> = None;
    for head in heads {
        let (resource_raw, resource, service) = &held[head.resource];
        let new_trace = last.as_deref() != Some(head.trace_id.as_str());
        if new_trace {
            let trace_id = PyString::new(py, &head.trace_id);
            let at = spans.len();
            rows.push((trace_id, at, at, 0, false, false, PySet::empty(py)?, blank.clone()));
            last = Some(head.trace_id);
        }
        let row = rows.last_mut().expect("a row is open");
        let raw = PyBytes::new(py, &head.raw);
        let attrs = match head.keyed {
            Some(pairs) if pairs.is_empty() => empty.clone_ref(py),
            pairs => keyed_dict(py, pairs, &raw, false, convert)?.unbind(),
        };
        let span_id = PyString::new(py, &head.span_id);
        let key = PyTuple::new(py, [row.0.as_any(), span_id.as_any()])?;
        let root = live_span::is_root(&head.parent, head.flags);
        row.2 += 1;
        row.3 += head.size;
        row.4 |= head.ends_run;
        row.5 |= root;
        row.6.add(&key)?;
        if row.7.is(&blank) {
            if let Some(service) = service {
                row.7 = service.clone();
            }
        }
        let span = LiveSpan {
            trace_id: row.0.clone().unbind(),
            span_id: span_id.unbind(),
            parent: PyString::new(py, &head.parent).unbind(),
            start: head.start,
            attrs,
            resource: resource.clone().unbind(),
            raw: raw.unbind(),
            resource_raw: resource_raw.clone().unbind(),
            keys: taken.clone().unbind(),
            order: 0,
            size: head.size,
            ends_run: head.ends_run,
            flags: head.flags,
            key: key.unbind(),
            is_root: root,
        };
        spans.append(Bound::new(py, span)?)?;
    }
    Ok((spans, rows))
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
