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

/// Whether a node's walk up has been made, and the innermost agent it found (`None`: the
/// node runs under no agent).
#[derive(Clone, Copy, PartialEq)]
enum Walked {
    No,
    Under(Option<usize>),
}

impl Walked {
    fn agent(self) -> Option<usize> {
        match self {
            Walked::No => None,
            Walked::Under(agent) => agent,
        }
    }
}

/// Parent links and agent paths of the spans of one group, by span key.
///
/// A parent id that names no span of the group ends the walk up, as does a cycle: every walk
/// is bounded by the span count. A key exported twice is read from its last span (its node).
/// Inside, spans and nodes are indices into the group's spans: a key is cloned twice a span
/// (`keys`, `node_of`), not at every step of every walk.
pub(crate) struct SpanTree {
    /// Each span's key, by its index in the spans given to `new`.
    keys: Vec<SpanKey>,
    /// Each key's node: the index of its last span.
    node_of: HashMap<SpanKey, usize>,
    /// By node: the parent's node, when the parent id names a span of the group.
    parent: Vec<Option<usize>>,
    /// Agents: (name, outer agent); chains share their outer part.
    agents: Vec<(String, Option<usize>)>,
    /// By node: the innermost agent it runs under, once its walk has reached it.
    agent_of: Vec<Walked>,
    paths: std::cell::RefCell<HashMap<usize, String>>,
}

impl SpanTree {
    pub(crate) fn new(spans: &[SpanRecord]) -> SpanTree {
        let n = spans.len();
        let mut borrowed: HashMap<(&str, &str), usize> = HashMap::with_capacity(n);
        for (i, s) in spans.iter().enumerate() {
            borrowed.insert((s.trace_id.as_str(), s.span_id.as_str()), i);
        }
        let node_of_span: Vec<usize> =
            spans.iter().map(|s| borrowed[&(s.trace_id.as_str(), s.span_id.as_str())]).collect();
        let mut parent = vec![None; n];
        for (&(trace_id, _), &node) in &borrowed {
            let s = &spans[node];
            if !s.parent.is_empty() {
                parent[node] = borrowed.get(&(trace_id, s.parent.as_str())).copied();
            }
        }
        let keys: Vec<SpanKey> = spans.iter().map(SpanRecord::key).collect();
        let node_of = borrowed.iter().map(|(_, &node)| (keys[node].clone(), node)).collect();
        let mut tree = SpanTree {
            keys,
            node_of,
            parent,
            agents: Vec::new(),
            agent_of: vec![Walked::No; n],
            paths: std::cell::RefCell::default(),
        };
        for i in 0..n {
            tree.agent_of(spans, &node_of_span, i);
        }
        tree
    }

    /// The keys of a span's ancestors in the group, nearest first (a cycle stops the walk).
    pub(crate) fn ancestors(&self, key: &SpanKey) -> Vec<&SpanKey> {
        let mut out: Vec<&SpanKey> = Vec::new();
        let Some(&node) = self.node_of.get(key) else {
            return out;
        };
        let mut seen: HashSet<usize> = [node].into_iter().collect();
        let mut current = self.parent[node];
        while let Some(at) = current {
            if !seen.insert(at) {
                break;
            }
            out.push(&self.keys[at]);
            current = self.parent[at];
        }
        out
    }

    /// The agent path of the calls under the span: `""` for the root agent.
    ///
    /// The outermost agent span is the root agent (SPEC §10: `""`); each agent span below it
    /// adds its name; two nested spans of one agent name count once.
    pub(crate) fn agent(&self, key: &SpanKey) -> String {
        let innermost = self.node_of.get(key).and_then(|&node| self.agent_of[node].agent());
        let Some(innermost) = innermost else {
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

    /// The agents of the walk up from span `start` (its key's parents), innermost last: each
    /// node on the way gets the innermost agent it runs under. The start span itself may be
    /// an earlier export of its key; its own name counts, its key's parent is followed.
    fn agent_of(&mut self, spans: &[SpanRecord], node_of_span: &[usize], start: usize) {
        let mut pending: Vec<usize> = Vec::new();
        let mut seen: HashSet<usize> = HashSet::new();
        let mut current = Some(start);
        while let Some(at) = current {
            let node = node_of_span[at];
            if self.agent_of[node] != Walked::No || seen.contains(&node) {
                break;
            }
            pending.push(at);
            current = self.parent[node];
            seen.insert(node);
        }
        let mut agent: Option<usize> = match current {
            Some(at) => self.agent_of[node_of_span[at]].agent(),
            None => None,
        };
        for &item in pending.iter().rev() {
            if let Some(name) = agent_name(&spans[item]) {
                if agent.is_none_or(|a| self.agents[a].0 != name) {
                    self.agents.push((name, agent));
                    agent = Some(self.agents.len() - 1);
                }
            }
            self.agent_of[node_of_span[item]] = Walked::Under(agent);
        }
    }
}
