use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};

use super::*;
use crate::frame::encode_header;
use crate::msg::{FromGlobal, PeerMessage, ToGlobal};

type Half<Out, In> = Conn<Out, In, ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>;

/// A client-side and a server-side connection of the admin kind over one pipe.
fn pair() -> (Half<ToGlobal, FromGlobal>, Half<FromGlobal, ToGlobal>) {
    let (a, b) = tokio::io::duplex(1 << 16);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    (Conn::new(ar, aw), Conn::new(br, bw))
}

#[tokio::test]
async fn typed_messages_and_payloads_cross_both_ways() {
    let (mut client, mut server) = pair();
    client.send(&ToGlobal::Status, b"up").await.unwrap();
    let (msg, payload) = server.recv().await.unwrap().unwrap();
    assert!(matches!(msg, ToGlobal::Status), "{msg:?}");
    assert_eq!(&payload[..], b"up");
    server
        .send(&FromGlobal::Pool(Vec::new()), &[])
        .await
        .unwrap();
    let (answer, payload) = client.recv().await.unwrap().unwrap();
    assert!(
        matches!(answer, FromGlobal::Pool(ref m) if m.is_empty()),
        "{answer:?}"
    );
    assert!(payload.is_empty());
    drop(client);
    assert!(
        server.recv().await.unwrap().is_none(),
        "a clean close is None"
    );
}

#[tokio::test]
async fn the_wire_bytes_are_those_of_write_frame() {
    let (a, mut b) = tokio::io::duplex(1 << 16);
    let (ar, aw) = tokio::io::split(a);
    let mut conn: Half<PeerMessage, PeerMessage> = Conn::new(ar, aw);
    conn.send(&PeerMessage { tag: 9 }, b"xyz").await.unwrap();
    let mut expected = encode_header(&PeerMessage { tag: 9 }, 3);
    expected.extend_from_slice(b"xyz");
    let mut got = vec![0; expected.len()];
    b.read_exact(&mut got).await.unwrap();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn a_large_payload_is_kept_verbatim() {
    let (mut client, mut server) = pair();
    let payload: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let sent = payload.clone();
    let writer = tokio::spawn(async move {
        client.send(&ToGlobal::Status, &sent).await.unwrap();
        client
    });
    let (_, got) = server.recv().await.unwrap().unwrap();
    assert_eq!(&got[..], &payload[..]);
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn an_oversize_frame_is_refused_naming_size_and_limit() {
    let (a, b) = tokio::io::duplex(1 << 16);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let mut client: Half<PeerMessage, PeerMessage> = Conn::new(ar, aw);
    let mut server: Half<PeerMessage, PeerMessage> = Conn::with_max(br, bw, 1000);
    client
        .send(&PeerMessage { tag: 1 }, &[0; 2000])
        .await
        .unwrap();
    let err = server.recv().await.unwrap_err();
    let len = 4 + encode_header(&PeerMessage { tag: 1 }, 0).len() - 8 + 2000;
    assert!(
        matches!(err, FrameError::TooLarge { len: l, max: 1000 } if l == len),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&len.to_string()) && text.contains("1000"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stalled_frame_times_out() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    let (br, bw) = tokio::io::split(b);
    let mut server: Half<PeerMessage, PeerMessage> = Conn::new(br, bw);
    server.set_deadline(Some(FrameDeadline {
        base: Duration::from_secs(10),
        min_rate: 1 << 20,
    }));
    // 100 bytes announced, 2 sent, then nothing.
    a.write_all(&100u32.to_be_bytes()).await.unwrap();
    a.write_all(b"ab").await.unwrap();
    let err = server.recv().await.unwrap_err();
    assert!(
        matches!(
            err,
            FrameError::Stalled {
                len: 100,
                have: 6,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn split_halves_work_concurrently() {
    let (client, server) = pair();
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    // The server echoes every request as a Pool answer while the client is
    // still sending: reads and writes of one connection in separate tasks.
    let echo = tokio::spawn(async move {
        let mut n = 0;
        while let Some((ToGlobal::Status, payload)) = sr.recv().await.unwrap() {
            sw.send(&FromGlobal::Pool(Vec::new()), &payload)
                .await
                .unwrap();
            n += 1;
        }
        n
    });
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some((_, payload)) = cr.recv().await.unwrap() {
            got.push(payload[0]);
            if got.len() == 200 {
                break;
            }
        }
        got
    });
    for i in 0..200u8 {
        cw.send(&ToGlobal::Status, &[i; 1000]).await.unwrap();
    }
    let got = reader.await.unwrap();
    assert_eq!(got, (0..200u8).collect::<Vec<_>>());
    cw.shutdown().await.unwrap();
    assert_eq!(echo.await.unwrap(), 200);
}

#[tokio::test]
async fn a_retyped_reader_keeps_the_bytes_that_followed_the_first_message() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    // A first message, and right behind it in the same write one of another kind.
    let mut bytes = encode_header(&PeerMessage { tag: 3 }, 0);
    bytes.extend_from_slice(&encode_header(&ToGlobal::Status, 2));
    bytes.extend_from_slice(b"ok");
    a.write_all(&bytes).await.unwrap();
    let mut first: ConnReader<PeerMessage, DuplexStream> = ConnReader::with_max(b, 1 << 10);
    assert_eq!(first.recv().await.unwrap().unwrap().0.tag, 3);
    let mut next: ConnReader<ToGlobal, DuplexStream> = first.retype();
    let (msg, payload) = next.recv().await.unwrap().unwrap();
    assert!(matches!(msg, ToGlobal::Status), "{msg:?}");
    assert_eq!(&payload[..], b"ok");
}

#[tokio::test]
async fn a_raw_frame_keeps_its_header_bytes_and_decodes_only_as_the_connections_kind() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    let mut bytes = encode_header(&ToGlobal::Status, 3);
    bytes.extend_from_slice(b"abc");
    // Then a header that is JSON but no ToGlobal.
    bytes.extend_from_slice(&encode_header(&PeerMessage { tag: 5 }, 0));
    a.write_all(&bytes).await.unwrap();
    drop(a);
    let mut r: ConnReader<ToGlobal, DuplexStream> = ConnReader::with_max(b, 1 << 10);
    let frame = r.recv_raw().await.unwrap().unwrap();
    assert_eq!(&frame.header[..], &encode_header(&ToGlobal::Status, 0)[8..]);
    assert_eq!(&frame.payload[..], b"abc");
    assert!(matches!(frame.decode().unwrap(), ToGlobal::Status));
    let other = r.recv_raw().await.unwrap().unwrap();
    assert_eq!(&other.header[..], br#"{"tag":5}"#);
    assert!(other.decode().is_err(), "a peer message is no ToGlobal");
    assert!(
        r.recv_raw().await.unwrap().is_none(),
        "a clean close is None"
    );
}
