//! The router's links and messages: removing hosts and ending jobs, who may
//! send what, heartbeat updates, random messages, and a reconnecting local
//! RM keeping its processes (split from `tests.rs`, whose `Sim` they use).

use super::*;

#[test]
fn del_hosts_kills_and_the_first_process_leaving_ends_the_job() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 2);
    let (job, _, hosts) = s.job_with_hosts(2);
    let p = s.spawn_on(3, hosts[0], M1);
    let q = s.spawn_on(4, hosts[1], M1);
    s.request(
        5,
        Request::DelHosts {
            hosts: vec![hosts[0]],
        },
    );
    assert_eq!(s.next_send(M1), FromGlobal::Kill { process: p });
    s.expect_done(5);
    s.msg(
        M1,
        ToGlobal::Exited {
            process: p,
            status: ExitStatus::Signal(15),
            cpu_seconds: 0.1,
            usage: Default::default(),
        },
    );
    assert!(matches!(
        s.root_event(),
        Event::ProcessExited {
            status: ExitStatus::Signal(15),
            ..
        }
    ));
    s.msg(SUB, ToGlobal::AppDetach { conn: ROOT_CONN });
    assert_eq!(s.next_send(M1), FromGlobal::Kill { process: q });
    s.quiet();
    assert!(!s.r.allocator().has_job(job));
    assert!(s.r.processes().is_empty());
    let status = s.r.allocator().pool_status();
    let m1 = status.iter().find(|m| m.name == "m1").unwrap();
    assert!(
        m1.slots
            .iter()
            .all(|sl| sl.state == "idle" && sl.job.is_none())
    );
}

#[test]
fn links_are_served_by_role() {
    let mut s = Sim::new();
    s.machine(M1, "m1", 10, 1);
    s.step(|r, now| r.on_link_opened(LinkId(5), Role::Admin, now));
    s.msg(LinkId(5), ToGlobal::Status);
    match s.next_send(LinkId(5)) {
        FromGlobal::Pool(machines) => {
            assert_eq!(machines.len(), 1);
            assert!(
                machines[0]
                    .attributes
                    .contains(&("Mips".into(), "10".into()))
            );
            assert_eq!(machines[0].slots[0].state, "idle");
        }
        other => panic!("{other:?}"),
    }
    s.msg(
        LinkId(5),
        ToGlobal::Heartbeat {
            update: String::new(),
        },
    );
    assert!(s.expect_closed(LinkId(5)).contains("Status"));
    let app = Role::Application {
        job: None,
        process: None,
        endpoint: "x:1".into(),
    };
    s.step(|r, now| r.on_link_opened(LinkId(6), app, now));
    assert!(s.expect_closed(LinkId(6)).contains("local RM"));
    // A request from a connection that never attached.
    s.msg(
        M1,
        ToGlobal::Forward {
            conn: ConnId(4),
            id: RequestId(8),
            body: Request::Config,
        },
    );
    assert!(matches!(
        s.next_event(M1, ConnId(4)),
        Event::Failed { request: RequestId(8), failure } if failure.code == FailureCode::UnknownProcess
    ));
    // Bad ads and absurd slot counts close the connection with a reason.
    s.msg(
        M1,
        ToGlobal::Advertise {
            ad: "[ Mips = ]".into(),
            slots: 1,
            running: vec![],
        },
    );
    assert!(
        matches!(s.next_send(M1), FromGlobal::AdminFailed(f) if f.message.contains("does not parse"))
    );
    assert!(s.expect_closed(M1).contains("does not parse"));
    s.msg(
        M1,
        ToGlobal::Advertise {
            ad: "[]".into(),
            slots: 1 << 30,
            running: vec![],
        },
    );
    assert!(s.expect_closed(M1).contains("slots"));
    s.quiet();
}

