//! The allocator: which job gets which host. A pure state machine with no
//! sockets, no clock and no tasks inside, so that tests and the benchmark
//! drive exactly the code the daemon runs.
//!
//! # Model
//! A *machine* offers one *slot* per process it can run; each slot is a host
//! with a [`HostId`] that stays the same for the machine's name across
//! reconnections. A slot is in one [`SlotState`]. A *job* defines resource
//! classes (ClassAd expressions over machine attributes) and asks for hosts of
//! a class with `AddHosts`. A machine belongs to a class of a job when the
//! class expression is `true` with MY = the machine ad and TARGET = the job's
//! small ad (`Owner`, `JobId`), and the machine's own `Requirements`, if it
//! has one, accepts the job ad.
//!
//! Pending `AddHosts` requests are served first come, first served: a slot
//! that becomes idle goes to the oldest pending request whose class it
//! belongs to, and a new request takes the fastest idle matching slots
//! (`Mips` descending, then `KFlops`). Because every input re-offers what it
//! frees, no idle slot ever belongs to the class of a pending request (checked
//! by [`Allocator::sanity_check`]).
//!
//! Hosts are claimed as soon as they are found, but announced to the job in
//! groups of the request's increment (one [`Effect::Grant`] per group). Until
//! its group is complete a claimed host is *partial*: the job does not see it
//! (not in `Config`, not spawnable), and if the owner takes it back it simply
//! leaves the group.
//!
//! # Call order
//! 1. [`Allocator::advance_to`] with the current time (time only moves forward),
//! 2. one input: an `on_*` method for pool and job events, or a request method
//!    (`add_hosts`, `define_class`, ...) for an application request,
//! 3. [`Allocator::take_effects`] to collect what the input caused, in order
//!    (it first settles the job queue: see `jobs`).
//!
//! Inputs never fail in the Rust sense: a request that cannot be honoured
//! produces an [`Effect::Failed`] with a code and a message naming what is wrong.
//!
//! # Parts
//! The [`Allocator`] is a thin dispatcher over parts that each own their
//! state, in the manner of HyperQueue's tako: an input is a method on the
//! allocator that borrows the parts it needs, and each part keeps its own
//! indexes in step.
//! - `pool::Pool` (`pool`): machines, their ads and slots, the idle set by speed.
//! - `job::Job` (`job`), one per job in `Allocator::jobs`: ad, classes with
//!   their cached membership, hosts held, subscriptions.
//! - `pending::PendingQueue` (`pending`): pending `AddHosts`, first come, first served.
//! - `queue::Waiting` (`queue`): submitted jobs waiting for their minimums,
//!   in clusters of identical requests.
//! - `possible::Verdicts` (`possible`): which waiting jobs could ever start.
//! - `crate::usage::Usage` (`share`): fair share between users.
//! - `concurrency::Concurrency` (`concurrency`): limits and amounts in use.
//! - `restore::RecordedClaims` (`restore`): hosts held before a restart.
//! - `effect::Outputs` (`effect`): effects and host changes until taken.
//! - `clock::Clock` (`clock`): the time inputs were given at.
//!
//! # One request's path
//! `AddHosts` (`requests`) checks the job and class, then pushes a
//! `pending::Pending` onto the `PendingQueue` and serves it (`engine`):
//! idle slots of the `Pool`, fastest first, are tested for membership
//! against the job's class (`job::member`, cached per machine generation),
//! claimed in the `Pool` and, once a group of the increment is complete,
//! added to the `Job`'s hosts and announced as an [`Effect::Grant`] in the
//! `Outputs`. What is not found stays pending: a slot freed later (`inputs`)
//! is offered to the oldest matching group first. [`Allocator::take_effects`]
//! then settles the `Waiting` queue (`jobs`, `queue`, `possible`, `share`)
//! before handing the effects over.
//!
//! # Layout
//! - `effect`: [`Effect`], its translation to wire events, and the outputs.
//! - `engine`: offering slots to pending requests, grants, releases.
//! - `inputs`: machine, slot, job and process inputs.
//! - `requests`: application requests (`ExcludeHosts` keeps machines out of a class's grants).
//! - `check`: [`Allocator::sanity_check`].
//! - `jobs`: submitted jobs: all-or-nothing start at the minimums,
//!   fair growth towards the maxima, `carmi q`.
//! - `hold`: held jobs (`carmi hold`, `carmi release`).
//! - `demand`: demand the pool cannot meet, for the allocation queues.
//! - `analyze`: `carmi q -analyze`, every online slot of a class in the first
//!   category that applies; `why`: why an owner holds a machine.
//! - `matching`: the matching of a job's minimum places to slots (augmenting paths).
//! - `possible`: jobs no set of machines in the pool could start, flagged and keeping nothing back.
//! - `share`: fair share between users, weighted by their priority (`crate::usage`),
//!   charged to a job's accounting group when it names one.
//! - `concurrency`: the admin's concurrency limits (licences and the like),
//!   taken by jobs while they run.
//! - `queue`: waiting jobs grouped into clusters of identical requests, so
//!   that settling the queue costs time per cluster, not per job.
//! - `restore`: hosts a job held before a restart of the global RM.

