//! `Policies::grow_first_cycle`: the first cycle starts on one host and
//! grows as its steps become known.

use super::*;

fn growing() -> Policies {
    Policies {
        fewest_hosts: Some(0.0),
        hysteresis: 0,
        grow_first_cycle: true,
        ..Policies::default()
    }
}

/// Submits the first cycle's steps (ids 0, 1, ...) with estimates for
/// those given, and ticks; the count the class wants after it.
fn first_cycle(b: &mut Bench, m: MasterId, known: &[f64], steps: u64) -> u32 {
    let saved: Vec<SavedEstimate> = known
        .iter()
        .enumerate()
        .map(|(i, w)| SavedEstimate {
            step: StepId(i as u64),
            mean: *w,
            samples: 1,
        })
        .collect();
    b.send(
        m,
        FromMaster::RestoreHistory,
        &serde_json::to_string(&saved).unwrap(),
    );
    b.send(m, FromMaster::BeginCycle { cycle: CycleId(0) }, "");
    for i in 0..steps {
        b.send(m, FromMaster::Step { step: StepId(i) }, "");
    }
    b.drain();
    b.run.sched().status().wanted
}

#[test]
fn the_first_cycle_starts_on_one_host_and_grows_to_what_its_known_steps_need() {
    let mut b = Bench::new();
    let m = b.master(init(&[("a", 5)], 3, growing()), "");
    b.drain();
    assert_eq!(b.run.sched().status().wanted, 1, "nothing known: one host");
    // Three of five steps known: 10 + 5 + 5 end in 10 s on two hosts.
    assert_eq!(first_cycle(&mut b, m, &[10.0, 5.0, 5.0], 5), 2);
}

#[test]
fn a_restored_history_plans_the_first_cycle_and_the_count_stays_within_what_was_asked() {
    let mut b = Bench::new();
    let m = b.master(init(&[("a", 3)], 3, growing()), "");
    b.drain();
    // Five steps of 10 s would want five hosts: three were asked for.
    assert_eq!(first_cycle(&mut b, m, &[10.0; 5], 5), 3);
}

#[test]
fn without_growing_the_first_cycle_asks_for_everything() {
    let mut b = Bench::new();
    let policies = Policies {
        grow_first_cycle: false,
        ..growing()
    };
    let m = b.master(init(&[("a", 5)], 3, policies), "");
    b.drain();
    assert_eq!(first_cycle(&mut b, m, &[10.0, 5.0, 5.0], 5), 5);
}

#[test]
fn a_second_master_stops_the_growth_and_every_class_wants_what_was_asked() {
    let mut b = Bench::new();
    let _a = b.master(init(&[("a", 4)], 3, growing()), "A");
    b.drain();
    assert_eq!(b.run.sched().status().wanted, 1);
    let _b = b.master(init(&[("a", 2)], 3, growing()), "B");
    b.drain();
    assert_eq!(b.run.sched().status().wanted, 6);
}
