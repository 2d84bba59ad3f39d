//! The test oracle: the canonical matching by definition (recomputing a maximum matching per
//! candidate) on an explicit graph, and [`Explicit`], a graph with classes on both sides for
//! the unit tests and the fuzz target.
use super::{Edges, Lefts};

/// The canonical matching by definition (recomputing a maximum matching per candidate);
/// the reference the fast version is tested against.
pub fn by_definition(adj: &[Vec<usize>], n_right: usize) -> Vec<Option<usize>> {
    let mut used = vec![false; n_right];
    let best = max_matching(adj, 0, &used);
    let mut out = vec![None; adj.len()];
    let mut fixed = 0;
    for l in 0..adj.len() {
        for &r in &adj[l] {
            if used[r] {
                continue;
            }
            used[r] = true;
            if fixed + 1 + max_matching(adj, l + 1, &used) == best {
                out[l] = Some(r);
                fixed += 1;
                break;
            }
            used[r] = false;
        }
    }
    out
}

/// Size of a maximum matching of left vertices `from..` onto right vertices not `blocked`
/// (Kuhn's augmenting paths; iterative so deep graphs cannot overflow the stack).
fn max_matching(adj: &[Vec<usize>], from: usize, blocked: &[bool]) -> usize {
    let n_right = blocked.len();
    let mut owner: Vec<Option<usize>> = vec![None; n_right];
    let mut size = 0;
    let mut seen = vec![false; n_right];
    for l in from..adj.len() {
        seen.fill(false);
        if augment(adj, l, blocked, &mut owner, &mut seen) {
            size += 1;
        }
    }
    size
}

/// Finds an augmenting path from left vertex `start` with an explicit stack.
fn augment(
    adj: &[Vec<usize>],
    start: usize,
    blocked: &[bool],
    owner: &mut [Option<usize>],
    seen: &mut [bool],
) -> bool {
    // Each frame: (left vertex, next candidate index, right vertex taken to reach it).
    let mut stack: Vec<(usize, usize, Option<usize>)> = vec![(start, 0, None)];
    while let Some(top) = stack.last_mut() {
        let (l, idx) = (top.0, top.1);
        if idx >= adj[l].len() {
            stack.pop();
            continue;
        }
        top.1 += 1;
        let r = adj[l][idx];
        if blocked[r] || seen[r] {
            continue;
        }
        seen[r] = true;
        match owner[r] {
            None => {
                // Flip the path: every frame's left vertex takes the right vertex below it.
                let mut take = r;
                while let Some((l, _, via)) = stack.pop() {
                    owner[take] = Some(l);
                    match via {
                        Some(prev) => take = prev,
                        None => break,
                    }
                }
                return true;
            }
            Some(next) => stack.push((next, 0, Some(r))),
        }
    }
    false
}

/// An explicit graph: classes of lefts and of rights, each right class with a name, each left
/// class with the names it accepts, and an edge bit per class pair.
#[derive(Debug)]
pub struct Explicit {
    lefts: Lefts,
    /// `adj[left class][right class]`.
    adj: Vec<Vec<bool>>,
    right_class: Vec<u32>,
    right_name: Vec<&'static str>,
    accepts: Vec<Vec<&'static str>>,
}

const NAMES: [&str; 3] = ["a", "b", "c"];

impl Explicit {
    /// Every left and every right its own class, one name.
    pub fn singletons(adj: &[Vec<usize>], n_right: usize) -> Self {
        let bits = adj
            .iter()
            .map(|row| {
                let mut bits = vec![false; n_right];
                for &r in row {
                    bits[r] = true;
                }
                bits
            })
            .collect();
        Explicit {
            lefts: Lefts::new(0..adj.len()),
            adj: bits,
            right_class: (0..n_right as u32).collect(),
            right_name: vec![""; n_right],
            accepts: vec![vec![""]; adj.len()],
        }
    }

