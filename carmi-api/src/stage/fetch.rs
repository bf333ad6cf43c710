//! The fetching side of a staging connection: connect, ask, check what is
//! offered, and write the bytes as they arrive, hashing them on a blocking
//! thread; the copy is verified before it counts.

use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::{Arrival, STAGE_CHUNK, STALL_TIMEOUT, StageReply, StageRequest};
use crate::conn::Conn;
use crate::frame::FrameReader;
use crate::handshake::{self, Secret};
use crate::msg::{ExecutableRef, Role};

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The source could not be reached, refused us, or went away.
    #[error("source {source_addr}: {reason}")]
    Source {
        /// The source.
        source_addr: String,
        /// Why.
        reason: String,
    },
    /// The bytes are not the executable asked for.
    #[error("source {source_addr} sent a bad copy: {reason}")]
    Corrupt {
        /// The source.
        source_addr: String,
        /// Size or hash mismatch.
        reason: String,
    },
    /// Writing our copy failed.
    #[error("writing {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
}

/// What [`fetch`] needs.
pub struct FetchSpec<'a> {
    /// `host:port` of the source.
    pub addr: &'a str,
    /// The pool secret, with the machine's daemon token (which only the
    /// global RM is shown; a peer gets a proof made for it, to forward).
    pub secret: &'a Secret,
    /// The source: the global RM, or a peer local RM (which proves its
    /// machine before the token's proof is shown to it).
    pub towards: handshake::Towards,
    /// Our machine name (declared in the handshake).
    pub name: &'a str,
    /// What to fetch: size and hash are checked against this, not against
    /// what the source claims.
    pub executable: &'a ExecutableRef,
    /// The file to write (created if missing, so the caller may create it
    /// empty beforehand to serve it at once; the caller renames it into place).
    pub dest: &'a Path,
    /// Given every chunk as it arrives, so that others can be served
    /// meanwhile; told `Done` once the copy is verified, `Failed` if not.
    pub arrival: &'a Arrival,
}

/// Fetches an executable into `spec.dest`, hashing and writing on a blocking
/// thread, and verifies it. On success the file is complete and synced; on
/// failure it is removed and the arrival says `Failed`.
pub async fn fetch(spec: FetchSpec<'_>) -> Result<(), FetchError> {
    let result = fetch_inner(&spec).await;
    if result.is_err() {
        let _ = std::fs::remove_file(spec.dest);
        spec.arrival.fail();
    }
    result
}

async fn fetch_inner(spec: &FetchSpec<'_>) -> Result<(), FetchError> {
    let src = |reason: String| spec.source_error(reason);
    let corrupt = |reason: String| FetchError::Corrupt {
        source_addr: spec.addr.to_string(),
        reason,
    };
    let mut conn = ask(spec).await?;
    match next_reply(&mut conn, spec).await? {
        (StageReply::Begin { executable }, _) => {
            if executable.sha256 != spec.executable.sha256
                || executable.size != spec.executable.size
            {
                return Err(corrupt(format!(
                    "offered {} ({} bytes) for {} ({} bytes)",
                    executable.sha256,
                    executable.size,
                    spec.executable.sha256,
                    spec.executable.size
                )));
            }
        }
        (StageReply::Missing { reason }, _) => {
            return Err(src(format!("does not hold it: {reason}")));
        }
        (other, _) => return Err(src(format!("answered {other:?} instead of Begin"))),
    }
    // The writer thread hashes and writes each chunk; servers passing the
    // copy on take it from the arrival at once.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Bytes>(64);
    let dest = spec.dest.to_path_buf();
    let arrival = spec.arrival.clone();
    let writer = tokio::task::spawn_blocking(move || write_chunks(&dest, rx, &arrival));
    let expected = spec.executable.size;
    let mut got = 0u64;
    let outcome = loop {
        match next_reply(&mut conn, spec).await {
            Ok((StageReply::Chunk, bytes)) => {
                got += bytes.len() as u64;
                if got > expected {
                    break Err(corrupt(format!(
                        "sent more than the {expected} bytes announced"
                    )));
                }
                spec.arrival.push(bytes.clone());
                if tx.send(bytes).is_err() {
                    break Ok(()); // the writer failed; its error is reported below
                }
            }
            Ok((StageReply::End, _)) => break Ok(()),
            Ok((StageReply::Missing { reason }, _)) => {
                break Err(src(format!("gave up: {reason}")));
            }
            Ok((other, _)) => break Err(src(format!("answered {other:?} mid-transfer"))),
            Err(e) => break Err(e),
        }
    };
    drop(tx);
    let written = writer.await.map_err(|e| FetchError::Io {
        path: spec.dest.display().to_string(),
        error: std::io::Error::other(e.to_string()),
    })?;
    outcome?;
    let (size, sha256) = written.map_err(|error| FetchError::Io {
        path: spec.dest.display().to_string(),
        error,
    })?;
    if size != expected {
        return Err(corrupt(format!("sent {size} bytes, {expected} expected")));
    }
    if sha256 != spec.executable.sha256 {
        return Err(corrupt(format!(
            "SHA-256 of the copy is {sha256}, not {}",
            spec.executable.sha256
        )));
    }
    spec.arrival.done();
    Ok(())
}

