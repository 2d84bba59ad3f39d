//! Stable replay harness: runs each fuzz target's checks (trajgrade_fuzz) over its seed corpus
//! plus seeded random inputs, without nightly or libFuzzer.
//!
//!   replay [--inputs N] [--seed S] [TARGET...]    run the targets (default: all)
//!   replay gen-corpus CASES_JSONL                 (re)write corpus/<target>/ from the cases
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use prost::Message;
use trajgrade_core::proto::v1::{Suite, Trace};
use trajgrade_fuzz::TARGETS;

/// splitmix64: a tiny deterministic generator, enough for replay inputs.
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
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_dir_sorted(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths.into_iter().filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b))).collect()
}

/// A seed with a few random byte edits (overwrite, insert, delete, truncate).
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(4) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            _ => v.truncate(rng.below(v.len() + 1)),
        }
    }
    v
}

fn run_one(name: &str, f: fn(&[u8]), input: &[u8], what: &str) -> bool {
    if catch_unwind(AssertUnwindSafe(|| f(input))).is_ok() {
        return true;
    }
    let dir = root().join("artifacts").join(name);
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("replay-crash-{:016x}", fnv(input)));
    let _ = std::fs::write(&path, input);
    eprintln!("!!! {name}: FAILED on {what}; input saved to {}", path.display());
    false
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

fn run(args: &[String]) -> ExitCode {
    let mut inputs = 2000usize;
    let mut seed = 0x7261_6a67_7261_6465_u64;
    let mut chosen = BTreeSet::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--inputs" => inputs = it.next().and_then(|v| v.parse().ok()).expect("--inputs N"),
            "--seed" => seed = it.next().and_then(|v| v.parse().ok()).expect("--seed S"),
            t => {
                assert!(TARGETS.iter().any(|(n, _)| *n == t), "unknown target {t}");
                chosen.insert(t.to_owned());
            }
        }
    }
    println!("=== REPLAY MODE (stable, no libFuzzer): seed corpus + {inputs} seeded random inputs per target ===");
    let mut failed = 0usize;
    for &(name, f) in TARGETS {
        if !chosen.is_empty() && !chosen.contains(name) {
            continue;
        }
        let started = std::time::Instant::now();
        let corpus = read_dir_sorted(&root().join("corpus").join(name));
        let mut rng = Rng(seed ^ fnv(name.as_bytes()));
        let mut ok = 0usize;
        let mut bad = 0usize;
        let mut tally = |pass: bool| if pass { ok += 1 } else { bad += 1 };
        for (p, bytes) in &corpus {
            tally(run_one(name, f, bytes, &p.display().to_string()));
        }
        for i in 0..inputs {
            let input = if i % 2 == 0 || corpus.is_empty() {
                let len = rng.below(512);
                rng.bytes(len)
            } else {
                let s = rng.below(corpus.len());
                mutate(&mut rng, &corpus[s].1)
            };
            tally(run_one(name, f, &input, &format!("random input {i}")));
        }
        println!(
            "replay {name}: {} corpus + {inputs} random inputs, {ok} ok, {bad} failed ({:.1}s)",
            corpus.len(),
            started.elapsed().as_secs_f64()
        );
        if name == "grade" {
            let n = trajgrade_fuzz::GRADED.load(std::sync::atomic::Ordering::Relaxed);
            println!("replay grade: {n} inputs compiled a suite and were graded");
        }
        failed += bad;
    }
    if failed > 0 {
        eprintln!("=== REPLAY MODE: {failed} failing input(s) ===");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn write_seed(target: &str, name: &str, bytes: &[u8]) {
    let dir = root().join("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    std::fs::write(dir.join(name), bytes).expect("write seed");
}

/// Seeds from the conformance cases: traces and suites as protobuf bytes, a few suites as
/// protobuf-JSON text, argument texts for canonical_text, and random blobs for grade.
fn gen_corpus(cases: &Path) -> ExitCode {
    let text = std::fs::read_to_string(cases).expect("read cases.jsonl");
    let mut json_texts = BTreeSet::new();
    let (mut traces, mut suites) = (0, 0);
    for (i, line) in text.lines().enumerate().filter(|(i, _)| i % 4 == 0) {
        let case: serde_json::Value = serde_json::from_str(line).expect("case JSON");
        let id = case["id"].as_str().unwrap_or("case");
        if let Ok(t) = serde_json::from_value::<Trace>(case["trace"].clone()) {
            write_seed("decode_trace", &format!("{i:03}-{id}"), &t.encode_to_vec());
            traces += 1;
            for c in &t.calls {
                if let Some(a) = &c.arguments_json {
                    json_texts.insert(a.clone());
                }
            }
        }
        if let Ok(s) = serde_json::from_value::<Suite>(case["suite"].clone()) {
            write_seed("compile_suite", &format!("{i:03}-{id}"), &s.encode_to_vec());
            if i % 16 == 0 {
                let j = serde_json::to_vec(&case["suite"]).expect("suite JSON");
                write_seed("compile_suite", &format!("{i:03}-{id}.json"), &j);
            }
            suites += 1;
            for a in &s.assertions {
                if let Some(trajgrade_core::proto::v1::assertion::Kind::ToolCallArgs(t)) = &a.kind {
                    if let Some(m) = &t.r#match {
                        json_texts.insert(m.args_json.clone());
                    }
                }
            }
        }
    }
    let extra = [
        r#"{"b":1,"a":[1.0,-0,1e400,"\ud800"],"2":null,"10":{"x":"\u00e9"}}"#,
        "[[[[[[[[[[[]]]]]]]]]]]",
        r#"{"n":123456789012345678901234567890,"f":0.1e-7,"s":"\"\\\/\b\f\n\r\t"}"#,
    ];
    json_texts.extend(extra.iter().map(|s| (*s).to_owned()));
    json_texts.retain(|s| !s.is_empty());
    for (i, t) in json_texts.iter().take(48).enumerate() {
        write_seed("canonical_text", &format!("{i:03}"), t.as_bytes());
    }
    let mut rng = Rng(42);
    for i in 0..8 {
        let len = 64 << (i % 3);
        write_seed("grade", &format!("{i:03}-random"), &rng.bytes(len));
    }
    write_seed(
        "decode_trace",
        "fixed-suite-json-as-bytes",
        trajgrade_fuzz::FIXED_SUITE_JSON.as_bytes(),
    );
    println!(
        "corpus: {traces} traces, {suites} suites, {} JSON texts, 8 grade blobs",
        json_texts.len().min(48)
    );
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("gen-corpus") {
        let cases = args
            .get(1)
            .map_or_else(|| root().join("../../tests/conformance/cases.jsonl"), PathBuf::from);
        return gen_corpus(&cases);
    }
    run(&args)
}
