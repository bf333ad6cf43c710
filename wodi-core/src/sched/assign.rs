//! Handing queued tickets to free workers: the [`Dispatch`](super::Dispatch)
//! policy picks which ticket each free worker gets, then the tail policies
//! act on the workers left idle.
//!
//! Kept apart from `sched.rs` (the core's state and its inputs) so that each
//! file stays readable.

use super::{Board, Output, Sched, Ticket, Time, WorkerLoad, WorkerState, WorkerView};
use crate::ids::WorkerId;
use crate::stats::RunRecord;

impl Sched {
    /// Gives free workers queued tickets, as the policy chooses, then lets
    /// the tail policies act on the workers left idle.
    pub(super) fn dispatch_all(&mut self, now: Time) {
        self.dispatch_queue(now);
        self.settle_idle(now);
    }

    /// Gives free workers queued tickets, as the policy chooses.
    pub(super) fn dispatch_queue(&mut self, now: Time) {
        if self.queue.is_empty() {
            return;
        }
        let free: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, w)| w.state == WorkerState::Ready)
            .map(|(id, _)| *id)
            .collect();
        for worker in free {
            while self.workers[&worker].in_hand.len() < self.cfg.prefetch as usize
                && !self.queue.is_empty()
            {
                let host = self.workers[&worker].host;
                let view = WorkerView {
                    worker,
                    host,
                    speed: self.hosts.get(&host).and_then(|h| h.speed),
                };
                let loads = self.loads();
                let tasks = &self.tasks;
                let queue = &self.queue;
                let eligible = |i: usize| {
                    tasks
                        .get(&queue[i])
                        .is_some_and(|t| !t.copies.contains(&worker))
                };
                let step_of = |i: usize| tasks[&queue[i]].step;
                let coming = self.coming();
                let board = Board {
                    now,
                    workers: &loads,
                    step_of: &step_of,
                    history: &self.history,
                    coming: &coming,
                    coming_in: self.cfg.reacquire.as_secs_f64(),
                };
                let Some(i) = self.dispatch.pick(queue, &view, &board, &eligible) else {
                    break;
                };
                let ticket = self.queue.remove(i).expect("policy picks inside the queue");
                self.assign(ticket, worker, now);
            }
        }
    }

    /// Every ready worker with the step it computes (its oldest ticket).
    pub(super) fn loads(&self) -> Vec<WorkerLoad> {
        self.workers
            .iter()
            .filter(|(_, w)| w.state == WorkerState::Ready)
            .map(|(id, w)| WorkerLoad {
                worker: *id,
                speed: self.hosts.get(&w.host).and_then(|h| h.speed),
                busy_with: w
                    .in_hand
                    .front()
                    .map(|(_, run)| (self.runs[*run].step(), self.runs[*run].assigned())),
            })
            .collect()
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
        if w.in_hand.is_empty() {
            w.front_since = Some(now);
            w.front_struck = false;
        }
        self.runs.push(RunRecord::new(
            task.step, task.cycle, worker, w.host, speed, now,
        ));
        w.in_hand.push_back((ticket, self.runs.len() - 1));
        self.outputs.push_back(Output::Assign {
            ticket,
            step: task.step,
            worker,
        });
    }
}
