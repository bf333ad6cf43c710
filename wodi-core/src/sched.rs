//! The scheduler core: a pure state machine with no I/O and no clock.
//!
//! The server (or a simulator, or a test) feeds it what happened (`host_*`,
//! `worker_*`, `submit`, `result`, `on_deadline`), each with the current time
//! since the start of the run, and then drains what it decided with
//! [`Sched::poll_output`]: assign a step to a worker, request or release hosts,
//! spawn a worker on a new host, report a step failed. Time must only move
//! forward between calls. [`Sched::next_deadline`] is the one time at which
//! the core wants [`Sched::on_deadline`] to be called (a suspended worker's
//! grace period ending).
//!
//! Exactly once: every submission is a [`Ticket`]; the first result of a
//! ticket is delivered ([`Verdict::Deliver`]) and later copies are discarded.
//! Only open tickets are kept: tickets are issued in increasing order, so a
//! ticket below the next one to issue that is no longer kept is closed
//! (answered, failed or cancelled), and a late copy of it is recognised
//! without remembering it. The core's memory and the cost of
//! [`Sched::status`] follow the open work, not the length of the run.
//! A worker lost with tickets in hand puts them back at the front of the
//! queue; a suspended worker keeps them for `suspend_timeout`, after which
//! they are queued again while the suspended copy may still answer first.
//! The step the crashed worker was computing (its oldest ticket) counts an
//! attempt; after `max_attempts` the step fails instead of killing more workers.
//!
//! Which queued ticket a free worker gets is decided by a [`Dispatch`]
//! policy; [`ArrivalOrder`] is the first-come-first-served one.
//!
//! Submodules: `dispatch` (the [`Dispatch`] trait and what a policy sees,
//! re-exported here), `assign` (free workers given queued tickets),
//! `hosts` (hosts granted, lost, suspended, resumed; desired counts, requests, releases),
//! `workers` (spawned, joined, detached, lost; a worker for a suspended host
//! is spawned when it resumes), [`pace`] (adaptive prefetch), [`losses`] (the loss rate the run measures, what a held host costs), `check` (invariants) and [`policy`] (giving back idle and suspended hosts,
//! straggler copies, fast abort: each switched by a [`SchedConfig`] field).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use std::time::Duration;

use carmi_proto::ids::HostId;

use crate::ids::{CycleId, StepId, WorkerId};
use crate::plan::History;
use crate::stats::{CycleTime, HostRecord, RunOutcome, RunRecord, Stats};

mod assign;
pub mod board;
mod check;
mod dispatch;
mod hosts;
pub mod losses;
pub mod pace;
pub mod policy;
pub mod queue;
mod workers;

pub use board::{HostBoard, Load, Slot};
pub use dispatch::{ArrivalOrder, Board, Dispatch, WorkerView};
pub use queue::StepQueue;

pub use crate::time::Time;

/// One submission of a step: the unit of exactly-once delivery.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Ticket(pub u64);

