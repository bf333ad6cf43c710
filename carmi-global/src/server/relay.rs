//! A relay's link (`Role::Relay`, issue 36): many machines' links over one
//! connection. Each admitted machine gets a channel, served by the same
//! [`serve_link`] as a machine's own connection, over an in-memory pipe
//! whose far end this task feeds with the machine's bytes and drains into
//! [`RelayDown::Data`]: the router sees a link per machine, as before, while
//! this daemon holds one socket and one TLS session per relay.
//!
//! A relay's `Alive` (the machines whose heartbeats changed nothing) goes to
//! the router as one [`Cmd::Alive`] naming their links: one router step per
//! relay period instead of a decoded heartbeat per machine, which at 50,000
//! machines was 10,000 router steps a second.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use carmi_api::conn::{Conn, ConnReader};
use carmi_api::frame::FrameReader;
use carmi_api::msg::relay::{Chan, RelayDown, RelayUp};
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::proof::Presented;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::conn::serve_link;
use super::{Cmd, MAX_HEADER, Shared};
use crate::authority::{Admitted, Connected};
use crate::router::LinkId;

/// Bytes one channel's pipe holds in each direction: a machine's messages
/// are small, and 50,000 channels must not each hold a large buffer.
const PIPE_BYTES: usize = 64 * 1024;

/// Chunks of a machine's bytes waiting for its channel's pipe. A channel
/// whose machine's link does not read them (the router task is behind, or
/// the link is closing) is closed when this fills, not buffered without end.
const CHAN_QUEUE: usize = 1024;

/// Serves relay `name`'s link until the relay, its token, or the daemon ends
/// it; every channel's link ends with it (the router then hears each
/// machine's link close, as when a machine's own connection drops).
pub(super) async fn serve_relay(
    conn: Conn<RelayDown, RelayUp>,
    name: String,
    admitted: Option<Admitted>,
    peer: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    let (mut reader, mut writer) = conn.split();
    info!(%peer, relay = %name, "relay connected");
    let (down_tx, mut down_rx) = mpsc::channel(shared.max_queued.max(1));
    let mut relay = Relay {
        name: name.clone(),
        peer,
        shared: shared.clone(),
        stop: stop.clone(),
        chans: HashMap::new(),
        down: down_tx,
    };
    let mut stop_rx = stop;
    let ended = tokio::select! {
        r = relay.read(&mut reader) => r,
        r = writer.send_queued(&mut down_rx) => r.map_err(|e| format!("write failed: {e}")),
        reason = super::conn::until_invalid(&shared, admitted.as_ref(), false) => Err(reason),
        _ = stop_rx.changed() => Ok(()),
    };
    let open = relay.chans.len();
    // Dropping the channels' senders ends each machine's link in turn.
    drop(relay);
    match ended {
        Ok(()) => info!(%peer, relay = %name, open, "relay link closed"),
        Err(reason) => warn!(%peer, relay = %name, open, "closing relay link: {reason}"),
    }
    let _ = writer.shutdown().await;
}

/// One relay link's channels, as its reader sees them.
struct Relay {
    name: String,
    peer: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    /// Each open channel's way into its pipe, and its link's id.
    chans: HashMap<Chan, (mpsc::Sender<Bytes>, LinkId)>,
    /// To the relay, in order.
    down: mpsc::Sender<(RelayDown, Bytes)>,
}

