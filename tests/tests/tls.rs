//! End to end, encrypted connections (issue 21): a TCP proxy between a
//! client and a real `carmi-global` sees a TLS handshake first and never
//! the protocol's JSON, and a byte it flips after the handshake closes the
//! connection with an error instead of being acted on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake;
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::tls;
use carmi_tests::{Pool, text};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A proxy to `upstream` for one connection at a time: it keeps every byte
/// the client sent, and once `armed` flips one bit of the next chunk.
struct Proxy {
    addr: String,
    seen: Arc<Mutex<Vec<u8>>>,
    armed: Arc<AtomicBool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let armed = Arc::new(AtomicBool::new(false));
        let (s, a) = (seen.clone(), armed.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let (seen, armed) = (s.clone(), a.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        seen.lock().unwrap().extend_from_slice(&buf[..n]);
                        if armed.swap(false, Ordering::SeqCst) {
                            buf[n / 2] ^= 0x01;
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
            }
        });
        Proxy { addr, seen, armed }
    }
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
    let seen = proxy.seen.lock().unwrap().clone();
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
    proxy.armed.store(true, Ordering::SeqCst);
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
