//! Trace rows read straight from Arrow column buffers (the native Parquet schema), no JSON.
//!
//! The caller hands over each array's raw buffers (validity bitmap, 32- or 64-bit offsets,
//! values) with the array's offset and length, as `pyarrow.Array.buffers()` gives them; no
//! Arrow library is involved. [`ArrowTraces::new`] checks every offset and length against the
//! buffer sizes and every string for UTF-8 once, up front; reading a row afterwards cannot fail.
//!
//! Nulls read as the JSON path built from the same batch reads them: a null `arguments_json` or
//! `result` is absent, a null string elsewhere is `""`, a null `error` is false, a null time is
//! 0, a null calls list or metadata map is empty, and a null model call `cost` is not recorded.
//!
//! The SPEC v2 columns (§10) are read the same way: each call's `turn`, `agent` and `server`,
//! and the `model_calls` and `turns` lists of structs.
use std::collections::HashMap;

use crate::call_meta::{CallMeta, CallMetas};
use crate::proto::v1::{ModelCall as ModelCallMsg, ToolCall, Trace, Turn as TurnMsg};
use crate::trace::{Call, ModelCall, Turn};
use crate::wire::{len_field_len, present_field_len, varint_field_len, TraceParts};

/// One Arrow array as raw buffers.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawArray<'a> {
    /// Logical length (rows).
    pub len: usize,
    /// The array's offset into its buffers (a sliced array's `offset`).
    pub offset: usize,
    /// Validity bitmap (LSB first); `None` when every value is valid.
    pub validity: Option<&'a [u8]>,
    /// Value offsets of string and list arrays, 4 bytes each (8 when `large`).
    pub offsets: Option<&'a [u8]>,
    pub large: bool,
    /// String bytes, boolean bits, or 8-byte little-endian unsigned integers.
    pub values: Option<&'a [u8]>,
}

/// The columns of one record batch in the native trace schema; absent columns are `None`.
/// `call_*` arrays are the fields of the calls list's struct values, `metadata_key`/`_value`
/// the fields of the metadata map's entries (each already at the struct's offset).
#[derive(Clone, Copy, Debug, Default)]
pub struct RawTraces<'a> {
    pub rows: usize,
    pub id: Option<RawArray<'a>>,
    pub final_answer: Option<RawArray<'a>>,
    pub calls: Option<RawArray<'a>>,
    pub call_name: Option<RawArray<'a>>,
    pub call_arguments_json: Option<RawArray<'a>>,
    pub call_result: Option<RawArray<'a>>,
    pub call_error: Option<RawArray<'a>>,
    pub call_id: Option<RawArray<'a>>,
    pub call_start_time_unix_nano: Option<RawArray<'a>>,
    pub call_end_time_unix_nano: Option<RawArray<'a>>,
    /// 32-bit unsigned.
    pub call_turn: Option<RawArray<'a>>,
    pub call_agent: Option<RawArray<'a>>,
    pub call_server: Option<RawArray<'a>>,
    pub metadata: Option<RawArray<'a>>,
    pub metadata_key: Option<RawArray<'a>>,
    pub metadata_value: Option<RawArray<'a>>,
    /// The `model_calls` list and its struct's fields (`cost` 64-bit floats, `turn` 32-bit
    /// unsigned, the rest as the call fields of the same name).
    pub model_calls: Option<RawArray<'a>>,
    pub model_call_model: Option<RawArray<'a>>,
    pub model_call_input_tokens: Option<RawArray<'a>>,
    pub model_call_output_tokens: Option<RawArray<'a>>,
    pub model_call_cost: Option<RawArray<'a>>,
    pub model_call_turn: Option<RawArray<'a>>,
    pub model_call_agent: Option<RawArray<'a>>,
    pub model_call_start_time_unix_nano: Option<RawArray<'a>>,
    pub model_call_end_time_unix_nano: Option<RawArray<'a>>,
    /// The `turns` list and its struct's fields.
    pub turns: Option<RawArray<'a>>,
    pub turn_user_input: Option<RawArray<'a>>,
    pub turn_final_answer: Option<RawArray<'a>>,
}

