//! Maximum bipartite matching with the canonical choice of SPEC §9.13, in bounded time and
//! memory over an implicit graph.
//!
//! Left vertices are steps (or reference calls), right vertices are calls. Among all maximum
//! matchings, each left vertex in order takes the earliest right vertex that still allows one.
//!
//! The graph is never built pair by pair. Lefts come in classes of identical matchers (fixed
//! when the suite compiles), calls in classes of identical keys (name, and arguments when some
//! left compares them), so a matcher is compared with a call class once, and only with the
//! classes of the names it accepts. First-fit runs first: when it matches every left it is the
//! canonical matching. Otherwise a maximum flow on the class graph ([`flow`]), seeded with
//! first-fit, is refined into the canonical matching left by left ([`refine`]). Every loop
//! spends from the work meter and the search returns `None` as soon as it says stop.
mod flow;
mod oracle;
mod refine;

use std::collections::HashMap;
use std::hash::Hash;

#[doc(hidden)]
pub use oracle::{by_definition, Explicit};

use crate::trace::TraceView;
use crate::work::Work;

/// The edges of one matching problem, answered lazily.
///
/// Contract: `is_edge(c, r)` implies `name_ok(c, name(r))`, and calls with equal keys have the
/// same name and the same `is_edge` answer for every class.
pub trait Edges<'a> {
    type Key: Hash + Eq;
    fn n_right(&self) -> usize;
    /// The class key of right `r`.
    fn key(&self, r: usize) -> Self::Key;
    fn name(&self, r: usize) -> &'a str;
    /// Whether left class `class` can match some call named `name` (cheap: no arguments).
    fn name_ok(&self, class: usize, name: &str) -> bool;
    /// The one name left class `class` accepts, when it accepts exactly one (found by lookup
    /// instead of a `name_ok` test per name).
    fn exact_name(&self, class: usize) -> Option<&str>;
    /// Whether left class `class` matches right `r`.
    fn is_edge(&self, class: usize, r: usize) -> bool;
    /// Whether `is_edge(c, r)` holds exactly when right `r`'s name is `exact_name(c)` (names
    /// alone decide, see [`canonical`]).
    fn by_name_alone(&self) -> bool {
        false
    }
}

/// The left side of a matching against a trace's calls: what each class of steps (or
/// reference calls) accepts. `Calls` supplies the right side, the same for every kind.
pub trait CallLefts {
    /// Whether some class compares arguments (else calls are classed by name alone).
    fn compares_args(&self) -> bool;
    fn name_ok(&self, class: usize, name: &str) -> bool;
    fn exact_name(&self, class: usize) -> Option<&str>;
    fn is_edge(&self, class: usize, t: &TraceView<'_>, r: usize) -> bool;
    /// Whether a call is an edge of a class exactly when its name is the class's
    /// `exact_name` (no arguments compared, no globs).
    fn by_name_alone(&self) -> bool {
        false
    }
}

/// A matching problem: the classes of `lefts` against the calls of `t`.
pub struct Calls<'s, 't, 'a, L> {
    pub lefts: &'s L,
    pub t: &'t TraceView<'a>,
}

impl<'a, L: CallLefts> Edges<'a> for Calls<'_, '_, 'a, L> {
    type Key = (&'a str, Option<&'a str>);

    fn n_right(&self) -> usize {
        self.t.len()
    }

    fn key(&self, r: usize) -> Self::Key {
        let call = &self.t.calls()[r];
        (call.name, call.arguments_json.filter(|_| self.lefts.compares_args()))
    }

    fn name(&self, r: usize) -> &'a str {
        self.t.calls()[r].name
    }

    fn name_ok(&self, class: usize, name: &str) -> bool {
        self.lefts.name_ok(class, name)
    }

    fn exact_name(&self, class: usize) -> Option<&str> {
        self.lefts.exact_name(class)
    }

    fn is_edge(&self, class: usize, r: usize) -> bool {
        self.lefts.is_edge(class, self.t, r)
    }

    fn by_name_alone(&self) -> bool {
        self.lefts.by_name_alone()
    }
}