/// Tunables of the core.
#[derive(Clone, Debug)]
pub struct SchedConfig {
    /// Tickets a worker may hold at once (1 = one step at a time).
    pub prefetch: u32,
    /// Adaptive prefetch: above `prefetch`, the most tickets a worker may
    /// hold when its steps are short against the round trip to it (see
    /// [`pace`]); a worker whose steps are long holds `prefetch`, so that
    /// longest-first order and fastest-host placement still hold. At or
    /// below `prefetch`: every worker holds `prefetch`.
    pub prefetch_max: u32,
    /// Worker crashes a step may cause before it is reported failed.
    pub max_attempts: u32,
    /// How long a suspended worker keeps its steps before they are re-sent.
    pub suspend_timeout: Duration,
    /// Workers that may die on one host in a row before it is given back.
    pub max_respawns: u32,
    /// Learn step times from wall time, not CPU time: for steps that wait
    /// (I/O, emulated hosts) rather than compute, whose CPU time says little.
    pub learn_from_wall: bool,
    /// Give back a host that has nothing to do in the tail of a cycle (the
    /// queue is empty, other steps still run) when that tail lasts longer
    /// than `reacquire`, and ask for hosts again only as queued steps need
    /// them. See [`policy`].
    pub release_idle: bool,
    /// What getting a host back costs: CARMI granting one and a worker
    /// starting on it. An idle host is kept when the cycle should end sooner.
    pub reacquire: Duration,
    /// What one grant costs beyond the run's own wait, as host time the run
    /// would rather leave idle than spend: CARMI's match, the process
    /// start and executable fetch on the host, and the chance that a host
    /// given back goes to another job. With `release_idle`, an idle host is
    /// kept through a cycle's tail unless the tail lasts longer than
    /// `reacquire + grant_cost` (zero: give back every host whose tail
    /// outlasts `reacquire`, churning the pool for the last percent).
    pub grant_cost: Duration,
    /// Give back a suspended host once its grace (`suspend_timeout`) is over,
    /// instead of holding it until its owner leaves or CARMI vacates it.
    pub release_suspended: bool,
    /// In the tail of a cycle, start a second copy of a straggling step on
    /// an idle host that would finish it clearly sooner; the first result wins.
    pub stragglers: bool,
    /// Fast abort: a step running this many times longer than its estimate
    /// on its host is a strike against the worker (and is sent again); two
    /// strikes retire the worker and its host. `None` turns it off.
    pub fast_abort: Option<f64>,
}

impl Default for SchedConfig {
    fn default() -> SchedConfig {
        SchedConfig {
            prefetch: 1,
            prefetch_max: 1,
            max_attempts: 3,
            suspend_timeout: Duration::from_secs(10),
            max_respawns: 3,
            learn_from_wall: false,
            release_idle: false,
            reacquire: Duration::from_secs(10),
            grant_cost: Duration::ZERO,
            release_suspended: false,
            stragglers: false,
            fast_abort: None,
        }
    }
}

/// A decision of the core, for the driver to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send ticket's step to the worker.
    Assign {
        /// The submission.
        ticket: Ticket,
        /// Its step id (as the master named it).
        step: StepId,
        /// The worker.
        worker: WorkerId,
    },
    /// Ask the pool for more hosts of a class.
    RequestHosts {
        /// The class.
        class: String,
        /// How many more.
        count: u32,
    },
    /// Stop asking for hosts of a class: every request still pending for it
    /// is withdrawn (hosts granted meanwhile still arrive and are judged by
    /// [`Sched::host_added`]).
    CancelRequests {
        /// The class.
        class: String,
    },
    /// Ask the pool never to grant this host to the class again (fast abort
    /// retired it). Comes right before the host's `ReleaseHost`, and must be
    /// carried out first: a request still pending for the class would
    /// otherwise take the host straight back.
    ExcludeHost {
        /// The class the host was granted to.
        class: String,
        /// The host.
        host: HostId,
    },
    /// Give a host back to the pool (its worker, if any, is killed with it).
    ReleaseHost {
        /// The host.
        host: HostId,
    },
    /// Start a worker with this id on the host.
    Spawn {
        /// The host.
        host: HostId,
        /// The id to give the worker.
        worker: WorkerId,
    },
    /// The step will not produce a result.
    StepFailed {
        /// The submission.
        ticket: Ticket,
        /// Its step.
        step: StepId,
        /// Why.
        reason: String,
    },
}

/// What to do with a result that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The first result of its ticket: give it to the master.
    Deliver,
    /// The ticket already has its result (or failed): drop this copy.
    Duplicate,
}

/// Why a worker is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// The process died or its connection broke while its host is still ours:
    /// the step in hand may be to blame.
    Crashed,
    /// The host was taken away (owner came back, machine lost, released).
    HostGone,
    /// The connection broke and stayed down, and the pool has not said why
    /// yet: the host counts a crash, the step in hand is not charged (see
    /// [`Sched::worker_vanished`]).
    Unexplained,
}