mod analyze;
mod check;
mod clock;
mod concurrency;
#[cfg(test)]
mod concurrency_tests;
mod demand;
mod effect;
mod engine;
#[cfg(test)]
mod exclude_tests;
mod hold;
#[cfg(test)]
mod hold_tests;
mod inputs;
mod job;
mod jobs;
#[cfg(test)]
mod jobs_tests;
mod matching;
mod pending;
mod pool;
mod possible;
#[cfg(test)]
mod possible_tests;
mod queue;
#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod rank_tests;
#[cfg(test)]
mod register_tests;
mod requests;
mod restore;
mod share;
#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod tests;
mod why;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use carmi_proto::ids::{HostId, JobId};
#[cfg(test)]
use carmi_proto::msg::FailureCode;
use carmi_proto::msg::MachineStatus;
use classad::ClassAd;

use clock::Clock;
use effect::Outputs;
use job::Job;
#[cfg(test)]
use job::member;
use pending::PendingQueue;
use pool::Pool;
use possible::Verdicts;
use queue::Waiting;
use restore::RecordedClaims;

pub use concurrency::{
    ConcurrencyConfig, MAX_LIMIT_NAME, MAX_LIMITS_PER_JOB, parse_concurrency_limits,
};
pub use demand::Unmet;
pub use effect::{Effect, HostChange, HostChangeKind, ReleaseCause, ReqRef};
pub use jobs::{ClassLimits, Phase};
pub use pool::{Claim, SlotState};

/// The allocator. See the module documentation for the model, the parts and
/// the call order.
pub struct Allocator {
    clock: Clock,
    /// Machines, slots and the idle set.
    pool: Pool,
    /// Every job, waiting, running, started by hand or held.
    jobs: BTreeMap<JobId, Job>,
    /// Submitted jobs that started (phase `Running`): growth and fair
    /// sharing look at these only, however long the queue.
    running: BTreeSet<JobId>,
    /// The next job's submit order.
    next_job_seq: u64,
    /// Pending `AddHosts` requests.
    pending: PendingQueue,
    /// Submitted jobs waiting for their minimums, and their clusters.
    waiting: Waiting,
    /// Which waiting jobs could ever start, as of the pool's generation.
    verdicts: Verdicts,
    /// Hosts the journal says jobs held before a restart (see `restore`).
    recorded: RecordedClaims,
    /// Every user's recent use of the pool: fair share between users (`share`).
    usage: crate::usage::Usage,
    /// The admin's concurrency limits and the amounts running jobs hold.
    concurrency: concurrency::Concurrency,
    /// What inputs caused, until taken.
    out: Outputs,
    /// Set when a slot became idle or a job was submitted: the job queue
    /// must be settled before effects are taken.
    dirty: bool,
}

impl Default for Allocator {
    fn default() -> Self {
        Allocator::new()
    }
}

fn host_list(hosts: &[HostId]) -> String {
    let mut s: Vec<String> = hosts.iter().take(8).map(|h| h.to_string()).collect();
    if hosts.len() > 8 {
        s.push(format!("... ({} in all)", hosts.len()));
    }
    s.join(", ")
}

impl Allocator {
    /// An empty pool at time zero.
    pub fn new() -> Allocator {
        Allocator {
            clock: Clock::default(),
            pool: Pool::default(),
            jobs: BTreeMap::new(),
            running: BTreeSet::new(),
            next_job_seq: 0,
            pending: PendingQueue::default(),
            waiting: Waiting::default(),
            verdicts: Verdicts::default(),
            recorded: RecordedClaims::default(),
            usage: Default::default(),
            concurrency: Default::default(),
            out: Outputs::default(),
            dirty: false,
        }
    }

    /// Names the Unix time at clock zero, so that `time()` in class
    /// expressions is the allocator's clock (never the machine's): a class
    /// that needs `PilotEndsAt - time() > 600` stops matching a pilot when
    /// the clock says its time is short, and tests can say when that is.
    pub fn set_unix_epoch(&mut self, unix_epoch: u64) {
        self.clock.set_unix_epoch(unix_epoch);
    }

    /// Moves the clock to `now`. Time only moves forward: an earlier `now` is ignored.
    pub fn advance_to(&mut self, now: Duration) {
        self.clock.advance_to(now);
        self.sample_usage();
    }

    /// The current time.
    pub fn now(&self) -> Duration {
        self.clock.now
    }

