//! Submitted jobs' event logs (`carmi events`, the submit file's `log =`):
//! what happened to each job, in order, kept while it is queued and, after
//! it ended, for the last [`ENDED_LOGS`] jobs. Bounded per job
//! ([`EVENTS_PER_JOB`]: the oldest go first, numbers keep counting, so a
//! reader sees the gap) and in total, so neither a job that gains and loses
//! hosts all day nor a long history grows the global RM's memory.
//!
//! The events of one input are journaled together, in one
//! [`Record::Events`] right after the input's other records (one more
//! record per input that changed a job, not one per event), so a restarted global RM
//! keeps every job's log and goes on numbering where it was: a reader that
//! wrote events 1 to 5 to a `log =` file appends event 6 next. See
//! `docs/events.md`.

use std::collections::{HashMap, VecDeque};

use carmi_proto::events::{EventKind, JobEvent};
use carmi_proto::ids::JobId;
use carmi_proto::msg::{Failure, FailureCode, FromGlobal};

use crate::alloc::{HostChangeKind, ReleaseCause};
use crate::bounds::{ENDED_LOGS, EVENTS_PER_JOB};
use crate::journal::Record;
use crate::router::{LinkId, Output, Router};

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
pub(in crate::router) struct EventLogs {
    live: HashMap<JobId, JobLog>,
    ended: HashMap<JobId, JobLog>,
    /// Ended jobs in the order they ended, to forget the oldest.
    ended_order: VecDeque<JobId>,
    /// Events of the current input, to journal at its end.
    unjournaled: Vec<JobEvent>,
}

/// Appends `event` to `log`, forgetting the oldest beyond [`EVENTS_PER_JOB`].
fn append(log: &mut JobLog, event: JobEvent) {
    log.last = log.last.max(event.seq);
    if log.events.len() == EVENTS_PER_JOB {
        log.events.pop_front();
    }
    log.events.push_back(event);
}

impl EventLogs {
    /// Starts `job`'s log (a job submitted, or recovered from the journal).
    pub(in crate::router) fn open(&mut self, job: JobId, path: Option<String>) {
        self.live.entry(job).or_default().path = path;
    }

    /// Appends an event to a live job's log; nothing for a job without one
    /// (started by hand, or ended).
    fn push(&mut self, job: JobId, unix: u64, kind: EventKind) {
        let Some(log) = self.live.get_mut(&job) else {
            return;
        };
        let event = JobEvent {
            job,
            seq: log.last + 1,
            unix,
            kind,
        };
        self.unjournaled.push(event.clone());
        append(log, event);
    }

    /// The record of the events of the input just handled, if any.
    pub(in crate::router) fn journal_record(&mut self) -> Option<Record> {
        (!self.unjournaled.is_empty())
            .then(|| Record::Events(std::mem::take(&mut self.unjournaled)))
    }

    /// Replays an event from the journal: into its job's live log, else
    /// into its ended log (a job that ended before the restart).
    pub(in crate::router) fn restore(&mut self, event: JobEvent) {
        let job = event.job;
        if let Some(log) = self.live.get_mut(&job) {
            return append(log, event);
        }
        if !self.ended.contains_key(&job) {
            self.live.insert(job, JobLog::default());
            self.close(job);
        }
        if let Some(log) = self.ended.get_mut(&job) {
            append(log, event);
        }
    }