/// An open ticket: waiting for a worker or running. Closed tickets (result
/// delivered, failure reported, cancelled) leave `Sched::tasks`.
#[derive(Debug)]
struct Task {
    step: StepId,
    cycle: Option<CycleId>,
    attempts: u32,
    /// The workers holding a copy.
    copies: Vec<WorkerId>,
    /// Whether it is in the queue.
    queued: bool,
}

#[derive(Debug, PartialEq)]
enum WorkerState {
    /// Spawned, not connected yet.
    Starting,
    /// Connected.
    Ready,
    /// Its host is suspended; its tickets are re-queued at `deadline`.
    Suspended { deadline: Option<Time> },
    /// Its connection dropped (or an assignment could not be sent on it):
    /// it takes no steps until it joins again or is reported lost, which
    /// the driver does after a grace period so that a host loss arriving
    /// meanwhile is seen as the cause.
    Detached,
}

#[derive(Debug)]
struct Worker {
    host: HostId,
    state: WorkerState,
    /// Tickets held, oldest (the one being computed) first, with the index of their run record.
    in_hand: VecDeque<(Ticket, usize)>,
    /// Since when the oldest ticket has been computed without a suspension
    /// (the clock of fast abort).
    front_since: Option<Time>,
    /// Whether the oldest ticket already earned a strike.
    front_struck: bool,
    /// Fast-abort strikes.
    strikes: u32,
    /// Its step time and round trip, which set how many tickets it may hold.
    pace: pace::Pace,
    /// Whether it has connected ([`Sched::worker_joined`]). Its host's
    /// resumption makes it ready only then: a worker suspended while
    /// starting has no connection yet to send steps on.
    joined: bool,
    /// Whether its process was asked for (`Output::Spawn`). A worker for a
    /// host known to be suspended is not: the pool would refuse to start a
    /// process there, so it is spawned when the host resumes.
    spawned: bool,
}

#[derive(Debug)]
struct Host {
    class: String,
    worker: Option<WorkerId>,
    suspended: bool,
    crashes_in_a_row: u32,
    speed: Option<f64>,
    /// Index of its record in `records.hosts`.
    record: usize,
}

#[derive(Debug)]
struct Class {
    desired: u32,
    requested: u32,
    /// A request failed as unavailable for the moment: none is made until
    /// the run's retry timer says so ([`Sched::request_missing`]), so that a
    /// pool failing requests at once is not asked again at every tick.
    waiting_retry: bool,
}

/// The scheduler state machine; see the module documentation for the call order.
pub struct Sched {
    cfg: SchedConfig,
    dispatch: Box<dyn Dispatch>,
    classes: BTreeMap<String, Class>,
    hosts: BTreeMap<HostId, Host>,
    workers: BTreeMap<WorkerId, Worker>,
    /// Open tickets only (see the module documentation).
    tasks: HashMap<Ticket, Task>,
    /// Queued tickets, in arrival order and longest first.
    queue: StepQueue,
    /// Ready workers by speed and by when each should be free.
    board: HostBoard,
    /// The history was replaced ([`Sched::history_mut`]): queued tickets
    /// and workers' free times are computed again before the next dispatch.
    rekey_all: bool,
    next: NextIds,
    outputs: VecDeque<Output>,
    records: Records,
    finished: bool,
    history: History<StepId>,
    given_back: GivenBack,
}

/// The next ticket and worker numbers.
#[derive(Debug, Default)]
struct NextIds {
    ticket: u64,
    worker: u64,
}

/// What the statistics are made of, kept as the run goes.
#[derive(Debug, Default)]
struct Records {
    /// Every copy of every step.
    runs: Vec<RunRecord>,
    /// One per host stay (a [`Host`]'s `record` indexes it).
    hosts: Vec<HostRecord>,
    cycles: Vec<CycleTime>,
}

