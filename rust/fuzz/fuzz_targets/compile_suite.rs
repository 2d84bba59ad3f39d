//! cargo fuzz target `compile_suite`: the checks live in trajgrade_fuzz::compile_suite (shared with the replay harness).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trajgrade_fuzz::compile_suite(data));
