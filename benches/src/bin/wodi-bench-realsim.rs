//! `wodi-bench-realsim`: the same workload run for real on an embedded pool
//! and in the simulator (`wodi_sim`), cycle by cycle.
//!
//! The workload is the materials cycle (`wodi::profile::materials`, 31 steps)
//! scaled down by `--scale`, without its cycle-to-cycle noise, so both runs
//! see the same step times. The pool's hosts have the speeds of their machine
//! ads (owner-sim's varied `Speed`); the real server takes them from the ad
//! (`SpeedSource::MachineAd` on `Speed`), the simulator is given them. Real
//! workers emulate their host's speed by sleeping `work / Speed` and the
//! server learns from wall time. No owners. Cycle times are measured the
//! simulator's way: a cycle ends at its last result and the next begins
//! there; the first begins when the first step is sent to a worker.
//!
//! With `--owners` (a trace or `stochastic`, replayed `--speedup` times
//! faster, the local RMs' policy minute scaled to match) both runs see the
//! same owners: the real pool's local RMs suspend, continue and vacate the
//! workers, the simulator's cores do the same in virtual time. A real
//! worker's step then accrues work only while its process runs (it sleeps
//! in short slices and does not count a stop). Run length (first
//! assignment to last result) and efficiency (work of the delivered steps
//! on their hosts over the occupancy) are computed the same way from both
//! runs' statistics.
//!
//! Both sides run the same scheduler policies (`--policies`, a `wodi-sim`
//! preset; by default `keep`, what `MasterConfig::new` asks for). A host
//! granted during the run starts its worker in the simulator as long as
//! the real run's hosts granted after the start took, median (or
//! `--worker-startup`).
//!
//! This one executable is master, server (`wodi::enter`) and worker.

use std::time::Duration;

use carmi_pool::{EmbeddedPool, PoolOptions};
use clap::Parser;
use owner_model::OwnerModel;
use wodi::master::{Master, MasterConfig, PoolAddr, StepOutcome};
use wodi::order::Ordering;
use wodi::profile::{StepProfile, materials, scaled};
use wodi::sched::SchedConfig;
use wodi::speed::{SpeedSource, score_from_ad};
use wodi::stats::{PeriodKind, RunOutcome};
use wodi::{CycleId, Stats, StepId};
use wodi_sim::{PolicyConfig, PoolConfig, Preset, SimConfig, SimRun, simulate};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Cycle times of a real WoDi run against the simulator's prediction"
)]
struct Args {
    /// Hosts of the embedded pool (all used).
    #[arg(long, default_value_t = 8)]
    hosts: usize,
    /// Cycles of 31 steps.
    #[arg(long, default_value_t = 5)]
    cycles: u32,
    /// Factor on the materials step times (1/300: a 5.7-minute step takes 1.14 s).
    #[arg(long, default_value_t = 1.0 / 300.0)]
    scale: f64,
    /// Seed of the pool's machine ads (hence the hosts' speeds).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Let observed step times correct the speeds (the simulator knows them exactly).
    #[arg(long)]
    refine: bool,
    /// Where the real server gets host speeds: `ad` (the machine ad's
    /// `Speed`), `benchmark` (a 0.2 s step on every new worker), or `none`
    /// (unknown; only `--refine` learns them). The simulator always knows them.
    #[arg(long, default_value = "ad")]
    speed: String,
    /// Owners of the pool's machines: `none`, `stochastic` or `trace:FILE`
    /// (host 0 is the first machine).
    #[arg(long, default_value = "none")]
    owners: String,
    /// Owner seconds per wall second (the policy's minute is 60 / speedup).
    #[arg(long, default_value_t = 60.0)]
    speedup: f64,
    /// Seconds a suspended worker keeps its step before it is sent elsewhere.
    #[arg(long, default_value_t = 10.0)]
    suspend_timeout: f64,
    /// The scheduler's policies, the same on both sides (`wodi-sim
    /// --policies`): `keep` is what `MasterConfig::new` asks for
    /// (`Policies::keep_hosts`), `paper` none of them. The suspension
    /// grace stays `--suspend-timeout`.
    #[arg(long, value_enum, default_value = "keep")]
    policies: Preset,
    /// Seconds from a host granted during the run to its worker's first
    /// step, in the simulator; by default measured in the real run (the
    /// median over hosts granted after the run's first assignment; hosts
    /// granted at the start have their own delays, see `startup_offsets`).
    #[arg(long)]
    worker_startup: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write both runs' statistics (`real-stats.json`, `sim-stats.json`,
    /// WoDi's `Stats`: every step and every host's timeline) into this
    /// folder, to find where they part.
    #[arg(long)]
    dump: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    wodi::enter();
    if wodi::worker::started_as_worker() {
        let speed = std::env::var_os("CARMI_MACHINE_AD")
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|ad| score_from_ad(&ad, "Speed"))
            .unwrap_or(1.0);
        return wodi::worker::Worker::new()
            .on_step(move |_, work_s: f64| {
                compute(work_s / speed);
                Ok(())
            })
            .run();
    }
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(bench(args))
}

