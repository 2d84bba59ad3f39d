//! OTLP spans and `GenAI` log events to `Trace`s: the one span-to-call mapping that
//! `trajgrade import`/`regrade` of OTLP files and the live receiver share
//! (docs/trace-formats.md). Decoding is prost's; the mapping follows the conventions the
//! Python importer documented, to the byte (the differential tests hold them together).
pub(crate) mod decode;
pub mod heads;
pub(crate) mod map;
pub(crate) mod pyvalue;
pub(crate) mod record;
pub mod report;
pub(crate) mod tree;
pub(crate) mod usage;

use prost::Message;

pub use report::Report;

/// The importer's default dedupe window (seconds): an LLM-reported call and an executed-tool
/// span without a shared id are one call only if the execution starts within it.
pub const DEFAULT_DEDUPE_WINDOW_S: f64 = 300.0;

/// A malformed export request: which one, and prost's reason.
#[derive(Debug, thiserror::Error)]
#[error("OTLP {kind} request {index}: {source}")]
pub struct DecodeError {
    pub kind: &'static str,
    pub index: usize,
    #[source]
    pub source: prost::DecodeError,
}

/// Map OTLP `ExportTraceServiceRequest`s and `ExportLogsServiceRequest`s (protobuf bytes, in
/// arrival order) to encoded `Trace`s: one per trace id, or per value of `group_by`.
pub fn map_requests(
    traces: &[&[u8]],
    logs: &[&[u8]],
    group_by: Option<&str>,
    dedupe_window_s: f64,
) -> Result<(Vec<Vec<u8>>, Report), DecodeError> {
    let mut report = Report::default();
    let mut spans = Vec::new();
    for (index, bytes) in traces.iter().enumerate() {
        let request = decode::decode_traces(bytes).map_err(|source| DecodeError {
            kind: "traces",
            index,
            source,
        })?;
        let first = spans.len();
        record::span_records(request, first, &mut spans);
    }
    let mut events = Vec::new();
    for (index, bytes) in logs.iter().enumerate() {
        let request = decode::decode_logs(bytes).map_err(|source| DecodeError {
            kind: "logs",
            index,
            source,
        })?;
        record::event_records(request, &mut report, &mut events);
    }
    let window_ns = (dedupe_window_s * 1e9) as i128;
    let groups = map::group(spans, events, group_by, &mut report);
    let out =
        groups.into_iter().map(|g| map::trace(g, &mut report, window_ns).encode_to_vec()).collect();
    Ok((out, report))
}
