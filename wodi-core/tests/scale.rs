//! Placement at scale (issue 24 item 4): LongestFirst orders the whole
//! queue, not its first thousand steps, so long steps submitted late are not
//! hidden, and a cycle of thousands of steps on a thousand hosts ends near
//! its lower bound. Pure and in virtual time: seconds in a debug build.

#[path = "support/cycle.rs"]
mod cycle;

use std::time::Duration;

use cycle::Pool;
use rand::SeedableRng;
use rand::rngs::StdRng;
use wodi_core::ids::StepId;
use wodi_core::order::Ordering;
use wodi_core::plan::{Host, list_plan, lower_bound};
use wodi_core::profile::{materials, sample_cycle};
use wodi_core::sched::Output;

/// The materials cycle stretched to `n` steps, in submission order (the
/// long steps late), as `wodi-sim --steps n` runs it.
fn profile(n: usize) -> Vec<wodi_core::profile::StepProfile> {
    let base = materials();
    (0..n).map(|i| base[i * base.len() / n]).collect()
}

/// Two cycles of `steps` steps on hosts of `speeds`: the first builds the
/// history (it goes out in submission order), the second is measured.
/// Steps take their profile's mean exactly, or (`noise`, a seed) vary by
/// the profile's spread from cycle to cycle. Returns the second cycle's
/// length over its lower bound, and the same for the offline LPT plan
/// (every step, longest first, to the host where it would end first) made
/// from the same estimates (the first cycle's times) and run with the
/// second cycle's times.
fn second_cycle(steps: usize, speeds: &[f64], noise: Option<u64>) -> (f64, f64) {
    let p = profile(steps);
    let means: Vec<f64> = p.iter().map(|s| s.mean).collect();
    let mut rng = StdRng::seed_from_u64(noise.unwrap_or(0));
    let mut sample = || match noise {
        Some(_) => sample_cycle(&p, &mut rng),
        None => means.clone(),
    };
    let mut pool = Pool::new(speeds, Ordering::LongestFirst);
    let first = sample();
    pool.cycle(&first);
    let work = sample();
    let c = pool.cycle(&work);
    pool.sched.sanity_check();
    let hosts: Vec<Host> = speeds
        .iter()
        .map(|&speed| Host {
            free_in: 0.0,
            speed,
        })
        .collect();
    let known: Vec<Option<f64>> = first.iter().map(|w| Some(*w)).collect();
    let plan = list_plan(&known, &hosts);
    let lpt = plan
        .queues
        .iter()
        .zip(speeds)
        .map(|(q, s)| q.iter().map(|&i| work[i] / s).sum::<f64>())
        .fold(0.0, f64::max);
    let bound = lower_bound(&work, speeds);
    (c.length_s / bound, lpt / bound)
}

fn varied(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 + 1.5 * i as f64 / (n - 1) as f64)
        .collect()
}

#[test]
fn a_cycle_of_4000_steps_on_1000_hosts_with_the_long_steps_last_is_within_2_percent_of_its_bound() {
    // Session 9's policy planned over the first 1,024 queued steps only:
    // 1.17 here. Full LPT: 1.011.
    let (r, lpt) = second_cycle(4000, &[1.0; 1000], None);
    assert!(r <= 1.02, "cycle over bound {r:.4} (offline LPT {lpt:.4})");
    // With steps that vary from cycle to cycle by the profile's 4%, no
    // worse than the offline plan from the same estimates.
    for seed in [1, 2] {
        let (r, lpt) = second_cycle(4000, &[1.0; 1000], Some(seed));
        assert!(
            r <= lpt * 1.005,
            "seed {seed}: {r:.4} vs offline LPT {lpt:.4}"
        );
    }
}

#[test]
fn on_hosts_of_mixed_speeds_placement_is_near_the_offline_lpt_plan() {
    // A thousand distinct speeds: past its walk of the 64 longest steps a
    // slow host takes the longest step it would end by the fluid bound,
    // which costs about 3% over the exact plan here (1.089 against 1.056).
    let (r, lpt) = second_cycle(4000, &varied(1000), None);
    assert!(
        r <= lpt * 1.04,
        "cycle over bound {r:.4} (offline LPT {lpt:.4})"
    );
}

#[test]
fn the_longest_step_submitted_last_goes_out_first_behind_3000_queued_steps() {
    for speeds in [vec![1.0; 8], varied(8)] {
        let mut pool = Pool::new(&speeds, Ordering::LongestFirst);
        // Every step has history; the longer, the later it is submitted.
        for i in 0..3000u64 {
            pool.sched
                .history_mut()
                .observe(StepId(i), 1.0 + i as f64 / 100.0, 1.0);
        }
        for i in 0..3000u64 {
            pool.sched.submit(StepId(i), None, Duration::ZERO);
        }
        pool.sched.dispatch(Duration::ZERO);
        let first: Vec<(StepId, f64)> = std::iter::from_fn(|| pool.sched.poll_output())
            .filter_map(|o| match o {
                Output::Assign { step, worker, .. } => Some((step, pool.speed[&worker])),
                _ => None,
            })
            .collect();
        assert_eq!(first.len(), 8, "one step per host");
        // The longest goes first, to the fastest host.
        let fastest = speeds.iter().copied().fold(0.0, f64::max);
        assert_eq!(first[0], (StepId(2999), fastest), "{speeds:?}");
        if speeds.iter().all(|s| *s == 1.0) {
            // On alike hosts the eight longest are the ones out (on mixed
            // ones a slow host gets a shorter step, as LPT gives it).
            let mut out: Vec<u64> = first.iter().map(|(s, _)| s.0).collect();
            out.sort_unstable();
            assert_eq!(out, (2992..3000).collect::<Vec<_>>());
        }
        pool.sched.sanity_check();
    }
}