/// Hosts the policies gave back before the pool took them.
#[derive(Debug, Default)]
struct GivenBack {
    /// Speeds of the hosts the tail policy gave back, fastest first.
    parked: Vec<f64>,
    /// Hosts fast abort retired: given back at once if granted again.
    retired: BTreeSet<HostId>,
    /// Times the pool granted a retired host again (none when the driver's
    /// exclusion works).
    retired_offers: u32,
}

impl Sched {
    /// A core with no classes, hosts or steps, dispatching with `dispatch`.
    pub fn new(cfg: SchedConfig, dispatch: Box<dyn Dispatch>) -> Sched {
        Sched {
            cfg,
            dispatch,
            classes: BTreeMap::new(),
            hosts: BTreeMap::new(),
            workers: BTreeMap::new(),
            tasks: HashMap::new(),
            queue: StepQueue::default(),
            board: HostBoard::default(),
            rekey_all: false,
            next: NextIds::default(),
            outputs: VecDeque::new(),
            records: Records::default(),
            finished: false,
            history: History::new(),
            given_back: GivenBack::default(),
        }
    }

    /// Compute times of the steps seen so far (normalized by host speed).
    pub fn history(&self) -> &History<StepId> {
        &self.history
    }

    /// The history to extend, e.g. with a checkpoint's (see `wodi::checkpoint`).
    pub fn history_mut(&mut self) -> &mut History<StepId> {
        self.rekey_all = true;
        &mut self.history
    }

    /// The relative speed the core uses for a held host, if known.
    pub fn host_speed(&self, host: HostId) -> Option<f64> {
        self.hosts.get(&host).and_then(|h| h.speed)
    }

    /// Sets a held host's relative speed (learned after it was added: a
    /// benchmark step, or a correction from observed step times). Steps
    /// placed from now on use it.
    pub fn set_host_speed(&mut self, host: HostId, speed: Option<f64>) {
        if let Some(h) = self.hosts.get_mut(&host) {
            h.speed = speed.filter(|s| s.is_finite() && *s > 0.0);
            if let Some(w) = h.worker {
                self.touch(w);
            }
        }
    }

    /// The step time the core learns from for a result: wall time when so
    /// configured or when no CPU time was measured, else CPU time.
    pub fn learned_time(&self, cpu: Duration, wall: Duration) -> Duration {
        if cpu.is_zero() || self.cfg.learn_from_wall {
            wall
        } else {
            cpu
        }
    }

    /// The next decision to carry out, in the order they were made.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The master began a cycle (recorded for the statistics' cycle boundaries).
    pub fn begin_cycle(&mut self, cycle: CycleId, now: Time) {
        self.records.cycles.push(CycleTime {
            cycle,
            begin_s: now.as_secs_f64(),
            end_s: None,
        });
    }

    /// The master ended a cycle.
    pub fn end_cycle(&mut self, cycle: CycleId, now: Time) {
        if let Some(c) = self
            .records
            .cycles
            .iter_mut()
            .rev()
            .find(|c| c.cycle == cycle)
        {
            c.end_s = Some(now.as_secs_f64());
        }
    }

    /// Queues a step of the master; returns its ticket.
    pub fn submit(&mut self, step: StepId, cycle: Option<CycleId>, _now: Time) -> Ticket {
        let ticket = Ticket(self.next.ticket);
        self.next.ticket += 1;
        self.tasks.insert(
            ticket,
            Task {
                step,
                cycle,
                attempts: 0,
                copies: Vec::new(),
                queued: true,
            },
        );
        self.queue
            .push_back(ticket, step, self.history.estimate(&step));
        ticket
    }

