//! The messages of WoDi's own connections, typed by direction.
//!
//! Master and workers talk to the server over plain TCP with CARMI's frames
//! (`carmi_api::frame`): a JSON header naming the message and a payload of
//! raw bytes (init data, step data, results) that travels verbatim. Every
//! connection starts with a [`Hello`] carrying the run's token; the server
//! closes a connection whose token is wrong.

use serde::{Deserialize, Serialize};

use crate::ids::{CycleId, StepId, WorkerId};

/// Version of these messages; a peer with another version is refused.
pub const WODI_PROTOCOL: u32 = 1;

/// Largest frame accepted on a WoDi connection.
pub const MAX_FRAME: usize = 1 << 30;

/// First frame on every connection to the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// [`WODI_PROTOCOL`] of the sender.
    pub version: u32,
    /// The run's secret token, given to the server by the master and to the
    /// workers in their spawn arguments.
    pub token: String,
    /// Who is connecting.
    pub role: HelloRole,
}

/// The kind of peer in a [`Hello`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum HelloRole {
    /// The master process.
    Master,
    /// A worker the server spawned, with the id it was given.
    Worker {
        /// Id from the spawn arguments.
        worker: WorkerId,
    },
}

/// A resource class the master wants workers on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassSpec {
    /// Class name (unique within the run).
    pub name: String,
    /// ClassAd requirements expression over machine ads (`true` for any host).
    pub requirements: String,
    /// How many hosts (one worker each) the class should hold.
    pub count: u32,
    /// Relative speed of the class's hosts, used with
    /// [`crate::speed::SpeedSource::Class`] (absent: 1).
    #[serde(default)]
    pub speed: Option<f64>,
    /// The worker executable on this class's hosts, when it differs from
    /// `Init`'s (another machine type needs its own build); absent: `Init`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
    /// The worker's arguments on this class's hosts (before WoDi's own
    /// connection argument); absent: `Init`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
}

impl ClassSpec {
    /// `count` hosts matching `requirements`, running `Init`'s worker
    /// command at the speed the pool says.
    pub fn new(name: impl Into<String>, requirements: impl Into<String>, count: u32) -> ClassSpec {
        ClassSpec {
            name: name.into(),
            requirements: requirements.into(),
            count,
            speed: None,
            executable: None,
            args: None,
        }
    }
}

/// Master -> server. Payload-carrying messages say so.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromMaster {
    /// Start the run. Payload: init data for every worker.
    Init {
        /// The classes and their desired counts.
        classes: Vec<ClassSpec>,
        /// Path of the worker executable on the submit machine (uploaded by CARMI).
        executable: String,
        /// Arguments before WoDi's own connection argument.
        args: Vec<String>,
        /// Steps in flight per worker (1 = one at a time; more hides latency).
        prefetch: u32,
        /// Adaptive prefetch: the most steps a worker whose steps are short
        /// against its round trip may hold (see `wodi::sched::pace`); at or
        /// below `prefetch` (and from older masters) every worker holds
        /// `prefetch`.
        #[serde(default)]
        prefetch_max: u32,
        /// Crashes a step may cause before it is reported failed.
        max_attempts: u32,
        /// How long a suspended worker keeps its steps before they are re-sent, in ms.
        suspend_timeout_ms: u64,
        /// How steps are ordered (absent from older masters: WoDi's own).
        #[serde(default)]
        ordering: crate::order::Ordering,
        /// Where host speeds come from (absent from older masters: unknown).
        #[serde(default)]
        speed: crate::speed::SpeedSource,
        /// Whether observed step times correct host speeds.
        #[serde(default)]
        refine_speed: bool,
        /// Learn step times from wall time instead of CPU time.
        #[serde(default)]
        learn_from_wall: bool,
        /// Which of the scheduler's own policies run (absent from older
        /// masters: none).
        #[serde(default)]
        policies: Policies,
    },
    /// The benchmark step of [`crate::speed::SpeedSource::Benchmark`],
    /// sent right after `Init`. Payload: its data, as the worker's step
    /// handler reads it (under step id [`crate::speed::BENCHMARK_STEP`]).
    Benchmark,
    /// Step estimates to start from (a restarted master's checkpoint).
    /// Payload: JSON list of [`crate::plan::SavedEstimate`].
    RestoreHistory,
    /// Ask for the history as it stands; answered by `ToMaster::History`.
    GetHistory,
    /// A cycle begins. Payload: its begin data.
    BeginCycle {
        /// The cycle.
        cycle: CycleId,
    },
    /// One step. Payload: its data.
    Step {
        /// The step.
        step: StepId,
    },
    /// A cycle ends. Payload: end data for every worker.
    EndCycle {
        /// The cycle.
        cycle: CycleId,
    },
    /// The master is done: release everything and send the statistics.
    Complete,
}

