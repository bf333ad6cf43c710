//! What administration tools see: jobs as submitted, queued and remembered
//! (`carmi submit`, `q`, `history`, `logs`), the files a master sends back,
//! staging counters and the pool's machines (`carmi status`).
//!
//! Kept apart from the connection-level messages in [`super`] because these
//! are reports and records, not protocol steps. Re-exported from [`crate::msg`].

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{ExecutableRef, JobEnd};
use crate::ids::{HostId, JobId, ProcessId};

/// A piece of a master's standard output or error (`carmi logs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// The text, from byte `offset`: bytes that are not UTF-8 come as
    /// U+FFFD, and a character cut by the end of the read is left for the next.
    pub text: String,
    /// Where the next read starts (`offset` + the bytes `text` came from).
    pub next: u64,
    /// The stream's size when it was read: more is waiting when `next < size`.
    pub size: u64,
}

/// A file a master left, sent back to its submit directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnedFile {
    /// Its name in the master's sandbox (`stdout`, `stderr`, or a
    /// `transfer_output_files` entry).
    pub name: String,
    /// Bytes sent (after any cut).
    pub size: u64,
    /// True when the file was larger than its share of the limit and was cut.
    #[serde(default)]
    pub truncated: bool,
    /// Where it goes on the submit machine (absolute); filled in by the
    /// global RM from the submit file, empty from the local RM.
    #[serde(default)]
    pub dest: String,
}

/// The files an ended job's master sent back, kept by the global RM in its
/// state directory beside the job's history record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFiles {
    /// The master that sent them (they are stored under its id).
    pub process: ProcessId,
    /// The files, with their destinations.
    pub files: Vec<ReturnedFile>,
}

/// Counters of the global RM about staging (answer to [`ToGlobal::StageStats`](super::ToGlobal::StageStats)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageStats {
    /// Executable copies the global RM started sending from its store
    /// (staging connections, plus whole-executable `Executable` answers).
    pub global_sends: u64,
    /// Fetches directed to the global store.
    pub directed_global: u64,
    /// Fetches directed to a peer.
    pub directed_peer: u64,
    /// Fetches reported complete and verified.
    pub completed: u64,
    /// Fetches reported failed (corrupt copy, peer gone, stalled), each then
    /// directed elsewhere.
    pub failed: u64,
}

/// A job as `carmi submit` sends it: the parsed submit file, with the master's
/// executable already uploaded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// Who submits (a user name, for `carmi q` and the job ad's `Owner`).
    pub owner: String,
    /// The machine (local RM name) where the master runs.
    pub machine: String,
    /// The master's executable.
    pub executable: ExecutableRef,
    /// The parsed submit file (macros not yet expanded: the job id is not known).
    pub spec: crate::submit::JobSpec,
    /// Wall-clock submit time, seconds since the Unix epoch (the submitter's clock).
    pub submitted_unix: u64,
    /// True when `machine` is only the submit machine's name, not a choice:
    /// the master runs there if it is a machine of the pool, else the global
    /// RM places it on a machine that matches the job's `master_requirements`.
    /// False pins the master to `machine` (`--machine`, `CARMI_MACHINE`).
    #[serde(default)]
    pub anywhere: bool,
    /// Procs 1.. of the cluster this submit makes (`spec` is proc 0), each
    /// with its `$(ProcId)` and item macros expanded and `$(ClusterId)` left
    /// for the global RM; empty for a cluster of one proc. The global RM
    /// gives proc P the job id `C + P`, where `C` is the cluster's id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procs: Vec<crate::submit::JobSpec>,
    /// `max_materialize`: at most this many procs of the cluster in the
    /// queue at once (the rest wait in the cluster, outside the allocator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_materialize: Option<u32>,
    /// `max_idle`: at most this many procs of the cluster waiting for
    /// machines at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_idle: Option<u32>,
}

