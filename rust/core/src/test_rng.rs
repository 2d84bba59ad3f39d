//! The random inputs of the core's unit tests: one small deterministic generator (splitmix64,
//! no dependency), so a failing seed reproduces everywhere.

pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("below n")
    }

    /// True with probability `percent`%.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Random JSON-like texts drawn from a test's vocabulary (valid and nearly valid tokens), for
/// the differential tests of the JSON readers. Each test keeps its own vocabulary; the shape
/// of the texts and the order the generator is consumed in are the same for all.
pub(crate) struct JsonVocab<'a> {
    /// Whitespace between tokens (repeat "" to make it rarer).
    pub ws: &'a [&'a str],
    pub numbers: &'a [&'a str],
    pub strings: &'a [&'a str],
    pub keys: &'a [&'a str],
    /// The bare words: literals and near-literals.
    pub words: &'a [&'a str],
    /// Past this depth only scalars are generated.
    pub leaf_depth: usize,
}

impl JsonVocab<'_> {
    /// One text: a scalar, or an object or array of up to three generated texts.
    pub fn text(&self, r: &mut Rng, depth: usize) -> String {
        let ws = |r: &mut Rng| r.pick(self.ws).to_owned();
        match r.below(if depth > self.leaf_depth { 4 } else { 7 }) {
            0 | 3 => r.pick(self.numbers).to_owned(),
            1 => r.pick(self.strings).to_owned(),
            2 => r.pick(self.words).to_owned(),
            4 | 5 => {
                let items: Vec<String> = (0..r.below(4))
                    .map(|_| {
                        let k = r.pick(self.keys);
                        format!("{}{k}{}:{}{}", ws(r), ws(r), ws(r), self.text(r, depth + 1))
                    })
                    .collect();
                format!("{{{}{}}}", items.join(","), ws(r))
            }
            _ => {
                let items: Vec<String> = (0..r.below(4))
                    .map(|_| format!("{}{}{}", ws(r), self.text(r, depth + 1), ws(r)))
                    .collect();
                format!("[{}]", items.join(","))
            }
        }
    }
}

/// `t` damaged at random, one case in `cases`: cut short, one `junk` piece inserted, or
/// `wrapped`; otherwise (the remaining cases) unchanged.
pub(crate) fn mutate(
    r: &mut Rng,
    t: &str,
    cases: usize,
    junk: &[&str],
    wrapped: impl Fn(&str) -> String,
) -> String {
    let b = t.as_bytes();
    match r.below(cases) {
        0 if !b.is_empty() => String::from_utf8_lossy(&b[..r.below(b.len())]).into_owned(),
        1 => {
            let at = r.below(b.len() + 1);
            let mut s = String::from_utf8_lossy(&b[..at]).into_owned();
            s.push_str(r.pick(junk));
            s.push_str(&String::from_utf8_lossy(&b[at..]));
            s
        }
        2 => wrapped(t),
        _ => t.to_owned(),
    }
}
