//! Allocation queues: when to submit pilots (local RMs started as batch
//! jobs, Slurm first) and when to end them. A pure state machine: the router
//! feeds it the demand the pool cannot meet, what the batch system says about
//! its jobs and which pilots registered, and it returns [`QueueCommand`]s
//! (submit, cancel, poll) that the driver carries out with the batch
//! system's commands.
//!
//! # Decisions
//! For each active queue, at every [`AllocQueues::on_tick`]:
//! - *need* = hosts wanted that the pool cannot give and that this queue's
//!   pilots would match, plus the busy hosts of its pilots whose time limit
//!   is near (so that their replacement is queued before they are vacated),
//!   minus the hosts of its allocations still on their way (submitting,
//!   queued, running but not registered);
//! - while *need* is positive, fewer than `backlog` allocations wait and one
//!   more stays within `max_hosts`, one allocation of `hosts_per_alloc` hosts
//!   is submitted;
//! - a pilot with no busy host for `idle_timeout` (at once when its queue is
//!   being removed) is cancelled; a queued allocation of a removed queue too;
//! - an allocation refused by the batch system, one that ended before its
//!   pilot registered, or one running without a pilot for
//!   [`QueueConfig::register_grace`] is a failure; `max_failures` in a row
//!   pause the queue with the last one's message; a pilot registering resets
//!   the count.
//!
//! # Call order
//! Inputs (`add`, `pause`, ..., `on_submitted`, `on_batch_states`,
//! `on_pilot_registered`, `on_pilot_lost`) and [`AllocQueues::on_tick`] take
//! the wall-clock time in seconds since the Unix epoch (it moves forward
//! only; a pilot's end is a wall-clock time), then [`AllocQueues::take_commands`].
//! [`AllocQueues::next_deadline`] is when `on_tick` must run next at the latest.
//! [`AllocQueues::snapshot`] is the whole state for the journal, written
//! whenever [`AllocQueues::take_changed`] says it changed, and
//! [`AllocQueues::restore`] rebuilds it after a restart.

use std::collections::BTreeMap;

use carmi_proto::msg::{AllocQueueSpec, AllocQueueStatus};
use serde::{Deserialize, Serialize};

/// Timings of the queues.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Seconds between two looks at the batch system's queue while any
    /// allocation is alive.
    pub poll_s: u64,
    /// Seconds a running allocation may go without its pilot registering
    /// before it counts as a failure and is cancelled.
    pub register_grace_s: u64,
    /// Seconds, before the lead time, at which a pilot nearing its end asks
    /// for its replacement (the batch queue and the start take this long).
    pub replace_margin_s: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            poll_s: 2,
            register_grace_s: 120,
            replace_margin_s: 30,
        }
    }
}

/// What the batch system says about one of its jobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchState {
    /// Waiting in its queue, with the batch system's reason.
    Pending(String),
    /// Running.
    Running,
    /// Ended (or unknown to the batch system), with what is known of why.
    Gone(String),
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueCommand {
    /// Submit allocation `alloc` of `queue`: pilots named `machines` (one per host).
    Submit {
        /// The queue.
        queue: u64,
        /// The allocation.
        alloc: u64,
        /// The queue's settings (time limit, CPUs, extra arguments).
        spec: AllocQueueSpec,
        /// The pilots' machine names, one per host.
        machines: Vec<String>,
    },
    /// Cancel a batch job (`scancel`).
    Cancel {
        /// The batch system's job id.
        batch_job: String,
    },
    /// Ask the batch system about these jobs; answer with `on_batch_states`.
    Poll {
        /// The batch system's job ids.
        jobs: Vec<String>,
    },
    /// A dry run ended: answer the admin who asked.
    DryRunDone {
        /// The number the router gave the dry run.
        waiter: u64,
        /// True when a pilot registered.
        ok: bool,
        /// What happened.
        report: String,
    },
}

/// Where an allocation is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocState {
    /// Handed to the batch system, no answer yet.
    Submitting,
    /// In the batch queue.
    Queued,
    /// Running, its pilot not registered yet, since then.
    Running {
        /// Since when (Unix seconds).
        since: u64,
    },
    /// Its pilots registered.
    Registered,
    /// Cancelled by us; waiting for the batch system to let it go.
    Ending,
    /// Over.
    Ended,
    /// Over without ever serving, counted as a failure.
    Failed,
}

