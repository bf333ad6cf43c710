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
//! # Layout
//! - `effect`: [`Effect`] and its translation to wire events.
//! - `engine`: slot state changes, offering slots to pending requests, grants, releases.
//! - `pool`: machine, slot, job and process inputs.
//! - `requests`: application requests (`ExcludeHosts` keeps machines out of a class's grants).
//! - `check`: pool status and [`Allocator::sanity_check`].
//! - `jobs`: submitted jobs: the queue, all-or-nothing start at the minimums,
//!   fair growth towards the maxima, `carmi q` and `-analyze`.
//! - `analyze`: `carmi q -analyze`, every online slot of a class in the first category that applies.
//! - `matching`: the matching of a job's minimum places to slots (augmenting paths).
//! - `possible`: jobs no set of machines in the pool could start, flagged and keeping nothing back.
//! - `share`: fair share between users, weighted by their priority (`crate::usage`).
//! - `queue`: waiting jobs grouped into clusters of identical requests, so
//!   that settling the queue costs time per cluster, not per job.

mod analyze;
mod check;
mod demand;
mod effect;
mod engine;
#[cfg(test)]
mod exclude_tests;
mod hold;
#[cfg(test)]
mod hold_tests;
mod jobs;
#[cfg(test)]
mod jobs_tests;
mod matching;
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

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use carmi_proto::ids::{HostId, JobId, ProcessId};
#[cfg(test)]
use carmi_proto::msg::FailureCode;
use carmi_proto::msg::HostInfo;
use classad::{ClassAd, Expr};

pub use demand::Unmet;
pub use effect::{Effect, ReleaseCause, ReqRef};
pub use jobs::{ClassLimits, Phase};

/// A change of the hosts a job holds, for the job's event log (`carmi
/// events`): collected apart from [`Effect`]s, which go to applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostChange {
    /// The job.
    pub job: JobId,
    /// The host.
    pub host: HostId,
    /// What happened to it.
    pub kind: HostChangeKind,
}

/// What happened to a job's host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostChangeKind {
    /// The job was given it (at its start, by growth or for a request).
    Added,
    /// Its owner came back: the job's processes there are stopped.
    Suspended,
    /// Its owner left again: the job's processes there run again.
    Resumed,
    /// It left the job, and why.
    Removed(ReleaseCause),
}

/// A job's hold on a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The job.
    pub job: JobId,
    /// The class the slot was allocated for.
    pub class: String,
    /// When it was claimed.
    pub since: Duration,
}

/// Lifecycle of a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// The machine is not registered (lost, or the slot was withdrawn).
    Offline,
    /// Available and unclaimed.
    Idle,
    /// Allocated to a job.
    Claimed(Claim),
    /// The owner is back; a job's claim, if any, survives until resume or vacate.
    Suspended(Option<Claim>),
    /// The owner vacated it; withdrawn from the pool until available again.
    Owner,
}

impl SlotState {
    /// The claim, whether running or suspended.
    pub fn claim(&self) -> Option<&Claim> {
        match self {
            SlotState::Claimed(c) | SlotState::Suspended(Some(c)) => Some(c),
            _ => None,
        }
    }

    /// The name `carmi status` shows.
    pub fn name(&self) -> &'static str {
        match self {
            SlotState::Offline => "offline",
            SlotState::Idle => "idle",
            SlotState::Claimed(_) => "claimed",
            SlotState::Suspended(_) => "suspended",
            SlotState::Owner => "owner",
        }
    }
}

/// Index of a machine in [`Allocator::machines`]; machines are never removed,
/// so that a returning name finds its host ids again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct MachineIdx(u32);

/// Sort key of an idle slot: fastest first (`Mips`, then `KFlops`).
type SpeedKey = (Reverse<i64>, Reverse<i64>);

struct Machine {
    name: String,
    ad: ClassAd,
    /// The ad in new syntax, printed once per change rather than per grant.
    ad_text: String,
    /// The attributes `carmi status` shows, printed once per change.
    shown: Vec<(String, String)>,
    has_requirements: bool,
    /// Every host id this name was ever given; the first `slots` are online.
    hosts: Vec<HostId>,
    slots: u32,
    online: bool,
    /// Bumped on every change of the ad, invalidating cached class membership.
    generation: u32,
    speed: SpeedKey,
}

struct Slot {
    machine: MachineIdx,
    index: u32,
    state: SlotState,
    /// The pending request (by sequence number) this slot is a partial host of.
    group: Option<u64>,
    /// Live processes of the claiming job on this slot.
    busy: BTreeSet<ProcessId>,
}

