//! Allocator tests: a harness owns the allocator and a virtual clock, passes
//! every effect through the real wire encoding and back, and checks every
//! invariant after every step.

use std::collections::VecDeque;

use bytes::BytesMut;
use carmi_api::frame::{decode, encode_header};
use carmi_proto::ids::{ConnId, ProcessId, RequestId};
use carmi_proto::msg::{
    ClassDef, Failure, FailureCode, FromGlobal, Reply, SlotActivity, SpawnTarget,
};
use classad::Value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

const J1: JobId = JobId(1);
const J2: JobId = JobId(2);
const J3: JobId = JobId(3);

/// Request `id` of the first process of job `job` (process id = job id here).
pub(super) fn r(job: JobId, id: u64) -> ReqRef {
    ReqRef {
        process: ProcessId(job.0),
        id: RequestId(id),
    }
}

/// Encodes an effect as it crosses the wire (and as a value) and decodes it back.
fn wire_roundtrip(e: &Effect) {
    let json = serde_json::to_string(e).expect("effects serialize");
    let back: Effect = serde_json::from_str(&json).expect("effects deserialize");
    assert_eq!(&back, e, "effect changed through serde");
    if let Some((_, event)) = e.to_event() {
        let msg = FromGlobal::Deliver {
            conn: ConnId(7),
            event,
        };
        let mut buf = BytesMut::from(&encode_header(&msg, 0)[..]);
        let (back, payload): (FromGlobal, _) = decode(&mut buf, 1 << 20)
            .expect("decodes")
            .expect("a whole frame");
        assert_eq!(back, msg, "event changed through the frame codec");
        assert!(payload.is_empty() && buf.is_empty());
    }
}

pub(super) struct Sim {
    pub(super) a: Allocator,
    now: Duration,
    pub(super) log: VecDeque<Effect>,
}

impl Sim {
    pub(super) fn new() -> Sim {
        Sim {
            a: Allocator::new(),
            now: Duration::ZERO,
            log: VecDeque::new(),
        }
    }

    /// Moves virtual time forward.
    pub(super) fn sleep(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
    }

    pub(super) fn step<T>(&mut self, f: impl FnOnce(&mut Allocator) -> T) -> T {
        self.a.advance_to(self.now);
        let out = f(&mut self.a);
        for e in self.a.take_effects() {
            wire_roundtrip(&e);
            self.log.push_back(e);
        }
        self.a.sanity_check();
        out
    }

    pub(super) fn machine(&mut self, name: &str, attrs: &str, slots: u32) -> Vec<HostId> {
        let ad = ClassAd::parse(&format!("[ Name = \"{name}\"; {attrs} ]")).expect("test ad");
        self.step(|a| a.on_machine_registered(name, ad, slots))
    }

    /// A machine with `Mips` and nothing else of note.
    pub(super) fn fast(&mut self, name: &str, mips: u32) -> HostId {
        self.machine(
            name,
            &format!("Arch = \"X86_64\"; Mips = {mips}; KFlops = 10"),
            1,
        )[0]
    }

    pub(super) fn job_with_class(&mut self, job: JobId, class: &str, expr: &str) {
        self.step(|a| a.on_job_created(job, "alice"));
        self.step(|a| a.define_class(job, r(job, 1000), class, expr));
        self.expect_done(r(job, 1000));
    }

    pub(super) fn next(&mut self) -> Effect {
        self.log.pop_front().expect("an effect was expected")
    }

    pub(super) fn expect_done(&mut self, req: ReqRef) -> Reply {
        match self.next() {
            Effect::Done { request, reply, .. } if request == req => reply,
            other => panic!("expected Done for {req:?}, got {other:?}"),
        }
    }

    pub(super) fn expect_failed(&mut self, req: ReqRef, code: FailureCode) -> String {
        match self.next() {
            Effect::Failed {
                request, failure, ..
            } if request == req && failure.code == code => failure.message,
            other => panic!("expected Failed({code:?}) for {req:?}, got {other:?}"),
        }
    }

    pub(super) fn expect_grant(&mut self, req: ReqRef, remaining: u32) -> Vec<HostId> {
        match self.next() {
            Effect::Grant {
                request,
                hosts,
                remaining: rem,
                ..
            } if request == req && rem == remaining => hosts.iter().map(|h| h.host).collect(),
            other => panic!("expected Grant for {req:?} with {remaining} remaining, got {other:?}"),
        }
    }

    /// Takes the jobs started ([`Effect::JobStarted`]) out of the log, in order.
    pub(super) fn take_started(&mut self) -> Vec<JobId> {
        let mut out = Vec::new();
        self.log.retain(|e| match e {
            Effect::JobStarted { job } => {
                out.push(*job);
                false
            }
            _ => true,
        });
        out
    }