/// A validated string array.
#[derive(Clone, Copy, Debug)]
struct Strings<'a> {
    validity: Option<&'a [u8]>,
    offsets: Offsets<'a>,
    /// The bytes the array's values span, checked UTF-8; offsets are relative to `base`.
    text: &'a str,
    base: usize,
}

/// A validated list array: child index ranges per row.
#[derive(Clone, Copy, Debug)]
struct Lists<'a> {
    validity: Option<&'a [u8]>,
    offsets: Offsets<'a>,
}

/// Validated offsets: `at(i)` is within bounds for every `i` in `0..=len` and non-decreasing.
#[derive(Clone, Copy, Debug)]
struct Offsets<'a> {
    bytes: &'a [u8],
    large: bool,
    first: usize,
}

/// A validated bitmap-backed array (booleans) or fixed-width (u32, u64, f64) array.
#[derive(Clone, Copy, Debug)]
struct Fixed<'a> {
    validity: Option<&'a [u8]>,
    values: &'a [u8],
    offset: usize,
}

/// Validated columns; every read is in bounds.
#[derive(Debug)]
pub struct ArrowTraces<'a> {
    rows: usize,
    id: Option<Strings<'a>>,
    final_answer: Option<Strings<'a>>,
    calls: Option<Lists<'a>>,
    name: Option<Strings<'a>>,
    arguments_json: Option<Strings<'a>>,
    result: Option<Strings<'a>>,
    error: Option<Fixed<'a>>,
    call_id: Option<Strings<'a>>,
    start: Option<Fixed<'a>>,
    end: Option<Fixed<'a>>,
    turn: Option<Fixed<'a>>,
    agent: Option<Strings<'a>>,
    server: Option<Strings<'a>>,
    metadata: Option<Lists<'a>>,
    key: Option<Strings<'a>>,
    value: Option<Strings<'a>>,
    model_calls: Option<Lists<'a>>,
    mc_model: Option<Strings<'a>>,
    mc_input: Option<Fixed<'a>>,
    mc_output: Option<Fixed<'a>>,
    mc_cost: Option<Fixed<'a>>,
    mc_turn: Option<Fixed<'a>>,
    mc_agent: Option<Strings<'a>>,
    mc_start: Option<Fixed<'a>>,
    mc_end: Option<Fixed<'a>>,
    turns: Option<Lists<'a>>,
    user_input: Option<Strings<'a>>,
    turn_answer: Option<Strings<'a>>,
}

fn bit(bits: &[u8], i: usize) -> bool {
    bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

fn valid(validity: Option<&[u8]>, i: usize) -> bool {
    validity.is_none_or(|v| bit(v, i))
}

impl Offsets<'_> {
    /// The `i`th offset of the array (0-based from the array's own offset).
    fn at(&self, i: usize) -> usize {
        let i = self.first + i;
        if self.large {
            let b = self.bytes.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok());
            b.map_or(0, |b| i64::from_le_bytes(b) as usize)
        } else {
            let b = self.bytes.get(i * 4..i * 4 + 4).and_then(|b| b.try_into().ok());
            b.map_or(0, |b| i32::from_le_bytes(b) as usize)
        }
    }

    fn range(&self, i: usize) -> (usize, usize) {
        (self.at(i), self.at(i + 1))
    }
}

