//! End to end, over real daemons (issue 15 item 3): an application whose
//! `AddHosts` waits for more hosts than the pool has, and whose `AddNotify`
//! subscription is live, when the global RM is killed with SIGKILL and
//! restarted, is served as if nothing happened: it keeps its hosts, hears
//! no failure, and the pending request and the subscription go on.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use carmi_api::client::{ConnectOptions, EventStream, Incoming, connect};
use carmi_api::msg::{Event, FailureCode, Reply, SpawnTarget};
use carmi_tests::{Pool, take_event};

/// The first event that `want` picks, within 60 s (a loaded CI machine).
async fn take<T>(
    events: &mut EventStream,
    seen: &mut VecDeque<Incoming>,
    what: &str,
    want: impl FnMut(&Incoming) -> Option<T>,
) -> T {
    take_event(events, seen, Duration::from_secs(60), what, want).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pending_when_the_global_rm_is_sigkilled_are_served_after_its_restart() {
    let mut pool = Pool::start("restart-requests", 1, &[vec![], vec![]]);
    pool.wait_registered();
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, mut events) = connect(opts).await.expect("connect to m0");
    let mut seen = VecDeque::new();
    let r = carmi.define_class("any", "true");
    take(&mut events, &mut seen, "class defined", |x| match x {
        Incoming::Rm(Event::Done { request, .. }) if *request == r => Some(()),
        _ => None,
    })
    .await;
    // Two hosts in the pool: the request gets them and waits for three more.
    let add = carmi.addhosts("any", 5, 1);
    for n in 0..2 {
        take(&mut events, &mut seen, &format!("host {n}"), |x| match x {
            Incoming::Rm(Event::HostsAdded { request, .. }) if *request == add => Some(()),
            _ => None,
        })
        .await;
    }
    let notify = carmi.add_notify("any");
    carmi.flush().await;
    // The subscription is accepted silently: give it time to reach the
    // global RM (and the journal) before the kill.
    let config = carmi.config();
    take(&mut events, &mut seen, "config", |x| match x {
        Incoming::Rm(Event::Done { request, .. }) if *request == config => Some(()),
        _ => None,
    })
    .await;

    pool.restart_global();
    pool.wait_registered();

    // Both hosts are the job's again (asked until the local RM, back with
    // the global RM, answers).
    let hosts = loop {
        let probe = carmi.config();
        let answer = take(&mut events, &mut seen, "config", |x| match x {
            Incoming::Rm(Event::Done {
                request,
                reply: Reply::Hosts(h),
            }) if *request == probe => Some(Some(h.iter().map(|h| h.host).collect::<Vec<_>>())),
            Incoming::Rm(Event::Failed { request, .. }) if *request == probe => Some(None),
            _ => None,
        })
        .await;
        match answer {
            Some(h) if h.len() == 2 => break h,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    // One given back goes to the AddHosts pending since before the restart,
    // and the subscription tells of it.
    let del = carmi.delhosts(&hosts[..1]);
    take(&mut events, &mut seen, "given back", |x| match x {
        Incoming::Rm(Event::Done { request, .. }) if *request == del => Some(()),
        _ => None,
    })
    .await;
    for (request, left) in [(add, 2), (notify, 0)] {
        let (got, remaining) = take(&mut events, &mut seen, "served again", |x| match x {
            Incoming::Rm(Event::HostsAdded {
                request: r,
                hosts,
                remaining,
            }) if *r == request => Some((hosts[0].host, *remaining)),
            _ => None,
        })
        .await;
        assert_eq!((got, remaining), (hosts[0], left));
    }
    for x in &seen {
        assert!(
            !matches!(x, Incoming::Rm(Event::Failed { request, .. }) if *request == add || *request == notify),
            "{x:?}"
        );
    }
}

/// A request the local RM forwarded but the global RM never read (it was
/// stopped, then killed) fails after the restart, naming it, instead of
/// leaving the application waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_killed_global_rm_never_read_fails_naming_it() {
    let mut pool = Pool::start("restart-unread", 1, &[vec![]]);
    pool.wait_registered();
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, mut events) = connect(opts).await.expect("connect to m0");
    let mut seen = VecDeque::new();
    let config = carmi.config();
    take(&mut events, &mut seen, "attached", |x| match x {
        Incoming::Rm(Event::Done { request, .. }) if *request == config => Some(()),
        _ => None,
    })
    .await;
    pool.stop_global();
    let lost = carmi.define_class("any", "true");
    carmi.flush().await;
    // Time for the local RM to forward it into the stopped RM's socket.
    tokio::time::sleep(Duration::from_millis(500)).await;
    pool.restart_global();
    let message = take(
        &mut events,
        &mut seen,
        "the unread request answered",
        |x| match x {
            Incoming::Rm(Event::Failed { request, failure }) if *request == lost => {
                Some(failure.message.clone())
            }
            Incoming::Rm(Event::Done { request, .. }) if *request == lost => {
                Some("answered as done".to_string())
            }
            _ => None,
        },
    )
    .await;
    assert!(
        message.contains(&format!(
            "before request {lost} was answered; send it again"
        )),
        "{message}"
    );
}

