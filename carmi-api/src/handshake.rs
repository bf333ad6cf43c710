//! The handshake that opens every connection: protocol version, role, and
//! mutual challenge-response authentication against the pool's shared secret;
//! in a pool with tokens, the global RM's proof by the pool's signing key and
//! the client's token, shown only after that proof.
//!
//! The secret never crosses the wire. Each side sends a fresh random nonce
//! and proves knowledge of the secret with an HMAC-SHA256 over both nonces,
//! the TLS session's exported keying material (and, from the client, its
//! declared role and what it presents), so a recorded exchange cannot be
//! replayed and a server without the secret cannot impersonate the pool.
//!
//! ```text
//! client -> server  Hello     { version, role, client_nonce, job_key? }
//! server -> client  Challenge { version, server_nonce, server_proof = HMAC(secret, "server" | client_nonce | server_nonce | binding),
//!                               server_key?, server_sig? (the global RM: Ed25519 over the same, with the pool's key),
//!                               server_name? (a local RM: its machine's name) }
//! client -> server  Proof     { client_proof = HMAC(secret, "client" | server_nonce | client_nonce | role | presented | binding), presented? }
//! server -> client  Welcome | Refused { reason }
//! ```
//! Nothing else is read or served before `Welcome`.
//!
//! The pool secret is every user's and machine's, so it proves only that a
//! peer belongs to the pool. A client holding a token therefore shows it
//! only once the server has proved what only the pool's global RM holds:
//! towards the global RM ([`Towards::Global`]), a signature by the pool's
//! signing key over this connection's nonces and keying material, checked
//! against the pool key pinned in the client's own token. And it never
//! sends the token itself: it sends the token's public part and a proof
//! that it holds the token's key, made for this one connection and audience
//! ([`crate::proof`]), which the server's `admit` callback checks (the global
//! RM) or forwards to the global RM (a local RM, [`Towards::Local`]).

use std::path::Path;
use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::frame::{FrameError, FrameReader, write_frame};
use crate::ids::JobId;
use crate::machinecert::MachineProver;
use crate::msg::{PROTOCOL_VERSION, Role};
use crate::proof::{Presented, ProofContext, hex, unhex};
use crate::token::SigningKey;

/// Who signs in [`server_statement`]: the global RM.
const GLOBAL_RM: &str = "carmi global rm";
/// Who signs in [`server_statement`]: a local RM.
const LOCAL_RM: &str = "carmi local rm";
/// Who signs in [`server_statement`]: a relay standing for the global RM.
const RELAY: &str = "carmi relay";

