//! `carmi-stage`: how long it takes to stage one executable to 1, 4, 16 and
//! 64 slots, for 4, 8 and 12 MiB, with one local RM per slot, all on this
//! host. Prints Markdown for `BENCHMARKS.md`:
//!
//! ```text
//! cargo run --release -p carmi-benches --bin carmi-stage [-- --link-rate MB_PER_S] [--fanout N]
//!     [--slots 1,64] [--mib 4]
//! ```
//!
//! `--slots` and `--mib` measure only some of the pool and executable sizes
//! (for a quick look; the table in `BENCHMARKS.md` has them all).
//!
//! `--link-rate` models a network on one host: every daemon (the global RM
//! and each local RM) sends staged executables through a link of that many
//! MB/s (`--stage-link-rate` / `stage_link_rate`), so that a star (N copies
//! through the store's link) and a tree (copies passed on by peers) cost
//! what they would cost between machines. `--fanout` is the global RM's
//! `--stage-fanout` (fetches one holder serves at once; default 1, a chain).
//!
//! For each pool size, a job takes every slot; then, per executable size and
//! repetition, a fresh executable (new contents, so cached nowhere) is
//! spawned once on every slot (*cold*: upload, distribution to every
//! machine's cache, start), and again (*warm*: start only). Staging is cold
//! minus warm, and the per-slot rate is size / staging (every slot's
//! machine receives the whole executable).

use std::collections::HashSet;
use std::error::Error;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, ExitStatus, SpawnTarget};
use carmi_testkit::{Inbox, Pool, PoolOptions, write_executable};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

const SLOTS: [usize; 4] = [1, 4, 16, 64];
const SIZES_MIB: [usize; 3] = [4, 8, 12];
const REPS: usize = 3;
const PATIENCE: Duration = Duration::from_secs(120);

/// A job holding `count` hosts of every machine.
async fn job(pool: &Pool, count: usize) -> Result<(Carmi, Inbox, Vec<HostId>)> {
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await?;
    let mut inbox = Inbox::new(events).with_patience(PATIENCE).fail_fast();
    let def = carmi.define_class("any", "true");
    inbox
        .try_take("DefineClass", |x| match x {
            Incoming::Rm(Event::Done { request, .. }) if *request == def => Some(()),
            _ => None,
        })
        .await?;
    let add = carmi.addhosts("any", count as u32, count as u32);
    let mut hosts = Vec::new();
    while hosts.len() < count {
        let got = inbox
            .try_take("hosts", |x| match x {
                Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                    Some(hosts.iter().map(|h| h.host).collect::<Vec<_>>())
                }
                _ => None,
            })
            .await?;
        hosts.extend(got);
    }
    Ok((carmi, inbox, hosts))
}

/// Spawns `exe` once per host; the time until every process has started.
async fn spawn_all(
    carmi: &Carmi,
    inbox: &mut Inbox,
    exe: &Path,
    hosts: &[HostId],
) -> Result<Duration> {
    let t0 = Instant::now();
    let mine: HashSet<RequestId> = hosts
        .iter()
        .map(|&h| carmi.class_spawn(exe, Vec::<String>::new(), SpawnTarget::Host(h)))
        .collect();
    carmi.flush().await;
    let (mut started, mut exited) = (0, 0);
    let mut all_started = Duration::ZERO;
    while exited < hosts.len() {
        let e = inbox
            .try_take("starts and exits", |x| match x {
                Incoming::Rm(
                    e @ (Event::ProcessStarted { request, .. }
                    | Event::ProcessExited { request, .. }),
                ) if mine.contains(request) => Some(e.clone()),
                _ => None,
            })
            .await?;
        match e {
            Event::ProcessStarted { .. } => {
                started += 1;
                if started == hosts.len() {
                    all_started = t0.elapsed();
                }
            }
            Event::ProcessExited { status, .. } => {
                if status != ExitStatus::Code(0) {
                    return Err(format!("a process ended with {status:?}").into());
                }
                exited += 1;
            }
            _ => {}
        }
    }
    Ok(all_started)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

async fn measure(
    pool: &Pool,
    slots: usize,
    sizes: &[usize],
    seed: u64,
) -> Result<Vec<(usize, Duration, Duration)>> {
    let (carmi, mut inbox, hosts) = job(pool, slots).await?;
    let mut rows = Vec::new();
    for (i, &mib) in sizes.iter().enumerate() {
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        for rep in 0..REPS {
            let exe = pool.dir.join(format!("stage-{mib}-{rep}.sh"));
            write_executable(
                &exe,
                mib << 20,
                seed ^ (((i * REPS + rep) as u64 + 1) * 0x9e37_79b9),
            )?;
            cold.push(spawn_all(&carmi, &mut inbox, &exe, &hosts).await?);
            warm.push(spawn_all(&carmi, &mut inbox, &exe, &hosts).await?);
        }
        rows.push((mib, median(cold), median(warm)));
    }
    Ok(rows)
}

/// What the command line asks for.
struct Options {
    link_rate: Option<f64>,
    fanout: Option<u32>,
    slots: Vec<usize>,
    sizes: Vec<usize>,
}

/// `--link-rate R`, `--fanout N`, `--slots A,B` and `--mib A,B`.
fn options() -> std::result::Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(a) = args
        .iter()
        .step_by(2)
        .find(|a| !["--link-rate", "--fanout", "--slots", "--mib"].contains(&a.as_str()))
    {
        return Err(format!(
            "unknown argument `{a}` (expected --link-rate MB_PER_S, --fanout N, --slots A,B, --mib A,B)"
        ));
    }
    let raw = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| {
                args.get(i + 1)
                    .cloned()
                    .ok_or(format!("{flag} takes a value"))
            })
            .transpose()
    };
    let number = |flag: &str| -> std::result::Result<Option<f64>, String> {
        raw(flag)?
            .map(|v| {
                v.parse::<f64>()
                    .map_err(|_| format!("{flag} takes a number, not `{v}`"))
            })
            .transpose()
    };
    let list = |flag: &str, all: &[usize]| -> std::result::Result<Vec<usize>, String> {
        match raw(flag)? {
            None => Ok(all.to_vec()),
            Some(v) => v
                .split(',')
                .map(|x| {
                    x.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or(format!("{flag} takes positive whole numbers, not `{x}`"))
                })
                .collect(),
        }
    };
    Ok(Options {
        link_rate: number("--link-rate")?,
        fanout: number("--fanout")?.map(|f| f as u32),
        slots: list("--slots", &SLOTS)?,
        sizes: list("--mib", &SIZES_MIB)?,
    })
}

