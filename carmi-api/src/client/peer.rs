//! Direct messages between application processes: one outgoing connection
//! (and one writer task, see `link.rs` for what `send` writes itself) per
//! peer this process sends to, and a listener that accepts the connections
//! of peers that send to it.
//!
//! Both are TLS (`crate::tls`) with the handshake bound to the session,
//! unless this process asked for plain peer connections
//! ([`super::ConnectOptions::plain_peers`]): then it opens its own in clear
//! and accepts peers either way.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::link::{self, Link, Outgoing};
use super::{Incoming, LOOKUP_TIMEOUT, Shared, lock};
use crate::conn::{ConnReader, ConnWriter};
use crate::frame::FrameReader;
use crate::handshake;
use crate::ids::{JobId, ProcessId};
use crate::msg::{PeerMessage, Request, Role};
use crate::tls::{Acceptor, Stream};

/// Why a peer's connection failed, and how many messages went with it.
struct PeerError {
    reason: String,
    lost: usize,
}

impl From<String> for PeerError {
    fn from(reason: String) -> PeerError {
        PeerError { reason, lost: 0 }
    }
}

/// Hands `item` to peer `to`'s link (written at once, or queued), starting
/// its writer task on first use.
pub(super) fn queue(shared: &Arc<Shared>, to: ProcessId, item: Outgoing) {
    // The map's lock is not held while writing: sends to other peers go on.
    let known = lock(&shared.peers).get(&to).cloned();
    let mut item = item;
    if let Some(link) = &known {
        match link.offer(item) {
            Ok(_) => return,
            Err(back) => item = back,
        }
    }
    let mut peers = lock(&shared.peers);
    match peers.get(&to) {
        // Another thread replaced the link meanwhile: use its link.
        Some(now) if known.as_ref().is_none_or(|k| !Arc::ptr_eq(k, now)) => match now.offer(item) {
            Ok(_) => return,
            Err(back) => item = back,
        },
        // Its task is gone without removing itself (it panicked): replace it.
        _ => {}
    }
    let (link, rx) = Link::new();
    let _ = link.offer(item);
    peers.insert(to, link.clone());
    shared.runtime.spawn(run(shared.clone(), to, link, rx));
}

/// A peer's writer task: finds the peer, connects, then writes its queue in
/// order until the client stops.
async fn run(
    shared: Arc<Shared>,
    to: ProcessId,
    link: Arc<Link>,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
) {
    let mut stop = shared.stop.clone();
    let result = tokio::select! {
        conn = open(&shared, to) => match conn {
            Ok(PeerWriter::Plain(socket)) => {
                let socket = Arc::new(socket);
                link.open_direct(socket.clone());
                let pumped = link::pump_plain(&link, &socket, &mut rx, &mut stop).await;
                link.close_direct();
                pumped.map_err(|(e, lost)| PeerError {
                    reason: format!("the connection broke: {e}"),
                    lost,
                })
            }
            Ok(PeerWriter::Tls(w)) => pump(&link, w, &mut rx, &mut stop).await,
            Err(reason) => Err(PeerError::from(reason)),
        },
        // Nobody is left to tell about messages that never found their peer.
        _ = stop.changed() => return,
    };
    if let Err(PeerError { reason, lost }) = result {
        // Removing the link under the lock guarantees that nothing more is
        // queued to it, so the count of dropped messages is exact.
        {
            let mut peers = lock(&shared.peers);
            if peers.get(&to).is_some_and(|l| Arc::ptr_eq(l, &link)) {
                peers.remove(&to);
            }
        }
        rx.close();
        let mut unsent = lost;
        while let Ok(item) = rx.try_recv() {
            if let Outgoing::Message(_) = item {
                unsent += 1;
            }
        }
        tracing::debug!(peer = %to, %reason, unsent, "direct messages failed");
        let _ = shared
            .events
            .send(Incoming::SendFailed { to, reason, unsent });
    }
}

/// Looks the peer up (once), connects and introduces this process.
async fn open(shared: &Shared, to: ProcessId) -> Result<PeerWriter, String> {
    let addr = endpoint_of(shared, to).await?;
    let stream = crate::net::dial(&addr, super::CONNECT_TIMEOUT)
        .await
        .map_err(|e| format!("cannot connect to process {to} at {addr}: {e}"))?;
    let fail = |e| format!("process {to} at {addr}: {e}");
    if shared.plain_peers {
        // In clear, the socket's own writing half, so that `send` can write
        // to it directly ([`Link`]).
        let (r, mut w) = stream.into_split();
        introduce(shared, r, &mut w, &[]).await.map_err(fail)?;
        return Ok(PeerWriter::Plain(w));
    }
    let opened = crate::tls::connect(stream);
    let Stream {
        reader: r,
        writer: mut w,
        binding,
    } = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, opened)
        .await
        .map_err(|_| format!("process {to} at {addr}: TLS: no answer in time"))?
        .map_err(|e| format!("process {to} at {addr}: TLS: {e}"))?;
    introduce(shared, r, &mut w, &binding).await.map_err(fail)?;
    // Nothing is ever read on this connection after the handshake.
    Ok(PeerWriter::Tls(ConnWriter::new(BufWriter::with_capacity(
        64 * 1024,
        w,
    ))))
}

/// Introduces this process on a fresh connection (the pool handshake,
/// bound to the TLS session by `binding`).
async fn introduce<R, W>(
    shared: &Shared,
    r: R,
    w: &mut W,
    binding: &[u8],
) -> Result<(), handshake::HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let role = Role::Peer {
        from: shared.process,
        job: shared.job,
    };
    let mut r = FrameReader::new(r);
    handshake::client_bound(&mut r, w, &shared.secret, &role, binding).await
}

