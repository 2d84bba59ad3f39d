//! A trace dict (protobuf-JSON mapping) encoded as `Trace` bytes without a Python message.
//!
//! Only the plain shapes are taken: known keys (proto or JSON name, each field once), `str`
//! strings, `bool` error, non-negative `int` times, tokens and turns, a finite `float` cost,
//! `list`s of call, model call and turn dicts, a `dict` of `str` metadata. Anything else (`None`, numeric strings, unknown keys, lone surrogates, subclasses)
//! gives `None`, and the caller takes the Python path, which accepts or names the problem exactly
//! as before. The bytes equal `Trace.SerializeToString(deterministic=True)`: fields in number
//! order, defaults left out, `optional` fields written when set, map entries in upb's order.
//!
//! This walk is the public batch path's cost per dict (it holds the GIL while the pool grades),
//! so it reads the objects borrowed: no reference counting per entry, dict keys matched by
//! pointer against interned names first, each message written in place.
use std::ops::Range;
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::sync::PyOnceLock;
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

/// Field `number` holding the message `write` appends, written in place: the length prefix is
/// reserved at its likely size and resized only when the message's length needs another.
fn message_field(
    out: &mut Vec<u8>,
    number: u64,
    write: impl FnOnce(&mut Vec<u8>) -> Option<()>,
) -> Option<()> {
    varint(out, number << 3 | LEN);
    let at = out.len();
    out.extend_from_slice(&[0, 0]); // a 2-byte length: a call with ~200 bytes of arguments
    write(out)?;
    match out.len() - at - 2 {
        len @ 0..0x80 => {
            out[at] = len as u8;
            out.remove(at + 1);
        }
        len @ 0x80..0x4000 => {
            out[at] = (len as u8) | 0x80;
            out[at + 1] = (len >> 7) as u8;
        }
        len => {
            let mut prefix = Vec::with_capacity(10);
            varint(&mut prefix, len as u64);
            out.splice(at..at + 2, prefix);
        }
    }
    Some(())
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

/// A borrowed item of a dict or list being walked.
type Item<'a, 'py> = Borrowed<'a, 'py, PyAny>;

/// The entries of `dict`, borrowed (no reference counting per entry). Sound because the walk
/// runs no Python code while it holds them: it reads exact `str`, `int`, `bool`, `list` and
/// `dict` objects through C calls that cannot call back, so nothing changes the dict or drops
/// its items until the walk is done, and the GIL stays held (`Python<'py>`).
fn entries<'a, 'py>(
    dict: &'a Bound<'py, PyDict>,
) -> impl Iterator<Item = (Item<'a, 'py>, Item<'a, 'py>)> {
    let py = dict.py();
    let mut pos: ffi::Py_ssize_t = 0;
    std::iter::from_fn(move || {
        let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: `dict` is a live dict and the GIL is held; the references PyDict_Next
        // returns are borrowed from the dict, which outlives 'a unchanged (see above).
        let found =
            unsafe { ffi::PyDict_Next(dict.as_ptr(), &raw mut pos, &raw mut key, &raw mut value) };
        // SAFETY: on success both pointers are non-null borrowed references.
        (found != 0)
            .then(|| unsafe { (Borrowed::from_ptr(py, key), Borrowed::from_ptr(py, value)) })
    })
}

/// The items of `list`, borrowed (as `entries`, and as sound).
fn items<'a, 'py>(list: &'a Bound<'py, PyList>) -> impl Iterator<Item = Item<'a, 'py>> {
    let py = list.py();
    (0..list.len()).map(move |i| {
        // SAFETY: `i` is below the length of a list nothing changes during the walk; the
        // reference PyList_GetItem returns is borrowed from the list.
        unsafe { Borrowed::from_ptr(py, ffi::PyList_GetItem(list.as_ptr(), i as ffi::Py_ssize_t)) }
    })
}

/// The keys a message's dict may have (proto and JSON names) and the field each names.
struct Keys {
    names: &'static [(&'static str, usize)],
    /// `names` interned, in the same order: a dict written in Python source holds these very
    /// objects as keys, so most keys match by pointer.
    interned: PyOnceLock<Vec<Py<PyString>>>,
}

impl Keys {
    const fn new(names: &'static [(&'static str, usize)]) -> Self {
        Keys { names, interned: PyOnceLock::new() }
    }

    /// The field `key` names (1-based); `None` for any other key.
    fn field(&self, key: &Bound<'_, PyAny>) -> Option<usize> {
        let py = key.py();
        let interned = self.interned.get_or_init(py, || {
            self.names.iter().map(|(name, _)| PyString::intern(py, name).unbind()).collect()
        });
        let by_pointer = interned.iter().position(|k| k.as_ptr() == key.as_ptr());
        let at = by_pointer.or_else(|| {
            let key = text(key)?;
            self.names.iter().position(|(name, _)| *name == key)
        })?;
        Some(self.names[at].1)
    }

    /// The fields of `item`, an exact `dict`, by number (1-based), each at most once; `None`
    /// for another type, an unknown key or a field given twice.
    fn read<'a, 'py, const N: usize>(
        &self,
        item: &'a Bound<'py, PyAny>,
    ) -> Option<[Option<Item<'a, 'py>>; N]> {
        let dict = item.downcast_exact::<PyDict>().ok()?;
        let mut fields = [None; N];
        for (key, value) in entries(dict) {
            once(fields.get_mut(self.field(&key)? - 1)?, value)?;
        }
        Some(fields)
    }
}

