//! The JSON tokenizer: the one place that knows JSON's lexical grammar as `JSON.parse` reads it
//! (whitespace, punctuation, literals, numbers, strings with their escapes and surrogates,
//! nesting depth), shared by everything in the core that reads JSON text.
//!
//! - [`Lexer`]: a cursor over bytes with inlined scanning primitives. The value parser, the
//!   validator, the fingerprint and the JSONL trace decoder (`json_trace.rs`) read tokens with
//!   it; the matchers in `text.rs` step over text already validated with its unchecked half.
//! - [`walk`]: the one recursive descent over a JSON text, driven by a [`Sink`] that builds
//!   what its caller needs (a `Value` in `parse.rs`, nothing or a key index in `text.rs`, a
//!   hash in `fingerprint.rs`). Monomorphized per sink, so a sink that builds nothing costs
//!   nothing.
//!
//! Errors are a kind and the byte offset where the text goes wrong; `parse.rs` turns them into
//! its messages, the others only need to know there was one.

/// What is wrong with a text, as far as the grammar sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    ExpectedValue,
    ExpectedKey,
    ExpectedColon,
    ExpectedObjectEnd,
    ExpectedArrayEnd,
    LeadingZero,
    ExpectedDigit,
    ExpectedFractionDigit,
    ExpectedExponentDigit,
    BadHex,
    BadEscape,
    ControlCharacter,
    Unterminated,
    TooDeep,
    TrailingData,
    /// A sink refused what it read (the fingerprint's duplicate keys).
    Rejected,
}

/// An [`ErrorKind`] at byte offset `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LexError {
    pub kind: ErrorKind,
    pub at: usize,
}

/// Where a number's parts lie in the text (offsets; `frac` and `exp` empty when absent; `exp`
/// includes its sign).
#[derive(Clone, Copy, Debug)]
pub struct NumberText {
    pub start: usize,
    pub negative: bool,
    pub int: (usize, usize),
    pub frac: (usize, usize),
    pub exp: (usize, usize),
}

impl NumberText {
    /// No fraction and no exponent.
    pub fn is_integer(&self) -> bool {
        self.frac.0 == self.frac.1 && self.exp.0 == self.exp.1
    }

    pub fn end(&self) -> usize {
        self.exp.1.max(self.frac.1).max(self.int.1)
    }

    /// The exact decimal value (SPEC §2): sign, significant digits and power of ten, as
    /// `Number::from_json_text` normalises it.
    #[inline]
    pub fn decimal<'s>(&self, s: &'s [u8]) -> Decimal<'s> {
        let (int, frac) = (&s[self.int.0..self.int.1], &s[self.frac.0..self.frac.1]);
        let mut exponent: i64 = 0;
        if self.exp.0 < self.exp.1 {
            let e = &s[self.exp.0..self.exp.1];
            let (neg, digits) = match e[0] {
                b'-' => (true, &e[1..]),
                b'+' => (false, &e[1..]),
                _ => (false, e),
            };
            // Saturates absurd exponents: 1e99999999999999999999 stays "huge", never wraps.
            let mut acc: Option<i64> = Some(0);
            for &d in digits {
                let d = i64::from(d - b'0');
                acc = acc.and_then(|a| a.checked_mul(10)).and_then(|a| {
                    if neg {
                        a.checked_sub(d)
                    } else {
                        a.checked_add(d)
                    }
                });
            }
            exponent = acc.unwrap_or(if neg { i64::MIN / 2 } else { i64::MAX / 2 });
        }
        let total = int.len() + frac.len();
        let at = |k: usize| if k < int.len() { int[k] } else { frac[k - int.len()] };
        let lead = (0..total).take_while(|&k| at(k) == b'0').count();
        if lead == total {
            return Decimal { negative: false, exponent: 0, int: &[], frac: &[] };
        }
        let trail = (lead..total).rev().take_while(|&k| at(k) == b'0').count();
        exponent = exponent.saturating_sub(frac.len() as i64).saturating_add(trail as i64);
        let (from, to) = (lead, total - trail);
        let n = int.len();
        Decimal {
            negative: self.negative,
            exponent,
            int: if from < n { &int[from..to.min(n)] } else { &[] },
            frac: if to > n { &frac[from.saturating_sub(n)..to - n] } else { &[] },
        }
    }
}

