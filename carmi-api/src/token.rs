//! The pool's tokens: one identity, its power, an optional machine, an
//! expiry and an id, signed with the pool's Ed25519 signing key.
//!
//! Signatures come from `ring` (the same reviewed library that carries
//! rustls's cryptography), encoding from `serde_json` and `base64`: nothing
//! here is cryptography of our own. A token reads
//!
//! ```text
//! carmi1.<base64url(claims JSON)>.<base64url(Ed25519 signature of "carmi1.<claims>")>.<base64url(holder key)>
//! ```
//!
//! so that it fits on one line of a file or an environment variable. The
//! claims name the pool (a hash of its public key, and the key itself, which
//! its holder pins: only the global RM can sign with it). The first three
//! parts are the token's **public part**; the fourth, the **holder key**, is a
//! key only the token's holder and the global RM know (the global RM derives
//! it from its signing key and the token's id, so it keeps nothing per token).
//! A holder never sends its holder key: it proves it, with an HMAC over the
//! connection it opens ([`crate::proof`]), so that a public part read on the
//! way (or handed to a local RM) opens nothing.
//!
//! Everything but key generation and the token id is pure: verification
//! takes `now` (seconds since the Unix epoch) and the set of revoked ids.

use std::collections::HashSet;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use carmi_proto::authz::{Identity, Power};

/// The prefix of every token of this format.
const PREFIX: &str = "carmi1.";

/// Longest token text accepted (a handshake frame carries it).
pub const MAX_TOKEN_BYTES: usize = 2048;

/// What a token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Its id (a random UUID), for listing and revocation.
    pub id: String,
    /// The pool that signed it ([`PublicKey::pool_id`]).
    pub pool: String,
    /// The pool's public key ([`PublicKey::to_text`]): what a client pins,
    /// so that only the holder of the pool's signing key can play its
    /// global RM. Absent from tokens made before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_key: Option<String>,
    /// Who it names.
    pub identity: String,
    /// What it allows.
    pub power: Power,
    /// The one machine a `daemon` token may advertise.
    #[serde(default)]
    pub machine: Option<String>,
    /// When it was made, seconds since the Unix epoch.
    pub issued_unix: u64,
    /// When it stops working, seconds since the Unix epoch.
    pub expires_unix: u64,
}

impl Claims {
    /// The identity a connection holding this token has.
    pub fn identity(&self) -> Identity {
        Identity {
            name: self.identity.clone(),
            power: self.power,
            machine: self.machine.clone(),
            token: self.id.clone(),
        }
    }
}

/// What to put in a new token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Who.
    pub identity: String,
    /// What it may do.
    pub power: Power,
    /// For a daemon token: its machine.
    pub machine: Option<String>,
    /// How long it lasts, in seconds.
    pub lifetime_s: u64,
}

/// Why a token or key was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token of this format.
    #[error("not a CARMI token: {0}")]
    Malformed(String),
    /// Signed by another pool's key.
    #[error("the token belongs to another pool ({theirs}; this pool is {ours})")]
    OtherPool {
        /// The pool the token names.
        theirs: String,
        /// This pool.
        ours: String,
    },
    /// The signature does not match the claims: forged or altered.
    #[error("the token's signature does not verify: it was forged or altered")]
    BadSignature,
    /// Past its expiry.
    #[error("the token {id} of `{identity}` expired {ago} s ago")]
    Expired {
        /// Its id.
        id: String,
        /// Whose.
        identity: String,
        /// Seconds since it expired.
        ago: u64,
    },
    /// Revoked by an admin.
    #[error("the token {id} of `{identity}` was revoked")]
    Revoked {
        /// Its id.
        id: String,
        /// Whose.
        identity: String,
    },
    /// A key that cannot be read or used.
    #[error("bad key: {0}")]
    BadKey(String),
    /// What a new token asks for makes no sense.
    #[error("cannot make this token: {0}")]
    BadGrant(String),
}

/// The pool's public key: what every daemon needs to verify tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey(Vec<u8>);

