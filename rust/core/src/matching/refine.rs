//! From first-fit to the canonical matching: a maximum flow on the class graph, then each left
//! in order fixed to the earliest call that still allows a maximum matching.
//!
//! Calls of one class are interchangeable, so a left of class A may take a call of class B iff
//! some maximum flow sends a unit along A → B: it does now, or B reaches A in the residual
//! network (a cycle through A → B moves a unit onto it without changing the flow's value). The
//! left takes the earliest free call whose class qualifies; fixing it removes one unit along
//! source → A → B → sink and lowers both capacities. A left with no such call is unmatched:
//! then no maximum flow uses A at all, and A's capacity drops by one.
//!
//! The class graph is lazy: a (left class, right class) pair of an accepted name is compared on
//! first need and remembered in two bits. Dinic's search needs the arcs out of the left classes
//! it reaches (a row), the reverse search of the canonical pass the arcs into the right classes
//! it reaches (a column); a left walks the calls from its class's cursor. Per left: a few steps
//! when its earliest candidate already carries flow (first-fit's choice, the common case), else
//! one reverse search, O(V + E) of the class graph.
// a, b: left and right class; l: left; r: call; e: the edges; as in the text above.
#![allow(clippy::many_single_char_names)]

use std::collections::HashMap;

use super::flow::{Network, SINK, SOURCE, UNBOUNDED};
use super::{Edges, FreeRights, Lefts, Meter};

/// Two bits per candidate (left class, right class) pair: unknown, no edge, edge.
struct Memo(Vec<u64>);

const UNKNOWN: u64 = 0;
const NO: u64 = 1;
const YES: u64 = 2;

impl Memo {
    fn new(cells: usize) -> Self {
        Memo(vec![0; cells.div_ceil(32)])
    }

    fn get(&self, i: usize) -> u64 {
        (self.0[i / 32] >> (2 * (i % 32))) & 3
    }

    fn set(&mut self, i: usize, v: u64) {
        self.0[i / 32] |= v << (2 * (i % 32));
    }
}

/// The class graph besides its network: classes, names, the memo and the arcs added so far.
struct Classes {
    n_left: usize,
    /// Per right class: its first call, its group (name) and its index in the group.
    first: Vec<u32>,
    group: Vec<u32>,
    index: Vec<u32>,
    /// Right classes of each name, in order of first occurrence.
    groups: Vec<Vec<u32>>,
    /// Per left class, the groups it accepts with the memo offset of each, by group.
    accepts: Vec<Vec<(u32, usize)>>,
    /// Per group, the left classes that accept it.
    acceptors: Vec<Vec<u32>>,
    memo: Memo,
    arcs: HashMap<(u32, u32), u32>,
    row_done: Vec<bool>,
    column_done: Vec<bool>,
}

impl Classes {
    fn left_node(a: usize) -> u32 {
        2 + a as u32
    }

    fn right_node(&self, b: usize) -> u32 {
        (2 + self.n_left + b) as u32
    }

    /// Whether left class `a` matches right class `b`, compared on first need; a new edge
    /// becomes an arc of `net`. `None` when the meter says stop.
    fn edge<'a, E: Edges<'a>>(
        &mut self,
        e: &E,
        net: &mut Network,
        a: usize,
        b: usize,
        meter: &mut Meter<'_>,
    ) -> Option<bool> {
        let g = self.group[b];
        let Ok(k) = self.accepts[a].binary_search_by_key(&g, |p| p.0) else {
            return Some(false);
        };
        let cell = self.accepts[a][k].1 + self.index[b] as usize;
        match self.memo.get(cell) {
            UNKNOWN => {
                meter.tick(1)?;
                let yes = e.is_edge(a, self.first[b] as usize);
                self.memo.set(cell, if yes { YES } else { NO });
                if yes {
                    let arc = net.add(Self::left_node(a), self.right_node(b), UNBOUNDED);
                    self.arcs.insert((a as u32, b as u32), arc);
                }
                Some(yes)
            }
            v => Some(v == YES),
        }
    }

    /// Records what first-fit found for `a` and `b` without comparing again.
    fn known(&mut self, net: &mut Network, a: usize, b: usize, yes: bool) {
        let g = self.group[b];
        let Ok(k) = self.accepts[a].binary_search_by_key(&g, |p| p.0) else { return };
        let cell = self.accepts[a][k].1 + self.index[b] as usize;
        if self.memo.get(cell) == UNKNOWN {
            self.memo.set(cell, if yes { YES } else { NO });
            if yes {
                let arc = net.add(Self::left_node(a), self.right_node(b), UNBOUNDED);
                self.arcs.insert((a as u32, b as u32), arc);
            }
        }
    }

