//! The connection to the global RM: connect, handshake as `Role::Local`,
//! relay frames both ways, and on any failure reconnect when the link's
//! core says ([`Reconnect`]: backoff from 100 ms doubling to 5 s, with
//! jitter so that a pool of local RMs does not reconnect in lockstep after
//! the global RM restarts).
//!
//! Each session tells the driver `GlobalUp` with a sender for outgoing
//! messages, and `GlobalDown` with the receiver, so that the driver can take
//! back whatever was queued but never written.
//!
//! The outgoing queue is bounded ([`GLOBAL_QUEUE`] messages by default).
//! What finds it full waits on the driver's side ([`GlobalLink`], which
//! carries out what the core's [`Outbox`] decides) and moves in as the
//! session writes; one that makes no progress for [`GLOBAL_STALL`] has
//! stopped reading: the driver ends the session ([`GlobalTx::kick`], which
//! also interrupts a write stuck on a full socket), keeps what was not
//! written, and reconnects.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use carmi_api::conn::{Conn, ConnWriter};
use carmi_api::frame::{FrameError, FrameReader};
use carmi_api::handshake::{self, Secret};
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::tls;
use carmi_local_core::link::{LAST_WORDS, LinkOutput, Outbox, Reconnect, Route};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use carmi_api::machinecert::MachineProver;

use crate::daemon_token::DaemonToken;
use crate::input::{GlobalTx, Input, Outgoing, stopped};

/// The reconnection delays, under their old paths (the link's core keeps them).
pub use carmi_local_core::link::{BACKOFF_MAX, BACKOFF_MIN};

/// How often a link that stays up has this machine's key certified anew
/// (a certificate lasts `carmi_api::machinecert::LIFETIME_S`, a week).
const RECERTIFY: Duration = Duration::from_secs(24 * 3600);

/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default for [`crate::config::Settings::global_queue`]: messages waiting
/// to be written to the global RM before it counts as not reading.
pub const GLOBAL_QUEUE: usize = 16 * 1024;

/// Default for [`crate::config::Settings::global_stall`]: how long a full
/// queue to the global RM may make no progress before the link is dropped.
pub const GLOBAL_STALL: Duration = Duration::from_secs(30);

/// Seconds since `epoch`: the time the link's core is given.
fn secs_since(epoch: Instant) -> f64 {
    epoch.elapsed().as_secs_f64()
}

/// The instant `t` seconds after `epoch`.
fn instant_at(epoch: Instant, t: f64) -> Instant {
    epoch + Duration::from_secs_f64(t.max(0.0))
}

/// The driver's side of the link to the global RM: the current session's
/// queue, and the core's [`Outbox`] deciding what waits for room in it and
/// when a session that stopped reading is ended.
///
/// Call order: [`GlobalLink::up`] on `GlobalUp`; [`GlobalLink::send`] for
/// every message; when [`GlobalLink::room`] resolves, [`GlobalLink::on_room`];
/// at [`GlobalLink::deadline`], [`GlobalLink::on_deadline`];
/// [`GlobalLink::down`] on `GlobalDown`, which returns every message not
/// written, in order.
pub(crate) struct GlobalLink {
    addr: String,
    stall: Duration,
    /// Time 0 of the outbox's clock.
    epoch: Instant,
    /// The session's queue, while the outbox says it is up.
    out: Option<GlobalTx>,
    outbox: Outbox<Outgoing>,
}

impl GlobalLink {
    /// No session yet. `addr` names the global RM in logs.
    pub fn new(addr: String, stall: Duration) -> GlobalLink {
        GlobalLink {
            addr,
            stall,
            epoch: Instant::now(),
            out: None,
            outbox: Outbox::new(stall),
        }
    }

    /// A session is up.
    pub fn up(&mut self, out: GlobalTx) {
        self.out = Some(out);
        self.outbox.on_up();
    }

    /// True while a session takes messages.
    pub fn is_up(&self) -> bool {
        self.outbox.is_up()
    }

