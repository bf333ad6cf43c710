//! Submit-file options that say what the pool does with a job, kept apart
//! from the parser (`submit.rs`) so that each file stays readable.

use serde::{Deserialize, Serialize};

/// What to do with a job the pool cannot start as it is (`on_impossible =
/// wait | hold | reject` in a submit file). Whichever is chosen, a waiting
/// job the pool cannot start keeps nothing back from the jobs behind it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnImpossible {
    /// Accept it and let it wait, flagged in `carmi q` (the pool may grow).
    #[default]
    Wait,
    /// Accept it held, with the reason (`carmi release` once the pool grew).
    Hold,
    /// Refuse the submit with the reason.
    Reject,
}

impl OnImpossible {
    /// Reads `on_impossible`'s value (case-insensitive).
    pub fn parse(value: &str) -> Result<OnImpossible, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "wait" => Ok(OnImpossible::Wait),
            "hold" => Ok(OnImpossible::Hold),
            "reject" => Ok(OnImpossible::Reject),
            other => Err(format!("on_impossible = {other}: use wait, hold or reject")),
        }
    }
}
