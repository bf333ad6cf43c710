//! The job ad a job's policy expressions (`periodic_*`, `on_exit_*`,
//! `policy.rs`) are evaluated against, under HTCondor's attribute names, so
//! that an HTCondor user's expressions read what they read there. Where each
//! attribute comes from:
//! - the submit file's job attributes (`RequestMemory`, `+Name = value`,
//!   the policy expressions themselves), parsed once when the job is
//!   indexed ([`base_ad`]);
//! - `Owner`, `QDate` (the submit time), `Cmd` (the executable's name),
//!   `ClusterId` (the cluster's id), `ProcId` (the proc in it), `JobUniverse` (5, vanilla):
//!   the job's `Submitted` record, once;
//! - `JobStatus` with HTCondor's numbers (1 idle: waiting for its
//!   minimums; 2 running: started; 5 held), `EnteredCurrentStatus`,
//!   `NumHolds`, `RemoteWallClockTime` and `CommittedTime` (the seconds its
//!   masters ran, both the same here: a run is not committed apart from
//!   the rest), `JobCurrentStartDate`: what the router saw of the job's
//!   phases ([`Seen`]), at the policy's evaluations and at its own decisions,
//!   so a change the policy did not make is dated at the evaluation that
//!   noticed it (at most one interval late);
//! - `NumJobStarts`/`JobRunCount`: its masters sent to a machine
//!   (`requeue.rs`'s `Tries`, counted anew by a restarted global RM);
//! - `MemoryUsage` (MiB, rounded up) and `ResidentSetSize` (KiB): the
//!   highest peak of its processes that exited (`enforce.rs`);
//! - `HoldReason` while held, `HoldReasonCode` 3 (`JobPolicy`) and
//!   `HoldReasonSubCode` when its own policy held it;
//! - `ExitCode`, `ExitBySignal`, `ExitSignal`: its master's last exit;
//! - `CurrentTime`, and `time()`: the router's wall clock (its driver's
//!   start time plus its monotonic clock), never the system's.

use carmi_proto::ids::JobId;
use carmi_proto::msg::ExitStatus;
use classad::{ClassAd, Value};

use super::Submitted;

/// HTCondor's `JobStatus` of a job waiting for its minimums (`Idle`).
pub const IDLE: i64 = 1;
/// HTCondor's `JobStatus` of a started job (`Running`).
pub const RUNNING: i64 = 2;
/// HTCondor's `JobStatus` of a held job (`Held`).
pub const HELD: i64 = 5;
/// HTCondor's `HoldReasonCode` of a job held by its own policy
/// (`periodic_hold`, `on_exit_hold`): `JobPolicy`.
pub const HOLD_BY_POLICY: i64 = 3;

/// What the router learned of a job over its life that its `Submitted`
/// record does not keep, for its ad. In memory only: after a restart of the
/// global RM a job's status is dated from the first evaluation.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its `JobStatus` when last looked at.
    pub status: i64,
    /// Since when (Unix seconds): `EnteredCurrentStatus`.
    pub since_unix: u64,
    /// Times it was seen going into `Held`: `NumHolds`.
    pub holds: u32,
    /// Seconds its earlier masters ran.
    pub wall_before: u64,
    /// How its master last ended.
    pub exit: Option<ExitStatus>,
    /// `HoldReasonCode` and `HoldReasonSubCode` while its own policy holds it.
    pub hold_code: Option<(i64, i64)>,
}

impl Seen {
    /// A job just submitted (or replayed), waiting since `qdate`.
    pub fn new(qdate: u64) -> Seen {
        Seen {
            status: IDLE,
            since_unix: qdate,
            holds: 0,
            wall_before: 0,
            exit: None,
            hold_code: None,
        }
    }

    /// The job is in `status` at `now_unix`; `started_unix` is when its
    /// current (or last) master was sent to its machine. A run that ends
    /// adds its seconds to the job's wall time.
    pub fn note(&mut self, status: i64, now_unix: u64, started_unix: u64) {
        if status == self.status {
            return;
        }
        if self.status == RUNNING {
            self.wall_before += now_unix.saturating_sub(self.since_unix);
        }
        if status == HELD {
            self.holds += 1;
        } else {
            self.hold_code = None;
        }
        // A start noticed late is dated from when its master went out.
        self.since_unix = if status == RUNNING && started_unix >= self.since_unix {
            started_unix.min(now_unix)
        } else {
            now_unix
        };
        self.status = status;
    }