    /// Queues a message without waiting: into the session's queue, behind
    /// those waiting for room, or (after a kick) with the unsent rest.
    pub fn send(&mut self, msg: ToGlobal, payload: Bytes) {
        let m = match self.outbox.send((msg, payload)) {
            Route::Queue(m) => m,
            Route::Kept => return,
            Route::NoLink((msg, _)) => {
                tracing::error!(
                    ?msg,
                    "message for the global RM without a connection; dropped"
                );
                return;
            }
        };
        let Some(out) = &self.out else {
            tracing::error!(msg = ?m.0, "the link is up without a session queue; dropped");
            return;
        };
        match out.tx.try_send(m) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(m)) => {
                self.outbox.on_full(m, secs_since(self.epoch))
            }
            // The session has ended; its GlobalDown, with what it had not written, is on the way.
            Err(mpsc::error::TrySendError::Closed(m)) => {
                self.out = None;
                self.outbox.on_closed(m);
            }
        }
    }

    /// Resolves when a waiting message can move into the queue (never while
    /// none waits); owns what it needs, so the driver can race it.
    pub fn room(&self) -> impl Future<Output = Option<mpsc::OwnedPermit<Outgoing>>> + 'static {
        let tx = match &self.out {
            Some(out) if self.outbox.wants_room() => Some(out.tx.clone()),
            _ => None,
        };
        async move {
            match tx {
                Some(tx) => tx.reserve_owned().await.ok(),
                None => std::future::pending().await,
            }
        }
    }

    /// The session wrote something: the oldest waiting message goes in, and
    /// the stall clock starts again.
    pub fn on_room(&mut self, permit: Option<mpsc::OwnedPermit<Outgoing>>) {
        let Some(permit) = permit else {
            return;
        };
        if let Some(m) = self.outbox.on_room(secs_since(self.epoch)) {
            permit.send(m);
        }
    }

    /// When the session counts as stalled, if messages are waiting.
    pub fn deadline(&self) -> Option<Instant> {
        let t = self.outbox.next_deadline()?;
        Some(instant_at(self.epoch, t))
    }

    /// The deadline passed: if the outbox says the global RM stopped
    /// reading, the session is ended (the link reconnects) and nothing
    /// unsent is lost.
    pub fn on_deadline(&mut self) {
        // The timer fired: the time is the deadline's at least, whatever
        // the rounding between the two clocks.
        let due = self.outbox.next_deadline().unwrap_or(0.0);
        let now = secs_since(self.epoch).max(due);
        if self.outbox.on_time(now) != Some(LinkOutput::Kick) {
            return;
        }
        let Some(out) = self.out.take() else {
            return;
        };
        tracing::error!(
            global = %self.addr,
            queued = out.tx.max_capacity(),
            waiting = self.outbox.waiting(),
            stall_ms = self.stall.as_millis() as u64,
            "the global RM stopped reading: its outgoing queue is full and did not move; dropping the connection to reconnect, unsent messages are kept"
        );
        out.kick.notify_one();
    }

    /// The session ended: every message it was given but did not write
    /// (`failed` first, then `rest`), then those that waited, in order.
    pub fn down(
        &mut self,
        failed: Option<Outgoing>,
        mut rest: mpsc::Receiver<Outgoing>,
    ) -> Vec<Outgoing> {
        self.out = None;
        let mut unwritten: Vec<Outgoing> = failed.into_iter().collect();
        while let Ok(m) = rest.try_recv() {
            unwritten.push(m);
        }
        self.outbox.on_down(unwritten)
    }
}

/// Where and who to connect as.
#[derive(Clone, Debug)]
pub(crate) struct GlobalConfig {
    pub addr: String,
    /// The pool secret (without token).
    pub secret: Secret,
    /// The daemon token presented at each connection, renewed over the link.
    pub token: DaemonToken,
    /// This machine's key, certified by the global RM at each link (in a
    /// pool with tokens).
    pub prover: Option<Arc<MachineProver>>,
    pub name: String,
    /// Capacity of each session's outgoing queue.
    pub queue: usize,
}

