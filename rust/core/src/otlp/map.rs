//! THE span-to-Trace mapping (docs/trace-formats.md, OTLP): spans and `gen_ai.*` log events
//! of one group to one `Trace`. A group depends only on its own spans and events and their
//! relative order, so a run graded live and its spans regraded from a file give one Trace.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::LazyLock;

use regex::Regex;

use super::pyvalue::{self, text_or_json, Value};
use super::record::{EventRecord, SpanRecord};
use super::report::{
    Report, INVALID_ATTRIBUTE_JSON, LOG_WITHOUT_TRACE, MISSING_GROUP_ATTRIBUTE,
    MODEL_CALL_WITHOUT_USAGE, TOOL_CALL_WITHOUT_NAME, UNMAPPED_ATTRIBUTE,
};
use super::tree::{SpanKey, SpanTree};
use super::usage;
use crate::proto::v1 as pb;

/// Clock skew tolerated when the execution span appears to start before the LLM span ended.
const SKEW_NS: i128 = 1_000_000_000;

static OI_OUTPUT_CALL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^llm\.output_messages\.([0-9]+)\.message\.tool_calls\.([0-9]+)\.tool_call\.(id|function\.name|function\.arguments)\n?\z",
    )
    .expect("valid pattern")
});
static OI_OUTPUT_CONTENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^llm\.output_messages\.([0-9]+)\.message\.(role|content)\n?\z").expect("valid")
});
static OI_INPUT_MESSAGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^llm\.input_messages\.([0-9]+)\.message\.(role|content|tool_call_id)\n?\z")
        .expect("valid pattern")
});
/// `tools/call <tool>` (MCP conventions) and `MCP handle|send tools/call <tool>` (MCP SDK).
static MCP_SPAN_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[\s\x1c-\x1f])tools/call[\s\x1c-\x1f]+([^\s\x1c-\x1f]+)\n?\z")
        .expect("valid pattern")
});

/// Attributes of a tool span that describe the tool, not the call: not reported.
const DESCRIPTIVE: [&str; 5] = [
    "tool.description",
    "tool.type",
    "tool.parameters",
    "gen_ai.tool.description",
    "gen_ai.tool.type",
];
const TOOL_NAMESPACES: [&str; 5] = ["tool.", "tool_call.", "gen_ai.tool.", "input.", "output."];

#[derive(Clone, Copy, PartialEq)]
enum Convention {
    GenAi,
    OpenInference,
    Plain,
}

impl Convention {
    fn name(self) -> &'static str {
        match self {
            Convention::GenAi => "genai",
            Convention::OpenInference => "openinference",
            Convention::Plain => "plain",
        }
    }

    fn reads(self, key: &str) -> bool {
        let keys: &[&str] = match self {
            Convention::GenAi => &[
                "gen_ai.tool.name",
                "gen_ai.tool.call.id",
                "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result",
            ],
            Convention::OpenInference => &[
                "tool.name",
                "tool_call.function.name",
                "tool_call.id",
                "tool.id",
                "tool_call.function.arguments",
                "input.value",
                "input.mime_type",
                "output.value",
                "output.mime_type",
            ],
            Convention::Plain => {
                &["tool.name", "tool.arguments", "tool.result", "tool.output", "tool.call.id"]
            }
        };
        keys.contains(&key)
    }
}

#[derive(Debug, Clone, Default)]
#[allow(clippy::struct_field_names)] // `call_id`: the importer's name
struct Call {
    name: String,
    arguments: Option<String>,
    call_id: String,
    time: u64,
    order: usize,
    sub: usize,
    result: Option<String>,
    error: bool,
    start: u64,
    end: u64,
    weak_arguments: bool,
    span: Option<SpanKey>,
    anchor: (u64, usize),
    mcp: bool,
    server: String,
}

/// One group's spans and events (orders renumbered 0.. within it).
pub(crate) struct Group {
    pub key: String,
    pub trace_ids: Vec<String>,
    pub spans: Vec<SpanRecord>,
    pub events: Vec<EventRecord>,
}

