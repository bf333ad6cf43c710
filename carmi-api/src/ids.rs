//! Newtype identifiers, so that a host id can never be passed where a process id is expected.

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
    /// A request made by one application process; unique within that process.
    RequestId, "r"
);
id_type!(
    /// A host: one slot of one pool machine, assigned by the global RM.
    HostId, "h"
);
id_type!(
    /// A process of an application, assigned by the global RM.
    ProcessId, "p"
);
id_type!(
    /// A job: an application and all the processes it spawned.
    JobId, "j"
);
id_type!(
    /// One connection accepted by a local RM from an application process.
    ConnId, "c"
);
