//! The invariant walker for tests: [`Allocator::sanity_check`].

use carmi_proto::ids::HostId;

use super::job::SubKind;
use super::pending::Pending;
use super::{Allocator, SlotState};

impl Allocator {
    /// Checks every invariant; panics naming the first one broken. For tests:
    /// it costs a walk over the whole pool (and class evaluations when the pool is small).
    pub fn sanity_check(&self) {
        self.check_slots();
        self.check_queue();
        self.check_jobs();
        self.check_pending();
    }

    /// Each slot against its machine, the idle set, its claim and the partial groups.
    fn check_slots(&self) {
        let mut idle_seen = 0;
        for (i, slot) in self.pool.slots.iter().enumerate() {
            let host = HostId(i as u64 + 1);
            let m = self.pool.machine(slot.machine);
            assert_eq!(
                m.hosts[slot.index as usize], host,
                "host {host}: machine's host list"
            );
            let online = m.online && slot.index < m.slots;
            assert_eq!(
                slot.state == SlotState::Offline,
                !online,
                "host {host}: offline exactly when its machine or slot is"
            );
            if slot.state == SlotState::Idle {
                idle_seen += 1;
                assert!(
                    self.pool.idle.contains(&(m.speed, host)),
                    "host {host}: idle but not in the idle set under its speed key"
                );
            }
            assert!(
                slot.busy.is_empty() || slot.state.claim().is_some(),
                "host {host}: processes counted on an unclaimed slot"
            );
            assert!(
                slot.group.is_none() || slot.state.claim().is_some(),
                "host {host}: in a group but unclaimed"
            );
            if let Some(c) = slot.state.claim() {
                assert!(
                    c.since <= self.clock.now,
                    "host {host}: claimed in the future"
                );
                let job = self
                    .jobs
                    .get(&c.job)
                    .unwrap_or_else(|| panic!("host {host}: claimed by ended job {}", c.job));
                let announced = job.hosts.get(&host);
                let partial: Vec<&Pending> = self
                    .pending
                    .by_seq
                    .values()
                    .filter(|p| p.partial.contains(&host))
                    .collect();
                assert_eq!(
                    slot.group
                        .and_then(|seq| self.pending.by_seq.get(&seq))
                        .map(|p| p.req),
                    partial.first().map(|p| p.req),
                    "host {host}: partial-group mark disagrees with the queue"
                );
                match (announced, partial.as_slice()) {
                    (Some(class), []) => {
                        assert_eq!(
                            class, &c.class,
                            "host {host}: class of claim and job differ"
                        )
                    }
                    (None, [p]) => {
                        assert_eq!(p.job, c.job, "host {host}: partial for another job");
                        assert_eq!(p.class, c.class, "host {host}: partial for another class");
                        assert!(
                            matches!(slot.state, SlotState::Claimed(_)),
                            "host {host}: a partial host is never suspended"
                        );
                    }
                    _ => panic!(
                        "host {host}: claimed by {} but announced {} and in {} partial groups",
                        c.job,
                        announced.is_some(),
                        partial.len()
                    ),
                }
            }
        }
        assert_eq!(
            idle_seen,
            self.pool.idle.len(),
            "idle set holds non-idle slots"
        );
    }

    /// The queue of waiting jobs, the clusters and the running set against the jobs.
    fn check_queue(&self) {
        for (&seq, job) in &self.waiting.queue {
            let j = self
                .jobs
                .get(job)
                .unwrap_or_else(|| panic!("queued job {job} does not exist"));
            assert_eq!(
                j.seq, seq,
                "job {job}: queued under another sequence number"
            );
            assert_eq!(
                j.phase,
                super::Phase::Waiting,
                "job {job}: queued but not waiting"
            );
            assert!(j.hosts.is_empty(), "job {job}: holds hosts while waiting");
            assert!(
                self.waiting.of(*job).is_some(),
                "job {job}: queued but in no cluster"
            );
        }
        let waiting = self
            .jobs
            .values()
            .filter(|j| j.phase == super::Phase::Waiting)
            .count();
        assert_eq!(
            waiting,
            self.waiting.queue.len(),
            "a waiting job is not queued"
        );
        assert_eq!(
            self.waiting.jobs(),
            self.waiting.queue.len(),
            "clusters hold jobs that do not wait"
        );
        let running: std::collections::BTreeSet<_> = self
            .jobs
            .iter()
            .filter(|(_, j)| matches!(j.phase, super::Phase::Running { .. }))
            .map(|(&id, _)| id)
            .collect();
        assert_eq!(running, self.running, "the running set is out of step");
        let counted = self.recount_limits();
        let kept = &self.concurrency.in_use;
        let names: std::collections::BTreeSet<&String> =
            counted.keys().chain(kept.keys()).collect();
        for name in names {
            let (c, k) = (
                counted.get(name).copied().unwrap_or(0.0),
                kept.get(name).copied().unwrap_or(0.0),
            );
            assert!(
                (c - k).abs() < 1e-6,
                "concurrency limit {name}: {k} kept in use, {c} held by running jobs"
            );
        }
    }

