//! Scope (§11): which calls an assertion sees. Agent and server globs and a single turn give one
//! scoped view; `per_turn` gives one view per turn. Grading applies a scope around every kind
//! (`grade.rs`); the kinds only ever see a `TraceView`.
use std::borrow::Cow;

use crate::call_meta::CallMeta;
use crate::glob::Glob;
use crate::proto::v1::Scope as ScopeMsg;
use crate::suite::Compiler;
use crate::trace::{Call, ModelCall, ScopedParts, TraceView};

/// A compiled `Scope`: globs compiled once, the turn filter, and whether to grade per turn.
#[derive(Debug)]
pub struct Scope {
    /// Over the call's and the model call's `agent` path (case-sensitive); `None` = any.
    agent: Option<Glob>,
    /// Over the call's `server` (case-sensitive); `None` = any. Model calls have no server.
    server: Option<Glob>,
    /// Only this turn (1-based); 0 = every turn.
    turn: u32,
    per_turn: bool,
}

/// A turn as recorded: 0 (not recorded) reads as turn 1 (§10).
pub fn turn_of(recorded: u32) -> u32 {
    recorded.max(1)
}

impl Scope {
    /// Compiles `m` found at `path` (`assertions[i].scope`); `None` when it is invalid (the
    /// problems go to `c`) or filters nothing (an empty scope grades as no scope).
    pub fn compile(m: &ScopeMsg, path: &str, c: &mut Compiler<'_>) -> Option<Scope> {
        let before = c.problem_count();
        let mut glob = |field: &str, pattern: &str| {
            if pattern.is_empty() {
                return None;
            }
            Glob::new(pattern, false).map_err(|e| c.problem(format!("{path}.{field}"), e)).ok()
        };
        let agent = glob("agent", &m.agent);
        let server = glob("server", &m.server);
        if m.turn > 0 && m.per_turn {
            c.problem(
                path,
                format!(
                    "turn {} and per_turn cannot be combined: per_turn already grades each turn \
                     on its own",
                    m.turn
                ),
            );
        }
        if c.problem_count() != before {
            return None;
        }
        let scope = Scope { agent, server, turn: m.turn, per_turn: m.per_turn };
        scope.filters().then_some(scope)
    }

    /// Whether this scope changes what an assertion sees.
    fn filters(&self) -> bool {
        self.agent.is_some() || self.server.is_some() || self.turn > 0 || self.per_turn
    }

    pub fn per_turn(&self) -> bool {
        self.per_turn
    }

    /// Whether a call with fields `c` passes the agent and server filters (not the turn).
    fn keeps(&self, c: &CallMeta<'_>) -> bool {
        self.agent.as_ref().is_none_or(|g| g.is_match(c.agent))
            && self.server.as_ref().is_none_or(|g| g.is_match(c.server))
    }

    /// Whether `m` passes the agent filter (`server` does not filter model calls).
    fn keeps_model(&self, m: &ModelCall<'_>) -> bool {
        self.agent.as_ref().is_none_or(|g| g.is_match(m.agent))
    }

    /// The view an assertion with this scope grades (for `per_turn`, see [`Scope::turns`]).
    pub fn view<'v>(&self, t: &'v TraceView<'_>) -> TraceView<'v> {
        let in_turn = |recorded: u32| self.turn == 0 || turn_of(recorded) == self.turn;
        let mut calls = Vec::new();
        let mut origin = Vec::new();
        for (i, c) in t.calls().iter().enumerate() {
            let meta = t.call_meta(i);
            if in_turn(meta.turn) && self.keeps(&meta) {
                calls.push(*c);
                origin.push(t.trace_index(i));
            }
        }
        t.work().spend(t.model_calls().len() as u64);
        let model_calls: Vec<ModelCall<'v>> = t
            .model_calls()
            .iter()
            .filter(|m| in_turn(m.turn) && self.keeps_model(m))
            .copied()
            .collect();
        let final_answer = if self.turn == 0 { t.final_answer() } else { answer_of(t, self.turn) };
        t.scope(ScopedParts {
            calls: Cow::Owned(calls),
            origin: Cow::Owned(origin),
            model_calls: Cow::Owned(model_calls),
            final_answer,
        })
    }

