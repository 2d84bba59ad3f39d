//! Numeric tolerance (SPEC §12): two numbers compare equal when they are equal as exact
//! decimals or within `abs` / `rel` of each other in float64, optionally only under some key
//! paths. The comparison walks of `compare` take it as their [`NumberRule`].
use super::compare::NumberRule;
use super::path::KeyPath;
use super::value::{Number, Str, Value};

/// A validated tolerance that tolerates something (`abs > 0` or `rel > 0`).
#[derive(Clone, Debug)]
pub struct Tolerance {
    abs: f64,
    rel: f64,
    /// Where it applies (and everything under them); empty = every number.
    paths: Vec<KeyPath>,
}

impl Tolerance {
    /// `None` when it tolerates nothing (`abs = rel = 0`): comparison then stays exact and
    /// takes the v1 code path. `abs` and `rel` are finite or infinite, never negative or NaN
    /// (validated by the caller).
    pub fn new(abs: f64, rel: f64, paths: Vec<KeyPath>) -> Option<Self> {
        (abs > 0.0 || rel > 0.0).then_some(Tolerance { abs, rel, paths })
    }

    /// Whether `a` and `b` compare equal under this tolerance: equal decimals, or nearest
    /// float64 values within `max(abs, rel * max(|fa|, |fb|))`. A number too large for float64
    /// (infinite) is never within tolerance of another.
    pub fn within(&self, a: &Number, b: &Number) -> bool {
        if a == b {
            return true;
        }
        let (fa, fb) = (a.as_f64(), b.as_f64());
        if !fa.is_finite() || !fb.is_finite() {
            return false;
        }
        (fa - fb).abs() <= self.abs.max(self.rel * fa.abs().max(fb.abs()))
    }

    /// The rule at the root of the compared values.
    pub fn root(&self) -> Within<'_> {
        let at = if self.paths.is_empty() {
            At::Everywhere
        } else {
            let cursors = (0..self.paths.len())
                .map(|path| Cursor { path, matched: 0, element_next: false })
                .collect();
            At::Partial(cursors)
        };
        Within { tol: self, at }
    }
}

/// The tolerance where a comparison walk stands: everywhere (under a path), nowhere (off
/// every path), or partway along some paths.
#[derive(Clone, Debug)]
pub struct Within<'t> {
    tol: &'t Tolerance,
    at: At,
}

#[derive(Clone, Debug)]
enum At {
    Everywhere,
    Nowhere,
    Partial(Vec<Cursor>),
}

/// How much of one path the walk has followed.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    path: usize,
    /// Segments matched so far.
    matched: usize,
    /// The last matched segment was `key[]`: the next step must be an array element.
    element_next: bool,
}

impl Within<'_> {
    fn step(&self, next: impl Fn(Cursor) -> Option<Result<Cursor, ()>>) -> Self {
        let at = match &self.at {
            At::Everywhere => At::Everywhere,
            At::Nowhere => At::Nowhere,
            At::Partial(cursors) => {
                let mut live = Vec::new();
                let mut reached = false;
                for &c in cursors {
                    match next(c) {
                        Some(Ok(c)) => live.push(c),
                        // A path's last key was reached: everything below is tolerant.
                        Some(Err(())) => reached = true,
                        None => {}
                    }
                }
                if reached {
                    At::Everywhere
                } else if live.is_empty() {
                    At::Nowhere
                } else {
                    At::Partial(live)
                }
            }
        };
        Within { tol: self.tol, at }
    }
}

