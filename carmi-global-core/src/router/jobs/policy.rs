//! A job's own policy, as HTCondor users write it in their submit files
//! (`periodic_hold`, `periodic_release`, `periodic_remove`, `on_exit_hold`,
//! `on_exit_remove`, and the reasons and subcodes of their holds): ClassAd
//! expressions in the job's attributes under HTCondor's names
//! (`PeriodicRemove`...), evaluated by the global RM against the job's ad
//! (`job_ad.rs`), with `time()` the router's clock.
//!
//! - Every [`RouterConfig::policy_interval`] (HTCondor's
//!   `PERIODIC_EXPR_INTERVAL`, 60 s there, 2 s by default here), each queued
//!   job with a periodic expression is looked at: `PeriodicRemove` true
//!   removes it (its history says which expression did), else
//!   `PeriodicHold` true holds a job that is not held (its processes are
//!   killed, its hosts go back; the reason is `PeriodicHoldReason` when it
//!   gives a string), else `PeriodicRelease` true releases a held one.
//! - When a job's master exits (a code or a signal; not a lost machine, not
//!   a failed start), `OnExitHold` true holds the job, else `OnExitRemove`
//!   false puts it back in the queue (its next master starts from scratch,
//!   `NumJobStarts` grows) instead of ending it. `OnExitRemove` defaults
//!   to true.
//! - An expression that is undefined, an error or not a boolean or number
//!   counts as false (an undefined `OnExitRemove` as its default, true).
//!
//! Every decision goes through the paths `carmi rm`, `carmi hold`,
//! `carmi release` and a requeued master take, which journal it: a restarted
//! global RM replays the decision, and never evaluates the exit of a master
//! that exited before it again.
//!
//! Only jobs with one of these expressions are indexed here (at submit and
//! at replay); one that left the queue is dropped at the next evaluation.
//!
//! [`RouterConfig::policy_interval`]: crate::router::RouterConfig::policy_interval

use std::collections::BTreeMap;
use std::time::Duration;

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::limits;
use carmi_proto::msg::{ExitStatus, JobEnd};
use classad::{ClassAd, Expr, Value};
use tracing::{info, warn};

use super::job_ad::{self, HELD, HOLD_BY_POLICY, IDLE, RUNNING, Seen, truth};
use super::{Submitted, class_limits, exit_words};
use crate::alloc::Phase;
use crate::journal::Record;
use crate::router::{Output, Router};

/// The job attributes of a policy, by HTCondor's names (matched ignoring
/// case), in the order of [`Kind`].
const ATTRS: [&str; 9] = [
    "PeriodicHold",
    "PeriodicRelease",
    "PeriodicRemove",
    "OnExitHold",
    "OnExitRemove",
    "PeriodicHoldReason",
    "PeriodicHoldSubCode",
    "OnExitHoldReason",
    "OnExitHoldSubCode",
];

/// One expression of a policy (an index into [`ATTRS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    PeriodicHold,
    PeriodicRelease,
    PeriodicRemove,
    OnExitHold,
    OnExitRemove,
    PeriodicHoldReason,
    PeriodicHoldSubCode,
    OnExitHoldReason,
    OnExitHoldSubCode,
}

/// An expression of a job's policy, and its text for the reasons that
/// name it.
#[derive(Clone, Debug)]
struct Check {
    expr: Expr,
    text: String,
}

/// What a job's periodic expressions decided.
#[derive(Clone, Debug, PartialEq)]
enum Periodic {
    Remove(String),
    /// The reason and `HoldReasonSubCode`.
    Hold(String, i64),
    Release(String),
}

/// One job's policy: its expressions, the fixed part of its ad, and what
/// was seen of it.
#[derive(Clone, Debug)]
pub(in crate::router) struct JobPolicy {
    checks: [Option<Check>; 9],
    base: ClassAd,
    seen: Seen,
}

