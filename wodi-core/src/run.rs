//! Every decision of a WoDi run, as one pure state machine: the WoDi server
//! (`wodi::server`) and the simulator feed it what happens and carry out what
//! it asks.
//!
//! Inputs are the masters' and workers' messages, their connections opening
//! and dropping, CARMI's events, and `now` (time since the server started, a
//! plain [`Time`]: real in the server, virtual in tests and simulations).
//! Outputs ([`Output`]) are messages to send to a master or a worker and
//! requests to make of CARMI; [`Run::next_deadline`] says when to call
//! [`Run::tick`] if nothing else happens before. No wall clock, no channel,
//! no I/O: a test drives it step by step and a simulator at any speed.
//!
//! What it decides, beside the scheduler core ([`Sched`]) it holds:
//! - the run's configuration from the first master's `Init`, and the
//!   desired host count of each class, summed over masters;
//! - retiring a master (its steps cancelled, its classes' counts given back);
//! - the fewest-hosts rule after each cycle, with its hysteresis;
//! - the context a worker holds (which master's init and cycle data), and
//!   sending another master's context before that master's step;
//! - the speed benchmark step of a newly connected worker;
//! - which CARMI request answers what (host requests, spawns, host ads,
//!   exclusions, withdrawals);
//! - the loss grace: a worker whose connection drops is lost only after a
//!   grace, and its step is charged (toward the poison-step limit) only on
//!   the pool's word that its process died on a host still the run's: a
//!   vacated host, or a machine the pool declares lost after the grace, is
//!   not the step's fault;
//! - spawns the pool cannot serve for now (`Unavailable`) retried after the
//!   retry delay, not counted as crashes;
//! - how often the masters hear the run's [`Status`](crate::proto::Status).
//!
//! Each input is a method; [`Input`] holds any of them as one serde-able
//! value ([`Run::handle`]) for drivers that queue, record or replay them.
//!
//! The driver's contract: after an [`Output::Carmi`], it makes the request
//! and calls [`Run::issued`] with the request id CARMI's client gave it
//! before polling the next output (the run matches CARMI's events to its
//! requests by those ids).
//!
//! # Layout
//! - `call`: what the run asks of CARMI ([`CarmiCall`]) and the protocol
//!   requests each call is made of, for every driver.
//! - `parts`: the groups the run's state is kept in (clock, outbox,
//!   requests, status, classes, workers, open steps).
//! - `carmi`, `masters`, `workers`: what each kind of input does;
//!   `outputs`: the outputs in order; `input`: inputs as values.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use carmi_proto::ids::{HostId, ProcessId, RequestId};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::ids::{CycleId, WorkerId};
use crate::order::LongestFirst;
use crate::plan::Hysteresis;
use crate::proto::{ToMaster, ToWorker};
use crate::sched::{Sched, SchedConfig, Ticket};
use crate::speed::{HostSpeeds, SpeedSource};
use crate::time::Time;

mod call;
mod carmi;
mod input;
mod masters;
mod outputs;
mod parts;
mod workers;

pub use call::{CarmiCall, CarmiRequests};
pub use input::{Input, Taken};
use parts::{Classes, Clock, Outbox, Requests, StatusReport, Tickets, Workers};

/// A master connected to the run (several may share its workers), numbered
/// by the run in connection order.
pub type MasterId = u64;

/// Names one CARMI request the run asked for, until the driver says which
/// [`RequestId`] CARMI's client gave it ([`Run::issued`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct CallId(pub u64);

/// The run's settings that do not come from a master.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The run's token, in every worker's connection argument.
    pub token: String,
    /// `host:port` workers dial to reach the server.
    pub connect_addr: String,
    /// How long after a worker's connection drops it is lost (its steps
    /// sent again), unless it is back.
    pub loss_grace: Duration,
    /// How long to wait for the first master before giving up.
    pub master_timeout: Duration,
    /// How long to wait before asking again for hosts, or spawning again a
    /// worker, the pool could not serve for now (its local RM reconnecting
    /// to the global RM, say).
    pub host_retry: Duration,
    /// How often at most the masters hear of a changed [`Status`](crate::proto::Status).
    pub status_every: Duration,
}

