//! The main job: the shape of the CARMI/WoDi paper's materials-science
//! application (its Section 4) on an embedded pool of 16 hosts of varied
//! speeds whose owners come and go.
//!
//! The master runs 35 cycles of 31 steps. Step times follow
//! [`wodi::profile::materials`] (a few steps near six minutes, many under
//! two, about 4% noise from cycle to cycle), scaled down by `--scale`
//! (default 1/300) so that the run takes about a minute; the owners' time
//! runs faster by the same factor, so they churn during that minute.
//!
//! The worker is honest about what it does: a step of W seconds of speed-1
//! work takes W / Speed seconds on its host (`Speed` from the machine ad),
//! and during that time it computes a real eigenvalue
//! ([`wodi_examples::kernels::chain_eigen`]) for 5% of every 2 ms slice and
//! sleeps the rest, since 16 hosts share the machine's cores. The CPU time
//! and efficiency it reports are therefore about 5% of what a real
//! application would show; the run's shape (cycles, hosts added, suspended
//! and lost, steps re-sent) is the real thing.
//!
//! At the end it prints the paper's quantities and writes
//! `materials-timeline.svg` and `materials-stats.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use wodi::master::{Master, StepOutcome};
use wodi::{CycleId, StepId};
use wodi_examples::progress::CycleProgress;
use wodi_examples::{
    Embedded, PoolArgs, RunPool, duty_cycled_work, host_speed, say, table, timeline,
};

/// Dispatch order of a cycle's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Ordering {
    /// Submission order (the paper's original WoDi).
    None,
    /// Longest step first, by history.
    Lpt,
}

/// The materials-science job on an embedded (or given) pool.
#[derive(Parser, Debug)]
#[command(name = "materials", version)]
struct Args {
    /// Cycles to run.
    #[arg(long, default_value_t = 35)]
    cycles: u64,
    /// Hosts to ask for (and, for the embedded pool, hosts in the pool).
    #[arg(long, default_value_t = 16)]
    hosts: u32,
    /// Factor applied to the paper-scale step times (and, inverted, to the owners' clock).
    #[arg(long, default_value_t = 1.0 / 300.0)]
    scale: f64,
    /// Seed of the step times, the owners and the machine ads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Owner model of the embedded pool: stochastic, none or trace:FILE.
    #[arg(long, default_value = "stochastic")]
    owners: String,
    /// Dispatch order.
    #[arg(long, value_enum, default_value_t = Ordering::Lpt)]
    ordering: Ordering,
    /// Where to run (default: an embedded pool).
    #[command(flatten)]
    pool: PoolArgs,
    /// Folder for the SVG timeline and the JSON statistics.
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

/// One step: speed-1 seconds of work and the kernel's wave number.
#[derive(Serialize, Deserialize)]
struct Work {
    seconds: f64,
    k: f64,
}

fn main() -> anyhow::Result<()> {
    wodi::enter();
    if wodi::worker::started_as_worker() {
        return worker();
    }
    let args = Args::parse();
    anyhow::ensure!(args.scale > 0.0, "--scale must be positive");
    anyhow::ensure!(args.hosts > 0, "--hosts must be positive");
    let embedded = Embedded {
        hosts: args.hosts as usize,
        owners: wodi_examples::owner_model(&args.owners)?,
        speedup: 1.0 / args.scale,
        seed: args.seed,
    };
    let stats = wodi_examples::run_on_pool(&args.pool, embedded, async |pool| {
        if let Some(p) = &pool.embedded {
            say(&format!(
                "embedded pool: {} hosts, owners {}, owner clock x{:.0}",
                p.hosts().len(),
                args.owners,
                1.0 / args.scale
            ));
        }
        run(&args, pool).await
    })?;
    write_results(&args, &stats)
}

/// The worker: emulates its host's speed with duty-cycled real work.
fn worker() -> anyhow::Result<()> {
    let speed = host_speed();
    wodi::worker::Worker::new()
        .on_step(move |_, w: Work| {
            let wall = Duration::from_secs_f64((w.seconds / speed).max(0.0));
            Ok(duty_cycled_work(w.k, wall))
        })
        .run()
}

/// Writes the picture and the statistics of the run, then prints its table.
fn write_results(args: &Args, stats: &wodi::Stats) -> anyhow::Result<()> {
    // The files first: a reader of stdout that went away (`| head`) must
    // not cost the run's results.
    std::fs::create_dir_all(&args.out)?;
    let svg = args.out.join("materials-timeline.svg");
    let json = args.out.join("materials-stats.json");
    let title = format!(
        "materials: {} cycles of 31 steps, {} hosts asked, scale {:.4}",
        args.cycles, args.hosts, args.scale
    );
    std::fs::write(
        &svg,
        timeline::svg(&wodi_examples::timeline_of(stats, &title)),
    )?;
    std::fs::write(&json, serde_json::to_vec_pretty(stats)?)?;
    say(&format!(
        "\nrun finished\n{}\ntimeline:   {}\nstatistics: {}",
        table(stats),
        svg.display(),
        json.display()
    ));
    Ok(())
}

/// Runs every cycle and returns the run's statistics.
async fn run(args: &Args, pool: &RunPool) -> anyhow::Result<wodi::Stats> {
    let mut cfg = pool.master_config(args.hosts)?;
    cfg.ordering = match args.ordering {
        Ordering::None => wodi::order::Ordering::Arrival,
        Ordering::Lpt => wodi::order::Ordering::LongestFirst,
    };
    // The workers emulate their host's `Speed` by the clock: the ad gives
    // each host's speed up front, and wall time is what a step costs.
    cfg.speed = wodi::speed::SpeedSource::MachineAd {
        attribute: "Speed".into(),
        reference: Some(1.0),
    };
    cfg.learn_from_wall = true;
    let mut master = Master::init(cfg, &()).await?;
    let profile = wodi::profile::scaled(&wodi::profile::materials(), args.scale);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let total = args.cycles * profile.len() as u64;
    let mut progress = CycleProgress::new(args.cycles, total, master.watch_status());
    for c in 0..args.cycles {
        let cycle = CycleId(c);
        master.begin_cycle(cycle, &())?;
        let times = wodi::profile::sample_cycle(&profile, &mut rng);
        progress.begin(c, times.len() as u64);
        for (i, seconds) in times.iter().enumerate() {
            let work = Work {
                seconds: *seconds,
                k: 0.1 * (i as f64 + 1.0) + 0.01 * c as f64,
            };
            master.send_work(StepId(i as u64), &work)?;
        }
        let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
        while seen.len() < times.len() {
            match master.recv_result::<f64>().await? {
                StepOutcome::Done(step, lambda) => {
                    anyhow::ensure!(
                        lambda.is_finite(),
                        "cycle {c} step {step}: eigenvalue {lambda}"
                    );
                    *seen.entry(step.0).or_default() += 1;
                    progress.step_done();
                }
                StepOutcome::Failed(step, why) => {
                    anyhow::bail!("cycle {c} step {step} failed: {why}")
                }
            }
        }
        anyhow::ensure!(
            seen.values().all(|&n| n == 1),
            "cycle {c}: a step came back twice"
        );
        master.end_cycle(cycle, &())?;
        progress.end(c);
    }
    progress.finish();
    Ok(master.complete().await?)
}
