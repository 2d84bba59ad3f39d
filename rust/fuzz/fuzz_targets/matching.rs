//! cargo fuzz target `matching`: the checks live in trajgrade_fuzz::matching (shared with the replay harness).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trajgrade_fuzz::matching(data));
