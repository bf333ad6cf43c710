//! The core's deadlines carried out by the real daemon: the kill grace ends
//! in SIGKILL only for a process that outlived it, and heartbeats follow the
//! configured fallback when the global RM names no period.

use std::time::Duration;

use carmi_api::exe::sha256_hex;
use carmi_api::ids::{HostId, JobId, ProcessId};
use carmi_api::msg::{ExecutableRef, ExitStatus, FromGlobal, ToGlobal};
use carmi_local::daemon::Daemon;

mod common;

use common::*;

fn script(text: &str) -> (ExecutableRef, Vec<u8>) {
    let bytes = text.as_bytes().to_vec();
    let r = ExecutableRef {
        name: "job.sh".into(),
        sha256: sha256_hex(&bytes),
        size: bytes.len() as u64,
    };
    (r, bytes)
}

/// Starts `text` as process `process` on host 10 and waits until it runs.
async fn start(g: &mut GlobalConn, process: u64, text: &str) {
    let (exe, bytes) = script(text);
    g.send(
        FromGlobal::Spawn {
            process: ProcessId(process),
            job: JobId(1),
            host: HostId(10),
            executable: exe.clone(),
            args: vec![],
            output: Default::default(),
            requests: Default::default(),
        },
        &[],
    )
    .await;
    let (msg, _) = g.recv().await;
    if matches!(msg, ToGlobal::Fetch { .. }) {
        g.send(FromGlobal::Executable { executable: exe }, &bytes)
            .await;
        let (msg, _) = g.recv().await;
        assert_eq!(
            msg,
            ToGlobal::Started {
                process: ProcessId(process),
                result: Ok(())
            }
        );
    } else {
        assert!(
            matches!(msg, ToGlobal::Started { result: Ok(()), .. }),
            "{msg:?}"
        );
    }
}

/// Kills `process` and returns the status its exit is reported with.
async fn kill(g: &mut GlobalConn, process: u64) -> ExitStatus {
    // Time for the shell to set its trap before the signal.
    tokio::time::sleep(Duration::from_millis(300)).await;
    g.send(
        FromGlobal::Kill {
            process: ProcessId(process),
        },
        &[],
    )
    .await;
    match g.recv().await.0 {
        ToGlobal::Exited {
            process: p, status, ..
        } if p == ProcessId(process) => status,
        other => panic!("expected the exit of {process}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_grace_ends_in_sigkill_only_for_a_process_that_outlives_it() {
    init_logs();
    let dir = TempDir::new("grace");
    let global = FakeGlobal::new().await;
    let daemon = Daemon::start(settings(&global, dir.path(), "it-grace"))
        .await
        .unwrap();
    let mut g = global.accept("it-grace").await;
    g.register(&[10, 11]).await;

    // Ignores SIGTERM (its `sleep`s too, as an ignored signal stays ignored
    // across exec): only the SIGKILL at the grace's end stops it.
    start(
        &mut g,
        1,
        "#!/bin/sh\ntrap '' TERM\nwhile :; do sleep 0.05; done\n",
    )
    .await;
    assert_eq!(kill(&mut g, 1).await, ExitStatus::Signal(9));

    // Acts on SIGTERM at once: dies of it, never SIGKILLed.
    start(&mut g, 2, "#!/bin/sh\nwhile :; do sleep 0.05; done\n").await;
    assert_eq!(kill(&mut g, 2).await, ExitStatus::Signal(15));
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_use_the_fallback_when_the_global_rm_names_no_period() {
    init_logs();
    let dir = TempDir::new("fallback");
    let global = FakeGlobal::new().await;
    let mut s = settings(&global, dir.path(), "it-fallback");
    s.heartbeat_fallback = Duration::from_millis(100);
    let daemon = Daemon::start(s).await.unwrap();
    let mut g = global.accept("it-fallback").await;
    let (msg, _) = g.recv().await;
    assert!(matches!(msg, ToGlobal::Advertise { .. }), "{msg:?}");
    g.send(
        FromGlobal::Registered {
            hosts: vec![HostId(10), HostId(11)],
            heartbeat_ms: 0,
        },
        &[],
    )
    .await;
    // Three heartbeats at the 100 ms fallback take 0.3 s; the 4 s bound is
    // generous for a loaded machine and still tells them from the 5 s
    // default (or none at all), which would send none by then.
    let beats = async {
        let mut beats = 0;
        while beats < 3 {
            if matches!(g.recv_any().await.0, ToGlobal::Heartbeat { .. }) {
                beats += 1;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(4), beats)
        .await
        .expect("three heartbeats at the fallback period");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_sigkills_a_process_that_ignores_sigterm_and_reports_it() {
    init_logs();
    let dir = TempDir::new("stop-grace");
    let global = FakeGlobal::new().await;
    let daemon = Daemon::start(settings(&global, dir.path(), "it-stop"))
        .await
        .unwrap();
    let mut g = global.accept("it-stop").await;
    g.register(&[10, 11]).await;
    start(
        &mut g,
        1,
        "#!/bin/sh\ntrap '' TERM\necho $$ > pid\nwhile :; do sleep 0.05; done\n",
    )
    .await;
    // Time for the shell to set its trap before the signal.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sandbox = daemon.work_dir().join("sandbox").join("1");
    let pid: i32 = std::fs::read_to_string(sandbox.join("pid"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .expect("the job wrote its pid in its sandbox");
    daemon.shutdown().await;
    match g.recv().await.0 {
        ToGlobal::Exited {
            process, status, ..
        } => assert_eq!((process, status), (ProcessId(1), ExitStatus::Signal(9))),
        other => panic!("expected the exit of 1, got {other:?}"),
    }
    assert!(
        !carmi_local::spawn::alive(pid),
        "process {pid} outlived the daemon"
    );
}
