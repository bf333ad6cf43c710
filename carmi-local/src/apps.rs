//! Application processes connect here: one task per connection, which runs
//! the handshake, turns frames into driver inputs, and writes what the driver
//! sends back. A bad frame or a failed handshake closes that connection only.
//! A connection with the `Admin` role is a control connection ([`crate::control`]).
//! Every connection is TLS (`carmi_api::tls`), and the handshake's proofs
//! cover the session's exported keys, so that a relay cannot pass a proof
//! made for another session on; a connection in clear is refused.
//!
//! What the driver sends an application waits in a bounded queue
//! ([`crate::config::Settings::app_queue`]): an application that stops
//! reading fills it and is disconnected ([`AppTx::kick`] ends its task even
//! in the middle of a write that cannot complete), so that it can neither
//! grow the daemon's memory nor hold up the others.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use carmi_api::conn::Conn;
use carmi_api::gate::{ConnLimits, Gate, REFUSAL_LOG_PERIOD, Refusal, Ticket};
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::ConnId;
use carmi_api::msg::{FromLocal, Role, ToLocal};
use carmi_api::tls::{Acceptor, Stream};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, watch};

use crate::control::ControlAccess;
use crate::input::{AppTx, Input, stopped};
use crate::jobcred::JobCreds;
use crate::perjob::{JobSlot, PerJob};

/// Default for [`crate::config::Settings::app_queue`]: messages queued for
/// one application before it counts as not reading (and is disconnected).
pub const APP_QUEUE: usize = 1024;

/// What unauthenticated connections may cost the application port: its
/// clients are mostly on this host, so one address may hold every
/// handshake; a flood makes room by evicting the oldest (a real client's
/// handshake takes milliseconds), and every handshake ends within
/// [`handshake::HANDSHAKE_TIMEOUT`].
pub const APP_LIMITS: ConnLimits = ConnLimits {
    max_connections: 8192,
    max_handshaking: 256,
    max_handshaking_per_addr: 256,
};

/// Accepts application connections until `stop` turns true.
pub(crate) async fn serve(
    (listener, tls): (TcpListener, Acceptor),
    (secret, creds, access): (Secret, JobCreds, ControlAccess),
    (queue, per_job): (usize, usize),
    inputs: mpsc::Sender<Input>,
    mut stop: watch::Receiver<bool>,
) {
    let mut next_conn = 1u64;
    let gate = Gate::new(APP_LIMITS);
    let per_job = crate::perjob::per_job(per_job);
    let mut summary = tokio::time::interval(REFUSAL_LOG_PERIOD);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let ticket = match gate.admit(peer.ip()) {
                        Ok(ticket) => ticket,
                        Err(Refusal(reason)) => {
                            gate.note_refusal(peer.ip(), &reason);
                            let reason = format!("connection refused: {reason}");
                            tokio::spawn(async move { carmi_api::handshake::refuse_and_close(stream, &reason).await });
                            continue;
                        }
                    };
                    let conn = ConnId(next_conn);
                    next_conn += 1;
                    let keys = (secret.clone(), creds.clone(), access.clone(), per_job.clone());
                    let admitted = (ticket, gate.clone());
                    let opened = (stream, tls.clone());
                    tokio::spawn(connection(opened, peer, conn, keys, admitted, queue, inputs.clone(), stop.clone()));
                }
                Err(e) => {
                    // Out of file descriptors, typically: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting an application connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = summary.tick() => gate.flush_log(),
            _ = stopped(&mut stop) => break,
        }
    }
}