/// An exact decimal: `(-1)^negative × digits × 10^exponent`, its significant digits the
/// concatenation of `int` and `frac` (the two slices of the text they span). Zero has no digits,
/// no sign and exponent 0.
#[derive(Clone, Copy, Debug)]
pub struct Decimal<'s> {
    pub negative: bool,
    pub exponent: i64,
    pub int: &'s [u8],
    pub frac: &'s [u8],
}

impl Decimal<'_> {
    pub fn is_zero(&self) -> bool {
        self.int.is_empty() && self.frac.is_empty()
    }

    /// The significant digits equal `digits`.
    pub fn digits_eq(&self, digits: &[u8]) -> bool {
        digits.len() == self.int.len() + self.frac.len()
            && digits[..self.int.len()] == *self.int
            && digits[self.int.len()..] == *self.frac
    }
}

/// A cursor over the bytes of a JSON text.
#[derive(Clone, Copy, Debug)]
pub struct Lexer<'a> {
    pub s: &'a [u8],
    pub i: usize,
}

impl<'a> Lexer<'a> {
    #[inline]
    pub fn new(s: &'a [u8], i: usize) -> Self {
        Lexer { s, i }
    }

    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    #[inline]
    pub fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    #[inline]
    pub fn error(&self, kind: ErrorKind) -> LexError {
        LexError { kind, at: self.i }
    }

    /// Skips JSON whitespace (space, tab, line feed, carriage return; nothing else).
    #[inline]
    pub fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    /// Skips whitespace and then `c` if it is next.
    #[inline]
    pub fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// After a member or element: `Some(true)` past `,`, `Some(false)` past `close`, `None` (the
    /// cursor on the offending byte) for anything else.
    #[inline]
    pub fn more(&mut self, close: u8) -> Option<bool> {
        self.ws();
        let c = *self.s.get(self.i)?;
        if c == b',' {
            self.i += 1;
            Some(true)
        } else if c == close {
            self.i += 1;
            Some(false)
        } else {
            None
        }
    }

