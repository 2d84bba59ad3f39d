//! `trajgrade._core`: the `PyO3` binding of trajgrade-core (glue only; grading lives in the core).
//! The production entry points; `_core.bench` (bench.rs) holds those only benchmarks and tests
//! call.
mod bench;
mod data;
#[cfg(target_os = "linux")]
mod deadline_timer;
mod detach;
mod dict_trace;
mod errors;
mod grader;
mod grader_front;
mod jsonl;
mod lazy_result;
mod live_span;
mod otlp;
mod otlp_receiver;
mod parquet;
mod tonic_serve;
mod watch_hub;

// The binding, not the core (a library), picks the allocator: grading allocates small,
// short-lived buffers on every worker thread, which mimalloc's per-thread heaps serve faster.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pyo3::pymodule(gil_used = false)]
mod _core {
    use pyo3::prelude::*;

    use crate::errors;

    #[cfg(target_os = "linux")]
    #[pymodule_export]
    use crate::deadline_timer::PyDeadlineTimer;
    #[pymodule_export]
    use crate::dict_trace::encode_trace_dict;
    #[pymodule_export]
    use crate::grader::{PyCancelToken, PyCompiledSuite, PyGrader, PyLimits};
    #[pymodule_export]
    use crate::grader_front::PyGraderFront;
    #[pymodule_export]
    use crate::jsonl::{
        arrow_traces, jsonl_traces, outcome_block, outcome_tally, split_jsonl, PyBlockMark,
        PyJsonlBlock,
    };
    #[pymodule_export]
    use crate::lazy_result::LazyGradeResult;
    #[pymodule_export]
    use crate::live_span::LiveSpan;
    #[pymodule_export]
    use crate::otlp::{map_otlp, map_otlp_runs, otlp_spans};
    #[pymodule_export]
    use crate::otlp_receiver::{PyOtlpExport, PyOtlpGrpcTransport};
    #[pymodule_export]
    use crate::parquet::{PyArrowBatch, PyParquetBatches, PyParquetTraces};
    #[pymodule_export]
    use crate::watch_hub::PyWatchHub;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("build_profile", if cfg!(debug_assertions) { "debug" } else { "release" })?;
        m.add("TrajgradeError", py.get_type::<errors::TrajgradeError>())?;
        m.add("InvalidSuiteError", py.get_type::<errors::InvalidSuiteError>())?;
        m.add("InvalidRequestError", py.get_type::<errors::InvalidRequestError>())?;
        m.add("LimitExceededError", py.get_type::<errors::LimitExceededError>())?;
        m.add("SuiteNotFoundError", py.get_type::<errors::SuiteNotFoundError>())?;
        m.add("CancelledError", py.get_type::<errors::CancelledError>())?;
        m.add("InternalError", py.get_type::<errors::InternalError>())?;
        errors::add_defaults(py)?;
        crate::bench::add_to(m)?;
        Ok(())
    }
}
