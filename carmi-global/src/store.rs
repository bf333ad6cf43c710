//! Executables stored by content under `STATE_DIR/executables/`: the bytes in
//! `<sha256>`, and the reference (name, size) and the identity that uploaded
//! them in `<sha256>.json` beside them, so that a restarted daemon knows
//! what it has and whom each file is charged to. Blocking file I/O: the
//! driver calls it from `spawn_blocking`.
//!
//! Each identity's uploads are charged to it up to a quota (issue 38: a
//! token that may submit could otherwise fill the manager's disk); a file
//! already stored costs nothing more, and a removed one (the router's
//! clean-up, `router/stored.rs`) gives its charge back.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use carmi_api::exe::{ExeMismatch, is_sha256_hex};
use carmi_api::msg::ExecutableRef;
use tracing::warn;

/// Why an executable could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The bytes are not the executable the reference names.
    #[error(transparent)]
    Mismatch(#[from] ExeMismatch),
    /// The upload would take its identity past its quota.
    #[error(
        "upload refused: `{owner}` has {used} bytes in the store; {size} more would pass its quota of {quota} bytes \
         (--upload-quota-mib; files no live job refers to are removed a day after their last use, --store-keep-s)"
    )]
    Quota {
        /// Whose.
        owner: String,
        /// Bytes charged to it now.
        used: u64,
        /// The file's size.
        size: u64,
        /// Its quota.
        quota: u64,
    },
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

/// Default for [`ExeStore::set_quota`]: 8 GiB per identity.
pub const DEFAULT_UPLOAD_QUOTA: u64 = 8 << 30;

/// The reference file beside the bytes: the reference, and whom it is charged to.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    #[serde(flatten)]
    exe: ExecutableRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

/// Whom each stored file is charged to, and each identity's total.
#[derive(Debug, Default)]
struct Charges {
    of_file: HashMap<String, (Option<String>, u64)>,
    used: HashMap<String, u64>,
}

impl Charges {
    fn charge(&mut self, sha256: &str, owner: Option<&str>, size: u64) {
        if let Some(o) = owner {
            *self.used.entry(o.to_string()).or_default() += size;
        }
        (self.of_file).insert(sha256.to_string(), (owner.map(str::to_string), size));
    }

    fn release(&mut self, sha256: &str) {
        let Some((Some(owner), size)) = self.of_file.remove(sha256) else {
            return;
        };
        if let Some(n) = self.used.get_mut(&owner) {
            *n = n.saturating_sub(size);
            if *n == 0 {
                self.used.remove(&owner);
            }
        }
    }
}

/// The executable store.
#[derive(Debug)]
pub struct ExeStore {
    dir: PathBuf,
    quota: u64,
    charges: Mutex<Charges>,
}