/// Checks the shared parts of an array: its extent, its validity bitmap and (for string and
/// list arrays) its offsets, each within `0..=limit` and non-decreasing.
fn check_common<'a>(
    name: &str,
    a: &RawArray<'a>,
    need: usize,
    limit: Option<usize>,
) -> Result<Option<Offsets<'a>>, String> {
    if a.len < need {
        return Err(format!("{name}: {} values, {need} needed", a.len));
    }
    let end = a.offset.checked_add(a.len).ok_or_else(|| format!("{name}: offset overflows"))?;
    if let Some(v) = a.validity {
        if v.len() < end.div_ceil(8) {
            return Err(format!(
                "{name}: validity bitmap is {} bytes; offset + length needs {}",
                v.len(),
                end.div_ceil(8)
            ));
        }
    }
    let Some(limit) = limit else { return Ok(None) };
    let bytes = a.offsets.ok_or_else(|| format!("{name}: no offsets buffer"))?;
    let width = if a.large { 8 } else { 4 };
    let needed = end.checked_add(1).and_then(|n| n.checked_mul(width));
    if needed.is_none_or(|n| bytes.len() < n) {
        return Err(format!(
            "{name}: offsets buffer is {} bytes; offset + length + 1 offsets of {width} bytes \
             do not fit",
            bytes.len()
        ));
    }
    let offsets = Offsets { bytes, large: a.large, first: a.offset };
    let mut previous = 0usize;
    for i in 0..=a.len {
        let i = a.offset + i;
        let raw = if a.large {
            bytes.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes)
        } else {
            bytes
                .get(i * 4..i * 4 + 4)
                .and_then(|b| b.try_into().ok())
                .map(|b| i64::from(i32::from_le_bytes(b)))
        };
        let value = raw.and_then(|r| usize::try_from(r).ok()).filter(|&r| r <= limit);
        let Some(value) = value else {
            return Err(format!(
                "{name}: offset {} at index {i} is outside 0..={limit}",
                raw.unwrap_or(-1)
            ));
        };
        if i > a.offset && value < previous {
            return Err(format!("{name}: offsets decrease at index {i}"));
        }
        previous = value;
    }
    Ok(Some(offsets))
}

fn strings<'a>(
    name: &str,
    a: Option<RawArray<'a>>,
    need: usize,
) -> Result<Option<Strings<'a>>, String> {
    let Some(a) = a else { return Ok(None) };
    let data = a.values.unwrap_or_default();
    let Some(offsets) = check_common(name, &a, need, Some(data.len()))? else {
        return Ok(None);
    };
    let (base, end) = (offsets.at(0), offsets.at(a.len));
    let span = data.get(base..end).unwrap_or_default();
    let text = simdutf8::basic::from_utf8(span).map_err(|_| format!("{name}: not UTF-8"))?;
    for i in 0..a.len {
        let (s, e) = offsets.range(i);
        if text.get(s - base..e - base).is_none() {
            return Err(format!("{name}: value {i} does not start and end on UTF-8 characters"));
        }
    }
    Ok(Some(Strings { validity: a.validity, offsets, text, base }))
}

fn lists<'a>(
    name: &str,
    a: Option<RawArray<'a>>,
    need: usize,
    children: usize,
) -> Result<Option<Lists<'a>>, String> {
    let Some(a) = a else { return Ok(None) };
    Ok(check_common(name, &a, need, Some(children))?
        .map(|offsets| Lists { validity: a.validity, offsets }))
}

fn fixed<'a>(
    name: &str,
    a: Option<RawArray<'a>>,
    need: usize,
    bits: usize,
) -> Result<Option<Fixed<'a>>, String> {
    let Some(a) = a else { return Ok(None) };
    check_common(name, &a, need, None)?;
    let values = a.values.unwrap_or_default();
    let end = a.offset + a.len;
    let needed = end.checked_mul(bits).map(|b| b.div_ceil(8));
    if needed.is_none_or(|n| values.len() < n) {
        return Err(format!(
            "{name}: values buffer is {} bytes; offset + length needs more",
            values.len()
        ));
    }
    Ok(Some(Fixed { validity: a.validity, values, offset: a.offset }))
}

impl<'a> Strings<'a> {
    fn get(&self, i: usize) -> Option<&'a str> {
        if !valid(self.validity, self.offsets.first + i) {
            return None;
        }
        let (s, e) = self.offsets.range(i);
        // Validated in `strings`: never the empty fallback.
        Some(self.text.get(s - self.base..e - self.base).unwrap_or_default())
    }
}

impl Fixed<'_> {
    fn bool(&self, i: usize) -> bool {
        let i = self.offset + i;
        valid(self.validity, i) && bit(self.values, i)
    }

    fn u64(&self, i: usize) -> u64 {
        self.word::<8>(i).map_or(0, u64::from_le_bytes)
    }

    fn u32(&self, i: usize) -> u32 {
        self.word::<4>(i).map_or(0, u32::from_le_bytes)
    }

    /// `None` for a null value.
    fn f64(&self, i: usize) -> Option<f64> {
        self.word::<8>(i).map(f64::from_le_bytes)
    }

    /// Value `i`'s bytes, or `None` when it is null.
    fn word<const N: usize>(&self, i: usize) -> Option<[u8; N]> {
        let i = self.offset + i;
        if !valid(self.validity, i) {
            return None;
        }
        self.values.get(i * N..i * N + N).and_then(|b| b.try_into().ok())
    }
}

