//! Example WoDi applications and the code they share.
//!
//! Each example is one executable that plays three roles: its `main` calls
//! [`wodi::enter`] first (it becomes the WoDi server when the master starts
//! it with `WODI_ROLE=server`), then runs the worker when
//! [`wodi::worker::started_as_worker`] says the server started it, and
//! otherwise runs the master. The master names its own executable as the
//! worker, so nothing else has to be installed. By default each example
//! starts an embedded pool ([`carmi_pool::EmbeddedPool`]) in its own process
//! and shuts it down at the end; `--local HOST:PORT [--secret FILE]` runs it on
//! a real pool instead. [`run_on_pool`] does that set-up for every example,
//! Ctrl-C included: a run interrupted at any point stops its master, its
//! server, its workers and the pool, and removes the pool's folder.
//!
//! # Layout
//! - `kernels`: the numeric work of the examples (pi, Mandelbrot tiles,
//!   the materials worker's eigenvalue kernel, a checksum).
//! - `timeline`: an SVG picture of a run in the manner of the paper's Figure 9.
//! - `progress`: the per-cycle progress bar and lines of the main job.
//! - this file: the pool (embedded or given) and the run on it
//!   ([`run_on_pool`], [`Interrupts`]), the host speed from the
//!   machine ad, the duty-cycled compute of the materials worker, the
//!   conversion of [`wodi::Stats`] into a [`timeline::Timeline`], and the
//!   final table.
//! - `src/bin/`: `materials` (the main job), `pi`, `commands`, `mandelbrot`.

#![warn(missing_docs)]

pub mod kernels;
pub mod progress;
pub mod timeline;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use carmi_pool::model::OwnerModel;
use carmi_pool::pool::{EmbeddedPool, PoolOptions};
use wodi::Stats;
use wodi::master::{MasterConfig, PoolAddr};
use wodi::stats::PeriodKind;

/// Environment variable a local RM sets for the processes it starts: the
/// path of a file holding the machine ad, one `Name = value` per line.
pub const ENV_MACHINE_AD: &str = "CARMI_MACHINE_AD";

/// Prints `text` and a newline on stdout, ignoring a closed stdout: an
/// example piped into `head` goes on to the end (and shuts its pool down)
/// instead of panicking half-way.
pub fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|_| out.flush());
}

/// The options every example takes to run on a real pool instead of
/// starting an embedded one (flattened into its command line).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct PoolArgs {
    /// Run on a real pool through its local RM at HOST:PORT instead of an
    /// embedded pool (`--pool` is an old name of this option).
    #[arg(long = "local", alias = "pool", value_name = "HOST:PORT")]
    pub local: Option<String>,
    /// The real pool's secret file; else CARMI_SECRET, the embedded pool
    /// `carmi pool up` runs, or the config file, as for `carmi`.
    #[arg(long, value_name = "FILE")]
    pub secret: Option<PathBuf>,
}

/// The embedded pool an example starts when no real pool is given.
#[derive(Clone, Debug)]
pub struct Embedded {
    /// Machines in the pool.
    pub hosts: usize,
    /// How their owners behave.
    pub owners: OwnerModel,
    /// Model seconds of owner behaviour per wall second.
    pub speedup: f64,
    /// Seed of the owners and the machine ads.
    pub seed: u64,
}

impl Embedded {
    /// `hosts` machines whose owners never come back (the small examples):
    /// seed 0, owner clock at wall speed.
    pub fn idle(hosts: usize) -> Embedded {
        Embedded {
            hosts,
            owners: OwnerModel::None,
            speedup: 1.0,
            seed: 0,
        }
    }
}

/// The pool a master runs on: one it started (and must shut down) or one given.
pub struct RunPool {
    /// The embedded pool, when this process started one.
    pub embedded: Option<EmbeddedPool>,
    /// Where the master connects.
    pub addr: PoolAddr,
}

