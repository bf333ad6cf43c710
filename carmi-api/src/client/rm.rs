//! The connection to the local RM: one task writes requests and uploads, one reads events.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::tls::{Reader, Writer};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::io::BufWriter;
use tokio::sync::{mpsc, oneshot};

use super::Shared;
use crate::conn::{ConnReader, ConnWriter};
use crate::frame::DEFAULT_MAX_FRAME;
use crate::ids::RequestId;
use crate::msg::{
    ExecutableRef, FailureCode, FromLocal, OutputMode, Request, SpawnTarget, ToLocal,
};

/// Largest executable the client uploads: it travels as one frame payload,
/// and the frame also holds the JSON header.
pub(super) const MAX_EXECUTABLE: usize = DEFAULT_MAX_FRAME - 64 * 1024;

/// Work for the writer task, in the order the application asked for it.
pub(super) enum Command {
    /// A request to write as is.
    Request { id: RequestId, body: Request },
    /// A `ClassSpawn` whose executable must be read, hashed and perhaps uploaded first.
    Spawn(SpawnCmd),
    /// Acknowledge once everything before it has been written out.
    Flush(oneshot::Sender<()>),
}

impl Command {
    /// The request this command carries, if any.
    pub(super) fn request_id(&self) -> Option<RequestId> {
        match self {
            Command::Request { id, .. } | Command::Spawn(SpawnCmd { id, .. }) => Some(*id),
            Command::Flush(_) => None,
        }
    }
}

/// A `ClassSpawn` as the application asked for it, kept until its first
/// answer so that it can be sent once more with a fresh upload.
#[derive(Clone)]
pub(super) struct SpawnCmd {
    pub(super) id: RequestId,
    pub(super) path: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) target: SpawnTarget,
    pub(super) output: OutputMode,
    /// Upload the bytes even if this connection carried them before: the
    /// pool said it never received them (they were in flight to a global
    /// RM that was killed, and its store keeps only whole uploads).
    pub(super) reupload: bool,
}

/// An executable as last read from a path, so that spawning the same
/// unchanged file again needs no read and no hash.
struct Known {
    len: u64,
    modified: Option<SystemTime>,
    executable: ExecutableRef,
}

/// The writer's memory of executables.
#[derive(Default)]
struct Executables {
    by_path: HashMap<PathBuf, Known>,
    /// Hashes already uploaded on this connection.
    uploaded: HashSet<String>,
}

/// The writing side of the connection to the RM, buffered so that many
/// small requests share a packet.
pub(super) type RmWriter = ConnWriter<ToLocal, BufWriter<Writer>>;

/// Writes commands to the RM in queue order. Requests are written in the
/// order they were made, so a `define_class` before a `class_spawn` reaches
/// the RM first even though the spawn reads a file. When the connection is
/// gone, each request is answered locally with `Unavailable` instead.
pub(super) async fn write_loop(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Command>,
    mut w: RmWriter,
) {
    let mut exes = Executables::default();
    let mut stop = shared.stop.clone();
    loop {
        // Biased: after the stop signal, what is already queued is still written.
        let first = tokio::select! {
            biased;
            cmd = rx.recv() => match cmd {
                Some(cmd) => cmd,
                None => break,
            },
            _ = stop.changed() => break,
        };
        // Write everything queued, then flush once: many small requests share a packet.
        let mut next = Some(first);
        while let Some(cmd) = next {
            if let Err(e) = write_one(&shared, &mut w, &mut exes, cmd).await {
                shared.set_rm_down(format!("cannot write to the local RM: {e}"));
            }
            next = rx.try_recv().ok();
        }
        if shared.rm_down_reason().is_none()
            && let Err(e) = w.flush().await
        {
            shared.set_rm_down(format!("cannot write to the local RM: {e}"));
        }
    }
    let _ = w.shutdown().await;
}

async fn write_one(
    shared: &Shared,
    w: &mut RmWriter,
    exes: &mut Executables,
    cmd: Command,
) -> std::io::Result<()> {
    if let Some(reason) = shared.rm_down_reason() {
        match cmd {
            Command::Flush(ack) => {
                let _ = ack.send(());
            }
            cmd => {
                let id = cmd.request_id().expect("requests and spawns carry an id");
                shared.fail(
                    id,
                    FailureCode::Unavailable,
                    format!("not connected to the local RM: {reason}"),
                );
            }
        }
        return Ok(());
    }
    match cmd {
        Command::Request { id, body } => {
            w.send(&ToLocal::Request { id, body }, &[]).await?;
        }
        Command::Spawn(SpawnCmd {
            id,
            path,
            args,
            target,
            output,
            reupload,
        }) => {
            let executable = match prepare(w, exes, path, reupload).await? {
                Ok(executable) => executable,
                Err(message) => {
                    // The file itself is bad: sending it again cannot help.
                    shared.forget_spawn(id);
                    shared.fail(id, FailureCode::BadExecutable, message);
                    return Ok(());
                }
            };
            let body = Request::ClassSpawn {
                executable,
                args,
                target,
                output,
            };
            w.send(&ToLocal::Request { id, body }, &[]).await?;
        }
        Command::Flush(ack) => {
            w.flush().await?;
            let _ = ack.send(());
        }
    }
    Ok(())
}

