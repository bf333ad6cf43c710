//! Where the dashboard's connections come from: HTTPS by default, so that
//! the `read` token a browser presents and the pool's state it receives
//! never cross the network in clear; clear HTTP only when asked for
//! (`--http-plain`, loopback only).
//!
//! The certificate is made in memory when the daemon starts (as every
//! daemon's, `carmi_api::tls`): a person never makes one. It is self-signed,
//! so a browser warns once; the daemon logs its SHA-256 fingerprint to
//! compare with what the browser shows.
//!
//! TLS handshakes run on tasks of their own, and only finished connections
//! reach axum: a client that opens a connection and stays silent holds up
//! nobody (and is dropped after [`HANDSHAKE_TIMEOUT`]). At most
//! [`HANDSHAKE_LIMITS`] handshakes are in progress at once (a [`Gate`], as
//! the daemons' ports have): past them the oldest gives way, so a flood of
//! silent connections costs a bounded number of tasks and sockets. A request in clear
//! on the HTTPS port gets a short text naming the `https://` address, never
//! a page, and its connection is closed.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use carmi_api::gate::{ConnLimits, Gate, Refusal};
use carmi_api::tls::{Acceptor, TLS_HANDSHAKE_BYTE};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tracing::{info, warn};

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Caps on the dashboard's TLS handshakes in progress (a finished one no
/// longer counts): a browser opens a handful at once.
pub const HANDSHAKE_LIMITS: ConnLimits = ConnLimits {
    max_connections: 256,
    max_handshaking: 256,
    max_handshaking_per_addr: 64,
};

/// A connection as axum serves it: TLS or, with `--http-plain`, TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The client's address, as the request guard sees it.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, Incoming>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Incoming>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// The dashboard's listener, handing axum connections whose TLS handshake
/// is done (or plain ones, without TLS).
pub struct Incoming {
    ready: mpsc::Receiver<(Box<dyn Io>, SocketAddr)>,
    local: SocketAddr,
    accepting: AbortHandle,
}

impl Incoming {
    /// Accepts on `listener`, opening TLS with `tls` (or none: clear HTTP).
    pub fn new(listener: TcpListener, tls: Option<Acceptor>) -> io::Result<Incoming> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let accepting = tokio::spawn(accept(listener, tls, tx, local)).abort_handle();
        Ok(Incoming {
            ready,
            local,
            accepting,
        })
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Listener for Incoming {
    type Io = Box<dyn Io>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Box<dyn Io>, SocketAddr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task is gone (aborted on drop): nothing comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Accepts connections and opens each on a task of its own.
async fn accept(
    listener: TcpListener,
    tls: Option<Acceptor>,
    ready: mpsc::Sender<(Box<dyn Io>, SocketAddr)>,
    local: SocketAddr,
) {
    let gate = Gate::new(HANDSHAKE_LIMITS);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors, mostly: wait rather than spin.
                warn!("the dashboard cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(tls) = tls.clone() else {
            if ready.send((Box::new(tcp), peer)).await.is_err() {
                return;
            }
            continue;
        };
        let ticket = match gate.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(Refusal(why)) => {
                gate.note_refusal(peer.ip(), &why);
                continue;
            }
        };
        let ready = ready.clone();
        tokio::spawn(async move {
            let opened = tokio::select! {
                opened = tokio::time::timeout(HANDSHAKE_TIMEOUT, open(tcp, &tls, local)) => opened,
                () = ticket.evicted() => {
                    info!(%peer, "dashboard: a TLS handshake dropped for newer ones");
                    return;
                }
            };
            // Its place is for handshakes: axum serves the connection now.
            drop(ticket);
            match opened {
                Ok(Ok(Some(stream))) => {
                    let _ = ready.send((stream, peer)).await;
                }
                Ok(Ok(None)) => {
                    warn!(%peer, "dashboard: a request in clear HTTP refused (this port speaks HTTPS only)");
                }
                Ok(Err(e)) => info!(%peer, "dashboard: TLS handshake failed: {e}"),
                Err(_) => info!(%peer, "dashboard: no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
            }
        });
    }
}

/// Opens TLS on `tcp`; `None` when the client spoke in clear (it is told
/// where the dashboard is, in a text that holds nothing of the pool).
async fn open(
    tcp: TcpStream,
    tls: &Acceptor,
    local: SocketAddr,
) -> io::Result<Option<Box<dyn Io>>> {
    let mut first = [0u8; 1];
    let n = tcp.peek(&mut first).await?;
    if n == 1 && first[0] == TLS_HANDSHAKE_BYTE {
        return Ok(Some(Box::new(tls.accept_whole(tcp).await?)));
    }
    let why = format!(
        "this dashboard speaks HTTPS only: open https://{local}/ (a token sent in clear may have \
         been seen on the way: revoke it with `carmi token revoke` and make another)\n"
    );
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{why}",
        why.len()
    );
    // The request is read (and dropped) first, and the client's close
    // awaited after the answer: closing on unread bytes would reset the
    // connection and the client might never see why.
    let mut tcp = tcp;
    let mut request = vec![0u8; 16 * 1024];
    let _ = tcp.read(&mut request).await?;
    tcp.write_all(answer.as_bytes()).await?;
    tcp.shutdown().await?;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while tcp.read(&mut request).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    Ok(None)
}
