//! Errors of the core (`CoreError`) and the stable reason codes of assertion results (`Reason`).
use thiserror::Error;

/// One problem in a suite, with the field path where it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteProblem {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for SuiteProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Everything that can go wrong outside of grading itself (a failed grade is data, not an error).
#[derive(Clone, Debug, Error)]
pub enum CoreError {
    /// The suite is invalid; every problem in suite order (never empty).
    #[error("invalid suite: {}", join_problems(.0))]
    InvalidSuite(Vec<SuiteProblem>),
    /// Malformed bytes or an invalid trace.
    #[error("{field}: {message}")]
    InvalidRequest { reason_code: String, field: String, message: String },
    /// A configured limit was exceeded (`TRACE_TOO_LARGE`, `TOO_MANY_CALLS`, ...).
    #[error("{field}: {message}")]
    LimitExceeded { reason_code: String, field: String, message: String },
    /// The request was cancelled or its deadline passed while this trace was graded (field:
    /// the trace's path).
    #[error("{0}: grading was cancelled")]
    Cancelled(String),
    /// No compiled suite has this id.
    #[error("unknown suite_id {0:?}")]
    SuiteNotFound(String),
    /// A bug; the message is generic and details belong in a log.
    #[error("internal error: {0}")]
    Internal(String),
}

fn join_problems(problems: &[SuiteProblem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl CoreError {
    /// The stable `UPPER_SNAKE` code of this error.
    pub fn reason_code(&self) -> &str {
        match self {
            CoreError::InvalidSuite(_) => "INVALID_SUITE",
            CoreError::InvalidRequest { reason_code, .. }
            | CoreError::LimitExceeded { reason_code, .. } => reason_code,
            CoreError::SuiteNotFound(_) => "SUITE_NOT_FOUND",
            CoreError::Cancelled(_) => "CANCELLED",
            CoreError::Internal(_) => "INTERNAL",
        }
    }

    /// The field path the error is about (the first problem's, for an invalid suite).
    pub fn field(&self) -> &str {
        match self {
            CoreError::InvalidSuite(p) => p.first().map_or("", |p| p.field.as_str()),
            CoreError::InvalidRequest { field, .. } | CoreError::LimitExceeded { field, .. } => {
                field
            }
            CoreError::SuiteNotFound(_) => "suite_id",
            CoreError::Cancelled(field) => field,
            CoreError::Internal(_) => "",
        }
    }

    /// The human message without the field prefix.
    pub fn message(&self) -> String {
        match self {
            CoreError::InvalidRequest { message, .. }
            | CoreError::LimitExceeded { message, .. } => message.clone(),
            CoreError::Cancelled(_) => "grading was cancelled".to_owned(),
            other => other.to_string(),
        }
    }

    pub(crate) fn invalid_request(reason_code: &str, field: String, message: String) -> Self {
        CoreError::InvalidRequest { reason_code: reason_code.to_owned(), field, message }
    }

    pub(crate) fn limit(reason_code: &str, field: String, message: String) -> Self {
        CoreError::LimitExceeded { reason_code: reason_code.to_owned(), field, message }
    }
}

/// Reason codes of failing assertion results (SPEC §4, §12). They only grow; never rename one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    ToolNotCalled,
    NoMatchingCall,
    CallIndexOutOfRange,
    ArgsNotRecorded,
    ArgsInvalidJson,
    SequenceIncomplete,
    SequenceMismatch,
    UnexpectedTool,
    ForbiddenTool,
    CountOutOfRange,
    OrderViolated,
    RepeatedCall,
    TooManySteps,
    UngroundedValue,
    TrajectoryMismatch,
    ExpressionFalse,
    ExpressionError,
    NegatedHeld,
    TimingNotRecorded,
    TooSlow,
    CostNotRecorded,
    OverBudget,
    ScoreBelowMin,
}

impl Reason {
    /// The wire code.
    pub fn code(self) -> &'static str {
        match self {
            Reason::ToolNotCalled => "TOOL_NOT_CALLED",
            Reason::NoMatchingCall => "NO_MATCHING_CALL",
            Reason::CallIndexOutOfRange => "CALL_INDEX_OUT_OF_RANGE",
            Reason::ArgsNotRecorded => "ARGS_NOT_RECORDED",
            Reason::ArgsInvalidJson => "ARGS_INVALID_JSON",
            Reason::SequenceIncomplete => "SEQUENCE_INCOMPLETE",
            Reason::SequenceMismatch => "SEQUENCE_MISMATCH",
            Reason::UnexpectedTool => "UNEXPECTED_TOOL",
            Reason::ForbiddenTool => "FORBIDDEN_TOOL",
            Reason::CountOutOfRange => "COUNT_OUT_OF_RANGE",
            Reason::OrderViolated => "ORDER_VIOLATED",
            Reason::RepeatedCall => "REPEATED_CALL",
            Reason::TooManySteps => "TOO_MANY_STEPS",
            Reason::UngroundedValue => "UNGROUNDED_VALUE",
            Reason::TrajectoryMismatch => "TRAJECTORY_MISMATCH",
            Reason::ExpressionFalse => "EXPRESSION_FALSE",
            Reason::ExpressionError => "EXPRESSION_ERROR",
            Reason::NegatedHeld => "NEGATED_HELD",
            Reason::TimingNotRecorded => "TIMING_NOT_RECORDED",
            Reason::TooSlow => "TOO_SLOW",
            Reason::CostNotRecorded => "COST_NOT_RECORDED",
            Reason::OverBudget => "OVER_BUDGET",
            Reason::ScoreBelowMin => "SCORE_BELOW_MIN",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}
