use std::io::Write;

use super::*;

#[tokio::test(start_paused = true)]
async fn the_limiter_spaces_sends_at_the_link_rate() {
    let l = RateLimiter::new(Some(1.0));
    let t0 = Instant::now();
    l.take(500_000).await;
    l.take(500_000).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    let free = RateLimiter::new(None);
    let t1 = Instant::now();
    free.take(1 << 30).await;
    assert_eq!(t1.elapsed(), Duration::ZERO);
}

/// Reads the serve side's replies until `want` payload bytes arrived
/// (or End / Missing); returns the bytes and the last reply.
async fn read_until<R: AsyncRead + Unpin>(
    r: &mut ConnReader<StageReply, R>,
    got: &mut Vec<u8>,
    want: usize,
) -> StageReply {
    loop {
        let (reply, bytes) = tokio::time::timeout(Duration::from_secs(5), r.recv())
            .await
            .expect("the server sends within 5 s")
            .expect("a good frame")
            .expect("the connection stays open");
        got.extend_from_slice(&bytes);
        if !matches!(reply, StageReply::Chunk) || got.len() >= want {
            return reply;
        }
    }
}

/// Serves `arrival` (a copy still arriving, with `file` as its partial
/// file) over an in-memory connection and asks for it: the client's reader,
/// past `Begin`, and the serving task.
async fn serve_growing(
    file: std::fs::File,
    exe: &ExecutableRef,
    arrival: &Arrival,
) -> (
    ConnReader<StageReply, tokio::io::ReadHalf<tokio::io::DuplexStream>>,
    tokio::task::JoinHandle<Result<u64, String>>,
) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (sr, sw) = tokio::io::split(server);
    let (cr, cw) = tokio::io::split(client);
    let (served, executable) = (arrival.clone(), exe.clone());
    let task = tokio::spawn(async move {
        let mut reader = ConnReader::with_max(sr, crate::frame::DEFAULT_MAX_FRAME);
        let mut sw = ConnWriter::new(sw);
        let lookup = async move |_| Served::Growing {
            file,
            executable,
            arrival: served,
        };
        serve(&mut reader, &mut sw, lookup, &RateLimiter::new(None)).await
    });
    let get = StageRequest::Get {
        sha256: exe.sha256.clone(),
    };
    let mut cw: ConnWriter<StageRequest, _> = ConnWriter::new(cw);
    cw.send(&get, &[]).await.unwrap();
    let mut r = ConnReader::with_max(cr, crate::frame::DEFAULT_MAX_FRAME);
    assert!(matches!(
        read_until(&mut r, &mut Vec::new(), 0).await,
        StageReply::Begin { .. }
    ));
    (r, task)
}

#[tokio::test]
async fn a_copy_still_arriving_is_passed_on_as_it_comes_and_its_failure_too() {
    let exe = ExecutableRef {
        name: "x".into(),
        sha256: "a".repeat(64),
        size: 100_000,
    };
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for fail in [false, true] {
        let arrival = Arrival::new();
        arrival.push(Bytes::copy_from_slice(&data[..30_000]));
        let (mut r, task) = serve_growing(tempfile::tempfile().unwrap(), &exe, &arrival).await;
        let mut got = Vec::new();
        // The first 30 000 bytes come before the rest has arrived.
        read_until(&mut r, &mut got, 30_000).await;
        assert_eq!(got, data[..30_000]);
        if fail {
            arrival.fail();
            let last = read_until(&mut r, &mut got, usize::MAX).await;
            assert!(matches!(last, StageReply::Missing { .. }), "{last:?}");
            assert!(task.await.unwrap().is_err());
        } else {
            arrival.push(Bytes::copy_from_slice(&data[30_000..]));
            arrival.done();
            let last = read_until(&mut r, &mut got, usize::MAX).await;
            assert_eq!(last, StageReply::End);
            assert_eq!(got, data);
            assert_eq!(task.await.unwrap(), Ok(100_000));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_late_sender_makes_up_a_millisecond_but_an_idle_link_banks_no_more() {
    let l = RateLimiter::new(Some(1.0));
    let t0 = Instant::now();
    l.take(500_000).await;
    // Late by 1.5 ms in all (the timer's own lateness and some work).
    let late = t0 + Duration::from_micros(501_500) - Instant::now();
    tokio::time::advance(late).await;
    l.take(500_000).await;
    // Made up: the second half-megabyte is due exactly 1 s after the start.
    assert!(t0.elapsed() >= Duration::from_secs(1));
    assert!(t0.elapsed() <= Duration::from_millis(1001));
    tokio::time::advance(Duration::from_millis(500)).await;
    let idle_end = Instant::now();
    l.take(500_000).await;
    // Idle for 0.5 s: only LINK_CREDIT of it counts.
    let took = idle_end.elapsed();
    assert!(took >= Duration::from_millis(500) - LINK_CREDIT, "{took:?}");
    assert!(took <= Duration::from_millis(501) - LINK_CREDIT, "{took:?}");
}

#[tokio::test]
async fn a_relay_keeps_a_bounded_window_and_a_lagging_reader_gets_the_rest_from_disk() {
    use std::io::{Seek, SeekFrom};
    let size = 5usize << 20;
    let data: Vec<u8> = (0..size as u32).map(|i| (i * 13 % 251) as u8).collect();
    let exe = ExecutableRef {
        name: "x".into(),
        sha256: "b".repeat(64),
        size: size as u64,
    };
    // The writer keeps up: every chunk is on disk once pushed.
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&data).unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    let arrival = Arrival::new();
    let mut n = 0;
    for c in data.chunks(STAGE_CHUNK) {
        arrival.push(Bytes::copy_from_slice(c));
        n += c.len() as u64;
        arrival.wrote(n);
    }
    assert!(
        arrival.held() <= ARRIVAL_WINDOW + STAGE_CHUNK as u64,
        "{} bytes held",
        arrival.held()
    );
    arrival.done();
    let (mut r, task) = serve_growing(file, &exe, &arrival).await;
    let mut got = Vec::new();
    assert_eq!(
        read_until(&mut r, &mut got, usize::MAX).await,
        StageReply::End
    );
    assert!(got == data, "the copy passed on differs");
    assert_eq!(task.await.unwrap(), Ok(size as u64));
}

#[test]
fn chunks_shrink_on_slow_links_within_bounds() {
    assert_eq!(RateLimiter::new(None).chunk_size(), STAGE_CHUNK);
    // 2 MB/s carries 16 000 bytes in 8 ms.
    assert_eq!(RateLimiter::new(Some(2.0)).chunk_size(), 16_000);
    assert_eq!(RateLimiter::new(Some(0.1)).chunk_size(), MIN_STAGE_CHUNK);
    assert_eq!(RateLimiter::new(Some(1000.0)).chunk_size(), STAGE_CHUNK);
}
