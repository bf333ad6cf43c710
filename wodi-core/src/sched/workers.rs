//! Workers' lifecycle in the core: spawned on a host, joined, detached,
//! lost, and spawned again (at once, or when a suspended host resumes).

use std::collections::VecDeque;

use carmi_proto::ids::HostId;

use super::{LossCause, Output, Sched, Ticket, Time, Worker, WorkerState};
use crate::ids::WorkerId;
use crate::stats::RunOutcome;

impl Sched {
    /// Starts a worker on a held host (or, if the host is suspended,
    /// creates it unspawned: it is spawned when the host resumes).
    pub(super) fn spawn_on(&mut self, host: HostId, now: Time) {
        let worker = WorkerId(self.next.worker);
        self.next.worker += 1;
        let h = self.hosts.get_mut(&host).expect("spawn on a held host");
        h.worker = Some(worker);
        let spawned = !h.suspended;
        let state = if h.suspended {
            let deadline = self
                .cfg
                .release_suspended
                .then(|| now + self.cfg.suspend_timeout);
            WorkerState::Suspended { deadline }
        } else {
            WorkerState::Starting
        };
        self.workers.insert(
            worker,
            Worker {
                host,
                state,
                in_hand: VecDeque::new(),
                front_since: None,
                front_struck: false,
                strikes: 0,
                pace: Default::default(),
                joined: false,
                spawned,
            },
        );
        if spawned {
            self.outputs.push_back(Output::Spawn { host, worker });
        }
    }