    /// The job ended: its log is kept among the last [`ENDED_LOGS`].
    pub(in crate::router) fn close(&mut self, job: JobId) {
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
    pub(in crate::router) fn log_event(&mut self, job: JobId, kind: EventKind) {
        let unix = self.unix_now();
        self.reports.events.push(job, unix, kind);
    }

    /// Journals the events of the input just handled (called as its
    /// outputs are taken): right after the input's last other record, so
    /// that each event's job is known to a replay before its events are,
    /// and so that a driver writing adjacent records together adds no disk
    /// write for them; at the end when the input wrote no other record.
    pub(in crate::router) fn journal_events(&mut self) {
        if let Some(record) = self.reports.events.journal_record() {
            let at = self
                .out
                .iter()
                .rposition(|o| matches!(o, Output::Journal(_)))
                .map_or(self.out.len(), |i| i + 1);
            self.out.insert(at, Output::Journal(record));
        }
    }

    /// The job ended: its log stops growing and is kept for a while.
    pub(in crate::router) fn close_event_log(&mut self, job: JobId) {
        self.reports.events.close(job);
    }

    /// Turns the allocator's host changes (taken with its effects) into events.
    pub(in crate::router) fn log_host_changes(&mut self, changes: Vec<crate::alloc::HostChange>) {
        for c in changes {
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

    /// Journals a host given to or taken from a job, so that a restart
    /// gives the job back what it held (issue 15 item 3). A job's end or hold
    /// frees every host with its own record.
    pub(in crate::router) fn journal_host_change(&mut self, c: &crate::alloc::HostChange) {
        let record = match c.kind {
            HostChangeKind::Added => {
                // Gone again within the same input: its `Freed` follows.
                let Some(class) = self.alloc.host_class(c.job, c.host) else {
                    return;
                };
                Record::Claimed {
                    job: c.job,
                    host: c.host,
                    class,
                }
            }
            HostChangeKind::Removed(ReleaseCause::JobEnded | ReleaseCause::Held) => return,
            HostChangeKind::Removed(_) => Record::Freed {
                job: c.job,
                host: c.host,
            },
            HostChangeKind::Suspended | HostChangeKind::Resumed => return,
        };
        self.out.push(Output::Journal(record));
    }

    /// `carmi events`.
    pub(in crate::router) fn job_events(&mut self, link: LinkId, job: JobId, after: u64) {
        match self.reports.events.select(job, after) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Live;

    fn released(logs: &mut EventLogs, job: u64) {
        logs.push(JobId(job), 0, EventKind::Released);
    }

    #[test]
    fn a_jobs_log_keeps_its_last_events_and_numbers_on() {
        let mut logs = EventLogs::default();
        logs.open(JobId(1), None);
        for _ in 0..EVENTS_PER_JOB + 44 {
            released(&mut logs, 1);
        }
        let (events, ended, _) = logs.select(JobId(1), 0).unwrap();
        assert!(!ended);
        assert_eq!(events.len(), EVENTS_PER_JOB);
        assert_eq!(events[0].seq, 45);
        assert_eq!(events.last().unwrap().seq, EVENTS_PER_JOB as u64 + 44);
        // The journal's live state keeps as many, for a compaction.
        let record = logs.journal_record().unwrap();
        let submitted = Record::Attached {
            job: JobId(1),
            machine: "m".into(),
            root: carmi_proto::ids::ProcessId(1),
            owner: None,
        };
        let live = Live::of(&[submitted, record]);
        let kept: usize = live
            .records()
            .iter()
            .map(|r| match r {
                Record::Events(e) => e.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(kept, EVENTS_PER_JOB);
    }

    #[test]
    fn only_the_last_ended_jobs_logs_are_kept() {
        let mut logs = EventLogs::default();
        for job in 1..=ENDED_LOGS as u64 + 1 {
            logs.open(JobId(job), None);
            released(&mut logs, job);
            logs.close(JobId(job));
        }
        assert!(logs.select(JobId(1), 0).is_none());
        let (events, ended, _) = logs.select(JobId(2), 0).unwrap();
        assert!(ended && events.len() == 1);
        // Nothing is logged for a job that has no log (ended, or by hand).
        released(&mut logs, 2);
        assert_eq!(logs.select(JobId(2), 0).unwrap().0.len(), 1);
        let record = logs.journal_record().unwrap();
        let live = Live::of(&[record]);
        let ended_logs = live
            .records()
            .iter()
            .filter(|r| matches!(r, Record::Events(_)))
            .count();
        assert_eq!(ended_logs, ENDED_LOGS);
    }
}
