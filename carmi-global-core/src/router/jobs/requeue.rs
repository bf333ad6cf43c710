//! A submitted job put back in the queue instead of lost: where its master
//! may start (only on a machine whose owner policy lets a process start
//! now), what happens when its start fails (the machine's fault: back to
//! the queue, that machine passed over for a while; the job's own: counted,
//! held after `max_start_failures`), and a master vacated by its machine's
//! owner (back to the queue, never "completed"), as HTCondor sends a job
//! back to idle.
//!
//! Going back to the queue is a hold and a release in one step (journaled
//! as `Held` then `Released`, so a restarted global RM finds it waiting):
//! its hosts go back, its processes are killed, and it waits at its old
//! place until its minimums can be met again, when a new master starts.

use std::time::Duration;

use carmi_proto::events::EventKind;
use carmi_proto::ids::{JobId, ProcessId};
use carmi_proto::limits;
use carmi_proto::msg::{ExitStatus, StartFault, start_fault};
use classad::ClassAd;
use tracing::{info, warn};

use super::{Submitted, class_limits, exit_words};
use crate::journal::Record;
use crate::router::{Output, Router};

/// How long a machine where a job's master could not start, for a reason
/// of the machine, is passed over when that job's master is placed again:
/// the master waits for another machine meanwhile, so that a machine that
/// keeps refusing is not asked again at once, over and over.
pub const AVOID_FOR: Duration = Duration::from_secs(60);

/// `max_start_failures` when the submit file does not say: how many starts
/// may fail for a reason of the job before it is held (HTCondor users hold
/// such jobs by `NumJobStarts` in a `periodic_hold`).
pub const DEFAULT_MAX_START_FAILURES: u32 = 3;

/// What a submitted job's tries to start have been, for placing it again
/// and for `carmi history`. Kept in memory: a restarted global RM counts
/// anew.
#[derive(Clone, Debug, Default)]
pub(in crate::router) struct Tries {
    /// Masters sent to a machine to start.
    pub starts: u32,
    /// Masters vacated by their machine's owner.
    pub evictions: u32,
    /// Starts that failed for a reason of the job itself.
    pub faults: u32,
    /// Machines where a start failed for their own reason, and until when
    /// they are passed over.
    pub avoid: Vec<(String, Duration)>,
    /// Why the job was last put back in the queue, for `carmi q`.
    pub requeued: Option<String>,
    /// Checkpoints saved.
    pub checkpoints: u32,
    /// The last checkpoint, for the next master.
    pub checkpoint: Option<super::checkpoint::Checkpoint>,
    /// While a checkpoint is being saved: the machine and why the job
    /// goes back to the queue once it is.
    pub saving: Option<(String, String)>,
}

impl Tries {
    /// True while `machine` is passed over at `now`.
    pub fn avoids(&self, machine: &str, now: Duration) -> bool {
        self.avoid
            .iter()
            .any(|(m, until)| m == machine && *until > now)
    }
}

/// True when the owner policy of the machine advertising `ad` lets a new
/// process start now, as its local RM will decide: its `Start` is true
/// (against `job`, for a policy that reads the job), and it is neither the
/// owner's (`State == "Owner"`), nor suspended or vacating. A machine that
/// advertises no policy (no `State`, no `Start`) takes anything.
pub(in crate::router) fn may_start(ad: &ClassAd, job: Option<&ClassAd>) -> bool {
    let state = ad.eval_attr("State");
    let state_ok = match state.as_str() {
        None => true,
        Some("Unclaimed") => true,
        Some("Claimed") => ad.eval_attr("Activity").as_str() == Some("Busy"),
        Some(_) => false,
    };
    state_ok
        && ad
            .get("Start")
            .is_none_or(|start| ad.eval_expr(start, job).is_true())
}

impl Router {
    /// True when the master of `sub` may start on `machine` now: it is
    /// online and its owner policy says so.
    pub(in crate::router) fn may_start_master(&self, machine: &str, sub: &Submitted) -> bool {
        self.alloc
            .online_ad(machine)
            .is_some_and(|ad| may_start(ad, sub.master_ad.as_ref()))
    }

    /// True when the master of `sub` may be sent to `machine` now: its
    /// owner policy lets it start, and it is not passed over after a start
    /// that failed there.
    pub(in crate::router) fn may_place(&self, machine: &str, sub: &Submitted) -> bool {
        self.may_start_master(machine, sub) && !sub.tries.avoids(machine, self.now)
    }

