//! cargo fuzz target `json_trace`: the checks live in trajgrade_fuzz::json_trace (shared with the replay harness).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| trajgrade_fuzz::json_trace(data));
