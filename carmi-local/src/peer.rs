//! Executable staging between machines: this local RM fetches executables
//! from wherever the global RM says (its store or a peer), and serves its
//! own cache, including copies it is still receiving, to peers that pass
//! the pool's handshake as `Role::Stager` (protocol in `carmi_api::stage`),
//! over TLS only, the handshake bound to the session.
//!
//! A copy being received is written to `cache/.tmp-<sha256>-<random>` and
//! listed in [`Stager`]'s growing table with its [`Arrival`] (the latest
//! chunks, in memory); it is renamed into the cache once its hash is
//! verified. A peer asking meanwhile is served from the arrival, and from
//! the partial file for bytes that left the arrival's window; that file is
//! opened while holding the table's lock, and the table entry is removed
//! (under the lock) before the rename, so a server always holds either the
//! arrival with an open partial file or the complete file.

use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use carmi_api::conn::{ConnReader, ConnWriter};
use carmi_api::exe::is_sha256_hex;
use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Secret, Towards};
use carmi_api::msg::{ExecutableRef, Role, StageSource};
use carmi_api::proof::Presented;
use carmi_api::stage::{self, Arrival, FetchSpec, RateLimiter, Served};
use carmi_api::tls::{Acceptor, Stream};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::control::ControlAccess;
use crate::daemon_token::DaemonToken;

/// How long a peer's request waits for a copy this machine is about to fetch.
const ARRIVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A copy being received.
struct Growing {
    path: PathBuf,
    executable: ExecutableRef,
    arrival: Arrival,
}

/// Fetching and serving executables for one local RM.
pub struct Stager {
    cache_dir: PathBuf,
    /// The pool secret: what peers prove, and this daemon to them (with its
    /// machine's certified key, and the name proofs shown to it name).
    secret: Secret,
    /// Who may fetch from this machine: other machines and admins, as the
    /// global RM vouches (in a pool with tokens).
    access: ControlAccess,
    /// The daemon token, presented to the global RM only (renewed over the
    /// link: read at each fetch).
    token: DaemonToken,
    name: String,
    global_addr: String,
    limiter: RateLimiter,
    growing: Mutex<HashMap<String, Growing>>,
    /// Bytes served to peers since the start (the metrics page).
    served: std::sync::atomic::AtomicU64,
    /// Which manager of `global_addr`'s list served last, asked first.
    last_manager: std::sync::atomic::AtomicUsize,
}

impl Stager {
    /// A stager over the cache in `cache_dir`; `rate` caps what it serves (MB/s).
    pub(crate) fn new(
        cache_dir: PathBuf,
        (secret, token, access): (Secret, DaemonToken, ControlAccess),
        name: String,
        global_addr: String,
        rate: Option<f64>,
    ) -> Stager {
        Stager {
            cache_dir,
            secret,
            access,
            token,
            name,
            global_addr,
            limiter: RateLimiter::new(rate),
            growing: Mutex::new(HashMap::new()),
            served: Default::default(),
            last_manager: Default::default(),
        }
    }

    /// Bytes of executables served to peers since the start.
    pub fn served_bytes(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Fetches `exe` from `source` into the cache (verified). `Err` says why
    /// not, naming the source.
    pub async fn fetch(&self, exe: &ExecutableRef, source: &StageSource) -> Result<(), String> {
        if !is_sha256_hex(&exe.sha256) {
            return Err(format!("`{}` is not a SHA-256", exe.sha256));
        }
        // The token is shown to the global RM, and to a peer by a proof
        // made for that machine, which the peer has the global RM check.
        let secret = self.secret.clone().with_token(self.token.get());
        let (addr, towards) = match source {
            StageSource::Global => (self.global_addr.clone(), Towards::Global),
            StageSource::Peer { endpoint, .. } => (endpoint.clone(), Towards::Local),
        };
        let tmp = self.cache_dir.join(format!(
            ".tmp-{}-{:016x}",
            exe.sha256,
            rand::random::<u64>()
        ));
        let arrival = Arrival::new();
        // Created before it is listed, so a peer told to fetch from us can open it.
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        {
            let mut g = self.growing.lock().expect("growing table lock");
            if g.contains_key(&exe.sha256) {
                let _ = fs::remove_file(&tmp);
                return Err("already being fetched here".into());
            }
            g.insert(
                exe.sha256.clone(),
                Growing {
                    path: tmp.clone(),
                    executable: exe.clone(),
                    arrival: arrival.clone(),
                },
            );
        }
        // The global RM may be a list of managers: the active one serves,
        // a standby refuses before any byte, and so does a dead one.
        let addrs = carmi_api::admin::managers(&addr);
        let first = self.last_manager.load(std::sync::atomic::Ordering::Relaxed);
        let mut result = Err(format!("no address in `{addr}`"));
        for k in 0..addrs.len() {
            let i = (first + k) % addrs.len();
            result = stage::fetch(FetchSpec {
                addr: addrs[i],
                secret: &secret,
                towards,
                name: &self.name,
                executable: exe,
                dest: &tmp,
                arrival: &arrival,
            })
            .await
            .map_err(|e| e.to_string());
            let next = result.as_ref().is_err_and(|e| {
                e.contains("cannot connect") || e.contains(carmi_api::admin::STANDBY_REFUSAL)
            });
            if !next {
                self.last_manager
                    .store(i, std::sync::atomic::Ordering::Relaxed);
                break;
            }
        }
        // Out of the table before the rename (see the module docs).
        self.growing
            .lock()
            .expect("growing table lock")
            .remove(&exe.sha256);
        let result = match result {
            Ok(()) => {
                let dest = self.cache_dir.join(&exe.sha256);
                let tmp2 = tmp.clone();
                tokio::task::spawn_blocking(move || {
                    fs::set_permissions(&tmp2, fs::Permissions::from_mode(0o555))?;
                    fs::rename(&tmp2, &dest)
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| format!("cannot move the copy into the cache: {e}")))
            }
            Err(e) => Err(e),
        };
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
            arrival.fail();
        }
        result
    }

