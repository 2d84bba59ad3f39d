//! The exception hierarchy of `trajgrade._core` and the one `CoreError` → Python conversion.
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use trajgrade_core::CoreError;

create_exception!(
    trajgrade._core,
    TrajgradeError,
    PyException,
    "Base of every trajgrade error; carries `reason_code`, `field` and `message`."
);
create_exception!(
    trajgrade._core,
    InvalidSuiteError,
    TrajgradeError,
    "The suite is invalid; `problems` lists every (field, message) in suite order."
);
create_exception!(
    trajgrade._core,
    InvalidRequestError,
    TrajgradeError,
    "Malformed bytes or an invalid trace or request."
);
create_exception!(
    trajgrade._core,
    LimitExceededError,
    TrajgradeError,
    "A configured limit was exceeded (the reason code names the limit)."
);
create_exception!(
    trajgrade._core,
    SuiteNotFoundError,
    TrajgradeError,
    "No compiled suite has this id."
);
create_exception!(
    trajgrade._core,
    CancelledError,
    TrajgradeError,
    "The grading was cancelled (a `CancelToken` was cancelled: the caller left or its deadline passed)."
);
create_exception!(
    trajgrade._core,
    InternalError,
    TrajgradeError,
    "A bug in trajgrade; the message is generic."
);

/// Class-level defaults, so an error raised from Python code (`TrajgradeError("...")`) still has
/// every attribute the stub promises.
pub fn add_defaults(py: Python<'_>) -> PyResult<()> {
    let base = py.get_type::<TrajgradeError>();
    base.setattr("reason_code", "")?;
    base.setattr("field", "")?;
    base.setattr("message", "")?;
    py.get_type::<InvalidSuiteError>().setattr("problems", PyList::empty(py))?;
    Ok(())
}

/// A `CoreError` crossing into Python (the orphan rule forbids `From<CoreError> for PyErr`).
pub struct PyCoreError(pub CoreError);

impl From<CoreError> for PyCoreError {
    fn from(e: CoreError) -> Self {
        PyCoreError(e)
    }
}

impl From<PyCoreError> for PyErr {
    fn from(e: PyCoreError) -> PyErr {
        Python::attach(|py| match to_exception(py, &e.0) {
            Ok(value) => PyErr::from_value(value),
            Err(err) => err,
        })
    }
}

/// The exception object for `e` (not raised): the single mapping of variant → class.
pub fn to_exception<'py>(py: Python<'py>, e: &CoreError) -> PyResult<Bound<'py, PyAny>> {
    let (class, message) = match e {
        CoreError::InvalidSuite(_) => (py.get_type::<InvalidSuiteError>(), e.to_string()),
        CoreError::InvalidRequest { .. } => (py.get_type::<InvalidRequestError>(), e.message()),
        CoreError::LimitExceeded { .. } => (py.get_type::<LimitExceededError>(), e.message()),
        CoreError::SuiteNotFound(_) => (py.get_type::<SuiteNotFoundError>(), e.to_string()),
        CoreError::Cancelled(_) => (py.get_type::<CancelledError>(), e.message()),
        // Details of a bug stay out of the exception text (SPEC §7: generic message).
        CoreError::Internal(_) => (py.get_type::<InternalError>(), "internal error".to_owned()),
    };
    let value = class.call1((message.clone(),))?;
    value.setattr("reason_code", e.reason_code())?;
    value.setattr("field", e.field())?;
    value.setattr("message", message)?;
    if let CoreError::InvalidSuite(problems) = e {
        let items = problems
            .iter()
            .map(|p| PyTuple::new(py, [p.field.as_str(), p.message.as_str()]))
            .collect::<PyResult<Vec<_>>>()?;
        value.setattr("problems", PyList::new(py, items)?)?;
    }
    Ok(value)
}

/// An `InternalError` for a panic inside the core; the payload goes to stderr (the log) only.
pub fn internal_error(detail: &str) -> PyErr {
    eprintln!("trajgrade: internal error: {detail}");
    PyCoreError(CoreError::Internal(detail.to_owned())).into()
}
