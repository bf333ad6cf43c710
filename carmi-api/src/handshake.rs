//! The handshake that opens every connection: protocol version, role, and
//! mutual challenge-response authentication against the pool's shared secret.
//!
//! The secret never crosses the wire. Each side sends a fresh random nonce
//! and proves knowledge of the secret with an HMAC-SHA256 over both nonces
//! (and, from the client, its declared role), so a recorded exchange cannot
//! be replayed and a server without the secret cannot impersonate the pool.
//!
//! ```text
//! client -> server  Hello     { version, role, client_nonce, token? }
//! server -> client  Challenge { version, server_nonce, server_proof = HMAC(secret, "server" | client_nonce | server_nonce) }
//! client -> server  Proof     { client_proof = HMAC(secret, "client" | server_nonce | client_nonce | role JSON | token) }
//! server -> client  Welcome | Refused { reason }
//! ```
//! Nothing else is read or served before `Welcome`.
//!
//! The optional token ([`crate::token`]) names who the client is and what it
//! may do; a server that enforces tokens checks it in its `admit` callback
//! ([`server_auth`]). The client proof covers it, so it cannot be swapped on
//! the way by someone without the secret.

use std::path::Path;
use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::frame::{FrameError, FrameReader, write_frame};
use crate::ids::JobId;
use crate::msg::{PROTOCOL_VERSION, Role};

/// How long a peer has to complete the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest frame a server accepts during the handshake. Nothing big is
/// legitimate before authentication (a `Hello` is a few hundred bytes: a
/// version, a nonce and a role with a machine name or an endpoint), and every
/// unauthenticated connection may buffer up to this much: 9,000 half-open
/// connections cost at most 36 MiB of buffers, not 9,000 announced 64 KiB frames.
pub const HANDSHAKE_MAX_FRAME: usize = 4 * 1024;

