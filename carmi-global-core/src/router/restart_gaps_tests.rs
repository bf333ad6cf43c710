//! A restart of the global RM with machines that never come back, and
//! processes that exited before it (issue 15, items 4 and 5): nothing a
//! client could observe is forgotten, and nothing is left in silence.

use std::time::Duration;

use carmi_proto::ids::{JobId, RequestId};
use carmi_proto::msg::{Event, Reply, Request, SpawnTarget, ToGlobal};

use super::hand_tests::{CONN, step, worker_exe};
use super::restart_tests::{
    added, ask, events_at, link, pool_and_job, restarted, spawn_one_worker,
};
use crate::journal::Record;

/// Item 5: a host the job held, its worker running there, whose machine
/// never comes back after the restart: once the heartbeat bound has passed
/// (3 s here), the worker exits with `HostLost` (told to the root that
/// spawned it) and the host leaves the job, journaled; before, silence.
#[test]
fn a_machine_that_never_returns_after_a_restart_loses_its_hosts_after_the_bound() {
    use carmi_proto::msg::ExitStatus;

    let (mut r, mut journal, root) = pool_and_job(2);
    let (m0_host, m1_host) = (
        r.allocator().machine_hosts("m0")[0],
        r.allocator().machine_hosts("m1")[0],
    );
    let exclude = Request::ExcludeHosts {
        class: "any".into(),
        hosts: vec![m0_host],
    };
    journal.extend(ask(&mut r, 2, exclude).1);
    let add = Request::AddHosts {
        class: "any".into(),
        count: 1,
        increment: 1,
    };
    let (sends, records) = ask(&mut r, 3, add);
    assert_eq!(added(&events_at(CONN, &sends), 3).0, [m1_host]);
    journal.extend(records);
    let spawn = Request::ClassSpawn {
        executable: worker_exe(),
        args: vec![],
        target: SpawnTarget::Class("any".into()),
        output: Default::default(),
    };
    let (_, records) = ask(&mut r, 4, spawn);
    let worker = match &records[..] {
        [Record::Spawned { process, .. }] => *process,
        other => panic!("{other:?}"),
    };
    journal.extend(records);
    let started = ToGlobal::Started {
        process: worker,
        result: Ok(()),
    };
    journal.extend(step(&mut r, |r| r.on_message(link(1), started, Duration::ZERO)).1);
    // Only m0 comes back.
    for (mut r, events, _) in restarted(&journal, 1, root, |_| vec![]) {
        assert!(events.is_empty(), "{events:?}");
        let beat = ToGlobal::Heartbeat {
            update: String::new(),
        };
        let at = Duration::from_millis(2500);
        step(&mut r, |r| r.on_message(link(0), beat, at));
        let (sends, _) = step(&mut r, |r| r.on_tick(Duration::from_millis(2600)));
        assert!(
            events_at(CONN, &sends).is_empty(),
            "within the bound: {sends:?}"
        );
        let (sends, records) = step(&mut r, |r| r.on_tick(Duration::from_millis(3001)));
        let events = events_at(CONN, &sends);
        assert!(
            events.iter().any(|e| matches!(
                e,
                Event::ProcessExited {
                    request: RequestId(4),
                    process,
                    status: ExitStatus::HostLost,
                    ..
                } if *process == worker
            )),
            "{events:?}"
        );
        assert!(
            records.contains(&Record::Freed {
                job: JobId(1),
                host: m1_host
            }),
            "{records:?}"
        );
        assert_eq!(r.allocator().recorded_claims(), 0);
    }
}

/// Item 4: a process that exited before the restart is still listed after
/// it, with its exit status (`ProcessInfo` and `Processes`), from the
/// journal as written and as compacted; before, `UnknownProcess`.
#[test]
fn an_exited_process_keeps_its_exit_status_across_a_restart() {
    use carmi_proto::msg::{ExitStatus, ProcessState};

    let (mut r, mut journal, root) = pool_and_job(2);
    let (worker, host) = spawn_one_worker(&mut r, &mut journal);
    let at = usize::from(r.allocator().host_machine(host) != Some("m0"));
    let exited = ToGlobal::Exited {
        process: worker,
        status: ExitStatus::Code(3),
        cpu_seconds: 0.25,
        usage: Default::default(),
    };
    journal.extend(step(&mut r, |r| r.on_message(link(at), exited, Duration::ZERO)).1);
    let want = ProcessState::Exited {
        status: ExitStatus::Code(3),
        cpu_seconds: 0.25,
    };
    for (mut r, _, _) in restarted(&journal, 2, root, |_| vec![]) {
        let (sends, _) = ask(&mut r, 4, Request::ProcessInfo { process: worker });
        match &events_at(CONN, &sends)[..] {
            [
                Event::Done {
                    reply: Reply::Process(info),
                    ..
                },
            ] => {
                assert_eq!((info.process, info.host), (worker, Some(host)));
                assert_eq!(info.state, want);
            }
            other => panic!("{other:?}"),
        }
        let (sends, _) = ask(&mut r, 5, Request::Processes);
        match &events_at(CONN, &sends)[..] {
            [
                Event::Done {
                    reply: Reply::Processes(all),
                    ..
                },
            ] => assert!(
                all.iter().any(|p| p.process == worker && p.state == want),
                "{all:?}"
            ),
            other => panic!("{other:?}"),
        }
    }
}

/// Item 4: a worker's `Started` was in flight when the global RM died, so
/// its spawner was never told: when its machine lists it running after the
/// restart, the spawner gets `ProcessStarted` (once); a worker whose start
/// was told before the restart is not told again.
#[test]
fn a_process_started_in_flight_at_the_kill_is_told_once_after_the_restart() {
    for told_before in [false, true] {
        let (mut r, mut journal, root) = pool_and_job(1);
        let (worker, host) = spawn_one_worker(&mut r, &mut journal);
        if told_before {
            let started = ToGlobal::Started {
                process: worker,
                result: Ok(()),
            };
            let (sends, records) = step(&mut r, |r| r.on_message(link(0), started, Duration::ZERO));
            assert_eq!(events_at(CONN, &sends).len(), 1);
            journal.extend(records);
        }
        for (_, events, _) in restarted(&journal, 1, root, |_| vec![worker]) {
            let told: Vec<&Event> = events
                .iter()
                .filter(|e| matches!(e, Event::ProcessStarted { .. }))
                .collect();
            if told_before {
                assert!(told.is_empty(), "told twice: {events:?}");
            } else {
                assert_eq!(
                    told,
                    [&Event::ProcessStarted {
                        request: RequestId(3),
                        process: worker,
                        host
                    }],
                    "{events:?}"
                );
            }
        }
    }
}
