//! The cost curve of WoDi's placement at scale: wall time the scheduler
//! core spends per step (its submit, dispatch and result calls, one
//! placement decision per step) in one cycle of N steps on H hosts, after a
//! first cycle that builds the history, and the cycle's length over its
//! lower bound. Virtual time: no owners, no network, hosts compute exactly
//! their step's work over their speed.
//!
//! ```text
//! nice cargo run --release -p wodi-core --example sched_scale -- 1000 identical 100 1000 10000 100000
//! nice cargo run --release -p wodi-core --example sched_scale -- 1000 varied 100 1000 10000
//! ```
//!
//! Uses only calls the core has had since session 9, so the same file runs
//! against an older core (copied into a detached worktree of it) for a
//! before-and-after comparison.

#[path = "../tests/support/cycle.rs"]
mod cycle;

use rand::SeedableRng;
use rand::rngs::StdRng;
use wodi_core::order::Ordering;
use wodi_core::plan::lower_bound;
use wodi_core::profile::{materials, sample_cycle};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: sched_scale HOSTS identical|varied STEPS...");
        std::process::exit(2);
    }
    let Ok(hosts) = args[0].parse::<usize>() else {
        eprintln!("sched_scale: HOSTS must be a number, not {:?}", args[0]);
        std::process::exit(2);
    };
    let speeds: Vec<f64> = match args[1].as_str() {
        "identical" => vec![1.0; hosts],
        "varied" => (0..hosts)
            .map(|i| 0.5 + 1.5 * i as f64 / (hosts.max(2) - 1) as f64)
            .collect(),
        other => {
            eprintln!("sched_scale: speeds are identical or varied, not {other:?}");
            std::process::exit(2);
        }
    };
    println!(
        "hosts {hosts} ({}), materials profile stretched, long steps last",
        args[1]
    );
    println!(
        "{:>8} {:>14} {:>16} {:>12}",
        "steps", "us per step", "core wall s", "over bound"
    );
    for a in &args[2..] {
        let Ok(n) = a.parse::<usize>() else {
            eprintln!("sched_scale: STEPS must be numbers, not {a:?}");
            std::process::exit(2);
        };
        let base = materials();
        let profile: Vec<_> = (0..n).map(|i| base[i * base.len() / n]).collect();
        let mut rng = StdRng::seed_from_u64(1);
        let mut pool = cycle::Pool::new(&speeds, Ordering::LongestFirst);
        pool.cycle(&sample_cycle(&profile, &mut rng));
        let work = sample_cycle(&profile, &mut rng);
        let c = pool.cycle(&work);
        if std::env::var_os("SCHED_SCALE_LPT").is_some() {
            // Reference: the offline LPT plan of the estimates (cost n x hosts).
            let est: Vec<Option<f64>> = profile.iter().map(|p| Some(p.mean)).collect();
            let hs: Vec<wodi_core::plan::Host> = speeds
                .iter()
                .map(|&speed| wodi_core::plan::Host {
                    free_in: 0.0,
                    speed,
                })
                .collect();
            let means: Vec<f64> = profile.iter().map(|p| p.mean).collect();
            let lpt = wodi_core::plan::list_plan(&est, &hs).makespan();
            println!(
                "offline LPT of the means over their bound: {:.4}",
                lpt / lower_bound(&means, &speeds)
            );
        }
        let per = c.core_wall.as_secs_f64() / n as f64 * 1e6;
        let ratio = c.length_s / lower_bound(&work, &speeds);
        println!(
            "{n:>8} {per:>14.2} {:>16.3} {ratio:>12.4}",
            c.core_wall.as_secs_f64()
        );
    }
}
