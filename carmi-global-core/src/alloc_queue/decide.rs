//! The decisions of [`AllocQueues::on_tick`] and what the batch system says.

use std::collections::BTreeMap;

use super::{
    AllocQueues, AllocState, Allocation, BatchState, KEEP_ENDED, QueueCommand, QueueState,
    pilot_name,
};

impl AllocQueues {
    /// Looks at every queue: polls the batch system when due, ends idle
    /// pilots and allocations that never registered, and submits for
    /// `demand` (per queue: hosts wanted that the pool cannot give and its
    /// pilots would match). `busy` says how many hosts of a pilot machine
    /// a job holds.
    pub fn on_tick(&mut self, now: u64, demand: &BTreeMap<u64, u32>, busy: impl Fn(&str) -> u32) {
        if self
            .polled
            .is_none_or(|p| now >= p.saturating_add(self.config.poll_s.max(1)))
        {
            self.polled = Some(now);
            let jobs: Vec<String> = self
                .queues
                .values()
                .flat_map(|q| q.allocs.values())
                .filter(|a| !a.state.over())
                .filter_map(|a| a.batch_job.clone())
                .collect();
            if !jobs.is_empty() {
                self.out.push(QueueCommand::Poll { jobs });
            }
        }
        let ids: Vec<u64> = self.queues.keys().copied().collect();
        for qid in ids {
            self.watch(qid, now, &busy);
            let unmet = demand.get(&qid).copied().unwrap_or(0);
            if let Some(q) = self.queues.get_mut(&qid)
                && q.demand != unmet
            {
                q.demand = unmet;
                self.changed = true;
            }
            self.grow(qid, now, unmet, &busy);
            self.forget(qid);
        }
    }

    /// What the batch system said about the jobs of the last
    /// [`QueueCommand::Poll`]; a job it did not mention is gone.
    pub fn on_batch_states(&mut self, states: &[(String, BatchState)], now: u64) {
        let ids: Vec<(u64, u64)> = self
            .queues
            .values()
            .flat_map(|q| q.allocs.values().map(move |a| (q.id, a.id)))
            .collect();
        for (qid, aid) in ids {
            let a = &self.queues[&qid].allocs[&aid];
            let Some(job) = a.batch_job.clone() else {
                continue;
            };
            if a.state.over() {
                continue;
            }
            let Some((_, state)) = states.iter().find(|(j, _)| *j == job) else {
                continue;
            };
            self.on_batch_state(qid, aid, state.clone(), now);
        }
    }

    fn on_batch_state(&mut self, qid: u64, aid: u64, state: BatchState, now: u64) {
        let a = self.alloc_mut(qid, aid);
        match state {
            BatchState::Pending(reason) => {
                if matches!(a.state, AllocState::Submitting | AllocState::Queued) {
                    let note = (!reason.is_empty() && reason != "None").then_some(reason);
                    if a.state != AllocState::Queued || a.note != note {
                        a.state = AllocState::Queued;
                        a.note = note;
                        self.changed = true;
                    }
                }
            }
            BatchState::Running => {
                if matches!(a.state, AllocState::Submitting | AllocState::Queued) {
                    a.state = AllocState::Running { since: now };
                    self.changed = true;
                }
            }
            BatchState::Gone(why) => match a.state {
                AllocState::Registered | AllocState::Ending => {
                    a.state = AllocState::Ended;
                    if !why.is_empty() && a.note.is_none() {
                        a.note = Some(why);
                    }
                    for p in a.pilots.values_mut() {
                        p.up = false;
                    }
                    self.changed = true;
                }
                _ => {
                    let why = if why.is_empty() {
                        "it ended before its pilot registered".to_string()
                    } else {
                        format!("it ended before its pilot registered: {why}")
                    };
                    // A job Slurm will never start is still in its queue.
                    self.cancel(qid, aid, why.clone());
                    self.fail(qid, aid, why, now);
                }
            },
        }
    }

    fn alloc_mut(&mut self, qid: u64, aid: u64) -> &mut Allocation {
        self.queues
            .get_mut(&qid)
            .and_then(|q| q.allocs.get_mut(&aid))
            .expect("allocation of a known queue")
    }

