//! What one connection may cost the global RM, against real daemons: a
//! machine sending a 200,000-attribute ad stalls neither the router nor
//! another machine's job, and 9,000 half-open handshakes leave the daemon
//! small and quick to answer `status`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use carmi_api::admin::pool_status;
use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::HostId;
use carmi_api::msg::{Event, FromGlobal, Role, SpawnTarget, ToGlobal};
use carmi_api::tls;
use carmi_api::token::Power;
use carmi_tests::raw::{dial, pid_of_global, raise_fd_limit, raw_local, silent};
use carmi_tests::{Inbox, Pool, PoolOptions, write_script};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

/// An application connected to m0 and holding one host of the class
/// `expression`.
async fn one_host(pool: &Pool, expression: &str) -> (Carmi, Inbox, HostId) {
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("connect to m0");
    let mut inbox = Inbox::new(events);
    let _ = carmi.define_class("any", expression);
    let add = carmi.addhosts("any", 1, 1);
    let host = inbox
        .take("host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                Some(hosts[0].host)
            }
            _ => None,
        })
        .await;
    (carmi, inbox, host)
}

/// An old-syntax update of `n` attributes.
fn update_of(n: usize) -> String {
    (0..n).map(|i| format!("Attribute{i} = {i}\n")).collect()
}

/// A new-syntax machine ad of `n` attributes.
fn ad_of(name: &str, n: usize) -> String {
    let attrs: String = (0..n).map(|i| format!("Attribute{i} = {i}; ")).collect();
    format!("[ Name = \"{name}\"; {attrs}]")
}

