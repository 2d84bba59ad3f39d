//! What the live receiver's assembly reads of each span of one traces export request, decoded
//! here so that the receiver builds one small Python object per span (not a record with every
//! attribute): ids, flags, the end-of-run marker, the encoded size and the span's bytes (which
//! the mapping decodes again when the run completes).
//!
//! The request is decoded whole (a malformed one is refused before anything is taken), and each
//! span's and resource's bytes are borrowed from the request as they came, not encoded again.
use std::borrow::Cow;

use prost::Message;

use super::decode::{self, KeyValue};
use super::pyvalue::Value;
use super::DecodeError;
use crate::wire::repeated_len_field;

/// The end of a run: this attribute set to true, or a span event of this name
/// (docs/live-grading.md).
const END_ATTRIBUTE: &str = "trajgrade.run.end";
const END_EVENT: &str = "trajgrade.run.end";

/// The string values of the asked-for keys (a repeated key: its last value), or `None` when
/// one of them holds something else than a string (the caller then reads the attributes
/// itself, with its own conversions).
pub type Keyed = Option<Vec<(String, String)>>;

/// One resource of the request: its bytes and its keyed attributes.
#[derive(Debug, PartialEq)]
pub struct ResourceHead<'a> {
    pub raw: Cow<'a, [u8]>,
    pub keyed: Keyed,
}

/// One span: what assembly reads, and its bytes.
#[derive(Debug, PartialEq)]
pub struct SpanHead<'a> {
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub start: u64,
    pub flags: u32,
    pub ends_run: bool,
    /// The span's encoded size (the receiver's memory cap counts it).
    pub size: usize,
    pub raw: Cow<'a, [u8]>,
    /// Index into the request's resources.
    pub resource: usize,
    pub keyed: Keyed,
}

impl ResourceHead<'_> {
    /// The same head holding its own bytes (kept past the request's buffer).
    #[must_use]
    pub fn into_owned(self) -> ResourceHead<'static> {
        ResourceHead { raw: Cow::Owned(self.raw.into_owned()), keyed: self.keyed }
    }
}

impl SpanHead<'_> {
    /// The same head holding its own bytes (kept past the request's buffer).
    #[must_use]
    pub fn into_owned(self) -> SpanHead<'static> {
        SpanHead { raw: Cow::Owned(self.raw.into_owned()), ..self }
    }
}

/// The spans of one `ExportTraceServiceRequest` (in request order) and their resources, with
/// the values of `keys` (span attributes and resource attributes each on their own).
pub fn span_heads<'a>(
    bytes: &'a [u8],
    keys: &[&str],
) -> Result<(Vec<ResourceHead<'a>>, Vec<SpanHead<'a>>), DecodeError> {
    let request = decode::decode_traces(bytes).map_err(|source| DecodeError {
        kind: "traces",
        index: 0,
        source,
    })?;
    // The same structure, borrowed. Where it does not line up with what prost decoded (a
    // resource given twice, which protobuf merges, or framing the scan does not follow), the
    // decoded message is encoded again instead.
    let mut framed =
        framing(bytes).filter(|f| f.len() == request.resource_spans.len()).map(Vec::into_iter);
    let mut resources = Vec::with_capacity(request.resource_spans.len());
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let (resource_raw, span_raws) = match framed.as_mut().and_then(Iterator::next) {
            Some((resource, spans)) => (resource, Some(spans)),
            None => (None, None),
        };
        let resource = resource_spans.resource.unwrap_or_default();
        let index = resources.len();
        resources.push(ResourceHead {
            keyed: keyed(&resource.attributes, keys),
            raw: resource_raw.map_or_else(|| Cow::Owned(resource.encode_to_vec()), Cow::Borrowed),
        });
        let decoded: Vec<decode::Span> =
            resource_spans.scope_spans.into_iter().flat_map(|s| s.spans).collect();
        let span_raws = span_raws.filter(|raws| raws.len() == decoded.len());
        for (i, span) in decoded.into_iter().enumerate() {
            let raw = match &span_raws {
                Some(raws) => Cow::Borrowed(raws[i]),
                None => Cow::Owned(span.encode_to_vec()),
            };
            spans.push(SpanHead {
                trace_id: decode::hex(&span.trace_id),
                span_id: decode::hex(&span.span_id),
                parent: decode::hex(&span.parent_span_id),
                start: span.start_time_unix_nano,
                flags: span.flags,
                ends_run: ends_run(&span),
                size: raw.len(),
                raw,
                resource: index,
                keyed: keyed(&span.attributes, keys),
            });
        }
    }
    Ok((resources, spans))
}

/// Per `ResourceSpans` (field 1) of the request: its `Resource` (field 1; `None` when it is
/// given more than once) and its spans (field 2 of each `ScopeSpans`, field 2), borrowed in
/// order; `None` for framing the scan does not follow.
#[allow(clippy::type_complexity)]
fn framing(bytes: &[u8]) -> Option<Vec<(Option<&[u8]>, Vec<&[u8]>)>> {
    let mut out = Vec::new();
    for resource_spans in repeated_len_field(bytes, 1)? {
        let resource = match repeated_len_field(resource_spans, 1)?[..] {
            [] => Some(&[][..]),
            [one] => Some(one),
            _ => None,
        };
        let mut spans = Vec::new();
        for scope_spans in repeated_len_field(resource_spans, 2)? {
            spans.extend(repeated_len_field(scope_spans, 2)?);
        }
        out.push((resource, spans));
    }
    Some(out)
}

