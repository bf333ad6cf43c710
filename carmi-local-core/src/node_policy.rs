//! The owner policy's decisions carried out on the core: one step of the
//! policy at a time, its effects applied to slots and processes, and whether
//! new processes may start. The daemon and the simulator both step the
//! policy through here, so that neither wires the two together itself.
//!
//! Kept apart from `node.rs` so that each file stays readable.

use classad::ClassAd;

use super::Core;
use crate::policy::{Policy, PolicyEffect};

impl Core {
    /// Steps `policy` at `now` against the machine ad `base`: tells it how
    /// many processes are here, carries out its effects (suspend, resume,
    /// open, close, vacate, kill), and lets processes start only while it
    /// says so. Returns when the policy must be stepped next at the latest.
    /// The owner's activity is the caller's to observe first (measured or
    /// simulated).
    pub fn step_policy(&mut self, policy: &mut Policy, now: f64, base: &ClassAd) -> f64 {
        self.on_time(now);
        self.policy_jobs = self.job_count();
        policy.set_jobs(self.policy_jobs);
        for effect in policy.step(now, base) {
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
        policy.next_deadline()
    }

    /// True when the number of processes here changed since the last
    /// [`Core::step_policy`]: the policy must be stepped again (a machine
    /// whose last process left is free again, one that got its first is busy).
    pub fn policy_stale(&self) -> bool {
        self.job_count() != self.policy_jobs
    }
}

#[cfg(test)]
#[path = "node_policy_tests.rs"]
mod tests;
