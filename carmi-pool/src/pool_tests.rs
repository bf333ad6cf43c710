//! Tests of the embedded pool's host ads and local RM configuration.

use super::*;

#[test]
fn host_ads_are_varied_and_follow_the_seed() {
    let a = host_ads(16, 7);
    assert_eq!(a, host_ads(16, 7));
    assert_ne!(a, host_ads(16, 8));
    assert!(a.iter().all(|h| (0.5..=2.0).contains(&h.0)), "{a:?}");
    let slow = a.iter().filter(|h| h.0 < 1.0).count();
    assert!(slow > 0 && slow < 16, "{a:?}");
    assert!(a.iter().any(|h| h.3 != a[0].3), "{a:?}");
}

#[test]
fn the_local_config_is_accepted_by_carmi_local() {
    let text = local_config(
        "host01",
        2,
        Path::new("/tmp/x"),
        Duration::from_millis(700),
        &[("Speed", toml::Value::Float(1.5))],
        1.0,
    );
    let f = carmi_local::config::parse_config(&text).unwrap();
    assert_eq!(f.slots, Some(2));
    assert_eq!(f.kill_grace_ms, Some(700));
    assert!(f.attributes.contains_key("Speed"));
}
