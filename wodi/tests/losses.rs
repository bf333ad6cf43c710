//! Losses counted right over real daemons (issue 34, item 3).
//!
//! A machine killed while its worker computes a step is declared lost by the
//! global RM seconds after the WoDi server's loss grace (0.5 s) has run out.
//! The kill is no fault of the step: with one attempt allowed, a charge for
//! it would fail the step for good instead of running it again elsewhere.
//!
//! A spawn forwarded to a global RM that then restarts is failed as
//! `Unavailable` by the restarted one: the server waits its retry delay and
//! spawns the same worker again, without counting a crash (which, repeated,
//! gave the host up).

mod common;

use std::path::Path;
use std::time::Duration;

use carmi_tests::Pool;
use common::{config, test_worker};
use wodi::StepId;
use wodi::master::{Master, StepOutcome};
use wodi::proto::ClassSpec;
use wodi::stats::RunOutcome;

/// The pid of the first worker that started a `pid DIR MS` step, waiting
/// up to a minute for it.
async fn first_pid(dir: &Path) -> u32 {
    for _ in 0..3000 {
        let found = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.split_once('-')?.0.parse().ok()
            });
        if let Some(pid) = found {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no worker started the step within 60 s");
}

/// The machine (index in `pool.locals`) whose work directory process `pid`
/// runs in: its sandbox is there.
fn machine_of(pool: &Pool, pid: u32) -> usize {
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).expect("the worker runs");
    (pool.locals.iter())
        .position(|l| cwd.starts_with(pool.dir.join(&l.name)))
        .unwrap_or_else(|| panic!("process {pid} runs in {}, no machine's", cwd.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_killed_mid_step_is_not_charged_to_the_step() {
    // m0 serves the master (no worker there: killing it would end the job).
    let mut pool = Pool::start("wodi-losses", 1, &vec![Vec::new(); 3]);
    pool.wait_registered();
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let local = pool.locals[0].app_addr.clone();
    let mut cfg = config(&local, &pool.secret_path, test_worker(), 1);
    cfg.classes = vec![ClassSpec::new("workers", "Name != \"m0\"", 1)];
    cfg.max_attempts = 1;
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    let data = format!("pid {} 3000", pids.display());
    master.send_work(StepId(0), &data).unwrap();
    let victim = first_pid(&pids).await;
    let machine = machine_of(&pool, victim);
    assert_ne!(machine, 0, "a worker ran on the master's machine");
    // The machine vanishes mid-step (its worker dies with its local RM);
    // the global RM declares it lost only after 3 s of silence.
    pool.kill_local(machine);

    let outcome = tokio::time::timeout(Duration::from_secs(90), master.recv_result::<String>())
        .await
        .expect("step 0's outcome within 90 s")
        .expect("the run goes on");
    assert!(
        matches!(&outcome, StepOutcome::Done(StepId(0), r) if r.ends_with(&data)),
        "the killed machine was charged to the step: {outcome:?}\n{}",
        pool.logs()
    );
    let stats = master.complete().await.expect("complete");
    let copies: Vec<RunOutcome> = (stats.steps.iter())
        .filter(|s| s.step == StepId(0))
        .map(|s| s.outcome)
        .collect();
    assert_eq!(copies, vec![RunOutcome::Lost, RunOutcome::Delivered]);
    assert!(stats.hosts.lost >= 1, "{:?}", stats.hosts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_lost_in_a_global_rm_restart_waits_and_is_no_crash() {
    // What the WoDi server logs (it reaches this process: `server_log`),
    // kept to read how it took the pool's answer to its spawn.
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let into = lines.clone();
    wodi::server_log::set_sink(Some(std::sync::Arc::new(move |l: &str| {
        eprintln!("{l}");
        into.lock().unwrap().push(l.to_string());
    })));
    let mut pool = Pool::start("wodi-losses-restart", 1, &vec![Vec::new(); 2]);
    pool.wait_registered();
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let local = pool.locals[0].app_addr.clone();
    let mut cfg = config(&local, &pool.secret_path, test_worker(), 1);
    cfg.classes = vec![ClassSpec::new("workers", "Name == \"m1\"", 1)];
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    let data = format!("pid {} 3000", pids.display());
    master.send_work(StepId(0), &data).unwrap();
    let victim = first_pid(&pids).await;
    // The global RM reads nothing more: the spawn of the worker that
    // replaces the one killed now is forwarded to it and lost when it
    // restarts, and the restarted global RM fails it as `Unavailable`.
    pool.stop_global();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status();
    // The loss grace ends and the replacement is spawned meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    pool.restart_global();

    let outcome = tokio::time::timeout(Duration::from_secs(90), master.recv_result::<String>())
        .await
        .expect("step 0's outcome within 90 s")
        .expect("the run goes on");
    assert!(
        matches!(&outcome, StepOutcome::Done(StepId(0), r) if r.ends_with(&data)),
        "{outcome:?}\n{}",
        pool.logs()
    );
    master.complete().await.expect("complete");
    wodi::server_log::set_sink(None);
    let lines = lines.lock().unwrap().clone();
    // The server took the lost spawn as a wait, never as a failed spawn
    // (which counts a crash of the worker and, repeated, gives up the host).
    let spawn_lines: Vec<&String> = (lines.iter())
        .filter(|l| l.contains("spawning w"))
        .collect();
    assert!(
        spawn_lines.iter().any(|l| l.contains("must wait")),
        "no spawn was answered Unavailable: {lines:#?}\n{}",
        pool.logs()
    );
    assert!(
        !spawn_lines.iter().any(|l| l.contains("failed")),
        "a spawn lost in the restart counted as failed: {spawn_lines:#?}"
    );
}
