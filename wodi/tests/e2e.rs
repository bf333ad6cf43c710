//! WoDi end to end on a real pool (`carmi_tests::Pool`: a global RM and local
//! RMs as processes): master library, `wodi-server`, workers spawned by CARMI.
//! The helpers take the pool as `(local_addr, secret_file)` so that the same
//! tests can be pointed at any pool (see `common`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use carmi_tests::Pool;
use common::{collect, config, cycles_with_steps, test_worker};
use wodi::StepId;
use wodi::master::{Master, StepOutcome};

/// A pool of `n` one-slot machines. The tests take turns: on a loaded
/// 2-core machine, several pools at once make local RMs miss heartbeats (see
/// the crate's report on pending requests after a machine is declared lost).
async fn pool(name: &str, n: usize) -> (tokio::sync::MutexGuard<'static, ()>, Pool) {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = SERIAL.lock().await;
    (turn, Pool::start(name, 1, &vec![Vec::new(); n]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycles_of_31_steps_return_every_result_once() {
    let (_turn, pool) = pool("wodi-cycles", 3).await;
    let stats = cycles_with_steps(&pool.locals[0].app_addr, &pool.secret_path, 3, 4, 2).await;
    assert_eq!(stats.steps_delivered, 4 * 31);
    // Releasing idle hosts (a recommended policy) may give hosts back in a
    // cycle's tail and get them again at the next cycle, when the steps
    // still running have no estimate yet: more than three adds, none lost.
    assert!(stats.hosts.added >= 3, "{} hosts added", stats.hosts.added);
    assert_eq!(stats.hosts.lost, 0);
    assert_eq!(stats.timeline.len(), stats.hosts.added as usize);
    let ended: Vec<u64> = stats
        .cycles
        .iter()
        .filter(|c| c.end_s.is_some())
        .map(|c| c.cycle.0)
        .collect();
    assert_eq!(ended, vec![0, 1, 2, 3]);
    assert!(stats.occupancy_s > 0.0);
    let json = serde_json::to_string(&stats).unwrap();
    assert!(json.contains("\"efficiency\""));
    // The history is saved with the statistics: every step, seen 4 times.
    assert_eq!(stats.history.len(), 31);
    assert!(
        stats.history.iter().all(|e| e.samples == 4),
        "{:?}",
        stats.history
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_step_has_its_step_resent_and_answered_once() {
    let (_turn, pool) = pool("wodi-kill", 2).await;
    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        2,
    );
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    master
        .send_work(StepId(0), &format!("pid {} 1500", pids.display()))
        .unwrap();
    // The victim's pid appears once it is computing step 0.
    let victim = loop {
        if let Some(e) = std::fs::read_dir(&pids).unwrap().next() {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            break name.split('-').next().unwrap().parse::<i32>().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for s in 1..10 {
        master.send_work(StepId(s), &format!("d{s}")).unwrap();
    }
    // SAFETY: kill(2) on a pid this test's pool started.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for o in collect(&mut master, 10).await {
        match o {
            StepOutcome::Done(step, _) => *seen.entry(step.0).or_default() += 1,
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
        }
    }
    assert_eq!(seen, (0..10).map(|s| (s, 1)).collect());
    let stats = master.complete().await.unwrap();
    assert_eq!(stats.steps_delivered, 10);
    let lost = stats
        .steps
        .iter()
        .filter(|s| s.outcome == wodi::stats::RunOutcome::Lost)
        .count();
    assert_eq!(lost, 1, "exactly the killed copy of step 0 was lost");
    // No worker survives the run: every pid that computed step 0 is gone.
    for e in std::fs::read_dir(&pids).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        let pid = name.split('-').next().unwrap();
        let proc_dir = format!("/proc/{pid}");
        let mut waited = 0;
        while Path::new(&proc_dir).exists() && waited < 100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            waited += 1;
        }
        assert!(
            !Path::new(&proc_dir).exists(),
            "worker {pid} outlived the run"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_step_fails_after_its_attempts_while_the_others_complete() {
    let (_turn, pool) = pool("wodi-poison", 2).await;
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        2,
    );
    cfg.max_attempts = 2;
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    for s in 0..12 {
        let data = if s == 3 {
            "crash".to_string()
        } else {
            format!("d{s}")
        };
        master.send_work(StepId(s), &data).unwrap();
    }
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for o in collect(&mut master, 12).await {
        match o {
            StepOutcome::Done(step, _) => done.push(step.0),
            StepOutcome::Failed(step, why) => {
                assert!(why.contains("2 times"), "{why}");
                failed.push(step.0)
            }
        }
    }
    done.sort();
    assert_eq!(failed, vec![3]);
    assert_eq!(done, (0..12).filter(|s| *s != 3).collect::<Vec<_>>());
    master.complete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_workers_run_shell_commands() {
    let (_turn, pool) = pool("wodi-cmd", 2).await;
    let cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        env!("CARGO_BIN_EXE_wodi-cmd-worker"),
        2,
    );
    let mut master = Master::init_raw(cfg, bytes::Bytes::new())
        .await
        .expect("init");
    for s in 0..6u64 {
        master.send_work_raw(StepId(s), format!("echo out-$(({s} * 7))").into());
    }
    master.send_work_raw(StepId(6), "echo bad >&2; exit 4".into());
    let mut got = BTreeMap::new();
    for _ in 0..7 {
        let next = tokio::time::timeout(Duration::from_secs(60), master.recv_result_raw());
        match next.await.expect("a step outcome within 60 s").unwrap() {
            StepOutcome::Done(step, out) => {
                got.insert(step.0, String::from_utf8(out.to_vec()).unwrap());
            }
            StepOutcome::Failed(step, why) => {
                assert_eq!(step, StepId(6));
                assert!(why.contains("bad"), "{why}");
            }
        }
    }
    let expected: BTreeMap<u64, String> = (0..6).map(|s| (s, format!("out-{}\n", s * 7))).collect();
    assert_eq!(got, expected);
    master.complete().await.unwrap();
}

/// Files in `dir`, waiting until there are at least `n`.
async fn wait_files(dir: &Path, n: usize) -> Vec<String> {
    for _ in 0..600 {
        let names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        if names.len() >= n {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("fewer than {n} files appeared in {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_worker_answering_after_its_step_was_resent_still_gives_one_result() {
    use carmi_api::msg::OwnerEvent;
    let (_turn, pool) = pool("wodi-suspend", 1).await;
    // A second machine in this process, whose owner the test plays.
    let mut settings =
        carmi_local::config::Settings::new(pool.global_addr.clone(), pool.secret_path.clone());
    settings.name = "owned".into();
    // The pool admits local RMs by their daemon token.
    let token = pool.dir.join("owned.token");
    let daemon = carmi_api::token::Power::Daemon;
    pool.token_file(&token, "owned", daemon, Some("owned"), 3600);
    settings.token_file = Some(token);
    settings.slots = Some(1);
    settings.benchmark = false;
    // The test plays the owner: this machine's own terminals must not. A
    // policy minute of 0.1 s: the job continues 0.5 s after the owner
    // leaves; it is never vacated (the owner stays about 1.5 s).
    settings.owner_source = carmi_local::config::OwnerSource::Simulated;
    settings.policy.minute = 0.1;
    settings.policy.preempt = classad::parse_expr("false").expect("a constant parses");
    settings.work_dir = pool.dir.join("owned");
    let owned = carmi_local::daemon::Daemon::start(settings)
        .await
        .expect("start owned");

    let pids = pool.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        2,
    );
    cfg.suspend_timeout = Duration::from_millis(300);
    // What this test is about: a suspended host kept after its grace, whose
    // worker answers when its owner leaves (not given back, as the
    // recommended policies do).
    cfg.policies.release_suspended = false;
    let mut master = Master::init(cfg, &"i".to_string()).await.expect("init");
    for s in 0..2 {
        master
            .send_work(StepId(s), &format!("pid {} 1500", pids.display()))
            .unwrap();
    }
    // Both workers are computing; the owner of one machine comes back.
    wait_files(&pids, 2).await;
    assert!(owned.owner_event(OwnerEvent::Arrive).await);
    // Once the grace period is over the other worker gets the suspended step
    // too, and starts it when its own is done: a third file.
    wait_files(&pids, 3).await;
    assert!(owned.owner_event(OwnerEvent::Leave).await);
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for o in collect(&mut master, 2).await {
        match o {
            StepOutcome::Done(step, _) => *seen.entry(step.0).or_default() += 1,
            StepOutcome::Failed(step, why) => panic!("{step} failed: {why}"),
        }
    }
    assert_eq!(seen, (0..2).map(|s| (s, 1)).collect());
    let stats = master.complete().await.unwrap();
    assert_eq!(stats.steps_delivered, 2);
    assert_eq!(stats.step_copies, 3, "the suspended step was sent twice");
    let suspended_host = stats
        .timeline
        .iter()
        .find(|row| {
            row.periods
                .iter()
                .any(|p| p.kind == wodi::stats::PeriodKind::Suspended)
        })
        .expect("one host was suspended")
        .host;
    // The resumed worker's sleep was over, so it answered first and won.
    let resent = stats
        .steps
        .iter()
        .find(|s| s.host == suspended_host)
        .expect("the suspended host computed a step");
    assert_eq!(resent.outcome, wodi::stats::RunOutcome::Delivered);
    owned.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_executable_that_cannot_be_read_stops_the_run_with_a_clear_error() {
    let (_turn, pool) = pool("wodi-badexe", 1).await;
    let cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        "/nonexistent/wodi-worker",
        1,
    );
    let mut master = Master::init_raw(cfg, bytes::Bytes::new())
        .await
        .expect("init");
    master.send_work_raw(StepId(0), bytes::Bytes::new());
    let next = tokio::time::timeout(Duration::from_secs(60), master.recv_result_raw()).await;
    match next.expect("an answer within 60 s") {
        Err(wodi::master::MasterError::Fatal(why)) => {
            assert!(why.contains("/nonexistent/wodi-worker"), "{why}")
        }
        other => panic!("expected a fatal error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_masters_share_one_server_and_its_workers() {
    let (_turn, pool) = pool("wodi-masters", 2).await;
    let local = &pool.locals[0].app_addr;
    let mut a = Master::init(
        config(local, &pool.secret_path, test_worker(), 1),
        &"A".to_string(),
    )
    .await
    .expect("init A");
    let (addr, token) = a.server();
    let mut cfg = config(local, &pool.secret_path, test_worker(), 1);
    cfg.server = wodi::master::ServerCommand::Connect { addr, token };
    let mut b = Master::init(cfg, &"B".to_string()).await.expect("init B");
    for s in 0..31 {
        a.send_work(StepId(s), &format!("a{s}")).unwrap();
        b.send_work(StepId(s), &format!("b{s}")).unwrap();
    }
    // Each master gets its own 31 results, computed with its own init data,
    // whichever worker ran them.
    for (master, name) in [(&mut a, "A"), (&mut b, "B")] {
        let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
        for o in collect(master, 31).await {
            match o {
                StepOutcome::Done(step, r) => {
                    let tag = name.to_lowercase();
                    assert_eq!(r, format!("{name}||{step}|{tag}{}", step.0));
                    *seen.entry(step.0).or_default() += 1;
                }
                StepOutcome::Failed(step, why) => panic!("{name} {step} failed: {why}"),
            }
        }
        assert_eq!(seen, (0..31).map(|s| (s, 1)).collect(), "master {name}");
    }
    let stats_b = b.complete().await.expect("complete B");
    assert_eq!(stats_b.hosts.added, 2, "the two masters' hosts were pooled");
    let stats_a = a.complete().await.expect("complete A");
    assert_eq!(stats_a.steps_delivered, 62);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewest_hosts_gives_back_what_the_best_cycle_does_not_need() {
    let (_turn, pool) = pool("wodi-fewest", 4).await;
    let mut cfg = config(
        &pool.locals[0].app_addr,
        &pool.secret_path,
        test_worker(),
        4,
    );
    cfg.learn_from_wall = true;
    cfg.policies.fewest_hosts = Some(0.1);
    cfg.policies.hysteresis = 0;
    let mut master = Master::init(cfg, &"f".to_string()).await.expect("init");
    // One step of 800 ms and seven of 20 ms: the cycle can never be shorter
    // than the long step, and two hosts already reach that.
    let data = |s: u64| format!("sleep {}", if s == 0 { 800 } else { 20 });
    for c in 0..4 {
        let cycle = wodi::CycleId(c);
        master.begin_cycle(cycle, &format!("b{c}")).unwrap();
        for s in 0..8 {
            master.send_work(StepId(s), &data(s)).unwrap();
        }
        let done = collect(&mut master, 8).await;
        assert!(done.iter().all(|o| matches!(o, StepOutcome::Done(..))));
        master.end_cycle(cycle, &()).unwrap();
    }
    // The server's reports catch up within a second.
    let mut status = master.status();
    for _ in 0..40 {
        if status.wanted == 2 && status.hosts <= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = master.status();
    }
    assert_eq!(status.wanted, 2, "{status:?}");
    assert!(status.hosts <= 2, "surplus hosts went back: {status:?}");
    let stats = master.complete().await.expect("complete");
    assert_eq!(stats.steps_delivered, 32);
}
