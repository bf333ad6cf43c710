//! What admins read back of jobs: the history of jobs that left the queue
//! (`carmi history`), each job's event log (`carmi events`), and reads of a
//! running master's output waiting for its local RM (`carmi logs`).

pub(super) mod events;
pub(super) mod history;
pub(super) mod logs;

/// What admins read back (see the module documentation).
#[derive(Default)]
pub(super) struct Reports {
    /// Jobs that left the queue, for `carmi history`.
    pub history: history::History,
    /// Submitted jobs' event logs, for `carmi events`.
    pub events: events::EventLogs,
    /// `carmi logs` reads waiting for a local RM.
    pub log_reads: logs::LogReads,
}
