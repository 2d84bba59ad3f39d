//! A small async client for trajgrade.v1.GraderService: register a suite once, then grade traces
//! one at a time, in a batch, or over a stream, and follow live grading
//! ([`Client::watch_results`]).
//!
//! The messages are the prost types generated from the repository's protos (`pb`); each also
//! implements serde `Serialize`/`Deserialize` in the protobuf JSON mapping (pbjson).

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio_stream::Stream;
use tonic::{
    metadata::AsciiMetadataValue,
    transport::{Channel, Endpoint, Uri},
};

/// The generated `trajgrade.v1` messages and client.
pub mod pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("trajgrade.v1");
    include!(concat!(env!("OUT_DIR"), "/trajgrade.v1.serde.rs"));
}

use pb::grader_service_client::GraderServiceClient;
use pb::{
    batch_grade_traces_request, grade_trace_request, stream_grade_traces_request,
    BatchGradeTracesRequest, GradeResult, GradeTraceRequest, ImportSuiteRequest,
    ImportSuiteResponse, RegisterSuiteRequest, StreamGradeTracesRequest, Suite, Trace,
    TraceOutcome, WatchResultsRequest, WatchResultsResponse,
};

/// Errors of this client: a connection problem, a gRPC status, or a malformed answer.
#[derive(Debug)]
pub enum Error {
    /// Could not connect.
    Transport(tonic::transport::Error),
    /// The server answered with a non-OK status.
    Status(tonic::Status),
    /// The answer broke the API contract (e.g. a missing outcome).
    Protocol(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Transport(e) => write!(f, "transport: {e}"),
            Error::Status(s) => write!(f, "{:?}: {}", s.code(), s.message()),
            Error::Protocol(m) => write!(f, "protocol: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<tonic::transport::Error> for Error {
    fn from(e: tonic::transport::Error) -> Self {
        Error::Transport(e)
    }
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        Error::Status(s)
    }
}

/// A connection to one trajgrade server. Cloning is cheap and shares the connection.
#[derive(Clone)]
pub struct Client {
    stub: GraderServiceClient<Channel>,
    timeout: Duration,
    authorization: Option<AsciiMetadataValue>,
}

impl Client {
    /// Connects without TLS to `host:port`, `http://host:port` or `unix:/path/to.sock`
    /// (the sidecar layout). `timeout` is the deadline of each call.
    pub async fn connect(target: &str, timeout: Duration) -> Result<Self, Error> {
        let channel = if let Some(path) = target.strip_prefix("unix:") {
            let path = path.trim_start_matches("//").to_owned();
            // The URI is required by the API but unused: the connector dials the socket.
            Endpoint::try_from("http://localhost")?
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { UnixStream::connect(path).await.map(TokioIo::new) }
                }))
                .await?
        } else if target.contains("://") {
            Endpoint::from_shared(target.to_owned())?.connect().await?
        } else {
            Endpoint::from_shared(format!("http://{target}"))?.connect().await?
        };
        Ok(Self::from_channel(channel, timeout))
    }

    /// Wraps a channel the caller built (TLS, custom settings).
    pub fn from_channel(channel: Channel, timeout: Duration) -> Self {
        Self { stub: GraderServiceClient::new(channel), timeout, authorization: None }
    }

    /// Sends `authorization: Bearer <token>` on every call (the server's `--auth-token`).
    /// Fails with [`Error::Protocol`] when the token is not valid header text.
    pub fn with_token(mut self, token: &str) -> Result<Self, Error> {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::Protocol("the token is not valid header text".into()))?;
        self.authorization = Some(value);
        Ok(self)
    }

    /// A call without a deadline (for WatchResults), with the token if one is set.
    fn untimed<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = &self.authorization {
            request.metadata_mut().insert("authorization", value.clone());
        }
        request
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = self.untimed(message);
        request.set_timeout(self.timeout);
        request
    }

    /// Validates and compiles a suite on the server and returns its content-hash id.
    pub async fn register_suite(&mut self, suite: Suite) -> Result<String, Error> {
        let request = self.request(RegisterSuiteRequest { suite: Some(suite) });
        Ok(self.stub.register_suite(request).await?.into_inner().suite_id)
    }

    /// Converts the text of a suite file in another format (Orbit, promptfoo, Google ADK, or
    /// native JSON/YAML; `format` empty or `"auto"` detects it) on the server and registers it.
    /// The response holds the native suite, its id, the format read, and what was left out when
    /// `skip_unsupported` is set (without it those parts fail the call with `InvalidArgument`
    /// naming each); `name` picks one suite of a file holding several.
    pub async fn import_suite(
        &mut self,
        request: ImportSuiteRequest,
    ) -> Result<ImportSuiteResponse, Error> {
        let request = self.request(request);
        Ok(self.stub.import_suite(request).await?.into_inner())
    }

    /// Grades one trace against a registered suite.
    pub async fn grade_trace(
        &mut self,
        suite_id: &str,
        trace: Trace,
    ) -> Result<GradeResult, Error> {
        let request = self.request(GradeTraceRequest {
            trace: Some(trace),
            suite_ref: Some(grade_trace_request::SuiteRef::SuiteId(suite_id.to_owned())),
        });
        self.stub
            .grade_trace(request)
            .await?
            .into_inner()
            .result
            .ok_or_else(|| Error::Protocol("GradeTraceResponse without a result".into()))
    }

    /// Grades many traces in one call: one outcome (result or item error) per trace, in order.
    pub async fn batch_grade_traces(
        &mut self,
        suite_id: &str,
        traces: Vec<Trace>,
    ) -> Result<Vec<TraceOutcome>, Error> {
        let count = traces.len();
        let request = self.request(BatchGradeTracesRequest {
            suite_ref: Some(batch_grade_traces_request::SuiteRef::SuiteId(suite_id.to_owned())),
            traces,
        });
        let outcomes = self.stub.batch_grade_traces(request).await?.into_inner().outcomes;
        check_count(outcomes.len(), count)?;
        Ok(outcomes)
    }

    /// Grades traces over one bidirectional stream, [`DEFAULT_STREAM_CHUNK`] traces per
    /// message; outcomes come back in request order.
    pub async fn stream_grade_traces(
        &mut self,
        suite_id: &str,
        traces: Vec<Trace>,
    ) -> Result<Vec<TraceOutcome>, Error> {
        self.stream_grade_traces_chunked(suite_id, traces, DEFAULT_STREAM_CHUNK).await
    }

    /// Grades traces over one bidirectional stream, `chunk_size` traces per message (the
    /// `traces` field; the server grades each message as one batch and answers its
    /// `outcomes`); outcomes come back in request order. `chunk_size` 1 sends one trace per
    /// message in the `trace` field, the form servers without chunks understand. The suite id
    /// travels with the first message only.
    pub async fn stream_grade_traces_chunked(
        &mut self,
        suite_id: &str,
        traces: Vec<Trace>,
        chunk_size: usize,
    ) -> Result<Vec<TraceOutcome>, Error> {
        let count = traces.len();
        let size = chunk_size.max(1);
        let mut messages = Vec::with_capacity(count.div_ceil(size));
        let mut rest = traces.into_iter().peekable();
        while rest.peek().is_some() {
            let chunk: Vec<Trace> = rest.by_ref().take(size).collect();
            let suite_ref = messages
                .is_empty()
                .then(|| stream_grade_traces_request::SuiteRef::SuiteId(suite_id.to_owned()));
            messages.push(if size == 1 {
                StreamGradeTracesRequest {
                    trace: chunk.into_iter().next(),
                    suite_ref,
                    traces: vec![],
                }
            } else {
                StreamGradeTracesRequest { trace: None, suite_ref, traces: chunk }
            });
        }
        let request = self.request(tokio_stream::iter(messages));
        let mut responses = self.stub.stream_grade_traces(request).await?.into_inner();
        let mut outcomes = Vec::with_capacity(count);
        while let Some(response) = responses.message().await? {
            if response.outcomes.is_empty() {
                outcomes.push(response.outcome.unwrap_or_default());
            } else {
                outcomes.extend(response.outcomes);
            }
        }
        check_count(outcomes.len(), count)?;
        Ok(outcomes)
    }
}

