//! Administration requests to the global RM (what `carmi status`, `submit`,
//! `q` and `rm` use): one connection per request.
//!
//! The address may be a list of managers, `a:9618,b:9618` (one active, the
//! others standing by, docs/standby.md): a request goes to the one that
//! answered last, and on to the next of the list when a manager cannot be
//! reached or refuses the connection (a standby does) — never once the
//! request was sent, so that nothing is done twice. While none is active
//! (every one unreachable or standing by: a takeover under way) the list
//! is tried again for up to [`TAKEOVER_WAIT`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::conn::Conn;
use crate::handshake::{self, HandshakeError, Secret};
use crate::msg::{ExecutableRef, FromGlobal, MachineStatus, Role, ToGlobal};

/// How long to wait for the global RM to accept the connection.
pub const CONNECT_TIMEOUT: Duration = crate::net::CONNECT_TIMEOUT;

/// How long to wait for the answer once asked.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `carmi alloc dry-run` waits for its answer: the batch queue,
/// the pilot's start and its registration (the global RM gives up first).
pub const DRY_RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Why an administration request failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The global RM could not be reached.
    #[error("cannot reach the pool's global RM at {addr}: {error}")]
    Unreachable {
        /// The address tried.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The global RM does not share our secret.
    #[error(
        "authentication with the global RM at {addr} failed: it does not know this pool secret (wrong secret file?), or a man in the middle holds the connection"
    )]
    WrongSecret {
        /// The global RM.
        addr: String,
    },
    /// The handshake failed for another reason.
    #[error("handshake with the global RM at {addr} failed: {error}")]
    Handshake {
        /// The global RM.
        addr: String,
        /// Why.
        error: HandshakeError,
    },
    /// The global RM went away or answered something else.
    #[error("the global RM at {addr} did not answer: {reason}")]
    NoAnswer {
        /// The global RM.
        addr: String,
        /// What happened instead.
        reason: String,
    },
}

/// Asks the global RM at `addr` (`host:port`) for the state of every machine of the pool.
pub async fn pool_status(addr: &str, secret: &Secret) -> Result<Vec<MachineStatus>, AdminError> {
    match request(addr, secret, None, ToGlobal::Status).await? {
        // Decoded, each is the only holder of its own: unwrapped, not copied.
        FromGlobal::Pool(machines) => Ok(machines
            .into_iter()
            .map(|m| std::sync::Arc::try_unwrap(m).unwrap_or_else(|m| (*m).clone()))
            .collect()),
        other => Err(AdminError::NoAnswer {
            addr: addr.to_string(),
            reason: format!("it sent {other:?}"),
        }),
    }
}

/// Sends one admin request to the global RM at `addr`, after uploading
/// `upload` (an executable and its bytes) on the same connection, and returns
/// the answer. [`FromGlobal::AdminFailed`] is returned as an answer, for the
/// caller to report.
pub async fn request(
    addr: &str,
    secret: &Secret,
    upload: Option<(&ExecutableRef, &[u8])>,
    msg: ToGlobal,
) -> Result<FromGlobal, AdminError> {
    let uploads: Vec<_> = upload.into_iter().collect();
    request_with_payload(addr, secret, &uploads, msg)
        .await
        .map(|(answer, _)| answer)
}

/// [`request`] after any number of uploads (a master's executable and its
/// `transfer_input_files`), also returning the answer's payload (the bytes
/// of [`FromGlobal::Files`]).
pub async fn request_with_payload(
    addr: &str,
    secret: &Secret,
    uploads: &[(&ExecutableRef, &[u8])],
    msg: ToGlobal,
) -> Result<(FromGlobal, bytes::Bytes), AdminError> {
    let list = managers(addr);
    if list.len() <= 1 {
        return request_one(addr.trim(), secret, uploads, msg).await;
    }
    let deadline = tokio::time::Instant::now() + TAKEOVER_WAIT;
    loop {
        let failures = match request_round(&list, secret, uploads, &msg).await {
            Ok(answer) => return Ok(answer),
            Err(failures) => failures,
        };
        // Nobody active, but nobody said anything but "not here": the
        // active manager is gone and a standby is taking over (its lease
        // freed at once after a crash, within seconds after a hang).
        let between = failures
            .iter()
            .all(|e| matches!(e, AdminError::Unreachable { .. }) || is_standby_refusal(e));
        if !between || tokio::time::Instant::now() + TAKEOVER_POLL > deadline {
            return Err(worst(failures));
        }
        tokio::time::sleep(TAKEOVER_POLL).await;
    }
}

/// How long a request to a list of managers waits for one of them to be
/// active when each is unreachable or standing by: longer than a takeover
/// after a hung active manager (its lease lapses after 5 s).
pub const TAKEOVER_WAIT: Duration = Duration::from_secs(15);
/// How often the list is tried again meanwhile.
const TAKEOVER_POLL: Duration = Duration::from_millis(250);