impl RunPool {
    /// Uses the real pool `args` names when it names one; otherwise starts
    /// the embedded pool `embedded`. Signals are the caller's to handle (see
    /// [`run_on_pool`]), so that the master stops first and the pool
    /// is shut down after it.
    pub async fn open(args: &PoolArgs, embedded: Embedded) -> anyhow::Result<RunPool> {
        match &args.local {
            Some(local) => {
                let given = carmi_api::coords::Coordinates {
                    secret: args.secret.clone(),
                    ..Default::default()
                };
                let lookup = |k: &str| std::env::var(k).ok();
                let coords = carmi_api::coords::resolve(&given, &lookup)?;
                let Some(secret_file) = coords.secret else {
                    anyhow::bail!(
                        "--local needs the pool's secret: {}",
                        carmi_api::coords::where_to_give("secret", &lookup)
                    );
                };
                Ok(RunPool {
                    embedded: None,
                    addr: PoolAddr {
                        local: local.clone(),
                        secret_file,
                        token_file: coords.token,
                    },
                })
            }
            None => {
                let pool = EmbeddedPool::start(PoolOptions {
                    hosts: embedded.hosts,
                    owners: embedded.owners,
                    speedup: embedded.speedup,
                    seed: embedded.seed,
                    handle_signals: false,
                    ..Default::default()
                })
                .await
                .map_err(|e| anyhow::anyhow!("starting the embedded pool: {e}"))?;
                let addr = PoolAddr {
                    local: pool.submit_addr().to_string(),
                    secret_file: pool.secret_file().to_path_buf(),
                    token_file: Some(pool.token_file().to_path_buf()),
                };
                Ok(RunPool {
                    embedded: Some(pool),
                    addr,
                })
            }
        }
    }

    /// A master configuration for this pool whose workers are this
    /// executable (no arguments), on `hosts` hosts of any kind.
    pub fn master_config(&self, hosts: u32) -> anyhow::Result<MasterConfig> {
        let mut cfg = MasterConfig::new(std::env::current_exe()?, vec![], "true", hosts);
        cfg.pool = Some(self.addr.clone());
        Ok(cfg)
    }

    /// Shuts the embedded pool down (kills what still runs on it, removes its folder).
    pub async fn close(self) {
        if let Some(pool) = self.embedded {
            pool.shutdown().await;
        }
    }
}

/// Runs an example's master: builds a tokio runtime of two threads (the
/// machine's cores are shared with the embedded pool and its workers),
/// opens the pool (see [`RunPool::open`]), runs `job` on it, and shuts the
/// pool down afterwards. On SIGINT (Ctrl-C) or SIGTERM, from the start of
/// the pool on, the job is dropped (its master's server then stops the
/// workers and releases the hosts), the pool is shut down, and the process
/// exits with status [`INTERRUPTED`], leaving nothing behind.
pub fn run_on_pool<T>(
    args: &PoolArgs,
    embedded: Embedded,
    job: impl AsyncFnOnce(&RunPool) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(async {
            // Watched before the pool starts: a Ctrl-C while it comes up
            // must not kill the process with the pool's folder half made.
            let mut signals = Interrupts::watch()?;
            let pool = RunPool::open(args, embedded).await?;
            let result = signals.until_interrupted(job(&pool)).await;
            close_after(pool, result).await
        })
}

/// SIGINT (Ctrl-C) and SIGTERM, caught from the moment [`Interrupts::watch`]
/// returns instead of ending the process on the spot; a signal that came
/// while nobody was waiting is seen by the next
/// [`Interrupts::until_interrupted`].
pub struct Interrupts {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Interrupts {
    /// Starts catching SIGINT and SIGTERM (inside a tokio runtime).
    pub fn watch() -> anyhow::Result<Interrupts> {
        use tokio::signal::unix::{SignalKind, signal};
        let catch =
            |kind, name| signal(kind).map_err(|e| anyhow::anyhow!("cannot catch {name}: {e}"));
        Ok(Interrupts {
            int: catch(SignalKind::interrupt(), "SIGINT")?,
            term: catch(SignalKind::terminate(), "SIGTERM")?,
        })
    }

