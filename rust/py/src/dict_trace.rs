//! A trace dict (protobuf-JSON mapping) encoded as `Trace` bytes without a Python message.
//!
//! Only the plain shapes are taken: known keys (proto or JSON name, each field once), `str`
//! strings, `bool` error, non-negative `int` times, tokens and turns, a finite `float` cost,
//! `list`s of call, model call and turn dicts, a `dict` of `str` metadata. Anything else (`None`, numeric strings, unknown keys, lone surrogates, subclasses)
//! gives `None`, and the caller takes the Python path, which accepts or names the problem exactly
//! as before. The bytes equal `Trace.SerializeToString(deterministic=True)`: fields in number
//! order, defaults left out, `optional` fields written when set, map entries in upb's order.
use std::ops::Range;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

const LEN: u64 = 2;
const VARINT: u64 = 0;
const FIXED64: u64 = 1;

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn bytes_field(out: &mut Vec<u8>, number: u64, value: &[u8]) {
    varint(out, number << 3 | LEN);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn varint_field(out: &mut Vec<u8>, number: u64, value: u64) {
    varint(out, number << 3 | VARINT);
    varint(out, value);
}

/// An exact `str` as UTF-8 (`None` for a subclass or a lone surrogate).
fn text<'a>(value: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    value.downcast_exact::<PyString>().ok()?.to_str().ok()
}

/// An exact non-negative `int` below 2^64 (`bool` is not one).
fn uint(value: &Bound<'_, PyAny>) -> Option<u64> {
    value.downcast_exact::<PyInt>().ok()?.extract().ok()
}

/// Sets `slot` once; a field given twice (`final_answer` and `finalAnswer`) declines.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// `trace` as serialized `Trace` bytes, or `None` when the Python path must decide.
pub fn encode(trace: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    encode_into(&mut out, trace)?;
    Some(out)
}

/// Appends `trace`'s `Trace` bytes to `out`; on `None`, `out` is left as it was.
fn encode_into(out: &mut Vec<u8>, trace: &Bound<'_, PyAny>) -> Option<()> {
    let start = out.len();
    let done = encode_fields(out, trace);
    if done.is_none() {
        out.truncate(start);
    }
    done
}

