//! The allocator's machines and requests over time: lost and re-advertised
//! machines, cancellations, bad requests, notifications, spawn placement,
//! freed hosts, class changes, the wire form of every effect, and random
//! inputs (split from `tests.rs`, whose `Sim` they use).

use carmi_proto::ids::ProcessId;
use carmi_proto::msg::HostInfo;

use super::*;

#[test]
fn a_lost_machine_is_reported_and_keeps_its_host_ids() {
    let mut s = Sim::new();
    let hosts = s.machine("m", "Mips = 5", 2);
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 3, 1));
    s.expect_grant(r(J1, 1), 2);
    s.expect_grant(r(J1, 1), 1);
    s.step(|a| a.delete_notify(J1, r(J1, 2), &hosts));
    s.expect_done(r(J1, 2));
    s.sleep(3000);
    assert!(s.step(|a| a.on_machine_lost("m")));
    for &h in &hosts {
        assert!(matches!(s.next(), Effect::Deleted { host, .. } if host == h));
        assert_eq!(
            s.next(),
            Effect::Released {
                job: J1,
                host: h,
                cause: ReleaseCause::Lost
            }
        );
    }
    s.quiet();
    assert!(!s.a.is_online("m"));
    assert!(s.a.pool_status().is_empty());
    assert!(!s.step(|a| a.on_machine_lost("m")));
    // It comes back with one more slot: same ids first, and the still pending request gets one.
    let again = s.machine("m", "Mips = 5", 3);
    assert_eq!(&again[..2], &hosts[..]);
    assert_eq!(s.expect_grant(r(J1, 1), 0), vec![hosts[0]]);
    s.quiet();
}

#[test]
fn readvertising_with_fewer_slots_withdraws_the_rest() {
    let mut s = Sim::new();
    let hosts = s.machine("m", "Mips = 5", 2);
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 2, 2));
    s.expect_grant(r(J1, 1), 0);
    let again = s.machine("m", "Mips = 6", 1);
    assert_eq!(again, vec![hosts[0]]);
    assert_eq!(
        s.next(),
        Effect::Released {
            job: J1,
            host: hosts[1],
            cause: ReleaseCause::Withdrawn
        }
    );
    s.quiet();
    assert_eq!(s.a.host_state(hosts[1]), Some(&SlotState::Offline));
    assert_eq!(s.a.job_hosts(J1), vec![hosts[0]]);
}

#[test]
fn cancelling_returns_partial_hosts_to_the_next_request() {
    let mut s = Sim::new();
    let h = s.fast("m", 1);
    s.job_with_class(J1, "c", "true");
    s.job_with_class(J2, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 4, 2));
    s.step(|a| a.add_hosts(J2, r(J2, 1), "c", 1, 1));
    s.quiet();
    s.step(|a| a.cancel(J1, r(J1, 2), RequestId(1)));
    let msg = s.expect_failed(r(J1, 1), FailureCode::Cancelled);
    assert!(msg.contains("4 of its hosts"), "{msg}");
    s.expect_done(r(J1, 2));
    assert_eq!(s.expect_grant(r(J2, 1), 0), vec![h]);
    s.step(|a| a.cancel(J1, r(J1, 3), RequestId(1)));
    s.expect_failed(r(J1, 3), FailureCode::Invalid);
    s.quiet();
}