/// Server -> master.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToMaster {
    /// The run started (hosts are being requested).
    Ready,
    /// The first result of a step. Payload: the result.
    Result {
        /// The step.
        step: StepId,
    },
    /// A step will never produce a result.
    StepFailed {
        /// The step.
        step: StepId,
        /// Why.
        reason: String,
    },
    /// The run cannot go on (for instance the pool refused the classes).
    Fatal {
        /// Why.
        reason: String,
    },
    /// Answer to `Complete`. Payload: the statistics as JSON.
    Stats,
    /// The run's hosts and steps now, sent when they change (at most a few
    /// times a second) so that a master can show progress.
    Status(Status),
    /// Answer to `GetHistory`. Payload: JSON list of
    /// [`crate::plan::SavedEstimate`].
    History,
}

/// The scheduler's policies beyond the paper (see `wodi::sched::policy` and
/// docs/results.md for what each one buys): giving back hosts the run cannot
/// use, copying stragglers, retiring hosts much slower than their speed.
/// `Default` turns them all off (the paper's WoDi); [`Policies::keep_hosts`]
/// is what `wodi::master::MasterConfig::new` asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policies {
    /// Give back a host with nothing to do in a cycle's tail when the tail
    /// lasts longer than `reacquire_ms`; ask again as steps queue.
    pub release_idle: bool,
    /// What getting a host back costs (CARMI's grant and a worker's start), ms.
    pub reacquire_ms: u64,
    /// What one grant costs the pool, as host time the run would rather
    /// leave idle, ms: an idle host is given back only when the tail lasts
    /// longer than `reacquire_ms + grant_cost_ms` (see
    /// `wodi::sched::SchedConfig::grant_cost`).
    pub grant_cost_ms: u64,
    /// Give back a suspended host when its grace ends (its step is re-sent).
    pub release_suspended: bool,
    /// Copy a straggling step to an idle host that would finish it clearly
    /// sooner; the first result wins.
    pub stragglers: bool,
    /// Retire a worker after two steps that ran this many times their
    /// estimate: its host is excluded from the class (CARMI's
    /// `ExcludeHosts`, so the pool never grants it to the run's class again)
    /// and given back, and a replacement is asked for. `None` never retires.
    pub fast_abort: Option<f64>,
    /// After each cycle, hold only the fewest hosts with which the cycle
    /// would still end within `1 + tolerance` times its longest step (by the
    /// history and the hosts' speeds), never more than the master asked
    /// for; surplus hosts go back to the pool. `None`: hold what was asked.
    /// With several classes, the fastest hosts are kept first, at most what
    /// was asked of each class (one master at a time).
    pub fewest_hosts: Option<f64>,
    /// With `fewest_hosts`: cycles in a row the answer must differ in one
    /// direction before the count follows it (0 follows every change).
    pub hysteresis: u32,
    /// With `fewest_hosts`: the first cycle starts on one host per class and
    /// grows, as its steps' times become known, to the fewest hosts the
    /// known steps need, instead of asking at once for what the master
    /// asked (most of which the second cycle gives back). A history
    /// restored before the first cycle is known from the start.
    pub grow_first_cycle: bool,
    /// With `fewest_hosts`: the tolerance grows with what a held host costs
    /// now (the cycle may take `(1 + tolerance) * c` times its best, `c` a
    /// held host-second's cost: 1 plus the loss rate measured over the last
    /// hour times `grant_cost_ms + reacquire_ms` per loss), so that the run
    /// holds fewer hosts while owners take them back often.
    pub loss_aware: bool,
}

impl Default for Policies {
    fn default() -> Policies {
        Policies {
            release_idle: false,
            reacquire_ms: 10_000,
            grant_cost_ms: 0,
            release_suspended: false,
            stragglers: false,
            fast_abort: None,
            fewest_hosts: None,
            hysteresis: 2,
            grow_first_cycle: false,
            loss_aware: false,
        }
    }
}

