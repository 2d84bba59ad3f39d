//! `run_detached`: the one helper every long call uses (polars' `enter_polars` pattern).
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;

use crate::errors::internal_error;

/// Runs `f` detached from the interpreter (the GIL is released; other Python threads run) and
/// turns a panic into `InternalError`: `PyO3`'s `PanicException` derives from `BaseException` and
/// would slip past `except Exception`. `f` must own its inputs; no `Bound`/`Py` goes inside.
pub fn run_detached<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    py.detach(|| catch_unwind(AssertUnwindSafe(f))).map_err(|payload| {
        let detail = payload
            .downcast_ref::<&str>()
            .map(ToString::to_string)
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_owned());
        internal_error(&detail)
    })
}
