//! End to end, encrypted connections between the daemons themselves
//! (issue 21): a local RM's link to the global RM starts with TLS and
//! carries no clear JSON, a bit flipped on it after the handshake closes
//! that link with an error (the local RM reconnects and serves on), and
//! every TCP port either daemon listens on, found from `/proc` rather than
//! from what the daemon prints, refuses the pool handshake in clear.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Secret};
use carmi_api::msg::Role;
use carmi_api::tls;
use carmi_api::token::Power;
use carmi_tests::{Pool, PoolOptions, Proxy, bin_dir, listening_ports, pid_listening_on, text};
use tokio::net::TcpStream;

/// A local RM the test started itself (to aim it at a proxy), killed on drop.
struct Local(Child);

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts local RM `name` of `pool` connecting to the global RM at `global`
/// (with its own daemon token); the process and its application address.
fn start_local(pool: &Pool, name: &str, global: &str) -> (Local, String) {
    let token = pool.dir.join(format!("{name}.token"));
    pool.token_file(&token, name, Power::Daemon, Some(name), 3600);
    let log = std::fs::File::create(pool.dir.join(format!("{name}.log"))).unwrap();
    let mut child = Command::new(bin_dir().join("carmi-local"))
        .args(["--global", global, "--secret"])
        .arg(&pool.secret_path)
        .arg("--token")
        .arg(&token)
        .args(["--name", name, "--slots", "1", "--config"])
        .arg(pool.dir.join("local.toml"))
        .arg("--work-dir")
        .arg(pool.dir.join(name))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start carmi-local");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("carmi-local printed {line:?}"))
        .to_string();
    (Local(child), addr)
}

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
    let (local, app_addr) = start_local(&pool, "m5", &proxy.addr);
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
    let ports = tls_only("the local RM", local.0.id(), &pool.secret, &app).await;
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