    /// [`Stager::lookup`], waiting up to [`ARRIVAL_WAIT`] for a copy to
    /// start: the global RM names this machine as a source as soon as it
    /// has directed it to fetch, which a peer may learn before this
    /// machine has started.
    async fn lookup_soon(&self, sha256: &str) -> Served {
        let until = tokio::time::Instant::now() + ARRIVAL_WAIT;
        loop {
            match self.lookup(sha256) {
                Served::Missing(_) if tokio::time::Instant::now() < until => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                other => return other,
            }
        }
    }

    /// What this machine holds of `sha256`, with the file opened.
    fn lookup(&self, sha256: &str) -> Served {
        let g = self.growing.lock().expect("growing table lock");
        if let Some(c) = g.get(sha256) {
            return match fs::File::open(&c.path) {
                Ok(file) => Served::Growing {
                    file,
                    executable: c.executable.clone(),
                    arrival: c.arrival.clone(),
                },
                Err(e) => Served::Missing(format!("partial copy unreadable: {e}")),
            };
        }
        drop(g);
        let path = self.cache_dir.join(sha256);
        match fs::File::open(&path).and_then(|f| Ok((f.metadata()?.len(), f))) {
            Ok((size, file)) => Served::File {
                file,
                executable: ExecutableRef {
                    name: sha256.to_string(),
                    sha256: sha256.to_string(),
                    size,
                },
            },
            Err(_) => Served::Missing("not in this machine's cache".into()),
        }
    }

    /// Serves peers on `listener` until `stop` turns true.
    pub async fn serve(
        self: Arc<Self>,
        (listener, tls): (TcpListener, Acceptor),
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        tokio::spawn(self.clone().serve_one(stream, tls.clone(), peer));
                    }
                    Err(e) => {
                        tracing::warn!("staging listener: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                },
                _ = crate::input::stopped(&mut stop) => return,
            }
        }
    }

    async fn serve_one(self: Arc<Self>, stream: TcpStream, tls: Acceptor, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let opened = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, tls.accept(stream, false));
        let Stream {
            reader: r,
            writer: mut w,
            binding,
        } = match opened.await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(%peer, "staging connection refused before its handshake: {e}");
                return;
            }
            Err(_) => {
                tracing::warn!(%peer, "staging connection did not open TLS in time; closed");
                return;
            }
        };
        let mut reader = FrameReader::with_max(r, 64 * 1024);
        let access = &self.access;
        let admit = async |role: Role, shown: Option<Presented>, _| match role {
            Role::Stager { .. } => {
                let what = "fetching an executable from this machine";
                access.admit_any_machine(what, shown.as_ref()).await
            }
            _ => Err("this listener serves executables to local RMs only".to_string()),
        };
        let choose = |_| Ok(self.secret.clone());
        let hs = handshake::server_keyed_async(&mut reader, &mut w, choose, &binding, admit);
        let name = match hs.await.map(|(role, ())| role) {
            Ok(Role::Stager { name }) => name,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(%peer, "staging handshake failed: {e}");
                return;
            }
        };
        let (mut reader, mut w) = (ConnReader::from_frames(reader), ConnWriter::new(w));
        let me = self.clone();
        let lookup = async move |sha256: String| me.lookup_soon(&sha256).await;
        match stage::serve(&mut reader, &mut w, lookup, &self.limiter).await {
            Ok(bytes) => {
                (self.served).fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(%peer, machine = %name, bytes, "executable served to a peer")
            }
            Err(e) => {
                tracing::warn!(%peer, machine = %name, "serving an executable to a peer ended: {e}")
            }
        }
        let _ = w.shutdown().await;
    }
}
