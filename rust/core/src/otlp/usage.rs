//! Model calls (SPEC §10 `model_calls`) from the LLM spans of a trace group.
use super::pyvalue::{repr, Value};
use super::record::Attrs;

/// Token counts, first key present wins: the `GenAI` conventions (and their pre-1.27 names),
/// then `OpenInference`'s.
const INPUT_TOKEN_KEYS: [&str; 3] =
    ["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"];
const OUTPUT_TOKEN_KEYS: [&str; 3] =
    ["gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion"];
/// A total is the sum of the two above: read (so not reported), never stored.
const TOTAL_TOKEN_KEYS: [&str; 2] = ["gen_ai.usage.total_tokens", "llm.token_count.total"];
const COST_KEYS: [&str; 2] = ["gen_ai.usage.cost", "llm.cost.total"];
const MODEL_KEYS: [&str; 3] = ["gen_ai.response.model", "gen_ai.request.model", "llm.model_name"];
pub(crate) const USAGE_PREFIXES: [&str; 3] = ["gen_ai.usage.", "llm.token_count.", "llm.cost."];
const MODEL_OPERATIONS: [&str; 3] = ["chat", "text_completion", "generate_content"];

pub(crate) fn is_read_key(key: &str) -> bool {
    [&INPUT_TOKEN_KEYS[..], &OUTPUT_TOKEN_KEYS, &TOTAL_TOKEN_KEYS, &COST_KEYS]
        .iter()
        .any(|keys| keys.contains(&key))
}

fn carries_usage(attrs: &Attrs) -> bool {
    [&INPUT_TOKEN_KEYS[..], &OUTPUT_TOKEN_KEYS, &TOTAL_TOKEN_KEYS]
        .iter()
        .any(|keys| keys.iter().any(|k| attrs.contains(k)))
}

/// An LLM call: a `GenAI` model operation, an `OpenInference` LLM span, or token counts.
pub(crate) fn is_model_span(attrs: &Attrs) -> bool {
    attrs.get_str("gen_ai.operation.name").is_some_and(|op| MODEL_OPERATIONS.contains(&op))
        || attrs.get_str("openinference.span.kind") == Some("LLM")
        || carries_usage(attrs)
}

pub(crate) struct Usage {
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: Option<f64>,
    pub recorded: bool,
    pub problems: Vec<(String, String)>,
}

/// A token count: a non-negative integer, also as an integral double or decimal text.
fn count(value: &Value) -> Option<u64> {
    match value {
        Value::Int(s) => s.parse::<u64>().ok(),
        Value::Float(f) if f.is_finite() && f.fract() == 0.0 && *f >= 0.0 => Some(*f as u64),
        Value::Str(s) => {
            let t = s.trim_matches(super::tree::py_space);
            (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok())?
        }
        _ => None,
    }
}

fn first<'a>(attrs: &'a Attrs, keys: &[&'static str]) -> Option<(&'static str, &'a Value)> {
    keys.iter().find_map(|&k| attrs.get(k).map(|v| (k, v)))
}

/// Model, token counts and cost of one LLM span.
pub(crate) fn read_usage(attrs: &Attrs) -> Usage {
    let mut problems = Vec::new();
    let mut counts = [None, None];
    for (slot, keys) in counts.iter_mut().zip([&INPUT_TOKEN_KEYS, &OUTPUT_TOKEN_KEYS]) {
        if let Some((key, value)) = first(attrs, keys) {
            *slot = count(value);
            if slot.is_none() {
                problems.push((key.to_string(), format!("not a token count: {}", repr(value))));
            }
        }
    }
    if let Some((key, _)) = first(attrs, &TOTAL_TOKEN_KEYS) {
        if counts == [None, None] {
            let why = "a total without the input/output split it is the sum of";
            problems.push((key.to_string(), why.to_string()));
        }
    }
    let mut cost = None;
    if let Some((key, raw)) = first(attrs, &COST_KEYS) {
        match raw {
            Value::Int(s) => cost = s.parse::<f64>().ok(),
            Value::Float(f) if f.is_finite() => cost = Some(*f),
            _ => problems.push((key.to_string(), format!("not a finite cost: {}", repr(raw)))),
        }
    }
    let model = MODEL_KEYS.iter().find_map(|k| attrs.get_str(k)).unwrap_or("").to_string();
    Usage {
        model,
        input_tokens: counts[0].unwrap_or(0),
        output_tokens: counts[1].unwrap_or(0),
        cost,
        recorded: counts != [None, None],
        problems,
    }
}
