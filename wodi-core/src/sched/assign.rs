//! Handing queued tickets to free workers: the [`Dispatch`](super::Dispatch)
//! policy picks which ticket each free worker gets, then the tail policies
//! act on the workers left idle.
//!
//! Kept apart from `sched.rs` (the core's state and its inputs) so that each
//! file stays readable.

use std::cell::Cell;

use super::board::{Load, Slot};
use super::{Board, Output, Sched, Ticket, Time, Worker, WorkerState, WorkerView};
use crate::ids::WorkerId;
use crate::stats::RunRecord;

impl Sched {
    /// Gives free workers queued tickets, as the policy chooses, then lets
    /// the tail policies act on the workers left idle.
    pub(super) fn dispatch_all(&mut self, now: Time) {
        self.dispatch_queue(now);
        self.settle_idle(now);
    }

    /// Gives free workers queued tickets, as the policy chooses. With a
    /// policy that wants its workers fastest first (so that a long step goes
    /// to the fastest free host), a worker the policy leaves idle for want
    /// of a ticket ends the round: every slower one would be left idle too
    /// (the policy keeps the queue's steps for faster hosts), so a round
    /// costs the decisions made, not a look at every free worker.
    pub(super) fn dispatch_queue(&mut self, now: Time) {
        if self.rekey_all {
            self.rekey();
        }
        if self.queue.is_empty() {
            return;
        }
        let coming = self.coming();
        let fastest_first = self.dispatch.fastest_first();
        let mut after: Option<WorkerId> = None;
        while !self.queue.is_empty() {
            let Some(worker) = self.board.next_open(after, fastest_first) else {
                break;
            };
            after = Some(worker);
            // Whether the policy passed over a ticket this worker holds a
            // copy of: then a slower worker may still take it.
            let passed = Cell::new(false);
            while self.board.find(worker).is_some_and(|s| s.open) && !self.queue.is_empty() {
                let host = self.workers[&worker].host;
                let view = WorkerView {
                    worker,
                    host,
                    speed: self.hosts.get(&host).and_then(|h| h.speed),
                };
                let tasks = &self.tasks;
                let eligible = |t: Ticket| {
                    let ok = tasks.get(&t).is_some_and(|t| !t.copies.contains(&worker));
                    if !ok {
                        passed.set(true);
                    }
                    ok
                };
                let board = Board {
                    now,
                    hosts: &self.board,
                    coming: &coming,
                    coming_in: self.cfg.reacquire.as_secs_f64(),
                };
                let Some(ticket) = self.dispatch.pick(&self.queue, &view, &board, &eligible) else {
                    if passed.get() || !fastest_first {
                        break;
                    }
                    return;
                };
                assert!(
                    self.queue.remove(ticket),
                    "the policy picked {ticket:?}, which is not queued"
                );
                self.assign(ticket, worker, now);
            }
        }
    }

    /// What the dispatch policy sees of `worker`: `None` unless it is ready.
    pub(super) fn slot_of(&self, worker: WorkerId) -> Option<Slot> {
        let w = self.workers.get(&worker)?;
        if w.state != WorkerState::Ready {
            return None;
        }
        let speed = self
            .hosts
            .get(&w.host)
            .and_then(|h| h.speed)
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(1.0);
        let front = w.in_hand.front().map(|(_, run)| {
            (
                self.records.runs[*run].step(),
                self.records.runs[*run].assigned(),
            )
        });
        let load = match front {
            None => Load::Idle,
            Some((step, since)) => match self.history.estimate(&step) {
                None => Load::Unknown,
                Some(est) => {
                    let total = est / speed;
                    Load::Until {
                        end: since.as_secs_f64() + total,
                        total,
                    }
                }
            },
        };
        Some(Slot {
            speed,
            load,
            open: w.in_hand.len() < self.window_of(w),
            front,
        })
    }

    /// Tickets `w` may hold now: `prefetch`, or more for a worker whose
    /// steps are short against its round trip (see [`super::pace`]).
    pub(super) fn window_of(&self, w: &Worker) -> usize {
        w.pace.window(self.cfg.prefetch, self.cfg.prefetch_max) as usize
    }

    /// Puts `worker` on the dispatch board as it is now (or takes it off):
    /// called wherever its state or the tickets it holds change.
    pub(super) fn touch(&mut self, worker: WorkerId) {
        let slot = self.slot_of(worker);
        self.board.set(worker, slot);
    }

    /// After the history was replaced: every queued ticket and every
    /// worker's expected free time is computed again.
    fn rekey(&mut self) {
        self.rekey_all = false;
        for (_, step, _) in self.queue.steps() {
            self.queue.rekey_step(step, self.history.estimate(&step));
        }
        let workers: Vec<WorkerId> = self.workers.keys().copied().collect();
        for w in workers {
            self.touch(w);
        }
    }

    /// Queues `ticket` again at the front (its copies were lost or are late).
    pub(super) fn requeue_front(&mut self, ticket: Ticket) {
        let Some(task) = self.tasks.get_mut(&ticket) else {
            return;
        };
        if task.queued {
            return;
        }
        task.queued = true;
        let step = task.step;
        self.queue
            .push_front(ticket, step, self.history.estimate(&step));
    }

    pub(super) fn assign(&mut self, ticket: Ticket, worker: WorkerId, now: Time) {
        let task = self
            .tasks
            .get_mut(&ticket)
            .unwrap_or_else(|| panic!("a closed ticket {ticket:?} was assigned"));
        task.copies.push(worker);
        task.queued = false;
        let w = self
            .workers
            .get_mut(&worker)
            .expect("assigning to a known worker");
        let speed = self.hosts.get(&w.host).and_then(|h| h.speed);
        let expected = self
            .history
            .estimate(&task.step)
            .map(|est| est / speed.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(1.0));
        w.pace.assigned(ticket, w.in_hand.is_empty(), expected, now);
        if w.in_hand.is_empty() {
            w.front_since = Some(now);
            w.front_struck = false;
        }
        self.records.runs.push(RunRecord::new(
            task.step, task.cycle, worker, w.host, speed, now,
        ));
        w.in_hand.push_back((ticket, self.records.runs.len() - 1));
        self.outputs.push_back(Output::Assign {
            ticket,
            step: task.step,
            worker,
        });
        self.touch(worker);
    }
}