impl Client {
    /// Follows live grading (docs/live-grading.md): a [`Stream`] of one response per result of
    /// a run that the server's OTLP receiver assembled and graded, from the moment of the call
    /// on. `request` holds the filters (`suite_ids`, `verdicts`, `service_names`; an empty list
    /// matches all).
    ///
    /// ```no_run
    /// # async fn f(mut client: trajgrade_client::Client) -> Result<(), trajgrade_client::Error> {
    /// use tokio_stream::StreamExt;
    /// use trajgrade_client::pb::{Verdict, WatchResultsRequest};
    /// let filter =
    ///     WatchResultsRequest { verdicts: vec![Verdict::Fail.into()], ..Default::default() };
    /// let mut results = client.watch_results(filter).await?;
    /// while let Some(result) = results.next().await {
    ///     let result = result?; // the server's status ends the stream
    ///     println!("{} {}", result.trace_id, result.suite_id);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// The watch has no deadline (the client's timeout is for the short calls): wrap it in
    /// `tokio::time::timeout` to bound it, and drop the stream to cancel the call. The server
    /// ends it with an [`Error::Status`]: `ResourceExhausted` (WATCHER_TOO_SLOW: the caller fell
    /// behind the server's queue), `Unavailable` (SHUTTING_DOWN), `FailedPrecondition`
    /// (LIVE_GRADING_OFF).
    pub async fn watch_results(
        &mut self,
        request: WatchResultsRequest,
    ) -> Result<ResultStream, Error> {
        let request = self.untimed(request);
        Ok(ResultStream { inner: self.stub.watch_results(request).await?.into_inner() })
    }
}

/// The live results of [`Client::watch_results`], in the order the server graded them.
/// Dropping it cancels the call.
pub struct ResultStream {
    inner: tonic::Streaming<WatchResultsResponse>,
}

impl Stream for ResultStream {
    type Item = Result<WatchResultsResponse, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx).map(|item| item.map(|r| r.map_err(Error::from)))
    }
}

/// How many traces [`Client::stream_grade_traces`] puts in one stream message.
pub const DEFAULT_STREAM_CHUNK: usize = 256;

fn check_count(outcomes: usize, traces: usize) -> Result<(), Error> {
    if outcomes == traces {
        Ok(())
    } else {
        Err(Error::Protocol(format!("{outcomes} outcomes for {traces} traces")))
    }
}
