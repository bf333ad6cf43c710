//! Length-prefixed frames, as bytes: the layout, its encoder and decoder,
//! and the frame limit. Pure (no I/O): the tokio reader and writer in
//! `carmi_api::frame` drive it, and the simulator encodes and decodes the same
//! frames without a socket.
//!
//! ```text
//! u32 BE  length of everything after this field (header length field + header + payload)
//! u32 BE  header length
//! header  JSON of one message
//! payload raw bytes, verbatim (executables, application message bodies); may be empty
//! ```
//! The decoder waits for a whole frame before parsing it ("need more bytes"
//! is not an error). A frame longer than the maximum, or whose header does not
//! decode, is an error that closes that connection only. The decoder reserves
//! nothing for announced bytes: memory follows the bytes that arrived.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Default largest frame accepted: room for a large executable in one frame.
pub const DEFAULT_MAX_FRAME: usize = 256 << 20;

/// What can go wrong with a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed (a reader's error; the codec itself does no I/O).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer announced a message (frame header) over the reader's
    /// header limit: refused on the announced length alone, before the
    /// header's bytes arrive.
    #[error(
        "a message of {len} bytes exceeds the limit of {max} bytes (bulk bytes travel in the frame's payload, not in the message)"
    )]
    HeaderTooLarge {
        /// Announced header length.
        len: usize,
        /// The limit.
        max: usize,
    },
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
    /// A started frame did not finish within the reader's deadline
    /// (`carmi_api::frame::FrameDeadline`).
    #[error(
        "a frame of {len} bytes was still incomplete ({have} bytes arrived) after {} s",
        waited.as_secs()
    )]
    Stalled {
        /// Announced length (0 while not even the length had arrived).
        len: usize,
        /// Bytes of it that arrived.
        have: usize,
        /// How long it was given.
        waited: Duration,
    },
}

/// Tries to take one whole frame off the front of `buf`. `Ok(None)` means
/// more bytes are needed.
pub fn decode<T: DeserializeOwned>(
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<(T, Bytes)>, FrameError> {
    match decode_raw(buf, max)? {
        Some((header, payload)) => Ok(Some((serde_json::from_slice(&header)?, payload))),
        None => Ok(None),
    }
}

/// Like [`decode`], leaving the header undecoded: the JSON bytes, then the
/// payload. A server decodes a large header where it does not hold up others.
pub fn decode_raw(buf: &mut BytesMut, max: usize) -> Result<Option<(Bytes, Bytes)>, FrameError> {
    decode_raw_limited(buf, max, usize::MAX)
}

/// Like [`decode_raw`], also refusing a header longer than `max_header` as
/// soon as its length field has arrived: a server need not wait for (and
/// hold) megabytes it will refuse anyway.
pub fn decode_raw_limited(
    buf: &mut BytesMut,
    max: usize,
    max_header: usize,
) -> Result<Option<(Bytes, Bytes)>, FrameError> {
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
    if buf.len() >= 8 {
        let hlen = u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
        if hlen > len - 4 {
            return Err(FrameError::BadLength {
                header: hlen,
                frame: len,
            });
        }
        if hlen > max_header {
            return Err(FrameError::HeaderTooLarge {
                len: hlen,
                max: max_header,
            });
        }
    }
    // No reservation here: memory follows the bytes that arrive, not the
    // length a peer announces.
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let hlen = u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
    buf.advance(8);
    let mut frame = buf.split_to(len - 4).freeze();
    let header = frame.split_to(hlen);
    Ok(Some((header, frame)))
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

/// The length fields of a frame whose header is `header_len` bytes of JSON
/// and whose payload `payload_len`: with them, a frame read raw is written
/// out again byte for byte (a relay passing a machine's frames on).
pub fn raw_prefix(header_len: usize, payload_len: usize) -> [u8; 8] {
    let total = 4 + header_len + payload_len;
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&(total as u32).to_be_bytes());
    out[4..].copy_from_slice(&(header_len as u32).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Tagged {
        tag: u64,
    }

    #[test]
    fn a_raw_prefix_rebuilds_the_frame_it_came_from() {
        let mut bytes = encode_header(&Tagged { tag: 7 }, 3);
        bytes.extend_from_slice(b"abc");
        let (header, payload) = decode_raw(&mut BytesMut::from(&bytes[..]), 1024)
            .unwrap()
            .unwrap();
        let mut again = raw_prefix(header.len(), payload.len()).to_vec();
        again.extend_from_slice(&header);
        again.extend_from_slice(&payload);
        assert_eq!(again, bytes);
    }

    #[test]
    fn partial_frames_need_more_bytes() {
        let mut bytes = encode_header(&Tagged { tag: 7 }, 3);
        bytes.extend_from_slice(b"abc");
        for cut in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..cut]);
            assert!(decode::<Tagged>(&mut buf, 1024).unwrap().is_none());
        }
        let mut buf = BytesMut::from(&bytes[..]);
        let (m, p) = decode::<Tagged>(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(m.tag, 7);
        assert_eq!(&p[..], b"abc");
        assert!(buf.is_empty());
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0, 0][..]);
        assert!(matches!(
            decode::<Tagged>(&mut buf, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        let mut garbage = encode_header(&"not a tagged message", 0);
        garbage[8] = b'{';
        let mut buf = BytesMut::from(&garbage[..]);
        assert!(decode::<Tagged>(&mut buf, 1024).is_err());
        let mut bad = BytesMut::from(&[0, 0, 0, 4, 0, 0, 0, 9][..]);
        assert!(matches!(
            decode::<Tagged>(&mut bad, 1024),
            Err(FrameError::BadLength { .. })
        ));
    }
}
