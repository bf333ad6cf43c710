//! Forwarding a spawned process's standard output and error to the process
//! that asked for it ([`OutputRoute::Forward`]).
//!
//! The process writes into two pipes. One task per process reads both and
//! writes each chunk as an [`OutputFrame::Data`] frame on a direct connection
//! to the requester's endpoint (TLS, handshake as [`Role::Output`] bound to
//! the session), then an
//! [`OutputFrame::End`] once both pipes reach end of file. Nothing is queued
//! in between: a chunk is read only after the previous one was written, so a
//! requester that reads slowly slows the socket, the socket the pipe, and the
//! pipe the process itself (it blocks in `write`). Memory stays at two chunk
//! buffers per process whatever the process prints.
//!
//! If the requester cannot be reached, or the connection breaks, the rest of
//! the output goes to the files the process would have had without
//! forwarding (`WORK_DIR/output/<job>/<process>.{out,err}`), so the process
//! never blocks on a pipe that nobody reads, and nothing is lost silently.

use std::path::PathBuf;

use carmi_api::conn::ConnWriter;
use carmi_api::frame::FrameReader;
use carmi_api::handshake::{self, Secret};
use carmi_api::ids::{JobId, ProcessId, RequestId};
use carmi_api::msg::{OutputFrame, Role, StdStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufWriter};

use crate::spawn::OutputPipes;

/// Bytes read from a pipe at a time (and so the largest frame payload).
pub const CHUNK: usize = 64 * 1024;

/// Where one process's output goes.
#[derive(Clone, Debug)]
pub struct ForwardTarget {
    /// The requester's direct-message endpoint, `host:port`.
    pub endpoint: String,
    /// The requester's `ClassSpawn` request id.
    pub request: RequestId,
    /// The job.
    pub job: JobId,
    /// The spawned process.
    pub process: ProcessId,
    /// Directory for the fallback files (`<process>.out`, `<process>.err`).
    pub fallback_dir: PathBuf,
}

/// Forwards `pipes` to `target` until both reach end of file (see the module docs).
pub async fn forward(pipes: OutputPipes, target: ForwardTarget, secret: Secret) {
    let (mut out, mut err) = match (
        tokio::process::ChildStdout::from_std(pipes.stdout),
        tokio::process::ChildStderr::from_std(pipes.stderr),
    ) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            // Dropping the pipes gives the process EPIPE rather than a hang.
            tracing::error!(process = %target.process, error = %e, "cannot read the process's output pipes; its output is lost");
            return;
        }
    };
    let mut open = [true, true];
    match connect(&target, &secret).await {
        Ok(w) => {
            let mut w = ConnWriter::new(BufWriter::with_capacity(CHUNK + 256, w));
            match pump(&mut out, &mut err, &mut open, &mut w).await {
                Ok(()) => return,
                Err(e) => tracing::warn!(
                    process = %target.process,
                    endpoint = %target.endpoint,
                    error = %e,
                    dir = %target.fallback_dir.display(),
                    "forwarding output failed; the rest goes to files"
                ),
            }
        }
        Err(e) => tracing::warn!(
            process = %target.process,
            endpoint = %target.endpoint,
            error = %e,
            dir = %target.fallback_dir.display(),
            "cannot reach the requester for the output; it goes to files"
        ),
    }
    if let Err(e) = drain_to_files(&mut out, &mut err, open, &target).await {
        tracing::warn!(process = %target.process, error = %e, "writing the output to files failed; the rest is lost");
    }
}

/// Opens the direct connection to the requester and introduces the stream.
async fn connect(
    target: &ForwardTarget,
    secret: &Secret,
) -> Result<carmi_api::tls::Writer, String> {
    let stream = carmi_api::net::dial(&target.endpoint, carmi_api::net::CONNECT_TIMEOUT)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let carmi_api::tls::Stream {
        reader: r,
        writer: mut w,
        binding,
    } = tokio::time::timeout(
        handshake::HANDSHAKE_TIMEOUT,
        carmi_api::tls::connect(stream),
    )
    .await
    .map_err(|_| "TLS: no answer in time".to_string())?
    .map_err(|e| format!("TLS: {e}"))?;
    let mut r = FrameReader::new(r);
    let role = Role::Output {
        job: target.job,
        process: target.process,
        request: target.request,
    };
    handshake::client_bound(&mut r, &mut w, secret, &role, &binding)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    Ok(w)
}

