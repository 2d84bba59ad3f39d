//! `LiveSpan`: what the live receiver holds of each span until its run completes (the ids and
//! start that assembly reads, the attributes routing and grouping read, the protobuf bytes the
//! core maps), made here by `otlp_spans` for every span of an export without running Python.
//!
//! A span received is one of these and nothing else of it is decoded in Python
//! (`live/records.py`). It is not tracked by the cyclic GC: it references strings, bytes and the
//! attribute dicts, which hold strings and values decoded from protobuf, never a span.
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

/// OTLP span flags: the parent's remote bit is known, and set (the span is this process's part
/// of a trace that started elsewhere: its local root).
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// One span as the receiver holds it. `attrs`, `resource` and `keys` are replaced when routes
/// reloaded with new keys read them again (`records.with_keys`); `order` is set by assembly.
#[pyclass(name = "LiveSpan", module = "trajgrade._core")]
pub struct LiveSpan {
    #[pyo3(get)]
    pub(crate) trace_id: Py<PyString>,
    #[pyo3(get)]
    pub(crate) span_id: Py<PyString>,
    /// "" for a root.
    #[pyo3(get)]
    pub(crate) parent: Py<PyString>,
    /// Start time, unix ns.
    #[pyo3(get)]
    pub(crate) start: u64,
    /// The values of `keys` among the span's attributes (one shared empty dict when it holds
    /// none of them: never written to).
    #[pyo3(get, set)]
    pub(crate) attrs: Py<PyAny>,
    /// The values of `keys` among its resource's attributes (a dict shared by the spans of one
    /// export under that resource).
    #[pyo3(get, set)]
    pub(crate) resource: Py<PyAny>,
    /// The span's and its resource's protobuf bytes: what the core's mapping reads.
    #[pyo3(get)]
    pub(crate) raw: Py<PyBytes>,
    #[pyo3(get)]
    pub(crate) resource_raw: Py<PyBytes>,
    /// The attribute keys `attrs` and `resource` were read for.
    #[pyo3(get, set)]
    pub(crate) keys: Py<PyAny>,
    /// Arrival order, set by assembly.
    #[pyo3(get, set)]
    pub(crate) order: u64,
    /// The encoded size (the receiver's bytes cap counts it).
    #[pyo3(get)]
    pub(crate) size: usize,
    /// It carries the end-of-run marker.
    #[pyo3(get)]
    pub(crate) ends_run: bool,
    /// Its OTLP flags.
    #[pyo3(get)]
    pub(crate) flags: u32,
    /// (trace id, span id): the same tuple every time it is read.
    #[pyo3(get)]
    pub(crate) key: Py<PyTuple>,
    /// No parent, or a remote parent (a run inside a request from another service).
    #[pyo3(get)]
    pub(crate) is_root: bool,
}

/// A root: no parent, or a parent whose remote bit is known and set.
pub(crate) fn is_root(parent: &str, flags: u32) -> bool {
    parent.is_empty() || flags & (HAS_IS_REMOTE | IS_REMOTE) == HAS_IS_REMOTE | IS_REMOTE
}

#[pymethods]
impl LiveSpan {
    #[new]
    #[pyo3(signature = (
        trace_id, span_id, parent, start, attrs, resource, raw, resource_raw, keys,
        order = 0, size = 0, ends_run = false, flags = 0,
    ))]
    #[allow(clippy::too_many_arguments)] // a record's fields, as the dataclass it replaces
    fn new(
        py: Python<'_>,
        trace_id: Bound<'_, PyString>,
        span_id: Bound<'_, PyString>,
        parent: Bound<'_, PyString>,
        start: u64,
        attrs: Py<PyAny>,
        resource: Py<PyAny>,
        raw: Py<PyBytes>,
        resource_raw: Py<PyBytes>,
        keys: Py<PyAny>,
        order: u64,
        size: usize,
        ends_run: bool,
        flags: u32,
    ) -> PyResult<Self> {
        let root = is_root(parent.to_str()?, flags);
        let key = PyTuple::new(py, [&trace_id, &span_id])?.unbind();
        Ok(LiveSpan {
            trace_id: trace_id.unbind(),
            span_id: span_id.unbind(),
            parent: parent.unbind(),
            start,
            attrs,
            resource,
            raw,
            resource_raw,
            keys,
            order,
            size,
            ends_run,
            flags,
            key,
            is_root: root,
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "LiveSpan(trace_id={}, span_id={}, parent={:?}, size={}, order={})",
            self.trace_id.bind(py),
            self.span_id.bind(py),
            self.parent.bind(py).to_string(),
            self.size,
            self.order,
        )
    }
}