/// Groups by trace id, or by the value of `group_by` (a span's, else its resource's).
pub(crate) fn group(
    spans: Vec<SpanRecord>,
    events: Vec<EventRecord>,
    group_by: Option<&str>,
    report: &mut Report,
) -> Vec<Group> {
    let mut key_of_trace: HashMap<String, String> = HashMap::new();
    match group_by {
        None => {
            for id in spans.iter().map(|s| &s.trace_id).chain(events.iter().map(|e| &e.trace_id)) {
                key_of_trace.entry(id.clone()).or_insert_with(|| id.clone());
            }
        }
        Some(attr) => {
            let mut order: Vec<&String> = Vec::new();
            let mut seen: HashSet<&String> = HashSet::new();
            for span in &spans {
                if seen.insert(&span.trace_id) {
                    order.push(&span.trace_id);
                }
                let value = match span.attrs.get(attr) {
                    Some(v) => v,
                    None => span.resource.value(attr),
                };
                if *value != Value::None && !key_of_trace.contains_key(&span.trace_id) {
                    key_of_trace.insert(span.trace_id.clone(), value.py_str());
                }
            }
            let detail = format!("no {}", pyvalue::repr(&Value::Str(attr.to_string())));
            for id in order {
                if !key_of_trace.contains_key(id) {
                    report.add(MISSING_GROUP_ATTRIBUTE, &format!("trace {id}"), &detail);
                }
            }
        }
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for span in spans {
        let Some(key) = key_of_trace.get(&span.trace_id) else { continue };
        let index = *at.entry(key.clone()).or_insert_with(|| {
            groups.push(Group {
                key: key.clone(),
                trace_ids: Vec::new(),
                spans: Vec::new(),
                events: Vec::new(),
            });
            groups.len() - 1
        });
        let group = &mut groups[index];
        if !group.trace_ids.contains(&span.trace_id) {
            group.trace_ids.push(span.trace_id.clone());
        }
        group.spans.push(span);
    }
    for event in events {
        let Some(key) = key_of_trace.get(&event.trace_id) else {
            report.add(
                LOG_WITHOUT_TRACE,
                &format!("log event {}", event.name),
                &format!("trace {}", event.trace_id),
            );
            continue;
        };
        let index = *at.entry(key.clone()).or_insert_with(|| {
            groups.push(Group {
                key: key.clone(),
                trace_ids: vec![event.trace_id.clone()],
                spans: Vec::new(),
                events: Vec::new(),
            });
            groups.len() - 1
        });
        groups[index].events.push(event);
    }
    groups
}

fn list(value: Option<&Value>) -> &[Value] {
    match value {
        Some(Value::List(items)) => items,
        _ => &[],
    }
}

fn dict_get<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    match value {
        Value::Dict(d) => d.get(key),
        _ => None,
    }
}

fn is_str(value: Option<&Value>, want: &str) -> bool {
    value.and_then(Value::as_str) == Some(want)
}

/// Python's `a or b` on attribute values.
fn or<'a>(a: &'a Value, b: &'a Value) -> &'a Value {
    if a.truthy() {
        a
    } else {
        b
    }
}

fn id_text(value: &Value) -> String {
    if value.truthy() {
        value.py_str()
    } else {
        String::new()
    }
}

/// The value of `key` in insertion-ordered pairs (a Python dict's `setdefault`).
fn slot<K: PartialEq, V: Default>(pairs: &mut Vec<(K, V)>, key: K) -> &mut V {
    let at = if let Some(at) = pairs.iter().position(|(k, _)| *k == key) {
        at
    } else {
        pairs.push((key, V::default()));
        pairs.len() - 1
    };
    &mut pairs[at].1
}

/// A regex group's integer as a sort key: (digit count, digits) without leading zeros.
type Index = (usize, String);

/// A non-negative integer's digits as a sort key (Python's `int(...)` of a regex group).
fn index_key(digits: &str) -> (usize, String) {
    let t = digits.trim_start_matches('0');
    (t.len(), t.to_string())
}

type Answer = (u64, usize, String, Option<SpanKey>);
/// Tool results by call id, then by the span (or event) whose input held them, in input order.
type Results = Vec<(String, Vec<(String, Vec<String>)>)>;

struct Extractor<'r> {
    report: &'r mut Report,
    place: String,
    tree: SpanTree,
    executed: Vec<Call>,
    requested: Vec<Call>,
    /// Results by call id, then by source (insertion order both).
    results: Results,
    answers: Vec<Answer>,
    spans_with_outputs: HashSet<String>,
    user_texts: Vec<(SpanKey, Vec<String>)>,
    user_index: HashMap<SpanKey, usize>,
    model_spans: Vec<usize>,
    above_model: HashSet<SpanKey>,
}

