//! `wodi-bench`: throughput and latency of WoDi on one machine.
//!
//! Starts a local test pool of `--workers` one-slot machines (or uses
//! `--pool ADDR --secret FILE`), runs `--steps` steps of `--payload` bytes
//! through that many workers (the worker echoes nothing back, so MB/s counts
//! step data), then `--latency-steps` single steps one at a time. This one
//! executable is master, server (`wodi::enter`) and worker (`--worker`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use wodi::StepId;
use wodi::master::{Master, MasterConfig, PoolAddr, StepOutcome};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Measure WoDi step throughput, round-trip latency and payload throughput"
)]
struct Args {
    /// Workers (one per pool machine).
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Steps in the throughput run.
    #[arg(long, default_value_t = 200_000)]
    steps: u64,
    /// Bytes of data per step.
    #[arg(long, default_value_t = 0)]
    payload: usize,
    /// Steps in flight per worker in the throughput run.
    #[arg(long, default_value_t = 64)]
    prefetch: u32,
    /// Single steps timed one at a time.
    #[arg(long, default_value_t = 2_000)]
    latency_steps: u64,
    /// Local RM of an existing pool (default: start an embedded pool in this process).
    #[arg(long, requires = "secret")]
    pool: Option<String>,
    /// Secret file of that pool.
    #[arg(long)]
    secret: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Run as a worker (the server starts workers this way).
    #[arg(long, hide = true)]
    worker: bool,
}

fn main() -> anyhow::Result<()> {
    wodi::enter();
    if wodi::worker::started_as_worker() {
        return wodi::worker::Worker::new()
            .on_step_raw(|_, _| Ok(Vec::new()))
            .run();
    }
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(bench(args))
}

async fn run_master(args: &Args, pool: PoolAddr, prefetch: u32) -> anyhow::Result<Master> {
    let mut cfg = MasterConfig::new(
        std::env::current_exe()?,
        vec!["--worker".into()],
        "true",
        args.workers,
    );
    cfg.pool = Some(pool);
    cfg.prefetch = prefetch;
    Ok(Master::init_raw(cfg, Bytes::new()).await?)
}

async fn expect_done(master: &mut Master) -> anyhow::Result<()> {
    match master.recv_result_raw().await? {
        StepOutcome::Done(..) => Ok(()),
        StepOutcome::Failed(step, why) => anyhow::bail!("{step} failed: {why}"),
    }
}

async fn bench(args: Args) -> anyhow::Result<()> {
    // An embedded pool (no owners) lives as long as this function.
    let _pool;
    let pool = match (&args.pool, &args.secret) {
        (Some(local), Some(secret)) => PoolAddr {
            local: local.clone(),
            secret_file: secret.clone(),
            token_file: None,
        },
        _ => {
            let p = carmi_pool::EmbeddedPool::start(carmi_pool::PoolOptions {
                hosts: args.workers as usize,
                ..carmi_pool::PoolOptions::default()
            })
            .await?;
            let addr = PoolAddr {
                local: p.submit_addr().to_string(),
                secret_file: p.secret_file().to_path_buf(),
                token_file: Some(p.token_file().to_path_buf()),
            };
            _pool = p;
            addr
        }
    };
    let data = Bytes::from(vec![7u8; args.payload]);

    // Throughput: keep a window of steps in flight so the workers never wait.
    let mut master = run_master(&args, pool.clone(), args.prefetch).await?;
    // Warm up until every worker has joined and answered.
    for i in 0..(args.workers as u64 * 4) {
        master.send_work_raw(StepId(i), data.clone());
    }
    for _ in 0..(args.workers as u64 * 4) {
        expect_done(&mut master).await?;
    }
    let window = (args.workers as u64 * args.prefetch as u64 * 2).max(4);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut received = 0u64;
    while received < args.steps {
        while sent < args.steps && sent - received < window {
            master.send_work_raw(StepId(sent), data.clone());
            sent += 1;
        }
        expect_done(&mut master).await?;
        received += 1;
    }
    let elapsed = start.elapsed();
    master.complete().await?;
    let steps_per_s = args.steps as f64 / elapsed.as_secs_f64();
    let mb_per_s = (args.steps as f64 * args.payload as f64) / elapsed.as_secs_f64() / 1e6;

    // Latency: one step at a time, master to worker and back.
    let mut master = run_master(&args, pool, 1).await?;
    for i in 0..(args.workers as u64 * 2) {
        master.send_work_raw(StepId(i), data.clone());
        expect_done(&mut master).await?;
    }
    let mut lat: Vec<Duration> = Vec::with_capacity(args.latency_steps as usize);
    for i in 0..args.latency_steps {
        let t = Instant::now();
        master.send_work_raw(StepId(i), data.clone());
        expect_done(&mut master).await?;
        lat.push(t.elapsed());
    }
    master.complete().await?;
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize)
            .map(|d| d.as_secs_f64() * 1e6)
            .unwrap_or(0.0)
    };
    let (p50, p99) = (pct(0.5), pct(0.99));
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "workers": args.workers,
                "steps": args.steps,
                "payload_bytes": args.payload,
                "steps_per_s": steps_per_s.round(),
                "latency_us_p50": p50.round(),
                "latency_us_p99": p99.round(),
                "mb_per_s": (mb_per_s * 10.0).round() / 10.0,
            })
        );
    } else {
        println!(
            "{} workers, {} steps of {} bytes: {:.0} steps/s, {:.1} MB/s; round trip p50 {:.0} us, p99 {:.0} us",
            args.workers, args.steps, args.payload, steps_per_s, mb_per_s, p50, p99
        );
    }
    Ok(())
}
