//! The router's start after a restart: the journal of an earlier run
//! replayed, before any connection, into jobs waiting again, jobs running
//! again (their masters expected back with their local RMs), holds and the
//! history; ended jobs are forgotten.
//!
//! Kept apart from `jobs.rs` (what admin requests do to jobs as they
//! happen) so that each file stays readable.

use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::limits;
use carmi_proto::msg::{ProcessState, SubmitRequest};
use tracing::{info, warn};

use super::jobs::{Submitted, class_limits, master_ad};
use super::{Output, Router, new_proc};
use crate::journal::Record;

impl Router {
    /// Replays the journal of an earlier run, before any connection: waiting
    /// jobs queue again, started ones run again (their masters are expected
    /// back with their local RMs), ended ones are forgotten.
    pub fn recover(&mut self, records: Vec<Record>) {
        for r in records {
            if let Some(r) = self.replay_job(r) {
                self.replay_other(r);
            }
        }
        // The procs of clusters with some waiting, for their bounds.
        for (job, sub) in &self.jobs.submitted {
            if let Some(p) = self.jobs.pending.get_mut(&sub.cluster) {
                p.live.insert(*job);
            }
        }
        // Nothing is online yet: whatever the allocator says now concerns no one.
        let _ = self.alloc.take_effects();
        let _ = self.alloc.take_host_changes();
        info!(jobs = self.jobs.submitted.len(), "journal replayed");
    }

    /// Replays a job's own record (submitted, started, ended); any other is
    /// handed back.
    fn replay_job(&mut self, r: Record) -> Option<Record> {
        match r {
            Record::Submitted {
                job,
                request,
                cluster,
            } => {
                if let Some(c) = cluster
                    && let Some(p) = self.jobs.pending.get_mut(&c)
                {
                    p.taken_up_to(c, job);
                    if p.procs.is_empty() {
                        self.jobs.pending.remove(&c);
                    }
                }
                self.replay_submitted(job, *request, cluster.unwrap_or(job))
            }
            Record::Started {
                job,
                master,
                placed,
            } => self.replay_started(job, master, placed),
            Record::Ended { job } => self.replay_ended(job),
            other => return Some(other),
        }
        None
    }

    /// A job submitted before the restart queues again.
    fn replay_submitted(&mut self, job: JobId, req: SubmitRequest, cluster: JobId) {
        self.jobs.next_job = self.jobs.next_job.max(job.0 + 1);
        // A journal written before the limits may hold a job the
        // door would refuse now: it is dropped, not run.
        if let Err(f) = limits::check_submit(&req) {
            warn!(job = %job, "journal: the job is above a limit and is dropped: {}", f.message);
            return;
        }
        let limits = class_limits(&req.spec);
        if let Err(f) = self.alloc.submit_job(job, &req.owner, &limits) {
            warn!(job = %job, "journal: cannot recover the job: {}", f.message);
            return;
        }
        self.alloc.set_job_attributes(job, &req.spec.attributes);
        let master_ad = master_ad(&req.spec).unwrap_or_else(|e| {
            warn!(job = %job, "journal: {e}; the master may run on any machine");
            None
        });
        // Events before the restart are not kept (see `events`).
        let spec = req.spec.expand(cluster.0);
        self.keep_submitted(job, Submitted::new(req, spec, master_ad, cluster));
    }

    /// A job's master started before the restart: expected back with its
    /// machine (or placed again when it had none).
    fn replay_started(&mut self, job: JobId, master: ProcessId, placed: Option<String>) {
        let Some(sub) = self.jobs.submitted.get_mut(&job) else {
            return;
        };
        let before = sub.master.replace(master);
        let again = before == Some(master);
        if let Some(m) = placed {
            sub.machine = m;
            sub.placed = true;
        }
        let machine = sub.machine.clone();
        if let Some(old) = before.filter(|_| !again) {
            // Restarted after its machine was lost.
            self.jobs.forget_master(old);
            self.procs.remove(old);
        }
        if !again {
            self.alloc.recover_running(job);
            // Starting until a `Running` record or its machine says it
            // runs: a `SpawnMaster` that died with the killed global RM
            // is sent again, not taken for a lost master.
            let mut proc = new_proc(job, true);
            proc.state = ProcessState::Starting;
            self.procs.insert(master, proc);
        }
        if machine.is_empty() {
            self.jobs.unplaced.insert(master);
        } else {
            self.jobs.unplaced.remove(&master);
            // Sent before the restart; its local RM will re-report it.
            self.jobs.sent_masters.insert(master);
        }
        self.jobs.masters.insert(master, (job, machine));
    }

    /// A job that ended before the restart is forgotten.
    fn replay_ended(&mut self, job: JobId) {
        self.forget_lost(None, Some(job));
        self.reports.events.close(job);
        self.jobs.awaiting_roots.retain(|_, (j, _)| *j != job);
        if let Some(sub) = self.jobs.submitted.remove(&job)
            && let Some(p) = sub.master
        {
            self.jobs.forget_master(p);
        }
        for p in self.procs.of_job(job) {
            self.procs.remove(p);
            self.jobs.recovered.remove(&p);
        }
        self.alloc.on_job_ended(job);
    }

