//! The token book's compaction, with a clock the test sets.

use super::*;
use carmi_api::authz::Power;

/// `token` as its holder shows it to the global RM on a connection of `role`.
fn shown(token: &str, role: &Role) -> Presented {
    let context = carmi_api::proof::ProofContext {
        audience: GLOBAL.into(),
        role: role.clone(),
        client_nonce: "c".repeat(32),
        server_nonce: "s".repeat(32),
        binding: String::new(),
        time_unix: now_unix(),
    };
    Presented::make(token, context).unwrap()
}

fn info(id: &str, expires_unix: u64) -> TokenInfo {
    TokenInfo {
        id: id.into(),
        identity: "alice".into(),
        power: Power::Submit,
        machine: None,
        issued_unix: 0,
        expires_unix,
        revoked: false,
    }
}

#[test]
fn revocations_of_tokens_long_expired_are_dropped_and_the_others_kept() {
    let mut book = Book {
        issued: vec![info("old", 1_000), info("live", 1_000_000)],
        revoked: ["old", "live", "made-elsewhere"]
            .into_iter()
            .map(String::from)
            .collect(),
    };
    // Expired, but within the margin for a clock set back: kept.
    assert_eq!(book.compact(1_000 + EXPIRED_KEPT_S), 0);
    assert_eq!(book.revoked.len(), 3);
    // Past the margin: the expired token and its revocation go.
    assert_eq!(book.compact(1_001 + EXPIRED_KEPT_S), 2);
    assert_eq!(
        book.issued.iter().map(|t| &t.id[..]).collect::<Vec<_>>(),
        ["live"]
    );
    let mut left: Vec<&str> = book.revoked.iter().map(|s| &s[..]).collect();
    left.sort();
    assert_eq!(left, ["live", "made-elsewhere"]);
}

#[test]
fn a_book_reopened_after_its_tokens_expired_is_smaller_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::generate().unwrap();
    let key_file = dir.path().join("pool.key");
    carmi_api::files::write_private(&key_file, &key.to_text(), false).unwrap();
    let book = Book {
        issued: vec![info("old", 5), info("live", u64::MAX / 2)],
        revoked: ["old".to_string(), "live".to_string()]
            .into_iter()
            .collect(),
    };
    let path = dir.path().join("tokens.json");
    std::fs::write(&path, serde_json::to_vec(&book).unwrap()).unwrap();
    let authority = Authority::open(&key_file, dir.path()).unwrap();
    assert_eq!(authority.book().revoked.len(), 1);
    let saved: Book = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved.issued.len(), 1);
    assert!(saved.revoked.contains("live") && !saved.revoked.contains("old"));
}

/// A renewed daemon token: the same identity, machine, power and lifetime,
/// a new id, listed in the book; the one it replaced, retired, is refused to
/// new connections and ends the link that stood on it, but spares a staging
/// connection's copy until an admin revokes it.
#[tokio::test]
async fn a_renewal_makes_a_listed_token_and_its_retired_predecessor_spares_staging() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::generate().unwrap();
    let grant = Grant {
        identity: "m1".into(),
        power: Power::Daemon,
        machine: Some("m1".into()),
        lifetime_s: 600,
    };
    let (old_token, _) = key.issue(&grant, now_unix()).unwrap();
    let authority = Authority::with_key(key, dir.path());
    let role = Role::Local { name: "m1".into() };
    let old = authority
        .admit(&role, Some(&shown(&old_token, &role)))
        .unwrap();
    let (new_token, new) = authority.renew(&old, now_unix()).unwrap();
    assert_ne!(new.identity.token, old.identity.token);
    assert_eq!(
        (
            &new.identity.name,
            new.identity.power,
            &new.identity.machine
        ),
        (
            &old.identity.name,
            old.identity.power,
            &old.identity.machine
        )
    );
    assert_eq!(new.life().lifetime_s(), 600);
    assert_eq!(
        authority
            .admit(&role, Some(&shown(&new_token, &role)))
            .unwrap()
            .identity,
        new.identity
    );
    assert!(
        authority
            .book()
            .issued
            .iter()
            .any(|t| t.id == new.identity.token)
    );

    authority.retire(vec![old.identity.token.clone()]);
    let e = authority
        .admit(&role, Some(&shown(&old_token, &role)))
        .unwrap_err();
    assert!(e.contains("was revoked"), "{e}");
    assert!(
        authority
            .until_invalid(&old, false)
            .await
            .contains("was revoked")
    );
    let quick = std::time::Duration::from_millis(100);
    let spared = tokio::time::timeout(quick, authority.until_invalid(&old, true)).await;
    assert!(
        spared.is_err(),
        "a staging copy on the retired token goes on"
    );
    assert!(
        authority.renew(&old, now_unix()).is_err(),
        "nor is it renewed again"
    );

    let admin = carmi_api::authz::Identity {
        name: "root".into(),
        power: Power::Admin,
        machine: None,
        token: String::new(),
    };
    let id = old.identity.token.clone();
    authority.handle(Some(&admin), TokenRequest::Revoke { id });
    let reason = tokio::time::timeout(quick, authority.until_invalid(&old, true)).await;
    assert!(reason.unwrap().contains("was revoked"));
}
