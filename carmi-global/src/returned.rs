//! Files that jobs' masters sent back for their submit directories
//! (`output`, `error`, `transfer_output_files`), kept under
//! `STATE_DIR/returned/<master process id>/<index>` until `carmi wait` or
//! `carmi fetch` reads them, and deleted when the job's history record is
//! dropped (or the store outgrows [`MAX_KEPT_FILES_BYTES`]: the router keeps
//! the account). Files are named by their index in the message, never by the
//! name a local RM sent, so that no name can reach outside the directory.
//! Blocking file I/O: the driver calls it from `spawn_blocking`.
//!
//! [`MAX_KEPT_FILES_BYTES`]: carmi_api::limits::MAX_KEPT_FILES_BYTES

use std::path::{Path, PathBuf};

use carmi_api::ids::ProcessId;
use carmi_api::limits::{MAX_RETURNED_BYTES, MAX_RETURNED_FILES};
use carmi_api::msg::{JobFiles, ReturnedFile};

/// The store of returned files.
#[derive(Debug)]
pub struct ReturnedStore {
    dir: PathBuf,
}

impl ReturnedStore {
    /// Opens (creating) `state_dir/returned`.
    pub fn open(state_dir: &Path) -> std::io::Result<ReturnedStore> {
        let dir = state_dir.join("returned");
        std::fs::create_dir_all(&dir)?;
        Ok(ReturnedStore { dir })
    }

    fn master_dir(&self, process: ProcessId) -> PathBuf {
        self.dir.join(process.0.to_string())
    }

    /// Checks what a local RM sent (count, sizes against the payload, the
    /// limits) and writes each file; why it is refused otherwise.
    pub fn put(
        &self,
        process: ProcessId,
        files: &[ReturnedFile],
        payload: &[u8],
    ) -> Result<(), String> {
        if files.len() > MAX_RETURNED_FILES {
            return Err(format!(
                "{} files sent back; at most {MAX_RETURNED_FILES} are accepted",
                files.len()
            ));
        }
        let total = files
            .iter()
            .try_fold(0u64, |acc, f| acc.checked_add(f.size))
            .ok_or("the file sizes overflow")?;
        if total > MAX_RETURNED_BYTES {
            return Err(format!(
                "{total} bytes sent back; at most {MAX_RETURNED_BYTES} are accepted"
            ));
        }
        if total != payload.len() as u64 {
            return Err(format!(
                "the files add up to {total} bytes but {} came",
                payload.len()
            ));
        }
        let dir = self.master_dir(process);
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let mut at = 0usize;
        for (i, f) in files.iter().enumerate() {
            let end = at + f.size as usize;
            let path = dir.join(i.to_string());
            std::fs::write(&path, &payload[at..end]).map_err(|e| io(&path, e))?;
            at = end;
        }
        Ok(())
    }

    /// The bytes of `files`, in order, as one payload.
    pub fn read(&self, files: &JobFiles) -> Result<Vec<u8>, String> {
        let dir = self.master_dir(files.process);
        let mut out = Vec::new();
        for (i, f) in files.files.iter().enumerate() {
            let path = dir.join(i.to_string());
            let bytes = std::fs::read(&path).map_err(|e| {
                format!(
                    "the stored copy of {} is gone ({}: {e})",
                    f.dest,
                    path.display()
                )
            })?;
            if bytes.len() as u64 != f.size {
                return Err(format!(
                    "the stored copy of {} has {} bytes, not {}",
                    f.dest,
                    bytes.len(),
                    f.size
                ));
            }
            out.extend_from_slice(&bytes);
        }
        Ok(out)
    }

    /// Deletes every master's files but `keep`'s: run at start, it removes
    /// what a crash left between storing files and recording them, or
    /// between a history record's drop and its files' deletion.
    pub fn retain(&self, keep: &std::collections::HashSet<ProcessId>) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let kept = name
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|p| keep.contains(&ProcessId(p)));
            if !kept {
                let path = entry.path();
                tracing::info!(path = %path.display(), "deleting returned files no job refers to");
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
    }

    /// Deletes what master `process` sent back (nothing there is no error).
    pub fn remove(&self, process: ProcessId) {
        let dir = self.master_dir(process);
        if dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(path = %dir.display(), "cannot delete returned files: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, size: u64) -> ReturnedFile {
        ReturnedFile {
            name: name.into(),
            size,
            truncated: false,
            dest: format!("/submit/{name}"),
        }
    }

    #[test]
    fn files_round_trip_and_go_away() {
        let tmp = tempfile::tempdir().unwrap();
        let store = ReturnedStore::open(tmp.path()).unwrap();
        let files = vec![file("stdout", 3), file("../../etc/passwd", 2)];
        store.put(ProcessId(7), &files, b"abcde").unwrap();
        let job = JobFiles {
            process: ProcessId(7),
            files,
        };
        assert_eq!(store.read(&job).unwrap(), b"abcde");
        // Stored by index: a hostile name writes nothing outside the store.
        assert!(tmp.path().join("returned/7/1").is_file());
        store.put(ProcessId(8), &[file("x", 1)], b"x").unwrap();
        store.retain(&[ProcessId(8)].into_iter().collect());
        assert!(store.read(&job).unwrap_err().contains("gone"));
        assert!(tmp.path().join("returned/8/0").is_file());
        store.remove(ProcessId(8));
        assert!(!tmp.path().join("returned/8").exists());
    }

    #[test]
    fn a_payload_that_disagrees_with_the_sizes_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = ReturnedStore::open(tmp.path()).unwrap();
        let e = store
            .put(ProcessId(1), &[file("a", 10)], b"short")
            .unwrap_err();
        assert!(e.contains("10 bytes but 5"), "{e}");
        let e = store
            .put(ProcessId(1), &[file("a", u64::MAX), file("b", 2)], b"")
            .unwrap_err();
        assert!(e.contains("overflow"), "{e}");
    }
}