impl JobPolicy {
    /// The policy of `job` (`sub`), or `None` when it has none of the five
    /// deciding expressions. An expression that does not parse is left out
    /// (with a warning): it would evaluate as an error, which is false.
    fn of(job: JobId, sub: &Submitted) -> Option<JobPolicy> {
        let mut checks: [Option<Check>; 9] = Default::default();
        for (name, text) in &sub.spec.attributes {
            let Some(i) = ATTRS.iter().position(|a| a.eq_ignore_ascii_case(name)) else {
                continue;
            };
            match classad::parse_expr(text) {
                Ok(expr) => {
                    let text = text.trim().to_string();
                    checks[i] = Some(Check { expr, text });
                }
                Err(e) => {
                    warn!(job = %job, "{name} = {text}: not a ClassAd expression ({e}); it counts as false")
                }
            }
        }
        checks[..5].iter().any(Option::is_some).then(|| JobPolicy {
            checks,
            base: job_ad::base_ad(job, sub),
            seen: Seen::new(sub.submitted_unix),
        })
    }

    fn check(&self, kind: Kind) -> Option<&Check> {
        self.checks[kind as usize].as_ref()
    }

    fn has_periodic(&self) -> bool {
        [
            Kind::PeriodicHold,
            Kind::PeriodicRelease,
            Kind::PeriodicRemove,
        ]
        .iter()
        .any(|k| self.check(*k).is_some())
    }

    fn eval(&self, kind: Kind, ad: &ClassAd, now_unix: u64) -> Option<Value> {
        let check = self.check(kind)?;
        let now = i64::try_from(now_unix).unwrap_or(i64::MAX);
        Some(ad.eval_expr_at(&check.expr, None, now))
    }

    /// The expression `kind` is true in `ad`: its text, for the reason.
    fn fires(&self, kind: Kind, ad: &ClassAd, now_unix: u64) -> Option<&str> {
        let v = self.eval(kind, ad, now_unix)?;
        if truth(&v) != Some(true) {
            return None;
        }
        self.check(kind).map(|c| c.text.as_str())
    }

    /// A hold's reason (`reason` evaluated to a non-empty string, else
    /// `fallback`) and subcode (`subcode` evaluated to an integer, else 0).
    fn hold_words(
        &self,
        (reason, subcode): (Kind, Kind),
        ad: &ClassAd,
        now_unix: u64,
        fallback: String,
    ) -> (String, i64) {
        let reason = match self.eval(reason, ad, now_unix) {
            Some(Value::Str(s)) if !s.trim().is_empty() => s.to_string(),
            _ => fallback,
        };
        let subcode = match self.eval(subcode, ad, now_unix) {
            Some(Value::Int(i)) => i,
            _ => 0,
        };
        (reason, subcode)
    }

    /// What the periodic expressions decide in `ad`: removing before
    /// holding, so that a job its owner wants gone is not kept held.
    fn periodic(&self, ad: &ClassAd, now_unix: u64) -> Option<Periodic> {
        if let Some(text) = self.fires(Kind::PeriodicRemove, ad, now_unix) {
            return Some(Periodic::Remove(format!(
                "removed by periodic_remove: {text}"
            )));
        }
        if self.seen.status == HELD {
            let text = self.fires(Kind::PeriodicRelease, ad, now_unix)?;
            return Some(Periodic::Release(format!("periodic_release: {text}")));
        }
        let text = self.fires(Kind::PeriodicHold, ad, now_unix)?;
        let kinds = (Kind::PeriodicHoldReason, Kind::PeriodicHoldSubCode);
        let (reason, subcode) =
            self.hold_words(kinds, ad, now_unix, format!("periodic_hold: {text}"));
        Some(Periodic::Hold(reason, subcode))
    }