impl NumberRule for Within<'_> {
    fn key(&self, k: &Str) -> Self {
        self.step(|c| {
            if c.element_next {
                return None;
            }
            let path = &self.tol.paths[c.path];
            let (key, each) = path.segment(c.matched)?;
            if key != k {
                return None;
            }
            if c.matched + 1 == path.depth() {
                return Some(Err(()));
            }
            Some(Ok(Cursor { path: c.path, matched: c.matched + 1, element_next: each }))
        })
    }

    fn element(&self) -> Self {
        self.step(|c| c.element_next.then_some(Ok(Cursor { element_next: false, ..c })))
    }

    fn equal(&self, e: &Value, a: &Value) -> bool {
        match (&self.at, e, a) {
            (At::Nowhere, ..) => e == a,
            (At::Everywhere, Value::Number(x), Value::Number(y)) => self.tol.within(x, y),
            (_, Value::Array(x), Value::Array(y)) => {
                let inner = self.element();
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| inner.equal(x, y))
            }
            (_, Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter().all(|(k, xv)| y.get(k).is_some_and(|yv| self.key(k).equal(xv, yv)))
            }
            _ => e == a,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tolerance;
    use crate::json::compare::{diff_by, matches_by, Mode};
    use crate::json::path::KeyPath;
    use crate::json::{parse, Value};

    fn v(t: &str) -> Value {
        parse(t, 128).unwrap()
    }

    fn tol(abs: f64, rel: f64, paths: &[&str]) -> Tolerance {
        let paths = paths.iter().map(|p| KeyPath::parse(p).unwrap()).collect();
        Tolerance::new(abs, rel, paths).unwrap()
    }

    fn eq(t: &Tolerance, e: &str, a: &str, mode: Mode) -> bool {
        matches_by(&v(e), &v(a), mode, &t.root())
    }

    #[test]
    fn absolute_and_relative_bounds() {
        let t = tol(0.001, 0.0, &[]);
        assert!(eq(&t, "52.52", "52.5201", Mode::Exact));
        assert!(!eq(&t, "52.52", "52.522", Mode::Exact));
        let t = tol(0.0, 0.01, &[]);
        assert!(eq(&t, "1000", "1009", Mode::Exact));
        assert!(eq(&t, "-1000", "-1010", Mode::Exact));
        assert!(!eq(&t, "1000", "1011", Mode::Exact));
        assert!(!eq(&t, "0", "0.000001", Mode::Exact), "rel alone never tolerates around 0");
        assert!(Tolerance::new(0.0, 0.0, vec![]).is_none(), "zero tolerance is exact comparison");
    }

    #[test]
    fn overflow_and_non_numbers_never_tolerate() {
        let t = tol(f64::INFINITY, 1.0, &[]);
        assert!(!eq(&t, "1e400", "1e401", Mode::Exact));
        assert!(eq(&t, "1e400", "10e399", Mode::Exact), "equal decimals stay equal");
        assert!(!eq(&t, r#"{"n":true}"#, r#"{"n":1}"#, Mode::Subset));
        assert!(!eq(&t, r#"{"n":"1"}"#, r#"{"n":1}"#, Mode::Subset));
        assert!(!eq(&t, r#"{"n":null}"#, r#"{"n":0}"#, Mode::Subset));
    }

    #[test]
    fn paths_limit_where_it_applies() {
        let t = tol(0.5, 0.0, &["price", "items[].qty"]);
        let expected = r#"{"price":{"net":10,"gross":12},"items":[{"qty":1,"id":7}],"n":1}"#;
        let close = r#"{"price":{"net":10.4,"gross":11.6},"items":[{"qty":1.2,"id":7}],"n":1}"#;
        assert!(eq(&t, expected, close, Mode::Exact));
        let off_path = close.replace(r#""id":7"#, r#""id":7.1"#);
        assert!(!eq(&t, expected, &off_path, Mode::Exact));
        let off_path = close.replace(r#""n":1"#, r#""n":1.1"#);
        assert!(!eq(&t, expected, &off_path, Mode::Partial));
        // `items[].qty` needs the array step: a plain object under items is not on the path.
        let t = tol(0.5, 0.0, &["items[].qty"]);
        assert!(!eq(&t, r#"{"items":{"qty":1}}"#, r#"{"items":{"qty":1.2}}"#, Mode::Exact));
        assert!(eq(&t, r#"{"items":[{"qty":1}]}"#, r#"{"items":[{"qty":1.2}]}"#, Mode::Partial));
    }

    #[test]
    fn differences_count_only_numbers_outside_the_tolerance() {
        let t = tol(0.001, 0.0, &[]);
        let d = diff_by(
            &v(r#"{"lat":52.52,"lon":13.405,"z":1}"#),
            &v(r#"{"lat":52.5201,"lon":13.5,"z":2}"#),
            Mode::Exact,
            &t.root(),
        );
        assert_eq!(d.count, 2);
        assert_eq!(d.first.as_deref(), Some("$.lon expected 13.405, got 13.5"));
    }
}
