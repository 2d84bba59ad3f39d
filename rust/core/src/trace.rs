//! The decoded trace being graded: limit checks, each call's arguments parsed at most once, and
//! scoped views of some of its calls (§11).
use std::borrow::Cow;
use std::cell::OnceCell;

use crate::call_meta::{CallMeta, CallMetas};
use crate::error::CoreError;
use crate::json::{self, ParseError, Value};
use crate::limits::Limits;
use crate::proto::v1::{ModelCall as ModelCallMsg, ToolCall, Trace};
use crate::wire::TraceParts;
use crate::work::{CancelFlag, Work};

/// A call's arguments as the matchers see them.
#[derive(Debug)]
pub(crate) enum Args {
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
    /// Where the argument text's value starts, once validated; `None` if invalid or absent.
    text_start: OnceCell<Option<usize>>,
}

/// One tool call as grading sees it, borrowed from a decoded `Trace` or from its bytes. The
/// SPEC v2 per-call fields (turn, agent, server, times) live in a side table
/// ([`TraceView::call_meta`]): most traces have none, and the v1 kinds never read them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Call<'a> {
    pub name: &'a str,
    pub arguments_json: Option<&'a str>,
    pub result: Option<&'a str>,
    pub error: bool,
}

/// One LLM call of the run (§10 `ModelCall`), borrowed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelCall<'a> {
    pub model: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None` = not recorded.
    pub cost: Option<f64>,
    /// 0 = not recorded, read as 1.
    pub turn: u32,
    pub agent: &'a str,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
}

/// Per-turn text (§10 `Turn`); element k-1 is turn k.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Turn<'a> {
    pub user_input: &'a str,
    pub final_answer: &'a str,
}

/// A trace plus lazily filled per-call caches; lives for one grading on one thread.
///
/// A view is either the whole trace or a scope of it (§11): some of its calls, in order, each
/// keeping its position in the trace. A scoped view shares the whole trace's caches (an
/// argument parsed for one scope is parsed for every other) and its work meter (no scope
/// resets the budget).
pub struct TraceView<'a> {
    id: &'a str,
    calls: Cow<'a, [Call<'a>]>,
    /// The calls' v2 fields by trace index (a scope shares the whole trace's).
    call_metas: Cow<'a, CallMetas<'a>>,
    final_answer: &'a str,
    /// Map entries; a later duplicate key wins.
    metadata: Cow<'a, [(&'a str, &'a str)]>,
    model_calls: Cow<'a, [ModelCall<'a>]>,
    turns: Cow<'a, [Turn<'a>]>,
    backing: Backing<'a>,
    max_depth: usize,
}

/// Where a view's per-call caches and work meter live.
enum Backing<'a> {
    /// The whole trace: one cache per call, and the grading's meter.
    Whole { cache: Vec<CallCache>, work: Work },
    /// A scope: the whole trace's caches and meter, and each call's 0-based index in the trace.
    Scoped { cache: &'a [CallCache], work: &'a Work, origin: Cow<'a, [u32]> },
}

/// What a scope keeps of a view (see [`TraceView::scope`]).
pub(crate) struct ScopedParts<'v> {
    pub calls: Cow<'v, [Call<'v>]>,
    /// Each call's 0-based index in the whole trace ([`TraceView::trace_index`]).
    pub origin: Cow<'v, [u32]>,
    pub model_calls: Cow<'v, [ModelCall<'v>]>,
    pub final_answer: &'v str,
}

impl<'a> TraceView<'a> {
    /// A view of a decoded trace (no copies).
    pub fn new(trace: &'a Trace, limits: &Limits) -> Self {
        Self::from_parts(
            TraceParts {
                id: &trace.id,
                calls: trace.calls.iter().map(Call::from_message).collect(),
                call_metas: trace.calls.iter().map(CallMeta::from_message).collect(),
                final_answer: &trace.final_answer,
                metadata: trace.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
                model_calls: trace.model_calls.iter().map(ModelCall::from_message).collect(),
                turns: trace
                    .turns
                    .iter()
                    .map(|t| Turn { user_input: &t.user_input, final_answer: &t.final_answer })
                    .collect(),
            },
            limits,
        )
    }

    /// A view of fields borrowed from the encoded bytes (see `wire::decode_trace`).
    pub fn from_parts(parts: TraceParts<'a>, limits: &Limits) -> Self {
        let mut cache = Vec::with_capacity(parts.calls.len());
        cache.resize_with(parts.calls.len(), CallCache::default);
        TraceView {
            id: parts.id,
            calls: Cow::Owned(parts.calls),
            call_metas: Cow::Owned(parts.call_metas),
            final_answer: parts.final_answer,
            metadata: Cow::Owned(parts.metadata),
            model_calls: Cow::Owned(parts.model_calls),
            turns: Cow::Owned(parts.turns),
            backing: Backing::Whole { cache, work: Work::new(limits.max_work_units, None) },
            max_depth: limits.max_json_depth,
        }
    }

    /// A view of some of this view's calls (§11): `parts.calls[j]` must be the trace's call at
    /// index `parts.origin[j]`. Id, metadata, turns, caches and work meter stay this view's.
    pub(crate) fn scope<'v>(&'v self, parts: ScopedParts<'v>) -> TraceView<'v> {
        debug_assert_eq!(parts.calls.len(), parts.origin.len());
        TraceView {
            id: self.id,
            calls: parts.calls,
            call_metas: Cow::Borrowed(&self.call_metas),
            final_answer: parts.final_answer,
            metadata: Cow::Borrowed(&self.metadata),
            model_calls: parts.model_calls,
            turns: Cow::Borrowed(&self.turns),
            backing: Backing::Scoped {
                cache: self.trace_cache(),
                work: self.work(),
                origin: parts.origin,
            },
            max_depth: self.max_depth,
        }
    }

    /// The whole trace's per-call caches.
    fn trace_cache(&self) -> &[CallCache] {
        match &self.backing {
            Backing::Whole { cache, .. } => cache,
            Backing::Scoped { cache, .. } => cache,
        }
    }

    /// The cache of this view's call `i`.
    #[inline]
    fn slot(&self, i: usize) -> &CallCache {
        match &self.backing {
            Backing::Whole { cache, .. } => &cache[i],
            Backing::Scoped { cache, origin, .. } => &cache[origin[i] as usize],
        }
    }

    /// The 0-based index in the whole trace of this view's call `i`.
    #[inline]
    pub(crate) fn trace_index(&self, i: usize) -> u32 {
        match &self.backing {
            Backing::Whole { .. } => i as u32,
            Backing::Scoped { origin, .. } => origin[i],
        }
    }

    /// The 1-based position in the trace of this view's call `i` (0-based), as results report
    /// it: `i + 1` for the whole trace, the call's original position in a scope.
    #[inline]
    pub(crate) fn pos(&self, i: usize) -> u32 {
        self.trace_index(i) + 1
    }

    /// Whether this view is a scope of the trace rather than all of it.
    pub(crate) fn is_scoped(&self) -> bool {
        matches!(self.backing, Backing::Scoped { .. })
    }

    /// What reasons call the calls graded: "the trace", or "the scope" (§11).
    pub(crate) fn noun(&self) -> &'static str {
        if self.is_scoped() {
            "the scope"
        } else {
            "the trace"
        }
    }

    /// This view, stopping at its next `work().spend` once `flag` is cancelled.
    #[must_use]
    pub(crate) fn with_cancel(mut self, flag: CancelFlag) -> Self {
        if let Backing::Whole { work, .. } = &mut self.backing {
            *work = Work::new(work.limit(), Some(flag));
        }
        self
    }

    /// This view with a work limit other than `Limits::max_work_units` (a first, cheap attempt).
    #[must_use]
    pub fn with_work_limit(mut self, limit: u64) -> Self {
        if let Backing::Whole { work, .. } = &mut self.backing {
            let old = std::mem::replace(work, Work::new(0, None));
            *work = old.with_limit(limit);
        }
        self
    }

    /// The work meter of this grading (long loops spend from it and stop when it says so); a
    /// scope spends from the whole trace's.
    pub fn work(&self) -> &Work {
        match &self.backing {
            Backing::Whole { work, .. } => work,
            Backing::Scoped { work, .. } => work,
        }
    }

    pub fn id(&self) -> &'a str {
        self.id
    }

    pub fn final_answer(&self) -> &'a str {
        self.final_answer
    }

    /// Metadata entries (a later duplicate key wins when collected into a map).
    pub fn metadata(&self) -> &[(&'a str, &'a str)] {
        &self.metadata
    }

    pub fn calls(&self) -> &[Call<'a>] {
        &self.calls
    }

    /// The SPEC v2 fields (turn, agent, server, times) of this view's call `i` (0-based).
    #[inline]
    pub fn call_meta(&self, i: usize) -> CallMeta<'a> {
        self.call_metas.get(self.trace_index(i) as usize)
    }

    /// The run's LLM calls, in order (§10).
    pub fn model_calls(&self) -> &[ModelCall<'a>] {
        &self.model_calls
    }

    /// Per-turn text; element k-1 is turn k (§10).
    pub fn turns(&self) -> &[Turn<'a>] {
        &self.turns
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    pub(crate) fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Arguments of call `i` (0-based), parsed on first use.
    pub(crate) fn args(&self, i: usize) -> &Args {
        self.slot(i).args.get_or_init(|| match self.calls[i].arguments_json {
            None => Args::NotRecorded,
            Some(text) => parse_args(text, self.max_depth),
        })
    }

    /// The parsed arguments of call `i` if some matcher already needed them.
    /// Call `i`'s argument text (`"{}"` for empty text) and the offset of its value when it is
    /// valid JSON within the depth limit (validated once per call); `None` when it is not
    /// recorded or not valid.
    pub(crate) fn valid_args_text(&self, i: usize) -> Option<(&'a str, usize)> {
        self.valid_args_text_with(i, |text| json::text::validate(text, self.max_depth))
    }

    /// [`valid_args_text`](Self::valid_args_text) with the validation done by `validate` when
    /// it has not been done yet; `validate` must answer exactly as `json::text::validate` (it
    /// may note more on the way, e.g. `json::text::validate_indexed`).
    pub(crate) fn valid_args_text_with(
        &self,
        i: usize,
        validate: impl FnOnce(&[u8]) -> Option<usize>,
    ) -> Option<(&'a str, usize)> {
        let text = self.calls[i].arguments_json?;
        let text = if text.is_empty() { "{}" } else { text };
        let start = *self.slot(i).text_start.get_or_init(|| validate(text.as_bytes()));
        start.map(|s| (text, s))
    }

    pub(crate) fn parsed_args(&self, i: usize) -> Option<&Args> {
        self.slot(i).args.get()
    }

    /// Canonical text of call `i`'s arguments; `None` when not recorded or invalid.
    pub(crate) fn canonical(&self, i: usize) -> Option<&str> {
        self.slot(i)
            .canonical
            .get_or_init(|| match self.args(i) {
                Args::Parsed(v) => Some(json::canonical::to_canonical(v)),
                _ => None,
            })
            .as_deref()
    }
}

impl<'a> Call<'a> {
    pub fn from_message(c: &'a ToolCall) -> Self {
        Call {
            name: &c.name,
            arguments_json: c.arguments_json.as_deref(),
            result: c.result.as_deref(),
            error: c.error,
        }
    }
}

impl<'a> ModelCall<'a> {
    pub fn from_message(m: &'a ModelCallMsg) -> Self {
        ModelCall {
            model: &m.model,
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
            cost: m.cost,
            turn: m.turn,
            agent: &m.agent,
            start_time_unix_nano: m.start_time_unix_nano,
            end_time_unix_nano: m.end_time_unix_nano,
        }
    }
}

/// Parses argument text: `""` means `{}`.
pub(crate) fn parse_args(text: &str, max_depth: usize) -> Args {
    if text.is_empty() {
        return Args::Parsed(Value::Object(json::Object::new()));
    }
    match json::parse(text, max_depth) {
        Ok(v) => Args::Parsed(v),
        Err(e) => Args::Invalid(e),
    }
}

/// Checks a decoded trace against the limits; `field` prefixes the paths in errors.
pub(crate) fn check_trace(trace: &Trace, limits: &Limits, field: &str) -> Result<(), CoreError> {
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

/// The limit checks of [`check_trace`] on borrowed parts whose encoding fits `max_trace_bytes`
/// (re-encoding never grows a message, so the size check cannot fail again).
pub(crate) fn check_parts(
    parts: &TraceParts<'_>,
    limits: &Limits,
    field: &str,
) -> Result<(), CoreError> {
    if parts.calls.len() > limits.max_calls_per_trace {
        return Err(CoreError::limit(
            "TOO_MANY_CALLS",
            format!("{field}.calls"),
            format!(
                "trace has {} calls; the limit is {}",
                parts.calls.len(),
                limits.max_calls_per_trace
            ),
        ));
    }
    for (i, call) in parts.calls.iter().enumerate() {
        let len = call.arguments_json.map_or(0, str::len);
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

/// A trace decoded from bytes: borrowed when the fast decoder handles it, else by prost.
pub(crate) enum Decoded<'a> {
    Parts(TraceParts<'a>),
    Owned(Trace),
}

/// As [`decode_trace`], borrowing the strings from `bytes` whenever possible.
pub(crate) fn wire_decode<'a>(
    bytes: &'a [u8],
    limits: &Limits,
    field: &str,
) -> Result<Decoded<'a>, CoreError> {
    if bytes.len() <= limits.max_trace_bytes {
        if let Some(parts) = crate::wire::decode_trace(bytes) {
            check_parts(&parts, limits, field)?;
            return Ok(Decoded::Parts(parts));
        }
    }
    decode_trace(bytes, limits, field).map(Decoded::Owned)
}

/// Decodes a serialized `Trace` (invalid bytes or UTF-8 are `INVALID_TRACE`) and checks limits.
pub(crate) fn decode_trace(bytes: &[u8], limits: &Limits, field: &str) -> Result<Trace, CoreError> {
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
