//! The client library against a fake local RM: real TCP, the real handshake,
//! and two client processes in one test process messaging each other directly.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use carmi_api::client::{Carmi, ConnectError, ConnectOptions, EventStream, Incoming, connect};
use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::{HostId, JobId, ProcessId, RequestId};
use carmi_api::msg::{
    Event, ExecutableRef, Failure, FailureCode, FromLocal, Reply, Request, Role, SpawnTarget,
    ToLocal,
};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

const SECRET: &[u8] = b"test secret of the fake pool";
const WAIT: Duration = Duration::from_secs(10);

/// What the fake RM received, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Request {
        id: RequestId,
        body: Request,
    },
    Upload {
        executable: ExecutableRef,
        bytes: Bytes,
    },
}

/// A local RM that attaches processes, echoes every request as `Done(Ok)`
/// once its gate is open, and answers `LookupProcess` from the endpoints
/// that attached processes declared.
struct FakeRm {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    gate: watch::Sender<bool>,
    hang_up: watch::Sender<bool>,
}

impl FakeRm {
    async fn start(gate_open: bool) -> FakeRm {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (gate, gate_rx) = watch::channel(gate_open);
        let (hang_up, hang_up_rx) = watch::channel(false);
        let endpoints = Arc::new(Mutex::new(HashMap::new()));
        let seen2 = seen.clone();
        tokio::spawn(async move {
            let mut next_job = 1;
            let mut next_process = 100;
            // A local RM takes TLS only, its handshake bound to the session.
            let tls = carmi_api::tls::Acceptor::generate().unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let Ok(opened) = tls.accept(stream, false).await else {
                    continue;
                };
                let (r, mut w) = (opened.reader, opened.writer);
                let mut r = FrameReader::new(r);
                let secret = Secret::new(SECRET).unwrap();
                let binding = opened.binding;
                let hs = handshake::server_auth(&mut r, &mut w, &secret, &binding, |_, _| Ok(()));
                let Ok((role, ())) = hs.await else {
                    continue;
                };
                let Role::Application {
                    job,
                    process,
                    endpoint,
                } = role
                else {
                    panic!("the fake RM only serves applications, got {role:?}");
                };
                let job = job.unwrap_or_else(|| {
                    next_job += 1;
                    JobId(next_job - 1)
                });
                let process = process.unwrap_or_else(|| {
                    next_process += 1;
                    ProcessId(next_process - 1)
                });
                endpoints.lock().unwrap().insert(process, endpoint);
                write_frame(&mut w, &FromLocal::Attached { job, process }, &[])
                    .await
                    .unwrap();

                // Reading and answering are separate so that requests are
                // seen (and logged) while their answers are held at the gate.
                let (to_answer, mut answers) = mpsc::unbounded_channel();
                let seen = seen2.clone();
                let mut hang_up = hang_up_rx.clone();
                tokio::spawn(async move {
                    loop {
                        let frame = tokio::select! {
                            frame = r.read::<ToLocal>() => frame,
                            _ = hang_up.wait_for(|h| *h) => return,
                        };
                        match frame {
                            Ok(Some((ToLocal::Request { id, body }, _))) => {
                                seen.lock().unwrap().push(Seen::Request {
                                    id,
                                    body: body.clone(),
                                });
                                let _ = to_answer.send((id, body));
                            }
                            Ok(Some((ToLocal::UploadExecutable { executable }, bytes))) => {
                                seen.lock()
                                    .unwrap()
                                    .push(Seen::Upload { executable, bytes });
                            }
                            _ => return,
                        }
                    }
                });
                let mut gate = gate_rx.clone();
                let mut hang_up = hang_up_rx.clone();
                let endpoints = endpoints.clone();
                tokio::spawn(async move {
                    while let Some((request, body)) = answers.recv().await {
                        tokio::select! {
                            _ = gate.wait_for(|open| *open) => {}
                            _ = hang_up.wait_for(|h| *h) => return,
                        }
                        let event = match body {
                            Request::LookupProcess { process } => {
                                match endpoints.lock().unwrap().get(&process) {
                                    Some(address) => Event::Done {
                                        request,
                                        reply: Reply::Endpoint {
                                            process,
                                            address: address.clone(),
                                        },
                                    },
                                    None => Event::Failed {
                                        request,
                                        failure: Failure {
                                            code: FailureCode::UnknownProcess,
                                            message: format!("no process {process}"),
                                        },
                                    },
                                }
                            }
                            _ => Event::Done {
                                request,
                                reply: Reply::Ok,
                            },
                        };
                        if write_frame(&mut w, &FromLocal::Event(event), &[])
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        FakeRm {
            addr,
            seen,
            gate,
            hang_up,
        }
    }

    fn options(&self, job: Option<JobId>, process: Option<ProcessId>) -> ConnectOptions {
        let mut opts = ConnectOptions::new(self.addr.clone(), Secret::new(SECRET).unwrap());
        opts.job = job;
        opts.process = process;
        opts
    }

    async fn connect(
        &self,
        job: Option<JobId>,
        process: Option<ProcessId>,
    ) -> (Carmi, EventStream) {
        connect(self.options(job, process)).await.unwrap()
    }

    fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until the RM has received `n` frames.
    async fn wait_seen(&self, n: usize) -> Vec<Seen> {
        tokio::time::timeout(WAIT, async {
            loop {
                let seen = self.seen();
                if seen.len() >= n {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the RM saw only {:?}", self.seen()))
    }

    fn hang_up(&self) {
        self.hang_up.send_replace(true);
    }
}

async fn next(events: &mut EventStream) -> Incoming {
    tokio::time::timeout(WAIT, events.next())
        .await
        .expect("an event within the time limit")
        .expect("the stream is still open")
}

async fn assert_quiet(events: &mut EventStream) {
    if let Ok(item) = tokio::time::timeout(Duration::from_millis(200), events.next()).await {
        panic!("expected nothing, got {item:?}");
    }
}

fn done(request: RequestId) -> Incoming {
    Incoming::Rm(Event::Done {
        request,
        reply: Reply::Ok,
    })
}

#[tokio::test]
async fn request_ids_come_back_before_anything_is_answered() {
    let rm = FakeRm::start(false).await;
    let (carmi, mut events) = rm.connect(None, None).await;
    assert_eq!((carmi.job(), carmi.process()), (JobId(1), ProcessId(100)));
    let ids = vec![
        carmi.define_class("fast", "Mips > 1000"),
        carmi.addhosts("fast", 4, 2),
        carmi.config(),
        carmi.get_host_info(HostId(3)),
        carmi.delhosts(&[HostId(3)]),
        carmi.add_notify("fast"),
        carmi.delete_notify(&[HostId(1), HostId(2)]),
        carmi.suspend_notify(&[HostId(1)]),
        carmi.resume_notify(&[HostId(1)]),
        carmi.process_info(ProcessId(100)),
        carmi.get_class_definitions(),
        carmi.remove_class("slow"),
        carmi.cancel_request(RequestId(2)),
    ];
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // Every request reached the RM, none is answered yet.
    let seen = rm.wait_seen(ids.len()).await;
    let sent: Vec<RequestId> = seen
        .iter()
        .map(|s| match s {
            Seen::Request { id, .. } => *id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sent, ids, "requests go out in the order they were made");
    assert_eq!(
        seen[1],
        Seen::Request {
            id: ids[1],
            body: Request::AddHosts {
                class: "fast".into(),
                count: 4,
                increment: 2
            }
        }
    );
    assert_quiet(&mut events).await;

    rm.open_gate();
    for id in ids {
        assert_eq!(next(&mut events).await, done(id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_outstanding_requests_each_get_their_own_id_back() {
    let rm = FakeRm::start(false).await;
    let (carmi, mut events) = rm.connect(None, None).await;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let carmi = carmi.clone();
            tokio::spawn(async move {
                (0..500)
                    .map(|i| match (t + i) % 3 {
                        0 => carmi.config(),
                        1 => carmi.addhosts(format!("c{t}"), i, 1),
                        _ => carmi.process_info(ProcessId(i as u64)),
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut issued = HashSet::new();
    for task in tasks {
        for id in task.await.unwrap() {
            assert!(issued.insert(id), "{id} was handed out twice");
        }
    }
    assert_eq!(issued.len(), 4000);
    rm.open_gate();
    let mut answered = HashSet::new();
    for _ in 0..issued.len() {
        match next(&mut events).await {
            Incoming::Rm(Event::Done { request, .. }) => assert!(answered.insert(request)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(answered, issued);
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn class_spawn_uploads_each_executable_once_and_bad_files_fail_their_request() {
    let rm = FakeRm::start(true).await;
    let (carmi, mut events) = rm.connect(None, None).await;
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("worker");
    let a_bytes: Vec<u8> = (0..70_000u32).map(|i| (i % 256) as u8).collect();
    std::fs::write(&a, &a_bytes).unwrap();
    let b = dir.path().join("other");
    std::fs::write(&b, b"#!/bin/sh\necho other\n").unwrap();

    let to_fast = SpawnTarget::Class("fast".into());
    let s1 = carmi.class_spawn(&a, ["-n", "3"], to_fast.clone());
    let s2 = carmi.class_spawn(&a, Vec::<String>::new(), SpawnTarget::Host(HostId(4)));
    let s3 = carmi.class_spawn(&b, ["x"], to_fast.clone());
    let bad = carmi.class_spawn(dir.path().join("missing"), ["x"], to_fast.clone());
    let after = carmi.config();

    let mut outcomes = HashMap::new();
    for _ in 0..5 {
        match next(&mut events).await {
            Incoming::Rm(event) => outcomes.insert(event.request(), event),
            other => panic!("{other:?}"),
        };
    }
    for id in [s1, s2, s3, after] {
        assert_eq!(Incoming::Rm(outcomes[&id].clone()), done(id));
    }
    match &outcomes[&bad] {
        Event::Failed { failure, .. } => {
            assert_eq!(failure.code, FailureCode::BadExecutable);
            assert!(failure.message.contains("missing"), "{}", failure.message);
        }
        other => panic!("{other:?}"),
    }

    let exe_a = ExecutableRef {
        name: "worker".into(),
        sha256: sha256_hex(&a_bytes),
        size: a_bytes.len() as u64,
    };
    let exe_b = ExecutableRef {
        name: "other".into(),
        sha256: sha256_hex(b"#!/bin/sh\necho other\n"),
        size: 21,
    };
    let spawn =
        |id, executable: &ExecutableRef, args: &[&str], target: &SpawnTarget| Seen::Request {
            id,
            body: Request::ClassSpawn {
                executable: executable.clone(),
                args: args.iter().map(|s| s.to_string()).collect(),
                target: target.clone(),
                output: carmi_api::msg::OutputMode::Forward,
            },
        };
    assert_eq!(
        rm.seen(),
        vec![
            Seen::Upload {
                executable: exe_a.clone(),
                bytes: Bytes::from(a_bytes.clone())
            },
            spawn(s1, &exe_a, &["-n", "3"], &to_fast),
            spawn(s2, &exe_a, &[], &SpawnTarget::Host(HostId(4))),
            Seen::Upload {
                executable: exe_b.clone(),
                bytes: Bytes::from_static(b"#!/bin/sh\necho other\n")
            },
            spawn(s3, &exe_b, &["x"], &to_fast),
            Seen::Request {
                id: after,
                body: Request::Config
            },
        ]
    );

    // A changed file is a new executable: uploaded again.
    std::fs::write(&a, b"new contents").unwrap();
    let s4 = carmi.class_spawn(&a, ["y"], to_fast.clone());
    assert_eq!(next(&mut events).await, done(s4));
    let seen = rm.seen();
    let exe_a2 = ExecutableRef {
        name: "worker".into(),
        sha256: sha256_hex(b"new contents"),
        size: 12,
    };
    assert_eq!(
        seen[6..],
        [
            Seen::Upload {
                executable: exe_a2.clone(),
                bytes: Bytes::from_static(b"new contents")
            },
            spawn(s4, &exe_a2, &["y"], &to_fast),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_exchange_messages_directly_in_order_and_verbatim() {
    exchange_messages(false).await;
}

/// In clear, where `send` writes to the socket itself while nothing is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_exchange_messages_in_clear_in_order_and_verbatim() {
    exchange_messages(true).await;
}

async fn exchange_messages(plain: bool) {
    let rm = FakeRm::start(true).await;
    let mut opts = rm.options(None, None);
    opts.plain_peers = plain;
    let (a, mut a_events) = connect(opts).await.unwrap();
    let mut opts = rm.options(Some(a.job()), Some(ProcessId(7)));
    opts.plain_peers = plain;
    let (b, mut b_events) = connect(opts).await.unwrap();
    assert_eq!((b.job(), b.process()), (a.job(), ProcessId(7)));

    for i in 0..1000u32 {
        a.send(b.process(), i, format!("message {i}").into_bytes());
    }
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    a.send(b.process(), 5000, big.clone());
    a.flush().await;

    for i in 0..1000u32 {
        assert_eq!(
            next(&mut b_events).await,
            Incoming::Message {
                from: a.process(),
                tag: i,
                data: Bytes::from(format!("message {i}")),
            }
        );
    }
    match next(&mut b_events).await {
        Incoming::Message { from, tag, data } => {
            assert_eq!((from, tag, data.len()), (a.process(), 5000, big.len()));
            assert!(data[..] == big[..], "the 1 MiB body arrived altered");
        }
        other => panic!("{other:?}"),
    }

    // And back, with an RM request in between: one stream carries both.
    let asked = b.config();
    b.send(a.process(), 1, "thanks");
    b.send(a.process(), 2, Bytes::new());
    assert_eq!(
        next(&mut a_events).await,
        Incoming::Message {
            from: b.process(),
            tag: 1,
            data: Bytes::from_static(b"thanks")
        }
    );
    assert_eq!(
        next(&mut a_events).await,
        Incoming::Message {
            from: b.process(),
            tag: 2,
            data: Bytes::new()
        }
    );
    assert_eq!(next(&mut b_events).await, done(asked));

    // Each side asked the RM where the other listens exactly once; the
    // message bodies never went through it.
    let lookups: Vec<Request> = rm
        .seen()
        .into_iter()
        .filter_map(|s| match s {
            Seen::Request {
                body: body @ Request::LookupProcess { .. },
                ..
            } => Some(body),
            _ => None,
        })
        .collect();
    assert_eq!(
        lookups,
        [
            Request::LookupProcess {
                process: b.process()
            },
            Request::LookupProcess {
                process: a.process()
            }
        ]
    );
    assert_eq!(rm.seen().len(), 3, "{:?}", rm.seen());
    // Lookups are answered inside the client, never on the stream.
    assert_quiet(&mut a_events).await;
    assert_quiet(&mut b_events).await;
}

#[tokio::test]
async fn a_message_to_oneself_arrives_on_ones_own_stream() {
    let rm = FakeRm::start(true).await;
    let (a, mut events) = rm.connect(None, None).await;
    a.send(a.process(), 9, vec![1, 2, 3]);
    assert_eq!(
        futures::StreamExt::next(&mut events).await,
        Some(Incoming::Message {
            from: a.process(),
            tag: 9,
            data: Bytes::from_static(&[1, 2, 3])
        })
    );
    assert!(rm.seen().is_empty());
}

#[tokio::test]
async fn undeliverable_messages_are_reported_with_a_reason() {
    let rm = FakeRm::start(true).await;
    let (a, mut a_events) = rm.connect(None, None).await;
    let (other_job, mut other_events) = rm.connect(Some(JobId(2)), Some(ProcessId(9))).await;

    // A peer of another job is refused by the receiver's listener.
    other_job.send(a.process(), 1, "hello");
    match next(&mut other_events).await {
        Incoming::SendFailed { to, reason, unsent } => {
            assert_eq!((to, unsent), (a.process(), 1));
            assert!(
                reason.contains("refused") && reason.contains("job j2"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_quiet(&mut a_events).await;

    // An unknown process: the lookup fails and the queued messages are counted.
    for i in 0..3 {
        a.send(ProcessId(12345), i, "lost");
    }
    match next(&mut a_events).await {
        Incoming::SendFailed { to, reason, unsent } => {
            assert_eq!((to, unsent), (ProcessId(12345), 3));
            assert!(
                reason.contains("cannot look up process p12345: no process p12345"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The failure is not sticky: a later send tries again.
    a.send(ProcessId(12345), 4, "again");
    assert!(matches!(
        next(&mut a_events).await,
        Incoming::SendFailed { unsent: 1, .. }
    ));
}

#[tokio::test]
async fn a_wrong_secret_fails_connect_with_a_clear_error() {
    let rm = FakeRm::start(true).await;
    let mut opts = rm.options(None, None);
    opts.secret = Secret::new(b"not the secret of this pool").unwrap();
    let err = connect(opts).await.unwrap_err();
    assert!(matches!(err, ConnectError::WrongSecret { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&rm.addr) && text.contains("secret"),
        "the message should name the RM and the secret: {text}"
    );
}

#[tokio::test]
async fn an_unreachable_rm_fails_connect_with_its_address() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let opts = ConnectOptions::new(addr.clone(), Secret::new(SECRET).unwrap());
    let err = connect(opts).await.unwrap_err();
    assert!(matches!(err, ConnectError::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("cannot reach the local RM at {addr}")),
        "{err}"
    );
}

#[tokio::test]
async fn losing_the_rm_is_reported_and_later_requests_fail_at_once() {
    let rm = FakeRm::start(true).await;
    let (a, mut events) = rm.connect(None, None).await;
    let (b, _b_events) = rm.connect(Some(a.job()), None).await;
    rm.hang_up();
    match next(&mut events).await {
        Incoming::Disconnected(reason) => {
            assert!(
                reason.contains("local RM closed the connection"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    let id = a.config();
    match next(&mut events).await {
        Incoming::Rm(Event::Failed { request, failure }) => {
            assert_eq!((request, failure.code), (id, FailureCode::Unavailable));
        }
        other => panic!("{other:?}"),
    }
    // A peer whose address is unknown cannot be looked up any more.
    a.send(b.process(), 1, "x");
    assert!(matches!(
        next(&mut events).await,
        Incoming::SendFailed { unsent: 1, .. }
    ));
}

#[tokio::test]
async fn dropping_the_last_handle_ends_the_stream() {
    let rm = FakeRm::start(true).await;
    let (a, mut events) = rm.connect(None, None).await;
    let (b, mut b_events) = rm.connect(Some(a.job()), None).await;
    b.send(a.process(), 1, "before");
    assert!(matches!(next(&mut events).await, Incoming::Message { .. }));
    let id = a.config();
    let clone = a.clone();
    drop(a);
    // A clone keeps the client alive.
    assert_eq!(next(&mut events).await, done(id));
    drop(clone);
    tokio::time::timeout(WAIT, async { while events.next().await.is_some() {} })
        .await
        .expect("the stream ends once every handle is gone");
    drop(b);
    tokio::time::timeout(WAIT, async { while b_events.next().await.is_some() {} })
        .await
        .expect("the stream ends once every handle is gone");
}