/// Emulates `seconds` of computing: sleeps in short slices and counts only
/// the time the process ran, so that a stop (SIGSTOP, the owner back)
/// delays the step as it would delay real work.
fn compute(seconds: f64) {
    const SLICE: f64 = 0.005;
    let mut left = seconds;
    while left > 0.0 {
        let slice = left.min(SLICE);
        let t = std::time::Instant::now();
        std::thread::sleep(Duration::from_secs_f64(slice));
        let took = t.elapsed().as_secs_f64();
        // Much longer than asked: the process was stopped meanwhile.
        left -= if took > slice + 0.05 { slice } else { took };
    }
}

/// Run length (first assignment to last result) and efficiency (work of
/// the delivered steps on their hosts' speeds over the host time allocated
/// between those two moments), the same way for the real run and the
/// simulated one.
fn length_and_efficiency(stats: &Stats, profile: &[StepProfile]) -> (f64, f64) {
    let start = stats
        .steps
        .iter()
        .map(|t| t.assigned_s)
        .fold(f64::INFINITY, f64::min);
    let end = stats
        .steps
        .iter()
        .filter_map(|t| t.end_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let work: f64 = stats
        .steps
        .iter()
        .filter(|t| t.outcome == RunOutcome::Delivered)
        .map(|t| profile[t.step.0 as usize % profile.len()].mean / t.speed.unwrap_or(1.0))
        .sum();
    // Host time allocated within the run: a real run's hosts also wait for
    // their workers to start and for the master to finish, which the
    // simulation (started at the first assignment) does not see.
    let occupancy: f64 = stats
        .timeline
        .iter()
        .flat_map(|h| &h.periods)
        .filter(|p| p.kind == PeriodKind::Allocated)
        .map(|p| (p.end_s.min(end) - p.start_s.max(start)).max(0.0))
        .sum();
    let eff = if occupancy > 0.0 {
        work / occupancy
    } else {
        0.0
    };
    (end - start, eff)
}

/// Work of the benchmark step on a speed-1 host, seconds.
const BENCHMARK_S: f64 = 0.2;

/// The workload: materials means scaled, with no noise.
fn profile(scale: f64) -> Vec<StepProfile> {
    scaled(&materials(), scale)
        .into_iter()
        .map(|s| StepProfile {
            mean: s.mean,
            std_dev: 0.0,
        })
        .collect()
}

/// Each host's extra start-up for the simulator, in the order of `speeds`
/// (hosts are matched by their speed, which the server recorded with each
/// step; the embedded pool's speeds differ). A host granted by the time of
/// the run's first assignment: when its worker took its first step, after
/// the first worker did (real workers join one by one). A host first
/// granted later (its owner was there at the start): how much longer than
/// `startup` (the simulator's start-up of a worker granted during the run)
/// its worker took from the grant to its first step. Measuring the latter
/// from the first assignment, as was done before, counted the owner's whole
/// visit as start-up on top of the simulator's own wait for that owner, so
/// that the simulator started those hosts' workers far too late.
fn startup_offsets(stats: &Stats, speeds: &[f64], startup: f64) -> Vec<f64> {
    let start = stats
        .steps
        .iter()
        .map(|t| t.assigned_s)
        .fold(f64::INFINITY, f64::min);
    speeds
        .iter()
        .map(|&s| {
            let Some(first) = stats
                .steps
                .iter()
                .filter(|t| t.speed.is_some_and(|x| (x - s).abs() < 1e-9))
                .min_by(|a, b| a.assigned_s.total_cmp(&b.assigned_s))
            else {
                return 0.0;
            };
            let granted = stats
                .timeline
                .iter()
                .filter(|row| row.host == first.host)
                .flat_map(|row| &row.periods)
                .filter(|p| p.kind == PeriodKind::Allocated)
                .map(|p| p.start_s)
                .fold(f64::INFINITY, f64::min);
            if granted <= start || !granted.is_finite() {
                first.assigned_s - start
            } else {
                (first.assigned_s - granted - startup).max(0.0)
            }
        })
        .collect()
}

/// Each cycle's length from the server's records: from the previous cycle's
/// last result (the first cycle: its first assignment) to its own last one.
fn real_cycles(stats: &Stats, cycles: u32) -> Vec<f64> {
    let mut out = Vec::new();
    let mut start = stats
        .steps
        .iter()
        .map(|t| t.assigned_s)
        .fold(f64::INFINITY, f64::min);
    for c in 0..u64::from(cycles) {
        let end = stats
            .steps
            .iter()
            .filter(|t| t.cycle == Some(CycleId(c)) && t.outcome == RunOutcome::Delivered)
            .filter_map(|t| t.end_s)
            .fold(f64::NEG_INFINITY, f64::max);
        out.push(end - start);
        start = end;
    }
    out
}

/// The policies a master asks for to run `sched` and the host count rule of
/// `sim` (as `wodi-sim` hands them to the server core), so both sides run
/// the very same ones.
fn policies_of(sim: &SimConfig) -> wodi::proto::Policies {
    sim.policies()
}

/// The real run's worker start-up for hosts granted during the run: from
/// a host's allocation to its first step, the median over hosts whose
/// allocation began after `after` (the first assignment), or over every
/// host when none was granted after it. `None` if no host took a step.
fn measured_startup(stats: &Stats, after: f64) -> Option<f64> {
    let later = delays_from_grant(stats, after);
    let mut delays = if later.is_empty() {
        delays_from_grant(stats, f64::NEG_INFINITY)
    } else {
        later
    };
    delays.sort_by(f64::total_cmp);
    delays.get(delays.len() / 2).copied()
}

/// From allocation to first step of each host allocated after `after`.
fn delays_from_grant(stats: &Stats, after: f64) -> Vec<f64> {
    stats
        .timeline
        .iter()
        .filter_map(|row| {
            let at = |k: PeriodKind| {
                row.periods
                    .iter()
                    .filter(|p| p.kind == k)
                    .map(|p| p.start_s)
                    .fold(f64::INFINITY, f64::min)
            };
            let (granted, busy) = (at(PeriodKind::Allocated), at(PeriodKind::Busy));
            (granted > after && busy.is_finite()).then_some(busy - granted)
        })
        .collect()
}

async fn run_real(
    args: &Args,
    pool: PoolAddr,
    profile: &[StepProfile],
    policies: wodi::proto::Policies,
) -> anyhow::Result<Stats> {
    let mut cfg = MasterConfig::new(std::env::current_exe()?, Vec::new(), "true", 0);
    cfg.classes[0].count = args.hosts as u32;
    cfg.pool = Some(pool);
    cfg.speed = match args.speed.as_str() {
        "ad" => SpeedSource::MachineAd {
            attribute: "Speed".into(),
            reference: Some(1.0),
        },
        "benchmark" => {
            cfg.benchmark = Some(serde_json::to_vec(&BENCHMARK_S)?.into());
            SpeedSource::Benchmark {
                reference_s: Some(BENCHMARK_S),
            }
        }
        "none" => SpeedSource::Unknown,
        other => anyhow::bail!("--speed {other:?}: use ad, benchmark or none"),
    };
    cfg.learn_from_wall = true;
    cfg.suspend_timeout = Duration::from_secs_f64(args.suspend_timeout);
    cfg.refine_speed = args.refine;
    cfg.policies = policies;
    let mut master = Master::init(cfg, &()).await?;
    for c in 0..u64::from(args.cycles) {
        master.begin_cycle(CycleId(c), &())?;
        for (i, s) in profile.iter().enumerate() {
            master.send_work(StepId(i as u64), &s.mean)?;
        }
        for _ in profile {
            if let StepOutcome::Failed(s, why) = master.recv_result::<()>().await? {
                anyhow::bail!("{s} failed: {why}");
            }
        }
        master.end_cycle(CycleId(c), &())?;
    }
    Ok(master.complete().await?)
}

/// The simulator's settings for this comparison, before the real run
/// gives its start-up delays and the owners' offset.
fn sim_config(
    args: &Args,
    profile: &[StepProfile],
    speeds: &[f64],
    owners: OwnerModel,
) -> SimConfig {
    let mut sim_cfg = SimConfig {
        profile: profile.to_vec(),
        cycles: args.cycles,
        speeds: speeds.to_vec(),
        actual_speeds: None,
        owners,
        owner_offset: 0.0,
        owner_speedup: args.speedup,
        pool: PoolConfig {
            worker_startup: 0.0,
            policy: PolicyConfig {
                minute: 60.0 / args.speedup,
                ..PolicyConfig::default()
            },
            ..PoolConfig::default()
        },
        hosts_wanted: args.hosts as u32,
        fewest_hosts: None,
        hysteresis: 0,
        startup_offsets: Vec::new(),
        grants: Default::default(),
        sched: SchedConfig::default(),
        seed: args.seed,
    };
    args.policies.apply(&mut sim_cfg);
    sim_cfg.sched.suspend_timeout = Duration::from_secs_f64(args.suspend_timeout);
    sim_cfg
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let owners = carmi_pool::read_owner_model(&args.owners)?;
    let pool = EmbeddedPool::start(PoolOptions {
        hosts: args.hosts,
        seed: args.seed,
        owners: owners.clone(),
        speedup: args.speedup,
        ..PoolOptions::default()
    })
    .await?;
    // The owners' clock starts as `EmbeddedPool::start` returns (its owner
    // driver starts once every machine has registered), not when the
    // daemons begin to start: counting their start-up too put the
    // simulator's owners that far ahead of the real ones.
    let pool_start = std::time::Instant::now();
    let speeds: Vec<f64> = pool.hosts().iter().map(|h| h.speed).collect();
    let addr = PoolAddr {
        local: pool.submit_addr().to_string(),
        secret_file: pool.secret_file().to_path_buf(),
        token_file: Some(pool.token_file().to_path_buf()),
    };
    let profile = profile(args.scale);
    // The simulator's settings first: the real master asks for the very
    // policies the preset sets there.
    let mut sim_cfg = sim_config(&args, &profile, &speeds, owners);
    let server_start = pool_start.elapsed().as_secs_f64();
    let real = run_real(&args, addr, &profile, policies_of(&sim_cfg)).await;
    pool.shutdown().await;
    let real = real?;

    let first = real
        .steps
        .iter()
        .map(|t| t.assigned_s)
        .fold(f64::INFINITY, f64::min);
    let first = if first.is_finite() { first } else { 0.0 };
    // A host granted during the run (after an owner took one, or given
    // back and asked for again) starts its worker as the real ones did.
    let startup = args
        .worker_startup
        .or_else(|| measured_startup(&real, first))
        .unwrap_or(0.0);
    sim_cfg.pool.worker_startup = startup;
    // The real run's start-up delays, fetch included, are in the offsets.
    sim_cfg.pool.executable_fetch = 0.0;
    sim_cfg.startup_offsets = startup_offsets(&real, &speeds, startup);
    // The simulation's first assignment comes when its first worker has
    // started; the owners' clock had then run as long as the real one at
    // the real first assignment (pool start to server start, then to it).
    let lead = server_start + first - startup;
    sim_cfg.owner_offset = lead * args.speedup;
    let sim = simulate(&sim_cfg, Ordering::LongestFirst);
    if let Some(dir) = &args.dump {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("real-stats.json"), serde_json::to_vec(&real)?)?;
        std::fs::write(dir.join("sim-stats.json"), serde_json::to_vec(&sim.stats)?)?;
    }
    let cmp = Comparison::of(real, sim, &profile, args.cycles);
    if args.json {
        print_json(&args, &speeds, startup, &cmp);
    } else {
        print_text(&args, &speeds, startup, &cmp);
    }
    Ok(())
}

