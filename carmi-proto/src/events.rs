//! A submitted job's event log (`carmi events`, the submit file's `log =`):
//! what happened to the job, in order, one event a line.
//!
//! # Line format
//! `TIME job ID #SEQ KIND FIELDS...`, for example
//! `2026-11-25T13:45:02Z job 3 #4 host-added h4 lab-pc-07`: `TIME` is UTC
//! (RFC 3339, seconds), `SEQ` counts the job's events from 1 (a gap means
//! events were dropped beyond the per-job bound), `KIND` is one word, and
//! the fields follow, with free text (a reason) always last so that a
//! program can split the line on spaces. A line never holds a newline.
//! The kinds and their fields are listed at [`EventKind`]; `docs/events.md`
//! describes the same for users.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{HostId, JobId};
use crate::outcome::{ExitStatus, JobEnd};

/// One event of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    /// The job.
    pub job: JobId,
    /// Its number among the job's events, from 1.
    pub seq: u64,
    /// Wall-clock time at the global RM, seconds since the Unix epoch.
    pub unix: u64,
    /// What happened.
    pub kind: EventKind,
}

/// What happened to a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// `submitted OWNER`: the global RM queued it.
    Submitted {
        /// Who submitted it.
        owner: String,
    },
    /// `master-started MACHINE`: its master runs (the local RM said so).
    MasterStarted {
        /// Where.
        machine: String,
    },
    /// `master-lost MACHINE`: the machine running its master was lost; the
    /// global RM starts a new master (`master-started` follows), as the
    /// master was not pinned to a machine.
    MasterLost {
        /// Where it ran.
        machine: String,
    },
    /// `host-added HOST MACHINE`.
    HostAdded {
        /// The host.
        host: HostId,
        /// Its machine.
        machine: String,
    },
    /// `host-suspended HOST MACHINE`: the owner came back.
    HostSuspended {
        /// The host.
        host: HostId,
        /// Its machine.
        machine: String,
    },
    /// `host-resumed HOST MACHINE`.
    HostResumed {
        /// The host.
        host: HostId,
        /// Its machine.
        machine: String,
    },
    /// `host-lost HOST MACHINE REASON`: the host left the job (vacated by
    /// its owner, machine lost, given back, taken for another job).
    HostLost {
        /// The host.
        host: HostId,
        /// Its machine.
        machine: String,
        /// Why, for people.
        reason: String,
    },
    /// `held REASON` (`carmi hold`): its hosts went back, its processes were killed.
    Held {
        /// Why.
        reason: String,
    },
    /// `released` (`carmi release`): it waits again at its old place.
    Released,
    /// `checkpoint FILES BYTES`: its master left a checkpoint (it exited
    /// with its `checkpoint_exit_code`, or was vacated with output
    /// transferred on eviction); the pool keeps it for its next start.
    Checkpointed {
        /// How many files.
        files: u32,
        /// Their bytes.
        bytes: u64,
    },
    /// `requeued MACHINE REASON`: its master could not start on MACHINE for
    /// a reason of the machine (owner policy, no slot user, staging), or
    /// the machine's owner vacated it; the job waits again at its old place
    /// in the queue and starts anew, elsewhere when it can (HTCondor's job
    /// going back to idle).
    Requeued {
        /// Where the master was to start, or ran.
        machine: String,
        /// Why, for people.
        reason: String,
    },
    /// `ended exit CODE` | `ended signal N` | `ended host-lost` |
    /// `ended failed-to-start REASON` | `ended removed` |
    /// `ended removed by periodic_remove: EXPR` | `ended detached`.
    Ended {
        /// How.
        end: JobEnd,
    },
}

impl EventKind {
    /// The word naming the kind in a line.
    pub fn word(&self) -> &'static str {
        match self {
            EventKind::Submitted { .. } => "submitted",
            EventKind::MasterStarted { .. } => "master-started",
            EventKind::MasterLost { .. } => "master-lost",
            EventKind::HostAdded { .. } => "host-added",
            EventKind::HostSuspended { .. } => "host-suspended",
            EventKind::HostResumed { .. } => "host-resumed",
            EventKind::HostLost { .. } => "host-lost",
            EventKind::Held { .. } => "held",
            EventKind::Released => "released",
            EventKind::Requeued { .. } => "requeued",
            EventKind::Checkpointed { .. } => "checkpoint",
            EventKind::Ended { .. } => "ended",
        }
    }
}

