//! The "hello world" of WoDi: a Monte Carlo estimate of pi in one cycle of
//! many steps. Step `i` counts how many of `--samples` seeded random points
//! of the unit square fall inside the quarter circle; the master adds the
//! counts. Runs on a small embedded pool (4 hosts, no owners) unless given
//! `--local HOST:PORT` (a real pool's local RM).

use clap::Parser;
use wodi::StepId;
use wodi::master::{Master, StepOutcome};
use wodi_examples::{Embedded, PoolArgs, RunPool, kernels};

/// Estimates pi with WoDi workers.
#[derive(Parser, Debug)]
#[command(name = "pi", version)]
struct Args {
    /// Steps (each one seeded differently).
    #[arg(long, default_value_t = 64)]
    steps: u64,
    /// Random points per step.
    #[arg(long, default_value_t = 1_000_000)]
    samples: u64,
    /// Workers to ask for (and hosts of the embedded pool).
    #[arg(long, default_value_t = 4)]
    hosts: u32,
    /// Base seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Where to run (default: an embedded pool).
    #[command(flatten)]
    pool: PoolArgs,
}

fn main() -> anyhow::Result<()> {
    wodi::enter();
    if wodi::worker::started_as_worker() {
        // A step is (seed, samples); its result the number of hits.
        return wodi::worker::Worker::new()
            .on_step(|_, (seed, samples): (u64, u64)| Ok(kernels::pi_hits(seed, samples)))
            .run();
    }
    let args = Args::parse();
    let embedded = Embedded {
        seed: args.seed,
        ..Embedded::idle(args.hosts as usize)
    };
    let (pi, stats) = wodi_examples::run_on_pool(&args.pool, embedded, async |pool| {
        estimate(&args, pool).await
    })?;
    println!(
        "pi ~ {pi:.6} from {} points in {} steps ({:.1} s, {} workers)",
        args.steps * args.samples,
        stats.steps_delivered,
        stats.execution_time_s,
        stats.hosts.added
    );
    Ok(())
}

async fn estimate(args: &Args, pool: &RunPool) -> anyhow::Result<(f64, wodi::Stats)> {
    let mut master = Master::init(pool.master_config(args.hosts)?, &()).await?;
    for i in 0..args.steps {
        master.send_work(
            StepId(i),
            &(
                args.seed.wrapping_mul(1_000_003).wrapping_add(i),
                args.samples,
            ),
        )?;
    }
    let mut hits = 0u64;
    for _ in 0..args.steps {
        match master.recv_result::<u64>().await? {
            StepOutcome::Done(_, h) => hits += h,
            StepOutcome::Failed(step, why) => anyhow::bail!("step {step} failed: {why}"),
        }
    }
    let stats = master.complete().await?;
    Ok((
        4.0 * hits as f64 / (args.steps * args.samples) as f64,
        stats,
    ))
}