    /// Runs `fut` until it ends or a signal comes; `None` when a signal came
    /// first (or had come already). Dropping the unfinished future drops its
    /// master, whose server then stops the workers and releases the hosts;
    /// the caller shuts the pool down next ([`close_after`]).
    pub async fn until_interrupted<T>(
        &mut self,
        fut: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        tokio::select! {
            // Signals first: one that is already pending wins over a job
            // that would otherwise start.
            biased;
            _ = self.int.recv() => None,
            _ = self.term.recv() => None,
            out = fut => Some(out),
        }
    }
}

/// Exit status after an interruption (128 + SIGINT, as shells report it).
pub const INTERRUPTED: i32 = 130;

/// Shuts `pool` down after a run that [`Interrupts::until_interrupted`] returned, and
/// hands back its result; if a signal ended the run, exits the process with
/// [`INTERRUPTED`] once the pool is down (so nothing is left running).
pub async fn close_after<T>(pool: RunPool, result: Option<T>) -> T {
    if result.is_none() {
        eprintln!("interrupted: shutting down");
    }
    pool.close().await;
    match result {
        Some(r) => r,
        None => {
            // The dropped master's server is still stopping its workers and
            // releasing its hosts; the process ends after it, not before.
            wait_for_children(CHILDREN_GRACE).await;
            std::process::exit(INTERRUPTED)
        }
    }
}

/// How long an interrupted example waits for its children to end.
const CHILDREN_GRACE: Duration = Duration::from_secs(5);

/// Waits until no child process of this process runs any more, for at most
/// `limit`, then kills those still running.
async fn wait_for_children(limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let running = running_children();
        if running.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            for pid in running {
                eprintln!("child process {pid} did not stop within {limit:?}; killing it");
                // SAFETY: a plain signal to a child of this process.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pids of this process's children that still run (zombies excluded).
fn running_children() -> Vec<i32> {
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let mut rest = stat
                .rsplit_once(')')
                .map(|(_, r)| r.split_whitespace())
                .into_iter()
                .flatten();
            let state = rest.next();
            let ppid = rest.next();
            ppid == Some(me.as_str()) && state != Some("Z")
        })
        .collect()
}

/// Owner model from a spec: `none`, `trace:FILE`, or `stochastic`, whose
/// owners here start on a Monday at 17:30 (owner-sim's default is 09:00):
/// at the owner clock of the main job (200x) a one-minute run then sees the
/// end of the working day, when machines are busy and owners come and go,
/// and the evening, when most machines free up, as in the paper's runs.
pub fn owner_model(spec: &str) -> anyhow::Result<OwnerModel> {
    if spec == "stochastic" {
        return Ok(OwnerModel::Stochastic(carmi_pool::Stochastic {
            start: 17.5 * 3600.0,
            ..Default::default()
        }));
    }
    carmi_pool::read_owner_model(spec).map_err(|e| anyhow::anyhow!("owner model {spec:?}: {e}"))
}

/// The `Speed` attribute of a machine ad in old ClassAd syntax, if present.
pub fn speed_from_ad(ad: &str) -> Option<f64> {
    ad.lines().find_map(|line| {
        let (name, value) = line.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("speed") {
            return None;
        }
        let v: f64 = value.trim().trim_end_matches(';').trim().parse().ok()?;
        (v.is_finite() && v > 0.0).then_some(v)
    })
}

/// This host's relative speed: `Speed` from the machine ad named by
/// [`ENV_MACHINE_AD`], or 1.0 when the variable, the file or the attribute
/// is missing (e.g. on a local RM that does not write the ad yet).
pub fn host_speed() -> f64 {
    std::env::var_os(ENV_MACHINE_AD)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|ad| speed_from_ad(&ad))
        .unwrap_or(1.0)
}

/// Fraction of each time slice the materials worker computes; it sleeps the rest.
pub const DUTY: f64 = 0.05;
/// Length of one compute-and-sleep slice.
const SLICE: Duration = Duration::from_millis(2);

/// Emulates `wall` seconds of computing on a shared machine: real work
/// ([`kernels::chain_eigen`] in small chunks) for a [`DUTY`] fraction of
/// every 2 ms slice, sleeping the rest. Sixteen emulated hosts share two
/// cores this way without starving each other or the pool's daemons, while
/// the step still takes its full wall time and burns real CPU. Returns the
/// last eigenvalue computed.
pub fn duty_cycled_work(k: f64, wall: Duration) -> f64 {
    let start = Instant::now();
    let mut lambda = kernels::chain_eigen(k, 4);
    loop {
        let slice_start = Instant::now();
        if slice_start >= start + wall {
            return lambda;
        }
        let busy = SLICE.mul_f64(DUTY);
        while slice_start.elapsed() < busy {
            lambda = kernels::chain_eigen(k, 4);
        }
        let left = (start + wall).saturating_duration_since(Instant::now());
        std::thread::sleep(SLICE.saturating_sub(slice_start.elapsed()).min(left));
    }
}

