//! cargo fuzz target `canonical_text`: the checks live in trajgrade_fuzz::canonical_text (shared with the replay harness).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trajgrade_fuzz::canonical_text(data));
