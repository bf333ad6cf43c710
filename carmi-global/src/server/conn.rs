//! A link to the router (a machine's, an admin tool's; its own connection
//! or a channel through a relay): reading frames (stamped, checked and
//! decoded, an upload stored, in order) and writing what the router sends,
//! in one `select!` so that either side ending ends both. The handshake
//! before it is `accept.rs`'s.
//!
//! Kept apart from `server.rs` (the accept loop and the router task) so that
//! each file stays readable.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use carmi_api::conn::{Conn, ConnReader, ConnWriter};
use carmi_api::msg::{Failure, FailureCode, FromGlobal, Role, ToGlobal};
use tokio::io::BufWriter;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::renew::keep_token;
use super::{Cmd, HEAVY_HEADER, LinkTx, Outgoing, Pending, Shared, off_worker};
use crate::authority::Admitted;
use crate::router::{Decoded, LinkId, NameAllowance};
use crate::staging::StageInput;

impl Shared {
    /// A link id never used before in this run.
    pub(super) fn new_link(&self) -> LinkId {
        LinkId(self.next_link.fetch_add(1, Ordering::Relaxed))
    }
}

/// A link to the router: opened, read and written until either side (or
/// its token, or a full queue, or the daemon's stop) ends it, then closed.
/// A machine's own connection, or its channel through a relay (`relay.rs`),
/// whose relay chose its `link` id (to name it in folded heartbeats).
pub(super) async fn serve_link(
    conn: Conn<FromGlobal, ToGlobal>,
    link: Option<LinkId>,
    role: Role,
    admitted: Option<Admitted>,
    peer: SocketAddr,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) {
    let (mut reader, mut w) = conn.split();
    let link = link.unwrap_or_else(|| shared.new_link());
    debug!(%peer, %link, ?role, "connection accepted");
    // Admin links upload the master of a job before `Submit`.
    let serves_executables = matches!(role, Role::Local { .. } | Role::Admin);
    let machine = match &role {
        Role::Local { name } => Some(name.clone()),
        _ => None,
    };
    let (tx, mut rx) = mpsc::channel(shared.max_queued.max(1));
    let kick = Arc::new(tokio::sync::Notify::new());
    let identity = admitted.as_ref().map(|a| a.identity.clone());
    let opened = Cmd::Opened {
        link,
        role,
        identity: identity.clone().map(Box::new),
        out: LinkTx {
            tx: tx.clone(),
            kick: kick.clone(),
        },
    };
    if shared.cmds.send(opened).is_err() {
        return;
    }
    // Messages go to the router in order, an upload's once it is stored.
    let (order_tx, order_rx) = mpsc::unbounded_channel();
    let forwarder = tokio::spawn(forward_in_order(order_rx, shared.cmds.clone()));
    // A local RM's link renews its daemon token; any other link's token
    // only ends it.
    let (taken_tx, taken_rx) = mpsc::unbounded_channel();
    let invalid = async {
        if machine.is_some() {
            keep_token(shared, admitted, tx, taken_rx).await
        } else {
            until_invalid(shared, admitted.as_ref(), false).await
        }
    };
    let reading = Reading {
        link,
        serves_executables,
        machine: machine.as_deref(),
        identity: identity.as_ref(),
        shared,
        order: &order_tx,
        taken: &taken_tx,
        names: NameAllowance::new(shared.router.max_new_names_per_connection),
    };
    let ended = tokio::select! {
        r = read_frames(&mut reader, &reading) => r,
        reason = invalid => Err(reason),
        r = write_frames(&mut w, &mut rx) => r,
        _ = kick.notified() => Err(format!(
            "the peer stopped reading: {} frames are waiting for it",
            shared.max_queued
        )),
        _ = stop.changed() => Ok(()),
    };
    drop(reading);
    drop(order_tx);
    let _ = forwarder.await;
    match ended {
        Ok(()) => debug!(%peer, %link, "connection closed"),
        Err(reason) => warn!(%peer, %link, "closing connection: {reason}"),
    }
    let _ = shared.cmds.send(Cmd::Closed { link });
    let _ = w.shutdown().await;
}

