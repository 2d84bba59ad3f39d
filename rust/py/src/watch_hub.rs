//! `WatchResults` served by the core (`grader_front.rs`): the watchers, each with a bounded queue
//! that publishing never waits on, and their streams, written on the front's thread without the
//! interpreter. The same rules as `live/watch.py`'s hub (which serves a unix-socket server):
//! a watcher whose queue is full is cut with `WATCHER_TOO_SLOW` and the others go on; a drain
//! ends every stream after what it was already sent.
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use prost::Message;
use pyo3::prelude::*;
use tokio::sync::mpsc;
use tonic::codegen::BoxFuture;
use tonic::{Code, Request, Response, Status};
use trajgrade_core::proto::v1::WatchResultsRequest;

/// A status the hub answers with, as Python's `to_status` makes it (code, message and the
/// `grpc-status-details-bin` bytes: one table of errors, `server/status.py`).
#[derive(Clone)]
pub(crate) struct Refusal {
    code: i32,
    message: String,
    details: Bytes,
}

impl Refusal {
    pub(crate) fn status(&self) -> Status {
        Status::with_details(Code::from_i32(self.code), self.message.clone(), self.details.clone())
    }
}

/// What a watcher's queue holds.
enum Item {
    /// The encoded response, and its run's key when the debug timing is on.
    Result(Bytes, Option<Arc<str>>),
    End(Status),
}

struct Watcher {
    id: u64,
    suite_ids: HashSet<String>,
    verdicts: HashSet<i32>,
    services: HashSet<String>,
    queue: mpsc::Sender<Item>,
}

impl Watcher {
    fn wants(&self, suite_id: &str, verdict: i32, service: &str) -> bool {
        (self.suite_ids.is_empty() || self.suite_ids.contains(suite_id))
            && (self.verdicts.is_empty() || self.verdicts.contains(&verdict))
            && (self.services.is_empty() || self.services.contains(service))
    }
}

/// The watchers, and whether the server is draining (new callers are then refused).
struct Watchers {
    open: Vec<Watcher>,
    closed: bool,
}

pub(crate) struct Hub {
    queue_size: usize,
    watchers: Mutex<Watchers>,
    next_id: AtomicU64,
    dropped: AtomicU64,
    /// Each ended stream's status code and duration, until Python counts them (`take_ended`).
    ended: Mutex<Vec<(i32, f64)>>,
    /// `TRAJGRADE_LIVE_TIMING` (`live/timing.py`): when a stream took each run's result off its
    /// queue (wall clock ns), until Python takes them (`take_dequeued`).
    dequeued: Mutex<Vec<(Arc<str>, u64)>>,
    too_slow: Refusal,
    closed: Refusal,
    pub(crate) invalid: Refusal,
    pub(crate) unauthenticated: Refusal,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watchers> {
        self.watchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ended(&self, code: Code, started: Instant) {
        let took = started.elapsed().as_secs_f64();
        self.ended.lock().unwrap_or_else(PoisonError::into_inner).push((code as i32, took));
    }

    /// A new watcher's stream, or the status it is refused with (not counted here).
    pub(crate) fn watch(
        self: &Arc<Self>,
        request: &[u8],
        started: Instant,
    ) -> Result<WatchStream, Status> {
        let Ok(request) = WatchResultsRequest::decode(request) else {
            return Err(self.invalid.status());
        };
        // One slot more than the bound, kept for the end marker.
        let (queue, receiver) = mpsc::channel(self.queue_size + 1);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut watchers = self.lock();
        if watchers.closed {
            return Err(self.closed.status());
        }
        watchers.open.push(Watcher {
            id,
            suite_ids: request.suite_ids.into_iter().collect(),
            verdicts: request.verdicts.into_iter().collect(),
            services: request.service_names.into_iter().collect(),
            queue,
        });
        Ok(WatchStream { receiver, hub: Arc::clone(self), id, started, ended: false })
    }

    /// A refused call, counted.
    pub(crate) fn refused(&self, status: &Status, started: Instant) {
        self.ended(status.code(), started);
    }
}

/// One `WatchResults` call's messages: its queue, until an end marker or the caller leaves.
pub(crate) struct WatchStream {
    receiver: mpsc::Receiver<Item>,
    hub: Arc<Hub>,
    id: u64,
    started: Instant,
    ended: bool,
}

impl futures_core::Stream for WatchStream {
    type Item = Result<Bytes, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.receiver.poll_recv(cx) {
            Poll::Ready(Some(Item::Result(payload, key))) => {
                if let Some(key) = key {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64);
                    self.hub
                        .dequeued
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((key, now));
                }
                Poll::Ready(Some(Ok(payload)))
            }
            Poll::Ready(Some(Item::End(status))) => {
                self.ended = true;
                self.hub.ended(status.code(), self.started);
                Poll::Ready(Some(Err(status)))
            }
            // The hub dropped the queue without an end marker: not done by the hub; ends OK.
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        let id = self.id;
        self.hub.lock().open.retain(|w| w.id != id);
        if !self.ended {
            // The caller went away (or the server stopped) before an end marker.
            self.hub.ended(Code::Cancelled, self.started);
        }
    }
}