fn main() -> ExitCode {
    let opts = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("carmi-stage: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if cfg!(debug_assertions) {
        println!("**Built without `--release`: these numbers are not representative.**\n");
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    print_header(&opts);
    let mut table: Vec<(usize, usize, Duration, Duration)> = Vec::new();
    for &slots in &opts.slots {
        eprintln!("carmi-stage: {slots} slots");
        let pool = Pool::start_with(
            &format!("stage-{slots}"),
            1,
            &vec![Vec::new(); slots],
            pool_options(&opts),
        );
        match rt.block_on(measure(&pool, slots, &opts.sizes, seed)) {
            Ok(rows) => {
                for (mib, cold, warm) in rows {
                    table.push((mib, slots, cold, warm));
                }
            }
            Err(e) => {
                eprintln!("carmi-stage: {slots} slots: {e}\n{}", pool.logs());
                return ExitCode::FAILURE;
            }
        }
    }
    print_rows(table);
    ExitCode::SUCCESS
}

/// The pool for `opts`: its daemons' links and fan-out.
fn pool_options(opts: &Options) -> PoolOptions {
    // 64 daemons hashing on a small host must not be declared lost.
    let mut options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 10,
        ..PoolOptions::default()
    };
    if let Some(r) = opts.link_rate {
        options.global_args = vec!["--stage-link-rate".into(), r.to_string()];
        options.local_settings = format!("stage_link_rate = {r}\n");
    }
    if let Some(f) = opts.fanout {
        options
            .global_args
            .extend(["--stage-fanout".into(), f.to_string()]);
    }
    options
}

/// The arguments after `--` that repeat this run (empty for the defaults).
fn command_line(opts: &Options) -> String {
    let mut extra = String::new();
    if let Some(r) = opts.link_rate {
        extra.push_str(&format!(" --link-rate {r}"));
    }
    if let Some(f) = opts.fanout {
        extra.push_str(&format!(" --fanout {f}"));
    }
    let joined = |v: &[usize]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    if opts.slots != SLOTS {
        extra.push_str(&format!(" --slots {}", joined(&opts.slots)));
    }
    if opts.sizes != SIZES_MIB {
        extra.push_str(&format!(" --mib {}", joined(&opts.sizes)));
    }
    extra
}

/// The Markdown above the table: how to repeat the run, the host, what is
/// measured, the mode, and the table's header.
fn print_header(opts: &Options) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let extra = command_line(opts);
    let sep = if extra.is_empty() { "" } else { " --" };
    println!("```\ncargo run --release -p carmi-benches --bin carmi-stage{sep}{extra}\n```\n");
    println!(
        "One local RM per slot on this host ({} CPUs, load average at the start {}); median of {REPS}. \
         Cold: a fresh executable spawned on every slot (upload, distribution to every cache, start); \
         warm: the same again (start only); staging = cold - warm; per-slot rate = size / staging (1 MB = 10^6 bytes).\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "Mode: {}; staging fan-out {}.\n",
        match opts.link_rate {
            Some(r) => format!(
                "every daemon's staging sends limited to {r} MB/s (a modelled network link per machine)"
            ),
            None => "unthrottled (loopback; every copy costs CPU on this one host)".to_string(),
        },
        opts.fanout.unwrap_or(1)
    );
    println!(
        "| MiB | slots | cold, all started (ms) | warm (ms) | staging (ms) | per-slot MB/s | staging / 1 slot |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
}

/// The table's rows, `(MiB, slots, cold, warm)` each, by size then slots;
/// each size's staging is compared with its 1-slot staging.
fn print_rows(mut table: Vec<(usize, usize, Duration, Duration)>) {
    let mut base: Vec<(usize, Duration)> = Vec::new();
    table.sort_by_key(|r| (r.0, r.1));
    for (mib, slots, cold, warm) in table {
        let staging = cold.saturating_sub(warm).max(Duration::from_micros(1));
        if slots == 1 {
            base.push((mib, staging));
        }
        let one = base.iter().find(|b| b.0 == mib).map_or(staging, |b| b.1);
        let rate = mib as f64 * 1.048_576 / staging.as_secs_f64();
        println!(
            "| {mib} | {slots} | {} | {} | {} | {:.2} | {:.2}x |",
            ms(cold),
            ms(warm),
            ms(staging),
            rate,
            staging.as_secs_f64() / one.as_secs_f64()
        );
    }
}