#[test]
fn heartbeat_updates_reach_the_allocator() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 1);
    let (_, _) = s.root();
    s.request(
        1,
        Request::DefineClass {
            name: "calm".into(),
            expression: "LoadAvg < 0.5".into(),
            rank: None,
            replace: false,
        },
    );
    s.expect_done(1);
    s.request(
        2,
        Request::AddHosts {
            class: "calm".into(),
            count: 1,
            increment: 1,
        },
    );
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Heartbeat {
            update: "LoadAvg = ".into(),
        },
    );
    assert!(
        matches!(s.next_send(M1), FromGlobal::AdminFailed(f) if f.message.contains("does not parse"))
    );
    s.quiet();
    s.msg(
        M1,
        ToGlobal::Heartbeat {
            update: "LoadAvg = 0.1".into(),
        },
    );
    assert!(matches!(
        s.root_event(),
        Event::HostsAdded {
            request: RequestId(2),
            remaining: 0,
            ..
        }
    ));
    s.quiet();
}

/// Random messages, many of them nonsense (unknown hosts, processes, slots,
/// connections), from several machines: the router never panics and every
/// invariant holds after every step.
#[test]
fn random_messages_never_break_the_router() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let mut rng = StdRng::seed_from_u64(7);
    let mut s = sim_with_submit_machine();
    let names = ["m1", "m2", "m3"];
    let mut next_link = 100;
    let mut links = vec![(SUB, "submit")];
    for (i, n) in names.iter().enumerate() {
        let link = LinkId(10 + i as u64);
        s.machine(link, n, 10 * (i as u32 + 1), 2);
        links.push((link, n));
    }
    s.root();
    for _ in 0..4000 {
        s.sleep(rng.random_range(0..400));
        let (link, name) = links[rng.random_range(0..links.len())];
        let conn = ConnId(rng.random_range(0..4));
        let host = HostId(rng.random_range(0..9));
        let process = ProcessId(rng.random_range(0..12));
        let id = RequestId(rng.random_range(0..30));
        let class = ["c", "d", "zz"][rng.random_range(0..3)].to_string();
        let body = match rng.random_range(0..17) {
            0 => Request::CancelRequest { request: id },
            1 => Request::Config,
            2 => Request::GetHostInfo { host },
            3 | 4 => Request::AddHosts {
                class,
                count: rng.random_range(0..4),
                increment: rng.random_range(0..3),
            },
            5 => Request::DelHosts { hosts: vec![host] },
            6 => Request::AddNotify { class },
            7 => Request::DeleteNotify { hosts: vec![host] },
            8 => Request::SuspendNotify { hosts: vec![host] },
            9 => Request::ResumeNotify { hosts: vec![host] },
            10 => Request::ClassSpawn {
                executable: exe(),
                args: vec![],
                target: if rng.random_bool(0.5) {
                    SpawnTarget::Class(class)
                } else {
                    SpawnTarget::Host(host)
                },
                output: Default::default(),
            },
            11 => Request::ProcessInfo { process },
            12 => Request::GetClassDefinitions,
            13 => Request::DefineClass {
                name: class,
                expression: ["true", "Mips > 15", "Mips >", ""][rng.random_range(0..4)].into(),
                rank: None,
                replace: false,
            },
            14 => Request::RemoveClass { name: class },
            15 => Request::ExcludeHosts {
                class,
                hosts: vec![host],
            },
            _ => Request::LookupProcess { process },
        };
        let msg = match rng.random_range(0..14) {
            0 => ToGlobal::Heartbeat {
                update: ["", "LoadAvg = 0.5", "Mips = 99", "= ="][rng.random_range(0..4)].into(),
            },
            1 => ToGlobal::AppAttach {
                conn,
                job: [None, Some(JobId(1)), Some(JobId(rng.random_range(0..5)))]
                    [rng.random_range(0..3)],
                process: [None, Some(process)][rng.random_range(0..2)],
                endpoint: "e:1".into(),
                token: None,
            },
            2 => ToGlobal::AppDetach { conn },
            3 => ToGlobal::Started {
                process,
                result: if rng.random_bool(0.8) {
                    Ok(())
                } else {
                    Err("no".into())
                },
            },
            4 => ToGlobal::Exited {
                process,
                status: ExitStatus::Code(1),
                cpu_seconds: 0.0,
                usage: Default::default(),
            },
            5 => ToGlobal::SlotState {
                slot: rng.random_range(0..3),
                state: [
                    SlotActivity::Available,
                    SlotActivity::Suspended,
                    SlotActivity::Vacated,
                ][rng.random_range(0..3)],
            },
            6 => ToGlobal::Advertise {
                ad: "[ Mips = 12 ]".into(),
                slots: rng.random_range(0..4),
                running: vec![process],
            },
            7 => ToGlobal::Status,
            _ => ToGlobal::Forward { conn, id, body },
        };
        if rng.random_range(0..100) == 0 {
            // A reconnection under the same name.
            let new = LinkId(next_link);
            next_link += 1;
            let role = Role::Local { name: name.into() };
            s.step(|r, now| r.on_link_opened(new, role, now));
            for l in links.iter_mut().filter(|(_, n)| *n == name) {
                l.0 = new;
            }
        }
        s.msg(link, msg);
        if rng.random_range(0..10) == 0 {
            s.step(|r, now| r.on_tick(now));
        }
        s.out.clear();
    }
}