mod client;
pub use client::{client, client_bound, client_towards};

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
/// server knows which key to prove with. A server side may also hold the
/// pool's signing key (the global RM, which proves itself with it) or its
/// machine's name (a local RM, which tokens' proofs are made for).
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
    token: Option<std::sync::Arc<str>>,
    job: Option<JobId>,
    signer: Option<std::sync::Arc<SigningKey>>,
    name: Option<std::sync::Arc<str>>,
    prover: Option<std::sync::Arc<MachineProver>>,
    /// The prover's certificate is a relay's ([`Secret::with_relay_prover`]).
    relay: bool,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    fn of(key: Vec<u8>, job: Option<JobId>) -> Secret {
        Secret {
            key,
            token: None,
            job,
            signer: None,
            name: None,
            prover: None,
            relay: false,
        }
    }

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
        Ok(Secret::of(trimmed.to_vec(), None))
    }

    /// The job whose credential this is; `None` for the pool secret.
    pub fn job(&self) -> Option<JobId> {
        self.job
    }

    /// The same secret, presenting `token` in the handshakes it opens.
    pub fn with_token(mut self, token: Option<String>) -> Secret {
        self.token = token.map(Into::into);
        self
    }

    /// The token presented in the handshakes this side opens.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The same secret, for a global RM that proves itself with the pool's
    /// signing key in the handshakes it serves.
    pub fn with_signer(mut self, key: std::sync::Arc<SigningKey>) -> Secret {
        self.signer = Some(key);
        self
    }

    /// The same secret, for the local RM of machine `name`: the proofs of
    /// tokens shown to it must be made for that name.
    pub fn with_name(mut self, name: &str) -> Secret {
        self.name = Some(name.into());
        self
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
        let mut m =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        for p in parts {
            m.update(&(p.len() as u32).to_be_bytes());
            m.update(p);
        }
        m
    }

    /// The same secret, for a local RM that proves which machine it is with
    /// `prover`'s certificate (once it has one).
    pub fn with_prover(mut self, prover: std::sync::Arc<MachineProver>) -> Secret {
        self.prover = Some(prover);
        self
    }

    /// The same secret, for a relay (`carmi-relay`): it stands for the
    /// global RM towards its machines (their tokens' proofs name the global
    /// RM) and proves itself with `prover`'s relay certificate, which the
    /// global RM signed with the pool's key.
    pub fn with_relay_prover(mut self, prover: std::sync::Arc<MachineProver>) -> Secret {
        self.prover = Some(prover);
        self.relay = true;
        self
    }

    /// Waits at most `limit` for this local RM's machine certificate, if it
    /// proves itself with one ([`Secret::with_prover`]): a client that shows
    /// a token is then served one.
    pub async fn certified_within(&self, limit: std::time::Duration) {
        if let Some(p) = &self.prover {
            p.ready(limit).await;
        }
    }

    /// What this server proves in its challenge: the pool key and its
    /// signature (a global RM), or a machine's certificate and its
    /// signature (a certified local RM), or nothing.
    fn prove(
        &self,
        client_nonce: &str,
        server_nonce: &str,
        binding: &[u8],
    ) -> (Option<String>, Option<String>, Option<String>) {
        if self.relay {
            let statement = server_statement(RELAY, client_nonce, server_nonce, binding);
            return match self.prover.as_ref().and_then(|p| p.prove(&statement)) {
                Some((cert, sig)) => (None, Some(hex(&sig)), Some(cert)),
                None => (None, None, None),
            };
        }
        if let Some(key) = &self.signer {
            let statement = server_statement(GLOBAL_RM, client_nonce, server_nonce, binding);
            return (
                Some(key.public().to_text()),
                Some(hex(&key.sign(&statement))),
                None,
            );
        }
        let statement = server_statement(LOCAL_RM, client_nonce, server_nonce, binding);
        match self.prover.as_ref().and_then(|p| p.prove(&statement)) {
            Some((cert, sig)) => (None, Some(hex(&sig)), Some(cert)),
            None => (None, None, None),
        }
    }

    /// The client's proof `CP` over both nonces, its role, what it shows
    /// and the session's binding: computed by the client, checked by the server.
    fn client_mac(
        &self,
        (server_nonce, client_nonce): (&str, &str),
        role: &Role,
        presented: &Option<Presented>,
        binding: &[u8],
    ) -> Hmac<Sha256> {
        let role_json = serde_json::to_vec(role).expect("roles serialize");
        let presented_json = serde_json::to_vec(presented).expect("a proof serializes");
        self.mac(&[
            b"client",
            server_nonce.as_bytes(),
            client_nonce.as_bytes(),
            &role_json,
            &presented_json,
            binding,
        ])
    }

    /// The audience a token's proof must name to be taken by this server.
    fn audience(&self) -> String {
        match &self.name {
            Some(name) => crate::proof::local(name),
            None => crate::proof::GLOBAL.to_string(),
        }
    }
}

impl From<&crate::jobcred::JobCredential> for Secret {
    /// A job credential's key: the handshakes it opens name its job.
    fn from(c: &crate::jobcred::JobCredential) -> Secret {
        Secret::of(c.key().as_bytes().to_vec(), Some(c.job()))
    }
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
        /// The job whose credential the client proves; absent: the pool secret.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_key: Option<JobId>,
    },
    Challenge {
        version: u32,
        server_nonce: String,
        server_proof: String,
        /// A global RM's pool key ([`PublicKey::to_text`]) and its signature
        /// over this connection ([`server_statement`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_key: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_sig: Option<String>,
        /// A local RM's machine name, which proofs shown to it must name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_name: Option<String>,
        /// A local RM's machine certificate ([`crate::machinecert`]); its
        /// signature over this connection is then `server_sig`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_cert: Option<String>,
    },
    Proof {
        client_proof: String,
        /// The client's token, shown by its public part and proof.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        presented: Option<Presented>,
    },
    Welcome,
    Refused {
        reason: String,
    },
}

/// Whom a client means to reach: what it demands of the server before it
/// shows a token, and whom its proof names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Towards {
    /// The pool's global RM, which must prove the pool's signing key.
    Global,
    /// A local RM: the proof names its machine, for it to forward.
    Local,
}

impl Towards {
    /// Where a connection in `role` goes, unless told otherwise: an
    /// application's to its local RM, any other to the global RM (a local
    /// RM's control connection says [`Towards::Local`] itself).
    pub fn of(role: &Role) -> Towards {
        match role {
            Role::Application { .. } => Towards::Local,
            _ => Towards::Global,
        }
    }
}

/// What the global RM (`who`: [`GLOBAL_RM`]) or a local RM ([`LOCAL_RM`])
/// signs in a handshake: the connection's nonces and keying material, so
/// that its signature proves nothing elsewhere.
fn server_statement(who: &str, client_nonce: &str, server_nonce: &str, binding: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in [
        who.as_bytes(),
        client_nonce.as_bytes(),
        server_nonce.as_bytes(),
        binding,
    ] {
        out.extend_from_slice(&(p.len() as u32).to_be_bytes());
        out.extend_from_slice(p);
    }
    out
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
    #[error(
        "authentication failed: the peer does not know the pool secret, or a man in the middle holds this connection"
    )]
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
    /// The server did not prove it is the one the client means to reach, so
    /// the client showed it no token.
    #[error("the server did not prove it is this pool's {0}; no token was shown to it")]
    NotProven(String),
    /// The client's token cannot be shown (it has no holder key).
    #[error("{0}")]
    Token(String),
}

