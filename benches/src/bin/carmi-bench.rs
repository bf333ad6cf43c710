//! `carmi-bench`: runtime benchmarks of CARMI on localhost, printed as
//! markdown tables (each preceded by the command that produced it) for
//! BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p carmi-benches --bin carmi-bench -- [messaging|spawn|all]
//! ```
//!
//! - `messaging`: latency and throughput layer by layer, so that the cost each
//!   layer adds shows: raw TCP, CARMI's framing over the same kind of socket,
//!   and application messages between two processes through the whole client
//!   library (this program and a spawned `carmi-echo`, and again with an echo
//!   that runs its loop in a task).
//! - `spawn`: `class_spawn` of a 12 MiB executable on 16 slots, split into
//!   staging (moving the bytes into the machines' caches) and execution.
//!
//! - `scale [MACHINES,...] [JOBS] [QUEUED] [HEARTBEAT_MS]`: one global RM against a fleet
//!   of machines speaking the real protocol (1,000, 5,000 and 10,000
//!   machines x 2 slots, 100 hand-started jobs, 10,000 queued by default):
//!   memory, `status`, request-to-event time, noticing silent machines,
//!   journal size and restart time (`carmi_bench/scale.rs`).
//! - `standby`: submit latency with and without a standby manager in sync,
//!   and the takeover time over 10 SIGKILLs of the active one (issue 35).
//! - `cluster [PROCS] [MACHINES]`: a cluster of 2,395 procs submitted in one
//!   request while another user runs `status` and submits, alone, with every
//!   proc materialized and with `max_materialize = 50` (`carmi_bench/cluster.rs`).
//!
//! - `grant-latency [GRANTS] [MACHINES] [--json]`: what one host grant costs a
//!   job, from `addhosts` to a worker's hello: match, spawn with a new and
//!   with a cached executable, first message; p50/p90/max over 50 grants on
//!   4 machines by default (`carmi_bench/grant.rs`). The simulator's
//!   worker start-up default is its release figure.
//!
//! `carmi-bench echo-task` and `carmi-bench grant-worker` are not for people: the messaging benchmark spawns
//! this program that way as a second echo, one that runs its loop in a task.
//!
//! The benchmark builds what it starts (the daemons through
//! [`carmi_testkit::bin_dir`], `carmi-echo` itself) with the profile it was built
//! with. It only prints: no timing is asserted anywhere.

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use carmi_api::client::{ConnectOptions, Incoming, connect};

// In a directory without `main.rs`, so that Cargo does not take them for binaries.
#[path = "carmi_bench/cluster.rs"]
mod cluster;
#[path = "carmi_bench/grant.rs"]
mod grant;
#[path = "carmi_bench/inbox.rs"]
mod inbox;
#[path = "carmi_bench/messaging.rs"]
mod messaging;
#[path = "carmi_bench/scale.rs"]
mod scale;
#[path = "carmi_bench/scale_fleet.rs"]
mod scale_fleet;
#[path = "carmi_bench/spawn.rs"]
mod spawn;
#[path = "carmi_bench/standby.rs"]
mod standby;

use messaging::run_messaging;
use spawn::run_spawn;

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Size of the messages whose round trip is timed.
const SMALL: usize = 8;
/// Round trips run before timing starts (connections, caches, runtime threads warm up).
const WARMUP: usize = 1_000;
/// Round trips timed.
const ROUND_TRIPS: usize = 10_000;
/// Size of the bulk messages.
const BULK: usize = 1 << 20;
/// Bulk messages per layer and kind of run: 1 GiB.
const BULK_COUNT: usize = 1024;
/// Bulk messages in flight at once when they are echoed: enough to keep
/// both directions busy, few enough that no queue grows without bound.
const WINDOW: usize = 8;
/// Tag of timed small messages (`carmi-echo` answers with tag + 1).
const TAG_PING: u32 = 10;
/// Tag of bulk messages.
const TAG_BULK: u32 = 20;
/// Tag asking a sink to acknowledge everything before it (an echo answers it
/// like any message, which acknowledges just as well: messages stay in order).
const TAG_SYNC: u32 = 30;
/// Tag of bulk messages that `carmi-bench echo-task` drops instead of echoing.
const TAG_ONE_WAY: u32 = 40;

