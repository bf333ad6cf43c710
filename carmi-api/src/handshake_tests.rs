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

/// Runs a server with `server_secret` and a client with `client_secret`
/// towards `towards`: what the client's handshake gave, and the token proof
/// the server's `admit` saw, if it got that far.
async fn shown(
    server_secret: Secret,
    client_secret: Secret,
    towards: Towards,
) -> (Result<(), HandshakeError>, Option<Presented>) {
    let (a, b) = pair();
    let server = tokio::spawn(async move {
        let (r, mut w) = tokio::io::split(b);
        let mut r = FrameReader::new(r);
        server_auth(&mut r, &mut w, &server_secret, b"session", |_, p| {
            Ok(p.cloned())
        })
        .await
    });
    let (r, mut w) = tokio::io::split(a);
    let mut r = FrameReader::new(r);
    let got = client_towards(
        &mut r,
        &mut w,
        &client_secret,
        &Role::Admin,
        b"session",
        towards,
    )
    .await;
    drop((r, w));
    let seen = server.await.unwrap().ok().and_then(|(_, p)| p);
    (got, seen)
}

fn keyed() -> (Secret, std::sync::Arc<SigningKey>, String) {
    let secret = Secret::new(b"0123456789abcdef0123").unwrap();
    let key = std::sync::Arc::new(SigningKey::generate().unwrap());
    let grant = crate::token::Grant {
        identity: "alice".into(),
        power: crate::token::Power::Submit,
        machine: None,
        lifetime_s: 3600,
    };
    let token = key.issue(&grant, crate::token::now_unix()).unwrap().0;
    (secret, key, token)
}

#[tokio::test]
async fn the_global_rm_proves_the_pool_key_before_a_token_is_shown() {
    let (secret, key, token) = keyed();
    let server = secret.clone().with_signer(key.clone());
    let client = secret.clone().with_token(Some(token.clone()));
    let (got, seen) = shown(server, client, Towards::Global).await;
    got.unwrap();
    let seen = seen.expect("the server's admit saw the token's proof");
    assert!(
        !seen
            .token
            .contains(&token[crate::token::public_part(&token).len()..])
    );
    let none = Default::default();
    let claims = seen.check(&key, crate::proof::GLOBAL, crate::token::now_unix(), &none);
    assert_eq!(claims.unwrap().identity, "alice");
}

#[tokio::test]
async fn a_server_holding_only_the_secret_is_shown_no_token() {
    let (secret, _key, token) = keyed();
    let client = secret.clone().with_token(Some(token.clone()));
    // The pool secret and no key, or another pool's key: no proof, no token.
    let other = std::sync::Arc::new(SigningKey::generate().unwrap());
    for server in [secret.clone(), secret.clone().with_signer(other)] {
        let (got, seen) = shown(server, client.clone(), Towards::Global).await;
        assert!(matches!(&got, Err(HandshakeError::NotProven(_))), "{got:?}");
        assert!(seen.is_none());
    }
}

#[tokio::test]
async fn a_local_rm_gets_a_proof_for_its_own_name_only() {
    let (secret, key, token) = keyed();
    let client = secret.clone().with_token(Some(token));
    let prover = crate::machinecert::MachineProver::generate().unwrap();
    let now = crate::token::now_unix();
    prover.certified(crate::machinecert::issue(&key, "m1", &prover.public(), now));
    let m1 = secret
        .clone()
        .with_name("m1")
        .with_prover(std::sync::Arc::new(prover));
    let (got, seen) = shown(m1, client, Towards::Local).await;
    got.unwrap();
    let seen = seen.unwrap();
    let (now, none) = (crate::token::now_unix(), Default::default());
    assert!(
        seen.check(&key, &crate::proof::local("m1"), now, &none)
            .is_ok()
    );
    assert!(seen.check(&key, crate::proof::GLOBAL, now, &none).is_err());
    assert!(
        seen.check(&key, &crate::proof::local("m2"), now, &none)
            .is_err()
    );
}

#[test]
fn short_secrets_are_rejected() {
    assert!(matches!(
        Secret::new(b"  short \n"),
        Err(HandshakeError::WeakSecret(5))
    ));
    assert_eq!(Secret::generate_text().len(), 64);
}
