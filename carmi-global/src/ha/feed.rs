//! The active manager's side of replication: a connection to each standby,
//! a whole copy of the state when one (re)joins, then every journal append
//! sent to all and waited for ([`Feed`] is the journal's
//! [`Mirror`](crate::journal::Mirror)). A standby that does not acknowledge
//! within [`ACK_TIMEOUT`] is dropped from the in-sync set, in the lease file,
//! before anything more is acknowledged to a client: it then copies the
//! whole state again, and cannot take over meanwhile.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use carmi_api::conn::Conn;
use carmi_api::handshake::{self, Secret};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::files::{self, Listing};
use super::lease::{Lease, LeaseInfo, RENEW_PERIOD};
use super::wire::{MAX_FRAME, ToActive, ToStandby, role};

/// How long an append waits for an in-sync standby's acknowledgement
/// before dropping it from the in-sync set.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long between attempts to reach a standby that is away.
const RECONNECT: Duration = Duration::from_secs(1);
/// The active steps down when its lease was last rewritten this long ago:
/// a write to shared storage that hangs (an NFS hard mount cut off from its
/// server) must not leave it serving after the server gave the lock away.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(5);

/// A standby as the active sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerState {
    /// Not connected (or dropped).
    Away,
    /// Receiving its whole copy; in sync once it acknowledges `Synced`.
    Joining { synced_seq: u64 },
    /// Holds every record the active acknowledged.
    InSync,
}

struct Peer {
    name: String,
    state: PeerState,
    tx: Option<mpsc::UnboundedSender<(ToStandby, Bytes)>>,
    acked: u64,
    /// Which connection `tx` belongs to: acknowledgements of an older one are ignored.
    session: u64,
}

struct Inner {
    seq: u64,
    records: u64,
    files: Listing,
    peers: Vec<Peer>,
    sessions: u64,
}

impl Inner {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Queues `msg` to every standby that is joining or in sync.
    fn send_all(&mut self, msg: &ToStandby, payload: &Bytes) {
        for p in &mut self.peers {
            if let Some(tx) = &p.tx
                && tx.send((msg.clone(), payload.clone())).is_err()
            {
                p.tx = None;
            }
        }
    }

    fn in_sync_names(&self) -> Vec<String> {
        self.peers
            .iter()
            .filter(|p| p.state == PeerState::InSync)
            .map(|p| p.name.clone())
            .collect()
    }
}

/// What the active manager replicates with.
pub struct FeedConfig {
    /// The state directory.
    pub state_dir: PathBuf,
    /// The standbys' replication addresses (`--ha-peers`).
    pub peers: Vec<String>,
    /// The replication link's secret (derived from the pool key).
    pub secret: Secret,
}

/// The replication of the active manager's state to its standbys.
pub struct Feed {
    inner: Mutex<Inner>,
    /// What the lease file says: taken alone (renewals never wait behind a
    /// copy to a standby), or after `inner`.
    info: Mutex<LeaseInfo>,
    /// When the lease was last rewritten, in milliseconds since `born`.
    renewed_ms: AtomicU64,
    born: Instant,
    acked: Condvar,
    lease: Lease,
    dir: PathBuf,
    secret: Secret,
}

/// The lease could not be renewed, or the in-sync set not recorded: this
/// manager may no longer be the only active one, and stops.
fn step_down(why: &str) -> ! {
    tracing::error!(
        "stepping down: {why}; exiting so that a standby may take over (restarted, this manager stands by)"
    );
    std::process::exit(75)
}

