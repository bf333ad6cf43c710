//! Requests of a process whose machine is declared lost and comes back: every
//! answer that fell in between still reaches the process.

use super::*;

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
