//! Tool-name globs (SPEC §9.8): `*`, `?`, classes with ranges and negation, `\` escapes.

/// A compiled glob (or exact name), matched against the whole tool name.
#[derive(Clone, Debug)]
pub struct Glob {
    tokens: Vec<Token>,
    ignore_case: bool,
    /// Set when the pattern has no wildcard: a plain string comparison suffices.
    literal: Option<String>,
    /// Case-sensitive `lit*`, `*lit` or `*lit*` (no other wildcard): a prefix, suffix or
    /// substring test gives the same answer as the general matcher.
    affix: Option<(Affix, String)>,
}

#[derive(Clone, Copy, Debug)]
enum Affix {
    Prefix,
    Suffix,
    Contains,
}

/// The affix shape of `tokens`, if it has one.
fn affix(tokens: &[Token]) -> Option<(Affix, String)> {
    let star = |t: Option<&Token>| matches!(t, Some(Token::Star));
    let (lead, trail) = (star(tokens.first()), star(tokens.last()));
    let (kind, inner) = match (lead, trail) {
        (false, true) => (Affix::Prefix, &tokens[..tokens.len() - 1]),
        (true, false) => (Affix::Suffix, &tokens[1..]),
        (true, true) if tokens.len() >= 2 => (Affix::Contains, &tokens[1..tokens.len() - 1]),
        _ => return None,
    };
    let lit: Option<String> =
        inner.iter().map(|t| if let Token::Char(c) = t { Some(*c) } else { None }).collect();
    Some((kind, lit?))
}

#[derive(Clone, Debug)]
enum Token {
    Char(char),
    Any,
    Star,
    Class { negated: bool, ranges: Vec<(char, char)> },
}

impl Glob {
    /// Compiles a glob pattern; an unterminated class or trailing `\` is an error message.
    pub fn new(pattern: &str, ignore_case: bool) -> Result<Glob, String> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut tokens = Vec::with_capacity(chars.len());
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '*' => {
                    // Consecutive stars are one star.
                    if !matches!(tokens.last(), Some(Token::Star)) {
                        tokens.push(Token::Star);
                    }
                }
                '?' => tokens.push(Token::Any),
                '\\' => {
                    i += 1;
                    let Some(&c) = chars.get(i) else {
                        return Err("the glob ends with an unfinished escape '\\'".to_owned());
                    };
                    tokens.push(Token::Char(c));
                }
                '[' => {
                    let (token, next) = parse_class(&chars, i)?;
                    tokens.push(token);
                    i = next;
                    continue;
                }
                c => tokens.push(Token::Char(c)),
            }
            i += 1;
        }
        let literal = if tokens.iter().all(|t| matches!(t, Token::Char(_))) {
            Some(
                tokens
                    .iter()
                    .filter_map(|t| if let Token::Char(c) = t { Some(*c) } else { None })
                    .collect(),
            )
        } else {
            None
        };
        let affix = if ignore_case { None } else { affix(&tokens) };
        Ok(Glob { tokens, ignore_case, literal, affix })
    }

    /// An exact name (no wildcard meaning), optionally case-insensitive.
    pub fn exact(name: &str, ignore_case: bool) -> Glob {
        Glob {
            tokens: name.chars().map(Token::Char).collect(),
            ignore_case,
            literal: Some(name.to_owned()),
            affix: None,
        }
    }

    /// True when the glob matches all of `name`.
    pub fn is_match(&self, name: &str) -> bool {
        if let Some(lit) = &self.literal {
            if !self.ignore_case {
                return lit == name;
            }
        }
        if let Some((kind, lit)) = &self.affix {
            return match kind {
                Affix::Prefix => name.starts_with(lit.as_str()),
                Affix::Suffix => name.ends_with(lit.as_str()),
                Affix::Contains => name.contains(lit.as_str()),
            };
        }
        self.match_str(name)
    }

    /// Star-backtracking matcher over byte offsets: O(len(name) * len(tokens)) worst case,
    /// no recursion and no allocation.
    fn match_str(&self, name: &str) -> bool {
        let t = &self.tokens;
        let (mut ti, mut ni) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while let Some(c) = name[ni..].chars().next() {
            if ti < t.len() {
                match &t[ti] {
                    Token::Star => {
                        star = Some((ti, ni));
                        ti += 1;
                        continue;
                    }
                    tok if self.token_matches(tok, c) => {
                        ti += 1;
                        ni += c.len_utf8();
                        continue;
                    }
                    _ => {}
                }
            }
            let Some((st, sn)) = star else { return false };
            // Let the last star swallow one more character and retry after it.
            let skipped = name[sn..].chars().next().map_or(1, char::len_utf8);
            ti = st + 1;
            ni = sn + skipped;
            star = Some((st, ni));
        }
        t[ti..].iter().all(|tok| matches!(tok, Token::Star))
    }

    fn token_matches(&self, tok: &Token, c: char) -> bool {
        match tok {
            Token::Any => true,
            Token::Star => false,
            Token::Char(p) => *p == c || (self.ignore_case && fold_eq(*p, c)),
            Token::Class { negated, ranges } => {
                let hit = |c: char| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
                let found = hit(c)
                    || (self.ignore_case
                        && (c.to_lowercase().any(hit) || c.to_uppercase().any(hit)));
                found != *negated
            }
        }
    }
}

