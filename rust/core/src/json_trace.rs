//! Protobuf-JSON `Trace` lines (native JSONL) decoded in one pass into borrowed `TraceParts`.
//!
//! The scanner reads its tokens with the core's JSON tokenizer (`json/lex.rs`: whitespace,
//! punctuation, literals, numbers, string runs and escapes) and knows only the `Trace` shape;
//! it accepts a subset of what `serde_json` plus the pbjson impls accept, with the same
//! meaning: proto or lowerCamel field names in any order, `null` for the optional fields
//! (`arguments_json`, `result`, a model call's `cost`), integers (times, tokens, turns) as JSON
//! integers or digit strings, `cost` as a JSON number, map metadata (a later duplicate key wins,
//! as when the `HashMap` is filled). Everything else returns `None`: unknown, escaped or
//! repeated keys, `null` anywhere pbjson rejects it, floats, signs, leading zeros and overflow in
//! integers, a `cost` written as a string, bad escapes, lone surrogates, raw control characters,
//! invalid UTF-8, trailing data. The caller then decodes the line with `serde_json`, so every error and
//! every edge case keeps that path's exact behaviour and message.
//!
//! Strings without escapes are borrowed from the line; strings with escapes are unescaped into
//! one buffer per line (a word at a time where the tokenizer's `simple_escapes` allows), and
//! the parts borrow from it once the scan is done.
use crate::call_meta::{CallMeta, CallMetas};
use crate::json::lex::{self, Lexer};
use crate::trace::{Call, ModelCall, Turn};
use crate::wire::{len_field_len, present_field_len, varint_field_len, TraceParts};

/// A decoded line: the fields grading reads, and the length of the equivalent encoded `Trace`
/// (exact unless a metadata key repeats; then an upper bound, each entry counted).
#[derive(Debug)]
pub struct JsonParts<'a> {
    pub parts: TraceParts<'a>,
    pub encoded_len: usize,
}

/// Where a string's (unescaped) text lies: in the line, or in the per-line buffer.
#[derive(Clone, Copy, Default)]
struct Span {
    start: usize,
    end: usize,
    owned: bool,
}

impl Span {
    fn len(self) -> usize {
        self.end - self.start
    }
}

#[derive(Default)]
struct RawCall {
    name: Span,
    arguments_json: Option<Span>,
    result: Option<Span>,
    error: bool,
    start_time_unix_nano: u64,
    end_time_unix_nano: u64,
    turn: u32,
    agent: Span,
    server: Span,
}

#[derive(Default)]
struct RawModelCall {
    model: Span,
    input_tokens: u64,
    output_tokens: u64,
    cost: Option<f64>,
    turn: u32,
    agent: Span,
    start_time_unix_nano: u64,
    end_time_unix_nano: u64,
}

#[derive(Default)]
struct RawTrace {
    id: Span,
    calls: Vec<RawCall>,
    final_answer: Span,
    metadata: Vec<(Span, Span)>,
    model_calls: Vec<RawModelCall>,
    /// `(user_input, final_answer)` per turn.
    turns: Vec<(Span, Span)>,
    encoded_len: usize,
    /// Bytes of unescaped text in the buffer.
    owned_len: usize,
}

