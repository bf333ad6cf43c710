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
    /// Removed by its own `periodic_remove` expression: which one (as
    /// `removed by periodic_remove: EXPR`).
    RemovedByPolicy(String),
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

/// Who is to blame when a process could not be started: decides whether a
/// job whose master failed to start is put back in the queue as it is
/// (the machine's fault: it will do better elsewhere or later) or counted
/// toward `max_start_failures` (the job's own: its executable does not run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFault {
    /// The machine: its owner policy, no slot user free, a staging failure,
    /// a local RM stopping, the process killed before it started.
    Machine,
    /// The job: `exec` refused its executable (not executable, wrong format,
    /// a missing interpreter).
    Job,
}

/// The words that begin a local RM's reason when `exec` refused a job's
/// executable ([`exec_failure`]); every other start failure is the machine's.
const EXEC_FAILED: &str = "cannot execute ";

/// The reason a local RM gives when `exec` refused `name` (`error` is the
/// system's word for it): written by the local RM, read back by
/// [`start_fault`] at the global RM, so both name one form.
pub fn exec_failure(name: &str, error: &dyn std::fmt::Display) -> String {
    format!("{EXEC_FAILED}{name}: {error}")
}

/// Whose fault a start failure with this reason (a `Started` error) is.
pub fn start_fault(reason: &str) -> StartFault {
    if reason.starts_with(EXEC_FAILED) {
        StartFault::Job
    } else {
        StartFault::Machine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_exec_refusal_is_the_jobs_fault() {
        let io = std::io::Error::from_raw_os_error(8);
        assert_eq!(
            start_fault(&exec_failure("master.sh", &io)),
            StartFault::Job
        );
        for machine in [
            "the machine's owner policy does not let new processes start now",
            "no slot user is free for job j2: all 0 serve other jobs",
            "killed before it started",
            "cannot prepare sandbox /x: No space left on device",
        ] {
            assert_eq!(start_fault(machine), StartFault::Machine, "{machine}");
        }
    }
}
