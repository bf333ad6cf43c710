//! What a dispatch policy sees and the trait it implements (re-exported by
//! [`crate::sched`]).

use std::collections::VecDeque;

use carmi_proto::ids::HostId;

use super::{Ticket, Time};
use crate::ids::{StepId, WorkerId};
use crate::plan::History;

/// What a [`Dispatch`] policy sees of a free worker.
#[derive(Clone, Copy, Debug)]
pub struct WorkerView {
    /// The worker.
    pub worker: WorkerId,
    /// Its host.
    pub host: HostId,
    /// The host's relative speed, if known.
    pub speed: Option<f64>,
}

/// A ready worker as a [`Dispatch`] policy sees it on the [`Board`].
#[derive(Clone, Copy, Debug)]
pub struct WorkerLoad {
    /// The worker.
    pub worker: WorkerId,
    /// Its host's relative speed, if known.
    pub speed: Option<f64>,
    /// The step it is computing and since when, if any.
    pub busy_with: Option<(StepId, Time)>,
}

/// What a [`Dispatch`] policy may look at besides the free worker: the time,
/// every ready worker (free or busy) and the run's history.
pub struct Board<'a> {
    /// Now.
    pub now: Time,
    /// Every ready (connected, not suspended) worker.
    pub workers: &'a [WorkerLoad],
    /// The step of the queued ticket at index `i`.
    pub step_of: &'a dyn Fn(usize) -> StepId,
    /// Compute times of the steps seen so far.
    pub history: &'a History<StepId>,
    /// Hosts asked for again after the tail policy gave them back, by their
    /// speed when they left: expected ready `coming_in` seconds from now. A
    /// policy may keep a long step for a fast host on its way rather than
    /// give it to a slow one here now.
    pub coming: &'a [f64],
    /// Seconds until the `coming` hosts should be ready.
    pub coming_in: f64,
}

/// Chooses which queued ticket a free worker gets. The queue holds tickets in
/// order (re-queued ones at the front); the policy returns an index into it.
pub trait Dispatch: Send {
    /// Index of the ticket to give `worker`, or `None` to leave it idle.
    /// `eligible(i)` is false for tickets this worker already holds a copy of.
    fn pick(
        &mut self,
        queue: &VecDeque<Ticket>,
        worker: &WorkerView,
        board: &Board<'_>,
        eligible: &dyn Fn(usize) -> bool,
    ) -> Option<usize>;
}

/// First come, first served: the front of the queue.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArrivalOrder;

impl Dispatch for ArrivalOrder {
    fn pick(
        &mut self,
        queue: &VecDeque<Ticket>,
        _worker: &WorkerView,
        _board: &Board<'_>,
        eligible: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        (0..queue.len()).find(|&i| eligible(i))
    }
}