fn u64_of(f: Option<Fixed<'_>>, i: usize) -> u64 {
    f.map_or(0, |f| f.u64(i))
}

fn u32_of(f: Option<Fixed<'_>>, i: usize) -> u32 {
    f.map_or(0, |f| f.u32(i))
}

impl Lists<'_> {
    /// Child index range of row `i`; empty for a null list.
    fn range(&self, i: usize) -> (usize, usize) {
        if valid(self.validity, self.offsets.first + i) {
            self.offsets.range(i)
        } else {
            (0, 0)
        }
    }
}

fn text(s: Option<Strings<'_>>, i: usize) -> &str {
    s.and_then(|s| s.get(i)).unwrap_or_default()
}

fn opt(s: Option<Strings<'_>>, i: usize) -> Option<&str> {
    s.and_then(|s| s.get(i))
}

impl<'a> ArrowTraces<'a> {
    /// Validates every buffer against the lengths and offsets (a message naming the column and
    /// what is wrong otherwise).
    pub fn new(raw: &RawTraces<'a>) -> Result<Self, String> {
        let n = raw.rows;
        let calls = lists("calls", raw.calls, n, calls_len(raw))?;
        let metadata = lists("metadata", raw.metadata, n, meta_len(raw))?;
        let model_calls = lists("model_calls", raw.model_calls, n, model_calls_len(raw))?;
        let turns = lists("turns", raw.turns, n, turns_len(raw))?;
        let c = calls_len(raw);
        let m = meta_len(raw);
        let mc = model_calls_len(raw);
        let tn = turns_len(raw);
        Ok(ArrowTraces {
            rows: n,
            id: strings("id", raw.id, n)?,
            final_answer: strings("final_answer", raw.final_answer, n)?,
            calls,
            name: strings("calls.name", raw.call_name, c)?,
            arguments_json: strings("calls.arguments_json", raw.call_arguments_json, c)?,
            result: strings("calls.result", raw.call_result, c)?,
            error: fixed("calls.error", raw.call_error, c, 1)?,
            call_id: strings("calls.id", raw.call_id, c)?,
            start: fixed("calls.start_time_unix_nano", raw.call_start_time_unix_nano, c, 64)?,
            end: fixed("calls.end_time_unix_nano", raw.call_end_time_unix_nano, c, 64)?,
            turn: fixed("calls.turn", raw.call_turn, c, 32)?,
            agent: strings("calls.agent", raw.call_agent, c)?,
            server: strings("calls.server", raw.call_server, c)?,
            metadata,
            key: strings("metadata.key", raw.metadata_key, m)?,
            value: strings("metadata.value", raw.metadata_value, m)?,
            model_calls,
            mc_model: strings("model_calls.model", raw.model_call_model, mc)?,
            mc_input: fixed("model_calls.input_tokens", raw.model_call_input_tokens, mc, 64)?,
            mc_output: fixed("model_calls.output_tokens", raw.model_call_output_tokens, mc, 64)?,
            mc_cost: fixed("model_calls.cost", raw.model_call_cost, mc, 64)?,
            mc_turn: fixed("model_calls.turn", raw.model_call_turn, mc, 32)?,
            mc_agent: strings("model_calls.agent", raw.model_call_agent, mc)?,
            mc_start: fixed(
                "model_calls.start_time_unix_nano",
                raw.model_call_start_time_unix_nano,
                mc,
                64,
            )?,
            mc_end: fixed(
                "model_calls.end_time_unix_nano",
                raw.model_call_end_time_unix_nano,
                mc,
                64,
            )?,
            turns,
            user_input: strings("turns.user_input", raw.turn_user_input, tn)?,
            turn_answer: strings("turns.final_answer", raw.turn_final_answer, tn)?,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn id(&self, row: usize) -> &'a str {
        text(self.id, row)
    }

    fn call_range(&self, row: usize) -> (usize, usize) {
        self.calls.map_or((0, 0), |l| l.range(row))
    }

    fn meta_range(&self, row: usize) -> (usize, usize) {
        self.metadata.map_or((0, 0), |l| l.range(row))
    }

    fn model_call_range(&self, row: usize) -> (usize, usize) {
        self.model_calls.map_or((0, 0), |l| l.range(row))
    }

    fn turn_range(&self, row: usize) -> (usize, usize) {
        self.turns.map_or((0, 0), |l| l.range(row))
    }

    fn call(&self, j: usize) -> Call<'a> {
        Call {
            name: text(self.name, j),
            arguments_json: opt(self.arguments_json, j),
            result: opt(self.result, j),
            error: self.error.is_some_and(|e| e.bool(j)),
        }
    }

    /// Call `j`'s SPEC v2 fields (kept beside the calls, in the trace's side table).
    fn call_meta(&self, j: usize) -> CallMeta<'a> {
        CallMeta {
            turn: u32_of(self.turn, j),
            agent: text(self.agent, j),
            server: text(self.server, j),
            start_time_unix_nano: u64_of(self.start, j),
            end_time_unix_nano: u64_of(self.end, j),
        }
    }

