//! The daemon against an in-process fake global RM that speaks the real
//! protocol over TCP on 127.0.0.1, with real application connections and
//! real processes.

use std::time::Duration;

use carmi_api::exe::sha256_hex;
use carmi_api::frame::write_frame;
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_api::msg::{
    Event, ExecutableRef, ExitStatus, FromGlobal, FromLocal, Reply, Request, Role, ToGlobal,
    ToLocal,
};
use carmi_local::daemon::Daemon;
use carmi_local::spawn::alive;
use classad::ClassAd;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

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

fn spawn_msg(process: u64, host: u64, executable: &ExecutableRef) -> FromGlobal {
    FromGlobal::Spawn {
        process: ProcessId(process),
        job: JobId(1),
        host: HostId(host),
        executable: executable.clone(),
        args: vec!["first arg".into()],
        output: Default::default(),
        requests: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertise_register_fetch_spawn_and_exit() {
    init_logs();
    let dir = TempDir::new("spawn");
    let global = FakeGlobal::new().await;
    let daemon = Daemon::start(settings(&global, dir.path(), "it-m1"))
        .await
        .unwrap();
    let mut g = global.accept("it-m1").await;
    let (ad, running) = g.register(&[10, 11]).await;
    assert!(running.is_empty());
    assert_eq!(ad.eval_attr("Name").as_str(), Some("it-m1"));
    assert_eq!(ad.eval_attr("OpSys").as_str(), Some("LINUX"));
    assert!(ad.eval_attr("Memory").as_f64().unwrap() > 0.0);
    assert!(ad.eval_attr("Disk").as_f64().unwrap() > 0.0);
    assert!(ad.eval_attr("HasTestTools").is_true());

    let (exe, bytes) = script(
        "#!/bin/sh\n\
         echo \"job=$CARMI_JOB process=$CARMI_PROCESS host=$CARMI_HOST arg=$1\"\n\
         [ -r \"$CARMI_SECRET_FILE\" ] && echo secret-readable\n\
         [ -n \"$CARMI_LOCAL\" ] && echo local-set\n\
         grep -q '^HasTestTools = true$' \"$CARMI_MACHINE_AD\" && echo ad-readable\n\
         exit 3\n",
    );
    g.send(spawn_msg(1, 11, &exe), &[]).await;
    assert_eq!(
        g.recv().await.0,
        ToGlobal::Fetch {
            sha256: exe.sha256.clone()
        }
    );
    g.send(
        FromGlobal::Executable {
            executable: exe.clone(),
        },
        &bytes,
    )
    .await;
    assert_eq!(
        g.recv().await.0,
        ToGlobal::Started {
            process: ProcessId(1),
            result: Ok(())
        }
    );
    let (msg, _) = g.recv().await;
    let ToGlobal::Exited {
        process,
        status,
        cpu_seconds,
        ..
    } = msg
    else {
        panic!("expected Exited, got {msg:?}");
    };
    assert_eq!((process, status), (ProcessId(1), ExitStatus::Code(3)));
    assert!(cpu_seconds >= 0.0);
    let out = std::fs::read_to_string(daemon.work_dir().join("output/1/1.out")).unwrap();
    assert_eq!(
        out,
        "job=1 process=1 host=11 arg=first arg\nsecret-readable\nlocal-set\nad-readable\n"
    );

    // The same executable again: served from the cache, no Fetch.
    g.send(spawn_msg(2, 10, &exe), &[]).await;
    assert_eq!(
        g.recv().await.0,
        ToGlobal::Started {
            process: ProcessId(2),
            result: Ok(())
        }
    );
    assert!(matches!(
        g.recv().await.0,
        ToGlobal::Exited {
            process: ProcessId(2),
            status: ExitStatus::Code(3),
            ..
        }
    ));

    // Bytes that do not match the hash are refused, and nothing runs.
    let (evil_ref, _) = script("#!/bin/sh\nexit 0\n");
    g.send(spawn_msg(3, 10, &evil_ref), &[]).await;
    assert!(matches!(g.recv().await.0, ToGlobal::Fetch { .. }));
    g.send(
        FromGlobal::Executable {
            executable: evil_ref.clone(),
        },
        b"#!/bin/sh\nrm -rf /\n",
    )
    .await;
    let (msg, _) = g.recv().await;
    assert!(
        matches!(&msg, ToGlobal::Started { process: ProcessId(3), result: Err(r) } if r.contains("size") || r.contains("SHA-256")),
        "{msg:?}"
    );
    assert!(
        !daemon
            .work_dir()
            .join("cache")
            .join(&evil_ref.sha256)
            .exists()
    );

    // Heartbeats come at the period the global RM asked for.
    let (hb, _) = loop {
        let m = g.recv_any().await;
        if matches!(m.0, ToGlobal::Heartbeat { .. }) {
            break m;
        }
    };
    let ToGlobal::Heartbeat { update } = hb else {
        unreachable!()
    };
    assert!(ClassAd::parse_old(&update).is_ok(), "{update}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applications_attach_forward_and_receive_events() {
    init_logs();
    let dir = TempDir::new("apps");
    let global = FakeGlobal::new().await;
    let daemon = Daemon::start(settings(&global, dir.path(), "it-m2"))
        .await
        .unwrap();
    let mut g = global.accept("it-m2").await;
    g.register(&[20, 21]).await;
    let secret = Secret::new(SECRET).unwrap();

    // Garbage and the wrong role are refused, each on its own connection.
    let mut junk = TcpStream::connect(daemon.app_addr()).await.unwrap();
    junk.write_all(&[0xff; 64]).await.unwrap();
    let (mut ar, mut aw, binding) = open_app(daemon.app_addr()).await;
    let peer = Role::Local {
        name: "not-a-local-rm-client".into(),
    };
    let err = handshake::client_bound(&mut ar, &mut aw, &secret, &peer, &binding)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, handshake::HandshakeError::Refused(r) if r.contains("application processes and control tools only")),
        "{err}"
    );

    let (mut r, mut w, binding) = open_app(daemon.app_addr()).await;
    let role = Role::Application {
        job: None,
        process: None,
        endpoint: "127.0.0.1:4711".into(),
    };
    handshake::client_bound(&mut r, &mut w, &secret, &role, &binding)
        .await
        .unwrap();
    let (msg, _) = g.recv().await;
    let ToGlobal::AppAttach {
        conn,
        job: None,
        process: None,
        endpoint,
        ..
    } = msg
    else {
        panic!("expected AppAttach, got {msg:?}");
    };
    assert_eq!(endpoint, "127.0.0.1:4711");
    g.send(
        FromGlobal::Attached {
            conn,
            job: JobId(5),
            process: ProcessId(9),
        },
        &[],
    )
    .await;
    // The job's credential comes first (made here: the fake global RM
    // sends none), for the application's direct connections.
    match app_recv_any(&mut r).await {
        FromLocal::Credential { job, credential } => {
            assert_eq!(job, JobId(5));
            let secret = Secret::new(credential.as_bytes()).expect("a credential");
            assert_eq!(secret.job(), Some(JobId(5)));
        }
        other => panic!("expected the job's credential, got {other:?}"),
    }
    assert_eq!(
        app_recv(&mut r).await,
        FromLocal::Attached {
            job: JobId(5),
            process: ProcessId(9)
        }
    );

    let request = ToLocal::Request {
        id: RequestId(1),
        body: Request::AddHosts {
            class: "fast".into(),
            count: 2,
            increment: 1,
        },
    };
    write_frame(&mut w, &request, &[]).await.unwrap();
    let (msg, _) = g.recv().await;
    assert!(
        matches!(&msg, ToGlobal::Forward { conn: c, id: RequestId(1), body: Request::AddHosts { count: 2, .. } } if *c == conn),
        "{msg:?}"
    );
    let event = Event::Done {
        request: RequestId(1),
        reply: Reply::Ok,
    };
    // A re-announcement (as after a reconnection) changes nothing for the
    // application: no second credential, no second `Attached`.
    g.send(
        FromGlobal::Attached {
            conn,
            job: JobId(5),
            process: ProcessId(9),
        },
        &[],
    )
    .await;
    g.send(
        FromGlobal::Deliver {
            conn,
            event: event.clone(),
        },
        &[],
    )
    .await;
    assert_eq!(app_recv_any(&mut r).await, FromLocal::Event(event));

    // Upload bytes arrive at the global RM verbatim.
    let (exe, bytes) = script("#!/bin/sh\nexit 0\n");
    write_frame(
        &mut w,
        &ToLocal::UploadExecutable {
            executable: exe.clone(),
        },
        &bytes,
    )
    .await
    .unwrap();
    let (msg, payload) = g.recv().await;
    assert_eq!(msg, ToGlobal::Upload { executable: exe });
    assert_eq!(&payload[..], &bytes[..]);

    // A bad frame closes that application's connection only, with AppDetach.
    w.write_all(&[0, 0, 0, 8, 0, 0, 0, 4, b'{', b'x', b'x', b'}'])
        .await
        .unwrap();
    assert_eq!(g.recv().await.0, ToGlobal::AppDetach { conn });
    let (mut r2, mut w2, binding) = open_app(daemon.app_addr()).await;
    handshake::client_bound(&mut r2, &mut w2, &secret, &role, &binding)
        .await
        .unwrap();
    assert!(matches!(g.recv().await.0, ToGlobal::AppAttach { conn: c, .. } if c != conn));
    assert_ne!(conn, ConnId(0));
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_and_reports_what_happened_while_away() {
    init_logs();
    let dir = TempDir::new("reconnect");
    let global = FakeGlobal::new().await;
    let daemon = Daemon::start(settings(&global, dir.path(), "it-m3"))
        .await
        .unwrap();
    let mut g = global.accept("it-m3").await;
    g.register(&[30, 31]).await;
    let (long, long_bytes) = script("#!/bin/sh\nsleep 100 &\nsleep 100\n");
    let (short, short_bytes) = script("#!/bin/sh\nsleep 0.3\nexit 7\n");
    for (p, host, exe, bytes) in [(1, 30, &long, &long_bytes), (2, 31, &short, &short_bytes)] {
        g.send(spawn_msg(p, host, exe), &[]).await;
        assert!(matches!(g.recv().await.0, ToGlobal::Fetch { .. }));
        g.send(
            FromGlobal::Executable {
                executable: exe.clone(),
            },
            bytes,
        )
        .await;
        assert_eq!(
            g.recv().await.0,
            ToGlobal::Started {
                process: ProcessId(p),
                result: Ok(())
            }
        );
    }
    // The global RM goes away; process 2 exits meanwhile.
    drop(g);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut g = global.accept("it-m3").await;
    let (_, running) = g.register(&[40, 41]).await;
    assert_eq!(running, vec![ProcessId(1)]);
    assert!(matches!(
        g.recv().await.0,
        ToGlobal::Exited {
            process: ProcessId(2),
            status: ExitStatus::Code(7),
            ..
        }
    ));
    // Kill reaches process 1 and its background child.
    g.send(
        FromGlobal::Kill {
            process: ProcessId(1),
        },
        &[],
    )
    .await;
    assert!(matches!(
        g.recv().await.0,
        ToGlobal::Exited {
            process: ProcessId(1),
            status: ExitStatus::Signal(15),
            ..
        }
    ));

    // At shutdown, running processes are killed and their exits reported.
    g.send(spawn_msg(3, 41, &long), &[]).await;
    assert!(matches!(
        g.recv().await.0,
        ToGlobal::Started {
            process: ProcessId(3),
            result: Ok(())
        }
    ));
    let shutdown = tokio::spawn(daemon.shutdown());
    assert!(matches!(
        g.recv().await.0,
        ToGlobal::Exited {
            process: ProcessId(3),
            status: ExitStatus::Signal(15),
            ..
        }
    ));
    tokio::time::timeout(WAIT, shutdown).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_owner_events_close_and_reopen_the_machine() {
    use carmi_api::msg::{OwnerEvent, SlotActivity};
    init_logs();
    let dir = TempDir::new("owner");
    let global = FakeGlobal::new().await;
    let mut s = settings(&global, dir.path(), "it-m3");
    // START after 15 policy minutes of 10 ms.
    s.policy.minute = 0.01;
    let daemon = Daemon::start(s).await.unwrap();
    let mut g = global.accept("it-m3").await;
    g.register(&[30, 31]).await;

    assert!(daemon.owner_event(OwnerEvent::Arrive).await);
    // No process: the machine goes straight to its owner, both slots withdrawn.
    for slot in 0..2 {
        assert_eq!(
            g.recv().await.0,
            ToGlobal::SlotState {
                slot,
                state: SlotActivity::Vacated
            }
        );
    }
    let (exe, _) = script("#!/bin/sh\nexit 0\n");
    g.send(spawn_msg(7, 30, &exe), &[]).await;
    match g.recv().await.0 {
        ToGlobal::Started {
            process,
            result: Err(reason),
        } => {
            assert_eq!(process, ProcessId(7));
            assert!(reason.contains("START is false"), "{reason}");
        }
        other => panic!("expected the spawn to be refused, got {other:?}"),
    }
    assert!(daemon.owner_event(OwnerEvent::Leave).await);
    for slot in 0..2 {
        assert_eq!(
            g.recv().await.0,
            ToGlobal::SlotState {
                slot,
                state: SlotActivity::Available
            }
        );
    }
    daemon.shutdown().await;
}

/// Spawns that arrive just before a shutdown (their launch under way, not
/// yet reported) must not outlive the daemon, nor may anything start after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_launched_during_shutdown_do_not_outlive_it() {
    init_logs();
    let dir = TempDir::new("shutdown-race");
    let global = FakeGlobal::new().await;
    let mut s = settings(&global, dir.path(), "it-m3");
    s.slots = Some(8);
    let daemon = Daemon::start(s).await.unwrap();
    let mut g = global.accept("it-m3").await;
    g.register(&[1, 2, 3, 4, 5, 6, 7, 8]).await;
    let pids = dir.path().join("pids");
    let (exe, bytes) = script(&format!(
        "#!/bin/sh\necho $$ >> {}\nexec sleep 300\n",
        pids.display()
    ));
    // The first one stages the executable and runs.
    g.send(spawn_msg(1, 1, &exe), &[]).await;
    assert!(matches!(g.recv().await.0, ToGlobal::Fetch { .. }));
    g.send(
        FromGlobal::Executable {
            executable: exe.clone(),
        },
        &bytes,
    )
    .await;
    assert!(matches!(
        g.recv().await.0,
        ToGlobal::Started { result: Ok(()), .. }
    ));
    // More from the cache, and the shutdown right behind them.
    for p in 2..=8 {
        g.send(spawn_msg(p, p, &exe), &[]).await;
    }
    g.conn.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    tokio::time::timeout(Duration::from_secs(20), daemon.shutdown())
        .await
        .expect("shutdown finishes");
    // Nothing may start late, and nothing that started may be left.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let listed = std::fs::read_to_string(&pids).unwrap_or_default();
    let started: Vec<i32> = listed
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(!started.is_empty(), "the first process ran");
    for pid in started {
        assert!(!alive(pid), "process {pid} outlived the local RM");
    }
}
