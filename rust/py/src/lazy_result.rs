//! `LazyGradeResult`: a `GradeResult` kept as the core's bytes until something reads it.
//!
//! `CompiledSuite.grade_batch` returns one per graded trace, so a batch costs one small object
//! per trace instead of a protobuf decode per trace. It is built here, in the pass that takes
//! the core's outcomes: the outcome's buffer moves in (no `bytes` object, no copy) and the
//! object is not tracked by the cyclic GC (it can reference nothing but its decoded message,
//! which cannot reference it back), so making 20,000 of them is a few allocations' work.
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString, PyTuple, PyType};

/// `trajgrade.v1.result_pb2.GradeResult`, imported on first use.
static GRADE_RESULT: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn grade_result_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    GRADE_RESULT.import(py, "trajgrade.v1.result_pb2", "GradeResult")
}

/// A `GradeResult` decoded on first use (an attribute, a method, `==`, `str`).
///
/// It answers `isinstance(x, result_pb2.GradeResult)` with True and has every field and method
/// of the message; setting a field changes the decoded message. Until it is decoded,
/// `SerializeToString()` returns the core's bytes as they are (they equal the deterministic
/// encoding). Protobuf calls that need the concrete class as an argument (`CopyFrom(x)`,
/// `GradeTraceResponse(result=x)`) take `x.message`, the decoded `GradeResult`.
#[pyclass(frozen, name = "LazyGradeResult", module = "trajgrade._core")]
pub struct LazyGradeResult {
    /// The buffer the core wrote; the `GradeResult` is `buffer[start..]`.
    buffer: Vec<u8>,
    start: usize,
    message: PyOnceLock<Py<PyAny>>,
}

impl LazyGradeResult {
    /// The result whose serialized `GradeResult` is `buffer[start..]` (the buffer moves in).
    pub fn from_buffer(buffer: Vec<u8>, start: usize) -> Self {
        LazyGradeResult { buffer, start, message: PyOnceLock::new() }
    }

    fn raw(&self) -> &[u8] {
        &self.buffer[self.start..]
    }

    fn decoded<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyAny>> {
        self.message
            .get_or_try_init(py, || {
                let raw = PyBytes::new(py, self.raw());
                Ok::<_, PyErr>(grade_result_type(py)?.call_method1("FromString", (raw,))?.unbind())
            })
            .map(|m| m.bind(py))
    }

    fn is_decoded(&self, py: Python<'_>) -> bool {
        self.message.get(py).is_some()
    }
}

#[pymethods]
impl LazyGradeResult {
    /// From a serialized `GradeResult` (as pickling stores it).
    #[new]
    fn new(raw: &[u8]) -> Self {
        LazyGradeResult::from_buffer(raw.to_vec(), 0)
    }

    /// The decoded `GradeResult` (decoded once, then kept).
    #[getter]
    fn message<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.decoded(py).cloned()
    }

    /// `isinstance()` falls back to `__class__` when `type()` does not match (as
    /// `unittest.mock` does), so a `LazyGradeResult` is a `GradeResult` to it.
    #[getter(__class__)]
    #[allow(clippy::unused_self)] // a getter takes self
    fn class<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyType>> {
        grade_result_type(py).cloned()
    }

    fn __getattr__<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.decoded(py)?.getattr(name)
    }

    fn __setattr__(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.decoded(py)?.setattr(name, value)
    }

    fn __delattr__(&self, py: Python<'_>, name: &Bound<'_, PyString>) -> PyResult<()> {
        self.decoded(py)?.delattr(name)
    }

    fn __dir__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let names = PySet::new(py, self.decoded(py)?.dir()?)?;
        names.add("message")?;
        let sorted = PyList::new(py, names)?;
        sorted.sort()?;
        Ok(sorted)
    }

    /// The message's bytes; the core's own bytes while nothing decoded them.
    #[pyo3(name = "SerializeToString", signature = (**kwargs))]
    fn serialize_to_string<'py>(
        &self,
        py: Python<'py>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.message.get(py) {
            None => Ok(PyBytes::new(py, self.raw()).into_any()),
            Some(message) => message.bind(py).call_method("SerializeToString", (), kwargs),
        }
    }

    fn __richcmp__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
        op: CompareOp,
    ) -> PyResult<Bound<'py, PyAny>> {
        let equal = match op {
            CompareOp::Eq => self.equals(py, other)?,
            CompareOp::Ne => self.equals(py, other)?.map(|e| !e),
            _ => None,
        };
        Ok(match equal {
            Some(e) => e.into_pyobject(py)?.to_owned().into_any(),
            None => py.NotImplemented().into_bound(py),
        })
    }

    /// Mutable, so unhashable, like every protobuf message.
    #[classattr]
    const __hash__: Option<Py<PyAny>> = None;

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.decoded(py)?.repr()?.extract()
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        self.decoded(py)?.str()?.extract()
    }

    /// Pickles as itself (copyreg's default would use the spoofed `__class__`).
    fn __reduce_ex__<'py>(
        &self,
        py: Python<'py>,
        _protocol: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("deterministic", true)?;
        let raw = self.serialize_to_string(py, Some(&kwargs))?;
        Ok((py.get_type::<LazyGradeResult>(), PyTuple::new(py, [raw])?))
    }
}

impl LazyGradeResult {
    /// `self == other` for a `GradeResult` or a `LazyGradeResult`; `None` for anything else.
    fn equals(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
        if let Ok(other) = other.downcast_exact::<LazyGradeResult>() {
            let other = other.get();
            if !self.is_decoded(py) && !other.is_decoded(py) && self.raw() == other.raw() {
                return Ok(Some(true));
            }
            return self.decoded(py)?.eq(other.decoded(py)?).map(Some);
        }
        if other.is_instance(grade_result_type(py)?)? {
            return self.decoded(py)?.eq(other).map(Some);
        }
        Ok(None)
    }
}
