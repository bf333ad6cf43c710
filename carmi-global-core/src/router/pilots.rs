//! The router's side of the allocation queues (`crate::alloc_queue`):
//! `carmi alloc` requests, the demand the queues see (what jobs want that
//! the pool cannot give, and that a pilot of the queue would match), the
//! pilots registering and being lost, and what the driver reports back from
//! the batch system.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use carmi_proto::msg::{AllocAnswer, AllocRequest, FailureCode, FromGlobal};
use classad::ClassAd;

use super::{LinkId, Output, Router};
use crate::alloc_queue::{AllocQueues, BatchState, QueueCommand, alloc_of};
use crate::journal::Record;

/// The allocation queues, and the admins waiting for a dry run's answer.
pub(super) struct Pilots {
    /// The allocation queues (`carmi alloc`).
    pub queues: AllocQueues,
    /// Dry runs waiting for their pilot, by number: the admin connection to answer.
    pub dry_runs: HashMap<u64, LinkId>,
    /// The next dry run's number.
    pub next_waiter: u64,
}

impl Pilots {
    /// No queue yet.
    pub fn new() -> Pilots {
        Pilots {
            queues: AllocQueues::new(Default::default()),
            dry_runs: HashMap::new(),
            next_waiter: 1,
        }
    }
}

impl Router {
    /// Wall-clock seconds now (the queues' clock).
    pub(super) fn now_unix(&self) -> u64 {
        self.config.started_unix.saturating_add(self.now.as_secs())
    }

    /// The queues' next deadline on the router's clock.
    pub(super) fn pilots_deadline(&self) -> Option<Duration> {
        let at = self.pilots.queues.next_deadline()?;
        Some(Duration::from_secs(
            at.saturating_sub(self.config.started_unix),
        ))
    }

    /// `carmi alloc ...` from an admin.
    pub(super) fn alloc_request(&mut self, link: LinkId, req: AllocRequest) {
        let now = self.now_unix();
        let answer = match req {
            AllocRequest::Add(spec) => self.pilots.queues.add(spec).map(AllocAnswer::Queue),
            AllocRequest::List => Ok(AllocAnswer::Queues(self.pilots.queues.list())),
            AllocRequest::Info { queue } => self
                .pilots
                .queues
                .status(queue, true)
                .map(AllocAnswer::Queue)
                .ok_or_else(|| format!("no allocation queue {queue}")),
            AllocRequest::Pause { queue } => {
                self.pilots.queues.pause(queue).map(AllocAnswer::Queue)
            }
            AllocRequest::Resume { queue } => {
                self.pilots.queues.resume(queue).map(AllocAnswer::Queue)
            }
            AllocRequest::Remove { queue } => {
                self.pilots.queues.remove(queue).map(AllocAnswer::Queue)
            }
            AllocRequest::DryRun(spec) => {
                let waiter = self.pilots.next_waiter;
                self.pilots.next_waiter += 1;
                match self.pilots.queues.dry_run(spec, waiter, now) {
                    Ok(()) => {
                        // Answered when the pilot registers or fails.
                        self.pilots.dry_runs.insert(waiter, link);
                        self.pilot_outputs();
                        return;
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match answer {
            Ok(a) => self.send(link, FromGlobal::Alloc(a)),
            Err(e) => self.admin_fail(link, FailureCode::Invalid, e),
        }
        self.pilot_outputs();
    }

    /// The driver submitted allocation `alloc`: the batch job id, or the
    /// batch system's refusal.
    pub fn on_pilot_submitted(
        &mut self,
        alloc: u64,
        result: Result<String, String>,
        now: Duration,
    ) {
        self.advance(now);
        let now = self.now_unix();
        self.pilots.queues.on_submitted(alloc, result, now);
        self.pilot_outputs();
    }

    /// The driver's answer to a [`QueueCommand::Poll`].
    pub fn on_batch_states(&mut self, states: &[(String, BatchState)], now: Duration) {
        self.advance(now);
        let now = self.now_unix();
        self.pilots.queues.on_batch_states(states, now);
        self.pilot_outputs();
    }

    /// A machine registered: a pilot's allocation hears of it.
    pub(super) fn pilot_registered(&mut self, name: &str, ad: &ClassAd) {
        if alloc_of(name).is_none() {
            return;
        }
        let ends = ad
            .eval_attr("PilotEndsAt")
            .as_f64()
            .filter(|e| *e > 0.0)
            .map(|e| e as u64);
        let now = self.now_unix();
        self.pilots.queues.on_pilot_registered(name, ends, now);
        self.pilot_outputs();
    }

    /// A machine was lost: if it was a pilot, its allocation hears of it.
    pub(super) fn pilot_lost(&mut self, name: &str) {
        self.pilots.queues.on_pilot_lost(name);
        self.pilot_outputs();
    }

    /// The queues' tick, when due: demand and pilots' use looked at.
    pub(super) fn pilot_tick(&mut self) {
        let now = self.now_unix();
        if self.pilots.queues.next_deadline().is_none_or(|d| d > now) {
            return;
        }
        let demand = self.pilot_demand(now);
        let alloc = &self.alloc;
        let busy = |machine: &str| -> u32 {
            alloc
                .machine_hosts(machine)
                .iter()
                .filter(|h| alloc.host_state(**h).is_some_and(|s| s.claim().is_some()))
                .count() as u32
        };
        self.pilots.queues.on_tick(now, &demand, busy);
        self.pilot_outputs();
    }

    /// Per queue: hosts (pilots) wanted by jobs that the pool cannot give
    /// and that a pilot of the queue would match (an ad with what a pilot
    /// of it will say: `PilotQueue`, `PilotEndsAt`, `SlurmJobId`, `Cpus`).
    fn pilot_demand(&self, now: u64) -> BTreeMap<u64, u32> {
        let unmet = self.alloc.unmet_demand();
        let mut out = BTreeMap::new();
        if unmet.is_empty() {
            return out;
        }
        for (id, spec) in self.pilots.queues.specs() {
            let text = format!(
                "[ Name = \"pilot\"; Cpus = {}; PilotQueue = {id}; PilotEndsAt = {}; SlurmJobId = 0; ]",
                spec.cpus,
                now + spec.time_limit_s
            );
            let Ok(ad) = ClassAd::parse(&text) else {
                continue;
            };
            let slots: u32 = unmet
                .iter()
                .filter(|u| self.alloc.would_match(u.job, &u.class, &ad, true))
                .map(|u| u.hosts)
                .sum();
            out.insert(id, slots.div_ceil(spec.cpus.max(1)));
        }
        out
    }

    /// Carries the queues' commands to the driver, their snapshot first.
    pub(super) fn pilot_outputs(&mut self) {
        if self.pilots.queues.take_changed() {
            let snap = Box::new(self.pilots.queues.snapshot());
            self.out.push(Output::Journal(Record::Pilots(snap)));
        }
        for c in self.pilots.queues.take_commands() {
            match c {
                QueueCommand::DryRunDone { waiter, ok, report } => {
                    if let Some(link) = self.pilots.dry_runs.remove(&waiter) {
                        self.send(link, FromGlobal::Alloc(AllocAnswer::DryRun { ok, report }));
                    }
                }
                other => self.out.push(Output::Pilot(other)),
            }
        }
    }
}
