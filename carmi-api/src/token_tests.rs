use super::*;

const NOW: u64 = 1_800_000_000;

fn grant(power: Power, machine: Option<&str>) -> Grant {
    Grant {
        identity: "alice".into(),
        power,
        machine: machine.map(Into::into),
        lifetime_s: 3600,
    }
}

fn none() -> HashSet<String> {
    HashSet::new()
}

#[test]
fn a_good_token_verifies_and_names_its_identity() {
    let key = SigningKey::generate().unwrap();
    let (text, claims) = key.issue(&grant(Power::Submit, None), NOW).unwrap();
    let got = key.public().verify(&text, NOW + 10, &none()).unwrap();
    assert_eq!(got, claims);
    assert_eq!(got.identity().name, "alice");
    assert_eq!(got.identity().power, Power::Submit);
    assert_eq!(got.expires_unix, NOW + 3600);
    // Keys survive their text form.
    let again = SigningKey::from_text(&key.to_text()).unwrap();
    assert_eq!(again.public(), key.public());
    let public = PublicKey::from_text(&key.public().to_text()).unwrap();
    assert!(public.verify(&text, NOW, &none()).is_ok());
}

#[test]
fn an_altered_token_is_refused() {
    let key = SigningKey::generate().unwrap();
    let (text, mut claims) = key.issue(&grant(Power::Read, None), NOW).unwrap();
    // Widen the power and put the original signature back.
    claims.power = Power::Admin;
    let sig = public_part(&text).rsplit_once('.').unwrap().1;
    let json = serde_json::to_vec(&claims).unwrap();
    let altered = format!("{PREFIX}{}.{sig}", URL_SAFE_NO_PAD.encode(json));
    assert_eq!(
        key.public().verify(&altered, NOW, &none()),
        Err(TokenError::BadSignature)
    );
    // One character of the signature changed.
    let mut flipped = public_part(&text).to_string().into_bytes();
    let last = flipped.len() - 2;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    assert!(key.public().verify(&flipped, NOW, &none()).is_err());
}

#[test]
fn a_forged_token_is_refused() {
    let key = SigningKey::generate().unwrap();
    let (text, _) = key.issue(&grant(Power::Read, None), NOW).unwrap();
    // Claims of this pool signed with a key of the forger's own making.
    let forger = SigningKey::generate().unwrap();
    let claims = text.split('.').nth(1).unwrap();
    let signed = format!("{PREFIX}{claims}");
    let sig = forger.pair.sign(signed.as_bytes());
    let forged = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()));
    assert_eq!(
        key.public().verify(&forged, NOW, &none()),
        Err(TokenError::BadSignature)
    );
    for junk in ["", "carmi1.", "carmi1.e30", "bearer xyz", "carmi1.!!!.???"] {
        assert!(
            matches!(
                key.public().verify(junk, NOW, &none()),
                Err(TokenError::Malformed(_))
            ),
            "{junk:?}"
        );
    }
}

#[test]
fn another_pools_token_is_refused_as_such() {
    let ours = SigningKey::generate().unwrap();
    let theirs = SigningKey::generate().unwrap();
    let (text, _) = theirs.issue(&grant(Power::Admin, None), NOW).unwrap();
    let e = ours.public().verify(&text, NOW, &none()).unwrap_err();
    assert!(matches!(e, TokenError::OtherPool { .. }), "{e}");
    assert!(e.to_string().contains(&theirs.public().pool_id()), "{e}");
}

#[test]
fn an_expired_token_is_refused_from_its_expiry_on() {
    let key = SigningKey::generate().unwrap();
    let (text, _) = key.issue(&grant(Power::Read, None), NOW).unwrap();
    assert!(key.public().verify(&text, NOW + 3599, &none()).is_ok());
    let e = key
        .public()
        .verify(&text, NOW + 3600 + 5, &none())
        .unwrap_err();
    assert!(matches!(e, TokenError::Expired { ago: 5, .. }), "{e}");
    assert!(e.to_string().contains("`alice` expired 5 s ago"), "{e}");
}

#[test]
fn a_revoked_token_is_refused() {
    let key = SigningKey::generate().unwrap();
    let (text, claims) = key.issue(&grant(Power::Submit, None), NOW).unwrap();
    let (other, _) = key.issue(&grant(Power::Submit, None), NOW).unwrap();
    let revoked: HashSet<String> = [claims.id.clone()].into();
    let e = key.public().verify(&text, NOW, &revoked).unwrap_err();
    assert_eq!(
        e,
        TokenError::Revoked {
            id: claims.id,
            identity: "alice".into()
        }
    );
    assert!(
        key.public().verify(&other, NOW, &revoked).is_ok(),
        "ids are unique"
    );
}

#[test]
fn grants_that_make_no_sense_are_refused() {
    let key = SigningKey::generate().unwrap();
    assert!(key.issue(&grant(Power::Daemon, None), NOW).is_err());
    assert!(key.issue(&grant(Power::Daemon, Some("m1")), NOW).is_ok());
    let mut g = grant(Power::Read, None);
    g.identity = "two words".into();
    assert!(key.issue(&g, NOW).is_err());
    g.identity = "bob".into();
    g.lifetime_s = 0;
    assert!(key.issue(&g, NOW).is_err());
}

#[test]
fn a_token_near_or_past_its_expiry_is_warned_about_with_the_fix() {
    let key = SigningKey::generate().unwrap();
    let grant = Grant {
        identity: "alice".into(),
        power: Power::Submit,
        machine: None,
        lifetime_s: 10 * 24 * 3600,
    };
    let (text, _) = key.issue(&grant, 1_000).unwrap();
    let claims = claims_unchecked(&text).expect("its own claims");
    assert_eq!(claims.identity, "alice");
    let file = Path::new("/home/alice/t");
    assert_eq!(expiry_warning(&claims, file, 1_000), None, "ten days left");
    let soon = expiry_warning(&claims, file, 1_000 + 8 * 24 * 3600).expect("two days left");
    assert!(
        soon.contains("expires in 2 day(s)") && soon.contains("--authz submit"),
        "{soon}"
    );
    let late = expiry_warning(&claims, file, 1_000 + 11 * 24 * 3600).expect("expired");
    assert!(
        late.contains("expired 1 day(s) ago") && late.contains("/home/alice/t"),
        "{late}"
    );
    assert!(claims_unchecked("not a token").is_none());
    // A token made for a day is warned about only in its last quarter.
    let day = Grant {
        lifetime_s: 24 * 3600,
        ..grant
    };
    let (text, _) = key.issue(&day, 1_000).unwrap();
    let claims = claims_unchecked(&text).unwrap();
    assert_eq!(expiry_warning(&claims, file, 1_000 + 17 * 3600), None);
    assert!(expiry_warning(&claims, file, 1_000 + 19 * 3600).is_some());
}