    /// Gives queued steps to free workers. Call it after a batch of
    /// [`Sched::submit`]s: submitting does not dispatch, so that a policy
    /// that orders steps (longest first) sees the whole batch, not the first
    /// step alone while the rest are still arriving.
    pub fn dispatch(&mut self, now: Time) {
        if self.cfg.release_idle {
            // Hosts given back in the last cycle's tail are asked for again.
            let classes: Vec<String> = self.classes.keys().cloned().collect();
            for c in classes {
                self.top_up(&c);
            }
        }
        self.dispatch_all(now);
    }

    /// A worker answered a ticket; `cpu`/`wall` are what it measured.
    pub fn result(
        &mut self,
        worker: WorkerId,
        ticket: Ticket,
        cpu: Duration,
        wall: Duration,
        now: Time,
    ) -> Verdict {
        // CPU time is what the step cost; without it (a worker that cannot
        // measure it) or when so configured, the time it took.
        let took = self.learned_time(cpu, wall);
        let open = self.tasks.contains_key(&ticket);
        if let Some(w) = self.workers.get_mut(&worker)
            && let Some(pos) = w.in_hand.iter().position(|(t, _)| *t == ticket)
        {
            let (_, run) = w.in_hand.remove(pos).expect("position is in range");
            w.pace.answered(ticket, wall, now);
            let was_front = pos == 0;
            let struck = was_front && w.front_struck;
            if was_front {
                w.front_struck = false;
                w.front_since = (!w.in_hand.is_empty()).then_some(now);
            }
            let outcome = if open {
                RunOutcome::Delivered
            } else {
                RunOutcome::Discarded
            };
            self.records.runs[run].finish(now, cpu, wall, outcome);
            let step = self.records.runs[run].step();
            let speed = self.hosts.get(&w.host).and_then(|h| h.speed).unwrap_or(1.0);
            let slow = !struck && self.too_slow(step, took, speed);
            if open && !slow && !struck {
                // A slow worker's time says nothing about the step.
                self.history.observe(step, took.as_secs_f64(), speed);
                self.queue.rekey_step(step, self.history.estimate(&step));
            }
            let w = self.workers.get_mut(&worker).expect("looked up above");
            if let Some(h) = self.hosts.get_mut(&w.host) {
                h.crashes_in_a_row = 0;
            }
            if w.in_hand.is_empty()
                && !self.cfg.release_suspended
                && let WorkerState::Suspended { deadline } = &mut w.state
            {
                *deadline = None;
            }
            self.touch(worker);
            if slow {
                self.strike(worker, now);
            }
        } else if open {
            // A worker the run let go of (its host given back, its
            // connection not closed yet) answered first: its copy, closed
            // as lost, is the one delivered.
            let step = self.tasks[&ticket].step;
            if let Some(run) = self
                .records
                .runs
                .iter_mut()
                .rev()
                .find(|r| r.is_lost_copy(worker, step))
            {
                run.finish(now, cpu, wall, RunOutcome::Delivered);
            }
        }
        if !open {
            // The answering worker has a free slot again.
            self.dispatch_all(now);
            return Verdict::Duplicate;
        }
        self.close(ticket);
        self.dispatch_all(now);
        Verdict::Deliver
    }

    /// The step's handler reported an error: the step fails at once.
    pub fn step_error(&mut self, worker: WorkerId, ticket: Ticket, message: &str, now: Time) {
        let step = self.tasks.get(&ticket).map(|t| t.step);
        let verdict = self.result(worker, ticket, Duration::ZERO, Duration::ZERO, now);
        if verdict == Verdict::Deliver
            && let Some(step) = step
        {
            self.outputs.push_back(Output::StepFailed {
                ticket,
                step,
                reason: format!("the worker's step handler failed: {message}"),
            });
        }
    }

    /// The master no longer wants this ticket (it left): it is taken out of
    /// the queue, and copies still running will be discarded when they answer.
    pub fn cancel(&mut self, ticket: Ticket) {
        if self.tasks.contains_key(&ticket) {
            self.close(ticket);
        }
    }

