//! Content-addressed executables: hashing and verification shared by every
//! party that stores or stages executable bytes (the global RM's store, the
//! local RMs' caches), so that they agree on what "the same executable" means.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A content-addressed executable. Its bytes are uploaded once to the global
/// RM ([`ToLocal::UploadExecutable`](crate::msg::ToLocal::UploadExecutable)) and staged from there to the machines
/// that lack them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExecutableRef {
    /// File name, for the process's `argv[0]` and for people.
    pub name: String,
    /// SHA-256 of the contents, lower-case hex.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// True for 64 lower-case hex digits: the only hashes safe to use as file names.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Why bytes are not the executable a reference names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExeMismatch {
    /// The hash is not 64 lower-case hex digits (and so cannot name a file).
    #[error("`{0}` is not a SHA-256 in lower-case hex")]
    BadHash(String),
    /// The bytes are not as long as announced.
    #[error("executable `{name}`: size is {actual} bytes, {expected} announced")]
    SizeMismatch {
        /// Its name.
        name: String,
        /// Announced size.
        expected: u64,
        /// Received size.
        actual: u64,
    },
    /// The bytes hash to something else.
    #[error(
        "executable `{name}`: SHA-256 of the contents is {actual}, not the announced {expected}"
    )]
    HashMismatch {
        /// Its name.
        name: String,
        /// Announced hash.
        expected: String,
        /// Hash of the bytes.
        actual: String,
    },
}

impl ExecutableRef {
    /// Checks the reference's hash is well formed, then size, then contents.
    pub fn verify(&self, bytes: &[u8]) -> Result<(), ExeMismatch> {
        if !is_sha256_hex(&self.sha256) {
            return Err(ExeMismatch::BadHash(self.sha256.chars().take(80).collect()));
        }
        if bytes.len() as u64 != self.size {
            return Err(ExeMismatch::SizeMismatch {
                name: self.name.clone(),
                expected: self.size,
                actual: bytes.len() as u64,
            });
        }
        let actual = sha256_hex(bytes);
        if actual != self.sha256 {
            return Err(ExeMismatch::HashMismatch {
                name: self.name.clone(),
                expected: self.sha256.clone(),
                actual,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_checks_hash_form_size_and_contents() {
        let bytes = b"#!/bin/sh\nexit 0\n";
        let good = ExecutableRef {
            name: "x".into(),
            sha256: sha256_hex(bytes),
            size: bytes.len() as u64,
        };
        assert_eq!(good.verify(bytes), Ok(()));
        let short = ExecutableRef {
            size: 3,
            ..good.clone()
        };
        assert!(matches!(
            short.verify(bytes),
            Err(ExeMismatch::SizeMismatch { .. })
        ));
        let other = ExecutableRef {
            sha256: sha256_hex(b"other"),
            ..good.clone()
        };
        assert!(matches!(
            other.verify(bytes),
            Err(ExeMismatch::HashMismatch { .. })
        ));
        let path = ExecutableRef {
            sha256: "../etc/passwd".into(),
            ..good
        };
        assert!(matches!(path.verify(bytes), Err(ExeMismatch::BadHash(_))));
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
