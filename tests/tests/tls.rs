//! End to end, encrypted connections (issue 21): a TCP proxy between a
//! client and a real `carmi-global` or `carmi-local` sees a TLS handshake
//! first and never the protocol's JSON, and a byte it flips after the
//! handshake closes the connection with an error instead of being acted on.
//! A job's processes take TLS only on their direct-message listeners, so
//! messages and forwarded output that arrive there came over TLS.

use std::time::Duration;

use carmi_api::client::{ConnectOptions, Incoming, connect};
use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake;
use carmi_api::ids::RequestId;
use carmi_api::msg::{Event, FromGlobal, FromLocal, Request, Role, SpawnTarget, ToGlobal, ToLocal};
use carmi_api::tls;
use carmi_tests::{Inbox, Pool, PoolOptions, Proxy, text};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Patient heartbeats: a loaded test machine must not lose its machine.
fn patient() -> PoolOptions {
    PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    }
}

/// Waits until `file` (a daemon's log) contains `what`.
async fn log_says(file: &std::path::Path, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(file).unwrap_or_default();
        if log.contains(what) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no `{what}` in {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A handshake in clear to `addr`: what became of it.
async fn clear_handshake(addr: &str, secret: &handshake::Secret) -> Result<(), String> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (r, mut w) = tcp.into_split();
    let mut r = FrameReader::new(r);
    let role = Role::Application {
        job: None,
        process: None,
        endpoint: "127.0.0.1:9".into(),
    };
    handshake::client(&mut r, &mut w, secret, &role)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_connection_starts_with_tls_and_carries_no_clear_json() {
    let pool = Pool::start("tls-first", 1, &[vec![]]);
    pool.wait_registered();
    let proxy = Proxy::start(pool.global_addr.clone()).await;
    let out = pool
        .carmi()
        .env("CARMI_POOL", &proxy.addr)
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"m0\""), "the answer came back");
    let (seen, _) = proxy.seen();
    // A TLS record of type handshake (22), protocol version 3.x.
    assert_eq!(seen[0], tls::TLS_HANDSHAKE_BYTE, "{:?}", &seen[..8]);
    assert_eq!(seen[1], 3, "{:?}", &seen[..8]);
    let clear = String::from_utf8_lossy(&seen);
    for word in ["Hello", "Proof", "Status", "carmi1."] {
        assert!(!clear.contains(word), "`{word}` crossed in clear");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_flipped_after_the_handshake_closes_the_connection() {
    let pool = Pool::start("tls-flip", 1, &[vec![]]);
    pool.wait_registered();
    let proxy = Proxy::start(pool.global_addr.clone()).await;
    let tcp = TcpStream::connect(&proxy.addr).await.unwrap();
    let tls::Stream {
        reader,
        mut writer,
        binding,
    } = tls::connect(tcp).await.unwrap();
    let mut reader = FrameReader::new(reader);
    handshake::client_bound(
        &mut reader,
        &mut writer,
        &pool.secret,
        &Role::Admin,
        &binding,
    )
    .await
    .expect("the handshake through the proxy succeeds");
    proxy.arm(true);
    write_frame(&mut writer, &ToGlobal::Status, &[])
        .await
        .unwrap();
    writer.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), reader.read::<FromGlobal>()).await;
    match got {
        Ok(Ok(None)) | Ok(Err(_)) => {}
        Ok(Ok(Some((m, _)))) => panic!("an altered request was acted on: {m:?}"),
        Err(_) => panic!("the connection stayed open after an altered record"),
    }
    // The global RM says why it closed it (the client may see the close first).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(pool.dir.join("global.log")).unwrap();
        if log.contains("closing connection: bad frame") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The daemon serves on.
    let out = pool.carmi().arg("status").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// An application's connection to its local RM is TLS from its first byte
/// (seen by a proxy), and the local RM refuses a handshake in clear; so does
/// a job process's direct-message listener, which nonetheless receives its
/// peer's messages and its spawned process's output (forwarded by the local
/// RM): both came over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_rm_and_a_jobs_processes_speak_tls_only() {
    let pool = Pool::start_with("tls-local", 2, &[vec![]], patient());
    pool.wait_registered();
    let proxy = Proxy::start(pool.locals[0].app_addr.clone()).await;
    let opts = ConnectOptions::new(proxy.addr.clone(), pool.secret.clone());
    let (a, events) = connect(opts).await.expect("attach through the proxy");
    let mut inbox = Inbox::new(events);
    inbox.done(a.define_class("any", "true")).await;
    let (seen, clear) = proxy.seen();
    assert_eq!(seen[0], tls::TLS_HANDSHAKE_BYTE, "{:?}", &seen[..8]);
    assert_eq!(seen[1], 3, "{:?}", &seen[..8]);
    for word in ["Hello", "Proof", "Application", "DefineClass"] {
        assert!(!clear.contains(word), "`{word}` crossed in clear");
    }

    let refused = clear_handshake(&pool.locals[0].app_addr, &pool.secret).await;
    assert!(refused.is_err(), "the local RM took a handshake in clear");
    log_says(
        &pool.dir.join("m0.log"),
        "this daemon accepts TLS connections only",
    )
    .await;
    let refused = clear_handshake(a.endpoint(), &pool.secret).await;
    assert!(refused.is_err(), "a process took a handshake in clear");

    let add = a.addhosts("any", 1, 1);
    let host = inbox
        .take("a host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                hosts.first().map(|h| h.host)
            }
            _ => None,
        })
        .await;
    let echo = std::path::PathBuf::from(env!("CARGO_BIN_EXE_carmi-echo"));
    let spawn = a.class_spawn(&echo, Vec::<String>::new(), SpawnTarget::Host(host));
    let echo = inbox
        .take("the echo to start", |x| match x {
            Incoming::Rm(Event::ProcessStarted {
                request, process, ..
            }) if *request == spawn => Some(*process),
            _ => None,
        })
        .await;
    a.send(echo, 5, bytes::Bytes::from_static(b"over TLS"));
    let back = inbox
        .take("the echo's answer", |x| match x {
            Incoming::Message { from, tag: 6, data } if *from == echo => Some(data.clone()),
            _ => None,
        })
        .await;
    assert_eq!(&back[..], b"over TLS");

    let shell = std::path::PathBuf::from("/bin/sh");
    let args = ["-c", "echo forwarded-over-tls"];
    let spawn = a.class_spawn(&shell, args, SpawnTarget::Host(host));
    let out = inbox
        .take("the forwarded output", |x| match x {
            Incoming::Output { request, data, .. } if *request == spawn => Some(data.clone()),
            _ => None,
        })
        .await;
    assert_eq!(&out[..], b"forwarded-over-tls\n");
    a_flipped_direct_message_is_dropped(&pool, &a, &mut inbox, echo).await;
    a.send(echo, 0, bytes::Bytes::new());
    a.flush().await;
}

