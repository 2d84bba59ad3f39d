//! The OTLP/gRPC receiver's transport: tonic serves `TraceService/Export` and
//! `LogsService/Export` on threads of its own, and hands each export's body to the Python event
//! loop, which answers it (`live/otlp_grpc.py`).
//!
//! Why not grpc.aio: a grpc.aio server runs every call's transport work on the event loop
//! holding the interpreter, so the live receiver's grading delayed exporters' requests and
//! answers (`bench_live`: half the interpreter's time at one export per run was grpc.aio's). Here
//! HTTP/2, TLS, compression, the bearer token and draining are handled without the
//! interpreter; the loop is woken once per batch of exports (a byte on a socket pair it
//! watches) and takes them all in one call.
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyList};
use tokio::sync::oneshot;
use tonic::codec::CompressionEncoding;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::Grpc;
use tonic::{Request, Response, Status};
use trajgrade_core::otlp::heads::{span_heads, ResourceHead, SpanHead};

use crate::otlp::{live_spans, Row};
use crate::tonic_serve::{bearer_allowed, bind, RawCodec, Served, TlsPem};

const TRACES_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
const LOGS_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// What Python answers an export with.
type Answer = Result<Bytes, Status>;

/// A traces export's span heads, decoded on the transport's thread as it arrives (no
/// interpreter), with the attribute keys they were read for; or the decode's error message.
struct Decoded {
    keys: Arc<Vec<String>>,
    heads: Result<(Vec<ResourceHead<'static>>, Vec<SpanHead<'static>>), String>,
}

/// One export waiting for the event loop.
struct Pending {
    logs: bool,
    body: Bytes,
    answer: oneshot::Sender<Answer>,
    decoded: Option<Decoded>,
}

/// What the tonic side and Python share.
struct Shared {
    queue: Mutex<VecDeque<Pending>>,
    /// A wake-up byte is on its way (cleared by `take`): one per batch, not per export.
    notified: AtomicBool,
    wake: UnixStream,
    draining: AtomicBool,
    token: Option<Vec<u8>>,
    /// The attribute keys the loop's intake reads (`set_keys`): a traces export's heads are
    /// decoded with them before it is queued.
    keys: Mutex<Arc<Vec<String>>>,
    /// Exports refused as over the size limit (traces, logs), never seen by Python: taken
    /// into the exports metric by `take_too_large`.
    too_large: [AtomicU64; 2],
}