/// An executable uploaded into a global RM that was stopped and then killed
/// never reached its store, though the application's connection sent it.
/// The spawn the application sends again after the restart uploads it again
/// instead of failing with "never uploaded" (the race that once ended a WoDi
/// run under a restarted global RM).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_whose_upload_died_with_the_global_rm_uploads_it_again() {
    let mut pool = Pool::start("restart-upload", 1, &[vec![]]);
    pool.wait_registered();
    let dir = carmi_tests::TempDir::new("restart-upload");
    let exe = dir.path().join("quick");
    carmi_tests::write_executable(&exe, 4096, 7).expect("write the executable");
    let opts = ConnectOptions::new(pool.locals[0].app_addr.clone(), pool.secret.clone());
    let (carmi, mut events) = connect(opts).await.expect("connect to m0");
    let mut seen = VecDeque::new();
    carmi.define_class("any", "true");
    let add = carmi.addhosts("any", 1, 1);
    take(&mut events, &mut seen, "a host", |x| match x {
        Incoming::Rm(Event::HostsAdded { request, .. }) if *request == add => Some(()),
        _ => None,
    })
    .await;

    pool.stop_global();
    let any = || SpawnTarget::Class("any".into());
    let lost = carmi.class_spawn(&exe, Vec::<String>::new(), any());
    carmi.flush().await;
    // Time for the local RM to forward the upload and the spawn into the
    // stopped RM's socket, where the kill loses them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    pool.restart_global();
    take(
        &mut events,
        &mut seen,
        "the lost spawn answered",
        |x| match x {
            Incoming::Rm(Event::Failed { request, .. }) if *request == lost => Some(()),
            _ => None,
        },
    )
    .await;
    pool.wait_registered();

    // Sent again (as WoDi does after `Unavailable`) until the job has its
    // host back: it starts, and is never refused for a missing executable.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let again = carmi.class_spawn(&exe, Vec::<String>::new(), any());
        let answer = take(&mut events, &mut seen, "the spawn answered", |x| match x {
            Incoming::Rm(Event::ProcessStarted { request, .. }) if *request == again => {
                Some(Ok(()))
            }
            Incoming::Rm(Event::Failed { request, failure }) if *request == again => {
                Some(Err(failure.clone()))
            }
            _ => None,
        })
        .await;
        match answer {
            Ok(()) => break,
            Err(failure) => {
                assert_ne!(
                    failure.code,
                    FailureCode::BadExecutable,
                    "{}",
                    failure.message
                );
                assert!(
                    Instant::now() < deadline,
                    "still refused: {}",
                    failure.message
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
