//! The loss rate the run measures from its own host stays.

use std::time::Duration;

use carmi_proto::ids::HostId;

use crate::sched::{ArrivalOrder, Sched, SchedConfig};

const MIN: Duration = Duration::from_secs(60);

fn core(hosts: u64) -> Sched {
    let cfg = SchedConfig {
        grant_cost: Duration::from_secs(300),
        reacquire: Duration::from_secs(60),
        ..SchedConfig::default()
    };
    let mut s = Sched::new(cfg, Box::new(ArrivalOrder));
    s.set_class("c", hosts as u32, Duration::ZERO);
    for h in 0..hosts {
        s.host_added(HostId(h), "c", Some(1.0), Duration::ZERO);
    }
    s
}

#[test]
fn nothing_held_means_no_rate_and_a_host_costs_itself() {
    let s = Sched::new(SchedConfig::default(), Box::new(ArrivalOrder));
    assert_eq!(s.loss_rate(MIN, MIN), None);
    assert_eq!(s.host_cost(MIN, MIN), 1.0);
}

#[test]
fn losses_over_the_host_time_held_in_the_window() {
    let mut s = core(2);
    // Host 0 is taken after 30 minutes; host 1 is still held at 60.
    s.host_lost(HostId(0), 30 * MIN);
    let now = 60 * MIN;
    // One loss over 90 host-minutes.
    let rate = s.loss_rate(now, 60 * MIN).unwrap();
    assert!((rate - 1.0 / (90.0 * 60.0)).abs() < 1e-12, "{rate}");
    // Each loss costs the grant (300 s) and the wait (60 s).
    let cost = s.host_cost(now, 60 * MIN);
    assert!((cost - (1.0 + 360.0 / 5400.0)).abs() < 1e-12, "{cost}");
    // A window that ends before the loss sees none of it.
    assert_eq!(s.loss_rate(20 * MIN, 20 * MIN), Some(0.0));
}

#[test]
fn a_loss_older_than_the_window_is_forgotten() {
    let mut s = core(2);
    s.host_lost(HostId(0), 10 * MIN);
    let now = 120 * MIN;
    assert_eq!(s.loss_rate(now, 60 * MIN), Some(0.0));
}

#[test]
fn a_host_given_back_is_not_a_loss() {
    let mut s = core(2);
    s.set_class("c", 1, 10 * MIN);
    assert_eq!(s.loss_rate(20 * MIN, 20 * MIN), Some(0.0));
}