struct Class {
    expression: String,
    expr: Expr,
    /// Machines the job excluded from this class's future grants
    /// (`ExcludeHosts`); they are never members, whatever the expression says.
    excluded: BTreeSet<MachineIdx>,
    /// Per machine: 0 = not evaluated, else `generation << 1 | member`.
    /// Evaluated lazily, so defining a class costs nothing and a scan only
    /// evaluates the machines it looks at.
    cache: Vec<u32>,
    /// The expression calls `time()` (`PilotEndsAt - time() > 600`): its
    /// verdict changes with the clock, not only with the ad, so it is
    /// evaluated at the allocator's clock every time and never cached.
    timed: bool,
}

/// Whether a class expression may depend on the time (`time()`, in any
/// case): such a class is evaluated afresh at every look.
fn mentions_time(expression: &str) -> bool {
    expression.to_ascii_lowercase().contains("time(")
}

/// A class's rank: the text as given (for `GetClassDefinitions` and `carmi
/// q`) and its parsed form.
struct Rank {
    text: String,
    expr: Expr,
}

enum SubKind {
    Add(String),
    Delete(BTreeSet<HostId>),
    Suspend(BTreeSet<HostId>),
    Resume(BTreeSet<HostId>),
}

struct Sub {
    req: ReqRef,
    kind: SubKind,
}

struct Job {
    ad: ClassAd,
    /// The ad's `Owner`, fixed when the job is created (`set_job_attributes`
    /// never replaces it).
    owner: String,
    classes: BTreeMap<String, Class>,
    /// Announced hosts and the class each was allocated for.
    hosts: BTreeMap<HostId, String>,
    subs: Vec<Sub>,
    /// The requests of `subs`, so that a new request's id is checked for
    /// reuse in constant time however many subscriptions the job holds.
    sub_reqs: HashSet<ReqRef>,
    /// Submit order (also for jobs started by hand): ties in fair sharing go to the older.
    seq: u64,
    /// Per class from the submit file: (min, max). Empty for a job started by hand.
    limits: BTreeMap<String, (u32, u32)>,
    /// Per class: the `rank` preferring some machines (higher first).
    ranks: BTreeMap<String, Rank>,
    phase: Phase,
    /// Whether some set of online slots meets its minimums, as of
    /// [`Allocator::pool_gen`]: `None` inside when it does, else why not.
    possible: Option<(u64, Option<String>)>,
}

impl Job {
    /// Adds a subscription (its request id checked unused by the caller).
    fn push_sub(&mut self, sub: Sub) {
        self.sub_reqs.insert(sub.req);
        self.subs.push(sub);
    }

    /// Keeps the subscriptions `keep` accepts, in order.
    fn retain_subs(&mut self, mut keep: impl FnMut(&Sub) -> bool) {
        let reqs = &mut self.sub_reqs;
        self.subs.retain(|s| {
            let k = keep(s);
            if !k {
                reqs.remove(&s.req);
            }
            k
        });
    }
}

struct Pending {
    req: ReqRef,
    job: JobId,
    class: String,
    /// Hosts not yet announced, including `partial`.
    remaining: u32,
    increment: u32,
    /// Claimed, not yet announced (fewer than one group).
    partial: Vec<HostId>,
}

/// The allocator. See the module documentation for the model and call order.
pub struct Allocator {
    now: Duration,
    machines: Vec<Machine>,
    by_name: HashMap<String, MachineIdx>,
    /// `HostId(n)` is `slots[n - 1]`.
    slots: Vec<Slot>,
    idle: BTreeSet<(SpeedKey, HostId)>,
    jobs: BTreeMap<JobId, Job>,
    /// Pending `AddHosts` by arrival sequence number: first come, first served.
    pending: BTreeMap<u64, Pending>,
    /// The same, by request.
    pending_by_req: HashMap<ReqRef, u64>,
    /// The same, grouped by (job, class): class membership is a property of
    /// the group, so offering a slot costs one check per group, however long
    /// the queue.
    groups: BTreeMap<(JobId, String), BTreeSet<u64>>,
    next_seq: u64,
    /// Submitted jobs waiting for their minimums, by submit order.
    queue: BTreeMap<u64, JobId>,
    /// The same jobs grouped by what they ask for.
    clusters: queue::Clusters,
    /// Submitted jobs that started (phase `Running`): growth and fair
    /// sharing look at these only, however long the queue.
    running: BTreeSet<JobId>,
    /// Start attempts so far (see [`Allocator::start_attempts`]).
    tries: u64,
    next_job_seq: u64,
    /// Set when a slot became idle or a job was submitted: the job queue
    /// must be settled before effects are taken.
    dirty: bool,
    /// Bumped whenever online slots, machine ads, exclusions or a job's
    /// classes change: which jobs could ever start is computed again.
    pool_gen: u64,
    /// Verdicts of [`Allocator::possible`] by cluster of waiting jobs, as of
    /// `pool_gen` (cleared when it moves).
    cluster_possible: HashMap<u64, Option<String>>,
    /// Verdicts of [`Allocator::possible`] worked out over the online slots.
    judged: u64,
    effects: Vec<Effect>,
    /// Host changes of jobs since [`Allocator::take_host_changes`].
    host_changes: Vec<HostChange>,
    /// Hosts the journal says a job held (for a class) before a restart,
    /// given back to it when their machine registers again (see `restore`).
    recorded_claims: HashMap<HostId, (JobId, String)>,
    /// Every user's recent use of the pool: fair share between users (`share`).
    usage: crate::usage::Usage,
    /// Unix seconds at clock zero ([`Allocator::set_unix_epoch`]).
    unix_epoch: u64,
    /// The clock in Unix seconds: what `time()` is in class expressions.
    clock: i64,
}

