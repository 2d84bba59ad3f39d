//! cargo fuzz target `expression`: the checks live in trajgrade_fuzz::expression (shared with the replay harness).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trajgrade_fuzz::expression(data));