/// What carmi-local does after losing the global RM for a moment: advertise
/// again with what still runs, replay its backlog (`Exited` of processes that
/// ended meanwhile), announce its applications again under their ids, then
/// heartbeat.
#[test]
fn a_reconnecting_local_rm_keeps_its_jobs_and_its_processes_exit_codes() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 3);
    let (job, root, hosts) = s.job_with_hosts(3);
    let ended = s.spawn_on(3, hosts[0], M1);
    let vanished = s.spawn_on(4, hosts[1], M1);
    let alive = s.spawn_on(5, hosts[2], M1);
    // Both connections drop and come back within the heartbeat window.
    s.step(|r, now| r.on_link_closed(M1, now));
    s.step(|r, now| r.on_link_closed(SUB, now));
    s.sleep(500);
    let (m1, sub) = (LinkId(40), LinkId(41));
    for (link, name) in [(m1, "m1"), (sub, "submit")] {
        let role = Role::Local { name: name.into() };
        s.step(|r, now| r.on_link_opened(link, role, now));
    }
    s.msg(
        sub,
        ToGlobal::Advertise {
            ad: "[]".into(),
            slots: 0,
            running: vec![],
        },
    );
    assert!(matches!(s.next_send(sub), FromGlobal::Registered { .. }));
    s.msg(
        sub,
        ToGlobal::AppAttach {
            conn: ROOT_CONN,
            job: Some(job),
            process: Some(root),
            endpoint: "10.0.0.1:4000".into(),
            token: None,
        },
    );
    assert_eq!(
        s.next_send(sub),
        FromGlobal::Attached {
            conn: ROOT_CONN,
            job,
            process: root
        }
    );
    s.msg(
        m1,
        ToGlobal::Advertise {
            ad: "[ Mips = 10 ]".into(),
            slots: 3,
            running: vec![alive],
        },
    );
    assert!(matches!(s.next_send(m1), FromGlobal::Registered { hosts: h, .. } if h == hosts));
    s.quiet();
    // The backlog tells how `ended` ended; `vanished` is explained by nothing.
    s.msg(
        m1,
        ToGlobal::Exited {
            process: ended,
            status: ExitStatus::Code(4),
            cpu_seconds: 2.0,
            usage: Default::default(),
        },
    );
    assert_eq!(
        s.next_event(sub, ROOT_CONN),
        Event::ProcessExited {
            request: RequestId(3),
            process: ended,
            status: ExitStatus::Code(4),
            cpu_seconds: 2.0
        }
    );
    s.msg(
        m1,
        ToGlobal::Heartbeat {
            update: String::new(),
        },
    );
    assert!(matches!(
        s.next_event(sub, ROOT_CONN),
        Event::ProcessExited { process, status: ExitStatus::HostLost, .. } if process == vanished
    ));
    s.quiet();
    assert!(s.r.allocator().has_job(job));
    assert_eq!(s.r.allocator().job_hosts(job), hosts);
    assert!(s.r.processes().find(alive).is_some_and(|p| p.is_live()));
}
