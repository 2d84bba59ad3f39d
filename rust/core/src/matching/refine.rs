//! From first-fit to the canonical matching: a maximum flow on the class graph, then each left
//! in order fixed to the earliest call that still allows a maximum matching.
//!
//! Calls of one class are interchangeable, so a left of class A may take a call of class B iff
//! some maximum flow sends a unit along A → B: it does now, or B reaches A in the residual
//! network (a cycle through A → B moves a unit onto it without changing the flow's value). The
//! left takes the earliest free call of the earliest such class; fixing it removes one unit
//! along source → A → B → sink and lowers both capacities. A left with no such class is left
//! unmatched: then no maximum flow uses A at all, and A's capacity drops by one.
//!
//! Per left: O(log E) when its earliest candidate already carries flow (first-fit's choice, the
//! common case), else one reverse search of the residual network, O(V + E) of the class graph.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::flow::{Network, SINK, SOURCE, UNBOUNDED};
use super::{Edges, Lefts, Meter};

/// Candidate right classes of a left class as (earliest free call, right class), least first.
type Candidates = BinaryHeap<Reverse<(u32, u32)>>;

/// Right classes: members in position order and the index of each class's first free member.
struct Rights {
    members: Vec<Vec<u32>>,
    next: Vec<usize>,
}

impl Rights {
    /// The first free call of class `b`.
    fn head(&self, b: usize) -> Option<u32> {
        self.members[b].get(self.next[b]).copied()
    }
}