    /// The master `process` of `job` could not start on `machine`.
    pub(in crate::router) fn master_start_failed(
        &mut self,
        process: ProcessId,
        job: JobId,
        machine: &str,
        reason: String,
    ) {
        self.exit_process(process, ExitStatus::FailedToStart(reason.clone()), 0.0);
        let now = self.now;
        let Some(sub) = self.jobs.submitted.get_mut(&job) else {
            return;
        };
        match start_fault(&reason) {
            StartFault::Machine => {
                sub.tries.avoid.retain(|(_, until)| *until > now);
                sub.tries.avoid.push((machine.to_string(), now + AVOID_FOR));
                let why = format!("the master could not start on {machine}: {reason}");
                self.requeue(job, process, machine, why);
            }
            StartFault::Job => {
                sub.tries.faults += 1;
                let (faults, max) = (
                    sub.tries.faults,
                    sub.spec
                        .max_start_failures
                        .unwrap_or(DEFAULT_MAX_START_FAILURES),
                );
                if faults >= max {
                    let why = format!(
                        "the master failed to start {faults} times (max_start_failures = {max}); last on {machine}: {reason}"
                    );
                    self.jobs.forget_gone_master(job, process);
                    self.hold_by_pool(job, &why);
                } else {
                    let why = format!(
                        "the master failed to start ({faults} of max_start_failures = {max}) on {machine}: {reason}"
                    );
                    self.requeue(job, process, machine, why);
                }
            }
        }
    }

    /// The master `process` of `job`, vacated by the owner of `machine`,
    /// ended with `status`. One that finished (exit 0) within the vacate
    /// grace completed its job; any other end puts the job back in the queue.
    pub(in crate::router) fn master_evicted(
        &mut self,
        process: ProcessId,
        job: JobId,
        machine: &str,
        status: ExitStatus,
        cpu_seconds: f64,
    ) {
        self.exit_process(process, status.clone(), cpu_seconds);
        if status == ExitStatus::Code(0) {
            return self.master_report(process, job, Err(status));
        }
        if let Some(sub) = self.jobs.submitted.get_mut(&job) {
            sub.tries.evictions += 1;
        }
        let why = format!(
            "vacated by the owner of {machine} (the machine's PREEMPT policy); the master ended with {}",
            exit_words(&status)
        );
        self.requeue(job, process, machine, why);
    }

    /// Puts `job`, whose master `process` is gone from `machine`, back in
    /// the queue at its old place: its hosts go back and its other
    /// processes are killed; a new master starts when its minimums are met.
    pub(in crate::router) fn requeue(
        &mut self,
        job: JobId,
        process: ProcessId,
        machine: &str,
        why: String,
    ) {
        if self.park(job, process, &why) {
            self.unpark(job, machine, why);
        }
    }

    /// Takes `job` out of the running for `why` (its master `process` is
    /// gone): held in the allocator (journaled), its hosts back, its other
    /// processes killed. False when it cannot be held (it is not a
    /// submitted job in the queue).
    pub(in crate::router) fn park(&mut self, job: JobId, process: ProcessId, why: &str) -> bool {
        self.jobs.forget_gone_master(job, process);
        let Some(sub) = self.jobs.submitted.get_mut(&job) else {
            return false;
        };
        // What the gone master sent back is no output of the job's.
        if let Some(sent) = sub.returned.take() {
            self.out.push(Output::DropFiles {
                process: sent.process,
            });
        }
        if let Err(f) = self.alloc.hold_job(job) {
            warn!(job = %job, "cannot put the job back in the queue: {}", f.message);
            return false;
        }
        self.stop_job_processes(job);
        let reason = limits::cut_reason(why);
        self.out.push(Output::Journal(Record::Held {
            job,
            reason: reason.clone(),
        }));
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.held = Some(reason);
        }
        true
    }

    /// Puts a job [`Router::park`]ed back in the queue at its old place,
    /// telling `why` (its master's end on `machine`). One released by a
    /// user meanwhile is only told.
    pub(in crate::router) fn unpark(&mut self, job: JobId, machine: &str, why: String) {
        let why = limits::cut_reason(&why);
        let Some(spec) = self.jobs.submitted.get(&job).map(|s| s.spec.clone()) else {
            return;
        };
        if self.alloc.is_held(job) {
            if let Err(f) = self.alloc.release_job(job, &class_limits(&spec)) {
                // Left held rather than lost: `carmi release` tries again.
                warn!(job = %job, "cannot put the job back in the queue: {}", f.message);
                return self.held_by_pool(job, &format!("{why}; and: {}", f.message));
            }
            self.out.push(Output::Journal(Record::Released { job }));
        }
        info!(job = %job, machine, reason = why, "job put back in the queue");
        if let Some(s) = self.jobs.submitted.get_mut(&job) {
            s.held = None;
            s.tries.requeued = Some(why.clone());
        }
        self.log_event(
            job,
            EventKind::Requeued {
                machine: machine.to_string(),
                reason: why,
            },
        );
    }

    /// The earliest time a machine passed over for a job's master is
    /// eligible again, while a master waits for a machine.
    pub(in crate::router) fn avoid_deadline(&self) -> Option<Duration> {
        if self.jobs.unplaced.is_empty() {
            return None;
        }
        let now = self.now;
        self.jobs
            .unplaced
            .iter()
            .filter_map(|p| self.jobs.masters.get(p))
            .filter_map(|(job, _)| self.jobs.submitted.get(job))
            .flat_map(|s| s.tries.avoid.iter().map(|(_, until)| *until))
            .filter(|until| *until > now)
            .min()
    }
}
