//! The test harness shared by the daemon's integration tests: settings for a
//! local RM under test, helpers for application connections, and the test
//! kit's fake global RM (which speaks the real protocol over TCP on 127.0.0.1).

#![allow(dead_code)] // each test file uses its own part of the harness

use std::path::{Path, PathBuf};
use std::time::Duration;

use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::{ConnId, JobId, ProcessId};
use carmi_api::msg::{FromGlobal, FromLocal, Role, ToGlobal};
use carmi_api::tls::{Reader as OwnedReadHalf, Writer as OwnedWriteHalf};
use carmi_local::config::{Settings, parse_attr_arg};
use tokio::net::TcpStream;

pub const SECRET: &[u8] = carmi_testkit::FAKE_SECRET;
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

// The fake global RM and its connections are the test kit's.
pub use carmi_testkit::{FakeGlobal, GlobalConn};

/// The next message for an application, past the job credential an
/// attaching application is given before `Attached`.
pub async fn app_recv(r: &mut FrameReader<OwnedReadHalf>) -> FromLocal {
    loop {
        let msg = app_recv_any(r).await;
        if !matches!(msg, FromLocal::Credential { .. }) {
            return msg;
        }
    }
}

/// The next message for an application, whatever it is.
pub async fn app_recv_any(r: &mut FrameReader<OwnedReadHalf>) -> FromLocal {
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

/// A TLS connection to the local RM's application listener (the only kind
/// it takes), with the binding the handshake must prove over.
pub async fn open_app(
    app_addr: std::net::SocketAddr,
) -> (FrameReader<OwnedReadHalf>, OwnedWriteHalf, Vec<u8>) {
    let tcp = TcpStream::connect(app_addr).await.unwrap();
    let s = carmi_api::tls::connect(tcp).await.unwrap();
    (FrameReader::new(s.reader), s.writer, s.binding)
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
    let role = Role::Application {
        job: None,
        process: None,
        endpoint: "127.0.0.1:4711".into(),
    };
    let (mut r, mut w, binding) = open_app(app_addr).await;
    handshake::client_bound(&mut r, &mut w, &secret, &role, &binding)
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
