//! Newtype identifiers, so that a host id can never be passed where a process id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A string that is not an id of the expected kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a {kind}: expected a number, optionally prefixed with `{prefix}`")]
pub struct ParseIdError {
    text: String,
    kind: &'static str,
    prefix: &'static str,
}

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

        /// Parses the displayed form (`j3`) or the bare number (`3`), so that
        /// ids can be given in environment variables and on command lines.
        impl FromStr for $name {
            type Err = ParseIdError;

            fn from_str(s: &str) -> Result<Self, ParseIdError> {
                let digits = s.strip_prefix($prefix).unwrap_or(s);
                digits.parse().map($name).map_err(|_| ParseIdError {
                    text: s.to_string(),
                    kind: stringify!($name),
                    prefix: $prefix,
                })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_with_or_without_their_prefix() {
        assert_eq!("j3".parse::<JobId>(), Ok(JobId(3)));
        assert_eq!("17".parse::<ProcessId>(), Ok(ProcessId(17)));
        assert_eq!(
            ProcessId(17).to_string().parse::<ProcessId>(),
            Ok(ProcessId(17))
        );
        let err = "p3".parse::<JobId>().unwrap_err();
        assert!(err.to_string().contains("`p3` is not a JobId"), "{err}");
        assert!("".parse::<HostId>().is_err());
        assert!("j".parse::<JobId>().is_err());
    }
}
