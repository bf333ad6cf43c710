//! The adaptive prefetch rule alone, then the core driven with it in
//! virtual time: short steps fill a worker's hand, long ones keep one step
//! per worker (and so WoDi's longest-first placement).

use std::time::Duration;

use carmi_proto::ids::HostId;

use super::*;
use crate::ids::{StepId, WorkerId};
use crate::order::LongestFirst;
use crate::sched::{Output, Sched, SchedConfig};

const MS: Duration = Duration::from_millis(1);

#[test]
fn unknown_times_or_no_room_keep_the_configured_prefetch() {
    assert_eq!(window(1, 8, None, None), 1);
    assert_eq!(window(1, 8, Some(1e-5), None), 1);
    assert_eq!(window(1, 8, None, Some(1e-3)), 1);
    assert_eq!(window(2, 8, None, None), 2);
    // No adaptation asked for: `prefetch_max` at or below `prefetch`.
    assert_eq!(window(1, 1, Some(0.0), Some(1e-3)), 1);
    assert_eq!(window(3, 0, Some(0.0), Some(1e-3)), 3);
    assert_eq!(window(0, 0, None, None), 1, "at least one step");
    assert_eq!(window(1, 8, Some(f64::NAN), Some(1e-3)), 1);
    assert_eq!(window(1, 8, Some(1e-5), Some(0.0)), 1);
}

#[test]
fn long_steps_hold_one_and_short_ones_just_enough_to_hide_the_trip() {
    // A 1 ms trip against 1 s steps costs 0.1% of the worker's time.
    assert_eq!(window(1, 8, Some(1.0), Some(1e-3)), 1);
    // At the share exactly (trip / (step + trip) = 5%) one step still.
    assert_eq!(window(1, 8, Some(0.019), Some(0.001)), 1);
    // Just above it: 1 + ceil(trip / step) = 2.
    assert_eq!(window(1, 8, Some(0.018), Some(0.001)), 2);
    assert_eq!(window(1, 8, Some(1e-4), Some(3e-4)), 4);
    assert_eq!(
        window(1, 8, Some(1e-5), Some(3e-4)),
        8,
        "capped at the most"
    );
    assert_eq!(window(1, 8, Some(0.0), Some(3e-4)), 8, "empty steps");
    // The configured prefetch is a floor.
    assert_eq!(window(3, 8, Some(1e-4), Some(1e-4)), 3);
}

#[test]
fn the_window_never_grows_as_steps_lengthen() {
    for trip in [1e-5, 1e-4, 1e-3, 1e-2] {
        let mut last = u32::MAX;
        for i in 0..200 {
            let step = 1e-7 * 1.1f64.powi(i);
            let w = window(1, 16, Some(step), Some(trip));
            assert!(w <= last, "trip {trip}, step {step}: {w} after {last}");
            assert!((1..=16).contains(&w));
            last = w;
        }
        assert_eq!(last, 1, "trip {trip}: long steps end at one");
    }
}

#[test]
fn pace_measures_the_trip_only_from_a_step_sent_to_an_idle_worker() {
    let mut p = Pace::default();
    let t0 = Duration::ZERO;
    p.assigned(Ticket(0), true, None, t0);
    p.assigned(Ticket(1), false, None, t0);
    // Ticket 0: 2 ms after it was sent, of which 0.1 ms computing.
    p.answered(Ticket(0), Duration::from_micros(100), t0 + 2 * MS);
    assert_eq!(p.trip_s.map(|t| (t * 1e6).round()), Some(1900.0));
    // Ticket 1 waited in the worker's queue: no trip from it.
    p.answered(Ticket(1), Duration::from_micros(100), t0 + 10 * MS);
    assert_eq!(p.trip_s.map(|t| (t * 1e6).round()), Some(1900.0));
    assert_eq!(p.window(1, 8), 8);
    // A step sent before a suspension measures no trip.
    p.assigned(Ticket(2), true, None, t0 + 10 * MS);
    p.interrupted();
    p.answered(Ticket(2), Duration::from_micros(100), t0 + 60_000 * MS);
    assert_eq!(p.trip_s.map(|t| (t * 1e6).round()), Some(1900.0));
}

/// A core with one class of `n` joined workers on hosts of speed 1.
fn core(prefetch: u32, prefetch_max: u32, n: u64) -> (Sched, Vec<WorkerId>) {
    let cfg = SchedConfig {
        prefetch,
        prefetch_max,
        ..SchedConfig::default()
    };
    let mut s = Sched::new(cfg, Box::new(LongestFirst));
    s.set_class("c", n as u32, Duration::ZERO);
    let mut workers = Vec::new();
    for i in 0..n {
        s.host_added(HostId(i), "c", Some(1.0), Duration::ZERO);
    }
    while let Some(o) = s.poll_output() {
        if let Output::Spawn { worker, .. } = o {
            s.worker_joined(worker, Duration::ZERO);
            workers.push(worker);
        }
    }
    while s.poll_output().is_some() {}
    (s, workers)
}