impl RunConfig {
    /// The server's settings: a grace of 500 ms, 30 s for the master to
    /// connect, 1 s before asking again for hosts, status at most 4 times a second.
    pub fn new(token: impl Into<String>, connect_addr: impl Into<String>) -> RunConfig {
        RunConfig {
            token: token.into(),
            connect_addr: connect_addr.into(),
            loss_grace: Duration::from_millis(500),
            master_timeout: Duration::from_secs(30),
            host_retry: Duration::from_secs(1),
            status_every: Duration::from_millis(250),
        }
    }
}

/// What the run asks its driver to do, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Output {
    /// Send a message (and its payload) to a master.
    ToMaster {
        /// The master.
        master: MasterId,
        /// The message.
        msg: ToMaster,
        /// Its payload.
        payload: Bytes,
    },
    /// Send a message (and its payload) to a connected worker.
    ToWorker {
        /// The worker.
        worker: WorkerId,
        /// The message.
        msg: ToWorker,
        /// Its payload.
        payload: Bytes,
    },
    /// Make a CARMI request, then tell [`Run::issued`] its id.
    Carmi {
        /// The run's name for it.
        call: CallId,
        /// The request.
        request: CarmiCall,
    },
}

/// What the run keeps about one master.
#[derive(Debug, Default)]
struct MasterState {
    /// Its init data, sent to a worker before that worker's first step of it.
    init: Bytes,
    /// Its cycle under way and the cycle's data.
    cycle: Option<(CycleId, Bytes)>,
    /// Hosts it added to each class's desired count.
    classes: Vec<(String, u32)>,
    /// It sent `Complete` (or left): its steps are cancelled, its hosts no longer wanted.
    retired: bool,
}

/// The fewest-hosts rule (`Policies::fewest_hosts`).
#[derive(Debug)]
struct Fewest {
    /// How much longer than the best cycle a cycle may take.
    tolerance: f64,
    /// Cycles in a row an answer one off must repeat before a count follows it.
    patience: u32,
    /// Each class's count, through its hysteresis.
    holds: BTreeMap<String, Hysteresis>,
    /// With `Policies::grow_first_cycle`, until the first cycle ends: how
    /// many of its steps had history when the counts last grew.
    first_known: Option<usize>,
    /// `Policies::loss_aware`: the tolerance scales with a held host's cost.
    loss_aware: bool,
}

/// What a CARMI request the run made is for.
#[derive(Clone, Debug)]
enum Purpose {
    /// Hosts of this class.
    Hosts(String),
    /// Withdrawing a host request.
    Cancel,
    /// Starting this worker.
    Spawn(WorkerId),
    /// The machine ad of this host.
    Info(HostId),
    /// Excluding this host from this class.
    Exclude(HostId, String),
}

/// Something to do at a time, beside the scheduler's own deadlines.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// The master should have connected by now.
    MasterDue,
    /// Ask again for the hosts of a class the pool could not serve.
    RetryHosts(String),
    /// Spawn again a worker whose spawn the pool could not serve for now.
    RetrySpawn(WorkerId),
    /// The worker's loss grace ended: lost unless it is back.
    LossDue(WorkerId),
}

/// An output waiting its turn; statistics are computed when their turn comes,
/// after every decision before them has been carried out.
#[derive(Debug)]
enum Queued {
    Out(Output),
    /// The statistics answering a master's `Complete`.
    Stats(MasterId),
}

/// Workers in a row that may exit before connecting before the run gives up
/// with [`ToMaster::Fatal`]: a worker that dies at start-up on every host (a
/// missing library, a script that fails to parse its arguments) would
/// otherwise be spawned again and again, thousands of processes a minute
/// across the pool. The pool's own kills (SIGTERM, SIGKILL, a lost host) do
/// not count, and any worker connecting resets the count.
pub const MAX_EARLY_DEATHS: u32 = 10;