    pub(super) fn quiet(&self) {
        assert!(self.log.is_empty(), "unexpected effects: {:?}", self.log);
    }
}

#[test]
fn grants_come_in_groups_fastest_first() {
    let mut s = Sim::new();
    let h: Vec<HostId> = (1..=5).map(|i| s.fast(&format!("m{i}"), i * 100)).collect();
    s.job_with_class(J1, "any", "Mips > 0");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "any", 5, 2));
    assert_eq!(s.expect_grant(r(J1, 1), 3), vec![h[4], h[3]]);
    assert_eq!(s.expect_grant(r(J1, 1), 1), vec![h[2], h[1]]);
    assert_eq!(s.expect_grant(r(J1, 1), 0), vec![h[0]]);
    s.quiet();
    assert_eq!(s.a.pending_requests(), 0);
    assert_eq!(s.a.job_hosts(J1).len(), 5);
}

#[test]
fn grants_carry_names_classes_and_ads() {
    let mut s = Sim::new();
    let hosts = s.machine("big", "Mips = 1; Memory = 64", 2);
    s.job_with_class(J1, "c", "Memory >= 64");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 2, 2));
    match s.next() {
        Effect::Grant { hosts: infos, .. } => {
            assert_eq!(infos[0].host, hosts[0]);
            assert_eq!(infos[0].name, "slot1@big");
            assert_eq!(infos[1].name, "slot2@big");
            assert_eq!(infos[0].class, "c");
            let ad = ClassAd::parse(&infos[0].ad).expect("the ad prints in new syntax");
            assert_eq!(ad.eval_attr("Memory"), Value::Int(64));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn pending_requests_are_served_first_come_first_served() {
    let mut s = Sim::new();
    let h = s.fast("m1", 100);
    for j in [J1, J2, J3] {
        s.job_with_class(j, "any", "true");
    }
    s.step(|a| a.add_hosts(J1, r(J1, 1), "any", 1, 1));
    assert_eq!(s.expect_grant(r(J1, 1), 0), vec![h]);
    s.sleep(10);
    s.step(|a| a.add_hosts(J2, r(J2, 1), "any", 1, 1));
    s.sleep(10);
    s.step(|a| a.add_hosts(J3, r(J3, 1), "any", 1, 1));
    s.quiet();
    s.sleep(10);
    s.step(|a| a.del_hosts(J1, r(J1, 2), &[h]));
    assert_eq!(
        s.next(),
        Effect::Released {
            job: J1,
            host: h,
            cause: ReleaseCause::Deleted
        }
    );
    s.expect_done(r(J1, 2));
    assert_eq!(s.expect_grant(r(J2, 1), 0), vec![h]);
    s.quiet();
    match s.a.host_state(h) {
        Some(SlotState::Claimed(c)) => {
            assert_eq!(c.job, J2);
            assert_eq!(c.since, Duration::from_millis(30));
        }
        other => panic!("{other:?}"),
    }
    s.step(|a| a.del_hosts(J2, r(J2, 2), &[h]));
    s.next(); // Released
    s.expect_done(r(J2, 2));
    assert_eq!(s.expect_grant(r(J3, 1), 0), vec![h]);
}

#[test]
fn partial_groups_stay_hidden_until_complete() {
    let mut s = Sim::new();
    let a = s.fast("a", 300);
    let b = s.fast("b", 200);
    s.job_with_class(J1, "any", "true");
    s.step(|al| al.add_hosts(J1, r(J1, 1), "any", 3, 3));
    s.quiet();
    s.step(|al| al.config(J1, r(J1, 2)));
    assert_eq!(s.expect_done(r(J1, 2)), Reply::Hosts(vec![]));
    // A partial host whose owner returns leaves the group without a word.
    s.step(|al| al.on_slot_state("a", 0, SlotActivity::Suspended));
    s.quiet();
    assert_eq!(s.a.host_state(a), Some(&SlotState::Suspended(None)));
    let c = s.fast("c", 100);
    s.quiet();
    s.step(|al| al.on_slot_state("a", 0, SlotActivity::Available));
    assert_eq!(s.expect_grant(r(J1, 1), 0), vec![b, c, a]);
    s.quiet();
}

#[test]
fn class_membership_uses_machine_ad_and_machine_requirements() {
    let mut s = Sim::new();
    let picky = s.machine(
        "picky",
        "Arch = \"X86_64\"; Mips = 900; Requirements = TARGET.Owner != \"mallory\"",
        1,
    )[0];
    let arm = s.machine("arm", "Arch = \"AARCH64\"; Mips = 800", 1)[0];
    let plain = s.machine("plain", "Arch = \"X86_64\"; Mips = 100", 1)[0];
    s.step(|a| a.on_job_created(J1, "mallory"));
    s.step(|a| a.define_class(J1, r(J1, 1), "x86", "Arch == \"x86_64\""));
    s.expect_done(r(J1, 1));
    s.step(|a| a.add_hosts(J1, r(J1, 2), "x86", 2, 1));
    assert_eq!(s.expect_grant(r(J1, 2), 1), vec![plain]);
    s.quiet();
    // Another owner is welcome on the picky machine; the class can also look at the job.
    s.step(|a| a.on_job_created(J2, "alice"));
    s.step(|a| a.define_class(J2, r(J2, 1), "mine", "TARGET.JobId == 2 && Mips > 500"));
    s.expect_done(r(J2, 1));
    s.step(|a| a.add_hosts(J2, r(J2, 2), "mine", 2, 1));
    assert_eq!(s.expect_grant(r(J2, 2), 1), vec![picky]);
    assert_eq!(s.expect_grant(r(J2, 2), 0), vec![arm]);
    s.quiet();
}

#[test]
fn remove_class_fails_while_hosts_are_allocated_or_pending() {
    let mut s = Sim::new();
    let h = s.fast("m", 1);
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 2, 1));
    s.expect_grant(r(J1, 1), 1);
    s.step(|a| a.remove_class(J1, r(J1, 2), "c"));
    let msg = s.expect_failed(r(J1, 2), FailureCode::ClassInUse);
    assert!(
        msg.contains("DelHosts") && msg.contains(&h.to_string()),
        "{msg}"
    );
    s.step(|a| a.del_hosts(J1, r(J1, 3), &[h]));
    s.next(); // Released
    s.expect_done(r(J1, 3));
    // The freed host went straight back to the still pending request.
    s.expect_grant(r(J1, 1), 0);
    s.step(|a| a.del_hosts(J1, r(J1, 4), &[h]));
    s.next();
    s.expect_done(r(J1, 4));
    s.step(|a| a.add_hosts(J1, r(J1, 5), "c", 5, 5));
    s.step(|a| a.remove_class(J1, r(J1, 6), "c"));
    let msg = s.expect_failed(r(J1, 6), FailureCode::ClassInUse);
    assert!(msg.contains("CancelRequest"), "{msg}");
    s.step(|a| a.cancel(J1, r(J1, 7), RequestId(5)));
    s.expect_failed(r(J1, 5), FailureCode::Cancelled);
    s.expect_done(r(J1, 7));
    s.step(|a| a.add_notify(J1, r(J1, 8), "c"));
    s.expect_done(r(J1, 8));
    s.step(|a| a.remove_class(J1, r(J1, 9), "c"));
    s.expect_failed(r(J1, 8), FailureCode::UnknownClass);
    s.expect_done(r(J1, 9));
    s.step(|a| a.class_definitions(J1, r(J1, 10)));
    assert_eq!(s.expect_done(r(J1, 10)), Reply::Classes(vec![]));
    s.quiet();
}

