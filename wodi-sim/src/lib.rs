//! A discrete-event simulator that drives the real scheduler core ([`Sched`])
//! with virtual time: hours of a WoDi run on an opportunistic pool in
//! milliseconds, deterministically from a seed.
//!
//! What is simulated is everything around the core: a pool of hosts with
//! speeds whose owners come and go (an [`OwnerModel`] from `owner-sim`),
//! CARMI's default owner policy on each host (suspend when the owner comes
//! back, continue after [`PoolPolicy::continue_after`] idle, vacate after
//! [`PoolPolicy::preempt_after`] suspended, lend the host again after
//! [`PoolPolicy::start_after`] idle), CARMI granting hosts as they free up,
//! workers starting, computing steps at their host's speed and answering,
//! and a master that runs cycles of steps with times drawn from a
//! [`StepProfile`]. Every decision (which step goes where, how many hosts to
//! hold, when to re-send) is the core's, exactly as in the WoDi server.
//!
//! This file holds the configuration and the simulated world; the event loop
//! of one run ([`simulate`]) is in `sim.rs`.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use carmi_api::ids::HostId;
use owner_sim::OwnerModel;
use serde::{Deserialize, Serialize};

use wodi::ids::{StepId, WorkerId};
use wodi::profile::StepProfile;
use wodi::sched::{Output, Sched, SchedConfig, Ticket};
use wodi::stats::Stats;

mod sim;

pub use sim::simulate;

/// CARMI's owner policy as the simulated hosts apply it, in virtual seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolPolicy {
    /// Owner idle time before a host is lent to jobs.
    pub start_after: f64,
    /// Owner idle time before a suspended job continues.
    pub continue_after: f64,
    /// Time suspended before the job is vacated.
    pub preempt_after: f64,
    /// From a host granted to its worker ready for work (spawn, connect, init).
    pub worker_startup: f64,
    /// From a host free in the pool to it granted to the run (CARMI matching
    /// and claiming it): what asking for a host again costs in time. The
    /// host is not the run's (no occupancy) while it is being granted.
    pub grant_delay: f64,
}

impl Default for PoolPolicy {
    /// HTCondor's classic desktop policy (15, 5 and 10 minutes), a host
    /// granted five seconds after it is asked for and a worker that starts in
    /// two seconds.
    fn default() -> PoolPolicy {
        PoolPolicy {
            start_after: 15.0 * 60.0,
            continue_after: 5.0 * 60.0,
            preempt_after: 10.0 * 60.0,
            worker_startup: 2.0,
            grant_delay: 5.0,
        }
    }
}

/// One simulated run.
pub struct SimConfig {
    /// The steps of one cycle.
    pub profile: Vec<StepProfile>,
    /// Cycles to run.
    pub cycles: u32,
    /// Relative speed of every host of the pool, as the core is told it.
    pub speeds: Vec<f64>,
    /// The speed each host really computes at, when it differs from
    /// `speeds` (a host busier or slower than advertised); `None`: `speeds`.
    pub actual_speeds: Option<Vec<f64>>,
    /// Owners of the hosts.
    pub owners: OwnerModel,
    /// Where in the owner model's time (seconds; the stochastic model's 0 is
    /// a Monday 09:00) the run starts.
    pub owner_offset: f64,
    /// The owner policy.
    pub policy: PoolPolicy,
    /// Hosts the master asks for.
    pub hosts_wanted: u32,
    /// After each cycle, ask for the fewest hosts that reach (almost) the
    /// best cycle time instead, with this tolerance (e.g. 0.05); `None` keeps
    /// `hosts_wanted`.
    pub fewest_hosts: Option<f64>,
    /// With `fewest_hosts`: cycles in a row the answer must differ from the
    /// count in one direction before the count follows; 0 follows every change.
    pub hysteresis: u32,
    /// Extra start-up time of each host's first worker, seconds, indexed like
    /// `speeds` (empty: none). Real workers do not join at once; to compare
    /// a real run with the simulator, give each host the delay it had.
    pub startup_offsets: Vec<f64>,
    /// The core's tunables.
    pub sched: SchedConfig,
    /// Seed of the step-time noise (and of the owners).
    pub seed: u64,
}