    /// Idle pilots, allocations that never registered, dry runs that take too long.
    fn watch(&mut self, qid: u64, now: u64, busy: &impl Fn(&str) -> u32) {
        let q = &self.queues[&qid];
        let removing = matches!(q.state, QueueState::Removing);
        let standby = self.has_expiring_busy(qid, now, busy);
        let window = q.spec.lead() + self.config.replace_margin_s;
        let idle_after = q.spec.idle_timeout_s;
        let grace = self.config.register_grace_s;
        let aids: Vec<u64> = q.allocs.keys().copied().collect();
        for aid in aids {
            let a = self.alloc_mut(qid, aid);
            match a.state {
                AllocState::Registered => {
                    // Pilots all down (a restart of the global RM): they
                    // are waited for, or Slurm says they are gone.
                    let mut all_idle = a.pilots.values().any(|p| p.up);
                    let mut idle_from = 0;
                    for (name, p) in a.pilots.iter_mut().filter(|(_, p)| p.up) {
                        if busy(name) > 0 {
                            p.idle_since = None;
                            all_idle = false;
                        } else {
                            idle_from = idle_from.max(*p.idle_since.get_or_insert(now));
                        }
                    }
                    let expired = now >= idle_from.saturating_add(idle_after);
                    let ending = a.ends.is_some_and(|e| now.saturating_add(window) >= e);
                    if all_idle && (removing || (expired && (!standby || ending))) {
                        let why = if removing {
                            "its queue was removed".to_string()
                        } else {
                            format!("idle for {idle_after} s")
                        };
                        self.cancel(qid, aid, why);
                    }
                }
                AllocState::Running { since } if now >= since.saturating_add(grace) => {
                    let msg = format!("running for {grace} s without its pilot registering");
                    self.cancel(qid, aid, msg.clone());
                    self.fail(qid, aid, msg, now);
                }
                AllocState::Queued | AllocState::Submitting
                    if a.dry_run.is_some() && now >= a.submitted.saturating_add(grace) =>
                {
                    let msg = format!(
                        "no pilot registered within {grace} s; the batch system says: {}",
                        a.note.as_deref().unwrap_or("nothing")
                    );
                    self.cancel(qid, aid, msg.clone());
                    self.fail(qid, aid, msg, now);
                }
                _ => {}
            }
        }
    }

    /// True when a busy pilot of queue `qid` is near its end: idle pilots
    /// then stand by to take over its work.
    fn has_expiring_busy(&self, qid: u64, now: u64, busy: &impl Fn(&str) -> u32) -> bool {
        let q = &self.queues[&qid];
        let window = q.spec.lead() + self.config.replace_margin_s;
        q.allocs.values().any(|a| {
            a.state == AllocState::Registered
                && a.ends.is_some_and(|e| now.saturating_add(window) >= e)
                && a.pilots.keys().any(|m| busy(m) > 0)
        })
    }

    /// Submits as the demand says, within the backlog and the host limit.
    fn grow(&mut self, qid: u64, now: u64, unmet: u32, busy: &impl Fn(&str) -> u32) {
        let q = &self.queues[&qid];
        if q.state != QueueState::Active {
            return;
        }
        let spec = &q.spec;
        let per = spec.hosts_per_alloc;
        let window = spec.lead() + self.config.replace_margin_s;
        let mut expiring = 0u32;
        let mut spare = 0u32;
        let mut coming = 0u32;
        let mut waiting = 0u32;
        let mut hosts = 0u32;
        for a in q.allocs.values() {
            if a.state.over() {
                continue;
            }
            hosts += per;
            if a.state.on_the_way() {
                coming += per;
            }
            if matches!(a.state, AllocState::Submitting | AllocState::Queued) {
                waiting += 1;
            }
            if a.state == AllocState::Registered {
                if a.ends.is_some_and(|e| now.saturating_add(window) >= e) {
                    expiring += a.pilots.keys().map(|m| busy(m)).sum::<u32>();
                } else {
                    // An idle pilot with time left takes over the work of
                    // one that ends: a replacement already there.
                    spare += a
                        .pilots
                        .iter()
                        .filter(|(m, p)| p.up && busy(m) == 0)
                        .count() as u32;
                }
            }
        }
        let mut need = unmet
            .saturating_add(expiring)
            .saturating_sub(coming.saturating_add(spare));
        let (backlog, max) = (spec.backlog, spec.max_hosts);
        while need > 0 && waiting < backlog && hosts + per <= max {
            self.submit(qid, now, None);
            need = need.saturating_sub(per);
            waiting += 1;
            hosts += per;
        }
    }

