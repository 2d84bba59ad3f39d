//! The decoded trace being graded: limit checks, and each call's arguments parsed at most once.
use std::cell::OnceCell;

use crate::error::CoreError;
use crate::json::{self, ParseError, Value};
use crate::limits::Limits;
use crate::proto::v1::{ToolCall, Trace};

/// A call's arguments as the matchers see them.
#[derive(Debug)]
pub enum Args {
    /// `arguments_json` absent.
    NotRecorded,
    /// Not JSON, or nested deeper than the limit.
    Invalid(ParseError),
    Parsed(Value),
}

#[derive(Default)]
struct CallCache {
    args: OnceCell<Args>,
    canonical: OnceCell<Option<String>>,
}

/// A trace plus lazily filled per-call caches; lives for one grading on one thread.
pub struct TraceView<'a> {
    trace: &'a Trace,
    cache: Vec<CallCache>,
    max_depth: usize,
}

impl<'a> TraceView<'a> {
    pub fn new(trace: &'a Trace, limits: &Limits) -> Self {
        let mut cache = Vec::with_capacity(trace.calls.len());
        cache.resize_with(trace.calls.len(), CallCache::default);
        TraceView { trace, cache, max_depth: limits.max_json_depth }
    }

    pub fn trace(&self) -> &'a Trace {
        self.trace
    }

    pub fn calls(&self) -> &'a [ToolCall] {
        &self.trace.calls
    }

    pub fn len(&self) -> usize {
        self.trace.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.trace.calls.is_empty()
    }

    /// Arguments of call `i` (0-based), parsed on first use.
    pub fn args(&self, i: usize) -> &Args {
        self.cache[i].args.get_or_init(|| match self.trace.calls[i].arguments_json.as_deref() {
            None => Args::NotRecorded,
            Some(text) => parse_args(text, self.max_depth),
        })
    }

    /// Canonical text of call `i`'s arguments; `None` when not recorded or invalid.
    pub fn canonical(&self, i: usize) -> Option<&str> {
        self.cache[i]
            .canonical
            .get_or_init(|| match self.args(i) {
                Args::Parsed(v) => Some(json::canonical::to_canonical(v)),
                _ => None,
            })
            .as_deref()
    }
}

/// Parses argument text: `""` means `{}`.
pub fn parse_args(text: &str, max_depth: usize) -> Args {
    if text.is_empty() {
        return Args::Parsed(Value::Object(json::Object::new()));
    }
    match json::parse(text, max_depth) {
        Ok(v) => Args::Parsed(v),
        Err(e) => Args::Invalid(e),
    }
}

/// Checks a decoded trace against the limits; `field` prefixes the paths in errors.
pub fn check_trace(trace: &Trace, limits: &Limits, field: &str) -> Result<(), CoreError> {
    use prost::Message;
    let size = trace.encoded_len();
    if size > limits.max_trace_bytes {
        return Err(CoreError::limit(
            "TRACE_TOO_LARGE",
            field.to_owned(),
            format!("trace is {size} bytes; the limit is {}", limits.max_trace_bytes),
        ));
    }
    if trace.calls.len() > limits.max_calls_per_trace {
        return Err(CoreError::limit(
            "TOO_MANY_CALLS",
            format!("{field}.calls"),
            format!(
                "trace has {} calls; the limit is {}",
                trace.calls.len(),
                limits.max_calls_per_trace
            ),
        ));
    }
    for (i, call) in trace.calls.iter().enumerate() {
        let len = call.arguments_json.as_ref().map_or(0, String::len);
        if len > limits.max_argument_bytes {
            return Err(CoreError::limit(
                "ARGUMENT_TOO_LARGE",
                format!("{field}.calls[{i}].arguments_json"),
                format!("arguments are {len} bytes; the limit is {}", limits.max_argument_bytes),
            ));
        }
    }
    Ok(())
}

/// Decodes a serialized `Trace` (invalid bytes or UTF-8 are `INVALID_TRACE`) and checks limits.
pub fn decode_trace(bytes: &[u8], limits: &Limits, field: &str) -> Result<Trace, CoreError> {
    use prost::Message;
    if bytes.len() > limits.max_trace_bytes {
        return Err(CoreError::limit(
            "TRACE_TOO_LARGE",
            field.to_owned(),
            format!("trace is {} bytes; the limit is {}", bytes.len(), limits.max_trace_bytes),
        ));
    }
    let trace = Trace::decode(bytes).map_err(|e| {
        CoreError::invalid_request(
            "INVALID_TRACE",
            field.to_owned(),
            format!("undecodable trace: {e}"),
        )
    })?;
    check_trace(&trace, limits, field)?;
    Ok(trace)
}
