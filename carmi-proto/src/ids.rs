//! Newtype identifiers, so that a host id can never be passed where a process id is expected.

/// serde, for the derives of [`crate::id_type!`] (not an API).
#[doc(hidden)]
pub use serde as __serde;

/// A string that is not an id of the expected kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a {kind}: expected a number, optionally prefixed with `{prefix}`")]
pub struct ParseIdError {
    text: String,
    kind: &'static str,
    prefix: &'static str,
}

impl ParseIdError {
    /// `text` is not an id of type `kind` (displayed with `prefix`).
    pub fn new(text: &str, kind: &'static str, prefix: &'static str) -> ParseIdError {
        ParseIdError {
            text: text.to_string(),
            kind,
            prefix,
        }
    }
}

/// Defines a newtype id over `u64` whose text form is `prefix` then the
/// number: serde as the bare number, `Display` as `{prefix}{n}`, `FromStr`
/// accepting either form.
///
/// Exported so that CARMI's ids (here) and WoDi's (`wodi-core`) share one
/// definition and one wire form. The user crate needs no serde dependency
/// of its own: the impls go through this crate's re-export.
#[macro_export]
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        pub struct $name(pub u64);

        // By hand rather than derived, so that the user crate needs no serde
        // of its own; the same form as `#[serde(transparent)]`: the number.
        impl $crate::ids::__serde::Serialize for $name {
            fn serialize<S>(&self, s: S) -> Result<S::Ok, S::Error>
            where
                S: $crate::ids::__serde::Serializer,
            {
                s.serialize_u64(self.0)
            }
        }

        impl<'de> $crate::ids::__serde::Deserialize<'de> for $name {
            fn deserialize<D>(d: D) -> Result<Self, D::Error>
            where
                D: $crate::ids::__serde::Deserializer<'de>,
            {
                <u64 as $crate::ids::__serde::Deserialize>::deserialize(d).map($name)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        /// Parses the displayed form (`j3`) or the bare number (`3`), so that
        /// ids can be given in environment variables and on command lines.
        impl ::std::str::FromStr for $name {
            type Err = $crate::ids::ParseIdError;

            fn from_str(s: &str) -> Result<Self, $crate::ids::ParseIdError> {
                let digits = s.strip_prefix($prefix).unwrap_or(s);
                digits
                    .parse()
                    .map($name)
                    .map_err(|_| $crate::ids::ParseIdError::new(s, stringify!($name), $prefix))
            }
        }
    };
}

crate::id_type!(
    /// A request made by one application process; unique within that process.
    RequestId, "r"
);
crate::id_type!(
    /// A host: one slot of one pool machine, assigned by the global RM.
    HostId, "h"
);
crate::id_type!(
    /// A process of an application, assigned by the global RM.
    ProcessId, "p"
);
crate::id_type!(
    /// A job: an application and all the processes it spawned.
    JobId, "j"
);
crate::id_type!(
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