    /// The turns a `per_turn` assertion grades, 1 to the highest of any call's turn, any model
    /// call's turn and `len(turns)` (§11), each with the calls and model calls that pass the
    /// agent and server filters. `reference_turns` are turns that matter to the kind even
    /// without calls (a reference's turns).
    pub fn turns<'s, 'a>(
        &self,
        t: &'s TraceView<'a>,
        reference_turns: &'s [u32],
    ) -> TurnViews<'s, 'a> {
        let last = (0..t.len())
            .map(|i| turn_of(t.call_meta(i).turn))
            .chain(t.model_calls().iter().map(|m| turn_of(m.turn)))
            .chain(std::iter::once(u32::try_from(t.turns().len()).unwrap_or(u32::MAX)))
            .max()
            .unwrap_or(1)
            .max(1);
        // The scoped calls grouped by turn, in call order within each (a stable sort, linear
        // on the usual nondecreasing turns).
        let mut kept: Vec<(u32, usize)> = (0..t.len())
            .map(|i| (i, t.call_meta(i)))
            .filter(|(_, meta)| self.keeps(meta))
            .map(|(i, meta)| (turn_of(meta.turn), i))
            .collect();
        kept.sort_by_key(|&(turn, _)| turn);
        t.work().spend(t.model_calls().len() as u64);
        let mut model_calls: Vec<ModelCall<'s>> =
            t.model_calls().iter().filter(|m| self.keeps_model(m)).copied().collect();
        model_calls.sort_by_key(|m| turn_of(m.turn));
        TurnViews {
            t,
            last,
            call_turns: kept.iter().map(|&(turn, _)| turn).collect(),
            calls: kept.iter().map(|&(_, i)| t.calls()[i]).collect(),
            origin: kept.iter().map(|&(_, i)| t.trace_index(i)).collect(),
            model_calls,
            reference_turns,
        }
    }
}

/// Turn `k`'s `final_answer` when `turns` has it, else the trace's (§11).
fn answer_of<'v>(t: &'v TraceView<'_>, k: u32) -> &'v str {
    let turn = usize::try_from(k - 1).ok().and_then(|i| t.turns().get(i));
    turn.map_or(t.final_answer(), |turn| turn.final_answer)
}

/// The per-turn views of one `per_turn` assertion on one trace (see [`Scope::turns`]).
pub struct TurnViews<'s, 'a> {
    t: &'s TraceView<'a>,
    /// The last turn graded.
    last: u32,
    /// The scoped calls sorted by turn (stable), each call's turn and trace index.
    calls: Vec<Call<'s>>,
    call_turns: Vec<u32>,
    origin: Vec<u32>,
    /// The scoped model calls sorted by turn (stable).
    model_calls: Vec<ModelCall<'s>>,
    reference_turns: &'s [u32],
}

/// One step of a per-turn grading: turns `first..first + count` share `view`. Several turns
/// share one step only when none has calls, model calls, turn text or reference calls: those
/// turns grade alike, so a trace whose one call has turn 4,000,000,000 costs a few gradings,
/// not 4 billion.
pub struct TurnStep<'v> {
    pub first: u32,
    pub count: u64,
    pub view: TraceView<'v>,
}

impl TurnViews<'_, '_> {
    /// Calls `step` for each turn in order (runs of alike turns once); stops early when `step`
    /// answers `false` (the work meter said stop).
    pub fn for_each(&self, mut step: impl FnMut(TurnStep<'_>) -> bool) {
        let text_turns = u32::try_from(self.t.turns().len()).unwrap_or(u32::MAX);
        // The first call, model call and reference turn not before `turn` (calls and model
        // calls are sorted by turn, and each step consumes its turns' ones).
        let (mut calls_at, mut models_at, mut refs_at) = (0, 0, 0);
        let mut turn = 1u32;
        loop {
            while self.reference_turns.get(refs_at).is_some_and(|&r| r < turn) {
                refs_at += 1;
            }
            let in_turn = self.call_turns[calls_at..].iter().take_while(|&&c| c == turn).count();
            let models_in_turn = self.model_calls[models_at..]
                .iter()
                .take_while(|mc| turn_of(mc.turn) == turn)
                .count();
            let has_own = in_turn > 0
                || models_in_turn > 0
                || turn <= text_turns
                || self.reference_turns.get(refs_at) == Some(&turn);
            let count = if has_own {
                1
            } else {
                // Alike up to the next turn with something of its own.
                let next_own = [
                    self.call_turns.get(calls_at).copied(),
                    self.model_calls.get(models_at).map(|mc| turn_of(mc.turn)),
                    self.reference_turns.get(refs_at).copied(),
                ]
                .into_iter()
                .flatten()
                .min();
                u64::from(next_own.map_or(self.last, |n| n - 1).min(self.last) - turn) + 1
            };
            let (calls_end, models_end) = (calls_at + in_turn, models_at + models_in_turn);
            let view = self.t.scope(ScopedParts {
                calls: Cow::Borrowed(&self.calls[calls_at..calls_end]),
                origin: Cow::Borrowed(&self.origin[calls_at..calls_end]),
                model_calls: Cow::Borrowed(&self.model_calls[models_at..models_end]),
                final_answer: answer_of(self.t, turn),
            });
            let go_on = self.t.work().spend(1 + in_turn as u64)
                && step(TurnStep { first: turn, count, view });
            let next = u64::from(turn) + count;
            if !go_on || next > u64::from(self.last) {
                return;
            }
            turn = u32::try_from(next).unwrap_or(u32::MAX);
            (calls_at, models_at) = (calls_end, models_end);
        }
    }
}
