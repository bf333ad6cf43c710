//! One typed connection for every daemon and client: frames of [`crate::frame`]
//! whose headers are `Out` messages one way and `In` messages the other.
//!
//! Every connection kind used to pair a [`FrameReader`] with a bare writer
//! and call [`write_frame`] by hand, each with its own message types spelled
//! at every call. A [`Conn`] fixes the two message types once, so that a
//! connection cannot send a message of another kind of connection, and
//! carries the reader's settings (frame limit, per-frame deadline) with it.
//! [`Conn::split`] gives a reading half and a writing half for a connection
//! whose reads and writes run in different tasks. The wire bytes are those of
//! [`crate::frame`]: converting a connection kind changes no byte.
//!
//! The handshake of [`crate::handshake`] speaks its own messages before the
//! connection's kind is known; it works on [`Conn::parts_mut`].

use std::marker::PhantomData;

use std::io::IoSlice;

use bytes::{Buf, Bytes};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::frame::{
    DEFAULT_MAX_FRAME, FrameDeadline, FrameError, FrameReader, encode_header, write_frame,
};

/// A connection that sends `Out` messages and receives `In` messages, each
/// with a raw payload, over a reading half `R` and a writing half `W` (plain
/// TCP or TLS: [`crate::tls::Reader`] and [`crate::tls::Writer`] by default).
pub struct Conn<Out, In, R = crate::tls::Reader, W = crate::tls::Writer> {
    reader: ConnReader<In, R>,
    writer: ConnWriter<Out, W>,
}

/// The reading half of a [`Conn`]: receives `In` messages.
pub struct ConnReader<In, R = crate::tls::Reader> {
    frames: FrameReader<R>,
    _in: PhantomData<fn() -> In>,
}

/// The writing half of a [`Conn`]: sends `Out` messages.
pub struct ConnWriter<Out, W = crate::tls::Writer> {
    inner: W,
    _out: PhantomData<fn(Out)>,
}

impl<Out, In, R, W> Conn<Out, In, R, W>
where
    Out: Serialize,
    In: DeserializeOwned,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    /// A connection over its two halves, with the default frame limit and no deadline.
    pub fn new(reader: R, writer: W) -> Self {
        Conn::with_max(reader, writer, DEFAULT_MAX_FRAME)
    }

    /// A connection refusing frames longer than `max` bytes.
    pub fn with_max(reader: R, writer: W, max: usize) -> Self {
        Conn::from_parts(FrameReader::with_max(reader, max), writer)
    }

    /// A connection over a reader that may already hold buffered bytes (after a handshake).
    pub fn from_parts(frames: FrameReader<R>, writer: W) -> Self {
        Conn {
            reader: ConnReader {
                frames,
                _in: PhantomData,
            },
            writer: ConnWriter {
                inner: writer,
                _out: PhantomData,
            },
        }
    }

    /// Sends one message with its payload (empty for most messages).
    pub async fn send(&mut self, msg: &Out, payload: &[u8]) -> std::io::Result<()> {
        self.writer.send(msg, payload).await
    }

    /// The next message and its payload, or `Ok(None)` when the peer closed
    /// the connection cleanly between frames.
    pub async fn recv(&mut self) -> Result<Option<(In, Bytes)>, FrameError> {
        self.reader.recv().await
    }

    /// The next frame with its header not yet decoded (see [`ConnReader::recv_raw`]).
    pub async fn recv_raw(&mut self) -> Result<Option<RawFrame<In>>, FrameError> {
        self.reader.recv_raw().await
    }

    /// Pushes out what a buffering writer holds.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.writer.inner.flush().await
    }

    /// Bounds how long a started frame may take (none by default).
    pub fn set_deadline(&mut self, deadline: Option<FrameDeadline>) {
        self.reader.set_deadline(deadline);
    }

    /// The frame limit, adjustable.
    pub fn max_mut(&mut self) -> &mut usize {
        self.reader.frames.max_mut()
    }

    /// The untyped frame reader and the writer, for the handshake, which
    /// speaks its own messages before the connection's kind is settled.
    pub fn parts_mut(&mut self) -> (&mut FrameReader<R>, &mut W) {
        (&mut self.reader.frames, &mut self.writer.inner)
    }

    /// The reading and writing halves, for separate tasks.
    pub fn split(self) -> (ConnReader<In, R>, ConnWriter<Out, W>) {
        (self.reader, self.writer)
    }
}

impl<In: DeserializeOwned, R: AsyncRead + Unpin> ConnReader<In, R> {
    /// A reading half on its own (a task that only receives), refusing
    /// frames longer than `max` bytes.
    pub fn with_max(reader: R, max: usize) -> Self {
        ConnReader {
            frames: FrameReader::with_max(reader, max),
            _in: PhantomData,
        }
    }

    /// A reading half over a frame reader that may already hold buffered
    /// bytes: the handshake ran on it, and what follows is of this kind.
    pub fn from_frames(frames: FrameReader<R>) -> Self {
        ConnReader {
            frames,
            _in: PhantomData,
        }
    }

    /// The same half receiving another kind of message, keeping any bytes
    /// already buffered: a protocol whose first message (a hello) says
    /// which kind of peer this is and so what it sends next.
    pub fn retype<Next: DeserializeOwned>(self) -> ConnReader<Next, R> {
        ConnReader {
            frames: self.frames,
            _in: PhantomData,
        }
    }

    /// The frame limit, adjustable (a hello is small; what follows may not be).
    pub fn max_mut(&mut self) -> &mut usize {
        self.frames.max_mut()
    }

    /// The next message and its payload, or `Ok(None)` when the peer closed
    /// the connection cleanly between frames.
    pub async fn recv(&mut self) -> Result<Option<(In, Bytes)>, FrameError> {
        self.frames.read().await
    }