/// The real run and its simulation side by side: per cycle, and over the run.
struct Comparison {
    real: Stats,
    sim: SimRun,
    /// Each cycle's length, real and simulated, in seconds.
    real_s: Vec<f64>,
    sim_s: Vec<f64>,
    /// Each cycle's (real - simulated) / simulated.
    dev: Vec<f64>,
    /// Mean and largest deviation of the steady state (cycles 1..).
    mean: f64,
    max_abs: f64,
    real_len: f64,
    real_eff: f64,
    sim_len: f64,
    sim_eff: f64,
}

impl Comparison {
    fn of(real: Stats, sim: SimRun, profile: &[StepProfile], cycles: u32) -> Comparison {
        let (real_len, real_eff) = length_and_efficiency(&real, profile);
        let (sim_len, sim_eff) = length_and_efficiency(&sim.stats, profile);
        let real_s = real_cycles(&real, cycles);
        let sim_s = sim.summary.cycle_s.clone();
        let dev: Vec<f64> = real_s
            .iter()
            .zip(&sim_s)
            .map(|(r, p)| (r - p) / p)
            .collect();
        // The first cycle has no history (arrival order) and waits for workers
        // to join one by one; the comparison that matters is the steady state.
        let steady: Vec<f64> = dev.iter().skip(1).copied().collect();
        let max_abs = steady.iter().fold(0.0f64, |m, d| m.max(d.abs()));
        let mean = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
        Comparison {
            real,
            sim,
            real_s,
            sim_s,
            dev,
            mean,
            max_abs,
            real_len,
            real_eff,
            sim_len,
            sim_eff,
        }
    }
}