impl AllocState {
    fn name(&self) -> &'static str {
        match self {
            AllocState::Submitting => "submitting",
            AllocState::Queued => "queued",
            AllocState::Running { .. } => "running",
            AllocState::Registered => "registered",
            AllocState::Ending => "ending",
            AllocState::Ended => "ended",
            AllocState::Failed => "failed",
        }
    }

    fn over(&self) -> bool {
        matches!(self, AllocState::Ended | AllocState::Failed)
    }

    fn on_the_way(&self) -> bool {
        matches!(
            self,
            AllocState::Submitting | AllocState::Queued | AllocState::Running { .. }
        )
    }
}

/// One pilot host of an allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pilot {
    /// Registered (and not lost since).
    pub up: bool,
    /// When it last had no busy host, while it has none.
    pub idle_since: Option<u64>,
}

/// One allocation (batch job).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Its number (unique among all queues).
    pub id: u64,
    /// Its queue.
    pub queue: u64,
    /// The batch system's job id, once known.
    pub batch_job: Option<String>,
    /// Where it is.
    pub state: AllocState,
    /// Its pilots by machine name.
    pub pilots: BTreeMap<String, Pilot>,
    /// When it was submitted.
    pub submitted: u64,
    /// When its first pilot registered.
    pub started: Option<u64>,
    /// When its time limit ends (`PilotEndsAt` of its pilots).
    pub ends: Option<u64>,
    /// The batch system's reason or error.
    pub note: Option<String>,
    /// The dry run waiting for it, if it is one.
    pub dry_run: Option<u64>,
}

/// Whether a queue submits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueState {
    /// Submitting as demand says.
    Active,
    /// Not submitting, and why.
    Paused(String),
    /// Removed: ends once its allocations have.
    Removing,
    /// A dry run's queue: one allocation, gone with it.
    DryRun,
}

/// One queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queue {
    /// Its id.
    pub id: u64,
    /// Its settings.
    pub spec: AllocQueueSpec,
    /// Whether it submits.
    pub state: QueueState,
    /// Failures in a row.
    pub failures: u32,
    /// Its allocations, the ended ones included (the last few).
    pub allocs: BTreeMap<u64, Allocation>,
    /// Demand last seen, for `carmi alloc list`.
    #[serde(default)]
    pub demand: u32,
}

/// Everything the queues know, as the journal keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The next queue id.
    pub next_queue: u64,
    /// The next allocation id.
    pub next_alloc: u64,
    /// The queues.
    pub queues: Vec<Queue>,
}

/// Ended allocations kept per queue for `carmi alloc info`.
const KEEP_ENDED: usize = 20;

/// The shortest orphan timeout a queue accepts, seconds.
pub const MIN_ORPHAN_TIMEOUT_S: u64 = 10;

