//! `trajgrade._core.bench`: entry points that only benchmarks and tests call, never the
//! package (docs/internals/core-api.md). Each grades against a compiled suite on the grader that
//! compiled it, with the GIL released.
use std::collections::HashMap;

use prost::Message;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use trajgrade_core::arrow_cols::ArrowTraces;
use trajgrade_core::proto::v1::Trace;
use trajgrade_core::{CompiledSuite, Grader};

use crate::detach::run_detached;
use crate::grader::{
    borrow, bytes_list, check_columns, flag, raw_traces, ColumnBuffers, PyCancelToken,
    PyCompiledSuite,
};

/// The submodule's name, as `import` and `sys.modules` know it.
const NAME: &str = "trajgrade._core.bench";

/// Adds `bench` to `parent` and to `sys.modules`, so `import trajgrade._core.bench` and
/// `from trajgrade._core import bench` both work (an extension's submodule is not a package
/// member the import system could find otherwise).
pub(crate) fn add_to(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let m = PyModule::new(py, NAME)?;
    m.add_function(wrap_pyfunction!(grade_traces, &m)?)?;
    m.add_function(wrap_pyfunction!(grade_json_traces, &m)?)?;
    m.add_function(wrap_pyfunction!(grade_json_traces_to_json, &m)?)?;
    m.add_function(wrap_pyfunction!(grade_arrow_traces_to_json, &m)?)?;
    m.add_function(wrap_pyfunction!(decode_only, &m)?)?;
    parent.add("bench", &m)?;
    py.import("sys")?.getattr("modules")?.set_item(NAME, &m)?;
    Ok(())
}

/// A core entry point that grades many items against one compiled suite.
type SuiteGrading = fn(&Grader, &CompiledSuite, &[&[u8]]) -> Vec<Vec<u8>>;

/// Items against `suite` through `grade`, with the GIL released.
fn per_suite<'py>(
    suite: &Bound<'py, PyCompiledSuite>,
    items: Vec<PyBackedBytes>,
    grade: SuiteGrading,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let (grader, suite_) = suite.get().parts();
    let out = run_detached(suite.py(), move || grade(&grader, &suite_, &borrow(&items)))?;
    Ok(bytes_list(suite.py(), &out))
}

/// Serialized `Trace`s against one compiled suite → one serialized `TraceOutcome` each; once
/// `cancel` is cancelled, the traces not yet graded end as `CANCELLED` item errors.
#[pyfunction]
#[pyo3(signature = (suite, traces, cancel = None))]
fn grade_traces<'py>(
    suite: &Bound<'py, PyCompiledSuite>,
    traces: Vec<PyBackedBytes>,
    cancel: Option<&Bound<'py, PyCancelToken>>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let (grader, suite_) = suite.get().parts();
    let cancel = flag(cancel);
    let out = run_detached(suite.py(), move || {
        grader.grade_traces_with(&suite_, &borrow(&traces), cancel.as_ref())
    })?;
    Ok(bytes_list(suite.py(), &out))
}

/// Protobuf-JSON `Trace` lines (native JSONL) against one suite → one serialized
/// `TraceOutcome` each; a line that does not decode is that line's `ItemError`.
#[pyfunction]
fn grade_json_traces<'py>(
    suite: &Bound<'py, PyCompiledSuite>,
    lines: Vec<PyBackedBytes>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    per_suite(suite, lines, Grader::grade_json_traces)
}

/// As `grade_json_traces`, but each output is the regrade JSONL row (docs/regrade.md), newline
/// included: the rows `Grader.grade_jsonl_block` joins into one buffer.
#[pyfunction]
fn grade_json_traces_to_json<'py>(
    suite: &Bound<'py, PyCompiledSuite>,
    lines: Vec<PyBackedBytes>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    per_suite(suite, lines, Grader::grade_json_traces_to_json)
}

/// Rows of one Arrow record batch in the native trace schema → regrade JSONL rows (as
/// `grade_json_traces_to_json` writes for the same traces), read from the raw buffers:
/// `columns` as `Grader.grade_arrow_block` takes them; bad buffers raise `ValueError`.
#[pyfunction]
fn grade_arrow_traces_to_json<'py>(
    suite: &Bound<'py, PyCompiledSuite>,
    rows: usize,
    columns: HashMap<String, ColumnBuffers>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    check_columns(&columns)?;
    let (grader, suite_) = suite.get().parts();
    let out = run_detached(suite.py(), move || {
        ArrowTraces::new(&raw_traces(rows, &columns))
            .map(|t| grader.grade_arrow_traces_to_json(&suite_, &t))
    })?
    .map_err(PyValueError::new_err)?;
    Ok(bytes_list(suite.py(), &out))
}

/// Benchmark floor: decodes each serialized `Trace` (prost only, one thread, no grading) and
/// returns how many decoded.
#[pyfunction]
fn decode_only(py: Python<'_>, traces: Vec<PyBackedBytes>) -> PyResult<usize> {
    run_detached(py, move || traces.iter().filter(|t| Trace::decode(&t[..]).is_ok()).count())
}
