//! Adaptive prefetch: how many steps a worker holds at once, from how long
//! its steps take against the round trip to it.
//!
//! A worker holding one step waits a round trip between two steps (its
//! result to the server, the next step back): with steps of `s` seconds and
//! a trip of `r`, it computes `s / (s + r)` of the time. Holding `k` steps
//! hides the trip once `(k - 1) * s >= r`. Holding more than one has a
//! price, though: a step in a worker's hand is committed to that host before
//! its turn comes, so WoDi's longest-first order and its placement of long
//! steps on the fastest hosts are exact only at one step per worker. So a
//! worker holds the configured `prefetch` while the trip costs it at most
//! [`TRIP_SHARE`] of its time (steps long against the trip: placement
//! matters, the trip does not), and otherwise just enough steps to hide the
//! trip, at most `prefetch_max` (very short steps: the trip is the cost).
//!
//! [`window`] is the rule, a pure function; [`Pace`] is what the core
//! measures per worker to feed it.

use std::time::Duration;

use super::{Ticket, Time};

/// The share of a worker's time a round trip may take before the worker is
/// given more than `prefetch` steps: below it, the placement that one step
/// at a time keeps is worth more than the trip it costs.
pub const TRIP_SHARE: f64 = 0.05;

/// Weight of a new measurement in a worker's running step time and trip.
const WEIGHT: f64 = 0.25;

/// Steps a worker may hold: `min` (the configured `prefetch`, at least 1)
/// when `max <= min`, when either time is unknown, or when a trip of
/// `trip_s` seconds costs a worker whose steps take `step_s` at most
/// [`TRIP_SHARE`] of its time; else `1 + ceil(trip_s / step_s)` (the steps
/// that keep it computing through one trip), within `min..=max`.
pub fn window(min: u32, max: u32, step_s: Option<f64>, trip_s: Option<f64>) -> u32 {
    let min = min.max(1);
    if max <= min {
        return min;
    }
    let (Some(step), Some(trip)) = (step_s, trip_s) else {
        return min;
    };
    if !step.is_finite() || !trip.is_finite() || trip <= 0.0 {
        return min;
    }
    let step = step.max(0.0);
    if trip <= TRIP_SHARE * (step + trip) {
        return min;
    }
    if step <= 0.0 {
        return max;
    }
    let need = 1.0 + (trip / step).ceil();
    if need >= f64::from(max) {
        max
    } else {
        (need as u32).clamp(min, max)
    }
}

/// One worker's measured pace: its running step time and round trip.
#[derive(Clone, Debug, Default)]
pub struct Pace {
    /// Running mean of the wall time the worker reports per step, seconds.
    step_s: Option<f64>,
    /// Running mean of the round trip, seconds: the time from handing a
    /// step to the worker while it held none to its result, less the step's
    /// own wall time.
    trip_s: Option<f64>,
    /// The ticket handed over while the worker held none, and when: its
    /// answer measures a round trip. A step handed to a worker that is
    /// still busy waits in its queue, which is no part of the trip.
    probe: Option<(Ticket, Time)>,
}

fn mix(old: Option<f64>, new: f64) -> Option<f64> {
    Some(old.map_or(new, |o| o + WEIGHT * (new - o)))
}

impl Pace {
    /// `ticket` was handed to the worker at `now`; `idle`: it held none;
    /// `expected`: the step's time on this worker by the history, if known.
    /// A step expected to take longer than the worker's running step time
    /// raises it at once: the worker's hand closes behind the first long
    /// step of a cycle instead of filling with long steps (the longest go
    /// first) on the strength of the short ones before them.
    pub fn assigned(&mut self, ticket: Ticket, idle: bool, expected: Option<f64>, now: Time) {
        if idle {
            self.probe = Some((ticket, now));
        }
        if let (Some(e), Some(step)) = (expected, self.step_s)
            && e.is_finite()
            && e > step
        {
            self.step_s = Some(e);
        }
    }

    /// The worker answered `ticket` at `now`, reporting `wall` for the step.
    pub fn answered(&mut self, ticket: Ticket, wall: Duration, now: Time) {
        let wall_s = wall.as_secs_f64();
        self.step_s = mix(self.step_s, wall_s);
        if let Some((probe, sent)) = self.probe
            && probe == ticket
        {
            self.probe = None;
            let trip = now.saturating_sub(sent).as_secs_f64() - wall_s;
            self.trip_s = mix(self.trip_s, trip.max(0.0));
        }
    }

    /// The worker stopped computing for a reason other than the trip (its
    /// host was suspended, its connection dropped): the step in flight
    /// measures no round trip.
    pub fn interrupted(&mut self) {
        self.probe = None;
    }

    /// Steps the worker may hold now, by [`window`].
    pub fn window(&self, min: u32, max: u32) -> u32 {
        window(min, max, self.step_s, self.trip_s)
    }
}

#[cfg(test)]
#[path = "pace_tests.rs"]
mod tests;
