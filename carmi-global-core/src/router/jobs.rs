//! Submitted jobs at the router: admin requests (`carmi submit`, `rm`, `q`,
//! `q -analyze`, `history`, `status -l`), and the job's master, which runs
//! outside the slots of a machine and whose exit ends the job. The master
//! runs on the machine it is pinned to (`--machine`), else on the submit
//! machine when that is in the pool, else on a machine the global RM picks
//! among those matching the job's `master_requirements` (fewest masters
//! first; the job waits while none matches). A master placed away from the
//! submit machine writes its output in its sandbox, and its local RM sends
//! it back with `transfer_output_files` when it exits ([`ToGlobal::MasterFiles`]),
//! for `carmi wait`/`carmi fetch` to write into the submit directory. Every
//! job that leaves the queue is kept in a bounded history (journaled), with
//! how it ended: a master that cannot start ends its job with the reason.
//! Replaying the journal after a restart is in `recover.rs`.
//!
//! [`ToGlobal::MasterFiles`]: carmi_proto::msg::ToGlobal::MasterFiles

use std::collections::VecDeque;

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::limits;
use carmi_proto::msg::{
    ExecutableRef, ExitStatus, Failure, FailureCode, FromGlobal, JobAnalysis, JobEnd, JobFiles,
    JobRecord, JobStatus, JobUsage, ProcessState, SubmitRequest,
};
use carmi_proto::submit::{JobSpec, OnImpossible};
use classad::ClassAd;
use tracing::{info, warn};

use crate::bounds::HISTORY_LIMIT;

use super::anywhere::{master_ad, return_plan};
use super::{LinkId, Output, Router, new_proc};
use crate::alloc::{ClassLimits, Phase};
use crate::journal::Record;

/// What the router keeps of a submitted job.
#[derive(Clone, Debug)]
pub(super) struct Submitted {
    pub owner: String,
    /// The machine whose local RM runs the master (empty while a master the
    /// global RM places finds no machine).
    pub machine: String,
    /// The submit machine's name (or the machine the master is pinned to).
    pub submit_machine: String,
    /// The master may run elsewhere than `submit_machine` (not pinned).
    pub anywhere: bool,
    /// The global RM placed the master away from the submit machine: its
    /// output and error come back as files rather than being written in place.
    pub placed: bool,
    /// `[Requirements = master_requirements]`, for placing the master.
    pub master_ad: Option<ClassAd>,
    /// What the master sent back before it exited.
    pub returned: Option<JobFiles>,
    pub executable: ExecutableRef,
    /// Macros expanded.
    pub spec: JobSpec,
    pub submitted_unix: u64,
    /// The master, once started.
    pub master: Option<ProcessId>,
    /// When the master was sent to its machine (Unix seconds), for the
    /// job's wall time in `carmi history`; not journaled.
    pub started_unix: u64,
    /// Why it is held (`carmi hold`), while it is.
    pub held: Option<String>,
    /// Its masters' starts, failures and evictions (`router/requeue.rs`).
    pub tries: super::requeue::Tries,
}

/// The last [`HISTORY_LIMIT`] jobs that left the queue, oldest first.
#[derive(Debug, Default)]
pub(super) struct History {
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
    pub(super) fn push(&mut self, record: JobRecord) -> Vec<ProcessId> {
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
    pub(super) fn file_owners(&self) -> impl Iterator<Item = ProcessId> + '_ {
        self.ended
            .iter()
            .filter_map(|r| r.files.as_ref().map(|f| f.process))
    }

    /// Every record, or `job`'s only.
    pub(super) fn select(&self, job: Option<JobId>) -> Vec<JobRecord> {
        self.ended
            .iter()
            .filter(|r| job.is_none_or(|j| r.job == j))
            .cloned()
            .collect()
    }
}

impl Router {
    pub(super) fn admin_fail(&mut self, link: LinkId, code: FailureCode, message: String) {
        self.send(link, FromGlobal::AdminFailed(Failure { code, message }));
    }

