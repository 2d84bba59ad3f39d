//! Compiled argument matchers (`ArgsMatch`): modes, ignore paths, defaults, regex (§2, §9.3-9.5).
use std::borrow::Cow;
use std::fmt::Write;

use crate::json::compare::{self, Mode};
use crate::json::path::KeyPath;
use crate::json::tolerance::Tolerance;
use crate::json::{self, Object, ParseError, Value};
use crate::proto::v1::{self as pb, ArgsMatch, MatchMode};
use crate::regex_js::{JsRegex, RegexField};
use crate::suite::Compiler;
use crate::trace::{Args, TraceView};

/// A compiled `ArgsMatch`.
#[derive(Clone, Debug)]
pub enum ArgsMatcher {
    Compare(Comparison),
    Regex {
        regex: JsRegex,
        shown: String,
    },
    /// Any arguments (names only).
    Ignore,
}

/// EXACT / SUBSET / PARTIAL against a prepared expected value.
#[derive(Clone, Debug)]
pub struct Comparison {
    mode: Mode,
    /// Expected, with defaults (EXACT) and ignore paths already applied.
    expected: Value,
    ignore: Vec<KeyPath>,
    defaults: Option<Object>,
    /// Numeric tolerance (§12); `None` compares numbers exactly, on the v1 code path.
    tolerance: Option<Tolerance>,
}

/// How one call relates to a matcher.
#[derive(Debug)]
pub enum CallMatch<'t> {
    Match,
    /// Comparable but different: the count and first difference.
    Mismatch(compare::Diff),
    NotRecorded,
    Invalid(&'t ParseError),
}

impl CallMatch<'_> {
    /// Ranking key for the closest call (§9.7): comparable, then invalid, then not recorded;
    /// then fewest differences.
    pub fn rank(&self) -> (u8, usize) {
        match self {
            CallMatch::Match => (0, 0),
            CallMatch::Mismatch(d) => (0, d.count),
            CallMatch::Invalid(_) => (1, 0),
            CallMatch::NotRecorded => (2, 0),
        }
    }
}

