//! Accepting one connection: TLS and the pool handshake, then the
//! connection's kind decides who serves it: a staging connection
//! (`stager.rs`), a relay's link (`relay.rs`), or a link to the router
//! (`conn.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use carmi_api::conn::Conn;
use carmi_api::frame::FrameReader;
use carmi_api::handshake;
use carmi_api::msg::relay::{RelayDown, RelayUp};
use carmi_api::msg::{FromGlobal, Role, ToGlobal};
use carmi_api::proof::Presented;
use carmi_api::tls;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tracing::warn;

use super::conn::{serve_link, until_invalid};
use super::stager::serve_stager;
use super::{MAX_HEADER, Shared, Ticket};

/// Tells a connection the [`Gate`](super::Gate) did not admit why, and closes it.
pub(super) async fn refuse(stream: TcpStream, reason: String) {
    handshake::refuse_and_close(stream, &format!("connection refused: {reason}")).await;
}

/// One connection: handshake, then reading and writing until either ends.
/// `ticket` is its place at the [`Gate`], held until it ends.
pub(super) async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    mut ticket: Ticket,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    _done: mpsc::Sender<()>,
) {
    let _ = stream.set_nodelay(true);
    let Some(Opened {
        role,
        admitted,
        mut reader,
        w,
    }) = open(stream, peer, &mut ticket, &shared, &mut stop).await
    else {
        return;
    };
    if !ticket.authenticated() {
        return;
    }
    // The place in its identity's count is held as long as the connection.
    let (admitted, _place) = match admitted {
        Some(c) => (Some(c.admitted), Some(c.place)),
        None => (None, None),
    };
    reader.set_deadline(Some(shared.deadline));
    // Refused on the header's announced length, before its bytes arrive.
    reader.set_max_header(MAX_HEADER);
    if let Role::Stager { name } = &role {
        // A staging connection holds its daemon token as long as a link:
        // revoked or expired, it is closed too, idle or mid-transfer (but a
        // token a renewal replaced lets its copy finish).
        tokio::select! {
            () = serve_stager(reader, w, name, peer, &shared) => {}
            reason = until_invalid(&shared, admitted.as_ref(), true) => {
                warn!(%peer, machine = %name, "closing staging connection: {reason}");
            }
        }
        return;
    }
    if let Role::Relay { name } = role {
        let conn = Conn::<RelayDown, RelayUp>::from_parts(reader, w);
        super::relay::serve_relay(conn, name, admitted, peer, shared, stop).await;
        return;
    }
    let conn = Conn::<FromGlobal, ToGlobal>::from_parts(reader, w);
    serve_link(conn, None, role, admitted, peer, &shared, stop).await;
}

/// A connection past its handshake, as it proved itself.
struct Opened {
    role: Role,
    admitted: Option<crate::authority::Connected>,
    reader: FrameReader<tls::Reader>,
    w: tls::Writer,
}

/// TLS (in clear only for a pool without tokens or a staging connection,
/// which presents none), then the pool handshake, both within the
/// handshake's time; `None` (the refusal noted) if either fails, the gate
/// evicts the connection, or the daemon stops.
async fn open(
    stream: TcpStream,
    peer: SocketAddr,
    ticket: &mut Ticket,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
) -> Option<Opened> {
    const EVICTED: &str =
        "handshake dropped to make room for newer connections (max_handshaking or max_connections)";
    let opened = tokio::select! {
        s = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, shared.tls.accept(stream, true)) => s,
        _ = ticket.evicted() => {
            shared.gate.note_refusal(peer.ip(), EVICTED);
            return None;
        }
        _ = stop.changed() => return None,
    };
    let tls::Stream {
        reader: r,
        writer: mut w,
        binding,
    } = match opened {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let why = format!("TLS handshake failed: {e}");
            shared.gate.note_refusal(peer.ip(), &why);
            return None;
        }
        Err(_) => {
            shared
                .gate
                .note_refusal(peer.ip(), "TLS handshake timed out");
            return None;
        }
    };
    let mut reader = FrameReader::with_max(r, shared.max_frame);
    let auth = shared.auth.clone();
    let clear = binding.is_empty();
    let admit = |role: &Role, shown: Option<&Presented>| match &auth {
        // A token's proof crossing in clear could be read by a man in the middle.
        Some(_) if clear && shown.is_some() => {
            Err("this pool takes connections with a token over TLS only (update the client)".into())
        }
        Some(a) => a.admit_connection(role, shown).map(Some),
        None => Ok(None),
    };
    let (role, admitted) = tokio::select! {
        res = handshake::server_auth(&mut reader, &mut w, &shared.secret, &binding, admit) => match res {
            Ok(ok) => ok,
            Err(handshake::HandshakeError::NotAdmitted(reason)) => {
                // Named, not summarized: a refused identity is worth a line.
                warn!(%peer, "connection refused: {reason}");
                crate::metrics::METRICS.denied_connection();
                return None;
            }
            Err(e) => {
                shared.gate.note_refusal(peer.ip(), &format!("handshake failed: {e}"));
                return None;
            }
        },
        _ = ticket.evicted() => {
            shared.gate.note_refusal(peer.ip(), EVICTED);
            return None;
        }
        _ = stop.changed() => return None,
    };
    Some(Opened {
        role,
        admitted,
        reader,
        w,
    })
}