/// Every key a dict may have, per message: the one place to add a field.
static TRACE_KEYS: Keys = Keys::new(&[
    ("id", 1),
    ("calls", 2),
    ("final_answer", 3),
    ("finalAnswer", 3),
    ("metadata", 4),
    ("model_calls", 5),
    ("modelCalls", 5),
    ("turns", 6),
]);
static CALL_KEYS: Keys = Keys::new(&[
    ("name", 1),
    ("arguments_json", 2),
    ("argumentsJson", 2),
    ("result", 3),
    ("error", 4),
    ("id", 5),
    ("start_time_unix_nano", 6),
    ("startTimeUnixNano", 6),
    ("end_time_unix_nano", 7),
    ("endTimeUnixNano", 7),
    ("turn", 8),
    ("agent", 9),
    ("server", 10),
]);
static MODEL_CALL_KEYS: Keys = Keys::new(&[
    ("model", 1),
    ("input_tokens", 2),
    ("inputTokens", 2),
    ("output_tokens", 3),
    ("outputTokens", 3),
    ("cost", 4),
    ("turn", 5),
    ("agent", 6),
    ("start_time_unix_nano", 7),
    ("startTimeUnixNano", 7),
    ("end_time_unix_nano", 8),
    ("endTimeUnixNano", 8),
]);
static TURN_KEYS: Keys =
    Keys::new(&[("user_input", 1), ("userInput", 1), ("final_answer", 2), ("finalAnswer", 2)]);

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
    let [id, calls, answer, metadata, model_calls, turns] = TRACE_KEYS.read::<6>(trace)?;
    if let Some(id) = id {
        string_field(out, 1, &id)?;
    }
    if let Some(calls) = calls {
        for call in items(calls.downcast_exact::<PyList>().ok()?) {
            message_field(out, 2, |out| encode_call(out, &call))?;
        }
    }
    if let Some(answer) = answer {
        string_field(out, 3, &answer)?;
    }
    if let Some(metadata) = metadata {
        encode_metadata(out, &metadata)?;
    }
    if let Some(model_calls) = model_calls {
        for model_call in items(model_calls.downcast_exact::<PyList>().ok()?) {
            message_field(out, 5, |out| encode_model_call(out, &model_call))?;
        }
    }
    if let Some(turns) = turns {
        for turn in items(turns.downcast_exact::<PyList>().ok()?) {
            message_field(out, 6, |out| encode_turn(out, &turn))?;
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

/// A `ModelCall` (SPEC §10).
fn encode_model_call(out: &mut Vec<u8>, item: &Bound<'_, PyAny>) -> Option<()> {
    let [model, input, output, cost, turn, agent, start, end] = MODEL_CALL_KEYS.read::<8>(item)?;
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
    let [user_input, answer] = TURN_KEYS.read::<2>(item)?;
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
    let [name, arguments, result, error, id, start, end, turn, agent, server] =
        CALL_KEYS.read::<10>(call)?;
    if let Some(name) = name {
        string_field(out, 1, &name)?;
    }
    // `optional string`: written whenever set, even empty.
    for (number, value) in [(2, arguments), (3, result)] {
        if let Some(value) = value {
            bytes_field(out, number, text(&value)?.as_bytes());
        }
    }
    if let Some(error) = error {
        if error.downcast_exact::<PyBool>().ok()?.is_true() {
            varint_field(out, 4, 1);
        }
    }
    if let Some(id) = id {
        string_field(out, 5, &id)?;
    }
    for (number, value) in [(6, start), (7, end)] {
        if let Some(value) = value {
            uint_field(out, number, &value, u64::MAX)?;
        }
    }
    if let Some(turn) = turn {
        uint_field(out, 8, &turn, u32::MAX.into())?;
    }
    for (number, value) in [(9, agent), (10, server)] {
        if let Some(value) = value {
            string_field(out, number, &value)?;
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
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(dict.len());
    let borrowed: Vec<(Item<'_, '_>, Item<'_, '_>)> = entries(dict).collect();
    for (key, value) in &borrowed {
        pairs.push((text(key)?, text(value)?));
    }
    pairs.sort_unstable_by(|a, b| upb_key_order(a.0.as_bytes(), b.0.as_bytes()));
    for (key, value) in pairs {
        message_field(out, 4, |entry| {
            bytes_field(entry, 1, key.as_bytes());
            bytes_field(entry, 2, value.as_bytes());
            Some(())
        })?;
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

/// Consecutive batch items as the core takes them; dicts share one buffer, the arena.
pub struct Chunk {
    items: Vec<Input>,
    arena: Vec<u8>,
}

/// Arenas kept for the next chunks (a call has two in flight), up to `KEPT_ARENA_BYTES` each:
/// a fresh multi-megabyte buffer costs its page faults again in every call.
static SPARE_ARENAS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
const KEPT_ARENAS: usize = 2;
const KEPT_ARENA_BYTES: usize = 16 << 20;

impl Default for Chunk {
    fn default() -> Self {
        let spare = SPARE_ARENAS.lock().ok().and_then(|mut spare| spare.pop());
        Chunk { items: Vec::new(), arena: spare.unwrap_or_default() }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let mut arena = std::mem::take(&mut self.arena);
        if (1..=KEPT_ARENA_BYTES).contains(&arena.capacity()) {
            arena.clear();
            if let Ok(mut spare) = SPARE_ARENAS.lock() {
                if spare.len() < KEPT_ARENAS {
                    spare.push(arena);
                }
            }
        }
    }
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
