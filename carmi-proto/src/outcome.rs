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