impl Policies {
    /// Giving back idle hosts in a cycle's tail, giving back suspended hosts
    /// once their grace ends, and straggler copies (session 8's defaults,
    /// `wodi-sim --policies churn`): together with fast abort
    /// the simulator shows them raising efficiency from about 81% to about
    /// 98% over the paper's 61 churning runs at the same run length, and the
    /// churn test on an embedded pool delivers every step exactly once with
    /// them. Fast abort stays off here, although the server now has CARMI
    /// exclude a retired host from the class before giving it back (so a
    /// pending request no longer takes it straight back): the main job's
    /// published numbers were measured without it, and on hosts that keep
    /// their advertised speed it has nothing to act on. A master whose pool
    /// has hosts much slower than they claim can turn it on
    /// (`fast_abort: Some(3.0)`).
    pub fn recommended() -> Policies {
        Policies {
            release_idle: true,
            release_suspended: true,
            stragglers: true,
            ..Policies::default()
        }
    }

    /// The cost-aware rule (`wodi-sim --policies keep`): hold the fewest
    /// hosts that end a cycle within 40% of its longest step, keep an idle
    /// host through a cycle's tail unless the tail outlasts getting it back
    /// (`reacquire_ms`) plus five minutes of host time per grant, give back
    /// suspended hosts when their grace ends, copy stragglers; a tail of
    /// unknown length (the first cycle) keeps its hosts. On the paper's
    /// churning setting it keeps 90.6% efficiency with 51 grants per run,
    /// against about 600 for [`Policies::recommended`], for runs 16% longer
    /// (docs/results.md); pair it with a short suspend grace (15 s).
    pub fn keep_hosts() -> Policies {
        Policies {
            release_idle: true,
            grant_cost_ms: 300_000,
            release_suspended: true,
            stragglers: true,
            fewest_hosts: Some(0.4),
            hysteresis: 5,
            ..Policies::default()
        }
    }

    /// Applies these policies to a scheduler configuration.
    pub fn apply(&self, cfg: &mut crate::sched::SchedConfig) {
        cfg.release_idle = self.release_idle;
        cfg.reacquire = std::time::Duration::from_millis(self.reacquire_ms);
        cfg.grant_cost = std::time::Duration::from_millis(self.grant_cost_ms);
        cfg.release_suspended = self.release_suspended;
        cfg.stragglers = self.stragglers;
        cfg.fast_abort = self.fast_abort.filter(|f| f.is_finite() && *f > 1.0);
    }
}

/// Progress counts, defined beside the statistics (kept importable from here).
pub use crate::stats::Status;

/// Server -> worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToWorker {
    /// Sent first. Payload: the master's init data.
    Init,
    /// A cycle begins (or is already running when this worker joins). Payload: its data.
    BeginCycle {
        /// The cycle.
        cycle: CycleId,
    },
    /// Compute a step. Payload: its data.
    Step {
        /// The submission this copy belongs to; echoed in the answer.
        ticket: u64,
        /// The step, as the master named it.
        step: StepId,
    },
    /// A cycle ended. Payload: its end data.
    EndCycle {
        /// The cycle.
        cycle: CycleId,
    },
    /// Finish and exit.
    Stop,
}

/// Worker -> server (after its [`Hello`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FromWorker {
    /// A step's result. Payload: the result.
    Result {
        /// The ticket of the `Step` message answered.
        ticket: u64,
        /// CPU time of the step (process and children), microseconds.
        cpu_us: u64,
        /// Wall time of the step, microseconds.
        wall_us: u64,
    },
    /// The step's handler returned an error: the step fails without retry,
    /// since running it again would give the same answer.
    Error {
        /// The ticket of the `Step` message answered.
        ticket: u64,
        /// The handler's message.
        message: String,
    },
}

/// Argument prefix by which the server tells a spawned worker where to connect:
/// `--wodi-connect=ADDR,TOKEN,WORKER`.
pub const CONNECT_ARG: &str = "--wodi-connect=";

/// Formats the connection argument for a worker.
pub fn connect_arg(addr: &str, token: &str, worker: WorkerId) -> String {
    format!("{CONNECT_ARG}{addr},{token},{}", worker.0)
}

/// Parses the connection argument's value (after the prefix).
pub fn parse_connect_arg(value: &str) -> Option<(String, String, WorkerId)> {
    let mut parts = value.splitn(3, ',');
    let addr = parts.next()?.to_string();
    let token = parts.next()?.to_string();
    let worker = parts.next()?.parse().ok()?;
    Some((addr, token, WorkerId(worker)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_argument_round_trips() {
        let a = connect_arg("127.0.0.1:4000", "abc", WorkerId(7));
        let v = a.strip_prefix(CONNECT_ARG).unwrap();
        assert_eq!(
            parse_connect_arg(v),
            Some(("127.0.0.1:4000".into(), "abc".into(), WorkerId(7)))
        );
        assert_eq!(parse_connect_arg("x,y"), None);
        assert_eq!(parse_connect_arg("x,y,z"), None);
    }
}