pub fn canonical<'a, E: Edges<'a>>(
    e: &E,
    lefts: &Lefts,
    first_fit: &[Option<usize>],
    meter: &mut Meter<'_>,
) -> Option<Vec<Option<usize>>> {
    let n = e.n_right();
    // Right classes in order of first occurrence, grouped by name.
    let mut ids: HashMap<E::Key, u32> = HashMap::new();
    let mut class_of = Vec::with_capacity(n);
    let mut rights = Rights { members: Vec::new(), next: Vec::new() };
    let mut group_of: HashMap<&'a str, usize> = HashMap::new();
    let mut groups: Vec<(&'a str, Vec<u32>)> = Vec::new();
    for r in 0..n {
        meter.tick(1)?;
        let fresh = rights.members.len() as u32;
        let b = *ids.entry(e.key(r)).or_insert(fresh);
        if b == fresh {
            rights.members.push(Vec::new());
            let name = e.name(r);
            let g = *group_of.entry(name).or_insert_with(|| {
                groups.push((name, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(b);
        }
        rights.members[b as usize].push(r as u32);
        class_of.push(b);
    }
    drop(ids);
    let (nl, nr) = (lefts.n_classes(), rights.members.len());
    rights.next = vec![0; nr];
    let left_node = |a: usize| 2 + a as u32;
    let right_node = |b: usize| (2 + nl + b) as u32;

    let mut net = Network::new(2 + nl + nr);
    let mut multiplicity = vec![0u32; nl];
    for &a in &lefts.class {
        multiplicity[a as usize] += 1;
    }
    let source_edge: Vec<u32> =
        (0..nl).map(|a| net.add(SOURCE, left_node(a), multiplicity[a])).collect();
    let sink_edge: Vec<u32> =
        (0..nr).map(|b| net.add(right_node(b), SINK, rights.members[b].len() as u32)).collect();
    // Arcs of each left class, sorted by right class: one comparison per class pair of an
    // accepted name.
    let mut arcs: Vec<Vec<(u32, u32)>> = vec![Vec::new(); nl];
    for (a, arcs) in arcs.iter_mut().enumerate() {
        for (name, members) in &groups {
            meter.tick(1)?;
            if !e.name_ok(a, name) {
                continue;
            }
            for &b in members {
                meter.tick(1)?;
                if e.is_edge(a, rights.members[b as usize][0] as usize) {
                    arcs.push((b, net.add(left_node(a), right_node(b as usize), UNBOUNDED)));
                }
            }
        }
        arcs.sort_unstable();
    }
    let arc = |a: usize, b: u32, arcs: &[Vec<(u32, u32)>]| -> u32 {
        let i = arcs[a].binary_search_by_key(&b, |p| p.0).expect("an arc of the class graph");
        arcs[a][i].1
    };

    // Seed with first-fit, then augment to a maximum flow.
    for (l, pick) in first_fit.iter().enumerate() {
        if let Some(r) = *pick {
            let (a, b) = (lefts.class[l] as usize, class_of[r]);
            net.push(source_edge[a], 1);
            net.push(arc(a, b, &arcs), 1);
            net.push(sink_edge[b as usize], 1);
        }
    }
    net.max_flow(meter)?;

    // Candidate right classes of each left class, earliest free call first (built on first
    // use; an entry goes stale when its class's head moves and is refreshed when it surfaces).
    let mut heaps: Vec<Option<Candidates>> = (0..nl).map(|_| None).collect();
    let mut search = Search::new(net.adj.len());
    let mut out = vec![None; lefts.class.len()];
    let mut aside = Vec::new();
    for (l, slot) in out.iter_mut().enumerate() {
        let a = lefts.class[l] as usize;
        let heap = heaps[a].get_or_insert_with(|| {
            arcs[a]
                .iter()
                .filter_map(|&(b, _)| Some(Reverse((rights.head(b as usize)?, b))))
                .collect()
        });
        let mut chosen = None;
        if let Some(b) = earliest(heap, &rights, meter)? {
            if net.flow(arc(a, b, &arcs)) > 0 {
                chosen = Some(b);
            } else {
                search.reaching(&net, left_node(a), meter)?;
                while let Some(b) = earliest(heap, &rights, meter)? {
                    let e = arc(a, b, &arcs);
                    if net.flow(e) > 0 || search.reached(right_node(b as usize)) {
                        if net.flow(e) == 0 {
                            // Move a unit onto A → B around the cycle back to A.
                            net.push(e, 1);
                            search.push_back(&mut net, right_node(b as usize), left_node(a));
                        }
                        chosen = Some(b);
                        break;
                    }
                    aside.extend(heap.pop());
                }
                heap.extend(aside.drain(..));
            }
        }
        if let Some(b) = chosen {
            let bi = b as usize;
            *slot = rights.head(bi).map(|r| r as usize);
            rights.next[bi] += 1;
            // Fix the pair: one unit less along source → A → B → sink, and one unit less
            // capacity on both ends (their residual capacities stay).
            net.cap[source_edge[a] as usize ^ 1] -= 1;
            net.push(arc(a, b, &arcs) ^ 1, 1);
            net.cap[sink_edge[bi] as usize ^ 1] -= 1;
        } else {
            let e = source_edge[a] as usize;
            debug_assert!(net.cap[e] > 0, "an unmatchable class carries no flow");
            net.cap[e] = net.cap[e].saturating_sub(1);
        }
    }
    Some(out)
}

/// The candidate class with the earliest free call (left in the heap), refreshing stale entries.
#[allow(clippy::option_option)] // `None`: the meter said stop; `Some(None)`: no candidate left
fn earliest(heap: &mut Candidates, rights: &Rights, meter: &mut Meter<'_>) -> Option<Option<u32>> {
    while let Some(&Reverse((at, b))) = heap.peek() {
        meter.tick(1)?;
        match rights.head(b as usize) {
            Some(first) if first == at => return Some(Some(b)),
            Some(first) => {
                heap.pop();
                heap.push(Reverse((first, b)));
            }
            None => {
                heap.pop();
            }
        }
    }
    Some(None)
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

    /// Breadth-first over reversed residual edges from `target`.
    fn reaching(&mut self, net: &Network, target: u32, meter: &mut Meter<'_>) -> Option<()> {
        self.round += 1;
        self.stamp[target as usize] = self.round;
        self.queue.clear();
        self.queue.push(target);
        let mut head = 0;
        while head < self.queue.len() {
            let v = self.queue[head] as usize;
            head += 1;
            meter.tick(net.adj[v].len() as u64)?;
            for &e in &net.adj[v] {
                // `e` leaves v; its pair enters v from w.
                let (w, into) = (net.to[e as usize] as usize, e ^ 1);
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
            let e = self.via[from as usize];
            net.push(e, 1);
            from = net.to[e as usize];
        }
    }
}