/// The pool's shared secret, and the token (if any) this side presents
/// with it when it opens a connection; or a job's credential
/// ([`crate::jobcred`]), which names its job in the handshake so that the
/// server knows which key to prove with.
#[derive(Clone)]
pub struct Secret(Vec<u8>, Option<std::sync::Arc<str>>, Option<JobId>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret from its bytes (surrounding whitespace is not part of it),
    /// or the job credential they are the text of.
    pub fn new(bytes: &[u8]) -> Result<Secret, HandshakeError> {
        let trimmed = bytes.trim_ascii();
        if let Some(cred) = std::str::from_utf8(trimmed)
            .ok()
            .filter(|t| t.starts_with(crate::jobcred::PREFIX))
            .and_then(crate::jobcred::JobCredential::parse)
        {
            return Ok(Secret::from(&cred));
        }
        if trimmed.len() < 16 {
            return Err(HandshakeError::WeakSecret(trimmed.len()));
        }
        Ok(Secret(trimmed.to_vec(), None, None))
    }

    /// The job whose credential this is; `None` for the pool secret.
    pub fn job(&self) -> Option<JobId> {
        self.2
    }

    /// The same secret, presenting `token` in the handshakes it opens.
    pub fn with_token(mut self, token: Option<String>) -> Secret {
        self.1 = token.map(Into::into);
        self
    }

    /// The token presented in the handshakes this side opens.
    pub fn token(&self) -> Option<&str> {
        self.1.as_deref()
    }

    /// Reads a secret file.
    pub fn from_file(path: &Path) -> Result<Secret, HandshakeError> {
        let bytes = std::fs::read(path).map_err(|e| HandshakeError::SecretFile {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        Secret::new(&bytes)
    }

    /// A fresh random secret, as 64 hex characters, for `carmi pool init`.
    pub fn generate_text() -> String {
        let mut b = [0u8; 32];
        rand::rng().fill_bytes(&mut b);
        hex(&b)
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        for p in parts {
            m.update(&(p.len() as u32).to_be_bytes());
            m.update(p);
        }
        m
    }
}

impl From<&crate::jobcred::JobCredential> for Secret {
    /// A job credential's key: the handshakes it opens name its job.
    fn from(c: &crate::jobcred::JobCredential) -> Secret {
        Secret(c.key().as_bytes().to_vec(), None, Some(c.job()))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 256 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn nonce() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    hex(&b)
}

/// Handshake messages.
#[derive(Debug, Serialize, Deserialize)]
enum Hs {
    Hello {
        version: u32,
        role: Role,
        client_nonce: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        /// The job whose credential the client proves; absent: the pool secret.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_key: Option<JobId>,
    },
    Challenge {
        version: u32,
        server_nonce: String,
        server_proof: String,
    },
    Proof {
        client_proof: String,
    },
    Welcome,
    Refused {
        reason: String,
    },
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// Framing or socket failure.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The peer closed the connection.
    #[error("connection closed during the handshake")]
    Closed,
    /// The peer did not finish in time.
    #[error("handshake timed out")]
    Timeout,
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: ours is {ours}, theirs is {theirs}")]
    Version {
        /// Ours.
        ours: u32,
        /// Theirs.
        theirs: u32,
    },
    /// The peer does not know the pool secret.
    #[error("authentication failed: the peer does not know the pool secret")]
    BadProof,
    /// The server refused us.
    #[error("refused by the server: {0}")]
    Refused(String),
    /// We (the server) refused the client's declared role (see [`server_with`]).
    #[error("refused the client's role: {0}")]
    NotAdmitted(String),
    /// A message out of order.
    #[error("unexpected handshake message")]
    Unexpected,
    /// The secret file could not be read.
    #[error("cannot read secret file {path}: {error}")]
    SecretFile {
        /// Path.
        path: String,
        /// Error.
        error: String,
    },
    /// The secret is too short to be one.
    #[error("the pool secret is {0} bytes long; at least 16 are required")]
    WeakSecret(usize),
}

async fn next<R: AsyncRead + Unpin>(r: &mut FrameReader<R>) -> Result<Hs, HandshakeError> {
    match r.read::<Hs>().await? {
        Some((m, _)) => Ok(m),
        None => Err(HandshakeError::Closed),
    }
}

/// Client side: declares `role`, authenticates both ways. On success the
/// connection is ready for protocol messages.
pub async fn client<R, W>(
    r: &mut FrameReader<R>,
    w: &mut W,
    secret: &Secret,
    role: &Role,
) -> Result<(), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    client_bound(r, w, secret, role, &[]).await
}

/// [`client`] over a TLS session whose exported keying material is
/// `binding` ([`crate::tls::Stream::binding`]): both proofs cover it, so the
/// handshake succeeds only if both ends share that one session.
pub async fn client_bound<R, W>(
    r: &mut FrameReader<R>,
    w: &mut W,
    secret: &Secret,
    role: &Role,
    binding: &[u8],
) -> Result<(), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let client_nonce = nonce();
        let hello = Hs::Hello {
            version: PROTOCOL_VERSION,
            role: role.clone(),
            client_nonce: client_nonce.clone(),
            token: secret.token().map(str::to_string),
            job_key: secret.job(),
        };
        write_frame(w, &hello, &[])
            .await
            .map_err(FrameError::from)?;
        let (version, server_nonce, server_proof) = match next(r).await? {
            Hs::Challenge {
                version,
                server_nonce,
                server_proof,
            } => (version, server_nonce, server_proof),
            Hs::Refused { reason } => return Err(HandshakeError::Refused(reason)),
            _ => return Err(HandshakeError::Unexpected),
        };
        if version != PROTOCOL_VERSION {
            return Err(HandshakeError::Version {
                ours: PROTOCOL_VERSION,
                theirs: version,
            });
        }
        let expected = secret.mac(&[
            b"server",
            client_nonce.as_bytes(),
            server_nonce.as_bytes(),
            binding,
        ]);
        let proof = unhex(&server_proof).ok_or(HandshakeError::BadProof)?;
        expected
            .verify_slice(&proof)
            .map_err(|_| HandshakeError::BadProof)?;
        let role_json = serde_json::to_vec(role).expect("roles serialize");
        let mine = secret.mac(&[
            b"client",
            server_nonce.as_bytes(),
            client_nonce.as_bytes(),
            &role_json,
            secret.token().unwrap_or_default().as_bytes(),
            binding,
        ]);
        let proof = Hs::Proof {
            client_proof: hex(&mine.finalize().into_bytes()),
        };
        write_frame(w, &proof, &[])
            .await
            .map_err(FrameError::from)?;
        match next(r).await? {
            Hs::Welcome => Ok(()),
            Hs::Refused { reason } => Err(HandshakeError::Refused(reason)),
            _ => Err(HandshakeError::Unexpected),
        }
    })
    .await
    .map_err(|_| HandshakeError::Timeout)?
}

