//! The journal file: [`Record`]s appended to `journal.log` in the state
//! directory and fsync'd, damage saved aside and cut off, and compaction
//! (see the format, damage and compaction rules in
//! [`carmi_global_core::journal`], which holds the records and their pure
//! encoding and parsing).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

pub use carmi_global_core::journal::*;

/// The open journal, appending.
pub struct Journal {
    path: PathBuf,
    file: File,
    live: Live,
    /// Records in the file now.
    in_file: usize,
    /// Where every write is copied before it counts (standby managers).
    mirror: Option<Box<dyn Mirror>>,
}

/// Where the journal's writes are copied before they count: the standby
/// managers (`crate::ha::feed`). Each call runs `local`, this file's own
/// write and sync, inside it, so that a copy of the file taken meanwhile
/// and the stream after it neither miss nor repeat a record.
pub trait Mirror: Send {
    /// `bytes` (`records` encoded records) appended.
    fn append(
        &mut self,
        bytes: &[u8],
        records: usize,
        local: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()>;
    /// The whole file replaced by `bytes` (a compaction).
    fn replace(
        &mut self,
        bytes: &[u8],
        local: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()>;
}

/// A journal is compacted when it holds more than this many records and
/// more than [`COMPACT_RATIO`] times what its live state needs.
const COMPACT_MIN: usize = 4096;
/// See [`COMPACT_MIN`].
const COMPACT_RATIO: usize = 4;

impl Journal {
    /// Opens (creating) `dir/journal.log`, returning what it holds and any
    /// damage, which is saved aside and cut off.
    pub fn open(dir: &Path) -> std::io::Result<(Journal, Vec<Record>, Option<Damage>)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("journal.log");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let (records, damage) = parse(&bytes);
        if let Some(d) = &damage {
            std::fs::write(
                dir.join(format!("journal.damaged-{}", d.offset)),
                &bytes[d.offset..],
            )?;
            let f = OpenOptions::new().write(true).open(&path)?;
            f.set_len(d.offset as u64)?;
            f.sync_all()?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let live = Live::of(&records);
        let mut journal = Journal {
            path,
            file,
            live,
            in_file: records.len(),
            mirror: None,
        };
        // Start the run from a short journal: what the last run left over
        // (ended jobs, exited processes) is never needed again.
        if journal.in_file > journal.live.len() {
            journal.compact()?;
        }
        Ok((journal, records, damage))
    }

    /// Appends records and waits until they are on disk; compacts the file
    /// when it has grown far beyond its live state.
    pub fn append(&mut self, records: &[Record]) -> std::io::Result<()> {
        let text: String = records.iter().map(encode).collect();
        let file = &mut self.file;
        let mut local = || {
            file.write_all(text.as_bytes())?;
            let fsync = &crate::metrics::METRICS.fsync;
            crate::metrics::Metrics::time(fsync, || file.sync_data())
        };
        match &mut self.mirror {
            Some(mirror) => mirror.append(text.as_bytes(), records.len(), &mut local)?,
            None => local()?,
        }
        for r in records {
            self.live.apply(r);
        }
        self.in_file += records.len();
        if self.in_file > COMPACT_MIN && self.in_file > COMPACT_RATIO * self.live.len() {
            // The records are on disk already: a failed compaction costs
            // only space, so it is logged and the old file kept.
            if let Err(e) = self.compact() {
                tracing::warn!(journal = %self.path.display(), "cannot compact the journal: {e}");
            }
        }
        Ok(())
    }

    /// Rewrites the file with only the live state's records, atomically.
    pub fn compact(&mut self) -> std::io::Result<()> {
        let records = self.live.records();
        let text: String = records.iter().map(encode).collect();
        let (path, file) = (&self.path, &mut self.file);
        let mut local = || {
            let tmp = path.with_extension("compact");
            {
                let mut f = File::create(&tmp)?;
                f.write_all(text.as_bytes())?;
                f.sync_all()?;
            }
            std::fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent() {
                File::open(dir)?.sync_all()?;
            }
            *file = OpenOptions::new().append(true).open(path)?;
            Ok(())
        };
        match &mut self.mirror {
            Some(mirror) => mirror.replace(text.as_bytes(), &mut local)?,
            None => local()?,
        }
        tracing::info!(
            journal = %self.path.display(),
            from = self.in_file,
            to = records.len(),
            "journal compacted"
        );
        self.in_file = records.len();
        Ok(())
    }

    /// Copies every write to `mirror` from now on.
    pub fn set_mirror(&mut self, mirror: Box<dyn Mirror>) {
        self.mirror = Some(mirror);
    }

    /// Records in the file now (for tests and logs).
    pub fn records_in_file(&self) -> usize {
        self.in_file
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmi_api::ids::JobId;
    use carmi_global_core::journal::test_records::{sample, submitted};

    #[test]
    fn open_saves_and_cuts_the_damage_then_appends_after_the_good_part() {
        let dir = tempfile::tempdir().unwrap();
        let (records, bytes) = sample();
        let path = dir.path().join("journal.log");
        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let (mut j, got, damage) = Journal::open(dir.path()).unwrap();
        assert_eq!(got, records[..3]);
        let d = damage.unwrap();
        assert!(
            dir.path()
                .join(format!("journal.damaged-{}", d.offset))
                .exists()
        );
        j.append(&[Record::Ended { job: JobId(2) }]).unwrap();
        drop(j);
        let (_, got, damage) = Journal::open(dir.path()).unwrap();
        assert_eq!(damage, None);
        assert_eq!(got.len(), 4);
        assert_eq!(got[3], Record::Ended { job: JobId(2) });
    }

    #[test]
    fn a_long_journal_is_compacted_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _, _) = Journal::open(dir.path()).unwrap();
        let mut all = Vec::new();
        // Many short jobs, one still waiting at the end; 100 per append
        // (each append is an fsync).
        for first in (1..=3000u64).step_by(100) {
            let mut batch = Vec::new();
            for job in first..first + 100 {
                batch.push(submitted(job));
                if job < 3000 {
                    batch.push(Record::Ended { job: JobId(job) });
                }
            }
            j.append(&batch).unwrap();
            all.extend(batch);
        }
        assert!(
            j.records_in_file() <= COMPACT_MIN,
            "compacted on the way: {} of {} records in the file",
            j.records_in_file(),
            all.len()
        );
        drop(j);
        let (j, got, damage) = Journal::open(dir.path()).unwrap();
        assert_eq!(damage, None);
        assert_eq!(Live::of(&got).records(), Live::of(&all).records());
        assert_eq!(j.records_in_file(), 2, "counters and the waiting job");
        assert!(!dir.path().join("journal.compact").exists());
    }
}
