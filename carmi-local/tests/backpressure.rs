//! Peers that stop reading: the local RM's queues towards the global RM and
//! towards each application are bounded, so such a peer is disconnected
//! (and, for the global RM, reconnected) instead of growing the daemon's
//! memory, and everyone else keeps being served.

use carmi_api::exe::sha256_hex;
use carmi_api::frame::write_frame;
use carmi_api::ids::RequestId;
use carmi_api::msg::{
    Event, ExecutableRef, Failure, FailureCode, FromGlobal, FromLocal, Reply, ToGlobal, ToLocal,
};
use carmi_local::daemon::Daemon;

mod common;

use common::*;

/// Frames big enough that a few dozen fill any socket buffer on the way.
const BIG: usize = 256 << 10;
const FRAMES: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_rm_that_stops_reading_is_dropped_and_what_it_missed_is_kept() {
    init_logs();
    let dir = TempDir::new("global-stall");
    let global = FakeGlobal::new().await;
    let mut s = settings(&global, dir.path(), "bp-g");
    s.global_queue = 4;
    s.global_stall = std::time::Duration::from_millis(300);
    let daemon = Daemon::start(s).await.unwrap();
    let mut stalled = global.accept("bp-g").await;
    stalled.register(&[1, 2]).await;
    let (_r, mut w, _conn) = attach_app(daemon.app_addr(), &mut stalled, 3, 4).await;

    // From here on `stalled` reads nothing (but stays open). Each upload is
    // forwarded to the global RM with its bytes.
    let bytes = vec![7u8; BIG];
    let executable = ExecutableRef {
        name: "big".into(),
        sha256: sha256_hex(&bytes),
        size: BIG as u64,
    };
    let upload = ToLocal::UploadExecutable {
        executable: executable.clone(),
    };
    for _ in 0..FRAMES {
        write_frame(&mut w, &upload, &bytes).await.unwrap();
    }

    // The local RM gives up on the stalled connection and connects again...
    let mut fresh = global.accept("bp-g").await;
    fresh.register(&[1, 2]).await;
    // ...where the uploads it could not write come first, bytes intact.
    let (msg, payload) = fresh.recv().await;
    assert_eq!(
        msg,
        ToGlobal::Upload { executable },
        "kept for the new link"
    );
    assert_eq!(payload.len(), BIG);
    // The rest does not fit the socket, and `fresh` reads no more: the
    // shutdown must not wait for the write (it once did, 1 run in 20-30).
    tokio::time::timeout(std::time::Duration::from_secs(20), daemon.shutdown())
        .await
        .expect("the shutdown ends while the global RM reads nothing");
    drop((stalled, fresh));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_that_stops_reading_is_disconnected_and_others_are_served() {
    init_logs();
    let dir = TempDir::new("app-stall");
    let global = FakeGlobal::new().await;
    let mut s = settings(&global, dir.path(), "bp-a");
    // The queue holds more than the sockets on the way, so that it fills
    // only once the application's socket is full and the write to it is stuck.
    s.app_queue = 16;
    let daemon = Daemon::start(s).await.unwrap();
    let mut g = global.accept("bp-a").await;
    g.register(&[1, 2]).await;
    let (mut stalled, _w1, c1) = attach_app(daemon.app_addr(), &mut g, 3, 4).await;
    let (mut reading, _w2, c2) = attach_app(daemon.app_addr(), &mut g, 3, 5).await;

    // Far more for `stalled` than its queue and its socket hold; it reads none.
    const FRAMES: usize = 96;
    let event = Event::Failed {
        request: RequestId(1),
        failure: Failure {
            code: FailureCode::Invalid,
            message: "x".repeat(BIG),
        },
    };
    for _ in 0..FRAMES {
        let deliver = FromGlobal::Deliver {
            conn: c1,
            event: event.clone(),
        };
        g.send(deliver, &[]).await;
    }
    let (msg, _) = g.recv().await;
    assert_eq!(
        msg,
        ToGlobal::AppDetach { conn: c1 },
        "the stalled one is let go"
    );

    // The other application is still served.
    let done = Event::Done {
        request: RequestId(7),
        reply: Reply::Ok,
    };
    let deliver = FromGlobal::Deliver {
        conn: c2,
        event: done.clone(),
    };
    g.send(deliver, &[]).await;
    assert_eq!(app_recv(&mut reading).await, FromLocal::Event(done));

    // The stalled one finds its connection closed after what was in flight.
    let mut received = 0;
    loop {
        match tokio::time::timeout(WAIT, stalled.read::<FromLocal>()).await {
            Ok(Ok(Some(_))) => received += 1,
            Ok(Ok(None) | Err(_)) => break,
            Err(_) => panic!("the stalled application's connection is still open"),
        }
    }
    assert!(
        received < FRAMES,
        "{received} of {FRAMES} events were kept for it"
    );
    daemon.shutdown().await;
}