/// One pass over the list, from the manager that answered last: the
/// answer, or why each manager could not take the request. A manager that
/// was sent the request ends the pass, so that nothing is done twice.
async fn request_round(
    list: &[&str],
    secret: &Secret,
    uploads: &[(&ExecutableRef, &[u8])],
    msg: &ToGlobal,
) -> Result<(FromGlobal, bytes::Bytes), Vec<AdminError>> {
    let start = LAST_ANSWERED.load(Ordering::Relaxed);
    let mut failures = Vec::new();
    for k in 0..list.len() {
        let i = (start + k) % list.len();
        match request_one(list[i], secret, uploads, msg.clone()).await {
            Err(e @ (AdminError::Unreachable { .. } | AdminError::Handshake { .. })) => {
                failures.push(e)
            }
            other => {
                LAST_ANSWERED.store(i, Ordering::Relaxed);
                return other.map_err(|e| vec![e]);
            }
        }
    }
    Err(failures)
}

fn is_standby_refusal(e: &AdminError) -> bool {
    matches!(e, AdminError::Handshake { .. }) && e.to_string().contains(STANDBY_REFUSAL)
}

/// What to tell the user of a round's failures: what the active manager
/// said (a refused token, say) matters more than the standbys' refusals;
/// else the first failure.
fn worst(mut failures: Vec<AdminError>) -> AdminError {
    let pick = failures
        .iter()
        .position(|e| !is_standby_refusal(e))
        .unwrap_or(0);
    failures.swap_remove(pick)
}

/// What a standby manager's refusal begins with (`carmi-global`'s `ha::replica`).
pub const STANDBY_REFUSAL: &str = "standby manager";

/// The managers of a list `a:9618,b:9618` (one address is a list of one).
pub fn managers(addr: &str) -> Vec<&str> {
    addr.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect()
}

/// Which manager of the list answered last, tried first next time.
static LAST_ANSWERED: AtomicUsize = AtomicUsize::new(0);

/// [`request_with_payload`] to one manager.
async fn request_one(
    addr: &str,
    secret: &Secret,
    uploads: &[(&ExecutableRef, &[u8])],
    msg: ToGlobal,
) -> Result<(FromGlobal, bytes::Bytes), AdminError> {
    let unreachable = |error| AdminError::Unreachable {
        addr: addr.to_string(),
        error,
    };
    let stream = crate::net::dial(addr, CONNECT_TIMEOUT)
        .await
        .map_err(unreachable)?;
    // TLS from the first byte, token or not (issue 37).
    let crate::tls::Stream {
        reader,
        writer,
        binding,
    } = tokio::time::timeout(handshake::HANDSHAKE_TIMEOUT, crate::tls::connect(stream))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
        .map_err(|error| AdminError::Handshake {
            addr: addr.to_string(),
            error: HandshakeError::Frame(error.into()),
        })?;
    let mut conn: Conn<ToGlobal, FromGlobal> = Conn::new(reader, writer);
    let (r, w) = conn.parts_mut();
    handshake::client_bound(r, w, secret, &Role::Admin, &binding)
        .await
        .map_err(|e| match e {
            HandshakeError::BadProof => AdminError::WrongSecret {
                addr: addr.to_string(),
            },
            error => AdminError::Handshake {
                addr: addr.to_string(),
                error,
            },
        })?;
    let no_answer = |reason: String| AdminError::NoAnswer {
        addr: addr.to_string(),
        reason,
    };
    for &(executable, bytes) in uploads {
        let up = ToGlobal::Upload {
            executable: executable.clone(),
        };
        conn.send(&up, bytes)
            .await
            .map_err(|e| no_answer(e.to_string()))?;
    }
    // A dry run is answered once its pilot came up, or failed to.
    let patience = match &msg {
        ToGlobal::Alloc(crate::msg::AllocRequest::DryRun(_)) => DRY_RUN_TIMEOUT,
        _ => REPLY_TIMEOUT,
    };
    conn.send(&msg, &[])
        .await
        .map_err(|e| no_answer(e.to_string()))?;
    // Over TLS what the socket could not take yet waits in the session
    // until flushed: a master of megabytes was never sent whole otherwise.
    conn.flush().await.map_err(|e| no_answer(e.to_string()))?;
    match tokio::time::timeout(patience, conn.recv()).await {
        Err(_) => Err(no_answer(format!(
            "nothing within {} s",
            patience.as_secs()
        ))),
        Ok(Ok(Some(answer))) => Ok(answer),
        Ok(Ok(None)) => Err(no_answer("it closed the connection".into())),
        Ok(Err(e)) => Err(no_answer(e.to_string())),
    }
}
