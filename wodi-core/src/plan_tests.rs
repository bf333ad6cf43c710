use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn idle(speeds: &[f64]) -> Vec<Host> {
    speeds
        .iter()
        .map(|&speed| Host {
            free_in: 0.0,
            speed,
        })
        .collect()
}

fn known(work: &[f64]) -> Vec<Option<f64>> {
    work.iter().map(|w| Some(*w)).collect()
}

/// The best makespan of `work` on hosts of `speeds` by trying every assignment.
fn brute_force(work: &[f64], speeds: &[f64]) -> f64 {
    fn go(i: usize, work: &[f64], speeds: &[f64], load: &mut [f64], best: &mut f64) {
        let current = load
            .iter()
            .zip(speeds)
            .map(|(l, s)| l / s)
            .fold(0.0, f64::max);
        if current >= *best {
            return;
        }
        if i == work.len() {
            *best = current;
            return;
        }
        let mut seen_empty_speed: Vec<f64> = Vec::new();
        for h in 0..load.len() {
            // Empty hosts of equal speed are interchangeable: try one of them.
            if load[h] == 0.0 {
                if seen_empty_speed.contains(&speeds[h]) {
                    continue;
                }
                seen_empty_speed.push(speeds[h]);
            }
            load[h] += work[i];
            go(i + 1, work, speeds, load, best);
            load[h] -= work[i];
        }
    }
    let mut sorted = work.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let mut best = f64::INFINITY;
    go(0, &sorted, speeds, &mut vec![0.0; speeds.len()], &mut best);
    best
}

#[test]
fn first_observation_is_the_estimate_and_speed_normalizes_it() {
    let mut h = History::new();
    h.observe("a", 10.0, 1.0);
    h.observe("b", 10.0, 2.0);
    assert_eq!(h.estimate(&"a"), Some(10.0));
    // Ten seconds on a host twice as fast is twenty seconds of speed-1 work.
    assert_eq!(h.estimate(&"b"), Some(20.0));
    h.observe("b", 40.0, 0.5);
    assert_eq!(h.estimate(&"b"), Some(20.0));
    assert_eq!(h.find(&"b").map(|e| e.samples), Some(2));
    assert_eq!(h.estimate(&"c"), None);
}

#[test]
fn estimate_follows_a_drifting_step_and_shrugs_off_one_outlier() {
    let mut h = History::new();
    for _ in 0..10 {
        h.observe(1, 10.0, 1.0);
    }
    h.observe(1, 40.0, 1.0);
    let after_outlier = h.estimate(&1).unwrap();
    assert!(
        after_outlier < 20.0,
        "one outlier moved it to {after_outlier}"
    );
    for _ in 0..10 {
        h.observe(1, 10.0, 1.0);
    }
    // The step now takes 20 s every cycle: within four cycles the estimate is close.
    for _ in 0..4 {
        h.observe(1, 20.0, 1.0);
    }
    let drifted = h.estimate(&1).unwrap();
    assert!(drifted > 17.0, "estimate {drifted} lags the drift");
}

#[test]
fn bad_observations_are_ignored() {
    let mut h = History::new();
    h.observe(1, f64::NAN, 1.0);
    h.observe(1, 5.0, 0.0);
    h.observe(1, -1.0, 1.0);
    h.observe(1, 5.0, f64::INFINITY);
    assert!(h.is_empty());
}

#[test]
fn longest_first_puts_unknown_steps_first_in_submission_order() {
    let order = longest_first(&[Some(3.0), None, Some(9.0), None, Some(3.0), Some(5.0)]);
    assert_eq!(order, vec![1, 3, 2, 5, 0, 4]);
    assert_eq!(longest_first(&[]), Vec::<usize>::new());
}

#[test]
fn a_long_step_waits_for_a_fast_host_rather_than_run_on_an_idle_slow_one() {
    // The fast host is busy for one more second; the slow one is idle. The
    // long step still finishes sooner on the fast host (1 + 8/4 = 3 < 8).
    let hosts = [
        Host {
            free_in: 0.0,
            speed: 1.0,
        },
        Host {
            free_in: 1.0,
            speed: 4.0,
        },
    ];
    let p = plan(&known(&[8.0, 1.0]), &hosts);
    assert_eq!(p.queues, vec![vec![1], vec![0]]);
    assert_eq!(p.finish, vec![1.0, 3.0]);
    assert_eq!(p.makespan(), 3.0);
}