/// The assignments among the outputs, as (ticket, step, worker).
fn assigned(s: &mut Sched) -> Vec<(Ticket, u64, WorkerId)> {
    s.sanity_check();
    std::iter::from_fn(|| s.poll_output())
        .filter_map(|o| match o {
            Output::Assign {
                ticket,
                step,
                worker,
            } => Some((ticket, step.0, worker)),
            _ => None,
        })
        .collect()
}

#[test]
fn short_steps_fill_a_workers_hand_once_the_trip_is_measured() {
    let (mut s, w) = core(1, 8, 1);
    for i in 0..100 {
        s.submit(StepId(i), None, Duration::ZERO);
    }
    s.dispatch(Duration::ZERO);
    let first = assigned(&mut s);
    assert_eq!(first.len(), 1, "nothing measured yet: one step");
    // Answered 1 ms later after 10 us of compute: the trip dominates.
    let now = MS;
    s.result(
        w[0],
        first[0].0,
        Duration::ZERO,
        Duration::from_micros(10),
        now,
    );
    let next = assigned(&mut s);
    assert_eq!(next.len(), 8, "the hand fills to the most: {next:?}");
    // Each answer frees one place, which is taken again at once.
    s.result(
        w[0],
        next[0].0,
        Duration::ZERO,
        Duration::from_micros(10),
        now,
    );
    assert_eq!(assigned(&mut s).len(), 1);
}

#[test]
fn without_adaptation_short_steps_go_one_at_a_time() {
    let (mut s, w) = core(1, 1, 1);
    for i in 0..100 {
        s.submit(StepId(i), None, Duration::ZERO);
    }
    s.dispatch(Duration::ZERO);
    let first = assigned(&mut s);
    s.result(
        w[0],
        first[0].0,
        Duration::ZERO,
        Duration::from_micros(10),
        MS,
    );
    assert_eq!(assigned(&mut s).len(), 1);
}

#[test]
fn long_steps_keep_one_per_worker_and_the_longest_goes_first() {
    let (mut s, _) = core(1, 8, 2);
    // A first cycle teaches the history: step i takes i + 1 seconds, each
    // answered 1 ms (the trip) after its compute ends.
    let mut now = Duration::ZERO;
    for i in 0..6 {
        s.submit(StepId(i), None, now);
    }
    s.dispatch(now);
    let mut running: Vec<(Duration, Ticket, u64, WorkerId)> = Vec::new();
    let start = |running: &mut Vec<_>, s: &mut Sched, now: Duration| {
        let more = assigned(s);
        assert!(more.len() <= 2, "one step per worker: {more:?}");
        for (ticket, step, worker) in more {
            let end = now + Duration::from_secs(step + 1) + MS;
            running.push((end, ticket, step, worker));
        }
        running.sort_by_key(|r| std::cmp::Reverse(r.0));
    };
    start(&mut running, &mut s, now);
    let mut done = 0;
    while let Some((end, ticket, step, worker)) = running.pop() {
        now = end;
        let took = Duration::from_secs(step + 1);
        s.result(worker, ticket, took, took, now);
        done += 1;
        start(&mut running, &mut s, now);
        assert!(running.len() <= 2, "one step per worker: {running:?}");
    }
    assert_eq!(done, 6);
    // The next cycle: each worker holds one step, the longest ones first.
    for i in 0..6 {
        s.submit(StepId(i), None, now);
    }
    s.dispatch(now);
    let mut steps: Vec<u64> = assigned(&mut s).iter().map(|a| a.1).collect();
    steps.sort_unstable();
    assert_eq!(steps, vec![4, 5], "the two longest, one per worker");
}

#[test]
fn a_long_step_closes_a_hand_that_short_steps_opened() {
    let (mut s, w) = core(1, 8, 1);
    // Step 0 takes 10 s (answered 1 ms after it ends: the trip).
    let t = s.submit(StepId(0), None, Duration::ZERO);
    s.dispatch(Duration::ZERO);
    assert_eq!(assigned(&mut s).len(), 1);
    let ten = Duration::from_secs(10);
    let mut now = ten + MS;
    s.result(w[0], t, ten, ten, now);
    // Then 100 steps of 10 us, answered in order: the worker's hand opens.
    for i in 1..=100 {
        s.submit(StepId(i), None, now);
    }
    s.dispatch(now);
    let mut hand: std::collections::VecDeque<Ticket> =
        assigned(&mut s).into_iter().map(|a| a.0).collect();
    let mut widest = 0;
    while let Some(ticket) = hand.pop_front() {
        now += Duration::from_micros(100);
        s.result(w[0], ticket, Duration::ZERO, Duration::from_micros(10), now);
        hand.extend(assigned(&mut s).into_iter().map(|a| a.0));
        widest = widest.max(hand.len());
    }
    assert_eq!(widest, 8, "short steps opened the hand to the most");
    // Six copies of the long step: the first closes the hand behind it
    // (the history expects 10 s), the others wait for the answer.
    for _ in 0..6 {
        s.submit(StepId(0), None, now);
    }
    s.dispatch(now);
    assert_eq!(assigned(&mut s).len(), 1, "one long step at a time");
}