/// Server side: checks the client's version and proof and returns its
/// declared role. A failing client is told why (without detail that would help
/// an attacker) before the connection is dropped.
pub async fn server<R, W>(
    r: &mut FrameReader<R>,
    w: &mut W,
    secret: &Secret,
) -> Result<Role, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    server_with(r, w, secret, |_| Ok(())).await
}

/// Server side with a say on the role: after the client has proved it knows
/// the secret, `admit` sees its declared role and may refuse it with a reason
/// that the client receives as [`HandshakeError::Refused`] (an application's
/// direct-message listener refuses peers of another job this way), instead of
/// a `Welcome` followed by a silent close.
pub async fn server_with<R, W, F>(
    r: &mut FrameReader<R>,
    w: &mut W,
    secret: &Secret,
    admit: F,
) -> Result<Role, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    F: FnOnce(&Role) -> Result<(), String>,
{
    server_auth(r, w, secret, &[], |role, _token| admit(role))
        .await
        .map(|(role, ())| role)
}

/// Server side that also sees the client's token: after the client has
/// proved it knows the secret, `admit` checks its role and token and returns
/// what the server keeps of them (the identity the token names), or a reason
/// to refuse that the client receives as [`HandshakeError::Refused`].
pub async fn server_auth<R, W, F, T>(
    r: &mut FrameReader<R>,
    w: &mut W,
    secret: &Secret,
    binding: &[u8],
    admit: F,
) -> Result<(Role, T), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    F: FnOnce(&Role, Option<&str>) -> Result<T, String>,
{
    let choose = |_: Option<JobId>| Ok(secret.clone());
    server_keyed(r, w, choose, binding, |role, token, _| admit(role, token)).await
}

/// Server side for a server that holds job credentials besides the pool
/// secret (a local RM): `choose` gives the key the client says it proves
/// (`Some(job)`: that job's credential, `None`: the pool secret) or a reason
/// to refuse, and `admit` then sees which one the client proved.
pub async fn server_keyed<R, W, C, F, T>(
    r: &mut FrameReader<R>,
    w: &mut W,
    choose: C,
    binding: &[u8],
    admit: F,
) -> Result<(Role, T), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    C: FnOnce(Option<JobId>) -> Result<Secret, String>,
    F: FnOnce(&Role, Option<&str>, Option<JobId>) -> Result<T, String>,
{
    let admit = |role: Role, token: Option<String>, key| {
        std::future::ready(admit(&role, token.as_deref(), key))
    };
    server_keyed_async(r, w, choose, binding, admit).await
}

/// [`server_keyed`] whose `admit` may wait (a local RM asks the global RM
/// whether a token has a power): it is given the role and the token once
/// the client has proved its key, and its refusal reaches the client. The
/// whole handshake, `admit` included, ends within [`HANDSHAKE_TIMEOUT`].
pub async fn server_keyed_async<R, W, C, F, A, T>(
    r: &mut FrameReader<R>,
    w: &mut W,
    choose: C,
    binding: &[u8],
    admit: F,
) -> Result<(Role, T), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    C: FnOnce(Option<JobId>) -> Result<Secret, String>,
    F: FnOnce(Role, Option<String>, Option<JobId>) -> A,
    A: std::future::Future<Output = Result<T, String>>,
{
    tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let saved_max = std::mem::replace(r.max_mut(), HANDSHAKE_MAX_FRAME);
        let result = server_inner(r, w, choose, binding, admit).await;
        *r.max_mut() = saved_max;
        result
    })
    .await
    .map_err(|_| HandshakeError::Timeout)?
}