/// Resolves, with why, once the token that opened a connection is revoked
/// or expires; never for a connection without one (a pool without tokens).
/// `staging`: a staging connection, which a renewal's revocation of its
/// token spares ([`Authority::until_invalid`](crate::authority::Authority::until_invalid)).
pub(super) async fn until_invalid(
    shared: &Shared,
    admitted: Option<&Admitted>,
    staging: bool,
) -> String {
    match (&shared.auth, admitted) {
        (Some(auth), Some(a)) => auth.until_invalid(a, staging).await,
        _ => std::future::pending().await,
    }
}

/// For an `AppAttach` of a new job from the local RM of `machine` in a pool
/// with tokens: what the token its application showed proves (the proof
/// it forwards, made for that machine), checked here because the authority
/// knows the revocations (a revoked token starts no job, whatever its local
/// RM thinks of it); the router decides with it.
fn app_identity(
    shared: &Shared,
    link: LinkId,
    machine: Option<&str>,
    msg: &ToGlobal,
) -> Option<Cmd> {
    let (auth, machine) = (shared.auth.as_ref()?, machine?);
    let ToGlobal::AppAttach {
        conn,
        job: None,
        token: Some(token),
        ..
    } = msg
    else {
        return None;
    };
    let verdict = auth.admit_forwarded(token, machine).map(|a| a.identity);
    Some(Cmd::AppIdentity(link, *conn, verdict))
}

/// Why a transfer of executables `msg` is refused on this link, before any
/// byte of it is stored or served (issue 38, "a reader stays a reader"):
/// an admin link's `Upload` needs power submit (what it is for: a job's
/// master and input files before its `Submit`); fetching and serving
/// executables are a local RM's staging, never an admin link's.
fn transfer_refusal(
    link: LinkId,
    identity: Option<&carmi_api::authz::Identity>,
    local: bool,
    msg: &ToGlobal,
) -> Option<Box<FromGlobal>> {
    if local {
        return None;
    }
    let message = match msg {
        ToGlobal::Upload { .. } => {
            let who = identity?;
            carmi_api::authz::check(who, &carmi_api::authz::Action::Submit)
                .err()
                .map(|r| format!("permission denied: {r} (an upload is a job's files)"))
        }
        ToGlobal::Fetch { .. } | ToGlobal::StageServe { .. } | ToGlobal::Fetched { .. } => {
            Some(format!(
                "permission denied: {} is a local RM's staging; an admin connection may not send it",
                crate::router::variant_name(msg)
            ))
        }
        _ => None,
    }?;
    warn!(%link, "refused: {message}");
    Some(Box::new(FromGlobal::AdminFailed(Failure {
        code: FailureCode::Denied,
        message,
    })))
}

/// Stores an upload of `owner` on the blocking pool (charged to it, see
/// `store.rs`): `Stored` for the router, or a refusal for a tool (told
/// before the request that needs the file; an application learns it from
/// its spawn's failure).
fn store_upload(
    shared: &Shared,
    (link, local): (LinkId, bool),
    executable: carmi_api::msg::ExecutableRef,
    payload: bytes::Bytes,
    owner: Option<String>,
) -> tokio::task::JoinHandle<Option<Cmd>> {
    let store = shared.store.clone();
    tokio::task::spawn_blocking(move || {
        match store.put_for(&executable, &payload, owner.as_deref()) {
            Ok(()) => {
                debug!(%link, name = executable.name, "executable stored");
                Some(Cmd::Stored(executable))
            }
            Err(e) => {
                warn!(%link, "upload rejected: {e}");
                if local {
                    return None;
                }
                let failure = Failure {
                    code: FailureCode::BadExecutable,
                    message: format!("{} ({}): {e}", executable.name, executable.sha256),
                };
                let msg = Box::new(FromGlobal::AdminFailed(failure));
                Some(Cmd::Reply { link, msg })
            }
        }
    })
}

