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
pub mod regex_js;

pub mod args;
pub mod arrow_cols;
pub mod assertions;
pub mod batch;
pub mod call_meta;
pub mod error;
pub mod glob;
pub mod grade;
pub mod json_trace;
pub mod jsonl_block;
pub mod limits;
pub mod matching;
pub mod rows;
pub mod scope;
pub mod score;
pub mod suite;
pub mod trace;
pub mod wire;
pub mod work;

pub use batch::{Grader, DEFAULT_MAX_REGISTERED_SUITES};
pub use error::{CoreError, Reason, SuiteProblem};
pub use limits::Limits;
pub use suite::CompiledSuite;
