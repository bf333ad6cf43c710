//! The ready workers as a dispatch policy sees them, kept ordered as the core
//! changes them: by speed, and within one speed by when each should be free.
//!
//! The core updates a worker's [`Slot`] whenever its state or the ticket it
//! computes changes (`Sched::touch`), so that a decision looks up "the
//! faster hosts that free up soonest" in O(log hosts) per speed band
//! instead of listing every worker for every free one. Speeds are grouped in
//! bands [`BAND`] apart (about 30 from half speed to twice it, whatever the
//! number of hosts), so a pool of a thousand slightly different speeds costs
//! no more per decision than one of a few classes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use super::Time;
use super::queue::Key;
use crate::ids::{StepId, WorkerId};

/// What a ready worker is doing, as far as the core can tell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// Nothing: free now.
    Idle,
    /// Computing a step expected to take `total` seconds on it, ending at
    /// `end` (seconds since the start of the run).
    Until {
        /// When it should end.
        end: f64,
        /// How long it should take in all.
        total: f64,
    },
    /// Computing a step without history: no idea when it frees up.
    Unknown,
}

/// A ready (connected, not suspended) worker on the board.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slot {
    /// Its host's relative speed (1 when unknown).
    pub speed: f64,
    /// What it computes.
    pub load: Load,
    /// Whether it may take another ticket now (fewer than `prefetch` in hand).
    pub open: bool,
    /// The step it computes and since when (what `load` was computed from).
    pub front: Option<(StepId, Time)>,
}

impl Slot {
    /// Seconds from `now` until it should be free; `None` when unknown.
    pub fn free_in(&self, now: f64) -> Option<f64> {
        match self.load {
            Load::Idle => Some(0.0),
            Load::Until { end, .. } => Some((end - now).max(0.0)),
            Load::Unknown => None,
        }
    }
}

/// The ready workers, ordered for dispatch; see the module documentation.
#[derive(Debug, Default)]
pub struct HostBoard {
    slots: BTreeMap<WorkerId, Slot>,
    /// Workers with a known free time, per speed band (fastest first),
    /// soonest free first.
    by_speed: BTreeMap<Reverse<i32>, BTreeSet<(Key, WorkerId)>>,
    /// Workers that may take a ticket now, fastest first.
    open: BTreeSet<(Reverse<Key>, WorkerId)>,
    /// The same, by id.
    open_by_id: BTreeSet<WorkerId>,
    /// Sums over the workers of known free time: of their speeds, of the
    /// speeds of the busy ones, and of speed times end over the busy ones
    /// (what [`HostBoard::capacity`] needs without a look at every worker).
    speed_sum: f64,
    busy_speed_sum: f64,
    busy_end_sum: f64,
}

/// Ratio between the lowest speeds of neighbouring bands.
pub const BAND: f64 = 1.05;

/// The band of a speed: speeds within a factor [`BAND`] share one.
pub fn band(speed: f64) -> i32 {
    (speed.ln() / BAND.ln()).floor() as i32
}

/// The fastest speed a band may hold.
pub fn band_top(band: i32) -> f64 {
    BAND.powi(band + 1)
}

fn end_key(load: Load) -> Option<Key> {
    match load {
        Load::Idle => Some(Key(f64::NEG_INFINITY)),
        Load::Until { end, .. } => Some(Key(end)),
        Load::Unknown => None,
    }
}

impl HostBoard {
    /// Puts `worker` on the board as `slot`, or takes it off (`None`).
    pub fn set(&mut self, worker: WorkerId, slot: Option<Slot>) {
        if self.slots.get(&worker) == slot.as_ref() {
            return;
        }
        if let Some(old) = self.slots.remove(&worker) {
            let speed = Reverse(Key(old.speed));
            let b = Reverse(band(old.speed));
            self.add_sums(&old, -1.0);
            if let Some(end) = end_key(old.load)
                && let Some(group) = self.by_speed.get_mut(&b)
            {
                group.remove(&(end, worker));
                if group.is_empty() {
                    self.by_speed.remove(&b);
                }
            }
            self.open.remove(&(speed, worker));
            self.open_by_id.remove(&worker);
        }
        let Some(slot) = slot else {
            return;
        };
        self.add_sums(&slot, 1.0);
        let speed = Reverse(Key(slot.speed));
        if let Some(end) = end_key(slot.load) {
            self.by_speed
                .entry(Reverse(band(slot.speed)))
                .or_default()
                .insert((end, worker));
        }
        if slot.open {
            self.open.insert((speed, worker));
            self.open_by_id.insert(worker);
        }
        self.slots.insert(worker, slot);
    }