/// One job, for `carmi q`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job.
    pub job: JobId,
    /// Its cluster (the job id of its proc 0); `None` from older global RMs
    /// and for jobs started by hand, which are clusters of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<JobId>,
    /// Its proc number within the cluster.
    #[serde(default)]
    pub proc: u32,
    /// Who submitted it (for a job started by hand: its machine).
    pub owner: String,
    /// Wall-clock submit time, seconds since the Unix epoch (0 when unknown).
    pub submitted_unix: u64,
    /// `waiting`, `running`, `held` (with the reason in `note`), or `attached`
    /// (started by hand, no submit file).
    pub state: String,
    /// The master's executable name (empty for a job started by hand).
    pub executable: String,
    /// The master process, once started.
    pub master: Option<ProcessId>,
    /// Per class: hosts held, minimum, maximum.
    pub classes: Vec<ClassStatus>,
    /// Why the job cannot proceed, when the global RM knows (a minimum the
    /// pool cannot supply); absent from older global RMs.
    #[serde(default)]
    pub note: Option<String>,
    /// The owner's standing in the fair share between users; absent from
    /// older global RMs.
    #[serde(default)]
    pub user: Option<UserShare>,
    /// Attributes the running job published (`SetJobAttrs`: name, ClassAd
    /// value text), sorted by name; WoDi's progress is here. Absent from
    /// older global RMs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attrs: Vec<(String, String)>,
}

/// A user's standing in the fair share (`carmi q`): hosts are shared
/// between users in inverse proportion to their priority.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserShare {
    /// Effective priority, `factor x (1 + usage in host-hours)`; lower is better.
    pub priority: f64,
    /// Recent usage in host-hours, halved every half-life.
    pub usage_hours: f64,
    /// The priority factor (`carmi userprio --set-factor`; 1 unless set,
    /// and 1 from a global RM that predates it).
    #[serde(default = "one")]
    pub factor: f64,
    /// The user charged, when it is not the job's owner: the job's
    /// accounting group (`physics.alice`, issue 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

fn one() -> f64 {
    1.0
}

/// `carmi userprio`: the users of the fair share, or (admin) a user's
/// priority factor, as HTCondor's `condor_userprio` and its `-setfactor`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum UserPrioRequest {
    /// Every user with usage or a factor other than 1.
    List,
    /// Sets `user`'s priority factor (positive; 1 is the default): admin only.
    SetFactor {
        /// The user (a job's `Owner`: the identity that submitted it).
        user: String,
        /// The factor: a user's effective priority is multiplied by it, so
        /// that a factor of 2 is owed half the hosts of a factor of 1.
        factor: f64,
    },
}

/// One user as `carmi userprio` lists them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserPrio {
    /// The user.
    pub user: String,
    /// Effective priority, `factor x (1 + usage in host-hours)`; lower is better.
    pub priority: f64,
    /// Recent usage in host-hours, halved every half-life.
    pub usage_hours: f64,
    /// The priority factor a pool manager set (1 unless set).
    pub factor: f64,
}

/// A job that left the queue, for `carmi history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job.
    pub job: JobId,
    /// Its cluster (the job id of its proc 0); `None` from older global RMs
    /// and for jobs started by hand, which are clusters of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<JobId>,
    /// Its proc number within the cluster.
    #[serde(default)]
    pub proc: u32,
    /// Who submitted it (for a job started by hand: its machine).
    pub owner: String,
    /// The master's executable name (empty for a job started by hand).
    pub executable: String,
    /// Wall-clock submit time, seconds since the Unix epoch (0 when unknown).
    pub submitted_unix: u64,
    /// Wall-clock end time at the global RM, seconds since the Unix epoch.
    pub ended_unix: u64,
    /// How it ended.
    pub end: JobEnd,
    /// What its master sent back for the submit directory, if anything.
    #[serde(default)]
    pub files: Option<JobFiles>,
    /// What it used, for `carmi history` (zero from global RMs before it was recorded).
    #[serde(default)]
    pub usage: JobUsage,
}