    fn model_call(&self, j: usize) -> ModelCall<'a> {
        ModelCall {
            model: text(self.mc_model, j),
            input_tokens: u64_of(self.mc_input, j),
            output_tokens: u64_of(self.mc_output, j),
            cost: self.mc_cost.and_then(|f| f.f64(j)),
            turn: u32_of(self.mc_turn, j),
            agent: text(self.mc_agent, j),
            start_time_unix_nano: u64_of(self.mc_start, j),
            end_time_unix_nano: u64_of(self.mc_end, j),
        }
    }

    fn turn(&self, j: usize) -> Turn<'a> {
        Turn { user_input: text(self.user_input, j), final_answer: text(self.turn_answer, j) }
    }

    /// Row `row`'s fields and the length of the equivalent encoded `Trace` (exact unless a
    /// metadata key repeats; then an upper bound, each entry counted).
    pub fn parts(&self, row: usize) -> (TraceParts<'a>, usize) {
        let id = text(self.id, row);
        let final_answer = text(self.final_answer, row);
        let mut len = len_field_len(id.len()) + len_field_len(final_answer.len());
        let (s, e) = self.call_range(row);
        let mut call_metas = CallMetas::default();
        let calls: Vec<Call<'a>> = (s..e)
            .map(|j| {
                let c = self.call(j);
                let m = self.call_meta(j);
                call_metas.set(j - s, m, e - s);
                let call_len = len_field_len(c.name.len())
                    + c.arguments_json.map_or(0, |a| present_field_len(a.len()))
                    + c.result.map_or(0, |r| present_field_len(r.len()))
                    + if c.error { 2 } else { 0 }
                    + len_field_len(text(self.call_id, j).len())
                    + varint_field_len(m.start_time_unix_nano)
                    + varint_field_len(m.end_time_unix_nano)
                    + varint_field_len(u64::from(m.turn))
                    + len_field_len(m.agent.len())
                    + len_field_len(m.server.len());
                len += present_field_len(call_len);
                c
            })
            .collect();
        let (s, e) = self.model_call_range(row);
        let model_calls: Vec<ModelCall<'a>> = (s..e)
            .map(|j| {
                let m = self.model_call(j);
                let m_len = len_field_len(m.model.len())
                    + varint_field_len(m.input_tokens)
                    + varint_field_len(m.output_tokens)
                    + m.cost.map_or(0, |_| 9)
                    + varint_field_len(u64::from(m.turn))
                    + len_field_len(m.agent.len())
                    + varint_field_len(m.start_time_unix_nano)
                    + varint_field_len(m.end_time_unix_nano);
                len += present_field_len(m_len);
                m
            })
            .collect();
        let (s, e) = self.turn_range(row);
        let turns: Vec<Turn<'a>> = (s..e)
            .map(|j| {
                let t = self.turn(j);
                len += present_field_len(
                    len_field_len(t.user_input.len()) + len_field_len(t.final_answer.len()),
                );
                t
            })
            .collect();
        let (s, e) = self.meta_range(row);
        let metadata: Vec<(&'a str, &'a str)> = (s..e)
            .map(|j| {
                let (k, v) = (text(self.key, j), text(self.value, j));
                len += present_field_len(len_field_len(k.len()) + len_field_len(v.len()));
                (k, v)
            })
            .collect();
        (TraceParts { id, calls, call_metas, final_answer, metadata, model_calls, turns }, len)
    }

    /// Row `row` as a decoded `Trace` (for the exact size check of a trace near the limit).
    pub fn trace(&self, row: usize) -> Trace {
        let (s, e) = self.call_range(row);
        let calls = (s..e)
            .map(|j| {
                let c = self.call(j);
                let m = self.call_meta(j);
                ToolCall {
                    name: c.name.to_owned(),
                    arguments_json: c.arguments_json.map(str::to_owned),
                    result: c.result.map(str::to_owned),
                    error: c.error,
                    id: text(self.call_id, j).to_owned(),
                    start_time_unix_nano: m.start_time_unix_nano,
                    end_time_unix_nano: m.end_time_unix_nano,
                    turn: m.turn,
                    agent: m.agent.to_owned(),
                    server: m.server.to_owned(),
                }
            })
            .collect();
        let (s, e) = self.model_call_range(row);
        let model_calls = (s..e)
            .map(|j| {
                let m = self.model_call(j);
                ModelCallMsg {
                    model: m.model.to_owned(),
                    input_tokens: m.input_tokens,
                    output_tokens: m.output_tokens,
                    cost: m.cost,
                    turn: m.turn,
                    agent: m.agent.to_owned(),
                    start_time_unix_nano: m.start_time_unix_nano,
                    end_time_unix_nano: m.end_time_unix_nano,
                }
            })
            .collect();
        let (s, e) = self.turn_range(row);
        let turns = (s..e)
            .map(|j| {
                let t = self.turn(j);
                TurnMsg {
                    user_input: t.user_input.to_owned(),
                    final_answer: t.final_answer.to_owned(),
                }
            })
            .collect();
        let (s, e) = self.meta_range(row);
        let metadata: HashMap<String, String> = (s..e)
            .map(|j| (text(self.key, j).to_owned(), text(self.value, j).to_owned()))
            .collect();
        Trace {
            id: text(self.id, row).to_owned(),
            calls,
            final_answer: text(self.final_answer, row).to_owned(),
            metadata,
            model_calls,
            turns,
        }
    }
}

