//! The `grant-latency` benchmark: what one host grant costs a job, from
//! `addhosts` to a worker that has said hello, phase by phase, over the real
//! daemons. The simulator's `worker_startup` and `reacquire` defaults come
//! from its figures (issue 24: the cost-aware rule weighs a real cost).
//!
//! One round per grant, on a pool of one-slot machines:
//!
//! 1. `addhosts` of one host, until `HostsAdded` (**match**);
//! 2. `class_spawn` on that host of an executable no machine has seen (a
//!    copy of this program with a random trailer, so a new hash), until
//!    `ProcessStarted` (**spawn, cold**: upload, fetch into the machine's
//!    cache, sandbox copy, start), then until the worker's hello arrives
//!    over TCP (the worker is this program, `grant-worker`, which connects
//!    as a WoDi worker connects to its server);
//! 3. the same executable on the same host again (**spawn, cached**), and
//!    its hello;
//! 4. `delhosts`, so the next round is a grant again.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::ids::HostId;
use carmi_api::msg::{Event, ExitStatus, SpawnTarget};
use carmi_testkit::{Inbox, Pool, PoolOptions};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::inbox::bench_inbox;
use super::{PATIENCE, Result, load_average};

/// The argument that makes this program a grant benchmark's worker.
pub(super) const GRANT_WORKER: &str = "grant-worker";

/// How the benchmark is run (`carmi-bench grant-latency [GRANTS] [MACHINES] [--json]`).
pub(super) struct GrantRun {
    /// Rounds, one grant each.
    pub grants: usize,
    /// One-slot machines in the pool.
    pub machines: usize,
    /// Print one JSON object instead of markdown.
    pub json: bool,
}

/// The timings of one round, each from the call that starts its phase.
struct Round {
    /// `addhosts` to `HostsAdded`.
    matched: Duration,
    cold: Spawned,
    cached: Spawned,
}

/// One spawn's timings from its `class_spawn` call.
struct Spawned {
    /// Until the worker's `main` ran (by the wall clock it reports: all
    /// processes are on this host).
    ran: Duration,
    /// Until `ProcessStarted` reached the application (often after the
    /// hello: the event goes through the local RMs, the hello straight).
    event: Duration,
    /// Until the worker's hello came in.
    hello: Duration,
}

/// Nanoseconds since the Unix epoch: the wall clock, which the benchmark
/// and its workers share.
fn unix_nanos(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// The worker's side: connects to `addr`, writes `tag` and when its `main`
/// ran (Unix nanoseconds), exits. Blocking I/O and no runtime, as a WoDi
/// worker (`wodi::worker`) starts.
pub(super) fn grant_worker(args: &[String]) -> std::process::ExitCode {
    let ran = unix_nanos(SystemTime::now());
    let (Some(addr), Some(tag)) = (args.first(), args.get(1)) else {
        eprintln!("usage: carmi-bench {GRANT_WORKER} ADDR TAG");
        return std::process::ExitCode::from(2);
    };
    let said = std::net::TcpStream::connect(addr.as_str())
        .and_then(|mut s| s.write_all(format!("{tag} {ran}\n").as_bytes()));
    match said {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carmi-bench {GRANT_WORKER}: {addr}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Accepts workers' connections and hands on each hello's tag with when it
/// arrived (timed here, not when the round gets to it).
fn hello_listener(listener: tokio::net::TcpListener) -> mpsc::UnboundedReceiver<(String, Instant)> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut text = String::new();
                if stream.read_to_string(&mut text).await.is_ok() {
                    let _ = tx.send((text.trim().to_string(), Instant::now()));
                }
            });
        }
    });
    rx
}