async fn next<R: AsyncRead + Unpin>(r: &mut FrameReader<R>) -> Result<Hs, HandshakeError> {
    match r.read::<Hs>().await? {
        Some((m, _)) => Ok(m),
        None => Err(HandshakeError::Closed),
    }
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
    server_auth(r, w, secret, &[], |role, _presented| admit(role))
        .await
        .map(|(role, ())| role)
}

/// Server side that also sees the client's token: after the client has
/// proved it knows the secret, `admit` checks its role and the token it
/// showed (its public part and holder's proof, made for this connection and
/// this server: checked here) and returns what the server keeps of them (the
/// identity the token names), or a reason to refuse that the client receives
/// as [`HandshakeError::Refused`].
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
    F: FnOnce(&Role, Option<&Presented>) -> Result<T, String>,
{
    let choose = |_: Option<JobId>| Ok(secret.clone());
    server_keyed(r, w, choose, binding, |role, shown, _| admit(role, shown)).await
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
    F: FnOnce(&Role, Option<&Presented>, Option<JobId>) -> Result<T, String>,
{
    let admit = |role: Role, shown: Option<Presented>, key| {
        std::future::ready(admit(&role, shown.as_ref(), key))
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
    F: FnOnce(Role, Option<Presented>, Option<JobId>) -> A,
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
    F: FnOnce(Role, Option<Presented>, Option<JobId>) -> A,
    A: std::future::Future<Output = Result<T, String>>,
{
    let Hs::Hello {
        version,
        role,
        client_nonce,
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
        Err(reason) => return Err(not_admitted(w, reason).await),
    };
    let server_nonce = nonce();
    let proof = secret.mac(&[
        b"server",
        client_nonce.as_bytes(),
        server_nonce.as_bytes(),
        binding,
    ]);
    let (server_key, server_sig, server_cert) = secret.prove(&client_nonce, &server_nonce, binding);
    let challenge = Hs::Challenge {
        version: PROTOCOL_VERSION,
        server_nonce: server_nonce.clone(),
        server_proof: hex(&proof.finalize().into_bytes()),
        server_key,
        server_sig,
        server_name: secret.name.as_deref().map(str::to_string),
        server_cert,
    };
    write_frame(w, &challenge, &[])
        .await
        .map_err(FrameError::from)?;
    let Hs::Proof {
        client_proof,
        presented,
    } = next(r).await?
    else {
        return Err(HandshakeError::Unexpected);
    };
    let expected = secret.client_mac((&server_nonce, &client_nonce), &role, &presented, binding);
    let ok = unhex(&client_proof).is_some_and(|p| expected.verify_slice(&p).is_ok());
    if !ok {
        let reason = "authentication failed".to_string();
        let _ = write_frame(w, &Hs::Refused { reason }, &[]).await;
        return Err(HandshakeError::BadProof);
    }
    let here = ProofContext {
        audience: secret.audience(),
        role: role.clone(),
        client_nonce,
        server_nonce,
        binding: hex(binding),
        time_unix: 0,
    };
    if let Some(reason) = presented
        .as_ref()
        .and_then(|p| other_connection(&p.context, &here))
    {
        return Err(not_admitted(w, reason).await);
    }
    let kept = match admit(role.clone(), presented, job_key).await {
        Ok(kept) => kept,
        Err(reason) => return Err(not_admitted(w, reason).await),
    };
    write_frame(w, &Hs::Welcome, &[])
        .await
        .map_err(FrameError::from)?;
    Ok((role, kept))
}

/// Tells the client `reason` ([`refuse`]) and gives the server's error.
async fn not_admitted<W: AsyncWrite + Unpin>(w: &mut W, reason: String) -> HandshakeError {
    let _ = refuse(w, &reason).await;
    HandshakeError::NotAdmitted(reason)
}

/// Why a proof made for `theirs` is not one for this connection `here`
/// (whose time is not compared: the proof's own says when it was made).
fn other_connection(theirs: &ProofContext, here: &ProofContext) -> Option<String> {
    if theirs.audience != here.audience {
        return Some(format!(
            "the token's proof was made for {}, and this is {}",
            theirs.audience, here.audience
        ));
    }
    let same = theirs.role == here.role
        && theirs.client_nonce == here.client_nonce
        && theirs.server_nonce == here.server_nonce
        && theirs.binding == here.binding;
    (!same).then(|| "the token's proof was made for another connection".to_string())
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