/// The comparison as one JSON object (`--json`).
fn print_json(args: &Args, speeds: &[f64], startup: f64, c: &Comparison) {
    let (real, sim) = (&c.real, &c.sim);
    println!(
        "{}",
        serde_json::json!({
            "hosts": args.hosts,
            "speeds": speeds,
            "cycles": args.cycles,
            "scale": args.scale,
            "speed": args.speed,
            "refine": args.refine,
            "speed_benchmarks": real.benchmarks.count,
            "speed_benchmark_s": real.benchmarks.host_s,
            "real_cycle_s": c.real_s,
            "sim_cycle_s": c.sim_s,
            "deviation": c.dev,
            "steady_mean_deviation": c.mean,
            "steady_max_abs_deviation": c.max_abs,
            "owners": args.owners,
            "speedup": args.speedup,
            "real_run_length_s": c.real_len,
            "sim_run_length_s": c.sim_len,
            "real_efficiency": c.real_eff,
            "sim_efficiency": c.sim_eff,
            "real_occupancy_s": real.occupancy_s,
            "sim_occupancy_s": sim.stats.occupancy_s,
            "real_losses": real.hosts.lost,
            "sim_losses": sim.stats.hosts.lost,
            "policies": args.policies,
            "worker_startup_s": startup,
            "real_hosts_added": real.hosts.added,
            "sim_hosts_added": sim.stats.hosts.added,
        })
    );
}

