//! Held jobs (`carmi hold` / `carmi release`, as HTCondor's condor_hold and
//! condor_release): a held job gives back every host it holds and drops its
//! requests, but keeps its submit sequence number, so that once released it
//! waits again at the place it had in the queue. It restarts from scratch,
//! as after a vacate: its classes are those of its submit file again (a
//! `DelHosts` that lowered a maximum, or a class defined at run time, is
//! forgotten), since its new master knows nothing of the old one's changes.

use carmi_proto::ids::JobId;
use carmi_proto::msg::{Failure, FailureCode};

use super::jobs::parse_classes;
use super::{Allocator, ClassLimits, Phase, ReleaseCause};

impl Allocator {
    /// Holds a submitted job, waiting or running: its hosts go back to the
    /// pool ([`super::Effect::Released`] with [`ReleaseCause::Held`]; the
    /// driver kills its processes) and it is not considered until
    /// [`Allocator::release_job`]. Fails, changing nothing, for an unknown
    /// job, a job started by hand (no submit file to start it again from),
    /// or one held already.
    pub fn hold_job(&mut self, job: JobId) -> Result<(), Failure> {
        let fail = |message| {
            Err(Failure {
                code: FailureCode::Invalid,
                message,
            })
        };
        let Some(j) = self.jobs.get(&job) else {
            return fail(format!(
                "job {} is not in the queue (it ended or never existed)",
                job.0
            ));
        };
        let seq = j.seq;
        match j.phase {
            Phase::Held => return fail(format!("job {} is held already", job.0)),
            Phase::Attached => {
                return fail(format!(
                    "job {} was started by hand, not submitted: there is no submit file to start it again from",
                    job.0
                ));
            }
            Phase::Waiting => self.drop_waiting(job, seq),
            Phase::Running { .. } => {
                self.give_back_limits(job);
                self.running.remove(&job);
            }
        }
        let (freed, suspended) = self.strip_job(job, ReleaseCause::Held);
        let j = self.jobs.get_mut(&job).expect("checked above");
        j.phase = Phase::Held;
        self.out.requests_ended += j.retain_subs(|_| false);
        self.give_back(freed, suspended);
        self.dirty = true;
        Ok(())
    }

    /// Releases a held job: it waits again at its old place in the queue,
    /// with the classes of its submit file (`classes`), and starts when its
    /// minimums can be met. Fails, changing nothing, when the job is not
    /// held or its classes do not parse.
    pub fn release_job(&mut self, job: JobId, classes: &[ClassLimits]) -> Result<(), Failure> {
        let fail = |message| {
            Err(Failure {
                code: FailureCode::Invalid,
                message,
            })
        };
        match self.jobs.get(&job).map(|j| j.phase) {
            None => {
                return fail(format!(
                    "job {} is not in the queue (it ended or never existed)",
                    job.0
                ));
            }
            Some(Phase::Held) => {}
            Some(p) => return fail(format!("job {} is not held (it is {})", job.0, p.name())),
        }
        let (parsed, limits, ranks) = parse_classes(classes)?;
        let j = self.jobs.get_mut(&job).expect("checked above");
        j.classes = parsed;
        j.limits = limits;
        j.ranks = ranks;
        self.pool_changed();
        // `enqueue` files it under its own (old) sequence number.
        self.enqueue(job);
        self.dirty = true;
        Ok(())
    }

    /// True when `job` is held.
    pub fn is_held(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|j| j.phase == Phase::Held)
    }
}
