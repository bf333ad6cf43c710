//! A global RM inside the test process.
//!
//! It speaks the real handshake and frames over TLS (or in clear, as the
//! real one takes both) on 127.0.0.1, so that a local RM (or the `carmi`
//! tool) under test talks to it as to the real one,
//! while the test decides every answer: either step by step on a
//! [`GlobalConn`], or with a function answering each admin request.

use std::time::Duration;

use bytes::Bytes;
use carmi_api::conn::Conn;
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::{HostId, ProcessId};
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::tls;
use classad::ClassAd;
use tokio::net::{TcpListener, TcpStream};

/// The secret a [`FakeGlobal::new`] pool uses.
pub const FAKE_SECRET: &[u8] = b"integration-test-secret-0123456789";

/// How long the fake waits for a connection or a message before failing the test.
pub const FAKE_WAIT: Duration = Duration::from_secs(10);

/// The fake global RM's listening side.
pub struct FakeGlobal {
    listener: TcpListener,
    secret: Secret,
}

/// One connection to the fake global RM, seen from its side.
pub struct GlobalConn {
    /// The connection, from the global RM's side.
    pub conn: Conn<FromGlobal, ToGlobal, tls::Reader, tls::Writer>,
}

/// `stream` past TLS (if it opens with it) and the pool handshake: the
/// connection and the role the client proved.
async fn open(
    stream: TcpStream,
    secret: &Secret,
) -> Result<(Conn<FromGlobal, ToGlobal, tls::Reader, tls::Writer>, Role), String> {
    let acceptor = tls::Acceptor::shared()?;
    let s = acceptor
        .accept(stream, true)
        .await
        .map_err(|e| e.to_string())?;
    let mut conn = Conn::new(s.reader, s.writer);
    let (r, w) = conn.parts_mut();
    let (role, ()) = handshake::server_auth(r, w, secret, &s.binding, |_, _| Ok(()))
        .await
        .map_err(|e| e.to_string())?;
    Ok((conn, role))
}

impl FakeGlobal {
    /// Listens on a free port of 127.0.0.1 with [`FAKE_SECRET`].
    pub async fn new() -> FakeGlobal {
        FakeGlobal::with_secret(FAKE_SECRET).await
    }

    /// Listens on a free port of 127.0.0.1 with `secret`.
    pub async fn with_secret(secret: &[u8]) -> FakeGlobal {
        FakeGlobal {
            listener: TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1:0"),
            secret: Secret::new(secret).expect("a usable test secret"),
        }
    }

    /// `host:port` to give the peer.
    pub fn addr(&self) -> String {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
            .to_string()
    }

    /// Accepts the local RM `name`, checks its role, and returns the connection.
    pub async fn accept(&self, name: &str) -> GlobalConn {
        let (stream, _) = tokio::time::timeout(FAKE_WAIT, self.listener.accept())
            .await
            .expect("the local RM connects")
            .expect("accept a connection");
        let (conn, role) = open(stream, &self.secret)
            .await
            .expect("the local RM's handshake");
        assert_eq!(role, Role::Local { name: name.into() });
        GlobalConn { conn }
    }

    /// Serves admins from now on, in a task: each connection's request (after
    /// any `Upload`) gets `answer(request)`. Connections that fail the
    /// handshake are dropped; a role other than admin fails the test.
    pub fn answer_admins(self, answer: impl Fn(ToGlobal) -> FromGlobal + Send + 'static) {
        tokio::spawn(async move {
            loop {
                let (stream, _) = self.listener.accept().await.expect("accept an admin");
                let mut conn = match open(stream, &self.secret).await {
                    Ok((conn, Role::Admin)) => conn,
                    Ok((_, role)) => panic!("expected an admin, got {role:?}"),
                    Err(_) => continue,
                };
                let mut msg = read_request(&mut conn).await;
                if let ToGlobal::Upload { .. } = msg {
                    msg = read_request(&mut conn).await;
                }
                conn.send(&answer(msg), &[]).await.expect("send the answer");
                conn.flush().await.expect("flush the answer");
            }
        });
    }
}

async fn read_request(conn: &mut Conn<FromGlobal, ToGlobal, tls::Reader, tls::Writer>) -> ToGlobal {
    conn.recv()
        .await
        .expect("a well-formed frame")
        .expect("a request before the admin hangs up")
        .0
}

impl GlobalConn {
    /// The next message other than a heartbeat or a staging endpoint (both
    /// come at any time).
    pub async fn recv(&mut self) -> (ToGlobal, Bytes) {
        loop {
            let m = self.recv_any().await;
            if !matches!(
                m.0,
                ToGlobal::Heartbeat { .. } | ToGlobal::StageServe { .. }
            ) {
                return m;
            }
        }
    }

    /// The next message, whatever it is.
    pub async fn recv_any(&mut self) -> (ToGlobal, Bytes) {
        tokio::time::timeout(FAKE_WAIT, self.conn.recv())
            .await
            .expect("a message from the local RM in time")
            .expect("a well-formed frame")
            .expect("the local RM keeps the connection open")
    }

    /// Sends `msg` with `payload`.
    pub async fn send(&mut self, msg: FromGlobal, payload: &[u8]) {
        self.conn
            .send(&msg, payload)
            .await
            .expect("send to the local RM");
        // Over TLS, what the socket could not take yet waits until flushed.
        self.conn.flush().await.expect("flush to the local RM");
    }

    /// Reads the local RM's advertisement and registers its slots as `hosts`.
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