fn last<'a>(pairs: &'a [KeyValue], key: &str) -> Option<&'a KeyValue> {
    pairs.iter().rev().find(|pair| pair.key == key)
}

fn ends_run(span: &decode::Span) -> bool {
    let marked = last(&span.attributes, END_ATTRIBUTE)
        .is_some_and(|pair| decode::any_value(pair.value.as_ref()) == Value::Bool(true));
    marked || span.events.iter().any(|event| event.name == END_EVENT)
}

fn keyed(pairs: &[KeyValue], keys: &[&str]) -> Keyed {
    let mut out = Vec::new();
    for key in keys {
        if let Some(pair) = last(pairs, key) {
            match decode::any_value(pair.value.as_ref()) {
                Value::Str(text) => out.push(((*key).to_owned(), text)),
                _ => return None,
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::decode::{
        any_value, AnyValue, ExportTraceServiceRequest, Resource, ResourceSpans, ScopeSpans, Span,
        SpanEvent,
    };

    fn text(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) }),
        }
    }

    fn flag(key: &str, value: bool) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(any_value::Value::BoolValue(value)) }),
        }
    }

    fn request(resource: Vec<KeyValue>, spans: Vec<Span>) -> Vec<u8> {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource { attributes: resource, ..Resource::default() }),
                scope_spans: vec![ScopeSpans { spans, ..ScopeSpans::default() }],
                ..ResourceSpans::default()
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn heads_carry_ids_marker_size_bytes_and_string_keys() {
        let child = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            parent_span_id: vec![3; 8],
            start_time_unix_nano: 7,
            flags: 0x300,
            attributes: vec![text("k", "a"), text("k", "b"), flag(END_ATTRIBUTE, true)],
            ..Span::default()
        };
        let root = Span {
            trace_id: vec![1; 16],
            span_id: vec![3; 8],
            events: vec![SpanEvent { name: END_EVENT.into(), ..SpanEvent::default() }],
            attributes: vec![flag("k", true)],
            ..Span::default()
        };
        let bytes = request(vec![text("service.name", "svc")], vec![child.clone(), root.clone()]);
        let (resources, spans) = span_heads(&bytes, &["service.name", "k"]).unwrap();
        assert_eq!(resources.len(), 1);
        assert_eq!(resources[0].keyed, Some(vec![("service.name".into(), "svc".into())]));
        assert_eq!(Resource::decode(&resources[0].raw[..]).unwrap().attributes.len(), 1);
        let head = &spans[0];
        assert_eq!(head.trace_id, "01".repeat(16));
        assert_eq!(head.span_id, "02".repeat(8));
        assert_eq!(head.parent, "03".repeat(8));
        assert_eq!((head.start, head.flags, head.ends_run), (7, 0x300, true));
        assert_eq!(head.keyed, Some(vec![("k".into(), "b".into())]));
        assert_eq!(Span::decode(&head.raw[..]).unwrap(), child);
        assert_eq!(head.size, child.encoded_len());
        // A non-string value for an asked-for key: the caller reads the attributes itself.
        assert_eq!((spans[1].parent.as_str(), spans[1].ends_run), ("", true));
        assert_eq!(spans[1].keyed, None);
    }

    #[test]
    fn a_false_marker_does_not_end_the_run() {
        let span = Span {
            attributes: vec![flag(END_ATTRIBUTE, true), flag(END_ATTRIBUTE, false)],
            ..Span::default()
        };
        let bytes = request(vec![], vec![span]);
        let (_, spans) = span_heads(&bytes, &[]).unwrap();
        assert!(!spans[0].ends_run);
        assert_eq!(spans[0].keyed, Some(vec![]));
    }

    #[test]
    fn bytes_are_borrowed_as_they_came_and_encoded_again_where_they_do_not_line_up() {
        let span = |id: u8| Span { trace_id: vec![1; 16], span_id: vec![id; 8], ..Span::default() };
        let bytes = request(vec![text("service.name", "svc")], vec![span(2), span(3)]);
        let (resources, spans) = span_heads(&bytes, &[]).unwrap();
        assert!(matches!(resources[0].raw, Cow::Borrowed(_)));
        for (head, id) in spans.iter().zip([2, 3]) {
            assert!(matches!(head.raw, Cow::Borrowed(_)));
            assert_eq!(&head.raw[..], &span(id).encode_to_vec()[..]);
        }
        // A resource given twice is merged by protobuf: encoded again from what prost merged.
        let resource = |kv| Resource { attributes: vec![kv], ..Resource::default() };
        let first = ResourceSpans {
            resource: Some(resource(text("a", "1"))),
            scope_spans: vec![ScopeSpans { spans: vec![span(2)], ..ScopeSpans::default() }],
            ..ResourceSpans::default()
        }
        .encode_to_vec();
        let again =
            ResourceSpans { resource: Some(resource(text("b", "2"))), ..ResourceSpans::default() };
        let mut twice = vec![0x0a];
        let body = [first, again.encode_to_vec()].concat();
        prost::encoding::encode_varint(body.len() as u64, &mut twice);
        twice.extend(body);
        let (resources, spans) = span_heads(&twice, &["a", "b"]).unwrap();
        assert!(matches!(resources[0].raw, Cow::Owned(_)));
        assert_eq!(Resource::decode(&resources[0].raw[..]).unwrap().attributes.len(), 2);
        assert_eq!(spans.len(), 1);
        assert_eq!(&spans[0].raw[..], &span(2).encode_to_vec()[..]);
    }

    #[test]
    fn malformed_bytes_are_a_decode_error() {
        assert!(span_heads(b"\x0a\xff", &[]).is_err());
    }
}
