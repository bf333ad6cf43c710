//! The core's invariants, checked by tests after every step.

use super::{Sched, WorkerState};

impl Sched {
    /// Checks the invariants; tests call it after every step. Panics naming the broken one.
    pub fn sanity_check(&self) {
        for (ticket, task) in &self.tasks {
            assert!(
                ticket.0 < self.next_ticket,
                "{ticket:?} open but never issued"
            );
            let in_queue = self.queue.iter().filter(|t| *t == ticket).count();
            assert_eq!(in_queue, usize::from(task.queued), "{ticket:?} queued flag");
            for c in &task.copies {
                let w = self
                    .workers
                    .get(c)
                    .expect("a copy is held by a live worker");
                assert!(
                    w.in_hand.iter().any(|(t, _)| t == ticket),
                    "{ticket:?} in hand"
                );
            }
            assert!(
                task.queued || !task.copies.is_empty(),
                "{ticket:?} is open but neither queued nor held"
            );
        }
        for ticket in &self.queue {
            assert!(self.tasks.contains_key(ticket), "closed {ticket:?} queued");
        }
        for (id, w) in &self.workers {
            assert!(
                w.in_hand.len() <= self.cfg.prefetch as usize,
                "{id} over prefetch"
            );
            assert!(
                w.joined || w.in_hand.is_empty(),
                "{id} holds tickets before it joined"
            );
            assert!(
                w.joined || w.state != WorkerState::Ready,
                "{id} is ready before it joined"
            );
            for (ticket, run) in &w.in_hand {
                if let Some(task) = self.tasks.get(ticket) {
                    assert!(task.copies.contains(id), "{ticket:?} held by {id}");
                    assert_eq!(self.runs[*run].step(), task.step, "{ticket:?} run record");
                }
            }
            let h = self.hosts.get(&w.host).expect("a worker's host is held");
            assert_eq!(h.worker, Some(*id), "{id} is its host's worker");
        }
    }
}