#[test]
fn suspend_resume_and_vacate_reach_subscribers() {
    let mut s = Sim::new();
    let h = s.fast("m", 1);
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 1, 1));
    s.expect_grant(r(J1, 1), 0);
    s.step(|a| a.suspend_notify(J1, r(J1, 2), &[h]));
    s.step(|a| a.resume_notify(J1, r(J1, 3), &[h]));
    s.step(|a| a.delete_notify(J1, r(J1, 4), &[h]));
    for i in 2..=4 {
        s.expect_done(r(J1, i));
    }
    s.step(|a| a.on_slot_state("m", 0, SlotActivity::Suspended));
    assert_eq!(
        s.next(),
        Effect::Suspended {
            job: J1,
            request: r(J1, 2),
            host: h
        }
    );
    // A suspended host cannot take a new process.
    let e = s.a.pick_spawn_host(J1, &SpawnTarget::Host(h)).unwrap_err();
    assert_eq!(e.code, FailureCode::HostSuspended);
    s.step(|a| a.on_slot_state("m", 0, SlotActivity::Available));
    assert_eq!(
        s.next(),
        Effect::Resumed {
            job: J1,
            request: r(J1, 3),
            host: h
        }
    );
    s.step(|a| a.on_slot_state("m", 0, SlotActivity::Vacated));
    match s.next() {
        Effect::Deleted {
            request, reason, ..
        } => {
            assert_eq!(request, r(J1, 4));
            assert!(reason.contains("owner"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.next(),
        Effect::Released {
            job: J1,
            host: h,
            cause: ReleaseCause::Vacated
        }
    );
    s.quiet();
    assert_eq!(s.a.host_state(h), Some(&SlotState::Owner));
    assert_eq!(s.a.pool_status()[0].slots[0].state, "owner");
    s.step(|a| a.on_slot_state("m", 0, SlotActivity::Available));
    assert_eq!(s.a.host_state(h), Some(&SlotState::Idle));
    s.quiet();
}

#[path = "machine_tests.rs"]
mod machine_tests;
