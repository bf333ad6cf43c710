//! Admin requests on submitted jobs (`carmi submit`, `rm`, `q`,
//! `q -analyze`, `history`, `status -l`). The job's master runs on the
//! machine it is pinned to (`--machine`), else on the submit machine when
//! that is in the pool, else on a machine the global RM picks among those
//! matching the job's `master_requirements` (fewest masters first; the job
//! waits while none matches): see `master.rs` and `anywhere.rs`. A master
//! placed away from the submit machine writes its output in its sandbox,
//! and its local RM sends it back with `transfer_output_files` when it
//! exits ([`ToGlobal::MasterFiles`]), for `carmi wait`/`carmi fetch` to
//! write into the submit directory. Every job that leaves the queue is kept
//! in a bounded history (journaled, `router/reports/history.rs`), with how
//! it ended: a master that cannot start ends its job with the reason.
//!
//! [`ToGlobal::MasterFiles`]: carmi_proto::msg::ToGlobal::MasterFiles

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::limits;
use carmi_proto::msg::{
    ExitStatus, Failure, FailureCode, FromGlobal, JobAnalysis, JobEnd, JobRecord, JobStatus,
    JobUsage, ProcessState,
};
use tracing::{info, warn};

use super::Submitted;
use crate::alloc::Phase;
use crate::journal::Record;
use crate::router::{LinkId, Output, Router};

impl Router {
    pub(in crate::router) fn admin_fail(
        &mut self,
        link: LinkId,
        code: FailureCode,
        message: String,
    ) {
        self.send(link, FromGlobal::AdminFailed(Failure { code, message }));
    }

    /// Keeps `sub`, just accepted (submitted or replayed), and opens its
    /// event log.
    pub(in crate::router) fn keep_submitted(&mut self, job: JobId, sub: Submitted) {
        self.reports.events.open(job, sub.spec.log.clone());
        self.jobs.submitted.insert(job, sub);
        self.index_policy(job);
    }

    /// Whether `job` is in the queue; if not, the admin on `link` is told so.
    fn in_queue(&mut self, link: LinkId, job: JobId) -> bool {
        if self.alloc.has_job(job) {
            return true;
        }
        let message = format!(
            "job {} is not in the queue (it ended or never existed)",
            job.0
        );
        self.admin_fail(link, FailureCode::Invalid, message);
        false
    }

    /// `carmi rm`.
    pub(in crate::router) fn remove_job(&mut self, link: LinkId, job: JobId) {
        if !self.in_queue(link, job) {
            return;
        }
        info!(job = %job, "job removed by an administrator");
        self.record_end(job, JobEnd::Removed);
        self.end_job(job);
        self.send(link, FromGlobal::Removed { job });
    }

    /// One job for `carmi q`.
    fn job_status(&self, job: JobId) -> JobStatus {
        let phase = self.alloc.job_phase(job).unwrap_or(Phase::Attached);
        let sub = self.jobs.submitted.get(&job);
        let (cluster, proc) = self.cluster_and_proc(job);
        JobStatus {
            job,
            cluster,
            proc,
            owner: sub
                .map(|s| s.owner.clone())
                .unwrap_or_else(|| self.alloc.job_owner(job).to_string()),
            submitted_unix: sub.map_or(0, |s| s.submitted_unix),
            state: phase.name().to_string(),
            executable: sub.map(|s| s.executable.name.clone()).unwrap_or_default(),
            master: sub.and_then(|s| s.master),
            note: match phase {
                Phase::Waiting => self
                    .alloc
                    .impossible(job)
                    .or_else(|| self.alloc.concurrency_wait(job))
                    .or_else(|| sub.and_then(|s| s.tries.requeued.clone())),
                Phase::Held => sub.and_then(|s| s.held.clone()),
                _ => sub.and_then(|s| self.master_unsent(s)),
            },
            classes: self.alloc.class_status(job),
            user: Some(self.user_share(job)),
            attrs: self.attrs_with_usage(job),
        }
    }

    /// The ids an attaching process declares (chosen by the application):
    /// one above [`limits::MAX_ID`] is dropped with a warning, so the process
    /// attaches as if it had not named it (a new job, a fresh process id)
    /// and the id counters never approach their end.
    pub(in crate::router) fn sane_attach_ids(
        &self,
        machine: &str,
        job: Option<JobId>,
        process: Option<ProcessId>,
    ) -> (Option<JobId>, Option<ProcessId>) {
        let keep = |field: &str, id: u64| match limits::check_id(field, id) {
            Ok(()) => true,
            Err(e) => {
                warn!(machine, "AppAttach: {e}; ignored");
                false
            }
        };
        (
            job.filter(|j| keep("job", j.0)),
            process.filter(|p| keep("process", p.0)),
        )
    }