#[test]
fn earliest_finish_is_not_longest_to_fastest() {
    // Ranking would give the longest step to the fastest host and the next to
    // the next fastest; earliest-finish puts both long steps on the fast host
    // because the slow one would take longer with either.
    let p = plan(&known(&[4.0, 4.0, 1.0]), &idle(&[10.0, 2.0]));
    assert_eq!(p.queues[0], vec![0, 1]);
    assert_eq!(p.queues[1], vec![2]);
    assert!((p.makespan() - 0.8).abs() < 1e-12);
}

#[test]
fn unknown_steps_go_first_and_count_as_the_mean() {
    let p = plan(&[Some(2.0), None, Some(4.0)], &idle(&[1.0]));
    assert_eq!(p.queues, vec![vec![1, 2, 0]]);
    assert!((p.makespan() - 9.0).abs() < 1e-12);
    let none = plan(&[None, None], &idle(&[1.0, 1.0]));
    assert_eq!(none.makespan(), 1.0);
    assert_eq!(plan(&known(&[1.0]), &[]).makespan(), 0.0);
}

#[test]
fn plan_stays_within_the_lpt_bound_of_the_best_schedule() {
    let mut rng = StdRng::seed_from_u64(7);
    for case in 0..300 {
        let n = rng.random_range(1..=8);
        let m = rng.random_range(1..=4);
        let work: Vec<f64> = (0..n).map(|_| rng.random_range(1..=20) as f64).collect();
        let speeds: Vec<f64> = (0..m).map(|_| rng.random_range(1..=4) as f64).collect();
        let got = plan(&known(&work), &idle(&speeds)).makespan();
        let best = brute_force(&work, &speeds);
        let lb = lower_bound(&work, &speeds);
        assert!(
            lb <= best + 1e-9,
            "case {case}: bound {lb} above optimum {best}"
        );
        assert!(
            got >= best - 1e-9,
            "case {case}: {got} beats the optimum {best}"
        );
        // Gonzalez, Ibarra and Sahni: LPT on uniform machines is within 2m/(m+1).
        let factor = 2.0 * m as f64 / (m as f64 + 1.0);
        assert!(
            got <= best * factor + 1e-9,
            "case {case}: work {work:?} speeds {speeds:?}: {got} vs optimum {best}"
        );
    }
}

/// The fewest identical hosts with which some schedule meets the target.
fn fewest_brute_force(work: &[f64], tolerance: f64) -> usize {
    let longest = work.iter().copied().fold(0.0, f64::max);
    let target = longest * (1.0 + tolerance);
    (1..=work.len())
        .find(|&k| brute_force(work, &vec![1.0; k]) <= target * (1.0 + 1e-9))
        .unwrap()
}

#[test]
fn fewest_hosts_against_brute_force() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut exact = 0;
    let cases = 300;
    for case in 0..cases {
        let n = rng.random_range(1..=8);
        let work: Vec<f64> = (0..n).map(|_| rng.random_range(1..=30) as f64).collect();
        let tolerance = 0.05;
        let got = fewest_hosts(&work, &vec![1.0; n], tolerance);
        let best = fewest_brute_force(&work, tolerance);
        assert!(
            got >= best,
            "case {case}: {work:?}: {got} hosts beat the optimum {best}"
        );
        assert_eq!(
            got, best,
            "case {case}: {work:?}: {got} hosts where {best} suffice"
        );
        // What it promises: that many hosts do reach the target.
        let longest = work.iter().copied().fold(0.0, f64::max);
        let reached = plan(&known(&work), &idle(&vec![1.0; got])).makespan();
        assert!(
            reached <= longest * (1.0 + tolerance) + 1e-9 || got == n,
            "case {case}"
        );
        if got == best {
            exact += 1;
        }
    }
    assert_eq!(exact, cases);
}

