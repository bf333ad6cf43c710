use std::time::Duration;

use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::frame::FrameReader;

/// A connected pair in clear: the sending socket's writing half and a frame reader on the far end.
async fn socket_pair() -> (OwnedWriteHalf, FrameReader<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let near = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (far, _) = listener.accept().await.unwrap();
    let (_, w) = near.into_split();
    (w, FrameReader::new(far))
}

/// Body of sender `t`'s message `i`: its own bytes, of sizes from empty to
/// larger than a loopback socket takes at once.
fn body(t: u32, i: u32) -> Bytes {
    let len = match i % 100 {
        0 => 3 << 20,
        n if n % 10 == 0 => 200_000,
        n => (n as usize * 37) % 3000,
    };
    (0..len).map(|k| (k as u32 ^ t ^ i) as u8).collect()
}

#[tokio::test]
async fn with_nothing_queued_a_message_is_written_by_the_sender_itself() {
    let (w, mut far) = socket_pair().await;
    let (link, mut rx) = Link::new();
    link.open_direct(Arc::new(w));
    for tag in 0..3 {
        let sent = link.offer(Outgoing::message(tag, Bytes::from_static(b"hi")));
        assert_eq!(sent.ok(), Some(Offered::Written), "message {tag}");
    }
    let (ack, acked) = oneshot::channel();
    assert_eq!(
        link.offer(Outgoing::Flush(ack)).ok(),
        Some(Offered::Written)
    );
    acked
        .await
        .expect("a flush with nothing queued is acknowledged at once");
    assert!(rx.try_recv().is_err(), "nothing went to the writer task");
    for tag in 0..3 {
        let (m, body) = far.read::<PeerMessage>().await.unwrap().unwrap();
        assert_eq!((m.tag, &body[..]), (tag, &b"hi"[..]));
    }
}

#[tokio::test]
async fn behind_a_queued_message_everything_queues_until_the_task_has_written_it() {
    let (w, mut far) = socket_pair().await;
    let (link, mut rx) = Link::new();
    // Not connected yet: the first message waits for the task.
    assert_eq!(
        link.offer(Outgoing::message(1, Bytes::from_static(b"first")))
            .ok(),
        Some(Offered::Queued)
    );
    let w = Arc::new(w);
    link.open_direct(w.clone());
    // Connected, but the first is not written: the second must not overtake it.
    assert_eq!(
        link.offer(Outgoing::message(2, Bytes::from_static(b"second")))
            .ok(),
        Some(Offered::Queued)
    );
    let (_stop_tx, mut stop) = tokio::sync::watch::channel(());
    let pump = {
        let link = link.clone();
        tokio::spawn(async move { pump_plain(&link, &w, &mut rx, &mut stop).await })
    };
    for tag in 1..=2 {
        let (m, _) = far.read::<PeerMessage>().await.unwrap().unwrap();
        assert_eq!(m.tag, tag);
    }
    // Once the task has written both, `send` writes directly again.
    let written = tokio::time::timeout(Duration::from_secs(30), async {
        while lock(&link.state).queued > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    written.await.expect("the task counts what it wrote");
    assert_eq!(
        link.offer(Outgoing::message(3, Bytes::new())).ok(),
        Some(Offered::Written)
    );
    assert_eq!(far.read::<PeerMessage>().await.unwrap().unwrap().0.tag, 3);
    pump.abort();
}

/// Four threads send at once, each its own sequence of small and large
/// messages, through one link whose writer task runs: every message
/// arrives whole and each sender's in the order sent, whether `send` wrote
/// it directly, in part, or the task did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_from_several_threads_arrive_whole_and_in_each_senders_order() {
    const SENDERS: u32 = 4;
    const EACH: u32 = 300;
    let (w, mut far) = socket_pair().await;
    let (link, mut rx) = Link::new();
    let w = Arc::new(w);
    link.open_direct(w.clone());
    let (_stop_tx, mut stop) = tokio::sync::watch::channel(());
    let pump = {
        let link = link.clone();
        tokio::spawn(async move { pump_plain(&link, &w, &mut rx, &mut stop).await })
    };
    let senders: Vec<_> = (0..SENDERS)
        .map(|t| {
            let link = link.clone();
            std::thread::spawn(move || {
                let mut direct = 0;
                for i in 0..EACH {
                    let item = Outgoing::message(t * 1_000_000 + i, body(t, i));
                    if link.offer(item).ok() == Some(Offered::Written) {
                        direct += 1;
                    }
                }
                direct
            })
        })
        .collect();
    let mut next = [0u32; SENDERS as usize];
    for _ in 0..SENDERS * EACH {
        let read = tokio::time::timeout(Duration::from_secs(60), far.read::<PeerMessage>());
        let (m, data) = read.await.expect("in time").unwrap().unwrap();
        let (t, i) = (m.tag / 1_000_000, m.tag % 1_000_000);
        assert_eq!(i, next[t as usize], "sender {t}'s messages out of order");
        assert!(
            data == body(t, i),
            "sender {t}'s message {i} arrived altered"
        );
        next[t as usize] += 1;
    }
    let direct: u32 = senders.into_iter().map(|s| s.join().unwrap()).sum();
    // Small messages with nothing ahead of them are written by their sender
    // (that the others queue is the test above).
    assert!(direct > 0, "no message took the direct path");
    pump.abort();
}
