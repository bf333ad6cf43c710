//! `carmi-owner-bench`: how fast owner handling is, printed as markdown for
//! BENCHMARKS.md ("Owner handling").
//!
//! ```text
//! cargo run --release -p carmi-benches --bin carmi-owner-bench -- [stop|idle|all]
//! ```
//!
//! - `stop`: one machine with 4 slots, a job process with a child on each;
//!   the time from sending an owner `Arrive` on the control connection to all
//!   8 processes shown as stopped (`T`) in `/proc/PID/stat`, and to the
//!   control answer; repeated, with `Leave` (and the resume) between rounds.
//! - `idle`: the CPU time (`utime + stime` from `/proc/PID/stat`) one idle
//!   `carmi-local` uses over 30 s, registered with a global RM at the default
//!   heartbeat period, once with a simulated owner and once measuring the
//!   real one (default policy minute of 60 s).
//!
//! - `soak [CYCLES] [--machines M] [--period-ms P] ...`: CYCLES (default
//!   100,000) owner arrive/leave cycles on M machines while a WoDi run keeps
//!   their workers busy, each waiting until every process of the machine is
//!   stopped and running again; checks at the end that every step was
//!   delivered exactly once and nothing leaked (`carmi_owner_bench/soak.rs`).
//!
//! Only prints; nothing is asserted (the soak fails, saying why, if a
//! process died or a daemon's memory or descriptors grew).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use carmi_api::client::{Carmi, ConnectOptions, EventStream, Incoming, connect};
use carmi_api::control::OwnerLink;
use carmi_api::handshake::Secret;
use carmi_api::ids::HostId;
use carmi_api::msg::{Event, OwnerEvent, SpawnTarget};
use carmi_testkit::{Pool, PoolOptions, bin_dir, scratch};

// In a directory without `main.rs`, so that Cargo does not take it for a binary.
#[path = "carmi_owner_bench/soak.rs"]
mod soak;
#[path = "carmi_owner_bench/soak_proc.rs"]
mod soak_proc;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const SLOTS: u32 = 4;
const ROUNDS: usize = 30;
const IDLE_SECONDS: u64 = 30;