    /// What the on-exit expressions decide in `ad` about a master that
    /// ended with `status`: held (reason and subcode), put back in the
    /// queue (why), or neither (the job ends).
    fn on_exit(&self, ad: &ClassAd, now_unix: u64, status: &ExitStatus) -> OnExit {
        let ended = exit_words(status);
        if let Some(text) = self.fires(Kind::OnExitHold, ad, now_unix) {
            let kinds = (Kind::OnExitHoldReason, Kind::OnExitHoldSubCode);
            let fallback = format!("on_exit_hold: {text} (the master ended with {ended})");
            let (reason, subcode) = self.hold_words(kinds, ad, now_unix, fallback);
            return OnExit::Hold(reason, subcode);
        }
        let remove = self.eval(Kind::OnExitRemove, ad, now_unix);
        match (
            remove.as_ref().and_then(truth),
            self.check(Kind::OnExitRemove),
        ) {
            (Some(false), Some(c)) => OnExit::Requeue(format!(
                "on_exit_remove = {} is false (the master ended with {ended})",
                c.text
            )),
            _ => OnExit::End,
        }
    }
}

/// What the on-exit expressions decided.
#[derive(Clone, Debug, PartialEq)]
enum OnExit {
    End,
    Hold(String, i64),
    Requeue(String),
}

/// The policies of the queued jobs that have one, and when they are next
/// evaluated.
#[derive(Debug, Default)]
pub(in crate::router) struct Policies {
    jobs: BTreeMap<JobId, JobPolicy>,
    next_check: Duration,
}

impl Router {
    fn unix_at_now(&self) -> u64 {
        self.config.started_unix + self.now.as_secs()
    }

    /// Indexes the policy of `job`, just kept (submitted or replayed), if
    /// it has one.
    pub(in crate::router) fn index_policy(&mut self, job: JobId) {
        let Some(policy) = self
            .jobs
            .submitted
            .get(&job)
            .and_then(|s| JobPolicy::of(job, s))
        else {
            return;
        };
        self.jobs.policies.jobs.insert(job, policy);
    }

    /// When the periodic expressions are next evaluated, while a job has a
    /// policy.
    pub(in crate::router) fn policy_deadline(&self) -> Option<Duration> {
        let p = &self.jobs.policies;
        (!p.jobs.is_empty()).then_some(p.next_check)
    }

    /// `job`'s `JobStatus` now (`None`: not a queued submitted job).
    fn policy_status(&self, job: JobId) -> Option<i64> {
        match self.alloc.job_phase(job)? {
            Phase::Waiting => Some(IDLE),
            Phase::Running { .. } => Some(RUNNING),
            Phase::Held => Some(HELD),
            Phase::Attached => None,
        }
    }

    /// Notes `job`'s status now in its policy's record, if it has one.
    fn note_status(&mut self, job: JobId) -> Option<()> {
        let status = self.policy_status(job)?;
        let now_unix = self.unix_at_now();
        let jobs = &mut self.jobs;
        let sub = jobs.submitted.get(&job)?;
        let p = jobs.policies.jobs.get_mut(&job)?;
        p.seen.note(status, now_unix, sub.started_unix);
        Some(())
    }

    /// [`Router::note_status`], then `job`'s ad at this moment.
    fn observe(&mut self, job: JobId) -> Option<ClassAd> {
        self.note_status(job)?;
        let sub = self.jobs.submitted.get(&job)?;
        let p = self.jobs.policies.jobs.get(&job)?;
        let (now_unix, peak) = (self.unix_at_now(), self.memory_peak(job));
        Some(job_ad::job_ad(&p.base, sub, &p.seen, now_unix, peak))
    }

    /// Evaluates the periodic expressions of every queued job that has
    /// some, when their interval has passed (called at every tick).
    pub(in crate::router) fn policy_tick(&mut self) {
        if self.jobs.policies.jobs.is_empty() || self.now < self.jobs.policies.next_check {
            return;
        }
        self.jobs.policies.next_check = self.now + self.config.policy_interval;
        let submitted = &self.jobs.submitted;
        self.jobs
            .policies
            .jobs
            .retain(|j, _| submitted.contains_key(j));
        let jobs: Vec<JobId> = self.jobs.policies.jobs.keys().copied().collect();
        for job in jobs {
            self.evaluate_periodic(job);
        }
        // A job released starts here when its minimums can be met.
        self.flush();
    }