/// What a job used over its life, for `carmi history`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    /// When its master started, seconds since the Unix epoch (0: never, or
    /// before a restart of the global RM).
    #[serde(default)]
    pub started_unix: u64,
    /// CPU time of its processes that exited (master and workers), milliseconds.
    #[serde(default)]
    pub cpu_ms: u64,
    /// The machines its processes ran on, sorted.
    #[serde(default)]
    pub machines: Vec<String>,
    /// How many times its master was sent to a machine to start (more than
    /// one when it was put back in the queue: a start the machine refused,
    /// an owner's vacate).
    #[serde(default)]
    pub starts: u32,
    /// How many times its master was vacated by a machine's owner.
    #[serde(default)]
    pub evictions: u32,
    /// How many checkpoints its masters left.
    #[serde(default)]
    pub checkpoints: u32,
    /// The highest peak memory of its processes that exited, KiB, as their
    /// cgroups measured it (HTCondor's `ResidentSetSize`; `MemoryUsage` is
    /// it in MiB, rounded up); 0: not measured.
    #[serde(default)]
    pub memory_peak_kib: u64,
}

/// One class of a job, for `carmi q`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassStatus {
    /// Class name.
    pub name: String,
    /// Its requirements expression.
    pub requirements: String,
    /// Its rank expression, if it has one (absent from older global RMs).
    #[serde(default)]
    pub rank: Option<String>,
    /// Hosts the job holds for it.
    pub held: u32,
    /// Fewest the job starts with (0 for a class defined at run time).
    pub min: u32,
    /// Most it grows to (0 for a class defined at run time: only `AddHosts` counts).
    pub max: u32,
}

/// Why a class of a job is not (fully) satisfied: every online slot counted
/// once, in the first of these categories that applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassAnalysis {
    /// The class, with held/min/max.
    pub class: ClassStatus,
    /// Online slots in the pool.
    pub slots: u32,
    /// Slots whose machine the class's requirements reject.
    pub rejected_by_class: u32,
    /// Slots whose machine's own `Requirements` reject the job.
    pub rejecting_job: u32,
    /// Matching slots held by this job (any class).
    pub held_by_job: u32,
    /// Matching slots claimed by other jobs.
    pub claimed_by_others: u32,
    /// Of those, slots above their job's minimum, which this job's start may take back.
    pub preemptible: u32,
    /// Matching slots taken by their owners (suspended or vacated).
    pub owner: u32,
    /// Matching slots idle now.
    pub idle: u32,
    /// For the first few machines whose owners hold matching slots, why:
    /// `(machine, "START is false: KeyboardIdle > 15 * Minute (KeyboardIdle = 32)")`.
    #[serde(default)]
    pub owner_reasons: Vec<(String, String)>,
}

/// A job's classes explained, for `carmi q -analyze`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobAnalysis {
    /// The job.
    pub job: JobStatus,
    /// Jobs ahead of it in the queue (0 unless waiting).
    pub queued_ahead: u32,
    /// One entry per class.
    pub classes: Vec<ClassAnalysis>,
}

/// One machine of the pool, for `carmi status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineStatus {
    /// Machine name.
    pub name: String,
    /// Main attributes (Arch, OpSys, Memory, Cpus, Mips, KFlops, LoadAvg)
    /// as ClassAd text. Shared: the global RM answers a whole pool's status
    /// without copying every machine's attributes (on the wire, a list).
    pub attributes: Arc<[(String, String)]>,
    /// One entry per slot.
    pub slots: Vec<SlotStatus>,
}

/// One slot, for `carmi status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotStatus {
    /// Its host id.
    pub host: HostId,
    /// `idle`, `claimed`, `suspended` or `owner`: a constant where the
    /// global RM makes it, so that 200,000 slots cost no allocation each.
    pub state: Cow<'static, str>,
    /// The job holding it, if any.
    pub job: Option<JobId>,
}
