//! Length-prefixed frames over a byte stream: a JSON header (a protocol
//! message) and a raw payload. The layout, encoder, decoder and limit are
//! `carmi_proto::wire` (pure), re-exported here; this module reads and writes
//! them on tokio streams.
//!
//! A [`FrameReader`] holds memory for bytes that arrived, never for bytes a
//! length prefix merely announced, and gives back a buffer grown by a large
//! frame once that frame is taken: a peer that announces 256 MB and sends
//! 10 bytes costs 10 bytes (plus one small read buffer), and a burst of large
//! frames does not leave every connection holding its peak. A server can also
//! bound how long a started frame may take ([`FrameDeadline`]), so that an
//! authenticated peer cannot hold a partial frame open forever.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

// The codec is pure and lives in `carmi-proto` (the simulator uses it
// without tokio); re-exported here beside the reader that drives it, under
// the paths every daemon and client uses.
pub use carmi_proto::wire::{
    DEFAULT_MAX_FRAME, FrameError, decode, decode_raw, decode_raw_limited, encode_header,
    raw_prefix,
};

/// Spare room a [`FrameReader`] makes before reading when it knows nothing
/// about what comes (between frames): enough for any small message.
const SMALL_READ: usize = 4 * 1024;

/// Most room a [`FrameReader`] makes at once for a large announced frame; the
/// buffer grows further only as those bytes actually arrive.
const BIG_READ: usize = 256 * 1024;

/// After a frame larger than this, or when the buffer's capacity is, the
/// buffer is replaced (what remains in it copied); smaller ones keep it, so
/// that a stream of small messages does not allocate per message.
const KEEP_CAPACITY: usize = 16 * 1024;

/// How long a frame may take once its first byte has arrived: `base` plus
/// its announced length at `min_rate` bytes per second. Servers set one so
/// that a peer cannot keep a partial frame (and the memory holding it) open
/// indefinitely; between frames a connection may idle as long as it likes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameDeadline {
    /// Time any frame is allowed, however short.
    pub base: Duration,
    /// Slowest transfer rate tolerated for the rest of a large frame, in bytes per second.
    pub min_rate: u64,
}

impl FrameDeadline {
    /// The global RM's default: 30 s, plus one second per MiB (a 256 MiB
    /// upload may take over four minutes; a partial small frame is dropped
    /// after 30 s).
    pub const DEFAULT: FrameDeadline = FrameDeadline {
        base: Duration::from_secs(30),
        min_rate: 1 << 20,
    };

    /// How long a frame of `len` bytes may take in total.
    pub fn allowance(&self, len: usize) -> Duration {
        let rate = self.min_rate.max(1);
        self.base
            .saturating_add(Duration::from_secs(len as u64 / rate))
    }
}

/// Writes one frame. Small payloads go out in one write; large ones are not copied.
///
/// Connection kinds send through [`crate::conn::ConnWriter::send`], which
/// fixes the message type; this stays public for the handshake's callers and
/// for tests that write frames of their own (malformed ones included).
/// `tests/tests/one_conn.rs` keeps it out of daemon and client code.
#[doc(hidden)]
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut head = encode_header(msg, payload.len());
    if payload.len() <= 16 * 1024 {
        head.extend_from_slice(payload);
        w.write_all(&head).await
    } else {
        w.write_all(&head).await?;
        w.write_all(payload).await
    }
}

/// Reads frames from a byte stream, keeping partial frames buffered.
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    max: usize,
    /// Longest header (message JSON) accepted; `usize::MAX` unless set.
    max_header: usize,
    /// Boxed: most readers have none, and readers live inside other types.
    timing: Option<Box<Timing>>,
    /// Room for a whole announced frame at once ([`FrameReader::reserve_whole_frames`]).
    whole_frames: bool,
    /// Empty handles on the allocations of large frames handed out (whole
    /// frame mode only): once the receiver has dropped a frame, its
    /// allocation takes the next large frame. A fresh one would fault in
    /// every page again (256 page faults per MiB, a fifth of a bulk echo's time).
    spares: Vec<(BytesMut, usize)>,
}

/// Most bytes of past large frames a reader in whole frame mode keeps for
/// reuse: enough for a window of 1 MiB messages in flight, bounded so that
/// an idle connection holds little.
const SPARE_BYTES: usize = 16 << 20;

