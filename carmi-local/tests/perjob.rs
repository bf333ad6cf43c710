//! One job cannot take every application connection of its local RM (issue
//! 38, "bounded by design"): connections naming a job past
//! `max_connections_per_job` are refused in the handshake with the reason,
//! while other jobs' applications, new jobs and the owner's control
//! connection are still admitted, and a job's closed connection gives its
//! place back.

use carmi_api::handshake::{self, HandshakeError, Secret};
use carmi_api::ids::{JobId, ProcessId};
use carmi_api::msg::{FromGlobal, FromLocal, Role, ToGlobal};
use carmi_local::daemon::Daemon;

mod common;

use common::*;

/// A connection proving `secret` as an application of `job` (`None`: a new job).
async fn join(
    addr: std::net::SocketAddr,
    secret: &Secret,
    job: Option<JobId>,
) -> Result<
    (
        carmi_api::frame::FrameReader<carmi_api::tls::Reader>,
        carmi_api::tls::Writer,
    ),
    HandshakeError,
> {
    let role = Role::Application {
        job,
        process: None,
        endpoint: "127.0.0.1:4711".into(),
    };
    let (mut r, mut w, binding) = open_app(addr).await;
    handshake::client_bound(&mut r, &mut w, secret, &role, &binding).await?;
    Ok((r, w))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_connection_cap_is_refused_and_others_are_served() {
    init_logs();
    let dir = TempDir::new("perjob");
    let global = FakeGlobal::new().await;
    let mut s = settings(&global, dir.path(), "pj");
    s.max_connections_per_job = 3;
    let daemon = Daemon::start(s).await.unwrap();
    let mut g = global.accept("pj").await;
    g.register(&[1, 2]).await;
    // Job 5 starts by hand and is given its credential.
    let pool = Secret::new(SECRET).unwrap();
    let (mut r0, _w0) = join(daemon.app_addr(), &pool, None).await.unwrap();
    let (msg, _) = g.recv().await;
    let ToGlobal::AppAttach { conn, .. } = msg else {
        panic!("expected AppAttach, got {msg:?}");
    };
    let (job, process) = (JobId(5), ProcessId(9));
    g.send(FromGlobal::Attached { conn, job, process }, &[])
        .await;
    let cred = match app_recv_any(&mut r0).await {
        FromLocal::Credential { credential, .. } => Secret::new(credential.as_bytes()).unwrap(),
        other => panic!("expected the credential, got {other:?}"),
    };
    // Its processes open connections with it, up to the cap.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            join(daemon.app_addr(), &cred, Some(job))
                .await
                .expect("under the cap"),
        );
    }
    match join(daemon.app_addr(), &cred, Some(job)).await {
        Err(HandshakeError::Refused(why)) => {
            assert!(why.contains("max_connections_per_job"), "{why}")
        }
        other => panic!("the fourth was not refused: {:?}", other.map(|_| ())),
    }
    // Everyone else is still served: a new job, and the owner's control connection.
    join(daemon.app_addr(), &pool, None)
        .await
        .expect("a new job");
    let control =
        carmi_api::control::OwnerLink::connect(&daemon.app_addr().to_string(), &pool).await;
    assert!(control.is_ok(), "control connection: {:?}", control.err());
    // A connection closed gives its place back.
    drop(held.pop());
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match join(daemon.app_addr(), &cred, Some(job)).await {
            Ok(_) => break,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "never admitted again: {e}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    daemon.shutdown().await;
}