impl Relay {
    /// Reads the relay's messages until it closes (`Ok`) or sends something
    /// unreadable (`Err`).
    async fn read(&mut self, reader: &mut ConnReader<RelayUp>) -> Result<(), String> {
        loop {
            let (msg, payload) = match reader.recv().await {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("bad frame: {e}")),
            };
            match msg {
                RelayUp::Certify { key } => self.certify(&key).await?,
                RelayUp::Admit {
                    chan,
                    role,
                    presented,
                    peer,
                } => self.admit(chan, role, presented, peer).await?,
                RelayUp::Data { chan } => self.feed(chan, payload).await?,
                RelayUp::Alive { chans } => self.alive(&chans),
                RelayUp::Closed { chan, reason } => {
                    debug!(relay = %self.name, chan, "machine's connection closed at the relay: {reason}");
                    self.chans.remove(&chan);
                }
            }
        }
    }

    async fn reply(&self, msg: RelayDown) -> Result<(), String> {
        (self.down.send((msg, Bytes::new())).await).map_err(|_| "the link is closing".to_string())
    }

    async fn certify(&self, key: &str) -> Result<(), String> {
        let cert = match &self.shared.auth {
            Some(auth) => auth.certify_relay(&self.name, key),
            None => {
                Err("this global RM has no pool signing key: its relays need no certificate".into())
            }
        };
        if let Err(e) = &cert {
            warn!(relay = %self.name, "cannot certify the relay's key: {e}");
        }
        self.reply(RelayDown::Certified { cert }).await
    }

    /// A machine at the relay asks in: its token checked here (where the
    /// revocations are known), and if admitted its channel opened.
    async fn admit(
        &mut self,
        chan: Chan,
        role: Role,
        presented: Option<String>,
        peer: String,
    ) -> Result<(), String> {
        let result = match self.admission(&role, presented.as_deref()) {
            Ok(connected) if !self.chans.contains_key(&chan) => {
                let (tx, rx) = mpsc::channel(CHAN_QUEUE);
                let link = self.shared.new_link();
                self.chans.insert(chan, (tx, link));
                let shared = self.shared.clone();
                let channel = Channel {
                    chan,
                    link,
                    role,
                    connected,
                    peer: self.peer,
                    down: self.down.clone(),
                };
                tokio::spawn(channel.run(shared, rx, self.stop.clone()));
                Ok(())
            }
            Ok(_) => Err(format!("channel {chan} is already open")),
            Err(reason) => {
                warn!(relay = %self.name, machine_at = %peer, "connection refused at the relay: {reason}");
                crate::metrics::METRICS.denied_connection();
                Err(reason)
            }
        };
        self.reply(RelayDown::Admitted { chan, result }).await
    }

    /// What admits a machine at the relay: a local RM's role, and in a
    /// pool with tokens, its token's proof (made for the global RM).
    fn admission(&self, role: &Role, presented: Option<&str>) -> Result<Option<Connected>, String> {
        if !matches!(role, Role::Local { .. }) {
            return Err("a relay carries local RMs' links only".into());
        }
        let Some(auth) = &self.shared.auth else {
            return Ok(None);
        };
        let shown = presented.map(Presented::decode).transpose()?;
        auth.admit_connection(role, shown.as_ref()).map(Some)
    }

    /// Passes bytes to `chan`'s pipe. A channel that is gone, or that does
    /// not take its bytes, is told closed to the relay.
    async fn feed(&mut self, chan: Chan, bytes: Bytes) -> Result<(), String> {
        let Some((tx, _)) = self.chans.get(&chan) else {
            return Ok(());
        };
        let reason = match tx.try_send(bytes) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.forget(chan);
                return Ok(());
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                format!("its link took none of the last {CHAN_QUEUE} chunks the relay sent")
            }
        };
        warn!(relay = %self.name, chan, "closing a machine's channel: {reason}");
        self.forget(chan);
        self.reply(RelayDown::Close { chan, reason }).await
    }

    fn forget(&mut self, chan: Chan) {
        self.chans.remove(&chan);
    }

    /// The machines on `chans` sent heartbeats that changed nothing: their
    /// links are heard from now, in one router step. A channel closed
    /// meanwhile is skipped; the router skips a link whose machine is not
    /// registered on it.
    fn alive(&self, chans: &[Chan]) {
        let links: Vec<LinkId> = (chans.iter())
            .filter_map(|chan| self.chans.get(chan).map(|&(_, link)| link))
            .collect();
        if !links.is_empty() {
            let at = tokio::time::Instant::now();
            let _ = self.shared.cmds.send(Cmd::Alive { links, at });
        }
    }
}

/// One machine's link through a relay.
struct Channel {
    chan: Chan,
    /// Its link's id, chosen by the relay's task to name it in `Alive`.
    link: LinkId,
    role: Role,
    /// Its token's identity and its place in that identity's count.
    connected: Option<Connected>,
    /// The relay's address (the machine's own is the relay's to know).
    peer: SocketAddr,
    down: mpsc::Sender<(RelayDown, Bytes)>,
}

impl Channel {
    /// Serves the link over a pipe until it ends, then tells the relay.
    async fn run(
        self,
        shared: Arc<Shared>,
        mut from_relay: mpsc::Receiver<Bytes>,
        stop: watch::Receiver<bool>,
    ) {
        let (near, far) = tokio::io::duplex(PIPE_BYTES);
        let (far_r, far_w) = tokio::io::split(far);
        let far_r: carmi_api::tls::Reader = Box::new(far_r);
        let far_w: carmi_api::tls::Writer = Box::new(far_w);
        let mut frames = FrameReader::with_max(far_r, shared.max_frame);
        frames.set_max_header(MAX_HEADER);
        frames.set_deadline(Some(shared.deadline));
        let conn = Conn::<FromGlobal, ToGlobal>::from_parts(frames, far_w);
        let (admitted, _place) = match self.connected {
            Some(c) => (Some(c.admitted), Some(c.place)),
            None => (None, None),
        };
        let (mut near_r, mut near_w) = tokio::io::split(near);
        let chan = self.chan;
        let done = tokio::sync::Notify::new();
        let link = async {
            serve_link(
                conn,
                Some(self.link),
                self.role,
                admitted,
                self.peer,
                &shared,
                stop,
            )
            .await;
            done.notify_one();
        };
        let into_pipe = async {
            tokio::select! {
                _ = async {
                    while let Some(bytes) = from_relay.recv().await {
                        if near_w.write_all(&bytes).await.is_err() {
                            break;
                        }
                    }
                } => {}
                _ = done.notified() => {}
            }
            // The link reads the end of its machine's bytes.
            let _ = near_w.shutdown().await;
        };
        let out_of_pipe = async {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n @ 1..) = near_r.read(&mut buf).await {
                let data = Bytes::copy_from_slice(&buf[..n]);
                if self
                    .down
                    .send((RelayDown::Data { chan }, data))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        };
        tokio::join!(link, into_pipe, out_of_pipe);
        let reason = "the global RM ended the machine's link".to_string();
        let _ = self
            .down
            .send((RelayDown::Close { chan, reason }, Bytes::new()))
            .await;
    }
}
