//! Length-prefixed frames: a JSON header (a protocol message) and a raw payload.
//!
//! ```text
//! u32 BE  length of everything after this field (header length field + header + payload)
//! u32 BE  header length
//! header  JSON of one message
//! payload raw bytes, verbatim (executables, application message bodies); may be empty
//! ```
//! The decoder waits for a whole frame before parsing it ("need more bytes"
//! is not an error). A frame longer than the maximum, or whose header does not
//! decode, is an error that closes that connection only.

use bytes::{Buf, Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Default largest frame accepted: room for a large executable in one frame.
pub const DEFAULT_MAX_FRAME: usize = 256 << 20;

/// What can go wrong with a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer announced a frame over the limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The header length does not fit in the frame.
    #[error("header length {header} exceeds frame length {frame}")]
    BadLength {
        /// Announced header length.
        header: usize,
        /// Frame length.
        frame: usize,
    },
    /// The header is not a message of the expected kind.
    #[error("undecodable message: {0}")]
    BadHeader(#[from] serde_json::Error),
    /// The connection closed in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
}

/// Tries to take one whole frame off the front of `buf`. `Ok(None)` means
/// more bytes are needed.
pub fn decode<T: DeserializeOwned>(
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<(T, Bytes)>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if len < 4 {
        return Err(FrameError::BadLength {
            header: 4,
            frame: len,
        });
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    let hlen = u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
    if hlen > len - 4 {
        return Err(FrameError::BadLength {
            header: hlen,
            frame: len,
        });
    }
    buf.advance(8);
    let mut frame = buf.split_to(len - 4).freeze();
    let header = frame.split_to(hlen);
    let msg = serde_json::from_slice(&header)?;
    Ok(Some((msg, frame)))
}

/// Encodes a frame header (length fields + JSON) for `msg` followed by `payload_len` bytes.
pub fn encode_header<T: Serialize>(msg: &T, payload_len: usize) -> Vec<u8> {
    let json = serde_json::to_vec(msg).expect("protocol messages always serialize");
    let mut out = Vec::with_capacity(8 + json.len());
    let total = 4 + json.len() + payload_len;
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    out
}

/// Writes one frame. Small payloads go out in one write; large ones are not copied.
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
            buf: BytesMut::with_capacity(64 * 1024),
            max,
        }
    }

    /// The next frame, or `Ok(None)` when the peer closed the connection cleanly between frames.
    pub async fn read<T: DeserializeOwned>(&mut self) -> Result<Option<(T, Bytes)>, FrameError> {
        loop {
            if let Some(frame) = decode(&mut self.buf, self.max)? {
                return Ok(Some(frame));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(64 * 1024);
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
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

    #[test]
    fn partial_frames_need_more_bytes() {
        let mut bytes = encode_header(&PeerMessage { tag: 7 }, 3);
        bytes.extend_from_slice(b"abc");
        for cut in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..cut]);
            assert!(decode::<PeerMessage>(&mut buf, 1024).unwrap().is_none());
        }
        let mut buf = BytesMut::from(&bytes[..]);
        let (m, p) = decode::<PeerMessage>(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(m.tag, 7);
        assert_eq!(&p[..], b"abc");
        assert!(buf.is_empty());
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0, 0][..]);
        assert!(matches!(
            decode::<PeerMessage>(&mut buf, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        let mut garbage = encode_header(&"not a peer message", 0);
        garbage[8] = b'{';
        let mut buf = BytesMut::from(&garbage[..]);
        assert!(decode::<PeerMessage>(&mut buf, 1024).is_err());
        let mut bad = BytesMut::from(&[0, 0, 0, 4, 0, 0, 0, 9][..]);
        assert!(matches!(
            decode::<PeerMessage>(&mut bad, 1024),
            Err(FrameError::BadLength { .. })
        ));
    }
}
