//! Queues as `carmi alloc list` and `info` show them.

use carmi_proto::msg::{AllocQueueStatus, AllocationStatus};

use super::{AllocQueues, Allocation, QueueState};

impl AllocQueues {
    /// Queue `id`: every allocation it remembers when `all`, else those not over.
    pub fn status(&self, id: u64, all: bool) -> Option<AllocQueueStatus> {
        let q = self.queues.get(&id)?;
        let (state, reason) = match &q.state {
            QueueState::Active => ("active", None),
            QueueState::Paused(why) => ("paused", Some(why.clone())),
            QueueState::Removing => ("removing", None),
            QueueState::DryRun => ("dry-run", None),
        };
        Some(AllocQueueStatus {
            id,
            spec: q.spec.clone(),
            state: state.into(),
            reason,
            failures: q.failures,
            demand: q.demand,
            allocations: q
                .allocs
                .values()
                .filter(|a| all || !a.state.over())
                .map(allocation_status)
                .collect(),
        })
    }

    /// Every queue (dry runs left out), with their allocations not over.
    pub fn list(&self) -> Vec<AllocQueueStatus> {
        self.queues
            .values()
            .filter(|q| q.state != QueueState::DryRun)
            .filter_map(|q| self.status(q.id, false))
            .collect()
    }
}

fn allocation_status(a: &Allocation) -> AllocationStatus {
    AllocationStatus {
        id: a.id,
        batch_job: a.batch_job.clone(),
        state: a.state.name().into(),
        machines: a
            .pilots
            .iter()
            .filter(|(_, p)| p.up)
            .map(|(m, _)| m.clone())
            .collect(),
        hosts: a.pilots.len() as u32,
        submitted_unix: a.submitted,
        started_unix: a.started,
        ends_unix: a.ends,
        note: a.note.clone(),
    }
}
