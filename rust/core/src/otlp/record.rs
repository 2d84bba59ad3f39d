//! The records the mapping reads: one per OTLP span and per `gen_ai.*` log event.
use foldhash::HashMap;
use std::sync::Arc;

use super::decode::{self, ExportLogsServiceRequest, ExportTraceServiceRequest};
use super::pyvalue::{Dict, Value};
use super::report::{Report, LOG_WITHOUT_TRACE};
use super::tree::SpanKey;

/// Attributes in dict order (first position of a key, last value: keys are unique), with a
/// key index only when there are many: a span's handful is found faster by a scan than by
/// hashing, and building an index per span was a tenth of a live run's mapping.
#[derive(Debug, Default)]
pub(crate) struct Attrs {
    items: Vec<(String, Value)>,
    index: Option<HashMap<String, usize>>,
}

/// Above this many attributes, lookups go through an index.
const SCAN_UP_TO: usize = 16;

impl Attrs {
    pub(crate) fn from_dict(dict: Dict) -> Attrs {
        let index = (dict.0.len() > SCAN_UP_TO)
            .then(|| dict.0.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
        Attrs { items: dict.0, index }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        match &self.index {
            Some(index) => index.get(key).map(|&i| &self.items[i].1),
            None => self.items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
        }
    }

    /// Python's `attrs.get(key)`: `None` for a missing key as for an unset value.
    pub(crate) fn value(&self, key: &str) -> &Value {
        self.get(key).unwrap_or(&Value::None)
    }

    pub(crate) fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.items.iter().map(|(k, v)| (k, v))
    }
}

#[derive(Debug)]
pub(crate) struct SpanRecord {
    pub trace_id: String,
    pub span_id: String,
    pub name: String,
    pub start: u64,
    pub end: u64,
    pub attrs: Attrs,
    pub resource: Arc<Attrs>,
    pub status_code: i32,
    pub order: usize,
    pub parent: String,
    pub kind: i32,
}

impl SpanRecord {
    pub(crate) fn key(&self) -> SpanKey {
        (self.trace_id.clone(), self.span_id.clone())
    }

    /// One decoded OTLP span (`order`: its place in arrival order).
    pub(crate) fn new(span: decode::Span, resource: Arc<Attrs>, order: usize) -> SpanRecord {
        let attrs = Attrs::from_dict(decode::into_attributes(span.attributes));
        SpanRecord {
            trace_id: decode::hex(&span.trace_id),
            span_id: decode::hex(&span.span_id),
            name: span.name,
            start: span.start_time_unix_nano,
            end: if span.end_time_unix_nano == 0 {
                span.start_time_unix_nano
            } else {
                span.end_time_unix_nano
            },
            attrs,
            resource,
            status_code: span.status.map_or(0, |s| s.code),
            order,
            parent: decode::hex(&span.parent_span_id),
            kind: span.kind,
        }
    }
}

#[derive(Debug)]
pub(crate) struct EventRecord {
    pub trace_id: String,
    pub span_id: String,
    pub name: String,
    pub body: Value,
    pub time: u64,
    pub order: usize,
}

/// Every span of one export request, in request order, numbered from `first_order`.
pub(crate) fn span_records(
    request: ExportTraceServiceRequest,
    first_order: usize,
    out: &mut Vec<SpanRecord>,
) {
    for resource_spans in request.resource_spans {
        let attrs = resource_spans.resource.map(|r| decode::into_attributes(r.attributes));
        let resource = Arc::new(Attrs::from_dict(attrs.unwrap_or_default()));
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                let order = first_order + out.len();
                out.push(SpanRecord::new(span, Arc::clone(&resource), order));
            }
        }
    }
}

/// The `gen_ai.*` log events of one logs export request that name a trace.
pub(crate) fn event_records(
    request: ExportLogsServiceRequest,
    report: &mut Report,
    out: &mut Vec<EventRecord>,
) {
    for resource_logs in request.resource_logs {
        for scope_logs in resource_logs.scope_logs {
            for record in scope_logs.log_records {
                let attrs = decode::attributes(&record.attributes);
                let name = if record.event_name.is_empty() {
                    attrs.get("event.name").map(Value::py_str).unwrap_or_default()
                } else {
                    record.event_name
                };
                if !name.starts_with("gen_ai.") {
                    continue;
                }
                if record.trace_id.iter().all(|&b| b == 0) {
                    report.add(LOG_WITHOUT_TRACE, &format!("log event {name}"), "no trace id");
                    continue;
                }
                let order = out.len();
                out.push(EventRecord {
                    trace_id: decode::hex(&record.trace_id),
                    span_id: decode::hex(&record.span_id),
                    name,
                    body: decode::any_value(record.body.as_ref()),
                    time: if record.time_unix_nano == 0 {
                        record.observed_time_unix_nano
                    } else {
                        record.time_unix_nano
                    },
                    order,
                });
            }
        }
    }
}
