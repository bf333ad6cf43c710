//! Jobs that left the queue, for `carmi history`: the last
//! [`HISTORY_LIMIT`] records, and the files their masters sent back within
//! [`limits::MAX_KEPT_FILES_BYTES`].

use std::collections::VecDeque;

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::limits;
use carmi_proto::msg::JobRecord;

use crate::bounds::HISTORY_LIMIT;

/// The last [`HISTORY_LIMIT`] jobs that left the queue, oldest first.
#[derive(Debug, Default)]
pub(in crate::router) struct History {
    ended: VecDeque<JobRecord>,
    /// Jobs whose returned files are kept, oldest first, with their bytes.
    kept: VecDeque<(JobId, ProcessId, u64)>,
    /// Sum of `kept`'s bytes, at most [`limits::MAX_KEPT_FILES_BYTES`].
    kept_bytes: u64,
}

impl History {
    /// Keeps `record`, forgetting the oldest beyond the limit; returns the
    /// masters whose stored files must go (their record was forgotten, or
    /// newer files need the room).
    pub(in crate::router) fn push(&mut self, record: JobRecord) -> Vec<ProcessId> {
        let mut drop = Vec::new();
        if self.ended.len() == HISTORY_LIMIT
            && let Some(old) = self.ended.pop_front()
            && let Some(f) = old.files
        {
            self.forget_files(old.job);
            drop.push(f.process);
        }
        if let Some(f) = &record.files {
            let bytes: u64 = f.files.iter().map(|x| x.size).sum();
            self.kept.push_back((record.job, f.process, bytes));
            self.kept_bytes += bytes;
        }
        self.ended.push_back(record);
        while self.kept_bytes > limits::MAX_KEPT_FILES_BYTES
            && let Some((job, process, bytes)) = self.kept.pop_front()
        {
            self.kept_bytes -= bytes;
            if let Some(r) = self.ended.iter_mut().find(|r| r.job == job) {
                r.files = None;
            }
            drop.push(process);
        }
        drop
    }

    fn forget_files(&mut self, job: JobId) {
        if let Some(i) = self.kept.iter().position(|(j, _, _)| *j == job) {
            let (_, _, bytes) = self.kept.remove(i).expect("found above");
            self.kept_bytes -= bytes;
        }
    }

    /// The masters whose stored files the records refer to.
    pub(in crate::router) fn file_owners(&self) -> impl Iterator<Item = ProcessId> + '_ {
        self.ended
            .iter()
            .filter_map(|r| r.files.as_ref().map(|f| f.process))
    }

    /// Every record, or `job`'s only.
    pub(in crate::router) fn select(&self, job: Option<JobId>) -> Vec<JobRecord> {
        self.ended
            .iter()
            .filter(|r| job.is_none_or(|j| r.job == j))
            .cloned()
            .collect()
    }
}