/// The lefts of a problem: the class of each left, classes numbered by first occurrence.
#[derive(Debug, Default)]
pub struct Lefts {
    pub class: Vec<u32>,
    /// The first left of each class.
    pub first: Vec<usize>,
}

impl Lefts {
    /// Lefts with equal keys share a class.
    pub fn new<K: Hash + Eq>(keys: impl IntoIterator<Item = K>) -> Self {
        let mut ids: HashMap<K, u32> = HashMap::new();
        let mut lefts = Lefts::default();
        for (l, k) in keys.into_iter().enumerate() {
            let next = lefts.first.len() as u32;
            let c = *ids.entry(k).or_insert(next);
            if c == next {
                lefts.first.push(l);
            }
            lefts.class.push(c);
        }
        lefts
    }

    pub fn n_classes(&self) -> usize {
        self.first.len()
    }
}

/// Work units are spent in batches so the hot path stays cheap.
const BATCH: u64 = 64;

/// Spends from the work meter in batches; `tick` answers `None` once it says stop.
/// Scans outside the matching use it too.
pub struct Meter<'w> {
    work: &'w Work,
    pending: u64,
}

impl<'w> Meter<'w> {
    pub fn new(work: &'w Work) -> Self {
        Meter { work, pending: 0 }
    }

    #[inline]
    pub fn tick(&mut self, units: u64) -> Option<()> {
        self.pending += units;
        if self.pending >= BATCH {
            let p = std::mem::take(&mut self.pending);
            return self.work.spend(p).then_some(());
        }
        Some(())
    }

    /// Whether a `tick` said stop.
    pub fn stopped(&self) -> bool {
        self.work.stopped().is_some()
    }
}

impl Drop for Meter<'_> {
    /// The last partial batch is spent too (a stop it causes shows in `Work::stopped`).
    fn drop(&mut self) {
        if self.pending > 0 {
            self.work.spend(self.pending);
        }
    }
}

/// The canonical maximum matching: for each left, its right (or `None`); `None` when the work
/// meter stopped the search.
pub fn canonical<'a, E: Edges<'a>>(
    e: &E,
    lefts: &Lefts,
    work: &Work,
) -> Option<Vec<Option<usize>>> {
    let mut meter = Meter::new(work);
    let first_fit = first_fit(e, lefts, &mut meter)?;
    // When first-fit matches every left it is maximum, and each choice was the earliest
    // possible one, so it is the canonical matching. So it is when names alone decide the
    // edges: the graph is then one complete bipartite graph per name, whose canonical matching
    // pairs that name's lefts and rights in order until either runs out (any left can take
    // any free right of its name without lowering the maximum while rights remain), which is
    // what first-fit does; no flow is needed for the lefts it leaves unmatched.
    let out = if e.by_name_alone() || first_fit.iter().all(Option::is_some) {
        first_fit
    } else {
        refine::canonical(e, lefts, &first_fit, &mut meter)?
    };
    Some(out)
}

/// Each left in order takes the earliest free right it matches. A cursor per class: the rights
/// a class passed over were taken or did not match, and stay so for its later lefts, so each
/// (class, right) pair is compared at most once; taken rights are skipped in near O(1) by
/// [`FreeRights`].
fn first_fit<'a, E: Edges<'a>>(
    e: &E,
    lefts: &Lefts,
    meter: &mut Meter<'_>,
) -> Option<Vec<Option<usize>>> {
    let n = e.n_right();
    let mut free = FreeRights::new(n);
    let mut cursor = vec![0usize; lefts.n_classes()];
    let mut out = Vec::with_capacity(lefts.class.len());
    for &c in &lefts.class {
        let c = c as usize;
        let mut r = free.first_from(cursor[c]);
        let mut pick = None;
        while r < n {
            meter.tick(1)?;
            if e.is_edge(c, r) {
                pick = Some(r);
                free.take(r);
                break;
            }
            r = free.first_from(r + 1);
        }
        cursor[c] = r;
        out.push(pick);
    }
    Some(out)
}