    fn add_sums(&mut self, slot: &Slot, sign: f64) {
        match slot.load {
            Load::Idle => self.speed_sum += sign * slot.speed,
            Load::Until { end, .. } => {
                self.speed_sum += sign * slot.speed;
                self.busy_speed_sum += sign * slot.speed;
                self.busy_end_sum += sign * slot.speed * end;
            }
            Load::Unknown => {}
        }
        if self.slots.is_empty() && sign < 0.0 {
            // No drift of the float sums survives an empty board.
            self.speed_sum = 0.0;
            self.busy_speed_sum = 0.0;
            self.busy_end_sum = 0.0;
        }
    }

    /// The speeds of the workers of known free time, summed, and the work
    /// (seconds on a speed-1 host) they still have in hand at `now`: what
    /// the fluid bound of a queue spread over them starts from.
    pub fn capacity(&self, now: f64) -> (f64, f64) {
        let in_hand = (self.busy_end_sum - now * self.busy_speed_sum).max(0.0);
        (self.speed_sum.max(0.0), in_hand)
    }

    /// The slot of `worker`, if it is ready.
    pub fn find(&self, worker: WorkerId) -> Option<&Slot> {
        self.slots.get(&worker)
    }

    /// Ready workers.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no worker is ready.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Every ready worker, by id.
    pub fn iter(&self) -> impl Iterator<Item = (WorkerId, &Slot)> + '_ {
        self.slots.iter().map(|(w, s)| (*w, s))
    }

    /// The first worker that may take a ticket after `after` (from the
    /// start with `None`): fastest first (equal speeds by id), or by id.
    pub fn next_open(&self, after: Option<WorkerId>, fastest_first: bool) -> Option<WorkerId> {
        if !fastest_first {
            let from = after.map_or(Bound::Unbounded, Bound::Excluded);
            return self
                .open_by_id
                .range((from, Bound::Unbounded))
                .next()
                .copied();
        }
        let from = match after.and_then(|w| self.slots.get(&w).map(|s| (w, s.speed))) {
            Some((w, speed)) => Bound::Excluded((Reverse(Key(speed)), w)),
            None if after.is_some() => return None,
            None => Bound::Unbounded,
        };
        self.open
            .range((from, Bound::Unbounded))
            .next()
            .map(|(_, w)| *w)
    }

    /// The speed bands above the band of `speed`, fastest first, each with
    /// the fastest speed it may hold and its workers of known free time,
    /// soonest free first. (Hosts of the same band, within a factor
    /// [`BAND`], count as no faster.)
    pub fn faster_than(
        &self,
        speed: f64,
    ) -> impl Iterator<Item = (f64, impl Iterator<Item = (WorkerId, &Slot)> + '_)> + '_ {
        self.by_speed
            .range(..Reverse(band(speed)))
            .map(|(Reverse(b), group)| {
                (
                    band_top(*b),
                    group.iter().map(|(_, w)| (*w, &self.slots[w])),
                )
            })
    }

    /// Checks the orders against the slots. Panics naming the broken invariant.
    pub fn check(&self) {
        let timed = self
            .slots
            .values()
            .filter(|s| end_key(s.load).is_some())
            .count();
        let grouped: usize = self.by_speed.values().map(BTreeSet::len).sum();
        assert_eq!(grouped, timed, "board: speed groups");
        let open = self.slots.values().filter(|s| s.open).count();
        assert_eq!(open, self.open.len(), "board: open slots");
        assert_eq!(open, self.open_by_id.len(), "board: open slots by id");
        for (Reverse(b), group) in &self.by_speed {
            for (end, w) in group {
                let slot = &self.slots[w];
                assert_eq!(band(slot.speed), *b, "board: {w} speed band");
                assert_eq!(end_key(slot.load), Some(*end), "board: {w} free time");
            }
        }
    }
}
