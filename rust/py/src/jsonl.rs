//! Native JSONL blocks for bulk regrading: `split_jsonl` (reader side) and the `JsonlBlock`
//! result of `Grader.grade_jsonl_block` (rows buffer, summary counts, marked rows), and the
//! blocks' traces as `Trace` bytes for a server to grade (`jsonl_traces`, `arrow_traces`).
use prost::Message;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};
use trajgrade_core::arrow_cols::ArrowTraces;
use trajgrade_core::arrow_rows::{ArrowRows, Bitmap, Offsets, Utf8};
use trajgrade_core::jsonl_block::{self, BlockRows, Mark, Origin, Outcome, Unit};

use crate::data::Data;
use crate::detach::run_detached;
use crate::parquet::ArrowColumns;

/// A row of a block the caller looks at: an error row, or one of the first failing rows.
#[pyclass(frozen, get_all, name = "BlockMark", module = "trajgrade._core")]
pub struct PyBlockMark {
    /// Index among the block's traces (rows).
    item: usize,
    row_start: usize,
    row_end: usize,
    error: bool,
}

#[pymethods]
impl PyBlockMark {
    fn __repr__(&self) -> String {
        format!(
            "BlockMark(item={}, row={}..{}, error={})",
            self.item,
            self.row_start,
            self.row_end,
            if self.error { "True" } else { "False" }
        )
    }
}

impl From<Mark> for PyBlockMark {
    fn from(m: Mark) -> Self {
        PyBlockMark { item: m.item, row_start: m.row.start, row_end: m.row.end, error: m.error }
    }
}

/// A graded block: every row (each ending in a newline), the counts of its graded rows (and the
/// sum of their `mean_score` in units of 0.0001), the results' counts by name `(name, severity,
/// passed, failed, score_units)` in order of first appearance, the error rows' count and their
/// counts by reason code `(reason_code, count)` in order of first appearance, and the marked
/// rows (for the summary's sample).
#[pyclass(frozen, get_all, name = "JsonlBlock", module = "trajgrade._core")]
pub struct PyJsonlBlock {
    rows: Py<PyBytes>,
    items: usize,
    passed: u64,
    failed: u64,
    soft_failures: u64,
    mean_score_units: u64,
    assertions: Vec<(String, String, u64, u64, u64)>,
    errors: u64,
    error_codes: Vec<(String, u64)>,
    marks: Vec<Py<PyBlockMark>>,
    longest_row: usize,
    /// The rows as Arrow buffers (asked for with `arrow=True`), by name: `NAME.validity`
    /// (`None` without nulls), `NAME.offsets` (`i32`), `NAME.data` / `NAME.values`, for the
    /// Parquet output's columns and their children (`results.name`, `error.field`, ...);
    /// `output.arrow_table_from_columns` builds the table.
    columns: Option<Py<PyDict>>,
}

/// The Arrow buffers of `rows` (see `PyJsonlBlock::columns`).
fn columns_dict<'py>(py: Python<'py>, rows: &ArrowRows) -> PyResult<Bound<'py, PyDict>> {
    if rows.overflow {
        return Err(PyValueError::new_err(
            "a block's rows exceed 2 GiB in one Arrow string column; use a smaller chunk size",
        ));
    }
    let out = PyDict::new(py);
    let bytes = |b: &[u8]| PyBytes::new(py, b);
    let validity = |name: &str, v: &Bitmap| -> PyResult<()> {
        let key = format!("{name}.validity");
        if v.nulls == 0 {
            out.set_item(key, py.None())
        } else {
            out.set_item(key, bytes(&v.bytes))
        }
    };
    let offsets = |name: &str, o: &Offsets| {
        let raw: Vec<u8> = o.0.iter().flat_map(|x| x.to_le_bytes()).collect();
        out.set_item(format!("{name}.offsets"), bytes(&raw))
    };
    let utf8 = |name: &str, s: &Utf8| -> PyResult<()> {
        validity(name, &s.validity)?;
        offsets(name, &s.offsets)?;
        out.set_item(format!("{name}.data"), bytes(&s.data))
    };
    let f64s = |name: &str, v: &[f64]| {
        let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        out.set_item(format!("{name}.values"), bytes(&raw))
    };
    utf8("trace_id", &rows.trace_id)?;
    utf8("suite_id", &rows.suite_id)?;
    utf8("verdict", &rows.verdict)?;
    validity("score", &rows.score.validity)?;
    f64s("score", &rows.score.values)?;
    validity("soft_failures", &rows.soft_failures.validity)?;
    let raw: Vec<u8> = rows.soft_failures.values.iter().flat_map(|x| x.to_le_bytes()).collect();
    out.set_item("soft_failures.values", bytes(&raw))?;
    validity("results", &rows.results)?;
    offsets("results", &rows.results_offsets)?;
    utf8("results.name", &rows.result_name)?;
    utf8("results.status", &rows.result_status)?;
    utf8("results.severity", &rows.result_severity)?;
    utf8("results.reason_code", &rows.result_reason_code)?;
    utf8("results.reason", &rows.result_reason)?;
    offsets("results.positions", &rows.result_positions_offsets)?;
    let raw: Vec<u8> = rows.result_positions.iter().flat_map(|x| x.to_le_bytes()).collect();
    out.set_item("results.positions.values", bytes(&raw))?;
    f64s("results.score", &rows.result_score)?;
    validity("mean_score", &rows.mean_score.validity)?;
    f64s("mean_score", &rows.mean_score.values)?;
    validity("error", &rows.error)?;
    utf8("error.reason_code", &rows.error_reason_code)?;
    utf8("error.field", &rows.error_field)?;
    utf8("error.message", &rows.error_message)?;
    Ok(out)
}

