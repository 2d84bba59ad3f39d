//! `DeadlineTimer`: a timerfd the event loop watches (`loop.add_reader`), armed for an absolute
//! `time.monotonic()` deadline to the microsecond.
//!
//! Why not `loop.call_at`: asyncio waits in `epoll_wait`, whose timeout is whole milliseconds,
//! rounded up, so a live run's settle deadline fired on average half a millisecond late, and up
//! to a whole one, on an otherwise idle loop. A timerfd wakes the same `epoll_wait` on time.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// A monotonic-clock timerfd: readable once its deadline has passed, until `clear`.
#[pyclass(module = "trajgrade._core", name = "DeadlineTimer")]
pub struct PyDeadlineTimer {
    fd: OwnedFd,
}

fn os_error(what: &str) -> PyErr {
    PyOSError::new_err(format!("{what}: {}", io::Error::last_os_error()))
}

/// `seconds` (f64, >= 0) as a `timespec`.
fn timespec(seconds: f64) -> libc::timespec {
    let whole = seconds.trunc();
    // Truncation is intended: nanoseconds below one are below the timer's own resolution.
    #[allow(clippy::cast_possible_truncation)]
    let nanos = ((seconds - whole) * 1e9) as libc::c_long;
    #[allow(clippy::cast_possible_truncation)]
    libc::timespec { tv_sec: whole as libc::time_t, tv_nsec: nanos.clamp(0, 999_999_999) }
}

impl PyDeadlineTimer {
    fn set(&self, value: libc::timespec, flags: libc::c_int) -> PyResult<()> {
        let spec = libc::itimerspec { it_interval: timespec(0.0), it_value: value };
        // SAFETY: a valid timerfd, and pointers to a live itimerspec (no old value wanted).
        let rc = unsafe {
            libc::timerfd_settime(self.fd.as_raw_fd(), flags, &raw const spec, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(os_error("timerfd_settime"));
        }
        Ok(())
    }
}

#[pymethods]
impl PyDeadlineTimer {
    #[new]
    fn new() -> PyResult<Self> {
        // SAFETY: plain syscall; the descriptor is owned from here on (closed on drop).
        let fd = unsafe {
            libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
        };
        if fd < 0 {
            return Err(os_error("timerfd_create"));
        }
        // SAFETY: `fd` was just returned open by timerfd_create and nothing else owns it.
        Ok(PyDeadlineTimer { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// The descriptor the event loop watches: readable once the deadline has passed.
    fn fileno(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Fire at `deadline`, seconds on `time.monotonic()`'s clock (`CLOCK_MONOTONIC`); a deadline
    /// already past fires at once. Replaces the deadline armed before.
    fn arm(&self, deadline: f64) -> PyResult<()> {
        if !deadline.is_finite() {
            return Err(pyo3::exceptions::PyValueError::new_err("the deadline must be finite"));
        }
        let mut at = timespec(deadline.max(0.0));
        if at.tv_sec == 0 && at.tv_nsec == 0 {
            at.tv_nsec = 1; // a zero it_value would disarm: the earliest deadline instead
        }
        self.set(at, libc::TFD_TIMER_ABSTIME)
    }

    /// Not fire (until armed again); a firing not yet cleared stays readable.
    fn disarm(&self) -> PyResult<()> {
        self.set(timespec(0.0), 0)
    }

    /// Take the firing: True if the deadline had passed (the descriptor is then no longer
    /// readable), False if it had not fired.
    fn clear(&self) -> PyResult<bool> {
        let mut expirations = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer from a valid non-blocking timerfd.
        let n = unsafe {
            libc::read(self.fd.as_raw_fd(), expirations.as_mut_ptr().cast(), expirations.len())
        };
        if n == 8 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        if error.kind() == io::ErrorKind::WouldBlock {
            return Ok(false);
        }
        Err(PyOSError::new_err(format!("reading the timerfd: {error}")))
    }
}
