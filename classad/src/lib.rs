//! The ClassAd language, compatible with HTCondor's: expressions with
//! three-valued logic (UNDEFINED, ERROR), ClassAd records, and matchmaking.
//!
//! ```
//! use classad::{ClassAd, Value, parse_expr};
//! let machine = ClassAd::parse(r#"[ Arch = "X86_64"; Memory = 4096 ]"#).unwrap();
//! let class = parse_expr(r#"Arch == "x86_64" && Memory >= 2048"#).unwrap();
//! assert_eq!(machine.eval_expr(&class, None), Value::Bool(true));
//! ```
//!
//! # Layout
//! - `grammar.pest`: the grammar, recognised by pest.
//! - `parse`: pest pairs to [`Expr`], operator precedence, nesting limits, [`ParseError`].
//! - `fastparse`: hand-written parser for the success path (pest explains errors).
//! - `ast`: the expression tree.
//! - `symbol`: case-folded attribute names interned to integers.
//! - `value`: runtime values, including UNDEFINED and ERROR.
//! - `ops`: operator semantics.
//! - `eval`: scopes (MY, TARGET, parent, nested ads), lookup, cycle detection.
//! - `builtins`: the function library.
//! - `record`: [`ClassAd`] records.
//! - `matching`: symmetric matchmaking with Requirements and Rank.
//! - `unparse`: printing in HTCondor's canonical form.
//! - `synth`: deterministic synthetic machine and job ads for benchmarks and demos.

pub mod ast;
pub mod builtins;
pub mod eval;
mod fastparse;
pub mod matching;
pub mod ops;
pub mod parse;
pub mod record;
pub mod symbol;
pub mod synth;
pub mod unparse;
pub mod value;

pub use ast::Expr;
pub use eval::{Evaluator, Scope, eval_with};
pub use matching::{MatchResult, match_ads, rank_of, symmetric_match};
pub use parse::{ParseError, parse_expr};
pub use record::ClassAd;
pub use value::Value;