/// The next refusal sent to a raw local RM: its message.
async fn refusal(r: &mut FrameReader<tls::Reader>) -> String {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), r.read::<FromGlobal>()).await {
            Ok(Ok(Some((FromGlobal::AdminFailed(f), _)))) => return f.message,
            Ok(Ok(Some(_))) => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// How long `status` takes to answer, end to end (connect, handshake, request).
async fn status_time(pool: &Pool) -> Duration {
    let t0 = Instant::now();
    let machines = tokio::time::timeout(
        Duration::from_secs(30),
        pool_status(&pool.global_addr, &pool.secret),
    )
    .await
    .unwrap_or_else(|_| panic!("status took over 30 s\n{}", pool.logs()))
    .unwrap_or_else(|e| panic!("status failed: {e}\n{}", pool.logs()));
    let took = t0.elapsed();
    assert!(!machines.is_empty() || pool.locals.is_empty());
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200000_attribute_ad_stalls_neither_the_router_nor_a_healthy_machines_job() {
    let pool = Pool::start("huge-ad", 1, &[vec![]]);
    let (carmi, mut inbox, host) = one_host(&pool, "Name == \"m0\"").await;
    let pidfile = pool.dir.join("worker.pid");
    let exe = pool.dir.join("worker.sh");
    write_sh(
        &exe,
        &format!("echo $$ > {}; exec sleep 300", pidfile.display()),
    );
    let spawn = carmi.class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(host));
    inbox
        .take("started", |x| match x {
            Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let pid = read_pid(&pidfile).await;

    // Two machines send 200,000 attributes (about 4 MB): one as heartbeat
    // updates, again and again, the other as its machine ad.
    // Encoded once, before registering: the raw machine must keep its own
    // heartbeat period (600 ms of silence loses it too).
    let update = ToGlobal::Heartbeat {
        update: update_of(200_000),
    };
    let mut frame = carmi_api::frame::encode_header(&update, 0);
    frame.shrink_to_fit();
    let big_ad = carmi_api::frame::encode_header(
        &ToGlobal::Advertise {
            ad: ad_of("huge2", 200_000),
            slots: 1,
            running: vec![],
        },
        0,
    );
    let (mut r, mut w) = raw_local(&pool.global_addr, &pool.secret, "huge").await;
    let flood = tokio::spawn(async move {
        for _ in 0..15 {
            w.write_all(&frame).await.expect("send huge update");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        w
    });
    let second = {
        let addr = pool.global_addr.clone();
        let secret = pool.secret.clone();
        tokio::spawn(async move {
            let role = Role::Local {
                name: "huge2".into(),
            };
            let (mut r, mut w) = dial(&addr, &secret, &role).await.expect("handshake");
            w.write_all(&big_ad).await.expect("advertise");
            refusal(&mut r).await
        })
    };

    // The router keeps answering meanwhile.
    let mut times = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        times.push(status_time(&pool).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let worst = times.iter().copied().max().unwrap_or_default();
    eprintln!("status round trips during the flood: {times:?}");
    let why = refusal(&mut r).await;
    assert!(
        why.contains("heartbeat update") && why.contains("max_ad_"),
        "{why}"
    );
    let why = second.await.expect("second huge machine");
    assert!(
        why.contains("machine ad") && why.contains("max_ad_"),
        "{why}"
    );
    drop(flood.await.expect("flood"));
    eprintln!("worst status round trip during the flood: {worst:?}");
    assert!(
        worst < Duration::from_secs(1),
        "status took {worst:?} while a huge ad arrived\n{}",
        pool.logs()
    );

    // The healthy machine was never lost: its process runs, nothing ended it.
    assert!(alive(pid), "the healthy machine's process {pid} was killed");
    let machines = pool_status(&pool.global_addr, &pool.secret)
        .await
        .expect("status");
    assert!(machines.iter().any(|m| m.name == "m0"), "{machines:?}");
    let ended = inbox.kept().any(
        |x| matches!(x, Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn),
    );
    assert!(
        !ended,
        "the healthy machine's process was reported ended: {:?}",
        inbox.kept().collect::<Vec<_>>()
    );
    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap_or_default();
    assert!(
        !log.contains("`m0` sent nothing"),
        "m0 was declared lost\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_rm_stopped_past_every_deadline_loses_no_machine() {
    let pool = Pool::start("stopped", 1, &[vec![]]);
    let (carmi, mut inbox, host) = one_host(&pool, "true").await;
    let pidfile = pool.dir.join("worker.pid");
    let exe = pool.dir.join("worker.sh");
    write_sh(
        &exe,
        &format!("echo $$ > {}; exec sleep 300", pidfile.display()),
    );
    let spawn = carmi.class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(host));
    inbox
        .take("started", |x| match x {
            Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == spawn => Some(()),
            _ => None,
        })
        .await;
    let pid = read_pid(&pidfile).await;

    // The global RM does not run for 2 s, over three times the 600 ms after
    // which a silent machine is lost; m0 kept sending its heartbeats.
    let global = pid_of_global(&pool.dir).expect("the global RM's pid");
    signal(global, "STOP");
    tokio::time::sleep(Duration::from_secs(2)).await;
    signal(global, "CONT");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap_or_default();
    assert!(
        !log.contains("`m0` sent nothing"),
        "m0 was declared lost\n{log}"
    );
    assert!(alive(pid), "m0's process {pid} was killed");
    let ended = inbox.kept().any(
        |x| matches!(x, Incoming::Rm(Event::ProcessExited { request, .. }) if *request == spawn),
    );
    assert!(
        !ended,
        "m0's process was reported ended: {:?}",
        inbox.kept().collect::<Vec<_>>()
    );
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_frame_or_a_huge_message_ends_its_connection_an_idle_one_is_served() {
    let options = PoolOptions {
        global_args: vec!["--frame-timeout-s".into(), "1".into()],
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("partial", 1, &[vec![]], options);
    let admin = |name: &'static str| {
        let addr = pool.global_addr.clone();
        let secret = pool.secret.clone();
        async move {
            dial(&addr, &secret, &Role::Admin)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    };
    let (mut idle_r, mut idle_w) = admin("idle").await;
    let (mut r, mut w) = admin("partial").await;
    // 1 MiB announced (allowed 1 s + 1 s) with a 50-byte header, 100 bytes
    // sent, then nothing. (A header length over the limit would be refused
    // at once, on its length alone.)
    let mut start = (1u32 << 20).to_be_bytes().to_vec();
    start.extend_from_slice(&50u32.to_be_bytes());
    start.extend_from_slice(&[b'{'; 92]);
    w.write_all(&start).await.expect("start a frame");
    let closed = tokio::time::timeout(Duration::from_secs(30), r.read::<FromGlobal>()).await;
    assert!(
        matches!(closed, Ok(Ok(None)) | Ok(Err(_))),
        "a stalled frame kept its connection: {closed:?}"
    );
    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap_or_default();
    assert!(log.contains("was still incomplete"), "{log}");
    // A message (frame header) over 16 MiB is refused before it is decoded.
    let (mut r, mut w) = admin("huge header").await;
    let hlen: u32 = (16 << 20) + 1;
    let mut big = (hlen + 4).to_be_bytes().to_vec();
    big.extend_from_slice(&hlen.to_be_bytes());
    big.resize(8 + hlen as usize, b' ');
    let _ = w.write_all(&big).await;
    let closed = tokio::time::timeout(Duration::from_secs(30), r.read::<FromGlobal>()).await;
    assert!(
        matches!(closed, Ok(Ok(None)) | Ok(Err(_))),
        "a 16 MiB message was not refused: {closed:?}"
    );
    let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap_or_default();
    assert!(log.contains("exceeds the limit of 16777216 bytes"), "{log}");
    // The idle connection, as old, is still served.
    write_frame(&mut idle_w, &ToGlobal::Status, &[])
        .await
        .expect("ask");
    match tokio::time::timeout(Duration::from_secs(30), idle_r.read::<FromGlobal>()).await {
        Ok(Ok(Some((FromGlobal::Pool(_), _)))) => {}
        other => panic!("the idle connection was not served: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nine_thousand_half_open_handshakes_leave_the_global_rm_small_and_serving() {
    const CONNECTIONS: usize = 9_000;
    raise_fd_limit(CONNECTIONS as u64 + 1_000);
    let pool = Pool::start("half-open", 1, &[vec![]]);
    let global_pid = pid_of_global(&pool.dir).expect("the global RM's pid");
    let before = rss_mb(global_pid);
    let target: SocketAddr = pool.global_addr.parse().expect("an address");

    // One address holding many handshakes open gives way, its oldest first:
    // a client of that address still gets in, and so does another address.
    let crowded = IpAddr::V4(Ipv4Addr::new(127, 0, 2, 1));
    let mut crowd = Vec::new();
    // Silent: a clear frame is refused at its first byte (the pool takes
    // TLS only), so only a connection that says nothing holds its place.
    for _ in 0..200 {
        crowd.extend(silent(crowded, target).await);
    }
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(crowded, 0)).expect("bind");
    let stream = socket.connect(target).await.expect("connect");
    let s = tls::connect(stream)
        .await
        .expect("TLS from the crowded address");
    let (mut r, mut w) = (FrameReader::new(s.reader), s.writer);
    handshake::client_bound(&mut r, &mut w, &pool.secret, &Role::Admin, &s.binding)
        .await
        .unwrap_or_else(|e| panic!("a client of a crowded address was kept out: {e}"));
    status_time(&pool).await;
    drop(crowd);

    // Each opens a handshake frame and stops short of its end: half announce
    // 65,000 bytes and send 64,000, half announce 4,000 (within the
    // handshake's limit) and send 3,000. They come from 90 addresses
    // (127.0.0.0/8 is all loopback), 100 from each.
    let mut held = Vec::with_capacity(CONNECTIONS);
    for batch in 0..CONNECTIONS / 500 {
        let mut set = tokio::task::JoinSet::new();
        for i in batch * 500..(batch + 1) * 500 {
            let from = IpAddr::V4(Ipv4Addr::new(127, 0, 1, (2 + i % 90) as u8));
            set.spawn(half_open(from, target, i % 2 == 0));
        }
        while let Some(s) = set.join_next().await {
            if let Some(s) = s.expect("task") {
                held.push(s);
            }
        }
    }
    assert!(
        held.len() >= CONNECTIONS * 9 / 10,
        "only {} connections opened",
        held.len()
    );
    let during = rss_mb(global_pid);
    let mut times: Vec<Duration> = Vec::new();
    for _ in 0..5 {
        times.push(status_time(&pool).await);
    }
    times.sort();
    eprintln!(
        "{} half-open: RSS {before} MB before, {during} MB during; status {times:?}",
        held.len()
    );
    assert!(
        during < 200,
        "the global RM grew to {during} MB\n{}",
        pool.logs()
    );
    assert!(
        times[2] < Duration::from_millis(100),
        "status took {times:?} (median over 100 ms)\n{}",
        pool.logs()
    );

    drop(held);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_mb(global_pid);
    eprintln!("RSS after the burst: {after} MB");
    assert!(after < 200, "the global RM kept {after} MB after the burst");

    // Refusals are summed up, not written one line each.
    let log_path = pool.dir.join("global.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.contains("connections or handshakes from") || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        log.contains("connections or handshakes from"),
        "no summary of refusals\n{log}"
    );
    let lines = log.lines().filter(|l| l.contains("refus")).count();
    assert!(lines < 20, "{lines} log lines about refusals\n{log}");
}

/// A connection from `from` that starts a handshake frame and never finishes
/// it: 65,000 bytes announced and 64,000 sent if `oversized`, else 4,000
/// and 3,000; `None` if it could not be opened.
async fn half_open(from: IpAddr, to: SocketAddr, oversized: bool) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(from, 0)).ok()?;
    let mut s = tokio::time::timeout(Duration::from_secs(10), socket.connect(to))
        .await
        .ok()?
        .ok()?;
    let announced: u32 = if oversized { 65_000 } else { 4_000 };
    let mut bytes = announced.to_be_bytes().to_vec();
    bytes.resize(announced as usize - 1_000, b'{');
    // The server may already have refused and closed: that is fine too.
    let _ = s.write_all(&bytes).await;
    Some(s)
}

/// Writes an executable shell script running `body`.
fn write_sh(path: &Path, body: &str) {
    write_script(path, &format!("#!/bin/sh\n{body}\n"));
}

async fn read_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && let Ok(pid) = s.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    carmi_pool::sweep::alive(pid as i32)
}

/// Resident memory of `pid`, in MB (VmRSS of /proc/PID/status).
fn rss_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status of pid");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb / 1024
}

/// The secret of `pool` presenting a new token of `identity` with `power`
/// (and `machine`), written under the pool's directory.
fn secret_of(pool: &Pool, identity: &str, power: Power, machine: Option<&str>) -> Secret {
    let path = pool.dir.join(format!("{identity}.token"));
    let token = pool.token_file(&path, identity, power, machine, 3600);
    Secret::from_file(&pool.secret_path)
        .expect("the pool secret")
        .with_token(Some(token))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_inventing_names_for_a_minute_leaves_the_global_rm_within_50_mb() {
    let pool = Pool::start("name-flood", 1, &[vec![]]);
    pool.wait_registered();
    let global_pid = pid_of_global(&pool.dir).expect("the global RM's pid");
    let before = rss_mb(global_pid);
    let secret = secret_of(&pool, "flood", Power::Daemon, Some("flood"));
    let refusals = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let started = Instant::now();
    let mut fresh = 0u64;
    // Reconnecting every 5 s, so that each connection's allowance is
    // spent and the daemon's whole table comes under pressure too (12
    // allowances of 4,096 names; 4.8 million names in all, as many as the
    // two minutes at half the pace this test used to take).
    while started.elapsed() < Duration::from_secs(60) {
        let (mut r, mut w) = raw_local(&pool.global_addr, &secret, "flood").await;
        let seen = refusals.clone();
        let drain = tokio::spawn(async move {
            while let Ok(Some((msg, _))) = r.read::<FromGlobal>().await {
                if let FromGlobal::AdminFailed(f) = msg {
                    seen.lock().unwrap().push(f.message);
                }
            }
        });
        let connected = Instant::now();
        while connected.elapsed() < Duration::from_secs(5) {
            // 4,000 names no ad has held, in every heartbeat.
            let update: String = (0..4_000)
                .map(|_| {
                    fresh += 1;
                    format!("Invented{fresh} = {fresh}\n")
                })
                .collect();
            write_frame(&mut w, &ToGlobal::Heartbeat { update }, &[])
                .await
                .expect("the machine stays connected while its updates are refused");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(w);
        drain.abort();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_mb(global_pid);
    eprintln!("{fresh} names invented: RSS {before} MB before, {after} MB after");
    assert!(
        after <= before + 50,
        "the global RM grew from {before} MB to {after} MB\n{}",
        pool.logs()
    );
    let refusals = refusals.lock().unwrap().clone();
    assert!(
        refusals
            .iter()
            .any(|m| m.contains("max_new_names_per_connection")),
        "no refusal named the limit: {:?}",
        refusals.first()
    );
    // The pool serves on, and its honest machine is still in it.
    assert_eq!(
        pool_status(&pool.global_addr, &pool.secret)
            .await
            .expect("status")
            .iter()
            .filter(|m| m.name == "m0")
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_identity_cannot_take_every_connection_of_the_global_rm() {
    let options = PoolOptions {
        global_args: vec!["--max-connections-per-identity".into(), "4".into()],
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("per-identity", 1, &[vec![]], options);
    pool.wait_registered();
    let alice = secret_of(&pool, "alice", Power::Submit, None);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(
            dial(&pool.global_addr, &alice, &Role::Admin)
                .await
                .expect("alice's first four"),
        );
    }
    match dial(&pool.global_addr, &alice, &Role::Admin).await {
        Err(handshake::HandshakeError::Refused(why)) => assert!(
            why.contains("max_connections_per_identity") && why.contains("alice"),
            "{why}"
        ),
        Err(e) => panic!("alice's fifth refused without the reason: {e}"),
        Ok(_) => panic!("alice's fifth connection was admitted"),
    }
    // Others are served: bob, the admin, and the machine's link (m0 is
    // still registered).
    let bob = secret_of(&pool, "bob", Power::Submit, None);
    dial(&pool.global_addr, &bob, &Role::Admin)
        .await
        .expect("bob gets in");
    status_time(&pool).await;
    held.pop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    dial(&pool.global_addr, &alice, &Role::Admin)
        .await
        .expect("a place given back is alice's again");
}