    /// `carmi history`.
    pub(in crate::router) fn history(&mut self, link: LinkId, job: Option<JobId>) {
        let records = self.reports.history.select(job);
        self.send(link, FromGlobal::History(records));
    }

    /// Keeps how `job` ended, in the history and the journal; called before
    /// the job is ended, while what is known of it is still there. A job
    /// already gone is not recorded twice.
    pub(in crate::router) fn record_end(&mut self, job: JobId, end: JobEnd) {
        if !self.alloc.has_job(job) {
            return;
        }
        let sub = self.jobs.submitted.get(&job);
        let end = match end {
            JobEnd::FailedToStart(reason) => JobEnd::FailedToStart(limits::cut_reason(&reason)),
            JobEnd::Completed(ExitStatus::FailedToStart(reason)) => {
                JobEnd::FailedToStart(limits::cut_reason(&reason))
            }
            other => other,
        };
        if let JobEnd::FailedToStart(reason) = &end {
            warn!(job = %job, "the master could not be started: {reason}");
        }
        let (cluster, proc) = self.cluster_and_proc(job);
        let mut record = JobRecord {
            cluster,
            proc,
            job,
            owner: sub
                .map(|s| s.owner.clone())
                .unwrap_or_else(|| self.alloc.job_owner(job).to_string()),
            executable: sub.map(|s| s.executable.name.clone()).unwrap_or_default(),
            submitted_unix: sub.map_or(0, |s| s.submitted_unix),
            ended_unix: self.config.started_unix + self.now.as_secs(),
            end,
            files: sub.and_then(|s| s.returned.clone()),
            usage: self.usage_of(job),
        };
        if matches!(record.end, JobEnd::FailedToStart(_)) {
            // Sent to its machine, never run: no wall time to speak of.
            record.usage.started_unix = 0;
        }
        self.log_event(
            job,
            EventKind::Ended {
                end: record.end.clone(),
            },
        );
        self.out
            .push(Output::Journal(Record::History(Box::new(record.clone()))));
        for process in self.reports.history.push(record) {
            self.out.push(Output::DropFiles { process });
        }
    }

    /// What `job` used: when its master started, the CPU time of its
    /// processes that exited, and the machines they ran on.
    fn usage_of(&self, job: JobId) -> JobUsage {
        let mut cpu = 0.0;
        let mut machines = std::collections::BTreeSet::new();
        for p in self.procs.of_job(job) {
            let Some(proc) = self.procs.find(p) else {
                continue;
            };
            if let ProcessState::Exited { cpu_seconds, .. } = &proc.state {
                cpu += cpu_seconds.max(0.0);
            }
            if let Some(m) = proc.host.and_then(|h| self.alloc.host_machine(h)) {
                machines.insert(m.to_string());
            }
        }
        let sub = self.jobs.submitted.get(&job);
        if let Some(s) = sub.filter(|s| s.master.is_some() && !s.machine.is_empty()) {
            machines.insert(s.machine.clone());
        }
        JobUsage {
            started_unix: sub.map_or(0, |s| s.started_unix),
            cpu_ms: (cpu * 1000.0).round() as u64,
            machines: machines.into_iter().collect(),
            starts: sub.map_or(0, |s| s.tries.starts),
            evictions: sub.map_or(0, |s| s.tries.evictions),
            checkpoints: sub.map_or(0, |s| s.tries.checkpoints),
            memory_peak_kib: self.memory_peak(job),
        }
    }

    /// `carmi q`.
    pub(in crate::router) fn queue(&mut self, link: LinkId) {
        let jobs = self.queue_status();
        self.send(link, FromGlobal::Queue(jobs));
    }

    /// Every job in the queue as `carmi q` shows it (the answer to
    /// `ToGlobal::Queue`), for drivers that show the queue without a
    /// connection (the global RM's web dashboard).
    pub fn queue_status(&mut self) -> Vec<JobStatus> {
        self.alloc.judge_waiting();
        self.alloc
            .job_ids()
            .into_iter()
            .map(|j| self.job_status(j))
            .collect()
    }

    /// `carmi q -analyze`.
    pub(in crate::router) fn analyze(&mut self, link: LinkId, job: JobId) {
        if !self.in_queue(link, job) {
            return;
        }
        self.alloc.judge_waiting();
        let analysis = JobAnalysis {
            job: self.job_status(job),
            queued_ahead: self.alloc.queued_ahead(job).unwrap_or(0),
            classes: self.alloc.analyze(job),
        };
        self.send(link, FromGlobal::Analysis(analysis));
    }
}
