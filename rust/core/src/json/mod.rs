//! JSON values with the SPEC §2 semantics: exact decimal numbers, code-point strings
//! (lone surrogates kept, as `JSON.parse` keeps them), JS property order, last duplicate wins.

pub mod canonical;
pub mod compare;
pub mod fingerprint;
pub(crate) mod lex;
pub mod parse;
pub mod path;
pub mod text;
pub mod tolerance;
pub mod value;

pub use parse::{parse, ParseError};
pub use value::{Number, Object, Str, Value};