#[test]
fn fewest_hosts_edge_cases() {
    assert_eq!(fewest_hosts(&[], &[1.0, 1.0], 0.05), 0);
    assert_eq!(fewest_hosts(&[5.0], &[], 0.05), 0);
    // One long step and tiny ones: the long one alone sets the time, the tiny
    // ones fit on one more host.
    assert_eq!(fewest_hosts(&[10.0, 1.0, 1.0, 1.0], &[1.0; 4], 0.0), 2);
    // Not enough hosts to reach the target: all of them.
    assert_eq!(fewest_hosts(&[5.0; 6], &[1.0; 3], 0.0), 3);
    // Mixed speeds: the fastest host runs the longest step in 4 s, and each
    // short step needs a slow host of its own to end by then.
    assert_eq!(fewest_hosts(&[8.0, 4.0, 4.0], &[1.0, 2.0, 1.0], 0.0), 3);
    assert_eq!(fewest_hosts(&[8.0, 4.0, 4.0], &[1.0, 2.0, 1.0], 0.5), 2);
}

#[test]
fn with_more_hosts_than_the_heuristic_asks_for_a_cycle_is_within_five_percent_of_the_bound() {
    let mut rng = StdRng::seed_from_u64(3);
    for case in 0..200 {
        let n = rng.random_range(5..=40);
        let work: Vec<f64> = (0..n).map(|_| rng.random_range(1.0..100.0)).collect();
        let k = fewest_hosts(&work, &vec![1.0; n], 0.05);
        for extra in 0..3 {
            let speeds = vec![1.0; k + extra];
            let got = plan(&known(&work), &idle(&speeds)).makespan();
            let lb = lower_bound(&work, &speeds);
            assert!(
                got <= lb * 1.05 + 1e-9,
                "case {case}: {} hosts: {got} vs bound {lb}",
                k + extra
            );
        }
    }
}

#[test]
fn hysteresis_follows_a_one_off_answer_only_after_patience_in_one_direction() {
    let mut h = Hysteresis::new(32, 3);
    assert_eq!(h.update(17), 17, "far off: taken at once");
    assert_eq!(h.update(18), 17);
    assert_eq!(h.update(16), 17, "a change of direction restarts the count");
    assert_eq!(h.update(17), 17);
    assert_eq!(h.update(18), 17);
    assert_eq!(h.update(18), 17);
    assert_eq!(h.update(18), 18, "three above in a row");
    assert_eq!(h.update(17), 18);
    assert_eq!(h.update(17), 18);
    assert_eq!(h.update(17), 17);
    let mut follow = Hysteresis::new(16, 0);
    assert_eq!(follow.update(15), 15);
    assert_eq!(follow.update(17), 17);
}

/// The materials profile's mean step times, seconds.
fn materials_means() -> Vec<f64> {
    crate::profile::materials().iter().map(|s| s.mean).collect()
}

#[test]
fn on_the_paper_profile_packing_beats_lpt_and_seventeen_hosts_reach_the_tolerance() {
    let work = materials_means();
    let sixteen = idle(&[1.0; 16]);
    let lpt = list_plan(&known(&work), &sixteen).makespan();
    let packed = plan(&known(&work), &sixteen).makespan();
    assert!(packed < lpt * 0.97, "packed {packed} vs LPT {lpt}");
    // 17 hosts end a cycle within 5% of its longest step (LPT alone needs 18).
    assert_eq!(fewest_hosts(&work, &[1.0; 31], 0.05), 17);
    let longest = work.iter().copied().fold(0.0, f64::max);
    let seventeen = plan(&known(&work), &idle(&[1.0; 17])).makespan();
    assert!(seventeen <= longest * 1.05, "{seventeen} vs {longest}");
    assert!(list_plan(&known(&work), &idle(&[1.0; 17])).makespan() > longest * 1.05);
}

/// The fewest hosts, fastest first from `speeds`, with which some schedule
/// ends `work` within `1 + tolerance` times its longest step on the fastest.
fn fewest_mixed_brute_force(work: &[f64], speeds: &[f64], tolerance: f64) -> usize {
    let mut speeds = speeds.to_vec();
    speeds.sort_by(|a, b| b.total_cmp(a));
    let longest = work.iter().copied().fold(0.0, f64::max);
    let target = longest / speeds[0] * (1.0 + tolerance);
    (1..=speeds.len())
        .find(|&k| brute_force(work, &speeds[..k]) <= target * (1.0 + 1e-9))
        .unwrap_or(speeds.len())
}

