//! Hosts a job held before a restart of the global RM (issue 15 item 3):
//! the journal records every host given to a job and every host that left
//! one (`Record::Claimed`, `Record::Freed`), so that a job keeps the hosts it
//! held even where it runs no process. Replayed into
//! [`Allocator::remember_claim`]; when the host's machine registers again,
//! the host goes back to its job before any pending request is offered it.
//!
//! The rest of the journal's replay lands here too: machines' host ids,
//! jobs that were running, and hosts where recovered processes still run.

use std::collections::HashMap;

use carmi_proto::ids::{HostId, JobId, ProcessId};

use super::{Allocator, Effect, Phase, ReleaseCause, ReqRef, SlotState};

/// Hosts the journal says a job held (for a class) before a restart, until
/// their machine registers again or the heartbeat bound passes.
#[derive(Default)]
pub(super) struct RecordedClaims {
    claims: HashMap<HostId, (JobId, String)>,
}

impl RecordedClaims {
    /// Hosts of `job`'s `class` still waiting for their machines to come
    /// back: the job holds them, so growth does not give it others meanwhile
    /// (it held 3 of its 2 once its last machine was back).
    pub(super) fn count_for(&self, job: JobId, class: &str) -> u32 {
        if self.claims.is_empty() {
            return 0;
        }
        self.claims
            .values()
            .filter(|(j, c)| *j == job && c == class)
            .count() as u32
    }

    /// Forgets every host of `job`.
    pub(super) fn forget_job(&mut self, job: JobId) {
        if !self.claims.is_empty() {
            self.claims.retain(|_, (j, _)| *j != job);
        }
    }
}

impl Allocator {
    /// Replays a host the journal says `job` held for `class`: it is given
    /// back when its machine registers (if the job still runs and has the
    /// class then).
    pub fn remember_claim(&mut self, host: HostId, job: JobId, class: &str) {
        self.recorded.claims.insert(host, (job, class.to_string()));
    }

    /// Replays a host that left `job`.
    pub fn forget_claim(&mut self, host: HostId, job: JobId) {
        if self
            .recorded
            .claims
            .get(&host)
            .is_some_and(|(j, _)| *j == job)
        {
            self.recorded.claims.remove(&host);
        }
    }

    /// How many hosts wait to go back to their jobs (for tests and logs).
    pub fn recorded_claims(&self) -> usize {
        self.recorded.claims.len()
    }

    /// Gives each of `fresh` (slots of a machine that just registered) that
    /// a job held before the restart back to it, silently (the job's
    /// application was told of it before); returns the others, to be offered.
    pub(super) fn restore_recorded_claims(&mut self, fresh: Vec<HostId>) -> Vec<HostId> {
        if self.recorded.claims.is_empty() {
            return fresh;
        }
        let mut rest = Vec::with_capacity(fresh.len());
        for h in fresh {
            let Some((job, class)) = self.recorded.claims.remove(&h) else {
                rest.push(h);
                continue;
            };
            let takes = self.jobs.get(&job).is_some_and(|j| {
                j.classes.contains_key(&class)
                    && matches!(j.phase, Phase::Running { .. } | Phase::Attached)
            });
            if !takes {
                rest.push(h);
                continue;
            }
            let changes = self.out.host_changes.len();
            self.give(job, &class, h, false);
            // Not a new host for the job's log: it held it before the restart.
            self.out.host_changes.truncate(changes);
        }
        rest
    }

    /// The heartbeat bound passed after a restart: every host still waiting
    /// for its machine to register (see [`Allocator::remember_claim`]) is
    /// reported lost to its job, as a lost machine's would be (`Deleted` to
    /// its `DeleteNotify` subscriptions, `Released` so that its processes
    /// there exit, a host change for the job's log); returns how many.
    pub fn expire_recorded_claims(&mut self) -> usize {
        let claims = std::mem::take(&mut self.recorded.claims);
        let n = claims.len();
        for (host, (job, _)) in claims {
            let reason = ReleaseCause::Lost.reason(&self.pool.host_name(host));
            let Some(j) = self.jobs.get_mut(&job) else {
                continue;
            };
            j.host_left(job, host, ReleaseCause::Lost, reason, &mut self.out);
            // The job may lack a minimum now.
            self.dirty = true;
        }
        n
    }

    /// A job recovered from the journal was running: it leaves the queue and
    /// grows again as machines come back (its master runs already).
    pub fn recover_running(&mut self, job: JobId) {
        if let Some(j) = self.jobs.get_mut(&job)
            && j.phase == Phase::Waiting
        {
            j.phase = Phase::Running { grow: true };
            let seq = j.seq;
            self.dequeue(job, seq);
            self.running.insert(job);
            self.take_limits(job);
            self.dirty = true;
        }
    }

    /// Replays a machine's host ids from the journal (before anything is
    /// online): it stays offline until it registers, and then gets them back.
    /// False when the ids are not the next free ones (they would clash).
    pub fn recover_machine(&mut self, name: &str, hosts: &[HostId]) -> bool {
        let idx = self.pool.machine_named(name);
        let known = self.pool.machine(idx).hosts.len();
        for &h in hosts.iter().skip(known) {
            if h.0 != self.pool.slots.len() as u64 + 1 {
                return false;
            }
            self.pool.add_host(idx);
        }
        true
    }

    /// A process recovered from the journal still runs on `host`: the job
    /// holds the host again for `class`. False when the host is taken.
    pub fn recover_claim(
        &mut self,
        host: HostId,
        job: JobId,
        class: &str,
        process: ProcessId,
    ) -> bool {
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        if !j.classes.contains_key(class) {
            return false;
        }
        match self.pool.find_slot(host).map(|s| s.state.clone()) {
            Some(SlotState::Idle) => self.give(job, class, host, false),
            Some(SlotState::Claimed(c)) if c.job == job && !self.is_partial(host) => {}
            _ => return false,
        }
        self.on_process_spawned(host, process);
        true
    }

    /// Forgets the acceptance of `req` just made (a subscription served
    /// again after a restart: its process heard of it before).
    pub fn drop_done(&mut self, req: ReqRef) {
        self.out
            .effects
            .retain(|e| !matches!(e, Effect::Done { request, .. } if *request == req));
    }
}
