//! Proof that canonical text is byte-identical to node's `JSON.stringify(JSON.parse(text))`.
//!
//! A seeded corpus of tricky JSON texts (numbers at float64 edges, every escape, lone
//! surrogates, array-index-like keys, duplicates, nesting) goes through node and through
//! `to_canonical(parse(..))`; every byte must agree. Without node the test fails under `CI=true`
//! and otherwise says loudly that it proved nothing.
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use trajgrade_core::json::canonical::to_canonical;
use trajgrade_core::json::parse;

const CORPUS_SIZE: usize = 20_000;
const SEED: u64 = 0x7261_6a67_7261_6465;

/// splitmix64: tiny, seeded and good enough to spread choices; no crate needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Below `usual` nine times in ten, below `rare` otherwise.
    fn below_mostly(&mut self, usual: usize, rare: usize) -> usize {
        let cap = if self.chance(10) { rare } else { usual };
        self.below(cap)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const SPECIAL_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-0.0",
    "0e0",
    "-0E-5",
    "0.0000",
    "1.0",
    "1e21",
    "1e20",
    "1E+20",
    "999999999999999999999",
    "1e-7",
    "1e-6",
    "0.000001",
    "0.0000001",
    "1.5E-10",
    "5e-324",
    "2e-324",
    "3e-324",
    "2.4703282292062327e-324",
    "2.2250738585072014e-308",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "1e308",
    "1e309",
    "1e400",
    "-1e400",
    "1e-400",
    "1e99999999999999999999",
    "9007199254740991",
    "9007199254740992",
    "9007199254740993",
    "9007199254740994",
    "9007199254740995",
    "-9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967295",
    "4294967296",
    "0.1",
    "0.2",
    "0.30000000000000004",
    "0.10000000000000001",
    "123.4560",
    "100",
    "1000000000000000128",
    "123456789012345678901234567890",
    "0.5",
    "2.5e-5",
    "1.25e+3",
];

fn digit_run(rng: &mut Rng, len: usize, leading_nonzero: bool) -> String {
    let mut s = String::with_capacity(len);
    for i in 0..len {
        let d = if i == 0 && leading_nonzero { 1 + rng.below(9) } else { rng.below(10) };
        s.push(char::from(b'0' + d as u8));
    }
    s
}

fn number(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => rng.pick(SPECIAL_NUMBERS).to_owned(),
        1 => {
            // A random float64, printed by Rust in either notation.
            let f = loop {
                let f = f64::from_bits(rng.next());
                if f.is_finite() {
                    break f;
                }
            };
            if rng.chance(50) {
                format!("{f:e}")
            } else {
                format!("{f}")
            }
        }
        2 => {
            // A short integer, the common case in real arguments.
            let len = 1 + rng.below(16);
            let sign = if rng.chance(30) { "-" } else { "" };
            if rng.chance(10) {
                format!("{sign}0")
            } else {
                format!("{sign}{}", digit_run(rng, len, true))
            }
        }
        _ => {
            // Grammar-shaped: sign, integer part, fraction, exponent, long digit strings.
            let mut s = String::new();
            if rng.chance(30) {
                s.push('-');
            }
            if rng.chance(20) {
                s.push('0');
            } else {
                let len = 1 + rng.below_mostly(22, 60);
                s.push_str(&digit_run(rng, len, true));
            }
            if rng.chance(50) {
                s.push('.');
                let len = 1 + rng.below_mostly(20, 40);
                s.push_str(&digit_run(rng, len, false));
            }
            if rng.chance(50) {
                s.push(if rng.chance(50) { 'e' } else { 'E' });
                s.push_str(rng.pick(&["", "+", "-"]));
                let exp = match rng.below(4) {
                    0 => rng.below(10),
                    1 => rng.below(30),
                    2 => 280 + rng.below(60),
                    _ => rng.below(400),
                };
                if rng.chance(10) {
                    s.push('0');
                }
                let _ = write!(s, "{exp}");
            }
            s
        }
    }
}

