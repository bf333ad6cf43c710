//! The owner policy over virtual time.

use super::*;
use Activity as A;
use MachineState as S;
use PolicyEffect as E;

/// A policy, a virtual clock and a simulated owner.
struct Sim {
    policy: Policy,
    now: f64,
    base: ClassAd,
    /// When the owner last touched the keyboard (`None`: present now).
    left_at: Option<f64>,
    load: f64,
}

impl Sim {
    fn new(config: PolicyConfig) -> Sim {
        let mut base = ClassAd::new();
        base.insert_value("Name", Value::str("m1"));
        Sim {
            policy: Policy::new(config, 0.0),
            now: 0.0,
            base,
            left_at: Some(-1e6),
            load: 0.0,
        }
    }

    fn defaults() -> Sim {
        Sim::new(PolicyConfig::default())
    }

    fn with(f: impl FnOnce(&mut PolicyConfig)) -> Sim {
        let mut c = PolicyConfig::default();
        f(&mut c);
        Sim::new(c)
    }

    /// Evaluates now, after telling the policy what the owner does.
    fn step(&mut self) -> Vec<PolicyEffect> {
        let idle = match self.left_at {
            Some(t) => self.now - t,
            None => 0.0,
        };
        self.policy.observe(Observation {
            keyboard_idle: idle,
            load_avg: self.load,
            non_pool_load: self.load,
        });
        let effects = self.policy.step(self.now, &self.base);
        self.sanity_check();
        effects
    }

    /// Steps at every deadline until `secs` have passed; all effects in order.
    fn run_for(&mut self, secs: f64) -> Vec<PolicyEffect> {
        let end = self.now + secs;
        let mut all = Vec::new();
        loop {
            let next = self.policy.next_deadline().max(self.now);
            if next > end {
                self.now = end;
                all.extend(self.step());
                return all;
            }
            self.now = next;
            all.extend(self.step());
        }
    }

    fn arrive(&mut self) -> Vec<PolicyEffect> {
        self.left_at = None;
        self.step()
    }

    fn leave(&mut self) -> Vec<PolicyEffect> {
        self.left_at = Some(self.now);
        self.step()
    }

    fn jobs(&mut self, n: usize) -> Vec<PolicyEffect> {
        self.policy.set_jobs(n);
        self.step()
    }

    fn at(&self) -> (MachineState, Activity) {
        (self.policy.state(), self.policy.activity())
    }

    fn sanity_check(&self) {
        let p = &self.policy;
        if p.may_start() {
            assert!(
                matches!(self.at(), (S::Unclaimed, A::Idle) | (S::Claimed, A::Busy)),
                "may start only when open, not in {:?}",
                self.at()
            );
        }
        assert!(
            p.next_deadline() > self.now,
            "the deadline is in the future"
        );
        if p.state() == S::Owner || p.state() == S::Unclaimed {
            assert_eq!(p.activity(), A::Idle);
        }
    }

    /// A claimed, busy machine with an owner long gone.
    fn busy() -> Sim {
        let mut s = Sim::defaults();
        assert_eq!(s.step(), []);
        assert_eq!(s.jobs(2), []);
        assert_eq!(s.at(), (S::Claimed, A::Busy));
        s
    }
}

const MIN: f64 = 60.0;

#[test]
fn an_idle_owner_lets_jobs_start_at_once() {
    let mut s = Sim::defaults();
    assert_eq!(s.step(), []);
    assert_eq!(s.at(), (S::Unclaimed, A::Idle));
    assert!(s.policy.may_start());
}

#[test]
fn start_waits_for_fifteen_idle_minutes() {
    let mut s = Sim::defaults();
    assert_eq!(s.arrive(), [E::Close]);
    assert_eq!(s.at(), (S::Owner, A::Idle));
    assert!(!s.policy.may_start());
    assert_eq!(s.run_for(10.0 * MIN), []);
    assert_eq!(s.leave(), []);
    assert_eq!(s.run_for(14.9 * MIN), []);
    assert!(!s.policy.may_start());
    assert_eq!(s.run_for(0.2 * MIN), [E::Open]);
    assert_eq!(s.at(), (S::Unclaimed, A::Idle));
    assert!(s.policy.may_start());
}

#[test]
fn a_high_non_pool_load_keeps_the_machine_closed() {
    let mut s = Sim::defaults();
    s.load = 1.0;
    assert_eq!(s.step(), [E::Close]);
    assert_eq!(s.run_for(20.0 * MIN), []);
    s.load = 0.1;
    assert_eq!(s.run_for(1.0), [E::Open]);
}