/// The job's credential, as the local RM wrote it into a sandbox of the job.
fn job_credential(dir: &std::path::Path) -> Option<handshake::Secret> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.file_name() == Some(std::ffi::OsStr::new(carmi_api::jobcred::FILE_NAME)) {
            return handshake::Secret::from_file(&path).ok();
        }
        if path.is_dir()
            && !path.is_symlink()
            && let Some(found) = job_credential(&path)
        {
            return Some(found);
        }
    }
    None
}

/// Through a proxy to process `a`'s listener, as its peer `from` with the
/// job's credential: a direct message whose bytes are altered after the
/// handshake is never delivered, and the same message unaltered is.
async fn a_flipped_direct_message_is_dropped(
    pool: &Pool,
    a: &carmi_api::client::Carmi,
    inbox: &mut Inbox,
    from: carmi_api::ids::ProcessId,
) {
    let secret = job_credential(&pool.dir).expect("the echo's sandbox holds the job credential");
    let proxy = Proxy::start(a.endpoint().to_string()).await;
    for altered in [true, false] {
        let tcp = TcpStream::connect(&proxy.addr).await.unwrap();
        let s = tls::connect(tcp).await.unwrap();
        let (mut reader, mut writer) = (FrameReader::new(s.reader), s.writer);
        let role = Role::Peer { from, job: a.job() };
        handshake::client_bound(&mut reader, &mut writer, &secret, &role, &s.binding)
            .await
            .expect("a peer's handshake through the proxy");
        proxy.arm(altered);
        let tag = carmi_api::msg::PeerMessage { tag: 77 };
        write_frame(&mut writer, &tag, b"payload").await.unwrap();
        writer.flush().await.unwrap();
        let arrived = inbox
            .try_take_within(Duration::from_secs(3), "the direct message", |x| match x {
                Incoming::Message { tag: 77, data, .. } => Some(data.clone()),
                _ => None,
            })
            .await;
        if altered {
            assert!(
                arrived.is_err(),
                "an altered message was delivered: {arrived:?}"
            );
            // The process closed that connection.
            let end = tokio::time::timeout(Duration::from_secs(10), reader.read::<FromLocal>());
            assert!(matches!(end.await, Ok(Ok(None)) | Ok(Err(_))));
        } else {
            assert_eq!(&arrived.expect("the unaltered message")[..], b"payload");
        }
    }
}

