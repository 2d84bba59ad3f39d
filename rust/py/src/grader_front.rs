//! The grader's front: with live grading on, tonic serves the server's TCP addresses. It
//! serves `GraderService/WatchResults` itself, from the core's hub (`watch_hub.rs`), and passes
//! every other call as it is (headers, messages, trailers) to the grpc.aio server, which then
//! listens on a private unix socket only.
//!
//! Why: grpc.aio writes a stream's messages one at a time, each completed by a turn of the
//! event loop that also takes exports, runs settle timers and grades, so a live result waited
//! behind earlier ones for as long as the loop was busy (`bench_live --split`: most of the p99
//! was in the watcher's queue). Here a result is written on the front's thread as soon as it is
//! published. HTTP/2, TLS and the bearer token of `WatchResults` are handled without the
//! interpreter; the other calls' tokens are checked by grpc.aio as before.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use pyo3::prelude::*;
use tonic::codec::CompressionEncoding;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::Grpc;
use tonic::Status;

use crate::tonic_serve::{bearer_allowed, bind, RawCodec, Served, TlsPem};
use crate::watch_hub::{Hub, PyWatchHub, WatchService};

const WATCH_PATH: &str = "/trajgrade.v1.GraderService/WatchResults";

/// The grpc.aio server behind the front: one HTTP/2 connection on its unix socket, made again
/// when it closed.
struct Upstream {
    path: PathBuf,
    sender: tokio::sync::Mutex<Option<http2::SendRequest<tonic::body::Body>>>,
}

impl Upstream {
    async fn connect(&self) -> Result<http2::SendRequest<tonic::body::Body>, String> {
        let mut sender = self.sender.lock().await;
        if let Some(open) = sender.as_ref().filter(|s| !s.is_closed()) {
            return Ok(open.clone());
        }
        let stream = tokio::net::UnixStream::connect(&self.path)
            .await
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let (opened, connection) = http2::Builder::new(TokioExecutor::new())
            // Large windows: a batch's megabytes are not held back by flow control on the way.
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(16 << 20)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection); // ends when the connection closes
        *sender = Some(opened.clone());
        Ok(opened)
    }

    /// The call passed on as it is; UNAVAILABLE when grpc.aio cannot be reached (stopped).
    async fn forward(
        &self,
        request: http::Request<tonic::body::Body>,
    ) -> http::Response<tonic::body::Body> {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
        // The socket's own authority: grpc.aio checks nothing of it.
        match http::Uri::builder()
            .scheme("http")
            .authority("localhost")
            .path_and_query(path)
            .build()
        {
            Ok(uri) => parts.uri = uri,
            Err(e) => return Status::internal(format!("the call's path: {e}")).into_http(),
        }
        let unreachable = |e: &dyn std::fmt::Display| {
            Status::unavailable(format!("the grading service is not reachable: {e}")).into_http()
        };
        let mut sender = match self.connect().await {
            Ok(sender) => sender,
            Err(e) => return unreachable(&e),
        };
        if let Err(e) = sender.ready().await {
            return unreachable(&e);
        }
        match sender.send_request(http::Request::from_parts(parts, body)).await {
            Ok(response) => response.map(tonic::body::Body::new),
            Err(e) => unreachable(&e),
        }
    }
}

/// `WatchResults` here, every other path on to grpc.aio.
#[derive(Clone)]
struct Front {
    hub: Arc<Hub>,
    upstream: Arc<Upstream>,
    token: Option<Arc<[u8]>>,
    max_message_bytes: usize,
}

impl<B> Service<http::Request<B>> for Front
where
    B: tonic::codegen::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != WATCH_PATH {
            let upstream = Arc::clone(&self.upstream);
            let request = request.map(tonic::body::Body::new);
            return Box::pin(async move { Ok(upstream.forward(request).await) });
        }
        let started = Instant::now();
        let hub = Arc::clone(&self.hub);
        if !bearer_allowed(self.token.as_deref(), &request) {
            let status = hub.unauthenticated.status();
            hub.refused(&status, started);
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let max = self.max_message_bytes;
        Box::pin(async move {
            // Compressed requests are taken as grpc.aio takes them; answers go uncompressed.
            let mut grpc = Grpc::new(RawCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .apply_max_message_size_config(Some(max), Some(max));
            Ok(grpc.server_streaming(WatchService { hub, started }, request).await)
        })
    }
}

/// One TCP address of the server, served from construction until `stop`.
#[pyclass(module = "trajgrade._core", name = "GraderFront")]
pub struct PyGraderFront {
    #[pyo3(get)]
    port: u16,
    served: Served,
}

#[pymethods]
impl PyGraderFront {
    /// Bind `address` (`host:port` or `[v6]:port`) and serve it on a thread of its own:
    /// `WatchResults` from `hub`, the rest passed to the grpc.aio server on the unix socket at
    /// `upstream`. `OSError` when the address cannot be bound, `ValueError` for a bad address
    /// (a unix socket too) or TLS.
    #[new]
    #[pyo3(signature = (address, upstream, hub, max_message_bytes, token=None, tls=None))]
    fn new(
        address: &str,
        upstream: PathBuf,
        hub: &PyWatchHub,
        max_message_bytes: usize,
        token: Option<&str>,
        tls: Option<TlsPem>,
    ) -> PyResult<Self> {
        let bound = bind("trajgrade-front", address, tls)?;
        let front = Front {
            hub: Arc::clone(&hub.hub),
            upstream: Arc::new(Upstream { path: upstream, sender: tokio::sync::Mutex::new(None) }),
            token: token.map(|t| Arc::from(t.as_bytes())),
            max_message_bytes,
        };
        let (served, port) = Served::start(bound, front);
        Ok(PyGraderFront { port, served })
    }

    /// Stop listening, let calls in flight finish for up to `grace_s`, then close the rest.
    fn stop(&mut self, py: Python<'_>, grace_s: f64) {
        self.served.stop(py, grace_s);
    }
}
