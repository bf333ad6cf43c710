//! The queue of tickets waiting for a worker, kept in two orders at once:
//! arrival (re-queued tickets at the front) and longest estimate first.
//!
//! A dispatch policy walks whichever order it needs from the front, and the
//! core takes out the ticket it picked, so a decision costs O(log n) in the
//! queued tickets however many are waiting: no window of the first few, which
//! hid long steps submitted late behind a thousand short ones.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Ticket;
use crate::ids::StepId;

/// A finite float with a total order, for keys of ordered sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Key(pub f64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Where a queued ticket sits: its place in arrival order, its step and its
/// estimate when queued (or last re-keyed).
#[derive(Clone, Copy, Debug)]
struct Place {
    seq: i64,
    step: StepId,
    estimate: Option<f64>,
}

/// Queued tickets in arrival order and by estimate; see the module documentation.
#[derive(Debug, Default)]
pub struct StepQueue {
    places: HashMap<Ticket, Place>,
    arrival: BTreeMap<i64, Ticket>,
    /// Tickets whose step has no estimate, in arrival order.
    unknown: BTreeSet<i64>,
    /// Tickets with an estimate: longest first, then in arrival order.
    known: BTreeSet<(Reverse<Key>, i64)>,
    /// Queued tickets of each step, to re-key them when its estimate changes.
    by_step: HashMap<StepId, Vec<Ticket>>,
    /// Sum of the known estimates (kept as tickets come and go).
    work: f64,
    /// Next place at the back (counts up) and at the front (counts down).
    back: i64,
    front: i64,
}

impl StepQueue {
    /// Queues `ticket` behind every other one.
    pub fn push_back(&mut self, ticket: Ticket, step: StepId, estimate: Option<f64>) {
        let seq = self.back;
        self.back += 1;
        self.insert(ticket, seq, step, estimate);
    }

    /// Queues `ticket` before every other one (a ticket sent again after its
    /// worker was lost goes out first).
    pub fn push_front(&mut self, ticket: Ticket, step: StepId, estimate: Option<f64>) {
        self.front -= 1;
        self.insert(ticket, self.front, step, estimate);
    }

    fn insert(&mut self, ticket: Ticket, seq: i64, step: StepId, estimate: Option<f64>) {
        let estimate = estimate.filter(|e| e.is_finite());
        if self.places.contains_key(&ticket) {
            self.remove(ticket);
        }
        self.places.insert(
            ticket,
            Place {
                seq,
                step,
                estimate,
            },
        );
        self.arrival.insert(seq, ticket);
        match estimate {
            Some(e) => {
                self.known.insert((Reverse(Key(e)), seq));
                self.work += e;
            }
            None => {
                self.unknown.insert(seq);
            }
        }
        self.by_step.entry(step).or_default().push(ticket);
    }

    /// Takes `ticket` out; false if it was not queued.
    pub fn remove(&mut self, ticket: Ticket) -> bool {
        let Some(p) = self.places.remove(&ticket) else {
            return false;
        };
        self.arrival.remove(&p.seq);
        match p.estimate {
            Some(e) => {
                self.known.remove(&(Reverse(Key(e)), p.seq));
                self.work -= e;
            }
            None => {
                self.unknown.remove(&p.seq);
            }
        }
        if self.places.is_empty() {
            // No drift of the float sum survives an empty queue.
            self.work = 0.0;
        }
        if let Some(v) = self.by_step.get_mut(&p.step) {
            v.retain(|t| *t != ticket);
            if v.is_empty() {
                self.by_step.remove(&p.step);
            }
        }
        true
    }

    /// Gives every queued ticket of `step` a new estimate (its history changed).
    pub fn rekey_step(&mut self, step: StepId, estimate: Option<f64>) {
        let Some(tickets) = self.by_step.get(&step).cloned() else {
            return;
        };
        for t in tickets {
            let p = self.places[&t];
            if p.estimate != estimate {
                self.remove(t);
                self.insert(t, p.seq, step, estimate);
            }
        }
    }

    /// Every queued ticket with its step, in no particular order (to re-key
    /// them all after the history was replaced).
    pub fn steps(&self) -> Vec<(Ticket, StepId, Option<f64>)> {
        self.places
            .iter()
            .map(|(t, p)| (*t, p.step, p.estimate))
            .collect()
    }

    /// Whether `ticket` is queued.
    pub fn contains(&self, ticket: Ticket) -> bool {
        self.places.contains_key(&ticket)
    }

    /// Tickets queued.
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// Queued tickets in arrival order.
    pub fn by_arrival(&self) -> impl Iterator<Item = Ticket> + '_ {
        self.arrival.values().copied()
    }

    /// Queued tickets without an estimate, in arrival order.
    pub fn without_estimate(&self) -> impl Iterator<Item = Ticket> + '_ {
        self.unknown.iter().map(|seq| self.arrival[seq])
    }

    /// Queued tickets with an estimate, longest first (equal estimates in
    /// arrival order), with the estimate.
    pub fn longest_first(&self) -> impl Iterator<Item = (Ticket, f64)> + '_ {
        self.known
            .iter()
            .map(|(Reverse(Key(e)), seq)| (self.arrival[seq], *e))
    }

    /// Queued tickets with an estimate of at most `limit`, longest first.
    pub fn longest_up_to(&self, limit: f64) -> impl Iterator<Item = (Ticket, f64)> + '_ {
        self.known
            .range((Reverse(Key(limit)), i64::MIN)..)
            .map(|(Reverse(Key(e)), seq)| (self.arrival[seq], *e))
    }

    /// The sum of the estimates of the queued tickets that have one.
    pub fn known_work(&self) -> f64 {
        self.work.max(0.0)
    }

    /// The estimate `ticket` is ordered by, if it is queued and has one.
    pub fn estimate(&self, ticket: Ticket) -> Option<f64> {
        self.places.get(&ticket).and_then(|p| p.estimate)
    }

    /// Checks that the orders hold the same tickets (tests call it through
    /// `Sched::sanity_check`). Panics naming the broken invariant.
    pub fn check(&self) {
        assert_eq!(
            self.arrival.len(),
            self.places.len(),
            "queue: arrival order"
        );
        assert_eq!(
            self.known.len() + self.unknown.len(),
            self.places.len(),
            "queue: estimate order"
        );
        let indexed: usize = self.by_step.values().map(Vec::len).sum();
        assert_eq!(indexed, self.places.len(), "queue: step index");
        for (t, p) in &self.places {
            assert_eq!(self.arrival.get(&p.seq), Some(t), "queue: {t:?} place");
        }
    }
}
