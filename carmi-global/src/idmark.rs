//! The job-id high-water mark (`STATE_DIR/job-ids`): a number above every
//! job id the global RM has given, kept on disk ahead of the ids it gives
//! and read at start, so that job ids never go backwards — not even when a
//! damaged journal is cut at its first bad record and forgets the jobs
//! after it. A job's credential is derived from its id (`carmi_api::jobcred`),
//! so an id given twice would hand a new job the credential of an old one
//! still running (issue 38, "credentials that never repeat").
//!
//! The mark moves in steps of [`AHEAD`] ids, one small fsynced write per
//! step, and a restart starts above it: ids skip at most [`AHEAD`] per
//! restart (job 3, then job 67 after a restart).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The mark's file in the state directory.
pub const FILE: &str = "job-ids";

/// How far ahead of the next job id the mark is kept: one extra fsync per
/// this many jobs, and ids skip at most this many at a restart.
pub const AHEAD: u64 = 64;

/// The mark and its file.
#[derive(Debug)]
pub struct IdMark {
    path: PathBuf,
    mark: u64,
}

impl IdMark {
    /// Reads the mark of `state_dir` (0 when there is none yet). A file that
    /// does not hold a number is an error naming it: starting below ids
    /// already given is what the mark is there to prevent.
    pub fn open(state_dir: &Path) -> std::io::Result<IdMark> {
        let path = state_dir.join(FILE);
        let mark = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<u64>().map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}: not a job id ({e}): it keeps job ids from going backwards; restore it, or write a number above every job id this pool gave",
                        path.display()
                    ),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        Ok(IdMark { path, mark })
    }

    /// The lowest job id the global RM may give from now on.
    pub fn floor(&self) -> u64 {
        self.mark
    }

    /// Keeps the mark above `next`, the next job id to be given: written
    /// (and synced) before anything that names such an id goes out.
    pub fn keep_ahead(&mut self, next: u64) -> std::io::Result<()> {
        if next < self.mark {
            return Ok(());
        }
        let mark = next.saturating_add(AHEAD);
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{mark}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        self.mark = mark;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_stays_ahead_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = IdMark::open(dir.path()).unwrap();
        assert_eq!(m.floor(), 0);
        m.keep_ahead(1).unwrap();
        assert_eq!(m.floor(), 1 + AHEAD);
        // Below the mark: nothing written.
        m.keep_ahead(AHEAD / 2).unwrap();
        assert_eq!(m.floor(), 1 + AHEAD);
        m.keep_ahead(1 + AHEAD).unwrap();
        assert_eq!(IdMark::open(dir.path()).unwrap().floor(), 1 + 2 * AHEAD);
        std::fs::write(dir.path().join(FILE), "garbage").unwrap();
        let err = IdMark::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("not a job id"), "{err}");
    }
}
