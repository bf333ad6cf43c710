use std::collections::HashSet;

use super::*;
use crate::token::Grant;

const NOW: u64 = 1_800_000_000;

fn token(key: &SigningKey) -> String {
    let grant = Grant {
        identity: "alice".into(),
        power: crate::token::Power::Submit,
        machine: None,
        lifetime_s: 3600,
    };
    key.issue(&grant, NOW).unwrap().0
}

fn context(audience: &str) -> ProofContext {
    ProofContext {
        audience: audience.into(),
        role: Role::Admin,
        client_nonce: "c".repeat(32),
        server_nonce: "s".repeat(32),
        binding: "ab".repeat(32),
        time_unix: NOW,
    }
}

#[test]
fn a_holders_proof_is_taken_for_its_audience_only() {
    let key = SigningKey::generate().unwrap();
    let text = token(&key);
    let shown = Presented::make(&text, context(GLOBAL)).unwrap();
    assert!(!shown.token.contains(&text[public_part(&text).len()..]));
    let claims = shown.check(&key, GLOBAL, NOW, &HashSet::new()).unwrap();
    assert_eq!(claims.identity, "alice");
    assert!(matches!(
        shown.check(&key, &local("m1"), NOW, &HashSet::new()),
        Err(ProofError::Audience { .. })
    ));
}

#[test]
fn the_public_part_alone_proves_nothing() {
    let key = SigningKey::generate().unwrap();
    let text = token(&key);
    let public = public_part(&text);
    assert!(Presented::make(public, context(GLOBAL)).is_err());
    // A proof made with a guessed key, or altered on the way, is refused.
    let mut forged = Presented::make(&format!("{public}.AAAA"), context(GLOBAL)).unwrap();
    assert!(matches!(
        forged.check(&key, GLOBAL, NOW, &HashSet::new()),
        Err(ProofError::NotHolder(_))
    ));
    let mut good = Presented::make(&text, context(GLOBAL)).unwrap();
    good.context.server_nonce = "t".repeat(32);
    assert!(matches!(
        good.check(&key, GLOBAL, NOW, &HashSet::new()),
        Err(ProofError::NotHolder(_))
    ));
    forged.token = "carmi1.junk".into();
    assert!(matches!(
        forged.check(&key, GLOBAL, NOW, &HashSet::new()),
        Err(ProofError::Token(_))
    ));
}

#[test]
fn the_whole_token_holds_its_key_and_another_does_not() {
    let key = SigningKey::generate().unwrap();
    let text = token(&key);
    let claims = key.public().verify(&text, NOW, &HashSet::new()).unwrap();
    assert!(holds(&key, &text, &claims));
    assert!(!holds(&key, public_part(&text), &claims));
    let other = token(&key);
    let theirs = format!(
        "{}.{}",
        public_part(&text),
        &other[public_part(&other).len() + 1..]
    );
    assert!(!holds(&key, &theirs, &claims));
}

#[test]
fn a_forwarded_proof_is_taken_once_and_only_while_fresh() {
    let mut seen = SeenProofs::default();
    let ctx = context(&local("m1"));
    assert!(seen.take("t1", &ctx, NOW + 10).is_ok());
    assert!(matches!(
        seen.take("t1", &ctx, NOW + 11),
        Err(ProofError::Stale(_))
    ));
    // Another token, or another connection of the same token, is another proof.
    assert!(seen.take("t2", &ctx, NOW + 11).is_ok());
    let mut later = ctx.clone();
    later.client_nonce = "d".repeat(32);
    assert!(seen.take("t1", &later, NOW + 12).is_ok());
    assert!(seen.take("t3", &ctx, NOW + FORWARD_WINDOW_S + 1).is_err());
    assert!(seen.take("t3", &ctx, NOW - FORWARD_WINDOW_S - 1).is_err());
    // Forgotten once it could not be taken anyway.
    seen.take("t4", &later, NOW + 3 * FORWARD_WINDOW_S)
        .unwrap_err();
    assert!(seen.seen.len() <= 3);
}