    /// Every arc out of left class `a`.
    fn row<'a, E: Edges<'a>>(
        &mut self,
        e: &E,
        net: &mut Network,
        a: usize,
        meter: &mut Meter<'_>,
    ) -> Option<()> {
        if !std::mem::replace(&mut self.row_done[a], true) {
            for k in 0..self.accepts[a].len() {
                let g = self.accepts[a][k].0 as usize;
                for i in 0..self.groups[g].len() {
                    self.edge(e, net, a, self.groups[g][i] as usize, meter)?;
                }
            }
        }
        Some(())
    }

    /// Every arc into right class `b`.
    fn column<'a, E: Edges<'a>>(
        &mut self,
        e: &E,
        net: &mut Network,
        b: usize,
        meter: &mut Meter<'_>,
    ) -> Option<()> {
        if !std::mem::replace(&mut self.column_done[b], true) {
            let g = self.group[b] as usize;
            for i in 0..self.acceptors[g].len() {
                self.edge(e, net, self.acceptors[g][i] as usize, b, meter)?;
            }
        }
        Some(())
    }
}

pub fn canonical<'a, E: Edges<'a>>(
    e: &E,
    lefts: &Lefts,
    first_fit: &[Option<usize>],
    meter: &mut Meter<'_>,
) -> Option<Vec<Option<usize>>> {
    let n = e.n_right();
    let nl = lefts.n_classes();
    // Right classes in order of first occurrence, grouped by name.
    let mut ids: HashMap<E::Key, u32> = HashMap::new();
    let mut group_of: HashMap<&'a str, u32> = HashMap::new();
    let mut c = Classes {
        n_left: nl,
        first: Vec::new(),
        group: Vec::new(),
        index: Vec::new(),
        groups: Vec::new(),
        accepts: Vec::with_capacity(nl),
        acceptors: Vec::new(),
        memo: Memo::new(0),
        arcs: HashMap::new(),
        row_done: vec![false; nl],
        column_done: Vec::new(),
    };
    let mut class_of = Vec::with_capacity(n);
    let mut count: Vec<u32> = Vec::new();
    for r in 0..n {
        meter.tick(1)?;
        let fresh = c.first.len() as u32;
        let b = *ids.entry(e.key(r)).or_insert(fresh);
        if b == fresh {
            let name = e.name(r);
            let g = *group_of.entry(name).or_insert_with(|| {
                c.groups.push(Vec::new());
                c.groups.len() as u32 - 1
            });
            c.first.push(r as u32);
            c.group.push(g);
            c.index.push(c.groups[g as usize].len() as u32);
            c.groups[g as usize].push(b);
            count.push(0);
        }
        count[b as usize] += 1;
        class_of.push(b);
    }
    drop(ids);
    let nr = c.first.len();
    c.column_done = vec![false; nr];
    // Which names each left class accepts: a lookup for exact names, else a test per name.
    let mut names: Vec<&str> = vec![""; c.groups.len()];
    for (name, &g) in &group_of {
        names[g as usize] = name;
    }
    c.acceptors = vec![Vec::new(); c.groups.len()];
    let mut cells = 0;
    for a in 0..nl {
        let accepted: Vec<u32> = if let Some(name) = e.exact_name(a) {
            group_of.get(name).copied().into_iter().collect()
        } else {
            meter.tick(names.len() as u64)?;
            (0..names.len() as u32).filter(|&g| e.name_ok(a, names[g as usize])).collect()
        };
        let mut row = Vec::with_capacity(accepted.len());
        for g in accepted {
            c.acceptors[g as usize].push(a as u32);
            row.push((g, cells));
            cells += c.groups[g as usize].len();
        }
        c.accepts.push(row);
    }
    c.memo = Memo::new(cells);

    let mut net = Network::new(2 + nl + nr);
    let mut multiplicity = vec![0u32; nl];
    for &a in &lefts.class {
        multiplicity[a as usize] += 1;
    }
    let source_edge: Vec<u32> =
        (0..nl).map(|a| net.add(SOURCE, Classes::left_node(a), multiplicity[a])).collect();
    let sink_edge: Vec<u32> = (0..nr).map(|b| net.add(c.right_node(b), SINK, count[b])).collect();

    // Seed with first-fit, then augment to a maximum flow. Replaying first-fit's scan tells
    // the memo every pair it compared: the free calls a left passed over do not match it.
    let mut free = FreeRights::new(n);
    let mut cursor = vec![0usize; nl];
    for (l, pick) in first_fit.iter().enumerate() {
        let a = lefts.class[l] as usize;
        let end = pick.unwrap_or(n);
        let mut r = free.first_from(cursor[a]);
        while r < end {
            meter.tick(1)?;
            c.known(&mut net, a, class_of[r] as usize, false);
            r = free.first_from(r + 1);
        }
        cursor[a] = end;
        if let Some(r) = *pick {
            free.take(r);
            let b = class_of[r] as usize;
            c.known(&mut net, a, b, true);
            net.push(source_edge[a], 1);
            net.push(c.arcs[&(a as u32, b as u32)], 1);
            net.push(sink_edge[b], 1);
        }
    }
    net.max_flow(meter, &mut |net, v, meter| {
        if let Some(a) = (v as usize).checked_sub(2).filter(|&a| a < nl) {
            c.row(e, net, a, meter)?;
        }
        Some(())
    })?;

    let mut search = Search::new(net.adj.len());
    let mut free = FreeRights::new(n);
    let mut cursor = vec![0usize; nl];
    let mut out = vec![None; lefts.class.len()];
    for (l, slot) in out.iter_mut().enumerate() {
        let a = lefts.class[l] as usize;
        let mut searched = false;
        let mut prefix = true;
        let mut chosen = None;
        let mut r = free.first_from(cursor[a]);
        while r < n {
            meter.tick(1)?;
            let b = class_of[r] as usize;
            if c.edge(e, &mut net, a, b, meter)? {
                let arc = c.arcs[&(a as u32, b as u32)];
                if net.flow(arc) > 0 {
                    chosen = Some((r, b, arc));
                    break;
                }
                if !searched {
                    searched = true;
                    search.reaching(&mut net, &mut c, e, Classes::left_node(a), meter)?;
                }
                if search.reached(c.right_node(b)) {
                    // Move a unit onto A → B around the cycle back to A.
                    net.push(arc, 1);
                    search.push_back(&mut net, c.right_node(b), Classes::left_node(a));
                    chosen = Some((r, b, arc));
                    break;
                }
                prefix = false;
            } else if prefix {
                // Calls before the cursor are taken or do not match this class.
                cursor[a] = r + 1;
            }
            r = free.first_from(r + 1);
        }
        if let Some((r, b, arc)) = chosen {
            *slot = Some(r);
            free.take(r);
            // Fix the pair: one unit less along source → A → B → sink, and one unit less
            // capacity on both ends (their residual capacities stay).
            net.cap[source_edge[a] as usize ^ 1] -= 1;
            net.push(arc ^ 1, 1);
            net.cap[sink_edge[b] as usize ^ 1] -= 1;
        } else {
            let se = source_edge[a] as usize;
            debug_assert!(net.cap[se] > 0, "an unmatchable class carries no flow");
            net.cap[se] = net.cap[se].saturating_sub(1);
        }
    }
    Some(out)
}

