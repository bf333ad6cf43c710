//! The simulated pool drives each machine's local RM core through the same
//! functions as `carmi-local`'s daemon: `Core::on_time` before every input
//! and at `Core::next_deadline` (which brings `Effect::Heartbeat`), and
//! `Core::policy_due` then `Core::step_policy` for the owner policy. These
//! tests fail if the simulator grows a timer or a policy step of its own.

use super::*;

/// Runs the pool's own events until `until`, returning each heartbeat that
/// reached the global RM: its arrival time and the machine's link.
fn run(pool: &mut Pool, q: &mut Queue, until: f64) -> Vec<(f64, LinkId)> {
    let mut beats = Vec::new();
    while q.peek_at().is_some_and(|t| t <= until) {
        let ev = q.pop().expect("peeked");
        if let Ev::ToRouter { link, frame: f } = &ev
            && let ToGlobal::Heartbeat { .. } = unframe::<ToGlobal>(f)
        {
            beats.push((q.now, *link));
        }
        assert!(pool.handle(&ev, q, &mut Vec::new()), "{ev:?}");
    }
    beats
}

#[test]
fn heartbeats_come_from_the_cores_deadlines_a_period_after_registration() {
    let cfg = PoolConfig {
        check: true,
        ..PoolConfig::default()
    };
    let (latency, period) = (cfg.latency, cfg.heartbeat);
    let mut q = Queue::default();
    let mut pool = Pool::new(cfg, &[1.0]);
    pool.start(&mut q);
    let beats = run(&mut pool, &mut q, 100.0);
    // Advertise, then Registered, each one link away: the core's period
    // starts at Registered, and each heartbeat takes one link to arrive.
    let registered = 2.0 * latency;
    let host = pool.machines[1].link;
    let times: Vec<f64> = beats
        .iter()
        .filter(|(_, l)| *l == host)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(times.len(), 3, "{times:?}");
    for (k, t) in times.iter().enumerate() {
        let due = registered + (k + 1) as f64 * period + latency;
        assert!((t - due).abs() < 1e-9, "heartbeat {k} at {t}, due {due}");
    }
}

#[test]
fn each_machine_is_armed_at_its_cores_deadline_with_the_policy_stepped() {
    let mut q = Queue::default();
    let mut pool = Pool::new(PoolConfig::default(), &[1.0, 2.0]);
    pool.start(&mut q);
    run(&mut pool, &mut q, 50.0);
    for mach in &pool.machines[1..] {
        // The policy's steps are the core's deadlines: none is overdue.
        assert_eq!(mach.core.policy_due(), None);
        let next = mach.core.next_deadline().expect("a policy step to come");
        assert_eq!(mach.armed.0, Some(next));
        assert!(next > 50.0 && next <= 50.0 + pool.cfg.policy.interval());
    }
}
