//! Enum fields of a suite hold values the proto defines: an unknown number (a newer client, a
//! typo in hand-written bytes) is a suite problem with its field path, never read as a default.
use crate::proto::v1::{
    assertion, ArgsMatch, Assertion, MatchMode, Quantifier, ScoreMetric, SequenceMode, Severity,
    TrajectoryMode,
};
use crate::suite::Compiler;

/// Records a problem for every enum field of `a` (at `path`, `assertions[i]`) with a value the
/// proto does not define.
pub fn check(a: &Assertion, path: &str, c: &mut Compiler<'_>) {
    use assertion::Kind as K;
    known::<Severity>(a.severity, "Severity", || format!("{path}.severity"), c);
    match &a.kind {
        Some(K::ToolCallArgs(m)) => {
            let at = format!("{path}.tool_call_args");
            known::<Quantifier>(m.quantifier, "Quantifier", || format!("{at}.quantifier"), c);
            args_match(m.r#match.as_ref(), &at, c);
        }
        Some(K::ToolSequence(m)) => {
            let at = format!("{path}.tool_sequence");
            known::<SequenceMode>(m.mode, "SequenceMode", || format!("{at}.mode"), c);
            for (j, step) in m.steps.iter().enumerate() {
                args_match(step.r#match.as_ref(), &format!("{at}.steps[{j}]"), c);
            }
        }
        Some(K::TrajectoryMatch(m)) => {
            let at = format!("{path}.trajectory_match");
            known::<TrajectoryMode>(m.mode, "TrajectoryMode", || format!("{at}.mode"), c);
            known::<MatchMode>(m.args, "MatchMode", || format!("{at}.args"), c);
            for (k, o) in m.overrides.iter().enumerate() {
                known::<MatchMode>(o.args, "MatchMode", || format!("{at}.overrides[{k}].args"), c);
            }
        }
        Some(K::TrajectoryScore(m)) => {
            let at = format!("{path}.trajectory_score");
            known::<MatchMode>(m.args, "MatchMode", || format!("{at}.args"), c);
            for (k, o) in m.overrides.iter().enumerate() {
                known::<MatchMode>(o.args, "MatchMode", || format!("{at}.overrides[{k}].args"), c);
            }
            known::<ScoreMetric>(m.metric, "ScoreMetric", || format!("{at}.metric"), c);
        }
        _ => {}
    }
}

fn args_match(m: Option<&ArgsMatch>, at: &str, c: &mut Compiler<'_>) {
    if let Some(m) = m {
        known::<MatchMode>(m.mode, "MatchMode", || format!("{at}.match.mode"), c);
    }
}

fn known<E: TryFrom<i32>>(
    value: i32,
    name: &str,
    field: impl FnOnce() -> String,
    c: &mut Compiler<'_>,
) {
    if E::try_from(value).is_err() {
        c.problem(field(), format!("unknown {name} {value}"));
    }
}

#[cfg(test)]
mod tests {
    use crate::limits::Limits;
    use crate::proto::v1::{assertion::Kind, Suite};
    use crate::suite::CompiledSuite;

    fn problems(suite: &Suite) -> Vec<String> {
        match CompiledSuite::compile(suite, &Limits::default()) {
            Err(crate::CoreError::InvalidSuite(p)) => p.iter().map(ToString::to_string).collect(),
            other => panic!("expected an invalid suite, got {other:?}"),
        }
    }

    #[test]
    fn unknown_values_are_rejected_with_their_path() {
        // Valid JSON first (pbjson refuses unknown enum numbers), then out-of-range numbers.
        let mut suite: Suite = serde_json::from_str(
            r#"{"assertions":[
                {"tool_called":{"tool":"a"}},
                {"tool_call_args":{"tool":"a","match":{"args_json":"{}"}}},
                {"tool_sequence":{"steps":[{"tool":"a"},{"tool":"b","match":{"args_json":"{}"}}]}},
                {"trajectory_match":{"reference":[{"name":"a"}],"overrides":[{"tool":"a"}]}}]}"#,
        )
        .expect("decodes");
        suite.assertions[0].severity = 7;
        for a in &mut suite.assertions {
            match a.kind.as_mut().expect("kind") {
                Kind::ToolCallArgs(m) => {
                    m.quantifier = 5;
                    m.r#match.as_mut().expect("match").mode = 99;
                }
                Kind::ToolSequence(m) => {
                    m.mode = 99;
                    m.steps[1].r#match.as_mut().expect("match").mode = 42;
                }
                Kind::TrajectoryMatch(m) => {
                    (m.mode, m.args, m.overrides[0].args) = (9, 8, 77);
                }
                _ => {}
            }
        }
        assert_eq!(
            problems(&suite),
            [
                "assertions[0].severity: unknown Severity 7",
                "assertions[1].tool_call_args.quantifier: unknown Quantifier 5",
                "assertions[1].tool_call_args.match.mode: unknown MatchMode 99",
                "assertions[2].tool_sequence.mode: unknown SequenceMode 99",
                "assertions[2].tool_sequence.steps[1].match.mode: unknown MatchMode 42",
                "assertions[3].trajectory_match.mode: unknown TrajectoryMode 9",
                "assertions[3].trajectory_match.args: unknown MatchMode 8",
                "assertions[3].trajectory_match.overrides[0].args: unknown MatchMode 77",
            ]
        );
        let mut negative: Suite =
            serde_json::from_str(r#"{"assertions":[{"tool_called":{"tool":"a"}}]}"#)
                .expect("decodes");
        negative.assertions[0].severity = -1;
        assert_eq!(problems(&negative), ["assertions[0].severity: unknown Severity -1"]);
    }
}
