//! Structural fingerprints of JSON text: equal values (SPEC §2) give equal fingerprints,
//! computed straight from the text (the tokenizer's walk hashing as it goes) without building
//! a `Value`.
//!
//! Used to find candidate repeats cheaply; candidates are then parsed and compared exactly,
//! so a collision costs time, never correctness.
use super::lex::{self, ErrorKind, LexError, Lexer, Literal, NumberText, Sink, StrOut};
use super::value::Value;

/// Deepest nesting the fingerprint follows; deeper text gets no fingerprint.
const MAX_DEPTH: usize = 128;

/// The fingerprint of `text` (`""` is `{}`), or `None` when the text is not JSON, nests too
/// deeply, or has duplicate keys (those need the real parser to decide).
pub fn fingerprint(text: &str) -> Option<u64> {
    if text.is_empty() {
        return fingerprint("{}");
    }
    let mut h = Hasher { keys: Vec::new() };
    lex::walk(text.as_bytes(), MAX_DEPTH, &mut h).ok().map(|(_, v)| v)
}

/// Hashes what the walk reads.
struct Hasher {
    /// Key hashes of the objects being walked (a stack), to detect duplicate keys.
    keys: Vec<u64>,
}

/// An object being hashed: where its keys start on the stack, the sum of its entries' hashes
/// (independent of key order) and their count.
struct ObjectHash {
    base: usize,
    sum: u64,
    count: u64,
}

/// A streaming hash whose result does not depend on how the input is split into writes.
struct Stream {
    h: u64,
    buf: u64,
    n: u32,
}

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Stream {
    fn new(tag: u64) -> Self {
        Stream { h: tag.wrapping_mul(K), buf: 0, n: 0 }
    }

    fn mix(&mut self, word: u64) {
        self.h = (self.h ^ word).wrapping_mul(K).rotate_left(29);
    }

    fn bytes(&mut self, mut bytes: &[u8]) {
        if self.n == 0 {
            while let Some((chunk, rest)) = bytes.split_first_chunk::<8>() {
                self.mix(u64::from_le_bytes(*chunk));
                bytes = rest;
            }
            // The tail goes into the buffer in one load (what the byte loop below would do).
            let mut tail = [0u8; 8];
            tail[..bytes.len()].copy_from_slice(bytes);
            self.buf = u64::from_le_bytes(tail);
            self.n = bytes.len() as u32;
            return;
        }
        for &b in bytes {
            self.buf |= u64::from(b) << (8 * self.n);
            self.n += 1;
            if self.n == 8 {
                self.mix(self.buf);
                self.buf = 0;
                self.n = 0;
            }
        }
    }

    fn word(&mut self, w: u64) {
        self.flush();
        self.mix(w);
    }

    fn flush(&mut self) {
        if self.n > 0 {
            self.mix(self.buf ^ (u64::from(self.n) << 59));
            self.buf = 0;
            self.n = 0;
        }
    }

    fn finish(mut self) -> u64 {
        self.flush();
        // One more multiply spreads the last word's bits; enough for bucketing.
        let x = self.h;
        (x ^ (x >> 32)).wrapping_mul(0xff51_afd7_ed55_8ccd)
    }
}

/// Strings hash their decoded code points (as WTF-8), exactly as the parser decodes them.
impl StrOut for Stream {
    #[inline]
    fn run(&mut self, s: &[u8], from: usize, to: usize) {
        self.bytes(&s[from..to]);
    }
    #[inline]
    fn code(&mut self, cp: u32) {
        let mut buf = [0u8; 4];
        self.bytes(lex::wtf8(cp, &mut buf));
    }
}

fn string_hash(lx: &mut Lexer<'_>) -> Result<u64, LexError> {
    let mut h = Stream::new(6);
    lx.string(&mut h)?;
    Ok(h.finish())
}

impl Sink for Hasher {
    type Value = u64;
    type Key = u64;
    type Object = ObjectHash;
    type Array = Stream;

    fn string(&mut self, lx: &mut Lexer<'_>) -> Result<u64, LexError> {
        string_hash(lx)
    }

    /// A key already in this object: no fingerprint (the parser's last-wins decides).
    fn key(&mut self, lx: &mut Lexer<'_>, o: &mut ObjectHash) -> Result<u64, LexError> {
        let key = string_hash(lx)?;
        if self.keys[o.base..].contains(&key) {
            return Err(lx.error(ErrorKind::Rejected));
        }
        self.keys.push(key);
        Ok(key)
    }

    /// The exact decimal value: sign, significant digits, power of ten.
    fn number(&mut self, s: &[u8], n: &NumberText) -> u64 {
        let d = n.decimal(s);
        if d.is_zero() {
            return Stream::new(8).finish(); // zero, whatever its sign or form
        }
        let mut h = Stream::new(9);
        h.word(u64::from(d.negative));
        h.word(d.exponent as u64);
        // The significant digits, hashed as the (up to two) contiguous slices they span.
        h.bytes(d.int);
        h.bytes(d.frac);
        h.finish()
    }