/// The answer to a `carmi token` request, or to a local RM's key to certify
/// as its machine's (what proves it to the clients that show it a token).
fn about_tokens(
    shared: &Shared,
    link: LinkId,
    (identity, machine): (Option<&carmi_api::authz::Identity>, Option<&str>),
    msg: ToGlobal,
) -> Option<FromGlobal> {
    let Some(auth) = &shared.auth else {
        return matches!(msg, ToGlobal::Tokens(_)).then(|| {
            FromGlobal::AdminFailed(Failure {
                code: FailureCode::Unavailable,
                message:
                    "this global RM runs without a pool signing key (--pool-key): it has no tokens"
                        .into(),
            })
        });
    };
    match msg {
        ToGlobal::Tokens(req) => Some(auth.handle(identity, req)),
        ToGlobal::CertifyMachine { key } => {
            let machine = machine?;
            match auth.certify(machine, &key) {
                Ok(cert) => Some(FromGlobal::MachineCertified { cert }),
                Err(e) => {
                    warn!(%link, machine, "cannot certify the machine's key: {e}");
                    None
                }
            }
        }
        _ => None,
    }
}

/// What one link's reader routes its messages with.
struct Reading<'a> {
    link: LinkId,
    /// Admin and local RM links upload and fetch executables.
    serves_executables: bool,
    /// The machine of a local RM's link.
    machine: Option<&'a str>,
    /// What its token proved.
    identity: Option<&'a carmi_api::authz::Identity>,
    shared: &'a Shared,
    /// To the router task, in order.
    order: &'a mpsc::UnboundedSender<Pending>,
    /// To the link's token keeper: a renewed token was saved (or not).
    taken: &'a mpsc::UnboundedSender<bool>,
    /// The link's allowance of new attribute names in its ads.
    names: NameAllowance,
}

/// Reads frames until the peer closes (`Ok`) or sends something unreadable (`Err`).
async fn read_frames(reader: &mut ConnReader<ToGlobal>, r: &Reading<'_>) -> Result<(), String> {
    loop {
        let frame = match reader.recv_raw().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("bad frame: {e}")),
        };
        let at = Instant::now();
        let decode = || frame.decode();
        // A header of megabytes takes a while to decode: off the worker
        // thread, so that the other connections' tasks run meanwhile.
        let msg = if frame.header.len() > HEAVY_HEADER {
            off_worker(decode)
        } else {
            decode()
        };
        let msg = msg.map_err(|e| format!("bad frame: undecodable message: {e}"))?;
        if !r.route(msg, frame.payload, at) {
            return Ok(());
        }
    }
}

impl Reading<'_> {
    /// Queues `p` for the router task; false once that task is gone.
    fn send(&self, p: Pending) -> bool {
        self.order.send(p).is_ok()
    }

    fn stage(&self, input: StageInput) -> bool {
        self.send(Pending::Ready(Cmd::Staging(input)))
    }

    /// Hands one message on to where it is handled; false once the router
    /// task is gone.
    fn route(&self, msg: ToGlobal, payload: bytes::Bytes, at: Instant) -> bool {
        let (link, shared) = (self.link, self.shared);
        let local = self.machine.is_some();
        if let Some(msg) = transfer_refusal(link, self.identity, local, &msg) {
            return self.send(Pending::Ready(Cmd::Reply { link, msg }));
        }
        match msg {
            ToGlobal::Upload { executable } if self.serves_executables => {
                // Hashed and written on the blocking pool; this loop reads on.
                let owner = self.identity.map(|i| i.name.clone());
                let task = store_upload(shared, (link, local), executable, payload, owner);
                self.send(Pending::Working(task))
            }
            ToGlobal::MasterFiles { process, files } if local => {
                let task = store_master_files(shared, link, (process, files), payload, at);
                self.send(Pending::Working(task))
            }
            ToGlobal::Fetch { sha256 } if self.serves_executables => {
                self.stage(StageInput::Fetch { link, sha256 })
            }
            ToGlobal::StageServe { endpoint } => self.stage(StageInput::Serve { link, endpoint }),
            ToGlobal::Fetched { sha256, result, .. } => {
                let error = result.err();
                self.stage(StageInput::Fetched {
                    link,
                    sha256,
                    error,
                })
            }
            ToGlobal::StageStats => self.stage(StageInput::Stats { link }),
            msg @ (ToGlobal::Tokens(_) | ToGlobal::CertifyMachine { .. }) => {
                match about_tokens(shared, link, (self.identity, self.machine), msg) {
                    Some(msg) => self.send(Pending::Ready(Cmd::Reply {
                        link,
                        msg: Box::new(msg),
                    })),
                    None => true,
                }
            }
            // Its link's task keeps the token: the answer to a renewal.
            ToGlobal::TokenTaken { saved } if local => {
                let _ = self.taken.send(saved);
                true
            }
            msg if Decoded::is_heavy(&msg) => {
                let (config, names) = (shared.router.clone(), self.names.clone());
                let task = tokio::task::spawn_blocking(move || {
                    let msg = Box::new(Decoded::within(msg, &config, &names));
                    Some(Cmd::Message { link, msg, at })
                });
                self.send(Pending::Working(task))
            }
            msg => {
                if let Some(cmd) = app_identity(shared, link, self.machine, &msg)
                    && !self.send(Pending::Ready(cmd))
                {
                    return false;
                }
                let msg = Box::new(Decoded::within(msg, &shared.router, &self.names));
                self.send(Pending::Ready(Cmd::Message { link, msg, at }))
            }
        }
    }
}

