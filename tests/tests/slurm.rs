//! Pilots from a real Slurm (issue "Pilots: grow the pool from a Slurm
//! cluster"): `.ci/slurm.sh` sets up a one-node cluster; these tests run a
//! pool whose only machine does not match the job, add an allocation queue
//! with `carmi alloc add slurm`, and run WoDi jobs on the pilots it submits.
//! Without Slurm they skip with a message, unless
//! `CARMI_CI_REQUIRE_SERVICES=1` (CI), where they fail.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use carmi_tests::{Pool, PoolOptions, bin_dir, text};
use wodi::StepId;
use wodi::master::{Master, MasterConfig, PoolAddr, ServerCommand, StepOutcome};

/// The class of the tests' jobs: pilots only, never the pool's own machine.
const PILOTS_ONLY: &str = "PilotQueue =!= undefined";

/// Whether Slurm answers here; `None` with what is missing when it does not.
fn slurm_missing() -> Option<String> {
    match Command::new("sinfo").args(["-h", "-o", "%t"]).output() {
        Err(e) => Some(format!("cannot run sinfo: {e}")),
        Ok(o) if !o.status.success() => Some(format!("sinfo failed: {}", text(&o.stderr).trim())),
        Ok(o) => {
            let states = text(&o.stdout);
            let up = states
                .lines()
                .any(|s| ["idle", "mix", "alloc"].contains(&s.trim()));
            (!up).then(|| format!("no node is up (sinfo says {:?})", states.trim()))
        }
    }
}

/// True when the test may run; prints the skip line (or panics in CI).
fn slurm_ready(test: &str) -> bool {
    let Some(missing) = slurm_missing() else {
        return true;
    };
    let msg = format!("SKIP {test}: slurm not available ({missing})");
    if std::env::var("CARMI_CI_REQUIRE_SERVICES").is_ok_and(|v| v == "1") {
        panic!("{msg}");
    }
    eprintln!("{msg}");
    false
}

/// The tests share one Slurm cluster: one at a time.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// WoDi's server and test worker, built beside the daemons.
fn wodi_bins() -> (PathBuf, PathBuf) {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let dir = bin_dir();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "-q",
                "-p",
                "wodi",
                "--bin",
                "wodi-server",
                "--bin",
                "wodi-test-worker",
            ])
            .status()
            .expect("run cargo build for wodi");
        assert!(
            status.success(),
            "building wodi-server and wodi-test-worker failed"
        );
    });
    (dir.join("wodi-server"), dir.join("wodi-test-worker"))
}

/// A pool of one machine (the submit side, which the jobs' class excludes).
/// Heartbeats more patient than the other tests': starting pilots (Slurm,
/// their benchmark) loads a small machine, and the submit machine declared
/// lost would end the job.
fn pool(name: &str) -> (Pool, Cleanup) {
    let options = PoolOptions {
        heartbeat_ms: 500,
        missed_heartbeats: 6,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with(name, 1, &[Vec::new()], options);
    pool.wait_registered();
    let cleanup = Cleanup(pool.dir.display().to_string());
    (pool, cleanup)
}

/// Cancels, when dropped, every Slurm job whose script lies in the pool's
/// directory: a failed test leaves no pilot running in the shared cluster.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(out) = Command::new("squeue")
            .args(["-h", "-a", "-o", "%i|%o"])
            .output()
        else {
            return;
        };
        for line in text(&out.stdout).lines() {
            if let Some((id, cmd)) = line.split_once('|')
                && cmd.contains(&self.0)
            {
                let _ = Command::new("scancel").arg(id.trim()).status();
            }
        }
    }
}

/// Runs `carmi alloc ARGS` on `pool`; its standard output, or a panic with
/// its error and the pool's logs.
fn alloc(pool: &Pool, args: &[&str]) -> String {
    let out = pool
        .carmi()
        .arg("alloc")
        .args(args)
        .output()
        .expect("run carmi alloc");
    assert!(
        out.status.success(),
        "carmi alloc {args:?} failed: {}\n{}",
        text(&out.stderr),
        pool.logs()
    );
    text(&out.stdout)
}