/// The run: the scheduler core and every decision around it. See the module
/// documentation.
pub struct Run {
    cfg: RunConfig,
    sched: Sched,
    clock: Clock,
    /// Whether the first master's `Init` configured the run.
    started: bool,
    /// The run is over ([`Run::finished`]).
    finished: bool,
    masters: BTreeMap<MasterId, MasterState>,
    next_master: MasterId,
    speeds: HostSpeeds,
    /// The run's own timers, beside the scheduler's deadlines.
    timers: Vec<(Time, Timer)>,
    outbox: Outbox,
    /// The CARMI requests made, by what each is for.
    requests: Requests,
    status: StatusReport,
    classes: Classes,
    workers: Workers,
    /// The open steps' data and owners.
    tickets: Tickets,
}

impl Run {
    /// A run whose server started at `now`; it gives up if no master
    /// connects within the configured timeout.
    pub fn new(cfg: RunConfig, now: Time) -> Run {
        let due = now + cfg.master_timeout;
        Run {
            cfg,
            sched: Sched::new(SchedConfig::default(), Box::new(LongestFirst)),
            clock: Clock {
                now,
                epoch: Duration::ZERO,
            },
            started: false,
            finished: false,
            masters: BTreeMap::new(),
            next_master: 0,
            speeds: HostSpeeds::new(SpeedSource::Unknown, false),
            timers: vec![(due, Timer::MasterDue)],
            outbox: Outbox::default(),
            requests: Requests::default(),
            status: StatusReport::new(now),
            classes: Classes::default(),
            workers: Workers::default(),
            tickets: Tickets::default(),
        }
    }

    /// The scheduler core, for inspection.
    pub fn sched(&self) -> &Sched {
        &self.sched
    }

    /// Whether the run is over (its last master left, it was stopped, or no
    /// master came): the driver calls [`Run::shutdown`] and carries out what
    /// remains.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Whether master `m` is connected (the driver closes the connection of
    /// one that is not, once its last outputs are carried out).
    pub fn has_master(&self, m: MasterId) -> bool {
        self.masters.contains_key(&m)
    }

    /// The worker a CARMI process is, for labelling what it prints.
    pub fn worker_of_process(&self, process: ProcessId) -> Option<WorkerId> {
        self.requests.processes.get(&process).copied()
    }

    /// The scheduler's time: since the first `Init`.
    fn t(&self) -> Time {
        self.clock.t()
    }

    fn set_now(&mut self, now: Time) {
        self.clock.advance(now);
    }

    /// The earliest time [`Run::tick`] has something to do, if any.
    pub fn next_deadline(&self) -> Option<Time> {
        let sched = self.sched.next_deadline().map(|d| d + self.clock.epoch);
        let timer = self.timers.iter().map(|(t, _)| *t).min();
        [sched, timer, self.status.due].into_iter().flatten().min()
    }

