//! Newtype identifiers of WoDi, so that a step id is never taken for a worker id.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A work step, named by the master; unique within a cycle (the same id
    /// in the next cycle is the same piece of work, which the history uses).
    StepId, "s"
);
id_type!(
    /// A worker process, numbered by the server in spawn order.
    WorkerId, "w"
);
id_type!(
    /// A cycle of the master's computation.
    CycleId, "c"
);