/// How many call structs the calls list may index: the shortest call field (0 with none).
fn calls_len(raw: &RawTraces<'_>) -> usize {
    shortest(&[
        raw.call_name,
        raw.call_arguments_json,
        raw.call_result,
        raw.call_error,
        raw.call_id,
        raw.call_start_time_unix_nano,
        raw.call_end_time_unix_nano,
        raw.call_turn,
        raw.call_agent,
        raw.call_server,
    ])
}

fn model_calls_len(raw: &RawTraces<'_>) -> usize {
    shortest(&[
        raw.model_call_model,
        raw.model_call_input_tokens,
        raw.model_call_output_tokens,
        raw.model_call_cost,
        raw.model_call_turn,
        raw.model_call_agent,
        raw.model_call_start_time_unix_nano,
        raw.model_call_end_time_unix_nano,
    ])
}

fn turns_len(raw: &RawTraces<'_>) -> usize {
    shortest(&[raw.turn_user_input, raw.turn_final_answer])
}

fn meta_len(raw: &RawTraces<'_>) -> usize {
    shortest(&[raw.metadata_key, raw.metadata_value])
}

/// The shortest present array's length; `usize::MAX` when none is present (a list of empty
/// structs indexes nothing, so any offsets are fine).
fn shortest(arrays: &[Option<RawArray<'_>>]) -> usize {
    arrays.iter().flatten().map(|a| a.len).min().unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets32(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|o| o.to_le_bytes()).collect()
    }

    fn string_array<'a>(offsets: &'a [u8], data: &'a [u8], len: usize) -> RawArray<'a> {
        RawArray { len, offsets: Some(offsets), values: Some(data), ..RawArray::default() }
    }

    #[test]
    fn reads_strings_lists_and_nulls() {
        let ids = offsets32(&[0, 1, 3]);
        let names = offsets32(&[0, 2, 2, 5]);
        let list = offsets32(&[0, 2, 3]);
        let validity = [0b101u8];
        let raw = RawTraces {
            rows: 2,
            id: Some(string_array(&ids, b"abc", 2)),
            calls: Some(RawArray { len: 2, offsets: Some(&list), ..RawArray::default() }),
            call_name: Some(string_array(&names, "abéz".as_bytes(), 3)),
            call_result: Some(RawArray {
                validity: Some(&validity),
                ..string_array(&names, "abéz".as_bytes(), 3)
            }),
            ..RawTraces::default()
        };
        let t = ArrowTraces::new(&raw).unwrap();
        let (parts, _) = t.parts(0);
        assert_eq!(parts.id, "a");
        assert_eq!(parts.calls.len(), 2);
        assert_eq!((parts.calls[0].name, parts.calls[1].name), ("ab", ""));
        assert_eq!((parts.calls[0].result, parts.calls[1].result), (Some("ab"), None));
        let (parts, _) = t.parts(1);
        assert_eq!(parts.id, "bc");
        assert_eq!(parts.calls[0].name, "éz");
        assert_eq!(parts.calls[0].result, Some("éz"));
    }

    #[test]
    fn reads_call_times_into_the_side_table() {
        fn fixed(v: &[u8]) -> RawArray<'_> {
            RawArray { len: 3, values: Some(v), ..RawArray::default() }
        }
        let names = offsets32(&[0, 1, 2, 3]);
        let list = offsets32(&[0, 2, 3]);
        let le_bytes = |v: [u64; 3]| v.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>();
        let (start, end) = (le_bytes([5, 0, 7]), le_bytes([9, 0, 0]));
        let raw = RawTraces {
            rows: 2,
            calls: Some(RawArray { len: 2, offsets: Some(&list), ..RawArray::default() }),
            call_name: Some(string_array(&names, b"abc", 3)),
            call_start_time_unix_nano: Some(fixed(&start)),
            call_end_time_unix_nano: Some(fixed(&end)),
            ..RawTraces::default()
        };
        let t = ArrowTraces::new(&raw).unwrap();
        let timed = |s, e| CallMeta {
            start_time_unix_nano: s,
            end_time_unix_nano: e,
            ..CallMeta::default()
        };
        for (row, want) in [(0, vec![timed(5, 9), timed(0, 0)]), (1, vec![timed(7, 0)])] {
            let (parts, len) = t.parts(row);
            assert_eq!(parts.call_metas.to_vec(want.len()), want, "row {row}");
            // The same fields, and the same encoded length, as the decoded `Trace` of the row.
            let trace = t.trace(row);
            let metas: Vec<CallMeta<'_>> = trace.calls.iter().map(CallMeta::from_message).collect();
            assert_eq!(metas, want, "row {row}");
            assert_eq!(len, prost::Message::encoded_len(&trace), "row {row}");
        }
    }

    #[test]
    fn reads_the_v2_columns() {
        let one_each = offsets32(&[0, 1]);
        let two = offsets32(&[0, 2]);
        let names = offsets32(&[0, 1]);
        let turn = 7u32.to_le_bytes();
        let agents = offsets32(&[0, 3]);
        let model_names = offsets32(&[0, 1, 2]);
        let tokens: Vec<u8> = [5u64, u64::MAX].iter().flat_map(|t| t.to_le_bytes()).collect();
        let costs: Vec<u8> = [0.25f64, 9.0].iter().flat_map(|c| c.to_le_bytes()).collect();
        let second_null = [0b01u8];
        let turns = offsets32(&[0, 1]);
        let raw = RawTraces {
            rows: 1,
            calls: Some(RawArray { len: 1, offsets: Some(&one_each), ..RawArray::default() }),
            call_name: Some(string_array(&names, b"a", 1)),
            call_turn: Some(RawArray { len: 1, values: Some(&turn), ..RawArray::default() }),
            call_agent: Some(string_array(&agents, b"x/y", 1)),
            model_calls: Some(RawArray { len: 1, offsets: Some(&two), ..RawArray::default() }),
            model_call_model: Some(string_array(&model_names, b"mn", 2)),
            model_call_input_tokens: Some(RawArray {
                len: 2,
                values: Some(&tokens),
                ..RawArray::default()
            }),
            model_call_cost: Some(RawArray {
                len: 2,
                validity: Some(&second_null),
                values: Some(&costs),
                ..RawArray::default()
            }),
            turns: Some(RawArray { len: 1, offsets: Some(&one_each), ..RawArray::default() }),
            turn_user_input: Some(string_array(&turns, b"q", 1)),
            ..RawTraces::default()
        };
        let t = ArrowTraces::new(&raw).unwrap();
        let (parts, len) = t.parts(0);
        let meta = parts.call_metas.get(0);
        assert_eq!((meta.turn, meta.agent), (7, "x/y"));
        let m = &parts.model_calls;
        assert_eq!((m[0].model, m[0].input_tokens, m[0].cost), ("m", 5, Some(0.25)));
        assert_eq!((m[1].model, m[1].input_tokens, m[1].cost), ("n", u64::MAX, None));
        assert_eq!((parts.turns[0].user_input, parts.turns[0].final_answer), ("q", ""));
        let trace = t.trace(0);
        assert_eq!(prost::Message::encoded_len(&trace), len);
        assert_eq!(trace.model_calls[1].cost, None);
        assert_eq!(trace.calls[0].agent, "x/y");
        // A turn column too short for the calls it must cover.
        let e = ArrowTraces::new(&RawTraces {
            call_turn: Some(RawArray { len: 1, values: Some(&turn[..3]), ..RawArray::default() }),
            ..raw
        })
        .unwrap_err();
        assert!(e.contains("calls.turn: values buffer"), "{e}");
    }

    #[test]
    fn rejects_bad_buffers() {
        let ok = offsets32(&[0, 1, 3]);
        let data = b"abc";
        let check = |a: RawArray<'_>| {
            ArrowTraces::new(&RawTraces { rows: 2, id: Some(a), ..RawTraces::default() })
                .unwrap_err()
        };
        // Offsets buffer too short for offset + length + 1 offsets.
        let e = check(RawArray { offset: 1, ..string_array(&ok, data, 2) });
        assert!(e.contains("id: offsets buffer is 12 bytes"), "{e}");
        // An offset past the data.
        let past = offsets32(&[0, 1, 4]);
        let e = check(string_array(&past, data, 2));
        assert!(e.contains("outside 0..=3"), "{e}");
        // Decreasing and negative offsets.
        let e = check(string_array(&offsets32(&[0, 2, 1]), data, 2));
        assert!(e.contains("decrease"), "{e}");
        let e = check(string_array(&offsets32(&[-1, 2, 3]), data, 2));
        assert!(e.contains("outside"), "{e}");
        // Too few values, a short validity bitmap, invalid UTF-8, a split character.
        let e = check(string_array(&ok, data, 1));
        assert!(e.contains("1 values, 2 needed"), "{e}");
        let e = check(RawArray { validity: Some(&[]), ..string_array(&ok, data, 2) });
        assert!(e.contains("validity bitmap"), "{e}");
        let e = check(string_array(&ok, b"a\xff\xfe", 2));
        assert!(e.contains("not UTF-8"), "{e}");
        let split = offsets32(&[0, 2, 3]);
        let e = check(string_array(&split, "aé".as_bytes(), 2));
        assert!(e.contains("UTF-8 characters"), "{e}");
        // A calls list indexing past its struct fields.
        let names = offsets32(&[0, 1]);
        let list = offsets32(&[0, 1, 2]);
        let e = ArrowTraces::new(&RawTraces {
            rows: 2,
            calls: Some(RawArray { len: 2, offsets: Some(&list), ..RawArray::default() }),
            call_name: Some(string_array(&names, b"a", 1)),
            ..RawTraces::default()
        })
        .unwrap_err();
        assert!(e.contains("calls: offset 2 at index 2 is outside 0..=1"), "{e}");
    }
}
