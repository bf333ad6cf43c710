//! Staging connections: how a local RM fetches an executable's bytes from the
//! global RM's store or from a peer local RM's cache, so that the global RM
//! need not send one copy per machine (it answers a `Fetch` with a
//! [`StageSource`], see `carmi-global`'s `staging`).
//!
//! ```text
//! fetcher -> server  handshake as Role::Stager { name }
//! fetcher -> server  StageRequest::Get { sha256 }
//! server -> fetcher  StageReply::Begin { executable }
//!                    StageReply::Chunk (payload: the next bytes) ...
//!                    StageReply::End
//!               or   StageReply::Missing { reason }
//! ```
//! One executable per connection. A server may still be receiving the
//! executable itself ([`Served::Growing`]): it sends what it has and waits for
//! more, so copies are pipelined down a tree (or a chain) instead of waiting
//! for each level to finish. What a machine passes on while receiving comes
//! from memory ([`Arrival`]: the chunks as they arrived), not from its disk,
//! so a hop costs one chunk's link time and a task wake-up. The fetcher
//! trusts nothing: it hashes as the bytes arrive and refuses a copy whose
//! size or SHA-256 is not what the spawn asked for.
//!
//! Hashing and writing run on a blocking thread fed through a channel, never
//! on the task that reads the socket. A [`RateLimiter`] shared by every send
//! of a daemon models (or enforces) its link's bandwidth.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, BufWriter};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::conn::{ConnReader, ConnWriter};
use crate::exe::is_sha256_hex;
use crate::msg::ExecutableRef;

mod fetch;

pub use fetch::{FetchError, FetchSpec, fetch};

/// Most bytes per [`StageReply::Chunk`]: small enough that a receiver can pass
/// the first bytes on long before the last arrive.
pub const STAGE_CHUNK: usize = 64 * 1024;

/// Fewest bytes per chunk on a slow link (below this, framing and wake-ups
/// cost more than the latency they save).
pub const MIN_STAGE_CHUNK: usize = 4 * 1024;

/// How long one chunk may take on the link. A machine passes a chunk on only
/// once it has all of it, so every level of a staging tree (or every hop of
/// a chain) adds one chunk's link time: sizing chunks by the link keeps that
/// to a few milliseconds per hop, where 64 KiB at 2 MB/s cost 33 ms per hop.
pub const CHUNK_LINK_TIME: Duration = Duration::from_millis(8);

/// How long a fetcher waits for the next bytes before it gives the source up
/// as dead or stalled (a slow but steady source is fine).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle link time a [`RateLimiter`] lets a late sender make up: twice the
/// granularity of tokio's timer (which wakes a sleeper up to 1 ms late).
/// Kept below a chunk's link time, so a machine passing a chunk on still
/// pays most of the chunk's time on its own link, as store-and-forward
/// costs between real machines.
pub const LINK_CREDIT: Duration = Duration::from_millis(2);

/// Fetcher -> server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StageRequest {
    /// Send the executable with this hash.
    Get {
        /// Its SHA-256.
        sha256: String,
    },
}

/// Server -> fetcher.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StageReply {
    /// The bytes follow in `Chunk`s.
    Begin {
        /// What the server believes it holds.
        executable: ExecutableRef,
    },
    /// The next bytes, as the frame payload.
    Chunk,
    /// Everything was sent.
    End,
    /// The server does not hold it (or lost it while sending).
    Missing {
        /// Why.
        reason: String,
    },
}

/// How far a growing copy has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// This many bytes are written (readable from the file).
    Receiving(u64),
    /// Complete and verified.
    Done,
    /// Abandoned: readers must give up too.
    Failed,
}

/// How many of the latest bytes of a copy being received stay in memory
/// for passing on. A server that falls further behind reads the older
/// bytes back from the partial file (they are written by then), so a
/// machine relaying a large executable holds a bounded window, not the
/// whole copy (an embedded pool runs all its local RMs in one process).
pub const ARRIVAL_WINDOW: u64 = 2 << 20;