const RAW_CHARS: &[&str] = &[
    "é",
    "ü",
    "中",
    "😀",
    "𝄞",
    "\u{2028}",
    "\u{2029}",
    "\u{feff}",
    "\u{85}",
    "\u{7f}",
    "\u{a0}",
    "\u{ffff}",
    "\u{fffd}",
    "\u{10ffff}",
    "/",
    "'",
    "<",
    ">",
    "&",
    "`",
    "$",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    " ",
];
const NAMED_ESCAPES: &[&str] = &[r#"\""#, r"\\", r"\/", r"\b", r"\f", r"\n", r"\r", r"\t"];

fn hex4(rng: &mut Rng, cp: u32) -> String {
    if rng.chance(50) {
        format!("\\u{cp:04x}")
    } else {
        format!("\\u{cp:04X}")
    }
}

/// The inside of a JSON string literal (without quotes).
fn string_body(rng: &mut Rng) -> String {
    let mut s = String::new();
    let pieces = rng.below_mostly(8, 40);
    for _ in 0..pieces {
        match rng.below(10) {
            0..=2 => {
                let len = 1 + rng.below(6);
                for _ in 0..len {
                    s.push(char::from(b' ' + rng.below(95) as u8));
                    if s.ends_with('"') || s.ends_with('\\') {
                        s.pop();
                        s.push('x');
                    }
                }
            }
            3 => s.push_str(rng.pick(RAW_CHARS)),
            4 => s.push_str(rng.pick(NAMED_ESCAPES)),
            5 => {
                let cp = rng.below(0x20) as u32;
                s.push_str(&hex4(rng, cp));
            }
            6 => {
                // Lone surrogates, high or low.
                let cp = 0xD800 + rng.below(0x800) as u32;
                s.push_str(&hex4(rng, cp));
            }
            7 => {
                // A well-formed pair written as two escapes, or a pair split by something.
                let hi = 0xD800 + rng.below(0x400) as u32;
                let lo = 0xDC00 + rng.below(0x400) as u32;
                let (h, l) = (hex4(rng, hi), hex4(rng, lo));
                let mid = if rng.chance(25) { "x" } else { "" };
                if rng.chance(15) {
                    let _ = write!(s, "{l}{mid}{h}");
                } else {
                    let _ = write!(s, "{h}{mid}{l}");
                }
            }
            8 => {
                let cp = rng.below(0x1_0000) as u32;
                s.push_str(&hex4(rng, cp));
            }
            _ => {
                let cp = [0x7f, 0x80, 0x2028, 0x2029, 0xfeff, 0xe9, 0x2f, 0x22, 0x5c][rng.below(9)];
                s.push_str(&hex4(rng, cp));
            }
        }
    }
    s
}

const INDEX_LIKE_KEYS: &[&str] = &[
    "0",
    "1",
    "2",
    "10",
    "01",
    "00",
    "-0",
    "-1",
    "1.0",
    "1e3",
    " 1",
    "1 ",
    "+1",
    "4294967294",
    "4294967295",
    "4294967296",
    "42949672940",
    "99999999999",
    "123",
    "9",
    "",
    "a",
    "b",
    "__proto__",
    "constructor",
    "length",
    "\\u0030",
    "\\u0031\\u0030",
];

fn key(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => rng.pick(INDEX_LIKE_KEYS).to_owned(),
        1 => rng.below(5000).to_string(),
        2 => {
            let n = rng.next() % 5_000_000_000;
            n.to_string()
        }
        _ => string_body(rng),
    }
}

fn ws(rng: &mut Rng) -> &'static str {
    if rng.chance(70) {
        ""
    } else {
        rng.pick(&[" ", "\n", "\t", "\r\n", "  \t "])
    }
}

fn value(rng: &mut Rng, depth: usize, out: &mut String) {
    let container_odds = if depth >= 6 { 0 } else { 35 };
    let roll = rng.below(100);
    if roll < container_odds / 2 {
        out.push('[');
        let n = rng.below(5);
        for i in 0..n {
            if i > 0 {
                out.push(',');
            }
            out.push_str(ws(rng));
            value(rng, depth + 1, out);
            out.push_str(ws(rng));
        }
        out.push(']');
    } else if roll < container_odds {
        out.push('{');
        let n = rng.below(8);
        // A small pool of keys per object makes duplicate keys frequent.
        let pool: Vec<String> = (0..=rng.below(6)).map(|_| key(rng)).collect();
        for i in 0..n {
            if i > 0 {
                out.push(',');
            }
            out.push_str(ws(rng));
            let k = if rng.chance(60) { pool[rng.below(pool.len())].clone() } else { key(rng) };
            let _ = write!(out, "\"{k}\"{}:{}", ws(rng), ws(rng));
            value(rng, depth + 1, out);
        }
        out.push('}');
    } else {
        match rng.below(10) {
            0 => out.push_str("null"),
            1 => out.push_str("true"),
            2 => out.push_str("false"),
            3..=6 => out.push_str(&number(rng)),
            _ => {
                out.push('"');
                out.push_str(&string_body(rng));
                out.push('"');
            }
        }
    }
}