fn fold_eq(a: char, b: char) -> bool {
    a.to_lowercase().eq(b.to_lowercase())
}

/// Parses `[...]` starting at `chars[start] == '['`; returns the token and the index after `]`.
fn parse_class(chars: &[char], start: usize) -> Result<(Token, usize), String> {
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err("unterminated character class '[' in the glob".to_owned());
        };
        if c == ']' && !first {
            return Ok((Token::Class { negated, ranges }, i + 1));
        }
        first = false;
        let lo = if c == '\\' {
            i += 1;
            *chars.get(i).ok_or("unterminated character class '[' in the glob")?
        } else {
            c
        };
        i += 1;
        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|&n| n != ']') {
            let mut hi = chars[i + 1];
            i += 2;
            if hi == '\\' {
                hi = *chars.get(i).ok_or("unterminated character class '[' in the glob")?;
                i += 1;
            }
            if hi < lo {
                return Err(format!("reversed range '{lo}-{hi}' in the glob"));
            }
            ranges.push((lo, hi));
        } else {
            ranges.push((lo, lo));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Glob;

    fn m(p: &str, n: &str) -> bool {
        Glob::new(p, false).unwrap().is_match(n)
    }

    #[test]
    fn affix_shapes_agree_with_the_general_matcher() {
        let names =
            ["", "a", "ab", "ba", "aba", "get_", "get_order", "xget_", "é", "aé", "éa", "a*"];
        for p in ["a*", "*a", "*ab*", "**", "*", "get_*", "*_", "*é*", "é*", "a**", "**a", "a\\**"]
        {
            let g = Glob::new(p, false).expect("compiles");
            for n in names {
                assert_eq!(g.is_match(n), g.match_str(n), "{p} {n}");
            }
        }
    }

    #[test]
    fn wildcards() {
        assert!(m("search_*", "search_orders"));
        assert!(m("mcp.*", "mcp."));
        assert!(!m("search*", "my_search_tool"));
        assert!(m("get_v?", "get_v1"));
        assert!(!m("get_v?", "get_v12"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
    }

    #[test]
    fn classes() {
        assert!(m("tool_[abc]", "tool_b"));
        assert!(!m("tool_[abc]", "tool_d"));
        assert!(m("v[0-9]", "v7"));
        assert!(m("a[!x]", "ab"));
        assert!(!m("a[^x]", "ax"));
        assert!(m("[]]", "]"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(Glob::new("tool_[ab", false).is_err());
    }

    #[test]
    fn ignore_case() {
        assert!(Glob::new("search_*", true).unwrap().is_match("SEARCH_b"));
        assert!(Glob::exact("reply", true).is_match("REPLY"));
        assert!(!Glob::exact("search_*", false).is_match("search_a"));
    }
}
