//! Job processes on the embedded pool: owners reach them, shutdown ends them.

use std::time::Duration;

use carmi_api::client::{ConnectOptions, EventStream, Incoming, connect};
use carmi_api::ids::RequestId;
use carmi_api::msg::{Event, OwnerEvent, SpawnTarget};
use carmi_pool::{EmbeddedPool, OwnerModel, PoolOptions};

/// The next RM event about `request` that `want` accepts; panics after 20 s.
async fn wait_for<T>(
    events: &mut EventStream,
    request: RequestId,
    mut want: impl FnMut(&Event) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, events.next()).await {
            Ok(Some(Incoming::Rm(e))) => {
                if let Some(t) = want(&e) {
                    return t;
                }
                if let Event::Failed {
                    request: r,
                    failure,
                } = &e
                {
                    assert_ne!(*r, request, "request failed: {failure:?}");
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => panic!("event stream ended waiting for {request}"),
            Err(_) => panic!("timed out waiting for {request}"),
        }
    }
}

/// The state letter of `/proc/PID/stat`, `None` once the process is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let s = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
    (s != 'Z').then_some(s)
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never: {what}");
}

/// An application on the submit-side local RM that takes `hosts` hosts and
/// starts a script on each that leaves a grandchild; returns the
/// application's handle and the grandchildren's pids.
async fn families(
    pool: &EmbeddedPool,
    hosts: usize,
) -> (carmi_api::client::Carmi, EventStream, Vec<u32>) {
    // A new job needs a token that may submit: the pool's admin token.
    let secret = pool.admin_secret().unwrap();
    let opts = ConnectOptions::new(pool.submit_addr().to_string(), secret);
    let (carmi, mut events) = connect(opts).await.unwrap();

    let class = carmi.define_class("any", "Speed > 0");
    wait_for(&mut events, class, |e| {
        matches!(e, Event::Done { request, .. } if *request == class).then_some(())
    })
    .await;
    let add = carmi.addhosts("any", hosts as u32, hosts as u32);
    let hosts_got = wait_for(&mut events, add, |e| match e {
        Event::HostsAdded { request, hosts, .. } if *request == add => {
            Some(hosts.iter().map(|h| h.host).collect::<Vec<_>>())
        }
        _ => None,
    })
    .await;
    assert_eq!(hosts_got.len(), hosts);

    // Each job process leaves a grandchild, whose pid it writes down.
    let scratch = pool.dir().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let exe = scratch.join("family.sh");
    std::fs::write(&exe, "#!/bin/sh\nsleep 300 & echo $! > \"$1\"; wait\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut pidfiles = Vec::new();
    for (i, h) in hosts_got.iter().enumerate() {
        let pidfile = scratch.join(format!("child{i}.pid"));
        let spawn = carmi.class_spawn(&exe, [pidfile.display().to_string()], SpawnTarget::Host(*h));
        wait_for(&mut events, spawn, |e| {
            matches!(e, Event::ProcessStarted { request, .. } if *request == spawn).then_some(())
        })
        .await;
        pidfiles.push(pidfile);
    }
    let mut pids = Vec::new();
    for f in &pidfiles {
        let mut pid = None;
        until("the scripts wrote their children's pids", || {
            pid = std::fs::read_to_string(f)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            pid.is_some()
        })
        .await;
        pids.push(pid.unwrap());
    }
    (carmi, events, pids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_reach_job_processes_and_shutdown_leaves_none() {
    let pool = EmbeddedPool::start(PoolOptions {
        hosts: 2,
        owners: OwnerModel::None,
        // A policy minute of 0.1 s: an owner policy that continues jobs
        // after 5 idle minutes does so within a second.
        speedup: 600.0,
        handle_signals: false,
        ..PoolOptions::default()
    })
    .await
    .unwrap();
    let (carmi, _events, pids) = families(&pool, 2).await;
    assert!(pids.iter().all(|p| state(*p).is_some_and(|s| s != 'T')));

    // An owner at every machine stops everything there, grandchildren included.
    for h in 0..2 {
        assert!(pool.owner_event(h, OwnerEvent::Arrive).await);
    }
    until("every job process is stopped", || {
        pids.iter().all(|p| state(*p) == Some('T'))
    })
    .await;
    for h in 0..2 {
        assert!(pool.owner_event(h, OwnerEvent::Leave).await);
    }
    until("every job process runs again", || {
        pids.iter().all(|p| state(*p).is_some_and(|s| s != 'T'))
    })
    .await;

    let dir = pool.dir().to_path_buf();
    drop(carmi);
    pool.shutdown().await;
    for p in &pids {
        assert_eq!(state(*p), None, "process {p} outlived the pool");
    }
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_dropped_without_shutdown_still_ends_its_processes() {
    let pool = EmbeddedPool::start(PoolOptions {
        hosts: 1,
        // A policy minute of 0.1 s: an owner policy that continues jobs
        // after 5 idle minutes does so within a second.
        speedup: 600.0,
        handle_signals: false,
        ..PoolOptions::default()
    })
    .await
    .unwrap();
    let (carmi, _events, pids) = families(&pool, 1).await;
    let dir = pool.dir().to_path_buf();
    drop(pool);
    // The drop starts the shutdown in the background; it finishes while the
    // runtime runs.
    until("the job processes are gone", || {
        pids.iter().all(|p| state(*p).is_none())
    })
    .await;
    until("the pool folder is gone", || !dir.exists()).await;
    drop(carmi);
}
