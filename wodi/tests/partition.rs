//! WoDi across real network boundaries (issue 22, partitions): every
//! daemon on a host of its own (network namespaces on a bridge, through
//! `carmi_tests::NetPool`), links cut with `ip link set down`. The master and
//! its WoDi server run in the test's namespace and reach the hosts through
//! the bridge, so a cut host loses them as it loses the global RM.
//!
//! Needs root and `ip`; elsewhere each test prints its SKIP line (and
//! fails under `CARMI_CI_REQUIRE_SERVICES=1`, as in CI, which runs as root).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use carmi_tests::{GLOBAL_HOST, NetPool, PoolOptions, netns};
use common::{config, test_worker};
use wodi::StepId;
use wodi::master::{Master, StepOutcome};
use wodi::proto::ClassSpec;
use wodi::stats::RunOutcome;

/// Heartbeat period of these pools: a machine is lost after
/// `HEARTBEAT_MS * MISSED` of silence.
const HEARTBEAT_MS: u64 = 250;
/// Missed heartbeats before a machine is lost.
const MISSED: u32 = 4;
/// The loss window: what the global RM waits before declaring a host lost.
const LOSS: Duration = Duration::from_millis(HEARTBEAT_MS * MISSED as u64);
/// Slack on top of the loss window for a loaded 2-core CI machine (the
/// application hears of the loss, the step goes to another worker).
const SLACK: Duration = Duration::from_secs(10);

fn options() -> PoolOptions {
    PoolOptions {
        heartbeat_ms: HEARTBEAT_MS,
        missed_heartbeats: MISSED,
        ..PoolOptions::default()
    }
}

/// The tests take turns: two pools of namespaces at once would each make
/// the other's daemons miss heartbeats on a loaded machine.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// The pid files the test worker wrote (`pid DIR MS` steps): (pid, step).
fn pid_files(dir: &Path) -> BTreeSet<(u32, u64)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let (pid, step) = name.split_once('-')?;
            Some((pid.parse().ok()?, step.parse().ok()?))
        })
        .collect()
}

