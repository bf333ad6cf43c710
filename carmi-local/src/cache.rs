//! The content-addressed executable cache: `WORK_DIR/cache/<sha256>`.
//!
//! Bytes staged from the global RM are checked against the hash and size the
//! spawn asked for *before* anything executable appears under the final name:
//! they are written to a temporary file, synced, made read-only and
//! executable, and renamed into place. A cached file is therefore always
//! complete and always what its name says, and is re-used by every job that
//! runs the same executable.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use carmi_api::exe::{ExeMismatch, is_sha256_hex};
use carmi_api::msg::ExecutableRef;

/// Why an executable was not accepted into the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The bytes are not the executable the spawn asked for.
    #[error(transparent)]
    Mismatch(#[from] ExeMismatch),
    /// The cache directory cannot be written.
    #[error("cannot write {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
}

/// The cache directory.
#[derive(Clone, Debug)]
pub struct ExeCache {
    dir: PathBuf,
}

impl ExeCache {
    /// A cache in `dir`, created if missing; leftover temporary files of an
    /// interrupted store are removed.
    pub fn open(dir: PathBuf) -> std::io::Result<ExeCache> {
        fs::create_dir_all(&dir)?;
        for entry in fs::read_dir(&dir)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(ExeCache { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cached file for `exe`, if present with the right size. The size
    /// check is cheap and catches a file truncated behind our back; the hash
    /// was checked when the file was stored.
    pub fn lookup(&self, exe: &ExecutableRef) -> Option<PathBuf> {
        if !is_sha256_hex(&exe.sha256) {
            return None;
        }
        let path = self.dir.join(&exe.sha256);
        match fs::metadata(&path) {
            Ok(m) if m.is_file() && m.len() == exe.size => Some(path),
            Ok(m) => {
                tracing::warn!(
                    path = %path.display(),
                    size = m.len(),
                    expected = exe.size,
                    "cached executable has the wrong size; discarding it"
                );
                let _ = fs::remove_file(&path);
                None
            }
            Err(_) => None,
        }
    }

    /// Verifies `bytes` against `exe` and stores them; returns the cached path.
    pub fn store(&self, exe: &ExecutableRef, bytes: &[u8]) -> Result<PathBuf, CacheError> {
        verify(exe, bytes)?;
        let path = self.dir.join(&exe.sha256);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{:016x}",
            exe.sha256,
            rand::random::<u64>()
        ));
        let io = |error| CacheError::Io {
            path: tmp.clone(),
            error,
        };
        let result = (|| {
            // Created without any permission to execute: nothing may run these
            // bytes until they are complete and renamed.
            let mut f: File = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            drop(f);
            fs::set_permissions(&tmp, fs::Permissions::from_mode(0o555))?;
            fs::rename(&tmp, &path)
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(io(e));
        }
        Ok(path)
    }
}

/// Checks that `bytes` are the executable `exe` names.
pub fn verify(exe: &ExecutableRef, bytes: &[u8]) -> Result<(), CacheError> {
    Ok(exe.verify(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TempDir;
    use carmi_api::exe::sha256_hex;

    fn exe_ref(bytes: &[u8]) -> ExecutableRef {
        ExecutableRef {
            name: "prog".into(),
            sha256: sha256_hex(bytes),
            size: bytes.len() as u64,
        }
    }

    #[test]
    fn good_bytes_are_stored_executable_and_found_again() {
        let dir = TempDir::new("cache-good");
        let cache = ExeCache::open(dir.path().join("cache")).unwrap();
        let bytes = b"#!/bin/sh\necho hi\n";
        let r = exe_ref(bytes);
        assert!(cache.lookup(&r).is_none());
        let path = cache.store(&r, bytes).unwrap();
        assert_eq!(fs::read(&path).unwrap(), bytes);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o555
        );
        assert_eq!(cache.lookup(&r), Some(path));
        // Storing the same executable again (another job) is harmless.
        cache.store(&r, bytes).unwrap();
    }

    #[test]
    fn mismatching_bytes_are_rejected_and_nothing_is_written() {
        let dir = TempDir::new("cache-bad");
        let cache = ExeCache::open(dir.path().join("cache")).unwrap();
        let r = exe_ref(b"the real program");
        let err = cache.store(&r, b"the evil program").unwrap_err();
        assert!(
            matches!(err, CacheError::Mismatch(ExeMismatch::HashMismatch { .. })),
            "{err}"
        );
        let err = cache.store(&r, b"short").unwrap_err();
        assert!(
            matches!(err, CacheError::Mismatch(ExeMismatch::SizeMismatch { .. })),
            "{err}"
        );
        let mut traversal = r.clone();
        traversal.sha256 = "../../etc/passwd".into();
        assert!(matches!(
            cache.store(&traversal, b"x"),
            Err(CacheError::Mismatch(ExeMismatch::BadHash(_)))
        ));
        assert!(cache.lookup(&traversal).is_none());
        let mut upper = r.clone();
        upper.sha256 = r.sha256.to_uppercase();
        assert!(cache.store(&upper, b"the real program").is_err());
        assert_eq!(fs::read_dir(cache.dir()).unwrap().count(), 0);
    }

    #[test]
    fn truncated_cache_entries_are_discarded() {
        let dir = TempDir::new("cache-trunc");
        let cache = ExeCache::open(dir.path().join("cache")).unwrap();
        let bytes = b"0123456789";
        let r = exe_ref(bytes);
        let path = cache.store(&r, bytes).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(&path, b"0123").unwrap();
        assert!(cache.lookup(&r).is_none());
        assert!(!path.exists());
    }
}