impl PyJsonlBlock {
    pub fn new(py: Python<'_>, block: BlockRows) -> PyResult<Self> {
        Ok(PyJsonlBlock {
            rows: PyBytes::new(py, block.rows.as_bytes()).unbind(),
            items: block.items,
            passed: block.passed,
            failed: block.failed,
            soft_failures: block.soft_failures,
            mean_score_units: block.mean_score_units,
            assertions: block
                .assertions
                .into_iter()
                .map(|c| {
                    let severity = c.severity.as_str_name().to_owned();
                    (c.name, severity, c.passed, c.failed, c.score_units)
                })
                .collect(),
            errors: block.errors,
            error_codes: block.error_codes,
            marks: block
                .marks
                .into_iter()
                .map(|m| Py::new(py, PyBlockMark::from(m)))
                .collect::<PyResult<_>>()?,
            longest_row: block.longest_row,
            columns: block
                .columns
                .as_ref()
                .map(|c| columns_dict(py, c).map(Bound::unbind))
                .transpose()?,
        })
    }
}

#[pymethods]
impl PyJsonlBlock {
    fn __repr__(&self) -> String {
        format!(
            "JsonlBlock(items={}, passed={}, failed={}, errors={}, marks={})",
            self.items,
            self.passed,
            self.failed,
            self.errors,
            self.marks.len()
        )
    }
}

/// `(consumed, items, lines)`: the first whole lines of `data[start:]` holding at most
/// `max_items` non-blank lines (a last line without a newline only `at_eof`), their byte
/// length, and how many lines they are, blank ones included.
#[pyfunction]
pub fn split_jsonl(
    py: Python<'_>,
    data: Data,
    start: usize,
    max_items: usize,
    at_eof: bool,
) -> PyResult<(usize, usize, usize)> {
    check_range(data.len(), start, data.len())?;
    let s = run_detached(py, move || jsonl_block::split(&data[start..], max_items, at_eof))?;
    Ok((s.consumed, s.items, s.lines))
}

/// The whole JSON lines `data[start:end]` (native JSONL) as serialized `Trace`s for a server
/// to grade, in line order (blank lines skipped): each line's `Trace` bytes, or the
/// `(trace_id, field, message)` of a line that is not one, worded as the local engine's error
/// row (`source:line N` as `grade_jsonl_block` numbers it; the core decoder's message). The
/// items `outcome_block` takes beside the server's outcomes.
#[pyfunction]
pub fn jsonl_traces(
    py: Python<'_>,
    data: Data,
    start: usize,
    end: usize,
    source: String,
    first: u64,
    unit: &str,
) -> PyResult<Vec<Py<PyAny>>> {
    check_range(data.len(), start, end)?;
    let unit = origin(&source, unit, first)?.unit;
    let decoded = run_detached(py, move || {
        let origin = Origin { source: &source, unit, first };
        jsonl_block::traces(&data[start..end], &origin)
    })?;
    decoded
        .into_iter()
        .map(|line| match line {
            Ok(bytes) => Ok(PyBytes::new(py, &bytes).into_any().unbind()),
            Err(bad) => {
                Ok((bad.trace_id, bad.field, bad.message).into_pyobject(py)?.into_any().unbind())
            }
        })
        .collect()
}