/// Machines of the spawn benchmark's pool.
const SPAWN_MACHINES: usize = 8;
/// Slots per machine: 8 x 2 = 16 processes.
const SPAWN_SLOTS: u32 = 2;
/// Processes started per run.
const SPAWN_COUNT: usize = SPAWN_MACHINES * SPAWN_SLOTS as usize;
/// Size of the spawned executable.
const EXE_SIZE: usize = 12 << 20;
/// Repetitions of each spawn run (a fresh executable each time).
const SPAWN_REPS: usize = 5;

/// How long any single wait (and the whole messaging run) may take before
/// the benchmark gives up.
const PATIENCE: Duration = Duration::from_secs(600);

fn main() -> ExitCode {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let (messaging, spawn) = match what.as_str() {
        ECHO_TASK => return echo_task(),
        "scale" => return scale_main(),
        scale_fleet::FLEET_WORKER => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            return scale_fleet::fleet_worker(&args);
        }
        "grant-latency" => return grant_main(),
        "cluster" => return cluster_main(),
        "standby" => return standby_main(),
        grant::GRANT_WORKER => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            return grant::grant_worker(&args);
        }
        "messaging" => (true, false),
        "spawn" => (false, true),
        "all" => (true, true),
        _ => {
            eprintln!(
                "usage: cargo run --release -p carmi-benches --bin carmi-bench -- [messaging|spawn|all|scale|grant-latency|cluster|standby]"
            );
            return ExitCode::from(2);
        }
    };
    let rt = bench_runtime(true);
    let started = Instant::now();
    let result = (|| -> Result<()> {
        if messaging {
            run_messaging(&rt)?;
        }
        if spawn {
            run_spawn(&rt)?;
        }
        Ok(())
    })();
    eprintln!(
        "carmi-bench: finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `carmi-bench scale [MACHINES[rRELAYS],...] [JOBS] [QUEUED] [HEARTBEAT_MS] [SLOTS]`:
/// `50000r5` is 50,000 machines through 5 relays.
fn scale_main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let size = |s: &str| -> Option<(usize, usize)> {
        match s.trim().split_once('r') {
            Some((m, r)) => Some((m.parse().ok()?, r.parse().ok()?)),
            None => Some((s.trim().parse().ok()?, 0)),
        }
    };
    let sizes: Vec<(usize, usize)> = match args.first() {
        Some(list) => list.split(',').filter_map(size).collect(),
        None => vec![(1_000, 0), (5_000, 0), (10_000, 0)],
    };
    let number =
        |i: usize, default: usize| args.get(i).and_then(|n| n.parse().ok()).unwrap_or(default);
    let (jobs, queued) = (number(1, 100), number(2, 10_000));
    let heartbeat_ms = number(3, 1000) as u64;
    let slots = number(4, 2) as u32;
    if sizes.is_empty() || sizes.iter().any(|&(m, _)| m < jobs.max(10)) {
        eprintln!(
            "usage: carmi-bench scale [MACHINES[rRELAYS],...] [JOBS] [QUEUED] [HEARTBEAT_MS] [SLOTS] (each size at least JOBS and 10)"
        );
        return ExitCode::from(2);
    }
    let runs: Vec<scale::ScaleRun> = sizes
        .iter()
        .map(|&(machines, relays)| scale::ScaleRun {
            machines,
            slots,
            jobs,
            rounds: 20,
            queued,
            statuses: 50,
            heartbeat_ms,
            relays,
        })
        .collect();
    let rt = bench_runtime(true);
    match scale::run_scale(&rt, &runs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench scale: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `carmi-bench cluster [PROCS] [MACHINES]`.
/// `carmi-bench standby`.
fn standby_main() -> ExitCode {
    let rt = bench_runtime(true);
    match standby::run_standby(&rt) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench standby: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cluster_main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let number = |i: usize, default: usize| match args.get(i) {
        Some(n) => n.parse().ok().filter(|&n| n > 0),
        None => Some(default),
    };
    let (Some(procs), Some(machines)) = (number(0, 2_395), number(1, 500)) else {
        eprintln!("usage: carmi-bench cluster [PROCS] [MACHINES] (each at least 1)");
        return ExitCode::from(2);
    };
    let rt = bench_runtime(true);
    match cluster::run_cluster(&rt, procs, machines) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `carmi-bench grant-latency [GRANTS] [MACHINES] [--json]`.
fn grant_main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let json = args.iter().any(|a| a == "--json");
    let numbers: Vec<&String> = args.iter().filter(|a| *a != "--json").collect();
    let number = |i: usize, default: usize| match numbers.get(i) {
        Some(n) => n.parse().ok().filter(|&n| n > 0),
        None => Some(default),
    };
    let (Some(grants), Some(machines)) = (number(0, 50), number(1, 4)) else {
        eprintln!(
            "usage: carmi-bench grant-latency [GRANTS] [MACHINES] [--json] (each at least 1)"
        );
        return ExitCode::from(2);
    };
    let run = grant::GrantRun {
        grants,
        machines,
        json,
    };
    let rt = bench_runtime(!json);
    match grant::run_grant_latency(&rt, &run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench grant-latency: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The runtime a benchmark runs on, once the report's header (the host,
/// and a warning for a debug build) is printed, when `header` (a JSON
/// report has none).
fn bench_runtime(header: bool) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if header {
        println!("Host: {}\n", host_description());
        if cfg!(debug_assertions) {
            println!("**Built without `--release`: these numbers are not representative.**\n");
        }
    }
    rt
}

/// CPU model, CPU count and kernel, so that tables from different machines are not confused.
fn host_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{cpu}, {cpus} CPUs, Linux {kernel}")
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews timings.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The command that reproduces a section, printed above its tables.
fn print_command(section: &str) {
    println!("```\ncargo run --release -p carmi-benches --bin carmi-bench -- {section}\n```\n");
}

/// The argument that makes this program an echo (see [`echo_task`]).
const ECHO_TASK: &str = "echo-task";

/// `carmi-echo` with its loop in a spawned task instead of in `main`'s
/// `block_on`, and which drops messages tagged `TAG_ONE_WAY`. `#[tokio::main]` runs `main`'s future on the main thread, not
/// on a worker, so every message then crosses threads twice more (the
/// receiving task wakes the main thread, whose `send` wakes a worker for the
/// writing task); in a task, a worker hands messages on by itself. The
/// messaging benchmark times both kinds of echo.
fn echo_task() -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = rt.block_on(async {
        let mut opts = ConnectOptions::from_env()?;
        opts.plain_peers |= std::env::args().skip(2).any(|a| a == "plain");
        let (carmi, mut events) = connect(opts).await?;
        let echo = carmi.clone();
        tokio::spawn(async move {
            while let Some(item) = events.next().await {
                match item {
                    Incoming::Message { tag: 0, .. } => break,
                    Incoming::Message {
                        tag: TAG_ONE_WAY, ..
                    } => {}
                    Incoming::Message { from, tag, data } => echo.send(from, tag + 1, data),
                    _ => {}
                }
            }
        })
        .await?;
        carmi.flush().await;
        Ok::<_, Box<dyn Error + Send + Sync>>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench {ECHO_TASK}: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------

/// Median and 99th percentile of a set of round trips.
#[derive(Clone, Copy)]
struct Latency {
    median: Duration,
    p99: Duration,
}

impl Latency {
    fn of(samples: &[Duration]) -> Latency {
        let mut v = samples.to_vec();
        v.sort();
        let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
        Latency {
            median: at(0.5),
            p99: at(0.99),
        }
    }
}

/// What one layer measured, summed over the rounds.
#[derive(Default)]
struct Samples {
    round_trips: Vec<Duration>,
    /// Time spent sending bulk messages one way, and how many.
    one_way: (Duration, usize),
    /// Time spent streaming bulk messages through the echo, and how many.
    echoed: (Duration, usize),
}

/// MiB/s of `messages` bulk messages moved in `elapsed`.
fn mib_per_s((elapsed, messages): (Duration, usize)) -> f64 {
    (messages * BULK) as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
}

fn micros(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn millis(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e3)
}