impl Extractor<'_> {
    fn unmapped(&mut self, span: &SpanRecord, key: &str, why: &str) {
        let place = format!("{} span {}", self.place, span.span_id);
        self.report.add(UNMAPPED_ATTRIBUTE, &place, &format!("{key}: {why}"));
    }

    fn users(&mut self, key: SpanKey) -> &mut Vec<String> {
        let at = if let Some(&at) = self.user_index.get(&key) {
            at
        } else {
            self.user_texts.push((key.clone(), Vec::new()));
            self.user_index.insert(key, self.user_texts.len() - 1);
            self.user_texts.len() - 1
        };
        &mut self.user_texts[at].1
    }

    fn result(&mut self, call_id: &str, source: &str, text: String) {
        let by_source = slot(&mut self.results, call_id.to_string());
        slot(by_source, source.to_string()).push(text);
    }

    fn span(&mut self, spans: &[SpanRecord], at: usize) {
        let span = &spans[at];
        let attrs = &span.attrs;
        let kind = attrs.value("openinference.span.kind");
        let mcp = is_str(attrs.get("mcp.method.name"), "tools/call");
        let key = span.key();
        if usage::is_model_span(attrs) && !self.above_model.contains(&key) {
            self.model_spans.push(at);
        }
        let mut convention = None;
        if is_str(attrs.get("gen_ai.operation.name"), "execute_tool") || mcp {
            convention = Some(Convention::GenAi);
            let mcp_name = if mcp { mcp_tool_name(span) } else { None };
            let mcp_value = mcp_name.map_or(Value::None, Value::Str);
            let name = or(attrs.value("gen_ai.tool.name"), &mcp_value).clone();
            self.execution(
                span,
                &name,
                attrs.value("gen_ai.tool.call.id"),
                attrs.value("gen_ai.tool.call.arguments"),
                attrs.value("gen_ai.tool.call.result"),
                attrs.contains("error.type"),
                false,
                mcp,
            );
        } else if kind.as_str() == Some("TOOL") {
            convention = Some(Convention::OpenInference);
            let mut arguments = attrs.value("tool_call.function.arguments");
            let mut weak = false;
            if *arguments == Value::None && is_str(attrs.get("input.mime_type"), "application/json")
            {
                arguments = attrs.value("input.value");
                weak = *arguments != Value::None;
            }
            self.execution(
                span,
                or(attrs.value("tool.name"), attrs.value("tool_call.function.name")),
                or(attrs.value("tool_call.id"), attrs.value("tool.id")),
                arguments,
                attrs.value("output.value"),
                false,
                weak,
                false,
            );
        } else if *kind == Value::None && attrs.contains("tool.name") {
            convention = Some(Convention::Plain);
            let result = attrs.value("tool.result");
            self.execution(
                span,
                attrs.value("tool.name"),
                attrs.value("tool.call.id"),
                attrs.value("tool.arguments"),
                if *result == Value::None { attrs.value("tool.output") } else { result },
                false,
                false,
                false,
            );
            if *result != Value::None && attrs.contains("tool.output") {
                self.unmapped(span, "tool.output", "the call's result is taken from tool.result");
            }
        }
        self.unread(span, convention);
        if let Some(text) = attrs.get_str("gen_ai.output.messages") {
            self.genai_output(span, text);
        } else if attrs.iter().any(|(k, _)| k.starts_with("llm.output_messages.")) {
            self.openinference_output(span);
        }
        if let Some(text) = attrs.get_str("gen_ai.input.messages") {
            self.genai_input(span, text);
        }
        if attrs.iter().any(|(k, _)| k.starts_with("llm.input_messages.")) {
            self.openinference_input(span);
        }
    }

    /// Count what a span carries that no Trace field holds (never "everything mapped").
    fn unread(&mut self, span: &SpanRecord, convention: Option<Convention>) {
        let aggregate = self.above_model.contains(&span.key());
        for (key, _) in span.attrs.iter() {
            if usage::USAGE_PREFIXES.iter().any(|p| key.starts_with(p)) {
                if aggregate {
                    self.unmapped(span, key, "usage of a span with model calls below it");
                } else if !usage::is_read_key(key) {
                    self.unmapped(span, key, "no ModelCall field holds it");
                }
            } else if let Some(c) = convention {
                if TOOL_NAMESPACES.iter().any(|p| key.starts_with(p))
                    && !c.reads(key)
                    && !DESCRIPTIVE.contains(&key.as_str())
                {
                    let why = format!("not read for a {} tool span", c.name());
                    self.unmapped(span, key, &why);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn execution(
        &mut self,
        span: &SpanRecord,
        name: &Value,
        call_id: &Value,
        arguments: &Value,
        result: &Value,
        error: bool,
        weak_arguments: bool,
        mcp: bool,
    ) {
        let Some(name) = name.nonempty_str() else {
            let place = format!("{} span {}", self.place, span.span_id);
            self.report.add(TOOL_CALL_WITHOUT_NAME, &place, &span.name);
            return;
        };
        self.executed.push(Call {
            name: name.to_string(),
            arguments: (*arguments != Value::None).then(|| text_or_json(arguments)),
            call_id: id_text(call_id),
            time: span.start,
            order: span.order,
            sub: 0,
            result: (*result != Value::None).then(|| text_or_json(result)),
            error: error || span.status_code == super::decode::STATUS_CODE_ERROR,
            start: span.start,
            end: span.end,
            weak_arguments,
            span: Some(span.key()),
            anchor: (span.start, span.order),
            mcp,
            server: String::new(),
        });
    }

    /// A call the model asked for; `source` is its LLM span, when known.
    fn request(
        &mut self,
        name: Option<&Value>,
        call_id: Option<&Value>,
        arguments: Option<&Value>,
        time: u64,
        order: usize,
        source: Option<&SpanRecord>,
    ) {
        let Some(name) = name.and_then(Value::nonempty_str) else {
            let place = format!("{} LLM output", self.place);
            self.report.add(TOOL_CALL_WITHOUT_NAME, &place, "tool call");
            return;
        };
        let arguments = arguments.unwrap_or(&Value::None);
        self.requested.push(Call {
            name: name.to_string(),
            arguments: (*arguments != Value::None).then(|| text_or_json(arguments)),
            call_id: id_text(call_id.unwrap_or(&Value::None)),
            time,
            order,
            sub: self.requested.len(),
            span: source.map(SpanRecord::key),
            anchor: source.map_or((time, order), |s| (s.start, s.order)),
            ..Call::default()
        });
    }

    fn parse(&mut self, text: &str, span: &SpanRecord, key: &str) -> Option<Value> {
        match pyvalue::loads(text) {
            Ok(value) => Some(value),
            Err(e) => {
                let place = format!("{} span {}", self.place, span.span_id);
                self.report.add(INVALID_ATTRIBUTE_JSON, &place, &format!("{key}: {e}"));
                None
            }
        }
    }

    fn genai_output(&mut self, span: &SpanRecord, text: &str) {
        let Some(Value::List(messages)) = self.parse(text, span, "gen_ai.output.messages") else {
            return;
        };
        self.spans_with_outputs.insert(span.span_id.clone());
        for message in &messages {
            let Value::Dict(message) = message else { continue };
            let mut texts = String::new();
            let mut any = false;
            for part in list(message.get("parts")) {
                let Value::Dict(part) = part else { continue };
                if is_str(part.get("type"), "tool_call") {
                    self.request(
                        part.get("name"),
                        part.get("id"),
                        part.get("arguments"),
                        span.end,
                        span.order,
                        Some(span),
                    );
                } else if is_str(part.get("type"), "text") {
                    if let Some(Value::Str(content)) = part.get("content") {
                        texts.push_str(content);
                        any = true;
                    }
                }
            }
            if any {
                self.answers.push((span.end, span.order, texts, Some(span.key())));
            }
        }
    }

    fn genai_input(&mut self, span: &SpanRecord, text: &str) {
        let messages = self.parse(text, span, "gen_ai.input.messages");
        self.users(span.key());
        let Some(Value::List(messages)) = messages else { return };
        for message in &messages {
            let mut texts = String::new();
            let mut any_text = false;
            let mut responses = false;
            for part in list(dict_get(message, "parts")) {
                let Value::Dict(part) = part else { continue };
                if is_str(part.get("type"), "tool_call_response") {
                    responses = true;
                    if let Some(call_id) = part.get("id").and_then(Value::nonempty_str) {
                        if let Some(response) = part.get("response") {
                            let text = text_or_json(response);
                            self.result(call_id, &span.span_id, text);
                        }
                    }
                } else if is_str(part.get("type"), "text") {
                    if let Some(Value::Str(content)) = part.get("content") {
                        texts.push_str(content);
                        any_text = true;
                    }
                }
            }
            // A user message that only carries tool results continues the turn.
            let is_user = is_str(dict_get(message, "role"), "user");
            if is_user && (!responses || any_text) {
                self.users(span.key()).push(texts);
            }
        }
    }

    fn openinference_output(&mut self, span: &SpanRecord) {
        self.spans_with_outputs.insert(span.span_id.clone());
        let mut found: Vec<((Index, Index), pyvalue::Dict)> = Vec::new();
        let mut contents: Vec<(Index, pyvalue::Dict)> = Vec::new();
        for (key, value) in span.attrs.iter() {
            if let Some(m) = OI_OUTPUT_CALL.captures(key) {
                let at = (index_key(&m[1]), index_key(&m[2]));
                slot(&mut found, at).insert(m[3].to_string(), value.clone());
                continue;
            }
            if let Some(m) = OI_OUTPUT_CONTENT.captures(key) {
                slot(&mut contents, index_key(&m[1])).insert(m[2].to_string(), value.clone());
            }
        }
        found.sort_by(|x, y| x.0.cmp(&y.0));
        contents.sort_by(|x, y| x.0.cmp(&y.0));
        for (_, fields) in &found {
            self.request(
                fields.get("function.name"),
                fields.get("id"),
                fields.get("function.arguments"),
                span.end,
                span.order,
                Some(span),
            );
        }
        for (_, message) in &contents {
            let assistant = message.get("role").is_none_or(|r| is_str(Some(r), "assistant"));
            if let (true, Some(Value::Str(content))) = (assistant, message.get("content")) {
                if !content.is_empty() {
                    self.answers.push((span.end, span.order, content.clone(), Some(span.key())));
                }
            }
        }
    }

    fn openinference_input(&mut self, span: &SpanRecord) {
        let mut messages: Vec<(Index, pyvalue::Dict)> = Vec::new();
        for (key, value) in span.attrs.iter() {
            if let Some(m) = OI_INPUT_MESSAGE.captures(key) {
                slot(&mut messages, index_key(&m[1])).insert(m[2].to_string(), value.clone());
            }
        }
        messages.sort_by(|x, y| x.0.cmp(&y.0));
        self.users(span.key());
        for (_, message) in &messages {
            let role = message.get("role");
            let call_id = message.get("tool_call_id").and_then(Value::nonempty_str);
            if let (true, Some(call_id)) = (is_str(role, "tool"), call_id) {
                let content = message.get("content").unwrap_or(&Value::Str(String::new())).clone();
                self.result(call_id, &span.span_id, text_or_json(&content));
            } else if is_str(role, "user") {
                let content = message.get("content").and_then(Value::as_str).unwrap_or("");
                self.users(span.key()).push(content.to_string());
            }
        }
    }

    /// One `gen_ai.*` log event; `source` is the span it was logged in, when exported.
    fn event(&mut self, event: &EventRecord, span_order: usize, source: Option<&SpanRecord>) {
        let empty = Value::Dict(pyvalue::Dict::default());
        let body = if matches!(event.body, Value::Dict(_)) { &event.body } else { &empty };
        match event.name.as_str() {
            "gen_ai.user.message" => {
                let content = dict_get(body, "content").and_then(Value::as_str).unwrap_or("");
                let key = (event.trace_id.clone(), event.span_id.clone());
                self.users(key).push(content.to_string());
            }
            "gen_ai.choice" => {
                if self.spans_with_outputs.contains(&event.span_id) {
                    // The same response is already on the span (gen_ai.output.messages).
                    return;
                }
                let Some(message @ Value::Dict(_)) = dict_get(body, "message") else { return };
                for tool_call in list(dict_get(message, "tool_calls")) {
                    if let Some(function @ Value::Dict(_)) = dict_get(tool_call, "function") {
                        self.request(
                            dict_get(function, "name"),
                            dict_get(tool_call, "id"),
                            dict_get(function, "arguments"),
                            event.time,
                            span_order,
                            source,
                        );
                    }
                }
                if let Some(Value::Str(content)) = dict_get(message, "content") {
                    if !content.is_empty() {
                        let answered_in = source.map(SpanRecord::key);
                        self.answers.push((event.time, span_order, content.clone(), answered_in));
                    }
                }
            }
            "gen_ai.tool.message" => {
                if let Some(call_id) = dict_get(body, "id").and_then(Value::nonempty_str) {
                    if let Some(content) = dict_get(body, "content") {
                        let source = format!("event {}", event.span_id);
                        self.result(call_id, &source, text_or_json(content));
                    }
                }
            }
            _ => {}
        }
    }
}

/// The tool of an MCP `tools/call` span without `gen_ai.tool.name`.
fn mcp_tool_name(span: &SpanRecord) -> Option<String> {
    if let Some(name) = span.attrs.get("mcp.tool.name").and_then(Value::nonempty_str) {
        return Some(name.to_string());
    }
    MCP_SPAN_NAME.captures(&span.name).map(|m| m[1].to_string())
}

/// Which MCP server the spans of one MCP call name (`group[0]` is the outermost).
fn server_of(group: &[&SpanRecord]) -> String {
    for span in group {
        if let Some(name) = span.attrs.get("mcp.server.name").and_then(Value::nonempty_str) {
            return name.to_string();
        }
    }
    for span in group {
        if let Some(address) = span.attrs.get("server.address").and_then(Value::nonempty_str) {
            return match span.attrs.get("server.port") {
                Some(Value::Int(port)) => format!("{address}:{port}"),
                _ => address.to_string(),
            };
        }
    }
    let caller = group[0].resource.value("service.name");
    for span in group {
        if let Some(service) = span.resource.get("service.name").and_then(Value::nonempty_str) {
            let differs = caller.as_str() != Some(service);
            if span.kind == super::decode::SPAN_KIND_SERVER && differs {
                return service.to_string();
            }
        }
    }
    String::new()
}

fn same_arguments(left: Option<&str>, right: Option<&str>) -> bool {
    let (Some(left), Some(right)) = (left, right) else { return true };
    if left == right {
        return true;
    }
    match (pyvalue::loads(left), pyvalue::loads(right)) {
        (Ok(a), Ok(b)) => pyvalue::py_eq(&a, &b),
        _ => false,
    }
}

/// Both unrecorded, or equal JSON values (the same call reported twice).
fn equal_arguments(left: Option<&str>, right: Option<&str>) -> bool {
    if left.is_none() || right.is_none() {
        return left.is_none() && right.is_none();
    }
    same_arguments(left, right)
}

/// Requested calls with one id are one call only when name and arguments agree too.
fn dedupe_requested(requested: Vec<Call>, report: &mut Report) -> Vec<Call> {
    let mut kept: Vec<Call> = Vec::new();
    let mut by_id: HashMap<String, Vec<usize>> = HashMap::new();
    for call in requested {
        let same_id: &[usize] =
            if call.call_id.is_empty() { &[] } else { by_id.get(&call.call_id).map_or(&[], |v| v) };
        if same_id.iter().any(|&i| {
            kept[i].name == call.name
                && equal_arguments(kept[i].arguments.as_deref(), call.arguments.as_deref())
        }) {
            report.merged_duplicates += 1;
            continue;
        }
        if !same_id.is_empty() {
            report.id_collisions += 1;
        }
        by_id.entry(call.call_id.clone()).or_default().push(kept.len());
        kept.push(call);
    }
    kept
}

/// One call per MCP tool call: an execution span under another of the same tool, one of them
/// MCP, is the same call; the outermost is kept, the inner ones fill what it lacks.
fn merge_mcp(ex: &mut Extractor<'_>, spans: &HashMap<SpanKey, usize>, all: &[SpanRecord]) {
    let mut by_span: HashMap<SpanKey, usize> = HashMap::new();
    for (i, call) in ex.executed.iter().enumerate() {
        if let Some(key) = &call.span {
            by_span.insert(key.clone(), i);
        }
    }
    let mut into: Vec<(SpanKey, SpanKey)> = Vec::new();
    let mut into_map: HashMap<SpanKey, SpanKey> = HashMap::new();
    for call in &ex.executed {
        let Some(key) = &call.span else { continue };
        let outer = ex.tree.ancestors(key).into_iter().find(|k| by_span.contains_key(*k)).cloned();
        if let Some(outer) = outer {
            let outer_call = &ex.executed[by_span[&outer]];
            if outer_call.name == call.name && (call.mcp || outer_call.mcp) {
                if !into_map.contains_key(key) {
                    into.push((key.clone(), outer.clone()));
                }
                into_map.insert(key.clone(), outer);
            }
        }
    }
    let mut members: Vec<(SpanKey, Vec<(usize, usize)>)> = Vec::new();
    for (key, _) in &into {
        let (mut root, mut depth) = (key.clone(), 0usize);
        let mut seen: HashSet<SpanKey> = [key.clone()].into_iter().collect();
        while let Some(next) = into_map.get(&root) {
            if seen.contains(next) {
                break;
            }
            root = next.clone();
            depth += 1;
            seen.insert(root.clone());
        }
        let member = (depth, by_span[key]);
        slot(&mut members, root).push(member);
    }
    for (root_key, inner) in &mut members {
        inner.sort_by_key(|m| m.0);
        let root = by_span[root_key];
        let mut group_spans = vec![ex.executed[root].span.clone()];
        for &(_, other) in inner.iter() {
            ex.report.merged_duplicates += 1;
            let other = ex.executed[other].clone();
            let call = &mut ex.executed[root];
            if call.arguments.is_none() || (call.weak_arguments && other.arguments.is_some()) {
                call.arguments = other.arguments;
                call.weak_arguments = other.weak_arguments;
            }
            if call.result.is_none() {
                call.result = other.result;
            }
            if call.call_id.is_empty() {
                call.call_id = other.call_id;
            }
            call.error = call.error || other.error;
            call.mcp = true;
            group_spans.push(other.span);
        }
        let group: Vec<&SpanRecord> =
            group_spans.iter().flatten().map(|k| &all[spans[k]]).collect();
        ex.executed[root].server = server_of(&group);
    }
    ex.executed.retain(|c| c.span.as_ref().is_none_or(|k| !into_map.contains_key(k)));
    let roots: HashSet<&SpanKey> = members.iter().map(|(k, _)| k).collect();
    for call in &mut ex.executed {
        if let (true, Some(key)) = (call.mcp, &call.span) {
            if !roots.contains(key) {
                call.server = server_of(&[&all[spans[key]]]);
            }
        }
    }
}

/// Dedupe: each executed call absorbs at most one LLM-reported call (see trace-formats.md).
fn merge(ex: &mut Extractor<'_>, window_ns: i128) -> Vec<Call> {
    let mut unmatched = dedupe_requested(std::mem::take(&mut ex.requested), ex.report);
    let mut executed_ids: HashSet<String> = HashSet::new();
    let mut executed = std::mem::take(&mut ex.executed);
    for call in &mut executed {
        if !call.call_id.is_empty() && executed_ids.contains(&call.call_id) {
            ex.report.id_collisions += 1;
        }
        executed_ids.insert(call.call_id.clone());
        let mut found = None;
        if !call.call_id.is_empty() {
            found = unmatched.iter().position(|r| {
                r.call_id == call.call_id
                    && r.name == call.name
                    && same_arguments(r.arguments.as_deref(), call.arguments.as_deref())
            });
        }
        if found.is_none() {
            let start = i128::from(call.start);
            found = unmatched
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.name == call.name
                        && !(!call.call_id.is_empty() && !r.call_id.is_empty())
                        && i128::from(r.time) <= start + SKEW_NS
                        && start - i128::from(r.time) <= window_ns
                        && same_arguments(r.arguments.as_deref(), call.arguments.as_deref())
                })
                .min_by_key(|(i, r)| (r.time, r.order, r.sub, *i))
                .map(|(i, _)| i);
        }
        let Some(at) = found else { continue };
        let matched = unmatched.remove(at);
        ex.report.merged_duplicates += 1;
        let truthy = matched.arguments.as_deref().is_some_and(|a| !a.is_empty());
        if call.arguments.is_none() || (call.weak_arguments && truthy) {
            call.arguments = matched.arguments;
        }
        if call.call_id.is_empty() {
            call.call_id = matched.call_id;
        }
    }
    let mut calls = executed;
    calls.extend(unmatched);
    calls.sort_by_key(|c| (c.time, c.order, c.sub));
    pair_results(&mut calls, &ex.results);
    calls
}

/// The k-th call (in time order) with an id takes the k-th result of that id.
fn pair_results(calls: &mut [Call], results: &Results) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for call in calls {
        if call.call_id.is_empty() {
            continue;
        }
        let Some((_, by_source)) = results.iter().find(|(id, _)| *id == call.call_id) else {
            continue;
        };
        let k = seen.entry(call.call_id.clone()).or_insert(0);
        let history = by_source
            .iter()
            .map(|(_, h)| h)
            .reduce(|best, h| if h.len() > best.len() { h } else { best })
            .expect("a result has a source");
        if call.result.is_none() && *k < history.len() {
            call.result = Some(history[*k].clone());
        }
        *k += 1;
    }
}