/// Queue `id` as `carmi alloc info --json` shows it.
fn info(pool: &Pool, id: u64) -> serde_json::Value {
    let out = alloc(pool, &["info", "--json", &id.to_string()]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("alloc info --json is JSON");
    v["Queue"].clone()
}

/// The Slurm job ids of a queue's allocations.
fn batch_jobs(q: &serde_json::Value) -> Vec<String> {
    q["allocations"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|a| a["batch_job"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Which of `jobs` Slurm still lists.
fn in_squeue(jobs: &[String]) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-a", "-o", "%i"])
        .output()
        .expect("run squeue");
    let listed = text(&out.stdout);
    jobs.iter()
        .filter(|j| listed.lines().any(|l| l.trim() == j.as_str()))
        .cloned()
        .collect()
}

/// Pids of pilot processes of this pool (their command line names its secret).
fn pilot_processes(pool: &Pool) -> Vec<u32> {
    let secret = pool.secret_path.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = text(&cmd).replace('\0', " ");
        if cmd.contains(&secret) && cmd.contains("pilot-a") {
            out.push(pid);
        }
    }
    out
}

/// Polls `check` every 200 ms until it holds, at most `limit`; panics with `what`.
fn wait_until(limit: Duration, what: &str, pool: &Pool, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !check() {
        assert!(
            Instant::now() < end,
            "{what} within {limit:?}\n{}",
            pool.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A WoDi master for `count` pilot hosts on `pool`.
fn master_config(pool: &Pool, count: u32) -> MasterConfig {
    let (server, worker) = wodi_bins();
    let mut cfg = MasterConfig::new(worker, Vec::new(), PILOTS_ONLY, count);
    cfg.server = ServerCommand::Path(server);
    cfg.pool = Some(PoolAddr {
        local: pool.locals[0].app_addr.clone(),
        secret_file: pool.secret_path.clone(),
    });
    cfg
}

/// Sends `n` steps of `data(s)` and checks that each comes back exactly once.
async fn steps_exactly_once(master: &mut Master, n: u64, data: impl Fn(u64) -> String) {
    for s in 0..n {
        master.send_work(StepId(s), &data(s)).unwrap();
    }
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    while seen.values().sum::<u32>() < n as u32 {
        let next: StepOutcome<String> =
            tokio::time::timeout(Duration::from_secs(240), master.recv_result())
                .await
                .expect("a step outcome within 240 s")
                .expect("the run goes on");
        match next {
            StepOutcome::Done(step, r) => {
                assert!(r.ends_with(&data(step.0)), "step {step} answered {r}");
                *seen.entry(step.0).or_default() += 1;
            }
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
        }
    }
    assert_eq!(seen, (0..n).map(|s| (s, 1)).collect(), "every step once");
}

/// The queue id `carmi alloc add` printed.
fn queue_id(added: &str) -> u64 {
    added
        .split_whitespace()
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no queue id in {added:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_needing_three_hosts_gets_pilots_and_they_leave_nothing_behind() {
    if !slurm_ready("a_job_needing_three_hosts_gets_pilots_and_they_leave_nothing_behind") {
        return;
    }
    let _turn = turn().await;
    let (pool, _cleanup) = pool("slurm-demand");
    let added = alloc(
        &pool,
        &[
            "add",
            "slurm",
            "--max-hosts",
            "3",
            "--backlog",
            "3",
            "--time-limit",
            "10m",
            "--idle-timeout",
            "8s",
        ],
    );
    let q = queue_id(&added);
    let mut master = Master::init(master_config(&pool, 3), &"init".to_string())
        .await
        .expect("init");
    steps_exactly_once(&mut master, 24, |s| format!("sleep {}", 200 + s * 10)).await;
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, 24);
    assert!(stats.hosts_added >= 3, "{} hosts added", stats.hosts_added);
    let queue = info(&pool, q);
    let jobs = batch_jobs(&queue);
    assert!(jobs.len() >= 3, "at least three allocations: {queue}");
    assert!(
        jobs.len() <= 6,
        "not many more allocations than needed: {queue}"
    );
    // Idle for 8 s, each pilot is cancelled: Slurm forgets them, and no
    // pilot process is left.
    wait_until(
        Duration::from_secs(90),
        "every pilot's Slurm job gone",
        &pool,
        || in_squeue(&jobs).is_empty(),
    );
    wait_until(
        Duration::from_secs(30),
        "no pilot process left",
        &pool,
        || pilot_processes(&pool).is_empty(),
    );
    // The queue hears it at its next look at Slurm.
    wait_until(
        Duration::from_secs(30),
        "every allocation ended",
        &pool,
        || {
            let queue = info(&pool, q);
            queue["allocations"]
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a["state"] == "ended")
        },
    );
    // Every pilot registered once, and its work directory went with it.
    let dirs: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            jobs.iter()
                .any(|j| n.starts_with(&format!("carmi-pilot-{j}-")))
        })
        .collect();
    assert!(dirs.is_empty(), "pilot work directories left: {dirs:?}");
}
