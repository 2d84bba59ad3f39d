//! The `Grader`: a dedicated rayon pool, the suite caches, and the byte-level batch API.
//! `pool`: building the pool, compiling, registering and caching suites; `requests`: serialized
//! requests, envelopes and stream chunks; `blocks`: JSONL lines and Arrow rows graded into
//! regrade rows.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use lru::LruCache;
use prost::Message;

use crate::limits::Limits;
use crate::proto::v1::{trace_outcome, ItemError, TraceOutcome};
use crate::suite::CompiledSuite;

mod blocks;
mod pool;
mod requests;
#[cfg(test)]
mod tests;

/// Registered suites kept by default (see [`Grader::with_max_registered_suites`]).
pub const DEFAULT_MAX_REGISTERED_SUITES: usize = 10_000;

type SuiteCache = Mutex<LruCache<String, Arc<CompiledSuite>>>;

/// Shared by every thread: limits, a rayon pool built once (never the global one), and two
/// suite caches: inline-compiled suites (LRU of `suite_cache_size`) and registered suites (their
/// own LRU of `max_registered_suites`, so inline traffic never evicts a registered suite).
pub struct Grader {
    limits: Limits,
    pool: rayon::ThreadPool,
    suites: SuiteCache,
    registered: SuiteCache,
    /// SHA-256 of an inline suite's bytes exactly as they appeared in a request → its suite id
    /// (same capacity as the inline LRU). A hit is used only while that id is still cached, so
    /// it never changes which suite a request gets, only skips decoding and hashing it.
    raw_suites: Mutex<LruCache<[u8; 32], String>>,
}

impl Grader {
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// Runs one item's grading; a panic becomes that item's `INTERNAL` error with a generic message
/// (as `T`: the outcome bytes, or `Some` of them where a grading may be deferred).
fn guarded<T: From<Vec<u8>>>(
    grade: impl FnOnce() -> T,
    trace_id: impl FnOnce() -> String,
    i: usize,
    list: &str,
) -> T {
    catch_unwind(AssertUnwindSafe(grade)).unwrap_or_else(|_| {
        item_error(trace_id(), "INTERNAL", format!("{list}[{i}]"), "internal error".to_owned())
            .into()
    })
}

fn item_error(trace_id: String, reason_code: &str, field: String, message: String) -> Vec<u8> {
    TraceOutcome {
        outcome: Some(trace_outcome::Outcome::Error(ItemError {
            trace_id,
            reason_code: reason_code.to_owned(),
            field,
            message,
        })),
    }
    .encode_to_vec()
}
