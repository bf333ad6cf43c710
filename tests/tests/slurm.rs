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
        let status = carmi_tests::cargo_build(&[
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
/// It blocks, so the runtime moves its other tasks (the master's) off this thread.
fn wait_until(limit: Duration, what: &str, pool: &Pool, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    tokio::task::block_in_place(|| {
        while !check() {
            assert!(
                Instant::now() < end,
                "{what} within {limit:?}\n{}",
                pool.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    });
}

/// A WoDi master started on `pool` for `count` pilot hosts.
async fn start_master(pool: &Pool, count: u32) -> Master {
    Master::init(master_config(pool, count), &"init".to_string())
        .await
        .expect("init")
}

/// A WoDi master for `count` pilot hosts on `pool`.
fn master_config(pool: &Pool, count: u32) -> MasterConfig {
    let (server, worker) = wodi_bins();
    let mut cfg = MasterConfig::new(worker, Vec::new(), PILOTS_ONLY, count);
    cfg.server = ServerCommand::Path(server);
    cfg.pool = Some(PoolAddr {
        local: pool.locals[0].app_addr.clone(),
        secret_file: pool.secret_path.clone(),
        token_file: Some(pool.admin_token.clone()),
    });
    cfg
}

/// Sends `n` steps of `data(s)` and checks that each comes back exactly once.
async fn steps_exactly_once(master: &mut Master, n: u64, data: impl Fn(u64) -> String) {
    for s in 0..n {
        master.send_work(StepId(s), &data(s)).unwrap();
    }
    outcomes_exactly_once(master, n, data, Duration::from_secs(240)).await;
}

/// Adds a Slurm queue (`carmi alloc add slurm ARGS`) and returns its id.
fn add_queue(pool: &Pool, args: &[&str]) -> u64 {
    queue_id(&alloc(pool, &[&["add", "slurm"], args].concat()))
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
    let q = add_queue(
        &pool,
        &[
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
    let mut master = start_master(&pool, 3).await;
    steps_exactly_once(&mut master, 24, |s| format!("sleep {}", 200 + s * 10)).await;
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, 24);
    assert!(stats.hosts.added >= 3, "{} hosts added", stats.hosts.added);
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

/// The allocations of queue `q` in state `state`.
fn allocations_in(pool: &Pool, q: u64, state: &str) -> usize {
    info(pool, q)["allocations"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|a| a["state"] == state).count())
}

/// The batch output of allocation `alloc` of queue `q`.
fn pilot_output(pool: &Pool, q: u64, alloc: u64) -> String {
    let dir = pool.dir.join(format!("global-state/pilots/q{q}"));
    let mut out = String::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("a{alloc}-")) && name.ends_with(".out") {
            out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pilot_is_vacated_before_its_time_limit_and_replaced_without_losing_a_step() {
    if !slurm_ready("a_pilot_is_vacated_before_its_time_limit_and_replaced_without_losing_a_step") {
        return;
    }
    let _turn = turn().await;
    let (pool, _cleanup) = pool("slurm-limit");
    // Slurm's shortest limit, one minute: vacated 20 s before its end.
    let q = add_queue(
        &pool,
        &[
            "--max-hosts",
            "2",
            "--time-limit",
            "1m",
            "--lead",
            "20s",
            "--idle-timeout",
            "5s",
        ],
    );
    let mut master = start_master(&pool, 1).await;
    // 45 s of work for one host: longer than the first pilot has.
    steps_exactly_once(&mut master, 45, |s| format!("sleep {}", 1000 + s)).await;
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, 45);
    let first = pilot_output(&pool, q, 1);
    assert!(
        first.contains("the owner comes back for good"),
        "the first pilot was vacated by its time limit's lead:\n{first}"
    );
    assert!(
        !first.contains("DUE TO TIME LIMIT"),
        "Slurm's limit never had to end the first pilot:\n{first}"
    );
    let queue = info(&pool, q);
    assert!(batch_jobs(&queue).len() >= 2, "a replacement came: {queue}");
    assert_eq!(allocations_in(&pool, q, "failed"), 0, "{queue}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scancel_of_a_pilot_mid_step_loses_the_host_and_the_step_is_resent_once() {
    if !slurm_ready("scancel_of_a_pilot_mid_step_loses_the_host_and_the_step_is_resent_once") {
        return;
    }
    let _turn = turn().await;
    let (pool, _cleanup) = pool("slurm-scancel");
    let q = add_queue(
        &pool,
        &[
            "--max-hosts",
            "3",
            "--backlog",
            "2",
            "--time-limit",
            "10m",
            "--idle-timeout",
            "5s",
        ],
    );
    let mut master = start_master(&pool, 2).await;
    let data = |s: u64| format!("sleep {}", 2500 + s);
    for s in 0..8 {
        master.send_work(StepId(s), &data(s)).unwrap();
    }
    let p = &pool;
    wait_until(Duration::from_secs(120), "two pilots registered", p, || {
        allocations_in(p, q, "registered") == 2
    });
    // Both are computing their first step now.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let victim = batch_jobs(&info(&pool, q))[0].clone();
    let st = Command::new("scancel").arg(&victim).status().unwrap();
    assert!(st.success());
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    while seen.values().sum::<u32>() < 8 {
        let next: StepOutcome<String> =
            tokio::time::timeout(Duration::from_secs(180), master.recv_result())
                .await
                .expect("a step outcome within 180 s")
                .expect("the run goes on");
        match next {
            StepOutcome::Done(step, r) => {
                assert!(r.ends_with(&data(step.0)), "step {step} answered {r}");
                *seen.entry(step.0).or_default() += 1;
            }
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
        }
    }
    assert_eq!(seen, (0..8).map(|s| (s, 1)).collect(), "every step once");
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, 8);
    // The pilot's local RM, stopped by Slurm's SIGTERM, tells the global
    // RM that it leaves before it kills its worker: the application hears
    // that the host was lost (not released), and re-sends the step.
    assert!(
        stats.hosts.lost >= 1,
        "the application saw the cancelled pilot's host lost: {} lost of {} added",
        stats.hosts.lost,
        stats.hosts.added
    );
    let lost = stats
        .steps
        .iter()
        .filter(|s| s.outcome == wodi::stats::RunOutcome::Lost)
        .count();
    assert!(
        lost >= 1,
        "the step on the cancelled pilot was lost and re-sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_with_impossible_sbatch_arguments_pauses_with_slurms_reason() {
    if !slurm_ready("a_queue_with_impossible_sbatch_arguments_pauses_with_slurms_reason") {
        return;
    }
    let _turn = turn().await;
    let (pool, _cleanup) = pool("slurm-impossible");
    let q = add_queue(
        &pool,
        &[
            "--max-hosts",
            "2",
            "--time-limit",
            "2m",
            "--max-failures",
            "2",
            "--",
            "--partition=nosuch",
        ],
    );
    // Demand: a job with work waiting for a pilot host.
    let mut master = start_master(&pool, 1).await;
    master.send_work(StepId(0), &"d0".to_string()).unwrap();
    let p = &pool;
    wait_until(Duration::from_secs(60), "the queue paused", p, || {
        info(p, q)["state"] == "paused"
    });
    let queue = info(&pool, q);
    assert_eq!(queue["failures"], 2, "{queue}");
    let reason = queue["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("invalid partition"),
        "Slurm's own message: {reason}"
    );
    let list = alloc(&pool, &["list"]);
    assert!(
        list.contains("paused") && list.contains("invalid partition"),
        "{list}"
    );
    // Paused: nothing more is submitted.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(info(&pool, q)["failures"], 2);
    drop(master);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_global_rm_still_knows_its_queues_and_running_pilots() {
    if !slurm_ready("a_restarted_global_rm_still_knows_its_queues_and_running_pilots") {
        return;
    }
    let _turn = turn().await;
    let (mut pool, _cleanup) = pool("slurm-restart");
    let q = add_queue(&pool, ONE_PILOT);
    let data = |s: u64| format!("sleep {}", 800 + s);
    let mut master = busy_pilot(&pool, q, 12, data).await;
    // A worker runs on the pilot (a first step came back): the global RM
    // journals its process, so the job holds the host again after the
    // restart (a host granted with no process yet is forgotten by a
    // restart, and the job asks again).
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    let first: StepOutcome<String> =
        tokio::time::timeout(Duration::from_secs(120), master.recv_result())
            .await
            .expect("a first step within 120 s")
            .expect("the run goes on");
    if let StepOutcome::Done(step, _) = first {
        *seen.entry(step.0).or_default() += 1;
    }
    // The queue and its allocation come back from the journal, and the
    // pilot, still running in Slurm, registers again.
    let job = restart_global_keeping_the_pilot(&mut pool, q);
    while seen.values().sum::<u32>() < 12 {
        let next: StepOutcome<String> =
            tokio::time::timeout(Duration::from_secs(180), master.recv_result())
                .await
                .expect("a step outcome within 180 s")
                .expect("the run goes on");
        if let StepOutcome::Done(step, _) = next {
            *seen.entry(step.0).or_default() += 1;
        }
    }
    assert_eq!(seen, (0..12).map(|s| (s, 1)).collect(), "every step once");
    master.complete().await.expect("complete");
    // The restarted global RM still ends the pilot once it is idle.
    let p = &pool;
    wait_until(
        Duration::from_secs(60),
        "the pilot's Slurm job gone",
        p,
        || in_squeue(&job).is_empty(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pilot_whose_global_rm_stays_away_ends_within_its_orphan_timeout() {
    if !slurm_ready("a_pilot_whose_global_rm_stays_away_ends_within_its_orphan_timeout") {
        return;
    }
    let _turn = turn().await;
    let (mut pool, _cleanup) = pool("slurm-orphan");
    let q = add_queue(
        &pool,
        &[
            "--max-hosts",
            "1",
            "--time-limit",
            "10m",
            "--idle-timeout",
            "5m",
            "--orphan-timeout",
            "10s",
        ],
    );
    let mut master = start_master(&pool, 1).await;
    for s in 0..4 {
        master
            .send_work(StepId(s), &format!("sleep {}", 1500 + s))
            .unwrap();
    }
    let p = &pool;
    wait_until(Duration::from_secs(120), "the pilot registered", p, || {
        allocations_in(p, q, "registered") == 1
    });
    let jobs = batch_jobs(&info(&pool, q));
    wait_until(Duration::from_secs(30), "a pilot process runs", p, || {
        !pilot_processes(p).is_empty()
    });
    // The global RM goes for good: nobody will cancel the pilot, whose
    // idle timeout and time limit are minutes away.
    tokio::task::block_in_place(|| pool.kill_global());
    let gone = Instant::now();
    let p = &pool;
    wait_until(
        Duration::from_secs(60),
        "the orphaned pilot's Slurm job gone",
        p,
        || in_squeue(&jobs).is_empty(),
    );
    let took = gone.elapsed();
    assert!(
        took >= Duration::from_secs(8),
        "the pilot waited for its orphan timeout, not less: {took:?}"
    );
    wait_until(Duration::from_secs(30), "no pilot process left", p, || {
        pilot_processes(p).is_empty()
    });
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
    let out = pilot_output(&pool, q, 1);
    assert!(
        out.contains("orphan timeout"),
        "the pilot said why it stopped:\n{out}"
    );
    drop(master);
}

/// Runs `carmi alloc dry-run slurm ARGS` on `pool`: whether it succeeded,
/// and its standard output and error.
fn dry_run(pool: &Pool, args: &[&str]) -> (bool, String) {
    let out = pool
        .carmi()
        .args(["alloc", "dry-run", "slurm"])
        .args(args)
        .output()
        .expect("run carmi alloc dry-run");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    (out.status.success(), said)
}

#[test]
fn carmi_alloc_dry_run_reports_a_pilot_that_registered_and_slurms_reason_when_none_can() {
    if !slurm_ready(
        "carmi_alloc_dry_run_reports_a_pilot_that_registered_and_slurms_reason_when_none_can",
    ) {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _turn = rt.block_on(turn());
    let (pool, _cleanup) = pool("slurm-dry-run");
    let (ok, said) = dry_run(&pool, &["--time-limit", "1m"]);
    assert!(
        ok,
        "the dry run succeeded on the real cluster: {said}\n{}",
        pool.logs()
    );
    assert!(said.starts_with("ok: "), "{said}");
    let (ok, said) = dry_run(&pool, &["--time-limit", "1m", "--", "--partition=nosuch"]);
    assert!(!ok, "a dry run with an impossible partition fails: {said}");
    assert!(said.contains("failed: "), "{said}");
    assert!(
        said.contains("invalid partition"),
        "Slurm's own reason is shown: {said}"
    );
    // Neither leaves anything in Slurm's queue.
    let p = &pool;
    wait_until(
        Duration::from_secs(60),
        "no pilot of the dry runs left",
        p,
        || {
            let out = Command::new("squeue")
                .args(["-h", "-a", "-o", "%o"])
                .output()
                .expect("run squeue");
            !text(&out.stdout).contains(&p.dir.display().to_string())
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_rm_restarted_while_a_pilots_grant_has_no_process_yet_loses_no_step() {
    if !slurm_ready("a_global_rm_restarted_while_a_pilots_grant_has_no_process_yet_loses_no_step") {
        return;
    }
    let _turn = turn().await;
    let (mut pool, _cleanup) = pool("slurm-restart-early");
    let q = add_queue(&pool, ONE_PILOT);
    let data = |s: u64| format!("sleep {}", 300 + s);
    // At once when the pilot registers: the job is granted its host and
    // the worker is still being staged and spawned there, with no process
    // running yet.
    let mut master = busy_pilot(&pool, q, 6, data).await;
    let job = restart_global_keeping_the_pilot(&mut pool, q);
    steps_exactly_once_sent(&mut master, 6, data).await;
    master.complete().await.expect("complete");
    let p = &pool;
    wait_until(
        Duration::from_secs(60),
        "the pilot's Slurm job gone",
        p,
        || in_squeue(&job).is_empty(),
    );
}

/// A queue of one pilot host at a time, for 10 minutes at most, ended
/// after 5 s idle.
const ONE_PILOT: &[&str] = &[
    "--max-hosts",
    "1",
    "--time-limit",
    "10m",
    "--idle-timeout",
    "5s",
];

/// A master for one pilot host of queue `q`, sent `steps` steps of
/// `data(s)`; returned once the pilot registered.
async fn busy_pilot(pool: &Pool, q: u64, steps: u64, data: impl Fn(u64) -> String) -> Master {
    let mut master = start_master(pool, 1).await;
    for s in 0..steps {
        master.send_work(StepId(s), &data(s)).unwrap();
    }
    wait_until(
        Duration::from_secs(120),
        "the pilot registered",
        pool,
        || allocations_in(pool, q, "registered") == 1,
    );
    master
}

/// Restarts the global RM and waits until queue `q`'s pilot registered
/// again with its machine, in the same Slurm job as before; that job.
fn restart_global_keeping_the_pilot(pool: &mut Pool, q: u64) -> Vec<String> {
    let job = batch_jobs(&info(pool, q));
    tokio::task::block_in_place(|| pool.restart_global());
    let p = &*pool;
    wait_until(
        Duration::from_secs(30),
        "the pilot back after the restart",
        p,
        || {
            let queue = info(p, q);
            let a = &queue["allocations"][0];
            a["state"] == "registered" && !a["machines"].as_array().unwrap().is_empty()
        },
    );
    assert_eq!(batch_jobs(&info(p, q)), job, "the same Slurm job");
    job
}

/// Collects the outcomes of `n` steps already sent, checking each came back once.
async fn steps_exactly_once_sent(master: &mut Master, n: u64, data: impl Fn(u64) -> String) {
    outcomes_exactly_once(master, n, data, Duration::from_secs(180)).await;
}

/// Collects the outcomes of steps `0..n` (of `data(s)`), each within
/// `patience` of the one before, and checks each came back once, answered.
async fn outcomes_exactly_once(
    master: &mut Master,
    n: u64,
    data: impl Fn(u64) -> String,
    patience: Duration,
) {
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    while seen.values().sum::<u32>() < n as u32 {
        let next: StepOutcome<String> = tokio::time::timeout(patience, master.recv_result())
            .await
            .unwrap_or_else(|_| panic!("no step outcome within {patience:?}"))
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