/// Every row of one record batch in the native Parquet schema (the Arrow buffers
/// `arrowcols.columns` gives, as `Grader.grade_arrow_block` takes them) as a serialized
/// `Trace`, for a server to grade: the traces `grade_arrow_block` would grade. Buffers that
/// do not match their lengths or offsets raise `ValueError` naming the column; limits are
/// left to the server.
#[pyfunction]
pub fn arrow_traces(
    py: Python<'_>,
    rows: usize,
    columns: ArrowColumns,
) -> PyResult<Vec<Py<PyBytes>>> {
    let encoded = run_detached(py, move || {
        columns
            .raw(rows)
            .and_then(|raw| ArrowTraces::new(&raw))
            .map(|t| (0..t.rows()).map(|i| t.trace(i).encode_to_vec()).collect::<Vec<_>>())
    })?
    .map_err(PyValueError::new_err)?;
    Ok(encoded.iter().map(|bytes| PyBytes::new(py, bytes).unbind()).collect())
}

/// A record for `outcome_block`: `TraceOutcome` bytes, or `(trace_id, field, message)` of an
/// input record the caller could not read as a trace.
#[derive(FromPyObject)]
pub enum OutcomeItem {
    Encoded(PyBackedBytes),
    Unreadable(String, String, String),
}

/// `TraceOutcome` bytes (graded by `CompiledSuite.grade_batch` or a server) and unreadable
/// records, in input order → a `JsonlBlock`: their regrade rows, counts and marks, as the block
/// entry points give them (an unreadable record is its `INVALID_TRACE` row).
#[pyfunction]
#[pyo3(signature = (suite_id, items, max_failing, arrow = false))]
pub fn outcome_block(
    py: Python<'_>,
    suite_id: String,
    items: Vec<OutcomeItem>,
    max_failing: usize,
    arrow: bool,
) -> PyResult<PyJsonlBlock> {
    let block = run_detached(py, move || {
        let outcomes: Vec<Outcome<'_>> = items
            .iter()
            .map(|item| match item {
                OutcomeItem::Encoded(bytes) => Outcome::Encoded(bytes),
                OutcomeItem::Unreadable(trace_id, field, message) => {
                    Outcome::Unreadable { trace_id, field, message }
                }
            })
            .collect();
        jsonl_block::outcome_rows(&suite_id, &outcomes, max_failing, arrow)
    })?;
    PyJsonlBlock::new(py, block)
}

/// A block's origin (the `field` of its error rows: `source:unit N`) from the binding's
/// arguments; `ValueError` for an unknown unit or a first number below 1.
pub fn origin<'a>(source: &'a str, unit: &str, first: u64) -> PyResult<Origin<'a>> {
    let unit = match unit {
        "line" => Unit::Line,
        "row" => Unit::Row,
        "trace" => Unit::Trace,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown unit {unit:?}; expected line, row or trace"
            )))
        }
    };
    if first == 0 {
        return Err(PyValueError::new_err("first is numbered from 1"));
    }
    Ok(Origin { source, unit, first })
}

/// `ValueError` unless `start <= end <= len`.
pub fn check_range(len: usize, start: usize, end: usize) -> PyResult<()> {
    if start <= end && end <= len {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "range {start}..{end} is outside the {len} bytes of data"
        )))
    }
}

/// Per outcome its verdict and score; per assertion name (name, passed, failed).
type TallyTuple = (Vec<i32>, Vec<f64>, Vec<(String, u64, u64)>);

/// (verdicts, scores, assertions) of encoded `TraceOutcome`s (see `trajgrade_core::tally`): per
/// outcome its verdict number (0: an error) and score, and per assertion name in order of
/// first appearance (name, passed, failed). The live receiver's metrics count these.
#[pyfunction]
pub fn outcome_tally(py: Python<'_>, outcomes: Vec<PyBackedBytes>) -> PyResult<TallyTuple> {
    let t = run_detached(py, move || trajgrade_core::tally::tally(&outcomes))?;
    Ok((t.verdicts, t.scores, t.assertions))
}