/// A copy of this program whose content no machine has cached: its bytes,
/// then 4 KiB of `seed`-derived filler (an ELF file runs with a trailer).
fn fresh_executable(dir: &Path, round: usize, seed: u64) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let me = std::env::current_exe()?;
    let mut bytes = std::fs::read(&me)?;
    let mut x = seed
        .wrapping_add(round as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        | 1;
    for _ in 0..512 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    let path = dir.join(format!("grant-worker-{round}"));
    std::fs::write(&path, &bytes)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// State shared by the rounds.
struct Bench {
    carmi: Carmi,
    inbox: Inbox,
    hellos: mpsc::UnboundedReceiver<(String, Instant)>,
    addr: String,
}

impl Bench {
    /// Spawns `exe` on `host` as a worker tagged `tag`; times its start and
    /// hello, then waits for it to exit (successfully).
    async fn spawn(&mut self, exe: &Path, host: HostId, tag: &str) -> Result<Spawned> {
        let (t0, wall0) = (Instant::now(), unix_nanos(SystemTime::now()));
        let req = self.carmi.class_spawn(
            exe,
            [GRANT_WORKER, self.addr.as_str(), tag],
            SpawnTarget::Host(host),
        );
        let what = format!("worker {tag} started");
        self.inbox
            .try_take(&what, |x| match x {
                Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == req => Some(()),
                _ => None,
            })
            .await?;
        let event = t0.elapsed();
        let (ran, hello) = loop {
            let got = tokio::time::timeout(PATIENCE, self.hellos.recv()).await;
            let (text, at) = match got {
                Ok(Some(hello)) => hello,
                Ok(None) => return Err("the hello listener stopped".into()),
                Err(_) => return Err(format!("no hello from worker {tag}").into()),
            };
            let mut words = text.split_whitespace();
            if words.next() != Some(tag) {
                continue;
            }
            let ran: u128 = words
                .next()
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| format!("worker {tag} said {text:?}"))?;
            let ran = Duration::from_nanos(ran.saturating_sub(wall0) as u64);
            break (ran, at.saturating_duration_since(t0));
        };
        let what = format!("worker {tag} exited");
        let status = self
            .inbox
            .try_take(&what, |x| match x {
                Incoming::Rm(Event::ProcessExited {
                    request, status, ..
                }) if *request == req => Some(status.clone()),
                _ => None,
            })
            .await?;
        if status != ExitStatus::Code(0) {
            return Err(format!("worker {tag} ended with {status:?}").into());
        }
        Ok(Spawned { ran, event, hello })
    }

    /// One grant: match, a cold spawn and a cached one, and the host given back.
    async fn round(&mut self, exe: &Path, round: usize) -> Result<Round> {
        let t0 = Instant::now();
        let add = self.carmi.addhosts("any", 1, 1);
        let (hosts, _) = self.inbox.try_hosts_added(add, 1).await?;
        let matched = t0.elapsed();
        let host = hosts[0];
        let cold = self.spawn(exe, host, &format!("{round}-cold")).await?;
        let cached = self.spawn(exe, host, &format!("{round}-cached")).await?;
        self.inbox.try_done(self.carmi.delhosts(&hosts)).await?;
        Ok(Round {
            matched,
            cold,
            cached,
        })
    }
}

/// The rounds of `run` on `pool`.
async fn rounds(pool: &Pool, run: &GrantRun) -> Result<Vec<Round>> {
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await?;
    let mut inbox = bench_inbox(events);
    inbox.try_done(carmi.define_class("any", "true")).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let mut bench = Bench {
        carmi,
        inbox,
        hellos: hello_listener(listener),
        addr,
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let mut out = Vec::with_capacity(run.grants);
    for r in 0..run.grants {
        // Written before the round's clock starts: the copy is not the pool's work.
        let exe = fresh_executable(&pool.dir, r, seed)?;
        out.push(bench.round(&exe, r).await?);
        let _ = std::fs::remove_file(&exe);
    }
    bench.carmi.flush().await;
    Ok(out)
}

/// p50, p90 and maximum of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Spread {
    p50: f64,
    p90: f64,
    max: f64,
}

impl Spread {
    /// Nearest-rank percentiles; `None` for no samples.
    fn of(samples: &[Duration]) -> Option<Spread> {
        let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        (!v.is_empty()).then(|| Spread {
            p50: rank(0.5),
            p90: rank(0.9),
            max: v[v.len() - 1],
        })
    }
}

/// The reported phases: a key for JSON, a name and how it is derived, and
/// its value in one round.
type Phase = (&'static str, &'static str, fn(&Round) -> Duration);