impl Default for Allocator {
    fn default() -> Self {
        Allocator::new()
    }
}

/// Class membership of machine `m` for `job`'s class `class`, cached per
/// machine generation. A free function over the two fields it needs, so that
/// callers can hold borrows of the others.
fn member(
    jobs: &mut BTreeMap<JobId, Job>,
    machines: &[Machine],
    clock: i64,
    job: JobId,
    class: &str,
    m: MachineIdx,
) -> bool {
    let Some(j) = jobs.get_mut(&job) else {
        return false;
    };
    let Job { classes, ad, .. } = j;
    classes
        .get_mut(class)
        .is_some_and(|c| verdict(c, ad, machines, clock, m))
}

/// [`member`] for many machines at once: the job and its class are looked
/// up once, not per machine (a waiting job is tried against every idle host
/// after each change, and the two map lookups per host were most of that).
fn members(
    jobs: &mut BTreeMap<JobId, Job>,
    machines: &[Machine],
    clock: i64,
    job: JobId,
    class: &str,
    ms: &[MachineIdx],
) -> Vec<bool> {
    let Some(j) = jobs.get_mut(&job) else {
        return vec![false; ms.len()];
    };
    let Job { classes, ad, .. } = j;
    let Some(c) = classes.get_mut(class) else {
        return vec![false; ms.len()];
    };
    if c.cache.len() < machines.len() {
        c.cache.resize(machines.len(), 0);
    }
    ms.iter()
        .map(|&m| verdict(c, ad, machines, clock, m))
        .collect()
}

/// Whether machine `m` is in class `c` of the job whose ad is `job_ad`.
fn verdict(
    c: &mut Class,
    job_ad: &ClassAd,
    machines: &[Machine],
    clock: i64,
    m: MachineIdx,
) -> bool {
    if c.excluded.contains(&m) {
        return false;
    }
    let i = m.0 as usize;
    let mach = &machines[i];
    // A class that reads the clock changes its verdict with time, not only
    // with the ad: never cached.
    if c.timed {
        return mach.ad.eval_expr_at(&c.expr, Some(job_ad), clock).is_true()
            && (!mach.has_requirements || classad::matching::accepts(&mach.ad, job_ad));
    }
    if c.cache.len() <= i {
        c.cache.resize(machines.len().max(i + 1), 0);
    }
    let entry = c.cache[i];
    if entry != 0 && entry >> 1 == mach.generation {
        return entry & 1 == 1;
    }
    let ok = mach.ad.eval_expr_at(&c.expr, Some(job_ad), clock).is_true()
        && (!mach.has_requirements || classad::matching::accepts(&mach.ad, job_ad));
    c.cache[i] = (mach.generation << 1) | ok as u32;
    ok
}

