//! The standby's side of replication: it takes the active manager's
//! stream on `--ha-listen`, writes what it says into its own state
//! directory (synced before each acknowledgement), and notes in
//! `ha-state` the epoch whose whole state the directory holds once a copy
//! is complete. Meanwhile the pool's address refuses every client with
//! where the active manager is.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use carmi_api::conn::Conn;
use carmi_api::handshake::{self, Secret};
use tokio::net::TcpListener;
use tracing::{info, warn};

use super::files::{self, HA_STATE, JOURNAL};
use super::wire::{MAX_FRAME, ToActive, ToStandby};

/// What a standby knows of its stream, for its refusals and logs.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// The epoch of the stream it follows.
    pub epoch: u64,
    /// Whether its directory holds the whole state (the copy is complete).
    pub synced: bool,
    /// Where the active manager serves the pool.
    pub serving: String,
    /// Journal records it holds (counted in the active's epoch).
    pub have: u64,
    /// Journal records the active said it holds, at its last word.
    pub active_has: u64,
    /// When the active last spoke.
    pub heard: Option<Instant>,
}

impl Progress {
    /// The refusal a client of the pool gets from this standby; `named`:
    /// whether the lease names it in sync (the active may have dropped it
    /// without its knowing, when their link broke).
    pub fn refusal(&self, named: bool) -> String {
        if self.heard.is_none() {
            return "standby manager: no active manager has reached it yet; try the others of the pool's list".into();
        }
        let heard = self.heard.map_or("never".to_string(), |t| {
            format!("{:.1} s ago", t.elapsed().as_secs_f64())
        });
        let state = if self.synced && named {
            format!(
                "in sync, {} records behind (epoch {}, heard {heard})",
                self.active_has.saturating_sub(self.have),
                self.epoch
            )
        } else {
            format!(
                "not in sync: copying the state, or dropped by the active (epoch {}, heard {heard})",
                self.epoch
            )
        };
        format!(
            "standby manager ({state}); the active manager is {}",
            self.serving
        )
    }
}

/// The standby's replica of the active's state directory.
pub struct Replica {
    dir: PathBuf,
    /// Its name among the managers (its `--ha-listen`).
    me: String,
    lease_path: PathBuf,
    /// Set at takeover: nothing more is applied.
    stopped: AtomicBool,
    /// The connection whose stream is applied (a newer one replaces it).
    current: AtomicU64,
    next_conn: AtomicU64,
    journal: Mutex<Option<File>>,
    progress: Mutex<Progress>,
}

/// Reads the epoch a state directory's `ha-state` says it holds whole.
pub fn held_epoch(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(HA_STATE)).ok()?;
    text.trim().strip_prefix("epoch ")?.trim().parse().ok()
}

/// Notes that `dir` holds the whole state of `epoch`.
pub fn note_epoch(dir: &Path, epoch: u64) -> std::io::Result<()> {
    files::write_atomic(&dir.join(HA_STATE), format!("epoch {epoch}\n").as_bytes())
}

impl Replica {
    /// The replica of manager `me` in `dir`, checking streams against the
    /// lease file at `lease_path`.
    pub fn new(me: &str, dir: &Path, lease_path: &Path) -> Arc<Replica> {
        Arc::new(Replica {
            dir: dir.to_path_buf(),
            me: me.to_string(),
            lease_path: lease_path.to_path_buf(),
            stopped: AtomicBool::new(false),
            current: AtomicU64::new(0),
            next_conn: AtomicU64::new(1),
            journal: Mutex::new(None),
            progress: Mutex::new(Progress {
                epoch: held_epoch(dir).unwrap_or(0),
                ..Progress::default()
            }),
        })
    }