    /// Replays every record but a job's own.
    fn replay_other(&mut self, r: Record) {
        match r {
            Record::Pilots(snapshot) => self.pilots.queues.restore(*snapshot),
            Record::Machine { name, hosts } => {
                if !self.alloc.recover_machine(&name, &hosts) {
                    warn!(
                        machine = name,
                        "journal: its host ids cannot be given back; it gets new ones"
                    );
                }
            }
            Record::Spawned { .. } | Record::Running { .. } | Record::Exited { .. } => {
                self.replay_process(r)
            }
            Record::Outstanding {
                job,
                process,
                request,
                what,
                body,
            } => self.recover_outstanding(job, process, request, what, body),
            Record::Claimed { job, host, class } => self.alloc.remember_claim(host, job, &class),
            Record::Freed { job, host } => self.alloc.forget_claim(host, job),
            Record::Answered { process, request } => self.recover_answered(process, request),
            Record::Excluded { job, class, hosts } => {
                self.alloc
                    .exclude_hosts(job, replay_request(), &class, &hosts);
            }
            Record::Attached {
                job,
                machine,
                root,
                owner,
            } => self.replay_attached(job, machine, root, owner),
            Record::ClassDefined {
                job,
                name,
                expression,
                rank,
            } => {
                // Its answer went out before the restart; the replay's is dropped below.
                let req = replay_request();
                self.alloc
                    .define_class_ranked(job, req, &name, &expression, rank.as_deref());
            }
            Record::ClassRemoved { job, name } => {
                self.alloc.remove_class(job, replay_request(), &name);
            }
            Record::Counters {
                next_job,
                next_process,
            } => {
                self.jobs.next_job = self.jobs.next_job.max(next_job);
                self.procs.reserve_ids_below(next_process);
            }
            Record::History(record) => {
                for process in self.reports.history.push(*record) {
                    self.out.push(Output::DropFiles { process });
                }
            }
            Record::Held { job, reason } => {
                self.forget_lost(None, Some(job));
                self.recover_held(job, reason);
            }
            Record::Released { job } => self.recover_released(job),
            Record::Checkpoint { job, files } => self.recover_checkpoint(job, files),
            Record::Events(events) => {
                for e in events {
                    self.reports.events.restore(e);
                }
            }
            Record::Usage { at_unix, users } => self.recover_usage(at_unix, users),
            Record::Factors { users } => {
                for (user, factor) in users {
                    self.alloc.set_user_factor(&user, factor);
                }
            }
            Record::Pending {
                cluster,
                first,
                request,
            } => {
                let end = crate::journal::pending_end(cluster, first, request.procs.len());
                self.jobs.next_job = self.jobs.next_job.max(end);
                let pending = super::jobs::Pending::from_record(first, *request);
                self.jobs.pending.insert(cluster, pending);
            }
            Record::PendingDropped { cluster } => {
                self.jobs.pending.remove(&cluster);
            }
            Record::Submitted { .. } | Record::Started { .. } | Record::Ended { .. } => {}
        }
    }

    /// A process's record: spawned, reported started, exited.
    fn replay_process(&mut self, r: Record) {
        match r {
            Record::Spawned {
                process,
                job,
                host,
                class,
                origin,
                executable,
            } => {
                if !self.alloc.has_job(job) {
                    return;
                }
                let mut proc = new_proc(job, false);
                proc.host = Some(host);
                // Running once a `Running` record or its machine says so.
                proc.state = ProcessState::Starting;
                proc.origin = origin;
                proc.executable = executable;
                self.procs.insert(process, proc);
                self.jobs.recovered.insert(process, (job, class));
            }
            Record::Running { process }
                if self
                    .procs
                    .find(process)
                    .is_some_and(|p| p.state == ProcessState::Starting) =>
            {
                self.procs.set_state(process, ProcessState::Running);
            }
            Record::Exited {
                process,
                status,
                cpu_seconds,
            } => {
                self.jobs.recovered.remove(&process);
                self.forget_lost(Some(process), None);
                match status {
                    // Still listed, with how it ended (issue 15 item 4).
                    Some(status) if self.procs.find(process).is_some() => {
                        let state = ProcessState::Exited {
                            status,
                            cpu_seconds,
                        };
                        self.procs.set_state(process, state);
                    }
                    _ => {
                        self.procs.remove(process);
                    }
                }
            }
            _ => {}
        }
    }

    /// A job started by hand before the restart: its first process is
    /// expected back with its local RM (`awaiting_roots`).
    fn replay_attached(
        &mut self,
        job: JobId,
        machine: String,
        root: ProcessId,
        owner: Option<String>,
    ) {
        self.jobs.next_job = self.jobs.next_job.max(job.0 + 1);
        self.procs.reserve_ids_below(root.0 + 1);
        self.alloc
            .on_job_created(job, owner.as_deref().unwrap_or(&machine));
        self.procs.insert(root, new_proc(job, true));
        // Expected back with its local RM (`awaiting_roots`).
        self.jobs.awaiting_roots.insert(root, (job, machine));
    }
}

/// The requester of a request replayed from the journal (nobody: its
/// effects are discarded).
fn replay_request() -> crate::alloc::ReqRef {
    crate::alloc::ReqRef {
        process: ProcessId(0),
        id: carmi_proto::ids::RequestId(0),
    }
}