    /// Time passed (call it after each batch of inputs and at
    /// [`Run::next_deadline`]): due timers fire, and the scheduler hands out
    /// what it can.
    pub fn tick(&mut self, now: Time) {
        self.set_now(now);
        let now = self.clock.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.timers)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        self.timers = later;
        for (_, timer) in due {
            self.fire(timer);
            if self.finished {
                return;
            }
        }
        let t = self.t();
        if self.sched.next_deadline().is_some_and(|d| d <= t) {
            self.sched.on_deadline(t);
        }
        self.grow_first_cycle();
        self.sched.dispatch(t);
        if self.status.due.is_some_and(|d| d <= now) {
            self.status.due = None;
        }
        self.status.check = true;
    }

    fn fire(&mut self, timer: Timer) {
        let t = self.t();
        match timer {
            Timer::MasterDue => {
                if self.masters.is_empty() {
                    warn!(
                        "no master connected within {:?}; stopping",
                        self.cfg.master_timeout
                    );
                    self.finished = true;
                }
            }
            Timer::RetryHosts(class) => self.sched.request_missing(&class),
            Timer::RetrySpawn(worker) => self.sched.respawn(worker),
            Timer::LossDue(worker) => self.loss_due(worker, t),
        }
    }

    /// The run cannot go on (stopped from outside, CARMI's client gone):
    /// every master is told why, and the run finishes.
    pub fn stop(&mut self, reason: &str, now: Time) {
        self.set_now(now);
        self.fatal(reason);
        self.finished = true;
    }

    /// Ends the run: workers are told to stop and every host goes back.
    /// Carry out the outputs after it.
    pub fn shutdown(&mut self, now: Time) {
        self.set_now(now);
        self.broadcast(None, &ToWorker::Stop, &Bytes::new());
        let t = self.t();
        self.sched.finish(t);
        self.finished = true;
    }

    /// Tells every master that the run cannot go on.
    fn fatal(&mut self, reason: &str) {
        warn!("fatal: {reason}");
        let masters: Vec<MasterId> = self.masters.keys().copied().collect();
        for m in masters {
            let msg = ToMaster::Fatal {
                reason: reason.to_string(),
            };
            self.tell_master(m, msg, Bytes::new());
        }
    }

    /// Queues a message for master `m`, if it is still connected.
    fn tell_master(&mut self, m: MasterId, msg: ToMaster, payload: Bytes) {
        if self.masters.contains_key(&m) {
            self.outbox.queue.push_back(Queued::Out(Output::ToMaster {
                master: m,
                msg,
                payload,
            }));
        }
    }

    /// Queues a message for every connected worker, or only for those
    /// holding master `m`'s context.
    fn broadcast(&mut self, only: Option<MasterId>, msg: &ToWorker, payload: &Bytes) {
        for id in &self.workers.connected {
            if only.is_none() || self.workers.context.get(id).copied() == only {
                self.outbox.queue.push_back(Queued::Out(Output::ToWorker {
                    worker: *id,
                    msg: msg.clone(),
                    payload: payload.clone(),
                }));
            }
        }
    }

    /// A new CARMI request, remembered for what it is for.
    fn call(&mut self, request: CarmiCall, purpose: Option<Purpose>) -> Output {
        self.requests.call(request, purpose)
    }

    /// The driver made the request of [`Output::Carmi`] `call`, and CARMI's
    /// client named it `request`.
    pub fn issued(&mut self, call: CallId, request: RequestId) {
        self.requests.issued(call, request);
    }

    /// Master `m` is done: its open steps are cancelled and its hosts are no
    /// longer wanted (idle surplus hosts are released by the core). The last
    /// master to finish ends the run: workers stop and every host goes back.
    fn retire(&mut self, m: MasterId) {
        let t = self.t();
        let Some(conn) = self.masters.get_mut(&m) else {
            return;
        };
        if conn.retired {
            return;
        }
        conn.retired = true;
        let classes = std::mem::take(&mut conn.classes);
        let mut mine: Vec<Ticket> = self
            .tickets
            .steps
            .iter()
            .filter(|(_, (owner, _))| *owner == m)
            .map(|(t, _)| *t)
            .collect();
        mine.sort();
        for ticket in mine {
            self.sched.cancel(ticket);
            self.tickets.steps.remove(&ticket);
            self.tickets.data.remove(&ticket);
        }
        if self.masters.values().any(|c| !c.retired) {
            for (name, count) in classes {
                let d = self.classes.desired.entry(name.clone()).or_default();
                *d = d.saturating_sub(count);
                let d = *d;
                self.sched.set_class(&name, d, t);
            }
        } else {
            self.broadcast(None, &ToWorker::Stop, &Bytes::new());
            self.sched.finish(t);
        }
    }

    /// With `Policies::fewest_hosts`, after a cycle: the fewest hosts with
    /// which that cycle's steps would end within the tolerance of their
    /// longest (once every step has history), fastest classes first and at
    /// most what the master asked of each class, become the classes'
    /// counts, each through its hysteresis; the core gives surplus hosts back.
    fn hold_fewest_hosts(&mut self) {
        let t = self.t();
        let steps = std::mem::take(&mut self.tickets.cycle_steps);
        let Some(rule) = &mut self.classes.fewest else {
            return;
        };
        rule.first_known = None;
        if self.masters.len() != 1 || steps.is_empty() {
            return;
        }
        let tolerance = self.tolerance_now(t);
        let Some(rule) = &mut self.classes.fewest else {
            return;
        };
        let Some(counts) = self.sched.fewest_hosts_by_class(
            &steps,
            tolerance,
            &self.classes.desired,
            &self.classes.declared_speeds,
        ) else {
            return;
        };
        for (class, k) in counts {
            let asked = self.classes.desired.get(&class).copied().unwrap_or(0);
            let hold = rule
                .holds
                .entry(class.clone())
                .or_insert_with(|| Hysteresis::new(asked, rule.patience));
            let k = hold.update(k);
            info!("fewest hosts for the best cycle: {k} of {asked} in class {class}");
            self.sched.set_class(&class, k, t);
        }
    }

    /// With `Policies::grow_first_cycle`, during the first cycle: once more
    /// of its steps have history, each class grows to the fewest hosts with
    /// which the steps known so far end within the tolerance of their
    /// longest (never above what was asked, never down within the cycle).
    /// Nothing is known of a step before its first result, and a host asked
    /// for late costs the run only the grant latency, while one asked for
    /// too early costs a grant, its losses and its idle time until the
    /// second cycle gives it back: so the run asks as the knowledge arrives.
    fn grow_first_cycle(&mut self) {
        let t = self.t();
        let Some(rule) = &self.classes.fewest else {
            return;
        };
        let Some(seen) = rule.first_known else {
            return;
        };
        if self.masters.len() != 1 {
            // The rule plans one master's cycles: with several, each class
            // holds what was asked of it.
            self.classes
                .fewest
                .as_mut()
                .expect("checked above")
                .first_known = None;
            for (class, d) in self.classes.desired.clone() {
                self.sched.set_class(&class, d, t);
            }
            return;
        }
        let work = self.sched.known_work(&self.tickets.cycle_steps);
        if work.len() <= seen {
            return;
        }
        let counts = self.sched.fewest_hosts_for_work(
            &work,
            self.tolerance_now(t),
            &self.classes.desired,
            &self.classes.declared_speeds,
        );
        let rule = self.classes.fewest.as_mut().expect("checked above");
        rule.first_known = Some(work.len());
        for (class, k) in counts {
            if k > self.sched.class_desired(&class) {
                info!("first cycle: {k} hosts for the {} steps known", work.len());
                rule.holds
                    .insert(class.clone(), Hysteresis::new(k, rule.patience));
                self.sched.set_class(&class, k, t);
            }
        }
    }

    /// The fewest-hosts tolerance to plan with at `t`: the master's, or
    /// with `Policies::loss_aware` the one at which a cycle may take
    /// `(1 + tolerance) * c` times its best, `c` what a held host-second
    /// costs now ([`Sched::host_cost`]): the tolerance is the price the
    /// master puts on time against host time, and a host-second that costs
    /// `c` makes the same time worth `c` times fewer hosts.
    fn tolerance_now(&self, t: Time) -> f64 {
        let Some(rule) = &self.classes.fewest else {
            return 0.0;
        };
        if !rule.loss_aware {
            return rule.tolerance;
        }
        let c = self.sched.host_cost(t, crate::sched::losses::LOSS_WINDOW);
        (1.0 + rule.tolerance) * c - 1.0
    }

    /// The count a class starts with when `asked` hosts of it are wanted:
    /// one while the first cycle is grown ([`Run::grow_first_cycle`]).
    fn starting_count(&self, asked: u32) -> u32 {
        match &self.classes.fewest {
            Some(rule) if rule.first_known.is_some() && self.masters.len() == 1 => asked.min(1),
            _ => asked,
        }
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
