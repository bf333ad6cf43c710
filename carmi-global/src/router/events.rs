//! Submitted jobs' event logs (`carmi events`, the submit file's `log =`):
//! what happened to each job, in order, kept while it is queued and, after
//! it ended, for the last [`ENDED_LOGS`] jobs. Bounded per job
//! ([`EVENTS_PER_JOB`]: the oldest go first, numbers keep counting, so a
//! reader sees the gap) and in total, so neither a job that gains and loses
//! hosts all day nor a long history grows the global RM's memory.
//!
//! The logs are kept in memory only: a restarted global RM starts each
//! recovered job's log afresh (the lines a reader wrote to the job's `log =`
//! file before stay there). See `docs/events.md`.

use std::collections::{HashMap, VecDeque};

use carmi_api::events::{EventKind, JobEvent};
use carmi_api::ids::JobId;
use carmi_api::msg::{Failure, FailureCode, FromGlobal};

use super::{LinkId, Router};
use crate::alloc::{HostChangeKind, ReleaseCause};

/// Most events kept per job: a job's first hours, or its last ones.
pub const EVENTS_PER_JOB: usize = 256;

/// Ended jobs whose events are kept (the last ones to end).
pub const ENDED_LOGS: usize = 1_000;

/// One job's events.
#[derive(Debug, Default)]
struct JobLog {
    /// The last event's number (events are numbered from 1).
    last: u64,
    /// The submit file's `log =`, for the clients that write it.
    path: Option<String>,
    events: VecDeque<JobEvent>,
}

/// Every job's events.
#[derive(Debug, Default)]
pub(super) struct EventLogs {
    live: HashMap<JobId, JobLog>,
    ended: HashMap<JobId, JobLog>,
    /// Ended jobs in the order they ended, to forget the oldest.
    ended_order: VecDeque<JobId>,
}

impl EventLogs {
    /// Starts `job`'s log (a job submitted, or recovered from the journal).
    pub(super) fn open(&mut self, job: JobId, path: Option<String>) {
        self.live.entry(job).or_default().path = path;
    }

    /// Appends an event to a live job's log; nothing for a job without one
    /// (started by hand, or ended).
    fn push(&mut self, job: JobId, unix: u64, kind: EventKind) {
        let Some(log) = self.live.get_mut(&job) else {
            return;
        };
        log.last += 1;
        if log.events.len() == EVENTS_PER_JOB {
            log.events.pop_front();
        }
        log.events.push_back(JobEvent {
            job,
            seq: log.last,
            unix,
            kind,
        });
    }

    /// The job ended: its log is kept among the last [`ENDED_LOGS`].
    fn close(&mut self, job: JobId) {
        let Some(log) = self.live.remove(&job) else {
            return;
        };
        if self.ended_order.len() == ENDED_LOGS
            && let Some(old) = self.ended_order.pop_front()
        {
            self.ended.remove(&old);
        }
        self.ended.insert(job, log);
        self.ended_order.push_back(job);
    }

    /// `job`'s events numbered above `after`, and whether it ended; `None`
    /// when no log of it is kept.
    fn select(&self, job: JobId, after: u64) -> Option<(Vec<JobEvent>, bool, Option<String>)> {
        let (log, ended) = match self.live.get(&job) {
            Some(l) => (l, false),
            None => (self.ended.get(&job)?, true),
        };
        let events = log
            .events
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect();
        Some((events, ended, log.path.clone()))
    }
}

impl Router {
    /// Wall-clock time now, as the history records it.
    fn unix_now(&self) -> u64 {
        self.config.started_unix + self.now.as_secs()
    }

    /// Appends an event to `job`'s log (if it has one).
    pub(super) fn log_event(&mut self, job: JobId, kind: EventKind) {
        let unix = self.unix_now();
        self.events.push(job, unix, kind);
    }

    /// The job ended: its log stops growing and is kept for a while.
    pub(super) fn close_event_log(&mut self, job: JobId) {
        self.events.close(job);
    }

    /// Turns the allocator's host changes into events (after its effects).
    pub(super) fn log_host_changes(&mut self) {
        for c in self.alloc.take_host_changes() {
            let Some(machine) = self.alloc.host_machine(c.host).map(str::to_string) else {
                continue;
            };
            let host = c.host;
            let kind = match c.kind {
                HostChangeKind::Added => EventKind::HostAdded { host, machine },
                HostChangeKind::Suspended => EventKind::HostSuspended { host, machine },
                HostChangeKind::Resumed => EventKind::HostResumed { host, machine },
                // The `ended` or `held` event says it for every host at once.
                HostChangeKind::Removed(ReleaseCause::JobEnded | ReleaseCause::Held) => continue,
                HostChangeKind::Removed(cause) => {
                    let reason = cause.reason(&host.to_string());
                    EventKind::HostLost {
                        host,
                        machine,
                        reason,
                    }
                }
            };
            self.log_event(c.job, kind);
        }
    }

    /// `carmi events`.
    pub(super) fn job_events(&mut self, link: LinkId, job: JobId, after: u64) {
        match self.events.select(job, after) {
            Some((events, ended, log)) => self.send(
                link,
                FromGlobal::Events {
                    job,
                    events,
                    ended,
                    log,
                },
            ),
            None => {
                let message = format!(
                    "no events of job {} are kept: it never existed, was started by hand, or ended among more than the last {ENDED_LOGS} jobs",
                    job.0
                );
                let failure = Failure {
                    code: FailureCode::Invalid,
                    message,
                };
                self.send(link, FromGlobal::AdminFailed(failure));
            }
        }
    }
}