/// Keeps a connection to the global RM until `stop` turns true,
/// connecting again when the link's core says ([`Reconnect`]).
pub(crate) async fn run(
    cfg: GlobalConfig,
    inputs: mpsc::Sender<Input>,
    mut stop: watch::Receiver<bool>,
) {
    let epoch = Instant::now();
    let mut link = Reconnect::default();
    // Relays (or the global RM) in turn: one that is gone is skipped at the
    // next reconnection, so its machines come back through another.
    let addrs: Vec<&str> = cfg
        .addr
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    let mut attempt = 0usize;
    loop {
        if *stop.borrow() {
            break;
        }
        let addr = addrs
            .get(attempt % addrs.len().max(1))
            .copied()
            .unwrap_or(&cfg.addr);
        attempt = attempt.wrapping_add(1);
        let connected = tokio::select! {
            c = connect(&cfg, addr) => c,
            _ = stopped(&mut stop) => break,
        };
        let registered = match connected {
            Ok(conn) => {
                link.on_connected();
                tracing::info!(global = %addr, "connected to the global RM");
                let who = (cfg.queue, &cfg.token, cfg.prover.as_ref());
                session(conn, who, &inputs, &mut stop).await
            }
            Err(e) => {
                tracing::warn!(global = %addr, error = %e, "cannot connect to the global RM");
                false
            }
        };
        if *stop.borrow() {
            break;
        }
        let jitter = rand::random_range(0.0..=1.0);
        let delay = link.on_lost(secs_since(epoch), registered, jitter);
        tracing::info!(global = %addrs.get(attempt % addrs.len().max(1)).copied().unwrap_or(&cfg.addr), delay_ms = (delay * 1000.0) as u64, "reconnecting to the global RM");
        while let Some(at) = link.next_deadline() {
            tokio::select! {
                _ = tokio::time::sleep_until(instant_at(epoch, at)) => {}
                _ = stopped(&mut stop) => return,
            }
            // The timer fired: the time is the deadline's at least.
            let now = secs_since(epoch).max(at);
            if link.on_time(now) == Some(LinkOutput::Reconnect) {
                break;
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connection timed out")]
    Timeout,
    #[error("handshake: {0}")]
    Handshake(#[from] handshake::HandshakeError),
}

async fn connect(
    cfg: &GlobalConfig,
    addr: &str,
) -> Result<
    (
        FrameReader<tls::Reader>,
        tls::Writer,
        Option<std::net::IpAddr>,
    ),
    ConnectError,
> {
    let stream = carmi_api::net::dial(addr, CONNECT_TIMEOUT)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => ConnectError::Timeout,
            _ => e.into(),
        })?;
    let local_ip = stream.local_addr().ok().map(|a| a.ip());
    // TLS when presenting a daemon token (a pool with a signing key).
    let tls::Stream {
        reader,
        mut writer,
        binding,
    } = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, tls::connect(stream))
        .await
        .map_err(|_| ConnectError::Timeout)??;
    let mut reader = FrameReader::new(reader);
    let role = Role::Local {
        name: cfg.name.clone(),
    };
    // The token of the moment: a renewed one once the global RM sent it.
    let secret = cfg.secret.clone().with_token(cfg.token.get());
    handshake::client_bound(&mut reader, &mut writer, &secret, &role, &binding).await?;
    Ok((reader, writer, local_ip))
}

/// The session's writing half.
type Writer = ConnWriter<ToGlobal>;

/// Relays one connection; true if it got as far as `Registered`.
async fn session(
    (reader, w, local_ip): (
        FrameReader<tls::Reader>,
        tls::Writer,
        Option<std::net::IpAddr>,
    ),
    (queue, token, prover): (usize, &DaemonToken, Option<&Arc<MachineProver>>),
    inputs: &mpsc::Sender<Input>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let (mut reader, mut w) = Conn::<ToGlobal, FromGlobal>::from_parts(reader, w).split();
    let (tx, mut rx) = mpsc::channel::<Outgoing>(queue.max(1));
    let kick = Arc::new(Notify::new());
    // Weak: the session still ends when the driver drops its sender.
    let answers = tx.downgrade();
    // Asked before the ad goes out, so that the certificate is here by
    // the time the machine shows as registered; then daily, well within
    // its lifetime, for a link that stays up.
    certify(&tx, prover);
    let mut recertify = tokio::time::interval_at(Instant::now() + RECERTIFY, RECERTIFY);
    let out = GlobalTx {
        tx,
        kick: kick.clone(),
    };
    if inputs
        .send(Input::GlobalUp { out, local_ip })
        .await
        .is_err()
    {
        return false;
    }
    let mut registered = false;
    let mut failed = None;
    loop {
        // `recv` keeps partial frames in its buffer, so losing this race to
        // an outgoing message loses no bytes.
        tokio::select! {
            frame = reader.recv() => match on_frame(frame, (token, prover, &answers), inputs).await {
                Some(reg) => registered |= reg,
                None => break,
            },
            out = rx.recv() => match out {
                Some(m) => if let Err(m) = write(&mut w, m, &rx, &kick, stop).await {
                    failed = Some(m);
                    break;
                },
                None => break,
            },
            _ = recertify.tick() => if let Some(tx) = answers.upgrade() {
                certify(&tx, prover);
            },
            _ = kick.notified() => {
                tracing::warn!("the global RM stopped reading; dropping the connection to reconnect");
                break;
            }
            _ = stopped(stop) => {
                last_words(&mut w, &mut rx).await;
                break;
            }
        }
    }
    let _ = inputs.send(Input::GlobalDown { failed, rest: rx }).await;
    registered
}

/// Asks the global RM to certify this machine's key (in a pool with tokens).
fn certify(tx: &mpsc::Sender<Outgoing>, prover: Option<&Arc<MachineProver>>) {
    if let Some(p) = prover {
        let key = p.public().to_text();
        let _ = tx.try_send((ToGlobal::CertifyMachine { key }, Bytes::new()));
    }
}

/// Takes one frame from the global RM: a certificate and a renewed token
/// are the session's (the token saved here, then answered), the rest goes
/// to the driver. `Some(true)` for `Registered`, `None` when the session ends.
async fn on_frame(
    frame: Result<Option<(FromGlobal, Bytes)>, FrameError>,
    (token, prover, answers): (
        &DaemonToken,
        Option<&Arc<MachineProver>>,
        &mpsc::WeakSender<Outgoing>,
    ),
    inputs: &mpsc::Sender<Input>,
) -> Option<bool> {
    match frame {
        Ok(Some((FromGlobal::MachineCertified { cert }, _))) => {
            if let Some(p) = prover {
                p.certified(cert);
            }
            Some(false)
        }
        Ok(Some((FromGlobal::TokenRenewed { token: new }, _))) => {
            // Taken here, not by the driver: a file write, then
            // the answer, which lets the global RM revoke the old.
            let saved = token.renew(new).await;
            let answer = (ToGlobal::TokenTaken { saved }, Bytes::new());
            if let Some(tx) = answers.upgrade()
                && tx.try_send(answer).is_err()
            {
                tracing::warn!(
                    "no room to answer a renewed daemon token; the token it replaced stays live until it expires"
                );
            }
            Some(false)
        }
        Ok(Some((msg, payload))) => {
            let registered = matches!(msg, FromGlobal::Registered { .. });
            inputs.send(Input::Global(msg, payload)).await.ok()?;
            Some(registered)
        }
        Ok(None) => {
            tracing::warn!("the global RM closed the connection");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "bad frame from the global RM; dropping the connection");
            None
        }
    }
}

