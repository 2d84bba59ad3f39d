//! Read-only bytes from Python without a copy: `bytes`, or any C-contiguous buffer of unsigned
//! bytes (a read-only `mmap.mmap` of an input file, a `memoryview` of an Arrow buffer).
use std::ops::Deref;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

/// Bytes borrowed from a Python object for the length of a call (the GIL released meanwhile).
pub enum Data {
    Bytes(PyBackedBytes),
    /// Held exported, so its owner can neither resize nor unmap it until this is dropped.
    Buffer(PyBuffer<u8>),
}

impl<'py> FromPyObject<'py> for Data {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(bytes) = ob.downcast::<PyBytes>() {
            return Ok(Data::Bytes(bytes.clone().into()));
        }
        let buffer = PyBuffer::<u8>::get(ob)?;
        if !buffer.is_c_contiguous() {
            return Err(PyValueError::new_err("expected bytes or a C-contiguous buffer"));
        }
        Ok(Data::Buffer(buffer))
    }
}

impl Deref for Data {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Data::Bytes(bytes) => bytes,
            Data::Buffer(buffer) if buffer.len_bytes() == 0 => &[],
            // SAFETY: a C-contiguous buffer of `len_bytes` bytes (checked on extraction), kept
            // valid by the export while `self` lives. The callers pass read-only views (mmap
            // with ACCESS_READ, Arrow buffers) that no Python code writes meanwhile.
            Data::Buffer(buffer) => unsafe {
                std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), buffer.len_bytes())
            },
        }
    }
}