impl Feed {
    /// Starts replicating to `config.peers` under `lease` (whose file says
    /// `info`), with a task per standby and one renewing the lease.
    pub fn start(config: FeedConfig, lease: Lease, info: LeaseInfo) -> Arc<Feed> {
        let files = files::scan(&config.state_dir).unwrap_or_default();
        let peers = config
            .peers
            .iter()
            .map(|name| Peer {
                name: name.clone(),
                state: PeerState::Away,
                tx: None,
                acked: 0,
                session: 0,
            })
            .collect();
        let feed = Arc::new(Feed {
            inner: Mutex::new(Inner {
                seq: 0,
                records: 0,
                files,
                peers,
                sessions: 0,
            }),
            info: Mutex::new(info),
            acked: Condvar::new(),
            renewed_ms: Default::default(),
            born: Instant::now(),
            lease,
            dir: config.state_dir,
            secret: config.secret,
        });
        for (index, addr) in config.peers.into_iter().enumerate() {
            tokio::spawn(feed.clone().follow(index, addr));
        }
        tokio::spawn(feed.clone().renew());
        tokio::spawn(feed.clone().watchdog());
        feed
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the in-sync set in the lease file, or steps down.
    fn record_in_sync(&self, inner: &mut Inner) {
        let names = inner.in_sync_names();
        self.write_lease(Some(names), "write");
    }

    /// Rewrites the lease file (with a new in-sync set, if given), or steps down.
    fn write_lease(&self, in_sync: Option<Vec<String>>, what: &str) {
        let mut info = self.info.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(names) = in_sync {
            info.in_sync = names;
        }
        info.renewed_unix = unix_now();
        if let Err(e) = self.lease.write(&info) {
            step_down(&format!(
                "cannot {what} the lease {}: {e}",
                self.lease.path().display()
            ));
        }
        self.note_renewed();
    }

    fn note_renewed(&self) {
        let ms = self.born.elapsed().as_millis() as u64;
        self.renewed_ms.store(ms, Ordering::Relaxed);
    }

    /// Steps down when the lease has not been rewritten for [`RENEW_DEADLINE`]
    /// (the write hangs): checked apart from the writes, which may never return.
    async fn watchdog(self: Arc<Feed>) {
        let mut tick = tokio::time::interval(RENEW_PERIOD);
        loop {
            tick.tick().await;
            let last = Duration::from_millis(self.renewed_ms.load(Ordering::Relaxed));
            let since = self.born.elapsed().saturating_sub(last);
            if since > RENEW_DEADLINE {
                step_down(&format!(
                    "the lease {} was last rewritten {:.1} s ago (the shared storage does not answer)",
                    self.lease.path().display(),
                    since.as_secs_f64()
                ));
            }
        }
    }

    /// Sends files of the state directory changed since the last scan.
    fn sync_files(&self, inner: &mut Inner) {
        let Ok(now) = files::scan(&self.dir) else {
            return;
        };
        let (changed, gone) = files::changes(&inner.files, &now);
        for path in changed {
            let Ok(bytes) = std::fs::read(self.dir.join(&path)) else {
                continue;
            };
            let seq = inner.next_seq();
            inner.send_all(&ToStandby::File { seq, path }, &Bytes::from(bytes));
        }
        for path in gone {
            let seq = inner.next_seq();
            inner.send_all(&ToStandby::Remove { seq, path }, &Bytes::new());
        }
        inner.files = now;
    }

    /// Sends `msg` (built from its sequence number) to every standby,
    /// runs `local` (this manager's own write), then waits for the in-sync
    /// standbys, dropping those that do not answer in time.
    fn replicate(
        &self,
        msg: impl FnOnce(u64, u64) -> ToStandby,
        records: usize,
        payload: &[u8],
        local: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut inner = self.lock();
        self.sync_files(&mut inner);
        inner.records += records as u64;
        let seq = inner.next_seq();
        let msg = msg(seq, inner.records);
        inner.send_all(&msg, &Bytes::copy_from_slice(payload));
        let result = local();
        let deadline = Instant::now() + ACK_TIMEOUT;
        loop {
            let waiting = inner
                .peers
                .iter()
                .any(|p| p.state == PeerState::InSync && p.acked < seq);
            let left = deadline.saturating_duration_since(Instant::now());
            if !waiting {
                break;
            }
            if left.is_zero() {
                for p in &mut inner.peers {
                    if p.state == PeerState::InSync && p.acked < seq {
                        warn!(standby = %p.name, "standby did not acknowledge within {ACK_TIMEOUT:?}: dropped from the in-sync set, it copies the whole state again");
                        p.state = PeerState::Away;
                        p.tx = None;
                    }
                }
                self.record_in_sync(&mut inner);
                break;
            }
            inner = self
                .acked
                .wait_timeout(inner, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        result
    }

    /// Queues the whole state for the standby `index` on `tx`, from now on
    /// it receives every change too.
    fn join(&self, index: usize, tx: mpsc::UnboundedSender<(ToStandby, Bytes)>) -> u64 {
        let mut inner = self.lock();
        self.sync_files(&mut inner);
        inner.sessions += 1;
        let session = inner.sessions;
        let send = |msg: ToStandby, payload: Bytes| {
            let _ = tx.send((msg, payload));
        };
        let seq = inner.next_seq();
        let info = self.info.lock().unwrap_or_else(|p| p.into_inner()).clone();
        send(
            ToStandby::Begin {
                seq,
                epoch: info.epoch,
                active: info.active.clone(),
                serving: info.serving.clone(),
                you: inner.peers[index].name.clone(),
            },
            Bytes::new(),
        );
        let paths: Vec<String> = inner.files.keys().cloned().collect();
        for path in paths {
            let Ok(bytes) = std::fs::read(self.dir.join(&path)) else {
                continue;
            };
            let seq = inner.next_seq();
            send(ToStandby::File { seq, path }, Bytes::from(bytes));
        }
        let journal = std::fs::read(self.dir.join(files::JOURNAL)).unwrap_or_default();
        let seq = inner.next_seq();
        let records = inner.records;
        send(ToStandby::Journal { seq, records }, Bytes::from(journal));
        let synced_seq = inner.next_seq();
        send(ToStandby::Synced { seq: synced_seq }, Bytes::new());
        let peer = &mut inner.peers[index];
        peer.state = PeerState::Joining { synced_seq };
        peer.tx = Some(tx);
        peer.acked = 0;
        peer.session = session;
        session
    }

    /// A standby acknowledged `seq` on connection `session`.
    fn on_ack(&self, index: usize, session: u64, seq: u64) {
        let mut inner = self.lock();
        let peer = &mut inner.peers[index];
        if peer.session != session {
            return;
        }
        peer.acked = peer.acked.max(seq);
        if let PeerState::Joining { synced_seq } = peer.state
            && seq >= synced_seq
        {
            peer.state = PeerState::InSync;
            info!(standby = %peer.name, "standby in sync: it holds the whole state and acknowledges every record from now on");
            self.record_in_sync(&mut inner);
        }
        self.acked.notify_all();
    }

    /// Connection `session` to standby `index` ended.
    fn on_gone(&self, index: usize, session: u64) {
        let mut inner = self.lock();
        let peer = &mut inner.peers[index];
        if peer.session != session || peer.state == PeerState::Away {
            return;
        }
        let was_in_sync = peer.state == PeerState::InSync;
        peer.state = PeerState::Away;
        peer.tx = None;
        warn!(standby = %peer.name, "replication link to the standby ended");
        if was_in_sync {
            self.record_in_sync(&mut inner);
        }
        self.acked.notify_all();
    }

    /// Keeps a connection to the standby at `addr` while this manager lives.
    async fn follow(self: Arc<Feed>, index: usize, addr: String) {
        let mut told = false;
        loop {
            match connect(&addr, &self.secret).await {
                Ok(conn) => {
                    told = false;
                    self.clone().serve_peer(index, conn).await;
                }
                Err(e) if !told => {
                    warn!(standby = %addr, "cannot reach the standby: {e} (retrying every {RECONNECT:?})");
                    told = true;
                }
                Err(_) => {}
            }
            tokio::time::sleep(RECONNECT).await;
        }
    }

    async fn serve_peer(self: Arc<Feed>, index: usize, conn: Conn<ToStandby, ToActive>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let feed = self.clone();
        let session = tokio::task::spawn_blocking(move || feed.join(index, tx))
            .await
            .unwrap_or(0);
        let (mut reader, mut writer) = conn.split();
        let write = async {
            while let Some((msg, payload)) = rx.recv().await {
                if writer.send(&msg, &payload).await.is_err() {
                    return;
                }
                if rx.is_empty() && writer.flush().await.is_err() {
                    return;
                }
            }
        };
        let read = async {
            while let Ok(Some((ToActive::Ack { seq }, _))) = reader.recv().await {
                self.on_ack(index, session, seq);
            }
        };
        tokio::select! {
            _ = write => {}
            _ = read => {}
        }
        self.on_gone(index, session);
    }

    /// Renews the lease every [`RENEW_PERIOD`] (stepping down if it
    /// cannot), sends files changed meanwhile and tells standbys where the
    /// journal is.
    async fn renew(self: Arc<Feed>) {
        let mut tick = tokio::time::interval(RENEW_PERIOD);
        loop {
            tick.tick().await;
            let feed = self.clone();
            let _ = tokio::task::spawn_blocking(move || {
                feed.write_lease(None, "renew");
                // Not behind an append waiting for acknowledgements or a
                // copy to a joining standby: the next second will do.
                let Ok(mut inner) = feed.inner.try_lock() else {
                    return;
                };
                feed.sync_files(&mut inner);
                let records = inner.records;
                inner.send_all(&ToStandby::Tick { records }, &Bytes::new());
            })
            .await;
        }
    }
}

impl crate::journal::Mirror for Arc<Feed> {
    fn append(
        &mut self,
        bytes: &[u8],
        records: usize,
        local: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let msg = |seq, records| ToStandby::Append { seq, records };
        self.replicate(msg, records, bytes, local)
    }

    fn replace(
        &mut self,
        bytes: &[u8],
        local: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let msg = |seq, records| ToStandby::Journal { seq, records };
        self.replicate(msg, 0, bytes, local)
    }
}

/// Opens the replication link to the standby at `addr`: TLS, then the
/// handshake on the replication secret.
async fn connect(addr: &str, secret: &Secret) -> std::io::Result<Conn<ToStandby, ToActive>> {
    let tcp = carmi_api::net::dial(addr, carmi_api::net::CONNECT_TIMEOUT).await?;
    let stream = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, carmi_api::tls::connect(tcp))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let mut conn: Conn<ToStandby, ToActive> = Conn::new(stream.reader, stream.writer);
    let (r, w) = conn.parts_mut();
    handshake::client_bound(r, w, secret, &role(), &stream.binding)
        .await
        .map_err(|e| std::io::Error::other(format!("replication handshake: {e}")))?;
    *conn.max_mut() = MAX_FRAME;
    Ok(conn)
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
