//! The machinery under every input: slot state changes that keep the idle
//! set in step, offering a free slot to the pending requests, claiming and
//! announcing groups, and taking a host back from its job.

use carmi_proto::ids::{HostId, JobId};
use carmi_proto::msg::HostInfo;

use super::job::{SubKind, member};
use super::pending::Pending;
use super::{Allocator, Claim, Effect, HostChangeKind, ReleaseCause, ReqRef, SlotState};

impl Allocator {
    /// Sets a slot's state (see [`super::pool::Pool::set_state`]); a slot
    /// becoming idle calls for settling the job queue.
    pub(super) fn set_state(&mut self, host: HostId, state: SlotState) {
        if self.pool.set_state(host, state) {
            self.dirty = true;
        }
    }

    /// Takes a request off the queue. Its partial hosts stay claimed: the
    /// caller offers them again.
    pub(super) fn remove_pending(&mut self, seq: u64) -> Pending {
        let p = self.pending.remove(seq);
        for &h in &p.partial {
            self.pool.get_slot_mut(h).group = None;
        }
        p
    }

    /// Drops every pending request of `job`; returns the partial hosts they
    /// held (claimed, not announced), for the caller to offer again.
    pub(super) fn drop_requests(&mut self, job: JobId) -> Vec<HostId> {
        let seqs = self.pending.of_job(job);
        seqs.into_iter()
            .flat_map(|seq| self.remove_pending(seq).partial)
            .collect()
    }

    /// Gives an unclaimed, available slot to the oldest pending request whose
    /// class it belongs to, or makes it idle.
    pub(super) fn offer(&mut self, host: HostId) {
        let m = self.pool.get_slot(host).machine;
        let mut best: Option<u64> = None;
        for ((job, class), seqs) in &self.pending.groups {
            let head = *seqs
                .first()
                .expect("allocator invariant: groups are never empty");
            // An older match is already known: no need to evaluate this class.
            if best.is_some_and(|b| b < head) {
                continue;
            }
            if member(
                &mut self.jobs,
                &self.pool.machines,
                self.clock.unix,
                *job,
                class,
                m,
            ) {
                best = Some(head);
            }
        }
        match best {
            Some(seq) => {
                self.claim_for(seq, host);
            }
            None => self.set_state(host, SlotState::Idle),
        }
    }

    pub(super) fn offer_all(&mut self, hosts: impl IntoIterator<Item = HostId>) {
        for h in hosts {
            self.offer(h);
        }
    }

    /// Claims `host` for pending request `seq`, announcing a group when it is
    /// complete, and dequeuing the request when it is complete (returns true).
    fn claim_for(&mut self, seq: u64, host: HostId) -> bool {
        let p = &self.pending.by_seq[&seq];
        let claim = Claim {
            job: p.job,
            class: p.class.clone(),
            since: self.clock.now,
        };
        self.set_state(host, SlotState::Claimed(claim));
        self.pool.get_slot_mut(host).group = Some(seq);
        let p = self.pending.by_seq.get_mut(&seq).expect("looked up above");
        p.partial.push(host);
        let group = p.increment.min(p.remaining);
        if (p.partial.len() as u32) < group {
            return false;
        }
        p.remaining -= group;
        let hosts = std::mem::take(&mut p.partial);
        let (job, req, class, remaining) = (p.job, p.req, p.class.clone(), p.remaining);
        for &h in &hosts {
            self.pool.get_slot_mut(h).group = None;
        }
        self.announce(job, req, &class, &hosts, remaining);
        if remaining == 0 {
            self.remove_pending(seq);
        }
        remaining == 0
    }

    fn announce(&mut self, job: JobId, req: ReqRef, class: &str, hosts: &[HostId], remaining: u32) {
        let infos: Vec<HostInfo> = hosts
            .iter()
            .map(|&h| self.pool.host_info(h, class))
            .collect();
        let j = self
            .jobs
            .get_mut(&job)
            .expect("allocator invariant: a pending request's job exists");
        for &h in hosts {
            j.hosts.insert(h, class.to_string());
            self.out.host_change(job, h, HostChangeKind::Added);
        }
        let watchers = j.add_watchers(class);
        self.out.effects.push(Effect::Grant {
            job,
            request: req,
            hosts: infos.clone(),
            remaining,
        });
        self.out.added(job, &watchers, &infos);
    }

