//! Structural fingerprints of JSON text: equal values (SPEC §2) give equal fingerprints,
//! computed straight from the text without building a `Value` or allocating.
//!
//! Used to find candidate repeats cheaply; candidates are then parsed and compared exactly,
//! so a collision costs time, never correctness.
use super::value::Value;

/// Deepest nesting the fingerprint follows; deeper text gets no fingerprint.
const MAX_DEPTH: usize = 128;

/// The fingerprint of `text` (`""` is `{}`), or `None` when the text is not JSON, nests too
/// deeply, or has duplicate keys (those need the real parser to decide).
pub fn fingerprint(text: &str) -> Option<u64> {
    if text.is_empty() {
        return fingerprint("{}");
    }
    let mut s = Scanner { b: text.as_bytes(), i: 0, keys: Vec::new() };
    s.ws();
    let h = s.value(0)?;
    s.ws();
    (s.i == s.b.len()).then_some(h)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    /// Key hashes of the objects being scanned (a stack), to detect duplicate keys.
    keys: Vec<u64>,
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

impl Scanner<'_> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<u64> {
        match *self.b.get(self.i)? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string(),
            b't' => self.literal(b"true", 1),
            b'f' => self.literal(b"false", 2),
            b'n' => self.literal(b"null", 3),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8], tag: u64) -> Option<u64> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Some(Stream::new(tag).finish())
        } else {
            None
        }
    }

    fn object(&mut self, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        let base = self.keys.len();
        let mut sum = 0u64;
        let mut count = 0u64;
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
        } else {
            loop {
                self.ws();
                if self.b.get(self.i) != Some(&b'"') {
                    return None;
                }
                let key = self.string()?;
                if self.keys[base..].contains(&key) {
                    return None;
                }
                self.keys.push(key);
                self.ws();
                if self.b.get(self.i) != Some(&b':') {
                    return None;
                }
                self.i += 1;
                self.ws();
                let v = self.value(depth)?;
                let mut entry = Stream::new(7);
                entry.word(key);
                entry.word(v);
                // A sum is independent of key order.
                sum = sum.wrapping_add(entry.finish());
                count += 1;
                self.ws();
                match self.b.get(self.i) {
                    Some(b',') => self.i += 1,
                    Some(b'}') => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.keys.truncate(base);
        let mut h = Stream::new(5);
        h.word(count);
        h.word(sum);
        Some(h.finish())
    }

    fn array(&mut self, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        let mut h = Stream::new(4);
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some(h.finish());
        }
        loop {
            self.ws();
            let v = self.value(depth)?;
            h.word(v);
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Some(h.finish());
                }
                _ => return None,
            }
        }
    }

    /// Hashes the decoded code points (as WTF-8), exactly as the parser decodes them.
    fn string(&mut self) -> Option<u64> {
        self.i += 1;
        let mut h = Stream::new(6);
        loop {
            let start = self.i;
            // Vectorised search for the end of the plain run; control characters are invalid.
            let end =
                memchr::memchr2(b'"', b'\\', &self.b[start..]).map_or(self.b.len(), |n| start + n);
            let run = &self.b[start..end];
            if run.iter().any(|&c| c < 0x20) {
                return None;
            }
            self.i = end;
            h.bytes(run);
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(h.finish());
                }
                b'\\' => {
                    let e = *self.b.get(self.i + 1)?;
                    self.i += 2;
                    let c = match e {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0C,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let cp = self.unicode_escape()?;
                            let mut buf = [0u8; 4];
                            h.bytes(wtf8(cp, &mut buf));
                            continue;
                        }
                        _ => return None,
                    };
                    h.bytes(&[c]);
                }
                _ => return None,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.i..self.i + 4)?;
        let mut v = 0u32;
        for &c in h {
            v = v * 16 + char::from(c).to_digit(16)?;
        }
        self.i += 4;
        Some(v)
    }

    fn unicode_escape(&mut self) -> Option<u32> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.b[self.i..].starts_with(b"\\u") {
            let save = self.i;
            self.i += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                return Some(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00));
            }
            self.i = save;
        }
        Some(first)
    }

    /// Hashes the exact decimal value: sign, significant digits, power of ten.
    fn number(&mut self) -> Option<u64> {
        let negative = self.b[self.i] == b'-';
        if negative {
            self.i += 1;
        }
        let int_start = self.i;
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return None,
        }
        let int_end = self.i;
        let (mut frac_start, mut frac_end) = (self.i, self.i);
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            frac_start = self.i;
            if !matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
                return None;
            }
            self.digits();
            frac_end = self.i;
        }
        let mut exponent: i64 = 0;
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            let neg_exp = match self.b.get(self.i) {
                Some(b'-') => {
                    self.i += 1;
                    true
                }
                Some(b'+') => {
                    self.i += 1;
                    false
                }
                _ => false,
            };
            if !matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
                return None;
            }
            let start = self.i;
            self.digits();
            // Saturates like `Number::from_json_text` does for absurd exponents.
            let mut acc: Option<i64> = Some(0);
            for &d in &self.b[start..self.i] {
                let d = i64::from(d - b'0');
                acc = acc.and_then(|a| a.checked_mul(10)).and_then(|a| {
                    if neg_exp {
                        a.checked_sub(d)
                    } else {
                        a.checked_add(d)
                    }
                });
            }
            exponent = acc.unwrap_or(if neg_exp { i64::MIN / 2 } else { i64::MAX / 2 });
        }
        let mantissa = self.b[int_start..int_end].iter().chain(&self.b[frac_start..frac_end]);
        let total = (int_end - int_start) + (frac_end - frac_start);
        let lead = mantissa.clone().take_while(|&&d| d == b'0').count();
        if lead == total {
            return Some(Stream::new(8).finish()); // zero, whatever its sign or form
        }
        let trail = mantissa.clone().rev().take_while(|&&d| d == b'0').count();
        exponent =
            exponent.saturating_sub((frac_end - frac_start) as i64).saturating_add(trail as i64);
        let mut h = Stream::new(9);
        h.word(u64::from(negative));
        h.word(exponent as u64);
        // The significant digits, hashed as the (up to two) contiguous slices they span.
        let (int, frac) = (&self.b[int_start..int_end], &self.b[frac_start..frac_end]);
        let (from, to) = (lead, total - trail);
        let int_len = int.len();
        if from < int_len {
            h.bytes(&int[from..to.min(int_len)]);
        }
        if to > int_len {
            h.bytes(&frac[from.saturating_sub(int_len)..to - int_len]);
        }
        Some(h.finish())
    }

    fn digits(&mut self) {
        while matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
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

fn wtf8(cp: u32, buf: &mut [u8; 4]) -> &[u8] {
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
