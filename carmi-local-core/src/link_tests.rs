//! The link's decisions in virtual time: reconnection delays, and the
//! outbox's order, stall and kick.

use super::*;

#[test]
fn reconnection_backs_off_doubling_to_the_cap_with_jitter_and_starts_over_after_a_registration() {
    let mut r = Reconnect::default();
    assert_eq!(r.next_deadline(), None, "connecting at start");
    let (min, max) = (BACKOFF_MIN.as_secs_f64(), BACKOFF_MAX.as_secs_f64());
    let mut now = 0.0;
    let mut step = min;
    for i in 0..12 {
        // Jitter 0 is half the step, 1 all of it.
        let jitter = f64::from(i % 3) / 2.0;
        let delay = r.on_lost(now, false, jitter);
        assert!(
            (delay - step * (0.5 + 0.5 * jitter)).abs() < 1e-12,
            "{delay} for {step}"
        );
        assert_eq!(r.next_deadline(), Some(now + delay));
        assert_eq!(r.on_time(now + delay - 1e-6), None, "not before the delay");
        assert_eq!(r.on_time(now + delay), Some(LinkOutput::Reconnect));
        assert_eq!(r.on_time(now + delay + 1.0), None, "once");
        r.on_connected();
        now += delay;
        step = (step * 2.0).min(max);
    }
    assert_eq!(step, max);
    // A session that registered: the next delay is the first step's.
    assert!(r.on_lost(now, true, 1.0) <= min);
    assert!(r.on_lost(now, false, 1.0) <= 2.0 * min);
}

#[test]
fn a_full_queue_waits_in_order_and_a_stall_kicks_the_session_losing_nothing() {
    let mut o = Outbox::new(Duration::from_secs(30));
    assert_eq!(o.send(0), Route::NoLink(0), "no session yet");
    o.on_up();
    // Two fit in the session's queue; the third finds it full at 10.
    assert_eq!(o.send(1), Route::Queue(1));
    assert_eq!(o.send(2), Route::Queue(2));
    assert_eq!(o.send(3), Route::Queue(3));
    o.on_full(3, 10.0);
    assert_eq!(o.send(4), Route::Kept, "behind the one waiting");
    assert_eq!(o.next_deadline(), Some(40.0));
    assert!(o.wants_room());
    // The session writes one at 20: the oldest waiting goes in, the clock restarts.
    assert_eq!(o.on_room(20.0), Some(3));
    assert_eq!(o.next_deadline(), Some(50.0));
    assert_eq!(o.on_time(49.9), None);
    // No more progress: the session is kicked, once.
    assert_eq!(o.on_time(50.0), Some(LinkOutput::Kick));
    assert!(!o.is_up() && !o.wants_room());
    assert_eq!(o.on_time(90.0), None);
    assert_eq!(o.send(5), Route::Kept, "kept after the kick");
    // The session hands back what it did not write (1 was written).
    assert_eq!(o.on_down(vec![2, 3]), vec![2, 3, 4, 5]);
    assert_eq!(o.next_deadline(), None);
    o.on_up();
    assert_eq!(o.send(6), Route::Queue(6), "a new session takes them again");
}

#[test]
fn a_queue_found_closed_keeps_what_follows_until_the_session_is_down() {
    let mut o = Outbox::new(Duration::from_secs(30));
    o.on_up();
    assert_eq!(o.send(1), Route::Queue(1));
    o.on_closed(1);
    assert!(!o.is_up());
    assert_eq!(o.send(2), Route::Kept);
    assert_eq!(o.on_down(vec![0]), vec![0, 1, 2]);
    assert_eq!(o.send(3), Route::NoLink(3), "down and not up again");
}

#[test]
fn room_after_the_last_waiting_message_stops_the_stall_clock() {
    let mut o = Outbox::new(Duration::from_secs(5));
    o.on_up();
    o.on_full("a", 1.0);
    assert_eq!(o.on_room(2.0), Some("a"));
    assert_eq!(o.next_deadline(), None);
    assert!(!o.wants_room());
    assert_eq!(o.on_time(100.0), None);
    assert!(o.is_up());
}
