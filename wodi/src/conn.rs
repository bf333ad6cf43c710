//! Connection plumbing shared by server, master and bench: a writer task
//! that batches queued frames into few writes, a reader task that turns
//! frames into channel messages, and the server's side of a peer's [`Hello`].

use bytes::{Bytes, BytesMut};
use carmi_api::conn::ConnReader;
use carmi_api::frame::encode_header;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::proto::{Hello, WODI_PROTOCOL};

/// How long a peer has to send its [`Hello`].
const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Payloads above this size are written directly instead of being copied into the batch.
const COPY_LIMIT: usize = 32 * 1024;
/// A batch is written once it holds this much.
const BATCH_BYTES: usize = 256 * 1024;

/// One encoded frame waiting for the writer: header bytes and payload.
pub struct Outgoing {
    head: Vec<u8>,
    payload: Bytes,
}

impl Outgoing {
    /// Encodes `msg` with `payload`.
    pub fn new<T: Serialize>(msg: &T, payload: Bytes) -> Outgoing {
        Outgoing {
            head: encode_header(msg, payload.len()),
            payload,
        }
    }
}

/// Sender side of a writer task; dropping every clone ends the task after
/// the queued frames are written.
pub type Writer = mpsc::UnboundedSender<Outgoing>;

/// Starts a task writing queued frames to `w`, as many per write as are
/// waiting. It ends when every sender is dropped or the socket fails.
pub fn spawn_writer<W: AsyncWrite + Unpin + Send + 'static>(mut w: W) -> Writer {
    let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(BATCH_BYTES);
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(f) = next.take() {
                buf.extend_from_slice(&f.head);
                if f.payload.len() > COPY_LIMIT {
                    if w.write_all(&buf).await.is_err() || w.write_all(&f.payload).await.is_err() {
                        return;
                    }
                    buf.clear();
                } else {
                    buf.extend_from_slice(&f.payload);
                }
                if buf.len() < BATCH_BYTES {
                    next = rx.try_recv().ok();
                }
            }
            if !buf.is_empty() {
                if w.write_all(&buf).await.is_err() {
                    return;
                }
                buf.clear();
            }
        }
        let _ = w.flush().await;
        let _ = w.shutdown().await;
    });
    tx
}

/// Starts a task reading frames of type `T` from `r` and handing each to
/// `wrap`, whose result goes to `out`; at the end (close or error) `done` is sent.
pub fn spawn_reader<R, T, E>(
    mut r: ConnReader<T, R>,
    out: mpsc::UnboundedSender<E>,
    wrap: impl Fn(T, Bytes) -> E + Send + 'static,
    done: impl FnOnce(Option<String>) -> E + Send + 'static,
) where
    R: AsyncRead + Unpin + Send + 'static,
    T: DeserializeOwned + Send + 'static,
    E: Send + 'static,
{
    tokio::spawn(async move {
        let why = loop {
            match r.recv().await {
                Ok(Some((msg, payload))) => {
                    if out.send(wrap(msg, payload)).is_err() {
                        return;
                    }
                }
                Ok(None) => break None,
                Err(e) => break Some(e.to_string()),
            }
        };
        let _ = out.send(done(why));
    });
}

/// The local address this machine uses to reach `addr`, which pool machines can dial back.
pub fn interface_towards(addr: &str) -> anyhow::Result<String> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
    sock.connect(addr)
        .map_err(|e| anyhow::anyhow!("wodi server: cannot route to the local RM {addr}: {e}"))?;
    Ok(sock.local_addr()?.ip().to_string())
}

/// The read half of a peer's connection after its hello (which says what
/// it sends next: [`ConnReader::retype`]).
pub type Reader = ConnReader<Hello, tokio::net::tcp::OwnedReadHalf>;
/// The write half of a peer's connection.
pub type WriteHalf = tokio::net::tcp::OwnedWriteHalf;

/// Reads and checks the first frame of a connection. The reader keeps any
/// bytes that followed the hello in its buffer.
pub async fn read_hello(
    stream: TcpStream,
    token: &str,
) -> anyhow::Result<(Reader, WriteHalf, Hello)> {
    let peer = stream.peer_addr()?;
    let (r, w) = stream.into_split();
    let mut r: Reader = ConnReader::with_max(r, 64 * 1024);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, r.recv()).await {
        Ok(Ok(Some((h, _)))) => h,
        Ok(Ok(None)) => anyhow::bail!("{peer} closed before its hello"),
        Ok(Err(e)) => anyhow::bail!("{peer} sent a bad hello: {e}"),
        Err(_) => anyhow::bail!("{peer} sent no hello within {HELLO_TIMEOUT:?}"),
    };
    if hello.version != WODI_PROTOCOL {
        anyhow::bail!(
            "{peer} speaks WoDi protocol {}, not {WODI_PROTOCOL}",
            hello.version
        );
    }
    if hello.token != token {
        anyhow::bail!("{peer} presented a wrong run token");
    }
    *r.max_mut() = crate::proto::MAX_FRAME;
    Ok((r, w, hello))
}