/// User turns from the root agent's model inputs (each new user message starts a turn).
#[derive(Default)]
struct Turns {
    user_inputs: HashMap<usize, String>,
    marks: Vec<(u64, usize, usize)>,
}

impl Turns {
    fn model_input(&mut self, start: u64, order: usize, texts: &[String]) {
        if texts.is_empty() {
            return;
        }
        for (i, text) in texts.iter().enumerate() {
            self.user_inputs.entry(i + 1).or_insert_with(|| text.clone());
        }
        self.marks.push((start, order, texts.len()));
    }

    fn freeze(&mut self) {
        self.marks.sort_unstable();
        let mut highest = 0;
        for mark in &mut self.marks {
            highest = highest.max(mark.2);
            mark.2 = highest;
        }
    }

    fn count(&self) -> usize {
        self.marks.last().map_or(0, |m| m.2)
    }

    fn turn_at(&self, start: u64, order: usize) -> usize {
        if self.marks.is_empty() {
            return 0;
        }
        let index = self.marks.partition_point(|m| (m.0, m.1) <= (start, order));
        if index == 0 {
            1
        } else {
            self.marks[index - 1].2
        }
    }
}

/// One group to its Trace (orders renumbered within the group first).
pub(crate) fn trace(mut group: Group, report: &mut Report, window_ns: i128) -> pb::Trace {
    group.spans.sort_by_key(|s| s.order);
    for (i, span) in group.spans.iter_mut().enumerate() {
        span.order = i;
    }
    group.events.sort_by_key(|e| e.order);
    for (i, event) in group.events.iter_mut().enumerate() {
        event.order = i;
    }
    let tree = SpanTree::new(&group.spans);
    let mut above_model: HashSet<SpanKey> = HashSet::new();
    for span in &group.spans {
        if usage::is_model_span(&span.attrs) {
            for ancestor in tree.ancestors(&span.key()) {
                if above_model.contains(ancestor) {
                    break; // marked from another model span, and so is all above it
                }
                above_model.insert(ancestor.clone());
            }
        }
    }
    let mut spans = group.spans;
    spans.sort_by_key(|s| (s.start, s.order));
    let mut ex = Extractor {
        report,
        place: format!("trace {}", group.key),
        tree,
        executed: Vec::new(),
        requested: Vec::new(),
        results: Vec::new(),
        answers: Vec::new(),
        spans_with_outputs: HashSet::new(),
        user_texts: Vec::new(),
        user_index: HashMap::new(),
        model_spans: Vec::new(),
        above_model,
    };
    for at in 0..spans.len() {
        ex.span(&spans, at);
    }
    let mut by_key: HashMap<SpanKey, usize> = HashMap::with_capacity(spans.len());
    let mut order_of_span: HashMap<&str, usize> = HashMap::with_capacity(spans.len());
    for (i, span) in spans.iter().enumerate() {
        by_key.insert(span.key(), i);
        order_of_span.insert(&span.span_id, span.order);
    }
    let mut events = group.events;
    events.sort_by_key(|e| (e.time, e.order));
    for event in &events {
        let order = order_of_span
            .get(event.span_id.as_str())
            .copied()
            .unwrap_or(order_of_span.len() + event.order);
        let source =
            by_key.get(&(event.trace_id.clone(), event.span_id.clone())).map(|&i| &spans[i]);
        ex.event(event, order, source);
    }
    merge_mcp(&mut ex, &by_key, &spans);
    let calls = merge(&mut ex, window_ns);
    let mut turns = Turns::default();
    for (key, texts) in &ex.user_texts {
        if let Some(&at) = by_key.get(key) {
            if ex.tree.agent(key).is_empty() {
                turns.model_input(spans[at].start, spans[at].order, texts);
            }
        }
    }
    turns.freeze();
    let mut answers = std::mem::take(&mut ex.answers);
    answers.sort_by_key(|a| (a.0, a.1));
    let mut out = pb::Trace {
        id: group.key.clone(),
        final_answer: answers.last().map(|a| a.2.clone()).unwrap_or_default(),
        ..pb::Trace::default()
    };
    for call in calls {
        let agent = call.span.as_ref().map(|k| ex.tree.agent(k)).unwrap_or_default();
        out.calls.push(pb::ToolCall {
            name: call.name,
            arguments_json: call.arguments,
            result: call.result,
            error: call.error,
            id: call.call_id,
            start_time_unix_nano: call.start,
            end_time_unix_nano: call.end,
            turn: turns.turn_at(call.anchor.0, call.anchor.1) as u32,
            agent,
            server: call.server,
        });
    }
    add_model_calls(&mut out, &mut ex, &spans, &turns);
    let mut said: HashMap<usize, String> = HashMap::new();
    for (time, order, text, answered_in) in answers {
        match answered_in {
            None => {
                said.insert(turns.turn_at(time, order), text);
            }
            Some(key) if ex.tree.agent(&key).is_empty() => {
                let span = &spans[by_key[&key]];
                said.insert(turns.turn_at(span.start, span.order), text);
            }
            Some(_) => {}
        }
    }
    for number in 1..=turns.count() {
        out.turns.push(pb::Turn {
            user_input: turns.user_inputs.get(&number).cloned().unwrap_or_default(),
            final_answer: said.get(&number).cloned().unwrap_or_default(),
        });
    }
    out.metadata.insert("otel.trace_id".into(), group.trace_ids.join(","));
    ex.report.traces += 1;
    ex.report.calls += out.calls.len() as u64;
    ex.report.model_calls += out.model_calls.len() as u64;
    out
}

/// One `ModelCall` per LLM span (not the spans above others, whose usage is a sum).
fn add_model_calls(
    out: &mut pb::Trace,
    ex: &mut Extractor<'_>,
    spans: &[SpanRecord],
    turns: &Turns,
) {
    for &at in &ex.model_spans.clone() {
        let span = &spans[at];
        let found = usage::read_usage(&span.attrs);
        for (key, why) in &found.problems {
            ex.unmapped(span, key, why);
        }
        if !found.recorded {
            let place = format!("{} span {}", ex.place, span.span_id);
            let detail = format!("{}: counted with 0 tokens", span.name);
            ex.report.add(MODEL_CALL_WITHOUT_USAGE, &place, &detail);
        }
        out.model_calls.push(pb::ModelCall {
            model: found.model,
            input_tokens: found.input_tokens,
            output_tokens: found.output_tokens,
            cost: found.cost,
            turn: turns.turn_at(span.start, span.order) as u32,
            agent: ex.tree.agent(&span.key()),
            start_time_unix_nano: span.start,
            end_time_unix_nano: span.end,
        });
    }
}