#[test]
fn bad_requests_fail_with_codes_and_actionable_messages() {
    let mut s = Sim::new();
    let h = s.fast("m", 1);
    s.step(|a| a.on_job_created(J1, "alice"));
    s.step(|a| a.define_class(J1, r(J1, 1), "c", "Mips >\n  && "));
    let msg = s.expect_failed(r(J1, 1), FailureCode::BadExpression);
    assert!(msg.starts_with("class `c`: line 2, column"), "{msg}");
    s.step(|a| a.add_hosts(J1, r(J1, 2), "nope", 1, 1));
    let msg = s.expect_failed(r(J1, 2), FailureCode::UnknownClass);
    assert!(
        msg.contains("`nope`") && msg.contains("DefineClass"),
        "{msg}"
    );
    s.step(|a| a.define_class(J1, r(J1, 3), "c", "true"));
    s.expect_done(r(J1, 3));
    s.step(|a| a.add_hosts(J1, r(J1, 4), "c", 0, 1));
    s.expect_failed(r(J1, 4), FailureCode::Invalid);
    s.step(|a| a.add_hosts(J1, r(J1, 5), "c", 3, 0));
    s.expect_failed(r(J1, 5), FailureCode::Invalid);
    s.step(|a| a.del_hosts(J1, r(J1, 6), &[h]));
    s.expect_failed(r(J1, 6), FailureCode::NotYourHost);
    s.step(|a| a.del_hosts(J1, r(J1, 7), &[]));
    s.expect_failed(r(J1, 7), FailureCode::Invalid);
    s.step(|a| a.get_host_info(J1, r(J1, 8), HostId(99)));
    s.expect_failed(r(J1, 8), FailureCode::NotYourHost);
    s.step(|a| a.add_hosts(J1, r(J1, 9), "c", 2, 1));
    s.expect_grant(r(J1, 9), 1);
    s.step(|a| a.add_hosts(J1, r(J1, 9), "c", 2, 1));
    s.expect_failed(r(J1, 9), FailureCode::Invalid);
    s.step(|a| a.config(J2, r(J2, 1)));
    s.expect_failed(r(J2, 1), FailureCode::Invalid);
    s.step(|a| a.get_host_info(J1, r(J1, 10), h));
    match s.expect_done(r(J1, 10)) {
        Reply::Host(info) => assert_eq!(info.host, h),
        other => panic!("{other:?}"),
    }
    s.quiet();
}

#[test]
fn add_notify_sees_every_host_of_its_class() {
    let mut s = Sim::new();
    let a = s.fast("a", 2);
    let b = s.fast("b", 1);
    s.job_with_class(J1, "c", "true");
    s.step(|al| al.add_notify(J1, r(J1, 1), "c"));
    s.expect_done(r(J1, 1));
    s.step(|al| al.add_hosts(J1, r(J1, 2), "c", 2, 2));
    assert_eq!(s.expect_grant(r(J1, 2), 0), vec![a, b]);
    for h in [a, b] {
        match s.next() {
            Effect::Added { request, host, .. } => {
                assert_eq!(request, r(J1, 1));
                assert_eq!(host.host, h);
            }
            other => panic!("{other:?}"),
        }
    }
    s.quiet();
}

#[test]
fn spawn_picks_the_fastest_free_host_of_the_class() {
    let mut s = Sim::new();
    let slow = s.fast("slow", 1);
    let quick = s.fast("quick", 9);
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 2, 2));
    s.expect_grant(r(J1, 1), 0);
    let target = SpawnTarget::Class("c".into());
    assert_eq!(s.a.pick_spawn_host(J1, &target), Ok(quick));
    s.step(|a| a.on_process_spawned(quick, ProcessId(10)));
    assert_eq!(s.a.pick_spawn_host(J1, &target), Ok(slow));
    s.step(|a| a.on_process_spawned(slow, ProcessId(11)));
    let e = s.a.pick_spawn_host(J1, &target).unwrap_err();
    assert_eq!(e.code, FailureCode::Unavailable);
    assert!(e.message.contains("2 running a process"), "{}", e.message);
    // A named host may run more than one process.
    assert_eq!(s.a.pick_spawn_host(J1, &SpawnTarget::Host(slow)), Ok(slow));
    s.step(|a| a.on_process_exited(slow, ProcessId(11)));
    assert_eq!(s.a.pick_spawn_host(J1, &target), Ok(slow));
    let e =
        s.a.pick_spawn_host(J1, &SpawnTarget::Class("zz".into()))
            .unwrap_err();
    assert_eq!(e.code, FailureCode::UnknownClass);
    let e =
        s.a.pick_spawn_host(J2, &SpawnTarget::Host(slow))
            .unwrap_err();
    assert_eq!(e.code, FailureCode::Invalid);
    s.quiet();
}

