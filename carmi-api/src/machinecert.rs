//! A machine's certificate: how a local RM proves which machine of the pool
//! it is, to a client that shows it a token.
//!
//! A local RM makes an Ed25519 key in memory at each start and, once its
//! link to the global RM is up, has the global RM sign a certificate for
//! it: "machine M's key is K, until T", signed with the pool's key. In each
//! handshake it serves, it then gives the certificate and its signature
//! over the connection (nonces and TLS keying material). A client that holds
//! a token checks both against the pool key its token pins before it shows
//! anything: a program that holds the pool secret, or even a daemon token
//! of its own machine, cannot play another machine's local RM.
//!
//! The text reads `carmimc1.<base64url(claims JSON)>.<base64url(signature)>`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::token::{PublicKey, SigningKey};

const PREFIX: &str = "carmimc1.";

/// How long a certificate lasts: a local RM asks for a new one at each link,
/// and the link renews it before this runs out.
pub const LIFETIME_S: u64 = 7 * 24 * 3600;

/// What a certificate says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineClaims {
    /// The pool that signed it ([`PublicKey::pool_id`]).
    pub pool: String,
    /// The machine's name.
    pub machine: String,
    /// The machine's key ([`PublicKey::to_text`]).
    pub key: String,
    /// When it stops being good, seconds since the Unix epoch.
    pub expires_unix: u64,
    /// A relay's certificate (`carmi-relay`): it stands for the global RM
    /// towards the machines that connect through it, and is never taken as
    /// a machine's (nor a machine's as a relay's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub relay: bool,
}

/// The pool key's signature over `machine`'s `key`, good until `now_unix`
/// plus [`LIFETIME_S`]: the certificate's text.
pub fn issue(pool: &SigningKey, machine: &str, key: &PublicKey, now_unix: u64) -> String {
    sign(pool, machine, key, now_unix, false)
}

/// [`issue`] for relay `name`: the certificate a relay shows the machines
/// that connect through it in place of the pool key's own signature.
pub fn issue_relay(pool: &SigningKey, name: &str, key: &PublicKey, now_unix: u64) -> String {
    sign(pool, name, key, now_unix, true)
}

fn sign(pool: &SigningKey, machine: &str, key: &PublicKey, now_unix: u64, relay: bool) -> String {
    let claims = MachineClaims {
        pool: pool.public().pool_id(),
        machine: machine.to_string(),
        key: key.to_text(),
        expires_unix: now_unix.saturating_add(LIFETIME_S),
        relay,
    };
    let json = serde_json::to_vec(&claims).expect("claims serialize");
    let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json));
    let sig = pool.sign(signed.as_bytes());
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// Checks certificate `text` against the pool key `pool` at `now_unix`: the
/// machine's name and key, or why not (a relay's certificate is not a machine's).
pub fn verify(pool: &PublicKey, text: &str, now_unix: u64) -> Result<(String, PublicKey), String> {
    match verify_any(pool, text, now_unix)? {
        (claims, _) if claims.relay => Err("it is a relay's certificate, not a machine's".into()),
        (claims, key) => Ok((claims.machine, key)),
    }
}

/// [`verify`] for a relay's certificate: the relay's name and key.
pub fn verify_relay(
    pool: &PublicKey,
    text: &str,
    now_unix: u64,
) -> Result<(String, PublicKey), String> {
    match verify_any(pool, text, now_unix)? {
        (claims, key) if claims.relay => Ok((claims.machine, key)),
        (claims, _) => Err(format!(
            "it is machine {}'s certificate, not a relay's",
            claims.machine
        )),
    }
}

