//! Maximum bipartite matching with the canonical choice of SPEC §9.13.
//!
//! Left vertices are steps (or reference calls), right vertices are calls. Among all maximum
//! matchings, each left vertex in order takes the earliest right vertex that still allows one.

/// The canonical maximum matching: for each left vertex, its right vertex (or `None`).
/// `adj[l]` lists the right vertices `l` may take, ascending.
pub fn canonical(adj: &[Vec<usize>], n_right: usize) -> Vec<Option<usize>> {
    // Fast path: when first-fit matches every left vertex it is maximum, and each choice was
    // the earliest possible one, so it is the canonical matching.
    let mut used = vec![false; n_right];
    let mut first_fit = Vec::with_capacity(adj.len());
    for cands in adj {
        let pick = cands.iter().copied().find(|&r| !used[r]);
        if let Some(r) = pick {
            used[r] = true;
        }
        first_fit.push(pick);
    }
    if first_fit.iter().all(Option::is_some) {
        return first_fit;
    }

    incremental(adj, n_right)
}

/// The canonical matching by repair: keep one maximum matching that respects the decisions
/// made so far; to give left `l` the right `r`, evict r's owner and look for one augmenting
/// path. O(L * deg * E) instead of recomputing a matching per candidate.
fn incremental(adj: &[Vec<usize>], n_right: usize) -> Vec<Option<usize>> {
    let n_left = adj.len();
    let mut m = Matching {
        adj,
        left: vec![None; n_left],
        right: vec![None; n_right],
        blocked: vec![false; n_right],
        done: 0,
        seen: vec![false; n_right],
    };
    // Any maximum matching to start from (sharing `seen` within a round is Kuhn's usual
    // shortcut: a right that led nowhere leads nowhere from another start either).
    loop {
        m.seen.fill(false);
        if !m.augment_any() {
            break;
        }
    }
    for (l, candidates) in adj.iter().enumerate() {
        m.done = l + 1; // lefts up to l are decided; only later ones may move
        let current = m.left[l];
        for &r in candidates {
            if m.blocked[r] {
                continue;
            }
            if current == Some(r) || m.try_take(l, r, current) {
                break;
            }
        }
        if let Some(r) = m.left[l] {
            m.blocked[r] = true;
        }
    }
    m.left
}

struct Matching<'a> {
    adj: &'a [Vec<usize>],
    left: Vec<Option<usize>>,
    right: Vec<Option<usize>>,
    /// Rights of decided lefts.
    blocked: Vec<bool>,
    /// Lefts below this index are decided and never move.
    done: usize,
    seen: Vec<bool>,
}

impl Matching<'_> {
    /// Gives `r` to `l` if a matching of the same size still exists; otherwise changes nothing.
    fn try_take(&mut self, l: usize, r: usize, current: Option<usize>) -> bool {
        let (saved_left, saved_right) = (self.left.clone(), self.right.clone());
        let evicted = self.right[r];
        if let Some(r0) = current {
            self.right[r0] = None;
        }
        if let Some(o) = evicted {
            self.left[o] = None;
        }
        self.left[l] = Some(r);
        self.right[r] = Some(l);
        self.blocked[r] = true;
        // Size is kept when nothing was evicted, when `l` was unmatched before, or when one
        // augmenting path from any free undecided left restores the lost pair.
        let ok = evicted.is_none() || current.is_none() || {
            self.seen.fill(false);
            self.augment_any()
        };
        self.blocked[r] = false;
        if !ok {
            self.left = saved_left;
            self.right = saved_right;
        }
        ok
    }

    /// One augmenting path from some free undecided left; true if the matching grew.
    fn augment_any(&mut self) -> bool {
        for u in self.done..self.adj.len() {
            if self.left[u].is_none() && self.augment(u) {
                return true;
            }
        }
        false
    }

    /// Iterative alternating-path search from free left `start` over unblocked rights.
    fn augment(&mut self, start: usize) -> bool {
        let mut stack: Vec<(usize, usize, Option<usize>)> = vec![(start, 0, None)];
        while let Some(top) = stack.last_mut() {
            let (l, idx) = (top.0, top.1);
            if idx >= self.adj[l].len() {
                stack.pop();
                continue;
            }
            top.1 += 1;
            let r = self.adj[l][idx];
            if self.blocked[r] || self.seen[r] {
                continue;
            }
            self.seen[r] = true;
            match self.right[r] {
                None => {
                    let mut take = r;
                    while let Some((l, _, via)) = stack.pop() {
                        self.right[take] = Some(l);
                        self.left[l] = Some(take);
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
}

/// The canonical matching by definition (recomputing a maximum matching per candidate);
/// the reference the fast version is tested against.
#[cfg(test)]
fn by_definition(adj: &[Vec<usize>], n_right: usize) -> Vec<Option<usize>> {
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

#[cfg(test)]
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

#[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::{by_definition, canonical};

    #[test]
    fn agrees_with_the_definition_on_random_graphs() {
        // A small deterministic generator (xorshift) keeps the test reproducible.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..5000 {
            let (nl, nr) = ((next() % 9) as usize, (next() % 9) as usize);
            let density = next() % 100;
            let adj: Vec<Vec<usize>> =
                (0..nl).map(|_| (0..nr).filter(|_| next() % 100 < density).collect()).collect();
            assert_eq!(canonical(&adj, nr), by_definition(&adj, nr), "{adj:?}");
        }
    }

    #[test]
    fn first_fit_would_fail() {
        // Step 0 may take call 0 or 1; step 1 only call 0.
        let adj = vec![vec![0, 1], vec![0]];
        assert_eq!(canonical(&adj, 2), vec![Some(1), Some(0)]);
    }

    #[test]
    fn unmatched_left_is_skipped() {
        let adj = vec![vec![1], vec![], vec![0]];
        assert_eq!(canonical(&adj, 2), vec![Some(1), None, Some(0)]);
        let adj = vec![vec![0], vec![0], vec![0, 1]];
        assert_eq!(canonical(&adj, 2), vec![Some(0), None, Some(1)]);
    }

    #[test]
    fn earliest_among_maximum() {
        let adj = vec![vec![0, 1, 2], vec![1, 2], vec![0]];
        assert_eq!(canonical(&adj, 3), vec![Some(1), Some(2), Some(0)]);
    }
}
