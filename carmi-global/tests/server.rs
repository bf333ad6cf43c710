//! The daemon over real TCP on 127.0.0.1:0, with fake local RMs and an admin
//! tool speaking the real protocol.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use carmi_api::exe::sha256_hex;
use carmi_api::frame::{FrameReader, encode_header, write_frame};
use carmi_api::handshake::{self, HandshakeError, Secret};
use carmi_api::ids::{ConnId, HostId, JobId, ProcessId, RequestId};
use carmi_api::msg::{
    Event, ExecutableRef, ExitStatus, FromGlobal, Reply, Request, Role, SpawnTarget, StageSource,
    ToGlobal,
};
use carmi_api::stage;
use carmi_global::router::RouterConfig;
use carmi_global::server::{Server, ServerConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const SECRET: &[u8] = b"test secret of the pool, long enough";
const WAIT: Duration = Duration::from_secs(5);

struct Daemon {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), carmi_global::Error>>>,
    dir: PathBuf,
}

impl Daemon {
    async fn start(heartbeat_ms: u64) -> Daemon {
        Daemon::start_with(heartbeat_ms, |_| {}).await
    }

    /// [`Daemon::start`] with further settings.
    async fn start_with(heartbeat_ms: u64, tune: impl FnOnce(&mut ServerConfig)) -> Daemon {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "carmi-global-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = ServerConfig::new(Secret::new(SECRET).unwrap(), dir.clone());
        config.router = RouterConfig {
            heartbeat: Duration::from_millis(heartbeat_ms),
            ..RouterConfig::default()
        };
        config.max_frame = 1 << 20;
        tune(&mut config);
        let server = Server::bind("127.0.0.1:0", config).await.unwrap();
        let addr = server.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        Daemon {
            addr,
            stop: Some(tx),
            task: Some(task),
            dir,
        }
    }

    async fn connect(&self, role: Role) -> Peer {
        Peer::connect(self.addr, role, SECRET).await.unwrap()
    }

    /// A local RM for machine `name` with `slots` slots, registered.
    async fn machine(&self, name: &str, slots: u32, mips: u32) -> (Peer, Vec<HostId>) {
        let mut p = self.connect(Role::Local { name: name.into() }).await;
        p.send(&ToGlobal::Advertise {
            ad: format!("[ Name = \"{name}\"; Arch = \"X86_64\"; Mips = {mips} ]"),
            slots,
            running: vec![],
        })
        .await;
        match p.recv().await {
            FromGlobal::Registered { hosts, .. } => (p, hosts),
            other => panic!("{other:?}"),
        }
    }

    /// Stops the daemon and checks that it stops promptly.
    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("the daemon stops within the grace period")
            .unwrap()
            .unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Peer {
    r: FrameReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
}

impl Peer {
    async fn connect(addr: SocketAddr, role: Role, secret: &[u8]) -> Result<Peer, HandshakeError> {
        let (r, mut w) = TcpStream::connect(addr).await.unwrap().into_split();
        let mut r = FrameReader::new(r);
        handshake::client(&mut r, &mut w, &Secret::new(secret).unwrap(), &role).await?;
        Ok(Peer { r, w })
    }

    async fn send(&mut self, msg: &ToGlobal) {
        self.send_with(msg, &[]).await;
    }

    async fn send_with(&mut self, msg: &ToGlobal, payload: &[u8]) {
        write_frame(&mut self.w, msg, payload).await.unwrap();
    }

    /// The next frame, past the job credentials a local RM is given
    /// before each `Spawn` and `Attached` (`carmi_global::jobcred`).
    async fn recv_frame(&mut self) -> (FromGlobal, Bytes) {
        loop {
            let frame = tokio::time::timeout(WAIT, self.r.read::<FromGlobal>())
                .await
                .expect("a message within the time limit")
                .expect("a readable frame")
                .expect("the connection is open");
            if !matches!(frame.0, FromGlobal::JobCredential { .. }) {
                return frame;
            }
        }
    }

    async fn recv(&mut self) -> FromGlobal {
        self.recv_frame().await.0
    }

