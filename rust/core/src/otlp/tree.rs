//! The span tree of one trace group: parents, and the agent path each span runs under.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::record::SpanRecord;

/// A span's key: (trace id, span id). Span ids are unique per trace, not across traces.
pub(crate) type SpanKey = (String, String);

/// Python's `str.isspace` (Unicode white space, plus the ASCII separators 0x1C-0x1F).
pub(crate) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The agent a span invokes, or `None` when it is not an agent span (`GenAI` `invoke_agent`,
/// `OpenInference` `AGENT`).
pub(crate) fn agent_name(span: &SpanRecord) -> Option<String> {
    let attrs = &span.attrs;
    if attrs.get_str("gen_ai.operation.name") == Some("invoke_agent")
        || span.name.starts_with("invoke_agent ")
    {
        if let Some(name) = attrs.get("gen_ai.agent.name").and_then(|v| v.nonempty_str()) {
            return Some(name.to_string());
        }
        let rest = span.name.strip_prefix("invoke_agent").unwrap_or(&span.name);
        return Some(rest.trim_matches(py_space).to_string());
    }
    if attrs.get_str("openinference.span.kind") == Some("AGENT") {
        let name = attrs.get("agent.name").and_then(|v| v.nonempty_str());
        return Some(name.unwrap_or(&span.name).to_string());
    }
    None
}

/// Parent links and agent paths of the spans of one group, by span key.
///
/// A parent id that names no span of the group ends the walk up, as does a cycle: every walk
/// is bounded by the span count. A key exported twice is read from its last span.
pub(crate) struct SpanTree {
    parent_of: HashMap<SpanKey, SpanKey>,
    /// Agents: (name, outer agent); chains share their outer part.
    agents: Vec<(String, Option<usize>)>,
    agent_of_key: HashMap<SpanKey, Option<usize>>,
    paths: std::cell::RefCell<HashMap<usize, String>>,
}

impl SpanTree {
    pub(crate) fn new(spans: &[SpanRecord]) -> SpanTree {
        let mut by_key: HashMap<SpanKey, usize> = HashMap::with_capacity(spans.len());
        for (i, s) in spans.iter().enumerate() {
            by_key.insert(s.key(), i);
        }
        let mut parent_of = HashMap::with_capacity(spans.len());
        for (key, &i) in &by_key {
            let s = &spans[i];
            if !s.parent.is_empty() {
                let parent = (s.trace_id.clone(), s.parent.clone());
                if by_key.contains_key(&parent) {
                    parent_of.insert(key.clone(), parent);
                }
            }
        }
        let mut tree = SpanTree {
            parent_of,
            agents: Vec::new(),
            agent_of_key: HashMap::new(),
            paths: std::cell::RefCell::default(),
        };
        for i in 0..spans.len() {
            tree.agent_of(spans, &by_key, i);
        }
        tree
    }

    /// The keys of a span's ancestors in the group, nearest first (a cycle stops the walk).
    pub(crate) fn ancestors(&self, key: &SpanKey) -> Vec<&SpanKey> {
        let mut out: Vec<&SpanKey> = Vec::new();
        let mut seen: HashSet<&SpanKey> = [key].into_iter().collect();
        let mut current = self.parent_of.get(key);
        while let Some(at) = current {
            if !seen.insert(at) {
                break;
            }
            out.push(at);
            current = self.parent_of.get(at);
        }
        out
    }

    /// The agent path of the calls under the span: `""` for the root agent.
    ///
    /// The outermost agent span is the root agent (SPEC §10: `""`); each agent span below it
    /// adds its name; two nested spans of one agent name count once.
    pub(crate) fn agent(&self, key: &SpanKey) -> String {
        let Some(Some(innermost)) = self.agent_of_key.get(key).copied() else {
            return String::new();
        };
        if let Some(path) = self.paths.borrow().get(&innermost) {
            return path.clone();
        }
        let mut names = Vec::new();
        let mut node = Some(innermost);
        while let Some(n) = node {
            names.push(self.agents[n].0.as_str());
            node = self.agents[n].1;
        }
        names.pop();
        names.reverse();
        let path = names.join("/");
        self.paths.borrow_mut().insert(innermost, path.clone());
        path
    }

    fn agent_of(&mut self, spans: &[SpanRecord], by_key: &HashMap<SpanKey, usize>, start: usize) {
        let mut pending: Vec<usize> = Vec::new();
        let mut seen: HashSet<SpanKey> = HashSet::new();
        let mut current = Some(start);
        while let Some(at) = current {
            let key = spans[at].key();
            if self.agent_of_key.contains_key(&key) || seen.contains(&key) {
                break;
            }
            pending.push(at);
            current = self.parent_of.get(&key).map(|p| by_key[p]);
            seen.insert(key);
        }
        let mut agent: Option<usize> = match current {
            Some(at) => self.agent_of_key.get(&spans[at].key()).copied().flatten(),
            None => None,
        };
        for &item in pending.iter().rev() {
            if let Some(name) = agent_name(&spans[item]) {
                if agent.is_none_or(|a| self.agents[a].0 != name) {
                    self.agents.push((name, agent));
                    agent = Some(self.agents.len() - 1);
                }
            }
            self.agent_of_key.insert(spans[item].key(), agent);
        }
    }
}
