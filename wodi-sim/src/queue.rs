//! The simulation's clock and its one queue of future events, shared by the
//! CARMI side (`pool`) and the WoDi side (`run`): every message between the
//! cores and every timer is an event here, in virtual seconds.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::time::Duration;

use bytes::Bytes;
use carmi_global_core::router::LinkId;
use carmi_proto::ids::ProcessId;
use carmi_proto::msg::OwnerEvent;
use wodi_core::ids::WorkerId;

/// Something due at a virtual time.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ev {
    /// A frame from a local RM to the global RM, on the machine's link.
    ToRouter { link: LinkId, frame: Bytes },
    /// A frame from the global RM to machine `m`'s local RM (`m` 0: the submit machine).
    ToLocal { m: usize, frame: Bytes },
    /// A frame from the WoDi server's connection to the submit machine's local RM.
    FromApp { frame: Bytes },
    /// A frame from the submit machine's local RM to the WoDi server.
    ToApp { frame: Bytes },
    /// The global RM's deadline, exactly as it gave it.
    RouterTick(Duration),
    /// Machine `m`'s local RM core is due (its `Core::next_deadline`: a
    /// heartbeat, the owner policy's step, a kill grace), if `timer` is
    /// still its latest arming.
    Machine { m: usize, timer: u64 },
    /// The owner of machine `m` (pool host index `m - 1`) did something.
    Owner { m: usize, event: OwnerEvent },
    /// A process signalled to end has exited.
    Exited { m: usize, process: ProcessId },
    /// A worker connected to the WoDi server, ready for work.
    WorkerReady { worker: WorkerId },
    /// A worker's current step finished (if `epoch` still holds).
    StepDone { worker: WorkerId, epoch: u64 },
    /// The WoDi core's deadline, exactly as it gave it.
    Deadline(Duration),
}

struct Queued {
    at: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Earliest first out of the max-heap, ties in insertion order (so that
    /// messages on one link arrive in the order they were sent).
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .at
            .total_cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// The virtual clock and the events still to come.
#[derive(Default)]
pub(crate) struct Queue {
    /// Virtual seconds since the start of the run.
    pub now: f64,
    heap: BinaryHeap<Queued>,
    seq: u64,
}

impl Queue {
    /// Schedules `ev` at `at` (never before now).
    pub fn push(&mut self, at: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Queued {
            at: at.max(self.now),
            seq: self.seq,
            ev,
        });
    }

    /// When the next event is due.
    pub fn peek_at(&self) -> Option<f64> {
        self.heap.peek().map(|q| q.at)
    }

    /// Takes the next event and moves the clock to it.
    pub fn pop(&mut self) -> Option<Ev> {
        let q = self.heap.pop()?;
        self.now = q.at;
        Some(q.ev)
    }
}

/// Virtual seconds as the cores' `Duration` time.
pub(crate) fn time(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}