    fn literal(&mut self, l: Literal) -> u64 {
        let tag = match l {
            Literal::True => 1,
            Literal::False => 2,
            Literal::Null => 3,
        };
        Stream::new(tag).finish()
    }

    fn begin_object(&mut self, _: usize) -> ObjectHash {
        ObjectHash { base: self.keys.len(), sum: 0, count: 0 }
    }

    fn member(&mut self, o: &mut ObjectHash, key: u64, _: usize, v: u64) {
        let mut entry = Stream::new(7);
        entry.word(key);
        entry.word(v);
        o.sum = o.sum.wrapping_add(entry.finish());
        o.count += 1;
    }

    fn end_object(&mut self, o: ObjectHash) -> u64 {
        self.keys.truncate(o.base);
        let mut h = Stream::new(5);
        h.word(o.count);
        h.word(o.sum);
        h.finish()
    }

    fn begin_array(&mut self) -> Stream {
        Stream::new(4)
    }

    fn element(&mut self, a: &mut Stream, v: u64) {
        a.word(v);
    }

    fn end_array(&mut self, a: Stream) -> u64 {
        a.finish()
    }
}

/// The fingerprint of a parsed value; equal to [`fingerprint`] of any text that parses to it.
pub fn fingerprint_value(v: &Value) -> u64 {
    match v {
        Value::Bool(true) => Stream::new(1).finish(),
        Value::Bool(false) => Stream::new(2).finish(),
        Value::Null => Stream::new(3).finish(),
        Value::Array(items) => {
            let mut h = Stream::new(4);
            for item in items {
                h.word(fingerprint_value(item));
            }
            h.finish()
        }
        Value::Object(o) => {
            let mut sum = 0u64;
            for (k, val) in o.iter() {
                let mut key = Stream::new(6);
                key.bytes(k.as_bytes());
                let mut entry = Stream::new(7);
                entry.word(key.finish());
                entry.word(fingerprint_value(val));
                sum = sum.wrapping_add(entry.finish());
            }
            let mut h = Stream::new(5);
            h.word(o.len() as u64);
            h.word(sum);
            h.finish()
        }
        Value::String(s) => {
            let mut h = Stream::new(6);
            h.bytes(s.as_bytes());
            h.finish()
        }
        Value::Number(n) => {
            if n.digits().is_empty() {
                return Stream::new(8).finish();
            }
            let mut h = Stream::new(9);
            h.word(u64::from(n.is_negative()));
            h.word(n.exponent() as u64);
            h.bytes(n.digits().as_bytes());
            h.finish()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{fingerprint, fingerprint_value};

    fn same(a: &str, b: &str) {
        assert_eq!(fingerprint(a), fingerprint(b), "{a} vs {b}");
        assert!(fingerprint(a).is_some(), "{a}");
        let text = if a.is_empty() { "{}" } else { a };
        let parsed = crate::json::parse(text, 128).expect("valid");
        assert_eq!(Some(fingerprint_value(&parsed)), fingerprint(a), "{a} parsed");
    }

    #[test]
    fn equal_values_equal_fingerprints() {
        same(r#"{"a":1,"b":[true,null]}"#, r#" { "b" : [ true , null ] , "a" : 1.0e0 } "#);
        same("[100, -0, 0.5]", "[1e2, 0, 5E-1]");
        same(r#""é😀/""#, r#""\u00e9\ud83d\ude00\/""#);
        same(r#""\ud800x""#, r#""\uD800x""#);
        same("", "{}");
        same("12345678901234567890.5e-3", "12345678901234567.8905");
        same("[100.500, 0.0012, 1000]", "[1.005e2, 1.2e-3, 1e3]");
    }

    #[test]
    fn different_values_differ() {
        for (a, b) in [
            ("[1,2]", "[2,1]"),
            ("true", "1"),
            (r#"{"a":1}"#, r#"{"a":"1"}"#),
            ("9007199254740993", "9007199254740992"),
            (r#""ab""#, r#""abc""#),
            ("-1", "1"),
        ] {
            assert_ne!(fingerprint(a), fingerprint(b), "{a} vs {b}");
        }
    }

    #[test]
    fn undecidable_texts_have_none() {
        assert_eq!(fingerprint(r#"{"a":1,"a":2}"#), None);
        let dup = crate::json::parse(r#"{"a":1,"b":3,"a":2}"#, 128).expect("valid");
        assert_eq!(Some(fingerprint_value(&dup)), fingerprint(r#"{"b":3,"a":2}"#));
        assert_eq!(fingerprint("{bad"), None);
        assert_eq!(fingerprint(&"[".repeat(200)), None);
    }
}