#[test]
fn a_gone_requester_or_an_ended_job_frees_its_hosts() {
    let mut s = Sim::new();
    let h = s.fast("m", 1);
    let g = s.fast("n", 2);
    s.job_with_class(J1, "c", "true");
    s.job_with_class(J2, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 3, 3));
    s.step(|a| a.add_hosts(J2, r(J2, 1), "c", 1, 1));
    s.quiet();
    // J1's first process leaves: the two hosts it was gathering go to J2, then the pool.
    s.step(|a| a.on_requester_gone(ProcessId(1)));
    assert_eq!(s.expect_grant(r(J2, 1), 0), vec![g]);
    s.quiet();
    assert_eq!(s.a.host_state(h), Some(&SlotState::Idle));
    s.step(|a| a.add_hosts(J2, r(J2, 2), "c", 1, 1));
    assert_eq!(s.expect_grant(r(J2, 2), 0), vec![h]);
    s.step(|a| a.add_hosts(J1, r(J1, 2), "c", 1, 1));
    s.quiet();
    s.step(|a| a.on_slot_state("n", 0, SlotActivity::Suspended));
    s.step(|a| a.on_job_ended(J2));
    let mut released: Vec<HostId> = Vec::new();
    let mut granted = Vec::new();
    while let Some(e) = s.log.pop_front() {
        match e {
            Effect::Released {
                job: J2,
                host,
                cause: ReleaseCause::JobEnded,
            } => released.push(host),
            Effect::Grant { request, hosts, .. } if request == r(J1, 2) => granted = hosts,
            other => panic!("{other:?}"),
        }
    }
    released.sort();
    assert_eq!(released, vec![h, g]);
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].host, h);
    assert_eq!(s.a.host_state(g), Some(&SlotState::Suspended(None)));
    assert!(!s.a.has_job(J2));
}

#[test]
fn a_heartbeat_update_can_bring_a_machine_into_a_class() {
    let mut s = Sim::new();
    let h = s.machine("m", "Mips = 5; LoadAvg = 0.9", 1)[0];
    s.job_with_class(J1, "calm", "LoadAvg < 0.3");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "calm", 1, 1));
    s.quiet();
    let unchanged = ClassAd::parse_old("LoadAvg = 0.9").unwrap();
    assert!(s.step(|a| a.on_machine_updated("m", &unchanged)));
    s.quiet();
    let calm = ClassAd::parse_old("LoadAvg = 0.1\nMips = 7").unwrap();
    assert!(s.step(|a| a.on_machine_updated("m", &calm)));
    assert_eq!(s.expect_grant(r(J1, 1), 0), vec![h]);
    assert!(!s.step(|a| a.on_machine_updated("nobody", &calm)));
}

#[test]
fn redefining_a_class_serves_its_pending_requests() {
    let mut s = Sim::new();
    let h = s.fast("m", 5);
    s.job_with_class(J1, "c", "Mips > 100");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 1, 1));
    s.quiet();
    s.step(|a| a.define_class(J1, r(J1, 2), "c", "Mips > 1"));
    s.expect_done(r(J1, 2));
    assert_eq!(s.expect_grant(r(J1, 1), 0), vec![h]);
    s.quiet();
}

#[test]
fn every_effect_kind_roundtrips_through_the_wire() {
    let info = HostInfo {
        host: HostId(3),
        name: "slot1@m".into(),
        class: "c".into(),
        ad: "[ Mips = 1.5; Name = \"m\" ]".into(),
    };
    let effects = [
        Effect::Grant {
            job: J1,
            request: r(J1, 1),
            hosts: vec![info.clone()],
            remaining: 4,
        },
        Effect::Added {
            job: J1,
            request: r(J1, 2),
            host: info.clone(),
        },
        Effect::Deleted {
            job: J1,
            request: r(J1, 3),
            host: HostId(3),
            reason: "gone \"quoted\"\n".into(),
        },
        Effect::Suspended {
            job: J1,
            request: r(J1, 4),
            host: HostId(3),
        },
        Effect::Resumed {
            job: J1,
            request: r(J1, 5),
            host: HostId(3),
        },
        Effect::Done {
            job: J1,
            request: r(J1, 6),
            reply: Reply::Classes(vec![ClassDef {
                name: "c".into(),
                expression: "Mips > 0.25".into(),
                rank: None,
                excluded: Vec::new(),
            }]),
        },
        Effect::Failed {
            job: J1,
            request: r(J1, 7),
            failure: Failure {
                code: FailureCode::BadExpression,
                message: "line 1, column 3".into(),
            },
        },
        Effect::Released {
            job: J1,
            host: HostId(3),
            cause: ReleaseCause::Withdrawn,
        },
    ];
    for e in &effects {
        wire_roundtrip(e);
    }
    assert!(effects[7].to_event().is_none());
    assert_eq!(effects[1].to_event().unwrap().0, ProcessId(1));
}

