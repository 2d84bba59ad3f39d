//! Regrade rows as Arrow columns: the Parquet output's schema (docs/regrade.md, `output.py`
//! `arrow_schema`) as plain buffers (validity bitmaps, `i32` offsets, values, little-endian as
//! Arrow lays them out) that Python wraps with `pyarrow.Array.from_buffers`, so Parquet output
//! needs no JSON reader over the rows. Nulls are where Arrow's JSON reader puts them for the
//! same JSONL rows: the graded fields of an error row, the `error` struct (and its children) of
//! a graded row.
use crate::proto::v1::{AssertionStatus, GradeResult, ItemError, Severity, Verdict};

/// A validity bitmap (bit i set: slot i is valid), LSB first.
#[derive(Clone, Debug, Default)]
pub struct Bitmap {
    pub bytes: Vec<u8>,
    pub len: usize,
    pub nulls: usize,
}

impl Bitmap {
    fn push(&mut self, valid: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if valid {
            self.bytes[self.len / 8] |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    fn append(&mut self, other: &Bitmap) {
        for i in 0..other.len {
            self.push(other.bytes[i / 8] & (1 << (i % 8)) != 0);
        }
    }
}

/// `i32` offsets from 0, one more than the slots.
#[derive(Clone, Debug)]
pub struct Offsets(pub Vec<i32>);

impl Default for Offsets {
    fn default() -> Self {
        Offsets(vec![0])
    }
}

impl Offsets {
    fn last(&self) -> i32 {
        self.0[self.0.len() - 1]
    }

    /// Ends the next slot at `end`; `false` past `i32::MAX` (Arrow's `string`, `list`).
    fn push(&mut self, end: usize) -> bool {
        match i32::try_from(end) {
            Ok(end) => {
                self.0.push(end);
                true
            }
            Err(_) => false,
        }
    }

    fn append(&mut self, other: &Offsets) -> bool {
        let base = self.last();
        other.0[1..].iter().all(|&o| {
            base.checked_add(o).is_some_and(|end| {
                self.0.push(end);
                true
            })
        })
    }
}

/// A `string` column.
#[derive(Clone, Debug, Default)]
pub struct Utf8 {
    pub validity: Bitmap,
    pub offsets: Offsets,
    pub data: Vec<u8>,
}

impl Utf8 {
    fn push(&mut self, s: Option<&str>) -> bool {
        self.validity.push(s.is_some());
        self.data.extend_from_slice(s.unwrap_or("").as_bytes());
        self.offsets.push(self.data.len())
    }

    fn append(&mut self, other: &Utf8) -> bool {
        self.validity.append(&other.validity);
        self.data.extend_from_slice(&other.data);
        self.offsets.append(&other.offsets)
    }
}

/// A fixed-width column.
#[derive(Clone, Debug, Default)]
pub struct Values<T> {
    pub validity: Bitmap,
    pub values: Vec<T>,
}

impl<T: Copy + Default> Values<T> {
    fn push(&mut self, v: Option<T>) {
        self.validity.push(v.is_some());
        self.values.push(v.unwrap_or_default());
    }

    fn append(&mut self, other: &Values<T>) {
        self.validity.append(&other.validity);
        self.values.extend_from_slice(&other.values);
    }
}

/// The rows' columns; `results` and `error` are a list of structs and a struct whose children
/// follow them here.
#[derive(Clone, Debug, Default)]
pub struct ArrowRows {
    pub rows: usize,
    pub trace_id: Utf8,
    pub suite_id: Utf8,
    pub verdict: Utf8,
    pub score: Values<f64>,
    pub soft_failures: Values<u32>,
    /// `list<struct<...>>`: one slot per row (null on error rows), over every result.
    pub results: Bitmap,
    pub results_offsets: Offsets,
    pub result_name: Utf8,
    pub result_status: Utf8,
    pub result_severity: Utf8,
    pub result_reason_code: Utf8,
    pub result_reason: Utf8,
    /// `list<uint32>` per result, never null.
    pub result_positions_offsets: Offsets,
    pub result_positions: Vec<u32>,
    pub result_score: Vec<f64>,
    pub mean_score: Values<f64>,
    /// `struct<reason_code, field, message>`: one slot per row (null on graded rows).
    pub error: Bitmap,
    pub error_reason_code: Utf8,
    pub error_field: Utf8,
    pub error_message: Utf8,
    /// Some offset went past `i32::MAX` (more than 2 GiB of one string column in a block).
    pub overflow: bool,
}

impl ArrowRows {
    /// Appends a graded row.
    pub fn push_result(&mut self, r: &GradeResult) {
        let mut ok = self.trace_id.push(Some(&r.trace_id));
        ok &= self.suite_id.push(Some(&r.suite_id));
        let verdict = Verdict::try_from(r.verdict).unwrap_or_default();
        ok &= self.verdict.push(Some(verdict.as_str_name()));
        self.score.push(Some(r.score));
        self.soft_failures.push(Some(r.soft_failures));
        for a in &r.results {
            ok &= self.result_name.push(Some(&a.name));
            let status = AssertionStatus::try_from(a.status).unwrap_or_default();
            ok &= self.result_status.push(Some(status.as_str_name()));
            let severity = Severity::try_from(a.severity).unwrap_or_default();
            ok &= self.result_severity.push(Some(severity.as_str_name()));
            ok &= self.result_reason_code.push(Some(&a.reason_code));
            ok &= self.result_reason.push(Some(&a.reason));
            self.result_positions.extend_from_slice(&a.positions);
            ok &= self.result_positions_offsets.push(self.result_positions.len());
            self.result_score.push(a.score);
        }
        self.results.push(true);
        ok &= self.results_offsets.push(self.result_score.len());
        self.mean_score.push(Some(r.mean_score));
        self.push_error(None);
        self.rows += 1;
        self.overflow |= !ok;
    }

    /// Appends an item-error row (`suite_id` the run's).
    pub fn push_item_error(&mut self, suite_id: &str, e: &ItemError) {
        let mut ok = self.trace_id.push(Some(&e.trace_id));
        ok &= self.suite_id.push(Some(suite_id));
        ok &= self.verdict.push(None);
        self.score.push(None);
        self.soft_failures.push(None);
        self.results.push(false);
        ok &= self.results_offsets.push(self.result_score.len());
        self.mean_score.push(None);
        ok &= self.push_error(Some(e));
        self.rows += 1;
        self.overflow |= !ok;
    }

    fn push_error(&mut self, e: Option<&ItemError>) -> bool {
        self.error.push(e.is_some());
        let mut ok = self.error_reason_code.push(e.map(|e| e.reason_code.as_str()));
        ok &= self.error_field.push(e.map(|e| e.field.as_str()));
        ok & self.error_message.push(e.map(|e| e.message.as_str()))
    }

    /// Appends the rows that follow.
    pub fn append(&mut self, next: &ArrowRows) {
        let mut ok = self.trace_id.append(&next.trace_id);
        ok &= self.suite_id.append(&next.suite_id);
        ok &= self.verdict.append(&next.verdict);
        self.score.append(&next.score);
        self.soft_failures.append(&next.soft_failures);
        self.results.append(&next.results);
        ok &= self.results_offsets.append(&next.results_offsets);
        ok &= self.result_name.append(&next.result_name);
        ok &= self.result_status.append(&next.result_status);
        ok &= self.result_severity.append(&next.result_severity);
        ok &= self.result_reason_code.append(&next.result_reason_code);
        ok &= self.result_reason.append(&next.result_reason);
        ok &= self.result_positions_offsets.append(&next.result_positions_offsets);
        self.result_positions.extend_from_slice(&next.result_positions);
        self.result_score.extend_from_slice(&next.result_score);
        self.mean_score.append(&next.mean_score);
        self.error.append(&next.error);
        ok &= self.error_reason_code.append(&next.error_reason_code);
        ok &= self.error_field.append(&next.error_field);
        ok &= self.error_message.append(&next.error_message);
        self.rows += next.rows;
        self.overflow |= !ok || next.overflow;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::AssertionResult;

    #[test]
    fn rows_split_and_appended_equal_rows_pushed_at_once() {
        let result = |i: u32| GradeResult {
            trace_id: format!("t{i}"),
            suite_id: "s".to_owned(),
            verdict: Verdict::Fail as i32,
            score: 0.5,
            results: (0..i % 3)
                .map(|k| AssertionResult {
                    name: format!("a{k}"),
                    positions: (0..k).collect(),
                    score: 1.0,
                    ..AssertionResult::default()
                })
                .collect(),
            ..GradeResult::default()
        };
        let error = ItemError { trace_id: "e".to_owned(), ..ItemError::default() };
        let push = |rows: &mut ArrowRows, i: u32| {
            if i % 4 == 3 {
                rows.push_item_error("s", &error);
            } else {
                rows.push_result(&result(i));
            }
        };
        let mut whole = ArrowRows::default();
        (0..23).for_each(|i| push(&mut whole, i));
        let mut joined = ArrowRows::default();
        for part in [0..5, 5..6, 6..23] {
            let mut rows = ArrowRows::default();
            part.for_each(|i| push(&mut rows, i));
            joined.append(&rows);
        }
        assert_eq!(format!("{whole:?}"), format!("{joined:?}"));
        assert_eq!((whole.rows, whole.error.nulls, whole.results.nulls), (23, 18, 5));
        assert_eq!(whole.error_field.validity.nulls, 18);
        assert_eq!(whole.results_offsets.0.len(), 24);
        assert_eq!(whole.result_positions_offsets.0.len(), whole.result_score.len() + 1);
        assert!(!whole.overflow);
    }
}