/// Where `to` listens: from the cache, or else asked of the RM once.
async fn endpoint_of(shared: &Shared, to: ProcessId) -> Result<String, String> {
    if let Some(addr) = lock(&shared.endpoints).get(&to) {
        return Ok(addr.clone());
    }
    let id = shared.new_request_id();
    let (tx, rx) = oneshot::channel();
    // Registered before the request is queued, so that the answer (or the
    // RM's loss, see `Shared::set_rm_down`) cannot miss it.
    lock(&shared.lookups).insert(id, tx);
    shared.queue(super::rm::Command::Request {
        id,
        body: Request::LookupProcess { process: to },
    });
    let answer = tokio::time::timeout(LOOKUP_TIMEOUT, rx)
        .await
        .map_err(|_| {
            format!(
                "the local RM did not say where process {to} listens within {} s",
                LOOKUP_TIMEOUT.as_secs()
            )
        })?
        .map_err(|_| "the client is shutting down".to_string())?
        .map_err(|e| format!("cannot look up process {to}: {e}"))?;
    lock(&shared.endpoints).insert(to, answer.clone());
    Ok(answer)
}

/// The writing side of a connection to a peer.
enum PeerWriter {
    /// In clear: the socket's writing half, shared with direct writes.
    Plain(OwnedWriteHalf),
    /// Over TLS: frames gathered in a buffer, written by the task alone.
    Tls(ConnWriter<PeerMessage, BufWriter<crate::tls::Writer>>),
}

/// Writes queued items over TLS until the client stops: all that is
/// queued, then one flush.
async fn pump(
    link: &Link,
    mut w: ConnWriter<PeerMessage, BufWriter<crate::tls::Writer>>,
    rx: &mut mpsc::UnboundedReceiver<Outgoing>,
    stop: &mut tokio::sync::watch::Receiver<()>,
) -> Result<(), PeerError> {
    let broken = |e: std::io::Error, lost| PeerError {
        reason: format!("the connection broke: {e}"),
        lost,
    };
    while let Some(first) = link::next(rx, stop).await {
        let mut next_item = Some(first);
        let mut done = 0;
        while let Some(item) = next_item {
            match item {
                Outgoing::Message(mut frame) => {
                    w.send_frame(&mut frame).await.map_err(|e| broken(e, 1))?;
                }
                Outgoing::Flush(ack) => {
                    w.flush().await.map_err(|e| broken(e, 0))?;
                    let _ = ack.send(());
                }
            }
            done += 1;
            next_item = rx.try_recv().ok();
        }
        w.flush().await.map_err(|e| broken(e, 0))?;
        link.written(done);
    }
    let _ = w.shutdown().await;
    Ok(())
}

/// Accepts direct connections from peers until the client stops; each
/// connection is read by its own task, all of them ended with this one.
pub(super) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, tls: Acceptor) {
    let mut stop = shared.stop.clone();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(receive(shared.clone(), stream, tls.clone()));
                }
                Err(e) => {
                    // Out of file descriptors, typically: wait rather than spin.
                    tracing::warn!("accepting a peer connection failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
}

/// Only processes of the same job may message each other.
fn admit(role: &Role, job: JobId) -> Result<(), String> {
    match role {
        Role::Peer { job: theirs, .. } if *theirs == job => Ok(()),
        Role::Output { job: theirs, .. } if *theirs == job => Ok(()),
        Role::Output {
            process,
            job: theirs,
            ..
        } => Err(format!(
            "output of process {process} of job {theirs} is not for a process of job {job}"
        )),
        Role::Peer { from, job: theirs } => Err(format!(
            "process {from} of job {theirs} may not send to a process of job {job}"
        )),
        _ => Err("this endpoint accepts only direct messages from peer processes".into()),
    }
}

/// Reads one peer's messages onto the event stream, in order.
async fn receive(shared: Arc<Shared>, stream: TcpStream, tls: Acceptor) {
    let _ = stream.set_nodelay(true);
    let opened = tls.accept(stream, shared.plain_peers);
    let Stream {
        reader: r,
        writer: mut w,
        binding,
    } = match tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, opened).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!("refused a direct connection before its handshake: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!("a direct connection did not open TLS in time; closed");
            return;
        }
    };
    let mut r = FrameReader::new(r);
    let job = shared.job;
    let secret = &shared.secret;
    let hs = handshake::server_auth(&mut r, &mut w, secret, &binding, |role, _| admit(role, job));
    let from = match hs.await.map(|(role, ())| role) {
        Ok(Role::Peer { from, .. }) => from,
        Ok(Role::Output {
            process, request, ..
        }) => {
            let r = ConnReader::from_frames(r);
            return super::output::receive(shared, r, process, request).await;
        }
        Ok(_) => unreachable!("admit() lets only peers and output through"),
        Err(e) => {
            tracing::debug!("refused a peer connection: {e}");
            return;
        }
    };
    // A peer of the job, proved: its large messages arrive whole into one buffer.
    r.reserve_whole_frames();
    let mut r: ConnReader<PeerMessage, _> = ConnReader::from_frames(r);
    loop {
        match r.recv().await {
            Ok(Some((PeerMessage { tag }, data))) => {
                let message = Incoming::Message { from, tag, data };
                if shared.events.send(message).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(peer = %from, "dropping the connection from a peer: {e}");
                return;
            }
        }
    }
}