    /// `carmi submit`.
    pub(super) fn submit(&mut self, link: LinkId, req: SubmitRequest) {
        // First: nothing below may be sized by a number the client chose
        // before it is known to be within its limit.
        if let Err(f) = limits::check_submit(&req) {
            warn!(owner = %req.owner.chars().take(64).collect::<String>(), "submit refused: {}", f.message);
            return self.admin_fail(link, f.code, f.message);
        }
        if !self.stored.has(&req.executable.sha256) {
            let message = format!(
                "executable {} ({}) was not uploaded before the submit",
                req.executable.name, req.executable.sha256
            );
            return self.admin_fail(link, FailureCode::BadExecutable, message);
        }
        if let Some(r) = req
            .spec
            .input_refs
            .iter()
            .find(|r| !self.stored.has(&r.sha256))
        {
            let message = format!(
                "transfer_input_files: {} ({}) was not uploaded before the submit",
                r.name, r.sha256
            );
            return self.admin_fail(link, FailureCode::BadExecutable, message);
        }
        self.stored.touch(&req.executable.sha256, self.now);
        for r in &req.spec.input_refs {
            self.stored.touch(&r.sha256, self.now);
        }
        if !req.anywhere && !self.alloc.is_online(&req.machine) {
            let message = format!(
                "machine `{}` is not in the pool (its local RM runs the master); name a machine of `carmi status` with --machine",
                req.machine
            );
            return self.admin_fail(link, FailureCode::Unavailable, message);
        }
        let job = JobId(self.next_job);
        // `$(Cluster)` grows with the job id: what `exec` will be given is
        // known only now, and is refused here rather than at the master's start.
        let spec = req.spec.expand(job.0);
        if let Err(e) = limits::check_command_line("arguments", &spec.arguments, &spec.environment)
        {
            let message = format!("{e}, once $(Cluster) is expanded to {}", job.0);
            return self.admin_fail(link, FailureCode::Invalid, message);
        }
        let master_ad = match master_ad(&req.spec) {
            Ok(ad) => ad,
            Err(message) => return self.admin_fail(link, FailureCode::Invalid, message),
        };
        let limits = class_limits(&req.spec);
        if let Err(f) = self.alloc.submit_job(job, &req.owner, &limits) {
            return self.admin_fail(link, f.code, f.message);
        }
        self.alloc.set_job_attributes(job, &req.spec.attributes);
        // Judged with the job's own attributes, which machines' `Requirements` read.
        let impossible = match req.spec.on_impossible {
            OnImpossible::Wait => None,
            OnImpossible::Hold | OnImpossible::Reject => self.alloc.impossible(job),
        };
        if let Some(why) = &impossible
            && req.spec.on_impossible == OnImpossible::Reject
        {
            // Never accepted: nothing journaled, and the id is given again.
            self.alloc.on_job_ended(job);
            let message = format!("{why} (on_impossible = reject)");
            info!(owner = req.owner, "submit refused: {message}");
            return self.admin_fail(link, FailureCode::Unavailable, message);
        }
        self.next_job += 1;
        info!(job = %job, owner = req.owner, machine = req.machine, "job submitted");
        // On disk before the answer: the driver fsyncs it before sending on.
        self.out.push(Output::Journal(Record::Submitted {
            job,
            request: Box::new(req.clone()),
        }));
        self.submitted.insert(
            job,
            Submitted {
                owner: req.owner,
                machine: req.machine.clone(),
                submit_machine: req.machine,
                anywhere: req.anywhere,
                placed: false,
                master_ad,
                returned: None,
                executable: req.executable,
                spec,
                submitted_unix: req.submitted_unix,
                master: None,
                started_unix: 0,
                held: None,
                tries: Default::default(),
            },
        );
        self.events.open(job, self.submitted[&job].spec.log.clone());
        let owner = self.submitted[&job].owner.clone();
        self.log_event(job, EventKind::Submitted { owner });
        if let Some(why) = impossible {
            self.hold_at_submit(job, &why);
        }
        self.send(link, FromGlobal::Submitted { job });
    }

    /// `carmi rm`.
    pub(super) fn remove_job(&mut self, link: LinkId, job: JobId) {
        if !self.alloc.has_job(job) {
            let message = format!(
                "job {} is not in the queue (it ended or never existed)",
                job.0
            );
            return self.admin_fail(link, FailureCode::Invalid, message);
        }
        info!(job = %job, "job removed by an administrator");
        self.record_end(job, JobEnd::Removed);
        self.end_job(job);
        self.send(link, FromGlobal::Removed { job });
    }

