//! What the mapping could not map, counted by reason (the importer's `ImportReport`).

pub const INVALID_ATTRIBUTE_JSON: &str = "INVALID_ATTRIBUTE_JSON";
pub const LOG_WITHOUT_TRACE: &str = "LOG_WITHOUT_TRACE";
pub const MISSING_GROUP_ATTRIBUTE: &str = "MISSING_GROUP_ATTRIBUTE";
pub const MODEL_CALL_WITHOUT_USAGE: &str = "MODEL_CALL_WITHOUT_USAGE";
pub const TOOL_CALL_WITHOUT_NAME: &str = "TOOL_CALL_WITHOUT_NAME";
pub const UNMAPPED_ATTRIBUTE: &str = "UNMAPPED_ATTRIBUTE";

/// How many example locations are kept per reason (as the Python report keeps).
const EXAMPLES_PER_REASON: usize = 5;

/// Counts by reason (first-seen order) with the first examples of each, plus totals.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    pub traces: u64,
    pub calls: u64,
    pub model_calls: u64,
    pub merged_duplicates: u64,
    pub id_collisions: u64,
    /// (reason, count, examples as `where: detail`).
    pub unmapped: Vec<(&'static str, u64, Vec<String>)>,
}

impl Report {
    pub(crate) fn add(&mut self, reason: &'static str, place: &str, detail: &str) {
        let at = if let Some(at) = self.unmapped.iter().position(|(r, _, _)| *r == reason) {
            at
        } else {
            self.unmapped.push((reason, 0, Vec::new()));
            self.unmapped.len() - 1
        };
        let entry = &mut self.unmapped[at];
        entry.1 += 1;
        if entry.2.len() < EXAMPLES_PER_REASON {
            entry.2.push(if detail.is_empty() {
                place.to_string()
            } else {
                format!("{place}: {detail}")
            });
        }
    }
}