/// tonic's server-streaming service for one call.
#[derive(Clone)]
pub(crate) struct WatchService {
    pub hub: Arc<Hub>,
    pub started: Instant,
}

impl tonic::codegen::Service<Request<Bytes>> for WatchService {
    type Response = Response<WatchStream>;
    type Error = Status;
    type Future = BoxFuture<Self::Response, Status>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let result = self.hub.watch(request.get_ref(), self.started);
        if let Err(status) = &result {
            self.hub.refused(status, self.started);
        }
        Box::pin(async move { result.map(Response::new) })
    }
}

/// The hub of the core's `WatchResults` streams, shared by the fronts serving them; Python's
/// `WatchHub` publishes to it.
#[pyclass(module = "trajgrade._core", name = "WatchHub", frozen)]
pub struct PyWatchHub {
    pub(crate) hub: Arc<Hub>,
}

type RefusalArg = (i32, String, Vec<u8>);

fn refusal((code, message, details): RefusalArg) -> Refusal {
    Refusal { code, message, details: Bytes::from(details) }
}

#[pymethods]
impl PyWatchHub {
    /// `queue_size` results buffered per watcher; the statuses (code, message, details bytes)
    /// for a watcher cut as too slow, a drain, a request that does not decode and a missing
    /// or wrong token.
    #[new]
    fn new(
        queue_size: usize,
        too_slow: RefusalArg,
        closed: RefusalArg,
        invalid: RefusalArg,
        unauthenticated: RefusalArg,
    ) -> Self {
        let hub = Hub {
            queue_size: queue_size.max(1),
            watchers: Mutex::new(Watchers { open: Vec::new(), closed: false }),
            next_id: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            ended: Mutex::new(Vec::new()),
            dequeued: Mutex::new(Vec::new()),
            too_slow: refusal(too_slow),
            closed: refusal(closed),
            invalid: refusal(invalid),
            unauthenticated: refusal(unauthenticated),
        };
        PyWatchHub { hub: Arc::new(hub) }
    }

    /// Send one result (an encoded `WatchResultsResponse`) to every watcher whose filter takes
    /// it; never waits. A watcher whose queue is full is cut (`WATCHER_TOO_SLOW`). With
    /// `run_key` (the debug timing), each stream notes when it takes the result.
    #[pyo3(signature = (suite_id, verdict, service, payload, run_key=None))]
    fn publish(
        &self,
        suite_id: &str,
        verdict: i32,
        service: &str,
        payload: &[u8],
        run_key: Option<&str>,
    ) {
        let hub = &self.hub;
        let mut watchers = hub.lock();
        if watchers.open.is_empty() {
            return;
        }
        let payload = Bytes::copy_from_slice(payload);
        let key: Option<Arc<str>> = run_key.map(Arc::from);
        watchers.open.retain(|w| {
            if !w.wants(suite_id, verdict, service) {
                return true;
            }
            if w.queue.capacity() <= 1 {
                // Full: the reserved slot takes the end marker.
                hub.dropped.fetch_add(1, Ordering::Relaxed);
                let _ = w.queue.try_send(Item::End(hub.too_slow.status()));
                return false;
            }
            // A closed queue: the caller left (its stream's drop removes it too).
            w.queue.try_send(Item::Result(payload.clone(), key.clone())).is_ok()
        });
    }

    /// Drain: every stream ends after what it was already sent; new callers are refused.
    fn close(&self) {
        let mut watchers = self.hub.lock();
        watchers.closed = true;
        for w in watchers.open.drain(..) {
            let _ = w.queue.try_send(Item::End(self.hub.closed.status()));
        }
    }

    /// The watchers following now.
    fn watchers(&self) -> usize {
        self.hub.lock().open.len()
    }

    /// Watchers cut as too slow so far.
    #[getter]
    fn dropped(&self) -> u64 {
        self.hub.dropped.load(Ordering::Relaxed)
    }

    /// The debug timing's stamps since the last call: (run key, wall clock ns) each time a
    /// stream took a result published with a `run_key`.
    fn take_dequeued(&self) -> Vec<(String, u64)> {
        let taken =
            std::mem::take(&mut *self.hub.dequeued.lock().unwrap_or_else(PoisonError::into_inner));
        taken.into_iter().map(|(key, at)| (key.to_string(), at)).collect()
    }

    /// The calls ended since the last call: (status code, seconds) each, for the RPC metrics.
    fn take_ended(&self) -> Vec<(i32, f64)> {
        std::mem::take(&mut *self.hub.ended.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
