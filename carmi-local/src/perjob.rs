//! How many application connections one job's processes hold open at this
//! local RM at once (issue 38, "bounded by design"): a job holding its
//! credential could otherwise open connections until the application port's
//! `max_connections` is reached, locking every other application and the
//! owner's control connection out. A connection naming a job past its cap is
//! refused inside the handshake, so its client is told why.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use carmi_api::ids::JobId;

/// Default for [`crate::config::Settings::max_connections_per_job`]: an
/// eighth of the application port's connections.
pub const MAX_CONNECTIONS_PER_JOB: usize = 1024;

/// The connections each job holds open, shared by the connection tasks.
#[derive(Clone, Debug)]
pub(crate) struct PerJob {
    open: Arc<Mutex<HashMap<JobId, usize>>>,
    max: usize,
}

/// One connection's place in its job's count, given back when dropped.
#[derive(Debug)]
pub(crate) struct JobSlot {
    per: PerJob,
    job: JobId,
}

impl PerJob {
    /// No connection open, at most `max` per job.
    pub(crate) fn new(max: usize) -> PerJob {
        PerJob {
            open: Default::default(),
            max: max.max(1),
        }
    }

    /// A place for one more connection of `job`, or why there is none.
    pub(crate) fn take(&self, job: JobId) -> Result<JobSlot, String> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(job).or_default();
        if *n >= self.max {
            return Err(format!(
                "job {job} holds {n} connections at this local RM already; at most {} are accepted (max_connections_per_job)",
                self.max
            ));
        }
        *n += 1;
        Ok(JobSlot {
            per: self.clone(),
            job,
        })
    }
}

impl Drop for JobSlot {
    fn drop(&mut self) {
        let mut open = self.per.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.job) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.job);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_gets_its_cap_and_its_places_back() {
        let per = PerJob::new(2);
        let a = per.take(JobId(3)).unwrap();
        let _b = per.take(JobId(3)).unwrap();
        let e = per.take(JobId(3)).unwrap_err();
        assert!(
            e.contains("max_connections_per_job") && e.contains("at most 2"),
            "{e}"
        );
        let _other = per.take(JobId(4)).expect("another job is not held back");
        drop(a);
        let _c = per.take(JobId(3)).expect("a place given back");
    }
}