    /// Submits one allocation of queue `qid`.
    pub(super) fn submit(&mut self, qid: u64, now: u64, dry_run: Option<u64>) {
        let id = self.next_alloc;
        self.next_alloc += 1;
        let q = self.queues.get_mut(&qid).expect("known queue");
        let machines: Vec<String> = (0..q.spec.hosts_per_alloc)
            .map(|i| pilot_name(id, i))
            .collect();
        q.allocs.insert(
            id,
            Allocation {
                id,
                queue: qid,
                batch_job: None,
                state: AllocState::Submitting,
                pilots: machines
                    .iter()
                    .map(|m| (m.clone(), Default::default()))
                    .collect(),
                submitted: now,
                started: None,
                ends: None,
                note: None,
                dry_run,
            },
        );
        self.out.push(QueueCommand::Submit {
            queue: qid,
            alloc: id,
            spec: q.spec.clone(),
            machines,
        });
        self.changed = true;
    }

    /// Cancels allocation `aid` (if it has a batch job and is not over).
    pub(super) fn cancel(&mut self, qid: u64, aid: u64, why: String) {
        let a = self.alloc_mut(qid, aid);
        if a.state.over() || a.state == AllocState::Ending {
            return;
        }
        if let Some(job) = a.batch_job.clone() {
            a.state = AllocState::Ending;
            a.note = Some(why);
            self.out.push(QueueCommand::Cancel { batch_job: job });
            self.changed = true;
        }
    }

    /// Cancels the allocations of queue `qid` that wait in the batch queue.
    pub(super) fn cancel_waiting(&mut self, qid: u64) {
        let waiting: Vec<u64> = self.queues[&qid]
            .allocs
            .values()
            .filter(|a| matches!(a.state, AllocState::Queued | AllocState::Running { .. }))
            .map(|a| a.id)
            .collect();
        for aid in waiting {
            self.cancel(qid, aid, "its queue was removed".into());
        }
    }

    /// A dry run's allocation did its job: cancelled.
    pub(super) fn end_alloc(&mut self, qid: u64, aid: u64) {
        self.cancel(qid, aid, "dry run done".into());
    }

    /// Allocation `aid` failed with `msg`: counted, the queue paused at its limit.
    pub(super) fn fail(&mut self, qid: u64, aid: u64, msg: String, _now: u64) {
        let a = self.alloc_mut(qid, aid);
        a.state = AllocState::Failed;
        a.note = Some(msg.clone());
        for p in a.pilots.values_mut() {
            p.up = false;
        }
        let waiter = a.dry_run.take();
        let q = self.queues.get_mut(&qid).expect("known queue");
        q.failures += 1;
        if q.state == QueueState::Active && q.failures >= q.spec.max_failures {
            q.state =
                QueueState::Paused(format!("{} failures in a row; the last: {msg}", q.failures));
        }
        self.changed = true;
        if let Some(waiter) = waiter {
            self.out.push(QueueCommand::DryRunDone {
                waiter,
                ok: false,
                report: msg,
            });
        }
    }

    /// Drops old ended allocations, and a removed queue once all of its are over.
    fn forget(&mut self, qid: u64) {
        let q = self.queues.get_mut(&qid).expect("known queue");
        let over: Vec<u64> = q
            .allocs
            .values()
            .filter(|a| a.state.over())
            .map(|a| a.id)
            .collect();
        if over.len() > KEEP_ENDED {
            for aid in &over[..over.len() - KEEP_ENDED] {
                q.allocs.remove(aid);
            }
            self.changed = true;
        }
        let done = q.allocs.values().all(|a| a.state.over());
        if done && matches!(q.state, QueueState::Removing | QueueState::DryRun) {
            self.queues.remove(&qid);
            self.changed = true;
        }
    }
}
