//! `ParquetTraces`: native-schema Parquet trace files read by the core's reader
//! (`trajgrade_core::parquet_traces`), each batch decoded with the GIL released. Its
//! `ArrowBatch`es go to `Grader.grade_arrow_block` and `arrow_traces` in place of pyarrow's
//! column buffers.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use trajgrade_core::arrow_cols::RawTraces;
use trajgrade_core::parquet_traces::{self, ParquetTraceFile};

use crate::detach::run_detached;
use crate::grader::{check_columns, raw_traces, ColumnBuffers};

/// An open trace file; `ValueError` (with the reason) for a file this reader does not read
/// exactly as pyarrow does: read that one with pyarrow.
#[pyclass(frozen, name = "ParquetTraces", module = "trajgrade._core")]
pub struct PyParquetTraces {
    file: Arc<ParquetTraceFile>,
}

#[pymethods]
impl PyParquetTraces {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let file = run_detached(py, move || ParquetTraceFile::open(&path))?
            .map_err(PyValueError::new_err)?;
        Ok(Self { file: Arc::new(file) })
    }

    /// Rows of each row group, in file order.
    #[getter]
    fn row_groups(&self) -> Vec<u64> {
        self.file.row_group_rows()
    }

    /// Row group `group`'s rows from `skip` on, as `ArrowBatch`es of up to `batch_size` rows.
    #[pyo3(signature = (group, skip = 0, batch_size = 2048))]
    fn batches(&self, group: usize, skip: usize, batch_size: usize) -> PyResult<PyParquetBatches> {
        let reader = self.file.batches(group, skip, batch_size).map_err(PyValueError::new_err)?;
        Ok(PyParquetBatches { reader: Mutex::new(Reading::Ready(reader)) })
    }
}

/// An iterator of one row group's `ArrowBatch`es.
#[pyclass(frozen, name = "ParquetBatches", module = "trajgrade._core")]
pub struct PyParquetBatches {
    reader: Mutex<Reading>,
}

/// The reader, out on loan while a batch is decoded with the interpreter released.
enum Reading {
    Ready(ParquetRecordBatchReader),
    Busy,
    Done,
}

#[pymethods]
impl PyParquetBatches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyArrowBatch>> {
        let mut reader = {
            let mut state = self.lock()?;
            match std::mem::replace(&mut *state, Reading::Busy) {
                Reading::Ready(reader) => reader,
                Reading::Busy => {
                    return Err(PyRuntimeError::new_err("ParquetBatches is read by another thread"))
                }
                Reading::Done => {
                    *state = Reading::Done;
                    return Ok(None);
                }
            }
        }; // unlocked while the batch is decoded
        let decoded = run_detached(py, move || {
            let next = reader.next();
            (reader, next)
        });
        let mut state = self.lock()?;
        match decoded {
            Ok((reader, Some(Ok(batch)))) => {
                *state = Reading::Ready(reader);
                let unsupported = parquet_traces::raw_traces(&batch).err();
                Ok(Some(PyArrowBatch { unsupported, batch }))
            }
            // The end, an undecodable page or a panic: nothing is read after it.
            Ok((_, None)) => {
                *state = Reading::Done;
                Ok(None)
            }
            Ok((_, Some(Err(e)))) => {
                *state = Reading::Done;
                Err(PyValueError::new_err(e.to_string()))
            }
            Err(panicked) => {
                *state = Reading::Done;
                Err(panicked)
            }
        }
    }
}

impl PyParquetBatches {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Reading>> {
        self.reader.lock().map_err(|_| PyRuntimeError::new_err("a Parquet reader panicked earlier"))
    }
}

/// One record batch as read: `num_rows`, and `unsupported`, the reason the core's Arrow path
/// does not take it (read its rows with pyarrow then), or `None`.
#[pyclass(frozen, name = "ArrowBatch", module = "trajgrade._core")]
pub struct PyArrowBatch {
    #[pyo3(get)]
    unsupported: Option<String>,
    batch: arrow_array::RecordBatch,
}

#[pymethods]
impl PyArrowBatch {
    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }
}

/// The columns the Arrow entry points take: pyarrow's buffers by name (`arrowcols.columns`),
/// or a batch this module read.
pub enum ArrowColumns {
    Buffers(HashMap<String, ColumnBuffers>),
    Batch(arrow_array::RecordBatch),
}

impl<'py> FromPyObject<'py> for ArrowColumns {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(batch) = ob.downcast::<PyArrowBatch>() {
            return Ok(ArrowColumns::Batch(batch.get().batch.clone()));
        }
        let columns: HashMap<String, ColumnBuffers> = ob.extract()?;
        check_columns(&columns)?;
        Ok(ArrowColumns::Buffers(columns))
    }
}

impl ArrowColumns {
    /// The columns as the core reads them; `rows` must be the batch's own row count.
    pub fn raw(&self, rows: usize) -> Result<RawTraces<'_>, String> {
        match self {
            ArrowColumns::Buffers(columns) => Ok(raw_traces(rows, columns)),
            ArrowColumns::Batch(batch) if batch.num_rows() != rows => {
                Err(format!("rows is {rows}, the batch has {}", batch.num_rows()))
            }
            ArrowColumns::Batch(batch) => parquet_traces::raw_traces(batch),
        }
    }
}