/// Text on one line: control characters (a newline in a reason) become spaces.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())?;
        match self {
            EventKind::Submitted { owner } => write!(f, " {}", one_line(owner)),
            EventKind::MasterStarted { machine } | EventKind::MasterLost { machine } => {
                write!(f, " {}", one_line(machine))
            }
            EventKind::HostAdded { host, machine }
            | EventKind::HostSuspended { host, machine }
            | EventKind::HostResumed { host, machine } => {
                write!(f, " {host} {}", one_line(machine))
            }
            EventKind::HostLost {
                host,
                machine,
                reason,
            } => write!(f, " {host} {} {}", one_line(machine), one_line(reason)),
            EventKind::Held { reason } => write!(f, " {}", one_line(reason)),
            EventKind::Released => Ok(()),
            EventKind::Checkpointed { files, bytes } => write!(f, " {files} {bytes}"),
            EventKind::Requeued { machine, reason } => {
                write!(f, " {} {}", one_line(machine), one_line(reason))
            }
            EventKind::Ended { end } => match end {
                JobEnd::Completed(ExitStatus::Code(c)) => write!(f, " exit {c}"),
                JobEnd::Completed(ExitStatus::Signal(s)) => write!(f, " signal {s}"),
                JobEnd::Completed(ExitStatus::HostLost) => write!(f, " host-lost"),
                JobEnd::Completed(ExitStatus::FailedToStart(r)) | JobEnd::FailedToStart(r) => {
                    write!(f, " failed-to-start {}", one_line(r))
                }
                JobEnd::Removed => write!(f, " removed"),
                JobEnd::RemovedByPolicy(why) => write!(f, " {}", one_line(why)),
                JobEnd::Detached => write!(f, " detached"),
            },
        }
    }
}

impl fmt::Display for JobEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} job {} #{} {}",
            rfc3339(self.unix),
            self.job.0,
            self.seq,
            self.kind
        )
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC) of a Unix time.
pub fn rfc3339(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// The job id and event number of a line of the format above, or `None`
/// for a line that is not one (a log file may hold other text): what lets
/// `carmi wait` append to a log only the events it does not hold yet.
pub fn parse_line_key(line: &str) -> Option<(JobId, u64)> {
    let mut words = line.split(' ');
    let _time = words.next()?;
    if words.next()? != "job" {
        return None;
    }
    let job = words.next()?.parse().ok()?;
    let seq = words.next()?.strip_prefix('#')?.parse().ok()?;
    Some((JobId(job), seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, kind: EventKind) -> JobEvent {
        JobEvent {
            job: JobId(3),
            seq,
            unix: 1_795_614_302,
            kind,
        }
    }

    #[test]
    fn lines_read_as_documented() {
        let e = event(
            4,
            EventKind::HostAdded {
                host: HostId(4),
                machine: "lab-pc-07".into(),
            },
        );
        assert_eq!(
            e.to_string(),
            "2026-11-25T13:45:02Z job 3 #4 host-added h4 lab-pc-07"
        );
        assert_eq!(parse_line_key(&e.to_string()), Some((JobId(3), 4)));
        let end = event(
            9,
            EventKind::Ended {
                end: JobEnd::Completed(ExitStatus::Code(3)),
            },
        );
        assert!(end.to_string().ends_with("job 3 #9 ended exit 3"));
    }

    #[test]
    fn a_reason_never_breaks_the_line() {
        let e = event(
            2,
            EventKind::Held {
                reason: "two\nlines\r".into(),
            },
        );
        assert_eq!(e.to_string().lines().count(), 1);
        assert!(e.to_string().ends_with("held two lines "));
    }

    #[test]
    fn other_text_is_no_event() {
        assert_eq!(parse_line_key("hello world"), None);
        assert_eq!(
            parse_line_key("2026-11-25T13:45:02Z job x #1 released"),
            None
        );
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
