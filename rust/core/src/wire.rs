//! Borrowed protobuf decoding of `Trace` (no string copies) and direct encoding of outcomes.
//!
//! The decoder accepts only what prost accepts, with the same meaning (last value of a scalar
//! field wins, `calls` append, unknown fields skipped, strings must be UTF-8). Anything it does
//! not handle (groups, malformed input) returns `None` and the caller decodes with prost, so
//! errors and edge cases keep prost's exact behaviour and messages.
use crate::call_meta::{CallMeta, CallMetas};
use crate::trace::{Call, ModelCall, Turn};

/// The fields of a `Trace` that grading reads, borrowed from the encoded bytes.
#[derive(Debug, Default)]
pub struct TraceParts<'a> {
    pub id: &'a str,
    pub calls: Vec<Call<'a>>,
    /// The calls' SPEC v2 fields, by index in `calls` (empty when none records any).
    pub call_metas: CallMetas<'a>,
    pub final_answer: &'a str,
    /// Map entries in wire order; a later duplicate key wins.
    pub metadata: Vec<(&'a str, &'a str)>,
    pub model_calls: Vec<ModelCall<'a>>,
    pub turns: Vec<Turn<'a>>,
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    /// One- and two-byte varints (keys, lengths) inline; longer ones out of line.
    #[inline]
    fn varint(&mut self) -> Option<u64> {
        let byte = *self.b.get(self.i)?;
        if byte < 0x80 {
            self.i += 1;
            return Some(u64::from(byte));
        }
        if let Some(&next) = self.b.get(self.i + 1) {
            if next < 0x80 {
                self.i += 2;
                return Some(u64::from(byte & 0x7F) | u64::from(next) << 7);
            }
        }
        self.varint_long()
    }

    #[inline(never)]
    fn varint_long(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for k in 0..10 {
            let byte = *self.b.get(self.i)?;
            self.i += 1;
            if k == 9 && byte > 1 {
                return None;
            }
            v |= u64::from(byte & 0x7F) << (7 * k);
            if byte < 0x80 {
                return Some(v);
            }
        }
        None
    }

    /// `(field number, wire type)`; `None` for what prost rejects.
    #[inline]
    fn key(&mut self) -> Option<(u32, u8)> {
        let key = self.varint()?;
        if key > u64::from(u32::MAX) {
            return None;
        }
        let wire = (key & 7) as u8;
        let tag = (key >> 3) as u32;
        if wire > 5 || tag == 0 {
            return None;
        }
        Some((tag, wire))
    }

    #[inline]
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        let end = self.i.checked_add(len)?;
        let out = self.b.get(self.i..end)?;
        self.i = end;
        Some(out)
    }

    #[inline]
    fn string(&mut self, wire: u8) -> Option<&'a str> {
        if wire != 2 {
            return None;
        }
        // Only valid or not matters here (invalid bytes go to prost for its error message):
        // simdutf8's basic check is std's for short strings and SIMD for longer ones.
        simdutf8::basic::from_utf8(self.bytes()?).ok()
    }

    /// Skips an unknown field (groups are left to prost).
    fn skip(&mut self, wire: u8) -> Option<()> {
        match wire {
            0 => {
                self.varint()?;
            }
            1 => self.advance(8)?,
            2 => {
                self.bytes()?;
            }
            5 => self.advance(4)?,
            _ => return None,
        }
        Some(())
    }

    fn advance(&mut self, n: usize) -> Option<()> {
        let end = self.i.checked_add(n)?;
        if end > self.b.len() {
            return None;
        }
        self.i = end;
        Some(())
    }

    /// A varint field's value (`None` for another wire type).
    #[inline]
    fn uint(&mut self, wire: u8) -> Option<u64> {
        if wire != 0 {
            return None;
        }
        self.varint()
    }

    /// A length-delimited field's payload (`None` for another wire type).
    #[inline]
    fn message(&mut self, wire: u8) -> Option<&'a [u8]> {
        if wire != 2 {
            return None;
        }
        self.bytes()
    }

    fn done(&self) -> bool {
        self.i >= self.b.len()
    }
}