    /// The next frame with its header left undecoded, or `Ok(None)` at a
    /// clean close: for a server that checks the header's size before
    /// decoding it, and decodes a large one where it holds up no other
    /// connection ([`RawFrame::decode`]).
    pub async fn recv_raw(&mut self) -> Result<Option<RawFrame<In>>, FrameError> {
        Ok(self
            .frames
            .read_raw()
            .await?
            .map(|(header, payload)| RawFrame {
                header,
                payload,
                _in: PhantomData,
            }))
    }

    /// Bounds how long a started frame may take (none by default).
    pub fn set_deadline(&mut self, deadline: Option<FrameDeadline>) {
        self.frames.set_deadline(deadline);
    }

    /// The untyped frame reader underneath.
    pub fn frames_mut(&mut self) -> &mut FrameReader<R> {
        &mut self.frames
    }
}

/// A received frame whose header is still JSON bytes; it decodes only as
/// the connection's `In` messages.
pub struct RawFrame<In> {
    /// The header's JSON.
    pub header: Bytes,
    /// The raw payload.
    pub payload: Bytes,
    _in: PhantomData<fn() -> In>,
}

impl<In: DeserializeOwned> RawFrame<In> {
    /// The header as the connection's message.
    pub fn decode(&self) -> Result<In, serde_json::Error> {
        serde_json::from_slice(&self.header)
    }
}

impl<Out: Serialize, W: AsyncWrite + Unpin> ConnWriter<Out, W> {
    /// A writing half on its own (a task that only sends).
    pub fn new(inner: W) -> Self {
        ConnWriter {
            inner,
            _out: PhantomData,
        }
    }

    /// Sends one message with its payload (empty for most messages).
    pub async fn send(&mut self, msg: &Out, payload: &[u8]) -> std::io::Result<()> {
        write_frame(&mut self.inner, msg, payload).await
    }

    /// Pushes out what a buffering writer holds.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().await
    }

    /// The same half sending another kind of message (see [`ConnReader::retype`]).
    pub fn retype<Next: Serialize>(self) -> ConnWriter<Next, W> {
        ConnWriter {
            inner: self.inner,
            _out: PhantomData,
        }
    }

    /// Closes the writing direction (a TLS close_notify, a TCP FIN).
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        self.inner.shutdown().await
    }

    /// The writer underneath.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Writes what `rx` brings until it closes: each burst of queued
    /// messages through a 64 KiB buffer before one flush, so that many small
    /// messages cost one system call (a link carrying many machines' bytes).
    pub async fn send_queued(
        &mut self,
        rx: &mut tokio::sync::mpsc::Receiver<(Out, Bytes)>,
    ) -> std::io::Result<()> {
        let mut w: ConnWriter<Out, _> = ConnWriter::new(tokio::io::BufWriter::with_capacity(
            64 * 1024,
            &mut self.inner,
        ));
        while let Some((msg, payload)) = rx.recv().await {
            w.send(&msg, &payload).await?;
            while let Ok((msg, payload)) = rx.try_recv() {
                w.send(&msg, &payload).await?;
            }
            w.flush().await?;
        }
        Ok(())
    }
}

/// One frame of an `Out` message encoded ahead of its write, so that it can
/// be written in pieces (a non-blocking write that the socket takes only in
/// part, the rest later from a writer task) and gathered with other frames
/// into one vectored write: the length fields and JSON in `head`, the payload
/// shared, never copied.
pub struct OutFrame<Out> {
    head: Bytes,
    body: Bytes,
    _out: PhantomData<fn(Out)>,
}

impl<Out: Serialize> OutFrame<Out> {
    /// The frame of `msg` with `body` as its payload.
    pub fn new(msg: &Out, body: Bytes) -> Self {
        OutFrame {
            head: Bytes::from(encode_header(msg, body.len())),
            body,
            _out: PhantomData,
        }
    }
}

impl<Out> OutFrame<Out> {
    /// Whether every byte has been written.
    pub fn is_done(&self) -> bool {
        self.head.is_empty() && self.body.is_empty()
    }

    /// Bytes not yet written.
    pub fn remaining(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// Appends what is left to write (at most two slices) to `out`.
    pub fn slices<'a>(&'a self, out: &mut Vec<IoSlice<'a>>) {
        for part in [&self.head, &self.body] {
            if !part.is_empty() {
                out.push(IoSlice::new(part));
            }
        }
    }

    /// Marks up to `n` more bytes written; returns how many of them this frame took.
    pub fn advance(&mut self, n: usize) -> usize {
        let from_head = n.min(self.head.len());
        self.head.advance(from_head);
        let from_body = (n - from_head).min(self.body.len());
        self.body.advance(from_body);
        from_head + from_body
    }

    /// Writes as much as `socket` takes now without waiting; true when the
    /// whole frame is written. A full socket buffer is not an error (false).
    pub fn try_write(&mut self, socket: &tokio::net::tcp::OwnedWriteHalf) -> std::io::Result<bool> {
        while !self.is_done() {
            let mut slices = Vec::with_capacity(2);
            self.slices(&mut slices);
            match socket.try_write_vectored(&slices) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.advance(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

impl<Out, W: AsyncWrite + Unpin> ConnWriter<Out, W> {
    /// Writes what is left of an encoded frame (see [`OutFrame`]); on a
    /// buffering writer, small frames gather in its buffer until a flush.
    pub async fn send_frame(&mut self, frame: &mut OutFrame<Out>) -> std::io::Result<()> {
        while !frame.is_done() {
            let mut slices = Vec::with_capacity(2);
            frame.slices(&mut slices);
            let n = self.inner.write_vectored(&slices).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            frame.advance(n);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