    fn evaluate_periodic(&mut self, job: JobId) {
        let periodic = self
            .jobs
            .policies
            .jobs
            .get(&job)
            .is_some_and(JobPolicy::has_periodic);
        if !periodic {
            // Its status is still dated, for its on-exit expressions.
            self.note_status(job);
            return;
        }
        let Some(ad) = self.observe(job) else {
            return;
        };
        let now_unix = self.unix_at_now();
        let Some(p) = self.jobs.policies.jobs.get(&job) else {
            return;
        };
        match p.periodic(&ad, now_unix) {
            None => {}
            Some(Periodic::Remove(why)) => {
                info!(job = %job, "{why}");
                self.record_end(job, JobEnd::RemovedByPolicy(limits::cut_reason(&why)));
                self.end_job(job);
            }
            Some(Periodic::Hold(reason, subcode)) => {
                self.hold_by_pool(job, &reason);
                self.policy_held(job, subcode);
            }
            Some(Periodic::Release(why)) => self.release_by_policy(job, &why),
        }
    }

    /// Notes that `job`'s own policy held it (`HoldReasonCode` 3, `subcode`).
    fn policy_held(&mut self, job: JobId, subcode: i64) {
        if self.note_status(job).is_some()
            && let Some(p) = self.jobs.policies.jobs.get_mut(&job)
            && p.seen.status == HELD
        {
            p.seen.hold_code = Some((HOLD_BY_POLICY, subcode));
        }
    }

    /// `periodic_release` released `job` (`why`): it waits again, as after
    /// `carmi release`.
    fn release_by_policy(&mut self, job: JobId, why: &str) {
        let Some(limits) = self.jobs.submitted.get(&job).map(|s| class_limits(&s.spec)) else {
            return;
        };
        if let Err(f) = self.alloc.release_job(job, &limits) {
            warn!(job = %job, "{why}, but the job cannot be released: {}", f.message);
            return;
        }
        info!(job = %job, "job released by {why}");
        self.out.push(Output::Journal(Record::Released { job }));
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.held = None;
        }
        self.log_event(job, EventKind::Released);
        self.note_status(job);
    }

    /// The master `process` of `job` ended with `status`: its on-exit
    /// expressions may keep the job in the queue, held or waiting for its
    /// next master. True when they did (the job does not end).
    pub(in crate::router) fn on_exit_policy(
        &mut self,
        process: ProcessId,
        job: JobId,
        status: &ExitStatus,
    ) -> bool {
        if !matches!(status, ExitStatus::Code(_) | ExitStatus::Signal(_))
            || !self.alloc.has_job(job)
        {
            return false;
        }
        let Some(p) = self.jobs.policies.jobs.get_mut(&job) else {
            return false;
        };
        p.seen.exit = Some(status.clone());
        let Some(ad) = self.observe(job) else {
            return false;
        };
        let Some(p) = self.jobs.policies.jobs.get(&job) else {
            return false;
        };
        let decision = p.on_exit(&ad, self.unix_at_now(), status);
        let machine = match self.jobs.masters.get(&process) {
            Some((_, m)) => m.clone(),
            None => self
                .jobs
                .submitted
                .get(&job)
                .map(|s| s.machine.clone())
                .unwrap_or_default(),
        };
        match decision {
            OnExit::End => return false,
            OnExit::Requeue(why) => {
                info!(job = %job, "{why}: the job goes back to the queue");
                self.requeue(job, process, &machine, why);
                self.note_status(job);
            }
            OnExit::Hold(reason, subcode) => {
                info!(job = %job, reason, "the job is held by its on_exit_hold");
                if self.park(job, process, &reason) {
                    let reason = limits::cut_reason(&reason);
                    self.log_event(job, EventKind::Held { reason });
                }
                self.policy_held(job, subcode);
            }
        }
        true
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