fn speed_of(ad: &ClassAd) -> SpeedKey {
    let num = |n: &str| ad.eval_attr(n).as_f64().unwrap_or(0.0);
    // `as` saturates and maps NaN to 0, which is what a nonsense speed deserves.
    (
        Reverse(num("Mips") as i64),
        Reverse((num("KFlops") * 1000.0) as i64),
    )
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
            now: Duration::ZERO,
            machines: Vec::new(),
            by_name: HashMap::new(),
            slots: Vec::new(),
            idle: BTreeSet::new(),
            jobs: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_by_req: HashMap::new(),
            groups: BTreeMap::new(),
            next_seq: 0,
            queue: BTreeMap::new(),
            clusters: Default::default(),
            running: BTreeSet::new(),
            tries: 0,
            next_job_seq: 0,
            dirty: false,
            pool_gen: 0,
            cluster_possible: HashMap::new(),
            judged: 0,
            effects: Vec::new(),
            host_changes: Vec::new(),
            recorded_claims: HashMap::new(),
            usage: Default::default(),
            unix_epoch: 0,
            clock: 0,
        }
    }

    /// Names the Unix time at clock zero, so that `time()` in class
    /// expressions is the allocator's clock (never the machine's): a class
    /// that needs `PilotEndsAt - time() > 600` stops matching a pilot when
    /// the clock says its time is short, and tests can say when that is.
    pub fn set_unix_epoch(&mut self, unix_epoch: u64) {
        self.unix_epoch = unix_epoch;
        self.set_clock();
    }

    fn set_clock(&mut self) {
        let unix = self.unix_epoch.saturating_add(self.now.as_secs());
        self.clock = i64::try_from(unix).unwrap_or(i64::MAX);
    }

    /// Moves the clock to `now`. Time only moves forward: an earlier `now` is ignored.
    pub fn advance_to(&mut self, now: Duration) {
        self.now = self.now.max(now);
        self.set_clock();
        self.sample_usage();
    }

    /// The current time.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Everything caused since the last call, in order. The job queue is
    /// settled first (waiting jobs started, running ones grown), so that every
    /// input's consequences are complete when they are taken.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        loop {
            if std::mem::take(&mut self.dirty) {
                self.schedule();
            } else if self.clusters.has_fresh() {
                self.start_fresh();
            } else {
                break;
            }
        }
        std::mem::take(&mut self.effects)
    }

    /// The host changes of jobs since the last call, in order (take them
    /// after [`Allocator::take_effects`], which may add some).
    pub fn take_host_changes(&mut self) -> Vec<HostChange> {
        std::mem::take(&mut self.host_changes)
    }

    // ----------------------------------------------------------------- lookups

    fn find_slot(&self, host: HostId) -> Option<&Slot> {
        let i = usize::try_from(host.0.checked_sub(1)?).ok()?;
        self.slots.get(i)
    }

    fn get_slot(&self, host: HostId) -> &Slot {
        self.find_slot(host)
            .unwrap_or_else(|| panic!("allocator invariant: host {host} has a slot"))
    }

    fn get_slot_mut(&mut self, host: HostId) -> &mut Slot {
        let i = host.0 as usize - 1;
        &mut self.slots[i]
    }

    fn machine_of(&self, host: HostId) -> &Machine {
        &self.machines[self.get_slot(host).machine.0 as usize]
    }

    fn host_name(&self, host: HostId) -> String {
        let slot = self.get_slot(host);
        format!(
            "slot{}@{}",
            slot.index + 1,
            self.machines[slot.machine.0 as usize].name
        )
    }

    fn host_info(&self, host: HostId, class: &str) -> HostInfo {
        HostInfo {
            host,
            name: self.host_name(host),
            class: class.to_string(),
            ad: self.machine_of(host).ad_text.clone(),
        }
    }

    /// The machine name and 0-based slot number of a host of an online machine.
    pub fn host_location(&self, host: HostId) -> Option<(&str, u32)> {
        let slot = self.find_slot(host)?;
        let m = &self.machines[slot.machine.0 as usize];
        (m.online && slot.index < m.slots).then_some((m.name.as_str(), slot.index))
    }

    /// The machine a host belongs to, online or not.
    pub fn host_machine(&self, host: HostId) -> Option<&str> {
        let slot = self.find_slot(host)?;
        Some(self.machines[slot.machine.0 as usize].name.as_str())
    }

    /// The state of a host.
    pub fn host_state(&self, host: HostId) -> Option<&SlotState> {
        self.find_slot(host).map(|s| &s.state)
    }

    /// The host of slot `slot` of online machine `name`.
    pub fn host_of_slot(&self, name: &str, slot: u32) -> Option<HostId> {
        let m = &self.machines[self.by_name.get(name)?.0 as usize];
        (m.online && slot < m.slots).then(|| m.hosts[slot as usize])
    }

    /// The online hosts of machine `name` (empty when it is unknown or lost).
    pub fn machine_hosts(&self, name: &str) -> &[HostId] {
        match self.by_name.get(name) {
            Some(&i) if self.machines[i.0 as usize].online => {
                let m = &self.machines[i.0 as usize];
                &m.hosts[..m.slots as usize]
            }
            _ => &[],
        }
    }

    /// True when machine `name` is registered and not lost.
    pub fn is_online(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|&i| self.machines[i.0 as usize].online)
    }

    /// The ad of machine `name` while it is registered and not lost.
    pub fn online_ad(&self, name: &str) -> Option<&classad::ClassAd> {
        let m = &self.machines[self.by_name.get(name)?.0 as usize];
        m.online.then_some(&m.ad)
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

    /// Number of online slots, and of idle ones.
    pub fn slot_counts(&self) -> (usize, usize) {
        let online = self
            .slots
            .iter()
            .filter(|s| s.state != SlotState::Offline)
            .count();
        (online, self.idle.len())
    }

    /// Number of pending `AddHosts` requests.
    pub fn pending_requests(&self) -> usize {
        self.pending.len()
    }
}
