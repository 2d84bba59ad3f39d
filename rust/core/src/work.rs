//! The work meter of one grading: a deterministic budget of work units and the request's
//! cancellation flag, so no input can hold a grading thread for long (SPEC §7, issue 10).
//!
//! Long loops (matching, scans over calls, expression evaluation) call [`Work::spend`] with
//! the units they are about to do; once it answers `false` they return at once with any
//! outcome, and the grading loop turns the whole trace into the error of [`Work::stopped`].
//! Units are counted, never timed, so the same trace and suite stop at the same point on
//! every run, machine and thread count.
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::CoreError;

/// Why a grading stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The trace needed more than `Limits::max_work_units`.
    WorkLimit,
    /// The request was cancelled or its deadline passed.
    Cancelled,
}

impl Stop {
    /// The trace's item error: `WORK_LIMIT_EXCEEDED` (a limit, the same on every run) or
    /// `CANCELLED`; `field` is the trace's path in the request (`traces[3]`, `trace`, ...).
    pub(crate) fn error(self, limit: u64, field: String) -> CoreError {
        match self {
            Stop::WorkLimit => CoreError::limit(
                "WORK_LIMIT_EXCEEDED",
                field,
                format!("grading needed more than {limit} work units (limit max_work_units)"),
            ),
            Stop::Cancelled => CoreError::Cancelled(field),
        }
    }
}

/// A shared cancellation flag: set it once and every grading that holds it stops at its next
/// [`Work::spend`].
#[derive(Clone, Debug, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Work units spent by one grading against its limit; lives on one thread.
#[derive(Debug)]
pub struct Work {
    limit: u64,
    used: Cell<u64>,
    cancel: Option<CancelFlag>,
    stop: Cell<Option<Stop>>,
}

impl Work {
    pub fn new(limit: u64, cancel: Option<CancelFlag>) -> Self {
        Work { limit, used: Cell::new(0), cancel, stop: Cell::new(None) }
    }

    /// Records `units` of work about to be done; `false` means stop now (the limit is
    /// exceeded, the request was cancelled, or an earlier call already said stop).
    #[inline]
    pub(crate) fn spend(&self, units: u64) -> bool {
        if self.stop.get().is_some() {
            return false;
        }
        let used = self.used.get().saturating_add(units);
        self.used.set(used);
        if used > self.limit {
            self.stop.set(Some(Stop::WorkLimit));
            return false;
        }
        if self.cancel.as_ref().is_some_and(CancelFlag::is_cancelled) {
            self.stop.set(Some(Stop::Cancelled));
            return false;
        }
        true
    }

    /// This meter with another limit (same cancellation flag, nothing spent yet).
    #[must_use]
    pub(crate) fn with_limit(self, limit: u64) -> Self {
        Work::new(limit, self.cancel)
    }

    /// Why the grading must stop, once a [`spend`](Self::spend) said so.
    pub fn stopped(&self) -> Option<Stop> {
        self.stop.get()
    }

    pub fn used(&self) -> u64 {
        self.used.get()
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// The request's cancellation flag, for loops that meter themselves (CEL evaluation).
    pub(crate) fn cancel_flag(&self) -> Option<&CancelFlag> {
        self.cancel.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::{CancelFlag, Stop, Work};

    #[test]
    fn stops_past_the_limit_and_stays_stopped() {
        let w = Work::new(10, None);
        assert!(w.spend(4));
        assert!(w.spend(6));
        assert!(!w.spend(1));
        assert_eq!(w.stopped(), Some(Stop::WorkLimit));
        assert!(!w.spend(0));
    }

    #[test]
    fn stops_when_cancelled() {
        let flag = CancelFlag::new();
        let w = Work::new(u64::MAX, Some(flag.clone()));
        assert!(w.spend(1));
        flag.cancel();
        assert!(!w.spend(1));
        assert_eq!(w.stopped(), Some(Stop::Cancelled));
    }
}