impl Shared {
    fn push(&self, pending: Pending) {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push_back(pending);
        if !self.notified.swap(true, Ordering::AcqRel) {
            // A full socket buffer means a wake-up is pending anyway.
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// One export's unary service: queued for Python, answered when Python replies.
#[derive(Clone)]
struct Export {
    shared: Arc<Shared>,
    logs: bool,
}

impl Service<Request<Bytes>> for Export {
    type Response = Response<Bytes>;
    type Error = Status;
    type Future = BoxFuture<Response<Bytes>, Status>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let (shared, logs) = (Arc::clone(&self.shared), self.logs);
        Box::pin(async move {
            if shared.draining.load(Ordering::Acquire) {
                // Retryable for an exporter (OTLP): its retry goes to a replica that is up.
                return Err(Status::unavailable("the server is shutting down"));
            }
            let (answer, answered) = oneshot::channel();
            let body = request.into_inner();
            // The decode runs here, on the transport's thread: the loop only makes the spans.
            let decoded = (!logs).then(|| {
                let keys = Arc::clone(&shared.keys.lock().unwrap_or_else(PoisonError::into_inner));
                let names: Vec<&str> = keys.iter().map(String::as_str).collect();
                let heads = span_heads(&body, &names)
                    .map(|(resources, spans)| {
                        (
                            resources.into_iter().map(ResourceHead::into_owned).collect(),
                            spans.into_iter().map(SpanHead::into_owned).collect(),
                        )
                    })
                    .map_err(|e| e.to_string());
                Decoded { keys, heads }
            });
            shared.push(Pending { logs, body, answer, decoded });
            match answered.await {
                Ok(Ok(body)) => Ok(Response::new(body)),
                Ok(Err(status)) => Err(status),
                Err(_) => Err(Status::unavailable("the receiver stopped before answering")),
            }
        })
    }
}

/// Routes the two methods; anything else is UNIMPLEMENTED.
#[derive(Clone)]
struct OtlpService {
    shared: Arc<Shared>,
    max_message_bytes: usize,
}

impl<B> Service<http::Request<B>> for OtlpService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let logs = match request.uri().path() {
            TRACES_PATH => false,
            LOGS_PATH => true,
            path => {
                let status = Status::unimplemented(format!("no method {path} here"));
                return Box::pin(async move { Ok(status.into_http()) });
            }
        };
        if !bearer_allowed(self.shared.token.as_deref(), &request) {
            let status = Status::unauthenticated(
                "missing or wrong bearer token: send 'authorization: Bearer <token>'",
            );
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let shared = Arc::clone(&self.shared);
        let export = Export { shared: Arc::clone(&self.shared), logs };
        let max = self.max_message_bytes;
        Box::pin(async move {
            let mut grpc = Grpc::new(RawCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .apply_max_message_size_config(Some(max), Some(max));
            let response = grpc.unary(export, request).await;
            let (response, too_large) = too_large_exhausted(response, max);
            if too_large {
                shared.too_large[usize::from(logs)].fetch_add(1, Ordering::Relaxed);
            }
            Ok(response)
        })
    }
}

/// tonic refuses a request over the size limit with `OUT_OF_RANGE`, which OTLP exporters retry
/// (the same export, refused again, until their timeout); grpc's own servers, and the OTLP
/// specification for a request too large, say `RESOURCE_EXHAUSTED` without retry info: not
/// retried. The refusal is a trailers-only response, so its status is in the headers. True
/// with the response when it was such a refusal.
fn too_large_exhausted(
    response: http::Response<tonic::body::Body>,
    max: usize,
) -> (http::Response<tonic::body::Body>, bool) {
    let out_of_range = i32::from(tonic::Code::OutOfRange).to_string();
    if response.headers().get("grpc-status").is_some_and(|code| code == out_of_range.as_str()) {
        let status = Status::resource_exhausted(format!(
            "the export is over {max} bytes (--otlp-max-message-bytes): send smaller batches"
        ));
        return (status.into_http(), true);
    }
    (response, false)
}

/// An export taken by the event loop: its body, and how to answer it (once).
#[pyclass(module = "trajgrade._core", name = "OtlpExport")]
pub struct PyOtlpExport {
    #[pyo3(get)]
    logs: bool,
    body: Option<Bytes>,
    answer: Option<oneshot::Sender<Answer>>,
    decoded: Option<Decoded>,
}

#[pymethods]
impl PyOtlpExport {
    /// The request's protobuf bytes (a copy; taken once).
    fn body<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body.take().unwrap_or_default())
    }

    /// A traces export's spans and rows, as `otlp_spans(body, keys, taken, convert)` makes
    /// them: from the heads the transport decoded when they were read for these keys, else
    /// decoded now. A malformed request raises `ValueError`.
    #[allow(clippy::needless_pass_by_value)] // pyo3 extracts the arguments as owned values
    fn spans<'py>(
        &mut self,
        py: Python<'py>,
        keys: Vec<PyBackedStr>,
        taken: Bound<'py, PyAny>,
        convert: Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<Row<'py>>)> {
        let same = |d: &Decoded| d.keys.iter().map(String::as_str).eq(keys.iter().map(|k| &k[..]));
        if let Some(decoded) = self.decoded.take().filter(same) {
            let (resources, heads) = decoded.heads.map_err(PyValueError::new_err)?;
            return live_spans(py, resources, heads, &taken, &convert);
        }
        let body = self.body.clone().unwrap_or_default();
        crate::otlp::otlp_spans(py, &body, keys, taken, convert)
    }

    /// Answer with these response bytes (an encoded `Export*ServiceResponse`).
    fn reply(&mut self, response: &[u8]) {
        if let Some(answer) = self.answer.take() {
            let _ = answer.send(Ok(Bytes::copy_from_slice(response)));
        }
    }

    /// Answer with a gRPC status (its code number) and message.
    fn fail(&mut self, code: i32, message: &str) {
        if let Some(answer) = self.answer.take() {
            let _ = answer.send(Err(Status::new(tonic::Code::from_i32(code), message)));
        }
    }
}

