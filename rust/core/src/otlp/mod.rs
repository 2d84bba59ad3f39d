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

/// One live run's parts, each span's and event's protobuf bytes in arrival order (the
/// receiver keeps them from the intake): `spans[i]` under the resource `resources[i]`.
pub struct RunParts<'a> {
    pub resources: Vec<&'a [u8]>,
    pub spans: Vec<&'a [u8]>,
    pub events: Vec<&'a [u8]>,
}

/// Map one live run: its spans composed into one `ExportTraceServiceRequest` (a
/// `ResourceSpans` per run of consecutive spans under one resource, its `ScopeSpans` holding
/// them) and its events into one
/// `ExportLogsServiceRequest` (likewise), mapped as `map_requests` maps them: the run's first
/// `Trace` (None when nothing maps).
pub fn map_run(
    run: &RunParts<'_>,
    group_by: Option<&str>,
    dedupe_window_s: f64,
) -> Result<Option<Vec<u8>>, DecodeError> {
    let mut traces = Vec::new();
    let (mut at, n) = (0, run.spans.len().min(run.resources.len()));
    while at < n {
        // Consecutive spans under the same resource share one ResourceSpans: the resource is
        // decoded once (spans of one export usually share it), and the order is kept.
        let resource = run.resources[at];
        let same = |r: &&&[u8]| std::ptr::eq(**r, resource) || **r == resource;
        let end = at + run.resources[at..n].iter().take_while(same).count();
        let spans = &run.spans[at..end];
        // ResourceSpans { resource = 1; scope_spans = 2 { spans = 2 } }
        let scope: usize = spans.iter().map(|s| field_len(2, s.len()) + s.len()).sum();
        let inner = field_len(1, resource.len()) + resource.len() + field_len(2, scope) + scope;
        put_field(&mut traces, 1, inner);
        put_field(&mut traces, 1, resource.len());
        traces.extend_from_slice(resource);
        put_field(&mut traces, 2, scope);
        for span in spans {
            put_field(&mut traces, 2, span.len());
            traces.extend_from_slice(span);
        }
        at = end;
    }
    let mut logs = Vec::new();
    for event in &run.events {
        // ResourceLogs { scope_logs = 2 { log_records = 2 } }
        let scope = field_len(2, event.len()) + event.len();
        put_field(&mut logs, 1, field_len(2, scope) + scope);
        put_field(&mut logs, 2, scope);
        put_field(&mut logs, 2, event.len());
        logs.extend_from_slice(event);
    }
    let log_requests: Vec<&[u8]> = if run.events.is_empty() { vec![] } else { vec![&logs] };
    let (out, _) = map_requests(&[&traces], &log_requests, group_by, dedupe_window_s)?;
    Ok(out.into_iter().next())
}

/// Bytes of a length-delimited field's key and length (field numbers below 16).
fn field_len(number: u32, len: usize) -> usize {
    prost::encoding::key_len(number) + prost::encoding::encoded_len_varint(len as u64)
}

fn put_field(out: &mut Vec<u8>, number: u32, len: usize) {
    prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(len as u64, out);
}
