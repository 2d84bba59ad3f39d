//! cargo fuzz target `grade`: the checks live in trajgrade_fuzz::grade (shared with the replay harness).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trajgrade_fuzz::grade(data));