fn verify_any(
    pool: &PublicKey,
    text: &str,
    now_unix: u64,
) -> Result<(MachineClaims, PublicKey), String> {
    let body = text
        .strip_prefix(PREFIX)
        .ok_or("not a machine certificate")?;
    let (claims_b64, sig_b64) = body.split_once('.').ok_or("no signature part")?;
    let sig = URL_SAFE_NO_PAD
        .decode(sig_b64)
        .map_err(|e| format!("its signature is not base64url: {e}"))?;
    if !pool.verifies(&text.as_bytes()[..PREFIX.len() + claims_b64.len()], &sig) {
        return Err("it is not signed by this pool's key".into());
    }
    let json = URL_SAFE_NO_PAD
        .decode(claims_b64)
        .map_err(|e| format!("its claims are not base64url: {e}"))?;
    let claims: MachineClaims =
        serde_json::from_slice(&json).map_err(|e| format!("its claims do not parse: {e}"))?;
    if now_unix >= claims.expires_unix {
        return Err(format!(
            "it expired {} s ago",
            now_unix - claims.expires_unix
        ));
    }
    let key = PublicKey::from_text(&claims.key).map_err(|e| e.to_string())?;
    Ok((claims, key))
}

/// A local RM's proof of who it is: its key, and the certificate the global
/// RM signed for it once its link came up (`None` until then).
pub struct MachineProver {
    key: SigningKey,
    cert: tokio::sync::watch::Sender<Option<String>>,
}

impl std::fmt::Debug for MachineProver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MachineProver(..)")
    }
}

impl MachineProver {
    /// A fresh key, not yet certified.
    pub fn generate() -> Result<MachineProver, String> {
        Ok(MachineProver {
            key: SigningKey::generate().map_err(|e| e.to_string())?,
            cert: tokio::sync::watch::channel(None).0,
        })
    }

    /// The key to have certified.
    pub fn public(&self) -> PublicKey {
        self.key.public()
    }

    /// Keeps the certificate the global RM signed.
    pub fn certified(&self, cert: String) {
        self.cert.send_replace(Some(cert));
    }

    /// The certificate and the signature over `statement`, once certified.
    pub fn prove(&self, statement: &[u8]) -> Option<(String, Vec<u8>)> {
        let cert = self.cert.borrow().clone()?;
        Some((cert, self.key.sign(statement)))
    }

    /// Waits at most `limit` for a certificate (a connection that arrives
    /// while the link to the global RM is coming up is served with one).
    pub async fn ready(&self, limit: std::time::Duration) {
        let mut rx = self.cert.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(Option::is_some)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_certificate_names_its_machine_and_key_for_its_pool_only() {
        let pool = SigningKey::generate().unwrap();
        let machine = SigningKey::generate().unwrap();
        let cert = issue(&pool, "m1", &machine.public(), NOW);
        let (name, key) = verify(&pool.public(), &cert, NOW + 10).unwrap();
        assert_eq!((name.as_str(), key), ("m1", machine.public()));
        let other = SigningKey::generate().unwrap();
        assert!(verify(&other.public(), &cert, NOW).is_err());
        assert!(verify(&pool.public(), &cert, NOW + LIFETIME_S).is_err());
        // Another machine's name in the claims breaks the signature.
        let forged = issue(&other, "m2", &machine.public(), NOW);
        let (_, sig) = cert.rsplit_once('.').unwrap();
        let (claims, _) = forged.rsplit_once('.').unwrap();
        assert!(verify(&pool.public(), &format!("{claims}.{sig}"), NOW).is_err());
    }

    #[test]
    fn a_relay_certificate_is_never_a_machine_one_nor_the_other_way() {
        let pool = SigningKey::generate().unwrap();
        let key = SigningKey::generate().unwrap().public();
        let relay = issue_relay(&pool, "r1", &key, NOW);
        let machine = issue(&pool, "m1", &key, NOW);
        assert_eq!(verify_relay(&pool.public(), &relay, NOW).unwrap().0, "r1");
        assert!(verify(&pool.public(), &relay, NOW).is_err());
        assert!(verify_relay(&pool.public(), &machine, NOW).is_err());
        assert_eq!(verify(&pool.public(), &machine, NOW).unwrap().0, "m1");
    }
}