/// A copy on its way in, shared between the fetch that receives it and the
/// servers that pass it on: the latest chunks (at least [`ARRIVAL_WINDOW`]
/// bytes, or all not yet written to the partial file), how many bytes are
/// written, and how far the copy has come.
#[derive(Clone, Debug)]
pub struct Arrival {
    inner: Arc<ArrivalInner>,
}

#[derive(Debug)]
struct ArrivalInner {
    window: Mutex<Window>,
    written: std::sync::atomic::AtomicU64,
    progress: watch::Sender<Progress>,
}

/// The chunks in memory: `chunks` starts at byte `start` of the copy.
#[derive(Debug, Default)]
struct Window {
    start: u64,
    held: u64,
    chunks: std::collections::VecDeque<Bytes>,
}

impl Default for Arrival {
    fn default() -> Self {
        Arrival::new()
    }
}

impl Arrival {
    /// Nothing received yet.
    pub fn new() -> Arrival {
        Arrival {
            inner: Arc::new(ArrivalInner {
                window: Mutex::new(Window::default()),
                written: std::sync::atomic::AtomicU64::new(0),
                progress: watch::Sender::new(Progress::Receiving(0)),
            }),
        }
    }

    /// Watches the progress.
    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.inner.progress.subscribe()
    }

    /// The copy was given up: servers passing it on give up too.
    pub fn fail(&self) {
        self.inner.progress.send_replace(Progress::Failed);
    }

    /// Bytes kept in memory now (for tests and logs).
    pub fn held(&self) -> u64 {
        self.inner.window.lock().expect("arrival window lock").held
    }

    fn push(&self, chunk: Bytes) {
        let len = chunk.len() as u64;
        {
            let written = self
                .inner
                .written
                .load(std::sync::atomic::Ordering::Acquire);
            let mut w = self.inner.window.lock().expect("arrival window lock");
            w.held += len;
            w.chunks.push_back(chunk);
            // Let go of the oldest chunks beyond the window once they are
            // on disk, where a lagging server finds them.
            while let Some(front) = w.chunks.front() {
                let flen = front.len() as u64;
                if w.held - flen < ARRIVAL_WINDOW || w.start + flen > written {
                    break;
                }
                w.chunks.pop_front();
                w.start += flen;
                w.held -= flen;
            }
        }
        self.inner.progress.send_modify(|p| {
            if let Progress::Receiving(n) = p {
                *n += len;
            }
        });
    }

    fn wrote(&self, total: u64) {
        self.inner
            .written
            .store(total, std::sync::atomic::Ordering::Release);
    }

    fn done(&self) {
        self.inner.progress.send_replace(Progress::Done);
    }

    /// At most `max` bytes starting at byte `at`, which must have arrived:
    /// from memory, or `Err(n)` if they left the window: the first `n`
    /// bytes from `at` are on disk.
    fn slice(&self, at: u64, max: usize) -> Result<Bytes, u64> {
        let w = self.inner.window.lock().expect("arrival window lock");
        if at < w.start {
            return Err(w.start - at);
        }
        let mut start = w.start;
        for c in w.chunks.iter() {
            let end = start + c.len() as u64;
            if at < end {
                let from = (at - start) as usize;
                let to = c.len().min(from + max);
                return Ok(c.slice(from..to));
            }
            start = end;
        }
        Err(0)
    }
}

/// What a server holds for a requested hash.
pub enum Served {
    /// A complete, verified file.
    File {
        /// The open file (opened while the holder's lock was held, so a
        /// concurrent rename cannot make it vanish).
        file: std::fs::File,
        /// What it is.
        executable: ExecutableRef,
    },
    /// A copy still arriving, passed on from memory as it comes.
    Growing {
        /// The partial file, for bytes that left the arrival's window.
        file: std::fs::File,
        /// What it will be.
        executable: ExecutableRef,
        /// Its latest bytes and its progress.
        arrival: Arrival,
    },
    /// Not held.
    Missing(String),
}

