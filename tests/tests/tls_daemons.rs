//! End to end, encrypted connections between the daemons themselves
//! (issue 21): a local RM's link to the global RM starts with TLS and
//! carries no clear JSON, a bit flipped on it after the handshake closes
//! that link with an error (the local RM reconnects and serves on), and
//! every TCP port either daemon listens on, found from `/proc` rather than
//! from what the daemon prints, refuses the pool handshake in clear.

use std::path::Path;
use std::time::{Duration, Instant};

use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Secret};
use carmi_api::msg::Role;
use carmi_api::tls;
use carmi_tests::{Pool, PoolOptions, Proxy, listening_ports, pid_listening_on, text};
use tokio::net::TcpStream;

/// How many times `file` (a daemon's log) says `what`.
fn count(file: &Path, what: &str) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .matches(what)
        .count()
}

/// Waits until `cond` holds, at most `limit`; `what` names it on failure.
async fn until(limit: Duration, what: &str, pool: &Pool, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}\n{}", pool.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `carmi status` lists machine `name`.
fn listed(pool: &Pool, name: &str) -> bool {
    let out = pool.carmi().args(["status", "--json"]).output().unwrap();
    let machines: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    machines
        .as_array()
        .is_some_and(|ms| ms.iter().any(|m| m["name"] == name))
}

/// The pool handshake in clear to `127.0.0.1:port` as `role`: what became of it.
async fn clear_handshake(port: u16, secret: &Secret, role: &Role) -> Result<(), String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (r, mut w) = tcp.into_split();
    let mut r = FrameReader::new(r);
    let attempt = handshake::client(&mut r, &mut w, secret, role);
    match tokio::time::timeout(Duration::from_secs(15), attempt).await {
        Ok(res) => res.map_err(|e| e.to_string()),
        Err(_) => Err("no answer".into()),
    }
}

/// Every port `pid` listens on refuses the handshake in clear as `role`,
/// and completes a TLS handshake; the ports.
async fn tls_only(what: &str, pid: u32, secret: &Secret, role: &Role) -> Vec<u16> {
    let ports = listening_ports(pid).expect("the daemon's sockets");
    for &port in &ports {
        let clear = clear_handshake(port, secret, role).await;
        assert!(
            clear.is_err(),
            "{what} took a handshake in clear on port {port}"
        );
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let opened = tokio::time::timeout(Duration::from_secs(15), tls::connect(tcp)).await;
        assert!(
            matches!(opened, Ok(Ok(_))),
            "{what}: no TLS handshake on port {port}"
        );
    }
    ports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_link_between_the_daemons_is_tls_and_a_flipped_bit_closes_it() {
    let options = PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("tls-link", 1, &[], options);
    let proxy = Proxy::start(pool.global_addr.clone()).await;
    let local = pool.start_extra_local("m5", &proxy.addr, &[]);
    let app_addr = local.addr.clone();
    let m5_log = pool.dir.join("m5.log");
    let global_log = pool.dir.join("global.log");
    until(Duration::from_secs(30), "m5 registers", &pool, || {
        listed(&pool, "m5")
    })
    .await;

    // What crossed the proxy: TLS from the first byte, nothing readable.
    let (seen, clear) = proxy.seen();
    assert_eq!(seen[0], tls::TLS_HANDSHAKE_BYTE, "{:?}", &seen[..8]);
    assert_eq!(seen[1], 3, "{:?}", &seen[..8]);
    for word in [
        "Hello",
        "Proof",
        "Local",
        "Advertise",
        "Heartbeat",
        "carmi1.",
    ] {
        assert!(!clear.contains(word), "`{word}` crossed in clear");
    }

    // One bit of the next record the local RM sends (a heartbeat at the
    // latest) is flipped: the global RM closes that link as a bad frame,
    // the local RM connects again, and the machine stays in the pool.
    let connected = "connected to the global RM";
    assert_eq!(count(&m5_log, connected), 1);
    let bad = "closing connection: bad frame";
    assert_eq!(count(&global_log, bad), 0);
    proxy.arm(true);
    until(Duration::from_secs(10), "the flip", &pool, || {
        !proxy.armed()
    })
    .await;
    until(Duration::from_secs(10), "the link closed", &pool, || {
        count(&global_log, bad) == 1
    })
    .await;
    until(Duration::from_secs(30), "m5 reconnects", &pool, || {
        count(&m5_log, connected) == 2
    })
    .await;
    until(
        Duration::from_secs(30),
        "m5 stays in the pool",
        &pool,
        || listed(&pool, "m5"),
    )
    .await;
    let global = std::fs::read_to_string(&global_log).unwrap();
    assert!(!global.contains("undecodable"), "{global}");

    // Every listener of both daemons: TLS only.
    let app = Role::Application {
        job: None,
        process: None,
        endpoint: "127.0.0.1:9".into(),
    };
    let ports = tls_only("the local RM", local.pid(), &pool.secret, &app).await;
    let app_port: u16 = app_addr.rsplit_once(':').unwrap().1.parse().unwrap();
    // Its application and control listener, and its staging listener.
    assert!(ports.contains(&app_port) && ports.len() >= 2, "{ports:?}");
    let global_port: u16 = pool
        .global_addr
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let global_pid = pid_listening_on(global_port).expect("the global RM's process");
    // In clear even with a valid token (the admin's): refused.
    let ports = tls_only("the global RM", global_pid, &pool.secret, &Role::Admin).await;
    assert!(ports.contains(&global_port), "{ports:?}");
    let refused = text(&std::fs::read(&global_log).unwrap());
    assert!(refused.contains("over TLS only"), "{refused}");
}
