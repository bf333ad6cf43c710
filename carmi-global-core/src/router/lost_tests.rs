//! Machines that fall silent or send too much: requests of a process whose
//! machine is declared lost and comes back (every answer that fell in between
//! still reaches the process), and ads and updates over the limits (refused
//! with the limit's name, without costing the machine its place).

use super::*;
use crate::router::{MAX_AD_ATTRIBUTES, MAX_AD_BYTES, count_attributes};

#[test]
fn answers_for_a_process_whose_machine_was_lost_arrive_when_it_returns() {
    let mut s = sim_with_submit_machine();
    let (job, root) = s.root();
    s.request(
        1,
        Request::DefineClass {
            name: "any".into(),
            expression: "true".into(),
            rank: None,
            replace: false,
        },
    );
    s.expect_done(1);
    // Nothing matches yet: the request waits.
    s.request(
        2,
        Request::AddHosts {
            class: "any".into(),
            count: 1,
            increment: 1,
        },
    );
    s.quiet();

    // The submit machine falls silent and is declared lost.
    s.sleep(3500);
    s.step(|r, now| r.on_tick(now));
    s.expect_closed(SUB);
    s.quiet();

    // Meanwhile a machine arrives and the request is granted.
    let hosts = s.machine(M1, "m1", 10, 1);
    s.quiet();

    // The submit machine's local RM comes back and announces its process again.
    let back = LinkId(20);
    s.step(|r, now| {
        r.on_link_opened(
            back,
            Role::Local {
                name: "submit".into(),
            },
            now,
        )
    });
    s.msg(
        back,
        ToGlobal::Advertise {
            ad: "[ Name = \"submit\"; Mips = 1 ]".into(),
            slots: 0,
            running: vec![],
        },
    );
    assert!(matches!(s.next_send(back), FromGlobal::Registered { .. }));
    s.msg(
        back,
        ToGlobal::AppAttach {
            conn: ROOT_CONN,
            job: Some(job),
            process: Some(root),
            endpoint: "10.0.0.1:4000".into(),
            token: None,
        },
    );
    match s.next_send(back) {
        FromGlobal::Attached { process, .. } => assert_eq!(process, root),
        other => panic!("{other:?}"),
    }
    match s.next_event(back, ROOT_CONN) {
        Event::HostsAdded {
            request,
            hosts: got,
            remaining,
        } => {
            assert_eq!(request, RequestId(2));
            assert_eq!(got.iter().map(|h| h.host).collect::<Vec<_>>(), hosts);
            assert_eq!(remaining, 0);
        }
        other => panic!("expected the grant, got {other:?}"),
    }
    s.quiet();
}

/// An old-syntax update of `n` attributes.
fn update_of(n: usize) -> String {
    (0..n).map(|i| format!("Attr{i} = {i}\n")).collect()
}

fn expect_refused(s: &mut Sim, link: LinkId, needle: &str) -> String {
    match s.next_send(link) {
        FromGlobal::AdminFailed(f) => {
            assert_eq!(f.code, FailureCode::Invalid);
            assert!(f.message.contains(needle), "{}", f.message);
            f.message
        }
        other => panic!("expected a refusal naming {needle}, got {other:?}"),
    }
}

#[test]
fn updates_over_the_limits_are_refused_with_the_limit_and_the_machine_stays() {
    let mut s = Sim::new();
    s.machine(M1, "m1", 10, 1);
    // Every heartbeat carries too much; each still proves the machine alive.
    for _ in 0..5 {
        s.sleep(900);
        s.msg(
            M1,
            ToGlobal::Heartbeat {
                update: update_of(MAX_AD_ATTRIBUTES + 1),
            },
        );
        let why = expect_refused(&mut s, M1, "max_ad_attributes");
        assert!(
            why.contains(&format!("{} attributes", MAX_AD_ATTRIBUTES + 1)),
            "{why}"
        );
        s.step(|r, now| r.on_tick(now));
        s.quiet();
    }
    let huge = format!("Blob = \"{}\"\n", "x".repeat(MAX_AD_BYTES));
    s.msg(M1, ToGlobal::Heartbeat { update: huge });
    expect_refused(&mut s, M1, "max_ad_bytes");
    s.msg(
        M1,
        ToGlobal::Heartbeat {
            update: "Mips = ".into(),
        },
    );
    expect_refused(&mut s, M1, "does not parse");
    // A good update still applies.
    s.msg(
        M1,
        ToGlobal::Heartbeat {
            update: "LoadAvg = 0.5\n".into(),
        },
    );
    s.quiet();
    let ads = s.r.allocator().machine_ads();
    assert!(ads[0].1.contains("LoadAvg"), "{ads:?}");
}

