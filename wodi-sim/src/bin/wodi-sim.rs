//! `wodi-sim`: runs WoDi's scheduler core with CARMI's real cores (global
//! RM, a local RM and owner policy per machine) on a pool of simulated
//! owners in virtual time, hours of a run in about a second, and prints the
//! paper's figures (run length, occupancy, CPU time, efficiency, hosts added
//! and lost) per run and over runs.
//!
//! ```text
//! wodi-sim --steps 31 --cycles 35 --hosts 20 --owners stochastic --seed 1 --runs 61
//! wodi-sim --hosts 24 --owners none --policies paper --ordering none  # the paper's sequential order
//! wodi-sim --hosts 24 --owners none --policies paper --fewest-hosts 0.05  # the fewest hosts
//! wodi-sim --hosts 24 --runs 61 --json                  # the cost-aware rule (default)
//! wodi-sim --hosts 24 --runs 61 --policies churn        # every idle host given back
//! wodi-sim --hosts 24 --runs 61 --policies paper        # no policies
//! wodi-sim --hosts 24 --runs 61 --fewest-hosts 1.0 --grow-first-cycle --warm-history
//!                                 # issue 34: fewer grants (docs/results.md)
//! wodi-sim --hosts 24 --runs 61 --policies churn --fast-abort 0 --suspend-timeout 10 --reacquire 10
//!                                 # what a master asks for by default (`Policies::recommended()`)
//! ```
//!
//! `--policies` picks a set; the options after it override single choices.
//! `--json` reports each run and the mean, spread and range of run length,
//! efficiency and `grants` (hosts the pool granted: what a run costs the pool).
//!
//! Efficiency is the CPU time of delivered step copies over the occupancy
//! (every second a host is allocated, suspended included).

use std::process::ExitCode;

use clap::{ArgAction, Parser, ValueEnum};
use owner_model::OwnerModel;
use serde::Serialize;
use wodi_core::order::Ordering as StepOrder;
use wodi_core::profile::{StepProfile, heavy_tail, materials, uniform};
use wodi_core::sched::SchedConfig;
use wodi_sim::{PoolConfig, Preset, RunSummary, SimConfig, simulate};