    /// What it knows now.
    pub fn progress(&self) -> Progress {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The refusal a client of the pool gets now: in sync only if the
    /// lease (the active's word on shared storage) says so too.
    pub fn refusal(&self) -> String {
        let progress = self.progress();
        let named = super::lease::read(&self.lease_path)
            .is_ok_and(|l| l.epoch == progress.epoch && l.in_sync.contains(&self.me));
        progress.refusal(named)
    }

    /// Applies nothing more (this manager takes over): returns once no
    /// write is under way.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        // A write holds the journal's lock from its check to its end.
        drop(self.journal.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Applies streams again (this manager held the lease but could not
    /// take over).
    pub fn resume(&self) {
        self.stopped.store(false, Ordering::SeqCst);
    }

    /// Takes streams on `listener` until stopped.
    pub async fn serve(self: Arc<Replica>, listener: TcpListener, secret: Secret) {
        let tls = match carmi_api::tls::Acceptor::generate() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("replication: no TLS certificate: {e}");
                return;
            }
        };
        loop {
            let Ok((tcp, peer)) = listener.accept().await else {
                continue;
            };
            let (me, tls, secret) = (self.clone(), tls.clone(), secret.clone());
            tokio::spawn(async move {
                if let Err(e) = me.stream(tcp, &tls, &secret).await {
                    warn!(%peer, "replication stream ended: {e}");
                }
            });
        }
    }

    async fn stream(
        self: Arc<Replica>,
        tcp: tokio::net::TcpStream,
        tls: &carmi_api::tls::Acceptor,
        secret: &Secret,
    ) -> Result<(), String> {
        let stream = tls.accept(tcp, false).await.map_err(|e| e.to_string())?;
        let mut conn: Conn<ToActive, ToStandby> = Conn::new(stream.reader, stream.writer);
        let (r, w) = conn.parts_mut();
        handshake::server_auth(r, w, secret, &stream.binding, |_, _| Ok(()))
            .await
            .map_err(|e| format!("replication handshake: {e}"))?;
        *conn.max_mut() = MAX_FRAME;
        let id = self.next_conn.fetch_add(1, Ordering::SeqCst);
        while let Some((msg, payload)) = conn.recv().await.map_err(|e| e.to_string())? {
            let me = self.clone();
            let ack = tokio::task::spawn_blocking(move || me.apply(id, msg, &payload))
                .await
                .map_err(|e| e.to_string())??;
            if let Some(seq) = ack {
                conn.send(&ToActive::Ack { seq }, &[])
                    .await
                    .map_err(|e| e.to_string())?;
                conn.flush().await.map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Applies one message of connection `id`; the sequence number to
    /// acknowledge, if any.
    pub(super) fn apply(
        &self,
        id: u64,
        msg: ToStandby,
        payload: &[u8],
    ) -> Result<Option<u64>, String> {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopped.load(Ordering::SeqCst) {
            return Err("this manager is taking over: the stream is refused".into());
        }
        if let ToStandby::Begin { epoch, .. } = &msg {
            self.check_epoch(*epoch)?;
            self.current.store(id, Ordering::SeqCst);
        } else if self.current.load(Ordering::SeqCst) != id {
            return Err("a newer stream replaced this one".into());
        }
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        progress.heard = Some(Instant::now());
        let seq = match msg {
            ToStandby::Begin {
                seq,
                epoch,
                active,
                serving,
                you,
            } => {
                info!(%active, %serving, epoch, as_name = %you, "a copy of the active manager's state begins");
                *journal = None;
                self.wipe()
                    .map_err(|e| io("clearing the state directory", e))?;
                *progress = Progress {
                    epoch,
                    serving,
                    heard: progress.heard,
                    ..Progress::default()
                };
                seq
            }
            ToStandby::File { seq, path } => {
                let at = files::inside(&self.dir, &path).ok_or(format!("bad path `{path}`"))?;
                files::write_atomic(&at, payload).map_err(|e| io(&path, e))?;
                seq
            }
            ToStandby::Remove { seq, path } => {
                let at = files::inside(&self.dir, &path).ok_or(format!("bad path `{path}`"))?;
                match std::fs::remove_file(&at) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path, e)),
                    _ => seq,
                }
            }
            ToStandby::Journal { seq, records } => {
                *journal = None;
                files::write_atomic(&self.dir.join(JOURNAL), payload)
                    .map_err(|e| io(JOURNAL, e))?;
                progress.have = records;
                progress.active_has = progress.active_has.max(records);
                seq
            }
            ToStandby::Append { seq, records } => {
                if journal.is_none() {
                    let f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(self.dir.join(JOURNAL))
                        .map_err(|e| io(JOURNAL, e))?;
                    *journal = Some(f);
                }
                let f = journal.as_mut().expect("opened above");
                f.write_all(payload)
                    .and_then(|()| f.sync_data())
                    .map_err(|e| io(JOURNAL, e))?;
                progress.have = records;
                progress.active_has = progress.active_has.max(records);
                seq
            }
            ToStandby::Synced { seq } => {
                note_epoch(&self.dir, progress.epoch).map_err(|e| io(HA_STATE, e))?;
                progress.synced = true;
                info!(
                    epoch = progress.epoch,
                    "in sync with the active manager: this standby may take over"
                );
                seq
            }
            ToStandby::Tick { records } => {
                progress.active_has = records;
                return Ok(None);
            }
        };
        Ok(Some(seq))
    }

    /// Refuses a stream older than the lease or than what this directory holds.
    fn check_epoch(&self, epoch: u64) -> Result<(), String> {
        let lease = super::lease::read(&self.lease_path)?;
        let mine = held_epoch(&self.dir).unwrap_or(0);
        if epoch < lease.epoch || epoch < mine {
            return Err(format!(
                "refused a stream of epoch {epoch}: the lease is at epoch {}, this directory at {mine} (a former active manager?)",
                lease.epoch
            ));
        }
        Ok(())
    }

    /// Removes what a copy replaces: the replicated files, the journal and
    /// the note that the directory is whole.
    fn wipe(&self) -> std::io::Result<()> {
        for name in [HA_STATE, JOURNAL] {
            match std::fs::remove_file(self.dir.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        for path in files::scan(&self.dir)?.keys() {
            let _ = std::fs::remove_file(self.dir.join(path));
        }
        Ok(())
    }
}

/// Refuses every client of the pool at `listener` with where the active
/// manager is, until the task is ended.
pub async fn refuse_clients(listener: TcpListener, replica: Arc<Replica>) {
    loop {
        if let Ok((tcp, _)) = listener.accept().await {
            let reason = replica.refusal();
            tokio::spawn(async move { handshake::refuse_and_close(tcp, &reason).await });
        }
    }
}
