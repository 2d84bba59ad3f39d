//! trajgrade-core: decode traces and suites, grade them exactly as shared/SPEC.md says.

pub mod proto {
    //! Messages generated from proto/trajgrade/v1 by prost (and pbjson for the JSON mapping).
    #![allow(clippy::all, clippy::pedantic)]
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/trajgrade.v1.rs"));
        include!(concat!(env!("OUT_DIR"), "/trajgrade.v1.serde.rs"));
    }
}

pub mod json;

pub mod expr;
pub(crate) mod regex_js;

pub(crate) mod args;
pub mod arrow_cols;
pub mod arrow_rows;
pub(crate) mod assertions;
pub(crate) mod batch;
pub mod call_meta;
pub(crate) mod error;
pub(crate) mod glob;
pub(crate) mod grade;
pub mod json_trace;
pub mod jsonl_block;
pub(crate) mod limits;
pub mod matching;
pub mod otlp;
#[cfg(feature = "parquet")]
pub mod parquet_traces;
pub(crate) mod rows;
pub(crate) mod scope;
pub(crate) mod score;
pub(crate) mod suite;
pub mod tally;
#[cfg(test)]
pub(crate) mod test_rng;
pub mod trace;
pub mod wire;
pub mod work;

pub use batch::{Grader, DEFAULT_MAX_REGISTERED_SUITES};
pub use error::{CoreError, Reason, SuiteProblem};
pub use limits::Limits;
pub use suite::CompiledSuite;