/// Reads whichever pipe has data and writes it out as frames, then `End`.
/// `open` tracks the pipes not yet at end of file, for the fallback.
async fn pump<O, E, W>(
    out: &mut O,
    err: &mut E,
    open: &mut [bool; 2],
    w: &mut ConnWriter<OutputFrame, W>,
) -> std::io::Result<()>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf_out = vec![0u8; CHUNK];
    let mut buf_err = vec![0u8; CHUNK];
    while open[0] || open[1] {
        let (stream, n) = tokio::select! {
            r = out.read(&mut buf_out), if open[0] => (StdStream::Stdout, r?),
            r = err.read(&mut buf_err), if open[1] => (StdStream::Stderr, r?),
        };
        let (slot, buf) = match stream {
            StdStream::Stdout => (0, &buf_out),
            StdStream::Stderr => (1, &buf_err),
        };
        if n == 0 {
            open[slot] = false;
            continue;
        }
        w.send(&OutputFrame::Data { stream }, &buf[..n]).await?;
        // Flushed at once: output is for people watching it, and the next
        // read may wait for a long time.
        w.flush().await?;
    }
    w.send(&OutputFrame::End, &[]).await?;
    w.flush().await?;
    w.shutdown().await
}

/// Appends what is left in the open pipes to `<process>.out` / `.err`.
async fn drain_to_files<O, E>(
    out: &mut O,
    err: &mut E,
    open: [bool; 2],
    target: &ForwardTarget,
) -> std::io::Result<()>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    tokio::fs::create_dir_all(&target.fallback_dir).await?;
    let file = |ext: &str| {
        let path = target
            .fallback_dir
            .join(format!("{}.{ext}", target.process.0));
        async move {
            // In a directory only the local RM writes; never through a link
            // all the same (see `crate::sandbox`, "No way up").
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .await
        }
    };
    let (mut fo, mut fe) = (file("out").await?, file("err").await?);
    let copy_out = async {
        if open[0] {
            tokio::io::copy(out, &mut fo).await?;
        }
        Ok::<_, std::io::Error>(())
    };
    let copy_err = async {
        if open[1] {
            tokio::io::copy(err, &mut fe).await?;
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::try_join!(copy_out, copy_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both streams arrive complete, each in order, and `End` comes last.
    #[tokio::test]
    async fn pump_frames_both_streams_in_order_then_end() {
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut out: &[u8] = &big;
        let mut err: &[u8] = b"oops\n";
        let (client, server) = tokio::io::duplex(8 * 1024);
        let reader = tokio::spawn(async move {
            let mut r = carmi_api::conn::ConnReader::with_max(server, 1 << 20);
            let (mut o, mut e, mut ended) = (Vec::new(), Vec::new(), false);
            while let Some((frame, data)) = r.recv().await.unwrap() {
                assert!(!ended, "nothing after End");
                match frame {
                    OutputFrame::Data {
                        stream: StdStream::Stdout,
                    } => o.extend_from_slice(&data),
                    OutputFrame::Data {
                        stream: StdStream::Stderr,
                    } => e.extend_from_slice(&data),
                    OutputFrame::End => ended = true,
                }
            }
            (o, e, ended)
        });
        let mut w = ConnWriter::new(client);
        let mut open = [true, true];
        pump(&mut out, &mut err, &mut open, &mut w).await.unwrap();
        drop(w);
        let (o, e, ended) = reader.await.unwrap();
        assert_eq!(o, big);
        assert_eq!(e, b"oops\n");
        assert!(ended);
        assert_eq!(open, [false, false]);
    }
}