/// Writes one message (and flushes, if nothing follows it); gives it back
/// if it could not be written, which ends the session.
async fn write(
    w: &mut Writer,
    (msg, payload): Outgoing,
    rx: &mpsc::Receiver<Outgoing>,
    kick: &Notify,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), Outgoing> {
    // A global RM that stopped reading blocks this write; the driver's kick
    // must still end the session, and so must a shutdown (the driver sends
    // nothing more that would kick), after the same brief grace as the
    // last words.
    let give_up = async {
        stopped(stop).await;
        tokio::time::sleep(LAST_WORDS).await;
    };
    let written = tokio::select! {
        r = async {
            w.send(&msg, &payload).await?;
            // Over TLS, what the socket could not take waits
            // in the session until flushed.
            if rx.is_empty() { w.flush().await } else { Ok(()) }
        } => r.map_err(|e| e.to_string()),
        _ = kick.notified() => Err("the outgoing queue is full".to_string()),
        _ = give_up => Err("shutting down while the global RM was not reading".to_string()),
    };
    written.map_err(|e| {
        tracing::warn!(error = %e, "cannot write to the global RM; dropping the connection");
        (msg, payload)
    })
}

/// The daemon stops: what is queued (the exits of the processes killed at
/// shutdown) goes out, for at most [`LAST_WORDS`].
async fn last_words(w: &mut Writer, rx: &mut mpsc::Receiver<Outgoing>) {
    let flush = async {
        while let Ok((msg, payload)) = rx.try_recv() {
            w.send(&msg, &payload).await?;
        }
        w.flush().await
    };
    if let Ok(Err(e)) = tokio::time::timeout(LAST_WORDS, flush).await {
        tracing::warn!(error = %e, "cannot flush messages to the global RM at shutdown");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat(i: usize) -> Outgoing {
        let update = format!("N = {i}");
        (ToGlobal::Heartbeat { update }, Bytes::new())
    }

    #[tokio::test]
    async fn a_full_queue_waits_in_order_and_a_stall_ends_the_session_losing_nothing() {
        let (tx, mut rx) = mpsc::channel(2);
        let kick = Arc::new(Notify::new());
        let mut link = GlobalLink::new("global".into(), Duration::from_secs(30));
        link.up(GlobalTx {
            tx,
            kick: kick.clone(),
        });
        for i in 0..5 {
            let (m, p) = heartbeat(i);
            link.send(m, p);
        }
        assert!(
            link.deadline().is_some(),
            "three wait: the stall clock runs"
        );
        // The session writes one; the oldest waiting message takes its place.
        assert_eq!(rx.recv().await.unwrap(), heartbeat(0));
        let permit = link.room().await;
        link.on_room(permit);
        assert!(link.deadline().is_some(), "two still wait");
        // No more progress: the session is told to end, nothing is dropped.
        link.on_deadline();
        kick.notified().await;
        assert!(!link.is_up());
        let (m, p) = heartbeat(5);
        link.send(m, p);
        let unsent = link.down(None, rx);
        assert_eq!(unsent, (1..6).map(heartbeat).collect::<Vec<_>>());
        assert_eq!(link.deadline(), None);
    }
}