    /// Closes a ticket: it leaves the open tickets and the queue. Copies
    /// still in workers' hands keep their run record, which names the step.
    fn close(&mut self, ticket: Ticket) {
        let task = self.tasks.remove(&ticket).expect("closing an open ticket");
        if task.queued {
            self.queue.remove(ticket);
        }
    }

    /// The earliest time at which [`Sched::on_deadline`] has something to do.
    pub fn next_deadline(&self) -> Option<Time> {
        let grace = self
            .workers
            .values()
            .filter_map(|w| match w.state {
                WorkerState::Suspended { deadline } => deadline,
                _ => None,
            })
            .min();
        match (grace, self.abort_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passed: suspended workers past their grace period lose their
    /// claim on their steps, which are queued again (the suspended copies may
    /// still answer first).
    pub fn on_deadline(&mut self, now: Time) {
        let mut expired = Vec::new();
        let mut give_back = Vec::new();
        for w in self.workers.values_mut() {
            if let WorkerState::Suspended { deadline } = &mut w.state
                && deadline.is_some_and(|d| d <= now)
            {
                *deadline = None;
                if self.cfg.release_suspended {
                    give_back.push(w.host);
                } else {
                    expired.extend(w.in_hand.iter().map(|(t, _)| *t));
                }
            }
        }
        self.release_suspended(give_back, now);
        self.check_overdue(now);
        for ticket in expired.into_iter().rev() {
            self.requeue_front(ticket);
        }
        self.dispatch_all(now);
    }

    /// Whether fast abort retired `host` (the core has asked the driver to
    /// exclude it with [`Output::ExcludeHost`]).
    pub fn is_retired(&self, host: HostId) -> bool {
        self.given_back.retired.contains(&host)
    }

    /// Tickets neither answered nor failed yet.
    pub fn open_tickets(&self) -> usize {
        self.tasks.len()
    }

    /// What the pool looks like to this run now: hosts held, busy,
    /// suspended, and the steps waiting or running. The server sends it to
    /// its masters as [`crate::stats::Status`] so that they can show progress.
    /// It costs O(hosts + open tickets), whatever the run has done so far.
    pub fn status(&self) -> crate::stats::Status {
        let mut st = crate::stats::Status {
            hosts: self.hosts.len() as u32,
            suspended: self.hosts.values().filter(|h| h.suspended).count() as u32,
            wanted: self.classes.values().map(|c| c.desired).sum(),
            queued: self.queue.len() as u32,
            ..Default::default()
        };
        for w in self.workers.values() {
            match w.state {
                WorkerState::Starting => st.starting += 1,
                WorkerState::Ready if !w.in_hand.is_empty() => st.busy += 1,
                _ => {}
            }
        }
        st.running = self.tasks.values().filter(|t| !t.copies.is_empty()).count() as u32;
        st
    }

    /// The host a worker runs on, if the worker is known.
    pub fn find_worker_host(&self, worker: WorkerId) -> Option<HostId> {
        self.workers.get(&worker).map(|w| w.host)
    }

    /// The master is done: every host is released and no more are requested.
    pub fn finish(&mut self, now: Time) {
        self.finished = true;
        let hosts: Vec<HostId> = self.hosts.keys().copied().collect();
        for host in hosts {
            self.release(host, now);
        }
        for c in self.classes.values_mut() {
            c.desired = 0;
        }
    }

    /// The statistics of the run so far, as of `now` (open periods end at `now`).
    pub fn stats(&self, now: Time) -> Stats {
        let mut stats = Stats::compute(&self.records.runs, &self.records.hosts, now);
        stats.cycles = self.records.cycles.clone();
        stats.history = crate::plan::snapshot(&self.history);
        stats.hosts.retired = self.given_back.retired.len() as u32;
        stats.hosts.retired_offers = self.given_back.retired_offers;
        stats
    }
}

#[cfg(test)]
#[path = "sched_tests.rs"]
mod tests;