/// Server side, refusing a connection before its handshake (too many
/// connections, say): the client's handshake fails with
/// [`HandshakeError::Refused`] and `reason`, whatever it sent.
pub async fn refuse<W: AsyncWrite + Unpin>(w: &mut W, reason: &str) -> std::io::Result<()> {
    let refused = Hs::Refused {
        reason: reason.to_string(),
    };
    write_frame(w, &refused, &[]).await
}

/// The reason in `bytes` if they are a whole refusal frame (what
/// [`refuse`] writes): a TLS client whose handshake met one in place of the
/// server's reply reports these words, not a TLS decoding error.
pub fn refusal_in(bytes: &[u8]) -> Option<String> {
    let mut buf = bytes::BytesMut::from(bytes);
    match crate::frame::decode::<Hs>(&mut buf, HANDSHAKE_MAX_FRAME) {
        Ok(Some((Hs::Refused { reason }, _))) => Some(reason),
        _ => None,
    }
}

/// Refuses `stream` with `reason` (see [`refuse`]) and closes it, giving up
/// after a second on a peer that does not read.
pub async fn refuse_and_close(mut stream: tokio::net::TcpStream, reason: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = refuse(&mut stream, reason).await;
        let _ = stream.shutdown().await;
        // What the client sent meanwhile (a TLS hello) is read and dropped
        // until it closes: a socket closed with unread bytes resets the
        // connection, and the reset can discard the words before they are read.
        let mut sink = [0u8; 1024];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

async fn server_inner<R, W, C, F, A, T>(
    r: &mut FrameReader<R>,
    w: &mut W,
    choose: C,
    binding: &[u8],
    admit: F,
) -> Result<(Role, T), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    C: FnOnce(Option<JobId>) -> Result<Secret, String>,
    F: FnOnce(Role, Option<String>, Option<JobId>) -> A,
    A: std::future::Future<Output = Result<T, String>>,
{
    let Hs::Hello {
        version,
        role,
        client_nonce,
        token,
        job_key,
    } = next(r).await?
    else {
        return Err(HandshakeError::Unexpected);
    };
    if version != PROTOCOL_VERSION {
        let reason =
            format!("protocol version {version} is not supported (this is {PROTOCOL_VERSION})");
        let _ = write_frame(w, &Hs::Refused { reason }, &[]).await;
        return Err(HandshakeError::Version {
            ours: PROTOCOL_VERSION,
            theirs: version,
        });
    }
    if unhex(&client_nonce).is_none_or(|n| n.len() < 16) {
        return Err(HandshakeError::Unexpected);
    }
    let secret = match choose(job_key) {
        Ok(secret) => secret,
        Err(reason) => {
            let refused = Hs::Refused {
                reason: reason.clone(),
            };
            let _ = write_frame(w, &refused, &[]).await;
            return Err(HandshakeError::NotAdmitted(reason));
        }
    };
    let server_nonce = nonce();
    let proof = secret.mac(&[
        b"server",
        client_nonce.as_bytes(),
        server_nonce.as_bytes(),
        binding,
    ]);
    let challenge = Hs::Challenge {
        version: PROTOCOL_VERSION,
        server_nonce: server_nonce.clone(),
        server_proof: hex(&proof.finalize().into_bytes()),
    };
    write_frame(w, &challenge, &[])
        .await
        .map_err(FrameError::from)?;
    let Hs::Proof { client_proof } = next(r).await? else {
        return Err(HandshakeError::Unexpected);
    };
    let role_json = serde_json::to_vec(&role).expect("roles serialize");
    let expected = secret.mac(&[
        b"client",
        server_nonce.as_bytes(),
        client_nonce.as_bytes(),
        &role_json,
        token.as_deref().unwrap_or_default().as_bytes(),
        binding,
    ]);
    let ok = unhex(&client_proof).is_some_and(|p| expected.verify_slice(&p).is_ok());
    if !ok {
        let reason = "authentication failed".to_string();
        let _ = write_frame(w, &Hs::Refused { reason }, &[]).await;
        return Err(HandshakeError::BadProof);
    }
    let kept = match admit(role.clone(), token, job_key).await {
        Ok(kept) => kept,
        Err(reason) => {
            let _ = write_frame(
                w,
                &Hs::Refused {
                    reason: reason.clone(),
                },
                &[],
            )
            .await;
            return Err(HandshakeError::NotAdmitted(reason));
        }
    };
    write_frame(w, &Hs::Welcome, &[])
        .await
        .map_err(FrameError::from)?;
    Ok((role, kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
        tokio::io::duplex(1 << 16)
    }

    #[tokio::test]
    async fn same_secret_succeeds_and_role_arrives() {
        let (a, b) = pair();
        let secret = Secret::new(b"0123456789abcdef0123").unwrap();
        let s2 = secret.clone();
        let server = tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(b);
            let mut r = FrameReader::new(r);
            server(&mut r, &mut w, &s2).await
        });
        let (r, mut w) = tokio::io::split(a);
        let mut r = FrameReader::new(r);
        let role = Role::Local { name: "m1".into() };
        client(&mut r, &mut w, &secret, &role).await.unwrap();
        assert_eq!(server.await.unwrap().unwrap(), role);
    }

    #[tokio::test]
    async fn wrong_secret_is_refused_both_ways() {
        let (a, b) = pair();
        let server_secret = Secret::new(b"0123456789abcdef0123").unwrap();
        let server = tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(b);
            let mut r = FrameReader::new(r);
            server(&mut r, &mut w, &server_secret).await
        });
        let (r, mut w) = tokio::io::split(a);
        let mut r = FrameReader::new(r);
        let wrong = Secret::new(b"another secret entirely").unwrap();
        let err = client(&mut r, &mut w, &wrong, &Role::Admin)
            .await
            .unwrap_err();
        // The client notices first: the server cannot prove the client's secret.
        assert!(matches!(err, HandshakeError::BadProof), "{err}");
        drop((r, w));
        assert!(server.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_refused_role_is_told_why() {
        let (a, b) = pair();
        let secret = Secret::new(b"0123456789abcdef0123").unwrap();
        let s2 = secret.clone();
        let server = tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(b);
            let mut r = FrameReader::new(r);
            server_with(&mut r, &mut w, &s2, |role| match role {
                Role::Admin => Err("no admins here".to_string()),
                _ => Ok(()),
            })
            .await
        });
        let (r, mut w) = tokio::io::split(a);
        let mut r = FrameReader::new(r);
        let err = client(&mut r, &mut w, &secret, &Role::Admin)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, HandshakeError::Refused(reason) if reason == "no admins here"),
            "{err}"
        );
        assert!(matches!(
            server.await.unwrap(),
            Err(HandshakeError::NotAdmitted(_))
        ));
    }

    #[tokio::test]
    async fn the_token_reaches_the_servers_admit() {
        let (a, b) = pair();
        let secret = Secret::new(b"0123456789abcdef0123").unwrap();
        let s2 = secret.clone();
        let server = tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(b);
            let mut r = FrameReader::new(r);
            server_auth(&mut r, &mut w, &s2, &[], |_, token| match token {
                Some("good") => Ok(token.map(str::to_string)),
                other => Err(format!("token {other:?} refused")),
            })
            .await
        });
        let (r, mut w) = tokio::io::split(a);
        let mut r = FrameReader::new(r);
        let with = secret.clone().with_token(Some("good".into()));
        client(&mut r, &mut w, &with, &Role::Admin).await.unwrap();
        let (_, kept) = server.await.unwrap().unwrap();
        assert_eq!(kept.as_deref(), Some("good"));
    }

    #[test]
    fn short_secrets_are_rejected() {
        assert!(matches!(
            Secret::new(b"  short \n"),
            Err(HandshakeError::WeakSecret(5))
        ));
        assert_eq!(Secret::generate_text().len(), 64);
    }
}