/// Finds the executable at `path` and uploads its bytes unless this
/// connection already carried them (or `reupload` asks for them again). The
/// outer error is the socket's, the inner one the file's (which fails only
/// this request).
async fn prepare(
    w: &mut RmWriter,
    exes: &mut Executables,
    path: PathBuf,
    reupload: bool,
) -> std::io::Result<Result<ExecutableRef, String>> {
    let meta = tokio::fs::metadata(&path).await.ok();
    if !reupload
        && let (Some(meta), Some(known)) = (&meta, exes.by_path.get(&path))
        && meta.len() == known.len
        && meta.modified().ok() == known.modified
        && exes.uploaded.contains(&known.executable.sha256)
    {
        return Ok(Ok(known.executable.clone()));
    }
    let read_path = path.clone();
    let loaded = tokio::task::spawn_blocking(move || load(&read_path))
        .await
        .unwrap_or_else(|e| Err(format!("reading the executable failed: {e}")));
    let (executable, bytes) = match loaded {
        Ok(loaded) => loaded,
        Err(message) => return Ok(Err(message)),
    };
    if reupload || !exes.uploaded.contains(&executable.sha256) {
        let upload = ToLocal::UploadExecutable {
            executable: executable.clone(),
        };
        w.send(&upload, &bytes).await?;
        exes.uploaded.insert(executable.sha256.clone());
    }
    if let Some(meta) = meta {
        exes.by_path.insert(
            path,
            Known {
                len: meta.len(),
                modified: meta.modified().ok(),
                executable: executable.clone(),
            },
        );
    }
    Ok(Ok(executable))
}

/// Reads and hashes an executable (blocking: run off the async threads).
fn load(path: &Path) -> Result<(ExecutableRef, Bytes), String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read executable {}: {e}", path.display()))?;
    if bytes.len() > MAX_EXECUTABLE {
        return Err(format!(
            "executable {} is {} bytes; at most {MAX_EXECUTABLE} can be uploaded",
            path.display(),
            bytes.len()
        ));
    }
    let sha256 = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let executable = ExecutableRef {
        name,
        sha256,
        size: bytes.len() as u64,
    };
    Ok((executable, Bytes::from(bytes)))
}

/// Reads events from the RM until it goes away or the client stops.
pub(super) async fn read_loop(shared: Arc<Shared>, mut r: ConnReader<FromLocal, Reader>) {
    let mut stop = shared.stop.clone();
    let reason = loop {
        // `recv` keeps partial frames in its buffer, so abandoning it at the
        // stop signal loses nothing that matters.
        let frame = tokio::select! {
            frame = r.recv() => frame,
            _ = stop.changed() => return,
        };
        match frame {
            Ok(Some((FromLocal::Event(event), _))) => shared.deliver(event),
            Ok(Some((FromLocal::Attached { job, process }, _))) => {
                tracing::warn!(%job, %process, "the local RM sent a second Attached; ignored");
            }
            // The RM closes the connection after this; its reason is the one to keep.
            Ok(Some((FromLocal::JobEnded { job, reason }, _))) => {
                break format!("job {job} ended: {reason}");
            }
            // Only ever instead of `Attached`; the RM closes the connection after it.
            Ok(Some((FromLocal::Refused { reason }, _))) => break reason,
            Ok(Some((FromLocal::Credential { job, .. }, _))) => {
                tracing::warn!(%job, "the local RM sent a credential after Attached; ignored");
            }
            Ok(None) => break "the local RM closed the connection".to_string(),
            Err(e) => break format!("the connection to the local RM failed: {e}"),
        }
    };
    shared.set_rm_down(reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_hashes_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker");
        std::fs::write(&path, b"abc").unwrap();
        let (exe, bytes) = load(&path).unwrap();
        assert_eq!(exe.name, "worker");
        assert_eq!(exe.size, 3);
        // SHA-256("abc"), the FIPS 180-2 example.
        assert_eq!(
            exe.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(&bytes[..], b"abc");
        let err = load(&dir.path().join("missing")).unwrap_err();
        assert!(
            err.contains("cannot read executable") && err.contains("missing"),
            "{err}"
        );
    }
}