impl PublicKey {
    /// From its text form (base64url of the 32 key bytes).
    pub fn from_text(text: &str) -> Result<PublicKey, TokenError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|e| TokenError::BadKey(format!("public key is not base64url: {e}")))?;
        if bytes.len() != 32 {
            return Err(TokenError::BadKey(format!(
                "an Ed25519 public key has 32 bytes, this one {}",
                bytes.len()
            )));
        }
        Ok(PublicKey(bytes))
    }

    /// Its text form.
    pub fn to_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.0)
    }

    /// Whether `signature` is this key's over `message` (the global RM's
    /// proof in a handshake).
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(message, signature)
            .is_ok()
    }

    /// The pool's short name: the first 16 hex digits of the key's SHA-256.
    pub fn pool_id(&self) -> String {
        let digest = Sha256::digest(&self.0);
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Checks `text` at `now_unix` against this key and the revoked ids:
    /// the claims if it is good, else why not.
    pub fn verify(
        &self,
        text: &str,
        now_unix: u64,
        revoked: &HashSet<String>,
    ) -> Result<Claims, TokenError> {
        let text = text.trim();
        if text.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::Malformed(format!(
                "{} bytes long, at most {MAX_TOKEN_BYTES} are accepted",
                text.len()
            )));
        }
        let body = text
            .strip_prefix(PREFIX)
            .ok_or_else(|| TokenError::Malformed(format!("it does not start with `{PREFIX}`")))?;
        let (claims_b64, rest) = body
            .split_once('.')
            .ok_or_else(|| TokenError::Malformed("it has no signature part".into()))?;
        // The holder key, if the text carries it, is not part of what is signed.
        let sig_b64 = rest.split_once('.').map_or(rest, |(sig, _)| sig);
        let decode = |part: &str, what: &str| {
            URL_SAFE_NO_PAD
                .decode(part)
                .map_err(|e| TokenError::Malformed(format!("its {what} is not base64url: {e}")))
        };
        let claims: Claims = serde_json::from_slice(&decode(claims_b64, "claims")?)
            .map_err(|e| TokenError::Malformed(format!("its claims do not parse: {e}")))?;
        if claims.pool != self.pool_id() {
            return Err(TokenError::OtherPool {
                theirs: claims.pool,
                ours: self.pool_id(),
            });
        }
        let signed = &text[..PREFIX.len() + claims_b64.len()];
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(signed.as_bytes(), &decode(sig_b64, "signature")?)
            .map_err(|_| TokenError::BadSignature)?;
        if revoked.contains(&claims.id) {
            return Err(TokenError::Revoked {
                id: claims.id,
                identity: claims.identity,
            });
        }
        if now_unix >= claims.expires_unix {
            return Err(TokenError::Expired {
                ago: now_unix - claims.expires_unix,
                id: claims.id,
                identity: claims.identity,
            });
        }
        Ok(claims)
    }
}

/// What `text` says of itself, unchecked (no signature, pool or expiry is
/// verified): for its holder's own warnings ("your token expires in 3
/// days"), never for a decision.
pub fn claims_unchecked(text: &str) -> Option<Claims> {
    let body = text.trim().strip_prefix(PREFIX)?;
    let (claims_b64, _) = body.split_once('.')?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims_b64).ok()?).ok()
}

/// Within this long of its expiry (or a quarter of its lifetime, if that is
/// shorter: a token made for a day is not warned about all day), a user's
/// token is warned about by `carmi`.
pub const EXPIRY_WARNING_S: u64 = 7 * 24 * 3600;

/// The warning `carmi` prints for a token near or past its expiry at
/// `now_unix` (read from `file`), if any.
pub fn expiry_warning(claims: &Claims, file: &Path, now_unix: u64) -> Option<String> {
    let days = |s: u64| s.div_ceil(24 * 3600);
    let whose = format!("the token of `{}` in {}", claims.identity, file.display());
    let renew = format!(
        "ask the pool's admin for a new one (`carmi token create --identity {} --authz {}`)",
        claims.identity, claims.power
    );
    if now_unix >= claims.expires_unix {
        let ago = now_unix - claims.expires_unix;
        return Some(format!(
            "{whose} expired {} day(s) ago: {renew}",
            days(ago.max(1))
        ));
    }
    let left = claims.expires_unix - now_unix;
    let lifetime = claims.expires_unix.saturating_sub(claims.issued_unix);
    (left <= EXPIRY_WARNING_S.min(lifetime / 4))
        .then(|| format!("{whose} expires in {} day(s): {renew}", days(left)))
}

/// The pool's signing key. It stays on the manager (the global RM's
/// machine): whoever holds it can make any token.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    pkcs8: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey(pool {})", self.public().pool_id())
    }
}

