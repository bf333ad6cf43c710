//! How processes and jobs end: shared by the messages that report an end
//! ([`crate::msg`]) and by a job's event log ([`crate::events`]), so both
//! name one type and neither depends on the other for it.

use serde::{Deserialize, Serialize};

/// How a process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Could not be started (reason).
    FailedToStart(String),
    /// Its host was lost or vacated.
    HostLost,
}

/// How a job left the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEnd {
    /// Its master (for a job started by hand: its first process) ended this way.
    Completed(ExitStatus),
    /// Its master could not be started: the local RM's reason (the `exec`
    /// error, a staging failure), so that the job does not vanish silently.
    FailedToStart(String),
    /// Removed with `carmi rm`.
    Removed,
    /// Started by hand: its first process disconnected from its local RM.
    Detached,
}

/// What a job asked of each machine it runs on (`request_memory`,
/// `request_cpus` of its submit file), sent with every `Spawn` and
/// `SpawnMaster` so that the local RM binds each process to it (a cgroup's
/// memory limit and CPU weight), as HTCondor binds a job to its requests.
/// `None`: not asked, not bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requests {
    /// `request_memory`, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// `request_cpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
}

impl Requests {
    /// True when nothing is asked.
    pub fn is_empty(&self) -> bool {
        self.memory_mib.is_none() && self.cpus.is_none()
    }
}

/// What an exited process used, as its local RM measured it in the
/// process's cgroup (all zero / `None` where no cgroup was used).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// Peak memory of the process and everything it started, KiB
    /// (HTCondor's `ResidentSetSize`); 0 when not measured.
    #[serde(default)]
    pub memory_peak_kib: u64,
    /// `Some(request_memory)` (MiB) when the process went over it and the
    /// kernel stopped it there: its job is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_exceeded_mib: Option<u64>,
}

impl ProcessUsage {
    /// Peak memory in MiB, rounded up (HTCondor's `MemoryUsage`).
    pub fn memory_peak_mib(&self) -> u64 {
        self.memory_peak_kib.div_ceil(1024)
    }
}
