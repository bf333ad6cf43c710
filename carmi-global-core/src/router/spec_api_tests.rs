//! The specification's answers (issue 15, item 5): `process_info` of the
//! whole application, `DefineClass` of a duplicate name, `delhosts`
//! answering with the hosts it freed.

use super::*;

#[test]
fn processes_lists_every_process_of_the_job_with_parent_and_executable() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 3);
    let (_, root, hosts) = s.job_with_hosts(2);
    let a = s.spawn_on(3, hosts[0], M1);
    let b = s.spawn_on(4, hosts[1], M1);
    s.request(5, Request::Processes);
    let Reply::Processes(list) = s.expect_done(5) else {
        panic!("Processes answers with Reply::Processes");
    };
    let worker = |process, host| ProcessInfo {
        process,
        host: Some(host),
        state: ProcessState::Running,
        parent: Some(root),
        executable: Some(exe().name),
    };
    let first = ProcessInfo {
        process: root,
        host: None,
        state: ProcessState::Running,
        parent: None,
        // Started by hand: no submit file names its executable.
        executable: None,
    };
    assert_eq!(list, vec![first, worker(a, hosts[0]), worker(b, hosts[1])]);
    s.quiet();
}

#[test]
fn define_class_of_an_existing_name_fails_unless_asked_to_replace() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 2);
    s.job_with_hosts(1);
    let define = |expression: &str, replace| Request::DefineClass {
        name: "c".into(),
        expression: expression.into(),
        rank: None,
        replace,
    };
    s.request(3, define("Mips > 100", false));
    let why = s.expect_failed(3, FailureCode::ClassExists);
    assert!(
        why.contains("class `c`") && why.contains("replace"),
        "{why}"
    );
    // The class is unchanged: still "Mips > 0".
    s.request(4, Request::GetClassDefinitions);
    assert!(
        matches!(s.expect_done(4), Reply::Classes(c) if c[0].expression == "Mips > 0"),
        "a refused DefineClass changed the class"
    );
    s.request(5, define("Mips > 100", true));
    assert_eq!(s.expect_done(5), Reply::Ok);
    s.request(6, Request::GetClassDefinitions);
    assert!(matches!(s.expect_done(6), Reply::Classes(c) if c[0].expression == "Mips > 100"));
    s.quiet();
}

#[test]
fn define_class_sent_by_an_older_client_reads_as_no_replace() {
    // What a client from before `replace` existed sends.
    let old = r#"{"DefineClass":{"name":"c","expression":"true","rank":null}}"#;
    let req: Request = serde_json::from_str(old).unwrap();
    assert!(matches!(req, Request::DefineClass { replace: false, .. }));
    let old = r#"{"process":3,"host":null,"state":"Running"}"#;
    let info: ProcessInfo = serde_json::from_str(old).unwrap();
    assert_eq!((info.parent, info.executable), (None, None));
}

#[test]
fn delhosts_answers_with_the_hosts_it_freed() {
    let mut s = sim_with_submit_machine();
    s.machine(M1, "m1", 10, 3);
    let (_, _, hosts) = s.job_with_hosts(3);
    let give_back = vec![hosts[2], hosts[0]];
    s.request(
        3,
        Request::DelHosts {
            hosts: give_back.clone(),
        },
    );
    assert_eq!(s.expect_done(3), Reply::HostsRemoved(give_back));
    s.request(4, Request::Config);
    assert!(matches!(s.expect_done(4), Reply::Hosts(h) if h.len() == 1 && h[0].host == hosts[1]));
    s.quiet();
}