/// A reader's [`FrameDeadline`], and when the frame at the front of its
/// buffer got its first byte.
struct Timing {
    deadline: FrameDeadline,
    started: Option<Instant>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a reader with the default frame limit.
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader::with_max(inner, DEFAULT_MAX_FRAME)
    }

    /// Wraps a reader with frame limit `max`.
    pub fn with_max(inner: R, max: usize) -> FrameReader<R> {
        FrameReader {
            inner,
            buf: BytesMut::new(),
            max,
            max_header: usize::MAX,
            timing: None,
            whole_frames: false,
            spares: Vec::new(),
        }
    }

    /// Makes room for the whole of a frame as soon as its length is known,
    /// rather than for [`BIG_READ`] bytes at a time: a large frame then
    /// arrives into one allocation instead of a buffer that grows (and is
    /// copied) several times on the way. For connections whose peer has
    /// proved who it is and could send that many bytes anyway (a job's
    /// processes between themselves); a server facing clients keeps the
    /// default, where memory follows the bytes that arrived.
    pub fn reserve_whole_frames(&mut self) {
        self.whole_frames = true;
    }

    /// Bounds how long a started frame may take (none by default).
    pub fn set_deadline(&mut self, deadline: Option<FrameDeadline>) {
        self.timing = deadline.map(|deadline| {
            Box::new(Timing {
                deadline,
                started: (!self.buf.is_empty()).then(Instant::now),
            })
        });
    }

    /// The next frame, or `Ok(None)` when the peer closed the connection cleanly between frames.
    ///
    /// Connection kinds receive through [`crate::conn::ConnReader::recv`]
    /// (the type fixed once); daemon and client code does not call this
    /// (`tests/tests/one_conn.rs`).
    pub async fn read<T: DeserializeOwned>(&mut self) -> Result<Option<(T, Bytes)>, FrameError> {
        match self.read_raw().await? {
            Some((header, payload)) => Ok(Some((serde_json::from_slice(&header)?, payload))),
            None => Ok(None),
        }
    }

    /// Like [`FrameReader::read`], leaving the header undecoded (see [`decode_raw`]).
    pub async fn read_raw(&mut self) -> Result<Option<(Bytes, Bytes)>, FrameError> {
        loop {
            if let Some((header, payload)) =
                decode_raw_limited(&mut self.buf, self.max, self.max_header)?
            {
                self.after_frame(8 + header.len() + payload.len());
                return Ok(Some((header, payload)));
            }
            let announced = self.announced();
            let missing = announced.map_or(SMALL_READ, |len| 4 + len - self.buf.len());
            if self.buf.capacity() - self.buf.len() < SMALL_READ.min(missing) {
                let room = match announced {
                    Some(len) if self.whole_frames && len <= self.max => {
                        self.reuse_spare(4 + len);
                        missing.max(SMALL_READ)
                    }
                    _ => missing.clamp(SMALL_READ, BIG_READ),
                };
                self.buf.reserve(room);
            }
            let started = self
                .timing
                .as_ref()
                .and_then(|t| Some((t.deadline, t.started?)));
            let result = match started {
                Some((d, started)) => {
                    let waited = d.allowance(announced.unwrap_or(0));
                    tokio::time::timeout_at(started + waited, self.inner.read_buf(&mut self.buf))
                        .await
                        .map_err(|_| FrameError::Stalled {
                            len: announced.unwrap_or(0),
                            have: self.buf.len(),
                            waited,
                        })?
                }
                None => self.inner.read_buf(&mut self.buf).await,
            };
            // TLS reports a peer that closed without its close_notify as
            // UnexpectedEof: the same end as a plain close (and a cut inside
            // a frame is still `Truncated` below).
            let read = match result {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
                r => r?,
            };
            if read == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
            if let Some(t) = &mut self.timing
                && t.started.is_none()
            {
                t.started = Some(Instant::now());
            }
        }
    }

    /// The length the frame at the front of the buffer announced, once known.
    fn announced(&self) -> Option<usize> {
        let prefix: [u8; 4] = self.buf.get(..4)?.try_into().expect("4 bytes");
        Some(u32::from_be_bytes(prefix) as usize)
    }

    /// A frame of `taken` bytes was taken: the next one starts with its
    /// first byte (now, if some already wait). The buffer shares its
    /// allocation with the frames taken from it, so after a large frame it is
    /// replaced: an idle connection then holds at most [`KEEP_CAPACITY`] of
    /// its past frames, whatever their size.
    fn after_frame(&mut self, taken: usize) {
        if let Some(t) = &mut self.timing {
            t.started = (!self.buf.is_empty()).then(Instant::now);
        }
        if taken > KEEP_CAPACITY || self.buf.capacity() > KEEP_CAPACITY {
            let rest = BytesMut::from(&self.buf[..]);
            let mut old = std::mem::replace(&mut self.buf, rest);
            if self.whole_frames && taken > KEEP_CAPACITY && taken <= SPARE_BYTES {
                old.clear();
                self.keep_spare(old, taken);
            }
        }
    }

    /// Keeps `spare` (an empty handle on a `size`-byte frame's allocation),
    /// forgetting the oldest ones beyond [`SPARE_BYTES`].
    fn keep_spare(&mut self, spare: BytesMut, size: usize) {
        self.spares.push((spare, size));
        let mut total = 0;
        let kept = self
            .spares
            .iter()
            .rev()
            .take_while(|(_, size)| {
                total += size;
                total <= SPARE_BYTES
            })
            .count();
        let forget = self.spares.len() - kept;
        self.spares.drain(..forget);
    }

    /// Moves the frame begun in the buffer into a spare allocation that
    /// holds `whole` bytes and that no frame handed out uses any more, if
    /// there is one.
    fn reuse_spare(&mut self, whole: usize) {
        if self.buf.capacity() >= whole {
            return;
        }
        let Some(i) = self
            .spares
            .iter_mut()
            .position(|(s, size)| *size >= whole && s.try_reclaim(whole))
        else {
            return;
        };
        let (mut spare, _) = self.spares.remove(i);
        spare.extend_from_slice(&self.buf);
        self.buf = spare;
    }

    /// Bytes held for frames not yet complete, and the capacity holding them.
    pub fn buffered(&self) -> (usize, usize) {
        (self.buf.len(), self.buf.capacity())
    }

    /// Refuses, from now on, a frame whose header (message JSON) is longer
    /// than `max` bytes, as soon as the header's length has arrived.
    pub fn set_max_header(&mut self, max: usize) {
        self.max_header = max;
    }

    /// The frame limit, adjustable (the handshake lowers it while it runs).
    pub fn max_mut(&mut self) -> &mut usize {
        &mut self.max
    }

    /// The underlying reader.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::PeerMessage;

    #[tokio::test]
    async fn an_over_limit_header_is_refused_on_its_length_alone() {
        use tokio::io::AsyncWriteExt;
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let mut r = FrameReader::new(b);
        r.set_max_header(1000);
        // 100 MB announced, of which a 50 MB header; only the two lengths sent.
        a.write_all(&(100u32 << 20).to_be_bytes()).await.unwrap();
        a.write_all(&(50u32 << 20).to_be_bytes()).await.unwrap();
        let refused = tokio::time::timeout(Duration::from_secs(10), r.read::<PeerMessage>())
            .await
            .expect("refused without waiting for the body");
        match refused {
            Err(FrameError::HeaderTooLarge { len, max }) => {
                assert_eq!((len, max), (50 << 20, 1000))
            }
            other => panic!("not refused on its header length: {other:?}"),
        }
        // Within the limit, the same reader settings take a frame whole.
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let mut r = FrameReader::new(b);
        r.set_max_header(1000);
        write_frame(&mut a, &PeerMessage { tag: 3 }, &[1; 5000])
            .await
            .unwrap();
        let (m, p) = r.read::<PeerMessage>().await.unwrap().unwrap();
        assert_eq!((m.tag, p.len()), (3, 5000));
    }

    #[tokio::test]
    async fn memory_follows_arrived_bytes_not_announced_ones() {
        use tokio::io::AsyncWriteExt;
        let (mut a, b) = tokio::io::duplex(1 << 20);
        let mut r = FrameReader::new(b);
        // 200 MB announced, 10 bytes sent.
        a.write_all(&(200u32 << 20).to_be_bytes()).await.unwrap();
        a.write_all(&[0; 10]).await.unwrap();
        let pending =
            tokio::time::timeout(Duration::from_millis(50), r.read::<PeerMessage>()).await;
        assert!(pending.is_err(), "the frame is incomplete");
        let (len, cap) = r.buffered();
        assert_eq!(len, 14);
        assert!(cap <= 2 * BIG_READ, "capacity {cap} for 14 bytes");
    }

    #[tokio::test]
    async fn a_reader_with_room_for_whole_frames_reads_large_frames_whole() {
        let (a, mut b) = tokio::io::duplex(64 * 1024);
        let mut r = FrameReader::new(a);
        r.reserve_whole_frames();
        let bodies: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; (1 << 20) + i as usize]).collect();
        let sent = bodies.clone();
        let writer = tokio::spawn(async move {
            for body in &sent {
                write_frame(&mut b, &"m", body).await.unwrap();
            }
        });
        for body in &bodies {
            let (header, payload) = r.read::<String>().await.unwrap().unwrap();
            assert_eq!(header, "m");
            assert_eq!(&payload[..], &body[..]);
        }
        writer.await.unwrap();
        // Nothing large stays behind between frames.
        assert!(r.buffered().1 <= KEEP_CAPACITY, "{:?}", r.buffered());
    }

    /// A large frame the receiver dropped lends its allocation to the next
    /// one; one still held does not, and is never written over.
    #[tokio::test]
    async fn a_dropped_large_frame_lends_its_memory_to_the_next() {
        let (a, mut b) = tokio::io::duplex(64 * 1024);
        let mut r = FrameReader::new(a);
        r.reserve_whole_frames();
        let writer = tokio::spawn(async move {
            for i in 0..3u8 {
                write_frame(&mut b, &"m", &vec![i; 1 << 20]).await.unwrap();
            }
        });
        let (_, first) = r.read::<String>().await.unwrap().unwrap();
        let at = first.as_ptr();
        let (_, second) = r.read::<String>().await.unwrap().unwrap();
        assert_ne!(second.as_ptr(), at, "the first frame is still held");
        assert!(
            first.iter().all(|&x| x == 0),
            "a held frame is never written over"
        );
        drop(first);
        let (_, third) = r.read::<String>().await.unwrap().unwrap();
        assert_eq!(third.as_ptr(), at, "the first frame's memory taken again");
        assert!(third.iter().all(|&x| x == 2) && second.iter().all(|&x| x == 1));
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn a_large_frame_leaves_no_large_buffer_behind() {
        let (mut a, b) = tokio::io::duplex(1 << 20);
        let mut r = FrameReader::new(b);
        let payload = vec![7u8; 3 << 20];
        let writer = tokio::spawn(async move {
            write_frame(&mut a, &PeerMessage { tag: 1 }, &payload)
                .await
                .unwrap();
            a
        });
        let (m, p) = r.read::<PeerMessage>().await.unwrap().unwrap();
        assert_eq!((m.tag, p.len()), (1, 3 << 20));
        let (len, cap) = r.buffered();
        assert_eq!(len, 0);
        assert!(cap <= KEEP_CAPACITY, "an idle reader keeps {cap} bytes");
        drop(writer.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_frame_ends_after_its_allowance_an_idle_link_does_not() {
        use tokio::io::AsyncWriteExt;
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let mut r = FrameReader::new(b);
        let d = FrameDeadline {
            base: Duration::from_secs(30),
            min_rate: 1 << 20,
        };
        r.set_deadline(Some(d));
        // Idle between frames: no deadline.
        let idle = tokio::time::timeout(Duration::from_secs(3600), r.read::<PeerMessage>()).await;
        assert!(idle.is_err(), "an idle connection is not a stalled frame");
        // 4 MiB announced, a few bytes sent, then nothing: 30 s + 4 s allowed.
        a.write_all(&(4u32 << 20).to_be_bytes()).await.unwrap();
        a.write_all(b"abc").await.unwrap();
        let t0 = Instant::now();
        let err = r.read::<PeerMessage>().await.unwrap_err();
        let waited = t0.elapsed();
        assert!(
            matches!(err, FrameError::Stalled { len, have: 7, .. } if len == 4 << 20),
            "{err}"
        );
        assert!(waited <= Duration::from_secs(34), "{waited:?}");
        assert!(err.to_string().contains("after 34 s"), "{err}");
    }
}