/// The figures of a run, in the paper's terms, plus the bound no schedule
/// on this pool could beat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// From the first worker ready to the last result, seconds.
    pub run_length_s: f64,
    /// Host time allocated to the run, seconds.
    pub occupancy_s: f64,
    /// Compute time of all step copies, seconds (duplicates included).
    pub cpu_time_s: f64,
    /// Compute time of the copies whose result was delivered, seconds.
    pub useful_cpu_time_s: f64,
    /// `useful_cpu_time_s / occupancy_s`: duplicate and lost copies count
    /// in the occupancy, not as useful work.
    pub efficiency: f64,
    /// Hosts granted.
    pub adds: u32,
    /// Hosts taken away by their owners.
    pub losses: u32,
    /// Mean number of hosts held (occupancy / run length).
    pub mean_hosts: f64,
    /// Sum over cycles of the cycle's lower bound on all the pool's hosts
    /// (longest step on the fastest host, or all work spread perfectly).
    pub lower_bound_s: f64,
    /// Length of each cycle, seconds.
    pub cycle_s: Vec<f64>,
    /// Each cycle's own lower bound on all the pool's hosts, seconds.
    pub cycle_bound_s: Vec<f64>,
}

/// A finished simulation: its summary and the core's own statistics.
pub struct SimRun {
    /// The paper's figures.
    pub summary: RunSummary,
    /// What the core recorded (per-step times, timeline).
    pub stats: Stats,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ev {
    Owner {
        host: usize,
        present: bool,
    },
    /// The owner has been away long enough for the policy to act (if `epoch` still holds).
    Idle {
        host: usize,
        epoch: u64,
    },
    /// Suspended since `since`: vacate if still so.
    Preempt {
        host: usize,
        since: f64,
    },
    /// CARMI finished granting the host to the run.
    Granted {
        host: usize,
    },
    WorkerReady {
        worker: WorkerId,
    },
    StepDone {
        worker: WorkerId,
        epoch: u64,
    },
    /// The core's deadline, exactly as it gave it (f64 seconds would round).
    Deadline(Duration),
}

struct Queued {
    at: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Earliest first out of the max-heap, ties in insertion order.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .at
            .total_cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// What a host of the simulated pool is doing.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lend {
    /// The owner is there, or has not been away long enough.
    Owner,
    /// Free for jobs.
    Free,
    /// Being granted to the run (for `grant_delay`).
    Granting,
    /// Granted to the run.
    Granted,
}

struct SimHost {
    /// The speed the core is told.
    speed: f64,
    /// The speed it computes at.
    actual: f64,
    lend: Lend,
    present: bool,
    suspended_since: Option<f64>,
    /// Bumped on every owner change, invalidating pending idle timers.
    epoch: u64,
}

/// A worker computing its queue of tickets one at a time.
struct SimWorker {
    host: usize,
    ready: bool,
    queue: VecDeque<(Ticket, StepId)>,
    /// The step being computed: speed-1 work left at `since` (when running).
    current: Option<Current>,
    /// Bumped whenever the current computation stops or restarts.
    epoch: u64,
}

struct Current {
    ticket: Ticket,
    left: f64,
    since: Option<f64>,
    started: f64,
    cpu: f64,
}

struct World<'a> {
    cfg: &'a SimConfig,
    now: f64,
    heap: BinaryHeap<Queued>,
    seq: u64,
    hosts: Vec<SimHost>,
    /// Hosts the core asked for and has not been granted yet.
    demand: u32,
    /// Per host: retired by fast abort, never granted to the run again.
    excluded: Vec<bool>,
    workers: BTreeMap<WorkerId, SimWorker>,
    host_worker: BTreeMap<usize, WorkerId>,
    /// This cycle's step times (speed-1 seconds), by step id.
    times: Vec<f64>,
    first_ready: Option<f64>,
    /// Whether each host has had a worker (for `startup_offsets`).
    started: Vec<bool>,
}

fn host_id(h: usize) -> HostId {
    HostId(h as u64 + 1)
}