/// The receiver: serving from construction until `stop`.
#[pyclass(module = "trajgrade._core", name = "OtlpGrpcTransport")]
pub struct PyOtlpGrpcTransport {
    shared: Arc<Shared>,
    woken: UnixStream,
    #[pyo3(get)]
    port: u16,
    served: Served,
}

#[pymethods]
impl PyOtlpGrpcTransport {
    /// Bind `address` (`host:port` or `[v6]:port`) and serve on a thread of its own. `OSError`
    /// when the address cannot be bound, `ValueError` for a bad address (a unix socket too) or
    /// TLS.
    #[new]
    #[pyo3(signature = (address, max_message_bytes, token=None, tls=None))]
    fn new(
        address: &str,
        max_message_bytes: usize,
        token: Option<&str>,
        tls: Option<TlsPem>,
    ) -> PyResult<Self> {
        let (woken, wake) = UnixStream::pair().map_err(|e| PyOSError::new_err(e.to_string()))?;
        for end in [&woken, &wake] {
            end.set_nonblocking(true).map_err(|e| PyOSError::new_err(e.to_string()))?;
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            notified: AtomicBool::new(false),
            wake,
            draining: AtomicBool::new(false),
            token: token.map(|t| t.as_bytes().to_vec()),
            keys: Mutex::new(Arc::new(Vec::new())),
            too_large: [AtomicU64::new(0), AtomicU64::new(0)],
        });
        // TCP only: live/otlp_grpc.py serves unix sockets on grpc.aio (hyperium/h2#487).
        let bound = bind("trajgrade-otlp", address, tls)?;
        let service = OtlpService { shared: Arc::clone(&shared), max_message_bytes };
        let (served, port) = Served::start(bound, service);
        Ok(PyOtlpGrpcTransport { shared, woken, port, served })
    }

    /// The descriptor the event loop watches (`loop.add_reader`): readable when exports wait.
    fn fileno(&self) -> i32 {
        self.woken.as_raw_fd()
    }

    /// Every export waiting, in arrival order (the wake-up consumed).
    fn take(&self) -> Vec<PyOtlpExport> {
        let mut sink = [0u8; 64];
        while matches!((&self.woken).read(&mut sink), Ok(n) if n > 0) {}
        self.shared.notified.store(false, Ordering::Release);
        let waiting: Vec<Pending> =
            self.shared.queue.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect();
        waiting
            .into_iter()
            .map(|p| PyOtlpExport {
                logs: p.logs,
                body: Some(p.body),
                answer: Some(p.answer),
                decoded: p.decoded,
            })
            .collect()
    }

    /// The attribute keys the loop's intake reads: traces exports are decoded with them as
    /// they arrive (an export decoded with others is decoded again by `OtlpExport.spans`).
    fn set_keys(&self, keys: Vec<String>) {
        *self.shared.keys.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
    }

    /// The exports refused as over the size limit since the last call: (traces, logs).
    fn take_too_large(&self) -> (u64, u64) {
        let [traces, logs] = &self.shared.too_large;
        (traces.swap(0, Ordering::Relaxed), logs.swap(0, Ordering::Relaxed))
    }

    /// From now on, exports are answered UNAVAILABLE (retryable) without reaching Python.
    fn set_draining(&self) {
        self.shared.draining.store(true, Ordering::Release);
    }

    /// Stop listening, let calls in flight finish for up to `grace_s`, then close the rest.
    /// Exports still queued for Python are answered UNAVAILABLE.
    fn stop(&mut self, py: Python<'_>, grace_s: f64) {
        self.set_draining();
        for pending in self.take() {
            drop(pending); // the dropped answer: UNAVAILABLE
        }
        self.served.stop(py, grace_s);
    }
}