/// The free rights as a union-find over positions: `first_from(r)` is the first free right at
/// or after `r` (or `n`), with path halving.
struct FreeRights {
    next: Vec<u32>,
}

impl FreeRights {
    fn new(n: usize) -> Self {
        FreeRights { next: (0..=n as u32).collect() }
    }

    fn first_from(&mut self, mut r: usize) -> usize {
        while self.next[r] as usize != r {
            let up = self.next[self.next[r] as usize];
            self.next[r] = up;
            r = up as usize;
        }
        r
    }

    fn take(&mut self, r: usize) {
        self.next[r] = r as u32 + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::{by_definition, canonical, Explicit, Lefts};
    use crate::work::{Stop, Work};

    fn solve(adj: &[Vec<usize>], n_right: usize) -> Vec<Option<usize>> {
        let g = Explicit::singletons(adj, n_right);
        canonical(&g, &g.lefts(), &Work::new(u64::MAX, None)).expect("no limit")
    }

    /// A small deterministic generator (xorshift) keeps the tests reproducible.
    fn rng(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn agrees_with_the_definition_on_random_graphs() {
        let mut next = rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..5000 {
            let (nl, nr) = ((next() % 9) as usize, (next() % 9) as usize);
            let density = next() % 100;
            let adj: Vec<Vec<usize>> =
                (0..nl).map(|_| (0..nr).filter(|_| next() % 100 < density).collect()).collect();
            assert_eq!(solve(&adj, nr), by_definition(&adj, nr), "{adj:?}");
        }
    }

    #[test]
    fn agrees_with_the_definition_on_identical_rows_and_columns() {
        // Few classes on each side, many members: the class graph is much smaller than the
        // expanded one. Rights carry one of three names; a left class accepts some of them.
        let mut next = rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3000 {
            let g = Explicit::random(&mut next, 14, 14);
            let adj = g.expanded();
            let got = canonical(&g, &g.lefts(), &Work::new(u64::MAX, None)).expect("no limit");
            assert_eq!(got, by_definition(&adj, g.n_right_total()), "{g:?}");
        }
    }

    /// Lefts and rights named by one byte; names alone decide the edges.
    struct Named {
        left: Vec<u8>,
        lefts: Lefts,
        right: Vec<u8>,
    }

    impl super::Edges<'static> for Named {
        type Key = u8;

        fn n_right(&self) -> usize {
            self.right.len()
        }

        fn key(&self, r: usize) -> u8 {
            self.right[r]
        }

        fn name(&self, r: usize) -> &'static str {
            ["a", "b", "c", "d"][usize::from(self.right[r])]
        }

        fn name_ok(&self, class: usize, name: &str) -> bool {
            self.exact_name(class) == Some(name)
        }

        fn exact_name(&self, class: usize) -> Option<&str> {
            Some(["a", "b", "c", "d"][usize::from(self.left[self.lefts.first[class]])])
        }

        fn is_edge(&self, class: usize, r: usize) -> bool {
            self.left[self.lefts.first[class]] == self.right[r]
        }

        fn by_name_alone(&self) -> bool {
            true
        }
    }