impl SigningKey {
    /// A fresh key from the operating system's randomness.
    pub fn generate() -> Result<SigningKey, TokenError> {
        let rng = ring::rand::SystemRandom::new();
        let doc = Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|_| TokenError::BadKey("the system gave no randomness".into()))?;
        SigningKey::from_pkcs8(doc.as_ref().to_vec())
    }

    fn from_pkcs8(pkcs8: Vec<u8>) -> Result<SigningKey, TokenError> {
        let pair = Ed25519KeyPair::from_pkcs8(&pkcs8)
            .map_err(|e| TokenError::BadKey(format!("not an Ed25519 PKCS#8 key: {e}")))?;
        Ok(SigningKey { pair, pkcs8 })
    }

    /// From its text form (base64url of the PKCS#8 document).
    pub fn from_text(text: &str) -> Result<SigningKey, TokenError> {
        let der = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|e| TokenError::BadKey(format!("signing key is not base64url: {e}")))?;
        SigningKey::from_pkcs8(der)
    }

    /// Its text form, for the key file.
    pub fn to_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.pkcs8)
    }

    /// Its public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.pair.public_key().as_ref().to_vec())
    }

    /// A new signed token for `grant`, issued at `now_unix`, with a fresh id.
    pub fn issue(&self, grant: &Grant, now_unix: u64) -> Result<(String, Claims), TokenError> {
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= carmi_proto::limits::MAX_NAME_BYTES
                && !s.chars().any(|c| c.is_control() || c.is_whitespace())
        };
        if !name_ok(&grant.identity) {
            return Err(TokenError::BadGrant(format!(
                "identity `{}` must be a non-empty name without spaces",
                grant.identity
            )));
        }
        match (&grant.power, &grant.machine) {
            (Power::Daemon, None) => {
                return Err(TokenError::BadGrant(
                    "a daemon token needs the machine it runs (--machine)".into(),
                ));
            }
            (_, Some(m)) if !name_ok(m) => {
                return Err(TokenError::BadGrant(format!(
                    "machine name `{m}` is not valid"
                )));
            }
            _ => {}
        }
        if grant.lifetime_s == 0 {
            return Err(TokenError::BadGrant("a lifetime of 0 s".into()));
        }
        let claims = Claims {
            id: uuid::Uuid::new_v4().to_string(),
            pool: self.public().pool_id(),
            pool_key: Some(self.public().to_text()),
            identity: grant.identity.clone(),
            power: grant.power,
            machine: grant.machine.clone(),
            issued_unix: now_unix,
            expires_unix: now_unix.saturating_add(grant.lifetime_s),
        };
        let json = serde_json::to_vec(&claims).expect("claims serialize");
        let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json));
        let sig = self.pair.sign(signed.as_bytes());
        let held = URL_SAFE_NO_PAD.encode(self.holder_key(&claims.id));
        Ok((
            format!("{signed}.{}.{held}", URL_SAFE_NO_PAD.encode(sig.as_ref())),
            claims,
        ))
    }

    /// The holder key of the token with id `id`: derived from this key, so
    /// that the global RM checks a holder's proof without keeping anything
    /// per token, and nobody without the signing key can make one.
    pub fn holder_key(&self, id: &str) -> [u8; 32] {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.pkcs8).expect("HMAC takes any key");
        mac.update(b"carmi token holder key\0");
        mac.update(id.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Signs `message` with the pool's key: the global RM's proof of who it
    /// is in each handshake ([`crate::handshake`]).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }
}

/// The public part of a token's text (without its holder key): what a
/// holder shows, never its key.
pub fn public_part(text: &str) -> &str {
    let text = text.trim();
    match text.match_indices('.').nth(2) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// The holder key a token's text carries, if it has one.
pub fn holder_key_of(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    let (at, _) = text.match_indices('.').nth(2)?;
    URL_SAFE_NO_PAD.decode(&text[at + 1..]).ok()
}

/// Seconds since the Unix epoch, now (0 if the clock is before 1970).
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reads a token file (one line).
pub fn read_token_file(path: &Path) -> Result<String, crate::files::FileError> {
    crate::files::read_private(path).map(|t| t.trim().to_string())
}

#[cfg(test)]
#[path = "token_tests.rs"]
mod tests;
