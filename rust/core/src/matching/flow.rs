//! The class graph as a flow network and Dinic's maximum flow on it (on unit capacities this is
//! Hopcroft–Karp: O(E·√V)).
//!
//! Nodes: the source, the sink, one per left class and one per right class. Edges are stored
//! in pairs (`e`, `e ^ 1`); `cap[e]` is the residual capacity, so the flow on a forward edge is
//! `cap[e ^ 1]`.
use super::Meter;

pub const SOURCE: u32 = 0;
pub const SINK: u32 = 1;
/// Capacity of a left-class → right-class arc: more than any flow.
pub const UNBOUNDED: u32 = u32::MAX / 2;
const DEAD: u32 = u32::MAX;

pub struct Network {
    pub to: Vec<u32>,
    pub cap: Vec<u32>,
    pub adj: Vec<Vec<u32>>,
}

impl Network {
    pub fn new(nodes: usize) -> Self {
        Network { to: Vec::new(), cap: Vec::new(), adj: vec![Vec::new(); nodes] }
    }

    /// Adds `u → v` with capacity `c`; returns the forward edge.
    pub fn add(&mut self, u: u32, v: u32, c: u32) -> u32 {
        let e = self.to.len() as u32;
        self.to.extend([v, u]);
        self.cap.extend([c, 0]);
        self.adj[u as usize].push(e);
        self.adj[v as usize].push(e ^ 1);
        e
    }

    /// The flow on forward edge `e`.
    pub fn flow(&self, e: u32) -> u32 {
        self.cap[e as usize ^ 1]
    }

    /// Moves `f` units along `e` (negative along its pair).
    pub fn push(&mut self, e: u32, f: u32) {
        self.cap[e as usize] -= f;
        self.cap[e as usize ^ 1] += f;
    }

    /// Augments the current flow to a maximum one; `None` when the meter says stop. The
    /// search calls `expand(net, v, meter)` before it first follows the edges out of node `v`
    /// (the lazy class graph adds them there).
    pub fn max_flow(
        &mut self,
        meter: &mut Meter<'_>,
        expand: &mut impl FnMut(&mut Network, u32, &mut Meter<'_>) -> Option<()>,
    ) -> Option<()> {
        let n = self.adj.len();
        let mut level = vec![DEAD; n];
        let mut next = vec![0usize; n];
        let mut queue = Vec::with_capacity(n);
        let mut path: Vec<u32> = Vec::new();
        loop {
            // Levels by breadth-first search over residual edges.
            level.fill(DEAD);
            level[SOURCE as usize] = 0;
            queue.clear();
            queue.push(SOURCE);
            let mut head = 0;
            while head < queue.len() {
                let v = queue[head] as usize;
                head += 1;
                // Nodes as far as the sink or farther lead to no shortest path.
                let sink = level[SINK as usize];
                if sink != DEAD && level[v] >= sink {
                    break;
                }
                expand(self, v as u32, meter)?;
                meter.tick(self.adj[v].len() as u64)?;
                for &e in &self.adj[v] {
                    let w = self.to[e as usize] as usize;
                    if self.cap[e as usize] > 0 && level[w] == DEAD {
                        level[w] = level[v] + 1;
                        queue.push(w as u32);
                    }
                }
            }
            if level[SINK as usize] == DEAD {
                return Some(());
            }
            // A blocking flow along level-increasing edges, with per-node edge cursors.
            next.fill(0);
            path.clear();
            let mut v = SOURCE as usize;
            loop {
                if v == SINK as usize {
                    let f = path.iter().map(|&e| self.cap[e as usize]).min().unwrap_or(0);
                    for &e in &path {
                        self.push(e, f);
                    }
                    path.clear();
                    v = SOURCE as usize;
                    continue;
                }
                let mut advanced = false;
                while next[v] < self.adj[v].len() {
                    meter.tick(1)?;
                    let e = self.adj[v][next[v]];
                    let w = self.to[e as usize] as usize;
                    let on_level = level[w] != DEAD && level[w] == level[v] + 1;
                    let short = w == SINK as usize || level[w] < level[SINK as usize];
                    if self.cap[e as usize] > 0 && on_level && short {
                        path.push(e);
                        v = w;
                        advanced = true;
                        break;
                    }
                    next[v] += 1;
                }
                if !advanced {
                    if v == SOURCE as usize {
                        break;
                    }
                    // A dead end: never enter it again in this phase.
                    level[v] = DEAD;
                    let e = path.pop().expect("a node other than the source was entered");
                    v = self.to[e as usize ^ 1] as usize;
                    next[v] += 1;
                }
            }
        }
    }
}