/// Decodes one line; `None` means "decode it with `serde_json`" (see the module docs).
/// `buf` receives the unescaped strings; the parts borrow from it and from `line`.
pub fn decode<'a>(line: &'a [u8], buf: &'a mut Vec<u8>) -> Option<JsonParts<'a>> {
    // serde_json rejects invalid UTF-8 wherever it occurs (inside a string, or as a stray byte
    // outside one), so a line that is not UTF-8 is always an error: leave it to serde.
    let text = std::str::from_utf8(line).ok()?;
    buf.clear();
    let raw = Scanner { lx: Lexer::new(line, 0), buf: &mut *buf, w: 0 }.trace()?;
    buf.truncate(raw.owned_len);
    let buf: &'a Vec<u8> = buf;
    let owned = std::str::from_utf8(buf).ok()?;
    let get = |s: Span| if s.owned { owned.get(s.start..s.end) } else { text.get(s.start..s.end) };
    let mut call_metas = CallMetas::default();
    let calls = raw
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            call_metas.set(
                i,
                CallMeta {
                    turn: c.turn,
                    agent: get(c.agent)?,
                    server: get(c.server)?,
                    start_time_unix_nano: c.start_time_unix_nano,
                    end_time_unix_nano: c.end_time_unix_nano,
                },
                raw.calls.len(),
            );
            Some(Call {
                name: get(c.name)?,
                arguments_json: match c.arguments_json {
                    Some(s) => Some(get(s)?),
                    None => None,
                },
                result: match c.result {
                    Some(s) => Some(get(s)?),
                    None => None,
                },
                error: c.error,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let metadata =
        raw.metadata.iter().map(|&(k, v)| Some((get(k)?, get(v)?))).collect::<Option<Vec<_>>>()?;
    let model_calls = raw
        .model_calls
        .iter()
        .map(|m| {
            Some(ModelCall {
                model: get(m.model)?,
                input_tokens: m.input_tokens,
                output_tokens: m.output_tokens,
                cost: m.cost,
                turn: m.turn,
                agent: get(m.agent)?,
                start_time_unix_nano: m.start_time_unix_nano,
                end_time_unix_nano: m.end_time_unix_nano,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let turns = raw
        .turns
        .iter()
        .map(|&(u, a)| Some(Turn { user_input: get(u)?, final_answer: get(a)? }))
        .collect::<Option<Vec<_>>>()?;
    Some(JsonParts {
        parts: TraceParts {
            id: get(raw.id)?,
            calls,
            call_metas,
            final_answer: get(raw.final_answer)?,
            metadata,
            model_calls,
            turns,
        },
        encoded_len: raw.encoded_len,
    })
}

/// A uint64 as `serde_json` + pbjson's `NumberDeserialize` read it from digits alone.
fn digits_u64(d: &[u8]) -> Option<u64> {
    if d.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// One escape whose letter is at `at` (after the backslash), written to `buf` at `w` as UTF-8;
/// returns the indexes after it in `b` and `buf`. `None` for what serde decides: unknown
/// escapes, bad hex, lone surrogates.
#[inline]
fn unescape(b: &[u8], at: usize, buf: &mut [u8], w: usize) -> Option<(usize, usize)> {
    let mut lx = Lexer::new(b, at);
    let code = lx.escape().ok()?;
    if code < 0x80 {
        *buf.get_mut(w)? = code as u8;
        return Some((lx.i, w + 1));
    }
    // A lone surrogate is not a char.
    let ch = char::from_u32(code)?;
    let n = ch.len_utf8();
    ch.encode_utf8(buf.get_mut(w..w + n)?);
    Some((lx.i, w + n))
}

struct Scanner<'s> {
    lx: Lexer<'s>,
    /// Unescaped strings: sized to the line at the first escape, filled up to `w`.
    buf: &'s mut Vec<u8>,
    w: usize,
}

// Field bits of the `seen` masks: a key met twice leaves the line to serde (pbjson reports a
// duplicate field, or accepts a repeat after `null`; either way its own answer).
const ID: u8 = 1;
const CALLS: u8 = 2;
const FINAL_ANSWER: u8 = 4;
const METADATA: u8 = 8;
const MODEL_CALLS: u8 = 16;
const TURNS: u8 = 32;
const NAME: u16 = 1;
const ARGUMENTS: u16 = 2;
const RESULT: u16 = 4;
const ERROR: u16 = 8;
const CALL_ID: u16 = 16;
const START: u16 = 32;
const END: u16 = 64;
const TURN: u16 = 128;
const AGENT: u16 = 256;
const SERVER: u16 = 512;
// Model call fields (START, END, TURN and AGENT above are shared).
const MODEL: u16 = 1;
const INPUT: u16 = 2;
const OUTPUT: u16 = 4;
const COST: u16 = 8;
// Turn fields.
const USER_INPUT: u16 = 1;
const TURN_ANSWER: u16 = 2;

/// Sets `bit` in `seen`; `None` when it was already set (a repeated key).
#[inline]
fn first_time(seen: &mut u16, bit: u16) -> Option<()> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    Some(())
}

impl Scanner<'_> {
    #[inline]
    fn expect(&mut self, c: u8) -> Option<()> {
        self.lx.eat(c).then_some(())
    }

    /// `"key":` with no escape in the key.
    #[inline]
    fn key(&mut self) -> Option<&[u8]> {
        self.expect(b'"')?;
        let start = self.lx.i;
        let end = lex::scan_string::<true>(self.lx.s, start);
        if self.lx.s.get(end) != Some(&b'"') {
            return None;
        }
        self.lx.i = end + 1;
        self.expect(b':')?;
        self.lx.ws();
        Some(&self.lx.s[start..end])
    }

    /// A string value at the cursor.
    #[inline]
    fn string(&mut self) -> Option<Span> {
        if self.lx.s.get(self.lx.i) != Some(&b'"') {
            return None;
        }
        let start = self.lx.i + 1;
        let end = lex::scan_string::<true>(self.lx.s, start);
        match *self.lx.s.get(end)? {
            b'"' => {
                self.lx.i = end + 1;
                Some(Span { start, end, owned: false })
            }
            b'\\' => self.escaped(start, end),
            _ => None,
        }
    }

    /// A string value or `null` (the optional strings) into `out`.
    fn optional_string(&mut self, out: &mut Option<Span>) -> Option<()> {
        *out = if self.lx.literal(b"null") { None } else { Some(self.string()?) };
        Some(())
    }

    /// The rest of a string with escapes, from `start` (its first byte) with the first `\` at
    /// `at`: unescaped into `buf` at the cursor `w`. Argument text is escape-dense (every quote
    /// of the embedded JSON), so plain bytes are copied a word at a time into a buffer sized
    /// once (unescaped text is never longer than its escaped form), the cursor moving only past
    /// the bytes before the next special one: no search, growth or variable copy per escape.
    fn escaped(&mut self, start: usize, mut at: usize) -> Option<Span> {
        let line = self.lx.s;
        let buf = &mut *self.buf;
        if buf.is_empty() {
            buf.resize(line.len(), 0);
        }
        let out = self.w;
        let mut end = out + (at - start);
        buf.get_mut(out..end)?.copy_from_slice(&line[start..at]);
        loop {
            // line[at] is special: a backslash starts an escape, a quote ends the string.
            let byte = line[at];
            if byte == b'\\' {
                (at, end) = unescape(line, at + 1, buf, end)?;
            } else if byte == b'"' {
                self.lx.i = at + 1;
                self.w = end;
                return Some(Span { start: out, end, owned: true });
            } else {
                return None;
            }
            loop {
                if let Some(chunk) = line.get(at..at + 8) {
                    let mut word = [0u8; 8];
                    word.copy_from_slice(chunk);
                    let w = u64::from_le_bytes(word);
                    if let Some((compact, kept)) = lex::simple_escapes(w) {
                        buf.get_mut(end..end + 8)?.copy_from_slice(&compact.to_le_bytes());
                        at += 8;
                        end += kept;
                        continue;
                    }
                    buf.get_mut(end..end + 8)?.copy_from_slice(&word);
                    let m = lex::special_mask::<true>(w);
                    let k = (m.trailing_zeros() / 8) as usize;
                    at += k;
                    end += k;
                    break;
                }
                let byte = *line.get(at)?;
                if lex::is_special::<true>(byte) {
                    break;
                }
                *buf.get_mut(end)? = byte;
                at += 1;
                end += 1;
            }
        }
    }

    fn bool(&mut self) -> Option<bool> {
        if self.lx.literal(b"true") {
            Some(true)
        } else if self.lx.literal(b"false") {
            Some(false)
        } else {
            None
        }
    }

    /// A uint64 (times, tokens): a JSON integer (no sign, no leading zero, no fraction or exponent) or a
    /// string of ASCII digits, within u64.
    fn uint64(&mut self) -> Option<u64> {
        match *self.lx.s.get(self.lx.i)? {
            b'"' => {
                let s = self.string()?;
                if s.owned {
                    return None;
                }
                digits_u64(&self.lx.s[s.start..s.end])
            }
            b'0'..=b'9' => {
                let n = self.lx.number().ok()?;
                if !n.is_integer() {
                    return None;
                }
                digits_u64(&self.lx.s[n.int.0..n.int.1])
            }
            _ => None,
        }
    }

    /// A uint32 (a turn): as `uint64`, within u32.
    fn uint32(&mut self) -> Option<u32> {
        u32::try_from(self.uint64()?).ok()
    }

    /// A double written as a JSON number (a string form, `"NaN"` or `"1.5"`, is left to serde),
    /// read by `serde_json` itself so the value is bit for bit the one the serde path reads.
    fn double(&mut self) -> Option<f64> {
        let n = self.lx.number().ok()?;
        serde_json::from_slice(&self.lx.s[n.start..self.lx.i]).ok()
    }

    fn trace(mut self) -> Option<RawTrace> {
        let mut t = RawTrace::default();
        self.expect(b'{')?;
        let mut seen = 0u8;
        if !self.lx.eat(b'}') {
            loop {
                let bit = match self.key()? {
                    b"id" => ID,
                    b"calls" => CALLS,
                    b"final_answer" | b"finalAnswer" => FINAL_ANSWER,
                    b"metadata" => METADATA,
                    b"model_calls" | b"modelCalls" => MODEL_CALLS,
                    b"turns" => TURNS,
                    _ => return None,
                };
                if seen & bit != 0 {
                    return None;
                }
                seen |= bit;
                match bit {
                    ID => t.id = self.string()?,
                    CALLS => self.calls(&mut t)?,
                    FINAL_ANSWER => t.final_answer = self.string()?,
                    METADATA => self.metadata(&mut t)?,
                    MODEL_CALLS => self.list(&mut t, Self::model_call)?,
                    _ => self.list(&mut t, Self::turn)?,
                }
                if !self.lx.more(b'}')? {
                    break;
                }
            }
        }
        self.lx.ws();
        if self.lx.i != self.lx.s.len() {
            return None;
        }
        t.encoded_len += len_field_len(t.id.len()) + len_field_len(t.final_answer.len());
        t.owned_len = self.w;
        Some(t)
    }

    fn calls(&mut self, t: &mut RawTrace) -> Option<()> {
        self.expect(b'[')?;
        if self.lx.eat(b']') {
            return Some(());
        }
        t.calls.reserve(16);
        loop {
            let (call, len) = self.call()?;
            t.calls.push(call);
            t.encoded_len += present_field_len(len);
            if !self.lx.more(b']')? {
                return Some(());
            }
        }
    }

    /// One `ToolCall` object and its encoded length.
    fn call(&mut self) -> Option<(RawCall, usize)> {
        let mut c = RawCall::default();
        let mut len = 0;
        self.expect(b'{')?;
        if self.lx.eat(b'}') {
            return Some((c, len));
        }
        let mut seen = 0u16;
        loop {
            let bit = match self.key()? {
                b"name" => NAME,
                b"arguments_json" | b"argumentsJson" => ARGUMENTS,
                b"result" => RESULT,
                b"error" => ERROR,
                b"id" => CALL_ID,
                b"start_time_unix_nano" | b"startTimeUnixNano" => START,
                b"end_time_unix_nano" | b"endTimeUnixNano" => END,
                b"turn" => TURN,
                b"agent" => AGENT,
                b"server" => SERVER,
                _ => return None,
            };
            first_time(&mut seen, bit)?;
            match bit {
                NAME => {
                    c.name = self.string()?;
                    len += len_field_len(c.name.len());
                }
                ARGUMENTS => {
                    self.optional_string(&mut c.arguments_json)?;
                    len += c.arguments_json.map_or(0, |s| present_field_len(s.len()));
                }
                RESULT => {
                    self.optional_string(&mut c.result)?;
                    len += c.result.map_or(0, |s| present_field_len(s.len()));
                }
                ERROR => {
                    c.error = self.bool()?;
                    len += if c.error { 2 } else { 0 };
                }
                CALL_ID => len += len_field_len(self.string()?.len()),
                START => {
                    c.start_time_unix_nano = self.uint64()?;
                    len += varint_field_len(c.start_time_unix_nano);
                }
                END => {
                    c.end_time_unix_nano = self.uint64()?;
                    len += varint_field_len(c.end_time_unix_nano);
                }
                TURN => {
                    c.turn = self.uint32()?;
                    len += varint_field_len(c.turn.into());
                }
                AGENT => {
                    c.agent = self.string()?;
                    len += len_field_len(c.agent.len());
                }
                _ => {
                    c.server = self.string()?;
                    len += len_field_len(c.server.len());
                }
            }
            if !self.lx.more(b'}')? {
                return Some((c, len));
            }
        }
    }

    /// A JSON array of messages, each read by `item` into `t` (returning its encoded length).
    fn list(
        &mut self,
        t: &mut RawTrace,
        item: fn(&mut Self, &mut RawTrace) -> Option<usize>,
    ) -> Option<()> {
        self.expect(b'[')?;
        if self.lx.eat(b']') {
            return Some(());
        }
        loop {
            self.lx.ws();
            let len = item(self, t)?;
            t.encoded_len += present_field_len(len);
            if !self.lx.more(b']')? {
                return Some(());
            }
        }
    }

    /// One `ModelCall` object pushed to `t.model_calls`; returns its encoded length.
    fn model_call(&mut self, t: &mut RawTrace) -> Option<usize> {
        let mut m = RawModelCall::default();
        let mut len = 0;
        self.expect(b'{')?;
        let mut seen = 0u16;
        if !self.lx.eat(b'}') {
            loop {
                let bit = match self.key()? {
                    b"model" => MODEL,
                    b"input_tokens" | b"inputTokens" => INPUT,
                    b"output_tokens" | b"outputTokens" => OUTPUT,
                    b"cost" => COST,
                    b"turn" => TURN,
                    b"agent" => AGENT,
                    b"start_time_unix_nano" | b"startTimeUnixNano" => START,
                    b"end_time_unix_nano" | b"endTimeUnixNano" => END,
                    _ => return None,
                };
                first_time(&mut seen, bit)?;
                match bit {
                    MODEL => {
                        m.model = self.string()?;
                        len += len_field_len(m.model.len());
                    }
                    AGENT => {
                        m.agent = self.string()?;
                        len += len_field_len(m.agent.len());
                    }
                    COST => {
                        m.cost = if self.lx.literal(b"null") { None } else { Some(self.double()?) };
                        // An optional double: key and 8 bytes whenever set.
                        len += if m.cost.is_some() { 9 } else { 0 };
                    }
                    TURN => {
                        m.turn = self.uint32()?;
                        len += varint_field_len(m.turn.into());
                    }
                    _ => {
                        let v = self.uint64()?;
                        len += varint_field_len(v);
                        match bit {
                            INPUT => m.input_tokens = v,
                            OUTPUT => m.output_tokens = v,
                            START => m.start_time_unix_nano = v,
                            _ => m.end_time_unix_nano = v,
                        }
                    }
                }
                if !self.lx.more(b'}')? {
                    break;
                }
            }
        }
        t.model_calls.push(m);
        Some(len)
    }

    /// One `Turn` object pushed to `t.turns`; returns its encoded length.
    fn turn(&mut self, t: &mut RawTrace) -> Option<usize> {
        let (mut user_input, mut answer) = (Span::default(), Span::default());
        self.expect(b'{')?;
        let mut seen = 0u16;
        if !self.lx.eat(b'}') {
            loop {
                let bit = match self.key()? {
                    b"user_input" | b"userInput" => USER_INPUT,
                    b"final_answer" | b"finalAnswer" => TURN_ANSWER,
                    _ => return None,
                };
                first_time(&mut seen, bit)?;
                if bit == USER_INPUT {
                    user_input = self.string()?;
                } else {
                    answer = self.string()?;
                }
                if !self.lx.more(b'}')? {
                    break;
                }
            }
        }
        t.turns.push((user_input, answer));
        Some(len_field_len(user_input.len()) + len_field_len(answer.len()))
    }

    fn metadata(&mut self, t: &mut RawTrace) -> Option<()> {
        self.expect(b'{')?;
        if self.lx.eat(b'}') {
            return Some(());
        }
        loop {
            self.lx.ws();
            let k = self.string()?;
            self.expect(b':')?;
            self.lx.ws();
            let v = self.string()?;
            let entry = len_field_len(k.len()) + len_field_len(v.len());
            t.encoded_len += present_field_len(entry);
            t.metadata.push((k, v));
            if !self.lx.more(b'}')? {
                return Some(());
            }
        }
    }
}

/// Random native trace lines for the differential tests (here and in batch.rs): valid lines in
/// every form the mapping allows, and the same lines with one defect or oddity each.
#[cfg(test)]
pub(crate) mod generate {
    use std::fmt::Write as _;

    pub(crate) use crate::test_rng::Rng;

    const CHARS: &[char] = &[
        'a', 'b', 'z', 'A', '0', '9', ' ', '"', '\\', '/', '\n', '\t', '\r', '\u{8}', '\u{c}',
        '\u{0}', '\u{1f}', '\u{7f}', 'é', 'ü', 'Ω', '€', '中', '\u{2028}', '\u{fffd}', '😀', '𝄞',
        '{', '}', '[', ']', ':', ',',
    ];

    /// Random text; `json` makes it a short JSON document sometimes (argument-like).
    pub fn text(rng: &mut Rng, json: bool) -> String {
        if json && rng.chance(50) {
            let mut s = String::from("{\"order\": {\"id\": \"ord-");
            let _ = write!(
                s,
                "{}\", \"name\": \"Zoë\"}}, \"amount\": {}}}",
                rng.below(1000),
                rng.below(10)
            );
            return s;
        }
        let n = rng.pick(&[0usize, 1, 2, 5, 12, 40, 300]);
        (0..n).map(|_| if rng.chance(70) { 'x' } else { rng.pick(CHARS) }).collect()
    }

    /// `s` as a JSON string literal, escapes chosen at random among the equivalent forms.
    pub fn quote(rng: &mut Rng, s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            let forced = c == '"' || c == '\\' || (c as u32) < 0x20;
            if !forced && !rng.chance(10) {
                out.push(c);
                continue;
            }
            match c {
                '"' if rng.chance(80) => out.push_str("\\\""),
                '\\' if rng.chance(80) => out.push_str("\\\\"),
                '/' => out.push_str("\\/"),
                '\n' if rng.chance(70) => out.push_str("\\n"),
                '\t' if rng.chance(70) => out.push_str("\\t"),
                '\r' if rng.chance(70) => out.push_str("\\r"),
                '\u{8}' if rng.chance(70) => out.push_str("\\b"),
                '\u{c}' if rng.chance(70) => out.push_str("\\f"),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        if rng.chance(50) {
                            let _ = write!(out, "\\u{u:04x}");
                        } else {
                            let _ = write!(out, "\\u{u:04X}");
                        }
                    }
                }
            }
        }
        out.push('"');
        out
    }

    fn quoted_text(rng: &mut Rng, json: bool) -> String {
        let t = text(rng, json);
        quote(rng, &t)
    }

    fn ws(rng: &mut Rng) -> &'static str {
        if rng.chance(80) {
            ""
        } else {
            rng.pick(&[" ", "\n", "\t", "\r\n", "  "])
        }
    }

    fn key(rng: &mut Rng, proto: &str, camel: &str) -> String {
        format!("\"{}\"", if rng.chance(50) { proto } else { camel })
    }

    fn time(rng: &mut Rng) -> String {
        let v = rng.pick(&[0u64, 1, 42, 1_700_000_000_000_000_000, u64::MAX]);
        match rng.below(3) {
            0 => v.to_string(),
            1 => format!("\"{v}\""),
            _ => format!("\"{}{v}\"", "0".repeat(rng.below(3))),
        }
    }

    fn object(rng: &mut Rng, mut members: Vec<String>) -> String {
        // Any order (a map in JSON).
        for i in (1..members.len()).rev() {
            members.swap(i, rng.below(i + 1));
        }
        let mut s = String::from("{");
        s.push_str(ws(rng));
        for (i, m) in members.iter().enumerate() {
            if i > 0 {
                s.push_str(ws(rng));
                s.push(',');
                s.push_str(ws(rng));
            }
            s.push_str(m);
        }
        s.push_str(ws(rng));
        s.push('}');
        s
    }

    fn member(rng: &mut Rng, key: &str, value: &str) -> String {
        format!("{key}{}:{}{value}", ws(rng), ws(rng))
    }

    fn call(rng: &mut Rng) -> String {
        let mut m = Vec::new();
        if rng.chance(90) {
            let v = quoted_text(rng, false);
            m.push(member(rng, "\"name\"", &v));
        }
        for (proto, camel) in [("arguments_json", "argumentsJson"), ("result", "result")] {
            if rng.chance(80) {
                let k = key(rng, proto, camel);
                let v = if rng.chance(15) { "null".to_owned() } else { quoted_text(rng, true) };
                m.push(member(rng, &k, &v));
            }
        }
        if rng.chance(40) {
            let v = if rng.chance(50) { "true" } else { "false" };
            m.push(member(rng, "\"error\"", v));
        }
        if rng.chance(30) {
            let v = quoted_text(rng, false);
            m.push(member(rng, "\"id\"", &v));
        }
        for (proto, camel) in [
            ("start_time_unix_nano", "startTimeUnixNano"),
            ("end_time_unix_nano", "endTimeUnixNano"),
        ] {
            if rng.chance(30) {
                let k = key(rng, proto, camel);
                let v = time(rng);
                m.push(member(rng, &k, &v));
            }
        }
        v2_common(rng, &mut m);
        if rng.chance(20) {
            let v = quoted_text(rng, false);
            m.push(member(rng, "\"server\"", &v));
        }
        object(rng, m)
    }

    /// The SPEC v2 `turn` and `agent` members a call and a model call share.
    fn v2_common(rng: &mut Rng, m: &mut Vec<String>) {
        if rng.chance(25) {
            let v = rng.pick(&[0u64, 1, 3, u64::from(u32::MAX)]);
            let v = if rng.chance(50) { v.to_string() } else { format!("\"{v}\"") };
            m.push(member(rng, "\"turn\"", &v));
        }
        if rng.chance(25) {
            let agent = rng.pick(&["", "triage", "triage/billing", "é/x"]);
            let v = quote(rng, agent);
            m.push(member(rng, "\"agent\"", &v));
        }
    }

    fn model_call(rng: &mut Rng) -> String {
        let mut m = Vec::new();
        if rng.chance(70) {
            let model = rng.pick(&["gpt-x", "", "claude"]);
            let v = quote(rng, model);
            m.push(member(rng, "\"model\"", &v));
        }
        for (proto, camel) in [
            ("input_tokens", "inputTokens"),
            ("output_tokens", "outputTokens"),
            ("start_time_unix_nano", "startTimeUnixNano"),
            ("end_time_unix_nano", "endTimeUnixNano"),
        ] {
            if rng.chance(50) {
                let k = key(rng, proto, camel);
                let v = time(rng);
                m.push(member(rng, &k, &v));
            }
        }
        if rng.chance(60) {
            let v = rng.pick(&[
                "null",
                "0",
                "-0",
                "0.5",
                "1e-3",
                "2E2",
                "0.1",
                "12345678901234567890",
                "1.7976931348623157e308",
                "3.141592653589793238462643383279",
                "-2.5",
            ]);
            m.push(member(rng, "\"cost\"", v));
        }
        v2_common(rng, &mut m);
        object(rng, m)
    }

    fn turn(rng: &mut Rng) -> String {
        let mut m = Vec::new();
        for (proto, camel) in [("user_input", "userInput"), ("final_answer", "finalAnswer")] {
            if rng.chance(70) {
                let k = key(rng, proto, camel);
                let v = quoted_text(rng, false);
                m.push(member(rng, &k, &v));
            }
        }
        object(rng, m)
    }

    /// `"key": [items]` with `n` items made by `item`.
    fn array(rng: &mut Rng, key: &str, n: usize, item: fn(&mut Rng) -> String) -> String {
        let items: Vec<String> = (0..n).map(|_| item(rng)).collect();
        let sep = format!("{},{}", ws(rng), ws(rng));
        member(rng, key, &format!("[{}]", items.join(&sep)))
    }

    /// A valid line.
    pub fn line(rng: &mut Rng) -> String {
        let mut m = Vec::new();
        if rng.chance(90) {
            let id = format!("t{}", rng.below(100));
            let v = quote(rng, &id);
            m.push(member(rng, "\"id\"", &v));
        }
        if rng.chance(90) {
            let n = rng.pick(&[0usize, 1, 2, 3, 8]);
            m.push(array(rng, "\"calls\"", n, call));
        }
        if rng.chance(30) {
            let n = rng.pick(&[0usize, 1, 2, 5]);
            let k = key(rng, "model_calls", "modelCalls");
            m.push(array(rng, &k, n, model_call));
        }
        if rng.chance(20) {
            let n = rng.pick(&[0usize, 1, 3]);
            m.push(array(rng, "\"turns\"", n, turn));
        }
        if rng.chance(70) {
            let k = key(rng, "final_answer", "finalAnswer");
            let v = quoted_text(rng, false);
            m.push(member(rng, &k, &v));
        }
        if rng.chance(40) {
            let n = rng.below(4);
            let entries: Vec<String> = (0..n)
                .map(|_| {
                    let k = rng.pick(&["env", "region", "", "é", "a\"b"]);
                    let k = quote(rng, k);
                    let v = quoted_text(rng, false);
                    member(rng, &k, &v)
                })
                .collect();
            let map = object(rng, entries);
            m.push(member(rng, "\"metadata\"", &map));
        }
        let mut s = format!("{}{}{}", ws(rng), object(rng, m), ws(rng));
        if rng.chance(50) {
            s.push('\n');
        }
        s
    }

    const ODD_INSERTS: &[&str] = &[
        ",\"unknown\":1",
        ",\"id\":\"again\"",
        ",\"final_answer\":\"a\",\"finalAnswer\":\"b\"",
        ",\"i\\u0064\":\"x\"",
        ",\"metadata\":{\"k\":\"v\",\"k\":\"w\"}",
        ",\"metadata\":{\"k\":null}",
        ",\"metadata\":{\"k\":1}",
        ",\"metadata\":null",
        ",\"calls\":null",
        ",\"calls\":[null]",
        ",\"calls\":[{\"name\":\"a\",\"arguments_json\":null,\"arguments_json\":\"{}\"}]",
        ",\"calls\":[{\"name\":\"a\",\"argumentsJson\":\"{}\",\"arguments_json\":\"{}\"}]",
        ",\"calls\":[{\"error\":1}]",
        ",\"calls\":[{\"error\":null}]",
        ",\"calls\":[{\"error\":\"true\"}]",
        ",\"calls\":[{\"name\":null}]",
        ",\"calls\":[{\"id\":null}]",
        ",\"calls\":[{\"start_time_unix_nano\":null}]",
        ",\"calls\":[{\"start_time_unix_nano\":-1}]",
        ",\"calls\":[{\"start_time_unix_nano\":-0}]",
        ",\"calls\":[{\"start_time_unix_nano\":1.0}]",
        ",\"calls\":[{\"start_time_unix_nano\":1e3}]",
        ",\"calls\":[{\"start_time_unix_nano\":01}]",
        ",\"calls\":[{\"start_time_unix_nano\":18446744073709551616}]",
        ",\"calls\":[{\"start_time_unix_nano\":\"18446744073709551616\"}]",
        ",\"calls\":[{\"start_time_unix_nano\":\"+5\"}]",
        ",\"calls\":[{\"start_time_unix_nano\":\"-5\"}]",
        ",\"calls\":[{\"start_time_unix_nano\":\"\"}]",
        ",\"calls\":[{\"start_time_unix_nano\":\" 5\"}]",
        ",\"calls\":[{\"start_time_unix_nano\":\"5\\u0030\"}]",
        ",\"calls\":[{\"start_time_unix_nano\":\"1.0\"}]",
        ",\"calls\":[{\"end_time_unix_nano\":true}]",
        ",\"calls\":[{\"nam\":\"a\"}]",
        ",\"calls\":[{\"name\":\"a\",}]",
        ",\"calls\":[{\"name\":\"a\"},]",
        ",\"calls\":[{\"name\":\"\\ud800\"}]",
        ",\"calls\":[{\"name\":\"\\udc00\"}]",
        ",\"calls\":[{\"name\":\"\\ud800\\u0041\"}]",
        ",\"calls\":[{\"name\":\"\\ud800x\"}]",
        ",\"calls\":[{\"name\":\"\\ud83d\\ude00\"}]",
        ",\"calls\":[{\"name\":\"\\x\"}]",
        ",\"calls\":[{\"name\":\"\\u12\"}]",
        ",\"calls\":[{\"name\":\"\\u12G4\"}]",
        ",\"calls\":[{\"name\":\"a\tb\"}]",
        ",\"calls\":[{\"name\":\"a\u{1}b\"}]",
        ",\"calls\":[{\"name\":\"a\u{7f}b\"}]",
        ",\"calls\":[{\"result\":{}}]",
        ",\"calls\":[{\"turn\":4294967296}]",
        ",\"calls\":[{\"turn\":\"4294967296\"}]",
        ",\"calls\":[{\"turn\":null}]",
        ",\"calls\":[{\"turn\":-1}]",
        ",\"calls\":[{\"turn\":1.5}]",
        ",\"calls\":[{\"agent\":null}]",
        ",\"calls\":[{\"server\":7}]",
        ",\"calls\":[{\"agent\":\"a\",\"agent\":\"b\"}]",
        ",\"model_calls\":null",
        ",\"model_calls\":[null]",
        ",\"model_calls\":{}",
        ",\"modelCalls\":[{\"cost\":\"1.5\"}]",
        ",\"modelCalls\":[{\"cost\":\"NaN\"}]",
        ",\"modelCalls\":[{\"cost\":1e400}]",
        ",\"modelCalls\":[{\"cost\":01}]",
        ",\"modelCalls\":[{\"cost\":1.}]",
        ",\"modelCalls\":[{\"cost\":-}]",
        ",\"modelCalls\":[{\"cost\":true}]",
        ",\"modelCalls\":[{\"cost\":null,\"cost\":1}]",
        ",\"model_calls\":[],\"modelCalls\":[]",
        ",\"model_calls\":[{\"input_tokens\":-1}]",
        ",\"model_calls\":[{\"inputTokens\":1,\"input_tokens\":2}]",
        ",\"model_calls\":[{\"tokens\":1}]",
        ",\"model_calls\":[{\"turn\":4294967296}]",
        ",\"turns\":[{\"user_input\":null}]",
        ",\"turns\":[{\"userInput\":\"a\",\"user_input\":\"b\"}]",
        ",\"turns\":[{\"answer\":\"a\"}]",
        ",\"turns\":[{}],\"turns\":[]",
        ",\"turns\":[1]",
        ",\"calls\":{}",
        ",\"id\":7",
        ",\"final_answer\":null",
        ",\"id\":\"\\u0000\"",
        ",\"metadata\":{\"k\\u00e9\":\"v\\n\"}",
        ",\"metadata\":{,}",
        ",}",
        ",",
    ];

    /// A valid line with one oddity: an inserted member, a cut, a changed byte, trailing data.
    pub fn odd_line(rng: &mut Rng) -> Vec<u8> {
        let base = line(rng).trim_end().to_owned();
        let mut b = base.into_bytes();
        match rng.below(6) {
            0 | 1 => {
                // Insert after the opening brace (as the first member) or before the closing one.
                let insert = rng.pick(ODD_INSERTS).as_bytes();
                let close = b.iter().rposition(|&c| c == b'}').unwrap_or(0);
                let empty = b[..close].iter().filter(|c| !c.is_ascii_whitespace()).count() == 1;
                let mut tail = b.split_off(close);
                b.extend_from_slice(if empty { &insert[1..] } else { insert });
                b.append(&mut tail);
            }
            2 => {
                let at = rng.below(b.len() + 1);
                b.truncate(at);
            }
            3 => {
                if !b.is_empty() {
                    let at = rng.below(b.len());
                    b[at] =
                        rng.pick(&[0xFF, 0xC3, 0x80, b'"', b'\\', b'{', b'}', b',', b'0', 0x01]);
                }
            }
            4 => b.extend_from_slice(rng.pick(&[&b"x"[..], b"{}", b" \x0c", b",", b"\n\n \t"])),
            _ => {
                b = rng
                    .pick(&[
                        &b"null"[..],
                        b"[]",
                        b"{}",
                        b" { } ",
                        b"",
                        b"\xEF\xBB\xBF{}",
                        b"\"x\"",
                        b"[{\"id\":\"x\"}]",
                    ])
                    .to_vec();
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message;

    use super::decode;
    use super::generate::{self, Rng};
    use crate::proto::v1::Trace;

    /// The fast decoder agrees with `serde_json` + pbjson: whatever it decodes, serde decodes to
    /// the same trace. Returns whether the fast path decoded the line.
    fn agrees(line: &[u8]) -> bool {
        let mut buf = Vec::new();
        let Some(fast) = decode(line, &mut buf) else {
            return false;
        };
        let shown = String::from_utf8_lossy(line);
        let t: Trace = match serde_json::from_slice(line) {
            Ok(t) => t,
            Err(e) => panic!("the fast path accepts what serde rejects ({e}): {shown}"),
        };
        let p = &fast.parts;
        assert_eq!((p.id, p.final_answer), (t.id.as_str(), t.final_answer.as_str()), "{shown}");
        assert_eq!(p.calls.len(), t.calls.len(), "{shown}");
        for (a, b) in p.calls.iter().zip(&t.calls) {
            assert_eq!(*a, crate::trace::Call::from_message(b), "{shown}");
        }
        let model_calls: Vec<_> =
            t.model_calls.iter().map(crate::trace::ModelCall::from_message).collect();
        assert_eq!(p.model_calls, model_calls, "{shown}");
        for (a, b) in p.model_calls.iter().zip(&model_calls) {
            // Bit for bit (PartialEq on f64 would let 0.0 equal -0.0).
            assert_eq!(a.cost.map(f64::to_bits), b.cost.map(f64::to_bits), "{shown}");
        }
        let turns: Vec<_> = t
            .turns
            .iter()
            .map(|u| crate::trace::Turn {
                user_input: &u.user_input,
                final_answer: &u.final_answer,
            })
            .collect();
        assert_eq!(p.turns, turns, "{shown}");
        let meta: HashMap<&str, &str> = p.metadata.iter().copied().collect();
        let expected: HashMap<&str, &str> =
            t.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(meta, expected, "{shown}");
        if meta.len() == p.metadata.len() {
            assert_eq!(fast.encoded_len, t.encoded_len(), "{shown}");
        } else {
            assert!(fast.encoded_len >= t.encoded_len(), "{shown}");
        }
        true
    }

    #[test]
    fn valid_lines_decode_as_serde_does() {
        let mut rng = Rng(7);
        for _ in 0..20_000 {
            let line = generate::line(&mut rng);
            assert!(agrees(line.as_bytes()), "not decoded by the fast path: {line}");
        }
    }

    #[test]
    fn odd_lines_never_decode_differently() {
        let mut rng = Rng(11);
        let mut fast = 0;
        for _ in 0..60_000 {
            if agrees(&generate::odd_line(&mut rng)) {
                fast += 1;
            }
        }
        // Some oddities are valid (metadata duplicates, escapes, trailing whitespace).
        assert!(fast > 1_000, "{fast}");
    }

    #[test]
    fn known_cases() {
        let decoded: &[&[u8]] = &[
            b"{}",
            b" {\"id\":\"\"} \r\n",
            br#"{"calls":[{}],"metadata":{}}"#,
            br#"{"calls":[{"argumentsJson":null,"result":"","startTimeUnixNano":"007"}]}"#,
            br#"{"id":"\ud83d\ude00\u00e9\/","metadata":{"k":"1","k":"2"}}"#,
            br#"{"calls":[{"end_time_unix_nano":18446744073709551615,"error":false}]}"#,
        ];
        for line in decoded {
            assert!(agrees(line), "{}", String::from_utf8_lossy(line));
        }
        let left_to_serde: &[&[u8]] = &[
            b"",
            b"null",
            b"{\"id\":\"x\"}x",
            br#"{"id":"x","id":"y"}"#,
            br#"{"i\u0064":"x"}"#,
            br#"{"calls":[{"name":"\ud800"}]}"#,
            br#"{"calls":[{"start_time_unix_nano":-1}]}"#,
            br#"{"calls":[{"start_time_unix_nano":"+1"}]}"#,
            br#"{"calls":[{"start_time_unix_nano":18446744073709551616}]}"#,
            b"{\"id\":\"\xff\"}",
            b"{\"id\":\"a\x01\"}",
        ];
        for line in left_to_serde {
            let mut buf = Vec::new();
            assert!(decode(line, &mut buf).is_none(), "{}", String::from_utf8_lossy(line));
        }
    }
}