/// A byte flipped on an application's connection to its local RM, after
/// the handshake, closes that connection; the altered request is not
/// answered, and the local RM serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_flipped_on_a_local_rm_connection_closes_it() {
    let pool = Pool::start_with("tls-local-flip", 1, &[vec![]], patient());
    pool.wait_registered();
    let proxy = Proxy::start(pool.locals[0].app_addr.clone()).await;
    let tcp = TcpStream::connect(&proxy.addr).await.unwrap();
    let tls::Stream {
        reader,
        mut writer,
        binding,
    } = tls::connect(tcp).await.unwrap();
    let mut reader = FrameReader::new(reader);
    let role = Role::Application {
        job: None,
        process: None,
        endpoint: "127.0.0.1:9".into(),
    };
    handshake::client_bound(&mut reader, &mut writer, &pool.secret, &role, &binding)
        .await
        .expect("the handshake through the proxy succeeds");
    loop {
        match reader.read::<FromLocal>().await.expect("a frame") {
            Some((FromLocal::Attached { .. }, _)) => break,
            Some(_) => {}
            None => panic!("the local RM closed before attaching"),
        }
    }
    proxy.arm(true);
    let request = ToLocal::Request {
        id: RequestId(1),
        body: Request::Config,
    };
    write_frame(&mut writer, &request, &[]).await.unwrap();
    writer.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), reader.read::<FromLocal>()).await;
    match got {
        Ok(Ok(None)) | Ok(Err(_)) => {}
        Ok(Ok(Some((m, _)))) => panic!("an altered request was acted on: {m:?}"),
        Err(_) => panic!("the connection stayed open after an altered record"),
    }
    log_says(&pool.dir.join("m0.log"), "bad frame from an application").await;
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, events) = connect(opts).await.expect("the local RM serves on");
    Inbox::new(events).done(carmi.config()).await;
}

/// A process that asks for plain peer connections sends in clear (a peer
/// that takes TLS only refuses it, a peer that asked the same answers) and
/// accepts a peer's handshake in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_may_ask_for_plain_peer_connections() {
    let pool = Pool::start_with("tls-plain", 2, &[vec![]], patient());
    pool.wait_registered();
    let mut opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    opts.plain_peers = true;
    let (a, events) = connect(opts).await.expect("attach");
    let mut inbox = Inbox::new(events);
    inbox.done(a.define_class("any", "true")).await;
    let add = a.addhosts("any", 1, 1);
    let host = inbox
        .take("a host", |x| match x {
            Incoming::Rm(Event::HostsAdded { request, hosts, .. }) if *request == add => {
                hosts.first().map(|h| h.host)
            }
            _ => None,
        })
        .await;
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_carmi-echo"));
    let mut echoes = Vec::new();
    for args in [vec!["plain"], vec![]] {
        let spawn = a.class_spawn(&exe, args, SpawnTarget::Host(host));
        let echo = inbox
            .take("an echo to start", |x| match x {
                Incoming::Rm(Event::ProcessStarted {
                    request, process, ..
                }) if *request == spawn => Some(*process),
                _ => None,
            })
            .await;
        echoes.push(echo);
    }
    let (plain, tls_only) = (echoes[0], echoes[1]);
    a.send(plain, 5, bytes::Bytes::from_static(b"in clear"));
    let back = inbox
        .take("the plain echo's answer", |x| match x {
            Incoming::Message { from, tag: 6, data } if *from == plain => Some(data.clone()),
            _ => None,
        })
        .await;
    assert_eq!(&back[..], b"in clear");
    a.send(tls_only, 5, bytes::Bytes::from_static(b"refused"));
    let reason = inbox
        .take("the TLS-only echo's refusal", |x| match x {
            Incoming::SendFailed { to, reason, .. } if *to == tls_only => Some(reason.clone()),
            _ => None,
        })
        .await;
    assert!(!reason.is_empty());
    let secret = job_credential(&pool.dir).expect("a sandbox holds the job credential");
    let tcp = TcpStream::connect(a.endpoint()).await.unwrap();
    let (r, mut w) = tcp.into_split();
    let mut r = FrameReader::new(r);
    let role = Role::Peer {
        from: plain,
        job: a.job(),
    };
    handshake::client(&mut r, &mut w, &secret, &role)
        .await
        .expect("a plain process takes a peer in clear");
    for echo in echoes {
        a.send(echo, 0, bytes::Bytes::new());
    }
    a.flush().await;
}