#[test]
fn processes_claim_the_machine_and_their_end_frees_it() {
    let mut s = Sim::busy();
    assert!(s.policy.may_start(), "more processes may join while busy");
    assert_eq!(s.jobs(0), []);
    assert_eq!(s.at(), (S::Unclaimed, A::Idle));
}

#[test]
fn the_owner_suspends_and_a_short_visit_resumes_after_five_minutes() {
    let mut s = Sim::busy();
    assert_eq!(s.arrive(), [E::Suspend]);
    assert_eq!(s.at(), (S::Claimed, A::Suspended));
    assert!(!s.policy.may_start());
    assert_eq!(s.run_for(3.0 * MIN), []);
    assert_eq!(s.leave(), []);
    assert_eq!(s.run_for(4.9 * MIN), []);
    assert_eq!(s.run_for(0.2 * MIN), [E::Resume]);
    assert_eq!(s.at(), (S::Claimed, A::Busy));
}

#[test]
fn an_owner_who_stays_causes_vacate_then_kill_then_owner_state() {
    let mut s = Sim::busy();
    assert_eq!(s.arrive(), [E::Suspend]);
    assert_eq!(s.run_for(9.9 * MIN), []);
    assert_eq!(s.run_for(0.2 * MIN), [E::Vacate]);
    assert_eq!(s.at(), (S::Preempting, A::Vacating));
    assert!(!s.policy.may_start());
    // The default grace is 10 s at a 60 s minute.
    assert_eq!(s.run_for(4.0), []);
    assert_eq!(s.run_for(10.0), [E::Kill]);
    assert_eq!(s.at(), (S::Preempting, A::Killing));
    assert_eq!(s.run_for(MIN), [], "SIGKILL is sent once");
    assert_eq!(s.jobs(0), []);
    assert_eq!(s.at(), (S::Owner, A::Idle));
    // Back to the pool only once START holds again.
    assert_eq!(s.leave(), []);
    assert_eq!(s.run_for(14.0 * MIN), []);
    assert_eq!(s.run_for(2.0 * MIN), [E::Open]);
}

#[test]
fn processes_that_leave_during_the_grace_period_are_not_killed() {
    let mut s = Sim::busy();
    s.arrive();
    assert_eq!(s.run_for(10.1 * MIN), [E::Vacate]);
    assert_eq!(s.jobs(0), []);
    assert_eq!(s.at(), (S::Owner, A::Idle));
    assert_eq!(s.run_for(MIN), []);
}

#[test]
fn vacate_of_an_owner_gone_meanwhile_reopens_at_once() {
    let mut s = Sim::with(|c| c.continue_ = parse_expr("false").unwrap());
    s.step();
    s.jobs(1);
    s.arrive();
    s.leave();
    // CONTINUE never holds, so PREEMPT does after ten minutes; by then the
    // owner has been away long enough for START as well.
    s.left_at = Some(-20.0 * MIN);
    assert_eq!(s.run_for(10.1 * MIN), [E::Vacate]);
    assert_eq!(
        s.jobs(0),
        [E::Open],
        "Preempting -> Owner -> Unclaimed in one step"
    );
    assert_eq!(s.at(), (S::Unclaimed, A::Idle));
}

#[test]
fn preempt_without_suspend_vacates_a_busy_machine() {
    let mut s = Sim::with(|c| {
        c.suspend = parse_expr("false").unwrap();
        c.preempt = parse_expr("KeyboardIdle < Minute").unwrap();
    });
    s.step();
    s.jobs(1);
    assert_eq!(s.arrive(), [E::Vacate]);
    assert_eq!(s.at(), (S::Preempting, A::Vacating));
}

#[test]
fn undefined_start_is_false_and_counted() {
    let mut s = Sim::with(|c| c.start = parse_expr("NoSuchAttribute > 3").unwrap());
    assert_eq!(s.step(), [E::Close]);
    assert_eq!(s.run_for(30.0 * MIN), []);
    assert_eq!(s.at(), (S::Owner, A::Idle));
    assert_eq!(s.policy.odd_expressions(), 1);
    assert_eq!(s.policy.odd[Which::Start as usize], Some("UNDEFINED"));
}

#[test]
fn error_suspend_never_suspends_and_recovers_when_fixed() {
    let mut s = Sim::with(|c| c.suspend = parse_expr("KeyboardIdle + \"x\" < 1").unwrap());
    s.step();
    s.jobs(1);
    assert_eq!(s.arrive(), []);
    assert_eq!(s.run_for(MIN), []);
    assert_eq!(s.at(), (S::Claimed, A::Busy));
    assert_eq!(s.policy.odd[Which::Suspend as usize], Some("ERROR"));
    // A fixed expression counts as a boolean again.
    s.policy.config.suspend = parse_expr("KeyboardIdle < Minute").unwrap();
    assert_eq!(s.step(), [E::Suspend]);
    assert_eq!(s.policy.odd_expressions(), 0);
}

