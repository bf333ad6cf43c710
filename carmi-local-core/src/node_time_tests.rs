//! The core's deadlines in virtual time: the kill grace and heartbeats.

use super::*;
use std::time::Duration;

fn kill(process: u64) -> FromGlobal {
    FromGlobal::Kill {
        process: ProcessId(process),
    }
}

/// The pending effects other than heartbeats (registered at 100 with a 1 s
/// period, they come every second of these tests).
fn drain(h: &mut Harness) -> Vec<Effect> {
    h.pending
        .drain(..)
        .filter(|e| *e != Effect::Heartbeat)
        .collect()
}

/// A registered one-slot core with a 2 s kill grace, process 1 running.
fn running_one() -> Harness {
    let mut h = Harness::new(1);
    h.step(|c| c.set_timers(Duration::from_secs(2), Duration::from_secs(5)));
    h.step(|c| c.on_time(100.0));
    h.register();
    h.run(1, 100);
    h
}

#[test]
fn a_kill_grace_that_expires_escalates_to_sigkill_once() {
    let mut h = running_one();
    h.step(|c| c.on_time(110.0));
    h.global(kill(1));
    assert_eq!(drain(&mut h), vec![Effect::Kill(ProcessId(1))]);
    h.step(|c| c.on_time(111.9));
    assert_eq!(drain(&mut h), vec![]);
    h.step(|c| c.on_time(112.0));
    assert_eq!(drain(&mut h), vec![Effect::KillNow(ProcessId(1))]);
    // Once: a later tick or a second Kill sends nothing more.
    h.step(|c| c.on_time(112.5));
    h.global(kill(1));
    h.step(|c| c.on_time(150.0));
    assert_eq!(drain(&mut h), vec![]);
    h.step(|c| c.on_exited(ProcessId(1), ExitStatus::Signal(9), 0.0));
    assert!(matches!(h.next_to_global(), ToGlobal::Exited { .. }));
    assert_eq!(h.core.job_count(), 0);
}

#[test]
fn a_process_that_exits_within_the_grace_is_not_sigkilled() {
    let mut h = running_one();
    h.step(|c| c.on_time(100.5));
    h.global(kill(1));
    assert_eq!(drain(&mut h), vec![Effect::Kill(ProcessId(1))]);
    h.step(|c| c.on_time(102.4));
    h.step(|c| c.on_exited(ProcessId(1), ExitStatus::Signal(15), 0.0));
    assert!(matches!(
        &drain(&mut h)[..],
        [Effect::ToGlobal(ToGlobal::Exited { .. }, _)]
    ));
    for t in [102.5, 103.0, 200.0] {
        h.step(|c| c.on_time(t));
    }
    assert_eq!(drain(&mut h), vec![], "no SIGKILL after the exit");
}

#[test]
fn a_process_killed_while_launching_gets_its_grace_from_its_start() {
    let mut h = running_one();
    h.global(spawn(2, 100, exe("w", 'a')));
    h.next();
    h.global(kill(2));
    h.nothing_else();
    h.step(|c| c.on_time(105.0));
    h.step(|c| c.on_launched(ProcessId(2), Ok(())));
    let e = drain(&mut h);
    assert!(matches!(
        &e[0],
        Effect::ToGlobal(ToGlobal::Started { .. }, _)
    ));
    assert_eq!(e[1..], [Effect::Kill(ProcessId(2))]);
    h.step(|c| c.on_time(106.9));
    assert_eq!(drain(&mut h), vec![]);
    h.step(|c| c.on_time(107.0));
    assert_eq!(drain(&mut h), vec![Effect::KillNow(ProcessId(2))]);
}

#[test]
fn heartbeats_follow_the_global_rms_period_or_else_the_fallback() {
    let mut h = Harness::new(1);
    h.step(|c| c.set_timers(Duration::from_secs(2), Duration::from_secs(5)));
    assert_eq!(
        h.core.next_deadline(),
        None,
        "no heartbeat before registering"
    );
    h.step(|c| c.on_time(10.0));
    h.step(|c| c.on_global_connected("[ Name = \"m\" ]".into()));
    h.next_to_global();
    // The global RM names no period: the configured fallback.
    h.global(FromGlobal::Registered {
        hosts: vec![HostId(100)],
        heartbeat_ms: 0,
    });
    assert_eq!(h.core.next_deadline(), Some(15.0));
    h.step(|c| c.on_time(14.9));
    h.nothing_else();
    h.step(|c| c.on_time(15.0));
    assert_eq!(h.next(), Effect::Heartbeat);
    h.step(|c| c.on_heartbeat("LoadAvg = 0.5\n".into()));
    assert!(matches!(h.next_to_global(), ToGlobal::Heartbeat { .. }));
    // A late tick: the next heartbeat is a period after it, no burst.
    h.step(|c| c.on_time(33.0));
    assert_eq!(h.take(1), vec![Effect::Heartbeat]);
    h.nothing_else();
    assert_eq!(h.core.next_deadline(), Some(38.0));
    // Lost: no heartbeats until registered again, then at its period.
    h.step(|c| c.on_global_lost(Vec::new()));
    assert_eq!(h.core.next_deadline(), None);
    h.step(|c| c.on_global_connected("[ Name = \"m\" ]".into()));
    h.next_to_global();
    h.global(FromGlobal::Registered {
        hosts: vec![HostId(100)],
        heartbeat_ms: 1500,
    });
    assert_eq!(h.core.next_deadline(), Some(34.5));
}

