//! How many application connections one job's processes hold open at this
//! local RM at once (issue 38, "bounded by design"): a job holding its
//! credential could otherwise open connections until the application port's
//! `max_connections` is reached, locking every other application and the
//! owner's control connection out. A connection naming a job past its cap is
//! refused inside the handshake, so its client is told why.

use carmi_api::capped::{PerHolder, Place};
use carmi_api::ids::JobId;

/// Default for [`crate::config::Settings::max_connections_per_job`]: an
/// eighth of the application port's connections.
pub const MAX_CONNECTIONS_PER_JOB: usize = 1024;

/// The connections each job holds open, shared by the connection tasks.
pub(crate) type PerJob = PerHolder<JobId>;

/// One connection's place in its job's count, given back when dropped.
pub(crate) type JobSlot = Place<JobId>;

/// A count of at most `max` connections per job.
pub(crate) fn per_job(max: usize) -> PerJob {
    PerHolder::new(max, "max_connections_per_job")
}

/// A place for one more connection of `job` at this local RM, or why there is none.
pub(crate) fn take(per: &PerJob, job: JobId) -> Result<JobSlot, String> {
    per.take(job, &format!("job {job}"))
}