    /// Seconds the job's masters ran, the current one's so far included.
    pub fn wall(&self, now_unix: u64) -> u64 {
        let current = if self.status == RUNNING {
            now_unix.saturating_sub(self.since_unix)
        } else {
            0
        };
        self.wall_before + current
    }
}

fn int(v: u64) -> Value {
    Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

/// The part of `job`'s ad that does not change while it is queued: its
/// submit file's attributes (one that does not parse is left out, as the
/// allocator leaves it out of the ad machines see), then what the pool
/// sets, which a `+Attr` of the same name does not override.
pub fn base_ad(job: JobId, sub: &Submitted) -> ClassAd {
    let mut ad = ClassAd::with_capacity(sub.spec.attributes.len() + 6);
    for (name, text) in &sub.spec.attributes {
        if let Ok(expr) = classad::parse_expr(text) {
            ad.insert(name, expr);
        }
    }
    ad.insert_value("Owner", Value::str(sub.owner.as_str()));
    ad.insert_value("ClusterId", int(sub.cluster.0));
    ad.insert_value("ProcId", int(job.0.saturating_sub(sub.cluster.0)));
    ad.insert_value("QDate", int(sub.submitted_unix));
    ad.insert_value("JobUniverse", Value::Int(5));
    ad.insert_value("Cmd", Value::str(sub.executable.name.as_str()));
    ad
}

/// `job`'s whole ad at `now_unix`: `base` (from [`base_ad`]) with what
/// changes (see the module documentation); `held` is its hold reason while
/// held, `memory_peak_kib` the highest peak of its exited processes.
pub fn job_ad(
    base: &ClassAd,
    sub: &Submitted,
    seen: &Seen,
    now_unix: u64,
    memory_peak_kib: u64,
) -> ClassAd {
    let mut ad = base.clone();
    ad.insert_value("JobStatus", Value::Int(seen.status));
    ad.insert_value("EnteredCurrentStatus", int(seen.since_unix));
    ad.insert_value("CurrentTime", int(now_unix));
    let starts = int(u64::from(sub.tries.starts));
    ad.insert_value("NumJobStarts", starts.clone());
    ad.insert_value("JobRunCount", starts);
    ad.insert_value("NumHolds", int(u64::from(seen.holds)));
    let wall = int(seen.wall(now_unix));
    ad.insert_value("RemoteWallClockTime", wall.clone());
    ad.insert_value("CommittedTime", wall);
    if seen.status == RUNNING {
        ad.insert_value("JobCurrentStartDate", int(seen.since_unix));
    }
    if memory_peak_kib > 0 {
        ad.insert_value("ResidentSetSize", int(memory_peak_kib));
        ad.insert_value("MemoryUsage", int(memory_peak_kib.div_ceil(1024)));
    }
    if let Some(reason) = &sub.held {
        ad.insert_value("HoldReason", Value::str(reason.as_str()));
        if let Some((code, subcode)) = seen.hold_code {
            ad.insert_value("HoldReasonCode", Value::Int(code));
            ad.insert_value("HoldReasonSubCode", Value::Int(subcode));
        }
    }
    match &seen.exit {
        Some(ExitStatus::Code(c)) => {
            ad.insert_value("ExitCode", Value::Int(i64::from(*c)));
            ad.insert_value("ExitBySignal", Value::Bool(false));
        }
        Some(ExitStatus::Signal(s)) => {
            ad.insert_value("ExitSignal", Value::Int(i64::from(*s)));
            ad.insert_value("ExitBySignal", Value::Bool(true));
        }
        _ => {}
    }
    ad
}

/// A policy expression's value as HTCondor reads it: a boolean, or a
/// number (true when not zero); anything else (undefined, an error, a
/// string) is no answer.
pub fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Int(i) => Some(*i != 0),
        Value::Real(r) => Some(*r != 0.0),
        _ => None,
    }
}
