//! The files of the executable store the router knows of (uploaded masters,
//! workers' executables, input files, checkpoints), and their clean-up
//! (issue 38): a file no live job refers to is removed a while after its
//! last use, so that uploads nobody submits, and the files of ended jobs,
//! do not fill the manager's disk. A live job refers to its master's
//! executable, its input files, its checkpoint, and whatever its processes
//! spawned; the others are kept [`RouterConfig::store_keep`] after their
//! last use (upload, submit, spawn) and then dropped ([`Output::DropStored`]).
//!
//! What a job spawned is not journaled: after a restart every file counts
//! as used at the restart, so a job's workers' executable is safe for
//! `store_keep` (a day by default) before its next spawn must find it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use carmi_proto::ids::JobId;
use carmi_proto::msg::ExecutableRef;
use tracing::info;

use super::{Output, Router};

/// Default for [`RouterConfig::store_keep`](super::RouterConfig::store_keep).
pub const DEFAULT_STORE_KEEP: Duration = Duration::from_secs(24 * 3600);

/// How often the router looks for files to drop.
pub const STORE_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// One stored file.
#[derive(Clone, Copy, Debug)]
struct Entry {
    size: u64,
    /// Router time of its last upload, submit or spawn.
    used: Duration,
}

/// The store's files as the router sees them.
#[derive(Debug, Default)]
pub(super) struct StoredFiles {
    files: HashMap<String, Entry>,
    /// What each live job's processes spawned, by hash.
    spawned: HashMap<JobId, HashSet<String>>,
    /// When the last sweep ran.
    swept: Duration,
}

impl StoredFiles {
    /// The size of the stored file `sha256`, if stored.
    pub(super) fn size(&self, sha256: &str) -> Option<u64> {
        self.files.get(sha256).map(|e| e.size)
    }

    /// Whether `sha256` is stored.
    pub(super) fn has(&self, sha256: &str) -> bool {
        self.files.contains_key(sha256)
    }

    /// `sha256` was used at `now`.
    pub(super) fn touch(&mut self, sha256: &str, now: Duration) {
        if let Some(e) = self.files.get_mut(sha256) {
            e.used = e.used.max(now);
        }
    }

    /// A process of `job` was spawned from `sha256` at `now`: kept while the job lives.
    pub(super) fn spawned(&mut self, job: JobId, sha256: &str, now: Duration) {
        self.touch(sha256, now);
        let of_job = self.spawned.entry(job).or_default();
        if !of_job.contains(sha256) {
            of_job.insert(sha256.to_string());
        }
    }

    /// `job` ended: what it spawned is kept only for its grace.
    pub(super) fn job_ended(&mut self, job: JobId) {
        self.spawned.remove(&job);
    }
}

impl Router {
    /// An executable (or input file) is in the store (`Upload`, or found
    /// at start).
    pub fn on_executable_stored(&mut self, exe: &ExecutableRef) {
        let entry = Entry {
            size: exe.size,
            used: self.now,
        };
        self.stored.files.insert(exe.sha256.clone(), entry);
    }

    /// Drops the stored files that no live job refers to and that were last
    /// used more than `store_keep` ago; at most every [`STORE_SWEEP_EVERY`].
    pub(super) fn sweep_stored(&mut self) {
        if self.now.saturating_sub(self.stored.swept) < STORE_SWEEP_EVERY {
            return;
        }
        self.stored.swept = self.now;
        let referred = self.referred_files();
        let keep = self.config.store_keep;
        let now = self.now;
        let stale: Vec<String> = (self.stored.files.iter())
            .filter(|(sha, e)| {
                now.saturating_sub(e.used) > keep && !referred.contains(sha.as_str())
            })
            .map(|(sha, _)| sha.clone())
            .collect();
        for sha256 in stale {
            let size = self.stored.files.remove(&sha256).map_or(0, |e| e.size);
            info!(sha256 = %sha256, size, "a stored file no live job refers to is removed");
            self.out.push(Output::DropStored { sha256 });
        }
    }

    /// The hashes live jobs refer to.
    fn referred_files(&self) -> HashSet<&str> {
        let mut referred: HashSet<&str> = HashSet::new();
        for sub in self.jobs.submitted.values() {
            referred.insert(&sub.executable.sha256);
            referred.extend(sub.spec.input_refs.iter().map(|r| r.sha256.as_str()));
            if let Some(c) = &sub.tries.checkpoint {
                referred.extend(c.files.iter().map(|f| f.sha256.as_str()));
            }
        }
        for of_job in self.stored.spawned.values() {
            referred.extend(of_job.iter().map(String::as_str));
        }
        referred
    }
}
