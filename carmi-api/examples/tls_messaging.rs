//! Frames over loopback in clear and over TLS 1.3 (`carmi_api::tls`), side
//! by side in one run: round trips of a small frame, and the throughput of
//! 1 MiB payloads. What encryption would cost the messaging layer.
//!
//! `cargo run -p carmi-api --example tls_messaging [ROUND_TRIPS] [MIB]`

use std::time::{Duration, Instant};

use carmi_api::conn::{Conn, ConnReader, ConnWriter};
use carmi_api::tls::{self, Acceptor, Stream};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

async fn pair(secure: bool) -> (Stream, Stream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = Acceptor::generate().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        // A plain client sends nothing before the test starts: the
        // acceptor's peek at the first byte would wait for it.
        if secure {
            acceptor.accept(tcp, false).await.unwrap()
        } else {
            Stream::plain(tcp)
        }
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let client = if secure {
        tls::connect(tcp).await.unwrap()
    } else {
        Stream::plain(tcp)
    };
    (client, server.await.unwrap())
}

/// Mean round trip of a small frame echoed back, over `n` trips.
async fn round_trip(secure: bool, n: u32) -> Duration {
    let (client, server) = pair(secure).await;
    let echo = tokio::spawn(async move {
        let mut conn: Conn<Value, Value> = Conn::new(server.reader, server.writer);
        while let Ok(Some((msg, payload))) = conn.recv().await {
            conn.send(&msg, &payload).await.unwrap();
            conn.flush().await.unwrap();
        }
    });
    let (mut r, mut w) = Conn::<Value, Value>::new(client.reader, client.writer).split();
    let start = Instant::now();
    for i in 0..n {
        w.send(&serde_json::json!({ "Ping": i }), &[0u8; 64])
            .await
            .unwrap();
        w.flush().await.unwrap();
        r.recv().await.unwrap().unwrap();
    }
    let took = start.elapsed() / n;
    // A TLS write half does not end the stream when dropped (its read half
    // shares it): shut it down so that the echo sees the end.
    w.shutdown().await.unwrap();
    drop(w);
    let _ = echo.await;
    took
}

/// MB/s (10^6 bytes) of `mib` 1 MiB payloads sent one way.
async fn throughput(secure: bool, mib: usize) -> f64 {
    let (client, server) = pair(secure).await;
    let sink = tokio::spawn(async move {
        let mut r: ConnReader<Value> = ConnReader::with_max(server.reader, 2 << 20);
        let mut bytes = 0;
        while let Ok(Some((_, payload))) = r.recv().await {
            bytes += payload.len();
        }
        bytes
    });
    let mut w: ConnWriter<Value> = ConnWriter::new(client.writer);
    let payload = vec![7u8; 1 << 20];
    let start = Instant::now();
    for i in 0..mib {
        w.send(&serde_json::json!({ "Chunk": i }), &payload)
            .await
            .unwrap();
    }
    w.shutdown().await.unwrap();
    drop(w);
    let bytes = sink.await.unwrap();
    assert_eq!(bytes, mib << 20);
    bytes as f64 / start.elapsed().as_secs_f64() / 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let trips: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    println!("| transport | round trip (64 B frame) | throughput (1 MiB frames) |");
    println!("|---|---|---|");
    for secure in [false, true] {
        let rt = round_trip(secure, trips).await;
        let mbs = throughput(secure, mib).await;
        let name = if secure { "TLS 1.3" } else { "plain TCP" };
        println!(
            "| {name} | {:.1} µs | {mbs:.0} MB/s |",
            rt.as_secs_f64() * 1e6
        );
    }
}