/// Whether an application connection of `role` (proving `key`'s job, if
/// any, with the token it `shown`) is admitted: a job's credential opens that job's
/// applications only; a control connection needs the machine's daemon token
/// or an admin's; joining a job with the pool secret is for the machine's
/// owner and admins (a new job's token goes to the global RM, which
/// decides); and a job holds at most its cap of connections here, its place
/// held for the connection's life and given back if the handshake fails after.
async fn admit_app(
    role: Role,
    shown: Option<carmi_api::proof::Presented>,
    key: Option<carmi_api::ids::JobId>,
    (access, per_job): (&ControlAccess, &PerJob),
    peer: SocketAddr,
) -> Result<(Option<String>, Option<JobSlot>), String> {
    let refused = |why: &String| tracing::warn!(%peer, "connection refused: {why}");
    crate::jobcred::admit(&role, key)?;
    let slot = match &role {
        Role::Application { job: Some(j), .. } => {
            Some(crate::perjob::take(per_job, *j).inspect_err(refused)?)
        }
        _ => None,
    };
    let what = match &role {
        Role::Admin => Some("a control connection".to_string()),
        Role::Application { job: Some(j), .. } if key.is_none() => {
            Some(format!("joining job {j} without its credential"))
        }
        _ => None,
    };
    if let Some(what) = what {
        access
            .admit(&what, shown.as_ref())
            .await
            .inspect_err(refused)?;
    }
    // What a new job's token proves goes to the global RM as its holder
    // made it: this local RM never holds a token it could use itself.
    Ok((shown.map(|p| p.encode()), slot))
}

/// Opens TLS on `stream` under the gate too: a flood of silent connections
/// is evicted before it ever sends a ClientHello. `None`: refused (noted at
/// the gate).
async fn open_tls(
    stream: TcpStream,
    tls: &Acceptor,
    peer: SocketAddr,
    (ticket, gate): (&mut Ticket, &Gate),
) -> Option<Stream> {
    let opened = tokio::select! {
        o = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, tls.accept(stream, false)) => o,
        _ = ticket.evicted() => {
            gate.note_refusal(peer.ip(), "TLS dropped to make room for newer connections (max_handshaking)");
            return None;
        }
    };
    match opened {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            let why = format!("application connection refused before its handshake: {e}");
            gate.note_refusal(peer.ip(), &why);
            None
        }
        Err(_) => {
            gate.note_refusal(peer.ip(), "application connection did not open TLS in time");
            None
        }
    }
}

// The connection's parts, each its own argument: grouping them would only rename them.
#[allow(clippy::too_many_arguments)]
async fn connection(
    (stream, tls): (TcpStream, Acceptor),
    peer: SocketAddr,
    conn: ConnId,
    (secret, creds, access, per_job): (Secret, JobCreds, ControlAccess, PerJob),
    // Its place at the gate, held for the connection's life.
    (mut ticket, gate): (Ticket, Arc<Gate>),
    queue: usize,
    inputs: mpsc::Sender<Input>,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let Some(Stream {
        reader,
        writer,
        binding,
    }) = open_tls(stream, &tls, peer, (&mut ticket, &gate)).await
    else {
        return;
    };
    // A client arriving while the link comes up is served a certificate.
    secret
        .certified_within(handshake::HANDSHAKE_TIMEOUT / 2)
        .await;
    let mut link: Conn<FromLocal, ToLocal> = Conn::new(reader, writer);
    // Other roles are refused inside the handshake, so that the client is
    // told why; a job's credential opens that job's applications only.
    let choose = |key| creds.choose(&secret, key);
    // A new job's token goes to the global RM, which knows the revocations.
    let admit = |role: Role, shown, key| admit_app(role, shown, key, (&access, &per_job), peer);
    let (hs_reader, hs_writer) = link.parts_mut();
    let (role, (token, _job_slot)) = tokio::select! {
        res = handshake::server_keyed_async(hs_reader, hs_writer, choose, &binding, admit) => match res {
            Ok(admitted) => admitted,
            Err(e) => {
                gate.note_refusal(peer.ip(), &format!("application handshake failed: {e}"));
                return;
            }
        },
        _ = ticket.evicted() => {
            gate.note_refusal(peer.ip(), "handshake dropped to make room for newer connections (max_handshaking)");
            return;
        }
    };
    if !ticket.authenticated() {
        return;
    }
    if role == Role::Admin {
        let (reader, writer) = link.split();
        crate::control::serve(reader.retype(), writer.retype(), peer, inputs, stop).await;
        return;
    }
    let Role::Application {
        job,
        process,
        endpoint,
    } = role
    else {
        tracing::error!(%peer, ?role, "handshake admitted a role it should have refused");
        return;
    };
    tracing::debug!(%conn, %peer, ?job, ?process, %endpoint, "application connected");
    let (tx, rx) = mpsc::channel(queue.max(1));
    let kick = Arc::new(Notify::new());
    let connected = Input::AppConnected {
        conn,
        job,
        process,
        endpoint,
        token,
        out: AppTx {
            tx,
            kick: kick.clone(),
            peer,
        },
    };
    if inputs.send(connected).await.is_err() {
        return;
    }
    relay(link, (conn, peer), (rx, kick), &inputs, stop).await;
    let _ = inputs.send(Input::AppClosed { conn }).await;
}

