//! Checkpoints across vacates, as HTCondor's self-checkpointing jobs and
//! `when_to_transfer_output = ON_EXIT_OR_EVICT`: a master that exits with
//! its `checkpoint_exit_code` (on its own, or given SIGTERM and the vacate
//! grace by its machine's owner), or a vacated master whose job transfers
//! its output on eviction, has sent its files back as it exited (the local
//! RM sends a master's files before its `Exited`). The job leaves the
//! running at once (held, "saving its checkpoint"); the driver copies the
//! files into the executable store by content ([`Output::SaveCheckpoint`])
//! and tells [`Router::on_checkpoint_saved`]; the job then goes back to the
//! queue, and its next master finds the files in its sandbox before it runs
//! (they travel as a placed master's input files do).

use std::time::Duration;

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::msg::{ExecutableRef, ExitStatus, JobFiles, ReturnedFile};
use carmi_proto::submit::JobSpec;
use tracing::{info, warn};

use super::exit_words;
use crate::journal::Record;
use crate::router::{Output, Router};

/// A job's last checkpoint.
#[derive(Clone, Debug, Default)]
pub(in crate::router) struct Checkpoint {
    /// Its files, in the executable store.
    pub files: Vec<ExecutableRef>,
    /// When it was saved (router time; `None`: before a restart).
    pub saved: Option<Duration>,
}

/// The names of the files in a master's sandbox that make its checkpoint:
/// its `transfer_checkpoint_files`, else its `transfer_output_files` (as
/// HTCondor does), by file name.
pub(in crate::router) fn checkpoint_names(spec: &JobSpec) -> Vec<String> {
    if !spec.transfer_checkpoint_files.is_empty() {
        return spec.transfer_checkpoint_files.clone();
    }
    // Only those that come back into the sandbox by name.
    spec.transfer_output_files
        .iter()
        .filter(|f| !f.contains('/'))
        .cloned()
        .collect()
}

/// True when a master of `spec` that ended with `status` (`vacated` by its
/// machine's owner or not) left a checkpoint to keep.
pub(in crate::router) fn leaves_checkpoint(
    spec: &JobSpec,
    status: &ExitStatus,
    vacated: bool,
) -> bool {
    let by_code = matches!((spec.checkpoint_exit_code, status),
        (Some(c), ExitStatus::Code(s)) if c == *s);
    let by_evict = vacated && spec.output_on_evict && *status != ExitStatus::Code(0);
    by_code || by_evict
}

impl Router {
    /// The master `process` of `job` ended on `machine` leaving a
    /// checkpoint: kept, then the job goes back to the queue.
    pub(in crate::router) fn master_checkpointed(
        &mut self,
        (process, job): (ProcessId, JobId),
        machine: &str,
        (status, cpu_seconds): (ExitStatus, f64),
        vacated: bool,
    ) {
        self.exit_process(process, status.clone(), cpu_seconds);
        let Some(sub) = self.jobs.submitted.get_mut(&job) else {
            return;
        };
        let why = if vacated {
            sub.tries.evictions += 1;
            format!(
                "vacated by the owner of {machine} (the machine's PREEMPT policy); the master ended with {}",
                exit_words(&status)
            )
        } else {
            format!(
                "the master wrote a checkpoint on {machine} and exited with its checkpoint_exit_code"
            )
        };
        let names = checkpoint_names(&sub.spec);
        // All it sent, as stored (by position); the checkpoint is some of them.
        let sent = sub.returned.take().filter(|r| r.process == process);
        let files: Vec<&ReturnedFile> = sent
            .iter()
            .flat_map(|r| &r.files)
            .filter(|f| names.contains(&f.name))
            .collect();
        let cut = files.iter().find(|f| f.truncated).map(|f| f.name.clone());
        let found = !files.is_empty();
        if let Some(cut) = cut {
            // Half a checkpoint is worse than none: the job starts over.
            warn!(job = %job, file = cut, "a checkpoint file was cut to the size limit; the checkpoint is not kept");
            let why = format!(
                "{why}; its checkpoint is not kept: {cut} is above the size the pool carries back"
            );
            self.drop_sent(sent);
            return self.requeue(job, process, machine, why);
        }
        let (true, Some(sent)) = (found, &sent) else {
            let why = format!("{why}; it left no checkpoint file ({})", names.join(", "));
            self.drop_sent(sent);
            return self.requeue(job, process, machine, why);
        };
        let sent = sent.clone();
        if !self.park(job, process, &format!("{why}; saving its checkpoint")) {
            return self.drop_sent(Some(sent));
        }
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.tries.saving = Some((machine.to_string(), why));
        }
        // The driver drops `sent` from the store of returned files once copied.
        self.out.push(Output::SaveCheckpoint {
            job,
            files: sent,
            names,
        });
    }

    /// Has the files a master sent back dropped from their store: they are
    /// no job's output (its next master sends its own).
    fn drop_sent(&mut self, sent: Option<JobFiles>) {
        if let Some(f) = sent {
            self.out.push(Output::DropFiles { process: f.process });
        }
    }

    /// The driver stored a job's checkpoint ([`Output::SaveCheckpoint`]) in
    /// the executable store, or could not: the job goes back to the queue,
    /// with the checkpoint for its next master if it was stored.
    pub fn on_checkpoint_saved(&mut self, job: JobId, result: Result<Vec<ExecutableRef>, String>) {
        let Some((machine, mut why)) = self
            .jobs
            .submitted
            .get_mut(&job)
            .and_then(|s| s.tries.saving.take())
        else {
            // Removed meanwhile.
            return;
        };
        match result {
            Ok(files) => {
                for f in &files {
                    self.on_executable_stored(f);
                }
                let bytes: u64 = files.iter().map(|f| f.size).sum();
                info!(job = %job, files = files.len(), bytes, "checkpoint saved");
                why.push_str(&format!(
                    "; its checkpoint ({} file{}, {bytes} bytes) goes to its next start",
                    files.len(),
                    if files.len() == 1 { "" } else { "s" }
                ));
                self.out.push(Output::Journal(Record::Checkpoint {
                    job,
                    files: files.clone(),
                }));
                self.log_event(
                    job,
                    EventKind::Checkpointed {
                        files: files.len() as u32,
                        bytes,
                    },
                );
                if let Some(s) = self.jobs.submitted.get_mut(&job) {
                    s.tries.checkpoints += 1;
                    s.tries.checkpoint = Some(Checkpoint {
                        files,
                        saved: Some(self.now),
                    });
                }
            }
            Err(e) => {
                warn!(job = %job, "the checkpoint could not be saved: {e}");
                why.push_str(&format!("; its checkpoint could not be kept: {e}"));
            }
        }
        self.unpark(job, &machine, why);
        self.flush();
    }

    /// Replays a `Checkpoint` record.
    pub(in crate::router) fn recover_checkpoint(&mut self, job: JobId, files: Vec<ExecutableRef>) {
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.tries.checkpoint = Some(Checkpoint { files, saved: None });
        }
    }

    /// What a new master of `job` starts with from its last checkpoint.
    pub(in crate::router) fn checkpoint_inputs(&self, job: JobId) -> Vec<ExecutableRef> {
        let Some(c) = self
            .jobs
            .submitted
            .get(&job)
            .and_then(|s| s.tries.checkpoint.as_ref())
        else {
            return Vec::new();
        };
        if let Some(saved) = c.saved {
            let age = self.now.saturating_sub(saved).as_secs();
            info!(job = %job, files = c.files.len(), age_s = age, "the master starts from its checkpoint");
        }
        c.files.clone()
    }
}