#[test]
fn shutting_down_kills_everything_with_the_grace() {
    let mut h = running_one();
    // 3 launching, 4 waiting for its executable.
    h.global(spawn(3, 100, exe("w", 'a')));
    h.next();
    h.global(spawn(4, 100, exe("v", 'b')));
    h.next();
    h.step(|c| c.on_cache_miss(ProcessId(4)));
    h.next_to_global();
    h.step(|c| c.on_time(100.5));
    h.step(|c| c.shut_down());
    let e = drain(&mut h);
    assert!(e.contains(&Effect::Kill(ProcessId(1))), "{e:?}");
    assert!(e.iter().any(|e| matches!(
        e,
        Effect::ToGlobal(
            ToGlobal::Started {
                process: ProcessId(4),
                result: Err(_)
            },
            _
        )
    )));
    assert!(!h.core.is_accepting());
    assert_eq!(e.len(), 2, "{e:?}");
    h.step(|c| c.on_launched(ProcessId(3), Ok(())));
    h.next_to_global();
    assert_eq!(drain(&mut h), vec![Effect::Kill(ProcessId(3))]);
    h.step(|c| c.on_time(102.5));
    let e = drain(&mut h);
    assert!(e.contains(&Effect::KillNow(ProcessId(1))), "{e:?}");
    assert!(e.contains(&Effect::KillNow(ProcessId(3))), "{e:?}");
    assert_eq!(e.len(), 2, "{e:?}");
}

#[test]
fn a_leaving_machine_tells_the_global_rm_before_it_kills_anything() {
    let mut h = running_one();
    assert!(h.core.leave("its local RM got SIGTERM"));
    h.step(|c| c.shut_down());
    let effects = drain(&mut h);
    assert_eq!(
        effects,
        vec![
            Effect::ToGlobal(
                ToGlobal::Leaving {
                    reason: "its local RM got SIGTERM".into()
                },
                Bytes::new()
            ),
            Effect::Kill(ProcessId(1)),
        ]
    );
    // Without a registered global RM there is no one to tell.
    let mut alone = Harness::new(1);
    assert!(!alone.core.leave("bye"));
    assert_eq!(drain(&mut alone), vec![]);
}

#[test]
fn a_machine_without_a_registration_for_the_orphan_limit_asks_to_stop_once() {
    let mut h = Harness::new(1);
    h.step(|c| c.set_orphan_limit(Some(Duration::from_secs(60))));
    // From the start: never registered.
    assert_eq!(h.core.next_deadline(), Some(60.0));
    h.step(|c| c.on_time(59.0));
    assert_eq!(drain(&mut h), vec![]);
    h.step(|c| c.on_time(30.0));
    h.register();
    assert_eq!(
        h.core.next_deadline(),
        Some(60.0),
        "the next heartbeat only"
    );
    // Registered for a while, then the global RM goes away at 200.
    h.step(|c| c.on_time(200.0));
    drain(&mut h);
    h.step(|c| c.on_global_lost(Vec::new()));
    assert_eq!(h.core.next_deadline(), Some(260.0));
    h.step(|c| c.on_time(259.9));
    assert_eq!(drain(&mut h), vec![]);
    h.step(|c| c.on_time(261.0));
    assert_eq!(drain(&mut h), vec![Effect::Orphaned { away_s: 61.0 }]);
    h.step(|c| c.on_time(400.0));
    assert_eq!(drain(&mut h), vec![], "once");
    assert_eq!(h.core.next_deadline(), None);
}

#[test]
fn a_machine_without_an_orphan_limit_waits_for_ever() {
    let mut h = Harness::new(1);
    h.step(|c| c.on_time(1e9));
    assert_eq!(drain(&mut h), vec![]);
    assert_eq!(h.core.next_deadline(), None);
}
