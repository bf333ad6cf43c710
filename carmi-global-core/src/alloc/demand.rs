//! Demand the pool cannot meet: hosts that pending `AddHosts` requests still
//! wait for, minimums of waiting jobs, and room to grow of running ones. The
//! allocation queues (`crate::alloc_queue`) grow the pool with pilots for it.

use carmi_proto::ids::JobId;
use classad::ClassAd;

use super::{Allocator, Phase};

/// Hosts one class of one job wants and the pool does not give it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmet {
    /// The job.
    pub job: JobId,
    /// The class.
    pub class: String,
    /// How many hosts.
    pub hosts: u32,
}

impl Allocator {
    /// What jobs want beyond what they hold: the unclaimed rest of every
    /// pending `AddHosts` (no idle slot matches those: the allocator would
    /// have claimed it), the minimums of waiting jobs and the room to grow
    /// of running ones (up to their maxima).
    pub fn unmet_demand(&self) -> Vec<Unmet> {
        let mut out: Vec<Unmet> = Vec::new();
        for p in self.pending.by_seq.values() {
            let hosts = p.unclaimed();
            if hosts > 0 {
                out.push(Unmet {
                    job: p.job,
                    class: p.class.clone(),
                    hosts,
                });
            }
        }
        for (job, j) in &self.jobs {
            let want_max = match j.phase {
                Phase::Waiting => false,
                Phase::Running { grow: true } => true,
                _ => continue,
            };
            for (class, (min, max)) in &j.limits {
                let want = if want_max { *max } else { *min };
                let hosts = want.saturating_sub(self.held(*job, class));
                if hosts > 0 {
                    out.push(Unmet {
                        job: *job,
                        class: class.clone(),
                        hosts,
                    });
                }
            }
        }
        out
    }

    /// Whether a machine with ad `ad` (a pilot not started yet) would belong
    /// to `class` of `job`: the class expression is true, or UNDEFINED when
    /// `optimistic` (the ad is a guess lacking what a real machine reports).
    pub fn would_match(&self, job: JobId, class: &str, ad: &ClassAd, optimistic: bool) -> bool {
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        let Some(c) = j.classes.get(class) else {
            return false;
        };
        let v = ad.eval_expr(&c.expr, Some(&j.ad));
        v.is_true() || (optimistic && v.is_undefined())
    }
}
