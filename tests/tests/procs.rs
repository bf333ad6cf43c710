//! End to end, over real daemons: the processes of a job do not outlive a
//! killed local RM, hand-started jobs survive a global RM restart, and the
//! embedded pool restarts a daemon that dies.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carmi_api::client::{ConnectOptions, Incoming, connect};
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, SpawnTarget};
use carmi_tests::{Inbox, Pool, write_script};

/// True while `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    carmi_local::spawn::alive(pid as i32)
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    write_script(&p, &format!("#!/bin/sh\n{body}\n"));
    p
}

/// Waits up to 20 s for `file` to hold a pid.
async fn read_pid(file: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(file)
            && let Ok(pid) = s.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held a pid",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to 20 s for `cond`, panicking with `what` and the pool's logs.
async fn wait_until(pool: &Pool, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGKILL of a local RM mid-job: the job's process dies with it (it cannot
/// outlive the daemon that watches it) and the restarted local RM kills what
/// that process had started (a background child, orphaned by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_local_rm_leaves_no_job_process_alive_after_its_restart() {
    let mut pool = Pool::start("orphans", 1, &[vec![]]);
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("connect to m0");
    let mut inbox = Inbox::new(events);
    let done = |want: RequestId| {
        move |x: &Incoming| match x {
            Incoming::Rm(Event::Done { request, .. }) if *request == want => Some(()),
            _ => None,
        }
    };
    let r = carmi.define_class("any", "true");
    inbox.take("class defined", done(r)).await;
    let add = carmi.addhosts("any", 1, 1);
    let host: HostId = inbox
        .take("a host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                hosts.first().map(|h| h.host)
            }
            _ => None,
        })
        .await;
    let (leader_file, child_file) = (pool.dir.join("leader.pid"), pool.dir.join("child.pid"));
    let exe = script(
        &pool.dir,
        "family.sh",
        &format!(
            "echo $$ > {}; sleep 300 & echo $! > {}; wait",
            leader_file.display(),
            child_file.display()
        ),
    );
    let spawn = carmi.class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(host));
    inbox
        .take("process started", |x| match x {
            Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let leader = read_pid(&leader_file).await;
    let child = read_pid(&child_file).await;
    assert!(alive(leader) && alive(child), "the job's processes run");

    pool.kill_local(0);
    wait_until(&pool, "the job's process to die with its local RM", || {
        !alive(leader)
    })
    .await;
    pool.restart_local(0);
    wait_until(
        &pool,
        "the orphaned child to be killed by the restart",
        || !alive(child),
    )
    .await;
    let log = std::fs::read_to_string(pool.dir.join("m0.log")).unwrap_or_default();
    assert!(
        log.contains("killed processes left running by an earlier run"),
        "the restart says what it killed\n{}",
        pool.logs()
    );
}

/// The held hosts of `job` in the global RM's queue (`None`: not queued).
async fn held(pool: &Pool, job: carmi_api::ids::JobId) -> Option<u32> {
    use carmi_api::msg::{FromGlobal, ToGlobal};
    match carmi_api::admin::request(&pool.global_addr, &pool.secret, None, ToGlobal::Queue).await {
        Ok(FromGlobal::Queue(jobs)) => jobs
            .iter()
            .find(|j| j.job == job)
            .map(|j| j.classes.iter().map(|c| c.held).sum()),
        _ => None,
    }
}

/// A job started by hand (an application connected to its local RM, as the
/// README's WoDi path runs a master) is journaled like a submitted one: after
/// a SIGKILL and restart of the global RM it keeps its id, its host and its
/// worker, and can still give the host back (which ends the worker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_started_job_keeps_its_id_and_workers_across_a_global_rm_restart() {
    let mut pool = Pool::start("hand-restart", 1, &[vec![], vec![]]);
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("connect to m0");
    let mut inbox = Inbox::new(events);
    let job = carmi.job();
    let r = carmi.define_class("any", "true");
    inbox
        .take("class defined", |x| match x {
            Incoming::Rm(Event::Done { request, .. }) if *request == r => Some(()),
            _ => None,
        })
        .await;
    let add = carmi.addhosts("any", 1, 1);
    let host: HostId = inbox
        .take("a host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                hosts.first().map(|h| h.host)
            }
            _ => None,
        })
        .await;
    let worker_file = pool.dir.join("worker.pid");
    let exe = script(
        &pool.dir,
        "worker.sh",
        &format!("echo $$ > {}; exec sleep 300", worker_file.display()),
    );
    let spawn = carmi.class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(host));
    inbox
        .take("worker started", |x| match x {
            Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let worker = read_pid(&worker_file).await;
    assert_eq!(held(&pool, job).await, Some(1), "{}", pool.logs());

    pool.restart_global();
    // Back under its own id, holding its host again once the machines re-register.
    let deadline = Instant::now() + Duration::from_secs(20);
    while held(&pool, job).await != Some(1) {
        assert!(
            Instant::now() < deadline,
            "job {job} did not come back with its host\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Well past the loss of a machine (3 heartbeats of 200 ms) and the check
    // of processes a machine no longer reports.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(alive(worker), "the worker was killed\n{}", pool.logs());
    assert_eq!(held(&pool, job).await, Some(1), "{}", pool.logs());
    // Still the job's: giving the host back ends the worker, and the spawn
    // request made before the restart hears of it.
    let del = carmi.delhosts(&[host]);
    inbox
        .take("host given back", |x| match x {
            Incoming::Rm(Event::Done { request, .. }) if *request == del => Some(()),
            _ => None,
        })
        .await;
    inbox
        .take("worker exited", |x| match x {
            Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    wait_until(&pool, "the worker to be killed", || !alive(worker)).await;
}
