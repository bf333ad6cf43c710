//! The output of spawned processes, arriving from their local RMs on this
//! process's direct-message listener (one connection per spawned process,
//! handshake role [`crate::msg::Role::Output`]).
//!
//! Backpressure: a chunk is read from the socket only once the event stream
//! has room for it ([`super::OUTPUT_BUFFER`] bytes of output at most wait
//! there), and files are written before the next chunk is read. A slow
//! application thus slows the socket, and through it the spawned process.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use super::{Incoming, Shared, lock};
use crate::conn::ConnReader;
use crate::ids::{ProcessId, RequestId};
use crate::msg::{OutputFrame, StdStream};

/// Most output bytes ([`Incoming::Output`]) waiting on the event stream
/// before the client stops reading from the spawned processes' machines.
pub const OUTPUT_BUFFER: usize = 4 << 20;

/// What becomes of the standard output and error of a process started with
/// [`super::Carmi::class_spawn_with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SpawnOutput {
    /// As [`Incoming::Output`] events on this process's stream, then
    /// [`Incoming::OutputEnd`] (the default, and what [`super::Carmi::class_spawn`] does).
    #[default]
    Events,
    /// Appended to these files on this machine (created if missing), then
    /// [`Incoming::OutputEnd`]. Both may name the same file.
    Files {
        /// For standard output.
        stdout: PathBuf,
        /// For standard error.
        stderr: PathBuf,
    },
    /// Kept in files on the machine that runs the process
    /// (`WORK_DIR/output/<job>/<process>.{out,err}` of its local RM).
    Keep,
    /// Thrown away.
    Discard,
}

/// Largest output frame accepted; the local RM sends 64 KiB chunks. Smaller
/// than the budget, so one frame always fits once the stream drains.
const MAX_OUTPUT_FRAME: usize = 1 << 20;

/// Reads one spawned process's output until its `End` or the connection's end.
pub(super) async fn receive(
    shared: Arc<Shared>,
    mut r: ConnReader<OutputFrame, crate::tls::Reader>,
    process: ProcessId,
    request: RequestId,
) {
    *r.max_mut() = MAX_OUTPUT_FRAME;
    let files = lock(&shared.output_files).get(&request).cloned();
    let mut sink = match files {
        Some((out, err)) => match Files::open(&out, &err).await {
            Ok(f) => Sink::Files(Box::new(f)),
            Err(e) => {
                tracing::warn!(%process, "cannot open the output files: {e}; output comes as events");
                Sink::Events
            }
        },
        None => Sink::Events,
    };
    let complete = loop {
        match r.recv().await {
            Ok(Some((OutputFrame::Data { stream }, data))) => match &mut sink {
                Sink::Events => {
                    // A frame larger than the budget cannot arrive (MAX_OUTPUT_FRAME).
                    let Ok(permits) = shared
                        .output_budget
                        .acquire_many(u32::try_from(data.len()).unwrap_or(u32::MAX))
                        .await
                    else {
                        return;
                    };
                    // Given back by the event stream when the application takes the item.
                    permits.forget();
                    let item = Incoming::Output {
                        process,
                        request,
                        stream,
                        data,
                    };
                    if shared.events.send(item).is_err() {
                        return;
                    }
                }
                Sink::Files(f) => {
                    if let Err(e) = f.write(stream, &data).await {
                        tracing::warn!(%process, "writing output to a file failed: {e}");
                        break false;
                    }
                }
            },
            Ok(Some((OutputFrame::End, _))) => break true,
            Ok(None) => break false,
            Err(e) => {
                tracing::warn!(%process, "output connection dropped: {e}");
                break false;
            }
        }
    };
    if let Sink::Files(f) = &mut sink
        && let Err(e) = f.flush().await
    {
        tracing::warn!(%process, "flushing output files failed: {e}");
    }
    // One process per request: its files are done with either way.
    lock(&shared.output_files).remove(&request);
    let _ = shared.events.send(Incoming::OutputEnd {
        process,
        request,
        complete,
    });
}

/// Where one process's output goes on this side.
enum Sink {
    Events,
    Files(Box<Files>),
}

/// The two files of [`super::SpawnOutput::Files`] (one handle when both name the same file).
struct Files {
    out: tokio::fs::File,
    err: Option<tokio::fs::File>,
}

impl Files {
    async fn open(out: &Path, err: &Path) -> std::io::Result<Files> {
        let open = |p: PathBuf| async move {
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .await
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        let out_file = open(out.to_path_buf()).await?;
        let err_file = if out == err {
            None
        } else {
            Some(open(err.to_path_buf()).await?)
        };
        Ok(Files {
            out: out_file,
            err: err_file,
        })
    }

    async fn write(&mut self, stream: StdStream, data: &[u8]) -> std::io::Result<()> {
        match (stream, &mut self.err) {
            (StdStream::Stderr, Some(err)) => err.write_all(data).await,
            _ => self.out.write_all(data).await,
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush().await?;
        if let Some(err) = &mut self.err {
            err.flush().await?;
        }
        Ok(())
    }
}