impl FetchSpec<'_> {
    /// A failure of the source, in words.
    fn source_error(&self, reason: String) -> FetchError {
        FetchError::Source {
            source_addr: self.addr.to_string(),
            reason,
        }
    }
}

/// Connects to the source (TLS, handshake as a stager) and asks it for the executable.
async fn ask(spec: &FetchSpec<'_>) -> Result<Conn<StageRequest, StageReply>, FetchError> {
    let src = |reason: String| spec.source_error(reason);
    let stream = crate::net::dial(spec.addr, crate::net::CONNECT_TIMEOUT)
        .await
        .map_err(|e| src(format!("cannot connect: {e}")))?;
    // Always TLS, to the global RM (where the daemon token proves who
    // fetches) and to a peer local RM (whose listener takes nothing else).
    let crate::tls::Stream {
        reader: r,
        writer: mut w,
        binding,
    } = crate::tls::connect(stream)
        .await
        .map_err(|e| src(format!("TLS: {e}")))?;
    let mut reader = FrameReader::with_max(r, STAGE_CHUNK + 64 * 1024);
    let role = Role::Stager {
        name: spec.name.to_string(),
    };
    handshake::client_towards(
        &mut reader,
        &mut w,
        spec.secret,
        &role,
        &binding,
        spec.towards,
    )
    .await
    .map_err(|e| src(format!("handshake: {e}")))?;
    let mut conn: Conn<StageRequest, StageReply> = Conn::from_parts(reader, w);
    let get = StageRequest::Get {
        sha256: spec.executable.sha256.clone(),
    };
    conn.send(&get, &[])
        .await
        .map_err(|e| src(format!("sending the request: {e}")))?;
    conn.flush()
        .await
        .map_err(|e| src(format!("sending the request: {e}")))?;
    Ok(conn)
}

/// The source's next reply; silence for [`STALL_TIMEOUT`] is a failure.
async fn next_reply(
    conn: &mut Conn<StageRequest, StageReply>,
    spec: &FetchSpec<'_>,
) -> Result<(StageReply, Bytes), FetchError> {
    let src = |reason: String| spec.source_error(reason);
    match tokio::time::timeout(STALL_TIMEOUT, conn.recv()).await {
        Err(_) => Err(src(format!("no bytes for {} s", STALL_TIMEOUT.as_secs()))),
        Ok(Ok(Some(frame))) => Ok(frame),
        Ok(Ok(None)) => Err(src("closed the connection mid-transfer".into())),
        Ok(Err(e)) => Err(src(format!("bad frame: {e}"))),
    }
}

/// The writer thread of [`fetch`]: returns the size and hash written, the
/// file synced.
fn write_chunks(
    dest: &PathBuf,
    rx: std::sync::mpsc::Receiver<Bytes>,
    arrival: &Arrival,
) -> std::io::Result<(u64, String)> {
    use std::os::unix::fs::OpenOptionsExt;
    // Never executable while incomplete.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dest)?;
    let mut hasher = Sha256::new();
    let mut n = 0u64;
    for chunk in rx {
        f.write_all(&chunk)?;
        hasher.update(&chunk);
        n += chunk.len() as u64;
        arrival.wrote(n);
    }
    f.sync_all()?;
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((n, hex))
}