    /// Each job's hosts and subscriptions against the slots.
    fn check_jobs(&self) {
        for (&id, job) in &self.jobs {
            for (&h, class) in &job.hosts {
                let claim = self.pool.get_slot(h).state.claim();
                assert!(
                    claim.is_some_and(|c| c.job == id),
                    "job {id}: host {h} listed but claimed by {claim:?}"
                );
                assert!(
                    job.classes.contains_key(class),
                    "job {id}: host {h} of undefined class `{class}`"
                );
            }
            assert_eq!(
                job.sub_reqs,
                job.subs.iter().map(|s| s.req).collect(),
                "job {id}: subscription index"
            );
            assert_eq!(
                job.sub_reqs.len(),
                job.subs.len(),
                "job {id}: one subscription per request"
            );
            for s in &job.subs {
                if let SubKind::Delete(set) | SubKind::Suspend(set) | SubKind::Resume(set) = &s.kind
                {
                    assert!(!set.is_empty(), "job {id}: empty host subscription");
                    assert!(
                        set.iter().all(|h| job.hosts.contains_key(h)),
                        "job {id}: subscription to a host it does not hold"
                    );
                }
            }
        }
    }

    /// The pending requests against their indexes, jobs and classes, and first come, first served.
    fn check_pending(&self) {
        assert_eq!(
            self.pending.by_seq.len(),
            self.pending.by_req.len(),
            "request index size"
        );
        let grouped: usize = self.pending.groups.values().map(|s| s.len()).sum();
        assert_eq!(self.pending.by_seq.len(), grouped, "group index size");
        for (&seq, p) in &self.pending.by_seq {
            assert_eq!(
                self.pending.by_req.get(&p.req),
                Some(&seq),
                "request index of {:?}",
                p.req
            );
            assert!(
                self.pending
                    .groups
                    .get(&(p.job, p.class.clone()))
                    .is_some_and(|s| s.contains(&seq)),
                "group index of {:?}",
                p.req
            );
            assert!(
                seq < self.pending.next_seq,
                "sequence number from the future"
            );
            let job = self
                .jobs
                .get(&p.job)
                .unwrap_or_else(|| panic!("pending {:?} of ended job {}", p.req, p.job));
            assert!(
                job.classes.contains_key(&p.class),
                "pending of undefined class"
            );
            assert!(p.remaining > 0, "a complete request is still pending");
            let excluded = &job.classes[&p.class].excluded;
            assert!(
                p.partial
                    .iter()
                    .all(|&h| !excluded.contains(&self.pool.get_slot(h).machine)),
                "pending {:?}: holds a host of a machine its class excludes",
                p.req
            );
            assert!(
                (p.partial.len() as u32) < p.increment.min(p.remaining),
                "pending {:?}: a complete group was not announced",
                p.req
            );
        }
        // First come, first served means no idle slot belongs to a pending
        // request's class. Evaluated afresh (not from the caches), when cheap.
        if self.pool.idle.len() * self.pending.by_seq.len() <= 20_000 {
            for p in self.pending.by_seq.values() {
                let job = &self.jobs[&p.job];
                let class = &job.classes[&p.class];
                for &(_, h) in &self.pool.idle {
                    let m = self.pool.get_slot(h).machine;
                    let ok = class.admits(m, self.pool.machine(m), &job.ad);
                    assert!(
                        !ok,
                        "idle host {h} belongs to class `{}` of pending request {:?}",
                        p.class, p.req
                    );
                }
            }
        }
    }
}
