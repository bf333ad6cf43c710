//! The machinery under every input: slot state changes that keep the idle
//! set in step, offering a free slot to the pending requests, claiming and
//! announcing groups, and taking a host back from its job.

use carmi_proto::ids::{HostId, JobId};
use carmi_proto::msg::HostInfo;

use super::{
    Allocator, Claim, Effect, HostChange, HostChangeKind, Pending, ReleaseCause, ReqRef, SlotState,
    SubKind, member,
};

impl Allocator {
    /// Sets a slot's state, keeping the idle set in step.
    pub(super) fn set_state(&mut self, host: HostId, state: SlotState) {
        let slot = self.get_slot(host);
        let key = self.machines[slot.machine.0 as usize].speed;
        if slot.state == SlotState::Idle {
            self.idle.remove(&(key, host));
        }
        if state == SlotState::Idle {
            self.idle.insert((key, host));
            self.dirty = true;
        }
        if state.claim().is_none() {
            self.get_slot_mut(host).busy.clear();
        }
        self.get_slot_mut(host).state = state;
    }

    /// Queues a pending request; returns its sequence number.
    pub(super) fn push_pending(&mut self, p: Pending) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending_by_req.insert(p.req, seq);
        self.groups
            .entry((p.job, p.class.clone()))
            .or_default()
            .insert(seq);
        self.pending.insert(seq, p);
        seq
    }

    /// Takes a request off the queue. Its partial hosts stay claimed: the
    /// caller offers them again.
    pub(super) fn remove_pending(&mut self, seq: u64) -> Pending {
        let p = self
            .pending
            .remove(&seq)
            .expect("allocator invariant: removing a queued request");
        self.pending_by_req.remove(&p.req);
        let key = (p.job, p.class.clone());
        if let Some(set) = self.groups.get_mut(&key) {
            set.remove(&seq);
            if set.is_empty() {
                self.groups.remove(&key);
            }
        }
        for &h in &p.partial {
            self.get_slot_mut(h).group = None;
        }
        p
    }

    /// Gives an unclaimed, available slot to the oldest pending request whose
    /// class it belongs to, or makes it idle.
    pub(super) fn offer(&mut self, host: HostId) {
        let m = self.get_slot(host).machine;
        let mut best: Option<u64> = None;
        for ((job, class), seqs) in &self.groups {
            let head = *seqs
                .first()
                .expect("allocator invariant: groups are never empty");
            // An older match is already known: no need to evaluate this class.
            if best.is_some_and(|b| b < head) {
                continue;
            }
            if member(&mut self.jobs, &self.machines, self.clock, *job, class, m) {
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
        let p = &self.pending[&seq];
        let claim = Claim {
            job: p.job,
            class: p.class.clone(),
            since: self.now,
        };
        self.set_state(host, SlotState::Claimed(claim));
        self.get_slot_mut(host).group = Some(seq);
        let p = self.pending.get_mut(&seq).expect("looked up above");
        p.partial.push(host);
        let group = p.increment.min(p.remaining);
        if (p.partial.len() as u32) < group {
            return false;
        }
        p.remaining -= group;
        let hosts = std::mem::take(&mut p.partial);
        let (job, req, class, remaining) = (p.job, p.req, p.class.clone(), p.remaining);
        for &h in &hosts {
            self.get_slot_mut(h).group = None;
        }
        self.announce(job, req, &class, &hosts, remaining);
        if remaining == 0 {
            self.remove_pending(seq);
        }
        remaining == 0
    }

    fn announce(&mut self, job: JobId, req: ReqRef, class: &str, hosts: &[HostId], remaining: u32) {
        let infos: Vec<HostInfo> = hosts.iter().map(|&h| self.host_info(h, class)).collect();
        let j = self
            .jobs
            .get_mut(&job)
            .expect("allocator invariant: a pending request's job exists");
        for &h in hosts {
            j.hosts.insert(h, class.to_string());
            self.host_changes.push(HostChange {
                job,
                host: h,
                kind: HostChangeKind::Added,
            });
        }
        let watchers: Vec<ReqRef> = j
            .subs
            .iter()
            .filter(|s| matches!(&s.kind, SubKind::Add(c) if c == class))
            .map(|s| s.req)
            .collect();
        self.effects.push(Effect::Grant {
            job,
            request: req,
            hosts: infos.clone(),
            remaining,
        });
        for w in watchers {
            for info in &infos {
                self.effects.push(Effect::Added {
                    job,
                    request: w,
                    host: info.clone(),
                });
            }
        }
    }

    /// Fills pending request `seq` from the idle slots, fastest first
    /// (dequeuing it if that completes it).
    pub(super) fn serve(&mut self, seq: u64) {
        let p = &self.pending[&seq];
        let need = (p.remaining as usize).saturating_sub(p.partial.len());
        let mut found = Vec::with_capacity(need.min(64));
        let ranked = self.jobs[&p.job].ranks.contains_key(&p.class);
        let (job, class) = (p.job, p.class.clone());
        for &(_, host) in &self.idle {
            // With a rank every member competes; without, the fastest `need` do.
            if found.len() == need && !ranked {
                break;
            }
            let m = self.slots[host.0 as usize - 1].machine;
            if member(&mut self.jobs, &self.machines, self.clock, job, &class, m) {
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
        let Some(claim) = self.get_slot(host).state.claim().cloned() else {
            return;
        };
        if let Some(seq) = self.get_slot_mut(host).group.take() {
            if let Some(p) = self.pending.get_mut(&seq) {
                p.partial.retain(|&h| h != host);
            }
            return;
        }
        let reason = cause.reason(&self.host_name(host));
        let job = self
            .jobs
            .get_mut(&claim.job)
            .expect("allocator invariant: a claimed slot's job exists");
        job.hosts.remove(&host);
        for sub in &mut job.subs {
            match &mut sub.kind {
                SubKind::Delete(set) => {
                    if set.remove(&host)
                        && !matches!(cause, ReleaseCause::JobEnded | ReleaseCause::Held)
                    {
                        self.effects.push(Effect::Deleted {
                            job: claim.job,
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
        // A host subscription whose hosts are all gone has nothing left to report.
        job.retain_subs(|s| match &s.kind {
            SubKind::Add(_) => true,
            SubKind::Delete(set) | SubKind::Suspend(set) | SubKind::Resume(set) => !set.is_empty(),
        });
        self.get_slot_mut(host).busy.clear();
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
        self.host_changes.push(HostChange {
            job: claim.job,
            host,
            kind: HostChangeKind::Removed(cause),
        });
        self.effects.push(Effect::Released {
            job: claim.job,
            host,
            cause,
        });
    }

    pub(super) fn is_partial(&self, host: HostId) -> bool {
        self.get_slot(host).group.is_some()
    }

    pub(super) fn notify_hosts(&mut self, host: HostId, job: JobId, suspended: bool) {
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        self.host_changes.push(HostChange {
            job,
            host,
            kind: if suspended {
                HostChangeKind::Suspended
            } else {
                HostChangeKind::Resumed
            },
        });
        for sub in &j.subs {
            match &sub.kind {
                SubKind::Suspend(set) if suspended && set.contains(&host) => {
                    self.effects.push(Effect::Suspended {
                        job,
                        request: sub.req,
                        host,
                    });
                }
                SubKind::Resume(set) if !suspended && set.contains(&host) => {
                    self.effects.push(Effect::Resumed {
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