    #[test]
    fn names_alone_agree_with_the_definition() {
        // First-fit leaves lefts unmatched here (more lefts of a name than rights, names with
        // no right); its matching is still the canonical one. Two classes share some names
        // (keys that differ beyond the name, as reference calls with ignored arguments).
        let mut next = rng(0x51_7cc1_b727_220a);
        let mut partial = 0;
        for _ in 0..3000 {
            let (nl, nr) = ((next() % 12) as usize, (next() % 12) as usize);
            let left: Vec<u8> = (0..nl).map(|_| (next() % 4) as u8).collect();
            let right: Vec<u8> = (0..nr).map(|_| (next() % 3) as u8).collect();
            let keys: Vec<(u8, u64)> = left.iter().map(|&n| (n, next() % 2)).collect();
            let g = Named { left: left.clone(), lefts: Lefts::new(keys), right: right.clone() };
            let adj: Vec<Vec<usize>> =
                left.iter().map(|&n| (0..nr).filter(|&r| right[r] == n).collect()).collect();
            let got = canonical(&g, &g.lefts, &Work::new(u64::MAX, None)).expect("no limit");
            assert_eq!(got, by_definition(&adj, nr), "{left:?} {right:?}");
            partial += usize::from(got.iter().any(Option::is_none));
        }
        assert!(partial > 1000, "{partial} problems left some left unmatched");
    }

    #[test]
    fn first_fit_would_fail() {
        // Step 0 may take call 0 or 1; step 1 only call 0.
        let adj = vec![vec![0, 1], vec![0]];
        assert_eq!(solve(&adj, 2), vec![Some(1), Some(0)]);
    }

    #[test]
    fn unmatched_left_is_skipped() {
        let adj = vec![vec![1], vec![], vec![0]];
        assert_eq!(solve(&adj, 2), vec![Some(1), None, Some(0)]);
        let adj = vec![vec![0], vec![0], vec![0, 1]];
        assert_eq!(solve(&adj, 2), vec![Some(0), None, Some(1)]);
    }

    #[test]
    fn earliest_among_maximum() {
        let adj = vec![vec![0, 1, 2], vec![1, 2], vec![0]];
        assert_eq!(solve(&adj, 3), vec![Some(1), Some(2), Some(0)]);
    }

    #[test]
    fn identical_lefts_over_many_calls_are_cheap() {
        // 5,000 identical lefts over 5,000 identical rights, the last left of another class
        // that matches nothing: first-fit fails, and the class graph has three nodes and an edge.
        let n = 5000;
        let mut keys = vec![0u32; n];
        keys[n - 1] = 1;
        let g = Explicit::classes(&[vec![0], vec![]], Lefts::new(keys), vec![0; n], vec![""]);
        let work = Work::new(u64::MAX, None);
        let got = canonical(&g, &g.lefts(), &work).expect("no limit");
        assert_eq!(got.iter().flatten().count(), n - 1);
        assert_eq!(got[n - 2], Some(n - 2));
        assert!(work.used() < 10 * n as u64, "{} units", work.used());
    }

    #[test]
    fn a_huge_adversarial_matching_stops_at_the_work_limit() {
        // 3,000 distinct lefts, all but the last matching every one of 3,000 distinct rights,
        // the last only right 0: first-fit fails, and the canonical choice of left 0 needs the
        // whole dense graph (9 million comparisons without a limit).
        let n = 3000;
        let adj: Vec<Vec<usize>> =
            (0..n).map(|l| if l + 1 == n { vec![0] } else { (0..n).collect() }).collect();
        let g = Explicit::singletons(&adj, n);
        let work = Work::new(100_000, None);
        let started = std::time::Instant::now();
        let got = canonical(&g, &g.lefts(), &work);
        assert!(got.is_none(), "stopped without an outcome");
        assert_eq!(work.stopped(), Some(Stop::WorkLimit));
        assert!(work.used() <= 100_000 + 2 * super::BATCH + n as u64, "{}", work.used());
        assert!(started.elapsed().as_secs_f64() < 1.0, "{:?}", started.elapsed());
        // Without the limit the same graph completes: left 0 moves to the last right.
        let small: Vec<Vec<usize>> =
            (0..60).map(|l| if l == 59 { vec![0] } else { (0..60).collect() }).collect();
        let got = solve(&small, 60);
        assert_eq!(got, by_definition(&small, 60));
        assert_eq!((got[0], got[59]), (Some(1), Some(0)));
    }
}