/// Decodes a serialized `Trace` without copying its strings; `None` means "ask prost".
pub fn decode_trace(bytes: &[u8]) -> Option<TraceParts<'_>> {
    let mut r = Reader { b: bytes, i: 0 };
    let mut t = TraceParts::default();
    let mut names = Names::default();
    while !r.done() {
        let (tag, wire) = r.key()?;
        match tag {
            1 => t.id = r.string(wire)?,
            2 => {
                if wire != 2 {
                    return None;
                }
                let call = r.bytes()?;
                if t.calls.is_empty() {
                    // Room for the rest of the trace in calls of this size (+ 3 framing bytes).
                    t.calls.reserve(((bytes.len() - r.i) / (call.len() + 3)).min(1024) + 1);
                }
                let (c, meta) = decode_call(call, &mut names)?;
                if let Some(meta) = meta {
                    t.call_metas.set(t.calls.len(), meta, t.calls.capacity());
                }
                t.calls.push(c);
            }
            3 => t.final_answer = r.string(wire)?,
            4 => t.metadata.push(decode_entry(r.message(wire)?)?),
            5 => t.model_calls.push(decode_model_call(r.message(wire)?)?),
            6 => t.turns.push(decode_turn(r.message(wire)?)?),
            _ => r.skip(wire)?,
        }
    }
    Some(t)
}

/// The distinct tool names met so far in a trace (the first few): a repeated name borrows the
/// first copy (equal bytes, so the same text) instead of being validated again.
#[derive(Default)]
struct Names<'a> {
    seen: [&'a str; 8],
    len: usize,
}

