//! Usage accounting driven by `now`.

use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn held(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|&(u, h)| (u.to_string(), h)).collect()
}

#[test]
fn usage_accumulates_host_seconds_while_hosts_are_held() {
    let mut u = Usage::default();
    let ten_a = held(&[("alice", 10), ("bob", 1)]);
    for s in 1..=60 {
        u.advance(Duration::from_secs(s), &ten_a);
    }
    // 10 hosts for a minute is 600 host-seconds (decay over a minute of a
    // day's half-life is 0.05 %).
    assert!((u.user("alice").host_seconds - 600.0).abs() < 1.0);
    assert!((u.user("bob").host_seconds - 60.0).abs() < 0.1);
    assert!(u.priority("alice") > u.priority("bob"));
    assert_eq!(
        u.priority("carol"),
        1.0,
        "a user never seen has the best priority"
    );
}

#[test]
fn usage_halves_every_half_life_when_nothing_is_held() {
    let mut u = Usage::new(HOUR);
    u.restore("alice", 7200.0);
    assert_eq!(u.priority("alice"), 3.0);
    u.advance(HOUR, &BTreeMap::new());
    assert!((u.user("alice").host_seconds - 3600.0).abs() < 1e-6);
    u.advance(3 * HOUR, &BTreeMap::new());
    assert!((u.user("alice").host_seconds - 900.0).abs() < 1e-6);
    // Sampled finely or coarsely, the same decay.
    let mut fine = Usage::new(HOUR);
    fine.restore("alice", 7200.0);
    for m in 1..=180 {
        fine.advance(Duration::from_secs(60 * m), &BTreeMap::new());
    }
    assert!((fine.user("alice").host_seconds - 900.0).abs() < 1e-6);
}

#[test]
fn a_steady_holding_converges_to_hosts_times_half_life_over_ln2() {
    let mut u = Usage::new(HOUR);
    u.advance(100 * HOUR, &held(&[("alice", 4)]));
    let limit = 4.0 * 3600.0 / std::f64::consts::LN_2;
    assert!((u.user("alice").host_seconds - limit).abs() < 1e-3);
}

#[test]
fn time_going_back_changes_nothing_and_idle_users_are_forgotten() {
    let mut u = Usage::new(HOUR);
    u.advance(HOUR, &held(&[("alice", 1)]));
    let before = u.user("alice");
    u.advance(Duration::from_secs(10), &held(&[("alice", 100)]));
    assert_eq!(u.user("alice"), before);
    u.advance(1000 * HOUR, &BTreeMap::new());
    assert_eq!(u.users().count(), 0, "a user decayed to nothing is dropped");
}

#[test]
fn the_factor_scales_the_priority_and_bad_values_are_refused() {
    let mut u = Usage::default();
    u.set_factor("alice", 10.0);
    assert_eq!(u.priority("alice"), 10.0);
    u.set_factor("alice", f64::NAN);
    assert_eq!(u.priority("alice"), 1.0);
    u.restore("bob", -5.0);
    u.restore("bob", f64::INFINITY);
    assert_eq!(u.user("bob").host_seconds, 0.0);
}