#[test]
fn a_machine_ad_over_the_limit_is_refused_and_its_connection_closed() {
    let mut s = Sim::new();
    let role = Role::Local { name: "m1".into() };
    s.step(|r, now| r.on_link_opened(M1, role, now));
    let attrs: String = (0..=MAX_AD_ATTRIBUTES)
        .map(|i| format!("A{i} = {i}; "))
        .collect();
    s.msg(
        M1,
        ToGlobal::Advertise {
            ad: format!("[ {attrs}]"),
            slots: 1,
            running: vec![],
        },
    );
    expect_refused(&mut s, M1, "max_ad_attributes");
    assert!(s.expect_closed(M1).contains("max_ad_attributes"));
    s.quiet();
    assert!(s.r.allocator().machine_ads().is_empty());
}

#[test]
fn attributes_are_counted_without_parsing() {
    assert_eq!(count_attributes("a = 1\n\n# note\n  b = \"x;y\"\n"), 2);
    assert_eq!(
        count_attributes("[ a = 1; b = \"x;\\\"; y\"; c = [ d = 2; e = 3 ] ]"),
        4
    );
    assert_eq!(count_attributes(&update_of(1000)), 1000);
}

#[test]
fn a_late_tick_counts_silence_again_once_and_a_silent_machine_is_lost_a_window_later() {
    let mut s = Sim::new();
    s.machine(M1, "m1", 10, 1);
    s.machine(M2, "m2", 10, 1);
    // The global RM did not run for 10 s (SIGSTOP, swap): both deadlines
    // (3 s) passed long ago, but nobody could have been heard.
    s.sleep(10_000);
    s.step(|r, now| r.on_tick(now));
    s.quiet();
    assert_eq!(s.r.next_deadline(), Some(s.now + Duration::from_secs(3)));
    // m1's heartbeats were waiting in its socket; m2 is really gone.
    s.sleep(100);
    s.msg(
        M1,
        ToGlobal::Heartbeat {
            update: String::new(),
        },
    );
    s.sleep(2_900);
    s.step(|r, now| r.on_tick(now));
    assert!(s.expect_closed(M2).contains("`m2` sent nothing"));
    s.quiet();
    // m1 lives on its own heartbeats from now on: lost 3 s after its last.
    s.sleep(50);
    s.step(|r, now| r.on_tick(now));
    s.quiet();
    s.sleep(50);
    s.step(|r, now| r.on_tick(now));
    assert!(s.expect_closed(M1).contains("`m1` sent nothing"));
}

#[test]
fn a_machine_is_reprieved_only_once_per_silence() {
    let mut s = Sim::new();
    s.machine(M1, "m1", 10, 1);
    s.sleep(10_000);
    s.step(|r, now| r.on_tick(now));
    s.quiet();
    // Late again: a reprieved machine that still said nothing is lost.
    s.sleep(10_000);
    s.step(|r, now| r.on_tick(now));
    assert!(s.expect_closed(M1).contains("sent nothing"));
    s.quiet();
}

#[test]
fn a_machine_that_says_it_leaves_is_lost_at_once_and_its_jobs_hear_it() {
    let mut s = sim_with_submit_machine();
    let hosts = s.machine(M1, "m1", 10, 1);
    let (_, _, held) = s.job_with_hosts(1);
    assert_eq!(held, hosts);
    s.request(
        3,
        Request::DeleteNotify {
            hosts: held.clone(),
        },
    );
    s.expect_done(3);
    let p = s.spawn_on(4, held[0], M1);
    s.sleep(100);
    // Its local RM got SIGTERM: it says so before killing anything.
    s.msg(
        M1,
        ToGlobal::Leaving {
            reason: "its local RM got SIGTERM\n".into(),
        },
    );
    match s.root_event() {
        Event::ProcessExited {
            process, status, ..
        } => assert_eq!((process, status), (p, ExitStatus::HostLost)),
        other => panic!("{other:?}"),
    }
    match s.root_event() {
        Event::HostDeleted { request, host, .. } => {
            assert_eq!((request, host), (RequestId(3), held[0]))
        }
        other => panic!("{other:?}"),
    }
    let reason = s.expect_closed(M1);
    assert!(
        reason.contains("`m1` is leaving (its local RM got SIGTERM )"),
        "{reason}"
    );
    s.quiet();
    assert!(!s.r.allocator().is_online("m1"));
    // The exit of the killed process, arriving after, changes nothing.
    s.msg(
        M1,
        ToGlobal::Exited {
            process: p,
            status: ExitStatus::Signal(15),
            cpu_seconds: 0.0,
            usage: Default::default(),
        },
    );
    s.quiet();
}
