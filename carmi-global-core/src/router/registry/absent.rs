//! Machines that never come back after a restart of the global RM (issue
//! 15, item 5): the journal says what ran and what was held there, but only
//! a machine that registers again settles it. Once a whole loss window
//! (the heartbeat bound) has passed since the start with a machine still
//! absent, it is treated as any lost machine: the hosts its jobs held there
//! are reported lost (`HostDeleted` to `DeleteNotify` subscribers, the
//! processes there exit with `HostLost`, told to whoever spawned them), a
//! master sent there is lost (its job ends, or starts a new one), and a
//! job started by hand whose first process ran there ends. Never silence.

use carmi_proto::ids::{JobId, ProcessId};
use tracing::warn;

use crate::router::Router;

impl Router {
    /// Once per run, at the first tick a loss window after the start:
    /// settles what the journal left on machines still absent.
    pub(in crate::router) fn expire_absent(&mut self) {
        if self.registry.absent_expired || self.now < self.lost_after() {
            return;
        }
        self.registry.absent_expired = true;
        let lost = self.alloc.expire_recorded_claims();
        if lost > 0 {
            warn!(
                hosts = lost,
                "hosts held before the restart whose machines did not come back within the heartbeat bound: reported lost"
            );
        }
        let masters: Vec<(ProcessId, JobId)> = self
            .jobs
            .masters
            .iter()
            .filter(|(p, (_, m))| self.jobs.sent_masters.contains(p) && !self.alloc.is_online(m))
            .map(|(&p, &(j, _))| (p, j))
            .collect();
        for (p, j) in masters {
            warn!(job = %j, process = %p, "the master's machine did not come back after the restart");
            self.master_lost(p, j);
        }
        let roots: Vec<(ProcessId, JobId)> = self
            .jobs
            .awaiting_roots
            .iter()
            .filter(|(_, (_, m))| !self.alloc.is_online(m))
            .map(|(&p, &(j, _))| (p, j))
            .collect();
        for (p, job) in roots {
            self.jobs.awaiting_roots.remove(&p);
            warn!(%job, process = %p, "the machine of the job's hand-started first process did not come back after the restart; the job ends");
            self.record_end(job, carmi_proto::msg::JobEnd::Detached);
            self.end_job(job);
        }
        self.flush();
    }
}
