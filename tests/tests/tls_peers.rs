//! End to end, the connections a local RM opens to another machine are TLS
//! and a byte altered on them is never used (issue 21):
//! - staging: a bit flipped in the middle of an executable that one local
//!   RM serves another through its staging listener breaks that fetch with
//!   a TLS error (not a wrong copy caught by its hash later), the fetcher
//!   takes the executable from the store, and every cache holds the right
//!   bytes. The proxy sits in front of one local RM's staging listener: that
//!   local RM listens on a port chosen here (`--stage-listen`) and tells the
//!   pool to fetch from the proxy (`--stage-advertise`), as a machine behind
//!   a NAT would name its forwarded port.
//! - forwarded output: a bit flipped in a spawned process's output on its
//!   way to the process that asked ends that connection; what was delivered
//!   and what the local RM kept in its files hold no altered byte. The
//!   asking process names the proxy as its endpoint
//!   (`ConnectOptions::endpoint_advertise`).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use carmi_api::admin::request;
use carmi_api::client::{Carmi, ConnectOptions, Incoming, connect};
use carmi_api::exe::sha256_hex;
use carmi_api::ids::{HostId, RequestId};
use carmi_api::msg::{Event, ExitStatus, FromGlobal, SpawnTarget, StageStats, StdStream, ToGlobal};
use carmi_api::tls;
use carmi_tests::{
    Inbox, Pool, PoolOptions, Proxy, listening_ports, write_executable, write_script,
};

/// A free loopback port (free a moment ago).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

async fn stats(pool: &Pool) -> StageStats {
    match request(&pool.global_addr, &pool.secret, None, ToGlobal::StageStats)
        .await
        .expect("StageStats")
    {
        FromGlobal::StageStats(s) => s,
        other => panic!("StageStats answered {other:?}"),
    }
}

/// A job holding `n` machines, attached through m0; its hosts by machine.
async fn job(pool: &Pool, n: usize) -> (Carmi, Inbox, HashMap<String, HostId>) {
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("connect");
    let mut inbox = Inbox::new(events).with_patience(Duration::from_secs(60));
    inbox.done(carmi.define_class("any", "true")).await;
    let add = carmi.addhosts("any", n as u32, n as u32);
    let mut hosts = HashMap::new();
    while hosts.len() < n {
        let got = inbox
            .take("hosts", |x| match x {
                Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                    Some(hosts.clone())
                }
                _ => None,
            })
            .await;
        for h in got {
            hosts.insert(h.name.rsplit('@').next().unwrap().to_string(), h.host);
        }
    }
    (carmi, inbox, hosts)
}