/// A master's files sent back, stored first like an upload (on the
/// blocking pool); the router then decides whether they are wanted, and
/// has them dropped if not.
fn store_master_files(
    shared: &Shared,
    link: LinkId,
    (process, files): (carmi_api::ids::ProcessId, Vec<carmi_api::msg::ReturnedFile>),
    payload: bytes::Bytes,
    at: Instant,
) -> tokio::task::JoinHandle<Option<Cmd>> {
    let store = shared.returned.clone();
    let config = shared.router.clone();
    tokio::task::spawn_blocking(move || match store.put(process, &files, &payload) {
        Ok(()) => {
            let msg = ToGlobal::MasterFiles { process, files };
            let msg = Decoded::new(msg, &config);
            Some(Cmd::Message {
                link,
                msg: Box::new(msg),
                at,
            })
        }
        Err(e) => {
            warn!(%link, %process, "files sent back refused: {e}");
            store.remove(process);
            None
        }
    })
}

/// Writes what arrives for this connection until told to close it. Whatever
/// is queued is written before one flush, so a burst of events costs one
/// system call rather than one per frame.
async fn write_frames(
    w: &mut ConnWriter<FromGlobal>,
    rx: &mut mpsc::Receiver<Outgoing>,
) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("write failed: {e}");
    let mut w: ConnWriter<FromGlobal, _> =
        ConnWriter::new(BufWriter::with_capacity(64 * 1024, w.get_mut()));
    while let Some(mut out) = rx.recv().await {
        loop {
            match out {
                Outgoing::Frame(msg, payload) => w.send(&msg, &payload).await.map_err(failed)?,
                Outgoing::Close(reason) => {
                    // What was queued before the close still goes out.
                    let _ = w.flush().await;
                    return Err(reason);
                }
            }
            match rx.try_recv() {
                Ok(next) => out = next,
                Err(_) => break,
            }
        }
        w.flush().await.map_err(failed)?;
    }
    Ok(())
}

/// Passes a connection's messages to the router task in the order they were
/// read, waiting for each upload's store to finish before what follows it.
async fn forward_in_order(
    mut order: mpsc::UnboundedReceiver<Pending>,
    cmds: mpsc::UnboundedSender<Cmd>,
) {
    while let Some(p) = order.recv().await {
        let cmd = match p {
            Pending::Ready(cmd) => Some(cmd),
            Pending::Working(task) => match task.await {
                Ok(cmd) => cmd,
                Err(e) => {
                    warn!("work on the blocking pool failed: {e}");
                    None
                }
            },
        };
        if let Some(cmd) = cmd
            && cmds.send(cmd).is_err()
        {
            return;
        }
    }
}
