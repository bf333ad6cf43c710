//! End to end, the global RM's web dashboard is HTTPS (issue 21): what a
//! client sends it starts with a TLS ClientHello and carries its `read`
//! token only inside TLS; the same request in clear, token and all, gets no
//! JSON and no page back, on the dashboard's port or on any other port the
//! daemon listens on.

use std::time::Duration;

use carmi_api::tls;
use carmi_api::token::Power;
use carmi_tests::{Pool, PoolOptions, Proxy, https, listening_ports, pid_listening_on};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `head` in clear to `127.0.0.1:port`; what came back within 15 s.
async fn clear(port: u16, head: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = s.write_all(head.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_is_https_and_a_clear_request_with_a_good_token_gets_nothing() {
    let options = PoolOptions {
        global_args: vec!["--http".into(), "127.0.0.1:0".into()],
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    };
    let pool = Pool::start_with("tls-dashboard", 1, &[], options);
    pool.wait_registered();
    let url = pool
        .dashboard
        .clone()
        .expect("the global RM serves a dashboard");
    let addr = (url.strip_prefix("https://"))
        .and_then(|u| u.strip_suffix('/'))
        .unwrap_or_else(|| panic!("the daemon printed {url}, not https://HOST:PORT/"))
        .to_string();
    let read = pool.token_file(
        &pool.dir.join("read.token"),
        "viewer",
        Power::Read,
        None,
        3600,
    );
    let head = |host: &str| {
        format!(
            "GET /api/view HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {read}\r\nConnection: close\r\n\r\n"
        )
    };

    // Through a proxy that records what the client sends: a TLS handshake
    // from the first byte, the token and the request never readable.
    let proxy = Proxy::start(addr.clone()).await;
    let answer = https(&proxy.addr, &head(&proxy.addr));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"machines\""), "{answer}");
    let (seen, text) = proxy.seen();
    assert_eq!(seen[0], tls::TLS_HANDSHAKE_BYTE, "{:?}", &seen[..8]);
    assert_eq!(seen[1], 3, "a TLS record's version: {:?}", &seen[..8]);
    assert_eq!(seen[5], 1, "a ClientHello: {:?}", &seen[..8]);
    for word in ["GET", "/api/view", "Bearer", read.as_str()] {
        assert!(!text.contains(word), "`{word}` crossed in clear");
    }

    // The same request in clear: no JSON, no page; the dashboard's port
    // answers where it really is, and logs the refusal.
    let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let refused = clear(port, &head(&addr)).await;
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(refused.contains(&format!("https://{addr}/")), "{refused}");
    let logged = || {
        std::fs::read_to_string(pool.dir.join("global.log"))
            .unwrap_or_default()
            .contains("clear HTTP refused")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !logged() {
        assert!(std::time::Instant::now() < deadline, "{}", pool.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nor does any other port of the daemon, found from /proc.
    let global_pid = pid_listening_on(port).expect("the global RM's process");
    let ports = listening_ports(global_pid).expect("the daemon's sockets");
    assert!(ports.contains(&port) && ports.len() >= 2, "{ports:?}");
    for p in ports {
        let out = clear(p, &head(&addr)).await;
        for leak in ["{", "machines", "EventSource"] {
            assert!(
                !out.contains(leak),
                "port {p} answered `{leak}` in clear: {out}"
            );
        }
    }
}