    /// Fills pending request `seq` from the idle slots, fastest first
    /// (dequeuing it if that completes it).
    pub(super) fn serve(&mut self, seq: u64) {
        let p = &self.pending.by_seq[&seq];
        let need = p.unclaimed() as usize;
        let mut found = Vec::with_capacity(need.min(64));
        let ranked = self.jobs[&p.job].ranks.contains_key(&p.class);
        let (job, class) = (p.job, p.class.clone());
        for &(_, host) in &self.pool.idle {
            // With a rank every member competes; without, the fastest `need` do.
            if found.len() == need && !ranked {
                break;
            }
            let m = self.pool.slots[host.0 as usize - 1].machine;
            if member(
                &mut self.jobs,
                &self.pool.machines,
                self.clock.unix,
                job,
                &class,
                m,
            ) {
                found.push(host);
            }
        }
        if ranked {
            // Stable: among equal ranks the speed order of `idle` stays.
            let mut by_rank: Vec<(f64, HostId)> = found
                .iter()
                .map(|&h| (self.rank(job, &class, h), h))
                .collect();
            by_rank.sort_by(|a, b| b.0.total_cmp(&a.0));
            found = by_rank.into_iter().take(need).map(|(_, h)| h).collect();
        }
        for h in found {
            if self.claim_for(seq, h) {
                break;
            }
        }
    }

    /// Takes a claimed slot from its job: a partial host silently leaves its
    /// group; an announced one is removed from the job, its subscribers are
    /// told, and [`Effect::Released`] is emitted. The slot keeps its claim in
    /// its state until the caller sets the next one.
    pub(super) fn release(&mut self, host: HostId, cause: ReleaseCause) {
        let Some(claim) = self.pool.get_slot(host).state.claim().cloned() else {
            return;
        };
        if let Some(seq) = self.pool.get_slot_mut(host).group.take() {
            if let Some(p) = self.pending.by_seq.get_mut(&seq) {
                p.partial.retain(|&h| h != host);
            }
            return;
        }
        let reason = cause.reason(&self.pool.host_name(host));
        let job = self
            .jobs
            .get_mut(&claim.job)
            .expect("allocator invariant: a claimed slot's job exists");
        job.hosts.remove(&host);
        job.host_left(claim.job, host, cause, reason, &mut self.out);
        self.pool.get_slot_mut(host).busy.clear();
        // The pool took it back, or the job gave it back: the job may now
        // lack a minimum, or hold less than its share, which idle slots
        // already there can make up, and no slot may become idle to say so
        // (the owner has it, or a pending request took it at once).
        if matches!(
            cause,
            ReleaseCause::Vacated
                | ReleaseCause::Lost
                | ReleaseCause::Withdrawn
                | ReleaseCause::Deleted
        ) {
            self.dirty = true;
        }
    }

    /// Takes every host and pending request from `job`, which ended or was
    /// held, for `cause`; returns the hosts to offer again (running, and
    /// partial ones) and the suspended ones, for [`Allocator::give_back`].
    pub(super) fn strip_job(
        &mut self,
        job: JobId,
        cause: ReleaseCause,
    ) -> (Vec<HostId>, Vec<HostId>) {
        let announced: Vec<HostId> = self.jobs[&job].hosts.keys().copied().collect();
        let mut freed = self.drop_requests(job);
        let mut suspended = Vec::new();
        for h in announced {
            self.release(h, cause);
            match self.pool.get_slot(h).state {
                SlotState::Claimed(_) => freed.push(h),
                _ => suspended.push(h),
            }
        }
        self.recorded.forget_job(job);
        (freed, suspended)
    }

    /// Hosts a job no longer holds go back: `freed` to the pending
    /// requests or the idle set, `suspended` to their owners.
    pub(super) fn give_back(&mut self, freed: Vec<HostId>, suspended: Vec<HostId>) {
        for h in suspended {
            self.set_state(h, SlotState::Suspended(None));
        }
        self.offer_all(freed);
    }

    pub(super) fn is_partial(&self, host: HostId) -> bool {
        self.pool.get_slot(host).group.is_some()
    }

    pub(super) fn notify_hosts(&mut self, host: HostId, job: JobId, suspended: bool) {
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        let kind = if suspended {
            HostChangeKind::Suspended
        } else {
            HostChangeKind::Resumed
        };
        self.out.host_change(job, host, kind);
        for sub in &j.subs {
            match &sub.kind {
                SubKind::Suspend(set) if suspended && set.contains(&host) => {
                    self.out.effects.push(Effect::Suspended {
                        job,
                        request: sub.req,
                        host,
                    });
                }
                SubKind::Resume(set) if !suspended && set.contains(&host) => {
                    self.out.effects.push(Effect::Resumed {
                        job,
                        request: sub.req,
                        host,
                    });
                }
                _ => {}
            }
        }
    }
}