/// A token bucket without burst: every send of a daemon reserves its bytes'
/// time on one shared link of `rate` bytes per second. `None` is unlimited.
#[derive(Debug)]
pub struct RateLimiter {
    rate: Option<f64>,
    next: Mutex<Option<Instant>>,
}

impl RateLimiter {
    /// A limiter for `mb_per_s` megabytes (10^6 bytes) per second; `None` or
    /// a non-positive rate is unlimited.
    pub fn new(mb_per_s: Option<f64>) -> RateLimiter {
        RateLimiter {
            rate: mb_per_s.filter(|r| *r > 0.0).map(|r| r * 1e6),
            next: Mutex::new(None),
        }
    }

    /// Bytes per chunk for sends through this link: what the link carries in
    /// [`CHUNK_LINK_TIME`], between [`MIN_STAGE_CHUNK`] and [`STAGE_CHUNK`].
    pub fn chunk_size(&self) -> usize {
        match self.rate {
            None => STAGE_CHUNK,
            Some(rate) => ((rate * CHUNK_LINK_TIME.as_secs_f64()) as usize)
                .clamp(MIN_STAGE_CHUNK, STAGE_CHUNK),
        }
    }

    /// Waits until `n` more bytes may go out. A link keeps up to
    /// [`LINK_CREDIT`] of idle time as credit, so that a sender woken a
    /// little late by the timer loses no bandwidth; a link idle for longer
    /// banks nothing, as a real one.
    pub async fn take(&self, n: usize) {
        let Some(rate) = self.rate else { return };
        let cost = Duration::from_secs_f64(n as f64 / rate);
        let due = {
            let mut next = self.next.lock().expect("rate limiter lock");
            let now = Instant::now();
            let earliest = now.checked_sub(LINK_CREDIT).unwrap_or(now);
            let start = next.map_or(now, |t| t.max(earliest));
            *next = Some(start + cost);
            start + cost
        };
        tokio::time::sleep_until(due).await;
    }
}

/// Serves one request on an authenticated staging connection: reads the
/// `Get`, asks `lookup` (which may wait a little for a copy about to
/// start arriving), streams the bytes through `limiter`. Returns the
/// number of bytes sent, or why the connection ended early.
pub async fn serve<R, W>(
    reader: &mut ConnReader<StageRequest, R>,
    w: &mut ConnWriter<StageReply, W>,
    lookup: impl AsyncFnOnce(String) -> Served,
    limiter: &RateLimiter,
) -> Result<u64, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let sha256 = read_request(reader, w).await?;
    let failed = |e: std::io::Error| format!("write failed: {e}");
    let (mut source, executable) = match lookup(sha256.clone()).await {
        Served::File { file, executable } => (Source::File(Arc::new(file)), executable),
        Served::Growing {
            file,
            executable,
            arrival,
        } => (
            Source::Memory {
                progress: arrival.subscribe(),
                arrival,
                file: Arc::new(file),
            },
            executable,
        ),
        Served::Missing(reason) => {
            w.send(&StageReply::Missing { reason }, &[])
                .await
                .map_err(failed)?;
            return Ok(0);
        }
    };
    // Header and payload of a chunk go out in one write; every chunk is
    // flushed at once, since the receiver passes nothing on before it has
    // the whole chunk (holding one back until the next fills the buffer
    // doubled the latency of every hop).
    let mut w: ConnWriter<StageReply, _> =
        ConnWriter::new(BufWriter::with_capacity(2 * STAGE_CHUNK, w.get_mut()));
    let chunk_size = limiter.chunk_size();
    let size = executable.size;
    w.send(&StageReply::Begin { executable }, &[])
        .await
        .map_err(failed)?;
    let mut sent = 0u64;
    while sent < size {
        let avail = source.available(sent, size, &mut w).await?;
        let want = ((avail - sent) as usize).min(chunk_size);
        let chunk = source.chunk(sent, want).await?;
        limiter.take(chunk.len()).await;
        w.send(&StageReply::Chunk, &chunk).await.map_err(failed)?;
        w.flush().await.map_err(failed)?;
        sent += chunk.len() as u64;
    }
    w.send(&StageReply::End, &[]).await.map_err(failed)?;
    w.flush().await.map_err(failed)?;
    Ok(sent)
}