impl ArgsMatcher {
    /// Validates and compiles `m` found at `path`; problems go to `c`.
    pub fn compile(
        m: &ArgsMatch,
        path: &str,
        allow_ignore: bool,
        c: &mut Compiler<'_>,
    ) -> Option<ArgsMatcher> {
        let before = c.problem_count();
        let mode = MatchMode::try_from(m.mode).unwrap_or(MatchMode::Unspecified);
        let unused = |c: &mut Compiler<'_>, field: &str, set: bool, why: &str| {
            if set {
                c.problem(format!("{path}.{field}"), format!("{field} is not used {why}"));
            }
        };
        match mode {
            MatchMode::Ignore => {
                if !allow_ignore {
                    c.problem(
                        format!("{path}.mode"),
                        "MATCH_MODE_IGNORE is only valid for sequence steps and trajectory references",
                    );
                    return None;
                }
                let why = "with MATCH_MODE_IGNORE";
                unused(c, "args_json", !m.args_json.is_empty(), why);
                unused(c, "pattern", !m.pattern.is_empty(), why);
                unused(c, "flags", !m.flags.is_empty(), why);
                unused(c, "ignore", !m.ignore.is_empty(), why);
                unused(c, "defaults_json", !m.defaults_json.is_empty(), why);
                unused(c, "tolerance", m.tolerance.is_some(), why);
                (c.problem_count() == before).then_some(ArgsMatcher::Ignore)
            }
            MatchMode::Regex => {
                let why = "with MATCH_MODE_REGEX";
                unused(c, "args_json", !m.args_json.is_empty(), why);
                let mut regex = None;
                if m.pattern.is_empty() {
                    c.problem(
                        format!("{path}.pattern"),
                        "MATCH_MODE_REGEX needs a non-empty pattern",
                    );
                } else {
                    match JsRegex::compile(&m.pattern, &m.flags, c.limits.max_regex_bytes) {
                        Ok(r) => regex = Some(r),
                        Err(e) => {
                            let field = match e.field {
                                RegexField::Pattern => "pattern",
                                RegexField::Flags => "flags",
                            };
                            c.problem(format!("{path}.{field}"), e.message);
                        }
                    }
                }
                unused(c, "ignore", !m.ignore.is_empty(), why);
                unused(c, "defaults_json", !m.defaults_json.is_empty(), why);
                unused(c, "tolerance", m.tolerance.is_some(), why);
                let regex = regex?;
                (c.problem_count() == before).then(|| ArgsMatcher::Regex {
                    regex,
                    shown: format!("/{}/{}", m.pattern, m.flags),
                })
            }
            MatchMode::Unspecified | MatchMode::Exact | MatchMode::Subset | MatchMode::Partial => {
                let mode = match mode {
                    MatchMode::Subset => Mode::Subset,
                    MatchMode::Partial => Mode::Partial,
                    _ => Mode::Exact,
                };
                let expected = parse_field(&m.args_json, &format!("{path}.args_json"), c);
                if mode == Mode::Subset {
                    if let Some(v) = &expected {
                        if !matches!(v, Value::Object(_)) {
                            c.problem(
                                format!("{path}.args_json"),
                                "MATCH_MODE_SUBSET needs a JSON object",
                            );
                        }
                    }
                }
                let why = "by EXACT, SUBSET or PARTIAL (only by REGEX)";
                unused(c, "pattern", !m.pattern.is_empty(), why);
                unused(c, "flags", !m.flags.is_empty(), why);
                let ignore = compile_paths(&m.ignore, &format!("{path}.ignore"), c);
                let defaults = if m.defaults_json.is_empty() {
                    None
                } else {
                    let field = format!("{path}.defaults_json");
                    match parse_field(&m.defaults_json, &field, c) {
                        Some(Value::Object(o)) => Some(o),
                        Some(_) => {
                            c.problem(field, "defaults_json must be a JSON object");
                            None
                        }
                        None => None,
                    }
                };
                let tolerance = m
                    .tolerance
                    .as_ref()
                    .and_then(|t| compile_tolerance(t, &format!("{path}.tolerance"), c));
                let expected = expected?;
                (c.problem_count() == before).then(|| {
                    ArgsMatcher::Compare(Comparison::new(
                        mode, expected, ignore, defaults, tolerance,
                    ))
                })
            }
        }
    }

    /// Matches call `i` of `t` (0-based).
    pub fn check<'t>(&self, t: &'t TraceView<'_>, i: usize) -> CallMatch<'t> {
        self.check_known(t, i, false)
    }

    /// [`check`](Self::check) for a call that [`is_match`](Self::is_match) rejected (the
    /// closest-call candidates): the same result, without matching it again.
    pub fn check_failing<'t>(&self, t: &'t TraceView<'_>, i: usize) -> CallMatch<'t> {
        self.check_known(t, i, true)
    }

    fn check_known<'t>(&self, t: &'t TraceView<'_>, i: usize, failing: bool) -> CallMatch<'t> {
        match self {
            ArgsMatcher::Ignore => CallMatch::Match,
            ArgsMatcher::Compare(cmp) => {
                // Straight from the text while no other matcher needed the parsed value: only
                // the values a reason shows are parsed.
                if t.parsed_args(i).is_none() && cmp.on_text() {
                    if let Some((text, start)) = t.valid_args_text(i) {
                        if !failing
                            && json::text::matches_valid(&cmp.expected, text, start, cmp.mode)
                        {
                            return CallMatch::Match;
                        }
                        if let Some(d) = json::text::diff_valid(
                            &cmp.expected,
                            text,
                            start,
                            cmp.mode,
                            t.max_depth(),
                        ) {
                            return CallMatch::Mismatch(d);
                        }
                    }
                }
                match t.args(i) {
                    Args::NotRecorded => CallMatch::NotRecorded,
                    Args::Invalid(e) => CallMatch::Invalid(e),
                    Args::Parsed(v) => cmp.check(v),
                }
            }
            ArgsMatcher::Regex { regex, shown } => match t.args(i) {
                Args::NotRecorded => CallMatch::NotRecorded,
                Args::Invalid(e) => CallMatch::Invalid(e),
                Args::Parsed(_) => {
                    let text = t.canonical(i).unwrap_or_default();
                    if regex.is_match(text) {
                        CallMatch::Match
                    } else {
                        CallMatch::Mismatch(compare::Diff {
                            count: 1,
                            first: Some(format!("{shown} does not match {}", shorten(text))),
                        })
                    }
                }
            },
        }
    }

    /// `self.check(t, i).rank()`, computed from the argument text when it can be (no parse,
    /// no reason built): for ranking closest-call candidates before describing the winner.
    pub fn rank(&self, t: &TraceView<'_>, i: usize) -> (u8, usize) {
        if let ArgsMatcher::Compare(cmp) = self {
            if t.parsed_args(i).is_none() && cmp.on_text() {
                if t.calls()[i].arguments_json.is_none() {
                    return CallMatch::NotRecorded.rank();
                }
                if let Some((text, start)) = t.valid_args_text(i) {
                    if let Some(n) =
                        json::text::diff_count_valid(&cmp.expected, text, start, cmp.mode)
                    {
                        return (0, n);
                    }
                }
            }
        }
        self.check(t, i).rank()
    }

    /// The closest of `candidates` by §9.7's ranking (earliest on ties); `None` without
    /// candidates or once the work meter says stop (one unit per candidate ranked).
    pub fn closest_index(
        &self,
        t: &TraceView<'_>,
        candidates: impl IntoIterator<Item = usize>,
    ) -> Option<usize> {
        let mut best: Option<(usize, (u8, usize))> = None;
        for i in candidates {
            if !t.work().spend(1) {
                return None;
            }
            let rank = self.rank(t, i);
            if best.is_none_or(|(_, b)| rank < b) {
                best = Some((i, rank));
            }
        }
        best.map(|(i, _)| i)
    }

    /// `closest is call N: <first difference>` for the closest of `candidates`, for the reason
    /// of a step or reference call that failed on its arguments; `None` when this matcher
    /// ignores arguments or no candidate is left.
    pub fn closest_reason(
        &self,
        t: &TraceView<'_>,
        candidates: impl IntoIterator<Item = usize>,
    ) -> Option<String> {
        if matches!(self, ArgsMatcher::Ignore) {
            return None;
        }
        let i = self.closest_index(t, candidates)?;
        Some(format!("closest is {}", describe(&self.check_failing(t, i), t.pos(i))))
    }

    /// True when call `i` matches (no reason built).
    pub fn is_match(&self, t: &TraceView<'_>, i: usize) -> bool {
        match self {
            ArgsMatcher::Ignore => true,
            ArgsMatcher::Compare(cmp) => {
                // Straight from the text while no other matcher needed the parsed value.
                if t.parsed_args(i).is_none() && cmp.on_text() {
                    if let Some(m) = cmp.match_validating(t, i) {
                        return m;
                    }
                    if let Some((text, start)) = t.valid_args_text(i) {
                        return json::text::matches_valid(&cmp.expected, text, start, cmp.mode);
                    }
                }
                match t.args(i) {
                    Args::Parsed(v) => cmp.is_match(v),
                    _ => false,
                }
            }
            ArgsMatcher::Regex { regex, .. } => t.canonical(i).is_some_and(|s| regex.is_match(s)),
        }
    }
}

