//! The dashboard's HTTP side on a real socket, over HTTPS as it is served,
//! fed by a fake router: what the API answers, what it refuses, and that
//! the event stream pushes a change to a client that stays connected.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use carmi_api::ids::{HostId, JobId};
use carmi_api::msg::{MachineStatus, SlotStatus};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::*;

/// A dashboard on loopback answering with whatever `pool` holds; `check`
/// as a pool with tokens would; returns its address.
async fn start(
    pool: Arc<Mutex<Snapshot>>,
    check: Option<TokenCheck>,
) -> (String, watch::Sender<bool>) {
    let d = Dashboard::bind("127.0.0.1:0", check).await.expect("bind");
    serve(d, pool)
}

/// Serves `d` answering with whatever `pool` holds; returns its address.
fn serve(d: Dashboard, pool: Arc<Mutex<Snapshot>>) -> (String, watch::Sender<bool>) {
    let addr = d.local_addr().unwrap().to_string();
    let ask: Ask = Arc::new(move |q| match q {
        Query::Snapshot(tx, _) => tx.send(pool.lock().unwrap().clone()).is_ok(),
        Query::Ads(tx) => {
            let snap = pool.lock().unwrap().clone();
            let ads = (snap.machines.iter())
                .map(|m| {
                    (
                        m.name.clone(),
                        format!("[ Name = \"{}\"; Cpus = {} ]", m.name, m.name.len()).into(),
                    )
                })
                .collect();
            tx.send(ads).is_ok()
        }
    });
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(d.serve(ask, stopped));
    (addr, stop)
}

fn machine(name: &str, state: &str) -> std::sync::Arc<MachineStatus> {
    std::sync::Arc::new(MachineStatus {
        name: name.into(),
        attributes: vec![].into(),
        slots: vec![SlotStatus {
            host: HostId(1),
            state: state.to_string().into(),
            job: Some(JobId(1)),
        }],
    })
}

