//! The global RM cut off from every machine at once (its own link down):
//! no machine is declared lost for a silence that is the router's own, and
//! when one is heard again the others get as long again to be heard.

use super::*;

fn heartbeat(s: &mut Sim, link: LinkId) {
    s.msg(
        link,
        ToGlobal::Heartbeat {
            update: String::new(),
        },
    );
}

/// Ticks every 250 ms for `ms`, as the driver does at the next deadline.
fn tick_for(s: &mut Sim, ms: u64) {
    for _ in 0..ms / 250 {
        s.sleep(250);
        s.step(|r, now| r.on_tick(now));
    }
}

#[test]
fn every_machine_silent_at_once_loses_none_and_the_others_get_as_long_again() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 1);
    // Heard at different moments, as heartbeats are.
    s.sleep(700);
    s.machine(M2, "m2", 10, 1);
    s.quiet();
    // Ten seconds of silence from all three (the default loss window is 3 s).
    tick_for(&mut s, 10_000);
    s.quiet();
    // The deadlines are checked again every period: no busy loop.
    assert!(s.r.next_deadline().is_some_and(|d| d > s.now));
    // m1 is heard again: m2 and the submit machine have about as long
    // again as the cut lasted (their TCP retransmissions backed off).
    for _ in 0..32 {
        heartbeat(&mut s, M1);
        tick_for(&mut s, 250);
    }
    s.quiet();
    heartbeat(&mut s, M2);
    // The submit machine never speaks again: lost once its grace is over,
    // and m2 and m1 only if they fall silent too.
    for _ in 0..40 {
        s.sleep(250);
        heartbeat(&mut s, M1);
        heartbeat(&mut s, M2);
        s.step(|r, now| r.on_tick(now));
    }
    let reason = s.expect_closed(SUB);
    assert!(reason.contains("submit"), "{reason}");
    s.quiet();
}

#[test]
fn two_machines_silent_at_once_are_lost_as_usual() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 1);
    s.quiet();
    tick_for(&mut s, 4_000);
    let closed: Vec<LinkId> = std::iter::from_fn(|| match s.out.pop_front() {
        Some(Output::Close { link, .. }) => Some(Some(link)),
        Some(_) => Some(None),
        None => None,
    })
    .flatten()
    .collect();
    assert_eq!(closed.len(), 2, "both lost: {closed:?}");
}

/// Closed links among the outputs so far (the rest dropped).
fn closed(s: &mut Sim) -> Vec<LinkId> {
    s.out
        .drain(..)
        .filter_map(|o| match o {
            Output::Close { link, .. } => Some(link),
            _ => None,
        })
        .collect()
}

#[test]
fn past_the_cut_off_limit_every_silent_machine_is_lost() {
    let mut s = Sim::new();
    s.r = Router::new(RouterConfig {
        cut_off_limit: Duration::from_secs(5),
        ..RouterConfig::default()
    });
    s.machine(SUB, "submit", 1, 0);
    s.machine(M1, "m1", 10, 1);
    s.machine(M2, "m2", 10, 1);
    s.quiet();
    // Silent since 0 (the loss window is 3 s): a cut until 5 s.
    tick_for(&mut s, 4_750);
    s.quiet();
    tick_for(&mut s, 500);
    assert_eq!(closed(&mut s).len(), 3);
}

#[test]
fn with_no_cut_off_limit_every_silent_machine_is_lost_as_usual() {
    let mut s = Sim::new();
    s.r = Router::new(RouterConfig {
        cut_off_limit: Duration::ZERO,
        ..RouterConfig::default()
    });
    s.machine(SUB, "submit", 1, 0);
    s.machine(M1, "m1", 10, 1);
    s.machine(M2, "m2", 10, 1);
    s.quiet();
    tick_for(&mut s, 3_000);
    assert_eq!(closed(&mut s).len(), 3);
}

#[test]
fn a_relay_s_folded_heartbeats_keep_its_machines_and_only_them() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 1);
    s.machine(M2, "m2", 10, 1);
    // A link never opened, and one opened but never registered, are named
    // too: a relay's fold may overtake a machine's own messages.
    let fresh = LinkId(77);
    let role = Role::Local { name: "m3".into() };
    s.step(|r, now| r.on_link_opened(fresh, role, now));
    s.quiet();
    // Only m1 and the submit machine are in the folds; m2 falls silent.
    for _ in 0..20 {
        s.sleep(250);
        s.step(|r, now| r.on_alive(&[SUB, M1, fresh, LinkId(999)], now));
        s.step(|r, now| r.on_tick(now));
    }
    assert_eq!(closed(&mut s), vec![M2], "m2 alone is lost");
    assert!(s.r.next_deadline().is_some_and(|d| d > s.now));
}
