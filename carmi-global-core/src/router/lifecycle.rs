//! What happens to application processes at the router: a spawned process
//! starting or exiting, events delivered to (or kept for) a process, the
//! allocator's effects turned into messages, processes attaching to and
//! leaving their local RM, and a job ending with its first process.
//!
//! Kept apart from `router.rs`, which dispatches inputs, so that each file
//! holds one concern.

use carmi_proto::ids::{ConnId, HostId, JobId, ProcessId};
use carmi_proto::msg::{Event, ExitStatus, Failure, FailureCode, FromGlobal, ProcessState, Reply};
use tracing::{debug, info, warn};

use super::{LinkId, MAX_PARKED, Output, Router};
use crate::alloc::{Effect, ReleaseCause};
use crate::procs::{Attachment, Proc, ProcTable};

impl Router {
    /// True when `process` was spawned on a host of machine `name`; warns otherwise.
    pub(super) fn runs_on(&self, process: ProcessId, name: &str) -> bool {
        let ok = self
            .procs
            .find(process)
            .and_then(|p| p.host)
            .and_then(|h| self.alloc.host_machine(h))
            == Some(name);
        if !ok {
            debug!(machine = name, %process, "report about a process that does not run there; ignored");
        }
        ok
    }

    /// `Started` from machine `name`: of a master (its failure ends the
    /// job) or of a process it was asked to spawn.
    pub(super) fn on_started(
        &mut self,
        name: &str,
        process: ProcessId,
        result: Result<(), String>,
    ) {
        match self.jobs.master_on(process, name) {
            Some(job) => match result {
                Err(reason) => self.master_start_failed(process, job, name, reason),
                Ok(()) => self.master_report(process, job, Ok(())),
            },
            None => self.started(name, process, result),
        }
    }

    /// A local RM reports whether a process it was asked to spawn started.
    pub(super) fn started(&mut self, name: &str, process: ProcessId, result: Result<(), String>) {
        if !self.runs_on(process, name) {
            return;
        }
        let proc = self.procs.find(process).expect("checked by runs_on");
        if !proc.is_live() {
            return;
        }
        let (origin, host) = (proc.origin, proc.host.expect("checked by runs_on"));
        match result {
            Ok(()) => {
                // Told once: a `Started` re-sent, or inferred after a
                // restart, finds it running already.
                if proc.state != ProcessState::Starting {
                    return;
                }
                self.procs.set_state(process, ProcessState::Running);
                self.out
                    .push(Output::Journal(crate::journal::Record::Running { process }));
                if let Some(o) = origin {
                    let event = Event::ProcessStarted {
                        request: o.id,
                        process,
                        host,
                    };
                    self.deliver(o.process, event);
                }
            }
            Err(reason) => self.exit_process(process, ExitStatus::FailedToStart(reason), 0.0),
        }
    }

    /// Marks a process exited (once), tells whoever spawned it, and drops its
    /// outstanding requests.
    pub(super) fn exit_process(
        &mut self,
        process: ProcessId,
        status: ExitStatus,
        cpu_seconds: f64,
    ) {
        let Some(proc) = self.procs.find(process) else {
            return;
        };
        if !proc.is_live() {
            return;
        }
        let (host, origin) = (proc.host, proc.origin);
        if host.is_some() {
            self.out
                .push(Output::Journal(crate::journal::Record::Exited {
                    process,
                    status: Some(status.clone()),
                    cpu_seconds,
                }));
        }
        self.jobs.recovered.remove(&process);
        self.forget_lost(Some(process), None);
        self.procs.set_state(
            process,
            ProcessState::Exited {
                status: status.clone(),
                cpu_seconds,
            },
        );
        if let Some(h) = host {
            self.alloc.on_process_exited(h, process);
        }
        for waiting in self.requests.lookups.take(process) {
            let failure = Failure {
                code: FailureCode::Unavailable,
                message: format!("process {process} exited before it connected to its local RM"),
            };
            self.answer(waiting, Err(failure));
        }
        if let Some(o) = origin {
            let event = Event::ProcessExited {
                request: o.id,
                process,
                status,
                cpu_seconds,
            };
            self.deliver(o.process, event);
        }
        self.alloc.on_requester_gone(process);
    }

