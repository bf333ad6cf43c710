//! A pool that shrinks (a machine lost) may leave waiting jobs that no set
//! of machines left could start (issue 15, item 2). The allocator flags
//! them and lets the jobs behind them pass (`alloc::possible`), and `carmi
//! q` says why; a job submitted with `on_impossible = hold` is held then, as
//! it would have been at submit, so that its owner hears of it.

use carmi_proto::ids::JobId;
use carmi_proto::submit::OnImpossible;

use crate::alloc::Phase;
use crate::router::Router;

impl Router {
    /// Holds every waiting `on_impossible = hold` job the pool can no
    /// longer start, with the reason; called once the pool has shrunk.
    pub(in crate::router) fn hold_newly_impossible(&mut self) {
        let mut candidates: Vec<JobId> = self
            .jobs
            .submitted
            .iter()
            .filter(|(_, s)| s.spec.on_impossible == OnImpossible::Hold && s.held.is_none())
            .map(|(&job, _)| job)
            .collect();
        // Held in submit order, so the journal and the event logs read the same every time.
        candidates.sort();
        for job in candidates {
            if self.alloc.job_phase(job) != Some(Phase::Waiting) {
                continue;
            }
            if let Some(why) = self.alloc.impossible(job) {
                self.hold_at_submit(job, &why);
            }
        }
    }
}
