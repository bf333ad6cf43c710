//! What a dispatch policy sees and the trait it implements (re-exported by
//! [`crate::sched`]).

use carmi_proto::ids::HostId;

use super::board::HostBoard;
use super::queue::StepQueue;
use super::{Ticket, Time};
use crate::ids::WorkerId;

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

/// What a [`Dispatch`] policy may look at besides the free worker and the
/// queue: the time and every ready worker (free or busy), ordered by speed
/// and by when each should be free.
pub struct Board<'a> {
    /// Now.
    pub now: Time,
    /// Every ready (connected, not suspended) worker.
    pub hosts: &'a HostBoard,
    /// Hosts asked for again after the tail policy gave them back, by their
    /// speed when they left, fastest first: expected ready `coming_in`
    /// seconds from now. A policy may keep a long step for a fast host on its
    /// way rather than give it to a slow one here now.
    pub coming: &'a [f64],
    /// Seconds until the `coming` hosts should be ready.
    pub coming_in: f64,
}

/// Chooses which queued ticket a free worker gets. A policy answers from the
/// queue's orders and the board's, so that a decision need not look at
/// every queued ticket or every worker.
pub trait Dispatch: Send {
    /// Whether the core asks its free workers fastest first (else by id).
    /// A policy that says so may leave a worker idle only when it would
    /// leave every slower one idle too: the core then ends the round.
    fn fastest_first(&self) -> bool {
        false
    }

    /// The ticket to give `worker`, or `None` to leave it idle.
    /// `eligible(t)` is false for tickets this worker already holds a copy of.
    fn pick(
        &mut self,
        queue: &StepQueue,
        worker: &WorkerView,
        board: &Board<'_>,
        eligible: &dyn Fn(Ticket) -> bool,
    ) -> Option<Ticket>;
}

/// First come, first served: the front of the queue.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArrivalOrder;

impl Dispatch for ArrivalOrder {
    fn pick(
        &mut self,
        queue: &StepQueue,
        _worker: &WorkerView,
        _board: &Board<'_>,
        eligible: &dyn Fn(Ticket) -> bool,
    ) -> Option<Ticket> {
        queue.by_arrival().find(|t| eligible(*t))
    }
}
