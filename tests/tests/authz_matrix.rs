//! End to end, over a real `carmi-global` and `carmi-local` (issue 21),
//! what `authz.rs`'s matrix does not reach: a refusal closes nothing else
//! (neither the refused connection nor anyone's machine or job), a daemon
//! token cannot take a live machine's name, and revoking a machine's daemon
//! token closes every connection it opened (its link and its staging
//! connection) within 10 s and keeps it out.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::{self, HandshakeError, Secret};
use carmi_api::ids::JobId;
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::tls;
use carmi_api::token::Power;
use carmi_tests::{Pool, PoolOptions, text};
use tokio::io::AsyncWriteExt;

const MASTER: &str = "#!/bin/sh\nwhile [ ! -e \"$STOP\" ]; do sleep 0.05; done\n";

type Open = (FrameReader<tls::Reader>, tls::Writer);

/// Patient heartbeats: a loaded test machine must not lose its machine.
fn patient() -> PoolOptions {
    PoolOptions {
        heartbeat_ms: 1000,
        missed_heartbeats: 30,
        ..PoolOptions::default()
    }
}

/// A token file for `identity` with `power` (daemons bound to `machine`).
fn token(pool: &Pool, identity: &str, power: Power, machine: Option<&str>) -> PathBuf {
    let path = pool.dir.join(format!("{identity}-{power}.token"));
    if !path.exists() {
        pool.token_file(&path, identity, power, machine, 3600);
    }
    path
}

/// The pool secret presenting the token in `file`.
fn secret_with(pool: &Pool, file: &Path) -> Secret {
    let text = carmi_api::token::read_token_file(file).unwrap();
    Secret::from_file(&pool.secret_path)
        .unwrap()
        .with_token(Some(text))
}

/// Opens a TLS connection to the global RM and handshakes as `role` with
/// `secret`: the open connection, or the refusal's text.
async fn open_as(pool: &Pool, secret: &Secret, role: &Role) -> Result<Open, String> {
    let stream = carmi_api::net::dial(&pool.global_addr, Duration::from_secs(5))
        .await
        .unwrap();
    let s = tls::connect(stream).await.unwrap();
    let (mut r, mut w) = (FrameReader::new(s.reader), s.writer);
    match handshake::client_bound(&mut r, &mut w, secret, role, &s.binding).await {
        Ok(()) => Ok((r, w)),
        Err(HandshakeError::Refused(reason)) => Err(reason),
        Err(e) => panic!("handshake failed otherwise: {e}"),
    }
}

/// Sends `msg` on `open` and returns the first answer (within 10 s).
async fn ask(open: &mut Open, msg: &ToGlobal) -> FromGlobal {
    write_frame(&mut open.1, msg, &[]).await.unwrap();
    open.1.flush().await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), open.0.read::<FromGlobal>()).await {
        Ok(Ok(Some((m, _)))) => m,
        other => panic!("no answer to {msg:?}: {other:?}"),
    }
}

/// The names of the machines the pool lists, asked on `open`.
async fn machines(open: &mut Open) -> Vec<String> {
    match ask(open, &ToGlobal::Status).await {
        FromGlobal::Pool(ms) => ms.into_iter().map(|m| m.name.clone()).collect(),
        other => panic!("status answered {other:?}"),
    }
}

/// Submits, with the token in `file`, a job that waits forever (more
/// machines than the pool has); its id.
fn submit(pool: &Pool, file: &Path) -> JobId {
    std::fs::write(pool.dir.join("master.sh"), MASTER).unwrap();
    let sub = pool.dir.join("wait.sub");
    let body = format!(
        "executable = master.sh\nenvironment = STOP={}\nclass_name = w\nmachine_count = 99\nqueue\n",
        pool.dir.join("stop").display()
    );
    std::fs::write(&sub, body).unwrap();
    let mut carmi = pool.carmi();
    carmi.env("CARMI_TOKEN", file).env("CARMI_MACHINE", "m0");
    JobId(pool.submit_file(carmi, &sub))
}