    /// Left classes `lefts` whose class `a` matches the right classes `class_adj[a]`; right `r`
    /// of class `right_class[r]`; every class accepts every name.
    pub fn classes(
        class_adj: &[Vec<u32>],
        lefts: Lefts,
        right_class: Vec<u32>,
        right_name: Vec<&'static str>,
    ) -> Self {
        let nr = right_name.len();
        let adj = class_adj
            .iter()
            .map(|row| {
                let mut bits = vec![false; nr];
                for &b in row {
                    bits[b as usize] = true;
                }
                bits
            })
            .collect();
        let accepts = vec![right_name.clone(); class_adj.len()];
        Explicit { lefts, adj, right_class, right_name, accepts }
    }

    /// A random graph of at most `max_left` lefts and `max_right` rights in a few classes.
    pub fn random(next: &mut impl FnMut() -> u64, max_left: u64, max_right: u64) -> Self {
        let (nl, nr) = (next() % (max_left + 1), next() % (max_right + 1));
        let (lc, rc) = (1 + next() % 4, 1 + next() % 4);
        let density = next() % 100;
        let mut bytes = vec![nl as u8, nr as u8, lc as u8, rc as u8, density as u8];
        bytes.extend((0..(nl + nr + 8 + lc * rc)).map(|_| next() as u8));
        Self::from_bytes(&bytes)
    }

    /// A graph decoded from arbitrary bytes (the fuzz target's input): sizes, classes, names,
    /// accepted names and edge bits, each byte taken in turn (zeros once they run out).
    pub fn from_bytes(data: &[u8]) -> Self {
        let mut it = data.iter().copied().chain(std::iter::repeat(0));
        let mut byte = || u32::from(it.next().unwrap_or(0));
        let (nl, nr) = (byte() % 40, byte() % 40);
        let (lc, rc) = (1 + byte() % 6, 1 + byte() % 6);
        let density = byte() % 100;
        let lefts = Lefts::new((0..nl).map(|_| byte() % lc));
        let right_class = Lefts::new((0..nr).map(|_| byte() % rc));
        let nrc = right_class.n_classes();
        let right_name: Vec<&'static str> =
            (0..nrc).map(|_| NAMES[(byte() % 3) as usize]).collect();
        let accepts = (0..lefts.n_classes())
            .map(|_| {
                let mask = byte() % 8;
                NAMES
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, n)| *n)
                    .collect()
            })
            .collect();
        let adj = (0..lefts.n_classes())
            .map(|_| (0..nrc).map(|_| byte() * 100 / 256 < density).collect())
            .collect();
        Explicit { lefts, adj, right_class: right_class.class, right_name, accepts }
    }

    pub fn lefts(&self) -> Lefts {
        Lefts { class: self.lefts.class.clone(), first: self.lefts.first.clone() }
    }

    pub fn n_right_total(&self) -> usize {
        self.right_class.len()
    }

    /// The expanded adjacency: per left, the rights it matches, ascending.
    pub fn expanded(&self) -> Vec<Vec<usize>> {
        self.lefts
            .class
            .iter()
            .map(|&a| {
                (0..self.right_class.len()).filter(|&r| self.is_edge(a as usize, r)).collect()
            })
            .collect()
    }
}

impl Edges<'static> for Explicit {
    type Key = u32;

    fn n_right(&self) -> usize {
        self.right_class.len()
    }

    fn key(&self, r: usize) -> u32 {
        self.right_class[r]
    }

    fn name(&self, r: usize) -> &'static str {
        self.right_name[self.right_class[r] as usize]
    }

    fn name_ok(&self, class: usize, name: &str) -> bool {
        self.accepts[class].contains(&name)
    }

    fn exact_name(&self, class: usize) -> Option<&str> {
        match self.accepts[class].as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    fn is_edge(&self, class: usize, r: usize) -> bool {
        self.name_ok(class, self.name(r)) && self.adj[class][self.right_class[r] as usize]
    }
}