#[test]
fn a_non_boolean_result_is_false() {
    let mut s = Sim::with(|c| c.start = parse_expr("KeyboardIdle").unwrap());
    assert_eq!(s.step(), [E::Close]);
    assert_eq!(s.policy.odd[Which::Start as usize], Some("real"));
}

#[test]
fn undefined_kill_leaves_processes_in_vacating() {
    let mut s = Sim::with(|c| c.kill = parse_expr("Nope").unwrap());
    s.step();
    s.jobs(1);
    s.arrive();
    assert_eq!(s.run_for(11.0 * MIN), [E::Vacate]);
    assert_eq!(s.run_for(10.0 * MIN), []);
    assert_eq!(s.at(), (S::Preempting, A::Vacating));
}

#[test]
fn a_small_minute_scales_every_default_threshold() {
    let mut s = Sim::with(|c| c.minute = 0.05);
    s.step();
    s.jobs(1);
    assert_eq!(s.arrive(), [E::Suspend]);
    assert_eq!(s.run_for(0.45), []);
    // Grace 10 s * 0.05 / 60, less than one evaluation interval.
    assert_eq!(s.run_for(0.1), [E::Vacate, E::Kill]);
    assert!((s.policy.config().grace_seconds() - 0.05 / 6.0).abs() < 1e-12);
    assert!(s.policy.config().interval() >= 0.01);
}

#[test]
fn the_live_ad_carries_state_and_timers() {
    let mut s = Sim::busy();
    s.now = 30.0;
    s.arrive();
    s.now = 45.0;
    let ad = s.policy.ad(s.now, &s.base);
    assert_eq!(ad.eval_attr("State").as_str(), Some("Claimed"));
    assert_eq!(ad.eval_attr("Activity").as_str(), Some("Suspended"));
    assert_eq!(ad.eval_attr("ActivityTimer").as_f64(), Some(15.0));
    assert_eq!(ad.eval_attr("EnteredCurrentActivity").as_f64(), Some(30.0));
    assert_eq!(ad.eval_attr("KeyboardIdle").as_f64(), Some(0.0));
    assert_eq!(ad.eval_attr("Minute").as_f64(), Some(60.0));
    assert_eq!(ad.eval_attr("Name").as_str(), Some("m1"));
}

#[test]
fn processes_gone_while_suspended_free_the_machine_on_continue() {
    let mut s = Sim::busy();
    assert_eq!(s.arrive(), [E::Suspend]);
    // The job gave its hosts back meanwhile: the slots stay suspended (the
    // owner is there) and no new process may start.
    assert_eq!(s.jobs(0), []);
    assert_eq!(s.at(), (S::Claimed, A::Suspended));
    assert!(!s.policy.may_start());
    s.leave();
    // START needs 15 idle minutes: until then the empty machine is its owner's,
    // and the slots go from Suspended to withdrawn without being offered.
    assert_eq!(s.run_for(5.5 * MIN), [E::Close]);
    assert_eq!(s.at(), (S::Owner, A::Idle));
    assert!(!s.policy.may_start());
    assert_eq!(s.run_for(10.0 * MIN), [E::Open]);
}

#[test]
fn processes_gone_while_suspended_reopen_when_start_holds() {
    let mut s = Sim::with(|c| c.start = parse_expr("KeyboardIdle > Minute").unwrap());
    s.step();
    s.jobs(1);
    assert_eq!(s.arrive(), [E::Suspend]);
    s.jobs(0);
    s.leave();
    assert_eq!(s.run_for(5.5 * MIN), [E::Resume]);
    assert_eq!(s.at(), (S::Unclaimed, A::Idle));
    assert!(s.policy.may_start());
}

#[test]
fn the_advertised_keyboard_idle_moves_once_a_minute() {
    let mut sim = Sim::defaults();
    let idle_at = |sim: &mut Sim, seconds: f64| {
        sim.policy.observe(Observation {
            keyboard_idle: seconds,
            load_avg: 0.0,
            non_pool_load: 0.0,
        });
        sim.policy
            .public_values(0.0)
            .into_iter()
            .find(|(n, _)| *n == "KeyboardIdle")
            .map(|(_, v)| v)
    };
    assert_eq!(idle_at(&mut sim, 59.0), Some(Value::Int(0)));
    assert_eq!(idle_at(&mut sim, 125.5), Some(Value::Int(120)));
    assert_eq!(idle_at(&mut sim, 179.9), Some(Value::Int(120)));
    assert_eq!(idle_at(&mut sim, 180.0), Some(Value::Int(180)));
}