/// The nodes that reach a target in the residual network, each with its first edge towards it.
struct Search {
    stamp: Vec<u32>,
    round: u32,
    via: Vec<u32>,
    queue: Vec<u32>,
}

impl Search {
    fn new(nodes: usize) -> Self {
        Search { stamp: vec![0; nodes], round: 0, via: vec![0; nodes], queue: Vec::new() }
    }

    fn reached(&self, v: u32) -> bool {
        self.stamp[v as usize] == self.round
    }

    /// Breadth-first over reversed residual edges from `target` (the arcs into a right class
    /// are completed first).
    fn reaching<'a, E: Edges<'a>>(
        &mut self,
        net: &mut Network,
        c: &mut Classes,
        e: &E,
        target: u32,
        meter: &mut Meter<'_>,
    ) -> Option<()> {
        self.round += 1;
        self.stamp[target as usize] = self.round;
        self.queue.clear();
        self.queue.push(target);
        let mut head = 0;
        while head < self.queue.len() {
            let v = self.queue[head] as usize;
            head += 1;
            if v >= 2 + c.n_left {
                c.column(e, net, v - 2 - c.n_left, meter)?;
            }
            meter.tick(net.adj[v].len() as u64)?;
            for &x in &net.adj[v] {
                // `x` leaves v; its pair enters v from w.
                let (w, into) = (net.to[x as usize] as usize, x ^ 1);
                if net.cap[into as usize] > 0 && self.stamp[w] != self.round {
                    self.stamp[w] = self.round;
                    self.via[w] = into;
                    self.queue.push(w as u32);
                }
            }
        }
        Some(())
    }

    /// Pushes one unit from `from` along the found edges to the search's target.
    fn push_back(&self, net: &mut Network, mut from: u32, target: u32) {
        while from != target {
            let x = self.via[from as usize];
            net.push(x, 1);
            from = net.to[x as usize];
        }
    }
}
