//! A real global RM with many machines and many silent connections, from
//! one test process: the short form of `carmi-bench scale` (200 machines of
//! a [`Fleet`] speaking the real protocol) and 2,000 connections that never
//! say a word. Behaviour is asserted, not speed: every bound below is
//! generous for a loaded 2-core machine.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use carmi_api::admin::pool_status;
use carmi_api::client::{ConnectOptions, Incoming, connect};
use carmi_api::msg::{Event, Request};
use carmi_tests::raw::{raise_fd_limit, silent};
use carmi_tests::{Fleet, FleetOptions, Inbox, Pool, PoolOptions};
use tokio::io::AsyncReadExt;

const MACHINES: usize = 200;
const PATIENCE: Duration = Duration::from_secs(60);

/// A pool whose heartbeats tolerate a loaded machine: 1 s, lost after 3.
fn patient_pool(name: &str) -> Pool {
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 3,
        ..PoolOptions::default()
    };
    Pool::start_with(name, 2, &[], options)
}

/// The machines `status` lists.
async fn listed(pool: &Pool) -> usize {
    tokio::time::timeout(PATIENCE, pool_status(&pool.global_addr, &pool.secret))
        .await
        .unwrap_or_else(|_| panic!("status took over {PATIENCE:?}\n{}", pool.logs()))
        .unwrap_or_else(|e| panic!("status failed: {e}\n{}", pool.logs()))
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_machines_register_serve_jobs_and_a_silent_tenth_is_noticed() {
    raise_fd_limit(4 * MACHINES as u64 + 1_000);
    let pool = patient_pool("fleet");
    let bare = pool.secret.clone().with_token(None);
    let options = FleetOptions {
        machines: MACHINES,
        ..FleetOptions::default()
    };
    let fleet = Fleet::start(&pool.global_addr, &bare, &pool.key, &options)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pool.logs()));
    assert_eq!(listed(&pool).await, MACHINES);

    // Ten jobs started by hand, each adding a host and giving it back.
    let mut apps = Vec::new();
    for i in 0..10 {
        apps.push(fleet.attach(i, PATIENCE).await.expect("attach"));
    }
    let mut jobs = std::collections::HashSet::new();
    for app in &mut apps {
        assert!(jobs.insert(app.job), "job {} twice", app.job);
        app.request(Request::DefineClass {
            name: "any".into(),
            expression: "true".into(),
            rank: None,
            replace: false,
        })
        .expect("define");
        let add = Request::AddHosts {
            class: "any".into(),
            count: 1,
            increment: 1,
        };
        app.request(add).expect("add");
    }
    let mut held = std::collections::HashSet::new();
    for app in &mut apps {
        assert!(matches!(app.event(PATIENCE).await, Ok(Event::Done { .. })));
        match app.event(PATIENCE).await {
            Ok(Event::HostsAdded { hosts, .. }) => {
                assert_eq!(hosts.len(), 1);
                assert!(held.insert(hosts[0].host), "a host given twice");
            }
            other => panic!("AddHosts: {other:?}\n{}", pool.logs()),
        }
    }

    // A tenth of the machines fall silent, their connections left open:
    // the global RM drops them within its heartbeat bound (3 s; 30 s here)
    // and keeps the others.
    let silent = MACHINES / 10;
    for i in MACHINES - silent..MACHINES {
        fleet.vanish(i);
    }
    let t = Instant::now();
    loop {
        let n = listed(&pool).await;
        if n == MACHINES - silent {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30) && n > MACHINES - silent,
            "{n} machines listed {:?} after {silent} fell silent\n{}",
            t.elapsed(),
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The rest are still served, and still heartbeating.
    let beats = fleet.heartbeats();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(fleet.heartbeats() > beats, "the fleet stopped beating");
    assert_eq!(listed(&pool).await, MACHINES - silent);
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_silent_connections_to_each_daemon_leave_both_serving_and_end_at_the_handshake_timeout()
 {
    const SILENT: usize = 2_000;
    raise_fd_limit(2 * SILENT as u64 + 1_000);
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 3,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("silent", 1, &[vec![]], options);
    pool.wait_registered();
    let global: SocketAddr = pool.global_addr.parse().expect("an address");
    let local: SocketAddr = pool.locals[0].app_addr.parse().expect("an address");
    // To the global RM from 20 loopback addresses, 100 each (under its
    // per-address cap, so that the total cap decides), and 200 more from
    // 127.0.0.1, the address `carmi status` comes from below (over its cap:
    // the oldest of that address give way); to the local RM's application
    // port all from 127.0.0.1, the address its own applications come from
    // (issue 38: 128 of them once locked every application out).
    let mut held = Vec::with_capacity(2 * SILENT + 200);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..2 * SILENT + 200 {
        let (from, to) = if i >= 2 * SILENT {
            (Ipv4Addr::LOCALHOST, global)
        } else if i % 2 == 0 {
            (Ipv4Addr::new(127, 0, 3, (2 + i % 40) as u8), global)
        } else {
            (Ipv4Addr::LOCALHOST, local)
        };
        set.spawn(silent(IpAddr::V4(from), to));
        if set.len() >= 200 {
            held.extend(set.join_next().await.expect("a task").expect("no panic"));
        }
    }
    while let Some(s) = set.join_next().await {
        held.extend(s.expect("no panic"));
    }
    assert!(
        held.len() >= (2 * SILENT + 200) * 9 / 10,
        "only {} opened",
        held.len()
    );
    let opened = Instant::now();
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(listed(&pool).await, 1);
        let took = t.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "status took {took:?} beside {} silent connections\n{}",
            held.len(),
            pool.logs()
        );
    }
    // An application still gets in at the local RM, and is served.
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = tokio::time::timeout(PATIENCE, connect(opts))
        .await
        .expect("the application connected in time")
        .unwrap_or_else(|e| panic!("the application was not admitted: {e}\n{}", pool.logs()));
    let mut inbox = Inbox::new(events);
    let _ = carmi.define_class("any", "true");
    let add = carmi.addhosts("any", 1, 1);
    inbox
        .take("host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, .. }) if *request == add => Some(()),
            _ => None,
        })
        .await;
    // None outlives the handshake timeout (10 s) by much: each is closed
    // by its daemon, dropped for newer ones or timed out (120 s allowed: a
    // loaded machine may accept the last of them late).
    let mut open = Vec::new();
    let total = held.len();
    for mut s in held {
        let left = (opened + Duration::from_secs(120)).saturating_duration_since(Instant::now());
        // A refused one may be told why first: read to the end.
        let mut bytes = Vec::new();
        if tokio::time::timeout(left, s.read_to_end(&mut bytes))
            .await
            .is_err()
        {
            open.push(s.peer_addr().map(|a| a.to_string()).unwrap_or_default());
        }
    }
    assert!(
        open.is_empty(),
        "{} of {total} connections still open 120 s on, to {:?}",
        open.len(),
        open.iter().collect::<std::collections::BTreeSet<_>>()
    );
    // Refusals are summed up, not logged one line each.
    let log = std::fs::read_to_string(pool.dir.join("m0.log")).unwrap_or_default();
    let lines = log.lines().filter(|l| l.contains("handshake")).count();
    assert!(lines < 50, "{lines} lines about handshakes in m0's log");
}