#[test]
fn the_saved_mixed_speed_case_needs_three_hosts_not_five() {
    // The 20 alone on the speed-1.0 host, the 29 and an 11 on a speed-1.5
    // one, the other 11 on the other speed-1.5 host: all end by 20.3.
    let speeds = [0.5, 0.5, 1.5, 1.0, 1.5];
    let work = [20.0, 11.0, 29.0, 11.0];
    assert_eq!(fewest_mixed_brute_force(&work, &speeds, 0.05), 3);
    assert_eq!(fewest_hosts(&work, &speeds, 0.05), 3);
    let reached = plan(&known(&work), &idle(&[1.5, 1.5, 1.0])).makespan();
    assert!(reached <= 29.0 / 1.5 * 1.05 + 1e-9, "{reached}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// With hosts of mixed speeds, up to 8 of them, the fewest-hosts rule
    /// answers exactly the fewest hosts with which some schedule reaches the
    /// target (brute force), and the plan WoDi runs with that many does
    /// reach it.
    #[test]
    fn fewest_hosts_with_mixed_speeds_against_brute_force(
        work in proptest::collection::vec(1u32..30, 1..9),
        speeds in proptest::collection::vec(1u32..5, 1..9),
        tolerance in proptest::sample::select(vec![0.0, 0.05, 0.2]),
    ) {
        let work: Vec<f64> = work.into_iter().map(f64::from).collect();
        let speeds: Vec<f64> = speeds.into_iter().map(|s| f64::from(s) / 2.0).collect();
        let got = fewest_hosts(&work, &speeds, tolerance);
        let best = fewest_mixed_brute_force(&work, &speeds, tolerance);
        proptest::prop_assert_eq!(got, best);
        let mut sorted = speeds.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let longest = work.iter().copied().fold(0.0, f64::max);
        let target = longest / sorted[0] * (1.0 + tolerance);
        let reached = plan(&known(&work), &idle(&sorted[..got])).makespan();
        proptest::prop_assert!(reached <= target * (1.0 + 1e-9) || got == sorted.len());
    }

    /// On up to 8 hosts, [`plan`] is as short as the best schedule.
    #[test]
    fn plan_on_few_hosts_is_optimal(
        work in proptest::collection::vec(1u32..30, 1..9),
        speeds in proptest::collection::vec(1u32..5, 2..9),
    ) {
        let work: Vec<f64> = work.into_iter().map(f64::from).collect();
        let speeds: Vec<f64> = speeds.into_iter().map(|s| f64::from(s) / 2.0).collect();
        let got = plan(&known(&work), &idle(&speeds)).makespan();
        let best = brute_force(&work, &speeds);
        proptest::prop_assert!(got <= best * (1.0 + 1e-9), "{} vs {}", got, best);
    }

    /// On large cycles of small steps, the answer is within one host of the
    /// capacity bound (so of the optimum), as the doc comment proves.
    #[test]
    fn fewest_hosts_on_large_cycles_of_small_steps_is_within_one(
        work in proptest::collection::vec(1u32..10, 40..120),
        speeds in proptest::collection::vec(1u32..5, 20..40),
        longest in 60u32..100,
    ) {
        let mut work: Vec<f64> = work.into_iter().map(f64::from).collect();
        work.push(f64::from(longest));
        let speeds: Vec<f64> = speeds.into_iter().map(|s| f64::from(s) / 2.0).collect();
        let mut sorted = speeds.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let target = f64::from(longest) / sorted[0];
        let total: f64 = work.iter().sum();
        let mut capacity = 0.0;
        let bound = sorted
            .iter()
            .position(|s| {
                capacity += s * target;
                capacity >= total
            })
            .map_or(sorted.len(), |i| i + 1);
        let got = fewest_hosts(&work, &speeds, 0.0);
        proptest::prop_assert!(got >= bound);
        let small = bound < sorted.len()
            && work
                .iter()
                .filter(|w| **w < f64::from(longest))
                .all(|w| *w * bound as f64 <= target * sorted[bound]);
        if small {
            proptest::prop_assert!(got <= bound + 1, "{} hosts, bound {}", got, bound);
        }
    }
}
