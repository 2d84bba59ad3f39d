//! Limits: every configurable bound of SPEC §7, each with a documented default.

/// Bounds applied to suites, traces and batches. `Default` gives the documented values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest encoded `Trace` in bytes (default 4 MiB); larger is `TRACE_TOO_LARGE`.
    pub max_trace_bytes: usize,
    /// Most calls in one trace (default 10 000); more is `TOO_MANY_CALLS`.
    pub max_calls_per_trace: usize,
    /// Largest single `arguments_json` / `args_json` text in bytes (default 1 MiB).
    pub max_argument_bytes: usize,
    /// Deepest JSON nesting accepted (default 128); deeper is invalid JSON, never an overflow.
    pub max_json_depth: usize,
    /// Largest compiled regex program in bytes (default 1 MiB).
    pub max_regex_bytes: usize,
    /// Most assertions in one suite (default 1 000).
    pub max_assertions_per_suite: usize,
    /// Largest encoded `Suite` in bytes (default 4 MiB).
    pub max_suite_bytes: usize,
    /// Inline-compiled suites kept in memory, least recently used evicted first (default
    /// 1 024). Registered suites are kept apart (`Grader::with_max_registered_suites`).
    pub suite_cache_size: usize,
    /// Most traces in one batch request (default 10 000).
    pub max_batch_items: usize,
    /// Work units one trace's grading may spend (see `work.rs`); more is `WORK_LIMIT_EXCEEDED`
    /// for that trace.
    pub max_work_units: u64,
    /// Cost units one CEL evaluation may spend (one per comprehension iteration and per
    /// function call, default 1 000 000); more is `EXPRESSION_ERROR` "cost limit of N exceeded".
    pub expression_cost_limit: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_trace_bytes: 4 << 20,
            max_calls_per_trace: 10_000,
            max_argument_bytes: 1 << 20,
            max_json_depth: 128,
            max_regex_bytes: 1 << 20,
            max_assertions_per_suite: 1_000,
            max_suite_bytes: 4 << 20,
            suite_cache_size: 1_024,
            max_batch_items: 10_000,
            max_work_units: 50_000_000,
            expression_cost_limit: 1_000_000,
        }
    }
}