fn time(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

impl World<'_> {
    fn push(&mut self, at: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Grants free hosts while the core wants some, fastest first (what a
    /// `Rank = Speed` class would get).
    fn grant(&mut self) {
        while self.demand > 0 {
            let Some(h) = (0..self.hosts.len())
                .filter(|&h| self.hosts[h].lend == Lend::Free && !self.excluded[h])
                .max_by(|&a, &b| self.hosts[a].speed.total_cmp(&self.hosts[b].speed))
            else {
                return;
            };
            self.demand -= 1;
            self.hosts[h].lend = Lend::Granting;
            let at = self.now + self.cfg.policy.grant_delay;
            self.push(at, Ev::Granted { host: h });
        }
    }

    /// Starts the worker's next ticket if it is idle and may run.
    fn start_next(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(w) = self.workers.get_mut(&worker) else {
            return;
        };
        if !w.ready || w.current.is_some() || self.hosts[w.host].suspended_since.is_some() {
            return;
        }
        let Some((ticket, step)) = w.queue.pop_front() else {
            return;
        };
        let work = self.times[step.0 as usize % self.times.len()];
        w.epoch += 1;
        w.current = Some(Current {
            ticket,
            left: work,
            since: Some(now),
            started: now,
            cpu: 0.0,
        });
        let at = now + work / self.hosts[w.host].actual;
        let epoch = w.epoch;
        self.push(at, Ev::StepDone { worker, epoch });
    }

    /// Stops the worker's computation (suspension), keeping the work done.
    fn pause(&mut self, worker: WorkerId) {
        let now = self.now;
        if let Some(w) = self.workers.get_mut(&worker)
            && let Some(c) = &mut w.current
            && let Some(since) = c.since.take()
        {
            let speed = self.hosts[w.host].actual;
            c.left -= (now - since) * speed;
            c.cpu += now - since;
            w.epoch += 1;
        }
    }

    fn resume(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(w) = self.workers.get_mut(&worker) else {
            return;
        };
        let speed = self.hosts[w.host].actual;
        if let Some(c) = &mut w.current {
            if c.since.is_none() {
                c.since = Some(now);
                w.epoch += 1;
                let at = now + c.left.max(0.0) / speed;
                let epoch = w.epoch;
                self.push(at, Ev::StepDone { worker, epoch });
            }
        } else {
            self.start_next(worker);
        }
    }

    /// Carries out the core's decisions.
    fn flush(&mut self, sched: &mut Sched) {
        while let Some(out) = sched.poll_output() {
            match out {
                Output::RequestHosts { count, .. } => {
                    self.demand += count;
                    self.grant();
                }
                // One class: nothing more is wanted until the core asks again.
                Output::CancelRequests { .. } => self.demand = 0,
                // A host fast abort retired is never granted again, as
                // CARMI's `ExcludeHosts` does.
                Output::ExcludeHost { host, .. } => self.excluded[(host.0 - 1) as usize] = true,
                Output::ReleaseHost { host } => {
                    let h = (host.0 - 1) as usize;
                    if let Some(w) = self.host_worker.remove(&h) {
                        self.workers.remove(&w);
                    }
                    let hs = &mut self.hosts[h];
                    if hs.lend == Lend::Granted {
                        hs.suspended_since = None;
                        hs.lend = if hs.present { Lend::Owner } else { Lend::Free };
                    }
                }
                Output::Spawn { host, worker } => {
                    let h = (host.0 - 1) as usize;
                    self.workers.insert(
                        worker,
                        SimWorker {
                            host: h,
                            ready: false,
                            queue: VecDeque::new(),
                            current: None,
                            epoch: 0,
                        },
                    );
                    self.host_worker.insert(h, worker);
                    // Only a host's first worker pays its recorded offset.
                    let offset = if self.started[h] {
                        0.0
                    } else {
                        self.started[h] = true;
                        self.cfg.startup_offsets.get(h).copied().unwrap_or(0.0)
                    };
                    let at = self.now + self.cfg.policy.worker_startup + offset;
                    self.push(at, Ev::WorkerReady { worker });
                }
                Output::Assign {
                    ticket,
                    step,
                    worker,
                } => {
                    if let Some(w) = self.workers.get_mut(&worker) {
                        w.queue.push_back((ticket, step));
                    }
                    self.start_next(worker);
                }
                // Simulated workers never crash, so no step fails.
                Output::StepFailed { .. } => {}
            }
        }
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
