//! The `Grader`'s thread pool and suite caches: compiling, registering and finding suites.
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use prost::Message;

use super::{Grader, SuiteCache, DEFAULT_MAX_REGISTERED_SUITES};
use crate::error::CoreError;
use crate::limits::Limits;
use crate::proto::v1::Suite;
use crate::suite::CompiledSuite;

impl Grader {
    /// `threads` 0 means one per core.
    pub fn new(limits: Limits, threads: usize) -> Grader {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("trajgrade-{i}"))
            .build()
            .or_else(|_| rayon::ThreadPoolBuilder::new().num_threads(1).build())
            .expect("a one-thread rayon pool can always be built");
        let cap = NonZeroUsize::new(limits.suite_cache_size).unwrap_or(NonZeroUsize::MIN);
        let registered =
            NonZeroUsize::new(DEFAULT_MAX_REGISTERED_SUITES).unwrap_or(NonZeroUsize::MIN);
        Grader {
            limits,
            pool,
            suites: Mutex::new(LruCache::new(cap)),
            registered: Mutex::new(LruCache::new(registered)),
            raw_suites: Mutex::new(LruCache::new(cap)),
        }
    }

    /// Keeps at most `n` registered suites (default 10 000; 0 means 1). Registering one more
    /// evicts the least recently used registered suite (used = registered again, looked up by
    /// `get_suite`, or named by a request's `suite_id`).
    #[must_use]
    pub fn with_max_registered_suites(self, n: usize) -> Grader {
        let cap = NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
        lock(&self.registered).resize(cap);
        self
    }

    /// Decodes and compiles a serialized `Suite`, reusing the cached compilation of equal content.
    pub fn compile_suite(&self, suite_bytes: &[u8]) -> Result<Arc<CompiledSuite>, CoreError> {
        self.compile_decoded(self.decode_suite(suite_bytes)?)
    }

    fn decode_suite(&self, suite_bytes: &[u8]) -> Result<Suite, CoreError> {
        self.check_suite_len(suite_bytes.len())?;
        Suite::decode(suite_bytes).map_err(|e| {
            CoreError::invalid_request("INVALID_SUITE", "suite".to_owned(), e.to_string())
        })
    }

    /// `max_suite_bytes` holds for every suite, however it arrives (registered, inline in a
    /// request, a stream chunk's).
    fn check_suite_len(&self, len: usize) -> Result<(), CoreError> {
        if len <= self.limits.max_suite_bytes {
            return Ok(());
        }
        Err(CoreError::limit(
            "SUITE_TOO_LARGE",
            "suite".to_owned(),
            format!(
                "suite is {len} bytes; the limit is {} (max_suite_bytes)",
                self.limits.max_suite_bytes
            ),
        ))
    }

    /// [`Grader::check_suite_len`] for the inline suite (field `tag`) of a request, before the
    /// request is decoded (a huge suite is refused without building it).
    pub(super) fn check_inline_suite_len(&self, request: &[u8], tag: u32) -> Result<(), CoreError> {
        self.check_suite_len(crate::wire::message_field_len(request, tag))
    }

    /// Compiles a serialized suite and keeps it among the registered suites; returns its id.
    /// Registered suites are never evicted by inline suites; beyond `max_registered_suites` the
    /// least recently used registered suite is.
    pub fn register_suite(&self, suite_bytes: &[u8]) -> Result<String, CoreError> {
        let suite = self.decode_suite(suite_bytes)?;
        let id = crate::suite::suite_id(&suite);
        if lock(&self.registered).get(&id).is_some() {
            return Ok(id);
        }
        let cached = lock(&self.suites).get(&id).cloned();
        let compiled = match cached {
            Some(c) => c,
            None => Arc::new(CompiledSuite::compile_owned(suite, &self.limits)?),
        };
        lock(&self.registered).put(id.clone(), compiled);
        Ok(id)
    }

    /// A compiled suite by id: a registered one, or an inline one still in the LRU.
    pub fn get_suite(&self, suite_id: &str) -> Option<Arc<CompiledSuite>> {
        if let Some(s) = lock(&self.registered).get(suite_id) {
            return Some(Arc::clone(s));
        }
        lock(&self.suites).get(suite_id).cloned()
    }

    fn compile_decoded(&self, suite: Suite) -> Result<Arc<CompiledSuite>, CoreError> {
        let id = crate::suite::suite_id(&suite);
        if let Some(hit) = self.get_suite(&id) {
            return Ok(hit);
        }
        // Compile outside the lock: two threads may both compile a new suite; both results are equal.
        let compiled = Arc::new(CompiledSuite::compile_owned(suite, &self.limits)?);
        lock(&self.suites).put(id, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// The compiled suite for an inline suite whose raw bytes (field `tag` of `request`, the
    /// only suite reference in it) were compiled before and whose id is still cached.
    pub(super) fn raw_hit(
        &self,
        request: &[u8],
        tag: u32,
        rival: u32,
    ) -> Option<Arc<CompiledSuite>> {
        let raw = crate::wire::sole_message_field(request, tag, rival)?;
        let id = lock_raw(&self.raw_suites).get(&raw_key(raw)).cloned()?;
        self.get_suite(&id)
    }

    /// [`Grader::compile_decoded`], remembering the raw bytes' hash for [`Grader::raw_hit`].
    pub(super) fn compile_raw(
        &self,
        suite: Suite,
        raw: Option<[u8; 32]>,
    ) -> Result<Arc<CompiledSuite>, CoreError> {
        let compiled = self.compile_decoded(suite)?;
        if let Some(key) = raw {
            lock_raw(&self.raw_suites).put(key, compiled.id().to_owned());
        }
        Ok(compiled)
    }

    pub(super) fn find_suite(&self, id: &str) -> Result<Arc<CompiledSuite>, CoreError> {
        self.get_suite(id).ok_or_else(|| CoreError::SuiteNotFound(id.to_owned()))
    }
}

pub(super) fn raw_key(suite_bytes: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(suite_bytes).into()
}

fn lock(cache: &SuiteCache) -> std::sync::MutexGuard<'_, LruCache<String, Arc<CompiledSuite>>> {
    // A poisoned cache is still a valid cache: every entry is immutable.
    cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock_raw(
    cache: &Mutex<LruCache<[u8; 32], String>>,
) -> std::sync::MutexGuard<'_, LruCache<[u8; 32], String>> {
    cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
