//! trajgrade._core: the PyO3 binding of trajgrade-core (glue only; grading lives in the core).
use pyo3::prelude::*;

#[pymodule(gil_used = false)]
mod _core {
    use super::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        Ok(())
    }
}