/// Why `spec` cannot be a queue, if it cannot.
pub fn check_spec(spec: &AllocQueueSpec) -> Result<(), String> {
    if spec.backend != "slurm" {
        return Err(format!(
            "unknown backend `{}`: only `slurm` is supported",
            spec.backend
        ));
    }
    if spec.max_hosts == 0 || spec.hosts_per_alloc == 0 || spec.backlog == 0 {
        return Err("--max-hosts, --hosts-per-alloc and --backlog must be at least 1".into());
    }
    if spec.hosts_per_alloc > spec.max_hosts {
        return Err(format!(
            "--hosts-per-alloc {} is more than --max-hosts {}",
            spec.hosts_per_alloc, spec.max_hosts
        ));
    }
    if spec.time_limit_s < 60 {
        return Err(format!(
            "--time-limit of {} s is shorter than Slurm's smallest, one minute",
            spec.time_limit_s
        ));
    }
    let max_cpus = carmi_proto::limits::MAX_SLOTS_PER_MACHINE;
    if spec.cpus == 0 || spec.cpus > max_cpus {
        return Err(format!("--cpus must be between 1 and {max_cpus}"));
    }
    if spec.max_failures == 0 {
        return Err("--max-failures must be at least 1".into());
    }
    // A pilot needs some seconds to start and register at all.
    if spec.orphan_timeout_s < MIN_ORPHAN_TIMEOUT_S {
        return Err(format!(
            "--orphan-timeout of {} s is too short: a pilot needs at least {MIN_ORPHAN_TIMEOUT_S} s to register",
            spec.orphan_timeout_s
        ));
    }
    if let Some(name) = &spec.name {
        carmi_proto::limits::check_len("queue name", name, carmi_proto::limits::MAX_NAME_BYTES)
            .map_err(|e| e.to_string())?;
    }
    for a in &spec.extra_args {
        carmi_proto::limits::check_len("sbatch argument", a, 4096).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The machine name of host `i` of allocation `alloc`.
pub fn pilot_name(alloc: u64, i: u32) -> String {
    format!("pilot-a{alloc}-{i}")
}

/// The allocation a pilot machine name belongs to.
pub fn alloc_of(machine: &str) -> Option<u64> {
    let rest = machine.strip_prefix("pilot-a")?;
    let (a, i) = rest.split_once('-')?;
    i.parse::<u32>().ok()?;
    a.parse().ok()
}

/// The allocation queues. See the module documentation.
#[derive(Debug, Default)]
pub struct AllocQueues {
    config: QueueConfig,
    next_queue: u64,
    next_alloc: u64,
    queues: BTreeMap<u64, Queue>,
    out: Vec<QueueCommand>,
    changed: bool,
    /// When the batch system was last asked.
    polled: Option<u64>,
}

mod decide;
mod report;
#[cfg(test)]
mod tests;

impl AllocQueues {
    /// No queues.
    pub fn new(config: QueueConfig) -> AllocQueues {
        AllocQueues {
            config,
            next_queue: 1,
            next_alloc: 1,
            ..Default::default()
        }
    }

    /// The state as the journal keeps it.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            next_queue: self.next_queue,
            next_alloc: self.next_alloc,
            queues: self.queues.values().cloned().collect(),
        }
    }

    /// The state of an earlier run, from its last snapshot. Allocations that
    /// were being submitted are unknown to us now (their answer is lost):
    /// they count as failed.
    pub fn restore(&mut self, snap: Snapshot) {
        self.next_queue = snap.next_queue.max(1);
        self.next_alloc = snap.next_alloc.max(1);
        self.queues = snap.queues.into_iter().map(|q| (q.id, q)).collect();
        for q in self.queues.values_mut() {
            for a in q.allocs.values_mut() {
                if a.state == AllocState::Submitting {
                    a.state = AllocState::Failed;
                    a.note = Some("the global RM restarted while it was submitted".into());
                }
                // Registered again when they reconnect.
                for p in a.pilots.values_mut() {
                    p.up = false;
                    p.idle_since = None;
                }
                if a.dry_run.is_some() && !a.state.over() {
                    // Nobody waits for the answer any more.
                    a.dry_run = None;
                }
            }
        }
    }

    /// True once since the state changed (write a snapshot to the journal).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// What to do, in order.
    pub fn take_commands(&mut self) -> Vec<QueueCommand> {
        std::mem::take(&mut self.out)
    }

    /// The queues' ids and settings, for computing their demand.
    pub fn specs(&self) -> impl Iterator<Item = (u64, &AllocQueueSpec)> {
        self.queues.values().map(|q| (q.id, &q.spec))
    }

    /// True when any queue exists (the router then ticks it).
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// When [`AllocQueues::on_tick`] must run next at the latest.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.queues.is_empty() {
            return None;
        }
        Some(self.polled.unwrap_or(0) + self.config.poll_s.max(1))
    }

    /// Creates a queue.
    pub fn add(&mut self, spec: AllocQueueSpec) -> Result<AllocQueueStatus, String> {
        let id = self.insert_queue(spec, QueueState::Active)?;
        self.changed = true;
        Ok(self.status(id, true).expect("just added"))
    }

    /// Starts a dry run: a queue of one allocation submitted now, answered
    /// with [`QueueCommand::DryRunDone`] under `waiter`.
    pub fn dry_run(
        &mut self,
        mut spec: AllocQueueSpec,
        waiter: u64,
        now: u64,
    ) -> Result<(), String> {
        spec.max_hosts = spec.hosts_per_alloc.max(1);
        let id = self.insert_queue(spec, QueueState::DryRun)?;
        self.submit(id, now, Some(waiter));
        Ok(())
    }

    /// Checks `spec` and adds a queue of it, in `state`, with no allocation.
    fn insert_queue(&mut self, spec: AllocQueueSpec, state: QueueState) -> Result<u64, String> {
        check_spec(&spec)?;
        let id = self.next_queue;
        self.next_queue += 1;
        self.queues.insert(
            id,
            Queue {
                id,
                spec,
                state,
                failures: 0,
                allocs: BTreeMap::new(),
                demand: 0,
            },
        );
        Ok(id)
    }

    fn queue_mut(&mut self, id: u64) -> Result<&mut Queue, String> {
        self.queues
            .get_mut(&id)
            .filter(|q| q.state != QueueState::DryRun)
            .ok_or_else(|| format!("no allocation queue {id}"))
    }

    /// Stops a queue submitting.
    pub fn pause(&mut self, id: u64) -> Result<AllocQueueStatus, String> {
        let q = self.queue_mut(id)?;
        if q.state == QueueState::Removing {
            return Err(format!("allocation queue {id} is being removed"));
        }
        q.state = QueueState::Paused("paused by an admin".into());
        self.changed = true;
        Ok(self.status(id, true).expect("present"))
    }

    /// Lets a paused queue submit again, its failures forgotten.
    pub fn resume(&mut self, id: u64) -> Result<AllocQueueStatus, String> {
        let q = self.queue_mut(id)?;
        if q.state == QueueState::Removing {
            return Err(format!("allocation queue {id} is being removed"));
        }
        q.state = QueueState::Active;
        q.failures = 0;
        self.changed = true;
        Ok(self.status(id, true).expect("present"))
    }

    /// Removes a queue: its waiting allocations are cancelled now, its
    /// pilots end as soon as they are idle.
    pub fn remove(&mut self, id: u64) -> Result<AllocQueueStatus, String> {
        let q = self.queue_mut(id)?;
        q.state = QueueState::Removing;
        self.changed = true;
        let status = self.status(id, true).expect("present");
        self.cancel_waiting(id);
        Ok(status)
    }

    /// The batch system accepted allocation `alloc` as `result`'s job id, or
    /// refused it with its message.
    pub fn on_submitted(&mut self, alloc: u64, result: Result<String, String>, now: u64) {
        let Some((qid, a)) = self.find_alloc(alloc) else {
            return;
        };
        if a.state != AllocState::Submitting {
            return;
        }
        match result {
            Ok(job) => {
                a.batch_job = Some(job);
                a.state = AllocState::Queued;
                self.changed = true;
                if self.queues[&qid].state == QueueState::Removing {
                    self.cancel_waiting(qid);
                }
            }
            Err(message) => self.fail(qid, alloc, format!("submission refused: {message}"), now),
        }
    }

    /// A pilot registered, with the `PilotEndsAt` of its ad.
    pub fn on_pilot_registered(&mut self, machine: &str, ends: Option<u64>, now: u64) {
        let Some(alloc) = alloc_of(machine) else {
            return;
        };
        let Some((qid, a)) = self.find_alloc(alloc) else {
            return;
        };
        let Some(p) = a.pilots.get_mut(machine) else {
            return;
        };
        p.up = true;
        p.idle_since = Some(now);
        if matches!(
            a.state,
            AllocState::Submitting | AllocState::Queued | AllocState::Running { .. }
        ) {
            a.state = AllocState::Registered;
        }
        a.started.get_or_insert(now);
        if ends.is_some() {
            a.ends = ends;
        }
        let waiter = a.dry_run.take();
        let job = a.batch_job.clone();
        let q = self.queues.get_mut(&qid).expect("found above");
        q.failures = 0;
        self.changed = true;
        if let Some(waiter) = waiter {
            self.out.push(QueueCommand::DryRunDone {
                waiter,
                ok: true,
                report: format!(
                    "pilot {machine} (batch job {}) started and registered",
                    job.as_deref().unwrap_or("?")
                ),
            });
            self.end_alloc(qid, alloc);
        }
    }

    /// A pilot machine was declared lost (or its local RM said goodbye).
    pub fn on_pilot_lost(&mut self, machine: &str) {
        let Some(alloc) = alloc_of(machine) else {
            return;
        };
        if let Some((_, a)) = self.find_alloc(alloc)
            && let Some(p) = a.pilots.get_mut(machine)
        {
            p.up = false;
            p.idle_since = None;
            self.changed = true;
        }
    }

    fn find_alloc(&mut self, alloc: u64) -> Option<(u64, &mut Allocation)> {
        self.queues
            .values_mut()
            .find_map(|q| q.allocs.get_mut(&alloc).map(|a| (q.id, a)))
    }
}
