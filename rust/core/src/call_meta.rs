//! The SPEC v2 per-call fields (§10: turn, agent, server, start and end times) in a side table
//! beside the calls.
//!
//! Most traces record none of them, and every decoded call would otherwise carry (and every
//! decoder write, and every copy of a call move) 52 bytes grading never reads. The table holds
//! entries only up to the last call that records one; a call past its end reads as all zero
//! (turn 0, no agent, no server, no timing), which is what an unrecorded field means.
//! [`TraceView`](crate::trace::TraceView) reads it by trace index, so a scope of the trace
//! shares the whole trace's table.
use crate::proto::v1::ToolCall;

/// One call's SPEC v2 fields, borrowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallMeta<'a> {
    /// 1-based user turn; 0 = not recorded, read as 1 (§10).
    pub turn: u32,
    /// Agent path (`triage/billing`); `""` = the root agent (§10).
    pub agent: &'a str,
    /// MCP server or toolset; `""` = unknown (§10).
    pub server: &'a str,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
}

impl<'a> CallMeta<'a> {
    pub fn from_message(c: &'a ToolCall) -> Self {
        CallMeta {
            turn: c.turn,
            agent: &c.agent,
            server: &c.server,
            start_time_unix_nano: c.start_time_unix_nano,
            end_time_unix_nano: c.end_time_unix_nano,
        }
    }

    /// Whether nothing is recorded (the value a call past the table's end reads as).
    #[inline]
    pub fn is_empty(&self) -> bool {
        *self == CallMeta::default()
    }

    /// The call's duration in nanoseconds (§10): `end - start` when both times are non-zero
    /// and `end >= start`; `None` = timing not recorded.
    pub fn duration_ns(&self) -> Option<u64> {
        let (start, end) = (self.start_time_unix_nano, self.end_time_unix_nano);
        (start != 0 && end != 0).then(|| end.checked_sub(start)).flatten()
    }
}

/// The [`CallMeta`] of a trace's calls by 0-based trace index; empty when no call records any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallMetas<'a>(Vec<CallMeta<'a>>);

impl<'a> CallMetas<'a> {
    /// Records call `i`'s fields (a decoder calls it once per call, `i` increasing; an empty
    /// `meta` past the table's end stores nothing). `calls`: how many calls the trace is
    /// expected to have, the room made on the first entry stored (so the table grows once).
    #[inline]
    pub fn set(&mut self, i: usize, meta: CallMeta<'a>, calls: usize) {
        if let Some(slot) = self.0.get_mut(i) {
            *slot = meta;
        } else if !meta.is_empty() {
            if self.0.capacity() == 0 {
                self.0.reserve(calls.max(i + 1));
            }
            self.0.resize_with(i, CallMeta::default);
            self.0.push(meta);
        }
    }

    /// Call `i`'s fields (all zero when it records none).
    #[inline]
    pub fn get(&self, i: usize) -> CallMeta<'a> {
        self.0.get(i).copied().unwrap_or_default()
    }

    /// Whether no call records any field (the v1 shape).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every call's fields, `len` calls (for debugging output and comparisons in tests).
    pub fn to_vec(&self, len: usize) -> Vec<CallMeta<'a>> {
        (0..len).map(|i| self.get(i)).collect()
    }
}

impl<'a> FromIterator<CallMeta<'a>> for CallMetas<'a> {
    fn from_iter<I: IntoIterator<Item = CallMeta<'a>>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let calls = iter.size_hint().0;
        let mut out = CallMetas::default();
        for (i, m) in iter.enumerate() {
            out.set(i, m, calls);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{CallMeta, CallMetas};

    #[test]
    fn stores_only_up_to_the_last_recorded_call() {
        let timed =
            CallMeta { start_time_unix_nano: 5, end_time_unix_nano: 9, ..CallMeta::default() };
        let agent = CallMeta { agent: "triage", turn: 2, ..CallMeta::default() };
        let none = CallMeta::default();
        let table: CallMetas<'_> = [none, timed, none, agent, none].into_iter().collect();
        assert_eq!(table.0.len(), 4);
        assert_eq!(table.to_vec(6), [none, timed, none, agent, none, none]);
        assert_eq!(table.get(1).duration_ns(), Some(4));
        assert_eq!(table.get(3).turn, 2);
        assert!(!table.is_empty());

        let v1: CallMetas<'_> = [none, none].into_iter().collect();
        assert!(v1.is_empty());
        assert_eq!(v1.get(1), none);
    }

    #[test]
    fn a_later_set_overwrites() {
        let mut table = CallMetas::default();
        table.set(2, CallMeta { server: "orders", ..CallMeta::default() }, 3);
        assert!(table.0.capacity() >= 3);
        table.set(1, CallMeta { turn: 3, ..CallMeta::default() }, 3);
        table.set(2, CallMeta::default(), 3);
        assert_eq!(
            table.to_vec(3),
            [CallMeta::default(), CallMeta { turn: 3, ..CallMeta::default() }, CallMeta::default()]
        );
    }

    #[test]
    fn duration_needs_both_times_in_order() {
        let d = |start, end| {
            CallMeta { start_time_unix_nano: start, end_time_unix_nano: end, ..CallMeta::default() }
                .duration_ns()
        };
        assert_eq!(d(1, 3), Some(2));
        assert_eq!(d(3, 3), Some(0));
        assert_eq!(d(0, 3), None);
        assert_eq!(d(3, 0), None);
        assert_eq!(d(4, 3), None);
    }
}
