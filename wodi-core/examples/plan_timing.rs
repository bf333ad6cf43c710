//! How long planning a cycle takes, with the greedy plans alone (LPT and
//! multifit, what `plan` was before the exact search) and with `plan` as it
//! is (plus branch and bound on at most 8 hosts), and how long the
//! fewest-hosts rule takes: it runs after every cycle, and `plan` at every
//! dispatch of a small cycle. A timing, so not a test:
//!
//! ```text
//! cargo run --release -p wodi-core --example plan_timing
//! ```

use std::time::Instant;

use wodi_core::plan::{Host, fewest_hosts, list_plan, multifit, plan};
use wodi_core::profile::materials;

fn hosts(speeds: &[f64]) -> Vec<Host> {
    speeds
        .iter()
        .map(|&speed| Host {
            free_in: 0.0,
            speed,
        })
        .collect()
}

/// What `plan` was before: the better of LPT and multifit.
fn greedy(work: &[f64], hosts: &[Host]) -> f64 {
    let known: Vec<Option<f64>> = work.iter().map(|w| Some(*w)).collect();
    let lpt = list_plan(&known, hosts).makespan();
    multifit(work, hosts, lpt).map_or(lpt, |p| p.makespan().min(lpt))
}

/// What `fewest_hosts` was before: the first count, fastest first, whose
/// greedy plan meets the target.
fn greedy_fewest(work: &[f64], speeds: &[f64], tolerance: f64) -> usize {
    let mut speeds = speeds.to_vec();
    speeds.sort_by(|a, b| b.total_cmp(a));
    let longest = work.iter().copied().fold(0.0, f64::max);
    let target = longest / speeds[0] * (1.0 + tolerance) * (1.0 + 1e-9);
    (1..=speeds.len())
        .find(|&k| greedy(work, &hosts(&speeds[..k])) <= target)
        .unwrap_or(speeds.len())
}

/// Mean microseconds per call of `f` over `reps` calls, and its last answer.
fn time<T>(reps: u32, mut f: impl FnMut() -> T) -> (f64, T) {
    let start = Instant::now();
    let mut last = f();
    for _ in 1..reps {
        last = f();
    }
    (start.elapsed().as_secs_f64() * 1e6 / f64::from(reps), last)
}

fn main() {
    let work: Vec<f64> = materials().iter().map(|s| s.mean).collect();
    let known: Vec<Option<f64>> = work.iter().map(|w| Some(*w)).collect();
    let mixed = [2.0, 1.5, 1.5, 1.0, 1.0, 1.0, 0.5, 0.5];
    println!("case | greedy µs (makespan) | plan µs (makespan)");
    for k in [2usize, 4, 8, 10, 17] {
        let h = hosts(&vec![1.0; k]);
        let (tg, mg) = time(200, || greedy(&work, &h));
        let (tp, mp) = time(200, || plan(&known, &h).makespan());
        println!("materials, {k} identical hosts | {tg:.1} ({mg:.1}) | {tp:.1} ({mp:.1})");
    }
    for k in [4usize, 8] {
        let h = hosts(&mixed[..k]);
        let (tg, mg) = time(200, || greedy(&work, &h));
        let (tp, mp) = time(200, || plan(&known, &h).makespan());
        println!("materials, {k} mixed hosts | {tg:.1} ({mg:.1}) | {tp:.1} ({mp:.1})");
    }
    let small = [20.0, 11.0, 29.0, 11.0];
    let h = hosts(&[1.5, 1.5, 1.0]);
    let (tg, mg) = time(2000, || greedy(&small, &h));
    let (tp, mp) = time(2000, || plan(&small.map(Some), &h).makespan());
    println!("[20, 11, 29, 11] on [1.5, 1.5, 1] | {tg:.1} ({mg:.2}) | {tp:.1} ({mp:.2})");
    let cases = [
        (work.clone(), vec![1.0; 24], 0.4),
        (work.clone(), vec![1.0; 24], 0.05),
        (work.clone(), mixed.to_vec(), 0.4),
        (small.to_vec(), vec![0.5, 0.5, 1.5, 1.0, 1.5], 0.05),
    ];
    for (w, speeds, tol) in cases {
        let (tg, kg) = time(50, || greedy_fewest(&w, &speeds, tol));
        let (t, k) = time(50, || fewest_hosts(&w, &speeds, tol));
        println!(
            "fewest_hosts, {} steps, {} hosts, tolerance {tol} | {tg:.1} ({kg} hosts) | {t:.1} ({k} hosts)",
            w.len(),
            speeds.len()
        );
    }
}