/// The picture of a run: one row per host stay, cycle ends marked.
pub fn timeline_of(stats: &Stats, title: &str) -> timeline::Timeline {
    let rows = stats
        .timeline
        .iter()
        .map(|h| {
            let mut row = timeline::Row {
                host: h.host.to_string(),
                ..Default::default()
            };
            for p in &h.periods {
                let activity = match p.kind {
                    PeriodKind::Allocated => timeline::Activity::Allocated,
                    PeriodKind::Busy => timeline::Activity::Busy,
                    PeriodKind::Suspended => timeline::Activity::Suspended,
                    PeriodKind::Lost => {
                        row.losses.push(p.start_s);
                        continue;
                    }
                };
                row.periods.push(timeline::Period {
                    start: p.start_s,
                    end: p.end_s,
                    activity,
                });
            }
            row
        })
        .collect();
    timeline::Timeline {
        length: stats.execution_time_s,
        rows,
        cycle_ends: stats.cycles.iter().filter_map(|c| c.end_s).collect(),
        title: title.to_string(),
    }
}

/// The final table, in the terms of the paper's Tables 1 and 2.
pub fn table(stats: &Stats) -> String {
    // Steps compute by the clock here (see `duty_cycled_work`): the time a
    // host spent on steps is what its CPU time would be on a dedicated
    // machine, and the paper's efficiency is that over the occupancy.
    let busy = stats.busy_time_s;
    let rows: [(&str, String); 10] = [
        ("run length", format!("{:.1} s", stats.execution_time_s)),
        ("occupancy", format!("{:.1} host-s", stats.occupancy_s)),
        ("busy time", format!("{busy:.1} host-s")),
        (
            "efficiency",
            format!("{:.1} %  (busy / occupancy)", stats.efficiency * 100.0),
        ),
        (
            "CPU time",
            format!("{:.1} s  (5% duty cycle)", stats.cpu_time_s),
        ),
        ("hosts added", stats.hosts.added.to_string()),
        ("hosts lost", stats.hosts.lost.to_string()),
        ("steps delivered", stats.steps_delivered.to_string()),
        ("step copies", stats.step_copies.to_string()),
        (
            "steps re-sent",
            stats
                .step_copies
                .saturating_sub(stats.steps_delivered)
                .to_string(),
        ),
    ];
    let mut out = String::new();
    for (name, value) in rows {
        out.push_str(&format!("  {name:<18}{value:>16}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wodi::stats::{HostTimeline, Period};

    #[test]
    fn speed_is_read_from_the_ad_and_defaults_to_none() {
        let ad = "Memory = 2048\nSpeed = 1.75\nName = \"host03\"\n";
        assert_eq!(speed_from_ad(ad), Some(1.75));
        assert_eq!(speed_from_ad("speed=0.5;"), Some(0.5));
        assert_eq!(speed_from_ad("Memory = 1\n"), None);
        assert_eq!(speed_from_ad("Speed = fast\n"), None);
        assert_eq!(speed_from_ad("Speed = -1\n"), None);
        assert_eq!(speed_from_ad("SpeedUp = 3\n"), None);
    }

    #[test]
    fn duty_cycled_work_takes_its_time_and_returns_an_eigenvalue() {
        let t0 = Instant::now();
        let l = duty_cycled_work(0.3, Duration::from_millis(30));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert_eq!(l, kernels::chain_eigen(0.3, 4));
    }

    #[test]
    fn timeline_keeps_periods_and_turns_losses_into_marks() {
        let stats = Stats {
            execution_time_s: 10.0,
            timeline: vec![HostTimeline {
                host: "h3".parse().unwrap(),
                class: "workers".into(),
                periods: vec![
                    Period {
                        kind: PeriodKind::Allocated,
                        start_s: 1.0,
                        end_s: 8.0,
                    },
                    Period {
                        kind: PeriodKind::Busy,
                        start_s: 2.0,
                        end_s: 3.0,
                    },
                    Period {
                        kind: PeriodKind::Lost,
                        start_s: 8.0,
                        end_s: 8.0,
                    },
                ],
            }],
            ..Default::default()
        };
        let t = timeline_of(&stats, "t");
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.rows[0].periods.len(), 2);
        assert_eq!(t.rows[0].periods[1].activity, timeline::Activity::Busy);
        assert_eq!(t.rows[0].losses, vec![8.0]);
        assert!(table(&stats).contains("run length"));
    }
}
