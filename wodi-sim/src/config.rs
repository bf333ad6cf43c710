//! What one simulated run is given ([`SimConfig`]) and what it yields
//! ([`SimRun`], [`RunSummary`]).

use owner_model::OwnerModel;
use serde::{Deserialize, Serialize};

use wodi_core::profile::StepProfile;
use wodi_core::proto::Policies;
use wodi_core::sched::SchedConfig;
use wodi_core::stats::Stats;

use crate::pool::PoolConfig;

/// Virtual seconds after which a run is abandoned (a pool whose owners
/// never leave cannot finish it).
pub(crate) const MAX_VIRTUAL_TIME: f64 = 365.0 * 24.0 * 3600.0;

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
    /// Seconds of owner behaviour per simulated second (as the embedded
    /// pool's `speedup`; give the policy a `minute` of `60 / speedup` with
    /// it); 1: the owners' own time.
    pub owner_speedup: f64,
    /// The pool: owner policy, link latency, heartbeats, worker start-up.
    pub pool: PoolConfig,
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
    /// The rules that save grants (issue 34), all off by default.
    pub grants: GrantRules,
    /// The core's tunables.
    pub sched: SchedConfig,
    /// Seed of the step-time noise (and of the owners).
    pub seed: u64,
}

impl SimConfig {
    /// The policies a master of this run sends in its `Init`: the core's
    /// tunables, the fewest-hosts rule and the grant rules.
    pub fn policies(&self) -> Policies {
        let s = &self.sched;
        Policies {
            release_idle: s.release_idle,
            reacquire_ms: s.reacquire.as_millis() as u64,
            grant_cost_ms: s.grant_cost.as_millis() as u64,
            release_suspended: s.release_suspended,
            stragglers: s.stragglers,
            fast_abort: s.fast_abort,
            fewest_hosts: self.fewest_hosts,
            hysteresis: self.hysteresis,
            grow_first_cycle: self.grants.grow_first_cycle,
            loss_aware: self.grants.loss_aware,
        }
    }
}

/// The rules of issue 34 that cut the grants a run costs the pool
/// (docs/results.md, "Fewer grants"); `Default` turns them all off.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GrantRules {
    /// With `fewest_hosts`: grow the first cycle from one host as its
    /// steps' times become known (`Policies::grow_first_cycle`).
    pub grow_first_cycle: bool,
    /// The master restores, before its first cycle, the history an earlier
    /// run of the same application saved (here: the profile's means, what
    /// that history converges to), as `wodi::checkpoint` lets a master do.
    pub warm_history: bool,
    /// With `fewest_hosts`: hold fewer hosts while owners take them back
    /// often (`Policies::loss_aware`).
    pub loss_aware: bool,
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
    /// The grants (`adds`) by cause: the start, owner losses, the policy.
    pub grants: crate::grants::GrantSplit,
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