impl ExeStore {
    /// Opens (creating) `state_dir/executables` and lists what it holds.
    /// Entries whose bytes are missing or of the wrong size are skipped with a warning.
    pub fn open(state_dir: &Path) -> Result<(ExeStore, Vec<ExecutableRef>), StoreError> {
        let dir = state_dir.join("executables");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut found = Vec::new();
        let mut charges = Charges::default();
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let path = entry.map_err(io_err(&dir))?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match Self::read_kept(&path) {
                Some(kept)
                    if std::fs::metadata(dir.join(&kept.exe.sha256))
                        .is_ok_and(|m| m.len() == kept.exe.size) =>
                {
                    charges.charge(&kept.exe.sha256, kept.owner.as_deref(), kept.exe.size);
                    found.push(kept.exe)
                }
                _ => {
                    warn!(path = %path.display(), "stored executable skipped: unreadable or incomplete")
                }
            }
        }
        let store = ExeStore {
            dir,
            quota: DEFAULT_UPLOAD_QUOTA,
            charges: Mutex::new(charges),
        };
        Ok((store, found))
    }

    /// Charges each identity's uploads up to `bytes` (see the module documentation).
    pub fn set_quota(&mut self, bytes: u64) {
        self.quota = bytes;
    }

    /// Bytes charged to `owner`.
    pub fn used_by(&self, owner: &str) -> u64 {
        self.charges().used.get(owner).copied().unwrap_or(0)
    }

    fn charges(&self) -> std::sync::MutexGuard<'_, Charges> {
        // Counts only: a panic while holding the lock leaves them usable.
        self.charges.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read_kept(path: &Path) -> Option<Kept> {
        let text = std::fs::read(path).ok()?;
        let kept: Kept = serde_json::from_slice(&text).ok()?;
        check_hash(&kept.exe.sha256).ok()?;
        Some(kept)
    }

    fn read_ref(path: &Path) -> Option<ExecutableRef> {
        Self::read_kept(path).map(|k| k.exe)
    }

    /// Where the bytes of an executable live.
    pub fn path_of(&self, sha256: &str) -> Result<PathBuf, StoreError> {
        check_hash(sha256)?;
        Ok(self.dir.join(sha256))
    }

    /// Verifies `bytes` against `exe` (size and hash) and stores them,
    /// charged to nobody (a checkpoint, kept for its job).
    /// Storing the same contents again is harmless.
    pub fn put(&self, exe: &ExecutableRef, bytes: &[u8]) -> Result<(), StoreError> {
        self.put_for(exe, bytes, None)
    }

    /// [`ExeStore::put`] of an upload by `owner`, charged to it: refused
    /// if it would take `owner` past its quota. Contents already stored
    /// cost nothing more.
    pub fn put_for(
        &self,
        exe: &ExecutableRef,
        bytes: &[u8],
        owner: Option<&str>,
    ) -> Result<(), StoreError> {
        let path = self.path_of(&exe.sha256)?;
        exe.verify(bytes)?;
        {
            let mut charges = self.charges();
            if charges.of_file.contains_key(&exe.sha256) {
                return Ok(());
            }
            if let Some(o) = owner {
                let used = charges.used.get(o).copied().unwrap_or(0);
                if used.saturating_add(exe.size) > self.quota {
                    let (owner, size, quota) = (o.to_string(), exe.size, self.quota);
                    return Err(StoreError::Quota {
                        owner,
                        used,
                        size,
                        quota,
                    });
                }
            }
            // Held while it is written, so that two uploads cannot both pass.
            charges.charge(&exe.sha256, owner, exe.size);
        }
        let kept = Kept {
            exe: exe.clone(),
            owner: owner.map(str::to_string),
        };
        // Bytes first, reference last: a reference always names complete bytes.
        let written = write_atomically(&path, bytes).and_then(|()| {
            let json = serde_json::to_vec(&kept).expect("references serialize");
            write_atomically(&path.with_extension("json"), &json)
        });
        if written.is_err() {
            self.charges().release(&exe.sha256);
        }
        written
    }

    /// Removes a stored file (reference first, so that no reference ever
    /// names missing bytes) and gives its charge back.
    pub fn remove(&self, sha256: &str) -> Result<(), StoreError> {
        let path = self.path_of(sha256)?;
        for p in [path.with_extension("json"), path] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&p)(e)),
            }
        }
        self.charges().release(sha256);
        Ok(())
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

    #[test]
    fn uploads_are_charged_to_their_owner_up_to_the_quota_and_given_back() {
        let dir = temp_dir("quota");
        let (mut store, _) = ExeStore::open(&dir).unwrap();
        store.set_quota(30);
        let file = |text: &[u8]| ExecutableRef {
            name: "f".into(),
            sha256: sha256_hex(text),
            size: text.len() as u64,
        };
        let (a, b) = (b"twenty bytes of text".as_slice(), b"ten more..".as_slice());
        store.put_for(&file(a), a, Some("alice")).unwrap();
        store
            .put_for(&file(a), a, Some("alice"))
            .expect("the same again is free");
        store.put_for(&file(b), b, Some("alice")).unwrap();
        assert_eq!(store.used_by("alice"), 30);
        let c = b"one byte too many".as_slice();
        let refused = store.put_for(&file(c), c, Some("alice")).unwrap_err();
        assert!(
            matches!(refused, StoreError::Quota { used: 30, .. }),
            "{refused}"
        );
        assert!(
            refused.to_string().contains("--upload-quota-mib"),
            "{refused}"
        );
        store
            .put_for(&file(c), c, Some("bob"))
            .expect("bob has his own quota");
        // The charges survive a restart, and a removal gives them back.
        let (reopened, found) = ExeStore::open(&dir).unwrap();
        assert_eq!(found.len(), 3);
        assert_eq!(reopened.used_by("alice"), 30);
        reopened.remove(&file(a).sha256).unwrap();
        assert_eq!(reopened.used_by("alice"), 10);
        assert_eq!(reopened.get(&file(a).sha256).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