    /// Sends an event to a process through the local RM it is attached to.
    pub(super) fn deliver(&mut self, process: ProcessId, event: Event) {
        let target = self.procs.find(process).and_then(|p| p.attached.clone());
        // Events need no `Advertise` first: only work for the machine itself does.
        let link = target
            .as_ref()
            .and_then(|a| self.registry.presence.get(&a.machine))
            .and_then(|p| p.link);
        match (target, link) {
            (Some(a), Some(link)) => self.send(
                link,
                FromGlobal::Deliver {
                    conn: a.conn,
                    event,
                },
            ),
            // Its machine is away: its local RM keeps the process's
            // connection and announces it again when it is back.
            (Some(a), None) => {
                let parked = self.requests.parked.entry(process).or_default();
                if parked.len() >= MAX_PARKED {
                    let dropped = parked.remove(0);
                    warn!(%process, machine = a.machine, ?dropped, "too many events kept for an unreachable process; dropping the oldest");
                }
                debug!(%process, machine = a.machine, "machine away: event kept until the process is announced again");
                parked.push(event);
            }
            // Not attached yet after a restart (its local RM announces it
            // again after its machine's `Advertise`): kept for it, as for a
            // machine away.
            (None, _) if self.procs.find(process).is_some_and(|p| p.is_live()) => {
                let parked = self.requests.parked.entry(process).or_default();
                if parked.len() >= MAX_PARKED {
                    parked.remove(0);
                }
                parked.push(event);
            }
            (None, _) => debug!(%process, ?event, "event dropped: the process is not attached"),
        }
    }

    /// Turns the allocator's effects into messages.
    pub(super) fn flush(&mut self) {
        loop {
            let effects = self.alloc.take_effects();
            // Hosts given and taken are journaled before any event about them goes out.
            let changes = self.alloc.take_host_changes();
            for c in &changes {
                self.journal_host_change(c);
            }
            if effects.is_empty() && changes.is_empty() {
                self.settle_outstanding();
                return;
            }
            for e in effects {
                if let Effect::Grant {
                    request, remaining, ..
                } = &e
                {
                    self.note_granted(*request, *remaining);
                }
                if let Effect::Released { job, host, cause } = e {
                    self.released(job, host, cause);
                } else if let Effect::JobStarted { job } = e {
                    self.start_master(job);
                } else if let Some((p, event)) = e.to_event() {
                    self.deliver(p, event);
                }
            }
            self.log_host_changes(changes);
        }
    }

    /// A host went back from `job`: its processes there end, or are killed, as `cause` demands.
    pub(super) fn released(&mut self, job: JobId, host: HostId, cause: ReleaseCause) {
        let procs: Vec<ProcessId> = self
            .procs
            .live_on(host)
            .into_iter()
            .filter(|&p| self.procs.find(p).is_some_and(|pr| pr.job == job))
            .collect();
        match cause {
            ReleaseCause::Vacated | ReleaseCause::Lost => {
                for p in procs {
                    self.exit_process(p, ExitStatus::HostLost, 0.0);
                }
            }
            // `end_job` (or `hold`) kills every process of the job, on these hosts or not.
            ReleaseCause::JobEnded | ReleaseCause::Held => {}
            ReleaseCause::Deleted | ReleaseCause::Withdrawn | ReleaseCause::Preempted => {
                let link = self
                    .alloc
                    .host_machine(host)
                    .and_then(|m| self.registry.ready_link(m));
                for p in procs {
                    match link {
                        // Still live until the local RM reports how it ended.
                        Some(link) => self.send(link, FromGlobal::Kill { process: p }),
                        None => self.exit_process(p, ExitStatus::HostLost, 0.0),
                    }
                }
            }
        }
    }

    /// A process connected to its local RM on machine `name`: it joins its
    /// job (or starts one), and what waited for it is sent.
    pub(super) fn app_attach(
        &mut self,
        link: LinkId,
        name: &str,
        conn: ConnId,
        job: Option<JobId>,
        process: Option<ProcessId>,
        endpoint: String,
    ) {
        self.announced(name, conn, process);
        let at = Attachment {
            machine: name.to_string(),
            conn,
        };
        if let Some(old) = self.procs.attached_at(name, conn)
            && (process != Some(old) || job != self.procs.find(old).map(|p| p.job))
        {
            // The local RM reused a connection id: the previous process left.
            // (The same process announcing itself again after a reconnection is
            // not a reuse, and must not end its job.)
            self.app_detach(name, conn);
            debug!(machine = name, %conn, process = %old, "connection id reused");
        }
        let known_live = |procs: &ProcTable, p: ProcessId, j: JobId| {
            procs.find(p).is_some_and(|pr| pr.job == j && pr.is_live())
        };
        if let Some(j) = job
            && self.alloc.has_job(j)
            && !self.machine_in_job(name, j)
        {
            let reason = self.join_refusal(name, j);
            warn!(machine = name, %conn, job = %j, "AppAttach refused: {reason}");
            self.send(link, FromGlobal::AttachRefused { conn, reason });
            return;
        }
        let (job, process) = match (job, process) {
            (Some(j), Some(p)) if known_live(&self.procs, p, j) => (j, p),
            (Some(j), p) if self.alloc.has_job(j) => {
                let id = match p {
                    Some(p) if self.procs.is_unused(p) => p,
                    Some(p) => {
                        warn!(machine = name, process = %p, job = %j, "process id is taken or belongs elsewhere; giving a fresh one");
                        self.procs.fresh_id()
                    }
                    None => self.procs.fresh_id(),
                };
                self.procs.insert(id, new_proc(j, false));
                (j, id)
            }
            // A job that ended (while its machine was away, say), or one
            // this global RM never gave (its journal holds every job it
            // gave): the application is told, never quietly given a new
            // job, nor the job adopted under its id (`router/join.rs`).
            (Some(j), _) => return self.tell_gone(link, conn, j),
            (None, _) => {
                let owner = match self.new_job_owner(link, name, conn) {
                    Ok(owner) => owner,
                    Err(reason) => {
                        self.send(link, FromGlobal::AttachRefused { conn, reason });
                        return;
                    }
                };
                let j = JobId(self.jobs.next_job);
                self.jobs.next_job += 1;
                // In a pool without tokens the machine stands for the owner.
                let owner_name = owner.as_deref().unwrap_or(name);
                self.alloc.on_job_created(j, owner_name);
                let id = self.procs.fresh_id();
                self.procs.insert(id, new_proc(j, true));
                info!(job = %j, machine = name, "new job");
                // Journaled like a submitted job, so that a restart keeps its id and workers.
                self.out
                    .push(Output::Journal(crate::journal::Record::Attached {
                        job: j,
                        machine: name.to_string(),
                        root: id,
                        owner,
                    }));
                (j, id)
            }
        };
        self.jobs.awaiting_roots.remove(&process);
        self.procs.attach(process, at, endpoint.clone());
        self.send(link, FromGlobal::Attached { conn, job, process });
        for event in self.requests.parked.remove(&process).unwrap_or_default() {
            self.send(link, FromGlobal::Deliver { conn, event });
        }
        for waiting in self.requests.lookups.take(process) {
            let reply = Reply::Endpoint {
                process,
                address: endpoint.clone(),
            };
            self.answer(waiting, Ok(reply));
        }
        self.tell_lost(process);
    }

