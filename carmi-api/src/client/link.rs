//! The sending side of one peer connection: a queue that the peer's writer
//! task drains, and, on a connection in clear with nothing queued, a write
//! straight to the socket from [`super::Carmi::send`] itself.
//!
//! The direct write saves the hop to the writer task (a wake-up on another
//! thread per message) when messages go out one at a time, as a reply does.
//! Order is kept by one rule: `send` writes directly only while no item
//! handed to the writer task is still unwritten ([`State::queued`] is zero),
//! and it checks that and writes under the same lock under which the task
//! counts its items written. A message the socket takes only in part (its
//! buffer is full) is queued with what is left, and everything after it
//! queues behind it; the queue stays the back-pressure it always was.

use std::io::IoSlice;
use std::sync::{Arc, Mutex};

use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};

use super::lock;
use crate::conn::OutFrame;
use crate::msg::PeerMessage;

/// Work for a peer's writer task.
pub(super) enum Outgoing {
    /// A message to write: its frame, of which a direct write may have
    /// written a first part already.
    Message(OutFrame<PeerMessage>),
    /// Acknowledge once everything before it has been written out.
    Flush(oneshot::Sender<()>),
}

impl Outgoing {
    /// A message with `tag` and body `data`.
    pub(super) fn message(tag: u32, data: bytes::Bytes) -> Outgoing {
        Outgoing::Message(OutFrame::new(&PeerMessage { tag }, data))
    }
}

/// What became of an item offered to a [`Link`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Offered {
    /// Written to the socket (a flush: acknowledged) at once.
    Written,
    /// Queued for the writer task.
    Queued,
}

/// Most frames gathered into one vectored write by the writer task (two
/// slices each; the kernel takes at most 1024 slices per call).
const BATCH: usize = 64;

/// One peer's outgoing side, shared by every `send` (from any thread) and
/// the peer's writer task.
pub(super) struct Link {
    tx: mpsc::UnboundedSender<Outgoing>,
    state: Mutex<State>,
}

/// What `send` and the writer task agree on, under [`Link::state`].
#[derive(Default)]
struct State {
    /// Items handed to the writer task that it has not finished yet.
    queued: usize,
    /// The connection's socket, while it is open in clear: set by the writer
    /// task once the handshake is done, cleared when the connection fails or
    /// the client stops.
    direct: Option<Arc<OwnedWriteHalf>>,
}

impl Link {
    /// A link and the receiving end of its queue, for the writer task.
    pub(super) fn new() -> (Arc<Link>, mpsc::UnboundedReceiver<Outgoing>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let link = Link {
            tx,
            state: Mutex::new(State::default()),
        };
        (Arc::new(link), rx)
    }

    /// Writes `item` to the socket now if it can (nothing ahead of it, the
    /// socket open in clear and taking all of it), else queues it for the
    /// writer task. `Err` gives the item back when the task is gone.
    pub(super) fn offer(&self, item: Outgoing) -> Result<Offered, Outgoing> {
        let mut st = lock(&self.state);
        let item = match item {
            Outgoing::Message(mut frame) if st.queued == 0 => {
                if let Some(socket) = &st.direct {
                    match frame.try_write(socket) {
                        Ok(true) => return Ok(Offered::Written),
                        // The socket's buffer is full: the task writes the rest.
                        Ok(false) => {}
                        // The task meets the same error on the same socket
                        // and reports it with this message counted as lost.
                        Err(_) => st.direct = None,
                    }
                }
                Outgoing::Message(frame)
            }
            // Everything before it is with the kernel already.
            Outgoing::Flush(ack) if st.queued == 0 && st.direct.is_some() => {
                let _ = ack.send(());
                return Ok(Offered::Written);
            }
            other => other,
        };
        self.tx.send(item).map_err(|e| e.0)?;
        st.queued += 1;
        Ok(Offered::Queued)
    }

    /// From now on (once the queue is empty) `send` may write to `socket` directly.
    pub(super) fn open_direct(&self, socket: Arc<OwnedWriteHalf>) {
        lock(&self.state).direct = Some(socket);
    }

    /// No more direct writes: the connection failed or is closing.
    pub(super) fn close_direct(&self) {
        lock(&self.state).direct = None;
    }

    /// The writer task finished `n` of the items queued to it.
    pub(super) fn written(&self, n: usize) {
        let mut st = lock(&self.state);
        st.queued = st.queued.saturating_sub(n);
    }
}

/// The next item of the queue, or `None` once the client stops.
pub(super) async fn next(
    rx: &mut mpsc::UnboundedReceiver<Outgoing>,
    stop: &mut tokio::sync::watch::Receiver<()>,
) -> Option<Outgoing> {
    tokio::select! {
        biased;
        item = rx.recv() => item,
        _ = stop.changed() => None,
    }
}

/// Writes queued items to a connection in clear until the client stops,
/// each batch of them in vectored writes (see [`write_batch`]). On an
/// error, how many messages were lost with it.
pub(super) async fn pump_plain(
    link: &Link,
    socket: &OwnedWriteHalf,
    rx: &mut mpsc::UnboundedReceiver<Outgoing>,
    stop: &mut tokio::sync::watch::Receiver<()>,
) -> Result<(), (std::io::Error, usize)> {
    let mut batch = Vec::new();
    while let Some(first) = next(rx, stop).await {
        gather(first, rx, &mut batch);
        let n = batch.len();
        write_batch(socket, &mut batch).await?;
        link.written(n);
    }
    Ok(())
}

/// Writes a batch of items to a socket in clear: all frames gathered into
/// vectored writes, waiting whenever the socket is full; then acknowledges
/// the flushes in it. On an error, how many of its messages were not
/// written whole.
pub(super) async fn write_batch(
    socket: &OwnedWriteHalf,
    batch: &mut Vec<Outgoing>,
) -> Result<(), (std::io::Error, usize)> {
    let unfinished = |batch: &[Outgoing]| {
        batch
            .iter()
            .filter(|i| matches!(i, Outgoing::Message(f) if !f.is_done()))
            .count()
    };
    loop {
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(2 * batch.len());
        for item in batch.iter() {
            if let Outgoing::Message(frame) = item {
                frame.slices(&mut slices);
            }
        }
        if slices.is_empty() {
            break;
        }
        let written = match socket.try_write_vectored(&slices) {
            Ok(0) => Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        };
        drop(slices);
        let mut n = match written {
            Ok(n) => n,
            Err(e) => return Err((e, unfinished(batch))),
        };
        if n == 0 {
            socket
                .writable()
                .await
                .map_err(|e| (e, unfinished(batch)))?;
            continue;
        }
        for item in batch.iter_mut() {
            if let Outgoing::Message(frame) = item {
                n -= frame.advance(n);
                if n == 0 {
                    break;
                }
            }
        }
    }
    for item in batch.drain(..) {
        if let Outgoing::Flush(ack) = item {
            let _ = ack.send(());
        }
    }
    Ok(())
}

/// Takes the first item and whatever else is queued behind it, up to [`BATCH`].
pub(super) fn gather(
    first: Outgoing,
    rx: &mut mpsc::UnboundedReceiver<Outgoing>,
    batch: &mut Vec<Outgoing>,
) {
    batch.push(first);
    while batch.len() < BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
