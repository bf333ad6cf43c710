//! Hosts a job held before a restart of the global RM (issue 15 item 3):
//! the journal records every host given to a job and every host that left
//! one (`Record::Claimed`, `Record::Freed`), so that a job keeps the hosts it
//! held even where it runs no process. Replayed into
//! [`Allocator::remember_claim`]; when the host's machine registers again,
//! the host goes back to its job before any pending request is offered it.

use carmi_proto::ids::{HostId, JobId};

use super::{Allocator, Effect, HostChange, HostChangeKind, Phase, ReleaseCause, ReqRef, SubKind};

impl Allocator {
    /// Replays a host the journal says `job` held for `class`: it is given
    /// back when its machine registers (if the job still runs and has the
    /// class then).
    pub fn remember_claim(&mut self, host: HostId, job: JobId, class: &str) {
        self.recorded_claims.insert(host, (job, class.to_string()));
    }

    /// Replays a host that left `job`.
    pub fn forget_claim(&mut self, host: HostId, job: JobId) {
        if self
            .recorded_claims
            .get(&host)
            .is_some_and(|(j, _)| *j == job)
        {
            self.recorded_claims.remove(&host);
        }
    }

    /// How many hosts wait to go back to their jobs (for tests and logs).
    pub fn recorded_claims(&self) -> usize {
        self.recorded_claims.len()
    }

    /// Hosts of `job`'s `class` still waiting for their machines to come
    /// back: the job holds them, so growth does not give it others meanwhile
    /// (it held 3 of its 2 once its last machine was back).
    pub(super) fn recorded_for(&self, job: JobId, class: &str) -> u32 {
        if self.recorded_claims.is_empty() {
            return 0;
        }
        self.recorded_claims
            .values()
            .filter(|(j, c)| *j == job && c == class)
            .count() as u32
    }

    /// The job ended or was held: it gets nothing back.
    pub(super) fn forget_recorded_claims(&mut self, job: JobId) {
        if !self.recorded_claims.is_empty() {
            self.recorded_claims.retain(|_, (j, _)| *j != job);
        }
    }

    /// Gives each of `fresh` (slots of a machine that just registered) that
    /// a job held before the restart back to it, silently (the job's
    /// application was told of it before); returns the others, to be offered.
    pub(super) fn restore_recorded_claims(&mut self, fresh: Vec<HostId>) -> Vec<HostId> {
        if self.recorded_claims.is_empty() {
            return fresh;
        }
        let mut rest = Vec::with_capacity(fresh.len());
        for h in fresh {
            let Some((job, class)) = self.recorded_claims.remove(&h) else {
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
            let changes = self.host_changes.len();
            self.give(job, &class, h, false);
            // Not a new host for the job's log: it held it before the restart.
            self.host_changes.truncate(changes);
        }
        rest
    }

    /// The heartbeat bound passed after a restart: every host still waiting
    /// for its machine to register (see [`Allocator::remember_claim`]) is
    /// reported lost to its job, as a lost machine's would be (`Deleted` to
    /// its `DeleteNotify` subscriptions, `Released` so that its processes
    /// there exit, a host change for the job's log); returns how many.
    pub fn expire_recorded_claims(&mut self) -> usize {
        let claims = std::mem::take(&mut self.recorded_claims);
        let n = claims.len();
        for (host, (job, _)) in claims {
            let reason = ReleaseCause::Lost.reason(&self.host_name(host));
            let Some(j) = self.jobs.get_mut(&job) else {
                continue;
            };
            for sub in &mut j.subs {
                match &mut sub.kind {
                    SubKind::Delete(set) => {
                        if set.remove(&host) {
                            self.effects.push(Effect::Deleted {
                                job,
                                request: sub.req,
                                host,
                                reason: reason.clone(),
                            });
                        }
                    }
                    SubKind::Suspend(set) | SubKind::Resume(set) => {
                        set.remove(&host);
                    }
                    SubKind::Add(_) => {}
                }
            }
            j.retain_subs(|s| match &s.kind {
                SubKind::Add(_) => true,
                SubKind::Delete(set) | SubKind::Suspend(set) | SubKind::Resume(set) => {
                    !set.is_empty()
                }
            });
            self.host_changes.push(HostChange {
                job,
                host,
                kind: HostChangeKind::Removed(ReleaseCause::Lost),
            });
            self.effects.push(Effect::Released {
                job,
                host,
                cause: ReleaseCause::Lost,
            });
            // The job may lack a minimum now.
            self.dirty = true;
        }
        n
    }

    /// Forgets the acceptance of `req` just made (a subscription served
    /// again after a restart: its process heard of it before).
    pub fn drop_done(&mut self, req: ReqRef) {
        self.effects
            .retain(|e| !matches!(e, Effect::Done { request, .. } if *request == req));
    }
}