    /// The worker connected and received its init data: it can take steps.
    pub fn worker_joined(&mut self, worker: WorkerId, now: Time) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.joined = true;
        }
        if let Some(w) = self.workers.get_mut(&worker)
            && matches!(w.state, WorkerState::Starting | WorkerState::Detached)
        {
            // Its host may have been suspended while the worker was starting
            // (or away).
            let suspended = self.hosts.get(&w.host).is_some_and(|h| h.suspended);
            w.state = if suspended {
                let deadline = self
                    .cfg
                    .release_suspended
                    .then(|| now + self.cfg.suspend_timeout);
                WorkerState::Suspended { deadline }
            } else {
                WorkerState::Ready
            };
        }
        self.touch(worker);
        self.dispatch_all(now);
    }

    /// The worker's connection dropped: it gets no more steps, and keeps
    /// those it holds until it joins again ([`Sched::worker_joined`]) or is
    /// reported lost ([`Sched::worker_lost`], which decides whether the step
    /// it was computing counts an attempt).
    pub fn worker_detached(&mut self, worker: WorkerId, _now: Time) {
        if let Some(w) = self.workers.get_mut(&worker)
            && w.joined
        {
            w.state = WorkerState::Detached;
            w.pace.interrupted();
        }
        self.touch(worker);
    }

    /// The driver could not send `ticket` to `worker` (it has no connection
    /// to it). The ticket goes back to the front of the queue without
    /// counting an attempt, and the worker is detached (see
    /// [`Sched::worker_detached`]) so that no more steps are lost on it.
    pub fn assign_failed(&mut self, worker: WorkerId, ticket: Ticket, now: Time) {
        if let Some(w) = self.workers.get_mut(&worker) {
            if let Some(pos) = w.in_hand.iter().position(|(t, _)| *t == ticket) {
                let (_, run) = w.in_hand.remove(pos).expect("position is in range");
                self.records.runs[run].close(now, RunOutcome::Lost);
                if pos == 0 {
                    w.front_struck = false;
                    w.front_since = (!w.in_hand.is_empty()).then_some(now);
                }
            }
            if w.joined {
                w.state = WorkerState::Detached;
            }
        }
        if let Some(task) = self.tasks.get_mut(&ticket) {
            task.copies.retain(|c| *c != worker);
            if task.copies.is_empty() {
                self.requeue_front(ticket);
            }
        }
        self.touch(worker);
        self.dispatch_all(now);
    }

    /// The pool could not start `worker`'s process. A refusal because the
    /// host is suspended (`suspended`: CARMI said so, or the core already
    /// knows it) is not a crash: the host counts as suspended from now, and
    /// the worker is spawned again when it resumes. Any other failure is a
    /// crash of the worker ([`Sched::worker_lost`]).
    pub fn spawn_failed(&mut self, worker: WorkerId, suspended: bool, now: Time) {
        let Some(host) = self
            .workers
            .get(&worker)
            .filter(|w| w.spawned && !w.joined)
            .map(|w| w.host)
        else {
            return;
        };
        let known = self.hosts.get(&host).is_some_and(|h| h.suspended);
        if !(suspended || known) {
            self.worker_lost(worker, LossCause::Crashed, now);
            return;
        }
        // The suspension notice may not have arrived yet (or may never: the
        // host was suspended before the run subscribed to it).
        self.host_suspended(host, now);
        let w = self.workers.get_mut(&worker).expect("looked up above");
        w.spawned = false;
        if !matches!(w.state, WorkerState::Suspended { .. }) {
            w.state = WorkerState::Suspended { deadline: None };
        }
        self.touch(worker);
        self.dispatch_all(now);
    }

    /// The pool could not serve `worker`'s spawn for now (`Unavailable`: a
    /// global RM restarting, a local RM reconnecting to it). Not a crash: the
    /// worker stays on its host, unspawned, until [`Sched::respawn`] (the
    /// caller's retry delay). Returns whether there is a spawn to retry.
    pub fn spawn_deferred(&mut self, worker: WorkerId) -> bool {
        let Some(w) = self
            .workers
            .get_mut(&worker)
            .filter(|w| w.spawned && !w.joined)
        else {
            return false;
        };
        w.spawned = false;
        self.touch(worker);
        true
    }

    /// Spawns again a worker whose spawn was deferred
    /// ([`Sched::spawn_deferred`]), unless it is gone, was spawned meanwhile,
    /// or waits for its suspended host (which spawns it when it resumes).
    pub fn respawn(&mut self, worker: WorkerId) {
        let Some(w) = self
            .workers
            .get_mut(&worker)
            .filter(|w| !w.spawned && !w.joined)
        else {
            return;
        };
        if matches!(w.state, WorkerState::Suspended { .. }) {
            return;
        }
        w.spawned = true;
        let host = w.host;
        self.outputs.push_back(Output::Spawn { host, worker });
    }

    /// The worker is gone and nobody has said why: its connection stayed
    /// down through the loss grace, but the pool reported neither its
    /// process's exit nor its host's loss (a killed machine is declared lost
    /// only after the pool's own timeout, seconds later). It is lost like a
    /// crashed worker ([`Sched::worker_lost`]: its steps go back to the queue,
    /// its host counts a crash) except that no attempt is charged to the step
    /// it was computing. Returns that step, for [`Sched::charge_crash`] once
    /// the pool says the process died on a host still ours.
    pub fn worker_vanished(&mut self, worker: WorkerId, now: Time) -> Option<Ticket> {
        let front = self.workers.get(&worker)?.in_hand.front().map(|(t, _)| *t);
        self.worker_lost(worker, LossCause::Unexplained, now);
        front
    }

    /// Charges `ticket`'s step with a crash of its worker found out after the
    /// worker was lost ([`Sched::worker_vanished`]); at the limit the step
    /// fails. Nothing if the step is closed already.
    pub fn charge_crash(&mut self, ticket: Ticket) {
        let Some(task) = self.tasks.get_mut(&ticket) else {
            return;
        };
        task.attempts += 1;
        self.fail_if_poison(ticket);
    }

    /// Fails `ticket`'s step if it crashed its worker as often as allowed.
    /// Returns whether it did.
    fn fail_if_poison(&mut self, ticket: Ticket) -> bool {
        let Some(task) = self.tasks.get(&ticket) else {
            return false;
        };
        if task.attempts < self.cfg.max_attempts {
            return false;
        }
        let reason = format!(
            "the step crashed its worker {} times (the limit)",
            task.attempts
        );
        let step = task.step;
        self.close(ticket);
        self.outputs.push_back(Output::StepFailed {
            ticket,
            step,
            reason,
        });
        true
    }

    /// The worker is gone while its host may still be ours.
    pub fn worker_lost(&mut self, worker: WorkerId, cause: LossCause, now: Time) {
        let Some(host) = self.workers.get(&worker).map(|w| w.host) else {
            return;
        };
        self.drop_worker(worker, cause, now);
        if let Some(h) = self.hosts.get_mut(&host)
            && h.worker == Some(worker)
        {
            h.worker = None;
            h.crashes_in_a_row += 1;
            if self.finished {
                // Nothing more to run: the host goes back.
            } else if h.crashes_in_a_row <= self.cfg.max_respawns {
                self.spawn_on(host, now);
            } else {
                let class = h.class.clone();
                self.release(host, now);
                self.top_up(&class);
            }
        }
        self.dispatch_all(now);
    }

    /// Takes a worker out, re-queueing (or failing) the tickets it held.
    pub(super) fn drop_worker(&mut self, worker: WorkerId, cause: LossCause, now: Time) {
        let Some(w) = self.workers.remove(&worker) else {
            return;
        };
        self.board.set(worker, None);
        // Front of the queue in their original order: push the newest first.
        for (i, (ticket, run)) in w.in_hand.iter().enumerate().rev() {
            self.records.runs[*run].close(now, RunOutcome::Lost);
            let Some(task) = self.tasks.get_mut(ticket) else {
                // Closed: another copy answered, or it failed or was cancelled.
                continue;
            };
            task.copies.retain(|c| *c != worker);
            if i == 0 && cause == LossCause::Crashed {
                task.attempts += 1;
            }
            let orphan = task.copies.is_empty();
            if !self.fail_if_poison(*ticket) && orphan {
                self.requeue_front(*ticket);
            }
        }
    }
}
