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

    used.fill(false);
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

#[cfg(test)]
mod tests {
    use super::canonical;

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
