//! The test harness shared by the daemon's integration tests: an in-process
//! fake global RM that speaks the real protocol over TCP on 127.0.0.1, and
//! helpers for application connections.

#![allow(dead_code)] // each test file uses its own part of the harness

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use carmi_api::frame::{FrameReader, write_frame};
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::{ConnId, HostId, JobId, ProcessId};
use carmi_api::msg::{FromGlobal, FromLocal, Role, ToGlobal};
use carmi_local::config::{Settings, parse_attr_arg};
use classad::ClassAd;
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

pub const SECRET: &[u8] = b"integration-test-secret-0123456789";
pub const WAIT: Duration = Duration::from_secs(10);

pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "carmi-local-it-{tag}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

/// The fake global RM's listening side.
pub struct FakeGlobal {
    listener: TcpListener,
    secret: Secret,
}

/// One connection from the local RM, seen from the fake global RM.
pub struct GlobalConn {
    pub r: FrameReader<OwnedReadHalf>,
    pub w: OwnedWriteHalf,
}

impl FakeGlobal {
    pub async fn new() -> FakeGlobal {
        FakeGlobal {
            listener: TcpListener::bind("127.0.0.1:0").await.unwrap(),
            secret: Secret::new(SECRET).unwrap(),
        }
    }

    pub fn addr(&self) -> String {
        self.listener.local_addr().unwrap().to_string()
    }

    /// Accepts the local RM, checks its role, and returns the connection.
    pub async fn accept(&self, name: &str) -> GlobalConn {
        let (stream, _) = tokio::time::timeout(WAIT, self.listener.accept())
            .await
            .expect("the local RM connects")
            .unwrap();
        let (r, mut w) = stream.into_split();
        let mut r = FrameReader::new(r);
        let role = handshake::server(&mut r, &mut w, &self.secret)
            .await
            .unwrap();
        assert_eq!(role, Role::Local { name: name.into() });
        GlobalConn { r, w }
    }
}

impl GlobalConn {
    /// The next message other than a heartbeat.
    pub async fn recv(&mut self) -> (ToGlobal, Bytes) {
        loop {
            let m = self.recv_any().await;
            // Heartbeats and the staging endpoint come at any time.
            if !matches!(
                m.0,
                ToGlobal::Heartbeat { .. } | ToGlobal::StageServe { .. }
            ) {
                return m;
            }
        }
    }

    pub async fn recv_any(&mut self) -> (ToGlobal, Bytes) {
        tokio::time::timeout(WAIT, self.r.read::<ToGlobal>())
            .await
            .expect("a message from the local RM in time")
            .unwrap()
            .expect("the local RM keeps the connection open")
    }

    pub async fn send(&mut self, msg: FromGlobal, payload: &[u8]) {
        write_frame(&mut self.w, &msg, payload).await.unwrap();
    }

    /// Reads the advertisement and registers `hosts`.
    pub async fn register(&mut self, hosts: &[u64]) -> (ClassAd, Vec<ProcessId>) {
        let (msg, _) = self.recv().await;
        let ToGlobal::Advertise { ad, slots, running } = msg else {
            panic!("expected Advertise, got {msg:?}");
        };
        assert_eq!(slots as usize, hosts.len());
        let ad = ClassAd::parse(&ad).expect("the ad is new-syntax ClassAd text");
        self.send(
            FromGlobal::Registered {
                hosts: hosts.iter().map(|h| HostId(*h)).collect(),
                heartbeat_ms: 100,
            },
            &[],
        )
        .await;
        (ad, running)
    }
}

pub async fn app_recv(r: &mut FrameReader<OwnedReadHalf>) -> FromLocal {
    tokio::time::timeout(WAIT, r.read::<FromLocal>())
        .await
        .expect("a message for the application in time")
        .unwrap()
        .expect("the connection stays open")
        .0
}

pub fn settings(global: &FakeGlobal, dir: &Path, name: &str) -> Settings {
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, SECRET).unwrap();
    let mut s = Settings::new(global.addr(), secret_file);
    s.name = name.into();
    s.slots = Some(2);
    s.work_dir = dir.join("work");
    s.benchmark = false;
    // Terminals in use on the test machine must not close it.
    s.owner_source = carmi_local::config::OwnerSource::Simulated;
    s.kill_grace = Duration::from_millis(500);
    s.attributes
        .push(parse_attr_arg("HasTestTools = true").unwrap());
    s
}

/// An application connection to the local RM, attached as process
/// `process` of job `job` (the fake global RM answers its `AppAttach`);
/// returns the connection halves and its connection id at the local RM.
pub async fn attach_app(
    app_addr: std::net::SocketAddr,
    g: &mut GlobalConn,
    job: u64,
    process: u64,
) -> (FrameReader<OwnedReadHalf>, OwnedWriteHalf, ConnId) {
    let secret = Secret::new(SECRET).unwrap();
    let (r, mut w) = TcpStream::connect(app_addr).await.unwrap().into_split();
    let mut r = FrameReader::new(r);
    let role = Role::Application {
        job: None,
        process: None,
        endpoint: "127.0.0.1:4711".into(),
    };
    handshake::client(&mut r, &mut w, &secret, &role)
        .await
        .unwrap();
    let (msg, _) = g.recv().await;
    let ToGlobal::AppAttach { conn, .. } = msg else {
        panic!("expected AppAttach, got {msg:?}");
    };
    let (job, process) = (JobId(job), ProcessId(process));
    g.send(FromGlobal::Attached { conn, job, process }, &[])
        .await;
    assert_eq!(app_recv(&mut r).await, FromLocal::Attached { job, process });
    (r, w, conn)
}
