//! The owner policy's decisions carried out on the core: one step of the
//! policy at a time, its effects applied to slots and processes, whether new
//! processes may start, and when the policy is stepped next. The daemon and
//! the simulator both step the policy through here, on the schedule kept
//! here ([`Core::policy_due`]), so that neither wires the two together or
//! keeps a policy timer itself.
//!
//! Kept apart from `node.rs` so that each file stays readable.

use classad::ClassAd;

use super::Core;
use crate::policy::{Policy, PolicyEffect};

/// Why the owner policy is due ([`Core::policy_due`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyDue {
    /// The deadline its last step named has come: a driver that measures a
    /// real owner measures it first.
    Deadline,
    /// The number of processes here changed since its last step (a machine
    /// whose last process left is free again, one that got its first is
    /// busy): stepped at once on what the owner was last seen doing.
    JobsChanged,
}

/// When a policy names a deadline that is no time at all (not finite), it is
/// stepped again this many seconds later, the longest interval it uses itself.
const POLICY_FALLBACK_S: f64 = 5.0;

impl Core {
    /// Steps `policy` at `now` against the machine ad `base`: tells it how
    /// many processes are here, carries out its effects (suspend, resume,
    /// open, close, vacate, kill), and lets processes start only while it
    /// says so. Returns when the policy must be stepped next at the latest,
    /// which is also one of [`Core::next_deadline`]'s. The owner's activity
    /// is the caller's to observe first (measured or simulated).
    pub fn step_policy(&mut self, policy: &mut Policy, now: f64, base: &ClassAd) -> f64 {
        self.on_time(now);
        self.policy_jobs = self.job_count();
        policy.set_jobs(self.policy_jobs);
        for effect in policy.step(now, base) {
            self.counters.policy_effects[crate::metrics::effect_index(effect)] += 1;
            match effect {
                PolicyEffect::Open => self.open_all(),
                PolicyEffect::Close => self.close_all(),
                PolicyEffect::Suspend => self.suspend_all(),
                PolicyEffect::Resume => self.resume_all(),
                PolicyEffect::Vacate => self.vacate_all(),
                PolicyEffect::Kill => self.kill_all(),
            }
        }
        self.set_accepting(policy.may_start());
        let next = policy.next_deadline();
        self.time.policy_at = Some(if next.is_finite() {
            next
        } else {
            self.time.now + POLICY_FALLBACK_S
        });
        next
    }

    /// True when the number of processes here changed since the last
    /// [`Core::step_policy`]: the policy must be stepped again (a machine
    /// whose last process left is free again, one that got its first is busy).
    pub fn policy_stale(&self) -> bool {
        self.job_count() != self.policy_jobs
    }

    /// Whether the owner policy must be stepped now ([`Core::step_policy`]),
    /// and why; asked by the driver after every input and deadline, once
    /// their effects are carried out. The time is the last one given to
    /// [`Core::on_time`]; before the policy's first step only a change in
    /// processes makes it due (the driver steps it once at start).
    pub fn policy_due(&self) -> Option<PolicyDue> {
        if self.time.policy_at.is_some_and(|at| at <= self.time.now) {
            Some(PolicyDue::Deadline)
        } else if self.policy_stale() {
            Some(PolicyDue::JobsChanged)
        } else {
            None
        }
    }
}

#[cfg(test)]
#[path = "node_policy_tests.rs"]
mod tests;
