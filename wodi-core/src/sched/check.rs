//! The core's invariants, checked by tests after every step.

use super::{Sched, WorkerState};

impl Sched {
    /// Checks the invariants; tests call it after every step. Panics naming the broken one.
    pub fn sanity_check(&self) {
        for (ticket, task) in &self.tasks {
            assert!(
                ticket.0 < self.next.ticket,
                "{ticket:?} open but never issued"
            );
            assert_eq!(
                self.queue.contains(*ticket),
                task.queued,
                "{ticket:?} queued flag"
            );
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
        for ticket in self.queue.by_arrival() {
            assert!(self.tasks.contains_key(&ticket), "closed {ticket:?} queued");
        }
        self.queue.check();
        self.board.check();
        if !self.rekey_all {
            self.check_board();
        }
        for (id, w) in &self.workers {
            assert!(
                w.in_hand.len() <= self.cfg.prefetch.max(self.cfg.prefetch_max).max(1) as usize,
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
                    assert_eq!(
                        self.records.runs[*run].step(),
                        task.step,
                        "{ticket:?} run record"
                    );
                }
            }
            let h = self.hosts.get(&w.host).expect("a worker's host is held");
            assert_eq!(h.worker, Some(*id), "{id} is its host's worker");
        }
    }

    /// Every ready worker is on the dispatch board as it is (its expected
    /// free time may rest on an older estimate of its step), and no other.
    fn check_board(&self) {
        for id in self.workers.keys() {
            let fresh = self.slot_of(*id);
            let held = self.board.find(*id);
            assert_eq!(fresh.is_some(), held.is_some(), "{id} on the board");
            if let (Some(f), Some(h)) = (fresh, held) {
                assert_eq!(f.speed, h.speed, "{id} speed on the board");
                assert_eq!(f.open, h.open, "{id} open on the board");
                assert_eq!(f.front, h.front, "{id} step on the board");
            }
        }
        assert!(
            self.board
                .iter()
                .all(|(w, _)| self.workers.contains_key(&w)),
            "a worker gone is on the board"
        );
    }
}