impl Comparison {
    /// Prepares the expected side: EXACT defaults fill it too (§9.3), then ignore paths apply.
    pub fn new(
        mode: Mode,
        mut expected: Value,
        ignore: Vec<KeyPath>,
        defaults: Option<Object>,
        tolerance: Option<Tolerance>,
    ) -> Self {
        if mode == Mode::Exact {
            if let (Some(d), Value::Object(o)) = (&defaults, &mut expected) {
                fill_defaults(o, d);
            }
        }
        for p in &ignore {
            p.remove_from(&mut expected);
        }
        Comparison { mode, expected, ignore, defaults, tolerance }
    }

    /// SUBSET / PARTIAL of an object on call `i`'s text not validated yet: validates it (for
    /// every later use) and locates the expected top-level keys in the same pass, instead of
    /// validating and then walking the object again. `None` when this does not apply or the
    /// text is absent or invalid.
    fn match_validating(&self, t: &TraceView<'_>, i: usize) -> Option<bool> {
        const INLINE: usize = 8;
        let (Value::Object(eo), Mode::Subset | Mode::Partial) = (&self.expected, self.mode) else {
            return None;
        };
        if eo.len() > INLINE {
            return None;
        }
        let mut inline = [usize::MAX; INLINE];
        let last = &mut inline[..eo.len()];
        let mut object = None;
        let (text, _) = t.valid_args_text_with(i, |text| {
            let (start, is_object) = json::text::validate_indexed(text, t.max_depth(), eo, last)?;
            object = Some(is_object);
            Some(start)
        })?;
        // `None`: validated before (by another matcher or the ranking); the caller walks it.
        let is_object = object?;
        Some(is_object && json::text::matches_indexed(eo, text, last, self.mode))
    }

    pub fn is_match(&self, actual: &Value) -> bool {
        self.matches_prepared(&self.prepare(actual))
    }