#[test]
fn time_only_moves_forward() {
    let mut a = Allocator::new();
    a.advance_to(Duration::from_secs(5));
    a.advance_to(Duration::from_secs(1));
    assert_eq!(a.now(), Duration::from_secs(5));
}

/// Random pool churn and requests, with every invariant checked after every step.
#[test]
fn random_inputs_keep_every_invariant() {
    let mut rng = StdRng::seed_from_u64(0x00ca_4a11);
    let mut s = Sim::new();
    let arches = ["X86_64", "AARCH64"];
    for i in 0..16 {
        s.machine(
            &format!("m{i}"),
            &format!(
                "Arch = \"{}\"; Mips = {}; Memory = {}",
                arches[i % 2],
                rng.random_range(1..1000),
                512 << (i % 4)
            ),
            1 + (i as u32 % 3),
        );
    }
    let jobs = [J1, J2, J3, JobId(4)];
    for &j in &jobs {
        s.step(|a| a.on_job_created(j, "alice"));
        s.step(|a| a.define_class(j, r(j, 0), "x86", "Arch == \"X86_64\""));
        s.step(|a| a.define_class(j, r(j, 1), "big", "Memory >= 2048"));
    }
    let mut next_id = 10;
    for _ in 0..3000 {
        s.sleep(rng.random_range(0..50));
        let j = jobs[rng.random_range(0..jobs.len())];
        let m = format!("m{}", rng.random_range(0..16));
        next_id += 1;
        let req = r(j, next_id);
        match rng.random_range(0..12) {
            0 | 1 => {
                let class = if rng.random_bool(0.5) { "x86" } else { "big" };
                let (n, inc) = (rng.random_range(1..6), rng.random_range(1..4));
                s.step(|a| a.add_hosts(j, req, class, n, inc));
            }
            2 => {
                let hosts = s.a.job_hosts(j);
                if !hosts.is_empty() {
                    let k = rng.random_range(1..=hosts.len());
                    s.step(|a| a.del_hosts(j, req, &hosts[..k]));
                }
            }
            3 => {
                let activity = [
                    SlotActivity::Available,
                    SlotActivity::Suspended,
                    SlotActivity::Vacated,
                ][rng.random_range(0..3)];
                let slot = rng.random_range(0..3);
                s.step(|a| a.on_slot_state(&m, slot, activity));
            }
            4 => {
                if rng.random_bool(0.3) {
                    s.step(|a| a.on_machine_lost(&m));
                } else {
                    let mips = rng.random_range(1..1000);
                    let slots = rng.random_range(0..4);
                    s.machine(
                        &m,
                        &format!("Arch = \"X86_64\"; Mips = {mips}; Memory = 4096"),
                        slots,
                    );
                }
            }
            5 => {
                let hosts = s.a.job_hosts(j);
                if !hosts.is_empty() {
                    let kind = rng.random_range(0..3);
                    s.step(|a| match kind {
                        0 => a.delete_notify(j, req, &hosts),
                        1 => a.suspend_notify(j, req, &hosts),
                        _ => a.resume_notify(j, req, &hosts),
                    });
                }
            }
            6 => {
                let target = RequestId(rng.random_range(10..next_id));
                s.step(|a| a.cancel(j, req, target));
            }
            7 => {
                if let Ok(h) = s.a.pick_spawn_host(j, &SpawnTarget::Class("x86".into())) {
                    s.step(|a| a.on_process_spawned(h, ProcessId(next_id)));
                }
            }
            8 => {
                let update =
                    ClassAd::parse_old(&format!("Memory = {}", 512 << rng.random_range(0..4)))
                        .unwrap();
                s.step(|a| a.on_machine_updated(&m, &update));
            }
            9 => {
                if rng.random_bool(0.1) {
                    s.step(|a| a.on_job_ended(j));
                    s.step(|a| a.on_job_created(j, "alice"));
                    s.step(|a| a.define_class(j, r(j, 0), "x86", "Arch == \"X86_64\""));
                    s.step(|a| a.define_class(j, r(j, 1), "big", "Memory >= 2048"));
                } else {
                    s.step(|a| a.on_requester_gone(ProcessId(j.0)));
                }
            }
            10 => s.step(|a| a.config(j, req)),
            _ => s.step(|a| a.add_notify(j, req, "big")),
        }
        s.log.clear();
    }
}