const PHASES: [Phase; 8] = [
    ("match", "match: `addhosts` → `HostsAdded`", |r| r.matched),
    (
        "spawn_cold",
        "spawn, new executable: `class_spawn` → worker running (upload, fetch, sandbox, exec)",
        |r| r.cold.ran,
    ),
    (
        "spawn_cached",
        "spawn, executable in the machine's cache: `class_spawn` → worker running",
        |r| r.cached.ran,
    ),
    (
        "fetch",
        "executable fetch: spawn new − spawn cached",
        |r| r.cold.ran.saturating_sub(r.cached.ran),
    ),
    (
        "first_message",
        "first message: worker running → its hello received (cached spawn)",
        |r| r.cached.hello.saturating_sub(r.cached.ran),
    ),
    (
        "started_event",
        "`class_spawn` → `ProcessStarted` at the application (cached spawn)",
        |r| r.cached.event,
    ),
    (
        "usable_cached",
        "**grant to usable worker, executable cached**: `addhosts` → hello",
        |r| r.matched + r.cached.hello,
    ),
    (
        "usable_cold",
        "**grant to usable worker, new executable**: `addhosts` → hello",
        |r| r.matched + r.cold.hello,
    ),
];

/// Runs the benchmark and prints its table (or JSON).
pub(super) fn run_grant_latency(rt: &tokio::runtime::Runtime, run: &GrantRun) -> Result<()> {
    // Patient heartbeats: a loaded box must not lose machines mid-round.
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 10,
        ..PoolOptions::default()
    };
    let machines = vec![Vec::new(); run.machines];
    let pool = Pool::start_with("bench-grant", 1, &machines, options);
    pool.wait_registered();
    let load = load_average();
    let exe_bytes = std::fs::metadata(std::env::current_exe()?)?.len();
    eprintln!("carmi-bench: grant-latency, {} grants", run.grants);
    let rounds = rt
        .block_on(rounds(&pool, run))
        .map_err(|e| format!("{e}\n{}", pool.logs()))?;
    drop(pool);
    let spreads: BTreeMap<&str, Spread> = PHASES
        .iter()
        .filter_map(|(key, _, pick)| {
            let v: Vec<Duration> = rounds.iter().map(pick).collect();
            Spread::of(&v).map(|s| (*key, s))
        })
        .collect();
    if run.json {
        let phases: serde_json::Map<String, serde_json::Value> = spreads
            .iter()
            .map(|(k, s)| {
                let v = serde_json::json!({"p50_ms": s.p50, "p90_ms": s.p90, "max_ms": s.max});
                (k.to_string(), v)
            })
            .collect();
        let out = serde_json::json!({
            "grants": run.grants, "machines": run.machines, "exe_bytes": exe_bytes,
            "release": !cfg!(debug_assertions), "load": load, "phases": phases,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "```\ncargo run --release -p carmi-benches --bin carmi-bench -- grant-latency {} {}\n```\n",
        run.grants, run.machines
    );
    println!(
        "{} grants of one host each on {} one-slot local RMs, all on this host; per grant a \
         {:.1} MiB worker (this benchmark's own executable with a fresh trailer) started twice \
         on the granted host, then the host given back. The worker connects over TCP and says \
         hello, as a WoDi worker connects to its server. Load average at the start: {load}.\n",
        run.grants,
        run.machines,
        exe_bytes as f64 / f64::from(1 << 20)
    );
    println!("| Phase | p50 (ms) | p90 (ms) | max (ms) |");
    println!("|---|---:|---:|---:|");
    for (key, name, _) in PHASES {
        if let Some(s) = spreads.get(key) {
            println!("| {name} | {:.1} | {:.1} | {:.1} |", s.p50, s.p90, s.max);
        }
    }
    println!();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        let s = Spread::of(&ms(&[10, 1, 9, 2, 8, 3, 7, 4, 6, 5])).expect("samples");
        assert_eq!((s.p50, s.p90, s.max), (5.0, 9.0, 10.0));
        let one = Spread::of(&ms(&[7])).expect("a sample");
        assert_eq!((one.p50, one.p90, one.max), (7.0, 7.0, 7.0));
        assert_eq!(Spread::of(&[]), None);
    }
}