impl<'a> Names<'a> {
    #[inline]
    fn get(&mut self, r: &mut Reader<'a>, wire: u8) -> Option<&'a str> {
        if wire != 2 {
            return None;
        }
        let b = r.bytes()?;
        if let Some(s) = self.seen[..self.len].iter().find(|s| s.as_bytes() == b) {
            return Some(s);
        }
        let s = simdutf8::basic::from_utf8(b).ok()?;
        if let Some(slot) = self.seen.get_mut(self.len) {
            *slot = s;
            self.len += 1;
        }
        Some(s)
    }
}

/// A call and its SPEC v2 fields (`None` when it has none: the v1 shape, the hot path).
fn decode_call<'a>(
    bytes: &'a [u8],
    names: &mut Names<'a>,
) -> Option<(Call<'a>, Option<CallMeta<'a>>)> {
    let mut r = Reader { b: bytes, i: 0 };
    let mut c = Call::default();
    // `None` costs one store per call; a v2 field fills it in place.
    let mut meta: Option<CallMeta<'a>> = None;
    while !r.done() {
        let (tag, wire) = r.key()?;
        match tag {
            1 => c.name = names.get(&mut r, wire)?,
            2 => c.arguments_json = Some(r.string(wire)?),
            3 => c.result = Some(r.string(wire)?),
            4 => c.error = r.uint(wire)? != 0,
            5 => {
                r.string(wire)?;
            }
            6 => meta.get_or_insert_default().start_time_unix_nano = r.uint(wire)?,
            7 => meta.get_or_insert_default().end_time_unix_nano = r.uint(wire)?,
            // prost reads a uint32 from a varint by truncation, as every protobuf runtime does.
            8 => meta.get_or_insert_default().turn = r.uint(wire)? as u32,
            9 => meta.get_or_insert_default().agent = r.string(wire)?,
            10 => meta.get_or_insert_default().server = r.string(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Some((c, meta))
}

fn decode_model_call(bytes: &[u8]) -> Option<ModelCall<'_>> {
    let mut r = Reader { b: bytes, i: 0 };
    let mut m = ModelCall::default();
    while !r.done() {
        let (tag, wire) = r.key()?;
        match tag {
            1 => m.model = r.string(wire)?,
            2 => m.input_tokens = r.uint(wire)?,
            3 => m.output_tokens = r.uint(wire)?,
            4 => {
                if wire != 1 {
                    return None;
                }
                let b = r.b.get(r.i..r.i + 8)?;
                m.cost = Some(f64::from_le_bytes(b.try_into().ok()?));
                r.i += 8;
            }
            5 => m.turn = r.uint(wire)? as u32,
            6 => m.agent = r.string(wire)?,
            7 => m.start_time_unix_nano = r.uint(wire)?,
            8 => m.end_time_unix_nano = r.uint(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Some(m)
}

fn decode_turn(bytes: &[u8]) -> Option<Turn<'_>> {
    let mut r = Reader { b: bytes, i: 0 };
    let mut t = Turn::default();
    while !r.done() {
        let (tag, wire) = r.key()?;
        match tag {
            1 => t.user_input = r.string(wire)?,
            2 => t.final_answer = r.string(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Some(t)
}

fn decode_entry(bytes: &[u8]) -> Option<(&str, &str)> {
    let mut r = Reader { b: bytes, i: 0 };
    let (mut k, mut v) = ("", "");
    while !r.done() {
        let (tag, wire) = r.key()?;
        match tag {
            1 => k = r.string(wire)?,
            2 => v = r.string(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Some((k, v))
}

/// The `id` (field 1) of a `Trace` that may not decode: the last readable value before the
/// first malformed byte, or `""`.
pub(crate) fn lenient_trace_id(bytes: &[u8]) -> String {
    let mut r = Reader { b: bytes, i: 0 };
    let mut id = "";
    while !r.done() {
        let Some((tag, wire)) = r.key() else { break };
        if tag == 1 && wire == 2 {
            match r.bytes() {
                Some(b) => id = std::str::from_utf8(b).unwrap_or(id),
                None => break,
            }
        } else if r.skip(wire).is_none() {
            break;
        }
    }
    id.to_owned()
}

/// The raw payload of message field `tag` when the top level of `bytes` holds it exactly once
/// (length-delimited) and never holds `rival` (the other member of its oneof); `None` for
/// anything else, malformed bytes and groups included (the caller then decodes normally).
pub(crate) fn sole_message_field(bytes: &[u8], tag: u32, rival: u32) -> Option<&[u8]> {
    let mut r = Reader { b: bytes, i: 0 };
    let mut found = None;
    while !r.done() {
        let (t, wire) = r.key()?;
        if t == rival {
            return None;
        }
        if t == tag {
            if wire != 2 || found.is_some() {
                return None;
            }
            found = Some(r.bytes()?);
        } else {
            r.skip(wire)?;
        }
    }
    found
}

/// The encoded size of top-level message field `tag` in `bytes`: the sum of its
/// length-delimited occurrences (protobuf merges repeated occurrences of a message field).
/// Reading stops at the first malformed field; the decoder reports that one.
pub(crate) fn message_field_len(bytes: &[u8], tag: u32) -> usize {
    let mut r = Reader { b: bytes, i: 0 };
    let mut total = 0usize;
    while !r.done() {
        let Some((t, wire)) = r.key() else { break };
        if t == tag && wire == 2 {
            let Some(value) = r.bytes() else { break };
            total = total.saturating_add(value.len());
        } else if r.skip(wire).is_none() {
            break;
        }
    }
    total
}

/// Every value of the length-delimited field `tag` at the top level of `bytes`, borrowed, in
/// order (other fields skipped); `None` for malformed framing or `tag` with another wire type.
pub(crate) fn repeated_len_field(bytes: &[u8], tag: u32) -> Option<Vec<&[u8]>> {
    let mut r = Reader { b: bytes, i: 0 };
    let mut values = Vec::new();
    while !r.done() {
        let (t, wire) = r.key()?;
        if t == tag {
            if wire != 2 {
                return None;
            }
            values.push(r.bytes()?);
        } else {
            r.skip(wire)?;
        }
    }
    Some(values)
}

/// A protobuf writer for the result messages (fields in tag order, defaults omitted: the
/// bytes prost writes for the same message).
pub(crate) struct Writer {
    pub buf: Vec<u8>,
}

#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    // As prost: (highest set bit of (v | 1)) * 9 + 73, over 64.
    (((v | 1).ilog2() * 9 + 73) / 64) as usize
}

/// Length of a length-delimited field with a 1-byte key, or 0 for an empty string.
#[inline]
pub(crate) fn str_field_len(s: &[u8]) -> usize {
    len_field_len(s.len())
}

/// Length of a length-delimited field with a 1-byte key holding `n` bytes, or 0 when `n` is 0
/// (an omitted default).
#[inline]
pub(crate) fn len_field_len(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        present_field_len(n)
    }
}

/// Length of a length-delimited field with a 1-byte key holding `n` bytes that is always
/// written (an optional string that is set, a message).
#[inline]
pub(crate) fn present_field_len(n: usize) -> usize {
    1 + varint_len(n as u64) + n
}

/// Length of a varint field with a 1-byte key, or 0 for zero.
#[inline]
pub(crate) fn varint_field_len(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        1 + varint_len(v)
    }
}

impl Writer {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Writer { buf: Vec::with_capacity(n) }
    }

    #[inline]
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    #[inline]
    pub(crate) fn key(&mut self, tag: u32, wire: u8) {
        self.varint(u64::from(tag << 3 | u32::from(wire)));
    }

    /// A string or bytes field; nothing for an empty value.
    #[inline]
    pub(crate) fn str_field(&mut self, tag: u32, s: &[u8]) {
        if !s.is_empty() {
            self.key(tag, 2);
            self.varint(s.len() as u64);
            self.buf.extend_from_slice(s);
        }
    }

    /// A varint field; nothing for zero.
    #[inline]
    pub(crate) fn varint_field(&mut self, tag: u32, v: u64) {
        if v != 0 {
            self.key(tag, 0);
            self.varint(v);
        }
    }

    /// The header of an embedded message of `len` bytes (always written: presence).
    #[inline]
    pub(crate) fn message_header(&mut self, tag: u32, len: usize) {
        self.key(tag, 2);
        self.varint(len as u64);
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::{decode_trace, varint_len};
    use crate::call_meta::CallMeta;
    use crate::proto::v1::{ModelCall, ToolCall, Trace, Turn};

    #[test]
    fn varint_len_matches_prost() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(varint_len(v), prost::encoding::encoded_len_varint(v), "{v}");
        }
    }

    #[test]
    fn repeated_and_many_tool_names() {
        let names: Vec<String> = (0..30).map(|i| format!("tool_{}é", i % 11)).collect();
        let t = Trace {
            calls: names
                .iter()
                .map(|n| ToolCall {
                    name: n.clone(),
                    arguments_json: Some("x".repeat(300)),
                    ..ToolCall::default()
                })
                .collect(),
            ..Trace::default()
        };
        let bytes = t.encode_to_vec();
        let p = decode_trace(&bytes).expect("decodes");
        let got: Vec<&str> = p.calls.iter().map(|c| c.name).collect();
        assert_eq!(got, names);
        // A name that is not UTF-8 is rejected even after valid ones.
        let mut bad = t.clone();
        bad.calls[20].name = "tool_1é".to_owned();
        let mut bytes = bad.encode_to_vec();
        let at = bytes.windows(8).rposition(|w| w == "tool_1é".as_bytes()).expect("found");
        bytes[at + 6] = 0xFF;
        assert!(decode_trace(&bytes).is_none() && Trace::decode(&bytes[..]).is_err());
    }

    #[test]
    fn v2_fields_decode_as_prost_does() {
        let t = Trace {
            calls: vec![ToolCall {
                name: "issue_refund".to_owned(),
                turn: 2,
                agent: "triage/billing".to_owned(),
                server: "payments-mcp".to_owned(),
                start_time_unix_nano: 1,
                end_time_unix_nano: 2_350_000_001,
                ..ToolCall::default()
            }],
            model_calls: vec![
                ModelCall {
                    model: "m".to_owned(),
                    input_tokens: 30_000,
                    output_tokens: u64::MAX,
                    cost: Some(-0.0),
                    turn: 1,
                    agent: "billing".to_owned(),
                    start_time_unix_nano: 3,
                    end_time_unix_nano: 4,
                },
                ModelCall::default(),
            ],
            turns: vec![
                Turn { user_input: "hi".to_owned(), final_answer: "done".to_owned() },
                Turn::default(),
            ],
            ..Trace::default()
        };
        let bytes = t.encode_to_vec();
        let p = decode_trace(&bytes).expect("decodes");
        let view = crate::trace::TraceView::new(&t, &crate::limits::Limits::default());
        assert_eq!(p.calls.as_slice(), view.calls());
        assert_eq!(p.call_metas.to_vec(1), [view.call_meta(0)]);
        assert_eq!(p.call_metas.get(0).server, "payments-mcp");
        assert_eq!(p.model_calls.as_slice(), view.model_calls());
        assert_eq!(p.model_calls[0].cost.map(f64::to_bits), Some((-0.0f64).to_bits()));
        assert_eq!(p.turns.as_slice(), view.turns());
        // A turn above u32 truncates as in prost; a cost with another wire type goes to prost.
        let wide = b"\x12\x06\x40\x80\x80\x80\x80\x10";
        let q = Trace::decode(&wide[..]).expect("prost decodes");
        assert_eq!(decode_trace(wide).expect("decodes").call_metas.get(0).turn, q.calls[0].turn);
        let bad_cost = b"\x2a\x02\x20\x01";
        assert!(decode_trace(bad_cost).is_none() && Trace::decode(&bad_cost[..]).is_err());
        let short_cost = b"\x2a\x05\x21\x00\x00\x00\x00";
        assert!(decode_trace(short_cost).is_none() && Trace::decode(&short_cost[..]).is_err());
    }

    #[test]
    fn borrowed_decode_agrees_with_prost() {
        let t = Trace {
            id: "t".to_owned(),
            calls: vec![
                ToolCall {
                    name: "a".to_owned(),
                    arguments_json: Some(String::new()),
                    result: None,
                    error: true,
                    id: "c1".to_owned(),
                    start_time_unix_nano: 5,
                    end_time_unix_nano: u64::MAX,
                    ..ToolCall::default()
                },
                ToolCall::default(),
            ],
            final_answer: "ok".to_owned(),
            metadata: [("k".to_owned(), "v".to_owned())].into_iter().collect(),
            ..Trace::default()
        };
        let bytes = t.encode_to_vec();
        let p = decode_trace(&bytes).expect("decodes");
        assert_eq!((p.id, p.final_answer, p.metadata.as_slice()), ("t", "ok", &[("k", "v")][..]));
        assert_eq!(p.calls.len(), 2);
        assert_eq!(
            (p.calls[0].name, p.calls[0].arguments_json, p.calls[0].result, p.calls[0].error),
            ("a", Some(""), None, true)
        );
        let timed = CallMeta {
            start_time_unix_nano: 5,
            end_time_unix_nano: u64::MAX,
            ..CallMeta::default()
        };
        assert_eq!(p.call_metas.to_vec(2), [timed, CallMeta::default()]);
        // Whatever prost rejects, the borrowed decoder rejects too (then prost reports it).
        for bad in [&b"\x0a"[..], b"\x0a\x01\xff", b"\x12\x02\x0a\x05", b"\x00", b"\x08\x01"] {
            assert!(Trace::decode(bad).is_err() && decode_trace(bad).is_none(), "{bad:?}");
        }
        // Unknown fields are skipped, later scalars win, as prost does.
        let odd = b"\x0a\x01x\x0a\x01y\x50\x07\x1a\x01z";
        let p = decode_trace(odd).expect("decodes");
        let q = Trace::decode(&odd[..]).expect("prost decodes");
        assert_eq!((p.id, p.final_answer), (q.id.as_str(), q.final_answer.as_str()));
    }
}
