//! Native JSONL blocks for bulk regrading: `split_jsonl` (reader side) and the `JsonlBlock`
//! result of `Grader.grade_jsonl_block` (rows buffer, summary counts, marked rows).
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use trajgrade_core::jsonl_block::{self, BlockRows, Mark};

use crate::detach::run_detached;

/// A row of a block the caller looks at: an error row, or one of the first failing rows.
#[pyclass(frozen, get_all, name = "BlockMark", module = "trajgrade._core")]
pub struct PyBlockMark {
    /// Index among the block's traces (rows).
    item: usize,
    /// Index of its line among all the block's lines, blank ones included.
    line: usize,
    row_start: usize,
    row_end: usize,
    text_start: usize,
    text_end: usize,
    error: bool,
}

#[pymethods]
impl PyBlockMark {
    fn __repr__(&self) -> String {
        format!(
            "BlockMark(item={}, line={}, row={}..{}, text={}..{}, error={})",
            self.item,
            self.line,
            self.row_start,
            self.row_end,
            self.text_start,
            self.text_end,
            if self.error { "True" } else { "False" }
        )
    }
}

impl From<Mark> for PyBlockMark {
    fn from(m: Mark) -> Self {
        PyBlockMark {
            item: m.item,
            line: m.line,
            row_start: m.row.start,
            row_end: m.row.end,
            text_start: m.text.start,
            text_end: m.text.end,
            error: m.error,
        }
    }
}

/// A graded block: every row (each ending in a newline), the counts of its graded rows (and the
/// sum of their `mean_score` in units of 0.0001), the results' counts by name `(name, severity,
/// passed, failed, score_units)` in order of first appearance, and the marked rows (error rows
/// are counted only there).
#[pyclass(frozen, get_all, name = "JsonlBlock", module = "trajgrade._core")]
pub struct PyJsonlBlock {
    rows: Py<PyBytes>,
    items: usize,
    passed: u64,
    failed: u64,
    soft_failures: u64,
    mean_score_units: u64,
    assertions: Vec<(String, String, u64, u64, u64)>,
    marks: Vec<Py<PyBlockMark>>,
    longest_row: usize,
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
            marks: block
                .marks
                .into_iter()
                .map(|m| Py::new(py, PyBlockMark::from(m)))
                .collect::<PyResult<_>>()?,
            longest_row: block.longest_row,
        })
    }
}

#[pymethods]
impl PyJsonlBlock {
    fn __repr__(&self) -> String {
        format!(
            "JsonlBlock(items={}, passed={}, failed={}, marks={})",
            self.items,
            self.passed,
            self.failed,
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
    data: PyBackedBytes,
    start: usize,
    max_items: usize,
    at_eof: bool,
) -> PyResult<(usize, usize, usize)> {
    check_range(data.len(), start, data.len())?;
    let s = run_detached(py, move || jsonl_block::split(&data[start..], max_items, at_eof))?;
    Ok((s.consumed, s.items, s.lines))
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