/// Where [`serve`] takes the bytes from.
enum Source {
    /// A complete file.
    File(Arc<std::fs::File>),
    /// A copy still arriving (its partial file for bytes out of the window).
    Memory {
        arrival: Arrival,
        progress: watch::Receiver<Progress>,
        file: Arc<std::fs::File>,
    },
}

impl Source {
    /// How far the copy may be read now, past `sent` (waiting for a copy
    /// still arriving to get there); a failed copy is reported on `w`.
    async fn available<W: AsyncWrite + Unpin>(
        &mut self,
        sent: u64,
        size: u64,
        w: &mut ConnWriter<StageReply, W>,
    ) -> Result<u64, String> {
        let Source::Memory { progress: p, .. } = self else {
            return Ok(size);
        };
        loop {
            let now = *p.borrow_and_update();
            match now {
                Progress::Done => return Ok(size),
                Progress::Failed => {
                    let reason =
                        refuse(w, "the copy this server was receiving failed".into()).await;
                    let _ = w.flush().await;
                    return Err(reason);
                }
                Progress::Receiving(n) if n > sent => return Ok(n.min(size)),
                Progress::Receiving(_) => {
                    // Nothing new yet: let what was sent go out, then wait.
                    w.flush().await.map_err(|e| format!("write failed: {e}"))?;
                    if p.changed().await.is_err() {
                        return Err("the receiving side of this copy went away".into());
                    }
                }
            }
        }
    }

    /// The `want` bytes at `sent`: from memory while a copy arrives (from
    /// its partial file for bytes already out of the window).
    async fn chunk(&mut self, sent: u64, want: usize) -> Result<Bytes, String> {
        match self {
            Source::File(file) => read_at(file, sent, want).await,
            Source::Memory { arrival, file, .. } => match arrival.slice(sent, want) {
                Ok(chunk) => Ok(chunk),
                Err(0) => Err("the copy being received lost bytes it had announced".into()),
                Err(on_disk) => read_at(file, sent, want.min(on_disk as usize)).await,
            },
        }
    }
}

/// Reads a staging connection's one request: the SHA-256 of the executable
/// wanted (anything else is refused, with a `Missing` reply saying why).
async fn read_request<R, W>(
    reader: &mut ConnReader<StageRequest, R>,
    w: &mut ConnWriter<StageReply, W>,
) -> Result<String, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let sha256 = match reader.recv().await {
        Ok(Some((StageRequest::Get { sha256 }, _))) => sha256,
        Ok(None) => return Err("closed before asking".into()),
        Err(e) => return Err(format!("bad request: {e}")),
    };
    if !is_sha256_hex(&sha256) {
        let reason = format!(
            "`{}` is not a SHA-256",
            sha256.chars().take(80).collect::<String>()
        );
        return Err(refuse(w, reason).await);
    }
    Ok(sha256)
}

/// Tells the fetcher it gets nothing, and why (best effort: the connection
/// ends either way); the reason, for the caller's error.
async fn refuse<W: AsyncWrite + Unpin>(
    w: &mut ConnWriter<StageReply, W>,
    reason: String,
) -> String {
    let _ = w
        .send(
            &StageReply::Missing {
                reason: reason.clone(),
            },
            &[],
        )
        .await;
    reason
}

/// Reads `n` bytes at `offset` of `file` on the blocking pool.
async fn read_at(file: &Arc<std::fs::File>, offset: u64, n: usize) -> Result<Bytes, String> {
    use std::os::unix::fs::FileExt;
    let file = file.clone();
    tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| format!("reading the executable: {e}"))?;
        Ok(Bytes::from(buf))
    })
    .await
    .map_err(|e| format!("reading the executable: {e}"))?
}

#[cfg(test)]
#[path = "stage_tests.rs"]
mod tests;