/// Waits up to `limit` for a pid file not in `known`.
async fn new_pid_file(dir: &Path, known: &BTreeSet<(u32, u64)>, limit: Duration) -> (u32, u64) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(&found) = pid_files(dir).difference(known).next() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no new step started within {limit:?} (had {known:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for this purpose: it runs nothing and holds no socket.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// The host (index in the net) whose namespace runs `pid`.
fn host_of(pool: &NetPool, pid: u32) -> usize {
    (0..pool.net.hosts.len())
        .find(|&i| pool.net.pids(i).contains(&pid))
        .unwrap_or_else(|| panic!("process {pid} runs on no host of the pool"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_cut_off_mid_step_has_its_step_resent_and_its_late_result_never_delivered() {
    let test = "a_host_cut_off_mid_step_has_its_step_resent_and_its_late_result_never_delivered";
    if !netns::ready(test) {
        return;
    }
    let _turn = turn().await;
    // m1 serves the master (no worker runs there: cutting it would cut the
    // application off); m2..m4 are the workers' candidates.
    let pool = NetPool::start("part-cut", 1, 4, &options());
    pool.wait_registered(Duration::from_secs(60));
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        2,
    );
    cfg.classes = vec![ClassSpec::new("workers", "Name != \"m1\"", 2)];
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    let step_ms = 3000;
    master
        .send_work(StepId(0), &format!("pid {} {step_ms}", pids.display()))
        .unwrap();
    let (victim, _) = new_pid_file(&pids, &BTreeSet::new(), Duration::from_secs(60)).await;
    let started = Instant::now();
    let host = host_of(&pool, victim);
    assert_ne!(host, 1, "a worker ran on the master's machine");
    pool.cut(host);
    let cut = Instant::now();

    // Told within the loss window: the step starts again on another host.
    let known = pid_files(&pids);
    let (copy, _) = new_pid_file(&pids, &known, LOSS + SLACK).await;
    let told = cut.elapsed();
    assert_ne!(
        host_of(&pool, copy),
        host,
        "the step was re-sent to the cut host"
    );
    assert!(
        alive(victim),
        "the cut host's worker must still run (it cannot be told)"
    );

    // The old copy finishes while cut off: its result waits in its socket,
    // and arrives when the link comes back, before the new copy is done.
    let finished = started + Duration::from_millis(step_ms + 200);
    tokio::time::sleep_until(finished.into()).await;
    pool.restore(host);
    let restored = Instant::now();

    let first = tokio::time::timeout(Duration::from_secs(60), master.recv_result::<String>())
        .await
        .expect("step 0's outcome within 60 s")
        .expect("the run goes on");
    let data = format!("pid {} {step_ms}", pids.display());
    assert!(
        matches!(&first, StepOutcome::Done(StepId(0), r) if r.ends_with(&data)),
        "{first:?}"
    );

    // The old process is killed once its host is back...
    pool.wait_registered(Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(victim) {
        assert!(
            Instant::now() < deadline,
            "the cut host's old worker {victim} still runs 30 s after its link came back\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...and its result, back in flight, is never delivered.
    let late = tokio::time::timeout(Duration::from_secs(3), master.recv_result::<String>()).await;
    assert!(late.is_err(), "a second outcome arrived: {late:?}");
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, 1);
    let copies: Vec<RunOutcome> = stats
        .steps
        .iter()
        .filter(|s| s.step == StepId(0))
        .map(|s| s.outcome)
        .collect();
    // The cut host's copy (assigned first) is lost, the re-sent one delivered.
    assert_eq!(
        copies,
        vec![RunOutcome::Lost, RunOutcome::Delivered],
        "step 0's copies in the order they were sent"
    );
    assert!(stats.hosts.lost >= 1);
    eprintln!(
        "{test}: told (step re-sent) {:.2} s after the cut (loss window {:.2} s); \
         old worker gone {:.2} s after the link came back",
        told.as_secs_f64(),
        LOSS.as_secs_f64(),
        restored.elapsed().as_secs_f64()
    );
}

/// Sends `n` steps from `*next` on, each recording its worker's pid and
/// taking `ms`, and takes their `n` outcomes; counts each step's deliveries
/// in `seen`.
async fn batch(
    master: &mut Master,
    pids: &Path,
    next: &mut u64,
    n: u64,
    ms: u64,
    seen: &mut std::collections::BTreeMap<u64, u32>,
) {
    for s in *next..*next + n {
        master
            .send_work(StepId(s), &format!("pid {} {ms}", pids.display()))
            .unwrap();
    }
    *next += n;
    for _ in 0..n {
        let o = tokio::time::timeout(Duration::from_secs(60), master.recv_result::<String>())
            .await
            .expect("a step outcome within 60 s")
            .expect("the run goes on");
        match o {
            StepOutcome::Done(step, _) => *seen.entry(step.0).or_default() += 1,
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
        }
    }
}

/// The global RM (host 0) is cut off from every host for `cut_for` while a
/// WoDi job computes on three machines: it goes on computing (its workers
/// talk to its server directly), no host is lost, no worker replaced, the
/// machines are registered again afterwards, and every step comes back once.
async fn global_cut_off(test: &str, cut_for: Duration) {
    if !netns::ready(test) {
        return;
    }
    let _turn = turn().await;
    let pool = NetPool::start("part-global", 1, 3, &options());
    pool.wait_registered(Duration::from_secs(60));
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        3,
    );
    // Idle hosts stay: a worker replaced here would be the cut's doing.
    cfg.policies.release_idle = false;
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    let (mut next, mut seen) = (0, std::collections::BTreeMap::new());
    // Until all three workers computed something.
    let deadline = Instant::now() + Duration::from_secs(60);
    while pid_files(&pids)
        .iter()
        .map(|(p, _)| p)
        .collect::<BTreeSet<_>>()
        .len()
        < 3
    {
        assert!(Instant::now() < deadline, "three workers did not start");
        batch(&mut master, &pids, &mut next, 6, 100, &mut seen).await;
    }
    let workers: BTreeSet<u32> = pid_files(&pids).iter().map(|(p, _)| *p).collect();

    pool.cut(GLOBAL_HOST);
    let cut = Instant::now();
    let before = next;
    while cut.elapsed() < cut_for {
        batch(&mut master, &pids, &mut next, 6, 100, &mut seen).await;
    }
    let during = next - before;
    pool.restore(GLOBAL_HOST);
    pool.wait_registered(Duration::from_secs(60));
    // Well past the loss window after the link came back.
    let after = Instant::now();
    while after.elapsed() < LOSS * 3 {
        batch(&mut master, &pids, &mut next, 6, 100, &mut seen).await;
    }
    let now: BTreeSet<u32> = pid_files(&pids).iter().map(|(p, _)| *p).collect();
    assert_eq!(now, workers, "workers were replaced:\n{}", pool.logs());
    assert!(
        workers.iter().all(|&p| alive(p)),
        "a worker died\n{}",
        pool.logs()
    );
    let stats = master.complete().await.expect("complete");
    assert!(during >= 6, "only {during} steps during the cut");
    assert_eq!(seen, (0..next).map(|s| (s, 1)).collect(), "each step once");
    assert_eq!(stats.steps_delivered, next);
    assert_eq!(stats.hosts.lost, 0, "a host was lost\n{}", pool.logs());
    eprintln!(
        "{test}: {during} steps delivered during a {:.1} s cut of the global RM",
        cut_for.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_rm_cut_off_for_5_s_loses_no_host_and_no_step() {
    global_cut_off(
        "the_global_rm_cut_off_for_5_s_loses_no_host_and_no_step",
        Duration::from_secs(5),
    )
    .await;
}

/// The form: 30 s. `cargo test -p wodi --test partition -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the issue's 30 s form; the CI form cuts for 5 s"]
async fn the_global_rm_cut_off_for_30_s_loses_no_host_and_no_step() {
    global_cut_off(
        "the_global_rm_cut_off_for_30_s_loses_no_host_and_no_step",
        Duration::from_secs(30),
    )
    .await;
}

/// File descriptors and resident memory (KiB) of the global RM and each local RM.
fn daemon_costs(pool: &NetPool) -> Vec<(String, usize, u64)> {
    let global = pool.global_pid();
    std::iter::once(("global".to_string(), global))
        .chain(
            pool.locals
                .iter()
                .map(|l| (l.name.clone(), l.pid().unwrap())),
        )
        .map(|(name, pid)| (name, carmi_tests::open_fds(pid), carmi_tests::rss_kib(pid)))
        .collect()
}

/// Host 3's link goes down for 1.5 s (longer than the loss window) and up
/// for 1.5 s, `flaps` times, while a WoDi job computes on hosts 2 and 3.
/// Afterwards every step came back once, no process is left on any host
/// but its local RM, and the daemons hold no more connections (file
/// descriptors) and little more memory than before.
async fn flapping(test: &str, flaps: u32) {
    if !netns::ready(test) {
        return;
    }
    let _turn = turn().await;
    let pool = NetPool::start("part-flap", 1, 3, &options());
    pool.wait_registered(Duration::from_secs(60));
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let job = || {
        let mut cfg = config(
            &pool.locals[0].app_addr,
            &pool.secret_path,
            test_worker(),
            2,
        );
        cfg.classes = vec![ClassSpec::new("workers", "Name != \"m1\"", 2)];
        cfg
    };
    // A first job warms every lazily made part of the daemons up.
    let mut master = Master::init(job(), &"i".to_string()).await.expect("init");
    let (mut next, mut seen) = (0, std::collections::BTreeMap::new());
    batch(&mut master, &pids, &mut next, 8, 50, &mut seen).await;
    master.complete().await.expect("complete");
    let settled =
        |pool: &NetPool| (2..=3).all(|h| pool.net.pids(h).len() == 1) && pool.registered();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !settled(&pool) {
        assert!(Instant::now() < deadline, "the first job's workers stay");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = daemon_costs(&pool);

    let mut master = Master::init(job(), &"i".to_string()).await.expect("init");
    let flapper = {
        let link = pool.net.hosts[3].link.clone();
        std::thread::spawn(move || {
            let set = |state: &str| {
                let ok = std::process::Command::new("ip")
                    .args(["link", "set", &link, state])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "ip link set {link} {state}");
            };
            for _ in 0..flaps {
                set("down");
                std::thread::sleep(Duration::from_millis(1500));
                set("up");
                std::thread::sleep(Duration::from_millis(1500));
            }
        })
    };
    while !flapper.is_finished() {
        batch(&mut master, &pids, &mut next, 4, 200, &mut seen).await;
    }
    flapper.join().expect("the flapping thread");
    batch(&mut master, &pids, &mut next, 4, 50, &mut seen).await;
    let stats = master.complete().await.expect("complete");
    assert_eq!(seen, (0..next).map(|s| (s, 1)).collect(), "each step once");
    assert!(stats.hosts.lost >= 1, "the flapping host was never lost");

    let deadline = Instant::now() + Duration::from_secs(30);
    while !settled(&pool) {
        assert!(
            Instant::now() < deadline,
            "processes left on the hosts: m2 {:?}, m3 {:?}\n{}",
            pool.net.pids(2),
            pool.net.pids(3),
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Connections closed on one side close on the other a moment later.
    let deadline = Instant::now() + Duration::from_secs(20);
    let leaks = loop {
        let after = daemon_costs(&pool);
        let leaks: Vec<String> = before
            .iter()
            .zip(&after)
            .filter(|((_, fd0, rss0), (_, fd1, rss1))| {
                *fd1 > fd0 + 2 || *rss1 > rss0 + rss0 / 2 + 20 * 1024
            })
            .map(|(b, a)| {
                format!(
                    "{}: fds {} -> {}, rss {} -> {} KiB",
                    b.0, b.1, a.1, b.2, a.2
                )
            })
            .collect();
        if leaks.is_empty() || Instant::now() > deadline {
            break leaks;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        leaks.is_empty(),
        "after {flaps} flaps: {leaks:?}\n{}",
        pool.logs()
    );
    eprintln!(
        "{test}: {flaps} flaps, {} hosts lost, {next} steps once each; before {before:?}, after {:?}",
        stats.hosts.lost,
        daemon_costs(&pool)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_flapping_for_18_s_leaks_no_connection_process_or_memory() {
    flapping(
        "a_link_flapping_for_18_s_leaks_no_connection_process_or_memory",
        6,
    )
    .await;
}

/// The form: a minute of flapping. `-- --ignored` runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the issue's minute of flapping; the CI form flaps for 18 s"]
async fn a_link_flapping_for_a_minute_leaks_no_connection_process_or_memory() {
    flapping(
        "a_link_flapping_for_a_minute_leaks_no_connection_process_or_memory",
        20,
    )
    .await;
}
