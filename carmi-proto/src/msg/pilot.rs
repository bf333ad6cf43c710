//! Allocation queues (`carmi alloc`): the global RM grows the pool with
//! pilots, local RMs it submits as batch jobs (Slurm first) while jobs wait
//! for hosts the pool does not have. These are the admin requests and the
//! reports they return; the decisions are in `carmi_global_core::alloc_queue`.
//! Re-exported from [`crate::msg`].

use serde::{Deserialize, Serialize};

/// Default hosts (pilots) per allocation.
pub const DEFAULT_HOSTS_PER_ALLOC: u32 = 1;
/// Default allocations waiting in the batch system's queue at once.
pub const DEFAULT_BACKLOG: u32 = 1;
/// Default seconds a pilot stays without work before it is ended.
pub const DEFAULT_IDLE_TIMEOUT_S: u64 = 300;
/// Default failures in a row after which a queue pauses itself.
pub const DEFAULT_MAX_FAILURES: u32 = 3;
/// Default slots (CPUs) of one pilot host.
pub const DEFAULT_CPUS: u32 = 1;
/// Default seconds a pilot stays without its global RM before it ends.
pub const DEFAULT_ORPHAN_TIMEOUT_S: u64 = 180;

/// What `carmi alloc add` asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocQueueSpec {
    /// The batch system: `slurm` (the only one so far).
    pub backend: String,
    /// A name for people (`carmi alloc list`); the queue's id otherwise.
    #[serde(default)]
    pub name: Option<String>,
    /// Never more than this many pilot hosts at once (queued or running).
    pub max_hosts: u32,
    /// Hosts per allocation (`--nodes`; one pilot per node).
    #[serde(default = "default_hosts_per_alloc")]
    pub hosts_per_alloc: u32,
    /// At most this many allocations wait in the batch queue at once.
    #[serde(default = "default_backlog")]
    pub backlog: u32,
    /// The allocation's time limit, seconds (`--time`).
    pub time_limit_s: u64,
    /// A pilot without work for this long is ended, seconds.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_s: u64,
    /// How long before its time limit a pilot's hosts are vacated, seconds
    /// (as if their owner came back); `None`: a quarter of the time limit,
    /// at most 60 s.
    #[serde(default)]
    pub lead_s: Option<u64>,
    /// After this many failures in a row (an allocation refused, or a pilot
    /// that ended before registering) the queue pauses itself.
    #[serde(default = "default_max_failures")]
    pub max_failures: u32,
    /// Slots of each pilot host (`--cpus-per-task`).
    #[serde(default = "default_cpus")]
    pub cpus: u32,
    /// Further arguments given to the batch system as they are (`sbatch`).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// A pilot that cannot register with the global RM for this long (it
    /// stopped, the network broke) ends, killing its processes, instead of
    /// holding its allocation until the time limit, seconds.
    #[serde(default = "default_orphan_timeout")]
    pub orphan_timeout_s: u64,
}

fn default_hosts_per_alloc() -> u32 {
    DEFAULT_HOSTS_PER_ALLOC
}
fn default_backlog() -> u32 {
    DEFAULT_BACKLOG
}
fn default_idle_timeout() -> u64 {
    DEFAULT_IDLE_TIMEOUT_S
}
fn default_max_failures() -> u32 {
    DEFAULT_MAX_FAILURES
}
fn default_cpus() -> u32 {
    DEFAULT_CPUS
}
fn default_orphan_timeout() -> u64 {
    DEFAULT_ORPHAN_TIMEOUT_S
}

impl AllocQueueSpec {
    /// A Slurm queue with the defaults for everything optional.
    pub fn slurm(max_hosts: u32, time_limit_s: u64) -> AllocQueueSpec {
        AllocQueueSpec {
            backend: "slurm".into(),
            name: None,
            max_hosts,
            hosts_per_alloc: DEFAULT_HOSTS_PER_ALLOC,
            backlog: DEFAULT_BACKLOG,
            time_limit_s,
            idle_timeout_s: DEFAULT_IDLE_TIMEOUT_S,
            lead_s: None,
            max_failures: DEFAULT_MAX_FAILURES,
            cpus: DEFAULT_CPUS,
            extra_args: Vec::new(),
            orphan_timeout_s: DEFAULT_ORPHAN_TIMEOUT_S,
        }
    }

    /// The lead time before the time limit at which hosts are vacated.
    pub fn lead(&self) -> u64 {
        self.lead_s
            .unwrap_or((self.time_limit_s / 4).min(60))
            .min(self.time_limit_s)
    }
}

/// Admin -> global RM: manage allocation queues. Answered with
/// [`AllocAnswer`] (in `FromGlobal::Alloc`) or `AdminFailed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocRequest {
    /// Create a queue.
    Add(AllocQueueSpec),
    /// Every queue, without its ended allocations.
    List,
    /// One queue with all the allocations it remembers.
    Info {
        /// The queue.
        queue: u64,
    },
    /// Stop submitting (running pilots stay).
    Pause {
        /// The queue.
        queue: u64,
    },
    /// Submit again, the failure count reset.
    Resume {
        /// The queue.
        queue: u64,
    },
    /// Cancel the queue's waiting allocations and let running pilots drain;
    /// the queue is gone once none is left.
    Remove {
        /// The queue.
        queue: u64,
    },
    /// Submit one short allocation now, whatever the demand, and answer once
    /// its pilot registered or failed ([`AllocAnswer::DryRun`]).
    DryRun(AllocQueueSpec),
}

/// One allocation (a batch job) of a queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationStatus {
    /// Its number in the queue.
    pub id: u64,
    /// The batch system's job id, once submitted.
    pub batch_job: Option<String>,
    /// `submitting`, `queued`, `running`, `registered`, `ending`, `ended` or `failed`.
    pub state: String,
    /// Its hosts (pilot machines that registered).
    pub machines: Vec<String>,
    /// Hosts it asked for.
    pub hosts: u32,
    /// When it was submitted, seconds since the Unix epoch.
    pub submitted_unix: u64,
    /// When its first pilot registered.
    pub started_unix: Option<u64>,
    /// When its time limit ends (`PilotEndsAt`).
    pub ends_unix: Option<u64>,
    /// The batch system's reason or error, if any.
    pub note: Option<String>,
}

/// A queue, for `carmi alloc list` and `info`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocQueueStatus {
    /// Its id.
    pub id: u64,
    /// What it was created with.
    pub spec: AllocQueueSpec,
    /// `active`, `paused`, `removing`.
    pub state: String,
    /// Why it is paused (the last failure's message) when it is.
    pub reason: Option<String>,
    /// Failures in a row so far.
    pub failures: u32,
    /// Hosts wanted by waiting jobs that this queue's pilots could serve.
    pub demand: u32,
    /// Its allocations (`List`: those not ended).
    pub allocations: Vec<AllocationStatus>,
}

/// Global RM -> admin: answer to an [`AllocRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocAnswer {
    /// The queue as it is now (`Add`, `Info`, `Pause`, `Resume`, `Remove`).
    Queue(AllocQueueStatus),
    /// Every queue (`List`).
    Queues(Vec<AllocQueueStatus>),
    /// The outcome of a dry run.
    DryRun {
        /// True when a pilot registered.
        ok: bool,
        /// What happened (the batch system's message when it failed).
        report: String,
    },
}