/// Simulate WoDi runs of the paper's materials application on an opportunistic pool.
#[derive(Parser, Debug)]
#[command(name = "wodi-sim", version)]
struct Cli {
    /// Steps per cycle (the profile stretched or shrunk to this many).
    #[arg(long, default_value_t = 31)]
    steps: usize,
    /// The shape of a cycle: the paper's materials application, equal
    /// steps, or a heavy (Pareto) tail; all three carry the same work.
    #[arg(long, value_enum, default_value_t = Profile::Materials)]
    profile: Profile,
    /// Cycles per run.
    #[arg(long, default_value_t = 35)]
    cycles: u32,
    /// Hosts in the pool (the run asks for all of them unless --fewest-hosts).
    #[arg(long, default_value_t = 16)]
    hosts: usize,
    /// Host speeds: all 1.0, or spread evenly over 0.5..2.0.
    #[arg(long, value_enum, default_value_t = Speeds::Identical)]
    speeds: Speeds,
    /// Owner model: `none`, `stochastic`, or `trace:FILE`.
    #[arg(long, default_value = "stochastic")]
    owners: String,
    /// Hour of the week (0 = Monday 00:00) at which the first run starts;
    /// successive runs start every `--spacing` hours after it.
    #[arg(long, default_value_t = 9.0)]
    start_hour: f64,
    /// Hours between the starts of successive runs.
    #[arg(long, default_value_t = 2.75)]
    spacing: f64,
    /// Seed of the first run (run r uses seed + r).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How steps are ordered: `lpt` (history, longest first, earliest finish) or `none` (arrival).
    #[arg(long, value_enum, default_value_t = Ordering::Lpt)]
    ordering: Ordering,
    /// The set of policies; the options below override its choices.
    /// `keep`: the cost-aware rule (fewest hosts, idle hosts kept through
    /// short tails); `churn`: every idle host given back (session 8's
    /// defaults); `paper`: none.
    #[arg(long, value_enum, default_value_t = Preset::Keep)]
    policies: Preset,
    /// After each cycle, ask for the fewest hosts that reach the best cycle within this tolerance (e.g. 0.05; negative: hold what was asked).
    #[arg(long)]
    fewest_hosts: Option<f64>,
    /// With --fewest-hosts: cycles in a row the answer must differ in one direction before the count follows (0: follow every change).
    #[arg(long, default_value_t = 5)]
    hysteresis: u32,
    /// Seconds a suspended worker keeps its step before it is sent elsewhere.
    #[arg(long)]
    suspend_timeout: Option<f64>,
    /// Give back hosts left idle in a cycle's tail and ask again at the next cycle.
    #[arg(long, action = ArgAction::Set)]
    release_idle: Option<bool>,
    /// With --release-idle: what one grant costs the pool, seconds of host
    /// time the run would rather leave idle; a host is given back only when
    /// the tail outlasts getting it back (worker start and the pool's round
    /// trips) plus this.
    #[arg(long)]
    grant_cost: Option<f64>,
    /// What getting a host back costs, seconds, as the scheduler weighs it
    /// (default: --worker-startup plus four link latencies; a real master
    /// sends `Policies::reacquire_ms`, 10 s unless it sets it).
    #[arg(long)]
    reacquire: Option<f64>,
    /// Give back a suspended host when its grace (--suspend-timeout) ends.
    #[arg(long, action = ArgAction::Set)]
    release_suspended: Option<bool>,
    /// Start second copies of straggling steps on idle faster hosts in a cycle's tail.
    #[arg(long, action = ArgAction::Set)]
    stragglers: Option<bool>,
    /// Fast abort: a step this many times over its estimate strikes its worker; two retire it (0: off).
    #[arg(long)]
    fast_abort: Option<f64>,
    /// With --fewest-hosts: start the first cycle on one host and grow it
    /// as step times become known, instead of asking for --hosts at once.
    #[arg(long)]
    grow_first_cycle: bool,
    /// The master restores an earlier run's history (the profile's means)
    /// before its first cycle, so the first cycle is planned too.
    #[arg(long)]
    warm_history: bool,
    /// With --fewest-hosts: scale the tolerance by what a held host costs
    /// now (1 + the measured loss rate times --grant-cost plus --reacquire).
    #[arg(long)]
    loss_aware: bool,
    /// One-way delay of every message between CARMI's cores and the WoDi server, seconds.
    #[arg(long, default_value_t = 0.001)]
    latency: f64,
    /// Seconds from a worker spawned to it ready (default: measured on the
    /// real daemons, `carmi-bench grant-latency`).
    #[arg(long, default_value_t = wodi_sim::MEASURED_WORKER_STARTUP)]
    worker_startup: f64,
    /// Seconds a host's first worker adds to fetch the executable into the
    /// machine's cache (default: measured, as `--worker-startup`).
    #[arg(long, default_value_t = wodi_sim::MEASURED_EXECUTABLE_FETCH)]
    executable_fetch: f64,
    /// Every k-th host really computes at this fraction of its advertised speed (with --slow-every).
    #[arg(long, default_value_t = 1.0)]
    slow_factor: f64,
    /// Which hosts are slower than advertised: every k-th one (0: none).
    #[arg(long, default_value_t = 0)]
    slow_every: usize,
    /// Number of runs.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Ordering {
    None,
    Lpt,
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Profile {
    Materials,
    Uniform,
    HeavyTail,
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Speeds {
    Identical,
    Varied,
}

#[derive(Serialize)]
struct Aggregate {
    mean: f64,
    std: f64,
    min: f64,
    max: f64,
}

fn aggregate(xs: &[f64]) -> Aggregate {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    Aggregate {
        mean,
        std: var.sqrt(),
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}

/// The chosen profile with `n` steps: for materials, step i takes the time
/// of the profile's step at the same relative position.
fn profile(shape: Profile, n: usize) -> Vec<StepProfile> {
    match shape {
        Profile::Materials => {
            let base = materials();
            (0..n).map(|i| base[i * base.len() / n.max(1)]).collect()
        }
        Profile::Uniform => uniform(n),
        Profile::HeavyTail => heavy_tail(n),
    }
}

fn hms(s: f64) -> String {
    let m = (s / 60.0).round() as u64;
    format!("{}:{:02}", m / 60, m % 60)
}

/// The simulation of run `r` (0-based): the options, with the owners' day
/// shifted by `--spacing` hours per run and the seed by one.
fn run_config(cli: &Cli, owners: &OwnerModel, speeds: &[f64], r: u32) -> SimConfig {
    let mut cfg = SimConfig {
        profile: profile(cli.profile, cli.steps),
        cycles: cli.cycles,
        speeds: speeds.to_vec(),
        actual_speeds: (cli.slow_every > 0).then(|| {
            speeds
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if i % cli.slow_every == cli.slow_every - 1 {
                        s * cli.slow_factor
                    } else {
                        *s
                    }
                })
                .collect()
        }),
        owners: owners.clone(),
        owner_offset: (cli.start_hour + f64::from(r) * cli.spacing) * 3600.0 - 9.0 * 3600.0,
        owner_speedup: 1.0,
        pool: PoolConfig {
            latency: cli.latency,
            worker_startup: cli.worker_startup,
            executable_fetch: cli.executable_fetch,
            ..PoolConfig::default()
        },
        hosts_wanted: cli.hosts as u32,
        fewest_hosts: None,
        hysteresis: cli.hysteresis,
        startup_offsets: Vec::new(),
        grants: Default::default(),
        sched: SchedConfig {
            reacquire: secs(cli.worker_startup + 4.0 * cli.latency),
            ..SchedConfig::default()
        },
        seed: cli.seed + u64::from(r),
    };
    cli.policies.apply(&mut cfg);
    cfg.hysteresis = cli.hysteresis;
    cfg.grants.grow_first_cycle = cli.grow_first_cycle;
    cfg.grants.warm_history = cli.warm_history;
    cfg.grants.loss_aware = cli.loss_aware;
    let s = &mut cfg.sched;
    if let Some(t) = cli.fewest_hosts {
        cfg.fewest_hosts = (t >= 0.0).then_some(t);
    }
    if let Some(t) = cli.suspend_timeout {
        s.suspend_timeout = secs(t);
    }
    if let Some(on) = cli.release_idle {
        s.release_idle = on;
    }
    if let Some(c) = cli.grant_cost {
        s.grant_cost = secs(c);
    }
    if let Some(r) = cli.reacquire {
        s.reacquire = secs(r);
    }
    if let Some(on) = cli.release_suspended {
        s.release_suspended = on;
    }
    if let Some(on) = cli.stragglers {
        s.stragglers = on;
    }
    if let Some(f) = cli.fast_abort {
        s.fast_abort = (f > 0.0).then_some(f);
    }
    cfg
}

/// Seconds as a duration; negative, NaN or huge values are clamped.
fn secs(s: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(if s.is_nan() { 0.0 } else { s.clamp(0.0, 1e9) })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let owners = match OwnerModel::from_spec_with(&cli.owners, std::fs::read_to_string) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("wodi-sim: --owners: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.hosts == 0 || cli.steps == 0 || cli.cycles == 0 {
        eprintln!("wodi-sim: --hosts, --steps and --cycles must be at least 1");
        return ExitCode::from(2);
    }
    let speeds: Vec<f64> = match cli.speeds {
        Speeds::Identical => vec![1.0; cli.hosts],
        Speeds::Varied => (0..cli.hosts)
            .map(|i| 0.5 + 1.5 * i as f64 / (cli.hosts.max(2) - 1) as f64)
            .collect(),
    };
    let mut runs: Vec<RunSummary> = Vec::new();
    for r in 0..cli.runs {
        let cfg = run_config(&cli, &owners, &speeds, r);
        let order = match cli.ordering {
            Ordering::None => StepOrder::Arrival,
            Ordering::Lpt => StepOrder::LongestFirst,
        };
        runs.push(simulate(&cfg, order).summary);
    }
    if cli.json {
        print_json(&cli, &owners, &speeds, &runs);
        return ExitCode::SUCCESS;
    }
    print_table(&runs);
    if runs.len() > 1 {
        print_aggregates(&runs);
    }
    ExitCode::SUCCESS
}

/// Prints the runs and their aggregates as JSON, with the settings used.
fn print_json(cli: &Cli, owners: &OwnerModel, speeds: &[f64], runs: &[RunSummary]) {
    let field = |f: fn(&RunSummary) -> f64| aggregate(&runs.iter().map(f).collect::<Vec<_>>());
    // The settings of run 1 (later runs differ only in seed and start).
    let used = run_config(cli, owners, speeds, 0);
    let out = serde_json::json!({
        "config": {
            "steps": cli.steps, "cycles": cli.cycles, "hosts": cli.hosts, "speeds": cli.speeds,
            "owners": cli.owners, "seed": cli.seed, "ordering": cli.ordering,
            "policies": cli.policies, "runs": cli.runs,
            "fewest_hosts": used.fewest_hosts, "hysteresis": used.hysteresis,
            "release_idle": used.sched.release_idle,
            "reacquire": used.sched.reacquire.as_secs_f64(),
            "grant_cost": used.sched.grant_cost.as_secs_f64(),
            "release_suspended": used.sched.release_suspended,
            "suspend_timeout": used.sched.suspend_timeout.as_secs_f64(),
            "stragglers": used.sched.stragglers, "fast_abort": used.sched.fast_abort,
            "latency": cli.latency, "worker_startup": cli.worker_startup,
            "executable_fetch": cli.executable_fetch,
            "slow_factor": cli.slow_factor, "slow_every": cli.slow_every,
            "grow_first_cycle": used.grants.grow_first_cycle,
            "warm_history": used.grants.warm_history,
            "loss_aware": used.grants.loss_aware,
        },
        "runs": runs,
        "run_length_s": field(|r| r.run_length_s),
        "occupancy_s": field(|r| r.occupancy_s),
        "cpu_time_s": field(|r| r.cpu_time_s),
        "useful_cpu_time_s": field(|r| r.useful_cpu_time_s),
        "efficiency": field(|r| r.efficiency),
        "adds": field(|r| f64::from(r.adds)),
        // Hosts the pool granted the run: what the run cost the pool.
        "grants": field(|r| f64::from(r.adds)),
        "losses": field(|r| f64::from(r.losses)),
        // The grants by cause (`wodi_sim::grants`).
        "grants_first_cycle": field(|r| f64::from(r.grants.first_cycle)),
        "grants_after_owner": field(|r| f64::from(r.grants.after_owner)),
        "grants_policy": field(|r| f64::from(r.grants.policy)),
        "mean_hosts": field(|r| r.mean_hosts),
        "lower_bound_s": field(|r| r.lower_bound_s),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("JSON of plain data")
    );
}

/// Prints one line per run.
fn print_table(runs: &[RunSummary]) {
    println!(
        "{:>4}  {:>8}  {:>10}  {:>9}  {:>6}  {:>5}  {:>6}  {:>10}  {:>11}",
        "run",
        "length",
        "occupancy",
        "CPU time",
        "eff.",
        "adds",
        "losses",
        "avg hosts",
        "lower bound"
    );
    for (i, r) in runs.iter().enumerate() {
        println!(
            "{:>4}  {:>8}  {:>10}  {:>9}  {:>5.1}%  {:>5}  {:>6}  {:>10.1}  {:>11}",
            i + 1,
            hms(r.run_length_s),
            hms(r.occupancy_s),
            hms(r.cpu_time_s),
            r.efficiency * 100.0,
            r.adds,
            r.losses,
            r.mean_hosts,
            hms(r.lower_bound_s)
        );
    }
}

/// Prints the mean, spread and range of the runs' main figures.
fn print_aggregates(runs: &[RunSummary]) {
    let field = |f: fn(&RunSummary) -> f64| aggregate(&runs.iter().map(f).collect::<Vec<_>>());
    println!();
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9}",
        "", "mean", "std", "min", "max"
    );
    let time_row = |name: &str, a: Aggregate| {
        println!(
            "{:<12} {:>9} {:>9} {:>9} {:>9}",
            name,
            hms(a.mean),
            hms(a.std),
            hms(a.min),
            hms(a.max)
        )
    };
    let num_row = |name: &str, a: Aggregate, pct: bool| {
        let k = if pct { 100.0 } else { 1.0 };
        let u = if pct { "%" } else { "" };
        println!(
            "{:<12} {:>8.1}{u} {:>8.1}{u} {:>8.1}{u} {:>8.1}{u}",
            name,
            a.mean * k,
            a.std * k,
            a.min * k,
            a.max * k
        )
    };
    num_row("avg hosts", field(|r| r.mean_hosts), false);
    time_row("run length", field(|r| r.run_length_s));
    num_row("efficiency", field(|r| r.efficiency), true);
    time_row("occupancy", field(|r| r.occupancy_s));
    num_row("adds", field(|r| f64::from(r.adds)), false);
    num_row("losses", field(|r| f64::from(r.losses)), false);
    num_row(
        "grants 1st",
        field(|r| f64::from(r.grants.first_cycle)),
        false,
    );
    num_row(
        "grants owner",
        field(|r| f64::from(r.grants.after_owner)),
        false,
    );
    num_row(
        "grants policy",
        field(|r| f64::from(r.grants.policy)),
        false,
    );
}