    /// A process left its local RM; a job's first process leaving ends the job.
    pub(super) fn app_detach(&mut self, name: &str, conn: ConnId) {
        let at = Attachment {
            machine: name.to_string(),
            conn,
        };
        let Some(p) = self.procs.detach(&at) else {
            return;
        };
        self.requests.parked.remove(&p);
        self.alloc.on_requester_gone(p);
        let proc = self.procs.find(p).expect("detach returned a known process");
        let job = proc.job;
        if proc.root {
            // No local RM saw it exit: the code it declared before leaving
            // (`ExitCode`, as WoDi's server does) is the only word on how.
            let end = match self.jobs.job_attrs.exit_code(job) {
                Some(code) => carmi_proto::msg::JobEnd::Completed(ExitStatus::Code(code)),
                None => carmi_proto::msg::JobEnd::Detached,
            };
            self.record_end(job, end);
            self.end_job(job);
        } else if proc.host.is_none() {
            // Started by hand, so no local RM will report its exit: leaving is its end.
            self.procs.remove(p);
        }
    }

    /// The job's first process left: its hosts go back and its processes are killed.
    pub(super) fn end_job(&mut self, job: JobId) {
        info!(job = %job, "job ended");
        let cluster = self.jobs.submitted.get(&job).map(|s| s.cluster);
        // A submitted job's end is journaled by `kill_master`; a hand-started one's here.
        if !self.jobs.submitted.contains_key(&job) {
            self.out
                .push(Output::Journal(crate::journal::Record::Ended { job }));
        }
        self.jobs.awaiting_roots.retain(|_, (j, _)| *j != job);
        self.stored.job_ended(job);
        self.jobs.job_attrs.forget(job);
        self.jobs.memory_peaks.remove(&job);
        self.forget_lost(None, Some(job));
        self.kill_master(job);
        self.alloc.on_job_ended(job);
        self.flush();
        for p in self.procs.of_job(job) {
            let proc = self.procs.remove(p).expect("listed by of_job");
            self.requests.lookups.take(p);
            self.requests.parked.remove(&p);
            if let Some(at) = &proc.attached {
                self.tell_gone_at(at, job);
            }
            self.kill_if_live(p, &proc);
        }
        if let Some(c) = cluster {
            self.proc_left(job, c);
        }
    }

    /// Kills `process` (whose entry was `proc`, just forgotten) on its
    /// machine, if it still runs there and the machine is connected.
    pub(in crate::router) fn kill_if_live(&mut self, process: ProcessId, proc: &Proc) {
        if proc.is_live()
            && let Some(link) = proc
                .host
                .and_then(|h| self.alloc.host_machine(h))
                .and_then(|m| self.registry.ready_link(m))
        {
            self.send(link, FromGlobal::Kill { process });
        }
    }
}

/// A process-table entry for a new process of `job` (`root` for its first
/// process), not yet placed on a host.
pub(crate) fn new_proc(job: JobId, root: bool) -> Proc {
    Proc {
        job,
        host: None,
        endpoint: None,
        state: ProcessState::Running,
        attached: None,
        origin: None,
        root,
        executable: None,
    }
}
