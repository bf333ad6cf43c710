//! The machines' side of a relay: accept, serve TLS and the pool's
//! handshake as the global RM would (proving the relay's certificate, the
//! machine's token judged by the global RM), then pass the machine's frames
//! up its channel, folding unchanged heartbeats, and the global RM's bytes
//! down, until either side ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use carmi_api::conn::ConnReader;
use carmi_api::frame::{FrameDeadline, FrameReader};
use carmi_api::gate::{Gate, REFUSAL_LOG_PERIOD, Refusal, Ticket};
use carmi_api::handshake::{self, Secret};
use carmi_api::msg::relay::{Chan, RelayUp};
use carmi_api::msg::{Role, ToGlobal};
use carmi_api::proof::Presented;
use carmi_api::tls;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use crate::RelayConfig;
use crate::hub::{Asking, Down, Hub};

/// How long a machine's handshake waits for the relay's certificate.
const CERTIFICATE_WAIT: Duration = Duration::from_secs(5);

/// Largest message a machine may send, as at the global RM.
const MAX_HEADER: usize = 16 << 20;

/// What every machine's task shares.
struct Serving {
    secret: Secret,
    tls: tls::Acceptor,
    gate: Arc<Gate>,
    hub: Arc<Hub>,
}

/// Accepts machines until `shutdown`.
pub(crate) async fn accept_until(
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
    (config, tls): (&RelayConfig, tls::Acceptor),
    hub: Arc<Hub>,
    stop: watch::Receiver<bool>,
) {
    let secret = match &hub.prover {
        Some(p) => config.secret.clone().with_relay_prover(p.clone()),
        None => config.secret.clone(),
    }
    // The relay's own token is for its link, never shown to its machines.
    .with_token(None);
    let serving = Arc::new(Serving {
        secret,
        tls,
        gate: Gate::new(config.conn_limits.clone()),
        hub,
    });
    let mut summary = tokio::time::interval(REFUSAL_LOG_PERIOD);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = summary.tick() => serving.gate.flush_log(),
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match serving.gate.admit(peer.ip()) {
                    Ok(ticket) => {
                        tokio::spawn(machine(stream, peer, ticket, serving.clone(), stop.clone()));
                    }
                    Err(Refusal(reason)) => {
                        serving.gate.note_refusal(peer.ip(), &reason);
                        let why = format!("connection refused: {reason}");
                        tokio::spawn(async move { handshake::refuse_and_close(stream, &why).await });
                    }
                },
                Err(e) => {
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// One machine's connection: handshake, then its session.
async fn machine(
    stream: TcpStream,
    peer: SocketAddr,
    mut ticket: Ticket,
    serving: Arc<Serving>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let opened = tokio::select! {
        o = open(stream, peer, &serving) => o,
        _ = ticket.evicted() => {
            serving.gate.note_refusal(peer.ip(), "handshake dropped to make room for newer connections");
            return;
        }
        _ = stop.changed() => return,
    };
    let Some((reader, writer, asking)) = opened else {
        return;
    };
    if !ticket.authenticated() {
        return;
    }
    let chan = asking.chan;
    let reason = tokio::select! {
        r = read_machine(reader, chan, &serving.hub, &asking.up) => r,
        r = write_machine(writer, asking.down) => r,
        _ = stop.changed() => "the relay is stopping".into(),
    };
    debug!(%peer, chan, "machine's connection ended: {reason}");
    if let Some(up) = serving.hub.ended(chan) {
        let _ = up.try_send((RelayUp::Closed { chan, reason }, Bytes::new()));
    }
}

/// TLS and the pool's handshake, the machine admitted by the global RM;
/// `None` (noted at the gate) if either fails.
async fn open(
    stream: TcpStream,
    peer: SocketAddr,
    serving: &Serving,
) -> Option<(FrameReader<tls::Reader>, tls::Writer, Asking)> {
    let tls::Stream {
        reader,
        mut writer,
        binding,
    } = match tokio::time::timeout(
        handshake::HANDSHAKE_TIMEOUT,
        serving.tls.accept(stream, true),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            serving
                .gate
                .note_refusal(peer.ip(), &format!("TLS handshake failed: {e}"));
            return None;
        }
        Err(_) => {
            serving
                .gate
                .note_refusal(peer.ip(), "TLS handshake timed out");
            return None;
        }
    };
    // A machine with a token trusts the relay only with its certificate:
    // one arriving while the link to the global RM comes up waits for it.
    if let Some(p) = &serving.hub.prover {
        p.ready(CERTIFICATE_WAIT).await;
    }
    let mut reader = FrameReader::new(reader);
    let choose = |job: Option<carmi_api::ids::JobId>| match job {
        None => Ok(serving.secret.clone()),
        Some(_) => Err("a relay carries local RMs' links only".to_string()),
    };
    let admit = async |role: Role, shown: Option<Presented>, _| {
        if !matches!(role, Role::Local { .. }) {
            return Err("a relay carries local RMs' links only (connect other roles to the global RM itself)".to_string());
        }
        let presented = shown.map(|p| p.encode());
        let mut asking = serving.hub.ask(role, presented, peer.to_string())?;
        match (&mut asking.answer).await {
            Ok(Ok(())) => Ok(asking),
            Ok(Err(reason)) => Err(reason),
            Err(_) => Err("the relay lost its link to the global RM".to_string()),
        }
    };
    match handshake::server_keyed_async(&mut reader, &mut writer, choose, &binding, admit).await {
        Ok((_, asking)) => Some((reader, writer, asking)),
        Err(handshake::HandshakeError::NotAdmitted(reason)) => {
            warn!(%peer, "connection refused: {reason}");
            None
        }
        Err(e) => {
            serving
                .gate
                .note_refusal(peer.ip(), &format!("handshake failed: {e}"));
            None
        }
    }
}

/// Passes the machine's frames up its channel, an unchanged heartbeat as a
/// mark for the next `Alive`; why it ended.
async fn read_machine(
    frames: FrameReader<tls::Reader>,
    chan: Chan,
    hub: &Hub,
    up: &mpsc::Sender<(RelayUp, Bytes)>,
) -> String {
    let mut reader = ConnReader::<ToGlobal, _>::from_frames(frames);
    reader.set_deadline(Some(FrameDeadline::DEFAULT));
    reader.frames_mut().set_max_header(MAX_HEADER);
    let beat = unchanged_heartbeat();
    loop {
        let frame = match reader.recv_raw().await {
            Ok(Some(f)) => f,
            Ok(None) => return "the machine closed it".into(),
            Err(e) => return format!("bad frame: {e}"),
        };
        if frame.payload.is_empty() && frame.header == beat {
            hub.beat(chan);
            continue;
        }
        let (h, p) = (&frame.header, &frame.payload);
        let mut bytes = BytesMut::with_capacity(8 + h.len() + p.len());
        bytes.extend_from_slice(&carmi_api::frame::raw_prefix(h.len(), p.len()));
        bytes.extend_from_slice(h);
        bytes.extend_from_slice(p);
        hub.passed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let data = (RelayUp::Data { chan }, bytes.freeze());
        if up.send(data).await.is_err() {
            return "the relay's link to the global RM ended".into();
        }
    }
}

/// The JSON of a heartbeat that changes nothing, as a local RM sends it.
fn unchanged_heartbeat() -> Bytes {
    static JSON: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    JSON.get_or_init(|| {
        let beat = ToGlobal::Heartbeat {
            update: String::new(),
        };
        Bytes::from(serde_json::to_vec(&beat).expect("a heartbeat serializes"))
    })
    .clone()
}

/// Writes the global RM's bytes to the machine, a burst before one flush,
/// until the global RM ends its link (why).
async fn write_machine(writer: tls::Writer, mut down: mpsc::Receiver<Down>) -> String {
    let mut w = BufWriter::with_capacity(16 * 1024, writer);
    let failed = |e: std::io::Error| format!("cannot write to the machine: {e}");
    let mut next = down.recv().await;
    loop {
        match next {
            None => return "the relay's link to the global RM ended".into(),
            Some(Down::Close(reason)) => {
                let _ = w.flush().await;
                let _ = w.shutdown().await;
                return reason;
            }
            Some(Down::Data(bytes)) => {
                if let Err(e) = w.write_all(&bytes).await {
                    return failed(e);
                }
            }
        }
        next = match down.try_recv() {
            Ok(d) => Some(d),
            Err(_) => {
                if let Err(e) = w.flush().await {
                    return failed(e);
                }
                down.recv().await
            }
        };
    }
}
