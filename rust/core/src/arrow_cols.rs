//! Trace rows read straight from Arrow column buffers (the native Parquet schema), no JSON.
//!
//! The caller hands over each array's raw buffers (validity bitmap, 32- or 64-bit offsets,
//! values) with the array's offset and length, as `pyarrow.Array.buffers()` gives them; no
//! Arrow library is involved. [`ArrowTraces::new`] checks every offset and length against the
//! buffer sizes and every string for UTF-8 once, up front; reading a row afterwards cannot fail.
//!
//! Nulls read as the JSON path built from the same batch reads them: a null `arguments_json` or
//! `result` is absent, a null string elsewhere is `""`, a null `error` is false, a null time is
//! 0, a null calls list or metadata map is empty.
use std::collections::HashMap;

use crate::call_meta::{CallMeta, CallMetas};
use crate::proto::v1::{ToolCall, Trace};
use crate::trace::Call;
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
    pub metadata: Option<RawArray<'a>>,
    pub metadata_key: Option<RawArray<'a>>,
    pub metadata_value: Option<RawArray<'a>>,
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

/// A validated bitmap-backed array (booleans) or fixed-width u64 array.
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
    metadata: Option<Lists<'a>>,
    key: Option<Strings<'a>>,
    value: Option<Strings<'a>>,
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
        let i = self.offset + i;
        if !valid(self.validity, i) {
            return 0;
        }
        self.values
            .get(i * 8..i * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    }
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
        let c = calls_len(raw);
        let m = meta_len(raw);
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
            metadata,
            key: strings("metadata.key", raw.metadata_key, m)?,
            value: strings("metadata.value", raw.metadata_value, m)?,
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

    fn call(&self, j: usize) -> Call<'a> {
        Call {
            name: text(self.name, j),
            arguments_json: opt(self.arguments_json, j),
            result: opt(self.result, j),
            error: self.error.is_some_and(|e| e.bool(j)),
        }
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
                let (start, end) =
                    (self.start.map_or(0, |t| t.u64(j)), self.end.map_or(0, |t| t.u64(j)));
                call_metas.set(
                    j - s,
                    CallMeta {
                        start_time_unix_nano: start,
                        end_time_unix_nano: end,
                        ..CallMeta::default()
                    },
                    e - s,
                );
                let call_len = len_field_len(c.name.len())
                    + c.arguments_json.map_or(0, |a| present_field_len(a.len()))
                    + c.result.map_or(0, |r| present_field_len(r.len()))
                    + if c.error { 2 } else { 0 }
                    + len_field_len(text(self.call_id, j).len())
                    + varint_field_len(start)
                    + varint_field_len(end);
                len += present_field_len(call_len);
                c
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
        (TraceParts { id, calls, call_metas, final_answer, metadata, ..TraceParts::default() }, len)
    }

    /// Row `row` as a decoded `Trace` (for the exact size check of a trace near the limit).
    pub fn trace(&self, row: usize) -> Trace {
        let (s, e) = self.call_range(row);
        let calls = (s..e)
            .map(|j| {
                let c = self.call(j);
                ToolCall {
                    name: c.name.to_owned(),
                    arguments_json: c.arguments_json.map(str::to_owned),
                    result: c.result.map(str::to_owned),
                    error: c.error,
                    id: text(self.call_id, j).to_owned(),
                    start_time_unix_nano: self.start.map_or(0, |t| t.u64(j)),
                    end_time_unix_nano: self.end.map_or(0, |t| t.u64(j)),
                    ..ToolCall::default()
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
            ..Trace::default()
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
    ])
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