    /// `word` (`true`, `false`, `null`) at the cursor, consumed.
    #[inline]
    pub fn literal(&mut self, word: &[u8]) -> bool {
        if self.s.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    #[inline]
    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    /// A number at the cursor (any byte: a non-number is an error), with JSON's grammar: an
    /// optional `-`, no leading zeros, digits after `.` and in the exponent.
    #[allow(clippy::inline_always)] // measured: out of line, grading costs ~5% more (callgrind)
    #[inline(always)]
    pub fn number(&mut self) -> Result<NumberText, LexError> {
        let start = self.i;
        let negative = self.s.get(self.i) == Some(&b'-');
        if negative {
            self.i += 1;
        }
        let int_start = self.i;
        match self.s.get(self.i) {
            Some(b'0') => {
                self.i += 1;
                if let Some(b'0'..=b'9') = self.s.get(self.i) {
                    return Err(self.error(ErrorKind::LeadingZero));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error(ErrorKind::ExpectedDigit)),
        }
        let int = (int_start, self.i);
        let mut frac = (self.i, self.i);
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return Err(self.error(ErrorKind::ExpectedFractionDigit));
            }
            let from = self.i;
            self.digits();
            frac = (from, self.i);
        }
        let mut exp = (self.i, self.i);
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            self.i += 1;
            let from = self.i;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return Err(self.error(ErrorKind::ExpectedExponentDigit));
            }
            self.digits();
            exp = (from, self.i);
        }
        Ok(NumberText { start, negative, int, frac, exp })
    }

    /// A string at the cursor (on its opening quote), consumed. Its decoded content goes to
    /// `out` in order, as runs of plain bytes and escaped code points (a lone surrogate as
    /// itself, as `JSON.parse` keeps it). Returns whether it had escapes.
    #[allow(clippy::inline_always)] // measured: out of line, grading costs ~5% more (callgrind)
    #[inline(always)]
    pub fn string(&mut self, out: &mut impl StrOut) -> Result<bool, LexError> {
        self.i += 1;
        let mut escaped = false;
        loop {
            let from = self.i;
            self.i = scan_string::<true>(self.s, self.i);
            out.run(self.s, from, self.i);
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    self.i += 1;
                    escaped = true;
                    out.code(self.escape()?);
                }
                Some(_) => return Err(self.error(ErrorKind::ControlCharacter)),
                None => return Err(self.error(ErrorKind::Unterminated)),
            }
        }
    }

    /// The escape after a backslash (the cursor on its letter): its code point, a surrogate
    /// pair written as two `\u` escapes joined.
    #[allow(clippy::inline_always)] // measured: out of line, grading costs ~5% more (callgrind)
    #[inline(always)]
    pub fn escape(&mut self) -> Result<u32, LexError> {
        let Some(&e) = self.s.get(self.i) else {
            return Err(self.error(ErrorKind::Unterminated));
        };
        self.i += 1;
        // `\"` first, and no jump table: embedded JSON makes it nearly every escape.
        if e == b'"' || e == b'\\' || e == b'/' {
            return Ok(u32::from(e));
        }
        Ok(match e {
            b'b' => 0x08,
            b'f' => 0x0C,
            b'n' => u32::from(b'\n'),
            b'r' => u32::from(b'\r'),
            b't' => u32::from(b'\t'),
            b'u' => return self.unicode_escape(),
            _ => {
                self.i -= 1;
                return Err(self.error(ErrorKind::BadEscape));
            }
        })
    }

    fn hex4(&mut self) -> Result<u32, LexError> {
        let Some(h) = self.s.get(self.i..self.i + 4) else {
            return Err(self.error(ErrorKind::BadHex));
        };
        let mut v = 0u32;
        for &c in h {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(self.error(ErrorKind::BadHex)),
            };
            v = v * 16 + u32::from(d);
        }
        self.i += 4;
        Ok(v)
    }

    /// After `\u`: one code point, joining a surrogate pair written as two escapes.
    fn unicode_escape(&mut self) -> Result<u32, LexError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.s[self.i..].starts_with(b"\\u") {
            let save = self.i;
            self.i += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                return Ok(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00));
            }
            self.i = save; // a lone high surrogate followed by another escape
        }
        Ok(first)
    }

    // -----------------------------------------------------------------------------------------
    // On text already validated (by `walk`): no checks, the grammar is known to hold.

    /// The byte at the cursor.
    #[inline]
    pub fn byte(&self) -> u8 {
        self.s[self.i]
    }

    /// Skips a valid string; returns its contents (between the quotes) and whether it has
    /// escapes.
    #[inline]
    pub fn valid_string(&mut self) -> (&'a [u8], bool) {
        self.i += 1;
        let start = self.i;
        let mut escaped = false;
        loop {
            self.i = scan_string::<false>(self.s, self.i);
            match self.s[self.i] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    self.i += 2;
                }
                _ => self.i += 1,
            }
        }
        let body = &self.s[start..self.i];
        self.i += 1;
        (body, escaped)
    }

    /// Skips one valid value.
    pub fn skip_valid(&mut self) {
        match self.byte() {
            b'"' => {
                self.valid_string();
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    // Structural bytes only; everything else is passed over quickly.
                    while !STRUCTURAL[usize::from(self.s[self.i])] {
                        self.i += 1;
                    }
                    match self.s[self.i] {
                        b'"' => {
                            self.valid_string();
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return;
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while self.i < self.s.len()
                    && !matches!(self.s[self.i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    self.i += 1;
                }
            }
        }
    }

    /// After a valid value inside a container: true if another element follows (consumes `,`),
    /// false at the end (consumes the closing bracket).
    #[inline]
    pub fn valid_next(&mut self) -> bool {
        self.ws();
        let more = self.s[self.i] == b',';
        self.i += 1;
        self.ws();
        more
    }

    /// On a valid opening bracket: false for an empty container (consumes the closing one).
    #[inline]
    pub fn valid_open(&mut self) -> bool {
        self.i += 1;
        self.ws();
        if matches!(self.s[self.i], b'}' | b']') {
            self.i += 1;
            false
        } else {
            true
        }
    }

    /// Reads a valid `"key" :` and leaves the cursor on the value.
    #[inline]
    pub fn valid_key(&mut self) -> (&'a [u8], bool) {
        let k = self.valid_string();
        self.ws();
        self.i += 1; // ':'
        self.ws();
        k
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;
const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;

/// High bit set in each byte of `w` that is `"` or `\` (or, with `CONTROL`, below 0x20). Only
/// the lowest flagged byte is exact (a borrow can flag a byte above a true match); that is the
/// only one ever read.
#[inline]
pub fn special_mask<const CONTROL: bool>(w: u64) -> u64 {
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let mut m = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
    if CONTROL {
        m |= w.wrapping_sub(ONES * 0x20) & !w;
    }
    m & HIGHS
}

/// The byte ends a run of plain string content.
#[inline]
pub fn is_special<const CONTROL: bool>(b: u8) -> bool {
    b == b'"' || b == b'\\' || (CONTROL && b < 0x20)
}

/// The offset of the first byte at or after `i` that is `"` or `\` (or, with `CONTROL`, below
/// 0x20); `s.len()` when there is none. Eight bytes at a time.
#[inline]
pub fn scan_string<const CONTROL: bool>(s: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = s.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let m = special_mask::<CONTROL>(u64::from_le_bytes(w));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = s.get(i) {
        if is_special::<CONTROL>(b) {
            break;
        }
        i += 1;
    }
    i
}

/// High bit set in exactly the bytes of `w` equal to `c`.
#[inline]
fn eq_mask(w: u64, c: u8) -> u64 {
    let v = w ^ (ONES * u64::from(c));
    !(((v & LOW7) + LOW7) | v) & HIGHS
}

/// Eight bytes of string content that need no more than dropping backslashes: no control
/// byte, no quote that ends the string, and every backslash followed inside the word by `"`
/// or `/` (so no `\\` runs and no escape cut by the word's end). Returns the bytes with the
/// backslashes removed (low bytes first) and how many remain; `None` for any other word.
/// Embedded JSON (argument text) is escape-dense: this copies it a word at a time.
#[inline]
pub fn simple_escapes(w: u64) -> Option<(u64, usize)> {
    let backslash = eq_mask(w, b'\\');
    let quote = eq_mask(w, b'"');
    let control = !(((w & LOW7) + ONES * 0x60) | w) & HIGHS;
    if backslash | quote | control == 0 {
        return Some((w, 8));
    }
    let after = backslash << 8;
    let last_byte = 0x80 << 56;
    if control != 0
        || backslash & last_byte != 0
        || quote & !after != 0
        || after & !(quote | eq_mask(w, b'/')) != 0
    {
        return None;
    }
    let mut out = w;
    let mut removed = 0;
    let mut bits = backslash;
    while bits != 0 {
        // Byte index in `out` of the next backslash (bytes before it already removed).
        let p = bits.trailing_zeros() / 8 - removed;
        let below = (1u64 << (8 * p)) - 1;
        out = (out & below) | ((out >> 8) & !below);
        removed += 1;
        bits &= bits - 1;
    }
    Some((out, 8 - removed as usize))
}

/// `"`, `{`, `[`, `}`, `]`: the bytes a container skip must look at.
static STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'[' as usize] = true;
    t[b'}' as usize] = true;
    t[b']' as usize] = true;
    t
};

/// A code point (a lone surrogate included) in generalized UTF-8 (WTF-8).
#[inline]
pub fn wtf8(cp: u32, buf: &mut [u8; 4]) -> &[u8] {
    if cp < 0x80 {
        buf[0] = cp as u8;
        &buf[..1]
    } else if cp < 0x800 {
        buf[0] = 0xC0 | (cp >> 6) as u8;
        buf[1] = 0x80 | (cp & 0x3F) as u8;
        &buf[..2]
    } else if cp < 0x10000 {
        buf[0] = 0xE0 | (cp >> 12) as u8;
        buf[1] = 0x80 | ((cp >> 6) & 0x3F) as u8;
        buf[2] = 0x80 | (cp & 0x3F) as u8;
        &buf[..3]
    } else {
        buf[0] = 0xF0 | (cp >> 18) as u8;
        buf[1] = 0x80 | ((cp >> 12) & 0x3F) as u8;
        buf[2] = 0x80 | ((cp >> 6) & 0x3F) as u8;
        buf[3] = 0x80 | (cp & 0x3F) as u8;
        &buf[..4]
    }
}

/// Where [`Lexer::string`] puts a string's decoded content.
pub trait StrOut {
    /// Plain bytes of the text, `s[from..to]` (valid UTF-8 when the text is); the range is
    /// passed so that a sink that ignores it computes nothing.
    fn run(&mut self, s: &[u8], from: usize, to: usize);
    /// An escaped code point (possibly a lone surrogate).
    fn code(&mut self, cp: u32);
}

/// The content is not needed (validation).
impl StrOut for () {
    #[inline]
    fn run(&mut self, _: &[u8], _: usize, _: usize) {}
    #[inline]
    fn code(&mut self, _: u32) {}
}

/// The content decoded into generalized UTF-8 (WTF-8).
impl StrOut for Vec<u8> {
    #[inline]
    fn run(&mut self, s: &[u8], from: usize, to: usize) {
        self.extend_from_slice(&s[from..to]);
    }
    #[inline]
    fn code(&mut self, cp: u32) {
        let mut buf = [0u8; 4];
        self.extend_from_slice(wtf8(cp, &mut buf));
    }
}

/// `true`, `false` or `null`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Literal {
    True,
    False,
    Null,
}

/// What [`walk`] builds from the tokens: one method per token or container event.
pub trait Sink {
    type Value;
    type Key;
    type Object;
    type Array;

    /// A string value at the cursor (on its quote), consumed with [`Lexer::string`].
    fn string(&mut self, lx: &mut Lexer<'_>) -> Result<Self::Value, LexError>;
    /// An object key at the cursor (on its quote), consumed with [`Lexer::string`]; an
    /// `Err` stops the walk (a sink may refuse a key, e.g. a duplicate).
    fn key(&mut self, lx: &mut Lexer<'_>, o: &mut Self::Object) -> Result<Self::Key, LexError>;
    fn number(&mut self, s: &[u8], n: &NumberText) -> Self::Value;
    fn literal(&mut self, l: Literal) -> Self::Value;
    /// An object opens at nesting `depth` (1 for a top-level object).
    fn begin_object(&mut self, depth: usize) -> Self::Object;
    /// A member whose value started at offset `at`.
    fn member(&mut self, o: &mut Self::Object, k: Self::Key, at: usize, v: Self::Value);
    fn end_object(&mut self, o: Self::Object) -> Self::Value;
    fn begin_array(&mut self) -> Self::Array;
    fn element(&mut self, a: &mut Self::Array, v: Self::Value);
    fn end_array(&mut self, a: Self::Array) -> Self::Value;
}

/// Reads one JSON text (whitespace around it allowed, nothing after it) into `sink`;
/// containers nested deeper than `max_depth` are an error, never a stack overflow. Returns the
/// offset of the value and what the sink built.
#[inline]
pub fn walk<S: Sink>(
    s: &[u8],
    max_depth: usize,
    sink: &mut S,
) -> Result<(usize, S::Value), LexError> {
    let mut w = Walk { lx: Lexer::new(s, 0), max_depth, sink };
    w.lx.ws();
    let start = w.lx.i;
    let v = w.value(0)?;
    w.lx.ws();
    if !w.lx.at_end() {
        return Err(w.lx.error(ErrorKind::TrailingData));
    }
    Ok((start, v))
}

struct Walk<'a, 's, S> {
    lx: Lexer<'a>,
    max_depth: usize,
    sink: &'s mut S,
}

impl<S: Sink> Walk<'_, '_, S> {
    fn value(&mut self, depth: usize) -> Result<S::Value, LexError> {
        match self.lx.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.sink.string(&mut self.lx),
            Some(b't') => self.literal(b"true", Literal::True),
            Some(b'f') => self.literal(b"false", Literal::False),
            Some(b'n') => self.literal(b"null", Literal::Null),
            Some(b'-' | b'0'..=b'9') => {
                let n = self.lx.number()?;
                Ok(self.sink.number(self.lx.s, &n))
            }
            _ => Err(self.lx.error(ErrorKind::ExpectedValue)),
        }
    }

    #[inline]
    fn literal(&mut self, word: &[u8], l: Literal) -> Result<S::Value, LexError> {
        if self.lx.literal(word) {
            Ok(self.sink.literal(l))
        } else {
            Err(self.lx.error(ErrorKind::ExpectedValue))
        }
    }

    fn object(&mut self, depth: usize) -> Result<S::Value, LexError> {
        if depth > self.max_depth {
            return Err(self.lx.error(ErrorKind::TooDeep));
        }
        self.lx.i += 1;
        let mut o = self.sink.begin_object(depth);
        if self.lx.eat(b'}') {
            return Ok(self.sink.end_object(o));
        }
        loop {
            self.lx.ws();
            if self.lx.peek() != Some(b'"') {
                return Err(self.lx.error(ErrorKind::ExpectedKey));
            }
            let k = self.sink.key(&mut self.lx, &mut o)?;
            if !self.lx.eat(b':') {
                return Err(self.lx.error(ErrorKind::ExpectedColon));
            }
            self.lx.ws();
            let at = self.lx.i;
            let v = self.value(depth)?;
            self.sink.member(&mut o, k, at, v);
            match self.lx.more(b'}') {
                Some(true) => {}
                Some(false) => return Ok(self.sink.end_object(o)),
                None => return Err(self.lx.error(ErrorKind::ExpectedObjectEnd)),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<S::Value, LexError> {
        if depth > self.max_depth {
            return Err(self.lx.error(ErrorKind::TooDeep));
        }
        self.lx.i += 1;
        let mut a = self.sink.begin_array();
        if self.lx.eat(b']') {
            return Ok(self.sink.end_array(a));
        }
        loop {
            self.lx.ws();
            let v = self.value(depth)?;
            self.sink.element(&mut a, v);
            match self.lx.more(b']') {
                Some(true) => {}
                Some(false) => return Ok(self.sink.end_array(a)),
                None => return Err(self.lx.error(ErrorKind::ExpectedArrayEnd)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_normalises_as_number_does() {
        for raw in [
            "0",
            "-0",
            "1",
            "1.0",
            "10e-1",
            "1E+2",
            "0.0012",
            "-5000.00",
            "12345678901234567890.5e-3",
            "1e99999999999999999999",
            "-1e-99999999999999999999",
            "0.0e5",
        ] {
            let n = Lexer::new(raw.as_bytes(), 0).number().expect("valid");
            assert_eq!(n.end(), raw.len(), "{raw}");
            let d = n.decimal(raw.as_bytes());
            let want = crate::json::Number::from_json_text(raw);
            assert_eq!(d.negative, want.is_negative(), "{raw}");
            assert_eq!(d.exponent, want.exponent(), "{raw}");
            assert!(d.digits_eq(want.digits().as_bytes()), "{raw}");
            assert_eq!(d.is_zero(), want.digits().is_empty(), "{raw}");
        }
    }

    #[test]
    fn scan_string_matches_a_byte_loop() {
        let alphabet = [b'"', b'\\', b'a', 0x01, 0x1F, 0x20, 0x7F, 0xC3, 0xFF];
        let mut x: u64 = 5;
        for _ in 0..20_000 {
            let len = (x % 20) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    alphabet[((x >> 33) % alphabet.len() as u64) as usize]
                })
                .collect();
            let control = bytes.iter().position(|&b| is_special::<true>(b)).unwrap_or(len);
            let plain = bytes.iter().position(|&b| is_special::<false>(b)).unwrap_or(len);
            assert_eq!(scan_string::<true>(&bytes, 0), control, "{bytes:?}");
            assert_eq!(scan_string::<false>(&bytes, 0), plain, "{bytes:?}");
        }
    }

    #[test]
    fn simple_escapes_matches_a_byte_loop() {
        let alphabet = [b'\\', b'"', b'/', b'a', b'n', 0x01, 0x1F, 0x20, 0x7F, 0xC3, 0xA9, 0xFF];
        let mut x: u64 = 5;
        for _ in 0..200_000 {
            let bytes: [u8; 8] = std::array::from_fn(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                alphabet[((x >> 33) % alphabet.len() as u64) as usize]
            });
            // The byte loop: drop each backslash followed by `"` or `/`; anything else is None.
            let mut kept = Vec::new();
            let mut ok = true;
            let mut k = 0;
            while k < 8 {
                match bytes[k] {
                    b'\\' if k < 7 && matches!(bytes[k + 1], b'"' | b'/') => {
                        kept.push(bytes[k + 1]);
                        k += 2;
                    }
                    b'\\' | b'"' | 0x00..=0x1F => {
                        ok = false;
                        break;
                    }
                    c => {
                        kept.push(c);
                        k += 1;
                    }
                }
            }
            match simple_escapes(u64::from_le_bytes(bytes)) {
                Some((w, n)) => {
                    assert!(ok, "{bytes:?}");
                    assert_eq!(&w.to_le_bytes()[..n], kept.as_slice(), "{bytes:?}");
                }
                None => assert!(!ok, "{bytes:?}"),
            }
        }
    }

    use crate::test_rng::{mutate, JsonVocab, Rng};

    const WS: &[&str] = &["", "", "", " ", "\n\t", "\r", "\u{c}"];
    const NUMS: &[&str] = &[
        "0",
        "-0",
        "7",
        "1.50",
        "10e-1",
        "1E+2",
        "0.001",
        "-5000",
        "9007199254740993",
        "1e400",
        "1e-400",
        "0.0e5",
        "12345678901234567890.5e-3",
        "01",
        "1.",
        "-",
        "2e",
        ".5",
        "+1",
    ];
    const STRS: &[&str] = &[
        r#""a""#,
        r#""\u0061""#,
        r#""""#,
        r#""\ud800""#,
        r#""\udc00x""#,
        r#""\ud83d\ude00""#,
        r#""\uD83D\uDE00\u00e9""#,
        "\"\u{1F600}é\"",
        r#""a\"b\\c\/d\b\f\n\r\t""#,
        r#""{\"k\": [1, \"v\"]}""#,
        r#""\x""#,
        r#""\u12G4""#,
        "\"tab\there\"",
        r#""unterminated"#,
        r#""\ud800\u12""#,
        "\"a long plain run of text, well over eight bytes\"",
    ];
    const KEYS: &[&str] = &[r#""a""#, r#""b""#, r#""\u0061""#, r#""""#, r#""0""#, r#""é""#];

    const VOCAB: JsonVocab<'static> = JsonVocab {
        ws: WS,
        numbers: NUMS,
        strings: STRS,
        keys: KEYS,
        words: &["true", "false", "null", "nul", "True"],
        leaf_depth: 4,
    };
    const JUNK: &[&str] = &[",", "}", "]", "\"", "x", "0", "\\", "\u{1}", "-", ":"];

    /// What a text holds that a value does not show: repeated (decoded) keys, which the
    /// fingerprint leaves alone, and anywhere (even in a value a later duplicate replaces) a
    /// lone surrogate or a number beyond float64, which serde refuses.
    #[derive(Default)]
    struct Notes {
        duplicates: usize,
        js_only: bool,
    }

    impl Notes {
        fn decoded(&mut self, lx: &mut Lexer<'_>) -> Result<Vec<u8>, LexError> {
            let mut k = Vec::new();
            lx.string(&mut k)?;
            self.js_only |= std::str::from_utf8(&k).is_err();
            Ok(k)
        }
    }

    impl Sink for Notes {
        type Value = ();
        type Key = Vec<u8>;
        type Object = Vec<Vec<u8>>;
        type Array = ();

        fn string(&mut self, lx: &mut Lexer<'_>) -> Result<(), LexError> {
            self.decoded(lx).map(|_| ())
        }
        fn key(&mut self, lx: &mut Lexer<'_>, _: &mut Vec<Vec<u8>>) -> Result<Vec<u8>, LexError> {
            self.decoded(lx)
        }
        fn number(&mut self, s: &[u8], n: &NumberText) {
            let raw = std::str::from_utf8(&s[n.start..n.end()]).expect("ASCII");
            self.js_only |= crate::json::Number::from_json_text(raw).as_f64().is_infinite();
        }
        fn literal(&mut self, _: Literal) {}
        fn begin_object(&mut self, _: usize) -> Vec<Vec<u8>> {
            Vec::new()
        }
        fn member(&mut self, o: &mut Vec<Vec<u8>>, k: Vec<u8>, _: usize, (): ()) {
            if o.contains(&k) {
                self.duplicates += 1;
            }
            o.push(k);
        }
        fn end_object(&mut self, _: Vec<Vec<u8>>) {}
        fn begin_array(&mut self) {}
        fn element(&mut self, (): &mut (), (): ()) {}
        fn end_array(&mut self, (): ()) {}
    }

    /// Within two units in the last place: `serde_json` (without its `float_roundtrip`
    /// feature) may miss the nearest float64 that the parser's numbers round to.
    #[allow(clippy::float_cmp)] // equal first (0.0 and -0.0 too), then ulps
    fn close(a: f64, b: f64) -> bool {
        a == b || (a.to_bits().abs_diff(b.to_bits()) <= 2 && a.signum() == b.signum())
    }

    /// The same JSON value (numbers as float64, keys as text; serde's map keeps the last
    /// duplicate, as the parser does).
    fn same(ours: &crate::json::Value, theirs: &serde_json::Value) -> bool {
        use crate::json::Value;
        match (ours, theirs) {
            (Value::Null, serde_json::Value::Null) => true,
            (Value::Bool(a), serde_json::Value::Bool(b)) => a == b,
            (Value::Number(a), serde_json::Value::Number(b)) => {
                b.as_f64().is_some_and(|b| close(a.as_f64(), b))
            }
            (Value::String(a), serde_json::Value::String(b)) => a.as_str() == Some(b.as_str()),
            (Value::Array(a), serde_json::Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
            }
            (Value::Object(a), serde_json::Value::Object(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(k, x)| k.as_str().and_then(|k| b.get(k)).is_some_and(|y| same(x, y)))
            }
            _ => false,
        }
    }

    /// Random texts through every reader the tokenizer drives: the parser, the validator (plain
    /// and indexed), the fingerprint, the canonical text and the JSONL trace decoder agree with
    /// each other, and with `serde_json` wherever JSON.parse and serde mean the same thing.
    #[test]
    fn every_reader_agrees() {
        use crate::json::canonical::to_canonical;
        use crate::json::fingerprint::{fingerprint, fingerprint_value};
        use crate::json::text::{validate, validate_indexed};
        use crate::json::{parse, Object, Value};

        let mut rng = Rng(3);
        let (mut valid, mut serde_compared, mut decoded) = (0, 0, 0);
        for round in 0..30_000 {
            let generated = VOCAB.text(&mut rng, 0);
            let t = mutate(&mut rng, &generated, 6, JUNK, |t| format!("[{t}]"));
            let limit = if round % 4 == 0 { 3 } else { 128 };
            let parsed = parse(&t, limit);
            let start = validate(t.as_bytes(), limit);
            assert_eq!(start.is_some(), parsed.is_ok(), "{t:?}");
            let keys = Object::new();
            assert_eq!(validate_indexed(t.as_bytes(), limit, &keys, &mut []).map(|x| x.0), start);
            // (`""` is `{}` to the fingerprint: empty arguments.)
            if limit == 128 && !t.is_empty() {
                let fp = fingerprint(&t);
                match &parsed {
                    Err(_) => assert_eq!(fp, None, "{t:?}"),
                    Ok(v) => {
                        let mut notes = Notes::default();
                        walk(t.as_bytes(), 128, &mut notes).expect("valid");
                        let want = (notes.duplicates == 0).then(|| fingerprint_value(v));
                        assert_eq!(fp, want, "{t:?}");
                    }
                }
            }
            let Ok(v) = parsed else { continue };
            valid += 1;
            assert_eq!(start, Some(t.len() - t.trim_start_matches([' ', '\t', '\n', '\r']).len()));
            // The canonical text (numbers through float64, as JS) is a fixed point.
            let canonical = to_canonical(&v);
            let again = parse(&canonical, limit).unwrap_or_else(|e| panic!("{canonical}: {e}"));
            assert_eq!(to_canonical(&again), canonical, "{t:?}");
            // serde_json reads the same value, except where JS keeps what serde refuses (lone
            // surrogates, numbers beyond f64).
            if limit == 128 {
                let mut notes = Notes::default();
                walk(t.as_bytes(), 128, &mut notes).expect("valid");
                match serde_json::from_str::<serde_json::Value>(&t) {
                    Ok(theirs) => {
                        assert!(!notes.js_only && same(&v, &theirs), "{t:?}: {theirs:?}");
                        serde_compared += 1;
                    }
                    Err(error) => assert!(notes.js_only, "{t:?}: {error}"),
                }
            }
            // A string value as a trace's id: the decoder reads what the parser reads (when it is
            // UTF-8; a lone surrogate is left to serde).
            if let Value::String(s) = &v {
                let line = format!("{{\"id\":{}}}", t.trim_matches([' ', '\t', '\n', '\r']));
                let mut buf = Vec::new();
                match (crate::json_trace::decode(line.as_bytes(), &mut buf), s.as_str()) {
                    (Some(decoded_line), Some(want)) => {
                        assert_eq!(decoded_line.parts.id, want, "{t:?}");
                        decoded += 1;
                    }
                    (None, None) => {}
                    (got, want) => {
                        panic!("{t:?}: decoded {:?}, parsed {want:?}", got.map(|p| p.parts.id))
                    }
                }
            }
            // A number as a model call's cost: the decoder's double is the parser's number.
            if let Value::Number(n) = &v {
                let line = format!("{{\"modelCalls\":[{{\"cost\":{}}}]}}", n.raw());
                let mut buf = Vec::new();
                let got = crate::json_trace::decode(line.as_bytes(), &mut buf);
                let float = n.as_f64();
                match got {
                    Some(decoded_line) => {
                        let cost = decoded_line.parts.model_calls[0].cost.expect("a cost");
                        let serde: f64 = serde_json::from_str(n.raw()).expect("finite");
                        assert_eq!(cost.to_bits(), serde.to_bits(), "{t:?}");
                        assert!(close(cost, float), "{t:?}: {cost} {float}");
                    }
                    None => assert!(float.is_infinite(), "{t:?}"),
                }
            }
        }
        assert!(
            valid > 8_000 && serde_compared > 5_000 && decoded > 500,
            "{valid} {serde_compared} {decoded}"
        );
    }
}