/// Relays an admitted application's connection until either side ends it:
/// its requests and uploads to the driver, the driver's messages to it.
async fn relay(
    link: Conn<FromLocal, ToLocal>,
    (conn, peer): (ConnId, SocketAddr),
    (mut rx, kick): (mpsc::Receiver<FromLocal>, Arc<Notify>),
    inputs: &mpsc::Sender<Input>,
    mut stop: watch::Receiver<bool>,
) {
    let (mut reader, mut writer) = link.split();
    loop {
        tokio::select! {
            frame = reader.recv() => match frame {
                Ok(Some((ToLocal::Request { id, body }, payload))) => {
                    if !payload.is_empty() {
                        tracing::warn!(%conn, %id, bytes = payload.len(), "request with a payload; payload ignored");
                    }
                    if inputs.send(Input::AppRequest { conn, id, body }).await.is_err() {
                        break;
                    }
                }
                Ok(Some((ToLocal::UploadExecutable { executable }, payload))) => {
                    if inputs.send(Input::AppUpload { conn, executable, payload }).await.is_err() {
                        break;
                    }
                }
                Ok(None) => {
                    tracing::debug!(%conn, %peer, "application closed its connection");
                    break;
                }
                Err(e) => {
                    tracing::warn!(%conn, %peer, error = %e, "bad frame from an application; closing its connection");
                    break;
                }
            },
            out = rx.recv() => match out {
                Some(msg) => {
                    // An application that stopped reading blocks this write;
                    // the driver's kick must still end the connection.
                    // Flushed once nothing else waits: over TLS, what the
                    // socket could not take stays in the session until then.
                    let written = tokio::select! {
                        r = send_flushed(&mut writer, &msg, rx.is_empty()) => r,
                        _ = kick.notified() => break,
                    };
                    if let Err(e) = written {
                        tracing::warn!(%conn, %peer, error = %e, "cannot write to an application; closing its connection");
                        break;
                    }
                }
                // The driver dropped us: the daemon stops, or the job ended
                // (what was queued before is written by then).
                None => break,
            },
            // The driver gave up on this application (its queue is full).
            _ = kick.notified() => break,
            _ = stopped(&mut stop) => break,
        }
    }
}

/// Sends `msg` to an application without waiting; false if its queue is full
/// or it is gone (the caller then forgets the connection and kicks it).
pub(crate) fn try_send(out: &AppTx, conn: ConnId, msg: FromLocal) -> bool {
    match out.tx.try_send(msg) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            tracing::error!(
                %conn,
                peer = %out.peer,
                queued = out.tx.max_capacity(),
                "application is not reading its events: its outgoing queue is full; disconnecting it"
            );
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// Sends `msg`, then flushes if `last` (nothing else is queued behind it).
async fn send_flushed<M: serde::Serialize, W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut carmi_api::conn::ConnWriter<M, W>,
    msg: &M,
    last: bool,
) -> std::io::Result<()> {
    writer.send(msg, &[]).await?;
    if last {
        writer.flush().await?;
    }
    Ok(())
}
