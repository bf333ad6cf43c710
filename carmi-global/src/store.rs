//! Executables stored by content under `STATE_DIR/executables/`: the bytes in
//! `<sha256>`, and the reference (name, size) in `<sha256>.json` beside them
//! so that a restarted daemon knows what it has. Blocking file I/O: the driver
//! calls it from `spawn_blocking`.

use std::io::Write;
use std::path::{Path, PathBuf};

use carmi_api::exe::{ExeMismatch, is_sha256_hex};
use carmi_api::msg::ExecutableRef;
use tracing::warn;

/// Why an executable could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The bytes are not the executable the reference names.
    #[error(transparent)]
    Mismatch(#[from] ExeMismatch),
    /// The file system failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn check_hash(sha256: &str) -> Result<(), StoreError> {
    if is_sha256_hex(sha256) {
        Ok(())
    } else {
        Err(ExeMismatch::BadHash(sha256.chars().take(80).collect()).into())
    }
}

/// The executable store.
#[derive(Debug)]
pub struct ExeStore {
    dir: PathBuf,
}

impl ExeStore {
    /// Opens (creating) `state_dir/executables` and lists what it holds.
    /// Entries whose bytes are missing or of the wrong size are skipped with a warning.
    pub fn open(state_dir: &Path) -> Result<(ExeStore, Vec<ExecutableRef>), StoreError> {
        let dir = state_dir.join("executables");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let path = entry.map_err(io_err(&dir))?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match Self::read_ref(&path) {
                Some(exe)
                    if std::fs::metadata(dir.join(&exe.sha256))
                        .is_ok_and(|m| m.len() == exe.size) =>
                {
                    found.push(exe)
                }
                _ => {
                    warn!(path = %path.display(), "stored executable skipped: unreadable or incomplete")
                }
            }
        }
        Ok((ExeStore { dir }, found))
    }

    fn read_ref(path: &Path) -> Option<ExecutableRef> {
        let text = std::fs::read(path).ok()?;
        let exe: ExecutableRef = serde_json::from_slice(&text).ok()?;
        check_hash(&exe.sha256).ok()?;
        Some(exe)
    }

    /// Where the bytes of an executable live.
    pub fn path_of(&self, sha256: &str) -> Result<PathBuf, StoreError> {
        check_hash(sha256)?;
        Ok(self.dir.join(sha256))
    }

    /// Verifies `bytes` against `exe` (size and hash) and stores them.
    /// Storing the same contents again is harmless.
    pub fn put(&self, exe: &ExecutableRef, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.path_of(&exe.sha256)?;
        exe.verify(bytes)?;
        // Bytes first, reference last: a reference always names complete bytes.
        write_atomically(&path, bytes)?;
        let json = serde_json::to_vec(exe).expect("references serialize");
        write_atomically(&path.with_extension("json"), &json)
    }

    /// The reference and bytes of a stored executable, or `None`.
    pub fn get(&self, sha256: &str) -> Result<Option<(ExecutableRef, Vec<u8>)>, StoreError> {
        let path = self.path_of(sha256)?;
        let Some(exe) = Self::read_ref(&path.with_extension("json")) else {
            return Ok(None);
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        if bytes.len() as u64 != exe.size || exe.sha256 != sha256 {
            warn!(path = %path.display(), "stored executable does not match its reference");
            return Ok(None);
        }
        Ok(Some((exe, bytes)))
    }
}

impl ExeStore {
    /// The reference and the open file of a stored executable, or `None`:
    /// for streaming it without reading it whole.
    pub fn open_file(
        &self,
        sha256: &str,
    ) -> Result<Option<(ExecutableRef, std::fs::File)>, StoreError> {
        let path = self.path_of(sha256)?;
        let Some(exe) = Self::read_ref(&path.with_extension("json")) else {
            return Ok(None);
        };
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let len = file.metadata().map_err(io_err(&path))?.len();
        if len != exe.size || exe.sha256 != sha256 {
            warn!(path = %path.display(), "stored executable does not match its reference");
            return Ok(None);
        }
        Ok(Some((exe, file)))
    }
}

/// Writes to a temporary file in the same directory, then renames it into place.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = path.with_extension(format!("tmp{}", rand::random::<u32>()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::exe::sha256_hex;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("carmi-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn stores_verifies_and_reopens() {
        let dir = temp_dir("ok");
        let (store, found) = ExeStore::open(&dir).unwrap();
        assert!(found.is_empty());
        let bytes = b"#!/bin/sh\necho hi\n";
        let exe = ExecutableRef {
            name: "hi".into(),
            sha256: sha256_hex(bytes),
            size: bytes.len() as u64,
        };
        store.put(&exe, bytes).unwrap();
        store.put(&exe, bytes).unwrap();
        assert_eq!(
            store.get(&exe.sha256).unwrap(),
            Some((exe.clone(), bytes.to_vec()))
        );
        assert!(dir.join("executables").join(&exe.sha256).is_file());
        let (_, found) = ExeStore::open(&dir).unwrap();
        assert_eq!(found, vec![exe.clone()]);
        let mut wrong = exe.clone();
        wrong.size += 1;
        assert!(matches!(
            store.put(&wrong, bytes),
            Err(StoreError::Mismatch(ExeMismatch::SizeMismatch { .. }))
        ));
        assert!(matches!(
            store.put(&exe, b"#!/bin/sh\necho HI\n"),
            Err(StoreError::Mismatch(ExeMismatch::HashMismatch { .. }))
        ));
        let mut evil = exe;
        evil.sha256 = "../../etc/passwd".into();
        assert!(matches!(
            store.put(&evil, bytes),
            Err(StoreError::Mismatch(ExeMismatch::BadHash(_)))
        ));
        assert!(matches!(
            store.get("../x"),
            Err(StoreError::Mismatch(ExeMismatch::BadHash(_)))
        ));
        assert_eq!(store.get(&"0".repeat(64)).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