    /// Whether `actual`, with defaults and ignore paths already applied, matches.
    fn matches_prepared(&self, actual: &Value) -> bool {
        match &self.tolerance {
            None => compare::matches(&self.expected, actual, self.mode),
            Some(t) => compare::matches_by(&self.expected, actual, self.mode, &t.root()),
        }
    }

    /// True when the argument text can be compared directly (`json::text`): no ignore paths
    /// or defaults rewrite the actual side first, and numbers compare exactly (the text paths
    /// decide number equality on the decimal text, which a tolerance must not short-circuit).
    pub fn on_text(&self) -> bool {
        self.ignore.is_empty() && self.defaults.is_none() && self.tolerance.is_none()
    }

    pub fn check(&self, actual: &Value) -> CallMatch<'static> {
        let actual = self.prepare(actual);
        if self.matches_prepared(&actual) {
            return CallMatch::Match;
        }
        let d = match &self.tolerance {
            None => compare::diff(&self.expected, &actual, self.mode),
            Some(t) => compare::diff_by(&self.expected, &actual, self.mode, &t.root()),
        };
        CallMatch::Mismatch(d)
    }

    /// Applies defaults then ignore paths to the actual side, copying only when they change it.
    fn prepare<'v>(&self, actual: &'v Value) -> Cow<'v, Value> {
        let mut out = Cow::Borrowed(actual);
        if let (Some(d), Value::Object(o)) = (&self.defaults, actual) {
            if d.iter().any(|(k, _)| !o.contains_key(k)) {
                if let Value::Object(o) = out.to_mut() {
                    fill_defaults(o, d);
                }
            }
        }
        for p in &self.ignore {
            if p.present_in(&out) {
                p.remove_from(out.to_mut());
            }
        }
        out
    }
}

fn fill_defaults(o: &mut Object, defaults: &Object) {
    for (k, v) in defaults.iter() {
        if !o.contains_key(k) {
            o.insert(k.clone(), v.clone());
        }
    }
}

/// Parses a JSON text field of a suite (`""` is `{}`); a problem names the parser position.
pub fn parse_field(text: &str, field: &str, c: &mut Compiler<'_>) -> Option<Value> {
    if text.len() > c.limits.max_argument_bytes {
        c.problem(
            field,
            format!("{} bytes; the limit is {}", text.len(), c.limits.max_argument_bytes),
        );
        return None;
    }
    if text.is_empty() {
        return Some(Value::Object(Object::new()));
    }
    match json::parse(text, c.limits.max_json_depth) {
        Ok(v) => Some(v),
        Err(e) => {
            c.problem(field, format!("invalid JSON: {e}"));
            None
        }
    }
}

/// Validates a `Tolerance` found at `field` (`abs`, `rel` not negative or NaN; `paths` as
/// ignore paths); `None` when it is invalid (problems go to `c`) or tolerates nothing.
pub fn compile_tolerance(
    t: &pb::Tolerance,
    field: &str,
    c: &mut Compiler<'_>,
) -> Option<Tolerance> {
    let before = c.problem_count();
    for (name, value) in [("abs", t.abs), ("rel", t.rel)] {
        if value.is_nan() || value < 0.0 {
            c.problem(format!("{field}.{name}"), format!("{name} must be >= 0, got {value}"));
        }
    }
    let paths = compile_paths(&t.paths, &format!("{field}.paths"), c);
    if c.problem_count() != before {
        return None;
    }
    Tolerance::new(t.abs, t.rel, paths)
}

/// Compiles ignore paths found at `field` (`field[i]` names each problem).
pub fn compile_paths(paths: &[String], field: &str, c: &mut Compiler<'_>) -> Vec<KeyPath> {
    let mut out = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        match KeyPath::parse(p) {
            Ok(k) => out.push(k),
            Err(e) => c.problem(format!("{field}[{i}]"), e),
        }
    }
    out
}

/// Names call `position` (1-based) and says why it did not match, for a reason sentence:
/// `call 4: $.amount_cents expected 5000, got 500`.
pub fn describe(m: &CallMatch<'_>, position: u32) -> String {
    let mut s = format!("call {position}");
    let _ = match m {
        CallMatch::Match => write!(s, ", which matches"),
        CallMatch::Mismatch(d) => {
            write!(s, ": {}", d.first.as_deref().unwrap_or("the arguments differ"))
        }
        CallMatch::NotRecorded => write!(s, ", whose arguments were not recorded"),
        CallMatch::Invalid(e) => write!(s, ", whose arguments are not valid JSON ({e})"),
    };
    s
}

fn shorten(text: &str) -> String {
    const MAX: usize = 80;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut cut = MAX;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}