/// The comparison as text: the settings, a table of cycles, the totals.
fn print_text(args: &Args, speeds: &[f64], startup: f64, c: &Comparison) {
    let (real, sim) = (&c.real, &c.sim);
    let (real_len, sim_len) = (c.real_len, c.sim_len);
    println!(
        "hosts {} speeds {speeds:?}, materials x {:.5}, policies {:?}, speed from {}{}",
        args.hosts,
        args.scale,
        args.policies,
        args.speed,
        if args.refine { ", refined" } else { "" }
    );
    if real.benchmarks.count > 0 {
        println!(
            "{} speed benchmarks took {:.2} s of host time",
            real.benchmarks.count, real.benchmarks.host_s
        );
    }
    println!("cycle   real s   simulated s   deviation");
    for (i, ((r, p), d)) in c.real_s.iter().zip(&c.sim_s).zip(&c.dev).enumerate() {
        println!("{i:>5} {r:>8.3} {p:>13.3} {:>+10.1}%", d * 100.0);
    }
    println!(
        "cycles 1..: mean deviation {:+.1}%, largest {:.1}%",
        c.mean * 100.0,
        c.max_abs * 100.0
    );
    println!(
        "run length real {real_len:.3} s, simulated {sim_len:.3} s ({:+.1}%); efficiency real {:.1}%, simulated {:.1}%; hosts lost real {}, simulated {}",
        (real_len - sim_len) / sim_len * 100.0,
        c.real_eff * 100.0,
        c.sim_eff * 100.0,
        real.hosts.lost,
        sim.stats.hosts.lost
    );
    println!(
        "hosts added real {}, simulated {}; worker start-up during the run {startup:.3} s",
        real.hosts.added, sim.stats.hosts.added
    );
}