/// Waits until `file` (a daemon's log) says `what`, at most `limit`.
fn log_says(file: &Path, what: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let log = std::fs::read_to_string(file).unwrap_or_default();
        if log.contains(what) {
            return;
        }
        assert!(Instant::now() < deadline, "no `{what}` in {log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the global RM closes `open`, at most `limit`.
async fn closed_within(open: &mut Open, limit: Duration, what: &str) {
    let start = Instant::now();
    match tokio::time::timeout(limit, open.0.read::<FromGlobal>()).await {
        Ok(Ok(None)) | Ok(Err(_)) => {}
        Ok(Ok(Some(m))) => panic!("{what}: got {m:?} instead of the close"),
        Err(_) => panic!("{what}: still open after {:?}", start.elapsed()),
    }
}

/// A request refused on an open connection is answered with the reason
/// (identity, action, missing power) and the same connection serves on; a
/// daemon token bound to another machine cannot register under a live
/// machine's name, and that machine keeps its link and its slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_closes_nothing_else() {
    let pool = Pool::start_with("authz-nothing-else", 1, &[vec![]], patient());
    pool.wait_registered();
    let bobs_job = submit(&pool, &token(&pool, "bob", Power::Submit, None));

    let alice = secret_with(&pool, &token(&pool, "alice", Power::Submit, None));
    let mut open = open_as(&pool, &alice, &Role::Admin).await.expect("alice");
    for (msg, action) in [
        (
            ToGlobal::RemoveJob {
                job: bobs_job,
                cluster: false,
            },
            "rm job",
        ),
        (
            ToGlobal::Hold {
                job: bobs_job,
                cluster: false,
                reason: None,
                user: "alice".into(),
            },
            "hold job",
        ),
    ] {
        let why = match ask(&mut open, &msg).await {
            FromGlobal::AdminFailed(f) => f.message,
            other => panic!("alice's {action} of bob's job answered {other:?}"),
        };
        for needle in ["`alice` (power submit)", action, "owned by `bob`", "admin"] {
            assert!(why.contains(needle), "the refusal lacks `{needle}`: {why}");
        }
    }
    // The same connection serves on, and bob's job is untouched.
    assert_eq!(machines(&mut open).await, ["m0"]);
    match ask(&mut open, &ToGlobal::Queue).await {
        FromGlobal::Queue(jobs) => {
            let bob = jobs.iter().find(|j| j.job == bobs_job).expect("bob's job");
            assert_eq!(bob.owner, "bob");
        }
        other => panic!("q answered {other:?}"),
    }

    // m9's daemon token presented as m0's local RM: refused at the
    // handshake, naming who, what and why.
    let m9 = secret_with(&pool, &token(&pool, "m9", Power::Daemon, Some("m9")));
    let role = Role::Local { name: "m0".into() };
    let why = open_as(&pool, &m9, &role)
        .await
        .err()
        .expect("m9's token may not register m0");
    for needle in ["`m9`", "advertise machine `m0`", "bound to machine `m9`"] {
        assert!(why.contains(needle), "the refusal lacks `{needle}`: {why}");
    }
    // m9's token as m9's local RM, with an ad whose Name says m0 (it would
    // draw the jobs that ask for m0 by name): refused, its link closed.
    let as_m9 = Role::Local { name: "m9".into() };
    let mut link = open_as(&pool, &m9, &as_m9).await.expect("m9 as itself");
    let ad = ToGlobal::Advertise {
        ad: "[ Name = \"m0\"; Arch = \"X86_64\" ]".into(),
        slots: 1,
        running: vec![],
    };
    let why = match ask(&mut link, &ad).await {
        FromGlobal::AdminFailed(f) => f.message,
        other => panic!("m9's ad naming m0 answered {other:?}"),
    };
    assert!(
        why.contains("`m0`") && why.contains("machine `m9`'s"),
        "{why}"
    );
    closed_within(&mut link, Duration::from_secs(10), "m9's lying link").await;
    // m0's own link was not touched: it stays listed, and its local RM never
    // lost the global RM.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(machines(&mut open).await, ["m0"]);
    let m0_log = std::fs::read_to_string(pool.dir.join("m0.log")).unwrap();
    assert!(
        !m0_log.contains("closed the connection") && !m0_log.contains("reconnecting"),
        "{m0_log}"
    );
    let global = std::fs::read_to_string(pool.dir.join("global.log")).unwrap();
    assert!(
        global.contains("refused"),
        "the refusal was logged: {global}"
    );
    std::fs::write(pool.dir.join("stop"), "").unwrap();
}

/// Revoking a machine's daemon token closes, within 10 s, its local RM's
/// link and an idle staging connection it opened, and the local RM cannot
/// come back with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_daemon_token_loses_its_link_and_its_staging_connection() {
    let pool = Pool::start_with("authz-revoke-daemon", 1, &[vec![]], patient());
    pool.wait_registered();
    let m0 = secret_with(&pool, &pool.dir.join("m0.token"));
    let stager = Role::Stager { name: "m0".into() };
    let mut staging = open_as(&pool, &m0, &stager).await.expect("m0 stages");

    let admin = secret_with(&pool, &pool.admin_token);
    let mut open = open_as(&pool, &admin, &Role::Admin).await.expect("admin");
    // The test kit signed m0's token itself: its id is in the token.
    let m0_text = carmi_api::token::read_token_file(&pool.dir.join("m0.token")).unwrap();
    let claims = pool
        .key
        .public()
        .verify(&m0_text, carmi_api::token::now_unix(), &Default::default())
        .expect("m0's token verifies");
    let out = pool
        .carmi()
        .args(["token", "revoke", &claims.id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let revoked = Instant::now();

    closed_within(
        &mut staging,
        Duration::from_secs(10),
        "a revoked token's staging connection",
    )
    .await;
    let why = format!("token {} of `m0` was revoked", claims.id);
    log_says(&pool.dir.join("global.log"), &why, Duration::from_secs(10));
    // The link: the local RM saw it close, and its next handshake is
    // refused as revoked.
    log_says(
        &pool.dir.join("m0.log"),
        "the global RM closed the connection",
        Duration::from_secs(10).saturating_sub(revoked.elapsed()),
    );
    log_says(&pool.dir.join("m0.log"), "revoked", Duration::from_secs(30));
    // The machine stays out (it leaves the list once declared lost).
    let staged = open_as(&pool, &m0, &stager).await;
    assert!(
        staged.as_ref().is_err_and(|e| e.contains("revoked")),
        "a revoked token opened staging: {:?}",
        staged.map(|_| ())
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while machines(&mut open).await.contains(&"m0".to_string()) {
        assert!(
            Instant::now() < deadline,
            "m0 stays listed\n{}",
            pool.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
