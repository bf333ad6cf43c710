//! Master checkpoints: the last completed cycle, the application's own
//! state at that point, and WoDi's step history, in one file written
//! atomically, so that a master restarted after a crash resumes where it was
//! with what WoDi had learned.
//!
//! The file is JSON ([`Checkpoint`]). It is written to a temporary file in
//! the same folder, flushed to disk, then renamed over the old one (and the
//! folder flushed), so a crash at any moment leaves either the previous
//! checkpoint or the new one, never a mix.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ids::CycleId;
pub use crate::plan::{SavedEstimate, restore, snapshot};

/// Version of the checkpoint file format.
pub const CHECKPOINT_FORMAT: u32 = 1;

/// What a checkpoint file holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`CHECKPOINT_FORMAT`].
    pub format: u32,
    /// The last cycle whose every result the application had when it wrote this.
    pub cycle: CycleId,
    /// The application's own state at that point (opaque to WoDi).
    pub state: Vec<u8>,
    /// WoDi's step history at that point.
    pub history: Vec<SavedEstimate>,
}

/// Why a checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// File system error.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not a checkpoint of this format.
    #[error("checkpoint {path} is not readable: {why}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

impl Checkpoint {
    /// Reads `path`; `Ok(None)` when there is no file (a fresh start).
    pub fn load(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(CheckpointError::Io {
                    path: path.into(),
                    source,
                });
            }
        };
        let cp: Checkpoint = serde_json::from_slice(&text).map_err(|e| CheckpointError::Bad {
            path: path.into(),
            why: e.to_string(),
        })?;
        if cp.format != CHECKPOINT_FORMAT {
            return Err(CheckpointError::Bad {
                path: path.into(),
                why: format!("format {} (this WoDi reads {CHECKPOINT_FORMAT})", cp.format),
            });
        }
        Ok(Some(cp))
    }

    /// Writes `path` atomically (see the module documentation).
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        let io = |source| CheckpointError::Io {
            path: path.into(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = dir.join(format!(
            ".{}.tmp{}",
            name.unwrap_or_else(|| "checkpoint".into()),
            std::process::id()
        ));
        let json = serde_json::to_vec(self).expect("a checkpoint serializes");
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&json).map_err(io)?;
        f.sync_all().map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io)?;
        // The rename itself is durable once the folder is flushed.
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::StepId;
    use crate::plan::History;

    #[test]
    fn history_round_trips_through_a_file() {
        let mut h = History::new();
        h.observe(StepId(3), 2.0, 1.0);
        h.observe(StepId(3), 4.0, 1.0);
        h.observe(StepId(1), 1.0, 2.0);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        assert!(Checkpoint::load(&path).unwrap().is_none());
        let cp = Checkpoint {
            format: CHECKPOINT_FORMAT,
            cycle: CycleId(7),
            state: b"mine".to_vec(),
            history: snapshot(&h),
        };
        cp.save(&path).unwrap();
        // Saved again over itself: still one file, no temporary left.
        cp.save(&path).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let back = Checkpoint::load(&path).unwrap().unwrap();
        assert_eq!(back, cp);
        let mut h2 = History::new();
        restore(&mut h2, &back.history);
        assert_eq!(h2.find(&StepId(3)), h.find(&StepId(3)));
        assert_eq!(h2.estimate(&StepId(1)), Some(2.0));
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        std::fs::write(&path, b"{\"format\":1,").unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("cp.json"), "{e}");
    }
}
