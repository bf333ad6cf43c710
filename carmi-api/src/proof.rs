//! A token holder's proof: what a client shows in place of its token.
//!
//! A token's text ends with its **holder key** ([`crate::token`]), which
//! only the holder and the global RM know. The holder sends the token's
//! public part and an HMAC, under that key, of the connection it is opening:
//! who it means to reach (the **audience**: the global RM, or one local RM by
//! its machine name), its role, both handshake nonces, the TLS session's
//! exported keying material and the time. So:
//!
//! - what a man in the middle reads (he terminates TLS on both sides: his two
//!   sessions have different keying material) proves nothing on any other
//!   connection;
//! - a local RM, which the pool does not trust with tokens, gets a proof it
//!   forwards to the global RM to be checked, made for its own name and that
//!   one connection: it can neither open a connection of its own with it nor
//!   use it at another machine, and the global RM takes each forwarded proof
//!   once, within [`FORWARD_WINDOW_S`] of when it was made.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::msg::Role;
use crate::token::{Claims, PublicKey, SigningKey, TokenError, holder_key_of, public_part};

/// The audience of a connection to the global RM.
pub const GLOBAL: &str = "global";

/// The audience of a connection to the local RM of machine `name`.
pub fn local(name: &str) -> String {
    format!("local:{name}")
}

/// How long (either way of the global RM's clock) a forwarded proof is
/// taken after it was made, and so how long the global RM remembers it.
pub const FORWARD_WINDOW_S: u64 = 300;

/// What a holder's proof covers: one connection, to one audience.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofContext {
    /// Whom the proof is for ([`GLOBAL`], [`local`]).
    pub audience: String,
    /// The role the client declared.
    pub role: Role,
    /// The client's handshake nonce.
    pub client_nonce: String,
    /// The server's handshake nonce.
    pub server_nonce: String,
    /// The TLS session's exported keying material, in hex (empty in clear).
    pub binding: String,
    /// When the proof was made (the client's clock, seconds since the epoch).
    pub time_unix: u64,
}

/// A token shown with its holder's proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presented {
    /// The token's public part (claims and signature, no holder key).
    pub token: String,
    /// HMAC-SHA256 of [`ProofContext`] (its JSON) under the holder key, hex.
    pub proof: String,
    /// What the proof covers.
    pub context: ProofContext,
}

/// Why a proof is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The token itself is refused (forged, expired, revoked, another pool's).
    #[error("{0}")]
    Token(#[from] TokenError),
    /// The HMAC does not verify: the client does not hold the token's key.
    #[error(
        "the token of `{0}` was shown without its holder's proof (a copy of its public part opens nothing)"
    )]
    NotHolder(String),
    /// Made for another audience.
    #[error("the proof was made for {theirs}, not for {ours}")]
    Audience {
        /// Its audience.
        theirs: String,
        /// Ours.
        ours: String,
    },
    /// A forwarded proof too old, from the future, or seen before.
    #[error("the forwarded proof is {0}")]
    Stale(String),
}

impl Presented {
    /// The proof of `token_text` (the whole token file, holder key included)
    /// for `context`, or why it cannot be made (a token made before tokens
    /// held a key).
    pub fn make(token_text: &str, context: ProofContext) -> Result<Presented, String> {
        let key = holder_key_of(token_text).ok_or_else(|| {
            "the token has no holder key (it was made by an older CARMI): ask the pool's admin for a new one"
                .to_string()
        })?;
        Ok(Presented {
            token: public_part(token_text).to_string(),
            proof: hex(&mac(&key, &context).finalize().into_bytes()),
            context,
        })
    }

    /// Checks the token with `public` (signature, pool, expiry, `revoked`
    /// at `now_unix`) and the proof with `key`'s holder key; `audience` is
    /// whom the proof must be for. The token's claims if all hold.
    pub fn check(
        &self,
        key: &SigningKey,
        audience: &str,
        now_unix: u64,
        revoked: &std::collections::HashSet<String>,
    ) -> Result<Claims, ProofError> {
        let claims = key.public().verify(&self.token, now_unix, revoked)?;
        if self.context.audience != audience {
            return Err(ProofError::Audience {
                theirs: self.context.audience.clone(),
                ours: audience.to_string(),
            });
        }
        let ok = unhex(&self.proof).is_some_and(|p| {
            mac(&key.holder_key(&claims.id), &self.context)
                .verify_slice(&p)
                .is_ok()
        });
        if !ok {
            return Err(ProofError::NotHolder(claims.identity));
        }
        Ok(claims)
    }

    /// Text form, for a message that carries it as a string.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a proof serializes")
    }

    /// From [`Presented::encode`]'s text.
    pub fn decode(text: &str) -> Result<Presented, String> {
        serde_json::from_str(text).map_err(|e| format!("not a token proof: {e}"))
    }
}

/// Whether the whole token text `full` is `key`'s token with its own holder
/// key (a browser shows the whole token to the dashboard, which is the
/// global RM itself).
pub fn holds(key: &SigningKey, full: &str, claims: &Claims) -> bool {
    use sha2::Digest;
    // Through digests, so that the time taken says nothing of a guess.
    holder_key_of(full)
        .is_some_and(|k| Sha256::digest(k) == Sha256::digest(key.holder_key(&claims.id)))
}

/// The forwarded proofs the global RM has taken, each kept until it could
/// no longer be taken anyway, so that a local RM cannot use one twice.
#[derive(Debug, Default)]
pub struct SeenProofs {
    seen: HashMap<(String, String), u64>,
}

impl SeenProofs {
    /// Takes a forwarded proof of token `id` at `now_unix`, or says why not
    /// (too old, too far ahead, already taken).
    pub fn take(
        &mut self,
        id: &str,
        context: &ProofContext,
        now_unix: u64,
    ) -> Result<(), ProofError> {
        let t = context.time_unix;
        if t + FORWARD_WINDOW_S < now_unix {
            return Err(ProofError::Stale(format!("{} s old", now_unix - t)));
        }
        if t > now_unix + FORWARD_WINDOW_S {
            return Err(ProofError::Stale(format!(
                "{} s ahead of this clock",
                t - now_unix
            )));
        }
        self.seen.retain(|_, until| *until >= now_unix);
        let key = (id.to_string(), context.client_nonce.clone());
        if self.seen.contains_key(&key) {
            return Err(ProofError::Stale(
                "one this global RM has already taken".into(),
            ));
        }
        self.seen.insert(key, t + 2 * FORWARD_WINDOW_S);
        Ok(())
    }
}

/// Whether `public` is the pool key `claims` pin (its full key when the
/// token carries it, else its pool id).
pub fn pinned(claims: &Claims, public: &PublicKey) -> bool {
    match &claims.pool_key {
        Some(k) => *k == public.to_text(),
        None => claims.pool == public.pool_id(),
    }
}

fn mac(key: &[u8], context: &ProofContext) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    m.update(b"carmi holder proof\0");
    m.update(&serde_json::to_vec(context).expect("a context serializes"));
    m
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 1024 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
#[path = "proof_tests.rs"]
mod tests;