    /// Everything caused since the last call, in order. The job queue is
    /// settled first (waiting jobs started, running ones grown), so that every
    /// input's consequences are complete when they are taken.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        loop {
            if std::mem::take(&mut self.dirty) {
                self.schedule();
            } else if self.waiting.has_fresh() {
                self.start_fresh();
            } else {
                break;
            }
        }
        std::mem::take(&mut self.out.effects)
    }

    /// The host changes of jobs since the last call, in order (take them
    /// after [`Allocator::take_effects`], which may add some).
    pub fn take_host_changes(&mut self) -> Vec<HostChange> {
        std::mem::take(&mut self.out.host_changes)
    }

    // ------------------------------------------------------------ pool lookups

    /// The machine name and 0-based slot number of a host of an online machine.
    pub fn host_location(&self, host: HostId) -> Option<(&str, u32)> {
        self.pool.host_location(host)
    }

    /// The machine a host belongs to, online or not.
    pub fn host_machine(&self, host: HostId) -> Option<&str> {
        let slot = self.pool.find_slot(host)?;
        Some(self.pool.machine(slot.machine).name.as_str())
    }

    /// The state of a host.
    pub fn host_state(&self, host: HostId) -> Option<&SlotState> {
        self.pool.find_slot(host).map(|s| &s.state)
    }

    /// The host of slot `slot` of online machine `name`.
    pub fn host_of_slot(&self, name: &str, slot: u32) -> Option<HostId> {
        self.pool.host_of_slot(name, slot)
    }

    /// The online hosts of machine `name` (empty when it is unknown or lost).
    pub fn machine_hosts(&self, name: &str) -> &[HostId] {
        self.pool
            .find_machine(name)
            .map_or(&[], |m| m.online_hosts())
    }

    /// Every host id machine `name` was ever given, online or not.
    pub fn known_hosts(&self, name: &str) -> &[HostId] {
        self.pool.find_machine(name).map_or(&[], |m| &m.hosts)
    }

    /// True when machine `name` is registered and not lost.
    pub fn is_online(&self, name: &str) -> bool {
        self.pool.find_machine(name).is_some_and(|m| m.online)
    }

    /// The ad of machine `name` while it is registered and not lost.
    pub fn online_ad(&self, name: &str) -> Option<&classad::ClassAd> {
        let m = self.pool.find_machine(name)?;
        m.online.then_some(&m.ad)
    }

    /// The attributes and (roughly) the bytes of text machine `name`'s ad
    /// would have with `update` merged in: new attributes counted with
    /// their text, replaced ones as they were (`None`: not online).
    pub fn merged_size(&self, name: &str, update: &ClassAd) -> Option<(usize, usize)> {
        self.pool.merged_size(name, update)
    }

    /// The online machines, for `carmi status`.
    ///
    /// The attributes shown are printed when the ad changes, not here: a
    /// whole-pool status at 10,000 machines printed 70,000 expressions per
    /// call.
    pub fn pool_status(&self) -> Vec<Arc<MachineStatus>> {
        self.pool.status()
    }

    /// Every online machine's name and ad, for placing a job's master.
    pub fn online_ads(&self) -> impl Iterator<Item = (&str, &ClassAd)> {
        self.pool.online().map(|m| (m.name.as_str(), &m.ad))
    }

    /// Every online machine's name and whole ad (new syntax), for `carmi status -l`.
    pub fn machine_ads(&self) -> Vec<(String, Arc<str>)> {
        self.pool
            .online()
            .map(|m| (m.name.clone(), m.ad_text.clone()))
            .collect()
    }

    /// Number of online slots, and of idle ones.
    pub fn slot_counts(&self) -> (usize, usize) {
        self.pool.slot_counts()
    }

    // ------------------------------------------------------------- job lookups

    /// The `Owner` of a job's ad (empty for an unknown job): kept beside the
    /// ad, as fair share asks for it per candidate on every pass.
    pub fn job_owner(&self, job: JobId) -> &str {
        self.jobs.get(&job).map_or("", |j| &j.owner)
    }

    /// True when the job exists.
    pub fn has_job(&self, job: JobId) -> bool {
        self.jobs.contains_key(&job)
    }

    /// True when `job` has a class named `name` (from its submit file or
    /// `DefineClass`).
    pub fn has_class(&self, job: JobId, name: &str) -> bool {
        self.jobs
            .get(&job)
            .is_some_and(|j| j.classes.contains_key(name))
    }

    /// The announced hosts of a job.
    pub fn job_hosts(&self, job: JobId) -> Vec<HostId> {
        self.jobs
            .get(&job)
            .map(|j| j.hosts.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The class `host` is held for by `job`.
    pub fn host_class(&self, job: JobId, host: HostId) -> Option<String> {
        self.jobs.get(&job)?.hosts.get(&host).cloned()
    }

    /// Number of pending `AddHosts` requests.
    pub fn pending_requests(&self) -> usize {
        self.pending.by_seq.len()
    }
}