    /// One job for `carmi q`.
    fn job_status(&self, job: JobId) -> JobStatus {
        let phase = self.alloc.job_phase(job).unwrap_or(Phase::Attached);
        let sub = self.submitted.get(&job);
        JobStatus {
            job,
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
                    .or_else(|| sub.and_then(|s| s.tries.requeued.clone())),
                Phase::Held => sub.and_then(|s| s.held.clone()),
                _ => sub.and_then(|s| self.master_unsent(s)),
            },
            classes: self.alloc.class_status(job),
            user: Some(self.user_share(job)),
            attrs: self.attrs_with_usage(job),
        }
    }

    /// Why a started job's master is not running yet: its machine is away,
    /// so `SpawnMaster` waits for it (while the job holds its hosts).
    fn master_unsent(&self, sub: &Submitted) -> Option<String> {
        let p = sub.master?;
        if sub.machine.is_empty() {
            let wanted = sub.spec.master_requirements.as_deref().unwrap_or("true");
            return Some(format!(
                "the master waits for a machine of the pool that matches master_requirements = {wanted} and whose owner policy lets it start now"
            ));
        }
        if self.unplaced.contains(&p) {
            return Some(format!(
                "the master waits for the owner policy of machine `{}` to let it start",
                sub.machine
            ));
        }
        (!self.sent_masters.contains(&p) && self.ready_link(&sub.machine).is_none())
            .then(|| format!("the master waits for machine `{}` to connect", sub.machine))
    }

    /// The ids an attaching process declares (chosen by the application):
    /// one above [`limits::MAX_ID`] is dropped with a warning, so the process
    /// attaches as if it had not named it (a new job, a fresh process id)
    /// and the id counters never approach their end.
    pub(super) fn sane_attach_ids(
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
    pub(super) fn history(&mut self, link: LinkId, job: Option<JobId>) {
        let records = self.history.select(job);
        self.send(link, FromGlobal::History(records));
    }

    /// Keeps how `job` ended, in the history and the journal; called before
    /// the job is ended, while what is known of it is still there. A job
    /// already gone is not recorded twice.
    pub(super) fn record_end(&mut self, job: JobId, end: JobEnd) {
        if !self.alloc.has_job(job) {
            return;
        }
        let sub = self.submitted.get(&job);
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
        let mut record = JobRecord {
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
        for process in self.history.push(record) {
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
        let sub = self.submitted.get(&job);
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
    pub(super) fn queue(&mut self, link: LinkId) {
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
    pub(super) fn analyze(&mut self, link: LinkId, job: JobId) {
        if !self.alloc.has_job(job) {
            let message = format!(
                "job {} is not in the queue (it ended or never existed)",
                job.0
            );
            return self.admin_fail(link, FailureCode::Invalid, message);
        }
        self.alloc.judge_waiting();
        let analysis = JobAnalysis {
            job: self.job_status(job),
            queued_ahead: self.alloc.queued_ahead(job).unwrap_or(0),
            classes: self.alloc.analyze(job),
        };
        self.send(link, FromGlobal::Analysis(analysis));
    }

    /// The allocator started `job`: its master goes to the machine it is
    /// pinned to, the submit machine if that is in the pool, else to one the
    /// global RM picks (or waits for one, see [`Router::place_masters`]).
    pub(super) fn start_master(&mut self, job: JobId) {
        let Some(sub) = self.submitted.get(&job) else {
            return;
        };
        let at_submit = !sub.anywhere
            || (self.alloc.is_online(&sub.submit_machine)
                && self.may_place(&sub.submit_machine, sub));
        let (machine, placed) = if at_submit {
            (sub.submit_machine.clone(), false)
        } else {
            (self.pick_master_machine(sub).unwrap_or_default(), true)
        };
        // Pinned to a machine that is there but may not start it now.
        let waits =
            !machine.is_empty() && self.alloc.is_online(&machine) && !self.may_place(&machine, sub);
        let process = self.procs.fresh_id();
        let mut proc = new_proc(job, true);
        proc.state = ProcessState::Starting;
        self.procs.insert(process, proc);
        self.masters.insert(process, (job, machine.clone()));
        if let Some(s) = self.submitted.get_mut(&job) {
            s.master = Some(process);
            s.machine = machine.clone();
            s.placed = placed;
            // A master started again (after a hold) sends its own files.
            s.returned = None;
        }
        self.out.push(Output::Journal(Record::Started {
            job,
            master: process,
            placed: placed.then(|| machine.clone()),
        }));
        if machine.is_empty() {
            info!(job = %job, "no machine matches the master's requirements and may start it now; the master waits for one");
            self.unplaced.insert(process);
            return;
        }
        if waits {
            info!(job = %job, machine, "the owner policy of the master's machine does not let it start now; the master waits");
            self.unplaced.insert(process);
            return;
        }
        match self.ready_link(&machine) {
            Some(link) => self.send_master(link, process, job),
            None => {
                // Sent when the machine advertises again (`unsent_masters`).
                info!(job = %job, machine, "the master's machine is away; the master starts when it is back");
            }
        }
    }

    /// Sends `SpawnMaster` for `process`, the master of `job`, on `link`.
    pub(super) fn send_master(&mut self, link: LinkId, process: ProcessId, job: JobId) {
        let Some(sub) = self.submitted.get(&job).cloned() else {
            return;
        };
        if self.sent_masters.contains(&process)
            || self
                .procs
                .find(process)
                .is_some_and(|p| p.state != ProcessState::Starting)
        {
            return;
        }
        self.sent_masters.insert(process);
        let now = self.config.started_unix + self.now.as_secs();
        if let Some(s) = self.submitted.get_mut(&job) {
            s.started_unix = now;
            s.tries.starts += 1;
        }
        info!(job = %job, %process, machine = sub.machine, "starting the master");
        let env = sub.spec.environment.clone();
        let requests = sub.spec.requests();
        let return_files = return_plan(&sub).into_iter().map(|(n, _)| n).collect();
        // Away from the submit machine its paths mean nothing: the sandbox's
        // files are written and sent back instead.
        let (output, error) = if sub.placed {
            (None, None)
        } else {
            (sub.spec.output, sub.spec.error)
        };
        // Input files by path on the submit machine, or (placed elsewhere,
        // when the client uploaded them) by content from the pool's store.
        let (mut input_files, mut inputs) = if sub.placed && !sub.spec.input_refs.is_empty() {
            (Vec::new(), sub.spec.input_refs)
        } else {
            (sub.spec.transfer_input_files, Vec::new())
        };
        // Its last checkpoint, over the input files of the same name.
        let checkpoint = self.checkpoint_inputs(job);
        let shadowed = |name: &str| checkpoint.iter().any(|c| c.name == name);
        inputs.retain(|i| !shadowed(&i.name));
        input_files.retain(|f| {
            let base = std::path::Path::new(f).file_name();
            !base.is_some_and(|b| shadowed(&b.to_string_lossy()))
        });
        inputs.extend(checkpoint);
        self.send(
            link,
            FromGlobal::SpawnMaster {
                process,
                job,
                executable: sub.executable,
                args: sub.spec.arguments,
                env,
                output,
                error,
                input_files,
                return_files,
                inputs,
                requests,
            },
        );
    }

    /// The job a master process leads, if `process` is one and runs on `machine`.
    pub(super) fn master_on(&self, process: ProcessId, machine: &str) -> Option<JobId> {
        self.masters
            .get(&process)
            .filter(|(_, m)| m == machine)
            .map(|(j, _)| *j)
    }

    /// A master reported by its local RM: started, or exited (which ends its job).
    pub(super) fn master_report(
        &mut self,
        process: ProcessId,
        job: JobId,
        outcome: Result<(), ExitStatus>,
    ) {
        match outcome {
            Ok(()) => {
                if self
                    .procs
                    .find(process)
                    .is_some_and(|p| p.state == ProcessState::Starting)
                {
                    self.procs.set_state(process, ProcessState::Running);
                    // A restart then knows it ran: absent from its machine, it was lost.
                    self.out.push(Output::Journal(Record::Running { process }));
                    if let Some((_, machine)) = self.masters.get(&process) {
                        let machine = machine.clone();
                        self.log_event(job, EventKind::MasterStarted { machine });
                    }
                }
                self.alloc.on_master_running(job);
            }
            Err(status) => {
                info!(job = %job, %process, ?status, "the master ended; so does its job");
                self.record_end(job, JobEnd::Completed(status));
                self.masters.remove(&process);
                self.sent_masters.remove(&process);
                self.end_job(job);
            }
        }
    }

    /// Kills the master of `job` if it runs (called as the job ends).
    pub(super) fn kill_master(&mut self, job: JobId) {
        let Some(sub) = self.submitted.remove(&job) else {
            return;
        };
        self.close_event_log(job);
        self.out.push(Output::Journal(Record::Ended { job }));
        if let Some(p) = sub.master {
            self.unplaced.remove(&p);
        }
        if let Some(p) = sub.master
            && self.masters.remove(&p).is_some()
            && self.sent_masters.remove(&p)
            && let Some(link) = self.ready_link(&sub.machine)
        {
            self.send(link, FromGlobal::Kill { process: p });
        }
    }
}

/// What the allocator needs of a submit file's classes (for a new submit and
/// for one recovered from the journal alike).
pub(super) fn class_limits(spec: &carmi_proto::submit::JobSpec) -> Vec<ClassLimits> {
    spec.classes
        .iter()
        .map(|c| ClassLimits {
            name: c.name.clone(),
            expression: c.requirements.clone(),
            min: c.min,
            max: c.max,
            rank: c.rank.clone(),
        })
        .collect()
}