/// Spawns `exe` on each of `machines` at once; every process exits 0.
async fn spawn_on(
    (carmi, inbox, hosts): &mut (Carmi, Inbox, HashMap<String, HostId>),
    exe: &Path,
    machines: &[&str],
) {
    let ids: Vec<RequestId> = (machines.iter())
        .map(|m| carmi.class_spawn(exe, Vec::<String>::new(), SpawnTarget::Host(hosts[*m])))
        .collect();
    carmi.flush().await;
    for id in ids {
        let status = inbox
            .take("exit", |x| match x {
                Incoming::Rm(Event::ProcessExited {
                    request, status, ..
                }) if *request == id => Some(status.clone()),
                Incoming::Rm(Event::Failed { request, failure }) if *request == id => {
                    panic!("spawn failed: {failure:?}")
                }
                _ => None,
            })
            .await;
        assert_eq!(status, ExitStatus::Code(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flipped_in_a_copy_between_local_rms_breaks_that_fetch_with_a_tls_error() {
    let options = PoolOptions {
        global_args: vec!["--stage-fanout".into(), "1".into()],
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("tls-peers", 1, &[vec![], vec![]], options);
    pool.wait_registered();
    let port = free_port();
    let proxy = Proxy::start(format!("127.0.0.1:{port}")).await;
    let listen = format!("127.0.0.1:{port}");
    let args = ["--stage-listen", &listen, "--stage-advertise", &proxy.addr];
    let _m5 = pool.start_extra_local("m5", &pool.global_addr, &args);
    let mut j = job(&pool, 3).await;
    let exe = pool.dir.join("peer.sh");
    write_executable(&exe, 1 << 20, 44).unwrap();
    let sha = sha256_hex(&std::fs::read(&exe).unwrap());
    // m5 takes it from the store; then m0 and m1 at once: with a fan-out
    // of 1, one of them is sent to m5, through the proxy, which flips one
    // bit well past the TLS handshake, in the executable's bytes.
    spawn_on(&mut j, &exe, &["m5"]).await;
    proxy.arm_at(true, 300_000);
    spawn_on(&mut j, &exe, &["m0", "m1"]).await;
    let s = stats(&pool).await;
    assert!(s.directed_peer >= 1, "no fetch went to a peer: {s:?}");
    assert!(
        !proxy.armed_at(),
        "nothing crossed the proxy\n{}",
        pool.logs()
    );
    assert_eq!(s.failed, 1, "the broken fetch is reported: {s:?}");
    let (seen, clear) = proxy.seen();
    assert_eq!(seen[0], tls::TLS_HANDSHAKE_BYTE, "{:?}", &seen[..8]);
    assert!(
        !clear.contains("Stager"),
        "the staging handshake crossed in clear"
    );

    // The fetcher stopped at the altered record: TLS refused it (a copy
    // delivered with the altered byte would fail its hash instead, as "a
    // bad copy").
    let deadline = Instant::now() + Duration::from_secs(10);
    let failure = loop {
        let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.contains("a staged copy failed")) {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "{}", pool.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(failure.contains(&proxy.addr), "{failure}");
    assert!(!failure.contains("bad copy"), "{failure}");
    assert!(failure.contains("decrypt"), "not a TLS error: {failure}");
    for m in ["m0", "m1", "m5"] {
        let copy = std::fs::read(pool.dir.join(m).join("cache").join(&sha)).unwrap();
        assert_eq!(sha256_hex(&copy), sha, "{m}'s copy");
    }
}

/// Two million `x` on stdout, then `end`.
const PRINTER: &str = "#!/bin/sh\nhead -c 2000000 /dev/zero | tr '\\000' 'x'; printf 'end\\n'\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flipped_in_forwarded_output_ends_that_connection_and_is_never_delivered() {
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("tls-output", 1, &[vec![]], options);
    pool.wait_registered();
    // The proxy's upstream is this process's listener, known once attached.
    let proxy = Proxy::start("127.0.0.1:9".into()).await;
    let mut opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    opts.endpoint_advertise = Some(proxy.addr.clone());
    let (carmi, events) = connect(opts).await.expect("attach");
    assert_eq!(carmi.endpoint(), proxy.addr);
    let proxy_port: u16 = proxy.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let mine: Vec<u16> = (listening_ports(std::process::id()).unwrap().into_iter())
        .filter(|p| *p != proxy_port)
        .collect();
    assert_eq!(mine.len(), 1, "this process's listeners: {mine:?}");
    proxy.set_upstream(format!("127.0.0.1:{}", mine[0]));
    let mut inbox = Inbox::new(events).with_patience(Duration::from_secs(60));
    inbox.done(carmi.define_class("any", "true")).await;
    let add = carmi.addhosts("any", 1, 1);
    let host = inbox
        .take("a host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                Some(hosts[0].host)
            }
            _ => None,
        })
        .await;
    let exe = pool.dir.join("printer.sh");
    write_script(&exe, PRINTER);

    // The local RM is the client of the output connection: the flip is in
    // what it sends, half a megabyte in.
    proxy.arm_at(false, 500_000);
    let spawn = carmi.class_spawn(&exe, Vec::<String>::new(), SpawnTarget::Host(host));
    let mut delivered = Vec::new();
    let complete = loop {
        let item = inbox
            .take("output", |x| match x {
                Incoming::Output { request, .. } | Incoming::OutputEnd { request, .. }
                    if *request == spawn =>
                {
                    Some(x.clone())
                }
                _ => None,
            })
            .await;
        match item {
            Incoming::Output { stream, data, .. } => {
                assert_eq!(stream, StdStream::Stdout);
                delivered.extend_from_slice(&data);
            }
            Incoming::OutputEnd { complete, .. } => break complete,
            _ => unreachable!(),
        }
    };
    assert!(
        !proxy.armed_at(),
        "nothing crossed the proxy\n{}",
        pool.logs()
    );
    assert!(
        !complete,
        "the output ended cleanly through an altered record"
    );
    let (seen, clear) = proxy.seen();
    assert_eq!(seen[0], tls::TLS_HANDSHAKE_BYTE, "{:?}", &seen[..8]);
    assert!(!clear.contains("xxxx"), "output crossed in clear");
    assert!(
        delivered.len() < 2_000_000,
        "{} bytes delivered",
        delivered.len()
    );
    assert!(
        delivered.iter().all(|b| *b == b'x'),
        "an altered byte was delivered: {:?}",
        delivered.iter().find(|b| **b != b'x')
    );

    // The local RM sees the broken connection only if it still had bytes to
    // write when the peer hung up (on a fast run it had handed them all to
    // the socket): then it says why, naming where, and what it had not
    // written goes to its files. Either way no altered byte is kept.
    let log = pool.dir.join("m0.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("process exited")
    {
        assert!(Instant::now() < deadline, "{}", pool.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if let Some(failure) = text
        .lines()
        .find(|l| l.contains("forwarding output failed"))
    {
        assert!(failure.contains(&proxy.addr), "{failure}");
    }
    let kept = pool.dir.join("m0").join("output");
    let rest = walk(&kept)
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "out"))
        .map(|out| std::fs::read(out).unwrap())
        .unwrap_or_default();
    // Its last line may still be on its way.
    let body_len = rest.iter().rposition(|b| *b == b'x').map_or(0, |i| i + 1);
    let (body, tail) = rest.split_at(body_len);
    assert!(
        body.iter().all(|b| *b == b'x') && b"end\n".starts_with(tail),
        "an altered byte in the kept output"
    );
    assert!(delivered.len() + body.len() <= 2_000_000);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
