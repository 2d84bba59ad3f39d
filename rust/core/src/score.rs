//! Scores (SPEC §13): the weighted mean of results and the 4-decimal rounding of Python's
//! `round(x, 4)`.

/// Rounds to 4 decimal places as Python's `round(x, 4)`: the nearest multiple of 0.0001 to the
/// exact binary value of `x`, ties to even, then the nearest float64 of that decimal. Rust's
/// `{:.4}` formats the exact binary value with ties to even, so formatting and parsing back is
/// that rule; non-finite values are returned as they are.
pub fn round4(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // Fast path (every grading rounds its mean score): k = x * 10^4 rounded is the exact
    // decimal rounding unless the product lies within its own rounding error of a tie, and
    // k / 10^4 in float64 is the nearest float64 of the decimal, as parsing it would give.
    let y = x * 10_000.0;
    let fraction = (y - y.trunc()).abs();
    if y.abs() < 1e15 && (fraction - 0.5).abs() > y.abs() * 4.0 * f64::EPSILON + f64::MIN_POSITIVE {
        return y.round() / 10_000.0;
    }
    round4_exact(x)
}

/// `round4` by formatting: `{:.4}` rounds the exact binary value, ties to even.
fn round4_exact(x: f64) -> f64 {
    format!("{x:.4}").parse().unwrap_or(x)
}

/// One result as the summary counts it.
#[derive(Clone, Copy, Debug)]
pub struct Counted {
    pub pass: bool,
    pub soft: bool,
    pub score: f64,
    pub weight: f64,
    pub report_only: bool,
}

/// Verdict (true = PASS), v1 score, soft failures and mean score of a grading (§4, §12, §13):
/// `report_only` results count in none; with no counted result every figure is a pass.
pub fn summarize(results: impl Iterator<Item = Counted>) -> (bool, f64, u32, f64) {
    let (mut n, mut passing, mut hard_failed, mut soft) = (0usize, 0usize, false, 0u32);
    let (mut weighted, mut weights) = (0.0f64, 0.0f64);
    for r in results.filter(|r| !r.report_only) {
        n += 1;
        if r.pass {
            passing += 1;
        } else if r.soft {
            soft += 1;
        } else {
            hard_failed = true;
        }
        weighted += r.weight * r.score;
        weights += r.weight;
    }
    let score = if n == 0 { 1.0 } else { passing as f64 / n as f64 };
    let mean = if weights == 0.0 { 1.0 } else { round4(weighted / weights) };
    (!hard_failed, score, soft, mean)
}

#[cfg(test)]
mod tests {
    use super::{round4, round4_exact, summarize, Counted};

    #[test]
    fn fast_rounding_equals_the_exact_rule() {
        // Fractions a/b as results give them, values next to ties, and a seeded spread.
        let mut xs = vec![0.0, 1.0, -0.0, 0.5, 1e-9, 123_456.789_05, -2.5e-5];
        for b in 1..=200u32 {
            for a in 0..=b {
                xs.push(f64::from(a) / f64::from(b));
            }
        }
        for k in 0..20_000u32 {
            let tie = (f64::from(k) + 0.5) / 10_000.0;
            xs.extend([tie, f64::from_bits(tie.to_bits() + 1), f64::from_bits(tie.to_bits() - 1)]);
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            xs.push((state >> 11) as f64 / (1u64 << 53) as f64);
        }
        for x in xs {
            assert_eq!(round4(x).to_bits(), round4_exact(x).to_bits(), "{x:e}");
        }
    }

    #[test]
    fn rounds_like_python_round_4() {
        // Values and Python's round(x, 4) for each (ties only on exact binary values).
        for (x, want) in [
            (2.0 / 3.0, 0.6667),
            (0.4, 0.4),
            (0.03125, 0.0312), // exact tie: to even
            (0.09375, 0.0938), // exact tie: to even
            (0.00005, 0.0001), // 5.000000000000000409e-05: above the tie
            (0.00015, 0.0001), // 1.499999999999999868e-04: below the tie
            (1.0 / 3.0, 0.3333),
            (0.123_449_999_999_999_99, 0.1234),
            (1.0, 1.0),
            (0.0, 0.0),
        ] {
            assert_eq!(round4(x).to_bits(), f64::to_bits(want), "round4({x:e})");
        }
    }

    fn r(pass: bool, score: f64, weight: f64, report_only: bool) -> Counted {
        Counted { pass, soft: false, score, weight, report_only }
    }

    #[test]
    fn weights_and_report_only() {
        // weight 3 on a pass, 1 on a fail: mean 0.75; v1 score 0.5.
        let got = summarize([r(true, 1.0, 3.0, false), r(false, 0.0, 1.0, false)].into_iter());
        assert_eq!(got, (false, 0.5, 0, 0.75));
        // Weight 0 still counts in the verdict and v1 score; weights summing to 0 give 1.0.
        let got = summarize([r(false, 0.0, 0.0, false)].into_iter());
        assert_eq!(got, (false, 0.0, 0, 1.0));
        // report_only counts in nothing; all report_only is a pass with 1.0 and 1.0.
        let got = summarize([r(false, 0.0, 1.0, true), r(true, 0.6667, 1.0, false)].into_iter());
        assert_eq!(got, (true, 1.0, 0, 0.6667));
        assert_eq!(summarize([r(false, 0.0, 1.0, true)].into_iter()), (true, 1.0, 0, 1.0));
        // A soft failure is counted, not a verdict failure.
        let soft = Counted { soft: true, ..r(false, 0.0, 1.0, false) };
        assert_eq!(summarize([soft, r(true, 1.0, 1.0, false)].into_iter()), (true, 0.5, 1, 0.5));
    }
}