    async fn event(&mut self, conn: ConnId) -> Event {
        match self.recv().await {
            FromGlobal::Deliver { conn: c, event } if c == conn => event,
            other => panic!("expected an event for {conn}, got {other:?}"),
        }
    }

    /// True when the daemon closed this connection.
    async fn is_closed(&mut self) -> bool {
        match tokio::time::timeout(WAIT, self.r.read::<FromGlobal>()).await {
            Ok(Ok(None)) | Ok(Err(_)) => true,
            Ok(Ok(Some((m, _)))) => panic!("expected the connection closed, got {m:?}"),
            Err(_) => false,
        }
    }

    /// Attaches a new job's first process at `conn`.
    async fn new_job(&mut self, conn: ConnId) -> (JobId, ProcessId) {
        self.send(&ToGlobal::AppAttach {
            conn,
            job: None,
            process: None,
            endpoint: "127.0.0.1:1".into(),
            token: None,
        })
        .await;
        match self.recv().await {
            FromGlobal::Attached {
                conn: c,
                job,
                process,
            } => {
                assert_eq!(c, conn);
                (job, process)
            }
            other => panic!("{other:?}"),
        }
    }

    async fn request(&mut self, conn: ConnId, id: u64, body: Request) {
        self.send(&ToGlobal::Forward {
            conn,
            id: RequestId(id),
            body,
        })
        .await;
    }
}

const C1: ConnId = ConnId(1);

#[tokio::test]
async fn handshake_requires_the_pool_secret() {
    let d = Daemon::start(1000).await;
    let wrong = Peer::connect(d.addr, Role::Admin, b"some other secret entirely").await;
    assert!(
        matches!(wrong, Err(HandshakeError::BadProof)),
        "{:?}",
        wrong.err()
    );
    // The daemon is unharmed and serves the right secret.
    let (_m, hosts) = d.machine("m1", 2, 100).await;
    assert_eq!(hosts.len(), 2);
    let mut admin = d.connect(Role::Admin).await;
    admin.send(&ToGlobal::Status).await;
    match admin.recv().await {
        FromGlobal::Pool(machines) => {
            assert_eq!(machines.len(), 1);
            assert_eq!(machines[0].name, "m1");
            assert_eq!(machines[0].slots.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    d.shutdown().await;
}

#[tokio::test]
async fn a_job_defines_a_class_and_gets_hosts() {
    let d = Daemon::start(1000).await;
    let (_m1, hosts) = d.machine("m1", 2, 500).await;
    let (mut sub, _) = d.machine("submit", 0, 1).await;
    let (job, process) = sub.new_job(C1).await;
    assert_eq!((job, process), (JobId(1), ProcessId(1)));
    sub.request(
        C1,
        7,
        Request::DefineClass {
            name: "fast".into(),
            expression: "Mips >= 500 && Arch == \"x86_64\"".into(),
            rank: None,
            replace: false,
        },
    )
    .await;
    assert_eq!(
        sub.event(C1).await,
        Event::Done {
            request: RequestId(7),
            reply: Reply::Ok
        }
    );
    sub.request(
        C1,
        8,
        Request::AddHosts {
            class: "fast".into(),
            count: 2,
            increment: 1,
        },
    )
    .await;
    let mut got = Vec::new();
    for remaining in [1, 0] {
        match sub.event(C1).await {
            Event::HostsAdded {
                request,
                hosts,
                remaining: r,
            } => {
                assert_eq!((request, r), (RequestId(8), remaining));
                assert_eq!(hosts[0].class, "fast");
                got.push(hosts[0].host);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, hosts);
    sub.request(
        C1,
        9,
        Request::DefineClass {
            name: "bad".into(),
            expression: "Mips >= ".into(),
            rank: None,
            replace: false,
        },
    )
    .await;
    match sub.event(C1).await {
        Event::Failed { request, failure } => {
            assert_eq!(request, RequestId(9));
            assert!(
                failure.message.contains("line 1, column"),
                "{}",
                failure.message
            );
        }
        other => panic!("{other:?}"),
    }
    d.shutdown().await;
}

#[tokio::test]
async fn a_garbage_frame_closes_only_that_connection() {
    let d = Daemon::start(1000).await;
    let (mut good, _) = d.machine("good", 1, 1).await;
    let (mut bad, _) = d.machine("bad", 1, 1).await;
    let mut garbage = encode_header(&"x", 0);
    garbage[8] = b'{';
    bad.w.write_all(&garbage).await.unwrap();
    assert!(bad.is_closed().await);
    let (mut huge, _) = d.machine("huge", 1, 1).await;
    huge.w
        .write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0])
        .await
        .unwrap();
    assert!(huge.is_closed().await);
    good.send(&ToGlobal::Status).await;
    match good.recv().await {
        FromGlobal::Pool(machines) => assert_eq!(machines.len(), 3),
        other => panic!("{other:?}"),
    }
    // A connection that never completes the handshake harms nobody either.
    let mut raw = TcpStream::connect(d.addr).await.unwrap();
    raw.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    good.send(&ToGlobal::Status).await;
    assert!(matches!(good.recv().await, FromGlobal::Pool(_)));
    d.shutdown().await;
}

#[tokio::test]
async fn a_silent_machine_is_declared_lost() {
    let d = Daemon::start(100).await;
    let (mut m1, hosts) = d.machine("m1", 1, 9).await;
    let (mut sub, _) = d.machine("submit", 0, 1).await;
    sub.new_job(C1).await;
    sub.request(
        C1,
        1,
        Request::DefineClass {
            name: "any".into(),
            expression: "true".into(),
            rank: None,
            replace: false,
        },
    )
    .await;
    sub.event(C1).await;
    sub.request(
        C1,
        2,
        Request::AddHosts {
            class: "any".into(),
            count: 1,
            increment: 1,
        },
    )
    .await;
    assert!(matches!(sub.event(C1).await, Event::HostsAdded { .. }));
    sub.request(
        C1,
        3,
        Request::DeleteNotify {
            hosts: hosts.clone(),
        },
    )
    .await;
    sub.event(C1).await;
    // m1 goes silent; the submit machine keeps its heartbeats going.
    let started = tokio::time::Instant::now();
    let event = loop {
        sub.send(&ToGlobal::Heartbeat {
            update: String::new(),
        })
        .await;
        match tokio::time::timeout(Duration::from_millis(50), sub.r.read::<FromGlobal>()).await {
            Ok(frame) => break frame.unwrap().unwrap().0,
            Err(_) => assert!(started.elapsed() < WAIT, "m1 was never declared lost"),
        }
    };
    match event {
        FromGlobal::Deliver {
            event: Event::HostDeleted { request, host, .. },
            ..
        } => assert_eq!((request, host), (RequestId(3), hosts[0])),
        other => panic!("{other:?}"),
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250),
        "lost too early: {elapsed:?}"
    );
    assert!(m1.is_closed().await);
    d.shutdown().await;
}

#[tokio::test]
async fn executables_upload_fetch_and_spawn() {
    let d = Daemon::start(1000).await;
    let (mut m1, hosts) = d.machine("m1", 1, 9).await;
    let (mut sub, _) = d.machine("submit", 0, 1).await;
    let (job, _) = sub.new_job(C1).await;
    let bytes = b"\x7fELF pretend this is a program".to_vec();
    let exe = ExecutableRef {
        name: "worker".into(),
        sha256: sha256_hex(&bytes),
        size: bytes.len() as u64,
    };
    // Wrong contents are refused without closing anything.
    sub.send_with(
        &ToGlobal::Upload {
            executable: exe.clone(),
        },
        b"other bytes",
    )
    .await;
    sub.send_with(
        &ToGlobal::Upload {
            executable: exe.clone(),
        },
        &bytes,
    )
    .await;
    for (id, body) in [
        (
            1,
            Request::DefineClass {
                name: "any".into(),
                expression: "true".into(),
                rank: None,
                replace: false,
            },
        ),
        (
            2,
            Request::AddHosts {
                class: "any".into(),
                count: 1,
                increment: 1,
            },
        ),
    ] {
        sub.request(C1, id, body).await;
        sub.event(C1).await;
    }
    sub.request(
        C1,
        3,
        Request::ClassSpawn {
            executable: exe.clone(),
            args: vec!["a".into()],
            target: SpawnTarget::Class("any".into()),
            output: Default::default(),
        },
    )
    .await;
    let process = match m1.recv().await {
        FromGlobal::Spawn {
            process,
            job: j,
            host,
            executable,
            ..
        } => {
            assert_eq!((j, host, &executable), (job, hosts[0], &exe));
            process
        }
        other => panic!("{other:?}"),
    };
    m1.send(&ToGlobal::Fetch {
        sha256: exe.sha256.clone(),
    })
    .await;
    // The store is the only source: the bytes come over a staging connection.
    assert_eq!(
        m1.recv().await,
        FromGlobal::FetchFrom {
            sha256: exe.sha256.clone(),
            source: StageSource::Global,
        }
    );
    assert!(d.dir.join("executables").join(&exe.sha256).is_file());
    let dest = d.dir.join("fetched-copy");
    let arrival = stage::Arrival::new();
    stage::fetch(stage::FetchSpec {
        towards: carmi_api::handshake::Towards::Global,
        addr: &d.addr.to_string(),
        secret: &Secret::new(SECRET).unwrap(),
        name: "m1",
        executable: &exe,
        dest: &dest,
        arrival: &arrival,
    })
    .await
    .expect("fetched from the store");
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    m1.send(&ToGlobal::Fetched {
        sha256: exe.sha256.clone(),
        source: StageSource::Global,
        result: Ok(()),
    })
    .await;
    m1.send(&ToGlobal::Fetch {
        sha256: "0".repeat(64),
    })
    .await;
    assert!(matches!(m1.recv().await, FromGlobal::NoExecutable { .. }));
    m1.send(&ToGlobal::Started {
        process,
        result: Ok(()),
    })
    .await;
    assert_eq!(
        sub.event(C1).await,
        Event::ProcessStarted {
            request: RequestId(3),
            process,
            host: hosts[0]
        }
    );
    m1.send(&ToGlobal::Exited {
        process,
        status: ExitStatus::Code(0),
        cpu_seconds: 0.25,
        usage: Default::default(),
    })
    .await;
    assert_eq!(
        sub.event(C1).await,
        Event::ProcessExited {
            request: RequestId(3),
            process,
            status: ExitStatus::Code(0),
            cpu_seconds: 0.25
        }
    );
    d.shutdown().await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_and_others_stay_served() {
    let d = Daemon::start_with(200, |c| c.max_queued = 8).await;
    // A machine with a large ad, so that each `MachineAds` answer is large.
    let mut m = d.connect(Role::Local { name: "big".into() }).await;
    let blob = "x".repeat(100_000);
    m.send(&ToGlobal::Advertise {
        ad: format!("[ Name = \"big\"; Mips = 10; Blob = \"{blob}\" ]"),
        slots: 1,
        running: vec![],
    })
    .await;
    assert!(matches!(m.recv().await, FromGlobal::Registered { .. }));

    // Asks for far more than the socket buffers and the queue hold, never reading.
    let asked = 3000;
    let mut stuck = d.connect(Role::Admin).await;
    for _ in 0..asked {
        // The daemon may hang up on it before it has asked everything.
        if write_frame(&mut stuck.w, &ToGlobal::MachineAds, &[])
            .await
            .is_err()
        {
            break;
        }
    }
    // Everyone else is still served meanwhile.
    let mut admin = d.connect(Role::Admin).await;
    admin.send(&ToGlobal::Status).await;
    assert!(matches!(admin.recv().await, FromGlobal::Pool(_)));

    // The stuck client finds its connection closed after what was buffered.
    let mut got = 0;
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(_)) = stuck.r.read::<FromGlobal>().await {
            got += 1;
        }
    })
    .await;
    assert!(closed.is_ok(), "the stuck connection was never closed");
    assert!(
        got < asked,
        "all {asked} answers were queued for a client that did not read"
    );
    admin.send(&ToGlobal::Status).await;
    assert!(matches!(admin.recv().await, FromGlobal::Pool(_)));
    d.shutdown().await;
}
