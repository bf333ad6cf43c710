//! How much of the past the global RM remembers: bounds that the router
//! keeps in memory and the journal keeps on disk alike, here so that both
//! read them without depending on each other.

/// Most events kept per job: a job's first hours, or its last ones.
pub const EVENTS_PER_JOB: usize = 256;

/// Ended jobs whose events are kept (the last ones to end).
pub const ENDED_LOGS: usize = 1_000;

/// Ended jobs kept for `carmi history`: enough for a day of a busy pool,
/// bounded so that the history (and its journal records) cannot grow forever.
pub const HISTORY_LIMIT: usize = 10_000;