/// Sends `head` to the dashboard at `addr` over TLS, as a browser would;
/// everything it answers.
async fn exchange(addr: &str, head: &str) -> String {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut s = carmi_api::tls::connect(tcp).await.expect("a TLS handshake");
    s.writer.write_all(head.as_bytes()).await.unwrap();
    s.writer.flush().await.unwrap();
    let mut out = Vec::new();
    // What arrived stays in `out` even if the server closes without TLS's
    // close_notify (an error to rustls, once the answer is whole).
    let _ = s.reader.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code and body of an HTTP answer.
fn parse(out: &str) -> (u16, String) {
    let code = (out.split(' ').nth(1).and_then(|c| c.parse().ok()))
        .unwrap_or_else(|| panic!("not an HTTP answer: {out:?}"));
    (
        code,
        out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string(),
    )
}

/// One request; the status code and body.
async fn request(addr: &str, method: &str, path: &str, header: &str) -> (u16, String) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{header}Content-Length: 0\r\n\r\n"
    );
    parse(&exchange(addr, &head).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_the_pool_and_refuses_writes() {
    let pool = Arc::new(Mutex::new(Snapshot {
        machines: vec![machine("a", "claimed")],
        jobs: vec![],
        waiting: vec![],
        counters: Default::default(),
        light: None,
    }));
    let (addr, _stop) = start(pool, None).await;
    let (code, body) = request(&addr, "GET", "/api/machines", "").await;
    assert_eq!(code, 200, "{body}");
    let machines: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(machines[0]["name"], "a");
    assert_eq!(machines[0]["state"], "lent");
    for (method, path) in [("POST", "/api/jobs"), ("DELETE", "/"), ("PUT", "/nowhere")] {
        let (code, body) = request(&addr, method, path, "").await;
        assert_eq!(code, 405, "{method} {path}: {body}");
        assert!(body.contains("read-only"), "{body}");
    }
    let (code, page) = request(&addr, "GET", "/", "").await;
    assert_eq!(code, 200);
    assert!(
        page.contains("EventSource"),
        "the page listens to the event stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classad_constraint_keeps_the_machines_whose_ad_satisfies_it() {
    let pool = Arc::new(Mutex::new(Snapshot {
        machines: vec![machine("a", "claimed"), machine("bb", "idle")],
        jobs: vec![],
        waiting: vec![],
        counters: Default::default(),
        light: None,
    }));
    let (addr, _stop) = start(pool, None).await;
    let names = async |path: &'static str| {
        let (code, body) = request(&addr, "GET", path, "").await;
        assert_eq!(code, 200, "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        (v.as_array().unwrap().iter())
            .map(|m| m["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names("/api/machines?constraint=Cpus%20%3E%201").await,
        ["bb"]
    );
    assert_eq!(
        names("/api/machines?constraint=Cpus%20%3E%3D%201").await,
        ["a", "bb"]
    );
    assert_eq!(names("/api/machines?constraint=").await, ["a", "bb"]);
    let (code, body) = request(&addr, "GET", "/api/machines?constraint=Cpus%20%3E", "").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("not a ClassAd expression"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_a_request_needs_a_good_one_in_a_header_cookie_or_query() {
    let check: TokenCheck = Arc::new(|t| match t {
        "good" => Ok(()),
        other => Err(format!("token `{other}` refused")),
    });
    let (addr, _stop) = start(Arc::new(Mutex::new(Snapshot::default())), Some(check)).await;
    let cases = [
        ("", 401),
        ("Authorization: Bearer bad\r\n", 403),
        ("Authorization: Bearer good\r\n", 200),
        ("Cookie: theme=dark; carmi_token=good\r\n", 200),
        ("Cookie: carmi_token=bad\r\n", 403),
    ];
    for (header, want) in cases {
        let (code, body) = request(&addr, "GET", "/api/jobs", header).await;
        assert_eq!(code, want, "{header:?}: {body}");
    }
    // The API never takes a token from its address (histories, logs and
    // Referer headers keep addresses).
    let (code, _) = request(&addr, "GET", "/api/jobs?token=good", "").await;
    assert_eq!(code, 401);
    // The page's address with the token sets the cookie and drops the
    // token, in an answer no cache keeps and no Referer repeats.
    let head = "GET /?token=good HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let raw = exchange(&addr, head).await;
    assert!(raw.starts_with("HTTP/1.1 303"), "{raw}");
    let lower = raw.to_lowercase();
    assert!(lower.contains("cache-control: no-store\r\n"), "{raw}");
    assert!(lower.contains("referrer-policy: no-referrer\r\n"), "{raw}");
    assert!(
        raw.to_lowercase()
            .contains("set-cookie: carmi_token=good; path=/; httponly; samesite=strict; secure"),
        "{raw}"
    );
    assert!(raw.to_lowercase().contains("location: /\r\n"), "{raw}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_pushes_a_change_to_a_connected_client() {
    let pool = Arc::new(Mutex::new(Snapshot {
        machines: vec![machine("a", "claimed")],
        jobs: vec![],
        waiting: vec![],
        counters: Default::default(),
        light: None,
    }));
    let (addr, _stop) = start(pool.clone(), None).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let tcp = TcpStream::connect(&addr).await.unwrap();
        let mut s = carmi_api::tls::connect(tcp).await.unwrap();
        s.writer
            .write_all(b"GET /api/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        s.writer.flush().await.unwrap();
        let mut lines = BufReader::new(s.reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(data) = line.strip_prefix("data: ")
                && tx.send(data.to_string()).is_err()
            {
                return;
            }
        }
    });
    let next = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        let data = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        let view: serde_json::Value = serde_json::from_str(&data.unwrap().unwrap()).unwrap();
        view["machines"][0]["state"].as_str().unwrap().to_string()
    };
    assert_eq!(next(&mut rx).await, "lent");
    Arc::make_mut(&mut pool.lock().unwrap().machines[0]).slots[0].state = "suspended".into();
    // Curve samples may come first; the change arrives on the same stream.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if next(&mut rx).await == "suspended" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change never came"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_tokens_event_stream_ends_within_seconds() {
    let revoked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = revoked.clone();
    let check: TokenCheck = Arc::new(move |t| {
        if t == "good" && !flag.load(std::sync::atomic::Ordering::SeqCst) {
            Ok(())
        } else {
            Err(format!("token `{t}` refused"))
        }
    });
    let pool = Arc::new(Mutex::new(Snapshot {
        machines: vec![machine("a", "claimed")],
        jobs: vec![],
        waiting: vec![],
        counters: Default::default(),
        light: None,
    }));
    let (addr, _stop) = start(pool, Some(check)).await;
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let mut s = carmi_api::tls::connect(tcp).await.unwrap();
    let head = "GET /api/events HTTP/1.1\r\nHost: x\r\nCookie: carmi_token=good\r\nConnection: close\r\n\r\n";
    s.writer.write_all(head.as_bytes()).await.unwrap();
    s.writer.flush().await.unwrap();
    let mut lines = BufReader::new(s.reader).lines();
    let first_view = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("data: ") {
                return;
            }
        }
        panic!("the stream ended before its first view");
    };
    tokio::time::timeout(Duration::from_secs(30), first_view)
        .await
        .expect("a view");
    revoked.store(true, std::sync::atomic::Ordering::SeqCst);
    // Ended: the chunked body closes (read to its end) within seconds.
    let ended = async { while let Ok(Some(_)) = lines.next_line().await {} };
    tokio::time::timeout(Duration::from_secs(10), ended)
        .await
        .expect("the stream of a revoked token went on");
}

/// One `GET path` naming `host` in its Host header; the status code and body.
async fn get_as(addr: &str, host: &str, path: &str) -> (u16, String) {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    parse(&exchange(addr, &head).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_dashboard_answers_only_requests_addressed_to_loopback() {
    let (addr, _stop) = start(Arc::new(Mutex::new(Snapshot::default())), None).await;
    let port = addr.rsplit_once(':').unwrap().1.to_string();
    for (host, want) in [
        (format!("127.0.0.1:{port}"), 200),
        (format!("localhost:{port}"), 200),
        (format!("[::1]:{port}"), 200),
        ("LOCALHOST".to_string(), 200),
        (format!("rebound.example:{port}"), 403),
        ("rebound.example".to_string(), 403),
        (format!("192.0.2.1:{port}"), 403),
        (String::new(), 403),
    ] {
        let (code, body) = get_as(&addr, &host, "/api/jobs").await;
        assert_eq!(code, want, "Host `{host}`: {body}");
        if want == 403 {
            assert!(body.contains("DNS rebinding"), "{body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_api_serves_a_job_s_hosts_over_time() {
    let mut held = machine("a", "claimed");
    Arc::make_mut(&mut held).slots[0].job = Some(JobId(1));
    let pool = Arc::new(Mutex::new(Snapshot {
        machines: vec![held],
        jobs: vec![],
        waiting: vec![],
        counters: Default::default(),
        light: None,
    }));
    let (addr, _stop) = start(pool.clone(), None).await;
    let get = async |path: &'static str| request(&addr, "GET", path, "").await;
    let (code, body) = get("/api/timeline?job=1").await;
    assert_eq!(code, 200, "{body}");
    let t: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(t["job"], 1);
    assert_eq!(t["hosts"][0]["machine"], "a");
    assert_eq!(t["hosts"][0]["spans"][0]["kind"], "held");
    assert!(t["hosts"][0]["spans"][0]["end"].is_null(), "{t}");
    assert!(t["now"].as_u64().unwrap() >= t["since"].as_u64().unwrap());
    // The owner is back: the next answer (taken after the request) shows it.
    Arc::make_mut(&mut pool.lock().unwrap().machines[0]).slots[0].state = "suspended".into();
    let (_, body) = get("/api/timeline?job=1").await;
    let t: serde_json::Value = serde_json::from_str(&body).unwrap();
    let spans = t["hosts"][0]["spans"].as_array().unwrap();
    assert_eq!(spans.last().unwrap()["kind"], "suspended", "{t}");
    assert_eq!(get("/api/timeline?job=99").await.0, 404);
    assert_eq!(get("/api/timeline").await.0, 400);
}

/// Sends `head` in clear to `addr`; everything answered.
async fn exchange_clear(addr: &str, head: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_speaks_https_and_answers_clear_http_with_no_page() {
    let check: TokenCheck = Arc::new(|t| match t {
        "good" => Ok(()),
        other => Err(format!("token `{other}` refused")),
    });
    let d = Dashboard::bind("127.0.0.1:0", Some(check.clone()))
        .await
        .unwrap();
    let addr = d.local_addr().unwrap().to_string();
    assert_eq!(d.url().unwrap(), format!("https://{addr}/"));
    let fingerprint = d.fingerprint().unwrap().to_string();
    assert_eq!(fingerprint.len(), 32 * 3 - 1, "{fingerprint}");
    let pool = Arc::new(Mutex::new(Snapshot {
        machines: vec![machine("a", "claimed")],
        jobs: vec![],
        waiting: vec![],
        counters: Default::default(),
        light: None,
    }));
    let ask: Ask = Arc::new(move |q| match q {
        Query::Snapshot(tx, _) => tx.send(pool.lock().unwrap().clone()).is_ok(),
        Query::Ads(tx) => tx.send(vec![]).is_ok(),
    });
    let (_stop, stopped) = watch::channel(false);
    tokio::spawn(d.serve(ask, stopped));
    // Over TLS, with the token: the pool.
    let (code, body) = request(
        &addr,
        "GET",
        "/api/machines",
        "Authorization: Bearer good\r\n",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"a\""), "{body}");
    // In clear with the same token, every way a token travels: no page, no
    // JSON, only where the dashboard really is.
    for head in [
        "GET /api/machines HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nConnection: close\r\n\r\n",
        "GET /api/machines?token=good HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nCookie: carmi_token=good\r\nConnection: close\r\n\r\n",
    ] {
        let raw = exchange_clear(&addr, head).await;
        assert!(raw.starts_with("HTTP/1.1 400"), "{raw}");
        assert!(raw.contains(&format!("https://{addr}/")), "{raw}");
        for leak in ["{", "\"a\"", "EventSource", "carmi_token"] {
            assert!(!raw.contains(leak), "`{leak}` answered in clear: {raw}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_http_is_served_only_when_asked_and_only_on_loopback() {
    let check: TokenCheck = Arc::new(|_| Ok(()));
    let refused = Dashboard::bind_plain("0.0.0.0:0", Some(check)).await;
    let Err(why) = refused else {
        panic!("clear HTTP bound a non-loopback address")
    };
    assert!(
        why.contains("--http-plain") && why.contains("loopback"),
        "{why}"
    );
    let d = Dashboard::bind_plain("127.0.0.1:0", None).await.unwrap();
    let addr = d.local_addr().unwrap().to_string();
    assert_eq!(d.url().unwrap(), format!("http://{addr}/"));
    assert_eq!(d.fingerprint(), None);
    let ask: Ask = Arc::new(move |q| match q {
        Query::Snapshot(tx, _) => tx.send(Snapshot::default()).is_ok(),
        Query::Ads(tx) => tx.send(vec![]).is_ok(),
    });
    let (_stop, stopped) = watch::channel(false);
    tokio::spawn(d.serve(ask, stopped));
    let head = format!("GET /api/jobs HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let (code, body) = parse(&exchange_clear(&addr, &head).await);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body, "[]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_silent_in_their_tls_handshake_hold_up_nobody() {
    let (addr, _stop) = start(Arc::new(Mutex::new(Snapshot::default())), None).await;
    // Connected, never a byte: each waits out its handshake on its own task.
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    let answer = tokio::time::timeout(
        incoming::HANDSHAKE_TIMEOUT / 2,
        request(&addr, "GET", "/api/jobs", ""),
    )
    .await;
    let (code, body) = answer.expect("a browser waited behind silent connections");
    assert_eq!(code, 200, "{body}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_is_bounded_the_oldest_give_way() {
    let (addr, _stop) = start(Arc::new(Mutex::new(Snapshot::default())), None).await;
    let flood = incoming::HANDSHAKE_LIMITS.max_handshaking_per_addr + 20;
    let mut silent = Vec::new();
    for _ in 0..flood {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    // The oldest was dropped for the newer ones long before its handshake
    // timeout: its socket reads to its end.
    let mut byte = [0u8; 1];
    let closed =
        tokio::time::timeout(incoming::HANDSHAKE_TIMEOUT / 2, silent[0].read(&mut byte)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "the oldest silent connection was kept: {closed:?}"
    );
    // A browser of the same address still gets in.
    let (code, body) = request(&addr, "GET", "/api/jobs", "").await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_read_token_unless_made_public() {
    let check: TokenCheck = Arc::new(|t| match t {
        "good" => Ok(()),
        _ => Err("unknown token".into()),
    });
    let pool = Arc::new(Mutex::new(Snapshot {
        machines: vec![machine("a", "claimed")],
        counters: crate::metrics::CoreCounters { denied_requests: 3 },
        ..Snapshot::default()
    }));
    let (addr, _stop) = start(pool.clone(), Some(check.clone())).await;
    let (code, _) = request(&addr, "GET", "/metrics", "").await;
    assert_eq!(code, 401);
    let (code, body) = request(&addr, "GET", "/metrics", "Authorization: Bearer good\r\n").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("carmi_slots{state=\"claimed\"} 1\n"),
        "{body}"
    );
    assert!(
        body.contains("carmi_machines{state=\"lent\"} 1\n"),
        "{body}"
    );
    assert!(
        body.contains("carmi_token_denials_total{at=\"request\"} 3\n"),
        "{body}"
    );

    let d = Dashboard::bind("127.0.0.1:0", Some(check)).await.unwrap();
    let (addr, _stop) = serve(d.with_public_metrics(true), pool);
    let (code, body) = request(&addr, "GET", "/metrics", "").await;
    assert_eq!(code, 200, "public metrics need no token: {body}");
    // Only /metrics: the pool's names and jobs still need a token.
    let (code, _) = request(&addr, "GET", "/api/view", "").await;
    assert_eq!(code, 401);
}