fn corpus() -> Vec<String> {
    let mut rng = Rng(SEED);
    let mut texts: Vec<String> = [
        "{}",
        "[]",
        "\"\"",
        r#"{"b":1,"10":0,"a":1,"2":0,"01":1,"-1":2,"1.0":3,"4294967295":4,"4294967294":5}"#,
        r#"{"a":1,"b":2,"a":3,"o":{"z":1,"0":2},"l":[{"b":1,"1":0}]}"#,
        r#"{"s":"\uD800","t":"a\u2028b"}"#,
        r#"{"a":1e21,"b":1E20,"c":0.0000001,"id":9007199254740993}"#,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for n in SPECIAL_NUMBERS {
        texts.push((*n).to_owned());
    }
    while texts.len() < CORPUS_SIZE {
        let mut t = String::new();
        t.push_str(ws(&mut rng));
        // Mostly objects, as tool arguments are.
        if rng.chance(70) {
            t.push('{');
            let n = rng.below(10);
            let pool: Vec<String> = (0..=rng.below(8)).map(|_| key(&mut rng)).collect();
            for i in 0..n {
                if i > 0 {
                    t.push(',');
                }
                let k = pool[rng.below(pool.len())].clone();
                let _ = write!(t, "{}\"{k}\":", ws(&mut rng));
                value(&mut rng, 1, &mut t);
            }
            t.push('}');
        } else {
            value(&mut rng, 0, &mut t);
        }
        t.push_str(ws(&mut rng));
        texts.push(t);
    }
    texts
}

fn hex(s: &str) -> String {
    let mut h = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        let _ = write!(h, "{b:02x}");
    }
    h
}

#[test]
fn canonical_text_matches_node_byte_for_byte() {
    let node_ok = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if !node_ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "node is required under CI=true to prove canonical text against JSON.stringify"
        );
        eprintln!(
            "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
             !! canonical_node: `node` NOT FOUND: canonical text was NOT checked against   !!\n\
             !! JSON.stringify. Install node (or run under CI=true to make this fail).     !!\n\
             !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
        );
        return;
    }

    let texts = corpus();
    let dir = std::env::temp_dir();
    let tag = format!("trajgrade-canonical-{}", std::process::id());
    let input: PathBuf = dir.join(format!("{tag}.in"));
    let output: PathBuf = dir.join(format!("{tag}.out"));
    let mut lines = String::with_capacity(texts.iter().map(|t| t.len() * 2 + 1).sum());
    for t in &texts {
        lines.push_str(&hex(t));
        lines.push('\n');
    }
    std::fs::write(&input, lines).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/canonical_node.js");
    let status = Command::new("node").arg(script).arg(&input).arg(&output).status().unwrap();
    assert!(status.success(), "node failed: {status}");
    let produced = std::fs::read_to_string(&output).unwrap();
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    let expected: Vec<&str> = produced.split('\n').collect();
    assert_eq!(expected.len(), texts.len() + 1, "node printed one line per text");

    let mut mismatches = 0usize;
    for (text, want) in texts.iter().zip(&expected) {
        let got = match parse(text, 1000) {
            Ok(v) => to_canonical(&v),
            Err(_) => "ERR".to_owned(),
        };
        if got.as_bytes() != want.as_bytes() {
            mismatches += 1;
            if mismatches <= 10 {
                eprintln!("MISMATCH\n  text: {text:?}\n  node: {want:?}\n  ours: {got:?}");
            }
        }
    }
    eprintln!("canonical_node: {} texts, {mismatches} byte mismatches vs node", texts.len());
    assert_eq!(mismatches, 0, "canonical text differs from node on {mismatches} texts");
}