fn main() -> ExitCode {
    // The soak's WoDi run: this executable is also its server and workers.
    wodi::enter();
    if wodi::worker::started_as_worker() {
        return match wodi::worker::Worker::new()
            .on_step_raw(|_, data| soak::work(data))
            .run()
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("carmi-owner-bench worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = rt.block_on(async {
        if what == "stop" || what == "all" {
            stop().await?;
        }
        if what == "idle" || what == "all" {
            idle().await?;
        }
        if what == "soak" {
            let args: Vec<String> = std::env::args().skip(2).collect();
            soak::soak(soak::SoakArgs::parse(&args)?).await?;
        }
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-owner-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    carmi_local::owner::parse_stat_ticks(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// Spins until every pid's state satisfies `ok`; the time it took.
fn wait_states(pids: &[u32], ok: impl Fn(Option<char>) -> bool) -> Result<Duration> {
    let t = Instant::now();
    while !pids.iter().all(|&p| ok(state(p))) {
        if t.elapsed() > Duration::from_secs(10) {
            let states: Vec<_> = pids.iter().map(|&p| (p, state(p))).collect();
            return Err(format!("processes did not change state within 10 s: {states:?}").into());
        }
        std::hint::spin_loop();
    }
    Ok(t.elapsed())
}

/// A pool of one machine whose owner policy never preempts and continues
/// soon after the owner leaves (5 policy minutes of `minute` seconds), so
/// that rounds repeat quickly.
fn owner_pool(name: &str, minute: f64) -> Pool {
    let policy = format!("[policy]\nminute = {minute}\npreempt = \"false\"\n");
    let options = PoolOptions {
        local_config: policy.to_string(),
        ..PoolOptions::default()
    };
    Pool::start_with(name, SLOTS, &[vec![]], options)
}

/// A job on every slot of `pool`'s machine, each a shell with a child that
/// lives `lifetime_s` seconds: the application's handle, its events and the
/// processes' pids.
async fn families(pool: &Pool, lifetime_s: u64) -> Result<(Carmi, EventStream, Vec<u32>)> {
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, mut events) = connect(opts).await?;
    let class = carmi.define_class("any", "true");
    let add = carmi.addhosts("any", SLOTS, SLOTS);
    let mut hosts: Vec<HostId> = Vec::new();
    let exe = pool.dir.join("family.sh");
    std::fs::write(
        &exe,
        format!("#!/bin/sh\necho $$ > \"$1\"; sleep {lifetime_s} & echo $! >> \"$1\"; wait\n"),
    )?;
    std::fs::set_permissions(
        &exe,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )?;
    let mut started = 0;
    let mut pidfiles: Vec<PathBuf> = Vec::new();
    while started < SLOTS {
        let Some(item) = events.next().await else {
            return Err("event stream ended".into());
        };
        match item {
            Incoming::Rm(Event::HostsAdded {
                request, hosts: h, ..
            }) if request == add => {
                for info in h {
                    let file = pool.dir.join(format!("pids{}", hosts.len()));
                    carmi.class_spawn(
                        &exe,
                        vec![file.display().to_string()],
                        SpawnTarget::Host(info.host),
                    );
                    pidfiles.push(file);
                    hosts.push(info.host);
                }
            }
            Incoming::Rm(Event::ProcessStarted { .. }) => started += 1,
            Incoming::Rm(Event::Failed { request, failure })
                if request == class || request == add =>
            {
                return Err(format!("{failure:?}").into());
            }
            _ => {}
        }
    }
    let mut pids = Vec::new();
    for f in &pidfiles {
        let t = Instant::now();
        loop {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let p: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if p.len() == 2 {
                pids.extend(p);
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                return Err(format!("{} never got its pids", f.display()).into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok((carmi, events, pids))
}

async fn stop() -> Result<()> {
    let pool = owner_pool("owner-bench", 0.1);
    let (carmi, _events, pids) = families(&pool, 300).await?;
    let mut owner = OwnerLink::connect(&pool.locals[0].app_addr, &pool.secret).await?;
    let mut stopped = Vec::new();
    let mut answered = Vec::new();
    for _ in 0..ROUNDS {
        // The watcher spins on its own thread from just before the send.
        let t0 = Instant::now();
        let watched = pids.clone();
        let watcher = std::thread::spawn(move || {
            wait_states(&watched, |s| s == Some('T')).map(|_| t0.elapsed())
        });
        owner.send(OwnerEvent::Arrive).await?;
        answered.push(t0.elapsed());
        stopped.push(watcher.join().map_err(|_| "watcher panicked")??);
        owner.send(OwnerEvent::Leave).await?;
        wait_states(&pids, |s| matches!(s, Some('S' | 'R')))?;
    }
    stopped.sort();
    answered.sort();
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    println!(
        "Command: `cargo run --release -p carmi-benches --bin carmi-owner-bench -- stop` \
         (1 machine, {SLOTS} slots, a shell and its child per slot = {} processes, {ROUNDS} rounds)\n",
        pids.len()
    );
    println!("| owner `Arrive` sent -> | median | max |");
    println!("|---|---|---|");
    println!(
        "| all processes in state `T` | {} | {} |",
        ms(stopped[ROUNDS / 2]),
        ms(stopped[ROUNDS - 1])
    );
    println!(
        "| control answer received | {} | {} |",
        ms(answered[ROUNDS / 2]),
        ms(answered[ROUNDS - 1])
    );
    println!();
    drop(carmi);
    Ok(())
}

/// Starts a daemon, returning it and the `listening on` address it prints.
fn daemon(mut cmd: Command, log: &Path) -> Result<(Child, String)> {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("daemon printed {line:?}"))?
        .to_string();
    Ok((child, addr))
}

async fn idle() -> Result<()> {
    let bins = bin_dir();
    let dir = scratch("owner-idle");
    let secret = dir.join("pool.secret");
    // Private, as the daemons require of a pool secret.
    carmi_api::files::write_private(&secret, &Secret::generate_text(), false)?;
    let mut g = Command::new(bins.join("carmi-global"));
    g.args(["--listen", "127.0.0.1:0", "--secret"])
        .arg(&secret)
        .arg("--state-dir")
        .arg(dir.join("global-state"))
        // What an idle local RM costs, not authentication: a secret-only pool.
        .arg("--insecure");
    let (mut global, gaddr) = daemon(g, &dir.join("global.log"))?;
    println!(
        "Command: `cargo run --release -p carmi-benches --bin carmi-owner-bench -- idle` \
         (one idle `carmi-local`, 2 slots, no jobs, default heartbeat and policy, {IDLE_SECONDS} s)\n"
    );
    println!("| owner source | CPU time | share of one core |");
    println!("|---|---|---|");
    for source in ["simulated", "real"] {
        let mut l = Command::new(bins.join("carmi-local"));
        l.args(["--global", &gaddr, "--secret"])
            .arg(&secret)
            .args(["--name", source, "--slots", "2", "--owner", source])
            .arg("--work-dir")
            .arg(dir.join(source));
        let (mut local, _) = daemon(l, &dir.join(format!("{source}.log")))?;
        // Start-up (benchmark, first advertisement) is not idle time.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let pid = local.id();
        let before = cpu_ticks(pid).ok_or("cannot read the local RM's CPU time")?;
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs(IDLE_SECONDS)).await;
        let after = cpu_ticks(pid).ok_or("cannot read the local RM's CPU time")?;
        let wall = t.elapsed().as_secs_f64();
        let cpu = (after - before) as f64 / carmi_local::owner::ticks_per_second();
        println!(
            "| {source} | {:.0} ms | {:.3}% |",
            cpu * 1e3,
            cpu / wall * 100.0
        );
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let _ = local.wait();
    }
    println!();
    let _ = global.kill();
    let _ = global.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