fn encode_fields(out: &mut Vec<u8>, trace: &Bound<'_, PyAny>) -> Option<()> {
    let dict = trace.downcast_exact::<PyDict>().ok()?;
    let (mut id, mut calls, mut answer, mut metadata) = (None, None, None, None);
    let (mut model_calls, mut turns) = (None, None);
    for (key, value) in dict.iter() {
        match text(&key)? {
            "id" => once(&mut id, value)?,
            "calls" => once(&mut calls, value)?,
            "final_answer" | "finalAnswer" => once(&mut answer, value)?,
            "metadata" => once(&mut metadata, value)?,
            "model_calls" | "modelCalls" => once(&mut model_calls, value)?,
            "turns" => once(&mut turns, value)?,
            _ => return None,
        }
    }
    if let Some(id) = id {
        string_field(out, 1, &id)?;
    }
    if let Some(calls) = calls {
        let mut call = Vec::with_capacity(128);
        for item in calls.downcast_exact::<PyList>().ok()?.iter() {
            call.clear();
            encode_call(&mut call, &item)?;
            bytes_field(out, 2, &call);
        }
    }
    if let Some(answer) = answer {
        string_field(out, 3, &answer)?;
    }
    if let Some(metadata) = metadata {
        encode_metadata(out, &metadata)?;
    }
    for (number, list, encode) in [
        (5, model_calls, encode_model_call as fn(&mut Vec<u8>, &Bound<'_, PyAny>) -> Option<()>),
        (6, turns, encode_turn),
    ] {
        if let Some(list) = list {
            let mut item_bytes = Vec::with_capacity(64);
            for item in list.downcast_exact::<PyList>().ok()?.iter() {
                item_bytes.clear();
                encode(&mut item_bytes, &item)?;
                bytes_field(out, number, &item_bytes);
            }
        }
    }
    Some(())
}

/// A proto3 integer (left out when zero); `max` bounds it (`u32::MAX` for a uint32).
fn uint_field(out: &mut Vec<u8>, number: u64, value: &Bound<'_, PyAny>, max: u64) -> Option<()> {
    let value = uint(value).filter(|&v| v <= max)?;
    if value != 0 {
        varint_field(out, number, value);
    }
    Some(())
}

/// The fields of one dict, by number (1-based), each at most once; `None` for an unknown key.
fn fields<'py, const N: usize>(
    item: &Bound<'py, PyAny>,
    number: impl Fn(&str) -> Option<usize>,
) -> Option<[Option<Bound<'py, PyAny>>; N]> {
    let dict = item.downcast_exact::<PyDict>().ok()?;
    let mut fields: [Option<Bound<'py, PyAny>>; N] = std::array::from_fn(|_| None);
    for (key, value) in dict.iter() {
        once(fields.get_mut(number(text(&key)?)? - 1)?, value)?;
    }
    Some(fields)
}

/// A `ModelCall` (SPEC §10).
fn encode_model_call(out: &mut Vec<u8>, item: &Bound<'_, PyAny>) -> Option<()> {
    let [model, input, output, cost, turn, agent, start, end] = fields::<8>(item, |key| {
        Some(match key {
            "model" => 1,
            "input_tokens" | "inputTokens" => 2,
            "output_tokens" | "outputTokens" => 3,
            "cost" => 4,
            "turn" => 5,
            "agent" => 6,
            "start_time_unix_nano" | "startTimeUnixNano" => 7,
            "end_time_unix_nano" | "endTimeUnixNano" => 8,
            _ => return None,
        })
    })?;
    if let Some(model) = model {
        string_field(out, 1, &model)?;
    }
    for (number, value) in [(2, input), (3, output)] {
        if let Some(value) = value {
            uint_field(out, number, &value, u64::MAX)?;
        }
    }
    if let Some(cost) = cost {
        // `optional double`: written whenever set. Ints, `None` and non-finite values are
        // left to the Python path.
        let cost = cost.downcast_exact::<PyFloat>().ok()?.value();
        if !cost.is_finite() {
            return None;
        }
        varint(out, 4 << 3 | FIXED64);
        out.extend_from_slice(&cost.to_le_bytes());
    }
    if let Some(turn) = turn {
        uint_field(out, 5, &turn, u32::MAX.into())?;
    }
    if let Some(agent) = agent {
        string_field(out, 6, &agent)?;
    }
    for (number, value) in [(7, start), (8, end)] {
        if let Some(value) = value {
            uint_field(out, number, &value, u64::MAX)?;
        }
    }
    Some(())
}

/// A `Turn` (SPEC §10).
fn encode_turn(out: &mut Vec<u8>, item: &Bound<'_, PyAny>) -> Option<()> {
    let [user_input, answer] = fields::<2>(item, |key| match key {
        "user_input" | "userInput" => Some(1),
        "final_answer" | "finalAnswer" => Some(2),
        _ => None,
    })?;
    for (number, value) in [(1, user_input), (2, answer)] {
        if let Some(value) = value {
            string_field(out, number, &value)?;
        }
    }
    Some(())
}

/// A proto3 `string` (left out when empty).
fn string_field(out: &mut Vec<u8>, number: u64, value: &Bound<'_, PyAny>) -> Option<()> {
    let value = text(value)?;
    if !value.is_empty() {
        bytes_field(out, number, value.as_bytes());
    }
    Some(())
}

fn encode_call(out: &mut Vec<u8>, call: &Bound<'_, PyAny>) -> Option<()> {
    let fields = fields::<10>(call, |key| {
        Some(match key {
            "name" => 1,
            "arguments_json" | "argumentsJson" => 2,
            "result" => 3,
            "error" => 4,
            "id" => 5,
            "start_time_unix_nano" | "startTimeUnixNano" => 6,
            "end_time_unix_nano" | "endTimeUnixNano" => 7,
            "turn" => 8,
            "agent" => 9,
            "server" => 10,
            _ => return None,
        })
    })?;
    let [name, arguments, result, error, id, start, end, turn, agent, server] = &fields;
    if let Some(name) = name {
        string_field(out, 1, name)?;
    }
    // `optional string`: written whenever set, even empty.
    for (number, value) in [(2, arguments), (3, result)] {
        if let Some(value) = value {
            bytes_field(out, number, text(value)?.as_bytes());
        }
    }
    if let Some(error) = error {
        if error.downcast_exact::<PyBool>().ok()?.is_true() {
            varint_field(out, 4, 1);
        }
    }
    if let Some(id) = id {
        string_field(out, 5, id)?;
    }
    for (number, value) in [(6, start), (7, end)] {
        if let Some(value) = value {
            uint_field(out, number, value, u64::MAX)?;
        }
    }
    if let Some(turn) = turn {
        uint_field(out, 8, turn, u32::MAX.into())?;
    }
    for (number, value) in [(9, agent), (10, server)] {
        if let Some(value) = value {
            string_field(out, number, value)?;
        }
    }
    Some(())
}

/// The key order of upb's deterministic map encoding (the protobuf runtime Python uses): the
/// common prefix by bytes, then the longer key first (`"ab"` before `"a"`).
fn upb_key_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let common = a.len().min(b.len());
    a[..common].cmp(&b[..common]).then(b.len().cmp(&a.len()))
}

/// `map<string, string>`: one entry message per key, in byte order of the keys.
fn encode_metadata(out: &mut Vec<u8>, metadata: &Bound<'_, PyAny>) -> Option<()> {
    let dict = metadata.downcast_exact::<PyDict>().ok()?;
    let mut entries: Vec<(&str, &str)> = Vec::with_capacity(dict.len());
    let items: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = dict.iter().collect();
    for (key, value) in &items {
        entries.push((text(key)?, text(value)?));
    }
    entries.sort_unstable_by(|a, b| upb_key_order(a.0.as_bytes(), b.0.as_bytes()));
    let mut entry = Vec::new();
    for (key, value) in entries {
        entry.clear();
        bytes_field(&mut entry, 1, key.as_bytes());
        bytes_field(&mut entry, 2, value.as_bytes());
        bytes_field(out, 4, &entry);
    }
    Some(())
}

/// A trace dict as serialized `Trace` bytes, or `None` when the Python path must decide.
#[pyfunction]
pub fn encode_trace_dict<'py>(
    py: Python<'py>,
    trace: &Bound<'py, PyAny>,
) -> Option<Bound<'py, PyBytes>> {
    encode(trace).map(|b| PyBytes::new(py, &b))
}