#[test]
fn a_class_that_needs_more_time_than_a_pilot_has_left_gets_none_of_its_hosts_as_the_clock_moves() {
    let mut s = Sim::new();
    // `time()` is the allocator's clock: Unix second 9000 at clock zero.
    s.a.set_unix_epoch(9_000);
    let hosts = s.machine("pilot-a1-0", "Mips = 5; PilotEndsAt = 10000", 2);
    s.job_with_class(J1, "long", "PilotEndsAt - time() > 600");
    // 1000 s left: a member.
    s.step(|a| a.add_hosts(J1, r(J1, 1), "long", 1, 1));
    assert_eq!(s.expect_grant(r(J1, 1), 0).len(), 1);
    s.quiet();
    // 500 s later only 500 s are left: the same machine, its ad unchanged,
    // is no longer a member, and its other slot is not handed out.
    s.sleep(500_000);
    s.step(|a| a.add_hosts(J1, r(J1, 2), "long", 1, 1));
    s.quiet();
    // A class content with 300 s gets it.
    s.job_with_class(J2, "short", "PilotEndsAt - time() > 300");
    s.step(|a| a.add_hosts(J2, r(J2, 1), "short", 1, 1));
    let got = s.expect_grant(r(J2, 1), 0);
    assert!(hosts.contains(&got[0]), "{got:?}");
    s.quiet();
}

#[test]
fn a_machine_s_status_is_kept_between_asks_and_made_again_after_each_change() {
    let mut s = Sim::new();
    s.machine("m", "Mips = 5; LoadAvg = 0.5", 2);
    let states = |a: &Allocator| -> Vec<(String, Option<JobId>)> {
        let pool = a.pool_status();
        pool[0]
            .slots
            .iter()
            .map(|s| (s.state.to_string(), s.job))
            .collect()
    };
    let first = s.a.pool_status();
    assert!(
        Arc::ptr_eq(&first[0], &s.a.pool_status()[0]),
        "unchanged, shared"
    );
    let idle = ("idle".to_string(), None);
    assert_eq!(states(&s.a), [idle.clone(), idle.clone()]);
    // A grant claims a slot.
    s.job_with_class(J1, "c", "true");
    s.step(|a| a.add_hosts(J1, r(J1, 1), "c", 1, 1));
    let got = s.expect_grant(r(J1, 1), 0);
    let claimed = ("claimed".to_string(), Some(J1));
    assert!(states(&s.a).contains(&claimed), "{:?}", states(&s.a));
    // An ad update shows.
    let update = ClassAd::parse("[ LoadAvg = 1.5 ]").unwrap();
    s.step(|a| a.on_machine_updated("m", &update));
    let load = |a: &Allocator| {
        let pool = a.pool_status();
        let found = pool[0].attributes.iter().find(|(n, _)| n == "LoadAvg");
        found.map(|(_, v)| v.clone())
    };
    assert_eq!(load(&s.a).as_deref(), Some("1.5"));
    // Given back: idle again.
    s.step(|a| a.del_hosts(J1, r(J1, 2), &got));
    assert_eq!(states(&s.a), [idle.clone(), idle]);
    // Lost: gone from the status.
    assert!(s.step(|a| a.on_machine_lost("m")));
    assert!(s.a.pool_status().is_empty());
}
