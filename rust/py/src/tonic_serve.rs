//! What the core's two gRPC transports share (the OTLP receiver, `otlp_receiver.rs`, and the
//! grader's front, `grader_front.rs`): message bodies passed as they are, the bearer token,
//! binding a TCP address with TLS on a tokio runtime of its own, and stopping it.
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use tokio::sync::oneshot;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::Status;

/// Message bodies as they are: Python decodes and encodes them (or the core does).
#[derive(Clone, Copy, Default)]
pub(crate) struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The request carries `authorization: Bearer <token>` (compared in constant time), or no
/// token is asked for.
pub(crate) fn bearer_allowed<T>(token: Option<&[u8]>, request: &http::Request<T>) -> bool {
    let Some(token) = token else { return true };
    let Some(value) = request.headers().get("authorization") else { return false };
    let value = value.as_bytes();
    let Some(space) = value.iter().position(|&b| b == b' ') else { return false };
    let (scheme, presented) = (&value[..space], value[space + 1..].trim_ascii());
    scheme.eq_ignore_ascii_case(b"bearer") && constant_time_eq(presented, token)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// TLS from PEM bytes: the server's certificate and key, and the client CA that makes it mTLS.
pub(crate) type TlsPem = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// A TCP address bound on a runtime of its own, with the server builder that will serve it.
pub(crate) struct Bound {
    pub runtime: tokio::runtime::Runtime,
    pub builder: Server,
    pub incoming: TcpIncoming,
    pub port: u16,
}

/// Bind `address` (`host:port` or `[v6]:port`; an empty host is loopback) on a one-thread
/// runtime named `thread`. `OSError` when it cannot be bound, `ValueError` for a bad address
/// (a unix socket too: on one, h2 refuses the socket path that gRPC's C-core clients send as
/// `:authority`, hyperium/h2#487) or bad TLS.
pub(crate) fn bind(thread: &str, address: &str, tls: Option<TlsPem>) -> PyResult<Bound> {
    if address.starts_with("unix:") {
        return Err(PyValueError::new_err(format!(
            "{address}: a unix socket (the core's transport serves TCP only; grpc.aio serves it)"
        )));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(thread)
        .enable_all()
        .build()
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    let mut builder = Server::builder();
    if let Some((cert, key, client_ca)) = tls {
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
        if let Some(ca) = client_ca {
            config = config.client_ca_root(Certificate::from_pem(ca));
        }
        builder = builder
            .tls_config(config)
            .map_err(|e| PyValueError::new_err(format!("TLS settings: {e}")))?;
    }
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| PyValueError::new_err(format!("{address}: not host:port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "127.0.0.1" } else { host };
    let port: u16 =
        port.parse().map_err(|_| PyValueError::new_err(format!("{address}: not a port number")))?;
    let listener = std::net::TcpListener::bind((host, port))
        .map_err(|e| PyOSError::new_err(format!("{address}: {e}")))?;
    listener.set_nonblocking(true).map_err(|e| PyOSError::new_err(e.to_string()))?;
    let bound = listener.local_addr().map_err(|e| PyOSError::new_err(e.to_string()))?;
    let entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    drop(entered);
    Ok(Bound { runtime, builder, incoming, port: bound.port() })
}

/// A server being served on its runtime, until `stop` (or drop).
pub(crate) struct Served {
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl Served {
    /// Serve `service` on the bound address until `stop`.
    pub(crate) fn start<S, B>(bound: Bound, service: S) -> (Self, u16)
    where
        S: tonic::codegen::Service<
                http::Request<tonic::body::Body>,
                Response = http::Response<B>,
                Error = std::convert::Infallible,
            > + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        B: tonic::codegen::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<tonic::codegen::StdError>,
    {
        let Bound { runtime, builder, incoming, port } = bound;
        let (shutdown, stopped) = oneshot::channel::<()>();
        let signal = async move {
            let _ = stopped.await;
        };
        let task = runtime.spawn(builder.serve_with_incoming_shutdown(service, incoming, signal));
        let served = Served { runtime: Some(runtime), shutdown: Some(shutdown), task: Some(task) };
        (served, port)
    }

    /// Stop listening, let calls in flight finish for up to `grace_s`, then close the rest.
    pub(crate) fn stop(&mut self, py: Python<'_>, grace_s: f64) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let (Some(runtime), Some(task)) = (self.runtime.take(), self.task.take()) else {
            return;
        };
        py.detach(move || {
            let grace = Duration::from_secs_f64(grace_s.max(0.0));
            let _ = runtime.block_on(async { tokio::time::timeout(grace, task).await });
            runtime.shutdown_timeout(Duration::from_millis(100));
        });
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