/// One batch item on its way to the core.
enum Input {
    /// `bytes` as the caller gave them (borrowed, not copied).
    Given(PyBackedBytes),
    /// A dict encoded here: its range in the chunk's arena.
    Encoded(Range<usize>),
    /// Settled before grading (the Python path's `ItemError`).
    Settled,
}

/// Consecutive batch items as the core takes them; dicts share one buffer.
#[derive(Default)]
pub struct Chunk {
    items: Vec<Input>,
    arena: Vec<u8>,
}

impl Chunk {
    /// Adds `item`: `bytes` as they are, a plain dict encoded; `None` when the Python path
    /// must turn it into bytes first.
    pub fn push(&mut self, item: &Bound<'_, PyAny>) -> PyResult<Option<()>> {
        if item.is_exact_instance_of::<PyBytes>() {
            self.items.push(Input::Given(item.extract()?));
        } else if let (start, Some(())) = (self.arena.len(), encode_into(&mut self.arena, item)) {
            self.items.push(Input::Encoded(start..self.arena.len()));
        } else {
            return Ok(None);
        }
        Ok(Some(()))
    }

    /// Adds what the Python path made of an item: `bytes` to grade, or anything else as that
    /// item's settled outcome (returned to the caller untouched).
    pub fn push_prepared(&mut self, prepared: &Bound<'_, PyAny>) -> PyResult<bool> {
        if prepared.is_instance_of::<PyBytes>() {
            self.items.push(Input::Given(prepared.extract()?));
            Ok(true)
        } else {
            self.items.push(Input::Settled);
            Ok(false)
        }
    }

    /// The traces to grade, in order (settled items left out).
    pub fn traces(&self) -> Vec<&[u8]> {
        self.items
            .iter()
            .filter_map(|item| match item {
                Input::Given(b) => Some(&b[..]),
                Input::Encoded(r) => Some(&self.arena[r.clone()]),
                Input::Settled => None,
            })
            .collect()
    }

    /// For each item in order: graded (true) or settled before grading (false).
    pub fn graded(&self) -> impl Iterator<Item = bool> + '_ {
        self.items.iter().map(|item| !matches!(item, Input::Settled))
    }
}
