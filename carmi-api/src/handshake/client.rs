//! The client side of the handshake (see the parent module).

use hmac::Mac;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{
    GLOBAL_RM, HANDSHAKE_TIMEOUT, HandshakeError, Hs, LOCAL_RM, RELAY, Secret, Towards, next,
    nonce, server_statement,
};
use crate::frame::{FrameError, FrameReader, write_frame};
use crate::msg::{PROTOCOL_VERSION, Role};
use crate::proof::{Presented, ProofContext, hex, unhex};
use crate::token::{Claims, PublicKey};

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
/// handshake succeeds only if both ends share that one session. The server
/// is the one [`Towards::of`] `role` says.
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
    client_towards(r, w, secret, role, binding, Towards::of(role)).await
}

/// [`client_bound`] to the server `towards` names.
pub async fn client_towards<R, W>(
    r: &mut FrameReader<R>,
    w: &mut W,
    secret: &Secret,
    role: &Role,
    binding: &[u8],
    towards: Towards,
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
            job_key: secret.job(),
        };
        write_frame(w, &hello, &[])
            .await
            .map_err(FrameError::from)?;
        let challenge = match next(r).await? {
            c @ Hs::Challenge { .. } => c,
            Hs::Refused { reason } => return Err(HandshakeError::Refused(reason)),
            _ => return Err(HandshakeError::Unexpected),
        };
        let Hs::Challenge {
            version,
            server_nonce,
            server_proof,
            ..
        } = &challenge
        else {
            unreachable!("matched above")
        };
        if *version != PROTOCOL_VERSION {
            return Err(HandshakeError::Version {
                ours: PROTOCOL_VERSION,
                theirs: *version,
            });
        }
        let expected = secret.mac(&[
            b"server",
            client_nonce.as_bytes(),
            server_nonce.as_bytes(),
            binding,
        ]);
        let proof = unhex(server_proof).ok_or(HandshakeError::BadProof)?;
        expected
            .verify_slice(&proof)
            .map_err(|_| HandshakeError::BadProof)?;
        let presented = match secret.token() {
            Some(text) => Some(present(
                text,
                towards,
                &challenge,
                role,
                &client_nonce,
                binding,
            )?),
            None => None,
        };
        let nonces = (server_nonce.as_str(), client_nonce.as_str());
        let mine = secret.client_mac(nonces, role, &presented, binding);
        let proof = Hs::Proof {
            client_proof: hex(&mine.finalize().into_bytes()),
            presented,
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

/// The proof of `token` (the client's whole token) for this connection, once
/// the server has proved itself as `towards` demands; else why not.
fn present(
    token: &str,
    towards: Towards,
    challenge: &Hs,
    role: &Role,
    client_nonce: &str,
    binding: &[u8],
) -> Result<Presented, HandshakeError> {
    let Hs::Challenge {
        server_nonce,
        server_key,
        server_sig,
        server_name,
        server_cert,
        ..
    } = challenge
    else {
        return Err(HandshakeError::Unexpected);
    };
    let claims = crate::token::claims_unchecked(token)
        .ok_or_else(|| HandshakeError::Token("the token presented is not a CARMI token".into()))?;
    let sig = server_sig.as_deref().and_then(unhex);
    let audience = match towards {
        // A relay stands for the global RM with a certificate in place of its key.
        Towards::Global if server_key.is_none() && server_cert.is_some() => {
            let statement = server_statement(RELAY, client_nonce, server_nonce, binding);
            prove_relay(&claims, server_cert.as_deref(), sig.as_deref(), &statement)?;
            crate::proof::GLOBAL.to_string()
        }
        Towards::Global => {
            let statement = server_statement(GLOBAL_RM, client_nonce, server_nonce, binding);
            prove_global(&claims, server_key.as_deref(), sig.as_deref(), &statement)?;
            crate::proof::GLOBAL.to_string()
        }
        Towards::Local => {
            let name = server_name.as_deref().ok_or_else(|| {
                HandshakeError::NotProven("local RM (it did not say its machine's name)".into())
            })?;
            let statement = server_statement(LOCAL_RM, client_nonce, server_nonce, binding);
            prove_local(
                &claims,
                name,
                server_cert.as_deref(),
                sig.as_deref(),
                &statement,
            )?;
            crate::proof::local(name)
        }
    };
    let context = ProofContext {
        audience,
        role: role.clone(),
        client_nonce: client_nonce.to_string(),
        server_nonce: server_nonce.clone(),
        binding: hex(binding),
        time_unix: crate::token::now_unix(),
    };
    Presented::make(token, context).map_err(HandshakeError::Token)
}

/// Checks the global RM's signature over this connection against the pool
/// key the client's own token pins.
fn prove_global(
    claims: &Claims,
    server_key: Option<&str>,
    sig: Option<&[u8]>,
    statement: &[u8],
) -> Result<(), HandshakeError> {
    let not = |why: &str| HandshakeError::NotProven(format!("global RM ({why})"));
    let (Some(key), Some(sig)) = (server_key, sig) else {
        return Err(not("it gave no signature by the pool's signing key"));
    };
    let key = PublicKey::from_text(key).map_err(|e| not(&e.to_string()))?;
    if !crate::proof::pinned(claims, &key) {
        return Err(not(&format!(
            "it signed with the key of pool {}, and the token is of another pool, {}",
            key.pool_id(),
            claims.pool
        )));
    }
    if !key.verifies(statement, sig) {
        return Err(not("its signature over this connection does not verify"));
    }
    Ok(())
}

/// Checks a local RM's machine certificate (signed by the pool key the
/// client's token pins, for the machine it names) and its signature over
/// this connection.
fn prove_local(
    claims: &Claims,
    name: &str,
    cert: Option<&str>,
    sig: Option<&[u8]>,
    statement: &[u8],
) -> Result<(), HandshakeError> {
    let not = |why: &str| HandshakeError::NotProven(format!("local RM of machine {name} ({why})"));
    let (Some(cert), Some(sig)) = (cert, sig) else {
        return Err(not(
            "it has no machine certificate from the global RM: it is not linked to the pool yet",
        ));
    };
    let Some(pool_key) = &claims.pool_key else {
        return Err(not(
            "the token names no pool key to check its certificate with: ask for a new token",
        ));
    };
    let pool = PublicKey::from_text(pool_key).map_err(|e| not(&e.to_string()))?;
    let now = crate::token::now_unix();
    let (machine, key) = crate::machinecert::verify(&pool, cert, now)
        .map_err(|e| not(&format!("its certificate: {e}")))?;
    if machine != name {
        return Err(not(&format!("its certificate is machine {machine}'s")));
    }
    if !key.verifies(statement, sig) {
        return Err(not("its signature over this connection does not verify"));
    }
    Ok(())
}

/// Checks a relay's certificate (signed by the pool key the client's token
/// pins, as a relay's: a machine's certificate does not do) and its
/// signature over this connection: the relay may then see the token's proof,
/// which names the global RM and this connection only.
fn prove_relay(
    claims: &Claims,
    cert: Option<&str>,
    sig: Option<&[u8]>,
    statement: &[u8],
) -> Result<(), HandshakeError> {
    let not = |why: &str| HandshakeError::NotProven(format!("relay of the global RM ({why})"));
    let (Some(cert), Some(sig)) = (cert, sig) else {
        return Err(not("it gave no signature with its certificate"));
    };
    let Some(pool_key) = &claims.pool_key else {
        return Err(not(
            "the token names no pool key to check its certificate with: ask for a new token",
        ));
    };
    let pool = PublicKey::from_text(pool_key).map_err(|e| not(&e.to_string()))?;
    let (_, key) = crate::machinecert::verify_relay(&pool, cert, crate::token::now_unix())
        .map_err(|e| not(&format!("its certificate: {e}")))?;
    if !key.verifies(statement, sig) {
        return Err(not("its signature over this connection does not verify"));
    }
    Ok(())
}
